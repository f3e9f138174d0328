//! The `balance` algorithm of a backend.

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Algo {
    #[default]
    RoundRobin,
    StaticRr,
    LeastConn,
    First,
    /// Power of N random choices (weighted draws, least loaded wins).
    Random(u32),
    Source,
    Uri,
    /// Hash of the named header (lowercase); round robin when it is absent.
    Hdr(String),
}

impl Algo {
    /// The name as written after `balance`.
    pub fn name(&self) -> String {
        match self {
            Algo::RoundRobin => "roundrobin".into(),
            Algo::StaticRr => "static-rr".into(),
            Algo::LeastConn => "leastconn".into(),
            Algo::First => "first".into(),
            Algo::Random(n) => format!("random({n})"),
            Algo::Source => "source".into(),
            Algo::Uri => "uri".into(),
            Algo::Hdr(h) => format!("hdr({h})"),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BalanceConf {
    pub algo: Algo,
    /// `option allbackups`: when no active server is usable, balance over every usable
    /// backup server rather than only the first.
    pub allbackups: bool,
}
