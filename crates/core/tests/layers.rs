//! The crate's architecture, checked: every module sits in a layer and imports only from
//! its own layer or the ones below, and no source file imports, directly or through
//! others, a file that imports it back.
//!
//! Imports are read from the source text of the production code (unit-test modules left
//! out): every `crate::`, `super::` and `self::` path, resolved to the file that defines the
//! module it names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bottom first. A module may import from its own layer or any layer below.
const LAYERS: &[&[&str]] = &[
    &["conf"],
    &[
        "fds",
        "freq",
        "wire",
        "accounts",
        "buffer",
        "clock",
        "transport",
        "proxy_proto",
        "auth",
        "keepalive",
        "sockbuf",
        "h2_stream",
        "h3_stream",
        "padded",
        "tls",
    ],
    &["pool", "log", "stick", "cache"],
    &["runtime"],
    &[
        "balance",
        "check",
        "queue",
        "acl",
        "rules",
        "sample",
        "compression",
        "cookie",
        "persist",
        "peers",
        "errorpages",
        "filters",
        "mail",
        "dns",
        "backend",
        "pending",
        "stats",
    ],
    &["stream"],
    &["worker"],
    &["control"],
    &["load"],
    &["lib"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer: add it to LAYERS"))
}

/// Module path of a file: `src/stream/txn.rs` -> ["stream", "txn"]; `src/lib.rs` -> [].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap();
    match last.as_str() {
        "lib.rs" | "mod.rs" => {}
        other => parts.push(other.trim_end_matches(".rs").to_string()),
    }
    parts
}

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without comments and string literals (they may mention paths).
fn code(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let mut in_str = false;
        let mut prev = ' ';
        let mut kept = String::new();
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            if !in_str && c == '/' && chars.get(i + 1) == Some(&'/') {
                break;
            }
            if c == '"' && prev != '\\' && !(prev == '\'' && chars.get(i + 1) == Some(&'\'')) {
                in_str = !in_str;
            } else if !in_str {
                kept.push(c);
            }
            prev = c;
            i += 1;
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// Expands `use a::{b, c::{d, e}}` groups into flat paths, then collects every path that
/// starts with `crate`, `super` or `self`.
fn paths(code: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < bytes.len() {
        let starts = ["crate::", "super::", "self::"]
            .iter()
            .find(|p| code_at(&bytes, i, p) && (i == 0 || !ident(bytes[i - 1])));
        if let Some(p) = starts {
            let (mut list, end) = expand(&bytes, i, p.len() - 2);
            found.append(&mut list);
            i = end;
        } else {
            i += 1;
        }
    }
    found
}

/// In a `mod.rs` or `lib.rs`, paths through the modules it declares (`listener::open`),
/// which name no `crate`/`self` prefix.
fn child_paths(code: &str) -> Vec<Vec<String>> {
    let children: Vec<String> = code
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let l = l.strip_prefix("pub ").unwrap_or(l);
            let l = l.strip_prefix("pub(crate) ").unwrap_or(l);
            l.strip_prefix("mod ")?
                .strip_suffix(';')
                .map(str::to_string)
        })
        .collect();
    let chars: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_' || c == ':';
    let mut found = Vec::new();
    for child in &children {
        let pat = format!("{child}::");
        let mut i = 0;
        while i + pat.len() <= chars.len() {
            if code_at(&chars, i, &pat) && (i == 0 || !ident(chars[i - 1])) {
                found.push(vec!["self".to_string(), child.clone()]);
                i += pat.len();
            } else {
                i += 1;
            }
        }
    }
    found
}

fn code_at(s: &[char], i: usize, p: &str) -> bool {
    p.chars().enumerate().all(|(k, c)| s.get(i + k) == Some(&c))
}

/// Reads a path starting at `i` whose first segment has `first_len` characters, expanding
/// one level of braces. Returns the flat paths and where reading stopped.
fn expand(s: &[char], i: usize, first_len: usize) -> (Vec<Vec<String>>, usize) {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut segs = vec![s[i..i + first_len].iter().collect::<String>()];
    let mut j = i + first_len;
    loop {
        if !code_at(s, j, "::") {
            return (vec![segs], j);
        }
        j += 2;
        if s.get(j) == Some(&'{') {
            // A group: split on top-level commas.
            let mut depth = 0;
            let mut start = j + 1;
            let mut out = Vec::new();
            let mut k = j;
            while k < s.len() {
                match s[k] {
                    '{' => depth += 1,
                    '}' | ',' if depth == 1 => {
                        let item: String = s[start..k].iter().collect();
                        let item = item.trim();
                        if !item.is_empty() {
                            let head = item.split("::").next().unwrap_or("");
                            let head = head.split_whitespace().next().unwrap_or("");
                            let mut p = segs.clone();
                            if head != "self" && !head.is_empty() && head != "*" {
                                p.push(head.to_string());
                            }
                            out.push(p);
                        }
                        start = k + 1;
                        if s[k] == '}' {
                            return (out, k + 1);
                        }
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
                k += 1;
            }
            return (out, k);
        }
        let start = j;
        while j < s.len() && ident(s[j]) {
            j += 1;
        }
        if j == start {
            return (vec![segs], j);
        }
        segs.push(s[start..j].iter().collect());
    }
}

#[test]
fn modules_import_only_downwards_and_files_form_no_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    files(&src, &mut all);
    // Module path -> file.
    let by_module: BTreeMap<Vec<String>, PathBuf> = all
        .iter()
        .map(|f| (module_path(&src, f), f.clone()))
        .collect();
    let mut edges: BTreeMap<Vec<String>, Vec<Vec<String>>> = BTreeMap::new();
    let mut wrong = Vec::new();
    for f in &all {
        let me = module_path(&src, f);
        let is_mod_file = f.ends_with("mod.rs") || f.ends_with("lib.rs");
        let text = std::fs::read_to_string(f).unwrap();
        // The production code: unit-test modules (at the end of a file) are left out.
        let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
        let code = code(text);
        let mut found = paths(&code);
        if is_mod_file {
            found.extend(child_paths(&code));
        }
        for p in found {
            // Absolute module path the import names.
            let mut abs: Vec<String> = match p[0].as_str() {
                "crate" => Vec::new(),
                "self" if is_mod_file => me.clone(),
                "self" => me.clone(),
                _ => {
                    // `super` from a mod.rs/lib.rs is the parent of its module; from a leaf
                    // file it is its own folder's module.
                    let mut base = me.clone();
                    base.pop();
                    base
                }
            };
            let mut rest = &p[1..];
            while rest.first().is_some_and(|s| s == "super") {
                abs.pop();
                rest = &rest[1..];
            }
            abs.extend(rest.iter().cloned());
            // The longest prefix that is a file of ours.
            let target = (0..=abs.len())
                .rev()
                .map(|n| abs[..n].to_vec())
                .find(|m| by_module.contains_key(m))
                .unwrap();
            if target == me {
                continue;
            }
            let top = |m: &[String]| m.first().cloned().unwrap_or_else(|| "lib".into());
            let (from, to) = (top(&me), top(&target));
            if from != to && layer_of(&to) > layer_of(&from) {
                wrong.push(format!(
                    "{} imports {} (layer {} above {})",
                    me.join("::"),
                    target.join("::"),
                    layer_of(&to),
                    layer_of(&from)
                ));
            }
            let e = edges.entry(me.clone()).or_default();
            if !e.contains(&target) {
                e.push(target);
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports that go up:\n{}",
        wrong.join("\n")
    );
    // Depth-first search for a circle among files.
    fn visit(
        m: &Vec<String>,
        edges: &BTreeMap<Vec<String>, Vec<Vec<String>>>,
        state: &mut BTreeMap<Vec<String>, u8>,
        stack: &mut Vec<Vec<String>>,
    ) -> Option<Vec<Vec<String>>> {
        match state.get(m) {
            Some(2) => return None,
            Some(1) => {
                let at = stack.iter().position(|s| s == m).unwrap();
                let mut circle = stack[at..].to_vec();
                circle.push(m.clone());
                return Some(circle);
            }
            _ => {}
        }
        state.insert(m.clone(), 1);
        stack.push(m.clone());
        for n in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(n, edges, state, stack) {
                return Some(c);
            }
        }
        stack.pop();
        state.insert(m.clone(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for m in by_module.keys() {
        if let Some(circle) = visit(m, &edges, &mut state, &mut Vec::new()) {
            let names: Vec<String> = circle
                .iter()
                .map(|m| {
                    if m.is_empty() {
                        "lib".into()
                    } else {
                        m.join("::")
                    }
                })
                .collect();
            panic!("import circle: {}", names.join(" -> "));
        }
    }
}

#[test]
fn the_import_reader_reads_groups_and_relative_paths() {
    let c = code("use crate::{a::{B, c}, d}; // crate::not::this\nlet x = \"crate::nor::this\"; super::super::e::f();\n");
    let p = paths(&c);
    let flat: Vec<String> = p.iter().map(|p| p.join("::")).collect();
    assert_eq!(flat, ["crate::a", "crate::d", "super::super::e::f"]);
}
