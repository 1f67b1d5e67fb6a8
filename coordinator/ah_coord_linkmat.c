/* Slow-link localisation from a communicator's matrix of connection rates (ah_coord_linkmat.h).
 *
 * Each window is judged alone, then folded into the targets' histories: a target (a cell, a row,
 * a column) is created when first found slow, keeps its last AH_LM_WINDOWS verdicts of the windows
 * it was measured in, is reported once AH_LM_PERSIST of them are slow and cleared once all are
 * fast. A row or column found slow explains its cells, which are then not judged as cells that
 * window: one slow NIC is one finding, not one per peer. Key choice: the reference is the median
 * cell of the same window, so whatever slows every connection alike (a smaller message size, a
 * loaded host, the ring waiting for compute) moves the reference with them and reads as nothing;
 * and it is the median connection, not the median cell, because a cell reads at its slowest
 * connection: with one degraded link in the paths of half the cells, the median cell would be half
 * slow itself, while most connections still run at speed. */
#include "ah_coord_linkmat.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_uthash.h"

typedef struct {
  uint64_t key; /* kind << 60 | a << 30 | b */
  int kind;
  uint32_t a, b;
  uint8_t hist; /* the latest verdict in bit 0, 1 = slow */
  int nmeas;    /* verdicts in hist (up to AH_LM_WINDOWS) */
  int idle;     /* windows since it was last measured */
  int flagged;
  int seen; /* measured in the window being judged */
  UT_hash_handle hh;
} target_t;

/* A connection of the window: its measurement and, once judged, its rate. */
typedef struct {
  ah_lm_conn_t c;
  double rate;
  int slow;
} conn_t;

/* A cell of the window being judged: its connections are conns[first .. first + n). */
typedef struct {
  uint32_t src, dst;
  int first, n;
  double rate; /* its slowest connection's */
  int worst;   /* that connection */
  int slow;
  int explained; /* its row or column is slow */
} cell_t;

#define EVENTS 64

struct ah_lm {
  uint32_t nranks;
  ah_lm_opts_t o;
  conn_t *conns; /* the window being filled */
  int nconns, capconns;
  target_t *targets;
  ah_lm_event_t ev[EVENTS]; /* ring of events not taken yet */
  int ev_head, ev_n;
  double burst[AH_LM_BURST]; /* when the latest slow findings were made (a ring) */
  int nburst;
  uint32_t suppressed;
  ah_lm_stats_t st;
};

void ah_lm_opts_default(ah_lm_opts_t *o_p) {
  o_p->pct = 20;
  o_p->min_bytes = 64 * 1024;
  o_p->min_wrs = 2;
  o_p->min_cells = 3;
}

ah_lm_t *ah_lm_new(uint32_t nranks, const ah_lm_opts_t *opts) {
  ah_lm_opts_t d;
  ah_lm_opts_default(&d);
  if (!opts) opts = &d;
  if (nranks == 0 || nranks >= (1u << 30) || !(opts->pct > 0 && opts->pct < 100) ||
      opts->min_cells < 2 || !(opts->min_bytes >= 0))
    return NULL;
  ah_lm_t *lm = calloc(1, sizeof *lm);
  if (!lm) return NULL;
  lm->nranks = nranks;
  lm->o = *opts;
  return lm;
}

void ah_lm_free(ah_lm_t *lm) {
  if (!lm) return;
  target_t *t, *tmp;
  HASH_ITER(hh, lm->targets, t, tmp) {
    HASH_DEL(lm->targets, t);
    free(t);
  }
  free(lm->conns);
  free(lm);
}

void ah_lm_add(ah_lm_t *lm, const ah_lm_conn_t *c) {
  if (c->src >= lm->nranks || c->dst >= lm->nranks || c->src == c->dst) return;
  if (!(c->bytes >= 0) || !(c->busy_s >= 0) || !isfinite(c->bytes) || !isfinite(c->busy_s)) return;
  if (lm->nconns == lm->capconns) {
    int cap = lm->capconns ? 2 * lm->capconns : 64;
    conn_t *n = realloc(lm->conns, (size_t)cap * sizeof *n);
    if (!n) return; /* a window judged without it */
    lm->conns = n;
    lm->capconns = cap;
  }
  conn_t *k = &lm->conns[lm->nconns++];
  memset(k, 0, sizeof *k);
  k->c = *c;
  if (k->c.nhops < 0) k->c.nhops = 0;
  if (k->c.nhops > AH_LM_HOPS) k->c.nhops = AH_LM_HOPS;
}

static int cmp_conn(const void *a, const void *b) {
  const conn_t *x = a, *y = b;
  if (x->c.src != y->c.src) return x->c.src < y->c.src ? -1 : 1;
  if (x->c.dst != y->c.dst) return x->c.dst < y->c.dst ? -1 : 1;
  return (x->c.id > y->c.id) - (x->c.id < y->c.id);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The median of v[0..n) (n > 0), sorted in place: the mean of the middle two for an even n. */
static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n & 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static target_t *target_get(ah_lm_t *lm, int kind, uint32_t a, uint32_t b, int create) {
  uint64_t key = (uint64_t)kind << 60 | (uint64_t)a << 30 | b;
  target_t *t = NULL;
  HASH_FIND(hh, lm->targets, &key, sizeof key, t);
  if (t || !create) return t;
  if (!(t = calloc(1, sizeof *t))) return NULL;
  t->key = key;
  t->kind = kind;
  t->a = a;
  t->b = b;
  HASH_ADD(hh, lm->targets, key, sizeof t->key, t);
  if (!AH_HASH_ADDED(t)) {
    free(t);
    return NULL;
  }
  return t;
}

static int popcount(unsigned v) { return __builtin_popcount(v); }

static ah_lm_event_t *event_push(ah_lm_t *lm) {
  if (lm->ev_n == EVENTS) { /* not taken for long: the oldest goes */
    lm->ev_head = (lm->ev_head + 1) % EVENTS;
    lm->ev_n--;
  }
  ah_lm_event_t *e = &lm->ev[(lm->ev_head + lm->ev_n++) % EVENTS];
  memset(e, 0, sizeof *e);
  return e;
}

/* Whether another slow finding may be made at now_s (at most AH_LM_BURST in AH_LM_BURST_S). */
static int burst_allows(ah_lm_t *lm, double now_s) {
  if (lm->nburst < AH_LM_BURST) return 1;
  double oldest = lm->burst[lm->nburst % AH_LM_BURST];
  return now_s - oldest >= AH_LM_BURST_S;
}

static void burst_note(ah_lm_t *lm, double now_s) {
  lm->burst[lm->nburst % AH_LM_BURST] = now_s;
  lm->nburst++;
}

/* The window's view of a target: which cells it covers. */
static int covers(const target_t *t, const cell_t *c) {
  if (t->kind == AH_LM_CELL) return c->src == t->a && c->dst == t->b;
  if (t->kind == AH_LM_ROW) return c->src == t->a;
  return c->dst == t->a;
}

/* Fills e's figures from the target's cells in the window: the slowest connection, the counts,
 * and the hop its slow connections cross that no connection at speed crosses. */
static void evidence(const ah_lm_t *lm, const target_t *t, const cell_t *cells, int ncells,
                     ah_lm_event_t *e) {
  const conn_t *k = lm->conns;
  int worst = -1;
  for (int i = 0; i < ncells; i++) {
    const cell_t *c = &cells[i];
    if (!covers(t, c)) continue;
    e->ncells++;
    e->nconns += c->n;
    for (int j = c->first; j < c->first + c->n; j++) e->nslow += k[j].slow;
    if (worst < 0 || k[c->worst].rate < k[worst].rate) worst = c->worst;
  }
  e->src = t->kind == AH_LM_COL ? 0 : t->a;
  e->dst = t->kind == AH_LM_CELL ? t->b : t->kind == AH_LM_COL ? t->a : 0;
  if (worst < 0) return;
  e->rate = k[worst].rate;
  e->worst = k[worst].c.id;
  if (t->kind == AH_LM_ROW) e->dst = k[worst].c.dst;
  if (t->kind == AH_LM_COL) e->src = k[worst].c.src;
  /* the hops of the slowest connection's path, each scored by the window's slow connections that
   * cross it (one fault slows every connection through it, in any cell); one that a connection at
   * speed crosses is not the culprit */
  const ah_lm_conn_t *w = &k[worst].c;
  int score[AH_LM_HOPS] = {0}, best = 0;
  for (int h = 0; h < w->nhops; h++) {
    int clean = 1, n = 0;
    for (int j = 0; j < lm->nconns && clean; j++)
      for (int x = 0; x < k[j].c.nhops; x++)
        if (k[j].c.hops[x] == w->hops[h]) {
          if (!k[j].slow) clean = 0;
          n++;
          break;
        }
    if (!clean) continue;
    score[h] = n;
    if (score[h] > best) best = score[h];
  }
  for (int h = 0; h < w->nhops && best > 0 && e->nhop < AH_LM_HOPS; h++)
    if (score[h] == best) e->hop[e->nhop++] = w->hops[h];
  e->hop_slow = best;
}

/* One verdict for target t (slow or not) in this window; reports and clears. */
static void verdict(ah_lm_t *lm, target_t *t, int slow, double now_s, double window_s, double ref,
                    const cell_t *cells, int ncells) {
  t->seen = 1;
  t->idle = 0;
  t->hist = (uint8_t)((t->hist << 1 | (slow ? 1 : 0)) & ((1u << AH_LM_WINDOWS) - 1));
  if (t->nmeas < AH_LM_WINDOWS) t->nmeas++;
  int nslow = popcount(t->hist);
  if (!t->flagged && nslow >= AH_LM_PERSIST) {
    if (!burst_allows(lm, now_s)) {
      lm->suppressed++;
      return; /* kept: reported once the burst allows, if it still holds */
    }
    burst_note(lm, now_s);
    t->flagged = 1;
    ah_lm_event_t *e = event_push(lm);
    e->kind = t->kind;
    e->ref = ref;
    e->window_s = window_s;
    e->slow = nslow;
    e->windows = t->nmeas;
    evidence(lm, t, cells, ncells, e);
    e->suppressed = lm->suppressed;
  } else if (t->flagged && t->nmeas >= AH_LM_WINDOWS && nslow == 0) {
    t->flagged = 0;
    ah_lm_event_t *e = event_push(lm);
    e->kind = t->kind;
    e->cleared = 1;
    e->ref = ref;
    e->window_s = window_s;
    e->windows = t->nmeas;
    evidence(lm, t, cells, ncells, e);
  }
}

/* A target judged this window, or created now, slow. */
static void judge(ah_lm_t *lm, int kind, uint32_t a, uint32_t b, int slow, double now_s,
                  double window_s, double ref, const cell_t *cells, int ncells) {
  target_t *t = target_get(lm, kind, a, b, slow);
  if (t) verdict(lm, t, slow, now_s, window_s, ref, cells, ncells);
}

/* Counts per rank of measured and slow cells, as a row (src) or a column (dst). */
typedef struct {
  int n, slow;
} line_t;

int ah_lm_close(ah_lm_t *lm, double now_s, double window_s) {
  int before = lm->ev_n;
  conn_t *k = lm->conns;
  /* a connection added more than once adds up (sorted, its entries are neighbours) */
  if (lm->nconns > 1) qsort(k, (size_t)lm->nconns, sizeof *k, cmp_conn); /* none: conns NULL */
  int u = 0;
  for (int i = 0; i < lm->nconns; i++) {
    if (u && k[u - 1].c.id == k[i].c.id && k[u - 1].c.src == k[i].c.src &&
        k[u - 1].c.dst == k[i].c.dst) {
      k[u - 1].c.bytes += k[i].c.bytes;
      k[u - 1].c.busy_s += k[i].c.busy_s;
      k[u - 1].c.wrs += k[i].c.wrs;
      continue;
    }
    k[u++] = k[i];
  }
  lm->nconns = u;
  /* the measured connections, grouped into cells (still in order) */
  int m = 0;
  for (int i = 0; i < lm->nconns; i++)
    if (k[i].c.bytes >= lm->o.min_bytes && k[i].c.bytes > 0 && k[i].c.busy_s > 0 &&
        k[i].c.wrs >= lm->o.min_wrs) {
      k[m] = k[i];
      k[m].rate = k[m].c.bytes / k[m].c.busy_s;
      m++;
    }
  lm->nconns = m;
  cell_t *cells = m ? malloc((size_t)m * sizeof *cells) : NULL;
  double *rates = m ? malloc((size_t)m * sizeof *rates) : NULL;
  line_t *rows = calloc(lm->nranks, sizeof *rows), *cols = calloc(lm->nranks, sizeof *cols);
  int ncells = 0;
  if ((m && (!cells || !rates)) || !rows || !cols) goto free_window;
  for (int i = 0; i < m; i++) {
    if (!ncells || cells[ncells - 1].src != k[i].c.src || cells[ncells - 1].dst != k[i].c.dst)
      cells[ncells++] = (cell_t){k[i].c.src, k[i].c.dst, i, 0, k[i].rate, i, 0, 0};
    cell_t *c = &cells[ncells - 1];
    c->n++;
    if (k[i].rate < c->rate) c->rate = k[i].rate, c->worst = i;
  }
  for (target_t *t = lm->targets; t; t = t->hh.next) t->seen = 0;
  if (ncells >= lm->o.min_cells) {
    for (int i = 0; i < m; i++) rates[i] = k[i].rate;
    double ref = median(rates, m), thr = ref * lm->o.pct / 100;
    int nslow = 0;
    for (int i = 0; i < m; i++) k[i].slow = k[i].rate < thr;
    for (int i = 0; i < ncells; i++) {
      cell_t *c = &cells[i];
      c->slow = c->rate < thr;
      nslow += c->slow;
      rows[c->src].n++, rows[c->src].slow += c->slow;
      cols[c->dst].n++, cols[c->dst].slow += c->slow;
    }
    lm->st.windows++;
    lm->st.cells = ncells;
    lm->st.slow = nslow;
    lm->st.ref = ref;
    /* rows and columns of two cells or more: all slow is the source's or destination's */
    for (uint32_t r = 0; r < lm->nranks; r++) {
      if (rows[r].n >= 2)
        judge(lm, AH_LM_ROW, r, 0, rows[r].slow == rows[r].n, now_s, window_s, ref, cells, ncells);
      if (cols[r].n >= 2)
        judge(lm, AH_LM_COL, r, 0, cols[r].slow == cols[r].n, now_s, window_s, ref, cells, ncells);
    }
    for (int i = 0; i < ncells; i++) {
      cell_t *c = &cells[i];
      const line_t *row = &rows[c->src], *col = &cols[c->dst];
      c->explained = (row->n >= 2 && row->slow == row->n) || (col->n >= 2 && col->slow == col->n);
      if (!c->explained)
        judge(lm, AH_LM_CELL, c->src, c->dst, c->slow, now_s, window_s, ref, cells, ncells);
    }
  }
  /* targets not measured this window age, and go once long unmeasured or quiet */
  target_t *t, *tmp;
  HASH_ITER(hh, lm->targets, t, tmp) {
    if (!t->seen) t->idle++;
    if (t->idle > AH_LM_IDLE || (!t->flagged && t->nmeas >= AH_LM_WINDOWS && t->hist == 0)) {
      HASH_DEL(lm->targets, t);
      free(t);
    }
  }
  int flagged = 0;
  for (t = lm->targets; t; t = t->hh.next) flagged += t->flagged;
  lm->st.flagged = flagged;
free_window:
  free(cells);
  free(rates);
  free(rows);
  free(cols);
  lm->nconns = 0;
  return lm->ev_n - before;
}

int ah_lm_next(ah_lm_t *lm, ah_lm_event_t *ev) {
  if (!lm->ev_n) return 0;
  *ev = lm->ev[lm->ev_head];
  lm->ev_head = (lm->ev_head + 1) % EVENTS;
  lm->ev_n--;
  return 1;
}

void ah_lm_stats(const ah_lm_t *lm, ah_lm_stats_t *st) { *st = lm->st; }

/* Bytes per second as Gb/s. */
static double gbps(double bytes_s) { return bytes_s * 8 / 1e9; }

void ah_lm_text(uint64_t comm, const ah_lm_event_t *ev, const char *src_who, const char *dst_who,
                const char *where, char *text, size_t len) {
  const char *sep = where && where[0] ? ": " : "";
  if (!where) where = "";
  double pct = ev->ref > 0 ? 100 * ev->rate / ev->ref : 0;
  if (ev->cleared) {
    if (ev->kind == AH_LM_CELL)
      snprintf(text, len,
               "comm %016llx: rank %u -> rank %u is at speed again: %.2f Gb/s, median %.2f",
               (unsigned long long)comm, ev->src, ev->dst, gbps(ev->rate), gbps(ev->ref));
    else
      snprintf(text, len,
               "comm %016llx: every connection %s rank %u is at speed again: slowest %.2f Gb/s, "
               "median %.2f",
               (unsigned long long)comm, ev->kind == AH_LM_ROW ? "from" : "to",
               ev->kind == AH_LM_ROW ? ev->src : ev->dst, gbps(ev->rate), gbps(ev->ref));
    return;
  }
  if (ev->kind == AH_LM_CELL)
    snprintf(text, len,
             "slow link on comm %016llx: rank %u (%s) -> rank %u (%s) at %.2f Gb/s, %.1f%% of the "
             "median %.2f%s%s",
             (unsigned long long)comm, ev->src, src_who, ev->dst, dst_who, gbps(ev->rate), pct,
             gbps(ev->ref), sep, where);
  else
    snprintf(text, len,
             "slow link on comm %016llx: every connection %s rank %u (%s), %d peers, at %.2f "
             "Gb/s or less, %.1f%% of the median %.2f%s%s",
             (unsigned long long)comm, ev->kind == AH_LM_ROW ? "from" : "to",
             ev->kind == AH_LM_ROW ? ev->src : ev->dst, ev->kind == AH_LM_ROW ? src_who : dst_who,
             ev->ncells, gbps(ev->rate), pct, gbps(ev->ref), sep, where);
}
