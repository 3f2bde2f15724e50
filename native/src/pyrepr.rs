//! Python's text forms of numbers and strings, byte for byte: `repr(float)` and `json.dumps`.
use std::fmt::Write;

/// `repr(x)` of a Python float: shortest round-trip digits, exponent outside 1e-4 .. 1e16.
pub fn float_repr(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("nan");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x < 0.0 { "-inf" } else { "inf" });
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let (digits, exp) = shortest_digits(x.abs());
    let negative = x < 0.0;
    let decpt = exp + 1; // x = 0.DIGITS * 10^decpt
    if negative {
        out.push('-');
    }
    if decpt > -4 && decpt <= 16 {
        if decpt <= 0 {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-decpt) as usize));
            out.push_str(&digits);
        } else if decpt as usize >= digits.len() {
            out.push_str(&digits);
            out.extend(std::iter::repeat_n('0', decpt as usize - digits.len()));
            out.push_str(".0");
        } else {
            let (int, frac) = digits.split_at(decpt as usize);
            out.push_str(int);
            out.push('.');
            out.push_str(frac);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let e = decpt - 1;
        let _ = write!(out, "e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs());
    }
}

/// A float as `json.dumps` writes it, but NaN and the infinities as the strings OTLP/JSON
/// writes for them (`"NaN"`, `"Infinity"`, `"-Infinity"`), since strict JSON has no such numbers
/// (`anyvalue.to_plain`).
pub fn json_float(out: &mut String, x: f64) {
    if x.is_nan() {
        out.push_str("\"NaN\"");
    } else if x.is_infinite() {
        out.push_str(if x < 0.0 { "\"-Infinity\"" } else { "\"Infinity\"" });
    } else {
        float_repr(out, x);
    }
}

/// A JSON string as `json.dumps` writes it, with `ensure_ascii` False or True.
pub fn json_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    let _ = write!(out, "\\u{:04x}", unit);
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// `(digits, exponent)` of the shortest decimal that reads back as `x` (> 0), and of those the
/// nearest to `x`, ties to an even last digit: David Gay's mode 0, which Python's repr uses.
/// Rust's `{:e}` gives a shortest string too, but may break an exact tie the other way.
fn shortest_digits(x: f64) -> (String, i32) {
    let (digits, exp) = split_sci(&format!("{:e}", x));
    let last = digits.as_bytes()[digits.len() - 1] - b'0';
    let other_reads_back = [last.wrapping_sub(1), last + 1].into_iter().any(|d| {
        (1..=9).contains(&d) && {
            let mut alt = digits.clone();
            alt.pop();
            alt.push((b'0' + d) as char);
            parse_digits(&alt, exp) == x
        }
    });
    if !other_reads_back {
        return (digits, exp);
    }
    // Several shortest strings read back: round the exact expansion of x to the same length.
    let (exact, exact_exp) = split_sci(&format!("{:.800e}", x));
    let n = digits.len();
    let bytes = exact.as_bytes();
    let mut kept: Vec<u8> = bytes[..n.min(bytes.len())].to_vec();
    let rest = &bytes[n.min(bytes.len())..];
    let round_up = match rest.first() {
        None => false,
        Some(&d) if d > b'5' => true,
        Some(&d) if d < b'5' => false,
        Some(_) if rest[1..].iter().any(|d| *d != b'0') => true,
        Some(_) => (kept[n - 1] - b'0') % 2 == 1, // exact tie: to even
    };
    let mut rounded_exp = exact_exp;
    if round_up {
        let mut i = n;
        loop {
            if i == 0 {
                kept.insert(0, b'1');
                kept.pop();
                rounded_exp += 1;
                break;
            }
            i -= 1;
            if kept[i] == b'9' {
                kept[i] = b'0';
            } else {
                kept[i] += 1;
                break;
            }
        }
    }
    while kept.len() > 1 && kept[kept.len() - 1] == b'0' {
        kept.pop();
    }
    let candidate = String::from_utf8(kept).expect("ascii digits");
    if candidate.len() == n && parse_digits(&candidate, rounded_exp) == x {
        (candidate, rounded_exp)
    } else {
        (digits, exp)
    }
}

/// "d.ddde-7" → ("dddd", -7).
fn split_sci(sci: &str) -> (String, i32) {
    let (mantissa, exp) = sci.split_once('e').expect("LowerExp has an exponent");
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    (digits, exp.parse().expect("LowerExp exponent is an integer"))
}

fn parse_digits(digits: &str, exp: i32) -> f64 {
    let text = format!("{}.{}e{}", &digits[..1], &digits[1..], exp);
    text.parse().unwrap_or(f64::NAN)
}
