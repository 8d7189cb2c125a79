//! Fuzz the query-string parser (list/watch options, selectors, RVs, continue tokens inside
//! a query) and Accept negotiation: any input gives options or a 400 Status, never a panic.
#![no_main]

use kache::api::media::negotiate;
use kache::api::query::Options;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Err(status) = Options::parse(Some(s)) {
        assert_eq!(status.code, 400);
        assert!(!status.message.is_empty());
    }
    let _ = negotiate(Some(s), true);
    let _ = negotiate(Some(s), false);
});
