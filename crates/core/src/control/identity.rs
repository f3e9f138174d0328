//! Becoming the process an operator asked for, as HAProxy does: detached from the terminal
//! (`daemon`, `-D`), then, once every socket and file is open, confined (`chroot`) and
//! running as an unprivileged user and group (`user`/`uid`, `group`/`gid`).

use std::ffi::CString;
use std::io;
use std::os::fd::{FromRawFd, OwnedFd};

/// Forks: the parent waits until the child says it listens (or dies) and exits with 0 (or
/// 1); the child, in a session of its own, gets the pipe end to say so through [`ready`].
pub fn daemonize() -> io::Result<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: pipe writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here.
    let (read, write) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread runs yet (this is called before any is started), so the
    // child may carry on as a normal process.
    match unsafe { libc::fork() } {
        -1 => Err(io::Error::last_os_error()),
        0 => {
            drop(read);
            // SAFETY: setsid only changes the calling process's session.
            unsafe { libc::setsid() };
            Ok(write)
        }
        _child => {
            drop(write);
            let mut byte = [0u8; 1];
            let mut f = std::fs::File::from(read);
            let got = io::Read::read(&mut f, &mut byte).unwrap_or(0);
            if got == 1 {
                std::process::exit(0);
            }
            say!("sluice: the daemon exited before listening");
            std::process::exit(1);
        }
    }
}

/// Tells the waiting parent that the daemon listens, then leaves the terminal: standard
/// input, output and error go to /dev/null.
pub fn ready(pipe: OwnedFd) {
    let mut f = std::fs::File::from(pipe);
    let _ = io::Write::write_all(&mut f, b"1");
    drop(f);
    if let Ok(null) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
    {
        use std::os::fd::AsRawFd;
        for fd in 0..3 {
            // SAFETY: dup2 onto the standard descriptors, which this process owns.
            unsafe { libc::dup2(null.as_raw_fd(), fd) };
        }
    }
}

/// Why the process could not become what the configuration says.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("unknown user '{0}'")]
    User(String),
    #[error("unknown group '{0}'")]
    Group(String),
    #[error("cannot {what}: {source}")]
    Call { what: String, source: io::Error },
}

fn call(what: &str, rc: libc::c_int) -> Result<(), IdentityError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(IdentityError::Call {
            what: what.into(),
            source: io::Error::last_os_error(),
        })
    }
}

/// Confines the process to `chroot` and switches to `user`/`group` (group first, then the
/// supplementary groups dropped, then the user), names resolved before the chroot.
pub fn assume(
    user: Option<&str>,
    group: Option<&str>,
    chroot: Option<&str>,
) -> Result<(), IdentityError> {
    let user = user
        .map(|u| crate::accounts::user_id(u).ok_or_else(|| IdentityError::User(u.into())))
        .transpose()?;
    let gid = match group {
        Some(g) => {
            Some(crate::accounts::group_id(g).ok_or_else(|| IdentityError::Group(g.into()))?)
        }
        None => user.and_then(|(_, g)| g),
    };
    if let Some(dir) = chroot {
        let c = CString::new(dir).map_err(|_| IdentityError::Call {
            what: format!("chroot to '{dir}'"),
            source: io::ErrorKind::InvalidInput.into(),
        })?;
        // SAFETY: chroot and chdir take a valid C string; they affect the whole process.
        call(&format!("chroot to '{dir}'"), unsafe {
            libc::chroot(c.as_ptr())
        })?;
        call("change to the new root", unsafe {
            libc::chdir(c"/".as_ptr())
        })?;
    }
    if let Some(gid) = gid {
        // SAFETY: plain system calls on the process's credentials (glibc applies them to
        // every thread).
        call(&format!("set group {gid}"), unsafe { libc::setgid(gid) })?;
        if user.is_some() {
            call("drop the supplementary groups", unsafe {
                libc::setgroups(0, std::ptr::null())
            })?;
        }
    }
    if let Some((uid, _)) = user {
        // SAFETY: as above.
        call(&format!("set user {uid}"), unsafe { libc::setuid(uid) })?;
    }
    Ok(())
}
