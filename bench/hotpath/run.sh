#!/usr/bin/env bash
# The shim's added cost per collective call, in instructions counted by callgrind: hotpath_job
# (2 ranks in one thread on sim/, one AllReduce per rank per iteration, configs fixed by an
# override so every call takes the apply path) run without and with libautoha.so preloaded; the
# difference of instructions in the measured iterations divided by the collective calls made.
#
# The bar applies against the same run without the shim (no tuner at all), so the figure includes
# what NCCL spends calling a tuner at all. A do-nothing tuner (HOTPATH_NULL_TUNER) is measured too
# and printed, to show how much of the figure is that call rather than the shim's own work. Each
# run must spend almost nothing in the allocator in the measured loop (a check, below): glibc's cost
# there depends on the heap's layout and would count for or against the shim.
# Prints the figure last with OK or FAILED; exits non-zero over the bar (200 instructions/call).
#   run.sh HOTPATH_JOB LIBAUTOHA SIMLIB [ITERS]   (env HOTPATH_NULL_TUNER: the do-nothing tuner)
set -uo pipefail
job=$1 lib=$2 simlib=$3 iters=${4:-2000}
bar=200
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export AUTOHA_MODE=fixed AUTOHA_OVERRIDE="allreduce:algo=ring,proto=ll,nchannels=2" AUTOHA_REPORT=off
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # NAME PRELOAD...: total instructions (Ir) collected in the measured loop
  local name=$1
  shift
  env "$@" valgrind --tool=callgrind --collect-atstart=no --callgrind-out-file="$tmp/$name.cg" \
    "$job" --warmup 300 --iters "$iters" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "FAILED: $name run failed" >&2; tail "$tmp/$name.err" >&2; exit 1; }
  grep -q "calls=$((2 * iters))" "$tmp/$name.out" || { echo "FAILED: $name made no calls" >&2; exit 1; }
  # The allocator's instructions depend on the heap's layout, which differs between the runs (a
  # plugin loaded or not): a loop that allocates would move the figure by hundreds per call.
  local heap
  heap=$(callgrind_annotate --threshold=100 --auto=no "$tmp/$name.cg" 2>/dev/null |
    awk '/malloc\/malloc\.c:/ {gsub(",", "", $1); s += $1} END {print s + 0}')
  if [ $((heap / (2 * iters))) -gt 10 ]; then
    echo "FAILED: $name: $((heap / (2 * iters))) allocator instructions per call in the measured loop" >&2
    exit 1
  fi
  awk '/^summary:/ {print $2} /^totals:/ {t=$2} END {if (t) print t}' "$tmp/$name.cg" | head -1
}
[ -n "${HOTPATH_NULL_TUNER:-}" ] || { echo "FAILED: HOTPATH_NULL_TUNER (the do-nothing tuner) is not set"; exit 1; }
plain=$(count plain LD_PRELOAD=) || exit 1 # count's own exit leaves only its subshell
null=$(count null LD_PRELOAD= NCCL_TUNER_PLUGIN="$HOTPATH_NULL_TUNER") || exit 1
shim=$(count shim LD_PRELOAD="$lib") || exit 1
calls=$((2 * iters))
per=$(awk -v a="$shim" -v b="$plain" -v c="$calls" 'BEGIN {printf "%.1f", (a - b) / c}')
vsnull=$(awk -v a="$shim" -v b="$null" -v c="$calls" 'BEGIN {printf "%.1f", (a - b) / c}')
echo "instructions in $iters iterations ($calls collective calls): no tuner $plain, do-nothing tuner $null, autoha $shim"
echo "against a do-nothing tuner: $vsnull instructions per call (the rest is NCCL calling a tuner at all)"
if awk -v p="$per" -v b="$bar" 'BEGIN {exit !(p <= b)}'; then
  echo "shim hot path: $per instructions per collective call (bar $bar, callgrind on sim/): OK"
else
  echo "shim hot path: $per instructions per collective call (bar $bar, callgrind on sim/): FAILED"
  exit 1
fi
