#!/usr/bin/env python3
"""Checks that the files of each folder depend on each other in one direction only.

  file_cycles.py NM [--allow LIST] [--doc PAGE] OBJECT... -- [OBJECT... --]
  (each group read with one nm run)

Each group of object files (one per source file, a group per target, ended by --; the objects as
CMake's $<TARGET_OBJECTS:...> lists them) is one folder, named by its target (the object's
`<target>.dir` folder). For every object file of a group, the functions and data it defines and
the ones it uses are read with nm; file A depends on file B when A uses a symbol B defines (edge
A -> B). Each group's file graph must be acyclic: prints the order the files follow, or the
cycle, and exits 1.

--allow LIST names cycles that exist today and may stay until the code sheds them (sim/'s, in
tests/layers/sim_cycles_allowed.txt). Each line of LIST is `GROUP: A.c -> B.c`, an edge allowed to
lie on a cycle of GROUP (# starts a comment). A group with an allowed edge passes when every edge
on one of its cycles (an edge inside a strongly connected component) is listed, and fails on an
edge on a cycle that the list does not name (a new cycle, or a new dependency inside an old
one). The list can only shrink: a listed edge that no longer exists or no longer lies on a cycle
fails too, naming the line to delete. A group the list does not name must have no cycle at all.

--doc PAGE (docs/architecture.md) checks that the page lists every file of every group in an order
the code keeps. Each group has one line `- `FOLDER/` (`TARGET`): `a` < `b` < ...` naming each of
its source files once, without `.c` (the item may go on over lines indented by two spaces); a
file must stand after every file it uses (files that use
each other on an allowed cycle may stand in any order among themselves). A missing, extra or
misplaced name fails, and the failure prints a line in today's order to paste.
"""
import re
import collections
import os
import subprocess
import sys


def symbols(nm, objs):
    """{object: (defined, used)} for a group's objects, read with one nm run (a loaded machine
    makes a process per object slow)."""
    out = subprocess.run([nm] + objs, capture_output=True, text=True, check=True).stdout
    syms = {o: (set(), set()) for o in objs}
    cur = objs[0] if len(objs) == 1 else None
    for line in out.splitlines():
        if line.endswith(":") and line[:-1] in syms:
            cur = line[:-1]
            continue
        parts = line.split()
        if cur is None:
            continue
        defined, used = syms[cur]
        if len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
        elif len(parts) == 3 and parts[1] in "TDBRC":
            defined.add(parts[2])
    return syms


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


def components(graph):
    """The strongly connected components of graph (Tarjan's algorithm), as {file: component id}."""
    index, low, comp, stack, on = {}, {}, {}, [], set()
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = v
                if w == v:
                    break

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comp


def read_allowed(path):
    """{group: {(a, b)}} from the allowed-cycles list, and the line of each edge."""
    allowed, where = collections.defaultdict(set), {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            group, sep, edge = line.partition(":")
            a, arrow, b = edge.partition("->")
            if not sep or not arrow or not a.strip() or not b.strip():
                raise SystemExit("FAIL: %s:%d: expected 'GROUP: A.c -> B.c', got %r" % (path, n, line))
            e = (a.strip(), b.strip())
            allowed[group.strip()].add(e)
            where[(group.strip(),) + e] = "%s:%d" % (path, n)
    return allowed, where


def group_name(obj):
    """The target an object belongs to: the `<target>.dir` folder CMake builds it in."""
    parts = os.path.normpath(obj).split(os.sep)
    for p in reversed(parts[:-1]):
        if p.endswith(".dir"):
            return p[:-len(".dir")]
    return os.path.dirname(obj)


def check_allowed(gname, graph, allowed, where):
    """Cycles of a group with a list of allowed edges: 0 when they are exactly the list's."""
    comp = components(graph)
    on_cycle = {(a, b) for a in graph for b in graph[a] if comp[a] == comp[b]}
    failed = 0
    for a, b in sorted(on_cycle - allowed):
        print("FAIL: %s: %s -> %s lies on a file cycle the allowed list does not name" % (gname, a, b))
        failed = 1
    for a, b in sorted(allowed - on_cycle):
        print("FAIL: %s: %s -> %s is allowed (%s) but lies on no cycle any more: delete the line"
              % (gname, a, b, where[(gname, a, b)]))
        failed = 1
    if not failed:  # the order, each cycle's files braced as one
        members = collections.defaultdict(list)
        for f in graph:
            members[comp[f]].append(f)
        condensed = collections.defaultdict(set)
        for a in graph:
            condensed[comp[a]].update(comp[b] for b in graph[a] if comp[b] != comp[a])
        shown = ["{%s}" % " ".join(sorted(members[c])) if len(members[c]) > 1 else members[c][0]
                 for c in order(condensed)]
        print("PASS: %s: %d files, the cycles left are the %d allowed edges; in dependency order: %s"
              % (gname, len(graph), len(allowed), " < ".join(shown)))
    return failed


def read_doc(path):
    """{target: (line number, [file, ...])} from the page's `- `FOLDER/` (`TARGET`): ...` lines."""
    listed, cur = {}, None
    with open(path) as f:
        for n, line in enumerate(f, 1):
            m = re.match(r"^- `[^`]+/` \(`([^`]+)`[^)]*\): (.+)$", line.rstrip())
            if m:
                cur = m.group(1)
                listed[cur] = (n, re.findall(r"`([^`]+)`", m.group(2)))
            elif cur and line.startswith("  ") and line.strip():  # the item goes on
                listed[cur][1].extend(re.findall(r"`([^`]+)`", line))
            else:
                cur = None
    return listed


def check_doc(gname, graph, doc, listed):
    """0 when the page lists exactly the group's files in an order its dependencies allow."""
    files = {f[:-len(".c")] if f.endswith(".c") else f: f for f in graph}
    comp = components(graph)
    condensed = collections.defaultdict(set)
    members = collections.defaultdict(list)
    for a in graph:
        members[comp[a]].append(a)
        condensed[comp[a]].update(comp[b] for b in graph[a] if comp[b] != comp[a])
    today = [files_f for c in order(condensed) for files_f in sorted(members[c])]
    short = lambda f: f[:-len(".c")] if f.endswith(".c") else f
    hint = "; today's order: %s" % " < ".join("`%s`" % short(f) for f in today)
    if gname not in listed:
        print("FAIL: %s: %s has no line `- `FOLDER/` (`%s`): ...`%s" % (gname, doc, gname, hint))
        return 1
    n, names = listed[gname]
    where = "%s:%d" % (doc, n)
    failed = 0
    for x in sorted(set(names) - set(files)):
        print("FAIL: %s: %s names %s, which is not one of the group's files%s" % (gname, where, x, hint))
        failed = 1
    for x in sorted(set(files) - set(names)):
        print("FAIL: %s: %s leaves out %s%s" % (gname, where, x, hint))
        failed = 1
    for x in sorted({x for x in names if names.count(x) > 1}):
        print("FAIL: %s: %s names %s twice%s" % (gname, where, x, hint))
        failed = 1
    if failed:
        return 1
    pos = {files[x]: i for i, x in enumerate(names)}
    for a in sorted(graph):
        for b in sorted(graph[a]):
            if comp[a] != comp[b] and pos[b] > pos[a]:
                print("FAIL: %s: %s lists %s before %s, which it uses%s"
                      % (gname, where, short(a), short(b), hint))
                failed = 1
    return failed


def main():
    args = sys.argv[1:]
    if len(args) < 2:
        print(__doc__)
        return 2
    nm, args = args[0], args[1:]
    allowed, where = {}, {}
    if len(args) >= 2 and args[0] == "--allow":
        allowed, where = read_allowed(args[1])
        args = args[2:]
    doc, listed = None, {}
    if len(args) >= 2 and args[0] == "--doc":
        doc = args[1]
        listed = read_doc(doc)
        args = args[2:]
    failed, groups, cur = 0, [], []
    for a in args:
        for o in a.split(";"):  # a generator expression's list may arrive as one argument
            if o == "--":
                groups.append(cur)
                cur = []
            elif o:
                cur.append(o)
    if cur:
        groups.append(cur)
    seen = set()
    for objs in groups:
        objs = sorted(objs)
        if not objs:
            print("FAIL: an empty group of object files")
            return 1
        gname = group_name(objs[0])
        seen.add(gname)
        name = lambda o: os.path.basename(o)[:-len(".o")]
        defs, uses = {}, {}
        for o, (d, u) in symbols(nm, objs).items():
            defs[name(o)], uses[name(o)] = d, u
        owner = {s: f for f, ss in defs.items() for s in ss}
        graph = collections.defaultdict(set)
        for f, ss in uses.items():
            graph[f]
            for s in ss:
                g = owner.get(s)
                if g and g != f:
                    graph[f].add(g)
        if doc:
            failed |= check_doc(gname, graph, doc, listed)
        if gname in allowed:
            failed |= check_allowed(gname, graph, allowed[gname], where)
            continue
        cycle = find_cycle(graph)
        if cycle:
            print("FAIL: %s: files depend on each other in a cycle: %s" % (gname, " -> ".join(cycle)))
            failed = 1
        else:
            print("PASS: %s: %d files, in dependency order: %s" % (gname, len(objs), " < ".join(order(graph))))
    for gname in sorted(set(listed) - seen):
        print("FAIL: %s:%d lists the files of %s, which is not checked" % (doc, listed[gname][0], gname))
        failed = 1
    for gname in sorted(set(allowed) - seen):
        print("FAIL: the allowed list names group %s, which is not checked: delete its lines" % gname)
        failed = 1
    return failed


if __name__ == "__main__":  # folder_deps.py imports symbols()
    sys.exit(main())
