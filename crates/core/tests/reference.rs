//! docs/configuration.md against the code: its generated part is the keyword tables
//! (global and proxy keywords by family, server options, CLI commands), each keyword with
//! the one line of meaning its table gives it. A keyword added to a table, or a meaning
//! changed, without the reference following fails here; regenerate with
//! `SLUICE_WRITE_REFERENCE=1 cargo test -p sluice-core --test reference`.

use std::fmt::Write;

use sluice_config::Scope;

const BEGIN: &str = "<!-- generated from the keyword tables (crates/core/tests/reference.rs): do not edit by hand -->";
const END: &str = "<!-- end of the generated part -->";

fn sections(scope: Scope) -> String {
    let names = [
        (Scope::GLOBAL, "global"),
        (Scope::DEFAULTS, "defaults"),
        (Scope::FRONTEND, "frontend"),
        (Scope::BACKEND, "backend"),
    ];
    let mut out: Vec<&str> = names
        .iter()
        .filter(|(s, _)| scope.intersects(*s))
        .map(|(_, n)| *n)
        .collect();
    // A `listen` section is a frontend and a backend.
    if scope.intersects(Scope::FRONTEND) || scope.intersects(Scope::BACKEND) {
        out.push("listen");
    }
    out.join(", ")
}

/// A table cell: its pipes escaped (a meaning often starts with the keyword's syntax,
/// `name ARGS: ...`, which stays).
fn cell(s: &str) -> String {
    s.replace('|', "\\|")
}

fn generated() -> String {
    let (global, proxy) = sluice_core::load::reference();
    let mut out = String::new();
    for (part, families, with_sections) in [
        ("Global section", &global, false),
        (
            "Proxy sections (defaults, frontend, listen, backend)",
            &proxy,
            true,
        ),
    ] {
        let _ = writeln!(out, "\n## {part}\n");
        for f in families.iter() {
            let _ = writeln!(out, "### {}\n", f.title);
            match with_sections {
                true => {
                    out.push_str("| keyword | sections | meaning |\n| --- | --- | --- |\n");
                    for (name, scope, help) in &f.keywords {
                        let _ =
                            writeln!(out, "| `{name}` | {} | {} |", sections(*scope), cell(help));
                    }
                }
                false => {
                    out.push_str("| keyword | meaning |\n| --- | --- |\n");
                    for (name, _, help) in &f.keywords {
                        let _ = writeln!(out, "| `{name}` | {} |", cell(help));
                    }
                }
            }
            out.push('\n');
        }
    }
    let (options, pending) = sluice_core::backend::server_options();
    out.push_str("## Server options (`server`, `default-server`)\n\n");
    out.push_str("| option | meaning |\n| --- | --- |\n");
    for o in options {
        let _ = writeln!(out, "| `{}` | {} |", o.name, cell(o.help));
    }
    let _ = writeln!(
        out,
        "\nRefused as not supported yet (with the line): {}.\n",
        pending
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out.push_str("## Runtime CLI commands (`stats socket`)\n\n");
    out.push_str("| command | level | meaning |\n| --- | --- | --- |\n");
    for c in sluice_core::control::cli::COMMANDS {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} |",
            c.words.join(" "),
            format!("{:?}", c.level).to_lowercase(),
            cell(c.help)
        );
    }
    out
}

#[test]
fn the_reference_says_what_the_keyword_tables_say() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
    let doc = std::fs::read_to_string(path).expect("docs/configuration.md");
    let (head, rest) = doc
        .split_once(BEGIN)
        .expect("the generated part's start marker");
    let (_, tail) = rest
        .split_once(END)
        .expect("the generated part's end marker");
    let want = format!("{head}{BEGIN}\n{}{END}{tail}", generated());
    if std::env::var_os("SLUICE_WRITE_REFERENCE").is_some() {
        std::fs::write(path, &want).unwrap();
        return;
    }
    if doc != want {
        let first = doc
            .lines()
            .zip(want.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        panic!(
            "docs/configuration.md does not say what the keyword tables say (from line {}: {:?} where the code says {:?}); regenerate it with SLUICE_WRITE_REFERENCE=1 cargo test -p sluice-core --test reference",
            first + 1,
            doc.lines().nth(first),
            want.lines().nth(first)
        );
    }
}

/// The names a parser function of `conf/sample_parse.rs` matches on: the string literals
/// of its match arms (`"name" =>`, `"a" | "b" =>`, with or without a guard).
fn matched_names(source: &str, function: &str) -> Vec<String> {
    let start = source
        .find(&format!("fn {function}("))
        .unwrap_or_else(|| panic!("fn {function} in sample_parse.rs"));
    // The function ends where the next item at the left margin starts.
    let body = &source[start..];
    let end = body[1..].find("\nfn ").map_or(body.len(), |i| i + 1);
    let mut names = Vec::new();
    for line in body[..end].lines() {
        let t = line.trim_start();
        let Some(arrow) = t.find("=>") else { continue };
        let pattern = t[..arrow].split(" if ").next().unwrap_or_default();
        let alternatives: Vec<&str> = pattern.split('|').map(str::trim).collect();
        if alternatives
            .iter()
            .all(|a| a.len() >= 2 && a.starts_with('"') && a.ends_with('"'))
        {
            names.extend(alternatives.iter().map(|a| a[1..a.len() - 1].to_string()));
        }
    }
    names
}

/// The sample parser's source and the reference's text.
fn parser_and_reference() -> (String, String) {
    let read = |path: &str| {
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/");
        std::fs::read_to_string(format!("{root}{path}")).unwrap()
    };
    (
        read("src/conf/sample_parse.rs"),
        read("../../docs/configuration.md"),
    )
}

/// Every sample fetch and converter the parser knows has its row in the reference (as
/// `` `name` `` or `` `name(ARGS)` ``).
#[test]
fn every_fetch_and_converter_has_its_line() {
    let (source, doc) = parser_and_reference();
    let mut missing = Vec::new();
    for function in ["parse_fetch", "parse_conv"] {
        let names = matched_names(&source, function);
        assert!(
            names.len() > 50,
            "{function}: only {} names read",
            names.len()
        );
        for name in names {
            if !doc.contains(&format!("| `{name}` |")) && !doc.contains(&format!("| `{name}(")) {
                missing.push(format!("{function}: {name}"));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/configuration.md has no row for: {missing:?}"
    );
}

/// The rows of a section of the reference (from its `## TITLE` to the next `## `): the
/// names of the keywords they list, without their arguments.
fn rows_of(doc: &str, title: &str) -> Vec<String> {
    let start = doc
        .find(&format!("\n## {title}\n"))
        .unwrap_or_else(|| panic!("section {title}"));
    let rest = &doc[start + 4..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    rest[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .map(|name| {
            name.split(['(', ' '])
                .next()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// And the other way: every fetch and converter the reference lists is one the parser
/// knows (a family written with a star stands for the names it starts).
#[test]
fn every_fetch_and_converter_listed_exists() {
    let (source, doc) = parser_and_reference();
    for (title, function) in [
        ("Sample fetches", "parse_fetch"),
        ("Converters", "parse_conv"),
    ] {
        let known = matched_names(&source, function);
        for name in rows_of(&doc, title) {
            let family = name.strip_suffix('*');
            let found = match family {
                Some(prefix) => {
                    source.contains(&format!("\"{prefix}"))
                        || source.contains(&format!("strip_prefix(\"{prefix}"))
                }
                None => known.contains(&name),
            };
            assert!(
                found,
                "{title}: `{name}` is listed but the parser does not know it"
            );
        }
    }
}

/// Every relative link of the README and of the pages under docs/ leads to a file that
/// exists.
#[test]
fn links_between_the_docs_resolve() {
    let root = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."));
    let mut pages = vec![root.join("README.md")];
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                pages.push(path);
            }
        }
    }
    let mut broken = Vec::new();
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for (i, _) in text.match_indices("](") {
            let target = text[i + 2..].split(')').next().unwrap_or_default();
            let file = target.split('#').next().unwrap_or_default();
            // (Not a link: code that happens to hold `](`, such as `map(FILE[,DEFAULT])`.)
            let code = file.contains(['[', ',', ' ', '*', '|', '`']);
            if file.is_empty() || code || file.contains("://") || file.starts_with("mailto:") {
                continue;
            }
            let resolved = page.parent().unwrap().join(file);
            if !resolved.exists() {
                broken.push(format!("{}: {target}", page.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:?}");
    assert!(pages.len() >= 5, "pages read: {pages:?}");
}

/// The options a `bind` line's parsers match on (`add_bind`, and `bind_option` for TLS):
/// the string literals of the arms that open a block, an arm spread over several lines
/// included, and the options refused as not supported yet.
fn bind_options() -> Vec<String> {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/src/");
    let mut names = Vec::new();
    for (file, function) in [
        ("worker/listener.rs", "add_bind"),
        ("tls/mod.rs", "bind_option"),
    ] {
        let source = std::fs::read_to_string(format!("{root}{file}")).unwrap();
        let start = source.find(&format!("pub fn {function}(")).unwrap();
        let body = &source[start..];
        let end = body[1..].find("\n}\n").map_or(body.len(), |i| i + 1);
        for line in body[..end].lines() {
            let t = line.trim().trim_start_matches("| ");
            let t = t.strip_suffix(" => {").unwrap_or(t);
            let words: Vec<&str> = t.split(" | ").collect();
            // (An option's name: a word of lower-case letters, digits and dashes.)
            let literal = |w: &&str| {
                w.len() > 2
                    && w.starts_with('"')
                    && w.ends_with('"')
                    && w[1..w.len() - 1]
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            };
            if !t.is_empty() && words.iter().all(literal) {
                names.extend(words.iter().map(|w| w[1..w.len() - 1].to_string()));
            }
        }
        if let Some(i) = source.find("const PENDING_BIND_OPTIONS") {
            let list = &source[i..i + source[i..].find("];").unwrap()];
            names.extend(list.split('"').skip(1).step_by(2).map(str::to_string));
        }
    }
    names
}

/// The options the reference's bind table names (each row's `a / b` or `a, b` are several).
fn bind_rows(doc: &str) -> Vec<String> {
    let start = doc.find("- **Bind options**").expect("the bind options");
    let end = start + doc[start..].find("\n- **").expect("the next family");
    doc[start..end]
        .lines()
        .filter_map(|l| l.trim().strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .flat_map(|cell| {
            cell.split([',', '/'])
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|part| part.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Every bind option the parsers know has its row in the reference, and every option the
/// reference lists is one they know (the TLS versions' `no-` and `force-` forms are read
/// by a rule of their own, `TlsVersions::take_option`).
#[test]
fn the_bind_options_table_says_what_the_parsers_take() {
    let (_, doc) = parser_and_reference();
    let known = bind_options();
    assert!(known.len() > 30, "only {} bind options read", known.len());
    let listed = bind_rows(&doc);
    for name in &known {
        assert!(listed.contains(name), "bind option `{name}` has no row");
    }
    let version = |n: &str| {
        let v = n.strip_prefix("no-").or_else(|| n.strip_prefix("force-"));
        v.is_some_and(|v| ["sslv3", "tlsv10", "tlsv11", "tlsv12", "tlsv13"].contains(&v))
    };
    for name in &listed {
        assert!(
            known.contains(name) || version(name),
            "bind option `{name}` is listed but no parser takes it"
        );
    }
}

/// Every action the reference lists is one the rule parser names (`rules.rs`; an action
/// numbered by its slot, `track-sc0`, or written with its argument, `set-var(NAME)`, by
/// the name it starts with). The other way is not checked: the rule parser reads an
/// action's words in the same match arms as their options.
#[test]
fn every_action_listed_exists() {
    let (_, doc) = parser_and_reference();
    let rules =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/src/rules.rs")).unwrap();
    let start = doc.find("\n## Actions\n").expect("the actions");
    let rest = &doc[start + 4..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let listed: Vec<String> = rest[..end]
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .flat_map(|cell| cell.split(", ").map(str::to_string).collect::<Vec<_>>())
        .map(|a| {
            let name = a.split([' ', '(', '\\', '*']).next().unwrap_or_default();
            name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.')
                .to_string()
        })
        .collect();
    assert!(listed.len() > 40, "only {} actions read", listed.len());
    for name in listed {
        assert!(
            rules.contains(&format!("\"{name}")),
            "action `{name}` is listed but the rule parser does not name it"
        );
    }
}
