#![no_main]
//! Fuzz target: see `waitingroom_fuzz::visitor_request`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::visitor_request(data));
