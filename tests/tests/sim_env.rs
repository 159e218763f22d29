//! A user's program, unchanged, on a simulated cluster set up by the
//! environment only: `HCCL_BACKEND=sim` with `HCCL_SIM_PRESET`,
//! `HCCL_SIM_SERVERS`, `HCCL_SIM_FAULTS` and `HCCL_SIM_SEED`, the report
//! in `HCCL_FLIGHT_RECORDER_DIR`. One test per file: it sets the
//! process's environment.

use hccl::comm::ReduceOp;
use hccl::{Comm, CommError};

/// The user's program: a training loop of AllReduces.
fn train(c: Comm) -> Result<(), CommError> {
    let grads = vec![c.rank() as f32; 1024];
    let mut sum = vec![0.0f32; 1024];
    for _step in 0..20 {
        c.all_reduce(&grads, &mut sum, ReduceOp::Sum)?;
    }
    Ok(())
}

#[test]
fn the_environment_alone_runs_a_program_on_a_simulated_2x8_atlas_with_a_crash() {
    let dir = std::env::temp_dir().join(format!("hccl-simenv-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    std::fs::write(
        &plan,
        r#"{"faults": [{"kind": "crash", "rank": 5, "at_op": 17}]}"#,
    )
    .unwrap();
    std::env::set_var("HCCL_BACKEND", "sim");
    std::env::set_var("HCCL_SIM_PRESET", "atlas800t-a2");
    std::env::set_var("HCCL_SIM_SERVERS", "2");
    std::env::set_var("HCCL_SIM_FAULTS", &plan);
    std::env::set_var("HCCL_SIM_SEED", "5");
    std::env::set_var("HCCL_FLIGHT_RECORDER_DIR", &dir);

    let comms = Comm::init_all(16).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .map(|c| std::thread::spawn(move || train(c)))
        .collect();
    for (r, h) in hs.into_iter().enumerate() {
        match h.join().unwrap() {
            Err(CommError::Hang { report: h, .. }) => {
                let text = h.to_text();
                assert!(text.contains("rank 5 crashed"), "rank {r}: {text}");
                assert!(text.contains("in op #17"), "rank {r}: {text}");
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let report = dir.join(format!("hccl_sim_hang_{}.txt", std::process::id()));
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(text.contains("HCCL_SIM_SEED=5"), "{text}");

    // A bad value fails the constructor naming the variable and the value.
    std::env::set_var("HCCL_SIM_SEED", "five");
    let e = Comm::init_all(16).err().unwrap().to_string();
    assert!(e.contains("HCCL_SIM_SEED") && e.contains("five"), "{e}");
    std::env::set_var("HCCL_SIM_SEED", "5");
    std::env::set_var("HCCL_SIM_PRESET", "atlas-9000");
    let e = Comm::init_all(16).err().unwrap().to_string();
    assert!(
        e.contains("HCCL_SIM_PRESET") && e.contains("atlas-9000"),
        "{e}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
