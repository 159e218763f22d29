//! hccl-rs: collective communication in the style of Huawei HCCL.
