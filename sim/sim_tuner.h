/* The tuner plugin as sim/'s emulated NCCL sees it (sim_nccl_tuner.c). */
#ifndef SIM_TUNER_H
#define SIM_TUNER_H

#include "autoha/nccl_tuner_abi.h"

struct ncclComm;

typedef struct {
  void *handle;
  int abi;            /* 1..6: the ncclTunerPlugin_vN found */
  const void *plugin; /* the ah_tuner_vN_t */
  const char *name;
  /* v4-v6's getCollInfo (one signature), which the per-call path calls directly as NCCL's call
   * site does; NULL for v1-v3 (sim_tuner_get_coll_info) */
  ncclResult_t (*table_fn)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                           float **collCostTable, int numAlgo, int numProto, int regBuff,
                           int *nChannels);
} sim_tuner_t;

/* Loads the tuner on first use (once per process, by the emulated version's rules) and returns
 * it, or NULL when none is configured or loadable. Pair with sim_tuner_release. */
const sim_tuner_t *sim_tuner_acquire(void);
void sim_tuner_release(void);
ncclResult_t sim_tuner_init(const sim_tuner_t *t, struct ncclComm *comm, void **ctx_p,
                            ah_tuner_constants_v5_t *constants);
void sim_tuner_finalize(const sim_tuner_t *t, void *ctx);
ncclResult_t sim_tuner_get_coll_info(const sim_tuner_t *t, void *ctx, int coll, size_t nbytes,
                                     int num_pipe_ops, float table[AH_NUM_ALGOS][AH_NUM_PROTOS],
                                     int num_algo, int coll_net, int nvls, int *algo_p,
                                     int *proto_p, int *nchannels_p);
ncclResult_t sim_tuner_get_chunk(const sim_tuner_t *t, void *ctx, int coll, size_t nbytes, int algo,
                                 int proto, int nchannels, size_t *chunk_p);
#endif
