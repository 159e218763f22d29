#!/usr/bin/env bash
# fp32 sum dist.all_reduce on CPU tensors, 8 KiB .. 64 MiB, 2 and 4 processes
# on this host: torch.distributed with the hccl_rs backend vs Gloo, beside
# `hccl test --transport tcp` (the same Rust collectives without Python) at
# the same sizes; then DDP training steps per second, hccl_rs vs Gloo.
# Prints busbw (GB/s, G = 10^9) and time (us) per size, library and process
# count, and per run the ratios hccl_rs/gloo and hccl_rs/hccl-test.
#
#   bash bench/compare_torch.sh [MIN_BYTES] [MAX_BYTES] [NPROCS...]
#
# Needs a Python with torch and a release build of hccl_rs:
#   (cd python && maturin develop --release)     # into the active venv
# PYTHON=path picks the interpreter (default: target/pyvenv/bin/python, the
# venv .ci/run makes, if present, else python3).
# REPEAT=k (default 3): runs per library, interleaved (hccl_rs, Gloo, hccl
# test, hccl_rs, ...); the table shows the median run. DDP_STEPS=s (default
# 300): steps per DDP run of the small model (s/10 of the MLP); DDP=0 skips
# DDP; DDP_MODELS="small" runs only that one. LAYERS=0 skips the last table
# (bench/torch_layers.py: dist.all_reduce against the same processes' Comm,
# interleaved; LAYERS_ROUNDS=r rounds, default 15). RUN_TIMEOUT=s (default 600):
# a torch run still going after s seconds is ended and its figures left
# out (a Gloo MLP DDP run hung 24 minutes with one rank gone, Gloo's own
# timeout being 30 minutes, and held the whole benchmark). BENCH_HUGEPAGES=0: 4 KiB pages everywhere (default: numpy's rule,
# huge pages from 4 MiB, in the torch scripts; `hccl test` allocates with
# Vec, on 4 KiB pages unless THP is "always").
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-8192}
MAX=${2:-67108864}
shift $(( $# > 2 ? 2 : $# )) || true
NPROCS=("${@:-2 4}")
[ ${#NPROCS[@]} -eq 1 ] && read -r -a NPROCS <<< "${NPROCS[0]}"
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${PYTHON:-}" ]; then
  PYTHON=python3
  [ -x "$TARGET/pyvenv/bin/python" ] && PYTHON="$TARGET/pyvenv/bin/python"
fi
PY=$PYTHON
"$PY" -c "import torch, numpy, hccl_rs" || {
  echo "$PY lacks torch, numpy or hccl_rs: (cd python && maturin develop --release) in a venv with torch" >&2
  exit 1
}
REPEAT=${REPEAT:-3}
DDP_STEPS=${DDP_STEPS:-300}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# HCCL_BIN=path: an hccl binary built already (default: build one).
HCCL=${HCCL_BIN:-}
if [ -z "$HCCL" ]; then
  echo "building hccl (release)" >&2
  cargo build --release -q -p hccl-cli --bin hccl
  HCCL="$TARGET/release/hccl"
fi

# A free port for torch's store, in --spawn's range (20000-31999, below
# Linux's ephemeral ports), as python/tests/conftest.py picks them.
port() {
  "$PY" -c 'import random, socket
for _ in range(200):
    p = random.randint(20000, 31999)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()'
}

# torch N SCRIPT ARGS...: SCRIPT as N ranks (env://); rank 0's stdout.
torch_ranks() {
  local n=$1 p pids=() r
  shift
  p=$(port)
  for r in $(seq 0 $((n - 1))); do
    MASTER_ADDR=127.0.0.1 MASTER_PORT=$p RANK=$r WORLD_SIZE=$n GLOO_SOCKET_IFNAME=lo HCCL_IF_IP=127.0.0.1 \
      timeout "${RUN_TIMEOUT:-600}" "$PY" "$@" > "$OUT/rank.$r" 2>"$OUT/rank.$r.err" &
    pids+=($!)
  done
  wait "${pids[@]}" || { echo "a rank of $* failed:" >&2; cat "$OUT"/rank.*.err >&2; }
  cat "$OUT/rank.0"
}

# hccl test, one size per run, with torch_allreduce.py's iteration rule
# (256 MiB / size ops, 5..2000, a tenth as many warm-ups, at least 3).
hccl_test() {
  local n=$1 size=$MIN iters
  while [ "$size" -le "$MAX" ]; do
    iters=$(( (256 << 20) / size )); iters=$(( iters < 5 ? 5 : iters > 2000 ? 2000 : iters ))
    HCCL_IF_IP=127.0.0.1 "$HCCL" test all_reduce -b "$size" -e "$size" -n "$iters" -w $(( iters / 10 < 3 ? 3 : iters / 10 )) \
      -c 0 --transport tcp --spawn "$n" | awk '$1 ~ /^[0-9]+$/ && NF >= 8 {print $1, $6, 0, $8}'
    size=$(( size * 2 ))
  done
}

for rep in $(seq 1 "$REPEAT"); do
  for n in "${NPROCS[@]}"; do
    echo "run $rep of $REPEAT, $n processes: hccl_rs, gloo, hccl test" >&2
    torch_ranks "$n" bench/torch_allreduce.py "$MIN" "$MAX" hccl_rs > "$OUT/hccl_rs.$n.$rep"
    torch_ranks "$n" bench/torch_allreduce.py "$MIN" "$MAX" gloo > "$OUT/gloo.$n.$rep"
    hccl_test "$n" > "$OUT/hccltest.$n.$rep"
    if [ "${DDP:-1}" != 0 ]; then
      for model in ${DDP_MODELS:-small mlp}; do
        steps=$DDP_STEPS
        [ "$model" = mlp ] && steps=$(( DDP_STEPS / 10 ))
        for b in hccl_rs gloo; do
          torch_ranks "$n" bench/ddp_steps.py "$b" "$model" "$steps" > "$OUT/ddp.$b.$model.$n.$rep"
        done
      done
    fi
  done
done

"$PY" - "$OUT" "$REPEAT" "${NPROCS[@]}" <<'PY'
import sys
out, reps, nprocs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def rows(path):
    try:
        return [l.split() for l in open(path) if l.strip()]
    except OSError:
        return []
def runs(lib, n):
    """size -> [(time_us, busbw)] per run, None where a run lacks the size."""
    by = {}
    for rep in range(1, reps + 1):
        for r in rows(f"{out}/{lib}.{n}.{rep}"):
            by.setdefault(int(r[0]), [None] * reps)[rep - 1] = (float(r[1]), float(r[3]))
    return by
def median(xs):
    xs = sorted(x for x in xs if x)
    return xs[(len(xs) - 1) // 2] if xs else None
def ratios(a, b):
    return " ".join(f"{x[1] / y[1]:5.2f}" if x and y and y[1] > 0 else "    -" for x, y in zip(a, b))
libs = ["hccl_rs", "gloo", "hccltest"]
print(f"{'procs':<5} {'bytes':>10} | {'torch+hccl_rs busbw/us':<22} | {'torch+gloo busbw/us':<22} | {'hccl test tcp busbw/us':<22} | hccl_rs/gloo per run | hccl_rs/hccl test per run")
for n in nprocs:
    data = {lib: runs(lib, n) for lib in libs}
    for size in sorted(set().union(*data.values())):
        cells = []
        for lib in libs:
            m = median(data[lib].get(size, []))
            cells.append(f"{m[1]:8.3f} GB/s {m[0]:9.1f}" if m else "")
        h, g, t = (data[lib].get(size, [None] * reps) for lib in libs)
        print(f"{n:<5} {size:>10} | {cells[0]:<22} | {cells[1]:<22} | {cells[2]:<22} | {ratios(h, g)} | {ratios(h, t)}")
ddp = []
for n in nprocs:
    for model in ("small", "mlp"):  # the ones run (DDP_MODELS) have files
        got = {}
        for b in ("hccl_rs", "gloo"):
            got[b] = [float(r[3]) if r else None for r in (next(iter(rows(f"{out}/ddp.{b}.{model}.{n}.{rep}")), None) for rep in range(1, reps + 1))]
        if any(got["hccl_rs"]):
            ddp.append((n, model, got))
if ddp:
    print()
    print(f"{'procs':<5} {'model':<6} | {'hccl_rs steps/s':>15} | {'gloo steps/s':>12} | hccl_rs/gloo per run")
    for n, model, got in ddp:
        med = {b: median([(v, v) for v in vs if v]) for b, vs in got.items()}
        rs = " ".join(f"{a / b:5.2f}" if a and b else "    -" for a, b in zip(got["hccl_rs"], got["gloo"]))
        cell = lambda m: f"{m[0]:.1f}" if m else "-"
        print(f"{n:<5} {model:<6} | {cell(med['hccl_rs']):>15} | {cell(med['gloo']):>12} | {rs}")
PY

# The layers alone, in the same processes (bench/torch_layers.py): separate
# runs of hccl test and of torch differ by more, minute to minute, than the
# layers cost. From 1 MiB (or MIN) to MAX; LAYERS=0 skips it.
if [ "${LAYERS:-1}" != 0 ]; then
  lo=$(( MIN > 1048576 ? MIN : 1048576 ))
  if [ "$lo" -le "$MAX" ]; then
    echo
    echo "dist.all_reduce vs the group's Comm.all_reduce (hccl test's collective), same processes, interleaved:"
    for n in "${NPROCS[@]}"; do
      torch_ranks "$n" bench/torch_layers.py "${LAYERS_ROUNDS:-15}" "$lo" "$MAX" | { [ "$n" = "${NPROCS[0]}" ] && cat || tail -n +2; }
    done
  fi
fi
