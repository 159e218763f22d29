//! The C API used from C: hccl-rs's own C programs (`tests/c/`) compiled
//! against the headers and the library laid out as `hccl-capi install`
//! does, then run: every collective and data type, every bad argument,
//! streams and events, a peer that dies, and the guide's sample under
//! `mpirun -n 8`. They need `gcc` (and `g++`, `mpicc`, `mpirun` for some);
//! where one is missing a test prints why and passes, except in CI
//! (`CI=true`), where it fails: `.ci/run` installs them.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true")
}

/// True if `tool` runs; else prints why the test is skipped (and fails
/// in CI).
fn have(tool: &str) -> bool {
    let ok = Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(!in_ci(), "{tool} is missing; .ci/run installs it");
        eprintln!("skipped: {tool} is not installed");
    }
    ok
}

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("capi")
}

/// The CANN-like prefix, laid out once with the library cargo built for
/// these tests.
fn prefix() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| common::install_built_prefix(&tmp()))
}

fn c_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/c")
}

/// Compiles `src` (in tests/c) with `cc` into a program; panics with the
/// compiler's output on failure.
fn build(cc: &str, src: &str, flags: &[&str]) -> PathBuf {
    // One file per call: tests that build the same source run at once.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let out = tmp().join(format!(
        "{}-{cc}-{}-{k}",
        src.replace('.', "_"),
        std::process::id()
    ));
    std::fs::create_dir_all(tmp()).unwrap();
    let p = prefix();
    let o = Command::new(cc)
        .args(flags)
        .arg(format!("-I{}/include", p.display()))
        .arg(format!("-I{}", c_dir().display()))
        .arg(c_dir().join(src))
        .arg("-o")
        .arg(&out)
        .arg(format!("-L{}/lib64", p.display()))
        .args(["-lhccl", "-lascendcl", "-lm"])
        .output()
        .expect("run the compiler");
    assert!(
        o.status.success(),
        "{cc} {src} failed:\n{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

/// Runs a program with the prefix's lib64 on LD_LIBRARY_PATH; kills it
/// after `limit`. Returns (exit code, stdout, stderr).
fn run(cmd: &mut Command, limit: Duration) -> (Option<i32>, String, String) {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let (out, err) = (
        tmp().join(format!("out-{n}")),
        tmp().join(format!("err-{n}")),
    );
    let mut child = cmd
        .env("LD_LIBRARY_PATH", prefix().join("lib64"))
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("start the program");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (o, e) = (read(&out), read(&err));
    let _ = (std::fs::remove_file(&out), std::fs::remove_file(&err));
    let Some(status) = status else {
        panic!("{cmd:?} did not finish in {limit:?}\nstdout:\n{o}\nstderr:\n{e}");
    };
    (status.code(), o, e)
}

fn gcc_c99() -> [&'static str; 4] {
    ["-std=c99", "-Wall", "-Werror", "-O1"]
}

#[test]
fn the_headers_compile_as_c99_and_cxx11_with_cann_sizes() {
    if !have("gcc") || !have("g++") {
        return;
    }
    let p = prefix();
    let src = c_dir().join("abi_probe.c");
    for (cc, flags) in [
        (
            "gcc",
            vec!["-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic"],
        ),
        (
            "g++",
            vec!["-x", "c++", "-std=c++11", "-Wall", "-Wextra", "-Werror"],
        ),
    ] {
        let o = Command::new(cc)
            .args(&flags)
            .arg(format!("-I{}/include", p.display()))
            .arg("-c")
            .arg(&src)
            .arg("-o")
            .arg(tmp().join(format!("abi-{cc}.o")))
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{cc}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

/// Every function the headers declare, by name.
fn declared_functions() -> Vec<String> {
    let mut names = Vec::new();
    for (_, text) in hccl_capi::prefix::HEADERS {
        let mut decl = String::new();
        for line in text.lines() {
            let t = line.trim_start();
            if t.starts_with("extern ") && !t.starts_with("extern \"C\"") {
                decl.clear();
            }
            if t.starts_with("extern ") || !decl.is_empty() {
                decl.push_str(t);
                if let Some(open) = decl.find('(') {
                    let head = &decl[..open];
                    let name = head
                        .rsplit(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                        .unwrap_or("");
                    if !name.is_empty() && !head.starts_with("extern \"C\"") {
                        names.push(name.to_string());
                    }
                    decl.clear();
                }
            }
        }
    }
    names.sort();
    names.dedup();
    names
}

#[test]
fn every_declared_function_links_with_z_now_from_one_library() {
    if !have("gcc") {
        return;
    }
    let names = declared_functions();
    assert!(names.len() > 100, "found {} declarations", names.len());
    for must in [
        "HcclAllReduce",
        "aclrtGetSocName",
        "aclprofStart",
        "aclrtMapMem",
        "HcclCommSetMemoryRange",
    ] {
        assert!(names.iter().any(|n| n == must), "{must} is declared");
    }
    // A program that references every function, linked as hccl_test
    // links (-Wl,-z,now): each must be exported by the library.
    let mut c = String::from("#include \"hccl/hccl.h\"\n#include \"acl/acl.h\"\n#include <stdio.h>\nint main(void) {\n  void *fns[] = {\n");
    for n in &names {
        c.push_str(&format!("    (void *)&{n},\n"));
    }
    c.push_str("  };\n  printf(\"%d\\n\", (int)(sizeof fns / sizeof fns[0]));\n  return 0;\n}\n");
    std::fs::create_dir_all(tmp()).unwrap();
    let src = tmp().join(format!("all_fns-{}.c", std::process::id()));
    std::fs::write(&src, c).unwrap();
    let exe = tmp().join(format!("all_fns-{}", std::process::id()));
    let p = prefix();
    let o = Command::new("gcc")
        .args([
            "-std=c99",
            "-Wall",
            "-Werror",
            "-Wno-pedantic",
            "-Wl,-z,now",
            "-Wl,--no-undefined",
        ])
        .arg(format!("-I{}/include", p.display()))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg(format!("-L{}/lib64", p.display()))
        .args(["-lhccl", "-lascendcl"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "link: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let (code, out, err) = run(&mut Command::new(&exe), Duration::from_secs(30));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(out.trim(), names.len().to_string());
    // One library, so one registry: ldd lists libhccl.so once and no
    // libascendcl.so (the linker script named libhccl.so).
    if have("ldd") {
        let l = Command::new("ldd")
            .arg(&exe)
            .env("LD_LIBRARY_PATH", p.join("lib64"))
            .output()
            .unwrap();
        let l = String::from_utf8_lossy(&l.stdout);
        assert_eq!(
            l.lines().filter(|x| x.contains("libhccl.so")).count(),
            1,
            "{l}"
        );
        assert!(!l.contains("libascendcl"), "{l}");
    }
}

#[test]
fn every_collective_and_data_type_on_tcp() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "all_ops.c", &gcc_c99());
    for n in ["2", "3", "4"] {
        // A SoC other than 910B: PROD of int16 and bf16 runs too.
        let (code, out, err) = run(
            Command::new(&exe)
                .arg(n)
                .env("HCCL_HOST_SOC_NAME", "Ascend910")
                .env("HCCL_BACKEND", "tcp"),
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(0), "{n} ranks:\n{out}\n{err}");
        assert!(out.contains("every collective and data type: ok"), "{out}");
    }
}

#[test]
fn every_collective_and_data_type_on_the_simulator() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "all_ops.c", &gcc_c99());
    let (code, out, err) = run(
        Command::new(&exe)
            .arg("4")
            .env("HCCL_HOST_SOC_NAME", "Ascend910")
            .env("HCCL_BACKEND", "sim"),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("every collective and data type: ok"), "{out}");
}

#[test]
fn sub_communicators_are_made_by_their_members_only_on_tcp_and_the_simulator() {
    if !have("gcc") {
        return;
    }
    let mut flags = gcc_c99().to_vec();
    flags.push("-pthread");
    let exe = build("gcc", "subcomm.c", &flags);
    for backend in ["tcp", "sim"] {
        let (code, out, err) = run(
            Command::new(&exe).env("HCCL_BACKEND", backend),
            Duration::from_secs(90),
        );
        assert_eq!(code, Some(0), "{backend}:\n{out}\n{err}");
        assert!(
            out.contains("bad arguments refused: ok"),
            "{backend}: {out}"
        );
        for line in [
            "HcclCreateSubCommConfig: rankIds[subCommRankId 0] is 1, not this rank (0)",
            "HcclCreateSubCommConfig: sub_comm: rank 0 is listed twice",
            "HcclCreateSubCommConfig: subComm is NULL",
        ] {
            assert!(
                err.contains(line),
                "{backend}: no log line {line:?} in:\n{err}"
            );
        }
    }
}

/// An HCCL rank table (CANN's 1.0 format: `server_list`, `device`,
/// `rank_id`) of `servers` servers on loopback (127.0.0.1, 127.0.0.2,
/// ...), `per_server` devices each.
fn loopback_rank_table(servers: u32, per_server: u32) -> String {
    let list: Vec<String> = (0..servers)
        .map(|s| {
            let devices: Vec<String> = (0..per_server)
                .map(|d| {
                    let rank = s * per_server + d;
                    format!(
                        r#"{{ "device_id": "{d}", "device_ip": "192.0.2.{}", "rank_id": "{rank}" }}"#,
                        rank + 1
                    )
                })
                .collect();
            format!(
                r#"{{ "server_id": "127.0.0.{ip}", "host_ip": "127.0.0.{ip}", "device": [{}] }}"#,
                devices.join(", "),
                ip = s + 1
            )
        })
        .collect();
    format!(
        r#"{{ "status": "completed", "version": "1.0", "server_count": "{servers}", "server_list": [{}] }}"#,
        list.join(", ")
    )
}

#[test]
fn processes_init_from_one_rank_table_file_and_allreduce() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "cluster.c", &gcc_c99());
    for (servers, per_server) in [(1, 2), (2, 2)] {
        let n = servers * per_server;
        // Below the ports the other suites use (hccl_conformance::procs).
        let port = hccl_conformance::procs::free_port(5_000..5_990);
        let table = tmp().join(format!("rank_table-{}-{n}.json", std::process::id()));
        std::fs::write(&table, loopback_rank_table(servers, per_server)).unwrap();
        let ranks: Vec<_> = (0..n)
            .map(|r| {
                let (exe, table) = (exe.clone(), table.clone());
                std::thread::spawn(move || {
                    run(
                        Command::new(&exe)
                            .arg(&table)
                            .arg(r.to_string())
                            .env("HCCL_IF_BASE_PORT", port.to_string())
                            .env("HCCL_BACKEND", "tcp"),
                        Duration::from_secs(60),
                    )
                })
            })
            .collect();
        let want = n * (n + 1) / 2;
        for (r, h) in ranks.into_iter().enumerate() {
            let (code, out, err) = h.join().unwrap();
            assert_eq!(code, Some(0), "{n} ranks, rank {r}:\n{out}\n{err}");
            assert!(
                out.contains(&format!("cluster: rank {r} of {n} allreduced {want}: ok")),
                "{n} ranks, rank {r}: {out}"
            );
        }
        let _ = std::fs::remove_file(&table);
    }
}

#[test]
fn a_simulated_hang_is_a_timeout_named_by_its_op_and_reported_once() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "sim_hang.c", &gcc_c99());
    let dir = tmp().join(format!("sim_hang-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let plan = dir.join("plan.json");
    std::fs::write(
        &plan,
        r#"{"faults": [{"kind": "crash", "rank": 1, "at_op": 1}]}"#,
    )
    .unwrap();
    let (code, out, err) = run(
        Command::new(&exe)
            .env("HCCL_BACKEND", "sim")
            .env("HCCL_SIM_FAULTS", &plan)
            .env("HCCL_FLIGHT_RECORDER_DIR", &dir),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("sim_hang: "), "{out}");
    // Each rank's op logs a line naming it; the report itself once.
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| {
            l.contains("HcclAllReduce: comm 'world' AllReduce #1: simulator: the simulated op hung")
                && !l.contains("aclrtSynchronizeStream")
        })
        .collect();
    assert_eq!(lines.len(), 4, "{err}");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.contains("the first such line above"))
            .count(),
        3,
        "{err}"
    );
    assert_eq!(err.matches("root causes:").count(), 1, "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_bad_argument_gets_its_code_and_a_log_line() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "bad_args.c", &gcc_c99());
    let (code, out, err) = run(
        Command::new(&exe).env("HCCL_BACKEND", "tcp"),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    // The log lines name the function and the argument.
    let (code0, out0, err0) = run(
        Command::new(&exe).env("HCCL_HOST_DEVICES", "0"),
        Duration::from_secs(30),
    );
    assert_eq!(code0, Some(0), "HCCL_HOST_DEVICES=0: {out0}\n{err0}");
    assert!(out0.contains("bad_args: no devices"), "{out0}");
    // HCCL_BACKEND=ascend (the Rust API's Ascend backend): refused in C
    // terms, not with Comm's advice about Rust calls.
    let (code1, out1, err1) = run(
        Command::new(&exe).env("HCCL_BACKEND", "ascend"),
        Duration::from_secs(30),
    );
    assert_eq!(code1, Some(0), "HCCL_BACKEND=ascend: {out1}\n{err1}");
    assert!(
        out1.contains("bad_args: HcclCommInitAll: HCCL_BACKEND=ascend, but this libhccl.so is hccl-rs's C API"),
        "{out1}"
    );
    assert!(!out1.contains("Comm::"), "{out1}");
    // The repeated aclInit (ACL_ERROR_REPEAT_INITIALIZE) is a warning, as
    // in CANN's runtime, not an error line.
    let repeat: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("aclInit: aclInit was called already"))
        .collect();
    assert_eq!(repeat.len(), 1, "{err}");
    assert!(repeat[0].trim_start().starts_with("WARN"), "{}", repeat[0]);
    for line in [
        "HcclAllReduce: sendBuf is NULL",
        "aclrtFree: ",
        "HcclGetRankSize: comm 0x77 is not a communicator",
        "HcclCommInitRootInfoConfig: config's magic word is 0x0",
    ] {
        assert!(err.contains(line), "no log line {line:?} in:\n{err}");
    }
}

#[test]
fn the_guide_sample_allreduces_on_8_ranks_under_mpirun() {
    if !have("mpicc") || !have("mpirun") || !have("make") {
        return;
    }
    let build_dir = tmp().join(format!("example-{}", std::process::id()));
    let ex = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/c");
    let mpi_home =
        std::env::var("MPI_HOME").unwrap_or_else(|_| "/usr/lib/x86_64-linux-gnu/openmpi".into());
    let o = Command::new("make")
        .arg("-C")
        .arg(&ex)
        .arg(format!("ASCEND_DIR={}", prefix().display()))
        .arg(format!("MPI_HOME={mpi_home}"))
        .arg(format!("BUILD={}", build_dir.display()))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "make: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let (code, out, err) = run(
        Command::new("mpirun")
            .args(["--allow-run-as-root", "--oversubscribe", "-n", "8"])
            .arg(build_dir.join("hccl_allreduce"))
            .env("OMPI_MCA_btl", "self,tcp")
            .env("HCCL_BACKEND", "tcp"),
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    for r in 0..8 {
        assert!(
            out.contains(&format!("rank {r}: 0 8 16 24 32 40 48 56\n")),
            "rank {r}:\n{out}\n{err}"
        );
    }
}

#[test]
fn two_streams_ordered_by_events_with_times_and_a_callback() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "streams.c", &gcc_c99());
    let (code, out, err) = run(
        Command::new(&exe).env("HCCL_BACKEND", "tcp"),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(
        out.contains("streams: ordered by events, timed, called back: ok"),
        "{out}"
    );
}

#[test]
fn a_dead_peer_is_an_async_error_and_fails_the_next_op_on_its_stream() {
    if !have("gcc") {
        return;
    }
    let exe = build(
        "gcc",
        "peer_dies.c",
        &["-std=c99", "-Wall", "-Werror", "-O1"],
    );
    let file = tmp().join(format!("root-{}.bin", std::process::id()));
    let _ = std::fs::remove_file(&file);
    let exe1 = exe.clone();
    let file1 = file.clone();
    let rank1 = std::thread::spawn(move || {
        run(
            Command::new(&exe1).arg("1").arg(&file1),
            Duration::from_secs(60),
        )
    });
    let (code, out, err) = run(
        Command::new(&exe).arg("0").arg(&file),
        Duration::from_secs(60),
    );
    let (code1, _, err1) = rank1.join().unwrap();
    assert_eq!(code1, Some(0), "rank 1: {err1}");
    assert_eq!(code, Some(0), "rank 0:\n{out}\n{err}");
    // HCCL_E_TCP_TRANSFER: the connection to the peer was lost.
    assert!(out.contains("async error 13 (tcp transfer fail)"), "{out}");
    let _ = std::fs::remove_file(&file);
}

#[test]
fn simulated_timing_events_measure_the_collectives_on_the_modelled_cluster() {
    if !have("gcc") {
        return;
    }
    let exe = build("gcc", "timing.c", &gcc_c99());
    let mut seen = Vec::new();
    for _ in 0..2 {
        let (code, out, err) = run(
            Command::new(&exe)
                .env("HCCL_TIMING", "sim")
                .env("HCCL_BACKEND", "tcp"),
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(0), "{out}\n{err}");
        seen.push(out);
    }
    // Simulated, so the same in both runs whatever the machine's load
    // (wall times of two runs differ in their last digits).
    assert_eq!(seen[0], seen[1]);
    assert!(seen[0].starts_with("allreduce 64 KiB: 0.0"), "{}", seen[0]);
    // 4 ranks do not fill an Atlas 800T A2 server: wall times (> 0, the C
    // program checks), not a clock that never moved.
    let (code, out, err) = run(
        Command::new(&exe)
            .arg("4")
            .env("HCCL_TIMING", "sim")
            .env("HCCL_BACKEND", "tcp"),
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(err.contains("do not fill"), "{err}");
}
