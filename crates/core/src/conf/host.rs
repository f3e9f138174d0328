//! The machine's own name, as configuration-facing text shows it.

/// This machine's host name (`%H`, `node` in `show info`, the stats page's `show-node`).
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}
