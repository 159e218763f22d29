//! What the capi test binaries share.

use std::path::{Path, PathBuf};

/// Lays out a CANN-like prefix under `tmp` with the `libhccl_capi.so`
/// cargo built for this test binary (deps/ first: the one in
/// target/<profile>/ may be from another build); returns the prefix.
pub fn install_built_prefix(tmp: &Path) -> PathBuf {
    let exe = std::env::current_exe().expect("test binary path");
    let deps = exe.parent().expect("deps folder");
    let lib = [
        deps.join("libhccl_capi.so"),
        deps.join("../libhccl_capi.so"),
    ]
    .into_iter()
    .find(|p| p.exists())
    .expect("cargo builds libhccl_capi.so for the tests");
    let dir = tmp.join(format!("prefix-{}", std::process::id()));
    hccl_capi::prefix::install(&dir, &lib).expect("install the prefix")
}
