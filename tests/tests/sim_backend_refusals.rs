//! Under `HCCL_BACKEND=sim` the constructors that join ranks of other
//! processes refuse at once (the simulator has no wire) instead of
//! bootstrapping over TCP and timing out. Its own test binary: the
//! variables are process-wide.

use std::path::Path;

use hccl::comm::RootInfo;
use hccl::{Comm, CommError};

/// The refusal's full text.
const ADVICE: &str =
    "unsupported: HCCL_BACKEND=sim runs every rank in one process: use Comm::init_all";

/// Asserts that the constructor's result is the refusal.
fn refused(what: &str, r: Result<Comm, CommError>) {
    match r {
        Ok(_) => panic!("{what}: a communicator was built under HCCL_BACKEND=sim"),
        Err(e) => {
            assert!(matches!(e, CommError::Unsupported(_)), "{what}: {e:?}");
            assert_eq!(e.to_string(), ADVICE, "{what}");
            assert_eq!(e.hccl_result(), 5, "{what}: HCCL_E_NOT_SUPPORT");
        }
    }
}

#[test]
fn multi_process_constructors_refuse_the_simulator_backend() {
    std::env::set_var("HCCL_BACKEND", "sim");
    // A bootstrap that is wrongly tried fails within 1 s (as a timeout).
    std::env::set_var("HCCL_CONNECT_TIMEOUT", "1");
    std::env::set_var("HCCL_IF_IP", "127.0.0.1");
    let table = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/rank_table_1x8.json");

    refused("init_cluster_info", Comm::init_cluster_info(&table, 1));
    // Refused before the table is read: the backend is the reason.
    refused(
        "init_cluster_info(missing file)",
        Comm::init_cluster_info("nonexist.json", 1),
    );

    let root = RootInfo::new().expect("a root on loopback");
    refused("init_root_info", Comm::init_root_info(2, &root, 1));

    std::env::set_var("MASTER_ADDR", "127.0.0.1");
    std::env::set_var("WORLD_SIZE", "2");
    std::env::set_var("RANK", "1");
    refused("from_env", Comm::from_env());

    // The in-process constructor still runs on the simulator.
    let comms = Comm::init_all(2).expect("init_all on the simulator");
    assert_eq!(comms.len(), 2);
}
