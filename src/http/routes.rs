//! Every `/v1` endpoint once: its path, the handler that answers it, the
//! bearer scope it needs and its part of the OpenAPI document. The router
//! (`http::router`), the bearer middleware (`http::bearer`) and the
//! document (`http::openapi`) are all read off this one table, so an
//! endpoint is one line beside its handler: it cannot be served without a
//! scope, nor documented at a path it is not served at.

use super::endpoint::Endpoint;

/// Every `/v1` endpoint: the checks and their adjustments, then the rest.
pub(super) fn endpoints() -> impl Iterator<Item = &'static Endpoint> {
    super::check::ENDPOINTS
        .iter()
        .chain(super::auth::ENDPOINTS)
        .chain([&super::policies::ENDPOINT, &super::top::ENDPOINT])
        .chain(super::tenants::ENDPOINTS)
}

#[cfg(test)]
mod tests {
    use super::endpoints;

    /// axum panics on a path routed twice; the bearer table would give the
    /// second line's scope to nobody.
    #[test]
    fn no_path_is_listed_twice() {
        let mut paths: Vec<&str> = endpoints().map(|e| e.path).collect();
        let listed = paths.len();
        paths.sort_unstable();
        paths.dedup();
        assert_eq!(paths.len(), listed, "{paths:?}");
    }

    #[test]
    fn every_endpoint_is_under_v1() {
        for endpoint in endpoints() {
            assert!(endpoint.path.starts_with("/v1/"), "{}", endpoint.path);
            assert!(endpoint.covers(endpoint.path), "{}", endpoint.path);
        }
    }
}
