#!/usr/bin/env bash
# fp32 sum AllReduce, 8 KiB .. 64 MiB, 2 and 4 processes on this host:
# hccl-rs TCP vs torch.distributed Gloo vs Open MPI (mpi4py). Prints one table
# of busbw (GB/s, G = 10^9) and time (us) per size, library and process count.
#
#   bash bench/compare_tcp.sh [MIN_BYTES] [MAX_BYTES] [NPROCS...]
#
# Installs Debian's python3-torch, openmpi-bin and python3-mpi4py if missing
# (apt-get update first). Set SKIP_INSTALL=1 to skip libraries that are absent.
set -euo pipefail
cd "$(dirname "$0")/.."
MIN=${1:-8192}
MAX=${2:-67108864}
shift $(( $# > 2 ? 2 : $# )) || true
NPROCS=("${@:-2 4}")
[ ${#NPROCS[@]} -eq 1 ] && read -r -a NPROCS <<< "${NPROCS[0]}"
# Debian's interpreter: the apt packages install into its dist-packages.
PY=${PYTHON:-/usr/bin/python3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

if [ -z "${SKIP_INSTALL:-}" ]; then
  need=()
  "$PY" -c "import torch" 2>/dev/null || need+=(python3-torch)
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

for n in "${NPROCS[@]}"; do
  echo "hccl-rs, $n processes" >&2
  HCCL_IF_IP=127.0.0.1 "$HCCL_BENCH" "$n" "$MIN" "$MAX" | awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $3, $4, $5}' > "$OUT/hccl.$n"
  if "$PY" -c "import torch" 2>/dev/null; then
    echo "gloo, $n processes" >&2
    port=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    pids=()
    for r in $(seq 0 $((n - 1))); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n GLOO_SOCKET_IFNAME=lo \
        "$PY" bench/gloo_allreduce.py "$MIN" "$MAX" > "$OUT/gloo.$n.$r" 2>/dev/null &
      pids+=($!)
    done
    wait "${pids[@]}" || true
    cp "$OUT/gloo.$n.0" "$OUT/gloo.$n"
  fi
  if command -v mpirun >/dev/null && "$PY" -c "import mpi4py" 2>/dev/null; then
    echo "open mpi, $n processes" >&2
    mpirun --allow-run-as-root --oversubscribe -n "$n" "$PY" bench/mpi_allreduce.py "$MIN" "$MAX" > "$OUT/mpi.$n" 2>/dev/null || true
  fi
done

printf '%-5s %10s | %-22s | %-22s | %-22s\n' "procs" "bytes" "hccl-rs tcp busbw/us" "gloo busbw/us" "open mpi busbw/us"
for n in "${NPROCS[@]}"; do
  size=$MIN
  while [ "$size" -le "$MAX" ]; do
    cell() { awk -v s="$size" '$1 == s {printf "%8.3f GB/s %9.1f", $4, $2}' "$OUT/$1.$n" 2>/dev/null || true; }
    printf '%-5s %10s | %-22s | %-22s | %-22s\n' "$n" "$size" "$(cell hccl)" "$(cell gloo)" "$(cell mpi)"
    size=$((size * 2))
  done
done
