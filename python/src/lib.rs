//! `hccl_rs`, the Python module of hccl-rs (the native part,
//! `hccl_rs._native`; the package around it is `python/hccl_rs/`, with
//! the torch.distributed backend in `hccl_rs/torch.py`).
//!
//! | module | job |
//! | --- | --- |
//! | `comm` | `hccl_rs.Comm`: constructors and every op of `hccl::Comm` |
//! | `compress` | `hccl_rs.TopK`, `Int8`, `ErrorFeedback`, `Reducer`: gradient compression and DDP-style buckets (`hccl-compress`) |
//! | `stream` | a communicator's ops in call order, blocking and async |
//! | `work` | `hccl_rs.Work`, an async op's handle |
//! | `buffer` | the caller's buffers, used in place (the one `unsafe` module) |
//! | `dtype` | buffer formats and names to HCCL's data types and reduce ops |
//! | `error` | `hccl_rs.HcclError` (`.code`, `.message`) |
//! | `exit` | the interpreter's exit: no thread of ours attaches after `atexit` |
//!
//! Build it with maturin (`pip install ./python`); `python/README.md`
//! has the usage.

#![deny(unsafe_code)]

mod buffer;
mod comm;
mod compress;
mod dtype;
mod error;
mod exit;
mod stream;
mod work;

use pyo3::prelude::*;

/// A root info string (HCCL's HcclGetRootInfo): start this rank as the
/// root of the next bootstrap and pass the string to every rank's
/// `Comm.init_root_info`.
#[pyfunction]
fn get_root_info(py: Python<'_>) -> PyResult<String> {
    hccl::RootInfo::new()
        .map(|r| r.to_string())
        .map_err(|e| error::to_py(py, &hccl::CommError::from(e)))
}

/// Runs the `hccl` program (`hccl test all_reduce ...`) with `argv`
/// (without the program name); returns its exit code.
#[pyfunction]
fn cli(py: Python<'_>, argv: Vec<String>) -> u8 {
    let mut args = vec!["hccl".to_string()];
    args.extend(argv);
    let code = py.detach(move || hccl_cli::hccl_main_from(args));
    (0..=255u8)
        .find(|c| std::process::ExitCode::from(*c) == code)
        .unwrap_or(1)
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    hccl::init_logging();
    m.add_class::<comm::Comm>()?;
    m.add_class::<work::Work>()?;
    m.add_class::<compress::TopK>()?;
    m.add_class::<compress::Int8>()?;
    m.add_class::<compress::ErrorFeedback>()?;
    m.add_class::<compress::Reducer>()?;
    m.add_function(wrap_pyfunction!(compress::sparse_wins, m)?)?;
    m.add("HcclError", m.py().get_type::<error::HcclError>())?;
    m.add_function(wrap_pyfunction!(get_root_info, m)?)?;
    m.add_function(wrap_pyfunction!(cli, m)?)?;
    m.add_function(wrap_pyfunction!(exit::at_exit, m)?)?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
