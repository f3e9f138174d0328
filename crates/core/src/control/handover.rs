//! Handing the listening sockets of a running process to the process replacing it, so that
//! no connection waiting in their queues is lost: the old process offers them on a stats
//! socket declared with `expose-fd listeners`; the new one, started with `-x PATH`, asks for
//! them there (`_getsocks`) and listens on the very same sockets instead of binding new ones.
//!
//! One message carries everything: its bytes say, one line per socket, the frontend and the
//! address (`NAME\tADDR\n`), and its control data the descriptors, in the same order
//! (SCM_RIGHTS; at most [`MAX`] sockets).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The command a new process sends.
pub const REQUEST: &str = "_getsocks";

/// The most descriptors one message may carry (the kernel's SCM_MAX_FD).
pub const MAX: usize = 253;

/// A listening socket as handed over: its frontend, its address, its descriptor.
#[derive(Debug)]
pub struct Handed {
    pub frontend: String,
    pub addr: String,
    pub fd: OwnedFd,
}

/// Sends `(frontend, addr, fd)` for every socket in one message.
pub fn send(to: &UnixStream, sockets: &[(String, String, RawFd)]) -> io::Result<()> {
    if sockets.len() > MAX {
        return Err(io::Error::other(format!(
            "{} listening sockets: at most {MAX} can be handed over",
            sockets.len()
        )));
    }
    let mut text = String::new();
    for (fe, addr, _) in sockets {
        text.push_str(&format!("{fe}\t{addr}\n"));
    }
    // An empty list still sends one byte, so the receiver sees a message.
    if text.is_empty() {
        text.push('\n');
    }
    let fds: Vec<RawFd> = sockets.iter().map(|s| s.2).collect();
    let fd_bytes = std::mem::size_of_val(fds.as_slice());
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    let mut control = vec![0u8; space.max(1)];
    let mut iov = libc::iovec {
        iov_base: text.as_ptr() as *mut libc::c_void,
        iov_len: text.len(),
    };
    // SAFETY: msghdr is plain data; every pointer set below outlives the sendmsg call.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
        msg.msg_controllen = space as _;
        // SAFETY: the control buffer holds exactly one header with room for the descriptors.
        unsafe {
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr() as *const u8,
                libc::CMSG_DATA(cmsg),
                fd_bytes,
            );
        }
    }
    // SAFETY: msg points to live buffers (see above).
    let sent = unsafe { libc::sendmsg(to.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Asks the process behind the stats socket at `path` for its listening sockets.
pub fn receive(path: &str) -> io::Result<Vec<Handed>> {
    use std::io::Write;
    let mut s = UnixStream::connect(path)?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))?;
    s.write_all(format!("{REQUEST}\n").as_bytes())?;
    let mut buf = vec![0u8; 64 * 1024];
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE((MAX * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u8; space];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: plain data, filled below with pointers to live buffers.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = space as _;
    // SAFETY: msg points to live buffers; received descriptors are owned just below.
    let n = unsafe { libc::recvmsg(s.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut fds = Vec::new();
    // SAFETY: walking the control headers the kernel wrote, within controllen.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(cmsg) as *const RawFd;
                let len = (*cmsg).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                for i in 0..len / std::mem::size_of::<RawFd>() {
                    fds.push(OwnedFd::from_raw_fd(std::ptr::read_unaligned(data.add(i))));
                }
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    let text = String::from_utf8_lossy(&buf[..n as usize]).into_owned();
    if text.starts_with("Permission denied") || text.starts_with("Unknown command") {
        return Err(io::Error::other(format!(
            "{path} does not hand over its listeners (its stats socket needs 'expose-fd listeners'): {}",
            text.trim()
        )));
    }
    let names: Vec<(String, String)> = text
        .lines()
        .filter(|l| !l.is_empty())
        .filter_map(|l| l.split_once('\t'))
        .map(|(f, a)| (f.to_string(), a.to_string()))
        .collect();
    if names.len() != fds.len() {
        return Err(io::Error::other(format!(
            "{path} announced {} sockets and sent {}",
            names.len(),
            fds.len()
        )));
    }
    Ok(names
        .into_iter()
        .zip(fds)
        .map(|((frontend, addr), fd)| Handed { frontend, addr, fd })
        .collect())
}
