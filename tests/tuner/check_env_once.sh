#!/usr/bin/env bash
# A bad AUTOHA_LOG is reported once, in the environment table's words, both by a process with
# libautoha.so preloaded and by `autoha env`; and the variables only the project's scripts read
# (AUTOHA_TORCH_VENV, AUTOHA_FUZZ_SECONDS) are rows of the table, so setting them draws no line.
#   check_env_once.sh LIBAUTOHA AUTOHA_CLI
set -euo pipefail
lib=$1 cli=$2
. "$(dirname "${BASH_SOURCE[0]}")/../common/scratch.sh"
cd "$tmp"
want="autoha ERROR env: invalid value for AUTOHA_LOG: 'loud' (expected error|warn|info|debug); default kept (AUTOHA_LOG=warn)"
for how in preload cli; do
  if [ $how = preload ]; then
    env -i PATH=/usr/bin:/bin AUTOHA_LOG=loud LD_PRELOAD="$lib" /bin/true 2>err || fail "$how exited $?"
  else
    env -i PATH=/usr/bin:/bin AUTOHA_LOG=loud "$cli" env >/dev/null 2>err || fail "$how exited $?"
  fi
  [ "$(grep -c . err)" = 1 ] || fail "$how: a bad AUTOHA_LOG printed $(grep -c . err) lines, not one: $(cat err)"
  [[ $(cat err) = *"] $want" ]] || fail "$how: the line is not the table's: $(cat err)"
done
env -i PATH=/usr/bin:/bin AUTOHA_TORCH_VENV=x AUTOHA_FUZZ_SECONDS=1 LD_PRELOAD="$lib" /bin/true 2>err ||
  fail "the preload with the scripts' variables exited $?"
[ ! -s err ] || fail "the scripts' variables drew a line: $(cat err)"
env -i PATH=/usr/bin:/bin AUTOHA_TORCH_VENV=x AUTOHA_FUZZ_SECONDS=1 "$cli" env >out 2>err || fail "autoha env exited $?"
[ ! -s err ] || fail "autoha env with the scripts' variables printed on stderr: $(cat err)"
grep -q '^AUTOHA_TORCH_VENV=x .*Read by scripts/torch-venv, not by the library' out ||
  fail "autoha env does not show AUTOHA_TORCH_VENV as the scripts': $(grep TORCH out)"
grep -q '^AUTOHA_FUZZ_SECONDS=1 .*Read by scripts/test, not by the library' out ||
  fail "autoha env does not show AUTOHA_FUZZ_SECONDS as the scripts': $(grep FUZZ out)"
echo "PASS: a bad AUTOHA_LOG is one line (preloaded and autoha env); the scripts' variables are rows"
