/* Per-call configuration, as NCCL chooses it at group launch: collective tasks of one rank are
 * binned into buckets (2.22+: same collective, operator and type, sizes within 4x of each other;
 * before: one task per bucket), and for each bucket NCCL fills its cost table, hands it to the
 * tuner plugin (once per bucket), and takes the argmin, the tuner's channel cap and (2.30+, tuner
 * v6) its chunk size. The chosen configuration goes into each task's description, so the
 * consistency check sees what every rank chose, and into the NCCLSIM_TRACE file.
 *
 * Also here: the per-communicator model and tuner setup, since the two are made together (a v5+
 * tuner's init may edit the tables the model then uses). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_cuda.h"
#include "sim_nccl.h"
#include "sim_reduce.h"

#define SELECT_STACK 64 /* tasks of one group configured without an allocation */

static size_t task_nbytes(const sim_task_t *t) {
  size_t b = t->count * sim_dtype_size(t->dtype);
  if (t->coll == SIM_COLL_ALLGATHER || t->coll == SIM_COLL_REDUCESCATTER)
    b *= (size_t)t->comm->nranks;
  return b;
}

/* ---- model and tuner per communicator -------------------------------------------------------- */

/* Warns once per process per distinct text: every communicator would repeat the same complaint. */
static void warn_first(const char *text) {
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
  static uint64_t seen[16];
  static int nseen;
  uint64_t h = 0xcbf29ce484222325ull;
  for (const char *c = text; *c; c++) h = (h ^ (unsigned char)*c) * 0x100000001b3ull;
  pthread_mutex_lock(&lock);
  int found = 0;
  for (int i = 0; i < nseen && !found; i++) found = seen[i] == h;
  if (!found && nseen < 16) seen[nseen++] = h;
  pthread_mutex_unlock(&lock);
  if (!found) sim_log_warn("%s", text);
}

ncclResult_t sim_comm_model_init(struct ncclComm *c) {
  const char *spec = getenv("NCCLSIM_TOPO");
  sim_topo_t topo;
  char err[300];
  if (!spec || !*spec) spec = "h100";
  if (sim_topo_parse(spec, 0, &topo, err, sizeof err) != 0) {
    char text[400];
    snprintf(text, sizeof text, "invalid value for NCCLSIM_TOPO: %s; using the h100 preset", err);
    warn_first(text);
    sim_topo_parse("h100", 0, &topo, err, sizeof err);
  }
  topo.version = sim_nccl_version();
  /* The layout is the job's, whatever nodes/gpus the spec says: NCCLSIM_NODE per process. */
  sim_topo_set_layout(&topo, c->nranks, c->nnodes, c->max_local_ranks);
  int minc = c->config.minCTAs > 0 ? c->config.minCTAs : 0;
  int maxc = c->config.maxCTAs > 0 ? c->config.maxCTAs : 0;
  sim_model_init(&c->model, &topo, minc, maxc);
  if (c->model.error[0]) warn_first(c->model.error);
  uint64_t truth_seed;
  int heldout = sim_truth(&truth_seed);
  sim_model_truth_set(&c->model, heldout, truth_seed);
  c->has_model = 1;
  c->tuner = sim_tuner_acquire();
  c->tuner_ctx = NULL;
  if (!c->tuner) return ncclSuccess;
  ah_tuner_constants_v5_t k;
  sim_model_constants_get(&c->model, &k);
  /* NCCL initialises a rank with its device current (ncclCommInitRankFunc's cudaSetDevice), on a
   * thread of its own for a grouped init, so the tuner's init sees the communicator's device
   * whatever the caller set last (one thread creating a communicator per GPU), and the caller's
   * device is left as it was. */
  int caller_dev = sim_device_current();
  (void)sim_device_set(c->device);
  ncclResult_t r = sim_tuner_init(c->tuner, c, &c->tuner_ctx, &k);
  (void)sim_device_set(caller_dev);
  if (r != ncclSuccess) {
    sim_tuner_release();
    c->tuner = NULL;
    return sim_error(r,
                     "ncclsim: the tuner plugin's init returned %d on rank %d of communicator "
                     "%016llx; NCCL fails the communicator's creation",
                     (int)r, c->rank, (unsigned long long)c->hash);
  }
  if (c->tuner->abi >= 5) sim_model_constants_set(&c->model, &k);
  return ncclSuccess;
}

void sim_comm_model_fini(struct ncclComm *c) {
  if (!c->tuner) return;
  sim_tuner_finalize(c->tuner, c->tuner_ctx);
  sim_tuner_release();
  c->tuner = NULL;
  c->tuner_ctx = NULL;
}

/* ---- the tuner's say in one bucket ----------------------------------------------------------- */

/* NCCL's support flags for v1/v2 plugins, derived from the table as NCCL's adapter does. */
static void support_flags(const float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS], int *collnet_p,
                          int *nvls_p) {
  *nvls_p =
      table[AH_ALGO_NVLS][AH_PROTO_SIMPLE] >= 0 || table[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE] >= 0;
  *collnet_p = table[AH_ALGO_COLLNET_CHAIN][AH_PROTO_SIMPLE] >= 0;
}

/* Asks the tuner about one bucket and applies its answer to the table. Returns the tuner's
 * channel count (0 = keep NCCL's), sets the forced pair when a native v1/v2 answer bypasses the
 * table (2.19-2.21), and returns -1 with the last error set when the tuner fails the call. */
static int ask_tuner(struct ncclComm *c, int version, int coll, size_t nbytes, int npipe,
                     float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS], int *forced_algo_p,
                     int *forced_proto_p) {
  int num_algo = version >= 22300 ? 7 : 6, nch = 0;
  *forced_algo_p = *forced_proto_p = -1;
  ncclResult_t r;
  if (c->tuner->table_fn) { /* v4-v6: the plugin's own function, as NCCL's call site makes it */
    r = c->tuner->table_fn(c->tuner_ctx, coll, nbytes, npipe, (float **)(void *)table, num_algo,
                           SIM_NUM_PROTOS, 0, &nch);
  } else {
    int algo, proto, collnet, nvls;
    support_flags(table, &collnet, &nvls);
    r = sim_tuner_get_coll_info(c->tuner, c->tuner_ctx, coll, nbytes, npipe, table, num_algo,
                                collnet, nvls, &algo, &proto, &nch);
    if (r == ncclSuccess && c->tuner->abi <= 2 && algo >= 0 && algo < num_algo && proto >= 0 &&
        proto < SIM_NUM_PROTOS) {
      if (version < 22200) { /* native v1/v2: the pair bypasses NCCL's model and support checks */
        *forced_algo_p = algo;
        *forced_proto_p = proto;
      } else if (table[algo][proto] >= 0) { /* NCCL's v2 adapter */
        table[algo][proto] = 0.0f;
      }
    }
  }
  if (r != ncclSuccess) {
    sim_error(r,
              "ncclsim: the tuner plugin's getCollInfo returned %d for %s of %zu bytes on "
              "rank %d; NCCL fails the group",
              (int)r, sim_coll_name(coll), nbytes, c->rank);
    return -1;
  }
  return nch > 0 ? nch : 0;
}

/* ---- trace ------------------------------------------------------------------------------------ */

static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static int trace_fd = -1;

static void trace_open(void) {
  const char *path = getenv("NCCLSIM_TRACE");
  if (!path || !*path) return;
  trace_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (trace_fd < 0)
    sim_log_warn("cannot open the NCCLSIM_TRACE file %s; no trace is written", path);
}

/* Whether a trace is written. The trace's `tuned` flag costs a second selection per bucket, which
 * real NCCL never makes; it is derived only when someone reads it, so sim/'s per-call cost with a
 * tuner loaded is what NCCL's would be (bench/hotpath measures the shim against it). */
static _Atomic int trace_state; /* 0 not looked at yet, 1 no trace, 2 a trace is written */
static int trace_enabled(void) {
  int st = atomic_load_explicit(&trace_state, memory_order_acquire);
  if (__builtin_expect(st == 0, 0)) {
    pthread_once(&trace_once, trace_open);
    st = trace_fd >= 0 ? 2 : 1;
    atomic_store_explicit(&trace_state, st, memory_order_release);
  }
  return st == 2;
}

void sim_trace_task(const sim_task_t *t, double us) {
  if (!trace_enabled() || t->coll == SIM_COLL_SPLIT_EXCHANGE) return;
  char line[512];
  const sim_desc_t *d = &t->desc;
  int n = snprintf(line, sizeof line,
                   "comm=%016llx rank=%d nranks=%d call=%llu coll=%s bytes=%zu algo=%s proto=%s "
                   "nchannels=%d nthreads=%d chunk=%llu tuned=%d time_us=%.3f bucket=%llu "
                   "bucket_ops=%d\n",
                   (unsigned long long)t->comm->hash, t->comm->rank, t->comm->nranks,
                   (unsigned long long)d->call, sim_coll_name(d->coll), task_nbytes(t),
                   sim_model_algo_name(d->algo), sim_model_proto_name(d->proto), d->nchannels,
                   d->nthreads, (unsigned long long)d->chunk, t->tuned, us,
                   (unsigned long long)(t->bucket_ops ? t->bucket_call : d->call),
                   t->bucket_ops ? t->bucket_ops : 1);
  if (n > 0)
    (void)!write(trace_fd, line, (size_t)n); /* one write per line: O_APPEND keeps lines whole */
}

/* ---- selection ---------------------------------------------------------------------------------- */

/* Configures one bucket (tasks b[0..nb), `total` bytes). Returns ncclSuccess or the error. */
double sim_default_time_us(struct ncclComm *c, const sim_task_t *t) {
  size_t bytes = task_nbytes(t);
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&c->model, t->coll, bytes, 1, table);
  sim_config_t cfg;
  if (sim_model_select(&c->model, t->coll, bytes, table, 0, 0, &cfg) != 0) return -1;
  return sim_model_time_us(&c->model, t->coll, bytes, &cfg, c->phi);
}

static ncclResult_t select_bucket(struct ncclComm *c, sim_task_t **b, int nb, size_t total,
                                  int npipe) {
  int version = sim_nccl_version(), coll = b[0]->coll;
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS], deftable[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&c->model, coll, total, npipe, table);
  if (trace_enabled()) memcpy(deftable, table, sizeof table); /* the trace's untuned default */
  /* One-rank collectives reach the tuner before 2.28 (with only Ring/Simple at 0), not after. */
  int tuner_nch = 0, fa = -1, fp = -1, use_tuner = c->tuner && (c->nranks > 1 || version < 22800);
  if (use_tuner) {
    tuner_nch = ask_tuner(c, version, coll, total, npipe, table, &fa, &fp);
    if (tuner_nch < 0) return ncclInvalidUsage;
  }
  sim_config_t cfg, def;
  if (fa >= 0) { /* v1/v2 on 2.19-2.21: the tuner's pair, whatever NCCL's table says */
    float only[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
    for (int a = 0; a < SIM_NUM_ALGOS; a++)
      for (int p = 0; p < SIM_NUM_PROTOS; p++) only[a][p] = a == fa && p == fp ? 0.0f : -1.0f;
    sim_model_select(&c->model, coll, total, only, tuner_nch, 0, &cfg);
  } else if (sim_model_select(&c->model, coll, total, table, tuner_nch, 0, &cfg) != 0) {
    if (version < 22400) { /* 2.22/2.23 fall back to the backup ring entry */
      float ring[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
      for (int a = 0; a < SIM_NUM_ALGOS; a++)
        for (int p = 0; p < SIM_NUM_PROTOS; p++)
          ring[a][p] = a == AH_ALGO_RING && p == AH_PROTO_SIMPLE ? 0.0f : -1.0f;
      sim_model_select(&c->model, coll, total, ring, tuner_nch, 0, &cfg);
      goto chosen;
    }
    int user = getenv("NCCL_ALGO") || getenv("NCCL_PROTO");
    return sim_error(version >= 22400 && user ? ncclInvalidUsage : ncclInternalError,
                     "ncclsim: no algorithm/protocol is left for %s of %zu bytes on rank %d (every "
                     "cost-table entry is -1: check NCCL_ALGO, NCCL_PROTO and the tuner plugin)",
                     sim_coll_name(coll), total, c->rank);
  }
chosen:
  if (use_tuner && version >= 23000) {
    size_t chunk = cfg.chunk;
    /* NCCL asks for the chunk once algorithm, protocol and channels are chosen, then clamps it
     * to the buffer and aligns it to the protocol's grain: selecting again with the same pair and
     * the tuner's chunk does exactly that. */
    ncclResult_t r = sim_tuner_get_chunk(c->tuner, c->tuner_ctx, coll, total, cfg.algo, cfg.proto,
                                         cfg.nchannels, &chunk);
    if (r != ncclSuccess)
      return sim_error(r,
                       "ncclsim: the tuner plugin's getChunkSize returned %d for %s of %zu bytes "
                       "on rank %d; NCCL fails the group",
                       (int)r, sim_coll_name(coll), total, c->rank);
    if (chunk != cfg.chunk) {
      float only[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
      for (int a = 0; a < SIM_NUM_ALGOS; a++)
        for (int p = 0; p < SIM_NUM_PROTOS; p++)
          only[a][p] = a == cfg.algo && p == cfg.proto ? 0.0f : -1.0f;
      sim_model_select(&c->model, coll, total, only, tuner_nch, chunk ? chunk : 1, &cfg);
    }
  }
  if (!sim_model_supported(&c->model, coll, cfg.algo, cfg.proto))
    return sim_error(ncclInvalidUsage,
                     "ncclsim: the tuner plugin chose %s/%s for %s of %zu bytes on rank %d, which "
                     "this topology cannot run (real NCCL would fail or hang)",
                     sim_model_algo_name(cfg.algo), sim_model_proto_name(cfg.proto),
                     sim_coll_name(coll), total, c->rank);
  int tuned = use_tuner && trace_enabled() &&
              sim_model_select(&c->model, coll, total, deftable, 0, 0, &def) == 0 &&
              (def.algo != cfg.algo || def.proto != cfg.proto || def.nchannels != cfg.nchannels ||
               def.chunk != cfg.chunk);
  for (int k = 0; k < nb; k++) {
    b[k]->desc.algo = cfg.algo;
    b[k]->desc.proto = cfg.proto;
    b[k]->desc.nchannels = cfg.nchannels;
    b[k]->desc.nthreads = cfg.nthreads;
    b[k]->desc.chunk = cfg.chunk;
    b[k]->cfg = cfg;
    b[k]->tuned = tuned;
    b[k]->selected = 1;
    b[k]->bucket_ops = nb;
    b[k]->bucket_call = b[0]->desc.call;
  }
  return ncclSuccess;
}

ncclResult_t sim_select_configs(struct ncclComm *c, sim_task_t **tasks, int n) {
  int version = sim_nccl_version();
  /* A usual group fits the stack: no allocation per call (sim_task_pool.c says why that matters). */
  char used_stack[SELECT_STACK];
  sim_task_t *bucket_stack[SELECT_STACK];
  char *used = used_stack;
  sim_task_t **bucket = bucket_stack;
  if (n > SELECT_STACK) {
    used = malloc((size_t)n);
    bucket = malloc((size_t)n * sizeof *bucket);
    if (!used || !bucket) {
      free(used), free(bucket);
      return sim_error(ncclSystemError, "ncclsim: out of memory configuring a group");
    }
  }
  memset(used, 0, (size_t)n);
  ncclResult_t res = ncclSuccess;
  int nch = c->model.nchannels > 0 ? c->model.nchannels : 1;
  for (int i = 0; i < n && res == ncclSuccess; i++) {
    if (used[i]) continue;
    int nb = 0;
    size_t total = 0, first = task_nbytes(tasks[i]);
    for (int j = i; j < n; j++) {
      if (used[j]) continue;
      sim_task_t *t = tasks[j];
      size_t b = task_nbytes(t);
      int same = t->coll == tasks[i]->coll && t->op == tasks[i]->op &&
                 t->dtype == tasks[i]->dtype && b <= first * 4 && first <= b * 4;
      if (j != i && (version < 22200 || !same)) continue;
      used[j] = 1;
      bucket[nb++] = t;
      total += b;
    }
    int npipe = version >= 22200 ? (nb + nch - 1) / nch : 1;
    res = select_bucket(c, bucket, nb, total, npipe);
  }
  if (used != used_stack) {
    free(used);
    free(bucket);
  }
  return res;
}

static int selectable(const sim_task_t *t) {
  return t->kind == SIM_TASK_COLL && t->coll != SIM_COLL_SPLIT_EXCHANGE && !t->selected &&
         t->result == ncclSuccess && sim_comm_usable(t->comm) && t->comm->has_model;
}

void sim_select_group(sim_task_t *head) {
  int n = 0;
  for (sim_task_t *t = head; t; t = t->next) n++;
  sim_task_t *list_stack[SELECT_STACK];
  sim_task_t **list = n <= SELECT_STACK ? list_stack : malloc((size_t)n * sizeof *list);
  if (!list) return; /* each task is then configured alone when it starts */
  for (sim_task_t *t = head; t; t = t->next) {
    if (!selectable(t)) continue;
    int k = 0;
    for (sim_task_t *u = t; u; u = u->next)
      if (u->comm == t->comm && selectable(u)) list[k++] = u;
    ncclResult_t r = sim_select_configs(t->comm, list, k);
    if (r != ncclSuccess) /* the whole group fails on this rank, as in NCCL */
      for (int i = 0; i < k; i++) {
        list[i]->result = r;
        list[i]->selected = 1;
      }
  }
  if (list != list_stack) free(list);
}
