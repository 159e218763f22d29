//! Fuzz the rank table parser: `cargo +nightly fuzz run rank_table`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/rank_table.rs");

fuzz_target!(|data: &[u8]| check_rank_table(data));
