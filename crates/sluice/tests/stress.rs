//! Many concurrent keep-alive clients through more workers than cores: nothing is lost,
//! every response matches its request, and no server connection ever carries two requests
//! at once.

mod common;

use std::sync::atomic::Ordering;

use common::*;

#[test]
fn two_hundred_clients_fifty_requests_each() {
    let origins: Vec<Origin> = (0..3).map(|i| Origin::start(&format!("o{i}"))).collect();
    let mut cfg = format!("global\n    nbthread 4\n{DEFAULTS}\nfrontend fe\n    {{fe}}\n    default_backend be\nbackend be\n    http-reuse always\n");
    for (i, o) in origins.iter().enumerate() {
        cfg.push_str(&format!("    server s{i} {}\n", o.addr));
    }
    let p = Sluice::start(&cfg);
    let addr = p.addr();
    let clients: Vec<_> = (0..200)
        .map(|c| {
            std::thread::spawn(move || {
                let mut conn = Conn::new(addr);
                for r in 0..50 {
                    let path = format!("/c{c}/r{r}");
                    let resp = conn.get(&path);
                    assert_eq!(resp.status, 200);
                    let text = resp.text();
                    assert!(text.ends_with(&format!(" {path}")), "{path} got {text}");
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client thread");
    }
    let total: usize = origins.iter().map(|o| o.count()).sum();
    assert_eq!(total, 200 * 50);
    for o in &origins {
        assert_eq!(
            o.overlaps.load(Ordering::SeqCst),
            0,
            "two requests at once on one connection"
        );
    }
    let conns: usize = origins.iter().map(|o| o.conns()).sum();
    assert!(conns <= 200 * 2, "connections are reused: {conns}");
}
