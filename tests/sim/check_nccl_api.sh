#!/usr/bin/env bash
# Checks that libncclsim.so defines every function the nccl.h it was built against declares (both
# the ncclX and the pncclX name, as libnccl exports them). The header is run through the C
# preprocessor, so comments and macros cannot be mistaken for declarations; every identifier
# starting nccl/pnccl and followed by '(' in what remains is a declared function.
#   check_nccl_api.sh CC NCCL_H LIBNCCLSIM [INCLUDE_DIR...]
set -euo pipefail
cc=$1 header=$2 lib=$3
shift 3
incs=()
for d in "$@"; do incs+=("-I$d"); done
declared=$("$cc" -E -P "${incs[@]}" -x c "$header" |
  grep -oE '\bp?nccl[A-Za-z0-9_]*[[:space:]]*\(' | sed -E 's/[[:space:]]*\($//' | sort -u)
count=$(echo "$declared" | grep -c . || true)
if [ "$count" -lt 20 ]; then
  echo "FAIL: found only $count function declarations in $header: the parse is broken"
  exit 1
fi
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "FAIL: $lib lacks $(echo "$missing" | wc -l) of the $count functions $header declares:"
  echo "$missing"
  exit 1
fi
echo "PASS: $lib defines all $count functions $header declares"
