//! The client key of an RLS descriptor (its entries, escaped so two
//! descriptors never share one, bounded by a digest), and limit names made
//! from any text.

/// [`scope_of`], or when longer than `max_key_bytes` its SHA-256 (hex)
/// after `%sha256-`: a long header value is limited like any other, with a
/// bounded store key (at most max(max_key_bytes, 72) bytes). `%` followed
/// by `s` never occurs in an escaped scope, so the two forms never meet.
pub fn bounded_scope(entries: &[(Vec<u8>, Vec<u8>)], max_key_bytes: usize) -> String {
    let scope = scope_of(entries);
    if scope.len() <= max_key_bytes {
        return scope;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(scope.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("%sha256-{hex}")
}

/// The descriptor's client key: its entries as `key=value` joined by `,`,
/// with `%`, `=`, `,`, `:`, `{` and `}` percent-escaped so two different
/// descriptors never share a scope and the store key stays parseable.
/// Bytes that are not UTF-8 are percent-escaped too (`%FF`): always 0x80
/// or above, so never one of the escaped ASCII characters, and a `%` sent
/// as such is `%25`. Every byte string has its own scope (`\xff`, `ÿ` and
/// `%FF` three different ones), and the scope stays UTF-8.
pub fn scope_of(entries: &[(Vec<u8>, Vec<u8>)]) -> String {
    let mut out = String::new();
    for (i, (k, v)) in entries.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        escape_into(&mut out, k);
        out.push('=');
        escape_into(&mut out, v);
    }
    out
}

fn escape_into(out: &mut String, bytes: &[u8]) {
    use std::fmt::Write;
    // Writing to a String cannot fail.
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            match c {
                '%' | '=' | ',' | ':' | '{' | '}' => {
                    let _ = write!(out, "%{:02X}", c as u32);
                }
                c => out.push(c),
            }
        }
        // An invalid sequence never holds an ASCII byte (one is valid on
        // its own), so these are all 0x80 or above.
        for b in chunk.invalid() {
            let _ = write!(out, "%{b:02X}");
        }
    }
}

/// A limit name from any text: lowercased, characters outside
/// `[a-z0-9_.-]` become `_`; longer than 64 bytes, or changed, it keeps a
/// prefix and gains 8 hex digits of its SHA-256 so distinct names stay
/// distinct.
pub fn limit_name(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect();
    if clean == text && (1..=64).contains(&clean.len()) {
        return clean;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    let hex: String = digest[..4].iter().map(|b| format!("{b:02x}")).collect();
    let prefix: String = clean.chars().take(55).collect();
    format!("{prefix}.{hex}")
}
