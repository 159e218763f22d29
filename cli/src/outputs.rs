//! Output files a command writes at the end of a long run (`hccl test
//! --json --plot --trace`, `hccl workload --trace --write-workload`),
//! checked before the run starts: a sweep or a simulation must not run for
//! minutes and then fail to write its result.

use std::path::PathBuf;

/// Opens each `(flag, path)` that is set for append (an existing file is
/// not truncated; a new one is removed again).
///
/// # Errors
/// Two flags naming one file (the second write would destroy the first:
/// `--trace and --write-workload both name out.json; give each its own
/// file`), or the first path that cannot be opened for writing:
/// `--trace /no/such/dir/t.json: cannot create the file: No such file or
/// directory (os error 2)`.
pub(crate) fn check_writable(outputs: &[(&str, Option<&PathBuf>)]) -> Result<(), String> {
    let set: Vec<(&str, &PathBuf)> = outputs.iter().filter_map(|&(f, p)| Some((f, p?))).collect();
    let same = |a: &PathBuf, b: &PathBuf| {
        a == b
            || matches!((std::path::absolute(a), std::path::absolute(b)), (Ok(x), Ok(y)) if x == y)
    };
    for (i, &(flag, path)) in set.iter().enumerate() {
        if let Some(&(other, _)) = set[..i].iter().find(|&&(_, p)| same(p, path)) {
            return Err(format!(
                "{other} and {flag} both name {}; give each its own file",
                path.display()
            ));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_flags_naming_one_file_are_refused_before_anything_is_written() {
        let dir = std::env::temp_dir().join(format!("hccl-outputs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("same.json");
        let also = dir.join(".").join("same.json");
        let e = check_writable(&[("--trace", Some(&p)), ("--write-workload", Some(&also))])
            .unwrap_err();
        assert_eq!(
            e,
            format!(
                "--trace and --write-workload both name {}; give each its own file",
                also.display()
            )
        );
        assert!(!p.exists(), "nothing created");
        let q = dir.join("other.json");
        assert_eq!(
            check_writable(&[("--trace", Some(&p)), ("--write-workload", Some(&q))]),
            Ok(())
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
