//! Server states kept across a restart: `server-state-file` and `server-state-base` in
//! `global`, `load-server-state-from-file global|local|none` and `server-state-file-name`
//! in backends. The file is what `show servers state` prints (HAProxy's version 1), saved
//! by the operator before a reload; at start each backend that asks for it takes back its
//! servers' administrative state (maintenance, drain), weight and health from it, so that
//! a reload keeps the drains and weights set at run time, and a server that follows its
//! name (`resolvers`) starts from the address it had (`init-addr last`).
//!
//! Servers are matched by backend and server name. A missing or unreadable file, or a line
//! naming nothing configured, changes nothing (reported at start, as HAProxy warns).

use sluice_config::{Keyword, KwError, Scope};

use crate::conf::state::LoadFrom;
use crate::conf::{one_arg, one_of, GlobalConf, ProxyConf};
use crate::runtime::{AdminState, OperState, Process};

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "server-state-file",
        scope: Scope::GLOBAL,
        help: "server-state-file PATH: where backends with load-server-state-from-file global find their servers' states",
        parse: |g, a| one_arg(a, "a file").map(|f| g.server_state.file = Some(f.to_string())),
    },
    Keyword {
        name: "server-state-base",
        scope: Scope::GLOBAL,
        help: "server-state-base DIR: the directory of relative server state file names",
        parse: |g, a| one_arg(a, "a directory").map(|d| g.server_state.base = Some(d.to_string())),
    },
];

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "load-server-state-from-file",
        scope: Scope::BE,
        help: "load-server-state-from-file global|local|none: start the servers from a saved state",
        parse: |c, a| {
            let choices = [
                ("global", LoadFrom::Global),
                ("local", LoadFrom::Local),
                ("none", LoadFrom::None),
            ];
            c.load_state.from = one_of(a, "global, local or none", &choices)?;
            Ok(())
        },
    },
    Keyword {
        name: "server-state-file-name",
        scope: Scope::BE,
        help: "server-state-file-name [NAME|use-backend-name]: the backend's own state file (with load-server-state-from-file local)",
        parse: |c, a| {
            c.load_state.file_name = match a {
                [] => None,
                [n] if n == "use-backend-name" => None,
                [n] => Some(n.clone()),
                [_, extra, ..] => return Err(KwError::Extra(extra.clone())),
            };
            Ok(())
        },
    },
];

/// Where a state file name leads: as it is when absolute, else under `server-state-base`.
fn path(name: &str, g: &GlobalConf) -> std::path::PathBuf {
    match (&g.server_state.base, name.starts_with('/')) {
        (Some(base), false) => std::path::Path::new(base).join(name),
        _ => std::path::PathBuf::from(name),
    }
}

/// Applies the saved states to every backend that asks for them; returns what went wrong
/// (an unreadable file, a line that names nothing), to be said at start.
pub fn load(p: &Process) -> Vec<String> {
    let g = &p.config.global;
    let mut said = Vec::new();
    let mut files: Vec<(std::path::PathBuf, Option<String>)> = Vec::new();
    for (b, be) in p.config.backends.iter().enumerate() {
        let file = match be.load_state.from {
            LoadFrom::None => continue,
            LoadFrom::Global => match &g.server_state.file {
                Some(f) => path(f, g),
                None => {
                    said.push(format!(
                        "backend '{}': load-server-state-from-file global, but no server-state-file in global",
                        be.name
                    ));
                    continue;
                }
            },
            LoadFrom::Local => path(be.load_state.file_name.as_deref().unwrap_or(&be.name), g),
        };
        // Each file is read once, however many backends use it.
        let text = match files.iter().find(|(f, _)| *f == file) {
            Some((_, t)) => t.clone(),
            None => {
                let t = std::fs::read_to_string(&file).ok();
                files.push((file.clone(), t.clone()));
                t
            }
        };
        let Some(text) = text else {
            said.push(format!(
                "backend '{}': cannot read server state file '{}'",
                be.name,
                file.display()
            ));
            continue;
        };
        apply(p, b, &text, &mut said);
    }
    said
}

/// Applies the lines of `text` that name backend `b`'s servers.
fn apply(p: &Process, b: usize, text: &str, said: &mut Vec<String>) {
    let be = &p.config.backends[b];
    let mut lines = text.lines();
    if lines.next().map(str::trim) != Some("1") {
        said.push(format!(
            "backend '{}': server state file is not of version 1",
            be.name
        ));
        return;
    }
    for line in lines.filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        // be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight ...
        let [_, be_name, _, srv_name, _, op, admin, weight, ..] = f[..] else {
            said.push(format!("server state line too short: '{line}'"));
            continue;
        };
        if be_name != be.name {
            continue;
        }
        let Some(s) = be.servers.iter().position(|x| x.name == srv_name) else {
            said.push(format!(
                "backend '{}': server '{srv_name}' of the state file is not configured",
                be.name
            ));
            continue;
        };
        let st = &p.state.backends[b];
        // SRV_ADMF_FMAINT 0x01 (and the maintenance it inherits or was configured with),
        // SRV_ADMF_FDRAIN 0x08. RMAINT (0x20, no address from its name) is not an
        // operator's: the server's resolution decides it again.
        let admin: u32 = admin.parse().unwrap_or(0);
        let state = if admin & 0x07 != 0 {
            AdminState::Maint
        } else if admin & 0x18 != 0 {
            AdminState::Drain
        } else {
            AdminState::Ready
        };
        st.set_admin(s, state);
        if let Ok(w) = weight.parse::<u32>() {
            st.set_weight(s, w);
        }
        // SRV_ST_STOPPED 0, RUNNING 2, STOPPING 3; checks take it from there.
        let oper = match op {
            "0" => OperState::Down,
            "3" => OperState::Stopping,
            _ => OperState::Up,
        };
        if be.servers[s].check.is_some() {
            crate::check::force_health(p, b, s, oper);
        }
        // srv_use_ssl, for a server that has TLS settings.
        if let (Some(ssl), Some(_)) = (f.get(20), &be.servers[s].tls) {
            st.servers[s].set_ssl(*ssl != "0");
        }
        last_address(p, (b, s), &f, admin);
    }
}

/// A server that follows its name starts from the address it had (`init-addr last`):
/// `srv_addr` and `srv_port`, and for an SRV record its target (`srv_fqdn`), when the line
/// was saved for the same name and the server had an address then (not RMAINT).
fn last_address(p: &Process, (b, s): (usize, usize), f: &[&str], admin: u32) {
    let Some(r) = &p.config.backends[b].servers[s].resolve else {
        return;
    };
    let (Some(addr), Some(fqdn), Some(port)) = (f.get(4), f.get(17), f.get(18)) else {
        return;
    };
    let (Ok(ip), Ok(port)) = (addr.parse::<std::net::IpAddr>(), port.parse::<u16>()) else {
        return;
    };
    let same_name = if r.srv {
        f.get(19) == Some(&r.fqdn.as_str())
    } else {
        *fqdn == r.fqdn
    };
    if !same_name || admin & 0x20 != 0 {
        return;
    }
    let st = &p.state.backends[b];
    let sst = &st.servers[s];
    if r.srv {
        sst.set_fqdn((*fqdn).to_string());
    }
    sst.set_addr(std::net::SocketAddr::new(ip, port));
    st.set_unresolved(s, false);
}
