//! A bound on the flow nesting (`[` and `{`) of a YAML text, found before
//! the YAML parser sees it.
//!
//! libyaml's scanner (under `serde_norway`) spends time in proportion to
//! the flow depth on every token, so `descriptors: [[[[...]]]]` parses in
//! quadratic time: 0.7 s at depth 10 000, about 70 s at 100 000 (a 200 KB
//! file), and the reload is frozen meanwhile. Block nesting (`- - - x`) is
//! linear, and the deserializer stops it at depth 128. A real config needs
//! a flow depth of a few dozen at most (two per descriptor level written
//! in flow style, and descriptors nest at most 16 deep).
//!
//! The scan is one pass over the characters, and never reads a depth
//! lower than the parser will reach. Brackets inside a quoted scalar or a
//! comment are not structure, but whether a `'`, `"` or `#` opens one
//! depends on where a token starts, which depends on indentation this
//! scan does not follow. So it follows every reading at once: at each
//! character that could open a quoted scalar or a comment (one that comes
//! after a blank, a line break, the start, or an indicator `[]{},:?-'"`:
//! everywhere libyaml can start a token), both the reading where it does
//! and the one where it is plain text go on, and each state keeps the
//! deepest level any reading gives it. The parser's own reading is always
//! one of them, so its depth is never above the one found. (A `#` after a
//! blank always opens a comment, except inside a quoted scalar, a reading
//! of its own, or a block scalar, which is block context: depth 0.)
//!
//! The price is a depth found too high in texts a real config does not
//! hold: the brackets of a quoted value count in the reading where its
//! opening quote is plain text (`[a 'b [` is a plain `a 'b` and a real
//! `[` in flow context), so quoted values holding more than
//! [`MAX_FLOW_DEPTH`] opening brackets that no closing one follows are
//! refused (balanced ones, `"[::1]"`, pass however many); so are plain
//! `a[b` values in block context, as many.

use std::fmt;

/// The deepest flow nesting accepted.
pub const MAX_FLOW_DEPTH: usize = 64;

/// The text nests flow collections deeper than the bound, first here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooDeep {
    pub line: usize,
    pub column: usize,
}

impl fmt::Display for TooDeep {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(
            f,
            "flow collections ([ or {{) nested deeper than {MAX_FLOW_DEPTH} at line {}, column {} \
             (brackets in quoted values count too); refused before parsing",
            self.line, self.column
        )
    }
}

/// The deepest level each reading in a given state has reached; `None`:
/// no reading is in that state.
#[derive(Default, Clone, Copy)]
struct Readings {
    /// Structure, or a plain or block scalar.
    code: Option<usize>,
    /// Inside `'...'`.
    single: Option<usize>,
    /// Inside `'...'`, just after a `'`: the close, or the first of `''`.
    single_quote: Option<usize>,
    /// Inside `"..."`.
    double: Option<usize>,
    /// Inside `"..."`, just after a `\`.
    double_escape: Option<usize>,
    /// In a comment, up to the line break.
    comment: Option<usize>,
}

fn join(a: &mut Option<usize>, b: Option<usize>) {
    *a = (*a).max(b);
}

/// libyaml's line breaks: a comment ends at any of them.
fn is_break(c: char) -> bool {
    matches!(c, '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}')
}

/// Whether `prev` is the start, a blank or a line break.
fn after_blank(prev: Option<char>) -> bool {
    prev.is_none_or(|p| matches!(p, ' ' | '\t' | '\u{feff}') || is_break(p))
}

/// Whether a token may start right after `prev`.
fn token_may_follow(prev: Option<char>) -> bool {
    after_blank(prev) || prev.is_some_and(|p| "[]{},:?-'\"".contains(p))
}

impl Readings {
    fn deepest(&self) -> usize {
        [
            self.code,
            self.single,
            self.single_quote,
            self.double,
            self.double_escape,
            self.comment,
        ]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0)
    }

    fn step(&self, c: char, prev: Option<char>) -> Readings {
        let mut next = Readings::default();
        let mut code = self.code;
        if let Some(level) = self.single_quote {
            if c == '\'' {
                join(&mut next.single, Some(level)); // `''`: a quote inside
            } else {
                join(&mut code, Some(level)); // the close: `c` is structure
            }
        }
        Self::step_code(&mut next, code, c, prev);
        self.step_inside(&mut next, c);
        next
    }

    /// `c` read as structure (at `code`'s level): a comment, a bracket, or
    /// the start of a quoted scalar.
    fn step_code(next: &mut Readings, code: Option<usize>, c: char, prev: Option<char>) {
        if c == '#' && after_blank(prev) {
            // Always a comment here (a plain scalar ends at ` #`), except
            // in a quoted scalar (its own reading) or a block scalar, which
            // is block context, depth 0: the comment ends with the line.
            join(&mut next.comment, code);
        } else if let Some(level) = code {
            let level = match c {
                '[' | '{' => level + 1,
                ']' | '}' => level.saturating_sub(1),
                _ => level,
            };
            join(&mut next.code, Some(level));
            if token_may_follow(prev) {
                let opened = match c {
                    '\'' => Some(&mut next.single),
                    '"' => Some(&mut next.double),
                    '#' => Some(&mut next.comment),
                    _ => None,
                };
                if let Some(state) = opened {
                    // The level before `c`: a quote or `#` is no bracket.
                    join(state, code);
                }
            }
        }
    }

    /// `c` read inside a quoted scalar or a comment: where each ends.
    fn step_inside(&self, next: &mut Readings, c: char) {
        if let Some(level) = self.single {
            let state = if c == '\'' {
                &mut next.single_quote
            } else {
                &mut next.single
            };
            join(state, Some(level));
        }
        if let Some(level) = self.double {
            let state = match c {
                '\\' => &mut next.double_escape,
                '"' => &mut next.code,
                _ => &mut next.double,
            };
            join(state, Some(level));
        }
        join(&mut next.double, self.double_escape);
        if let Some(level) = self.comment {
            let state = if is_break(c) {
                &mut next.code
            } else {
                &mut next.comment
            };
            join(state, Some(level));
        }
    }
}

/// Refuses `text` if the YAML parser could nest flow collections in it
/// deeper than [`MAX_FLOW_DEPTH`]; stops at the first place it could.
pub fn check_flow_depth(text: &str) -> Result<(), TooDeep> {
    let mut readings = Readings {
        code: Some(0),
        ..Readings::default()
    };
    let (mut line, mut column) = (1, 0);
    let mut prev = None;
    for c in text.chars() {
        column += 1;
        readings = readings.step(c, prev);
        if readings.deepest() > MAX_FLOW_DEPTH {
            return Err(TooDeep { line, column });
        }
        if c == '\n' {
            (line, column) = (line + 1, 0);
        }
        prev = Some(c);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn depth_ok(text: &str) -> bool {
        check_flow_depth(text).is_ok()
    }

    fn nested(n: usize) -> String {
        format!("{}{}", "[".repeat(n), "]".repeat(n))
    }

    #[test]
    fn flow_nesting_up_to_the_bound_passes_and_one_more_is_refused() {
        assert!(depth_ok(&nested(MAX_FLOW_DEPTH)));
        let err = check_flow_depth(&format!("descriptors: {}", nested(MAX_FLOW_DEPTH + 1)));
        assert_eq!(
            err,
            Err(TooDeep {
                line: 1,
                column: 13 + MAX_FLOW_DEPTH + 1
            })
        );
        // Mappings, and across lines, alike.
        assert!(!depth_ok(&"{a: \n".repeat(MAX_FLOW_DEPTH + 1)));
    }

    #[test]
    fn block_nesting_and_siblings_do_not_count() {
        assert!(depth_ok(&format!("{}x\n", "- ".repeat(10_000))));
        let siblings = "- { key: k, rate_limit: { unit: hour, requests_per_unit: 5 } }\n";
        assert!(depth_ok(&siblings.repeat(10_000)));
    }

    #[test]
    fn brackets_in_comments_are_text_and_in_quotes_count_only_upwards() {
        let deep = "[".repeat(100);
        for text in [
            format!("key: v # {deep}\n"),
            format!("# {deep}\n[a, b] # {deep}\n"),
            format!("\t#{deep}\u{2028}x: y\n"),
        ] {
            assert!(depth_ok(&text), "{text}");
        }
        // In a quoted value, brackets cannot lower the depth, and count in
        // the reading where the quote is plain text: balanced ones (an
        // IPv6 address) pass however often; more than the bound of
        // unbalanced ones are refused (see the module doc).
        let few = "[".repeat(20);
        assert!(depth_ok(&format!("value: '{few}'\nother: \"{few}\"\n")));
        let ipv6 = "- { key: remote_address, value: \"[::1]\" }\n";
        assert!(depth_ok(&ipv6.repeat(10_000)));
        assert!(!depth_ok(&format!("value: '{deep}'\n")));
    }

    /// Whatever could end a quote or a comment early in one reading is
    /// followed in the other too: closing brackets hidden in a scalar the
    /// scan might misread never hide the openers.
    #[test]
    fn closers_in_text_never_hide_openers() {
        let n = MAX_FLOW_DEPTH + 1;
        for unit in [
            "[ a'b, '] ', ",    // a plain a'b, then a quoted '] '
            "[ \"]\", ",        // a quoted "]"
            "[ # ]\n",          // a comment holding ]
            "[ 'x''] ', ",      // '' inside a quoted scalar
            "[ \"\\\"] \", ",   // an escaped quote inside one
            "[ a #b ]\u{2028}", // a comment ended by LS
        ] {
            assert!(!depth_ok(&unit.repeat(n)), "{unit:?}");
        }
    }

    /// A flow depth past the bound is found at once, however long the
    /// text: the scan stops there.
    #[test]
    fn a_hostile_depth_is_found_at_its_first_level_past_the_bound() {
        let text = format!("domain: x\ndescriptors: {}", nested(100_000));
        let err = check_flow_depth(&text).unwrap_err();
        assert_eq!(err.line, 2);
        assert_eq!(err.column, 13 + MAX_FLOW_DEPTH + 1);
    }
}
