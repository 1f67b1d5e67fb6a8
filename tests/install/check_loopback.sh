#!/usr/bin/env bash
# Loopback only: ctest gives every test AUTOHA_COORD_IFNAME=lo (tests/ctest_env.cmake), and
# ncclsim-run gives its jobs the same unless the caller set one, so a job's hub listens on
# 127.0.0.0/8 even when nothing else says where; and every bench script that preloads libautoha.so
# exports AUTOHA_COORD_IFNAME=lo unless the caller set one (a bench run by hand gets no ctest).
# Last, the audit of the whole run: CTEST_LOG is ctest's log of the run in progress, holding the
# output of every test that ended before this one (ctest runs this test after every e2e and bench
# test of the run: it is their fixture's cleanup, tests/CMakeLists.txt); each "hub listening on"
# line in it must name a 127.0.0.0/8 address, and the test that printed another is named.
#   check_loopback.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR CTEST_LOG
set -u
run=$1 job=$2 lib=$3 simlib=$4 ctest_log=$5
fail=0
[ "${AUTOHA_COORD_IFNAME:-}" = lo ] ||
  { echo "FAIL: this test runs with AUTOHA_COORD_IFNAME='${AUTOHA_COORD_IFNAME:-}' (ctest sets lo)"; fail=1; }
# shellcheck disable=SC2016 # the job's shell expands it
got=$(env -u AUTOHA_COORD_IFNAME "$run" -n 1 -- sh -c 'echo "ifname=$AUTOHA_COORD_IFNAME"' 2>&1)
[ "$got" = "ifname=lo" ] || { echo "FAIL: ncclsim-run gave its job '$got' (expected ifname=lo)"; fail=1; }
# shellcheck disable=SC2016
got=$(AUTOHA_COORD_IFNAME=eth7 "$run" -n 1 -- sh -c 'echo "ifname=$AUTOHA_COORD_IFNAME"' 2>&1)
[ "$got" = "ifname=eth7" ] || { echo "FAIL: ncclsim-run overrode the caller's interface: '$got'"; fail=1; }
bench=$(dirname "$0")/../../bench
n=0
for f in $(grep -rl --include='*.sh' 'LD_PRELOAD=' "$bench"); do
  n=$((n + 1))
  # shellcheck disable=SC2016 # the text of the line, not its value
  grep -qF 'export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}' "$f" ||
    { echo "FAIL: ${f#"$bench"/} starts a preloaded job without AUTOHA_COORD_IFNAME=\${AUTOHA_COORD_IFNAME:-lo}"; fail=1; }
done
[ "$n" -ge 7 ] || { echo "FAIL: only $n bench scripts set LD_PRELOAD (expected 7 or more)"; fail=1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log=$work/job.log
env -u AUTOHA_COORD_IFNAME AUTOHA_LOG=info AUTOHA_REPORT="$work/r-%p.json" LD_LIBRARY_PATH="$simlib" \
  LD_PRELOAD="$lib" "$run" -n 4 --nodes 2 -- "$job" --iters 20 >"$log" 2>&1 ||
  { echo "FAIL: the job failed"; tail -5 "$log"; fail=1; }
addr=$(grep -oE "coordinator hub listening on [^ ]+" "$log" | head -1 | awk '{print $NF}')
case $addr in
  127.*) echo "hub listened on $addr: ok" ;;
  *) echo "FAIL: the job's hub listened on '${addr:-nothing logged}', not loopback"; fail=1 ;;
esac
if [ -f "$ctest_log" ]; then
  # "N/M Testing: NAME" heads each test's output in ctest's log.
  audit=$(awk '/^[0-9]+\/[0-9]+ Testing: / { t = $3 }
    match($0, /hub listening on [^ ]+/) {
      a = substr($0, RSTART + 17, RLENGTH - 17); n++
      if (a !~ /^127\./) { print "FAIL: " t "'"'"'s hub listened on " a ", beyond loopback"; bad++ }
    }
    END { if (!bad) printf "the run'"'"'s other tests: %d hub lines, every one on 127.0.0.0/8\n", n }' "$ctest_log")
  echo "$audit"
  grep -q "^FAIL" <<<"$audit" && fail=1
else
  echo "FAIL: no ctest log of the run at $ctest_log (this test runs under ctest)"; fail=1
fi
exit $fail
