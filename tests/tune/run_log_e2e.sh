#!/usr/bin/env bash
# End-to-end: NCCL-style logs of a tuned 8-process job on sim/. With AUTOHA_LOG=info and
# AUTOHA_LOG_FILE=$dir/%r.log every rank writes its own file; every line of it carries the prefix
# "host:pid:tid [rank] autoha LEVEL subsys: "; each key of the rank's JSON report has exactly one
# decision line in words; a bad AUTOHA_* value is reported once per process, in the file; and with
# NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING autoha's lines also appear in NCCL's stream (sim's logger
# prints NCCL's format).
#
#   run_log_e2e.sh LAUNCHER JOB LIBAUTOHA SIMLIB
set -uo pipefail
launcher=$1 job=$2 lib=$3 simlib=$4
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE AUTOHA_TUNE_BUDGET NCCL_TUNER_PLUGIN AUTOHA_LOG_SUBSYS AUTOHA_LOG_TIME

LD_PRELOAD=$lib AUTOHA_MODE=tune AUTOHA_LOG=info AUTOHA_LOG_FILE="$tmp/logs/%r.log" \
  AUTOHA_REPORT="$tmp/rep/%r.json" AUTOHA_SYNC_WARN_S=soon NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING \
  "$launcher" -n 8 -- "$job" --iters 200 >"$tmp/job.out" 2>"$tmp/job.err" ||
  { echo "FAIL: tuned run exited $?"; tail -20 "$tmp/job.err"; exit 1; }

python3 - "$tmp" <<'PY'
import glob, json, os, re, sys
tmp = sys.argv[1]
prefix = re.compile(r"^[^ :]+:(\d+):(\d+) \[(-|\d+)\] autoha (ERROR|WARN|INFO|DEBUG) (init|env|tune|coord|qp|report|health): ")
decision = re.compile(r" autoha INFO tune: (\w+) (\S+)-(\S+) on comm 0x([0-9a-f]{16}): ")
def size(v):  # ah_size_format of a power of two
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if v >= 1 << s: return "%d%s" % (v >> s, u)
    return str(v)
bad = 0
for r in range(8):
    path = "%s/logs/%d.log" % (tmp, r)
    if not os.path.exists(path):
        print("FAIL: rank %d wrote no %s" % (r, path)); bad += 1; continue
    lines = open(path).read().splitlines()
    wrong = [l for l in lines if not prefix.match(l)]
    if wrong or not lines:
        print("FAIL: rank %d: %d of %d lines without the prefix, e.g. %r" % (r, len(wrong), len(lines), wrong[:1])); bad += 1
    pids = {prefix.match(l).group(1) for l in lines if prefix.match(l)}
    ranked = {prefix.match(l).group(3) for l in lines if prefix.match(l)} - {"-"}
    if len(pids) != 1 or ranked != {str(r)}:
        print("FAIL: rank %d: file mixes processes %s or ranks %s" % (r, pids, ranked)); bad += 1
    errs = [l for l in lines if "invalid value for AUTOHA_SYNC_WARN_S: 'soon'" in l]
    if len(errs) != 1 or " autoha ERROR env: " not in errs[0]:
        print("FAIL: rank %d: the bad AUTOHA_SYNC_WARN_S was reported %d times, not once" % (r, len(errs))); bad += 1
    got = {}
    for l in lines:
        m = decision.search(l)
        if m:
            k = (m.group(4), m.group(1), m.group(2))
            got[k] = got.get(k, 0) + 1
    rep = json.load(open("%s/rep/%d.json" % (tmp, r)))
    want = {}
    for c in rep["comms"]:
        for k in c["keys"]:
            want[(c["id"][2:], k["coll"], size(1 << k["bin"]))] = k["calls"]
    missing = [k for k in want if got.get(k, 0) != 1]
    extra = [k for k in got if k not in want]
    if missing or extra or not want:
        print("FAIL: rank %d: keys without exactly one decision line %s, decision lines for no key %s (%d keys)"
              % (r, missing, extra, len(want))); bad += 1
    elif r == 0:
        print("rank 0: %d keys, %d decision lines, e.g.:" % (len(want), sum(got.values())))
        print("  " + next(l for l in lines if decision.search(l)))
if bad: sys.exit("FAIL: %d problems" % bad)
print("PASS: 8 ranks, one log file each, every line prefixed, one decision line per key of each report, "
      "a configuration error once per process")
PY
[ $? -eq 0 ] || exit 1
n=$(grep -cE '^[^ :]+:[0-9]+:[0-9]+ \[[0-9]+\] NCCL INFO autoha \[[0-9]+\] tune: (allreduce|allgather|reducescatter|broadcast|reduce) ' "$tmp/job.err")
[ "$n" -ge 8 ] || { echo "FAIL: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING showed $n of autoha's decision lines in NCCL's stream"; head -5 "$tmp/job.err"; exit 1; }
if grep ' autoha ' "$tmp/job.err" | grep -v 'NCCL \(INFO\|WARN\) autoha' | grep -c . >/dev/null; then
  echo "FAIL: autoha's own lines went to stderr despite AUTOHA_LOG_FILE"; exit 1
fi
echo "PASS: NCCL's logger showed $n of autoha's decision lines, in NCCL's format"
