//! The conformance cases on the CANN of the environment (`source
//! set_env.sh` first: `ASCEND_HOME_PATH`), in both modes of the Ascend
//! backend, on every NPU the process sees (at most 8). Without a CANN it
//! prints why and passes, unless `REQUIRE_ASCEND=1`, where it fails, so a
//! run meant for a device never skips silently:
//! `REQUIRE_ASCEND=1 cargo test -p hccl-capi --features ascend --test ascend_env`.
//! Its own test binary: nothing else loads a `libhccl.so` first (a loaded
//! library of that soname would answer the system-path search).
#![cfg(feature = "ascend")]

use hccl::comm::{AscendMode, AscendSettings};
use hccl::Comm;
use hccl_ascend_sys::Library;

#[test]
fn the_cann_of_the_environment_runs_the_conformance_cases() {
    let required = std::env::var("REQUIRE_ASCEND").is_ok_and(|v| v == "1");
    let lib = match Library::load() {
        Ok(l) => l,
        Err(e) if !required && e.is_missing_library() => {
            eprintln!(
                "skipped: no CANN in the environment ({e}); REQUIRE_ASCEND=1 makes this a failure"
            );
            return;
        }
        Err(e) => panic!("REQUIRE_ASCEND=1 or a broken CANN: {e}"),
    };
    lib.init().unwrap();
    let n = lib.device_count().unwrap().min(8);
    assert!(n >= 1, "no NPU visible (npu-smi info)");
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        let s = AscendSettings {
            library_dir: None,
            mode,
        };
        let comms = Comm::init_all_ascend(n, &s).unwrap();
        let fails = hccl_conformance::on_comms(comms, hccl_conformance::run_all);
        for (r, bad) in fails.iter().enumerate() {
            assert!(bad.is_empty(), "{mode:?} rank {r}: {bad:#?}");
        }
    }
}
