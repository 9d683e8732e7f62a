//! `openapi.yaml` is the document the code generates, byte for byte.

#[test]
fn committed_openapi_yaml_matches_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.yaml");
    let committed = std::fs::read_to_string(path).expect("openapi.yaml exists at the top level");
    let generated = ratekeeper::http::openapi::yaml();
    assert!(
        committed == generated,
        "openapi.yaml is out of date with the code; regenerate it with\n\n    cargo run -- openapi > openapi.yaml\n"
    );
}
