//! Fuzz the TCP wire decoders (frame headers, control messages, bodies):
//! `cargo +nightly fuzz run tcp_frame`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/tcp_frame.rs");

fuzz_target!(|data: &[u8]| check_tcp_frame(data));
