//! The element types a typed collective accepts.

use hccl_algos::DataType;

mod sealed {
    pub trait Sealed: bytemuck::Pod {}
}

/// A type a typed collective can take (`&[T]`, `&mut [T]`): the 12 HCCL
/// data types, [`hccl::half::f16`](crate::half::f16) and
/// [`hccl::half::bf16`](crate::half::bf16) for fp16 and bf16 (the
/// `half` crate, re-exported). Sealed: the
/// byte layout must be what the reduce kernels expect (little-endian
/// machines, which is every platform HCCL and Rust's tier-1 targets run).
pub trait Element: sealed::Sealed + Send + Sync + 'static {
    /// The matching data type.
    const DTYPE: DataType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DataType = DataType::$d;
        }
    )*};
}

element! {
    i8 => Int8, i16 => Int16, i32 => Int32, i64 => Int64,
    u8 => Uint8, u16 => Uint16, u32 => Uint32, u64 => Uint64,
    f32 => Fp32, f64 => Fp64, half::f16 => Fp16, half::bf16 => Bf16,
}

/// The bytes of a typed slice.
pub(crate) fn bytes<T: Element>(s: &[T]) -> &[u8] {
    bytemuck::cast_slice(s)
}

/// The bytes of a typed slice, writable.
pub(crate) fn bytes_mut<T: Element>(s: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reexported_half_types_are_the_fp16_and_bf16_elements() {
        // Through the crate's own path, as a user writes `hccl::half::f16`.
        assert_eq!(<crate::half::f16 as Element>::DTYPE, DataType::Fp16);
        assert_eq!(<crate::half::bf16 as Element>::DTYPE, DataType::Bf16);
        // fp16 1.5 is 0x3E00, little-endian.
        assert_eq!(bytes(&[crate::half::f16::from_f32(1.5)]), [0x00, 0x3E]);
    }
}
