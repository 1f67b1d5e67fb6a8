/* NCCL's own cost model and default selection (NCCL's src/graph/tuning.cc; docs/sim.md): the latency
 * and bandwidth tables NCCL fills at init, the cost table it hands a tuner at group launch, and
 * the channels, threads and chunk it derives for the winning (algorithm, protocol). The key
 * choice: the tables live in the model as NCCL's ncclTunerConstants, so a v5+ tuner's edits at
 * init change this model exactly as they change NCCL's, and every number depends on the emulated
 * version only where NCCL's source changed between 2.18 and 2.30. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_model_internal.h"

enum { HW_NVLINK = 0, HW_PCI = 1, HW_NET = 2 };
enum { CC_VOLTA = 0, CC_AMPERE = 1, CC_HOPPER = 2, CC_BLACKWELL = 3 };

const char *sim_model_algo_name(int a) {
  static const char *n[] = {"Tree",     "Ring", "CollNetDirect", "CollNetChain", "NVLS",
                            "NVLSTree", "PAT"};
  return a >= 0 && a < SIM_NUM_ALGOS ? n[a] : "?";
}

const char *sim_model_proto_name(int p) {
  static const char *n[] = {"LL", "LL128", "Simple"};
  return p >= 0 && p < SIM_NUM_PROTOS ? n[p] : "?";
}

const char *sim_model_coll_name(int c) {
  static const char *n[] = {"Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"};
  return c >= 0 && c < AH_NUM_FUNCTIONS ? n[c] : "?";
}

int sim_model_compcap(const sim_model_t *m) {
  return m->topo.gpu == SIM_GPU_A100 ? CC_AMPERE : CC_HOPPER;
}

int sim_model_scale(const sim_model_t *m) {
  return m->topo.nnodes <= 1 ? 0 : m->topo.nnodes == 2 ? 1 : 2;
}

int sim_log2_ceil(int x) {
  int l = 0;
  while ((1 << l) < x) l++;
  return l;
}

/* ---- the constants (NCCL's tables), per emulated version ------------------------------------- */

void sim_model_default_constants(ah_tuner_constants_v5_t *k, int v) {
  static const double base[SIM_NUM_ALGOS][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0, 0, 0},
                                                {0, 0, 0},        {0, 0, 0},        {0, 0, 0},
                                                {8.0, 8.0, 8.0}};
  static const double hw[3][SIM_NUM_ALGOS][3] = {{{.6, 1.25, 4.0},
                                                  {.6, 1.9, 3.4},
                                                  {0, 0, 3.7},
                                                  {0, 0, 2.8},
                                                  {0, 0, 25},
                                                  {0, 0, 25},
                                                  {0, 0, 4.0}},
                                                 {{1.0, 1.9, 4.0},
                                                  {1.0, 2.5, 5.7},
                                                  {0, 0, 3.7},
                                                  {0, 0, 2.8},
                                                  {0, 0, 0},
                                                  {0, 0, 0},
                                                  {0, 0, 4.0}},
                                                 {{5.0, 8.5, 14},
                                                  {2.7, 4.0, 14.0},
                                                  {0, 0, 31},
                                                  {0, 0, 30},
                                                  {0, 0, 18},
                                                  {0, 0, 20.9},
                                                  {0, 0, 14}}};
  static const double llmax[4][3] = {
      {39.0, 39.0, 20.4}, {87.7, 39.0, 20.4}, {141.0, 39.0, 20.4}, {282.0, 39.0, 20.4}};
  static const double ringll128[4][3] = {
      {20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40, 40, 40}};
  static const double treell128[4][3] = {
      {20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
  static const double tree[4][3] = {
      {26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
  static const double nvlstree[4][3] = {{0, 0, 0}, {0, 0, 0}, {0, 57.7, 45.5}, {0, 96.0, 80.0}};
  memset(k, 0, sizeof *k);
  memcpy(k->baseLatencies, base, sizeof base);
  memcpy(k->hwLatencies, hw, sizeof hw);
  memcpy(k->llMaxBws, llmax, sizeof llmax);
  memcpy(k->perChMaxRingLL128Bws, ringll128, sizeof ringll128);
  memcpy(k->perChMaxTreeLL128Bws, treell128, sizeof treell128);
  memcpy(k->perChMaxTreeBws, tree, sizeof tree);
  memcpy(k->perChMaxNVLSTreeBws, nvlstree, sizeof nvlstree);
  if (v < 22300) { /* the 2.18 .. 2.22 tables */
    for (int h = 0; h < 3; h++)
      k->hwLatencies[h][AH_ALGO_TREE][AH_PROTO_SIMPLE] = v < 21900 ? (h == HW_NVLINK ? 4
                                                                      : h == HW_PCI  ? 6
                                                                                     : 14)
                                                                   : 28;
    k->hwLatencies[HW_NVLINK][AH_ALGO_COLLNET_DIRECT][2] = v < 21900 ? 8.0 : 3.7;
    k->hwLatencies[HW_NET][AH_ALGO_COLLNET_DIRECT][2] = v < 21900 ? 10.7 : 31;
    k->hwLatencies[HW_NET][AH_ALGO_COLLNET_CHAIN][2] = v < 21900 ? 14 : 30;
  }
  if (v < 21900) {
    k->baseLatencies[AH_ALGO_TREE][AH_PROTO_SIMPLE] = 0;
    k->baseLatencies[AH_ALGO_COLLNET_DIRECT][0] = k->baseLatencies[AH_ALGO_COLLNET_CHAIN][0] = 6.8;
    k->baseLatencies[AH_ALGO_COLLNET_DIRECT][1] = k->baseLatencies[AH_ALGO_COLLNET_CHAIN][1] = 14.0;
    k->baseLatencies[AH_ALGO_NVLS][2] = 23;
    k->hwLatencies[HW_NVLINK][AH_ALGO_NVLS][2] = 0;
    k->hwLatencies[HW_NET][AH_ALGO_NVLS_TREE][2] = 19;
  } else if (v < 22100) {
    k->hwLatencies[HW_NVLINK][AH_ALGO_NVLS][2] = 23;
  }
  if (v < 22100) k->llMaxBws[CC_HOPPER][0] = 87.7;
  if (v >= 22800 && v < 23000) { /* 2.28's Blackwell row */
    k->perChMaxRingLL128Bws[CC_BLACKWELL][0] = 73.4;
    k->perChMaxRingLL128Bws[CC_BLACKWELL][1] = 34.6;
    k->perChMaxRingLL128Bws[CC_BLACKWELL][2] = 73.4;
    k->perChMaxNVLSTreeBws[CC_BLACKWELL][2] = 43.8;
  }
}

void sim_model_constants_get(const sim_model_t *m, ah_tuner_constants_v5_t *c_p) {
  *c_p = m->consts;
}

void sim_model_constants_set(sim_model_t *m, const ah_tuner_constants_v5_t *c) { m->consts = *c; }

/* ---- environment ----------------------------------------------------------------------------- */

static void model_error(sim_model_t *m, const char *var, const char *val, const char *expected,
                        const char *kept) {
  size_t used = strlen(m->error); /* several problems are reported one after the other */
  if (used + 8 >= sizeof m->error) return;
  snprintf(m->error + used, sizeof m->error - used,
           "%sinvalid value for %s: '%s' (expected %s); %s", used ? "; " : "", var, val, expected,
           kept);
}

static int env_int(sim_model_t *m, const char *name, int lo, int hi, int def) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  long v = strtol(s, &end, 10);
  if (*end || v < lo || v > hi) {
    char exp[64];
    snprintf(exp, sizeof exp, "an integer in [%d, %d]", lo, hi);
    model_error(m, name, s, exp, "keeping NCCL's default");
    return def;
  }
  return (int)v;
}

static int name_index(const char *tok, int algo) {
  static const char *an[] = {"tree",     "ring", "collnetdirect", "collnetchain", "nvls",
                             "nvlstree", "pat"};
  static const char *pn[] = {"ll", "ll128", "simple"};
  int n = algo ? SIM_NUM_ALGOS : SIM_NUM_PROTOS;
  for (int i = 0; i < n; i++)
    if (strcasecmp(tok, algo ? an[i] : pn[i]) == 0) return i;
  return -1;
}

static int func_index(const char *tok) {
  for (int f = 0; f < AH_NUM_FUNCTIONS; f++)
    if (strcasecmp(tok, sim_model_coll_name(f)) == 0) return f;
  return -1;
}

/* Parses one list ("ring,tree" or "^nvls") into mask[]. Returns 0 or -1. */
static int parse_list(char *list, int algo, unsigned char *mask) {
  int n = algo ? SIM_NUM_ALGOS : SIM_NUM_PROTOS, neg = 0;
  while (*list == ' ') list++;
  if (*list == '^') {
    neg = 1;
    list++;
  }
  unsigned char sel[SIM_NUM_ALGOS] = {0};
  char *save = NULL;
  int any = 0;
  for (char *tok = strtok_r(list, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
    int i = name_index(tok, algo);
    if (i < 0) return -1;
    sel[i] = 1;
    any = 1;
  }
  if (!any && !neg) return -1;
  for (int i = 0; i < n; i++) mask[i] = neg ? !sel[i] : sel[i];
  return 0;
}

/* NCCL_ALGO or NCCL_PROTO into en[func][i]; the per-collective syntax needs 2.24. */
static void parse_select_env(sim_model_t *m, const char *var, int algo,
                             unsigned char en[AH_NUM_FUNCTIONS][SIM_NUM_ALGOS]) {
  for (int f = 0; f < AH_NUM_FUNCTIONS; f++) memset(en[f], 1, SIM_NUM_ALGOS);
  const char *s = getenv(var);
  if (!s || !*s) return;
  char *copy = strdup(s);
  if (!copy) return;
  unsigned char tmp[AH_NUM_FUNCTIONS][SIM_NUM_ALGOS];
  memcpy(tmp, en, sizeof tmp);
  int ok = 1, first = 1;
  char *save = NULL;
  for (char *entry = strtok_r(copy, ";", &save); entry && ok;
       entry = strtok_r(NULL, ";", &save), first = 0) {
    char *colon = strchr(entry, ':');
    unsigned char mask[SIM_NUM_ALGOS] = {0};
    if (!colon) {
      if (!first || parse_list(entry, algo, mask)) ok = 0;
      else
        for (int f = 0; f < AH_NUM_FUNCTIONS; f++) memcpy(tmp[f], mask, SIM_NUM_ALGOS);
      continue;
    }
    *colon = 0;
    while (*entry == ' ') entry++;
    int f = func_index(entry);
    if (m->topo.version < 22400 || f < 0 || parse_list(colon + 1, algo, mask)) ok = 0;
    else memcpy(tmp[f], mask, SIM_NUM_ALGOS);
  }
  free(copy);
  if (ok) memcpy(en, tmp, sizeof tmp);
  else
    model_error(
        m, var, s,
        algo ? (m->topo.version >= 22400
                    ? "a list such as 'ring,tree' or '^nvls', optionally 'allreduce:tree;...'"
                    : "a list such as 'ring,tree' or '^nvls' (per-collective lists need 2.24)")
             : (m->topo.version >= 22400
                    ? "a list such as 'll,simple' or '^ll128', optionally 'allreduce:ll;...'"
                    : "a list such as 'll,simple' or '^ll128' (per-collective lists need 2.24)"),
        "leaving every choice enabled");
}

/* ---- graphs (what NCCL's topology search finds) ------------------------------------------------ */

/* Largest speed of NCCL's search list not above x (5% slack for measured bandwidths). */
static double snap_speed(double x, int inter) {
  static const double intra[] = {60, 50, 40, 30, 24, 20, 15, 12, 11, 6, 3};
  static const double net[] = {48, 45, 42, 40, 30, 24, 22, 20, 17.5, 15, 12, 6, 3};
  const double *l = inter ? net : intra;
  int n = inter ? (int)(sizeof net / sizeof net[0]) : (int)(sizeof intra / sizeof intra[0]);
  for (int i = 0; i < n; i++)
    if (l[i] <= x * 1.05) return l[i];
  return l[n - 1];
}

void sim_model_init(sim_model_t *m, const sim_topo_t *topo, int min_ctas, int max_ctas) {
  memset(m, 0, sizeof *m);
  m->topo = *topo;
  sim_topo_t *t = &m->topo;
  int v = t->version;
  if (t->nranks < 1) sim_topo_set_layout(t, 1, 1, 1);
  sim_model_default_constants(&m->consts, v);
  /* Ring/tree graph: one node, 12 channels at NVLink/12; several nodes, one channel per NIC at
   * the NIC's speed (and at most NVLink's share). */
  if (t->nnodes <= 1) {
    m->ring_graph_nch = 12;
    m->ring_graph_bw_intra = m->ring_graph_bw_inter = snap_speed(t->nvl_gbps / 12.0, 0);
  } else {
    int nch = t->nic_count < 2 ? 2 : t->nic_count > 16 ? 16 : t->nic_count;
    double per = t->nic_count * t->nic_gbps * 0.95 / nch, cap = t->nvl_gbps / nch;
    m->ring_graph_nch = nch;
    m->ring_graph_bw_inter = snap_speed(per < cap ? per : cap, 1);
    m->ring_graph_bw_intra = m->ring_graph_bw_inter;
  }
  /* NVLS graph: one head per local GPU at 50 GB/s (H100), the network as the ring's. */
  m->nvls_graph_nch = t->ranks_per_node;
  m->nvls_graph_bw_intra = 50.0;
  m->nvls_graph_bw_inter = t->nnodes > 1 ? m->ring_graph_bw_inter : 50.0;
  int maxch = v >= 22500 ? 64 : 32;
  int nch = 2 * m->ring_graph_nch; /* NCCL splits/duplicates the search's channels */
  int lo = env_int(m, "NCCL_MIN_NCHANNELS", 1, 1 << 20, 0),
      hi = env_int(m, "NCCL_MAX_NCHANNELS", 1, 1 << 20, maxch);
  int lo2 = env_int(m, "NCCL_MIN_CTAS", 1, 1 << 20, min_ctas),
      hi2 = env_int(m, "NCCL_MAX_CTAS", 1, 1 << 20, max_ctas);
  if (lo2 > lo) lo = lo2;
  if (hi2 > 0 && hi2 < hi) hi = hi2;
  if (hi > maxch) hi = maxch;
  if (lo > maxch) lo = maxch;
  if (nch < lo) nch = lo;
  if (nch > hi) nch = hi;
  if (nch < 1) nch = 1;
  m->nchannels = nch;
  m->nvls_channels = env_int(m, "NCCL_NVLS_NCHANNELS", 1, maxch, 16);
  if (m->nvls_channels > hi) m->nvls_channels = hi;
  if (m->nvls_channels < 2) m->nvls_channels = 2;
  t->nchannels = nch;
  t->max_channels = nch > m->nvls_channels ? nch : m->nvls_channels;
  if (env_int(m, "NCCL_NVLS_ENABLE", 0, 2, 1) == 0) t->nvls = 0;
  if (env_int(m, "NCCL_COLLNET_ENABLE", 0, 1, t->collnet) == 0) t->collnet = 0;
  /* Threads: NCCL's maxima per (algorithm, protocol), then the env overrides. */
  int nt_env = env_int(m, "NCCL_NTHREADS", 64, 640, 0);
  if (nt_env % 32) {
    char val[16];
    snprintf(val, sizeof val, "%d", nt_env);
    model_error(m, "NCCL_NTHREADS", val, "a multiple of 32", "keeping NCCL's default");
    nt_env = 0;
  }
  int ll128_env = env_int(m, "NCCL_LL128_NTHREADS", 160, 640, 640);
  for (int a = 0; a < SIM_NUM_ALGOS; a++) {
    for (int p = 0; p < SIM_NUM_PROTOS; p++) {
      int nt = 512;
      if (p == AH_PROTO_LL128) nt = ll128_env;
      else if (a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE || a == AH_ALGO_COLLNET_DIRECT ||
               a == AH_ALGO_COLLNET_CHAIN)
        nt = 640;
      else if (p == AH_PROTO_SIMPLE && a == AH_ALGO_RING &&
               m->ring_graph_bw_intra * m->ring_graph_nch <= 12)
        nt = 256;
      /* NCCL_NTHREADS sets Ring/Tree LL and Simple threads, at most 512 (LL128 has its own). */
      if (nt_env && p != AH_PROTO_LL128 && (a == AH_ALGO_RING || a == AH_ALGO_TREE))
        nt = nt_env > 512 ? 512 : nt_env;
      if ((a == AH_ALGO_TREE && v >= 22200) || (a == AH_ALGO_PAT && v >= 22300)) nt = 640;
      m->nthreads[a][p] = nt;
    }
  }
  m->buffsize[AH_PROTO_LL] = (size_t)env_int(m, "NCCL_LL_BUFFSIZE", 4096, 1 << 30, 512 * 1024);
  m->buffsize[AH_PROTO_LL128] = (size_t)env_int(m, "NCCL_LL128_BUFFSIZE", 4096, 1 << 30, 4915200);
  m->buffsize[AH_PROTO_SIMPLE] = (size_t)env_int(m, "NCCL_BUFFSIZE", 65536, 1 << 30, 4 << 20);
  unsigned char ea[AH_NUM_FUNCTIONS][SIM_NUM_ALGOS], ep[AH_NUM_FUNCTIONS][SIM_NUM_ALGOS];
  parse_select_env(m, "NCCL_ALGO", 1, ea);
  parse_select_env(m, "NCCL_PROTO", 0, ep);
  for (int f = 0; f < AH_NUM_FUNCTIONS; f++)
    for (int a = 0; a < SIM_NUM_ALGOS; a++)
      for (int p = 0; p < SIM_NUM_PROTOS; p++) m->enabled[f][a][p] = ea[f][a] && ep[f][p];
}

/* ---- support, latency and bandwidth ------------------------------------------------------------ */

int sim_model_supported(const sim_model_t *m, int coll, int a, int p) {
  const sim_topo_t *t = &m->topo;
  int v = t->version, n = t->nranks, N = t->nnodes, q = t->ranks_per_node;
  if (coll < 0 || coll >= AH_NUM_FUNCTIONS || a < 0 || a >= SIM_NUM_ALGOS || p < 0 ||
      p >= SIM_NUM_PROTOS)
    return 0;
  if (n <= 1) return a == AH_ALGO_RING && p == AH_PROTO_SIMPLE;
  int ar = coll == AH_FUNC_ALLREDUCE,
      agrs = coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER;
  switch (a) {
    case AH_ALGO_RING: return 1;
    case AH_ALGO_TREE: return ar;
    case AH_ALGO_NVLS:
      return p == AH_PROTO_SIMPLE && t->nvls && q >= 2 && v >= 21700 &&
             (ar || (agrs && v >= 21900)) && (N == 1 || (t->collnet && ar));
    case AH_ALGO_NVLS_TREE:
      return p == AH_PROTO_SIMPLE && t->nvls && q >= 2 && ar && N > 1 && v >= 21800;
    case AH_ALGO_PAT: return p == AH_PROTO_SIMPLE && agrs && q == 1 && v >= 22300;
    case AH_ALGO_COLLNET_DIRECT: return p == AH_PROTO_SIMPLE && t->collnet && N > 1 && (ar || agrs);
    case AH_ALGO_COLLNET_CHAIN: return p == AH_PROTO_SIMPLE && t->collnet && N > 1 && ar;
    default: return 0;
  }
}

static int nsteps_of(int coll, int n) { return coll == AH_FUNC_ALLREDUCE ? 2 * (n - 1) : n - 1; }

double sim_model_nccl_latency(const sim_model_t *m, const ah_tuner_constants_v5_t *k, int coll,
                              int a, int p, size_t nbytes) {
  const sim_topo_t *t = &m->topo;
  int n = t->nranks, N = t->nnodes, q = t->ranks_per_node, l2 = sim_log2_ceil(N);
  double base = k->baseLatencies[a][p], intra = k->hwLatencies[HW_NVLINK][a][p];
  double inter = k->hwLatencies[HW_NET][a][p] + t->net_lat_us * (p == AH_PROTO_SIMPLE ? 2 : 1);
  switch (a) {
    case AH_ALGO_RING: {
      if (N > 1) { /* a ring step is at least the proxy's per-step network overhead */
        double ovh = (t->cpu_amd ? 2.0 : 1.0) * (p == AH_PROTO_SIMPLE ? 3 : 1);
        if (intra < ovh) intra = ovh;
      }
      int nsteps = nsteps_of(coll, n);
      int ninter = N > 1 ? (coll == AH_FUNC_ALLREDUCE ? 2 * (N - 1) : N - 1) : 0;
      double ih = q == 1 ? k->hwLatencies[HW_NET][AH_ALGO_TREE][p] + t->net_lat_us : inter;
      double lat = base + (nsteps - ninter) * intra + ninter * ih;
      if (coll == AH_FUNC_ALLREDUCE && p == AH_PROTO_SIMPLE && N > 1 &&
          nbytes / ((size_t)m->nchannels * (size_t)n) >= 64)
        lat *= 1.4; /* NCCL's ring plateau factor on Hopper and Ampere */
      return lat;
    }
    case AH_ALGO_TREE: return base + 2 * ((q - 1) * intra + l2 * inter);
    case AH_ALGO_NVLS: return k->hwLatencies[HW_NVLINK][a][p] + (N > 1 ? inter : 0);
    case AH_ALGO_NVLS_TREE: return k->hwLatencies[HW_NVLINK][a][p] + 2 * l2 * inter;
    case AH_ALGO_COLLNET_DIRECT:
      return base + 2 * ((q > 1 ? 1 : 0) * intra + 0.4 * (q - 1)) + inter;
    case AH_ALGO_COLLNET_CHAIN: return base + 2 * (q - 1) * intra + inter;
    case AH_ALGO_PAT: return base + l2 * inter / 3.5 + 2.8 * n;
    default: return -1;
  }
}

/* NCCL's algorithm bandwidth (GB/s) for a pair, 0 when NCCL computes none. */
double sim_model_nccl_bw(const sim_model_t *m, int coll, int a, int p) {
  const sim_topo_t *t = &m->topo;
  const ah_tuner_constants_v5_t *k = &m->consts;
  int n = t->nranks, N = t->nnodes, q = t->ranks_per_node, v = t->version;
  int cc = sim_model_compcap(m), sc = sim_model_scale(m), nch = m->ring_graph_nch;
  int ar = coll == AH_FUNC_ALLREDUCE;
  double llmax = k->llMaxBws[cc][sc];
  if (N > 1 && t->cpu_amd) llmax = N == 2 ? 22.5 : 19.0;
  double bw_graph = N <= 2 ? m->ring_graph_bw_intra : m->ring_graph_bw_inter;
  double bus = nch * bw_graph, ratio = 1.0;
  switch (a) {
    case AH_ALGO_RING:
      if (p == AH_PROTO_LL) {
        double f = v < 22100 ? (N > 1 && (ar || coll == AH_FUNC_REDUCE) ? 0.25 : 1.0 / 3.0) : 0.5;
        bus = fmin(llmax, f * bus);
      } else if (p == AH_PROTO_LL128) {
        bus = fmin((v < 21900 && q < 2 ? 0.7 : 0.92) * bus, nch * k->perChMaxRingLL128Bws[cc][sc]);
      }
      ratio = (double)n / nsteps_of(coll, n);
      break;
    case AH_ALGO_TREE:
      bus = fmin(0.92 * bus, nch * k->perChMaxTreeBws[cc][sc]);
      if (p == AH_PROTO_LL) bus = fmin(bus / 3.8, llmax);
      else if (p == AH_PROTO_LL128)
        bus =
            fmin(bus * (N == 1 ? 7.0 / 9.0 : 120.0 / 128.0), nch * k->perChMaxTreeLL128Bws[cc][sc]);
      ratio = 0.5;
      break;
    case AH_ALGO_NVLS:
    case AH_ALGO_NVLS_TREE: {
      int hc = m->nvls_graph_nch;
      double eff = 0.85;
      double intra =
          m->nvls_graph_bw_intra * eff * (hc - 1) / hc * (ar ? 2.0 : (double)(q - 1) / q);
      double inter = m->nvls_graph_bw_inter * (a == AH_ALGO_NVLS_TREE && N <= 2 ? 2.0 : 1.0);
      double per = fmin(intra, inter);
      if (a == AH_ALGO_NVLS_TREE && k->perChMaxNVLSTreeBws[cc][sc] > 0)
        per = fmin(per, k->perChMaxNVLSTreeBws[cc][sc]);
      bus = hc * per;
      ratio = (double)n / nsteps_of(coll, n);
      break;
    }
    case AH_ALGO_PAT: bus *= v < 22400 ? 0.85 : 0.75; break;
    case AH_ALGO_COLLNET_DIRECT:
      if (ar) {
        double r = (double)q / nch, f = r - (r - 1) / 2;
        bus = bus / (f > 1 ? f : 1) * (cc >= CC_HOPPER ? 0.85 : 1.0);
        ratio = 0.5;
      } else {
        bus = q * fmin(m->ring_graph_bw_intra, 0.9 * m->ring_graph_bw_inter);
      }
      break;
    case AH_ALGO_COLLNET_CHAIN: ratio = 0.5; break;
    default: return 0;
  }
  return bus * ratio;
}

/* NCCL's tree correction factor on bandwidth, by log2(nBytes/64). */
static double tree_correction(int p, size_t nbytes) {
  static const double f[3][23] = {
      {1, 1, 1, 1, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1, 1, 1, 1},
      {1, 1, 1, 1, 1, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1, 1},
      {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};
  int i = 0;
  size_t x = nbytes / 64;
  while (x > 1) {
    x >>= 1;
    i++;
  }
  return i < 23 ? f[p][i] : 1.0;
}

void sim_model_cost_table(const sim_model_t *m, int coll, size_t nbytes, int npipe,
                          float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS]) {
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++) table[a][p] = AH_COST_IGNORE;
  if (coll < 0 || coll >= AH_NUM_FUNCTIONS) return;
  if (m->topo.nranks <= 1) {
    table[AH_ALGO_RING][AH_PROTO_SIMPLE] = 0.0f;
    return;
  }
  if (npipe < 1) npipe = 1;
  for (int a = 0; a < SIM_NUM_ALGOS; a++) {
    for (int p = 0; p < SIM_NUM_PROTOS; p++) {
      if (!sim_model_supported(m, coll, a, p) || !m->enabled[coll][a][p]) continue;
      double bw = sim_model_nccl_bw(m, coll, a, p);
      if (!(bw > 0)) continue;
      if (a == AH_ALGO_TREE) bw *= tree_correction(p, nbytes);
      double lat = sim_model_nccl_latency(m, &m->consts, coll, a, p, nbytes);
      table[a][p] = (float)(lat * npipe + (double)nbytes / (1000.0 * bw));
    }
  }
}

/* ---- channels, threads and chunk ----------------------------------------------------------------- */

size_t sim_model_grain(int p) { return p == AH_PROTO_LL ? 16 : p == AH_PROTO_LL128 ? 1920 : 512; }

/* Largest chunk the buffer allows (payload bytes). */
size_t sim_model_max_chunk(const sim_model_t *m, int a, int p) {
  size_t step = m->buffsize[p] / 8;
  if (p == AH_PROTO_LL) return step / 2;
  if (p == AH_PROTO_LL128) return step / 1920 * 1800; /* 120-byte lines carry 112.5 bytes */
  (void)a;
  return step * 4; /* four steps: half the buffer, NCCL's ring chunk */
}

static size_t align_down(size_t x, size_t g) { return x / g * g; }

size_t sim_model_default_chunk(const sim_model_t *m, int coll, size_t nbytes, int a, int p,
                               int nc) {
  const sim_topo_t *t = &m->topo;
  size_t step = m->buffsize[p] / 8, chunk;
  int N = t->nnodes, q = t->ranks_per_node;
  if (p == AH_PROTO_LL) chunk = step / 2;
  else if (p == AH_PROTO_LL128) chunk = step / 1920 * 1800;
  else if (a == AH_ALGO_RING && (coll == AH_FUNC_ALLREDUCE || coll == AH_FUNC_ALLGATHER ||
                                 coll == AH_FUNC_REDUCESCATTER))
    chunk = step * 4;
  else chunk = step;
  if (nc < 1) nc = 1;
  if (a == AH_ALGO_TREE && p == AH_PROTO_LL128) {
    double depth = 1 + sim_log2_ceil(N) + 0.1 * q;
    while ((double)nbytes / ((double)nc * chunk) < depth * 64 / q && chunk > 131072) chunk /= 2;
    while ((double)nbytes / ((double)nc * chunk) < depth * 16 / q && chunk > 32768) chunk /= 2;
  } else if (a == AH_ALGO_NVLS) {
    size_t cap = N > 1 && sim_model_nccl_bw(m, AH_FUNC_ALLREDUCE, a, p) < 150 ? 32768 : 131072;
    if (chunk > cap) chunk = cap;
    double base = (double)nc * m->nvls_graph_nch * 131072;
    if (nbytes < 2 * base && chunk > 16384) chunk = 16384;
    else if (nbytes < 8 * base && chunk > 32768) chunk = 32768;
    else if (nbytes < 64 * base && chunk > 65536) chunk = 65536;
  } else if (a == AH_ALGO_NVLS_TREE) {
    double base = (double)nc * m->nvls_graph_nch * 32768;
    chunk = nbytes >= 32 * base   ? 262144
            : nbytes >= 16 * base ? 131072
            : nbytes >= 4 * base  ? 65536
                                  : 32768;
  } else if (a == AH_ALGO_PAT) {
    int mult = coll == AH_FUNC_ALLGATHER ? 32 : 16;
    while ((double)chunk * nc * mult > (double)nbytes && chunk > 65536) chunk /= 2;
  }
  return align_down(chunk, sim_model_grain(p));
}

/* NCCL's channels and threads for the pair at this size, before any tuner. */
void sim_model_default_resources(const sim_model_t *m, int coll, size_t nbytes, int a, int p,
                                 int *nc_p, int *nt_p) {
  int nvls = a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE;
  int nc = nvls ? m->nvls_channels : m->nchannels, nt = m->nthreads[a][p];
  double thr = p == AH_PROTO_LL      ? 8.0 * (a == AH_ALGO_RING ? m->topo.nranks : 1)
               : p == AH_PROTO_LL128 ? 8.0
                                     : 64.0;
  if (a == AH_ALGO_COLLNET_DIRECT || a == AH_ALGO_COLLNET_CHAIN) thr = 512;
  if (a == AH_ALGO_RING || a == AH_ALGO_TREE) {
    while (nc > 1 && (double)nbytes < (double)nc * nt * thr) nc--;
    if (!(a == AH_ALGO_TREE && m->topo.version >= 22200))
      while (nt > 128 && nt % 128 == 0 && (double)nbytes < (double)nc * nt * thr) nt /= 2;
  }
  if (p == AH_PROTO_SIMPLE && a == AH_ALGO_RING) nt += 32;
  if (p == AH_PROTO_SIMPLE && a == AH_ALGO_TREE && nt < 640) nt += 128;
  if (nt < 96) nt = 96;
  *nc_p = nc;
  *nt_p = nt;
}

/* NCCL's fill rule (2.19+): at least 32 KiB of traffic per channel. */
int sim_model_traffic_channels(int coll, int p, size_t nbytes, int nc) {
  double traffic =
      (double)nbytes * (coll == AH_FUNC_ALLREDUCE ? 2 : 1) * (p == AH_PROTO_LL ? 4 : 1);
  int most = (int)(traffic / 32768.0);
  if (most < 1) most = 1;
  return nc < most ? nc : most;
}

void sim_model_config_for(const sim_model_t *m, int coll, size_t nbytes, int a, int p,
                          int tuner_nch, size_t tuner_chunk, sim_config_t *cfg) {
  int nc, nt, v = m->topo.version;
  sim_model_default_resources(m, coll, nbytes, a, p, &nc, &nt);
  if (tuner_nch > 0) {
    int cap = a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE ? m->nvls_channels : m->nchannels;
    int most = v >= 22500 ? 64 : 32; /* before 2.22 no cap but MAXCHANNELS (real NCCL overruns) */
    nc = v >= 22200 ? (tuner_nch < cap ? tuner_nch : cap) : (tuner_nch < most ? tuner_nch : most);
  }
  if (v >= 21900) nc = sim_model_traffic_channels(coll, p, nbytes, nc);
  size_t chunk = sim_model_default_chunk(m, coll, nbytes, a, p, nc);
  if (tuner_chunk > 0) {
    size_t most = sim_model_max_chunk(m, a, p), g = sim_model_grain(p);
    chunk = tuner_chunk < most ? tuner_chunk : most;
    chunk = align_down(chunk, g);
    if (chunk < g) chunk = g;
  }
  cfg->algo = a;
  cfg->proto = p;
  cfg->nchannels = nc;
  cfg->nthreads = nt;
  cfg->chunk = chunk;
}

int sim_model_select(const sim_model_t *m, int coll, size_t nbytes,
                     const float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS], int tuner_nch,
                     size_t tuner_chunk, sim_config_t *cfg_p) {
  int ba = -1, bp = -1;
  float best = 0;
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++)
      if (table[a][p] >= 0 && (ba < 0 || table[a][p] < best)) {
        best = table[a][p];
        ba = a;
        bp = p;
      }
  if (ba < 0) return -1;
  sim_model_config_for(m, coll, nbytes, ba, bp, tuner_nch, tuner_chunk, cfg_p);
  return 0;
}
