//! `hccl sim --replay DIR` on dumps a real run wrote: a program over TCP
//! (threads of this process) with a fault, its flight recorder dumping to
//! `HCCL_FLIGHT_RECORDER_DIR`, then the replay on the simulator naming the
//! same cause. One test per file: it sets the process's environment.

use std::path::Path;
use std::process::Command;

use hccl::comm::{BackendKind, ReduceOp};
use hccl::Comm;

/// Three TCP ranks call 3 AllReduces; `fault(rank, op)` says what a rank
/// does instead at an op: `Some(count)` another count, `None` go away
/// (drop its communicator, as a killed process does).
fn run(dir: &Path, fault: fn(u32, usize) -> Option<Option<usize>>) {
    std::env::set_var("HCCL_FLIGHT_RECORDER_DIR", dir);
    let comms = Comm::init_all_on(BackendKind::Tcp, 3).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                for i in 0..3 {
                    let count = match fault(c.rank(), i) {
                        Some(Some(n)) => n,
                        Some(None) => return,
                        None => 1024,
                    };
                    let send = vec![1.0f32; count];
                    let mut recv = vec![0.0f32; count];
                    if c.all_reduce(&send, &mut recv, ReduceOp::Sum).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}

fn replay(dir: &Path) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["sim", "--replay"])
        .arg(dir)
        .env_remove("HCCL_ALGO")
        .output()
        .expect("run hccl");
    let text =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

#[test]
fn replays_of_real_dumps_name_the_runs_cause() {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "3");
    let base = std::env::temp_dir().join(format!("hccl-replay-cli-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);

    // Rank 1 calls the second AllReduce with 512 elements.
    let dir = base.join("mismatch");
    run(&dir, |r, i| (r == 1 && i == 1).then_some(Some(512)));
    let (code, out) = replay(&dir);
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("rank 1 called op #1"), "{out}");
    assert!(
        out.contains("EI0005") && out.contains("count differs"),
        "{out}"
    );

    // Rank 2 is gone before the second AllReduce: it leaves no dump.
    let dir = base.join("lost");
    run(&dir, |r, i| (r == 2 && i == 1).then_some(None));
    let (code, out) = replay(&dir);
    assert_eq!(code, Some(4), "{out}");
    assert!(out.contains("rank 2 left no dump"), "{out}");
    assert!(out.contains("rank 2 crashed"), "{out}");

    // hccl doctor --replay on the dumps of a real run whose rank 1 called
    // its two communicators in the other order (examples/flight/swap,
    // copied: the replay writes its files next to the dumps).
    let swap = base.join("swap");
    std::fs::create_dir_all(&swap).unwrap();
    let src = concat!(env!("CARGO_MANIFEST_DIR"), "/../examples/flight/swap");
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, swap.join(p.file_name().unwrap())).unwrap();
    }
    let out = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .arg("doctor")
        .arg(&swap)
        .args(["--replay", "--seed", "2"])
        .env_remove("HCCL_ALGO")
        .output()
        .expect("run hccl");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(4), "{text}");
    assert!(
        text.contains("communicators entered in different orders"),
        "{text}"
    );
    let replay = text
        .split("== replay on the simulator ==")
        .nth(1)
        .unwrap_or("");
    assert!(replay.contains("wait cycle across communicators"), "{text}");
    assert!(replay.contains("--seed 2"), "{text}");
    let _ = std::fs::remove_dir_all(&base);
}
