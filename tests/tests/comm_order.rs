//! Issue 13 item 4: two communicators called in different orders on
//! different ranks (blocking calls): every op has the same outcome on
//! every rank, and the timeout names the communicators and ops each rank
//! is blocked in. Its own test binary: `HCCL_EXEC_TIMEOUT` is process-wide.

use hccl::comm::{BackendKind, ReduceOp};
use hccl::Comm;

/// Rank 0 calls AllReduce on `world` then on its split, rank 1 the other
/// way round. Returns per rank the (communicator, outcome) of its two calls.
fn crossed(backend: BackendKind) -> Vec<Vec<(String, Result<(), String>)>> {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let hs: Vec<_> = Comm::init_all_on(backend, 2)
        .unwrap()
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                let sub = c.split(Some(0), c.rank()).unwrap().unwrap();
                let order = if c.rank() == 0 {
                    [&c, &sub]
                } else {
                    [&sub, &c]
                };
                order
                    .iter()
                    .map(|comm| {
                        let r = comm.all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum);
                        (comm.name().to_string(), r.map_err(|e| e.to_string()))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

fn check(backend: BackendKind) {
    let out = crossed(backend);
    // The same op (same communicator) has one outcome on both ranks.
    for (name, r0) in &out[0] {
        let (_, r1) = out[1].iter().find(|(n, _)| n == name).unwrap();
        assert_eq!(
            r0.is_ok(),
            r1.is_ok(),
            "{backend:?} {name}: {r0:?} vs {r1:?}"
        );
    }
    // The first rank to time out names the communicator the other rank
    // is blocked in, and says why. (Once it has failed, it calls the other
    // communicator, which may then complete on both ranks.)
    let mut timed_out = 0;
    for (r, calls) in out.iter().enumerate() {
        let (mine, Err(e)) = &calls[0] else { continue };
        if !e.contains("timed out") {
            continue;
        }
        timed_out += 1;
        let theirs = &out[1 - r][0].0;
        assert!(
            e.contains(&format!("comm '{mine}' AllReduce #"))
                && e.contains(&format!("comm '{theirs}' AllReduce #"))
                && e.contains("different orders"),
            "{backend:?} rank {r}: {e}"
        );
    }
    assert!(timed_out > 0, "{backend:?}: no rank timed out: {out:?}");
}

#[test]
fn crossed_communicators_fail_alike_naming_both_on_tcp() {
    check(BackendKind::Tcp);
}

#[test]
fn crossed_communicators_fail_alike_naming_both_on_sim() {
    check(BackendKind::Sim);
}

/// Issue 13 item 3: two of eight ranks never call the op; every waiting
/// rank's timeout names those two and the six that arrived, with the
/// communicator and the op's seq, on both backends.
fn two_never_call(backend: BackendKind) {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "1");
    let hs: Vec<_> = Comm::init_all_on(backend, 8)
        .unwrap()
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || {
                if c.rank() >= 6 {
                    // Stays a member (a dropped one is a lost peer).
                    std::thread::sleep(std::time::Duration::from_millis(2500));
                    return None;
                }
                let r = c.all_reduce(&[1.0f32; 4], &mut [0.0; 4], ReduceOp::Sum);
                Some(r.map_err(|e| e.to_string()))
            })
        })
        .collect();
    let out: Vec<_> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    for (r, o) in out.iter().take(6).enumerate() {
        let e = o.clone().unwrap().unwrap_err();
        assert!(
            e.contains("comm 'world' AllReduce #0")
                && e.contains(
                    "ranks [6, 7], which never called the op (arrived: ranks [0, 1, 2, 3, 4, 5]"
                ),
            "{backend:?} rank {r}: {e}"
        );
    }
}

#[test]
fn a_timeout_names_the_ranks_that_never_called_on_tcp() {
    two_never_call(BackendKind::Tcp);
}

#[test]
fn a_timeout_names_the_ranks_that_never_called_on_sim() {
    two_never_call(BackendKind::Sim);
}
