//! The documented schemas of the forms: each form's own, forbidding the
//! fields of the others (so no body is valid for two), shared by check,
//! reset, refund, settle, release and renew; and the levels form's body,
//! whose levels are those forms (`levels.rs` parses it).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::value::RawValue;
use utoipa::openapi::RefOr;
use utoipa::openapi::extensions::ExtensionsBuilder;
use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType};
use utoipa::{PartialSchema, ToSchema};

use super::fields::optional_whole_number;
use super::fields_present::RULE_FIELDS;
use super::request::{CheckRequest, InlineCheckRequest, PolicyCheckRequest, WindowSpec};
use crate::http::openapi::NOT_MARKER;

/// The request body of `POST /v1/check` as documented: exactly one of the
/// three forms. Each form's schema forbids the fields that select another,
/// so that no body is valid for two of them and a mixed body is invalid, as
/// the server judges it.
pub struct CheckForms;

impl ToSchema for CheckForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "CheckRequest".into()
    }
}

impl PartialSchema for CheckForms {
    fn schema() -> RefOr<Schema> {
        forms(&[], "Check")
    }
}

/// The request body of `POST /v1/reset`: the three forms of a check
/// without `cost`.
pub struct ResetForms;

impl ToSchema for ResetForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "ResetRequest".into()
    }
}

impl PartialSchema for ResetForms {
    fn schema() -> RefOr<Schema> {
        forms(&["cost", "reservation_ttl"], "Reset")
    }
}

/// The request body of `POST /v1/refund`: the three forms of a check
/// without `reservation_ttl`.
pub struct RefundForms;

impl ToSchema for RefundForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "RefundRequest".into()
    }
}

impl PartialSchema for RefundForms {
    fn schema() -> RefOr<Schema> {
        forms(&["reservation_ttl"], "Refund")
    }
}

/// The three forms of `operation` (`Check`, `Reset`), each also
/// forbidding `forbidden`. Each form's title is its own name
/// (`PolicyCheck`, `InlineReset`, ...): generators name their classes after
/// titles, so a reset's forms must not share a check's.
pub(super) fn forms(forbidden: &[&str], operation: &str) -> RefOr<Schema> {
    // The policy and inline forms forbid the other's lead field and every
    // rule field; every form forbids `forbidden`, and `levels` (the lead
    // field of the fourth).
    let levels: &[&str] = match forbidden.contains(&"levels") {
        true => &["ids"],
        false => &["levels", "ids"],
    };
    let with = |fields: &[&'static str]| [fields, forbidden, levels].concat();
    let leading = |other: &'static str| with(&[&[other][..], &RULE_FIELDS[..]].concat());
    let policy = forbid(
        PolicyCheckRequest::schema(),
        &leading("limits"),
        &format!("Policy{operation}"),
        "The policy form. Takes no limits of its own.",
    );
    let inline = forbid(
        InlineCheckRequest::schema(),
        &leading("policy"),
        &format!("Inline{operation}"),
        "The inline multi-limit form. The rule fields go inside `limits`.",
    );
    let single = window_or_calendar(forbid(
        CheckRequest::schema(),
        &with(&["policy", "limits"]),
        &format!("SingleRule{operation}"),
        "The single-rule form: one limit, named `default` in the headers.",
    ));
    let mut one_of = OneOfBuilder::new().item(policy).item(inline).item(single);
    // A level is one of the three others; a whole check may be levels.
    if !forbidden.contains(&"levels") {
        let mut fields = vec!["policy", "key", "limits", "ids"];
        fields.extend(RULE_FIELDS);
        fields.extend(forbidden);
        one_of = one_of.item(forbid(
            LevelsCheckRequest::schema(),
            &fields,
            &format!("Levels{operation}"),
            "The levels form: several forms, each on its own key, as one (docs/budgets.md).",
        ));
        let mut fields = vec!["key", "limits", "levels"];
        fields.extend(RULE_FIELDS);
        fields.extend(forbidden);
        one_of = one_of.item(forbid(
            HierarchyCheckRequest::schema(),
            &fields,
            &format!("Hierarchy{operation}"),
            "The hierarchy form: a policy with levels and its ids (docs/budgets.md).",
        ));
    }
    one_of
        .description(Some(
            "One of the forms. A body with fields of two forms (`policy` with `limits` or a \
                 rule field, `limits` with a rule field, `levels` with any of those or `key`, \
                 `ids` with `key`, `limits`, `levels` or a rule field) is answered 422 with code \
                 `mixed_forms`, naming the fields.",
        ))
        .into()
}

/// `schema` (an object) with `fields` declared as never valid, a title, and
/// `what` as its description unless it has one.
fn forbid(schema: RefOr<Schema>, fields: &[&str], title: &str, what: &str) -> RefOr<Schema> {
    let RefOr::T(Schema::Object(mut object)) = schema else {
        unreachable!("a derived struct schema is an inline object")
    };
    for field in fields {
        // `{"not": {}}`: no value is valid, not even null.
        let never = ObjectBuilder::new()
            .schema_type(SchemaType::AnyValue)
            .description(Some("Not allowed in this form (422 `mixed_forms`)."))
            .extensions(Some(
                // The builder adds the `x-` itself.
                ExtensionsBuilder::new()
                    .add(NOT_MARKER.trim_start_matches("x-"), serde_json::json!({}))
                    .build(),
            ))
            .build();
        object.properties.insert((*field).to_owned(), never.into());
    }
    object.title = Some(title.to_owned());
    if object.description.is_none() {
        object.description = Some(what.to_owned());
    }
    object.into()
}

/// `schema` (an object) declaring that `window` and `calendar` are never
/// both given (`not` both present and not null); that one of them is
/// required, and the rules of `calendar` (fixed_window, no burst, timezone
/// only with it) are stated in the fields' descriptions and answered 422.
pub(crate) fn window_or_calendar(schema: RefOr<Schema>) -> RefOr<Schema> {
    let RefOr::T(Schema::Object(mut object)) = schema else {
        unreachable!("a derived struct schema is an inline object")
    };
    let not = ExtensionsBuilder::new()
        .add(
            NOT_MARKER.trim_start_matches("x-"),
            // Both present and neither null (a null field is an absent one).
            serde_json::json!({
                "required": ["window", "calendar"],
                "properties": {
                    "window": {"not": {"type": "null"}},
                    "calendar": {"not": {"type": "null"}},
                },
            }),
        )
        .build();
    match &mut object.extensions {
        Some(extensions) => extensions.merge(not),
        None => object.extensions = Some(not),
    }
    object.into()
}

/// One level as documented: a check form without the fields only a whole
/// check takes.
pub struct LevelForms;

impl ToSchema for LevelForms {
    fn name() -> std::borrow::Cow<'static, str> {
        "LevelRequest".into()
    }
}

impl PartialSchema for LevelForms {
    fn schema() -> RefOr<Schema> {
        super::forms::forms(&["cost", "wait_ms", "reservation_ttl", "levels"], "Level")
    }
}

/// The hierarchy form: a policy of the file that names its levels, and the
/// ids its key templates take; the levels check those levels and keys make.
// No schema example: it would name a policy the server may not have.
#[derive(Debug, Deserialize, ToSchema)]
pub struct HierarchyCheckRequest {
    /// A policy of the loaded policies file with `levels` (`GET
    /// /v1/policies` lists them under `hierarchies`). Any other name is
    /// answered 422 with code `unknown_policy`; a policy without levels
    /// with `invalid_request`.
    #[schema(pattern = "^[a-z0-9_.-]{1,64}$")]
    pub policy: String,
    #[schema(value_type = HierarchyIds)]
    pub ids: BTreeMap<String, String>,
    /// Units this request spends on every level, default 1; 0 reports
    /// without spending. At most the smallest capacity among all the
    /// levels' limits; more is 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// Blocking acquire, as in the other forms: when denied, wait up to
    /// this many milliseconds for every level to allow. Default 0.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation of `cost` on every level, to settle with
    /// `POST /v1/settle` (and draw on with `POST /v1/draw`).
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}

/// The value of every id the policy's key templates name, and no other:
/// `{"org": "1", "team": "4", "user": "7"}` makes `org:{org}` the key
/// `org:1`. Each 1 to 512 bytes (`limits.max_key_bytes`), and so is each
/// key built.
// One named schema, so that every form holding it shares one model (a
// generated client refuses two models of one name).
#[derive(ToSchema)]
#[schema(example = json!({"org": "1", "team": "4", "user": "7"}))]
pub struct HierarchyIds(#[allow(dead_code)] BTreeMap<String, String>);

/// The levels form: up to 8 check forms, each on its own key, allowed only
/// if every level allows `cost`, and only then spent on all of them.
#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"levels": [
    {"key": "team:4", "limit": 50000, "window": "1d", "algorithm": "fixed_window"},
    {"key": "user:7", "limit": 20000, "window": "1m"}
], "cost": 1200}))]
pub struct LevelsCheckRequest {
    /// 1 to 8 levels, each a check form of its own (`{"policy", "key"}`,
    /// `{"key", "limits"}` or `{"key", "limit", "window", ...}`) without
    /// `cost`, `wait_ms` or `reservation_ttl`. No two levels may keep the
    /// same counter (the same key and policy, or the same key, algorithm
    /// and window inline); no level may hold a concurrency limit or be a
    /// shadow policy. A level's counters are the ones a check of that
    /// form alone spends.
    #[schema(value_type = Vec<LevelForms>, min_items = 1, max_items = 8)]
    pub levels: Vec<Box<RawValue>>,
    /// Units this request spends on every level, default 1; 0 reports
    /// without spending. At most the smallest capacity among all the
    /// levels' limits; more is 422.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0)]
    pub cost: Option<u64>,
    /// Blocking acquire, as in the other forms: when denied, wait up to
    /// this many milliseconds for every level to allow. Default 0.
    #[serde(default, deserialize_with = "optional_whole_number")]
    #[schema(minimum = 0, maximum = 10_000)]
    pub wait_ms: Option<u64>,
    /// Ask for a reservation of `cost` on every level, to settle with
    /// `POST /v1/settle`, as in the other forms.
    #[serde(default)]
    pub reservation_ttl: Option<WindowSpec>,
}
