"""``hccl_rs.Reducer`` wired into a model's backward, for a plain training
loop (no DistributedDataParallel)::

    comm = hccl_rs.Comm.from_env()
    red = ModelReducer(comm, model.parameters(), compression=hccl_rs.TopK(0.01))
    for x, y in data:
        opt.zero_grad()
        loss_fn(model(x), y).backward()   # buckets are reduced while backward runs
        stats = red.synchronize()         # waits; p.grad = the reduced gradient
        opt.step()

Each parameter's autograd hook copies its gradient into the reducer's
bucket as soon as backward has computed it; a full bucket is reduced on the
reducer's thread (in bucket order, the same on every rank) while backward
goes on with the layers before it. ``synchronize()`` waits for the rest and
writes the reduced (averaged) gradients into ``p.grad``. Parameters are
float32 CPU tensors; the reducer runs on a communicator split from `comm`.
"""

import torch

from ._native import Reducer

__all__ = ["ModelReducer"]


class ModelReducer:
    """A ``hccl_rs.Reducer`` over `parameters` (those that require a
    gradient, in order), fed by autograd hooks. Keyword arguments are the
    Reducer's (compression, first_bucket_bytes, bucket_cap_bytes, average,
    rebuild). Collective: every rank builds it with the same model."""

    def __init__(self, comm, parameters, **reducer_kw):
        self.params = [p for p in parameters if p.requires_grad]
        for i, p in enumerate(self.params):
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise TypeError(f"ModelReducer: parameter {i} is {p.dtype} on {p.device}; the reducer takes float32 CPU parameters")
        self.reducer = Reducer(comm, [p.numel() for p in self.params], **reducer_kw)
        self._handles = [p.register_hook(self._hook(i)) for i, p in enumerate(self.params)]

    def _hook(self, i):
        def push(grad):
            self.reducer.push(i, grad.detach().contiguous())

        return push

    def synchronize(self):
        """Waits for this step's buckets and writes each reduced gradient
        into its parameter's ``.grad``; returns the step's stats
        (``Reducer.finish``)."""
        stats = self.reducer.finish()
        for i, p in enumerate(self.params):
            if p.grad is None or not p.grad.is_contiguous():
                p.grad = torch.empty_like(p, memory_format=torch.contiguous_format)
            self.reducer.grad(i, p.grad)
        return stats

    def close(self):
        """Removes the hooks and stops the reducer."""
        for h in self._handles:
            h.remove()
        self._handles = []
        self.reducer.close()
