/* ah_config.c: the formatting and comparison of configurations, the chunk windows of a space and
 * what NCCL can run (tuner/ah_config.h).
 *
 * The names a configuration is written with and the size bins of keys are base/'s (ah_names.c,
 * ah_size.c), shared with the coordinator and the command line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "ah_config.h"

int ah_config_equal(const ah_config_t *a, const ah_config_t *b) {
  if (a->algo != b->algo || a->proto != b->proto || a->ndims != b->ndims) return 0;
  int n = a->ndims < 0 ? 0 : a->ndims > AH_MAX_DIMS ? AH_MAX_DIMS : a->ndims;
  for (int i = 0; i < n; i++)
    if (a->res[i] != b->res[i]) return 0;
  return 1;
}

char *ah_config_format(const ah_config_t *c, char *buf, size_t len) {
  if (!buf || len == 0) return buf;
  size_t off = 0;
  int n = snprintf(buf, len, "%s/%s", c->algo < 0 ? "auto" : ah_algo_name(c->algo),
                   c->proto < 0 ? "auto" : ah_proto_name(c->proto));
  off = n < 0 ? 0 : (size_t)n;
  int nd = c->ndims < 0 ? 0 : c->ndims > AH_MAX_DIMS ? AH_MAX_DIMS : c->ndims;
  for (int i = 0; i < nd && off < len; i++) {
    if (c->res[i] == 0) continue;
    if (i == AH_DIM_NCHANNELS) {
      n = snprintf(buf + off, len - off, " nch=%lld", (long long)c->res[i]);
    } else if (i == AH_DIM_CHUNK) {
      char sz[32];
      n = snprintf(buf + off, len - off, " chunk=%s",
                   c->res[i] > 0 ? ah_size_format((uint64_t)c->res[i], sz, sizeof sz) : "?");
    } else {
      n = snprintf(buf + off, len - off, " d%d=%lld", i, (long long)c->res[i]);
    }
    off += n < 0 ? 0 : (size_t)n;
  }
  return buf;
}

/* ---- what NCCL can run ---- */

void ah_space_chunk_build(ah_space_t *sp, size_t nbytes, int coll, int nranks, int nnodes) {
  ah_dim_t *d = &sp->dims[AH_DIM_CHUNK];
  d->nvalues = 0;
  for (int64_t v = 1 << 10; v <= 4 << 20; v *= 2) d->values[d->nvalues++] = v;
  int top = 0; /* first value at least the message: every larger one runs as it */
  while (top < d->nvalues - 1 && (uint64_t)d->values[top] < (uint64_t)nbytes) top++;
  for (int s = 0; s < sp->nsub && s < AH_MAX_SUBSPACES; s++) {
    int64_t lo = 1 << 10, hi = 2 << 20; /* Simple: 4 MiB runs as 2 MiB */
    double k = 19.0;
    if (sp->sub[s].proto == AH_PROTO_LL) {
      hi = 32 << 10;
      k = 9.5;
    } else if (sp->sub[s].proto == AH_PROTO_LL128) {
      lo = 2 << 10;
      hi = 1 << 20; /* 576000 bytes: above 512 KiB, below 1 MiB */
      k = 26.9;
    }
    int i0 = 0, i1 = d->nvalues - 1;
    while (i0 < i1 && d->values[i0] < lo) i0++;
    while (i1 > i0 && d->values[i1] > hi) i1--;
    if (i1 > top) i1 = top > i0 ? top : i0;
    /* The start: a pipeline's best chunk grows as the square root of the bytes per stage
     * (per-chunk handshakes against the fill of its stages): k x sqrt(nbytes x 8 / depth), where
     * depth is the pipeline's stages — a ring's ranks, twice a tree's nodes, NVLS's two (into the
     * switch and out) — and a ring that forwards the whole message (broadcast, reduce) moves
     * nranks times a reducing ring's share per step, which doubles its chunk here. */
    int a = sp->sub[s].algo;
    double depth = a == AH_ALGO_RING || a == AH_ALGO_PAT         ? (nranks > 1 ? nranks : 2)
                   : a == AH_ALGO_TREE || a == AH_ALGO_NVLS_TREE ? 2.0 * (nnodes > 1 ? nnodes : 1)
                                                                 : 2.0;
    double per = (double)nbytes * 8.0 / depth;
    if (a == AH_ALGO_RING && (coll == AH_FUNC_BROADCAST || coll == AH_FUNC_REDUCE)) per *= 4.0;
    double want = k * sqrt(per), bestd = INFINITY;
    int at = i0;
    for (int i = i0; i <= i1; i++) {
      double dd = fabs(log((double)d->values[i] / want));
      if (dd < bestd) {
        bestd = dd;
        at = i;
      }
    }
    sp->win[s][AH_DIM_CHUNK].lo = (int8_t)i0;
    sp->win[s][AH_DIM_CHUNK].n = (int8_t)(i1 - i0 + 1);
    sp->win[s][AH_DIM_CHUNK].at = (int8_t)at;
  }
}

int ah_config_allowed_space(const ah_config_t *cfg, const ah_space_t *space) {
  if (cfg->algo < 0 && cfg->proto < 0) return 1;
  for (int i = 0; i < space->nsub && i < AH_MAX_SUBSPACES; i++) {
    if (cfg->algo >= 0 && space->sub[i].algo != cfg->algo) continue;
    if (cfg->proto >= 0 && space->sub[i].proto != cfg->proto) continue;
    return 1;
  }
  return 0;
}

int ah_config_allowed_table(const ah_config_t *cfg, const float *table, int nalgo, int nproto) {
  if (cfg->algo < 0 && cfg->proto < 0) return 1;
  if (!table || cfg->algo >= nalgo || cfg->proto >= nproto) return 0;
  for (int a = 0; a < nalgo; a++) {
    if (cfg->algo >= 0 && a != cfg->algo) continue;
    for (int pr = 0; pr < nproto; pr++) {
      if (cfg->proto >= 0 && pr != cfg->proto) continue;
      if (table[a * nproto + pr] != AH_COST_IGNORE) return 1;
    }
  }
  return 0;
}

void ah_config_keep(ah_config_t *cfg) {
  memset(cfg, 0, sizeof *cfg);
  cfg->algo = -1;
  cfg->proto = -1;
}

int ah_config_is_keep(const ah_config_t *cfg) {
  if (cfg->algo >= 0 || cfg->proto >= 0) return 0;
  for (int i = 0; i < cfg->ndims && i < AH_MAX_DIMS; i++)
    if (cfg->res[i] != 0) return 0;
  return 1;
}

int ah_config_allowed_call(const ah_config_t *cfg, const ah_call_t *call) {
  if (cfg->algo < 0 && cfg->proto < 0) return 1;
  if (call->table)
    return ah_config_allowed_table(cfg, call->table, call->num_algo, call->num_proto);
  /* v1/v2: no table; NCCL 2.19-2.21 do no checks of their own, so the flags are checked here. */
  int a = cfg->algo, p = cfg->proto;
  if (a >= AH_NUM_ALGOS || p >= AH_NUM_PROTOS) return 0;
  if ((a == AH_ALGO_COLLNET_DIRECT || a == AH_ALGO_COLLNET_CHAIN) && !call->collnet) return 0;
  if ((a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE) &&
      (!call->nvls || (p >= 0 && p != AH_PROTO_SIMPLE)))
    return 0;
  if (a == AH_ALGO_TREE && call->coll != AH_FUNC_ALLREDUCE) return 0;
  if (a == AH_ALGO_PAT) return 0; /* PAT arrived with the cost table (2.23) */
  return 1;
}

void ah_config_table_argmin(const ah_call_t *call, ah_config_t *cfg) {
  ah_config_keep(cfg);
  if (!call->table) return;
  float best = -1;
  for (int a = 0; a < call->num_algo; a++)
    for (int p = 0; p < call->num_proto; p++) {
      float v = call->table[a * call->num_proto + p];
      if (v >= 0 && (best < 0 || v < best)) {
        best = v;
        cfg->algo = (int8_t)a;
        cfg->proto = (int8_t)p;
      }
    }
}
