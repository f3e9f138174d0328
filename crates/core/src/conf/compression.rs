//! Compression settings of proxies and the process-wide limits.

/// A `compression algo` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    Identity,
    Gzip,
    /// zlib-wrapped DEFLATE, announced as `deflate`.
    Deflate,
    /// Bare DEFLATE, also announced as `deflate` (for clients that expect it).
    RawDeflate,
}

impl Algo {
    pub(crate) fn parse(s: &str) -> Option<Algo> {
        Some(match s {
            "identity" => Algo::Identity,
            "gzip" => Algo::Gzip,
            "deflate" => Algo::Deflate,
            "raw-deflate" => Algo::RawDeflate,
            _ => return None,
        })
    }

    /// The content-coding token clients use for it.
    pub fn token(self) -> &'static str {
        match self {
            Algo::Identity => "identity",
            Algo::Gzip => "gzip",
            Algo::Deflate | Algo::RawDeflate => "deflate",
        }
    }
}

/// A proxy's `compression` settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CompConf {
    pub algos: Vec<Algo>,
    /// Lowercase content-type prefixes; empty means every type.
    pub types: Vec<String>,
    pub offload: bool,
    /// `compression minsize-res`: none by default, as in HAProxy 2.6 (a 13-byte body grows
    /// to 33 bytes in gzip).
    pub minsize: u64,
}

impl CompConf {
    pub fn enabled(&self) -> bool {
        self.algos.iter().any(|a| *a != Algo::Identity)
    }
}

/// The process-wide compression limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GlobalComp {
    /// `maxcomprate`, in bytes per second of compressor input (0: no limit).
    pub max_rate: u64,
    /// `maxcompcpuusage`, percent of a worker's time (100: no limit).
    pub max_cpu: u8,
    /// `tune.comp.maxlevel`.
    pub max_level: u8,
}

impl Default for GlobalComp {
    fn default() -> Self {
        GlobalComp {
            max_rate: 0,
            max_cpu: 100,
            max_level: 1,
        }
    }
}
