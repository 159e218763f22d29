//! `hccl ranktable`: check and generate HCCL rank table files.

use std::io::Write;
use std::net::IpAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use hccl_topology::{GenerateSpec, RankTable, TopologyError, Version};

/// Subcommands of `hccl ranktable`.
#[derive(clap::Subcommand, Debug)]
pub(crate) enum RanktableCommand {
    /// Validate a rank table; exit status 0 when valid, 1 with every problem listed.
    ///
    /// Keys outside HCCL's format (tools add pod and container fields) are
    /// listed as a note and ignored, as HCCL ignores them; `--strict` makes
    /// them problems.
    Check {
        /// The rank table JSON file.
        file: PathBuf,
        /// Treat keys outside HCCL's rank table format as problems.
        #[arg(long)]
        strict: bool,
    },
    /// Write a valid rank table for the given servers.
    #[command(disable_version_flag = true)]
    Gen {
        /// Server addresses in rank order, comma-separated (each becomes server_id and host_ip).
        #[arg(long, value_delimiter = ',', required = true)]
        servers: Vec<IpAddr>,
        /// NPUs per server.
        #[arg(long, default_value_t = 8, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
        devices: u32,
        /// First device IP; the others count up from it (required for more than one server).
        #[arg(long)]
        device_ip_base: Option<IpAddr>,
        /// Rank table version: 1.0, or 1.2 for super pods.
        #[arg(long, default_value = "1.0", value_parser = parse_version)]
        version: Version,
        /// Version 1.2: servers per super pod (default: all in one).
        #[arg(long, value_parser = crate::flag_number::whole::<u32>, allow_negative_numbers = true)]
        servers_per_super_pod: Option<u32>,
        /// Output file (default: standard output).
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
}

fn parse_version(s: &str) -> Result<Version, String> {
    Version::parse(s).ok_or_else(|| {
        format!(
            "unsupported rank table version {s:?}; supported: {}",
            Version::SUPPORTED.join(", ")
        )
    })
}

/// Runs one `hccl ranktable` subcommand: `check` exits 1 for a bad table;
/// `gen` exits 2 with the usage line for flags the generator refuses
/// (`--devices 0`), 1 for an output file it cannot write.
pub(crate) fn run(command: RanktableCommand) -> anyhow::Result<ExitCode> {
    match command {
        // The check prints what it found (ignored keys as a note): the
        // parser's own warning would say it a second time.
        RanktableCommand::Check { file, strict } => match tracing::subscriber::with_default(
            tracing::subscriber::NoSubscriber::default(),
            || {
                if strict {
                    RankTable::from_file_strict(&file)
                } else {
                    RankTable::from_file(&file)
                }
            },
        ) {
            Ok(table) => {
                let pods = table.super_pods().len();
                writeln!(
                    std::io::stdout().lock(),
                    "{}: valid rank table v{}: {} ranks on {} server{}{}",
                    file.display(),
                    table.version(),
                    table.world_size(),
                    table.servers().len(),
                    if table.servers().len() == 1 { "" } else { "s" },
                    if pods > 0 {
                        format!(" in {pods} super pod{}", if pods == 1 { "" } else { "s" })
                    } else {
                        String::new()
                    }
                )?;
                if let Some(note) = uneven_servers_note(&table) {
                    writeln!(std::io::stdout().lock(), "{note}")?;
                }
                if !table.ignored_keys().is_empty() {
                    writeln!(
                        std::io::stdout().lock(),
                        "note: ignored keys outside HCCL's rank table format (--strict rejects them): {}",
                        table.ignored_keys().join(", ")
                    )?;
                }
                Ok(ExitCode::SUCCESS)
            }
            Err(e @ TopologyError::Io { .. }) => Err(e.into()),
            Err(e) => {
                eprintln!("{}: {e}", file.display());
                Ok(ExitCode::from(1))
            }
        },
        RanktableCommand::Gen {
            servers,
            devices,
            device_ip_base,
            version,
            servers_per_super_pod,
            output,
        } => {
            // Every input is a flag: what the generator refuses is a usage error.
            let table = match RankTable::generate_with(&GenerateSpec {
                servers,
                devices_per_server: devices,
                device_ip_base,
                version,
                servers_per_super_pod,
            }) {
                Ok(t) => t,
                Err(e) => return Ok(crate::usage_error(&["ranktable", "gen"], e)),
            };
            let mut json = table.to_json();
            json.push('\n');
            match output {
                Some(path) => std::fs::write(&path, json)
                    .with_context(|| format!("writing {}", path.display()))?,
                None => write!(std::io::stdout().lock(), "{json}")?,
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// A note when servers hold different numbers of devices: the table is
/// valid, but hierarchical algorithms need equal servers, so every
/// collective on it runs a flat algorithm.
fn uneven_servers_note(table: &RankTable) -> Option<String> {
    let counts: Vec<usize> = table.servers().iter().map(|s| s.devices().len()).collect();
    if counts.windows(2).all(|w| w[0] == w[1]) {
        return None;
    }
    let list: Vec<String> = counts.iter().map(usize::to_string).collect();
    Some(format!(
        "note: servers hold different numbers of devices ({}): hccl-rs runs flat algorithms \
         over all ranks here (hierarchical level0/level1 algorithms need equal servers)",
        list.join(", ")
    ))
}
