//! Forward-auth: how a policy names the client of a proxied request. The
//! key comes from `key_from`, a list of sources tried in order (the first
//! present wins); the client address from [`client_ip`]. Pure: the edge
//! hands in headers and addresses, this module picks the key.
//!
//! A header the request holds but that cannot be read as one value (sent
//! twice, or not UTF-8) stops the walk: the request is refused, never
//! keyed by the next source. A proxy that appends its own `X-User` to the
//! client's rather than replacing it sends both, and taking either one,
//! or falling through to the address, would let the client choose the
//! bucket. Refusing also shows the misconfigured proxy at once.

mod net;

pub use net::{IpNet, canonical, client_ip, network_of};

use std::fmt;
use std::net::IpAddr;
use std::sync::Arc;

/// One source of a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// A request header's value (name lowercased): absent when missing or
    /// empty; any UTF-8 text; unreadable (the request is refused) when
    /// sent more than once or not UTF-8.
    Header(String),
    /// The client address.
    Ip,
    /// The client's network: `v4` bits for IPv4 clients, `v6` for IPv6.
    IpPrefix { v4: u8, v6: u8 },
    /// Fixed text: one bucket for everyone.
    Const(String),
    /// The path after `/v1/auth/{policy}` (with its leading `/`); absent
    /// when there is none.
    Path,
}

/// One entry of `key_from`: a source, or a template of sources and text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeySpec {
    Source(Source),
    /// Present only when every source in it is.
    Template(Vec<Part>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Text(String),
    Source(Source),
}

/// What a request holds under one header name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header<'a> {
    Absent,
    /// Sent once, as this text.
    One(&'a str),
    /// Sent more than once.
    Repeated,
    /// Sent once, with bytes that are not UTF-8.
    NotUtf8,
}

/// A header source the request holds but that cannot be read as one
/// value: the request is refused (the policy's `missing_key_status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable {
    /// The header's name, lowercased (never its value).
    pub header: String,
    /// Why: "was sent more than once", "is not UTF-8".
    pub why: &'static str,
}

impl fmt::Display for Unreadable {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "the key header {} {}", self.header, self.why)
    }
}

/// What a request offers for keying.
pub struct RequestView<'a> {
    pub header: &'a dyn Fn(&str) -> Header<'a>,
    pub ip: IpAddr,
    pub path: Option<&'a str>,
}

/// A policy's forward-auth settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardAuth {
    /// As written, for messages.
    pub key_from_text: Arc<[String]>,
    pub key_from: Arc<[KeySpec]>,
    pub deny_status: u16,
    pub missing_key_status: u16,
}

/// Seed 001's rule: the API key, else the client address.
pub const DEFAULT_KEY_FROM: [&str; 2] = ["header:x-api-key", "ip"];

impl Default for ForwardAuth {
    fn default() -> Self {
        let text: Vec<String> = DEFAULT_KEY_FROM.iter().map(|s| s.to_string()).collect();
        let specs = text
            .iter()
            .map(|s| KeySpec::parse(s).expect("valid default"))
            .collect();
        ForwardAuth {
            key_from_text: text.into(),
            key_from: specs,
            deny_status: 429,
            missing_key_status: 401,
        }
    }
}

impl ForwardAuth {
    /// The key of the first present source, `None` when none is, or the
    /// header that stopped the walk (see the module doc).
    pub fn key(&self, request: &RequestView) -> Result<Option<String>, Unreadable> {
        for spec in self.key_from.iter() {
            if let Some(key) = spec.resolve(request)? {
                return Ok(Some(key));
            }
        }
        Ok(None)
    }
}

impl Source {
    /// One source: `header:<name>`, `ip`, `ip_prefix:<bits>`,
    /// `const:<text>` or `path`.
    pub fn parse(s: &str) -> Result<Source, String> {
        let (kind, arg) = s.split_once(':').unwrap_or((s, ""));
        match (kind, s.contains(':')) {
            ("ip", false) => Ok(Source::Ip),
            ("path", false) => Ok(Source::Path),
            ("header", true) if valid_header_name(arg) => {
                Ok(Source::Header(arg.to_ascii_lowercase()))
            }
            ("header", true) => Err(format!("{s:?}: {arg:?} is not a header name")),
            ("const", true) if !arg.is_empty() => Ok(Source::Const(arg.to_string())),
            ("ip_prefix", true) => parse_prefix(arg).ok_or_else(|| {
                format!("{s:?}: expected ip_prefix:<bits> (0-128) or ip_prefix:<v4 bits>,<v6 bits>")
            }),
            _ => Err(format!(
                "{s:?} is not a key source: expected \"header:<name>\", \"ip\", \"ip_prefix:<bits>\", \"const:<text>\", \"path\", or a template such as \"{{header:x-tenant}}:{{ip}}\""
            )),
        }
    }

    /// The source's value as the request holds it, not tagged: what a
    /// hierarchy's `ids_from` takes as an id, the same text a caller of
    /// `/v1/check` would send.
    pub fn value(&self, request: &RequestView) -> Result<Option<String>, Unreadable> {
        let unreadable = |name: &String, why| Unreadable {
            header: name.clone(),
            why,
        };
        Ok(match self {
            Source::Header(name) => match (request.header)(name) {
                Header::Absent => None,
                Header::One(v) => Some(v).filter(|v| !v.is_empty()).map(str::to_string),
                Header::Repeated => return Err(unreadable(name, "was sent more than once")),
                Header::NotUtf8 => return Err(unreadable(name, "is not UTF-8")),
            },
            Source::Ip => Some(canonical(request.ip).to_string()),
            Source::IpPrefix { v4, v6 } => {
                let ip = canonical(request.ip);
                Some(network_of(ip, if ip.is_ipv4() { *v4 } else { *v6 }))
            }
            Source::Const(text) => Some(text.clone()),
            Source::Path => request.path.filter(|p| !p.is_empty()).map(normalize_path),
        })
    }

    /// The value tagged with its source, so that keys from different
    /// sources never meet: `h:<name>=<v>`, `ip:<v>`, `net:<v>`, `c:<v>`,
    /// `path:<v>`. A header name has no `=`, so the tag ends unambiguously;
    /// `{`, `}` and `\` in the value are escaped with `\`, so a tagged
    /// value never holds an unescaped brace (see [`KeySpec::resolve`]).
    fn tagged(&self, request: &RequestView) -> Result<Option<String>, Unreadable> {
        let Some(value) = self.value(request)? else {
            return Ok(None);
        };
        let mut key = match self {
            Source::Header(name) => format!("h:{name}="),
            Source::Ip => "ip:".to_string(),
            Source::IpPrefix { .. } => "net:".to_string(),
            Source::Const(_) => "c:".to_string(),
            Source::Path => "path:".to_string(),
        };
        for c in value.chars() {
            if matches!(c, '{' | '}' | '\\') {
                key.push('\\');
            }
            key.push(c);
        }
        Ok(Some(key))
    }
}

/// `24` (both families, clamped to 32 for IPv4) or `24,64`.
fn parse_prefix(arg: &str) -> Option<Source> {
    let bits = |s: &str, max: u8| s.trim().parse::<u8>().ok().filter(|b| *b <= max);
    match arg.split_once(',') {
        Some((v4, v6)) => Some(Source::IpPrefix {
            v4: bits(v4, 32)?,
            v6: bits(v6, 128)?,
        }),
        None => {
            let b = bits(arg, 128)?;
            Some(Source::IpPrefix {
                v4: b.min(32),
                v6: b,
            })
        }
    }
}

fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

impl KeySpec {
    /// One entry of `key_from`; a `{` makes it a template.
    pub fn parse(s: &str) -> Result<KeySpec, String> {
        if !s.contains(['{', '}']) {
            return Source::parse(s).map(KeySpec::Source);
        }
        let mut parts = Vec::new();
        let mut rest = s;
        while !rest.is_empty() {
            match rest.find(['{', '}']) {
                Some(0) if rest.starts_with('{') => {
                    let end = rest
                        .find('}')
                        .ok_or_else(|| format!("{s:?}: a \"{{\" is not closed"))?;
                    let inner = &rest[1..end];
                    if inner.contains('{') {
                        return Err(format!("{s:?}: templates do not nest"));
                    }
                    parts.push(Part::Source(Source::parse(inner)?));
                    rest = &rest[end + 1..];
                }
                Some(0) => return Err(format!("{s:?}: a \"}}\" without its \"{{\"")),
                Some(i) => {
                    parts.push(Part::Text(rest[..i].to_string()));
                    rest = &rest[i..];
                }
                None => {
                    parts.push(Part::Text(rest.to_string()));
                    rest = "";
                }
            }
        }
        if !parts.iter().any(|p| matches!(p, Part::Source(_))) {
            return Err(format!("{s:?}: a template needs at least one {{source}}"));
        }
        Ok(KeySpec::Template(parts))
    }

    /// The key: a bare source's tagged value; a template's literal text
    /// with each source's tagged value in braces, `{header:x-tenant}:{ip}`
    /// giving `{h:x-tenant=acme}:{ip:1.2.3.4}`. Injective: the literal text
    /// has no braces and a tagged value no unescaped ones, so a key reads
    /// back as one sequence of text and tagged values; a bare source's key
    /// has no unescaped brace, a template's always has one.
    /// An unreadable header in it refuses the request, present or not
    /// the template's other sources.
    fn resolve(&self, request: &RequestView) -> Result<Option<String>, Unreadable> {
        match self {
            KeySpec::Source(source) => source.tagged(request),
            KeySpec::Template(parts) => {
                let mut key = String::new();
                let mut complete = true;
                for part in parts {
                    match part {
                        Part::Text(text) => key.push_str(text),
                        Part::Source(source) => match source.tagged(request)? {
                            Some(value) => {
                                key.push('{');
                                key.push_str(&value);
                                key.push('}');
                            }
                            None => complete = false,
                        },
                    }
                }
                Ok(complete.then_some(key))
            }
        }
    }
}

impl fmt::Display for ForwardAuth {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{:?}", self.key_from_text)
    }
}

#[cfg(test)]
mod tests;

/// The path as the usual upstream serves it: repeated slashes merged and
/// `.` and `..` segments resolved (as nginx does by default, and RFC 3986
/// section 5.2.4 for the dots), so `/a//b`, `/./a/b` and `/a/x/../b` share
/// `/a/b`'s budget rather than each getting a fresh one. A trailing slash
/// is kept (`/a/` may be another resource than `/a`); case is too.
pub fn normalize_path(path: &str) -> String {
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            s => segments.push(s),
        }
    }
    let mut out = String::with_capacity(path.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    let trailing = path.ends_with('/') || path.ends_with("/.") || path.ends_with("/..");
    if out.is_empty() || trailing {
        out.push('/');
    }
    out
}
