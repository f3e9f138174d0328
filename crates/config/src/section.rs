//! Groups lexed lines into sections (`global`, `defaults`, `frontend`, `backend`, `listen`).

use std::cell::RefCell;
use std::sync::Arc;

use crate::env::{Env, ENV_KEYWORDS};
use crate::error::shorten;
use crate::{lexer::lex_bytes, ConfigError};

/// One non-empty configuration line, lexed, with where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    pub file: Arc<str>,
    pub line: usize,
    pub words: Vec<String>,
}

impl Line {
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        ConfigError::at(&self.file, self.line, message)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SectionKind {
    Global,
    Defaults,
    Frontend,
    Backend,
    Listen,
    /// `http-errors NAME`: a named set of error pages (`errorfiles NAME`).
    HttpErrors,
    /// `peers NAME`: the peers stick tables are shared with (and tables of their own).
    Peers,
    /// `userlist NAME`: users and groups for HTTP basic authentication.
    Userlist,
    /// `cache NAME`: a small object cache (`http-request cache-use NAME`).
    Cache,
    /// `mailers NAME`: the SMTP servers email alerts go to (`email-alert mailers NAME`).
    Mailers,
    /// `resolvers NAME`: nameservers servers' names are asked of at run time.
    Resolvers,
}

impl SectionKind {
    pub fn name(self) -> &'static str {
        match self {
            SectionKind::Global => "global",
            SectionKind::Defaults => "defaults",
            SectionKind::Frontend => "frontend",
            SectionKind::Backend => "backend",
            SectionKind::Listen => "listen",
            SectionKind::HttpErrors => "http-errors",
            SectionKind::Peers => "peers",
            SectionKind::Userlist => "userlist",
            SectionKind::Cache => "cache",
            SectionKind::Mailers => "mailers",
            SectionKind::Resolvers => "resolvers",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        Some(match w {
            "global" => SectionKind::Global,
            "defaults" => SectionKind::Defaults,
            "frontend" => SectionKind::Frontend,
            "backend" => SectionKind::Backend,
            "listen" => SectionKind::Listen,
            "http-errors" => SectionKind::HttpErrors,
            "peers" => SectionKind::Peers,
            "userlist" => SectionKind::Userlist,
            "cache" => SectionKind::Cache,
            "mailers" => SectionKind::Mailers,
            "resolvers" => SectionKind::Resolvers,
            _ => return None,
        })
    }
}

/// Section keywords HAProxy knows that sluice does not implement: refused by name rather than
/// misread as a keyword of the previous section.
const FOREIGN_SECTIONS: &[&str] = &[
    "program",
    "ring",
    "log-forward",
    "crt-store",
    "traces",
    "fcgi-app",
];

/// A section header and the lines that follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    pub kind: SectionKind,
    /// The section's name (`frontend web` → `web`); `defaults` may be unnamed.
    pub name: Option<String>,
    /// Words after the name (`listen web 127.0.0.1:80` keeps the address here).
    pub args: Vec<String>,
    pub header: Line,
    pub lines: Vec<Line>,
}

/// Whether a raw line is a block directive (`.if`, `.endif`, ...), read even inside a block
/// not taken.
fn is_directive(raw: &[u8]) -> bool {
    raw.iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|&b| b == b'.')
}

/// The `.if`/`.elif`/`.else`/`.endif` blocks open at a point of a file.
#[derive(Debug, Default)]
struct Blocks {
    /// Per open block: whether lines are taken now, and whether a branch was taken yet.
    stack: Vec<(bool, bool)>,
    /// The line each open block started on.
    open_at: Vec<usize>,
    line: usize,
}

impl Blocks {
    fn taking(&self) -> bool {
        self.stack.iter().all(|(taking, _)| *taking)
    }

    fn outer_taking(&self) -> bool {
        let n = self.stack.len().saturating_sub(1);
        self.stack[..n].iter().all(|(taking, _)| *taking)
    }

    /// Applies one directive line.
    fn directive(
        &mut self,
        words: &[String],
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<(), String> {
        let cond = || {
            let text = words[1..].join(" ");
            if text.trim().is_empty() {
                return Err(format!("'{}' needs a condition", words[0]));
            }
            crate::cond::eval(&text, env)
        };
        match words[0].as_str() {
            ".if" => {
                // A block inside one not taken is not evaluated.
                let v = if self.taking() { cond()? } else { false };
                self.stack.push((v, v));
                self.open_at.push(self.line);
            }
            ".elif" => {
                let Some(&(_, taken)) = self.stack.last() else {
                    return Err("'.elif' without '.if'".into());
                };
                let v = !taken && self.outer_taking() && cond()?;
                *self.stack.last_mut().expect("checked") = (v, taken || v);
            }
            ".else" => {
                let Some(&(_, taken)) = self.stack.last() else {
                    return Err("'.else' without '.if'".into());
                };
                *self.stack.last_mut().expect("checked") = (!taken, true);
            }
            ".endif" => {
                if self.stack.pop().is_none() {
                    return Err("'.endif' without '.if'".into());
                }
                self.open_at.pop();
            }
            kind @ (".notice" | ".warning" | ".diag") => {
                if self.taking() {
                    eprintln!("sluice: {}: {}", &kind[1..], words[1..].join(" "));
                }
            }
            ".alert" => {
                if self.taking() {
                    return Err(format!("alert: {}", words[1..].join(" ")));
                }
            }
            other => return Err(format!("unknown directive '{other}'")),
        }
        Ok(())
    }
}

/// Reads and parses every file, in order. All errors found are returned, not only the first.
pub fn parse_files(paths: &[String]) -> Result<Vec<Section>, Vec<ConfigError>> {
    let mut sections = Vec::new();
    let mut errors = Vec::new();
    // One environment for all the files: a `setenv` in one holds in the next.
    let env = RefCell::new(Env::default());
    let base = |k: &str| std::env::var(k).ok();
    for path in paths {
        match std::fs::read(path) {
            Ok(text) => match parse_in(path, &text, &base, &env) {
                Ok(mut s) => sections.append(&mut s),
                Err(mut e) => errors.append(&mut e),
            },
            Err(e) => errors.push(ConfigError::at(path, 0, format!("cannot read file: {e}"))),
        }
    }
    if errors.is_empty() {
        Ok(sections)
    } else {
        Err(errors)
    }
}

/// Parses one file's text. `env` resolves `${VAR}` references.
pub fn parse_str(
    file: &str,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Section>, Vec<ConfigError>> {
    parse_bytes(file, text.as_bytes(), env)
}

/// Parses one file's content as bytes: lines end with LF (a CR before it is a blank), and
/// a line that is not UTF-8 is an error only if the bytes in question are outside a comment.
pub fn parse_bytes(
    file: &str,
    text: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Section>, Vec<ConfigError>> {
    parse_in(file, text, env, &RefCell::new(Env::default()))
}

/// [`parse_bytes`] over the starting environment `base` and the changes `global` lines
/// made to it so far (`setenv` and its kin, applied as they are read: see [`Env`]).
fn parse_in(
    file: &str,
    text: &[u8],
    base: &dyn Fn(&str) -> Option<String>,
    changes: &RefCell<Env>,
) -> Result<Vec<Section>, Vec<ConfigError>> {
    let env = &|k: &str| changes.borrow().lookup(k, base);
    let file: Arc<str> = Arc::from(file);
    let mut sections: Vec<Section> = Vec::new();
    let mut errors = Vec::new();
    let mut blocks = Blocks::default();
    for (idx, raw) in text.split(|&b| b == b'\n').enumerate() {
        let lineno = idx + 1;
        let words = match lex_bytes(raw, env) {
            Ok(w) if w.is_empty() => continue,
            Ok(w) => w,
            // Lines of a block not taken are not read at all.
            Err(_) if !blocks.taking() && !is_directive(raw) => continue,
            Err(e) => {
                errors.push(ConfigError::at(&file, lineno, e.to_string()));
                continue;
            }
        };
        if words[0].starts_with('.') {
            blocks.line = lineno;
            if let Err(e) = blocks.directive(&words, env) {
                errors.push(ConfigError::at(&file, lineno, e));
            }
            continue;
        }
        if !blocks.taking() {
            continue;
        }
        let line = Line {
            file: file.clone(),
            line: lineno,
            words,
        };
        let first = line.words[0].as_str();
        if let Some(kind) = SectionKind::from_word(first) {
            let name = line.words.get(1).cloned();
            if name.is_none() && !matches!(kind, SectionKind::Global | SectionKind::Defaults) {
                errors.push(line.error(format!("'{first}' section needs a name")));
            }
            if kind == SectionKind::Global && line.words.len() > 1 {
                errors.push(line.error("'global' section takes no name"));
            }
            let args = line.words.iter().skip(2).cloned().collect();
            sections.push(Section {
                kind,
                name,
                args,
                header: line,
                lines: Vec::new(),
            });
        } else if FOREIGN_SECTIONS.contains(&first) {
            errors.push(line.error(format!("'{first}' section: not supported yet")));
            // Swallow its body: those lines belong to a section we do not parse.
            sections.push(Section {
                kind: SectionKind::Global,
                name: Some(String::from("\0ignored")),
                args: Vec::new(),
                header: line,
                lines: Vec::new(),
            });
        } else if let Some(cur) = sections.last_mut() {
            if cur.name.as_deref() != Some("\0ignored") {
                if cur.kind == SectionKind::Global && ENV_KEYWORDS.contains(&first) {
                    // (A line that is wrong is reported by its keyword, with its line.)
                    let _ = changes.borrow_mut().apply(&line.words, base);
                }
                cur.lines.push(line);
            }
        } else {
            errors.push(line.error(format!(
                "unknown keyword '{}' out of section (expects global, defaults, frontend, backend or listen)",
                shorten(first)
            )));
        }
    }
    if let Some(open) = blocks.open_at.last() {
        errors.push(ConfigError::at(
            &file,
            *open,
            "'.if' without '.endif' before the end of the file",
        ));
    }
    sections.retain(|s| s.name.as_deref() != Some("\0ignored"));
    if errors.is_empty() {
        Ok(sections)
    } else {
        Err(errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditional_blocks() {
        let env = |k: &str| (k == "ON").then(|| "1".to_string());
        let text = ".if defined(ON)\nglobal\n  nbthread 2\n.elif 1\nglobal\n  nbthread 3\n.else\nglobal\n  nbthread 4\n.endif\n\
                    .if !defined(ON)\n  this \"is never lexed\n.elif version_atleast(2.4) && feature(PROMEX)\ndefaults\n  timeout client 1s\n.endif\n";
        let s = parse_str("t.cfg", text, &env).unwrap();
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[0].lines[0].words, vec!["nbthread", "2"]);
        assert_eq!(s[1].kind, SectionKind::Defaults);
        for (bad, says) in [
            (".if 1\nglobal\n", "t.cfg:1: '.if' without '.endif'"),
            (".endif\n", "t.cfg:1: '.endif' without '.if'"),
            (".if nosuch(1)\n.endif\n", "unknown predicate"),
            (".alert stop here\n", "t.cfg:1: alert: stop here"),
            (
                ".if 0\n.alert not read\n.endif\n.frob\n",
                "t.cfg:4: unknown directive '.frob'",
            ),
        ] {
            let e = parse_str("t.cfg", bad, &env).unwrap_err();
            let all: Vec<String> = e.iter().map(|e| e.to_string()).collect();
            assert!(all.iter().any(|m| m.contains(says)), "{bad}: {all:?}");
        }
    }

    #[test]
    fn groups_lines_into_sections() {
        let text = "global\n  nbthread 2\n\ndefaults\n timeout client 5s\nfrontend fe\n bind :80\nlisten l1 :81\n";
        let s = parse_str("t.cfg", text, &|_| None).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].kind, SectionKind::Global);
        assert_eq!(s[0].lines[0].words, vec!["nbthread", "2"]);
        assert_eq!(s[0].lines[0].line, 2);
        assert_eq!(s[1].name, None);
        assert_eq!(s[2].name.as_deref(), Some("fe"));
        assert_eq!(s[3].args, vec![":81"]);
    }

    #[test]
    fn errors_name_file_and_line() {
        let e = parse_str(
            "x.cfg",
            "bind :80\nbackend\nfrontend a\n bind \"oops\n",
            &|_| None,
        )
        .unwrap_err();
        let msgs: Vec<String> = e.iter().map(|e| e.to_string()).collect();
        assert!(msgs[0].starts_with("x.cfg:1: unknown keyword 'bind' out of section"));
        assert_eq!(msgs[1], "x.cfg:2: 'backend' section needs a name");
        assert_eq!(msgs[2], "x.cfg:4: unterminated double quote");
    }

    #[test]
    fn non_utf8_bytes_in_comments_are_accepted_and_elsewhere_located() {
        let text =
            b"# R\xe9glages\nglobal # \xe9t\xe9\r\n    nbthread 2\nfrontend f\xe9\n    bind :80\n";
        let e = parse_bytes("l1.cfg", text, &|_| None).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].to_string(),
            "l1.cfg:4: word 2 is not valid UTF-8 (byte 0xE9); only comments may use another encoding"
        );
        let text = b"# R\xe9glages\nglobal # \xe9t\xe9\r\n    nbthread 2\n";
        let s = parse_bytes("l1.cfg", text, &|_| None).unwrap();
        assert_eq!(s[0].lines[0].words, vec!["nbthread", "2"]);
        assert_eq!(s[0].lines[0].line, 3);
    }

    #[test]
    fn parse_files_reads_bytes() {
        let dir = std::env::temp_dir().join(format!("sluice-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("latin1.cfg");
        std::fs::write(&path, b"global\n    # caf\xe9\n    nbthread 2\n").unwrap();
        let got = parse_files(&[path.to_string_lossy().into_owned()]);
        std::fs::remove_dir_all(&dir).unwrap();
        let s = got.unwrap();
        assert_eq!(s[0].lines[0].words, vec!["nbthread", "2"]);
    }

    #[test]
    fn foreign_sections_are_refused() {
        let e = parse_str("x.cfg", "ring buf\n size 32764\n", &|_| None).unwrap_err();
        assert_eq!(e.len(), 1);
        assert_eq!(
            e[0].to_string(),
            "x.cfg:1: 'ring' section: not supported yet"
        );
    }
}
