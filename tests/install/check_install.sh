#!/usr/bin/env bash
# `cmake --install` into a fresh prefix, then a job run from that prefix alone, as the README says:
# every file of both components is where the README puts it, no installed file names the build
# tree, the prefix still works after it is moved, and a 4-rank job on 2 simulated nodes completes
# with libautoha.so preloaded (its banner and every report carry the version `autoha --version`
# prints; `autoha lib` names the installed library). Each rank's reports are written with the
# jansson the installed library finds: the prefix's own copy when the build bundles one
# (AUTOHA_BUNDLE_JANSSON), else the loader's, and `autoha report` from the prefix reads them.
#   check_install.sh CMAKE BUILD_DIR
set -euo pipefail
cmake=$1 build=$2
. "$(dirname "${BASH_SOURCE[0]}")/../common/scratch.sh"

"$cmake" --install "$build" --prefix "$tmp/p" >"$tmp/install.log" || { cat "$tmp/install.log"; fail "cmake --install"; }
mv "$tmp/p" "$tmp/moved" # an installed prefix is relocatable: nothing below may depend on its path
P=$tmp/moved
for f in lib/libautoha.so bin/autoha bin/ncclsim-run bin/ncclsim-fabric bin/train_job \
         lib/autoha-sim/libncclsim.so lib/autoha-sim/libibverbs.so.1 lib/autoha-sim/libmlx5.so.1 \
         lib/autoha-sim/preload/libnccl.so.2 lib/autoha-sim/preload/libcuda.so.1 \
         share/autoha/python/autoha/plots.py share/autoha/python/autoha/__main__.py; do
  [ -f "$P/$f" ] || fail "$f is not installed"
done
for a in libnccl.so libnccl.so.2 libcudart.so.12 libcudart.so.13 libcuda.so.1 libibverbs.so; do
  [ "$(readlink "$P/lib/autoha-sim/$a")" = libncclsim.so ] || [ "$a" = libibverbs.so ] ||
    fail "lib/autoha-sim/$a is not a symlink to libncclsim.so"
done
[ "$(readlink "$P/lib/autoha-sim/libibverbs.so")" = libibverbs.so.1 ] || fail "libibverbs.so is not a symlink"
for f in "$P"/bin/* "$P"/lib/*.so "$P"/lib/autoha-sim/*.so.1 "$P"/lib/autoha-sim/preload/*; do
  if readelf -d "$f" | grep -E 'R(UN)?PATH' | grep -cF "$build" >/dev/null; then fail "$f has an RPATH into the build tree"; fi
done

version=$("$P/bin/autoha" --version)
[[ $version =~ ^autoha\ [0-9]+\.[0-9]+\.[0-9]+ ]] || fail "autoha --version printed '$version'"
lib=$("$P/bin/autoha" lib)
[ "$lib" = "$(realpath "$P/lib/libautoha.so")" ] || fail "autoha lib printed '$lib', not $P/lib/libautoha.so"

cd "$tmp"
out=$(env LD_PRELOAD="$P/lib/libautoha.so" LD_LIBRARY_PATH="$P/lib/autoha-sim" AUTOHA_LOG=info \
        "$P/bin/ncclsim-run" -n 4 --nodes 2 -- "$P/bin/train_job" --iters 4 2>"$tmp/err") ||
  { cat "$tmp/err"; fail "the job failed"; }
echo "$out"
grep -q 'ms per iteration (simulated' <<<"$out" || fail "train_job printed no iteration time"
n=$(grep -c "$version enabled" "$tmp/err" || true)
[ "$n" = 4 ] || { cat "$tmp/err"; fail "$n of 4 ranks printed the banner 'autoha ${version#autoha } enabled'"; }
reports=$(find "$tmp/autoha-reports" -name '*.json' | wc -l)
[ "$reports" = 4 ] || fail "$reports reports written, not 4"
for r in "$tmp"/autoha-reports/*/*.json; do
  grep -qF "\"autoha_version\": \"${version#autoha }\"" "$r" || fail "$r lacks \"autoha_version\""
done
# The jansson each rank loaded (AUTOHA_LOG=info names it): the prefix's copy when it has one.
want=" loaded from " from="the loader's path"
if [ -e "$P/lib/libjansson.so.4" ]; then
  want=" loaded from $P/lib/libjansson.so.4" from="the prefix's lib/"
  [ -f "$P/lib/libjansson.so.4.copyright" ] || fail "lib/libjansson.so.4 is installed without its copyright"
fi
n=$(grep -F " autoha INFO report: jansson " "$tmp/err" | grep -cF -- "$want" || true)
[ "$n" = 4 ] || { cat "$tmp/err"; fail "$n of 4 ranks logged 'jansson ...$want'"; }
"$P/bin/autoha" report "$tmp"/autoha-reports/*/*.json >"$tmp/report.out" 2>"$tmp/report.err" ||
  { cat "$tmp/report.err"; fail "autoha report from the prefix cannot read the reports"; }
# ncclsim-run --preload from the prefix puts the prefix's own stand-ins on the ranks' LD_PRELOAD
# (lib/autoha-sim/preload, found from the program's folder), not the build tree's.
pre=$(env -u NCCLSIM_PRELOAD_DIR -u LD_PRELOAD "$P/bin/ncclsim-run" -n 1 --preload -- printenv LD_PRELOAD 2>"$tmp/err") ||
  { cat "$tmp/err"; fail "ncclsim-run --preload from the prefix failed"; }
[[ $pre = *"$P/lib/autoha-sim/preload/libcuda.so.1"* && $pre = *"$P/lib/autoha-sim/preload/libnccl.so.2"* ]] ||
  fail "ncclsim-run --preload from the prefix preloaded '$pre'"
# `autoha plot` from the prefix has python3 import the prefix's package (share/autoha/python) first:
# a python3 on PATH that prints the PYTHONPATH it was given stands in for the real one.
mkdir -p "$tmp/fakepy"
printf '#!/bin/sh\necho "PYTHONPATH=$PYTHONPATH"\n' >"$tmp/fakepy/python3"
chmod +x "$tmp/fakepy/python3"
pp=$(env -u PYTHONPATH PATH="$tmp/fakepy:$PATH" "$P/bin/autoha" plot -o "$tmp/pics" "$tmp"/autoha-reports/*/ 2>&1) ||
  fail "autoha plot from the prefix failed: $pp"
[[ $pp = *"PYTHONPATH=$P/share/autoha/python"* ]] || fail "autoha plot from the prefix gave python3 '$pp'"
echo "PASS: installed into a prefix, moved it, ran 4 ranks from it with libautoha.so ${version#autoha } (reports with jansson from $from); --preload uses the prefix's stand-ins"
