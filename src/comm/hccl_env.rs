//! HCCL variables that select device-side features: each is checked as
//! HCCL checks it and, when set, logged once with what it means here.
//!
//! Values and meanings: CANN environment variable reference,
//! `HCCL_DETERMINISTIC` (`false` default, `true`, `strict`: deterministic
//! reductions, `strict` also a fixed reduction order),
//! `HCCL_OP_EXPANSION_MODE` (`AI_CPU`, `AIV`, `HOST`, `HOST_TS`: where an
//! op's schedule is expanded), `HCCL_WHITELIST_DISABLE` (`1` default: no
//! check; `0`: only the host IPs of `HCCL_WHITELIST_FILE` may connect).

use std::sync::Once;

use super::CommError;

/// One variable that was set, and what it does here.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Note {
    /// The variable.
    pub var: &'static str,
    /// Whether it asks for something this library does not do (logged as
    /// a warning; otherwise as info).
    pub unmet: bool,
    /// What it means here.
    pub text: String,
}

fn bad(var: &'static str, value: &str, accepted: &str) -> CommError {
    CommError::Env {
        var,
        value: value.to_string(),
        reason: format!("not accepted; HCCL accepts {accepted}"),
    }
}

/// Checks the variables through `get` and says what each one set means.
///
/// # Errors
/// [`CommError::Env`] for a value HCCL does not accept, naming the values it does.
pub(crate) fn notes(get: impl Fn(&str) -> Option<String>) -> Result<Vec<Note>, CommError> {
    let mut out = Vec::new();
    let set = |var: &str| get(var).filter(|v| !v.trim().is_empty());
    if let Some(v) = set("HCCL_DETERMINISTIC") {
        let var = "HCCL_DETERMINISTIC";
        match v.trim().to_ascii_lowercase().as_str() {
            "false" => {}
            mode @ ("true" | "strict") => out.push(Note {
                var,
                unmet: false,
                text: format!(
                    "HCCL_DETERMINISTIC={mode}: hccl-rs reductions are always deterministic: each \
                     algorithm combines the inputs in a fixed order, so the same inputs, ranks and \
                     algorithm give the same bits on every run; nothing changes"
                ),
            }),
            _ => return Err(bad(var, &v, "false, true or strict")),
        }
    }
    if let Some(v) = set("HCCL_OP_EXPANSION_MODE") {
        let var = "HCCL_OP_EXPANSION_MODE";
        match v.trim().to_ascii_uppercase().as_str() {
            mode @ ("AI_CPU" | "AIV" | "HOST" | "HOST_TS") => out.push(Note {
                var,
                unmet: false,
                text: format!(
                    "HCCL_OP_EXPANSION_MODE={mode} does not apply: it chooses where HCCL expands an \
                     op on an NPU server; hccl-rs always expands ops on the host CPU (as HOST does)"
                ),
            }),
            _ => return Err(bad(var, &v, "AI_CPU, AIV, HOST or HOST_TS")),
        }
    }
    if let Some(v) = set("HCCL_WHITELIST_DISABLE") {
        let var = "HCCL_WHITELIST_DISABLE";
        match v.trim() {
            "1" => {}
            "0" => out.push(Note {
                var,
                unmet: true,
                text:
                    "HCCL_WHITELIST_DISABLE=0 asks for HCCL's IP whitelist (HCCL_WHITELIST_FILE), \
                       which hccl-rs does not check: any host that knows the session id may join; \
                       restrict the bootstrap and data ports with a firewall instead"
                        .into(),
            }),
            _ => {
                return Err(bad(
                    var,
                    &v,
                    "0 (check the whitelist) or 1 (no check, the default)",
                ))
            }
        }
    }
    Ok(out)
}

/// [`notes`] of the process environment, logged once per process.
///
/// # Errors
/// As [`notes`].
pub(crate) fn check_env() -> Result<(), CommError> {
    let notes = notes(|k| std::env::var(k).ok())?;
    static LOGGED: Once = Once::new();
    LOGGED.call_once(|| {
        for n in &notes {
            if n.unmet {
                tracing::warn!(var = n.var, "{}", n.text);
            } else {
                tracing::info!(var = n.var, "{}", n.text);
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(pairs: &[(&str, &str)]) -> Result<Vec<Note>, CommError> {
        let v: Vec<(String, String)> = pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect();
        notes(move |k| v.iter().find(|(a, _)| a == k).map(|(_, b)| b.clone()))
    }

    #[test]
    fn unset_or_default_values_say_nothing() {
        assert_eq!(with(&[]).unwrap(), []);
        let quiet = [
            ("HCCL_DETERMINISTIC", "false"),
            ("HCCL_WHITELIST_DISABLE", "1"),
            ("HCCL_OP_EXPANSION_MODE", ""),
        ];
        assert_eq!(with(&quiet).unwrap(), []);
    }

    #[test]
    fn deterministic_says_reductions_already_are() {
        for v in ["true", "TRUE", "strict"] {
            let n = with(&[("HCCL_DETERMINISTIC", v)]).unwrap();
            assert_eq!(n.len(), 1, "{v}");
            assert!(!n[0].unmet);
            assert!(n[0].text.contains("always deterministic"), "{}", n[0].text);
        }
    }

    #[test]
    fn expansion_mode_and_whitelist_say_they_do_not_apply() {
        let n = with(&[("HCCL_OP_EXPANSION_MODE", "aiv")]).unwrap();
        assert!(n[0].text.contains("=AIV does not apply"), "{}", n[0].text);
        let n = with(&[("HCCL_WHITELIST_DISABLE", "0")]).unwrap();
        assert!(
            n[0].unmet && n[0].text.contains("does not check"),
            "{}",
            n[0].text
        );
    }

    #[test]
    fn values_hccl_rejects_are_errors_naming_the_accepted_ones() {
        for (var, v, accepted) in [
            ("HCCL_DETERMINISTIC", "yes", "false, true or strict"),
            (
                "HCCL_OP_EXPANSION_MODE",
                "GPU",
                "AI_CPU, AIV, HOST or HOST_TS",
            ),
            ("HCCL_WHITELIST_DISABLE", "true", "0 (check the whitelist)"),
        ] {
            let e = with(&[(var, v)]).unwrap_err().to_string();
            assert!(
                e.contains(var) && e.contains(v) && e.contains(accepted),
                "{e}"
            );
        }
    }

    /// HCCL_BACKEND is read in any case (it sits next to these variables
    /// in users' scripts, where `SIM` is common).
    #[test]
    fn hccl_backend_accepts_any_case() {
        use super::super::BackendKind;
        for v in ["SIM", "Sim", " sim "] {
            assert_eq!(
                BackendKind::parse(Some(v)).unwrap(),
                BackendKind::Sim,
                "{v}"
            );
        }
        assert_eq!(BackendKind::parse(Some("TCP")).unwrap(), BackendKind::Tcp);
        assert_eq!(BackendKind::parse(None).unwrap(), BackendKind::Tcp);
        let e = BackendKind::parse(Some("gpu")).unwrap_err().to_string();
        assert!(e.contains("HCCL_BACKEND") && e.contains("tcp, sim"), "{e}");
    }
}
