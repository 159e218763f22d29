//! Calls on several communicators issued together from one thread: the
//! Rust form of NCCL's `ncclGroupStart` / `ncclGroupEnd`, and of HCCL's
//! loop that calls `HcclAllReduce` on every communicator of
//! `HcclCommInitAll` before synchronising the streams.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{Comm, CommError};

/// One call of a [`Group`]: what it runs, on which communicator.
type Call<'env> = Box<dyn FnOnce(&Comm) -> Result<(), CommError> + Send + 'env>;

/// A communicator's calls in the order added, each with its position in
/// the group.
type Queue<'env> = (&'env Comm, Vec<(usize, Call<'env>)>);

/// The calls collected by [`group`]. Each is a closure given the
/// communicator it was added for, so it may borrow buffers that outlive
/// the group.
pub struct Group<'env> {
    calls: Vec<(&'env Comm, Call<'env>)>,
}

impl<'env> Group<'env> {
    /// Adds `call`, to run on `comm` when the group ends. Calls on one
    /// communicator run in the order added (its op order); calls on
    /// different communicators run at the same time.
    pub fn call(
        &mut self,
        comm: &'env Comm,
        call: impl FnOnce(&Comm) -> Result<(), CommError> + Send + 'env,
    ) -> &mut Self {
        self.calls.push((comm, Box::new(call)));
        self
    }
}

/// Runs the calls that `f` adds to a [`Group`] once `f` returns, one thread
/// per communicator, and returns when all are done. This is how one thread
/// drives every communicator of [`Comm::init_all`]:
///
/// ```
/// # std::env::set_var("HCCL_BACKEND", "sim");
/// let comms = hccl::Comm::init_all(4)?;
/// let send: Vec<Vec<f32>> = (0..4).map(|r| vec![r as f32; 8]).collect();
/// let mut recv = vec![vec![0f32; 8]; 4];
/// hccl::group(|g| {
///     for ((c, s), r) in comms.iter().zip(&send).zip(&mut recv) {
///         g.call(c, move |c| c.all_reduce(s, r, hccl::comm::ReduceOp::Sum));
///     }
/// })?;
/// assert!(recv.iter().all(|r| r == &vec![6.0; 8]));
/// # Ok::<(), hccl::CommError>(())
/// ```
///
/// # Errors
/// The first failed call's error, in the order the calls were added; every
/// call has run (or failed) by then.
///
/// # Panics
/// If a call panics: its communicator is aborted at once (so peers that
/// wait in an op it never ran fail, naming it, instead of timing out), its
/// later calls in the group are skipped, and the panic resumes once every
/// other call has ended.
pub fn group<'env>(f: impl FnOnce(&mut Group<'env>)) -> Result<(), CommError> {
    let mut g = Group { calls: Vec::new() };
    f(&mut g);
    // Each communicator's calls in the order added, with their positions.
    let mut per_comm: BTreeMap<*const super::Shared, Queue<'env>> = BTreeMap::new();
    let n = g.calls.len();
    for (i, (comm, call)) in g.calls.into_iter().enumerate() {
        let key = Arc::as_ptr(&comm.shared);
        per_comm
            .entry(key)
            .or_insert((comm, Vec::new()))
            .1
            .push((i, call));
    }
    let mut results: Vec<Option<Result<(), CommError>>> = (0..n).map(|_| None).collect();
    let mut panic = None;
    std::thread::scope(|s| {
        let threads: Vec<_> = per_comm
            .into_values()
            .map(|(comm, calls)| {
                s.spawn(move || {
                    let mut done = Vec::new();
                    for (i, call) in calls {
                        match std::panic::catch_unwind(AssertUnwindSafe(|| call(comm))) {
                            Ok(r) => done.push((i, r)),
                            Err(p) => {
                                // Its peers may wait in the op it never
                                // ran: fail them now, not at the timeout.
                                comm.abort_because(format!(
                                    "rank {} aborted the communicator: its call {i} in \
                                     hccl::group panicked",
                                    comm.rank()
                                ));
                                return Err(p);
                            }
                        }
                    }
                    Ok(done)
                })
            })
            .collect();
        for t in threads {
            match t.join() {
                Ok(Ok(done)) => done.into_iter().for_each(|(i, r)| results[i] = Some(r)),
                Ok(Err(p)) | Err(p) => {
                    panic.get_or_insert(p);
                }
            }
        }
    });
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    results.into_iter().flatten().collect()
}
