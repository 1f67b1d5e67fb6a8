#!/usr/bin/env bash
# bench/churn: communicator churn on sim/ — 2 ranks, 2,000 cycles of ncclCommSplit, one AllReduce
# on the new communicator and ncclCommDestroy (bench/churn/churn_job.c) — with libautoha.so
# preloaded (tune mode, reports on) against the same job without it, 3 runs each (the best of
# each). Bars: the job with the shim within 2x of the plain job's time, and its last quarter of
# cycles at most 1.5x its first (a cost that grows with the communicators made so far — a report
# rewritten whole at each teardown, scans of every communicator ever made — shows there: it was
# 753 s against 1.7 s). Then memory: rank 0's VmRSS after CYCLES/4 and after CYCLES cycles, with
# and without the shim (tune mode, reports on), divided by the communicators destroyed between:
# what autoha adds per destroyed communicator, bar 12 KB (4.5 KB; it was 62 KB when every
# destroyed communicator kept its search, health state, key table and report entry; what stays is
# reached without locks: docs/shim.md "Communicator churn"); and the report at CYCLES at most 64 KB
# and 1.5x the one at CYCLES/4 (it held every communicator: 3.1 MB at 2,000). Figures from sim/.
#   run_churn.sh NCCLSIM_RUN CHURN_JOB LIBAUTOHA SIMLIB_DIR [CYCLES]
set -u
run=$1 job=$2 lib=$3 simlib=$4 cycles=${5:-2000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
best() { sort -g | head -1; }
plain=() shim=() first=() last=()
for i in 1 2 3; do
  out=$(LD_LIBRARY_PATH="$simlib" "$run" -n 2 -- "$job" --cycles "$cycles" 2>&1) ||
    { echo "churn: the plain job failed: $out"; exit 1; }
  plain+=("$(sed -nE 's/.*cycles in ([0-9.]+) s.*/\1/p' <<<"$out")")
  out=$(AUTOHA_REPORT="$work/r-$i-%p.json" LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
    "$run" -n 2 -- "$job" --cycles "$cycles" 2>&1) || { echo "churn: the job with the shim failed: $out"; exit 1; }
  if grep -q "autoha WARN\|autoha ERROR" <<<"$out"; then
    echo "churn: the job with the shim warned:"; grep "autoha WARN\|autoha ERROR" <<<"$out" | head -3; exit 1
  fi
  shim+=("$(sed -nE 's/.*cycles in ([0-9.]+) s.*/\1/p' <<<"$out")")
  first+=("$(sed -nE 's/.*first quarter ([0-9.]+) s.*/\1/p' <<<"$out")")
  last+=("$(sed -nE 's/.*last quarter ([0-9.]+) s.*/\1/p' <<<"$out")")
done
p=$(printf '%s\n' "${plain[@]}" | best) s=$(printf '%s\n' "${shim[@]}" | best)
growth=$(paste <(printf '%s\n' "${first[@]}") <(printf '%s\n' "${last[@]}") |
  awk '{ g = $1 > 0 ? $2 / $1 : 99; if (NR == 1 || g < m) m = g } END { printf "%.2f", m }')
ratio=$(awk -v s="$s" -v p="$p" 'BEGIN { printf "%.2f", (p > 0 ? s / p : 99) }')
ok=$(awk -v r="$ratio" -v g="$growth" 'BEGIN { print (r <= 2 && g <= 1.5) ? "OK" : "FAILED" }')
echo "churn (sim/, $cycles cycles of split + allreduce + destroy, 2 ranks, best of 3): plain $p s," \
  "with autoha $s s: ${ratio}x (bar 2x); last quarter / first quarter ${growth}x (bar 1.5x): $ok"

# ---- memory: rank 0's resident set at two cycle counts, and the report's size ----
few=$((cycles / 4))
rss_of() { sed -nE 's/.*rss ([0-9]+) kB.*/\1/p' <<<"$1"; }
declare -A rss
for n in "$few" "$cycles"; do
  out=$(LD_LIBRARY_PATH="$simlib" "$run" -n 2 -- "$job" --cycles "$n" 2>&1) ||
    { echo "churn: the plain job failed: $out"; exit 1; }
  rss[plain-$n]=$(rss_of "$out")
  mkdir -p "$work/m-$n"
  out=$(AUTOHA_MODE=tune AUTOHA_REPORT="$work/m-$n/r-%r.json" LD_LIBRARY_PATH="$simlib" \
    LD_PRELOAD="$lib" "$run" -n 2 -- "$job" --cycles "$n" 2>&1) ||
    { echo "churn: the job with the shim failed: $out"; exit 1; }
  rss[shim-$n]=$(rss_of "$out")
done
size_few=$(stat -c %s "$work/m-$few/r-0.json") size_all=$(stat -c %s "$work/m-$cycles/r-0.json")
mem=$(awk -v pf="${rss[plain-$few]}" -v pa="${rss[plain-$cycles]}" -v sf="${rss[shim-$few]}" \
  -v sa="${rss[shim-$cycles]}" -v n=$((cycles - few)) -v rf="$size_few" -v ra="$size_all" 'BEGIN {
    p = (pa - pf) / n; s = (sa - sf) / n; a = s - p
    ok = (a <= 12 && ra <= 65536 && ra <= 1.5 * rf) ? "OK" : "FAILED"
    printf "%.1f %.1f %.1f %s", p, s, a, ok }')
read -r per_plain per_shim per_added mem_ok <<<"$mem"
echo "churn memory (sim/, rank 0's VmRSS from $few to $cycles cycles): plain job ${per_plain} KB," \
  "with autoha (tune, reports on) ${per_shim} KB per destroyed communicator: autoha adds" \
  "${per_added} KB (bar 12 KB); report $size_few -> $size_all bytes (bar 64 KB, 1.5x): $mem_ok"
[ "$ok" = OK ] && [ "$mem_ok" = OK ]
