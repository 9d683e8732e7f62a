//! How a policy's name is judged (valid, not a reserved label) and how a
//! name is written in a problem's path: shared by plain policies and
//! policies with levels.

use toml::Spanned;

use super::problem::Report;
use crate::domain::validate_name;

/// How a TOML key is written in a path: bare when it may be, else quoted.
pub(super) fn toml_key(key: &str) -> String {
    let bare = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if bare {
        key.to_string()
    } else {
        format!("{key:?}")
    }
}

/// The `policy` label of checks that carry their own limits.
const INLINE: &str = "inline";

/// The `policy` label of levels checks (`domain::level`).
const LEVELS: &str = "levels";

/// A policy's name: a valid name, and not the one inline checks are
/// counted under.
pub(super) fn check_policy_name(path: &str, name: &Spanned<String>, report: &mut Report) {
    if let Err(e) = validate_name(path, name.get_ref()) {
        report.add(path.to_string(), name.span(), e.message);
    } else if name.get_ref() == INLINE {
        // Metrics label inline checks `policy="inline"`: a policy of that
        // name would be counted as them.
        report.add(
            path.to_string(),
            name.span(),
            format!("{INLINE:?} is reserved for checks that carry their own limits"),
        );
    } else if name.get_ref() == LEVELS {
        // And levels checks `policy="levels"` (`metrics::decisions`).
        report.add(
            path.to_string(),
            name.span(),
            format!("{LEVELS:?} is reserved for checks over several levels"),
        );
    }
}
