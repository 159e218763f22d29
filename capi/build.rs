//! Gives the C library the soname `libhccl.so`, so a program linked with
//! `-lhccl` (or through the `libascendcl.so` linker script) records that
//! name and finds the library on `LD_LIBRARY_PATH` under it.

fn main() {
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libhccl.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
