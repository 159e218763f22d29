//! `hccl test --transport ascend` (`--features ascend`): `--spawn 2` rank
//! processes find CANN through `ASCEND_HOME_PATH`, as after CANN's
//! `set_env.sh`, here pointing at hccl-rs's own prefix (`hccl-capi
//! install`, the cdylib cargo built for this test), and run the sweep in
//! both modes with every row checked.
#![cfg(feature = "ascend")]

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

/// The prefix, laid out once per test process (the tests run at once).
fn prefix() -> PathBuf {
    static PREFIX: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    PREFIX
        .get_or_init(|| {
            // cargo builds the dev-dependency's cdylib into deps/.
            let exe = std::env::current_exe().unwrap();
            let lib = exe.parent().unwrap().join("libhccl_capi.so");
            let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
                .join(format!("ascend-cli-prefix-{}", std::process::id()));
            hccl_capi::prefix::install(&dir, &lib).unwrap()
        })
        .clone()
}

/// `hccl test all_reduce -b 8K -e MAX [extra] --transport ascend --spawn 2`
/// with CANN found through `ASCEND_HOME_PATH=home`, on loopback, with no
/// launcher's variables and none of the settings these tests vary.
fn spawn_2(home: &Path, max: &str, extra: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl"));
    c.args(["test", "all_reduce", "-b", "8K", "-e", max])
        .args(extra)
        .args(["--transport", "ascend", "--spawn", "2"])
        .env("ASCEND_HOME_PATH", home)
        .env_remove("ASCEND_TOOLKIT_HOME")
        .env("HCCL_IF_IP", "127.0.0.1")
        .env("HCCL_EXEC_TIMEOUT", "60")
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_BACKEND");
    for v in common::LAUNCHER_VARS {
        c.env_remove(v);
    }
    c
}

#[test]
fn transport_ascend_runs_the_sweep_on_the_library_set_env_sh_names() {
    let p = prefix();
    for mode in ["native", "schedule"] {
        let mut c = spawn_2(&p, "64K", &["-f", "8"]);
        c.env("HCCL_ASCEND_MODE", mode);
        let o = c.output().unwrap();
        let (out, err) = (
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr),
        );
        assert_eq!(o.status.code(), Some(0), "{mode}:\n{out}\n{err}");
        assert!(out.contains("Ascend backend (CANN's HCCL)"), "{out}");
        assert!(
            out.contains(&format!("MEASURED on CANN's HCCL ({mode} mode")),
            "{out}"
        );
        // Native mode: HCCL picks the algorithm, so the column says so.
        let row = out.lines().find(|l| l.trim_start().starts_with("8192 "));
        let row = row.unwrap_or_default();
        assert_eq!(
            row.contains("HCCL's own"),
            mode == "native",
            "{mode}: {row}"
        );
        assert!(out.contains("--transport ascend"), "{out}");
        assert!(!out.contains("FAILED"), "{out}");
        // 8 KiB and 64 KiB rows.
        assert!(
            out.lines().any(|l| l.trim_start().starts_with("8192 ")),
            "{out}"
        );
        assert!(
            out.lines().any(|l| l.trim_start().starts_with("65536 ")),
            "{out}"
        );
    }
}

#[test]
fn transport_ascend_without_cann_says_where_it_looked() {
    let empty = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ascend-cli-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = spawn_2(&empty, "8K", &[]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("libhccl.so not found in $ASCEND_HOME_PATH/lib64"),
        "{err}"
    );
    assert!(err.contains("set_env.sh"), "{err}");
    // Every rank fails alike: the error is printed once, for both.
    assert_eq!(err.matches("libhccl.so not found").count(), 1, "{err}");
    assert!(err.contains("[ranks 0-1] error: "), "{err}");
}

#[test]
fn hccl_backend_ascend_with_the_own_library_names_the_variable_not_a_data_type() {
    // hccl-rs's own libhccl.so reads HCCL_BACKEND too and runs only on tcp
    // or sim: its HcclCommInitRootInfo returned HCCL_E_NOT_SUPPORT, which
    // was explained as a data type this CANN does not take.
    let p = prefix();
    let mut c = spawn_2(&p, "8K", &[]);
    c.env("HCCL_BACKEND", "ascend");
    let o = c.output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("HCCL_BACKEND=\"ascend\": "), "{err}");
    assert!(err.contains("is hccl-rs's own libhccl.so"), "{err}");
    assert!(err.contains("leave HCCL_BACKEND unset"), "{err}");
    assert!(!err.contains("data type"), "{err}");
    assert_eq!(
        err.matches("is hccl-rs's own libhccl.so").count(),
        1,
        "{err}"
    );
}
