//! Email alerts as configured: `mailers` sections (`mailer NAME ADDR:PORT`, `timeout mail`)
//! and a proxy's `email-alert from|to|level|mailers|myhostname`, lowered into one
//! [`EmailAlert`] per backend that sends them (`crate::mail`).

use std::net::SocketAddr;
use std::time::Duration;

/// A `mailers` section.
#[derive(Debug, Clone)]
pub struct Mailers {
    pub name: String,
    /// (name, address) of each `mailer` line.
    pub mailers: Vec<(String, SocketAddr)>,
    /// `timeout mail`: how long one alert's exchange with a mailer may take (HAProxy's
    /// default, 10 s).
    pub timeout: Duration,
}

/// A proxy's `email-alert` lines, as written.
#[derive(Debug, Clone, Default)]
pub struct EmailAlertConf {
    pub from: Option<String>,
    pub to: Option<String>,
    /// The highest syslog severity that is mailed (a number, 0 `emerg` to 7 `debug`).
    pub level: Option<u8>,
    pub mailers: Option<String>,
    pub myhostname: Option<String>,
}

impl EmailAlertConf {
    /// Some `email-alert` line was given.
    pub fn is_set(&self) -> bool {
        self.from.is_some()
            || self.to.is_some()
            || self.level.is_some()
            || self.mailers.is_some()
            || self.myhostname.is_some()
    }
}

/// What a backend mails, and to which mailers.
#[derive(Debug, Clone)]
pub struct EmailAlert {
    pub from: String,
    pub to: String,
    /// The highest severity mailed (`alert`, 1, by default).
    pub level: u8,
    /// Said in `HELO` (the system's host name by default).
    pub myhostname: String,
    pub mailers: Vec<SocketAddr>,
    pub timeout: Duration,
}
