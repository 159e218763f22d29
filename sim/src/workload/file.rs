//! Reading and checking workload files (the format is in the module docs
//! of `workload`).

use std::path::Path;

use hccl_topology::limits::MAX_TIME_NS;

/// The largest gradient a workload file may give, bytes: 1 TiB (2^38
/// fp32 parameters in one tensor, 100× today's largest layers), so that
/// an AllGather of P such payloads stays far from `u64` overflow.
pub const MAX_GRAD_BYTES: u64 = 1 << 40;

use super::{Workload, WORKLOAD_VERSION};
use crate::error::SimError;

/// What is wrong with a workload file or a step simulation.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum WorkloadError {
    /// The file could not be read.
    #[error("workload {path}: {reason}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// Not JSON of the workload's shape: a field of the wrong type, a
    /// missing or unknown field, bad syntax.
    #[error("workload: {field}: {message} (line {line}, column {column})")]
    Syntax {
        /// JSON path of the field, e.g. `layers[3].backward_ns` (`.` for
        /// the top level).
        field: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What the parser says.
        message: String,
    },
    /// A field has a value the format does not accept.
    #[error("workload: {field} = {value}: {reason}")]
    Invalid {
        /// JSON path, e.g. `layers[2].grad_bytes[0]`.
        field: String,
        /// The value found.
        value: String,
        /// The rule and what to do.
        reason: String,
    },
    /// The simulation failed (bad collective arguments, a broken schedule).
    #[error("workload: {0}")]
    Sim(#[from] SimError),
    /// Ranks were left unfinished: a schedule that hangs (a bug, reported
    /// rather than a wrong time).
    #[error("workload: the step's collectives did not finish: {0}")]
    Stalled(String),
}

pub(super) fn invalid(
    field: impl Into<String>,
    value: impl std::fmt::Display,
    reason: impl Into<String>,
) -> WorkloadError {
    WorkloadError::Invalid {
        field: field.into(),
        value: value.to_string(),
        reason: reason.into(),
    }
}

impl Workload {
    /// Parses and checks JSON text ([`Workload::validate`]).
    ///
    /// # Errors
    /// [`WorkloadError::Syntax`] naming the field (unknown, missing or of
    /// the wrong type) with line and column; [`WorkloadError::Invalid`].
    pub fn from_json(text: &str) -> Result<Workload, WorkloadError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let syntax = |field: String, e: &serde_json::Error| WorkloadError::Syntax {
            field,
            line: e.line(),
            column: e.column(),
            message: e.to_string().split(" at line ").next().unwrap_or("").into(),
        };
        let w: Workload = serde_path_to_error::deserialize(&mut de)
            .map_err(|e| syntax(e.path().to_string(), e.inner()))?;
        de.end().map_err(|e| syntax(".".into(), &e))?;
        w.validate()?;
        Ok(w)
    }

    /// Reads, parses and checks a file.
    ///
    /// # Errors
    /// [`WorkloadError::Io`], else as [`Workload::from_json`].
    pub fn from_file(path: impl AsRef<Path>) -> Result<Workload, WorkloadError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| WorkloadError::Io {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        Workload::from_json(&text)
    }

    /// The workload as JSON (the file format; reads back equal).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Checks the rules of the format: `version` is [`WORKLOAD_VERSION`];
    /// at least one layer and one gradient; names not empty; gradients a
    /// positive multiple of 4 bytes and at most [`MAX_GRAD_BYTES`]; times at most 2147483647 s, each and
    /// in sum (`hccl_topology::limits::MAX_TIME_NS`).
    ///
    /// # Errors
    /// [`WorkloadError::Invalid`] naming the first bad field and its value.
    pub fn validate(&self) -> Result<(), WorkloadError> {
        if self.version != WORKLOAD_VERSION {
            return Err(invalid(
                "version",
                self.version,
                format!("this build reads workload files of version {WORKLOAD_VERSION}"),
            ));
        }
        if self.layers.is_empty() {
            return Err(invalid("layers", "[]", "a workload has at least one layer"));
        }
        let mut total = 0u64;
        for (i, l) in self.layers.iter().enumerate() {
            if l.name.trim().is_empty() {
                return Err(invalid(
                    format!("layers[{i}].name"),
                    format!("{:?}", l.name),
                    "give the layer a name",
                ));
            }
            for (field, v) in [("forward_ns", l.forward_ns), ("backward_ns", l.backward_ns)] {
                if v > MAX_TIME_NS {
                    return Err(invalid(
                        format!("layers[{i}].{field}"),
                        v,
                        format!("at most {MAX_TIME_NS} ns (2147483647 s)"),
                    ));
                }
                total = total.saturating_add(v);
            }
            for (j, &b) in l.grad_bytes.iter().enumerate() {
                if b == 0 || b % 4 != 0 {
                    return Err(invalid(
                        format!("layers[{i}].grad_bytes[{j}]"),
                        b,
                        "gradients are fp32: a positive multiple of 4 bytes",
                    ));
                }
                if b > MAX_GRAD_BYTES {
                    return Err(invalid(
                        format!("layers[{i}].grad_bytes[{j}]"),
                        b,
                        format!("at most {MAX_GRAD_BYTES} bytes (1 TiB) per gradient"),
                    ));
                }
            }
        }
        if total > MAX_TIME_NS {
            return Err(invalid(
                "layers",
                format!("{total} ns of compute"),
                format!("the step's compute is at most {MAX_TIME_NS} ns (2147483647 s)"),
            ));
        }
        if self.layers.iter().all(|l| l.grad_bytes.is_empty()) {
            return Err(invalid(
                "layers",
                format!("{} layers without grad_bytes", self.layers.len()),
                "a workload has at least one gradient to reduce",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"version": 1, "name": "t", "layers": [
        {"name": "a", "forward_ns": 10, "backward_ns": 20, "grad_bytes": [400, 4]},
        {"name": "head", "backward_ns": 5}
    ]}"#;

    fn err(text: &str) -> String {
        match Workload::from_json(text) {
            Ok(w) => panic!("accepted: {w:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn reads_a_file_and_derives_ready_times() {
        let w = Workload::from_json(GOOD).unwrap();
        assert_eq!(w.compute_ns(), 35);
        assert_eq!(w.param_count(), 101);
        let g = w.gradients();
        // Forward 10, then head's backward (5), then a's (20).
        assert_eq!(g.iter().map(|g| g.ready_ns).collect::<Vec<_>>(), [35, 35]);
        assert_eq!(Workload::from_json(&w.to_json()).unwrap(), w);
    }

    #[test]
    fn errors_name_the_field() {
        let e = err(&GOOD.replace("\"backward_ns\": 20", "\"backward_ns\": \"20\""));
        assert!(
            e.starts_with("workload: layers[0].backward_ns: invalid type"),
            "{e}"
        );
        let e = err(&GOOD.replace("\"forward_ns\": 10", "\"forward_us\": 10"));
        assert!(
            e.contains("layers[0]") && e.contains("unknown field `forward_us`"),
            "{e}"
        );
        let e = err(&GOOD.replace("{\"name\": \"head\", ", "{"));
        assert!(
            e.contains("layers[1]") && e.contains("missing field `name`"),
            "{e}"
        );
        let e = err(&GOOD.replace("[400, 4]", "[400, 6]"));
        assert!(
            e.starts_with("workload: layers[0].grad_bytes[1] = 6: gradients are fp32"),
            "{e}"
        );
        let e = err(&GOOD.replace("[400, 4]", "[400, 18446744073709551612]"));
        assert!(
            e.starts_with("workload: layers[0].grad_bytes[1] = 18446744073709551612: at most"),
            "{e}"
        );
        let e = err(&GOOD.replace("\"version\": 1", "\"version\": 2"));
        assert!(
            e.starts_with("workload: version = 2: this build reads"),
            "{e}"
        );
        let e = err(&GOOD.replace("\"name\": \"a\"", "\"name\": \"\""));
        assert!(e.starts_with("workload: layers[0].name = \"\""), "{e}");
        let e = err(&format!("{GOOD} x"));
        assert!(e.contains("trailing characters"), "{e}");
        let e = err(r#"{"version": 1, "name": "t", "layers": [{"name": "a", "backward_ns": 1}]}"#);
        assert!(e.contains("at least one gradient"), "{e}");
        let e = err(&GOOD.replace(
            "\"backward_ns\": 5",
            "\"backward_ns\": 18446744073709551615",
        ));
        assert!(
            e.starts_with("workload: layers[1].backward_ns = 18446744073709551615"),
            "{e}"
        );
    }
}
