//! Durations as written by people: `250ms`, `10s`, `1m`, `1h`, `1d` (and
//! `us` for the few settings that need microseconds; rule windows must
//! still be whole milliseconds).
//!
//! A small strict parser rather than a general one: windows and timeouts are
//! whole numbers of one unit, and anything else (`1.5s`, `1h30m`, `10us`) is
//! rejected with a message that says what is accepted.

/// 366 days: the longest window a rule may have.
pub const MAX_WINDOW_US: u64 = 366 * 86_400 * 1_000_000;

const UNITS: [(&str, u64); 6] = [
    ("us", 1),
    ("ms", 1_000),
    ("s", 1_000_000),
    ("m", 60_000_000),
    ("h", 3_600_000_000),
    ("d", 86_400_000_000),
];

/// Parses `<digits><unit>` with unit one of `us`, `ms`, `s`, `m`, `h`, `d` into
/// microseconds. Returns a human-readable reason on failure.
///
/// ```
/// use ratekeeper::domain::parse_duration_us;
/// assert_eq!(parse_duration_us("250ms"), Ok(250_000));
/// assert_eq!(parse_duration_us("1m"), Ok(60_000_000));
/// assert!(parse_duration_us("1.5s").is_err());
/// ```
pub fn parse_duration_us(text: &str) -> Result<u64, String> {
    let invalid = || {
        format!(
            "`{text}` is not a duration: write a whole number and a unit (ms, s, m, h or d), e.g. `250ms`, `10s`, `1m`"
        )
    };
    // No trimming: a window of " 1m" is a malformed value, not "1m". The
    // config reader trims its own values before calling this.
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(invalid)?;
    let (digits, unit) = text.split_at(split);
    let value: u64 = digits.parse().map_err(|_| invalid())?;
    let per_unit = UNITS
        .iter()
        .find(|(name, _)| *name == unit)
        .map(|(_, us)| *us)
        .ok_or_else(invalid)?;
    value
        .checked_mul(per_unit)
        .ok_or_else(|| format!("`{text}` is too long"))
}

/// `us` in the largest unit that writes it whole, as the parser reads it
/// back: `366d`, `1h`, `90s`.
///
/// ```
/// use ratekeeper::domain::format_duration_us;
/// assert_eq!(format_duration_us(3_600_000_000), "1h");
/// assert_eq!(format_duration_us(90_000_000), "90s");
/// ```
pub fn format_duration_us(us: u64) -> String {
    let (unit, per) = UNITS
        .iter()
        .rev()
        .find(|(_, per)| us.is_multiple_of(*per))
        .copied()
        .unwrap_or(UNITS[0]);
    format!("{}{unit}", us / per)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_what_it_parses() {
        for text in ["7us", "250ms", "90s", "1m", "36h", "366d"] {
            let us = parse_duration_us(text).unwrap();
            assert_eq!(format_duration_us(us), text);
        }
        assert_eq!(format_duration_us(120_000_000), "2m");
    }

    #[test]
    fn parses_every_unit() {
        assert_eq!(parse_duration_us("50us"), Ok(50));
        assert_eq!(parse_duration_us("250ms"), Ok(250_000));
        assert_eq!(parse_duration_us("10s"), Ok(10_000_000));
        assert_eq!(parse_duration_us("1m"), Ok(60_000_000));
        assert_eq!(parse_duration_us("1h"), Ok(3_600_000_000));
        assert_eq!(parse_duration_us("1d"), Ok(86_400_000_000));
    }

    #[test]
    fn rejects_what_it_does_not_understand() {
        for bad in [
            "",
            "10",
            "1.5s",
            "10ns",
            "-1s",
            "s",
            "1h30m",
            "99999999999999999999d",
            " 1m",
            "1m ",
            "\t1s",
            "1 m",
        ] {
            assert!(parse_duration_us(bad).is_err(), "{bad} should be rejected");
        }
    }
}
