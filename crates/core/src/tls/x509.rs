//! What sluice reads of an X.509 certificate itself (rustls and webpki verify them but do
//! not expose their names): the subject and issuer names, for the `ssl_c_s_dn` and
//! `ssl_c_i_dn` fetches and for the chain a certificate file is served with
//! (`issuers-chain-path`, `ssl-skip-self-issued-ca`).
//!
//! Invariants:
//! - Names are compared as their DER bytes, as they appear in the certificates: an issuer
//!   is the one whose subject is byte for byte the leaf's issuer.
//! - A chain is only ever completed, never changed: a file that carries intermediates is
//!   served with them, and the leaf is always first.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

pub use crate::conf::tls::ChainRules;

impl ChainRules {
    /// Reads every PEM file of `dir` as a chain of issuers.
    pub fn with_issuers_from(mut self, dir: &str) -> Result<ChainRules, String> {
        let at = |e: &dyn std::fmt::Display| format!("issuers-chain-path '{dir}': {e}");
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .map_err(|e| at(&e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect();
        files.sort();
        for f in files {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&f)
                .map_err(|e| at(&format!("{}: {e}", f.display())))?
                .collect::<Result<_, _>>()
                .map_err(|e| at(&format!("{}: {e}", f.display())))?;
            if chain.is_empty() {
                return Err(at(&format!("{}: no certificate in it", f.display())));
            }
            self.issuers.push(chain);
        }
        Ok(self)
    }

    /// The chain to serve for `certs` as loaded (the leaf first): a lone leaf gets the
    /// issuers' chain whose first certificate issued it; self-issued authorities go when
    /// `skip_self_issued`.
    pub fn apply(&self, mut certs: Vec<CertificateDer<'static>>) -> Vec<CertificateDer<'static>> {
        if certs.len() == 1 {
            if let Some(wanted) = names(&certs[0]).map(|n| n.issuer.to_vec()) {
                let found = self
                    .issuers
                    .iter()
                    .find(|chain| names(&chain[0]).is_some_and(|n| n.subject == wanted.as_slice()));
                if let Some(chain) = found {
                    certs.extend(chain.iter().cloned());
                }
            }
        }
        if self.skip_self_issued {
            let leaf = certs.remove(0);
            certs.retain(|c| names(c).is_none_or(|n| n.subject != n.issuer));
            certs.insert(0, leaf);
        }
        certs
    }
}

/// The subject and issuer names of a certificate, as DER.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Names<'a> {
    pub subject: &'a [u8],
    pub issuer: &'a [u8],
}

/// The names of a DER certificate; `None` when it does not parse as one.
pub fn names(cert: &[u8]) -> Option<Names<'_>> {
    let (_, certificate) = der(cert, 0x30)?;
    let (_, mut tbs) = der(certificate, 0x30)?;
    if tbs.first() == Some(&0xa0) {
        tbs = der(tbs, 0xa0)?.0; // version
    }
    tbs = der(tbs, 0x02)?.0; // serial number
    tbs = der(tbs, 0x30)?.0; // signature algorithm
    let (rest, issuer) = der(tbs, 0x30)?;
    let (rest, _) = der(rest, 0x30)?; // validity
    let (_, subject) = der(rest, 0x30)?;
    Some(Names { subject, issuer })
}

/// The subject and the issuer of a DER certificate as OpenSSL's one-line form
/// (`/C=FR/O=Example/CN=client`), which HAProxy's `ssl_c_s_dn` and `ssl_c_i_dn` give.
pub fn dn_strings(cert: &[u8]) -> Option<(String, String)> {
    let n = names(cert)?;
    Some((dn(n.subject)?, dn(n.issuer)?))
}

/// One DER element of tag `tag` at the start of `b`: (what follows it, its content).
fn der(b: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    if *b.first()? != tag {
        return None;
    }
    let first = *b.get(1)? as usize;
    let (len, head) = if first < 0x80 {
        (first, 2)
    } else {
        let n = first & 0x7f;
        if n == 0 || n > 4 {
            return None;
        }
        let len = b
            .get(2..2 + n)?
            .iter()
            .fold(0usize, |l, &x| (l << 8) | x as usize);
        (len, 2 + n)
    };
    let content = b.get(head..head + len)?;
    Some((&b[head + len..], content))
}

/// An X.501 Name as `/KEY=value` pairs.
fn dn(mut name: &[u8]) -> Option<String> {
    const KEYS: &[(&[u8], &str)] = &[
        (&[0x55, 0x04, 0x03], "CN"),
        (&[0x55, 0x04, 0x06], "C"),
        (&[0x55, 0x04, 0x07], "L"),
        (&[0x55, 0x04, 0x08], "ST"),
        (&[0x55, 0x04, 0x0a], "O"),
        (&[0x55, 0x04, 0x0b], "OU"),
        (
            &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01],
            "emailAddress",
        ),
    ];
    let mut out = String::new();
    while !name.is_empty() {
        let (rest, set) = der(name, 0x31)?;
        name = rest;
        let (_, pair) = der(set, 0x30)?;
        let (value, oid) = der(pair, 0x06)?;
        let text = value.get(2..)?; // any string type: tag and short length
        let key = KEYS.iter().find(|(o, _)| *o == oid).map_or("?", |(_, k)| k);
        out.push_str(&format!("/{key}={}", String::from_utf8_lossy(text)));
    }
    Some(out)
}
