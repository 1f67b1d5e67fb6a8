#!/usr/bin/env python3
"""Checks that the files of each folder depend on each other in one direction only.

  file_cycles.py NM OBJECT... -- [OBJECT... --]

Each group of object files (one per source file, a group per folder, ended by --; the objects as
CMake's $<TARGET_OBJECTS:...> lists them) is one folder. For every object file of a folder, the functions and data it defines and the
ones it uses are read with nm; file A depends on file B when A uses a symbol B defines. Each
folder's file graph must be acyclic: prints the order the files follow, or the cycle, and exits 1.
"""
import collections
import os
import subprocess
import sys


def symbols(nm, obj):
    out = subprocess.run([nm, obj], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRC":
            defined.add(parts[2])
    return defined, used


def find_cycle(graph):
    state, stack = {}, []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for m in sorted(graph[n]):
            if state.get(m) == 1:
                return stack[stack.index(m):] + [m]
            if m not in state:
                c = visit(m)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def order(graph):
    done, out = set(), []

    def visit(n):
        if n in done:
            return
        done.add(n)
        for m in sorted(graph[n]):
            visit(m)
        out.append(n)

    for n in sorted(graph):
        visit(n)
    return out


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    nm, failed, groups, cur = sys.argv[1], 0, [], []
    for a in sys.argv[2:]:
        for o in a.split(";"):  # a generator expression's list may arrive as one argument
            if o == "--":
                groups.append(cur)
                cur = []
            elif o:
                cur.append(o)
    if cur:
        groups.append(cur)
    for objs in groups:
        objs = sorted(objs)
        if not objs:
            print("FAIL: an empty group of object files")
            return 1
        d = os.path.dirname(objs[0])
        name = lambda o: os.path.basename(o)[:-len(".o")]
        defs, uses = {}, {}
        for o in objs:
            defs[name(o)], uses[name(o)] = symbols(nm, o)
        owner = {s: f for f, ss in defs.items() for s in ss}
        graph = collections.defaultdict(set)
        for f, ss in uses.items():
            graph[f]
            for s in ss:
                g = owner.get(s)
                if g and g != f:
                    graph[f].add(g)
        cycle = find_cycle(graph)
        if cycle:
            print("FAIL: %s: files depend on each other in a cycle: %s" % (d, " -> ".join(cycle)))
            failed = 1
        else:
            print("PASS: %s: %d files, in dependency order: %s" % (d, len(objs), " < ".join(order(graph))))
    return failed


if __name__ == "__main__":  # folder_deps.py imports symbols()
    sys.exit(main())
