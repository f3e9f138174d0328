//! HAProxy's value units: times (`us`, `ms`, `s`, `m`, `h`, `d`; a bare number is
//! milliseconds) and sizes (`k`, `m`, `g`, powers of 1024; a bare number is bytes).

use std::time::Duration;

use crate::error::shorten;

/// Parses a time value such as `5s`, `250`, `100us`, `1m`.
pub fn parse_time(s: &str) -> Result<Duration, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err("expects a number followed by an optional unit (us, ms, s, m, h, d)".into());
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| "number too large".to_string())?;
    let micros_per = match &s[digits..] {
        "us" => 1,
        "" | "ms" => 1_000,
        "s" => 1_000_000,
        "m" => 60_000_000,
        "h" => 3_600_000_000,
        "d" => 86_400_000_000,
        unit => {
            return Err(format!(
                "unknown time unit '{}' (us, ms, s, m, h, d)",
                shorten(unit)
            ))
        }
    };
    n.checked_mul(micros_per)
        .map(Duration::from_micros)
        .ok_or_else(|| "time value too large".into())
}

/// Parses a size value such as `16384`, `16k`, `1m`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let digits = s.bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err("expects a number followed by an optional unit (k, m, g)".into());
    }
    let n: u64 = s[..digits]
        .parse()
        .map_err(|_| "number too large".to_string())?;
    let mult = match &s[digits..] {
        "" => 1,
        "k" | "K" => 1 << 10,
        "m" | "M" => 1 << 20,
        "g" | "G" => 1 << 30,
        unit => return Err(format!("unknown size unit '{}' (k, m, g)", shorten(unit))),
    };
    n.checked_mul(mult)
        .ok_or_else(|| "size value too large".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times() {
        assert_eq!(parse_time("250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_time("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_time("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_time("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_time("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_time("1d"), Ok(Duration::from_secs(86400)));
        assert!(parse_time("5x").unwrap_err().contains("unknown time unit"));
        assert!(parse_time("s").is_err());
        assert!(parse_time("-1").is_err());
        assert!(parse_time("99999999999999999999d").is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("16384"), Ok(16384));
        assert_eq!(parse_size("16k"), Ok(16384));
        assert_eq!(parse_size("1m"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("1t").is_err());
        assert!(parse_size("").is_err());
    }
}
