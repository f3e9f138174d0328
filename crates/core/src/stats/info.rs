//! `show info`: the process's figures under HAProxy 2.6's names, positions and tags, as
//! `Name: value` lines, typed lines or JSON. Figures of features sluice does not have (TLS,
//! pipes, peers, resolvers, memory pools) are 0, as HAProxy shows them when unused.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use super::fields::Ty;
use super::render::{quote, tags_json};
use crate::runtime::{clock_ms, Process, ThreadCtx};

/// The date of this release, for `Release_date`.
const RELEASE_DATE: &str = "2026/11/23";

/// One line: position, name, tags, type, value.
struct Line {
    pos: usize,
    name: &'static str,
    tags: &'static str,
    ty: Ty,
    value: String,
}

/// Every line of `show info`, in order.
fn lines(p: &Process) -> Vec<Line> {
    let sum = |f: fn(&ThreadCtx) -> u64| p.threads.iter().map(f).sum::<u64>();
    let peers = |n: &std::sync::atomic::AtomicUsize| n.load(Ordering::Relaxed).to_string();
    let n = p.threads.len() as u64;
    let busy = sum(|t| u64::from(t.busy_pct.load(Ordering::Relaxed)));
    let now = clock_ms();
    let fe_rate = |f: fn(&crate::runtime::ProxyCounters) -> &crate::freq::PerSecond| -> u64 {
        p.state
            .frontends
            .iter()
            .flat_map(|st| st.counters.iter())
            .map(|c| f(c).per_sec(now))
            .sum()
    };
    let bytes_out: u64 = p
        .state
        .frontends
        .iter()
        .map(|st| st.counters.sum(|c| &c.traffic.bytes_out))
        .sum();
    let uptime = p.started.elapsed().as_secs();
    let nofile = rlimit_nofile();
    let listeners: usize = p
        .config
        .frontends
        .iter()
        .map(|f| f.listen.binds.len())
        .sum();
    let active = p.active_total() as u64;
    let checks: usize = p
        .config
        .backends
        .iter()
        .flat_map(|b| &b.servers)
        .map(|s| usize::from(s.check.is_some()) + usize::from(s.agent.is_some()))
        .sum();
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
        .saturating_sub(uptime);
    let now_ms = crate::runtime::clock_ms();
    let worker_rate = |r: fn(&crate::runtime::WorkerCounters) -> &crate::freq::PerSecond| -> u64 {
        p.threads
            .iter()
            .map(|t| r(&t.counters).per_sec(now_ms))
            .sum()
    };
    let tls_cum = sum(|t| t.counters.tls_sessions.get());
    let tls_cur = p.tls_open();
    let (full, resumed) = (
        sum(|t| t.counters.tls_full.get()),
        sum(|t| t.counters.tls_resumed.get()),
    );
    let reuse_pct = (resumed * 100).checked_div(full + resumed).unwrap_or(0);
    let conn_rate = fe_rate(|c| &c.connection_rate);
    let sess_rate = fe_rate(|c| &c.session_rate);
    let zero = String::from("0");
    // As HAProxy counts its pools: what the workers keep free counts as used too.
    let pool_bytes = p.buffer_pool().allocated_bytes();
    let rates = &p.admission.rates;
    let limit = |g| rates.global(g).unwrap_or(0).to_string();
    let version = env!("CARGO_PKG_VERSION");
    let l = |pos, name, tags, ty, value: String| Line {
        pos,
        name,
        tags,
        ty,
        value,
    };
    use Ty::{Str, U32, U64};
    let mut all = vec![
        l(0, "Name", "POS", Str, "sluice".into()),
        l(1, "Version", "POS", Str, version.into()),
        l(2, "Release_date", "POS", Str, RELEASE_DATE.into()),
        l(3, "Nbthread", "CGS", U32, n.to_string()),
        l(4, "Nbproc", "CGS", U32, "1".into()),
        l(5, "Process_num", "KGP", U32, "1".into()),
        l(6, "Pid", "SGP", U32, std::process::id().to_string()),
        l(7, "Uptime", "MDP", Str, uptime_text(uptime)),
        l(8, "Uptime_sec", "MDP", U32, uptime.to_string()),
        l(9, "Memmax_MB", "CLP", U32, zero.clone()),
        l(
            10,
            "PoolAlloc_MB",
            "MGP",
            U32,
            (pool_bytes >> 20).to_string(),
        ),
        l(
            11,
            "PoolUsed_MB",
            "MGP",
            U32,
            (pool_bytes >> 20).to_string(),
        ),
        l(12, "PoolFailed", "MCP", U32, zero.clone()),
        l(13, "Ulimit-n", "CLP", U32, nofile.to_string()),
        l(14, "Maxsock", "CLP", U32, nofile.to_string()),
        l(
            15,
            "Maxconn",
            "CLP",
            U32,
            p.admission.global_limit().to_string(),
        ),
        l(
            16,
            "Hard_maxconn",
            "CLP",
            U32,
            p.admission.hard_limit.to_string(),
        ),
        l(17, "CurrConns", "MGP", U32, active.to_string()),
        l(
            18,
            "CumConns",
            "MCP",
            U32,
            sum(|t| t.counters.accepted.get()).to_string(),
        ),
        l(
            19,
            "CumReq",
            "MCP",
            U32,
            sum(|t| t.counters.requests.get()).to_string(),
        ),
        l(
            20,
            "MaxSslConns",
            "MMP",
            U32,
            p.config.global.tls.max_conns.unwrap_or(0).to_string(),
        ),
        l(21, "CurrSslConns", "MGP", U32, tls_cur.to_string()),
        l(22, "CumSslConns", "MCP", U32, tls_cum.to_string()),
        l(
            23,
            "Maxpipes",
            "CLP",
            U32,
            crate::transport::splice::max_pipes(&p.config.global, p.admission.global_limit())
                .to_string(),
        ),
        l(
            24,
            "PipesUsed",
            "MGP",
            U32,
            p.pipes.used.load(Ordering::Relaxed).to_string(),
        ),
        l(
            25,
            "PipesFree",
            "MGP",
            U32,
            p.pipes.free.load(Ordering::Relaxed).to_string(),
        ),
        l(26, "ConnRate", "MRP", U32, conn_rate.to_string()),
        l(
            27,
            "ConnRateLimit",
            "CLP",
            U32,
            limit(crate::runtime::GlobalRate::Conn),
        ),
        l(
            28,
            "MaxConnRate",
            "MMP",
            U32,
            p.figures
                .peaks
                .connection_rate
                .get()
                .max(conn_rate)
                .to_string(),
        ),
        l(29, "SessRate", "MRP", U32, sess_rate.to_string()),
        l(
            30,
            "SessRateLimit",
            "CLP",
            U32,
            limit(crate::runtime::GlobalRate::Sess),
        ),
        l(
            31,
            "MaxSessRate",
            "MRP",
            U32,
            p.figures
                .peaks
                .session_rate
                .get()
                .max(sess_rate)
                .to_string(),
        ),
        l(
            32,
            "SslRate",
            "MRP",
            U32,
            worker_rate(|c| &c.tls_rate).to_string(),
        ),
        l(
            33,
            "SslRateLimit",
            "CLP",
            U32,
            limit(crate::runtime::GlobalRate::Ssl),
        ),
        l(34, "MaxSslRate", "MMP", U32, zero.clone()),
        l(
            35,
            "SslFrontendKeyRate",
            "MGP",
            U32,
            worker_rate(|c| &c.tls_full_rate).to_string(),
        ),
        l(36, "SslFrontendMaxKeyRate", "MMP", U32, zero.clone()),
        l(
            37,
            "SslFrontendSessionReuse_pct",
            "MGP",
            U32,
            reuse_pct.to_string(),
        ),
        l(
            38,
            "SslBackendKeyRate",
            "MRP",
            U32,
            worker_rate(|c| &c.tls_backend_full_rate).to_string(),
        ),
        l(39, "SslBackendMaxKeyRate", "MMP", U32, zero.clone()),
        l(40, "SslCacheLookups", "MCP", U32, zero.clone()),
        l(41, "SslCacheMisses", "MCP", U32, zero.clone()),
        l(
            42,
            "CompressBpsIn",
            "MRP",
            U32,
            p.figures
                .compress_in
                .per_sec(crate::clock::clock_ms())
                .to_string(),
        ),
        l(
            43,
            "CompressBpsOut",
            "MRP",
            U32,
            p.figures
                .compress_out
                .per_sec(crate::clock::clock_ms())
                .to_string(),
        ),
        l(
            44,
            "CompressBpsRateLim",
            "CLP",
            U32,
            p.compress_limit.load(Ordering::Relaxed).to_string(),
        ),
        l(
            47,
            "Tasks",
            "MGP",
            U32,
            (active as usize + checks + 3 * p.threads.len()).to_string(),
        ),
        l(
            48,
            "Run_queue",
            "MGP",
            U32,
            sum(|t| t.load() as u64).to_string(),
        ),
        l(
            49,
            "Idle_pct",
            "MaP",
            U32,
            (100 - (busy / n.max(1)).min(100)).to_string(),
        ),
        l(50, "node", "COS", Str, p.config.global.node_name()),
        l(
            51,
            "description",
            "COS",
            Str,
            p.config.global.description.clone().unwrap_or_default(),
        ),
        l(
            52,
            "Stopping",
            "MGP",
            U32,
            u8::from(p.stopping.load(Ordering::Relaxed)).to_string(),
        ),
        l(
            53,
            "Jobs",
            "MGP",
            U32,
            (active + listeners as u64).to_string(),
        ),
        l(54, "Unstoppable Jobs", "MGP", U32, zero.clone()),
        l(55, "Listeners", "MGP", U32, listeners.to_string()),
        l(
            56,
            "ActivePeers",
            "MGP",
            U32,
            peers(&p.peer_sessions.active),
        ),
        l(
            57,
            "ConnectedPeers",
            "MGP",
            U32,
            peers(&p.peer_sessions.connected),
        ),
        l(
            58,
            "DroppedLogs",
            "MGP",
            U32,
            crate::log::DROPPED.load(Ordering::Relaxed).to_string(),
        ),
        l(59, "BusyPolling", "MGP", U32, zero.clone()),
        l(60, "FailedResolutions", "MGP", U32, zero.clone()),
        l(61, "TotalBytesOut", "MGP", U64, bytes_out.to_string()),
        l(62, "TotalSplicdedBytesOut", "MGP", U64, zero.clone()),
        l(
            63,
            "BytesOutRate",
            "MRP",
            U64,
            p.figures.bytes_out_rate.load(Ordering::Relaxed).to_string(),
        ),
        l(64, "DebugCommandsIssued", "MGP", U32, zero.clone()),
        l(65, "CumRecvLogs", "MCP", U32, zero.clone()),
        l(66, "Build info", "POS", Str, version.into()),
        l(67, "Memmax_bytes", "CLP", U32, zero.clone()),
        l(68, "PoolAlloc_bytes", "MGP", U64, pool_bytes.to_string()),
        l(69, "PoolUsed_bytes", "MGP", U64, pool_bytes.to_string()),
        l(70, "Start_time_sec", "MDP", U32, start.to_string()),
        l(71, "Tainted", "SGP", Str, "0".into()),
    ];
    // The description is printed only when set, as HAProxy prints it.
    all.retain(|l| !(l.pos == 51 && l.value.is_empty()));
    all
}

/// `0d 0h00m00s`.
pub fn uptime_text(s: u64) -> String {
    format!(
        "{}d {}h{:02}m{:02}s",
        s / 86400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

fn rlimit_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct it is given.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0 {
        r.rlim_cur
    } else {
        0
    }
}

/// Every field's name and value, in order.
pub fn values(p: &Process) -> Vec<(&'static str, String)> {
    lines(p).into_iter().map(|l| (l.name, l.value)).collect()
}

/// `show info`: `Name: value` lines.
pub fn text(p: &Process) -> String {
    let mut out = String::new();
    for l in lines(p) {
        let _ = writeln!(out, "{}: {}", l.name, l.value);
    }
    out
}

/// `show info typed`: `pos.Name.1:TAGS:type:value`.
pub fn typed(p: &Process) -> String {
    let mut out = String::new();
    for l in lines(p) {
        let _ = writeln!(
            out,
            "{}.{}.1:{}:{}:{}",
            l.pos,
            l.name,
            l.tags,
            l.ty.name(),
            l.value
        );
    }
    out
}

/// `show info json`.
pub fn json(p: &Process) -> String {
    let items: Vec<String> = lines(p)
        .into_iter()
        .map(|l| {
            let value = match l.ty {
                Ty::Str => quote(&l.value),
                _ => l.value.clone(),
            };
            format!(
                "{{\"field\":{{\"pos\":{},\"name\":{}}},\"processNum\":1,\"tags\":{},\"value\":{{\"type\":{},\"value\":{}}}}}",
                l.pos,
                quote(l.name),
                tags_json(l.tags),
                quote(l.ty.name()),
                value
            )
        })
        .collect();
    format!("[{}]\n", items.join(","))
}

/// `show pools` in HAProxy's layout: sluice pools one kind of object, the workers' I/O
/// buffers (`tune.bufsize` each); the free ones each worker keeps are its thread cache.
pub fn pools(p: &Process) -> String {
    let b = p.buffer_pool();
    let bytes = b.allocated_bytes();
    let cached_bytes = (b.cached * b.size) as u64;
    format!(
        "Dumping pools usage. Use SIGQUIT to flush them.\n  - Pool buffer ({} bytes) : {} allocated ({bytes} bytes), {} used (~{} by thread caches), needed_avg {}, 0 failures, 1 users, @{:p} [SHARED]\nTotal: 1 pools, {bytes} bytes allocated, {bytes} used (~{cached_bytes} by thread caches).\n",
        b.size,
        b.allocated(),
        b.allocated(),
        b.cached,
        b.in_use,
        std::sync::Arc::as_ptr(&p.threads[0].buffers),
    )
}
