//! JSON Schema's `not`, which utoipa 5 lacks: the request forms carry it
//! as the extension `x-not`, renamed to `not` in the document as served and
//! committed. Apart from `openapi.rs`, which imports the forms, so that the
//! forms can name the marker without importing the document.

/// The extension key that stands for JSON Schema's `not` (see [`NOT`]).
pub(crate) const NOT_MARKER: &str = "x-not";

/// utoipa 5 has no `not` schema, which the request forms need to forbid
/// each other's fields; they carry it as the extension `x-not` (the only
/// free-form key utoipa allows), renamed to `not` in the document as
/// served and committed.
const NOT: &str = "not";

/// Every `x-not` key of a JSON document renamed to `not`.
pub(super) fn rename_not(value: &mut serde_json::Value) {
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

/// Every `x-not` key of a YAML document renamed to `not`.
pub(super) fn rename_not_in_yaml(yaml: &str) -> String {
    // Line by line, so that only the marker key is renamed, never text.
    // The key alone on its line (`x-not:`, a map below) or with its value.
    let marker = format!("{NOT_MARKER}:");
    let mut out = String::with_capacity(yaml.len());
    for line in yaml.lines() {
        let indent = line.len() - line.trim_start().len();
        match line.trim_start().strip_prefix(&marker) {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => {
                out.push_str(&line[..indent]);
                out.push_str(NOT);
                out.push(':');
                out.push_str(rest);
            }
            _ => out.push_str(line),
        }
        out.push('\n');
    }
    out
}
