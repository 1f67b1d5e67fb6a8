#!/usr/bin/env bash
# The pictures and table of the Python package as a notebook user makes them: a 4-rank job on 2
# simulated nodes writes its reports, `autoha plot` (running `python3 -m autoha plot`) renders
# busbw.png and timeline.png, and check_plots.py checks the figures (labels, the sim/ caption,
# nothing outside the figure, --rank), the PNGs and autoha.reports() against the JSON. matplotlib
# and pandas come from scripts/plot-venv: when they cannot be installed this test fails with that
# script's message, it does not skip.
#   run_plots_e2e.sh NCCLSIM_RUN TRAIN_JOB LIBAUTOHA SIMLIB_DIR VENV
set -u
run=$1 job=$2 lib=$3 simlib=$4 venv=$5
here=$(cd "$(dirname "$0")" && pwd)
py=$("$here/../../scripts/plot-venv" "$venv" | tail -1) && [ -x "$py" ] ||
  { echo "FAIL: no Python with matplotlib and pandas (scripts/plot-venv above says why)"; exit 1; }
. "$here/../common/e2e_env.sh"
export AUTOHA_COORD_IFNAME=lo
AUTOHA_REPORT="$tmp/reports/%h-%p.json" LD_PRELOAD="$lib" \
  timeout 120 "$run" -n 4 --nodes 2 -- "$job" --iters 40 >"$tmp/log" 2>&1 ||
  { echo "FAIL: the job failed"; tail -20 "$tmp/log"; exit 1; }
fail=0
# The program's `autoha plot`, with the venv's python3 first on PATH: it finds the package in the
# checkout it was built from (no PYTHONPATH given) and has it draw.
PATH="$(dirname "$py"):$PATH" "$(dirname "$run")/autoha" plot -o "$tmp/pics" "$tmp/reports" >"$tmp/plot.log" 2>&1 ||
  { echo "FAIL: autoha plot failed:"; cat "$tmp/plot.log"; fail=1; }
for f in busbw.png timeline.png; do
  grep -qx "$tmp/pics/$f" "$tmp/plot.log" || { echo "FAIL: autoha plot did not name $f:"; cat "$tmp/plot.log"; fail=1; }
done
export PYTHONPATH=$here/../../python
"$py" "$here/check_plots.py" "$tmp/reports" "$tmp/pics" 4 || fail=1
[ $fail = 0 ] && echo "python plots e2e: OK" || echo "python plots e2e: FAILED"
exit $fail
