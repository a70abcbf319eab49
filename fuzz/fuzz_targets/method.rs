#![no_main]
//! Fuzz target: see `warren_fuzz::method`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warren_fuzz::method(bytes::Bytes::copy_from_slice(data)));
