//! The few frames of SPOP (HAProxy's Stream Processing Offload Protocol, version 2.0)
//! that `option spop-check` speaks: the HAPROXY-HELLO a check sends, asking for a health
//! check, and the AGENT-HELLO (or AGENT-DISCONNECT) an agent answers.
//!
//! A frame is a 4-byte big-endian length, then a type byte, 4 bytes of flags (FIN must be
//! set: a hello is never fragmented), a stream id and a frame id (both 0 here), and
//! key/value items. Keys are length-prefixed strings; a value is a type byte (its low 4
//! bits the type, the high 4 bits a boolean's value) and its data. Numbers and lengths are
//! SPOP's variable-length integers: one byte below 240, else a first byte of 240 and up
//! carrying the low 4 bits, then 7 bits a byte while the top bit is set.

/// The frame types read or written here.
const HAPROXY_HELLO: u8 = 1;
const AGENT_HELLO: u8 = 101;
const AGENT_DISCONNECT: u8 = 102;

/// The flag every frame of a hello exchange carries: the frame is whole.
const FIN: u32 = 1;

/// Value types (the low 4 bits of a type byte).
const T_BOOL: u8 = 1;
const T_INT32: u8 = 2;
const T_UINT32: u8 = 3;
const T_INT64: u8 = 4;
const T_UINT64: u8 = 5;
const T_IPV4: u8 = 6;
const T_IPV6: u8 = 7;
const T_STR: u8 = 8;
const T_BIN: u8 = 9;
/// A boolean's value, in the high bits of its type byte.
const TRUE: u8 = 0x10;

/// The smallest frame an agent may announce.
const MIN_FRAME_SIZE: u64 = 256;

/// The only protocol version spoken, as `major * 1000 + minor`.
const VERSION: u64 = 2000;

/// Why an agent's answer is not a healthy hello, worded as HAProxy reports it (the check's
/// info).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    Invalid,
    NoVersion,
    NoFrameSize,
    BadVersion,
    BadFrameSize,
    Fragmented,
    /// An AGENT-DISCONNECT: the reason its status code names.
    Disconnect(u64),
}

impl Refusal {
    pub fn reason(self) -> &'static str {
        match self {
            Refusal::Invalid => "invalid frame received",
            Refusal::NoVersion => "version value not found",
            Refusal::NoFrameSize => "max-frame-size value not found",
            Refusal::BadVersion => "unsupported version",
            Refusal::BadFrameSize => "max-frame-size too big or too small",
            Refusal::Fragmented => "fragmentation not supported",
            Refusal::Disconnect(code) => disconnect_reason(code),
        }
    }
}

/// SPOP's status codes, as an AGENT-DISCONNECT gives them.
fn disconnect_reason(code: u64) -> &'static str {
    const REASONS: [&str; 14] = [
        "normal",
        "I/O error",
        "a timeout occurred",
        "frame is too big",
        "invalid frame received",
        "version value not found",
        "max-frame-size value not found",
        "capabilities value not found",
        "unsupported version",
        "max-frame-size too big or too small",
        "fragmentation not supported",
        "invalid interlaced frames",
        "frame-id not found",
        "resource allocation error",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|c| REASONS.get(c))
        .copied()
        .unwrap_or("an unknown error occurred")
}

/// The HAPROXY-HELLO of a health check, length prefix included: version 2.0, frames of
/// at most `max_frame` bytes, no capabilities, `healthcheck` true.
pub fn health_hello(max_frame: u32) -> Vec<u8> {
    let mut f = vec![0; 4];
    f.push(HAPROXY_HELLO);
    f.extend_from_slice(&FIN.to_be_bytes());
    f.extend_from_slice(&[0, 0]);
    put_str(&mut f, b"supported-versions");
    f.push(T_STR);
    put_str(&mut f, b"2.0");
    put_str(&mut f, b"max-frame-size");
    f.push(T_UINT32);
    put_varint(&mut f, u64::from(max_frame));
    put_str(&mut f, b"capabilities");
    f.push(T_STR);
    put_str(&mut f, b"");
    put_str(&mut f, b"healthcheck");
    f.push(T_BOOL | TRUE);
    let len = u32::try_from(f.len() - 4).unwrap_or(u32::MAX);
    f[..4].copy_from_slice(&len.to_be_bytes());
    f
}

/// How many bytes the frame starting `buf` takes, length prefix included, once its prefix
/// arrived.
pub fn frame_len(buf: &[u8]) -> Option<usize> {
    let prefix: [u8; 4] = buf.get(..4)?.try_into().ok()?;
    Some(4 + u32::from_be_bytes(prefix) as usize)
}

/// Judges an agent's answer to [`health_hello`] (its frame after the length prefix, as
/// much of it as arrived): a valid AGENT-HELLO of version 2.0 announcing a frame size
/// between 256 and `max_frame` bytes is healthy.
pub fn judge(frame: &[u8], max_frame: u32) -> Result<(), Refusal> {
    match frame.first() {
        Some(&AGENT_DISCONNECT) => Err(disconnect(frame)),
        _ => agent_hello(frame, max_frame),
    }
}

fn agent_hello(frame: &[u8], max_frame: u32) -> Result<(), Refusal> {
    let mut r = Reader(frame);
    let mut items = r.metadata(AGENT_HELLO)?;
    let (mut version, mut frame_size) = (None, None);
    while !items.0.is_empty() {
        let key = items
            .bytes()
            .filter(|k| !k.is_empty())
            .ok_or(Refusal::Invalid)?;
        if key.starts_with(b"version") {
            let v = items.string()?;
            version = Some(parse_version(v).ok_or(Refusal::BadVersion)?);
            if version != Some(VERSION) {
                return Err(Refusal::BadVersion);
            }
        } else if key.starts_with(b"max-frame-size") {
            let size = items.integer()?;
            if !(MIN_FRAME_SIZE..=u64::from(max_frame)).contains(&size) {
                return Err(Refusal::BadFrameSize);
            }
            frame_size = Some(size);
        } else if key.starts_with(b"capabilities") {
            items.string()?;
        } else {
            items.skip_value()?;
        }
    }
    version.ok_or(Refusal::NoVersion)?;
    frame_size.ok_or(Refusal::NoFrameSize)?;
    Ok(())
}

/// An AGENT-DISCONNECT's refusal: its status code (or why the frame is not one).
fn disconnect(frame: &[u8]) -> Refusal {
    let mut r = Reader(frame);
    let mut items = match r.metadata(AGENT_DISCONNECT) {
        Ok(items) => items,
        Err(refusal) => return refusal,
    };
    let mut code = 99;
    while !items.0.is_empty() {
        let Some(key) = items.bytes().filter(|k| !k.is_empty()) else {
            return Refusal::Invalid;
        };
        let value = if key.starts_with(b"status-code") {
            items.integer().map(|c| code = c)
        } else if key.starts_with(b"message") {
            items.string().map(drop)
        } else {
            items.skip_value()
        };
        if let Err(refusal) = value {
            return refusal;
        }
    }
    Refusal::Disconnect(code)
}

/// `MAJOR.MINOR` as `major * 1000 + minor`.
fn parse_version(v: &[u8]) -> Option<u64> {
    let v = std::str::from_utf8(v).ok()?.trim();
    let (major, minor) = v.split_once('.')?;
    let minor: u64 = minor.parse().ok().filter(|m| *m < 1000)?;
    Some(major.parse::<u64>().ok()?.checked_mul(1000)? + minor)
}

fn put_varint(out: &mut Vec<u8>, mut i: u64) {
    if i < 240 {
        out.push(i as u8);
        return;
    }
    out.push(i as u8 | 240);
    i = (i - 240) >> 4;
    while i >= 128 {
        out.push(i as u8 | 128);
        i = (i - 128) >> 7;
    }
    out.push(i as u8);
}

fn put_str(out: &mut Vec<u8>, s: &[u8]) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// What is left of a frame to read.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    /// Reads the frame's type (which must be `kind`), flags and ids; returns its items.
    fn metadata(&mut self, kind: u8) -> Result<Reader<'a>, Refusal> {
        if self.0.first() != Some(&kind) || self.0.len() < 7 {
            return Err(Refusal::Invalid);
        }
        let flags = u32::from_be_bytes([self.0[1], self.0[2], self.0[3], self.0[4]]);
        if flags & FIN == 0 {
            return Err(Refusal::Fragmented);
        }
        if self.0[5] != 0 || self.0[6] != 0 {
            return Err(Refusal::Invalid);
        }
        Ok(Reader(&self.0[7..]))
    }

    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    fn varint(&mut self) -> Option<u64> {
        let mut i = u64::from(self.byte()?);
        if i < 240 {
            return Some(i);
        }
        let mut shift = 4;
        loop {
            let b = self.byte()?;
            i = i.checked_add(u64::from(b).checked_shl(shift)?)?;
            shift += 7;
            if b < 128 || shift > 63 {
                return (b < 128).then_some(i);
            }
        }
    }

    fn take(&mut self, n: u64) -> Option<&'a [u8]> {
        let n = usize::try_from(n).ok().filter(|n| *n <= self.0.len())?;
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        Some(taken)
    }

    fn bytes(&mut self) -> Option<&'a [u8]> {
        let n = self.varint()?;
        self.take(n)
    }

    /// A value that must be a string.
    fn string(&mut self) -> Result<&'a [u8], Refusal> {
        match self.byte().map(|t| t & 0x0f) {
            Some(T_STR) => self.bytes().ok_or(Refusal::Invalid),
            _ => Err(Refusal::Invalid),
        }
    }

    /// A value that must be an integer.
    fn integer(&mut self) -> Result<u64, Refusal> {
        match self.byte().map(|t| t & 0x0f) {
            Some(T_INT32 | T_UINT32 | T_INT64 | T_UINT64) => self.varint().ok_or(Refusal::Invalid),
            _ => Err(Refusal::Invalid),
        }
    }

    /// Passes over a value of any type.
    fn skip_value(&mut self) -> Result<(), Refusal> {
        let skipped = match self.byte().map(|t| t & 0x0f) {
            Some(0 | T_BOOL) => Some(()),
            Some(T_INT32 | T_UINT32 | T_INT64 | T_UINT64) => self.varint().map(drop),
            Some(T_IPV4) => self.take(4).map(drop),
            Some(T_IPV6) => self.take(16).map(drop),
            Some(T_STR | T_BIN) => self.bytes().map(drop),
            _ => None,
        };
        skipped.ok_or(Refusal::Invalid)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// HAProxy 2.6.12's hello with the default 16 kB buffers, as a capture shows it.
    const HAPROXY_HELLO_16K: &str = "0000004e0100000001000012737570706f727465642d76657273696f6e730803322e300e6d61782d6672616d652d73697a6503fcf0060c6361706162696c697469657308000b6865616c7468636865636b11";

    fn hex(b: &[u8]) -> String {
        b.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn hello_of(items: &[u8]) -> Vec<u8> {
        let mut f = vec![AGENT_HELLO, 0, 0, 0, 1, 0, 0];
        f.extend_from_slice(items);
        f
    }

    #[test]
    fn the_hello_is_haproxys() {
        assert_eq!(hex(&health_hello(16380)), HAPROXY_HELLO_16K);
    }

    #[test]
    fn varints_round_trip() {
        for i in [0, 239, 240, 1000, 16380, 1 << 20, u64::from(u32::MAX)] {
            let mut b = Vec::new();
            put_varint(&mut b, i);
            assert_eq!(Reader(&b).varint(), Some(i), "{i}");
        }
        assert_eq!(Reader(&[0xff; 12]).varint(), None);
    }

    #[test]
    fn answers_are_judged() {
        let mut ok = Vec::new();
        put_str(&mut ok, b"version");
        ok.push(T_STR);
        put_str(&mut ok, b"2.0");
        put_str(&mut ok, b"max-frame-size");
        ok.push(T_UINT32);
        put_varint(&mut ok, 16380);
        assert_eq!(judge(&hello_of(&ok), 16380), Ok(()));
        assert_eq!(judge(&hello_of(&ok), 1000), Err(Refusal::BadFrameSize));
        assert_eq!(
            judge(&hello_of(&ok[..13]), 16380),
            Err(Refusal::NoFrameSize)
        );
        assert_eq!(judge(&hello_of(&[]), 16380), Err(Refusal::NoVersion));
        assert_eq!(judge(b"HTTP/1.1", 16380), Err(Refusal::Invalid));
        let fragmented = [AGENT_HELLO, 0, 0, 0, 0, 0, 0];
        assert_eq!(judge(&fragmented, 16380), Err(Refusal::Fragmented));
        let mut bye = vec![AGENT_DISCONNECT, 0, 0, 0, 1, 0, 0];
        put_str(&mut bye, b"status-code");
        bye.push(T_UINT32);
        put_varint(&mut bye, 2);
        assert_eq!(
            judge(&bye, 16380).map_err(Refusal::reason),
            Err("a timeout occurred")
        );
    }
}
