//! The columns of `show stat`, in HAProxy 2.6's order, with the type and tags its typed and
//! JSON forms give each one (origin, nature, scope: `M`etric/`S`tatus/`K`ey/`C`onfig/
//! `P`roduct; `A`ge/`a`vg/`C`ounter/`D`uration/`G`auge/`L`imit/`M`ax/`N`ame/`O`utput/`R`ate;
//! `P`rocess/`S`ervice).
//!
//! Positions are the CSV's. After the fixed set, a `-` column separates the counters of
//! HAProxy's statistics modules (TLS, HTTP/2, HTTP/1); the typed form numbers those without
//! the separator, as HAProxy does.

/// How a value is typed in `show stat typed` and `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ty {
    U32,
    U64,
    S32,
    Str,
}

impl Ty {
    pub fn name(self) -> &'static str {
        match self {
            Ty::U32 => "u32",
            Ty::U64 => "u64",
            Ty::S32 => "s32",
            Ty::Str => "str",
        }
    }
}

/// One column.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    /// Origin, nature and scope letters.
    pub tags: &'static str,
}

const fn f(name: &'static str, ty: Ty, tags: &'static str) -> Field {
    Field { name, ty, tags }
}

use Ty::{Str, S32, U32, U64};

/// Every column of `show stat`.
pub const FIELDS: &[Field] = &[
    f("pxname", Str, "KNS"),
    f("svname", Str, "KNS"),
    f("qcur", U32, "MGP"),
    f("qmax", U32, "MMP"),
    f("scur", U32, "MGP"),
    f("smax", U32, "MMP"),
    f("slim", U32, "CLP"),
    f("stot", U64, "MCP"),
    f("bin", U64, "MCP"),
    f("bout", U64, "MCP"),
    f("dreq", U64, "MCP"),
    f("dresp", U64, "MCP"),
    f("ereq", U64, "MCP"),
    f("econ", U64, "MCP"),
    f("eresp", U64, "MCP"),
    f("wretr", U64, "MCP"),
    f("wredis", U64, "MCP"),
    f("status", Str, "SGP"),
    f("weight", U32, "MaP"),
    f("act", U32, "SGP"),
    f("bck", U32, "SGP"),
    f("chkfail", U64, "MCP"),
    f("chkdown", U64, "MCP"),
    f("lastchg", U32, "MAP"),
    f("downtime", U32, "MCP"),
    f("qlimit", U32, "CLP"),
    f("pid", U32, "KGP"),
    f("iid", U32, "KGS"),
    f("sid", U32, "KGS"),
    f("throttle", U32, "MaP"),
    f("lbtot", U64, "MCP"),
    f("tracked", Str, "CGS"),
    f("type", U32, "CGS"),
    f("rate", U32, "MRP"),
    f("rate_lim", U32, "CLP"),
    f("rate_max", U32, "MMP"),
    f("check_status", Str, "MOP"),
    f("check_code", U32, "MOP"),
    f("check_duration", U64, "MDP"),
    f("hrsp_1xx", U64, "MCP"),
    f("hrsp_2xx", U64, "MCP"),
    f("hrsp_3xx", U64, "MCP"),
    f("hrsp_4xx", U64, "MCP"),
    f("hrsp_5xx", U64, "MCP"),
    f("hrsp_other", U64, "MCP"),
    f("hanafail", U64, "MCP"),
    f("req_rate", U32, "MRP"),
    f("req_rate_max", U32, "MMP"),
    f("req_tot", U64, "MCP"),
    f("cli_abrt", U64, "MCP"),
    f("srv_abrt", U64, "MCP"),
    f("comp_in", U64, "MCP"),
    f("comp_out", U64, "MCP"),
    f("comp_byp", U64, "MCP"),
    f("comp_rsp", U64, "MCP"),
    f("lastsess", S32, "MAP"),
    f("last_chk", Str, "MOP"),
    f("last_agt", Str, "MOP"),
    f("qtime", U32, "MaP"),
    f("ctime", U32, "MaP"),
    f("rtime", U32, "MaP"),
    f("ttime", U32, "MaP"),
    f("agent_status", Str, "MOP"),
    f("agent_code", U32, "MOP"),
    f("agent_duration", U64, "MDP"),
    f("check_desc", Str, "MOP"),
    f("agent_desc", Str, "MOP"),
    f("check_rise", U32, "CGS"),
    f("check_fall", U32, "CGS"),
    f("check_health", U32, "CGS"),
    f("agent_rise", U32, "MaS"),
    f("agent_fall", U32, "MaS"),
    f("agent_health", U32, "MaS"),
    f("addr", Str, "CGS"),
    f("cookie", Str, "CGS"),
    f("mode", Str, "CGS"),
    f("algo", Str, "CGS"),
    f("conn_rate", U32, "MRP"),
    f("conn_rate_max", U32, "MMP"),
    f("conn_tot", U64, "MCP"),
    f("intercepted", U64, "MCP"),
    f("dcon", U64, "MCP"),
    f("dses", U64, "MCP"),
    f("wrew", U64, "MCP"),
    f("connect", U64, "MCP"),
    f("reuse", U64, "MCP"),
    f("cache_lookups", U64, "MCP"),
    f("cache_hits", U64, "MCP"),
    f("srv_icur", U32, "MGP"),
    f("src_ilim", U32, "CLP"),
    f("qtime_max", U32, "MMP"),
    f("ctime_max", U32, "MMP"),
    f("rtime_max", U32, "MMP"),
    f("ttime_max", U32, "MMP"),
    f("eint", U64, "MCP"),
    f("idle_conn_cur", U32, "MGP"),
    f("safe_conn_cur", U32, "MGP"),
    f("used_conn_cur", U32, "MGP"),
    f("need_conn_est", U32, "MGP"),
    f("uweight", U32, "MaP"),
    f("agg_server_status", U32, "MGP"),
    f("agg_server_check_status", U32, "MGP"),
    f("agg_check_status", U32, "MGP"),
    f("-", Str, "KNS"),
    f("ssl_sess", U64, "MCP"),
    f("ssl_reused_sess", U64, "MCP"),
    f("ssl_failed_handshake", U64, "MCP"),
    f("h2_headers_rcvd", U64, "MCP"),
    f("h2_data_rcvd", U64, "MCP"),
    f("h2_settings_rcvd", U64, "MCP"),
    f("h2_rst_stream_rcvd", U64, "MCP"),
    f("h2_goaway_rcvd", U64, "MCP"),
    f("h2_detected_conn_protocol_errors", U64, "MCP"),
    f("h2_detected_strm_protocol_errors", U64, "MCP"),
    f("h2_rst_stream_resp", U64, "MCP"),
    f("h2_goaway_resp", U64, "MCP"),
    f("h2_open_connections", U64, "MGP"),
    f("h2_backend_open_streams", U64, "MGP"),
    f("h2_total_connections", U64, "MCP"),
    f("h2_backend_total_streams", U64, "MCP"),
    f("h1_open_connections", U64, "MGP"),
    f("h1_open_streams", U64, "MGP"),
    f("h1_total_connections", U64, "MCP"),
    f("h1_total_streams", U64, "MCP"),
    f("h1_bytes_in", U64, "MCP"),
    f("h1_bytes_out", U64, "MCP"),
    f("h1_spliced_bytes_in", U64, "MCP"),
    f("h1_spliced_bytes_out", U64, "MCP"),
];

/// The position of the `-` separator.
pub const SEPARATOR: usize = 103;

/// The position of a column.
pub fn pos(name: &str) -> usize {
    static BY_NAME: std::sync::OnceLock<std::collections::HashMap<&'static str, usize>> =
        std::sync::OnceLock::new();
    let map = BY_NAME.get_or_init(|| {
        FIELDS
            .iter()
            .enumerate()
            .map(|(i, f)| (f.name, i))
            .collect()
    });
    *map.get(name)
        .unwrap_or_else(|| panic!("no stat column '{name}'"))
}

/// What one tag letter means, for the JSON form.
pub fn tag_word(slot: usize, letter: char) -> &'static str {
    match (slot, letter) {
        (0, 'M') => "Metric",
        (0, 'S') => "Status",
        (0, 'K') => "Key",
        (0, 'C') => "Config",
        (0, 'P') => "Product",
        (1, 'A') => "Age",
        (1, 'a') => "Avg",
        (1, 'C') => "Counter",
        (1, 'D') => "Duration",
        (1, 'G') => "Gauge",
        (1, 'L') => "Limit",
        (1, 'M') => "Max",
        (1, 'N') => "Name",
        (1, 'O') => "Output",
        (1, 'R') => "Rate",
        (1, 'T') => "Time",
        (2, 'P') => "Process",
        (2, 'S') => "Service",
        (2, 's') => "System",
        (2, 'C') => "Cluster",
        _ => "",
    }
}
