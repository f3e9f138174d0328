//! Email alerts, as HAProxy 2.6 sends them: a backend with `email-alert from`, `to` and
//! `mailers` mails each state change of its servers at or above `email-alert level`
//! (`alert` by default) to every mailer of the `mailers` section, over SMTP (`HELO`, `MAIL
//! FROM`, `RCPT TO`, `DATA`, `QUIT`), the message being the log line's text.
//!
//! Invariants: a state change is never held up by its mail: it is handed to the first
//! worker (`runtime::Process::mail`), which sends each to every mailer in a task of its own
//! bounded by `timeout mail`; a mailer that fails or answers otherwise than SMTP expects
//! loses that mail (HAProxy does not retry either), and is counted.

use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use sluice_config::{ConfigError, Keyword, KwError, Scope, Section};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::conf::mail::{EmailAlert, EmailAlertConf, Mailers};
use crate::conf::{one_arg, ProxyConf};
use crate::log::Severity;
use crate::runtime::{Mail, Process, Worker};

/// HAProxy's `timeout mail` when none is given.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

pub const KEYWORDS: &[Keyword<ProxyConf>] = &[
    Keyword {
        name: "email-alert from",
        scope: Scope::PROXY,
        help: "email-alert from ADDRESS: the sender of the backend's email alerts",
        parse: |c, a| text(a, "an email address").map(|v| c.email.from = Some(v)),
    },
    Keyword {
        name: "email-alert to",
        scope: Scope::PROXY,
        help: "email-alert to ADDRESS: the recipient of the backend's email alerts",
        parse: |c, a| text(a, "an email address").map(|v| c.email.to = Some(v)),
    },
    Keyword {
        name: "email-alert mailers",
        scope: Scope::PROXY,
        help: "email-alert mailers NAME: the mailers section the alerts go through",
        parse: |c, a| text(a, "a mailers section's name").map(|v| c.email.mailers = Some(v)),
    },
    Keyword {
        name: "email-alert myhostname",
        scope: Scope::PROXY,
        help: "email-alert myhostname NAME: the name said in HELO (default: the host name)",
        parse: |c, a| text(a, "a host name").map(|v| c.email.myhostname = Some(v)),
    },
    Keyword {
        name: "email-alert level",
        scope: Scope::PROXY,
        help: "email-alert level LEVEL: the least severe state change mailed (emerg ... debug; default alert)",
        parse: |c, a| {
            let v = one_arg(a, "a syslog level")?;
            let level = crate::log::severity_of(v).ok_or_else(|| {
                KwError::bad(1, v, "expects emerg, alert, crit, err, warning, notice, info or debug")
            })?;
            c.email.level = Some(level);
            Ok(())
        },
    },
];

fn text(args: &[String], expects: &'static str) -> Result<String, KwError> {
    one_arg(args, expects).map(str::to_owned)
}

/// A `mailers NAME` section: `mailer NAME ADDR:PORT` lines and `timeout mail TIME`.
pub fn parse_section(section: &Section, errors: &mut Vec<ConfigError>) -> Option<Mailers> {
    let Some(name) = section.name.clone() else {
        errors.push(section.header.error("'mailers' expects a <name> argument"));
        return None;
    };
    let mut mailers = Mailers {
        name,
        mailers: Vec::new(),
        timeout: DEFAULT_TIMEOUT,
    };
    for line in &section.lines {
        let w: Vec<&str> = line.words.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["mailer", name, addr] => match crate::conf::resolve(addr) {
                Ok(a) if mailers.mailers.iter().any(|(n, _)| n == name) => {
                    errors.push(line.error(format!("mailer '{name}' is defined twice (at {a})")))
                }
                Ok(a) => mailers.mailers.push((name.to_string(), a)),
                Err(e) => errors.push(line.error(format!("mailer '{name}': {e}"))),
            },
            ["mailer", ..] => errors.push(line.error("'mailer' expects <name> and <addr:port>")),
            ["timeout", "mail", t] => match sluice_config::units::parse_time(t) {
                Ok(d) => mailers.timeout = d,
                Err(e) => errors.push(line.error(format!("'timeout mail' {e}"))),
            },
            [kw, ..] => errors.push(line.error(format!(
                "unknown keyword '{kw}' in 'mailers' section (expects mailer or timeout mail)"
            ))),
            [] => {}
        }
    }
    Some(mailers)
}

/// What a proxy named `name` mails, from its `email-alert` lines and the `mailers`
/// sections, with HAProxy's checks: without `from`, `to` and `mailers` together the lines
/// are ignored with a warning; a `mailers` name that no section has is an error.
pub fn lower(
    (kind, name): (&str, &str),
    conf: &EmailAlertConf,
    sections: &[Mailers],
    warnings: &mut Vec<String>,
) -> Result<Option<EmailAlert>, String> {
    if !conf.is_set() {
        return Ok(None);
    }
    let (Some(from), Some(to), Some(wanted)) = (&conf.from, &conf.to, &conf.mailers) else {
        warnings.push(format!(
            "'email-alert' will be ignored for {kind} '{name}' (the presence any of 'email-alert from', 'email-alert level' 'email-alert mailers', 'email-alert myhostname', or 'email-alert to' requires each of 'email-alert from', 'email-alert mailers' and 'email-alert to' to be present)."
        ));
        return Ok(None);
    };
    let section = sections
        .iter()
        .find(|m| &m.name == wanted)
        .ok_or_else(|| format!("Proxy '{name}': unable to find mailers '{wanted}'."))?;
    Ok(Some(EmailAlert {
        from: from.clone(),
        to: to.clone(),
        level: conf.level.unwrap_or(Severity::Alert as u8),
        myhostname: conf
            .myhostname
            .clone()
            .unwrap_or_else(crate::conf::hostname),
        mailers: section.mailers.iter().map(|(_, a)| *a).collect(),
        timeout: section.timeout,
    }))
}

/// Mails a state change of one of `backend`'s servers, logged at `severity` as `line`,
/// when the backend's `email-alert` asks for it (handed to the first worker, never sent
/// here).
pub fn alert(p: &Process, backend: usize, severity: Severity, line: &str) {
    let Some(email) = &p.config.backends[backend].email else {
        return;
    };
    if severity as u8 > email.level {
        return;
    }
    let text = line.strip_suffix('.').unwrap_or(line).to_string();
    p.mail.push(Mail { backend, text });
}

/// The first worker's duty: sends each alert handed to it to every mailer of its backend.
pub async fn deliver(w: Rc<Worker>) {
    let process = w.process.clone();
    loop {
        process.mail.wake.notified().await;
        for mail in process.mail.take() {
            let Some(email) = process.config.backends[mail.backend].email.clone() else {
                continue;
            };
            let date = date_now();
            for &mailer in &email.mailers {
                let (w, email, mail, date) = (w.clone(), email.clone(), mail.clone(), date.clone());
                tokio::task::spawn_local(async move {
                    let exchange = send(mailer, &email, &mail.text, &date);
                    let sent = matches!(
                        tokio::time::timeout(email.timeout, exchange).await,
                        Ok(Ok(()))
                    );
                    let counters = &w.ctx().counters;
                    if sent {
                        counters.mails_sent.bump();
                    } else {
                        counters.mails_failed.bump();
                    }
                });
            }
        }
    }
}

/// The `Date:` of an alert, as HAProxy writes it (local time).
fn date_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    crate::log::strftime(secs, "%a, %d %b %Y %T %z (%Z)", true).unwrap_or_default()
}

/// One alert's SMTP exchange with one mailer, each step checked as HAProxy's checks it
/// (the reply's code).
async fn send(
    mailer: SocketAddr,
    email: &EmailAlert,
    text: &str,
    date: &str,
) -> std::io::Result<()> {
    let stream = tokio::net::TcpStream::connect(mailer).await?;
    let (read, mut write) = stream.into_split();
    let mut replies = BufReader::new(read);
    expect(&mut replies, "220").await?;
    let message = format!(
        "From: {from}\r\nTo: {to}\r\nDate: {date}\r\nSubject: [HAProxy Alert] {text}\r\n\r\n{text}\r\n\r\n.\r\n",
        from = email.from,
        to = email.to,
    );
    let steps = [
        (format!("HELO {}\r\n", email.myhostname), "250"),
        (format!("MAIL FROM:<{}>\r\n", email.from), "250"),
        (format!("RCPT TO:<{}>\r\n", email.to), "250"),
        ("DATA\r\n".to_string(), "354"),
        (message, "250"),
        ("QUIT\r\n".to_string(), "221"),
    ];
    for (say, code) in steps {
        write.write_all(say.as_bytes()).await?;
        expect(&mut replies, code).await?;
    }
    Ok(())
}

/// Reads one SMTP reply (its continuation lines `CODE-...` included) and checks its code.
async fn expect(
    replies: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    code: &str,
) -> std::io::Result<()> {
    let mut line = String::new();
    loop {
        line.clear();
        // A reply line longer than this is not SMTP: the exchange ends.
        let n = (&mut *replies).take(1024).read_line(&mut line).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        if !line.ends_with('\n') {
            return Err(std::io::Error::other("an SMTP reply line too long"));
        }
        let last = line.as_bytes().get(3) != Some(&b'-');
        if !last {
            continue;
        }
        return if line.starts_with(code) {
            Ok(())
        } else {
            let said = line.trim_end().to_string();
            Err(std::io::Error::other(format!(
                "expected {code}, got '{said}'"
            )))
        };
    }
}
