//! Who called an admin endpoint: set by the bearer middleware
//! (`bearer.rs`) as a request extension, read by the handlers that audit.

/// Who called an admin endpoint, as the audit trail names them.
#[derive(Debug, Clone)]
pub enum Caller {
    /// An admin token, and its name when the tokens file gives one.
    Token(Option<std::sync::Arc<str>>),
}

impl Caller {
    /// The audit trail's `token`: the token's name, `unnamed` for a token
    /// without one, `anonymous` without auth (no tokens file).
    pub fn name(caller: Option<&Caller>) -> String {
        match caller {
            Some(Caller::Token(Some(name))) => name.to_string(),
            Some(Caller::Token(None)) => "unnamed".into(),
            None => "anonymous".into(),
        }
    }
}
