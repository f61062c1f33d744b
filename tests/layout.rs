//! The layout of `src/` keeps the architecture (DESIGN.md §2): the modules at its top (a folder
//! or a file each) name one another without a cycle, the layers name only layers below them,
//! `zarr/` and `sys/` name nothing of the crate, clap stays with the command line, and the files
//! of the folders that start a program (`cli/`, `mount/`, `sys/`) do not import one another in a
//! cycle.
//!
//! It reads the source, not the compiled crate: every `crate::a::b` (also `crate::{a, b}`) and
//! every `super::…::name` that reaches the crate root is a reference from the file's module to
//! the one named. Comment lines (`//`, `//!`, `///`) do not count: a doc link is not an import.
//! `super::` is resolved from the file's own path, not from inline modules (a `mod tests`), so
//! one there that names a top-level module's name one level too high reads as that module: a
//! false cycle fails loudly, it never hides a real one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// The layers, top to bottom: each names only layers below it (and `zarr`, `sys`).
const LAYERS: [&str; 5] = ["fuse", "fs", "view", "shard", "store"];

/// Pure code every layer may use, which names nothing of the crate itself (`metrics` holds the
/// latency histogram every layer records into, and the exposition and server built on it).
const LEAVES: [&str; 3] = ["zarr", "sys", "metrics"];

/// A layer naming one more than one level below it, as the code does today (a new one fails
/// the test, and so does one of these that is gone: the list stays true).
const KNOWN_SKIPS: [(&str, &str, &str); 4] = [
    // Store and shard errors become errnos in exactly one place (fs/error.rs, DESIGN §2);
    // fs/unopened.rs names the store's ByteRange.
    ("fs", "store", "errno mapping of StoreError; ByteRange"),
    ("fs", "shard", "errno mapping of ShardError"),
    // A reply to READDIRPLUS builds the attributes of a node the listing did not give.
    ("fuse", "view", "view::Node::dir() in fuse/reply.rs"),
    // The view reads through a store and does not care whether shards are behind it.
    ("view", "store", "the view's Store (DESIGN §2)"),
];

/// Where references between files are checked for cycles (the folders that start a program).
const ACYCLIC_FILES: [&str; 3] = ["cli", "mount", "sys"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path);
        }
    }
}

/// The module a file holds, as a path from the crate root (`fs/inodes/mod.rs` -> fs::inodes);
/// `None` for the crate root and the binaries, which are not modules of the library.
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts[0].as_str(), "main.rs" | "lib.rs" | "bin") {
        return None;
    }
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if stem != "mod" {
        parts.push(stem.to_string());
    }
    Some(parts)
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The identifier at the start of `s`.
fn ident(s: &str) -> &str {
    &s[..s.find(|c| !is_ident(c)).unwrap_or(s.len())]
}

/// The paths a line names from the crate root: `crate::a::b::C` gives [a, b, C]; `crate::{a::x,
/// b}` gives [a, x] and [b]; `super::super::x` in module [m, n] gives [x].
fn named_paths(line: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for (at, _) in line.match_indices("crate::") {
        if line[..at].ends_with(|c: char| is_ident(c) || c == ':') {
            continue;
        }
        let rest = &line[at + "crate::".len()..];
        match rest.strip_prefix('{') {
            Some(group) => {
                // The names at the group's first level.
                let mut depth = 0;
                let mut start = true;
                for (i, c) in group.char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => start = true,
                        c if start && is_ident(c) => {
                            found.push(path_at(&group[i..]));
                            start = false;
                        }
                        _ => {}
                    }
                }
            }
            None => found.push(path_at(rest)),
        }
    }
    for (at, _) in line.match_indices("super::") {
        if line[..at].ends_with(|c: char| is_ident(c) || c == ':') {
            continue;
        }
        let mut rest = &line[at..];
        let mut up = 0;
        while let Some(after) = rest.strip_prefix("super::") {
            up += 1;
            rest = after;
        }
        if up <= module.len() {
            let mut path = module[..module.len() - up].to_vec();
            path.extend(path_at(rest));
            found.push(path);
        }
    }
    found.retain(|path| !path.is_empty() && !path[0].is_empty());
    found
}

/// `a::b::C…` -> [a, b, C].
fn path_at(s: &str) -> Vec<String> {
    let mut path = Vec::new();
    let mut rest = s;
    loop {
        let name = ident(rest);
        if name.is_empty() {
            break;
        }
        path.push(name.to_string());
        match rest[name.len()..].strip_prefix("::") {
            Some(after) => rest = after,
            None => break,
        }
    }
    path
}

/// A graph of names, each edge with the files that make it.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;

struct Source {
    /// Every file of the library: its path under `src/`, its module, its code lines.
    files: Vec<(String, Vec<String>, Vec<String>)>,
    /// The module paths that are files (`fs`, `fs::inodes`, `fs::inodes::slab`, …).
    modules: BTreeSet<Vec<String>>,
}

fn read_source(root: &Path) -> Source {
    let mut paths = Vec::new();
    rust_files(root, &mut paths);
    let mut files = Vec::new();
    let mut modules = BTreeSet::new();
    for path in paths {
        let rel = path.strip_prefix(root).expect("under src");
        let Some(module) = module_of(rel) else { continue };
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let code = text
            .lines()
            .filter(|line| !line.trim_start().starts_with("//"))
            .map(str::to_string)
            .collect();
        modules.insert(module.clone());
        files.push((rel.display().to_string(), module, code));
    }
    Source { files, modules }
}

/// Top-level module -> the top-level modules its files name.
fn folder_graph(source: &Source) -> Graph {
    let tops: BTreeSet<&str> = source.modules.iter().map(|m| m[0].as_str()).collect();
    let mut graph = Graph::new();
    for (file, module, code) in &source.files {
        graph.entry(module[0].clone()).or_default();
        for line in code {
            for path in named_paths(line, module) {
                if path[0] != module[0] && tops.contains(path[0].as_str()) {
                    let names = graph.entry(module[0].clone()).or_default();
                    names.entry(path[0].clone()).or_default().insert(file.clone());
                }
            }
        }
    }
    graph
}

/// File -> the files (other than `mod.rs` files, which only gather their folder) it names, for
/// the files under `folder`.
fn file_graph(source: &Source, folder: &str) -> Graph {
    let file_of: BTreeMap<&Vec<String>, &String> =
        source.files.iter().map(|(file, module, _)| (module, file)).collect();
    let mut graph = Graph::new();
    for (file, module, code) in source.files.iter().filter(|(_, m, _)| m[0] == folder) {
        graph.entry(file.clone()).or_default();
        for line in code {
            for path in named_paths(line, module) {
                // The longest prefix of the path that is a file's module.
                let named = (1..=path.len())
                    .rev()
                    .map(|n| path[..n].to_vec())
                    .find(|prefix| source.modules.contains(prefix));
                let Some(named) = named.filter(|n| n[0] == folder && n != module) else {
                    continue;
                };
                let target = file_of[&named];
                if !target.ends_with("mod.rs") {
                    let names = graph.entry(file.clone()).or_default();
                    names.entry(target.clone()).or_default().insert(file.clone());
                }
            }
        }
    }
    graph
}

/// The shortest path from `from` to `to`, if any.
fn path_between(graph: &Graph, from: &str, to: &str) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<String, String> = BTreeMap::new();
    let mut queue = VecDeque::from([from.to_string()]);
    while let Some(node) = queue.pop_front() {
        if node == to {
            let mut path = vec![node];
            while let Some(prev) = came_from.get(path.last().expect("not empty")) {
                path.push(prev.clone());
            }
            path.reverse();
            return Some(path);
        }
        for next in graph.get(&node).into_iter().flat_map(BTreeMap::keys) {
            if next != from && !came_from.contains_key(next) {
                came_from.insert(next.clone(), node.clone());
                queue.push_back(next.clone());
            }
        }
    }
    None
}

/// Every cycle of the graph (the shortest through each edge that closes one), each as its
/// nodes and the files that make each step, in a line.
fn cycles(graph: &Graph) -> Vec<String> {
    let mut seen = BTreeSet::new();
    let mut found = Vec::new();
    for (a, names) in graph {
        for b in names.keys() {
            let Some(back) = path_between(graph, b, a) else {
                continue;
            };
            let mut cycle = vec![a.clone()];
            cycle.extend(back);
            // One rotation of each cycle: the one starting from its least node.
            let ring = &cycle[..cycle.len() - 1];
            let least = (0..ring.len()).min_by_key(|&i| &ring[i]).expect("not empty");
            let key: Vec<String> = ring[least..].iter().chain(&ring[..least]).cloned().collect();
            if !seen.insert(key) {
                continue;
            }
            let steps: Vec<String> = cycle
                .windows(2)
                .map(|step| {
                    let files: Vec<&str> = graph[&step[0]][&step[1]].iter().map(String::as_str).collect();
                    format!("{} -> {} ({})", step[0], step[1], files.join(", "))
                })
                .collect();
            found.push(steps.join("; "));
        }
    }
    found
}

#[test]
fn folders_import_one_another_without_a_cycle() {
    let graph = folder_graph(&read_source(&src()));
    assert!(
        graph.contains_key("fs") && graph.contains_key("zarr"),
        "read src/: {graph:?}"
    );
    let found = cycles(&graph);
    assert!(
        found.is_empty(),
        "the modules at the top of src/ import one another in a cycle:\n  {}",
        found.join("\n  ")
    );
}

#[test]
fn layers_name_only_layers_below_them() {
    let graph = folder_graph(&read_source(&src()));
    let mut wrong = Vec::new();
    let mut skips = BTreeSet::new();
    for (level, layer) in LAYERS.iter().enumerate() {
        for (named, files) in graph.get(*layer).into_iter().flatten() {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            match LAYERS.iter().position(|l| l == named) {
                _ if LEAVES.contains(&named.as_str()) => {}
                Some(below) if below == level + 1 => {}
                Some(below) if below > level + 1 => {
                    skips.insert((layer.to_string(), named.clone(), files.join(", ")));
                }
                _ => wrong.push(format!("{layer} names {named} ({})", files.join(", "))),
            }
        }
    }
    for leaf in LEAVES {
        for (named, files) in graph.get(leaf).into_iter().flatten() {
            let files: Vec<&str> = files.iter().map(String::as_str).collect();
            wrong.push(format!("{leaf} names {named} ({})", files.join(", ")));
        }
    }
    assert!(wrong.is_empty(), "names against the layers:\n  {}", wrong.join("\n  "));
    let known: BTreeSet<(String, String)> = KNOWN_SKIPS
        .iter()
        .map(|(a, b, _)| (a.to_string(), b.to_string()))
        .collect();
    let skipped: BTreeSet<(String, String)> = skips.iter().map(|(a, b, _)| (a.clone(), b.clone())).collect();
    let new: Vec<String> = skips
        .iter()
        .filter(|(a, b, _)| !known.contains(&(a.clone(), b.clone())))
        .map(|(a, b, files)| format!("{a} names {b} ({files})"))
        .collect();
    assert!(
        new.is_empty(),
        "layers skip the layer below them:\n  {}",
        new.join("\n  ")
    );
    let gone: Vec<&(String, String)> = known.difference(&skipped).collect();
    assert!(
        gone.is_empty(),
        "no longer skipped (take them off KNOWN_SKIPS): {gone:?}"
    );
}

#[test]
fn clap_stays_with_the_command_line() {
    let source = read_source(&src());
    let outside: Vec<&str> = source
        .files
        .iter()
        .filter(|(_, module, code)| module[0] != "cli" && code.iter().any(|line| line.contains("clap::")))
        .map(|(file, _, _)| file.as_str())
        .collect();
    assert!(outside.is_empty(), "clap named outside src/cli/: {outside:?}");
}

#[test]
fn nothing_below_names_the_command_line() {
    let graph = folder_graph(&read_source(&src()));
    let naming: Vec<String> = graph
        .iter()
        .filter(|(_, names)| names.contains_key("cli"))
        .map(|(module, names)| format!("{module} ({:?})", names["cli"]))
        .collect();
    // The fuzz targets' entry point runs the mount helper's argument expansion.
    assert_eq!(
        naming,
        ["fuzzing ({\"fuzzing.rs\"})"],
        "cli/ is named only from above it"
    );
}

#[test]
fn files_that_start_a_program_import_one_another_without_a_cycle() {
    let source = read_source(&src());
    for folder in ACYCLIC_FILES {
        let graph = file_graph(&source, folder);
        assert!(graph.len() > 1, "src/{folder}/ holds files: {graph:?}");
        if folder == "mount" {
            let daemon = graph
                .get("mount/daemon.rs")
                .map(|names| names.contains_key("mount/serve.rs"));
            assert_eq!(
                daemon,
                Some(true),
                "the daemon's `use super::serve::serve` is read: {graph:?}"
            );
        }
        let found = cycles(&graph);
        assert!(
            found.is_empty(),
            "files of src/{folder}/ import one another in a cycle:\n  {}",
            found.join("\n  ")
        );
    }
}

#[test]
fn references_are_read_as_modules() {
    let module: Vec<String> = ["mount", "daemon"].map(String::from).to_vec();
    let named = |line| named_paths(line, &module);
    assert_eq!(named("use crate::fs::Fs;"), [["fs", "Fs"]]);
    assert_eq!(
        named("use crate::{view::View, store};"),
        [vec!["view", "View"], vec!["store"]]
    );
    assert_eq!(named("let x = super::serve::serve(s);"), [["mount", "serve", "serve"]]);
    assert_eq!(named("super::super::zarr::json"), [["zarr", "json"]]);
    assert!(named("zarrfs::crate::x; a_super::b").is_empty());
    let graph: Graph =
        [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
            .into_iter()
            .fold(Graph::new(), |mut g, (x, y)| {
                g.entry(x.into())
                    .or_default()
                    .entry(y.into())
                    .or_default()
                    .insert(format!("{x}.rs"));
                g
            });
    assert_eq!(
        cycles(&graph),
        ["a -> b (a.rs); b -> c (b.rs); c -> a (c.rs)"],
        "one cycle, said once"
    );
}
