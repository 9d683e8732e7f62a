//! Reading the docs: the pages, their fenced blocks, and the anchors of
//! their headings as GitHub makes them.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// README.md and every `docs/*.md`, by path from the root.
pub fn pages() -> Vec<(String, String)> {
    let mut paths = vec!["README.md".to_string()];
    for entry in std::fs::read_dir(root().join("docs")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".md") {
            paths.push(format!("docs/{name}"));
        }
    }
    paths.sort();
    paths.into_iter().map(|p| (p.clone(), read(&p))).collect()
}

/// A fenced block: its language, its text (the fence's indentation taken
/// off every line), and the `<!-- file: PATH -->` or `<!-- excerpt: PATH -->`
/// marker on the last non-blank line before it, if any.
pub struct Block {
    pub lang: String,
    pub text: String,
    pub marker: Option<(String, String)>,
    pub line: usize,
}

/// The blocks of `markdown`, and its lines outside them.
pub fn parse(markdown: &str) -> (Vec<Block>, Vec<&str>) {
    let (mut blocks, mut prose) = (Vec::new(), Vec::<&str>::new());
    let mut open: Option<(usize, Block)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match open.take() {
            Some((_, block)) if trimmed.starts_with("```") => blocks.push(block),
            Some((at, mut block)) => {
                block.text += line.get(at..).unwrap_or(trimmed);
                block.text.push('\n');
                open = Some((at, block));
            }
            None if trimmed.starts_with("```") => {
                let marker = prose.iter().rev().find(|l| !l.trim().is_empty());
                let marker = marker.and_then(|l| {
                    let inner = l.trim().strip_prefix("<!-- ")?.strip_suffix(" -->")?;
                    let (kind, path) = inner.split_once(": ")?;
                    Some((kind.to_string(), path.to_string()))
                });
                let lang = trimmed.trim_start_matches('`').to_string();
                let (text, line) = (String::new(), n + 1);
                open = Some((
                    indent,
                    Block {
                        lang,
                        text,
                        marker,
                        line,
                    },
                ));
            }
            None => prose.push(line),
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    (blocks, prose)
}

/// A YAML or nginx line without its comment and indentation (an excerpt may
/// annotate a line differently from the file).
pub fn code(line: &str) -> &str {
    let line = line.trim();
    if line.starts_with('#') {
        return "";
    }
    line.find(" #").map_or(line, |i| line[..i].trim_end())
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (but `-`
/// and `_`), spaces made `-`.
fn slug(heading: &str) -> String {
    let text = heading.trim_start_matches('#').trim().to_lowercase();
    let kept = text
        .chars()
        .filter(|c| c.is_alphanumeric() || " -_".contains(*c));
    kept.map(|c| if c == ' ' { '-' } else { c }).collect()
}

/// The anchors of a page's headings, repeats numbered as GitHub does.
pub fn anchors(markdown: &str) -> BTreeSet<String> {
    let (mut seen, mut out) = (BTreeMap::<String, usize>::new(), BTreeSet::new());
    for heading in parse(markdown).1.into_iter().filter(|l| l.starts_with('#')) {
        let slug = slug(heading);
        let n = seen.entry(slug.clone()).or_default();
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}
