/* Loading and calling a tuner plugin exactly as the emulated NCCL version does: which names are
 * tried (NCCL_TUNER_PLUGIN, libnccl-tuner-X.so, STATIC_PLUGIN, `none`, the net-plugin names),
 * which ncclTunerPlugin_vN symbols are accepted (newest first, down to the oldest the version
 * takes), init once per communicator, finalize at teardown. The library is opened once per process
 * and a failed load is remembered, as NCCL does. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sim_nccl.h"
#include "sim_tuner.h"

static pthread_mutex_t tuner_lock = PTHREAD_MUTEX_INITIALIZER;
static int tuner_state; /* 0 not tried, 1 loaded, -1 none */
static sim_tuner_t tuner;
static int tuner_refs;

/* NCCL's debug subsystems (nccl.h's ncclDebugLogSubSys), by NCCL_DEBUG_SUBSYS name. */
static const struct {
  const char *name;
  unsigned long flag;
} subsys_names[] = {{"INIT", 0x1},         {"COLL", 0x2},   {"P2P", 0x4},        {"SHM", 0x8},
                    {"NET", 0x10},         {"GRAPH", 0x20}, {"TUNING", 0x40},    {"ENV", 0x80},
                    {"ALLOC", 0x100},      {"CALL", 0x200}, {"PROXY", 0x400},    {"NVLS", 0x800},
                    {"BOOTSTRAP", 0x1000}, {"REG", 0x2000}, {"PROFILE", 0x4000}, {"RAS", 0x8000},
                    {"ALL", ~0UL}};

/* NCCL_DEBUG_SUBSYS as NCCL reads it: a comma-separated list, ^ in front inverts it; unset, NCCL
 * shows INIT, BOOTSTRAP and ENV. */
static unsigned long debug_mask(void) {
  const char *s = getenv("NCCL_DEBUG_SUBSYS");
  if (!s || !*s) return 0x1 | 0x1000 | 0x80;
  int invert = *s == '^';
  if (invert) s++;
  unsigned long mask = 0;
  for (const char *p = s; *p;) {
    const char *e = strchr(p, ',');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
      if (strlen(subsys_names[i].name) == n && strncasecmp(p, subsys_names[i].name, n) == 0)
        mask |= subsys_names[i].flag;
    if (!e) break;
    p = e + 1;
  }
  return invert ? ~mask : mask;
}

/* The logger NCCL hands a tuner plugin (ncclDebugLog): with NCCL_DEBUG=WARN or INFO (TRACE shows
 * INFO here), lines at or above that level whose subsystem NCCL_DEBUG_SUBSYS selects are printed on
 * stderr in NCCL's format, "host:pid:tid [dev] NCCL INFO message"; WARN lines ignore the subsystem
 * filter, as in NCCL. Without NCCL_DEBUG, only sim's own warning of a plugin's WARN line. */
static __attribute__((format(printf, 5, 6))) void tuner_logger(ah_nccl_log_level_t level,
                                                               unsigned long flags,
                                                               const char *file, int line,
                                                               const char *fmt, ...) {
  const char *dbg = getenv("NCCL_DEBUG");
  int shown = !dbg                                                            ? -1
              : strcasecmp(dbg, "WARN") == 0                                  ? AH_NCCL_LOG_WARN
              : strcasecmp(dbg, "INFO") == 0 || strcasecmp(dbg, "TRACE") == 0 ? AH_NCCL_LOG_INFO
                                                                              : -1;
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (shown < 0) {
    if (level <= AH_NCCL_LOG_WARN && level != AH_NCCL_LOG_NONE)
      sim_log_warn("tuner: %s (%s:%d)", buf, file ? file : "?", line);
    return;
  }
  if (level == AH_NCCL_LOG_NONE || (int)level > shown) return;
  if (level == AH_NCCL_LOG_INFO && !(flags & debug_mask())) return;
  char host[64] = "?";
  if (gethostname(host, sizeof host) != 0) strcpy(host, "?");
  host[sizeof host - 1] = 0;
  char *dot = strchr(host, '.'); /* NCCL prints the host name up to its first dot */
  if (dot) *dot = 0;
  fprintf(stderr, "%s:%d:%ld [%d] NCCL %s %s\n", host, (int)getpid(), (long)syscall(SYS_gettid),
          sim_device_current(), level <= AH_NCCL_LOG_WARN ? "WARN" : "INFO", buf);
}

static void *open_lib(const char *name, int version) {
  int flags = version >= 22600 ? RTLD_NOW | RTLD_LOCAL : RTLD_LAZY | RTLD_LOCAL;
  void *h = dlopen(name, flags);
  sim_log_info("tuner: dlopen(%s) %s%s", name, h ? "ok" : "failed: ", h ? "" : dlerror());
  return h;
}

/* Whether `name` is a case-insensitive prefix of STATIC_PLUGIN (2.22+). */
static int is_static_name(const char *name) {
  size_t n = strlen(name);
  return n > 0 && n <= strlen("STATIC_PLUGIN") && strncasecmp(name, "STATIC_PLUGIN", n) == 0;
}

/* Opens the tuner library by the emulated version's rules. Returns the handle or NULL. */
static void *find_library(int version) {
  const char *env = getenv("NCCL_TUNER_PLUGIN");
  if (version < 22100) return env && *env ? open_lib(env, version) : NULL;
  if (version >= 22800 && env && strcasecmp(env, "none") == 0) return NULL;
  char buf[512];
  void *h = NULL;
  if (env && *env) {
    if (version >= 22200 && is_static_name(env)) return dlopen(NULL, RTLD_NOW);
    h = open_lib(env, version);
    int expand = 1;
    if (version >= 22700) {
      size_t n = strlen(env);
      expand = !strchr(env, '/') &&
               !(strncmp(env, "lib", 3) == 0 && n > 6 && strcmp(env + n - 3, ".so") == 0);
    }
    if (!h && expand) {
      snprintf(buf, sizeof buf, "libnccl-tuner-%s.so", env);
      h = open_lib(buf, version);
    }
  } else {
    h = open_lib("libnccl-tuner.so", version);
  }
  if (h) return h;
  /* Then the net plugin. 2.26+ reuse the net plugin NCCL already opened; sim/ opens none, so
   * that step finds nothing there. */
  if (version >= 22600) return NULL;
  const char *net = getenv("NCCL_NET_PLUGIN");
  if (net && *net) {
    h = open_lib(net, version);
    if (!h) {
      snprintf(buf, sizeof buf, "libnccl-net-%s.so", net);
      h = open_lib(buf, version);
    }
    return h;
  }
  return open_lib("libnccl-net.so", version);
}

static int newest_abi(int version) {
  if (version >= 23206) return 7;
  if (version >= 23000) return 6;
  if (version >= 22800) return 5;
  if (version >= 22400) return 4;
  if (version >= 22200) return 3;
  if (version >= 22100) return 2;
  return 1;
}

static int oldest_abi(int version) { return version >= 22100 ? 2 : 1; }

static void load_once(void) {
  int version = sim_nccl_version();
  tuner_state = -1;
  if (version < 21900) return;
  void *h = find_library(version);
  if (!h) return;
  for (int v = newest_abi(version); v >= oldest_abi(version); v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclTunerPlugin_v%d", v);
    void *p = dlsym(h, sym);
    if (!p) continue;
    tuner.handle = h;
    tuner.abi = v;
    tuner.plugin = p;
    tuner.name = *(const char *const *)p; /* every version's struct starts with its name */
    tuner.table_fn = v == 4   ? ((const ah_tuner_v4_t *)p)->getCollInfo
                     : v == 5 ? ((const ah_tuner_v5_t *)p)->getCollInfo
                     : v == 6 ? ((const ah_tuner_v6_t *)p)->getCollInfo
                     : v == 7 ? ((const ah_tuner_v7_t *)p)->getCollInfo
                              : NULL;
    tuner_state = 1;
    sim_log_info("tuner: using %s (%s) with NCCL %d", sym, tuner.name ? tuner.name : "?", version);
    return;
  }
  sim_log_warn("tuner: the tuner library exports no ncclTunerPlugin_vN that NCCL %d accepts",
               version);
  if (h) dlclose(h);
}

const sim_tuner_t *sim_tuner_acquire(void) {
  pthread_mutex_lock(&tuner_lock);
  if (tuner_state == 0) load_once();
  const sim_tuner_t *t = NULL;
  if (tuner_state == 1) {
    tuner_refs++;
    t = &tuner;
  }
  pthread_mutex_unlock(&tuner_lock);
  return t;
}

void sim_tuner_release(void) {
  pthread_mutex_lock(&tuner_lock);
  if (tuner_refs > 0) tuner_refs--;
  pthread_mutex_unlock(&tuner_lock);
}

ncclResult_t sim_tuner_init(const sim_tuner_t *t, struct ncclComm *comm, void **ctx_p,
                            ah_tuner_constants_v5_t *constants) {
  *ctx_p = NULL;
  switch (t->abi) {
    case 1:
      return ((const ah_tuner_v1_t *)t->plugin)
          ->init((size_t)comm->nranks, (size_t)comm->nnodes, tuner_logger);
    case 2:
      return ((const ah_tuner_v2_t *)t->plugin)
          ->init((size_t)comm->nranks, (size_t)comm->nnodes, tuner_logger, ctx_p);
    case 3:
      return ((const ah_tuner_v3_t *)t->plugin)
          ->init((size_t)comm->nranks, (size_t)comm->nnodes, tuner_logger, ctx_p);
    case 4:
      return ((const ah_tuner_v4_t *)t->plugin)
          ->init((size_t)comm->nranks, (size_t)comm->nnodes, tuner_logger, ctx_p);
    case 5:
    case 6: {
      ah_nvl_domain_info_v5_t dom = {comm->nnodes, comm->max_local_ranks, comm->max_local_ranks};
      return ((const ah_tuner_v5_t *)t->plugin)
          ->init(ctx_p, comm->hash, (size_t)comm->nranks, (size_t)comm->nnodes, tuner_logger, &dom,
                 constants);
    }
    default: { /* v7: the wider table, its rows back into the model's after */
      ah_nvl_domain_info_v5_t dom = {comm->nnodes, comm->max_local_ranks, comm->max_local_ranks};
      ah_tuner_constants_v7_t k7;
      ah_tuner_constants_v5_to_v7(&k7, constants);
      /* the fifth compute capability (Rubin): sim/ models none, so the row only has to be there;
       * it holds Blackwell's values, which a plugin may read or edit to no effect */
      double(*rows[])[AH_TUNER_NUM_SCALE] = {k7.llMaxBws, k7.perChMaxRingLL128Bws,
                                             k7.perChMaxTreeLL128Bws, k7.perChMaxTreeBws,
                                             k7.perChMaxNVLSTreeBws};
      for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
        memcpy(rows[i][AH_TUNER_NUM_COMPCAP], rows[i][AH_TUNER_NUM_COMPCAP - 1], sizeof rows[i][0]);
      ncclResult_t r = ((const ah_tuner_v7_t *)t->plugin)
                           ->init(ctx_p, comm->hash, (size_t)comm->nranks, (size_t)comm->nnodes,
                                  tuner_logger, &dom, &k7);
      ah_tuner_constants_v7_to_v5(constants, &k7);
      return r;
    }
  }
}

void sim_tuner_finalize(const sim_tuner_t *t, void *ctx) {
  switch (t->abi) {
    case 1: ((const ah_tuner_v1_t *)t->plugin)->destroy(); break;
    case 2: ((const ah_tuner_v2_t *)t->plugin)->destroy(ctx); break;
    case 3: ((const ah_tuner_v3_t *)t->plugin)->destroy(ctx); break;
    case 4: ((const ah_tuner_v4_t *)t->plugin)->destroy(ctx); break;
    default: ((const ah_tuner_v5_t *)t->plugin)->finalize(ctx); break;
  }
}

/* Calls getCollInfo with NCCL's arguments for the emulated ABI. For v3+, `table` is the contiguous
 * [algo][proto] cost table (numAlgo 6 before 2.23). For v1/v2 the plugin's
 * algorithm/protocol come back in algo_p and proto_p (-1 when it left them). */
ncclResult_t sim_tuner_get_coll_info(const sim_tuner_t *t, void *ctx, int coll, size_t nbytes,
                                     int num_pipe_ops, float table[AH_NUM_ALGOS][AH_NUM_PROTOS],
                                     int num_algo, int coll_net, int nvls, int *algo_p,
                                     int *proto_p, int *nchannels_p) {
  *algo_p = AH_ALGO_UNDEF;
  *proto_p = AH_PROTO_UNDEF;
  *nchannels_p = 0;
  float **ft = (float **)(void *)table;
  switch (t->abi) {
    case 1:
      return ((const ah_tuner_v1_t *)t->plugin)
          ->getCollInfo(coll, nbytes, coll_net, nvls, num_pipe_ops, algo_p, proto_p, nchannels_p);
    case 2:
      return ((const ah_tuner_v2_t *)t->plugin)
          ->getCollInfo(ctx, coll, nbytes, coll_net, nvls, num_pipe_ops, algo_p, proto_p,
                        nchannels_p);
    case 3:
      return ((const ah_tuner_v3_t *)t->plugin)
          ->getCollInfo(ctx, coll, nbytes, num_pipe_ops, ft, num_algo, AH_NUM_PROTOS, nchannels_p);
    case 4:
      return ((const ah_tuner_v4_t *)t->plugin)
          ->getCollInfo(ctx, coll, nbytes, num_pipe_ops, ft, num_algo, AH_NUM_PROTOS, 0,
                        nchannels_p);
    default:
      return ((const ah_tuner_v5_t *)t->plugin)
          ->getCollInfo(ctx, coll, nbytes, num_pipe_ops, ft, num_algo, AH_NUM_PROTOS, 0,
                        nchannels_p);
  }
}

ncclResult_t sim_tuner_get_chunk(const sim_tuner_t *t, void *ctx, int coll, size_t nbytes, int algo,
                                 int proto, int nchannels, size_t *chunk_p) {
  if (t->abi < 6) return ncclSuccess;
  const ah_tuner_v6_t *p = t->plugin;
  if (!p->getChunkSize) return ncclSuccess;
  return p->getChunkSize(ctx, coll, nbytes, algo, proto, nchannels, chunk_p);
}
