#!/usr/bin/env bash
# Runs real_nccl_init against the real libnccl without and with libautoha.so preloaded: the shim
# must be active (its init logs NCCL's version) and the program's output — result codes, error
# strings, ncclGetLastError text — must be identical, with no crash.
#   check_real_nccl.sh REAL_NCCL_INIT LIBAUTOHA
set -uo pipefail
app=$1 lib=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
env -u LD_PRELOAD "$app" >"$tmp/plain.out" 2>"$tmp/plain.err"; rc1=$?
LD_PRELOAD=$lib AUTOHA_LOG=info AUTOHA_REPORT="$tmp/report-%p.json" "$app" >"$tmp/shim.out" 2>"$tmp/shim.err"; rc2=$?
echo "--- without the shim (exit $rc1):"; cat "$tmp/plain.out"
echo "--- with the shim (exit $rc2):"; cat "$tmp/shim.out"; cat "$tmp/shim.err"
[ $rc1 -eq 0 ] || { echo "FAIL: the program failed without the shim"; exit 1; }
[ $rc2 -eq 0 ] || { echo "FAIL: the program failed (exit $rc2) with the shim preloaded"; exit 1; }
grep -q "ncclCommInitRank: [1-9]" "$tmp/plain.out" || { echo "FAIL: expected ncclCommInitRank to fail without a GPU"; exit 1; }
grep -q "autoha [^ ]* enabled: .*NCCL [0-9]" "$tmp/shim.err" || { echo "FAIL: the shim did not initialise"; exit 1; }
diff "$tmp/plain.out" "$tmp/shim.out" || { echo "FAIL: output differs with the shim preloaded"; exit 1; }
echo "PASS: real NCCL's codes and error texts reach the program unchanged"
