//! The thread that runs a reducer's bucket exchanges, one at a time in
//! launch order (every rank launches in the same bucket order, so the
//! ranks' collectives pair up), and keeps each bucket's error feedback.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hccl::Comm;

use super::plan::Plan;
use crate::{CompressError, Compression, ErrorFeedback, Exchange};

/// Work for the thread, done in the order sent.
pub(crate) enum Job {
    /// Reduce bucket `bucket` of buffer set `set`.
    Exchange {
        set: usize,
        bucket: usize,
        buf: Vec<f32>,
    },
    /// The buckets were rebuilt: move each parameter's residual to its new place.
    Remap { old: Arc<Plan>, new: Arc<Plan> },
}

/// A finished exchange: the buffer back (reduced, or unchanged on error).
pub(crate) struct Done {
    pub(crate) set: usize,
    pub(crate) bucket: usize,
    pub(crate) buf: Vec<f32>,
    pub(crate) result: Result<Exchange, CompressError>,
    /// Wall time of the exchange on the thread.
    pub(crate) took: Duration,
}

pub(crate) struct Worker {
    tx: Option<Sender<Job>>,
    pub(crate) rx: Receiver<Done>,
    thread: Option<JoinHandle<()>>,
}

impl Worker {
    /// Starts the thread for `comm`.
    pub(crate) fn start(
        comm: Arc<Comm>,
        compression: Compression,
        average: bool,
    ) -> Result<Worker, CompressError> {
        let (tx, jobs) = channel::<Job>();
        let (done, rx) = channel::<Done>();
        let thread = std::thread::Builder::new()
            .name(format!("hccl-reducer-{}", comm.rank()))
            .spawn(move || run(&comm, &compression, average, &jobs, &done))
            .map_err(|e| CompressError::Usage(format!("cannot start the reducer thread: {e}")))?;
        Ok(Worker {
            tx: Some(tx),
            rx,
            thread: Some(thread),
        })
    }

    /// Queues `job`.
    pub(crate) fn send(&self, job: Job) -> Result<(), CompressError> {
        self.tx
            .as_ref()
            .and_then(|t| t.send(job).ok())
            .ok_or_else(|| CompressError::Usage("the reducer thread has stopped".into()))
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the queued exchanges.
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(
    comm: &Comm,
    compression: &Compression,
    average: bool,
    jobs: &Receiver<Job>,
    done: &Sender<Done>,
) {
    let mut feedback: Vec<ErrorFeedback> = Vec::new();
    let world = comm.size() as f32;
    for job in jobs {
        match job {
            Job::Exchange {
                set,
                bucket,
                mut buf,
            } => {
                if feedback.len() <= bucket {
                    feedback.resize_with(bucket + 1, ErrorFeedback::new);
                }
                let t = Instant::now();
                let result = compression.all_reduce(comm, &mut buf, &mut feedback[bucket]);
                if result.is_ok() && average {
                    buf.iter_mut().for_each(|x| *x /= world);
                }
                let d = Done {
                    set,
                    bucket,
                    buf,
                    result,
                    took: t.elapsed(),
                };
                if done.send(d).is_err() {
                    return;
                }
            }
            Job::Remap { old, new } => feedback = remap(&feedback, &old, &new),
        }
    }
}

/// The error feedback laid out for `new` (a parameter's residual keeps its values).
fn remap(fb: &[ErrorFeedback], old: &Plan, new: &Plan) -> Vec<ErrorFeedback> {
    let mut out: Vec<ErrorFeedback> = new.lens.iter().map(|_| ErrorFeedback::new()).collect();
    for (o, n) in old.slots.iter().zip(&new.slots) {
        let Some(f) = fb.get(o.bucket) else { continue };
        let dst = &mut out[n.bucket];
        for (from, to) in [
            (&f.residual, &mut dst.residual),
            (&f.momentum, &mut dst.momentum),
        ] {
            if from.is_empty() {
                continue;
            }
            if to.is_empty() {
                *to = vec![0.0; new.lens[n.bucket]];
            }
            to[n.offset..n.offset + n.len].copy_from_slice(&from[o.offset..o.offset + o.len]);
        }
    }
    out
}
