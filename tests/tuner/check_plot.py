#!/usr/bin/env python3
"""Checks what `autoha plot --trace` wrote from test_tuner_plot's fixture reports: both SVGs are
well-formed XML with the expected panels, series, points and timeline rows, and trace.json is
trace-event JSON that Perfetto opens (a traceEvents array of X/M/i events with pid, tid, ts).
Usage: check_plot.py DIR   (DIR holds busbw.svg, timeline.svg, trace.json). Exits 1 naming the
first thing that is wrong."""
import json
import sys
import xml.etree.ElementTree as ET

NS = "{http://www.w3.org/2000/svg}"
d = sys.argv[1]


def fail(msg):
    print("check_plot: " + msg)
    sys.exit(1)


def groups(root, cls):
    return [g for g in root.iter(NS + "g") if g.get("class") == cls]


busbw = ET.parse(d + "/busbw.svg").getroot()
if busbw.tag != NS + "svg":
    fail("busbw.svg: root is %s" % busbw.tag)
panels = sorted((g.get("data-coll"), g.get("data-nranks")) for g in groups(busbw, "panel"))
if panels != [("allgather", "8"), ("allreduce", "8")]:
    fail("busbw.svg: panels %s" % panels)
series = {(g.get("data-coll"), g.get("data-series")): g for g in groups(busbw, "series")}
for key in [("allreduce", "nccl"), ("allreduce", "autoha"), ("allgather", "nccl"), ("allgather", "autoha")]:
    if key not in series:
        fail("busbw.svg: no series %s (have %s)" % (key, sorted(series)))
pts = series[("allreduce", "autoha")].findall(NS + "circle")
# allreduce: two bins (16M and 64K); the 16M point is the median of the ranks' 1000, 1000, 1500 us:
# 16 MiB / 1000 us x 2(n-1)/n = 16.777 GB/s x 1.75 = 29.36 GB/s.
bins = {p.get("data-bin"): float(p.get("data-busbw")) for p in pts}
if sorted(bins) != ["16", "24"]:
    fail("busbw.svg: allreduce autoha bins %s" % sorted(bins))
if abs(bins["24"] - 16777216 / 1000e-6 / 1e9 * 1.75) > 0.01:
    fail("busbw.svg: allreduce 16M busbw %s" % bins["24"])
nccl24 = [float(p.get("data-busbw")) for p in series[("allreduce", "nccl")].findall(NS + "circle") if p.get("data-bin") == "24"]
if len(nccl24) != 1 or abs(nccl24[0] - 16777216 / 2000e-6 / 1e9 * 1.75) > 0.01:
    fail("busbw.svg: allreduce 16M NCCL busbw %s" % nccl24)

tl = ET.parse(d + "/timeline.svg").getroot()
keys = {(g.get("data-coll"), g.get("data-bin")): g for g in groups(tl, "key")}
if len(keys) != 3:
    fail("timeline.svg: %d key rows, want 3 (one per key of the one communicator)" % len(keys))
ar = keys[("allreduce", "24")]
if ar.get("data-state") != "converged" or ar.get("data-reopened") != "1":
    fail("timeline.svg: allreduce row %s" % ar.attrib)
probes = [r for r in ar.iter(NS + "rect") if r.get("class") == "probe"]
pinned = [r for r in ar.iter(NS + "rect") if r.get("class") == "pinned"]
reopen = [p for p in ar.iter(NS + "path") if p.get("class") == "reopen"]
if len(probes) != 3 or len(pinned) != 1 or len(reopen) != 1:
    fail("timeline.svg: allreduce has %d probes, %d pinned, %d reopen marks" % (len(probes), len(pinned), len(reopen)))
# The search spent calls 0-100 of 400, so the pinned part is 3/4 of the 480-pixel bar.
if abs(float(pinned[0].get("width")) - 360) > 0.1:
    fail("timeline.svg: pinned width %s" % pinned[0].get("width"))
if keys[("allgather", "20")].get("data-state") != "default":
    fail("timeline.svg: allgather row %s" % keys[("allgather", "20")].attrib)

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
print("check_plot: ok")
