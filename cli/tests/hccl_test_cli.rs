//! `hccl test` / `hccl-test` end to end: flag errors, every collective's
//! check in data mode, JSON rows, busbw factors, traces, plots, profiling.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::LAUNCHER_VARS;

fn hccl(args: &[&str]) -> Output {
    hccl_env(args, &[])
}

/// `hccl test ARGS` with `env` set (a value of `None` removes the
/// variable); HCCL_ALGO, HCCL_PROFILING_ENABLE and the launchers'
/// variables are removed unless `env` sets them.
fn hccl_env(args: &[&str], env: &[(&str, Option<&str>)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl"));
    c.arg("test")
        .args(args)
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_PROFILING_ENABLE");
    for v in LAUNCHER_VARS {
        c.env_remove(v);
    }
    for (k, v) in env {
        match v {
            Some(v) => c.env(k, v),
            None => c.env_remove(k),
        };
    }
    c.output().expect("run hccl")
}

/// The words of `cmd`, split at white space: a command line as `args`.
fn words(cmd: &str) -> Vec<&str> {
    cmd.split_whitespace().collect()
}

/// `o`'s stdout, once it is known to have exited 0 (else fails, showing its stderr).
#[track_caller]
fn ok_stdout(o: &Output) -> String {
    assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    stdout(o)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Every collective, as `hccl test` names them.
const COLLECTIVES: [&str; 13] = [
    "all_reduce",
    "all_gather",
    "all_gatherv",
    "reduce_scatter",
    "reduce_scatterv",
    "broadcast",
    "reduce",
    "scatter",
    "gather",
    "alltoall",
    "alltoallv",
    "send_recv",
    "barrier",
];

/// Table rows: non-comment lines after the column titles.
fn rows(out: &str) -> Vec<String> {
    out.lines()
        .skip_while(|l| !l.contains("size(B)"))
        .skip(1)
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(str::to_string)
        .collect()
}

/// `hccl test all_reduce` of one 8 KiB op over TCP on 2 spawned processes,
/// with `env` set (a value of `None` removes the variable).
fn tcp_8k_on_2(env: &[(&str, Option<&str>)]) -> Output {
    hccl_env(
        &words("all_reduce --transport tcp --spawn 2 -b 8K -e 8K -n 1 -w 0"),
        env,
    )
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("hccl-test-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn bad_flags_exit_2_with_one_line_and_usage() {
    let cases: &[(&[&str], &str)] = &[
        (
            &["all_reduce", "-b", "2M", "-e", "1M"],
            "-b/--minbytes 2097152 is larger than -e/--maxbytes 1048576",
        ),
        (
            &["all_reduce", "-b", "1K", "-e", "8K", "-f", "1"],
            "must be a number greater than 1",
        ),
        (
            &["all_reduce", "-b", "1K", "-e", "8K", "-i", "0"],
            "-i/--stepbytes 0",
        ),
        (&["all_reduce", "-d", "fp99"], "unknown data type \"fp99\""),
        (&["all_reduce", "-o", "xor"], "xor"),
        (
            &["broadcast", "-b", "1K", "-e", "1K", "-r", "8"],
            "-r/--root 8 is outside the world of 8 ranks",
        ),
        (
            &["all_reduce", "-p", "9"],
            "-p/--npus 9 is larger than one atlas800t-a2 server (8 NPUs)",
        ),
        (&["all_reduce", "-n", "0"], "-n/--iters 0"),
        (&["all_reduce", "-c", "2"], "2"),
        (&["all_reduce", "-b", "8X"], "is not a size"),
        (
            &["all_reduce", "--algo", "bogus"],
            "unknown algorithm \"bogus\"",
        ),
        (
            &["alltoall", "--algo", "ring", "-b", "1K", "-e", "1K"],
            "does not implement alltoall",
        ),
        (
            &["no_such_collective"],
            "invalid value 'no_such_collective'",
        ),
        (&["all_reduce", "--servers", "0"], "--servers 0"),
        (
            &["all_reduce", "-b", "3", "-e", "3"],
            "-e/--maxbytes 3: all_reduce of fp32 on 8 ranks rounds to 0 elements per rank; use at least 4 bytes",
        ),
        (
            &["all_reduce", "--op-overhead=-5"],
            "'-5' is not a number of microseconds",
        ),
        (&["all_reduce", "--preset", "dgx"], "dgx"),
        (
            &["all_reduce", "-e", "1G", "--servers", "2"],
            "use --mode timing",
        ),
        // Cluster sources are exclusive: a rank table or fabric file with
        // --preset/--servers used to run the file silently.
        (
            &words("all_reduce --rank-table rt.json --servers 4 --preset ring"),
            "cannot be used with",
        ),
        (
            &["all_reduce", "--fabric", "f.json", "--servers", "2"],
            "cannot be used with",
        ),
        (
            &["all_reduce", "--preset", "ring", "--rank-table", "rt.json"],
            "cannot be used with",
        ),
    ];
    for (args, want) in cases {
        let o = hccl(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        // clap's style: our checks print the usage, clap's value errors the --help hint.
        assert!(
            err.contains("Usage: hccl test") || err.contains("try '--help'"),
            "{args:?}: {err}"
        );
        assert!(o.stdout.is_empty(), "{args:?}: nothing on stdout");
    }
}

#[test]
fn every_collective_passes_its_check_on_1x8_and_2x4() {
    for (servers, npus) in [("1", "8"), ("2", "4")] {
        for c in COLLECTIVES {
            // 1000 B: not a multiple of 8 ranks x 4 B, so blocks are uneven.
            let o = hccl(&[
                c,
                "-b",
                "1000",
                "-e",
                "1000",
                "-n",
                "1",
                "-w",
                "0",
                "-r",
                "3",
                "--servers",
                servers,
                "-p",
                npus,
            ]);
            let out = stdout(&o);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{c} {servers}x{npus}: {}{out}",
                stderr(&o)
            );
            let r = rows(&out);
            assert_eq!(r.len(), 1, "{c}: {out}");
            assert!(r[0].ends_with("success"), "{c} {servers}x{npus}: {}", r[0]);
            assert!(out.contains(&format!("8 ranks, {servers} server")), "{out}");
        }
    }
}

#[test]
fn reductions_pass_for_every_op_in_awkward_dtypes() {
    for (d, op) in [
        ("bf16", "sum"),
        ("fp16", "max"),
        ("int8", "prod"),
        ("fp64", "avg"),
        ("uint16", "min"),
    ] {
        let o = hccl(&[
            "all_reduce",
            "-b",
            "1K",
            "-e",
            "4K",
            "-f",
            "2",
            "-d",
            d,
            "-o",
            op,
            "-n",
            "1",
            "-w",
            "0",
            "--algo",
            "all",
        ]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{d} {op}: {}", stderr(&o));
        let r = rows(&out);
        assert!(r.len() >= 3 * 2, "several algorithms per size: {out}");
        assert!(r.iter().all(|l| l.ends_with("success")), "{d} {op}: {out}");
    }
}

#[test]
fn json_rows_match_the_table_and_busbw_factors() {
    let dir = scratch("json");
    for (coll, factor) in [
        ("all_reduce", 1.75),
        ("all_gather", 0.875),
        ("alltoall", 0.875),
        ("broadcast", 1.0),
    ] {
        let path = dir.join(format!("{coll}.json"));
        let o = hccl(&[
            coll,
            "-b",
            "1K",
            "-e",
            "8K",
            "-f",
            "2",
            "-n",
            "3",
            "-w",
            "1",
            "--json",
            path.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let table = rows(&stdout(&o));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        assert_eq!(doc["collective"], coll);
        assert_eq!(doc["simulated"], true);
        assert_eq!(doc["cluster"]["ranks"], 8);
        let jrows = doc["rows"].as_array().unwrap();
        assert_eq!(jrows.len(), 4);
        assert_eq!(jrows.len(), table.len());
        for (i, (r, line)) in jrows.iter().zip(&table).enumerate() {
            let size = r["size_bytes"].as_u64().unwrap();
            assert_eq!(size, 1024 << i, "{coll}");
            assert_eq!(r["count"].as_u64().unwrap(), size / 4);
            assert!(line.trim_start().starts_with(&size.to_string()), "{line}");
            let t = r["time_us"].as_f64().unwrap();
            let alg = r["algbw_gbps"].as_f64().unwrap();
            let bus = r["busbw_gbps"].as_f64().unwrap();
            // algbw = bytes / time (GB/s = bytes/ns); busbw = algbw x factor.
            assert!(
                (alg - size as f64 / (t * 1000.0)).abs() < 1e-9 * alg.max(1.0),
                "{r}"
            );
            assert!((bus / alg - factor).abs() < 1e-12, "{coll}: {bus} / {alg}");
            assert_eq!(r["check"]["result"], "success");
        }
    }
}

#[test]
fn timing_mode_skips_the_check_and_says_so() {
    let o = hccl(&words("all_gather -b 1M -e 1M --mode timing --servers 2"));
    let out = ok_stdout(&o);
    assert!(out.contains("check: skipped in timing mode"), "{out}");
    assert!(out.contains("times are SIMULATED"), "{out}");
    // The unit of GB/s on a line of its own, not at the end of the model's.
    let units = out
        .lines()
        .filter(|l| l.contains("GB = 10^9"))
        .collect::<Vec<_>>();
    assert_eq!(units.len(), 1, "{out}");
    assert!(units[0].starts_with("# units: "), "{out}");
    assert!(rows(&out)[0].ends_with("NULL"), "{out}");
    let o = hccl(&["all_gather", "-b", "1K", "-e", "1K", "-c", "0"]);
    assert!(rows(&stdout(&o))[0].ends_with("NULL"));
}

#[test]
fn trace_has_a_track_per_rank_and_link_and_a_slice_per_message() {
    let dir = scratch("trace");
    let path = dir.join("t.json");
    let o = hccl(&[
        "all_reduce",
        "-b",
        "64K",
        "-e",
        "64K",
        "--algo",
        "ring",
        "-n",
        "2",
        "-w",
        "1",
        "--trace",
        path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let ev = doc["traceEvents"].as_array().unwrap();
    let threads: Vec<&str> = ev
        .iter()
        .filter(|e| e["name"] == "thread_name")
        .map(|e| e["args"]["name"].as_str().unwrap())
        .collect();
    for r in 0..8 {
        assert!(
            threads.contains(&format!("rank {r}").as_str()),
            "{threads:?}"
        );
    }
    // Ring on 8 ranks: each rank's 8 links to its neighbour carry traffic.
    let links = threads.iter().filter(|t| t.starts_with("link ")).count();
    assert_eq!(links, 8, "{threads:?}");
    // One traced op: ring AllReduce sends 2(n-1) messages per rank.
    let sends = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap_or("").starts_with("send -> "))
        .count();
    assert_eq!(sends, 2 * 7 * 8);
    for e in ev.iter().filter(|e| e["ph"] == "X") {
        assert!(e["dur"].as_f64().unwrap() >= 0.0 && e["ts"].as_f64().unwrap() >= 0.0);
    }
    let bytes: u64 = ev
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"].as_str().unwrap_or("").starts_with("send -> "))
        .map(|e| e["args"]["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(
        bytes,
        2 * 7 * 8 * 65536 / 8,
        "each message is 1/8 of the vector"
    );
}

#[test]
fn plot_is_an_svg_with_one_line_per_algorithm() {
    let dir = scratch("plot");
    let path = dir.join("p.svg");
    let o = hccl(&[
        "all_reduce",
        "-b",
        "1K",
        "-e",
        "16K",
        "-f",
        "4",
        "-c",
        "0",
        "--algo",
        "all",
        "--plot",
        path.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..40.min(svg.len())]);
    for a in ["ring", "mesh", "H-D_R"] {
        assert!(svg.contains(&format!("\n{a}\n</text>")), "legend has {a}");
    }
}

#[test]
fn profiling_env_writes_one_record_per_timed_op() {
    let dir = scratch("prof");
    let o = hccl_env(
        &words("reduce_scatter -b 64K -e 128K -f 2 -n 3 -w 2 --algo ring"),
        &[
            ("HCCL_PROFILING_ENABLE", Some("1")),
            ("HCCL_PROFILING_OUTPUT_PATH", Some(dir.to_str().unwrap())),
            ("HCCL_PROFILING_OUTPUT_FORMAT", Some("json")),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
    assert_eq!(files.len(), 1);
    let doc: serde_json::Value =
        serde_json::from_slice(&std::fs::read(files[0].path()).unwrap()).unwrap();
    let recs = doc["records"].as_array().unwrap();
    assert_eq!(recs.len(), 2 * 3, "two sizes x three timed ops");
    for r in recs {
        assert_eq!(r["op"], "reduce_scatter");
        assert_eq!(r["algorithm"], "ring");
        assert!(r["end_ns"].as_u64().unwrap() > r["start_ns"].as_u64().unwrap());
        // Ring ReduceScatter: n-1 = 7 messages per rank.
        assert_eq!(r["steps"].as_array().unwrap().len(), 7 * 8);
        assert_eq!(r["links"].as_array().unwrap().len(), 8);
    }
    // Sequence numbers are the timed ops' (warmups 0 and 1 come first).
    assert_eq!(recs[0]["seq"], 2);
    // Off: no file.
    let off = scratch("prof-off");
    let o = hccl_env(
        &["all_reduce", "-b", "1K", "-e", "1K"],
        &[
            ("HCCL_PROFILING_ENABLE", Some("0")),
            ("HCCL_PROFILING_OUTPUT_PATH", Some(off.to_str().unwrap())),
        ],
    );
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(std::fs::read_dir(&off).unwrap().count(), 0);
    // An output path that cannot be created fails before the sweep, once.
    let o = hccl_env(
        &["all_reduce", "-b", "1K", "-e", "1K"],
        &[
            ("HCCL_PROFILING_ENABLE", Some("1")),
            ("HCCL_PROFILING_OUTPUT_PATH", Some("/proc/hccl-no-such-dir")),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(rows(&stdout(&o)).is_empty(), "{}", stdout(&o));
    let e = stderr(&o);
    assert!(
        e.contains("HCCL_PROFILING_OUTPUT_PATH=/proc/hccl-no-such-dir"),
        "{e}"
    );
    assert_eq!(e.matches("os error").count(), 1, "{e}");
    // A path that is a file is named as one, not as "File exists".
    let file = scratch("profile-path-is-a-file").join("a-file");
    std::fs::write(&file, b"x").unwrap();
    let o = hccl_env(
        &["all_reduce", "-b", "1K", "-e", "1K"],
        &[
            ("HCCL_PROFILING_ENABLE", Some("1")),
            ("HCCL_PROFILING_OUTPUT_PATH", Some(file.to_str().unwrap())),
        ],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    let want = format!(
        "error: HCCL_PROFILING_OUTPUT_PATH={} is not a directory",
        file.display()
    );
    assert!(e.starts_with(&want), "{e}");
}

#[test]
fn hccl_test_binary_is_the_same_program() {
    let args = ["all_gather", "-b", "4K", "-e", "16K", "-f", "2", "-n", "2"];
    let a = hccl(&args);
    let b = Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(args)
        .env_remove("HCCL_ALGO")
        .output()
        .unwrap();
    assert_eq!(a.status.code(), Some(0));
    assert_eq!(stdout(&a), stdout(&b));
    let e = Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(["all_gather", "-f", "0.5"])
        .output()
        .unwrap();
    assert_eq!(e.status.code(), Some(2));
    assert!(stderr(&e).contains("Usage: hccl-test"), "{}", stderr(&e));
}

#[test]
fn hccl_algo_env_forces_the_algorithm() {
    let o = hccl_env(
        &["all_reduce", "-b", "1M", "-e", "1M", "-n", "1", "-w", "0"],
        &[("HCCL_ALGO", Some("allreduce=level0:ring;level1:NA"))],
    );
    let out = ok_stdout(&o);
    assert!(out.contains("(HCCL_ALGO)"), "{out}");
    // One server: level 1 has nothing to do; the column says what ran.
    assert!(rows(&out)[0].contains(" ring "), "{out}");

    // The algorithm column shows what ran, not the setting: NA on one
    // server is the level-0 default (mesh), on two both levels run.
    for (servers, ran) in [("1", " mesh "), ("2", " level0:mesh;level1:ring ")] {
        let o = hccl_env(
            &[
                "all_reduce",
                "-b",
                "1M",
                "-e",
                "1M",
                "-n",
                "1",
                "-w",
                "0",
                "--servers",
                servers,
            ],
            &[("HCCL_ALGO", Some("level0:NA;level1:ring"))],
        );
        let out = ok_stdout(&o);
        assert!(rows(&out)[0].contains(ran), "{servers} servers: {out}");
        assert!(!rows(&out)[0].contains("NA"), "{servers} servers: {out}");
    }

    // A bad HCCL_ALGO under --transport tcp is refused before any rank
    // starts (one message, not one per rank).
    let o = hccl_env(
        &["all_reduce", "--transport", "tcp", "--spawn", "2"],
        &[("HCCL_ALGO", Some("level1:rign"))],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(stderr(&o).matches("rign").count(), 1, "{}", stderr(&o));

    // HCCL's per-op AllToAll example: its level1 pairwise runs flat.
    let o = hccl_env(
        &words("alltoall -b 64K -e 64K --servers 2 -n 1 -w 0"),
        &[("HCCL_ALGO", Some("alltoall=level0:NA;level1:pairwise"))],
    );
    let out = ok_stdout(&o);
    assert!(rows(&out)[0].contains("pairwise"), "{out}");
    assert!(
        out.contains("runs as pairwise, flat over all ranks, for alltoall"),
        "{out}"
    );
    assert!(rows(&out)[0].contains("success"), "{out}");

    // A global HCCL_ALGO=ring does not fit alltoall: the selector runs it
    // (and says so), where an explicit --algo ring is refused.
    let o = hccl_env(
        &["alltoall", "-b", "8K", "-e", "8K", "-n", "1", "-w", "0"],
        &[("HCCL_ALGO", Some("ring"))],
    );
    let out = ok_stdout(&o);
    assert!(
        out.contains("# note: HCCL_ALGO ring ignored for alltoall"),
        "{out}"
    );
    assert!(rows(&out)[0].contains("success"), "{out}");
    assert!(!rows(&out)[0].contains("ring"), "{out}");

    // The same on TCP: the header says the setting was ignored.
    let o = tcp_8k_on_2(&[("HCCL_ALGO", Some("pairwise"))]);
    let out = ok_stdout(&o);
    assert!(
        out.contains("# note: HCCL_ALGO=pairwise ignored for all_reduce"),
        "{out}"
    );
    assert!(rows(&out)[0].contains("success"), "{out}");

    // A bare word that names no algorithm lists the names.
    let o = hccl_env(
        &["all_reduce", "--transport", "tcp", "--spawn", "2"],
        &[("HCCL_ALGO", Some("bogus"))],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("unknown algorithm \"bogus\"") && stderr(&o).contains("oneshot"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn tcp_spawn_two_processes_checks_every_row() {
    let dir = scratch("tcp-json");
    let json = dir.join("rows.json");
    let o = hccl(&[
        "--json",
        json.to_str().unwrap(),
        "all_reduce",
        "-b",
        "8K",
        "-e",
        "32K",
        "-f",
        "2",
        "-n",
        "2",
        "-w",
        "1",
        "--transport",
        "tcp",
        "--spawn",
        "2",
    ]);
    let out = stdout(&o);
    assert!(o.status.success(), "{out}\n{}", stderr(&o));
    assert!(
        out.contains("MEASURED over TCP with 2 processes"),
        "header: {out}"
    );
    // --json: rank 0 writes the measured rows, the same as the table.
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(doc["simulated"], false);
    assert_eq!(doc["ranks"], 2);
    assert!(doc.get("cluster").is_none(), "{doc}");
    let jrows = doc["rows"].as_array().unwrap();
    assert_eq!(jrows.len(), 3);
    for (r, size) in jrows.iter().zip([8192u64, 16384, 32768]) {
        assert_eq!(r["size_bytes"], size);
        assert!(r["time_us"].as_f64().unwrap() > 0.0, "{r}");
        assert_eq!(r["check"]["result"], "success");
    }
    let rows = rows(&out);
    // 8K, 16K, 32K: one row each, from rank 0 only, each checked.
    assert_eq!(rows.len(), 3, "{out}");
    for (row, size) in rows.iter().zip(["8192", "16384", "32768"]) {
        assert!(row.trim_start().starts_with(size), "{row}");
        assert!(row.ends_with("success"), "{row}");
    }
}

/// A sweep whose every size rounds to 0 elements is refused over TCP too,
/// as on the simulator (it printed a header without rows and exited 0).
#[test]
fn tcp_refuses_sizes_that_round_to_nothing() {
    let o = hccl(&[
        "all_reduce",
        "-b",
        "3",
        "-e",
        "3",
        "-n",
        "1",
        "-w",
        "0",
        "--transport",
        "tcp",
        "--spawn",
        "2",
    ]);
    let err = stderr(&o);
    assert!(!o.status.success(), "{}\n{err}", stdout(&o));
    assert!(
        err.contains("-e/--maxbytes 3: all_reduce of fp32 on 2 ranks rounds to 0 elements per rank; use at least 4 bytes"),
        "{err}"
    );
}

/// Every collective runs over TCP and its check passes on every row.
#[test]
fn tcp_runs_every_collective_checked() {
    for coll in COLLECTIVES {
        let o = hccl(&[
            coll,
            "-b",
            "1K",
            "-e",
            "64K",
            "-f",
            "64",
            "-r",
            "2",
            "-n",
            "1",
            "-w",
            "1",
            "--transport",
            "tcp",
            "--spawn",
            "3",
        ]);
        let out = stdout(&o);
        assert!(o.status.success(), "{coll}: {out}\n{}", stderr(&o));
        let rows = rows(&out);
        let want = if coll == "barrier" { 1 } else { 2 };
        assert_eq!(rows.len(), want, "{coll}: {out}");
        for row in rows {
            assert!(row.ends_with("success"), "{coll}: {row}");
        }
    }
}

#[test]
fn tcp_rejects_simulator_flags() {
    for (args, msg) in [
        (
            &["all_reduce", "--transport", "tcp", "--fabric", "f.json"][..],
            "--fabric is for the simulator",
        ),
        (
            &["all_reduce", "--transport", "tcp", "--mode", "timing"][..],
            "--mode timing is for the simulator",
        ),
        (&["all_reduce", "--spawn", "2"][..], "needs --transport tcp"),
        (
            &["all_reduce", "--transport", "tcp", "--op-overhead", "100"][..],
            "--op-overhead is for the simulator",
        ),
        (
            &["all_reduce", "--transport", "tcp", "--max-ranks", "8"][..],
            "--max-ranks is for the simulator",
        ),
        (
            &["all_reduce", "--transport", "tcp", "--check-memory", "1G"][..],
            "--check-memory is for the simulator",
        ),
        (
            // Refused before a single rank process starts.
            &["all_reduce", "--transport", "tcp", "--spawn", "100000"][..],
            "--spawn 100000: at most 1024 rank processes on one host",
        ),
    ] {
        let o = hccl(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(msg), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn algo_all_with_a_nonzero_root_runs_only_specs_that_plan() {
    // 2 servers x 8, root 3: a hierarchical level-1 H-D_R cannot plan the
    // root's Broadcast/Reduce; the sweep used to abort on it.
    for coll in ["broadcast", "reduce"] {
        let o = hccl(&[
            coll,
            "-b",
            "1M",
            "-e",
            "1M",
            "--servers",
            "2",
            "--algo",
            "all",
            "-r",
            "3",
            "-n",
            "1",
            "-w",
            "0",
        ]);
        let out = stdout(&o);
        assert!(o.status.success(), "{coll}: {}\n{out}", stderr(&o));
        let r = rows(&out);
        assert!(r.len() >= 5, "{coll}: {out}");
        assert!(r.iter().all(|l| l.ends_with("success")), "{coll}: {out}");
        assert!(!out.contains("level1:H-D_R"), "{coll}: {out}");
        assert!(out.contains("level0:mesh;level1:ring"), "{coll}: {out}");
    }
}

#[test]
fn sizes_round_down_and_never_repeat() {
    let first_col = |out: &str| -> Vec<u64> {
        rows(out)
            .iter()
            .map(|l| l.split_whitespace().next().unwrap().parse().unwrap())
            .collect()
    };
    // fp32 AllReduce: 0, 1, 2 B are 0 elements, 4 B one: 0, 4, 8, ... 1024.
    let o = hccl(&words("all_reduce -b 0 -e 1K -f 2 -n 1 -w 0"));
    assert!(o.status.success(), "{}", stderr(&o));
    let want: Vec<u64> = std::iter::once(0).chain((2..=10).map(|k| 1 << k)).collect();
    assert_eq!(first_col(&stdout(&o)), want);
    // Asked for 1 and 2 B (not 0): those round to nothing and are skipped.
    let o = hccl(&words("all_reduce -b 1 -e 16 -f 2 -n 1 -w 0"));
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(first_col(&stdout(&o)), vec![4, 8, 16]);
    // 1001 B = 250 floats = 1000 B (nccl-tests: count = size / wordSize).
    let o = hccl(&words("all_reduce -b 1001 -e 1001 -n 1 -w 0"));
    assert_eq!(first_col(&stdout(&o)), vec![1000], "{}", stderr(&o));
    // AllGather on 8 ranks: 1001 B = 250 floats = 31 per rank = 992 B.
    let o = hccl(&words("all_gather -b 1001 -e 1001 -n 1 -w 0"));
    assert_eq!(first_col(&stdout(&o)), vec![992], "{}", stderr(&o));
}

#[test]
fn op_overhead_adds_exactly_its_value_to_every_row() {
    let dir = scratch("overhead");
    let run = |extra: &[&str], name: &str| -> Vec<(u64, f64)> {
        let path = dir.join(name);
        let mut args = vec![
            "all_reduce",
            "-b",
            "4K",
            "-e",
            "4M",
            "-f",
            "32",
            "-n",
            "4",
            "-w",
            "1",
            "--mode",
            "timing",
            "--json",
            path.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let o = hccl(&args);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        if !extra.is_empty() {
            assert!(
                stdout(&o).contains("plus a fixed 250.0 us per op"),
                "{}",
                stdout(&o)
            );
        }
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        doc["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["size_bytes"].as_u64().unwrap(),
                    r["time_us"].as_f64().unwrap(),
                )
            })
            .collect()
    };
    let plain = run(&[], "plain.json");
    let loaded = run(&["--op-overhead", "250"], "loaded.json");
    assert_eq!(plain.len(), 3);
    for ((s0, t0), (s1, t1)) in plain.iter().zip(&loaded) {
        assert_eq!(s0, s1);
        assert!((t1 - t0 - 250.0).abs() < 1e-6, "{s0} B: {t0} -> {t1}");
    }
}

/// Ranks leave an op at different times, so back-to-back ops start skewed;
/// timing each rank's own window keeps -n/-w from moving the figure (the
/// earliest-start-to-latest-end window added 17% here).
#[test]
fn warmups_and_iterations_do_not_change_the_time_per_op() {
    let time = |n: &str, w: &str| -> String {
        let o = hccl(&[
            "reduce_scatterv",
            "-b",
            "1M",
            "-e",
            "1M",
            "--algo",
            "mesh",
            "-c",
            "0",
            "-n",
            n,
            "-w",
            w,
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let rows = rows(&stdout(&o));
        rows[0].split_whitespace().nth(5).unwrap().to_string()
    };
    let one = time("1", "0");
    assert_eq!(time("2", "1"), one);
    assert_eq!(time("20", "5"), one);
}

/// A fault plan that changes one rank's arguments (count 2048 where the
/// others have 4096) fails the op with
/// HCCL's EI0005 (both values named); it is not reported as a hang.
#[test]
fn wrong_args_fault_is_a_failure_not_a_hang() {
    let plan = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/faults/wrong_count.json"
    );
    let o = hccl(&[
        "all_reduce",
        "-b",
        "16K",
        "-e",
        "16K",
        "-n",
        "1",
        "-w",
        "0",
        "--faults",
        plan,
    ]);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("failed under the fault plan"), "{err}");
    assert!(err.contains("EI0005"), "{err}");
    assert!(!err.contains("hung"), "{err}");
}

#[test]
fn a_simulation_under_mpirun_says_it_is_not_measuring_the_processes() {
    let o = hccl_env(
        &words("all_reduce -b 8K -e 8K -n 1 --transport sim"),
        &[("OMPI_COMM_WORLD_SIZE", Some("2"))],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("every process runs its own simulation"),
        "{}",
        stderr(&o)
    );
    // One rank (or no launcher): no note.
    let o = hccl_env(
        &["all_reduce", "-b", "8K", "-e", "8K", "-n", "1"],
        &[("OMPI_COMM_WORLD_SIZE", Some("1")), ("WORLD_SIZE", None)],
    );
    assert!(!stderr(&o).contains("--transport tcp"), "{}", stderr(&o));
}

#[test]
fn spawn_keeps_the_users_socket_ifname() {
    // --spawn picks loopback only when the user chose no address or
    // interface: HCCL_SOCKET_IFNAME must not be overridden silently.
    let run =
        |ifname: &str| tcp_8k_on_2(&[("HCCL_SOCKET_IFNAME", Some(ifname)), ("HCCL_IF_IP", None)]);
    let o = run("=nonexist0");
    assert_ne!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("HCCL_SOCKET_IFNAME=\"=nonexist0\" matches no interface"),
        "{}",
        stderr(&o)
    );
    let o = run("=lo");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(rows(&stdout(&o))[0].contains("success"), "{}", stdout(&o));
}

#[test]
fn servers_of_unequal_size_run_flat_and_say_so() {
    // 2x8 with the second server cut to 4 devices: a valid rank table, on
    // which hierarchical algorithms cannot run.
    let mut table: serde_json::Value =
        serde_json::from_str(include_str!("../../examples/rank_table_2x8.json")).unwrap();
    let devices = table["server_list"][1]["device"].as_array_mut().unwrap();
    devices.truncate(4);
    let path = scratch("uneven").join("uneven.json");
    std::fs::write(&path, table.to_string()).unwrap();
    let path = path.to_str().unwrap();

    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["ranktable", "check", path])
        .output()
        .unwrap();
    let out = ok_stdout(&o);
    assert!(out.contains("12 ranks on 2 servers"), "{out}");
    assert!(out.contains("different numbers of devices (8, 4)"), "{out}");

    let o = hccl_env(
        &["all_reduce", "-b", "8K", "-e", "8K", "--rank-table", path],
        &[("HCCL_ALGO", Some("level0:ring;level1:H-D_R"))],
    );
    let out = ok_stdout(&o);
    assert!(out.contains("2 servers of uneven size"), "{out}");
    assert!(out.contains("runs as ring, flat over all ranks"), "{out}");
    assert!(out.contains("equal servers"), "{out}");
    assert!(rows(&out)[0].contains("success"), "{out}");
}

/// A port on 127.0.0.1 that was free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// `hccl-test ARGS` as rank `rank` of `n` started by Open MPI: the
/// variables `mpirun` sets (rank, size, local size) and a free root port.
fn as_ompi_rank(rank: u32, n: u32, port: u16, args: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(args)
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_PROFILING_ENABLE")
        .env_remove("RANK")
        .env_remove("WORLD_SIZE")
        .env_remove("LOCAL_WORLD_SIZE")
        .env("OMPI_COMM_WORLD_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_SIZE", n.to_string())
        .env("OMPI_COMM_WORLD_LOCAL_RANK", rank.to_string())
        .env("OMPI_COMM_WORLD_LOCAL_SIZE", n.to_string())
        .env("MASTER_PORT", port.to_string())
        .env("HCCL_IF_IP", "127.0.0.1")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// hccl_test's guide's command (smaller sizes: 8 KiB to 16 KiB, one op).
const GUIDES_COMMAND: &str = "all_reduce -b 8K -e 16K -f 2 -d fp32 -o sum -p 2 -n 1 -w 0";

#[test]
fn under_mpirun_the_guides_command_runs_one_job_over_tcp() {
    // The guide's command (smaller sizes), as two processes Open MPI
    // started: one job over TCP, one table (rank 0's), -p checked.
    let cmd = format!("{GUIDES_COMMAND} --format hccl_test");
    let args = words(&cmd);
    let port = free_port();
    let kids: Vec<_> = (0..2).map(|r| as_ompi_rank(r, 2, port, &args)).collect();
    let outs: Vec<Output> = kids
        .into_iter()
        .map(|k| k.wait_with_output().unwrap())
        .collect();
    for o in &outs {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
    }
    let out = stdout(&outs[0]);
    assert!(out.contains("TCP transport"), "{out}");
    assert!(out.contains("launched by mpirun (Open MPI)"), "{out}");
    assert!(out.contains("# transport: tcp, because mpirun"), "{out}");
    assert!(
        out.contains("-p 2: NPUs per node, matches the 2 ranks mpirun (Open MPI) started on this node (OMPI_COMM_WORLD_LOCAL_SIZE); 1 node of 2"),
        "{out}"
    );
    let header = "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:";
    assert_eq!(out.matches(header).count(), 1, "{out}");
    let table: Vec<&str> = out.lines().skip_while(|l| *l != header).skip(1).collect();
    assert_eq!(table.len(), 2, "{out}");
    assert!(table[0].starts_with("8192 "), "{out}");
    assert!(table.iter().all(|l| l.ends_with("| success")), "{out}");
    assert!(
        stdout(&outs[1]).is_empty(),
        "rank 1 prints no table: {}",
        stdout(&outs[1])
    );

    // -p is hccl_test's NPUs per node: checked against the launcher's
    // local rank count before any rank joins (PMI with MPICH's variable).
    let o = Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(["all_reduce", "-b", "8K", "-e", "8K", "-p", "8"])
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "2")
        .env("MPI_LOCALNRANKS", "2")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("-p/--npus 8 does not match the 2 ranks PMI (MPICH/Slurm) started on this node (MPI_LOCALNRANKS=2); pass -p 2"),
        "{}",
        stderr(&o)
    );
    // Under --spawn, all ranks are on this node.
    let o = hccl(&words("all_reduce --transport tcp --spawn 2 -p 4"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("-p/--npus 4 does not match the 2 ranks"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn real_mpirun_runs_the_guides_command_as_one_job() {
    let have = Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !have {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "mpirun is missing on CI: install openmpi-bin"
        );
        eprintln!("skipped: no mpirun on this machine");
        return;
    }
    let o = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
        .arg(env!("CARGO_BIN_EXE_hccl-test"))
        .args(words(GUIDES_COMMAND))
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_PROFILING_ENABLE")
        .env("MASTER_PORT", free_port().to_string())
        .env("HCCL_IF_IP", "127.0.0.1")
        .output()
        .unwrap();
    let out = ok_stdout(&o);
    assert_eq!(out.matches("size(B)").count(), 1, "one table: {out}");
    assert!(out.contains("launched by mpirun (Open MPI)"), "{out}");
    let r = rows(&out);
    assert_eq!(r.len(), 2, "{out}");
    assert!(r.iter().all(|l| l.ends_with("success")), "{out}");
}

#[test]
fn hccl_test_format_prints_its_columns_and_algorithm_bandwidth() {
    let o = hccl(&words(
        "all_reduce -b 8K -e 16K -f 2 -n 1 -w 0 --format hccl_test",
    ));
    let out = ok_stdout(&o);
    let header = "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:";
    let table: Vec<&str> = out.lines().skip_while(|l| *l != header).skip(1).collect();
    assert_eq!(table.len(), 2, "{out}");
    for (line, size) in table.iter().zip([8192.0, 16384.0]) {
        let cells: Vec<&str> = line.split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        assert_eq!(cells[0].parse::<f64>().unwrap(), size, "{line}");
        let us: f64 = cells[1].parse().unwrap();
        let gbps: f64 = cells[2].parse().unwrap();
        // bytes / us / 10^3 = GB/s with G = 10^9, hccl_test's conversion,
        // from the unrounded time: the time the bandwidth implies is within
        // the printed time's rounding (2 decimals, 0.005 us) of it, plus the
        // bandwidth's own (5 decimals, under 1e-4 relative here).
        assert!(
            (size / gbps / 1e3 - us).abs() <= 0.005 + 1e-4 * us,
            "{line}"
        );
        assert_eq!(cells[3], "success", "{line}");
    }
    let o = hccl(&["all_reduce", "--format", "hccl_test", "--algo", "all"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn env_and_file_errors_are_not_usage_errors() {
    let dir = scratch("nonusage");
    let missing = dir.join("no-such-plan.json");
    type Case<'a> = (Vec<&'a str>, Vec<(&'a str, Option<&'a str>)>, &'a str);
    let cases: Vec<Case<'_>> = vec![
        (
            vec!["all_reduce", "--json", "/nonexistent-dir/x.json"],
            vec![],
            "--json /nonexistent-dir/x.json: cannot create the file",
        ),
        (
            vec!["all_reduce", "-b", "1K", "-e", "1K"],
            vec![("HCCL_ALGO", Some("bogus"))],
            "unknown algorithm \"bogus\"",
        ),
        (
            vec![
                "all_reduce",
                "--transport",
                "tcp",
                "--spawn",
                "2",
                "--json",
                "/nonexistent-dir/x.json",
            ],
            vec![],
            "--json /nonexistent-dir/x.json: cannot create the file",
        ),
        (
            vec!["all_reduce", "-b", "1K", "-e", "1K"],
            vec![("HCCL_PROFILING_ENABLE", Some("yes"))],
            "HCCL_PROFILING_ENABLE=\"yes\"",
        ),
        (
            vec!["all_reduce", "--faults", missing.to_str().unwrap()],
            vec![],
            "--faults",
        ),
    ];
    for (args, env, want) in &cases {
        let o = hccl_env(args, env);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.starts_with("error: "), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: want {want:?} in {err}");
        assert!(!err.contains("Usage:"), "{args:?}: {err}");
        assert!(!err.contains("--help"), "{args:?}: {err}");
    }
}

#[test]
fn profiles_that_cannot_be_written_fail_before_any_row_on_every_transport() {
    // /proc exists (creating it succeeds) but no file can be made there,
    // even by root: the run must fail at once, not after the sweep (sim)
    // or with exit 0 and no files (tcp).
    let env = [
        ("HCCL_PROFILING_ENABLE", Some("1")),
        ("HCCL_PROFILING_OUTPUT_PATH", Some("/proc")),
    ];
    let sim = hccl_env(
        &["all_reduce", "-b", "1K", "-e", "2K", "-f", "2", "-n", "1"],
        &env,
    );
    let tcp = tcp_8k_on_2(&env);
    for o in [&sim, &tcp] {
        assert_eq!(o.status.code(), Some(1), "{}", stderr(o));
        assert!(rows(&stdout(o)).is_empty(), "{}", stdout(o));
        let e = stderr(o);
        assert!(e.contains("cannot write /proc/"), "{e}");
        assert_eq!(e.matches("os error").count(), 1, "said once: {e}");
    }
}

#[test]
fn logs_follow_ascend_global_log_level_and_print_to_stdout() {
    let dir = scratch("tcp-prof-logs");
    let d = dir.to_str().unwrap();
    let run = |level: Option<&str>, to_stdout: Option<&str>| {
        tcp_8k_on_2(&[
            ("HCCL_PROFILING_ENABLE", Some("1")),
            ("HCCL_PROFILING_OUTPUT_PATH", Some(d)),
            ("RUST_LOG", None),
            ("ASCEND_GLOBAL_LOG_LEVEL", level),
            ("ASCEND_SLOG_PRINT_TO_STDOUT", to_stdout),
        ])
    };
    // Default: warnings only; the profile's info line is not shown, but
    // the table says where rank 0's file is, and every rank wrote one.
    let o = run(None, None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("profile written to"), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("# profiling: {d}/")),
        "{}",
        stdout(&o)
    );
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 2);
    // 1 = INFO (CANN's numbering): each rank says where its file went.
    let o = run(Some("1"), None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for r in 0..2 {
        assert!(
            stderr(&o).contains(&format!("[rank {r}]"))
                && stderr(&o).contains("profile written to"),
            "{}",
            stderr(&o)
        );
    }
    // ASCEND_SLOG_PRINT_TO_STDOUT=1: the same lines on stdout instead.
    let o = run(Some("1"), Some("1"));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("profile written to"), "{}", stdout(&o));
    assert!(!stderr(&o).contains("profile written to"), "{}", stderr(&o));
    // A value outside 0-4 is a warning, shown by default.
    let o = run(Some("7"), None);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("ASCEND_GLOBAL_LOG_LEVEL=\"7\" is not a log level"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn plan_and_test_estimate_an_op_with_the_same_link_parameters() {
    // hccl plan used the selector's round figures where hccl test read the
    // preset's links: mesh 4 MiB on 8 ranks was 59.4 us in one, 30.2 in
    // the other.
    for (ranks, servers, count, algo) in [("8", "1", "1M", "mesh"), ("16", "2", "256K", "ring")] {
        let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
            .args(["plan", "all_reduce", "--ranks", ranks, "--servers", servers])
            .args(["--count", count, "--algo", algo])
            .output()
            .unwrap();
        let out = ok_stdout(&o);
        assert!(out.contains("links of preset atlas800t-a2"), "{out}");
        let plan_us: f64 = out
            .lines()
            .find_map(|l| l.trim().strip_prefix("this plan: "))
            .and_then(|v| v.trim_end_matches(" us").parse().ok())
            .unwrap_or_else(|| panic!("{out}"));
        let json = scratch(&format!("plan-vs-test-{ranks}")).join("rows.json");
        let bytes = if ranks == "8" { "4M" } else { "1M" };
        let o = hccl(&[
            "all_reduce",
            "-b",
            bytes,
            "-e",
            bytes,
            "--algo",
            algo,
            "--servers",
            servers,
            "-n",
            "1",
            "-w",
            "0",
            "--json",
            json.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let doc: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
        let test_us = doc["rows"][0]["predicted_us"]
            .as_f64()
            .unwrap_or_else(|| panic!("{doc}"));
        assert!(
            (plan_us - test_us).abs() < 0.06,
            "plan {plan_us} us, test predicts {test_us} us"
        );
    }
}

/// Waits up to `limit` for `child` to exit (a bound, not a measurement).
fn wait_at_most(child: &mut std::process::Child, limit: std::time::Duration) -> Option<i32> {
    let end = std::time::Instant::now() + limit;
    while std::time::Instant::now() < end {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("still running after {limit:?}");
}

/// Starts `hccl ARGS` with stdout piped and reads it up to the column
/// titles (the sweep is running then); returns the child and its stdout.
fn start_until_table(args: &[&str]) -> (std::process::Child, std::process::ChildStdout) {
    use std::io::BufRead;
    let mut c = Command::new(env!("CARGO_BIN_EXE_hccl"));
    c.arg("test")
        .args(args)
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_PROFILING_ENABLE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let mut reader = std::io::BufReader::new(out);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "no table");
        if line.contains("size(B)") {
            break;
        }
    }
    // Unread output stays in the reader's buffer; the pipe is what counts.
    (child, reader.into_inner())
}

/// A sweep that runs for minutes unless stopped (sizes up to 1 GiB).
const LONG_TCP_SWEEP: [&str; 14] = [
    "all_reduce",
    "-b",
    "8K",
    "-e",
    "1G",
    "-f",
    "2",
    "-c",
    "0",
    "--transport",
    "tcp",
    "--spawn",
    "2",
    "-w",
];

#[test]
fn a_closed_stdout_stops_the_sweep_at_once_and_blames_no_rank() {
    let limit = std::time::Duration::from_secs(30);
    // Simulator: 128 ranks in timing mode up to 1 GiB takes minutes.
    let (mut child, out) = start_until_table(&words(
        "all_reduce -b 1K -e 1G -f 2 --servers 16 --mode timing",
    ));
    drop(out);
    assert_eq!(wait_at_most(&mut child, limit), Some(0));
    // --spawn: rank 0's stdout closes; the others lose rank 0, which is
    // not their fault.
    let mut args = LONG_TCP_SWEEP.to_vec();
    args.push("0");
    let (mut child, out) = start_until_table(&args);
    drop(out);
    assert_eq!(wait_at_most(&mut child, limit), Some(0));
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    // No `--spawn: rank 1 of 2 failed` verdict. (A rank's own line about
    // losing rank 0 can still race ahead of rank 0's notice and show.)
    assert!(!err.contains("of 2"), "{err}");
}

#[cfg(target_os = "linux")]
#[test]
fn interrupting_spawn_ends_its_ranks_at_once() {
    // A seed no other run uses marks this run's processes.
    let seed = (4_000_000 + std::process::id()).to_string();
    let mut args = LONG_TCP_SWEEP.to_vec();
    args.extend(["0", "--seed", &seed]);
    let (mut child, _out) = start_until_table(&args);
    let mine = |seed: &str| -> Vec<u32> {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let c = String::from_utf8_lossy(&c).replace('\0', " ");
                    c.contains("hccl") && c.contains(&format!("--seed {seed} "))
                })
            })
            .collect()
    };
    // The parent and its two ranks.
    assert_eq!(mine(&seed).len(), 3, "{:?}", mine(&seed));
    // SIGINT to --spawn alone (as a scheduler or `kill -INT` sends it):
    // its ranks used to run on, orphaned, to the end of the sweep.
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let _ = child.wait();
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !mine(&seed).is_empty() && std::time::Instant::now() < end {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let left = mine(&seed);
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(left.is_empty(), "ranks still running: {left:?}");
}

#[test]
fn spawn_timeout_0_means_never() {
    let o = hccl(&words(
        "all_reduce --transport tcp --spawn 2 --spawn-timeout 0 -b 8K -e 8K -n 1 -w 0",
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(rows(&stdout(&o))[0].contains("success"), "{}", stdout(&o));
}

#[test]
fn the_check_memory_limit_is_the_memory_available_or_the_flag() {
    // 8 x 64 MiB AllReduce needs ~2 GiB to check: over a 100 MiB limit.
    let o = hccl(&words("all_reduce -b 64M -e 64M --check-memory 100M"));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("(limit 100.0 MiB: --check-memory)"),
        "{}",
        stderr(&o)
    );
    // Without the flag the limit says where it comes from.
    let o = hccl(&["all_reduce", "-e", "1G", "--servers", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("GiB available; --check-memory to change") || e.contains("memory is unknown"),
        "{e}"
    );
}

#[test]
fn a_cluster_too_large_to_simulate_is_refused_as_by_hccl_sim() {
    // 100,000 Atlas 800T A2 servers, 800,000 ranks: refused before the
    // fabric is built (it would grow for minutes), in timing mode too.
    let huge = "all_reduce -b 1K -e 1K --mode timing --servers 100000";
    let o = hccl(&words(huge));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--servers 100000: 800000 ranks is more than the limit of 16384"),
        "{e}"
    );
    assert!(e.contains("allow them with --max-ranks 800000"), "{e}");
    assert!(e.contains("Usage: hccl test"), "{e}");
    // --max-ranks lifts the rank limit: the memory estimate is next
    // (800,000 ranks x (16 KiB + 2 ops x 48 B) is ~12 GiB, over 1G).
    let o = hccl(&words(&format!(
        "{huge} -w 0 -n 2 --max-ranks 800000 --sim-memory 1G"
    )));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("--servers 100000: the simulation would need about 12.3 GiB of memory (800000 ranks, 2 op(s)"),
        "{e}"
    );
    assert!(
        e.contains(
            "(--sim-memory); simulate fewer ranks, or raise the limit with --sim-memory 13G"
        ),
        "{e}"
    );
    assert!(!e.contains("--max-ranks"), "{e}");
    // The limit is the flag's: 3 servers (24 ranks) above --max-ranks 16,
    // 2 servers (16 ranks) at it.
    let o = hccl(&words(
        "all_reduce -b 1K -e 1K -n 1 -w 0 --servers 3 --max-ranks 16",
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--servers 3: 24 ranks is more than the limit of 16 (--max-ranks)"),
        "{}",
        stderr(&o)
    );
    let o = hccl(&words(
        "all_reduce -b 1K -e 1K -n 1 -w 0 --servers 2 --max-ranks 16",
    ));
    let out = ok_stdout(&o);
    assert!(out.contains("16 ranks, 2 servers"), "{out}");
    // hccl-test shares the flags and the guard.
    let o = Command::new(env!("CARGO_BIN_EXE_hccl-test"))
        .args(words(huge))
        .env_remove("HCCL_ALGO")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--max-ranks 800000"), "{}", stderr(&o));
    assert!(stderr(&o).contains("Usage: hccl-test"), "{}", stderr(&o));
}

#[test]
fn the_default_profile_directory_is_not_the_current_one() {
    // Run from a directory standing for a checkout: nothing may appear in
    // it; the profile goes to CANN's $ASCEND_WORK_PATH/profiling_data.
    let cwd = scratch("prof-cwd");
    let work = scratch("prof-work");
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(words("test all_reduce -b 1K -e 1K -n 1 -w 0"))
        .current_dir(&cwd)
        .env_remove("HCCL_ALGO")
        .env_remove("HCCL_PROFILING_OUTPUT_PATH")
        .env("HCCL_PROFILING_ENABLE", "1")
        .env("ASCEND_WORK_PATH", &work)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_dir(&cwd).unwrap().count(),
        0,
        "the checkout stays clean"
    );
    let files: Vec<_> = std::fs::read_dir(work.join("profiling_data"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(files.len(), 1);
    assert!(stdout(&o).contains(&format!(
        "# profiling: {}",
        work.join("profiling_data").display()
    )));
}

#[test]
fn a_bad_hccl_exec_timeout_is_not_a_usage_error_in_hccl_sim() {
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["sim", "--collective", "all_reduce", "--count", "4"])
        .env("HCCL_EXEC_TIMEOUT", "abc")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: HCCL_EXEC_TIMEOUT=\"abc\" is not a number of seconds"),
        "{err}"
    );
    assert!(!err.contains("--help") && !err.contains("Usage"), "{err}");
    // Past HCCL's range (2147483647 s) is refused too, not saturated.
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["sim", "--collective", "all_reduce", "--count", "4"])
        .env("HCCL_EXEC_TIMEOUT", "1e300")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("in 0..=2147483647 (HCCL's range)"), "{err}");
    // The flag is an argument: a usage error, and it wins over the variable.
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(words(
            "sim --collective all_reduce --count 4 --exec-timeout 5",
        ))
        .env("HCCL_EXEC_TIMEOUT", "abc")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn malformed_launcher_variables_fail_as_comm_from_env_does() {
    let cases = [
        (
            &[("RANK", Some("0")), ("WORLD_SIZE", Some("abc"))],
            "error: WORLD_SIZE=\"abc\": not a whole number",
        ),
        (
            &[("RANK", Some("0")), ("WORLD_SIZE", Some("-2"))],
            "error: WORLD_SIZE=\"-2\": not a whole number",
        ),
        (
            &[
                ("OMPI_COMM_WORLD_SIZE", Some("x")),
                ("OMPI_COMM_WORLD_RANK", Some("0")),
            ],
            "error: OMPI_COMM_WORLD_SIZE=\"x\": not a whole number",
        ),
    ];
    for (env, want) in cases {
        let o = hccl_env(&["all_reduce", "-b", "8K", "-e", "8K"], env);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{env:?}: {err}");
        assert!(err.starts_with(want), "{env:?}: {err}");
        assert!(!err.contains("Usage"), "{env:?}: {err}");
        assert!(!stdout(&o).contains("simulator"), "{env:?}");
    }
}

#[test]
fn bad_hccl_variables_are_refused_on_the_simulator_as_comm_refuses_them() {
    for (var, value) in [
        ("HCCL_EXEC_TIMEOUT", "abc"),
        ("HCCL_DETERMINISTIC", "maybe"),
        ("HCCL_BACKEND", "foo"),
    ] {
        let o = hccl_env(
            &["all_reduce", "-b", "8K", "-e", "8K"],
            &[(var, Some(value))],
        );
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{var}={value}: {err}");
        assert!(err.starts_with("error: "), "{var}={value}: {err}");
        assert!(
            err.contains(var) && err.contains(value),
            "{var}={value}: {err}"
        );
    }
}

#[test]
fn logs_to_a_pipe_have_no_colour_codes() {
    let o = hccl_env(
        &["all_reduce", "-b", "8K", "-e", "8K", "--mode", "timing"],
        &[("ASCEND_GLOBAL_LOG_LEVEL", Some("9")), ("RUST_LOG", None)],
    );
    let err = stderr(&o);
    assert!(err.contains("is not a log level"), "{err}");
    assert!(!err.contains('\u{1b}'), "ANSI escape in a pipe: {err:?}");
}

#[test]
fn a_bootstrap_timeout_is_said_once() {
    // A free port (MASTER_PORT=0 is refused before any bootstrap).
    let port = free_port().to_string();
    let o = hccl_env(
        &["all_reduce", "-b", "8K", "-e", "8K", "--transport", "tcp"],
        &[
            ("RANK", Some("0")),
            ("WORLD_SIZE", Some("2")),
            ("MASTER_ADDR", Some("127.0.0.1")),
            ("MASTER_PORT", Some(port.as_str())),
            ("HCCL_IF_IP", Some("127.0.0.1")),
            ("HCCL_CONNECT_TIMEOUT", Some("1")),
        ],
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("bootstrap timed out").count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
}

#[test]
fn counts_of_one_are_singular() {
    let o = hccl_env(
        &words("all_reduce -b 8K -e 8K --transport tcp --spawn 1"),
        &[],
    );
    let out = stdout(&o);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        out.contains("# ranks: 1 process on the TCP transport"),
        "{out}"
    );
    let o = Command::new(env!("CARGO_BIN_EXE_hccl"))
        .args(["topo", "show", "--preset", "leaf-spine", "--servers", "2"])
        .output()
        .unwrap();
    let out = stdout(&o);
    assert!(out.contains("3 nodes (2 NPUs, 1 other node),"), "{out}");
}

/// `-b -8K`, `-n -1`, ...: the value reaches the flag's parser, which
/// names the flag and value, instead of clap's "unexpected argument '-8'"
/// and its `-- -8` tip (following it made the value a positional).
#[test]
fn negative_values_are_refused_naming_the_flag_and_value() {
    let cases: &[(&str, &[&str])] = &[
        (
            "all_reduce -b -8K -e 64K",
            &["'-8K' for '--minbytes", "a size is not negative"],
        ),
        (
            "all_reduce -b 8K -e -64K",
            &["'-64K' for '--maxbytes", "a size is not negative"],
        ),
        (
            "all_reduce -b 8K -e 64K -i -1K",
            &["'-1K' for '--stepbytes", "a size is not negative"],
        ),
        (
            "all_reduce -b 8K -e 64K -f -2",
            &["-f/--stepfactor -2 must be a number greater than 1"],
        ),
        ("all_reduce -n -1", &["'-1' for '--iters", "-1 is negative"]),
        (
            "all_reduce -w -1",
            &["'-1' for '--warmup_iters", "-1 is negative"],
        ),
        ("broadcast -r -1", &["'-1' for '--root", "-1 is negative"]),
        (
            "all_reduce --seed -1",
            &["'-1' for '--seed", "-1 is negative"],
        ),
        ("all_reduce -p -2", &["'-2' for '--npus", "-2 is negative"]),
        (
            "all_reduce --check-memory -5G",
            &["'-5G' for '--check-memory", "a memory size is not negative"],
        ),
        (
            "all_reduce --sim-memory -1G",
            &["'-1G' for '--sim-memory", "a memory size is not negative"],
        ),
        (
            "all_reduce --max-ranks -8",
            &["'-8' for '--max-ranks", "-8 is negative"],
        ),
        (
            "all_reduce --op-overhead -5",
            &["'-5' is not a number of microseconds"],
        ),
    ];
    for (cmd, wants) in cases {
        let o = hccl(&words(cmd));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{cmd}: {err}");
        assert!(err.starts_with("error: "), "{cmd}: {err}");
        for want in *wants {
            assert!(err.contains(want), "{cmd}: want {want:?} in {err}");
        }
        assert!(!err.contains("unexpected argument"), "{cmd}: {err}");
        assert!(!err.contains("tip: to pass"), "{cmd}: {err}");
        assert!(o.stdout.is_empty(), "{cmd}: nothing on stdout");
    }
}

/// HCCL_BACKEND=bogus is refused on the TCP path as on the simulator's:
/// exit 1, the variable and value named, before any rank starts.
#[test]
fn a_bad_hccl_backend_is_refused_before_the_tcp_ranks_start() {
    let env = [("HCCL_BACKEND", Some("bogus"))];
    let sim = hccl_env(&words("all_reduce -b 8K -e 8K -p 2"), &env);
    let tcp = tcp_8k_on_2(&env);
    let err = stderr(&tcp);
    assert_eq!(tcp.status.code(), Some(1), "{err}");
    assert_eq!(tcp.status.code(), sim.status.code(), "{}", stderr(&sim));
    assert!(err.starts_with("error: "), "{err}");
    assert!(
        err.contains("HCCL_BACKEND") && err.contains("bogus"),
        "{err}"
    );
    // One line from the launcher, none from ranks ("[ranks 0-1] ...").
    assert!(!err.contains("[rank"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(tcp.stdout.is_empty(), "{}", stdout(&tcp));
    // A good value in another case still runs.
    let o = tcp_8k_on_2(&[("HCCL_BACKEND", Some("TCP"))]);
    assert_eq!(rows(&ok_stdout(&o)).len(), 1, "{}", stdout(&o));
}

/// `-r` for a collective without a root and `-o` for one that does not
/// reduce are accepted (hccl_test takes them for every collective) with a
/// header note; a root outside the world is still refused where it counts.
#[test]
fn flags_a_collective_does_not_use_get_a_note_not_an_error() {
    let note = |cmd: &str| -> Vec<String> {
        let out = ok_stdout(&hccl(&words(cmd)));
        out.lines()
            .filter(|l| l.contains("is ignored"))
            .map(str::to_string)
            .collect()
    };
    let base = "-b 8K -e 8K -p 2 -n 1 -w 0";
    assert_eq!(
        note(&format!("all_reduce -r 9 {base}")),
        ["# note: -r 9 is ignored: all_reduce has no root"]
    );
    assert_eq!(
        note(&format!("all_gather -o max {base}")),
        ["# note: -o max is ignored: all_gather does not reduce"]
    );
    assert_eq!(
        note(&format!("alltoall -o min -r 1 {base}")),
        [
            "# note: -r 1 is ignored: alltoall has no root",
            "# note: -o min is ignored: alltoall does not reduce"
        ]
    );
    // Flags that apply, and the defaults, say nothing.
    assert!(note(&format!("all_reduce -o max {base}")).is_empty());
    assert!(note(&format!("reduce -o max -r 1 {base}")).is_empty());
    assert!(note(&format!("all_gather {base}")).is_empty());
    for coll in ["broadcast", "reduce", "scatter", "gather"] {
        let o = hccl(&words(&format!("{coll} -r 9 {base}")));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{coll}: {err}");
        assert!(
            err.contains("-r/--root 9 is outside the world of 2 ranks"),
            "{coll}: {err}"
        );
    }
    // Over TCP too, in rank 0's header.
    let o = hccl_env(
        &words("all_gather --transport tcp --spawn 2 -b 8K -e 8K -n 1 -w 0 -o max -r 5"),
        &[],
    );
    let out = ok_stdout(&o);
    assert_eq!(
        out.matches("# note: -o max is ignored: all_gather does not reduce")
            .count(),
        1,
        "{out}"
    );
    assert_eq!(
        out.matches("# note: -r 5 is ignored: all_gather has no root")
            .count(),
        1,
        "{out}"
    );
}
