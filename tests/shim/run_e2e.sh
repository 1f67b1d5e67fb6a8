#!/usr/bin/env bash
# End-to-end tests of libautoha.so on sim/: shim_job run under ncclsim-run, without and with the
# shim preloaded, as users run it.
#
#   run_e2e.sh SCENARIO LAUNCHER JOB LIBAUTOHA SIMLIB CHECKER
#
# Scenarios:
#   procs8      8 processes: identical data with the shim; the reports' keys and calls match the
#               job's calls exactly
#   threads8    4 processes x 2 threads: the same
#   override-V  emulating NCCL V (e.g. 2.28.9): an override is applied on every rank for the
#               matching keys only (NCCLSIM_TRACE), data identical, report matches
#   malformed   a malformed override logs one error naming the bad token; the job completes, the
#               valid rule still applies
#   v218        emulating NCCL 2.18 (no tuner ABI): the shim says once that it observes only, the
#               job completes with identical data and the report matches its calls
#   tune-threads  AUTOHA_MODE=tune, 1 process x 8 threads (tuned in-process): sim/ refuses any call
#               whose ranks disagree, so completion with identical data proves every rank ran the
#               leader's schedule; the reports show searches that measured several configurations
#   tune-procs  the same with 4 processes x 2 threads (schedules carried by the coordinator)
#   profile     a tune run's report loaded with AUTOHA_PROFILE by a fixed run of the same job: keys
#               start on the profile's configurations (source "profile"), data identical; the same
#               profile offered to a job of another shape is refused with a message, the job completes
#   tuner-none  NCCL_TUNER_PLUGIN=none (NCCL 2.28 loads no tuner): the shim says once per process that
#               it observes only, data identical, the report (counted from the API) matches
#   refused     an override naming a pair this topology cannot run (CollNet: no SHARP on sim/'s
#               default topology) is refused with a message, never forced: every call runs what it
#               runs without the shim, the job completes
#   disabled    AUTOHA_ENABLE=0: pure pass-through — every call runs what it runs without the shim
#               (trace), data identical, no report written
#   interval    AUTOHA_REPORT_INTERVAL_S=1: a running job (2 ranks, 40 iterations 100 ms apart) has
#               a report on disk before it ends
#   chain       the user names their own tuner (env SHIM_USER_TUNER) in NCCL_TUNER_PLUGIN: with the
#               shim and an override, every call not overridden runs what the user's tuner chose
#               (the trace equals the run with the user's tuner alone), overridden calls the override
#   chain-abi   the user's tuner speaks another ABI than autoha's face (tests/simtuner's plugins, env
#               SHIM_SIMTUNER_DIR): v7 under NCCL 2.30, v6 and v7 under 2.32.6; its constants edit
#               and its choices hold in observe mode
#   lazy        NCCL loaded after main started: JOB is lazy_main, which dlopens (RTLD_LOCAL, as Python
#               opens extension modules) the job built as a library linking libnccl (env
#               SHIM_JOB_MODULE); 2 processes x 2 threads in tune mode. A call made before the
#               dlopen fails with ncclInvalidUsage and one error line; after it, NCCL loaded autoha
#               as its tuner in both processes, data identical, the reports match the job's calls,
#               and every key's search converged with all ranks on one configuration
#   report-default  AUTOHA_REPORT unset, run from an empty working directory: all the job's reports
#               land in one folder, autoha-reports/<job>/, named <host>-<pid>.json, one per process,
#               and nothing else appears; <job> is SLURM_JOB_ID (made one safe folder name),
#               TORCHELASTIC_RUN_ID, or without either (torchrun's "none") comm-<world identity>,
#               which both processes compute alike
#   nics        the report's topology names the NICs sim/ was given (NCCLSIM_TOPO nic=COUNTxGBITS[xPORTS]),
#               as the shim reads them from the libibverbs NCCL uses: 2 nodes of 4 NICs at 200 Gb/s,
#               one node of 8 bonded dual-port 400 Gb/s NICs (one 800 Gb/s port each), NCCL_IB_HCA
#               keeping 2 of 4; with no libibverbs to ask (NCCL_IBVERBS_LIB naming none, one node)
#               the count is this host's /sys/class/infiniband, "unknown" when it has none
#   lazy-disabled  the same job with AUTOHA_ENABLE=0: every call succeeds and runs what it runs
#               without the shim (trace), no report, nothing on stderr
set -uo pipefail
scenario=$1 launcher=$2 job=$3 lib=$4 simlib=$5 checker=$6
. "$(dirname "$0")/../common/e2e_env.sh"
unset AUTOHA_MODE AUTOHA_OVERRIDE AUTOHA_PROFILE NCCL_TUNER_PLUGIN

# run NAME PRELOAD(0|1) -- launcher args...: stdout/stderr in $tmp/NAME.{out,err}, reports in $tmp/NAME.rep
run() {
  local name=$1 pre=$2
  shift 3
  mkdir -p "$tmp/$name.rep"
  if [ "$pre" = 1 ]; then
    LD_PRELOAD=$lib AUTOHA_REPORT="$tmp/$name.rep/report-%p.json" NCCLSIM_TRACE="$tmp/$name.trace" \
      "$launcher" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  else
    NCCLSIM_TRACE="$tmp/$name.trace" "$launcher" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"
  fi
  local rc=$?
  if [ $rc -ne 0 ]; then
    echo "FAIL: run $name exited $rc"
    tail -20 "$tmp/$name.err"
    exit 1
  fi
}

same_data() { # A B: identical checksums on every rank
  diff <(grep '^checksum' "$tmp/$1.out" | sort) <(grep '^checksum' "$tmp/$2.out" | sort) >/dev/null ||
    { echo "FAIL: data differ between $1 and $2"; diff <(grep '^checksum' "$tmp/$1.out" | sort) <(grep '^checksum' "$tmp/$2.out" | sort); exit 1; }
  echo "PASS: $(grep -c '^checksum' "$tmp/$1.out") ranks computed identical data ($1 vs $2)"
}

no_errors() { # NAME: no autoha error line
  if grep -q ' autoha ERROR ' "$tmp/$1.err"; then
    echo "FAIL: autoha logged errors in $1:"; grep ' autoha ERROR ' "$tmp/$1.err"; exit 1
  fi
}

logged() { # NAME PATTERN WHAT: a line of run NAME's stderr matches PATTERN, which says WHAT
  grep -q "$2" "$tmp/$1.err" || { echo "FAIL: no line saying $3"; cat "$tmp/$1.err"; exit 1; }
  echo "PASS: $3: $(grep -m1 "$2" "$tmp/$1.err")"
}

per_process() { # NAME PATTERN WHAT: one line per process (1 to 4) of run NAME's stderr says WHAT
  local n
  n=$(grep -c "$2" "$tmp/$1.err")
  [ "$n" -ge 1 ] && [ "$n" -le 4 ] || { echo "FAIL: expected one line per process saying $3, got $n"; cat "$tmp/$1.err"; exit 1; }
  echo "PASS: $3 ($n processes)"
}

OV_SPEC="allreduce@1M-4M:algo=ring,proto=ll128,nchannels=2"
OV_CHECK="allreduce 1048576 4194304 ring ll128 2"

case $scenario in
procs8 | threads8)
  if [ "$scenario" = procs8 ]; then args=(-n 8 -- "$job"); else args=(-n 4 -- "$job" --threads 2); fi
  run plain 0 -- "${args[@]}"
  run shim 1 -- "${args[@]}"
  same_data plain shim
  no_errors shim
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  ;;
override-*)
  ver=${scenario#override-}
  export NCCLSIM_VERSION=$ver
  extra=()
  case $ver in 2.19* | 2.20*) extra=(--no-split) ;; esac # v1: one tuner state per process
  run plain 0 -- -n 4 -- "$job" --threads 2 "${extra[@]}"
  AUTOHA_MODE=fixed AUTOHA_OVERRIDE=$OV_SPEC NCCLSIM_DEBUG=INFO run shim 1 -- -n 4 -- "$job" --threads 2 "${extra[@]}"
  same_data plain shim
  no_errors shim
  case $ver in 2.19* | 2.20*) abi=1 ;; 2.21*) abi=2 ;; 2.22* | 2.23*) abi=3 ;; 2.24* | 2.25* | 2.26* | 2.27*) abi=4 ;;
    2.28* | 2.29*) abi=5 ;; 2.32.[6-9]* | 2.3[3-9]*) abi=7 ;; *) abi=6 ;; esac
  n=$(grep -c "tuner: using ncclTunerPlugin_v$abi (autoha)" "$tmp/shim.err")
  [ "$n" -eq 4 ] || { echo "FAIL: expected NCCL $ver to load autoha as ncclTunerPlugin_v$abi in all 4 processes (got $n)"; grep tuner "$tmp/shim.err" | head; exit 1; }
  echo "PASS: emulated NCCL $ver loaded autoha as ncclTunerPlugin_v$abi in every process"
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" $OV_CHECK || exit 1
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  ;;
malformed)
  run plain 0 -- -n 4 -- "$job" --threads 2
  AUTOHA_MODE=fixed AUTOHA_OVERRIDE="$OV_SPEC;allgather:nchanels=8" run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  logged shim "nchanels" "the malformed rule is reported by its bad token"
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" $OV_CHECK || exit 1
  ;;
v218)
  export NCCLSIM_VERSION=2.18.3
  run plain 0 -- -n 4 -- "$job" --threads 2
  run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  no_errors shim
  per_process shim "no tuner plugin ABI" "the shim observes and reports only"
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  ;;
tune-threads | tune-procs)
  if [ "$scenario" = tune-threads ]; then args=(-n 1 -- "$job" --threads 8 --iters 20); else args=(-n 4 -- "$job" --threads 2 --iters 20); fi
  run plain 0 -- "${args[@]}"
  AUTOHA_MODE=tune run shim 1 -- "${args[@]}"
  same_data plain shim
  no_errors shim
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  python3 "$checker" tuned "$tmp/shim.rep" || exit 1
  ;;
profile)
  args=(-n 1 -- "$job" --threads 8 --iters 20)
  run plain 0 -- "${args[@]}"
  AUTOHA_MODE=tune run tuned 1 -- "${args[@]}"
  prof=$(ls "$tmp"/tuned.rep/*.json | head -1)
  AUTOHA_MODE=fixed AUTOHA_PROFILE=$prof AUTOHA_LOG=info run warm 1 -- "${args[@]}"
  same_data plain warm
  no_errors warm
  logged warm "profile .* loaded" "the profile was loaded"
  python3 "$checker" report "$tmp/warm.out" "$tmp/warm.rep" || exit 1
  python3 - "$tmp/warm.rep" <<'PY' || exit 1
import glob, json, sys
n = sum(1 for f in glob.glob(sys.argv[1] + "/*.json") for c in json.load(open(f))["comms"]
        for k in c["keys"] if k["source"] == "profile")
if n == 0:
    print("FAIL: no key started from the profile")
    sys.exit(1)
print("PASS: %d (rank, key) entries ran the profile's configuration" % n)
PY
  AUTOHA_MODE=fixed AUTOHA_PROFILE=$prof run other 1 -- -n 1 -- "$job" --threads 4 --iters 2
  logged other "profile" "a profile of another shape is refused"
  ;;
tuner-none)
  export NCCL_TUNER_PLUGIN=none
  run plain 0 -- -n 4 -- "$job" --threads 2
  run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  no_errors shim
  per_process shim "did not load autoha as its tuner" "NCCL did not load autoha as its tuner: observes only"
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" || exit 1
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  ;;
refused)
  run plain 0 -- -n 4 -- "$job" --threads 2
  AUTOHA_MODE=fixed AUTOHA_OVERRIDE="allreduce:algo=collnetdirect,proto=simple" run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  logged shim "refused" "the impossible override is refused"
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" || exit 1
  ;;
disabled)
  run plain 0 -- -n 4 -- "$job" --threads 2
  AUTOHA_ENABLE=0 AUTOHA_MODE=fixed AUTOHA_OVERRIDE=$OV_SPEC run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" || exit 1
  [ -z "$(ls "$tmp/shim.rep")" ] || { echo "FAIL: a report was written with AUTOHA_ENABLE=0"; exit 1; }
  [ ! -s "$tmp/shim.err" ] || { echo "FAIL: output on stderr with AUTOHA_ENABLE=0:"; cat "$tmp/shim.err"; exit 1; }
  echo "PASS: AUTOHA_ENABLE=0 is a pure pass-through"
  ;;
interval)
  mkdir -p "$tmp/iv.rep"
  LD_PRELOAD=$lib AUTOHA_MODE=fixed AUTOHA_REPORT_INTERVAL_S=1 AUTOHA_REPORT="$tmp/iv.rep/report-%p.json" \
    "$launcher" -n 2 -- "$job" --iters 40 --pause-ms 100 >"$tmp/iv.out" 2>"$tmp/iv.err" &
  pid=$!
  seen=0
  while kill -0 $pid 2>/dev/null; do
    if [ -n "$(ls "$tmp/iv.rep" 2>/dev/null | grep '\.json$')" ]; then seen=1; break; fi
    sleep 0.2
  done
  running=0
  kill -0 $pid 2>/dev/null && running=1
  wait $pid || { echo "FAIL: the loop job failed"; cat "$tmp/iv.err"; exit 1; }
  [ $seen = 1 ] && [ $running = 1 ] || { echo "FAIL: no report appeared while the job ran"; exit 1; }
  python3 -c "import json,glob,sys; [json.load(open(f)) for f in glob.glob(sys.argv[1] + '/*.json')]" "$tmp/iv.rep" ||
    { echo "FAIL: a report does not parse"; exit 1; }
  echo "PASS: the interval report was on disk while the job ran"
  ;;
nics)
  # topo NAME: the "topology" of NAME's reports, one line per distinct value
  topo() { python3 -c "import json,glob,sys; print('\n'.join(sorted({json.load(open(f))['topology'] for f in glob.glob(sys.argv[1] + '/*.json')})))" "$tmp/$1.rep"; }
  # expect NAME NICS: every report of NAME says nics=NICS
  expect() {
    local t; t=$(topo "$1")
    [ -n "$t" ] && ! grep -qv "; nics=$2; " <<<"$t" ||
      { echo "FAIL: $1: expected nics=$2 in every report's topology, got: $t"; exit 1; }
    echo "PASS: $1: $(grep -o "nodes=[^;]*; ranks=[^;]*" <<<"$t" | head -1): nics=$2"
  }
  NCCLSIM_TOPO=nodes=2,nic=4x200 run two 1 -- -n 4 --nodes 2 -- "$job" --iters 2 --no-split
  expect two 4x200Gb/s
  NCCLSIM_TOPO=nic=8x400x2 run bonded 1 -- -n 2 -- "$job" --iters 2 --no-split
  expect bonded 8x800Gb/s
  NCCLSIM_TOPO=nodes=2,nic=4x200 NCCL_IB_HCA=mlx5_0,mlx5_1 run hca 1 -- -n 4 --nodes 2 -- "$job" --iters 2 --no-split
  expect hca 2x200Gb/s
  host=unknown
  if [ -d /sys/class/infiniband ] && [ -n "$(ls /sys/class/infiniband)" ]; then
    host="$(ls /sys/class/infiniband | wc -l)x$(cut -d' ' -f1 "/sys/class/infiniband/$(ls /sys/class/infiniband | sort | head -1)/ports/1/rate")Gb/s"
  fi
  NCCL_IBVERBS_LIB=/nonexistent/libibverbs.so.1 run none 1 -- -n 2 -- "$job" --iters 2 --no-split
  expect none "$host"
  ;;
chain)
  [ -n "${SHIM_USER_TUNER:-}" ] || { echo "FAIL: SHIM_USER_TUNER is not set"; exit 1; }
  export NCCL_TUNER_PLUGIN=$SHIM_USER_TUNER
  run plain 0 -- -n 4 -- "$job" --threads 2
  grep -q "tuned=1" "$tmp/plain.trace" || { echo "FAIL: the user's tuner changed nothing on its own"; exit 1; }
  AUTOHA_MODE=fixed AUTOHA_OVERRIDE=$OV_SPEC AUTOHA_LOG=info run shim 1 -- -n 4 -- "$job" --threads 2
  same_data plain shim
  no_errors shim
  grep -q "runs underneath autoha" "$tmp/shim.err" || { echo "FAIL: the shim did not chain the user's tuner"; exit 1; }
  python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" $OV_CHECK || exit 1
  python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
  ;;
chain-abi)
  # a user's tuner of another ABI than the one NCCL loads autoha with: a v7 one under NCCL 2.30
  # (autoha's v6 face), a v6 one under 2.32.6 (autoha's v7 face), and v7 under v7; each edits NCCL's
  # constants (Ring/LL 1 ms slower: no 4 KiB call runs it then), and in observe mode the calls are
  # what the user's tuner alone makes of them where NCCL could load it itself
  [ -n "${SHIM_SIMTUNER_DIR:-}" ] || { echo "FAIL: SHIM_SIMTUNER_DIR is not set"; exit 1; }
  for c in 2.30.7:7:6 2.32.6:6:7 2.32.6:7:7; do
    IFS=: read -r ver user face <<<"$c"
    export NCCLSIM_VERSION=$ver NCCL_TUNER_PLUGIN=$SHIM_SIMTUNER_DIR/libsimtuner-v$user.so
    export SIMTUNER_POLICY=slow_ring_ll SIMTUNER_LOG=$tmp/plain-$user-$face.log
    run plain 0 -- -n 4 -- "$job" --threads 2
    export SIMTUNER_LOG=$tmp/shim-$user-$face.log
    AUTOHA_MODE=observe AUTOHA_LOG=info NCCLSIM_DEBUG=INFO run shim 1 -- -n 4 -- "$job" --threads 2
    same_data plain shim
    no_errors shim
    n=$(grep -c "tuner: using ncclTunerPlugin_v$face (autoha)" "$tmp/shim.err")
    [ "$n" -eq 4 ] || { echo "FAIL ($c): NCCL $ver should load autoha as v$face in 4 processes (got $n)"; exit 1; }
    logged shim "ncclTunerPlugin_v$user) runs underneath autoha" "NCCL $ver: the user's v$user tuner runs underneath autoha's v$face face"
    k=$(grep -c "ringllbase=1006.60" "$tmp/shim-$user-$face.log")
    [ "$k" -ge 4 ] || { echo "FAIL ($c): the user's tuner's edit was not seen in its init (got $k)"; exit 1; }
    if [ "$user" = 7 ]; then # the fifth row: NCCL 2.32.6's (sim/: Blackwell's values), none under 2.30
      row=$(grep -o "llmax4=[0-9.-]*" "$tmp/shim-$user-$face.log" | sort -u)
      if [ "$face" = 7 ]; then [ "$row" != "llmax4=0.00" ] && [ -n "$row" ]; else [ "$row" = "llmax4=0.00" ]; fi ||
        { echo "FAIL ($c): the v7 tuner's fifth row read $row"; exit 1; }
    fi
    # the edit reached NCCL's table: no 4 KiB call runs Ring/LL (NCCL's own pick there)
    if grep "bytes=4096 " "$tmp/shim.trace" | grep -c "algo=Ring proto=LL " >/dev/null; then
      echo "FAIL ($c): a 4 KiB call ran Ring/LL: the user's tuner's constants edit was lost"; exit 1
    fi
    # where NCCL can load the user's tuner itself (not v7 under 2.30), autoha observing changes nothing
    if [ "$user" -le "$face" ]; then python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" || exit 1; fi
    echo "PASS ($c): NCCL $ver, a v$user user tuner under autoha's v$face face: its constants edit and choices hold"
  done
  ;;
report-default)
  unset AUTOHA_REPORT SLURM_JOB_ID TORCHELASTIC_RUN_ID LSB_JOBID PBS_JOBID FLUX_JOB_ID PMIX_NAMESPACE
  host=$(hostname)
  for c in slurm torchrun none; do
    case $c in
    slurm) ids=(SLURM_JOB_ID="4242 step/1" TORCHELASTIC_RUN_ID=run-7) want='4242_step_1' ;;
    torchrun) ids=(TORCHELASTIC_RUN_ID=run-7) want='run-7' ;;
    none) ids=(TORCHELASTIC_RUN_ID=none) want='comm-[0-9a-f]{16}' ;;
    esac
    cwd=$tmp/cwd-$c
    mkdir -p "$cwd"
    (cd "$cwd" && env "${ids[@]}" LD_PRELOAD=$lib "$launcher" -n 2 -- "$job" --threads 2 --iters 2) \
      >"$tmp/$c.out" 2>"$tmp/$c.err" || { echo "FAIL: the $c job exited $?"; tail -20 "$tmp/$c.err"; exit 1; }
    no_errors "$c"
    [ "$(ls -A "$cwd")" = autoha-reports ] || { echo "FAIL ($c): the working directory holds more than autoha-reports:"; ls -A "$cwd"; exit 1; }
    dirs=$(ls -A "$cwd/autoha-reports")
    [ "$(echo "$dirs" | wc -l)" -eq 1 ] && echo "$dirs" | grep -Eqx "$want" ||
      { echo "FAIL ($c): expected one job folder named $want, got:"; echo "$dirs"; exit 1; }
    files=$(ls -A "$cwd/autoha-reports/$dirs")
    n=$(echo "$files" | grep -Ecx "$host-[0-9]+\.json")
    cred=$(echo "$files" | grep -Ex "hub-$host-[0-9]+\.cred")
    # the process that runs the hub also leaves its credentials for `autoha status`, readable by the
    # job's user only
    [ "$n" -eq 2 ] && [ -n "$cred" ] && [ "$(echo "$files" | wc -l)" -eq 3 ] ||
      { echo "FAIL ($c): expected 2 reports named $host-<pid>.json and hub-$host-<pid>.cred, got:"; echo "$files"; exit 1; }
    [ "$(stat -c %a "$cwd/autoha-reports/$dirs/$cred")" = 600 ] ||
      { echo "FAIL ($c): $cred has mode $(stat -c %a "$cwd/autoha-reports/$dirs/$cred"), not 600"; exit 1; }
    python3 "$checker" report "$tmp/$c.out" "$cwd/autoha-reports/$dirs" || exit 1
    echo "PASS ($c): the job's 2 reports and the hub's credentials are in autoha-reports/$dirs/ and nothing else was written"
  done
  ;;
lazy | lazy-disabled)
  [ -n "${SHIM_JOB_MODULE:-}" ] || { echo "FAIL: SHIM_JOB_MODULE is not set"; exit 1; }
  iters=6
  [ "$scenario" = lazy ] && iters=150 # enough calls for every key's search to converge
  run plain 0 -- -n 2 -- "$job" "$SHIM_JOB_MODULE" --threads 2 --iters $iters
  if [ "$scenario" = lazy ]; then
    AUTOHA_MODE=tune NCCLSIM_DEBUG=INFO run shim 1 -- -n 2 -- "$job" --early-call "$SHIM_JOB_MODULE" --threads 2 --iters $iters
    same_data plain shim
    n=$(grep -c '^early ncclGetUniqueId: ' "$tmp/shim.out")
    [ "$n" -eq 2 ] || { echo "FAIL: expected the early call in both processes (got $n)"; exit 1; }
    errs=$(grep ' autoha ERROR ' "$tmp/shim.err" | grep -vc 'ncclGetUniqueId called but no NCCL is loaded')
    n=$(grep -c 'ERROR [a-z]*: ncclGetUniqueId called but no NCCL is loaded' "$tmp/shim.err")
    [ "$errs" -eq 0 ] && [ "$n" -eq 2 ] ||
      { echo "FAIL: expected one error per process, for the call before NCCL was loaded:"; grep ' autoha ' "$tmp/shim.err"; exit 1; }
    echo "PASS: before the dlopen the call failed with ncclInvalidUsage and said why, in both processes"
    n=$(grep -c "tuner: using ncclTunerPlugin_v[0-9]* (autoha)" "$tmp/shim.err")
    [ "$n" -eq 2 ] || { echo "FAIL: expected NCCL to load autoha as its tuner in both processes (got $n)"; grep tuner "$tmp/shim.err" | head; exit 1; }
    echo "PASS: NCCL, loaded after main, loaded autoha as its tuner in both processes"
    python3 "$checker" report "$tmp/shim.out" "$tmp/shim.rep" || exit 1
    python3 "$checker" tuned "$tmp/shim.rep" || exit 1
    python3 "$checker" converged "$tmp/shim.rep" || exit 1
  else
    AUTOHA_ENABLE=0 AUTOHA_MODE=fixed AUTOHA_OVERRIDE=$OV_SPEC run shim 1 -- -n 2 -- "$job" "$SHIM_JOB_MODULE" --threads 2 --iters $iters
    same_data plain shim
    python3 "$checker" trace "$tmp/plain.trace" "$tmp/shim.trace" || exit 1
    [ -z "$(ls "$tmp/shim.rep")" ] || { echo "FAIL: a report was written with AUTOHA_ENABLE=0"; exit 1; }
    [ ! -s "$tmp/shim.err" ] || { echo "FAIL: output on stderr with AUTOHA_ENABLE=0:"; cat "$tmp/shim.err"; exit 1; }
    echo "PASS: AUTOHA_ENABLE=0 passes every call through to the NCCL loaded after main"
  fi
  ;;
*)
  echo "unknown scenario $scenario"
  exit 2
  ;;
esac
echo "PASS: $scenario"
