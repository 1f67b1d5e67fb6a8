#!/usr/bin/env bash
# The metrics file as an operator's node_exporter would read it (docs/metrics.md): a 2-rank job on
# 2 simulated nodes with AUTOHA_REPORT and AUTOHA_METRICS set; every .prom file is parsed with
# prometheus_client's parser and checked against its process's JSON report (check_metrics.py).
# Then the same job with AUTOHA_REPORT=off still writes its metrics (they need no jansson).
# prometheus_client comes from scripts/metrics-venv: when it cannot be installed this test fails
# with that script's message, it does not skip.
#   run_metrics_e2e.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR VENV
set -u
run=$1 job=$2 lib=$3 simlib=$4 venv=$5
here=$(cd "$(dirname "$0")" && pwd)
py=$("$here/../../scripts/metrics-venv" "$venv" | tail -1) && [ -x "$py" ] ||
  { echo "FAIL: no Python with prometheus_client (scripts/metrics-venv above says why)"; exit 1; }
. "$here/../common/e2e_env.sh"
export AUTOHA_COORD_IFNAME=lo
fail=0
AUTOHA_REPORT="$tmp/out/%h-%p.json" AUTOHA_METRICS="$tmp/out/%h-%p.prom" LD_PRELOAD="$lib" \
  timeout 120 "$run" -n 2 --nodes 2 -- "$job" --iters 40 >"$tmp/log" 2>&1 ||
  { echo "FAIL: the job failed"; tail -20 "$tmp/log"; exit 1; }
if grep -q "autoha ERROR\|autoha WARN" "$tmp/log"; then
  echo "FAIL: the job logged:"; grep "autoha ERROR\|autoha WARN" "$tmp/log"; fail=1
fi
"$py" "$here/check_metrics.py" "$tmp/out" 2 || fail=1
AUTOHA_REPORT=off AUTOHA_METRICS="$tmp/noreport/%h-%p.prom" LD_PRELOAD="$lib" \
  timeout 120 "$run" -n 2 --nodes 2 -- "$job" --iters 10 >"$tmp/log2" 2>&1 ||
  { echo "FAIL: the job without a report failed"; tail -20 "$tmp/log2"; exit 1; }
n=$(ls "$tmp/noreport"/*.prom 2>/dev/null | wc -l)
if [ "$n" = 2 ] && "$py" -c '
import sys
from prometheus_client.parser import text_string_to_metric_families as parse
for f in sys.argv[1:]:
    assert any(s.name == "autoha_calls_total" for m in parse(open(f).read()) for s in m.samples), f
' "$tmp/noreport"/*.prom; then
  echo "metrics without a report: $n files, parsed"
else
  echo "FAIL: with AUTOHA_REPORT=off, $n metrics files (expected 2, each with calls)"; fail=1
fi
[ $fail = 0 ] && echo "metrics e2e: OK" || echo "metrics e2e: FAILED"
exit $fail
