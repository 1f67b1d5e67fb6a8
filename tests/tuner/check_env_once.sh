#!/usr/bin/env bash
# A bad AUTOHA_LOG is reported once, in the environment table's words, both by a process with
# libautoha.so preloaded and by `autoha env`.
#   check_env_once.sh LIBAUTOHA AUTOHA_CLI
set -euo pipefail
lib=$1 cli=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
fail() { echo "FAIL: $*"; exit 1; }
want="autoha ERROR env: invalid value for AUTOHA_LOG: 'loud' (expected error|warn|info|debug); default kept"
for how in preload cli; do
  if [ $how = preload ]; then
    env -i PATH=/usr/bin:/bin AUTOHA_LOG=loud LD_PRELOAD="$lib" /bin/true 2>err || fail "$how exited $?"
  else
    env -i PATH=/usr/bin:/bin AUTOHA_LOG=loud "$cli" env >/dev/null 2>err || fail "$how exited $?"
  fi
  [ "$(grep -c . err)" = 1 ] || fail "$how: a bad AUTOHA_LOG printed $(grep -c . err) lines, not one: $(cat err)"
  [[ $(cat err) = *"] $want" ]] || fail "$how: the line is not the table's: $(cat err)"
done
echo "PASS: a bad AUTOHA_LOG is one line (preloaded and autoha env)"
