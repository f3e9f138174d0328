//! Idle-pool settings of servers and of the process.

use std::time::Duration;

/// A server's pool settings (`pool-max-conn`, `pool-low-conn`, `pool-purge-delay`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolConf {
    /// `None`: unlimited (-1).
    pub max_conn: Option<usize>,
    pub low_conn: usize,
    pub purge_delay: Duration,
}

impl Default for PoolConf {
    fn default() -> Self {
        PoolConf {
            max_conn: None,
            low_conn: 0,
            purge_delay: Duration::from_secs(5),
        }
    }
}

/// Process-wide pool settings (`tune.pool-low-fd-ratio`, `tune.pool-high-fd-ratio`,
/// `tune.idle-pool.shared`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolGlobal {
    pub low_ratio: u8,
    pub high_ratio: u8,
    pub shared: bool,
}

impl Default for PoolGlobal {
    fn default() -> Self {
        PoolGlobal {
            low_ratio: 20,
            high_ratio: 25,
            shared: true,
        }
    }
}
