//! `ltime` and `utime`: a date (seconds since the epoch) as text, through the C library's
//! `strftime`, as HAProxy formats it.

/// Formats `secs` with `format` in local time (`local`) or UTC; `None` when the format
/// gives nothing or cannot be passed to C.
pub(crate) fn format(secs: i64, format: &str, local: bool) -> Option<String> {
    let c_format = std::ffi::CString::new(format).ok()?;
    let t: libc::time_t = secs as libc::time_t;
    // SAFETY: an all-zero `tm` is a valid value for the C library to overwrite.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call; the _r variants touch no shared state.
    let ok = unsafe {
        if local {
            !libc::localtime_r(&t, &mut tm).is_null()
        } else {
            !libc::gmtime_r(&t, &mut tm).is_null()
        }
    };
    if !ok {
        return None;
    }
    let mut buf = vec![0u8; 256];
    // SAFETY: the buffer is writable for its length; strftime writes at most that much and
    // returns how much it wrote (0 when it did not fit).
    let n = unsafe { libc::strftime(buf.as_mut_ptr().cast(), buf.len(), c_format.as_ptr(), &tm) };
    if n == 0 {
        return None;
    }
    buf.truncate(n);
    String::from_utf8(buf).ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn utc() {
        assert_eq!(
            super::format(0, "%Y-%m-%d %H:%M:%S", false).as_deref(),
            Some("1970-01-01 00:00:00")
        );
        assert_eq!(
            super::format(86400 + 3661, "%d/%b/%Y:%T", false).as_deref(),
            Some("02/Jan/1970:01:01:01")
        );
    }
}
