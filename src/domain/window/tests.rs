use super::*;

const HOUR: u64 = 3_600_000_000;
const DAY: u64 = 24 * HOUR;

/// Microseconds since the epoch of an RFC 3339 instant.
fn at(text: &str) -> u64 {
    let ts: Timestamp = text.parse().expect(text);
    u64::try_from(ts.as_microsecond()).unwrap()
}

fn calendar(unit: CalendarUnit, zone: &str) -> Calendar {
    Calendar {
        unit,
        zone: Zone::named(zone).unwrap(),
    }
}

/// The period holding `now`, as RFC 3339 instants in UTC.
fn period(unit: CalendarUnit, zone: &str, now: &str) -> (String, String) {
    let (start, end) = calendar(unit, zone).period(at(now));
    let show = |us: u64| Timestamp::from_microsecond(us as i64).unwrap().to_string();
    (show(start), show(end))
}

fn span(unit: CalendarUnit, zone: &str, now: &str) -> u64 {
    let (start, end) = calendar(unit, zone).period(at(now));
    end - start
}

#[test]
fn a_day_starts_at_local_midnight() {
    assert_eq!(
        period(CalendarUnit::Day, "UTC", "2026-06-15T12:00:00Z"),
        ("2026-06-15T00:00:00Z".into(), "2026-06-16T00:00:00Z".into())
    );
    // Berlin in summer is UTC+2.
    assert_eq!(
        period(CalendarUnit::Day, "Europe/Berlin", "2026-06-15T23:30:00Z"),
        ("2026-06-15T22:00:00Z".into(), "2026-06-16T22:00:00Z".into())
    );
}

#[test]
fn dst_days_in_berlin_last_23_and_25_hours() {
    // 29 March 2026: 02:00 CET becomes 03:00 CEST.
    assert_eq!(
        period(CalendarUnit::Day, "Europe/Berlin", "2026-03-29T12:00:00Z"),
        ("2026-03-28T23:00:00Z".into(), "2026-03-29T22:00:00Z".into())
    );
    assert_eq!(
        span(CalendarUnit::Day, "Europe/Berlin", "2026-03-29T01:30:00Z"),
        23 * HOUR
    );
    // 25 October 2026: 03:00 CEST becomes 02:00 CET.
    assert_eq!(
        period(CalendarUnit::Day, "Europe/Berlin", "2026-10-25T12:00:00Z"),
        ("2026-10-24T22:00:00Z".into(), "2026-10-25T23:00:00Z".into())
    );
    assert_eq!(
        span(CalendarUnit::Day, "Europe/Berlin", "2026-10-25T00:59:00Z"),
        25 * HOUR
    );
    // The day before each is an ordinary one.
    assert_eq!(
        span(CalendarUnit::Day, "Europe/Berlin", "2026-03-28T12:00:00Z"),
        DAY
    );
}

#[test]
fn dst_days_in_new_york_last_23_and_25_hours() {
    // 8 March 2026: 02:00 EST becomes 03:00 EDT.
    assert_eq!(
        period(
            CalendarUnit::Day,
            "America/New_York",
            "2026-03-08T12:00:00Z"
        ),
        ("2026-03-08T05:00:00Z".into(), "2026-03-09T04:00:00Z".into())
    );
    // 1 November 2026: 02:00 EDT becomes 01:00 EST.
    assert_eq!(
        period(
            CalendarUnit::Day,
            "America/New_York",
            "2026-11-01T12:00:00Z"
        ),
        ("2026-11-01T04:00:00Z".into(), "2026-11-02T05:00:00Z".into())
    );
    // Inside the repeated hour (05:30Z is 01:30 EST, the second one).
    assert_eq!(
        span(
            CalendarUnit::Day,
            "America/New_York",
            "2026-11-01T05:30:00Z"
        ),
        25 * HOUR
    );
}

#[test]
fn months_have_their_real_lengths() {
    for (now, days) in [
        ("2026-02-10T00:00:00Z", 28),
        ("2028-02-29T23:59:59Z", 29),
        ("2026-04-30T10:00:00Z", 30),
        ("2026-01-31T23:59:59Z", 31),
        ("2026-12-01T00:00:00Z", 31),
    ] {
        assert_eq!(
            span(CalendarUnit::Month, "UTC", now),
            days * DAY,
            "month of {now}"
        );
    }
    assert_eq!(
        period(CalendarUnit::Month, "UTC", "2028-02-29T23:59:59Z"),
        ("2028-02-01T00:00:00Z".into(), "2028-03-01T00:00:00Z".into())
    );
    // A month in Berlin holding the spring change is an hour short.
    assert_eq!(
        period(CalendarUnit::Month, "Europe/Berlin", "2026-03-15T00:00:00Z"),
        ("2026-02-28T23:00:00Z".into(), "2026-03-31T22:00:00Z".into())
    );
}

#[test]
fn iso_weeks_start_on_monday_across_new_year() {
    // 1 January 2026 is a Thursday: its week began Monday 29 December 2025.
    for now in [
        "2025-12-29T00:00:00Z",
        "2025-12-31T23:59:59Z",
        "2026-01-01T00:00:00Z",
        "2026-01-04T23:59:59Z",
    ] {
        assert_eq!(
            period(CalendarUnit::Week, "UTC", now),
            ("2025-12-29T00:00:00Z".into(), "2026-01-05T00:00:00Z".into()),
            "week of {now}"
        );
    }
    assert_eq!(
        period(CalendarUnit::Week, "UTC", "2026-01-05T00:00:00Z").0,
        "2026-01-05T00:00:00Z"
    );
}

#[test]
fn years_start_on_the_first_of_january() {
    assert_eq!(
        period(CalendarUnit::Year, "UTC", "2028-07-01T00:00:00Z"),
        ("2028-01-01T00:00:00Z".into(), "2029-01-01T00:00:00Z".into())
    );
    assert_eq!(
        span(CalendarUnit::Year, "UTC", "2028-07-01T00:00:00Z"),
        366 * DAY
    );
    // New Year in Tokyo (UTC+9) comes 9 hours before UTC's.
    assert_eq!(
        period(CalendarUnit::Year, "Asia/Tokyo", "2026-12-31T15:00:00Z").0,
        "2026-12-31T15:00:00Z"
    );
}

#[test]
fn zones_with_half_and_three_quarter_hour_offsets() {
    for (zone, start) in [
        ("Asia/Kolkata", "2026-06-14T18:30:00Z"),     // +05:30
        ("Asia/Kathmandu", "2026-06-14T18:15:00Z"),   // +05:45
        ("Australia/Eucla", "2026-06-14T15:15:00Z"),  // +08:45
        ("America/St_Johns", "2026-06-15T02:30:00Z"), // -02:30 (summer)
    ] {
        assert_eq!(
            period(CalendarUnit::Day, zone, "2026-06-15T12:00:00Z").0,
            start,
            "{zone}"
        );
    }
}

#[test]
fn boundaries_cover_the_period_before_and_after() {
    let cal = calendar(CalendarUnit::Month, "UTC");
    let b = cal.boundaries(at("2026-03-15T00:00:00Z"));
    assert_eq!(
        b,
        [
            at("2026-02-01T00:00:00Z"),
            at("2026-03-01T00:00:00Z"),
            at("2026-04-01T00:00:00Z"),
            at("2026-05-01T00:00:00Z"),
        ]
    );
    // The remembered boundaries never answer for another period.
    assert_eq!(
        cal.period(at("2026-04-01T00:00:00Z")).0,
        at("2026-04-01T00:00:00Z")
    );
    assert_eq!(
        cal.period(at("2026-03-31T23:59:59Z")).0,
        at("2026-03-01T00:00:00Z")
    );
}

#[test]
fn zones_are_found_by_any_case_and_kept_under_their_canonical_name() {
    let a = Zone::named("Europe/Berlin").unwrap();
    let b = Zone::named("europe/berlin").unwrap();
    assert_eq!(a, b);
    assert_eq!(b.name(), "Europe/Berlin");
}

#[test]
fn an_unknown_zone_is_named_in_the_error() {
    let error = Zone::named("Mars/Olympus_Mons").unwrap_err();
    assert!(error.contains("\"Mars/Olympus_Mons\""), "{error}");
    assert!(Zone::named("").is_err());
    assert!(Zone::named(&"A".repeat(65)).is_err());
    // A POSIX TZ string is not a zone name.
    assert!(Zone::named("EST5EDT,M3.2.0,M11.1.0").is_err());
}

#[test]
fn a_length_window_counts_periods_from_the_epoch() {
    assert_eq!(Window::Length(10).period(25), (2, 30));
    assert_eq!(Window::Length(10).nominal_us(), 10);
    let month = Window::Calendar(calendar(CalendarUnit::Month, "UTC"));
    assert_eq!(month.nominal_us(), 30 * DAY);
}
