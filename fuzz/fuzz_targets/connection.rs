#![no_main]
//! Fuzz target: see `warren_fuzz::connection`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warren_fuzz::connection(data));
