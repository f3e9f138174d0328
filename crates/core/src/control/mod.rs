//! The control plane, at the top of the stack: starting the process (listeners, workers, the
//! runtime CLI), and the signals that stop it (`hard-stop-after`).
//!
//! The control thread is the process's main thread once the workers run: it waits for
//! signals, as HAProxy's process does. SIGTERM/SIGINT stop at once (the process then ends
//! by that signal, as HAProxy's); SIGUSR1
//! starts a soft stop, which ends when no client connection is left or when
//! `hard-stop-after` expires; SIGHUP writes every server's state to standard error and
//! carries on; SIGTTOU stops the workers accepting (new connections wait in the kernel's
//! queue) and SIGTTIN restarts them; SIGUSR2 (a reload, for a master process) is ignored.
//!
//! A new process started with `-sf PID...` (`-st PID...`) takes the old one's sockets
//! (`-x`) or binds beside them (SO_REUSEPORT) and steers new connections to its own
//! (`listener::steer_here`), and once it listens asks them to finish softly (SIGUSR1) or to
//! stop (SIGTERM).

pub mod cli;
mod fd_list;
mod frontends;
pub mod handover;
pub mod identity;
mod patterns;
mod servers;
pub mod state_file;
mod tables;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_config::{Keyword, Scope};

use crate::check::CheckTask;
use crate::conf::{time_arg, Config, GlobalConf};
use crate::runtime::{Admission, MemoryRelease, Process, Runtime, ThreadCtx};
use crate::worker::listener::{self, ListenError, Listening};
use crate::worker::{self, Inboxes};

/// A keyword that changes the environment the configuration reads: the reader of the
/// files applied it already, line by line (`sluice_config::Env`); here it is checked and
/// kept for what reads the environment once the configuration is loaded.
macro_rules! env_keyword {
    ($name:literal, $help:literal) => {
        Keyword {
            name: $name,
            scope: Scope::GLOBAL,
            help: $help,
            parse: |g, a| {
                let words: Vec<String> = std::iter::once($name.to_string())
                    .chain(a.iter().cloned())
                    .collect();
                g.env
                    .apply(&words, &|k| std::env::var(k).ok())
                    .map_err(sluice_config::KwError::Invalid)
            },
        }
    };
}

/// `strict-limits` (the default) and `no strict-limits`.
/// Requests for what sluice never does, satisfied as they are: `nopoll`, `nokqueue`,
/// `noevports` (pollers it does not use; it polls with epoll).
pub const SATISFIED_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "nopoll",
        scope: Scope::GLOBAL,
        help: "nopoll: not the poll() poller (sluice polls with epoll)",
        parse: no_args,
    },
    Keyword {
        name: "nokqueue",
        scope: Scope::GLOBAL,
        help: "nokqueue: not the kqueue poller (sluice polls with epoll)",
        parse: no_args,
    },
    Keyword {
        name: "noevports",
        scope: Scope::GLOBAL,
        help: "noevports: not the event ports poller (sluice polls with epoll)",
        parse: no_args,
    },
];

fn no_args(_: &mut GlobalConf, a: &[String]) -> Result<(), sluice_config::KwError> {
    sluice_config::no_args(a)
}

/// The only argument, a whole number of at least `min` (`expects` names it for errors).
fn number_arg(
    a: &[String],
    expects: &'static str,
    min: u64,
) -> Result<u64, sluice_config::KwError> {
    let v = crate::conf::one_arg(a, expects)?;
    v.parse()
        .ok()
        .filter(|&n| n >= min)
        .ok_or_else(|| match min {
            0 => sluice_config::KwError::bad(1, v, "expects a number"),
            _ => sluice_config::KwError::bad(1, v, format!("expects a number, at least {min}")),
        })
}

pub const FLAG_KEYWORDS: &[Keyword<GlobalConf>] = sluice_config::flag_keywords![
    "strict-limits", Scope::GLOBAL, "refuse to start when the descriptor limit cannot be raised for maxconn or ulimit-n (the default; 'no strict-limits': warn and start)",
        |g: &mut GlobalConf, on: bool| g.loose_limits = !on;
];

pub const GLOBAL_KEYWORDS: &[Keyword<GlobalConf>] = &[
    Keyword {
        name: "fd-hard-limit",
        scope: Scope::GLOBAL,
        help: "fd-hard-limit N: the most file descriptors the process uses, whatever higher limit the system allows",
        parse: |g, a| {
            number_arg(a, "a number of file descriptors", 64).map(|n| g.fd_hard_limit = Some(n))
        },
    },
    Keyword {
        name: "ulimit-n",
        scope: Scope::GLOBAL,
        help: "ulimit-n N: the file descriptor limit to set (default: what maxconn needs)",
        parse: |g, a| {
            number_arg(a, "a number of file descriptors", 64).map(|n| g.ulimit_n = Some(n))
        },
    },
    Keyword {
        name: "hard-stop-after",
        scope: Scope::GLOBAL,
        help: "hard-stop-after TIME: longest a soft stop (SIGUSR1) may wait for active connections",
        parse: |g, a| time_arg(a).map(|t| g.hard_stop_after = Some(t)),
    },
    env_keyword!("setenv", "setenv NAME VALUE: set a variable of the environment the configuration reads (${NAME}, env(), show env)"),
    env_keyword!("presetenv", "presetenv NAME VALUE: as setenv, unless NAME is set already"),
    env_keyword!("unsetenv", "unsetenv NAME...: remove variables from the environment the configuration reads"),
    env_keyword!("resetenv", "resetenv [NAME...]: keep only these variables of the environment the configuration reads"),
    Keyword {
        name: "mworker-max-reloads",
        scope: Scope::GLOBAL,
        help: "mworker-max-reloads N: a worker still running after more than N reloads gets SIGTERM from the master",
        parse: |g, a| {
            let n = number_arg(a, "a number of reloads", 0)?;
            g.mworker_max_reloads = Some(u32::try_from(n).unwrap_or(u32::MAX));
            Ok(())
        },
    },
    Keyword {
        name: "master-worker",
        scope: Scope::GLOBAL,
        help: "master-worker: run as a master process with a worker, as -W",
        parse: |g, a| match a {
            [] => {
                g.master_worker = true;
                Ok(())
            }
            [w, ..] if w == "no-exit-on-failure" => Err(sluice_config::KwError::Invalid(
                "master-worker no-exit-on-failure: not supported yet".into(),
            )),
            [w, ..] => Err(sluice_config::KwError::bad(1, w, "expects nothing")),
        },
    },
    Keyword {
        name: "quiet",
        scope: Scope::GLOBAL,
        help: "quiet: no message at start but warnings and errors (as -q)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.quiet = true),
    },
    Keyword {
        name: "zero-warning",
        scope: Scope::GLOBAL,
        help: "zero-warning: a configuration with a warning does not start, and -c fails on it (as -dW)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.zero_warning = true),
    },
    Keyword {
        name: "set-dumpable",
        scope: Scope::GLOBAL,
        help: "set-dumpable: core dumps allowed (core size limit raised, dumpable after the user change)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.dumpable = true),
    },
    Keyword {
        name: "daemon",
        scope: Scope::GLOBAL,
        help: "daemon: detach from the terminal once listening (as -D)",
        parse: |g, a| sluice_config::no_args(a).map(|_| g.daemon = true),
    },
    Keyword {
        name: "user",
        scope: Scope::GLOBAL,
        help: "user NAME: run as this user once the sockets are open",
        parse: |g, a| {
            g.user = Some(crate::conf::one_arg(a, "a user name")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "uid",
        scope: Scope::GLOBAL,
        help: "uid N: run as this user id once the sockets are open",
        parse: |g, a| {
            let v = crate::conf::one_arg(a, "a user id")?;
            v.parse::<u32>()
                .map_err(|_| sluice_config::KwError::bad(1, v, "expects a number"))?;
            g.user = Some(format!("#{v}"));
            Ok(())
        },
    },
    Keyword {
        name: "group",
        scope: Scope::GLOBAL,
        help: "group NAME: run with this group once the sockets are open",
        parse: |g, a| {
            g.group = Some(crate::conf::one_arg(a, "a group name")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "gid",
        scope: Scope::GLOBAL,
        help: "gid N: run with this group id once the sockets are open",
        parse: |g, a| {
            let v = crate::conf::one_arg(a, "a group id")?;
            v.parse::<u32>()
                .map_err(|_| sluice_config::KwError::bad(1, v, "expects a number"))?;
            g.group = Some(format!("#{v}"));
            Ok(())
        },
    },
    Keyword {
        name: "chroot",
        scope: Scope::GLOBAL,
        help: "chroot DIR: confine the process to DIR once the sockets are open",
        parse: |g, a| {
            g.chroot = Some(crate::conf::one_arg(a, "a directory")?.to_string());
            Ok(())
        },
    },
    Keyword {
        name: "pidfile",
        scope: Scope::GLOBAL,
        help: "pidfile FILE: write the process id there once listening (-p FILE wins)",
        parse: |g, a| {
            g.pidfile = Some(crate::conf::one_arg(a, "a file name")?.to_string());
            Ok(())
        },
    },
];

/// What the command line adds to a configuration for one start.
#[derive(Debug, Default)]
pub struct RunOptions {
    /// `-p FILE`: where to write the process id (overrides `pidfile`).
    pub pidfile: Option<String>,
    /// `-sf PID...`: processes asked to finish softly (SIGUSR1) once this one listens.
    pub finish: Vec<i32>,
    /// `-st PID...`: processes stopped (SIGTERM) once this one listens.
    pub terminate: Vec<i32>,
    /// `-x PATH`: take the listening sockets of the process behind this stats socket.
    pub take_from: Option<String>,
    /// `-D`: detach from the terminal once listening (as `daemon`).
    pub daemon: bool,
    /// `-N MAXCONN`: the process's connection limit (overrides `maxconn` in `global`).
    pub maxconn: Option<usize>,
    /// Listening sockets inherited from a master process (`-W`), used as `-x` would.
    pub inherited: Vec<handover::Handed>,
    /// Written to (one byte) once listening, for a master process waiting on it.
    pub ready: Option<std::os::fd::OwnedFd>,
    /// Once `ready` is written, leave the terminal (the master is a daemon).
    pub detach_when_ready: bool,
    /// `-q`: no message at start but warnings and errors (as `quiet`).
    pub quiet: bool,
    /// `-dW`: a configuration with warnings does not start (as `zero-warning`).
    pub zero_warning: bool,
    /// The binary's allocator's way to give a thread's free memory back, if it keeps
    /// freed pages per thread ([`crate::runtime::MemoryRelease::per_thread`]).
    pub release_thread_memory: Option<fn()>,
}

/// Why the proxy could not start.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Listen(#[from] ListenError),
    #[error("cannot start worker {tid}: {source}")]
    Worker { tid: usize, source: std::io::Error },
    #[error("cannot set up signal handling: {0}")]
    Signals(std::io::Error),
    #[error("{0}")]
    Fds(String),
    #[error("cannot open a log target: {0}")]
    Log(std::io::Error),
    #[error("stats socket {path}: {source}")]
    Cli {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot take the listeners over from {path}: {source}")]
    Handover {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot become a daemon: {0}")]
    Daemon(std::io::Error),
    #[error(transparent)]
    Identity(#[from] identity::IdentityError),
    #[error("pidfile {path}: {source}")]
    Pidfile {
        path: String,
        source: std::io::Error,
    },
}

/// Opens the listeners, starts the workers and blocks until the process must exit.
/// Runs until the process is stopped: `Ok(Some(SIGNAL))` when SIGTERM or SIGINT stopped it
/// at once (the caller ends by that signal, as HAProxy's process does), `Ok(None)` after a
/// soft stop.
pub fn run(config: Config, mut opts: RunOptions) -> Result<Option<i32>, RunError> {
    let nbthread = config.global.nbthread();
    // Without a global maxconn, HAProxy derives one from the descriptor limit; with one, the
    // limit is raised to match or the start is refused.
    let wanted = opts.maxconn.or(config.global.maxconn);
    let limits = (config.global.ulimit_n, config.global.fd_hard_limit);
    let global_max = match crate::fds::ensure(wanted, limits.0, limits.1) {
        Ok(n) => n,
        // `no strict-limits`: said, and the start goes on with what was asked (or what the
        // limit in force allows).
        Err(e) if config.global.loose_limits => {
            say!("sluice: [WARNING] {e} (no strict-limits: starting anyway)");
            wanted.unwrap_or_else(crate::fds::maxconn_for_limit)
        }
        Err(e) => return Err(RunError::Fds(e)),
    };
    let mut handed = match &opts.take_from {
        Some(path) => handover::receive(path).map_err(|source| RunError::Handover {
            path: path.clone(),
            source,
        })?,
        None => Vec::new(),
    };
    handed.extend(std::mem::take(&mut opts.inherited));
    let mut listeners = Vec::new();
    for (fi, fe) in config.frontends.iter().enumerate() {
        for (li, bind) in fe.listen.binds.iter().enumerate() {
            let backlog = listener::backlog_of(fe, bind, global_max);
            let addr = bind.spec.to_string();
            // Each shard is its own socket in the address's SO_REUSEPORT group; consecutive
            // entries go to consecutive workers (see `acceptor` below).
            // Without SO_REUSEPORT an address has one socket.
            let shards = match config.global.noreuseport {
                true => 1,
                false => bind.shard_count(config.global.default_shards, nbthread),
            };
            for _ in 0..shards {
                // The same frontend's socket for the same address, from the process replaced.
                let (socket, owned) = match handed
                    .iter()
                    .position(|h| h.frontend == fe.name && h.addr == addr)
                {
                    Some(i) => (socket2::Socket::from(handed.swap_remove(i).fd), false),
                    None => (
                        listener::open_bind(bind, backlog, !config.global.noreuseport)?,
                        matches!(bind.spec, listener::BindSpec::Addr(_)),
                    ),
                };
                // Replacing processes that keep their own sockets: new connections come here
                // from now on, so that theirs can empty before closing (to the last shard
                // opened until they close; the kernel spreads over the shards from then).
                if owned && !(opts.finish.is_empty() && opts.terminate.is_empty()) {
                    if let Err(e) = listener::steer_here(&socket) {
                        say!(
                            "sluice: {}:{}: cannot steer new connections on {addr} away from the old process ({e}); connections queued there when it stops may be reset",
                            bind.at.file, bind.at.line
                        );
                    }
                }
                listeners.push((fi, li, bind.clone(), socket, owned));
            }
        }
    }
    // Sockets the new configuration has no use for close here.
    drop(handed);
    // Detached before any thread starts; the parent waits until this one listens.
    let daemon = (opts.daemon || config.global.daemon)
        .then(identity::daemonize)
        .transpose()
        .map_err(RunError::Daemon)?;
    let signals = Signals::install().map_err(RunError::Signals)?;
    let loggers = config
        .frontends
        .iter()
        .map(|fe| crate::log::open_all(&fe.log, &config.global))
        .collect::<Result<_, _>>()
        .map_err(RunError::Log)?;
    let backend_loggers = config
        .backends
        .iter()
        .map(|be| crate::log::open_all(&be.log, &config.global))
        .collect::<Result<_, _>>()
        .map_err(RunError::Log)?;
    // Checks start spread over time and round-robin over the workers; from there they move
    // to less loaded workers by themselves.
    let mut checks: Vec<Vec<CheckTask>> = vec![Vec::new(); nbthread];
    for (k, task) in crate::check::initial_tasks(&config, std::time::Instant::now())
        .into_iter()
        .enumerate()
    {
        checks[k % nbthread].push(task);
    }
    let admission = Admission::new(
        global_max,
        config.frontends.iter().map(|f| {
            let binds = f.listen.binds.iter().map(|b| b.maxconn).collect();
            (f.listen.maxconn.unwrap_or(global_max), binds)
        }),
        crate::runtime::RateLimits {
            frontends: config
                .frontends
                .iter()
                .map(|f| f.listen.rate_limit)
                .collect(),
            ..config.global.rate_limits.clone()
        },
    );
    let (inboxes, receivers) = worker::inboxes(nbthread);
    let resolvers = config
        .resolvers
        .iter()
        .map(|r| r.nameservers.iter().map(|_| Default::default()).collect())
        .collect();
    let process = Arc::new(Process {
        compress_limit: config.global.compression.max_rate.into(),
        state: Runtime::new(&config),
        config: Arc::new(config),
        threads: (0..nbthread)
            .map(|id| ThreadCtx {
                id,
                ..ThreadCtx::default()
            })
            .collect(),
        admission,
        loggers,
        backend_loggers,
        stopping: AtomicBool::new(false),
        accept_loops: Default::default(),
        paused: AtomicBool::new(false),
        resumed: tokio::sync::Notify::new(),
        handover: Default::default(),
        vars: Default::default(),
        started: std::time::Instant::now(),
        figures: Default::default(),
        memory: MemoryRelease {
            per_thread: opts.release_thread_memory,
            ..MemoryRelease::default()
        },
        server_edits: Default::default(),
        added_checks: Default::default(),
        mail: Default::default(),
        resolvers,
        renamed: Default::default(),
        show_peers: Default::default(),
        peer_sessions: Default::default(),
        peers_listeners: Default::default(),
        quic_routes: Default::default(),
        pipes: Default::default(),
    });
    // Tables shared with a `peers` section start from the previous process's entries.
    crate::peers::start(&process);
    set_proc_vars(&process);
    // Drains, weights and health saved before a reload (`server-state-file`).
    for w in state_file::load(&process) {
        say!("sluice: [WARNING] {w}");
    }
    for k in &process.config.global.tls.inert {
        say!("sluice: '{k}' is accepted but has no effect with rustls");
    }
    // One worker polls and accepts on each listening socket (no thundering herd: a new
    // connection wakes one event loop), spreading the sockets over the workers the bind
    // allows; it hands each connection to the least loaded worker.
    let acceptor = |index: usize, bind: &crate::worker::listener::Bind| {
        let allowed: Vec<usize> = (0..nbthread).filter(|&t| bind.on_thread(t)).collect();
        allowed.get(index % allowed.len().max(1)).copied()
    };
    for ((tid, inbox), checks) in receivers.into_iter().enumerate().zip(checks) {
        let mine = listeners
            .iter()
            .enumerate()
            .filter(|(index, (_, _, bind, _, _))| acceptor(*index, bind) == Some(tid))
            .map(|(_, (fe, li, bind, l, owned))| {
                let listening = Listening {
                    frontend: *fe,
                    listener: *li,
                    threads: bind.threads,
                    owned: *owned,
                    defer_accept: bind.defer_accept,
                    socket: l.try_clone()?,
                };
                listening.prepare()?;
                Ok(listening)
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|source| RunError::Worker { tid, source })?;
        worker::spawn(tid, process.clone(), inboxes.clone(), mine, checks, inbox)
            .map_err(|source| RunError::Worker { tid, source })?;
    }
    for conf in process.config.global.stats_sockets.clone() {
        let socket = cli::bind(&conf).map_err(|source| RunError::Cli {
            path: conf.addr.to_string(),
            source,
        })?;
        let process = process.clone();
        std::thread::Builder::new()
            .name("sluice-cli".into())
            .spawn(move || cli::serve(process, conf, socket))
            .map_err(|source| RunError::Worker {
                tid: usize::MAX,
                source,
            })?;
    }
    let addrs: Vec<String> = listeners
        .iter()
        .map(
            |(_, _, bind, l, _)| match l.local_addr().ok().and_then(|a| a.as_socket()) {
                Some(a) => a.to_string(),
                None => bind.spec.to_string(),
            },
        )
        .collect();

    if let Some(path) = opts
        .pidfile
        .as_ref()
        .or(process.config.global.pidfile.as_ref())
    {
        std::fs::write(path, format!("{}\n", std::process::id())).map_err(|source| {
            RunError::Pidfile {
                path: path.clone(),
                source,
            }
        })?;
    }
    // Confined and unprivileged before saying it listens.
    let g = &process.config.global;
    identity::assume(g.user.as_deref(), g.group.as_deref(), g.chroot.as_deref())
        .map_err(RunError::Identity)?;
    if g.dumpable {
        allow_core_dumps();
    }
    crate::filters::announce(&process.config);
    if !(g.quiet || opts.quiet) {
        say!(
            "sluice: {nbthread} worker(s) listening on {}",
            addrs.join(", ")
        );
    }
    // Listening now: the processes this one replaces may go.
    for (pids, sig) in [
        (&opts.finish, libc::SIGUSR1),
        (&opts.terminate, libc::SIGTERM),
    ] {
        for &pid in pids {
            // SAFETY: kill only sends a signal; a pid that is gone makes it fail (ESRCH).
            if unsafe { libc::kill(pid, sig) } != 0 {
                say!(
                    "sluice: cannot signal process {pid}: {}",
                    std::io::Error::last_os_error()
                );
            }
        }
    }
    if let Some(pipe) = daemon {
        identity::ready(pipe);
    }
    if let Some(pipe) = opts.ready.take() {
        if opts.detach_when_ready {
            identity::ready(pipe);
        } else {
            let _ = std::io::Write::write_all(&mut std::fs::File::from(pipe), b"1");
        }
    }
    // Copies a replacing process may take (`expose-fd listeners`); the workers hold their
    // own, which a soft stop closes.
    *process
        .handover
        .sockets
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = listeners
        .into_iter()
        // A QUIC listener is not handed over: its connections keep their own sockets, the
        // new process binds its own (`transport::quic_socket`).
        .filter(|(_, _, bind, _, _)| !matches!(bind.spec, listener::BindSpec::Quic(_)))
        .map(|(fi, _, bind, l, _)| {
            (
                process.config.frontends[fi].name.clone(),
                bind.spec.to_string(),
                l,
            )
        })
        .collect();
    wait_for_stop_signal(&process, &inboxes, signals)
}

/// SIGHUP: one line per server, in HAProxy's words.
fn dump_server_states(process: &Process) {
    for (be, st) in process
        .config
        .backends
        .iter()
        .zip(process.state.backends.iter())
    {
        say!(
            "sluice: SIGHUP received, dumping servers states for proxy {}.",
            be.name
        );
        for (_, srv, s) in st.live(be) {
            let status = s.status(srv.check.as_ref().map(|c| (c.rise, c.fall)));
            say!(
                "sluice: SIGHUP: Server {}/{} is {}. Conn: {} act, {} pend, {} tot.",
                be.name,
                srv.name,
                status,
                s.in_flight.load(Ordering::Relaxed),
                s.queue.waiting.load(Ordering::Relaxed),
                s.counters.sum(|c| &c.traffic.sessions)
            );
        }
    }
}

/// `set-var proc.NAME ...` of `global`: evaluated once, in order, before any connection.
fn set_proc_vars(process: &Process) {
    let vars = crate::sample::StreamVars::default();
    let cx = crate::sample::Ctx::detached(process, &vars);
    for (name, value) in &process.config.global.proc_vars {
        let sample = match value {
            crate::conf::ProcValue::Expr(e) => e.eval(&cx).map(|s| s.into_owned()),
            crate::conf::ProcValue::Fmt(f) => Some(crate::sample::Sample::Str(
                std::borrow::Cow::Owned(f.render(&cx)),
            )),
        };
        if let Some(s) = sample {
            vars.set(process, name, s);
        }
    }
}

/// The signals the control thread handles, installed before the process says it listens
/// (a signal arriving earlier would otherwise take its default action: SIGHUP and SIGUSR2
/// would kill the process).
struct Signals {
    rt: tokio::runtime::Runtime,
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    ttou: tokio::signal::unix::Signal,
    ttin: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{signal, SignalKind};
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let _in = rt.enter();
        let raw = |n| signal(SignalKind::from_raw(n));
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
            hup: signal(SignalKind::hangup())?,
            ttou: raw(libc::SIGTTOU)?,
            ttin: raw(libc::SIGTTIN)?,
            rt: {
                drop(_in);
                rt
            },
        })
    }
}

fn wait_for_stop_signal(
    process: &Process,
    inboxes: &Inboxes,
    signals: Signals,
) -> Result<Option<i32>, RunError> {
    let Signals {
        rt,
        mut term,
        mut int,
        mut usr1,
        mut usr2,
        mut hup,
        mut ttou,
        mut ttin,
    } = signals;
    rt.block_on(async {
        loop {
            tokio::select! {
                _ = term.recv() => return Ok(Some(libc::SIGTERM)),
                _ = int.recv() => return Ok(Some(libc::SIGINT)),
                _ = usr1.recv() => break,
                _ = usr2.recv() => say!("sluice: SIGUSR2 received outside master-worker mode: ignored"),
                _ = hup.recv() => dump_server_states(process),
                _ = ttou.recv() => {
                    say!("sluice: SIGTTOU received: listeners paused");
                    process.paused.store(true, Ordering::Relaxed);
                }
                _ = ttin.recv() => {
                    say!("sluice: SIGTTIN received: listeners resumed");
                    process.paused.store(false, Ordering::Relaxed);
                    process.resumed.notify_waiters();
                }
            }
        }
        say!("sluice: soft stop: no longer accepting, finishing active connections");
        process.stopping.store(true, Ordering::Relaxed);
        // Whoever took them over keeps the sockets open; otherwise they close with the
        // workers' copies.
        process
            .handover
            .sockets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        inboxes.stop_all(process);
        let deadline = process
            .config
            .global
            .hard_stop_after
            .map(|d| tokio::time::Instant::now() + d);
        let mut tick = tokio::time::interval(Duration::from_millis(50));
        loop {
            tokio::select! {
                _ = term.recv() => return Ok(Some(libc::SIGTERM)),
                _ = int.recv() => return Ok(Some(libc::SIGINT)),
                _ = hup.recv() => dump_server_states(process),
                _ = usr2.recv() => {}
                _ = tick.tick() => {}
            }
            let active = process.active_total();
            if active == 0 && process.settled() {
                return Ok(None);
            }
            if deadline.is_some_and(|d| tokio::time::Instant::now() >= d) {
                say!(
                    "sluice: hard-stop-after reached with {active} connection(s) still active"
                );
                return Ok(None);
            }
        }
    })
}

/// `set-dumpable`: the core size limit raised as far as allowed (unlimited, else the hard
/// limit) and the process made dumpable again after a change of user, as HAProxy does.
fn allow_core_dumps() {
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: setrlimit/getrlimit read or write only the struct given; prctl with
    // PR_SET_DUMPABLE takes plain integers.
    unsafe {
        if libc::setrlimit(libc::RLIMIT_CORE, &unlimited) != 0 {
            let mut now = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            if libc::getrlimit(libc::RLIMIT_CORE, &mut now) == 0 {
                now.rlim_cur = now.rlim_max;
                libc::setrlimit(libc::RLIMIT_CORE, &now);
            }
        }
        libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0);
    }
}
