//! `hccl ranktable check` on tables written by tools: unknown keys, strict
//! mode, and files of another layout.

use std::path::PathBuf;
use std::process::{Command, Output};

fn check(name: &str, text: &str, strict: bool) -> Output {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ranktable_cli");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl"));
    c.args(["ranktable", "check"]).arg(&path);
    if strict {
        c.arg("--strict");
    }
    c.output().expect("run hccl")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

const WITH_POD_FIELDS: &str = r#"{"status":"completed","version":"1.0","server_count":"1",
  "server_list":[{"server_id":"node-a","pod_name":"worker-0","device":[
    {"device_id":"0","device_ip":"192.0.2.1","rank_id":"0"}]}]}"#;

#[test]
fn unknown_keys_are_a_note_and_strict_rejects_them() {
    let o = check("pod.json", WITH_POD_FIELDS, false);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o.stderr));
    let out = text(&o.stdout);
    assert!(out.contains("valid rank table v1.0: 1 ranks"), "{out}");
    assert!(
        out.contains("ignored keys outside HCCL's rank table format")
            && out.contains("server_list[0].pod_name"),
        "{out}"
    );
    // Said once, as the note: not also as a log line.
    let err = text(&o.stderr);
    assert!(!err.contains("pod_name"), "{err}");
    let o = check("pod.json", WITH_POD_FIELDS, true);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(
        err.contains("server_list[0].pod_name")
            && err.contains("not a key of HCCL's rank table format"),
        "{err}"
    );
}

#[test]
fn the_guides_cluster_shape_is_named_with_how_to_write_format_1_0() {
    let guide = r#"{"cluster":[{"server":"10.0.0.5","rank_list":[{"rank_id":"0"}],
        "host_nic_info":{"ip":"10.0.0.5"},"npu_info":[{"device_id":"0"}]}]}"#;
    let o = check("guide.json", guide, false);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o.stdout));
    let err = text(&o.stderr);
    assert!(err.contains("HCCL never reads as a rank table"), "{err}");
    assert!(
        err.contains("format 1.0") && err.contains("server_list"),
        "{err}"
    );
    assert!(!err.contains("missing field"), "{err}");
}
