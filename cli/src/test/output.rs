//! What `hccl test` prints and writes: the header, the aligned table and
//! the JSON document with the same rows.

use hccl_topology::Fabric;
use serde::Serialize;

use super::check::Check;

/// One row: one size with one algorithm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Row {
    /// nccl-tests' size of the op, bytes (`count × dtype size`).
    pub size_bytes: u64,
    /// Elements of that size.
    pub count: u64,
    /// Element type.
    pub dtype: String,
    /// Reduction (`None` for data movement).
    pub redop: Option<String>,
    /// Root (`None` for unrooted collectives).
    pub root: Option<u32>,
    /// Average simulated time of one op, µs.
    pub time_us: f64,
    /// `size / time`, GB/s (G = 10^9).
    pub algbw_gbps: f64,
    /// `algbw ×` nccl-tests' bus factor, GB/s.
    pub busbw_gbps: f64,
    /// Algorithm run (HCCL's names).
    pub algorithm: String,
    /// Why this algorithm: `selector`, `--algo`, `HCCL_ALGO`, `--algo all`.
    pub chosen_by: String,
    /// The selector's α–β–γ prediction for it, µs (when costable).
    pub predicted_us: Option<f64>,
    /// The check.
    pub check: Check,
}

/// Column titles and widths of the table; a value wider than its column
/// widens it (the algorithm column: [`Table`]).
const COLS: [(&str, usize); 10] = [
    ("size(B)", 13),
    ("count(elems)", 13),
    ("dtype", 7),
    ("redop", 6),
    ("root", 5),
    ("time(us)", 12),
    ("algbw(GB/s)", 12),
    ("busbw(GB/s)", 12),
    ("algorithm", 26),
    ("check", 0),
];

/// The table's column layout: [`COLS`] with the algorithm column as wide
/// as the longest algorithm name of the run, so the check column stays
/// aligned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Table {
    algo_width: usize,
}

impl Table {
    /// The layout for rows whose algorithm names are `names`.
    pub(crate) fn new<'a>(names: impl IntoIterator<Item = &'a str>) -> Table {
        let least = COLS[8].1;
        let algo_width = names.into_iter().map(str::len).fold(least, usize::max);
        Table { algo_width }
    }

    fn width(&self, col: usize) -> usize {
        if col == 8 {
            self.algo_width
        } else {
            COLS[col].1
        }
    }

    /// The column titles, aligned like [`Table::row`].
    pub(crate) fn header(&self) -> String {
        self.line(COLS.iter().map(|(name, _)| name.to_string()))
    }

    /// One table line.
    pub(crate) fn row(&self, r: &Row) -> String {
        let dash = || "-".to_string();
        self.line([
            r.size_bytes.to_string(),
            r.count.to_string(),
            r.dtype.clone(),
            r.redop.clone().unwrap_or_else(dash),
            r.root.map_or_else(dash, |x| x.to_string()),
            format!("{:.2}", r.time_us),
            format!("{:.3}", r.algbw_gbps),
            format!("{:.3}", r.busbw_gbps),
            r.algorithm.clone(),
            r.check.to_string(),
        ])
    }

    fn line(&self, cells: impl IntoIterator<Item = String>) -> String {
        let mut s = String::new();
        for (i, cell) in cells.into_iter().enumerate() {
            let w = self.width(i);
            if i < 8 {
                s.push_str(&format!("{cell:>w$} "));
            } else {
                s.push_str(&format!(" {cell:<w$}"));
            }
        }
        s.trim_end().to_string()
    }
}

/// hccl_test's own table: its four column titles, each cell left-aligned
/// to its title's width and cells joined by `| ` (CANN hccl_test result
/// description: `data_size` bytes, `aveg_time` µs, `alg_bandwidth` GB/s =
/// data size / time, `check_result` success, failed or NULL; hccl_test's
/// source converts bytes/µs to GB/s with 10^6 / 10^9, so G = 10^9).
const HCCL_TEST_COLS: [&str; 4] = [
    "data_size(Bytes):",
    "aveg_time(us):",
    "alg_bandwidth(GB/s):",
    "check_result:",
];

/// Which table `hccl test` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Format {
    /// hccl-rs's table: size, count, dtype, redop, root, time, algbw,
    /// busbw, algorithm, check.
    Table,
    /// hccl_test's four columns and units, for comparing with its output.
    #[value(name = "hccl_test", alias = "hccl-test")]
    HcclTest,
}

/// The header line saying what the `hccl_test` columns hold.
pub(crate) const HCCL_TEST_NOTE: &str = "# format hccl_test: data_size = the op's size in bytes (the size(B) of the default table: per NPU for all_reduce, broadcast, reduce; nccl-tests' size otherwise), aveg_time = time per op in us, alg_bandwidth = data_size / aveg_time in GB/s (G = 10^9, algorithm bandwidth: no bus factor)";

/// Prints the rows in the chosen [`Format`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Printer {
    /// The default table's layout.
    pub table: Table,
    /// The format.
    pub format: Format,
}

impl Printer {
    /// The column titles.
    pub(crate) fn header(&self) -> String {
        match self.format {
            Format::Table => self.table.header(),
            Format::HcclTest => HCCL_TEST_COLS.join(" | "),
        }
    }

    /// One row.
    pub(crate) fn row(&self, r: &Row) -> String {
        match self.format {
            Format::Table => self.table.row(r),
            Format::HcclTest => {
                let check = match r.check {
                    Check::Success => "success",
                    Check::Failed(_) => "failed",
                    Check::Null => "NULL",
                };
                let cells = [
                    r.size_bytes.to_string(),
                    format!("{:.2}", r.time_us),
                    format!("{:.5}", r.algbw_gbps),
                ];
                let mut s = String::new();
                for (cell, title) in cells.iter().zip(HCCL_TEST_COLS) {
                    s.push_str(&format!("{cell:<w$} | ", w = title.len()));
                }
                s.push_str(check);
                s
            }
        }
    }
}

/// The cluster part of the header and JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ClusterInfo {
    /// `preset atlas800t-a2`, `rank table FILE`, `fabric file FILE`.
    pub origin: String,
    /// The fabric's name.
    pub fabric: String,
    /// Ranks.
    pub ranks: u32,
    /// Servers.
    pub servers: u32,
    /// NPUs per server (`None` when servers differ).
    pub npus_per_server: Option<u32>,
    /// Link classes.
    pub links: Vec<LinkClassInfo>,
    /// α: per-message overhead, ns.
    pub alpha_ns: u64,
    /// γ: reduce bandwidth, GB/s.
    pub reduce_gbps: f64,
    /// Device copy bandwidth, GB/s.
    pub copy_gbps: f64,
    /// Fixed cost per op before its first step, ns (`--op-overhead`).
    pub op_overhead_ns: u64,
}

/// One link class of the fabric.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct LinkClassInfo {
    /// `hccs`, `roce`, ...
    pub class: String,
    /// Bandwidth per direction, GB/s.
    pub bandwidth_gbps: f64,
    /// Latency per hop, ns.
    pub latency_ns: u64,
    /// Directed links of this class.
    pub count: usize,
}

impl ClusterInfo {
    /// Facts about `fabric`.
    pub(crate) fn of(origin: &str, fabric: &Fabric) -> ClusterInfo {
        let (servers, per) = super::cluster::shape(fabric);
        let p = fabric.params();
        ClusterInfo {
            origin: origin.to_string(),
            fabric: fabric.name().to_string(),
            ranks: fabric.world_size(),
            servers,
            npus_per_server: per,
            links: fabric
                .link_classes()
                .into_iter()
                .map(|l| LinkClassInfo {
                    class: l.class.to_string(),
                    bandwidth_gbps: l.bandwidth_gbps,
                    latency_ns: l.latency_ns,
                    count: l.count,
                })
                .collect(),
            alpha_ns: p.msg_overhead_ns,
            reduce_gbps: p.reduce_gbps,
            copy_gbps: p.copy_gbps,
            op_overhead_ns: p.op_overhead_ns,
        }
    }
}

/// The header printed above the table (each line starts with `#`).
pub(crate) fn header_lines(
    title: &str,
    c: &ClusterInfo,
    settings: &str,
    check_note: &str,
) -> Vec<String> {
    let per = c
        .npus_per_server
        .map_or_else(|| "uneven size".to_string(), |p| format!("{p} NPUs each"));
    let mut v = vec![
        format!("# {title}"),
        format!(
            "# cluster: {} ({}): {} ranks, {} server{} of {}",
            c.origin,
            c.fabric,
            c.ranks,
            c.servers,
            if c.servers == 1 { "" } else { "s" },
            per
        ),
    ];
    for l in &c.links {
        v.push(format!(
            "#   link {:<6} {:>7.1} GB/s per direction, {:>5} ns per hop, {} directed links",
            l.class, l.bandwidth_gbps, l.latency_ns, l.count
        ));
    }
    v.push(format!("# settings: {settings}"));
    v.push(format!(
        "# times are SIMULATED by hccl-sim, not measured: alpha-beta-gamma model with max-min fair \
         flows on the links above, alpha = {:.1} us per message, gamma = {:.1} GB/s reduce, copy {:.1} GB/s",
        c.alpha_ns as f64 / 1000.0,
        c.reduce_gbps,
        c.copy_gbps
    ));
    v.push(UNITS_NOTE.to_string());
    if c.op_overhead_ns > 0 {
        v.push(format!(
            "# plus a fixed {:.1} us per op before its first step (--op-overhead: host launch and synchronisation, not the fabric)",
            c.op_overhead_ns as f64 / 1000.0
        ));
    }
    v.push(format!("# check: {check_note}"));
    v
}

/// The header line on units, simulated and measured runs alike.
pub(crate) const UNITS_NOTE: &str =
    "# units: GB = 10^9 bytes everywhere, as hccl_test's source converts its alg_bandwidth \
     (the rows of CANN's published example read as 2^30)";

/// The `--json` document.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct JsonReport<'a> {
    /// `hccl test`.
    pub tool: &'static str,
    /// hccl-rs version.
    pub version: &'static str,
    /// The collective.
    pub collective: &'a str,
    /// True when times come from the simulator; false for measured runs
    /// (`--transport tcp`).
    pub simulated: bool,
    /// Ranks of the run.
    pub ranks: u32,
    /// The simulated cluster (absent for measured runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cluster: Option<&'a ClusterInfo>,
    /// The settings line.
    pub settings: &'a str,
    /// Every row, in the printed order.
    pub rows: &'a [Row],
}

impl<'a> JsonReport<'a> {
    /// The report of one run of `hccl test`: simulated when `cluster` (the
    /// simulated cluster) is given, measured (`--transport tcp`) when not.
    pub(crate) fn new(
        collective: &'a str,
        ranks: u32,
        cluster: Option<&'a ClusterInfo>,
        settings: &'a str,
        rows: &'a [Row],
    ) -> JsonReport<'a> {
        JsonReport {
            tool: "hccl test",
            version: env!("CARGO_PKG_VERSION"),
            collective,
            simulated: cluster.is_some(),
            ranks,
            cluster,
            settings,
            rows,
        }
    }

    /// Writes the report to `path` as pretty-printed JSON.
    ///
    /// # Errors
    /// The file cannot be written (the message names `--json` and the path).
    pub(crate) fn write(&self, path: &std::path::Path) -> anyhow::Result<()> {
        use anyhow::Context as _;
        std::fs::write(path, serde_json::to_vec_pretty(self)?)
            .with_context(|| format!("cannot write --json {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row() -> Row {
        Row {
            size_bytes: 67_108_864,
            count: 16_777_216,
            dtype: "fp32".into(),
            redop: Some("sum".into()),
            root: None,
            time_us: 2630.21,
            algbw_gbps: 25.5146,
            busbw_gbps: 44.65,
            algorithm: "mesh".into(),
            chosen_by: "selector".into(),
            predicted_us: None,
            check: Check::Success,
        }
    }

    #[test]
    fn hccl_test_format_has_its_columns_units_and_values() {
        let p = Printer {
            table: Table::new(["mesh"]),
            format: Format::HcclTest,
        };
        assert_eq!(
            p.header(),
            "data_size(Bytes): | aveg_time(us): | alg_bandwidth(GB/s): | check_result:"
        );
        // 2 MiB in 1000 us: 2.09715 GB/s, hccl_test's published example row.
        let mut r = row();
        r.size_bytes = 2_097_152;
        r.time_us = 1000.0;
        r.algbw_gbps = 2_097_152.0 / 1000.0 / 1e3;
        assert_eq!(
            p.row(&r),
            "2097152           | 1000.00        | 2.09715              | success"
        );
        r.check = Check::Failed(3);
        assert!(p.row(&r).ends_with("| failed"), "{}", p.row(&r));
        r.check = Check::Null;
        assert!(p.row(&r).ends_with("| NULL"), "{}", p.row(&r));
        // awk's $5 is the bandwidth, as scripts that read hccl_test expect.
        let fields: Vec<String> = p.row(&r).split_whitespace().map(String::from).collect();
        assert_eq!(fields[4], "2.09715");
    }

    #[test]
    fn rows_line_up_under_the_header() {
        let t = Table::new(["mesh"]);
        let h = t.header();
        let r = t.row(&row());
        // Right-aligned numeric columns end where their titles end.
        for (title, cell) in [
            ("size(B)", "67108864"),
            ("time(us)", "2630.21"),
            ("busbw(GB/s)", "44.650"),
        ] {
            let end = h.find(title).unwrap() + title.len();
            assert!(r[..end].ends_with(cell), "{title}: {r}");
        }
        assert!(r.contains(" 2630.21 "), "{r}");
        assert!(r.contains("   -  "), "root dash: {r}");
        assert!(r.ends_with("success"), "{r}");
        // Left-aligned columns start where their titles start.
        let a = h.find("algorithm").unwrap();
        assert_eq!(&r[a..a + 4], "mesh");
    }

    /// A name longer than the column's 26 characters widens it for every
    /// row, so the check column stays aligned.
    #[test]
    fn a_long_algorithm_name_widens_its_column_for_every_row() {
        let long = "level0:mesh;level1:H-D_R;level2:ring";
        let t = Table::new(["mesh", long]);
        let h = t.header();
        let short = t.row(&row());
        let wide = t.row(&Row {
            algorithm: long.into(),
            ..row()
        });
        let check = h.find("check").unwrap();
        assert_eq!(&short[check..], "success", "{h}\n{short}");
        assert_eq!(&wide[check..], "success", "{h}\n{wide}");
        // The default width without long names.
        assert_eq!(Table::new(["ring"]).header(), Table::new([]).header());
    }
}
