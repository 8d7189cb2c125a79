//! Fuzz the request classifier: path classification, authorization attributes (RequestInfo)
//! for every method and the 403 text built from them, and impersonation header parsing.
#![no_main]

use kache::api::route::classify;
use kache::auth::{impersonate, Attributes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    let (path, query) = s.split_once('?').map_or((s, None), |(p, q)| (p, Some(q)));
    let _ = classify(path);
    for m in [http::Method::GET, http::Method::POST, http::Method::PUT, http::Method::PATCH, http::Method::DELETE] {
        let a = Attributes::of(&m, path, query);
        let status = a.forbidden("u", "");
        assert_eq!(status.code, 403);
    }
    let mut headers = http::HeaderMap::new();
    for line in s.lines() {
        if let Some((k, v)) = line.split_once(':') {
            if let (Ok(k), Ok(v)) = (http::HeaderName::from_bytes(k.trim().as_bytes()), http::HeaderValue::from_str(v.trim())) {
                headers.append(k, v);
            }
        }
    }
    if let Ok(Some(r)) = impersonate::requested(&headers) {
        let id = r.identity();
        let _ = r.checks();
        let mut out = http::HeaderMap::new();
        if impersonate::write(&mut out, &id).is_ok() {
            assert_eq!(impersonate::requested(&out).ok().flatten().map(|r| r.identity()), Some(id));
        }
    }
});
