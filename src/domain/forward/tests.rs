use std::collections::HashMap;
use std::net::IpAddr;

use super::*;

fn auth(specs: &[&str]) -> ForwardAuth {
    ForwardAuth {
        key_from_text: specs.iter().map(|s| s.to_string()).collect(),
        key_from: specs.iter().map(|s| KeySpec::parse(s).unwrap()).collect(),
        ..ForwardAuth::default()
    }
}

fn key_of(
    auth: &ForwardAuth,
    headers: &[(&str, &str)],
    ip: &str,
    path: Option<&str>,
) -> Option<String> {
    let map: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let header = |name: &str| map.get(name).map(String::as_str);
    let view = RequestView {
        header: &header,
        ip: ip.parse::<IpAddr>().unwrap(),
        path,
    };
    auth.key(&view)
}

#[test]
fn the_default_is_the_api_key_else_the_ip() {
    let d = ForwardAuth::default();
    assert_eq!(d.deny_status, 429);
    assert_eq!(d.missing_key_status, 401);
    assert_eq!(
        key_of(&d, &[("x-api-key", "k1")], "1.2.3.4", None).as_deref(),
        Some("k1")
    );
    assert_eq!(key_of(&d, &[], "1.2.3.4", None).as_deref(), Some("1.2.3.4"));
    // An empty header is absent.
    assert_eq!(
        key_of(&d, &[("x-api-key", "")], "::ffff:1.2.3.4", None).as_deref(),
        Some("::ffff:1.2.3.4")
    );
}

#[test]
fn sources_in_order_first_present_wins() {
    let a = auth(&["header:X-Tenant", "header:x-user", "const:anonymous"]);
    assert_eq!(
        key_of(&a, &[("x-user", "u"), ("x-tenant", "t")], "1.2.3.4", None).as_deref(),
        Some("t")
    );
    assert_eq!(
        key_of(&a, &[("x-user", "u")], "1.2.3.4", None).as_deref(),
        Some("u")
    );
    assert_eq!(
        key_of(&a, &[], "1.2.3.4", None).as_deref(),
        Some("anonymous")
    );
    let only = auth(&["header:x-api-key"]);
    assert_eq!(key_of(&only, &[], "1.2.3.4", None), None);
}

#[test]
fn ip_prefixes_group_networks() {
    let a = auth(&["ip_prefix:24,64"]);
    assert_eq!(
        key_of(&a, &[], "203.0.113.77", None).as_deref(),
        Some("203.0.113.0/24")
    );
    assert_eq!(
        key_of(&a, &[], "::ffff:203.0.113.77", None).as_deref(),
        Some("203.0.113.0/24")
    );
    assert_eq!(
        key_of(&a, &[], "2001:db8:1:2:3::9", None).as_deref(),
        Some("2001:db8:1:2::/64")
    );
    let one = auth(&["ip_prefix:48"]);
    assert_eq!(
        key_of(&one, &[], "203.0.113.77", None).as_deref(),
        Some("203.0.113.77/32")
    );
    assert_eq!(
        key_of(&one, &[], "2001:db8:1:2::9", None).as_deref(),
        Some("2001:db8:1::/48")
    );
}

#[test]
fn templates_need_every_source() {
    let a = auth(&["{header:x-tenant}:{ip}", "anon:{ip_prefix:16}", "{path}"]);
    assert_eq!(
        key_of(&a, &[("x-tenant", "acme")], "1.2.3.4", None).as_deref(),
        Some("acme:1.2.3.4")
    );
    assert_eq!(
        key_of(&a, &[], "1.2.3.4", None).as_deref(),
        Some("anon:1.2.0.0/16")
    );
    let p = auth(&["{const:svc}{path}"]);
    assert_eq!(
        key_of(&p, &[], "1.2.3.4", Some("/orders/1")).as_deref(),
        Some("svc/orders/1")
    );
    assert_eq!(key_of(&p, &[], "1.2.3.4", None), None);
}

#[test]
fn bad_specs_say_why() {
    for (bad, says) in [
        ("header:", "not a header name"),
        ("header:a b", "not a header name"),
        ("const:", "not a key source"),
        ("ip:4", "not a key source"),
        ("ip_prefix:129", "ip_prefix"),
        ("ip_prefix:33,64", "ip_prefix"),
        ("ip_prefix:", "ip_prefix"),
        ("cookie:x", "not a key source"),
        ("", "not a key source"),
        ("{ip", "not closed"),
        ("ip}", "without"),
        ("{{ip}}", "nest"),
        ("{nope}", "not a key source"),
    ] {
        let err = KeySpec::parse(bad).unwrap_err();
        assert!(err.contains(says), "{bad}: {err}");
    }
}
