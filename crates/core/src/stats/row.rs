//! One row of `show stat` and its cells.

use super::fields::{self, FIELDS};

/// What a row describes (`type` column: 0, 1, 2, 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Frontend,
    Backend,
    Server,
    Listener,
}

impl Kind {
    pub fn code(self) -> u32 {
        match self {
            Kind::Frontend => 0,
            Kind::Backend => 1,
            Kind::Server => 2,
            Kind::Listener => 3,
        }
    }

    /// The letter of the typed form.
    pub fn letter(self) -> char {
        match self {
            Kind::Frontend => 'F',
            Kind::Backend => 'B',
            Kind::Server => 'S',
            Kind::Listener => 'L',
        }
    }

    /// The object type of the JSON form.
    pub fn json_name(self) -> &'static str {
        match self {
            Kind::Frontend => "Frontend",
            Kind::Backend => "Backend",
            Kind::Server => "Server",
            Kind::Listener => "Listener",
        }
    }

    /// The bit of the filter form's type mask (`show stat PROXY TYPE SID`).
    pub(super) fn mask(self) -> u32 {
        match self {
            Kind::Frontend => 1,
            Kind::Backend => 2,
            Kind::Server => 4,
            Kind::Listener => 8,
        }
    }
}

/// One value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cell {
    Num(i64),
    Text(String),
}

impl Cell {
    pub fn as_num(&self) -> Option<i64> {
        match self {
            Cell::Num(n) => Some(*n),
            Cell::Text(_) => None,
        }
    }
}

/// One row: a frontend, backend or server, its ids, and a cell per column (`None`: empty).
#[derive(Debug, Clone)]
pub struct Row {
    pub kind: Kind,
    pub iid: u32,
    pub sid: u32,
    pub cells: Vec<Option<Cell>>,
}

impl Row {
    pub(super) fn new(kind: Kind, iid: u32, sid: u32) -> Row {
        Row {
            kind,
            iid,
            sid,
            cells: vec![None; FIELDS.len()],
        }
    }

    pub(super) fn num(&mut self, name: &str, v: impl TryInto<i64>) {
        self.cells[fields::pos(name)] = Some(Cell::Num(v.try_into().unwrap_or(i64::MAX)));
    }

    pub(super) fn text(&mut self, name: &str, v: impl Into<String>) {
        self.cells[fields::pos(name)] = Some(Cell::Text(v.into()));
    }

    /// The cell of a column, by name.
    pub fn get(&self, name: &str) -> Option<&Cell> {
        self.cells[fields::pos(name)].as_ref()
    }

    pub fn name(&self, col: &str) -> &str {
        match self.get(col) {
            Some(Cell::Text(t)) => t,
            _ => "",
        }
    }
}
