//! MQTT packets as the `mqtt_is_valid` and `mqtt_field_value` converters read them
//! (HAProxy 2.6's rules): a fixed header whose flags suit its type, a remaining length,
//! then CONNECT (MQTT 3.1, 3.1.1, 5.0 with their properties) or CONNACK judged whole;
//! any other packet type is not valid. A packet cut short asks for more bytes.

use super::payload::Verdict;
use crate::conf::sample::MqttField as F;
use crate::wire::Cursor;

/// The flags each packet type must carry in its fixed header (index: the type).
const TYPE_FLAGS: [u8; 16] = [0, 0, 0, 0x0f, 0, 0, 2, 0, 2, 0, 2, 0, 0, 0, 0, 0];
const CONNECT: u8 = 1;
const CONNACK: u8 = 2;
const FLAG_WILL: u8 = 0x04;

/// What a CONNECT or CONNACK carried: each field HAProxy can return, by [`F`].
#[derive(Debug, Default)]
struct Fields<'a> {
    kind: u8,
    version: u8,
    flags: u8,
    numbers: Vec<(F, u32)>,
    texts: Vec<(F, &'a [u8])>,
}

impl<'a> Fields<'a> {
    fn number(&mut self, f: F, v: u32) {
        self.numbers.push((f, v));
    }

    fn text(&mut self, f: F, v: &'a [u8]) {
        self.texts.push((f, v));
    }
}

/// A property block (MQTT 5): its length, then the properties; an identifier given twice
/// (user properties aside) makes the packet invalid.
struct Props<'a> {
    c: Cursor<'a>,
    seen: Vec<u8>,
}

impl<'a> Props<'a> {
    fn read(r: &mut Cursor<'a>) -> Option<Props<'a>> {
        let len = varint(r)? as usize;
        Some(Props {
            c: Cursor(r.take(len)?),
            seen: Vec::new(),
        })
    }

    /// The next property's identifier (`Some(None)` at the block's end); `None` for one
    /// given before, or a block cut short.
    fn next_id(&mut self) -> Option<Option<u8>> {
        if self.c.rest().is_empty() {
            return Some(None);
        }
        let id = self.c.u8()?;
        if id != 0x26 && self.seen.contains(&id) {
            return None;
        }
        self.seen.push(id);
        Some(Some(id))
    }
}

/// An MQTT UTF-8 string or binary data: a two-byte length, then the bytes.
fn string<'a>(c: &mut Cursor<'a>) -> Option<&'a [u8]> {
    c.vec(2)
}

/// A variable byte integer (at most four bytes; one that runs out of bytes ends there, as
/// HAProxy reads it).
fn varint(c: &mut Cursor<'_>) -> Option<u32> {
    let mut v = 0u32;
    for i in 0..4 {
        let Some(b) = c.u8() else {
            return Some(v);
        };
        v |= u32::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

/// `mqtt_is_valid`.
pub fn is_valid(msg: &[u8]) -> Verdict<bool> {
    match parse(msg) {
        Verdict::Is(r) => Verdict::Is(r.is_some()),
        Verdict::More => Verdict::More,
    }
}

/// `mqtt_field_value(TYPE,FIELD)`: the field as text (numbers in decimal); nothing when the
/// packet is another type, invalid, or lacks the field.
pub fn field_value(msg: &[u8], kind: u8, field: F) -> Verdict<Option<Vec<u8>>> {
    let fields = match parse(msg) {
        Verdict::More => return Verdict::More,
        Verdict::Is(None) => return Verdict::Is(None),
        Verdict::Is(Some(f)) if f.kind != kind => return Verdict::Is(None),
        Verdict::Is(Some(f)) => f,
    };
    let v5 = fields.version == 5;
    let will = fields.flags & FLAG_WILL != 0;
    let allowed = match (fields.kind, field) {
        (_, F::Flags) => return Verdict::Is(Some(fields.flags.to_string().into_bytes())),
        (_, F::ProtocolVersion) => {
            return Verdict::Is(Some(fields.version.to_string().into_bytes()))
        }
        (CONNECT, F::PayloadFormatIndicator | F::MessageExpiryInterval | F::ContentType)
        | (CONNECT, F::ResponseTopic | F::CorrelationData | F::DelayInterval) => v5 && will,
        (_, F::ReasonCode | F::ProtocolName | F::ClientIdentifier | F::WillTopic) => true,
        (_, F::WillPayload | F::Username | F::Password | F::Keepalive) => true,
        _ => v5,
    };
    if !allowed {
        return Verdict::Is(None);
    }
    if let Some((_, n)) = fields.numbers.iter().find(|(f, _)| *f == field) {
        return Verdict::Is(Some(n.to_string().into_bytes()));
    }
    let text = fields
        .texts
        .iter()
        .find(|(f, _)| *f == field)
        .map(|(_, t)| t.to_vec())
        .filter(|t| !t.is_empty());
    Verdict::Is(text)
}

/// The packet's fields, `None` when it is invalid.
fn parse(msg: &[u8]) -> Verdict<Option<Fields<'_>>> {
    if msg.len() < 2 {
        return Verdict::More;
    }
    let (kind, flags) = (msg[0] >> 4, msg[0] & 0x0f);
    if kind == 0 || flags != TYPE_FLAGS[usize::from(kind)] {
        return Verdict::Is(None);
    }
    let mut r = Cursor(&msg[1..]);
    let Some(remaining) = varint(&mut r) else {
        return Verdict::Is(None);
    };
    let remaining = remaining as usize;
    if r.0.len() < remaining {
        return Verdict::More;
    }
    let body = r.0;
    let mut f = Fields {
        kind,
        ..Fields::default()
    };
    let read = match kind {
        CONNECT => connect(body, &mut f),
        CONNACK => match connack(body, &mut f) {
            Err(Unknown) => return Verdict::More,
            Ok(read) => read,
        },
        _ => None,
    };
    Verdict::Is(read.filter(|&n| n == remaining).map(|_| f))
}

/// An unknown CONNACK property: HAProxy 2.6 answers "more data" there.
struct Unknown;

/// A CONNECT packet's fields; the bytes it took.
fn connect<'a>(body: &'a [u8], f: &mut Fields<'a>) -> Option<usize> {
    let mut r = Cursor(body);
    let name = string(&mut r)?;
    if !name.eq_ignore_ascii_case(b"MQTT") && !name.eq_ignore_ascii_case(b"MQIsdp") {
        return None;
    }
    f.text(F::ProtocolName, name);
    f.version = r.u8()?;
    if !(3..=5).contains(&f.version) {
        return None;
    }
    f.flags = r.u8()?;
    if f.flags & 0x01 != 0 || f.flags & 0x3c == 0x18 {
        return None;
    }
    f.number(F::Keepalive, u32::from(r.u16()?));
    let (mut method, mut data) = (None, None);
    if f.version == 5 {
        let mut props = Props::read(&mut r)?;
        while let Some(id) = props.next_id()? {
            let p = &mut props.c;
            match id {
                0x11 => f.number(F::SessionExpiryInterval, p.u32()?),
                0x21 => match p.u16()? {
                    0 => return None,
                    v => f.number(F::ReceiveMaximum, u32::from(v)),
                },
                0x27 => match p.u32()? {
                    0 => return None,
                    v => f.number(F::MaximumPacketSize, v),
                },
                0x22 => f.number(F::TopicAliasMaximum, u32::from(p.u16()?)),
                0x19 | 0x17 => {
                    let v = p.u8()?;
                    if v > 1 {
                        return None;
                    }
                    let field = if id == 0x19 {
                        F::RequestResponseInformation
                    } else {
                        F::RequestProblemInformation
                    };
                    f.number(field, u32::from(v));
                }
                0x26 => {
                    string(p)?;
                    string(p)?;
                }
                0x15 => method = Some(string(p)?),
                0x16 => data = Some(string(p)?),
                _ => return None,
            }
        }
    }
    if method.is_none_or(<[u8]>::is_empty) && data.is_some_and(|d| !d.is_empty()) {
        return None;
    }
    f.text(F::AuthenticationMethod, method.unwrap_or_default());
    f.text(F::AuthenticationData, data.unwrap_or_default());
    f.text(F::ClientIdentifier, string(&mut r)?);
    let will = f.flags & FLAG_WILL != 0;
    if f.version == 5 && will {
        let mut props = Props::read(&mut r)?;
        while let Some(id) = props.next_id()? {
            let p = &mut props.c;
            match id {
                0x18 => f.number(F::DelayInterval, p.u32()?),
                0x01 => match p.u8()? {
                    v if v > 1 => return None,
                    v => f.number(F::PayloadFormatIndicator, u32::from(v)),
                },
                0x02 => f.number(F::MessageExpiryInterval, p.u32()?),
                0x03 => f.text(F::ContentType, string(p)?),
                0x08 => f.text(F::ResponseTopic, string(p)?),
                0x09 => f.text(F::CorrelationData, string(p)?),
                0x26 => {
                    string(p)?;
                    string(p)?;
                }
                _ => return None,
            }
        }
        // Absent will properties read as 0, as HAProxy's zeroed packet holds them.
        for n in [
            F::DelayInterval,
            F::PayloadFormatIndicator,
            F::MessageExpiryInterval,
        ] {
            if !f.numbers.iter().any(|(x, _)| *x == n) {
                f.number(n, 0);
            }
        }
    }
    if will {
        f.text(F::WillTopic, string(&mut r)?);
        f.text(F::WillPayload, string(&mut r)?);
    }
    if f.flags & 0x80 != 0 {
        f.text(F::Username, string(&mut r)?);
    }
    if f.flags & 0x40 != 0 {
        f.text(F::Password, string(&mut r)?);
    }
    if f.version == 5 {
        zeroes(
            f,
            &[
                F::SessionExpiryInterval,
                F::ReceiveMaximum,
                F::MaximumPacketSize,
                F::TopicAliasMaximum,
                F::RequestResponseInformation,
                F::RequestProblemInformation,
            ],
        );
    }
    Some(body.len() - r.0.len())
}

/// Numeric fields a packet left out read as 0 (HAProxy's packet starts zeroed).
fn zeroes(f: &mut Fields<'_>, fields: &[F]) {
    for &n in fields {
        if !f.numbers.iter().any(|(x, _)| *x == n) {
            f.number(n, 0);
        }
    }
}

/// A CONNACK packet's fields; the bytes it took.
fn connack<'a>(body: &'a [u8], f: &mut Fields<'a>) -> Result<Option<usize>, Unknown> {
    if body.len() < 2 {
        return Ok(None);
    }
    f.version = if body.len() == 2 { 4 } else { 5 };
    let mut r = Cursor(body);
    let read = (|| {
        f.flags = r.u8()?;
        if f.flags & 0xfe != 0 {
            return None;
        }
        f.number(F::ReasonCode, u32::from(r.u8()?));
        Some(())
    })();
    if read.is_none() {
        return Ok(None);
    }
    if f.version == 4 {
        return Ok(Some(2));
    }
    let Some(mut props) = Props::read(&mut r) else {
        return Ok(None);
    };
    loop {
        let id = match props.next_id() {
            Some(Some(id)) => id,
            Some(None) => break,
            None => return Ok(None),
        };
        let p = &mut props.c;
        let ok = match id {
            0x11 => p.u32().map(|v| f.number(F::SessionExpiryInterval, v)),
            0x21 => p
                .u16()
                .filter(|&v| v != 0)
                .map(|v| f.number(F::ReceiveMaximum, u32::from(v))),
            0x24 | 0x25 | 0x28 | 0x29 | 0x2a => p.u8().filter(|&v| v <= 1).map(|v| {
                let field = match id {
                    0x24 => F::MaximumQos,
                    0x25 => F::RetainAvailable,
                    0x28 => F::WildcardSubscriptionAvailable,
                    0x29 => F::SubscriptionIdentifiersAvailable,
                    _ => F::SharedSubscriptionAvailable,
                };
                f.number(field, u32::from(v))
            }),
            0x27 => p
                .u32()
                .filter(|&v| v != 0)
                .map(|v| f.number(F::MaximumPacketSize, v)),
            0x12 => string(p)
                .filter(|s| !s.is_empty())
                .map(|s| f.text(F::AssignedClientIdentifier, s)),
            0x22 => p
                .u16()
                .map(|v| f.number(F::TopicAliasMaximum, u32::from(v))),
            0x13 => p.u16().map(|v| f.number(F::ServerKeepalive, u32::from(v))),
            0x1f => string(p).map(|s| f.text(F::ReasonString, s)),
            0x1a => string(p).map(|s| f.text(F::ResponseInformation, s)),
            0x1c => string(p).map(|s| f.text(F::ServerReference, s)),
            0x15 => string(p).map(|s| f.text(F::AuthenticationMethod, s)),
            0x16 => string(p).map(|s| f.text(F::AuthenticationData, s)),
            0x26 => string(p).and_then(|_| string(p)).map(|_| ()),
            _ => return Err(Unknown),
        };
        if ok.is_none() {
            return Ok(None);
        }
    }
    zeroes(
        f,
        &[
            F::SessionExpiryInterval,
            F::ReceiveMaximum,
            F::MaximumQos,
            F::RetainAvailable,
            F::MaximumPacketSize,
            F::TopicAliasMaximum,
            F::WildcardSubscriptionAvailable,
            F::SubscriptionIdentifiersAvailable,
            F::SharedSubscriptionAvailable,
            F::ServerKeepalive,
        ],
    );
    Ok(Some(body.len() - r.0.len()))
}
