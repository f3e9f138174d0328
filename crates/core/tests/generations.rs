//! A new configuration generation keeps the live state of what is still there (matched by id
//! and name, then by name) and starts afresh for what changed.

use std::sync::Arc;

use sluice_core::runtime::{AdminState, Runtime};

fn config(body: &str) -> sluice_core::Config {
    sluice_core::load_str("t.cfg", &format!("global\n    nbthread 2\n{body}")).unwrap()
}

#[test]
fn matching_servers_keep_their_state_and_changed_ones_start_afresh() {
    let old = config(
        "frontend f\n    bind 127.0.0.1:9\n    default_backend app\nbackend app\n    server a 127.0.0.1:1\n    server b 127.0.0.1:2\n    server c 127.0.0.1:3\nbackend gone\n    server x 127.0.0.1:4\n",
    );
    let rt = Runtime::new(&old);
    let app = &rt.backends[0];
    app.set_admin(0, AdminState::Drain);
    app.set_weight(1, 7);
    app.servers[0].counters.at(1).requests.add(5);
    // A section added in front shifts the assigned ids; b moves to another address.
    let new = config(
        "backend first\n    server y 127.0.0.1:5\nfrontend f\n    bind 127.0.0.1:9\n    default_backend app\nbackend app\n    server c 127.0.0.1:3\n    server a 127.0.0.1:1\n    server b 127.0.0.1:20\n",
    );
    let next = rt.next(&old, &new);
    assert_eq!(next.backends.len(), 2);
    let app2 = &next.backends[1];
    // a kept everything, at its new position.
    assert!(Arc::ptr_eq(&app2.servers[1], &app.servers[0]));
    assert_eq!(app2.servers[1].admin(), AdminState::Drain);
    assert_eq!(app2.servers[1].counters.sum(|c| &c.requests), 5);
    // c kept too; b's address changed: fresh, configured weight, ready.
    assert!(Arc::ptr_eq(&app2.servers[0], &app.servers[2]));
    assert!(!Arc::ptr_eq(&app2.servers[2], &app.servers[1]));
    assert_eq!(app2.servers[2].weight(), 1);
    assert_eq!(app2.servers[2].admin(), AdminState::Ready);
    // The frontend is the same proxy: its state is kept.
    assert!(Arc::ptr_eq(&next.frontends[0], &rt.frontends[0]));
    // A changed worker count starts everything afresh (per-worker slots would not fit).
    let three = sluice_core::load_str(
        "t.cfg",
        "global\n    nbthread 3\nfrontend f\n    bind 127.0.0.1:9\n    default_backend app\nbackend app\n    server a 127.0.0.1:1\n",
    )
    .unwrap();
    let fresh = rt.next(&old, &three);
    assert!(!Arc::ptr_eq(&fresh.backends[0].servers[0], &app.servers[0]));
}

#[test]
fn ids_are_kept_when_set_and_assigned_around_them_otherwise() {
    let c = config(
        "frontend f\n    id 3\n    bind 127.0.0.1:9\n    default_backend app\nbackend app\n    server a 127.0.0.1:1 id 9\n    server b 127.0.0.1:2\nlisten l\n    bind 127.0.0.1:8\n    server s 127.0.0.1:3\n",
    );
    let ids: Vec<u32> = c.frontends.iter().map(|f| f.id).collect();
    // Automatic ids start from 2, as HAProxy 2.6's (its first goes to an internal proxy).
    assert_eq!(ids, [3, 4], "a listen section is one proxy with one id");
    let be: Vec<(String, u32)> = c.backends.iter().map(|b| (b.name.clone(), b.id)).collect();
    assert_eq!(be, [("app".to_string(), 2), ("l".to_string(), 4)]);
    let srv: Vec<u32> = c.backends[0].servers.iter().map(|s| s.id).collect();
    // As HAProxy: the second server's automatic id starts from 2, whatever the first took.
    assert_eq!(srv, [9, 2]);
    let dup = sluice_core::load_str(
        "t.cfg",
        "frontend f\n    id 1\n    bind 127.0.0.1:9\n    default_backend app\nbackend app\n    id 1\n    server a 127.0.0.1:1\n",
    );
    let err = dup.unwrap_err()[0].to_string();
    assert!(
        err.contains("t.cfg:5") && err.contains("proxy id 1"),
        "{err}"
    );
}
