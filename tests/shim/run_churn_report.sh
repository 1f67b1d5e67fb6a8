#!/usr/bin/env bash
# Communicator churn keeps the report bounded and its totals right (docs/report.md "Destroyed
# communicators"): CYCLES cycles of ncclCommSplit + one AllReduce + ncclCommDestroy
# (bench/churn/churn_job.c) in tune mode, on 2 processes of one rank, then on one process of 4
# ranks (4 threads). Each report holds the latest 16 destroyed communicators in detail and sums
# the rest in "destroyed": its calls over both equal the cycles times its ranks, its communicators
# the cycles plus the world times its ranks, and the file stays under 64 KB (it held every
# communicator before: 340–500 KB at 300 cycles, checked against the old library). `autoha report`
# and `autoha report --merge` read them.
#   run_churn_report.sh NCCLSIM_RUN CHURN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI [CYCLES]
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 cycles=${6:-300}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
# Two processes of one rank each (the hub decides), then one process of 4 ranks on 4 threads that
# destroy each communicator at once (all local: released by whichever destroys last).
check() { # DIR NREPORTS RANKS_PER_REPORT
  python3 - "$1" "$cycles" "$2" "$3" <<'PY'
import glob, json, os, sys
d, cycles, nrep, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
files = sorted(glob.glob(d + "/r-*.json"))
ok = len(files) == nrep
for f in files:
    r = json.load(open(f))
    size = os.path.getsize(f)
    kept = [c for c in r["comms"] if c.get("destroyed")]
    summed = r.get("destroyed", {})
    calls = sum(k["calls"] for c in kept for k in c["keys"]) + summed.get("calls", 0)
    comms = len(kept) + summed.get("comms", 0)
    good = (size < 64 * 1024 and len(r["comms"]) <= 16 + per and len(kept) <= 16
            and calls == cycles * per and comms == (cycles + 1) * per and r["rank"] >= 0)
    print("%s %s: %d bytes, %d comms in detail (%d destroyed), %d summed; calls %d (cycles x "
          "ranks %d), communicators %d ((cycles + world) x ranks %d)" %
          ("churn report" if good else "FAIL churn report", os.path.basename(f), size,
           len(r["comms"]), len(kept), summed.get("comms", 0), calls, cycles * per, comms,
           (cycles + 1) * per))
    ok = ok and good
print("%s: %d reports (expected %d)" % ("churn reports" if ok else "FAIL churn reports", len(files), nrep))
sys.exit(0 if ok else 1)
PY
}
for shape in procs threads; do
  mkdir -p "$work/$shape"
  if [ $shape = procs ]; then args=(-n 2 -- "$job" --cycles "$cycles")
  else args=(-n 1 -- "$job" --threads 4 --cycles "$cycles"); fi
  AUTOHA_MODE=tune AUTOHA_REPORT="$work/$shape/r-%p.json" LD_LIBRARY_PATH="$simlib" \
    LD_PRELOAD="$lib" "$run" "${args[@]}" >"$work/$shape/log" 2>&1 ||
    { echo "FAIL ($shape): the churn job failed"; tail -5 "$work/$shape/log"; exit 1; }
  if grep -q "autoha WARN\|autoha ERROR" "$work/$shape/log"; then
    echo "FAIL ($shape): the job warned:"; grep "autoha WARN\|autoha ERROR" "$work/$shape/log" | head -3
    exit 1
  fi
  if [ $shape = procs ]; then check "$work/$shape" 2 1 || exit 1; else check "$work/$shape" 1 4 || exit 1; fi
done
out=$("$cli" report "$work"/procs/r-*.json 2>&1) || { echo "FAIL: autoha report: $out" | head -5; exit 1; }
grep -q "more destroyed communicators, summed" <<<"$out" ||
  { echo "FAIL: autoha report does not show the summed destroyed communicators"; exit 1; }
out=$("$cli" report --merge "$work"/procs/r-*.json 2>&1) ||
  { echo "FAIL: autoha report --merge: $out" | head -5; exit 1; }
echo "churn report: autoha report and report --merge read both reports"
