//! Errors of the topology layer: one enum, [`TopologyError`], and the
//! [`Problem`] list that validation fills (every problem, not only the first).

use std::fmt;
use std::path::PathBuf;

/// One problem found while validating a rank table or a fabric file.
///
/// Displayed as `path = "value" message (rank r)`, for example
/// `server_list[1].device[0].device_ip = "-.-.-.-" is not an IP address (rank 2)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// JSON path of the offending field, e.g. `server_list[1].device[0].device_ip`.
    pub path: String,
    /// The offending value as written in the file, if there is one.
    pub value: Option<String>,
    /// The rank the problem concerns, when it is known.
    pub rank: Option<u32>,
    /// What is wrong and, where useful, what to do about it.
    pub message: String,
}

impl Problem {
    /// A problem at `path` with `message`, no value and no rank.
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        Problem {
            path: path.into(),
            value: None,
            rank: None,
            message: message.into(),
        }
    }

    /// Sets the offending value.
    #[must_use]
    pub fn value(mut self, value: impl Into<String>) -> Self {
        self.value = Some(value.into());
        self
    }

    /// Sets the rank the problem concerns (`None` leaves it unknown).
    #[must_use]
    pub fn rank(mut self, rank: Option<u32>) -> Self {
        self.rank = rank;
        self
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.path)?;
        if let Some(v) = &self.value {
            write!(f, " = {v:?}")?;
        }
        write!(f, " {}", self.message)?;
        if let Some(r) = self.rank {
            write!(f, " (rank {r})")?;
        }
        Ok(())
    }
}

/// Formats a problem list, one per line, each prefixed with `  - `.
fn list(problems: &[Problem]) -> String {
    let mut s = String::new();
    for p in problems {
        s.push_str("\n  - ");
        s.push_str(&p.to_string());
    }
    s
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}

/// Every error of `hccl-topology`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TopologyError {
    /// A file could not be read or written.
    #[error("{}: {error}; check the path and its permissions", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying I/O error (part of the message, not a separate
        /// `source()`, so `{:#}` chains do not print it twice).
        error: std::io::Error,
    },
    /// A rank table is not well-formed JSON of the expected shape (syntax,
    /// wrong types, unknown or missing fields). Line and column are 1-based.
    #[error(
        "rank table: {}{message} at line {line}, column {column}; a rank table is a JSON object whose values are all strings (HCCL format 1.0 or 1.2)",
        if path.is_empty() { String::new() } else { format!("{path}: ") }
    )]
    RankTableSyntax {
        /// 1-based line of the error (0 when unknown).
        line: usize,
        /// 1-based column of the error (0 when unknown).
        column: usize,
        /// JSON path of the value at fault, as the semantic checks name
        /// it (`server_list[1].device[7].rank_id`); empty at the top level
        /// or when the text is not JSON.
        path: String,
        /// What the JSON parser found.
        message: String,
    },
    /// A rank table parsed but broke one or more of HCCL's rules; every
    /// problem found is listed.
    #[error("rank table: {} problem{} found; fix each and run `hccl ranktable check` again:{}", problems.len(), plural(problems.len()), list(problems))]
    RankTableInvalid {
        /// Every problem, in file order.
        problems: Vec<Problem>,
    },
    /// A fabric file is not well-formed JSON of the expected shape.
    #[error("fabric file: {message} at line {line}, column {column}; see topology/README.md for the format")]
    FabricFileSyntax {
        /// 1-based line of the error (0 when unknown).
        line: usize,
        /// 1-based column of the error (0 when unknown).
        column: usize,
        /// What the JSON parser found.
        message: String,
    },
    /// A fabric file parsed but is inconsistent; every problem found is listed.
    #[error("fabric file: {} problem{} found:{}", problems.len(), plural(problems.len()), list(problems))]
    FabricFileInvalid {
        /// Every problem, in file order.
        problems: Vec<Problem>,
    },
    /// The arguments of the rank table generator cannot give a valid table.
    #[error("rank table generator: {reason}")]
    InvalidGenerateArgs {
        /// What is wrong and what to pass instead.
        reason: String,
    },
    /// A preset name that is not known.
    #[error("unknown preset {name:?}; known presets: {}", known.join(", "))]
    UnknownPreset {
        /// The name given.
        name: String,
        /// Every preset name accepted.
        known: Vec<&'static str>,
    },
    /// A preset parameter out of its range.
    #[error("preset {preset}: {parameter} = {value} {reason}")]
    InvalidPresetParameter {
        /// The preset name.
        preset: &'static str,
        /// The parameter, e.g. `servers`.
        parameter: &'static str,
        /// The value given.
        value: String,
        /// Why it is wrong and what is accepted.
        reason: String,
    },
    /// A rank outside `0..world_size`.
    #[error("rank {rank} is out of range: the world size is {world_size}, valid ranks are 0..{world_size}")]
    RankOutOfRange {
        /// The rank asked for.
        rank: u32,
        /// The number of ranks.
        world_size: u32,
    },
    /// No path exists between two ranks (only possible for fabric files that
    /// are validated as connected, so this indicates a disconnected graph).
    #[error("no route from rank {src} to rank {dst}: the fabric graph does not connect them; add links between them")]
    NoRoute {
        /// Source rank.
        src: u32,
        /// Destination rank.
        dst: u32,
    },
}

impl TopologyError {
    /// The listed problems of a validation error, or an empty slice.
    pub fn problems(&self) -> &[Problem] {
        match self {
            TopologyError::RankTableInvalid { problems }
            | TopologyError::FabricFileInvalid { problems } => problems,
            _ => &[],
        }
    }
}
