//! The OpenAPI document, generated from the handlers and their types. It is
//! served at `/openapi.json`, rendered at `/docs`, printed by
//! `ratekeeper openapi`, and committed as `openapi.yaml` (a test fails when
//! the committed file drifts from this).

use utoipa::OpenApi;

use super::check::{AlgorithmName, CheckRequest, CheckResponse, WindowSpec};
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
    components(schemas(CheckRequest, CheckResponse, AlgorithmName, WindowSpec, ErrorBody, ErrorDetail, Health)),
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

pub fn document() -> utoipa::openapi::OpenApi {
    let mut doc = ApiDoc::openapi();
    doc.merge(PoliciesDoc::openapi());
    // The crate version would make the file change on every release bump
    // without any API change; pin the document's own version instead.
    doc.info.version = "1".into();
    doc
}

/// The document as YAML, exactly as committed in `openapi.yaml`.
pub fn yaml() -> String {
    document().to_yaml().expect("the document serializes")
}
