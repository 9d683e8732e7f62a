//! The batch's request and response as the OpenAPI document states them.
//!
//! The request's items are any JSON value: the server answers an invalid
//! item in its place (a 422 among the results), not by refusing the batch,
//! and the document says what the server refuses, no more. Each result is
//! `POST /v1/check`'s own body (a decision, or an error) with a `status`
//! beside its fields: two titled variants, so generators name two classes.

use serde::Serialize;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{
    ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type,
};
use utoipa::{PartialSchema, ToSchema};

use super::BatchItem;
use crate::http::check::CheckResponse;
use crate::http::error::ErrorBody;

/// The request body of `POST /v1/checks` as documented.
pub struct BatchForms;

impl ToSchema for BatchForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "BatchRequest".into()
    }
}

impl PartialSchema for BatchForms {
    fn schema() -> RefOr<Schema> {
        let item = ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .description(Some(
                "A check: any body POST /v1/check takes (see CheckRequest), without wait_ms \
                 above 0. Any value is accepted here; one that is not a valid check is answered \
                 in its place with the 422 POST /v1/check would give it.",
            ));
        let checks = ArrayBuilder::new().items(item).description(Some(
            "Up to limits.max_batch (default 100) independent checks, each decided as if sent \
                 alone, in order: checks on one key see the ones before them. An empty list is \
                 answered with no results.",
        ));
        ObjectBuilder::new()
            .property("checks", checks)
            .required("checks")
            .description(Some(
                "Checks decided together: one store call for all of them (one Redis round trip \
                 per cluster slot).",
            ))
            .examples([serde_json::json!({"checks": [
                {"key": "user:42", "limit": 100, "window": "1m"},
                {"key": "k_123", "limits": [{"name": "daily", "algorithm": "fixed_window", "limit": 10000, "window": "1d"}]},
            ]})])
            .into()
    }
}

/// The answer to a valid batch: one result per check, in order.
#[derive(Debug, Serialize, ToSchema)]
pub struct BatchResponse {
    /// The i-th check's answer at position i.
    pub results: Vec<BatchItem>,
}

impl ToSchema for BatchItem {
    fn name() -> std::borrow::Cow<'static, str> {
        "BatchResult".into()
    }
}

impl PartialSchema for BatchItem {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(with_status(
                without_waited_ms(CheckResponse::schema()),
                &[200],
                "CheckResult",
                "200: the check was decided, allowed or not; the fields are POST /v1/check's \
                 body for it.",
            ))
            .item(with_status(
                ErrorBody::schema(),
                &[400, 413, 422, 500],
                "ErrorResult",
                "The check was not decided: the status and error body POST /v1/check would \
                 have answered it with (400 invalid_json: the item is not valid JSON on its \
                 own, as a lone surrogate escape like \"\\ud800\" in a string; 413 \
                 payload_too_large: the item is over 64 KiB; 422 invalid_request, \
                 unknown_policy or mixed_forms; 500 internal).",
            ))
            .description(Some(
                "One check's answer: POST /v1/check's body with its status beside the fields.",
            ))
            .into()
    }
}

/// A check's body without `waited_ms`, which only a check that asked to
/// wait gets: no check in a batch does.
fn without_waited_ms(schema: RefOr<Schema>) -> RefOr<Schema> {
    let RefOr::T(Schema::Object(mut object)) = schema else {
        unreachable!("a derived struct schema is an inline object")
    };
    object.properties.remove("waited_ms");
    object.into()
}

/// `schema` (an object) with a required integer `status`, one of
/// `statuses`, titled `title`.
fn with_status(schema: RefOr<Schema>, statuses: &[u16], title: &str, what: &str) -> RefOr<Schema> {
    let RefOr::T(Schema::Object(mut object)) = schema else {
        unreachable!("a derived struct schema is an inline object")
    };
    let status = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .enum_values(Some(statuses.iter().copied()))
        .description(Some(
            "The HTTP status POST /v1/check would have answered with.",
        ));
    object.properties.insert("status".into(), status.into());
    object.required.insert(0, "status".into());
    object.title = Some(title.to_owned());
    object.description = Some(what.to_owned());
    object.example = None;
    object.examples.clear();
    object.into()
}
