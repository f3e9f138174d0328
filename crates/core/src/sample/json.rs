//! JSON in samples: `json_query`'s path lookup (RFC 9535 paths by serde_json_path) and
//! its answers as HAProxy gives them, shared by `json_query` and the JWT converters.

use crate::conf::sample::Sample;

/// `json_query`: the first node at `path` of the JSON document `doc`.
pub(super) fn query(
    doc: &[u8],
    path: &serde_json_path::JsonPath,
    int: bool,
) -> Option<Sample<'static>> {
    use serde_json::Value;
    // The range of integers a double holds exactly, beyond which HAProxy gives nothing.
    const EXACT: i64 = (1 << 53) - 1;
    let value: Value = serde_json::from_slice(doc).ok()?;
    match path.query(&value).first()? {
        Value::String(s) => Some(Sample::string(s.clone())),
        Value::Bool(b) => Some(Sample::Bool(*b)),
        Value::Number(n) if int => {
            let i = n
                .as_i64()
                .or_else(|| n.as_f64().map(|f| f.trunc() as i64))?;
            (-EXACT..=EXACT).contains(&i).then_some(Sample::Int(i))
        }
        Value::Number(n) => Some(Sample::string(c_g(n.as_f64()?))),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

/// `x` as C's `printf("%g")` writes it: six significant digits, trailing zeros dropped,
/// exponent form below 1e-4 and from 1e6.
fn c_g(x: f64) -> String {
    if x == 0.0 {
        return "0".into();
    }
    if !x.is_finite() {
        return if x.is_nan() {
            "nan"
        } else if x > 0.0 {
            "inf"
        } else {
            "-inf"
        }
        .into();
    }
    // Rounded to six significant digits first: the exponent is the rounded one's.
    let sci = format!("{x:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: String| {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa.to_string()), exp.abs())
    } else {
        let decimals = (5 - exp).max(0) as usize;
        trim(format!("{x:.decimals$}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_print_as_c_g_prints_them() {
        let cases = [
            (1.5, "1.5"),
            (10.0, "10"),
            (-0.25, "-0.25"),
            (123456.0, "123456"),
            (1234567.0, "1.23457e+06"),
            (999999.5, "1e+06"),
            (0.0001, "0.0001"),
            (0.0000125, "1.25e-05"),
            (1e100, "1e+100"),
            (0.0, "0"),
        ];
        for (x, want) in cases {
            assert_eq!(c_g(x), want, "{x}");
        }
    }
}
