//! Splits one configuration line into words, following HAProxy's rules: blanks separate
//! words, `#` starts a comment, backslash escapes a character, single quotes keep their
//! content literally, double quotes allow escapes and `${VAR}` / `${VAR-default}` expansion.

/// Why a line could not be split into words.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LexError {
    #[error("unterminated {0} quote")]
    Unterminated(&'static str),
    #[error("unterminated '${{' variable reference")]
    UnterminatedVar,
    #[error("invalid escape sequence '\\x{0}'")]
    BadHexEscape(String),
    #[error("trailing backslash")]
    TrailingBackslash,
    /// In double quotes, `$` starts a variable name, which starts with a letter or `_`.
    #[error("forbidden first char in environment variable name (write \\$ for a dollar sign)")]
    BadVarName,
    /// Word `word` (1-based) is not UTF-8; `byte` is the first byte that does not fit.
    #[error("word {word} is not valid UTF-8 (byte 0x{byte:02X}); only comments may use another encoding")]
    NotUtf8 { word: usize, byte: u8 },
}

/// Splits `line` into words. `env` resolves environment variables (injected for tests).
pub fn lex_line(line: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, LexError> {
    lex_bytes(line.as_bytes(), env)
}

/// Splits a line given as raw bytes into words. Bytes after an unquoted `#` are never looked
/// at, so a comment may be in any encoding (HAProxy reads bytes too); a word must be UTF-8 once
/// quotes and escapes are resolved, otherwise [`LexError::NotUtf8`] names it.
pub fn lex_bytes(
    line: &[u8],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<String>, LexError> {
    let mut words = Vec::new();
    let mut cur: Vec<u8> = Vec::new();
    let mut in_word = false;
    let mut i = 0;
    while i < line.len() {
        match line[i] {
            b' ' | b'\t' | b'\r' | b'\n' => {
                if in_word {
                    words.push(word_text(&mut cur, words.len() + 1)?);
                    in_word = false;
                }
                i += 1;
            }
            b'#' => break,
            b'\\' => {
                in_word = true;
                i = escape(line, i, &mut cur)?;
            }
            b'\'' => {
                in_word = true;
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(LexError::Unterminated("single")),
                        Some(b'\'') => break,
                        Some(&b) => cur.push(b),
                    }
                    i += 1;
                }
                i += 1;
            }
            b'"' => {
                in_word = true;
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(LexError::Unterminated("double")),
                        Some(b'"') => break,
                        Some(b'\\') => {
                            i = escape(line, i, &mut cur)?;
                            continue;
                        }
                        Some(b'$') if line.get(i + 1) == Some(&b'{') => {
                            i = expand(line, i, &mut cur, env)?;
                            continue;
                        }
                        Some(b'$') if !line.get(i + 1).is_some_and(|&b| starts_name(b)) => {
                            return Err(LexError::BadVarName)
                        }
                        // `$NAME` without braces, as HAProxy also reads it in double quotes.
                        Some(b'$') => {
                            let end = (i + 1..line.len())
                                .find(|&j| !(line[j].is_ascii_alphanumeric() || line[j] == b'_'))
                                .unwrap_or(line.len());
                            let name = String::from_utf8_lossy(&line[i + 1..end]);
                            if let Some(v) = env(&name) {
                                cur.extend_from_slice(v.as_bytes());
                            }
                            i = end;
                            continue;
                        }
                        Some(&b) => cur.push(b),
                    }
                    i += 1;
                }
                i += 1;
            }
            b => {
                in_word = true;
                cur.push(b);
                i += 1;
            }
        }
    }
    if in_word {
        words.push(word_text(&mut cur, words.len() + 1)?);
    }
    Ok(words)
}

/// Takes the bytes of word number `index` (1-based) as a string.
fn word_text(cur: &mut Vec<u8>, index: usize) -> Result<String, LexError> {
    String::from_utf8(std::mem::take(cur)).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        LexError::NotUtf8 {
            word: index,
            byte: e.as_bytes()[at],
        }
    })
}

/// Handles the escape starting at `line[i] == b'\\'`; returns the index after it.
fn escape(line: &[u8], i: usize, out: &mut Vec<u8>) -> Result<usize, LexError> {
    let Some(&next) = line.get(i + 1) else {
        return Err(LexError::TrailingBackslash);
    };
    match next {
        b't' => out.push(b'\t'),
        b'n' => out.push(b'\n'),
        b'r' => out.push(b'\r'),
        b'x' => {
            let hex = &line[(i + 2).min(line.len())..(i + 4).min(line.len())];
            let byte = std::str::from_utf8(hex)
                .ok()
                .filter(|h| h.len() == 2)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| LexError::BadHexEscape(String::from_utf8_lossy(hex).into_owned()))?;
            // The escaped value is a code point (U+0000..U+00FF), stored as UTF-8.
            let mut utf8 = [0u8; 2];
            out.extend_from_slice(char::from(byte).encode_utf8(&mut utf8).as_bytes());
            return Ok(i + 4);
        }
        b' ' | b'#' | b'\\' | b'\'' | b'"' | b'$' => out.push(next),
        // Any other escape is kept whole, as HAProxy keeps it, for regular expressions
        // (`\.`, `\d`) and their substitutions (`\1`); the rest of a multi-byte character
        // follows as ordinary bytes.
        other => {
            out.push(b'\\');
            out.push(other);
        }
    }
    Ok(i + 2)
}

/// Whether `b` may start a variable name (as HAProxy reads them: a letter or `_`).
fn starts_name(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// Expands `${NAME}` or `${NAME-default}` starting at `line[i] == b'$'`.
fn expand(
    line: &[u8],
    i: usize,
    out: &mut Vec<u8>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<usize, LexError> {
    let start = i + 2;
    if !line.get(start).is_some_and(|&b| starts_name(b)) {
        return Err(LexError::BadVarName);
    }
    let end = (start..line.len())
        .find(|&j| line[j] == b'}')
        .ok_or(LexError::UnterminatedVar)?;
    let inner = &line[start..end];
    let (name, default) = match inner.iter().position(|&b| b == b'-') {
        Some(dash) => (&inner[..dash], Some(&inner[dash + 1..])),
        None => (inner, None),
    };
    match env(&String::from_utf8_lossy(name)) {
        Some(v) => out.extend_from_slice(v.as_bytes()),
        None => out.extend_from_slice(default.unwrap_or(b"")),
    }
    Ok(end + 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "PORT" => Some("8080".into()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    fn lex(s: &str) -> Vec<String> {
        lex_line(s, &env).unwrap()
    }

    #[test]
    fn splits_on_blanks_and_drops_comments() {
        assert_eq!(lex("  bind  :80\t# listen here"), vec!["bind", ":80"]);
        assert_eq!(lex("# only a comment"), Vec::<String>::new());
        assert_eq!(lex(""), Vec::<String>::new());
    }

    #[test]
    fn bare_dollar_names_expand_in_double_quotes() {
        assert_eq!(
            lex(r#""$PORT/x" '$PORT' "$NOPE-" "\$" $"#),
            vec!["8080/x", "$PORT", "-", "$", "$"]
        );
        // As HAProxy: in double quotes a `$` starts a name, which starts with a letter.
        for bad in [r#""a$""#, r#""$.a""#, r#""${1}""#, r#""a$ b""#] {
            assert_eq!(lex_line(bad, &env), Err(LexError::BadVarName), "{bad}");
        }
    }

    #[test]
    fn quotes_and_escapes() {
        assert_eq!(
            lex(r#"a "b c" 'd $e' f\ g"#),
            vec!["a", "b c", "d $e", "f g"]
        );
        assert_eq!(lex(r#"x "a\"b" \# y"#), vec!["x", "a\"b", "#", "y"]);
        assert_eq!(lex(r#""\x41\t""#), vec!["A\t"]);
        assert_eq!(lex(r#"ab"cd"'ef'"#), vec!["abcdef"]);
        assert_eq!(lex(r#""""#), vec![""]);
    }

    #[test]
    fn env_expansion_only_in_double_quotes() {
        assert_eq!(lex(r#"bind ":${PORT}""#), vec!["bind", ":8080"]);
        assert_eq!(lex(r#""${NOPE-9000}""#), vec!["9000"]);
        assert_eq!(lex(r#""${NOPE}x""#), vec!["x"]);
        assert_eq!(lex(r#""${EMPTY-d}""#), vec![""]);
        assert_eq!(lex(r#"'${PORT}'"#), vec!["${PORT}"]);
    }

    #[test]
    fn other_encodings_only_in_comments() {
        // Latin-1 'é' (0xE9) after a '#' is ignored like the rest of the comment.
        let line = b"bind :80 # caf\xe9 \xff\xfe";
        assert_eq!(lex_bytes(line, &env).unwrap(), vec!["bind", ":80"]);
        assert_eq!(
            lex_bytes(b"# \xe9t\xe9", &env).unwrap(),
            Vec::<String>::new()
        );
        // In a word it is refused, naming the word and the byte.
        assert_eq!(
            lex_bytes(b"server caf\xe9 1.2.3.4:80", &env),
            Err(LexError::NotUtf8 {
                word: 2,
                byte: 0xe9
            })
        );
        assert_eq!(
            lex_bytes(b"x \"a b\xc3\"", &env),
            Err(LexError::NotUtf8 {
                word: 2,
                byte: 0xc3
            })
        );
        assert_eq!(
            lex_bytes(b"x '\xff'", &env),
            Err(LexError::NotUtf8 {
                word: 2,
                byte: 0xff
            })
        );
        // UTF-8 words stay as they are, quoted or bare; an escape of a character that needs
        // none keeps its backslash, as HAProxy keeps it.
        assert_eq!(
            lex("caf\u{e9} \"\u{e9}t\u{e9}\" \\\u{e9}x 'ny\u{e5}'"),
            vec!["caf\u{e9}", "\u{e9}t\u{e9}", "\\\u{e9}x", "ny\u{e5}"]
        );
        assert_eq!(
            lex(r"path_reg ^/v\d+\. \1 a\ b \#"),
            vec!["path_reg", r"^/v\d+\.", r"\1", "a b", "#"]
        );
        assert_eq!(lex(r#""\xe9""#), vec!["\u{e9}"]);
    }

    #[test]
    fn errors() {
        assert_eq!(
            lex_line("a \"b", &env),
            Err(LexError::Unterminated("double"))
        );
        assert_eq!(
            lex_line("a 'b", &env),
            Err(LexError::Unterminated("single"))
        );
        assert_eq!(lex_line("a \\", &env), Err(LexError::TrailingBackslash));
        assert_eq!(lex_line("\"${X\"", &env), Err(LexError::UnterminatedVar));
        assert!(matches!(
            lex_line("\\xZZ", &env),
            Err(LexError::BadHexEscape(_))
        ));
    }
}
