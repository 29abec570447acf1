#![no_main]
//! Fuzz target: see `waitingroom_fuzz::tokens`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::tokens(data));
