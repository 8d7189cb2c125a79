//! The values flags take: Go durations, Kubernetes quantities of bytes, factors; and the
//! same forms written back for the defaults `--help` shows, which these parsers read back.

use std::time::Duration;

/// A Go duration (`time.ParseDuration`: `90s`, `1m30s`, `1.5h`, `300ms`; `0` alone), read
/// by the same parser as the apiserver's duration fields ([`crate::api::time::parse_go_duration`]).
/// Negative durations are refused: no kache setting takes one.
pub fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = crate::api::time::parse_go_duration(s.trim()).ok_or_else(|| "not a duration (e.g. 90s, 1m30s, 500ms)".to_string())?;
    let nanos = u64::try_from(nanos).map_err(|_| "a duration must not be negative".to_string())?;
    Ok(Duration::from_nanos(nanos))
}

/// A duration flag kept in whole seconds: a Go duration (`90s`, `1m30s`, `2h`), or a bare
/// number of seconds (`90`), the unit of its environment variable (`KACHE_..._SECONDS`).
pub fn seconds(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let d = parse_go_duration(s)?;
    if d.subsec_nanos() != 0 {
        return Err("this setting takes whole seconds".to_string());
    }
    Ok(d.as_secs())
}

/// A duration flag kept in whole milliseconds: a Go duration (`3s`, `1500ms`), or a bare
/// number of milliseconds (`3000`), the unit of its environment variable (`KACHE_..._MS`).
pub fn millis(s: &str) -> Result<u64, String> {
    if let Ok(n) = s.trim().parse::<u64>() {
        return Ok(n);
    }
    let d = parse_go_duration(s)?;
    if d.subsec_nanos() % 1_000_000 != 0 {
        return Err("this setting takes whole milliseconds".to_string());
    }
    u64::try_from(d.as_millis()).map_err(|_| "duration out of range".to_string())
}

/// A size flag: a Kubernetes quantity of bytes (`32Mi`, `1.5Gi`, `500M`), or a bare number
/// of bytes (`1024`), the unit of its environment variable (`KACHE_..._BYTES`).
pub fn bytes(s: &str) -> Result<u64, String> {
    crate::api::quantity::whole(s.trim()).map_err(|e| e.to_string())
}

/// [`bytes`] for a size kept as a `usize`.
pub fn bytes_usize(s: &str) -> Result<usize, String> {
    usize::try_from(bytes(s)?).map_err(|_| "too large".to_string())
}

/// A finite number at least 0 (a factor).
pub fn non_negative(v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(f) if f.is_finite() && f >= 0.0 => Ok(f),
        Ok(_) => Err(format!("{v} is not a finite number at least 0")),
        Err(e) => Err(e.to_string()),
    }
}

/// `d` as Go writes a duration (`time.Duration.String()`: `30s`, `1m0s`, `1m30s`, `1.5s`).
pub fn go_duration_text(d: Duration) -> String {
    crate::api::time::format_go_duration(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// A number of seconds as [`go_duration_text`] writes it.
pub fn seconds_text(secs: u64) -> String {
    go_duration_text(Duration::from_secs(secs))
}

/// A number of milliseconds as [`go_duration_text`] writes it.
pub fn millis_text(ms: u64) -> String {
    go_duration_text(Duration::from_millis(ms))
}

/// A number of bytes as a quantity with a binary suffix where one fits (`32Mi`).
pub fn bytes_text(n: u64) -> String {
    crate::api::quantity::binary(n)
}
