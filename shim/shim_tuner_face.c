/* The shim as NCCL's tuner plugin: it exports ncclTunerPlugin_v1 ... _v7, so whichever version the
 * loaded NCCL asks for finds one. Each export is a thin adapter onto one decision path
 * (ah_shim_decide), which returns the configuration for the call; the adapters apply it with each
 * ABI's rules:
 *   - v3+: force a pair by setting its cost-table cell to 0.0 — never a cell that holds -1 (a pair
 *     NCCL cannot run); other cells that could tie at 0 are raised so the argmin is ours.
 *   - v1/v2: return the pair in the out-parameters, only when the collNet/NVLS flags allow it,
 *     because NCCL 2.19-2.21 do no support check of their own.
 *   - nChannels: 0 means "keep NCCL's"; getCollInfo always returns ncclSuccess, since NCCL fails
 *     the collective on any other value. */

#include "shim_chain.h"
#include "shim_control.h"
#include "shim_decide_hot.h"
#include "shim_internal.h"
#include "shim_real.h"
#include "ah_log_file.h"

/* Applies a decision to a v3+ cost table. A partial pair (algorithm or protocol -1) forces the
 * cheapest cell NCCL allows among those matching it. Returns 1 when the pair was applied (or
 * nothing was forced), 0 when no allowed cell matches (the caller refuses the decision). */
static int apply_table(float **collCostTable, int numAlgo, int numProto, const ah_decision_t *d,
                       int chained) {
  if (d->algo < 0 && d->proto < 0) return 1;
  float *t = (float *)(void *)collCostTable; /* contiguous [numAlgo][numProto] */
  int target = -1;
  if (d->algo >= 0 && d->proto >= 0) { /* the common case: a whole pair */
    if (d->algo < numAlgo && d->proto < numProto && t[d->algo * numProto + d->proto] >= 0)
      target = d->algo * numProto + d->proto;
  } else { /* a partial pair: the cheapest allowed cell that matches it */
    for (int a = 0; a < numAlgo; a++)
      for (int p = 0; p < numProto; p++) {
        int i = a * numProto + p;
        if ((d->algo < 0 || a == d->algo) && (d->proto < 0 || p == d->proto) && t[i] >= 0 &&
            (target < 0 || t[i] < t[target]))
          target = i;
      }
  }
  if (target < 0) return 0;
  /* NCCL takes the smallest non-negative cell, ties to the lowest index: only a 0.0 cell before
   * ours could beat the 0.0 we write. NCCL's own estimates are positive times, so only a chained
   * user tuner can have written one. */
  if (chained)
    for (int i = 0; i < target; i++)
      if (t[i] == 0.0f) t[i] = 1e6f;
  t[target] = 0.0f;
  return 1;
}

/* The full path: every call the short path (get_coll_info_table) does not answer. Kept whole: GCC
 * would split off its argument checks into a wrapper that re-pushes nine arguments. */
static AH_KEPT_WHOLE ncclResult_t get_coll_info_full(void *ctx, ah_nccl_func_t collType,
                                                     size_t nBytes, int numPipeOps,
                                                     float **collCostTable, int numAlgo,
                                                     int numProto, int regBuff, int *nChannels) {
  ah_comm_t *c = ctx;
  if (!c || !ah_shim.enabled || !collCostTable || numProto <= 0 || numAlgo <= 0) return ncclSuccess;
  if (c->chain_ctx) /* the user's own tuner first: its answer is the default autoha sees */
    ah_shim_chain_table(c->chain_ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo,
                        numProto, regBuff, nChannels);
  ah_call_t call = {collType, nBytes,   numPipeOps, regBuff, (const float *)(void *)collCostTable,
                    numAlgo,  numProto, 0,          0};
  ah_decision_t d;
  ah_shim_decide(c, &call, &d);
  /* ah_shim_decide checked this call's table, so this is only a guard: never force a -1 cell. */
  if (!apply_table(collCostTable, numAlgo, numProto, &d, c->chain_ctx != NULL))
    ah_shim_refused(c, &call, &d);
  if (d.nchannels > 0 && nChannels) *nChannels = d.nchannels;
  return ncclSuccess;
}

/* v3+ getCollInfo: a settled key's call on the short path (shim_decide_hot.h), else the full one
 * with the arguments as they came. A context exists only once the shim is enabled. Not a tail call:
 * GCC's sibling call would reload and re-store the three stack arguments on every call, and keep
 * them in registers it must then save. */
static AH_NO_TAIL_CALLS ncclResult_t get_coll_info_table(void *ctx, ah_nccl_func_t collType,
                                                         size_t nBytes, int numPipeOps,
                                                         float **collCostTable, int numAlgo,
                                                         int numProto, int regBuff,
                                                         int *nChannels) {
  if (__builtin_expect(ctx && collCostTable &&
                           ah_shim_decide_hot(ctx, collType, nBytes, (float *)(void *)collCostTable,
                                              numAlgo, nChannels),
                       1))
    return ncclSuccess;
  return get_coll_info_full(ctx, collType, nBytes, numPipeOps, collCostTable, numAlgo, numProto,
                            regBuff, nChannels);
}

/* v1/v2: NCCL wants both or neither of algorithm and protocol; a partial pair is completed with
 * SIMPLE (algorithm given) or RING (protocol given), and only pairs the flags allow are returned
 * (ah_shim_decide checked them), because NCCL 2.19-2.21 do no support check of their own. */
static ncclResult_t get_coll_info_flags(void *ctx, ah_nccl_func_t collType, size_t nBytes,
                                        int collNetSupport, int nvlsSupport, int numPipeOps,
                                        int *algorithm, int *protocol, int *nChannels) {
  ah_comm_t *c = ctx;
  if (!c || !ah_shim.enabled) return ncclSuccess;
  if (c->chain_ctx)
    ah_shim_chain_flags(c->chain_ctx, collType, nBytes, collNetSupport, nvlsSupport, numPipeOps,
                        algorithm, protocol, nChannels);
  ah_call_t call = {collType,     nBytes,        numPipeOps,     0,          NULL,
                    AH_NUM_ALGOS, AH_NUM_PROTOS, collNetSupport, nvlsSupport};
  ah_decision_t d;
  ah_shim_decide(c, &call, &d);
  if (d.algo >= 0 || d.proto >= 0) {
    int a = d.algo >= 0 ? d.algo : AH_ALGO_RING, p = d.proto >= 0 ? d.proto : AH_PROTO_SIMPLE;
    if (algorithm && protocol) {
      *algorithm = a;
      *protocol = p;
    }
  }
  if (d.nchannels > 0 && nChannels) *nChannels = d.nchannels;
  return ncclSuccess;
}

/* ---- init / finalize per ABI ------------------------------------------------------------------ */

/* One context per communicator per rank. The identity is NCCL's commId when given (v5+), else
 * the one the constructor wrapper queued on this thread, else a last-resort counter. An error here
 * would fail the communicator's creation, so init always succeeds (a NULL context passes through). */
static ncclResult_t init_common(void **context, uint64_t commId, size_t nRanks, size_t nNodes,
                                int abi, ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                                void *constants) {
  ah_shim_init();
  *context = NULL;
  if (!ah_shim.enabled) return ncclSuccess;
  /* NCCL's logger: autoha's lines also go through it (NCCL_DEBUG_SUBSYS=TUNING shows them). Its
   * level is NCCL's enum, an int in the ABI. */
  ah_log_set_nccl((ah_log_nccl_fn)(void (*)(void))log);
  uint64_t id = commId, pending_id = 0;
  int rank = -1;
  /* The constructor's identity and rank: queued on this thread (NCCL ran the init inline), or
   * shared by a grouped constructor whose init NCCL runs on one of its own threads. NCCL runs a
   * rank's init with the communicator's device current (its init job sets it), whichever device
   * the application's thread set last, and a group's inits in an order of its own: the entry is
   * the one bound to this device. */
  int dev = ah_shim_cuda_device();
  int have = ah_comm_pending_pop(dev, &pending_id, &rank) ||
             ah_comm_pending_claim(commId, (int)nRanks, dev, &pending_id, &rank);
  if (id == 0) id = have ? pending_id : ah_comm_fallback_id(nRanks, nNodes);
  if (rank >= 0) ah_log_file_rank(rank); /* a log file named by rank opens now */
  /* the HA thread's, NCCL's proxy threads' and a GPU-driving group's lines name the process's
   * ranks: NCCL runs this init before it connects a queue pair of the communicator */
  ah_log_set_proc_rank(rank, (int)nRanks);
  ah_log_set_dev_rank(dev, rank, (int)nRanks); /* and those about this device's queue pairs, its */
  ah_shim_first_comm(id, (int)nRanks, (int)nNodes, rank);
  ah_shim_report_start_interval();
  ah_comm_t *c = ah_comm_create(id, have ? pending_id : id, (int)nRanks, (int)nNodes, rank, abi);
  if (!c) {
    ah_log(AH_LOG_WARN, "out of memory creating tuner state: this communicator passes through");
  } else {
    /* the communicator's device's: the context of the hang probes, the GPU its records name */
    if (dev >= 0) (void)ah_cuda.CtxGetCurrent(&c->cuctx);
    if (ah_chain.abi)
      c->chain_ctx = ah_shim_chain_init(id, nRanks, nNodes, log, dom, constants, abi == 7 ? 7 : 5);
  }
  *context = c;
  return ncclSuccess;
}

static ncclResult_t finalize_common(void *context) {
  if (context) {
    ah_shim_chain_finalize(((ah_comm_t *)context)->chain_ctx);
    ah_shim_retire(context);
  }
  return ncclSuccess;
}

/* v1 has no context: NCCL 2.19/2.20 hand the plugin no communicator at all. The shim maps a v1
 * call to the communicator the calling thread initialised last (for blocking communicators NCCL
 * runs getCollInfo on the thread that issues the collective, which in one-rank-per-thread jobs is
 * the thread that created it), falling back to the communicator initialised last in the process. */
static void *v1_last_context;
static _Thread_local void *v1_thread_context;

static ncclResult_t v1_init(size_t nRanks, size_t nNodes, ah_nccl_logger_t log) {
  void *ctx = NULL;
  ncclResult_t r = init_common(&ctx, 0, nRanks, nNodes, 1, log, NULL, NULL);
  v1_thread_context = ctx;
  __atomic_store_n(&v1_last_context, ctx, __ATOMIC_RELEASE);
  return r;
}
static ncclResult_t v1_get(ah_nccl_func_t ct, size_t nb, int cn, int nv, int np, int *a, int *p,
                           int *nc) {
  void *ctx =
      v1_thread_context ? v1_thread_context : __atomic_load_n(&v1_last_context, __ATOMIC_ACQUIRE);
  return get_coll_info_flags(ctx, ct, nb, cn, nv, np, a, p, nc);
}
/* NCCL 2.19 calls destroy once per communicator, without saying which: the report keeps every
 * context anyway, so only the mapping is dropped. */
static ncclResult_t v1_destroy(void) {
  void *c =
      v1_thread_context ? v1_thread_context : __atomic_load_n(&v1_last_context, __ATOMIC_ACQUIRE);
  if (c == v1_thread_context) v1_thread_context = NULL;
  void *expected = c;
  __atomic_compare_exchange_n(&v1_last_context, &expected, NULL, 0, __ATOMIC_ACQ_REL,
                              __ATOMIC_ACQUIRE);
  return finalize_common(c);
}

static ncclResult_t v2_init(size_t nRanks, size_t nNodes, ah_nccl_logger_t log, void **ctx) {
  return init_common(ctx, 0, nRanks, nNodes, 2, log, NULL, NULL);
}
static ncclResult_t v3_init(size_t nRanks, size_t nNodes, ah_nccl_logger_t log, void **ctx) {
  return init_common(ctx, 0, nRanks, nNodes, 3, log, NULL, NULL);
}
static ncclResult_t v4_init(size_t nRanks, size_t nNodes, ah_nccl_logger_t log, void **ctx) {
  return init_common(ctx, 0, nRanks, nNodes, 4, log, NULL, NULL);
}
static ncclResult_t v5_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                            ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                            ah_tuner_constants_v5_t *constants) {
  return init_common(ctx, commId, nRanks, nNodes, 5, log, dom, constants);
}
static ncclResult_t v6_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                            ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                            ah_tuner_constants_v5_t *constants) {
  return init_common(ctx, commId, nRanks, nNodes, 6, log, dom, constants);
}
static ncclResult_t v7_init(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                            ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                            ah_tuner_constants_v7_t *constants) {
  return init_common(ctx, commId, nRanks, nNodes, 7, log, dom, constants);
}
static ncclResult_t v2_get(void *ctx, ah_nccl_func_t ct, size_t nb, int cn, int nv, int np, int *a,
                           int *p, int *nc) {
  return get_coll_info_flags(ctx, ct, nb, cn, nv, np, a, p, nc);
}
static ncclResult_t v3_get(void *ctx, ah_nccl_func_t ct, size_t nb, int np, float **t, int na,
                           int npr, int *nc) {
  return get_coll_info_table(ctx, ct, nb, np, t, na, npr, 0, nc);
}
static ncclResult_t v6_chunk(void *ctx, ah_nccl_func_t ct, size_t nb, int algo, int proto, int nch,
                             size_t *chunk) {
  ah_comm_t *c = ctx;
  if (c && ah_shim.enabled && chunk) {
    if (c->chain_ctx) ah_shim_chain_chunk(c->chain_ctx, ct, nb, algo, proto, nch, chunk);
    size_t v = ah_shim_decide_chunk(c, ct, nb);
    if (v > 0) *chunk = v; /* NCCL clamps it to the buffer and aligns it to the protocol grain */
  }
  return ncclSuccess;
}

AH_EXPORT const ah_tuner_v1_t ncclTunerPlugin_v1 = {"autoha", v1_init, v1_get, v1_destroy};
AH_EXPORT const ah_tuner_v2_t ncclTunerPlugin_v2 = {"autoha", v2_init, v2_get, finalize_common};
AH_EXPORT const ah_tuner_v3_t ncclTunerPlugin_v3 = {"autoha", v3_init, v3_get, finalize_common};
/* v4-v6 take getCollInfo's arguments exactly as get_coll_info_table does: it is their entry,
 * without a wrapper in between (the hot path; v2 and v3 adapt their arguments to it). */
AH_EXPORT const ah_tuner_v4_t ncclTunerPlugin_v4 = {"autoha", v4_init, get_coll_info_table,
                                                    finalize_common};
AH_EXPORT const ah_tuner_v5_t ncclTunerPlugin_v5 = {"autoha", v5_init, get_coll_info_table,
                                                    finalize_common};
AH_EXPORT const ah_tuner_v6_t ncclTunerPlugin_v6 = {"autoha", v6_init, get_coll_info_table,
                                                    finalize_common, v6_chunk};
/* v7 (2.32.6+): v6's functions; only init's constants table is wider (see init_common) */
AH_EXPORT const ah_tuner_v7_t ncclTunerPlugin_v7 = {"autoha", v7_init, get_coll_info_table,
                                                    finalize_common, v6_chunk};
