//! Element types: a buffer's struct-module format (`'f'`, `'<e'`, ...) or
//! a name (`"bf16"`, `"float32"`) to HCCL's [`DataType`], and reduce op
//! names to [`ReduceOp`].

use std::ffi::CStr;

use hccl::comm::{DataType, ReduceOp};
use pyo3::exceptions::PyValueError;
use pyo3::PyResult;

/// The data type of a buffer with struct-module `format` and items of
/// `item_size` bytes: `None` for raw bytes (`'B'`, `'c'`: numpy's uint8,
/// `bytearray`), which take the type the call names, else uint8.
///
/// # Errors
/// A format with no HCCL data type (`'?'`, complex, structs, big-endian
/// on this little-endian host), as a message.
pub(crate) fn from_format(format: &CStr, item_size: usize) -> Result<Option<DataType>, String> {
    let f = format.to_string_lossy();
    // '@' and '=' are native order, '<' is little-endian: this host's.
    let code = f.trim_start_matches(['@', '=', '<']);
    let signed = |ints: [DataType; 4]| match item_size {
        1 => Some(ints[0]),
        2 => Some(ints[1]),
        4 => Some(ints[2]),
        8 => Some(ints[3]),
        _ => None,
    };
    use DataType::*;
    let d = match code {
        "B" | "c" => return Ok(None),
        "b" | "h" | "i" | "l" | "q" | "n" => signed([Int8, Int16, Int32, Int64]),
        "H" | "I" | "L" | "Q" | "N" => signed([Uint8, Uint16, Uint32, Uint64]),
        "e" => Some(Fp16),
        "f" => Some(Fp32),
        "d" => Some(Fp64),
        _ => None,
    };
    d.map(Some).ok_or_else(|| {
        format!("buffer format {f:?} (items of {item_size} bytes) has no HCCL data type; accepted: signed and unsigned integers of 1, 2, 4, 8 bytes, float16 ('e'), float32, float64, raw bytes ('B') with dtype= (e.g. dtype='bf16' for bfloat16 bits; a bool array as arr.view(numpy.uint8))")
    })
}

/// The data type of a `torch.Tensor` whose `str(tensor.dtype)` is `name`,
/// as `from_format` reads the numpy view of the same memory: `None` (raw
/// bytes) for uint8 and bool (as 0/1 bytes), bfloat16 named here (numpy
/// has no such format).
///
/// # Errors
/// A dtype with no HCCL data type (complex, quantized, ...), as a message.
pub(crate) fn from_torch(name: &str) -> Result<Option<DataType>, String> {
    use DataType::*;
    let d = match name.trim_start_matches("torch.") {
        "uint8" | "bool" => return Ok(None),
        "int8" => Int8,
        "int16" => Int16,
        "int32" => Int32,
        "int64" => Int64,
        "float16" => Fp16,
        "bfloat16" => Bf16,
        "float32" => Fp32,
        "float64" => Fp64,
        _ => {
            return Err(format!(
                "tensor dtype {name} has no HCCL data type; accepted: int8/16/32/64, uint8, bool, float16, bfloat16, float32, float64"
            ))
        }
    };
    Ok(Some(d))
}

/// The data type named `name` (`fp32`, `float32`, `bf16`, `bfloat16`,
/// `HCCL_DATA_TYPE_FP16`, ...).
///
/// # Errors
/// `ValueError` listing the accepted names.
pub(crate) fn parse(name: &str) -> PyResult<DataType> {
    name.parse()
        .map_err(|e| PyValueError::new_err(format!("dtype: {e}")))
}

/// The reduce op named `name` (`sum`, `prod`, `max`, `min`, `avg`,
/// `HCCL_REDUCE_SUM`, ...).
///
/// # Errors
/// `ValueError` listing the accepted names.
pub(crate) fn reduce_op(name: &str) -> PyResult<ReduceOp> {
    name.parse()
        .map_err(|e| PyValueError::new_err(format!("op: {e}")))
}
