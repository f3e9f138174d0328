//! HAProxy's condition expressions, for `.if` / `.elif` blocks and `-cc`: predicates
//! (`defined(VAR)`, `feature(NAME)`, `streq(A,B)`, `strneq(A,B)`, `version_atleast(V)`,
//! `version_before(V)`, `openssl_version_atleast(V)`, `openssl_version_before(V)`,
//! `ssllib_name_startswith(S)`), bare
//! words (true unless empty or `0`), `!`, `&&`, `||` and parentheses.
//!
//! sluice follows HAProxy 2.6's behaviour and says so: the version compared is
//! [`HAPROXY_VERSION`], and [`FEATURES`] are the build features it reports. `OPENSSL` is
//! among them because sluice reads HAProxy's TLS keywords (with rustls underneath), so
//! that a configuration guarding its `ssl` lines with `.if feature(OPENSSL)` keeps them;
//! `openssl_version_atleast`/`_before` are always false: there is no OpenSSL version, and
//! the TLS library's name is [`SSLLIB_NAME`].

/// The HAProxy release whose behaviour sluice follows, for `version_atleast`/`_before`.
pub const HAPROXY_VERSION: &str = "2.6.12";

/// The TLS library's name, as `ssllib_name_startswith` compares it (HAProxy's is the
/// OpenSSL build's, `OpenSSL 3.0.11 ...`).
pub const SSLLIB_NAME: &str = "rustls";

/// What `feature(NAME)` is true for.
pub const FEATURES: &[&str] = &["EPOLL", "THREAD", "PROMEX", "SLZ", "OPENSSL"];

/// Evaluates a condition; `env` reads environment variables (`defined(VAR)`).
pub fn eval(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<bool, String> {
    let mut p = Parser {
        s: text.as_bytes(),
        i: 0,
        env,
    };
    let v = p.or()?;
    p.skip_ws();
    if p.i < p.s.len() {
        return Err(format!(
            "unexpected '{}' in condition",
            String::from_utf8_lossy(&p.s[p.i..])
        ));
    }
    Ok(v)
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
    env: &'a dyn Fn(&str) -> Option<String>,
}

impl Parser<'_> {
    fn skip_ws(&mut self) {
        while self.s.get(self.i).is_some_and(|b| b.is_ascii_whitespace()) {
            self.i += 1;
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.skip_ws();
        if self.s[self.i..].starts_with(tok.as_bytes()) {
            self.i += tok.len();
            true
        } else {
            false
        }
    }

    fn or(&mut self) -> Result<bool, String> {
        let mut v = self.and()?;
        while self.eat("||") {
            // Both sides are parsed (and checked) whatever the first gave.
            let r = self.and()?;
            v = v || r;
        }
        Ok(v)
    }

    fn and(&mut self) -> Result<bool, String> {
        let mut v = self.factor()?;
        while self.eat("&&") {
            let r = self.factor()?;
            v = v && r;
        }
        Ok(v)
    }

    fn factor(&mut self) -> Result<bool, String> {
        if self.eat("!") {
            return Ok(!self.factor()?);
        }
        if self.eat("(") {
            let v = self.or()?;
            if !self.eat(")") {
                return Err("missing ')' in condition".into());
            }
            return Ok(v);
        }
        self.skip_ws();
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|&b| !b.is_ascii_whitespace() && !b"()!&|".contains(&b))
        {
            self.i += 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.i])
            .map_err(|_| "condition is not UTF-8".to_string())?
            .to_string();
        if word.is_empty() {
            return Err("missing term in condition".into());
        }
        if self.s.get(self.i) != Some(&b'(') {
            // A bare word: true unless empty or zero.
            return Ok(!(word.is_empty() || word.parse::<i64>() == Ok(0)));
        }
        self.i += 1;
        let args_start = self.i;
        while self.s.get(self.i).is_some_and(|&b| b != b')') {
            self.i += 1;
        }
        if self.i >= self.s.len() {
            return Err(format!("missing ')' after '{word}('"));
        }
        let args: Vec<String> = String::from_utf8_lossy(&self.s[args_start..self.i])
            .split(',')
            .map(|a| a.trim().trim_matches('"').to_string())
            .collect();
        self.i += 1;
        predicate(&word, &args, self.env)
    }
}

fn predicate(
    name: &str,
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<bool, String> {
    let one = || match args {
        [a] => Ok(a.as_str()),
        _ => Err(format!("{name}() takes one argument")),
    };
    let two = || match args {
        [a, b] => Ok((a.as_str(), b.as_str())),
        _ => Err(format!("{name}() takes two arguments")),
    };
    Ok(match name {
        "defined" => env(one()?).is_some(),
        "feature" => FEATURES.contains(&one()?),
        "streq" => {
            let (a, b) = two()?;
            a == b
        }
        "strneq" => {
            let (a, b) = two()?;
            a != b
        }
        "version_atleast" => version_cmp(HAPROXY_VERSION, one()?)? >= std::cmp::Ordering::Equal,
        "version_before" => version_cmp(HAPROXY_VERSION, one()?)? == std::cmp::Ordering::Less,
        "openssl_version_atleast" | "openssl_version_before" => {
            one()?;
            false
        }
        "ssllib_name_startswith" => SSLLIB_NAME.starts_with(one()?),
        other => return Err(format!("unknown predicate '{other}' in condition")),
    })
}

/// Compares dotted versions numerically (`2.6.12` > `2.6.2`; a missing part is 0).
fn version_cmp(a: &str, b: &str) -> Result<std::cmp::Ordering, String> {
    let parts = |v: &str| -> Result<Vec<u64>, String> {
        v.split(['.', '-'])
            .take_while(|p| !p.is_empty() && p.bytes().all(|c| c.is_ascii_digit()))
            .map(|p| p.parse::<u64>().map_err(|_| format!("bad version '{v}'")))
            .collect()
    };
    let (x, y) = (parts(a)?, parts(b)?);
    if y.is_empty() {
        return Err(format!("bad version '{b}'"));
    }
    let n = x.len().max(y.len());
    let get = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
    Ok((0..n)
        .map(|i| get(&x, i).cmp(&get(&y, i)))
        .find(|o| o.is_ne())
        .unwrap_or(std::cmp::Ordering::Equal))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(k: &str) -> Option<String> {
        (k == "SET").then(|| "x".to_string())
    }

    #[test]
    fn truth_table() {
        for (cond, want) in [
            ("defined(SET)", true),
            ("defined(UNSET)", false),
            ("!defined(UNSET)", true),
            ("feature(PROMEX)", true),
            ("feature(OPENSSL)", true),
            ("feature(QUIC)", false),
            ("ssllib_name_startswith(OpenSSL)", false),
            ("ssllib_name_startswith(rust)", true),
            ("streq(a,a)", true),
            ("streq(a,b)", false),
            ("strneq(a,b)", true),
            ("version_atleast(2.4)", true),
            ("version_atleast(2.6.12)", true),
            ("version_atleast(2.6.13)", false),
            ("version_atleast(3.0)", false),
            ("version_before(2.7)", true),
            ("version_before(2.6)", false),
            ("openssl_version_atleast(1.1.1)", false),
            ("1", true),
            ("0", false),
            ("defined(SET) && streq(a,a)", true),
            ("defined(UNSET) || streq(a,a)", true),
            ("defined(UNSET) || streq(a,b)", false),
            ("!(defined(SET) && streq(a,b))", true),
            ("(0 || 1) && !0", true),
        ] {
            assert_eq!(eval(cond, &env), Ok(want), "{cond}");
        }
        assert!(eval("nosuch(x)", &env)
            .unwrap_err()
            .contains("unknown predicate"));
        assert!(eval("(1", &env).is_err());
        assert!(eval("streq(a)", &env).is_err());
        assert!(eval("1 1", &env).is_err());
    }
}
