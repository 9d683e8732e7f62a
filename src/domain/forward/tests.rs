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
    let header = |name: &str| map.get(name).map_or(Header::Absent, |v| Header::One(v));
    let view = RequestView {
        header: &header,
        ip: ip.parse::<IpAddr>().unwrap(),
        path,
    };
    auth.key(&view).unwrap()
}

/// The key, or the refusal, when header `name` reads as `read`.
fn key_with(
    auth: &ForwardAuth,
    name: &str,
    read: Header<'static>,
) -> Result<Option<String>, String> {
    let name = name.to_string();
    let header = move |n: &str| if n == name { read } else { Header::Absent };
    let view = RequestView {
        header: &header,
        ip: "1.2.3.4".parse().unwrap(),
        path: None,
    };
    auth.key(&view).map_err(|e| e.to_string())
}

#[test]
fn any_utf8_value_counts_and_an_unreadable_header_refuses() {
    let d = ForwardAuth::default();
    assert_eq!(
        key_with(&d, "x-api-key", Header::One("clé-ü")),
        Ok(Some("h:x-api-key=clé-ü".into()))
    );
    // Refused, not keyed by the address (the next source).
    assert_eq!(
        key_with(&d, "x-api-key", Header::Repeated),
        Err("the key header x-api-key was sent more than once".into())
    );
    assert_eq!(
        key_with(&d, "x-api-key", Header::NotUtf8),
        Err("the key header x-api-key is not UTF-8".into())
    );
    // In a template too, whatever its other sources hold.
    let t = auth(&["{header:x-tenant}:{header:x-user}", "ip"]);
    assert_eq!(
        key_with(&t, "x-user", Header::Repeated),
        Err("the key header x-user was sent more than once".into())
    );
    // Only the walk's own sources matter: a present earlier one wins.
    let a = auth(&["ip", "header:x-api-key"]);
    assert_eq!(
        key_with(&a, "x-api-key", Header::Repeated),
        Ok(Some("ip:1.2.3.4".into()))
    );
}

#[test]
fn the_default_is_the_api_key_else_the_ip() {
    let d = ForwardAuth::default();
    assert_eq!(d.deny_status, 429);
    assert_eq!(d.missing_key_status, 401);
    assert_eq!(
        key_of(&d, &[("x-api-key", "k1")], "1.2.3.4", None).as_deref(),
        Some("h:x-api-key=k1")
    );
    assert_eq!(
        key_of(&d, &[], "1.2.3.4", None).as_deref(),
        Some("ip:1.2.3.4")
    );
    // An empty header is absent.
    assert_eq!(
        key_of(&d, &[("x-api-key", "")], "::ffff:1.2.3.4", None).as_deref(),
        Some("ip:1.2.3.4")
    );
}

#[test]
fn sources_in_order_first_present_wins() {
    let a = auth(&["header:X-Tenant", "header:x-user", "const:anonymous"]);
    assert_eq!(
        key_of(&a, &[("x-user", "u"), ("x-tenant", "t")], "1.2.3.4", None).as_deref(),
        Some("h:x-tenant=t")
    );
    assert_eq!(
        key_of(&a, &[("x-user", "u")], "1.2.3.4", None).as_deref(),
        Some("h:x-user=u")
    );
    assert_eq!(
        key_of(&a, &[], "1.2.3.4", None).as_deref(),
        Some("c:anonymous")
    );
    let only = auth(&["header:x-api-key"]);
    assert_eq!(key_of(&only, &[], "1.2.3.4", None), None);
}

#[test]
fn ip_prefixes_group_networks() {
    let a = auth(&["ip_prefix:24,64"]);
    assert_eq!(
        key_of(&a, &[], "203.0.113.77", None).as_deref(),
        Some("net:203.0.113.0/24")
    );
    assert_eq!(
        key_of(&a, &[], "::ffff:203.0.113.77", None).as_deref(),
        Some("net:203.0.113.0/24")
    );
    assert_eq!(
        key_of(&a, &[], "2001:db8:1:2:3::9", None).as_deref(),
        Some("net:2001:db8:1:2::/64")
    );
    let one = auth(&["ip_prefix:48"]);
    assert_eq!(
        key_of(&one, &[], "203.0.113.77", None).as_deref(),
        Some("net:203.0.113.77/32")
    );
    assert_eq!(
        key_of(&one, &[], "2001:db8:1:2::9", None).as_deref(),
        Some("net:2001:db8:1::/48")
    );
}

#[test]
fn templates_need_every_source() {
    let a = auth(&["{header:x-tenant}:{ip}", "anon:{ip_prefix:16}", "{path}"]);
    assert_eq!(
        key_of(&a, &[("x-tenant", "acme")], "1.2.3.4", None).as_deref(),
        Some("{h:x-tenant=acme}:{ip:1.2.3.4}")
    );
    assert_eq!(
        key_of(&a, &[], "1.2.3.4", None).as_deref(),
        Some("anon:{net:1.2.0.0/16}")
    );
    let p = auth(&["{const:svc}{path}"]);
    assert_eq!(
        key_of(&p, &[], "1.2.3.4", Some("/orders/1")).as_deref(),
        Some("{c:svc}{path:/orders/1}")
    );
    assert_eq!(key_of(&p, &[], "1.2.3.4", None), None);
}

#[test]
fn keys_from_different_sources_never_meet() {
    let d = ForwardAuth::default();
    // An API key that looks like an address is not that address's bucket.
    let by_key = key_of(&d, &[("x-api-key", "198.51.100.7")], "10.0.0.1", None);
    let by_ip = key_of(&d, &[], "198.51.100.7", None);
    assert_ne!(by_key, by_ip);
    let a = auth(&["header:x-api-key", "const:anonymous"]);
    assert_ne!(
        key_of(&a, &[("x-api-key", "anonymous")], "1.2.3.4", None),
        key_of(&a, &[], "1.2.3.4", None)
    );
    // Two headers with the same value differ by name.
    let two = auth(&["header:a", "header:b"]);
    assert_ne!(
        key_of(&two, &[("a", "v")], "1.2.3.4", None),
        key_of(&two, &[("b", "v")], "1.2.3.4", None)
    );
}

#[test]
fn template_values_are_escaped_so_keys_are_injective() {
    let t = auth(&["{header:a}:{header:b}"]);
    // Without escaping, a="x}:{h:b=y" b="z" and a="x" b="y}:{h:b=z" ... meet.
    let one = key_of(&t, &[("a", "x}:{h:b=y"), ("b", "z")], "1.2.3.4", None);
    let two = key_of(&t, &[("a", "x"), ("b", "y}:{h:b=z")], "1.2.3.4", None);
    assert_ne!(one, two);
    assert_eq!(one.as_deref(), Some(r"{h:a=x\}:\{h:b=y}:{h:b=z}"));
    // A bare key never has an unescaped brace, a template's always does.
    let bare = auth(&["header:a"]);
    assert_eq!(
        key_of(&bare, &[("a", r"{ip:1.2.3.4}\")], "1.2.3.4", None).as_deref(),
        Some(r"h:a=\{ip:1.2.3.4\}\\")
    );
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

#[test]
fn paths_are_normalized_as_upstreams_serve_them() {
    for (sent, key) in [
        ("/orders/1", "/orders/1"),
        ("/orders//1", "/orders/1"),
        ("//orders/1", "/orders/1"),
        ("/./orders/1", "/orders/1"),
        ("/orders/x/../1", "/orders/1"),
        ("/../orders/1", "/orders/1"),
        ("/orders/1/", "/orders/1/"),
        ("/orders/1/.", "/orders/1/"),
        ("/ORDERS/1", "/ORDERS/1"),
        ("/", "/"),
        ("/..", "/"),
    ] {
        assert_eq!(super::normalize_path(sent), key, "{sent}");
    }
}
