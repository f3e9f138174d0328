//! Runtime CLI settings (`stats socket`).

/// Access levels, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    User,
    Operator,
    Admin,
}

/// `stats socket` settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketConf {
    pub path: String,
    pub mode: Option<u32>,
    pub level: Level,
}
