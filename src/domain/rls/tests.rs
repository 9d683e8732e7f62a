use super::*;

const YAML: &str = r#"
domain: edge
descriptors:
  - key: client
    rate_limit: { unit: minute, requests_per_unit: 10 }
    descriptors:
      - key: path
        value: /login
        rate_limit: { unit: second, requests_per_unit: 2, name: login }
  - key: client
    value: vip
    rate_limit: { unlimited: true, name: vip, replaces: [{ name: global }] }
  - key: global
    rate_limit: { unit: hour, requests_per_unit: 1000, name: global }
  - key: remote
    shadow_mode: true
    rate_limit: { unit: second, requests_per_unit: 5, algorithm: gcra, burst: 7 }
"#;

fn d(entries: &[(&str, &str)]) -> DescriptorInput {
    DescriptorInput {
        entries: entries
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
        override_limit: None,
        hits_addend: None,
    }
}

fn config() -> RlsConfig {
    let dom = parse_domain(YAML, &Bounds::default()).unwrap();
    RlsConfig {
        domains: [(dom.name.clone(), dom)].into_iter().collect(),
    }
}

fn plan(ds: &[DescriptorInput]) -> Vec<Planned> {
    config().plan("edge", ds, 1, &Bounds::default()).unwrap().1
}

fn name_of(p: &Planned) -> &str {
    match p {
        Planned::Limited { limit, .. } => &limit.name,
        Planned::Unlimited => "unlimited",
        Planned::NoLimit => "none",
        Planned::Refused(_) => "refused",
    }
}

#[test]
fn exact_value_first_then_key_only_and_only_the_last_entry_counts() {
    let got = plan(&[
        d(&[("client", "a")]),
        d(&[("client", "a"), ("path", "/login")]),
        d(&[("client", "a"), ("path", "/other")]),
        d(&[("client", "vip")]),
        d(&[("nope", "x")]),
        d(&[("global", "x"), ("deeper", "y")]),
    ]);
    let names: Vec<&str> = got.iter().map(name_of).collect();
    assert_eq!(
        names,
        ["client", "login", "none", "unlimited", "none", "none"]
    );
}

#[test]
fn replaces_drops_the_named_limit_and_shadow_is_kept() {
    let got = plan(&[
        d(&[("global", "g")]),
        d(&[("client", "vip")]),
        d(&[("remote", "r")]),
    ]);
    assert_eq!(got[0], Planned::NoLimit);
    let Planned::Limited { limit, shadow, .. } = &got[2] else {
        panic!()
    };
    assert!(*shadow);
    assert_eq!(
        (limit.rule.algorithm, limit.rule.burst),
        (Algorithm::Gcra, 7)
    );
}

#[test]
fn scopes_carry_the_values_escaped() {
    let got = plan(&[d(&[("client", "a,b=c")]), d(&[("client", "a%2Cb")])]);
    let scopes: Vec<_> = got
        .iter()
        .map(|p| match p {
            Planned::Limited { limit, .. } => limit.scope.clone().unwrap(),
            _ => panic!(),
        })
        .collect();
    assert_eq!(&*scopes[0], "client=a%2Cb%3Dc");
    assert_ne!(scopes[0], scopes[1]);
}

#[test]
fn bad_requests_and_bad_configs() {
    let c = config();
    let b = Bounds::default();
    assert!(c.plan("", &[], 1, &b).is_err());
    assert!(c.plan("edge", &[d(&[("", "x")])], 1, &b).is_err());
    let many: Vec<(Vec<u8>, Vec<u8>)> = (0..1000)
        .map(|i| (format!("k{i}").into_bytes(), b"v".to_vec()))
        .collect();
    let big = DescriptorInput {
        entries: many,
        override_limit: None,
        hits_addend: None,
    };
    assert!(c.plan("edge", &[big], 1, &b).is_err());
    assert_eq!(
        c.plan("other", &[d(&[("client", "a")])], 1, &b).unwrap().1,
        [Planned::NoLimit]
    );
    for bad in [
        "domain: x\nunknown: 1\n",
        "domain: x\ndescriptors: [{key: a, rate_limit: {unit: fortnight, requests_per_unit: 1}}]\n",
        "domain: x\ndescriptors: [{key: a}, {key: a}]\n",
        "domain: x\ndescriptors: [{key: a, value: 'b*'}]\n",
        "domain: x\ndescriptors: [{key: a, rate_limit: {unlimited: true, unit: second}}]\n",
        "domain: ''\n",
    ] {
        assert!(parse_domain(bad, &b).is_err(), "{bad}");
    }
}

#[test]
fn limit_names_are_bounded_and_distinct() {
    assert_eq!(limit_name("client.path_x"), "client.path_x");
    let a = limit_name(&"A".repeat(100));
    assert!(
        a.len() <= 64
            && a.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.')
    );
    assert_ne!(limit_name("a/b"), limit_name("a b"));
}

#[test]
fn the_shipped_example_parses() {
    let text = include_str!("../../../config/rls.example.yaml");
    let dom = parse_domain(text, &Bounds::default()).unwrap();
    assert_eq!(&*dom.name, "edge");
    assert_eq!(&*dom.policy, "rls.edge");
}

#[test]
fn long_values_are_hashed_and_excess_or_bad_descriptors_refused() {
    let c = config();
    let b = Bounds::default();
    let scope = |v: &str| match &plan(&[d(&[("client", v)])])[0] {
        Planned::Limited { limit, .. } => limit.scope.clone().unwrap().to_string(),
        p => panic!("{p:?}"),
    };
    let (x, y) = (scope(&"x".repeat(600)), scope(&"y".repeat(600)));
    assert!(
        x.starts_with("%sha256-") && x.len() <= b.max_key_bytes,
        "{x}"
    );
    assert_ne!(x, y);
    assert_eq!(scope("a"), "client=a");
    let nine: Vec<_> = (0..9).map(|i| d(&[("client", &i.to_string())])).collect();
    let out = c.plan("edge", &nine, 1, &b).unwrap().1;
    assert!(
        out[..8]
            .iter()
            .all(|p| matches!(p, Planned::Limited { .. }))
    );
    assert!(matches!(out[8], Planned::Refused(_)));
    // The same descriptor again is one counter: it never reaches the bound.
    let same: Vec<_> = (0..20).map(|_| d(&[("client", "a")])).collect();
    let out = c.plan("edge", &same, 1, &b).unwrap().1;
    assert!(out.iter().all(|p| name_of(p) == "client"), "{out:?}");
    // Shadow limits have a bound of their own and, past it, answer OK
    // unevaluated: a shadow trial never refuses, nor takes the enforced
    // limits' places.
    let mut mixed: Vec<_> = (0..10).map(|i| d(&[("remote", &i.to_string())])).collect();
    mixed.extend((0..8).map(|i| d(&[("client", &i.to_string())])));
    let out = c.plan("edge", &mixed, 1, &b).unwrap().1;
    let shadow = |p: &Planned| matches!(p, Planned::Limited { shadow: true, .. });
    assert!(out[..8].iter().all(shadow), "{out:?}");
    assert_eq!(out[8..10], [Planned::NoLimit, Planned::NoLimit]);
    assert!(out[10..].iter().all(|p| name_of(p) == "client"), "{out:?}");
    for o in [(0, Some(Unit::Second)), (5, None)] {
        let mut bad = d(&[("client", "a")]);
        bad.override_limit = Some(o);
        let out = c
            .plan("edge", &[d(&[("client", "b")]), bad], 1, &b)
            .unwrap()
            .1;
        assert_eq!(name_of(&out[0]), "client");
        assert!(matches!(out[1], Planned::Refused(_)), "{o:?}");
    }
}

/// Envoy copies a client's header bytes as they are: a value that is not
/// UTF-8 is matched and counted like any other, under a scope of its own.
#[test]
fn entries_that_are_not_utf8_are_matched_and_scoped_like_any_other() {
    let scope = |v: &[u8]| scope_of(&[(b"k".to_vec(), v.to_vec())]);
    assert_eq!(scope(b"\xff\xfe"), "k=%FF%FE");
    assert_eq!(scope(b"a\xe2\x82b"), "k=a%E2%82b", "a cut-off sequence");
    let scopes = [
        scope(b"\xff\xfe"),
        scope("ÿþ".as_bytes()),
        scope(b"%FF%FE"),
        scope(b"\xff"),
        scope(b"\xfe\xff"),
        scope(b""),
    ];
    for (i, a) in scopes.iter().enumerate() {
        assert!(scopes[i + 1..].iter().all(|b| a != b), "{a} twice");
    }
    let raw = |entries: &[(&[u8], &[u8])]| DescriptorInput {
        entries: entries
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect(),
        override_limit: None,
        hits_addend: None,
    };
    let got = plan(&[
        raw(&[(b"client", b"\xff")]),
        raw(&[(b"client", b"\xff"), (b"path", b"/login")]),
        raw(&[(b"client", b"\xff"), (b"path", b"/login\xff")]),
        raw(&[(b"client\xff", b"a")]),
    ]);
    let names: Vec<&str> = got.iter().map(name_of).collect();
    assert_eq!(names, ["client", "login", "none", "none"]);
    // No entries at all (every `skip_if_absent` header left out): no limit.
    assert_eq!(plan(&[raw(&[])]), [Planned::NoLimit]);
}

/// `descriptors: [[[...]]]` 100 000 deep (200 KB): the parser alone takes
/// over a minute on it (quadratic in the flow depth); the depth scan
/// refuses it before parsing, at its 65th `[`.
#[test]
fn a_hostile_flow_depth_is_refused_before_parsing() {
    let n = 100_000;
    let text = format!(
        "domain: x\ndescriptors: {}{}\n",
        "[".repeat(n),
        "]".repeat(n)
    );
    let started = std::time::Instant::now();
    let err = parse_domain(&text, &Bounds::default()).unwrap_err();
    let took = started.elapsed();
    let want = super::yaml_depth::TooDeep {
        line: 2,
        column: 13 + 65,
    }
    .to_string();
    assert_eq!(err, want);
    // The issue's bound; the scan stops after 100 characters, so the
    // margin over a loaded machine is large.
    assert!(took < std::time::Duration::from_millis(100), "{took:?}");
}

/// A real config well inside the bound still parses, flow style included.
#[test]
fn flow_style_as_deep_as_descriptors_go_still_parses() {
    let mut text = String::from("domain: deep\ndescriptors: ");
    for i in 0..15 {
        text.push_str(&format!(
            "[{{ key: k{i}, rate_limit: {{ unit: hour, requests_per_unit: 1 }}, descriptors: "
        ));
    }
    text.push_str("[]");
    text.push_str(&"}]".repeat(15));
    text.push('\n');
    parse_domain(&text, &Bounds::default()).unwrap();
}
