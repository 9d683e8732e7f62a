//! What a reservation's record says to the operations that name it (a
//! settle, a draw): apart from `op.rs` so that the operations' list stays
//! one page.

/// What a settle found of its reservation's record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// Missing, expired, or of another reservation: nothing changed.
    Unknown,
    /// Settled now.
    Now,
    /// Settled before with the same `actual`: nothing changed.
    Again,
    /// Settled before with another `actual`: nothing changed.
    Conflict,
}

/// How much of a draw an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DrawMode {
    /// The whole draw: the record's gate, the check, the record.
    Spend,
    /// Only what the record says: nothing is written, and a draw it would
    /// let go ahead answers [`Drawn::Denied`] (its other slots denied).
    Peek,
    /// The record's gate and its update, no check: the draw's other
    /// slots, this one's limits included, were checked and spent already.
    Record,
}

/// What a draw found of its reservation's record, and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    /// Missing, expired, or of another reservation: nothing changed.
    Unknown,
    /// Allowed: spent on every limit, and added to the record.
    Now,
    /// Denied by a limit: nothing changed, and the same `seq` may try
    /// again.
    Denied,
    /// A draw of this `seq` was allowed before: nothing changed (a retry).
    Again,
    /// A later `seq` was drawn already: nothing changed.
    Stale,
    /// The reservation is settled: nothing changed.
    Settled,
}

impl Drawn {
    /// The number the script answers for it (`lua/adjust.lua`).
    pub fn code(self) -> i64 {
        match self {
            Drawn::Unknown => 0,
            Drawn::Now => 1,
            Drawn::Denied => 2,
            Drawn::Again => 3,
            Drawn::Stale => 4,
            Drawn::Settled => 5,
        }
    }

    pub fn from_code(code: i64) -> Option<Drawn> {
        [
            Drawn::Unknown,
            Drawn::Now,
            Drawn::Denied,
            Drawn::Again,
            Drawn::Stale,
            Drawn::Settled,
        ]
        .into_iter()
        .find(|d| d.code() == code)
    }
}

impl Settled {
    /// The number the script answers for it (`lua/adjust.lua`).
    pub fn code(self) -> i64 {
        match self {
            Settled::Unknown => 0,
            Settled::Now => 1,
            Settled::Again => 2,
            Settled::Conflict => 3,
        }
    }

    pub fn from_code(code: i64) -> Option<Settled> {
        [
            Settled::Unknown,
            Settled::Now,
            Settled::Again,
            Settled::Conflict,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }
}
