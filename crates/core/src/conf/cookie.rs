//! Cookie persistence settings (`cookie`, server `cookie`, `option persist`).

/// How the persistence cookie is managed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieMode {
    /// The proxy sets the cookie itself (`Set-Cookie` added to responses).
    Insert,
    /// The server sets the cookie; the proxy replaces its value with the server's.
    Rewrite,
    /// The server's own cookie of that name carries the server's value as a prefix
    /// (`s1~value`), which requests lose before reaching the server.
    Prefix,
}

/// A backend's `cookie NAME MODE [options]` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CookieConf {
    pub name: String,
    pub mode: CookieMode,
    /// No cookie for a client that already has a valid one; in insert mode the cookie is
    /// also removed from requests (the server never sees it).
    pub indirect: bool,
    /// Inserting a cookie makes the response `Cache-Control: private`.
    pub nocache: bool,
    /// Only responses to POST requests get an inserted cookie.
    pub postonly: bool,
    /// A cookie the server sets itself is kept (and none is inserted then).
    pub preserve: bool,
    pub httponly: bool,
    pub secure: bool,
    /// `domain D` (repeatable): a cookie per domain.
    pub domains: Vec<String>,
    /// `attr TEXT` (repeatable): more attributes, as written.
    pub attrs: Vec<String>,
}

/// A backend's persistence: its cookie and `option persist`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistConf {
    pub cookie: Option<CookieConf>,
    /// `option persist`: a cookie naming a server that is down still leads to it.
    pub persist: bool,
}
