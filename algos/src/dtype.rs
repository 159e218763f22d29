//! Data types and reduce operations, numbered as HCCL numbers them.
//!
//! Source for the numbering: `HcclDataType` and `HcclReduceOp` in HCCL's
//! public header `hccl_types.h` (CANN). `Avg` is not in HCCL; it is NCCL's
//! `ncclAvg` (value 4 there too) and is defined here as a sum followed by one
//! division by the world size.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An element type of a collective's buffers. Discriminants are HCCL's
/// `HcclDataType` values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum DataType {
    /// `HCCL_DATA_TYPE_INT8`, 1 byte.
    Int8 = 0,
    /// `HCCL_DATA_TYPE_INT16`, 2 bytes.
    Int16 = 1,
    /// `HCCL_DATA_TYPE_INT32`, 4 bytes.
    Int32 = 2,
    /// `HCCL_DATA_TYPE_FP16` (IEEE 754 binary16), 2 bytes.
    Fp16 = 3,
    /// `HCCL_DATA_TYPE_FP32`, 4 bytes.
    Fp32 = 4,
    /// `HCCL_DATA_TYPE_INT64`, 8 bytes.
    Int64 = 5,
    /// `HCCL_DATA_TYPE_UINT64`, 8 bytes.
    Uint64 = 6,
    /// `HCCL_DATA_TYPE_UINT8`, 1 byte.
    Uint8 = 7,
    /// `HCCL_DATA_TYPE_UINT16`, 2 bytes.
    Uint16 = 8,
    /// `HCCL_DATA_TYPE_UINT32`, 4 bytes.
    Uint32 = 9,
    /// `HCCL_DATA_TYPE_FP64`, 8 bytes.
    Fp64 = 10,
    /// `HCCL_DATA_TYPE_BFP16` (bfloat16), 2 bytes.
    Bf16 = 11,
}

impl DataType {
    /// Every data type, in HCCL's numbering order.
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Int16,
        DataType::Int32,
        DataType::Fp16,
        DataType::Fp32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Uint32,
        DataType::Fp64,
        DataType::Bf16,
    ];

    /// Size of one element in bytes.
    pub const fn size(self) -> u64 {
        match self {
            DataType::Int8 | DataType::Uint8 => 1,
            DataType::Int16 | DataType::Uint16 | DataType::Fp16 | DataType::Bf16 => 2,
            DataType::Int32 | DataType::Uint32 | DataType::Fp32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Fp64 => 8,
        }
    }

    /// Canonical short name (`fp32`, `bf16`, `int8`, ...), as printed.
    pub const fn name(self) -> &'static str {
        match self {
            DataType::Int8 => "int8",
            DataType::Int16 => "int16",
            DataType::Int32 => "int32",
            DataType::Fp16 => "fp16",
            DataType::Fp32 => "fp32",
            DataType::Int64 => "int64",
            DataType::Uint64 => "uint64",
            DataType::Uint8 => "uint8",
            DataType::Uint16 => "uint16",
            DataType::Uint32 => "uint32",
            DataType::Fp64 => "fp64",
            DataType::Bf16 => "bf16",
        }
    }

    /// True for fp16, bf16, fp32 and fp64.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            DataType::Fp16 | DataType::Fp32 | DataType::Fp64 | DataType::Bf16
        )
    }

    /// The type with HCCL's numeric value `v`, if any.
    pub fn from_hccl(v: u32) -> Option<DataType> {
        DataType::ALL.into_iter().find(|d| *d as u32 == v)
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of parsing a [`DataType`] or [`ReduceOp`] name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}; accepted: {accepted}")]
pub struct ParseNameError {
    /// What was being parsed ("data type", "reduce op").
    pub what: &'static str,
    /// The rejected input.
    pub value: String,
    /// The accepted names, comma separated.
    pub accepted: String,
}

impl FromStr for DataType {
    type Err = ParseNameError;

    /// Accepts our names and HCCL's / hccl_test's spellings (`float32`,
    /// `float`, `float16`, `bfp16`, `bfloat16`, `double`, `HCCL_DATA_TYPE_FP32`),
    /// case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let key = lower.strip_prefix("hccl_data_type_").unwrap_or(&lower);
        let found = match key {
            "float32" | "float" | "f32" => Some(DataType::Fp32),
            "float16" | "half" | "f16" => Some(DataType::Fp16),
            "bfp16" | "bfloat16" => Some(DataType::Bf16),
            "float64" | "double" | "f64" => Some(DataType::Fp64),
            _ => DataType::ALL.into_iter().find(|d| d.name() == key),
        };
        found.ok_or_else(|| ParseNameError {
            what: "data type",
            value: s.to_string(),
            accepted: DataType::ALL.map(|d| d.name()).join(", "),
        })
    }
}

/// A reduction. Discriminants 0..=3 are HCCL's `HcclReduceOp` values; `Avg`
/// (4) has NCCL's `ncclAvg` number and meaning, computed as a sum, then one
/// division by the world size (integers truncate toward zero). Unlike NCCL,
/// which scales floating-point inputs by 1/p before summing, the sum here
/// is taken first: an fp16/bf16 sum beyond the type's range gives ±inf
/// (3 ranks of fp16 60000 average to inf, not 60000), and an integer sum
/// wraps as NCCL's integer average does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[repr(u32)]
pub enum ReduceOp {
    /// `HCCL_REDUCE_SUM`. Integers wrap (two's complement).
    Sum = 0,
    /// `HCCL_REDUCE_PROD`. Integers wrap.
    Prod = 1,
    /// `HCCL_REDUCE_MAX`. A NaN anywhere gives NaN.
    Max = 2,
    /// `HCCL_REDUCE_MIN`. A NaN anywhere gives NaN.
    Min = 3,
    /// Average: sum, then divide once by the world size (not in HCCL; NCCL's
    /// `ncclAvg`, but summed before dividing: see the type's docs).
    Avg = 4,
}

impl ReduceOp {
    /// Every reduce op.
    pub const ALL: [ReduceOp; 5] = [
        ReduceOp::Sum,
        ReduceOp::Prod,
        ReduceOp::Max,
        ReduceOp::Min,
        ReduceOp::Avg,
    ];

    /// Short name (`sum`, `prod`, `max`, `min`, `avg`).
    pub const fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Prod => "prod",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::Avg => "avg",
        }
    }
}

impl fmt::Display for ReduceOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ReduceOp {
    type Err = ParseNameError;

    /// Accepts `sum`, `prod`, `max`, `min`, `avg` and HCCL's `HCCL_REDUCE_SUM` style, case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let lower = s.trim().to_ascii_lowercase();
        let key = lower.strip_prefix("hccl_reduce_").unwrap_or(&lower);
        ReduceOp::ALL
            .into_iter()
            .find(|o| o.name() == key)
            .ok_or_else(|| ParseNameError {
                what: "reduce op",
                value: s.to_string(),
                accepted: ReduceOp::ALL.map(|o| o.name()).join(", "),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hccl_numbering_round_trips() {
        for d in DataType::ALL {
            assert_eq!(DataType::from_hccl(d as u32), Some(d));
            assert_eq!(d.name().parse::<DataType>(), Ok(d));
        }
        assert_eq!(DataType::from_hccl(12), None);
        assert_eq!(DataType::Bf16 as u32, 11);
        assert_eq!(DataType::Fp32 as u32, 4);
    }

    #[test]
    fn hccl_spellings_parse() {
        assert_eq!("bfp16".parse::<DataType>(), Ok(DataType::Bf16));
        assert_eq!(
            "HCCL_DATA_TYPE_FP16".parse::<DataType>(),
            Ok(DataType::Fp16)
        );
        assert_eq!("HCCL_REDUCE_MAX".parse::<ReduceOp>(), Ok(ReduceOp::Max));
        let e = "fp8".parse::<DataType>().unwrap_err();
        assert!(e.to_string().contains("\"fp8\""), "{e}");
        assert!(e.to_string().contains("bf16"), "{e}");
    }
}
