//! Stick tables as configured (`stick-table`): what they key on, how many entries they
//! keep, and the data each entry stores.

use std::time::Duration;

/// What entries are keyed by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    Ip,
    Ipv6,
    Integer,
    /// Strings up to `len` bytes (longer keys are cut).
    String(usize),
    Binary(usize),
}

/// A data type an entry stores (`store ...`): a counter, and for a rate its period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataType {
    pub counter: Counter,
    pub period: Option<Duration>,
}

/// One `stick-table` line, named after its proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableConf {
    pub name: String,
    pub key: KeyType,
    /// Most entries kept.
    pub size: usize,
    /// How long an entry lives after its last update (none: until pushed out by size).
    pub expire: Option<Duration>,
    /// `nopurge`: a full table refuses new entries instead of dropping the oldest.
    pub nopurge: bool,
    pub store: Vec<DataType>,
    /// `peers NAME`: the peers section the table is shared with.
    pub peers: Option<String>,
}

/// A `peers` section: where the local peer listens. Its tables' entries go from the old
/// process to the new one at a reload, as HAProxy's local peer carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeersConf {
    pub name: String,
    /// The local peer's address.
    pub local: std::net::SocketAddr,
}

/// What is counted, without the period of rates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    ServerId,
    Gpt0,
    Gpc0,
    Gpc0Rate,
    Gpc1,
    Gpc1Rate,
    ConnCnt,
    ConnCur,
    ConnRate,
    SessCnt,
    SessRate,
    HttpReqCnt,
    HttpReqRate,
    HttpErrCnt,
    HttpErrRate,
    BytesInCnt,
    BytesInRate,
    BytesOutCnt,
    BytesOutRate,
}

/// Every counter with HAProxy's name for it (`http_req_rate`).
const NAMES: [(Counter, &str); 19] = {
    use Counter::*;
    [
        (ServerId, "server_id"),
        (Gpt0, "gpt0"),
        (Gpc0, "gpc0"),
        (Gpc0Rate, "gpc0_rate"),
        (Gpc1, "gpc1"),
        (Gpc1Rate, "gpc1_rate"),
        (ConnCnt, "conn_cnt"),
        (ConnCur, "conn_cur"),
        (ConnRate, "conn_rate"),
        (SessCnt, "sess_cnt"),
        (SessRate, "sess_rate"),
        (HttpReqCnt, "http_req_cnt"),
        (HttpReqRate, "http_req_rate"),
        (HttpErrCnt, "http_err_cnt"),
        (HttpErrRate, "http_err_rate"),
        (BytesInCnt, "bytes_in_cnt"),
        (BytesInRate, "bytes_in_rate"),
        (BytesOutCnt, "bytes_out_cnt"),
        (BytesOutRate, "bytes_out_rate"),
    ]
};

impl Counter {
    /// HAProxy's name of the data type.
    pub fn name(self) -> &'static str {
        NAMES
            .iter()
            .find(|(c, _)| *c == self)
            .map_or("?", |(_, n)| n)
    }

    pub fn from_name(n: &str) -> Option<Counter> {
        NAMES.iter().find(|(_, name)| *name == n).map(|(c, _)| *c)
    }
}

/// Where a table-reading fetch finds its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableSource {
    /// The entry tracked in this slot (`sc0_*`, `sc_*(0)`).
    Slot(u8),
    /// The client address's entry (`src_*`).
    Src,
}

/// What a table-reading fetch or converter does with its counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableOp {
    /// Reads the counter.
    Read,
    /// Adds one and reads (`inc_gpc0`).
    Inc,
    /// Reads and sets to zero (`clr_gpc0`).
    Clr,
    /// Whether the slot tracks an entry (`sc0_tracked`); the counter is unused.
    Tracked,
}
