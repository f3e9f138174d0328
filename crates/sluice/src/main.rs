//! The `sluice` command: HAProxy's command line (`-f`, `-c`, `-d`, `-db`, `-v`, `-h`) over
//! the proxy core.

mod master;

#[cfg(feature = "mimalloc")]
mod allocator {
    //! mimalloc, with `--features mimalloc`: HTTP/2 streams allocate and free kilobytes
    //! each, in numbers, where glibc's bins cost 12 % of the proxy's CPU; mimalloc serves
    //! them 14 % cheaper, but a process starts with twice the resident memory and a
    //! gigabyte of address space reserved (bench/RESULTS.md, session 17).

    #[global_allocator]
    static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

    extern "C" {
        fn mi_collect(force: bool);
    }

    /// Gives the calling thread's free pages back: mimalloc keeps them per thread, where
    /// `malloc_trim` does not reach, and purges them only when that thread allocates again.
    /// Forced: the next chance to purge may be far off (it is called once connections are
    /// gone).
    pub fn release_thread_memory() {
        // SAFETY: mi_collect is mimalloc's own, linked in by the `mimalloc` crate; it only
        // frees what the calling thread's heap holds unused.
        unsafe { mi_collect(true) }
    }
}

use std::os::fd::{FromRawFd, OwnedFd};
use std::process::ExitCode;

const USAGE: &str = "\
Usage: sluice -f FILE [-f FILE ...] [-c] [-p FILE] [-x PATH] [-sf|-st PID...] [-d|-db] [-v] [-h]
  -f FILE   read configuration from FILE (repeatable; files are read in order; a
            directory: every *.cfg in it, in lexical order)
  -c        check the configuration and exit (0 when valid, 1 otherwise)
  -cc EXPR  evaluate a condition as .if does (exit 0 when true, 1 when false, 2 on error)
  -p FILE   write the process id to FILE once listening
  -D        detach from the terminal once listening (as 'daemon'; with -W the master)
  -W        master-worker mode: a master keeps the listeners; SIGUSR2 reloads the worker
  -Ws       the same, telling systemd (NOTIFY_SOCKET) READY=1 and RELOADING=1
  -S ADDR[,mode,OCTAL]  with -W: the master CLI (show proc, reload, @N COMMAND) on a
            unix socket PATH, a TCP ADDR:PORT (ipv4@, ipv6@) or an inherited fd@N
  -N MAXCONN the process's connection limit (as global maxconn)
  -C DIR    change to DIR before reading the configuration
  -m MB     limit the process's memory to MB megabytes
  -L NAME   the local peer name (accepted; no peers yet)
  -q        no message at start but warnings and errors (as 'quiet')
  -dW       refuse a configuration with warnings (as 'zero-warning'; -c fails on it)
  -V, -d*   accepted for HAProxy compatibility
  -x PATH   take the listening sockets of the process whose stats socket is PATH
            (declared with 'expose-fd listeners'), so that no queued connection is lost
  -sf PID.. once listening, ask these processes to finish softly (SIGUSR1)
  -st PID.. once listening, stop these processes (SIGTERM)
  -d, -db   stay in the foreground (sluice does unless -D; accepted for HAProxy compatibility)
  -v        print the version and exit
  -h        print this help and exit";

enum Action {
    /// `-W` / `-Ws`: a master process.
    Master(master::Options),
    /// `-cc EXPR`: evaluate a condition (exit 0 true, 1 false, 2 error).
    Condition(String),
    Run(Vec<String>, sluice_core::RunOptions),
    /// `-c`, and whether `-dW` was given.
    Check(Vec<String>, bool),
    /// `-v`, or `-vv` with the build's features.
    Version(bool),
    Help,
}

fn parse_args(args: &[String]) -> Result<Action, String> {
    let mut files = Vec::new();
    let mut check = false;
    let mut zero_warning = false;
    let mut opts = sluice_core::RunOptions {
        #[cfg(feature = "mimalloc")]
        release_thread_memory: Some(allocator::release_thread_memory),
        ..Default::default()
    };
    let mut master: Option<bool> = None;
    let mut master_cli = Vec::new();
    // What a worker of a master gets: everything but the master's own options.
    let mut worker_args: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let start = i;
        let mut keep = true;
        match args[i].as_str() {
            "-W" => {
                master = Some(false);
                keep = false;
            }
            "-Ws" => {
                master = Some(true);
                keep = false;
            }
            "-S" => {
                i += 1;
                let spec = args
                    .get(i)
                    .ok_or("-S expects an address: PATH, ADDR:PORT or fd@N")?;
                master_cli.push(master::cli_conf(spec).map_err(|e| format!("-S {spec}: {e}"))?);
                keep = false;
            }
            "-f" => {
                i += 1;
                let path = args.get(i).ok_or("-f expects a file name")?;
                files.extend(config_files(path)?);
            }
            "-p" => {
                i += 1;
                opts.pidfile = Some(args.get(i).ok_or("-p expects a file name")?.clone());
                keep = false;
            }
            "-D" => {
                opts.daemon = true;
                keep = false;
            }
            "-x" => {
                i += 1;
                opts.take_from = Some(args.get(i).ok_or("-x expects a stats socket path")?.clone());
            }
            flag @ ("-sf" | "-st") => {
                // Process ids up to the next option, as HAProxy reads them.
                let mut pids = Vec::new();
                while let Some(pid) = args.get(i + 1).filter(|a| !a.starts_with('-')) {
                    pids.push(
                        pid.parse::<i32>()
                            .ok()
                            .filter(|&p| p > 0)
                            .ok_or_else(|| format!("{flag} expects process ids, not '{pid}'"))?,
                    );
                    i += 1;
                }
                if flag == "-sf" {
                    opts.finish.extend(pids);
                } else {
                    opts.terminate.extend(pids);
                }
            }
            "-c" => check = true,
            "-cc" => {
                let expr = args.get(i + 1).ok_or("-cc expects a condition")?;
                return Ok(Action::Condition(expr.clone()));
            }
            "-N" => {
                i += 1;
                let v = args.get(i).ok_or("-N expects a connection count")?;
                opts.maxconn = Some(
                    v.parse::<usize>()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| format!("-N expects a positive number, not '{v}'"))?,
                );
            }
            "-C" => {
                i += 1;
                let dir = args.get(i).ok_or("-C expects a directory")?;
                std::env::set_current_dir(dir).map_err(|e| format!("-C {dir}: {e}"))?;
            }
            "-m" => {
                i += 1;
                let v = args.get(i).ok_or("-m expects a size in megabytes")?;
                let mb: u64 = v
                    .parse()
                    .map_err(|_| format!("-m expects a size in megabytes, not '{v}'"))?;
                limit_memory(mb)?;
            }
            "-L" => {
                // The local peer name: accepted (sluice has no peers yet).
                i += 1;
                args.get(i).ok_or("-L expects a name")?;
            }
            "-q" => opts.quiet = true,
            "-V" => {}
            "-dW" => {
                zero_warning = true;
                opts.zero_warning = true;
            }
            d if d.starts_with("-d") => {}
            "-v" | "--version" => return Ok(Action::Version(false)),
            "-vv" => return Ok(Action::Version(true)),
            "-h" | "--help" => return Ok(Action::Help),
            other => return Err(format!("unknown option '{other}'")),
        }
        if keep {
            worker_args.extend(args[start..=i.min(args.len() - 1)].iter().cloned());
        }
        i += 1;
    }
    if files.is_empty() {
        return Err("no configuration file given (-f FILE)".into());
    }
    Ok(if check {
        Action::Check(files, zero_warning)
    } else if let Some(systemd) = master {
        Action::Master(master::Options {
            files,
            worker_args,
            pidfile: opts.pidfile,
            systemd,
            cli: master_cli,
            daemon: opts.daemon,
        })
    } else {
        Action::Run(files, opts)
    })
}

/// A worker of a master (`-W`) takes the listening sockets and the ready pipe it was given.
fn inherit_from_master(opts: &mut sluice_core::RunOptions) {
    if let Ok(list) = std::env::var(master::LISTENERS_ENV) {
        for line in list.lines() {
            let mut parts = line.split('\t');
            let (Some(fe), Some(addr), Some(fd)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if let Ok(fd) = fd.parse::<i32>() {
                opts.inherited.push(sluice_core::control::handover::Handed {
                    frontend: fe.to_string(),
                    addr: addr.to_string(),
                    // SAFETY: the master made this descriptor ours (inherited across exec).
                    fd: unsafe { OwnedFd::from_raw_fd(fd) },
                });
            }
        }
    }
    if let Some(fd) = std::env::var(master::READY_ENV)
        .ok()
        .and_then(|v| v.parse::<i32>().ok())
    {
        // SAFETY: as above: the master's pipe, inherited once.
        opts.ready = Some(unsafe { OwnedFd::from_raw_fd(fd) });
        // A daemon master's workers leave the terminal once they listen, as it does.
        opts.detach_when_ready = std::env::var_os(master::DETACH_ENV).is_some();
    }
}

/// `-m MB`: the most memory the process may map, as HAProxy 2.6 limits it (`RLIMIT_AS`).
/// The `mimalloc` build reserves a gigabyte of address space up front, so it needs more.
fn limit_memory(mb: u64) -> Result<(), String> {
    let bytes = mb.saturating_mul(1 << 20);
    let lim = libc::rlimit {
        rlim_cur: bytes,
        rlim_max: bytes,
    };
    // SAFETY: setrlimit reads the struct given.
    if unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) } != 0 {
        return Err(format!("-m {mb}: {}", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The files `-f PATH` names: the file itself, or for a directory every `*.cfg` in it (hidden
/// files aside) in lexical order, as HAProxy reads them.
fn config_files(path: &str) -> Result<Vec<String>, String> {
    let is_dir = std::fs::metadata(path).is_ok_and(|m| m.is_dir());
    if !is_dir {
        return Ok(vec![path.to_string()]);
    }
    let mut files: Vec<String> = std::fs::read_dir(path)
        .map_err(|e| format!("{path}: cannot read the directory: {e}"))?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| !t.is_dir()))
        .filter_map(|e| e.file_name().into_string().ok())
        .filter(|n| n.ends_with(".cfg") && !n.starts_with('.'))
        .map(|n| format!("{}/{n}", path.trim_end_matches('/')))
        .collect();
    files.sort();
    Ok(files)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let action = match parse_args(&args) {
        Ok(a) => a,
        Err(e) => {
            sluice_core::say!("sluice: {e}\n{USAGE}");
            return ExitCode::from(1);
        }
    };
    let (files, check, zero_warning, mut opts) = match action {
        Action::Master(options) => return master::run(options),
        Action::Condition(expr) => {
            // Read as a configuration line would be: quotes and `${VAR}` are resolved first.
            let env = |k: &str| std::env::var(k).ok();
            let text = match sluice_config::lex_line(&expr, &env) {
                Ok(words) => words.join(" "),
                Err(e) => {
                    sluice_core::say!("sluice: -cc: {e}");
                    return ExitCode::from(2);
                }
            };
            return match sluice_config::cond::eval(&text, &env) {
                Ok(true) => ExitCode::SUCCESS,
                Ok(false) => ExitCode::from(1),
                Err(e) => {
                    sluice_core::say!("sluice: -cc: {e}");
                    ExitCode::from(2)
                }
            };
        }
        Action::Version(verbose) => {
            println!("sluice version {}", env!("CARGO_PKG_VERSION"));
            if verbose {
                println!(
                    "Follows HAProxy {} (the version .if/-cc compare with)",
                    sluice_config::cond::HAPROXY_VERSION
                );
                let features: Vec<String> = sluice_config::cond::FEATURES
                    .iter()
                    .map(|f| format!("+{f}"))
                    .collect();
                println!("Feature list : {}", features.join(" "));
                println!("TLS: rustls with {}", sluice_core::tls::PROVIDER);
                let allocator = if cfg!(feature = "mimalloc") {
                    "mimalloc"
                } else {
                    "system"
                };
                println!("Memory allocator: {allocator}");
            }
            return ExitCode::SUCCESS;
        }
        Action::Help => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Action::Check(f, dw) => (f, true, dw, Default::default()),
        Action::Run(f, o) => {
            let dw = o.zero_warning;
            (f, false, dw, o)
        }
    };
    let config = match sluice_core::load(&files) {
        Ok(c) => c,
        Err(errors) => {
            for e in &errors {
                sluice_core::say!("sluice: {e}");
            }
            sluice_core::say!(
                "sluice: fatal: {} error(s) in the configuration",
                errors.len()
            );
            return ExitCode::from(1);
        }
    };
    for w in &config.warnings {
        sluice_core::say!("sluice: [WARNING] config : {w}");
    }
    if (zero_warning || config.global.zero_warning) && !config.warnings.is_empty() {
        sluice_core::say!(
            "sluice: [ALERT] config : Some warnings were found and 'zero-warning' is set. Aborting."
        );
        return ExitCode::from(1);
    }
    // Nothing to listen on (a process with only a CLI socket still starts, as HAProxy's
    // does): `-c` says so with HAProxy's words and status, a start refuses.
    let no_listener = !config.has_listener();
    if check {
        if !config.warnings.is_empty() {
            println!("Warnings were found.");
        }
        if no_listener {
            println!(
                "Configuration file has no error but will not start (no listener) => exit(2)."
            );
            return ExitCode::from(2);
        }
        // As HAProxy's `-c`: a check of the files only, exiting before anything is
        // bound, so that it passes on a build host where the service addresses are not
        // local (a bind that fails is reported by the real start, with its line).
        println!("Configuration file is valid");
        return ExitCode::SUCCESS;
    }
    if no_listener {
        sluice_core::say!("sluice: [ALERT] {}", sluice_core::conf::NO_LISTENER);
        return ExitCode::from(1);
    }
    // `master-worker` in `global` asks for what `-W` does: this process becomes the master
    // (its worker, started by it, is told so by the master's environment).
    if config.global.master_worker && std::env::var_os(master::READY_ENV).is_none() {
        use std::os::unix::process::CommandExt as _;
        let err = std::process::Command::new(std::env::current_exe().unwrap_or_default())
            .arg("-W")
            .args(&args)
            .exec();
        sluice_core::say!("sluice: fatal: master-worker: cannot become the master: {err}");
        return ExitCode::from(1);
    }
    inherit_from_master(&mut opts);
    let mut config = config;
    if let Ok(path) = std::env::var(master::CLI_ENV) {
        // The master CLI reaches this worker here (`@N COMMAND`).
        config
            .global
            .stats_sockets
            .push(sluice_core::conf::cli::SocketConf {
                addr: sluice_core::conf::cli::CliAddr::Unix(path),
                mode: Some(0o600),
                level: sluice_core::conf::cli::Level::Admin,
                expose_fd: false,
            });
    }
    match sluice_core::run(config, opts) {
        Ok(None) => ExitCode::SUCCESS,
        // Stopped by SIGTERM or SIGINT: the process ends by that signal, as HAProxy's
        // does (its status says so to whoever started it).
        Ok(Some(sig)) => {
            // SAFETY: restoring a signal's default action and raising it on this process
            // only ends the process; nothing else runs after.
            unsafe {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            sluice_core::say!("sluice: fatal: {e}");
            ExitCode::from(1)
        }
    }
}
