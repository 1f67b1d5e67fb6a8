#!/usr/bin/env python3
"""Every frame of the wire corpora (fuzz/corpus and fuzz/regress: frame, hub, client) carries the
protocol version the coordinator speaks (AH_COORD_PROTO_VERSION): a seed at another version stops
at the header check and never reaches the payload it was written for. The frame target's inputs are
frames from their first byte, the hub's and client's after one byte of flags; a RELAY_DATA frame's
inner frame is checked too. A header-shaped run that ends the walk early (a seed that is garbage on
purpose: an oversized or unauthenticated one) is left alone.
  check_corpus_version.py FUZZ_DIR COORD_INTERNAL_H"""
import glob, re, struct, sys

fuzz, header = sys.argv[1], sys.argv[2]
version = int(re.search(r"#define AH_COORD_PROTO_VERSION\s*\\?\s*(\d+)", open(header).read()).group(1))
RELAY_DATA, RELAY_FIXED = 26, 4
bad, frames = [], 0
for target, start in (("frame", 0), ("hub", 1), ("client", 1)):
    for f in sorted(glob.glob("%s/corpus/%s/*" % (fuzz, target)) + glob.glob("%s/regress/%s/*" % (fuzz, target))):
        b, o = open(f, "rb").read(), start
        while o + 8 <= len(b) and b[o + 6] == 0 and b[o + 7] == 0 and 1 <= b[o + 5] <= 64:
            length = struct.unpack(">I", b[o:o + 4])[0]
            if length > 1 << 20:
                break  # an oversized frame, on purpose
            frames += 1
            versions = [b[o + 4]]
            if b[o + 5] == RELAY_DATA and o + 8 + RELAY_FIXED + 8 <= len(b):
                versions.append(b[o + 8 + RELAY_FIXED + 4])
            if any(v != version for v in versions):
                bad.append("%s (frame at byte %d: version %s)" % (f, o, versions))
                break
            o += 8 + length
if bad:
    print("FAIL: %d seeds speak another protocol than %d:\n  %s" % (len(bad), version, "\n  ".join(bad)))
    sys.exit(1)
print("PASS: %d frames of the wire corpora speak protocol %d" % (frames, version))
