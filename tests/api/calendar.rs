//! Calendar quotas over HTTP on both stores: the three forms take
//! `calendar` and `timezone`, the answers run to the period's end on the
//! wall clock, `GET /v1/policies` shows them, and every misuse is a 422
//! naming the field (an unknown zone by its name). The periods themselves
//! (DST days, months, ISO weeks) are tested on a controlled clock in
//! tests/stores/calendar.rs.

use crate::support;

use std::time::Duration;

use jiff::{Timestamp, ToSpan, tz::TimeZone};
use serde_json::{Value, json};
use support::{TestApp, settings, unique_key};

for_each_store!(app:
    a_daily_quota_runs_to_the_next_local_midnight,
    inline_limits_mix_calendar_and_window,
);

/// Milliseconds from now to the next midnight in `zone`.
fn ms_to_midnight(zone: &str) -> i64 {
    let now = Timestamp::now().to_zoned_datetime(TimeZone::get(zone).unwrap());
    let midnight = now
        .date()
        .checked_add(1.day())
        .unwrap()
        .to_zoned_datetime(now.time_zone().clone())
        .unwrap();
    (midnight.timestamp().as_millisecond()) - now.timestamp().as_millisecond()
}

fn near(got: &Value, want: i64) {
    let got = got.as_i64().unwrap_or(i64::MIN);
    assert!(
        (want - 5_000..=want + 5_000).contains(&got),
        "{got} ms, expected about {want}"
    );
}

async fn a_daily_quota_runs_to_the_next_local_midnight(app: &TestApp) {
    for zone in ["UTC", "Asia/Kathmandu", "America/St_Johns"] {
        let body =
            json!({"key": unique_key("cal"), "limit": 2, "calendar": "day", "timezone": zone});
        let (status, first) = app.check(body.clone()).await;
        assert_eq!(status, 200, "{first}");
        assert_eq!(
            (first["allowed"].as_bool(), first["remaining"].as_u64()),
            (Some(true), Some(1))
        );
        near(&first["reset_after_ms"], ms_to_midnight(zone));
        app.check(body.clone()).await;
        let (_, denied) = app.check(body).await;
        assert_eq!(denied["allowed"], false, "{denied}");
        near(&denied["retry_after_ms"], ms_to_midnight(zone));
    }
}

async fn inline_limits_mix_calendar_and_window(app: &TestApp) {
    let key = unique_key("cal");
    // A day, not a second: the second check reports this limit's count,
    // and a (sliding) window's end is epoch-aligned: a second's fell
    // between the two checks now and then.
    let body = json!({"key": key, "limits": [
        {"name": "daily", "limit": 5, "window": "1d"},
        {"name": "monthly", "limit": 1, "calendar": "month", "timezone": "europe/berlin"},
    ]});
    let (status, first) = app.check(body.clone()).await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["allowed"], true);
    let monthly = &first["limits"][1];
    assert_eq!(
        monthly["algorithm"], "fixed_window",
        "the calendar's default"
    );
    assert_eq!(
        monthly["window_ms"],
        30 * 86_400_000_u64,
        "a month's usual length"
    );
    let (_, second) = app.check(body).await;
    assert_eq!(
        (
            second["allowed"].as_bool(),
            second["limits"][1]["allowed"].as_bool()
        ),
        (Some(false), Some(false))
    );
    assert_eq!(
        second["limits"][0]["remaining"], 4,
        "the denial spent nothing: {second}"
    );
}

/// The 422 of `body`: its code and message.
async fn refused(app: &TestApp, body: Value) -> String {
    let (status, answer) = app.check(body).await;
    assert_eq!(status, 422, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_request", "{answer}");
    answer["error"]["message"].as_str().unwrap().to_string()
}

#[tokio::test]
async fn misuse_is_a_422_naming_the_field() {
    let app = TestApp::spawn(settings(None)).await;
    let message = refused(
        &app,
        json!({"key": "k", "limit": 1, "calendar": "day", "timezone": "Mars/Olympus_Mons"}),
    )
    .await;
    assert!(
        message.starts_with("timezone:") && message.contains("\"Mars/Olympus_Mons\""),
        "{message}"
    );
    let message = refused(
        &app,
        json!({"key": "k", "limit": 1, "calendar": "day", "window": "1d"}),
    )
    .await;
    assert!(message.contains("mutually exclusive"), "{message}");
    let message = refused(&app, json!({"key": "k", "limit": 1})).await;
    assert!(message.starts_with("window:"), "{message}");
    let message = refused(
        &app,
        json!({"key": "k", "limit": 1, "calendar": "day", "algorithm": "gcra"}),
    )
    .await;
    assert!(message.contains("fixed_window"), "{message}");
    let message = refused(
        &app,
        json!({"key": "k", "limit": 1, "window": "1m", "timezone": "UTC"}),
    )
    .await;
    assert!(message.starts_with("timezone:"), "{message}");
    let message = refused(
        &app,
        json!({"key": "k", "limit": 1, "calendar": "fortnight"}),
    )
    .await;
    assert!(message.contains("calendar"), "{message}");
    let message = refused(
        &app,
        json!({"key": "k", "limits": [{"limit": 1, "calendar": "week", "timezone": "Nowhere/Land"}]}),
    )
    .await;
    assert!(
        message.starts_with("limits[0].timezone:") && message.contains("Nowhere/Land"),
        "{message}"
    );
    // It still serves.
    let (status, _) = app
        .check(json!({"key": "k", "limit": 1, "calendar": "year"}))
        .await;
    assert_eq!(status, 200);
    app.stop().await;
}

#[tokio::test]
async fn a_policy_counts_per_calendar_period_and_shows_it() {
    let path = support::fresh_dir("calendar").join("policies.toml");
    std::fs::write(
        &path,
        r#"[policies.tenant]
limits = [
  { name = "second", limit = 10, window = "1s" },
  { name = "monthly", calendar = "month", timezone = "America/New_York", limit = 2 },
]
"#,
    )
    .unwrap();
    let mut config = settings(None);
    config.policies.file = Some(path.clone());
    config.policies.poll_interval = Duration::from_secs(3600);
    let app = TestApp::spawn(config).await;

    let shown: Value = app.get("/v1/policies").await.json().await.unwrap();
    let monthly = &shown["policies"][0]["limits"][1];
    assert_eq!(
        (
            monthly["calendar"].as_str(),
            monthly["timezone"].as_str(),
            monthly["algorithm"].as_str()
        ),
        (
            Some("month"),
            Some("America/New_York"),
            Some("fixed_window")
        ),
        "{shown}"
    );
    assert!(shown["policies"][0]["limits"][0].get("calendar").is_none());

    let body = json!({"policy": "tenant", "key": unique_key("t")});
    for _ in 0..2 {
        assert_eq!(app.check(body.clone()).await.1["allowed"], true);
    }
    let (_, denied) = app.check(body).await;
    assert_eq!(denied["allowed"], false);
    let now = Timestamp::now().to_zoned_datetime(TimeZone::get("America/New_York").unwrap());
    let next_month = now
        .date()
        .first_of_month()
        .checked_add(1.month())
        .unwrap()
        .to_zoned_datetime(now.time_zone().clone())
        .unwrap();
    near(
        &denied["retry_after_ms"],
        next_month.timestamp().as_millisecond() - now.timestamp().as_millisecond(),
    );
    app.stop().await;
}

#[test]
fn a_policies_file_with_an_unknown_zone_names_it_and_its_line() {
    let bounds = ratekeeper::domain::Bounds::default();
    let text = "[policies.p]\nlimits = [{ name = \"d\", calendar = \"day\", timezone = \"Europe/Atlantis\", limit = 1 }]\n";
    let error = ratekeeper::domain::PolicySet::parse(text, &bounds, None).unwrap_err();
    let shown = error.to_string();
    assert!(
        shown.contains("policies.p.limits[0].timezone")
            && shown.contains("Europe/Atlantis")
            && shown.contains("line 2"),
        "{shown}"
    );
}
