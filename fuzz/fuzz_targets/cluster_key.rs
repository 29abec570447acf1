#![no_main]
//! Fuzz target: see `waitingroom_fuzz::cluster_key`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::cluster_key(data));
