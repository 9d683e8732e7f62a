//! The docs against what they describe: README.md and every page of
//! `docs/` are held to the shipped files they quote, `config/default.toml`,
//! `openapi.yaml`, each other's headings, and `src/`. (Every metric in
//! `docs/observability.md` is `tests/tooling/prometheus_rules.rs`'s check.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

#[path = "readme_examples/markdown.rs"]
pub mod markdown;
#[path = "readme_examples/schema.rs"]
mod schema;

use markdown::{anchors, code, pages, parse, read, root};
use schema::{answers, openapi, violations};

#[test]
fn the_readme_is_a_front_page_that_links_every_docs_page() {
    let readme = read("README.md");
    let lines = readme.lines().count();
    assert!(lines <= 250, "README.md has {lines} lines; at most 250");
    for (page, _) in pages().iter().filter(|(p, _)| p.starts_with("docs/")) {
        assert!(
            readme.contains(&format!("]({page}")),
            "README.md does not link {page}"
        );
    }
}

#[test]
fn every_file_shown_is_the_shipped_file() {
    let mut checked = BTreeSet::new();
    for (page, text) in pages() {
        for block in parse(&text).0 {
            let Some((kind, path)) = &block.marker else {
                assert!(block.lang != "nginx", "{page}:{}: mark it", block.line);
                continue;
            };
            let file = read(path);
            let at = format!("{page}:{} ({kind} {path})", block.line);
            match kind.as_str() {
                "file" => assert!(block.text == file, "{at}: differs from the file"),
                "excerpt" => {
                    let lines: Vec<&str> = file.lines().map(code).collect();
                    for line in block.text.lines().map(code).filter(|l| !l.is_empty()) {
                        assert!(lines.contains(&line), "{at}: `{line}` is not in the file");
                    }
                }
                _ => panic!("{at}: the marker is `file:` or `excerpt:`"),
            }
            checked.insert(path.clone());
        }
    }
    for path in [
        "examples/nginx/ratekeeper.conf",
        "examples/traefik/dynamic.yml",
        "examples/envoy/ext_authz.yaml",
        "examples/envoy/ratelimit.yaml",
        "examples/envoy/rls.yaml",
        "examples/envoy/ratelimit-tokens.yaml",
    ] {
        assert!(checked.contains(path), "no docs page shows {path} marked");
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

/// Each `section.key = value` of `config/default.toml`, the value as written.
fn default_keys() -> BTreeMap<String, String> {
    let text = read("config/default.toml");
    let (mut section, mut keys) = (String::new(), BTreeMap::new());
    for line in text.lines() {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = name.to_string();
        } else if let Some((key, value)) = line.split_once(" = ")
            && !line.starts_with('#')
        {
            keys.insert(format!("{section}.{key}"), value.to_string());
        }
    }
    let parsed: toml::Table = text.parse().unwrap();
    // Leaves only: a section's sub-table (`[redis.tls]`) holds keys too.
    fn leaves(table: &toml::Table) -> usize {
        let count = |v: &toml::Value| v.as_table().map_or(1, leaves);
        table.values().map(count).sum()
    }
    let count = leaves(&parsed);
    assert_eq!(
        keys.len(),
        count,
        "a key of default.toml this reader missed"
    );
    keys
}

/// The TLS variants of the Envoy and nginx examples are the examples plus
/// their TLS lines (comments aside), so a change to one cannot leave the
/// other behind.
#[test]
fn the_tls_variants_are_the_examples_plus_their_tls_lines() {
    let lines = |path| -> Vec<String> {
        let text = read(path);
        let code = text.lines().filter(|l| !code(l).is_empty());
        code.map(str::to_string).collect()
    };
    // Envoy: the cluster's transport_socket block, appended to the file.
    let plain = lines("examples/envoy/ratelimit.yaml");
    let tls = lines("examples/envoy/ratelimit-tls.yaml");
    let at = tls
        .iter()
        .position(|l| l.trim() == "transport_socket:")
        .expect("a transport_socket block");
    assert_eq!(
        tls[..at],
        plain[..],
        "ratelimit-tls.yaml drifted from ratelimit.yaml"
    );
    assert!(tls[at..].iter().any(|l| l.contains("UpstreamTlsContext")));
    // nginx: https:// in proxy_pass, and the proxy_ssl_* lines.
    let plain = lines("examples/nginx/ratekeeper.conf");
    let tls = lines("examples/nginx/ratekeeper-tls.conf");
    let rest: Vec<String> = tls
        .iter()
        .filter(|l| !l.trim().starts_with("proxy_ssl_"))
        .map(|l| l.replace("https://ratekeeper", "http://ratekeeper"))
        .collect();
    assert_eq!(
        rest, plain,
        "ratekeeper-tls.conf drifted from ratekeeper.conf"
    );
    let ssl = tls.iter().filter(|l| l.trim().starts_with("proxy_ssl_"));
    assert_eq!(ssl.count(), 7);
}

#[test]
fn the_configuration_page_lists_every_key_with_its_variable_and_default() {
    let page = read("docs/configuration.md");
    let mut rows = BTreeMap::new();
    for line in page.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = line.split(" | ").collect();
        let key = cells[0].trim_start_matches("| ").trim_matches('`');
        rows.insert(
            key.to_string(),
            (cells[1].to_string(), cells[2].to_string()),
        );
    }
    let keys = default_keys();
    for (key, value) in &keys {
        // `redis.tls.ca_file` is `RATEKEEPER_REDIS__TLS__CA_FILE`.
        let env = format!("`RATEKEEPER_{}`", key.to_uppercase().replace('.', "__"));
        let row = rows.get(key.as_str());
        let row = row.unwrap_or_else(|| panic!("docs/configuration.md lacks {key}"));
        assert_eq!(
            row,
            &(env, format!("`{value}`")),
            "{key}: variable, default"
        );
    }
    let extra: Vec<_> = rows.keys().filter(|k| !keys.contains_key(*k)).collect();
    assert!(
        extra.is_empty(),
        "docs/configuration.md lists {extra:?}, not in default.toml"
    );
    // And both are what the readers declare: the keys they ask for.
    let declared = ratekeeper::config::Settings::declared_keys();
    let listed: Vec<&str> = rows.keys().map(String::as_str).collect();
    assert_eq!(
        listed,
        declared.into_iter().collect::<Vec<_>>(),
        "docs/configuration.md against the keys src/config reads"
    );
}

#[test]
fn every_json_answer_shown_is_one_the_api_can_give() {
    let api = openapi();
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (page, text) in pages() {
        for block in parse(&text).0 {
            if !["console", "sh", "json", ""].contains(&block.lang.as_str()) {
                continue;
            }
            let at = format!("{page}:{}", block.line);
            for (path, value) in answers(&block, &at) {
                let schema = if value.get("error").is_some() {
                    serde_json::json!({"$ref": "#/components/schemas/ErrorBody"})
                } else {
                    let path = templated(&api, &path);
                    let operations = api["paths"][path.as_str()].as_object();
                    let operations = operations.unwrap_or_else(|| panic!("{at}: no path {path}"));
                    // A path of several methods: its GET's answer (the
                    // entry a PUT also answers with).
                    let operation = operations
                        .get("get")
                        .or(operations.values().next())
                        .unwrap();
                    operation["responses"]["200"]["content"]["application/json"]["schema"].clone()
                };
                violations(
                    &value,
                    &schema,
                    &api,
                    &format!("{at} {path}"),
                    &mut problems,
                );
                checked += 1;
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 20,
        "only {checked} answers found: is the reader broken?"
    );
}

/// The document's path that `path` (`/v1/blocks/k1`) is an instance of
/// (`/v1/blocks/{key}`): itself when the document has it.
fn templated(api: &serde_json::Value, path: &str) -> String {
    let Some(paths) = api["paths"].as_object() else {
        return path.to_string();
    };
    if paths.contains_key(path) {
        return path.to_string();
    }
    let segments: Vec<&str> = path.split('/').collect();
    paths
        .keys()
        .find(|template| {
            let parts: Vec<&str> = template.split('/').collect();
            parts.len() == segments.len()
                && parts
                    .iter()
                    .zip(&segments)
                    .all(|(t, s)| t == s || (t.starts_with('{') && t.ends_with('}')))
        })
        .cloned()
        .unwrap_or_else(|| path.to_string())
}

#[test]
fn every_relative_link_and_anchor_resolves() {
    let mut broken = Vec::new();
    for (page, text) in pages() {
        let dir = Path::new(&page).parent().unwrap().to_path_buf();
        for line in parse(&text).1 {
            for piece in line.split("](").skip(1) {
                let target = &piece[..piece.find(')').unwrap_or(piece.len())];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (file, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file: PathBuf = if file.is_empty() {
                    page.clone().into()
                } else {
                    dir.join(file)
                };
                let Ok(real) = root().join(&file).canonicalize() else {
                    broken.push(format!("{page}: {target}: no such file"));
                    continue;
                };
                let is_md = real.extension().is_some_and(|e| e == "md");
                if !anchor.is_empty() && is_md {
                    let text = std::fs::read_to_string(&real).unwrap();
                    if !anchors(&text).contains(anchor) {
                        broken.push(format!("{page}: {target}: no such heading"));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
}

#[test]
fn the_code_map_lists_exactly_what_src_holds() {
    let page = read("docs/development.md");
    let map = parse(&page)
        .0
        .into_iter()
        .find(|b| b.text.starts_with("src/\n"));
    let map = map.expect("docs/development.md: a ```text block that starts with src/");
    let (mut listed, mut stack) = (BTreeSet::new(), Vec::<String>::new());
    for line in map.text.lines() {
        let depth = (line.len() - line.trim_start().len()) / 2;
        let name = line.split_whitespace().next().unwrap();
        stack.truncate(depth);
        let path = format!("{}{name}", stack.concat());
        assert!(listed.insert(path.clone()), "{path} listed twice");
        if name.ends_with('/') {
            stack.push(name.to_string());
        }
    }
    let mut present = BTreeSet::new();
    let mut dirs = vec![root().join("src")];
    while let Some(dir) = dirs.pop() {
        let rel = dir.strip_prefix(root()).unwrap().display().to_string();
        present.insert(format!("{rel}/"));
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                present.insert(path.strip_prefix(root()).unwrap().display().to_string());
            }
        }
    }
    let missing: Vec<_> = present.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&present).collect();
    assert!(missing.is_empty(), "the code map lacks {missing:?}");
    assert!(
        stale.is_empty(),
        "the code map lists {stale:?}, which src/ lacks"
    );
}

#[test]
fn the_crate_docs_link_the_docs_and_the_suite_builds_them() {
    let lib = read("src/lib.rs");
    for page in ["README.md", "docs/development.md"] {
        assert!(lib.contains(page), "src/lib.rs does not point to {page}");
    }
    let script = read("scripts/test.sh");
    let doc = script.find("RUSTDOCFLAGS=\"-D warnings\" cargo doc --no-deps --locked");
    let test = script.find("cargo nextest run --locked --no-fail-fast \"${args[@]}\"");
    assert!(
        doc.is_some() && doc < test,
        "scripts/test.sh builds the docs before the tests"
    );
    // nextest runs no doc tests: cargo test runs them as a phase of their own.
    assert!(
        script.contains("cargo test --locked --doc"),
        "scripts/test.sh runs the doc tests"
    );
    // The server matrix docs/development.md describes.
    let matrix = script.find("${RATEKEEPER_TEST_MATRIX-valkey8 redis8}");
    let suites =
        script.find("cargo nextest run --locked --no-fail-fast --test stores --test faults");
    assert!(
        test < matrix && matrix < suites,
        "scripts/test.sh runs the store and fault suites on valkey8 and redis8 after the whole suite"
    );
    let development = read("docs/development.md");
    assert!(development.contains("`RATEKEEPER_TEST_MATRIX=\"\"` skips it"));
}
