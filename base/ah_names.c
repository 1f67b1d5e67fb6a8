/* ah_names.c: the names of algorithms, protocols and collectives and their parsers
 * (base/ah_names.h).
 *
 * Names are NCCL's, lower-cased ("collnetdirect", "nvlstree", "ll128"), so what a user reads in
 * NCCL_DEBUG=INFO output can be typed into AUTOHA_OVERRIDE. */
#include <string.h>
#include <strings.h>

#include "ah_names.h"

static const char *const algo_names[AH_NUM_ALGOS] = {
    "tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat"};
static const char *const proto_names[AH_NUM_PROTOS] = {"ll", "ll128", "simple"};
static const char *const coll_names[AH_NUM_COLLS] = {"broadcast",     "reduce",    "allgather",
                                                     "reducescatter", "allreduce", "alltoall",
                                                     "gather",        "scatter"};

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
int ah_proto_parse(const char *s, size_t len) {
  return parse_of(proto_names, AH_NUM_PROTOS, s, len);
}
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
