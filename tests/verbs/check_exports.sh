#!/bin/sh
# check_exports.sh STANDIN REAL [PRIVATE_NODE]: every symbol STANDIN exports must be exported by the
# real library REAL as its default version in the same node (name@@NODE), so programs linked
# against the real one and dlvsym(name, NODE) callers both find it. Symbols of PRIVATE_NODE (sim's
# own) are left out. Prints what differs and fails, or prints the count checked.
set -u
standin=$1 real=$2 private=${3:-}
defs() { readelf --dyn-syms -W "$1" | awk '$7 != "UND" && $5 == "GLOBAL" && $8 ~ /@@/ { print $8 }' | sort -u; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
defs "$standin" | grep -v "^[A-Z0-9_.]*@@" > "$tmp/standin"
[ -n "$private" ] && grep -v "@@$private\$" "$tmp/standin" > "$tmp/s2" && mv "$tmp/s2" "$tmp/standin"
defs "$real" > "$tmp/real"
missing=$(comm -23 "$tmp/standin" "$tmp/real")
if [ -n "$missing" ]; then
  echo "exported by $(basename "$standin") but not so by the real library:"
  echo "$missing"
  exit 1
fi
echo "$(wc -l < "$tmp/standin") symbols, each in the real library's node"
