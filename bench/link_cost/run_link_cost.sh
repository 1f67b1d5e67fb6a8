#!/usr/bin/env bash
# run_link_cost.sh: the instructions per-connection timing (AUTOHA_SLOW_LINK_PCT, rdma/rdma_link_*.c,
# docs/diagnosis.md "Slow links") adds per work request, measured with callgrind on sim/'s verbs
# provider. A ncclsim-ibbw-dl client (dlopen + dlvsym, NCCL's route, so its queue pair is hooked)
# whose queue pair takes no receive work requests (--send-only: net_ib's sending end, the one that
# is timed) posts 64-byte write_imm and send messages of 4 WRs, the last signalled, one WR per call,
# under LD_PRELOAD=libautoha.so with the timing on and AUTOHA_HA off; the server side runs plain.
# From callgrind's inclusive counts:
#   post   (lk_post_send - the provider's post_send it calls) / WRs posted
#   poll   (lk_poll_cq_K - the provider's poll_cq it calls) / WRs posted   (empty polls included;
#          lk_poll_cq_K is context slot K's poll wrapper, summed over K)
# and the figure is their sum, for a sending end; bar: 70 per WR, paid on NCCL's proxy thread, off the collective hot
# path (bench/ha_cost's failover layer, which logs every work request, is held to 100; at 400 Gb/s a
# 64 KiB work request takes 1.3 us on the wire, and 70 instructions are some 20 ns of it).
# First the same for a client queue pair created with receive work requests (a connection's
# receiving end, as net_ib's: not timed, its posts only find their context's).
#   run_link_cost.sh NCCLSIM_IBBW_DL LIBAUTOHA SIMLIB_DIR   (LINK_COST_ITERS: ibbw iterations, 20000)
set -u
# A single-host job: its hub listens on loopback unless the caller named an interface.
export AUTOHA_COORD_IFNAME=${AUTOHA_COORD_IFNAME:-lo}
bin=$1 lib=$2 simlib=$3 iters=${LINK_COST_ITERS:-20000}
bar=70
. "$(dirname "${BASH_SOURCE[0]}")/../common/callgrind_cost.sh" || { echo "link_cost: FAILED"; exit 1; }
cg_require link_cost
dir=$(mktemp -d)
export LD_LIBRARY_PATH="$simlib" NCCLSIM_SHM_PREFIX="lkcost$$-" NCCLSIM_TOPO="nodes=2,gpus=8,gpu=h100,nic=8x400"
trap '[ -n "${LINK_COST_KEEP:-}" ] || rm -rf "$dir"; rm -f /dev/shm/"${NCCLSIM_SHM_PREFIX}"*' EXIT
# measure NAME [--send-only]: one client run under callgrind; prints its line and sets total
measure() {
  local name=$1 rc src tag
  shift
  tag=$(tr -c 'a-z\n' '_' <<<"$name")
  local args=(--rendezvous "$dir/rdv-$tag" --ops write_imm,send --sizes 64 --iters "$iters" "$@")
  NCCLSIM_NODE=1 timeout 600 "$bin" --server "${args[@]}" >"$dir/server-$tag.log" 2>&1 &
  local server=$!
  NCCLSIM_NODE=0 AUTOHA_HA=off AUTOHA_SLOW_LINK_PCT=20 LD_PRELOAD="$lib" timeout 600 valgrind --tool=callgrind \
    --callgrind-out-file="$dir/cg-$tag.out" "$bin" --client "${args[@]}" >"$dir/client-$tag.log" 2>&1
  rc=$?
  wait $server
  src=$?
  [ $rc -eq 0 ] && [ $src -eq 0 ] || { cat "$dir/client-$tag.log" "$dir/server-$tag.log"; echo "link_cost: the ibbw run failed ($rc, $src)"; return 1; }
  [ -n "${LINK_COST_KEEP:-}" ] && echo "link_cost: profile in $dir/cg-$tag.out"
  local wrs polls per_post per_poll # and total, the caller's
  cg_cost "$dir/cg-$tag.out" lk_post_send 'lk_poll_cq_[0-9]+' 'lk_post_send|post_other' 'lk_poll_cq_[0-9]+|poll_took' ||
    { echo "link_cost: the timing's wrappers or the provider's calls are missing from the profile (not hooked?)"; return 1; }
  echo "link_cost: $name: $wrs WRs posted one per call, $polls polls: post adds $per_post instructions per WR, poll adds $per_poll per WR (empty polls included): $total"
}
measure "a receiving end (not timed)" || { echo "link_cost: FAILED"; exit 1; }
measure "a sending end (timed)" --send-only || { echo "link_cost: FAILED"; exit 1; }
if cg_at_most "$total" "$bar"; then verdict=OK; else verdict=FAILED; fi
echo "link_cost: added instructions per WR (post + completion) of a timed queue pair: $total (bar <= $bar): $verdict"
[ $verdict = OK ]
