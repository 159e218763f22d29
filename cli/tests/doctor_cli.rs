//! `hccl doctor` end to end on dumps of a real TCP run
//! (`examples/flight/swap`: rank 1 called its two communicators in the
//! other order): the cause in text and JSON, exit 4; a directory without
//! dumps is an error naming `HCCL_FLIGHT_RECORDER_DIR`, exit 1; a file
//! whose last line was cut short is read up to it, with a warning.

use std::process::{Command, Output};

fn doctor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_hccl"))
        .arg("doctor")
        .args(args)
        .output()
        .expect("run hccl")
}

const SWAP: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/flight/swap");

#[test]
fn the_swapped_communicators_are_named_in_text_and_json() {
    let out = doctor(&[SWAP]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("communicators entered in different orders: world rank 0 waits in comm 'world' #4, world rank 1 waits in comm 'world/split1/color0' #1"),
        "{text}"
    );
    assert!(
        text.contains("  0 -> 1  comm 'world' #4 never_called"),
        "{text}"
    );
    let out = doctor(&[SWAP, "--json"]);
    assert_eq!(out.status.code(), Some(4));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["root_causes"][0]["cause"], "communicator_cycle", "{v}");
    assert_eq!(v["root_causes"][0]["ranks"], serde_json::json!([0, 1]));
}

#[test]
fn a_directory_without_dumps_is_an_error() {
    let dir = std::env::temp_dir().join(format!("hccl-doctor-empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let out = doctor(&[dir.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no flight-recorder dumps"), "{err}");
    assert!(err.contains("HCCL_FLIGHT_RECORDER_DIR="), "{err}");
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn a_dump_whose_last_line_was_cut_is_read_up_to_it_with_a_warning() {
    let dir = std::env::temp_dir().join(format!("hccl-doctor-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for e in std::fs::read_dir(SWAP).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, dir.join(p.file_name().unwrap())).unwrap();
    }
    // Rank 0's world dump (6 lines), its last line cut in the middle.
    let cut = dir.join("hccl_flight_world_rank0_14702.jsonl");
    let text = std::fs::read_to_string(&cut).unwrap();
    let keep = text.trim_end().len() - 25;
    std::fs::write(&cut, &text[..keep]).unwrap();
    let out = doctor(&[dir.to_str().unwrap()]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    // Not the parse error (exit 1): 0 or 4, as the records read tell.
    assert!(matches!(out.status.code(), Some(0 | 4)), "{stdout}\n{err}");
    assert!(
        err.contains(&format!(
            "warning: {}:6: the last line is cut short",
            cut.display()
        )),
        "{err}"
    );
    assert!(
        stdout.starts_with("hccl doctor: 4 dump(s) of 2 communicator(s)"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
