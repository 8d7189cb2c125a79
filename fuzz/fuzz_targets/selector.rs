//! Fuzz the label and field selector parsers: no panic, and a parsed selector printed back
//! parses again to the same selector.
#![no_main]

use kache::api::selector::{FieldSelector, LabelSelector};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else { return };
    if let Ok(l) = LabelSelector::parse(s) {
        let again = LabelSelector::parse(&l.to_string()).expect("a printed label selector parses");
        assert_eq!(again.to_string(), l.to_string());
    }
    if let Ok(f) = FieldSelector::parse(s) {
        let again = FieldSelector::parse(&f.to_string()).expect("a printed field selector parses");
        assert_eq!(again.to_string(), f.to_string());
    }
});
