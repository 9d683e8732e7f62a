//! `/v1/auth/{policy}`: where the key comes from, through real requests
//! (the peer is 127.0.0.1, a trusted proxy in some tests and not in
//! others): key_from sources and templates, forwarding headers from an
//! untrusted peer, the walk of X-Forwarded-For behind a trusted one, and
//! a store outage; a key header's value as any UTF-8 text, and a key
//! header sent twice or not UTF-8 refused.

use crate::forward_auth_support;
use crate::policy_checks;
use crate::support;

use std::time::Duration;

use forward_auth_support::{get, keyed, unique_ip};
use policy_checks::install;
use ratekeeper::domain::FailureMode;
use reqwest::header::HeaderValue;
use support::{TestApp, settings, unique_key};

on_both_stores!(false =>
    key_sources_in_order_and_templates,
    forwarding_headers_from_an_untrusted_peer_are_ignored,
    a_key_header_is_any_utf8_sent_once,
);

on_both_stores!(true =>
    behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client,
);

async fn key_sources_in_order_and_templates(app: &TestApp) {
    let key = unique_key("k");
    let tenant = unique_key("t");
    // Overrides match the final key: each value tagged with its source.
    let templated = format!("{{h:x-tenant={tenant}}}:{{ip:127.0.0.1}}");
    let by_key = format!("h:x-api-key={key}");
    install(
        app,
        vec![
            // The default: X-API-Key, else the peer's address.
            keyed("dflt", 5, &[], &[&by_key, "ip:127.0.0.1"]),
            keyed(
                "tmpl",
                5,
                &["{header:x-tenant}:{ip}", "const:everyone"],
                &[&templated],
            ),
            keyed("net", 5, &["ip_prefix:24,64"], &["net:127.0.0.0/24"]),
        ],
    );
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", &key)])
            .await
            .limit(),
        1000
    );
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", "other")])
            .await
            .limit(),
        5
    );
    // An API key that spells the peer's address is not the peer.
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", "127.0.0.1")])
            .await
            .limit(),
        5
    );
    assert_eq!(get(app, "/v1/auth/dflt", &[]).await.limit(), 1000);
    assert_eq!(
        get(app, "/v1/auth/dflt", &[("x-api-key", "")])
            .await
            .limit(),
        1000
    );
    assert_eq!(
        get(app, "/v1/auth/tmpl", &[("x-tenant", &tenant)])
            .await
            .limit(),
        1000
    );
    // No tenant: the template is absent, the constant answers; one bucket.
    let first = get(app, "/v1/auth/tmpl", &[]).await;
    let second = get(app, "/v1/auth/tmpl", &[("x-other", "1")]).await;
    assert_eq!(
        (first.limit(), second.remaining()),
        (5, first.remaining() - 1)
    );
    assert_eq!(get(app, "/v1/auth/net", &[]).await.limit(), 1000);
}

async fn forwarding_headers_from_an_untrusted_peer_are_ignored(app: &TestApp) {
    install(
        app,
        vec![keyed("ip", 5, &["ip"], &["ip:127.0.0.1", "ip:203.0.113.5"])],
    );
    for forged in [
        &[("x-forwarded-for", "203.0.113.5")][..],
        &[("x-real-ip", "203.0.113.5")],
        &[
            ("x-forwarded-for", "10.9.9.9, 203.0.113.5"),
            ("x-forwarded-for", "203.0.113.6"),
        ],
    ] {
        let a = get(app, "/v1/auth/ip", forged).await;
        assert_eq!(a.limit(), 1000, "keyed by the peer: {forged:?}");
    }
    install(app, vec![keyed("ip", 5, &["ip"], &["ip:203.0.113.5"])]);
    let a = get(app, "/v1/auth/ip", &[("x-forwarded-for", "203.0.113.5")]).await;
    assert_eq!(a.limit(), 5, "a forged header must not reach the override");
}

async fn behind_a_trusted_proxy_the_rightmost_untrusted_hop_is_the_client(app: &TestApp) {
    let a5 = unique_ip();
    let a6 = unique_ip();
    install(
        app,
        vec![keyed(
            "ip",
            5,
            &["ip"],
            &[&format!("ip:{a5}"), "ip:127.0.0.1", "ip:2001:db8::7"],
        )],
    );
    let cases: Vec<(Vec<(&str, String)>, u64)> = vec![
        (vec![("x-forwarded-for", a5.clone())], 1000),
        // The client forged the left part; our proxy appended the right.
        (vec![("x-forwarded-for", format!("{a6}, {a5}"))], 1000),
        (vec![("x-forwarded-for", format!("{a5}, {a6}"))], 5),
        // Several headers are one list, in order; trusted hops are skipped.
        (
            vec![
                ("x-forwarded-for", a6.clone()),
                ("x-forwarded-for", format!("{a5}, 127.0.0.1")),
            ],
            1000,
        ),
        // Garbage: nothing left of it is believed; the peer is the client.
        (vec![("x-forwarded-for", format!("{a5}, not-an-ip"))], 1000),
        (vec![("x-forwarded-for", format!("{a6}, not-an-ip"))], 1000),
        (vec![("x-forwarded-for", "::ffff:127.0.0.1".into())], 1000),
        (vec![("x-forwarded-for", "[2001:db8::7]:443".into())], 1000),
        (vec![("x-forwarded-for", format!("::ffff:{a5}"))], 1000),
        (vec![("x-real-ip", a5.clone())], 1000),
        (vec![("x-real-ip", a6.clone())], 5),
        // Two X-Real-IP: neither is believed (a proxy that appends would
        // put the forged one first); the peer is the client.
        (
            vec![("x-real-ip", a6.clone()), ("x-real-ip", a5.clone())],
            1000,
        ),
    ];
    for (headers, want) in cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let a = get(app, "/v1/auth/ip", &headers).await;
        assert_eq!((a.status, a.limit()), (200, want), "{headers:?}");
    }
}

/// `/v1/auth/{policy}` with `headers` given as raw bytes.
async fn get_raw(app: &TestApp, policy: &str, headers: &[(&str, &[u8])]) -> (u16, String) {
    let mut request = app.http.get(app.url(&format!("/v1/auth/{policy}")));
    for (name, value) in headers {
        request = request.header(*name, HeaderValue::from_bytes(value).unwrap());
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

async fn a_key_header_is_any_utf8_sent_once(app: &TestApp) {
    let key = format!("José-ü-{}", unique_key("k"));
    let by_key = format!("h:x-api-key={key}");
    let mut strict = keyed("strict", 5, &[], &[]);
    strict.forward.missing_key_status = 403;
    // The peer's address is not marked: keyed by it, the limit says 5.
    install(app, vec![keyed("dflt", 5, &[], &[&by_key]), strict]);
    // Non-ASCII UTF-8 is a key like any other (it used to be absent, and
    // the address answered).
    let a = get(app, "/v1/auth/dflt", &[("x-api-key", &key)]).await;
    assert_eq!((a.status, a.limit()), (200, 1000), "{}", a.body);

    // Sent twice: refused with missing_key_status, neither value taken (a
    // proxy that appends its own would let the client's first one win),
    // and not keyed by the address either.
    let twice: &[(&str, &[u8])] = &[("x-api-key", b"forged"), ("x-api-key", key.as_bytes())];
    // The same joined with a comma, as Envoy's ext_authz forwards it.
    let joined = format!("forged,{key}");
    let joined: &[(&str, &[u8])] = &[("x-api-key", joined.as_bytes())];
    for (policy, status, headers) in [
        ("dflt", 401, twice),
        ("strict", 403, twice),
        ("dflt", 401, joined),
    ] {
        let (got, body) = get_raw(app, policy, headers).await;
        assert_eq!(got, status, "{body}");
        let body: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "missing_key");
        assert_eq!(
            body["error"]["message"],
            "no key: the key header x-api-key was sent more than once; \
             it must be sent once, as UTF-8 text"
        );
    }
    // Bytes that are not UTF-8: refused too (the body names the header,
    // never its value).
    let (got, body) = get_raw(app, "dflt", &[("x-api-key", b"\xff\xfe")]).await;
    assert_eq!(got, 401, "{body}");
    assert!(
        body.contains("the key header x-api-key is not UTF-8"),
        "{body}"
    );
}

/// Redis unreachable: each policy's failure mode, marked degraded.
#[tokio::test]
async fn an_outage_answers_by_the_failure_mode_marked_degraded() {
    let nowhere = format!("redis://127.0.0.1:{}", support::free_port());
    let mut config = settings(Some(&nowhere));
    let redis = config.redis.as_mut().unwrap();
    redis.timeout = Duration::from_millis(100);
    redis.probe_interval = Duration::from_millis(50);
    config.failure.mode = FailureMode::Open;
    let app = TestApp::spawn(config).await;
    let mut strict = keyed("strict", 100, &["const:all"], &[]);
    strict.failure_mode = Some(FailureMode::Closed);
    let lax = keyed("lax", 100, &["const:all"], &[]);
    install(&app, vec![strict, lax]);
    let a = get(&app, "/v1/auth/lax", &[]).await;
    assert_eq!(
        (a.status, a.header("ratelimit-degraded")),
        (200, Some("?1")),
        "{}",
        a.body
    );
    let a = get(&app, "/v1/auth/strict", &[]).await;
    assert_eq!(
        (a.status, a.header("ratelimit-degraded")),
        (429, Some("?1")),
        "{}",
        a.body
    );
    assert!(a.header("retry-after").is_some());
    assert_eq!(
        a.json()["type"],
        "https://iana.org/assignments/http-problem-types#quota-exceeded"
    );
}
