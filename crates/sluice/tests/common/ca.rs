//! A test certificate authority (rcgen) and the certificates it signs, as PEM files for
//! sluice and for OpenSSL-based clients, or as rustls client configurations.

use std::sync::Arc;

use super::TempDir;

/// A test certificate authority and the certificates it signs.
pub struct Ca {
    pub cert: rcgen::Certificate,
    pub issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

impl Ca {
    pub fn new() -> Ca {
        Ca::named("sluice test CA")
    }

    /// A CA whose subject is `name` (clients find a certificate's issuer by name).
    pub fn named(name: &str) -> Ca {
        Ca::authority(name, None)
    }

    /// An intermediate authority named `name`, signed by this one.
    pub fn intermediate(&self, name: &str) -> Ca {
        Ca::authority(name, Some(self))
    }

    /// An authority named `name`, self-signed or signed by `parent`.
    fn authority(name: &str, parent: Option<&Ca>) -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        let cert = match parent {
            Some(p) => params.signed_by(&key, &p.issuer).unwrap(),
            None => params.self_signed(&key).unwrap(),
        };
        Ca {
            cert,
            issuer: rcgen::Issuer::new(params, key),
        }
    }

    /// A PEM file (certificate, then key) for `names`, written in `dir`; its DER.
    pub fn leaf(&self, dir: &TempDir, file: &str, names: &[&str]) -> (String, Vec<u8>) {
        let key = rcgen::KeyPair::generate().unwrap();
        let params =
            rcgen::CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        (dir.write(file, &pem), cert.der().to_vec())
    }

    pub fn client(
        &self,
        alpn: &[&str],
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut c = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        c.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
        Arc::new(c)
    }

    /// A client that offers only `suites`, in that order.
    pub fn client_offering(
        &self,
        suites: Vec<rustls::SupportedCipherSuite>,
        version: &'static rustls::SupportedProtocolVersion,
    ) -> Arc<rustls::ClientConfig> {
        let mut provider = rustls::crypto::ring::default_provider();
        provider.cipher_suites = suites;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).unwrap();
        Arc::new(
            rustls::ClientConfig::builder_with_provider(Arc::new(provider))
                .with_protocol_versions(&[version])
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    }

    /// The CA's certificate as a PEM file in `dir`, for `ca-file` and for clients.
    pub fn ca_file(&self, dir: &TempDir) -> String {
        dir.write("ca.pem", &self.cert.pem())
    }

    /// A client certificate for `cn` signed by this CA, and its key.
    pub fn client_cert(&self, cn: &str) -> (rcgen::Certificate, rcgen::KeyPair) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        (params.signed_by(&key, &self.issuer).unwrap(), key)
    }

    /// [`Ca::client_cert`] as two PEM files in `dir`, the certificate and the key (as
    /// curl's `--cert` and `--key` take them).
    pub fn client_identity(&self, dir: &TempDir, cn: &str) -> (String, String) {
        let (cert, key) = self.client_cert(cn);
        (
            dir.write(&format!("{cn}.crt"), &cert.pem()),
            dir.write(&format!("{cn}.key"), &key.serialize_pem()),
        )
    }
}
