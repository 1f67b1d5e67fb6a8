/* ah_config.c: size bins, the names of collectives, algorithms and protocols, and the formatting
 * and comparison of configurations (tuner/ah_config.h).
 *
 * Names are NCCL's, lower-cased ("collnetdirect", "nvlstree", "ll128"), so what a user reads in
 * NCCL_DEBUG=INFO output can be typed into AUTOHA_OVERRIDE. Size bins are powers of two of bytes
 * per rank, so AllGather and ReduceScatter of the same per-rank share land in the same bin whatever
 * the communicator's size. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "ah_config.h"
#include "ah_override.h"

static const char *const algo_names[AH_NUM_ALGOS] = {"tree", "ring", "collnetdirect", "collnetchain",
                                                     "nvls", "nvlstree", "pat"};
static const char *const proto_names[AH_NUM_PROTOS] = {"ll", "ll128", "simple"};
static const char *const coll_names[AH_NUM_COLLS] = {"broadcast", "reduce", "allgather",
                                                     "reducescatter", "allreduce", "alltoall",
                                                     "gather", "scatter"};

int ah_size_bin(int coll, size_t nbytes, int nranks) {
  size_t per_rank = nbytes;
  if ((coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER) && nranks > 1)
    per_rank = nbytes / (size_t)nranks;
  int bin = 0;
  while (per_rank > 1) {
    per_rank >>= 1;
    bin++;
  }
  return bin;
}

size_t ah_size_bin_floor(int bin) {
  if (bin <= 0) return 0;
  if (bin >= (int)(8 * sizeof(size_t))) return (size_t)-1;
  return (size_t)1 << bin;
}

static const char *name_of(const char *const *names, int n, int v) {
  return v >= 0 && v < n ? names[v] : "?";
}

/* Case-insensitive lookup of s[0..len) in names; also accepts "collnet_direct" style underscores
 * being absent or present ("nvls_tree" == "nvlstree"). */
static int parse_of(const char *const *names, int n, const char *s, size_t len) {
  char buf[32];
  size_t k = 0;
  if (!s) return -1;
  for (size_t i = 0; i < len; i++) {
    if (s[i] == '_' || s[i] == '-') continue;
    if (k + 1 >= sizeof buf) return -1;
    buf[k++] = s[i];
  }
  buf[k] = 0;
  if (k == 0) return -1;
  for (int i = 0; i < n; i++)
    if (strcasecmp(buf, names[i]) == 0) return i;
  return -1;
}

const char *ah_algo_name(int algo) { return name_of(algo_names, AH_NUM_ALGOS, algo); }
const char *ah_proto_name(int proto) { return name_of(proto_names, AH_NUM_PROTOS, proto); }
const char *ah_coll_name(int coll) { return name_of(coll_names, AH_NUM_COLLS, coll); }

int ah_algo_parse(const char *s, size_t len) { return parse_of(algo_names, AH_NUM_ALGOS, s, len); }
int ah_proto_parse(const char *s, size_t len) { return parse_of(proto_names, AH_NUM_PROTOS, s, len); }
int ah_coll_parse(const char *s, size_t len) {
  int c = parse_of(coll_names, AH_NUM_FUNCTIONS, s, len);
  /* ncclBcast is ncclBroadcast in place: accept its name too. */
  if (c < 0 && len == 5 && strncasecmp(s, "bcast", 5) == 0) c = AH_FUNC_BROADCAST;
  return c;
}

int ah_coll_parse_any(const char *s, size_t len) {
  int c = ah_coll_parse(s, len);
  return c >= 0 ? c : parse_of(coll_names, AH_NUM_COLLS, s, len);
}

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
