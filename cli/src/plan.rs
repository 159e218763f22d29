//! `hccl plan`: print one rank's schedule for a collective, its cost
//! estimate and the verifier's verdict.

use std::fmt::Write as _;
use std::io::Write;
use std::process::ExitCode;

use hccl_algos::algo::{plan, schedule, AlgoSpec};
use hccl_algos::collective::{CollectiveArgs, CollectiveKind, P2p};
use hccl_algos::layout::GroupLayout;
use hccl_algos::select::{explain, predict, select, CostModel, HcclAlgo};
use hccl_algos::verify::verify;
use hccl_algos::{DataType, Op, RankSchedule, ReduceOp};

use crate::sim::{bad_flag, FlagError};

/// Arguments of `hccl plan`.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PlanArgs {
    /// Collective, as hccl_test names it: all_reduce, reduce_scatter,
    /// all_gather, broadcast, reduce, scatter, gather, alltoall, barrier, ...
    collective: String,
    /// Number of ranks.
    #[arg(long, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    ranks: u32,
    /// Count in elements, with HCCL's meaning for the collective (per rank
    /// for all_reduce; per-rank receive count for reduce_scatter; ...);
    /// K, M, G suffixes as in `hccl sim --count` (1K = 1024).
    #[arg(long, default_value = "0", value_parser = super::test::parse_size_arg, allow_hyphen_values = true)]
    count: u64,
    /// Element type (fp32, fp16, bf16, int8, ...).
    #[arg(long, default_value = "fp32")]
    dtype: String,
    /// Reduce op (sum, prod, max, min, avg).
    #[arg(long, default_value = "sum")]
    op: String,
    /// Root rank of broadcast / reduce / scatter / gather.
    #[arg(long, default_value_t = 0, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    root: u32,
    /// Algorithm: ring, mesh, H-D_R, NHR, NB, tree, pairwise, oneshot, doubling, or per level
    /// "level0:mesh;level1:H-D_R". Default: HCCL_ALGO if set, else the selector.
    #[arg(long)]
    algo: Option<String>,
    /// Number of servers (ranks are split evenly, server by server).
    #[arg(long, default_value_t = 1, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    servers: u32,
    /// Rank whose schedule is printed.
    #[arg(long, default_value_t = 0, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
    rank: u32,
    /// Send and receive buffers alias (HCCL's in-place form).
    #[arg(long)]
    in_place: bool,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Runs `hccl plan`: exit status 0, 2 when the verifier fails or a flag's
/// value cannot be planned (a [`FlagError`], printed with the usage line
/// as clap's errors are), 1 for a bad `HCCL_ALGO` or a planner failure.
pub(crate) fn run(a: PlanArgs) -> anyhow::Result<ExitCode> {
    let (text, ok) = match render(&a) {
        Ok(r) => r,
        Err(e) if e.downcast_ref::<FlagError>().is_some() => {
            return Ok(crate::usage_error(&["plan"], format!("{e:#}")))
        }
        Err(e) => return Err(e),
    };
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(2)
    })
}

/// The op the flags describe; every error is a [`FlagError`].
fn collective_args(a: &PlanArgs) -> anyhow::Result<CollectiveArgs> {
    let kind: CollectiveKind = a.collective.parse().map_err(bad_flag)?;
    let dtype: DataType = a
        .dtype
        .parse()
        .map_err(|e| bad_flag(format!("--dtype: {e}")))?;
    let op: ReduceOp = a.op.parse().map_err(|e| bad_flag(format!("--op: {e}")))?;
    let p = a.ranks;
    let args = match kind {
        CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV => CollectiveArgs::v_counts(
            kind == CollectiveKind::ReduceScatterV,
            vec![a.count; p as usize],
            dtype,
        )
        .map_err(bad_flag)?,
        CollectiveKind::AllToAllV => {
            CollectiveArgs::all_to_all_v(vec![vec![a.count; p as usize]; p as usize], dtype)
                .map_err(bad_flag)?
        }
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => {
            let pair = P2p {
                src: a.root,
                dst: (a.root + 1) % p.max(1),
                count: a.count,
            };
            CollectiveArgs::p2p(kind == CollectiveKind::BatchSendRecv, vec![pair], dtype, p)
        }
        _ => CollectiveArgs::new(kind, a.count, dtype, p).with_root(a.root),
    };
    let args = args.with_op(op).with_in_place(a.in_place);
    args.validate().map_err(bad_flag)?;
    Ok(args)
}

/// Above this many ranks `hccl plan` plans only the printed rank and skips
/// the verifier: both materialize every rank's schedule, which grows as
/// ranks² for ring-like algorithms (2048 ranks took 14 s and 2 GB).
const VERIFY_MAX_RANKS: u32 = 1024;

/// Why the verifier did not run on a world above [`VERIFY_MAX_RANKS`].
const VERIFY_SKIPPED: &str = "skipped above 1024 ranks (it checks every rank's schedule; \
     use hccl test --mode timing for large worlds)";

/// `1 rank`, `4 ranks`.
fn plural(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Largest world `hccl plan` accepts: the layout and the arguments hold a
/// few words per rank, so 2^32 ranks asked for 17 GB before failing.
const MAX_RANKS: u32 = 1 << 20;

/// The ranks' layout; every error is a [`FlagError`].
fn layout(a: &PlanArgs) -> anyhow::Result<GroupLayout> {
    if a.ranks == 0 {
        return Err(bad_flag("--ranks 0: plan at least one rank"));
    }
    if a.ranks > MAX_RANKS {
        return Err(bad_flag(format!(
            "--ranks {} is more than hccl plan handles ({MAX_RANKS}, 2^20)",
            a.ranks
        )));
    }
    if a.servers == 0 || !a.ranks.is_multiple_of(a.servers) {
        return Err(bad_flag(format!(
            "--servers {} does not divide --ranks {} evenly",
            a.servers, a.ranks
        )));
    }
    Ok(GroupLayout::servers(a.servers, a.ranks / a.servers))
}

/// The selector's costs for `--ranks` on `--servers`, and where they come
/// from: the links `hccl test` reads off its default cluster (the
/// atlas800t-a2 preset with these servers and ranks per server, through
/// `cluster::cost_model`), so both commands estimate an op alike; the
/// selector's A2-like round figures ([`CostModel::default`]) when a server
/// would hold more NPUs than an A2 server, or the world is above
/// [`VERIFY_MAX_RANKS`] (the preset's fabric is not built for it).
fn costs(a: &PlanArgs) -> (CostModel, String) {
    use super::test::cluster;
    let per = a.ranks / a.servers.max(1);
    let full = hccl_topology::presets::sources::A2_NPUS_PER_SERVER;
    let defaults = |why: String| {
        (
            CostModel::default(),
            format!("the selector's default A2-like round figures: {why}"),
        )
    };
    if a.ranks > VERIFY_MAX_RANKS {
        return defaults(format!(
            "above {VERIFY_MAX_RANKS} ranks the preset is not built"
        ));
    }
    if per > full {
        return defaults(format!(
            "{per} ranks per server is more than an atlas800t-a2 server's {full}"
        ));
    }
    let src = cluster::Source::Preset {
        name: "atlas800t-a2",
        servers: a.servers,
        npus: Some(per),
    };
    match cluster::build(&src) {
        Ok(c) => (
            cluster::cost_model(&c.fabric),
            format!(
                "links of preset atlas800t-a2, {} of {per} NPUs, as hccl test reads them",
                plural(a.servers as usize, "server")
            ),
        ),
        Err(e) => defaults(format!("the preset could not be built ({e})")),
    }
}

fn op_line(op: &Op) -> String {
    match *op {
        Op::Send { peer, tag, src } => format!("send        -> {peer:<4} tag {tag:<9} {src}"),
        Op::Recv { peer, tag, dst } => format!("recv        <- {peer:<4} tag {tag:<9} {dst}"),
        Op::RecvReduce {
            peer,
            tag,
            local,
            dst,
            op,
        } => {
            let label = format!("recv-{op}");
            format!("{label:<11} <- {peer:<4} tag {tag:<9} {dst} = {local} {op} received")
        }
        Op::Copy { src, dst } if src.len == 0 && dst.len == 0 => {
            "join (waits for all earlier steps)".to_string()
        }
        Op::Copy { src, dst } => format!("copy                            {dst} = {src}"),
        Op::LocalReduce { src, dst, op } => {
            format!("reduce-{op:<5}                    {dst} {op}= {src}")
        }
        Op::Divide { dst, divisor } => {
            format!("divide                          {dst} /= {divisor}")
        }
    }
}

fn deps_text(s: &hccl_algos::Step) -> String {
    if s.deps.all_before {
        "after all".into()
    } else if s.deps.ids().is_empty() {
        String::new()
    } else {
        let ids: Vec<String> = s.deps.ids().iter().map(|d| format!("#{d}")).collect();
        format!("after {}", ids.join(","))
    }
}

/// The text (or JSON) `hccl plan` prints, and whether the verifier passed.
///
/// # Errors
/// A [`FlagError`] for a flag's value that cannot be planned (`--ranks 0`,
/// an unknown collective or `--algo`, an algorithm that does not implement
/// the collective); a bad `HCCL_ALGO`, or the planner's own failure.
pub(crate) fn render(a: &PlanArgs) -> anyhow::Result<(String, bool)> {
    let layout = layout(a)?;
    let args = collective_args(a)?;
    if a.rank >= a.ranks {
        return Err(bad_flag(format!(
            "--rank {} is outside the {}; use a rank in 0..={}",
            a.rank,
            plural(a.ranks as usize, "rank"),
            a.ranks.saturating_sub(1)
        )));
    }
    let (cost, costs_from) = costs(a);
    let (spec, how) = match &a.algo {
        Some(s) => (
            s.parse::<AlgoSpec>()
                .map_err(|e| bad_flag(format!("--algo {s:?}: {e}")))?,
            "--algo".to_string(),
        ),
        None => {
            let env = HcclAlgo::from_setting(std::env::var("HCCL_ALGO").ok().as_deref())?;
            let sel = select(&args, &layout, &cost, env.as_ref());
            (sel.spec, format!("selector: {}", sel.reason))
        }
    };
    let planning = || format!("planning {} with {spec}", args.kind);
    // A forced algorithm that cannot plan the op is the flag's fault.
    let forced = |e: hccl_algos::algo::AlgoError| -> anyhow::Error {
        if a.algo.is_some() {
            bad_flag(format!("--algo {spec}: {e}"))
        } else {
            anyhow::Error::new(e).context(planning())
        }
    };
    // `None`: the verifier was skipped (see VERIFY_MAX_RANKS).
    let (mine, verdict) = if a.ranks > VERIFY_MAX_RANKS {
        let (buffers, steps) = plan(&args, &spec, &layout, a.rank).map_err(forced)?;
        let mine = RankSchedule {
            rank: a.rank,
            buffers,
            steps: steps.collect(),
        };
        (mine, None)
    } else {
        let mut scheds = schedule(&args, &spec, &layout).map_err(forced)?;
        let verdict = verify(&args, &scheds);
        (scheds.swap_remove(a.rank as usize), Some(verdict))
    };
    let ok = !matches!(verdict, Some(Err(_)));
    let predicted = predict(&args, &spec, &layout, &cost);
    // Point-to-point and V kinds keep their counts per pair or per rank.
    let (count, per) = match args.kind {
        CollectiveKind::SendRecv | CollectiveKind::BatchSendRecv => (a.count, " per pair"),
        CollectiveKind::AllGatherV | CollectiveKind::ReduceScatterV | CollectiveKind::AllToAllV => {
            (a.count, " per block")
        }
        _ => (args.count, ""),
    };
    if a.json {
        let v = serde_json::json!({
            "collective": args.kind,
            "ranks": a.ranks,
            "servers": a.servers,
            "count": count,
            "dtype": args.dtype,
            "op": args.op,
            "root": args.root,
            "algorithm": spec.to_string(),
            "predicted_ns": predicted,
            "costs": costs_from,
            "schedule": mine,
            "verifier": match &verdict {
                Some(Ok(r)) => serde_json::json!({"ok": true, "messages": r.messages, "bytes_sent": r.bytes_sent, "critical_path_messages": r.critical_path_messages}),
                Some(Err(e)) => serde_json::json!({"ok": false, "error": e.to_string()}),
                None => serde_json::json!({"skipped": VERIFY_SKIPPED}),
            },
        });
        return Ok((serde_json::to_string_pretty(&v)?, ok));
    }
    let mut t = String::new();
    let esz = args.dtype.size();
    writeln!(
        t,
        "{} on {}, count {}{per} x {} ({} bytes), op {}, root {}{}",
        args.kind,
        plural(a.ranks as usize, "rank") + &format!(" ({})", plural(a.servers as usize, "server")),
        count,
        args.dtype,
        count.saturating_mul(esz),
        args.op,
        args.root,
        if args.in_place { ", in place" } else { "" }
    )?;
    writeln!(t, "algorithm: {spec} ({how})")?;
    writeln!(
        t,
        "rank {}: input {} B, output {} B, scratch {} B, {}",
        a.rank,
        mine.buffers.input,
        mine.buffers.output,
        mine.buffers.scratch,
        plural(mine.steps.len(), "step")
    )?;
    for (i, s) in mine.steps.iter().enumerate() {
        writeln!(t, "  #{i:<4} {:<72} {}", op_line(&s.op), deps_text(s))?;
    }
    writeln!(t, "cost estimate (alpha-beta-gamma, {costs_from}):")?;
    match predicted {
        Some(ns) => writeln!(t, "  this plan: {:.1} us", ns / 1000.0)?,
        None => writeln!(t, "  this plan: not costable")?,
    }
    // Every candidate the selector weighed (as many as "cheapest of N"
    // says), so a forced algorithm is listed wherever it ranks.
    for c in explain(&args, &layout, &cost) {
        writeln!(t, "  {c}")?;
    }
    match &verdict {
        Some(Ok(r)) => writeln!(
            t,
            "verifier: OK ({}, {} sent, critical path {})",
            plural(r.messages as usize, "message"),
            plural(r.bytes_sent as usize, "byte"),
            plural(r.critical_path_messages as usize, "message")
        )?,
        Some(Err(e)) => writeln!(t, "verifier: FAILED: {e}")?,
        None => writeln!(t, "verifier: {VERIFY_SKIPPED}")?,
    }
    Ok((t.trim_end().to_string(), ok))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(collective: &str, ranks: u32, count: u64, algo: &str, servers: u32) -> PlanArgs {
        PlanArgs {
            collective: collective.into(),
            ranks,
            count,
            dtype: "fp32".into(),
            op: "sum".into(),
            root: 0,
            algo: Some(algo.into()),
            servers,
            rank: 0,
            in_place: false,
            json: false,
        }
    }

    #[test]
    fn point_to_point_shows_its_pair_count_and_one_candidate() {
        let mut a = args("send_recv", 2, 8, "ring", 1);
        a.algo = None;
        let (t, ok) = render(&a).unwrap();
        assert!(ok, "{t}");
        assert!(t.contains("count 8 per pair x fp32 (32 bytes)"), "{t}");
        assert!(t.contains("(selector: the only candidate)"), "{t}");
        assert!(t.contains("scratch 0 B, 1 step\n"), "{t}");
        // The cost list names the schedule once, not every algorithm.
        assert!(!t.contains("  mesh "), "{t}");
    }

    #[test]
    fn every_candidate_is_listed_and_the_forced_one_among_them() {
        let mut a = args("all_reduce", 4, 1024, "ring", 1);
        a.algo = None;
        let (t, _) = render(&a).unwrap();
        let n: usize = t
            .split("cheapest of ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no candidate count: {t}"));
        let listed = t
            .lines()
            .skip_while(|l| !l.starts_with("  this plan:"))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .count();
        assert_eq!(listed, n, "{t}");
        let (t, _) = render(&args("all_reduce", 3, 1024, "H-D_R", 1)).unwrap();
        let costs = t.split("  this plan:").nth(1).unwrap();
        assert!(
            costs.lines().any(|l| l.trim_start().starts_with("H-D_R ")),
            "{t}"
        );
    }

    #[test]
    fn ring_allreduce_p4() {
        let (text, ok) = render(&args("all_reduce", 4, 10, "ring", 1)).unwrap();
        assert!(ok);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn hd_allreduce_p6() {
        // Rank 1 is active (rank 0 folds out; its plan is two steps).
        let mut a = args("all_reduce", 6, 12, "H-D_R", 1);
        a.rank = 1;
        let (text, ok) = render(&a).unwrap();
        assert!(ok);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn nhr_allreduce_p5() {
        // Rank 3 is the first member of B in the top split 5 = 3 + 2, so it
        // also gets the message of A's unpaired member (rank 2).
        let mut a = args("all_reduce", 5, 10, "NHR", 1);
        a.rank = 3;
        let (text, ok) = render(&a).unwrap();
        assert!(ok);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn hierarchical_allreduce_2x4() {
        let (text, ok) = render(&args("all_reduce", 8, 16, "level0:ring;level1:ring", 2)).unwrap();
        assert!(ok);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn pipeline_allgather_2x4() {
        // Rank 5 = server 1, local 1: ring step 0 sends its own block to
        // rank 1 (the other server) and to its server mates 6, 7, 4, while
        // rank 1's block arrives; step 1 forwards rank 1's block inside the
        // server (HCCL's Pipeline.md, figure 2).
        let mut a = args("all_gather", 8, 4, "pipeline", 2);
        a.rank = 5;
        let (text, ok) = render(&a).unwrap();
        assert!(ok);
        insta::assert_snapshot!(text);
    }

    #[test]
    fn count_takes_size_suffixes_like_sim() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            plan: PlanArgs,
        }
        let parse = |count: &str| {
            let words = ["hccl-plan", "all_reduce", "--ranks", "2", "--count", count];
            Cli::try_parse_from(words).map(|c| c.plan.count)
        };
        assert_eq!(parse("1K").unwrap(), 1024);
        assert_eq!(parse("2M").unwrap(), 2 << 20);
        assert_eq!(parse("7").unwrap(), 7);
        assert!(parse("4Q").is_err(), "4Q is not a count");
    }

    #[test]
    fn one_message_is_singular() {
        let (t, ok) = render(&args("send_recv", 2, 1, "ring", 1)).unwrap();
        assert!(ok, "{t}");
        assert!(
            t.ends_with("verifier: OK (1 message, 4 bytes sent, critical path 1 message)"),
            "{t}"
        );
    }

    #[test]
    fn large_world_plans_one_rank_and_skips_the_verifier() {
        let mut a = args("all_reduce", 2048, 1, "ring", 1);
        a.rank = 5;
        let (t, ok) = render(&a).unwrap();
        assert!(ok, "a skipped verifier is not a failure");
        assert!(
            t.ends_with("verifier: skipped above 1024 ranks (it checks every rank's schedule; use hccl test --mode timing for large worlds)"),
            "{t}"
        );
        // Rank 5's ring: 2 x 2047 sends and receives, plus its local copy.
        assert!(t.contains("rank 5: input 4 B, output 4 B"), "{t}");
        assert!(t.contains("-> 6 "), "{t}");
        assert!(t.contains("<- 4 "), "{t}");
        a.json = true;
        let (j, ok) = render(&a).unwrap();
        assert!(ok);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert!(
            v["verifier"]["skipped"]
                .as_str()
                .unwrap()
                .starts_with("skipped above 1024 ranks"),
            "{j}"
        );
        assert_eq!(v["schedule"]["rank"], 5, "{j}");
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let e = render(&args("all_reduce", 6, 12, "ring", 4))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--servers 4 does not divide --ranks 6"), "{e}");
        let e = render(&args("all_reduce", u32::MAX, 1, "ring", 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("--ranks 4294967295 is more than"), "{e}");
        let e = render(&args("all_reduce", 0, 1, "ring", 1))
            .unwrap_err()
            .to_string();
        assert_eq!(e, "--ranks 0: plan at least one rank");
        let mut a = args("broadcast", 4, 1024, "ring", 1);
        a.rank = 4;
        let e = render(&a).unwrap_err().to_string();
        assert_eq!(e, "--rank 4 is outside the 4 ranks; use a rank in 0..=3");
        a.rank = 0;
        a.root = 4;
        let e = render(&a).unwrap_err().to_string();
        assert!(e.ends_with("use a root in 0..=3"), "{e}");
        let e = render(&args("all_reduce", 4, 1, "fast", 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("\"fast\""), "{e}");
        let e = render(&args("alltoall", 4, 1, "ring", 1)).unwrap_err();
        assert!(
            format!("{e:#}").contains("use one of: mesh, pairwise"),
            "{e:#}"
        );
    }
}
