#!/usr/bin/env bash
# api_job (nccl.h 2.27/2.28 additions) on sim/ under ncclsim-run, 4 processes, without and with
# libautoha.so preloaded (observe mode and tune mode). Both runs must pass every data check of the
# job. With the shim, every process's report must show AlltoAll, Gather and Scatter keys on the
# world communicator with exactly the job's call counts and timed calls with a positive time, and
# the three ranks that shrank must report the child (3 ranks) under one identity, different from
# the world's, with its AllReduce calls counted.
#   check_api_e2e.sh LAUNCHER JOB LIBAUTOHA SIMLIB
set -uo pipefail
launcher=$1 job=$2 lib=$3 simlib=$4
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN
iters=20

"$launcher" -n 4 -- "$job" --iters $iters >"$tmp/plain.out" 2>"$tmp/plain.err" ||
  { echo "FAIL: plain run"; tail -5 "$tmp/plain.err"; exit 1; }
[ "$(grep -c '^ok rank=' "$tmp/plain.out")" = 4 ] || { echo "FAIL: plain run: not every rank ok"; exit 1; }
echo "PASS: plain run, 4 ranks ok"

for mode in observe tune; do
  mkdir -p "$tmp/$mode"
  LD_PRELOAD=$lib AUTOHA_MODE=$mode AUTOHA_REPORT="$tmp/$mode/report-%p.json" \
    "$launcher" -n 4 -- "$job" --iters $iters >"$tmp/$mode.out" 2>"$tmp/$mode.err" ||
    { echo "FAIL: $mode run"; tail -5 "$tmp/$mode.err"; exit 1; }
  [ "$(grep -c '^ok rank=' "$tmp/$mode.out")" = 4 ] || { echo "FAIL: $mode run: not every rank ok"; exit 1; }
  python3 - "$tmp/$mode" $iters <<'PY' || exit 1
import glob, json, sys
folder, iters = sys.argv[1], int(sys.argv[2])
reports = [json.load(open(p)) for p in sorted(glob.glob(folder + "/report-*.json"))]
if len(reports) != 4:
    sys.exit("FAIL: %d reports, expected 4" % len(reports))
children = set()
worlds = set()
for rep in reports:
    world = [c for c in rep["comms"] if c["nranks"] == 4]
    if len(world) != 1:
        sys.exit("FAIL: %d world communicators in a report" % len(world))
    worlds.add(world[0]["id"])
    for coll in ("alltoall", "gather", "scatter"):
        keys = [k for k in world[0]["keys"] if k["coll"] == coll]
        calls = sum(k["calls"] for k in keys)
        timed = sum(k["default"]["timed"] for k in keys)
        if calls != iters or timed == 0 or not all(k["default"]["time_us"] and k["default"]["time_us"] > 0 for k in keys if k["default"]["timed"]):
            sys.exit("FAIL: rank %d: %s: %d calls (expected %d), %d timed: %s" % (world[0]["rank"], coll, calls, iters, timed, keys))
    child = [c for c in rep["comms"] if c["nranks"] == 3]
    for c in child:
        ar = sum(k["calls"] for k in c["keys"] if k["coll"] == "allreduce")
        if ar != iters:
            sys.exit("FAIL: shrunk child %s: %d allreduce calls, expected %d" % (c["id"], ar, iters))
        children.add(c["id"])
    if world[0]["rank"] != 1 and len(child) != 1:
        sys.exit("FAIL: rank %d reports %d shrunk children" % (world[0]["rank"], len(child)))
if len(children) != 1 or len(worlds) != 1 or children & worlds:
    sys.exit("FAIL: identities: world %s, shrunk child %s (one each, different)" % (worlds, children))
print("PASS: alltoall/gather/scatter keys with %d calls and times on every rank; shrunk child %s on 3 ranks" % (iters, children.pop()))
PY
  echo "PASS: $mode run"
done
