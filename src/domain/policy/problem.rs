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

/// Why a policies file was rejected: the problems found, in file order.
/// A file with a syntax or shape error (a typo in a key, a string where a
/// number belongs) reports that one, since nothing after it can be read
/// reliably; a well-formed file reports every invalid value at once, up to
/// `MAX_PROBLEMS` (the rest are only counted in `more`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct PolicyFileError {
    pub problems: Vec<Problem>,
    /// Problems found beyond the first `MAX_PROBLEMS`, not listed.
    pub more: usize,
}

/// The most problems listed: a generated file with thousands of bad limits
/// must not produce a log line (or a CLI report) as large as itself.
pub const MAX_PROBLEMS: usize = 100;

impl fmt::Display for PolicyFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.problems.len() + self.more;
        write!(f, "{n} problem{}:", if n == 1 { "" } else { "s" })?;
        for problem in &self.problems {
            write!(f, "\n  {problem}")?;
        }
        if self.more > 0 {
            let s = if self.more == 1 { "" } else { "s" };
            write!(f, "\n  ... and {} more problem{s}", self.more)?;
        }
        Ok(())
    }
}

/// Collects problems while a file is validated. Only their byte offsets are
/// kept until [`Report::finish`], which locates the first [`MAX_PROBLEMS`]:
/// locating each as it is added would rescan the text every time.
pub(super) struct Report<'t> {
    text: &'t str,
    /// (byte offset, TOML path, message)
    problems: Vec<(usize, String, String)>,
}

impl<'t> Report<'t> {
    pub(super) fn new(text: &'t str) -> Report<'t> {
        Report {
            text,
            problems: Vec::new(),
        }
    }

    /// How many problems were found so far.
    pub(super) fn count(&self) -> usize {
        self.problems.len()
    }

    pub(super) fn add(&mut self, path: String, span: Range<usize>, message: impl Into<String>) {
        self.problems.push((span.start, path, message.into()));
    }

    pub(super) fn finish(mut self) -> PolicyFileError {
        // Stable: problems at one offset keep the order they were found in.
        self.problems.sort_by_key(|(offset, _, _)| *offset);
        let more = self.problems.len().saturating_sub(MAX_PROBLEMS);
        self.problems.truncate(MAX_PROBLEMS);
        let lines = LineIndex::new(self.text);
        let problems = self
            .problems
            .into_iter()
            .map(|(offset, path, message)| {
                let (line, column) = lines.locate(self.text, offset);
                Problem {
                    path,
                    line,
                    column,
                    message,
                }
            })
            .collect();
        PolicyFileError { problems, more }
    }
}

/// Where each line starts, so locating an offset is a binary search.
struct LineIndex(Vec<usize>);

impl LineIndex {
    fn new(text: &str) -> LineIndex {
        let starts = std::iter::once(0)
            .chain(
                text.bytes()
                    .enumerate()
                    .filter(|(_, b)| *b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        LineIndex(starts)
    }

    /// 1-based line and column (in characters) of byte `offset` in `text`.
    fn locate(&self, text: &str, offset: usize) -> (usize, usize) {
        let offset = offset.min(text.len());
        // The last line start at or before `offset`.
        let line = self.0.partition_point(|&start| start <= offset);
        let start = self.0[line - 1];
        let before = text.get(start..offset).unwrap_or("");
        (line, before.chars().count() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locates_lines_and_character_columns() {
        let text = "ab\né€x\n\nz";
        let lines = LineIndex::new(text);
        assert_eq!(lines.locate(text, 0), (1, 1));
        assert_eq!(lines.locate(text, 2), (1, 3));
        assert_eq!(lines.locate(text, 3), (2, 1));
        // 'x' follows two 2- and 3-byte characters: column 3.
        assert_eq!(lines.locate(text, 3 + 2 + 3), (2, 3));
        assert_eq!(lines.locate(text, 10), (3, 1));
        assert_eq!(lines.locate(text, 11), (4, 1));
        assert_eq!(lines.locate(text, 99), (4, 2));
    }

    #[test]
    fn lists_at_most_the_cap_and_counts_the_rest() {
        let mut report = Report::new("x");
        for i in (0..MAX_PROBLEMS + 5).rev() {
            report.add(format!("p{i}"), 0..0, "bad");
        }
        let error = report.finish();
        assert_eq!(error.problems.len(), MAX_PROBLEMS);
        assert_eq!(error.more, 5);
        let shown = error.to_string();
        assert!(shown.starts_with("105 problems:"), "{shown}");
        assert!(shown.ends_with("... and 5 more problems"), "{shown}");
    }
}
