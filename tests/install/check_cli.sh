#!/usr/bin/env bash
# The command line's launcher side: `autoha --version` (and the same string heading `autoha env`),
# `autoha lib` (the built library's absolute path, found from the program's folder), and
# `autoha run` (LD_PRELOAD gets the library first, other entries kept in order, any autoha copy
# dropped; arguments and exit status pass through; a missing command is 127).
#   check_cli.sh AUTOHA_CLI LIBAUTOHA
set -euo pipefail
cli=$1 built=$2
fail() { echo "FAIL: $*"; exit 1; }

version=$("$cli" --version)
[[ $version =~ ^autoha\ [0-9]+\.[0-9]+\.[0-9]+(\+[0-9a-z.-]+)?$ ]] || fail "--version printed '$version'"
head=$(env -i "$cli" env | sed -n 1p) # sed reads it all: head could SIGPIPE autoha (exit 141 under pipefail)
[ "$head" = "# $version" ] || fail "autoha env begins '$head', not '# $version'"

lib=$("$cli" lib)
[ "$lib" = "$(realpath "$built")" ] || fail "autoha lib printed '$lib', not $(realpath "$built")"
[[ $lib = /* ]] || fail "autoha lib printed a relative path"
set +e; "$cli" lib extra >/dev/null 2>&1; rc=$?; set -e
[ $rc = 2 ] || fail "autoha lib with an argument exited $rc, not 2"

got=$(env -u LD_PRELOAD "$cli" run -- printenv LD_PRELOAD)
[ "$got" = "$lib" ] || fail "run without LD_PRELOAD set it to '$got'"
libm=$(ls /lib/x86_64-linux-gnu/libm.so.6 2>/dev/null || ls /usr/lib*/libm.so.6 | head -n 1)
got=$(LD_PRELOAD="$libm $lib:/nowhere/libautoha.so" "$cli" run printenv LD_PRELOAD)
[ "$got" = "$lib:$libm" ] || fail "run with LD_PRELOAD='$libm $lib:/nowhere/libautoha.so' set '$got'"
got=$("$cli" run -- printf '%s|' a 'b c' -- -x)
[ "$got" = "a|b c|--|-x|" ] || fail "run passed the arguments as '$got'"
set +e
"$cli" run -- sh -c 'exit 3'; rc=$?
[ $rc = 3 ] || fail "run did not pass the exit status through (got $rc)"
err=$("$cli" run -- /nonexistent/cmd 2>&1); rc=$?
[ $rc = 127 ] || fail "run of a missing command exited $rc, not 127"
[[ $err = *"cannot run /nonexistent/cmd"* ]] || fail "run of a missing command said '$err'"
"$cli" run >/dev/null 2>&1; rc=$?
[ $rc = 2 ] || fail "run without a command exited $rc, not 2"
set -e
echo "PASS: $version; lib $lib; run sets LD_PRELOAD, passes arguments and status"
