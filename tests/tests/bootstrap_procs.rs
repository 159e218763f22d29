//! Bootstrap outcomes with every rank a real process (the
//! `conformance_rank` binary): what each rank is told when the root's own
//! process exits at once, when a second process claims rank 0, and when
//! the root port is held by a program that is not an hccl-rs root. Each
//! child is killed if it outlives its bound.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use hccl_conformance::procs::{self, finish};

const BIN: &str = env!("CARGO_BIN_EXE_conformance_rank");

/// A free port, in a different range from tests/tcp.rs (which runs at the
/// same time).
fn free_port() -> u16 {
    procs::free_port(12_000..19_000)
}

fn spawn(port: u16, world: u32, rank: u32, timeout_s: &str) -> Child {
    Command::new(BIN)
        .env("HCCL_IF_IP", "127.0.0.1")
        .env("HCCL_CONNECT_TIMEOUT", timeout_s)
        .env("HCCL_EXEC_TIMEOUT", "30")
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("HCCL_SESSION_ID", format!("boot-{port}"))
        .env("HCCL_TEST_MODE", "fault")
        .env("HCCL_TEST_FAULT", "none")
        .env("RANK", rank.to_string())
        .env_remove("HCCL_BACKEND")
        .env_remove("HCCL_TEST_LINGER_MS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn conformance_rank")
}

/// The root's process exits as soon as its own rank has the timeout
/// verdict (no linger): every other joined rank must still get the
/// verdict, not "the root closed the connection".
#[test]
fn every_joined_rank_gets_the_verdict_when_the_roots_process_exits_at_once() {
    for attempt in 0..3 {
        let port = free_port();
        let kids: Vec<Child> = (0..5).map(|r| spawn(port, 6, r, "1")).collect();
        for (r, c) in kids.into_iter().enumerate() {
            let (code, out) = finish(c, Duration::from_secs(20));
            assert_eq!(code, Some(2), "attempt {attempt}, rank {r}:\n{out}");
            assert!(
                out.contains(
                    "INITERR bootstrap timed out after 1 s: 5 of 6 ranks connected, missing [5]"
                ),
                "attempt {attempt}, rank {r}:\n{out}"
            );
        }
    }
}

/// Waits until something listens on `port`.
fn wait_listening(port: u16) {
    let end = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "nothing listened on {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A second process with RANK=0 is told that rank 0 is already taken, not
/// only to pick another port; the first job still completes.
#[test]
fn a_second_rank_0_is_told_rank_0_is_taken() {
    let port = free_port();
    let first = spawn(port, 2, 0, "20");
    wait_listening(port);
    let (code, out) = finish(spawn(port, 2, 0, "20"), Duration::from_secs(20));
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("another hccl-rs root already listens there, so rank 0 is already taken"),
        "{out}"
    );
    let rank1 = spawn(port, 2, 1, "20");
    for (r, c) in [first, rank1].into_iter().enumerate() {
        let (code, out) = finish(c, Duration::from_secs(30));
        assert_eq!(code, Some(0), "rank {r}:\n{out}");
        assert!(out.contains("OPOK"), "rank {r}:\n{out}");
    }
}

/// A program that accepts on the root port and closes at once: the rank
/// says the listener closed the connection and is not an hccl-rs root.
#[test]
fn a_root_port_program_that_closes_is_named_as_not_a_root() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let closer = std::thread::spawn(move || {
        if let Ok((mut s, _)) = l.accept() {
            let mut b = [0u8; 64];
            let _ = s.read(&mut b);
            let _ = s.write_all(b"");
        }
    });
    let (code, out) = finish(spawn(port, 2, 1, "20"), Duration::from_secs(30));
    closer.join().unwrap();
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains(&format!(
            "the listener at 127.0.0.1:{port} closed the connection"
        )),
        "{out}"
    );
    assert!(!out.contains("raise HCCL_CONNECT_TIMEOUT"), "{out}");
}

/// Rank 0 calls `send_async`, drops the handle, destroys and exits at
/// once: rank 1 still gets every byte, and rank 0's destroy succeeds.
#[test]
fn an_async_send_then_destroy_and_exit_is_delivered() {
    let port = free_port();
    let kids: Vec<Child> = (0..2)
        .map(|r| {
            Command::new(BIN)
                .env("HCCL_IF_IP", "127.0.0.1")
                .env("HCCL_CONNECT_TIMEOUT", "20")
                .env("HCCL_EXEC_TIMEOUT", "20")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("WORLD_SIZE", "2")
                .env("HCCL_SESSION_ID", format!("send-async-{port}"))
                .env("HCCL_TEST_MODE", "send_async")
                .env("RANK", r.to_string())
                .env_remove("HCCL_BACKEND")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn conformance_rank")
        })
        .collect();
    let outs: Vec<_> = kids
        .into_iter()
        .map(|c| finish(c, Duration::from_secs(40)))
        .collect();
    assert_eq!(outs[0].0, Some(0), "rank 0:\n{}", outs[0].1);
    assert!(outs[0].1.contains("DESTROYOK"), "rank 0:\n{}", outs[0].1);
    assert_eq!(outs[1].0, Some(0), "rank 1:\n{}", outs[1].1);
    assert!(outs[1].1.contains("RECVOK"), "rank 1:\n{}", outs[1].1);
}
