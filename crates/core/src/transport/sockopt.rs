//! `setsockopt` for the socket options no crate sets (socket filters, `TCP_REPAIR`,
//! `TCP_DEFER_ACCEPT`, ...): the one unsafe call every such option goes through.

use std::io;
use std::os::fd::AsRawFd;

/// Sets option `name` at `level` on `socket` to `value`, a plain `T` the kernel copies.
/// Any pointer inside `value` (a filter program's) must point at memory that stays valid
/// until the call returns.
pub fn set_option<T>(
    socket: &impl AsRawFd,
    level: libc::c_int,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: `value` points at a valid `T` of the given size for the duration of the call,
    // and the kernel only reads it (and what its pointers point at, valid by the contract
    // above).
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
