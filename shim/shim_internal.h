/* Shared state of the shim: communicators as the tuner face sees them (one context per rank), the
 * per-rank and process-wide state of each key, and the entry points between the shim's files.
 *
 * Two levels of state: a context (ah_comm_t, one per communicator per local rank) counts the calls
 * of each key it sees — the call index — and keeps that rank's timings; a key state (ah_shim_keystate_t,
 * one per (communicator, collective, size bin) per process) holds the schedule every local rank of
 * the communicator reads, and, on the leader, the search. */
#ifndef AH_SHIM_INTERNAL_H
#define AH_SHIM_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cuda.h>
#include <nccl.h>

#include "ah_config.h"
#include "ah_uthash.h"
#include "ah_coord_health.h"
#include "ah_env.h"
#include "ah_log.h"
#include "ah_report.h"
#include "ah_sched.h"
#include "autoha/nccl_tuner_abi.h"

#define AH_EXPORT __attribute__((visibility("default")))
/* A variable of another file that a wrapper reads on every call: declared hidden, so that the
 * compiler reads it in one instruction rather than through the GOT (-fvisibility=hidden applies to
 * definitions, not to extern declarations). */
#define AH_HIDDEN __attribute__((visibility("hidden")))
/* A function whose calls are never made tail calls, and one kept whole, as written, by GCC's
 * interprocedural passes (the hot path's tuner face, shim_tuner_face.c, says why for each). */
#if defined(__clang__)
#define AH_NO_TAIL_CALLS __attribute__((disable_tail_calls))
#define AH_KEPT_WHOLE __attribute__((noinline))
#else
#define AH_NO_TAIL_CALLS __attribute__((optimize("no-optimize-sibling-calls")))
#define AH_KEPT_WHOLE __attribute__((noipa, noinline))
#endif
#include "shim_thread.h" /* AH_TLS_HOT and the collective path's per-thread block */

/* NCCL versions whose tuner ABI the shim serves. */
#define AH_NCCL_FIRST_TUNER 21900
/* Size bins a context indexes directly: bytes per rank up to 2^63. */
#define AH_BINS 64

struct ah_tune;
struct ah_shim_rankkey;
/* Local ranks of one communicator a key state tracks (one process rarely holds more than 8). */
#define AH_MAX_LOCAL_RANKS 64

/* A search call's shortest duration across the local ranks so far, while not all have reported. */
typedef struct {
  uint64_t index;
  double us;
  double t0_us; /* when its first rank reported it (ah_shim_now_us) */
  int n; /* ranks that reported it; 0: the slot is free; -1: passed on (later times ignored) */
} ah_shim_localmin_t;
/* Search calls a key's local minimum follows at once (its slot is index % this). */
#define AH_LOCAL_MIN_SLOTS 64

/* Per process, per key: the schedule all local ranks read, and the leader's search. */
typedef struct ah_shim_keystate {
  ah_key_t key;
  ah_sched_t *sched;
  pthread_mutex_t lock; /* serialises the leader's ah_tune_* calls (tune mode only) */
  struct ah_tune *tune; /* created by the leader's first call of the key, tune mode only */
  _Atomic int reopen;   /* drift re-opened tuning: the leader cuts the forever segment */
  _Atomic int gave_up;  /* a worker waited AUTOHA_SYNC_TIMEOUT_S for the leader: no more waits */
  int space_set;
  ah_space_t space; /* from the leader's first cost table */
  int nlocal;       /* this process's ranks using the key (under lock) */
  struct ah_shim_rankkey *local[AH_MAX_LOCAL_RANKS];
  ah_shim_localmin_t *mins; /* a wholly local search's shortest durations (under lock; lazily) */
  int ntimers;              /* local ranks that have reported a search call's time (under lock) */
  /* 1 + the first call index of the latest forever segment a decision line announced: the first
   * local rank to run it says so for every local rank (shim_decision.c), the others stay quiet */
  _Atomic uint64_t said;
  struct ah_shim_keystate *next; /* in the process-wide table (shim_decide.c) */
} ah_shim_keystate_t;

/* One rank's statistics of one configuration in a key. */
typedef struct {
  ah_config_t cfg;
  uint64_t calls, timed;
  double us_total, bytes_total;
} ah_stat_t;

/* Per rank, per key: the call index and what the report says about this rank's calls. Written by
 * the thread NCCL runs getCollInfo on (counts) and by the timing harvest (times). */
typedef struct ah_shim_rankkey {
  ah_shim_keystate_t *ks;
  int coll, bin;
  uint64_t next; /* call index of the next call: calls counted so far */
  uint64_t bytes_min, bytes_max;
  /* The settled call's short path (ah_shim_decide_hot, shim_decide_hot.h): written by a full
   * decision that ran a forever segment with nothing else to do, valid for call indices below
   * hot_end (the next one sampled for timing; 0 once drift re-opens the key) while the schedule's
   * published count is still hot_published. */
  uint64_t hot_end;
  uint64_t hot_published;
  const struct ah_sched *hot_sched; /* ks->sched (fixed for the key's life): one load less */
  uint64_t *hot_calls; /* the statistic its calls are counted in (applied or NCCL's default) */
  int hot_cell;        /* the cost-table cell forced: hot_algo x hot_num_proto + protocol */
  int hot_algo, hot_num_proto; /* the table width hot_cell is for (-1: it changed, no short path) */
  int hot_nchannels;           /* the channel count asked for, 0 NCCL's */
  /* The hub's straggler audit (ah_shim_audit): calls [audit_lo, audit_hi) are timed. Written by
   * the coordinator's thread, which then clears hot_end; hot_set reads them. */
  _Atomic uint64_t audit_lo, audit_hi;
  ah_config_t nccl_cfg;   /* NCCL's own choice (argmin of its table, v3+), algo -1 unknown */
  ah_stat_t nccl_default; /* calls that ran NCCL's own choice */
  ah_stat_t applied;      /* calls that ran the current non-default config */
  uint32_t gen;           /* bumped when the applied config changes (late times are dropped) */
  int timer;              /* 1 once this rank reported a search call's time (ks->ntimers) */
  uint64_t seg_first;     /* first index of the segment used last, UINT64_MAX before any */
  ah_segment_t seg;       /* that segment, as looked up when the schedule had ... */
  uint64_t seg_published; /* ... this many segments (UINT64_MAX: look it up again) */
  int seg_keep;           /* that segment keeps NCCL's choice */
  int seg_refused;        /* v1/v2: that segment names a pair NCCL's flags forbid */
  int seg_nccl;           /* that segment forces NCCL's own pair and resources */
  int seg_cell;           /* v3+: its pair's cost-table cell, checked at each call; -1 none to
                              * check, -2 a partial pair (every matching cell is looked at) */
  int source;             /* AH_SOURCE_* of the latest call */
  int refused;            /* a forced pair NCCL cannot run was refused (logged once) */
  int leader;             /* this rank drives the key's search */
  int searched;           /* the leader searches the key (a tuned communicator, not pinned) */
  int unsettled; /* made while its communicator awaited the hub's verdict (AH_CTL_PENDING): leader,
                    searched and pinned segment are set at its first call after index 0 */
  struct ah_comm *comm; /* the rank's communicator context */
  uint64_t sync_waits;
  double sync_wait_us;
  uint64_t captured; /* calls issued into a capturing stream (CUDA graphs): not timed */
  _Atomic uint64_t graph_launched; /* their replays by launches of the graphs (shim_graph.c) */
} ah_shim_rankkey_t;

/* How a communicator's keys are decided, fixed at its first decision. AH_CTL_PENDING: a tuned
 * communicator spanning processes whose hub verdict has not arrived yet; call 0 of each of its keys
 * runs NCCL's choice on every rank whatever the verdict, so only a key's second call waits for it
 * (shim_control.c ah_shim_key_settle). */
enum {
  AH_CTL_OBSERVE = 0,
  AH_CTL_FIXED = 1,
  AH_CTL_LOCAL_TUNE = 2,
  AH_CTL_REMOTE_TUNE = 3,
  AH_CTL_PENDING = 4
};

/* Process-wide record of a communicator identity: how many local ranks the API wrappers announced
 * and who leads. */
typedef struct ah_commrec {
  uint64_t id;
  int nranks;
  _Atomic int announced; /* local ranks seen entering a constructor with this identity */
  void *leader;          /* the ah_comm_t that drives the search (process-local tuning) */
  _Atomic int ctl;       /* AH_CTL_*, -1 until decided */
  int hub;               /* its ranks joined the coordinator's hub (under the control lock) */
  _Atomic int left;      /* the process left it at the hub: its last local context is gone */
  UT_hash_handle hh;     /* in the process-wide table by id (shim_comm.c) */
} ah_commrec_t;

/* A communicator as seen by one rank's tuner context. Created at the tuner's init (once per
 * communicator per rank) or, when NCCL does not use the shim as its tuner, by the API wrappers.
 * Freed never: the report at exit still shows it (finalized is set instead). */
typedef struct ah_comm {
  uint64_t id; /* identity, the same on every rank (see shim_comm.c) */
  int nranks, nnodes;
  int rank; /* rank in the communicator, -1 while unknown */
  int abi;  /* tuner ABI NCCL loaded us with; 0 = observed from the API */
  int ctl;  /* AH_CTL_* copy, set at the first decision */
  ah_commrec_t *rec;
  pthread_mutex_t lock; /* key creation vs. the report's walk (never on the hot path) */
  /* [AH_NUM_COLLS][AH_BINS]: tuned AH_FUNC_* and observed-only AH_COLL_*, indexed as an array;
   * its own allocation (4 KiB), freed once the context is released (ah_comm_keys_release) */
  ah_shim_rankkey_t *(*keys)[AH_BINS];
  _Atomic int finalized;
  void *chain_ctx;   /* the user's own tuner's context (shim_chain.c), NULL: none */
  uintptr_t decider; /* leader only: the thread that made its last slow-path decision */
  /* For the hang probes (shim_health.c): the stream of the rank's latest decided call (written by
   * the hot path: one store; a group's calls are bracketed on the group's first stream), the
   * communicator's own stream as its grouped wrapper last saw it, with that group's first stream
   * (shim_nccl.c notes both when the health thread asks, ah_shim_stream_notes_request), the CUDA
   * context of the communicator's device (current at its tuner init, which NCCL runs with that
   * device current; else at its first key's creation), and the health thread's own state of this
   * context. */
  CUstream last_stream;
  /* The thread block (shim_thread.h) of the thread that made its latest fully decided call: the
   * health thread reads its timing depth, > 0 while the thread is inside a call (blocked in NCCL),
   * through process_vm_readv, so a thread that has exited since reads as unknown, never as a
   * fault. */
  const void *last_caller;
  CUstream own_stream, own_group;
  CUcontext cuctx;
  struct ah_comm_health *health;
  int pid; /* the process that made it: a forked child's copy is not its own */
  /* In the registry's live or parked list (shim_comm.c, under its lock): a job that made
   * thousands of communicators has one or two in them; `live` says which (AH_COMM_*) */
  struct ah_comm *live_prev, *live_next;
  int live;
  _Atomic int folded;        /* its figures are in the report's summary of destroyed ones */
  struct ah_comm *reap_next; /* waiting for its health state to be freed (shim_health.c) */
} ah_comm_t;
enum { AH_COMM_RELEASED = 0, AH_COMM_LIVE = 1, AH_COMM_PARKED = 2 };

/* Process-wide shim state, set once by ah_shim_init. It holds no copy of a setting: every file
 * reads settings with ah_env_settings() (ah_env.h), which is valid before init and on every thread
 * and is the one reader the RDMA side can use without this NCCL-side state. */
typedef struct {
  int enabled;        /* 0: pure pass-through (AUTOHA_ENABLE=0, or an init failure) */
  int nccl_version;   /* ncclGetVersion of the library actually loaded */
  int tuner_capable;  /* the loaded NCCL has a tuner ABI (2.19+) */
  int tuner_expected; /* NCCL_TUNER_PLUGIN names autoha: NCCL will consult its tuner face */
  const ah_profile_t *profile; /* loaded at the first communicator, NULL when none */
  char self_path[1024];        /* this library's path (for NCCL_TUNER_PLUGIN) */
} ah_shim_t;

extern AH_HIDDEN ah_shim_t ah_shim;

/* Why a grouped collective's wrapper takes its bracketed path instead of jumping straight to NCCL
 * (shim_nccl.c's grouped_short tests the word once, whatever its bits): AH_SLOW_API_OBSERVED, some
 * handle is observed from the API (set by shim_nccl.c, for good); AH_SLOW_NOTE_STREAMS, the next
 * ah_shim_stream_notes grouped calls note their communicator's own stream (shim_nccl.c clears it
 * once they are spent). */
enum { AH_SLOW_API_OBSERVED = 1, AH_SLOW_NOTE_STREAMS = 2 };
extern AH_HIDDEN _Atomic int ah_shim_slow_calls;
extern AH_HIDDEN _Atomic int ah_shim_stream_notes;
/* Asks the next few grouped calls of the process to note their communicators' own streams
 * (ah_comm_t.own_stream): called by the health thread once a tick, so that with one thread driving
 * several GPUs the probes find each rank's stream at the cost of a few handle look-ups a second,
 * and none on a converged grouped call. */
void ah_shim_stream_notes_request(void);

/* Starts fn on a detached thread of the shim's own. Returns 0, or -1 after logging "cannot start
 * <what>". */
int ah_shim_thread_detached(void *(*fn)(void *), const char *what);

/* Idempotent: reads the configuration and, once NCCL is loaded (possibly long after the
 * constructor), resolves it and derives what depends on it. Called from the constructor and again
 * from every wrapper; after NCCL is resolved it is one inline load, not a call. */
extern AH_HIDDEN _Atomic int ah_shim_init_ready;
/* 1 once ah_shim_init_ready is and the shim is enabled: a lone collective's wrapper tests this one
 * word for both (shim_nccl.c). */
extern AH_HIDDEN _Atomic int ah_shim_wrap_on;
void ah_shim_init_slow(void);
static inline void ah_shim_init(void) {
  if (__builtin_expect(atomic_load_explicit(&ah_shim_init_ready, memory_order_acquire), 1)) return;
  ah_shim_init_slow();
}
/* ---- the job (shim_job.c) --------------------------------------------------------------------- */
/* Called before every new communicator context is created (with ah_shim_report_start_interval):
 * the first one fixes the job's shape for its topology and loads the profile (AUTOHA_PROFILE). */
void ah_shim_first_comm(uint64_t id, int nranks, int nnodes, int rank);
/* The job's name for %j in report and profile paths: the scheduler's or launcher's job id
 * (ah_template_job_id), else "comm-<16 hex digits>", the identity of the process's largest
 * communicator (the job's world, the same on every rank; `hint_id` when none is registered yet,
 * 0: none), fixed at its first use; "unknown" before any communicator. */
#define AH_SHIM_JOB_MAX 128
void ah_shim_job_name(uint64_t hint_id, char *out, size_t len);
/* The topology written into reports and checked against profiles (ah_report_topology's text). */
void ah_shim_fingerprint(char out[AH_REPORT_TOPO_MAX]);
/* That text for a first communicator of nranks ranks on nnodes nodes (shim_topo.c). */
void ah_shim_topology(int nranks, int nnodes, char out[AH_REPORT_TOPO_MAX]);
/* What reproduces the run, for the report (shim_topo.c): the AUTOHA_* and NCCL_* variables, the GPU
 * model, the CUDA driver's version (cuDriverGetVersion) and the runtime's (cudaRuntimeGetVersion of
 * a CUDA runtime already loaded in the process, 0 when none), the kernel driver's version, the job's
 * hosts (this host: the coordinator does not exchange host names) and the AUTOHA_OVERRIDE rules
 * that did not parse. Sets run_p->present. */
void ah_shim_run_facts(ah_report_run_t *run_p);

/* ---- communicator identity and registry (shim_comm.c) ---------------------------------------- */
uint64_t ah_comm_id_from_unique_id(const ncclUniqueId *id);
uint64_t ah_comm_id_for_split(uint64_t parent, int split_index, int color);
/* The identity of a ncclCommShrink child: of (parent identity, index of the shrink on the
 * parent, excluded ranks in ascending order). A separate count from splits: excluded ranks do not
 * call, so a shared count would differ between them and the others at the parent's next split. */
uint64_t ah_comm_id_for_shrink(uint64_t parent, int shrink_index, const int *sorted_excl,
                               int nexcl);
/* The live context of rank `rank` in the communicator the constructor wrappers announced as
 * `rec_id`, or NULL. Walks the registry: for calls that are not on the tuned hot path. */
ah_comm_t *ah_comm_find(uint64_t rec_id, int rank);
/* Remembers, for the calling thread, the communicators being created (identity, rank and the
 * device NCCL binds each to, -1 unknown), in call order; the tuner's init takes the oldest entry of
 * the device it runs on (NCCL runs a rank's init with its device current, and the inits of a group
 * in an order of its own), else the oldest. */
void ah_comm_pending_push(uint64_t id, int rank, int dev);
int ah_comm_pending_pop(int dev, uint64_t *id_p, int *rank_p);
void ah_comm_pending_clear(void);
/* Grouped constructors: NCCL runs their inits (and the tuner's) on its own threads, so the
 * identity and rank are also shared process-wide until claimed or until the sharing thread's
 * group ends. `alt_id` is the identity as NCCL's own commHash might compute it (0: unknown). */
void ah_comm_pending_share(uint64_t id, uint64_t alt_id, int nranks, int rank, int dev);
/* Claims the oldest shared entry for a tuner init running on device `dev` (-1 unknown): by NCCL's
 * commId (matching id or alt_id; an entry of that device first) or, without a match, by rank
 * count when every unclaimed entry of that count and device names one identity. Returns 1 and the
 * identity and rank, or 0. */
int ah_comm_pending_claim(uint64_t comm_id, int nranks, int dev, uint64_t *id_p, int *rank_p);
/* Drops the entries the calling thread shared (its group has ended). */
void ah_comm_pending_unshare_mine(void);
/* Clears and unshares what the calling thread pushed or shared (its group has ended) and resets
 * ah_thread.comm_pending, which is set when it pushes or shares an entry, so that a group's end
 * calls this only on a thread with something to clear. Leaves errno unchanged. */
void ah_comm_pending_group_end(void);
/* NCCL's own hash of a unique id as its commHash (DJB2a over the 128 bytes, as NCCL computes it):
 * a second way to recognise a communicator in a v5+ tuner init. */
uint64_t ah_comm_alt_id_from_unique_id(const ncclUniqueId *id);
/* The context the calling thread's tuner init created last (NULL before), and its reset. */
ah_comm_t *ah_comm_last_created(void);
void ah_comm_last_reset(void);
/* Announces, before NCCL runs the constructor, that a local rank joins communicator `id`: once
 * every rank of a communicator has been announced in this process it can be tuned without a
 * coordinator. */
ah_commrec_t *ah_commrec_announce(uint64_t id, int nranks);
ah_commrec_t *ah_commrec_get(uint64_t id, int nranks);
/* A context: `id` keys its schedules (the same on every rank), `rec_id` the process-wide record
 * of local ranks (the identity the constructor wrappers announced, which may differ from NCCL's
 * commId). */
ah_comm_t *ah_comm_create(uint64_t id, uint64_t rec_id, int nranks, int nnodes, int rank, int abi);
void ah_comm_finalize(ah_comm_t *c);
/* Calls fn, without the registry's lock, for every context not released: the live ones and the
 * parked ones (finalized while their communicator has a live local context or has not left the
 * hub). Not every context ever created: a job that churns communicators has a few of these. */
void ah_comm_foreach(void (*fn)(void *arg, ah_comm_t *c), void *arg);
/* Releases the parked contexts of record `rec` when none of its contexts is live: takes them off
 * every walk and returns them (at most max, into out), 0 when a context of it is live. Note that
 * a released context is never freed, but nothing walks it again: its heavy state may go once no
 * other thread can still hold it (shim_retire.c says when). */
int ah_comm_release(const ah_commrec_t *rec, ah_comm_t **out, int max);
/* Frees the key table of c, released, pointing it at a shared empty one. Note that the caller
 * makes sure no walk still reads it (the health thread's tick does; shim_health.c). */
void ah_comm_keys_release(ah_comm_t *c);
/* Calls fn for every communicator not finalized, under the registry's lock: fn only looks. */
void ah_comm_foreach_live(void (*fn)(void *arg, ah_comm_t *c), void *arg);
/* An identity for a communicator created where the shim saw no unique id: the same on every rank
 * only if ranks create such communicators in the same order, which is why it is a last resort. */
uint64_t ah_comm_fallback_id(size_t nranks, size_t nnodes);

/* ---- timing (shim_timing.c; the bracket itself is inline in shim_timing.h) ------------------- */
/* Attaches one decision to the call being issued on this thread. */
void ah_timing_note(ah_shim_rankkey_t *ck, uint64_t index, int source, uint32_t gen,
                    size_t bytes_per_rank);
/* Every pending record of this thread is harvested (waiting for none). Leaves errno unchanged. */
void ah_timing_harvest(void);
/* The stream of this thread's open bracket (NULL outside one). */
cudaStream_t ah_timing_stream(void);
/* ---- hang diagnosis (shim_health.c) ---------------------------------------------------------- */
/* Starts, once per process, the thread that sends the hub every hub-joined rank's progress record
 * once a second (unless AUTOHA_HEALTH=0). */
void ah_shim_health_start(void);
/* A sampled call's GPU duration on rank c (from the timing harvest, never the converged hot
 * path), queued for the hub's straggler detection; c is joined to a hub (the caller checks: the
 * timing harvest counts in the hot path's instruction budget). */
void ah_shim_health_sample(ah_comm_t *c, int coll, int bin, uint64_t index, double us);
/* Frees the health state and key table of context c, released (ah_comm_release): now when no
 * tick or sampler can hold them, else at the end of a later tick. */
void ah_shim_health_release(ah_comm_t *c);
/* Keeps a finding of the hub for the report (the latest AH_REPORT_HEALTH_MAX), and copies them. */
void ah_shim_health_note(uint64_t comm, int kind, const char *text);
int ah_shim_health_findings(ah_report_health_t *out, int max);
/* The findings received since the process started, per kind (AH_FINDING_*), into counts_p. */
void ah_shim_health_counts(uint64_t counts_p[AH_REPORT_HEALTH_KINDS + 1]);
/* Runs AUTOHA_HEALTH_CMD (when set) with the finding as one JSON line on its standard input. */
void ah_shim_health_event(uint64_t comm, const ah_finding_t *f);

/* ---- shim_error_wait.c ---- */
/* After a NCCL call on comm returned rc: for ncclRemoteError or ncclSystemError (a peer gone or
 * cut), in a process connected to a hub with AUTOHA_HEALTH on, the first such failure of each
 * communicator waits up to 1 s for the hub's finding (none if one came in the last 5 s), so that
 * the process names who died before its program exits on the error. Keeps errno. */
void ah_shim_error_wait(ncclComm_t comm, ncclResult_t rc);
/* A finding was handled (logged, AUTOHA_HEALTH_CMD run): wakes the calls waiting above. */
void ah_shim_error_finding(void);
/* Per-connection timing (shim_link.c): tells the RDMA side how to read a queue pair's GPU (at init). */
void ah_shim_link_init(void);

/* ---- CUDA graphs (shim_graph.c) ---------------------------------------------------------------- */
/* Records that a call of key ck was issued into the capture on `stream`: each launch of the graph
 * the capture becomes replays it (the report's graph_launched_calls). */
void ah_shim_graph_note(cudaStream_t stream, ah_shim_rankkey_t *ck);

/* ---- wrappers shared between shim_nccl.c and shim_nccl_more.c -------------------------------- */
/* Bytes of one element of a data type (fp8 and unknown types: 1). */
int ah_shim_dtype_size(ncclDataType_t t);
/* Whether the calling thread is inside ncclGroupStart/End (as the shim counted it). */
int ah_shim_in_group(void);
/* The context the shim keeps for a communicator handle (API-side or tuner-face), or NULL. */
ah_comm_t *ah_shim_handle_ctx(ncclComm_t comm);
/* Revokes (ncclCommRevoke) every handle of this process with identity `id`; returns how many. */
int ah_shim_revoke_comm(uint64_t id);

/* ---- report (shim_report.c) ------------------------------------------------------------------ */
/* Keeps what the report says of context c, being destroyed (before it is finalized), among the
 * destroyed communicators: in detail, the latest AH_REPORT_DESTROYED_DETAIL of them, the older
 * summed into the report's "destroyed" entry; from then on the report reads c no more. Returns 1
 * when kept, 0 when not (reports and metrics off, out of memory, another process's copy, or
 * folded already). */
int ah_shim_report_fold(ah_comm_t *c);
/* A local rank's communicator context is destroyed (ncclCommDestroy/Abort, NCCL's tuner
 * finalize; shim_retire.c): its figures go to the report's destroyed ones, it is finalized (and
 * the communicator leaves the hub with its last local context), and then what only a live
 * communicator needs is freed; the report is written (ah_shim_report_teardown). */
void ah_shim_retire(ah_comm_t *c);
/* Writes the report now (teardown, exit, interval). Serialised; never fails the job. */
void ah_shim_report_write(const char *why);
/* A communicator's teardown: writes the report now, or, when one was written less than a second
 * ago, within a second (a job that splits and destroys communicators by the thousand rewrote a
 * report of every communicator ever made at each teardown). */
void ah_shim_report_teardown(void);
/* Starts the interval writer when AUTOHA_REPORT_INTERVAL_S > 0 (once; later calls do nothing). */
void ah_shim_report_start_interval(void);
/* Where the report learns the process's coordinators and how many are connected (for the metrics):
 * set by shim_coord.c at its first connection, so this file does not depend on the coordinator's
 * (which depends on it through shim_init.c). NULL, or never set: no coordinator. */
void ah_shim_report_set_coord_count(void (*fn)(int *n_p, int *alive_p));

#endif
