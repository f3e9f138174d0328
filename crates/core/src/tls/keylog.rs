//! `tune.ssl.keylog on`: the secrets of each client's TLS session, kept with its connection
//! for the `ssl_fc_*_secret`, `ssl_fc_client_random` and `ssl_fc_session_key` fetches (the
//! lines of the NSS key log format that Wireshark reads).
//!
//! rustls hands each secret to the configuration's [`rustls::KeyLog`], shared by all the
//! connections of a bind. Secrets are derived while a connection's handshake records are
//! processed, synchronously, on the worker that owns the connection: [`collecting`] sets
//! that worker's collection aside for the length of one such call, and what the call
//! logged is the connection's own ([`Secrets`]).

use std::cell::RefCell;

/// A session's secrets, by NSS key log label.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Secrets {
    pub client_random: Vec<u8>,
    pub secrets: Vec<(&'static str, Vec<u8>)>,
}

impl Secrets {
    /// The secret logged under `label` (`CLIENT_TRAFFIC_SECRET_0`, `CLIENT_RANDOM` for
    /// TLS 1.2's master secret, ...).
    pub fn get(&self, label: &str) -> Option<&[u8]> {
        self.secrets
            .iter()
            .find(|(l, _)| *l == label)
            .map(|(_, s)| s.as_slice())
    }
}

/// The labels rustls logs (its names are the NSS key log format's).
const LABELS: [&str; 8] = [
    "CLIENT_RANDOM",
    "CLIENT_EARLY_TRAFFIC_SECRET",
    "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
    "SERVER_HANDSHAKE_TRAFFIC_SECRET",
    "CLIENT_TRAFFIC_SECRET_0",
    "SERVER_TRAFFIC_SECRET_0",
    "EXPORTER_SECRET",
    "EARLY_EXPORTER_SECRET",
];

thread_local! {
    /// What the call being made for one connection logged.
    static LOGGED: RefCell<Secrets> = RefCell::new(Secrets::default());
}

/// The `KeyLog` of a bind with `tune.ssl.keylog on`.
#[derive(Debug)]
pub struct ToConnection;

impl rustls::KeyLog for ToConnection {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let Some(label) = LABELS.iter().find(|l| **l == label) else {
            return;
        };
        LOGGED.with(|l| {
            let mut l = l.borrow_mut();
            l.client_random = client_random.to_vec();
            l.secrets.push((label, secret.to_vec()));
        });
    }

    fn will_log(&self, _label: &str) -> bool {
        true
    }
}

/// Runs one call into a connection's TLS state, and adds what it logged to `keep`.
pub fn collecting<T>(keep: &RefCell<Option<Secrets>>, call: impl FnOnce() -> T) -> T {
    let out = call();
    LOGGED.with(|l| {
        let mut l = l.borrow_mut();
        if l.secrets.is_empty() {
            return;
        }
        let got = std::mem::take(&mut *l);
        let mut keep = keep.borrow_mut();
        let k = keep.get_or_insert_with(Secrets::default);
        k.client_random = got.client_random;
        k.secrets.extend(got.secrets);
    });
    out
}
