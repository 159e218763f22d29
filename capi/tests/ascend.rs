//! The Ascend backend (`--features ascend`) run for real without an NPU:
//! hccl-rs's own `libhccl.so` (this crate's cdylib, laid out as
//! `hccl-capi install` does) is opened through `hccl_ascend_sys`'s loader,
//! so every FFI declaration, the symbol table, the error mapping and both
//! modes of the backend run against a library that behaves as CANN's. The
//! conformance cases run on it in both modes. A missing and a partial
//! library give the documented errors.
//!
//! `tests/ascend_env.rs` runs the same cases on the environment's CANN.
#![cfg(feature = "ascend")]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Once, OnceLock};

use hccl::comm::{AscendMode, AscendSettings, ReduceOp};
use hccl::{Comm, CommError, P2pItem};
use hccl_ascend_sys::types::*;
use hccl_ascend_sys::{AscendError, Library};

/// Bounds every wait of the host library (a hang fails in seconds), set
/// once before any test reaches the library.
fn setup() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        std::env::set_var("HCCL_EXEC_TIMEOUT", "60");
        std::env::set_var("HCCL_CONNECT_TIMEOUT", "60");
    });
}

fn tmp() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ascend")
}

/// The prefix's `lib64`: the cdylib cargo built for these tests, as
/// `hccl-capi install` lays it out (libascendcl.so a linker script).
fn lib64() -> &'static Path {
    static P: OnceLock<PathBuf> = OnceLock::new();
    P.get_or_init(|| {
        setup();
        common::install_built_prefix(&tmp()).join("lib64")
    })
}

fn settings(mode: AscendMode) -> AscendSettings {
    AscendSettings {
        library_dir: Some(lib64().to_path_buf()),
        mode,
    }
}

/// Runs `f` on every rank of an `n`-rank communicator, one thread each.
fn on_ranks<R: Send + 'static>(
    n: u32,
    mode: AscendMode,
    f: impl Fn(Comm) -> R + Send + Sync + Clone + 'static,
) -> Vec<R> {
    let comms = Comm::init_all_ascend(n, &settings(mode)).expect("init_all_ascend");
    hccl_conformance::on_comms(comms, f)
}

#[test]
fn the_loader_resolves_every_required_symbol_of_the_host_library() {
    let lib = Library::load_from(lib64()).unwrap();
    assert!(
        lib.hccl_path().ends_with("lib64/libhccl.so"),
        "{}",
        lib.hccl_path()
    );
    lib.init().unwrap();
    // The host library's defaults (capi/src/device.rs): 8 devices, 910B3.
    assert_eq!(lib.device_count().unwrap(), 8);
    assert_eq!(lib.soc_name(), "Ascend910B3");
    for f in hccl_ascend_sys::OPTIONAL {
        assert!(lib.supports(f), "{f}");
    }
    assert!(!lib.supports("HcclNoSuchCall"));
    assert!(!lib.error_string(HCCL_E_PARA).is_empty());
}

#[test]
fn hccl_and_acl_errors_carry_function_code_text_and_advice() {
    let lib = Library::load_from(lib64()).unwrap();
    lib.init().unwrap();
    let e = lib.set_device(99).unwrap_err();
    let AscendError::Acl {
        func,
        code,
        ref recent,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((func, code), ("aclrtSetDevice", 200_002));
    assert!(recent.contains("deviceId 99 is out of range"), "{recent}");
    let t = e.to_string();
    assert!(t.contains("npu-smi info"), "{t}");
    // A rank outside the communicator: HCCL_E_PARA with HCCL's words.
    lib.set_device(0).unwrap();
    let root = lib.root_info().unwrap();
    let e = lib.init_root_info(2, &root, 5).unwrap_err();
    let AscendError::Hccl {
        func,
        code,
        ref text,
        ref recent,
    } = e
    else {
        panic!("{e:?}")
    };
    assert_eq!((func, code), ("HcclCommInitRootInfo", HCCL_E_PARA));
    assert!(!text.is_empty());
    assert!(recent.contains("rank"), "{recent}");
    assert_eq!(e.hccl_result(), HCCL_E_PARA);
    // A region outside its buffer is refused before CANN is called.
    let m = lib.malloc(16).unwrap();
    let e = lib.copy_to_device(&m, 8, &[0u8; 16]).unwrap_err();
    assert!(
        matches!(&e, AscendError::Arg { func: "aclrtMemcpy", detail } if detail.contains("16 bytes at offset 8")),
        "{e:?}"
    );
}

#[test]
fn a_missing_library_names_the_directory_and_set_env_sh() {
    let dir = tmp().join(format!("empty-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let e = Library::load_from(&dir).unwrap_err();
    assert!(e.is_missing_library(), "{e:?}");
    let t = e.to_string();
    assert!(
        t.starts_with(&format!(
            "libhccl.so not found in {}; source CANN's set_env.sh",
            dir.display()
        )),
        "{t}"
    );
    // Through the facade: the same text, HCCL_E_NOT_FOUND.
    let s = AscendSettings {
        library_dir: Some(dir),
        mode: AscendMode::Native,
    };
    let e = Comm::init_all_ascend(2, &s).unwrap_err();
    assert!(e.to_string().contains("libhccl.so not found in"), "{e}");
    assert_eq!(e.hccl_result(), 6);
}

/// The path of this process's libc (already loaded, so opening it again
/// through a link returns the same library).
fn libc_path() -> PathBuf {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    maps.lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| p.contains("/libc.so") || p.contains("/libc-"))
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps")
}

#[test]
fn a_partial_library_names_the_first_missing_symbol() {
    // libascendcl.so: the full host library; libhccl.so: a library with
    // none of HCCL's functions (libc).
    let dir = tmp().join(format!("partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::os::unix::fs::symlink(lib64().join("libhccl.so"), dir.join("libascendcl.so")).unwrap();
    std::os::unix::fs::symlink(libc_path(), dir.join("libhccl.so")).unwrap();
    let e = Library::load_from(&dir).unwrap_err();
    let AscendError::MissingSymbol { lib, symbol, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!((*lib, *symbol), ("libhccl.so", "HcclGetRootInfo"));
    let t = e.to_string();
    assert!(t.contains("has no symbol HcclGetRootInfo"), "{t}");
    assert!(t.contains("older than 8.1.RC1"), "{t}");
}

#[test]
fn raw_calls_init_all_and_allreduce_on_device_buffers() {
    let lib = Library::load_from(lib64()).unwrap();
    lib.init().unwrap();
    let comms = lib.init_all(&[0, 1, 2]).unwrap();
    let hs: Vec<_> = comms
        .into_iter()
        .enumerate()
        .map(|(r, c)| {
            let lib = Arc::clone(&lib);
            std::thread::spawn(move || {
                lib.set_device(r as i32).unwrap();
                assert_eq!((c.rank().unwrap(), c.size().unwrap()), (r as u32, 3));
                let s = lib.stream().unwrap();
                let (send, recv) = (lib.malloc(16).unwrap(), lib.malloc(16).unwrap());
                let v: Vec<u8> = [r as f32 + 1.0; 4]
                    .iter()
                    .flat_map(|x| x.to_le_bytes())
                    .collect();
                lib.copy_to_device(&send, 0, &v).unwrap();
                c.all_reduce(
                    (&send, 0),
                    (&recv, 0),
                    4,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_SUM,
                    &s,
                )
                .unwrap();
                let mut out = [0u8; 16];
                lib.copy_from_device(&mut out, &recv, 0).unwrap();
                // Too many elements for the buffer: refused before the call.
                let e = c
                    .all_reduce(
                        (&send, 0),
                        (&recv, 0),
                        5,
                        HCCL_DATA_TYPE_FP32,
                        HCCL_REDUCE_SUM,
                        &s,
                    )
                    .unwrap_err();
                assert!(
                    matches!(
                        e,
                        AscendError::Arg {
                            func: "HcclAllReduce",
                            ..
                        }
                    ),
                    "{e:?}"
                );
                out
            })
        })
        .collect();
    for h in hs {
        let out = h.join().unwrap();
        let got: Vec<f32> = out
            .chunks(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![6.0; 4]);
    }
}

fn conformance(world: u32, mode: AscendMode) {
    let fails = on_ranks(world, mode, hccl_conformance::run_all);
    for (r, f) in fails.iter().enumerate() {
        assert!(f.is_empty(), "{mode:?}, {world} ranks, rank {r}: {f:#?}");
    }
}

#[test]
fn native_mode_passes_the_conformance_cases_on_2_and_3_ranks() {
    conformance(2, AscendMode::Native);
    conformance(3, AscendMode::Native);
}

#[test]
fn schedule_mode_passes_the_conformance_cases_on_2_and_3_ranks() {
    conformance(2, AscendMode::Schedule);
    conformance(3, AscendMode::Schedule);
}

#[test]
fn a_count_mismatch_fails_every_rank_before_hccl_runs_the_op() {
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        let rs = on_ranks(2, mode, |c| {
            let n = 4 + c.rank() as usize;
            let send = vec![1f32; n];
            let mut recv = vec![7f32; n];
            let r = c.all_reduce(&send, &mut recv, ReduceOp::Sum);
            (r, recv)
        });
        for (rank, (r, recv)) in rs.into_iter().enumerate() {
            let e = r.unwrap_err();
            assert!(matches!(e, CommError::Mismatch(_)), "{mode:?}: {e:?}");
            assert_eq!(e.hccl_result(), 21, "HCCL_E_REMOTE");
            let t = e.to_string();
            assert!(
                t.starts_with("comm 'world' AllReduce #0: count mismatch, "),
                "{mode:?} rank {rank}: {t}"
            );
            assert!(t.contains("4 on rank") && t.contains("5 on rank"), "{t}");
            assert!(
                recv.iter().all(|&x| x == 7.0),
                "the receive buffer is untouched"
            );
        }
    }
}

#[test]
fn split_and_point_to_point_run_on_ascend_communicators() {
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        let rs = on_ranks(4, mode, |c| {
            let r = c.rank();
            // Evens and odds; each half all-reduces its ranks.
            let sub = c.split(Some(r % 2), r).unwrap().unwrap();
            let mut got = vec![0u32; 2];
            sub.all_reduce(&[r, 1], &mut got, ReduceOp::Sum).unwrap();
            // A ring exchange in one batch: to r+1, from r-1.
            let n = c.size();
            let mine = vec![r as u64 * 10; 3];
            let mut from = vec![0u64; 3];
            c.batch_send_recv(&mut [
                P2pItem::send(&mine, (r + 1) % n),
                P2pItem::recv(&mut from, (r + n - 1) % n),
            ])
            .unwrap();
            drop(sub);
            (got, from)
        });
        for (r, (got, from)) in rs.into_iter().enumerate() {
            let r = r as u32;
            let want = if r.is_multiple_of(2) { 2 } else { 1 + 3 };
            assert_eq!(got, vec![want, 2], "{mode:?} rank {r}");
            assert_eq!(
                from,
                vec![u64::from((r + 3) % 4) * 10; 3],
                "{mode:?} rank {r}"
            );
        }
    }
}

#[test]
fn every_conformance_case_runs_on_device_buffers_in_both_modes_on_2_and_3_ranks() {
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        for world in [2, 3] {
            let fails = on_ranks(world, mode, |c| {
                hccl_conformance::run_all_in(c, hccl_conformance::Memory::Device)
            });
            for (r, f) in fails.iter().enumerate() {
                assert!(f.is_empty(), "{mode:?}, {world} ranks, rank {r}: {f:#?}");
            }
        }
    }
}

#[test]
fn typed_calls_on_npu_buffers_give_the_hand_computed_results_in_both_modes() {
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        for world in [2, 3] {
            let fails = on_ranks(world, mode, |c| {
                let b = c.device_buffer::<f32>(4).unwrap();
                let mut bad = hccl_conformance::device::typed_calls(&c);
                if !b.on_npu() {
                    bad.push("the buffer is not NPU memory".into());
                }
                bad
            });
            for f in &fails {
                assert!(f.is_empty(), "{mode:?}, {world} ranks: {f:#?}");
            }
        }
    }
}

#[test]
fn npu_buffers_copy_both_ways_and_refuse_a_wrong_length() {
    let rs = on_ranks(2, AscendMode::Native, |c| {
        let mut b = c.device_buffer::<i32>(3).unwrap();
        let zeroed = b.to_vec().unwrap();
        b.copy_from_host(&[4, 5, 6]).unwrap();
        let e = b.copy_from_host(&[1, 2]).unwrap_err().to_string();
        let mut out = [0i32; 3];
        b.copy_to_host(&mut out).unwrap();
        (zeroed, e, out)
    });
    for (zeroed, e, out) in rs {
        assert_eq!(zeroed, vec![0; 3]);
        assert!(
            e.starts_with("DeviceBuffer<int32>::copy_from_host: src.len() = 2 but the device buffer holds 3 elements"),
            "{e}"
        );
        assert_eq!(out, [4, 5, 6]);
    }
}

#[test]
fn another_npus_buffer_is_refused_and_a_mismatch_leaves_npu_buffers_untouched() {
    for mode in [AscendMode::Native, AscendMode::Schedule] {
        let comms = Comm::init_all_ascend(2, &settings(mode)).unwrap();
        // Rank r gets a buffer of NPU 1 - r.
        let mut wrong: Vec<_> = (0..2)
            .map(|r| Some(comms[1 - r].device_buffer_from(&[1f32; 2]).unwrap()))
            .collect();
        let with: Vec<_> = comms
            .into_iter()
            .enumerate()
            .map(|(r, c)| (c, wrong[r].take().unwrap()))
            .collect();
        let hs: Vec<_> = with
            .into_iter()
            .map(|(c, w)| {
                std::thread::spawn(move || {
                    let mut o = c.device_buffer_from(&[-7f32; 2]).unwrap();
                    let refused = c.all_reduce(&w, &mut o, ReduceOp::Sum).unwrap_err();
                    drop(w);
                    (refused, o.to_vec().unwrap())
                })
            })
            .collect();
        for (r, h) in hs.into_iter().enumerate() {
            let (e, o) = h.join().unwrap();
            assert!(
                matches!(e, CommError::WrongDevice { .. }),
                "{mode:?}: {e:?}"
            );
            let t = e.to_string();
            assert!(
                t.starts_with(&format!(
                    "AllReduce: the send buffer is a device buffer of NPU {}",
                    1 - r
                )),
                "{mode:?} rank {r}: {t}"
            );
            assert!(t.contains(&format!("NPU {r}")), "{t}");
            assert_eq!(o, vec![-7.0; 2], "{mode:?} rank {r}");
        }
        // Counts that differ: every rank fails before HCCL writes.
        let rs = on_ranks(2, mode, |c| {
            let n = 2 + c.rank() as usize;
            let s = c.device_buffer_from(&vec![1f32; n]).unwrap();
            let mut o = c.device_buffer_from(&vec![-7f32; n]).unwrap();
            let e = c.all_reduce(&s, &mut o, ReduceOp::Sum).unwrap_err();
            (e, o.to_vec().unwrap())
        });
        for (r, (e, o)) in rs.into_iter().enumerate() {
            assert!(matches!(e, CommError::Mismatch(_)), "{mode:?}: {e:?}");
            assert!(o.iter().all(|&x| x == -7.0), "{mode:?} rank {r}: {o:?}");
        }
    }
}
