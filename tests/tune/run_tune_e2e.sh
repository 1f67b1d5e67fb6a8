#!/usr/bin/env bash
# End-to-end: an 8-thread job on sim/ with libautoha.so preloaded and AUTOHA_MODE=tune. Every key
# the job issues often must converge within 200 calls, and the report must show, per key, NCCL's
# default time, the tuned time and the calls spent; the data must be identical to a run without
# the shim (the tuner changes configurations between calls, never results).
#
#   run_tune_e2e.sh LAUNCHER JOB LIBAUTOHA SIMLIB
set -uo pipefail
launcher=$1 job=$2 lib=$3 simlib=$4
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE AUTOHA_TUNE_BUDGET NCCL_TUNER_PLUGIN
iters=120

"$launcher" -n 1 -- "$job" --threads 8 --iters $iters >"$tmp/plain.out" 2>"$tmp/plain.err" ||
  { echo "FAIL: plain run exited $?"; tail -20 "$tmp/plain.err"; exit 1; }
mkdir -p "$tmp/rep"
LD_PRELOAD=$lib AUTOHA_MODE=tune AUTOHA_REPORT="$tmp/rep/report-%p.json" \
  "$launcher" -n 1 -- "$job" --threads 8 --iters $iters >"$tmp/tune.out" 2>"$tmp/tune.err" ||
  { echo "FAIL: tuned run exited $?"; tail -20 "$tmp/tune.err"; exit 1; }
if grep -q ' autoha ERROR ' "$tmp/tune.err"; then
  echo "FAIL: autoha logged errors:"; grep ' autoha ERROR ' "$tmp/tune.err"; exit 1
fi
diff <(grep '^checksum' "$tmp/plain.out" | sort) <(grep '^checksum' "$tmp/tune.out" | sort) >/dev/null ||
  { echo "FAIL: data differ between the plain and the tuned run"; exit 1; }
echo "PASS: $(grep -c '^checksum' "$tmp/tune.out") ranks computed identical data with tuning on"

python3 - "$tmp/tune.out" "$tmp/rep" <<'PY'
import collections, glob, json, sys
job_out, rep_dir = sys.argv[1], sys.argv[2]
want = {}
for line in open(job_out):
    if line.startswith("calls "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        want[(int(f["nranks"]), f["coll"], int(f["bin"]))] = int(f["n"])
if not want:
    sys.exit("FAIL: the job printed no calls")
seen = collections.defaultdict(list)
for path in glob.glob(rep_dir + "/*.json"):
    for comm in json.load(open(path))["comms"]:
        for k in comm["keys"]:
            if k.get("tuning"):
                seen[(comm["nranks"], k["coll"], k["bin"])].append(k["tuning"])
bad = 0
print("%-26s %6s %10s %10s %7s %6s %s" % ("key", "calls", "default_us", "tuned_us", "speedup", "spent", "winner"))
for key, n in sorted(want.items()):
    ts = seen.get(key)
    name = "n=%d %s bin %d" % key
    if not ts:
        print("FAIL: %s (%d calls) has no tuning entry in the report" % (name, n)); bad += 1; continue
    for t in ts:
        ok = (t["state"] == "converged" and 0 < t["calls_spent"] <= 200 and t["converged_at"] is not None
              and t["converged_at"] <= min(200, n) and t["default_us"] and t["default_us"] > 0
              and t["winner_us"] and 0 < t["winner_us"] <= t["default_us"] * 1.0001 and t["probes_count"] >= 1)
        if not ok:
            print("FAIL: %s: %s" % (name, json.dumps({x: t[x] for x in t if x != "probes"}))); bad += 1
    t = ts[0]
    print("%-26s %6d %10.2f %10.2f %7.3f %6d %s" % (name, n, t["default_us"], t["winner_us"],
          t["default_us"] / t["winner_us"], t["calls_spent"], t["winner"]["text"]))
if bad:
    sys.exit("FAIL: %d key entries not converged or incomplete" % bad)
print("PASS: %d keys, every one converged within 200 calls; the report shows default time, tuned "
      "time and calls spent (sim/ timing)" % len(want))
PY
