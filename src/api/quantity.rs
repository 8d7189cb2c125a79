//! Kubernetes resource quantities (`32Mi`, `1.5Gi`, `500M`, `1e3`, `1024`) read as whole
//! numbers, the form `resource.ParseQuantity` accepts, computed exactly (no floating point).

/// Why a string is not a whole quantity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QuantityError {
    /// Not in the quantity grammar: a number (`1`, `1.5`, `.5`, `1.`) then one suffix
    /// (`Ki` `Mi` `Gi` `Ti` `Pi` `Ei`, `n` `u` `m` `k` `M` `G` `T` `P` `E`, or `e`/`E` and a
    /// signed integer exponent).
    #[error("not a quantity (e.g. 1024, 64Ki, 32Mi, 1.5Gi, 500M)")]
    Syntax,
    /// Below zero.
    #[error("must not be negative")]
    Negative,
    /// Has a fractional part (`1.5`, `500m`): a count of bytes is whole.
    #[error("not a whole number")]
    Fraction,
    /// 2^64 or more.
    #[error("too large")]
    TooLarge,
}

/// The powers of 1024 of the binary suffixes, in order.
const BINARY: [&str; 6] = ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"];

/// The value of quantity `s`, when it is a whole number from 0 to `u64::MAX`.
pub fn whole(s: &str) -> Result<u64, QuantityError> {
    let b = s.as_bytes();
    let (negative, b) = match b.first() {
        Some(b'-') => (true, &b[1..]),
        Some(b'+') => (false, &b[1..]),
        _ => (false, b),
    };
    let int_len = b.iter().take_while(|c| c.is_ascii_digit()).count();
    let (int, rest) = b.split_at(int_len);
    let (frac, suffix) = match rest.strip_prefix(b".") {
        Some(r) => r.split_at(r.iter().take_while(|c| c.is_ascii_digit()).count()),
        None => (&rest[..0], rest),
    };
    if int.is_empty() && frac.is_empty() {
        return Err(QuantityError::Syntax);
    }
    let (pow10, pow1024) = suffix_powers(suffix).ok_or(QuantityError::Syntax)?;
    // The digits without leading zeros or the fraction's trailing zeros: an integer mantissa
    // times 10^exp.
    let digits: Vec<u8> = int.iter().chain(frac).copied().collect();
    let trailing = frac.iter().rev().take_while(|&&c| c == b'0').count();
    let digits = &digits[..digits.len() - trailing];
    let digits = &digits[digits.iter().take_while(|&&c| c == b'0').count()..];
    if digits.is_empty() {
        return Ok(0);
    }
    if negative {
        return Err(QuantityError::Negative);
    }
    // 10^38 < 2^128: more significant digits than that are over 2^64 whatever the exponent
    // that could still make them whole.
    if digits.len() > 38 {
        return Err(QuantityError::TooLarge);
    }
    let mut value = digits.iter().fold(0u128, |v, d| v * 10 + u128::from(d - b'0'));
    let exp = i64::from(pow10) - (frac.len() - trailing) as i64;
    value = value.checked_mul(1u128 << (10 * pow1024)).ok_or(QuantityError::TooLarge)?;
    if exp >= 0 {
        let scale = u32::try_from(exp).ok().and_then(|e| 10u128.checked_pow(e)).ok_or(QuantityError::TooLarge)?;
        value = value.checked_mul(scale).ok_or(QuantityError::TooLarge)?;
    } else {
        let scale = u32::try_from(-exp).ok().and_then(|e| 10u128.checked_pow(e)).ok_or(QuantityError::Fraction)?;
        if !value.is_multiple_of(scale) {
            return Err(QuantityError::Fraction);
        }
        value /= scale;
    }
    u64::try_from(value).map_err(|_| QuantityError::TooLarge)
}

/// (power of 10, power of 1024) of a suffix; None when it is not one.
fn suffix_powers(suffix: &[u8]) -> Option<(i32, u32)> {
    if let Some(i) = BINARY.iter().position(|b| b.as_bytes() == suffix) {
        return Some((0, i as u32 + 1));
    }
    let decimal = match suffix {
        b"" => 0,
        b"n" => -9,
        b"u" => -6,
        b"m" => -3,
        b"k" => 3,
        b"M" => 6,
        b"G" => 9,
        b"T" => 12,
        b"P" => 15,
        b"E" => 18,
        [b'e' | b'E', exp @ ..] => {
            let (negative, digits) = match exp {
                [b'-', d @ ..] => (true, d),
                [b'+', d @ ..] => (false, d),
                d => (false, d),
            };
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return None;
            }
            // Past 10^±1000 a nonzero number only ever overflows or leaves a fraction.
            let e = digits.iter().fold(0i32, |e, d| (e * 10 + i32::from(d - b'0')).min(1001));
            if negative {
                -e
            } else {
                e
            }
        }
        _ => return None,
    };
    Some((decimal, 0))
}

/// `n` written with the largest binary suffix that divides it exactly (`33554432` as `32Mi`;
/// `1536` stays `1536`), so that [`whole`] reads back the same number.
pub fn binary(n: u64) -> String {
    let mut unit = "";
    let mut v = n;
    for suffix in BINARY {
        if v == 0 || !v.is_multiple_of(1024) {
            break;
        }
        v /= 1024;
        unit = suffix;
    }
    format!("{v}{unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_quantities() {
        for (s, want) in [
            ("0", 0),
            ("1024", 1024),
            ("+7", 7),
            ("1Ki", 1024),
            ("32Mi", 32 << 20),
            ("1.5Gi", 3 << 29),
            ("1Ei", 1 << 60),
            ("15Ei", 15 << 60),
            ("500M", 500_000_000),
            ("1k", 1000),
            ("1.5k", 1500),
            ("1e3", 1000),
            ("1E3", 1000),
            ("1E", 1_000_000_000_000_000_000),
            ("2e+2", 200),
            ("1000e-3", 1),
            ("1000m", 1),
            ("0.5Ki", 512),
            (".5Ki", 512),
            ("1.", 1),
            ("007", 7),
            ("1.000", 1),
            ("-0", 0),
            ("0.0Mi", 0),
            ("18446744073709551615", u64::MAX),
        ] {
            assert_eq!(whole(s), Ok(want), "{s}");
        }
    }

    #[test]
    fn refused_quantities() {
        for (s, want) in [
            ("", QuantityError::Syntax),
            (".", QuantityError::Syntax),
            ("Mi", QuantityError::Syntax),
            ("1 Mi", QuantityError::Syntax),
            ("1MB", QuantityError::Syntax),
            ("1mi", QuantityError::Syntax),
            ("1KB", QuantityError::Syntax),
            ("1e", QuantityError::Syntax),
            ("1e1.5", QuantityError::Syntax),
            ("0x10", QuantityError::Syntax),
            ("1e99999", QuantityError::TooLarge),
            ("1e-99999", QuantityError::Fraction),
            ("1500e-3", QuantityError::Fraction),
            (" 1", QuantityError::Syntax),
            ("-1", QuantityError::Negative),
            ("-1Ki", QuantityError::Negative),
            ("1.5", QuantityError::Fraction),
            ("500m", QuantityError::Fraction),
            ("1e-3", QuantityError::Fraction),
            ("16Ei", QuantityError::TooLarge),
            ("18446744073709551616", QuantityError::TooLarge),
            ("1e300", QuantityError::TooLarge),
        ] {
            assert_eq!(whole(s), Err(want), "{s:?}");
        }
    }

    #[test]
    fn binary_reads_back() {
        for (n, text) in
            [(0, "0"), (1, "1"), (1000, "1000"), (1024, "1Ki"), (1536, "1536"), (32 << 20, "32Mi"), (1 << 30, "1Gi"), (1 << 60, "1Ei")]
        {
            assert_eq!(binary(n), text);
            assert_eq!(whole(text), Ok(n));
        }
        assert_eq!(binary(u64::MAX), u64::MAX.to_string());
    }
}
