/* A user's own tuner plugin (v4), for the chaining test: AllReduce below 1 MiB gets the cheapest
 * LL128 cell NCCL allows, AllGather 4 channels. With autoha preloaded it must still decide those
 * calls (autoha runs it underneath and keeps its answers where autoha has no override). */
#include "autoha/nccl_tuner_abi.h"

static ncclResult_t init(size_t nranks, size_t nnodes, ah_nccl_logger_t log, void **ctx) {
  (void)nranks, (void)nnodes, (void)log;
  static int state;
  *ctx = &state;
  return ncclSuccess;
}

static ncclResult_t get(void *ctx, ah_nccl_func_t coll, size_t nbytes, int npipe, float **table,
                        int nalgo, int nproto, int reg, int *nch) {
  (void)ctx, (void)npipe, (void)reg;
  float(*t)[nproto] = AH_COST_TABLE(table, nproto);
  if (coll == AH_FUNC_ALLREDUCE && nbytes < (1u << 20)) {
    int best = -1;
    for (int a = 0; a < nalgo; a++)
      if (t[a][AH_PROTO_LL128] >= 0 && (best < 0 || t[a][AH_PROTO_LL128] < t[best][AH_PROTO_LL128]))
        best = a;
    if (best >= 0) t[best][AH_PROTO_LL128] = 0.0f;
  }
  if (coll == AH_FUNC_ALLGATHER) *nch = 4;
  return ncclSuccess;
}

static ncclResult_t fini(void *ctx) {
  (void)ctx;
  return ncclSuccess;
}

__attribute__((visibility("default")))
const ah_tuner_v4_t ncclTunerPlugin_v4 = {"user", init, get, fini};
