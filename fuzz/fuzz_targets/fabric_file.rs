//! Fuzz fabric files (topology, then a short simulation): `cargo +nightly fuzz run fabric_file`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/sim_common.rs");
include!("../bodies/fabric_file.rs");

fuzz_target!(|data: &[u8]| check_fabric_file(data));
