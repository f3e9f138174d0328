//! Routing a request: its connection and HTTP rules (frontend, then backend), `use_backend`
//! and the default backend, into a [`Route`]: a backend to send it to, or an answer the
//! proxy gives itself (deny, return, redirect, a service, a cache hit). The rules' edits
//! come back with it, applied by the head writers.

use crate::conf::stream::RestrictNames;
use std::net::SocketAddr;

use sluice_http::{Answer, RequestCopy, RequestView};

use super::heads::redirect;
use super::heads::{edited_request, reply_answer, Edits};
use super::reply::{monitor_matches, serve};
use super::session::Session;
use crate::balance::{self, PickKey};
use crate::cookie;
use crate::persist;
use crate::rules::{holds, run_shared, tcp_verdict, Action, BackendRef, Level, Rule};

/// Stick-table keys and their tables (`persist`).
pub(crate) type StickKeys = Vec<(std::sync::Arc<crate::stick::Table>, crate::stick::Key)>;

/// The routing decision for a request, computed from its head.
pub(super) enum Route {
    /// Answer locally with this page; `close` when the connection cannot continue.
    Respond { page: Answer, close: bool },
    /// Answer with the error page for this status (the backend's pages win when known);
    /// `denied` when a rule refused the request.
    Error {
        status: u16,
        backend: Option<usize>,
        denied: bool,
        /// The rule's own answer (`deny ... string ...`), instead of the error page.
        page: Option<Answer>,
    },
    /// Hold the connection for `timeout tarpit`, then answer as `Error` does (denied).
    Tarpit {
        status: u16,
        backend: Option<usize>,
        page: Option<Answer>,
    },
    Forward {
        backend: usize,
        server: usize,
        /// The server the request's persistence cookie named, and its dates, if any.
        cookie_server: Option<(usize, cookie::CookieDates)>,
        /// The keys `stick on|store-request` rules store once the server is known.
        stick: StickKeys,
        /// The request's letter for `%tsc` about its persistence cookie.
        cookie_flag: u8,
    },
    /// The statistics page of the frontend (`None`) or of a backend.
    StatsPage(Option<usize>),
    /// Close the connection without an answer (`tcp-request content reject`).
    Reject { backend: Option<usize> },
    /// Answer with a stored object (`cache-use`).
    Cached {
        entry: std::sync::Arc<crate::cache::Entry>,
        backend: Option<usize>,
        cache: usize,
    },
}

/// `option http-restrict-req-hdr-names` of a proxy whose `http-request` rules have run:
/// the request's fields whose names hold other characters than `[A-Za-z0-9-]` are removed
/// (`delete`), or the request is denied with 403 (`reject`), as HAProxy does.
fn restrict_names(
    mode: RestrictNames,
    view: &mut RuleView<'_>,
    edits: &mut Edits,
    backend: Option<usize>,
) -> Option<Route> {
    if mode == RestrictNames::Preserve {
        return None;
    }
    let now = view.get(edits);
    let odd = |n: &[u8]| n.iter().any(|&c| !(c.is_ascii_alphanumeric() || c == b'-'));
    let names: Vec<String> = now
        .headers()
        .filter(|(n, _)| odd(n))
        .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    if names.is_empty() {
        return None;
    }
    if mode == RestrictNames::Reject {
        return Some(Route::Error {
            status: 403,
            backend,
            denied: true,
            page: None,
        });
    }
    for n in names {
        edits.remove(&n, crate::sample::Match::Str);
    }
    None
}

pub(super) fn route(s: &Session, req: &RequestView<'_>) -> (Route, Edits) {
    let config = s.w.config();
    let fe = s.frontend();
    let mut edits = Edits::default();
    if fe
        .monitor
        .uri
        .as_deref()
        .is_some_and(|uri| monitor_matches(uri.as_bytes(), req.target()))
    {
        // `monitor-uri`: the proxy answers for itself, before any rule.
        let failing = fe
            .monitor
            .fail
            .as_ref()
            .is_some_and(|c| c.eval(&s.sample_ctx(req, None)));
        let route = if failing {
            Route::Error {
                status: 503,
                backend: None,
                denied: false,
                page: None,
            }
        } else {
            // HAProxy's 200 page (or the `errorfile 200` in its place), then close.
            Route::Respond {
                page: s.error_page_for(200, None, Some(req)),
                close: true,
            }
        };
        return (route, edits);
    }
    if !content_accepts(s, &fe.rules.tcp_content, req, None, false) {
        return (Route::Reject { backend: None }, edits);
    }
    // The request counts in every entry tracked so far (later ones count it as they start).
    s.vars
        .count(&crate::rules::REQUEST, crate::runtime::clock_ms());
    let mut view = RuleView::new(req);
    if let Some(r) = apply_rules(s, &fe.rules.http_request, &mut view, &mut edits, None) {
        return (r, edits);
    }
    if let Some(r) = restrict_names(fe.stream.restrict_names, &mut view, &mut edits, None) {
        return (r, edits);
    }
    if let Some(r) = apply_rules(s, &fe.rules.redirects, &mut view, &mut edits, None) {
        return (r, edits);
    }
    if fe.stats.enabled && req.target().starts_with(fe.stats.uri().as_bytes()) {
        return (Route::StatsPage(None), edits);
    }
    let backend = if let Some(b) = s.pinned {
        // A TCP frontend chose this HTTP backend for the whole connection.
        Some(b)
    } else if fe.rules.switching.is_empty() {
        fe.rules.default_backend
    } else {
        let reads = fe.rules.switching.iter().any(|(cond, target)| {
            cond.as_ref().is_some_and(|c| c.reads_request())
                || matches!(target, BackendRef::Dynamic(f) if f.reads_request())
        });
        let now = if reads { view.get(&edits) } else { view.last() };
        let cx = s.sample_ctx(&now, None);
        crate::rules::switch(&fe.rules.switching, &cx, &config.backends)
            .or(fe.rules.default_backend)
    };
    // No backend: 503, as HAProxy answers.
    let Some(backend) = backend else {
        return (
            Route::Error {
                status: 503,
                backend: None,
                denied: false,
                page: None,
            },
            edits,
        );
    };
    let be = &config.backends[backend];
    let st = &s.w.state().backends[backend];
    if !content_accepts(
        s,
        &be.rules.tcp_content,
        &view.get(&edits),
        Some(backend),
        true,
    ) {
        return (
            Route::Reject {
                backend: Some(backend),
            },
            edits,
        );
    }
    if let Some(r) = apply_rules(
        s,
        &be.rules.http_request,
        &mut view,
        &mut edits,
        Some(backend),
    ) {
        return (r, edits);
    }
    let restrict = be.stream.restrict_names;
    if let Some(r) = restrict_names(restrict, &mut view, &mut edits, Some(backend)) {
        return (r, edits);
    }
    if let Some(r) = apply_rules(s, &be.rules.redirects, &mut view, &mut edits, Some(backend)) {
        return (r, edits);
    }
    // Balancing and persistence see the request as rewritten (the body is the client's).
    let orig = view.orig;
    let p = &be.persist;
    let reads =
        be.algo.hashes() || p.cookie.is_some() || !p.stick.is_empty() || !p.use_server.is_empty();
    let req = if reads { view.get(&edits) } else { view.last() };
    let req = &req;
    if be.stats.enabled && req.target().starts_with(be.stats.uri().as_bytes()) {
        return (Route::StatsPage(Some(backend)), edits);
    }
    // `balance hash EXPR`: the sample as binary, seen as balancing sees the request.
    let hashed = match &be.algo {
        balance::Algo::Hash(e) => e
            .eval(&s.sample_ctx(req, Some(backend)))
            .map(|v| v.as_binary().into_owned()),
        _ => None,
    };
    let extra = match &be.algo {
        balance::Algo::Hash(_) => hashed.as_deref(),
        // The first value of the first such header, as HAProxy takes it.
        balance::Algo::Hdr(name, _) => req
            .header(name)
            .map(|v| sluice_http::trim_ows(v.split(|&b| b == b',').next().unwrap_or(v))),
        // `check_post`: a form body, as far as it arrived with the head.
        balance::Algo::UrlParam(name, true) => req
            .header("content-type")
            .filter(|t| t.starts_with(b"application/x-www-form-urlencoded"))
            .and_then(|_| balance::form_param(orig.body_so_far(), name)),
        _ => None,
    };
    let key = PickKey {
        client: s.peer.get().ip(),
        target: req.target(),
        extra,
    };
    let persisted = persist::decide(be, st, &s.sample_ctx(req, Some(backend)), req);
    // A private connection (http-reuse never, an NTLM exchange) keeps its server while
    // it is usable; `option prefer-last-server` keeps the last one likewise, unless the
    // balancing is a hash (which chooses again as it would).
    let last = s
        .last_server
        .filter(|&(b, _)| b == backend && be.prefer_last_server && !be.algo.hashes())
        .map(|(_, srv)| srv)
        .filter(|&srv| {
            let sv = &st.servers[srv];
            // `max-keep-alive-queue`: not into a queue longer than that.
            let waiting = || sv.queue.waiting.load(std::sync::atomic::Ordering::Relaxed);
            sv.usable()
                && be
                    .max_keep_alive_queue
                    .is_none_or(|m| sv.has_room() || waiting() < m)
        });
    let server = match &s.private {
        Some(p) if p.backend == backend && st.servers[p.server].usable() => Some(p.server),
        _ => persisted
            .server
            .or(last)
            .or_else(|| balance::pick(be, st, &key, &s.w.lb)),
    };
    match server {
        Some(server) => (
            Route::Forward {
                backend,
                server,
                cookie_server: persisted.cookie,
                stick: persisted.stick,
                cookie_flag: persisted.cookie_flag,
            },
            edits,
        ),
        None => (
            Route::Error {
                status: 503,
                backend: Some(backend),
                denied: false,
                page: None,
            },
            edits,
        ),
    }
}

/// The request as rules see it: the client's, or once a rule edited it, a copy with the
/// edits so far applied (made again only when needed after another edit), so that later
/// conditions, routing and balancing see what the server will get.
pub(super) struct RuleView<'r> {
    orig: &'r RequestView<'r>,
    copy: Option<RequestCopy>,
    stale: bool,
}

impl<'r> RuleView<'r> {
    fn new(orig: &'r RequestView<'r>) -> RuleView<'r> {
        RuleView {
            orig,
            copy: None,
            stale: false,
        }
    }

    /// The request with `edits` applied.
    fn get(&mut self, edits: &Edits) -> RequestView<'_> {
        if self.stale {
            self.copy = Some(edited_request(self.orig, edits));
            self.stale = false;
        }
        self.last()
    }

    /// The request as last made, for a rule that does not read it (no copy is made for
    /// it; only its target, unchanged by any edit so far when edits do not hold one, may be
    /// looked at).
    fn last(&self) -> RequestView<'_> {
        match &self.copy {
            Some(copy) => RequestView::copy(copy),
            None => *self.orig,
        }
    }
}

pub(super) fn apply_rules(
    s: &Session,
    rules: &[Rule],
    view: &mut RuleView<'_>,
    edits: &mut Edits,
    backend: Option<usize>,
) -> Option<Route> {
    let req = view.orig;
    for rule in rules {
        let now = if rule.reads_request {
            view.get(edits)
        } else {
            view.last()
        };
        let mut cx = s.sample_ctx(&now, backend);
        cx.set_timeouts = (edits.timeout_server, edits.timeout_tunnel);
        if !holds(&rule.cond, &cx) {
            continue;
        }
        // A `return` renders its answer before it counts as the last rule (HAProxy's
        // order); a `deny` page after.
        if !matches!(rule.action, Action::Return(_)) {
            cx.vars.note_rule(rule);
        }
        let edited = match &rule.action {
            Action::Return(reply) => {
                let page = if reply.default_page {
                    s.error_page_for(reply.status, backend, Some(&now))
                } else {
                    reply_answer(reply, &cx)
                };
                cx.vars.note_rule(rule);
                return Some(Route::Respond { page, close: false });
            }
            Action::Deny { status, reply } => {
                return Some(Route::Error {
                    status: *status,
                    backend,
                    denied: true,
                    page: reply.as_ref().map(|r| reply_answer(r, &cx)),
                })
            }
            Action::Auth(realm) => {
                let config = s.w.config();
                let realm = realm.as_deref().unwrap_or_else(|| match backend {
                    Some(b) => &config.backends[b].name,
                    None => &s.frontend().name,
                });
                let ask = s.frontend().stream.auth_fields(now.target());
                let mut page = s.error_page_for(ask.status, backend, Some(&now));
                let challenge = format!("Basic realm=\"{realm}\"");
                // Right after the status line, as HAProxy writes it.
                let field = (ask.challenge.as_bytes().to_vec(), challenge.into_bytes());
                page.fields.insert(0, field);
                return Some(Route::Error {
                    status: ask.status,
                    backend,
                    denied: false,
                    page: Some(page),
                });
            }
            Action::Tarpit { status, reply } => {
                return Some(Route::Tarpit {
                    status: *status,
                    backend,
                    page: reply.as_ref().map(|r| reply_answer(r, &cx)),
                })
            }
            Action::Reject => return Some(Route::Reject { backend }),
            Action::SilentDrop => {
                crate::rules::silence(&cx);
                return Some(Route::Reject { backend });
            }
            Action::SetSrc(e) => {
                if let Some(ip) = e.eval(&cx).and_then(|v| v.as_ip()) {
                    let addr = SocketAddr::new(ip, s.peer.get().port());
                    s.peer.set(addr);
                    cx.src = addr;
                }
                false
            }
            Action::SetDst(e) => {
                if let Some(ip) = e.eval(&cx).and_then(|v| v.as_ip()) {
                    let port = cx
                        .client
                        .and_then(|c| c.local_addr().ok())
                        .map_or(0, |a| a.port());
                    let addr = SocketAddr::new(ip, s.dst.get().map_or(port, |a| a.port()));
                    s.dst.set(Some(addr));
                    cx.dst = Some(addr);
                }
                false
            }
            Action::SetSrcPort(e) => {
                if let Some(port) = e.eval(&cx).and_then(|v| v.as_int()) {
                    let addr = SocketAddr::new(s.peer.get().ip(), port as u16);
                    s.peer.set(addr);
                    cx.src = addr;
                }
                false
            }
            Action::SetDstPort(e) => {
                let now_dst = s
                    .dst
                    .get()
                    .or_else(|| cx.client.and_then(|c| c.local_addr().ok()));
                if let (Some(port), Some(dst)) = (e.eval(&cx).and_then(|v| v.as_int()), now_dst) {
                    let addr = SocketAddr::new(dst.ip(), port as u16);
                    s.dst.set(Some(addr));
                    cx.dst = Some(addr);
                }
                false
            }
            // The body was waited for before the rules ran (`wait_for_body`).
            Action::WaitForBody { .. } => false,
            Action::CacheUse(c) => {
                if let Some(entry) = cache_use(s, c.index, &now, backend, edits) {
                    return Some(Route::Cached {
                        entry,
                        backend,
                        cache: c.index,
                    });
                }
                false
            }
            Action::Allow => return None,
            Action::NormalizeUri(n) => {
                let target = edits.target.clone();
                let target = target.as_deref().unwrap_or(now.target());
                match n.apply(target) {
                    Ok(Some(t)) if t != target => {
                        edits.target = Some(t);
                        true
                    }
                    Ok(_) => false,
                    // A `strict` normalizer's bad `%`: HAProxy's invalid request.
                    Err(sluice_http::BadPercent) => {
                        return Some(Route::Error {
                            status: 400,
                            backend,
                            denied: false,
                            page: None,
                        })
                    }
                }
            }
            Action::UseService(service) => {
                return Some(Route::Respond {
                    page: serve(s, *service, req),
                    close: false,
                })
            }
            Action::Redirect(r) => {
                return Some(Route::Respond {
                    page: redirect(r, req, edits, &cx),
                    close: false,
                })
            }
            other => {
                let level = Level::Txn {
                    count_request: true,
                };
                let edits_it = !run_shared(other, &cx, level);
                if edits_it {
                    edits.apply(other, &cx);
                }
                edits_it
            }
        };
        view.stale |= edited;
    }
    None
}

/// `http-request cache-use`: keys the request (for `cache-store` on its response) and,
/// when the cache holds a fresh object it may get, returns it. Lookups and hits count on
/// the proxy whose rule it is, as HAProxy's.
pub(super) fn cache_use(
    s: &Session,
    cache: usize,
    req: &RequestView<'_>,
    backend: Option<usize>,
    edits: &mut Edits,
) -> Option<std::sync::Arc<crate::cache::Entry>> {
    let w = &s.w;
    let store = &w.state().caches[cache];
    let lookup = crate::cache::Lookup::of(req, store.conf.process_vary)?;
    let ignore = lookup.policy.ignore;
    let key = lookup.key;
    let vary = lookup.vary.clone().unwrap_or_default();
    edits.cache_lookup = Some(Box::new(lookup));
    if ignore {
        return None;
    }
    let counters = match backend {
        Some(b) => w.state().backends[b].counters.at(w.tid),
        None => w.state().frontends[s.fe].counters.at(w.tid),
    };
    counters.cache_lookups.bump();
    let entry = store.lookup(&key, &vary, crate::cache::unix_now())?;
    counters.cache_hits.bump();
    Some(entry)
}

/// Whether `tcp-request content` rules let an HTTP request through (their tracking is the
/// transaction's).
pub(super) fn content_accepts(
    s: &Session,
    rules: &[Rule],
    req: &RequestView<'_>,
    backend: Option<usize>,
    count_request: bool,
) -> bool {
    rules.is_empty()
        || tcp_verdict(
            rules,
            &s.sample_ctx(req, backend),
            Level::Txn { count_request },
        )
}
