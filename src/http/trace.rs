//! Traces of the HTTP API (`[otel]`): a span per `/v1` request, a child of
//! the caller's `traceparent`, named by its method and route template
//! (never by its path, which may hold a key). Made where the connection
//! hands a request to the router (`server.rs`), before routing and without
//! a layer of its own: a request the sampler does not take costs a path
//! prefix and a header lookup, and builds nothing.

use std::future::Future;
use std::sync::OnceLock;

use axum::extract::Request;
use tracing::Instrument;

use crate::telemetry::otel::{self, Server, Traced};

/// A sampled `/v1` request's span; `None` for any other request.
pub(super) fn request_span<B>(request: &Request<B>) -> Option<Traced> {
    let path = request.uri().path();
    if !path.starts_with("/v1/") {
        return None;
    }
    let sampled = otel::sample(request.headers())?;
    let server = Server::Http {
        method: method_name(request.method()),
        route: route_of(path),
    };
    Some(otel::server_span(sampled, server))
}

/// The method's name, `_OTHER` for one that is not HTTP's own (as the
/// semantic conventions say): a client's made-up method must not name
/// spans at will.
fn method_name(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    [
        Method::GET,
        Method::POST,
        Method::PUT,
        Method::DELETE,
        Method::PATCH,
        Method::HEAD,
        Method::OPTIONS,
        Method::CONNECT,
        Method::TRACE,
    ]
    .iter()
    .find(|m| *m == method)
    .map_or("_OTHER", |m| m.as_str())
}

/// `answer` within `traced`'s span, its status recorded.
pub(super) async fn traced<E>(
    traced: Traced,
    answer: impl Future<Output = Result<axum::response::Response, E>>,
) -> Result<axum::response::Response, E> {
    let response = answer.instrument(traced.span().clone()).await;
    if let Ok(response) = &response {
        let status = i64::from(response.status().as_u16());
        traced.record_status("http.response.status_code", status);
    }
    response
}

/// The `/v1` route templates, as the router was built with them (by
/// `http::router`, which knows the routes: this module must not, as the
/// connection that calls it sits below them).
static ROUTES: OnceLock<Vec<&'static str>> = OnceLock::new();

/// Records the route templates; the first call's list stays.
pub(super) fn know_routes(templates: impl Iterator<Item = &'static str>) {
    let _ = ROUTES.get_or_init(|| templates.collect());
}

/// The route template `path` would match; `""` when none does (its 404).
/// Only for sampled requests.
fn route_of(path: &str) -> &'static str {
    ROUTES
        .get()
        .and_then(|routes| routes.iter().find(|t| matches(t, path)))
        .copied()
        .unwrap_or("")
}

/// Whether `path` matches `template`: a `{name}` segment takes one
/// non-empty segment, a `{*name}` segment the rest.
fn matches(template: &str, path: &str) -> bool {
    let mut want = template.split('/');
    let mut got = path.split('/');
    loop {
        match (want.next(), got.next()) {
            (None, None) => return true,
            (Some(w), Some(g)) if w.starts_with("{*") => {
                return !g.is_empty() || got.next().is_some();
            }
            (Some(w), Some(g)) if w.starts_with('{') => {
                if g.is_empty() {
                    return false;
                }
            }
            (Some(w), Some(g)) if w == g => {}
            _ => return false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{know_routes, matches, method_name, route_of};

    #[test]
    fn a_path_is_named_by_its_route_template_never_by_its_values() {
        // Some of the router's templates (`http::router` gives them all).
        let templates = [
            "/v1/check",
            "/v1/auth/{policy}",
            "/v1/auth/{policy}/",
            "/v1/auth/{policy}/{*rest}",
            "/v1/blocks/{key}",
        ];
        know_routes(templates.into_iter());
        assert_eq!(route_of("/v1/check"), "/v1/check");
        assert_eq!(route_of("/v1/auth/api"), "/v1/auth/{policy}");
        assert_eq!(route_of("/v1/auth/api/"), "/v1/auth/{policy}/");
        assert_eq!(
            route_of("/v1/auth/api/orders/1"),
            "/v1/auth/{policy}/{*rest}"
        );
        assert_eq!(route_of("/v1/blocks/secret-key"), "/v1/blocks/{key}");
        assert_eq!(route_of("/v1/nope"), "");
        assert!(!matches("/v1/blocks/{key}", "/v1/blocks/"));
        assert!(!matches("/v1/check", "/v1/check/x"));
        assert_eq!(method_name(&"POST".parse().unwrap()), "POST");
        assert_eq!(method_name(&"MADE-UP".parse().unwrap()), "_OTHER");
    }
}
