//! Issue 27 part 5: every error answer the docs show is run against the
//! service and must be what it answers, byte for byte in JSON: messages
//! cannot drift from the binary again. Each `$ curl` to `localhost:8080`
//! (or `curl` in a `sh` block) followed by an `{"error": ...}` line is sent,
//! as written, to an instance on the embedded store with the example
//! policies (the quick start's); one that sends an `Authorization` header,
//! to such an instance with bearer tokens, `$CHECK` being a `check` token.
//! A settle that names a reservation is left out: its id was made by a
//! check in the docs' own session, and is unknown to any other instance
//! (`tests/api/settle*.rs` hold those answers).

use crate::support;

use serde_json::Value;
use support::{TestApp, settings};

use crate::readme_examples::markdown::{pages, parse};

/// One shown request: method, path with query, body, the token it sends.
struct Shown {
    at: String,
    method: &'static str,
    path: String,
    body: Option<String>,
    authorization: Option<String>,
    answer: Value,
}

/// The `check` token of the instance with tokens: `$CHECK` in the docs.
const CHECK: &str = "docs-check-token-0123456789abcdef0123";

/// The text between `open` (included in the search) and the next `close`.
fn between<'a>(text: &'a str, open: &str, close: char) -> Option<&'a str> {
    let start = text.find(open)? + open.len();
    let len = text[start..].find(close)?;
    Some(&text[start..start + len])
}

/// The requests of one block whose answer is an error.
fn shown_errors(page: &str, line: usize, text: &str) -> Vec<Shown> {
    let (mut found, mut command) = (Vec::new(), String::new());
    for (i, raw) in text.lines().enumerate() {
        let raw = raw.trim_start_matches("# ");
        let starts = raw.starts_with("$ ") || raw.starts_with("curl ");
        if starts || !command.is_empty() && command.ends_with('\\') {
            if starts {
                command.clear();
            }
            command.truncate(command.trim_end_matches('\\').len());
            command.push_str(raw.trim_start_matches("$ "));
            continue;
        }
        if raw.starts_with("HTTP/") || raw.contains(": ") && !raw.starts_with('{') {
            // A header of `curl -si`'s answer.
            continue;
        }
        let replayable = !command.contains("\"reservation\": \"");
        if raw.starts_with("{\"error\"") && command.contains("localhost:8080") && replayable {
            let url = &command[command.find("localhost:8080").unwrap() + "localhost:8080".len()..];
            let path = url
                .split([' ', '\'', '"'])
                .next()
                .unwrap_or_default()
                .to_string();
            let body = between(&command, "-d '", '\'').map(str::to_string);
            let authorization = between(&command, "-H 'Authorization:", '\'')
                .or_else(|| between(&command, "-H \"Authorization:", '"'))
                .map(|value| value.trim().replace("$CHECK", CHECK));
            found.push(Shown {
                at: format!("{page}:{}", line + i + 1),
                method: if body.is_some() { "POST" } else { "GET" },
                path,
                body,
                authorization,
                answer: serde_json::from_str(raw).expect("an error answer is JSON"),
            });
        }
        command.clear();
    }
    found
}

#[tokio::test]
async fn every_error_answer_shown_is_what_the_service_answers() {
    let mut config = settings(None);
    config.policies.file =
        Some(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/policies.example.toml"));
    let plain = TestApp::spawn(config.clone()).await;
    let tokens = support::fresh_dir("docs-errors").join("tokens");
    std::fs::write(&tokens, format!("check {CHECK}\n")).unwrap();
    config.auth.tokens_file = Some(tokens);
    let with_tokens = TestApp::spawn(config).await;
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (page, text) in pages() {
        for block in parse(&text).0 {
            let shown = shown_errors(&page, block.line, &block.text);
            // A block about tokens runs on the instance that has them.
            let app = if shown.iter().any(|s| s.authorization.is_some()) {
                &with_tokens
            } else {
                &plain
            };
            for shown in shown {
                let mut request = match shown.method {
                    "POST" => app
                        .http
                        .post(app.url(&shown.path))
                        .header("content-type", "application/json")
                        .body(shown.body.clone().unwrap_or_default()),
                    _ => app.http.get(app.url(&shown.path)),
                };
                if let Some(value) = &shown.authorization {
                    request = request.header("authorization", value);
                }
                let got: Value = request.send().await.unwrap().json().await.unwrap();
                if got != shown.answer {
                    problems.push(format!(
                        "{} {} {}\n  docs:    {}\n  service: {got}",
                        shown.at, shown.method, shown.path, shown.answer
                    ));
                }
                checked += 1;
            }
        }
    }
    plain.stop().await;
    with_tokens.stop().await;
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    assert!(
        checked >= 10,
        "only {checked} error examples found: is the reader broken?"
    );
}
