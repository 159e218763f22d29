//! The CANN-like prefix `hccl-capi install` lays out:
//!
//! ```text
//! PREFIX/include/hccl/{hccl.h,hccl_types.h}
//! PREFIX/include/acl/{acl.h,acl_base.h,acl_rt.h,acl_prof.h}
//! PREFIX/lib64/libhccl.so        this crate's cdylib (soname libhccl.so)
//! PREFIX/lib64/libascendcl.so    a linker script: INPUT(PREFIX/lib64/libhccl.so)
//! PREFIX/set_env.sh              ASCEND_HOME_PATH, ASCEND_TOOLKIT_HOME, LD_LIBRARY_PATH
//! ```
//!
//! CANN's toolkit has the same `include/` and `lib64/` names, so a
//! Makefile's `-I$(ASCEND_DIR)/include -L$(ASCEND_DIR)/lib64 -lhccl
//! -lascendcl` works as written.

use std::io;
use std::path::{Path, PathBuf};

/// The headers, by path under `include/` (compiled into the binary).
pub const HEADERS: [(&str, &str); 6] = [
    ("hccl/hccl.h", include_str!("../include/hccl/hccl.h")),
    (
        "hccl/hccl_types.h",
        include_str!("../include/hccl/hccl_types.h"),
    ),
    ("acl/acl.h", include_str!("../include/acl/acl.h")),
    ("acl/acl_base.h", include_str!("../include/acl/acl_base.h")),
    ("acl/acl_rt.h", include_str!("../include/acl/acl_rt.h")),
    ("acl/acl_prof.h", include_str!("../include/acl/acl_prof.h")),
];

/// The library file cargo builds (`libhccl_capi.so`) beside `exe_dir`
/// (`target/<profile>/`), or in its `deps/` (where a build of only some
/// targets leaves it).
pub fn built_library(exe_dir: &Path) -> PathBuf {
    let lib = exe_dir.join("libhccl_capi.so");
    let deps = exe_dir.join("deps").join("libhccl_capi.so");
    if !lib.exists() && deps.exists() {
        return deps;
    }
    lib
}

/// `set_env.sh` for `prefix` (CANN's names: `ASCEND_HOME_PATH`,
/// `ASCEND_TOOLKIT_HOME`, and `lib64` first on `LD_LIBRARY_PATH`).
pub fn set_env(prefix: &Path) -> String {
    let p = prefix.display();
    format!(
        "# hccl-rs's CANN-like prefix (written by `hccl-capi install`).\n\
         # source it as CANN's set_env.sh: `source {p}/set_env.sh`\n\
         export ASCEND_HOME_PATH={p}\n\
         export ASCEND_TOOLKIT_HOME={p}\n\
         export ASCEND_DIR={p}\n\
         export LD_LIBRARY_PATH={p}/lib64${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}\n"
    )
}

/// Lays out the prefix at `prefix` with the library `lib`; returns the
/// prefix as an absolute path.
///
/// # Errors
/// I/O errors creating the folders or copying the files (naming the path).
pub fn install(prefix: &Path, lib: &Path) -> io::Result<PathBuf> {
    let named =
        |what: &Path, e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", what.display()));
    std::fs::create_dir_all(prefix).map_err(|e| named(prefix, e))?;
    let prefix = prefix.canonicalize().map_err(|e| named(prefix, e))?;
    for (rel, text) in HEADERS {
        let p = prefix.join("include").join(rel);
        if let Some(d) = p.parent() {
            std::fs::create_dir_all(d).map_err(|e| named(d, e))?;
        }
        std::fs::write(&p, text).map_err(|e| named(&p, e))?;
    }
    let lib64 = prefix.join("lib64");
    std::fs::create_dir_all(&lib64).map_err(|e| named(&lib64, e))?;
    let so = lib64.join("libhccl.so");
    // Copy to a new file, then rename: a running program keeps its mapping.
    let tmp = lib64.join(".libhccl.so.new");
    std::fs::copy(lib, &tmp).map_err(|e| named(lib, e))?;
    std::fs::rename(&tmp, &so).map_err(|e| named(&so, e))?;
    let script = lib64.join("libascendcl.so");
    std::fs::write(
        &script,
        format!(
            "/* hccl-rs: the ACL runtime is in libhccl.so (one library, one registry) */\nINPUT ( {} )\n",
            so.display()
        ),
    )
    .map_err(|e| named(&script, e))?;
    let env = prefix.join("set_env.sh");
    std::fs::write(&env, set_env(&prefix)).map_err(|e| named(&env, e))?;
    Ok(prefix)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_env_exports_cann_names_with_lib64_first() {
        let s = set_env(Path::new("/opt/x"));
        assert!(s.contains("export ASCEND_HOME_PATH=/opt/x\n"));
        assert!(s.contains("export ASCEND_TOOLKIT_HOME=/opt/x\n"));
        assert!(s.contains("LD_LIBRARY_PATH=/opt/x/lib64${LD_LIBRARY_PATH:+"));
    }
}
