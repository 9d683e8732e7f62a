//! Who imports whom in `src/`: the module tree from `mod` declarations
//! (with `#[path]`), every path in the code resolved to the file that
//! defines what it names (through re-exports), and the cycles of a graph.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::Path;

use super::lexer::{close_of, ident_at, line_of, paths, strip, words};

/// One file of the library crate.
pub struct File {
    /// From the repository root: `src/limiter/mod.rs`.
    pub path: String,
    /// Its module path: `["limiter"]`; empty for `src/lib.rs`.
    pub module: Vec<String>,
    pub code: String,
    /// Inline modules (`mod tests { ... }`): their span and name.
    inline: Vec<(usize, usize, String)>,
    /// Names of the items it defines (structs, fns, traits, ...).
    defines: HashSet<String>,
}

impl File {
    pub fn line(&self, at: usize) -> usize {
        line_of(&self.code, at)
    }

    /// The module path at an offset: the file's, plus enclosing inline modules.
    fn module_at(&self, at: usize) -> Vec<String> {
        let mut module = self.module.clone();
        for (start, end, name) in &self.inline {
            if (*start..*end).contains(&at) {
                module.push(name.clone());
            }
        }
        module
    }

    pub fn top(&self) -> Option<&str> {
        self.module.first().map(String::as_str)
    }
}

/// Every file reachable from `src/lib.rs` through `mod` declarations.
pub fn load(root: &Path) -> Vec<File> {
    let mut files = Vec::new();
    let mut todo = vec![("src/lib.rs".to_string(), Vec::new())];
    while let Some((path, module)) = todo.pop() {
        let raw =
            std::fs::read_to_string(root.join(&path)).unwrap_or_else(|e| panic!("{path}: {e}"));
        let code = strip(&raw);
        let inline = inline_mods(&code);
        for (at, name) in declared_mods(&code) {
            let mut child = module.clone();
            child.extend(
                inline
                    .iter()
                    .filter(|(s, e, _)| (*s..*e).contains(&at))
                    .map(|m| m.2.clone()),
            );
            child.push(name.clone());
            todo.push((child_file(root, &path, &raw, &code, at, &name), child));
        }
        let defines = defined_names(&code);
        files.push(File {
            path,
            module,
            code,
            inline,
            defines,
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    files
}

/// `mod name;` declarations: where each is and its name.
fn declared_mods(code: &str) -> Vec<(usize, String)> {
    let mods = words(code, "mod").filter_map(|at| {
        let (name, end) = ident_at(code, at + 3)?;
        code[end..]
            .trim_start()
            .starts_with(';')
            .then(|| (at, name.to_string()))
    });
    mods.collect()
}

/// `mod name { ... }`: the span of its body and its name.
fn inline_mods(code: &str) -> Vec<(usize, usize, String)> {
    let mods = words(code, "mod").filter_map(|at| {
        let (name, end) = ident_at(code, at + 3)?;
        let open = end + (code[end..].len() - code[end..].trim_start().len());
        (code.as_bytes().get(open) == Some(&b'{'))
            .then(|| (open, close_of(code, open), name.to_string()))
    });
    mods.collect()
}

/// The file a `mod name;` at `at` in `path` loads: its `#[path]`, or
/// `name.rs` / `name/mod.rs` beside (mod.rs, lib.rs) or under it.
fn child_file(root: &Path, path: &str, raw: &str, code: &str, at: usize, name: &str) -> String {
    let dir = Path::new(path).parent().expect("under src/");
    let item_start = code[..at].rfind([';', '}', '{']).map_or(0, |i| i + 1);
    if let Some(attr) = raw[item_start..at].split("#[path = \"").nth(1) {
        let file = attr.split('"').next().expect("a closing quote");
        return normalized(&dir.join(file));
    }
    let stem = Path::new(path)
        .file_stem()
        .expect("a file name")
        .to_string_lossy();
    let base = if matches!(&*stem, "mod" | "lib") {
        dir.to_path_buf()
    } else {
        dir.join(&*stem)
    };
    let flat = base.join(format!("{name}.rs"));
    if root.join(&flat).exists() {
        return flat.to_string_lossy().into_owned();
    }
    base.join(name)
        .join("mod.rs")
        .to_string_lossy()
        .into_owned()
}

/// `src/limiter/../../tests/x.rs` as `tests/x.rs`: a `#[path]` may lead
/// out of `src/`, and offenders are named by their plain path.
fn normalized(path: &Path) -> String {
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    for part in path.components() {
        match part {
            std::path::Component::ParentDir => {
                parts.pop();
            }
            std::path::Component::CurDir => {}
            other => parts.push(other.as_os_str()),
        }
    }
    parts
        .iter()
        .collect::<std::path::PathBuf>()
        .to_string_lossy()
        .into_owned()
}

fn defined_names(code: &str) -> HashSet<String> {
    let kinds = [
        "struct", "enum", "fn", "trait", "type", "const", "static", "union", "mod",
    ];
    let mut names = HashSet::new();
    for kind in kinds {
        for at in words(code, kind) {
            if let Some((name, _)) = ident_at(code, at + kind.len()) {
                names.insert(name.to_string());
            }
        }
    }
    names
}

/// Whether the path at `at` is a `use` item's, and if so whether it is a
/// re-export (`pub use`, `pub(crate) use`).
fn use_kind(code: &str, at: usize) -> Option<bool> {
    let before = code[..at].trim_end();
    let before = before.strip_suffix("use")?;
    if before.ends_with(|c: char| c.is_alphanumeric() || c == '_') {
        return None;
    }
    let before = before.trim_end();
    Some(before.ends_with("pub") || before.ends_with(')') && before.contains("pub("))
}

/// What a path leads to.
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Target {
    /// A module as such (`use crate::domain;`): its uses resolve later.
    Module(usize),
    /// An item, or every item (`::*`), of this file.
    Item(usize),
}

/// A path of one file, resolved.
pub struct Reference {
    pub from: usize,
    pub at: usize,
    /// Absolute module path as written: `["domain", "Rule"]`.
    pub absolute: Vec<String>,
    pub target: Option<Target>,
    /// A `pub use`: a re-export, which imports nothing for itself.
    pub reexport: bool,
}

/// The crate's module paths, inline ones included, to their file.
pub struct Crate<'a> {
    pub files: &'a [File],
    modules: HashMap<Vec<String>, usize>,
    /// Per file, the names its `use` items bring in, to absolute paths;
    /// and its glob imports.
    imports: Vec<HashMap<String, Vec<String>>>,
    globs: Vec<Vec<Vec<String>>>,
}

impl<'a> Crate<'a> {
    pub fn new(files: &'a [File]) -> Self {
        let mut modules = HashMap::new();
        for (i, file) in files.iter().enumerate() {
            modules.insert(file.module.clone(), i);
            for (start, _, _) in &file.inline {
                modules.insert(file.module_at(*start + 1), i);
            }
        }
        let mut krate = Crate {
            files,
            modules,
            imports: Vec::new(),
            globs: Vec::new(),
        };
        for file in files {
            let (mut names, mut globs) = (HashMap::new(), Vec::new());
            for p in paths(&file.code)
                .into_iter()
                .filter(|p| use_kind(&file.code, p.at).is_some())
            {
                let Some(mut abs) = krate.absolute(file, p.at, &p.segments) else {
                    continue;
                };
                if abs.last().map(String::as_str) == Some("*") {
                    abs.pop();
                    globs.push(abs);
                } else if let Some(name) = abs.last() {
                    names.insert(name.clone(), abs);
                }
            }
            krate.imports.push(names);
            krate.globs.push(globs);
        }
        krate
    }

    /// A path's segments from the crate root, or None for another crate's
    /// or a local item's.
    fn absolute(&self, file: &File, at: usize, segments: &[String]) -> Option<Vec<String>> {
        let mut module = file.module_at(at);
        let mut rest = segments;
        match segments.first()?.as_str() {
            "crate" | "$crate" => return Some(segments[1..].to_vec()),
            "self" => rest = &segments[1..],
            "super" => {
                while rest.first().map(String::as_str) == Some("super") {
                    module.pop()?;
                    rest = &rest[1..];
                }
            }
            first => {
                let mut child = module.clone();
                child.push(first.to_string());
                if !self.modules.contains_key(&child) {
                    let index = self.files.iter().position(|f| std::ptr::eq(f, file))?;
                    let imported = self.imports.get(index)?.get(first)?;
                    let mut abs = imported.clone();
                    abs.extend_from_slice(&segments[1..]);
                    return Some(abs);
                }
            }
        }
        module.extend_from_slice(rest);
        Some(module)
    }

    /// The file that defines what an absolute path names, through `use`
    /// re-exports (at most 8 deep).
    fn locate(&self, abs: &[String], depth: usize) -> Option<Target> {
        let k = (0..=abs.len())
            .rev()
            .find(|k| self.modules.contains_key(&abs[..*k]))?;
        let file = self.modules[&abs[..k]];
        let Some(item) = abs.get(k) else {
            return Some(Target::Module(file));
        };
        if item == "*" || self.files[file].defines.contains(item) || depth > 8 {
            return Some(Target::Item(file));
        }
        if let Some(next) = self.imports[file].get(item) {
            let mut next = next.clone();
            next.extend_from_slice(&abs[k + 1..]);
            return self.locate(&next, depth + 1);
        }
        for glob in &self.globs[file] {
            let mut next = glob.clone();
            next.extend_from_slice(&abs[k..]);
            if let Some(Target::Item(f)) = self.locate(&next, depth + 1)
                && self.files[f].defines.contains(item)
            {
                return Some(Target::Item(f));
            }
        }
        Some(Target::Item(file))
    }

    /// Every path in every file that names something of this crate.
    pub fn references(&self) -> Vec<Reference> {
        let mut found = Vec::new();
        for (from, file) in self.files.iter().enumerate() {
            for p in paths(&file.code) {
                let Some(absolute) = self.absolute(file, p.at, &p.segments) else {
                    continue;
                };
                let target = self.locate(&absolute, 0);
                let reexport = use_kind(&file.code, p.at) == Some(true);
                found.push(Reference {
                    from,
                    at: p.at,
                    absolute,
                    target,
                    reexport,
                });
            }
        }
        found
    }
}

/// The strongly connected components of more than one node (Tarjan).
pub fn cycles<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Vec<Vec<N>> {
    struct Walk<'e, N> {
        edges: &'e BTreeMap<N, BTreeSet<N>>,
        index: BTreeMap<N, (usize, usize)>,
        stack: Vec<N>,
        on_stack: BTreeSet<N>,
        found: Vec<Vec<N>>,
    }
    impl<N: Ord + Clone> Walk<'_, N> {
        fn visit(&mut self, node: &N) -> usize {
            let n = self.index.len();
            self.index.insert(node.clone(), (n, n));
            self.stack.push(node.clone());
            self.on_stack.insert(node.clone());
            let mut low = n;
            for next in self.edges.get(node).into_iter().flatten() {
                if !self.index.contains_key(next) {
                    low = low.min(self.visit(next));
                } else if self.on_stack.contains(next) {
                    low = low.min(self.index[next].0);
                }
            }
            self.index.get_mut(node).expect("visited").1 = low;
            if low == n {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(&top);
                    let done = top == *node;
                    component.push(top);
                    if done {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
            low
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in edges.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cycles_are_the_components_of_more_than_one_node() {
        let mut edges: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
        for (a, b) in [
            ("a", "b"),
            ("b", "c"),
            ("c", "a"),
            ("c", "d"),
            ("d", "d"),
            ("e", "f"),
        ] {
            edges.entry(a).or_default().insert(b);
        }
        assert_eq!(cycles(&edges), [vec!["a", "b", "c"]]);
    }

    #[test]
    fn a_path_attribute_out_of_src_is_named_plainly() {
        let path = Path::new("src/limiter/../../tests/support/x.rs");
        assert_eq!(normalized(path), "tests/support/x.rs");
    }

    #[test]
    fn use_kind_tells_a_reexport_from_an_import() {
        let code = "pub use a::b;\nuse c::d;\npub(crate) use e::f;\nlet x = g::h;";
        let at = |s: &str| code.find(s).expect("present");
        assert_eq!(use_kind(code, at("a::b")), Some(true));
        assert_eq!(use_kind(code, at("c::d")), Some(false));
        assert_eq!(use_kind(code, at("e::f")), Some(true));
        assert_eq!(use_kind(code, at("g::h")), None);
    }
}
