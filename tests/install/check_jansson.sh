#!/usr/bin/env bash
# libautoha.so opens jansson at run time, and only in a process that writes a report
# (tuner/ah_jansson.c); a 2-rank train_job on sim/ each time:
#   1. AUTOHA_JANSSON=/nonexistent/libjansson.so.4: the job exits 0, each rank logs one error
#      naming that file and no other, and no report (nor its temporary file) is written; `autoha report`
#      with the same setting exits 1 with that one line
#   2. AUTOHA_JANSSON naming the distribution's file: each rank loads that file and writes its
#      report, which `autoha report` reads; the launcher, which writes none, loads no jansson, nor
#      does a program that never uses NCCL
#   3. no AUTOHA_JANSSON, libautoha.so in a folder that holds a libjansson.so.4 (the wheel's
#      layout): that copy is the one loaded
#   check_jansson.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA AUTOHA_CLI SIMLIB JANSSON
set -euo pipefail
launcher=$1 job=$2 lib=$3 cli=$4 simlib=$5 jansson=$6
. "$(dirname "${BASH_SOURCE[0]}")/../common/e2e_env.sh"
fail() { echo "FAIL: $*"; exit 1; }
unset AUTOHA_JANSSON AUTOHA_REPORT AUTOHA_PROFILE AUTOHA_LOG_FILE AUTOHA_LOG_SUBSYS AUTOHA_ENABLE
missing=/nonexistent/libjansson.so.4

# run NAME LIBAUTOHA [VAR=VALUE...]: stdout and stderr in $tmp/NAME.{out,err}, reports in $tmp/NAME.rep
run() {
  local name=$1 l=$2 rc=0
  shift 2
  (cd "$tmp" && env "$@" LD_PRELOAD="$l" AUTOHA_LOG=info AUTOHA_REPORT="$tmp/$name.rep/r-%p.json" \
    "$launcher" -n 2 -- "$job" --iters 2) >"$tmp/$name.out" 2>"$tmp/$name.err" || rc=$?
  [ "$rc" = 0 ] || { tail -20 "$tmp/$name.err"; fail "the $name job exited $rc"; }
  grep -q 'ms per iteration (simulated' "$tmp/$name.out" || fail "$name: train_job printed no iteration time"
}
count() { grep -cF -- "$1" "$2" || true; } # lines of file $2 holding the text $1

# 1. The named file is missing.
run missing "$lib" AUTOHA_JANSSON=$missing
n=$(count ' autoha ERROR ' "$tmp/missing.err")
[ "$n" = 2 ] || { cat "$tmp/missing.err"; fail "$n error lines, not one per rank"; }
m=$(count "reports need libjansson.so.4 (Debian/Ubuntu package libjansson4): tried AUTOHA_JANSSON=$missing (" "$tmp/missing.err")
[ "$m" = 2 ] || { cat "$tmp/missing.err"; fail "the error lines do not name $missing"; }
pids=$(grep -F ' autoha ERROR ' "$tmp/missing.err" | cut -d: -f2 | sort -u | wc -l)
[ "$pids" = 2 ] || fail "the two error lines come from $pids processes, not one from each rank"
# The folder may hold the hub's credentials (AUTOHA_STATUS_FILE goes beside the reports): no report.
written=$(find "$tmp/missing.rep" -name '*.json*' 2>/dev/null || true)
[ -z "$written" ] || fail "reports were written: $written"
[ "$(count 'loaded from' "$tmp/missing.err")" = 0 ] || fail "a jansson was loaded all the same"
echo "PASS: AUTOHA_JANSSON=$missing: the job exited 0, one error per rank naming it, no report"

# 2. The distribution's file, named.
run named "$lib" AUTOHA_JANSSON="$jansson"
[ "$(count ' autoha ERROR ' "$tmp/named.err")" = 0 ] || { cat "$tmp/named.err"; fail "errors with $jansson"; }
n=$(count "autoha INFO report: jansson " "$tmp/named.err")
m=$(count " loaded from $jansson" "$tmp/named.err")
[ "$n" = 2 ] && [ "$m" = 2 ] ||
  { cat "$tmp/named.err"; fail "$n processes loaded jansson, $m of them $jansson: not the 2 ranks alone"; }
reports=("$tmp"/named.rep/*.json)
[ "${#reports[@]}" = 2 ] && [ -f "${reports[0]}" ] || fail "${#reports[@]} reports written, not 2"
AUTOHA_JANSSON="$jansson" "$cli" report "${reports[@]}" >"$tmp/report.out" 2>"$tmp/report.err" ||
  { cat "$tmp/report.err"; fail "autoha report could not read the reports"; }
grep -q 'allreduce' "$tmp/report.out" || fail "autoha report printed no allreduce key: $(cat "$tmp/report.out")"
rc=0
AUTOHA_JANSSON=$missing "$cli" report "${reports[@]}" >"$tmp/report.out" 2>"$tmp/report.err" || rc=$?
[ "$rc" = 1 ] || fail "autoha report without jansson exited $rc, not 1"
[ ! -s "$tmp/report.out" ] && [ "$(wc -l <"$tmp/report.err")" = 1 ] && grep -qF "AUTOHA_JANSSON=$missing (" "$tmp/report.err" ||
  fail "autoha report without jansson did not print the one error line: $(cat "$tmp/report.out" "$tmp/report.err")"
out=$(env LD_PRELOAD="$lib" AUTOHA_LOG=debug /bin/true 2>&1)
[[ $out != *jansson* ]] || fail "a program without NCCL loaded jansson: $out"
echo "PASS: AUTOHA_JANSSON=$jansson: 2 ranks loaded it and wrote their reports, autoha report read them"

# 3. The wheel's layout: a copy beside libautoha.so is found first.
mkdir "$tmp/wheel"
cp "$lib" "$tmp/wheel/libautoha.so"
cp -L "$jansson" "$tmp/wheel/libjansson.so.4"
run beside "$tmp/wheel/libautoha.so"
m=$(count " loaded from $tmp/wheel/libjansson.so.4" "$tmp/beside.err")
[ "$m" = 2 ] || { cat "$tmp/beside.err"; fail "$m ranks loaded the copy beside libautoha.so, not 2"; }
reports=("$tmp"/beside.rep/*.json)
[ "${#reports[@]}" = 2 ] && [ -f "${reports[0]}" ] || fail "${#reports[@]} reports written beside, not 2"
echo "PASS: libjansson.so.4 beside libautoha.so is the one loaded; 2 reports"
