//! A policy's forward-auth settings from the file: `key_from`,
//! `deny_status` and `missing_key_status`, each problem with its place.

use std::ops::Range;

use toml::Spanned;

use super::problem::Report;
use super::raw::RawPolicy;
use crate::domain::forward::{ForwardAuth, KeySpec};

/// Entries of one `key_from`: a proxy tries each per request.
const MAX_KEY_FROM: usize = 16;

pub(super) fn build_forward(path: &str, raw: &RawPolicy, report: &mut Report) -> ForwardAuth {
    let mut forward = ForwardAuth::default();
    if let Some(list) = &raw.key_from {
        let at = format!("{path}.key_from");
        let entries = list.get_ref();
        if entries.is_empty() || entries.len() > MAX_KEY_FROM {
            report.add(
                at.clone(),
                list.span(),
                format!(
                    "must list 1 to {MAX_KEY_FROM} key sources, got {}",
                    entries.len()
                ),
            );
        }
        let mut specs = Vec::with_capacity(entries.len());
        for (i, entry) in entries.iter().enumerate() {
            match KeySpec::parse(entry.get_ref()) {
                Ok(spec) => specs.push(spec),
                Err(message) => report.add(format!("{at}[{i}]"), entry.span(), message),
            }
        }
        forward.key_from = specs.into();
        forward.key_from_text = entries.iter().map(|e| e.get_ref().clone()).collect();
    }
    let mut status = |name: &str, value: &Option<Spanned<i64>>, default: u16| match value {
        None => default,
        Some(v) => client_error(*v.get_ref()).unwrap_or_else(|| {
            bad_status(report, format!("{path}.{name}"), v.span(), *v.get_ref());
            default
        }),
    };
    forward.deny_status = status("deny_status", &raw.deny_status, 429);
    forward.missing_key_status = status("missing_key_status", &raw.missing_key_status, 401);
    forward
}

/// A 4xx: the proxy in front passes it to the client (nginx only 401/403).
fn client_error(v: i64) -> Option<u16> {
    u16::try_from(v).ok().filter(|v| (400..=499).contains(v))
}

fn bad_status(report: &mut Report, at: String, span: Range<usize>, got: i64) {
    report.add(
        at,
        span,
        format!("must be a 4xx status (400 to 499; behind nginx, 401 or 403), got {got}"),
    );
}
