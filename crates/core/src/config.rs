//! Lowers parsed sections into a validated [`Config`] that the workers run.
//!
//! Each feature module exports its keyword table; this module only lists the tables and
//! applies HAProxy's section rules: `defaults` settings are copied into every proxy that
//! follows, `listen` is a frontend and a backend of the same name, and references between
//! proxies (`use_backend`, `default_backend`) are resolved by name. The result is plain data:
//! workers never see the keyword-level structures.

use std::sync::Arc;

use sluice_config::{
    dispatch, parse_files, parse_str, ConfigError, Keyword, Scope, Section, SectionKind,
};

use crate::backend::{Backend, BackendConf};
use crate::balance::BalanceConf;
use crate::compression::{CompConf, CompCounters, GlobalComp};
use crate::listener::ListenConf;
use crate::rules::{FrontendRules, RulesConf};
use crate::stream::StreamConf;
use crate::{backend, balance, compression, listener, pending, rules, stream, threads};

/// Where a line came from, kept by settings that are validated after their section.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Loc {
    pub file: Arc<str>,
    pub line: usize,
}

impl Loc {
    pub fn error(&self, msg: impl Into<String>) -> ConfigError {
        ConfigError::at(&self.file, self.line, msg)
    }
}

/// Process-wide settings from the `global` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalConf {
    pub nbthread: Option<usize>,
    pub maxconn: Option<usize>,
    pub bufsize: usize,
    pub compression: GlobalComp,
    pub stats_socket: Option<crate::cli::SocketConf>,
    pub pool: crate::pool::PoolGlobal,
    pub hard_stop_after: Option<std::time::Duration>,
    pub log: Vec<crate::log::LogTarget>,
}

impl Default for GlobalConf {
    fn default() -> Self {
        GlobalConf {
            nbthread: None,
            maxconn: None,
            bufsize: 16384,
            compression: GlobalComp::default(),
            stats_socket: None,
            pool: crate::pool::PoolGlobal::default(),
            hard_stop_after: None,
            log: Vec::new(),
        }
    }
}

/// The settings of one proxy section as its keywords set them. Each part belongs to the
/// module that parses it.
#[derive(Debug, Clone, Default)]
pub struct ProxyConf {
    /// The line being parsed (set before each keyword is dispatched).
    pub at: Loc,
    pub listen: ListenConf,
    pub stream: StreamConf,
    pub backend: BackendConf,
    pub balance: BalanceConf,
    pub rules: RulesConf,
    pub compression: CompConf,
    pub errors: crate::errorpages::ErrorPages,
    pub log: crate::log::LogConf,
}

/// A validated frontend: what a listener needs to serve its connections.
#[derive(Debug)]
pub struct Frontend {
    pub name: String,
    pub listen: ListenConf,
    pub stream: StreamConf,
    pub rules: FrontendRules,
    pub compression: CompConf,
    pub comp_counters: CompCounters,
    pub errors: crate::errorpages::ErrorPages,
    pub log: crate::log::LogConf,
    /// Opened when the proxy starts (not by `-c`).
    pub loggers: std::sync::OnceLock<Vec<Arc<crate::log::Logger>>>,
    /// Client connections open on this frontend (`%fc`).
    pub cur_conns: std::sync::atomic::AtomicUsize,
}

/// The whole validated configuration.
#[derive(Debug)]
pub struct Config {
    pub global: GlobalConf,
    pub frontends: Vec<Arc<Frontend>>,
    pub backends: Vec<Arc<Backend>>,
}

const GLOBAL_TABLES: &[&[Keyword<GlobalConf>]] = &[
    threads::GLOBAL_KEYWORDS,
    listener::GLOBAL_KEYWORDS,
    stream::GLOBAL_KEYWORDS,
    compression::GLOBAL_KEYWORDS,
    crate::cli::GLOBAL_KEYWORDS,
    crate::pool::GLOBAL_KEYWORDS,
    crate::log::GLOBAL_KEYWORDS,
    pending::GLOBAL_KEYWORDS,
];

const PROXY_TABLES: &[&[Keyword<ProxyConf>]] = &[
    listener::KEYWORDS,
    stream::KEYWORDS,
    stream::OPTION_KEYWORDS,
    backend::KEYWORDS,
    backend::OPTION_KEYWORDS,
    balance::KEYWORDS,
    rules::KEYWORDS,
    compression::KEYWORDS,
    crate::errorpages::KEYWORDS,
    crate::log::KEYWORDS,
    pending::PROXY_KEYWORDS,
];

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
    let mut global = GlobalConf::default();
    let mut defaults = ProxyConf::default();
    let mut proxies: Vec<Proxy> = Vec::new();
    for section in &sections {
        let header = Loc {
            file: section.header.file.clone(),
            line: section.header.line,
        };
        match section.kind {
            SectionKind::Global => {
                for line in &section.lines {
                    if let Err(e) =
                        dispatch(GLOBAL_TABLES, &mut global, line, Scope::GLOBAL, "global")
                    {
                        errors.push(e);
                    }
                }
            }
            SectionKind::Defaults => {
                if !section.args.is_empty() {
                    errors.push(header.error("named defaults with 'from' are not supported yet"));
                }
                defaults = ProxyConf::default();
                parse_proxy_lines(section, &mut defaults, Scope::DEFAULTS, &mut errors);
            }
            kind => {
                let name = section.name.clone().unwrap_or_default();
                if proxies
                    .iter()
                    .any(|p| p.name == name && overlaps(p.kind, kind))
                {
                    errors.push(header.error(format!("{} '{name}' is defined twice", kind.name())));
                }
                let mut conf = defaults.clone();
                let scope = match kind {
                    SectionKind::Frontend => Scope::FRONTEND,
                    SectionKind::Backend => Scope::BACKEND,
                    _ => Scope::FE_BE,
                };
                if kind == SectionKind::Listen {
                    if let Some(addr) = section.args.first() {
                        conf.at = header.clone();
                        if let Err(e) = listener::add_bind(&mut conf, std::slice::from_ref(addr)) {
                            errors.push(header.error(format!("listen address: {e}")));
                        }
                    }
                }
                parse_proxy_lines(section, &mut conf, scope, &mut errors);
                proxies.push(Proxy {
                    kind,
                    name,
                    header,
                    conf,
                });
            }
        }
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    lower(global, proxies)
}

fn overlaps(a: SectionKind, b: SectionKind) -> bool {
    a == b || a == SectionKind::Listen || b == SectionKind::Listen
}

fn parse_proxy_lines(
    section: &Section,
    conf: &mut ProxyConf,
    scope: Scope,
    errors: &mut Vec<ConfigError>,
) {
    let what = section.kind.name();
    for line in &section.lines {
        conf.at = Loc {
            file: line.file.clone(),
            line: line.line,
        };
        if let Err(e) = dispatch(PROXY_TABLES, conf, line, scope, what) {
            errors.push(e);
        }
    }
}

fn lower(global: GlobalConf, proxies: Vec<Proxy>) -> Result<Config, Vec<ConfigError>> {
    let mut errors = Vec::new();
    let nbthread = threads::effective_nbthread(&global);
    let is_backend = |k: SectionKind| matches!(k, SectionKind::Backend | SectionKind::Listen);
    let backend_names: Vec<&str> = proxies
        .iter()
        .filter(|p| is_backend(p.kind))
        .map(|p| p.name.as_str())
        .collect();
    let mut backends = Vec::new();
    for p in proxies.iter().filter(|p| is_backend(p.kind)) {
        // A listen section's rules run once, on its frontend side.
        let mut conf = p.conf.clone();
        if p.kind == SectionKind::Listen {
            conf.rules.http_request.clear();
            conf.rules.http_response.clear();
            conf.stream.forwardfor = None;
        }
        match Backend::lower(&p.name, &conf, nbthread) {
            Ok(b) => backends.push(Arc::new(b)),
            Err(e) => errors.push(e),
        }
    }
    let mut frontends = Vec::new();
    let mut fe_locs = Vec::new();
    for p in proxies
        .iter()
        .filter(|p| matches!(p.kind, SectionKind::Frontend | SectionKind::Listen))
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
        let own = (p.kind == SectionKind::Listen).then_some(p.name.as_str());
        if p.conf.stream.mode == crate::stream::Mode::Tcp && !p.conf.rules.http_rules_empty() {
            errors.push(p.header.error(format!(
                "{} '{}' is in mode tcp: use_backend, acl, http-request and http-response need mode http",
                p.kind.name(),
                p.name
            )));
            continue;
        }
        match rules::lower_frontend(&p.conf.rules, &backend_names, own) {
            Ok(rules) => {
                fe_locs.push((p.kind, p.header.clone()));
                frontends.push(Arc::new(Frontend {
                    name: p.name.clone(),
                    listen: p.conf.listen.clone(),
                    stream: p.conf.stream.clone(),
                    rules,
                    compression: p.conf.compression.clone(),
                    comp_counters: CompCounters::default(),
                    errors: p.conf.errors.clone(),
                    log: p.conf.log.clone(),
                    loggers: std::sync::OnceLock::new(),
                    cur_conns: Default::default(),
                }));
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
            .map(|(_, b)| *b)
            .chain(fe.rules.default_backend);
        for b in targets {
            if let Some(be) = backends.get(b) {
                if be.stream.mode != fe.stream.mode {
                    errors.push(
                        header.error(
                            format!(
                                "{} '{}' (mode {:?}) cannot use backend '{}' (mode {:?})",
                                kind.name(),
                                fe.name,
                                fe.stream.mode,
                                be.name,
                                be.stream.mode
                            )
                            .to_lowercase(),
                        ),
                    );
                }
            }
        }
    }
    if frontends.is_empty() && errors.is_empty() {
        errors.push(ConfigError::at(
            "configuration",
            0,
            "no frontend or listen section: nothing to serve",
        ));
    }
    if errors.is_empty() {
        Ok(Config {
            global,
            frontends,
            backends,
        })
    } else {
        Err(errors)
    }
}
