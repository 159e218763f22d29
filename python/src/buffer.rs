//! The caller's memory: Python objects exposing the buffer protocol
//! (numpy arrays, `memoryview`, `bytearray`) and contiguous CPU
//! `torch.Tensor`s, used in place, without a copy.
//!
//! This is the crate's one module with `unsafe`: an op runs with the GIL
//! released, on the caller's thread or on the communicator's worker
//! thread, on slices made from the buffer's address. What keeps that
//! sound:
//!
//! - a [`Mem`] holds the buffer export (`PyUntypedBuffer`) for as long as
//!   the op can touch the memory, so the exporter can neither free nor
//!   move it (numpy refuses to resize an array with live exports); for a
//!   tensor it holds the tensor, whose storage lives as long as it does
//!   (what a numpy view of the tensor would hold too: torch does not stop
//!   `resize_` on a tensor with numpy views, which is the next point's
//!   misuse);
//! - only C-contiguous buffers and contiguous strided tensors are taken,
//!   so `[addr, addr + len)` is exactly their memory;
//! - a writable slice is only made from a buffer the exporter says is
//!   writable, and only through `&mut Mem`;
//! - the memories of one op that are written are checked not to overlap
//!   any other memory of that op ([`Pair::new`], [`check_disjoint`]), so no
//!   two Rust slices of one op alias;
//! - like any extension that releases the GIL around work on a buffer
//!   (numpy, torch's async collectives), other Python code must not
//!   touch the memory while the op runs; the Python docs say so.

#![allow(unsafe_code)]

use hccl::comm::DataType;
use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;

/// What keeps a [`Mem`]'s memory alive while an op may touch it.
enum Owner {
    /// A buffer export, released (with the GIL) when the op is done;
    /// `None` only while it is dropped.
    Export { view: Option<PyUntypedBuffer> },
    /// A `torch.Tensor`. Dropped without the GIL, its reference is given
    /// back the next time some thread holds the GIL (PyO3's deferred
    /// decref), so the worker thread never waits for the GIL for it.
    Tensor { _tensor: Py<PyAny> },
}

impl Drop for Owner {
    /// Releases a buffer export attached to Python, through
    /// `crate::exit::attach`: once the interpreter is exiting, a worker
    /// thread must not attach (the export is then left to the process's
    /// end, which frees everything).
    fn drop(&mut self) {
        if let Owner::Export { view } = self {
            let mut v = view.take();
            if crate::exit::attach(|_| drop(v.take())).is_none() {
                std::mem::forget(v);
            }
        }
    }
}

/// One Python buffer an op reads or writes.
pub(crate) struct Mem {
    /// The owner of the memory (`None` for [`Mem::empty`]).
    _view: Option<Owner>,
    /// The first byte (an address: the slice is only made on use).
    addr: usize,
    /// Bytes.
    len: usize,
    /// The element type the buffer's format names (`None`: raw bytes).
    dtype: Option<DataType>,
    /// A torch bool tensor: 0/1 bytes, which a sum could turn into 2.
    bools: bool,
}

impl Mem {
    /// The buffer of `obj` for the argument `arg` (named in errors);
    /// `writable` for a buffer the op writes.
    ///
    /// # Errors
    /// `TypeError` if `obj` has no buffer; `ValueError` if it is not
    /// C-contiguous, or read-only where it is written.
    pub(crate) fn get(obj: &Bound<'_, PyAny>, arg: &str, writable: bool) -> PyResult<Mem> {
        let view = PyUntypedBuffer::get(obj).map_err(|e| {
            PyTypeError::new_err(format!(
                "{arg}: expected a buffer (numpy array, memoryview, bytearray, CPU torch.Tensor): {e}"
            ))
        })?;
        if !view.is_c_contiguous() {
            return Err(PyValueError::new_err(format!(
                "{arg}: the buffer is not C-contiguous (shape {:?}, strides {:?}); pass a contiguous array (numpy.ascontiguousarray, tensor.contiguous())",
                view.shape(),
                view.strides()
            )));
        }
        if writable && view.readonly() {
            return Err(PyValueError::new_err(format!(
                "{arg}: the buffer is read-only and this op writes it"
            )));
        }
        let dtype = crate::dtype::from_format(view.format(), view.item_size())
            .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))?;
        Ok(Mem {
            addr: view.buf_ptr() as usize,
            len: view.len_bytes(),
            dtype,
            bools: false,
            _view: Some(Owner::Export { view: Some(view) }),
        })
    }

    /// The memory of `tensor` (a `torch.Tensor`), for the argument `arg`:
    /// read from its `data_ptr()`, `numel()` and `element_size()` (without
    /// the numpy view, which cost about 10 µs per call); the tensor is held
    /// until the op is done.
    ///
    /// # Errors
    /// `ValueError` if it is not on the CPU, not strided or not contiguous;
    /// `TypeError` for a dtype with no HCCL type ([`crate::dtype::from_torch`]).
    pub(crate) fn tensor(tensor: &Bound<'_, PyAny>, arg: &str) -> PyResult<Mem> {
        // Interned names: a plain `&str` made a new Python string per call.
        let py = tensor.py();
        if !tensor.getattr(intern!(py, "is_cpu"))?.is_truthy()? {
            let device = tensor.getattr(intern!(py, "device"))?.str()?.to_string();
            return Err(PyValueError::new_err(format!(
                "{arg}: the tensor is on {device}; hccl_rs takes CPU tensors"
            )));
        }
        let layout = tensor.getattr(intern!(py, "layout"))?.str()?.to_string();
        if layout != "torch.strided" {
            return Err(PyValueError::new_err(format!(
                "{arg}: the tensor's layout is {layout}; hccl_rs takes dense (torch.strided) tensors"
            )));
        }
        if !tensor
            .call_method0(intern!(py, "is_contiguous"))?
            .is_truthy()?
        {
            return Err(PyValueError::new_err(format!(
                "{arg}: the tensor is not contiguous; pass tensor.contiguous()"
            )));
        }
        let name = tensor.getattr(intern!(py, "dtype"))?.str()?.to_string();
        let dtype = crate::dtype::from_torch(&name)
            .map_err(|e| PyTypeError::new_err(format!("{arg}: {e}")))?;
        let numel: usize = tensor.call_method0(intern!(py, "numel"))?.extract()?;
        let item: usize = tensor
            .call_method0(intern!(py, "element_size"))?
            .extract()?;
        let len = numel.checked_mul(item).ok_or_else(|| {
            PyValueError::new_err(format!("{arg}: {numel} elements of {item} bytes overflow"))
        })?;
        let addr: usize = tensor.call_method0(intern!(py, "data_ptr"))?.extract()?;
        Ok(Mem {
            addr,
            len,
            dtype,
            bools: name == "torch.bool",
            _view: Some(Owner::Tensor {
                _tensor: tensor.clone().unbind(),
            }),
        })
    }

    /// No memory: the buffer an op does not use on this rank (a
    /// non-root's Scatter input, say).
    pub(crate) fn empty() -> Mem {
        Mem {
            _view: None,
            addr: 0,
            len: 0,
            dtype: None,
            bools: false,
        }
    }

    /// True if the first byte is aligned to `align` bytes (typed calls
    /// view the bytes as elements).
    pub(crate) fn aligned(&self, align: usize) -> bool {
        self.len == 0 || self.addr.is_multiple_of(align)
    }

    /// Bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// True for a torch bool tensor's memory.
    pub(crate) fn is_bools(&self) -> bool {
        self.bools
    }

    /// The element type of the buffer's format (`None` for raw bytes).
    pub(crate) fn dtype(&self) -> Option<DataType> {
        self.dtype
    }

    fn end(&self) -> usize {
        self.addr + self.len
    }

    /// True if the two memories share a byte.
    fn overlaps(&self, other: &Mem) -> bool {
        self.len > 0 && other.len > 0 && self.addr < other.end() && other.addr < self.end()
    }

    /// The memory, to read.
    pub(crate) fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr..addr + len` is the contiguous memory of the export
        // or tensor `self._view` holds (for `Pair::InPlace`, of two
        // overlapping ones, both held), alive and unmoved while `self` lives
        // (module docs); no `&mut` slice of it exists: those come from `&mut Mem`
        // and ops check that written memory overlaps nothing else.
        unsafe { std::slice::from_raw_parts(self.addr as *const u8, self.len) }
    }

    /// The memory, to write (checked writable by [`Mem::get`]).
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and `&mut self` makes this the only slice
        // of this `Mem`; the op's other memories do not overlap it
        // (`Pair::new`, `check_disjoint`); the exporter said it is writable
        // (a tensor's memory always is).
        unsafe { std::slice::from_raw_parts_mut(self.addr as *mut u8, self.len) }
    }
}

/// A send and a receive buffer of one op: disjoint, or one memory in
/// place (HCCL's in-place layouts: the input at `input_at` and the output
/// at `output_at` bytes of one buffer).
pub(crate) enum Pair {
    /// Two buffers that share no byte.
    Separate(Mem, Mem),
    /// One buffer, in place; the other export is kept alive beside it.
    InPlace(Mem, Mem),
}

impl Pair {
    /// `send` and `recv`; if they overlap, they must be the in-place
    /// layout `alias` gives (`(input_at, output_at)`: one memory whose
    /// base is at the lower of the two addresses).
    ///
    /// # Errors
    /// `ValueError` if they overlap any other way.
    pub(crate) fn new(send: Mem, recv: Mem, alias: Option<(u64, u64)>) -> PyResult<Pair> {
        if !send.overlaps(&recv) {
            return Ok(Pair::Separate(send, recv));
        }
        let base = send.addr.min(recv.addr);
        let fits = alias.is_some_and(|(input_at, output_at)| {
            send.addr == base + input_at as usize && recv.addr == base + output_at as usize
        });
        if !fits {
            return Err(PyValueError::new_err(
                "the send and receive buffers overlap, and not as this op's in-place layout (the same buffer, or the input at this rank's block of the output); pass disjoint buffers",
            ));
        }
        let end = send.end().max(recv.end());
        let one = Mem {
            _view: send._view,
            addr: base,
            len: end - base,
            dtype: send.dtype,
            bools: send.bools,
        };
        Ok(Pair::InPlace(one, recv))
    }
}

/// `send` and `recv` of an op with no in-place form.
///
/// # Errors
/// `ValueError` if they overlap.
pub(crate) fn separate(send: Mem, recv: Mem) -> PyResult<(Mem, Mem)> {
    match Pair::new(send, recv, None)? {
        Pair::Separate(s, r) => Ok((s, r)),
        // Without a layout, overlapping buffers are an error above.
        Pair::InPlace(..) => Err(PyValueError::new_err(
            "the send and receive buffers overlap; pass disjoint buffers",
        )),
    }
}

/// Checks that no memory in `written` overlaps another memory of the op
/// (`written` or `read`), so their slices can be made together.
///
/// # Errors
/// `ValueError` naming the two items (by their index in `names`).
pub(crate) fn check_disjoint(written: &[&Mem], read: &[&Mem], what: &str) -> PyResult<()> {
    for (i, w) in written.iter().enumerate() {
        let others = written.iter().skip(i + 1).chain(read.iter());
        if others.into_iter().any(|o| w.overlaps(o)) {
            return Err(PyValueError::new_err(format!(
                "{what}: a receive buffer overlaps another buffer of the same call; pass disjoint buffers"
            )));
        }
    }
    Ok(())
}
