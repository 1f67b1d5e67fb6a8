#!/usr/bin/env bash
# The shim's added cost per collective call, in instructions counted by callgrind: hotpath_job
# (2 ranks on sim/, configs fixed by an override so every call takes the apply path) run without and
# with libautoha.so preloaded; the difference of instructions in the measured iterations divided by
# the collective calls made. Three shapes of call (hotpath_job --shape): group2, one group of one
# AllReduce per rank from one thread (nccl-tests' and JAX's shape); group8, one group of four per
# rank (a bucketed gradient all-reduce); ungrouped, one thread per rank, every call its own (a
# thread per GPU, PyTorch's).
#
# The bar applies against the same run without the shim (no tuner at all), so the figure includes
# what NCCL spends calling a tuner at all. A do-nothing tuner (HOTPATH_NULL_TUNER) is measured too
# and printed, to show how much of the figure is that call rather than the shim's own work. Each
# run must spend almost nothing in the allocator in the measured loop (a check, below): glibc's cost
# there depends on the heap's layout and would count for or against the shim.
#
# CUDA driver calls: callgrind's call graph counts every call into a cu* function (sim/'s driver)
# in the measured loop; the shim's are the difference with the run without it. One is made by
# every wrapped call or outermost group end (a bracket): cuStreamIsCapturing on its stream, which
# cannot be avoided — an event recorded into a stream being captured breaks the user's CUDA graph,
# and a program that links the CUDA runtime statically (nvcc's default) begins its captures where
# no preloaded library can see them, so the shim asks the driver; a captured call must also take
# the captured decision (NCCL's choice unless settled). Bar: at most one per bracket. Anything else
# is the sampled calls' (one call in 64 per key is timed, for the report and the straggler window):
# two events recorded, one query, one elapsed time and two capture-mode exchanges around the
# harvest, so at most 6/64 per call; a settled call between samples makes no other.
# Prints one line per shape and the figure last with OK or FAILED; exits non-zero over a bar (200
# instructions per call — the difference with the run without the shim, or for ungrouped the
# shim's own instructions (own_instr) —, one capture check per bracket and 6/64 other driver calls
# per call, in every shape).
#   run.sh HOTPATH_JOB LIBAUTOHA SIMLIB [ITERS]   (env HOTPATH_NULL_TUNER: the do-nothing tuner;
#   HOTPATH_SHAPES: the shapes, default "group2 group8 ungrouped")
set -uo pipefail
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
job=$1 lib=$2 simlib=$3 iters=${4:-2000}
shapes=${HOTPATH_SHAPES:-group2 group8 ungrouped}
bar=200
drv_bar=0.094 # 6/64
export LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export AUTOHA_MODE=fixed AUTOHA_OVERRIDE="allreduce:algo=ring,proto=ll,nchannels=2" AUTOHA_REPORT=off
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
calls_of() { case $1 in group8) echo $((8 * iters)) ;; *) echo $((2 * iters)) ;; esac; }
brackets_of() { case $1 in ungrouped) echo $((2 * iters)) ;; *) echo "$iters" ;; esac; }
count() { # NAME SHAPE PRELOAD...: total instructions (Ir) in the measured loop (hotpath_job dumps
  # its counts at the loop's end: NAME.cg.1)
  local name=$1 shape=$2
  shift 2
  env "$@" valgrind --tool=callgrind --callgrind-out-file="$tmp/$name.cg" \
    "$job" --shape "$shape" --warmup 300 --iters "$iters" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "FAILED: $name run failed" >&2; tail "$tmp/$name.err" >&2; exit 1; }
  grep -q "calls=$(calls_of "$shape")" "$tmp/$name.out" || { echo "FAILED: $name made no calls" >&2; exit 1; }
  # The allocator's instructions depend on the heap's layout, which differs between the runs (a
  # plugin loaded or not): a loop that allocates would move the figure by hundreds per call.
  local heap
  [ -s "$tmp/$name.cg.1" ] || { echo "FAILED: $name: no dump of the measured window" >&2; exit 1; }
  heap=$(callgrind_annotate --threshold=100 --auto=no "$tmp/$name.cg.1" 2>/dev/null |
    awk '/malloc\/malloc\.c:/ {gsub(",", "", $1); s += $1} END {print s + 0}')
  if [ $((heap / $(calls_of "$shape"))) -gt 10 ]; then
    echo "FAILED: $name: $((heap / $(calls_of "$shape"))) allocator instructions per call in the measured loop" >&2
    exit 1
  fi
  awk '/^summary:/ {print $2} /^totals:/ {t=$2} END {if (t) print t}' "$tmp/$name.cg.1" | head -1
}
# The shim's own instructions in NAME's measured loop: the inclusive cost of its NCCL entry points
# (ncclAllReduce, ncclGroupStart, ncclGroupEnd) less that of the real ones they call, plus its tuner
# entry (which the real call runs). Unlike the difference with a run without the shim, it leaves
# out what sim/ spends waiting: with a thread per rank, a sim/ call blocks on the host until the
# peer's arrives (a real GPU's would not), and the waiting thread's instructions move with the
# other's pace. It also leaves out NCCL's own cost of calling a tuner.
own_instr() {
  callgrind_annotate --inclusive=yes --threshold=100 "$tmp/$1.cg.1" 2>/dev/null | awk '
    /:(ncclAllReduce|ncclGroupStart|ncclGroupEnd|get_coll_info_table) \[/ {
      v = $1; gsub(",", "", v)
      if ($0 ~ /libautoha/) s += v; else if ($0 ~ /:nccl/) s -= v
    }
    END { print s + 0 }'
}
# Calls into CUDA driver functions in NAME's measured loop whose name matches PATTERN (an awk
# regex), from callgrind's call graph: names are compressed ("cfn=(7) cuEventRecord" once, "cfn=(7)"
# after), and each "calls=N" line counts the calls of the cfn line before it.
driver_calls() {
  awk -v pat="$2" '
    match($0, /^c?fn=\([0-9]+\)/) {
      id = substr($0, RSTART, RLENGTH); sub(/^c?fn=/, "", id)
      rest = substr($0, RLENGTH + 2)
      if (rest != "") name[id] = rest
      if ($0 ~ /^cfn=/) callee = name[id]
      next
    }
    /^calls=/ { split(substr($0, 7), a, " "); if (callee ~ /^cu[A-Z]/ && callee ~ pat) n += a[1] }
    END { print n + 0 }' "$tmp/$1.cg.1"
}
[ -n "${HOTPATH_NULL_TUNER:-}" ] || { echo "FAILED: HOTPATH_NULL_TUNER (the do-nothing tuner) is not set"; exit 1; }
ok=1 summary=
for shape in $shapes; do
  case $shape in group2 | group8 | ungrouped) ;; *) echo "FAILED: unknown shape '$shape' in HOTPATH_SHAPES"; exit 2 ;; esac
  plain=$(count "plain-$shape" "$shape" LD_PRELOAD=) || exit 1 # count's own exit leaves only its subshell
  null=$(count "null-$shape" "$shape" LD_PRELOAD= NCCL_TUNER_PLUGIN="$HOTPATH_NULL_TUNER") || exit 1
  shim=$(count "shim-$shape" "$shape" LD_PRELOAD="$lib") || exit 1
  calls=$(calls_of "$shape")
  diff=$(awk -v a="$shim" -v b="$plain" -v c="$calls" 'BEGIN {printf "%.1f", (a - b) / c}')
  own=$(awk -v a="$(own_instr "shim-$shape")" -v c="$calls" 'BEGIN {printf "%.1f", a / c}')
  per=$diff
  [ "$shape" = ungrouped ] && per=$own # see own_instr
  vsnull=$(awk -v a="$shim" -v b="$null" -v c="$calls" 'BEGIN {printf "%.1f", (a - b) / c}')
  cap='^cuStreamIsCapturing$' other='^cu' brackets=$(brackets_of "$shape")
  cp=$(driver_calls "plain-$shape" "$cap") cs=$(driver_calls "shim-$shape" "$cap")
  op=$(driver_calls "plain-$shape" "$other") os=$(driver_calls "shim-$shape" "$other")
  capper=$(awk -v a="$cs" -v b="$cp" -v c="$brackets" 'BEGIN {printf "%.2f", (a - b) / c}')
  drv=$(awk -v a="$os" -v b="$op" -v x="$cs" -v y="$cp" -v c="$calls" 'BEGIN {printf "%.4f", ((a - b) - (x - y)) / c}')
  echo "$shape: $calls collective calls in $iters iterations ($brackets brackets): instructions no tuner $plain, do-nothing tuner $null, autoha $shim; per call $diff over no tuner, $vsnull over a do-nothing tuner, $own in the shim's own functions; CUDA driver calls $op without the shim, $os with it ($cs capture checks)"
  awk -v p="$per" -v b="$bar" -v d="$drv" -v db="$drv_bar" -v k="$capper" 'BEGIN {exit !(p <= b && d <= db && k <= 1)}' || ok=0
  summary="$summary${summary:+; }$shape $per instructions, $capper capture checks per bracket, $drv other driver calls per call"
done
verdict=OK
[ $ok = 1 ] || verdict=FAILED
echo "shim hot path: $summary (bars: $bar instructions and $drv_bar other driver calls per call, 1 capture check per bracket, in every shape; callgrind on sim/): $verdict"
[ $ok = 1 ]
