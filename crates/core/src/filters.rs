//! The `filter` keyword and the trace filter.
//!
//! `filter compression` declares the compression that the `compression` keywords configure
//! (HAProxy requires the line once another filter is declared, to know the order).
//! `filter trace` is HAProxy's debugging filter: it writes a line to the standard error
//! for each event of the streams of its proxy (a stream starting, its backend chosen, the
//! request's and the response's heads, their ends, the stream stopping), labelled with its
//! name and its proxy's (`NAME/PROXY`, `TRACE/PROXY` without a name). A line reads
//! `SECONDS.MICROS [LABEL] [strm #N] EVENT: DETAILS` as HAProxy's does, with the stream's
//! number where HAProxy prints its internal addresses. Its testing options
//! (`random-parsing`, `random-forwarding`, `hexdump`) are read and warned about: sluice's
//! data path is not filter-driven, so there is nothing for them to pace or dump.
//!
//! Invariant: a proxy's traces are lowered once (labels made at load); tracing a stream
//! formats only when its proxy has a trace filter that is not `quiet`.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use sluice_config::{ConfigError, Keyword, KwError, Scope};
use sluice_http::{RequestView, ResponseView, Version};

use crate::conf::filter::{Filters, Trace, TraceConf};
use crate::conf::ProxyConf;

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[Keyword {
    name: "filter",
    scope: Scope::FE_BE,
    help: "filter compression | trace [name NAME] [quiet] [random-parsing] [random-forwarding] [hexdump]",
    parse: |c, a| match a {
        [f] if f == "compression" => {
            c.filters.compression = true;
            Ok(())
        }
        [f, ..] if f == "compression" => Err(KwError::Extra(a[1].clone())),
        [f, opts @ ..] if f == "trace" => {
            let trace = trace_conf(c, opts)?;
            c.filters.traces.push(trace);
            Ok(())
        }
        [f, ..] => Err(KwError::Invalid(format!("filter '{f}': not supported yet"))),
        [] => Err(KwError::Missing("a filter name")),
    },
}];

fn trace_conf(c: &ProxyConf, opts: &[String]) -> Result<TraceConf, KwError> {
    let mut t = TraceConf {
        at: c.at.clone(),
        name: None,
        quiet: false,
        unfollowed: Vec::new(),
    };
    let mut words = opts.iter().enumerate();
    while let Some((i, w)) = words.next() {
        match w.as_str() {
            "name" => match words.next() {
                Some((_, n)) => t.name = Some(n.clone()),
                None => return Err(KwError::Missing("a name after 'name'")),
            },
            "quiet" => t.quiet = true,
            "random-parsing" => t.unfollowed.push("random-parsing"),
            "random-forwarding" => t.unfollowed.push("random-forwarding"),
            "hexdump" => t.unfollowed.push("hexdump"),
            other => {
                return Err(KwError::bad(
                    i + 2,
                    other,
                    "expects name NAME, quiet, random-parsing, random-forwarding or hexdump",
                ))
            }
        }
    }
    Ok(t)
}

/// The traces of proxy `proxy` (a `kind` section), with what its filter lines call for:
/// the refusal of compression without `filter compression` beside another filter, and a
/// warning per testing option sluice does not follow.
pub fn lower(
    (kind, proxy): (&str, &str),
    filters: &Filters,
    compresses: bool,
    (errors, warnings): (&mut Vec<ConfigError>, &mut Vec<String>),
) -> Vec<Trace> {
    if compresses && !filters.compression {
        if let Some(t) = filters.traces.first() {
            errors.push(t.at.error(format!(
                "{kind} '{proxy}': require an explicit filter declaration to use HTTP compression"
            )));
        }
    }
    let mut traces = Vec::new();
    for t in &filters.traces {
        for opt in &t.unfollowed {
            warnings.push(format!(
                "parsing [{}:{}] : filter trace: '{opt}' is accepted but has no effect (sluice's data path is not paced or dumped by filters).",
                t.at.file, t.at.line
            ));
        }
        if t.quiet {
            continue;
        }
        let name = t.name.as_deref().unwrap_or("TRACE");
        traces.push(Trace {
            label: format!("{name}/{proxy}"),
            random_forwarding: t.unfollowed.contains(&"random-forwarding"),
            hexdump: t.unfollowed.contains(&"hexdump"),
        });
    }
    traces
}

/// The first line of each trace filter, as the process starts serving.
pub fn announce(config: &crate::conf::Config) {
    let traces = config.frontends.iter().flat_map(|f| &f.traces);
    let traces = traces.chain(config.backends.iter().flat_map(|b| &b.traces));
    let mut out = String::new();
    let stamp = stamp();
    for t in traces {
        out.push_str(&format!(
            "{stamp} [{:<20}] filter initialized [quiet=false - fwd random={} - hexdump={}]\n",
            t.label, t.random_forwarding, t.hexdump
        ));
    }
    let _ = std::io::stderr().lock().write_all(out.as_bytes());
}

/// Now, as trace lines show it: seconds and microseconds since the epoch.
fn stamp() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:06}", now.as_secs(), now.subsec_micros())
}

/// A number for a traced stream, unique in the process (from 1).
pub fn next_stream(process: &crate::runtime::Process) -> u64 {
    1 + process
        .figures
        .request_ids
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// Which side of a stream an event is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Channel {
    Request,
    Response,
}

impl Channel {
    fn label(self) -> &'static str {
        match self {
            Channel::Request => "REQUEST",
            Channel::Response => "RESPONSE",
        }
    }
}

/// The traces a stream's events are told to: its frontend's, then (once chosen) its
/// backend's, and the stream's number.
#[derive(Debug, Clone, Copy)]
pub struct StreamTrace<'a> {
    pub frontend: &'a [Trace],
    pub backend: &'a [Trace],
    pub stream: u64,
    /// `HTTP` or `TCP`.
    pub mode: &'static str,
    /// The backend is chosen: events are the backend's.
    pub routed: bool,
}

impl StreamTrace<'_> {
    /// Whether any trace listens.
    pub fn is_on(&self) -> bool {
        !self.frontend.is_empty() || !self.backend.is_empty()
    }

    pub fn start(&self) {
        self.each(|| format!("{:<25}", "trace_stream_start"));
    }

    pub fn set_backend(&self, name: &str) {
        self.each(|| format!("{:<25}: backend={name}", "trace_stream_set_backend"));
    }

    pub fn stop(&self) {
        self.each(|| format!("{:<25}", "trace_stream_stop"));
    }

    /// A request head, as the rules see it when it arrives.
    pub fn request(&self, req: &RequestView<'_>) {
        if !self.is_on() {
            return;
        }
        let line = format!(
            "{}\t{} {} {}",
            self.channel(Channel::Request, "trace_http_headers"),
            String::from_utf8_lossy(req.method()),
            String::from_utf8_lossy(req.target()),
            version(req.version()),
        );
        let fields = req.headers().map(|(n, v)| field(n, v)).collect();
        self.each_lines(&line, fields);
    }

    /// A response head, as the server sent it.
    pub fn response(&self, rsp: &ResponseView<'_>) {
        if !self.is_on() {
            return;
        }
        let line = format!(
            "{}\t{} {} {}",
            self.channel(Channel::Response, "trace_http_headers"),
            version(rsp.version()),
            rsp.status(),
            String::from_utf8_lossy(rsp.reason()),
        );
        let fields = rsp.headers().map(|(n, v)| field(n, v)).collect();
        self.each_lines(&line, fields);
    }

    /// The end of a message on `channel`.
    pub fn end(&self, channel: Channel) {
        if self.is_on() {
            let line = self.channel(channel, "trace_http_end");
            self.each(|| line.clone());
        }
    }

    fn channel(&self, channel: Channel, event: &str) -> String {
        format!(
            "{event:<25}: channel={:<10} - mode={:<5} ({})",
            channel.label(),
            self.mode,
            if self.routed { "backend" } else { "frontend" }
        )
    }

    fn each(&self, event: impl Fn() -> String) {
        if self.is_on() {
            self.each_lines(&event(), Vec::new());
        }
    }

    /// Writes `first` and its `more` lines once per trace, each trace's lines together.
    fn each_lines(&self, first: &str, more: Vec<String>) {
        let stamp = stamp();
        let mut out = String::new();
        for t in self.frontend.iter().chain(self.backend) {
            let prefix = format!("{stamp} [{:<20}] [strm #{}]", t.label, self.stream);
            out.push_str(&format!("{prefix} {first}\n"));
            for l in &more {
                out.push_str(&format!("{prefix} {l}\n"));
            }
        }
        // A debugging aid: a closed standard error loses the lines, nothing else.
        let _ = std::io::stderr().lock().write_all(out.as_bytes());
    }
}

/// Tells its traces that the stream stopped when it is dropped, however the stream ends.
pub struct Stopping<'a>(pub StreamTrace<'a>);

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// A header line, its name in lower case as HAProxy's HTX keeps names.
fn field(name: &[u8], value: &[u8]) -> String {
    format!(
        "\t{}: {}",
        String::from_utf8_lossy(name).to_ascii_lowercase(),
        String::from_utf8_lossy(value)
    )
}

fn version(v: Version) -> &'static str {
    match v {
        Version::Http10 => "HTTP/1.0",
        Version::Http11 => "HTTP/1.1",
        Version::Http2 => "HTTP/2.0",
        Version::Http3 => "HTTP/3.0",
    }
}
