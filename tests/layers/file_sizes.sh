#!/usr/bin/env bash
# Every product file (the library's folders, tools/ and sim/) holds at most 800 lines: a file that
# grows past it has more than one job and is split by responsibility.
#   file_sizes.sh SOURCE_DIR
set -euo pipefail
cd "$1"
limit=800
over=$(find base path tuner settings coordinator rdma shim tools include sim -name '*.[ch]' -print0 |
       xargs -0 wc -l | awk -v l=$limit '$2 != "total" && $1 > l { print "  " $2 ": " $1 " lines" }')
[ -z "$over" ] || { printf 'FAIL: product files over %d lines:\n%s\n' $limit "$over"; exit 1; }
n=$(find base path tuner settings coordinator rdma shim tools include sim -name '*.[ch]' | wc -l)
[ "$n" -ge 200 ] || { echo "FAIL: found only $n product files under $1"; exit 1; }
echo "PASS: $n product files, none over $limit lines"
