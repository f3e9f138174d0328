//! Lowers parsed sections into a validated [`Config`] that the workers run.
//!
//! Each feature module exports its keyword table; this module only lists the tables and
//! applies HAProxy's section rules: `defaults` settings are copied into every proxy that
//! follows, `listen` is a frontend and a backend of the same name, and references between
//! proxies (`use_backend`, `default_backend`) are resolved by name. The result is plain data:
//! workers never see the keyword-level structures.

use sluice_config::{
    dispatch, parse_files, parse_str, ConfigError, Keyword, KwError, Scope, Section, SectionKind,
};

use crate::conf::stream::Mode;
use crate::conf::{one_arg, Backend, Config, Frontend, GlobalConf, Loc, ProxyConf};
use crate::stick::TableConf;
use crate::{
    acl, backend, balance, check, compression, control, cookie, errorpages, filters, log, peers,
    pending, persist, pool, rules, sockbuf, stats, stick, tls,
};
use crate::{stream, worker};

mod mode;

/// Keywords about the proxy section itself.
const SECTION_KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "disabled",
        scope: Scope::PROXY,
        help: "disabled: the proxy is checked but not started (a frontend listens on nothing, a backend has no server)",
        parse: |c, a| sluice_config::no_args(a).map(|_| c.disabled = true),
    },
    Keyword {
        name: "enabled",
        scope: Scope::PROXY,
        help: "enabled: undo an inherited 'disabled'",
        parse: |c, a| sluice_config::no_args(a).map(|_| c.disabled = false),
    },
    Keyword {
    name: "id",
    scope: Scope::FE_BE,
    help: "id N: the proxy's stable numeric identifier (default: the next free one from 2, as HAProxy)",
    parse: |c, a| {
        let v = one_arg(a, "a positive integer")?;
        let id = v
            .parse::<u32>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| KwError::bad(1, v, "expects a positive integer"))?;
        c.id = Some(id);
        Ok(())
    },
}
];

/// The global section's keyword tables, each with the family the configuration reference
/// (docs/configuration.md) files it under.
const GLOBAL_TABLES: &[(&str, &[Keyword<GlobalConf>])] = &[
    ("Process and workers", worker::GLOBAL_KEYWORDS),
    ("Process and workers", worker::cpu_map::GLOBAL_KEYWORDS),
    ("Sockets and buffers", sockbuf::GLOBAL_KEYWORDS),
    ("Accepting connections", worker::listener::GLOBAL_KEYWORDS),
    ("Process control", control::GLOBAL_KEYWORDS),
    ("Process control", control::FLAG_KEYWORDS),
    ("Process control", control::SATISFIED_KEYWORDS),
    (
        "Server state across reloads",
        control::state_file::GLOBAL_KEYWORDS,
    ),
    ("Rules, variables and samples", rules::GLOBAL_KEYWORDS),
    ("Health checks", check::GLOBAL_KEYWORDS),
    ("HTTP and streams", stream::keywords::GLOBAL_KEYWORDS),
    ("HTTP/2", stream::h2::GLOBAL_KEYWORDS),
    ("HTTP/2", stream::h2::GLOBAL_FLAG_KEYWORDS),
    ("HTTP/3 and QUIC", stream::h3::GLOBAL_KEYWORDS),
    ("Compression", compression::GLOBAL_KEYWORDS),
    ("Runtime CLI", control::cli::GLOBAL_KEYWORDS),
    ("Server connection pools", pool::GLOBAL_KEYWORDS),
    ("Logging", log::GLOBAL_KEYWORDS),
    ("Logging", log::GLOBAL_SETTINGS_KEYWORDS),
    ("TLS", tls::GLOBAL_KEYWORDS),
    ("TLS", tls::TUNE_KEYWORDS),
    ("TLS", tls::CHAIN_KEYWORDS),
    ("TLS", tls::OPENSSL_ONLY_KEYWORDS),
    ("Peers", peers::GLOBAL_KEYWORDS),
    ("Statistics", stats::GLOBAL_KEYWORDS),
    ("Splicing", crate::transport::splice::GLOBAL_KEYWORDS),
    ("Not supported yet", pending::GLOBAL_KEYWORDS),
];

/// The proxy sections' keyword tables, with their families (as [`GLOBAL_TABLES`]).
const PROXY_TABLES: &[(&str, &[Keyword<ProxyConf>])] = &[
    ("Proxies", SECTION_KEYWORDS),
    ("Accepting connections", worker::listener::KEYWORDS),
    ("Modes, timeouts and HTTP", stream::keywords::KEYWORDS),
    (
        "Modes, timeouts and HTTP",
        stream::keywords::OPTION_KEYWORDS,
    ),
    ("TCP keep-alive", crate::keepalive::KEYWORDS),
    ("TCP keep-alive", crate::keepalive::OPTION_KEYWORDS),
    ("Backends and servers", backend::KEYWORDS),
    ("Backends and servers", backend::OPTION_KEYWORDS),
    ("Balancing", balance::KEYWORDS),
    ("Balancing", balance::OPTION_KEYWORDS),
    ("Health checks", check::KEYWORDS),
    ("Health checks", check::OPTION_KEYWORDS),
    ("ACLs", acl::KEYWORDS),
    ("Rules", rules::KEYWORDS),
    ("Compression", compression::KEYWORDS),
    ("Filters", filters::KEYWORDS),
    ("Cookie persistence", cookie::KEYWORDS),
    ("Cookie persistence", cookie::OPTION_KEYWORDS),
    ("Persistence", persist::KEYWORDS),
    ("Stick tables", stick::KEYWORDS),
    ("Error pages", errorpages::KEYWORDS),
    ("Logging", log::KEYWORDS),
    ("Logging", log::OPTION_KEYWORDS),
    ("Statistics", stats::KEYWORDS),
    ("Email alerts", crate::mail::KEYWORDS),
    ("Splicing", crate::transport::splice::PROXY_KEYWORDS),
    ("Server state across reloads", control::state_file::KEYWORDS),
    ("Not supported yet", pending::PROXY_KEYWORDS),
];

/// The tables of `families`, as the dispatcher reads them.
fn tables<C>(families: &[(&str, &'static [Keyword<C>])]) -> Vec<&'static [Keyword<C>]> {
    families.iter().map(|(_, t)| *t).collect()
}

/// One family of the configuration reference: its title and its keywords (name, scope,
/// one line of meaning), in table order.
#[derive(Debug)]
pub struct Family {
    pub title: &'static str,
    pub keywords: Vec<(&'static str, Scope, &'static str)>,
}

/// Every keyword the configuration accepts, by family: the global section's, then the
/// proxy sections'. The configuration reference (docs/configuration.md) is made from it,
/// and a test checks that the reference says what this says.
pub fn reference() -> (Vec<Family>, Vec<Family>) {
    fn families<C>(tables: &[(&'static str, &'static [Keyword<C>])]) -> Vec<Family> {
        let mut out: Vec<Family> = Vec::new();
        for (title, table) in tables {
            let rows = table.iter().map(|k| (k.name, k.scope, k.help));
            match out.iter_mut().find(|f| f.title == *title) {
                Some(f) => f.keywords.extend(rows),
                None => out.push(Family {
                    title,
                    keywords: rows.collect(),
                }),
            }
        }
        out
    }
    (families(GLOBAL_TABLES), families(PROXY_TABLES))
}

/// Reads, parses and validates configuration files.
pub fn load(paths: &[String]) -> Result<Config, Vec<ConfigError>> {
    build(parse_files(paths)?)
}

/// Parses and validates configuration text (used by tests and the embedded demo).
pub fn load_str(file: &str, text: &str) -> Result<Config, Vec<ConfigError>> {
    build(parse_str(file, text, &|k| std::env::var(k).ok())?)
}

struct Proxy {
    kind: SectionKind,
    name: String,
    header: Loc,
    conf: ProxyConf,
}

fn build(sections: Vec<Section>) -> Result<Config, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let global_tables = tables(GLOBAL_TABLES);
    let mut global = GlobalConf::default();
    let mut defaults = ProxyConf::default();
    let mut named: std::collections::HashMap<String, ProxyConf> = Default::default();
    let mut error_sets = crate::conf::errorpages::ErrorSets::default();
    let mut proxies: Vec<Proxy> = Vec::new();
    let mut peer_sections = Vec::new();
    let mut userlists = Vec::new();
    let mut caches = Vec::new();
    let mut mailers: Vec<crate::conf::mail::Mailers> = Vec::new();
    let mut resolvers: Vec<crate::conf::resolvers::Resolvers> = Vec::new();
    // The defaults section each proxy takes its settings from (`None`: an anonymous one),
    // to check how defaults with rules are shared.
    let mut defaults_name: Option<String> = None;
    let mut users_of: Vec<(String, SectionKind, Loc)> = Vec::new();
    let book = crate::conf::patterns::PatternBook::default();
    for section in &sections {
        let header = Loc {
            file: section.header.file.clone(),
            line: section.header.line,
        };
        match section.kind {
            SectionKind::Global => {
                for line in &section.lines {
                    if let Err(e) =
                        dispatch(&global_tables, &mut global, line, Scope::GLOBAL, "global")
                    {
                        errors.push(e);
                    }
                }
            }
            // Read once the global section is (its `localpeer` names the local peer).
            SectionKind::Peers => peer_sections.push(section),
            SectionKind::Userlist => {
                let list = crate::auth::parse_section(section, &mut errors);
                if userlists
                    .iter()
                    .any(|l: &crate::auth::Userlist| l.name == list.name)
                {
                    errors.push(header.error(format!("userlist '{}' is defined twice", list.name)));
                }
                userlists.push(list);
            }
            SectionKind::Cache => {
                if let Some(c) = crate::cache::parse_section(section, &mut errors) {
                    if caches
                        .iter()
                        .any(|x: &crate::cache::CacheConf| x.name == c.name)
                    {
                        errors.push(header.error(format!("Duplicate cache name '{}'", c.name)));
                    }
                    caches.push(c);
                }
            }
            SectionKind::Mailers => {
                if let Some(m) = crate::mail::parse_section(section, &mut errors) {
                    if mailers.iter().any(|x| x.name == m.name) {
                        errors.push(header.error(format!("mailers '{}' is defined twice", m.name)));
                    }
                    mailers.push(m);
                }
            }
            SectionKind::Resolvers => {
                if let Some(r) = crate::dns::parse_section(section, &mut errors) {
                    if resolvers.iter().any(|x| x.name == r.name) {
                        errors
                            .push(header.error(format!("resolvers '{}' is defined twice", r.name)));
                    }
                    resolvers.push(r);
                }
            }
            SectionKind::HttpErrors => {
                let name = section.name.clone().unwrap_or_default();
                let mut pages = Vec::new();
                for line in &section.lines {
                    let loc = Loc {
                        file: line.file.clone(),
                        line: line.line,
                    };
                    match line.words[0].as_str() {
                        "errorfile" => match errorpages::parse_errorfile(&line.words[1..]) {
                            Ok((code, page)) => {
                                pages.push((code, errorpages::Page::Static(page.into())))
                            }
                            Err(e) => errors.push(
                                loc.error(format!("'errorfile' in 'http-errors' section: {e}")),
                            ),
                        },
                        other => errors.push(loc.error(format!(
                            "unknown keyword '{other}' in 'http-errors' section (expects errorfile)"
                        ))),
                    }
                }
                if error_sets.insert(name.clone(), pages).is_some() {
                    errors.push(header.error(format!("http-errors '{name}' is defined twice")));
                }
            }
            SectionKind::Defaults => {
                // `defaults [NAME] [from OTHER]`.
                let (name, from) = match (section.name.as_deref(), &section.args[..]) {
                    (Some("from"), [other]) => (None, Some(other.as_str())),
                    (name, []) => (name, None),
                    (name, [kw, other]) if kw == "from" => (name, Some(other.as_str())),
                    _ => {
                        errors.push(header.error("expects 'defaults [NAME] [from DEFAULTS]'"));
                        continue;
                    }
                };
                defaults = match from {
                    None => ProxyConf::default(),
                    Some(other) => match named.get(other) {
                        Some(d) => ProxyConf::clone(d),
                        None => {
                            errors.push(header.error(format!(
                                "no defaults section named '{other}' before this one"
                            )));
                            continue;
                        }
                    },
                };
                parse_proxy_lines(section, &mut defaults, Scope::DEFAULTS, &book, &mut errors);
                defaults_name = name.map(str::to_string);
                if let Some(n) = name {
                    if named.insert(n.to_string(), defaults.clone()).is_some() {
                        errors.push(header.error(format!("defaults '{n}' is defined twice")));
                    }
                }
            }
            kind => {
                let name = section.name.clone().unwrap_or_default();
                if proxies
                    .iter()
                    .any(|p| p.name == name && overlaps(p.kind, kind))
                {
                    errors.push(header.error(format!("{} '{name}' is defined twice", kind.name())));
                }
                // `from NAME`: a named defaults section instead of the last one.
                let mut args = &section.args[..];
                let mut from_name = defaults_name.clone();
                let mut conf = match args.iter().position(|a| a == "from") {
                    Some(i) => {
                        let Some(other) = args.get(i + 1) else {
                            errors.push(
                                header.error("'from' expects the name of a defaults section"),
                            );
                            continue;
                        };
                        let base = match named.get(other) {
                            Some(d) => d.clone(),
                            None => {
                                errors.push(header.error(format!(
                                    "no defaults section named '{other}' before this one"
                                )));
                                continue;
                            }
                        };
                        args = &args[..i];
                        from_name = Some(other.clone());
                        base
                    }
                    None => defaults.clone(),
                };
                // The HTTP check rules so far are the defaults': the proxy's first own one
                // starts a new set, as in HAProxy.
                conf.check.http_rules_inherited = true;
                // Rules at this point are the defaults' own.
                let defaults_rules = conf.rules.sets.all().next().is_some();
                if let Some(n) = from_name.filter(|_| defaults_rules) {
                    users_of.push((n, kind, header.clone()));
                }
                if kind != SectionKind::Listen && !args.is_empty() {
                    errors.push(header.error(format!(
                        "unexpected '{}' after the {} name (expects 'from DEFAULTS')",
                        args[0],
                        kind.name()
                    )));
                }
                let scope = match kind {
                    SectionKind::Frontend => Scope::FRONTEND,
                    SectionKind::Backend => Scope::BACKEND,
                    _ => Scope::FE_BE,
                };
                if kind == SectionKind::Listen {
                    if let Some(addr) = args.first() {
                        conf.at = header.clone();
                        if let Err(e) =
                            worker::listener::add_bind(&mut conf, std::slice::from_ref(addr))
                        {
                            errors.push(header.error(format!("listen address: {e}")));
                        }
                    }
                }
                parse_proxy_lines(section, &mut conf, scope, &book, &mut errors);
                let sets = &conf.rules.sets;
                if kind == SectionKind::Backend
                    && !(sets.tcp_connection.is_empty() && sets.tcp_session.is_empty())
                {
                    errors.push(header.error(
                        "backend: tcp-request connection and session rules belong in a frontend or listen section",
                    ));
                }
                proxies.push(Proxy {
                    kind,
                    name,
                    header,
                    conf,
                });
            }
        }
    }
    // A defaults section with rules serves frontends or backends, not both, and no listen
    // (HAProxy 2.6: its rules would otherwise run twice or in the wrong place).
    for (name, kind, at) in &users_of {
        let fe_side = |k: &SectionKind| matches!(k, SectionKind::Frontend | SectionKind::Listen);
        let be_side = |k: &SectionKind| matches!(k, SectionKind::Backend | SectionKind::Listen);
        let others = users_of.iter().filter(|(n, ..)| n == name);
        let mixed = *kind == SectionKind::Listen
            || (fe_side(kind) && others.clone().any(|(_, k, _)| be_side(k)))
            || (be_side(kind) && others.clone().any(|(_, k, _)| fe_side(k)));
        if mixed {
            errors.push(at.error(format!(
                "frontends and backends cannot inherit from the same defaults section if it defines TCP/HTTP rules (defaults '{name}'; a listen section cannot use it at all)"
            )));
        }
    }
    // `errorfiles NAME` may name a section defined anywhere in the configuration.
    for p in &mut proxies {
        if let Err((at, e)) = p.conf.errors.resolve(&error_sets) {
            errors.push(at.error(e));
        }
        let rules = &mut p.conf.rules.sets;
        if let Err((at, e)) = crate::errorpages::resolve_rule_pages(rules, &error_sets) {
            errors.push(at.error(e));
        }
    }
    // HAProxy 2.6's experimental actions need `expose-experimental-directives` first.
    if !global.experimental {
        let rules = proxies.iter().flat_map(|p| p.conf.rules.sets.all());
        for rule in rules {
            if let (Some(kw), Some(at)) = (crate::rules::experimental(rule), &rule.at) {
                errors.push(at.error(format!(
                    "'{kw}' is experimental: it needs 'expose-experimental-directives' in the global section"
                )));
            }
        }
    }
    let local = peers::local_name(&global);
    let mut peer_sets = (Vec::new(), Vec::new());
    let mut warnings = Vec::new();
    let mut removed_peers = Vec::new();
    for section in peer_sections {
        let (conf, tables) = peers::parse_section(section, &local, &mut errors, &mut warnings);
        match conf {
            Some(p) => peer_sets.0.push(p),
            None => removed_peers.push(section.name.clone().unwrap_or_default()),
        }
        peer_sets.1.extend(tables);
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    // Tables of proxies that named a removed `peers` section stay, unshared, as HAProxy's.
    for p in &mut proxies {
        if let Some(t) = p.conf.stick.as_mut() {
            if t.peers.as_ref().is_some_and(|n| removed_peers.contains(n)) {
                warnings.push(format!(
                    "Proxy '{}': unable to find local peer '{local}' in peers section '{}'.",
                    p.name,
                    t.peers.take().unwrap_or_default()
                ));
            }
        }
    }
    for p in &mut proxies {
        mode::strip_http((p.kind, &p.name), &mut p.conf, &mut warnings);
        warn_request_acls_in_responses(p.kind, &p.conf, &mut warnings);
        let max = global.log_settings.cookie_capture_max();
        log::clamp_cookie_capture((p.kind, &p.name), &mut p.conf, max, &mut warnings);
    }
    check_userlists(&proxies, &userlists, &mut errors);
    resolve_caches(&mut proxies, &caches, &mut errors);
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut config = lower(global, proxies, peer_sets, (&mailers, resolvers))?;
    config.warnings.splice(0..0, warnings);
    config.userlists = userlists;
    config.caches = caches;
    config.patterns = book.refs();
    Ok(config)
}

/// Every `cache-use` and `cache-store` rule names a `cache` section: its index is set.
fn resolve_caches(
    proxies: &mut [Proxy],
    caches: &[crate::cache::CacheConf],
    errors: &mut Vec<ConfigError>,
) {
    use crate::conf::rules::Action;
    for p in proxies {
        let sets = &mut p.conf.rules.sets;
        for rule in sets
            .http_request
            .iter_mut()
            .chain(sets.http_response.iter_mut())
        {
            let (Action::CacheUse(c) | Action::CacheStore(c)) = &mut rule.action else {
                continue;
            };
            match caches.iter().position(|x| x.name == c.name) {
                Some(i) => c.index = i,
                None => errors.push(p.header.error(format!(
                    "{} '{}': unable to find the cache '{}' referenced by a cache rule",
                    p.kind.name(),
                    p.name,
                    c.name
                ))),
            }
        }
    }
}

/// Every userlist an ACL names (`http_auth(L)`, `http_auth_group(L)`) exists.
fn check_userlists(
    proxies: &[Proxy],
    lists: &[crate::auth::Userlist],
    errors: &mut Vec<ConfigError>,
) {
    use crate::conf::sample::Fetch;
    for p in proxies {
        let r = &p.conf.rules;
        let conds = r
            .sets
            .all()
            .filter_map(|rule| rule.cond.as_ref())
            .chain(r.switching.iter().filter_map(|(_, c, _)| c.as_ref()));
        let acls = conds
            .flat_map(|c| c.groups.iter().flatten().flat_map(|t| &t.acls))
            .chain(r.acls.iter().map(|(_, a)| a));
        for acl in acls {
            if let Fetch::HttpAuth(name) | Fetch::HttpAuthGroup(name) = &acl.expr.fetch {
                if !lists.iter().any(|l| l.name == name.name) {
                    errors.push(p.header.error(format!(
                        "{} '{}': no userlist named '{}'",
                        p.kind.name(),
                        p.name,
                        name.name
                    )));
                }
            }
        }
    }
}

/// HAProxy's warning for an ACL of a response rule that reads the request's head: there,
/// it never matches (the fetch fails; see `Fetch::needs_request_head`).
fn warn_request_acls_in_responses(kind: SectionKind, c: &ProxyConf, warnings: &mut Vec<String>) {
    let whose = format!("{} http-response header rule", mode::kind_str(kind));
    let sets = &c.rules.sets;
    for rule in sets.http_response.iter().chain(&sets.http_after_response) {
        let (Some(cond), Some(at)) = (&rule.cond, &rule.at) else {
            continue;
        };
        for term in cond.groups.iter().flatten() {
            let Some(kw) = term.request_head_keyword() else {
                continue;
            };
            let what = match &term.name {
                Some(name) => format!(
                    "acl '{name}' will never match because it only involves keywords that are incompatible with '{whose}'"
                ),
                None => format!(
                    "anonymous acl will never match because it uses keyword '{kw}' which is incompatible with '{whose}'"
                ),
            };
            warn_once(warnings, at, vec![what]);
        }
    }
}

/// Adds each of `what` (said of the line at `at`) unless the same was said already: a list
/// in the global defaults is read for every bind or server that uses it.
/// Builds the TLS of a `peers` section: its listener's acceptor and the connectors to the
/// peers with `ssl`.
fn peers_tls(
    p: &mut stick::PeersConf,
    global: &GlobalConf,
    certs: &std::sync::Arc<crate::conf::tls::CertStore>,
    (errors, warnings): (&mut Vec<ConfigError>, &mut Vec<String>),
) {
    let mut skipped = Vec::new();
    if let Some(t) = &mut p.tls {
        let built = match t.ssl {
            true => tls::acceptor(t, &global.tls, certs, &mut skipped),
            false => Err("TLS options without 'ssl'".to_string()),
        };
        match built {
            Ok(a) => t.acceptor = Some(a),
            Err(e) => errors.push(p.at.error(format!("peers '{}', local peer: {e}", p.name))),
        }
    }
    for r in p.remotes.iter_mut().filter(|r| r.tls.ssl) {
        match tls::connector(&r.tls, &global.tls, r.addr, &mut skipped) {
            Ok(c) => r.connector = Some(c),
            Err(e) => {
                errors.push(p.at.error(format!("peers '{}', peer '{}': {e}", p.name, r.name)))
            }
        }
    }
    warn_once(warnings, &p.at, skipped);
}

fn warn_once(warnings: &mut Vec<String>, at: &Loc, what: Vec<String>) {
    for w in what {
        if !warnings.iter().any(|x| x.ends_with(&w)) {
            warnings.push(format!("parsing [{}:{}] : {w}", at.file, at.line));
        }
    }
}

fn overlaps(a: SectionKind, b: SectionKind) -> bool {
    a == b || a == SectionKind::Listen || b == SectionKind::Listen
}

fn parse_proxy_lines(
    section: &Section,
    conf: &mut ProxyConf,
    scope: Scope,
    book: &crate::conf::patterns::PatternBook,
    errors: &mut Vec<ConfigError>,
) {
    conf.rules.book = book.clone();
    let what = section.kind.name();
    // As HAProxy 2.6: rules only in named defaults sections.
    let anonymous = section.kind == SectionKind::Defaults && section.name.is_none();
    let proxy_tables = tables(PROXY_TABLES);
    for line in &section.lines {
        conf.at = Loc {
            file: line.file.clone(),
            line: line.line,
        };
        book.set_at(&conf.at);
        let rules = conf.rules.sets.all().count();
        if let Err(e) = dispatch(&proxy_tables, conf, line, scope, what) {
            errors.push(e);
        }
        if anonymous && conf.rules.sets.all().count() > rules {
            errors.push(line.error(format!(
                "'{}' not allowed in anonymous 'defaults' section (name it, and use it with 'from')",
                line.words[0]
            )));
        }
    }
}

/// Validates the proxies and assembles the configuration; `peers` are the `peers`
/// sections and their own tables.
fn lower(
    global: GlobalConf,
    proxies: Vec<Proxy>,
    (peers_confs, peer_tables): (Vec<stick::PeersConf>, Vec<TableConf>),
    (mailers, resolvers): (
        &[crate::conf::mail::Mailers],
        Vec<crate::conf::resolvers::Resolvers>,
    ),
) -> Result<Config, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    let nbthread = global.nbthread();
    // The certificate files this generation loads (and the CLI later replaces).
    let certs = std::sync::Arc::new(crate::conf::tls::CertStore::default());
    let ids = match assign_ids(&proxies) {
        Ok(ids) => ids,
        Err(e) => return Err(vec![e]),
    };
    let is_backend = |k: SectionKind| matches!(k, SectionKind::Backend | SectionKind::Listen);
    let backend_names: Vec<&str> = proxies
        .iter()
        .filter(|p| is_backend(p.kind))
        .map(|p| p.name.as_str())
        .collect();
    let mut backends = Vec::new();
    for (order, (p, &id)) in proxies
        .iter()
        .zip(&ids)
        .enumerate()
        .filter(|(_, (p, _))| is_backend(p.kind))
    {
        // A listen section's rules run once, on its frontend side.
        let mut conf = p.conf.clone();
        if p.kind == SectionKind::Listen {
            conf.rules = Default::default();
            conf.stream.forwardfor = None;
        }
        // A listen section's traces follow its streams from its frontend side.
        let traces = if p.kind == SectionKind::Listen {
            Vec::new()
        } else {
            let compresses = !conf.compression.algos.is_empty();
            let found = (&mut errors, &mut warnings);
            filters::lower(("backend", &p.name), &conf.filters, compresses, found)
        };
        let who = (p.kind.name(), p.name.as_str());
        let email = match crate::mail::lower(who, &conf.email, mailers, &mut warnings) {
            Ok(email) => email,
            Err(e) => {
                errors.push(p.header.error(e));
                None
            }
        };
        backends.push(Backend {
            order,
            stats: conf.stats.clone(),
            traces,
            email,
            ..backend::lower(&p.name, id, &conf)
        });
    }
    resolve_tracks(&proxies, &mut backends, &mut errors);
    let mut resolvers = resolvers;
    resolve_names(&proxies, &mut backends, &mut resolvers, &mut errors);
    for p in proxies.iter().filter(|p| is_backend(p.kind)) {
        let (found, said) = check::external_lines(p.kind.name(), &p.name, &p.conf.check, &global);
        errors.extend(found.into_iter().map(|e| p.header.error(e)));
        warnings.extend(said);
    }
    // A server without a port can only be checked on a port given for checks.
    for be in &mut backends {
        for i in 0..be.servers.len() {
            let srv = &mut be.servers[i];
            let portless = srv.port != crate::conf::backend::PortMap::Fixed;
            if portless && srv.check.as_ref().is_some_and(|c| c.port.is_none()) {
                warnings.push(format!(
                    "backend '{}', server '{}': server has neither service port nor check port. Check has been disabled.",
                    be.name, srv.name
                ));
                srv.check = None;
            }
        }
    }
    // TLS towards servers: roots read now, so that `-c` checks them.
    for (p, be) in proxies
        .iter()
        .filter(|p| is_backend(p.kind))
        .zip(backends.iter_mut())
    {
        // A check rule that connects with `ssl` needs the servers' TLS settings, as
        // `check-ssl` would.
        let ssl_rule = p.conf.check.uses_ssl();
        // (A disabled backend has none of its servers.)
        let count = be.servers.len();
        for (i, spec) in p.conf.backend.servers.iter().enumerate().take(count) {
            let srv = &mut be.servers[i];
            if spec.opts.h2 && p.conf.stream.mode == Mode::Tcp {
                errors.push(p.header.error(format!(
                    "{} '{}', server '{}': 'proto h2' needs mode http",
                    p.kind.name(),
                    p.name,
                    spec.name
                )));
            }
            if spec.opts.h2 && spec.opts.send_proxy.is_some() {
                errors.push(p.header.error(format!(
                    "{} '{}', server '{}': 'send-proxy' with 'proto h2' is not supported yet (an HTTP/2 connection is shared by many clients)",
                    p.kind.name(),
                    p.name,
                    spec.name
                )));
            }
            let mut skipped = Vec::new();
            let t = &spec.opts.tls;
            let built = tls::server_connectors(t, &global.tls, spec.addr, ssl_rule, &mut skipped);
            warn_once(&mut warnings, &p.header, skipped);
            match built {
                Ok((traffic, checks)) => {
                    srv.tls = traffic;
                    srv.check_tls = checks;
                }
                Err(e) => errors.push(p.header.error(format!(
                    "{} '{}', server '{}': {e}",
                    p.kind.name(),
                    p.name,
                    spec.name
                ))),
            }
        }
    }
    for (p, be) in proxies.iter().filter(|p| is_backend(p.kind)).zip(&backends) {
        for (name, _) in &be.persist.use_server {
            if !be.servers.iter().any(|s| s.name == name.name) {
                errors.push(p.header.error(format!(
                    "{} '{}': use-server names no server '{name}' of this backend",
                    p.kind.name(),
                    p.name
                )));
            }
        }
    }
    let mut frontends = Vec::new();
    let mut fe_locs = Vec::new();
    for (order, (p, &id)) in proxies
        .iter()
        .zip(&ids)
        .enumerate()
        .filter(|(_, (p, _))| matches!(p.kind, SectionKind::Frontend | SectionKind::Listen))
    {
        if p.conf.listen.binds.is_empty() {
            errors.push(p.header.error(format!(
                "{} '{}' has no 'bind' line",
                p.kind.name(),
                p.name
            )));
            continue;
        }
        if let Some(b) = p
            .conf
            .listen
            .binds
            .iter()
            .find(|b| b.threads.is_some_and(|(_, hi)| hi > nbthread))
        {
            errors.push(p.header.error(format!(
                "{} '{}': bind {} uses a thread above nbthread ({nbthread})",
                p.kind.name(),
                p.name,
                b.spec
            )));
            continue;
        }
        // TLS binds: certificates are read now, so that `-c` checks them.
        let mut listen = p.conf.listen.clone();
        let mut tls_ok = true;
        for b in &mut listen.binds {
            if let Some(e) = crate::stream::h3::check_bind(b, p.conf.stream.mode) {
                errors.push(b.at.error(format!("bind {}: {e}", b.spec)));
                tls_ok = false;
                continue;
            }
            // Early data only comes on sessions resumed from the cache.
            let early = b.tls.as_ref().is_some_and(|t| t.allow_0rtt)
                || (matches!(b.spec, crate::conf::listen::BindSpec::Quic(_))
                    && global.tls.bind.options.allow_0rtt);
            if early && global.tls.cachesize == Some(0) {
                warnings.push(format!(
                    "parsing [{}:{}] : 'allow-0rtt' on bind {} takes no early data with 'tune.ssl.cachesize 0' (only sessions resumed from the cache carry it).",
                    b.at.file, b.at.line, b.spec
                ));
            }
            // `alpn` on a clear bind: nothing to negotiate it in; HAProxy ignores it too.
            if let Some(t) = b.tls.as_ref().filter(|t| !t.ssl) {
                let alpn_only = tls::BindTls {
                    alpn: t.alpn.clone(),
                    ..Default::default()
                };
                if *t == alpn_only {
                    warnings.push(format!(
                        "parsing [{}:{}] : 'alpn' ignored on bind {} which has no 'ssl'.",
                        b.at.file, b.at.line, b.spec
                    ));
                    b.tls = None;
                }
            }
            if let Some(t) = &mut b.tls {
                let built = if t.ssl {
                    let mut skipped = Vec::new();
                    let built = tls::acceptor(t, &global.tls, &certs, &mut skipped);
                    warn_once(&mut warnings, &b.at, skipped);
                    built
                } else {
                    Err("TLS options without 'ssl'".to_string())
                };
                match built {
                    Ok(a) => t.acceptor = Some(a),
                    Err(e) => {
                        errors.push(b.at.error(format!("bind {}: {e}", b.spec)));
                        tls_ok = false;
                    }
                }
            }
        }
        if !tls_ok {
            continue;
        }
        let own = (p.kind == SectionKind::Listen).then_some(p.name.as_str());
        match rules::lower_frontend(&p.conf.rules, &backend_names, own) {
            Ok(rules) => {
                fe_locs.push((p.kind, p.header.clone()));
                let mut listen = listen.clone();
                if p.conf.disabled {
                    listen.binds.clear();
                }
                let compresses = !p.conf.compression.algos.is_empty();
                let found = (&mut errors, &mut warnings);
                let traces =
                    filters::lower((p.kind.name(), &p.name), &p.conf.filters, compresses, found);
                frontends.push(Frontend {
                    order,
                    disabled: p.conf.disabled,
                    id,
                    name: p.name.clone(),
                    listen,
                    stream: p.conf.stream.clone(),
                    rules,
                    monitor: p.conf.monitor.clone(),
                    stats: p.conf.stats.clone(),
                    compression: p.conf.compression.clone(),
                    traces,
                    errors: p.conf.errors.clone(),
                    log: p.conf.log.clone(),
                });
            }
            Err(e) => errors.push(e),
        }
    }
    // A frontend may only use backends that speak its mode.
    for (fe, (kind, header)) in frontends.iter().zip(&fe_locs) {
        let targets = fe
            .rules
            .switching
            .iter()
            .filter_map(|(_, b)| match b {
                crate::conf::rules::BackendRef::Fixed(b) => Some(*b),
                crate::conf::rules::BackendRef::Dynamic(_) => None,
            })
            .chain(fe.rules.default_backend);
        for b in targets {
            if let Some(be) = backends.get(b) {
                // An HTTP frontend cannot hand its requests to a TCP backend; a TCP
                // frontend may use an HTTP backend (its connections become HTTP there).
                if fe.stream.mode == Mode::Http && be.stream.mode == Mode::Tcp {
                    errors.push(header.error(format!(
                        "http {} '{}' cannot use tcp backend '{}' (see 'mode')",
                        kind.name(),
                        fe.name,
                        be.name,
                    )));
                }
            }
        }
    }
    check_tracking(&proxies, &peer_tables, &mut errors);
    for p in &proxies {
        if let Some(name) = p.conf.stick.as_ref().and_then(|t| t.peers.as_ref()) {
            if !peers_confs.iter().any(|c| &c.name == name) {
                errors.push(p.header.error(format!(
                    "{} '{}': stick-table names peers '{name}', which is not defined",
                    p.kind.name(),
                    p.name
                )));
            }
        }
    }
    // A table `stick` rules use names servers.
    let sticks_to = |name: &str| {
        proxies.iter().any(|q| {
            q.conf
                .persist
                .stick
                .iter()
                .any(|r| r.table.as_ref().map_or(&q.name, |t| &t.name) == name)
        })
    };
    let tables = proxies
        .iter()
        .filter_map(|p| {
            p.conf.stick.clone().map(|mut t| {
                t.name = p.name.clone();
                let server_id = crate::stick::Counter::ServerId;
                if sticks_to(&p.name) && !t.store.iter().any(|d| d.counter == server_id) {
                    t.store.push(crate::stick::DataType {
                        counter: server_id,
                        period: None,
                    });
                }
                t
            })
        })
        .chain(peer_tables)
        .collect();
    let mut peers_confs = peers_confs;
    for p in &mut peers_confs {
        peers_tls(p, &global, &certs, (&mut errors, &mut warnings));
    }
    if errors.is_empty() {
        Ok(Config {
            global,
            frontends,
            backends,
            tables,
            peers: peers_confs,
            resolvers,
            userlists: Vec::new(),
            caches: Vec::new(),
            certs,
            patterns: Vec::new(),
            warnings,
        })
    } else {
        Err(errors)
    }
}

/// Every `track-sc` and `stick` rule has a table: the one it names, or its proxy's own.
fn check_tracking(proxies: &[Proxy], peer_tables: &[TableConf], errors: &mut Vec<ConfigError>) {
    for p in proxies {
        let tracks = p
            .conf
            .rules
            .sets
            .all()
            .filter_map(|rule| match &rule.action {
                crate::conf::rules::Action::Track { slot, table, .. } => {
                    Some((format!("track-sc{slot}"), table))
                }
                _ => None,
            });
        let sticks = p
            .conf
            .persist
            .stick
            .iter()
            .map(|r| ("stick".to_string(), &r.table));
        for (what, table) in tracks.chain(sticks) {
            let ok = match table {
                Some(t) => {
                    proxies
                        .iter()
                        .any(|o| o.name == t.name && o.conf.stick.is_some())
                        || peer_tables.iter().any(|p| p.name == t.name)
                }
                None => p.conf.stick.is_some(),
            };
            if !ok {
                errors.push(p.header.error(format!(
                    "{} '{}': {what} needs a stick table ({})",
                    p.kind.name(),
                    p.name,
                    match table {
                        Some(t) => format!("no proxy '{}' with a stick-table", t.name),
                        None => "this proxy has none; add one or name another with 'table'".into(),
                    }
                )));
            }
        }
    }
}

/// The id of every proxy section: its `id`, else the next one from 2 no section took (a
/// `listen` section is one proxy, with one id for both sides, as in HAProxy).
fn assign_ids(proxies: &[Proxy]) -> Result<Vec<u32>, ConfigError> {
    let mut taken: Vec<u32> = Vec::new();
    for p in proxies {
        if let Some(id) = p.conf.id {
            if taken.contains(&id) {
                return Err(p.header.error(format!(
                    "{} '{}': proxy id {id} is already used by another proxy",
                    p.kind.name(),
                    p.name
                )));
            }
            taken.push(id);
        }
    }
    // As HAProxy 2.6, whose first id goes to an internal proxy: the first free id from 2.
    let mut next = 2;
    Ok(proxies
        .iter()
        .map(|p| {
            p.conf.id.unwrap_or_else(|| {
                while taken.contains(&next) {
                    next += 1;
                }
                taken.push(next);
                next
            })
        })
        .collect())
}

/// Lowers each server's `resolvers` into its section's index (a server naming `default`
/// when no section has that name gets one made of the system's nameservers, as HAProxy's).
fn resolve_names(
    proxies: &[Proxy],
    backends: &mut [Backend],
    sections: &mut Vec<crate::conf::resolvers::Resolvers>,
    errors: &mut Vec<ConfigError>,
) {
    let is_backend = |k: SectionKind| matches!(k, SectionKind::Backend | SectionKind::Listen);
    for (bi, p) in proxies.iter().filter(|p| is_backend(p.kind)).enumerate() {
        for (si, spec) in p.conf.backend.servers.iter().enumerate() {
            let wanted = spec.opts.resolve.resolvers.as_deref();
            if wanted == Some("default") && !sections.iter().any(|r| r.name == "default") {
                sections.extend(crate::dns::default_section());
            }
            match crate::dns::lower_server(spec, sections) {
                Ok(r) if si < backends[bi].servers.len() => backends[bi].servers[si].resolve = r,
                Ok(_) => {}
                Err(e) => errors.push(
                    p.header
                        .error(format!("backend '{}': server '{}': {e}", p.name, spec.name)),
                ),
            }
        }
    }
}

/// Resolves `track [BACKEND/]SERVER` into (backend, server) indices.
fn resolve_tracks(proxies: &[Proxy], backends: &mut [Backend], errors: &mut Vec<ConfigError>) {
    let is_backend = |k: SectionKind| matches!(k, SectionKind::Backend | SectionKind::Listen);
    let names: Vec<(String, Vec<String>)> = backends
        .iter()
        .map(|b| {
            (
                b.name.clone(),
                b.servers.iter().map(|s| s.name.clone()).collect(),
            )
        })
        .collect();
    for (bi, p) in proxies.iter().filter(|p| is_backend(p.kind)).enumerate() {
        for (si, spec) in p.conf.backend.servers.iter().enumerate() {
            let Some(t) = &spec.opts.track else {
                continue;
            };
            let (be, srv) = t.split_once('/').unwrap_or((&p.name, t));
            let found = names
                .iter()
                .position(|(n, _)| n == be)
                .and_then(|b| names[b].1.iter().position(|s| s == srv).map(|s| (b, s)));
            match found {
                Some(target) if target != (bi, si) => backends[bi].servers[si].track = Some(target),
                _ => errors.push(p.header.error(format!(
                    "backend '{}': server '{}' tracks '{t}', which does not exist",
                    p.name, spec.name
                ))),
            }
        }
    }
}
