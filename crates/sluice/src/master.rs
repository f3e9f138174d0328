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

use sluice_core::conf::cli::{Level, SocketConf};
use sluice_core::conf::listen::BindSpec;
use sluice_core::control::cli::{self, Answer};

/// The environment variables a worker reads what its master gives it from.
pub const LISTENERS_ENV: &str = "SLUICE_LISTENERS";
pub const READY_ENV: &str = "SLUICE_READY_FD";
/// A private stats socket (level admin) the worker opens for the master CLI's `@N`.
pub const CLI_ENV: &str = "SLUICE_MASTER_CLI";
/// Set for the workers of a daemon master: they leave the terminal once listening.
pub const DETACH_ENV: &str = "SLUICE_DETACH";

/// How the master was asked to run.
pub struct Options {
    pub files: Vec<String>,
    /// The command line a worker gets: everything but the master's own options.
    pub worker_args: Vec<String>,
    pub pidfile: Option<String>,
    /// `-Ws`: tell systemd.
    pub systemd: bool,
    /// `-S` (repeatable): the master CLI's sockets.
    pub cli: Vec<SocketConf>,
    /// `-D`: the master detaches once its first worker listens.
    pub daemon: bool,
}

/// Reads `-S ADDR[,mode,OCTAL]`: HAProxy's address forms (a unix socket path or
/// `unix@PATH`, `ipv4@`/`ipv6@ADDR:PORT`, `ADDR:PORT`, `fd@N`), then bind options as
/// comma-separated words.
pub fn cli_conf(spec: &str) -> Result<SocketConf, String> {
    let mut parts = spec.split(',');
    let addr = sluice_core::control::cli::parse_addr(parts.next().unwrap_or_default())?;
    let mut conf = SocketConf {
        addr,
        mode: None,
        level: Level::Admin,
        expose_fd: false,
    };
    while let Some(opt) = parts.next() {
        let val = parts
            .next()
            .ok_or_else(|| format!("'{opt}' expects a value"))?;
        match opt {
            "mode" => {
                conf.mode = Some(
                    u32::from_str_radix(val, 8)
                        .map_err(|_| format!("mode expects an octal number, not '{val}'"))?,
                )
            }
            other => {
                return Err(format!(
                    "bind option '{other}' is not supported on the master CLI yet (only mode)"
                ))
            }
        }
    }
    Ok(conf)
}

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
type Sockets = HashMap<(String, String), socket2::Socket>;

/// Binds the listeners of a configuration that the master does not hold yet; keeps the
/// others. A bind on an inherited descriptor (`fd@N`) is left to the worker.
fn bind_all(config: &sluice_core::Config, sockets: &mut Sockets) -> Result<(), String> {
    let mut wanted = Sockets::new();
    for fe in &config.frontends {
        for bind in &fe.listen.binds {
            if matches!(bind.spec, BindSpec::Fd(_)) {
                continue;
            }
            let key = (fe.name.clone(), bind.spec.to_string());
            let socket = match sockets.remove(&key) {
                Some(s) => s,
                None => {
                    let backlog = fe.listen.maxconn.or(config.global.maxconn).unwrap_or(4096);
                    let reuse_port = !config.global.noreuseport;
                    sluice_core::worker::listener::open_bind(bind, backlog, reuse_port)
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
/// private stats socket; `detach`: it leaves the terminal once listening.
fn start_worker(
    args: &[String],
    sockets: &Sockets,
    finish: &[u32],
    cli: &std::path::Path,
    detach: bool,
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
    if detach {
        cmd.env(DETACH_ENV, "1");
    }
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
    sluice_core::say!("sluice: master: worker {} ready", child.id());
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
pub fn run(opts: Options) -> ExitCode {
    let Options {
        files,
        worker_args,
        pidfile,
        systemd,
        cli: cli_conf,
        daemon,
    } = opts;
    // Detached first, while the master has no thread: the command returns once a worker
    // listens (or with 1 when none could start).
    let detached = if daemon {
        match sluice_core::control::identity::daemonize() {
            Ok(pipe) => Some(pipe),
            Err(e) => {
                sluice_core::say!("sluice: master: fatal: cannot become a daemon: {e}");
                return ExitCode::from(1);
            }
        }
    } else {
        None
    };
    START.get_or_init(Instant::now);
    // Signal handlers first: a SIGUSR2 arriving before them would kill the master.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            sluice_core::say!("sluice: master: fatal: {e}");
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
    let load = || match sluice_core::load(&files) {
        // A worker for it would exit at once; the running one stays.
        Ok(c) if !c.has_listener() => Err(sluice_core::conf::NO_LISTENER.to_string()),
        Ok(c) => Ok(c),
        Err(errors) => {
            for e in &errors {
                sluice_core::say!("sluice: {e}");
            }
            Err(format!("{} error(s) in the configuration", errors.len()))
        }
    };
    let mut sockets = Sockets::new();
    // `mworker-max-reloads` of the configuration last loaded.
    let mut max_reloads = None;
    let started = load().and_then(|c| {
        max_reloads = c.global.mworker_max_reloads;
        bind_all(&c, &mut sockets)
    });
    if let Err(e) = started {
        sluice_core::say!("sluice: master: fatal: {e}");
        return ExitCode::from(1);
    }
    if let Some(path) = &pidfile {
        if let Err(e) = std::fs::write(path, format!("{}\n", std::process::id())) {
            sluice_core::say!("sluice: master: fatal: pidfile {path}: {e}");
            return ExitCode::from(1);
        }
    }
    let private = std::env::temp_dir().join(format!("sluice-master-{}", std::process::id()));
    if let Err(e) = std::fs::create_dir_all(&private) {
        sluice_core::say!("sluice: master: fatal: {}: {e}", private.display());
        return ExitCode::from(1);
    }
    let roster: Roster = Default::default();
    let mut reloads = 0u32;
    let launch = |finish: &[u32], reloads: u32, sockets: &Sockets| {
        let cli = private.join(format!("worker-{reloads}.sock"));
        let child = start_worker(&worker_args, sockets, finish, &cli, daemon)?;
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
    // Bound before any worker starts (the sockets are close-on-exec: workers never hold them).
    let mut master_cli = Vec::new();
    for conf in &cli_conf {
        match cli::bind(conf) {
            Ok(l) => master_cli.push(l),
            Err(e) => {
                sluice_core::say!("sluice: master: fatal: master CLI {}: {e}", conf.addr);
                return ExitCode::from(1);
            }
        }
    }
    let mut current = match launch(&[], 0, &sockets) {
        Ok(c) => c,
        Err(e) => {
            sluice_core::say!("sluice: master: fatal: {e}");
            return ExitCode::from(1);
        }
    };
    let answer = std::sync::Arc::new(MasterCli {
        roster: roster.clone(),
    });
    for listener in master_cli {
        let answer = answer.clone();
        let served = std::thread::Builder::new()
            .name("sluice-master-cli".into())
            .spawn(move || cli::serve_with(listener, Duration::from_secs(10), answer));
        if let Err(e) = served {
            sluice_core::say!("sluice: master: fatal: master CLI: {e}");
            stop_all(&mut current, &mut [], libc::SIGTERM);
            return ExitCode::from(1);
        }
    }
    if systemd {
        notify("READY=1");
    }
    if let Some(pipe) = detached {
        sluice_core::control::identity::ready(pipe);
    }
    let mut old: Vec<Child> = Vec::new();
    // The old workers sent SIGTERM for having outlived `mworker-max-reloads`.
    let mut terminated: Vec<u32> = Vec::new();
    let code = rt.block_on(async {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = usr2.recv() => {
                    if systemd {
                        notify("RELOADING=1");
                    }
                    sluice_core::say!("sluice: master: reloading");
                    reloads += 1;
                    let next = load()
                        .and_then(|c| {
                            max_reloads = c.global.mworker_max_reloads;
                            bind_all(&c, &mut sockets)
                        })
                        .and_then(|()| launch(&[current.id()], reloads, &sockets));
                    match next {
                        Ok(child) => old.push(std::mem::replace(&mut current, child)),
                        Err(e) => sluice_core::say!("sluice: master: reload failed, the running worker stays: {e}"),
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
                    // As HAProxy's master: 130 after SIGINT (0 after SIGTERM).
                    stop_all(&mut current, &mut old, libc::SIGTERM);
                    return ExitCode::from(130);
                }
                _ = tick.tick() => {
                    old.retain_mut(|c| c.try_wait().ok().flatten().is_none());
                    if let Some(max) = max_reloads {
                        too_old(&roster, &mut terminated, reloads, max);
                    }
                    let running: Vec<u32> = old.iter().map(Child::id).chain([current.id()]).collect();
                    roster
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .retain(|w| running.contains(&w.pid));
                    if let Ok(Some(status)) = current.try_wait() {
                        sluice_core::say!("sluice: master: worker {} exited ({status}): exiting", current.id());
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

/// `mworker-max-reloads`: SIGTERM, once, to each worker that has outlived more than `max`
/// reloads (`now` made so far), as HAProxy's master sends it.
fn too_old(roster: &Roster, terminated: &mut Vec<u32>, now: u32, max: u32) {
    let roster = roster.lock().unwrap_or_else(|e| e.into_inner());
    for w in roster.iter() {
        if now - w.reloads > max && !terminated.contains(&w.pid) {
            sluice_core::say!(
                "sluice: master: worker {} has outlived {max} reloads: terminated",
                w.pid
            );
            // SAFETY: a signal to a child this master started.
            unsafe { libc::kill(w.pid as i32, libc::SIGTERM) };
            terminated.push(w.pid);
        }
    }
    terminated.retain(|pid| roster.iter().any(|w| w.pid == *pid));
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

/// The master CLI (`-S`): `show proc`, `reload` (as SIGUSR2), `@N COMMAND` (a command for
/// worker N: 1 is the newest, `@!PID` names one), `help`; the protocol of the proxy's CLI
/// (`;`, `prompt`, `quit`).
struct MasterCli {
    roster: Roster,
}

impl Answer for MasterCli {
    fn command(&self, cmd: &str) -> String {
        master_command(cmd, &self.roster)
    }
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
