/* ah_path_color.c: equitable edge colouring of a bipartite multigraph, the exact balancing behind
 * the path planner (ah_path_plan.c): each vertex is split into chunks of at most "colours" edges
 * and the edges are coloured with alternating-path (Kempe) swaps, so every colour class at a
 * vertex ends with at most ceil(degree / legal colours) edges; forbidden colours (failed links)
 * are repaired by moving edges along chains of colour swaps. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ah_path_color.h"

typedef struct {
  int nc;                      /* colours */
  int nv;                      /* split vertices allocated */
  int *at;                     /* [split vertex][colour] -> edge, or -1 */
  int *base;                   /* split vertex -> base vertex */
  const unsigned char *forbid; /* [base vertex][colour], or NULL */
  int *chunk, *fill;           /* base vertex -> its current split vertex and how full it is */
  const int *cap;              /* base vertex -> edges per chunk */
  int *eu, *ev;                /* edge -> split vertices */
} kg_t;

static int kg_forbidden(const kg_t *g, int sv, int c) {
  return g->forbid && g->forbid[(size_t)g->base[sv] * (size_t)g->nc + (size_t)c];
}

static int kg_split(kg_t *g, int b) {
  if (g->chunk[b] < 0 || g->fill[b] == g->cap[b]) {
    g->chunk[b] = g->nv++;
    g->base[g->chunk[b]] = b;
    g->fill[b] = 0;
  }
  g->fill[b]++;
  return g->chunk[b];
}

static int kg_other(const kg_t *g, int e, int x) { return g->eu[e] == x ? g->ev[e] : g->eu[e]; }

/* Swaps colours a and b along the alternating path that leaves `start` on its a-edge, unless an
 * edge would land on a colour forbidden at one of its ends. Returns 1 when swapped. */
static int kg_flip(kg_t *g, int *color, int start, int a, int b, int *path) {
  int nc = g->nc, np = 0, x = start, c = a;
  while (g->at[(size_t)x * nc + c] >= 0) {
    int pe = g->at[(size_t)x * nc + c];
    path[np++] = pe;
    x = kg_other(g, pe, x);
    c = c == a ? b : a;
  }
  for (int i = 0; i < np; i++) {
    int to = color[path[i]] == a ? b : a;
    if (kg_forbidden(g, g->eu[path[i]], to) || kg_forbidden(g, g->ev[path[i]], to)) return 0;
  }
  for (int i = 0; i < np; i++) {
    int pe = path[i];
    g->at[(size_t)g->eu[pe] * nc + color[pe]] = -1;
    g->at[(size_t)g->ev[pe] * nc + color[pe]] = -1;
  }
  for (int i = 0; i < np; i++) {
    int pe = path[i];
    color[pe] = color[pe] == a ? b : a;
    g->at[(size_t)g->eu[pe] * nc + color[pe]] = pe;
    g->at[(size_t)g->ev[pe] * nc + color[pe]] = pe;
  }
  return 1;
}

/* Colours edge e = (u, v), with a Kempe swap where needed: for a colour a free at u and b free at
 * v, swapping a/b on the path from v frees a at v (the path cannot reach u, which lacks a, in a
 * bipartite graph), or swapping b/a on the path from u frees b at u. Returns the colour, or -1 when
 * every swap would move a flow onto a failed link (the caller then falls back). */
static int kg_color(kg_t *g, int *color, int e, int *path) {
  int u = g->eu[e], v = g->ev[e], nc = g->nc;
  int *atu = &g->at[(size_t)u * nc], *atv = &g->at[(size_t)v * nc];
  for (int a = 0; a < nc; a++)
    if (atu[a] < 0 && atv[a] < 0 && !kg_forbidden(g, u, a) && !kg_forbidden(g, v, a)) {
      atu[a] = atv[a] = e;
      return color[e] = a;
    }
  for (int a = 0; a < nc; a++) {
    if (atu[a] >= 0 || kg_forbidden(g, u, a)) continue;
    for (int b = 0; b < nc; b++) {
      if (b == a || atv[b] >= 0 || kg_forbidden(g, v, b)) continue;
      if (!kg_forbidden(g, v, a) && kg_flip(g, color, v, a, b, path)) {
        atu[a] = atv[a] = e;
        return color[e] = a;
      }
      if (!kg_forbidden(g, u, b) && kg_flip(g, color, u, b, a, path)) {
        atu[b] = atv[b] = e;
        return color[e] = b;
      }
    }
  }
  return -1;
}

/* Search state of repair's alternating chains. */
typedef struct {
  const int *src, *dst, *ideal, *adj, *adj_start;
  const unsigned char *forbid;
  int nc, stamp;
  int *color, *load, *seen, *onpath;
} chain_t;

/* Edge e, held at vertex `at`, goes from colour `from` to `to`. Its other end w then holds one more
 * `to` and one less `from`: fine when w has room for `to`; otherwise an edge of colour `to` at w goes
 * to `from`, and so on along the chain (a Kempe chain over the loads). Moves are applied on the way
 * back when the chain ends at a vertex with room. Each (vertex, colour) is tried once per search. */
static int chain_move(chain_t *k, int at, int e, int from, int to) {
  int nc = k->nc, w = k->src[e] == at ? k->dst[e] : k->src[e];
  if (k->forbid && k->forbid[(size_t)w * nc + to]) return 0;
  int ok = k->load[(size_t)w * nc + to] < k->ideal[w];
  if (!ok) {
    if (k->seen[(size_t)w * nc + to] == k->stamp) return 0;
    k->seen[(size_t)w * nc + to] = k->stamp;
    k->onpath[e] = 1;
    for (int a = k->adj_start[w]; a < k->adj_start[w + 1] && !ok; a++) {
      int f = k->adj[a];
      if (f != e && !k->onpath[f] && k->color[f] == to) ok = chain_move(k, w, f, to, from);
    }
    k->onpath[e] = 0;
  }
  if (ok) {
    k->load[(size_t)k->src[e] * nc + from]--, k->load[(size_t)k->dst[e] * nc + from]--;
    k->color[e] = to;
    k->load[(size_t)k->src[e] * nc + to]++, k->load[(size_t)k->dst[e] * nc + to]++;
  }
  return ok;
}

/* Kempe chains over the loads: for each vertex holding a colour above its ideal, move one of those
 * edges to a colour the vertex has room for, along an alternating chain (chain_move). */
static void repair_chains(int nedges, const int *src, const int *dst, int nbase,
                          const unsigned char *forbid, int nc, const int *ideal, int *color,
                          int *load) {
  chain_t k = {.src = src,
               .dst = dst,
               .ideal = ideal,
               .forbid = forbid,
               .nc = nc,
               .color = color,
               .load = load};
  int *adj_start = calloc((size_t)nbase + 1, sizeof *adj_start),
      *adj = malloc((size_t)(2 * nedges + 1) * sizeof *adj);
  int *fill = calloc((size_t)nbase + 1, sizeof *fill);
  k.seen = calloc((size_t)nbase * (size_t)nc, sizeof *k.seen);
  k.onpath = calloc((size_t)nedges + 1, sizeof *k.onpath);
  if (!adj_start || !adj || !fill || !k.seen || !k.onpath) goto out;
  for (int e = 0; e < nedges; e++) adj_start[src[e] + 1]++, adj_start[dst[e] + 1]++;
  for (int b = 0; b < nbase; b++) adj_start[b + 1] += adj_start[b];
  for (int e = 0; e < nedges; e++) {
    adj[adj_start[src[e]] + fill[src[e]]++] = e;
    adj[adj_start[dst[e]] + fill[dst[e]]++] = e;
  }
  k.adj = adj;
  k.adj_start = adj_start;
  for (int pass = 0, improved = 1; improved && pass < 16; pass++) {
    improved = 0;
    for (int b = 0; b < nbase; b++)
      for (int x = 0; x < nc; x++)
        for (int a = adj_start[b]; a < adj_start[b + 1] && load[(size_t)b * nc + x] > ideal[b];
             a++) {
          int e = adj[a], moved = 0;
          if (color[e] != x) continue;
          for (int c = 0; c < nc && !moved; c++) {
            if (c == x || (forbid && forbid[(size_t)b * nc + c]) ||
                load[(size_t)b * nc + c] >= ideal[b])
              continue;
            k.stamp++;
            moved = chain_move(&k, b, e, x, c);
          }
          improved |= moved;
        }
  }
out:
  free(adj_start);
  free(adj);
  free(fill);
  free(k.seen);
  free(k.onpath);
}

/* Moves flows off links above their vertex's ideal (ceil(degree / legal colours)): directly to a
 * colour with room at both ends, or by first moving a flow out of the way at the full end. Needed
 * only where failed links made a Kempe swap impossible. Returns the flows still above ideal. */
static int repair(int nedges, const int *src, const int *dst, int nbase,
                  const unsigned char *forbid, int nc, int *color, int *load) {
  int excess = 0;
  int *ideal = calloc((size_t)nbase, sizeof *ideal), *deg = calloc((size_t)nbase, sizeof *deg);
  if (!ideal || !deg) {
    excess = 1 << 30;
    goto out;
  }
  for (int e = 0; e < nedges; e++) deg[src[e]]++, deg[dst[e]]++;
  for (int b = 0; b < nbase; b++) {
    int legal = 0;
    for (int c = 0; c < nc; c++) legal += !(forbid && forbid[(size_t)b * nc + c]);
    ideal[b] = legal ? (deg[b] + legal - 1) / legal : deg[b];
  }
#define LEGAL(b, c) (!(forbid && forbid[(size_t)(b)*nc + (c)]))
#define LOAD(b, c) load[(size_t)(b)*nc + (c)]
#define ROOM(b, c) (LEGAL(b, c) && LOAD(b, c) < ideal[b])
#define MOVE(e, c)                                                                                 \
  (LOAD(src[e], color[e])--, LOAD(dst[e], color[e])--, color[e] = (c), LOAD(src[e], c)++,          \
   LOAD(dst[e], c)++)
  for (int pass = 0, improved = 1; improved && pass < 64; pass++) {
    improved = 0;
    for (int e = 0; e < nedges; e++) {
      int x = color[e];
      if (x < 0 || (LOAD(src[e], x) <= ideal[src[e]] && LOAD(dst[e], x) <= ideal[dst[e]])) continue;
      int done = 0;
      for (int c = 0; c < nc && !done; c++)
        if (c != x && ROOM(src[e], c) && ROOM(dst[e], c)) MOVE(e, c), done = 1;
      /* one end has room for c, the other is full at c: move one of its c flows elsewhere first */
      for (int c = 0; c < nc && !done; c++) {
        if (c == x || !LEGAL(src[e], c) || !LEGAL(dst[e], c)) continue;
        int full = ROOM(src[e], c) ? dst[e] : ROOM(dst[e], c) ? src[e] : -1;
        if (full < 0) continue;
        for (int f = 0; f < nedges && !done; f++) {
          if (f == e || color[f] != c || (src[f] != full && dst[f] != full)) continue;
          for (int d = 0; d < nc && !done; d++)
            if (d != c && ROOM(src[f], d) && ROOM(dst[f], d)) MOVE(f, d), MOVE(e, c), done = 1;
        }
      }
      improved |= done;
    }
  }
  repair_chains(nedges, src, dst, nbase, forbid, nc, ideal, color, load);
  for (int b = 0; b < nbase; b++)
    for (int c = 0; c < nc; c++) excess += LOAD(b, c) > ideal[b] ? LOAD(b, c) - ideal[b] : 0;
#undef LEGAL
#undef LOAD
#undef ROOM
#undef MOVE
out:
  free(ideal);
  free(deg);
  return excess;
}

/* load[base][colour] = the first n edges' colours at their ends. */
static void recount(int n, const int *src, const int *dst, int nbase, int nc, const int *color,
                    int *load) {
  memset(load, 0, (size_t)nbase * (size_t)nc * sizeof *load);
  for (int e = 0; e < n; e++)
    if (color[e] >= 0)
      load[(size_t)src[e] * nc + color[e]]++, load[(size_t)dst[e] * nc + color[e]]++;
}

/* One colouring in the given edge order (see ah_path_equitable_color). Returns the flows left above their
 * link's ideal, or -1 when out of memory. */
static int color_attempt(int nedges, const int *src, const int *dst, int nbase, const int *cap,
                         const unsigned char *forbid, int nc, const int *order, int *color) {
  kg_t g = {.nc = nc, .forbid = forbid, .cap = cap};
  size_t nsv = (size_t)2 * nedges + (size_t)nbase + 1;
  g.at = malloc(nsv * (size_t)nc * sizeof *g.at);
  g.base = calloc(nsv, sizeof *g.base);
  g.chunk = malloc((size_t)nbase * sizeof *g.chunk);
  g.fill = calloc((size_t)nbase, sizeof *g.fill);
  g.eu = malloc((size_t)(nedges + 1) * sizeof *g.eu);
  g.ev = malloc((size_t)(nedges + 1) * sizeof *g.ev);
  int *path = malloc((size_t)(nedges + 1) * sizeof *path);
  int *load = calloc((size_t)nbase * (size_t)nc, sizeof *load);
  int rc = -1;
  if (!g.at || !g.base || !g.chunk || !g.fill || !g.eu || !g.ev || !path || !load) goto out;
  memset(g.at, 0xFF, nsv * (size_t)nc * sizeof *g.at);
  for (int b = 0; b < nbase; b++) g.chunk[b] = -1;
  for (int e = 0; e < nedges; e++) color[e] = -1;
  for (int oi = 0; oi < nedges; oi++) {
    int e = order[oi];
    g.eu[e] = kg_split(&g, src[e]);
    g.ev[e] = kg_split(&g, dst[e]);
    if (kg_color(&g, color, e, path) < 0) {
      /* loads from the colours as they are now (swaps recolour earlier edges) */
      recount(nedges, src, dst, nbase, nc, color, load);
      int best = -1, bl = 0;
      for (int c = 0; c < nc; c++) {
        if (forbid && (forbid[(size_t)src[e] * nc + c] || forbid[(size_t)dst[e] * nc + c]))
          continue;
        int l = load[(size_t)src[e] * nc + c] > load[(size_t)dst[e] * nc + c]
                    ? load[(size_t)src[e] * nc + c]
                    : load[(size_t)dst[e] * nc + c];
        if (best < 0 || l < bl) best = c, bl = l;
      }
      color[e] = best; /* -1 only when no legal colour exists at all */
    }
  }
  recount(nedges, src, dst, nbase, nc, color, load);
  rc = repair(nedges, src, dst, nbase, forbid, nc, color, load);
out:
  free(g.at);
  free(g.base);
  free(g.chunk);
  free(g.fill);
  free(g.eu);
  free(g.ev);
  free(path);
  free(load);
  return rc;
}

/* ah_path_color.h tells what this computes. */
int ah_path_equitable_color(int nedges, const int *src, const int *dst, int nbase, const int *cap,
                            const unsigned char *forbid, int nc, int *color) {
  int *order = malloc((size_t)(nedges + 1) * sizeof *order),
      *trial = malloc((size_t)(nedges + 1) * sizeof *trial);
  int rc = -1, best = -1, nconstrained = 0;
  uint64_t rng = 0x9E3779B97F4A7C15ull;
  if (!order || !trial) goto out;
  /* Edges at a vertex with a forbidden colour (a failed link) first: swaps made later for the
   * unconstrained ones can route around them, the other way round they often cannot. */
  int no = 0;
  for (int pass = 0; pass < 2; pass++)
    for (int e = 0; e < nedges; e++) {
      int constrained = 0;
      for (int c = 0; forbid && c < nc && !constrained; c++)
        constrained = forbid[(size_t)src[e] * nc + c] || forbid[(size_t)dst[e] * nc + c];
      if (constrained == (pass == 0)) order[no++] = e;
      nconstrained += pass == 0 && constrained;
    }
  for (int attempt = 0; attempt < 16 && best != 0; attempt++) {
    if (attempt > 0) /* shuffle within the constrained and the unconstrained part */
      for (int part = 0; part < 2; part++) {
        int lo = part ? nconstrained : 0, hi = part ? nedges : nconstrained;
        for (int i = hi - 1; i > lo; i--) {
          rng = rng * 6364136223846793005ull + 1442695040888963407ull;
          int j = lo + (int)((rng >> 33) % (uint64_t)(i - lo + 1)), x = order[i];
          order[i] = order[j], order[j] = x;
        }
      }
    int excess =
        color_attempt(nedges, src, dst, nbase, cap, forbid, nc, order, attempt ? trial : color);
    if (excess < 0) goto out;
    if (attempt == 0) best = excess;
    else if (excess < best) best = excess, memcpy(color, trial, (size_t)nedges * sizeof *color);
  }
  rc = 0;
out:
  free(order);
  free(trial);
  return rc;
}
