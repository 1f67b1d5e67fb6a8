#!/usr/bin/env bash
# scripts/torch-venv's lock on VENV.lock, checked without torch: the venv is a fake one whose python
# (which torch-venv runs to find torch) exits 0. An install holds the lock exclusive, so a run
# waits for it; a check holds it shared, and scripts/test holds it shared for its whole suite, so a
# run with other pins waits for the suite instead of reinstalling under it, while a run with the
# same pins goes on at once.
#   check_venv_lock.sh TORCH_VENV_SCRIPT REQUIREMENTS TEST_SCRIPT
set -uo pipefail
script=$1 req=$2 suite=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
mkdir -p "$venv/bin"
pins=$(sha256sum "$req" | cut -d' ' -f1)
echo "$pins" >"$venv/.autoha-pins"
printf '#!/bin/sh\nexit 0\n' >"$venv/bin/python"
chmod +x "$venv/bin/python"
fail=0
exec 7>>"$venv.lock"

# 1. An install in progress (the lock held exclusive): the run waits, then finds the venv current.
flock -x 7
AUTOHA_TORCH_VENV=$venv "$script" >"$tmp/out1" 2>"$tmp/err1" &
pid=$!
sleep 1
kill -0 "$pid" 2>/dev/null || { echo "FAIL: torch-venv did not wait for an install in progress"; cat "$tmp/err1"; fail=1; }
grep -q "waiting for an install by another run on $venv.lock" "$tmp/err1" ||
  { echo "FAIL: torch-venv did not say it waits for the install:"; cat "$tmp/err1"; fail=1; }
flock -u 7
wait "$pid" || { echo "FAIL: torch-venv failed once the install ended:"; cat "$tmp/err1"; fail=1; }
[ "$(tail -n 1 "$tmp/out1")" = "$venv/bin/python" ] && grep -q "is up to date" "$tmp/err1" ||
  { echo "FAIL: after the wait the venv was not found up to date:"; cat "$tmp/out1" "$tmp/err1"; fail=1; }

# 2. A suite using the venv (shared, as scripts/test) and the same pins: no wait.
flock -s 7
start=$SECONDS
AUTOHA_TORCH_VENV=$venv timeout 20 "$script" >"$tmp/out2" 2>"$tmp/err2" ||
  { echo "FAIL: torch-venv beside a suite with the same pins failed or hung:"; cat "$tmp/err2"; fail=1; }
grep -q "waiting" "$tmp/err2" && { echo "FAIL: torch-venv waited beside a suite with the same pins"; fail=1; }
[ "$(tail -n 1 "$tmp/out2")" = "$venv/bin/python" ] || { echo "FAIL: run 2 printed no python"; fail=1; }

# 3. The same suite and other pins: the run waits for the suite and leaves the venv alone.
echo other >"$venv/.autoha-pins"
AUTOHA_TORCH_VENV=$venv setsid "$script" >"$tmp/out3" 2>"$tmp/err3" &
pid=$!
sleep 1
kill -0 "$pid" 2>/dev/null || { echo "FAIL: torch-venv with other pins did not wait for the suite:"; cat "$tmp/err3"; fail=1; }
grep -q "waiting for the suites using the venv to end" "$tmp/err3" ||
  { echo "FAIL: torch-venv with other pins did not say it waits for the suite:"; cat "$tmp/err3"; fail=1; }
[ -x "$venv/bin/python" ] || { echo "FAIL: the venv was removed under the suite using it"; fail=1; }
kill -KILL -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
flock -u 7

# 4. scripts/test takes that shared lock before it runs ctest, and keeps it (fd 8, never released).
lock_line=$(grep -n '^flock -s 8$' "$suite" | head -1 | cut -d: -f1)
ctest_line=$(grep -n '^ctest ' "$suite" | head -1 | cut -d: -f1)
[ -n "$lock_line" ] && [ -n "$ctest_line" ] && [ "$lock_line" -lt "$ctest_line" ] &&
  ! grep -q 'flock -u 8' "$suite" ||
  { echo "FAIL: $suite does not hold the venv's lock shared (flock -s 8) before its ctest"; fail=1; }
[ $fail = 0 ] && echo "PASS: an install is waited for; a suite's shared lock lets the same pins through and holds other pins back (${SECONDS}s)"
exit $fail
