//! HAProxy keywords that operators commonly have in their configurations but whose
//! features sluice has not built yet. Each is refused with "not supported yet" and its
//! file and line, rather than being silently ignored or reported as a typo.

use sluice_config::{not_yet, Keyword, Scope};

use crate::conf::{GlobalConf, ProxyConf};

macro_rules! pending {
    ($($name:literal => $scope:expr),* $(,)?) => {
        &[$(Keyword { name: $name, scope: $scope, help: "not supported yet", parse: not_yet },)*]
    };
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = pending![
    "stats" => Scope::GLOBAL,
    "busy-polling" => Scope::GLOBAL,
    "default-path" => Scope::GLOBAL,
    "lua-load" => Scope::GLOBAL,
    "lua-load-per-thread" => Scope::GLOBAL,
    "lua-prepend-path" => Scope::GLOBAL,
    "noepoll" => Scope::GLOBAL,
    "nogetaddrinfo" => Scope::GLOBAL,
    "numa-cpu-mapping" => Scope::GLOBAL,
    "pp2-never-send-local" => Scope::GLOBAL,
    "profiling.tasks" => Scope::GLOBAL,
    "tune.buffers.limit" => Scope::GLOBAL,
    "tune.buffers.reserve" => Scope::GLOBAL,
    "tune.fail-alloc" => Scope::GLOBAL,
    "tune.fd.edge-triggered" => Scope::GLOBAL,
    "tune.idletimer" => Scope::GLOBAL,
    "tune.lua.forced-yield" => Scope::GLOBAL,
    "tune.lua.maxmem" => Scope::GLOBAL,
    "tune.lua.service-timeout" => Scope::GLOBAL,
    "tune.lua.session-timeout" => Scope::GLOBAL,
    "tune.lua.task-timeout" => Scope::GLOBAL,
    "tune.maxaccept" => Scope::GLOBAL,
    "tune.maxpollevents" => Scope::GLOBAL,
    "tune.memory.hot-size" => Scope::GLOBAL,
    "tune.pattern.cache-size" => Scope::GLOBAL,
    "tune.peers.max-updates-at-once" => Scope::GLOBAL,
    "tune.recv_enough" => Scope::GLOBAL,
    "tune.runqueue-depth" => Scope::GLOBAL,
    "tune.sched.low-latency" => Scope::GLOBAL,
    "tune.ssl.force-private-cache" => Scope::GLOBAL,
    "tune.ssl.ssl-ctx-cache-size" => Scope::GLOBAL,
    "tune.vars.global-max-size" => Scope::GLOBAL,
    "tune.vars.proc-max-size" => Scope::GLOBAL,
    "tune.vars.reqres-max-size" => Scope::GLOBAL,
    "tune.vars.sess-max-size" => Scope::GLOBAL,
    "tune.vars.txn-max-size" => Scope::GLOBAL,
];

pub const PROXY_KEYWORDS: &[Keyword<ProxyConf>] = pending![
    "stats" => Scope::PROXY,
    "option http-no-delay" => Scope::PROXY,
    "option tcp-smart-accept" => Scope::PROXY,
    "option tcp-smart-connect" => Scope::PROXY,
    "option transparent" => Scope::PROXY,
    "transparent" => Scope::PROXY,
    "use-fcgi-app" => Scope::PROXY,
];
