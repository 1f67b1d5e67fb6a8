#!/usr/bin/env bash
# Tuned communicators made for a few calls each (bench/churn/churn_job.c: ncclCommSplit, K
# AllReduces, ncclCommDestroy; 2 processes) agree on every call. Call 0 of a key spanning processes
# runs NCCL's choice on every rank without waiting for the hub's verdict, and the search starts at
# call 1 (the leader commits and publishes both): sim/ fails any call on which the ranks
# disagree (the job then exits non-zero), and both ranks' reports must show the same calls under the
# same configurations for every destroyed communicator they keep in detail (the latest 16), every
# call counted (kept or summed), with the leader's probes applied on the worker too.
#   run_churn_agree.sh NCCLSIM_RUN CHURN_JOB LIBAUTOHA SIMLIB_DIR
set -euo pipefail
run=$1 job=$2 lib=$3 simlib=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOHA_COORD_IFNAME=lo
cycles=150
out=$(env AUTOHA_MODE=tune AUTOHA_REPORT="$work/r-%p.json" LD_LIBRARY_PATH="$simlib" \
  LD_PRELOAD="$lib" "$run" -n 2 -- "$job" --cycles "$cycles" --calls 3 2>&1) ||
  { echo "FAIL: the tuned churn job failed:"; tail -20 <<<"$out"; exit 1; }
if grep -c "autoha WARN\|autoha ERROR" <<<"$out" >/dev/null; then
  echo "FAIL: the tuned churn job warned:"; grep "autoha WARN\|autoha ERROR" <<<"$out" | head -5; exit 1
fi
python3 - "$work" "$cycles" <<'PY'
import glob, json, sys
work, cycles = sys.argv[1], int(sys.argv[2])
detail, summed = {}, {}
for f in glob.glob(work + "/r-*.json"):
    r = json.load(open(f))
    rank = r["rank"]
    summed[rank] = r.get("destroyed", {}).get("calls", 0)
    d = detail.setdefault(rank, {})
    for c in r["comms"]:
        if c["nranks"] != 2 or not c.get("destroyed"):
            continue  # the world communicator
        for k in c["keys"]:
            d[(c["id"], k["coll"], k["bin"])] = (
                k["calls"], k["default"]["calls"], k["applied"]["calls"], k["applied"]["config"]["text"])
assert set(detail) == {0, 1}, "reports of ranks %s, want 0 and 1" % sorted(detail)
a, b = detail[0], detail[1]
assert len(a) >= 8 and set(a) == set(b), "destroyed communicators kept in detail: rank 0 %d, rank 1 %d" % (
    len(a), len(b))
differ = [k for k in a if a[k] != b[k]]
assert not differ, "ranks ran different configurations on %d keys, e.g. %s: %s vs %s" % (
    len(differ), differ[0], a[differ[0]], b[differ[0]])
for rank in (0, 1):  # every call is counted: in a kept communicator or in the sum
    calls = summed[rank] + sum(v[0] for v in detail[rank].values())
    assert calls == 3 * cycles, "rank %d: %d calls over the destroyed communicators, want %d" % (
        rank, calls, 3 * cycles)
applied = sum(v[2] for v in b.values())
assert applied >= len(b) // 2, "the worker applied the leader's probes on %d calls of %d keys" % (
    applied, len(b))
print("PASS: %d tuned communicators of 3 calls; the %d kept in detail alike on both ranks, %d of their "
      "calls ran a probe on the worker" % (cycles, len(a), applied))
PY
