//! `POST /v1/checks`: up to `limits.max_batch` independent checks in one
//! request, each answered in its place, in order, as `POST /v1/check`
//! would have answered it alone.
//!
//! A transport, not a second path: each item is parsed by the same
//! [`parse_check`] into the same domain [`Check`], and the valid ones go,
//! as one list, to [`Limiter::run`](crate::limiter::Limiter::run), which
//! takes each through the same stages as a lone check (deny cache,
//! breaker, fallback, observation) and asks the store for all of them in
//! one call (on Redis one script call per cluster slot, the calls at once;
//! the operations of one slot, hence of one key, applied in their order).
//!
//! - The envelope is judged whole: not JSON (400), not an object with a
//!   `checks` array (422), more than `limits.max_batch` items (422), a body
//!   past [`batch_body_limit`] (413). Only then is anything decided.
//! - An item is judged alone: an invalid one is answered in its place with
//!   the status and error body `POST /v1/check` gives it (422, with the
//!   same code and message; a line and column in a message count from the
//!   item's first byte), and the others are still decided.
//! - An item cannot wait: a batch answers when its last check is decided,
//!   so one waiting item would hold every other answer. `wait_ms` above 0
//!   is that item's 422; `0` is accepted, as alone.
//! - Each answer is the single check's body with its status beside it, so
//!   a client parses an item as it parses a `POST /v1/check` answer. The
//!   batch itself is a 200 without rate-limit headers: they describe one
//!   decision, and a batch holds many.

use std::fmt;
use std::time::Instant;

use axum::Json;
use axum::extract::DefaultBodyLimit;
use axum::extract::{FromRequest, Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde::de::{IgnoredAny, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::value::RawValue;
use utoipa::OpenApi;

use super::reserve::Ask;
use super::response::CheckResponse;
use super::response::ReservationResponse;
use super::{Form, body_for, parse_check};
use crate::domain::Check;
use crate::domain::auth::Scope;
use crate::domain::tenants::Overridden;
use crate::http::MAX_BODY_BYTES;
use crate::http::endpoint::Endpoint;
use crate::http::error::{ApiError, ErrorBody, JsonBody, parse_json};
use crate::http::{AppState, batch_body_limit};
use crate::limiter::Request as Run;
use crate::store::Op;

pub use schema::{BatchForms, BatchResponse};

mod schema;

/// The most items any configuration allows (`limits.max_batch` ≤ 1000).
/// The envelope keeps no more than one past it: a body of tiny items is
/// counted, not held item by item.
const MAX_ITEMS: usize = 1_000;

/// With its own body cap, inside the router-wide one, so it wins here.
pub(in crate::http) const ENDPOINT: Endpoint = Endpoint::at(
    "/v1/checks",
    Scope::Check,
    |state| post(checks).layer(DefaultBodyLimit::max(batch_body_limit(state.max_batch))),
    BatchDoc::openapi,
);

#[derive(OpenApi)]
#[openapi(
    paths(checks),
    components(schemas(BatchForms, BatchResponse, BatchItem))
)]
struct BatchDoc;

/// Decide a batch of checks, each answered in its place.
#[utoipa::path(
    post,
    path = "/v1/checks",
    tag = "limits",
    request_body(content = BatchForms, content_type = "application/json"),
    responses(
        (status = 200, description = "The envelope was valid: one result per check, in order, each with its own status \
            (200 with the decision, allowed or not, as POST /v1/check's body; 422 or 500 with the error POST /v1/check \
            would have answered). No rate-limit headers: they describe one decision.", body = BatchResponse),
        (status = 400, description = "Malformed JSON", body = ErrorBody),
        (status = 413, description = "Body over 4 KiB per check of limits.max_batch (400 KiB by default), at least 64 KiB", body = ErrorBody),
        (status = 408, description = "The body did not arrive within server.body_read_timeout", body = ErrorBody),
        (status = 415, description = "Content-Type is not application/json", body = ErrorBody),
        (status = 422, description = "Not an object with a `checks` array, or more than limits.max_batch checks \
            (code invalid_request, the message names the limit)", body = ErrorBody),
    )
)]
pub async fn checks(State(state): State<AppState>, request: Request) -> Response {
    let started = Instant::now();
    let response = match decide(&state, request).await {
        Ok(results) => Json(BatchResponse { results }).into_response(),
        Err(error) => error.into_response(),
    };
    state
        .metrics
        .decisions
        .batch_duration
        .observe(started.elapsed().as_secs_f64());
    response
}

async fn decide(state: &AppState, request: Request) -> Result<Vec<BatchItem>, ApiError> {
    let body = JsonBody::from_request(request, state)
        .await
        .map_err(|error| match error {
            // This route's cap, not the one every other route has.
            ApiError::PayloadTooLarge(_) => {
                ApiError::PayloadTooLarge(batch_body_limit(state.max_batch))
            }
            other => other,
        })?;
    let BatchRequest { checks } = body.parse_with(BatchRequest::parse)?;
    if checks.total > state.max_batch {
        return Err(ApiError::InvalidRequest(format!(
            "checks: at most {} checks in a batch (limits.max_batch), got {}",
            state.max_batch, checks.total
        )));
    }
    Ok(decide_items(state, checks.kept).await)
}

/// Each item parsed and, if valid, decided with the others in one run.
async fn decide_items(state: &AppState, kept: Vec<&RawValue>) -> Vec<BatchItem> {
    let mut forms = Vec::with_capacity(kept.len());
    let mut valid = Vec::with_capacity(kept.len());
    // Each valid check's reservation (and its id and TTL), if it asked for one.
    let mut reservations = Vec::new();
    let mut granted = Vec::new();
    for raw in kept {
        forms.push(item(state, raw).map(|(form, overridden, check, ask)| {
            valid.push(check);
            if let Some(ask) = ask {
                let (reservation, id) = ask.reservation();
                reservations.resize(valid.len() - 1, None);
                reservations.push(Some(reservation));
                granted.resize(valid.len() - 1, None);
                granted.push(Some((id, ask.ttl_ms)));
            }
            (form, overridden)
        }));
    }
    let runs: Vec<Run> = valid
        .iter()
        .enumerate()
        .map(|(i, check)| {
            let reservation = reservations.get(i).and_then(Option::as_ref);
            Run::new(Op::check(check).reserving(reservation))
        })
        .collect();
    let mut decided = state.limiter.run(&runs).await.into_iter();
    let mut granted = granted.into_iter();
    forms
        .into_iter()
        .map(|form| {
            let answer = form.and_then(|(form, overridden)| {
                let reserved = granted.next().flatten();
                let decision = decided
                    .next()
                    .expect("one answer per valid check")?
                    .decision;
                let mut body = body_for(form, &decision);
                // As a check alone says it: which override applied.
                body.overridden = overridden.map(Overridden::as_str);
                if let Some((id, ttl_ms)) = reserved {
                    body.reservation = ReservationResponse::granted(&decision, id, ttl_ms);
                }
                Ok(body)
            });
            match answer {
                Ok(body) => BatchItem::decided(body),
                Err(error) => BatchItem::failed(&error),
            }
        })
        .collect()
}

/// One item: the check it asks, in the form it was asked in (the shape of
/// its answer), and the override it runs under, if any.
type Item = (Form, Option<Overridden>, Check, Option<Ask>);

fn item(state: &AppState, raw: &RawValue) -> Result<Item, ApiError> {
    // No item larger than a body POST /v1/check takes: parsing one costs
    // a few times its size, and the batch's own cap is many times more.
    if raw.get().len() > MAX_BODY_BYTES {
        return Err(ApiError::PayloadTooLarge(MAX_BODY_BYTES));
    }
    let parsed = parse_check(state, raw.get().as_bytes())?;
    if parsed.wait_ms.is_some_and(|ms| ms > 0) {
        return Err(ApiError::InvalidRequest(
            "wait_ms: a check in a batch cannot wait (one waiting check would hold every answer \
             of the batch); leave it out or 0, or send this check alone to POST /v1/check"
                .into(),
        ));
    }
    Ok((
        parsed.form,
        parsed.overridden,
        parsed.check,
        parsed.reservation,
    ))
}

/// The request body, as parsed. Named as the schema names it, since
/// serde's messages name the type ("expected struct BatchRequest").
#[derive(Deserialize)]
struct BatchRequest<'a> {
    #[serde(borrow)]
    checks: Items<'a>,
}

impl<'a> BatchRequest<'a> {
    /// The envelope; an array in its place is refused by [`parse_json`].
    fn parse(json: &'a [u8]) -> Result<BatchRequest<'a>, ApiError> {
        parse_json(json)
    }
}

/// The `checks` array: its first [`MAX_ITEMS`] + 1 items, each as the bytes
/// it came as, and how many there were in all.
struct Items<'a> {
    kept: Vec<&'a RawValue>,
    total: usize,
}

impl<'de: 'a, 'a> Deserialize<'de> for Items<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_seq(ItemsVisitor(std::marker::PhantomData))
    }
}

struct ItemsVisitor<'a>(std::marker::PhantomData<&'a ()>);

impl<'de: 'a, 'a> Visitor<'de> for ItemsVisitor<'a> {
    type Value = Items<'a>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of checks")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'a>, A::Error> {
        let mut items = Items {
            kept: Vec::new(),
            total: 0,
        };
        while items.total <= MAX_ITEMS {
            match seq.next_element::<&'de RawValue>()? {
                Some(raw) => items.kept.push(raw),
                None => return Ok(items),
            }
            items.total += 1;
        }
        while seq.next_element::<IgnoredAny>()?.is_some() {
            items.total += 1;
        }
        Ok(items)
    }
}

/// One check's answer in a batch: the body `POST /v1/check` answers it
/// with, and that answer's status beside its fields.
#[derive(Debug, Serialize)]
pub struct BatchItem {
    status: u16,
    #[serde(flatten)]
    body: ItemBody,
}

// Unboxed although an error is far smaller: nearly every item is a
// decision, and a box per item cost a batch item about 2 % more
// instructions (bench/guard.sh).
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ItemBody {
    Decided(CheckResponse),
    Failed(ErrorBody),
}

impl BatchItem {
    fn decided(body: CheckResponse) -> BatchItem {
        BatchItem {
            status: 200,
            body: ItemBody::Decided(body),
        }
    }

    fn failed(error: &ApiError) -> BatchItem {
        let (status, body) = error.status_and_body();
        BatchItem {
            status: status.as_u16(),
            body: ItemBody::Failed(body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn envelope(json: &str) -> Result<(usize, usize), ApiError> {
        let BatchRequest { checks } = BatchRequest::parse(json.as_bytes())?;
        Ok((checks.kept.len(), checks.total))
    }

    #[test]
    fn the_envelope_keeps_items_as_sent_and_counts_past_the_ceiling() {
        let BatchRequest { checks } =
            parse_json(br#"{"checks": [ {"key": "a"} , 5, null, "x"], "other": 1}"#).unwrap();
        let raw: Vec<&str> = checks.kept.iter().map(|r| r.get()).collect();
        assert_eq!(raw, [r#"{"key": "a"}"#, "5", "null", r#""x""#]);
        assert_eq!(envelope(r#"{"checks": []}"#).unwrap(), (0, 0));
        let many = format!("{{\"checks\": [{}0]}}", "0,".repeat(5_000));
        assert_eq!(envelope(&many).unwrap(), (MAX_ITEMS + 1, 5_001));
    }

    #[test]
    fn a_bad_envelope_is_a_422_naming_the_field() {
        let message = |json: &str| match envelope(json) {
            Err(ApiError::InvalidRequest(m)) => m,
            other => panic!("{json}: {other:?}"),
        };
        assert!(message("{}").starts_with("missing field `checks`"));
        assert!(
            message(r#"{"checks": {}}"#)
                .starts_with("checks: invalid type: map, expected an array of checks")
        );
        assert!(message(r#"{"checks": null}"#).contains("expected an array of checks"));
        assert!(
            message("[]").contains("struct BatchRequest"),
            "{}",
            message("[]")
        );
        // An array of the fields in order is no object either.
        assert!(
            message("[[]]").contains("expected struct BatchRequest"),
            "{}",
            message("[[]]")
        );
        assert!(
            message("5").contains("expected struct BatchRequest"),
            "{}",
            message("5")
        );
    }
}
