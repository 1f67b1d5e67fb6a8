#!/usr/bin/env bash
# One thread drives every local rank (tests/shim/multi_gpu_job.c), run plain and with
# libautoha.so preloaded in MODE, as nccl-tests, JAX and single-process multi-GPU programs drive
# NCCL: the job must complete (no rank may wait for a decision only its own thread can make), its
# data must equal the plain run's and be exact (the job checks every element), the reports must
# count exactly the job's calls and, in tune mode, every searched key must converge.
#
#   run_multi_gpu.sh MODE PROCS GPUS LAUNCHER JOB LIBAUTOHA SIMLIB CHECKER
#
# One process uses ncclCommInitAll; several use a grouped ncclCommInitRank per device. In tune mode
# (AUTOHA_LOG=info) each process writes one decision line per key of its report, not one per GPU,
# and that line names the process's ranks ("[4-7]"), not "[-]".
#   (check_decision_lines: the decision lines of $tmp/shim.err against the reports in $tmp/rep)
set -uo pipefail
mode=$1 procs=$2 gpus=$3 launcher=$4 job=$5 lib=$6 simlib=$7 checker=$8
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN
export NCCLSIM_TOPO=nodes=1,gpus=8
iters=200
[ "$mode" = tune ] && iters=1000 # thousands of calls: every key's search runs to its end
args=(-n "$procs" -- "$job" --gpus "$gpus" --iters $iters)
[ "$procs" = 1 ] && args+=(--init-all)

"$launcher" "${args[@]}" >"$tmp/plain.out" 2>"$tmp/plain.err" || { echo "FAIL: plain run"; tail "$tmp/plain.err"; exit 1; }
mkdir "$tmp/rep"
log=()
[ "$mode" = tune ] && log=(AUTOHA_LOG=info)
env "${log[@]}" LD_PRELOAD=$lib AUTOHA_MODE=$mode AUTOHA_REPORT="$tmp/rep/report-%p.json" AUTOHA_SYNC_WARN_S=5 \
  timeout 150 "$launcher" "${args[@]}" >"$tmp/shim.out" 2>"$tmp/shim.err"
rc=$?
[ $rc -eq 0 ] || { echo "FAIL: the $mode run exited $rc"; tail -20 "$tmp/shim.err"; exit 1; }
if grep -q ' autoha \(ERROR\|WARN\) ' "$tmp/shim.err"; then
  echo "FAIL: autoha complained:"; grep ' autoha \(ERROR\|WARN\) ' "$tmp/shim.err"; exit 1
fi
diff <(grep '^checksum' "$tmp/plain.out" | sort) <(grep '^checksum' "$tmp/shim.out" | sort) >/dev/null ||
  { echo "FAIL: data differ with the shim"; exit 1; }
echo "PASS: $((procs * gpus)) ranks from $procs thread(s), $mode mode: exact data, identical to the plain run"
python3 "$checker" report "$tmp/shim.out" "$tmp/rep" || exit 1
if [ "$mode" = tune ]; then
  python3 "$checker" tuned "$tmp/rep" || exit 1
  python3 "$checker" converged "$tmp/rep" || exit 1
fi
[ "$mode" = tune ] || exit 0
python3 - "$tmp" "$gpus" <<'PY' || exit 1
import glob, json, re, sys
tmp, gpus = sys.argv[1], int(sys.argv[2])
decision = re.compile(r"^[^ :]+:(\d+):\d+ \[([^]]*)\] autoha INFO tune: (\w+) (\S+)-\S+ on comm 0x([0-9a-f]{16}): ")
def size(v):  # ah_size_format of a power of two
    for s, u in ((30, "G"), (20, "M"), (10, "K")):
        if v >= 1 << s: return "%d%s" % (v >> s, u)
    return str(v)
lines = {}  # pid -> [(ranks text, key)]
for l in open(tmp + "/shim.err"):
    m = decision.match(l)
    if m: lines.setdefault(m.group(1), []).append((m.group(2), (m.group(5), m.group(3), m.group(4))))
bad = 0
for path in sorted(glob.glob(tmp + "/rep/report-*.json")):
    pid = re.search(r"report-(\d+)\.json$", path).group(1)
    rep = json.load(open(path))
    ranks = sorted({c["rank"] for c in rep["comms"]})
    want_prefix = "%d-%d" % (ranks[0], ranks[-1]) if len(ranks) == ranks[-1] - ranks[0] + 1 else None
    keys = {(c["id"][2:], k["coll"], size(1 << k["bin"])) for c in rep["comms"] for k in c["keys"]}
    got = lines.get(pid, [])
    counts = {}
    for _, k in got: counts[k] = counts.get(k, 0) + 1
    twice = sorted(k for k, n in counts.items() if n > 1)
    missing = sorted(keys - set(counts))
    prefixes = {p for p, _ in got}
    if len(ranks) != gpus or twice or missing or prefixes != {want_prefix}:
        print("FAIL: process %s (ranks %s): %d decision lines for %d keys; repeated %s; missing %s; "
              "prefixes %s, expected [%s]" % (pid, ranks, len(got), len(keys), twice[:3], missing[:3],
                                              sorted(prefixes), want_prefix)); bad += 1
    else:
        print("process %s: %d keys, one decision line each, all prefixed [%s], e.g. %s"
              % (pid, len(keys), want_prefix, got[0][1]))
sys.exit(1 if bad else 0)
PY
echo "PASS: one decision line per key per process, naming the process's ranks"
