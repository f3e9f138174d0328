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
    "master-worker" => Scope::GLOBAL,
];

pub const PROXY_KEYWORDS: &[Keyword<ProxyConf>] = pending![
    "http-check" => Scope::BE,
    "tcp-check" => Scope::BE,
    "option ssl-hello-chk" => Scope::BE,
    "option idle-close-on-response" => Scope::FE,
    "stats" => Scope::PROXY,
    "stick" => Scope::BE,
    "redirect" => Scope::FE_BE,
    "tcp-response" => Scope::BE,
    "fullconn" => Scope::BE,
];
