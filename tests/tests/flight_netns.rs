//! A cut link between two hosts, for real: each rank runs in a network
//! namespace of its own (`ip netns`, a veth pair, addresses of the
//! benchmarking range 198.18.0.0/15 that exist only inside those
//! namespaces) with a host name of its own (`unshare --uts`), so
//! `HCCL_IF_IP` picks a real interface. Mid-run the link goes down (`ip
//! link set ... down`: no RST arrives, the peer just goes silent); both
//! ranks time out within `HCCL_EXEC_TIMEOUT`, dump, and `hccl doctor`
//! names a dead link between the two named hosts. The replay of those
//! dumps (`hccl doctor DIR --replay`'s scenario and fault plan, on a full
//! mesh of two) hangs on a dead link between the same two ranks, built
//! from the library and end to end as `hccl sim --replay DIR` (the
//! command line's own path), whose written files reproduce its report.
//!
//! Needs root and iproute2: skipped with a printed reason where the
//! namespaces cannot be made, except under CI (`CI=true`), where it fails.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hccl::flight::doctor::Cause;
use hccl::flight::{self};
use hccl_conformance::procs::finish;
use hccl_sim::faults::run_with_faults;
use hccl_sim::hang::RootCause;
use hccl_topology::{build_preset, Preset};

const BIN: &str = env!("CARGO_BIN_EXE_flight_rank");

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| format!("ip {}: {e}", args.join(" ")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Two namespaces joined by a veth pair; deleted on drop.
struct Net {
    ns: [String; 2],
    dev: [String; 2],
    addr: [String; 2],
}

impl Net {
    fn new() -> Result<Net, String> {
        let id = std::process::id() % 10_000;
        let net = Net {
            ns: [format!("hccl-fr{id}a"), format!("hccl-fr{id}b")],
            dev: [format!("hfr{id}a"), format!("hfr{id}b")],
            addr: [
                format!("198.18.{}.1", id % 250),
                format!("198.18.{}.2", id % 250),
            ],
        };
        for n in &net.ns {
            ip(&["netns", "add", n])?;
        }
        ip(&[
            "link",
            "add",
            &net.dev[0],
            "netns",
            &net.ns[0],
            "type",
            "veth",
            "peer",
            "name",
            &net.dev[1],
            "netns",
            &net.ns[1],
        ])?;
        for i in 0..2 {
            let ns = &net.ns[i];
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&[
                "-n",
                ns,
                "addr",
                "add",
                &format!("{}/24", net.addr[i]),
                "dev",
                &net.dev[i],
            ])?;
            ip(&["-n", ns, "link", "set", &net.dev[i], "up"])?;
        }
        Ok(net)
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        for n in &self.ns {
            let _ = ip(&["netns", "del", n]);
        }
    }
}

/// Rank `rank` of the `loop` job in namespace `ns`, host `host`.
fn spawn(net: &Net, dir: &PathBuf, rank: usize, host: &str) -> Child {
    let script = format!("hostname {host} && exec {BIN}");
    Command::new("ip")
        .args([
            "netns",
            "exec",
            &net.ns[rank],
            "unshare",
            "--uts",
            "sh",
            "-c",
            &script,
        ])
        .env("HCCL_IF_IP", &net.addr[rank])
        .env("HCCL_CONNECT_TIMEOUT", "20")
        .env("HCCL_EXEC_TIMEOUT", "1")
        .env("MASTER_ADDR", &net.addr[0])
        .env("MASTER_PORT", "29517")
        .env("WORLD_SIZE", "2")
        .env("RANK", rank.to_string())
        .env("HCCL_TEST_FAULT", "loop")
        .env("HCCL_TEST_MARK", dir.join(format!("running{rank}")))
        .env(flight::ENV_DIR, dir)
        .env_remove(flight::ENV_ENTRIES)
        .env_remove("HCCL_BACKEND")
        .env_remove("HCCL_SOCKET_IFNAME")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn ip netns exec")
}

#[test]
fn a_link_cut_mid_run_is_named_as_a_dead_link_between_the_two_hosts() {
    let net = match Net::new() {
        Ok(n) => n,
        Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
            panic!("CI must run the network-namespace test (as root, with iproute2): {e}")
        }
        Err(e) => {
            eprintln!(
                "skipped: cannot make network namespaces here ({e}); run as root with iproute2"
            );
            return;
        }
    };
    let dir = std::env::temp_dir().join(format!("hccl-netns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let r0 = spawn(&net, &dir, 0, "node-a");
    let r1 = spawn(&net, &dir, 1, "node-b");
    // Once both run ops, cut the link under them.
    let end = std::time::Instant::now() + Duration::from_secs(15);
    while !(0..2).all(|r| dir.join(format!("running{r}")).exists()) {
        assert!(
            std::time::Instant::now() < end,
            "the ranks never started their ops"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    ip(&["-n", &net.ns[1], "link", "set", &net.dev[1], "down"]).unwrap();
    let (c0, out0) = finish(r0, Duration::from_secs(15));
    let (c1, out1) = finish(r1, Duration::from_secs(15));
    assert_eq!(
        (c0, c1),
        (Some(3), Some(3)),
        "rank 0:\n{out0}\nrank 1:\n{out1}"
    );
    assert!(out0.contains("timed out after 1 s"), "{out0}");
    let dumps = flight::read_dumps(&dir).unwrap();
    let d = flight::diagnose(dumps.clone());
    let text = d.to_text();
    eprintln!("{text}");
    let hosts = [String::from("node-a"), String::from("node-b")];
    assert!(
        d.root_causes
            .iter()
            .any(|c| matches!(c, Cause::DeadLink { ranks: [0, 1], hosts: h, .. } if *h == hosts)),
        "{text}"
    );
    assert!(
        text.contains("check the network between node-a (rank 0) and node-b (rank 1)"),
        "{text}"
    );
    replay_names_the_link(&dumps);
    cli_replay_names_the_link(&dir);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The replay as a user runs it: `hccl sim --replay DIR` (what `hccl
/// doctor DIR --replay` runs after its diagnosis) names the dead link
/// between ranks 0 and 1, and the files it wrote next to the dumps, run
/// as its replay line runs them (`hccl sim --scenario ... --faults ...`
/// with the run's `HCCL_EXEC_TIMEOUT`), print the same report.
fn cli_replay_names_the_link(dir: &Path) {
    let (out, code) = hccl_cli::sim_output([
        OsStr::new("hccl"),
        OsStr::new("sim"),
        OsStr::new("--replay"),
        dir.as_os_str(),
    ])
    .unwrap();
    eprintln!("hccl sim --replay:\n{out}");
    assert_eq!(code, 4, "a hang: {out}");
    assert!(out.contains("the route between them going down"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("dead link")
            && (l.contains("stops message(s) 0->1") || l.contains("stops message(s) 1->0"))),
        "{out}"
    );
    let (sc, fp) = (
        dir.join("replay/scenario.json"),
        dir.join("replay/faults.json"),
    );
    let (again, code) = hccl_cli::sim_output([
        OsStr::new("hccl"),
        OsStr::new("sim"),
        OsStr::new("--scenario"),
        sc.as_os_str(),
        OsStr::new("--faults"),
        fp.as_os_str(),
        OsStr::new("--exec-timeout"),
        OsStr::new("1"),
    ])
    .unwrap();
    assert_eq!(code, 4, "{again}");
    assert!(out.ends_with(&again), "{out}\n---\n{again}");
}

/// The replay of the cut-link run's dumps, as `hccl doctor DIR --replay`
/// makes it (the link goes down when both ranks start the op it stopped),
/// hangs on a dead link carrying only messages between ranks 0 and 1.
fn replay_names_the_link(dumps: &[flight::Dump]) {
    let mut r = flight::replay::from_dumps(dumps).unwrap();
    assert_eq!(r.ranks, 2);
    assert_eq!(r.links.len(), 1, "one dead link: {:?}", r.notes);
    let fabric = build_preset(Preset::FullMesh, 2).unwrap();
    r.time_links(&fabric).unwrap();
    let sc = r
        .scenario
        .build(&fabric, None)
        .unwrap()
        .exec_timeout_ns(Some(1_000_000_000));
    let run = run_with_faults(&sc, &r.faults).unwrap();
    let h = run
        .hang(&sc, "replay")
        .unwrap_or_else(|| panic!("the replay finished: {:?}", r.notes));
    let text = h.to_text();
    eprintln!("the replay:\n{text}");
    let link = h.root_causes.iter().find_map(|c| match c {
        RootCause::DeadLink { messages, .. } => Some(messages.clone()),
        _ => None,
    });
    let Some(messages) = link else {
        panic!("the replay names no dead link:\n{text}")
    };
    assert!(
        !messages.is_empty() && messages.iter().all(|m| matches!(m, (0, 1) | (1, 0))),
        "{messages:?}\n{text}"
    );
}
