//! A small hand lexer over Rust source: enough to find fn items and module
//! paths, not a parser. Comments and literals are blanked first (same byte
//! offsets, newlines kept), so braces and `fn` inside them never count.

/// The source with every comment, string, byte string, raw string and char
/// literal replaced by spaces; newlines and byte offsets are kept, so a
/// position in the result is the same position in the source.
pub fn strip(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        let end = match b[i] {
            b'/' if b.get(i + 1) == Some(&b'/') => line_end(b, i),
            b'/' if b.get(i + 1) == Some(&b'*') => block_end(b, i),
            b'"' => string_end(b, i + 1),
            b'r' if !ident_before(b, i) || prefix_of_raw(b, i) => match raw_end(b, i + 1) {
                Some(end) => end,
                None => i + 1,
            },
            b'\'' => char_end(b, i).unwrap_or(i + 1),
            _ => i + 1,
        };
        if end > i + 1 {
            blank(&mut out[i..end]);
        }
        i = end.max(i + 1);
    }
    String::from_utf8(out).expect("only whole characters are blanked")
}

fn blank(bytes: &mut [u8]) {
    for c in bytes.iter_mut().filter(|c| **c != b'\n') {
        *c = b' ';
    }
}

pub fn is_ident(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && is_ident(b[i - 1])
}

/// `br"..."` and `cr"..."`: the `r` follows a one-letter prefix.
fn prefix_of_raw(b: &[u8], i: usize) -> bool {
    i > 0 && matches!(b[i - 1], b'b' | b'c') && !ident_before(b, i - 1)
}

fn line_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |n| i + n)
}

/// Block comments nest in Rust.
fn block_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0;
    while i < b.len() {
        if b[i..].starts_with(b"/*") {
            depth += 1;
            i += 2;
        } else if b[i..].starts_with(b"*/") {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    b.len()
}

/// From just after the opening quote to just after the closing one.
fn string_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'"' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// `r"..."`, `r#"..."#`: `i` is just after the `r`. None for `r#ident`.
fn raw_end(b: &[u8], i: usize) -> Option<usize> {
    let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
    if b.get(i + hashes) != Some(&b'"') {
        return None;
    }
    let mut close = vec![b'"'];
    close.extend(std::iter::repeat_n(b'#', hashes));
    let body = i + hashes + 1;
    let n = b[body..].windows(close.len()).position(|w| w == close)?;
    Some(body + n + close.len())
}

/// A char literal (`'a'`, `'\n'`, `'\u{1F600}'`, `'é'`); None for a
/// lifetime or a label.
fn char_end(b: &[u8], i: usize) -> Option<usize> {
    if b.get(i + 1) == Some(&b'\\') {
        // The escaped character itself may be a quote: `'\''`.
        let n = b[i + 3..].iter().position(|&c| c == b'\'')?;
        return Some(i + 3 + n + 1);
    }
    let len = match *b.get(i + 1)? {
        c if c < 0x80 => 1,
        c if c >= 0xF0 => 4,
        c if c >= 0xE0 => 3,
        _ => 2,
    };
    (b.get(i + 1 + len) == Some(&b'\'')).then_some(i + 2 + len)
}

/// The 1-based line of a byte offset.
pub fn line_of(code: &str, at: usize) -> usize {
    code.as_bytes()[..at]
        .iter()
        .filter(|&&c| c == b'\n')
        .count()
        + 1
}

/// The offset just after the brace that closes the one at `open`.
pub fn close_of(code: &str, open: usize) -> usize {
    let mut depth = 0usize;
    for (i, c) in code.bytes().enumerate().skip(open) {
        match c {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            _ => {}
        }
    }
    code.len()
}

/// Offsets of `word` in stripped code where it stands as a whole word.
pub fn words<'a>(code: &'a str, word: &'a str) -> impl Iterator<Item = usize> + 'a {
    let b = code.as_bytes();
    code.match_indices(word).map(|(i, _)| i).filter(move |&i| {
        let after = i + word.len();
        !ident_before(b, i) && (after >= b.len() || !is_ident(b[after]))
    })
}

/// The identifier starting at `i` after any whitespace, and where it ends.
pub fn ident_at(code: &str, i: usize) -> Option<(&str, usize)> {
    let b = code.as_bytes();
    let start = i + b[i..]
        .iter()
        .take_while(|c| c.is_ascii_whitespace())
        .count();
    let start = if b[start..].starts_with(b"r#") {
        start + 2
    } else {
        start
    };
    let len = b[start..].iter().take_while(|&&c| is_ident(c)).count();
    let first = *b.get(start)?;
    (len > 0 && !first.is_ascii_digit()).then(|| (&code[start..start + len], start + len))
}

/// A fn item with a body: its name, the line of `fn`, and how many lines
/// it spans from that line to its closing brace.
#[derive(Debug, PartialEq)]
pub struct FnItem {
    pub name: String,
    pub line: usize,
    pub lines: usize,
}

/// Every fn with a body in stripped code, nested ones included (an outer
/// fn's count includes them). `fn(u8)` types and bodiless trait methods
/// are not items.
pub fn fns(code: &str) -> Vec<FnItem> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    for at in words(code, "fn") {
        let Some((name, mut i)) = ident_at(code, at + 2) else {
            continue;
        };
        let mut depth = 0i32;
        while i < b.len() {
            match b[i] {
                b'(' | b'[' => depth += 1,
                b')' | b']' => depth -= 1,
                b'{' | b';' if depth == 0 => break,
                _ => {}
            }
            i += 1;
        }
        if b.get(i) != Some(&b'{') {
            continue;
        }
        let line = line_of(code, at);
        let end = line_of(code, close_of(code, i) - 1);
        found.push(FnItem {
            name: name.to_string(),
            line,
            lines: end - line + 1,
        });
    }
    found
}

/// A path as written: where it starts and its segments, use-tree groups
/// expanded (`a::{b, c::d}` is `a::b` and `a::c::d`; `self` in a group is
/// the group's prefix; a glob ends in `*`).
#[derive(Debug, PartialEq)]
pub struct PathRef {
    pub at: usize,
    pub segments: Vec<String>,
}

/// Every path of two or more segments in stripped code.
pub fn paths(code: &str) -> Vec<PathRef> {
    let b = code.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if !path_starts(b, i) {
            i += 1;
            continue;
        }
        let (_, end) = ident_at(code, i).expect("an identifier starts here");
        if !code[end..].starts_with("::") {
            i = end;
            continue;
        }
        let mut out = Vec::new();
        let end = tree(code, i, Vec::new(), &mut out);
        found.extend(out.into_iter().map(|segments| PathRef { at: i, segments }));
        i = end.max(i + 1);
    }
    found
}

/// An identifier starts at `i` that is not the tail of a path, a field or
/// method (`.x`), or a lifetime.
fn path_starts(b: &[u8], i: usize) -> bool {
    let after_path = i >= 2 && &b[i - 2..i] == b"::";
    let after_dot_or_quote = i >= 1 && matches!(b[i - 1], b'.' | b'\'');
    is_ident(b[i])
        && !b[i].is_ascii_digit()
        && !ident_before(b, i)
        && !after_path
        && !after_dot_or_quote
}

/// Reads one use tree (or plain path) at `i`, pushing each expanded path;
/// returns where it ends.
fn tree(code: &str, mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    loop {
        i += b[i..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace())
            .count();
        match b.get(i) {
            Some(b'{') => return group(code, i + 1, prefix, out),
            Some(b'*') => {
                prefix.push("*".to_string());
                out.push(prefix);
                return i + 1;
            }
            _ => {}
        }
        let Some((seg, end)) = ident_at(code, i) else {
            out.push(prefix);
            return i;
        };
        if seg == "self" && !prefix.is_empty() {
            out.push(prefix);
            return end;
        }
        prefix.push(seg.to_string());
        let rest = &code[end..];
        let gap = rest.len() - rest.trim_start().len();
        if !rest.trim_start().starts_with("::") || rest.trim_start().starts_with("::<") {
            out.push(prefix);
            return end;
        }
        i = end + gap + 2;
    }
}

fn group(code: &str, mut i: usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    let b = code.as_bytes();
    loop {
        i += b[i..]
            .iter()
            .take_while(|c| c.is_ascii_whitespace() || **c == b',')
            .count();
        if i >= b.len() || b[i] == b'}' {
            return i + 1;
        }
        let end = tree(code, i, prefix.clone(), out);
        // `x as y`: the alias names no module; skip to the next item.
        let skip = b[end..]
            .iter()
            .take_while(|c| !matches!(c, b',' | b'}'))
            .count();
        i = end + skip;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strip_blanks_comments_strings_and_chars_but_keeps_offsets() {
        let src = "a // fn x() {\nb /* { /* } */ } */ c \"{\\\"}\" 'x' '{' '\\'' 'a: r#\"}\"# é\n";
        let code = strip(src);
        assert_eq!(code.len(), src.len());
        assert_eq!(code.lines().count(), 2);
        assert!(!code.contains(['{', '}', 'x']), "{code:?}");
        assert!(code.contains("'a:"), "a label stays: {code:?}");
        assert!(code.starts_with("a ") && code.contains('b') && code.contains('c'));
    }

    #[test]
    fn strip_keeps_raw_identifiers_and_lifetimes() {
        let code = strip("fn f<'a>(r#type: &'a str) -> char { 'é' }");
        assert!(code.contains("r#type: &'a str"), "{code:?}");
        assert!(!code.contains('é'));
    }

    #[test]
    fn fns_count_from_the_keyword_to_the_closing_brace() {
        let code = strip(
            "pub async fn one(\n    a: u8,\n) -> u8 {\n    let f: fn(u8) = g;\n    \"}\";\n    1\n}\ntrait T { fn bodiless(&self); }\nfn two() where X: Fn() -> u8 { fn inner() {}\n}\n",
        );
        let found = fns(&code);
        let got: Vec<(&str, usize, usize)> = found
            .iter()
            .map(|f| (f.name.as_str(), f.line, f.lines))
            .collect();
        assert_eq!(got, [("one", 1, 7), ("two", 9, 2), ("inner", 9, 1)]);
    }

    #[test]
    fn paths_expand_use_trees() {
        let code = strip(
            "use crate::{config::Settings, domain::{self, Rule as R}, limiter::*};\nlet x = super::super::y::Z::new(a::b);\nfoo.bar::<u8>();",
        );
        let got: Vec<String> = paths(&code).iter().map(|p| p.segments.join("::")).collect();
        assert_eq!(
            got,
            [
                "crate::config::Settings",
                "crate::domain",
                "crate::domain::Rule",
                "crate::limiter::*",
                "super::super::y::Z::new",
                "a::b",
            ]
        );
    }

    #[test]
    fn a_path_after_a_comment_or_string_is_not_read_inside_it() {
        let code = strip("// crate::http::x\nlet s = \"crate::app::y\"; crate::store::Store");
        let got: Vec<String> = paths(&code).iter().map(|p| p.segments.join("::")).collect();
        assert_eq!(got, ["crate::store::Store"]);
    }
}
