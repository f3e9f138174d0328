//! The system's users and groups, by name or by number (`#N`), as the configuration names
//! them (`user`, `group` in `global`; `user`, `group` on a unix socket `bind`).

use std::ffi::CString;

/// A user's id and primary group (`None` for `#N`, which names no account).
pub fn user_id(name: &str) -> Option<(u32, Option<u32>)> {
    if let Some(n) = name.strip_prefix('#') {
        return Some((n.parse().ok()?, None));
    }
    let c = CString::new(name).ok()?;
    // SAFETY: getpwnam reads the user database; the result is copied out at once.
    let pw = unsafe { libc::getpwnam(c.as_ptr()) };
    if pw.is_null() {
        return None;
    }
    // SAFETY: non-null, points to libc's static record.
    Some(unsafe { ((*pw).pw_uid, Some((*pw).pw_gid)) })
}

/// A group's id.
pub fn group_id(name: &str) -> Option<u32> {
    if let Some(n) = name.strip_prefix('#') {
        return n.parse().ok();
    }
    let c = CString::new(name).ok()?;
    // SAFETY: getgrnam reads the group database; the result is copied out at once.
    let gr = unsafe { libc::getgrnam(c.as_ptr()) };
    if gr.is_null() {
        return None;
    }
    // SAFETY: non-null, points to libc's static record.
    Some(unsafe { (*gr).gr_gid })
}
