"""Shared helpers of the hccl_rs tests: launching ranks as processes the way
torchrun does (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and
the rule that a missing dependency fails in CI (CI=true) and skips locally."""

import os
import random
import socket
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def need(module):
    """Imports `module`; skips the test (with the reason) if it is missing,
    or fails it when CI=true: CI installs it, so a skip there would hide a
    broken setup."""
    try:
        return __import__(module)
    except ImportError as e:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{module} is missing under CI=true (.ci/run installs it): {e}")
        pytest.skip(f"{module} is not installed: {e}")


def free_port():
    """A free TCP port on 127.0.0.1 below Linux's ephemeral range (20000-31999),
    so another process's connection does not take it before rank 0 binds it."""
    for _ in range(200):
        port = random.randint(20000, 31999)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 20000-31999")


def launch(case, n, *args, init="env", timeout=120, env=None, expect_fail=(), rank_var="RANK", script="ranks.py"):
    """Runs `python tests/SCRIPT CASE ARGS` (SCRIPT: ranks.py) as `n` ranks, torchrun-style
    (init="env": env:// variables; init="tcp": tcp://127.0.0.1:PORT passed as
    an argument, no MASTER_* set). Returns each rank's stdout; ranks listed in
    `expect_fail` must exit non-zero, the others zero. `rank_var` names the
    rank's variable (RANK_ID: Ascend's)."""
    port = free_port()
    procs = []
    for r in range(n):
        e = dict(os.environ)
        e.update(env or {})
        e.update({"WORLD_SIZE": str(n), "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": str(n)})
        e["HCCL_IF_IP"] = "127.0.0.1"
        e.setdefault("HCCL_EXEC_TIMEOUT", "60")
        if init == "env":
            e.pop("RANK", None)
            e.update({rank_var: str(r), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
            extra = []
        else:
            for k in ("RANK", "MASTER_ADDR", "MASTER_PORT"):
                e.pop(k, None)
            extra = [f"--init=tcp://127.0.0.1:{port}", f"--rank={r}"]
        cmd = [sys.executable, os.path.join(HERE, script), case, *map(str, args), *extra]
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = []
    for r, p in enumerate(procs):
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, err = p.communicate()
            raise AssertionError(f"rank {r} of {case} did not finish in {timeout} s:\n{err[-3000:]}")
        ok = (p.returncode != 0) if r in expect_fail else (p.returncode == 0)
        assert ok, f"rank {r} of {case} exited {p.returncode}:\n{out[-2000:]}\n{err[-4000:]}"
        outs.append(out)
    return outs
