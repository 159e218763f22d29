//! Usage errors of `hccl plan`, `topo show`, `ranktable gen`, `sim` and
//! `workload`: a flag's bad value exits 2 with clap's usage line, as
//! `hccl test` and clap's own errors do (README: bad flags get the usage
//! line and status 2); a bad file or environment variable exits 1.

use std::process::{Command, Output};

fn hccl(args: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(args.split_whitespace())
        .env_remove("HCCL_ALGO")
        .output()
        .expect("run hccl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `cmd` exits 2 with `error: ` and each of `wants` on stderr, `usage`
/// among them, and nothing on stdout.
#[track_caller]
fn usage_error(cmd: &str, wants: &[&str]) {
    let o = hccl(cmd);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
    assert!(err.starts_with("error: "), "{cmd}: {err}");
    for want in wants {
        assert!(err.contains(want), "{cmd}: want {want:?} in {err}");
    }
    assert!(o.stdout.is_empty(), "{cmd}: {}", text(&o.stdout));
}

#[test]
fn plan_topo_and_ranktable_flag_values_are_usage_errors() {
    let plan = "Usage: hccl plan ";
    usage_error(
        "plan all_reduce --ranks 0 --count 1024",
        &["--ranks 0: plan at least one rank", plan],
    );
    usage_error(
        "plan all_reduce --ranks 100000000 --count 1024",
        &["--ranks 100000000 is more than hccl plan handles", plan],
    );
    usage_error(
        "plan all_reduce --ranks 8 --servers 3 --count 1024",
        &["--servers 3 does not divide --ranks 8", plan],
    );
    usage_error(
        "plan all_reduce --ranks 8 --count 1024 --algo nosuch",
        &["--algo \"nosuch\": unknown algorithm \"nosuch\"", plan],
    );
    usage_error(
        "plan nosuch --ranks 8 --count 1024",
        &["unknown collective \"nosuch\"", plan],
    );
    usage_error(
        "plan all_reduce --ranks 8 --count 1024 --dtype fp99",
        &["--dtype: ", "fp99", plan],
    );
    usage_error(
        "plan all_reduce --ranks 8 --count 1024 --rank 8",
        &["--rank 8 is outside the 8 ranks", plan],
    );
    usage_error(
        "plan broadcast --ranks 8 --count 1024 --root 8",
        &["root", plan],
    );
    usage_error(
        "plan alltoall --ranks 8 --count 1024 --algo ring",
        &["--algo ring: ", plan],
    );
    usage_error(
        "topo show --preset nosuch",
        &["unknown preset \"nosuch\"", "Usage: hccl topo show "],
    );
    usage_error(
        "topo show --preset atlas800t-a2 --servers 0",
        &["servers = 0", "Usage: hccl topo show "],
    );
    usage_error(
        "ranktable gen --servers 10.0.0.1 --devices 0 --device-ip-base 192.168.1.10",
        &["devices per server is 0", "Usage: hccl ranktable gen "],
    );
    usage_error(
        "ranktable gen --servers 10.0.0.1 --devices 8 --device-ip-base 255.255.255.250",
        &[
            "--device-ip-base 255.255.255.250",
            "Usage: hccl ranktable gen ",
        ],
    );
}

#[test]
fn files_and_the_environment_stay_exit_1_without_usage() {
    for cmd in [
        "topo show --rank-table /nonexistent/rt.json",
        "topo show --fabric /nonexistent/f.json",
        "ranktable check /nonexistent/rt.json",
    ] {
        let o = hccl(cmd);
        let err = text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{cmd}: {err}");
        assert!(!err.contains("Usage"), "{cmd}: {err}");
    }
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["plan", "all_reduce", "--ranks", "8", "--count", "1K"])
        .env("HCCL_ALGO", "level0:nosuch")
        .output()
        .expect("run hccl");
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("HCCL_ALGO") && err.contains("nosuch"), "{err}");
    assert!(!err.contains("Usage"), "{err}");
}

#[test]
fn negative_values_reach_the_flag_parsers() {
    let cases: &[(&str, &[&str])] = &[
        (
            "sim --collective all_reduce --count -1",
            &["'-1' for '--count", "a size is not negative"],
        ),
        (
            "sim --collective broadcast --count 1K --root -1",
            &["'-1' for '--root", "-1 is negative"],
        ),
        (
            "workload --profile resnet50 --topk-ratio -1",
            &["--topk-ratio", "-1", "Usage: hccl workload"],
        ),
        (
            "workload --profile resnet50 --batch -4",
            &["'-4' for '--batch", "-4 is negative"],
        ),
        (
            "plan all_reduce --ranks -1",
            &["'-1' for '--ranks", "-1 is negative"],
        ),
        (
            "plan all_reduce --ranks 8 --count -8K",
            &["'-8K' for '--count", "a size is not negative"],
        ),
        (
            "topo show --preset atlas800t-a2 --servers -2",
            &["'-2' for '--servers", "-2 is negative"],
        ),
        (
            "ranktable gen --servers 10.0.0.1 --devices -8",
            &["'-8' for '--devices", "-8 is negative"],
        ),
    ];
    for (cmd, wants) in cases {
        usage_error(cmd, wants);
        let err = text(&hccl(cmd).stderr);
        assert!(!err.contains("unexpected argument"), "{cmd}: {err}");
    }
}

/// `hccl workload` takes one of --profile and --file: its usage line and
/// the README's synopsis say so.
#[test]
fn workload_takes_a_profile_or_a_file_and_says_so() {
    let both = "Usage: hccl workload <--profile <PROFILE>|--file <FILE>>";
    usage_error(
        "workload --profile resnet50 --file w.json",
        &["cannot be used with", both],
    );
    usage_error("workload", &["required arguments were not provided", both]);
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../README.md"))
        .expect("README.md");
    let synopsis = "`hccl workload (--profile resnet50\\|gpt2\\|gpt3-xl \\| --file W.json) ";
    assert!(
        readme.contains(synopsis),
        "README's synopsis of hccl workload"
    );
    assert!(
        !readme.contains("[--file W.json]"),
        "README still has [--file W.json]"
    );
}
