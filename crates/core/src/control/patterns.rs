//! The CLI's ACL and map commands (`show|add|del|clear|prepare|commit acl|map`, `set map`),
//! with HAProxy 2.6's arguments, answers and error texts: a list is named by its file or
//! by `#ID` (its number in `show acl`/`show map`), an entry by its key or by `#0x...` (the
//! id `show` prints), a version by `@N`.

use std::sync::Arc;

use crate::conf::cli::Level;
use crate::conf::patterns::PatternRef;
use crate::conf::patterns::{Compiled, Entry, Family, FormKind, MapOut, Pattern};
use crate::runtime::Process;
use crate::sample::Sample;

const MALFORMED_VERSION: &str = "Malformed version number.\n";

fn noun(family: Family) -> &'static str {
    match family {
        Family::Acl => "ACL",
        Family::Map => "map",
    }
}

fn word(family: Family) -> &'static str {
    match family {
        Family::Acl => "acl",
        Family::Map => "map",
    }
}

fn unknown(family: Family) -> String {
    format!(
        "Unknown {} identifier. Please use #<id> or <file>.\n",
        noun(family)
    )
}

/// The list named `#ID` or by its file; with `family`, only one that family lists.
fn find(p: &Process, name: &str, family: Option<Family>) -> Option<Arc<PatternRef>> {
    let found = match name.strip_prefix('#') {
        Some(id) => {
            let id: usize = id.parse().ok()?;
            p.config.patterns.iter().find(|r| r.id == id)
        }
        None => p
            .config
            .patterns
            .iter()
            .find(|r| r.file.as_deref() == Some(name)),
    }?;
    match family {
        Some(f) if found.listing(f).is_none() => None,
        _ => Some(found.clone()),
    }
}

/// A leading `@VER`, if any, and the words after it.
fn version<'a, 'w>(args: &'a [&'w str]) -> (Option<Option<u32>>, &'a [&'w str]) {
    match args.split_first() {
        Some((v, rest)) if v.starts_with('@') => (Some(v[1..].parse().ok()), rest),
        _ => (None, args),
    }
}

/// `get acl|map LIST VALUE`: for each use of the list (each match method, case and value
/// type the configuration reads it with), whether VALUE matches and which entry, in
/// HAProxy's words. The list may be either family's, as in HAProxy.
pub fn get(p: &Process, family: Family, args: &[&str]) -> String {
    let (Some(name), Some(value)) = (args.first(), args.get(1)) else {
        return format!("Missing {} identifier and/or key.\n", noun(family));
    };
    let Some(list) = find(p, name, None) else {
        return unknown(family);
    };
    let now = list.current();
    let sample = Sample::str(value.as_bytes());
    let mut out = String::new();
    for (i, kind) in now.kinds.iter().enumerate() {
        let hit = match now.snapshot.form(i) {
            Some(Compiled::Acl(patterns)) => acl_hit(kind, patterns, &sample),
            Some(Compiled::Map(entries)) => {
                let substitute = matches!(kind.values, Some((_, true)));
                crate::sample::find_entry(kind.how, substitute, entries, &sample)
            }
            None => None,
        };
        out.push_str(&lookup_line(
            family,
            kind,
            hit.and_then(|h| now.entries.get(h)),
        ));
    }
    out
}

/// The pattern of an ACL's form that the sample matches: the most specific one where
/// HAProxy looks in a tree (prefixes, networks), else the first.
fn acl_hit(kind: &FormKind, patterns: &[Pattern], sample: &Sample<'_>) -> Option<usize> {
    let hits = crate::acl::matching(kind.how, kind.icase, patterns, sample);
    if !kind.tree() {
        return hits.first().copied();
    }
    hits.into_iter().rev().max_by_key(|&i| match &patterns[i] {
        Pattern::Text(t) => t.len(),
        Pattern::Net(_, bits) => usize::from(*bits),
        _ => 0,
    })
}

/// One line of `get acl|map`: the use, then what it found.
fn lookup_line(family: Family, kind: &FormKind, hit: Option<&Entry>) -> String {
    let case = if kind.icase {
        "insensitive"
    } else {
        "sensitive"
    };
    let mut line = format!("type={}, case={case}", kind.method());
    let (found, key) = match family {
        Family::Map => ("found", "key"),
        Family::Acl => ("match", "pattern"),
    };
    let Some(e) = hit else {
        line.push_str(&format!(", {found}=no\n"));
        return line;
    };
    let idx = if kind.tree() { "tree" } else { "list" };
    line.push_str(&format!(", {found}=yes, idx={idx}, {key}=\"{}\"", e.key));
    if family == Family::Map {
        match (kind.values, &e.value) {
            (Some((out, _)), Some(v)) => {
                line.push_str(&format!(", value=\"{v}\", type=\"{}\"", value_type(out, v)))
            }
            _ => line.push_str(", value=none"),
        }
    }
    line.push('\n');
    line
}

/// HAProxy's name for the type of a map's value.
fn value_type(out: MapOut, value: &str) -> &'static str {
    match out {
        MapOut::Str => "str",
        MapOut::Int => "sint",
        MapOut::Ip if value.trim().parse::<std::net::Ipv4Addr>().is_ok() => "ipv4",
        MapOut::Ip => "ipv6",
    }
}

pub fn show(p: &Process, family: Family, args: &[&str]) -> String {
    let (ver, args) = version(args);
    if ver == Some(None) {
        return MALFORMED_VERSION.into();
    }
    let Some(name) = args.first() else {
        let mut out = String::from("# id (file) description\n");
        for r in &p.config.patterns {
            if let Some(l) = r.listing(family) {
                out.push_str(&format!(
                    "{} ({}) {}. curr_ver={} next_ver={} entry_cnt={}\n",
                    r.id,
                    r.file.as_deref().unwrap_or(""),
                    l.display,
                    l.curr,
                    l.next,
                    l.entries
                ));
            }
        }
        return out;
    };
    let Some(list) = find(p, name, Some(family)) else {
        return unknown(family);
    };
    list.entries(ver.flatten())
        .iter()
        .map(|e| match &e.value {
            Some(v) => format!("{:#x} {} {v}\n", e.id, e.key),
            None => format!("{:#x} {}\n", e.id, e.key),
        })
        .collect()
}

pub fn add(p: &Process, family: Family, args: &[&str]) -> String {
    let (ver, args) = version(args);
    // A payload arrives as the last argument, with its line breaks.
    let payload = args.last().filter(|a| a.contains('\n'));
    let pairs: Vec<(String, Option<String>)> = match (family, args) {
        (Family::Map, [_, key, value, ..]) if payload.is_none() => {
            vec![(key.to_string(), Some(value.to_string()))]
        }
        (Family::Map, [_, _]) if payload.is_some() => {
            let mut pairs = Vec::new();
            for line in args[1].lines().filter(|l| !l.trim().is_empty()) {
                let line = line.trim_start();
                match line.split_once([' ', '\t']) {
                    Some((k, v)) => pairs.push((k.to_string(), Some(v.trim_start().to_string()))),
                    None => return format!("Missing value for key '{line}'.\n"),
                }
            }
            pairs
        }
        (Family::Map, _) => {
            return "'add map' expects three parameters (map identifier, key and value) or one parameter (map identifier) and a payload\n".into()
        }
        (Family::Acl, [_, pattern, ..]) if payload.is_none() => {
            vec![(pattern.to_string(), None)]
        }
        (Family::Acl, _) => {
            return "'add acl' expects two parameters: ACL identifier and pattern.\n".into()
        }
    };
    let Some(list) = find(p, args[0], None) else {
        return unknown(family);
    };
    if family == Family::Acl && list.listing(Family::Map).is_some() {
        return "This ACL is shared with a map containing samples. You must use the command 'add map' to add values.\n".into();
    }
    let done = list.edit(|e| {
        let v = match ver {
            None => e.curr,
            Some(Some(v)) if e.curr <= v && v <= e.next => v,
            Some(Some(v)) if v < e.curr => return Err("Version number out of range".into()),
            Some(_) => {
                return Err(format!(
                    "Version number in the future, please use 'prepare {}' before",
                    word(family)
                ))
            }
        };
        for (key, value) in pairs {
            e.push(key, value, v);
        }
        Ok(())
    });
    answer(done)
}

fn answer(done: Result<(), String>) -> String {
    match done {
        Ok(()) => String::new(),
        Err(e) => format!("{e}.\n"),
    }
}

/// Whether entry `e` is the one `which` names: `#0x...` an id, anything else a key.
fn names(which: &str, e: &Entry) -> Result<bool, String> {
    match which.strip_prefix("#0x") {
        Some(hex) => u64::from_str_radix(hex, 16)
            .map(|id| id == e.id)
            .map_err(|_| "Malformed identifier. Please use #<id> or <file>".to_string()),
        None => Ok(e.key == which),
    }
}

pub fn del(p: &Process, family: Family, args: &[&str]) -> String {
    let [name, which, ..] = args else {
        return format!(
            "This command expects two parameters: {} identifier and key.\n",
            noun(family)
        );
    };
    // HAProxy 2.6 says "map" here for both families.
    let Some(list) = find(p, name, Some(family)) else {
        return unknown(Family::Map);
    };
    answer(list.edit(|e| {
        let before = e.entries.len();
        let mut bad = None;
        e.entries.retain(|entry| match names(which, entry) {
            Ok(hit) => !hit,
            Err(why) => {
                bad = Some(why);
                true
            }
        });
        match bad {
            Some(why) => Err(why),
            None if e.entries.len() == before => Err("Key not found".into()),
            None => Ok(()),
        }
    }))
}

pub fn set_map(p: &Process, args: &[&str], _: Level) -> String {
    let [name, which, value, ..] = args else {
        return "'set map' expects three parameters: map identifier, key and value.\n".into();
    };
    let Some(list) = find(p, name, Some(Family::Map)) else {
        return unknown(Family::Map);
    };
    let done = list.edit(|e| {
        let mut found = false;
        for entry in e.entries.iter_mut() {
            if names(which, entry)? {
                entry.value = Some(value.to_string());
                found = true;
            }
        }
        if found {
            Ok(())
        } else {
            Err("entry not found".into())
        }
    });
    answer(done)
}

pub fn clear(p: &Process, family: Family, args: &[&str]) -> String {
    let (ver, args) = version(args);
    // A version that does not read as one clears nothing (rather than the live one).
    if ver == Some(None) {
        return MALFORMED_VERSION.into();
    }
    let Some(name) = args.first() else {
        return format!("Missing {} identifier.\n", noun(family));
    };
    let Some(list) = find(p, name, Some(family)) else {
        return unknown(family);
    };
    answer(list.edit(|e| {
        let v = ver.flatten().unwrap_or(e.curr);
        e.entries.retain(|entry| entry.version != v);
        Ok(())
    }))
}

pub fn prepare(p: &Process, family: Family, args: &[&str]) -> String {
    let Some(name) = args.first() else {
        return format!("Missing {} identifier.\n", noun(family));
    };
    let Some(list) = find(p, name, Some(family)) else {
        return unknown(family);
    };
    match list.edit(|e| {
        e.next += 1;
        let v = e.next;
        e.entries.retain(|entry| entry.version != v);
        Ok(v)
    }) {
        Ok(v) => format!("New version created: {v}\n"),
        Err(e) => format!("{e}.\n"),
    }
}

pub fn commit(p: &Process, family: Family, args: &[&str]) -> String {
    let (ver, args) = version(args);
    let Some(ver) = ver else {
        return "Missing version number.\n".into();
    };
    let Some(name) = args.first() else {
        return format!("Missing {} identifier.\n", noun(family));
    };
    let Some(list) = find(p, name, Some(family)) else {
        return unknown(family);
    };
    answer(list.edit(|e| match ver {
        Some(v) if v > e.curr && v <= e.next => {
            e.curr = v;
            Ok(())
        }
        _ => Err("Version number out of range".into()),
    }))
}
