//! Kubernetes time formats: RFC 3339 timestamps (`meta/v1` Time and MicroTime) and Go's
//! duration strings, in the text Go's `time` package reads and writes.
//!
//! The calendar (month lengths, leap years, Unix seconds to and from a date) is the `time`
//! crate's. The text is read and written here, because the crates' RFC 3339 parsers take
//! what Go's `time.Parse(time.RFC3339, _)` refuses: `time`'s any byte between date and time
//! and a leap second `:60`, `jiff`'s `:60` too (and `jiff`'s `Timestamp` ends on 9999-12-30,
//! where Go reads and writes up to 9999-12-31T23:59:59Z). Neither writes MicroTime's six
//! fraction digits or `Duration.String()`, nor parses Go durations.

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
    // Every field is at most four digits, so the conversions cannot fail but on a bad value.
    let month = time::Month::try_from(u8::try_from(month).ok()?).ok()?;
    let date = time::Date::from_calendar_date(i32::try_from(year).ok()?, month, u8::try_from(day).ok()?).ok()?;
    let clock = time::Time::from_hms(u8::try_from(hour).ok()?, u8::try_from(min).ok()?, u8::try_from(sec).ok()?).ok()?;
    let secs = time::PrimitiveDateTime::new(date, clock).assume_utc().unix_timestamp() - offset;
    Some((secs, nanos as i32))
}

/// Format Unix seconds as RFC 3339 UTC: `2026-11-22T02:05:06Z`, or with `micro` the
/// MicroTime form `2026-11-22T02:05:06.123456Z`. `None` outside years 0..=9999 (Go's
/// encoder refuses those too).
pub fn format_timestamp(secs: i64, nanos: i32, micro: bool) -> Option<String> {
    // Go normalizes nanos outside [0, 1e9) into the seconds.
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(secs) * 1_000_000_000 + i128::from(nanos)).ok()?;
    let (y, m, d) = (t.year(), u8::from(t.month()), t.day());
    if !(0..=9999).contains(&y) {
        return None;
    }
    let (hh, mm, ss) = (t.hour(), t.minute(), t.second());
    Some(if micro {
        format!("{y:04}-{m:02}-{d:02}T{hh:02}:{mm:02}:{ss:02}.{:06}Z", t.microsecond())
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
    go_duration(s).ok()
}

/// [`parse_go_duration`] with Go's error text (`time: invalid duration "x"`, `time: missing
/// unit in duration "1"`, `time: unknown unit "d" in duration "1d"`), step for step as Go
/// parses (the same overflow checks, a fraction's digits past int64 precision dropped).
pub fn go_duration(orig: &str) -> Result<i64, String> {
    let invalid = || format!("time: invalid duration {}", go_time_quote(orig));
    let mut s = orig.as_bytes();
    let mut neg = false;
    if let Some(&c) = s.first() {
        if c == b'-' || c == b'+' {
            neg = c == b'-';
            s = &s[1..];
        }
    }
    if s == b"0" {
        return Ok(0);
    }
    if s.is_empty() {
        return Err(invalid());
    }
    let mut d: u64 = 0;
    while !s.is_empty() {
        let (v, rest) = duration_term(s, orig)?;
        s = rest;
        d += v;
        if d > GO_MAX {
            return Err(invalid());
        }
    }
    if neg {
        return Ok((d as i64).wrapping_neg());
    }
    i64::try_from(d).map_err(|_| invalid())
}

/// Go's bound on a duration's magnitude while parsing: 1<<63 nanoseconds.
const GO_MAX: u64 = 1 << 63;

/// One `<decimal><unit>` term at the start of `s` of the Go duration `orig`: its
/// nanoseconds and what follows it, or Go's error text for the whole duration.
fn duration_term<'a>(s: &'a [u8], orig: &str) -> Result<(u64, &'a [u8]), String> {
    let invalid = || format!("time: invalid duration {}", go_time_quote(orig));
    if !(s[0] == b'.' || s[0].is_ascii_digit()) {
        return Err(invalid());
    }
    // [0-9]*
    let mut v: u64 = 0;
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if v > GO_MAX / 10 {
            return Err(invalid());
        }
        v = v * 10 + u64::from(s[i] - b'0');
        if v > GO_MAX {
            return Err(invalid());
        }
        i += 1;
    }
    let pre = i > 0;
    // (\.[0-9]*)?
    let (f, scale, post, s) = match s[i..].strip_prefix(b".") {
        Some(tail) => duration_fraction(tail),
        None => (0, 1.0, false, &s[i..]),
    };
    if !pre && !post {
        return Err(invalid());
    }
    let n = s.iter().position(|c| *c == b'.' || c.is_ascii_digit()).unwrap_or(s.len());
    if n == 0 {
        return Err(format!("time: missing unit in duration {}", go_time_quote(orig)));
    }
    let (u, rest) = s.split_at(n);
    let unit: u64 = match u {
        b"ns" => 1,
        b"us" | [0xc2, 0xb5, b's'] | [0xce, 0xbc, b's'] => 1_000, // us, µs (U+00B5), μs (U+03BC)
        b"ms" => 1_000_000,
        b"s" => 1_000_000_000,
        b"m" => 60_000_000_000,
        b"h" => 3_600_000_000_000,
        _ => {
            let u = String::from_utf8_lossy(u);
            return Err(format!("time: unknown unit {} in duration {}", go_time_quote(&u), go_time_quote(orig)));
        }
    };
    if v > GO_MAX / unit {
        return Err(invalid());
    }
    v *= unit;
    if f > 0 {
        // As Go: float64, nanosecond-accurate for fractions of hours.
        v += (f as f64 * (unit as f64 / scale)) as u64;
        if v > GO_MAX {
            return Err(invalid());
        }
    }
    Ok((v, rest))
}

/// The digits after a term's `.`: their value, its scale (10 per digit kept), whether there
/// were any, and what follows. Digits past int64 precision are dropped, as Go drops them.
fn duration_fraction(s: &[u8]) -> (u64, f64, bool, &[u8]) {
    let (mut f, mut scale, mut overflow) = (0u64, 1f64, false);
    let mut i = 0;
    while i < s.len() && s[i].is_ascii_digit() {
        if !overflow {
            if f > (GO_MAX - 1) / 10 {
                overflow = true;
            } else {
                let y = f * 10 + u64::from(s[i] - b'0');
                if y > GO_MAX {
                    overflow = true;
                } else {
                    f = y;
                    scale *= 10.0;
                }
            }
        }
        i += 1;
    }
    (f, scale, i > 0, &s[i..])
}

/// The `time` package's own `quote`: printable ASCII as is (`"` and `\\` escaped), every
/// other byte of a non-ASCII or control character as `\xNN`.
fn go_time_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        if (c as u32) < 0x20 || !c.is_ascii() {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("\\x{b:02x}"));
            }
        } else {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn known_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(11_017 * 86_400), "2000-03-01T00:00:00Z");
        assert_eq!(rfc3339(-1), "1969-12-31T23:59:59Z");
        assert_eq!(rfc3339(GO_ZERO_TIME_UNIX - 1), "0001-01-01T00:00:00Z", "clamped to Go's zero time");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z", "clamped to Go's last");
        assert_eq!(parse_rfc3339("9999-12-31T23:59:59Z"), Some(MAX_TIME_UNIX));
        assert_eq!(parse_rfc3339("0000-01-01T00:00:00+23:59"), Some(-62_167_219_200 - 86_340));
        assert_eq!(format_timestamp(-62_167_219_200, 0, false).as_deref(), Some("0000-01-01T00:00:00Z"));
        assert_eq!(format_timestamp(-62_167_219_201, 0, false), None, "year -1");
        assert_eq!(format_timestamp(MAX_TIME_UNIX + 1, 0, false), None, "year 10000");
        assert_eq!(format_timestamp(1, -1, true).as_deref(), Some("1970-01-01T00:00:00.999999Z"));
        assert_eq!(rfc3339(1_793_095_200), "2026-10-27T10:00:00Z");
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("2000-02-29T00:00:00Z"), Some(11_016 * 86_400));
        assert_eq!(parse_rfc3339("2024-02-29T23:59:59.5Z"), Some(1_709_251_199));
        assert_eq!(parse_rfc3339("2024-03-01T00:59:59+01:00"), Some(1_709_251_199));
        for bad in [
            "2024-02-29 23:59:59Z",
            "2024-13-01T00:00:00Z",
            "2024-00-01T00:00:00Z",
            "2023-02-29T00:00:00Z",
            "2100-02-29T00:00:00Z",
            "2024-04-31T00:00:00Z",
            "2024-04-00T00:00:00Z",
            "2024-12-31T23:59:60Z",
            "2024-12-31T24:00:00Z",
            "2024-12-31T23:60:00Z",
            "2024-12-31T23:59:59+24:00",
            "",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn durations_parse_and_fail_as_go_parses_them() {
        for (s, want) in [
            ("0", Ok(0)),
            ("-0", Ok(0)),
            ("1h30m", Ok(5_400_000_000_000)),
            ("1.5h", Ok(5_400_000_000_000)),
            (".5s", Ok(500_000_000)),
            ("-2µs", Ok(-2_000)),
            ("2562047h47m16.854775807s", Ok(i64::MAX)),
            ("-2562047h47m16.854775808s", Ok(i64::MIN)),
            ("2562047h47m16.854775808s", Err("time: invalid duration \"2562047h47m16.854775808s\"")),
            ("9223372036854775808ns", Err("time: invalid duration \"9223372036854775808ns\"")),
            ("", Err("time: invalid duration \"\"")),
            ("abc", Err("time: invalid duration \"abc\"")),
            (".s", Err("time: invalid duration \".s\"")),
            ("1", Err("time: missing unit in duration \"1\"")),
            ("1d", Err("time: unknown unit \"d\" in duration \"1d\"")),
            ("1é", Err("time: unknown unit \"\\xc3\\xa9\" in duration \"1\\xc3\\xa9\"")),
            ("1\"s", Err("time: unknown unit \"\\\"s\" in duration \"1\\\"s\"")),
        ] {
            assert_eq!(go_duration(s), want.map_err(str::to_string), "{s:?}");
        }
    }

    proptest! {
        #[test]
        fn any_duration_text_parses_or_fails_without_panicking(s in "[-+]?[0-9.]{0,22}(ns|us|µs|ms|s|m|h|d|)[0-9.]{0,5}[a-z]{0,2}") {
            let _ = go_duration(&s);
        }

        #[test]
        fn timestamps_round_trip(secs in GO_ZERO_TIME_UNIX..=MAX_TIME_UNIX, nanos in 0i32..1_000_000_000) {
            prop_assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs));
            let micro = format_timestamp(secs, nanos, true).unwrap();
            prop_assert_eq!(parse_timestamp(&micro), Some((secs, nanos / 1000 * 1000)));
        }
    }
}
