#![no_main]
//! Fuzz target: see `warren_fuzz::content_header`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warren_fuzz::content_header(bytes::Bytes::copy_from_slice(data)));
