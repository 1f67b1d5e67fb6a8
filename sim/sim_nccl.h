/* Internal state of sim/'s NCCL stand-in: communicators, the shared segment their ranks meet in,
 * and the tasks a group launches.
 *
 * Every communicator has one POSIX shared-memory segment that all of its ranks map, whether they
 * are processes or threads. Ranks move data through per-rank staging slots and synchronise with
 * per-rank phase counters: a rank posts a phase by incrementing its counter, and waits until every
 * rank's counter has reached the same value. No lock is ever held across processes, so a rank that
 * dies cannot leave its peers blocked on a lock; they notice the death (its pid is gone, or it
 * marked itself aborted) and fail their call. */
#ifndef SIM_NCCL_H
#define SIM_NCCL_H

#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <nccl.h>

#include "sim_internal.h"
#include "sim_fabric.h"
#include "sim_model.h"
#include "sim_nccl_230.h"
#include "sim_tuner.h"
#include "ncclsim.h"

/* nccl.h declares these without a prototype; give them one. */
ncclResult_t pncclGroupStart(void);
ncclResult_t pncclGroupEnd(void);
void pncclResetDebugInit(void);
void ncclResetDebugInit(void);

/* Collective types, numbered as NCCL's ncclFunc_t (the tuner ABI sees these numbers). */
enum {
  SIM_COLL_BROADCAST = 0,
  SIM_COLL_REDUCE = 1,
  SIM_COLL_ALLGATHER = 2,
  SIM_COLL_REDUCESCATTER = 3,
  SIM_COLL_ALLREDUCE = 4,
  SIM_COLL_SPLIT_EXCHANGE = 100
};

const char *sim_coll_name(int coll);

/* What one rank says about the collective it is running; every rank's copy must agree. */
typedef struct {
  int32_t coll, dtype, op, root;
  uint64_t count;  /* elements: per rank for AllGather/ReduceScatter (NCCL's API count) */
  uint64_t call;   /* per-communicator collective index, counted by each rank */
  double start_vt; /* the caller's stream virtual time when the collective began */
  int32_t algo, proto, nchannels; /* configuration chosen at group launch (-1: none) */
  int32_t nthreads;               /* per-process (NCCL_NTHREADS): timed, not compared */
  uint64_t chunk;
  uint64_t scalar; /* PreMulSum: this rank's scalar, bits of one element (not compared) */
} sim_desc_t;

/* The operator every rank's description carries for a ncclRedOpCreatePreMulSum operator: handles
 * differ between ranks (NCCL mangles them per communicator), the operation does not. */
#define SIM_OP_PREMULSUM ((ncclRedOp_t)ncclNumOps)

enum { SIM_RANK_EMPTY = 0, SIM_RANK_JOINED = 1, SIM_RANK_DESTROYED = 2, SIM_RANK_ABORTED = 3 };

typedef struct {
  _Atomic uint64_t seq;  /* phases posted by this rank (collectives only) */
  _Atomic int32_t state; /* SIM_RANK_* */
  int32_t pid;
  int32_t node, device;
  sim_desc_t desc;
  char pad[64];
} sim_rank_slot_t;

/* Control block of one ordered (sender, receiver) pair: a single-slot mailbox. The sender may fill
 * the slot when consumed == posted; the receiver may drain it when posted > consumed. */
typedef struct {
  _Atomic uint64_t posted, consumed;
  uint64_t msg_bytes;   /* total size of the message the current chunk belongs to */
  uint64_t chunk_bytes; /* bytes in the slot */
  double start_vt;      /* sender's stream time when the message began */
  char pad[24];
} sim_p2p_ctl_t;

#define SIM_SEG_MAGIC 0x4e53494du

typedef struct {
  uint32_t magic;
  _Atomic uint32_t ready; /* set by the creator once the header is initialised */
  int32_t nranks;
  _Atomic int32_t joined;
  _Atomic uint32_t bell; /* futex word: bumped (and woken) when a wait may have completed */
  uint32_t pad0;
  uint64_t slot_bytes; /* collective staging per rank */
  uint64_t p2p_bytes;  /* point-to-point staging per ordered pair */
  uint64_t off_ranks, off_slots, off_p2p_ctl, off_p2p_buf, off_flows, total_bytes;
} sim_seg_t;

/* The fabric flows one rank's queue pairs put on the wire (its sending sides), published once
 * connected, so that every rank models the same network time for a call (sim_nccl_fabric.c). */
#define SIM_NET_MAX_FLOWS 512
typedef struct {
  _Atomic int32_t count; /* flows published (the rank connected before its first call) */
  int32_t pad;
  sim_fabric_flow_t flows[SIM_NET_MAX_FLOWS];
} sim_flow_row_t;

#define SIM_COMM_MAGIC 0x434f4d4du
#define SIM_COMM_DEAD 0xdeadc0deu

struct ncclComm {
  uint32_t magic; /* SIM_COMM_MAGIC while usable, SIM_COMM_DEAD after destroy */
  int rank, nranks, device, node;
  int nnodes, max_local_ranks;
  uint64_t hash; /* NCCL's commHash: the v5+ tuner's commId */
  int split_count;
  int blocking;
  sim_seg_t *seg;
  size_t seg_bytes;
  char shm_name[128];
  uint64_t seq;                   /* my phase counter (mirror of my slot's seq) */
  uint64_t coll_calls;            /* collectives issued so far */
  uint64_t *p2p_sent, *p2p_recvd; /* messages sent to / received from each peer */
  ncclResult_t async_error;
  double phi;          /* interference set through ncclsimCommSetInterference */
  ncclConfig_t config; /* the config the communicator was created with (defaults filled) */
  /* timing model and tuner (sim_nccl_select.c), set up once every rank has joined */
  int has_model;
  sim_model_t model;
  const sim_tuner_t *tuner; /* NULL: no tuner plugin */
  void *tuner_ctx;
  /* NCCL 2.11+ user operators, registrations and windows (sim_nccl_redop.c, sim_nccl_mem.c) */
  struct sim_redop *redops;
  int nredops;
  struct sim_reg *regs;
  struct ncclWindow_vidmem *wins;
  int shrink_count;    /* ncclCommShrink calls on this communicator (sim_nccl_shrink.c) */
  int suspended;       /* ncclCommSuspend: unusable until ncclCommResume (sim_nccl_elastic.c) */
  struct sim_net *net; /* inter-node queue pairs (sim_nccl_net.c), NULL: none */
  int traffic_slot;    /* this rank's slot in the job's traffic directory, -1: none */
  _Atomic int revoked; /* ncclCommRevoke: collectives fail (a call waiting for its peers,
                               * within 100 ms), destroy/split/shrink still work */
};

/* ---- segment (sim_shm.c) --------------------------------------------------------------------- */

/* Maps the communicator's segment, creating it if this rank is first, and registers the rank.
 * Does not wait for the other ranks. Returns ncclSuccess, or an error with the last-error text set. */
ncclResult_t sim_seg_join(struct ncclComm *comm, const char *name);
/* Returns 1 once every rank has joined, 0 if not yet, or an error code when waiting must stop. */
int sim_seg_all_joined(struct ncclComm *comm);
void sim_seg_leave(struct ncclComm *comm, int state);
sim_rank_slot_t *sim_seg_rank(const sim_seg_t *seg, int rank);
void *sim_seg_slot(const sim_seg_t *seg, int rank);
sim_p2p_ctl_t *sim_seg_p2p_ctl(const sim_seg_t *seg, int src, int dst);
void *sim_seg_p2p_buf(const sim_seg_t *seg, int src, int dst);
sim_flow_row_t *sim_seg_flows(const sim_seg_t *seg, int rank);

/* Rings the segment's bell: wakes every rank sleeping in sim_seg_wait. */
void sim_seg_ring(sim_seg_t *seg);
/* Sleeps until the bell moves from `seen` or `timeout_ms` passes. */
void sim_seg_wait(sim_seg_t *seg, uint32_t seen, int timeout_ms);

/* Checks that every peer (or only `only_rank`, when >= 0) is still there. Returns ncclSuccess, or
 * an error with the last-error text naming the rank that is gone. Note that a point-to-point wait
 * checks only its peer: other ranks may have finished and left legitimately. */
ncclResult_t sim_seg_check_peers(struct ncclComm *comm, int only_rank);

/* Called once every rank has joined: derives the node layout from the ranks' slots. */
void sim_comm_joined(struct ncclComm *comm);

/* ---- timing model, tuner and per-call configuration (sim_nccl_select.c) ---------------------- */
struct sim_task;

/* Builds the communicator's timing model (NCCLSIM_TOPO, NCCL_* env, config min/maxCTAs) and
 * loads and initialises the tuner plugin as the emulated NCCL does. Called once every rank has
 * joined (the layout is known). Returns ncclSuccess, or the tuner's init error, which fails the
 * communicator's creation as in NCCL. */
ncclResult_t sim_comm_model_init(struct ncclComm *comm);
/* Finalizes the communicator's tuner context and releases the plugin (commFree in NCCL). */
void sim_comm_model_fini(struct ncclComm *comm);
/* Bins n collective tasks of one communicator rank (issue order) into NCCL's buckets and chooses
 * each bucket's configuration: cost table, tuner, argmin, channel cap and chunk. Sets each task's
 * cfg/desc. Returns ncclSuccess, or the error that fails the group (tuner error, nothing enabled,
 * a forced configuration the topology cannot run). */
ncclResult_t sim_select_configs(struct ncclComm *comm, struct sim_task **tasks, int n);
/* Chooses configurations for every collective task of a group, per communicator. Tasks whose
 * communicator has no model yet are configured when they start. Failing tasks get their result. */
void sim_select_group(struct sim_task *head);
/* Appends the task's NCCLSIM_TRACE line (one per bucket per rank: each task of a bucket). */
void sim_trace_task(const struct sim_task *t, double us);

/* ---- tasks and groups (sim_nccl_group.c) ------------------------------------------------------ */

enum { SIM_TASK_INIT, SIM_TASK_COLL, SIM_TASK_SEND, SIM_TASK_RECV };
enum { SIM_PROGRESS_STALLED = 0, SIM_PROGRESS_MOVED = 1, SIM_PROGRESS_DONE = 2 };

typedef struct sim_task {
  int kind;
  struct ncclComm *comm;
  struct CUstream_st *stream;
  int coll;
  const void *sendbuf;
  void *recvbuf;
  size_t count;
  ncclDataType_t dtype;
  ncclRedOp_t op;
  int root, peer;
  /* progress state */
  int phase, waiting, started;
  uint64_t wait_seq;
  size_t chunk, nchunks, elems_per_chunk, done_bytes;
  sim_desc_t desc;
  sim_config_t cfg;     /* configuration chosen at group launch */
  int net_todo;         /* this chunk's inter-node step has not run yet */
  int busy;             /* counted in the job's traffic directory while it runs */
  int selected, tuned;  /* cfg is set; the tuner changed NCCL's default */
  int bucket_ops;       /* tasks in this task's bucket */
  uint64_t bucket_call; /* call index of the bucket's first task */
  double end_vt;
  const void *scalar_ptr; /* PreMulSum with ncclScalarDevice: read when the call starts */
  void *scratch;
  ncclResult_t result;
  struct sim_task *next;
} sim_task_t;

/* A zeroed task, reused from the calling thread's pool when it has one (sim_task_pool.c), and its
 * release (with its scratch); NULL when out of memory. */
sim_task_t *sim_task_new(void);
void sim_task_free(sim_task_t *t);
/* Queues a task in the calling thread's group, or runs it at once (an implicit group) when no
 * group is open. Takes ownership of the task. Returns the task's result for an implicit group. */
ncclResult_t sim_group_submit(sim_task_t *task);
int sim_group_depth(void);
/* Runs a list of tasks as one group launch, now (a graph's replay: the tasks are configured). */
ncclResult_t sim_group_run(sim_task_t *head);

/* ---- graph capture (sim_nccl_graph.c) --------------------------------------------------------- */
/* Called at group launch, once configurations are chosen: when the group's tasks are issued into a
 * capturing stream, records them in the capture (taking ownership) and returns 1 with the group's
 * result in *res_p; returns 0 when no task is captured. */
int sim_graph_nccl_capture(sim_task_t *head, ncclResult_t *res_p);

/* ---- collectives and point-to-point (sim_nccl_coll.c, sim_nccl_p2p.c) ------------------------ */
int sim_coll_progress(sim_task_t *t);
int sim_p2p_progress(sim_task_t *t);

/* Modelled duration of a collective or a point-to-point message, in microseconds. */
double sim_coll_time_us(const struct ncclComm *comm, const sim_desc_t *d, double phi);
double sim_p2p_time_us(const struct ncclComm *comm, int peer, size_t bytes);
/* NCCLSIM_SKEW=f: how late (us) this rank arrives at collective t — f x U(0,1) x the call's modelled
 * time with NCCL's own choice; 0 without the knob (group_launch issues it on the stream first). */
double sim_skew_delay_us(struct ncclComm *comm, const sim_task_t *t);
/* The modelled time (us) of collective t with NCCL's own choice (no tuner, no noise); < 0: none. */
double sim_default_time_us(struct ncclComm *c, const sim_task_t *t);

/* ---- API versions (sim_nccl_since.c) ---------------------------------------------------------- */
/* NCCL version codes of the releases that introduced the newer entry points (from NCCL's history
 * of src/nccl.h.in). */
enum {
  SIM_SINCE_SEND_RECV = 20703,
  SIM_SINCE_PREMULSUM = 21104,
  SIM_SINCE_LAST_ERROR = 21304,
  SIM_SINCE_CONFIG = 21403,
  SIM_SINCE_SPLIT = 21801,
  SIM_SINCE_MEM_REGISTER = 21901,
  SIM_SINCE_SIMULATE = 22203,
  SIM_SINCE_SCALABLE = 22304,
  SIM_SINCE_RESET_DEBUG = 22403,
  SIM_SINCE_SHRINK_WINDOW = 22703,
  SIM_SINCE_ALLTOALL = 22803,
  SIM_SINCE_REVOKE = 22807,
  /* The device API's host side came with 2.28; grow, suspend/resume, memory statistics and
   * one-sided RMA are in NVIDIA's 2.29.7 API documentation; ncclWinGetUserPtr first appears in
   * 2.30's nccl.h (2.30.3 is the first 2.30 release). */
  SIM_SINCE_DEVICE_API = 22803,
  SIM_SINCE_ELASTIC = 22907,
  SIM_SINCE_RMA = 22907,
  SIM_SINCE_WIN_USER_PTR = 23003
};
/* Returns ncclSuccess when the emulated NCCL has `fn` (introduced in version `since`), else
 * ncclInvalidUsage with a last-error text naming the version that introduced it. */
ncclResult_t sim_nccl_since(const char *fn, int since);
/* The first checks of an entry point `fn` that takes a communicator: ncclSuccess when the emulated
 * NCCL has fn (as sim_nccl_since) and comm is live (as sim_comm_live), else the first error. */
ncclResult_t sim_comm_entry(const struct ncclComm *comm, const char *fn, int since);

/* ---- user reduction operators (sim_nccl_redop.c) ---------------------------------------------- */
/* Resolves a reduction operator of a call on `comm`: a built-in one passes through; a PreMulSum
 * operator created on this communicator for `dt` sets *scalar_ptr_p (ncclScalarDevice: read when
 * the call starts) or *scalar_p (host-immediate value). Returns ncclSuccess, or
 * ncclInvalidArgument naming the operator. */
ncclResult_t sim_redop_resolve(struct ncclComm *comm, ncclRedOp_t op, ncclDataType_t dt,
                               const char *fn, const void **scalar_ptr_p, uint64_t *scalar_p);
void sim_redop_free_all(struct ncclComm *comm);
void sim_reg_free_all(struct ncclComm *comm);

/* ---- errors (sim_nccl_error.c) --------------------------------------------------------------- */
/* Sets the calling thread's last-error text (what ncclGetLastError returns) and returns `res`. */
ncclResult_t sim_error(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int sim_comm_usable(const struct ncclComm *comm);
/* ncclSuccess when comm is a communicator not yet destroyed (whatever its state: failed, revoked
 * or suspended), else ncclInvalidArgument with the last-error text naming `fn`. */
ncclResult_t sim_comm_live(const struct ncclComm *comm, const char *fn);
/* ncclSuccess when a call may use comm, else NCCL's error for a destroyed, failed or revoked
 * communicator, with the last-error text naming `fn`. */
ncclResult_t sim_comm_check(ncclComm_t comm, const char *fn);

#endif

/* Defines an NCCL API function as libnccl exports it: a strong pncclX and a weak ncclX alias of it
 * (libnccl's PROFAPI pattern), so a profiler or the autoha shim can interpose ncclX and still reach
 * the implementation as pncclX. Usage: SIM_NCCL_API(ncclResult_t, ncclX, args...) { body } */
#define SIM_NCCL_API(ret, name, ...)                                                               \
  SIM_API ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));                           \
  SIM_API ret p##name(__VA_ARGS__)
