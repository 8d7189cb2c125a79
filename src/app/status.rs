//! `kache status`: what a running kache's caches hold, from its admin listener's
//! `/debug/cache`, printed as a table for a person (`-o json` prints the document itself).

use crate::app::StartError;
use crate::config::StatusArgs;
use http_body_util::{BodyExt, Full};
use serde_json::Value;

/// Fetch `/debug/cache` from the admin listener at `admin` (`host:port` or an http URL).
pub async fn fetch(admin: &str) -> Result<Value, StartError> {
    let base = if admin.starts_with("http://") || admin.starts_with("https://") { admin.to_string() } else { format!("http://{admin}") };
    let url = format!("{}/debug/cache", base.trim_end_matches('/'));
    let bad = |why: String| StartError::Status(format!("--admin {admin}: {why}"));
    let uri: http::Uri = url.parse().map_err(|e| bad(format!("not an address: {e}")))?;
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new()).build_http::<Full<bytes::Bytes>>();
    let req = http::Request::get(uri).body(Full::default()).map_err(|e| bad(e.to_string()))?;
    let resp = tokio::time::timeout(std::time::Duration::from_secs(10), client.request(req))
        .await
        .map_err(|_| bad("no answer within 10 s".into()))?
        .map_err(|e| bad(format!("cannot reach it: {e}")))?;
    let status = resp.status();
    let body = resp.into_body().collect().await.map_err(|e| bad(e.to_string()))?.to_bytes();
    if !status.is_success() {
        return Err(bad(format!("/debug/cache answered {status}")));
    }
    serde_json::from_slice(&body).map_err(|e| bad(format!("/debug/cache is not JSON: {e}")))
}

fn mb(v: &Value) -> String {
    v.as_f64().map_or("-".into(), |b| format!("{:.1}M", b / 1_048_576.0))
}

fn secs(v: &Value) -> String {
    match v.as_f64() {
        None => "-".into(),
        Some(s) if s < 100.0 => format!("{s:.1}s"),
        Some(s) => format!("{:.0}s", s),
    }
}

/// The report as a table: one row per cache and encoding.
pub fn table(report: &Value) -> String {
    let mut rows = vec![[
        "RESOURCE",
        "ENCODING",
        "SYNCED",
        "OBJECTS",
        "BYTES",
        "RV",
        "LAST EVENT",
        "STALE",
        "WINDOW",
        "WINDOW BYTES",
        "SPAN",
        "WATCHES",
    ]
    .map(String::from)
    .to_vec()];
    rows.extend(report["caches"].as_array().into_iter().flatten().map(cache_row));
    let widths: Vec<usize> = (0..rows[0].len()).map(|i| rows.iter().map(|r| r[i].len()).max().unwrap_or(0)).collect();
    let up = &report["upstream"];
    let mut out = format!(
        "upstream: {}{}\n\n",
        if up["up"].as_bool().unwrap_or(false) { "up" } else { "DOWN" },
        up["detail"].as_str().filter(|d| !d.is_empty()).map(|d| format!(" ({d})")).unwrap_or_default()
    );
    for r in rows {
        let line: Vec<String> = r.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        out.push_str(line.join("  ").trim_end());
        out.push('\n');
    }
    // Requests answered from cache and passed through, by reason (the ones that happened).
    let passed: Vec<String> = report["passThrough"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
        .map(|(reason, n)| format!("{reason} {n}"))
        .collect();
    if let Some(hits) = report["cacheHits"].as_u64() {
        out.push_str(&format!(
            "\nanswered from cache: {hits}; passed through: {}\n",
            if passed.is_empty() { "none".into() } else { passed.join(", ") }
        ));
    }
    out
}

/// One cache's row of [`table`].
fn cache_row(c: &Value) -> Vec<String> {
    let group = c["group"].as_str().unwrap_or("");
    let resource = if group.is_empty() {
        c["resource"].as_str().unwrap_or("").to_string()
    } else {
        format!("{}.{group}", c["resource"].as_str().unwrap_or(""))
    };
    let w = &c["window"];
    // A kind still loading: its initial list's objects and bytes so far, not the (empty)
    // cache's.
    let loading = &c["loading"];
    let (synced, objects, bytes) = match loading["state"].as_str() {
        _ if c["refused"].is_string() => ("refused".into(), c["objects"].to_string(), mb(&c["bytes"])),
        Some("listing") => {
            let so_far = crate::cache::feed::thousands(loading["objects"].as_u64().unwrap_or(0));
            ("listing".into(), format!("{so_far} so far"), mb(&loading["bytes"]))
        }
        Some("waiting") => ("waiting".into(), "-".into(), "-".into()),
        _ => (c["synced"].as_bool().unwrap_or(false).to_string(), c["objects"].to_string(), mb(&c["bytes"])),
    };
    vec![
        resource,
        c["encoding"].as_str().unwrap_or("").to_string(),
        synced,
        objects,
        bytes,
        c["resourceVersion"].as_str().unwrap_or("").to_string(),
        secs(&c["lastEventAgeSeconds"]),
        secs(&c["staleSeconds"]),
        w["events"].to_string(),
        mb(&w["bytes"]),
        secs(&w["spanSeconds"]),
        c["watches"].to_string(),
    ]
}

/// `kache status`.
pub async fn run(args: &StatusArgs) -> Result<(), StartError> {
    let report = fetch(&args.admin).await?;
    let text = if args.json { serde_json::to_string_pretty(&report).unwrap_or_default() + "\n" } else { table(&report) };
    use std::io::Write;
    std::io::stdout().write_all(text.as_bytes()).map_err(StartError::write(std::path::Path::new("standard output")))?;
    Ok(())
}
