#!/usr/bin/env bash
# Two scripts/torch-venv runs on one venv take turns (its flock on VENV.lock), checked without
# torch: the venv is a fake one that is up to date (the stamp holds the pins' hash) and whose
# python, which torch-venv runs once to find torch, writes "start", sleeps, then writes "end".
# Taking turns leaves start/end/start/end in its log; a race leaves the two starts together.
#   check_venv_lock.sh TORCH_VENV_SCRIPT REQUIREMENTS
set -euo pipefail
script=$1 req=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
venv=$tmp/venv
mkdir -p "$venv/bin"
sha256sum "$req" | cut -d' ' -f1 >"$venv/.autoha-pins"
cat >"$venv/bin/python" <<EOF
#!/bin/sh
echo start >>"$tmp/log"
sleep 1
echo end >>"$tmp/log"
EOF
chmod +x "$venv/bin/python"

AUTOHA_TORCH_VENV=$venv "$script" >"$tmp/out1" 2>"$tmp/err1" &
first=$!
AUTOHA_TORCH_VENV=$venv "$script" >"$tmp/out2" 2>"$tmp/err2" &
second=$!
wait "$first" || { cat "$tmp/err1"; echo "FAIL: the first torch-venv failed"; exit 1; }
wait "$second" || { cat "$tmp/err2"; echo "FAIL: the second torch-venv failed"; exit 1; }

for i in 1 2; do
  [ "$(tail -n 1 "$tmp/out$i")" = "$venv/bin/python" ] ||
    { cat "$tmp/out$i" "$tmp/err$i"; echo "FAIL: run $i did not print the venv's python last"; exit 1; }
  grep -q "is up to date" "$tmp/err$i" ||
    { cat "$tmp/err$i"; echo "FAIL: run $i did not find the fake venv up to date"; exit 1; }
done
log=$(tr '\n' ' ' <"$tmp/log")
[ "$log" = "start end start end " ] || { echo "FAIL: the two runs overlapped: $log"; exit 1; }
# One of them found the lock taken and said so. (grep reads the files itself: under pipefail,
# "cat | grep -q" fails whenever grep's early exit gives cat a SIGPIPE.)
grep -q "waiting for another run's lock on $venv.lock" "$tmp/err1" "$tmp/err2" ||
  { cat "$tmp/err1" "$tmp/err2"; echo "FAIL: neither run waited for the lock"; exit 1; }
[ -f "$venv.lock" ] || { echo "FAIL: no lock file beside the venv"; exit 1; }
echo "PASS: two torch-venv runs on one venv took turns ($log)"
