//! The Prometheus exporter (`http-request use-service prometheus-exporter`): HAProxy 2.6's
//! metric names, types and labels (`haproxy_process_*`, `haproxy_frontend_*`,
//! `haproxy_listener_*` for frontends with `option socket-stats`, `haproxy_backend_*`,
//! `haproxy_server_*`), each read from the same figures as `show info` and `show stat`, so
//! that dashboards and alerts written for HAProxy work unchanged.
//! `?scope=global|frontend|listener|backend|server` (repeatable; an empty one resets) picks
//! sections;
//! `?no-maint` leaves out servers in maintenance.

use std::fmt::Write as _;

use super::row::{Cell, Kind, Row};
use super::{collect, info, Filter};
use crate::runtime::Process;

/// Where a metric's value comes from.
#[derive(Clone, Copy)]
enum Source {
    /// A `show stat` column (or `show info` field, for the process), as is.
    Col(&'static str),
    /// A column in milliseconds, published in seconds.
    Ms(&'static str),
    /// A column, `NaN` when it is empty (a limit there is none of, a check counter of a
    /// server without a check), as HAProxy's exporter writes them.
    OrNan(&'static str),
    /// One sample per state, 1 for the current one.
    State(&'static [&'static str]),
    /// One sample per check status.
    CheckStatus,
    /// One sample per status class (`code` label).
    Responses,
    /// The version, as a label.
    Build,
    /// The last check's code; 0 on a checked server without one (as HAProxy).
    CheckCode,
}

use Source::{Col, Ms, OrNan, Responses, State};

const GAUGE: &str = "gauge";
const COUNTER: &str = "counter";

/// A metric: (name after `haproxy_SCOPE_`, type, source, help).
type Metric = (&'static str, &'static str, Source, &'static str);

/// (name after `haproxy_process_`, type, source, help)
const PROCESS: &[Metric] = &[
    ("nbthread", GAUGE, Col("Nbthread"), "Worker threads."),
    ("nbproc", GAUGE, Col("Nbproc"), "Processes (always 1)."),
    (
        "relative_process_id",
        GAUGE,
        Col("Process_num"),
        "This process's number.",
    ),
    (
        "uptime_seconds",
        GAUGE,
        Col("Uptime_sec"),
        "Seconds since start.",
    ),
    (
        "pool_failures_total",
        COUNTER,
        Col("PoolFailed"),
        "Failed memory-pool allocations.",
    ),
    ("max_fds", GAUGE, Col("Ulimit-n"), "Open-file limit."),
    ("max_sockets", GAUGE, Col("Maxsock"), "Socket limit."),
    (
        "max_connections",
        GAUGE,
        Col("Maxconn"),
        "Connection limit (maxconn).",
    ),
    (
        "hard_max_connections",
        GAUGE,
        Col("Hard_maxconn"),
        "Hard connection limit.",
    ),
    (
        "current_connections",
        GAUGE,
        Col("CurrConns"),
        "Client connections open.",
    ),
    (
        "connections_total",
        COUNTER,
        Col("CumConns"),
        "Client connections accepted.",
    ),
    (
        "requests_total",
        COUNTER,
        Col("CumReq"),
        "HTTP requests received.",
    ),
    (
        "max_ssl_connections",
        GAUGE,
        Col("MaxSslConns"),
        "TLS connection limit.",
    ),
    (
        "current_ssl_connections",
        GAUGE,
        Col("CurrSslConns"),
        "TLS connections open.",
    ),
    (
        "ssl_connections_total",
        COUNTER,
        Col("CumSslConns"),
        "TLS connections accepted.",
    ),
    ("max_pipes", GAUGE, Col("Maxpipes"), "Pipe limit."),
    (
        "pipes_used_total",
        COUNTER,
        Col("PipesUsed"),
        "Pipes in use.",
    ),
    ("pipes_free_total", COUNTER, Col("PipesFree"), "Pipes free."),
    (
        "current_connection_rate",
        GAUGE,
        Col("ConnRate"),
        "Connections over the last second.",
    ),
    (
        "limit_connection_rate",
        GAUGE,
        Col("ConnRateLimit"),
        "Connection rate limit.",
    ),
    (
        "max_connection_rate",
        GAUGE,
        Col("MaxConnRate"),
        "Highest connection rate seen.",
    ),
    (
        "current_session_rate",
        GAUGE,
        Col("SessRate"),
        "Sessions over the last second.",
    ),
    (
        "limit_session_rate",
        GAUGE,
        Col("SessRateLimit"),
        "Session rate limit.",
    ),
    (
        "max_session_rate",
        GAUGE,
        Col("MaxSessRate"),
        "Highest session rate seen.",
    ),
    (
        "current_ssl_rate",
        GAUGE,
        Col("SslRate"),
        "TLS sessions over the last second.",
    ),
    (
        "limit_ssl_rate",
        GAUGE,
        Col("SslRateLimit"),
        "TLS session rate limit.",
    ),
    (
        "max_ssl_rate",
        GAUGE,
        Col("MaxSslRate"),
        "Highest TLS session rate seen.",
    ),
    (
        "current_frontend_ssl_key_rate",
        GAUGE,
        Col("SslFrontendKeyRate"),
        "Frontend TLS key computations per second.",
    ),
    (
        "max_frontend_ssl_key_rate",
        GAUGE,
        Col("SslFrontendMaxKeyRate"),
        "Highest frontend TLS key rate.",
    ),
    (
        "frontend_ssl_reuse",
        GAUGE,
        Col("SslFrontendSessionReuse_pct"),
        "Frontend TLS session reuse, percent.",
    ),
    (
        "current_backend_ssl_key_rate",
        GAUGE,
        Col("SslBackendKeyRate"),
        "Backend TLS key computations per second.",
    ),
    (
        "max_backend_ssl_key_rate",
        GAUGE,
        Col("SslBackendMaxKeyRate"),
        "Highest backend TLS key rate.",
    ),
    (
        "ssl_cache_lookups_total",
        COUNTER,
        Col("SslCacheLookups"),
        "TLS session cache lookups.",
    ),
    (
        "ssl_cache_misses_total",
        COUNTER,
        Col("SslCacheMisses"),
        "TLS session cache misses.",
    ),
    (
        "http_comp_bytes_in_total",
        COUNTER,
        Col("CompressBpsIn"),
        "Bytes per second fed to the compressor.",
    ),
    (
        "http_comp_bytes_out_total",
        COUNTER,
        Col("CompressBpsOut"),
        "Bytes per second out of the compressor.",
    ),
    (
        "limit_http_comp",
        GAUGE,
        Col("CompressBpsRateLim"),
        "Compression rate limit (maxcomprate).",
    ),
    (
        "current_zlib_memory",
        GAUGE,
        Col("ZlibMemUsage"),
        "Compressor memory in use (none: stateless encoder).",
    ),
    (
        "max_zlib_memory",
        GAUGE,
        Col("MaxZlibMemUsage"),
        "Compressor memory limit.",
    ),
    ("current_tasks", GAUGE, Col("Tasks"), "Tasks."),
    (
        "current_run_queue",
        GAUGE,
        Col("Run_queue"),
        "Work waiting to run on the workers.",
    ),
    (
        "idle_time_percent",
        GAUGE,
        Col("Idle_pct"),
        "Share of time the workers were idle.",
    ),
    (
        "stopping",
        GAUGE,
        Col("Stopping"),
        "1 while stopping softly.",
    ),
    ("jobs", GAUGE, Col("Jobs"), "Connections and listeners."),
    (
        "unstoppable_jobs",
        GAUGE,
        Col("Unstoppable Jobs"),
        "Jobs a soft stop waits for.",
    ),
    ("listeners", GAUGE, Col("Listeners"), "Listening sockets."),
    ("active_peers", GAUGE, Col("ActivePeers"), "Peers."),
    (
        "connected_peers",
        GAUGE,
        Col("ConnectedPeers"),
        "Connected peers.",
    ),
    (
        "dropped_logs_total",
        COUNTER,
        Col("DroppedLogs"),
        "Log lines dropped.",
    ),
    (
        "busy_polling_enabled",
        GAUGE,
        Col("BusyPolling"),
        "1 with busy polling.",
    ),
    (
        "failed_resolutions",
        COUNTER,
        Col("FailedResolutions"),
        "Failed DNS resolutions.",
    ),
    (
        "bytes_out_total",
        COUNTER,
        Col("TotalBytesOut"),
        "Bytes sent to clients.",
    ),
    (
        "spliced_bytes_out_total",
        COUNTER,
        Col("TotalSplicdedBytesOut"),
        "Bytes sent to clients by splicing.",
    ),
    (
        "bytes_out_rate",
        GAUGE,
        Col("BytesOutRate"),
        "Bytes per second sent to clients.",
    ),
    (
        "recv_logs_total",
        COUNTER,
        Col("CumRecvLogs"),
        "Log lines received.",
    ),
    (
        "build_info",
        GAUGE,
        Source::Build,
        "The version, as a label.",
    ),
    (
        "max_memory_bytes",
        GAUGE,
        Col("Memmax_bytes"),
        "Memory limit.",
    ),
    (
        "pool_allocated_bytes",
        GAUGE,
        Col("PoolAlloc_bytes"),
        "Memory allocated by pools.",
    ),
    (
        "pool_used_bytes",
        GAUGE,
        Col("PoolUsed_bytes"),
        "Memory used from pools.",
    ),
    (
        "start_time_seconds",
        GAUGE,
        Col("Start_time_sec"),
        "Start time, seconds since the epoch.",
    ),
];

const UP_DOWN: &[&str] = &["DOWN", "UP"];
const SERVER_STATES: &[&str] = &["DOWN", "UP", "MAINT", "DRAIN", "NOLB"];
const CHECK_STATES: &[&str] = &[
    "HANA", "SOCKERR", "L4OK", "L4TOUT", "L4CON", "L6OK", "L6TOUT", "L6RSP", "L7TOUT", "L7RSP",
    "L7OK", "L7OKC", "L7STS", "PROCERR", "PROCTOUT", "PROCOK",
];

// Metrics that several scopes publish with the same source and help.
const MAX_QUEUE: Metric = (
    "max_queue",
    GAUGE,
    Col("qmax"),
    "Most requests waiting at once.",
);
const CURRENT_SESSIONS: Metric = ("current_sessions", GAUGE, Col("scur"), "Sessions open.");
const MAX_SESSIONS: Metric = (
    "max_sessions",
    GAUGE,
    Col("smax"),
    "Most sessions open at once.",
);
const LIMIT_SESSIONS: Metric = ("limit_sessions", GAUGE, OrNan("slim"), "Session limit.");
const SESSIONS_TOTAL: Metric = ("sessions_total", COUNTER, Col("stot"), "Sessions.");
const BYTES_IN_TOTAL: Metric = ("bytes_in_total", COUNTER, Col("bin"), "Bytes received.");
const BYTES_OUT_TOTAL: Metric = ("bytes_out_total", COUNTER, Col("bout"), "Bytes sent.");
const REQUESTS_DENIED_TOTAL: Metric = (
    "requests_denied_total",
    COUNTER,
    Col("dreq"),
    "Requests denied by rules.",
);
const RESPONSES_DENIED_TOTAL: Metric = (
    "responses_denied_total",
    COUNTER,
    Col("dresp"),
    "Responses denied by rules.",
);
const RESPONSE_ERRORS_TOTAL: Metric = (
    "response_errors_total",
    COUNTER,
    Col("eresp"),
    "Invalid or cut responses.",
);
const RETRY_WARNINGS_TOTAL: Metric = (
    "retry_warnings_total",
    COUNTER,
    Col("wretr"),
    "Connection retries.",
);
const REDISPATCH_WARNINGS_TOTAL: Metric = (
    "redispatch_warnings_total",
    COUNTER,
    Col("wredis"),
    "Requests moved to another server.",
);
const STATUS: Metric = ("status", GAUGE, State(UP_DOWN), "1 for the current state.");
const CHECK_LAST_CHANGE_SECONDS: Metric = (
    "check_last_change_seconds",
    GAUGE,
    Col("lastchg"),
    "Seconds since the last change of state.",
);
const MAX_SESSION_RATE: Metric = (
    "max_session_rate",
    GAUGE,
    Col("rate_max"),
    "Highest session rate seen.",
);
const HTTP_RESPONSES_TOTAL: Metric = (
    "http_responses_total",
    COUNTER,
    Responses,
    "HTTP responses by status class.",
);
const HTTP_REQUESTS_TOTAL: Metric = (
    "http_requests_total",
    COUNTER,
    Col("req_tot"),
    "HTTP requests.",
);
const CLIENT_ABORTS_TOTAL: Metric = (
    "client_aborts_total",
    COUNTER,
    Col("cli_abrt"),
    "Transfers aborted by the client.",
);
const SERVER_ABORTS_TOTAL: Metric = (
    "server_aborts_total",
    COUNTER,
    Col("srv_abrt"),
    "Transfers aborted by the server.",
);
const HTTP_COMP_BYTES_IN_TOTAL: Metric = (
    "http_comp_bytes_in_total",
    COUNTER,
    Col("comp_in"),
    "Bytes fed to the compressor.",
);
const HTTP_COMP_BYTES_OUT_TOTAL: Metric = (
    "http_comp_bytes_out_total",
    COUNTER,
    Col("comp_out"),
    "Bytes out of the compressor.",
);
const HTTP_COMP_BYTES_BYPASSED_TOTAL: Metric = (
    "http_comp_bytes_bypassed_total",
    COUNTER,
    Col("comp_byp"),
    "Bytes sent uncompressed.",
);
const HTTP_COMP_RESPONSES_TOTAL: Metric = (
    "http_comp_responses_total",
    COUNTER,
    Col("comp_rsp"),
    "Responses compressed.",
);
const LAST_SESSION_SECONDS: Metric = (
    "last_session_seconds",
    GAUGE,
    Col("lastsess"),
    "Seconds since the last session.",
);
const QUEUE_TIME_AVERAGE_SECONDS: Metric = (
    "queue_time_average_seconds",
    GAUGE,
    Ms("qtime"),
    "Average time queued, last 1024 requests.",
);
const CONNECT_TIME_AVERAGE_SECONDS: Metric = (
    "connect_time_average_seconds",
    GAUGE,
    Ms("ctime"),
    "Average connect time, last 1024 requests.",
);
const RESPONSE_TIME_AVERAGE_SECONDS: Metric = (
    "response_time_average_seconds",
    GAUGE,
    Ms("rtime"),
    "Average response time, last 1024 requests.",
);
const TOTAL_TIME_AVERAGE_SECONDS: Metric = (
    "total_time_average_seconds",
    GAUGE,
    Ms("ttime"),
    "Average total time, last 1024 requests.",
);
const FAILED_HEADER_REWRITING_TOTAL: Metric = (
    "failed_header_rewriting_total",
    COUNTER,
    Col("wrew"),
    "Failed header rewrites.",
);
const CONNECTION_REUSES_TOTAL: Metric = (
    "connection_reuses_total",
    COUNTER,
    Col("reuse"),
    "Requests on reused connections.",
);
const HTTP_CACHE_LOOKUPS_TOTAL: Metric = (
    "http_cache_lookups_total",
    COUNTER,
    Col("cache_lookups"),
    "Cache lookups.",
);
const HTTP_CACHE_HITS_TOTAL: Metric = (
    "http_cache_hits_total",
    COUNTER,
    Col("cache_hits"),
    "Cache hits.",
);
const MAX_QUEUE_TIME_SECONDS: Metric = (
    "max_queue_time_seconds",
    GAUGE,
    Ms("qtime_max"),
    "Longest time queued.",
);
const MAX_CONNECT_TIME_SECONDS: Metric = (
    "max_connect_time_seconds",
    GAUGE,
    Ms("ctime_max"),
    "Longest connect time.",
);
const MAX_RESPONSE_TIME_SECONDS: Metric = (
    "max_response_time_seconds",
    GAUGE,
    Ms("rtime_max"),
    "Longest response time.",
);
const MAX_TOTAL_TIME_SECONDS: Metric = (
    "max_total_time_seconds",
    GAUGE,
    Ms("ttime_max"),
    "Longest total time.",
);
const INTERNAL_ERRORS_TOTAL: Metric = (
    "internal_errors_total",
    COUNTER,
    Col("eint"),
    "Internal errors.",
);

const REQUEST_ERRORS_TOTAL: Metric = (
    "request_errors_total",
    COUNTER,
    Col("ereq"),
    "Invalid or incomplete requests.",
);
const DENIED_CONNECTIONS_TOTAL: Metric = (
    "denied_connections_total",
    COUNTER,
    Col("dcon"),
    "Connections denied by rules.",
);
const DENIED_SESSIONS_TOTAL: Metric = (
    "denied_sessions_total",
    COUNTER,
    Col("dses"),
    "Sessions denied by rules.",
);
const LISTENER_STATES: &[&str] = &["WAITING", "OPEN", "FULL"];

/// A listener's figures (`option socket-stats`), as HAProxy 2.6's exporter publishes them.
const LISTENER: &[Metric] = &[
    CURRENT_SESSIONS,
    MAX_SESSIONS,
    // 0 without a limit, where the other scopes say NaN.
    ("limit_sessions", GAUGE, Col("slim"), "Session limit."),
    SESSIONS_TOTAL,
    BYTES_IN_TOTAL,
    BYTES_OUT_TOTAL,
    REQUESTS_DENIED_TOTAL,
    RESPONSES_DENIED_TOTAL,
    REQUEST_ERRORS_TOTAL,
    (
        "status",
        GAUGE,
        State(LISTENER_STATES),
        "1 for the current state.",
    ),
    DENIED_CONNECTIONS_TOTAL,
    DENIED_SESSIONS_TOTAL,
    FAILED_HEADER_REWRITING_TOTAL,
    INTERNAL_ERRORS_TOTAL,
];

const FRONTEND: &[Metric] = &[
    CURRENT_SESSIONS,
    MAX_SESSIONS,
    LIMIT_SESSIONS,
    SESSIONS_TOTAL,
    BYTES_IN_TOTAL,
    BYTES_OUT_TOTAL,
    REQUESTS_DENIED_TOTAL,
    RESPONSES_DENIED_TOTAL,
    REQUEST_ERRORS_TOTAL,
    STATUS,
    (
        "limit_session_rate",
        GAUGE,
        Col("rate_lim"),
        "Session rate limit.",
    ),
    MAX_SESSION_RATE,
    HTTP_RESPONSES_TOTAL,
    (
        "http_requests_rate_max",
        GAUGE,
        Col("req_rate_max"),
        "Highest request rate seen.",
    ),
    HTTP_REQUESTS_TOTAL,
    HTTP_COMP_BYTES_IN_TOTAL,
    HTTP_COMP_BYTES_OUT_TOTAL,
    HTTP_COMP_BYTES_BYPASSED_TOTAL,
    HTTP_COMP_RESPONSES_TOTAL,
    (
        "connections_rate_max",
        GAUGE,
        Col("conn_rate_max"),
        "Highest connection rate seen.",
    ),
    (
        "connections_total",
        COUNTER,
        Col("conn_tot"),
        "Connections accepted.",
    ),
    (
        "intercepted_requests_total",
        COUNTER,
        Col("intercepted"),
        "Requests answered by the proxy itself.",
    ),
    DENIED_CONNECTIONS_TOTAL,
    DENIED_SESSIONS_TOTAL,
    FAILED_HEADER_REWRITING_TOTAL,
    HTTP_CACHE_LOOKUPS_TOTAL,
    HTTP_CACHE_HITS_TOTAL,
    INTERNAL_ERRORS_TOTAL,
];

const BACKEND: &[Metric] = &[
    (
        "current_queue",
        GAUGE,
        Col("qcur"),
        "Requests waiting for a server.",
    ),
    MAX_QUEUE,
    CURRENT_SESSIONS,
    MAX_SESSIONS,
    LIMIT_SESSIONS,
    SESSIONS_TOTAL,
    BYTES_IN_TOTAL,
    BYTES_OUT_TOTAL,
    REQUESTS_DENIED_TOTAL,
    RESPONSES_DENIED_TOTAL,
    (
        "connection_errors_total",
        COUNTER,
        Col("econ"),
        "Failed connections to servers.",
    ),
    RESPONSE_ERRORS_TOTAL,
    RETRY_WARNINGS_TOTAL,
    REDISPATCH_WARNINGS_TOTAL,
    STATUS,
    (
        "weight",
        GAUGE,
        Col("weight"),
        "Weight of the usable servers.",
    ),
    (
        "active_servers",
        GAUGE,
        Col("act"),
        "Usable active servers.",
    ),
    (
        "backup_servers",
        GAUGE,
        Col("bck"),
        "Usable backup servers.",
    ),
    (
        "check_up_down_total",
        COUNTER,
        OrNan("chkdown"),
        "Times the backend lost its last server.",
    ),
    CHECK_LAST_CHANGE_SECONDS,
    (
        "downtime_seconds_total",
        COUNTER,
        Col("downtime"),
        "Seconds without a usable server.",
    ),
    (
        "loadbalanced_total",
        COUNTER,
        Col("lbtot"),
        "Times a server was picked.",
    ),
    MAX_SESSION_RATE,
    HTTP_RESPONSES_TOTAL,
    HTTP_REQUESTS_TOTAL,
    CLIENT_ABORTS_TOTAL,
    SERVER_ABORTS_TOTAL,
    HTTP_COMP_BYTES_IN_TOTAL,
    HTTP_COMP_BYTES_OUT_TOTAL,
    HTTP_COMP_BYTES_BYPASSED_TOTAL,
    HTTP_COMP_RESPONSES_TOTAL,
    LAST_SESSION_SECONDS,
    QUEUE_TIME_AVERAGE_SECONDS,
    CONNECT_TIME_AVERAGE_SECONDS,
    RESPONSE_TIME_AVERAGE_SECONDS,
    TOTAL_TIME_AVERAGE_SECONDS,
    FAILED_HEADER_REWRITING_TOTAL,
    (
        "connection_attempts_total",
        COUNTER,
        Col("connect"),
        "Connections opened to servers.",
    ),
    CONNECTION_REUSES_TOTAL,
    HTTP_CACHE_LOOKUPS_TOTAL,
    HTTP_CACHE_HITS_TOTAL,
    MAX_QUEUE_TIME_SECONDS,
    MAX_CONNECT_TIME_SECONDS,
    MAX_RESPONSE_TIME_SECONDS,
    MAX_TOTAL_TIME_SECONDS,
    INTERNAL_ERRORS_TOTAL,
    ("uweight", GAUGE, Col("uweight"), "Weights set by the user."),
    (
        "agg_server_status",
        GAUGE,
        Col("agg_server_status"),
        "0 while a server is usable.",
    ),
    (
        "agg_server_check_status",
        GAUGE,
        Col("agg_server_check_status"),
        "0 while a server is usable (deprecated).",
    ),
    (
        "agg_check_status",
        GAUGE,
        Col("agg_check_status"),
        "0 while a server is usable.",
    ),
];

const SERVER: &[Metric] = &[
    (
        "current_queue",
        GAUGE,
        Col("qcur"),
        "Requests waiting for this server.",
    ),
    MAX_QUEUE,
    (
        "current_sessions",
        GAUGE,
        Col("scur"),
        "Requests in flight.",
    ),
    (
        "max_sessions",
        GAUGE,
        Col("smax"),
        "Most requests in flight at once.",
    ),
    ("limit_sessions", GAUGE, OrNan("slim"), "maxconn."),
    SESSIONS_TOTAL,
    BYTES_IN_TOTAL,
    BYTES_OUT_TOTAL,
    RESPONSES_DENIED_TOTAL,
    (
        "connection_errors_total",
        COUNTER,
        Col("econ"),
        "Failed connections.",
    ),
    RESPONSE_ERRORS_TOTAL,
    RETRY_WARNINGS_TOTAL,
    REDISPATCH_WARNINGS_TOTAL,
    (
        "status",
        GAUGE,
        State(SERVER_STATES),
        "1 for the current state.",
    ),
    ("weight", GAUGE, Col("weight"), "Effective weight."),
    (
        "check_failures_total",
        COUNTER,
        OrNan("chkfail"),
        "Failed health checks.",
    ),
    (
        "check_up_down_total",
        COUNTER,
        OrNan("chkdown"),
        "Times marked down.",
    ),
    CHECK_LAST_CHANGE_SECONDS,
    (
        "downtime_seconds_total",
        COUNTER,
        OrNan("downtime"),
        "Seconds spent down.",
    ),
    ("queue_limit", GAUGE, OrNan("qlimit"), "maxqueue."),
    (
        "current_throttle",
        GAUGE,
        OrNan("throttle"),
        "slowstart throttle, percent.",
    ),
    ("loadbalanced_total", COUNTER, Col("lbtot"), "Times picked."),
    MAX_SESSION_RATE,
    (
        "check_status",
        GAUGE,
        Source::CheckStatus,
        "1 for the last check's status.",
    ),
    (
        "check_code",
        GAUGE,
        Source::CheckCode,
        "HTTP status of the last check.",
    ),
    (
        "check_duration_seconds",
        GAUGE,
        Ms("check_duration"),
        "Duration of the last check.",
    ),
    HTTP_RESPONSES_TOTAL,
    CLIENT_ABORTS_TOTAL,
    SERVER_ABORTS_TOTAL,
    LAST_SESSION_SECONDS,
    QUEUE_TIME_AVERAGE_SECONDS,
    CONNECT_TIME_AVERAGE_SECONDS,
    RESPONSE_TIME_AVERAGE_SECONDS,
    TOTAL_TIME_AVERAGE_SECONDS,
    FAILED_HEADER_REWRITING_TOTAL,
    (
        "connection_attempts_total",
        COUNTER,
        Col("connect"),
        "Connections opened.",
    ),
    CONNECTION_REUSES_TOTAL,
    (
        "idle_connections_current",
        GAUGE,
        Col("srv_icur"),
        "Idle connections.",
    ),
    (
        "idle_connections_limit",
        GAUGE,
        OrNan("src_ilim"),
        "pool-max-conn.",
    ),
    MAX_QUEUE_TIME_SECONDS,
    MAX_CONNECT_TIME_SECONDS,
    MAX_RESPONSE_TIME_SECONDS,
    MAX_TOTAL_TIME_SECONDS,
    INTERNAL_ERRORS_TOTAL,
    (
        "unsafe_idle_connections_current",
        GAUGE,
        Col("idle_conn_cur"),
        "Idle connections that may only carry a request like their first.",
    ),
    (
        "safe_idle_connections_current",
        GAUGE,
        Col("safe_conn_cur"),
        "Idle connections safe for any request.",
    ),
    (
        "used_connections_current",
        GAUGE,
        Col("used_conn_cur"),
        "Connections in use.",
    ),
    (
        "need_connections_current",
        GAUGE,
        Col("need_conn_est"),
        "Connections estimated to be needed.",
    ),
    ("uweight", GAUGE, Col("uweight"), "Weight set by the user."),
];

/// Which sections a scrape asks for, from its query string.
#[derive(Debug, Clone, Copy)]
pub struct Scope {
    pub global: bool,
    pub frontend: bool,
    pub listener: bool,
    pub backend: bool,
    pub server: bool,
    /// `no-maint`: servers in maintenance are left out.
    pub no_maint: bool,
}

impl Scope {
    /// `scope=NAME` (repeatable; an empty value clears what came before; none means all).
    pub fn from_query(query: &str) -> Scope {
        let mut scope = Scope {
            global: true,
            frontend: true,
            listener: true,
            backend: true,
            server: true,
            no_maint: false,
        };
        let mut first = true;
        for pair in query.split('&') {
            if pair == "no-maint" {
                scope.no_maint = true;
                continue;
            }
            let Some(v) = pair.strip_prefix("scope=") else {
                continue;
            };
            if first {
                scope = Scope {
                    global: false,
                    frontend: false,
                    listener: false,
                    backend: false,
                    server: false,
                    ..scope
                };
                first = false;
            }
            match v {
                "global" => scope.global = true,
                "frontend" => scope.frontend = true,
                "listener" => scope.listener = true,
                "backend" => scope.backend = true,
                "server" => scope.server = true,
                "*" => {
                    scope = Scope {
                        global: true,
                        frontend: true,
                        listener: true,
                        backend: true,
                        server: true,
                        ..scope
                    }
                }
                "" => {
                    scope = Scope {
                        global: false,
                        frontend: false,
                        listener: false,
                        backend: false,
                        server: false,
                        ..scope
                    }
                }
                _ => {}
            }
        }
        scope
    }
}

/// The exposition text.
pub fn render(p: &Process, scope: Scope) -> String {
    let mut out = String::with_capacity(64 * 1024);
    if scope.global {
        let values = info::values(p);
        for (name, kind, from, help) in PROCESS {
            header(&mut out, "process", name, kind, help);
            let metric = format!("haproxy_process_{name}");
            match from {
                Source::Build => {
                    let _ = writeln!(
                        out,
                        "{metric}{{version=\"{}\"}} 1",
                        env!("CARGO_PKG_VERSION")
                    );
                }
                Col(field) => {
                    let v = values
                        .iter()
                        .find(|(n, _)| n == field)
                        .map_or("0", |(_, v)| v.as_str());
                    let _ = writeln!(out, "{metric} {v}");
                }
                _ => {}
            }
        }
    }
    let rows = collect(p, &Filter::default());
    for (on, kind, scope_name, table) in [
        (scope.frontend, Kind::Frontend, "frontend", FRONTEND),
        (scope.listener, Kind::Listener, "listener", LISTENER),
        (scope.backend, Kind::Backend, "backend", BACKEND),
        (scope.server, Kind::Server, "server", SERVER),
    ] {
        if !on {
            continue;
        }
        let rows: Vec<(&Row, String)> = rows
            .iter()
            .filter(|r| r.kind == kind)
            .filter(|r| !(scope.no_maint && r.name("status").starts_with("MAINT")))
            .map(|r| (r, labels(r)))
            .collect();
        // As HAProxy's exporter: a family with no row is left out, header included.
        if rows.is_empty() {
            continue;
        }
        for (name, ty, from, help) in table {
            header(&mut out, scope_name, name, ty, help);
            let metric = format!("haproxy_{scope_name}_{name}");
            let source = Resolved::of(*from);
            for (r, l) in &rows {
                sample(&mut out, &metric, l, source, r);
            }
        }
    }
    out
}

fn header(out: &mut String, scope: &str, name: &str, ty: &str, help: &str) {
    let _ = writeln!(out, "# HELP haproxy_{scope}_{name} {help}");
    let _ = writeln!(out, "# TYPE haproxy_{scope}_{name} {ty}");
}

/// The labels of a row: its proxy, and its server or listener on their rows.
fn labels(r: &Row) -> String {
    let px = escape(r.name("pxname"));
    match r.kind {
        Kind::Server => format!("proxy=\"{px}\",server=\"{}\"", escape(r.name("svname"))),
        Kind::Listener => format!("proxy=\"{px}\",listener=\"{}\"", escape(r.name("svname"))),
        _ => format!("proxy=\"{px}\""),
    }
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A source with its columns looked up once per metric family.
#[derive(Clone, Copy)]
enum Resolved {
    Col(usize),
    Ms(usize),
    OrNan(usize),
    State(&'static [&'static str], usize),
    CheckStatus(usize),
    CheckCode(usize, usize),
    Responses([usize; 6]),
    None,
}

impl Resolved {
    fn of(from: Source) -> Resolved {
        let pos = super::fields::pos;
        match from {
            Col(c) => Resolved::Col(pos(c)),
            Ms(c) => Resolved::Ms(pos(c)),
            OrNan(c) => Resolved::OrNan(pos(c)),
            State(states) => Resolved::State(states, pos("status")),
            Source::CheckStatus => Resolved::CheckStatus(pos("check_status")),
            Source::CheckCode => Resolved::CheckCode(pos("check_code"), pos("check_status")),
            Responses => Resolved::Responses(super::HRSP.map(pos)),
            Source::Build => Resolved::None,
        }
    }
}

fn sample(out: &mut String, metric: &str, l: &str, from: Resolved, r: &Row) {
    let cell = |i: usize| r.cells[i].as_ref();
    match from {
        // An empty column is a figure HAProxy leaves out on this row.
        Resolved::Col(i) => {
            if let Some(Cell::Num(v)) = cell(i) {
                let _ = writeln!(out, "{metric}{{{l}}} {v}");
            }
        }
        Resolved::CheckCode(code, status) => match (cell(code), cell(status)) {
            (Some(Cell::Num(v)), _) => {
                let _ = writeln!(out, "{metric}{{{l}}} {v}");
            }
            (None, Some(_)) => {
                let _ = writeln!(out, "{metric}{{{l}}} 0");
            }
            _ => {}
        },
        Resolved::Ms(i) => {
            if let Some(Cell::Num(v)) = cell(i) {
                let _ = writeln!(out, "{metric}{{{l}}} {:.6}", *v as f64 / 1000.0);
            }
        }
        Resolved::OrNan(i) => match cell(i) {
            Some(Cell::Num(v)) => {
                let _ = writeln!(out, "{metric}{{{l}}} {v}");
            }
            _ => {
                let _ = writeln!(out, "{metric}{{{l}}} NaN");
            }
        },
        Resolved::State(states, i) => {
            let status = match cell(i) {
                Some(Cell::Text(t)) => t.as_str(),
                _ => "",
            };
            // "UP 1/3" is up, "DOWN 1/2" down, "OPEN" is a frontend that is up (a listener
            // has its own states, OPEN among them), "no check" a server that is up.
            let word = match status.split(' ').next().unwrap_or("") {
                "OPEN" if !states.contains(&"OPEN") => "UP",
                "no" => "UP",
                w => w,
            };
            for s in states {
                let _ = writeln!(
                    out,
                    "{metric}{{{l},state=\"{s}\"}} {}",
                    u8::from(*s == word)
                );
            }
        }
        Resolved::CheckStatus(i) => {
            let Some(Cell::Text(now)) = cell(i) else {
                return;
            };
            for s in CHECK_STATES {
                let _ = writeln!(out, "{metric}{{{l},state=\"{s}\"}} {}", u8::from(s == now));
            }
        }
        Resolved::Responses(cols) => {
            for (i, code) in cols
                .iter()
                .zip(["1xx", "2xx", "3xx", "4xx", "5xx", "other"])
            {
                if let Some(Cell::Num(v)) = cell(*i) {
                    let _ = writeln!(out, "{metric}{{{l},code=\"{code}\"}} {v}");
                }
            }
        }
        Resolved::None => {}
    }
}
