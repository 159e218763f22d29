//! Errors as Python exceptions: [`HcclError`] carries the HCCL result
//! code (`.code`, `HcclResult` of `hccl_types.h`) and the message.

use hccl::CommError;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

pyo3::create_exception!(
    hccl_rs,
    HcclError,
    PyRuntimeError,
    "A failed HCCL call. `code` is its HcclResult code (1 HCCL_E_PARA, 4 HCCL_E_INTERNAL, \
5 HCCL_E_NOT_SUPPORT, 9 HCCL_E_TIMEOUT, 11 HCCL_E_TCP_CONNECT, 13 HCCL_E_TCP_TRANSFER, \
21 HCCL_E_REMOTE, ...), `message` the library's message (also str(error))."
);

/// The exception for `e`.
pub(crate) fn to_py(py: Python<'_>, e: &CommError) -> PyErr {
    hccl_error(py, e.hccl_result(), &e.to_string())
}

/// An [`HcclError`] with `code` and `message`.
pub(crate) fn hccl_error(py: Python<'_>, code: u32, message: &str) -> PyErr {
    let err = HcclError::new_err(message.to_string());
    let v = err.value(py);
    // Setting attributes on a fresh exception instance cannot fail.
    let _ = v.setattr("code", code);
    let _ = v.setattr("message", message);
    err
}
