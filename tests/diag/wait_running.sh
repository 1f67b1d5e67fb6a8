#!/usr/bin/env bash
# Waits (up to 120 s) until `autoha status` on the job's hub shows a communicator of N ranks all
# running their steps: each idle or busy, past CALLS calls, with a record younger than 1.5 s.
# Prints why and exits 1 when the job (PID) ends first or the time runs out.
#   wait_running.sh AUTOHA_CLI REPORT_DIR PID N CALLS
set -u
cli=$1 dir=$2 pid=$3 n=$4 calls=$5
for _ in $(seq 1200); do
  kill -0 "$pid" 2>/dev/null || { echo "the job ended before its ranks ran their steps"; exit 1; }
  cred=$(ls "$dir"/hub-*.cred 2>/dev/null | head -1)
  if [ -n "$cred" ] && "$cli" status "$cred" --json 2>/dev/null | python3 -c '
import json, sys
n, calls = int(sys.argv[1]), int(sys.argv[2])
d = json.load(sys.stdin)
sys.exit(0 if any(len(c["ranks"]) == n and all(r["state"] in ("idle", "busy") and r["calls"] >= calls
                  and r["record_age_s"] < 1.5 for r in c["ranks"]) for c in d.get("comms", [])) else 1)
' "$n" "$calls"; then
    exit 0
  fi
  sleep 0.1
done
echo "autoha status never showed the $n ranks running their steps"
exit 1
