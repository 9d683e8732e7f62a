use super::*;

const CHECK: &str = "chk_0123456789abcdef";
const ADMIN: &str = "adm_0123456789abcdef";

fn set() -> TokenSet {
    TokenSet::parse(&format!(
        "# comment\n\ncheck {CHECK}\n   \n\tadmin\t{ADMIN}  \n"
    ))
    .unwrap()
}

#[test]
fn parses_scopes_comments_and_blank_lines() {
    let set = set();
    assert_eq!(set.len(), 2);
    assert_eq!(set.count(Scope::Check), 1);
    assert_eq!(set.count(Scope::Admin), 1);
    assert_eq!(set.scope_of(CHECK.as_bytes()), Some(Scope::Check));
    assert_eq!(set.scope_of(ADMIN.as_bytes()), Some(Scope::Admin));
}

#[test]
fn unknown_and_near_miss_tokens_have_no_scope() {
    let set = set();
    for wrong in [
        "",
        "chk_0123456789abcde",
        "chk_0123456789abcdeF",
        "chk_0123456789abcdef0",
        "Bearer chk_0123456789abcdef",
    ] {
        assert_eq!(set.scope_of(wrong.as_bytes()), None, "{wrong}");
    }
    assert_eq!(TokenSet::default().scope_of(CHECK.as_bytes()), None);
}

#[test]
fn admin_covers_check_and_not_the_reverse() {
    assert!(Scope::Admin.covers(Scope::Check));
    assert!(Scope::Admin.covers(Scope::Admin));
    assert!(Scope::Check.covers(Scope::Check));
    assert!(!Scope::Check.covers(Scope::Admin));
}

/// Every error names the line and never holds the token's text.
#[test]
fn errors_name_the_line_never_the_token() {
    let secret = "s3cr3t_s3cr3t_s3cr3t";
    let cases = [
        (
            format!("check {CHECK}\nwrite {secret}"),
            "line 2: unknown scope",
        ),
        (format!("check {secret} extra"), "line 1: a token's name"),
        (format!("check a b {secret}"), "line 1: expected"),
        (secret.to_string(), "line 1: expected"),
        (
            "check short_s3cr3t".to_string(),
            "line 1: the token is 12 bytes",
        ),
        (
            format!("\n\nadmin {secret}\"x"),
            "line 3: the token has a character",
        ),
        (
            format!("check {secret}\nadmin {secret}"),
            "line 2: the same token as line 1",
        ),
        ("# nothing\n\n".to_string(), "no tokens"),
        (
            format!("check {secret}\nadmin <admin-token>"),
            "line 2: a placeholder",
        ),
        ("check <a>".to_string(), "line 1: a placeholder"),
    ];
    for (text, expected) in cases {
        let error = TokenSet::parse(&text).unwrap_err().to_string();
        assert!(error.starts_with(expected), "{error:?} for {text:?}");
        assert!(!error.contains("s3cr3t"), "{error:?} echoes the token");
    }
}

#[test]
fn length_bounds() {
    let at = |n: usize| TokenSet::parse(&format!("check {}", "a".repeat(n)));
    assert!(at(MIN_TOKEN_BYTES - 1).is_err());
    assert!(at(MIN_TOKEN_BYTES).is_ok());
    assert!(at(MAX_TOKEN_BYTES).is_ok());
    assert!(at(MAX_TOKEN_BYTES + 1).is_err());
}

#[test]
fn b64token_charset() {
    assert!(is_b64token("abcXYZ019-._~+/=="));
    assert!(!is_b64token("===="));
    assert!(!is_b64token("ab=cd"));
    assert!(!is_b64token("abc,def"));
    assert!(!is_b64token("abcé"));
}

#[test]
fn debug_shows_counts_only() {
    let shown = format!("{:?}", set());
    assert_eq!(shown, "TokenSet { check: 1, admin: 1 }");
}

/// The HTTP header and the gRPC metadata both come through here.
#[test]
fn bearer_credentials_parsing() {
    use Malformed::*;
    let with = |values: &[&'static str]| match presented(values.iter().map(|v| v.as_bytes())) {
        Presented::Token(t) => Ok(t.to_vec()),
        Presented::Nothing => Err(None),
        Presented::Malformed(why) => Err(Some(why)),
    };
    let token = |t: &[u8]| Ok(t.to_vec());
    assert_eq!(with(&["Bearer abc"]), token(b"abc"));
    assert_eq!(with(&["bearer  abc "]), token(b"abc"));
    assert_eq!(with(&["BEARER abc=="]), token(b"abc=="));
    assert_eq!(with(&["Basic dXNlcjpwYXNz"]), Err(None));
    assert_eq!(with(&["Bearerabc"]), Err(None));
    assert_eq!(with(&[]), Err(None));
    for (malformed, why) in [
        (&["Bearer"][..], NoToken),
        (&["Bearer "], NoToken),
        (&["Bearer a b"], NotB64token),
        (&["Bearer a,b"], NotB64token),
        (&["Bearer =abc"], NotB64token),
        (&["Bearer \"abc\""], NotB64token),
        (&["Bearer abc", "Bearer abc"], Several),
        (&["Bearer abc", "Basic dXNlcjpwYXNz"], Several),
    ] {
        assert_eq!(with(malformed), Err(Some(why)), "{malformed:?}");
    }
}

#[test]
fn authorize_by_scope() {
    let set = set();
    let bearer = |t: &str| format!("Bearer {t}");
    let (check, admin) = (bearer(CHECK), bearer(ADMIN));
    let ask = |value: &str, required| set.authorize([value.as_bytes()], required);
    assert_eq!(ask(&check, Scope::Check), Ok(Scope::Check));
    assert_eq!(ask(&admin, Scope::Check), Ok(Scope::Admin));
    assert_eq!(ask(&admin, Scope::Admin), Ok(Scope::Admin));
    assert_eq!(ask(&check, Scope::Admin), Err(Refusal::Scope(Scope::Admin)));
    assert_eq!(
        ask("Bearer chk_0123456789abcdeX", Scope::Check),
        Err(Refusal::Invalid)
    );
    assert_eq!(
        ask("Bearer", Scope::Check),
        Err(Refusal::Malformed(Malformed::NoToken))
    );
    assert_eq!(set.authorize([], Scope::Check), Err(Refusal::Missing));
}

/// Issue 30: `<scope> <name> <token>` names a token for the audit trail;
/// the two-field form stays valid and unnamed.
#[test]
fn a_token_may_carry_a_name_for_the_audit_trail() {
    let alice = "a".repeat(32);
    let bare = "b".repeat(32);
    let set = TokenSet::parse(&format!("admin alice {alice}\ncheck {bare}\n")).unwrap();
    assert_eq!(set.name_of(alice.as_bytes()).as_deref(), Some("alice"));
    assert_eq!(set.scope_of(alice.as_bytes()), Some(Scope::Admin));
    assert_eq!(set.name_of(bare.as_bytes()), None);
    assert_eq!(set.name_of(b"not-a-token-at-all-1234"), None);
    let bad = TokenSet::parse(&format!("admin al\"ice {alice}\n")).unwrap_err();
    assert_eq!(bad, TokenFileError::Name { line: 1 });
    let four = TokenSet::parse(&format!("admin alice x {alice}\n")).unwrap_err();
    assert_eq!(four, TokenFileError::Shape { line: 1 });
    let mail = TokenSet::parse(&format!("admin alice.smith@example.com {alice}\n")).unwrap();
    assert_eq!(
        mail.name_of(alice.as_bytes()).as_deref(),
        Some("alice.smith@example.com")
    );
    // A token where the name goes, with a note after it: refused.
    let swapped = TokenSet::parse(&format!("admin {alice} my-note-about-it\n")).unwrap_err();
    assert_eq!(swapped, TokenFileError::Name { line: 1 });
}
