//! `hccl sim` end to end: exit codes of bad flag values (2, with the
//! usage line, as `hccl test`) and of bad files (1, one line).

use std::process::{Command, Output};

fn hccl_sim(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hccl"))
        .arg("sim")
        .args(args)
        .env_remove("HCCL_ALGO")
        .output()
        .expect("run hccl")
}

#[test]
fn a_bad_flag_value_exits_2_with_the_usage_line() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["--collective", "broadcast", "--count", "1K", "--root", "9"],
            "broadcast: root = 9 is outside",
        ),
        (
            &[
                "--collective",
                "all_reduce",
                "--count",
                "8",
                "--dtype",
                "fp99",
            ],
            "--dtype \"fp99\": unknown data type",
        ),
        (
            &["--collective", "all_reduc", "--count", "8"],
            "--collective \"all_reduc\": unknown collective",
        ),
        (
            &["--collective", "send_recv", "--count", "1K"],
            "use hccl test send_recv",
        ),
        (
            &[
                "--collective",
                "all_reduce",
                "--count",
                "8",
                "--preset",
                "dgx",
            ],
            "dgx",
        ),
    ];
    for (args, want) in cases {
        let o = hccl_sim(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        assert!(err.contains("Usage: hccl sim"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn a_bad_file_exits_1_without_the_usage_line() {
    let o = hccl_sim(&["--scenario", "nonexist.json"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: ") && err.contains("nonexist.json"),
        "{err}"
    );
    assert!(!err.contains("Usage:"), "{err}");
}
