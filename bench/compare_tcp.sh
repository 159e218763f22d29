#!/usr/bin/env bash
# fp32 sum AllReduce, 8 KiB .. 64 MiB, 2 and 4 processes on this host:
# hccl-rs TCP vs torch.distributed Gloo vs Open MPI (mpi4py). Prints one table
# of busbw (GB/s, G = 10^9) and time (us) per size, library and process count.
#
#   bash bench/compare_tcp.sh [MIN_BYTES] [MAX_BYTES] [NPROCS...]
#
# Installs Debian's python3-torch, openmpi-bin and python3-mpi4py if missing
# (apt-get update first). Set SKIP_INSTALL=1 to skip libraries that are absent.
# REPEAT=k (default 3): runs per library; the table shows the median.
# SHM_AB=1: hccl-rs runs a second time per round with HCCL_SHM_DISABLE=1
# (same-host frames on the socket instead of the shared-memory rings), in
# its own column.
# BENCH_HUGEPAGES=0: all three keep their buffers on 4 KiB pages (default:
# transparent huge pages from 4 MiB, numpy's rule; see tcp_allreduce_bench).
# LIBS="hccl mpi" (default "hccl gloo mpi"): run only these libraries, e.g.
#   LIBS="hccl mpi" SKIP_INSTALL=1 REPEAT=5 bash bench/compare_tcp.sh 32768 1048576 4
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-8192}
MAX=${2:-67108864}
shift $(( $# > 2 ? 2 : $# )) || true
NPROCS=("${@:-2 4}")
[ ${#NPROCS[@]} -eq 1 ] && read -r -a NPROCS <<< "${NPROCS[0]}"
# Debian's interpreter: the apt packages install into its dist-packages.
PY=${PYTHON:-/usr/bin/python3}
LIBS=" ${LIBS:-hccl gloo mpi} "
for l in $LIBS; do
  case $l in hccl | gloo | mpi) ;; *) echo "LIBS: unknown library '$l' (hccl, gloo, mpi)" >&2; exit 2 ;; esac
done
want() { [[ $LIBS == *" $1 "* ]]; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

if [ -z "${SKIP_INSTALL:-}" ]; then
  need=()
  want gloo && ! "$PY" -c "import torch" 2>/dev/null && need+=(python3-torch)
  command -v mpirun >/dev/null || need+=(openmpi-bin)
  "$PY" -c "import mpi4py" 2>/dev/null || need+=(python3-mpi4py)
  "$PY" -c "import numpy" 2>/dev/null || need+=(python3-numpy)
  if [ ${#need[@]} -gt 0 ]; then
    echo "installing ${need[*]}" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  fi
fi

echo "building the hccl-rs benchmark (release)" >&2
cargo build --release -q -p hccl-hw --example tcp_allreduce_bench
TARGET=${CARGO_TARGET_DIR:-target}
HCCL_BENCH="$TARGET/release/examples/tcp_allreduce_bench"

# Each library runs REPEAT times, interleaved (hccl-rs, Gloo, Open MPI,
# hccl-rs, ...) so that drift in the machine's speed hits all three alike;
# the table gives the median run per size. On a shared 2-core VM single
# runs of one size differ by up to 30%.
REPEAT=${REPEAT:-3}
for rep in $(seq 1 "$REPEAT"); do
for n in "${NPROCS[@]}"; do
  if want hccl; then
  echo "run $rep of $REPEAT: hccl-rs, $n processes" >&2
  HCCL_IF_IP=127.0.0.1 "$HCCL_BENCH" "$n" "$MIN" "$MAX" | awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3, $4, $5}' > "$OUT/hccl.$n.$rep"
  fi
  if want hccl && [ -n "${SHM_AB:-}" ]; then
    echo "run $rep of $REPEAT: hccl-rs with HCCL_SHM_DISABLE=1, $n processes" >&2
    HCCL_SHM_DISABLE=1 HCCL_IF_IP=127.0.0.1 "$HCCL_BENCH" "$n" "$MIN" "$MAX" | awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3, $4, $5}' > "$OUT/noshm.$n.$rep"
  fi
  if want gloo && "$PY" -c "import torch" 2>/dev/null; then
    echo "run $rep of $REPEAT: gloo, $n processes" >&2
    port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    pids=()
    for r in $(seq 0 $((n - 1))); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n GLOO_SOCKET_IFNAME=lo \
        "$PY" bench/torch_allreduce.py "$MIN" "$MAX" gloo > "$OUT/gloo.$n.$rep.$r" 2>/dev/null &
      pids+=($!)
    done
    wait "${pids[@]}" || true
    cp "$OUT/gloo.$n.$rep.0" "$OUT/gloo.$n.$rep"
  fi
  if want mpi && command -v mpirun >/dev/null && "$PY" -c "import mpi4py" 2>/dev/null; then
    echo "run $rep of $REPEAT: open mpi, $n processes" >&2
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$PY" bench/mpi_allreduce.py "$MIN" "$MAX" > "$OUT/mpi.$n.$rep" 2>/dev/null || true
  fi
done
done

# One row per process count and size: each library's median run (by time),
# then hccl-rs's busbw over Open MPI's in every run (same run number).
SHM_AB=${SHM_AB:-} "$PY" - "$OUT" "$REPEAT" "${NPROCS[@]}" <<'PY'
import os, statistics, sys
out, reps, nprocs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def runs(lib, n):
    """size -> [(time_us, busbw)] per run, None where a run lacks the size."""
    by = {}
    for rep in range(1, reps + 1):
        try:
            rows = [l.split() for l in open(f"{out}/{lib}.{n}.{rep}")]
        except OSError:
            rows = []
        for r in rows:
            by.setdefault(int(r[0]), [None] * reps)[rep - 1] = (float(r[1]), float(r[3]))
    return by
def median(xs):
    xs = sorted(x for x in xs if x)
    return xs[(len(xs) - 1) // 2] if xs else None
libs = ["hccl", "gloo", "mpi"]
names = ["hccl-rs tcp busbw/us", "gloo busbw/us", "open mpi busbw/us"]
if os.environ.get("SHM_AB"):
    libs.append("noshm")
    names.append("hccl-rs no shm busbw/us")
head = " | ".join(f"{n:<22}" for n in names)
print(f"{'procs':<5} {'bytes':>10} | {head} | hccl-rs/open mpi per run")
for n in nprocs:
    data = {lib: runs(lib, n) for lib in libs}
    for size in sorted(data["hccl"]):
        cells = []
        for lib in libs:
            m = median(data[lib].get(size, []))
            cells.append(f"{m[1]:8.3f} GB/s {m[0]:9.1f}" if m else "")
        h, o = data["hccl"][size], data["mpi"].get(size, [None] * reps)
        ratios = " ".join(f"{a[1] / b[1]:5.2f}" if a and b and b[1] > 0 else "    -" for a, b in zip(h, o))
        row = " | ".join(f"{c:<22}" for c in cells)
        print(f"{n:<5} {size:>10} | {row} | {ratios}")
PY
