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

/// A `peers` section: where the local peer listens and the other peers its tables are
/// shared with. Its tables' entries also go from the old process to the new one at a
/// reload, as HAProxy's local peer carries them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeersConf {
    pub name: String,
    /// This process's name among the peers (`localpeer`, `-L`, else the host name).
    pub local_name: String,
    /// The local peer's address: where the other peers connect.
    pub local: std::net::SocketAddr,
    /// TLS options of the local peer's listener (`bind ... ssl crt ...`), its acceptor
    /// built at load.
    pub tls: Option<crate::conf::tls::BindTls>,
    /// Where the section starts, for the errors found when its TLS is built.
    pub at: crate::conf::loc::Loc,
    /// The other peers, in the order of the section.
    pub remotes: Vec<RemotePeer>,
    /// `disabled`: the section shares nothing (its tables stay this process's own).
    pub disabled: bool,
}

/// Another peer of a `peers` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemotePeer {
    pub name: String,
    pub addr: std::net::SocketAddr,
    /// TLS options of the connection to it (`ssl`, `verify`, `ca-file`, `crt`, ...).
    pub tls: crate::conf::tls::ServerTlsOpts,
    /// Built at load from `tls` when it has `ssl`.
    pub connector: Option<crate::conf::tls::Connector>,
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
    /// Failures the servers caused (a 5xx answer but 501 and 505, a server that timed
    /// out, broke off or answered nonsense).
    HttpFailCnt,
    HttpFailRate,
    /// Element N of the `gpt(N)` array of tags.
    Gpt(u8),
    /// Element N of the `gpc(N)` array of counters.
    Gpc(u8),
    /// Element N of the `gpc_rate(N,PERIOD)` array of rates.
    GpcRate(u8),
}

/// The most elements of a `gpt`, `gpc` or `gpc_rate` array (HAProxy's limit, so that a
/// peer update carrying all of them fits a buffer).
pub const ARRAY_MAX: usize = 100;

/// Every counter with HAProxy's name for it (`http_req_rate`).
const NAMES: [(Counter, &str); 21] = {
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
        (HttpFailCnt, "http_fail_cnt"),
        (HttpFailRate, "http_fail_rate"),
    ]
};

impl Counter {
    /// HAProxy's name of the data type; an array element is named by its index as
    /// `show table` prints it (`gpt3`, `gpc3_rate`).
    pub fn name(self) -> std::borrow::Cow<'static, str> {
        match self {
            Counter::Gpt(i) => format!("gpt{i}").into(),
            Counter::Gpc(i) => format!("gpc{i}").into(),
            Counter::GpcRate(i) => format!("gpc{i}_rate").into(),
            _ => NAMES
                .iter()
                .find(|(c, _)| *c == self)
                .map_or("?", |(_, n)| n)
                .into(),
        }
    }

    pub fn from_name(n: &str) -> Option<Counter> {
        NAMES.iter().find(|(_, name)| *name == n).map(|(c, _)| *c)
    }

    /// A counter by the name `show table` and the reload dump give it: a legacy name, or
    /// an array element (`gpt3`, `gpc3`, `gpc3_rate`).
    pub fn from_dump_name(n: &str) -> Option<Counter> {
        if let Some(c) = Counter::from_name(n) {
            return Some(c);
        }
        let index = |s: &str| s.parse::<u8>().ok().filter(|&i| (i as usize) < ARRAY_MAX);
        if let Some(i) = n.strip_prefix("gpt").and_then(index) {
            return Some(Counter::Gpt(i));
        }
        let rest = n.strip_prefix("gpc")?;
        match rest.strip_suffix("_rate") {
            Some(i) => index(i).map(Counter::GpcRate),
            None => index(rest).map(Counter::Gpc),
        }
    }

    /// The array element that stands for a legacy counter in a table storing the array
    /// instead (`gpc0` is `gpc` element 0 there, as HAProxy's `gpc0` fetches and actions
    /// read it).
    pub fn array_twin(self) -> Option<Counter> {
        Some(match self {
            Counter::Gpt0 => Counter::Gpt(0),
            Counter::Gpc0 => Counter::Gpc(0),
            Counter::Gpc1 => Counter::Gpc(1),
            Counter::Gpc0Rate => Counter::GpcRate(0),
            Counter::Gpc1Rate => Counter::GpcRate(1),
            _ => return None,
        })
    }

    /// HAProxy's number for the data type (and the element's index in an array): the
    /// order `show table` lists them in, and their number in the peers protocol.
    pub fn data_type(self) -> (u8, u8) {
        use Counter::*;
        let t = match self {
            Gpt(i) => return (22, i),
            Gpc(i) => return (23, i),
            GpcRate(i) => return (24, i),
            ServerId => 0,
            Gpt0 => 1,
            Gpc0 => 2,
            Gpc0Rate => 3,
            ConnCnt => 4,
            ConnRate => 5,
            ConnCur => 6,
            SessCnt => 7,
            SessRate => 8,
            HttpReqCnt => 9,
            HttpReqRate => 10,
            HttpErrCnt => 11,
            HttpErrRate => 12,
            BytesInCnt => 13,
            BytesInRate => 14,
            BytesOutCnt => 15,
            BytesOutRate => 16,
            Gpc1 => 17,
            Gpc1Rate => 18,
            // 19 is `server_key`, which sluice does not keep.
            HttpFailCnt => 20,
            HttpFailRate => 21,
        };
        (t, 0)
    }

    /// The counter HAProxy's data type `t` (element `i` of an array) stands for
    /// ([`Counter::data_type`] read backwards).
    pub fn of_data_type(t: u8, i: u8) -> Option<Counter> {
        match t {
            22 => Some(Counter::Gpt(i)),
            23 => Some(Counter::Gpc(i)),
            24 => Some(Counter::GpcRate(i)),
            _ => NAMES
                .iter()
                .map(|(c, _)| *c)
                .find(|c| c.data_type() == (t, 0)),
        }
    }

    /// `v` as HAProxy's type for the data keeps it: the byte counts on 64 bits, the others
    /// on 32 (a negative value wraps, as there).
    pub fn stored_width(self, v: i64) -> u64 {
        match self {
            Counter::BytesInCnt | Counter::BytesOutCnt => v as u64,
            _ => u64::from(v as u32),
        }
    }

    /// The rate a general purpose counter's increments also count in (`gpc0_rate` for
    /// `gpc0`, `gpc3_rate` for `gpc3`).
    pub fn rate(self) -> Option<Counter> {
        Some(match self {
            Counter::Gpc0 => Counter::Gpc0Rate,
            Counter::Gpc1 => Counter::Gpc1Rate,
            Counter::Gpc(i) => Counter::GpcRate(i),
            _ => return None,
        })
    }

    /// Whether a counter names general purpose data: read through `get_` fetches.
    pub fn general_purpose(self) -> bool {
        use Counter::*;
        matches!(self, Gpt0 | Gpc0 | Gpc1 | Gpt(_) | Gpc(_))
    }
}

/// The counter a table with `store` holds for `c`: `c` itself, or the array element that
/// stands for a legacy counter (`None`: the table stores neither).
pub fn stored_as(store: &[DataType], c: Counter) -> Option<Counter> {
    let holds = |c: Counter| store.iter().any(|d| d.counter == c);
    if holds(c) {
        return Some(c);
    }
    c.array_twin().filter(|&t| holds(t))
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
    /// Reads a byte count in kilobytes (`sc0_kbytes_in`, `table_kbytes_out`).
    ReadKilo,
}
