//! Access logs: `log` targets, `option httplog` / `option httpslog` / `option tcplog`,
//! `log-format`.
//!
//! A worker never blocks on logging. Lines for stdout/stderr go through a bounded channel to a
//! writer thread (a full channel drops the line and counts it); syslog lines go out as UDP
//! datagrams from a non-blocking socket (a full socket buffer drops the line too).
//!
//! The httplog line is HAProxy's:
//! `%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %{+Q}r`
//! and the tcplog line `%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %ts %ac/%fc/%bc/%sc/%rc %sq/%bq`.

use std::fmt::Write as _;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use sluice_config::{Keyword, KwError, Scope};

pub use crate::conf::log::*;
use crate::conf::patterns::PatternBook;
use crate::conf::{one_arg, resolve, GlobalConf, ProxyConf};

const VARS: &[(&str, Var)] = &[
    ("ci", Var::ClientIp),
    ("cp", Var::ClientPort),
    ("fi", Var::FrontendIp),
    ("fp", Var::FrontendPort),
    ("t", Var::DateLocal),
    ("tr", Var::DateRequest),
    ("T", Var::DateGmt),
    ("Tl", Var::DateLocalZone),
    ("trg", Var::DateGmt),
    ("trl", Var::DateLocalZone),
    ("Ts", Var::Timestamp),
    ("ft", Var::FrontendTransport),
    ("f", Var::Frontend),
    ("b", Var::Backend),
    ("s", Var::Server),
    ("TR", Var::TimeRequest),
    ("Tw", Var::TimeQueue),
    ("Tc", Var::TimeConnect),
    ("Tr", Var::TimeResponse),
    ("Ta", Var::TimeActive),
    ("Tt", Var::TimeTotal),
    ("Td", Var::TimeData),
    ("Tu", Var::TimeUser),
    ("ST", Var::Status),
    ("B", Var::Bytes),
    ("U", Var::BytesUploaded),
    ("ts", Var::TermState),
    ("tsc", Var::TermStateCookies),
    ("ac", Var::ActConn),
    ("fc", Var::FeConn),
    ("bc", Var::BeConn),
    ("sc", Var::SrvConn),
    ("rc", Var::Retries),
    ("sq", Var::SrvQueue),
    ("bq", Var::BeQueue),
    ("r", Var::RequestLine),
    ("HM", Var::Method),
    ("HU", Var::Uri),
    ("HV", Var::Version),
    ("CC", Var::CookieReq),
    ("CS", Var::CookieRes),
    ("si", Var::ServerIp),
    ("sp", Var::ServerPort),
    ("bi", Var::BackendSrcIp),
    ("bp", Var::BackendSrcPort),
    ("HP", Var::Path),
    ("HPO", Var::PathOnly),
    ("HQ", Var::Query),
    ("ms", Var::DateMs),
    ("Th", Var::TimeHandshake),
    ("Ti", Var::TimeIdle),
    ("Tq", Var::TimeTq),
    ("sslc", Var::SslCipher),
    ("sslv", Var::SslVersion),
    ("lc", Var::LogCounter),
    ("hr", Var::ReqCaptures),
    ("hs", Var::ResCaptures),
    ("hrl", Var::ReqCapturesList),
    ("hsl", Var::ResCapturesList),
    ("ID", Var::UniqueId),
    ("H", Var::Hostname),
    ("pid", Var::Pid),
    ("rt", Var::RequestCounter),
];

/// HAProxy variables sluice does not fill yet (named as such, not as unknown).
const PENDING_VARS: &[&str] = &[];

/// Parses a `log-format` string into tokens: text, `%VAR`, `%[EXPR]` samples, each
/// optionally preceded by `%{+Q}` (quoted), `%{+X}` (hexadecimal) and `%{+E}` (escaped)
/// options (`+M` is refused as not supported yet), and `%%`.
pub fn parse_format(s: &str, book: &PatternBook) -> Result<Vec<Token>, String> {
    let mut out = Vec::new();
    let mut text = String::new();
    let b = s.as_bytes();
    let mut i = 0;
    // `%{+X}o` sets options for every variable after it.
    let mut global = VarOpts::default();
    while i < b.len() {
        if b[i] != b'%' {
            let ch = s[i..].chars().next().unwrap_or(' ');
            text.push(ch);
            i += ch.len_utf8();
            continue;
        }
        if b.get(i + 1) == Some(&b'%') {
            text.push('%');
            i += 2;
            continue;
        }
        let mut opts = global;
        let mut j = i + 1;
        if b.get(j) == Some(&b'{') {
            let end = s[j..].find('}').ok_or("unterminated %{...}")? + j;
            for o in s[j + 1..end].split(',') {
                match o {
                    "+Q" => opts.quote = true,
                    "-Q" => opts.quote = false,
                    "+X" => opts.hex = true,
                    "-X" => opts.hex = false,
                    "+E" => opts.escape = true,
                    "-E" => opts.escape = false,
                    "+M" | "-M" => {
                        return Err(format!("log-format option '{o}' is not supported yet"))
                    }
                    other => return Err(format!("unknown log-format option '{other}'")),
                }
            }
            j = end + 1;
        }
        if b.get(j) == Some(&b'[') {
            let close = s[j..].find(']').ok_or("missing ']' after %[")? + j;
            let expr =
                crate::conf::sample_parse::parse_expr(&s[j + 1..close], book).map_err(|e| e.0)?;
            if !text.is_empty() {
                out.push(Token::Text(std::mem::take(&mut text)));
            }
            out.push(Token::Sample(expr, opts));
            i = close + 1;
            continue;
        }
        let name_len = b[j..]
            .iter()
            .take_while(|c| c.is_ascii_alphanumeric())
            .count();
        let name = &s[j..j + name_len];
        if name == "o" {
            // It prints nothing, and neither does the separator after it.
            global = opts;
            i = j + 1 + usize::from(b.get(j + 1) == Some(&b' '));
            continue;
        }
        // The name is the whole run of letters and digits, as HAProxy reads it (`%trg` is
        // not `%tr` followed by "g").
        if PENDING_VARS.contains(&name) {
            return Err(format!(
                "log-format variable '%{name}' is not supported yet"
            ));
        }
        let Some((var_name, var)) = VARS.iter().find(|(n, _)| *n == name) else {
            return Err(format!("unknown log-format variable '%{name}'"));
        };
        if !text.is_empty() {
            out.push(Token::Text(std::mem::take(&mut text)));
        }
        out.push(Token::Var(*var, opts));
        i = j + var_name.len();
    }
    if !text.is_empty() {
        out.push(Token::Text(text));
    }
    Ok(out)
}

fn facility(name: &str) -> Option<u8> {
    const NAMES: [&str; 24] = [
        "kern", "user", "mail", "daemon", "auth", "syslog", "lpr", "news", "uucp", "cron", "auth2",
        "ftp", "ntp", "audit", "alert", "cron2", "local0", "local1", "local2", "local3", "local4",
        "local5", "local6", "local7",
    ];
    NAMES.iter().position(|n| *n == name).map(|p| p as u8)
}

/// Parses `TARGET [len N] [format F] [sample RANGES:SIZE] FACILITY [LEVEL [MINLEVEL]]`.
fn parse_target(args: &[String]) -> Result<LogTarget, KwError> {
    let Some(t) = args.first() else {
        return Err(KwError::Missing(
            "a target (stdout, stderr, /PATH, unix@PATH, ADDR:PORT) or 'global'",
        ));
    };
    let target = match t.as_str() {
        "stdout" => Target::Stdout,
        "stderr" => Target::Stderr,
        path if path.starts_with('/') => Target::Unix(path.to_string()),
        other if other.starts_with("unix@") => Target::Unix(other["unix@".len()..].to_string()),
        other => {
            let a = other
                .strip_prefix("udp@")
                .or_else(|| other.strip_prefix("udp4@"))
                .unwrap_or(other);
            let addr = if a.contains(':') {
                a.to_string()
            } else {
                format!("{a}:514")
            };
            Target::Udp(
                resolve(&addr)
                    .map_err(|e| KwError::bad(1, other, format!("{e} (stdout, stderr, a unix socket path or a UDP ADDR:PORT; rings are not supported yet)")))?,
            )
        }
    };
    let mut lt = LogTarget {
        target,
        framing: Framing::Rfc3164,
        facility: 16,
        max_len: 1024,
        max_level: Severity::Debug as u8,
        min_level: Severity::Emerg as u8,
        sample: None,
    };
    let mut i = 1;
    let mut facility_seen = false;
    let mut levels = 0;
    while i < args.len() {
        let a = args[i].as_str();
        match a {
            "sample" if !facility_seen => {
                let v = args
                    .get(i + 1)
                    .ok_or(KwError::Missing("RANGES:SIZE after sample"))?;
                lt.sample = Some(parse_sample(v).map_err(|e| KwError::bad(i + 2, v, e))?);
                i += 2;
            }
            "len" | "format" => {
                let v = args
                    .get(i + 1)
                    .ok_or(KwError::Missing("a value after len/format"))?;
                if a == "len" {
                    lt.max_len = v
                        .parse()
                        .ok()
                        .filter(|n| (64..=65535).contains(n))
                        .ok_or_else(|| {
                            KwError::bad(i + 2, v, "expects a length from 64 to 65535")
                        })?;
                } else {
                    lt.framing = match v.as_str() {
                        "raw" => Framing::Raw,
                        "short" => Framing::Short,
                        "rfc3164" => Framing::Rfc3164,
                        "rfc5424" => Framing::Rfc5424,
                        _ => {
                            return Err(KwError::bad(
                                i + 2,
                                v,
                                "expects raw, short, rfc3164 or rfc5424",
                            ))
                        }
                    };
                }
                i += 2;
            }
            _ if !facility_seen => {
                lt.facility = facility(a).ok_or_else(|| {
                    KwError::bad(
                        i + 1,
                        a,
                        "unknown syslog facility (local0..local7, daemon, user, ...)",
                    )
                })?;
                facility_seen = true;
                i += 1;
            }
            _ if levels < 2 && severity_of(a).is_some() => {
                let level = severity_of(a).unwrap_or_default();
                if levels == 0 {
                    lt.max_level = level;
                } else {
                    lt.min_level = level;
                }
                levels += 1;
                i += 1;
            }
            _ => {
                return Err(KwError::bad(
                    i + 1,
                    a,
                    "unexpected (expects len, format, a facility and levels)",
                ))
            }
        }
    }
    if !facility_seen {
        return Err(KwError::Missing("a syslog facility (e.g. local0)"));
    }
    Ok(lt)
}

/// `RANGES:SIZE` of `log ... sample`: comma-separated `N` or `LOW-HIGH` ranges (from 1,
/// not overlapping) within a window of SIZE lines.
fn parse_sample(v: &str) -> Result<LogSample, String> {
    let (ranges, size) = v
        .split_once(':')
        .ok_or("expects RANGES:SIZE (e.g. 1-2,5:10)")?;
    let number = |s: &str| s.parse::<u32>().ok().filter(|&n| n > 0);
    let mut list: Vec<(u32, u32)> = Vec::new();
    for r in ranges.split(',') {
        let (lo, hi) = r.split_once('-').unwrap_or((r, r));
        let (Some(lo), Some(hi)) = (number(lo), number(hi)) else {
            return Err(format!("'{r}' is not a range of line numbers from 1"));
        };
        if lo > hi {
            return Err(format!("range '{r}' runs backwards"));
        }
        if list.iter().any(|&(l, h)| lo <= h && l <= hi) {
            return Err(format!("range '{r}' overlaps another"));
        }
        list.push((lo, hi));
    }
    let size = number(size).ok_or_else(|| format!("wrong sample size '{size}'"))?;
    let highest = list.iter().map(|&(_, h)| h).max().unwrap_or(0);
    if size < highest {
        return Err(format!(
            "sample size {size} should be at least {highest}, the highest line of the ranges"
        ));
    }
    list.sort_unstable();
    Ok(LogSample { ranges: list, size })
}

pub const GLOBAL_SETTINGS_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "tune.http.cookielen",
        scope: Scope::GLOBAL,
        help: "tune.http.cookielen N: the longest cookie 'capture cookie' keeps (default 63; longer captures are cut to it)",
        parse: |g, a| {
            let v = one_arg(a, "a length")?;
            let n = v
                .parse::<usize>()
                .ok()
                .ok_or_else(|| KwError::bad(1, v, "expects a number"))?;
            g.log_settings.cookie_len = Some(n);
            Ok(())
        },
    },
    Keyword {
        name: "tune.http.logurilen",
        scope: Scope::GLOBAL,
        help:
            "tune.http.logurilen N: the request line in log lines is cut to N bytes (default 1024)",
        parse: |g, a| {
            let v = one_arg(a, "a length")?;
            let n = v
                .parse::<usize>()
                .ok()
                .filter(|&n| n >= 1)
                .ok_or_else(|| KwError::bad(1, v, "expects a positive number"))?;
            g.log_settings.uri_len = Some(n);
            Ok(())
        },
    },
    Keyword {
        name: "log-tag",
        scope: Scope::GLOBAL,
        help: "log-tag TAG: the syslog tag of log lines (default sluice)",
        parse: |g, a| {
            g.log_settings.tag = Some(one_arg(a, "a tag")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "log-send-hostname",
        scope: Scope::GLOBAL,
        help: "log-send-hostname [NAME]: put the host name (or NAME) in syslog headers",
        parse: |g, a| {
            g.log_settings.hostname = Some(match a {
                [] => String::new(),
                [n] => n.clone(),
                [_, extra, ..] => return Err(KwError::Extra(extra.clone())),
            });
            Ok(())
        },
    },
];

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[Keyword {
    name: "log",
    scope: Scope::GLOBAL,
    help: "log stdout|stderr|ADDR:PORT [len N] [format raw|short|rfc3164|rfc5424] [sample RANGES:SIZE] FACILITY [LEVEL [MINLEVEL]]: where logs go",
    parse: |g, a| parse_target(a).map(|t| g.log.push(t)),
}];

/// A keyword's one argument, a log-format string, parsed with the proxy's patterns.
fn format_arg(c: &ProxyConf, a: &[String]) -> Result<Vec<Token>, KwError> {
    let v = one_arg(a, "a format string (quote it)")?;
    parse_format(v, &c.rules.book).map_err(|e| KwError::bad(1, v, e))
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "log",
        scope: Scope::PROXY,
        help: "log global | log TARGET [len N] [format F] FACILITY: this proxy's log targets",
        parse: |c, a| {
            if a.first().map(String::as_str) == Some("global") {
                if let Some(x) = a.get(1) {
                    return Err(KwError::Extra(x.clone()));
                }
                c.log.use_global = true;
                return Ok(());
            }
            parse_target(a).map(|t| c.log.targets.push(t))
        },
    },
    Keyword {
        name: "no log",
        scope: Scope::PROXY,
        help: "no log: this proxy logs nothing (cancels inherited log lines)",
        parse: |c, _| {
            c.log.targets.clear();
            c.log.use_global = false;
            Ok(())
        },
    },
    Keyword {
        name: "option httplog",
        scope: Scope::PROXY,
        help: "option httplog: one HAProxy-format line per HTTP request",
        parse: |c, a| match a.first() {
            Some(x) => Err(KwError::bad(1, x, "'clf' and other variants are not supported yet")),
            None => {
                c.log.format = Some(Format::Http);
                Ok(())
            }
        },
    },
    Keyword {
        name: "option httpslog",
        scope: Scope::PROXY,
        help: "option httpslog: the httplog line followed by the TLS session's errors, resumption, SNI, version and suite",
        parse: |c, a| {
            sluice_config::no_args(a)?;
            c.log.format = Some(Format::Custom(
                parse_format(HTTPSLOG, &PatternBook::default()).expect("built-in format"),
            ));
            Ok(())
        },
    },
    Keyword {
        name: "option tcplog",
        scope: Scope::PROXY,
        help: "option tcplog: one HAProxy-format line per TCP connection",
        parse: |c, _| {
            c.log.format = Some(Format::Tcp);
            Ok(())
        },
    },
    Keyword {
        name: "log-format",
        scope: Scope::PROXY,
        help: "log-format STRING: a custom line with %-variables (%ci %cp %tr %ft %b %s %TR %Tw %Tc %Tr %Ta %ST %B %tsc %r ...)",
        parse: |c, a| {
            c.log.format = Some(Format::Custom(format_arg(c, a)?));
            Ok(())
        },
    },
    Keyword {
        name: "error-log-format",
        scope: Scope::FE,
        help: "error-log-format STRING: the line logged for a connection that fails before its session starts (its PROXY header, its TLS handshake), with %-variables and %[...] samples of the connection",
        parse: |c, a| {
            c.log.error_format = Some(format_arg(c, a)?);
            Ok(())
        },
    },
    Keyword {
        name: "log-format-sd",
        scope: Scope::FE,
        help: "log-format-sd STRING: the RFC 5424 structured data of the lines sent to 'format rfc5424' targets, with %-variables (sample fetches %[...] are not supported there yet)",
        parse: |c, a| {
            let tokens = format_arg(c, a)?;
            if tokens.iter().any(|t| matches!(t, Token::Sample(..))) {
                return Err(KwError::NotYet("sample fetches in log-format-sd"));
            }
            c.log.format_sd = Some(tokens);
            Ok(())
        },
    },
    Keyword {
        name: "declare capture",
        scope: Scope::FRONTEND,
        help: "declare capture request|response len N: a capture slot for rules' 'capture ... id N'",
        parse: |c, a| {
            let [side, l, n] = a else {
                return Err(KwError::Missing("request|response len N"));
            };
            if l != "len" {
                return Err(KwError::bad(2, l, "expects 'len N'"));
            }
            let len: usize = n
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| KwError::bad(3, n, "expects a positive length"))?;
            // A slot without a header name: only rules fill it.
            let entry = (String::new(), len);
            match side.as_str() {
                "request" => c.log.captures_req.push(entry),
                "response" => c.log.captures_res.push(entry),
                other => return Err(KwError::bad(1, other, "expects request or response")),
            }
            Ok(())
        },
    },
    Keyword {
        name: "capture",
        scope: Scope::FE,
        help: "capture request|response header NAME len N | capture cookie NAME len N: keep a header's value (%hr, %hs) or a cookie (%CC, %CS) for the log",
        parse: |c, a| {
            let (side, name, len) = match a {
                [side, kw, name, l, n] if kw == "header" && l == "len" => (side, name, n),
                [kw, name, l, n] if kw == "cookie" && l == "len" => {
                    let len: usize = n
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| KwError::bad(4, n, "expects a positive length"))?;
                    c.log.capture_cookie = Some((name.clone(), len));
                    return Ok(());
                }
                _ => return Err(KwError::Missing("request|response header NAME len N")),
            };
            let len: usize = len
                .parse()
                .ok()
                .filter(|&n| n > 0)
                .ok_or_else(|| KwError::bad(5, len, "expects a positive length"))?;
            let entry = (name.to_ascii_lowercase(), len);
            match side.as_str() {
                "request" => c.log.captures_req.push(entry),
                "response" => c.log.captures_res.push(entry),
                other => return Err(KwError::bad(1, other, "expects request or response")),
            }
            Ok(())
        },
    },
    Keyword {
        name: "unique-id-format",
        scope: Scope::FE,
        help: "unique-id-format FORMAT: a unique id for each request (log-format syntax; %ID, unique-id)",
        parse: |c, a| {
            c.log.unique_id = Some(format_arg(c, a)?);
            Ok(())
        },
    },
    Keyword {
        name: "log-tag",
        scope: Scope::PROXY,
        help: "log-tag TAG: the syslog tag of this proxy's log lines",
        parse: |c, a| {
            c.log.tag = Some(one_arg(a, "a tag")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "unique-id-header",
        scope: Scope::FE,
        help: "unique-id-header NAME: send the unique id to the server in this header",
        parse: |c, a| {
            c.log.unique_id_header = Some(one_arg(a, "a header name")?.to_string());
            Ok(())
        },
    },
];

/// `option dontlognull` (and `no option dontlognull`).
pub const OPTION_KEYWORDS: &[Keyword<ProxyConf>] = sluice_config::flag_keywords![
    "option dontlognull", Scope::PROXY, "do not log connections on which the client sent nothing",
        |c: &mut ProxyConf, on| c.log.dont_log_null = on;
    "option http-ignore-probes", Scope::FE, "a connection closed or timed out before sending anything is not logged, counted or answered 408 (browsers' pre-connects)",
        |c: &mut ProxyConf, on| c.log.ignore_probes = on;
    "option logasap", Scope::PROXY, "log when the response head is sent, before its body ('+' on %Ta and %B)",
        |c: &mut ProxyConf, on| c.log.asap = on;
    "option dontlog-normal", Scope::PROXY, "log only transactions that ended badly (5xx or a termination code)",
        |c: &mut ProxyConf, on| c.log.dont_log_normal = on;
    "option log-separate-errors", Scope::PROXY, "log transactions that ended badly at 'err' rather than 'info'",
        |c: &mut ProxyConf, on| c.log.separate_errors = on;
];

/// Lines dropped because a target could not take them at once.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);

/// Sends lines to their targets without blocking the caller.
#[derive(Debug)]
pub struct Logger {
    target: LogTarget,
    sink: Sink,
    /// Lines offered to this target so far (`sample` numbers them).
    offered: AtomicU64,
    /// The syslog tag (`log-tag`) and host name (`log-send-hostname`) of its lines.
    tag: String,
    hostname: Option<String>,
}

#[derive(Debug)]
enum Sink {
    Stream(SyncSender<Vec<u8>>),
    Udp(UdpSocket),
    Unix(UnixSink),
}

/// A unix datagram target. It is connected when opened (before any chroot, so the path
/// still resolves); when the syslog daemon is not there yet, or restarts, the connection is
/// tried again at most once a second, and lines are dropped meanwhile.
#[derive(Debug)]
struct UnixSink {
    path: String,
    sock: UnixDatagram,
    connected: AtomicBool,
    /// When a connection was last tried (`clock::clock_ms`).
    tried: AtomicU64,
}

impl UnixSink {
    fn open(path: &str) -> std::io::Result<UnixSink> {
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        let connected = match sock.connect(path) {
            Ok(()) => true,
            Err(e) => {
                say!("sluice: log target {path}: {e}; lines are dropped until it accepts them");
                false
            }
        };
        Ok(UnixSink {
            path: path.to_string(),
            sock,
            connected: AtomicBool::new(connected),
            tried: AtomicU64::new(crate::clock::clock_ms()),
        })
    }

    fn send(&self, line: &[u8]) -> bool {
        if !self.connected.load(Ordering::Relaxed) {
            let now = crate::clock::clock_ms();
            let last = self.tried.load(Ordering::Relaxed);
            if now.saturating_sub(last) < 1000
                || self
                    .tried
                    .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                    .is_err()
            {
                return false;
            }
            if self.sock.connect(&self.path).is_err() {
                return false;
            }
            self.connected.store(true, Ordering::Relaxed);
        }
        match self.sock.send(line) {
            Ok(_) => true,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => false,
            Err(_) => {
                // The daemon went away (ECONNREFUSED, ENOENT): reconnect later.
                self.connected.store(false, Ordering::Relaxed);
                false
            }
        }
    }
}

fn stream_writer(stderr: bool) -> SyncSender<Vec<u8>> {
    static OUT: OnceLock<SyncSender<Vec<u8>>> = OnceLock::new();
    static ERR: OnceLock<SyncSender<Vec<u8>>> = OnceLock::new();
    let cell = if stderr { &ERR } else { &OUT };
    cell.get_or_init(|| {
        let (tx, rx) = sync_channel::<Vec<u8>>(8192);
        std::thread::Builder::new()
            .name("sluice-log".into())
            .spawn(move || {
                use std::io::Write;
                for line in rx {
                    let _ = if stderr {
                        std::io::stderr().lock().write_all(&line)
                    } else {
                        std::io::stdout().lock().write_all(&line)
                    };
                }
            })
            .expect("log writer thread");
        tx
    })
    .clone()
}

impl Logger {
    pub fn open(target: &LogTarget) -> std::io::Result<Logger> {
        let sink = match &target.target {
            Target::Stdout => Sink::Stream(stream_writer(false)),
            Target::Stderr => Sink::Stream(stream_writer(true)),
            Target::Udp(addr) => {
                let bind: SocketAddr = if addr.is_ipv6() {
                    "[::]:0"
                } else {
                    "0.0.0.0:0"
                }
                .parse()
                .expect("literal");
                let s = UdpSocket::bind(bind)?;
                s.set_nonblocking(true)?;
                s.connect(addr)?;
                Sink::Udp(s)
            }
            Target::Unix(path) => Sink::Unix(UnixSink::open(path)?),
        };
        Ok(Logger {
            target: target.clone(),
            sink,
            offered: AtomicU64::new(0),
            tag: "sluice".into(),
            hostname: None,
        })
    }

    /// Frames `msg` (info severity) and sends it, or drops it if the target is busy.
    pub fn send(&self, msg: &str) {
        self.send_at(Severity::Info, msg);
    }

    /// Frames `msg` with a severity and sends it, or drops it if the target is busy.
    pub fn send_at(&self, severity: Severity, msg: &str) {
        self.send_sd(severity, None, msg);
    }

    /// [`Logger::send_at`] with the structured data an RFC 5424 line carries
    /// (`log-format-sd`; `None`: `-`).
    pub fn send_sd(&self, severity: Severity, sd: Option<&str>, msg: &str) {
        let t = &self.target;
        if severity as u8 > t.max_level {
            return;
        }
        if let Some(sample) = &t.sample {
            if !sample.keeps(self.offered.fetch_add(1, Ordering::Relaxed)) {
                return;
            }
        }
        let severity = Severity::from_number((severity as u8).max(t.min_level));
        let head = (severity, self.tag.as_str(), self.hostname.as_deref(), sd);
        let mut line = frame(&self.target, head, msg);
        line.truncate(self.target.max_len);
        let ok = match &self.sink {
            Sink::Stream(tx) => {
                line.push(b'\n');
                tx.try_send(line).is_ok()
            }
            Sink::Udp(s) => s.send(&line).is_ok(),
            Sink::Unix(u) => u.send(&line),
        };
        if !ok {
            DROPPED.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Opens the loggers of a proxy (the global ones with `log global`, then its own lines,
/// as HAProxy adds them up), with the tag and host name their lines carry.
pub fn open_all(conf: &LogConf, global: &GlobalConf) -> std::io::Result<Vec<Arc<Logger>>> {
    let inherited = if conf.use_global {
        &global.log[..]
    } else {
        &[]
    };
    let targets = inherited.iter().chain(&conf.targets);
    let g = &global.log_settings;
    let tag = conf.tag.as_ref().or(g.tag.as_ref()).cloned();
    let hostname = g.hostname.as_ref().map(|h| {
        if h.is_empty() {
            crate::conf::hostname()
        } else {
            h.clone()
        }
    });
    targets
        .map(|t| {
            Logger::open(t).map(|mut l| {
                if let Some(tag) = &tag {
                    l.tag = tag.clone();
                }
                l.hostname = hostname.clone();
                Arc::new(l)
            })
        })
        .collect()
}

/// Syslog severities (RFC 5424).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Emerg = 0,
    Alert = 1,
    Crit = 2,
    Err = 3,
    Warning = 4,
    Notice = 5,
    Info = 6,
    Debug = 7,
}

/// A `capture cookie ... len N` longer than `tune.http.cookielen` (63 by default) is cut
/// to it, with HAProxy's warning.
pub(crate) fn clamp_cookie_capture(
    (kind, name): (sluice_config::SectionKind, &str),
    c: &mut crate::conf::ProxyConf,
    max: usize,
    warnings: &mut Vec<String>,
) {
    if let Some((_, len)) = c.log.capture_cookie.as_mut() {
        if *len > max {
            warnings.push(format!(
                "truncating capture length to {max} bytes for {} '{name}'.",
                kind.name()
            ));
            *len = max;
        }
    }
}

/// The severity of a level name (`set-log-level`, log targets' levels), as its number.
pub fn severity_of(name: &str) -> Option<u8> {
    let all = [
        "emerg", "alert", "crit", "err", "warning", "notice", "info", "debug",
    ];
    all.iter().position(|n| *n == name).map(|i| i as u8)
}

impl Severity {
    fn from_number(n: u8) -> Severity {
        use Severity::*;
        [Emerg, Alert, Crit, Err, Warning, Notice, Info, Debug][usize::from(n.min(7))]
    }
}

/// A line as its target frames it; `head`: its severity, tag, host name and (RFC 5424)
/// structured data.
fn frame(
    t: &LogTarget,
    (severity, tag, host, sd): (Severity, &str, Option<&str>, Option<&str>),
    msg: &str,
) -> Vec<u8> {
    let pri = u32::from(t.facility) * 8 + severity as u32;
    let pid = pid();
    match t.framing {
        Framing::Raw => msg.as_bytes().to_vec(),
        Framing::Short => format!("<{pri}>{msg}").into_bytes(),
        Framing::Rfc3164 => {
            let (_, mon, day, h, m, s, _) = civil(SystemTime::now());
            let host = host.map(|h| format!("{h} ")).unwrap_or_default();
            format!(
                "<{pri}>{} {day:>2} {h:02}:{m:02}:{s:02} {host}{tag}[{pid}]: {msg}",
                MONTHS[mon as usize - 1]
            )
            .into_bytes()
        }
        Framing::Rfc5424 => {
            // Microseconds and a numeric offset, as HAProxy writes the time (in UTC here).
            let now = SystemTime::now();
            let (y, mon, day, h, m, s, _) = civil(now);
            let us = now
                .duration_since(SystemTime::UNIX_EPOCH)
                .map_or(0, |d| d.subsec_micros());
            let host = host.unwrap_or("-");
            let sd = sd.filter(|sd| !sd.is_empty()).unwrap_or("-");
            format!("<{pri}>1 {y:04}-{mon:02}-{day:02}T{h:02}:{m:02}:{s:02}.{us:06}+00:00 {host} {tag} {pid} - {sd} {msg}").into_bytes()
        }
    }
}

const MONTHS: [&str; 12] = [
    "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
];

/// UTC calendar fields of a time: (year, month, day, hour, minute, second, millisecond).
pub fn civil(t: SystemTime) -> (i64, u32, u32, u32, u32, u32, u32) {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86400), secs.rem_euclid(86400));
    // Days to civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        month,
        day,
        (rem / 3600) as u32,
        (rem % 3600 / 60) as u32,
        (rem % 60) as u32,
        d.subsec_millis(),
    )
}

/// `ltime`/`utime` and the log dates: a date (seconds since the epoch) as text, through the
/// C library's `strftime`, as HAProxy formats it.
///
/// Formats `secs` with `format` in local time (`local`) or UTC; `None` when the format
/// gives nothing or cannot be passed to C.
pub fn strftime(secs: i64, format: &str, local: bool) -> Option<String> {
    let c_format = std::ffi::CString::new(format).ok()?;
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value for the C library to overwrite.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; the _r variants touch no shared state.
    let ok = unsafe {
        if local {
            !libc::localtime_r(&t, &mut tm).is_null()
        } else {
            !libc::gmtime_r(&t, &mut tm).is_null()
        }
    };
    if !ok {
        return None;
    }
    let mut buf = vec![0u8; 256];
    // SAFETY: the buffer is writable for its length; strftime writes at most that much and
    // returns how much it wrote (0 when it did not fit).
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c_format.as_ptr(), &tm) };
    if n == 0 {
        return None;
    }
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

/// `%T` / `%Tl`: `10/Oct/2000:13:55:36 +0000`, in UTC or in local time with its offset.
fn date_zone(t: SystemTime, local: bool) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let format = if local {
        "%d/%b/%Y:%H:%M:%S %z"
    } else {
        "%d/%b/%Y:%H:%M:%S +0000"
    };
    strftime(secs, format, local).unwrap_or_else(|| "-".into())
}

/// HAProxy's `%tr`/`%t` date: `22/Nov/2026:06:40:00.123` (UTC).
pub fn log_date(t: SystemTime) -> String {
    let (y, mon, d, h, m, s, ms) = civil(t);
    format!(
        "{d:02}/{}/{y}:{h:02}:{m:02}:{s:02}.{ms:03}",
        MONTHS[mon as usize - 1]
    )
}

/// A log line's client: its address, or, for a client of a unix socket, which has none,
/// the id of the listener that accepted it (`%ci` shows `unix` and `%cp` that id, as
/// HAProxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Client {
    Addr(SocketAddr),
    Unix { listener: usize },
}

impl Client {
    /// The client of connection `conn`, known to its stream as `peer`, accepted by the
    /// frontend's listener of index `listener`.
    pub fn of(conn: &crate::transport::Conn, peer: SocketAddr, listener: usize) -> Client {
        match conn.client_addr(peer) {
            Some(a) => Client::Addr(a),
            None => Client::Unix {
                listener: listener + 1,
            },
        }
    }
}

/// Everything a log line can say about one request (or TCP connection). Times are in
/// milliseconds, -1 when the step did not happen.
#[derive(Debug, Clone)]
pub struct Record<'a> {
    pub client: Client,
    pub date: SystemTime,
    pub frontend: &'a str,
    pub backend: &'a str,
    pub server: &'a str,
    pub t_request: i64,
    pub t_queue: i64,
    pub t_connect: i64,
    pub t_response: i64,
    pub t_active: i64,
    pub status: i64,
    pub bytes: u64,
    /// Two-letter termination state (`--` when normal).
    pub term: [u8; 2],
    pub act_conn: usize,
    pub fe_conn: usize,
    pub be_conn: usize,
    pub srv_conn: usize,
    pub retries: u32,
    pub srv_queue: usize,
    pub be_queue: usize,
    pub method: String,
    pub uri: String,
    pub version: String,
    /// The address the client connected to (`%fi`, `%fp`), when known.
    pub dst: Option<SocketAddr>,
    /// Bytes received from the client (`%U`).
    pub bytes_in: u64,
    /// Captured request and response headers, in `capture` order.
    pub captures_req: &'a [Option<String>],
    pub captures_res: &'a [Option<String>],
    pub unique_id: Option<&'a str>,
    /// The rendered `%[...]` samples of the format, in order.
    pub samples: &'a [String],
    /// The request's number on its worker (`%rt`).
    pub request_counter: u64,
    /// `capture cookie`: what the request and the response carried.
    pub cookie_req: Option<&'a str>,
    pub cookie_res: Option<&'a str>,
    /// The server's address, and the proxy's end of the server connection (when the
    /// format asks for it).
    pub server_addr: Option<SocketAddr>,
    pub backend_src: Option<SocketAddr>,
    /// `%Ti`: milliseconds the connection waited idle before the request's first byte.
    pub t_idle: i64,
    /// `option logasap`: the line goes out before the transfer ends (`%Ta` and `%B` get a
    /// `+`).
    pub asap: bool,
    /// The persistence cookie's letters of `%tsc` (`--` without cookie persistence).
    pub cookie_flags: [u8; 2],
    /// `%lc`: the frontend's count of lines logged, this one included.
    pub log_counter: u64,
    /// `%sslc`, `%sslv`: the client connection's TLS cipher and version.
    pub tls: Option<(&'static str, &'static str)>,
}

impl<'a> Record<'a> {
    /// A record with nothing known yet but the client, the date and the frontend (the base
    /// of the others, and what a `unique-id-format` sees).
    pub fn blank(client: Client, date: SystemTime, frontend: &'a str) -> Record<'a> {
        Record {
            client,
            date,
            frontend,
            backend: frontend,
            server: "<NOSRV>",
            t_request: -1,
            t_queue: -1,
            t_connect: -1,
            t_response: -1,
            t_active: -1,
            status: -1,
            bytes: 0,
            term: *b"--",
            act_conn: 0,
            fe_conn: 0,
            be_conn: 0,
            srv_conn: 0,
            retries: 0,
            srv_queue: 0,
            be_queue: 0,
            method: String::new(),
            uri: String::new(),
            version: String::new(),
            dst: None,
            bytes_in: 0,
            captures_req: &[],
            captures_res: &[],
            unique_id: None,
            samples: &[],
            request_counter: 0,
            cookie_req: None,
            cookie_res: None,
            server_addr: None,
            backend_src: None,
            t_idle: -1,
            asap: false,
            cookie_flags: *b"--",
            log_counter: 0,
            tls: None,
        }
    }

    fn term(&self) -> &str {
        std::str::from_utf8(&self.term).unwrap_or("--")
    }

    /// `+` before totals that are not final yet (`option logasap`).
    fn plus(&self) -> &'static str {
        if self.asap {
            "+"
        } else {
            ""
        }
    }

    fn var(&self, out: &mut String, v: Var) {
        let opt =
            |out: &mut String, v: Option<String>| write!(out, "{}", v.as_deref().unwrap_or("-"));
        let captures = |out: &mut String, c: &[Option<String>], list: bool| {
            let values: Vec<&str> = c.iter().map(|v| v.as_deref().unwrap_or("")).collect();
            if list {
                write!(out, "{}", values.join(" "))
            } else if c.is_empty() {
                Ok(())
            } else {
                write!(out, "{{{}}}", values.join("|"))
            }
        };
        let _ = match v {
            Var::ClientIp => match self.client {
                Client::Addr(a) => write!(out, "{}", a.ip()),
                Client::Unix { .. } => write!(out, "unix"),
            },
            Var::ClientPort => match self.client {
                Client::Addr(a) => write!(out, "{}", a.port()),
                Client::Unix { listener } => write!(out, "{listener}"),
            },
            Var::FrontendIp => match (self.dst, self.client) {
                (Some(d), _) => write!(out, "{}", d.ip()),
                (None, Client::Unix { .. }) => write!(out, "unix"),
                (None, Client::Addr(_)) => write!(out, "-"),
            },
            Var::FrontendPort => match (self.dst, self.client) {
                (Some(d), _) => write!(out, "{}", d.port()),
                (None, Client::Unix { listener }) => write!(out, "{listener}"),
                (None, Client::Addr(_)) => write!(out, "-"),
            },
            Var::DateLocal | Var::DateRequest => write!(out, "{}", log_date(self.date)),
            Var::DateGmt => write!(out, "{}", date_zone(self.date, false)),
            Var::DateLocalZone => write!(out, "{}", date_zone(self.date, true)),
            Var::Timestamp => write!(
                out,
                "{}",
                self.date
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
            ),
            Var::Frontend => write!(out, "{}", self.frontend),
            Var::FrontendTransport => {
                let tilde = if self.tls.is_some() { "~" } else { "" };
                write!(out, "{}{tilde}", self.frontend)
            }
            Var::Backend => write!(out, "{}", self.backend),
            Var::Server => write!(out, "{}", self.server),
            Var::TimeRequest => write!(out, "{}", self.t_request),
            Var::TimeQueue => write!(out, "{}", self.t_queue),
            Var::TimeConnect => write!(out, "{}", self.t_connect),
            Var::TimeResponse => write!(out, "{}", self.t_response),
            // Without TLS handshakes, the time as seen from the client (Tt - Ti) is Ta.
            Var::TimeActive | Var::TimeTotal | Var::TimeUser => {
                write!(out, "{}{}", self.plus(), self.t_active)
            }
            // Td = Tt - (Tq + Tw + Tc + Tr): the transfer of the response body.
            Var::TimeData => {
                let steps = [
                    self.t_request,
                    self.t_queue,
                    self.t_connect,
                    self.t_response,
                ];
                let td = if self.t_active < 0 || steps.iter().any(|t| *t < 0) {
                    -1
                } else {
                    (self.t_active - steps.iter().sum::<i64>()).max(0)
                };
                write!(out, "{td}")
            }
            Var::Status => write!(out, "{}", self.status),
            Var::Bytes => write!(out, "{}{}", self.plus(), self.bytes),
            Var::BytesUploaded => write!(out, "{}", self.bytes_in),
            Var::TermState => write!(out, "{}", self.term()),
            Var::TermStateCookies => write!(
                out,
                "{}{}{}",
                self.term(),
                self.cookie_flags[0] as char,
                self.cookie_flags[1] as char
            ),
            Var::ActConn => write!(out, "{}", self.act_conn),
            Var::FeConn => write!(out, "{}", self.fe_conn),
            Var::BeConn => write!(out, "{}", self.be_conn),
            Var::SrvConn => write!(out, "{}", self.srv_conn),
            Var::Retries => write!(out, "{}", self.retries),
            Var::SrvQueue => write!(out, "{}", self.srv_queue),
            Var::BeQueue => write!(out, "{}", self.be_queue),
            Var::RequestLine if self.uri.is_empty() && self.version.is_empty() => {
                write!(out, "{}", self.method)
            }
            // A line cut within its target (`tune.http.logurilen`) has no version.
            Var::RequestLine if self.version.is_empty() => {
                write!(out, "{} {}", self.method, self.uri)
            }
            Var::RequestLine => write!(out, "{} {} {}", self.method, self.uri, self.version),
            Var::Method => write!(out, "{}", self.method),
            Var::Uri => write!(out, "{}", self.uri),
            // (As HAProxy reads a line cut within its target: no version is HTTP/0.9.)
            Var::Version if self.version.is_empty() && !self.uri.is_empty() => {
                write!(out, "HTTP/0.9")
            }
            Var::Version => write!(out, "{}", self.version),
            Var::CookieReq => write!(out, "{}", self.cookie_req.unwrap_or("-")),
            Var::CookieRes => write!(out, "{}", self.cookie_res.unwrap_or("-")),
            Var::ServerIp => opt(out, self.server_addr.map(|a| a.ip().to_string())),
            Var::ServerPort => opt(out, self.server_addr.map(|a| a.port().to_string())),
            Var::BackendSrcIp => opt(out, self.backend_src.map(|a| a.ip().to_string())),
            Var::BackendSrcPort => opt(out, self.backend_src.map(|a| a.port().to_string())),
            Var::Path => {
                let end = self.uri.find('?').unwrap_or(self.uri.len());
                write!(out, "{}", &self.uri[..end])
            }
            Var::PathOnly => {
                let end = self.uri.find('?').unwrap_or(self.uri.len());
                let uri = &self.uri[..end];
                // An absolute-form target loses its scheme and authority.
                let path = match uri.split_once("://") {
                    Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
                    None => uri,
                };
                write!(out, "{path}")
            }
            Var::Query => {
                let at = self.uri.find('?').unwrap_or(self.uri.len());
                write!(out, "{}", &self.uri[at..])
            }
            Var::DateMs => write!(
                out,
                "{:03}",
                self.date
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.subsec_millis())
            ),
            // No handshake without TLS.
            Var::TimeHandshake => write!(out, "0"),
            Var::TimeIdle => write!(out, "{}", self.t_idle),
            Var::TimeTq => write!(
                out,
                "{}",
                if self.t_request < 0 {
                    -1
                } else {
                    self.t_request + self.t_idle.max(0)
                }
            ),
            Var::SslCipher => write!(out, "{}", self.tls.map_or("-", |t| t.0)),
            Var::SslVersion => write!(out, "{}", self.tls.map_or("-", |t| t.1)),
            Var::LogCounter => write!(out, "{}", self.log_counter),
            Var::ReqCaptures => captures(out, self.captures_req, false),
            Var::ResCaptures => captures(out, self.captures_res, false),
            Var::ReqCapturesList => captures(out, self.captures_req, true),
            Var::ResCapturesList => captures(out, self.captures_res, true),
            Var::UniqueId => write!(out, "{}", self.unique_id.unwrap_or("-")),
            Var::Hostname => write!(out, "{}", crate::conf::hostname()),
            Var::Pid => write!(out, "{}", pid()),
            Var::RequestCounter => write!(out, "{}", self.request_counter),
        };
    }

    /// The line for `format`.
    pub fn render(&self, format: &Format) -> String {
        let tokens: &[Token] = match format {
            Format::Http => httplog(),
            Format::Tcp => tcplog(),
            Format::Custom(tokens) => tokens,
        };
        self.render_tokens(tokens)
    }

    /// The text of a format (a log line, or a `unique-id-format` id). A variable that prints
    /// nothing (no captures) takes the space after it away, as HAProxy does.
    pub fn render_tokens(&self, tokens: &[Token]) -> String {
        let mut out = String::with_capacity(160);
        let mut samples = self.samples.iter();
        let mut skip_space = false;
        for t in tokens {
            let (value, opts) = match t {
                Token::Text(s) => {
                    out.push_str(s.strip_prefix(' ').filter(|_| skip_space).unwrap_or(s));
                    skip_space = false;
                    continue;
                }
                Token::Var(v, opts) => {
                    let mut value = String::new();
                    self.var(&mut value, *v);
                    (value, opts)
                }
                Token::Sample(_, opts) => {
                    (samples.next().cloned().unwrap_or_else(|| "-".into()), opts)
                }
            };
            skip_space = value.is_empty();
            // `+X`: integers, and addresses, in hexadecimal (as HAProxy's unique ids show them).
            let value = if opts.hex {
                if let Ok(n) = value.parse::<i64>() {
                    format!("{n:X}")
                } else if let Ok(ip) = value.parse::<std::net::IpAddr>() {
                    match ip {
                        std::net::IpAddr::V4(a) => format!("{:08X}", u32::from(a)),
                        std::net::IpAddr::V6(a) => format!("{:032X}", u128::from(a)),
                    }
                } else {
                    value
                }
            } else {
                value
            };
            let value = if opts.escape && value.contains(['"', '\\', ']']) {
                let mut e = String::with_capacity(value.len() + 4);
                for c in value.chars() {
                    if matches!(c, '"' | '\\' | ']') {
                        e.push('\\');
                    }
                    e.push(c);
                }
                e
            } else {
                value
            };
            if opts.quote {
                out.push('"');
                out.push_str(&value);
                out.push('"');
            } else {
                out.push_str(&value);
            }
        }
        out
    }
}

/// This process's id, read once (getpid is a system call on every libc that no longer
/// caches it).
fn pid() -> u32 {
    static PID: OnceLock<u32> = OnceLock::new();
    *PID.get_or_init(std::process::id)
}

/// HAProxy's `option httplog` line.
pub const HTTPLOG: &str =
    "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r";
/// HAProxy's `option httpslog` line: the httplog one, then `fc_err/ssl_fc_err/ssl_c_err/
/// ssl_c_ca_err/ssl_fc_is_resumed SNI/version/suite`.
pub const HTTPSLOG: &str = "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r %[fc_err]/%[ssl_fc_err,hex]/%[ssl_c_err]/%[ssl_c_ca_err]/%[ssl_fc_is_resumed] %[ssl_fc_sni]/%sslv/%sslc";
/// HAProxy's `option tcplog` line.
pub const TCPLOG: &str = "%ci:%cp [%t] %ft %b/%s %Tw/%Tc/%Tt %B %ts %ac/%fc/%bc/%sc/%rc %sq/%bq";

fn httplog() -> &'static [Token] {
    static T: OnceLock<Vec<Token>> = OnceLock::new();
    T.get_or_init(|| parse_format(HTTPLOG, &PatternBook::default()).expect("built-in format"))
}

fn tcplog() -> &'static [Token] {
    static T: OnceLock<Vec<Token>> = OnceLock::new();
    T.get_or_init(|| parse_format(TCPLOG, &PatternBook::default()).expect("built-in format"))
}

/// Sends `rec` to every logger, as `format` says.
pub fn emit(loggers: &[Arc<Logger>], format: &Format, rec: &Record<'_>) {
    emit_at(loggers, (format, None), rec, None);
}

/// [`emit`] at a severity set by a rule (`set-log-level`; `None`: the usual `info`), with
/// the structured data of `log-format-sd` for the RFC 5424 targets.
pub fn emit_at(
    loggers: &[Arc<Logger>],
    (format, sd): (&Format, Option<&[Token]>),
    rec: &Record<'_>,
    level: Option<u8>,
) {
    let line = rec.render(format);
    let severity = level.map_or(Severity::Info, Severity::from_number);
    let sd = sd
        .filter(|_| loggers.iter().any(|l| l.target.framing == Framing::Rfc5424))
        .map(|tokens| rec.render_tokens(tokens));
    for l in loggers {
        l.send_sd(severity, sd.as_deref(), &line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_parse() {
        let t = parse_format("%ci:%cp %{+Q}r %tsc 100%%", &PatternBook::default()).unwrap();
        let plain = VarOpts::default();
        let quoted = VarOpts {
            quote: true,
            ..VarOpts::default()
        };
        assert_eq!(
            t,
            vec![
                Token::Var(Var::ClientIp, plain),
                Token::Text(":".into()),
                Token::Var(Var::ClientPort, plain),
                Token::Text(" ".into()),
                Token::Var(Var::RequestLine, quoted),
                Token::Text(" ".into()),
                Token::Var(Var::TermStateCookies, plain),
                Token::Text(" 100%".into()),
            ]
        );
        assert!(parse_format("%nope", &PatternBook::default())
            .unwrap_err()
            .contains("unknown"));
        assert!(parse_format("%{+Z}r", &PatternBook::default()).is_err());
        let t = parse_format("%{+X}o %Ts %[src,lower]", &PatternBook::default()).unwrap();
        assert!(matches!(
            t[0],
            Token::Var(Var::Timestamp, VarOpts { hex: true, .. })
        ));
        assert!(matches!(t[2], Token::Sample(_, VarOpts { hex: true, .. })));
        assert!(parse_format("%{+M}r", &PatternBook::default())
            .unwrap_err()
            .contains("not supported yet"));
    }

    #[test]
    fn dates() {
        let t = SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_795_327_200_123);
        assert_eq!(log_date(t), "22/Nov/2026:06:00:00.123");
        assert_eq!(civil(SystemTime::UNIX_EPOCH).0, 1970);
    }

    #[test]
    fn targets() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let t = parse_target(&w("stdout format raw local0")).unwrap();
        assert_eq!(
            (t.target, t.framing, t.facility),
            (Target::Stdout, Framing::Raw, 16)
        );
        let t = parse_target(&w("127.0.0.1:514 len 2048 local7 info")).unwrap();
        assert_eq!((t.max_len, t.facility), (2048, 23));
        assert!(parse_target(&w("stdout")).is_err());
        assert!(parse_target(&w("stdout format json local0")).is_err());
        assert_eq!(
            parse_target(&w("/dev/log local0")).unwrap().target,
            Target::Unix("/dev/log".into())
        );
        assert_eq!(
            parse_target(&w("unix@/run/log.sock local0"))
                .unwrap()
                .target,
            Target::Unix("/run/log.sock".into())
        );
    }
}

#[cfg(test)]
mod strftime_tests {
    #[test]
    fn utc() {
        assert_eq!(
            super::strftime(0, "%Y-%m-%d %H:%M:%S", false).as_deref(),
            Some("1970-01-01 00:00:00")
        );
        assert_eq!(
            super::strftime(86400 + 3661, "%d/%b/%Y:%T", false).as_deref(),
            Some("02/Jan/1970:01:01:01")
        );
    }
}
