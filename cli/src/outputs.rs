//! Output files a command writes at the end of a long run (`hccl test
//! --json --plot --trace`, `hccl workload --trace --write-workload`),
//! checked before the run starts: a sweep or a simulation must not run for
//! minutes and then fail to write its result.

use std::path::PathBuf;

/// Opens each `(flag, path)` that is set for append (an existing file is
/// not truncated; a new one is removed again).
///
/// # Errors
/// The first path that cannot be opened for writing:
/// `--trace /no/such/dir/t.json: cannot create the file: No such file or
/// directory (os error 2)`.
pub(crate) fn check_writable(outputs: &[(&str, Option<&PathBuf>)]) -> Result<(), String> {
    for &(flag, path) in outputs {
        let Some(path) = path else { continue };
        let existed = path.exists();
        std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|e| format!("{flag} {}: cannot create the file: {e}", path.display()))?;
        if !existed {
            let _ = std::fs::remove_file(path);
        }
    }
    Ok(())
}
