//! The picture of the house (issue 28), held to the tree: no file in
//! `src/` over 400 lines, no fn there over 60; no import cycle between
//! `src/`'s top-level modules or between its files; and the arrows run one
//! way (transport -> limiter -> store -> domain). A small hand lexer
//! (`house/lexer.rs`) blanks comments and literals, then finds fn items and
//! paths; `house/graph.rs` resolves each path to the file that defines what
//! it names. Every failure lists each offender as `path:line`.
//!
//! What counts as an import: any path to this crate (`crate::`, `super::`,
//! `self::`, a child module, a name a `use` brought in), in a `use` item or
//! in code. A re-export (`pub use`) is no import of its own for the file
//! graph: a path through it leads to the file that defines the item. Between
//! top-level modules, every path counts, re-exports too.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "house/graph.rs"]
mod graph;
#[path = "house/lexer.rs"]
mod lexer;

use graph::{Crate, File, Reference, Target, cycles, load};

const MAX_FILE_LINES: usize = 400;
const MAX_FN_LINES: usize = 60;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `src/`, main.rs and unreached ones included.
fn sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<(String, String)>) {
        for entry in std::fs::read_dir(dir).expect("src/ is readable") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).expect("a readable source file");
                let rel = path.strip_prefix(root()).expect("under the root");
                out.push((rel.to_string_lossy().into_owned(), text));
            }
        }
    }
    let mut out = Vec::new();
    walk(&root().join("src"), &mut out);
    out.sort();
    out
}

fn fail_with(what: &str, offenders: &[String]) {
    assert!(
        offenders.is_empty(),
        "{} {what}:\n  {}",
        offenders.len(),
        offenders.join("\n  ")
    );
}

#[test]
fn no_file_in_src_is_over_400_lines() {
    let offenders: Vec<String> = sources()
        .iter()
        .map(|(path, text)| (path, text.lines().count()))
        .filter(|(_, lines)| *lines > MAX_FILE_LINES)
        .map(|(path, lines)| format!("{path}:1: {lines} lines"))
        .collect();
    fail_with(&format!("files over {MAX_FILE_LINES} lines"), &offenders);
}

#[test]
fn no_fn_in_src_is_over_60_lines() {
    let mut offenders = Vec::new();
    for (path, text) in sources() {
        for f in lexer::fns(&lexer::strip(&text)) {
            if f.lines > MAX_FN_LINES {
                offenders.push(format!(
                    "{path}:{}: fn {} is {} lines",
                    f.line, f.name, f.lines
                ));
            }
        }
    }
    fail_with(&format!("fns over {MAX_FN_LINES} lines"), &offenders);
}

/// An arrow between two top-level modules, where it is written.
struct Arrow {
    from: String,
    to: String,
    at: String,
}

fn arrows(files: &[File], refs: &[Reference]) -> Vec<Arrow> {
    let tops: BTreeSet<&str> = files.iter().filter_map(File::top).collect();
    let mut found = Vec::new();
    for r in refs {
        let file = &files[r.from];
        let (Some(from), Some(to)) = (file.top(), r.absolute.first()) else {
            continue;
        };
        if from != to && tops.contains(to.as_str()) {
            let at = format!("{}:{}", file.path, file.line(r.at));
            found.push(Arrow {
                from: from.to_string(),
                to: to.clone(),
                at,
            });
        }
    }
    found
}

#[test]
fn no_import_cycle_between_modules_or_files() {
    let files = load(root());
    let krate = Crate::new(&files);
    let refs = krate.references();
    let mut offenders = Vec::new();

    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut first_at: BTreeMap<(String, String), String> = BTreeMap::new();
    for a in arrows(&files, &refs) {
        modules
            .entry(a.from.clone())
            .or_default()
            .insert(a.to.clone());
        first_at.entry((a.from, a.to)).or_insert(a.at);
    }
    for cycle in cycles(&modules) {
        offenders.push(format!("modules {}:", cycle.join(", ")));
        for ((from, to), at) in &first_at {
            if cycle.contains(from) && cycle.contains(to) {
                offenders.push(format!("  {at}: {from} -> {to}"));
            }
        }
    }

    let mut edges: BTreeMap<usize, BTreeSet<usize>> = BTreeMap::new();
    let mut edge_at: BTreeMap<(usize, usize), usize> = BTreeMap::new();
    for r in refs.iter().filter(|r| !r.reexport) {
        if let Some(Target::Item(to)) = r.target
            && to != r.from
            && !within(&files[r.from].path, &files[to].path)
        {
            edges.entry(r.from).or_default().insert(to);
            edge_at.entry((r.from, to)).or_insert(r.at);
        }
    }
    for cycle in cycles(&edges) {
        let names: Vec<&str> = cycle.iter().map(|&f| files[f].path.as_str()).collect();
        offenders.push(format!("files {}:", names.join(", ")));
        for (&(from, to), &at) in &edge_at {
            if cycle.contains(&from) && cycle.contains(&to) {
                let (file, target) = (&files[from], &files[to].path);
                offenders.push(format!("  {}:{}: -> {target}", file.path, file.line(at)));
            }
        }
    }
    fail_with("lines about import cycles", &offenders);
}

/// Whether `file` lies inside the module whose file is `module`: a child
/// naming its own parent's items (`super::`) is the parent module split
/// across files, not an arrow between two of them. Arrows between
/// siblings, and from a parent to its children, still count.
fn within(file: &str, module: &str) -> bool {
    let dir = match module.strip_suffix("/mod.rs") {
        Some(dir) => dir,
        None if module.ends_with("/lib.rs") => return false,
        None => module.trim_end_matches(".rs"),
    };
    file.starts_with(&format!("{dir}/"))
}

/// What each layer may not import.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("store", &["limiter", "http", "rls", "app", "cli"]),
    ("limiter", &["http", "rls", "app", "cli"]),
    ("metrics", &["limiter", "http", "rls", "app", "telemetry"]),
];

#[test]
fn arrows_run_one_way() {
    let files = load(root());
    let refs = Crate::new(&files).references();
    let offenders: Vec<String> = arrows(&files, &refs)
        .into_iter()
        .filter(|a| {
            // The domain is pure: it imports no other module of the crate.
            a.from == "domain"
                || FORBIDDEN
                    .iter()
                    .any(|(from, banned)| a.from == *from && banned.contains(&a.to.as_str()))
        })
        .map(|a| format!("{}: {} -> {}", a.at, a.from, a.to))
        .collect();
    fail_with("arrows against the layers", &offenders);
}

#[test]
fn every_file_in_src_is_a_module_of_the_crate_or_main() {
    let loaded: BTreeSet<String> = load(root()).into_iter().map(|f| f.path).collect();
    for (path, _) in sources() {
        assert!(
            path == "src/main.rs" || loaded.contains(&path),
            "{path} is not reached from src/lib.rs, so the graph misses it"
        );
    }
}
