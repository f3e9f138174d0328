//! The stick-table commands of the CLI: `show table`, `clear table` and `set table`, with
//! HAProxy 2.6's arguments, order of checks and answers (recorded side by side with
//! HAProxy 2.6.12), and its layout for entries.
//!
//! Keys are typed as HAProxy takes them (a binary key in hexadecimal, which HAProxy 2.6
//! refuses for these commands and sluice accepts); a key that does not parse is refused
//! (`Invalid key`), where HAProxy reads a malformed IPv4 key as 0.0.0.0.

use std::fmt::Write as _;

use crate::runtime::Process;
use crate::stick::{Counter, EntryRef, Key, KeyType, Table};

/// Which command: each has its own usage text.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    Show,
    Clear,
    Set,
}

impl Action {
    fn usage(self) -> &'static str {
        match self {
            Action::Show => "Optional argument only supports \"data.<store_data_type>\" <operator> <value> and key <key>\n",
            Action::Clear => "Required arguments: <table> \"data.<store_data_type>\" <operator> <value> or <table> key <key>\n",
            Action::Set => "Required arguments: <table> key <key> [data.<store_data_type> <value>]*\n",
        }
    }
}

/// A condition on a stored value (`data.TYPE OP VALUE`).
struct Filter {
    counter: Counter,
    holds: fn(u64, u64) -> bool,
    value: u64,
}

/// What a command names in its table.
enum Selection<'a> {
    All,
    /// `key K`, and the words after it (`set table`'s data).
    Key(Key, &'a [&'a str]),
    Filters(Vec<Filter>),
}

/// HAProxy's filters: up to four `data.TYPE OP VALUE` triples.
const MAX_FILTERS: usize = 4;

/// Reads `NAME [key K ...| data.TYPE OP V ...]` as HAProxy does; `Err` is the answer.
fn request<'p, 'a>(
    s: &'p Process,
    args: &'a [&'a str],
    action: Action,
) -> Result<Option<(&'p Table, Selection<'a>)>, String> {
    let Some(name) = args.first() else {
        return match action {
            Action::Show => Ok(None),
            _ => Err(action.usage().into()),
        };
    };
    let t = s.state.table(name).ok_or("No such table\n")?;
    let selection = match args.get(1..).unwrap_or_default() {
        [] => Selection::All,
        ["key", rest @ ..] => {
            let k = rest.first().ok_or("Key value expected\n")?;
            let key = table_key(t, k).ok_or("Invalid key\n")?;
            Selection::Key(key, &rest[1..])
        }
        [first, ..] if first.starts_with("data.") => {
            if action == Action::Set {
                return Err("content-based lookup is only supported with the \"show\" and \"clear\" actions\n".into());
            }
            Selection::Filters(filters(t, &args[1..])?)
        }
        _ => return Err(action.usage().into()),
    };
    Ok(Some((t, selection)))
}

fn filters(t: &Table, mut words: &[&str]) -> Result<Vec<Filter>, String> {
    let mut out = Vec::new();
    while !words.is_empty() && out.len() < MAX_FILTERS {
        let n = out.len() + 1;
        let get = |i: usize| words.get(i).copied().unwrap_or_default();
        let counter = get(0)
            .strip_prefix("data.")
            .and_then(Counter::from_dump_name)
            .ok_or_else(|| format!("Filter entry #{n}: Unknown data type\n"))?;
        if crate::conf::stick::stored_as(&t.conf.store, counter).is_none() {
            return Err(format!(
                "Filter entry #{n}: Data type not stored in this table\n"
            ));
        }
        let holds: fn(u64, u64) -> bool = match get(1) {
            "eq" => |a, b| a == b,
            "ne" => |a, b| a != b,
            "lt" => |a, b| a < b,
            "le" => |a, b| a <= b,
            "gt" => |a, b| a > b,
            "ge" => |a, b| a >= b,
            _ => {
                return Err(format!(
                    "Filter entry #{n}: Require and operator among \"eq\", \"ne\", \"le\", \"ge\", \"lt\", \"gt\"\n"
                ))
            }
        };
        let value = get(2).parse::<u64>().map_err(|_| {
            format!("Filter entry #{n}: Require a valid integer value to compare against\n")
        })?;
        out.push(Filter {
            counter,
            holds,
            value,
        });
        words = words.get(3..).unwrap_or_default();
    }
    Ok(out)
}

/// `show table [NAME [key K | data.TYPE OP V ...]]`, in HAProxy's layout.
pub(super) fn show(s: &Process, args: &[&str]) -> String {
    let (t, selection) = match request(s, args, Action::Show) {
        Ok(Some(found)) => found,
        Ok(None) => return s.state.tables.iter().map(|t| header(t)).collect(),
        Err(answer) => return answer,
    };
    let now = crate::runtime::clock_ms();
    let mut out = header(t);
    for (shown, e) in selected(t, &selection, now) {
        let g = e.lock().unwrap_or_else(|e| e.into_inner());
        let exp = g.expires.map_or(0, |x| x.saturating_sub(now));
        // Held by the table and by each transaction tracking it.
        let users = std::sync::Arc::strong_count(&e).saturating_sub(2);
        let _ = writeln!(
            out,
            "{:p}: key={shown} use={users} exp={exp} {}",
            std::sync::Arc::as_ptr(&e),
            g.describe(now)
        );
    }
    out
}

/// `clear table NAME [key K | data.TYPE OP V ...]`: drops the entries named (all of
/// them without a selection).
pub(super) fn clear(s: &Process, args: &[&str]) -> String {
    let (t, selection) = match request(s, args, Action::Clear) {
        Ok(Some(found)) => found,
        Ok(None) => return Action::Clear.usage().into(),
        Err(answer) => return answer,
    };
    match &selection {
        Selection::All => t.clear(None),
        Selection::Key(k, _) => t.clear(Some(k)),
        Selection::Filters(_) => {
            let now = crate::runtime::clock_ms();
            let doomed: Vec<Key> = t
                .entries(now)
                .into_iter()
                .filter(|(_, e)| matches_all(e, &selection, now))
                .map(|(k, _)| k)
                .collect();
            for k in &doomed {
                t.clear(Some(k));
            }
        }
    }
    String::new()
}

/// `set table NAME key K [data.TYPE VALUE]...`: the entry is made (or refreshed), then each
/// value stored in turn; the first bad pair ends the command with HAProxy's answer, the
/// values before it kept. A rate takes the value for the period now starting.
pub(super) fn set(s: &Process, args: &[&str]) -> String {
    let (t, key, data) = match request(s, args, Action::Set) {
        Ok(Some((t, Selection::Key(key, data)))) => (t, key, data),
        // `set table NAME` alone does nothing, as in HAProxy.
        Ok(Some(_)) => return String::new(),
        Ok(None) => return Action::Set.usage().into(),
        Err(answer) => return answer,
    };
    let now = crate::runtime::clock_ms();
    let Some(entry) = t.touch(key.clone(), now) else {
        return "Unable to allocate a new entry\n".into();
    };
    let mut e = entry.lock().unwrap_or_else(|e| e.into_inner());
    let answer = store_pairs(t, &mut e, data, now);
    // What was stored before a bad pair stays, and reaches the peers.
    t.changed(&key, &mut e);
    answer
}

/// Stores each `data.TYPE VALUE` pair in turn; HAProxy's answer to the first bad one.
fn store_pairs(t: &Table, e: &mut crate::stick::Entry, data: &[&str], now: u64) -> String {
    for pair in data.chunks(2) {
        let Some(name) = pair[0].strip_prefix("data.") else {
            return "\"data.<type>\" followed by a value expected\n".into();
        };
        let Some(counter) = Counter::from_dump_name(name) else {
            return "Unknown data type\n".into();
        };
        let Some(stored) = crate::conf::stick::stored_as(&t.conf.store, counter) else {
            return "Data type not stored in this table\n".into();
        };
        let Some(value) = pair.get(1).and_then(|v| v.parse::<i64>().ok()) else {
            return "Require a valid integer value to store\n".into();
        };
        e.store(stored, stored.stored_width(value), now);
    }
    String::new()
}

/// The entries a selection names, with their keys as shown, in key order.
fn selected(t: &Table, selection: &Selection<'_>, now: u64) -> Vec<(String, EntryRef)> {
    let mut entries: Vec<(String, EntryRef)> = t
        .entries(now)
        .into_iter()
        .filter(|(k, e)| match selection {
            Selection::Key(want, _) => want == k,
            _ => matches_all(e, selection, now),
        })
        .map(|(k, e)| (key_text(t, &k), e))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    entries
}

fn matches_all(e: &EntryRef, selection: &Selection<'_>, now: u64) -> bool {
    let Selection::Filters(filters) = selection else {
        return true;
    };
    let g = e.lock().unwrap_or_else(|e| e.into_inner());
    filters
        .iter()
        .all(|f| g.get(f.counter, now).is_some_and(|x| (f.holds)(x, f.value)))
}

fn header(t: &Table) -> String {
    let kind = match t.conf.key {
        KeyType::Ip => "ip",
        KeyType::Ipv6 => "ipv6",
        KeyType::Integer => "integer",
        KeyType::String(_) => "string",
        KeyType::Binary(_) => "binary",
    };
    format!(
        "# table: {}, type: {kind}, size:{}, used:{}\n",
        t.conf.name,
        t.conf.size,
        t.used()
    )
}

/// A key typed on the CLI (binary keys in hexadecimal).
fn table_key(t: &Table, k: &str) -> Option<Key> {
    use crate::conf::sample::Sample;
    let sample = match t.conf.key {
        KeyType::Binary(_) => {
            let hex = k.as_bytes();
            if !hex.len().is_multiple_of(2) {
                return None;
            }
            let bytes = hex
                .chunks(2)
                .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
                .collect::<Option<Vec<u8>>>()?;
            Sample::Bin(std::borrow::Cow::Owned(bytes))
        }
        _ => Sample::str(k.as_bytes()),
    };
    Key::from_sample(&sample, t.conf.key)
}

/// A key as `show table` prints it (binary keys in hexadecimal).
fn key_text(t: &Table, k: &Key) -> String {
    match (t.conf.key, k) {
        (KeyType::Binary(_), Key::Bytes(b)) => b.iter().map(|x| format!("{x:02x}")).collect(),
        _ => k.to_string(),
    }
}
