/* A tuner plugin that keeps every NCCL choice and does nothing else: the baseline of
 * bench/hotpath that isolates the shim's own cost from what the emulated NCCL spends whenever any
 * tuner is loaded (sim/ then also derives its untuned default per bucket, for its trace). */
#include "autoha/nccl_tuner_abi.h"

static ncclResult_t init(void **ctx, uint64_t id, size_t nranks, size_t nnodes,
                         ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                         ah_tuner_constants_v5_t *constants) {
  (void)id, (void)nranks, (void)nnodes, (void)log, (void)dom, (void)constants;
  *ctx = (void *)1;
  return ncclSuccess;
}

static ncclResult_t get(void *ctx, ah_nccl_func_t coll, size_t nbytes, int npipe, float **table,
                        int nalgo, int nproto, int reg, int *nch) {
  (void)ctx, (void)coll, (void)nbytes, (void)npipe, (void)table, (void)nalgo, (void)nproto,
      (void)reg, (void)nch;
  return ncclSuccess;
}

static ncclResult_t fini(void *ctx) {
  (void)ctx;
  return ncclSuccess;
}

__attribute__((visibility("default")))
const ah_tuner_v5_t ncclTunerPlugin_v5 = {"null", init, get, fini};
