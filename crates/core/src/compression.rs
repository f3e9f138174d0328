//! HTTP response compression: the `compression` keywords and the global limits, choosing an
//! algorithm from `Accept-Encoding`, deciding whether a response may be compressed, the
//! header changes a compressed response needs, and the throttling decision (the counters are
//! per worker, in `runtime`).
//!
//! The bytes themselves are compressed by [`Compressor`] as the stream relays them (see
//! `stream/relay.rs`); it keeps only `sluice_deflate::Stream` (24 bytes) per response, and its
//! output scratch is per worker.
//!
//! Throttling uses one basis for both limits: `maxcomprate` is compared with the process-wide
//! *input* rate of the compressor (bytes per second entering it), and `maxcompcpuusage` with
//! the worker's busy share (time outside the event loop's wait, smoothed over about a second).

use sluice_config::{units, Keyword, KwError, Scope};
use sluice_deflate::{max_encoded_len, Format, Stream, MAX_FINISH_LEN, MAX_FLUSH_LEN};
use sluice_http::{
    name_is, push_chunk_header, trim_ows, Framing, RequestView, ResponseView, Version,
};

pub use crate::conf::compression::{Algo, CompConf, GlobalComp};
use crate::conf::{one_arg, Backend, Frontend, GlobalConf, ProxyConf};

/// The encoder's container format for an algorithm.
fn format(algo: Algo) -> Format {
    match algo {
        Algo::Gzip => Format::Gzip,
        Algo::Deflate => Format::Zlib,
        Algo::Identity | Algo::RawDeflate => Format::Raw,
    }
}

/// The compression settings that apply to a request: the backend's when it has any, else
/// the frontend's.
pub fn conf_for<'a>(fe: &'a Frontend, be: &'a Backend) -> &'a CompConf {
    if be.compression.algos.is_empty() {
        &fe.compression
    } else {
        &be.compression
    }
}

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "compression algo",
        scope: Scope::PROXY,
        help:
            "compression algo identity|gzip|deflate|raw-deflate ...: algorithms offered, in order",
        parse: parse_algos,
    },
    Keyword {
        name: "compression algo-res",
        scope: Scope::PROXY,
        help: "compression algo-res ...: same as 'compression algo'",
        parse: parse_algos,
    },
    Keyword {
        name: "compression type",
        scope: Scope::PROXY,
        help: "compression type MIME...: content types to compress (prefix match)",
        parse: parse_types,
    },
    Keyword {
        name: "compression type-res",
        scope: Scope::PROXY,
        help: "compression type-res ...: same as 'compression type'",
        parse: parse_types,
    },
    Keyword {
        name: "compression offload",
        scope: Scope::PROXY,
        help: "compression offload: remove Accept-Encoding so servers never compress",
        parse: |c, a| match a.first() {
            Some(x) => Err(KwError::Extra(x.clone())),
            None => {
                c.compression.offload = true;
                Ok(())
            }
        },
    },
    Keyword {
        name: "compression minsize-res",
        scope: Scope::PROXY,
        help: "compression minsize-res SIZE: responses of known smaller length are not compressed",
        parse: |c, a| {
            let v = one_arg(a, "a size")?;
            c.compression.minsize = units::parse_size(v).map_err(|e| KwError::bad(1, v, e))?;
            Ok(())
        },
    },
    Keyword {
        name: "compression direction",
        scope: Scope::PROXY,
        help: "compression direction response: only responses are compressed",
        parse: |_, a| match one_arg(a, "response, request or both")? {
            "response" => Ok(()),
            "request" | "both" => Err(KwError::NotYet("request compression")),
            other => Err(KwError::bad(1, other, "expects response, request or both")),
        },
    },
    Keyword {
        name: "compression algo-req",
        scope: Scope::PROXY,
        help: "request compression",
        parse: |_, _| Err(KwError::NotYet("request compression")),
    },
    Keyword {
        name: "compression type-req",
        scope: Scope::PROXY,
        help: "request compression",
        parse: |_, _| Err(KwError::NotYet("request compression")),
    },
    Keyword {
        name: "compression minsize-req",
        scope: Scope::PROXY,
        help: "request compression",
        parse: |_, _| Err(KwError::NotYet("request compression")),
    },
];

fn parse_algos(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    if args.is_empty() {
        return Err(KwError::Missing(
            "at least one of identity, gzip, deflate, raw-deflate",
        ));
    }
    let mut algos = Vec::new();
    for (i, a) in args.iter().enumerate() {
        let algo = Algo::parse(a).ok_or_else(|| {
            KwError::bad(
                i + 1,
                a,
                "unknown algorithm (identity, gzip, deflate, raw-deflate)",
            )
        })?;
        algos.push(algo);
    }
    c.compression.algos = algos;
    Ok(())
}

fn parse_types(c: &mut ProxyConf, args: &[String]) -> Result<(), KwError> {
    if args.is_empty() {
        return Err(KwError::Missing("at least one content type"));
    }
    c.compression.types = args.iter().map(|t| t.to_ascii_lowercase()).collect();
    Ok(())
}

/// zlib tunables have no meaning: the encoder keeps no zlib state.
fn zlib_tunable(_: &mut GlobalConf, _: &[String]) -> Result<(), KwError> {
    Err(KwError::Invalid(
        "zlib tunables do not apply: sluice's stateless encoder keeps no zlib state (remove the line)".into(),
    ))
}

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "maxcomprate",
        scope: Scope::GLOBAL,
        help: "maxcomprate KBPS: compressor input rate above which responses are not (or less) compressed",
        parse: |g, a| {
            let v = one_arg(a, "a rate in kB/s")?;
            let n: u64 = v.parse().map_err(|_| KwError::bad(1, v, "expects kilobytes per second"))?;
            g.compression.max_rate = n * 1000;
            Ok(())
        },
    },
    Keyword {
        name: "maxcompcpuusage",
        scope: Scope::GLOBAL,
        help: "maxcompcpuusage PCT: worker busy share above which responses are not (or less) compressed",
        parse: |g, a| {
            let v = one_arg(a, "a percentage")?;
            g.compression.max_cpu = v
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= 100)
                .ok_or_else(|| KwError::bad(1, v, "expects a percentage from 0 to 100"))?;
            Ok(())
        },
    },
    Keyword {
        name: "tune.comp.maxlevel",
        scope: Scope::GLOBAL,
        help: "tune.comp.maxlevel N: highest encoder level, 0 (stored) to 2 (default 1)",
        parse: |g, a| {
            let v = one_arg(a, "a level")?;
            g.compression.max_level = v
                .parse::<u8>()
                .ok()
                .filter(|n| *n <= sluice_deflate::MAX_LEVEL)
                .ok_or_else(|| KwError::bad(1, v, "sluice's encoder has levels 0 (stored), 1 and 2"))?;
            Ok(())
        },
    },
    Keyword {
        name: "tune.zlib.memlevel",
        scope: Scope::GLOBAL,
        help: "zlib tunable (no meaning for sluice)",
        parse: zlib_tunable,
    },
    Keyword {
        name: "tune.zlib.windowsize",
        scope: Scope::GLOBAL,
        help: "zlib tunable (no meaning for sluice)",
        parse: zlib_tunable,
    },
    Keyword {
        name: "maxzlibmem",
        scope: Scope::GLOBAL,
        help: "zlib tunable (no meaning for sluice)",
        parse: zlib_tunable,
    },
];

/// Picks the algorithm for a request from its `Accept-Encoding` values: the highest q-value
/// among offered algorithms (q=0 never), ties to the earlier token, `*` standing for the
/// first offered algorithm the client did not name. `None`: send identity.
pub fn choose<'a>(accept: impl Iterator<Item = &'a [u8]>, offered: &[Algo]) -> Option<Algo> {
    let mut best: Option<(Algo, u16)> = None;
    let mut star: Option<u16> = None;
    let mut named: Vec<&[u8]> = Vec::new();
    for value in accept {
        for element in value.split(|&b| b == b',') {
            let mut parts = element.split(|&b| b == b';');
            let token = trim_ows(parts.next().unwrap_or_default());
            if token.is_empty() {
                continue;
            }
            let q = parts.find_map(|p| parse_q(trim_ows(p))).unwrap_or(1000);
            named.push(token);
            if token == b"*" {
                star = Some(q);
                continue;
            }
            if q == 0 {
                continue;
            }
            let hit = offered
                .iter()
                .find(|a| token.eq_ignore_ascii_case(a.token().as_bytes()));
            if let Some(&algo) = hit {
                if best.is_none_or(|(_, bq)| q > bq) {
                    best = Some((algo, q));
                }
            }
        }
    }
    if best.is_none() {
        if let Some(q) = star.filter(|&q| q > 0) {
            let unnamed = offered.iter().find(|a| {
                **a != Algo::Identity
                    && !named
                        .iter()
                        .any(|n| n.eq_ignore_ascii_case(a.token().as_bytes()))
            });
            best = unnamed.map(|&a| (a, q));
        }
    }
    best.map(|(a, _)| a).filter(|a| *a != Algo::Identity)
}

/// `q=0.5` as thousandths; `None` when the parameter is not a q-value.
fn parse_q(p: &[u8]) -> Option<u16> {
    let v = p.strip_prefix(b"q=").or_else(|| p.strip_prefix(b"Q="))?;
    let s = std::str::from_utf8(v).ok()?;
    let f: f64 = s.parse().ok()?;
    Some(if (0.0..=1.0).contains(&f) {
        (f * 1000.0).round() as u16
    } else {
        0
    })
}

/// The algorithm to use for this request, if its form allows compressing the response.
pub fn for_request(conf: &CompConf, req: &RequestView<'_>) -> Option<Algo> {
    // HTTP/1.0 has no chunked framing to carry a body of unknown length.
    if !conf.enabled() || req.version() == Version::Http10 || req.is_head() {
        return None;
    }
    if req.header("user-agent").is_some_and(broken_gzip) {
        return None;
    }
    let values = req
        .headers()
        .filter(|(n, _)| name_is(n, "accept-encoding"))
        .map(|(_, v)| v);
    choose(values, &conf.algos)
}

/// A browser HAProxy 2.6 never compresses for: one announcing itself as `Mozilla/4`, unless
/// it is MSIE 7 or later, or MSIE 6 with XP SP2 (`SV1`), whose gzip works.
fn broken_gzip(ua: &[u8]) -> bool {
    if !ua.starts_with(b"Mozilla/4") {
        return false;
    }
    let msie = ua.get(25..30) == Some(b"MSIE ");
    match ua.get(30) {
        Some(&v) if msie && v > b'6' => false,
        Some(b'6') if msie => ua.get(51..54) != Some(b"SV1"),
        _ => true,
    }
}

/// Whether a response may be compressed (HAProxy's rules, see the module docs of `stream`).
pub fn response_allows(conf: &CompConf, rsp: &ResponseView<'_>) -> bool {
    if !(200..=203).contains(&rsp.status()) || rsp.version() == Version::Http10 {
        return false;
    }
    match rsp.framing() {
        Framing::None => return false,
        Framing::Length(n) if n == 0 || n < conf.minsize => return false,
        _ => {}
    }
    let mut etags = 0;
    let mut content_type = None;
    for (name, value) in rsp.headers() {
        if name_is(name, "content-encoding") {
            return false;
        }
        if name_is(name, "cache-control")
            && value
                .split(|&b| b == b',')
                .any(|t| trim_ows(t).eq_ignore_ascii_case(b"no-transform"))
        {
            return false;
        }
        if name_is(name, "etag") {
            etags += 1;
            if etags > 1 || !etag_ok(value) {
                return false;
            }
        }
        if name_is(name, "content-type") {
            content_type = Some(value);
        }
    }
    if let Some(ct) = content_type {
        if ct.len() >= 9 && ct[..9].eq_ignore_ascii_case(b"multipart") {
            return false;
        }
    }
    if conf.types.is_empty() {
        return true;
    }
    let Some(ct) = content_type else {
        return false;
    };
    conf.types
        .iter()
        .any(|t| ct.len() >= t.len() && ct[..t.len()].eq_ignore_ascii_case(t.as_bytes()))
}

/// `"opaque"` or `W/"opaque"` with no quote inside.
fn etag_ok(v: &[u8]) -> bool {
    let v = v.strip_prefix(b"W/").unwrap_or(v);
    v.len() >= 2 && v[0] == b'"' && v[v.len() - 1] == b'"' && !v[1..v.len() - 1].contains(&b'"')
}

/// The value a server's header takes in a compressed response (`None`: as it is): a strong
/// `ETag` becomes weak (the bytes differ now), and `Vary` comes to cover `Accept-Encoding`.
/// `saw_vary` notes a `Vary`, so that [`added_headers`] adds none.
pub fn rewritten_value(name: &[u8], value: &[u8], saw_vary: &mut bool) -> Option<Vec<u8>> {
    if name_is(name, "etag") && value.first() == Some(&b'"') {
        return Some([&b"W/"[..], value].concat());
    }
    if name_is(name, "vary") {
        *saw_vary = true;
        let covered = value
            .split(|&b| b == b',')
            .any(|t| trim_ows(t) == b"*" || trim_ows(t).eq_ignore_ascii_case(b"accept-encoding"));
        return (!covered).then(|| [value, &b", Accept-Encoding"[..]].concat());
    }
    None
}

/// Headers added to a compressed response after the server's.
pub fn added_headers(
    algo: Algo,
    saw_vary: bool,
) -> impl Iterator<Item = (&'static str, &'static str)> {
    let vary = (!saw_vary).then_some(("vary", "Accept-Encoding"));
    std::iter::once(("content-encoding", algo.token())).chain(vary)
}

/// Whether the process is over one of its compression limits: `max_rate` bytes of input
/// per second (`maxcomprate` as the CLI left it; 0: none), `max_cpu` percent busy.
pub fn over_limit(max_rate: u64, max_cpu: u8, input_rate: u64, busy_pct: u32) -> bool {
    (max_rate > 0 && input_rate > max_rate) || busy_pct > u32::from(max_cpu)
}

/// The level for the next piece of a running response: one step down under pressure (to 0,
/// stored blocks, still a valid stream), one step back up towards `max` otherwise.
pub fn next_level(current: u8, max: u8, over: bool) -> u8 {
    if over {
        current.saturating_sub(1)
    } else {
        (current + 1).min(max)
    }
}

/// One response's compressor: the encoder's few bytes of state and its current level.
#[derive(Debug)]
pub struct Compressor {
    stream: Stream,
    pub algo: Algo,
}

impl Compressor {
    pub fn new(algo: Algo, level: u8) -> Compressor {
        Compressor {
            stream: Stream::new(format(algo), level),
            algo,
        }
    }

    pub fn level(&self) -> u8 {
        self.stream.level()
    }

    pub fn set_level(&mut self, level: u8) {
        self.stream.set_level(level);
    }

    /// Compresses `data` and appends it to `out`, flushed so the client can decode it now:
    /// as one HTTP chunk when `chunked` gives the trailers (complete `name: value\r\n`
    /// lines) of its last chunk, else as it is (an HTTP/2 stream delimits it). `last` also
    /// writes the end of the compressed stream (and the last chunk). `scratch` is
    /// per-worker space. Returns the compressed size.
    pub fn chunk(
        &mut self,
        data: &[u8],
        last: bool,
        chunked: Option<&[u8]>,
        scratch: &mut Vec<u8>,
        out: &mut Vec<u8>,
    ) -> usize {
        // The encoder writes whole words and never reads what is there, so the scratch keeps
        // its length between chunks and is zero-filled only when it grows.
        let needed = max_encoded_len(data.len()) + MAX_FLUSH_LEN + MAX_FINISH_LEN;
        if scratch.len() < needed {
            scratch.resize(needed, 0);
        }
        let mut n = 0;
        if !data.is_empty() {
            n += self
                .stream
                .encode(data, scratch, !last)
                .expect("scratch sized to the bound");
        }
        n += if last {
            self.stream
                .finish(&mut scratch[n..])
                .expect("room for the trailer")
        } else {
            self.stream
                .flush(&mut scratch[n..])
                .expect("room for a flush")
        };
        let Some(trailers) = chunked else {
            out.extend_from_slice(&scratch[..n]);
            return n;
        };
        if n > 0 {
            push_chunk_header(out, n);
            out.extend_from_slice(&scratch[..n]);
            out.extend_from_slice(b"\r\n");
        }
        if last {
            out.extend_from_slice(b"0\r\n");
            out.extend_from_slice(trailers);
            out.extend_from_slice(b"\r\n");
        }
        n
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn old_mozilla_4_agents_get_no_compression() {
        for (ua, broken) in [
            ("Mozilla/4.0", true),
            ("Mozilla/4.0 (compatible; MSIE 5.5; Windows NT 5.0)", true),
            ("Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1)", true),
            (
                "Mozilla/4.0 (compatible; MSIE 6.0; Windows NT 5.1; SV1)",
                false,
            ),
            ("Mozilla/4.0 (compatible; MSIE 7.0; Windows NT 6.0)", false),
            ("Mozilla/5.0 (X11; Linux x86_64)", false),
            ("curl/8.1", false),
        ] {
            assert_eq!(super::broken_gzip(ua.as_bytes()), broken, "{ua}");
        }
    }

    use super::*;

    fn pick(ae: &str, offered: &[Algo]) -> Option<Algo> {
        choose(std::iter::once(ae.as_bytes()), offered)
    }

    #[test]
    fn q_value_selection() {
        use Algo::*;
        let both = [Gzip, Deflate];
        let table: &[(&str, &[Algo], Option<Algo>)] = &[
            ("gzip", &both, Some(Gzip)),
            ("deflate", &both, Some(Deflate)),
            ("deflate, gzip", &both, Some(Deflate)),
            ("gzip;q=0.5, deflate", &both, Some(Deflate)),
            ("gzip;q=0, deflate;q=0.1", &both, Some(Deflate)),
            ("gzip;q=0", &both, None),
            ("GZIP", &both, Some(Gzip)),
            ("br, gzip;q=0.8", &both, Some(Gzip)),
            ("br", &both, None),
            ("*", &both, Some(Gzip)),
            ("*;q=0", &both, None),
            ("gzip;q=0, *", &both, Some(Deflate)),
            ("deflate;q=0.5, gzip;q=0.5", &both, Some(Deflate)),
            ("identity", &both, None),
            ("gzip", &[Identity], None),
            ("deflate", &[RawDeflate], Some(RawDeflate)),
            ("gzip; q=1.0", &both, Some(Gzip)),
            ("gzip;q=x, deflate;q=0.2", &both, Some(Gzip)),
            ("", &both, None),
        ];
        for (ae, offered, want) in table {
            assert_eq!(
                pick(ae, offered),
                *want,
                "Accept-Encoding: {ae} with {offered:?}"
            );
        }
    }

    #[test]
    fn throttling_decisions() {
        let limits = GlobalComp {
            max_rate: 1_000_000,
            max_cpu: 85,
            max_level: 2,
        };
        assert!(!over_limit(limits.max_rate, limits.max_cpu, 500_000, 50));
        assert!(over_limit(limits.max_rate, limits.max_cpu, 1_000_001, 50));
        assert!(over_limit(limits.max_rate, limits.max_cpu, 0, 86));
        assert!(!over_limit(0, GlobalComp::default().max_cpu, u64::MAX, 100));
        assert_eq!(next_level(2, 2, true), 1);
        assert_eq!(next_level(1, 2, true), 0);
        assert_eq!(next_level(0, 2, true), 0);
        assert_eq!(next_level(0, 2, false), 1);
        assert_eq!(next_level(2, 2, false), 2);
        assert_eq!(
            next_level(2, 1, false),
            1,
            "never above the configured maximum"
        );
        // A sequence: pressure for three steps, then relief.
        let mut l = 2;
        let mut seen = Vec::new();
        for over in [true, true, true, false, false, false] {
            l = next_level(l, 2, over);
            seen.push(l);
        }
        assert_eq!(seen, vec![1, 0, 0, 1, 2, 2]);
    }

    #[test]
    fn etags_and_vary() {
        assert!(etag_ok(b"\"abc\""));
        assert!(etag_ok(b"W/\"abc\""));
        assert!(!etag_ok(b"abc"));
        assert!(!etag_ok(b"\"a\"b\""));
        let mut vary = false;
        let weak = rewritten_value(b"ETag", b"\"x\"", &mut vary);
        assert_eq!(weak.as_deref(), Some(&b"W/\"x\""[..]));
        let extended = rewritten_value(b"Vary", b"Origin", &mut vary);
        assert_eq!(extended.as_deref(), Some(&b"Origin, Accept-Encoding"[..]));
        assert_eq!(rewritten_value(b"X-Other", b"1", &mut vary), None);
        let added: Vec<_> = added_headers(Algo::Gzip, vary).collect();
        assert_eq!(added, [("content-encoding", "gzip")], "a Vary was seen");
        let mut covered = false;
        assert_eq!(
            rewritten_value(b"vary", b"accept-encoding", &mut covered),
            None
        );
        let added: Vec<_> = added_headers(Algo::Deflate, false).collect();
        assert_eq!(
            added,
            [("content-encoding", "deflate"), ("vary", "Accept-Encoding")]
        );
    }
}
