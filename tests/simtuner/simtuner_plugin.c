/* A test tuner plugin for sim/: built once per ABI (SIMTUNER_ABI = 1..7 exports only
 * ncclTunerPlugin_vN; 0 exports v2..v7 at once, to check that NCCL takes the newest it accepts).
 * It logs every call with its arguments (SIMTUNER_LOG) so the test can check what sim/ passed, and
 * answers by a policy (SIMTUNER_POLICY, comma-separated):
 *   ring_simple  choose Ring/Simple (v3+: cell set to 0 unless it is -1; v1/v2: the out-params)
 *   nch=N        ask for N channels        chunk=N   v6/v7: ask for an N-byte chunk
 *   mismatch     on RANK 1 choose Ring/LL instead (the inconsistent tuner)
 *   fail         return ncclInternalError from getCollInfo
 *   none_left    set every cell to -1
 *   force_bad    choose NVLS/LL, which no topology runs (v3+: by overwriting its -1 cell) */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "autoha/nccl_tuner_abi.h"

#ifndef SIMTUNER_ABI
#error "SIMTUNER_ABI must be defined"
#endif

#define EXPORT __attribute__((visibility("default")))

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...) {
  const char *path = getenv("SIMTUNER_LOG");
  if (!path) return;
  char line[600];
  const char *rank = getenv("RANK");
  int n = snprintf(line, sizeof line, "pid=%d rank=%s plugin=%d ", (int)getpid(), rank ? rank : "?",
                   SIMTUNER_ABI);
  va_list ap;
  va_start(ap, fmt);
  n += vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  if (n < (int)sizeof line - 1) line[n++] = '\n';
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!write(fd, line, (size_t)n);
  close(fd);
}

static int policy(const char *key, long *val_p) {
  const char *p = getenv("SIMTUNER_POLICY");
  if (!p) return 0;
  size_t kl = strlen(key);
  for (const char *s = p; s && *s; s = strchr(s, ',') ? strchr(s, ',') + 1 : NULL) {
    if (strncmp(s, key, kl) == 0 && (s[kl] == ',' || s[kl] == 0 || s[kl] == '=')) {
      if (val_p && s[kl] == '=') *val_p = strtol(s + kl + 1, NULL, 10);
      return 1;
    }
  }
  return 0;
}

static int my_rank(void) {
  const char *r = getenv("RANK");
  return r ? atoi(r) : -1;
}

static int ctx_token = 0x5eed;

static ncclResult_t init_common(int abi, size_t nranks, size_t nnodes, unsigned long long commid,
                                const void *logger, const void *ctx_slot, int has_const) {
  logf_("abi=%d event=init nranks=%zu nnodes=%zu commid=%llx logger=%d ctxslot=%d constants=%d",
        abi, nranks, nnodes, commid, logger != NULL, ctx_slot != NULL, has_const);
  return ncclSuccess;
}

/* v3+: log the table's shape and -1 cells, then apply the policy. */
__attribute__((unused)) static ncclResult_t coll_table(int abi, void *ctx, int coll, size_t nbytes,
                                                       int npipe, float **table, int num_algo,
                                                       int num_proto, int regbuff, int *nch) {
  float(*t)[num_proto] = AH_COST_TABLE(table, num_proto);
  char cells[AH_NUM_ALGOS * AH_NUM_PROTOS + 1];
  int k = 0;
  for (int a = 0; a < num_algo; a++)
    for (int p = 0; p < num_proto; p++) cells[k++] = t[a][p] < 0 ? '-' : '+';
  cells[k] = 0;
  logf_(
      "abi=%d event=coll coll=%d nbytes=%zu npipe=%d numalgo=%d numproto=%d regbuff=%d nch_in=%d ctx=%d cells=%s",
      abi, coll, nbytes, npipe, num_algo, num_proto, regbuff, *nch, ctx == &ctx_token, cells);
  long v = 0;
  if (policy("fail", NULL)) return ncclInternalError;
  if (policy("none_left", NULL))
    for (int a = 0; a < num_algo; a++)
      for (int p = 0; p < num_proto; p++) t[a][p] = AH_COST_IGNORE;
  if (policy("ring_simple", NULL)) {
    int proto = policy("mismatch", NULL) && my_rank() == 1 ? AH_PROTO_LL : AH_PROTO_SIMPLE;
    if (t[AH_ALGO_RING][proto] >= 0) t[AH_ALGO_RING][proto] = 0.0f;
  }
  if (policy("force_bad", NULL)) t[AH_ALGO_NVLS][AH_PROTO_LL] = 0.0f;
  if (policy("nch", &v)) *nch = (int)v;
  return ncclSuccess;
}

/* v1/v2: log the support flags, answer through the out-parameters. */
__attribute__((unused)) static ncclResult_t coll_pair(int abi, void *ctx, int coll, size_t nbytes,
                                                      int collnet, int nvls, int npipe, int *algo,
                                                      int *proto, int *nch) {
  logf_(
      "abi=%d event=coll coll=%d nbytes=%zu npipe=%d collnet=%d nvls=%d algo_in=%d proto_in=%d nch_in=%d ctx=%d",
      abi, coll, nbytes, npipe, collnet, nvls, *algo, *proto, *nch, abi == 1 || ctx == &ctx_token);
  long v = 0;
  if (policy("fail", NULL)) return ncclInternalError;
  if (policy("ring_simple", NULL)) {
    *algo = AH_ALGO_RING;
    *proto = policy("mismatch", NULL) && my_rank() == 1 ? AH_PROTO_LL : AH_PROTO_SIMPLE;
  }
  if (policy("force_bad", NULL)) {
    *algo = AH_ALGO_NVLS;
    *proto = AH_PROTO_LL;
  }
  if (policy("nch", &v)) *nch = (int)v;
  return ncclSuccess;
}

static ncclResult_t fini_common(int abi, void *ctx) {
  logf_("abi=%d event=fini ctx=%d", abi, abi == 1 || ctx == &ctx_token);
  return ncclSuccess;
}

#if SIMTUNER_ABI == 1
static ncclResult_t v1_init(size_t nr, size_t nn, ah_nccl_logger_t lf) {
  return init_common(1, nr, nn, 0, (void *)lf, (void *)1, 0);
}
static ncclResult_t v1_coll(ah_nccl_func_t c, size_t b, int cn, int nv, int np, int *a, int *p,
                            int *n) {
  return coll_pair(1, NULL, c, b, cn, nv, np, a, p, n);
}
static ncclResult_t v1_destroy(void) { return fini_common(1, NULL); }
EXPORT const ah_tuner_v1_t ncclTunerPlugin_v1 = {"simtuner-v1", v1_init, v1_coll, v1_destroy};
#endif

#if SIMTUNER_ABI == 2 || SIMTUNER_ABI == 0
static ncclResult_t v2_init(size_t nr, size_t nn, ah_nccl_logger_t lf, void **ctx) {
  *ctx = &ctx_token;
  return init_common(2, nr, nn, 0, (void *)lf, ctx, 0);
}
static ncclResult_t v2_coll(void *ctx, ah_nccl_func_t c, size_t b, int cn, int nv, int np, int *a,
                            int *p, int *n) {
  return coll_pair(2, ctx, c, b, cn, nv, np, a, p, n);
}
static ncclResult_t v2_destroy(void *ctx) { return fini_common(2, ctx); }
EXPORT const ah_tuner_v2_t ncclTunerPlugin_v2 = {"simtuner-v2", v2_init, v2_coll, v2_destroy};
#endif

#if SIMTUNER_ABI == 3 || SIMTUNER_ABI == 0
static ncclResult_t v3_init(size_t nr, size_t nn, ah_nccl_logger_t lf, void **ctx) {
  *ctx = &ctx_token;
  return init_common(3, nr, nn, 0, (void *)lf, ctx, 0);
}
static ncclResult_t v3_coll(void *ctx, ah_nccl_func_t c, size_t b, int np, float **t, int na,
                            int npr, int *n) {
  return coll_table(3, ctx, c, b, np, t, na, npr, -1, n);
}
static ncclResult_t v3_destroy(void *ctx) { return fini_common(3, ctx); }
EXPORT const ah_tuner_v3_t ncclTunerPlugin_v3 = {"simtuner-v3", v3_init, v3_coll, v3_destroy};
#endif

#if SIMTUNER_ABI == 4 || SIMTUNER_ABI == 0
static ncclResult_t v4_init(size_t nr, size_t nn, ah_nccl_logger_t lf, void **ctx) {
  *ctx = &ctx_token;
  return init_common(4, nr, nn, 0, (void *)lf, ctx, 0);
}
static ncclResult_t v4_coll(void *ctx, ah_nccl_func_t c, size_t b, int np, float **t, int na,
                            int npr, int rb, int *n) {
  return coll_table(4, ctx, c, b, np, t, na, npr, rb, n);
}
static ncclResult_t v4_destroy(void *ctx) { return fini_common(4, ctx); }
EXPORT const ah_tuner_v4_t ncclTunerPlugin_v4 = {"simtuner-v4", v4_init, v4_coll, v4_destroy};
#endif

#if SIMTUNER_ABI >= 5 || SIMTUNER_ABI == 0
static ncclResult_t init5(int abi, void **ctx, uint64_t id, size_t nr, size_t nn,
                          ah_nccl_logger_t lf, ah_nvl_domain_info_v5_t *dom,
                          ah_tuner_constants_v5_t *k) {
  *ctx = &ctx_token;
  if (k && policy("slow_ring_ll", NULL)) k->baseLatencies[AH_ALGO_RING][AH_PROTO_LL] += 1000.0;
  logf_("event=domain nvldomains=%d minranks=%d maxranks=%d ringllbase=%.2f",
        dom ? dom->nNvlDomains : -1, dom ? dom->minRanksPerNvlDomain : -1,
        dom ? dom->maxRanksPerNvlDomain : -1,
        k ? k->baseLatencies[AH_ALGO_RING][AH_PROTO_LL] : -1.0);
  return init_common(abi, nr, nn, (unsigned long long)id, (void *)lf, ctx, k != NULL);
}
#if SIMTUNER_ABI == 5 || SIMTUNER_ABI == 0
static ncclResult_t v5_fini(void *ctx) { return fini_common(5, ctx); }
static ncclResult_t v5_init(void **ctx, uint64_t id, size_t nr, size_t nn, ah_nccl_logger_t lf,
                            ah_nvl_domain_info_v5_t *dom, ah_tuner_constants_v5_t *k) {
  return init5(5, ctx, id, nr, nn, lf, dom, k);
}
static ncclResult_t v5_coll(void *ctx, ah_nccl_func_t c, size_t b, int np, float **t, int na,
                            int npr, int rb, int *n) {
  return coll_table(5, ctx, c, b, np, t, na, npr, rb, n);
}
EXPORT const ah_tuner_v5_t ncclTunerPlugin_v5 = {"simtuner-v5", v5_init, v5_coll, v5_fini};
#endif
#endif

#if SIMTUNER_ABI >= 6 || SIMTUNER_ABI == 0
static ncclResult_t chunk_common(int abi, int c, size_t b, int a, int p, int n, size_t *chunk) {
  long v = 0;
  logf_("abi=%d event=chunk coll=%d nbytes=%zu algo=%d proto=%d nch=%d chunk_in=%zu", abi, c, b, a,
        p, n, *chunk);
  if (policy("chunk", &v)) *chunk = (size_t)v;
  return ncclSuccess;
}
#endif

#if SIMTUNER_ABI == 6 || SIMTUNER_ABI == 0
static ncclResult_t v6_init(void **ctx, uint64_t id, size_t nr, size_t nn, ah_nccl_logger_t lf,
                            ah_nvl_domain_info_v5_t *dom, ah_tuner_constants_v5_t *k) {
  return init5(6, ctx, id, nr, nn, lf, dom, k);
}
static ncclResult_t v6_coll(void *ctx, ah_nccl_func_t c, size_t b, int np, float **t, int na,
                            int npr, int rb, int *n) {
  return coll_table(6, ctx, c, b, np, t, na, npr, rb, n);
}
static ncclResult_t v6_fini(void *ctx) { return fini_common(6, ctx); }
static ncclResult_t v6_chunk(void *ctx, ah_nccl_func_t c, size_t b, int a, int p, int n,
                             size_t *chunk) {
  (void)ctx;
  return chunk_common(6, c, b, a, p, n, chunk);
}
EXPORT const ah_tuner_v6_t ncclTunerPlugin_v6 = {"simtuner-v6", v6_init, v6_coll, v6_fini,
                                                 v6_chunk};
#endif

#if SIMTUNER_ABI == 7 || SIMTUNER_ABI == 0
/* v7: v5's init on the wider table's first four rows, and the fifth row (Rubin's) logged */
static ncclResult_t v7_init(void **ctx, uint64_t id, size_t nr, size_t nn, ah_nccl_logger_t lf,
                            ah_nvl_domain_info_v5_t *dom, ah_tuner_constants_v7_t *k) {
  logf_("event=compcaps llmax4=%.2f", k ? k->llMaxBws[4][0] : -1.0);
  ah_tuner_constants_v5_t k5;
  if (k) ah_tuner_constants_v7_to_v5(&k5, k);
  ncclResult_t r = init5(7, ctx, id, nr, nn, lf, dom, k ? &k5 : NULL);
  if (k) ah_tuner_constants_v5_to_v7(k, &k5);
  return r;
}
static ncclResult_t v7_coll(void *ctx, ah_nccl_func_t c, size_t b, int np, float **t, int na,
                            int npr, int rb, int *n) {
  return coll_table(7, ctx, c, b, np, t, na, npr, rb, n);
}
static ncclResult_t v7_fini(void *ctx) { return fini_common(7, ctx); }
static ncclResult_t v7_chunk(void *ctx, ah_nccl_func_t c, size_t b, int a, int p, int n,
                             size_t *chunk) {
  (void)ctx;
  return chunk_common(7, c, b, a, p, n, chunk);
}
EXPORT const ah_tuner_v7_t ncclTunerPlugin_v7 = {"simtuner-v7", v7_init, v7_coll, v7_fini,
                                                 v7_chunk};
#endif
