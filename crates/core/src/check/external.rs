//! `option external-check`: a server checked by running a program, HAProxy's way. The
//! program (`external-check command`) gets the proxy's first listening address and port
//! (`NOT_USED` for a backend, which has none) and the server's address and port as its
//! arguments, the same and the server's and proxy's names, ids and state in `HAPROXY_*`
//! variables, and nothing else of the environment but `PATH` (`external-check path`,
//! empty by default). Exit status 0 passes; any other fails with its code; a program still
//! running when the check's time is up is terminated and the check times out.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// How an external check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// The program exited with this status (a signal's end counts as -1).
    Exited(i32),
    /// Still running when the time was up: it was terminated.
    TimedOut,
    /// It could not be started.
    NotStarted,
}

/// What one run is given.
pub struct Run<'a> {
    pub command: &'a str,
    pub path: &'a str,
    /// The proxy's first listening address and port, as text (`NOT_USED` without one).
    pub proxy: (String, String),
    pub proxy_name: &'a str,
    pub proxy_id: u32,
    pub server_name: &'a str,
    pub server_id: u32,
    pub server: SocketAddr,
    pub maxconn: usize,
    pub curconn: usize,
    pub ssl: bool,
    /// `h1`, `h2` or `tcp`.
    pub proto: &'static str,
}

/// Runs the program and waits for it within `limit`.
pub async fn run(r: &Run<'_>, limit: Duration) -> Ended {
    let Ok(child) = command(r).spawn() else {
        return Ended::NotStarted;
    };
    wait(child, limit).await
}

fn command(r: &Run<'_>) -> Command {
    let (addr, port) = (r.server.ip().to_string(), r.server.port().to_string());
    let mut c = Command::new(r.command);
    c.args([&r.proxy.0, &r.proxy.1, &addr, &port])
        .env_clear()
        .env("PATH", r.path)
        .env("HAPROXY_PROXY_NAME", r.proxy_name)
        .env("HAPROXY_PROXY_ID", r.proxy_id.to_string())
        .env("HAPROXY_PROXY_ADDR", &r.proxy.0)
        .env("HAPROXY_PROXY_PORT", &r.proxy.1)
        .env("HAPROXY_SERVER_NAME", r.server_name)
        .env("HAPROXY_SERVER_ID", r.server_id.to_string())
        .env("HAPROXY_SERVER_ADDR", &addr)
        .env("HAPROXY_SERVER_PORT", &port)
        .env("HAPROXY_SERVER_MAXCONN", r.maxconn.to_string())
        .env("HAPROXY_SERVER_CURCONN", r.curconn.to_string())
        .env("HAPROXY_SERVER_SSL", if r.ssl { "1" } else { "0" })
        .env("HAPROXY_SERVER_PROTO", r.proto)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c
}

/// Polls the child until it exits or `limit` passes (then terminates it). Polling keeps
/// the worker's event loop free of any process-wide `SIGCHLD` handling, and checks are
/// seconds apart.
async fn wait(mut child: Child, limit: Duration) -> Ended {
    const POLL: Duration = Duration::from_millis(20);
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Ended::Exited(status.code().unwrap_or(-1)),
            Ok(None) if tokio::time::Instant::now() >= deadline => {
                end(child).await;
                return Ended::TimedOut;
            }
            Ok(None) => tokio::time::sleep(POLL).await,
            Err(_) => return Ended::NotStarted,
        }
    }
}

/// Terminates a child whose time is up: SIGTERM, as HAProxy sends, then SIGKILL if it is
/// still there a second later; reaped either way.
async fn end(mut child: Child) {
    // SAFETY: kill only sends a signal to the child this check started and has not reaped
    // yet, so the pid is still its own.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
    for _ in 0..50 {
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = child.kill();
    let _ = child.wait();
}
