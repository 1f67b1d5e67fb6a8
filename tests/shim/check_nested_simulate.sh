#!/usr/bin/env bash
# A group holding a nested group closed by ncclGroupSimulateEnd is still timed at its outer
# ncclGroupEnd: hotpath_job --nested-simulate (2 ranks in one thread, one AllReduce per rank per
# group) runs 40 iterations in observe mode; each rank's AllReduce key must count 40 calls and show
# its first 16 timed (docs/shim.md "Timing"). A nested simulation that dropped the outer group's
# stream left every call untimed.
#   check_nested_simulate.sh HOTPATH_JOB LIBAUTOHA SIMLIB
set -uo pipefail
job=$1 lib=$2 simlib=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
LD_LIBRARY_PATH=$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} LD_PRELOAD=$lib AUTOHA_MODE=observe \
  AUTOHA_REPORT="$tmp/report-%r.json" "$job" --nested-simulate --warmup 0 --iters 40 >"$tmp/out" 2>"$tmp/err" ||
  { echo "FAIL: the job failed"; cat "$tmp/err"; exit 1; }
python3 - "$tmp" <<'PY'
import glob, json, sys
files = sorted(glob.glob(sys.argv[1] + "/report-*.json"))
if not files:
    sys.exit("FAIL: no report written")
seen = 0
for path in files:
    for comm in json.load(open(path))["comms"]:
        for k in comm["keys"]:
            if k["coll"] != "allreduce":
                continue
            seen += 1
            timed = k["default"]["timed"]
            print("%s rank %s: allreduce bin %d: %d calls, %d timed" % (path.split("/")[-1], comm.get("rank"), k["bin"], k["calls"], timed))
            if k["calls"] != 40 or timed < 16:
                sys.exit("FAIL: expected 40 calls with at least 16 timed")
if seen != 2:
    sys.exit("FAIL: expected one AllReduce key per rank (2), found %d" % seen)
print("PASS: the outer group of a nested ncclGroupSimulateEnd is timed")
PY
