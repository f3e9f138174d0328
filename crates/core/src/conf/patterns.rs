//! The pattern lists that ACLs and maps match against (HAProxy's pattern references),
//! editable from the CLI while requests are served.
//!
//! Every ACL line owns one list for the patterns written on it; every file named by an
//! ACL's `-f`/`-M` or by a map converter is one list, shared by all its users (by path),
//! so that `add acl FILE ...` reaches each rule that reads FILE. A list keeps its entries
//! as text, in versions (`prepare`/`commit`), and one compiled form per use (an ACL's
//! match method and case, a map's key type), built by a function the user gave.
//!
//! Invariants: a snapshot's compiled forms come from the entries of the current version
//! and nothing else; an edit that any form refuses (a pattern that is not an address, say)
//! changes nothing. Requests read the snapshot they loaded without taking a lock; an edit
//! builds the next one aside and swaps it in.

use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};

use arc_swap::ArcSwap;

use super::loc::Loc;

/// How a pattern matches a sample: ACLs' `-m` methods, and map files' (`map_beg`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    /// Any sample at all.
    Found,
    /// The sample is true.
    Bool,
    Int,
    Ip,
    Str,
    Beg,
    End,
    Sub,
    Reg,
    /// A slash-delimited part.
    Dir,
    /// A dot- or slash-delimited part.
    Dom,
    /// The length, compared as an integer.
    Len,
    /// The exact bytes, written in hexadecimal (`-m bin`).
    Bin,
}

/// The type of a map's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapOut {
    Str,
    Int,
    Ip,
}

/// What one use of a list is: how its entries match and, for a map, what its values are.
/// Uses that are the same share one compiled form, as HAProxy shares one pattern
/// expression between them; `get map`/`get acl` answer a line per form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FormKind {
    pub how: Match,
    pub icase: bool,
    /// A map's values and whether they are `map_regm` templates; none for an ACL.
    pub values: Option<(MapOut, bool)>,
}

impl FormKind {
    /// HAProxy's name of the match method (`get map` prints it).
    pub fn method(&self) -> &'static str {
        match (self.how, self.values) {
            (_, Some((_, true))) => "regm",
            (Match::Found, _) => "found",
            (Match::Bool, _) => "bool",
            (Match::Int, _) => "int",
            (Match::Ip, _) => "ip",
            (Match::Bin, _) => "bin",
            (Match::Len, _) => "len",
            (Match::Str, _) => "str",
            (Match::Beg, _) => "beg",
            (Match::Sub, _) => "sub",
            (Match::Dir, _) => "dir",
            (Match::Dom, _) => "dom",
            (Match::End, _) => "end",
            (Match::Reg, _) => "reg",
        }
    }

    /// Whether HAProxy finds this form's entries in a tree (exact strings and prefixes when
    /// case matters, addresses) rather than walking a list.
    pub fn tree(&self) -> bool {
        match self.how {
            Match::Str | Match::Beg => !self.icase,
            Match::Ip => true,
            _ => false,
        }
    }
}

/// A pattern, prepared for its match method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Text(Vec<u8>),
    Regex(Regex),
    /// An integer range, both ends included (`eq`, `ge`, `lt`... and `A:B` become ranges).
    Range(Option<i64>, Option<i64>),
    /// A network: an address and a prefix length.
    Net(std::net::IpAddr, u8),
}

/// A compiled regular expression that compares by its source text.
#[derive(Debug, Clone)]
pub struct Regex(pub regex::bytes::Regex);

impl PartialEq for Regex {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for Regex {}

/// A map key, prepared for its match method.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapKey {
    Text(Vec<u8>),
    Regex(Regex),
    Int(i64),
    Net(std::net::IpAddr, u8),
}

/// A pattern list as one ACL or map reads it: the list and the index of the form compiled
/// for this use.
#[derive(Debug, Clone)]
pub struct PatternUse {
    pub list: Arc<PatternRef>,
    pub form: usize,
}

impl PartialEq for PatternUse {
    fn eq(&self, other: &Self) -> bool {
        self.list.id == other.list.id
            && self.form == other.form
            && self.list.entries(None) == other.list.entries(None)
    }
}

impl Eq for PatternUse {}

/// One entry of a list: a pattern (or a map key) and, for maps, its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Unique in the process; the CLI shows it and takes it back as `#0x...`.
    pub id: u64,
    pub key: String,
    pub value: Option<String>,
    pub version: u32,
}

/// A list compiled for one use.
#[derive(Debug)]
pub enum Compiled {
    Acl(Vec<Pattern>),
    Map(Vec<(MapKey, String)>),
}

/// Compiles a list's current entries for one use; the error says what is wrong with the
/// first entry it refuses.
pub type Compile = Box<dyn Fn(&[&Entry]) -> Result<Compiled, String> + Send + Sync>;

/// What the rules read: the compiled forms of the current version.
#[derive(Debug)]
pub struct Snapshot {
    forms: Vec<Compiled>,
}

impl Snapshot {
    /// The ACL patterns of use `form`.
    pub fn acl(&self, form: usize) -> &[Pattern] {
        match self.forms.get(form) {
            Some(Compiled::Acl(p)) => p,
            _ => &[],
        }
    }

    /// The compiled form `form`.
    pub fn form(&self, form: usize) -> Option<&Compiled> {
        self.forms.get(form)
    }

    /// The map entries of use `form`.
    pub fn map(&self, form: usize) -> &[(MapKey, String)] {
        match self.forms.get(form) {
            Some(Compiled::Map(m)) => m,
            _ => &[],
        }
    }
}

/// A list's forms and entries at one moment (`PatternRef::current`).
pub struct Current {
    pub kinds: Vec<FormKind>,
    pub entries: Vec<Entry>,
    pub snapshot: Arc<Snapshot>,
}

/// Who reads a list: the CLI lists ACL lists under `show acl`, map lists under `show map`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Acl,
    Map,
}

/// The editable side of a list, behind its lock.
struct Store {
    entries: Vec<Entry>,
    curr: u32,
    next: u32,
    /// Entry numbers handed out so far (ids are never reused).
    issued: u64,
    forms: Vec<Compile>,
    /// What each form is for, in the same order.
    kinds: Vec<FormKind>,
    /// How `show acl`/`show map` describe the list, and which of them list it.
    display: String,
    acl: bool,
    map: bool,
}

/// One pattern list.
pub struct PatternRef {
    /// Its number in `show acl`/`show map`, in the order the configuration made them.
    pub id: usize,
    /// The file it was loaded from; none for the patterns written on an ACL line.
    pub file: Option<String>,
    /// Its lines are a key and a value (a map's), not a pattern each.
    two_columns: bool,
    store: Mutex<Store>,
    live: ArcSwap<Snapshot>,
}

impl fmt::Debug for PatternRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PatternRef")
            .field("id", &self.id)
            .field("file", &self.file)
            .finish_non_exhaustive()
    }
}

/// A list seen by a CLI command: what `show acl`/`show map` print of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub display: String,
    pub curr: u32,
    pub next: u32,
    pub entries: usize,
}

impl PatternRef {
    fn new(
        id: usize,
        file: Option<String>,
        keys: Vec<(String, Option<String>)>,
        two_columns: bool,
    ) -> Self {
        let issued = keys.len() as u64;
        let entries = keys
            .into_iter()
            .zip(1..)
            .map(|((key, value), n)| Entry {
                id: entry_id(id, n),
                key,
                value,
                version: 0,
            })
            .collect();
        PatternRef {
            id,
            file,
            two_columns,
            store: Mutex::new(Store {
                entries,
                curr: 0,
                next: 0,
                issued,
                forms: Vec::new(),
                kinds: Vec::new(),
                display: String::new(),
                acl: false,
                map: false,
            }),
            live: ArcSwap::from_pointee(Snapshot { forms: Vec::new() }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Store> {
        // A panic while editing leaves the store as it was before the edit (edits work
        // on a copy), so a poisoned lock is still consistent.
        self.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current snapshot, for a request.
    pub fn load(&self) -> arc_swap::Guard<Arc<Snapshot>> {
        self.live.load()
    }

    /// Adds a use of `kind`: compiles the current entries with `compile` (unless a use of
    /// the same kind did) and returns the form's index in snapshots.
    pub fn add_form(&self, kind: FormKind, compile: Compile) -> Result<usize, String> {
        let mut store = self.lock();
        if let Some(at) = store.kinds.iter().position(|k| *k == kind) {
            return Ok(at);
        }
        store.forms.push(compile);
        let snapshot = match build(&store.forms, &store.entries, store.curr) {
            Ok(s) => s,
            Err(e) => {
                store.forms.pop();
                return Err(e);
            }
        };
        store.kinds.push(kind);
        self.live.store(Arc::new(snapshot));
        Ok(store.forms.len() - 1)
    }

    /// The list as it is now, for a lookup from the CLI: each form with its kind, and the
    /// entries it was compiled from, in its order.
    pub fn current(&self) -> Current {
        let store = self.lock();
        Current {
            kinds: store.kinds.clone(),
            entries: store
                .entries
                .iter()
                .filter(|e| e.version == store.curr)
                .cloned()
                .collect(),
            // Edits swap the snapshot under the lock: it is the one of these entries.
            snapshot: self.live.load_full(),
        }
    }

    /// Whether `family` lists it, and its line in that listing.
    pub fn listing(&self, family: Family) -> Option<Listing> {
        let store = self.lock();
        let listed = match family {
            Family::Acl => store.acl,
            Family::Map => store.map,
        };
        listed.then(|| Listing {
            display: store.display.clone(),
            curr: store.curr,
            next: store.next,
            entries: store.entries.len(),
        })
    }

    /// What the current version says of `key`: absent (`None`), or present with its value.
    pub fn lookup_key(&self, key: &str) -> Option<Option<String>> {
        let store = self.lock();
        store
            .entries
            .iter()
            .find(|e| e.version == store.curr && e.key == key)
            .map(|e| e.value.clone())
    }

    /// The entries of `version` (the current one when `None`).
    pub fn entries(&self, version: Option<u32>) -> Vec<Entry> {
        let store = self.lock();
        let v = version.unwrap_or(store.curr);
        store
            .entries
            .iter()
            .filter(|e| e.version == v)
            .cloned()
            .collect()
    }

    /// Edits the entries: `change` works on a copy, with the current and next version
    /// numbers; the result is compiled for every use before it replaces the list, and
    /// entries of versions older than the current one are dropped (a commit's purge).
    pub fn edit<T>(
        &self,
        change: impl FnOnce(&mut Edit) -> Result<T, String>,
    ) -> Result<T, String> {
        let mut store = self.lock();
        let mut edit = Edit {
            entries: store.entries.clone(),
            curr: store.curr,
            next: store.next,
            list: self.id,
            issued: store.issued,
        };
        let out = change(&mut edit)?;
        let Edit {
            mut entries,
            curr,
            next,
            issued,
            ..
        } = edit;
        entries.retain(|e| e.version >= curr);
        let snapshot = build(&store.forms, &entries, curr)?;
        store.entries = entries;
        store.curr = curr;
        store.next = next;
        store.issued = issued;
        self.live.store(Arc::new(snapshot));
        Ok(out)
    }
}

/// Compiles the entries of version `curr` for every use.
fn build(forms: &[Compile], entries: &[Entry], curr: u32) -> Result<Snapshot, String> {
    let live: Vec<&Entry> = entries.iter().filter(|e| e.version == curr).collect();
    let forms = forms.iter().map(|f| f(&live)).collect::<Result<_, _>>()?;
    Ok(Snapshot { forms })
}

/// Entry ids: the list's number in the high bits, so that ids never repeat across lists.
fn entry_id(list: usize, n: u64) -> u64 {
    ((list as u64 + 1) << 32) | n
}

/// A change being made to a list's entries.
pub struct Edit {
    pub entries: Vec<Entry>,
    pub curr: u32,
    pub next: u32,
    list: usize,
    issued: u64,
}

impl Edit {
    /// A new entry of `version`, with an id no other entry had.
    pub fn push(&mut self, key: String, value: Option<String>, version: u32) {
        self.issued += 1;
        let id = entry_id(self.list, self.issued);
        self.entries.push(Entry {
            id,
            key,
            value,
            version,
        });
    }
}

/// Every list the configuration made, in order, and where the loader is (to describe the
/// lists' users as HAProxy does).
#[derive(Default)]
struct Book {
    refs: Vec<Arc<PatternRef>>,
    at: Loc,
}

/// The configuration's pattern lists while it is loaded, shared by every section's rules.
#[derive(Clone, Default)]
pub struct PatternBook(Arc<Mutex<Book>>);

impl fmt::Debug for PatternBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PatternBook")
    }
}

impl PartialEq for PatternBook {
    fn eq(&self, _: &Self) -> bool {
        // Where lists are registered is not part of what a configuration says.
        true
    }
}

impl Eq for PatternBook {}

impl PatternBook {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The configuration line being read.
    pub fn set_at(&self, at: &Loc) {
        self.lock().at = at.clone();
    }

    /// The list of the file at `path`, read now if no one used it before. A map file's
    /// lines are a key and a value; a pattern file's lines are a pattern each.
    pub fn file(
        &self,
        path: &str,
        family: Family,
        with_values: bool,
    ) -> Result<Arc<PatternRef>, String> {
        let mut book = self.lock();
        let user = format!(
            "{} at file '{}' line {}",
            family.name(),
            book.at.file,
            book.at.line
        );
        if let Some(r) = book.refs.iter().find(|r| r.file.as_deref() == Some(path)) {
            // A file is read one way, as HAProxy refuses to read it both ways.
            match (r.two_columns, with_values) {
                (false, true) => {
                    return Err(format!("The file \"{path}\" is already used as one column file and cannot be used by as two column file"));
                }
                (true, false) => {
                    return Err(format!("The file \"{path}\" is already used as two column file and cannot be used by as one column file"));
                }
                _ => {}
            }
            let r = r.clone();
            let mut store = r.lock();
            let _ = std::fmt::Write::write_fmt(&mut store.display, format_args!(", by {user}"));
            family.mark(&mut store);
            drop(store);
            return Ok(r);
        }
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("cannot read '{path}': {e}"))?;
        let keys = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| match l.split_once(char::is_whitespace) {
                Some((k, v)) if with_values => (k.to_string(), Some(v.trim().to_string())),
                _ if with_values => (l.to_string(), Some(String::new())),
                _ => (l.to_string(), None),
            })
            .collect();
        let r = Arc::new(PatternRef::new(
            book.refs.len(),
            Some(path.to_string()),
            keys,
            with_values,
        ));
        {
            let mut store = r.lock();
            store.display = format!("pattern loaded from file '{path}' used by {user}");
            family.mark(&mut store);
        }
        book.refs.push(r.clone());
        Ok(r)
    }

    /// A new list for the patterns written on an ACL line whose criterion is `criterion`.
    pub fn inline(&self, criterion: &str, patterns: Vec<String>) -> Arc<PatternRef> {
        let mut book = self.lock();
        let keys = patterns.into_iter().map(|p| (p, None)).collect();
        let r = Arc::new(PatternRef::new(book.refs.len(), None, keys, false));
        {
            let mut store = r.lock();
            store.display = format!(
                "acl '{criterion}' file '{}' line {}",
                book.at.file, book.at.line
            );
            store.acl = true;
        }
        book.refs.push(r.clone());
        r
    }

    /// The lists made so far.
    pub fn refs(&self) -> Vec<Arc<PatternRef>> {
        self.lock().refs.clone()
    }
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Acl => "acl",
            Family::Map => "map",
        }
    }

    fn mark(self, store: &mut Store) {
        match self {
            Family::Acl => store.acl = true,
            Family::Map => store.map = true,
        }
    }
}
