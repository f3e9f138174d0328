//! Reading sample expressions into plain data: `fetch[(args)][,converter[(args)]]...`, as
//! HAProxy writes them (for the sample engine, ACLs, rules and log formats, which sit in
//! different layers). Arguments are separated by commas; a backslash escapes a comma, a
//! quote or itself (other escapes stay for regular expressions), quotes group, and
//! parentheses nest. Map files are loaded here, once per use, when the configuration is
//! read.

use std::net::IpAddr;
use std::sync::Arc;

use base64::Engine as _;

use super::patterns::{Compile, Compiled, Entry, Family, FormKind, PatternBook, PatternUse};
use super::sample::{
    Conv, Counter, DigestAlg, Expr, Fetch, Fmt, FmtPart, HelloPart, IntArg, JwtKey, KeyArg,
    MapFile, MapKey, MapOut, Match, MqttField, NameRef, PayloadSide, Regex, StrArg, TableOp,
    TableSource, TcpInfoField, VarConds, VarName, VarScope,
};

/// Why an expression could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ParseError(pub String);

fn err<T>(msg: impl Into<String>) -> Result<T, ParseError> {
    Err(ParseError(msg.into()))
}

/// One `name(args)` piece of an expression.
struct Call<'s> {
    name: &'s str,
    args: Vec<String>,
}

fn lossy(b: Vec<u8>) -> String {
    String::from_utf8(b).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Splits `text` into its calls: `a(x,y),b,c(z)`.
fn calls(text: &str) -> Result<Vec<Call<'_>>, ParseError> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    loop {
        let start = i;
        while i < bytes.len() && bytes[i] != b'(' && bytes[i] != b',' {
            i += 1;
        }
        let name = &text[start..i];
        if name.is_empty() {
            return err(format!("missing a fetch or converter name in '{text}'"));
        }
        let mut args = Vec::new();
        if i < bytes.len() && bytes[i] == b'(' {
            i += 1;
            let mut cur: Vec<u8> = Vec::new();
            let mut depth = 0;
            let mut quote: Option<u8> = None;
            let mut quoted = false;
            let mut closed = false;
            while i < bytes.len() {
                let b = bytes[i];
                match (quote, b) {
                    // `\,`, `\"`, `\'` and `\\` stand for the character; any other escape
                    // (`\.`, `\(`, `\1`) is kept whole for the regular expression or the
                    // substitution that reads it, and does not nest.
                    (_, b'\\') if i + 1 < bytes.len() => {
                        i += 1;
                        if !matches!(bytes[i], b',' | b'"' | b'\'' | b'\\') {
                            cur.push(b'\\');
                        }
                        cur.push(bytes[i]);
                    }
                    (Some(q), _) if b == q => quote = None,
                    (Some(_), _) => cur.push(b),
                    (None, b'"' | b'\'') => {
                        quote = Some(b);
                        quoted = true;
                    }
                    (None, b'(') => {
                        depth += 1;
                        cur.push(b'(');
                    }
                    (None, b')') if depth > 0 => {
                        depth -= 1;
                        cur.push(b')');
                    }
                    (None, b')') => {
                        closed = true;
                        i += 1;
                        break;
                    }
                    (None, b',') if depth == 0 => args.push(lossy(std::mem::take(&mut cur))),
                    (None, _) => cur.push(b),
                }
                i += 1;
            }
            if !closed {
                return err(format!("missing ')' after the arguments of '{name}'"));
            }
            // `f()` has no argument; `f(a,)` has an empty second one.
            if !args.is_empty() || !cur.is_empty() || quoted {
                args.push(lossy(cur));
            }
        }
        out.push(Call { name, args });
        match bytes.get(i) {
            None => return Ok(out),
            Some(b',') => i += 1,
            Some(_) => return err(format!("unexpected '{}' after '{name}(...)'", &text[i..])),
        }
    }
}

/// Reads a sample expression.
pub fn parse_expr(text: &str, book: &PatternBook) -> Result<Expr, ParseError> {
    let mut calls = calls(text)?.into_iter();
    let first = calls.next().expect("calls gives at least one");
    let fetch = parse_fetch(&first)?;
    let convs = calls
        .map(|c| parse_conv(&c, book))
        .collect::<Result<_, _>>()?;
    Ok(Expr { fetch, convs })
}

fn arity(c: &Call<'_>, min: usize, max: usize) -> Result<(), ParseError> {
    let n = c.args.len();
    if n < min {
        return err(format!(
            "'{}' expects {min} argument{}",
            c.name,
            if min > 1 { "s" } else { "" }
        ));
    }
    if n > max {
        return err(format!(
            "'{}' takes at most {max} argument{}",
            c.name,
            if max == 1 { "" } else { "s" }
        ));
    }
    Ok(())
}

fn int(c: &Call<'_>, i: usize) -> Result<Option<i64>, ParseError> {
    match c.args.get(i).map(|a| a.trim()) {
        None | Some("") => Ok(None),
        Some(a) => a
            .parse()
            .map(Some)
            .or_else(|_| err(format!("'{}' expects an integer, not '{a}'", c.name))),
    }
}

/// A ClientHello list fetch and its optional argument: non-zero leaves GREASE values out.
fn hello(c: &Call<'_>, part: HelloPart) -> Result<Fetch, ParseError> {
    arity(c, 0, 1)?;
    Ok(Fetch::Hello(part, int(c, 0)?.unwrap_or(0) != 0))
}

fn opt_str(c: &Call<'_>, i: usize) -> Option<String> {
    c.args.get(i).filter(|a| !a.is_empty()).cloned()
}

fn header_name(c: &Call<'_>) -> Result<String, ParseError> {
    Ok(c.args
        .first()
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default())
}

fn occ(c: &Call<'_>) -> Result<Option<i32>, ParseError> {
    Ok(int(c, 1)?.map(|n| n as i32))
}

/// `proc.`, `sess.`, `txn.`, `req.`, `res.` or `check.` and a name.
pub fn parse_var(name: &str) -> Result<VarName, ParseError> {
    let (scope, rest) = name.split_once('.').unwrap_or(("", name));
    let scope = match scope {
        "proc" => VarScope::Proc,
        "sess" => VarScope::Sess,
        "txn" => VarScope::Txn,
        "req" => VarScope::Req,
        "res" => VarScope::Res,
        "check" => VarScope::Check,
        _ => {
            return err(format!(
                "variable '{name}' needs a scope: proc., sess., txn., req., res. or check."
            ))
        }
    };
    if rest.is_empty()
        || !rest
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.')
    {
        return err(format!(
            "invalid variable name '{name}' (letters, digits, '_' and '.')"
        ));
    }
    Ok(VarName {
        scope,
        name: rest.to_string(),
        conds: VarConds::default(),
    })
}

/// HAProxy fetches that sluice does not have yet (named as such rather than unknown).
const PENDING_FETCHES: &[&str] = &["ssl_fc_session_id", "ssl_fc_server_random"];

/// The NSS key log label of an `ssl_fc_*_secret` fetch.
fn secret_label(fetch: &str) -> Option<&'static str> {
    Some(match fetch {
        "ssl_fc_client_early_traffic_secret" => "CLIENT_EARLY_TRAFFIC_SECRET",
        "ssl_fc_client_handshake_traffic_secret" => "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
        "ssl_fc_server_handshake_traffic_secret" => "SERVER_HANDSHAKE_TRAFFIC_SECRET",
        "ssl_fc_client_traffic_secret_0" => "CLIENT_TRAFFIC_SECRET_0",
        "ssl_fc_server_traffic_secret_0" => "SERVER_TRAFFIC_SECRET_0",
        "ssl_fc_exporter_secret" => "EXPORTER_SECRET",
        "ssl_fc_early_exporter_secret" => "EARLY_EXPORTER_SECRET",
        _ => return None,
    })
}

fn parse_fetch(c: &Call<'_>) -> Result<Fetch, ParseError> {
    let none = |f: Fetch| arity(c, 0, 0).map(|()| f);
    let proxy = |f: fn(Option<NameRef>) -> Fetch| {
        arity(c, 0, 1).map(|()| f(opt_str(c, 0).map(NameRef::new)))
    };
    Ok(match c.name {
        "src" => none(Fetch::Src)?,
        "src_port" => none(Fetch::SrcPort)?,
        "dst" => none(Fetch::Dst)?,
        "dst_port" => none(Fetch::DstPort)?,
        "fe_name" => none(Fetch::FeName)?,
        "fe_id" => none(Fetch::FeId)?,
        "be_name" => none(Fetch::BeName)?,
        "be_id" => none(Fetch::BeId)?,
        "srv_name" => none(Fetch::SrvName)?,
        "srv_id" => none(Fetch::SrvId)?,
        "fe_conn" => proxy(Fetch::FeConn)?,
        "be_conn" => proxy(Fetch::BeConn)?,
        "nbsrv" => proxy(Fetch::NbSrv)?,
        "connslots" => proxy(Fetch::Connslots)?,
        "queue" => proxy(Fetch::Queue)?,
        "avg_queue" => proxy(Fetch::AvgQueue)?,
        "method" => none(Fetch::Method)?,
        "path" => none(Fetch::Path)?,
        "pathq" => none(Fetch::PathQ)?,
        "query" => none(Fetch::Query)?,
        "url" => none(Fetch::Url)?,
        "url_param" | "urlp" => {
            arity(c, 1, 2)?;
            Fetch::UrlParam(c.args[0].clone())
        }
        "base" => none(Fetch::Base)?,
        "req.hdr" => {
            arity(c, 0, 2)?;
            Fetch::ReqHdr(header_name(c)?, occ(c)?)
        }
        "hdr" => {
            arity(c, 0, 2)?;
            Fetch::Hdr(header_name(c)?, occ(c)?)
        }
        "req.fhdr" => {
            arity(c, 1, 2)?;
            Fetch::ReqFhdr(header_name(c)?, occ(c)?)
        }
        "req.hdr_cnt" | "hdr_cnt" | "req.fhdr_cnt" => {
            arity(c, 0, 1)?;
            // `hdr_cnt` counts comma-separated values, `fhdr_cnt` whole lines.
            Fetch::ReqHdrCnt(header_name(c)?, c.name != "req.fhdr_cnt")
        }
        "req.cook" | "cook" => {
            arity(c, 0, 1)?;
            Fetch::ReqCook(opt_str(c, 0).unwrap_or_default())
        }
        "req.cook_val" | "cook_val" => {
            arity(c, 0, 1)?;
            Fetch::ReqCookVal(opt_str(c, 0).unwrap_or_default())
        }
        "req.hdr_ip" | "hdr_ip" => {
            arity(c, 1, 2)?;
            Fetch::ReqHdrIp(header_name(c)?, occ(c)?)
        }
        "http_auth_bearer" => {
            arity(c, 0, 1)?;
            Fetch::HttpAuthBearer(opt_str(c, 0).map(|h| h.to_ascii_lowercase()))
        }
        "req.cook_cnt" | "cook_cnt" => {
            arity(c, 0, 1)?;
            Fetch::ReqCookCnt(opt_str(c, 0).unwrap_or_default())
        }
        "res.cook" | "scook" => {
            arity(c, 0, 1)?;
            Fetch::ResCook(opt_str(c, 0).unwrap_or_default())
        }
        "res.cook_cnt" | "scook_cnt" => {
            arity(c, 0, 1)?;
            Fetch::ResCookCnt(opt_str(c, 0).unwrap_or_default())
        }
        "req.body" => none(Fetch::ReqBody)?,
        "req.len" | "req_len" => none(Fetch::PayloadLen(PayloadSide::Req))?,
        "res.len" => none(Fetch::PayloadLen(PayloadSide::Res))?,
        name @ ("req.payload" | "payload" | "res.payload") => {
            arity(c, 2, 2)?;
            let at = |i: usize| {
                c.args[i]
                    .trim()
                    .parse::<usize>()
                    .or_else(|_| err(format!("'{}' expects an offset and a length", c.name)))
            };
            Fetch::Payload(payload_side(name), at(0)?, at(1)?)
        }
        name @ ("req.payload_lv" | "payload_lv" | "res.payload_lv") => {
            arity(c, 2, 3)?;
            let bad = || ParseError(format!("'{}' expects OFFSET1,LENGTH[,OFFSET2]", c.name));
            let size_at = c.args[0].trim().parse::<usize>().map_err(|_| bad())?;
            let size_len = c.args[1]
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=4).contains(n));
            let size_len = size_len.ok_or_else(|| {
                ParseError(format!("'{}': the length field is 1 to 4 bytes", c.name))
            })?;
            let start = match c.args.get(2).map(|a| a.trim()) {
                None => None,
                Some(o) => {
                    let relative = o.starts_with(['+', '-']);
                    Some((relative, o.parse::<i64>().map_err(|_| bad())?))
                }
            };
            Fetch::PayloadLv {
                side: payload_side(name),
                size_at,
                size_len,
                start,
            }
        }
        "req.ssl_hello_type" | "req_ssl_hello_type" => none(Fetch::ReqSslHelloType)?,
        "req.ssl_ver" | "req_ssl_ver" => none(Fetch::ReqSslVer)?,
        "req.ssl_sni" | "req_ssl_sni" => none(Fetch::ReqSslSni)?,
        "req.ssl_alpn" => none(Fetch::ReqSslAlpn)?,
        "req.ssl_ec_ext" => none(Fetch::ReqSslEcExt)?,
        "req.ssl_st_ext" => none(Fetch::ReqSslStExt)?,
        "req.ver" | "req_ver" => none(Fetch::ReqVer)?,
        "res.hdr" | "shdr" => {
            arity(c, 0, 2)?;
            Fetch::ResHdr(header_name(c)?, occ(c)?)
        }
        "res.fhdr" => {
            arity(c, 1, 2)?;
            Fetch::ResFhdr(header_name(c)?, occ(c)?)
        }
        "res.hdr_cnt" | "shdr_cnt" | "res.fhdr_cnt" => {
            arity(c, 0, 1)?;
            Fetch::ResHdrCnt(header_name(c)?, c.name != "res.fhdr_cnt")
        }
        "status" => none(Fetch::Status)?,
        "res.ver" | "resp_ver" => none(Fetch::ResVer)?,
        "var" => {
            arity(c, 1, 1)?;
            Fetch::Var(parse_var(&c.args[0])?)
        }
        "env" => {
            arity(c, 1, 1)?;
            Fetch::Env(c.args[0].clone())
        }
        "date" => {
            arity(c, 0, 2)?;
            Fetch::Date(int(c, 0)?.unwrap_or(0), time_unit(c, 1)?)
        }
        "rand" => {
            arity(c, 0, 1)?;
            Fetch::Rand(int(c, 0)?.map(|n| n.max(1) as u64))
        }
        "unique-id" => none(Fetch::UniqueId)?,
        "ssl_fc" => none(Fetch::SslFc)?,
        "ssl_fc_sni" => none(Fetch::SslFcSni)?,
        "ssl_fc_protocol" => none(Fetch::SslFcProtocol)?,
        "ssl_fc_cipher" => none(Fetch::SslFcCipher)?,
        "ssl_fc_client_random" => none(Fetch::SslFcClientRandom)?,
        "ssl_fc_session_key" => none(Fetch::SslFcSessionKey)?,
        name if secret_label(name).is_some() => {
            none(Fetch::SslFcSecret(secret_label(name).unwrap_or_default()))?
        }
        "ssl_fc_cipherlist_bin" => hello(c, HelloPart::Ciphers)?,
        "ssl_fc_cipherlist_hex" => hello(c, HelloPart::CiphersHex)?,
        "ssl_fc_cipherlist_str" => hello(c, HelloPart::CipherNames)?,
        "ssl_fc_extlist_bin" => hello(c, HelloPart::Extensions)?,
        "ssl_fc_eclist_bin" => hello(c, HelloPart::Groups)?,
        "ssl_fc_cipherlist_xxh" => none(Fetch::Hello(HelloPart::CiphersXxh64, false))?,
        "ssl_fc_ecformats_bin" => none(Fetch::Hello(HelloPart::PointFormats, false))?,
        "ssl_fc_protocol_hello_id" => none(Fetch::Hello(HelloPart::Version, false))?,
        "ssl_fc_alpn" => none(Fetch::SslFcAlpn)?,
        "ssl_bc" => none(Fetch::SslBc)?,
        "ssl_bc_protocol" => none(Fetch::SslBcProtocol)?,
        "ssl_bc_cipher" => none(Fetch::SslBcCipher)?,
        "ssl_bc_alpn" => none(Fetch::SslBcAlpn)?,
        "ssl_c_used" => none(Fetch::SslCUsed)?,
        "ssl_c_verify" => none(Fetch::SslCVerify)?,
        "ssl_c_s_dn" => none(Fetch::SslCSubject)?,
        "ssl_c_i_dn" => none(Fetch::SslCIssuer)?,
        "ssl_fc_is_resumed" => none(Fetch::SslFcIsResumed)?,
        "ssl_fc_has_early" => none(Fetch::SslFcHasEarly)?,
        "ssl_fc_err" | "ssl_c_err" | "ssl_c_ca_err" => none(Fetch::SslErr)?,
        "fc_err" => none(Fetch::FcErr)?,
        "fc_err_str" => none(Fetch::FcErrStr)?,
        "fc_rtt" | "fc_rttvar" => {
            arity(c, 0, 1)?;
            let us = match opt_str(c, 0).as_deref() {
                None | Some("ms") => false,
                Some("us") => true,
                Some(other) => {
                    return err(format!(
                        "fetch '{}': unit '{other}' is not 'ms' or 'us'",
                        c.name
                    ))
                }
            };
            Fetch::TcpInfo(if c.name == "fc_rtt" {
                TcpInfoField::Rtt { us }
            } else {
                TcpInfoField::RttVar { us }
            })
        }
        "fc_unacked" => none(Fetch::TcpInfo(TcpInfoField::Unacked))?,
        "fc_sacked" => none(Fetch::TcpInfo(TcpInfoField::Sacked))?,
        "fc_lost" => none(Fetch::TcpInfo(TcpInfoField::Lost))?,
        "fc_retrans" => none(Fetch::TcpInfo(TcpInfoField::Retrans))?,
        "fc_fackets" => none(Fetch::TcpInfo(TcpInfoField::Fackets))?,
        "fc_reordering" => none(Fetch::TcpInfo(TcpInfoField::Reordering))?,
        "http_auth" | "http_auth_group" => {
            arity(c, 1, 1)?;
            let list = NameRef::new(c.args[0].clone());
            match c.name {
                "http_auth" => Fetch::HttpAuth(list),
                _ => Fetch::HttpAuthGroup(list),
            }
        }
        "http_auth_type" => none(Fetch::HttpAuthType)?,
        "http_auth_user" => none(Fetch::HttpAuthUser)?,
        "http_auth_pass" => none(Fetch::HttpAuthPass)?,
        "fc_pp_authority" => none(Fetch::FcPpAuthority)?,
        "src_is_local" => none(Fetch::SrcIsLocal)?,
        "req.body_len" => none(Fetch::ReqBodyLen)?,
        "req.body_size" => none(Fetch::ReqBodySize)?,
        "res.body" => none(Fetch::ResBody)?,
        "res.body_len" => none(Fetch::ResBodyLen)?,
        "res.body_size" => none(Fetch::ResBodySize)?,
        "req.body_param" => {
            arity(c, 1, 2)?;
            Fetch::ReqBodyParam(c.args[0].clone())
        }
        "fe_req_rate" => proxy(Fetch::FeReqRate)?,
        "fe_sess_rate" => proxy(Fetch::FeSessRate)?,
        "be_sess_rate" => proxy(Fetch::BeSessRate)?,
        "srv_is_up" | "srv_conn" | "srv_sess_rate" => {
            arity(c, 1, 1)?;
            let (be, srv) = c.args[0]
                .split_once('/')
                .ok_or_else(|| ParseError(format!("'{}' expects BACKEND/SERVER", c.name)))?;
            match c.name {
                "srv_is_up" => Fetch::SrvIsUp(NameRef::new(be), NameRef::new(srv)),
                "srv_conn" => Fetch::SrvConn(NameRef::new(be), NameRef::new(srv)),
                _ => Fetch::SrvSessRate(NameRef::new(be), NameRef::new(srv)),
            }
        }
        "dst_is_local" => none(Fetch::DstIsLocal)?,
        "stopping" => none(Fetch::Stopping)?,
        "res.cache_hit" => none(Fetch::ResCacheHit)?,
        "res.cache_name" => none(Fetch::ResCacheName)?,
        "http_first_req" => none(Fetch::HttpFirstReq)?,
        "last_rule_file" => none(Fetch::LastRuleFile)?,
        "last_rule_line" => none(Fetch::LastRuleLine)?,
        "capture.req.hdr" | "capture.res.hdr" => {
            arity(c, 1, 1)?;
            let slot = int(c, 0)?
                .filter(|n| *n >= 0)
                .ok_or_else(|| ParseError(format!("'{}' expects a slot number", c.name)))?;
            Fetch::Captured {
                response: c.name == "capture.res.hdr",
                slot: slot as usize,
            }
        }
        "thread" => none(Fetch::Thread)?,
        "so_id" => none(Fetch::SoId)?,
        "so_name" => none(Fetch::SoName)?,
        "hostname" => none(Fetch::Hostname)?,
        "fc_http_major" => none(Fetch::FcHttpMajor)?,
        "be_server_timeout" => none(Fetch::BeServerTimeout)?,
        "be_tunnel_timeout" => none(Fetch::BeTunnelTimeout)?,
        "cur_server_timeout" => none(Fetch::CurServerTimeout)?,
        "cur_tunnel_timeout" => none(Fetch::CurTunnelTimeout)?,
        "uuid" => {
            arity(c, 0, 1)?;
            if int(c, 0)?.is_some_and(|v| v != 4) {
                return err("'uuid' makes version 4 UUIDs only".to_string());
            }
            Fetch::Uuid
        }
        "base32" => none(Fetch::Base32)?,
        "url32" => none(Fetch::Url32)?,
        "base32+src" => none(Fetch::Base32Src)?,
        "capture.req.method" => none(Fetch::CaptureReqMethod)?,
        "capture.req.uri" => none(Fetch::CaptureReqUri)?,
        "capture.req.ver" => none(Fetch::CaptureReqVer)?,
        "txn.status" => none(Fetch::Status)?,
        "fc_pp_unique_id" => none(Fetch::FcPpUniqueId)?,
        "always_true" => none(Fetch::Bool(true))?,
        "always_false" => none(Fetch::Bool(false))?,
        "int" => {
            arity(c, 1, 1)?;
            Fetch::Int(int(c, 0)?.unwrap_or(0))
        }
        "str" => {
            // `str()` is the empty string, as HAProxy reads it.
            arity(c, 0, 1)?;
            Fetch::Str(c.args.first().cloned().unwrap_or_default())
        }
        "bool" => {
            arity(c, 1, 1)?;
            Fetch::Bool(int(c, 0)?.unwrap_or(0) != 0)
        }
        "bin" => {
            arity(c, 1, 1)?;
            let h = c.args[0].trim();
            let bytes = from_hex(h)
                .ok_or_else(|| ParseError(format!("'bin' expects hexadecimal bytes, not '{h}'")))?;
            Fetch::BinConst(bytes)
        }
        "ipv4" | "ipv6" => {
            arity(c, 1, 1)?;
            Fetch::Ip(
                c.args[0]
                    .parse()
                    .or_else(|_| err(format!("'{}' expects an address", c.name)))?,
            )
        }
        other if table_fetch(other).is_some() => {
            let (source, op, counter) = table_fetch(other).expect("checked");
            // An array's fetch takes the element's index first (`sc_get_gpt(IDX,SLOT)`).
            let (counter, skip) = match counter {
                Named::Legacy(c) => (c, 0),
                Named::Array(element) => (element(array_index(c, 0)?), 1),
            };
            // `sc_*` takes the slot as its next argument; the others only the table.
            let (source, table_at) = match source {
                None => {
                    arity(c, 1 + skip, 2 + skip)?;
                    let slot = int(c, skip)?
                        .filter(|n| (0..=2).contains(n))
                        .ok_or_else(|| {
                            ParseError(format!("'{other}' expects a tracking slot 0, 1 or 2"))
                        })?;
                    (TableSource::Slot(slot as u8), 1 + skip)
                }
                Some(s) => {
                    arity(c, skip, 1 + skip)?;
                    (s, skip)
                }
            };
            Fetch::Table {
                source,
                op,
                counter,
                table: opt_str(c, table_at).map(NameRef::new),
            }
        }
        other if PENDING_FETCHES.contains(&other) => {
            return err(format!("sample fetch '{other}' is not supported yet"))
        }
        other => return err(format!("unknown sample fetch '{other}'")),
    })
}

/// The counter a table word names: a legacy one, or an array's, whose element an index
/// argument chooses.
#[derive(Clone, Copy)]
enum Named {
    Legacy(Counter),
    Array(fn(u8) -> Counter),
}

/// The operation and counter a table word names (`http_req_rate`, `get_gpc0`,
/// `inc_gpc0`, `clr_gpc1`, `tracked`, and the arrays' `get_gpt`, `get_gpc`, `inc_gpc`,
/// `clr_gpc`, `gpc_rate`).
fn table_op(word: &str) -> Option<(TableOp, Named)> {
    let array = match word {
        "get_gpt" => Some((TableOp::Read, Counter::Gpt as fn(u8) -> Counter)),
        "get_gpc" => Some((TableOp::Read, Counter::Gpc as fn(u8) -> Counter)),
        "inc_gpc" => Some((TableOp::Inc, Counter::Gpc as fn(u8) -> Counter)),
        "clr_gpc" => Some((TableOp::Clr, Counter::Gpc as fn(u8) -> Counter)),
        "gpc_rate" => Some((TableOp::Read, Counter::GpcRate as fn(u8) -> Counter)),
        _ => None,
    };
    if let Some((op, element)) = array {
        return Some((op, Named::Array(element)));
    }
    match word {
        "kbytes_in" => return Some((TableOp::ReadKilo, Named::Legacy(Counter::BytesInCnt))),
        "kbytes_out" => return Some((TableOp::ReadKilo, Named::Legacy(Counter::BytesOutCnt))),
        _ => {}
    }
    let (op, name) = if let Some(n) = word.strip_prefix("get_") {
        (TableOp::Read, n)
    } else if let Some(n) = word.strip_prefix("inc_") {
        (TableOp::Inc, n)
    } else if let Some(n) = word.strip_prefix("clr_") {
        (TableOp::Clr, n)
    } else if word == "tracked" {
        return Some((TableOp::Tracked, Named::Legacy(Counter::Gpc0)));
    } else {
        (TableOp::Read, word)
    };
    let counter = Counter::from_name(name)?;
    // Only the general purpose counters are read through get_ or changed.
    match op {
        TableOp::Read if counter.general_purpose() != (word != name) => None,
        TableOp::Inc | TableOp::Clr if !matches!(counter, Counter::Gpc0 | Counter::Gpc1) => None,
        _ => Some((op, Named::Legacy(counter))),
    }
}

/// The counter a table converter reads and how (`table_http_req_rate`, `table_gpc0`,
/// `table_kbytes_in` in kilobytes, and the arrays' `table_gpt`, `table_gpc`,
/// `table_gpc_rate`).
fn table_conv(word: &str) -> Option<(TableOp, Named)> {
    Some(match word {
        "gpt" => (TableOp::Read, Named::Array(Counter::Gpt)),
        "gpc" => (TableOp::Read, Named::Array(Counter::Gpc)),
        "gpc_rate" => (TableOp::Read, Named::Array(Counter::GpcRate)),
        "kbytes_in" => (TableOp::ReadKilo, Named::Legacy(Counter::BytesInCnt)),
        "kbytes_out" => (TableOp::ReadKilo, Named::Legacy(Counter::BytesOutCnt)),
        _ => (TableOp::Read, Named::Legacy(Counter::from_name(word)?)),
    })
}

/// An array element's index argument: 0 to 99.
fn array_index(c: &Call<'_>, at: usize) -> Result<u8, ParseError> {
    let max = crate::conf::stick::ARRAY_MAX as i64;
    int(c, at)?
        .filter(|n| (0..max).contains(n))
        .map(|n| n as u8)
        .ok_or_else(|| {
            ParseError(format!(
                "'{}' expects an array index from 0 to {} first",
                c.name,
                max - 1
            ))
        })
}

/// A table fetch's source (`None`: `sc_*`, whose slot is an argument), operation and
/// counter.
fn table_fetch(name: &str) -> Option<(Option<TableSource>, TableOp, Named)> {
    let (source, rest) = if let Some(r) = name.strip_prefix("sc_") {
        (None, r)
    } else if let Some(r) = name.strip_prefix("src_") {
        (Some(TableSource::Src), r)
    } else {
        let slot = name.strip_prefix("sc")?.as_bytes();
        match slot {
            [d @ b'0'..=b'2', b'_', ..] => (Some(TableSource::Slot(d - b'0')), &name[4..]),
            _ => return None,
        }
    };
    let (op, counter) = table_op(rest)?;
    // The arrays' fetches are `sc_*` and `src_*` only (the slot is an argument).
    let numbered = matches!(source, Some(TableSource::Slot(_)));
    if (op == TableOp::Tracked && source == Some(TableSource::Src))
        || (numbered && matches!(counter, Named::Array(_)))
    {
        return None;
    }
    Some((source, op, counter))
}

fn int_arg(c: &Call<'_>) -> Result<IntArg, ParseError> {
    arity(c, 1, 1)?;
    let a = c.args[0].trim();
    match a.parse::<i64>() {
        Ok(n) => Ok(IntArg::Const(n)),
        Err(_) => Ok(IntArg::Var(parse_var(a).map_err(|_| {
            ParseError(format!(
                "'{}' expects an integer or a variable, not '{a}'",
                c.name
            ))
        })?)),
    }
}

/// A time unit argument (`s`, `ms`, `us`; seconds when absent) as units per second.
fn time_unit(c: &Call<'_>, at: usize) -> Result<i64, ParseError> {
    match c.args.get(at).map(|a| a.trim()) {
        None | Some("") | Some("s") => Ok(1),
        Some("ms") => Ok(1000),
        Some("us") => Ok(1_000_000),
        Some(other) => err(format!("{}: unknown unit '{other}' (s, ms or us)", c.name)),
    }
}

fn avalanche(c: &Call<'_>) -> Result<bool, ParseError> {
    arity(c, 0, 1)?;
    Ok(int(c, 0)?.unwrap_or(0) != 0)
}

fn delimited(c: &Call<'_>) -> Result<(i32, Vec<u8>, u32), ParseError> {
    arity(c, 2, 3)?;
    let index = int(c, 0)?.unwrap_or(0);
    if index == 0 {
        return err(format!(
            "'{}': the index counts from 1 (or -1 from the end)",
            c.name
        ));
    }
    let delims = c.args[1].as_bytes().to_vec();
    if delims.is_empty() {
        return err(format!("'{}' needs at least one delimiter", c.name));
    }
    let count = int(c, 2)?.unwrap_or(1);
    Ok((index as i32, delims, count.max(0) as u32))
}

/// HAProxy converters that sluice does not have yet.
const PENDING_CONVS: &[&str] = &[
    "aes_gcm_dec",
    "protobuf",
    "ungrpc",
    "debug",
    "language",
    "capture-req",
    "capture-res",
    "da-csv-conv",
    "51d.single",
    "nbsrv",
    "host_only",
    "port_only",
];

fn parse_conv(c: &Call<'_>, book: &PatternBook) -> Result<Conv, ParseError> {
    let none = |v: Conv| arity(c, 0, 0).map(|()| v);
    if let Some(rest) = c.name.strip_prefix("map") {
        return parse_map_conv(c, rest, book);
    }
    Ok(match c.name {
        "lower" => none(Conv::Lower)?,
        "upper" => none(Conv::Upper)?,
        "base64" => none(Conv::Base64)?,
        "b64dec" => none(Conv::B64Dec)?,
        "hex" => none(Conv::Hex)?,
        "hex2i" => none(Conv::Hex2i)?,
        "url_dec" => {
            arity(c, 0, 1)?;
            // As HAProxy reads it: any non-zero integer.
            let in_form =
                opt_str(c, 0).is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n != 0));
            Conv::UrlDec(in_form)
        }
        "json" => {
            arity(c, 0, 1)?;
            Conv::Json
        }
        "length" => none(Conv::Length)?,
        "field" => {
            let (index, delims, count) = delimited(c)?;
            Conv::Field {
                index,
                delims,
                count,
            }
        }
        "word" => {
            let (index, delims, count) = delimited(c)?;
            Conv::Word {
                index,
                delims,
                count,
            }
        }
        "regsub" => {
            arity(c, 2, 3)?;
            let flags = c.args.get(2).map(String::as_str).unwrap_or("");
            if let Some(f) = flags.chars().find(|f| *f != 'i' && *f != 'g') {
                return err(format!("regsub: unknown flag '{f}' (i or g)"));
            }
            let re = regex::bytes::RegexBuilder::new(&c.args[0])
                .case_insensitive(flags.contains('i'))
                .build()
                .or_else(|e| err(format!("regsub: invalid regular expression: {e}")))?;
            Conv::Regsub {
                re: Regex(re),
                subst: substitution(&c.args[1]),
                global: flags.contains('g'),
            }
        }
        "add" => Conv::Add(int_arg(c)?),
        "sub" => Conv::Sub(int_arg(c)?),
        "mul" => Conv::Mul(int_arg(c)?),
        "div" => Conv::Div(int_arg(c)?),
        "mod" => Conv::Mod(int_arg(c)?),
        "and" => Conv::And(int_arg(c)?),
        "or" => Conv::Or(int_arg(c)?),
        "xor" => Conv::Xor(int_arg(c)?),
        "neg" => none(Conv::Neg)?,
        "bool" => none(Conv::Bool)?,
        "not" => none(Conv::Not)?,
        "odd" => none(Conv::Odd)?,
        "even" => none(Conv::Even)?,
        "ipmask" => {
            arity(c, 1, 2)?;
            let v4 = mask_arg(&c.args[0], false)?;
            let v6 = c.args.get(1).map(|m| mask_arg(m, true)).transpose()?;
            Conv::IpMask(v4, v6)
        }
        "crc32" => Conv::Crc32(avalanche(c)?),
        "djb2" => Conv::Djb2(avalanche(c)?),
        "sdbm" => Conv::Sdbm(avalanche(c)?),
        "wt6" => Conv::Wt6(avalanche(c)?),
        "xxh3" => {
            arity(c, 0, 1)?;
            Conv::Xxh3(int(c, 0)?.unwrap_or(0) as u64)
        }
        "crc32c" => Conv::Crc32c(avalanche(c)?),
        "xxh32" | "xxh64" => {
            arity(c, 0, 1)?;
            let seed = int(c, 0)?.unwrap_or(0);
            if c.name == "xxh32" {
                Conv::Xxh32(seed as u32)
            } else {
                Conv::Xxh64(seed as u64)
            }
        }
        "http_date" => {
            arity(c, 0, 2)?;
            Conv::HttpDate(int(c, 0)?.unwrap_or(0), time_unit(c, 1)?)
        }
        "language" => {
            arity(c, 1, 2)?;
            let default = opt_str(c, 1).map(String::into_bytes);
            Conv::Language(c.args[0].clone().into_bytes(), default)
        }
        "bytes" => {
            arity(c, 1, 2)?;
            let off = int(c, 0)?.unwrap_or(0);
            let len = int(c, 1)?;
            if off < 0 || len.is_some_and(|l| l < 0) {
                return err("bytes: offset and length are positive");
            }
            Conv::Bytes(off as usize, len.map(|l| l as usize))
        }
        "ltime" | "utime" => {
            arity(c, 1, 2)?;
            let off = int(c, 1)?.unwrap_or(0);
            if c.name == "ltime" {
                Conv::Ltime(c.args[0].clone(), off)
            } else {
                Conv::Utime(c.args[0].clone(), off)
            }
        }
        "concat" => {
            arity(c, 0, 3)?;
            let var = opt_str(c, 1).map(|v| parse_var(&v)).transpose()?;
            Conv::Concat(
                opt_str(c, 0).unwrap_or_default(),
                var,
                opt_str(c, 2).unwrap_or_default(),
            )
        }
        "set-var" => {
            arity(c, 1, 5)?;
            let mut var = parse_var(&c.args[0])?;
            let conds: Vec<&str> = c.args[1..].iter().map(String::as_str).collect();
            var.conds = VarConds::parse(&conds).map_err(ParseError)?;
            Conv::SetVar(var)
        }
        "in_table" | "table_trackers" => {
            arity(c, 1, 1)?;
            match c.name {
                "in_table" => Conv::InTable(NameRef::new(c.args[0].clone())),
                _ => Conv::TableTrackers(NameRef::new(c.args[0].clone())),
            }
        }
        "sha1" => none(Conv::Digest(DigestAlg::Sha1))?,
        "sha2" => {
            arity(c, 0, 1)?;
            Conv::Digest(match int(c, 0)?.unwrap_or(256) {
                224 => DigestAlg::Sha224,
                256 => DigestAlg::Sha256,
                384 => DigestAlg::Sha384,
                512 => DigestAlg::Sha512,
                n => return err(format!("'sha2' expects 224, 256, 384 or 512, not {n}")),
            })
        }
        "fix_is_valid" => none(Conv::FixIsValid)?,
        "mqtt_is_valid" => none(Conv::MqttIsValid)?,
        "mqtt_field_value" => {
            arity(c, 2, 2)?;
            let (t, name) = (&c.args[0], &c.args[1]);
            let kind =
                mqtt_type(t).ok_or_else(|| ParseError(format!("Unknown MQTT type '{t}'")))?;
            let field = mqtt_field(kind, name).ok_or_else(|| {
                ParseError(format!(
                    "Unknown MQTT field name '{name}' for packet type '{t}'"
                ))
            })?;
            Conv::MqttFieldValue(kind, field)
        }
        "fix_tag_value" => {
            arity(c, 1, 1)?;
            match fix_tag(&c.args[0]) {
                0 => return err(format!("Unknown FIX tag name '{}'", c.args[0])),
                id => Conv::FixTagValue(id),
            }
        }
        "json_query" => {
            arity(c, 1, 2)?;
            let path = json_path(&c.args[0])
                .map_err(|e| ParseError(format!("'json_query': bad JSON path: {e}")))?;
            let int = match c.args.get(1).map(|t| t.trim()) {
                None => false,
                Some("int") => true,
                Some(other) => {
                    return err(format!(
                        "'json_query': output type '{other}' is not supported (only 'int' is)"
                    ))
                }
            };
            Conv::JsonQuery { path, int }
        }
        "jwt_header_query" | "jwt_payload_query" => {
            arity(c, 0, 2)?;
            let path = match c.args.first().map(|a| a.trim()).filter(|a| !a.is_empty()) {
                None => None,
                Some(p) => Some(
                    json_path(p)
                        .map_err(|e| ParseError(format!("'{}': bad JSON path: {e}", c.name)))?,
                ),
            };
            let int = match c.args.get(1).map(|t| t.trim()) {
                None | Some("") => false,
                Some("int") => true,
                Some(other) => {
                    return err(format!(
                        "'{}': output type '{other}' is not supported (only 'int' is)",
                        c.name
                    ))
                }
            };
            Conv::JwtQuery {
                payload: c.name == "jwt_payload_query",
                path,
                int,
            }
        }
        "jwt_verify" => {
            arity(c, 2, 2)?;
            let alg = match parse_var(c.args[0].trim()) {
                Ok(v) if c.args[0].contains('.') => StrArg::Var(v),
                _ => {
                    let a = c.args[0].trim();
                    if !super::sample::JWT_ALGORITHMS.contains(&a) {
                        return err(format!("'jwt_verify': unknown JWT algorithm: {a}"));
                    }
                    if a.starts_with("PS") {
                        return err("'jwt_verify': RSASSA-PSS JWS signing not managed yet");
                    }
                    StrArg::Const(a.as_bytes().to_vec())
                }
            };
            Conv::JwtVerify {
                alg,
                key: jwt_key(c.args[1].trim())?,
            }
        }
        "digest" | "hmac" => {
            arity(
                c,
                1 + usize::from(c.name == "hmac"),
                1 + usize::from(c.name == "hmac"),
            )?;
            let alg = match c.args[0].trim().to_ascii_lowercase().as_str() {
                "sha1" => DigestAlg::Sha1,
                "sha224" => DigestAlg::Sha224,
                "sha256" => DigestAlg::Sha256,
                "sha384" => DigestAlg::Sha384,
                "sha512" => DigestAlg::Sha512,
                other => {
                    let known = "sha1, sha224, sha256, sha384, sha512";
                    return err(format!(
                        "'{}': digest '{other}' is not supported ({known})",
                        c.name
                    ));
                }
            };
            if c.name == "digest" {
                Conv::Digest(alg)
            } else {
                let key = c.args[1].trim();
                let key = match parse_var(key) {
                    Ok(v) => KeyArg::Var(v),
                    Err(_) => KeyArg::Const(
                        base64::engine::general_purpose::STANDARD
                            .decode(key)
                            .or_else(|_| {
                                err(format!(
                                    "'hmac' expects a base64 key or a variable, not '{key}'"
                                ))
                            })?,
                    ),
                };
                Conv::Hmac(alg, key)
            }
        }
        "ub64enc" => none(Conv::Ub64Enc)?,
        "ub64dec" => none(Conv::Ub64Dec)?,
        "url_enc" => {
            arity(c, 0, 1)?;
            if opt_str(c, 0).is_some_and(|t| t != "query") {
                return err("'url_enc' knows only the 'query' encoding".to_string());
            }
            Conv::UrlEnc
        }
        "be2dec" | "be2hex" => {
            let hex = c.name == "be2hex";
            arity(c, if hex { 0 } else { 2 }, 3)?;
            let sep = opt_str(c, 0).unwrap_or_default();
            let size = match int(c, 1)? {
                Some(n) if n > 0 && (n <= 8 || hex) => n as usize,
                None if hex => 1,
                _ => return err(format!("'{}' expects a chunk size from 1 to 8", c.name)),
            };
            let truncate = int(c, 2)?.unwrap_or(0) != 0;
            if hex {
                Conv::Be2Hex {
                    sep,
                    size,
                    truncate,
                }
            } else {
                Conv::Be2Dec {
                    sep,
                    size,
                    truncate,
                }
            }
        }
        "add_item" => {
            arity(c, 1, 3)?;
            let var = opt_str(c, 1).map(|v| parse_var(&v)).transpose()?;
            Conv::AddItem(c.args[0].clone(), var, opt_str(c, 2).unwrap_or_default())
        }
        "iif" => {
            arity(c, 2, 2)?;
            Conv::Iif(c.args[0].clone(), c.args[1].clone())
        }
        "secure_memcmp" | "strcmp" => {
            arity(c, 1, 1)?;
            let v = parse_var(c.args[0].trim())?;
            if c.name == "strcmp" {
                Conv::Strcmp(v)
            } else {
                Conv::SecureMemcmp(v)
            }
        }
        other if other.starts_with("table_") && table_conv(&other[6..]).is_some() => {
            // An array's converter takes the element's index first (`table_gpt(IDX,T)`).
            let (op, named) = table_conv(&other[6..]).expect("checked");
            let (counter, at) = match named {
                Named::Legacy(c) => (c, 0),
                Named::Array(element) => (element(array_index(c, 0)?), 1),
            };
            arity(c, 1 + at, 1 + at)?;
            Conv::Table {
                op,
                counter,
                table: NameRef::new(c.args[at].clone()),
            }
        }
        other if PENDING_CONVS.contains(&other) => {
            return err(format!("converter '{other}' is not supported yet"))
        }
        other => return err(format!("unknown converter '{other}'")),
    })
}

/// HAProxy's `\1` back-references become the regex crate's `${1}`; a literal `$` is doubled.
pub fn substitution(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars().peekable();
    while let Some(ch) = chars.next() {
        match ch {
            '$' => out.push_str("$$"),
            '\\' if chars.peek().is_some_and(char::is_ascii_digit) => {
                out.push_str(&format!("${{{}}}", chars.next().unwrap_or('0')));
            }
            ch => out.push(ch),
        }
    }
    out
}

/// A netmask as an address (`255.255.0.0`) or a prefix length (`16`).
fn mask_arg(m: &str, v6: bool) -> Result<IpAddr, ParseError> {
    if let Ok(ip) = m.parse::<IpAddr>() {
        if ip.is_ipv6() == v6 {
            return Ok(ip);
        }
    }
    match m.parse::<u32>() {
        Ok(bits) if !v6 && bits <= 32 => Ok(IpAddr::V4(
            (if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits)
            })
            .into(),
        )),
        Ok(bits) if v6 && bits <= 128 => Ok(IpAddr::V6(
            (if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits)
            })
            .into(),
        )),
        _ => err(format!("ipmask: invalid mask '{m}'")),
    }
}

/// `map`, `map_<match>`, `map_<match>_<output>` (the output type is read as text, which
/// converts on use).
/// An MQTT packet type: its number (1 to 15) or its name, any case.
fn mqtt_type(t: &str) -> Option<u8> {
    const TYPES: [&str; 15] = [
        "CONNECT",
        "CONNACK",
        "PUBLISH",
        "PUBACK",
        "PUBREC",
        "PUBREL",
        "PUBCOMP",
        "SUBSCRIBE",
        "SUBACK",
        "UNSUBSCRIBE",
        "UNSUBACK",
        "PINGREQ",
        "PINGRESP",
        "DISCONNECT",
        "AUTH",
    ];
    if let Ok(n @ 1..=15) = t.parse::<u8>() {
        return Some(n);
    }
    let at = TYPES.iter().position(|n| n.eq_ignore_ascii_case(t))?;
    Some(at as u8 + 1)
}

/// A field `mqtt_field_value` may read in packets of type `kind` (HAProxy 2.6's lists).
fn mqtt_field(kind: u8, name: &str) -> Option<MqttField> {
    use MqttField::*;
    const NAMES: &[(&str, MqttField)] = &[
        ("flags", Flags),
        ("reason_code", ReasonCode),
        ("protocol_name", ProtocolName),
        ("protocol_version", ProtocolVersion),
        ("client_identifier", ClientIdentifier),
        ("will_topic", WillTopic),
        ("will_payload", WillPayload),
        ("username", Username),
        ("password", Password),
        ("keepalive", Keepalive),
        ("1", PayloadFormatIndicator),
        ("2", MessageExpiryInterval),
        ("3", ContentType),
        ("8", ResponseTopic),
        ("9", CorrelationData),
        ("11", SubscriptionIdentifier),
        ("17", SessionExpiryInterval),
        ("18", AssignedClientIdentifier),
        ("19", ServerKeepalive),
        ("21", AuthenticationMethod),
        ("22", AuthenticationData),
        ("23", RequestProblemInformation),
        ("24", DelayInterval),
        ("25", RequestResponseInformation),
        ("26", ResponseInformation),
        ("28", ServerReference),
        ("31", ReasonString),
        ("33", ReceiveMaximum),
        ("34", TopicAliasMaximum),
        ("35", TopicAlias),
        ("36", MaximumQos),
        ("37", RetainAvailable),
        ("38", UserProperty),
        ("39", MaximumPacketSize),
        ("40", WildcardSubscriptionAvailable),
        ("41", SubscriptionIdentifiersAvailable),
        ("42", SharedSubscriptionAvailable),
    ];
    let field = NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(name))?.1;
    let allowed: &[MqttField] = match kind {
        1 => &[
            ProtocolName,
            ProtocolVersion,
            Flags,
            Keepalive,
            SessionExpiryInterval,
            ReceiveMaximum,
            MaximumPacketSize,
            TopicAliasMaximum,
            RequestResponseInformation,
            RequestProblemInformation,
            UserProperty,
            AuthenticationMethod,
            AuthenticationData,
            ClientIdentifier,
            DelayInterval,
            PayloadFormatIndicator,
            MessageExpiryInterval,
            ContentType,
            ResponseTopic,
            CorrelationData,
            WillTopic,
            WillPayload,
            Username,
            Password,
        ],
        2 => &[
            Flags,
            ProtocolVersion,
            ReasonCode,
            SessionExpiryInterval,
            ReceiveMaximum,
            MaximumQos,
            RetainAvailable,
            MaximumPacketSize,
            AssignedClientIdentifier,
            TopicAliasMaximum,
            ReasonString,
            WildcardSubscriptionAvailable,
            SubscriptionIdentifiersAvailable,
            SharedSubscriptionAvailable,
            ServerKeepalive,
            ResponseInformation,
            ServerReference,
            UserProperty,
            AuthenticationMethod,
            AuthenticationData,
        ],
        3 => &[
            PayloadFormatIndicator,
            MessageExpiryInterval,
            ContentType,
            ResponseTopic,
            CorrelationData,
            SubscriptionIdentifier,
            TopicAlias,
            UserProperty,
        ],
        4..=7 => &[ReasonCode, ReasonString, UserProperty],
        8 => &[SubscriptionIdentifier, UserProperty],
        9 | 11 => &[ReasonString, UserProperty],
        10 => &[UserProperty],
        14 => &[
            ReasonCode,
            SessionExpiryInterval,
            ServerReference,
            ReasonString,
            UserProperty,
        ],
        15 => &[
            AuthenticationMethod,
            AuthenticationData,
            ReasonString,
            UserProperty,
        ],
        _ => &[],
    };
    allowed.contains(&field).then_some(field)
}

/// Bytes written in hexadecimal, two digits each (`bin(HEX)`, ACLs' `-m bin`).
pub fn from_hex(h: &str) -> Option<Vec<u8>> {
    if !h.len().is_multiple_of(2) {
        return None;
    }
    (0..h.len())
        .step_by(2)
        .map(|i| h.get(i..i + 2).and_then(|x| u8::from_str_radix(x, 16).ok()))
        .collect()
}

/// A FIX tag as `fix_tag_value` takes it: its number, or one of the names HAProxy knows
/// (any case); 0 for neither.
pub fn fix_tag(tag: &str) -> u32 {
    const NAMES: &[(&str, u32)] = &[
        ("MsgType", 35),
        ("CheckSum", 10),
        ("BodyLength", 9),
        ("TargetCompID", 56),
        ("BeginString", 8),
        ("SenderCompID", 49),
    ];
    if !tag.is_empty() && tag.bytes().all(|b| b.is_ascii_digit()) {
        return tag.parse().unwrap_or(0);
    }
    NAMES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(tag))
        .map_or(0, |(_, id)| *id)
}

fn parse_map_conv(c: &Call<'_>, rest: &str, book: &PatternBook) -> Result<Conv, ParseError> {
    let mut parts = rest.split('_').skip(1).peekable();
    let substitute = parts.peek() == Some(&"regm");
    let how = match parts.next() {
        None | Some("str") => Match::Str,
        Some("beg") => Match::Beg,
        Some("sub") => Match::Sub,
        Some("dir") => Match::Dir,
        Some("dom") => Match::Dom,
        Some("end") => Match::End,
        Some("reg" | "regm") => Match::Reg,
        Some("int") => Match::Int,
        Some("ip") => Match::Ip,
        Some(other) => {
            return err(format!(
                "unknown map match method '{other}' in '{}'",
                c.name
            ))
        }
    };
    let out = match parts.next() {
        None | Some("str") => MapOut::Str,
        Some("int") => MapOut::Int,
        Some("ip") => MapOut::Ip,
        Some(other) => return err(format!("unknown map output type '{other}' in '{}'", c.name)),
    };
    if !rest.is_empty() && !rest.starts_with('_') {
        return err(format!("unknown converter '{}'", c.name));
    }
    arity(c, 1, 2)?;
    let map = parse_map(&c.args[0], how, substitute, out, book)?;
    let default = opt_str(c, 1);
    if let Some(d) = default.as_deref().filter(|d| !of_type(out, d)) {
        return err(format!(
            "'{}': the default value '{d}' is not of the map's type",
            c.name
        ));
    }
    Ok(Conv::Map(Arc::new(map), default))
}

/// A JSON path as HAProxy writes it (`$.name.other[0]`: a member name is anything up to
/// the next unescaped `.` or `[`, `\.` a dot within it), in the RFC 9535 form the path
/// library reads (`$['name']['other'][0]`).
fn json_path(text: &str) -> Result<serde_json_path::JsonPath, String> {
    let rest = text
        .strip_prefix('$')
        .ok_or_else(|| "a path starts with '$'".to_string())?;
    let mut out = String::from("$");
    let mut chars = rest.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '.' => {
                let mut name = String::new();
                while let Some(&n) = chars.peek() {
                    match n {
                        '.' | '[' => break,
                        '\\' => {
                            chars.next();
                            name.extend(chars.next());
                        }
                        _ => {
                            name.push(n);
                            chars.next();
                        }
                    }
                }
                let quoted = name.replace('\\', "\\\\").replace('\'', "\\'");
                out.push_str(&format!("['{quoted}']"));
            }
            // A bracket selector is RFC 9535's already.
            '[' => {
                out.push('[');
                for n in chars.by_ref() {
                    out.push(n);
                    if n == ']' {
                        break;
                    }
                }
            }
            other => return Err(format!("unexpected '{other}' in the path")),
        }
    }
    serde_json_path::JsonPath::parse(&out).map_err(|e| e.to_string())
}

/// `jwt_verify`'s key: the public key (or the certificate) in the PEM file at that path,
/// loaded now as HAProxy loads them at start, else the HMAC secret itself.
fn jwt_key(arg: &str) -> Result<JwtKey, ParseError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer};
    if !std::path::Path::new(arg).is_file() {
        return Ok(JwtKey::Secret(arg.as_bytes().to_vec()));
    }
    if let Ok(spki) = SubjectPublicKeyInfoDer::from_pem_file(arg) {
        return Ok(JwtKey::PublicKey(spki.to_vec()));
    }
    let cert = CertificateDer::pem_file_iter(arg)
        .ok()
        .and_then(|mut certs| certs.next()?.ok())
        .ok_or_else(|| {
            ParseError(format!(
                "'jwt_verify': '{arg}' holds neither a PEM public key nor a certificate"
            ))
        })?;
    Ok(JwtKey::Cert(cert.to_vec()))
}

/// A map file's list (read now if no one used it before), compiled for `how` (and, for
/// `map_regm`, values made replacement templates).
pub fn parse_map(
    path: &str,
    how: Match,
    substitute: bool,
    out: MapOut,
    book: &PatternBook,
) -> Result<MapFile, ParseError> {
    let list = book.file(path, Family::Map, true).map_err(ParseError)?;
    let form = list
        .add_form(
            FormKind {
                how,
                icase: false,
                values: Some((out, substitute)),
            },
            map_form(how, substitute, out),
        )
        .map_err(|e| ParseError(format!("map file '{path}': {e}")))?;
    Ok(MapFile {
        path: path.to_string(),
        how,
        list: PatternUse { list, form },
        substitute,
        out,
    })
}

/// Whether a map value (or a map converter's default) reads as the map's output type.
fn of_type(out: MapOut, v: &str) -> bool {
    match out {
        MapOut::Str => true,
        MapOut::Int => v.trim().parse::<i64>().is_ok(),
        MapOut::Ip => v.trim().parse::<IpAddr>().is_ok(),
    }
}

/// How a map's keys are compiled for its match method.
fn map_form(how: Match, substitute: bool, out: MapOut) -> Compile {
    Box::new(move |entries: &[&Entry]| {
        entries
            .iter()
            .map(|e| {
                let value = e.value.as_deref().unwrap_or("");
                // Values of a typed map must read as their type (HAProxy refuses the file).
                if !of_type(out, value) {
                    return Err(format!("unable to parse '{value}'"));
                }
                let value = if substitute {
                    substitution(value)
                } else {
                    value.to_string()
                };
                Ok((map_key(how, &e.key)?, value))
            })
            .collect::<Result<Vec<_>, String>>()
            .map(Compiled::Map)
    })
}

/// One map key, prepared for `how`; the error is HAProxy's words for the CLI.
pub fn map_key(how: Match, key: &str) -> Result<MapKey, String> {
    Ok(match how {
        Match::Int => MapKey::Int(
            key.parse()
                .map_err(|_| format!("'{key}' is not a number"))?,
        ),
        Match::Ip => {
            let (ip, bits) = parse_net(key)
                .ok_or_else(|| format!("'{key}' is not a valid IPv4 or IPv6 address"))?;
            MapKey::Net(ip, bits)
        }
        Match::Reg => {
            MapKey::Regex(Regex(regex::bytes::Regex::new(key).map_err(|e| {
                format!("'{key}' is not a valid regular expression: {e}")
            })?))
        }
        _ => MapKey::Text(key.as_bytes().to_vec()),
    })
}

/// The access-log variables a rule's value may use, as the samples they stand for (HAProxy
/// takes any log-format variable there; these are the ones known when a request is routed).
const LOG_VARS_AS_SAMPLES: &[(&str, &str)] = &[
    ("ci", "%[src]"),
    ("cp", "%[src_port]"),
    ("fi", "%[dst]"),
    ("fp", "%[dst_port]"),
    ("f", "%[fe_name]"),
    ("ft", "%[fe_name]"),
    ("b", "%[be_name]"),
    ("s", "%[srv_name]"),
    ("ID", "%[unique-id]"),
    ("HM", "%[method]"),
    ("HU", "%[url]"),
    ("HP", "%[path]"),
    ("HV", "HTTP/%[req.ver]"),
    ("r", "%[method] %[url] HTTP/%[req.ver]"),
    ("Ts", "%[date]"),
];

/// Reads a log-format value: text, `%[EXPR]` samples (optionally preceded by `%{...}`
/// options, which are accepted and ignored), `%%` and the access-log variables of
/// `LOG_VARS_AS_SAMPLES`. Other `%` variables need a finished transaction and are refused.
pub fn parse_fmt(s: &str, book: &PatternBook) -> Result<Fmt, ParseError> {
    let mut parts = Vec::new();
    let mut text = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('%') {
        text.push_str(&rest[..i]);
        rest = &rest[i + 1..];
        if let Some(r) = rest.strip_prefix('%') {
            text.push('%');
            rest = r;
            continue;
        }
        if rest.starts_with('{') {
            let close = rest
                .find('}')
                .ok_or_else(|| ParseError(format!("missing '}}' in '{s}'")))?;
            rest = &rest[close + 1..];
        }
        let Some(inner) = rest.strip_prefix('[') else {
            let len = rest
                .bytes()
                .take_while(|c| c.is_ascii_alphanumeric())
                .count();
            let var = &rest[..len];
            let Some((_, samples)) = LOG_VARS_AS_SAMPLES.iter().find(|(n, _)| *n == var) else {
                return err(format!(
                    "'%{var}' is not supported in this value yet (sample expressions %[...] and %ci %cp %fi %fp %f %ft %b %s %ID %HM %HU %HP %HV %r %Ts are)"
                ));
            };
            if !text.is_empty() {
                parts.push(FmtPart::Text(std::mem::take(&mut text)));
            }
            parts.extend(parse_fmt(samples, book)?.0);
            rest = &rest[len..];
            continue;
        };
        // The closing bracket, past any nested ones (in regular expressions).
        let mut depth = 0;
        let mut end = None;
        for (k, ch) in inner.char_indices() {
            match ch {
                '[' => depth += 1,
                ']' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ']' => depth -= 1,
                _ => {}
            }
        }
        let end = end.ok_or_else(|| ParseError(format!("missing ']' in '{s}'")))?;
        if !text.is_empty() {
            parts.push(FmtPart::Text(std::mem::take(&mut text)));
        }
        parts.push(FmtPart::Expr(parse_expr(&inner[..end], book)?));
        rest = &inner[end + 1..];
    }
    text.push_str(rest);
    if !text.is_empty() {
        parts.push(FmtPart::Text(text));
    }
    Ok(Fmt(parts))
}

/// `ADDR` or `ADDR/BITS` or `ADDR/MASK`.
pub fn parse_net(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = match s.split_once('/') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let ip: IpAddr = addr.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        None => max,
        Some(b) => match b.parse::<u8>() {
            Ok(n) if n <= max => n,
            Ok(_) => return None,
            Err(_) => {
                // A dotted mask: its leading ones.
                let m: std::net::Ipv4Addr = b.parse().ok()?;
                let v = u32::from(m);
                if v.leading_ones() + v.trailing_zeros() != 32 {
                    return None;
                }
                v.leading_ones() as u8
            }
        },
    };
    Some((ip, bits))
}

/// The side a payload fetch's name reads (`res.*`: the server's).
fn payload_side(name: &str) -> PayloadSide {
    if name.starts_with("res.") {
        PayloadSide::Res
    } else {
        PayloadSide::Req
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions() {
        let e = parse_expr("req.hdr(Host),lower,field(1,:)", &PatternBook::default()).unwrap();
        assert_eq!(e.fetch, Fetch::ReqHdr("host".into(), None));
        assert_eq!(e.convs.len(), 2);
        let e = parse_expr("hdr(x-forwarded-for,-1)", &PatternBook::default()).unwrap();
        assert_eq!(e.fetch, Fetch::Hdr("x-forwarded-for".into(), Some(-1)));
        let e = parse_expr(r"path,regsub(^/(a|b)/,/x/\1/,g)", &PatternBook::default()).unwrap();
        let Conv::Regsub { re, subst, global } = &e.convs[0] else {
            panic!()
        };
        assert_eq!(re.0.as_str(), "^/(a|b)/");
        assert_eq!(subst, "/x/${1}/");
        assert!(global);
        assert_eq!(
            parse_expr("str(a\\,b)", &PatternBook::default())
                .unwrap()
                .fetch,
            Fetch::Str("a,b".into())
        );
        assert_eq!(
            parse_expr("var(txn.user),add(txn.n)", &PatternBook::default())
                .unwrap()
                .convs[0],
            Conv::Add(IntArg::Var(VarName {
                scope: VarScope::Txn,
                name: "n".into(),
                conds: VarConds::default(),
            }))
        );
        assert!(parse_expr("nosuch", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("unknown sample fetch"));
        assert!(parse_expr("src,nosuch", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("unknown converter"));
        assert!(parse_expr("ssl_fc_session_id", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("not supported yet"));
        assert_eq!(
            parse_expr("fc_rtt(us)", &PatternBook::default())
                .unwrap()
                .fetch,
            Fetch::TcpInfo(TcpInfoField::Rtt { us: true })
        );
        assert!(parse_expr("fc_rttvar(s)", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("not 'ms' or 'us'"));
        assert!(parse_expr("capture.req.hdr(-1)", &PatternBook::default()).is_err());
        assert_eq!(
            parse_expr("sc_http_req_rate(1,t)", &PatternBook::default())
                .unwrap()
                .fetch,
            Fetch::Table {
                source: TableSource::Slot(1),
                op: TableOp::Read,
                counter: Counter::HttpReqRate,
                table: Some(NameRef::new("t"))
            }
        );
        assert!(parse_expr("sc0_get_gpc0", &PatternBook::default()).is_ok());
        assert!(parse_expr("src_inc_gpc0(t)", &PatternBook::default()).is_ok());
        assert!(parse_expr("sc1_tracked", &PatternBook::default()).is_ok());
        assert!(parse_expr("sc_http_req_rate(3)", &PatternBook::default()).is_err());
        assert!(
            parse_expr("sc0_gpc0", &PatternBook::default()).is_err(),
            "gpc0 is read with get_gpc0"
        );
        assert!(parse_expr("src_inc_http_req_rate", &PatternBook::default()).is_err());
        assert!(parse_expr("src,table_http_req_rate(t)", &PatternBook::default()).is_ok());
        assert!(parse_expr("path(", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("missing ')'"));
        assert!(parse_expr("var(user)", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("needs a scope"));
        assert!(parse_expr("src,ipmask(24)", &PatternBook::default()).is_ok());
        assert!(parse_expr("url_param", &PatternBook::default()).is_err());
    }

    #[test]
    fn formats() {
        let f = parse_fmt("a%%b %[src] %{+Q}[path,lower]!", &PatternBook::default()).unwrap();
        assert_eq!(f.0.len(), 5);
        assert_eq!(f.0[0], FmtPart::Text("a%b ".into()));
        assert_eq!(
            parse_fmt("plain", &PatternBook::default())
                .unwrap()
                .literal(),
            Some("plain")
        );
        // Access-log variables known when a request is routed stand for their samples.
        assert_eq!(
            parse_fmt("%ci:%cp", &PatternBook::default()).unwrap(),
            parse_fmt("%[src]:%[src_port]", &PatternBook::default()).unwrap()
        );
        assert!(parse_fmt("%Tt", &PatternBook::default())
            .unwrap_err()
            .0
            .contains("'%Tt' is not supported"));
        assert!(parse_fmt("%[src", &PatternBook::default()).is_err());
    }

    #[test]
    fn networks() {
        assert_eq!(
            parse_net("10.0.0.0/8"),
            Some(("10.0.0.0".parse().unwrap(), 8))
        );
        assert_eq!(
            parse_net("10.0.0.0/255.255.0.0"),
            Some(("10.0.0.0".parse().unwrap(), 16))
        );
        assert_eq!(parse_net("::1"), Some(("::1".parse().unwrap(), 128)));
        assert_eq!(parse_net("10.0.0.0/33"), None);
    }
}
