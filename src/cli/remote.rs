//! The client side of the operator subcommands (`ratekeeper top`, ...): a
//! running instance at `--url`, with a bearer token read from
//! `--token-file`, never from a flag, so it does not show in `ps`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

/// sysexits.h EX_UNAVAILABLE: the instance could not be reached.
pub const EX_UNAVAILABLE: u8 = 69;

/// Where the instance is, and how to authenticate to it.
#[derive(Debug, clap::Args)]
pub struct Remote {
    /// The running instance.
    #[arg(
        long,
        value_name = "URL",
        env = "RATEKEEPER_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// A file holding the bearer token (auth.tokens_file's token, without
    /// its scope, or one `<scope> <token>` line), for an instance with
    /// tokens on: an admin token for reset, policies show and top; check or
    /// admin for check. A file of several tokens is refused. Read, never
    /// echoed.
    #[arg(long, value_name = "FILE", env = "RATEKEEPER_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,
    /// With an `https://` URL: the CA that signed the instance's
    /// certificate (`[server.tls]`). Required for `https://`.
    #[arg(long, value_name = "FILE", env = "RATEKEEPER_CA_FILE")]
    pub ca_file: Option<PathBuf>,
    /// With an `https://` URL to a listener with mTLS
    /// (`server.tls.client_ca_file`): this client's certificate, with
    /// `--key-file`.
    #[arg(
        long,
        value_name = "FILE",
        env = "RATEKEEPER_CLIENT_CERT_FILE",
        requires = "key_file"
    )]
    pub cert_file: Option<PathBuf>,
    /// The key of `--cert-file`. Read, never echoed.
    #[arg(
        long,
        value_name = "FILE",
        env = "RATEKEEPER_CLIENT_KEY_FILE",
        requires = "cert_file"
    )]
    pub key_file: Option<PathBuf>,
    /// How long to wait for an answer.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = duration)]
    pub timeout: Duration,
}

/// Why a call failed, and the exit code that says so.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    #[error("{0}")]
    Usage(String),
    #[error("cannot reach {url}: {why}")]
    Unreachable { url: String, why: String },
    /// The instance answered with an error body.
    #[error("{status}: {code}: {message}{hint}")]
    Refused {
        status: u16,
        code: String,
        message: String,
        hint: &'static str,
    },
}

impl RemoteError {
    pub fn exit_code(&self) -> u8 {
        match self {
            RemoteError::Usage(_) => 64,
            RemoteError::Unreachable { .. } => EX_UNAVAILABLE,
            RemoteError::Refused { .. } => 1,
        }
    }
}

/// A connection to one instance, kept alive across calls.
pub struct Client {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(remote: &Remote) -> Result<Client, RemoteError> {
        let base = remote.url.trim_end_matches('/').to_string();
        let token = remote.token_file.as_deref().map(read_token).transpose()?;
        // No redirect is followed: one to http:// would resend the token in
        // the clear.
        let builder = reqwest::Client::builder()
            .timeout(remote.timeout)
            .redirect(reqwest::redirect::Policy::none());
        let builder = if base.starts_with("https://") {
            builder
                .use_preconfigured_tls(tls_config(remote)?)
                .https_only(true)
        } else if base.starts_with("http://") {
            // TLS material given for a plaintext URL means the operator
            // meant TLS: refuse rather than send the token in the clear.
            if remote.ca_file.is_some() || remote.cert_file.is_some() {
                return Err(RemoteError::Usage(format!(
                    "--url {base} is plaintext, but --ca-file or --cert-file is given: use https://"
                )));
            }
            builder
        } else {
            return Err(RemoteError::Usage(format!(
                "--url {base}: must start with http:// or https://"
            )));
        };
        let http = builder
            .build()
            .map_err(|e| RemoteError::Usage(e.to_string()))?;
        Ok(Client { base, token, http })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET path`, answered with a JSON body.
    pub async fn get(&self, path: &str) -> Result<Value, RemoteError> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    /// `POST path` with a JSON body, answered with a JSON body (a denial is
    /// an answer, `allowed: false`; an error status is an error).
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, RemoteError> {
        let request = self.http.post(format!("{}{path}", self.base)).json(body);
        self.send(request).await
    }

    /// `PUT path` with a JSON body, answered with a JSON body.
    pub async fn put(&self, path: &str, body: &Value) -> Result<Value, RemoteError> {
        let request = self.http.put(format!("{}{path}", self.base)).json(body);
        self.send(request).await
    }

    /// `DELETE path`: `null` for its 204.
    pub async fn delete(&self, path: &str) -> Result<Value, RemoteError> {
        self.send(self.http.delete(format!("{}{path}", self.base)))
            .await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, RemoteError> {
        let request = match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        };
        let unreachable = |e: reqwest::Error| RemoteError::Unreachable {
            url: self.base.clone(),
            why: cause(&e),
        };
        let response = request.send().await.map_err(unreachable)?;
        let status = response.status().as_u16();
        if status == 204 {
            return Ok(Value::Null);
        }
        let body: Value = response.json().await.map_err(unreachable)?;
        if status < 400 {
            return Ok(body);
        }
        let field = |f: &str| body["error"][f].as_str().unwrap_or_default().to_string();
        let hint = match status {
            401 if self.token.is_none() => " (tokens are on: pass --token-file)",
            403 => " (this needs a token of scope admin)",
            _ => "",
        };
        Err(RemoteError::Refused {
            status,
            code: field("code"),
            message: field("message"),
            hint,
        })
    }
}

/// The TLS client for an `https://` URL, from `--ca-file` (and
/// `--cert-file`, `--key-file`).
fn tls_config(remote: &Remote) -> Result<rustls::ClientConfig, RemoteError> {
    let Some(ca) = &remote.ca_file else {
        return Err(RemoteError::Usage(
            "an https:// --url needs --ca-file, the CA that signed the instance's certificate"
                .into(),
        ));
    };
    let pair = remote.cert_file.as_deref().zip(remote.key_file.as_deref());
    crate::tls::client::config(ca, pair).map_err(|e| RemoteError::Usage(e.to_string()))
}

/// The innermost cause: "connection refused", not reqwest's outer "error
/// sending request".
fn cause(error: &reqwest::Error) -> String {
    if error.is_timeout() {
        return "no answer in time (--timeout)".into();
    }
    let mut source: &dyn std::error::Error = error;
    while let Some(next) = source.source() {
        source = next;
    }
    source.to_string()
}

/// The token of a token file: its one non-empty line, trimmed. A scoped
/// line of `auth.tokens_file` (`admin <token>`) is accepted too, but not
/// the whole tokens file: which of its tokens to send would be a guess
/// (its first line is often a `check` token, refused by `reset`).
fn read_token(path: &Path) -> Result<String, RemoteError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| RemoteError::Usage(format!("--token-file {}: {e}", path.display())))?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let token = match lines.as_slice() {
        [line] => line.rsplit(char::is_whitespace).next().unwrap_or(line),
        [] => {
            return Err(RemoteError::Usage(format!(
                "--token-file {}: the file is empty",
                path.display()
            )));
        }
        more => {
            return Err(RemoteError::Usage(format!(
                "--token-file {}: the file holds {} tokens; give a file with the one this \
                 command needs (admin for reset, policies show and top; check or admin for check)",
                path.display(),
                more.len()
            )));
        }
    };
    Ok(token.to_string())
}

/// A duration flag: `2s`, `500ms`, `1m`.
pub fn duration(text: &str) -> Result<Duration, String> {
    crate::domain::parse_duration_us(text).map(Duration::from_micros)
}

/// `text` as one path segment: every byte but RFC 3986's unreserved ones
/// percent-encoded, so a client key with `/`, `?` or spaces stays one
/// segment.
pub fn segment(text: &str) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}
