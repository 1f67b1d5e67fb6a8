/* The NCCL API as the application sees it with the shim preloaded. Every wrapper forwards to the
 * real function and returns its result and error text unchanged; around that it announces each new
 * communicator's identity (for the tuner's init and for locality), and brackets collectives for
 * timing. With AUTOHA_ENABLE=0 every wrapper is a plain forward.
 *
 * Where NCCL does not run the shim as its tuner (NCCL 2.18 and older, NCCL_TUNER_PLUGIN=none), the
 * wrappers themselves count and time each collective in observe mode, so the report still shows
 * what ran: the communicator gets an API-side context (abi 0) at creation.
 *
 * Note that calls nest: libnccl's ncclBcast calls ncclBroadcast through its PLT, which lands in
 * this file again; a per-thread depth makes the inner call pass straight through, so a legacy
 * broadcast is counted and timed once. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_health.h"
#include "ah_log_file.h"
#include "shim_control.h"
#include "shim_coord.h"
#include "shim_decide.h"
#include "shim_real.h"
#include "shim_timing.h"
#include "rdma.h"
#include "ah_uthash.h"

/* ---- communicator handles → identity, for split lineage and the API-side observer ------------- */

typedef struct {
  ncclComm_t handle;
  uint64_t id;
  int splits, shrinks;
  int rank;       /* rank in the communicator, -1 while unknown */
  ah_comm_t *api; /* API-side context when NCCL does not use the shim as its tuner */
  ah_comm_t *ctx; /* the context found for the handle (ah_shim_handle_ctx), cached */
  UT_hash_handle hh;
} handle_t;

static pthread_mutex_t handles_lock = PTHREAD_MUTEX_INITIALIZER;
static handle_t *handles;
static _Atomic uint64_t handles_gen; /* bumped whenever a handle is bound or forgotten */

int ah_shim_dtype_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8:
    case ncclUint8: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 1; /* fp8 types and anything newer */
  }
}

/* Remembers a new handle's identity; `api` when the tuner face did not see its creation. */
static void handle_bind(ncclComm_t comm, uint64_t id, int api, int rank) {
  if (!comm) return;
  ah_comm_t *ctx = NULL;
  if (api) {
    int n = 0;
    if (ah_real.CommCount(comm, &n) != ncclSuccess) n = 0;
    if (rank < 0 && ah_real.CommUserRank(comm, &rank) != ncclSuccess) rank = -1;
    ah_shim_first_comm(id, n, 1, rank);
    ah_shim_report_start_interval();
    ctx = ah_comm_create(id, id, n, 1, rank, 0);
  }
  handle_t *h = NULL;
  pthread_mutex_lock(&handles_lock);
  HASH_FIND_PTR(handles, &comm, h);
  if (!h && (h = calloc(1, sizeof *h)) != NULL) {
    h->handle = comm;
    HASH_ADD_PTR(handles, handle, h);
    if (!AH_HASH_ADDED(h)) {
      free(h);
      h = NULL;
    }
  }
  atomic_fetch_add(&handles_gen, 1);
  if (!h) /* its splits then get no identity and pass through, and nothing is observed on it */
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "out of memory recording a communicator: its calls keep NCCL's choices");
  if (h) {
    h->id = id;
    h->splits = h->shrinks = 0;
    h->rank = rank;
    h->api = ctx;
    h->ctx = NULL;
    if (ctx) atomic_fetch_or(&ah_shim_slow_calls, AH_SLOW_API_OBSERVED); /* look handles up */
  }
  pthread_mutex_unlock(&handles_lock);
}

/* Returns the identity of a split child of `parent` and counts the split (every rank of the
 * parent splits in the same order, NOCOLOR included, so the count agrees across ranks). */
static uint64_t handle_split(ncclComm_t parent, int color) {
  uint64_t id = 0;
  pthread_mutex_lock(&handles_lock);
  handle_t *h = NULL;
  HASH_FIND_PTR(handles, &parent, h);
  if (h) id = ah_comm_id_for_split(h->id, ++h->splits, color);
  pthread_mutex_unlock(&handles_lock);
  return id;
}

/* Returns the identity of a shrink child of `parent` and counts the shrink (0: unknown parent).
 * `excl` is sorted in a copy: NCCL sorts the caller's list itself, the shim must not. */
static uint64_t handle_shrink(ncclComm_t parent, const int *excl, int nexcl) {
  if (!excl || nexcl <= 0 || nexcl > 1 << 20) return 0;
  int *sorted = malloc((size_t)nexcl * sizeof *sorted);
  if (!sorted) return 0;
  memcpy(sorted, excl, (size_t)nexcl * sizeof *sorted);
  for (int i = 1; i < nexcl; i++) /* insertion sort: exclusion lists are short */
    for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
      int t = sorted[j];
      sorted[j] = sorted[j - 1];
      sorted[j - 1] = t;
    }
  uint64_t id = 0;
  pthread_mutex_lock(&handles_lock);
  handle_t *h = NULL;
  HASH_FIND_PTR(handles, &parent, h);
  if (h) id = ah_comm_id_for_shrink(h->id, ++h->shrinks, sorted, nexcl);
  pthread_mutex_unlock(&handles_lock);
  free(sorted);
  return id;
}

/* The calling thread's last answer, valid while no handle was bound or forgotten since: a thread
 * issuing observed collectives on one communicator takes no lock after its first call. */
static _Thread_local struct {
  ncclComm_t handle;
  ah_comm_t *ctx;
  uint64_t gen;
} ctx_cache;

ah_comm_t *ah_shim_handle_ctx(ncclComm_t comm) {
  uint64_t gen = atomic_load_explicit(&handles_gen, memory_order_acquire);
  if (ctx_cache.ctx && ctx_cache.handle == comm && ctx_cache.gen == gen) return ctx_cache.ctx;
  ah_comm_t *c = NULL;
  pthread_mutex_lock(&handles_lock);
  handle_t *h = NULL;
  HASH_FIND_PTR(handles, &comm, h);
  if (h) {
    if (h->rank < 0 && ah_real.CommUserRank(comm, &h->rank) != ncclSuccess) h->rank = -1;
    if (!h->ctx) h->ctx = h->api ? h->api : ah_comm_find(h->id, h->rank);
    c = h->ctx;
  }
  pthread_mutex_unlock(&handles_lock);
  ctx_cache.handle = comm;
  ctx_cache.ctx = c;
  ctx_cache.gen = gen;
  return c;
}

int ah_shim_revoke_comm(uint64_t id) {
  ncclComm_t found[64];
  int n = 0;
  pthread_mutex_lock(&handles_lock);
  for (handle_t *h = handles; h && n < 64; h = h->hh.next)
    if (h->id == id || (h->ctx && h->ctx->id == id)) found[n++] = h->handle;
  pthread_mutex_unlock(&handles_lock);
  int done = 0;
  for (int i = 0; i < n; i++) { /* outside the lock: NCCL may call back into the shim */
    ncclResult_t r = ah_real.CommRevoke(found[i], 0);
    if (r == ncclSuccess) done++;
    else
      ah_log(AH_LOG_WARN,
             "communicator %016llx: ncclCommRevoke failed (error %d%s): it is left as "
             "it is",
             (unsigned long long)id, (int)r,
             ah_shim.nccl_version < 22807 ? "; it needs NCCL 2.28.7 or newer" : "");
  }
  return done;
}

/* AUTOHA_HEALTH_ACTION=abort: a hang on a communicator revokes this process's ranks of it, so
 * their waiting calls fail now instead of at the framework's watchdog. */
static void on_finding(uint64_t comm, const ah_finding_t *f) {
  int kind = f->kind;
  ah_shim_health_note(comm, kind, f->text); /* for the report */
  ah_shim_health_event(comm, f);
  ah_shim_error_finding(); /* a call failed by a peer may wait for this (shim_error_wait.c) */
  if (kind < AH_FINDING_MISSING || kind > AH_FINDING_MISMATCH ||
      ah_env_settings()->health_action != AH_HEALTH_ACTION_ABORT)
    return;
  int n = ah_shim_revoke_comm(comm);
  ah_log(AH_LOG_ERROR, "communicator %016llx: revoked %d local rank%s (AUTOHA_HEALTH_ACTION=abort)",
         (unsigned long long)comm, n, n == 1 ? "" : "s");
}

static ah_comm_t *handle_api_ctx(ncclComm_t comm) {
  ah_comm_t *c = NULL;
  pthread_mutex_lock(&handles_lock);
  handle_t *h = NULL;
  HASH_FIND_PTR(handles, &comm, h);
  if (h) c = h->api;
  pthread_mutex_unlock(&handles_lock);
  return c;
}

static void handle_forget(ncclComm_t comm) {
  ah_comm_t *api = NULL;
  pthread_mutex_lock(&handles_lock);
  handle_t *h = NULL;
  HASH_FIND_PTR(handles, &comm, h);
  atomic_fetch_add(&handles_gen, 1);
  if (h) {
    api = h->api;
    HASH_DEL(handles, h);
    free(h);
  }
  pthread_mutex_unlock(&handles_lock);
  if (api) { ah_shim_retire(api); }
}

/* Whether a handle created just now needs the API-side observer: NCCL has no tuner ABI, tuners
 * are off (NCCL_TUNER_PLUGIN=none), or NCCL did not run the shim's tuner init for this
 * communicator. `sync_init`: the constructor ran outside a group, where NCCL runs the tuner's init
 * on the calling thread, so its absence here means NCCL did not load autoha; grouped inits run on
 * NCCL's own threads and are trusted to reach the tuner face when NCCL_TUNER_PLUGIN names it. */
static int needs_api_observer(int sync_init) {
  if (!ah_shim.tuner_capable) {
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "NCCL %d has no tuner plugin ABI (2.19+): autoha observes and "
                  "reports only",
                  ah_shim.nccl_version);
    return 1;
  }
  if (ah_shim.tuner_expected && (!sync_init || ah_comm_last_created())) return 0;
  AH_LOG_CAPPED(1, AH_LOG_WARN,
                "NCCL did not load autoha as its tuner (NCCL_TUNER_PLUGIN=%s): "
                "autoha observes and reports only",
                getenv("NCCL_TUNER_PLUGIN") ? getenv("NCCL_TUNER_PLUGIN") : "");
  return 1;
}

/* nccl.h declares these without a prototype. */
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* ---- groups ----------------------------------------------------------------------------------- */

/* The group and wrapped-collective state is in ah_thread (shim_thread.h): group_depth,
 * group_stream (the first stream a collective of the group used), group_has_stream, coll_depth. */
static _Thread_local int initall_ndev;        /* inside ncclCommInitAll: its rank count */
static _Thread_local const int *initall_devs; /* its device list (NULL: 0 .. ndev-1) */
static _Thread_local uint64_t initall_id;     /* and the identity of the id NCCL made for it */

int ah_shim_in_group(void) { return ah_thread.group_depth > 0; }

AH_EXPORT ncclResult_t ncclGroupStart(void) {
  ah_shim_init();
  ncclResult_t r = ah_real.GroupStart();
  if (r == ncclSuccess && ah_shim.enabled) ah_thread.group_depth++;
  return r;
}

/* group_depth counts only groups opened while the shim is enabled (so initialised): a depth above 0
 * needs neither check again. */
AH_EXPORT ncclResult_t ncclGroupEnd(void) {
  ah_thread_t *t = &ah_thread;
  if (__builtin_expect(t->group_depth == 0, 0)) {
    ah_shim_init();
    return ah_real.GroupEnd();
  }
  if (--t->group_depth > 0) return ah_real.GroupEnd();
  int timed = t->group_has_stream;
  cudaStream_t s = t->group_stream;
  t->group_has_stream = 0;
  if (timed) ah_timing_begin(s);
  ncclResult_t r = ah_real.GroupEnd();
  /* Both keep errno as the real call left it (a guest's duty), each only when it has work. */
  if (timed) ah_timing_end(s);
  if (__builtin_expect(r != ncclSuccess, 0)) ah_shim_error_wait(NULL, r);
  if (t->comm_pending) /* grouped inits have run their tuner init by now (or elsewhere) */
    ah_comm_pending_group_end();
  return r;
}

/* 2.22+: NCCL plans the group (and asks the tuner) without running it. The shim answers those
 * questions as it would for the next real calls but counts nothing: a simulation on some ranks
 * only must not move their call indices ahead of the others'. */
AH_EXPORT ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t *simInfo) {
  ah_shim_init();
  if (!ah_shim.enabled) return ah_real.GroupSimulateEnd(simInfo);
  ah_thread_t *t = &ah_thread;
  if (t->group_depth > 0) t->group_depth--;
  if (t->group_depth == 0)
    t->group_has_stream = 0; /* a nested one leaves the outer group's stream noted */
  ah_shim_simulating(1);
  ncclResult_t r = ah_real.GroupSimulateEnd(simInfo);
  int saved = errno;
  ah_shim_simulating(0);
  errno = saved;
  if (t->group_depth == 0 && t->comm_pending) ah_comm_pending_group_end(); /* as ncclGroupEnd */
  return r;
}

/* The API-side observer: counts the call as NCCL would bucket a lone collective. */
static void api_observe(ncclComm_t comm, int coll, size_t count, ncclDataType_t dt) {
  ah_comm_t *c = handle_api_ctx(comm);
  if (!c) return;
  size_t nbytes = count * (size_t)ah_shim_dtype_size(dt);
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && c->nranks > 0)
    nbytes *= (size_t)c->nranks;
  ah_call_t call = {coll, nbytes, 1, 0, NULL, AH_NUM_ALGOS, AH_NUM_PROTOS, 0, 0};
  ah_decision_t d;
  ah_shim_decide(c, &call, &d);
}

/* AH_SLOW_NOTE_STREAMS: a grouped call's stream is its communicator's own. The group is bracketed
 * on its first stream (ah_thread.group_stream), and the hang probes look at the stream of a rank's
 * latest call: with one thread driving several GPUs, that first stream is another device's for
 * every other communicator of the group, so they are noted here, a few calls each time the health
 * thread asks (once a tick), rather than on every grouped call, whose wrapper then stays a jump to
 * NCCL. Never changes errno. */
static __attribute__((noinline, cold)) void stream_note(ncclComm_t comm, cudaStream_t stream) {
  ah_comm_t *c = ah_shim_handle_ctx(comm);
  if (c) {
    __atomic_store_n(&c->own_stream, (CUstream)stream, __ATOMIC_RELAXED);
    __atomic_store_n(&c->own_group, (CUstream)ah_thread.group_stream, __ATOMIC_RELAXED);
  }
  if (atomic_fetch_sub(&ah_shim_stream_notes, 1) <= 1)
    atomic_fetch_and(&ah_shim_slow_calls, ~AH_SLOW_NOTE_STREAMS);
}

/* Brackets one collective: timed alone outside a group; inside one, the group is timed at its end. */
#define COLLECTIVE(call, stream, comm, coll, count, dt)                                            \
  do {                                                                                             \
    ah_shim_init();                                                                                \
    ah_thread_t *t_ = &ah_thread;                                                                  \
    if (!ah_shim.enabled || t_->coll_depth > 0) return call;                                       \
    t_->coll_depth++;                                                                              \
    ncclResult_t r_;                                                                               \
    if (t_->group_depth > 0) {                                                                     \
      if (!t_->group_has_stream) {                                                                 \
        t_->group_stream = (stream);                                                               \
        t_->group_has_stream = 1;                                                                  \
      }                                                                                            \
      r_ = call;                                                                                   \
      int slow_ = atomic_load_explicit(&ah_shim_slow_calls, memory_order_relaxed);                 \
      if (__builtin_expect(slow_ != 0, 0) && r_ == ncclSuccess) {                                  \
        int errno_ = errno; /* as the real call left it */                                         \
        if (slow_ & AH_SLOW_NOTE_STREAMS) stream_note(comm, stream);                               \
        if (slow_ & AH_SLOW_API_OBSERVED) api_observe(comm, coll, count, dt);                      \
        errno = errno_;                                                                            \
      }                                                                                            \
    } else {                                                                                       \
      ah_timing_begin(stream);                                                                     \
      if (__builtin_expect(atomic_load_explicit(&ah_shim_slow_calls, memory_order_relaxed) &       \
                               AH_SLOW_API_OBSERVED,                                               \
                           0))                                                                     \
        api_observe(comm, coll, count, dt);                                                        \
      r_ = call;                                                                                   \
      ah_timing_end(stream); /* keeps errno as the real call left it */                            \
      if (__builtin_expect(r_ != ncclSuccess, 0)) ah_shim_error_wait(comm, r_);                    \
    }                                                                                              \
    t_->coll_depth--;                                                                              \
    return r_;                                                                                     \
  } while (0)

/* A collective inside a group (so the shim is initialised and enabled: see ncclGroupEnd) with no API
 * observer and no stream to note: the group is timed at its end, so the call only notes the group's
 * stream. Returns 0 for every other call (COLLECTIVE's). One inside another wrapped collective of the
 * group needs no test of its own: COLLECTIVE would only pass it on, and the outer call noted the
 * stream. */
static inline int grouped_short(cudaStream_t stream) {
  ah_thread_t *t = &ah_thread;
  if (!(t->group_depth > 0 && !atomic_load_explicit(&ah_shim_slow_calls, memory_order_relaxed)))
    return 0;
  if (!t->group_has_stream) {
    t->group_stream = stream;
    t->group_has_stream = 1;
  }
  return 1;
}

/* "+m" operands naming each of a wrapper's arguments (up to 8), for COLLECTIVE_LONE's asm. */
#define AH_MEM_PICK(_1, _2, _3, _4, _5, _6, _7, _8, name, ...) name
#define AH_MEM1(a) "+m"(a)
#define AH_MEM2(a, ...) "+m"(a), AH_MEM1(__VA_ARGS__)
#define AH_MEM3(a, ...) "+m"(a), AH_MEM2(__VA_ARGS__)
#define AH_MEM4(a, ...) "+m"(a), AH_MEM3(__VA_ARGS__)
#define AH_MEM5(a, ...) "+m"(a), AH_MEM4(__VA_ARGS__)
#define AH_MEM6(a, ...) "+m"(a), AH_MEM5(__VA_ARGS__)
#define AH_MEM7(a, ...) "+m"(a), AH_MEM6(__VA_ARGS__)
#define AH_MEM8(a, ...) "+m"(a), AH_MEM7(__VA_ARGS__)
#define AH_MEM_OPERANDS(...)                                                                       \
  AH_MEM_PICK(__VA_ARGS__, AH_MEM8, AH_MEM7, AH_MEM6, AH_MEM5, AH_MEM4, AH_MEM3, AH_MEM2, AH_MEM1) \
  (__VA_ARGS__)

/* COLLECTIVE for a call outside any group, on an initialised and enabled shim (ah_shim_wrap_on),
 * not inside another wrapped collective: what COLLECTIVE's ungrouped branch does, without its
 * tests of init, enablement and group depth (the caller made them). The empty asm keeps the
 * arguments in their stack slots across the capture check: GCC would otherwise keep all of them in
 * callee-saved registers (each saved, moved and restored at every call) and move them back for the
 * real call, the re-marshalling that made a lone call cost more than the hot-path bar. */
#define COLLECTIVE_LONE(call, args, stream, comm, coll, count, dt)                                 \
  do {                                                                                             \
    ah_thread_t *t_ = &ah_thread;                                                                  \
    t_->coll_depth++;                                                                              \
    __asm__ volatile("" : AH_MEM_OPERANDS args);                                                   \
    ah_timing_begin(stream);                                                                       \
    if (__builtin_expect(atomic_load_explicit(&ah_shim_slow_calls, memory_order_relaxed) &         \
                             AH_SLOW_API_OBSERVED,                                                 \
                         0))                                                                       \
      api_observe(comm, coll, count, dt);                                                          \
    ncclResult_t r_ = call;                                                                        \
    ah_timing_end(stream); /* keeps errno as the real call left it */                              \
    if (__builtin_expect(r_ != ncclSuccess, 0)) ah_shim_error_wait(comm, r_);                      \
    ah_thread.coll_depth--;                                                                        \
    return r_;                                                                                     \
  } while (0)

/* A collective's wrapper in three parts: NAME, whose grouped call jumps straight to NCCL (its paths
 * are all tail calls, so it saves no register and builds no frame); NAME_lone, out of line, for a
 * call outside any group on an enabled shim (a thread per GPU's every call); and NAME_bracketed,
 * COLLECTIVE whole, for every other call (not initialised yet, disabled, nested, a grouped call
 * with something to observe). A collective NCCL runs inside another (ncclBcast's ncclBroadcast)
 * takes the short path again inside a group, and NAME_bracketed outside one, which passes it on. */
#define COLLECTIVE_WRAPPER(name, real, params, args, stream, comm, coll, count, dt)                \
  static __attribute__((noinline)) ncclResult_t name##_bracketed params {                          \
    COLLECTIVE(ah_real.real args, stream, comm, coll, count, dt);                                  \
  }                                                                                                \
  static __attribute__((noinline)) ncclResult_t name##_lone params {                               \
    if (__builtin_expect(!atomic_load_explicit(&ah_shim_wrap_on, memory_order_acquire) ||          \
                             ah_thread.coll_depth > 0,                                             \
                         0))                                                                       \
      return name##_bracketed args;                                                                \
    COLLECTIVE_LONE(ah_real.real args, args, stream, comm, coll, count, dt);                       \
  }                                                                                                \
  AH_EXPORT ncclResult_t name params {                                                             \
    if (grouped_short(stream)) return ah_real.real args;                                           \
    if (ah_thread.group_depth <= 0) return name##_lone args;                                       \
    return name##_bracketed args;                                                                  \
  }

COLLECTIVE_WRAPPER(ncclAllReduce, AllReduce,
                   (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                   (sendbuff, recvbuff, count, datatype, op, comm, stream), stream, comm,
                   AH_FUNC_ALLREDUCE, count, datatype)

COLLECTIVE_WRAPPER(ncclBroadcast, Broadcast,
                   (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                    int root, ncclComm_t comm, cudaStream_t stream),
                   (sendbuff, recvbuff, count, datatype, root, comm, stream), stream, comm,
                   AH_FUNC_BROADCAST, count, datatype)

COLLECTIVE_WRAPPER(ncclBcast, Bcast,
                   (void *buff, size_t count, ncclDataType_t datatype, int root, ncclComm_t comm,
                    cudaStream_t stream),
                   (buff, count, datatype, root, comm, stream), stream, comm, AH_FUNC_BROADCAST,
                   count, datatype)

COLLECTIVE_WRAPPER(ncclReduce, Reduce,
                   (const void *sendbuff, void *recvbuff, size_t count, ncclDataType_t datatype,
                    ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream),
                   (sendbuff, recvbuff, count, datatype, op, root, comm, stream), stream, comm,
                   AH_FUNC_REDUCE, count, datatype)

COLLECTIVE_WRAPPER(ncclAllGather, AllGather,
                   (const void *sendbuff, void *recvbuff, size_t sendcount, ncclDataType_t datatype,
                    ncclComm_t comm, cudaStream_t stream),
                   (sendbuff, recvbuff, sendcount, datatype, comm, stream), stream, comm,
                   AH_FUNC_ALLGATHER, sendcount, datatype)

COLLECTIVE_WRAPPER(ncclReduceScatter, ReduceScatter,
                   (const void *sendbuff, void *recvbuff, size_t recvcount, ncclDataType_t datatype,
                    ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream),
                   (sendbuff, recvbuff, recvcount, datatype, op, comm, stream), stream, comm,
                   AH_FUNC_REDUCESCATTER, recvcount, datatype)

/* ---- communicator lifetime ------------------------------------------------------------------- */

AH_EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId) {
  ah_shim_init();
  ncclResult_t r = ah_real.GetUniqueId(uniqueId);
  /* Inside ncclCommInitAll, NCCL makes the id itself: every rank of it lives in this process. */
  if (r == ncclSuccess && ah_shim.enabled && initall_ndev > 0 && uniqueId) {
    uint64_t id = ah_comm_id_from_unique_id(uniqueId);
    initall_id = id;
    for (int i = 0; i < initall_ndev; i++) {
      ah_commrec_announce(id, initall_ndev);
      int dev = initall_devs ? initall_devs[i] : i; /* rank i's device, as NCCL binds it */
      ah_comm_pending_push(id, i, dev);
      ah_comm_pending_share(id, ah_comm_alt_id_from_unique_id(uniqueId), initall_ndev, i, dev);
    }
  }
  if (r == ncclSuccess && initall_ndev == 0) ah_shim_coord_stamp(uniqueId); /* shim_coord.c */
  return r;
}

/* Announces the rank, queues the identity for the tuner's init with the device NCCL binds the
 * communicator to (`dev`: the caller's current one for a new communicator, the parent's for a
 * split or shrink), runs the real constructor, binds the handle. */
#define CONSTRUCT(call, newcomm_p, id, alt, nranks_arg, rank_arg, dev)                              \
  do {                                                                                              \
    ah_shim_init();                                                                                 \
    if (!ah_shim.enabled) return call;                                                              \
    uint64_t id_ = (id);                                                                            \
    if (id_ != 0) {                                                                                 \
      int dev_ = (dev);                                                                             \
      ah_commrec_announce(id_, (nranks_arg));                                                       \
      ah_comm_pending_push(id_, (rank_arg), dev_);                                                  \
      if (ah_thread.group_depth > 0)                                                                \
        ah_comm_pending_share(id_, (alt), (nranks_arg), (rank_arg), dev_);                          \
    }                                                                                               \
    ah_comm_last_reset();                                                                           \
    ncclResult_t r_ = call;                                                                         \
    int errno_ = errno;                                                                             \
    int grouped_ = ah_thread.group_depth > 0;                                                       \
    if (!grouped_) ah_comm_pending_clear();                                                         \
    if (r_ == ncclSuccess && (newcomm_p) && *(newcomm_p)) {                                         \
      ah_comm_t *ctx_ = ah_comm_last_created();                                                     \
      int rank_ = (rank_arg);                                                                       \
      if (ctx_ && ctx_->rank < 0 && ah_real.CommUserRank(*(newcomm_p), &rank_) == ncclSuccess)      \
        ctx_->rank = rank_;                                                                         \
      if (!grouped_) ah_log_set_rank_of(rank_, (nranks_arg)); /* this thread's lines say [N] */     \
      if (!grouped_) /* and those about this device's queue pairs (the rank's device is current) */ \
        ah_log_set_dev_rank(ah_shim_cuda_device(), rank_, ctx_ ? ctx_->nranks : (nranks_arg));      \
      ah_log_set_proc_rank(rank_,                                                                   \
                           ctx_ ? ctx_->nranks : (nranks_arg)); /* others': the process's */        \
      if (rank_ >= 0) ah_log_file_rank(rank_); /* a log file named by rank opens now */             \
      handle_bind(*(newcomm_p), id_, !grouped_ && needs_api_observer(1), rank_);                    \
    } else if (r_ == ncclInProgress && (newcomm_p) && *(newcomm_p)) {                               \
      handle_bind(*(newcomm_p), id_, 0, (rank_arg));                                                \
    }                                                                                               \
    errno = errno_;                                                                                 \
    return r_;                                                                                      \
  } while (0)

AH_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
                                        int myrank) {
  ah_shim_coord_seen(&commId);
  ah_shim_coord_on_finding(on_finding);
  CONSTRUCT(ah_real.CommInitRank(newcomm, nranks, commId, myrank), newcomm,
            ah_comm_id_from_unique_id(&commId), ah_comm_alt_id_from_unique_id(&commId), nranks,
            myrank, ah_shim_cuda_device());
}

AH_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
                                              int myrank, ncclConfig_t *config) {
  ah_shim_coord_seen(&commId);
  ah_shim_coord_on_finding(on_finding);
  ncclConfig_t tc_copy; /* AUTOHA_QP_TC(_COMM) as the per-communicator traffic class (NCCL 2.26+) */
  config = ah_shim_qp_config_tc(config, nranks, &tc_copy);
  CONSTRUCT(ah_real.CommInitRankConfig(newcomm, nranks, commId, myrank, config), newcomm,
            ah_comm_id_from_unique_id(&commId), ah_comm_alt_id_from_unique_id(&commId), nranks,
            myrank, ah_shim_cuda_device());
}

AH_EXPORT ncclResult_t ncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                int nId, ncclUniqueId *commIds,
                                                ncclConfig_t *config) {
  if (nId > 0 && commIds) ah_shim_coord_seen(&commIds[0]);
  ah_shim_coord_on_finding(on_finding);
  CONSTRUCT(ah_real.CommInitRankScalable(newcomm, nranks, myrank, nId, commIds, config), newcomm,
            nId > 0 && commIds ? ah_comm_id_from_unique_id(&commIds[0]) : 0,
            nId > 0 && commIds ? ah_comm_alt_id_from_unique_id(&commIds[0]) : 0, nranks, myrank,
            ah_shim_cuda_device());
}

/* NCCL creates the id of ncclCommInitAll itself, through ncclGetUniqueId (which lands in the
 * wrapper above, where the ranks are announced), then initialises every rank in one group. */
AH_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist) {
  ah_shim_init();
  if (!ah_shim.enabled) return ah_real.CommInitAll(comms, ndev, devlist);
  initall_ndev = ndev;
  initall_devs = devlist;
  initall_id = 0;
  ah_comm_last_reset();
  ncclResult_t r = ah_real.CommInitAll(comms, ndev, devlist);
  int saved = errno; /* a guest leaves errno as the real call left it */
  initall_ndev = 0;
  initall_devs = NULL;
  if (ah_thread.group_depth == 0) ah_comm_pending_group_end();
  if (r == ncclSuccess && comms) {
    int api = needs_api_observer(0); /* NCCL initialises InitAll's ranks in a group */
    for (int i = 0; i < ndev; i++) handle_bind(comms[i], initall_id, api, i);
  }
  errno = saved;
  return r;
}

/* The device of a parent communicator, which NCCL binds its split and shrink children to; -1
 * when NCCL cannot say. */
static int parent_device(ncclComm_t parent) {
  int dev = -1;
  return ah_real.CommCuDevice(parent, &dev) == ncclSuccess ? dev : -1;
}

AH_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     ncclConfig_t *config) {
  ah_shim_init();
  if (!ah_shim.enabled) return ah_real.CommSplit(comm, color, key, newcomm, config);
  uint64_t id = handle_split(comm, color);
  if (color == NCCL_SPLIT_NOCOLOR || id == 0)
    return ah_real.CommSplit(comm, color, key, newcomm, config);
  CONSTRUCT(ah_real.CommSplit(comm, color, key, newcomm, config), newcomm, id, 0, 0, -1,
            parent_device(comm));
}

/* 2.27+: the remaining ranks form a child; it gets an identity and keys as a split child does
 * (ah_comm_id_for_shrink), so its decisions are keyed the same on every remaining rank. */
AH_EXPORT ncclResult_t ncclCommShrink(ncclComm_t comm, int *excludeRanksList, int excludeRanksCount,
                                      ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  ah_shim_init();
  if (!ah_shim.enabled)
    return ah_real.CommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config,
                              shrinkFlags);
  uint64_t id = handle_shrink(comm, excludeRanksList, excludeRanksCount);
  if (id == 0)
    return ah_real.CommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config,
                              shrinkFlags);
  CONSTRUCT(
      ah_real.CommShrink(comm, excludeRanksList, excludeRanksCount, newcomm, config, shrinkFlags),
      newcomm, id, 0, 0, -1, parent_device(comm));
}

AH_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  ah_shim_init();
  if (ah_shim.enabled) {
    ah_timing_harvest();
    handle_forget(comm);
  }
  return ah_real.CommDestroy(comm);
}

/* A communicator aborted on a peer's error (PyTorch's watchdog does, then aborts the process)
 * waits for the hub's finding first, as a failed call does (shim_error_wait.c). */
AH_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm) {
  ah_shim_init();
  if (ah_shim.enabled) {
    ncclResult_t e = ncclSuccess;
    if (comm && ah_real.CommGetAsyncError(comm, &e) == ncclSuccess && e != ncclSuccess)
      ah_shim_error_wait(comm, e);
    handle_forget(comm);
  }
  return ah_real.CommAbort(comm);
}

AH_EXPORT ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  ah_shim_init();
  if (ah_shim.enabled) ah_timing_harvest();
  return ah_real.CommFinalize(comm);
}
