/* ah_path_plan.c: the fabric model behind AUTOHA_QP_SPORT=plan — a topology file (leaf pairs,
 * spines, hosts with dual-port bonded NICs, jobs and their traffic pattern, failed links), the
 * route the hash model gives a source port, and the job-wide planner.
 *
 * The planner balances exactly rather than greedily: choosing a NIC side for every flow and then a
 * spine for every cross-pair flow are both equitable edge colourings of a bipartite multigraph
 * (sources on one side, destinations on the other), which exist for any number of colours; it
 * builds them with alternating-path (Kempe) swaps after splitting each vertex into chunks of at
 * most "colours" edges, so every link ends with at most ceil(demand / links) flows. Failed links are
 * forbidden colours at their leaf; where a swap would need one, that flow falls back to the least
 * loaded legal spine. Finally it searches the port space for a source port that the hash model
 * sends along the chosen route. Flows are taken in decreasing job GPU intensity (Crux), so when a
 * fallback is needed the most intensive jobs have already been placed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_log.h"
#include "ah_path.h"
#include "ah_path_color.h"
#include "ah_path_text.h"

/* ---- topology file ---------------------------------------------------------------------------- */

void ah_path_topo_free(ah_path_topo_t *t) {
  if (!t) return;
  for (int i = 0; i < t->nhosts; i++) {
    free(t->hosts[i].dev);
    free(t->hosts[i].gid);
  }
  for (int i = 0; i < t->njobs; i++) free(t->jobs[i].hosts);
  free(t->hosts);
  free(t->jobs);
  free(t->failed);
  free(t);
}

static int find_host(const ah_path_topo_t *t, const char *name) {
  for (int i = 0; i < t->nhosts; i++)
    if (strcmp(t->hosts[i].name, name) == 0) return i;
  return -1;
}

/* Grows *arr (of n elements of size sz) by one zeroed element; returns it or NULL. */
static void *grow(void *arr_p, int n, size_t sz) {
  void **arr = arr_p;
  char *na = realloc(*arr, (size_t)(n + 1) * sz);
  if (!na) return NULL;
  memset(na + (size_t)n * sz, 0, sz);
  *arr = na;
  return na + (size_t)n * sz;
}

static const char *parse_job(ah_path_topo_t *t, char **w, int nw) {
  long ch;
  char *end = NULL;
  if (nw != 6) return "expected: job NAME INTENSITY ring|tree CHANNELS HOST[,HOST...]";
  double intensity = strtod(w[2], &end);
  if (end == w[2] || *end || !(intensity >= 0)) return "intensity must be a number >= 0";
  int pattern = strcmp(w[3], "ring") == 0   ? AH_PATH_PATTERN_RING
                : strcmp(w[3], "tree") == 0 ? AH_PATH_PATTERN_TREE
                                            : -1;
  if (pattern < 0) return "pattern must be ring or tree";
  if (ah_path_text_long(w[4], 1, 64, &ch)) return "channels must be 1-64";
  if (strlen(w[1]) >= AH_PATH_NAME_MAX) return "job name too long";
  ah_path_job_t *j = grow(&t->jobs, t->njobs, sizeof *j);
  if (!j) return "out of memory";
  t->njobs++;
  snprintf(j->name, sizeof j->name, "%s", w[1]);
  j->intensity = intensity;
  j->pattern = pattern;
  j->channels = (int)ch;
  int n = 1;
  for (const char *p = w[5]; *p; p++) n += *p == ',';
  j->hosts = calloc((size_t)n, sizeof *j->hosts);
  if (!j->hosts) return "out of memory";
  char *save = NULL;
  for (char *h = strtok_r(w[5], ",", &save); h; h = strtok_r(NULL, ",", &save)) {
    int hi = find_host(t, h);
    if (hi < 0) return "job names a host not declared before it";
    for (int i = 0; i < j->nhosts; i++)
      if (j->hosts[i] == hi) return "job lists a host twice";
    j->hosts[j->nhosts++] = hi;
  }
  return j->nhosts == n ? NULL : "empty host name in list";
}

/* Applies one line; returns NULL or the reason it is bad. */
static const char *parse_line(ah_path_topo_t *t, char **w, int nw) {
  long a, b;
  if (strcmp(w[0], "spines") == 0) {
    if (nw != 2 || ah_path_text_long(w[1], 1, 256, &a)) return "expected: spines 1-256";
    if (t->nhosts) return "spines must come before hosts";
    t->nspines = (int)a;
  } else if (strcmp(w[0], "pairs") == 0) {
    if (nw != 2 || ah_path_text_long(w[1], 1, 4096, &a)) return "expected: pairs 1-4096";
    if (t->nhosts) return "pairs must come before hosts";
    t->npairs = (int)a;
  } else if (strcmp(w[0], "seeds") == 0) {
    long s[3];
    if (nw != 4) return "expected: seeds LEAF SPINE LAG";
    for (int i = 0; i < 3; i++)
      if (ah_path_text_long(w[i + 1], 0, 0xFFFFFFFFL, &s[i])) return "seeds must be 32-bit numbers";
    t->seed_leaf = (uint32_t)s[0];
    t->seed_spine = (uint32_t)s[1];
    t->seed_lag = (uint32_t)s[2];
  } else if (strcmp(w[0], "host") == 0) {
    if (!t->nspines || !t->npairs) return "spines and pairs must come before hosts";
    if (nw != 3) return "expected: host NAME PAIR";
    if (ah_path_text_long(w[2], 0, t->npairs - 1, &a)) return "pair out of range";
    if (strlen(w[1]) >= AH_PATH_NAME_MAX) return "host name too long";
    if (find_host(t, w[1]) >= 0) return "host declared twice";
    ah_path_host_t *h = grow(&t->hosts, t->nhosts, sizeof *h);
    if (!h) return "out of memory";
    t->nhosts++;
    snprintf(h->name, sizeof h->name, "%s", w[1]);
    h->pair = (int)a;
  } else if (strcmp(w[0], "nic") == 0) {
    uint8_t gid[16];
    if (nw != 4) return "expected: nic HOST DEVICE ADDRESS";
    int hi = find_host(t, w[1]);
    if (hi < 0) return "nic names a host not declared before it";
    if (strlen(w[2]) >= AH_PATH_NAME_MAX) return "device name too long";
    if (ah_path_gid_parse(w[3], gid)) return "address is not an IPv4/IPv6 address or GID";
    for (int h = 0; h < t->nhosts; h++)
      for (int n = 0; n < t->hosts[h].nnics; n++)
        if (memcmp(t->hosts[h].gid[n], gid, 16) == 0) return "address used twice";
    ah_path_host_t *h = &t->hosts[hi];
    if (!grow(&h->dev, h->nnics, sizeof *h->dev) || !grow(&h->gid, h->nnics, sizeof *h->gid))
      return "out of memory";
    snprintf(h->dev[h->nnics], AH_PATH_NAME_MAX, "%s", w[2]);
    memcpy(h->gid[h->nnics], gid, 16);
    h->nnics++;
  } else if (strcmp(w[0], "job") == 0) {
    return parse_job(t, w, nw);
  } else if (strcmp(w[0], "fail") == 0) {
    if (!t->nspines || !t->npairs) return "spines and pairs must come before fail";
    if (nw != 3 || ah_path_text_long(w[1], 0, 2 * t->npairs - 1, &a) ||
        ah_path_text_long(w[2], 0, t->nspines - 1, &b))
      return "expected: fail LEAF SPINE (in range)";
    int(*f)[2] = grow(&t->failed, t->nfailed, sizeof *t->failed);
    if (!f) return "out of memory";
    t->nfailed++;
    (*f)[0] = (int)a;
    (*f)[1] = (int)b;
  } else if (strcmp(w[0], "classes") == 0) {
    if (nw != 2)
      return "expected: classes CLASS[,CLASS...] (highest priority first, each 0..255 or dscp=0..63)";
    t->nclasses = 0;
    char *save = NULL;
    for (char *c = strtok_r(w[1], ",", &save); c; c = strtok_r(NULL, ",", &save)) {
      int tc, dscp;
      if (t->nclasses == 8) return "at most 8 classes";
      if (ah_path_parse_tc(c, &tc, &dscp) || tc < 0) return "a class must be 0..255 or dscp=0..63";
      t->class_tc[t->nclasses] = tc;
      t->class_dscp[t->nclasses++] = dscp;
    }
  } else {
    return "unknown keyword (expected spines, pairs, seeds, host, nic, job, fail or classes)";
  }
  return NULL;
}

int ah_path_topo_parse(const char *text, const char *origin, ah_path_topo_t **topo_p) {
  ah_path_topo_t *t = calloc(1, sizeof *t);
  char *copy = text ? strdup(text) : NULL;
  int lineno = 0, rc = -1;
  if (!t || !copy) {
    ah_log(AH_LOG_ERROR, "topology %s: out of memory", origin);
    goto out;
  }
  t->seed_leaf = 0x1u;
  t->seed_spine = 0x2u;
  t->seed_lag = 0x3u;
  char *cur = copy, *line, orig[256];
  while ((line = ah_path_text_line(&cur, &lineno, orig, sizeof orig)) != NULL) {
    char *w[8];
    int nw = ah_path_text_words(line, w, 7);
    if (nw == 0) continue;
    const char *why = parse_line(t, w, nw);
    if (why) {
      ah_log(AH_LOG_ERROR, "topology %s line %d: '%s': %s", origin, lineno, orig, why);
      goto out;
    }
  }
  if (!t->nspines || !t->npairs || !t->nhosts) {
    ah_log(AH_LOG_ERROR, "topology %s: no spines, pairs or hosts declared", origin);
    goto out;
  }
  *topo_p = t;
  t = NULL;
  rc = 0;
out:
  free(copy);
  ah_path_topo_free(t);
  return rc;
}

int ah_path_topo_load(const char *path, ah_path_topo_t **topo_p) {
  char *text = ah_path_text_read(path, "topology");
  if (!text) return -1;
  int rc = ah_path_topo_parse(text, path, topo_p);
  free(text);
  return rc;
}

/* ---- flows of the jobs ------------------------------------------------------------------------ */

typedef struct {
  ah_path_flow_t *v;
  int n, cap;
} flowvec_t;

static int flow_add(flowvec_t *fv, int job, int sh, int sn, int dh, int dn) {
  if (fv->n == fv->cap) {
    int ncap = fv->cap ? fv->cap * 2 : 256;
    ah_path_flow_t *nv = realloc(fv->v, (size_t)ncap * sizeof *nv);
    if (!nv) return -1;
    fv->v = nv;
    fv->cap = ncap;
  }
  fv->v[fv->n++] = (ah_path_flow_t){job, sh, sn, dh, dn, 0}; /* k: numbered once all are known */
  return 0;
}

static int by_pair_flows(const ah_path_flow_t *a, const ah_path_flow_t *b);
static int by_pair(const void *a, const void *b, void *ctx);

int ah_path_topo_flows(const ah_path_topo_t *t, ah_path_flow_t **flows_p) {
  flowvec_t fv = {0};
  for (int j = 0; j < t->njobs; j++) {
    const ah_path_job_t *job = &t->jobs[j];
    int n = job->nhosts, nics = 1 << 30;
    if (n < 2) continue;
    for (int i = 0; i < n; i++)
      if (t->hosts[job->hosts[i]].nnics < nics) nics = t->hosts[job->hosts[i]].nnics;
    for (int nic = 0; nic < nics; nic++) {
      for (int c = 0; c < job->channels; c++) {
        for (int i = 0; i < n; i++) {
          if (job->pattern == AH_PATH_PATTERN_RING) {
            if (flow_add(&fv, j, job->hosts[i], nic, job->hosts[(i + 1) % n], nic)) goto oom;
          } else if (i > 0) {
            /* double binary tree: heap order over the hosts, the second tree (odd NICs) over the
             * order shifted by one, so leaves of one tree are inner nodes of the other */
            int shift = nic & 1, me = job->hosts[(i + shift) % n],
                up = job->hosts[((i - 1) / 2 + shift) % n];
            if (flow_add(&fv, j, me, nic, up, nic) || flow_add(&fv, j, up, nic, me, nic)) goto oom;
          }
        }
      }
    }
  }
  /* k: the index of each flow among the flows of its NIC pair, in generation order */
  int *idx = malloc((size_t)(fv.n + 1) * sizeof *idx);
  if (!idx) goto oom;
  for (int i = 0; i < fv.n; i++) idx[i] = i;
  qsort_r(idx, (size_t)fv.n, sizeof *idx, by_pair, fv.v);
  for (int i = 0; i < fv.n; i++)
    fv.v[idx[i]].k =
        i > 0 && by_pair_flows(&fv.v[idx[i - 1]], &fv.v[idx[i]]) == 0 ? fv.v[idx[i - 1]].k + 1 : 0;
  free(idx);
  *flows_p = fv.v;
  return fv.n;
oom:
  free(fv.v);
  return -1;
}

int ah_path_job_class(const ah_path_topo_t *t, int job) {
  if (!t->nclasses || job < 0 || job >= t->njobs) return -1;
  int rank = 0; /* jobs before this one in decreasing intensity (ties: file order) */
  for (int j = 0; j < t->njobs; j++)
    rank += t->jobs[j].intensity > t->jobs[job].intensity ||
            (t->jobs[j].intensity == t->jobs[job].intensity && j < job);
  return rank * t->nclasses / t->njobs;
}

/* ---- the hash model of the fabric ------------------------------------------------------------- */

int ah_path_link_failed(const ah_path_topo_t *t, int leaf, int spine) {
  for (int i = 0; i < t->nfailed; i++)
    if (t->failed[i][0] == leaf && t->failed[i][1] == spine) return 1;
  return 0;
}

#define SEED_STEP 0x9E3779B9u

/* Each leaf's live uplinks, built once per plan: the port search asks for them at every port it
 * tries, and scanning the failed-link list there made planning cost grow with failed links times
 * spines (8 s instead of 0.4 s at 16,384 flows, 256 spines and 64 failed links). */
typedef struct {
  int nspines;
  unsigned char *failed; /* [leaf][spine] */
  int *live, *nlive;     /* [leaf][i] the i-th live spine; [leaf] how many */
} linkmap_t;

static void linkmap_free(linkmap_t *lm) {
  free(lm->failed);
  free(lm->live);
  free(lm->nlive);
}

/* Returns 0, or -1 when out of memory (lm is then freed). */
static int linkmap_build(const ah_path_topo_t *t, linkmap_t *lm) {
  size_t nleaf = 2 * (size_t)t->npairs, S = (size_t)t->nspines;
  lm->nspines = t->nspines;
  lm->failed = calloc(nleaf * S, 1);
  lm->live = malloc(nleaf * S * sizeof *lm->live);
  lm->nlive = calloc(nleaf, sizeof *lm->nlive);
  if (!lm->failed || !lm->live || !lm->nlive) {
    linkmap_free(lm);
    return -1;
  }
  for (int i = 0; i < t->nfailed; i++)
    lm->failed[(size_t)t->failed[i][0] * S + (size_t)t->failed[i][1]] = 1;
  for (size_t l = 0; l < nleaf; l++)
    for (size_t sp = 0; sp < S; sp++)
      if (!lm->failed[l * S + sp]) lm->live[l * S + (size_t)lm->nlive[l]++] = (int)sp;
  return 0;
}

/* The model's route for one port, given the flow's GID hash prefix (and the link map, or NULL to
 * read the failed links from the topology). Stops early (returning 0) as soon as the route differs
 * from a wanted one (want_side >= 0); returns 1 otherwise. */
static int model_route(const ah_path_topo_t *t, const linkmap_t *lm, const ah_path_flow_t *f,
                       uint32_t prefix, uint16_t sport, int want_side, int want_spine, int *side_p,
                       int *spine_p, int *rx_side_p) {
  int side =
      (int)(ah_path_hash5_finish(prefix, t->seed_lag + (uint32_t)f->shost * SEED_STEP, sport) & 1u);
  if (want_side >= 0 && side != want_side) return 0;
  int spine = -1, rx = side;
  int sp = t->hosts[f->shost].pair, dp = t->hosts[f->dhost].pair;
  if (sp != dp) {
    int leaf = 2 * sp + side, buf[256], nlive = 0;
    const int *live = buf;
    if (lm) {
      live = lm->live + (size_t)leaf * (size_t)lm->nspines;
      nlive = lm->nlive[leaf];
    } else {
      for (int i = 0; i < t->nspines; i++)
        if (!ah_path_link_failed(t, leaf, i)) buf[nlive++] = i;
    }
    rx = -1;
    if (nlive) {
      spine = live[ah_path_hash5_finish(prefix, t->seed_leaf + (uint32_t)leaf * SEED_STEP, sport) %
                   (uint32_t)nlive];
      if (want_side >= 0 && spine != want_spine) return 0;
      int cand[2], nc = 0;
      for (int x = 0; x < 2; x++)
        if (lm ? !lm->failed[(size_t)(2 * dp + x) * (size_t)lm->nspines + (size_t)spine]
               : !ah_path_link_failed(t, 2 * dp + x, spine))
          cand[nc++] = x;
      if (nc)
        rx = cand[ah_path_hash5_finish(prefix, t->seed_spine + (uint32_t)spine * SEED_STEP, sport) %
                  (uint32_t)nc];
    }
  }
  if (want_side >= 0 && (spine != want_spine || rx != want_side)) return 0;
  *side_p = side;
  *spine_p = spine;
  *rx_side_p = rx;
  return 1;
}

void ah_path_model_route(const ah_path_topo_t *t, const ah_path_flow_t *f, uint16_t sport,
                         int *side_p, int *spine_p, int *rx_side_p) {
  const uint8_t *s = t->hosts[f->shost].gid[f->snic], *d = t->hosts[f->dhost].gid[f->dnic];
  model_route(t, NULL, f, ah_path_hash5_prefix(s, d), sport, -1, -1, side_p, spine_p, rx_side_p);
}

/* ---- the planner ------------------------------------------------------------------------------ */

typedef struct {
  double intensity;
  int i;
} rank_t;

static int by_intensity(const void *a, const void *b) {
  const rank_t *ra = a, *rb = b;
  if (ra->intensity != rb->intensity) return ra->intensity > rb->intensity ? -1 : 1;
  return (ra->i > rb->i) - (ra->i < rb->i); /* stable: keep the flows' own order */
}

static int by_pair_flows(const ah_path_flow_t *a, const ah_path_flow_t *b) {
  int ka[4] = {a->shost, a->snic, a->dhost, a->dnic},
      kb[4] = {b->shost, b->snic, b->dhost, b->dnic};
  for (int i = 0; i < 4; i++)
    if (ka[i] != kb[i]) return ka[i] < kb[i] ? -1 : 1;
  return 0;
}

/* qsort_r comparator over flow indices; ctx is the flow array. */
static int by_pair(const void *a, const void *b, void *ctx) {
  const ah_path_flow_t *flows = ctx;
  int ia = *(const int *)a, ib = *(const int *)b;
  int c = by_pair_flows(&flows[ia], &flows[ib]);
  return c ? c : (ia > ib) - (ia < ib);
}

int ah_path_plan(const ah_path_topo_t *t, const ah_path_flow_t *flows, int nflows,
                 ah_path_route_t *routes) {
  int maxnic = 1, rc = -1;
  for (int h = 0; h < t->nhosts; h++)
    if (t->hosts[h].nnics > maxnic) maxnic = t->hosts[h].nnics;
  int nnic = t->nhosts * maxnic, nleaf = 2 * t->npairs, S = t->nspines;
  const ah_path_flow_t **order = malloc((size_t)(nflows + 1) * sizeof *order);
  int *src = malloc((size_t)(nflows + 1) * sizeof *src),
      *dst = malloc((size_t)(nflows + 1) * sizeof *dst);
  int *color = malloc((size_t)(nflows + 1) * sizeof *color),
      *idx = malloc((size_t)(nflows + 1) * sizeof *idx);
  int *cap = malloc((size_t)(2 * (nnic > nleaf ? nnic : nleaf) + 1) * sizeof *cap);
  unsigned char *forbid = calloc((size_t)2 * nleaf * S, 1);
  if (!order || !src || !dst || !color || !idx || !cap || !forbid) goto out;

  /* Crux: the most GPU-intensive jobs first */
  rank_t *rank = malloc((size_t)(nflows + 1) * sizeof *rank);
  if (!rank) goto out;
  for (int i = 0; i < nflows; i++) rank[i] = (rank_t){t->jobs[flows[i].job].intensity, i};
  qsort(rank, (size_t)nflows, sizeof *rank, by_intensity);
  for (int i = 0; i < nflows; i++) order[i] = &flows[rank[i].i];
  free(rank);

  /* 1. sides: an equitable 2-colouring of (tx NIC, rx NIC) — each NIC sends and receives half its
   *    flows on each port, and a flow leaves and arrives on the same side (C4P's dual-port rule).
   *    Flows that leave their leaf pair go first, so a NIC's chunks of two pair them with each
   *    other and they too split in halves: each leaf of a pair then carries half its uplink demand. */
  int ns = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0; i < nflows; i++) {
      int cross = t->hosts[order[i]->shost].pair != t->hosts[order[i]->dhost].pair;
      if (cross != (pass == 0)) continue;
      idx[ns] = i;
      src[ns] = order[i]->shost * maxnic + order[i]->snic;
      dst[ns++] = nnic + order[i]->dhost * maxnic + order[i]->dnic;
    }
  for (int b = 0; b < 2 * nnic; b++) cap[b] = 2;
  if (ah_path_equitable_color(nflows, src, dst, 2 * nnic, cap, NULL, 2, color)) goto out;
  for (int k = 0; k < nflows; k++) {
    ah_path_route_t *r = &routes[order[idx[k]] - flows];
    r->side = (int8_t)color[k];
    r->spine = -1;
  }

  /* 2. spines: per side, an equitable S-colouring of (source leaf uplinks, destination leaf
   *    downlinks) over the flows that leave their leaf pair; failed links are forbidden colours */
  for (int b = 0; b < nleaf; b++) {
    int live = 0;
    for (int s = 0; s < S; s++) {
      int failed = ah_path_link_failed(t, b, s);
      forbid[(size_t)b * S + s] = forbid[(size_t)(nleaf + b) * S + s] = (unsigned char)failed;
      live += !failed;
    }
    cap[b] = cap[nleaf + b] = live ? live : 1;
  }
  int ne = 0;
  for (int i = 0; i < nflows; i++) {
    const ah_path_flow_t *f = order[i];
    int sp = t->hosts[f->shost].pair, dp = t->hosts[f->dhost].pair;
    if (sp == dp) continue;
    int side = routes[f - flows].side;
    src[ne] = 2 * sp + side;
    dst[ne] = nleaf + 2 * dp + side;
    idx[ne++] = (int)(f - flows);
  }
  if (ah_path_equitable_color(ne, src, dst, 2 * nleaf, cap, forbid, S, color)) goto out;
  for (int e = 0; e < ne; e++) routes[idx[e]].spine = (int16_t)color[e];

  /* 3. ports: the first port from a per-flow start that the hash model routes as planned and that
   *    no other QP of the same NIC pair uses (pairs found through a sort, not a scan of all flows) */
  for (int i = 0; i < nflows; i++) idx[i] = i;
  qsort_r(idx, (size_t)nflows, sizeof *idx, by_pair, (void *)flows);
  for (int g = 0; g < nflows;) { /* src[i]: first position of flow i's pair in idx, dst[i]: end */
    int h = g + 1;
    while (h < nflows && by_pair_flows(&flows[idx[g]], &flows[idx[h]]) == 0) h++;
    for (int q = g; q < h; q++) src[idx[q]] = g, dst[idx[q]] = h;
    g = h;
  }
  linkmap_t lm;
  if (linkmap_build(t, &lm)) goto out;
  for (int i = 0; i < nflows; i++) routes[i].planned = -1; /* not yet assigned */
  for (int i = 0; i < nflows; i++) {
    const ah_path_flow_t *f = order[i];
    int fi = (int)(f - flows);
    ah_path_route_t *r = &routes[fi];
    const uint8_t *sg = t->hosts[f->shost].gid[f->snic], *dg = t->hosts[f->dhost].gid[f->dnic];
    uint32_t start = ah_path_hash5(0x5eedu + (uint32_t)f->k, sg, dg, 0);
    r->planned = 0;
    r->sport = ah_path_spread_port(start, (unsigned)f->k);
    uint32_t prefix = ah_path_hash5_prefix(sg, dg);
    for (uint32_t p = 0; p < 0x4000u && r->planned != 1; p++) {
      uint16_t port = (uint16_t)(AH_PATH_SPORT_MIN | ((start + p) & 0x3FFFu));
      int side, spine, rx, clash = 0;
      if (!model_route(t, &lm, f, prefix, port, r->side, r->spine, &side, &spine, &rx)) continue;
      for (int q = src[fi]; q < dst[fi] && !clash; q++)
        clash = idx[q] != fi && routes[idx[q]].planned >= 0 && routes[idx[q]].sport == port;
      if (!clash) r->sport = port, r->planned = 1;
    }
  }
  linkmap_free(&lm);
  rc = 0;
out:
  free(order);
  free(src);
  free(dst);
  free(color);
  free(idx);
  free(cap);
  free(forbid);
  return rc;
}

/* ---- backup paths (the HA layer's shadows, docs/ha.md) ------------------------------------------ */

static int backup_find_gid(const ah_path_topo_t *t, const uint8_t gid[16], int *host_p,
                           int *nic_p) {
  for (int h = 0; h < t->nhosts; h++)
    for (int n = 0; n < t->hosts[h].nnics; n++)
      if (memcmp(t->hosts[h].gid[n], gid, 16) == 0) return *host_p = h, *nic_p = n, 0;
  return -1;
}

uint16_t ah_path_backup_sport_avoid(const ah_path_topo_t *t, const uint8_t sgid[16],
                                    const uint8_t dgid[16], const uint16_t *outp, int nout,
                                    const uint16_t *backp, int nback, uint16_t start) {
  ah_path_flow_t out = {0}, back = {0};
  if (!t || backup_find_gid(t, sgid, &out.shost, &out.snic) ||
      backup_find_gid(t, dgid, &out.dhost, &out.dnic))
    return 0;
  back.shost = out.dhost, back.snic = out.dnic, back.dhost = out.shost, back.dnic = out.snic;
  int side, rx, avoid[16], navoid = 0, any = 0;
  for (int i = 0; i < nout + nback && navoid < 16; i++) {
    uint16_t sp = i < nout ? outp[i] : backp[i - nout];
    if (!sp) continue;
    int spine;
    ah_path_model_route(t, i < nout ? &out : &back, sp, &side, &spine, &rx);
    any |= spine >= 0;
    avoid[navoid++] = spine;
  }
  if (!any) return 0; /* under one leaf pair: no spine to avoid */
  uint32_t span = AH_PATH_SPORT_MAX - AH_PATH_SPORT_MIN + 1;
  for (uint32_t i = 0; i < 4096; i++) {
    uint16_t sport =
        (uint16_t)(AH_PATH_SPORT_MIN + ((uint32_t)(start - AH_PATH_SPORT_MIN) + i * 7919u) % span);
    int spine, ok;
    ah_path_model_route(t, &out, sport, &side, &spine, &rx);
    ok = spine >= 0;
    for (int k = 0; k < navoid && ok; k++) ok = spine != avoid[k];
    if (ok) return sport;
  }
  return 0;
}

uint16_t ah_path_backup_sport(const ah_path_topo_t *t, const uint8_t sgid[16],
                              const uint8_t dgid[16], uint16_t primary_sport, uint16_t peer_sport,
                              uint16_t start) {
  return ah_path_backup_sport_avoid(t, sgid, dgid, &primary_sport, 1, &peer_sport, 1, start);
}
