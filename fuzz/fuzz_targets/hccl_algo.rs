//! Fuzz HCCL_ALGO values (algos): `cargo +nightly fuzz run hccl_algo`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/hccl_algo.rs");

fuzz_target!(|data: &[u8]| check_hccl_algo(data));
