//! Fuzz fault plans (sim): `cargo +nightly fuzz run fault_plan`.
#![no_main]

use libfuzzer_sys::fuzz_target;

include!("../bodies/sim_common.rs");
include!("../bodies/fault_plan.rs");

fuzz_target!(|data: &[u8]| check_fault_plan(data));
