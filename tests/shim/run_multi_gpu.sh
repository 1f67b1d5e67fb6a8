#!/usr/bin/env bash
# One thread drives every local rank (tests/shim/multi_gpu_job.c), run plain and with
# libautoha.so preloaded in MODE, as nccl-tests, JAX and single-process multi-GPU programs drive
# NCCL: the job must complete (no rank may wait for a decision only its own thread can make), its
# data must equal the plain run's and be exact (the job checks every element), the reports must
# count exactly the job's calls and, in tune mode, every searched key must converge.
#
#   run_multi_gpu.sh MODE PROCS GPUS LAUNCHER JOB LIBAUTOHA SIMLIB CHECKER
#
# One process uses ncclCommInitAll; several use a grouped ncclCommInitRank per device.
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
LD_PRELOAD=$lib AUTOHA_MODE=$mode AUTOHA_REPORT="$tmp/rep/report-%p.json" AUTOHA_SYNC_WARN_S=5 \
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
