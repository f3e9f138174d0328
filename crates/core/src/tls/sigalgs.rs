//! `sigalgs` and `client-sigalgs` on `ssl` binds: the signature schemes a handshake may be
//! signed with, and those client certificates may be verified with. rustls chooses the
//! scheme from what the key supports and the peer offers; these wrappers take out what the
//! lists do not name.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, SubjectPublicKeyInfoDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::sign::{CertifiedKey, Signer, SigningKey};
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureAlgorithm, SignatureScheme};

/// A signing key that signs only with the `allowed` schemes.
#[derive(Debug)]
struct Restricted {
    key: Arc<dyn SigningKey>,
    allowed: Arc<[SignatureScheme]>,
}

impl SigningKey for Restricted {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        let offered: Vec<SignatureScheme> = offered
            .iter()
            .copied()
            .filter(|s| self.allowed.contains(s))
            .collect();
        self.key.choose_scheme(&offered)
    }

    fn public_key(&self) -> Option<SubjectPublicKeyInfoDer<'_>> {
        self.key.public_key()
    }

    fn algorithm(&self) -> SignatureAlgorithm {
        self.key.algorithm()
    }
}

/// `key` signing only with the `allowed` schemes (its chain and OCSP answer shared).
pub(super) fn restricted(key: &CertifiedKey, allowed: &Arc<[SignatureScheme]>) -> CertifiedKey {
    CertifiedKey {
        cert: key.cert.clone(),
        key: Arc::new(Restricted {
            key: key.key.clone(),
            allowed: allowed.clone(),
        }),
        ocsp: key.ocsp.clone(),
    }
}

/// A client certificate verifier that accepts signatures of the `allowed` schemes only, and
/// asks for no others.
#[derive(Debug)]
pub(super) struct ClientVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    allowed: Arc<[SignatureScheme]>,
}

impl ClientVerifier {
    pub(super) fn new(inner: Arc<dyn ClientCertVerifier>, allowed: Arc<[SignatureScheme]>) -> Self {
        ClientVerifier { inner, allowed }
    }

    fn check(&self, scheme: SignatureScheme) -> Result<(), rustls::Error> {
        match self.allowed.contains(&scheme) {
            true => Ok(()),
            false => Err(rustls::Error::PeerMisbehaved(
                rustls::PeerMisbehaved::SignedHandshakeWithUnadvertisedSigScheme,
            )),
        }
    }
}

impl ClientCertVerifier for ClientVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.check(dss.scheme)?;
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.check(dss.scheme)?;
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner
            .supported_verify_schemes()
            .into_iter()
            .filter(|s| self.allowed.contains(s))
            .collect()
    }
}
