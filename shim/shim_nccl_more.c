/* Wrappers of the collectives NCCL (2.28+) runs as grouped point-to-point operations without
 * consulting its tuner: ncclAlltoAll, ncclGather and ncclScatter. Nothing can be decided for them,
 * so the shim only observes: each call is counted in a key of its own collective (AH_COLL_*, size
 * bin of one peer's block) on the communicator's context and, issued outside a group, timed with
 * the same CUDA-event bracket as the tuned collectives, so the report shows what they cost.
 *
 * Note that a call is counted when issued, before NCCL runs it (the timing bracket must open
 * first), as the API-side observer counts; calls inside a group are counted but not timed, since
 * the group's time is attributed at ncclGroupEnd to the tuner's decisions only. */

#include "shim_control.h"
#include "shim_decide.h"
#include "shim_internal.h"
#include "shim_real.h"
#include "shim_timing.h"

/* Creates the observed key (coll, bin) of a context: no schedule, no search. */
static ah_shim_rankkey_t *observed_key(ah_comm_t *c, int coll, int bin) {
  ah_shim_rankkey_t *ck = __atomic_load_n(&c->keys[coll][bin], __ATOMIC_ACQUIRE);
  if (__builtin_expect(ck != NULL, 1)) return ck;
  pthread_mutex_lock(&c->lock);
  ck = c->keys[coll][bin];
  if (!ck && (ck = ah_shim_rankkey_new(coll, bin)) != NULL) {
    ck->nccl_cfg.algo = ck->nccl_cfg.proto = -1; /* NCCL's own, and no tuner ever sees it */
    ck->nccl_default.cfg = ck->nccl_cfg;
    __atomic_store_n(&c->keys[coll][bin], ck, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&c->lock);
  if (!ck)
    AH_LOG_CAPPED(3, AH_LOG_WARN, "out of memory creating a key: %s is not reported",
                  ah_coll_name(coll));
  return ck;
}

/* Counts one call of `coll` with `bytes_per_rank` bytes per peer block; notes it for timing when sampled. */
static void observe(ncclComm_t comm, int coll, size_t bytes_per_rank) {
  ah_comm_t *c = ah_shim_handle_ctx(comm);
  if (!c) return;
  ah_shim_rankkey_t *ck = observed_key(c, coll, ah_shim_bin_of(bytes_per_rank));
  if (!ck) return;
  uint64_t index = ck->next;
  __atomic_store_n(&ck->next, index + 1, __ATOMIC_RELAXED);
  ck->nccl_default.calls++;
  if (bytes_per_rank < ck->bytes_min) ck->bytes_min = bytes_per_rank;
  if (bytes_per_rank > ck->bytes_max) ck->bytes_max = bytes_per_rank;
  if (index < 16 || (index & 63) == 0)
    ah_timing_note(ck, index, AH_SOURCE_DEFAULT, 0, bytes_per_rank);
}

/* Counts, brackets for timing outside a group, forwards; errno as the real call left it. */
#define OBSERVED(call, stream, comm, coll, count, dt)                                              \
  do {                                                                                             \
    ah_shim_init();                                                                                \
    if (!ah_shim.enabled) return call;                                                             \
    int grouped_ = ah_shim_in_group();                                                             \
    if (!grouped_) ah_timing_begin(stream);                                                        \
    observe(comm, coll, (count) * (size_t)ah_shim_dtype_size(dt));                                 \
    ncclResult_t r_ = call;                                                                        \
    if (!grouped_) ah_timing_end(stream); /* keeps errno as the real call left it */               \
    return r_;                                                                                     \
  } while (0)

AH_EXPORT ncclResult_t ncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream) {
  OBSERVED(ah_real.AlltoAll(sendbuff, recvbuff, count, datatype, comm, stream), stream, comm,
           AH_COLL_ALLTOALL, count, datatype);
}

AH_EXPORT ncclResult_t ncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream) {
  OBSERVED(ah_real.Gather(sendbuff, recvbuff, count, datatype, root, comm, stream), stream, comm,
           AH_COLL_GATHER, count, datatype);
}

AH_EXPORT ncclResult_t ncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, int root, ncclComm_t comm,
                                   cudaStream_t stream) {
  OBSERVED(ah_real.Scatter(sendbuff, recvbuff, count, datatype, root, comm, stream), stream, comm,
           AH_COLL_SCATTER, count, datatype);
}
