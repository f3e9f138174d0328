//! Sample fetches: what each gives and its type.

use std::borrow::Cow;
use std::net::IpAddr;
use std::sync::atomic::Ordering;

use sluice_http::{name_is, trim_ows, Version};

use super::context::{Ctx, Kind};
use crate::conf::sample::{Fetch, HelloPart, NameRef, Occ, PayloadSide, Sample, TcpInfoField};
use crate::runtime::BackendState;

pub(super) fn kind(f: &Fetch) -> Kind {
    use Fetch::*;
    match f {
        Src | Dst | Ip(_) => Kind::Ip,
        SslFc | SslCUsed | SslFcIsResumed | SslFcHasEarly | Bool(_) | HttpAuth(_) | SrcIsLocal
        | DstIsLocal | Stopping | HttpFirstReq => Kind::Bool,
        Captured { .. } | LastRuleFile => Kind::Str,
        LastRuleLine => Kind::Int,
        Base32Src | BinConst(_) => Kind::Bin,
        Hello(part, _) => match part {
            HelloPart::CiphersXxh64 | HelloPart::Version => Kind::Int,
            HelloPart::CiphersHex => Kind::Bin,
            _ => Kind::Str,
        },
        ReqCookVal(_) => Kind::Int,
        ReqHdrIp(..) => Kind::Ip,
        TcpInfo(_) | FcHttpMajor | BeServerTimeout | BeTunnelTimeout | CurServerTimeout
        | CurTunnelTimeout | Base32 | Url32 | ReqBodyLen | ReqBodySize | ResBodyLen
        | ResBodySize | FeReqRate(_) | FeSessRate(_) | BeSessRate(_) | SrvConn(..)
        | SrvSessRate(..) | Thread | SoId => Kind::Int,
        SrvIsUp(..) | ResCacheHit => Kind::Bool,
        Table {
            op: crate::conf::sample::TableOp::Tracked,
            ..
        } => Kind::Bool,
        Table { .. } => Kind::Int,
        ReqBody | ResBody | Payload(..) | PayloadLv { .. } => Kind::Bin,
        ReqSslEcExt => Kind::Bool,
        SrcPort | DstPort | FeId | BeId | SrvId | FeConn(_) | BeConn(_) | NbSrv(_)
        | Connslots(_) | Queue(_) | AvgQueue(_) | ReqHdrCnt(..) | ReqCookCnt(_) | ResCookCnt(_)
        | PayloadLen(_) | ResHdrCnt(..) | Status | Date(..) | Rand(_) | Int(_) | SslCVerify
        | SslErr | FcErr | ReqSslHelloType | ReqSslVer | ReqSslStExt => Kind::Int,
        _ => Kind::Str,
    }
}

/// The one sample a fetch gives.
pub(super) fn fetch<'a>(f: &'a Fetch, cx: &'a Ctx<'a>) -> Option<Sample<'a>> {
    let p = cx.process;
    let config = &p.config;
    if cx.on_response && f.needs_request_head() {
        // As in HAProxy, where the request's head is gone by then.
        return None;
    }
    match f {
        Fetch::Src => Some(Sample::Ip(plain_ip(cx.client_addr()?.ip()))),
        Fetch::SrcPort => Some(Sample::Int(i64::from(cx.client_addr()?.port()))),
        Fetch::Dst => dst(cx).map(|a| Sample::Ip(plain_ip(a.ip()))),
        Fetch::DstPort => dst(cx).map(|a| Sample::Int(i64::from(a.port()))),
        Fetch::FeName => Some(Sample::str(config.frontends[cx.frontend].name.as_bytes())),
        Fetch::FeId => Some(Sample::Int(i64::from(config.frontends[cx.frontend].id))),
        Fetch::BeName => cx
            .backend
            .map(|b| Sample::str(config.backends[b].name.as_bytes())),
        Fetch::BeId => cx
            .backend
            .map(|b| Sample::Int(i64::from(config.backends[b].id))),
        Fetch::SrvName => {
            let (b, s) = (cx.backend?, cx.server?);
            Some(Sample::str(config.backends[b].servers[s].name.as_bytes()))
        }
        Fetch::SrvId => {
            let (b, s) = (cx.backend?, cx.server?);
            Some(Sample::Int(i64::from(config.backends[b].servers[s].id)))
        }
        Fetch::FeConn(name) => {
            let i = frontend(cx, name)?;
            let n = p.state.frontends[i].conns.load(Ordering::Relaxed);
            Some(Sample::Int(n as i64))
        }
        Fetch::BeConn(name) => backend(cx, name).map(|(_, st)| {
            Sample::Int(
                st.servers
                    .iter()
                    .map(|s| s.in_flight.load(Ordering::Relaxed))
                    .sum::<usize>() as i64,
            )
        }),
        Fetch::NbSrv(name) => backend(cx, name)
            .map(|(_, st)| Sample::Int(st.servers.iter().filter(|s| s.usable()).count() as i64)),
        Fetch::Connslots(name) => backend(cx, name).map(|(i, st)| {
            // Free connection and queue places over the usable servers; -1 when one of
            // them has no limit.
            let mut free = 0i64;
            for (conf, s) in config.backends[i].servers.iter().zip(st.servers.iter()) {
                if !s.usable() {
                    continue;
                }
                let max = s.queue.slots.as_ref().map_or(0, |l| l.get());
                if max == 0 {
                    return Sample::Int(-1);
                }
                let busy = s.in_flight.load(Ordering::Relaxed) as i64;
                let queued = s.queue.waiting.load(Ordering::Relaxed) as i64;
                free += (max as i64 - busy).max(0)
                    + conf.maxqueue.map_or(0, |q| (q as i64 - queued).max(0));
            }
            Sample::Int(free)
        }),
        Fetch::Queue(name) => backend(cx, name).map(|(_, st)| Sample::Int(queued(st))),
        Fetch::AvgQueue(name) => backend(cx, name).map(|(_, st)| {
            let usable = st.servers.iter().filter(|s| s.usable()).count() as i64;
            let q = queued(st);
            Sample::Int(if usable == 0 { q } else { q / usable })
        }),
        Fetch::Method => cx.req.map(|r| Sample::str(r.method())),
        Fetch::Path => cx.req.map(|r| Sample::str(r.path())),
        Fetch::PathQ => cx.req.map(|r| {
            let (path, query) = (r.path(), query_of(r.target()));
            match query {
                Some(q) => {
                    let mut v = path.to_vec();
                    v.push(b'?');
                    v.extend_from_slice(q);
                    Sample::Str(Cow::Owned(v))
                }
                None => Sample::str(path),
            }
        }),
        Fetch::Query => cx.req.and_then(|r| query_of(r.target())).map(Sample::str),
        Fetch::Url => cx.req.map(|r| Sample::str(r.target())),
        Fetch::UrlParam(name) => {
            let q = query_of(cx.req?.target())?;
            q.split(|&b| b == b'&')
                .find_map(|kv| {
                    let (k, v) = split_once(kv, b'=')?;
                    (k == name.as_bytes()).then_some(v)
                })
                .map(Sample::str)
        }
        Fetch::Base => {
            let r = cx.req?;
            let host = r.header("host").unwrap_or_default();
            let mut v = trim_ows(host).to_vec();
            v.extend_from_slice(r.path());
            Some(Sample::Str(Cow::Owned(v)))
        }
        Fetch::ReqHdr(name, occ) => pick(req_values(cx, name, true)?, *occ),
        Fetch::ReqHdrIp(name, occ) => {
            let v = pick(req_values(cx, name, true)?, *occ)?;
            header_ip(&v.as_bytes()).map(|ip| Sample::Ip(plain_ip(ip)))
        }
        Fetch::ReqCookVal(name) => {
            let v = cookies(cx, name, false).pop()?;
            let n = std::str::from_utf8(&v.as_bytes())
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(Sample::Int(n))
        }
        Fetch::HttpAuthBearer(header) => {
            let value = match header {
                Some(name) => req_values(cx, name, false)?.into_iter().next()?,
                None => authorization(cx)?,
            };
            let text = std::str::from_utf8(value).ok()?.trim();
            let (scheme, token) = text.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then(|| Sample::string(token.trim().to_string()))
        }
        Fetch::Hdr(name, occ) => pick(chn_values(cx, name)?, *occ),
        Fetch::ReqFhdr(name, occ) => pick(req_values(cx, name, false)?, *occ),
        Fetch::ReqHdrCnt(name, split) => Some(Sample::Int(
            req_values(cx, name, *split).map_or(0, |v| v.len()) as i64,
        )),
        Fetch::ResHdr(name, occ) => pick(res_values(cx, name, true)?, *occ),
        Fetch::ResFhdr(name, occ) => pick(res_values(cx, name, false)?, *occ),
        Fetch::ResHdrCnt(name, split) => Some(Sample::Int(
            res_values(cx, name, *split).map_or(0, |v| v.len()) as i64,
        )),
        // A named cookie's last occurrence, else the first cookie, as HAProxy takes them.
        Fetch::ReqCook(name) | Fetch::ResCook(name) => {
            let all = cookies(cx, name, matches!(f, Fetch::ResCook(_)));
            if name.is_empty() {
                all.into_iter().next()
            } else {
                all.into_iter().last()
            }
        }
        Fetch::ReqCookCnt(name) => Some(Sample::Int(cookies(cx, name, false).len() as i64)),
        Fetch::ResCookCnt(name) => Some(Sample::Int(cookies(cx, name, true).len() as i64)),
        Fetch::ReqBody => cx.body.map(|b| Sample::Bin(Cow::Borrowed(b))),
        Fetch::ResBody => cx.res_body.map(|b| Sample::Bin(Cow::Borrowed(b))),
        Fetch::PayloadLen(side) => Some(Sample::Int(match cx.payload_of(*side) {
            Some(p) => {
                p.wants_more();
                p.bytes.len()
            }
            // (An HTTP request's: its buffered body.)
            None if *side == PayloadSide::Req => cx.body.map_or(0, |b| b.len()),
            None => 0,
        } as i64)),
        Fetch::Payload(side, at, len) => cx.payload_of(*side)?.slice(*at, *len).map(Sample::str),
        Fetch::PayloadLv {
            side,
            size_at,
            size_len,
            start,
        } => cx
            .payload_of(*side)?
            .length_value(*size_at, *size_len, *start)
            .map(|b| Sample::Bin(std::borrow::Cow::Borrowed(b))),
        Fetch::ReqSslHelloType => cx.payload?.hello_type().map(|t| Sample::Int(t.into())),
        Fetch::ReqSslVer => cx.payload?.hello().map(|h| Sample::Int(h.version.into())),
        Fetch::ReqSslSni => cx.payload?.hello()?.sni.map(Sample::str),
        Fetch::ReqSslAlpn => cx.payload?.hello()?.alpn.first().map(|a| Sample::str(a)),
        Fetch::ReqSslEcExt => cx.payload?.hello().map(|h| Sample::Bool(h.ec_ext)),
        Fetch::ReqSslStExt => cx
            .payload?
            .hello()
            .map(|h| Sample::Int(h.session_ticket.into())),
        // (A stream's request reads as its connection's version.)
        Fetch::ReqVer => cx.req.map(|r| match cx.client.map(|c| c.http_major()) {
            Some(2) => Sample::str(b"2.0"),
            _ => version(r.version()),
        }),
        Fetch::Status => cx.res.map(|r| Sample::Int(i64::from(r.status()))),
        Fetch::ResVer => cx.res.map(|r| version(r.version())),
        Fetch::Var(v) => cx.vars.get(p, v),
        // The environment as the configuration left it (`setenv` and its kin).
        Fetch::Env(name) => p.config.global.env.get(name).map(Sample::string),
        Fetch::Date(offset, per_sec) => {
            let now_us = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as i64);
            Some(Sample::Int(now_us / (1_000_000 / per_sec) + offset))
        }
        Fetch::Rand(range) => Some(Sample::Int(match range {
            Some(r) => fastrand::u64(..(*r).max(1)) as i64,
            None => i64::from(fastrand::u32(..)),
        })),
        Fetch::UniqueId => cx.unique_id.as_ref().map(|s| Sample::str(s.as_bytes())),
        Fetch::SslFc => Some(Sample::Bool(cx.client.is_some_and(|c| c.is_tls()))),
        Fetch::SslFcSni => cx.client?.tls()?.sni.map(Sample::string),
        Fetch::SslFcProtocol => Some(Sample::str(cx.client?.tls()?.version.as_bytes())),
        Fetch::SslFcCipher => Some(Sample::str(cx.client?.tls()?.cipher.as_bytes())),
        Fetch::SslFcSecret(label) => {
            let keys = cx.client?.tls()?.keys?;
            // As OpenSSL writes them in the key log (HAProxy keeps its text).
            Some(Sample::string(super::conv::hex(keys.get(label)?, false)))
        }
        Fetch::SslFcClientRandom => {
            let keys = cx.client?.tls()?.keys?;
            Some(Sample::Bin(keys.client_random.clone().into()))
        }
        Fetch::SslFcSessionKey => {
            let keys = cx.client?.tls()?.keys?;
            Some(Sample::Bin(keys.get("CLIENT_RANDOM")?.to_vec().into()))
        }
        Fetch::Hello(part, no_grease) => hello(*part, *no_grease, &*cx.client?.tls()?.hello?),
        Fetch::SslCUsed => Some(Sample::Bool(
            cx.client
                .and_then(|c| c.tls())
                .is_some_and(|t| t.client_cert.is_some()),
        )),
        // A handshake only completes with a certificate that verified.
        Fetch::SslCVerify => Some(Sample::Int(0)),
        Fetch::SslCSubject => cx.client?.tls()?.client_cert.map(|c| Sample::string(c.0)),
        Fetch::SslFcIsResumed => Some(Sample::Bool(cx.client?.tls()?.resumed)),
        Fetch::SslFcHasEarly => Some(Sample::Bool(cx.client.is_some_and(|c| c.is_early()))),
        // A session with an error never completes its handshake (no `crt-ignore-err`).
        Fetch::SslErr => cx.client?.tls().map(|_| Sample::Int(0)),
        // A connection that failed carries no request: only its error log line has one.
        Fetch::FcErr => Some(Sample::Int(cx.fault.map_or(0, |f| i64::from(f.0)))),
        Fetch::FcErrStr => cx.fault.map(|f| Sample::str(f.1.as_bytes())),
        Fetch::HttpAuth(list) => Some(Sample::Bool(auth_user(cx, list).is_some())),
        Fetch::HttpAuthGroup(list) => auth_user(cx, list).map(|u| Sample::str(u.name.as_bytes())),
        Fetch::HttpAuthType => authorization(cx)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| h.trim().split(' ').next())
            .map(|t| Sample::string(t.to_string())),
        Fetch::HttpAuthUser => authorization(cx)
            .and_then(crate::auth::basic_credentials)
            .map(|(u, _)| Sample::string(u)),
        Fetch::HttpAuthPass => authorization(cx)
            .and_then(crate::auth::basic_credentials)
            .map(|(_, p)| Sample::string(p)),
        Fetch::ReqBodyLen => cx.body.map(|b| Sample::Int(b.len() as i64)),
        Fetch::ResBodyLen => cx.res_body.map(|b| Sample::Int(b.len() as i64)),
        Fetch::ReqBodySize => {
            let len = req_values(cx, "content-length", false).and_then(|v| v.first().copied());
            len.and_then(announced_length)
                .or_else(|| Some(Sample::Int(cx.whole_lens.0? as i64)))
        }
        Fetch::ResBodySize => cx
            .res?
            .header("content-length")
            .and_then(announced_length)
            .or_else(|| Some(Sample::Int(cx.whole_lens.1? as i64))),
        Fetch::ReqBodyParam(name) => crate::balance::form_param(cx.body?, name).map(Sample::str),
        Fetch::FeReqRate(name) | Fetch::FeSessRate(name) => {
            let fe = frontend(cx, name)?;
            let now = crate::runtime::clock_ms();
            let c = &p.state.frontends[fe].counters;
            let per_sec = c
                .iter()
                .map(|k| match f {
                    Fetch::FeReqRate(_) => k.request_rate.per_sec(now),
                    _ => k.session_rate.per_sec(now),
                })
                .sum::<u64>();
            Some(Sample::Int(per_sec as i64))
        }
        Fetch::BeSessRate(name) => backend(cx, name).map(|(_, st)| {
            let now = crate::runtime::clock_ms();
            let per_sec: u64 = st
                .counters
                .iter()
                .map(|k| k.session_rate.per_sec(now))
                .sum();
            Sample::Int(per_sec as i64)
        }),
        Fetch::SrvIsUp(be, srv) | Fetch::SrvConn(be, srv) | Fetch::SrvSessRate(be, srv) => {
            let b = be.index(&config.backends, |x| &x.name)?;
            let s = srv.index(&config.backends[b].servers, |x| &x.name)?;
            let st = &p.state.backends[b].servers[s];
            Some(match f {
                // UP: not down and not in maintenance (a draining server is up).
                Fetch::SrvIsUp(..) => Sample::Bool(
                    st.oper() != crate::runtime::OperState::Down
                        && st.admin() != crate::runtime::AdminState::Maint,
                ),
                Fetch::SrvConn(..) => Sample::Int(st.in_flight.load(Ordering::Relaxed) as i64),
                _ => {
                    let now = crate::runtime::clock_ms();
                    let per_sec: u64 = st.counters.iter().map(|k| k.rate.per_sec(now)).sum();
                    Sample::Int(per_sec as i64)
                }
            })
        }
        Fetch::HttpFirstReq => cx.req.map(|_| Sample::Bool(cx.first_request)),
        Fetch::LastRuleFile => {
            let at = cx.vars.last_rule.borrow();
            Some(Sample::string(at.as_ref()?.file.to_string()))
        }
        Fetch::LastRuleLine => Some(Sample::Int(
            cx.vars.last_rule.borrow().as_ref()?.line as i64,
        )),
        Fetch::Captured { response, slot } => {
            let captured = cx.vars.captured.borrow();
            let side = if *response {
                &captured.res
            } else {
                &captured.req
            };
            let value = side.get(*slot)?.clone()?;
            Some(Sample::string(value))
        }
        Fetch::Thread => cx.arrival.map(|a| Sample::Int(a.thread as i64)),
        Fetch::SoId => cx.arrival.map(|a| Sample::Int(a.listener as i64 + 1)),
        Fetch::SoName => {
            let bind = config.frontends[cx.frontend]
                .listen
                .binds
                .get(cx.arrival?.listener)?;
            bind.name.as_deref().map(|n| Sample::string(n.to_string()))
        }
        Fetch::SrcIsLocal => Some(Sample::Bool(is_local(cx.client_addr()?.ip()))),
        Fetch::DstIsLocal => dst(cx).map(|a| Sample::Bool(is_local(a.ip()))),
        Fetch::Stopping => Some(Sample::Bool(p.stopping.load(Ordering::Relaxed))),
        Fetch::ResCacheHit => Some(Sample::Bool(cx.cache.is_some())),
        Fetch::ResCacheName => Some(Sample::str(config.caches[cx.cache?].name.as_bytes())),
        Fetch::Hostname => Some(Sample::string(crate::conf::hostname())),
        Fetch::TcpInfo(field) => {
            let info = cx.client?.tcp_info()?;
            Some(Sample::Int(i64::from(match field {
                TcpInfoField::Rtt { us } => to_unit(info.rtt_us, *us),
                TcpInfoField::RttVar { us } => to_unit(info.rttvar_us, *us),
                TcpInfoField::Unacked => info.unacked,
                TcpInfoField::Sacked => info.sacked,
                TcpInfoField::Lost => info.lost,
                TcpInfoField::Retrans => info.retrans,
                TcpInfoField::Fackets => info.fackets,
                TcpInfoField::Reordering => info.reordering,
            })))
        }
        Fetch::FcHttpMajor => Some(Sample::Int(cx.client.map_or(1, |c| c.http_major()).into())),
        Fetch::CurServerTimeout | Fetch::CurTunnelTimeout => {
            let (server, tunnel) = cx.set_timeouts;
            let t = if *f == Fetch::CurServerTimeout {
                server
            } else {
                tunnel
            };
            Some(Sample::Int(t.map_or(0, |t| t.as_millis() as i64)))
        }
        Fetch::BeServerTimeout | Fetch::BeTunnelTimeout => {
            let be = &config.backends[cx.backend?];
            let t = match f {
                Fetch::BeServerTimeout => be.timeout_server,
                _ => be.timeout_tunnel.or(be.timeout_server),
            };
            Some(Sample::Int(t.map_or(0, |t| t.as_millis() as i64)))
        }
        Fetch::Uuid => Some(Sample::string(uuid4())),
        Fetch::Base32 | Fetch::Url32 => {
            let r = cx.req?;
            let tail = match f {
                Fetch::Base32 => r.path(),
                _ => r.target(),
            };
            Some(Sample::Int(i64::from(host_hash(r, tail))))
        }
        Fetch::Base32Src => {
            let r = cx.req?;
            let mut v = host_hash(r, r.path()).to_be_bytes().to_vec();
            match plain_ip(cx.client_addr()?.ip()) {
                IpAddr::V4(a) => v.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => v.extend_from_slice(&a.octets()),
            }
            Some(Sample::Bin(Cow::Owned(v)))
        }
        Fetch::CaptureReqMethod => cx.req.map(|r| Sample::str(r.method())),
        Fetch::CaptureReqUri => cx.req.map(|r| Sample::str(r.target())),
        Fetch::CaptureReqVer => cx.req.map(|r| match cx.client.map(|c| c.http_major()) {
            Some(2) => Sample::str(b"HTTP/2.0"),
            _ => match r.version() {
                Version::Http10 => Sample::str(b"HTTP/1.0"),
                Version::Http11 => Sample::str(b"HTTP/1.1"),
                Version::Http2 => Sample::str(b"HTTP/2.0"),
                Version::Http3 => Sample::str(b"HTTP/3.0"),
            },
        }),
        Fetch::FcPpAuthority => cx.client?.proxied()?.authority.as_deref().map(Sample::str),
        Fetch::FcPpUniqueId => cx.client?.proxied()?.unique_id.as_deref().map(Sample::str),
        Fetch::SslCIssuer => cx.client?.tls()?.client_cert.map(|c| Sample::string(c.1)),
        Fetch::SslFcAlpn => cx
            .client?
            .tls()?
            .alpn
            .map(|a| Sample::string(String::from_utf8_lossy(&a).into_owned())),
        Fetch::SslBc => cx.server_conn.map(|c| Sample::Bool(c.is_tls())),
        Fetch::SslBcProtocol => Some(Sample::str(cx.server_conn?.tls()?.version.as_bytes())),
        Fetch::SslBcCipher => Some(Sample::str(cx.server_conn?.tls()?.cipher.as_bytes())),
        Fetch::SslBcAlpn => cx
            .server_conn?
            .tls()?
            .alpn
            .map(|a| Sample::string(String::from_utf8_lossy(&a).into_owned())),
        Fetch::Bool(b) => Some(Sample::Bool(*b)),
        Fetch::Int(n) => Some(Sample::Int(*n)),
        Fetch::Str(s) => Some(Sample::str(s.as_bytes())),
        Fetch::BinConst(b) => Some(Sample::Bin(Cow::Borrowed(b))),
        Fetch::Ip(ip) => Some(Sample::Ip(*ip)),
        Fetch::Table {
            source,
            op,
            counter,
            table,
        } => super::table::fetch(*source, *op, *counter, table.as_ref(), cx),
    }
}

/// Every value of a multi-valued fetch, for ACL matching (`None`: the fetch has one value).
pub(super) fn all_values<'a>(f: &'a Fetch, cx: &'a Ctx<'a>) -> Option<Vec<Sample<'a>>> {
    let all = |v: Option<Vec<&'a [u8]>>, occ: Occ| -> Vec<Sample<'a>> {
        match occ {
            None => v.unwrap_or_default().into_iter().map(Sample::str).collect(),
            Some(_) => v.and_then(|v| pick(v, occ)).into_iter().collect(),
        }
    };
    if cx.on_response && f.needs_request_head() {
        return Some(Vec::new());
    }
    match f {
        Fetch::ReqHdr(name, occ) => Some(all(req_values(cx, name, true), *occ)),
        Fetch::Hdr(name, occ) => Some(all(chn_values(cx, name), *occ)),
        Fetch::ReqFhdr(name, occ) => Some(all(req_values(cx, name, false), *occ)),
        Fetch::ResHdr(name, occ) => Some(all(res_values(cx, name, true), *occ)),
        Fetch::ResFhdr(name, occ) => Some(all(res_values(cx, name, false), *occ)),
        Fetch::ReqCook(name) => Some(cookies(cx, name, false)),
        // The groups of the authenticated user: an ACL names groups as its patterns.
        Fetch::HttpAuthGroup(list) => {
            let p = cx.process;
            let list_conf = list
                .index(&p.config.userlists, |l| &l.name)
                .map(|i| &p.config.userlists[i]);
            Some(match (auth_user(cx, list), list_conf) {
                (Some(u), Some(l)) => u
                    .groups
                    .iter()
                    .map(|&g| Sample::str(l.groups[g].as_bytes()))
                    .collect(),
                _ => Vec::new(),
            })
        }
        // Every protocol the client offers, in its order.
        Fetch::ReqSslAlpn => Some(match cx.payload.and_then(|p| p.hello()) {
            Some(h) => h.alpn.into_iter().map(Sample::str).collect(),
            None => Vec::new(),
        }),
        Fetch::ResCook(name) => Some(cookies(cx, name, true)),
        _ => None,
    }
}

/// Whether `ip` is one of this host's addresses (one a socket can be bound to).
fn is_local(ip: IpAddr) -> bool {
    ip.is_loopback() || std::net::UdpSocket::bind((plain_ip(ip), 0)).is_ok()
}

/// A random version 4 UUID, in its usual text form.
fn uuid4() -> String {
    let mut b: [u8; 16] = std::array::from_fn(|_| fastrand::u8(..));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let h: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        h[..4].concat(),
        h[4..6].concat(),
        h[6..8].concat(),
        h[8..10].concat(),
        h[10..].concat()
    )
}

/// HAProxy's `base32`/`url32` hash: sdbm over the Host header's value then `tail`, then
/// its avalanche.
fn host_hash(r: &sluice_http::RequestView<'_>, tail: &[u8]) -> u32 {
    let host = r.header("host").map(trim_ows).unwrap_or_default();
    let bytes: Vec<u8> = host.iter().chain(tail).copied().collect();
    super::hash::avalanche(super::hash::sdbm(&bytes))
}

/// The request's credentials: its `Authorization` field, or `Proxy-Authorization` for a
/// proxy request (`option http-use-proxy-header`).
fn authorization<'a>(cx: &'a Ctx<'a>) -> Option<&'a [u8]> {
    let target = cx.req?.target();
    let fields = cx.process.config.frontends[cx.frontend]
        .stream
        .auth_fields(target);
    req_values(cx, fields.credentials, false)?
        .into_iter()
        .next()
}

/// The user of userlist `list` the request authenticates as (checked against its hash).
fn auth_user<'a>(cx: &'a Ctx<'a>, list: &NameRef) -> Option<&'a crate::auth::User> {
    // The name was checked when the configuration was loaded.
    let lists = &cx.process.config.userlists;
    let l = &lists[list.index(lists, |l| &l.name)?];
    crate::auth::authenticate(l, authorization(cx)?)
}

fn dst(cx: &Ctx<'_>) -> Option<std::net::SocketAddr> {
    cx.dst
        .or(cx.vars.set_dst.get())
        .or_else(|| cx.client?.local_addr().ok())
}

/// An IPv4 address mapped into IPv6 is shown as IPv4, as HAProxy does.
fn plain_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// Microseconds as `fc_rtt` gives them: as they are for `us`, else in milliseconds.
fn to_unit(us: u32, in_us: bool) -> u32 {
    if in_us {
        us
    } else {
        us / 1000
    }
}

fn version(v: Version) -> Sample<'static> {
    Sample::str(match v {
        Version::Http10 => b"1.0",
        Version::Http11 => b"1.1",
        Version::Http2 => b"2.0",
        Version::Http3 => b"3.0",
    })
}

/// The backend a fetch names, else the current one.
fn backend<'a>(cx: &'a Ctx<'a>, name: &Option<NameRef>) -> Option<(usize, &'a BackendState)> {
    let i = match name {
        Some(n) => n.index(&cx.process.config.backends, |b| &b.name)?,
        None => cx.backend?,
    };
    Some((i, &cx.process.state.backends[i]))
}

/// The frontend a fetch names, else the current one.
fn frontend(cx: &Ctx<'_>, name: &Option<NameRef>) -> Option<usize> {
    match name {
        Some(n) => n.index(&cx.process.config.frontends, |f| &f.name),
        None => Some(cx.frontend),
    }
}

fn queued(st: &BackendState) -> i64 {
    st.servers
        .iter()
        .map(|s| s.queue.waiting.load(Ordering::Relaxed))
        .sum::<usize>() as i64
}

fn split_once(s: &[u8], sep: u8) -> Option<(&[u8], &[u8])> {
    let i = memchr::memchr(sep, s)?;
    Some((&s[..i], &s[i + 1..]))
}

fn query_of(target: &[u8]) -> Option<&[u8]> {
    split_once(target, b'?').map(|(_, q)| q)
}

/// A header's values (split at commas when `split`), in order; an empty name takes every
/// header. `None` when there is no request.
fn req_values<'a>(cx: &'a Ctx<'a>, name: &str, split: bool) -> Option<Vec<&'a [u8]>> {
    let r = cx.req?;
    Some(values(r.headers(), name, split))
}

fn res_values<'a>(cx: &'a Ctx<'a>, name: &str, split: bool) -> Option<Vec<&'a [u8]>> {
    let r = cx.res?;
    Some(values(r.headers(), name, split))
}

fn values<'a>(
    headers: impl Iterator<Item = (&'a [u8], &'a [u8])>,
    name: &str,
    split: bool,
) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    for (n, v) in headers {
        if !name.is_empty() && !name_is(n, name) {
            continue;
        }
        if split {
            out.extend(v.split(|&b| b == b',').map(trim_ows));
        } else {
            out.push(trim_ows(v));
        }
    }
    out
}

/// The occurrence `occ` of `values` (1 the first, -1 the last; absent: the last).
fn pick(values: Vec<&[u8]>, occ: Occ) -> Option<Sample<'_>> {
    let n = values.len() as i32;
    let i = match occ.unwrap_or(-1) {
        0 => return None,
        k if k > 0 => k - 1,
        k => n + k,
    };
    if i < 0 {
        return None;
    }
    values.get(i as usize).map(|v| Sample::str(v))
}

/// The values of cookie `name` in the request's Cookie headers, or in the response's
/// Set-Cookie headers (their first pair; the rest are attributes), every cookie when the
/// name is empty.
fn cookies<'a>(cx: &'a Ctx<'a>, name: &str, response: bool) -> Vec<Sample<'a>> {
    let headers: Vec<(&[u8], &[u8])> = match (response, cx.req, cx.res) {
        (false, Some(r), _) => r.headers().filter(|(n, _)| name_is(n, "cookie")).collect(),
        (true, _, Some(r)) => r
            .headers()
            .filter(|(n, _)| name_is(n, "set-cookie"))
            .map(|(n, v)| (n, v.split(|&b| b == b';').next().unwrap_or(v)))
            .collect(),
        _ => return Vec::new(),
    };
    let mut out = Vec::new();
    for (_, v) in headers {
        for pair in v.split(|&b| b == b';') {
            let pair = trim_ows(pair);
            let (k, val) = split_once(pair, b'=').unwrap_or((pair, b""));
            if name.is_empty() || trim_ows(k) == name.as_bytes() {
                out.push(Sample::str(trim_ows(val)));
            }
        }
    }
    out
}

/// A part of the client's captured ClientHello, as HAProxy 2.6's `ssl_fc_*` fetches give
/// it.
fn hello(
    part: HelloPart,
    no_grease: bool,
    c: &crate::tls::hello::Capture,
) -> Option<Sample<'static>> {
    use crate::tls::hello::{cipher_names, without_grease};
    let list = |l: &[u8]| {
        if no_grease {
            without_grease(l)
        } else {
            l.to_vec()
        }
    };
    Some(match part {
        HelloPart::Ciphers => Sample::Bin(list(&c.ciphers).into()),
        HelloPart::CiphersHex => Sample::string(super::conv::hex_upper(&list(&c.ciphers))),
        HelloPart::CipherNames => Sample::string(cipher_names(&list(&c.ciphers))),
        HelloPart::CiphersXxh64 => Sample::Int(c.ciphers_xxh64 as i64),
        HelloPart::Version => Sample::Int(i64::from(c.protocol_version)),
        HelloPart::Extensions => Sample::Bin(list(&c.extensions).into()),
        HelloPart::Groups => Sample::Bin(list(&c.groups).into()),
        HelloPart::PointFormats => Sample::Bin(c.point_formats.clone().into()),
    })
}

/// A body's length as its `Content-Length` announces it.
fn announced_length(field: &[u8]) -> Option<Sample<'static>> {
    let n = std::str::from_utf8(trim_ows(field))
        .ok()?
        .parse::<i64>()
        .ok()?;
    Some(Sample::Int(n))
}

/// `hdr`'s values: the response's in response rules, else the request's.
fn chn_values<'a>(cx: &'a Ctx<'a>, name: &str) -> Option<Vec<&'a [u8]>> {
    if cx.on_response {
        res_values(cx, name, true)
    } else {
        req_values(cx, name, true)
    }
}

/// An address in a header's value; a port after an IPv4 address is left out.
fn header_ip(v: &[u8]) -> Option<std::net::IpAddr> {
    let text = std::str::from_utf8(v).ok()?.trim();
    text.parse().ok().or_else(|| {
        let (ip, port) = text.rsplit_once(':')?;
        port.parse::<u16>().ok()?;
        ip.parse::<std::net::Ipv4Addr>()
            .ok()
            .map(std::net::IpAddr::V4)
    })
}
