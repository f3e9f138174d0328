//! `cache NAME` sections as configured: HAProxy's small object cache.

/// One `cache` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConf {
    pub name: String,
    /// `total-max-size` (given in megabytes): what the stored objects may take, heads,
    /// bodies and bookkeeping included.
    pub total_max_size: usize,
    /// `max-object-size` (bytes): the largest head and body one object may have (by
    /// default a 256th of the total).
    pub max_object_size: usize,
    /// `max-age` (seconds): the longest an object is served, whatever it says (60).
    pub max_age: u32,
    /// `process-vary on`: responses with `Vary` are stored, keyed by the request fields it
    /// names (only `accept-encoding` and `referer`); off, they are never stored.
    pub process_vary: bool,
    /// `max-secondary-entries`: variants of one object kept at once (10).
    pub max_secondary_entries: usize,
}

/// Which cache a `cache-use`/`cache-store` rule names: resolved to its index when the
/// configuration is loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheRef {
    pub name: String,
    pub index: usize,
}
