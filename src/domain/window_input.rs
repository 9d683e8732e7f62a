//! A rule's window as written (`window`, `calendar` and `timezone`, or a
//! concurrency limit's `lease_ttl`) validated into a [`Window`].

use super::duration::MAX_WINDOW_US;
use super::rule::{Algorithm, Bounds, RuleInput, ValidationError, WindowInput, invalid};
use super::window::{Calendar, CalendarUnit, Window, Zone};

/// The window of `input` under `algorithm`: a concurrency limit's lease
/// TTL, or a length or calendar periods for the others (which take no
/// `lease_ttl`).
pub(super) fn window_of(
    input: &RuleInput,
    algorithm: Algorithm,
    bounds: &Bounds,
) -> Result<Window, ValidationError> {
    if algorithm == Algorithm::Concurrency {
        lease_ttl(input, bounds)
    } else if input.lease_ttl.is_some() {
        Err(invalid("lease_ttl", "only applies to concurrency"))
    } else {
        window(input, algorithm)
    }
}

/// A length from 1 ms to `max_us`, in whole milliseconds, as `field`.
fn length_us(
    field: &'static str,
    input: &WindowInput,
    max_us: u64,
) -> Result<u64, ValidationError> {
    let length = match input {
        WindowInput::Seconds(s) => s.checked_mul(1_000_000).unwrap_or(u64::MAX),
        WindowInput::Text(t) => super::parse_duration_us(t).map_err(|m| invalid(field, m))?,
    };
    if !(1_000..=max_us).contains(&length) || length % 1_000 != 0 {
        // Only examples that are allowed: a lease_ttl of at most 1h was
        // once told to try "1d".
        let examples: Vec<String> = EXAMPLES
            .iter()
            .filter(|(_, us)| *us <= max_us)
            .map(|(text, _)| format!("{text:?}"))
            .collect();
        return Err(invalid(
            field,
            format!(
                "must be a whole number of milliseconds from 1ms to {} (e.g. {}, or seconds as an integer)",
                super::format_duration_us(max_us),
                examples.join(", ")
            ),
        ));
    }
    Ok(length)
}

/// The examples a message about a length gives, with their lengths.
const EXAMPLES: [(&str, u64); 5] = [
    ("250ms", 250_000),
    ("10s", 10_000_000),
    ("1m", 60_000_000),
    ("1h", 3_600_000_000),
    ("1d", 86_400_000_000),
];

/// A check's `reservation_ttl`: how long its reservation can be settled,
/// from 1 ms to `limits.max_reservation_ttl`, in whole milliseconds.
pub fn reservation_ttl_ms(input: &WindowInput, bounds: &Bounds) -> Result<u64, ValidationError> {
    length_us("reservation_ttl", input, bounds.max_reservation_ttl_us).map(|us| us / 1_000)
}

/// A concurrency limit's window: its lease TTL, given as `lease_ttl` (a
/// window or calendar is refused: leases do not live in periods), and its
/// limit within `limits.max_concurrency`.
fn lease_ttl(input: &RuleInput, bounds: &Bounds) -> Result<Window, ValidationError> {
    if input.window.is_some() || input.calendar.is_some() || input.timezone.is_some() {
        let field = if input.window.is_some() {
            "window"
        } else if input.calendar.is_some() {
            "calendar"
        } else {
            "timezone"
        };
        return Err(invalid(
            field,
            "a concurrency limit has no window: give lease_ttl, how long a lease lives unless released",
        ));
    }
    if input.limit > bounds.max_concurrency {
        return Err(invalid(
            "limit",
            format!(
                "a concurrency limit is at most {} (limits.max_concurrency), got {}",
                bounds.max_concurrency, input.limit
            ),
        ));
    }
    let Some(ttl) = &input.lease_ttl else {
        return Err(invalid(
            "lease_ttl",
            "missing: a concurrency limit needs lease_ttl, how long a lease lives unless released (e.g. \"30s\")",
        ));
    };
    Ok(Window::Length(length_us(
        "lease_ttl",
        ttl,
        bounds.max_lease_ttl_us,
    )?))
}

/// The window of `input`: a length, or calendar periods in a zone.
fn window(input: &RuleInput, algorithm: Algorithm) -> Result<Window, ValidationError> {
    match (&input.window, &input.calendar) {
        (Some(_), Some(_)) => Err(invalid(
            "calendar",
            "window and calendar are mutually exclusive: give one",
        )),
        (None, None) => Err(invalid(
            "window",
            "missing: give a window (e.g. \"1m\") or a calendar period (\"day\", \"week\", \"month\", \"year\")",
        )),
        (Some(length), None) => {
            if input.timezone.is_some() {
                return Err(invalid("timezone", "only applies with calendar"));
            }
            Ok(Window::Length(length_us("window", length, MAX_WINDOW_US)?))
        }
        (None, Some(unit)) => {
            let unit = CalendarUnit::parse(unit).ok_or_else(|| {
                invalid(
                    "calendar",
                    format!("must be one of day, week, month, year, got {unit:?}"),
                )
            })?;
            if algorithm != Algorithm::FixedWindow {
                return Err(invalid(
                    "calendar",
                    format!(
                        "calendar periods are fixed windows: the algorithm must be fixed_window, got {algorithm}"
                    ),
                ));
            }
            let zone = match &input.timezone {
                None => Zone::utc(),
                Some(name) => Zone::named(name).map_err(|m| invalid("timezone", m))?,
            };
            Ok(Window::Calendar(Calendar { unit, zone }))
        }
    }
}
