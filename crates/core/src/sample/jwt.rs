//! JSON Web Tokens in samples: `jwt_header_query`, `jwt_payload_query` and `jwt_verify`, as
//! HAProxy 2.6 reads JWS tokens in compact serialization (three base64url parts joined by
//! dots). Signatures are checked by ring (HMAC) and webpki (RSA, ECDSA), never by hand.

use base64::Engine as _;

use crate::conf::sample::{JwtKey, Sample};

/// The decoded header (`payload`: the payload) of a token.
pub(super) fn part(token: &[u8], payload: bool) -> Option<Vec<u8>> {
    let mut parts = token.split(|&b| b == b'.');
    let header = parts.next()?;
    let body = parts.next()?;
    parts.next()?;
    let encoded = if payload { body } else { header };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .ok()
}

/// `jwt_verify`'s answer: 1 verified, 0 not, -1 unknown algorithm, -2 an algorithm HAProxy
/// does not manage (PSxxx), -3 an invalid token, -5 an unknown certificate.
pub(super) fn verify(token: &[u8], alg: &[u8], key: &JwtKey) -> i64 {
    let kind = match Alg::of(alg) {
        Ok(k) => k,
        Err(code) => return code,
    };
    let Some(dot) = token.iter().rposition(|&b| b == b'.') else {
        return -3;
    };
    let (signed, sig) = (&token[..dot], &token[dot + 1..]);
    if signed.iter().filter(|&&b| b == b'.').count() != 1 {
        return -3;
    }
    let Ok(sig) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(sig) else {
        return -3;
    };
    let ok = match (kind, key) {
        (Alg::Hmac(h), JwtKey::Secret(secret)) => {
            let key = ring::hmac::Key::new(h, secret);
            ring::hmac::verify(&key, signed, &sig).is_ok()
        }
        (Alg::Hmac(_), JwtKey::Cert(_) | JwtKey::PublicKey(_)) => false,
        (Alg::Signature(_, _), JwtKey::Secret(_)) => return -5,
        (Alg::Signature(v, ecdsa_len), key) => {
            // JWS writes ECDSA signatures as r and s side by side; webpki reads them in DER.
            let sig = match ecdsa_len {
                Some(n) if sig.len() == 2 * n => ecdsa_der(&sig[..n], &sig[n..]),
                Some(_) => return 0,
                None => sig,
            };
            match key {
                JwtKey::Cert(der) => {
                    let der = rustls::pki_types::CertificateDer::from(der.as_slice());
                    let Ok(cert) = webpki::EndEntityCert::try_from(&der) else {
                        return -5;
                    };
                    cert.verify_signature(v, signed, &sig).is_ok()
                }
                JwtKey::PublicKey(der) => {
                    let der = rustls::pki_types::SubjectPublicKeyInfoDer::from(der.as_slice());
                    let Ok(key) = webpki::RawPublicKeyEntity::try_from(&der) else {
                        return -5;
                    };
                    key.verify_signature(v, signed, &sig).is_ok()
                }
                JwtKey::Secret(_) => return -5,
            }
        }
    };
    i64::from(ok)
}

/// An algorithm of RFC 7518 as sluice checks it.
enum Alg {
    Hmac(ring::hmac::Algorithm),
    /// webpki's algorithm, and for ECDSA the length of r and s.
    Signature(
        &'static dyn rustls::pki_types::SignatureVerificationAlgorithm,
        Option<usize>,
    ),
}

impl Alg {
    fn of(name: &[u8]) -> Result<Alg, i64> {
        use webpki::ring as w;
        Ok(match name {
            b"HS256" => Alg::Hmac(ring::hmac::HMAC_SHA256),
            b"HS384" => Alg::Hmac(ring::hmac::HMAC_SHA384),
            b"HS512" => Alg::Hmac(ring::hmac::HMAC_SHA512),
            b"RS256" => Alg::Signature(w::RSA_PKCS1_2048_8192_SHA256, None),
            b"RS384" => Alg::Signature(w::RSA_PKCS1_2048_8192_SHA384, None),
            b"RS512" => Alg::Signature(w::RSA_PKCS1_2048_8192_SHA512, None),
            b"ES256" => Alg::Signature(w::ECDSA_P256_SHA256, Some(32)),
            b"ES384" => Alg::Signature(w::ECDSA_P384_SHA384, Some(48)),
            b"PS256" | b"PS384" | b"PS512" => return Err(-2),
            // ES512 (P-521) is not in ring: reported as unknown rather than failed.
            _ => return Err(-1),
        })
    }
}

/// ECDSA's r and s as the DER sequence of two integers.
fn ecdsa_der(r: &[u8], s: &[u8]) -> Vec<u8> {
    let int = |v: &[u8]| {
        let v = &v[v
            .iter()
            .position(|&b| b != 0)
            .unwrap_or(v.len().saturating_sub(1))..];
        let mut out = vec![0x02];
        let pad = v.first().is_some_and(|&b| b & 0x80 != 0);
        out.push((v.len() + usize::from(pad)) as u8);
        if pad {
            out.push(0);
        }
        out.extend_from_slice(v);
        out
    };
    let (r, s) = (int(r), int(s));
    let mut out = vec![0x30, (r.len() + s.len()) as u8];
    out.extend_from_slice(&r);
    out.extend_from_slice(&s);
    out
}

/// The query's answer: the decoded part whole, or the value at `path`.
pub(super) fn query<'a>(
    token: &[u8],
    payload: bool,
    path: Option<&serde_json_path::JsonPath>,
    int: bool,
) -> Option<Sample<'a>> {
    let json = part(token, payload)?;
    match path {
        None => Some(Sample::Str(std::borrow::Cow::Owned(json))),
        Some(p) => super::json::query(&json, p, int),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &[u8] = b"eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c";

    #[test]
    fn hmac_tokens_verify_with_their_secret_only() {
        let good = JwtKey::Secret(b"your-256-bit-secret".to_vec());
        let bad = JwtKey::Secret(b"other".to_vec());
        assert_eq!(verify(TOKEN, b"HS256", &good), 1);
        assert_eq!(verify(TOKEN, b"HS256", &bad), 0);
        assert_eq!(verify(TOKEN, b"HS999", &good), -1);
        assert_eq!(verify(TOKEN, b"PS256", &good), -2);
        assert_eq!(verify(b"a.b", b"HS256", &good), -3);
        assert_eq!(
            part(TOKEN, false).unwrap(),
            br#"{"alg":"HS256","typ":"JWT"}"#
        );
    }

    #[test]
    fn ecdsa_signatures_become_der() {
        let r = [0x80u8; 32];
        let s = [0x01u8; 32];
        let der = ecdsa_der(&r, &s);
        // r needs a leading zero (its high bit is set); s does not.
        assert_eq!(&der[..4], &[0x30, 69, 0x02, 33]);
        assert_eq!(der.len(), 71);
    }
}
