//! Fuzz scenario files (sim): `cargo +nightly fuzz run scenario_file`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/sim_common.rs");
include!("../bodies/scenario_file.rs");

fuzz_target!(|data: &[u8]| check_scenario_file(data));
