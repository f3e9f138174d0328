//! HTTP basic authentication against `userlist` sections, as HAProxy's: the section's
//! keywords (`user NAME [password HASH|insecure-password TEXT] [groups G,...]`, `group NAME
//! [users U,...]`), and checking the credentials of a request's `Authorization` header
//! (`http_auth(L)`, `http_auth_group(L)`, `http-request auth`).
//!
//! Hashes are checked by the system's crypt(3) (libxcrypt), as HAProxy checks them, so
//! every scheme the system's `mkpasswd` makes is understood (SHA-512, SHA-256, MD5, bcrypt,
//! yescrypt); nothing here hashes by itself.
//!
//! Invariant: a hash crypt(3) cannot read is refused when the configuration is loaded, never
//! found out on a request.

use std::ffi::{c_char, CStr, CString};

use base64::Engine as _;
use sluice_config::{ConfigError, Section};

pub use crate::conf::auth::{Secret, User, Userlist};

/// Reads a `userlist NAME` section.
pub fn parse_section(section: &Section, errors: &mut Vec<ConfigError>) -> Userlist {
    let mut list = Userlist {
        name: section.name.clone().unwrap_or_default(),
        ..Userlist::default()
    };
    // Group memberships as written (`group G users ...` and `user U groups ...`), resolved
    // once every line is read.
    let mut members: Vec<(String, String, &sluice_config::Line)> = Vec::new();
    for line in &section.lines {
        let w = &line.words;
        match (w[0].as_str(), &w[1..]) {
            ("group", [name, rest @ ..]) => {
                if list.groups.contains(name) {
                    errors.push(line.error(format!("group '{name}' is declared twice")));
                }
                list.groups.push(name.clone());
                match rest {
                    [] => {}
                    [kw, users] if kw == "users" => members.extend(
                        users
                            .split(',')
                            .map(|u| (u.to_string(), name.clone(), line)),
                    ),
                    _ => errors.push(line.error("'group' expects 'group NAME [users U1,U2,...]'")),
                }
            }
            ("user", [name, rest @ ..]) => {
                if list.users.iter().any(|u| &u.name == name) {
                    errors.push(line.error(format!("user '{name}' is declared twice")));
                }
                let mut user = User {
                    name: name.clone(),
                    secret: None,
                    groups: Vec::new(),
                };
                let mut i = 0;
                while i < rest.len() {
                    match (rest[i].as_str(), rest.get(i + 1)) {
                        ("password", Some(hash)) => match checkable(hash) {
                            Ok(()) => user.secret = Some(Secret::Crypt(hash.clone())),
                            Err(e) => errors.push(line.error(format!("user '{name}': {e}"))),
                        },
                        ("insecure-password", Some(p)) => {
                            user.secret = Some(Secret::Clear(p.clone()))
                        }
                        ("groups", Some(g)) => members
                            .extend(g.split(',').map(|g| (name.clone(), g.to_string(), line))),
                        (other, _) => {
                            errors.push(line.error(format!(
                                "user '{name}': unexpected '{other}' (expects password HASH, insecure-password TEXT or groups G1,G2)"
                            )));
                            break;
                        }
                    }
                    i += 2;
                }
                list.users.push(user);
            }
            (kw @ ("user" | "group"), []) => {
                errors.push(line.error(format!("'{kw}' expects a name")))
            }
            (other, _) => errors.push(line.error(format!(
                "unknown keyword '{other}' in 'userlist' section (expects user or group)"
            ))),
        }
    }
    for (user, group, line) in members {
        let Some(g) = list.groups.iter().position(|x| *x == group) else {
            errors.push(line.error(format!(
                "group '{group}' is not declared in userlist '{}'",
                list.name
            )));
            continue;
        };
        match list.users.iter_mut().find(|u| u.name == user) {
            Some(u) if !u.groups.contains(&g) => u.groups.push(g),
            Some(_) => {}
            None => errors.push(line.error(format!(
                "user '{user}' is not declared in userlist '{}'",
                list.name
            ))),
        }
    }
    list
}

/// The user of `list` whose credentials the `Authorization` header carries, if they are
/// right.
pub fn authenticate<'a>(list: &'a Userlist, authorization: &[u8]) -> Option<&'a User> {
    let (name, pass) = basic_credentials(authorization)?;
    let user = list.users.iter().find(|u| u.name == name)?;
    let ok = match user.secret.as_ref()? {
        Secret::Clear(p) => same(p.as_bytes(), pass.as_bytes()),
        Secret::Crypt(hash) => {
            crypt(&pass, hash).is_some_and(|h| same(h.as_bytes(), hash.as_bytes()))
        }
    };
    ok.then_some(user)
}

/// The user name and password of a `Basic` authorization.
pub fn basic_credentials(header: &[u8]) -> Option<(String, String)> {
    let h = std::str::from_utf8(header).ok()?.trim();
    let (scheme, b64) = h.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .ok()?;
    let text = String::from_utf8(decoded).ok()?;
    let (user, pass) = text.split_once(':')?;
    Some((user.to_string(), pass.to_string()))
}

/// Compares without stopping at the first difference (how long a wrong password takes
/// says nothing of where it differs).
pub fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

/// Whether crypt(3) can check passwords against `hash`.
fn checkable(hash: &str) -> Result<(), String> {
    // A real hash comes back as long as it is; a word crypt(3) takes as a DES salt does not.
    match crypt("", hash) {
        Some(h) if h.len() == hash.len() => Ok(()),
        _ => Err(format!(
            "password '{}' is not a hash the system's crypt(3) can check",
            sluice_config::shorten(hash)
        )),
    }
}

/// The size of libxcrypt's `struct crypt_data` (crypt.h: 32768 bytes).
const CRYPT_DATA_SIZE: usize = 32768;

#[link(name = "crypt")]
extern "C" {
    fn crypt_r(phrase: *const c_char, setting: *const c_char, data: *mut u8) -> *mut c_char;
}

/// crypt(3) of `phrase` with the scheme and salt of `setting`; `None` when the system
/// cannot use that setting.
fn crypt(phrase: &str, setting: &str) -> Option<String> {
    let (phrase, setting) = (CString::new(phrase).ok()?, CString::new(setting).ok()?);
    // crypt_r wants its work area zeroed before first use.
    let mut data = vec![0u8; CRYPT_DATA_SIZE];
    // SAFETY: both strings are NUL-terminated and live across the call; `data` is a zeroed
    // area of the size libxcrypt's `struct crypt_data` has, which crypt_r may write
    // anywhere in and whose start (`output`) receives the result.
    let out = unsafe { crypt_r(phrase.as_ptr(), setting.as_ptr(), data.as_mut_ptr()) };
    if out.is_null() {
        return None;
    }
    // SAFETY: a non-null result points at a NUL-terminated string inside `data`, alive
    // until `data` is dropped at the end of this function, after the copy.
    let text = unsafe { CStr::from_ptr(out) }.to_str().ok()?.to_string();
    // Failures are told by a result starting with '*' (libxcrypt's "*0" / "*1").
    (!text.starts_with('*')).then_some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crypt_checks_hashes_of_each_scheme() {
        // Made with `openssl passwd -6|-5|-1 -salt saltsalt secret`.
        for hash in [
            "$6$saltsalt$TVLlQcbpFVof5W3Yz4DTP6gRstiNuHwwTt6GLc1E5n0U0aDehy0S5knV8wiOQSpT0Y77vwPZN.Pq.H91p5hVO1",
            "$5$saltsalt$0IyaXrmV7.sGNS6tirgqHLqX/G.FBvgkYA.lpPdS5sA",
            "$1$saltsalt$9xy1btjgzLYfb7hivXtC//",
        ] {
            assert_eq!(crypt("secret", hash).as_deref(), Some(hash), "{hash}");
            assert_ne!(crypt("Secret", hash).as_deref(), Some(hash));
        }
        assert!(checkable("not a hash").is_err());
        assert!(checkable("$9$nonsense").is_err());
    }

    #[test]
    fn basic_credentials_are_read() {
        assert_eq!(
            basic_credentials(b"Basic dXNlcjpwYTpzcw=="),
            Some(("user".into(), "pa:ss".into()))
        );
        assert_eq!(
            basic_credentials(b"basic  dXNlcjpwYTpzcw==").map(|c| c.0),
            Some("user".into())
        );
        assert_eq!(basic_credentials(b"Bearer abc"), None);
        assert_eq!(basic_credentials(b"Basic !!!"), None);
    }
}
