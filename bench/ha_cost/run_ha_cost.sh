#!/usr/bin/env bash
# run_ha_cost.sh: the instructions AUTOHA_HA adds per work request in peace time (issue 15's bar:
# <= 100 per WR, its post and its completion together), measured with callgrind on sim/'s verbs
# provider. A ncclsim-ibbw-dl client (dlopen + dlvsym, NCCL's route, so its queue pairs are the HA
# layer's) posts 64-byte write_imm and send WRs one per call under LD_PRELOAD=libautoha.so and
# AUTOHA_HA=port; the server side runs plain. From callgrind's inclusive counts:
#   post   (ha_post_send - the provider's post_send it calls) / WRs posted
#   poll   (ha_poll_cq_K - the provider's poll_cq it calls) / WRs posted   (empty polls included;
#          ha_poll_cq_K is context slot K's poll wrapper, summed over K)
# and the figure is their sum. No hub is reached, so shadows stay unbuilt: the data path is the
# peace-time one (log, post, retire).
# First, with NCCLSIM_RUN and FABRIC_PERF given, the acceptance's other peace-time figure: the
# busbw of a small job (4 ranks on 2 nodes with dual-port NICs, unbonded, as test_ha_failover_peace
# runs: 64 MiB AllReduce and AllGather, bench/fabric's fabric_perf, after 40 rounds of checked
# calls that leave the shadows time to connect) under AUTOHA_HA=port against the same job with
# AUTOHA_HA=off — sim/'s modelled figure (it follows each QP's traffic on the fabric, shadows
# included), bar: within 1%.
#   run_ha_cost.sh NCCLSIM_IBBW_DL LIBAUTOHA SIMLIB_DIR [NCCLSIM_RUN FABRIC_PERF]
#   (HA_COST_ITERS: ibbw iterations, default 20000)
set -u
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
bin=$1 lib=$2 simlib=$3 jobrun=${4:-} perf=${5:-} iters=${HA_COST_ITERS:-20000}
bar=100
. "$(dirname "${BASH_SOURCE[0]}")/../common/callgrind_cost.sh" || { echo "ha_cost: FAILED"; exit 1; }
cg_require ha_cost
dir=$(mktemp -d)
trap 'rm -rf "$dir"; rm -f /dev/shm/"${NCCLSIM_SHM_PREFIX}"*' EXIT
bw_ok=1
if [ -n "$jobrun" ] && [ -n "$perf" ]; then
  bytes=$((64 << 20))
  bw_job() { # LOG HA: the job under AUTOHA_HA=HA; fails the bench if it fails
    LD_LIBRARY_PATH="$simlib" NCCLSIM_TOPO=nic=8x400x2 NCCLSIM_FABRIC=bond=0 AUTOHA_REPORT=off AUTOHA_HA=$2 FABRIC_PERF_ROUNDS=40 \
      AUTOHA_LOG=debug AUTOHA_LOG_SUBSYS=qp LD_PRELOAD="$lib" timeout 300 "$jobrun" -n 4 --nodes 2 -- "$perf" "$bytes" \
      >"$1" 2>&1 || { tail -5 "$1"; echo "ha_cost: the busbw job with AUTOHA_HA=$2 failed"; bw_ok=0; }
  }
  busbw() { sed -nE "s/^fabric_perf: $2 $bytes B: .* busbw ([0-9.]+) GB\/s/\1/p" "$1"; }
  bw_job "$dir/bw-off.log" off
  bw_job "$dir/bw-port.log" port
  ready=$(grep -c "shadow QP [0-9]* (port 2) is ready" "$dir/bw-port.log")
  grep -q "failed over" "$dir/bw-port.log" && { echo "ha_cost: a failover without a fault"; bw_ok=0; }
  [ "$ready" -ge 16 ] || { echo "ha_cost: only $ready shadows became ready under AUTOHA_HA=port"; bw_ok=0; }
  line=""
  for coll in allreduce allgather; do
    off=$(busbw "$dir/bw-off.log" $coll) on=$(busbw "$dir/bw-port.log" $coll)
    [ -n "$off" ] && [ -n "$on" ] || { echo "ha_cost: no $coll busbw printed"; bw_ok=0; continue; }
    r=$(awk -v a="$on" -v b="$off" 'BEGIN {printf "%.4f", a / b}')
    awk -v r="$r" 'BEGIN {exit !(r >= 0.99 && r <= 1.01)}' || bw_ok=0
    line="$line, $coll $on GB/s vs $off GB/s = $r"
  done
  if [ $bw_ok = 1 ]; then v=OK; else v=FAILED; fi
  echo "ha_cost: peace-time busbw (sim/'s modelled figure), 4 ranks on 2 nodes, 64 MiB, AUTOHA_HA=port ($ready shadows ready) vs off${line} (bar: within 1%): $v"
fi
export LD_LIBRARY_PATH="$simlib" NCCLSIM_SHM_PREFIX="hacost$$-" NCCLSIM_TOPO="nodes=2,gpus=8,gpu=h100,nic=8x400"
args=(--rendezvous "$dir/rdv" --ops write_imm,send --sizes 64 --iters "$iters")
NCCLSIM_NODE=1 timeout 600 "$bin" --server "${args[@]}" >"$dir/server.log" 2>&1 &
server=$!
NCCLSIM_NODE=0 AUTOHA_HA=port LD_PRELOAD="$lib" timeout 600 valgrind --tool=callgrind \
  --callgrind-out-file="$dir/cg.out" "$bin" --client "${args[@]}" >"$dir/client.log" 2>&1
rc=$?
wait $server
src=$?
[ $rc -eq 0 ] && [ $src -eq 0 ] || { cat "$dir/client.log" "$dir/server.log"; echo "ha_cost: the ibbw run failed ($rc, $src)"; echo "ha_cost: FAILED"; exit 1; }
# the provider's calls from the wrappers and from their slow paths (a QP's first post takes one)
cg_cost "$dir/cg.out" ha_post_send 'ha_poll_cq_[0-9]+' 'ha_post_send|post_send_other|post_send_slow|log_and_post_send' \
  'ha_poll_cq_[0-9]+|poll_unusual|poll_body' ||
  { echo "ha_cost: the HA wrappers or the provider's calls are missing from the profile (not hooked?)"; echo "ha_cost: FAILED"; exit 1; }
echo "ha_cost: $wrs WRs posted one per call, $polls polls: post adds $per_post instructions per WR, poll adds $per_poll per WR (empty polls included)"
if cg_at_most "$total" "$bar"; then verdict=OK; else verdict=FAILED; fi
echo "ha_cost: added instructions per WR (post + completion), AUTOHA_HA=port, peace time: $total (bar <= $bar): $verdict"
[ $verdict = OK ] && [ $bw_ok = 1 ]
