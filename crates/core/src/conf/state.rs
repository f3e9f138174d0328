//! Server states kept across a restart (`server-state-file`, `load-server-state-from-file`)
//! as their keywords set them.

/// The `global` side: where the state file is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GlobalState {
    /// `server-state-file PATH`.
    pub file: Option<String>,
    /// `server-state-base DIR`: where relative state file names start.
    pub base: Option<String>,
}

/// `load-server-state-from-file`: which file a backend's servers start from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LoadFrom {
    #[default]
    None,
    /// The global `server-state-file`.
    Global,
    /// A file of the backend's own, under `server-state-base`.
    Local,
}

/// A backend's side: which file, and for `local` its name (`server-state-file-name`, else
/// the backend's name).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadState {
    pub from: LoadFrom,
    pub file_name: Option<String>,
}
