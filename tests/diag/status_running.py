#!/usr/bin/env python3
"""Exit 0 when `autoha status --json` (stdin) shows a communicator of N ranks all running their steps:
each idle or busy, past CALLS calls, with a record younger than 1.5 s.
  autoha status CRED --json | status_running.py N CALLS"""
import json
import sys

n, calls = int(sys.argv[1]), int(sys.argv[2])
d = json.load(sys.stdin)
ok = any(len(c["ranks"]) == n and all(r["state"] in ("idle", "busy") and r["calls"] >= calls and
                                       r["record_age_s"] < 1.5 for r in c["ranks"])
         for c in d.get("comms", []))
sys.exit(0 if ok else 1)
