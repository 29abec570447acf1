#![no_main]
//! Fuzz target: see `waitingroom_fuzz::replay_cache`.

libfuzzer_sys::fuzz_target!(|data: &[u8]| waitingroom_fuzz::replay_cache(data));
