#![no_main]
//! Fuzz target: see `waitingroom_fuzz::peer_values`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::peer_values(data));
