#!/usr/bin/env bash
# A data-loader-shaped child (docs/report.md): each of 4 ranks forks a worker after its first
# step, as PyTorch's DataLoader does once NCCL is up, and the worker leaves through exit() while
# the parent trains on. The workers write no report: with AUTOHA_REPORT=%h-%p there are exactly
# 4 reports, one per rank, and with a per-rank name (%r) each rank's report holds its own full
# counts, not the worker's copy from the fork.
#   run_fork_report.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR
set -u
run=$1 job=$2 lib=$3 simlib=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
for tmpl in "%h-%p" "rank-%r"; do
  dir=$work/${tmpl//%/}
  mkdir -p "$dir"
  AUTOHA_REPORT="$dir/$tmpl.json" LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
    "$run" -n 4 --nodes 2 -- "$job" --iters 40 --fork-loader >"$dir/log" 2>&1 ||
    { echo "FAIL ($tmpl): the job failed"; tail -5 "$dir/log"; fail=1; continue; }
  python3 - "$dir" "$tmpl" <<'PY' || fail=1
import glob, json, sys
d, tmpl = sys.argv[1], sys.argv[2]
reps = [json.load(open(f)) for f in sorted(glob.glob(d + "/*.json"))]
ranks = sorted(c["rank"] for r in reps for c in r["comms"])
calls = {c["rank"]: sum(k.get("calls", 0) for k in c["keys"]) for r in reps for c in r["comms"]}
ok = len(reps) == 4 and ranks == [0, 1, 2, 3] and len(set(calls.values())) == 1
# 40 steps of 10 collectives each: the parent's whole run, never the worker's first step
ok = ok and min(calls.values()) == 400
print("%s %s: %d reports, ranks %s, calls per rank %s" %
      ("fork report" if ok else "FAIL fork report", tmpl, len(reps), ranks, calls))
sys.exit(0 if ok else 1)
PY
done
exit $fail
