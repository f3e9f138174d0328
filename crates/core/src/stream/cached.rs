//! The cache on the data path: answering a request from a stored object (`cache-use`),
//! and keeping a response while it is relayed so that it can be stored (`cache-store`).
//!
//! A stored object is answered as a server's response would be: the response rules of the
//! backend and the frontend run on it (with no server: `srv_id` has no value, as HAProxy's
//! cache applet has none), then an `Age` field and the framing the client needs are added;
//! a HEAD or a satisfied conditional request (304) gets the head only.

use sluice_http::{Framing, RequestView, ResponseView};

use super::heads::{client_response, write_response_head, Digits, Edits};
use super::report::{Cause, Fail, Local, Phase};
use super::session::Session;
use super::txn::{ReqFacts, Txn};
use crate::cache::{Admission, Entry, Lookup};
use crate::transport::Then;

/// The answer to a request from a stored object: its head as the client gets it (HTTP/1
/// text, or an HTTP/2 head and the body's framing), and whether the body follows.
pub(super) struct CachedAnswer {
    head: Vec<u8>,
    h2: Option<(http::Response<()>, Framing)>,
    with_body: bool,
    keep: bool,
}

impl Txn {
    /// Makes the answer to `req` from `entry`, found in cache number `cache` (and logs it
    /// as a cache hit).
    pub(super) fn cached_answer(
        &mut self,
        s: &Session,
        (entry, cache): (&Entry, usize),
        req: &RequestView<'_>,
        backend: Option<usize>,
        facts: &ReqFacts,
    ) -> Result<CachedAnswer, Fail> {
        self.phase = Phase::Local;
        self.backend = backend;
        self.log.local = Some(Local::Cached);
        let Ok(Some(head)) = sluice_http::parse_response(&entry.head, false) else {
            return Err(Fail::drop(Cause::Proxy, Phase::Local));
        };
        let view = ResponseView::h1(&entry.head, &head);
        // `Age` comes first, as HAProxy's cache adds it before the response rules run.
        let mut edits = Edits::default();
        let age = entry.age_at(crate::cache::unix_now());
        edits.add.push(("age".into(), age.to_string().into_bytes()));
        let cx = crate::sample::Ctx {
            req: Some(req),
            res: Some(&view),
            on_response: true,
            cache: Some(cache),
            ..s.sample_ctx(req, backend)
        };
        response_rules(s, backend, &cx, &mut edits);
        if Txn::log_reads_response(s) {
            self.render_log_samples_at_response(s, &cx);
        }
        let not_modified = entry.not_modified(req);
        if not_modified {
            edits.status = Some((304, None));
        }
        let with_body = !(facts.is_head || not_modified);
        let keep = !facts.wants_close && facts.framing == Framing::None && !s.w.stopping();
        let (framing, hint) = match with_body {
            false => (
                Framing::None,
                Some(entry.body.len().to_string().into_bytes()),
            ),
            true => (Framing::Length(entry.body.len() as u64), None),
        };
        let h2 = match s.client.as_stream() {
            Some(_) => {
                let digits = Digits::new(entry.body.len() as u64);
                let res = client_response(&view, &edits, Some(digits.as_bytes()), None)
                    .ok_or_else(|| Fail::drop(Cause::Proxy, Phase::Local))?;
                Some((res, framing))
            }
            None => None,
        };
        // (Also what the log counts, for either protocol.)
        let mut out = Vec::with_capacity(entry.head.len() + 64);
        write_response_head(
            &mut out,
            &view,
            &edits,
            Some((framing, keep, facts.version, hint)),
            None,
        );
        self.log.status = i64::from(if not_modified { 304 } else { head.status });
        self.log.term = Some(*b"--");
        let body = if with_body {
            entry.body.len() as u64
        } else {
            0
        };
        self.log.bytes = super::report::htx_head_size(&out) + body;
        Ok(CachedAnswer {
            head: out,
            h2,
            with_body,
            keep,
        })
    }

    /// Sends an answer made by [`Txn::cached_answer`]; returns whether the client
    /// connection stays open.
    pub(super) async fn send_cached(
        &mut self,
        s: &mut Session,
        answer: CachedAnswer,
        entry: &Entry,
    ) -> Result<bool, Fail> {
        let body: &[u8] = if answer.with_body { &entry.body } else { &[] };
        let then = if answer.keep {
            Then::Flush
        } else {
            Then::Close
        };
        let limit = s.frontend().stream.timeout_client;
        let head: &[u8] = match (answer.h2, s.client.as_stream()) {
            (Some((res, framing)), Some(stream)) => {
                stream
                    .send_response(res, framing)
                    .map_err(|e| Fail::drop(Cause::ClientClosed(Some(e)), Phase::Local))?;
                &[]
            }
            _ => &answer.head,
        };
        let sent = super::deadline::within(limit, s.client.write_pair(head, body, then)).await;
        match sent {
            Ok(Ok(())) => Ok(answer.keep),
            Ok(Err(e)) => Err(Fail::drop(Cause::ClientClosed(Some(e)), Phase::Local)),
            Err(()) => Err(Fail::drop(Cause::ClientTimeout, Phase::Local)),
        }
    }
}

/// The edits of the backend's then the frontend's `http-response` and
/// `http-after-response` rules on a stored response.
fn response_rules(
    s: &Session,
    backend: Option<usize>,
    cx: &crate::sample::Ctx<'_>,
    edits: &mut Edits,
) {
    let config = s.w.config();
    let fe = &config.frontends[s.fe];
    let be = backend.map(|b| &config.backends[b].rules);
    let lists = [
        be.map(|r| &r.http_response[..]),
        Some(&fe.rules.http_response[..]),
        be.map(|r| &r.http_after_response[..]),
        Some(&fe.rules.http_after_response[..]),
    ];
    for rules in lists.into_iter().flatten() {
        edits.response_rules(rules, cx);
    }
    // A stored response is answered as stored: rules cannot refuse or replace it here.
    edits.denied = None;
    edits.returned = None;
}

/// A response being kept while it is relayed, to be stored once whole.
pub(super) struct Capture {
    cache: usize,
    lookup: Lookup,
    admission: Admission,
    head: Vec<u8>,
    /// The body as it came from the server (chunk framing included when it had it).
    body: Vec<u8>,
    chunked: bool,
    /// The most bytes an object may have: beyond, the capture is given up.
    limit: usize,
    given_up: bool,
}

impl Capture {
    /// Starts keeping the response whose head (as the client gets it, without framing) is
    /// `head`, when `cache-store` asked for it and the cache takes it.
    pub(super) fn start(
        s: &Session,
        cache: usize,
        facts: &ReqFacts,
        view: &ResponseView<'_>,
        head: Vec<u8>,
    ) -> Option<Capture> {
        let lookup = *facts.cache.clone()?;
        let store = &s.w.state().caches[cache];
        if lookup.method == crate::cache::Method::Unsafe && (200..400).contains(&view.status()) {
            // A successful PUT, POST, DELETE...: the object it changed goes.
            store.invalidate(&lookup.key);
            return None;
        }
        let now = crate::cache::unix_now();
        let fields: Vec<(&[u8], &[u8])> = view.headers().collect();
        let admission = crate::cache::admit(
            &store.conf,
            view.status(),
            fields.iter().copied(),
            &lookup,
            now,
        )?;
        let head = crate::cache::stored_head(&head);
        let limit = store.conf.max_object_size.saturating_sub(head.len());
        if let Framing::Length(n) = view.framing() {
            if n > limit as u64 {
                return None;
            }
        }
        Some(Capture {
            cache,
            lookup,
            admission,
            head,
            body: Vec::new(),
            chunked: view.framing() == Framing::Chunked,
            limit,
            given_up: false,
        })
    }

    /// Keeps body bytes as they pass (given up past the object size limit).
    pub(super) fn keep(&mut self, bytes: &[u8]) {
        if self.given_up {
            return;
        }
        if self.body.len() + bytes.len() > self.limit {
            self.given_up = true;
            self.body = Vec::new();
            return;
        }
        self.body.extend_from_slice(bytes);
    }

    /// Stores the whole response (once: the capture ends here).
    pub(super) fn finish(&mut self, w: &crate::runtime::Worker) {
        if std::mem::replace(&mut self.given_up, true) {
            return;
        }
        let kept = std::mem::take(&mut self.body);
        let body = if self.chunked {
            let mut plain = Vec::with_capacity(kept.len());
            let mut dec = sluice_http::ChunkedDecoder::new();
            match dec.decode(&kept, sluice_http::ChunkedOut::Raw, &mut plain) {
                Ok(_) if dec.is_done() => plain,
                _ => return,
            }
        } else {
            kept
        };
        let now = crate::cache::unix_now();
        let head = std::mem::take(&mut self.head);
        let entry = Entry::new(self.lookup.key, head, body, self.admission.clone(), now);
        w.state().caches[self.cache].insert(entry, now);
    }
}
