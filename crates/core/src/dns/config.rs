//! The configuration side of run-time resolution: the server options (`resolvers`,
//! `resolve-prefer`, `resolve-net`, `resolve-opts`, `init-addr`), `resolvers` sections,
//! and each server's lowered [`ServerResolve`].

use std::net::{IpAddr, SocketAddr};

use sluice_config::{ConfigError, Section};

use crate::conf::backend::{ServerOption, ServerSpec};
use crate::conf::resolvers::{Family, InitAddr, Nameserver, Resolvers, ServerResolve};

/// The server options of run-time resolution.
pub const SERVER_OPTIONS: &[ServerOption] = &[
    ServerOption {
        name: "resolvers",
        help: "NAME: the resolvers section that follows the server's name at run time",
        args: 1,
        parse: |o, a| {
            o.resolve.resolvers = Some(a[0].clone());
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-prefer",
        help: "ipv4|ipv6: the address family chosen when a name has both",
        args: 1,
        parse: |o, a| {
            o.resolve.prefer = Some(match a[0].as_str() {
                "ipv4" => Family::V4,
                "ipv6" => Family::V6,
                _ => return Err("expects 'ipv4' or 'ipv6'".into()),
            });
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-net",
        help: "NET,...: addresses within these networks are preferred",
        args: 1,
        parse: |o, a| {
            o.resolve.nets = a[0].split(',').map(network).collect::<Result<_, _>>()?;
            Ok(())
        },
    },
    ServerOption {
        name: "resolve-opts",
        help: "allow-dup-ip,ignore-weight,prevent-dup-ip: how answers are applied",
        args: 1,
        parse: |o, a| {
            for opt in a[0].split(',') {
                match opt {
                    "allow-dup-ip" => o.resolve.allow_dup_ip = true,
                    "prevent-dup-ip" => o.resolve.allow_dup_ip = false,
                    "ignore-weight" => o.resolve.ignore_weight = true,
                    _ => {
                        return Err(format!(
                            "unknown option '{opt}' (expects allow-dup-ip, ignore-weight or prevent-dup-ip)"
                        ))
                    }
                }
            }
            Ok(())
        },
    },
    ServerOption {
        name: "init-addr",
        help:
            "last,libc,none,IP: where the address comes from at start (none: start in maintenance)",
        args: 1,
        parse: |o, a| {
            let methods = a[0]
                .split(',')
                .map(|m| match m {
                    "last" => Ok(InitAddr::Last),
                    "libc" => Ok(InitAddr::Libc),
                    "none" => Ok(InitAddr::None),
                    ip => ip.parse().map(InitAddr::Ip).map_err(|_| {
                        format!("unknown method '{m}' (expects last, libc, none or an IP address)")
                    }),
                })
                .collect::<Result<Vec<_>, _>>()?;
            o.resolve.init_addr = Some(methods);
            Ok(())
        },
    },
];

/// `NET/BITS` (or an address alone: all its bits).
fn network(s: &str) -> Result<(IpAddr, u8), String> {
    let bad = || format!("'{s}' is not a network (ADDR/BITS)");
    let (ip, bits) = match s.split_once('/') {
        Some((ip, bits)) => (ip, Some(bits)),
        None => (s, None),
    };
    let ip: IpAddr = ip.parse().map_err(|_| bad())?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(b) => b.parse::<u8>().ok().filter(|&b| b <= max).ok_or_else(bad)?,
        None => max,
    };
    Ok((ip, bits))
}

pub(super) fn in_network(ip: IpAddr, (net, bits): (IpAddr, u8)) -> bool {
    let (a, b, width) = match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => (u128::from(u32::from(a)), u128::from(u32::from(b)), 32),
        (IpAddr::V6(a), IpAddr::V6(b)) => (u128::from(a), u128::from(b), 128),
        _ => return false,
    };
    let shift = width - u32::from(bits);
    shift >= width || (a >> shift) == (b >> shift)
}

/// A `resolvers NAME` section: `nameserver`, `parse-resolv-conf`, `accepted_payload_size`,
/// `resolve_retries`, `timeout resolve|retry`, `hold STATUS PERIOD`.
pub fn parse_section(section: &Section, errors: &mut Vec<ConfigError>) -> Option<Resolvers> {
    let Some(name) = section.name.clone() else {
        errors.push(
            section
                .header
                .error("'resolvers' expects a <name> argument"),
        );
        return None;
    };
    let mut r = Resolvers::new(name);
    for line in &section.lines {
        let w: Vec<&str> = line.words.iter().map(String::as_str).collect();
        if let Err(e) = section_line(&mut r, &w) {
            errors.push(line.error(e));
        }
    }
    if r.nameservers.is_empty() {
        errors.push(section.header.error(format!(
            "resolvers '{}': no nameserver (a 'nameserver' line or 'parse-resolv-conf')",
            r.name
        )));
    }
    Some(r)
}

fn section_line(r: &mut Resolvers, w: &[&str]) -> Result<(), String> {
    let time = |t: &str| sluice_config::units::parse_time(t).map_err(|e| e.to_string());
    match w {
        ["nameserver", id, addr] => {
            if r.nameservers.iter().any(|n| n.name == *id) {
                return Err(format!("nameserver '{id}' is defined twice"));
            }
            let (addr, tcp) =
                nameserver_addr(addr).map_err(|e| format!("nameserver '{id}': {e}"))?;
            r.nameservers.push(Nameserver {
                name: (*id).to_string(),
                addr,
                tcp,
            });
        }
        ["nameserver", ..] => return Err("'nameserver' expects <id> and <addr>[:<port>]".into()),
        ["parse-resolv-conf"] => {
            for (i, addr) in resolv_conf().into_iter().enumerate() {
                r.nameservers.push(Nameserver {
                    name: format!("resolv.conf-{}", i + 1),
                    addr,
                    tcp: false,
                });
            }
        }
        ["accepted_payload_size", n] => {
            r.payload = n
                .parse::<u16>()
                .ok()
                .filter(|&n| n >= 512)
                .ok_or("'accepted_payload_size' expects a size from 512 to 65535")?;
        }
        ["resolve_retries", n] => {
            r.retries = n
                .parse::<u32>()
                .ok()
                .filter(|&n| n > 0)
                .ok_or("'resolve_retries' expects a positive number")?;
        }
        ["timeout", "resolve", t] => r.timeout_resolve = time(t)?,
        ["timeout", "retry", t] => r.timeout_retry = time(t)?,
        ["timeout", ..] => return Err("'timeout' expects 'resolve' or 'retry' and a time".into()),
        ["hold", status, t] => {
            let d = time(t)?;
            let h = &mut r.hold;
            *match *status {
                "valid" => &mut h.valid,
                "nx" => &mut h.nx,
                "other" => &mut h.other,
                "refused" => &mut h.refused,
                "timeout" => &mut h.timeout,
                "obsolete" => &mut h.obsolete,
                _ => {
                    return Err(format!(
                        "'hold' expects nx, other, refused, timeout, valid or obsolete, not '{status}'"
                    ))
                }
            } = d;
        }
        ["resolution_pool_size", _] => {}
        [kw, ..] => {
            return Err(format!(
                "unknown keyword '{kw}' in 'resolvers' section (expects nameserver, parse-resolv-conf, accepted_payload_size, resolve_retries, timeout or hold)"
            ))
        }
        [] => {}
    }
    Ok(())
}

/// `[udp@|tcp@]ADDR[:PORT]` (port 53 by default), and whether it is asked over TCP.
fn nameserver_addr(a: &str) -> Result<(SocketAddr, bool), String> {
    let (a, tcp) = match a.strip_prefix("tcp@") {
        Some(rest) => (rest, true),
        None => (a.strip_prefix("udp@").unwrap_or(a), false),
    };
    if let Ok(sa) = a.parse::<SocketAddr>() {
        return Ok((sa, tcp));
    }
    let bare = a.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => Ok((SocketAddr::new(ip, 53), tcp)),
        Err(_) => crate::conf::resolve(a).map(|sa| (sa, tcp)),
    }
}

/// The nameservers `/etc/resolv.conf` names.
fn resolv_conf() -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().split('%').next()?.parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The section HAProxy makes when a server names `default` and no section has that name:
/// the system's nameservers.
pub fn default_section() -> Option<Resolvers> {
    let mut r = Resolvers::new("default".into());
    for (i, addr) in resolv_conf().into_iter().enumerate() {
        r.nameservers.push(Nameserver {
            name: format!("resolv.conf-{}", i + 1),
            addr,
            tcp: false,
        });
    }
    (!r.nameservers.is_empty()).then_some(r)
}

/// How server `spec` follows its name, given the `resolvers` sections (`None` when it
/// names none, or its address is not a name).
pub fn lower_server(
    spec: &ServerSpec,
    sections: &[Resolvers],
) -> Result<Option<ServerResolve>, String> {
    let o = &spec.opts.resolve;
    let Some(wanted) = &o.resolvers else {
        return Ok(None);
    };
    let Some(index) = sections.iter().position(|r| &r.name == wanted) else {
        return Err(format!("can't find resolvers section '{wanted}'"));
    };
    let Some(fqdn) = &spec.fqdn else {
        // An IP address has nothing to resolve (HAProxy accepts the line as well).
        return Ok(None);
    };
    Ok(Some(ServerResolve {
        resolvers: index,
        fqdn: fqdn.clone(),
        srv: fqdn.starts_with('_'),
        prefer: o.prefer.unwrap_or_default(),
        nets: o.nets.clone(),
        allow_dup_ip: o.allow_dup_ip,
        ignore_weight: o.ignore_weight,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_match_their_addresses() {
        let net = network("10.1.0.0/16").unwrap();
        assert!(in_network("10.1.200.3".parse().unwrap(), net));
        assert!(!in_network("10.2.0.1".parse().unwrap(), net));
        assert!(!in_network("::1".parse().unwrap(), net));
        assert!(in_network(
            "1.2.3.4".parse().unwrap(),
            network("0.0.0.0/0").unwrap()
        ));
        assert!(network("10.0.0.0/33").is_err());
    }
}
