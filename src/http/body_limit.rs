//! How large a request body may be: one check's, or a batch's. Apart from
//! the state and the router so that the error type can name the cap.

/// Request bodies larger than this are refused with 413.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

/// Room per check in a batch's body: a check at its largest in practice
/// (a 512-byte key, eight inline limits) is about 1 KiB.
pub const BATCH_BYTES_PER_CHECK: usize = 4 * 1024;

/// The body cap of `POST /v1/checks` for batches of up to `max_batch`
/// checks: [`BATCH_BYTES_PER_CHECK`] each, and never less than one check's
/// cap (400 KiB at the default 100). Bounded like the rest: a buffered body
/// is memory held per connection.
pub fn batch_body_limit(max_batch: usize) -> usize {
    max_batch
        .saturating_mul(BATCH_BYTES_PER_CHECK)
        .max(MAX_BODY_BYTES)
}
