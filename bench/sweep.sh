#!/usr/bin/env bash
# Simulated hccl_test sweeps on Atlas 800T A2 clusters (1x8, 2x8, 16x8 NPUs),
# every algorithm per collective: writes bench/a2_*.json, bench/a2_*.svg and
# bench/README.md. One command, from anywhere:  bash bench/sweep.sh
#
# Sizes 4K..64M (x4 steps); -n 1 -w 0 because simulated times are
# deterministic (warmups change nothing). 1x8 runs in data mode, so every row
# is also checked against the reference; the larger clusters run timing-only.
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
target="${CARGO_TARGET_DIR:-$root/target}"
cargo build --release --bin hccl
hccl="$target/release/hccl"
out="$root/bench"

collectives=(all_reduce all_gather reduce_scatter alltoall broadcast)
clusters=("1 data" "2 timing" "16 timing")

tables="$(mktemp)"
summary="$(mktemp)"
trap 'rm -f "$tables" "$summary"' EXIT

start=$(date +%s)
for c in "${clusters[@]}"; do
  read -r servers mode <<<"$c"
  name="a2_${servers}x8"
  {
    echo
    echo "## ${servers} x 8 NPUs ($((servers * 8)) ranks), ${mode} mode"
  } >>"$tables"
  for coll in "${collectives[@]}"; do
    base="${name}_${coll}"
    echo "== $base" >&2
    "$hccl" test "$coll" -b 4K -e 64M -f 4 -n 1 -w 0 --servers "$servers" \
      --mode "$mode" --algo all --json "$out/$base.json" --plot "$out/$base.svg" \
      >"$out/$base.txt"
    {
      echo
      echo "### ${coll}, ${servers} x 8"
      echo
      echo "![busbw vs size: ${coll} on ${servers} x 8](${base}.svg)"
      echo
      echo '```'
      grep -v '^# json\|^# plot' "$out/$base.txt"
      echo '```'
    } >>"$tables"
    # Best busbw at 64 MiB (the largest size) and its algorithm.
    awk -v s="$servers" -v c="$coll" '
      $1 == 67108864 && $8 + 0 > best { best = $8 + 0; algo = $9; t = $6 }
      END { printf "| %s x 8 | %s | %s | %.1f | %.2f |\n", s, c, algo, t, best }
    ' "$out/$base.txt" >>"$summary"
    rm -f "$out/$base.txt"
  done
done
elapsed=$(( $(date +%s) - start ))

# Calibration: CANN's published hccl_test example (8 NPUs, fp32 sum
# AllReduce, 8K..64M) next to the simulator, row by row. See the section
# text below for the source and the method.
published="8192 764.55
16384 858.80
32768 901.10
65536 900.00
131072 928.50
262144 1573.45
524288 1831.25
1048576 1778.30
2097152 1763.30
4194304 1801.75
8388608 1767.65
16777216 1940.90
33554432 1714.85
67108864 2630.20"
sim_col() { # $1 = --algo value; prints "bytes time_us" rows
  "$hccl" test all_reduce -b 8K -e 64M -f 2 -d fp32 -o sum -p 8 -c 0 --mode timing --algo "$1" |
    awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $1, $6}'
}
default_algo="$("$hccl" test all_reduce -b 64M -e 64M -d fp32 -o sum -p 8 | awk '$1 == 67108864 {print $9}')"
calib="$(mktemp)"
paste -d' ' <(echo "$published") <(sim_col mesh) <(sim_col ring) >"$calib"
# Per algorithm: overhead = mean(published - simulated) over 256K..32M (the
# rows in the plateau, 64M held out), then the 64M prediction.
fit() { # $1 = column of the simulated time (4 mesh, 6 ring)
  awk -v c="$1" '$1 >= 262144 && $1 <= 33554432 { s += $2 - $c; n++ }
    $1 == 67108864 { last = $c }
    END { o = s / n; printf "%.1f %.2f %.2f %+.1f\n", o, last, o + last, (o + last - 2630.2) / 2630.2 * 100 }' "$calib"
}
read -r mesh_o mesh_64 mesh_pred mesh_pct <<<"$(fit 4)"
read -r ring_o ring_64 ring_pred ring_pct <<<"$(fit 6)"
mesh_raw_pct="$(awk -v s="$mesh_64" 'BEGIN { printf "%+.1f", (s - 2630.2) / 2630.2 * 100 }')"
ring_raw_pct="$(awk -v s="$ring_64" 'BEGIN { printf "%+.1f", (s - 2630.2) / 2630.2 * 100 }')"
calib_rows="$(awk -v mo="$mesh_o" -v ro="$ring_o" '{
    printf "| %s | %.2f | %.2f | %.2f | %.2f | %.2f |\n", $1, $2, $4, $6, $4 + mo, $6 + ro }' "$calib")"
read -r mesh_8k mesh_inc ring_inc pub_inc <<<"$(awk '
    $1 == 8192 { m8 = $4 }
    $1 >= 262144 && $1 <= 33554432 { s += $2; n++ }
    $1 == 33554432 { m32 = $4; r32 = $6 }
    $1 == 67108864 { printf "%.2f %.0f %.0f %.0f\n", m8, $4 - m32, $6 - r32, $2 - s / n }' "$calib")"
rm -f "$calib"
a910="$("$hccl" test all_reduce -b 64M -e 64M -d fp32 -o sum -c 0 --preset atlas800-910a |
  awk '$1 == 67108864 {print $6 " us (" $9 ", the selector'"'"'s choice)"}')"

# Predictions against the published rows with the presets as they are (no
# parameter fitted): the selector's choice on atlas800t-a2, the same with
# msmodeling's 10 us per comm op (sources::COMM_OP_COST_NS), and the 910A
# preset. Columns: bytes published a2 a2+10us 910a (us) and the algorithms.
pred_col() { # $@ = extra hccl test flags; prints "time_us algorithm" rows
  "$hccl" test all_reduce -b 8K -e 64M -f 2 -d fp32 -o sum -p 8 -c 0 --mode timing "$@" |
    awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $6, $9}'
}
pred="$(mktemp)"
paste -d' ' <(echo "$published") <(pred_col) <(pred_col --op-overhead 10) \
  <(pred_col --preset atlas800-910a) >"$pred"
# fields: 1 bytes, 2 published, 3 a2, 4 algo, 5 a2+10us, 6 algo, 7 910a, 8 algo
pred_rows="$(awk '
  function e(p, m) { return sprintf("%+.1f%%", (p - m) / m * 100) }
  { printf "| CANN hccl_test example | not named, 8 NPUs | all_reduce fp32 sum, 8 ranks | %s | %.2f | %.2f (%s) | %s | %.2f | %s | %.2f (%s) | %s |\n",
      $1, $2, $3, $4, e($3, $2), $5, e($5, $2), $7, $8, e($7, $2) }' "$pred")"
pred_med="$(awk '
  function a(x) { return x < 0 ? -x : x }
  { x[NR] = a($3 - $2) / $2 * 100; y[NR] = a($5 - $2) / $2 * 100; z[NR] = a($7 - $2) / $2 * 100 }
  function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  END { printf "%.1f %.1f %.1f", med(x, NR), med(y, NR), med(z, NR) }' "$pred")"
read -r med_a2 med_a2op med_910a <<<"$pred_med"
pred_64="$(awk '$1 == 67108864 { printf "%.2f %s %+.1f", $3, $4, ($3 - $2) / $2 * 100 }' "$pred")"
read -r a2_64 a2_64_algo a2_64_pct <<<"$pred_64"
rm -f "$pred"

# torch.distributed over HCCL on one 910B server (gameofdimension/limulidae
# README: one algbw figure per NPU count, tensor bytes / mean time, sizes
# 0.1 MB..8 GB): "npus op published_GBps" rows, compared at 8 GB, the
# largest size, where the simulated algbw is highest.
limulidae="2 all_reduce 18
4 all_reduce 30
8 all_reduce 72
2 all_gather 38
4 all_gather 64
8 all_gather 149"
# The same server with msmodeling's comm_efficiency 0.7 on every HCCS link
# (0.7 x sources::A2_HCCS_GBPS = 19.6 GB/s): a fabric file, one server.
eff_fabric() { # $1 = NPUs; prints the fabric JSON
  awk -v n="$1" 'BEGIN {
    printf "{\"name\": \"%d x 910B, HCCS at 0.7 x 28 GB/s\", \"nodes\": [", n
    for (i = 0; i < n; i++) printf "%s{\"name\": \"npu%d\", \"kind\": \"npu\", \"rank\": %d, \"server\": 0}", i ? ", " : "", i, i
    printf "], \"links\": ["; k = 0
    for (i = 0; i < n; i++) for (j = i + 1; j < n; j++)
      printf "%s{\"a\": \"npu%d\", \"b\": \"npu%d\", \"class\": \"hccs\", \"bandwidth_gbps\": 19.6, \"latency_ns\": 300}", k++ ? ", " : "", i, j
    print "]}" }'
}
eff="$(mktemp)"
lim_rows="$(while read -r n op pub; do
  a2="$("$hccl" test "$op" -b 8000000000 -e 8000000000 -p "$n" -d fp32 -o sum -c 0 --mode timing |
    awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $7, $9}')"
  eff_fabric "$n" >"$eff"
  e7="$("$hccl" test "$op" -b 8000000000 -e 8000000000 -d fp32 -o sum -c 0 --mode timing --fabric "$eff" |
    awk '!/^#/ && $1 ~ /^[0-9]+$/ {print $7, $9}')"
  echo "$n $op $pub $a2 $e7"
done <<<"$limulidae" | awk '
  function e(p, m) { return sprintf("%+.1f%%", (p - m) / m * 100) }
  { printf "| limulidae (torch.distributed, HCCL) | 910B, 1 server | %s fp32, %d ranks | 8e9 (largest) | %d | %.1f (%s) | %s | %.1f (%s) | %s |\n",
      $2, $1, $3, $4, $5, e($4, $3), $6, $7, e($6, $3) }')"
rm -f "$eff"
lim_med="$(echo "$lim_rows" | awk -F'|' '
  function a(x) { x += 0; return x < 0 ? -x : x }
  function med(v, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
    return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2 }
  { x[NR] = a($8); y[NR] = a($10) }
  END { printf "%.1f %.1f", med(x, NR), med(y, NR) }')"
read -r lim_med_a2 lim_med_eff <<<"$lim_med"

{
  cat <<EOF
# Simulated hccl_test sweeps on Atlas 800T A2

Generated by \`bash bench/sweep.sh\` (release build; the sweeps took ${elapsed} s
of wall time on the shared 2-core development machine). Every time below is
**simulated** by hccl-sim (alpha-beta-gamma model, max-min fair flows on the
preset's links: HCCS full mesh inside a server, one 200 GbE RoCE port per NPU
to a leaf switch between servers; parameters and their sources in
\`topology/src/presets.rs\`). Nothing here was measured on NPUs.

Flags: \`hccl test COLL -b 4K -e 64M -f 4 -n 1 -w 0 --servers N --algo all\`.
busbw uses nccl-tests' factors (AllReduce 2(n-1)/n; AllGather, ReduceScatter,
AllToAll (n-1)/n; Broadcast 1). The 1 x 8 runs are in data mode: every row's
output was compared element by element with the sequential reference
(\`check\` column). The 2 x 8 and 16 x 8 runs are timing-only (\`NULL\`).

## Best algorithm at 64 MiB

| cluster | collective | algorithm | time (us) | busbw (GB/s) |
| --- | --- | --- | --- | --- |
EOF
  cat "$summary"
  cat <<EOF

## Calibration against CANN's hccl_test example

**Source.** CANN's HCCL Performance Tester documentation, "Result
Description" page
(<https://www.hiascend.com/document/detail/en/CANNCommunityEdition/latest/devaids/hccltool/HCCLpertest_16_0006.html>),
prints the output of \`mpirun -n 8 ./bin/all_reduce_test -b 8K -e 64M -f 2
-d fp32 -o sum -p 8\`: 14 rows, 64 MiB at 2630.2 us (alg_bandwidth 23.76,
which is 2^26 B / 2630.2 us in GiB/s). The page does not name the hardware.

**Headline.** For the same run the simulator predicts ${mesh_64} us with the
selector's choice (${default_algo}): **${mesh_raw_pct}%**; ring
(\`--algo ring\`) ${ring_64} us (${ring_raw_pct}%).

**Which parameter is wrong.** The published times hardly grow with size:
764-929 us from 8 KiB to 128 KiB, then 1573-1941 us from 256 KiB to 32 MiB
(16 MiB slower than 32 MiB), and only the 64 MiB row rises. A time that does
not grow with the bytes is a fixed cost per op, which no fabric parameter
(link bandwidth, alpha per message, gamma) can produce: our fabric model
takes ${mesh_8k} us for the 8 KiB mesh AllReduce. hccl_test's measured window
includes the host's launch and stream synchronisation of every op, and the
model had no term for it. That missing parameter is now
\`DeviceParams::op_overhead_ns\` (fabric file \`params.op_overhead_ns\`,
\`hccl test --op-overhead US\`): a fixed cost charged before the first step of
every op, counted in the op's time (\`sim/tests/closed_form.rs\`,
\`op_overhead_adds_once_per_op\`).

**Its value, from the same source.** Fitted to the page's own plateau rows
(256 KiB to 32 MiB: the least-squares constant, i.e. the mean of published
minus simulated), with the 64 MiB row held out of the fit and then predicted:

| algorithm | fitted overhead (us) | 64 MiB without (us) | 64 MiB with (us) | vs 2630.2 us |
| --- | --- | --- | --- | --- |
| mesh | ${mesh_o} | ${mesh_64} | ${mesh_pred} | **${mesh_pct}%** |
| ring | ${ring_o} | ${ring_64} | ${ring_pred} | **${ring_pct}%** |

Row by row (us; "+ fit" adds the fitted overhead of that algorithm):

| bytes | CANN example | sim mesh | sim ring | mesh + fit | ring + fit |
| --- | --- | --- | --- | --- | --- |
${calib_rows}

**How the fabric-only mesh figure is made up.** The mesh follows HCCL's
algorithm guide (\`Mesh.md\` in hicann/hccl: AllReduce = ReduceScatter +
AllGather, \`2α + 2/p·nβ + (p-1)/p·nγ\`): each rank exchanges its 8 MiB blocks
with all 7 peers at once, one HCCS link per peer, then reduces the 8
contributions locally in rank order. The simulator's closed form
(\`sim/tests/closed_form.rs\`) is 2(α + ⌈B/β⌉ + L) + 7⌈B/γ⌉ = 2(2000 +
299,594 + 300) + 7 x 15,729 ns = 713.9 us: 599.2 us HCCS transfer at 28 GB/s
per link, 110.1 us reduction (γ), 4.6 us α and hop latency.

**How close, and why not closer.** With the overhead, mesh lands
${mesh_pct}% from the held-out row and ring ${ring_pct}%. The ring's times
grow too fast for the published plateau (its rows above climb away from the
flat CANN column from 8 MiB on), so the example's shape is the mesh's, the
selector's choice. What is left is
bandwidth: the 64 MiB row lies ${pub_inc} us above the plateau's mean, while
going from 32 MiB to 64 MiB adds ${mesh_inc} us to the simulated mesh and
${ring_inc} us to the ring. The figures that
set this are 28 GB/s per HCCS link and direction (msprof's standard
bandwidth for the 910B and msmodeling's 196 GB/s per NPU over 7 peers), all 7
links of an NPU at full rate at once (msmodeling's full mesh), and gamma =
HBM/3 (derived); sources in \`topology/src/presets.rs\`. The plateau itself
scatters by +/-180 us between neighbouring rows, as much as the remaining
gap, so one published row cannot pin the bandwidth down. No link parameter
was fitted to this example: HCCS went from 56 to 28 GB/s because Huawei's
tools say 28, not to move these rows. The presets keep \`op_overhead_ns =
0\` because the overhead belongs to the host and software of that run, not
to the A2 fabric. To compare with your own hccl_test output, pass the flat
part of your small sizes as \`--op-overhead\`.

Two readings, for scale (not applied):
- msmodeling multiplies every link by \`comm_efficiency\` 0.7: at 19.6 GB/s
  per link the fabric-only mesh would take about 2(2 + 428.0 + 0.3) + 110.1
  = 970.7 us.
- The example may come from an Atlas 800 (910A: two HCCS groups of 4 joined
  over PCIe); \`--preset atlas800-910a\` predicts ${a910} there.

HCCS per link now has two Huawei sources that agree (msprof, msmodeling); we
found no public source for SDMA throughput or the 910B's reduce throughput
(searched Huawei's Atlas and CANN documentation, msprof, msprof-analyze,
msmodeling and HCCL's sources).

## Predictions against published measurements

Every published measurement of HCCL on 910A/910B with numbers that we found
(two sources),
next to the simulator's prediction with the presets as they are. **No
parameter was fitted to these rows** and no row informed a preset value: the
link figures come from msprof and msmodeling (\`topology/src/presets.rs\`);
the "+10 us" column adds msmodeling's fixed 10 us per comm op
(\`sources::COMM_OP_COST_NS\`, \`--op-overhead 10\`), also from the source,
not fitted. The only fitted number on this page is the calibration's
overhead above (fitted on rows 256 KiB–32 MiB of the same example); it is
not used here. Predictions: \`hccl test all_reduce -b 8K -e 64M -f 2 -d fp32
-o sum -p 8 -c 0\` with the selector's algorithm (in brackets), on
\`atlas800t-a2\` and \`--preset atlas800-910a\`; error = (predicted −
published) / published.

| source | hardware | op, ranks | bytes | published (us) | atlas800t-a2 (us) | error | + 10 us op cost (us) | error | atlas800-910a (us) | error |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
${pred_rows}

Source: CANN HCCL Performance Tester, "Result Description"
(<https://www.hiascend.com/document/detail/en/CANNCommunityEdition/latest/devaids/hccltool/HCCLpertest_16_0006.html>;
a text copy of the same example, in a public repository's hccl_test guide,
starts with "iters is 20, warmup_iters is 5": means over 20 timed ops after 5
warm-ups), from \`mpirun -n 8 ./bin/all_reduce_test -b 8K -e 64M -f 2 -d
fp32 -o sum -p 8\`; the page does not name the hardware.

torch.distributed over HCCL, 910B, one server (algorithm bandwidth = tensor
bytes / time; for all_gather the gathered tensor, as \`hccl test\`'s
size):

| source | hardware | op, ranks | bytes | published algbw (GB/s) | atlas800t-a2 (GB/s) | error | HCCS x 0.7 (GB/s) | error |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
${lim_rows}

Source: <https://github.com/gameofdimension/limulidae> (README "节点内带宽",
intra-node bandwidth; CANN 8.0.0.beta1, torch 2.4.0, torch_npu 2.4.0.post2;
\`bench_collective.py\`, after IBM's pytorch-communication-benchmarks: 2
untimed calls, then 5–100 timed calls per size from 0.1 MB to 8 GB). The
README gives one figure per NPU count and does not say at which size; the
simulator is read at 8 GB, the largest, where its algbw is highest. "HCCS x
0.7" runs the same server as a fabric file with every HCCS link at
msmodeling's \`comm_efficiency\` 0.7 × 28 = 19.6 GB/s (a source's number,
not fitted; the presets do not apply it).

Median absolute error over the CANN example's 14 rows: ${med_a2}% (A2), ${med_a2op}% (A2 +
10 us), ${med_910a}% (910A). At 64 MiB the A2 prediction is ${a2_64} us
(${a2_64_algo}), ${a2_64_pct}%. The published times are a per-op host and
software cost of 0.76–1.9 ms plus the transfer (see the calibration above);
the simulator models the device and fabric only, and msmodeling's 10 us
device-side op cost is two orders of magnitude smaller than that cost, so
every row is under-predicted. That example cannot validate link bandwidths;
the torch.distributed figures, compared at a size where bandwidth dominates,
can:
the presets over-predict them (median |error| ${lim_med_a2}%: the links at
28 GB/s run faster than the measured collectives; at the previous 56 GB/s
the predictions would have been about 3x the measured), and with msmodeling's 0.7 efficiency the median
|error| is ${lim_med_eff}%, the 4-NPU rows the worst (+22–24%).

Searched for and not found (so not in the tables): other hccl_test outputs
with numbers for 910A/910B in GitHub issues and pages (the ones found are
HCCL-VM runs, whose timer is a fixed 1000 us stub, or parser test fixtures);
other torch.distributed / torch_npu benchmarks over HCCL with 2, 4 or 8
NPUs; papers with HCCL op timings on 910A/910B; FlagPerf's Ascend interconnect
pages (A3 only, values "/"); msmodeling's measured A3 HCCL tables
(\`profiling_database/.../hccl/v8.5/*.csv\`, stored as Git LFS pointers).
EOF
  cat "$tables"
} >"$out/README.md"
echo "wrote $out/README.md" >&2
