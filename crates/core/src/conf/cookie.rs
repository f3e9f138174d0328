//! Persistence settings: cookies (`cookie`, server `cookie`, `option persist`) and stick
//! tables (`stick on|match|store-request|store-response`).

use super::acl::Cond;
use super::sample::Expr;

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
    /// `maxidle T`: an inserted cookie carries its last use and is ignored once idle longer.
    pub maxidle: Option<std::time::Duration>,
    /// `maxlife T`: an inserted cookie carries its creation and is ignored once older.
    pub maxlife: Option<std::time::Duration>,
    /// `dynamic`: servers without a `cookie` value get one derived from
    /// `dynamic-cookie-key` and their address.
    pub dynamic: bool,
}

/// A backend's persistence: its cookie and `option persist`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PersistConf {
    pub cookie: Option<CookieConf>,
    /// `stick ...` rules, in order.
    pub stick: Vec<StickRule>,
    /// `dynamic-cookie-key KEY`.
    pub dynamic_key: Option<String>,
    /// `use-server NAME [if|unless COND]`, in order.
    pub use_server: Vec<(super::sample::NameRef, Option<Cond>)>,
    /// `force-persist if|unless COND`: persistence may lead to a server that is down.
    pub force: Vec<Cond>,
    /// `ignore-persist if|unless COND`: persistence is not consulted.
    pub ignore: Vec<Cond>,
    /// `option persist`: a cookie naming a server that is down still leads to it.
    pub persist: bool,
    /// `persist rdp-cookie[(NAME)]`: the RDP cookie (`msts` by default) that names the
    /// server of a TCP connection.
    pub rdp_cookie: Option<String>,
}

/// What a `stick` rule does with its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StickKind {
    /// `stick on`: match, then store.
    On,
    /// `stick match`: a request whose key has an entry goes to the entry's server.
    Match,
    /// `stick store-request`: the key, from the request, remembers the server that served it.
    StoreRequest,
    /// `stick store-response`: the same, the key taken from the response.
    StoreResponse,
}

/// `stick on|match|store-request|store-response EXPR [table T] [if|unless COND]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StickRule {
    pub kind: StickKind,
    pub key: Expr,
    /// The table (the backend's own when `None`).
    pub table: Option<super::sample::NameRef>,
    pub cond: Option<Cond>,
}

impl StickKind {
    pub fn matches(self) -> bool {
        matches!(self, StickKind::On | StickKind::Match)
    }

    pub fn stores_request(self) -> bool {
        matches!(self, StickKind::On | StickKind::StoreRequest)
    }
}
