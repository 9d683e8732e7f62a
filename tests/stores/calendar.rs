//! Calendar windows through every store on a controlled clock: a count
//! lasts exactly to the period's end in its time zone (DST days, months of
//! every length, ISO weeks across New Year, :30 and :45 offsets), the
//! answers' `reset_after` and `retry_after` are exact to that end, and a
//! reset clears the current period. On Redis the script places Redis's own
//! clock among the periods the instance sends (`by_redis_time`).

use crate::support;
use crate::support::StoreExt;

use std::sync::Arc;

use jiff::Timestamp;
use ratekeeper::domain::{Check, CheckInput, ManualClock, Outcome, RuleInput};
use ratekeeper::store::Store;
use support::{RedisServer, unique_key};

for_each_store!(
    a_count_lasts_to_the_end_of_the_local_day_across_dst,
    months_of_every_length_end_on_the_first,
    an_iso_week_runs_monday_to_monday_across_new_year,
    offsets_of_half_and_three_quarter_hours,
    a_reset_clears_the_current_period,
);

const SEC: u64 = 1_000_000;
const HOUR: u64 = 3_600 * SEC;

fn at(text: &str) -> u64 {
    let ts: Timestamp = text.parse().expect(text);
    u64::try_from(ts.as_microsecond()).unwrap()
}

/// `limit` per `unit` in `zone`, as a request would give it.
fn calendar_check(key: &str, limit: u64, unit: &str, zone: &str) -> Check {
    Check::new(
        CheckInput {
            key: key.into(),
            rule: RuleInput {
                limit,
                calendar: Some(unit.into()),
                timezone: Some(zone.into()),
                ..Default::default()
            },
            cost: Some(1),
        },
        &Default::default(),
    )
    .expect("a valid calendar check")
}

async fn check(store: &dyn Store, check: &Check) -> Outcome {
    store.check(check).await.unwrap()[0]
}

/// Spends `limit` at `start`, then: denied 1 µs before `end` with
/// `retry_after` and `reset_after` exactly to it, and allowed again at it.
async fn assert_period_ends_at(
    store: &dyn Store,
    clock: &ManualClock,
    c: &Check,
    start: u64,
    end: u64,
) {
    clock.set_us(start);
    let mut last = None;
    for _ in 0..c.rule().limit {
        let o = check(store, c).await;
        assert!(o.allowed, "{o:?}");
        last = Some(o);
    }
    assert_eq!(
        last.unwrap().reset_after_us,
        end - start,
        "reset_after at {start}"
    );
    clock.set_us(end - 1);
    let denied = check(store, c).await;
    assert!(!denied.allowed, "still the same period 1 µs before its end");
    assert_eq!((denied.retry_after_us, denied.reset_after_us), (1, 1));
    clock.set_us(end);
    let next = check(store, c).await;
    assert!(next.allowed, "a new period at {end}");
    assert_eq!(next.remaining, c.rule().limit - 1);
}

async fn a_count_lasts_to_the_end_of_the_local_day_across_dst(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    // Berlin, 29 March 2026: 23 hours, from 23:00 UTC the day before.
    let c = calendar_check(&unique_key("cal"), 2, "day", "Europe/Berlin");
    let (start, end) = (at("2026-03-28T23:00:00Z"), at("2026-03-29T22:00:00Z"));
    assert_eq!(end - start, 23 * HOUR);
    assert_period_ends_at(&*store, &clock, &c, start + 3 * HOUR, end).await;
    // New York, 1 November 2026: 25 hours.
    let c = calendar_check(&unique_key("cal"), 3, "day", "America/New_York");
    let (start, end) = (at("2026-11-01T04:00:00Z"), at("2026-11-02T05:00:00Z"));
    assert_eq!(end - start, 25 * HOUR);
    assert_period_ends_at(&*store, &clock, &c, start + HOUR, end).await;
}

async fn months_of_every_length_end_on_the_first(store: Arc<dyn Store>, clock: ManualClock) {
    for (now, end) in [
        ("2026-02-01T00:00:00Z", "2026-03-01T00:00:00Z"), // 28 days
        ("2028-02-10T00:00:00Z", "2028-03-01T00:00:00Z"), // 29
        ("2026-04-30T23:00:00Z", "2026-05-01T00:00:00Z"), // 30
        ("2026-07-15T12:00:00Z", "2026-08-01T00:00:00Z"), // 31
    ] {
        let c = calendar_check(&unique_key("cal"), 1, "month", "UTC");
        assert_period_ends_at(&*store, &clock, &c, at(now), at(end)).await;
    }
}

async fn an_iso_week_runs_monday_to_monday_across_new_year(
    store: Arc<dyn Store>,
    clock: ManualClock,
) {
    // Thursday 1 January 2026 is in the week of Monday 29 December 2025.
    let c = calendar_check(&unique_key("cal"), 2, "week", "UTC");
    clock.set_us(at("2025-12-29T08:00:00Z"));
    assert!(check(&*store, &c).await.allowed);
    clock.set_us(at("2026-01-01T08:00:00Z"));
    let second = check(&*store, &c).await;
    assert!(second.allowed && second.remaining == 0, "{second:?}");
    clock.set_us(at("2026-01-04T23:59:59Z"));
    assert!(!check(&*store, &c).await.allowed, "Sunday is the same week");
    let c = calendar_check(&unique_key("cal"), 2, "week", "UTC");
    assert_period_ends_at(
        &*store,
        &clock,
        &c,
        at("2026-01-05T00:00:00Z"),
        at("2026-01-12T00:00:00Z"),
    )
    .await;
}

async fn offsets_of_half_and_three_quarter_hours(store: Arc<dyn Store>, clock: ManualClock) {
    for (zone, end) in [
        ("Asia/Kolkata", "2026-06-15T18:30:00Z"),
        ("Asia/Kathmandu", "2026-06-15T18:15:00Z"),
        ("Australia/Eucla", "2026-06-15T15:15:00Z"),
    ] {
        let c = calendar_check(&unique_key("cal"), 1, "day", zone);
        assert_period_ends_at(&*store, &clock, &c, at("2026-06-15T12:00:00Z"), at(end)).await;
    }
}

async fn a_reset_clears_the_current_period(store: Arc<dyn Store>, clock: ManualClock) {
    let c = calendar_check(&unique_key("cal"), 1, "year", "Europe/Berlin");
    clock.set_us(at("2026-06-01T00:00:00Z"));
    assert!(check(&*store, &c).await.allowed);
    assert!(!check(&*store, &c).await.allowed);
    let reset = store.reset(&c).await.unwrap();
    assert_eq!(reset.outcomes[0].remaining, 1);
    assert!(check(&*store, &c).await.allowed);
    // The year ends at local midnight, 23:00 UTC on 31 December.
    let denied = check(&*store, &c).await;
    assert_eq!(
        denied.retry_after_us,
        at("2026-12-31T23:00:00Z") - at("2026-06-01T00:00:00Z")
    );
}

/// On Redis without a simulated clock, the script decides by Redis's
/// `TIME`: given periods around a clock an hour ahead of Redis's (as an
/// instance whose clock runs fast would send), it still counts in the
/// period Redis's clock is in, and a clock a whole period off is an error
/// for that check alone. The arguments are written by hand, as
/// `src/store/redis/wire.rs` documents them.
#[tokio::test]
async fn by_redis_time() {
    use fred::prelude::*;
    let server = RedisServer::start();
    let client = Builder::from_config(Config::from_url(&server.url()).unwrap())
        .build()
        .unwrap();
    client.init().await.unwrap();
    let script = ratekeeper::store::scripts::OPS.as_str();
    let wall = Timestamp::now().as_microsecond() as u64;
    let args = |bounds: [u64; 4]| {
        let window = bounds.map(|b| b.to_string()).join(",");
        // now (Redis TIME), TTL pad, channel; a check: code 1, 1 limit,
        // cost 1, nothing to publish, no lease, no reservation;
        // fixed_window, limit 5, window, burst.
        [
            "", "0", "ch", "1", "1", "1", "", "", "", "fw", "5", &window, "5",
        ]
        .map(String::from)
        .to_vec()
    };
    let key = unique_key("rk:cal");
    // Periods of 2 hours whose middle one starts an hour after our clock:
    // Redis's clock is in the first.
    let around = [wall - HOUR, wall + HOUR, wall + 3 * HOUR, wall + 5 * HOUR];
    let reply: Vec<Value> = client
        .eval(script, vec![key.clone()], args(around))
        .await
        .unwrap();
    let numbers: Vec<i64> = reply
        .iter()
        .map(|v| v.as_i64().unwrap_or(i64::MIN))
        .collect();
    // 1 (applied), -1 (nothing published), Redis's TIME (the check's
    // store time), allowed, remaining, retry, reset.
    assert_eq!(&numbers[..2], &[1, -1], "{reply:?}");
    assert!(numbers[2].abs_diff(wall as i64) < 10 * SEC, "{reply:?}");
    assert_eq!(&numbers[3..6], &[1, 4, 0], "{reply:?}");
    let reset = numbers[6] as u64;
    assert!(
        (HOUR - 10 * SEC..=HOUR).contains(&reset),
        "the first period ends at our clock + 1 h, Redis's clock ~1 h before it: {reset}"
    );
    // All three periods ahead: Redis's clock is in none of them.
    let ahead = [
        wall + HOUR,
        wall + 2 * HOUR,
        wall + 3 * HOUR,
        wall + 4 * HOUR,
    ];
    let reply: Vec<Value> = client.eval(script, vec![key], args(ahead)).await.unwrap();
    assert_eq!(reply[0].as_i64(), Some(-1), "{reply:?}");
    let message = reply[1].as_string().unwrap_or_default();
    assert!(message.contains("outside the periods"), "{message}");
    client.quit().await.unwrap();
}
