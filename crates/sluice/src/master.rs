//! Master-worker mode (`-W`, `-Ws`): a master process binds the listeners once and keeps
//! them, and runs the proxy in a worker process that inherits them. On SIGUSR2 it reads the
//! configuration again and starts a new worker on the same sockets, which then asks the old
//! one to finish softly (`-sf`), so a reload loses no connection. With `-Ws` it tells
//! systemd (`NOTIFY_SOCKET`) `READY=1` once a worker listens and `RELOADING=1` around a
//! reload. SIGTERM/SIGINT stop the workers and the master; SIGUSR1 stops them softly; a
//! worker that dies on its own takes the master down with it (exit status 1).

use std::collections::HashMap;
use std::io::Read;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use sluice_core::conf::listen::BindSpec;

/// The environment variables a worker reads what its master gives it from.
pub const LISTENERS_ENV: &str = "SLUICE_LISTENERS";
pub const READY_ENV: &str = "SLUICE_READY_FD";
/// A private stats socket (level admin) the worker opens for the master CLI's `@N`.
pub const CLI_ENV: &str = "SLUICE_MASTER_CLI";

/// What the master CLI knows of a worker.
#[derive(Debug, Clone)]
struct WorkerInfo {
    pid: u32,
    /// Reloads the master had done when this worker started.
    reloads: u32,
    started: Instant,
    cli: std::path::PathBuf,
}

/// The workers of the master, newest first, shared with the master CLI.
type Roster = std::sync::Arc<std::sync::Mutex<Vec<WorkerInfo>>>;

/// A master's listening sockets, by (frontend, address).
type Sockets = HashMap<(String, String), std::net::TcpListener>;

/// Binds the listeners of a configuration that the master does not hold yet; keeps the
/// others. A bind on an inherited descriptor (`fd@N`) is left to the worker.
fn bind_all(config: &sluice_core::Config, sockets: &mut Sockets) -> Result<(), String> {
    let mut wanted = Sockets::new();
    for fe in &config.frontends {
        for bind in &fe.listen.binds {
            if !matches!(bind.spec, BindSpec::Addr(_)) {
                continue;
            }
            let key = (fe.name.clone(), bind.spec.to_string());
            let socket = match sockets.remove(&key) {
                Some(s) => s,
                None => {
                    let backlog = fe.listen.maxconn.or(config.global.maxconn).unwrap_or(4096);
                    sluice_core::worker::listener::open_bind(bind, backlog)
                        .map_err(|e| e.to_string())?
                }
            };
            wanted.insert(key, socket);
        }
    }
    // Addresses the new configuration dropped close here.
    *sockets = wanted;
    Ok(())
}

/// Starts a worker on `sockets` with `args`, and waits until it listens; `cli` is its
/// private stats socket.
fn start_worker(
    args: &[String],
    sockets: &Sockets,
    finish: &[u32],
    cli: &std::path::Path,
) -> Result<Child, String> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(format!("pipe: {}", std::io::Error::last_os_error()));
    }
    // SAFETY: both were just created and are owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    let list: String = sockets
        .iter()
        .map(|((fe, addr), l)| format!("{fe}\t{addr}\t{}\n", l.as_raw_fd()))
        .collect();
    let mut inherit: Vec<i32> = sockets.values().map(|l| l.as_raw_fd()).collect();
    inherit.push(write.as_raw_fd());
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the sluice binary: {e}"))?;
    let mut cmd = Command::new(exe);
    cmd.args(args)
        .env(LISTENERS_ENV, list)
        .env(READY_ENV, write.as_raw_fd().to_string())
        .env(CLI_ENV, cli)
        .stdin(Stdio::null());
    if !finish.is_empty() {
        cmd.arg("-sf").args(finish.iter().map(|p| p.to_string()));
    }
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // A worker never outlives its master.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let child = cmd
        .spawn()
        .map_err(|e| format!("cannot start a worker: {e}"))?;
    drop(write);
    let mut byte = [0u8; 1];
    let got = std::fs::File::from(read).read(&mut byte).unwrap_or(0);
    if got != 1 {
        return Err(format!("worker {} exited before listening", child.id()));
    }
    eprintln!("sluice: master: worker {} ready", child.id());
    Ok(child)
}

/// Says something to systemd (`-Ws`), when it listens.
fn notify(what: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Ok(s) = std::os::unix::net::UnixDatagram::unbound() {
        let _ = s.send_to(
            format!("{what}\nMAINPID={}\n", std::process::id()).as_bytes(),
            path,
        );
    }
}

/// Runs the master until it must exit.
pub fn run(
    files: &[String],
    worker_args: &[String],
    pidfile: Option<&str>,
    systemd: bool,
    master_cli: Option<&str>,
) -> ExitCode {
    START.get_or_init(Instant::now);
    // Signal handlers first: a SIGUSR2 arriving before them would kill the master.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sluice: master: fatal: {e}");
            return ExitCode::from(1);
        }
    };
    let (mut usr2, mut usr1, mut term, mut int) = {
        use tokio::signal::unix::{signal, SignalKind};
        let _in = rt.enter();
        let sig = |k: SignalKind| signal(k).expect("signal handlers");
        (
            sig(SignalKind::user_defined2()),
            sig(SignalKind::user_defined1()),
            sig(SignalKind::terminate()),
            sig(SignalKind::interrupt()),
        )
    };
    let load = || match sluice_core::load(files) {
        Ok(c) => Ok(c),
        Err(errors) => {
            for e in &errors {
                eprintln!("sluice: {e}");
            }
            Err(format!("{} error(s) in the configuration", errors.len()))
        }
    };
    let mut sockets = Sockets::new();
    let started = load().and_then(|c| bind_all(&c, &mut sockets));
    if let Err(e) = started {
        eprintln!("sluice: master: fatal: {e}");
        return ExitCode::from(1);
    }
    if let Some(path) = pidfile {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            eprintln!("sluice: master: fatal: pidfile {path}: {e}");
            return ExitCode::from(1);
        }
    }
    let private = std::env::temp_dir().join(format!("sluice-master-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&private) {
        eprintln!("sluice: master: fatal: {}: {e}", private.display());
        return ExitCode::from(1);
    }
    let roster: Roster = Default::default();
    let mut reloads = 0u32;
    let launch = |finish: &[u32], reloads: u32, sockets: &Sockets| {
        let cli = private.join(format!("worker-{reloads}.sock"));
        let child = start_worker(worker_args, sockets, finish, &cli)?;
        roster.lock().unwrap_or_else(|e| e.into_inner()).insert(
            0,
            WorkerInfo {
                pid: child.id(),
                reloads,
                started: Instant::now(),
                cli,
            },
        );
        Ok::<_, String>(child)
    };
    let mut current = match launch(&[], 0, &sockets) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: master: fatal: {e}");
            return ExitCode::from(1);
        }
    };
    if let Some(path) = master_cli {
        if let Err(e) = serve_cli(path, roster.clone()) {
            eprintln!("sluice: master: fatal: master CLI {path}: {e}");
            stop_all(&mut current, &mut [], libc::SIGTERM);
            return ExitCode::from(1);
        }
    }
    if systemd {
        notify("READY=1");
    }
    let mut old: Vec<Child> = Vec::new();
    let code = rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = usr2.recv() => {
                    if systemd {
                        notify("RELOADING=1");
                    }
                    eprintln!("sluice: master: reloading");
                    reloads += 1;
                    let next = load()
                        .and_then(|c| bind_all(&c, &mut sockets))
                        .and_then(|()| launch(&[current.id()], reloads, &sockets));
                    match next {
                        Ok(child) => old.push(std::mem::replace(&mut current, child)),
                        Err(e) => eprintln!("sluice: master: reload failed, the running worker stays: {e}"),
                    }
                    if systemd {
                        notify("READY=1");
                    }
                }
                _ = usr1.recv() => {
                    stop_all(&mut current, &mut old, libc::SIGUSR1);
                    return ExitCode::SUCCESS;
                }
                _ = term.recv() => {
                    stop_all(&mut current, &mut old, libc::SIGTERM);
                    return ExitCode::SUCCESS;
                }
                _ = int.recv() => {
                    stop_all(&mut current, &mut old, libc::SIGTERM);
                    return ExitCode::SUCCESS;
                }
                _ = tick.tick() => {
                    old.retain_mut(|c| c.try_wait().ok().flatten().is_none());
                    let running: Vec<u32> = old.iter().map(Child::id).chain([current.id()]).collect();
                    roster
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|w| running.contains(&w.pid));
                    if let Ok(Some(status)) = current.try_wait() {
                        eprintln!("sluice: master: worker {} exited ({status}): exiting", current.id());
                        stop_all(&mut current, &mut old, libc::SIGTERM);
                        return ExitCode::from(1);
                    }
                }
            }
        }
    });
    // The workers' private CLI sockets.
    let _ = std::fs::remove_dir_all(&private);
    code
}

/// Sends `sig` to every worker and waits for them (a soft stop may take its time).
fn stop_all(current: &mut Child, old: &mut [Child], sig: i32) {
    for c in std::iter::once(&mut *current).chain(old.iter_mut()) {
        // SAFETY: a signal to a child this master started.
        unsafe { libc::kill(c.id() as i32, sig) };
    }
    let deadline = Instant::now() + Duration::from_secs(3600);
    for c in std::iter::once(current).chain(old.iter_mut()) {
        while c.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// The master CLI (`-S PATH`): `show proc`, `reload` (as SIGUSR2), `@N COMMAND` (a command
/// for worker N: 1 is the newest, `@!PID` names one), `help`, one line per connection.
fn serve_cli(path: &str, roster: Roster) -> std::io::Result<()> {
    let _ = std::fs::remove_file(path);
    let listener = std::os::unix::net::UnixListener::bind(path)?;
    std::thread::Builder::new()
        .name("sluice-master-cli".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
                let mut line = String::new();
                let mut reader = std::io::BufReader::new(&conn);
                if std::io::BufRead::read_line(&mut reader, &mut line).is_err() {
                    continue;
                }
                let answer = master_command(line.trim(), &roster);
                let _ = std::io::Write::write_all(&mut &conn, answer.as_bytes());
            }
        })?;
    Ok(())
}

fn uptime(since: Instant) -> String {
    let s = since.elapsed().as_secs();
    format!(
        "{}d{:02}h{:02}m{:02}s",
        s / 86400,
        s / 3600 % 24,
        s / 60 % 60,
        s % 60
    )
}

/// When the master started (for `show proc`).
static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();

fn master_command(line: &str, roster: &Roster) -> String {
    let workers = roster.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let version = env!("CARGO_PKG_VERSION");
    if let Some(rest) = line.strip_prefix('@') {
        let (target, cmd) = rest.split_once(' ').unwrap_or((rest, ""));
        let worker = match target.strip_prefix('!') {
            Some(pid) => workers.iter().find(|w| pid.parse() == Ok(w.pid)),
            None => target
                .parse::<usize>()
                .ok()
                .and_then(|n| n.checked_sub(1))
                .and_then(|i| workers.get(i)),
        };
        let Some(w) = worker else {
            return format!("No such worker '{target}'.\n\n");
        };
        return match std::os::unix::net::UnixStream::connect(&w.cli) {
            Ok(mut s) => {
                let _ = std::io::Write::write_all(&mut s, format!("{cmd}\n").as_bytes());
                let mut out = String::new();
                let _ = std::io::Read::read_to_string(&mut s, &mut out);
                out
            }
            Err(e) => format!("Cannot reach worker {}: {e}\n\n", w.pid),
        };
    }
    let newest = workers.first().map_or(0, |w| w.reloads);
    match line {
        "show proc" => {
            let mut out = format!(
                "#<PID>          <type>          <reloads>       <uptime>        <version>\n{:<16}{:<16}{:<16}{:<16}{version}\n# workers\n",
                std::process::id(),
                "master",
                newest,
                uptime(*START.get_or_init(Instant::now))
            );
            for (i, w) in workers.iter().enumerate() {
                if i == 1 {
                    out.push_str("# old workers\n");
                }
                out.push_str(&format!(
                    "{:<16}{:<16}{:<16}{:<16}{version}\n",
                    w.pid,
                    "worker",
                    newest - w.reloads,
                    uptime(w.started)
                ));
            }
            out.push('\n');
            out
        }
        "reload" => {
            // SAFETY: a signal to this very process, which handles it as a reload.
            unsafe { libc::kill(std::process::id() as i32, libc::SIGUSR2) };
            "\n".into()
        }
        "help" | "" => "The following commands are valid at this level:\n  show proc     : the master and its workers\n  reload        : reload the configuration (as SIGUSR2)\n  @N COMMAND    : send COMMAND to worker N (1: the newest; @!PID by pid)\n\n".into(),
        other => format!("Unknown command: '{other}'\n\n"),
    }
}
