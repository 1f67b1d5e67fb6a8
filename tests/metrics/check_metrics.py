"""Checks every metrics file of a job against the JSON report of the same process.

    check_metrics.py DIR    # DIR/*.prom and DIR/*.json, named alike (%h-%p)

Each .prom file is parsed with prometheus_client's own text-format parser (a file it cannot parse
fails), every family must have HELP and TYPE lines, and its figures must be the report's: calls
per key equal, mean time and bus bandwidth within 1e-6, tuning state and applied configuration
the same, findings per kind at least those the report lists, one communicator count.
"""
import glob
import json
import math
import os
import sys

from prometheus_client.parser import text_string_to_metric_families

fails = []


def fail(msg):
    fails.append(msg)
    print("FAIL " + msg)


def close(a, b):
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)


def check(prom, rep):
    name = os.path.basename(prom)
    text = open(prom).read()
    with open(prom) as f:
        declared = {l.split()[2] for l in f if l.startswith("# TYPE ")}
    fams = {}
    for fam in text_string_to_metric_families(text):
        if not fam.documentation or fam.type == "unknown":
            fail("%s: family %s has no HELP or TYPE" % (name, fam.name))
        fams[fam.name] = fam
    if not all(n.startswith("autoha_") for n in declared):
        fail("%s: a family without the autoha_ prefix: %s" % (name, sorted(declared)))
    proc = {"host": rep["host"], "pid": str(rep["pid"]), "rank": str(rep["rank"])}

    def samples(family, **want):
        out = []
        for s in fams[family].samples if family in fams else []:
            if any(s.labels.get(k) != v for k, v in proc.items()):
                fail("%s: %s has process labels %s, the report %s" % (name, s.name, s.labels, proc))
            if all(s.labels.get(k) == v for k, v in want.items()):
                out.append(s)
        return out

    nkeys = 0
    for comm in rep["comms"]:
        cid = comm["id"]
        for k in comm["keys"]:
            nkeys += 1
            key = dict(comm=cid, coll=k["coll"], bin=str(k["bin"]))
            what = "%s %s/%s bin %s" % (name, cid, k["coll"], k["bin"])
            c = samples("autoha_calls", **key)
            if len(c) != 1 or c[0].value != k["calls"]:
                fail("%s: calls %s, the report %d" % (what, [s.value for s in c], k["calls"]))
            rng = "%d-%d" % (k["bytes"]["bin_min"], k["bytes"]["bin_max"])
            if c and c[0].labels.get("size_bytes") != rng:
                fail("%s: size_bytes %s, the report %s" % (what, c[0].labels.get("size_bytes"), rng))
            for choice, stat in (("applied", k["applied"]), ("nccl_default", k["default"])):
                for fam, field, scale in (("autoha_busbw_bytes_per_second", "busbw_gbs", 1e9),
                                          ("autoha_call_mean_seconds", "time_us", 1e-6)):
                    got = samples(fam, choice=choice, **key)
                    if stat["timed"] == 0 or stat[field] is None:
                        if got:
                            fail("%s: %s %s for an untimed config" % (what, fam, choice))
                        continue
                    if len(got) != 1 or not close(got[0].value, stat[field] * scale):
                        fail("%s: %s %s %s, the report %s" %
                             (what, fam, choice, [s.value for s in got], stat[field] * scale))
            state = k["tuning"]["state"] if "tuning" in k else "untuned"
            on = [s.labels["state"] for s in samples("autoha_tuning_state", **key) if s.value == 1]
            if on != [state]:
                fail("%s: tuning state %s, the report %s" % (what, on, state))
            cfg = samples("autoha_applied_config_info", **key)
            if len(cfg) != 1 or cfg[0].labels["config"] != k["applied"]["config"]["text"] or \
                    cfg[0].labels["source"] != k["source"]:
                fail("%s: applied config %s, the report %s (%s)" %
                     (what, [s.labels for s in cfg], k["applied"]["config"]["text"], k["source"]))
    if nkeys == 0:
        fail("%s: the report has no key" % name)
    n = samples("autoha_communicators")
    if len(n) != 1 or n[0].value != len(rep["comms"]):
        fail("%s: communicators %s, the report %d" % (name, [s.value for s in n], len(rep["comms"])))
    listed = {}
    for h in rep["health"]:
        listed[h["kind"]] = listed.get(h["kind"], 0) + 1
    for s in samples("autoha_health_findings"):
        if s.value < listed.get(s.labels["kind"], 0):
            fail("%s: %s findings %d, the report lists %d" %
                 (name, s.labels["kind"], s.value, listed[s.labels["kind"]]))
    if len(samples("autoha_health_findings")) != 11:
        fail("%s: not one findings counter per kind" % name)
    conn = samples("autoha_coordinator_connected")
    if len(conn) != 1:
        fail("%s: no coordinator_connected gauge" % name)
    return nkeys


def main():
    d = sys.argv[1]
    proms = sorted(glob.glob(os.path.join(d, "*.prom")))
    if len(proms) != int(sys.argv[2]):
        fail("%d metrics files in %s, expected %s: %s" % (len(proms), d, sys.argv[2], os.listdir(d)))
    for p in proms:
        rp = p[:-len(".prom")] + ".json"
        if not os.path.exists(rp):
            fail("%s: no report %s beside it" % (p, rp))
            continue
        nkeys = check(p, json.load(open(rp)))
        print("%s: %d keys checked against %s" % (os.path.basename(p), nkeys, os.path.basename(rp)))
    left = [f for f in os.listdir(d) if ".tmp." in f]
    if left:
        fail("temporary files left: %s" % left)
    print("metrics: %s" % ("FAILED" if fails else "OK"))
    sys.exit(1 if fails else 0)


main()
