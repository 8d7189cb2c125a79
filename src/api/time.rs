//! Kubernetes time formats, without a date crate: RFC 3339 timestamps (`meta/v1` Time and
//! MicroTime) and Go's duration strings, on proleptic Gregorian arithmetic (days since
//! 1970-01-01 to and from (year, month, day), after Howard Hinnant's `days_from_civil` and
//! `civil_from_days`).

/// Days since 1970-01-01 of `y`-`m`-`d` (month 1..=12).
pub fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * ((m + 9) % 12) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// (year, month, day) of `days` since 1970-01-01.
pub fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// The current Unix time in seconds.
pub fn unix_now() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs() as i64).unwrap_or(0)
}

/// Unix seconds as RFC 3339 UTC seconds (`2026-11-01T10:00:00Z`), as Kubernetes writes
/// timestamps (years outside 0..=9999, which Go refuses to encode, are clamped).
pub fn rfc3339(secs: i64) -> String {
    let clamped = secs.clamp(GO_ZERO_TIME_UNIX, MAX_TIME_UNIX);
    format_timestamp(clamped, 0, false).unwrap_or_default()
}

/// Unix seconds of an RFC 3339 time (any fraction and offset; see [`parse_timestamp`]).
pub fn parse_rfc3339(s: &str) -> Option<i64> {
    parse_timestamp(s).map(|(secs, _)| secs)
}

/// Seconds from 0001-01-01T00:00:00Z (Go's zero `time.Time`) to the Unix epoch, negated.
pub const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;
/// 9999-12-31T23:59:59Z, the last second Go's RFC 3339 encoder accepts.
const MAX_TIME_UNIX: i64 = 253_402_300_799;

fn digits(s: &[u8]) -> Option<i64> {
    if s.is_empty() || !s.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(s.iter().fold(0i64, |a, &c| a * 10 + i64::from(c - b'0')))
}

/// Parse `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)` into Unix seconds and nanoseconds.
pub fn parse_timestamp(s: &str) -> Option<(i64, i32)> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, min, sec) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let mut rest = &b[19..];
    let mut nanos = 0i64;
    if let [b'.', tail @ ..] = rest {
        let n = tail.iter().take_while(|c| c.is_ascii_digit()).count();
        if n == 0 || n > 9 {
            return None;
        }
        nanos = digits(&tail[..n])? * 10i64.pow(9 - n as u32);
        rest = &tail[n..];
    }
    let offset = match rest {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] => {
            let h = digits(&[*h1, *h2])?;
            let m = digits(&[*m1, *m2])?;
            if h > 23 || m > 59 {
                return None;
            }
            let o = h * 3600 + m * 60;
            if *sign == b'-' {
                -o
            } else {
                o
            }
        }
        _ => return None,
    };
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    let mdays = [31, if leap { 29 } else { 28 }, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];
    if !(1..=12).contains(&month) || day < 1 || day > mdays[(month - 1) as usize] {
        return None;
    }
    if hour > 23 || min > 59 || sec > 59 {
        return None;
    }
    let secs = days_from_civil(year, month, day) * 86_400 + hour * 3600 + min * 60 + sec - offset;
    Some((secs, nanos as i32))
}

/// Format Unix seconds as RFC 3339 UTC: `2026-11-22T02:05:06Z`, or with `micro` the
/// MicroTime form `2026-11-22T02:05:06.123456Z`. `None` outside years 0..=9999 (Go's
/// encoder refuses those too).
pub fn format_timestamp(secs: i64, nanos: i32, micro: bool) -> Option<String> {
    // Go normalizes nanos outside [0, 1e9) into the seconds.
    let total = i128::from(secs) * 1_000_000_000 + i128::from(nanos);
    let secs = i64::try_from(total.div_euclid(1_000_000_000)).ok()?;
    let nanos = total.rem_euclid(1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (sod / 3600, sod % 3600 / 60, sod % 60);
    Some(if micro {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}Z", nanos / 1000)
    } else {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}Z")
    })
}

/// Go's `time.Duration.String()`: `0s`, `1.5ms`, `2µs`, `5m0s`, `1h2m3.5s`.
pub fn format_go_duration(d: i64) -> String {
    let neg = d < 0;
    let u = d.unsigned_abs();
    /// `v / 10^prec` with the fraction's trailing zeros (and a bare point) dropped.
    fn frac(v: u64, prec: u32) -> String {
        let p = 10u64.pow(prec);
        let (int, f) = (v / p, v % p);
        if f == 0 {
            return int.to_string();
        }
        let fs = format!("{f:0width$}", width = prec as usize);
        format!("{int}.{}", fs.trim_end_matches('0'))
    }
    let body = if u == 0 {
        "0s".to_owned()
    } else if u < 1_000 {
        format!("{u}ns")
    } else if u < 1_000_000 {
        format!("{}µs", frac(u, 3))
    } else if u < 1_000_000_000 {
        format!("{}ms", frac(u, 6))
    } else {
        let secs = frac(u % 60_000_000_000, 9);
        let mins = u / 60_000_000_000;
        if mins == 0 {
            format!("{secs}s")
        } else if mins < 60 {
            format!("{mins}m{secs}s")
        } else {
            format!("{}h{}m{secs}s", mins / 60, mins % 60)
        }
    };
    if neg {
        format!("-{body}")
    } else {
        body
    }
}

/// Go's `time.ParseDuration`: `[-+]` then one or more `<decimal><unit>` with units ns, us,
/// µs, μs, ms, s, m, h; a bare `0` is allowed.
pub fn parse_go_duration(s: &str) -> Option<i64> {
    let (neg, mut rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if rest == "0" {
        return Some(0);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (ns, after) = duration_term(rest)?;
        total = total.checked_add(ns)?;
        if total > 1u128 << 63 {
            return None;
        }
        rest = after;
    }
    if neg {
        Some((total as i128).checked_neg().and_then(|x| i64::try_from(x).ok())?)
    } else {
        i64::try_from(total).ok()
    }
}

/// One `<decimal><unit>` term at the start of `rest` of a Go duration: its nanoseconds
/// (the fraction cut to 18 digits, as Go does) and what follows it.
fn duration_term(rest: &str) -> Option<(u128, &str)> {
    let int_len = rest.bytes().take_while(u8::is_ascii_digit).count();
    let int_part = &rest[..int_len];
    let mut rest = &rest[int_len..];
    let mut frac_part = "";
    if let Some(tail) = rest.strip_prefix('.') {
        let n = tail.bytes().take_while(u8::is_ascii_digit).count();
        frac_part = &tail[..n];
        rest = &tail[n..];
    }
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let unit_len = rest.char_indices().find(|&(_, c)| c == '.' || c.is_ascii_digit()).map_or(rest.len(), |(i, _)| i);
    let unit: u128 = match &rest[..unit_len] {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let mut v: u128 = 0;
    for c in int_part.bytes() {
        v = v.checked_mul(10)?.checked_add(u128::from(c - b'0'))?;
        if v > u128::from(u64::MAX) {
            return None;
        }
    }
    let mut scale: u128 = 1;
    let mut f: u128 = 0;
    for c in frac_part.bytes().take(18) {
        f = f * 10 + u128::from(c - b'0');
        scale *= 10;
    }
    Some((v.checked_mul(unit)?.checked_add(f * unit / scale)?, &rest[unit_len..]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_dates() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(rfc3339(1_793_095_200), "2026-10-27T10:00:00Z");
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59.5Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("2024-03-01T00:59:59+01:00"), Some(1_709_251_199));
        for bad in ["2024-02-29 23:59:59Z", "2024-13-01T00:00:00Z", "2023-02-29T00:00:00Z", ""] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    proptest! {
        #[test]
        fn days_and_dates_round_trip(days in -800_000i64..3_000_000) {
            let (y, m, d) = civil_from_days(days);
            prop_assert!((1..=12).contains(&m) && (1..=31).contains(&d));
            prop_assert_eq!(days_from_civil(y, m, d), days);
        }

        #[test]
        fn timestamps_round_trip(secs in 0i64..253_402_300_799) {
            prop_assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs));
        }
    }
}
