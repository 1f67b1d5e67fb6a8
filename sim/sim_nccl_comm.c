/* Communicators: unique ids, creation (one rank, all ranks of a process, split), teardown and the
 * queries on a communicator. A communicator's identity is a 64-bit hash of its unique id (for a
 * split child, of the parent's hash, the split count and the colour), the same on every rank; it
 * names the shared segment and is what NCCL calls commHash (the v5+ tuner's commId).
 *
 * Note that a destroyed communicator's struct is never freed, only marked dead: a later call with
 * the stale handle then gets ncclInvalidArgument instead of reading freed memory. */
#include <limits.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "sim_nccl.h"
#include "sim_nccl_net.h"

static uint64_t fnv1a(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) {
    h ^= b[i];
    h *= 0x100000001b3ull;
  }
  return h;
}
#define FNV_SEED 0xcbf29ce484222325ull

static const char *shm_prefix(void) {
  const char *p = getenv("NCCLSIM_SHM_PREFIX");
  if (!p || !*p || strchr(p, '/') || strlen(p) > 64) return "ncclsim-";
  return p;
}

SIM_NCCL_API(ncclResult_t, ncclGetVersion, int *version) {
  if (!version) return sim_error(ncclInvalidArgument, "ncclsim: ncclGetVersion: version is NULL");
  *version = sim_nccl_version();
  return ncclSuccess;
}

/* Lays out the id as NCCL does: 8 random magic bytes, then the bootstrap root's socket address.
 * From 2.23 NCCL zeroes the whole id first; before, bytes 40-127 keep what the caller's buffer
 * held, and the emulation keeps that difference because the autoha shim stamps that tail. */
SIM_NCCL_API(ncclResult_t, ncclGetUniqueId, ncclUniqueId *uniqueId) {
  if (!uniqueId)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclGetUniqueId: uniqueId is NULL");
  unsigned char head[40];
  memset(head, 0, sizeof head);
  if (getrandom(head, 8, 0) != 8)
    return sim_error(ncclSystemError, "ncclsim: getrandom failed while creating a unique id");
  struct sockaddr_in sa;
  memset(&sa, 0, sizeof sa);
  sa.sin_family = AF_INET;
  sa.sin_port = htons((uint16_t)(20000 + (head[0] | head[1] << 8) % 40000));
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  memcpy(head + 8, &sa, sizeof sa);
  if (sim_nccl_version() >= 22300) memset(uniqueId->internal, 0, sizeof uniqueId->internal);
  memcpy(uniqueId->internal, head, sizeof head);
  return ncclSuccess;
}

/* Fills a config with NCCL's defaults for every field the caller left undefined. */
static ncclResult_t config_fill(const ncclConfig_t *in, ncclConfig_t *out) {
  ncclConfig_t def = NCCL_CONFIG_INITIALIZER;
  *out = def;
  if (in) {
    if (in->magic != 0xcafebeef)
      return sim_error(ncclInvalidArgument,
                       "ncclsim: ncclConfig_t has a bad magic (0x%x): "
                       "initialise it with NCCL_CONFIG_INITIALIZER",
                       in->magic);
    size_t n = in->size < sizeof *out ? in->size : sizeof *out;
    memcpy(out, in, n);
    out->size = sizeof *out;
  }
  if (out->blocking == NCCL_CONFIG_UNDEF_INT) out->blocking = 1;
  if (out->cgaClusterSize == NCCL_CONFIG_UNDEF_INT) out->cgaClusterSize = 4;
  int maxch = sim_nccl_version() >= 22500 ? 64 : 32;
  if (out->minCTAs == NCCL_CONFIG_UNDEF_INT) out->minCTAs = 1;
  if (out->maxCTAs == NCCL_CONFIG_UNDEF_INT) out->maxCTAs = maxch;
  if (out->minCTAs > maxch) out->minCTAs = maxch;
  if (out->maxCTAs > maxch) out->maxCTAs = maxch;
  if (out->splitShare == NCCL_CONFIG_UNDEF_INT) out->splitShare = 0;
  return ncclSuccess;
}

/* Creates this rank's communicator object and queues its join. */
static ncclResult_t comm_create(ncclComm_t *newcomm, int nranks, int rank, uint64_t hash,
                                const ncclConfig_t *config, int device) {
  ncclConfig_t cfg;
  ncclResult_t res = config_fill(config, &cfg);
  if (res != ncclSuccess) return res;
  struct ncclComm *c = calloc(1, sizeof *c);
  sim_task_t *t = sim_task_new();
  char *name = malloc(160);
  uint64_t *sent = calloc((size_t)nranks, sizeof *sent),
           *recvd = calloc((size_t)nranks, sizeof *recvd);
  if (!c || !t || !name || !sent || !recvd) {
    free(c), free(t), free(name), free(sent), free(recvd);
    return sim_error(ncclSystemError, "ncclsim: out of memory creating a communicator");
  }
  c->magic = SIM_COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->device = device;
  c->node = sim_node_id();
  c->nnodes = 1;
  c->max_local_ranks = nranks;
  c->hash = hash;
  c->blocking = cfg.blocking;
  c->config = cfg;
  c->p2p_sent = sent;
  c->p2p_recvd = recvd;
  snprintf(name, 160, "/%s%016llx", shm_prefix(), (unsigned long long)hash);
  t->kind = SIM_TASK_INIT;
  t->comm = c;
  t->scratch = name;
  *newcomm = c;
  res = sim_group_submit(t);
  if (res != ncclSuccess && sim_group_depth() == 0) {
    c->magic = SIM_COMM_DEAD; /* the handle stays readable so misuse is reported, not a crash */
    *newcomm = NULL;
  }
  return res;
}

void sim_comm_joined(struct ncclComm *c) {
  int nodes[SIM_MAX_DEVICES * 4];
  int counts[SIM_MAX_DEVICES * 4];
  int nn = 0, maxlocal = 0;
  for (int r = 0; r < c->nranks; r++) {
    int node = sim_seg_rank(c->seg, r)->node, i;
    for (i = 0; i < nn && nodes[i] != node; i++) {}
    if (i == nn && nn < (int)(sizeof nodes / sizeof nodes[0])) {
      nodes[nn] = node;
      counts[nn++] = 0;
    }
    if (i < nn && ++counts[i] > maxlocal) maxlocal = counts[i];
  }
  c->nnodes = nn;
  c->max_local_ranks = maxlocal;
}

static ncclResult_t check_rank_args(ncclComm_t *newcomm, int nranks, int rank, const char *fn) {
  if (!newcomm) return sim_error(ncclInvalidArgument, "ncclsim: %s: comm is NULL", fn);
  if (nranks < 1)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid nranks %d", fn, nranks);
  if (rank < 0 || rank >= nranks)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: rank %d is out of range [0, %d)", fn, rank,
                     nranks);
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommInitRankConfig, ncclComm_t *newcomm, int nranks,
             ncclUniqueId commId, int myrank, ncclConfig_t *config) {
  ncclResult_t res = sim_nccl_since("ncclCommInitRankConfig", SIM_SINCE_CONFIG);
  if (res != ncclSuccess) return res;
  res = check_rank_args(newcomm, nranks, myrank, "ncclCommInitRankConfig");
  if (res != ncclSuccess) return res;
  uint64_t hash = fnv1a(commId.internal, sizeof commId.internal, FNV_SEED);
  return comm_create(newcomm, nranks, myrank, hash, config, sim_device_current());
}

SIM_NCCL_API(ncclResult_t, ncclCommInitRank, ncclComm_t *newcomm, int nranks, ncclUniqueId commId,
             int myrank) {
  ncclResult_t res = check_rank_args(newcomm, nranks, myrank, "ncclCommInitRank");
  if (res != ncclSuccess) return res;
  uint64_t hash = fnv1a(commId.internal, sizeof commId.internal, FNV_SEED);
  return comm_create(newcomm, nranks, myrank, hash, NULL, sim_device_current());
}

/* 2.23+: several root ids share the bootstrap load; every rank receives all of them, so the first
 * one identifies the communicator. */
SIM_NCCL_API(ncclResult_t, ncclCommInitRankScalable, ncclComm_t *newcomm, int nranks, int myrank,
             int nId, ncclUniqueId *commIds, ncclConfig_t *config) {
  ncclResult_t res = sim_nccl_since("ncclCommInitRankScalable", SIM_SINCE_SCALABLE);
  if (res != ncclSuccess) return res;
  res = check_rank_args(newcomm, nranks, myrank, "ncclCommInitRankScalable");
  if (res != ncclSuccess) return res;
  if (nId < 1 || !commIds)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommInitRankScalable: %d ids given", nId);
  uint64_t hash = fnv1a(commIds[0].internal, sizeof commIds[0].internal, FNV_SEED);
  return comm_create(newcomm, nranks, myrank, hash, config, sim_device_current());
}

/* As NCCL does, creates the id through the exported ncclGetUniqueId (so an interposer sees it)
 * and joins every device's rank inside one group driven by this thread. */
SIM_NCCL_API(ncclResult_t, ncclCommInitAll, ncclComm_t *comms, int ndev, const int *devlist) {
  if (!comms) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommInitAll: comms is NULL");
  if (ndev < 1)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommInitAll: invalid ndev %d", ndev);
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= sim_device_count())
      return sim_error(ncclInvalidArgument, "ncclsim: ncclCommInitAll: invalid device %d", d);
    for (int j = 0; j < i; j++)
      if (devlist && devlist[j] == d)
        return sim_error(ncclInvalidUsage, "ncclsim: ncclCommInitAll: duplicate device %d", d);
  }
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return res;
  uint64_t hash = fnv1a(id.internal, sizeof id.internal, FNV_SEED);
  ncclGroupStart();
  for (int i = 0; i < ndev && res == ncclSuccess; i++)
    res = comm_create(&comms[i], ndev, i, hash, NULL, devlist ? devlist[i] : i);
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

SIM_NCCL_API(ncclResult_t, ncclCommSplit, ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
             ncclConfig_t *config) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommSplit", SIM_SINCE_SPLIT);
  if (res != ncclSuccess) return res;
  if (!newcomm) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommSplit: newcomm is NULL");
  if (sim_group_depth() > 0)
    return sim_error(ncclInvalidUsage, "ncclsim: ncclCommSplit inside a group is not supported");
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommSplit: invalid color %d", color);
  int n = comm->nranks;
  int64_t mine[2] = {color, key};
  int64_t *all = calloc((size_t)n * 2, sizeof *all);
  sim_task_t *t = sim_task_new();
  if (!all || !t) {
    free(all), free(t);
    return sim_error(ncclSystemError, "ncclsim: out of memory in ncclCommSplit");
  }
  t->kind = SIM_TASK_COLL;
  t->comm = comm;
  t->coll = SIM_COLL_SPLIT_EXCHANGE;
  t->sendbuf = mine;
  t->recvbuf = all;
  t->count = 2;
  t->dtype = ncclInt64;
  t->desc.coll = SIM_COLL_SPLIT_EXCHANGE;
  t->desc.count = 2;
  t->desc.dtype = ncclInt64;
  t->desc.call = (uint64_t)comm->split_count | (1ull << 63);
  res = sim_group_submit(t);
  if (res != ncclSuccess) {
    free(all);
    return res;
  }
  comm->split_count++;
  *newcomm = NULL;
  if (color == NCCL_SPLIT_NOCOLOR) {
    free(all);
    return ncclSuccess;
  }
  /* New rank: position among same-colour ranks ordered by (key, parent rank). */
  int size = 0, newrank = 0;
  for (int r = 0; r < n; r++) {
    if (all[2 * r] != color) continue;
    size++;
    if (all[2 * r + 1] < key || (all[2 * r + 1] == key && r < comm->rank)) newrank++;
  }
  free(all);
  uint64_t parts[3] = {comm->hash, (uint64_t)comm->split_count, (uint64_t)(uint32_t)color};
  uint64_t hash = fnv1a(parts, sizeof parts, FNV_SEED);
  return comm_create(newcomm, size, newrank, hash, config ? config : &comm->config, comm->device);
}

static int int_cmp(const void *a, const void *b) {
  int x = *(const int *)a, y = *(const int *)b;
  return (x > y) - (x < y);
}

/* 2.27+: the ranks not excluded form a new communicator, in their parent order; excluded ranks
 * (typically dead) do not call. No exchange is needed: every caller derives the same identity
 * from (parent, index of the shrink on the parent, excluded set), so callers that disagree on the
 * set never meet, as they would hang in NCCL. Without an exchange, a shrink also works inside a
 * group, which is how one thread shrinks several ranks it drives. */
SIM_NCCL_API(ncclResult_t, ncclCommShrink, ncclComm_t comm, int *excludeRanksList,
             int excludeRanksCount, ncclComm_t *newcomm, ncclConfig_t *config, int shrinkFlags) {
  const char *fn = "ncclCommShrink";
  ncclResult_t res = sim_comm_entry(comm, fn, SIM_SINCE_SHRINK_WINDOW);
  if (res != ncclSuccess) return res;
  if (!newcomm) return sim_error(ncclInvalidArgument, "ncclsim: %s: newcomm is NULL", fn);
  if (!excludeRanksList || excludeRanksCount <= 0 || excludeRanksCount >= comm->nranks)
    return sim_error(ncclInvalidArgument, "ncclsim: %s: %d ranks to exclude (list %p) from %d", fn,
                     excludeRanksCount, (void *)excludeRanksList, comm->nranks);
  if (shrinkFlags & ~(NCCL_SHRINK_DEFAULT | NCCL_SHRINK_ABORT))
    return sim_error(ncclInvalidArgument, "ncclsim: %s: unknown shrinkFlags 0x%x", fn, shrinkFlags);
  int *excl = malloc((size_t)excludeRanksCount * sizeof *excl);
  if (!excl) return sim_error(ncclSystemError, "ncclsim: out of memory in %s", fn);
  memcpy(excl, excludeRanksList, (size_t)excludeRanksCount * sizeof *excl);
  qsort(excl, (size_t)excludeRanksCount, sizeof *excl, int_cmp);
  int newrank = comm->rank;
  for (int i = 0; i < excludeRanksCount; i++) {
    if (excl[i] < 0 || excl[i] >= comm->nranks || (i > 0 && excl[i] == excl[i - 1]) ||
        excl[i] == comm->rank) {
      int bad = excl[i];
      free(excl);
      return sim_error(ncclInvalidArgument, "ncclsim: %s: excluded rank %d is %s", fn, bad,
                       bad == comm->rank ? "the calling rank (excluded ranks must not call)"
                                         : "out of range or listed twice");
    }
    if (excl[i] < comm->rank) newrank--;
  }
  uint64_t h = fnv1a("shrink", 6, comm->hash);
  h = fnv1a(&comm->shrink_count, sizeof comm->shrink_count, h);
  h = fnv1a(excl, (size_t)excludeRanksCount * sizeof *excl, h);
  free(excl);
  comm->shrink_count++;
  *newcomm = NULL;
  /* Work is complete when a call returns, so NCCL_SHRINK_ABORT has nothing in flight to stop. */
  return comm_create(newcomm, comm->nranks - excludeRanksCount, newrank, h,
                     config ? config : &comm->config, comm->device);
}

/* 2.28.7+: stops the communicator's work (none is in flight in sim/) and refuses further
 * collectives; destroy, split and shrink stay possible, finalize does not. */
SIM_NCCL_API(ncclResult_t, ncclCommRevoke, ncclComm_t comm, int revokeFlags) {
  ncclResult_t res = sim_nccl_since("ncclCommRevoke", SIM_SINCE_REVOKE);
  if (res != ncclSuccess) return res;
  if (comm == NULL) return ncclSuccess;
  res = sim_comm_live(comm, "ncclCommRevoke");
  if (res != ncclSuccess) return res;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclCommRevoke: revokeFlags must be "
                     "NCCL_REVOKE_DEFAULT (0), not %d",
                     revokeFlags);
  if (comm->revoked)
    return sim_error(ncclInvalidArgument,
                     "ncclsim: ncclCommRevoke: communicator %016llx is "
                     "already revoked",
                     (unsigned long long)comm->hash);
  comm->revoked = 1;
  return ncclSuccess;
}

/* Dead communicators stay reachable from here: their handles must stay readable (see the top of
 * this file), and leak checkers must not report them. */
static pthread_mutex_t dead_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm **dead_comms;
static size_t ndead, cap_dead;

static void comm_bury(struct ncclComm *comm) {
  pthread_mutex_lock(&dead_lock);
  if (ndead == cap_dead) {
    size_t cap = cap_dead ? 2 * cap_dead : 16;
    struct ncclComm **grown = realloc(dead_comms, cap * sizeof *grown);
    if (grown) {
      dead_comms = grown;
      cap_dead = cap;
    }
  }
  if (ndead < cap_dead) dead_comms[ndead++] = comm;
  pthread_mutex_unlock(&dead_lock);
}

static ncclResult_t comm_end(ncclComm_t comm, int state, const char *fn) {
  if (!sim_comm_usable(comm))
    return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid or already destroyed communicator",
                     fn);
  comm_bury(comm);
  sim_comm_model_fini(comm); /* the tuner's finalize/destroy, as NCCL's commFree */
  sim_net_free(comm);        /* its queue pairs, before the segment their buffers live in */
  sim_seg_leave(comm, state);
  comm->magic = SIM_COMM_DEAD;
  sim_redop_free_all(comm);
  sim_reg_free_all(comm);
  free(comm->p2p_sent);
  free(comm->p2p_recvd);
  comm->p2p_sent = comm->p2p_recvd = NULL;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommDestroy, ncclComm_t comm) {
  return comm_end(comm, SIM_RANK_DESTROYED, "ncclCommDestroy");
}

SIM_NCCL_API(ncclResult_t, ncclCommAbort, ncclComm_t comm) {
  return comm_end(comm, SIM_RANK_ABORTED, "ncclCommAbort");
}

/* Work is complete when a call returns (sim/ executes at launch), so there is nothing to flush. */
SIM_NCCL_API(ncclResult_t, ncclCommFinalize, ncclComm_t comm) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommFinalize", SIM_SINCE_CONFIG);
  if (res != ncclSuccess) return res;
  if (comm->revoked)
    return sim_error(ncclInvalidUsage, "ncclsim: ncclCommFinalize after ncclCommRevoke is invalid");
  return comm->async_error;
}

SIM_NCCL_API(ncclResult_t, ncclCommGetAsyncError, ncclComm_t comm, ncclResult_t *asyncError) {
  if (!sim_comm_usable(comm) || !asyncError)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommGetAsyncError: invalid argument");
  *asyncError = comm->async_error;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count) {
  if (!sim_comm_usable(comm) || !count)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommCount: invalid argument");
  *count = comm->nranks;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommCuDevice, const ncclComm_t comm, int *device) {
  if (!sim_comm_usable(comm) || !device)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommCuDevice: invalid argument");
  *device = comm->device;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommUserRank, const ncclComm_t comm, int *rank) {
  if (!sim_comm_usable(comm) || !rank)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommUserRank: invalid argument");
  *rank = comm->rank;
  return ncclSuccess;
}

SIM_API ncclResult_t ncclsimCommSetInterference(ncclComm_t comm, double phi) {
  if (!sim_comm_usable(comm) || !(phi >= 0 && phi < 1))
    return sim_error(ncclInvalidArgument, "ncclsim: ncclsimCommSetInterference: invalid argument");
  comm->phi = phi;
  return ncclSuccess;
}
