//! Converters compared with HAProxy 2.6's answers for the same inputs: each expression is
//! rendered by `http-request return ... lf-string` for two inputs, and
//! `testdata/haproxy-2.6/converters.txt` holds what HAProxy 2.6.12 answered
//! (`bash testdata/haproxy-2.6/record-converters.sh` records it again).

mod common;

use common::*;

/// The expressions, applied to the request's `X-In` header.
const EXPRESSIONS: &[&str] = &[
    "sha1,hex",
    "sha2,hex",
    "sha2(256),hex",
    "sha2(384),hex",
    "sha2(512),hex",
    "digest(sha256),hex",
    "digest(sha1),base64",
    "hmac(sha256,c2VjcmV0),hex",
    "hmac(sha1,c2VjcmV0),base64",
    "ub64enc",
    "ub64enc,ub64dec",
    "url_enc",
    "url_enc(query)",
    "be2dec(-,2)",
    "be2dec(.,3,1)",
    "be2hex",
    "be2hex(:,2)",
    "be2hex(,4,1)",
    "length,bool,iif(long,short)",
    "secure_memcmp(txn.other)",
    "strcmp(txn.other)",
];

/// Inputs, sent as the `X-In` header.
const INPUTS: &[&str] = &["hello world", "abc", "a/b?c=d&e f~"];

fn config() -> String {
    let mut c = String::from(
        "defaults\n    mode http\n    timeout connect 1s\n    timeout client 2s\n    timeout server 2s\nfrontend fe\n    {fe}\n    http-request set-var(txn.other) str(abc)\n",
    );
    for (i, e) in EXPRESSIONS.iter().enumerate() {
        c.push_str(&format!(
            "    http-request return status 200 content-type text/plain lf-string \"%[req.hdr(x-in),{e}]\" if {{ path /c{i} }}\n"
        ));
    }
    c
}

fn answers(p: &Sluice) -> Vec<String> {
    let mut out = Vec::new();
    for (i, e) in EXPRESSIONS.iter().enumerate() {
        for input in INPUTS {
            let mut c = Conn::new(p.addr());
            c.send(
                format!(
                    "GET /c{i} HTTP/1.1\r\nHost: t\r\nX-In: {input}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
            let r = c.response();
            out.push(format!("{e}\t{input}\t{}\t{}", r.status, r.text()));
        }
    }
    out
}

fn reference() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../testdata/haproxy-2.6/converters.txt")
}

#[test]
fn converters_answer_as_haproxy_26() {
    if std::env::var("SLUICE_CONV_RECORD").as_deref() == Ok("haproxy") {
        let p = Sluice::start_program("haproxy", &["-db"], &config());
        std::fs::write(reference(), answers(&p).join("\n") + "\n").unwrap();
        return;
    }
    let p = Sluice::start(&config());
    let got = answers(&p);
    let want = std::fs::read_to_string(reference()).unwrap();
    let differ: Vec<String> = want
        .lines()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|(w, g)| format!("haproxy {w:?}\nsluice  {g:?}"))
        .collect();
    assert_eq!(want.lines().count(), got.len());
    assert!(differ.is_empty(), "{}", differ.join("\n"));
}
