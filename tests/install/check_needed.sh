#!/usr/bin/env bash
# A preloaded library is a guest: libautoha.so may need nothing beyond the C library's own objects
# (libc, libm, the dynamic loader, and the pthread/dl/rt stubs of older glibc), so it never brings
# another copy of jansson or OpenSSL into a process that has its own.
#   check_needed.sh LIBAUTOHA
set -euo pipefail
lib=$1
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
[ -n "$needed" ] || { echo "FAIL: readelf found no NEEDED entry in $lib"; exit 1; }
bad=$(grep -Evx 'libc\.so\.6|libm\.so\.6|ld-linux-x86-64\.so\.2|libpthread\.so\.0|libdl\.so\.2|librt\.so\.1' <<<"$needed" || true)
if [ -n "$bad" ]; then
  echo "FAIL: $lib needs libraries beyond the C library's:"
  echo "$bad"
  exit 1
fi
echo "PASS: $lib needs only $(echo $needed)"
