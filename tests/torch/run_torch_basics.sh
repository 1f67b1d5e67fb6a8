#!/usr/bin/env bash
# What a PyTorch user meets first on sim/, one check per call:
#   run_torch_basics.sh imports PYTHON LIBNCCLSIM
#     every CUDA runtime, driver and NCCL function the installed torch's libraries import is
#     exported by libncclsim.so (cuFile* excepted: libcufile is the wheel's own, not CUDA's);
#   run_torch_basics.sh device_count PYTHON LAUNCHER
#     `import torch; torch.cuda.device_count()` answers sim/'s GPU count of the node: the default,
#     NCCLSIM_DEVICES, CUDA_VISIBLE_DEVICES;
#   run_torch_basics.sh nccl_decls PYTHON CXX CUDA_INCLUDE SIM_DIR
#     sim/'s declarations of the NCCL 2.30 API compile against the wheel's 2.30.7 headers.
set -uo pipefail
what=$1 python=$2
site=$("$python" -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])') ||
  { echo "FAIL: torch is not installed for $python"; exit 1; }

case $what in
imports)
  lib=$3
  nm -D --defined-only "$lib" | awk '{print $3}' | sed 's/@.*//' | sort -u >exports.txt
  for f in "$site"/lib/*.so; do nm -D --undefined-only "$f" | awk '{print $2}'; done |
    sed 's/@.*//' | grep -E '^(cuda|cu[A-Z]|nccl)' | grep -v '^cuFile' | sort -u >imports.txt
  n=$(wc -l <imports.txt)
  [ "$n" -gt 150 ] || { echo "FAIL: only $n CUDA/NCCL imports found in $site/lib"; exit 1; }
  missing=$(comm -23 imports.txt exports.txt)
  rm -f exports.txt imports.txt
  [ -z "$missing" ] || { echo "FAIL: libncclsim.so lacks:"; echo "$missing"; exit 1; }
  echo "PASS: libncclsim.so exports all $n CUDA and NCCL functions torch's libraries import"
  ;;
device_count)
  launcher=$3
  # count EXPECTED [ENV...]: torch's answer in a one-rank job must be EXPECTED.
  count() {
    local want=$1; shift
    got=$(env "$@" "$launcher" --preload -n 1 -- "$python" -c \
      'import torch; assert torch.cuda.is_available(); print(torch.cuda.device_count(), torch.cuda.get_device_name(0))' 2>&1)
    [ "${got%% *}" = "$want" ] || { echo "FAIL: ${*:-default}: device_count answered '$got', expected $want"; exit 1; }
    echo "PASS: ${*:-default}: torch.cuda.device_count() = $want (${got#* })"
  }
  unset CUDA_VISIBLE_DEVICES NCCLSIM_DEVICES
  count 8
  count 4 NCCLSIM_DEVICES=4
  count 3 CUDA_VISIBLE_DEVICES=0,1,2
  # Every rank of the 2-node job checks its count too (tests/torch/torch_job.py, NCCLSIM_DEVICES=4).
  ;;
nccl_decls)
  cxx=$3 cuda_inc=$4 sim_dir=$5
  inc="$site/../nvidia/nccl/include"
  grep -q 'NCCL_VERSION_CODE 23007' "$inc/nccl.h" || { echo "FAIL: $inc/nccl.h is not NCCL 2.30.7's"; exit 1; }
  "$cxx" -std=c++17 -fsyntax-only -Wall -Werror -I"$inc" -I"$cuda_inc" -I"$sim_dir" \
    "$(dirname "$0")/check_nccl_230.cc" || { echo "FAIL: sim/sim_nccl_230.h differs from NCCL 2.30.7"; exit 1; }
  echo "PASS: sim/sim_nccl_230.h agrees with NCCL 2.30.7's nccl.h and nccl_device/core.h"
  ;;
*) echo "usage: $0 imports|device_count|nccl_decls PYTHON ..."; exit 2 ;;
esac
