#!/usr/bin/env bash
# A process that never uses NCCL stays untouched by libautoha.so at the default log level: with
# LD_PRELOAD set, as a launcher's children inherit it, `true`, `sh -c`, `nice`, `env` and a launcher
# (ncclsim-run starting ranks that run no NCCL) print nothing autoha wrote on stdout or stderr and
# leave no report folder — even where no libcuda.so.1 can be opened, which the exit-time report used
# to try and warn about.
#   check_quiet.sh LIBAUTOHA NCCLSIM_RUN
set -euo pipefail
lib=$1 launcher=$2
. "$(dirname "${BASH_SOURCE[0]}")/../common/scratch.sh"
cd "$tmp"
n=0
check() { # EXPECTED_STDOUT CMD...
  local want=$1; shift
  env -i PATH=/usr/bin:/bin LD_PRELOAD="$lib" "$@" >"$tmp/out" 2>"$tmp/err" || fail "$* exited $?"
  [ "$(cat "$tmp/out")" = "$want" ] || fail "$* printed on stdout: $(cat "$tmp/out")"
  [ ! -s "$tmp/err" ] || fail "$* printed on stderr: $(cat "$tmp/err")"
  n=$((n + 1))
}
# The preload is live: a process that does use NCCL is not what this checks, but autoha must have
# been loaded into these ones (otherwise silence proves nothing).
out=$(env -i PATH=/usr/bin:/bin LD_PRELOAD="$lib" AUTOHA_LOG=debug AUTOHA_BOGUS=1 /bin/true 2>&1)
[[ $out = *autoha* ]] || fail "libautoha.so does not seem to load: no line with AUTOHA_LOG=debug and a bad variable"
check "" /bin/true
check "" sh -c true
check "hi" sh -c 'echo hi; /bin/true'
check "" nice true
check "" env true
check "" "$launcher" -n 2 -- /bin/true
[ ! -e "$tmp/autoha-reports" ] || fail "a report folder was created: $(find "$tmp/autoha-reports")"
echo "PASS: $n processes that never use NCCL printed nothing with libautoha.so preloaded"
