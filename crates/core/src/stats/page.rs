//! The statistics page (`stats enable`, `stats uri`, ...): HAProxy's layout, a table per
//! proxy with the same column groups and a colour per server state, readable without
//! JavaScript; `;csv`, `;json`, `;norefresh` and `;up` after the URI; basic authentication;
//! and, where `stats admin` allows, a form per backend whose POST changes servers' states
//! as the CLI does.

use std::fmt::Write as _;

use sluice_http::Answer;

use super::render::{csv, json};
use super::row::{Cell, Kind, Row};
use super::{collect, Filter};
use crate::conf::stats::{StatsPage, StatsRule};
use crate::runtime::{AdminState, OperState, Process};

/// What the page needs of a request.
#[derive(Debug)]
pub struct PageRequest<'a> {
    pub page: &'a StatsPage,
    pub method: &'a [u8],
    pub target: &'a [u8],
    /// The `Authorization` header.
    pub authorization: Option<&'a [u8]>,
    /// `stats admin`'s condition holds for this request.
    pub admin: bool,
    /// The first `stats http-request` rule whose condition holds, if any.
    pub rule: Option<&'a StatsRule>,
    /// The form of a POST.
    pub body: &'a [u8],
}

/// The whole response (head and body) for a request on the page.
pub fn answer(p: &Process, req: &PageRequest<'_>) -> Answer {
    if req.rule == Some(&StatsRule::Deny) {
        return response(
            403,
            &[("content-type", "text/plain")],
            b"403 Forbidden: this page is not available to this request.\n",
        );
    }
    // `allow` opens the page; `auth` asks for credentials even without `stats auth` users.
    let (check, realm) = match req.rule {
        Some(StatsRule::Allow) => (false, None),
        Some(StatsRule::Auth(realm)) => (true, realm.as_deref()),
        _ => (!req.page.auth.is_empty(), None),
    };
    if check && !authorized(req.page, req.authorization) {
        let realm = realm
            .or(req.page.realm.as_deref())
            .unwrap_or("sluice statistics");
        let body = "401 Unauthorized: this page needs a user name and a password.\n";
        return response(
            401,
            &[
                ("content-type", "text/plain"),
                ("www-authenticate", &format!("Basic realm=\"{realm}\"")),
            ],
            body.as_bytes(),
        );
    }
    let target = String::from_utf8_lossy(req.target);
    let rest = &target[req.page.uri().len().min(target.len())..];
    let opts: Vec<&str> = rest.split(';').skip(1).collect();
    if req.method.eq_ignore_ascii_case(b"POST") {
        if !req.admin {
            return response(
                403,
                &[("content-type", "text/plain")],
                b"403 Forbidden: server actions are not allowed here.\n",
            );
        }
        let status = act(p, req.body);
        let location = format!("{};st={status}", req.page.uri());
        return response(303, &[("location", &location)], b"");
    }
    // `;scope=TEXT`: only the proxies whose name contains it (case ignored), as HAProxy.
    let scope = opts
        .iter()
        .find_map(|o| o.strip_prefix("scope="))
        .map(|t| unescape(t).to_ascii_lowercase())
        .filter(|t| !t.is_empty());
    let mut rows = rows(p, req.page, opts.contains(&"up"));
    if let Some(t) = &scope {
        rows.retain(|r| r.name("pxname").to_ascii_lowercase().contains(t.as_str()));
    }
    let data = |content_type: &str, body: String| {
        response(
            200,
            &[
                ("content-type", content_type),
                ("cache-control", "no-cache"),
            ],
            body.as_bytes(),
        )
    };
    if opts.contains(&"csv") {
        return data("text/plain", csv(&rows));
    }
    if opts.contains(&"json") {
        return data("application/json", json(&rows));
    }
    let done = opts.iter().find_map(|o| o.strip_prefix("st="));
    let html = html(p, req, &rows, !opts.contains(&"norefresh"), done);
    response(
        200,
        &[
            ("content-type", "text/html; charset=utf-8"),
            ("cache-control", "no-cache"),
        ],
        html.as_bytes(),
    )
}

fn response(status: u16, headers: &[(&str, &str)], body: &[u8]) -> Answer {
    let mut out = Answer::with_body(status, body.to_vec());
    for (n, v) in headers {
        out.push(n.as_bytes(), v.as_bytes());
    }
    out
}

/// Basic authentication against the `stats auth` users.
fn authorized(page: &StatsPage, header: Option<&[u8]>) -> bool {
    let Some((user, pass)) = header.and_then(crate::auth::basic_credentials) else {
        return false;
    };
    page.auth.iter().any(|(u, p)| *u == user && *p == pass)
}

/// The rows the page shows: the proxies in `stats scope` (all without one); with `;up`,
/// only the servers that are up.
fn rows(p: &Process, page: &StatsPage, up_only: bool) -> Vec<Row> {
    let mut rows = collect(p, &Filter::default());
    rows.retain(|r| page.scope.is_empty() || page.scope.iter().any(|s| s == r.name("pxname")));
    if up_only {
        rows.retain(|r| r.kind != Kind::Server || r.name("status").starts_with("UP"));
    }
    rows
}

/// A server action from the page's form (`s=NAME&...&action=ACTION&b=#IID`); returns the
/// outcome word shown after the redirect.
fn act(p: &Process, form: &[u8]) -> &'static str {
    let form = String::from_utf8_lossy(form);
    let mut servers = Vec::new();
    let (mut action, mut backend, mut weight) = (None, None, None);
    for pair in form.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = unescape(v);
        match k {
            "s" => servers.push(v),
            "action" => action = Some(v),
            "b" => backend = v.trim_start_matches('#').parse::<u32>().ok(),
            "weight" => weight = Some(v),
            _ => {}
        }
    }
    let Some(b) = backend.and_then(|id| p.config.backends.iter().position(|be| be.id == id)) else {
        return "NONE";
    };
    let Some(action) = action else {
        return "NONE";
    };
    let be = &p.config.backends[b];
    let st = &p.state.backends[b];
    let mut done = 0;
    for name in &servers {
        let Some((s, _, _)) = st.live(be).find(|(_, srv, _)| &srv.name == name) else {
            continue;
        };
        let ok = match action.as_str() {
            "ready" => {
                crate::check::set_admin(p, b, s, AdminState::Ready);
                true
            }
            "drain" => {
                crate::check::set_admin(p, b, s, AdminState::Drain);
                true
            }
            "maint" => {
                crate::check::set_admin(p, b, s, AdminState::Maint);
                true
            }
            "dhlth" => crate::check::pause(p, b, s, false, true),
            "ehlth" => crate::check::pause(p, b, s, false, false),
            "hrunn" => {
                crate::check::force_health(p, b, s, OperState::Up);
                true
            }
            "hnolb" => {
                crate::check::force_health(p, b, s, OperState::Stopping);
                true
            }
            "hdown" => {
                crate::check::force_health(p, b, s, OperState::Down);
                true
            }
            "dagent" => crate::check::pause(p, b, s, true, true),
            "eagent" => crate::check::pause(p, b, s, true, false),
            "arunn" => crate::check::force_agent(p, b, s, true),
            "adown" => crate::check::force_agent(p, b, s, false),
            // sluice's addition to HAProxy's actions: the CLI's `set weight`.
            "weight" => {
                let configured = be.servers[s].weight;
                let w = weight.as_deref().and_then(|w| match w.strip_suffix('%') {
                    Some(pct) => pct.parse::<u32>().ok().map(|p| configured * p / 100),
                    None => w.parse::<u32>().ok(),
                });
                match w.filter(|&w| w <= 256) {
                    Some(w) => {
                        st.set_weight(s, w);
                        true
                    }
                    None => return "ERRP",
                }
            }
            _ => return "ERRP",
        };
        done += usize::from(ok);
    }
    match (done, servers.len()) {
        (0, _) => "NONE",
        (d, n) if d == n => "DONE",
        _ => "PART",
    }
}

/// Decodes `application/x-www-form-urlencoded` text.
fn unescape(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => {
                let hex = std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("");
                match u8::from_str_radix(hex, 16) {
                    Ok(x) => {
                        out.push(x);
                        i += 2;
                    }
                    Err(_) => out.push(b'%'),
                }
            }
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Text made safe for HTML.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_esc(&mut out, s);
    out
}

/// Appends text made safe for HTML.
fn push_esc(out: &mut String, s: &str) {
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// The CSS class of a row, from its status: the colour code the legend explains.
fn state_class(r: &Row) -> &'static str {
    let status = r.name("status");
    let backup = r.get("bck").and_then(Cell::as_num) == Some(1);
    match r.kind {
        Kind::Frontend => {
            if status == "OPEN" {
                "open"
            } else {
                "stopped"
            }
        }
        Kind::Backend => {
            if status == "UP" {
                "active-up"
            } else {
                "down"
            }
        }
        _ => match status.split(' ').next().unwrap_or("") {
            "MAINT" => "maint",
            "DRAIN" => "drain",
            "NOLB" => "nolb",
            "no" => "nocheck",
            "DOWN" if status.contains('/') => "going-up",
            "DOWN" => "down",
            "UP" if status.contains('/') => "going-down",
            "UP" if backup => "backup-up",
            "UP" => "active-up",
            _ => "nocheck",
        },
    }
}

const STYLE: &str = "body{font-family:arial,helvetica,sans-serif;font-size:12px;margin:8px}\
h1{font-size:18px;margin:0 0 4px}h2{font-size:14px;margin:4px 0}\
table.tbl{border-collapse:collapse;margin:12px 0;font-size:12px}\
table.tbl caption{text-align:left;font-weight:bold;padding:2px 6px;background:#20a0a0;color:#fff}\
table.tbl th,table.tbl td{border:1px solid #999;padding:1px 4px;text-align:right;white-space:nowrap}\
table.tbl th{background:#b0d0d0;text-align:center}table.tbl td.name{text-align:left}\
tr.open,tr.active-up{background:#c0ffc0}tr.backup-up{background:#c0c0ff}\
tr.going-down{background:#ffffa0}tr.going-up{background:#ffd020}\
tr.down,tr.stopped{background:#ff9090}tr.maint{background:#7070ff}\
tr.drain{background:#20a0ff}tr.nolb{background:#e0e0a0}tr.nocheck{background:#e0e0e0}\
tr.backend{font-weight:bold}.done{background:#a0ffa0;padding:4px}";

/// The column groups of the proxy tables: (group, [(title, column)]).
const GROUPS: &[(&str, &[(&str, &str)])] = &[
    (
        "Queue",
        &[("Cur", "qcur"), ("Max", "qmax"), ("Limit", "qlimit")],
    ),
    (
        "Session rate",
        &[("Cur", "rate"), ("Max", "rate_max"), ("Limit", "rate_lim")],
    ),
    (
        "Sessions",
        &[
            ("Cur", "scur"),
            ("Max", "smax"),
            ("Limit", "slim"),
            ("Total", "stot"),
            ("LbTot", "lbtot"),
            ("Last", "lastsess"),
        ],
    ),
    ("Bytes", &[("In", "bin"), ("Out", "bout")]),
    ("Denied", &[("Req", "dreq"), ("Resp", "dresp")]),
    (
        "Errors",
        &[("Req", "ereq"), ("Conn", "econ"), ("Resp", "eresp")],
    ),
    ("Warnings", &[("Retr", "wretr"), ("Redis", "wredis")]),
    (
        "Server",
        &[
            ("Status", "status"),
            ("LastChk", "check_status"),
            ("Wght", "weight"),
            ("Act", "act"),
            ("Bck", "bck"),
            ("Chk", "chkfail"),
            ("Dwn", "chkdown"),
            ("Dwntme", "downtime"),
            ("Thrtle", "throttle"),
        ],
    ),
];

const ACTIONS: &[(&str, &str)] = &[
    ("ready", "Set state to READY"),
    ("drain", "Set state to DRAIN"),
    ("maint", "Set state to MAINT"),
    ("dhlth", "Health: disable checks"),
    ("ehlth", "Health: enable checks"),
    ("hrunn", "Health: force UP"),
    ("hnolb", "Health: force NOLB"),
    ("hdown", "Health: force DOWN"),
    ("dagent", "Agent: disable checks"),
    ("eagent", "Agent: enable checks"),
    ("arunn", "Agent: force UP"),
    ("adown", "Agent: force DOWN"),
    ("weight", "Set the weight to"),
];

/// Appends a cell as the page shows it.
fn push_cell(h: &mut String, r: &Row, col: usize) {
    match &r.cells[col] {
        Some(Cell::Num(n)) if col == *LASTSESS && *n < 0 => {}
        Some(Cell::Num(n)) => {
            let _ = write!(h, "{n}");
        }
        Some(Cell::Text(t)) if col == *CHECK_STATUS => {
            push_esc(h, t);
            if let Some(ms) = r.get("check_duration").and_then(Cell::as_num) {
                let _ = write!(h, " in {ms}ms");
            }
        }
        Some(Cell::Text(t)) => push_esc(h, t),
        None => {}
    }
}

static LASTSESS: std::sync::LazyLock<usize> =
    std::sync::LazyLock::new(|| super::fields::pos("lastsess"));
static CHECK_STATUS: std::sync::LazyLock<usize> =
    std::sync::LazyLock::new(|| super::fields::pos("check_status"));

fn html(
    p: &Process,
    req: &PageRequest<'_>,
    rows: &[Row],
    refresh: bool,
    done: Option<&str>,
) -> String {
    let page = req.page;
    let mut h = String::with_capacity(16 * 1024 + rows.len() * 1024);
    h.push_str("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">");
    h.push_str("<title>Statistics Report for sluice</title>");
    if let (true, Some(r)) = (refresh, page.refresh) {
        let _ = write!(
            h,
            "<meta http-equiv=\"refresh\" content=\"{}\">",
            r.as_secs().max(1)
        );
    }
    let _ = write!(h, "<style>{STYLE}</style></head><body>");
    if page.hide_version {
        h.push_str("<h1>sluice</h1>");
    } else {
        let _ = write!(h, "<h1>sluice version {}</h1>", env!("CARGO_PKG_VERSION"));
    }
    let _ = write!(h, "<h2>Statistics Report for pid {}", std::process::id());
    if let Some(node) = &page.show_node {
        let name = node.clone().unwrap_or_else(|| p.config.global.node_name());
        let _ = write!(h, " on {}", esc(&name));
    }
    h.push_str("</h2>");
    let desc = page.show_desc.as_ref().map(|d| {
        d.as_deref()
            .or(p.config.global.description.as_deref())
            .unwrap_or_default()
    });
    if let Some(desc) = desc.filter(|d| !d.is_empty()) {
        let _ = write!(h, "<p class=\"desc\">{}</p>", esc(desc));
    }
    let _ = write!(
        h,
        "<p id=\"process\">uptime = {}; system limits: maxconn = {}; current conns = {}; threads = {}</p>",
        super::info::uptime_text(p.started.elapsed().as_secs()),
        p.admission.global_limit(),
        p.active_total(),
        p.threads.len()
    );
    if let Some(st) = done {
        let _ = write!(
            h,
            "<p class=\"done\" id=\"action-result\">Action processed: {}</p>",
            esc(st)
        );
    }
    if page.show_legends {
        h.push_str("<table class=\"tbl\" id=\"legend\"><caption>Legend</caption>");
        for (class, what) in [
            ("active-up", "active UP"),
            ("backup-up", "backup UP"),
            ("going-down", "UP, going down"),
            ("going-up", "DOWN, going up"),
            ("down", "DOWN"),
            ("nolb", "NOLB (no new traffic)"),
            ("drain", "DRAIN"),
            ("maint", "MAINT"),
            ("nocheck", "not checked"),
        ] {
            let _ = write!(
                h,
                "<tr class=\"{class}\"><td class=\"name\">{what}</td></tr>"
            );
        }
        h.push_str("</table>");
    }
    // One table per proxy: its rows are consecutive, in configuration order.
    let mut i = 0;
    while i < rows.len() {
        let name = rows[i].name("pxname").to_string();
        let mut j = i;
        while j < rows.len() && rows[j].name("pxname") == name {
            j += 1;
        }
        let desc = proxy_description(p, &rows[i]);
        proxy_table(&mut h, req, &rows[i..j], desc);
        i = j;
    }
    h.push_str("</body></html>\n");
    h
}

/// The `description` of the proxy a row belongs to, if it has one.
fn proxy_description<'p>(p: &'p Process, row: &Row) -> Option<&'p str> {
    let name = row.name("pxname");
    let fe = p.config.frontends.iter().find(|f| f.name == name);
    let be = p.config.backends.iter().find(|b| b.name == name);
    fe.and_then(|f| f.stats.description.as_deref())
        .or_else(|| be.and_then(|b| b.stats.description.as_deref()))
}

fn proxy_table(h: &mut String, req: &PageRequest<'_>, rows: &[Row], desc: Option<&str>) {
    let name = rows[0].name("pxname");
    let iid = rows[0].iid;
    let admin = req.admin && rows.iter().any(|r| r.kind == Kind::Server);
    if admin {
        let _ = write!(
            h,
            "<form method=\"post\" action=\"{}\">",
            esc(req.page.uri())
        );
    }
    let _ = write!(
        h,
        "<table class=\"tbl\" id=\"px-{}\" data-proxy=\"{}\"><caption>{}{}</caption><tr><th rowspan=\"2\">{}</th>",
        esc(name),
        esc(name),
        esc(name),
        desc.map(|d| format!(" <span class=\"desc\">{}</span>", esc(d)))
            .unwrap_or_default(),
        if admin { "" } else { "&nbsp;" }
    );
    for (group, cols) in GROUPS {
        let _ = write!(h, "<th colspan=\"{}\">{group}</th>", cols.len());
    }
    h.push_str("</tr><tr>");
    for (_, cols) in GROUPS {
        for (title, _) in *cols {
            let _ = write!(h, "<th>{title}</th>");
        }
    }
    h.push_str("</tr>");
    let columns: Vec<usize> = GROUPS
        .iter()
        .flat_map(|(_, cols)| cols.iter().map(|(_, c)| super::fields::pos(c)))
        .collect();
    for r in rows {
        let sv = r.name("svname");
        let kind = match r.kind {
            Kind::Frontend => "frontend",
            Kind::Backend => "backend",
            _ => "server",
        };
        let _ = write!(
            h,
            "<tr class=\"{} {kind}\" data-server=\"{}\" data-status=\"{}\"><td class=\"name\">",
            state_class(r),
            esc(sv),
            esc(r.name("status"))
        );
        if admin && r.kind == Kind::Server {
            let _ = write!(
                h,
                "<input type=\"checkbox\" name=\"s\" value=\"{}\"> ",
                esc(sv)
            );
        }
        let _ = write!(h, "{}</td>", esc(sv));
        for &col in &columns {
            h.push_str("<td>");
            push_cell(h, r, col);
            h.push_str("</td>");
        }
        h.push_str("</tr>");
    }
    h.push_str("</table>");
    if admin {
        h.push_str("Choose the action to perform on the checked servers: <select name=\"action\">");
        for (value, label) in ACTIONS {
            let _ = write!(h, "<option value=\"{value}\">{label}</option>");
        }
        let _ = write!(
            h,
            "</select> <input type=\"text\" name=\"weight\" size=\"4\" placeholder=\"weight\"><input type=\"hidden\" name=\"b\" value=\"#{iid}\"> <input type=\"submit\" value=\"Apply\"></form>"
        );
    }
}
