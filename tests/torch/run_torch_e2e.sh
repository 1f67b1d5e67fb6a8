#!/usr/bin/env bash
# End-to-end: an unmodified PyTorch job (torch_job.py: init_process_group("nccl"), all_reduce,
# all_gather_into_tensor, reduce_scatter_tensor, broadcast, barrier, a new_group subgroup, async
# work, a collective captured in a CUDA graph and replayed) on 2 simulated nodes x 4 GPUs, run as a
# user runs it: `ncclsim-run --preload`, which puts sim/'s stand-ins in front of the wheel's own
# libcudart/libnccl. Three runs: plain, then with libautoha.so preloaded in observe and in tune mode.
# Every run must check every result exactly and compute identical data; the reports must show a
# key for each collective and size the job issued, tuned and converged (within 200 calls) for the
# repeated all-reduce and all-gather in tune mode; stderr must hold nothing but autoha's info lines.
#
#   run_torch_e2e.sh LAUNCHER PYTHON LIBAUTOHA
set -uo pipefail
launcher=$1 python=$2 lib=$3
job="$(dirname "$0")/torch_job.py"
. "$(dirname "$0")/../common/loopback_coord.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE AUTOHA_TUNE_BUDGET NCCL_TUNER_PLUGIN LD_PRELOAD
# The NCCL the wheel ships: sim/ emulates its version, so torch sees the NCCL it was built for.
export NCCLSIM_VERSION=2.30.7
# 2 nodes x 4 GPUs: one GPU per rank.
export NCCLSIM_DEVICES=4
unset CUDA_VISIBLE_DEVICES
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME [ENV...]: one job; fails the test on a non-zero exit, a failed check or stray stderr.
run() {
  local name=$1; shift
  mkdir -p "$tmp/$name"
  env "$@" "$launcher" --preload -n 8 --nodes 2 -- "$python" "$job" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    { echo "FAIL: $name run exited $?"; tail -30 "$tmp/$name.err"; exit 1; }
  grep -q '^PASS' "$tmp/$name.out" || { echo "FAIL: $name run printed no PASS"; exit 1; }
  # (CI failed here twice: print() under PYTHONUNBUFFERED wrote a line and its newline in two
  # write(2)s and another rank's line landed between them; torch_job.py's say() writes once. The
  # whole output is printed when it happens, to tell a split line from a rank that skipped its print.)
  local n; n=$(grep -c '^checksum' "$tmp/$name.out")
  if [ "$n" != 8 ]; then
    echo "FAIL: $name run: $n checksum lines, expected 8; its stdout (od -c of the last 512 bytes after it):"
    cat "$tmp/$name.out"; tail -c 512 "$tmp/$name.out" | od -c | tail -12
    echo "--- stderr (last 30 lines) ---"; tail -30 "$tmp/$name.err"; exit 1
  fi
  # autoha's banner and other info lines are allowed; anything else on stderr is a failure.
  if grep -v -E ' autoha INFO ' "$tmp/$name.err" | grep -c . >/dev/null; then
    echo "FAIL: $name run wrote to stderr:"; grep -v -E ' autoha INFO ' "$tmp/$name.err" | head -20; exit 1
  fi
  echo "PASS: $name run: 8 ranks, every collective exact, nothing on stderr beyond autoha's info"
}

run plain
run observe LD_PRELOAD="$lib" AUTOHA_MODE=observe AUTOHA_REPORT="$tmp/observe/report-%p.json"
run tune LD_PRELOAD="$lib" AUTOHA_MODE=tune AUTOHA_REPORT="$tmp/tune/report-%p.json"

for name in observe tune; do
  diff <(grep '^checksum' "$tmp/plain.out" | sort) <(grep '^checksum' "$tmp/$name.out" | sort) >/dev/null ||
    { echo "FAIL: data differ between the plain and the $name run"; exit 1; }
done
echo "PASS: identical data with and without libautoha.so (observe and tune)"

python3 - "$tmp" <<'PY'
import glob, json, sys
tmp = sys.argv[1]
want = []
for line in open(tmp + "/plain.out"):
    if line.startswith("calls "):
        f = dict(kv.split("=") for kv in line.split()[1:])
        want.append({k: (v if k == "coll" else int(v)) for k, v in f.items()})
if not want:
    sys.exit("FAIL: the job printed no calls")
bad = 0
for mode in ("observe", "tune"):
    reports = [json.load(open(p)) for p in glob.glob(f"{tmp}/{mode}/*.json")]
    if len(reports) != 8:
        sys.exit(f"FAIL: {mode}: {len(reports)} reports, expected 8")
    for w in want:
        name = f"{mode}: n={w['nranks']} {w['coll']} {w['bytes']} B"
        keys = [k for r in reports for c in r["comms"] if c["nranks"] == w["nranks"] for k in c["keys"]
                if k["coll"] == w["coll"] and k["bytes"]["min"] <= w["bytes"] <= k["bytes"]["max"]]
        if not keys or max(k["calls"] for k in keys) < w["n"]:
            print(f"FAIL: {name}: no key with {w['n']} calls in the reports"); bad += 1; continue
        tuned = [k["tuning"] for k in keys if k.get("tuning")]
        if mode == "tune" and w["tune"]:
            ok = [t for t in tuned if t["state"] == "converged" and 0 < t["calls_spent"] <= 200
                  and t["converged_at"] is not None and t["converged_at"] <= min(200, w["n"])
                  and t["winner_us"] and 0 < t["winner_us"] <= t["default_us"] * 1.0001]
            if not ok:
                print(f"FAIL: {name}: not converged: {tuned}"); bad += 1; continue
            t = ok[0]
            print(f"PASS: {name}: converged after {t['calls_spent']} calls, default {t['default_us']:.2f} us,"
                  f" tuned {t['winner_us']:.2f} us ({t['winner']['text']})")
        elif mode == "observe" and tuned:
            print(f"FAIL: {name}: observe mode tuned it"); bad += 1
        else:
            print(f"PASS: {name}: {max(k['calls'] for k in keys)} calls in the report")
if bad:
    sys.exit(f"FAIL: {bad} report checks")
PY
