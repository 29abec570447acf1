#![no_main]
//! Fuzz target: see `waitingroom_fuzz::peer_auth`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::peer_auth(data));
