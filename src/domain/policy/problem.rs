//! What is wrong with a policies file, located by line and column.

use std::fmt;
use std::ops::Range;

/// One thing wrong with a policies file, located in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The TOML path (`policies.api.limits[1].window`); empty for a syntax error.
    pub path: String,
    /// 1-based; columns count characters, not bytes.
    pub line: usize,
    pub column: usize,
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(
                f,
                "line {}, column {}: {}",
                self.line, self.column, self.message
            )
        } else {
            write!(
                f,
                "{} (line {}, column {}): {}",
                self.path, self.line, self.column, self.message
            )
        }
    }
}

/// Why a policies file was rejected: every problem found, in file order.
/// A file with a syntax or shape error (a typo in a key, a string where a
/// number belongs) reports that one, since nothing after it can be read
/// reliably; a well-formed file reports every invalid value at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyFileError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for PolicyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len();
        write!(f, "{n} problem{}:", if n == 1 { "" } else { "s" })?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        Ok(())
    }
}

/// Collects problems while a file is validated.
pub(super) struct Report<'t> {
    pub(super) text: &'t str,
    pub(super) problems: Vec<(usize, Problem)>,
}

impl Report<'_> {
    pub(super) fn add(&mut self, path: String, span: Range<usize>, message: impl Into<String>) {
        let (line, column) = line_column(self.text, span.start);
        self.problems.push((
            span.start,
            Problem {
                path,
                line,
                column,
                message: message.into(),
            },
        ));
    }
}

/// 1-based line and column (in characters) of byte `offset` in `text`.
fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    (line, before[line_start..].chars().count() + 1)
}

impl Report<'_> {
    pub(super) fn finish(mut self) -> PolicyFileError {
        self.problems.sort_by_key(|(offset, _)| *offset);
        PolicyFileError {
            problems: self.problems.into_iter().map(|(_, p)| p).collect(),
        }
    }
}
