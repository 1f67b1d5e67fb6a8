#!/usr/bin/env bash
# The hang and crash findings over seeds (docs/diagnosis.md): for each fault kind — a host stall, a
# GPU hang with the host then in a stream sync, in a synchronous copy (.item()), or going on, a
# frozen process (SIGSTOP), a killed one (SIGKILL) — 10 jobs of 8 ranks on 2 simulated nodes with
# NCCLSIM_NOISE=0.02, each striking another rank (1..7) at another collective of a step
# (tests/diag/run_culprit_shapes.sh runs each job and checks every event). Prints per kind the
# precision (jobs whose every finding named the culprit alone, over jobs with a finding), the
# recall (jobs where every living process named it within AUTOHA_HANG_S + 2 s) and the detection
# latency (median, max); exits non-zero under the bars: precision 0.99, recall 0.97, latency
# AUTOHA_HANG_S (3 s here) + 2 s. Figures from sim/.
#   run_faults.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI [SEEDS]
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 seeds=${6:-10}
here=$(dirname "$0")
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export NCCLSIM_NOISE=0.02
for kind in stall hang-sync hang-item hang-ahead sigstop sigkill; do
  for seed in $(seq 0 $((seeds - 1))); do
    rank=$((1 + (seed * 3) % 7)) call=$((21 + seed)) # positions 1..10 of a step's 10 collectives
    all=$(CULPRIT_RANK=$rank CULPRIT_CALL=$call "$here/../../tests/diag/run_culprit_shapes.sh" \
      "$run" "$job" "$lib" "$simlib" "$cli" observe "$kind" 2>&1)
    echo "$all" | grep -v '^RESULT'
    line=$(echo "$all" | grep '^RESULT')
    echo "$kind $seed ${line:-RESULT shape=$kind named=0 wrong=0 latency=none}" >>"$out"
  done
done
python3 - "$out" "$seeds" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
ok = True
print("%-10s %5s %9s %7s %12s %12s" % ("fault", "jobs", "precision", "recall", "latency p50", "max"))
for kind in dict.fromkeys(r[0] for r in rows):
    rs = [dict(kv.split("=") for kv in r[3:]) for r in rows if r[0] == kind]
    named = [r for r in rs if int(r["named"]) > 0]
    right = [r for r in named if r["wrong"] == "0"]
    hit = [float(r["latency"]) for r in rs if r["wrong"] == "0" and r["latency"] != "none"]
    prec = len(right) / len(named) if named else 1.0
    rec = len(hit) / len(rs)
    p50 = statistics.median(hit) if hit else float("nan")
    mx = max(hit) if hit else float("nan")
    print("%-10s %5d %9.3f %7.3f %10.1f s %10.1f s" % (kind, len(rs), prec, rec, p50, mx))
    ok &= prec >= 0.99 and rec >= 0.97 and (not hit or mx <= 5.0)
print("hang and crash findings (sim/, 8 ranks, NCCLSIM_NOISE=0.02): %s (bars: precision 0.99, recall 0.97, latency AUTOHA_HANG_S + 2 = 5 s)" % ("OK" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
