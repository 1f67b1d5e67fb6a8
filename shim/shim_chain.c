/* A tuner plugin the user named in NCCL_TUNER_PLUGIN, run underneath autoha: the shim loads it
 * itself (by NCCL's name rules: NAME, then libnccl-tuner-NAME.so), points NCCL_TUNER_PLUGIN at
 * autoha, and calls the user's plugin first on every init, getCollInfo, getChunkSize and finalize.
 * Its answer is then what autoha sees as "NCCL's choice": the default that observe records, that a
 * key without override keeps, and that tuning starts from.
 *
 * The user's plugin may speak another ABI version than the one NCCL loaded autoha with; calls are
 * adapted the way NCCL adapts them (a v2 plugin under a cost table gets support flags derived from
 * the table, and its pair is written as a 0.0 cell when that cell is allowed). Its errors are
 * logged, never passed to NCCL: a collective must not fail because of the chain. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "shim_chain.h"
#include "shim_internal.h"

ah_chain_t ah_chain;

/* Whether `name` is a case-insensitive prefix of STATIC_PLUGIN (NCCL 2.22+ then searches the
 * process's global scope, where the preloaded autoha is found first). */
static int is_static_name(const char *name) {
  size_t n = strlen(name);
  return n > 0 && n <= strlen("STATIC_PLUGIN") && strncasecmp(name, "STATIC_PLUGIN", n) == 0;
}

int ah_shim_chain_load(const char *name, const char *self_path) {
  if (!name || !*name || strcasecmp(name, "none") == 0 || is_static_name(name)) return 0;
  void *self = dlopen(self_path, RTLD_NOW | RTLD_NOLOAD);
  void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!h && !strchr(name, '/')) {
    char buf[512];
    snprintf(buf, sizeof buf, "libnccl-tuner-%s.so", name);
    h = dlopen(buf, RTLD_NOW | RTLD_LOCAL);
  }
  if (self) dlclose(self);
  if (!h) {
    ah_log(AH_LOG_WARN, "NCCL_TUNER_PLUGIN=%s cannot be opened (%s): autoha is NCCL's only tuner",
           name, dlerror());
    return 0;
  }
  if (self && h == self) { /* the user named autoha itself */
    dlclose(h);
    return 0;
  }
  for (int v = 7; v >= 1; v--) {
    char sym[32];
    snprintf(sym, sizeof sym, "ncclTunerPlugin_v%d", v);
    const void *p = dlsym(h, sym);
    if (!p) continue;
    ah_chain.abi = v;
    ah_chain.plugin = p;
    ah_chain.handle = h;
    snprintf(ah_chain.name, sizeof ah_chain.name, "%s", name);
    ah_log(AH_LOG_INFO,
           "NCCL_TUNER_PLUGIN=%s (%s) runs underneath autoha: its choices are the "
           "defaults autoha starts from",
           name, sym);
    return 1;
  }
  ah_log(AH_LOG_WARN,
         "NCCL_TUNER_PLUGIN=%s exports no ncclTunerPlugin_vN: autoha is NCCL's only tuner", name);
  dlclose(h);
  return 0;
}

int ah_shim_chain_is_self(const char *name, const char *self_path) {
  if (is_static_name(name)) return 1;
  void *self = dlopen(self_path, RTLD_NOW | RTLD_NOLOAD);
  void *h = self ? dlopen(name, RTLD_NOW | RTLD_NOLOAD) : NULL;
  int same = self && h == self;
  if (h) dlclose(h);
  if (self) dlclose(self);
  return same;
}

static void chain_error(const char *what, ncclResult_t r) {
  AH_LOG_CAPPED(3, AH_LOG_WARN, "the chained tuner %s: %s returned %d; ignored", ah_chain.name,
                what, (int)r);
}

/* init of a v5+ chained plugin, with NCCL's constants in the layout the plugin speaks: a v7
 * plugin under a v5/v6 NCCL gets the four rows NCCL has and a fifth of zeros, a v5/v6 plugin under
 * NCCL 2.32.6+ the first four of NCCL's five (NCCL's own v5/v6 adapters do the same); the rows it
 * saw are copied back. No table (an older NCCL): one the plugin may edit to no effect. */
static ncclResult_t chain_init_v5(void **ctx, uint64_t id, size_t nranks, size_t nnodes,
                                  ah_nccl_logger_t log, ah_nvl_domain_info_v5_t *dom,
                                  void *constants, int kabi) {
  ah_tuner_constants_v5_t k5;
  ah_tuner_constants_v7_t k7;
  memset(&k5, 0, sizeof k5);
  memset(&k7, 0, sizeof k7);
  ncclResult_t r;
  if (ah_chain.abi >= 7) {
    ah_tuner_constants_v7_t *k = kabi == 7 && constants ? constants : &k7;
    if (kabi != 7 && constants) ah_tuner_constants_v5_to_v7(&k7, constants);
    r = ((const ah_tuner_v7_t *)ah_chain.plugin)->init(ctx, id, nranks, nnodes, log, dom, k);
    if (kabi != 7 && constants) ah_tuner_constants_v7_to_v5(constants, &k7);
  } else {
    ah_tuner_constants_v5_t *k = kabi != 7 && constants ? constants : &k5;
    if (kabi == 7 && constants) ah_tuner_constants_v7_to_v5(&k5, constants);
    r = ((const ah_tuner_v5_t *)ah_chain.plugin)->init(ctx, id, nranks, nnodes, log, dom, k);
    if (kabi == 7 && constants) ah_tuner_constants_v5_to_v7(constants, &k5);
  }
  return r;
}

void *ah_shim_chain_init(uint64_t id, size_t nranks, size_t nnodes, ah_nccl_logger_t log,
                         ah_nvl_domain_info_v5_t *dom, void *constants, int kabi) {
  static ah_nvl_domain_info_v5_t no_dom;
  void *ctx = NULL;
  ncclResult_t r = ncclSuccess;
  switch (ah_chain.abi) {
    case 0: return NULL;
    case 1:
      r = ((const ah_tuner_v1_t *)ah_chain.plugin)->init(nranks, nnodes, log);
      ctx = (void *)1;
      break;
    case 2: r = ((const ah_tuner_v2_t *)ah_chain.plugin)->init(nranks, nnodes, log, &ctx); break;
    case 3: r = ((const ah_tuner_v3_t *)ah_chain.plugin)->init(nranks, nnodes, log, &ctx); break;
    case 4: r = ((const ah_tuner_v4_t *)ah_chain.plugin)->init(nranks, nnodes, log, &ctx); break;
    default:
      r = chain_init_v5(&ctx, id, nranks, nnodes, log, dom ? dom : &no_dom, constants, kabi);
      break;
  }
  if (r != ncclSuccess) {
    chain_error("init", r);
    return NULL;
  }
  return ctx ? ctx
             : (void *)1; /* non-NULL marks "initialised" even for plugins without a context */
}

void ah_shim_chain_finalize(void *ctx) {
  if (!ctx || !ah_chain.abi) return;
  void *c = ctx == (void *)1 ? NULL : ctx;
  ncclResult_t r;
  switch (ah_chain.abi) {
    case 1: r = ((const ah_tuner_v1_t *)ah_chain.plugin)->destroy(); break;
    case 2: r = ((const ah_tuner_v2_t *)ah_chain.plugin)->destroy(c); break;
    case 3: r = ((const ah_tuner_v3_t *)ah_chain.plugin)->destroy(c); break;
    case 4: r = ((const ah_tuner_v4_t *)ah_chain.plugin)->destroy(c); break;
    default: r = ((const ah_tuner_v5_t *)ah_chain.plugin)->finalize(c); break;
  }
  if (r != ncclSuccess) chain_error("finalize", r);
}

/* The v1/v2 call with flags; returns the pair it chose (or -1s). */
static ncclResult_t flags_call(void *c, int coll, size_t nbytes, int collnet, int nvls, int npipe,
                               int *algo, int *proto, int *nch) {
  if (ah_chain.abi == 1)
    return ((const ah_tuner_v1_t *)ah_chain.plugin)
        ->getCollInfo(coll, nbytes, collnet, nvls, npipe, algo, proto, nch);
  return ((const ah_tuner_v2_t *)ah_chain.plugin)
      ->getCollInfo(c, coll, nbytes, collnet, nvls, npipe, algo, proto, nch);
}

void ah_shim_chain_table(void *ctx, int coll, size_t nbytes, int npipe, float **table, int nalgo,
                         int nproto, int regbuff, int *nch) {
  if (!ctx || !ah_chain.abi) return;
  void *c = ctx == (void *)1 ? NULL : ctx;
  ncclResult_t r;
  switch (ah_chain.abi) {
    case 1:
    case 2: { /* NCCL's v2 adapter: flags from the table, the answer written as a 0.0 cell */
      float(*t)[nproto] = AH_COST_TABLE(table, nproto);
      int nvls = (nalgo > AH_ALGO_NVLS && t[AH_ALGO_NVLS][AH_PROTO_SIMPLE] >= 0) ||
                 (nalgo > AH_ALGO_NVLS_TREE && t[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE] >= 0);
      int collnet = nalgo > AH_ALGO_COLLNET_CHAIN && t[AH_ALGO_COLLNET_CHAIN][AH_PROTO_SIMPLE] >= 0;
      int a = -1, p = -1;
      r = flags_call(c, coll, nbytes, collnet, nvls, npipe, &a, &p, nch);
      if (r == ncclSuccess && a >= 0 && a < nalgo && p >= 0 && p < nproto && t[a][p] >= 0)
        t[a][p] = 0.0f;
      break;
    }
    case 3:
      r = ((const ah_tuner_v3_t *)ah_chain.plugin)
              ->getCollInfo(c, coll, nbytes, npipe, table, nalgo, nproto, nch);
      break;
    default:
      r = ((const ah_tuner_v4_t *)ah_chain.plugin)
              ->getCollInfo(c, coll, nbytes, npipe, table, nalgo, nproto, regbuff, nch);
      break;
  }
  if (r != ncclSuccess) chain_error("getCollInfo", r);
}

void ah_shim_chain_flags(void *ctx, int coll, size_t nbytes, int collnet, int nvls, int npipe,
                         int *algo, int *proto, int *nch) {
  if (!ctx || !ah_chain.abi) return;
  if (ah_chain.abi > 2) { /* a cost-table plugin under NCCL 2.19-2.21: nothing to hand it */
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "the chained tuner %s needs a cost table (v%d), which NCCL %d does "
                  "not provide: it is not consulted",
                  ah_chain.name, ah_chain.abi, ah_shim.nccl_version);
    return;
  }
  ncclResult_t r = flags_call(ctx == (void *)1 ? NULL : ctx, coll, nbytes, collnet, nvls, npipe,
                              algo, proto, nch);
  if (r != ncclSuccess) chain_error("getCollInfo", r);
}

void ah_shim_chain_chunk(void *ctx, int coll, size_t nbytes, int algo, int proto, int nch,
                         size_t *chunk) {
  if (!ctx || ah_chain.abi < 6) return;
  const ah_tuner_v6_t *p = ah_chain.plugin; /* v7 has v6's members, in v6's order */
  if (!p->getChunkSize) return;
  ncclResult_t r =
      p->getChunkSize(ctx == (void *)1 ? NULL : ctx, coll, nbytes, algo, proto, nch, chunk);
  if (r != ncclSuccess) chain_error("getChunkSize", r);
}
