//! What a session learns of the other side's tables: their definitions (which of ours
//! each is, with the columns its updates carry), the table its updates are for now, and
//! those updates, read. Shared by the sessions (`link`) and the reload handover (`local`),
//! which take what is read into their tables.
//!
//! Invariant: at most `room` definitions are kept, whatever the other side sends.

use std::collections::HashMap;

use super::wire::{self, Columns, Definition, Update};
use crate::conf::stick::KeyType;

/// Tables a peer may define on one session beyond ours: what a session keeps of the
/// other side's definitions stays bounded whatever it sends.
pub(super) const FOREIGN_TABLES: usize = 64;

/// The other side's table definitions on one session.
#[derive(Default)]
pub(super) struct Learner {
    theirs: HashMap<u64, Theirs>,
    /// The table (their number) the updates received are for.
    current: Option<u64>,
}

struct Theirs {
    ours: Option<usize>,
    columns: Columns,
}

/// A definition read: their number for the table, which of ours it is, and its data
/// types' bit field.
pub(super) struct Defined {
    pub id: u64,
    pub ours: Option<usize>,
    pub bits: u64,
}

impl Learner {
    /// Reads a definition; `ours` says which of our tables it is. `None`: malformed, or
    /// past `room` definitions.
    pub fn define(
        &mut self,
        body: &[u8],
        room: usize,
        ours: impl Fn(&Definition) -> Option<usize>,
    ) -> Option<Defined> {
        let d = wire::define(body)?;
        if !self.theirs.contains_key(&d.id) && self.theirs.len() >= room {
            return None;
        }
        let defined = Defined {
            id: d.id,
            ours: ours(&d),
            bits: d.columns.bits(),
        };
        let theirs = Theirs {
            ours: defined.ours,
            columns: d.columns,
        };
        self.theirs.insert(d.id, theirs);
        self.current = Some(d.id);
        Some(defined)
    }

    /// Reads a switch to another of their tables. `None`: malformed.
    pub fn switch(&mut self, body: &[u8]) -> Option<()> {
        self.current = Some(wire::varint(body, &mut 0)?);
        Some(())
    }

    /// Reads an update of message type `kind` for the current table, keyed as `key` says
    /// our table `t` is: (our table, their number for it, the update), or `Some(None)` when
    /// it is not one of ours. `None`: malformed.
    pub fn update(
        &self,
        kind: u8,
        body: &[u8],
        key: impl Fn(usize) -> KeyType,
    ) -> Option<Option<(usize, u64, Update)>> {
        let Some(current) = self.current else {
            return Some(None);
        };
        let Some(Theirs {
            ours: Some(t),
            columns,
        }) = self.theirs.get(&current)
        else {
            return Some(None);
        };
        let with_id = matches!(kind, wire::UPDATE | wire::UPDATE_TIMED);
        let timed = matches!(kind, wire::UPDATE_TIMED | wire::INC_UPDATE_TIMED);
        let u = wire::update(body, (with_id, timed), key(*t), columns)?;
        Some(Some((*t, current, u)))
    }

    /// Our table their table `id` is, if one.
    pub fn ours(&self, id: u64) -> Option<usize> {
        self.theirs.get(&id).and_then(|t| t.ours)
    }
}
