#!/usr/bin/env bash
# A tuned job that captures its collectives into a CUDA graph and launches it 1,000 times, on sim/
# with libautoha.so preloaded (graph_job under ncclsim-run, AUTOHA_MODE=tune), as users run it.
#
#   run_graph_e2e.sh VARIANT LAUNCHER JOB LIBAUTOHA SIMLIB
#
#   procs8    8 processes, one rank each, capture mode global (schedules carried by the
#             coordinator); the captured calls come after 192 eager ones: each key's search is over
#             (budget 180) and call 192 is one the shim samples for time (1 in 64)
#   threads8  1 process x 8 rank threads, capture mode thread-local (tuned in-process); the captured
#             calls come after 40 eager ones, in the middle of each key's search (a probe's call)
#
# Asserts: the job exits 0 — every capture ended without being invalidated, every launch and every
# eager call succeeded (sim/ refuses a collective, eager or replayed, whose ranks chose different
# configurations) and every result was exact; each process made its 1,000 launches per rank; the
# reports count each key's captured call (captured_calls 1 per rank) and its replays by the graph's
# launches (graph_launched_calls 1,000) within its calls (eager before
# and after, plus the captured one); no autoha error line. procs8 also asserts that the leader's
# keys had left the search before the capture (their converged_at is at most the eager calls), so
# the captured calls ran the tuned (or NCCL's) settled configuration on every rank.
set -uo pipefail
variant=$1 launcher=$2 job=$3 lib=$4 simlib=$5
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN
launches=1000
case $variant in
procs8) args=(-n 8 -- "$job" --mode global) ranks_per_proc=1 eager=192 settled=1 ;;
threads8) args=(-n 1 -- "$job" --threads 8 --mode thread_local) ranks_per_proc=8 eager=40 settled=0 ;;
*) echo "unknown variant $variant"; exit 2 ;;
esac
LD_PRELOAD=$lib AUTOHA_MODE=tune AUTOHA_LOG=warn AUTOHA_REPORT="$tmp/report-%p.json" \
  "$launcher" "${args[@]}" --eager $eager --launches $launches >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
if [ $rc -ne 0 ]; then
  echo "FAIL: the job exited $rc"
  tail -30 "$tmp/err"
  exit 1
fi
if grep -q ' autoha ERROR ' "$tmp/err"; then
  echo "FAIL: autoha logged errors:"; grep ' autoha ERROR ' "$tmp/err"; exit 1
fi
want=$((launches * ranks_per_proc))
n=$(grep -c "graph_job: process .*: $want graph launches, 0 failures, 0 wrong results" "$tmp/out")
nprocs=$((8 / ranks_per_proc))
[ "$n" = "$nprocs" ] || { echo "FAIL: $n of $nprocs processes report $want clean launches"; exit 1; }
python3 - "$tmp" $eager $nprocs $settled $launches <<'PY' || exit 1
import glob, json, sys
tmp, eager, nprocs, settled = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
launches = int(sys.argv[5])
reports = [json.load(open(p)) for p in glob.glob(tmp + "/report-*.json")]
if len(reports) != nprocs:
    sys.exit(f"FAIL: {len(reports)} reports, expected {nprocs}")
contexts = keys = searched = 0
for r in reports:
    for c in r["comms"]:
        contexts += 1
        if len(c["keys"]) != 2:
            sys.exit(f"FAIL: communicator {c['id']} rank {c['rank']} has {len(c['keys'])} keys, expected 2")
        for k in c["keys"]:
            keys += 1
            if k.get("captured_calls") != 1:
                sys.exit(f"FAIL: {k['coll']} bin {k['bin']} of {c['id']} rank {c['rank']}: "
                         f"captured_calls {k.get('captured_calls')}, expected 1")
            if k.get("graph_launched_calls") != launches:
                sys.exit(f"FAIL: {k['coll']} bin {k['bin']} of {c['id']} rank {c['rank']}: "
                         f"graph_launched_calls {k.get('graph_launched_calls')}, expected {launches}")
            if k["calls"] != 2 * eager + 1:
                sys.exit(f"FAIL: {k['coll']} bin {k['bin']}: calls {k['calls']}, expected {2 * eager + 1}")
            t = k.get("tuning")
            if settled and t:
                searched += 1
                if t["state"] == "searching" or t["converged_at"] is None or t["converged_at"] > eager:
                    sys.exit(f"FAIL: {k['coll']} bin {k['bin']}: search state {t['state']}, converged at "
                             f"{t['converged_at']}: not settled before the capture at call {eager}")
            eager_calls = k["default"]["calls"] + (k["applied"]["calls"] if k["applied"]["config"] != k["default"]["config"] else 0)
            if eager_calls > 2 * eager:
                sys.exit(f"FAIL: {k['coll']} bin {k['bin']}: {eager_calls} calls counted as run eagerly, "
                         f"more than the {2 * eager} eager calls (the captured call must not be)")
if settled and searched != 4:
    sys.exit(f"FAIL: {searched} keys with a search in the reports, expected the leader's 4")
if contexts != 16:
    sys.exit(f"FAIL: {contexts} communicator contexts in the reports, expected 16 (8 ranks x 2)")
print(f"PASS: {contexts} contexts, {keys} keys, each with its captured call counted apart")
PY
