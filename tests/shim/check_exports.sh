#!/usr/bin/env bash
# Diffs the dynamic symbols libautoha.so defines against shim/exports.txt, and checks that none of
# them carries a symbol version (a versioned preloaded definition stops satisfying versioned
# lookups such as dlvsym@GLIBC_2.2.5; docs/architecture.md, "Layer rules"), and that it imports
# nothing that ends the process.
#   check_exports.sh LIBAUTOHA EXPORTS_TXT
set -euo pipefail
lib=$1 list=$2
actual=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
expected=$(grep -v '^#' "$list" | sed '/^[[:space:]]*$/d' | sort -u)
if [ "$actual" != "$expected" ]; then
  echo "FAIL: exports of $lib differ from $list (< built, > listed):"
  diff <(echo "$actual") <(echo "$expected") || true
  exit 1
fi
versioned=$(nm -D --defined-only --with-symbol-versions "$lib" | awk '{print $3}' | grep '@' | grep -v '@@*$' || true)
if [ -n "$versioned" ]; then
  echo "FAIL: versioned exports (must stay unversioned):"
  echo "$versioned"
  exit 1
fi
# A preloaded library must never end the user's process: it imports none of the functions that do
# (uthash's default out-of-memory handler calls exit; base/ah_uthash.h turns it off).
enders=$(nm -D --undefined-only "$lib" | awk '{print $2}' | sed 's/@.*//' |
  grep -Ex 'exit|_exit|_Exit|quick_exit|abort' || true)
if [ -n "$enders" ]; then
  echo "FAIL: $lib imports functions that end the process:"
  echo "$enders"
  exit 1
fi
echo "PASS: $(echo "$actual" | wc -l) exports match $list, all unversioned; no exit, _exit, _Exit, quick_exit or abort imported"
