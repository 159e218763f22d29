//! `hccl-capi install [--prefix DIR]`: lays out the CANN-like prefix
//! (headers, `lib64/libhccl.so`, `lib64/libascendcl.so`, `set_env.sh`) and
//! prints it. `hccl-capi prefix` prints the default prefix. The library
//! is the `libhccl_capi.so` cargo built beside this program.

use std::path::PathBuf;
use std::process::ExitCode;

const USAGE: &str = "usage: hccl-capi install [--prefix DIR] | hccl-capi prefix\n\
  install  lay out include/, lib64/ and set_env.sh (default prefix: ascend/ beside this program) and print the prefix\n\
  prefix   print the default prefix";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let exe_dir = match std::env::current_exe() {
        Ok(p) => p.parent().map(PathBuf::from).unwrap_or_default(),
        Err(e) => {
            eprintln!("hccl-capi: cannot find this program's folder: {e}");
            return ExitCode::FAILURE;
        }
    };
    let default = exe_dir.join("ascend");
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["prefix"] => {
            println!("{}", default.display());
            ExitCode::SUCCESS
        }
        ["install"] | ["install", "--prefix", _] => {
            let prefix = args.get(2).map(PathBuf::from).unwrap_or(default);
            let lib = hccl_capi::prefix::built_library(&exe_dir);
            if !lib.exists() {
                eprintln!(
                    "hccl-capi: {} is missing: build it with `cargo build --release -p hccl-capi`",
                    lib.display()
                );
                return ExitCode::FAILURE;
            }
            match hccl_capi::prefix::install(&prefix, &lib) {
                Ok(p) => {
                    println!("{}", p.display());
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("hccl-capi: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        ["-h"] | ["--help"] => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        _ => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
