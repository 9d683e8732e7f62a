//! Forward-auth helpers: the cost header, the client address behind trusted proxies.

use super::*;

fn cost_of(values: &[&str]) -> Result<Option<u64>, String> {
    let mut headers = HeaderMap::new();
    for v in values {
        headers.append(COST_HEADER, HeaderValue::from_str(v).unwrap());
    }
    cost(&headers).map_err(|e| e.to_string())
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn a_mapped_peer_is_its_ipv4_address_with_or_without_trusted_proxies() {
    let headers = HeaderMap::new();
    let peer = ip("::ffff:203.0.113.7");
    assert_eq!(
        client_behind(peer, &[], &headers),
        (ip("203.0.113.7"), false)
    );
    let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    assert_eq!(
        client_behind(peer, &trusted, &headers),
        (ip("203.0.113.7"), false)
    );
    let proxy = ip("::ffff:10.0.0.1");
    assert_eq!(
        client_behind(proxy, &trusted, &headers),
        (ip("10.0.0.1"), true)
    );
}

#[test]
fn an_unreadable_forwarded_hop_hides_only_itself() {
    let trusted: Vec<IpNet> = vec!["10.0.0.0/8".parse().unwrap()];
    let mut headers = HeaderMap::new();
    let raw = HeaderValue::from_bytes(b"198.51.100.1, \xff\xfe, 203.0.113.9, 10.0.0.2").unwrap();
    headers.append("x-forwarded-for", raw);
    assert_eq!(forwarded_hops(&headers).len(), 4);
    // The readable hop right of the bad one is still the client.
    assert_eq!(
        client_behind(ip("10.0.0.1"), &trusted, &headers),
        (ip("203.0.113.9"), true)
    );
    // Left of a trusted hop only, the bad hop stops the walk there.
    let mut headers = HeaderMap::new();
    let raw = HeaderValue::from_bytes(b"198.51.100.1, \xff, 10.0.0.2").unwrap();
    headers.append("x-forwarded-for", raw);
    assert_eq!(
        client_behind(ip("10.0.0.1"), &trusted, &headers),
        (ip("10.0.0.2"), true)
    );
}

#[test]
fn the_cost_header_is_one_whole_number() {
    assert_eq!(cost_of(&[]), Ok(None));
    assert_eq!(cost_of(&["3"]), Ok(Some(3)));
    assert_eq!(cost_of(&[" 2 "]), Ok(Some(2)));
    for bad in [
        &["0"][..],
        &["00"],
        &["-1"],
        &["1.5"],
        &[""],
        &["+2"],
        &["1e3"],
        &["99999999999999999999999"],
        &["1", "2"],
    ] {
        let err = cost_of(bad).unwrap_err();
        assert!(
            err.starts_with("X-RateLimit-Cost: must be"),
            "{bad:?}: {err}"
        );
    }
}
