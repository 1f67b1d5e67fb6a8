#!/usr/bin/env bash
# The diagnosis findings over seeds (docs/diagnosis.md), one row per fault kind. Hangs and crashes
# (tests/diag/run_culprit_shapes.sh runs each job and checks every event): a host stall, a GPU hang
# with the host then in a stream sync, in a synchronous copy (.item()), or going on, a frozen process
# (SIGSTOP), a killed one (SIGKILL), each in jobs of 8 ranks on 2 simulated nodes striking another
# rank (1..7) at another collective of a step; and the hub's process killed (hubkill: a finding is a
# process saying the hub is gone, its latency the time until all 7 said it). A late straggler
# (tests/diag/run_straggler_late.sh): a rank (0..7, another each seed) that turns 20% slower at
# another collective of a paced 8-rank job. A slow link (tests/diag/run_link_diag.sh, 4 ranks): the
# leaf-spine cable most queue pairs cross degraded to 5, 20 or 50% of its rate, at another second.
# A NIC port down without HA (tests/diag/run_nic_down.sh, 4 ranks, AUTOHA_HA=off): mlx5_3's port 1
# on node1 or node0 (by turns) down at another second; the culprit is the rank of that node whose
# own IB error names the NIC, and a finding naming its peer or its neighbour is wrong. A slow NIC
# port (nic-slow-5: run_link_diag.sh with LINK_TARGET=nic): the port most queue pairs leave on
# degraded to 5% of its rate, at another second; the slow-link finding must name that port.
# NCCLSIM_NOISE=0.02 throughout, observe mode. Prints per kind the precision (jobs whose every
# finding named the culprit alone, over jobs with a finding), the recall (jobs where every living
# process named it within the latency bar) and the detection latency (median, max); exits non-zero
# under the bars: precision 0.99, recall 0.97, latency AUTOHA_HANG_S (3 s here) + 2 s for the hangs
# and crashes, 60 s for the late straggler (the issue's "60 s or 50 iterations, whichever is later":
# 50 steps are ~8 s at this pace), 10 s for links and slow NIC ports, 5 s for a NIC port down. A link degraded to no less than
# AUTOHA_SLOW_LINK_PCT (20) of the median is not meant to be named: its row shows what happened, its
# recall and latency bars do not apply (its precision bar does). Figures from sim/.
#   run_faults.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR AUTOHA_CLI [SEEDS]
# SEEDS (default 10) jobs per kind; FAULT_KINDS (default all, in the order below) picks rows;
# FABRIC_TOOL is ncclsim-fabric (default: next to NCCLSIM_RUN; not NCCLSIM_FABRIC, sim's fabric).
set -u
run=$1 job=$2 lib=$3 simlib=$4 cli=$5 seeds=${6:-10}
kinds=${FAULT_KINDS:-stall hang-sync hang-item hang-ahead sigstop sigkill hubkill straggler-late link-5 link-20 link-50 nic-down}
fabric=${FABRIC_TOOL:-$(dirname "$run")/ncclsim-fabric}
here=$(dirname "$0")/../../tests/diag
out=$(mktemp)
trap 'rm -f "$out"' EXIT
export NCCLSIM_NOISE=0.02 AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
for kind in $kinds; do
  for seed in $(seq 0 $((seeds - 1))); do
    case $kind in
      straggler-late) # ranks 0,3,6,1,..., turning slow 50..95 steps in
        all=$(CULPRIT_RANK=$(((seed * 3) % 8)) CULPRIT_AFTER=$((400 + 40 * (seed % 10))) LATE_WAIT_S=60 \
          "$here/run_straggler_late.sh" "$run" "$job" "$lib" "$simlib" observe 2>&1) ;;
      link-*)
        all=$(LINK_PCT=${kind#link-} LINK_FAULT_S=$((3 + seed % 3)) \
          "$here/run_link_diag.sh" "$run" "$job" "$lib" "$simlib" "$cli" "$fabric" 2>&1) ;;
      nic-slow-*)
        all=$(LINK_TARGET=nic LINK_PCT=${kind#nic-slow-} LINK_FAULT_S=$((3 + seed % 3)) \
          "$here/run_link_diag.sh" "$run" "$job" "$lib" "$simlib" "$cli" "$fabric" 2>&1) ;;
      nic-down) # node1, node0, ... at 2, 3, 4 s
        all=$(NIC_FAULT_S=$((2 + seed % 3)) \
          "$here/run_nic_down.sh" "$run" "$job" "$lib" "$simlib" "node$(((seed + 1) % 2))" 2>&1) ;;
      *) # positions 1..10 of a step's 10 collectives (hubkill strikes rank 0)
        all=$(CULPRIT_RANK=$((1 + (seed * 3) % 7)) CULPRIT_CALL=$((21 + seed % 10)) \
          "$here/run_culprit_shapes.sh" "$run" "$job" "$lib" "$simlib" "$cli" observe "$kind" 2>&1) ;;
    esac
    grep -v '^RESULT' <<<"$all"
    line=$(grep '^RESULT' <<<"$all" | tail -1)
    echo "$kind $seed ${line:-RESULT shape=$kind named=0 wrong=0 latency=none}" >>"$out"
  done
done
python3 - "$out" "${AUTOHA_SLOW_LINK_PCT:-20}" <<'PY'
import math, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
link_pct = float(sys.argv[2])
ok = True
print("%-14s %5s %9s %7s %12s %12s %8s" % ("fault", "jobs", "precision", "recall", "latency p50", "max", "bar"))
notes = []
for kind in dict.fromkeys(r[0] for r in rows):
    rs = [dict(kv.split("=") for kv in r[3:]) for r in rows if r[0] == kind]
    link = kind.startswith("link-") or kind.startswith("nic-slow-")
    bar = 60.0 if kind == "straggler-late" else 10.0 if link else 5.0
    # a link (or port) left at no less than the threshold's share is not meant to be named
    applies = not (link and float(kind.rsplit("-", 1)[1]) >= link_pct)
    # a job with any finding, right or wrong, counts for precision
    named = [r for r in rs if int(r["named"]) > 0 or r["wrong"] != "0"]
    right = [r for r in named if r["wrong"] == "0"]
    lat = [float(r["latency"]) for r in rs if r["wrong"] == "0" and r["latency"] != "none"]
    hit = [t for t in lat if t <= bar]
    prec = len(right) / len(named) if named else 1.0
    rec = len(hit) / len(rs)
    p50 = statistics.median(lat) if lat else math.nan
    mx = max(lat) if lat else math.nan
    print("%-14s %5d %9.3f %7.3f %10.1f s %10.1f s %6.0f s%s" % (kind, len(rs), prec, rec, p50, mx, bar,
                                                               "" if applies else " n/a"))
    if not applies:
        notes.append("%s: a cable at %s%% is not under AUTOHA_SLOW_LINK_PCT=%g%% of the median, so not meant "
                     "to be named; recall and latency bars n/a" % (kind, kind.rsplit("-", 1)[1], link_pct))
    ok &= prec >= 0.99 and (not applies or (rec >= 0.97 and (not lat or mx <= bar)))
for n in notes:
    print(n)
print("diagnosis findings (sim/, NCCLSIM_NOISE=0.02): %s (bars: precision 0.99, recall 0.97 within the latency bar: "
      "AUTOHA_HANG_S + 2 = 5 s for hangs and crashes, 60 s for a late straggler, 10 s for links and slow NIC "
      "ports, 5 s for a NIC port down)" % ("OK" if ok else "FAILED"))
sys.exit(0 if ok else 1)
PY
