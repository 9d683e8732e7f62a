//! Issue 16, part 1: the series a dashboard or alert needs exist from
//! startup at 0, and `ratekeeper_build_info` says which build runs.

use crate::support;

use support::binary::serve;

fn metrics(addr: &str) -> String {
    let (status, text) = support::raw_http(addr, "GET", "/metrics", "").unwrap();
    assert_eq!(status, 200);
    text
}

/// The value of the series written exactly `series`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.parse().unwrap())
}

/// `git rev-parse --short=12 HEAD` of this checkout, as build.rs records it.
fn revision() -> String {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match out {
        Ok(out) if out.status.success() => String::from_utf8(out.stdout).unwrap().trim().into(),
        _ => "unknown".into(),
    }
}

#[test]
fn series_exist_at_zero_before_their_first_event() {
    let policies = concat!(env!("CARGO_MANIFEST_DIR"), "/config/policies.example.toml");
    let (_child, addr) = serve(&[("RATEKEEPER_POLICIES__FILE", policies)]);
    let text = metrics(&addr);

    let info = format!(
        "ratekeeper_build_info{{revision=\"{}\",version=\"{}\"}}",
        revision(),
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(value(&text, &info), Some(1.0), "{info} in:\n{text}");

    for kind in ["timeout", "unavailable", "auth", "backend"] {
        let series = format!("ratekeeper_store_errors_total{{kind=\"{kind}\"}}");
        assert_eq!(value(&text, &series), Some(0.0), "{series}");
    }
    for op in ["reset", "refund", "settle"] {
        for result in ["ok", "error"] {
            let series = format!("ratekeeper_adjustments_total{{op=\"{op}\",result=\"{result}\"}}");
            assert_eq!(value(&text, &series), Some(0.0), "{series}");
        }
    }

    // Every limit of the example policies, overrides included, by the
    // decisions it can make; a shadow policy's denials are shadow_denied.
    let checks = |policy: &str, limit: &str, algorithm: &str, decision: &str| {
        format!(
            "ratekeeper_checks_total{{algorithm=\"{algorithm}\",decision=\"{decision}\",\
             limit=\"{limit}\",policy=\"{policy}\"}}"
        )
    };
    for (policy, limit, algorithm, denied) in [
        ("api", "burst", "token_bucket", "denied"),
        ("api", "daily", "fixed_window", "denied"),
        ("login", "minute", "sliding_window", "shadow_denied"),
        ("login", "hour", "sliding_window", "shadow_denied"),
        ("export", "hourly", "gcra", "denied"),
    ] {
        for decision in ["allowed", denied] {
            let series = checks(policy, limit, algorithm, decision);
            assert_eq!(value(&text, &series), Some(0.0), "{series} in:\n{text}");
        }
    }
    let enforced = checks("login", "minute", "sliding_window", "denied");
    assert_eq!(
        value(&text, &enforced),
        None,
        "a shadow policy never denies"
    );

    // Counting still starts from those zeros.
    let body = r#"{"policy":"export","key":"k"}"#;
    let (status, _) = support::raw_http(&addr, "POST", "/v1/check", body).unwrap();
    assert_eq!(status, 200);
    let after = metrics(&addr);
    let allowed = checks("export", "hourly", "gcra", "allowed");
    assert_eq!(value(&after, &allowed), Some(1.0), "{allowed}");
}
