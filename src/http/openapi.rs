//! The OpenAPI document, generated from the handlers and their types. It is
//! served at `/openapi.json`, rendered at `/docs`, printed by
//! `ratekeeper openapi`, and committed as `openapi.yaml` (a test fails when
//! the committed file drifts from this).

use utoipa::openapi::path::{Operation, PathItem};
use utoipa::openapi::security::{Http, HttpAuthScheme, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{Content, HeaderBuilder, Ref, ResponseBuilder};
use utoipa::{Modify, OpenApi};

use crate::domain::auth::Scope;

use super::error::{ErrorBody, ErrorDetail};
pub(super) use super::not_marker::NOT_MARKER;
use super::not_marker::{rename_not, rename_not_in_yaml};
use super::ops::Health;

/// The document's head and the operational routes; each `/v1` endpoint's
/// part comes from its line in `http::routes`.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "ratekeeper",
        description = "A rate-limit decision service: ask whether a key may spend units now, get allowed / remaining / retry-after.",
        license(name = "Apache-2.0")
    ),
    paths(super::ops::healthz, super::ops::readyz, super::ops::metrics),
    components(schemas(ErrorBody, ErrorDetail, Health)),
    tags(
        (name = "limits", description = "Rate-limit decisions"),
        (name = "operations", description = "Health, readiness and metrics"),
        (name = "tenants", description = "Overrides, blocks and exemptions set at runtime, and their audit trail"),
    )
)]
struct ApiDoc;

pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    for endpoint_doc in super::routes::endpoints().filter_map(|e| e.doc) {
        doc.merge(endpoint_doc());
    }
    // After the merges, so the operations merged in are covered too.
    BearerAuth.modify(&mut doc);
    // An inline limit takes a window or a calendar, as the single rule does.
    if let Some(components) = doc.components.as_mut()
        && let Some(spec) = components.schemas.remove("LimitSpec")
    {
        components
            .schemas
            .insert("LimitSpec".into(), super::check::window_or_calendar(spec));
    }
    // The crate version would make the file change on every release bump
    // without any API change; pin the document's own version instead.
    doc.info.version = "1".into();
    doc
}

/// The name of the bearer security scheme in the document.
const BEARER: &str = "bearer";

/// `auth.tokens_file`: the bearer scheme, optional on every `/v1`
/// operation (required only when the file is set) (the scope by [`super::bearer::required_scope`], the same
/// table the middleware uses), with their 401 and, for admin routes, 403.
struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let scheme = Http::builder()
            .scheme(HttpAuthScheme::Bearer)
            .description(Some(
                "A token of auth.tokens_file, when set (without it, no authentication). \
                 An `admin` token covers every operation; a `check` token those that \
                 document no 403 (insufficient_scope).",
            ))
            .build();
        doc.components
            .get_or_insert_with(Default::default)
            .add_security_scheme(BEARER, SecurityScheme::Http(scheme));
        for (path, item) in doc.paths.paths.iter_mut() {
            let Some(scope) = super::bearer::required_scope(path, false) else {
                continue;
            };
            for operation in operations(item) {
                require_bearer(operation, scope);
            }
        }
    }
}

fn operations(item: &mut PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .filter_map(Option::as_mut)
}

fn require_bearer(operation: &mut Operation, scope: Scope) {
    let no_scopes: [&str; 0] = [];
    // Either requirement satisfies: bearer when auth.tokens_file is set,
    // the empty one (no authentication) when it is not.
    operation.security = Some(vec![
        SecurityRequirement::new(BEARER, no_scopes),
        SecurityRequirement::default(),
    ]);
    let error = |description: &str, challenge: &str| {
        ResponseBuilder::new()
            .description(description)
            .header(
                "WWW-Authenticate",
                HeaderBuilder::new()
                    .schema(utoipa::openapi::schema::Object::with_type(
                        utoipa::openapi::schema::Type::String,
                    ))
                    .description(Some(challenge))
                    .build(),
            )
            .content(
                "application/json",
                Content::new(Some(Ref::from_schema_name("ErrorBody"))),
            )
            .build()
    };
    let responses = &mut operation.responses.responses;
    responses.insert(
        "401".into(),
        error(
            "No bearer token (missing_token), or not a valid one (invalid_token); \
             only when auth.tokens_file is set",
            r#"Bearer realm="ratekeeper"[, error="invalid_token"]"#,
        )
        .into(),
    );
    // Most operations document a 400 already (malformed JSON); those that
    // don't get this one.
    responses.entry("400".into()).or_insert_with(|| {
        error(
            "A malformed Authorization header (invalid_request); only when \
             auth.tokens_file is set",
            r#"Bearer realm="ratekeeper", error="invalid_request""#,
        )
        .into()
    });
    if scope == Scope::Admin {
        responses.insert(
            "403".into(),
            error(
                "A check token on an admin route (insufficient_scope)",
                r#"Bearer realm="ratekeeper", error="insufficient_scope", scope="admin""#,
            )
            .into(),
        );
    }
}

/// The document as JSON, as served at `/openapi.json`.
pub fn json() -> serde_json::Value {
    let mut value = serde_json::to_value(document()).expect("the document serializes");
    rename_not(&mut value);
    value
}

/// The document as YAML, exactly as committed in `openapi.yaml`.
pub fn yaml() -> String {
    let yaml = document().to_yaml().expect("the document serializes");
    rename_not_in_yaml(&yaml)
}

#[cfg(test)]
mod tests {
    /// Authentication is optional (only with auth.tokens_file): every
    /// `/v1` operation accepts the bearer scheme or nothing.
    #[test]
    fn v1_operations_take_a_bearer_token_or_nothing() {
        let json = super::json();
        let mut seen = 0;
        for (path, item) in json["paths"].as_object().unwrap() {
            for (method, operation) in item.as_object().unwrap() {
                let security = &operation["security"];
                if path.starts_with("/v1/") {
                    let want = serde_json::json!([{"bearer": []}, {}]);
                    assert_eq!(security, &want, "{method} {path}");
                    seen += 1;
                } else {
                    assert!(security.is_null(), "{method} {path}");
                }
            }
        }
        assert!(seen >= 4, "{seen}");
    }

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
