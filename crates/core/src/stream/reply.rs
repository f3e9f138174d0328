//! The answers the proxy makes itself (`use-service` pages, `monitor-uri`, the
//! `http-after-response` rules over a local answer) as [`Answer`]s, which the client's codec
//! writes (`Session::write_page`).

use sluice_http::{Answer, RequestView, ResponseView};

use super::heads::{answer_fields, local_response, Edits};
use super::session::Session;
use crate::rules::Service;
use crate::sample::Ctx;
use crate::stats;

/// The response of a built-in service.
pub(super) fn serve(s: &Session, service: Service, req: &RequestView<'_>) -> Answer {
    match service {
        Service::PrometheusExporter => {
            let target = req.target();
            let query = target
                .iter()
                .position(|&b| b == b'?')
                .map_or(&b""[..], |i| &target[i + 1..]);
            let scope = stats::prometheus::Scope::from_query(&String::from_utf8_lossy(query));
            let body = stats::prometheus::render(&s.w.process, scope);
            local_response(
                200,
                Some("text/plain; version=0.0.4; charset=utf-8"),
                body.as_bytes(),
            )
        }
    }
}

/// Whether a request for `target` asks for `monitor-uri` `uri`, as HAProxy compares
/// them: a URI written as a path matches the target's path (and query), whatever its form;
/// any other matches the target as sent.
pub(super) fn monitor_matches(uri: &[u8], target: &[u8]) -> bool {
    (uri.first() == Some(&b'/') && uri == origin_form(target)) || uri == target
}

/// The path and query of a request target in absolute form (`http://host/p?q` gives
/// `/p?q`), as HAProxy compares `monitor-uri`; any other form as it is.
pub(super) fn origin_form(target: &[u8]) -> &[u8] {
    let has = |scheme: &[u8]| {
        target
            .get(..scheme.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(scheme))
    };
    let after_scheme = if has(b"http://") {
        &target[7..]
    } else if has(b"https://") {
        &target[8..]
    } else {
        return target;
    };
    match after_scheme.iter().position(|&b| b == b'/') {
        Some(i) => &after_scheme[i..],
        None => b"/",
    }
}

/// A response the proxy wrote itself, through the `http-after-response` rules of the
/// backend (if any) then the frontend. `req`: the request, when still buffered.
pub(super) fn after_response(
    s: &Session,
    backend: Option<usize>,
    req: Option<&RequestView<'_>>,
    page: Answer,
) -> Answer {
    let config = s.w.config();
    let be_rules = backend.map_or(&[][..], |b| &config.backends[b].rules.http_after_response);
    let fe_rules = &s.frontend().rules.http_after_response;
    if page.silent || (be_rules.is_empty() && fe_rules.is_empty()) {
        return page;
    }
    let view = ResponseView::answer(&page);
    let cx = Ctx {
        backend,
        req,
        res: Some(&view),
        on_response: true,
        ..s.sample_ctx_base()
    };
    let mut edits = Edits::default();
    for rules in [be_rules, fe_rules] {
        edits.response_rules(rules, &cx);
    }
    let mut edited = answer_fields(&view, &edits, (view.framing(), !view.must_close()));
    edited.body = page.body;
    edited
}

#[cfg(test)]
mod tests {
    use super::origin_form;

    #[test]
    fn an_absolute_target_is_compared_by_its_path() {
        assert_eq!(origin_form(b"http://h.test/up?x"), b"/up?x");
        assert_eq!(origin_form(b"HTTPS://h.test:8443/up"), b"/up");
        assert_eq!(origin_form(b"http://h.test"), b"/");
        assert_eq!(origin_form(b"/up"), b"/up");
        assert_eq!(origin_form(b"http:/x"), b"http:/x");
    }
}
