//! The JSON answers the docs show, and what `openapi.yaml` says an answer
//! of that endpoint may hold.

use serde_json::Value;

use super::markdown::{Block, read};

/// The path a command line asks, by curl's URL or by the operator CLI.
fn endpoint(line: &str) -> Option<String> {
    if let Some(at) = line.find("localhost:8080/") {
        let path = &line[at + "localhost:8080".len()..];
        let end = path
            .find(|c: char| "'\" ?".contains(c))
            .unwrap_or(path.len());
        return Some(path[..end].to_string());
    }
    let cli = line.trim_start_matches("$ ").trim_start();
    [
        ("ratekeeper check ", "/v1/check"),
        ("ratekeeper reset ", "/v1/reset"),
        ("ratekeeper policies show", "/v1/policies"),
        ("ratekeeper top ", "/v1/top"),
    ]
    .into_iter()
    .find(|(command, _)| cli.starts_with(command))
    .map(|(_, path)| path.to_string())
}

/// Every JSON answer in `block`, with the path of the command before it.
pub fn answers(block: &Block, at: &str) -> Vec<(String, Value)> {
    let (mut found, mut path, mut pending) = (Vec::new(), None, String::new());
    for line in block.text.lines() {
        let line = line.trim_start_matches("# ");
        // An answer starts a line: `{"...` on one line, `{` pretty-printed.
        if pending.is_empty() && !(line.starts_with("{\"") || line == "{") {
            path = endpoint(line).or(path);
            continue;
        }
        pending += line;
        if let Ok(value) = serde_json::from_str::<Value>(&pending) {
            let path = path
                .clone()
                .unwrap_or_else(|| panic!("{at}: whose answer is {pending}?"));
            found.push((path, value));
            pending.clear();
        }
    }
    assert!(pending.is_empty(), "{at}: not JSON: {pending}");
    found
}

pub fn openapi() -> Value {
    serde_norway::from_str(&read("openapi.yaml")).unwrap()
}

/// What is wrong with `value` as an instance of `schema`: a missing
/// required property, an undeclared one, a wrong type.
pub fn violations(value: &Value, schema: &Value, api: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(name) = schema["$ref"].as_str() {
        let name = name.trim_start_matches("#/components/schemas/");
        return violations(value, &api["components"]["schemas"][name], api, at, out);
    }
    if let Some(variants) = schema["oneOf"].as_array() {
        let fits = |s: &Value| {
            let mut v = Vec::new();
            violations(value, s, api, at, &mut v);
            v.is_empty()
        };
        if !variants.iter().any(fits) {
            out.push(format!("{at}: {value} fits none of its variants"));
        }
        return;
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    let number = kind == "integer" && types.contains(&"number");
    if !types.is_empty() && !types.contains(&kind) && !number {
        return out.push(format!("{at}: {value} is not of type {types:?}"));
    }
    match value {
        Value::Object(fields) => {
            for required in schema["required"].as_array().into_iter().flatten() {
                let name = required.as_str().unwrap();
                if !fields.contains_key(name) {
                    out.push(format!("{at}: `{name}` is missing"));
                }
            }
            for (name, field) in fields {
                let at = format!("{at}.{name}");
                match (&schema["properties"][name], &schema["additionalProperties"]) {
                    (Value::Null, Value::Null) => out.push(format!("{at} is not in the schema")),
                    (Value::Null, extra) => violations(field, extra, api, &at, out),
                    (declared, _) => violations(field, declared, api, &at, out),
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                violations(item, &schema["items"], api, &format!("{at}[{i}]"), out);
            }
        }
        _ => {}
    }
}
