//! The OpenAPI document, generated from the handlers and their types. It is
//! served at `/openapi.json`, rendered at `/docs`, printed by
//! `ratekeeper openapi`, and committed as `openapi.yaml` (a test fails when
//! the committed file drifts from this).

use utoipa::OpenApi;

use super::check::{
    AlgorithmName, CheckForms, CheckResponse, LimitResponse, LimitSpec, ResetForms, WindowSpec,
};
use super::error::{ErrorBody, ErrorDetail};
use super::ops::Health;
use super::policies::{PoliciesResponse, PolicyLimitView, PolicyView};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "ratekeeper",
        description = "A rate-limit decision service: ask whether a key may spend units now, get allowed / remaining / retry-after.",
        license(name = "Apache-2.0")
    ),
    paths(super::check::check, super::ops::healthz, super::ops::readyz, super::ops::metrics),
    components(schemas(CheckForms, LimitSpec, CheckResponse, LimitResponse, AlgorithmName, WindowSpec, ErrorBody, ErrorDetail, Health)),
    tags(
        (name = "limits", description = "Rate-limit decisions"),
        (name = "operations", description = "Health, readiness and metrics"),
    )
)]
struct ApiDoc;

/// `GET /v1/policies`, merged into [`ApiDoc`].
#[derive(OpenApi)]
#[openapi(
    paths(super::policies::policies),
    components(schemas(PoliciesResponse, PolicyView, PolicyLimitView))
)]
struct PoliciesDoc;

/// `POST /v1/reset` and `/v1/refund`, merged into [`ApiDoc`].
#[derive(OpenApi)]
#[openapi(
    paths(super::check::adjust::reset, super::check::adjust::refund),
    components(schemas(ResetForms))
)]
struct AdjustDoc;

pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(PoliciesDoc::openapi());
    doc.merge(AdjustDoc::openapi());
    // The crate version would make the file change on every release bump
    // without any API change; pin the document's own version instead.
    doc.info.version = "1".into();
    doc
}

/// The extension key that stands for JSON Schema's `not` (see [`NOT`]).
pub(super) const NOT_MARKER: &str = "x-not";

/// utoipa 5 has no `not` schema, which the request forms need to forbid
/// each other's fields; they carry it as the extension `x-not` (the only
/// free-form key utoipa allows), renamed to `not` in the document as
/// served and committed.
const NOT: &str = "not";

/// The document as JSON, as served at `/openapi.json`.
pub fn json() -> serde_json::Value {
    let mut value = serde_json::to_value(document()).expect("the document serializes");
    rename_not(&mut value);
    value
}

fn rename_not(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            if let Some(not) = map.remove(NOT_MARKER) {
                map.insert(NOT.to_owned(), not);
            }
            map.values_mut().for_each(rename_not);
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(rename_not),
        _ => {}
    }
}

/// The document as YAML, exactly as committed in `openapi.yaml`.
pub fn yaml() -> String {
    let yaml = document().to_yaml().expect("the document serializes");
    // Line by line, so that only the marker key is renamed, never text.
    let marker = format!("{NOT_MARKER}: ");
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        match line.trim_start().strip_prefix(&marker) {
            Some(rest) => {
                out.push_str(&line[..indent]);
                out.push_str(NOT);
                out.push_str(": ");
                out.push_str(rest);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn json_and_yaml_say_not_and_never_the_marker() {
        let json = super::json().to_string();
        assert!(json.contains("\"not\":{}"), "{json}");
        assert!(!json.contains(super::NOT_MARKER));
        let yaml = super::yaml();
        assert!(yaml.contains("not: {}"));
        assert!(!yaml.contains(super::NOT_MARKER));
    }
}
