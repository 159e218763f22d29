//! Devices on the host: how many there are, which one a thread uses, the
//! SoC name, and the memory figures (settings, see the crate docs).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};

/// `HCCL_HOST_DEVICES`: how many devices `aclrtGetDeviceCount` reports
/// (default 8, a server of Atlas 800T A2).
pub const ENV_DEVICES: &str = "HCCL_HOST_DEVICES";
/// `HCCL_HOST_SOC_NAME`: what `aclrtGetSocName` returns (default
/// [`DEFAULT_SOC`]).
pub const ENV_SOC: &str = "HCCL_HOST_SOC_NAME";
/// The default SoC name: an Ascend 910B, the NPU of Atlas 800T A2, as
/// CANN's `aclrtGetSocName` spells it (the names hccl_test knows, CANN
/// 8.1.RC1 `tools/hccl_test/common/src/hccl_test_common.cc`: Ascend910B1 ..
/// Ascend910B4). hccl_test sets the INF/NaN overflow mode for these names.
pub const DEFAULT_SOC: &str = "Ascend910B3";
/// Default device count.
pub const DEFAULT_DEVICES: u32 = 8;
/// Device memory per device, as `aclrtGetMemInfo` reports it: 64 GiB,
/// the HBM of an Ascend 910B (Atlas 800T A2 datasheet: 64 GB per NPU).
pub const DEVICE_MEMORY: usize = 64 << 30;

static INITIALIZED: AtomicBool = AtomicBool::new(false);
static FINALIZED: AtomicBool = AtomicBool::new(false);

thread_local! {
    static CURRENT: Cell<Option<i32>> = const { Cell::new(None) };
}

/// `HCCL_HOST_DEVICES` read (0 allowed; bad values: the default, with a
/// warning).
pub(crate) fn count() -> u32 {
    match std::env::var(ENV_DEVICES) {
        Ok(v) => match v.trim().parse::<u32>() {
            // 0 is a host without devices (every aclrtSetDevice fails),
            // what CANN reports when no driver sees an NPU.
            Ok(n) => n,
            _ => {
                tracing::warn!(
                    "{ENV_DEVICES}={v:?} is not a number of devices; using {DEFAULT_DEVICES}"
                );
                DEFAULT_DEVICES
            }
        },
        Err(_) => DEFAULT_DEVICES,
    }
}

/// The SoC name.
pub(crate) fn soc_name() -> String {
    std::env::var(ENV_SOC)
        .ok()
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| DEFAULT_SOC.to_string())
}

/// `Err` naming the range if `id` is not a device.
pub(crate) fn check(id: i32) -> Result<(), String> {
    let n = count();
    if id < 0 || id as u32 >= n {
        return Err(format!(
            "deviceId {id} is out of range: there are {n} devices (0..{n}, {ENV_DEVICES})"
        ));
    }
    Ok(())
}

/// `aclInit`: `false` if already initialized.
pub(crate) fn init() -> bool {
    !INITIALIZED.swap(true, Ordering::SeqCst)
}

/// `aclFinalize`: `false` if it ran already (CANN's runtime answers
/// `ACL_ERROR_REPEAT_FINALIZE` then; a first call without `aclInit`
/// succeeds, as there).
pub(crate) fn finalize() -> bool {
    INITIALIZED.store(false, Ordering::SeqCst);
    !FINALIZED.swap(true, Ordering::SeqCst)
}

/// True for the SoCs on which CANN's HCCL refuses a product of int16 or
/// bf16 (`HCCL_E_NOT_SUPPORT`; CANN open-source HCCL
/// `framework/common/src/param_check.cc`): Ascend 910B and 910_93.
pub(crate) fn refuses_prod_int16_bf16() -> bool {
    let s = soc_name();
    s.starts_with("Ascend910B") || s.starts_with("Ascend910_93")
}

/// Sets this thread's device.
pub(crate) fn set_current(id: Option<i32>) {
    CURRENT.with(|c| c.set(id));
}

/// This thread's device.
pub(crate) fn current() -> Option<i32> {
    CURRENT.with(|c| c.get())
}
