//! Fuzz the continue-token decoder: no panic, and a token that decodes encodes back to one
//! that decodes to the same position.
#![no_main]

use kache::api::token::Continue;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(c) = Continue::decode(s) {
        assert_eq!(Continue::decode(&c.encode()).as_ref(), Ok(&c));
    }
});
