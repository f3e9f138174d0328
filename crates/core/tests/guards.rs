//! Connection counts are kept by drop guards: a stream that panics (tokio catches the panic
//! and the worker goes on) gives its counts back like any other.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use sluice_core::runtime::{Admission, ClientConn, Process, Runtime, ThreadCtx};

fn process() -> Arc<Process> {
    let config = sluice_core::load_str(
        "t.cfg",
        "global\n    nbthread 2\nfrontend f\n    bind 127.0.0.1:9\n    default_backend b\nbackend b\n    server s 127.0.0.1:9\n",
    )
    .unwrap();
    Arc::new(Process {
        compress_limit: 0.into(),
        state: Runtime::new(&config),
        threads: (0..2)
            .map(|id| ThreadCtx {
                id,
                ..ThreadCtx::default()
            })
            .collect(),
        admission: Admission::new(10, std::iter::once((10, Vec::new())), Default::default()),
        loggers: vec![Vec::new()].into(),
        backend_loggers: vec![Vec::new()].into(),
        config: Arc::new(config),
        stopping: AtomicBool::new(false),
        accept_loops: Default::default(),
        paused: Default::default(),
        resumed: Default::default(),
        handover: Default::default(),
        vars: Default::default(),
        started: std::time::Instant::now(),
        figures: Default::default(),
        memory: Default::default(),
        server_edits: Default::default(),
        added_checks: Default::default(),
        mail: Default::default(),
        resolvers: Default::default(),
        renamed: Default::default(),
        show_peers: Default::default(),
        peer_sessions: Default::default(),
        peers_listeners: Default::default(),
        quic_routes: Default::default(),
        pipes: Default::default(),
    })
}

#[test]
fn a_panicking_stream_gives_its_connection_counts_back() {
    let p = process();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build_local(Default::default())
        .unwrap();
    let task = {
        let p = p.clone();
        rt.spawn_local(async move {
            let _counted = ClientConn::open(&p, 1, (0, 0), "127.0.0.1:1".parse().unwrap());
            assert_eq!(p.threads[1].active.load(Ordering::Relaxed), 1);
            assert_eq!(p.state.frontends[0].conns.load(Ordering::Relaxed), 1);
            panic!("a bug in a stream");
        })
    };
    let joined = rt.block_on(task);
    assert!(joined.unwrap_err().is_panic());
    assert_eq!(p.threads[1].active.load(Ordering::Relaxed), 0);
    assert_eq!(p.state.frontends[0].conns.load(Ordering::Relaxed), 0);
    assert_eq!(p.active_total(), 0);
}
