#!/usr/bin/env python3
"""Checks for the shim's end-to-end tests (run_e2e.sh).

  check_e2e.py report JOB_STDOUT REPORT_DIR
      Every report in REPORT_DIR parses; the multiset of (communicator size, collective, size bin,
      calls) over all reports equals the one shim_job printed ("calls ..." lines): the report's
      keys and calls match the job's calls exactly.
  check_e2e.py tuned REPORT_DIR
      Every communicator has keys whose search (shown in the report of the process holding its
      leader) measured at least two configurations, and all ranks of a communicator ended each key
      on the same configuration.
  check_e2e.py converged REPORT_DIR
      Every key the online search worked on has settled (state converged, or default when nothing
      beat NCCL's choice), none is still searching, and at least one converged on a configuration.
  check_e2e.py trace BASELINE_TRACE TRACE [COLL LO HI ALGO PROTO NCH]
      Every line of TRACE (NCCLSIM_TRACE of the run with the shim) ran the configuration the
      baseline (no shim) ran for the same collective and size, except lines of collective COLL with
      bytes per rank in [LO, HI], which must all run ALGO/PROTO on NCH channels — on every rank.
"""
import collections
import glob
import json
import sys

BPR = {"allgather", "reducescatter"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check_report(job_out, rep_dir):
    want = collections.Counter()
    for line in open(job_out):
        if line.startswith("calls "):
            f = dict(kv.split("=") for kv in line.split()[1:])
            want[(int(f["nranks"]), f["coll"], int(f["bin"]), int(f["n"]))] += 1
    if not want:
        fail("the job printed no calls")
    got = collections.Counter()
    files = sorted(glob.glob(rep_dir + "/*.json"))
    if not files:
        fail("no report in " + rep_dir)
    for path in files:
        try:
            rep = json.load(open(path))
        except ValueError as e:
            fail("%s does not parse: %s" % (path, e))
        for comm in rep["comms"]:
            for k in comm["keys"]:
                got[(comm["nranks"], k["coll"], k["bin"], k["calls"])] += 1
    if got != want:
        print("keys the job issued but the reports lack (or count differently):")
        for k, v in sorted((want - got).items()):
            print("  nranks=%d coll=%s bin=%d calls=%d x%d" % (k + (v,)))
        print("keys in the reports the job did not issue:")
        for k, v in sorted((got - want).items()):
            print("  nranks=%d coll=%s bin=%d calls=%d x%d" % (k + (v,)))
        fail("report keys/calls differ from the job's calls")
    print("PASS: %d report files, %d (comm, key) entries match the job's calls exactly"
          % (len(files), sum(want.values())))


def check_tuned(rep_dir):
    searched = collections.Counter()
    states = collections.defaultdict(set)
    for path in sorted(glob.glob(rep_dir + "/*.json")):
        rep = json.load(open(path))
        for comm in rep["comms"]:
            searched[comm["id"]] += 0
            for k in comm["keys"]:
                t = k.get("tuning")
                if t and t.get("probes_count", 0) >= 2:
                    searched[comm["id"]] += 1
                states[(comm["id"], k["coll"], k["bin"])].add(k["applied"]["config"]["text"])
    for comm, n in searched.items():
        if n == 0:  # the search runs where the leader (rank 0) is; its report shows it
            fail("no report shows a search of communicator %s that measured two configurations" % comm)
    for key, cfgs in states.items():
        if len(cfgs) != 1:
            fail("ranks of %s ended on different configurations: %s" % (key, sorted(cfgs)))
    print("PASS: every communicator (%d) was searched (%d key reports with several configurations "
          "measured); all ranks ended on the same configuration per key" % (len(searched), sum(searched.values())))


def check_converged(rep_dir):
    states = collections.Counter()
    for path in sorted(glob.glob(rep_dir + "/*.json")):
        for comm in json.load(open(path))["comms"]:
            for k in comm["keys"]:
                t = k.get("tuning")
                if not t:
                    continue
                states[t["state"]] += 1
                if t["state"] not in ("converged", "default"):
                    fail("%s bin %d of communicator %s is still %s after %d calls (%d spent on probes)"
                         % (k["coll"], k["bin"], comm["id"], t["state"], k["calls"], t["calls_spent"]))
    if states["converged"] == 0:
        fail("no key converged (tuning states: %s)" % dict(states))
    print("PASS: every searched key settled: %s" % dict(states))


def parse_trace(path):
    lines = []
    for line in open(path):
        f = dict(kv.split("=", 1) for kv in line.split())
        for k in ("coll", "algo", "proto"):
            f[k] = f[k].lower()  # sim prints NCCL's names (AllReduce, Ring, LL128)
        lines.append(f)
    ranks = collections.defaultdict(set)
    for f in lines:
        ranks[f["comm"]].add(f["rank"])
    for f in lines:
        n = len(ranks[f["comm"]])
        b = int(f["bytes"])
        f["bpr"] = b // n if f["coll"] in BPR else b
        f["cfg"] = (f["algo"], f["proto"], f["nchannels"])
    return lines


def check_trace(base_path, path, ov):
    base = {}
    for f in parse_trace(base_path):
        base.setdefault((f["coll"], f["bytes"]), set()).add(f["cfg"])
    lines = parse_trace(path)
    if not lines:
        fail("empty trace " + path)
    hit = collections.Counter()
    for f in lines:
        if ov and f["coll"] == ov[0] and ov[1] <= f["bpr"] <= ov[2]:
            if f["cfg"] != (ov[3], ov[4], ov[5]):
                fail("call %s of comm %s rank %s (%s, %d B/rank) ran %s, expected the override %s"
                     % (f["call"], f["comm"], f["rank"], f["coll"], f["bpr"], f["cfg"], ov[3:]))
            hit[(f["comm"], f["rank"])] += 1
        else:
            want = base.get((f["coll"], f["bytes"]))
            if want is None:
                fail("no baseline line for %s of %s bytes" % (f["coll"], f["bytes"]))
            if f["cfg"] not in want:
                fail("call %s rank %s (%s, %s B) ran %s; without the shim it ran %s"
                     % (f["call"], f["rank"], f["coll"], f["bytes"], f["cfg"], sorted(want)))
    if ov:
        if not hit:
            fail("no call matched the override")
        counts = set(hit.values())
        if len(counts) != 1:
            fail("ranks ran different numbers of overridden calls: %s" % dict(hit))
        print("PASS: override %s applied on %d ranks (%d calls each), every other call as without the shim"
              % (ov[3:], len(hit), counts.pop()))
    else:
        print("PASS: all %d calls ran the configuration they ran without the shim" % len(lines))


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "report":
        check_report(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "converged":
        check_converged(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "tuned":
        check_tuned(sys.argv[2])
    elif len(sys.argv) in (4, 10) and sys.argv[1] == "trace":
        ov = None
        if len(sys.argv) == 10:
            a = sys.argv[4:]
            ov = (a[0], int(a[1]), int(a[2]), a[3], a[4], a[5])
        check_trace(sys.argv[2], sys.argv[3], ov)
    else:
        print(__doc__)
        sys.exit(2)


main()
