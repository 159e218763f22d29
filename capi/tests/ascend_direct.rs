//! Native mode runs HCCL's call on a `DeviceBuffer`'s own memory: the
//! backend allocates no device copy of it, as it does for host slices
//! (its kept input and output buffers). Measured with `aclrtGetMemInfo`
//! of hccl-rs's host library, whose device memory is one count for the
//! process, so this test has a binary of its own (nothing else
//! allocates meanwhile).
#![cfg(feature = "ascend")]

mod common;

use std::path::PathBuf;

use hccl::comm::{AscendMode, AscendSettings, ReduceOp};
use hccl::{Comm, DeviceBuffer};
use hccl_ascend_sys::Library;

const N: usize = 1 << 20;
const MIB: usize = 1 << 20;

/// Device memory in use in this process (bytes).
fn used(lib: &Library) -> usize {
    let (free, total) = lib.mem_info().unwrap();
    total - free
}

type Held = (Comm, DeviceBuffer<f32>, DeviceBuffer<f32>);

/// Runs `f` on every rank's thread and gives back what it returns.
fn on_ranks<T: Send + 'static>(ranks: Vec<T>, f: fn(T) -> T) -> Vec<T> {
    let hs: Vec<_> = ranks
        .into_iter()
        .map(|x| std::thread::spawn(move || f(x)))
        .collect();
    hs.into_iter().map(|h| h.join().unwrap()).collect()
}

#[test]
fn native_mode_allocates_no_device_copy_of_a_device_buffer_op() {
    std::env::set_var("HCCL_EXEC_TIMEOUT", "60");
    let tmp = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascend-direct");
    let lib64 = common::install_built_prefix(&tmp).join("lib64");
    let lib = Library::load_from(&lib64).unwrap();
    lib.init().unwrap();
    lib.set_device(0).unwrap();
    let settings = AscendSettings {
        library_dir: Some(lib64),
        mode: AscendMode::Native,
    };
    let before = used(&lib);
    let comms = Comm::init_all_ascend(2, &settings).unwrap();
    let held: Vec<Held> = on_ranks(
        comms
            .into_iter()
            .map(|c| {
                let s = c
                    .device_buffer_from(&vec![c.rank() as f32 + 1.0; N])
                    .unwrap();
                let o = c.device_buffer::<f32>(N).unwrap();
                (c, s, o)
            })
            .collect(),
        |(c, s, mut o)| {
            c.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap();
            (c, s, o)
        },
    );
    for (_, _, o) in &held {
        assert!(o.to_vec().unwrap().iter().all(|&x| x == 3.0));
    }
    // The four user buffers of 4 MiB, and the signature check's few bytes.
    let device_op = used(&lib) - before;
    assert!(
        (16 * MIB..17 * MIB).contains(&device_op),
        "{device_op} bytes in use after the device-buffer AllReduce"
    );
    // Host slices of the same size go through kept device buffers: an
    // input and an output of 4 MiB on each rank.
    let held: Vec<Held> = on_ranks(held, |(c, s, o)| {
        let mut out = vec![0f32; N];
        c.all_reduce(&vec![1f32; N], &mut out, ReduceOp::Sum)
            .unwrap();
        assert_eq!(out[N - 1], 2.0);
        (c, s, o)
    });
    let host_op = used(&lib) - before;
    assert!(
        host_op >= device_op + 16 * MIB,
        "{host_op} bytes in use after the host AllReduce, {device_op} before it"
    );
    let comms: Vec<Comm> = held.into_iter().map(|(c, _, _)| c).collect();
    hccl_conformance::drop_together(comms);
}
