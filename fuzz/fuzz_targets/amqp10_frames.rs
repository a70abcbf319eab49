#![no_main]
//! Fuzz target: see `warren_fuzz::amqp10_frames`.

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| warren_fuzz::amqp10_frames(data));
