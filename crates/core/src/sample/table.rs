//! Sample fetches and converters over stick tables (`sc0_http_req_rate`, `src_get_gpc0`,
//! `table_http_req_rate(T)`, `in_table(T)`).

use std::sync::Arc;

use super::context::Ctx;
use crate::conf::sample::{Counter, NameRef, Sample, TableOp, TableSource};
use crate::runtime::clock_ms;
use crate::stick::{EntryRef, Key, Table};

/// A table fetch.
pub(super) fn fetch<'a>(
    source: TableSource,
    op: TableOp,
    counter: Counter,
    table: Option<&NameRef>,
    cx: &'a Ctx<'a>,
) -> Option<Sample<'a>> {
    let now = clock_ms();
    match source {
        TableSource::Slot(n) => cx.vars.with_tracked(n, |tracked| {
            // Tables are told apart by identity (a name is looked up once, then cached).
            let named = |n: &NameRef| cx.table(Some(n));
            let is = |t: &Arc<Table>, n: &NameRef| named(n).is_some_and(|x| Arc::ptr_eq(x, t));
            if op == TableOp::Tracked {
                let in_table = |t: &Arc<Table>| table.is_none_or(|n| is(t, n));
                return Some(Sample::Bool(tracked.is_some_and(|t| in_table(&t.table))));
            }
            let tracked = tracked?;
            match table {
                // The tracked key, looked up in another table.
                Some(n) if !is(&tracked.table, n) => {
                    let t = named(n)?;
                    apply(t, Some(&tracked.key), op, counter, now)
                }
                _ => apply_entry(
                    (&tracked.table, &tracked.key),
                    Some(tracked.entry.clone()),
                    op,
                    counter,
                    now,
                ),
            }
        }),
        TableSource::Src => {
            let t = cx.table(table)?;
            let key = Key::from_sample(&Sample::Ip(cx.client_addr()?.ip()), t.conf.key)?;
            apply(t, Some(&key), op, counter, now)
        }
    }
}

/// A table converter: the input sample is the key.
pub(super) fn convert<'a>(
    input: &Sample<'_>,
    op: TableOp,
    counter: Counter,
    table: &NameRef,
    cx: &Ctx<'_>,
) -> Option<Sample<'a>> {
    let (t, key) = keyed(input, table, cx)?;
    apply(t, Some(&key), op, counter, clock_ms())
}

/// Table `table` and the input as a key of it.
fn keyed<'c>(input: &Sample<'_>, table: &NameRef, cx: &Ctx<'c>) -> Option<(&'c Table, Key)> {
    let t = cx.table(Some(table))?;
    let key = Key::from_sample(input, t.conf.key)?;
    Some((t, key))
}

/// `in_table(T)`.
pub(super) fn contains<'a>(
    input: &Sample<'_>,
    table: &NameRef,
    cx: &Ctx<'_>,
) -> Option<Sample<'a>> {
    let (t, key) = keyed(input, table, cx)?;
    Some(Sample::Bool(t.lookup(&key, clock_ms()).is_some()))
}

/// `table_trackers(T)`: the streams tracking the input's entry, as `show table` counts
/// them in `use=` (the holders of the entry but the table and this lookup).
pub(super) fn trackers<'a>(
    input: &Sample<'_>,
    table: &NameRef,
    cx: &Ctx<'_>,
) -> Option<Sample<'a>> {
    let (t, key) = keyed(input, table, cx)?;
    let users = t
        .lookup(&key, clock_ms())
        .map_or(0, |e| std::sync::Arc::strong_count(&e).saturating_sub(2));
    Some(Sample::Int(users as i64))
}

fn apply<'a>(
    t: &Table,
    key: Option<&Key>,
    op: TableOp,
    counter: Counter,
    now: u64,
) -> Option<Sample<'a>> {
    let key = key?;
    let entry = match op {
        // Incrementing creates the entry, as HAProxy does.
        TableOp::Inc => t.touch(key.clone(), now),
        _ => t.lookup(key, now),
    };
    apply_entry((t, key), entry, op, counter, now)
}

/// Reads or changes `counter` of an entry; a key without an entry reads as 0 when the
/// table stores the counter.
fn apply_entry<'a>(
    (t, key): (&Table, &Key),
    entry: Option<EntryRef>,
    op: TableOp,
    counter: Counter,
    now: u64,
) -> Option<Sample<'a>> {
    crate::conf::stick::stored_as(&t.conf.store, counter)?;
    let Some(entry) = entry else {
        return Some(Sample::Int(0));
    };
    let mut e = entry.lock().unwrap_or_else(|e| e.into_inner());
    let value = match op {
        TableOp::Inc => {
            e.add(counter, 1, now);
            if let Some(rate) = counter.rate() {
                e.add(rate, 1, now);
            }
            t.changed(key, &mut e);
            e.get(counter, now)?
        }
        TableOp::Clr => {
            let before = e.get(counter, now)?;
            e.set(counter, 0);
            t.changed(key, &mut e);
            before
        }
        TableOp::Read | TableOp::Tracked => e.get(counter, now)?,
        TableOp::ReadKilo => e.get(counter, now)? >> 10,
    };
    Some(Sample::Int(value as i64))
}
