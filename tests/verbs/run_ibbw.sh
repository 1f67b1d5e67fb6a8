#!/bin/sh
# run_ibbw.sh BINARY SIM_LIB_DIR [client options...]: runs an ncclsim-ibbw server on simulated
# node 1 and a client on node 0 with sim/'s libibverbs first on LD_LIBRARY_PATH, the client
# checking that the library it mapped is that one; fails if either side fails. With
# IBBW_SERVER_ARGS=--crash the server dies at once and only the client's status counts (the
# killed server's names are removed here, as ncclsim-run does for its job).
set -u
bin=$1 simlib=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export LD_LIBRARY_PATH="$simlib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export NCCLSIM_SHM_PREFIX="ibbw$$-"
export NCCLSIM_TOPO="${NCCLSIM_TOPO:-nodes=2,gpus=8,gpu=h100,nic=8x400}"
NCCLSIM_NODE=1 "$bin" --server --rendezvous "$dir/rdv" --expect-lib "$simlib" ${IBBW_SERVER_ARGS:-} \
  > "$dir/server.log" 2>&1 &
server=$!
NCCLSIM_NODE=0 "$bin" --client --rendezvous "$dir/rdv" --expect-lib "$simlib" "$@"
client_rc=$?
wait $server
server_rc=$?
sed 's/^/[server] /' "$dir/server.log"
rm -f "/dev/shm/${NCCLSIM_SHM_PREFIX}fabric" # the job's fabric state: the launcher's to remove
if [ -n "${IBBW_SERVER_ARGS:-}" ]; then
  rm -f /dev/shm/"${NCCLSIM_SHM_PREFIX}"*
  exit $client_rc
fi
left=$(ls /dev/shm 2>/dev/null | grep -c "^ibbw$$-" || true)
if [ "$left" != 0 ]; then
  echo "run_ibbw: $left shared-memory names left behind"
  exit 1
fi
[ $client_rc = 0 ] && [ $server_rc = 0 ]
