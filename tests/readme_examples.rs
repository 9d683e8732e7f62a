//! The README shows the shipped proxy examples; the tests run the files.
//! These keep the two from drifting apart: the nginx file is shown whole,
//! the Traefik and Envoy ones as excerpts whose every line of code is in
//! the file.

use std::path::Path;

fn read(path: &str) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(root.join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The fenced blocks of `markdown` in `lang`, in order.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<&'a str> {
    let fence = format!("```{lang}\n");
    markdown
        .split(fence.as_str())
        .skip(1)
        .map(|rest| &rest[..rest.find("```").expect("an unclosed block")])
        .collect()
}

/// The README block of `lang` that contains `marker`.
fn block_with<'a>(readme: &'a str, lang: &str, marker: &str) -> &'a str {
    blocks(readme, lang)
        .into_iter()
        .find(|b| b.contains(marker))
        .unwrap_or_else(|| panic!("no ```{lang} block in README.md contains {marker:?}"))
}

/// A YAML line without its comment and indentation (the README may
/// annotate an excerpt differently from the file).
fn code(line: &str) -> &str {
    let line = line.trim();
    if line.starts_with('#') {
        return "";
    }
    line.find(" #").map_or(line, |i| line[..i].trim_end())
}

/// Every line of code in `excerpt` is a line of `file`.
fn assert_excerpt(excerpt: &str, file: &str, path: &str) {
    let lines: Vec<&str> = file.lines().map(code).collect();
    for line in excerpt.lines().map(code).filter(|l| !l.is_empty()) {
        assert!(
            lines.contains(&line),
            "README.md shows `{line}` from {path}, which the file does not have"
        );
    }
}

#[test]
fn the_readme_shows_the_nginx_example_as_it_is() {
    let readme = read("README.md");
    let path = "examples/nginx/ratekeeper.conf";
    let shown = block_with(&readme, "nginx", "auth_request");
    assert_eq!(
        shown,
        read(path),
        "README.md's nginx block differs from {path}"
    );
}

#[test]
fn the_readme_excerpts_of_traefik_and_envoy_are_in_the_files() {
    let readme = read("README.md");
    for (lang, marker, path) in [
        ("yaml", "forwardAuth:", "examples/traefik/dynamic.yml"),
        (
            "yaml",
            "envoy.filters.http.ext_authz",
            "examples/envoy/ext_authz.yaml",
        ),
        ("yaml", "request_headers:", "examples/envoy/ratelimit.yaml"),
        ("yaml", "requests_per_unit", "examples/envoy/rls.yaml"),
        (
            "yaml",
            "initial_metadata:",
            "examples/envoy/ratelimit-tokens.yaml",
        ),
    ] {
        assert_excerpt(block_with(&readme, lang, marker), &read(path), path);
    }
}

/// The tokens variant of the Envoy rate limit example is the example plus
/// its `initial_metadata` block, line for line (comments aside), so a
/// change to one cannot leave the other behind.
#[test]
fn the_envoy_tokens_variant_is_the_example_plus_initial_metadata() {
    let lines = |path| -> Vec<String> {
        let text = read(path);
        let code = text.lines().filter(|l| !code(l).is_empty());
        code.map(str::to_string).collect()
    };
    let plain = lines("examples/envoy/ratelimit.yaml");
    let tokens = lines("examples/envoy/ratelimit-tokens.yaml");
    let at = tokens
        .iter()
        .position(|l| l.trim() == "initial_metadata:")
        .expect("an initial_metadata block");
    let added: Vec<&str> = tokens[at..at + 3].iter().map(|l| l.trim()).collect();
    assert_eq!(
        added,
        [
            "initial_metadata:",
            "- key: authorization",
            "value: \"Bearer <check token>\"",
        ]
    );
    let rest: Vec<&String> = tokens[..at].iter().chain(&tokens[at + 3..]).collect();
    let plain: Vec<&String> = plain.iter().collect();
    assert_eq!(
        rest, plain,
        "ratelimit-tokens.yaml drifted from ratelimit.yaml"
    );
}
