//! An HTTP/3 load generator for `bench/h3.py`, on the QUIC and HTTP/3 crates sluice serves
//! with (quinn, h3): CONNECTIONS connections, each keeping STREAMS GET requests in flight
//! until SECONDS have passed, on one thread (as `h2load -t1`). Prints the number of 2xx
//! responses, then the number of failures. The server is trusted by its certificate's exact
//! bytes (the benchmark's self-signed one, named `bench.test`).
//!
//! Usage: h3load HOST PORT PATH SECONDS CONNECTIONS STREAMS CERT_PEM

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// Accepts the one certificate it was given; the handshake's signatures are checked by the
/// provider as usual.
#[derive(Debug)]
struct Pinned {
    cert: CertificateDer<'static>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if end_entity.as_ref() == self.cert.as_ref() {
            Ok(ServerCertVerified::assertion())
        } else {
            Err(rustls::Error::General(
                "not the benchmark's certificate".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls12_signature(message, cert, dss, algs)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        let algs = &self.provider.signature_verification_algorithms;
        rustls::crypto::verify_tls13_signature(message, cert, dss, algs)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn client_config(pem: &str) -> quinn::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cert = CertificateDer::pem_file_iter(pem)
        .expect("the certificate file")
        .next()
        .expect("a certificate in it")
        .expect("a readable certificate");
    let verifier = Arc::new(Pinned {
        cert,
        provider: provider.clone(),
    });
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("a QUIC config");
    quinn::ClientConfig::new(Arc::new(quic))
}

type Sender = h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>;

/// One GET to its end: whether it was answered 2xx with its whole body.
async fn one(send: &mut Sender, uri: &http::Uri) -> bool {
    let Ok(req) = http::Request::get(uri.clone()).body(()) else {
        return false;
    };
    let Ok(mut stream) = send.send_request(req).await else {
        return false;
    };
    if stream.finish().await.is_err() {
        return false;
    }
    let Ok(resp) = stream.recv_response().await else {
        return false;
    };
    loop {
        match stream.recv_data().await {
            Ok(Some(mut chunk)) => chunk.advance(chunk.remaining()),
            Ok(None) => return resp.status().is_success(),
            Err(_) => return false,
        }
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 8 {
        eprintln!("usage: h3load HOST PORT PATH SECONDS CONNECTIONS STREAMS CERT_PEM");
        std::process::exit(2);
    }
    let addr: SocketAddr = format!("{}:{}", args[1], args[2])
        .parse()
        .expect("HOST:PORT");
    let uri: http::Uri = format!("https://bench.test:{}{}", args[2], args[3])
        .parse()
        .expect("a path");
    let secs: f64 = args[4].parse().expect("SECONDS");
    let (conns, streams): (usize, usize) = (
        args[5].parse().expect("CONNECTIONS"),
        args[6].parse().expect("STREAMS"),
    );
    let mut endpoint =
        quinn::Endpoint::client("0.0.0.0:0".parse().expect("an address")).expect("a UDP socket");
    endpoint.set_default_client_config(client_config(&args[7]));
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..conns {
        let conn = endpoint
            .connect(addr, "bench.test")
            .expect("a connection")
            .await
            .expect("a handshake");
        let (mut driver, send) = h3::client::new(h3_quinn::Connection::new(conn))
            .await
            .expect("an HTTP/3 connection");
        tokio::spawn(async move { std::future::poll_fn(|cx| driver.poll_close(cx)).await });
        for _ in 0..streams {
            let (mut send, uri) = (send.clone(), uri.clone());
            tasks.spawn(async move {
                let (mut ok, mut failed) = (0u64, 0u64);
                while Instant::now() < deadline {
                    if one(&mut send, &uri).await {
                        ok += 1;
                    } else {
                        failed += 1;
                    }
                }
                (ok, failed)
            });
        }
    }
    let (mut ok, mut failed) = (0, 0);
    while let Some(done) = tasks.join_next().await {
        let (o, f) = done.expect("a load task");
        ok += o;
        failed += f;
    }
    println!("{ok} {failed}");
}
