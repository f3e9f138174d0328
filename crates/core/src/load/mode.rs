//! What a proxy in TCP mode keeps of its HTTP-only settings: nothing, as in HAProxy 2.6.
//!
//! A proxy is in TCP mode unless `mode http` is set in it or in its defaults. HAProxy does
//! not refuse HTTP-only keywords there: it ignores each with a warning (and a layer-7
//! `balance` falls back to round robin, `option httplog` to `option tcplog`). This module
//! applies those rules to a parsed proxy before it is lowered, so that nothing downstream
//! of the loader ever sees an HTTP setting on a TCP proxy.

use sluice_config::SectionKind;

use crate::conf::backend::ReuseMode;
use crate::conf::balance::Algo;
use crate::conf::log::Format;
use crate::conf::stream::Mode;
use crate::conf::ProxyConf;

/// Clears the HTTP-only settings of a TCP-mode proxy, with HAProxy's warning for each.
pub(super) fn strip_http(
    (kind, name): (SectionKind, &str),
    c: &mut ProxyConf,
    warnings: &mut Vec<String>,
) {
    if c.stream.mode != Mode::Tcp {
        return;
    }
    let who = format!("{} '{name}'", kind_str(kind));
    let mut warn = |what: String| warnings.push(what);
    if c.stats.enabled {
        warn(format!(
            "'stats' statement ignored for {who} as it requires HTTP mode."
        ));
        c.stats = Default::default();
    }
    let log = &mut c.log;
    // Header captures need HTTP; a sample's slot (`tcp-request content capture`) does not.
    let headers = log.captures_req.iter().any(|(name, _)| !name.is_empty());
    if headers || !log.captures_res.is_empty() || log.capture_cookie.is_some() {
        warn(format!(
            "'capture' statement ignored for {who} as it requires HTTP mode."
        ));
        log.captures_req.retain(|(name, _)| name.is_empty());
        log.captures_res.clear();
        log.capture_cookie = None;
    }
    let sets = &mut c.rules.sets;
    for (list, what) in [
        (&mut sets.http_request, "'http-request' rules"),
        (&mut sets.http_response, "'http-response' rules"),
        (&mut sets.http_after_response, "'http-after-response' rules"),
        (&mut sets.redirects, "'redirect' rules"),
    ] {
        if !list.is_empty() {
            warn(format!(
                "{what} ignored for {who} as they require HTTP mode."
            ));
            list.clear();
        }
    }
    let option =
        |name: &str| format!("'option {name}' ignored for {who} as it requires HTTP mode.");
    if c.stream.forwardfor.take().is_some() {
        warn(option("forwardfor"));
    }
    if c.stream.originalto.take().is_some() {
        warn(option("originalto"));
    }
    if std::mem::take(&mut c.stream.buffer_request) {
        warn(option("http-buffer-request"));
    }
    if c.persist.cookie.take().is_some() {
        warn(format!(
            "cookie will be ignored for {who} (needs 'mode http')."
        ));
    }
    if c.monitor.uri.take().is_some() {
        warn(format!(
            "monitor-uri will be ignored for {who} (needs 'mode http')."
        ));
    }
    if matches!(
        c.balance.algo,
        Algo::Uri(_) | Algo::UrlParam(..) | Algo::Hdr(..)
    ) {
        c.balance.algo = Algo::RoundRobin;
        warn(format!(
            "Layer 7 hash not possible for {who} (needs 'mode http'). Falling back to round robin."
        ));
    }
    let https = crate::log::parse_format(crate::log::HTTPSLOG, &Default::default()).ok();
    let http_log = match &c.log.format {
        Some(Format::Http) => Some("httplog"),
        Some(Format::Custom(t)) if Some(t) == https.as_ref() => Some("httpslog"),
        _ => None,
    };
    if let Some(name) = http_log {
        c.log.format = Some(Format::Tcp);
        warn(format!(
            "'option {name}' not usable with {who} (needs 'mode http'). Falling back to 'option tcplog'."
        ));
    }
    for s in &mut c.backend.servers {
        if s.opts.cookie.take().is_some() {
            warn(format!(
                "{who} : ignoring cookie for server '{}' as HTTP mode is disabled.",
                s.name
            ));
        }
    }
    // Silently, as HAProxy: connections of a TCP proxy are never shared.
    c.backend.reuse = ReuseMode::Never;
}

/// The proxy's kind as HAProxy names it in messages (`proxy` for a `listen` section).
pub(super) fn kind_str(kind: SectionKind) -> &'static str {
    match kind {
        SectionKind::Frontend => "frontend",
        SectionKind::Backend => "backend",
        _ => "proxy",
    }
}
