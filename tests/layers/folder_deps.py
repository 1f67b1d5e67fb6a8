#!/usr/bin/env python3
"""Checks that each folder uses the code of the folders it may depend on, and of no other.

  folder_deps.py NM NAME=DEP,DEP OBJECT... -- [NAME=DEP,... OBJECT... --]

Each group names a folder, the folders its code may use (after '=', comma-separated, possibly
none) and its object files (as CMake's $<TARGET_OBJECTS:...> lists them), ended by --. A folder
uses another when one of its objects leaves undefined a symbol an object of the other defines (read
with nm). Prints each folder's uses; a use not allowed fails, naming the folder, the file, the
symbol and the folder that defines it. This is docs/architecture.md's layer rule at the level of
code; tests/layers/file_cycles.py checks the files inside each folder.
"""
import os
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from file_cycles import symbols  # noqa: E402 (nm's defined and undefined symbols of each object)

# The C library's functions that rdma/rdma_verbs.c defines in libautoha.so to see libnccl's verbs
# lookups. Its trampolines pass every other name through to the C library unchanged, so a folder
# below calling one (tuner/ah_jansson.c opening jansson) uses the C library, not rdma/.
LIBC_INTERPOSED = {"dlsym", "dlvsym"}


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    nm, groups, cur = sys.argv[1], [], None
    for a in sys.argv[2:]:
        for o in a.split(";"):  # a generator expression's list may arrive as one argument
            if not o:
                continue
            if cur is None:
                name, _, deps = o.partition("=")
                cur = (name, set(d for d in deps.split(",") if d), [])
            elif o == "--":
                groups.append(cur)
                cur = None
            else:
                cur[2].append(o)
    if cur is not None:
        groups.append(cur)
    owner, uses = {}, {}
    for name, _, objs in groups:
        if not objs:
            print("FAIL: %s: no object files" % name)
            return 1
        for o, (d, u) in symbols(nm, objs).items():
            for s in d:
                owner[s] = name
            uses[(name, os.path.basename(o)[:-len(".o")])] = u
    failed = 0
    for name, allowed, _ in groups:
        seen, bad = set(), 0
        for (g, f), ss in sorted(uses.items()):
            if g != name:
                continue
            for s in sorted(ss):
                h = owner.get(s)
                if not h or h == name or s in LIBC_INTERPOSED:
                    continue
                seen.add(h)
                if h not in allowed:
                    print("FAIL: %s/%s uses %s of %s/ (%s/ may use only: %s)"
                          % (name, f, s, h, name, ", ".join(sorted(allowed)) or "nothing"))
                    bad = failed = 1
        print("%s: %s/ uses %s" % ("FAIL" if bad else "PASS", name,
                                    ", ".join(sorted(x + "/" for x in seen)) or "no other folder"))
    return failed


sys.exit(main())
