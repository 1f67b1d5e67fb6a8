#!/usr/bin/env bash
# Ranks whose autoha settings differ (a profile missing on one node, another AUTOHA_MODE or
# AUTOHA_OVERRIDE on one rank) must neither hang nor disagree: at join the hub compares every
# rank's settings digest and, on any difference, every rank runs NCCL's own choices, with one
# message naming the ranks and the settings that differ. sim/ refuses (fails the job) any call
# whose ranks chose different configurations, so completion with the plain run's data proves
# agreement.
#
#   run_settings_differ.sh SCENARIO LAUNCHER JOB LIBAUTOHA SIMLIB
#
# Scenarios: profile-tune, profile-fixed (AUTOHA_PROFILE=t-%r.json, the same profile on every
# rank but rank 2, whose file is missing),
# mode (rank 3 observes, the others tune), override (rank 1 has another AUTOHA_OVERRIDE).
set -uo pipefail
scenario=$1 launcher=$2 job=$3 lib=$4 simlib=$5
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN
args=(-n 4 -- "$tmp/per_rank.sh" "$job" --iters 40 --no-split)
# Each rank's process may get its own settings, as nodes of a real job can.
cat >"$tmp/per_rank.sh" <<'SH'
#!/bin/sh
eval "extra=\${RANK_ENV_$RANK:-}"
[ -n "$extra" ] && export "$extra"
exec "$@"
SH
chmod +x "$tmp/per_rank.sh"

"$launcher" "${args[@]}" >"$tmp/plain.out" 2>"$tmp/plain.err" || { echo "FAIL: plain run"; tail "$tmp/plain.err"; exit 1; }
case $scenario in
profile-tune | profile-fixed)
  # a tuned run's report (rank 0's) is the profile, copied to every node but rank 2's
  LD_PRELOAD=$lib AUTOHA_MODE=tune AUTOHA_REPORT="$tmp/r-%r.json" "$launcher" -n 4 -- "$job" --iters 40 --no-split \
    >/dev/null 2>"$tmp/prof.err" || { echo "FAIL: profile run"; tail "$tmp/prof.err"; exit 1; }
  for r in 0 1 3; do cp "$tmp/r-0.json" "$tmp/t-$r.json"; done
  export AUTOHA_MODE=${scenario#profile-} AUTOHA_PROFILE="$tmp/t-%r.json"
  want="rank 2 differs from rank 0 in AUTOHA_PROFILE"
  ;;
mode)
  export AUTOHA_MODE=tune RANK_ENV_3=AUTOHA_MODE=observe
  want="rank 3 differs from rank 0 in AUTOHA_MODE"
  ;;
override)
  export AUTOHA_MODE=fixed AUTOHA_OVERRIDE="allreduce:nchannels=2" RANK_ENV_1="AUTOHA_OVERRIDE=allreduce:nchannels=4"
  want="rank 1 differs from rank 0 in AUTOHA_OVERRIDE"
  ;;
*) echo "unknown scenario $scenario"; exit 2 ;;
esac
start=$(date +%s)
LD_PRELOAD=$lib AUTOHA_REPORT=off timeout 120 "$launcher" "${args[@]}" >"$tmp/shim.out" 2>"$tmp/shim.err"
rc=$? secs=$(($(date +%s) - start))
[ $rc -eq 0 ] || { echo "FAIL: the run with differing settings exited $rc after ${secs} s"; tail -20 "$tmp/shim.err"; exit 1; }
diff <(grep '^checksum' "$tmp/plain.out" | sort) <(grep '^checksum' "$tmp/shim.out" | sort) >/dev/null ||
  { echo "FAIL: data differ"; exit 1; }
grep -q "$want" "$tmp/shim.err" || { echo "FAIL: no message '$want'"; cat "$tmp/shim.err"; exit 1; }
n=$(grep -c "settings differ" "$tmp/shim.err")
[ "$n" -ge 1 ] && [ "$n" -le 4 ] || { echo "FAIL: expected one 'settings differ' line per process at most, got $n"; exit 1; }
echo "PASS: $scenario: completed in ${secs} s with the plain run's data; said: $(grep -m1 'settings differ' "$tmp/shim.err")"
