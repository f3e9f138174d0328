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
}

/// Splits `line` into words. `env` resolves environment variables (injected for tests).
pub fn lex_line(line: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Vec<String>, LexError> {
    let chars: Vec<char> = line.chars().collect();
    let mut words = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            ' ' | '\t' | '\r' | '\n' => {
                if in_word {
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
                i += 1;
            }
            '#' => break,
            '\\' => {
                in_word = true;
                i = escape(&chars, i, &mut cur)?;
            }
            '\'' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(LexError::Unterminated("single")),
                        Some('\'') => break,
                        Some(&ch) => cur.push(ch),
                    }
                    i += 1;
                }
                i += 1;
            }
            '"' => {
                in_word = true;
                i += 1;
                loop {
                    match chars.get(i) {
                        None => return Err(LexError::Unterminated("double")),
                        Some('"') => break,
                        Some('\\') => {
                            i = escape(&chars, i, &mut cur)?;
                            continue;
                        }
                        Some('$') if chars.get(i + 1) == Some(&'{') => {
                            i = expand(&chars, i, &mut cur, env)?;
                            continue;
                        }
                        Some(&ch) => cur.push(ch),
                    }
                    i += 1;
                }
                i += 1;
            }
            _ => {
                in_word = true;
                cur.push(c);
                i += 1;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    Ok(words)
}

/// Handles the escape starting at `chars[i] == '\\'`; returns the index after it.
fn escape(chars: &[char], i: usize, out: &mut String) -> Result<usize, LexError> {
    let Some(&next) = chars.get(i + 1) else {
        return Err(LexError::TrailingBackslash);
    };
    match next {
        't' => out.push('\t'),
        'n' => out.push('\n'),
        'r' => out.push('\r'),
        'x' => {
            let hex: String = chars.iter().skip(i + 2).take(2).collect();
            let byte = u8::from_str_radix(&hex, 16)
                .ok()
                .filter(|_| hex.len() == 2)
                .ok_or_else(|| LexError::BadHexEscape(hex.clone()))?;
            out.push(byte as char);
            return Ok(i + 4);
        }
        other => out.push(other),
    }
    Ok(i + 2)
}

/// Expands `${NAME}` or `${NAME-default}` starting at `chars[i] == '$'`.
fn expand(
    chars: &[char],
    i: usize,
    out: &mut String,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<usize, LexError> {
    let start = i + 2;
    let end = (start..chars.len())
        .find(|&j| chars[j] == '}')
        .ok_or(LexError::UnterminatedVar)?;
    let inner: String = chars[start..end].iter().collect();
    let (name, default) = match inner.split_once('-') {
        Some((n, d)) => (n.to_string(), Some(d.to_string())),
        None => (inner, None),
    };
    match env(&name) {
        Some(v) => out.push_str(&v),
        None => out.push_str(default.as_deref().unwrap_or("")),
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
