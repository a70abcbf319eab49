#![no_main]
//! Fuzz target: see `warren_fuzz::field_table`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warren_fuzz::field_table(bytes::Bytes::copy_from_slice(data)));
