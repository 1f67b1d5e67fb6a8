#!/usr/bin/env bash
# Communicator churn keeps the report bounded and its totals right (docs/report.md "Destroyed
# communicators"): 2 ranks, CYCLES cycles of ncclCommSplit + one AllReduce + ncclCommDestroy
# (bench/churn/churn_job.c) in tune mode. Each rank's report holds the latest 16 destroyed
# communicators in detail and sums the rest in "destroyed": its calls over both equal the cycles,
# its communicators the cycles plus the world, and the file stays under 64 KB (it held every
# communicator before: 460 KB at 300 cycles). `autoha report` and `autoha report --merge` read it.
#   run_churn_report.sh NCCLSIM_RUN CHURN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI [CYCLES]
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 cycles=${6:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
AUTOHA_MODE=tune AUTOHA_REPORT="$work/r-%p.json" LD_LIBRARY_PATH="$simlib" LD_PRELOAD="$lib" \
  "$run" -n 2 -- "$job" --cycles "$cycles" >"$work/log" 2>&1 ||
  { echo "FAIL: the churn job failed"; tail -5 "$work/log"; exit 1; }
if grep -q "autoha WARN\|autoha ERROR" "$work/log"; then
  echo "FAIL: the job warned:"; grep "autoha WARN\|autoha ERROR" "$work/log" | head -3; exit 1
fi
python3 - "$work" "$cycles" <<'PY' || exit 1
import glob, json, os, sys
d, cycles = sys.argv[1], int(sys.argv[2])
files = sorted(glob.glob(d + "/r-*.json"))
ok = len(files) == 2
for f in files:
    r = json.load(open(f))
    size = os.path.getsize(f)
    kept = [c for c in r["comms"] if c.get("destroyed")]
    summed = r.get("destroyed", {})
    calls = sum(k["calls"] for c in kept for k in c["keys"]) + summed.get("calls", 0)
    comms = len(kept) + summed.get("comms", 0)
    good = (size < 64 * 1024 and len(r["comms"]) <= 17 and len(kept) <= 16 and calls == cycles
            and comms == cycles + 1 and r["rank"] in (0, 1))
    print("%s %s: %d bytes, %d comms in detail (%d destroyed), %d summed; calls %d (cycles %d), "
          "communicators %d (cycles + world %d)" % ("churn report" if good else "FAIL churn report",
          os.path.basename(f), size, len(r["comms"]), len(kept), summed.get("comms", 0), calls,
          cycles, comms, cycles + 1))
    ok = ok and good
sys.exit(0 if ok else 1)
PY
out=$("$cli" report "$work"/r-*.json 2>&1) || { echo "FAIL: autoha report: $out" | head -5; exit 1; }
grep -q "more destroyed communicators, summed" <<<"$out" ||
  { echo "FAIL: autoha report does not show the summed destroyed communicators"; exit 1; }
out=$("$cli" report --merge "$work"/r-*.json 2>&1) ||
  { echo "FAIL: autoha report --merge: $out" | head -5; exit 1; }
echo "churn report: autoha report and report --merge read both reports"
