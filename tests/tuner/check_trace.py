#!/usr/bin/env python3
"""Checks the trace `autoha plot --trace` wrote from test_tuner_plot's fixture reports: trace.json
is trace-event JSON that Perfetto opens (a traceEvents array of X/M/i events with pid, tid, ts),
one process per report, rank 0's AllReduce key a thread with its three probes, its pinned slice
and the re-opening. Usage: check_trace.py DIR   (DIR holds trace.json). Exits 1 naming the first
thing that is wrong."""
import json
import sys

d = sys.argv[1]


def fail(msg):
    print("check_trace: " + msg)
    sys.exit(1)


tr = json.load(open(d + "/trace.json"))
ev = tr.get("traceEvents")
if not isinstance(ev, list) or not ev:
    fail("trace.json: no traceEvents")
for e in ev:
    for f in ("name", "ph", "pid", "tid"):
        if f not in e:
            fail("trace.json: event without %s: %s" % (f, e))
    if e["ph"] in ("X", "i") and not isinstance(e.get("ts"), (int, float)):
        fail("trace.json: event without a ts: %s" % e)
x = [e for e in ev if e["ph"] == "X"]
if len({e["pid"] for e in ev}) != 3:
    fail("trace.json: %d processes, want one per report" % len({e["pid"] for e in ev}))
tids = [e["tid"] for e in ev if e["ph"] == "M" and e["pid"] == 0 and e["name"] == "thread_name"
        and e["args"]["name"].startswith("allreduce 16M-32M comm 0000000000000abc")]
if len(tids) != 1:
    fail("trace.json: rank 0's allreduce 16M-32M thread %s" % tids)
if len([e for e in x if e["cat"] == "probe" and e["pid"] == 0 and e["tid"] == tids[0]]) != 3:
    fail("trace.json: rank 0's allreduce probes %s" % [e for e in x if e["pid"] == 0])
pin = [e for e in x if e["cat"] == "pinned" and e["pid"] == 0 and e["tid"] == tids[0]
       and e["name"].startswith("pinned ring/simple nch=24")]
if len(pin) != 1 or pin[0]["args"]["calls"] != 370:
    fail("trace.json: rank 0's pinned slice %s" % pin)
if not [e for e in ev if e["ph"] == "i" and e["cat"] == "reopen"]:
    fail("trace.json: no re-open event")
print("check_trace: ok")
