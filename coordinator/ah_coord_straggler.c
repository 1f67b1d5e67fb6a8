/* Straggler detection from sampled call durations (ah_coord_straggler.h).
 *
 * A sampled call waits in a pending slot until every rank has reported its duration; then each
 * rank's lateness in it goes into the rank's window of that key, and a rank late beyond the
 * threshold and the call's jitter in three calls of four of a window (or, once flagged, whose
 * median lateness falls below half the threshold) yields an event. One late call (a page fault, a preempted host) counts
 * for nothing, nor does a rank late every other call; the hysteresis keeps a rank near the
 * threshold from flapping. */
#include "ah_coord_straggler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_names.h"
#include "ah_size.h"

typedef struct {
  int used;
  uint8_t coll, bin;
  uint64_t index;
  uint32_t have; /* ranks that reported */
  uint64_t born_ns;
  float *us; /* per rank, NAN: not yet (allocated once, kept with the slot) */
} pending_t;

/* One rank's latest judged calls of one key. */
typedef struct {
  float late[AH_STRAG_WINDOW];       /* lateness per call, share of the call's median duration */
  float wait[AH_STRAG_WINDOW];       /* when it arrived last: the median rank's wait for it, us */
  float med[AH_STRAG_WINDOW];        /* the call's median duration, us */
  uint8_t late_sig[AH_STRAG_WINDOW]; /* late beyond the threshold and beyond the call's jitter */
  int head, n;                       /* oldest entry (once full), entries */
  int flagged;
} rank_win_t;

/* A key's windows, one per rank. Keys are judged apart: a rank whose GPU computes slowly is late
 * in the calls that follow its compute and on time in those that follow other calls, so over all
 * keys at once it would look late half the time. */
typedef struct {
  int used;
  uint8_t coll, bin;
  rank_win_t *win;
} key_win_t;

#define EVENTS 256

struct ah_strag {
  uint32_t nranks;
  double pct;
  pending_t pend[AH_STRAG_PENDING];
  key_win_t keys[AH_STRAG_KEYS];
  int *nflagged;               /* per rank: keys it is flagged in */
  float *sorted;               /* scratch: one call's durations, then lateness */
  ah_strag_event_t ev[EVENTS]; /* ring of flag changes not taken yet */
  int ev_head, ev_n;
  uint64_t judged, dropped;
};

ah_strag_t *ah_strag_new(uint32_t nranks, double pct) {
  if (nranks == 0 || !(pct > 0 && pct < 100)) return NULL;
  ah_strag_t *s = calloc(1, sizeof *s);
  if (!s) return NULL;
  s->nranks = nranks;
  s->pct = pct;
  s->nflagged = calloc(nranks, sizeof *s->nflagged);
  s->sorted = calloc(nranks, sizeof *s->sorted);
  if (!s->nflagged || !s->sorted) {
    ah_strag_free(s);
    return NULL;
  }
  return s;
}

size_t ah_strag_held(const ah_strag_t *s) {
  if (!s) return 0;
  size_t n = sizeof *s + (size_t)s->nranks * (sizeof *s->nflagged + sizeof *s->sorted);
  for (int i = 0; i < AH_STRAG_PENDING; i++)
    if (s->pend[i].us) n += (size_t)s->nranks * sizeof *s->pend[i].us;
  for (int i = 0; i < AH_STRAG_KEYS; i++)
    if (s->keys[i].win) n += (size_t)s->nranks * sizeof *s->keys[i].win;
  return n;
}

void ah_strag_free(ah_strag_t *s) {
  if (!s) return;
  for (int i = 0; i < AH_STRAG_PENDING; i++) free(s->pend[i].us);
  for (int i = 0; i < AH_STRAG_KEYS; i++) free(s->keys[i].win);
  free(s->nflagged);
  free(s->sorted);
  free(s);
}

static int cmp_float(const void *a, const void *b) {
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

/* The q-quantile (0..1) of n values, sorted in place, interpolated between neighbours (so the
 * median of an even count is the mean of the middle two). */
static float quantile(float *v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmp_float);
  double at = q * (n - 1);
  int i = (int)at;
  if (i + 1 >= n) return v[n - 1];
  return (float)(v[i] + (at - i) * (v[i + 1] - v[i]));
}

static void win_stats(const ah_strag_t *s, const rank_win_t *w, ah_strag_stats_t *st) {
  memset(st, 0, sizeof *st);
  float v[AH_STRAG_WINDOW];
  double wait = 0, med = 0;
  for (int i = 0; i < w->n; i++) {
    v[i] = w->late[i];
    st->late_calls += w->late_sig[i];
    wait += w->wait[i];
    med += w->med[i];
  }
  st->calls = w->n;
  st->flagged = w->flagged;
  if (w->n == 0) return;
  st->late_p50 = quantile(v, w->n, 0.5);
  st->late_p90 = quantile(v, w->n, 0.9);
  st->wait_share = med > 0 ? wait / med : 0;
}

void ah_strag_stats(const ah_strag_t *s, uint32_t rank, ah_strag_stats_t *st) {
  memset(st, 0, sizeof *st);
  if (rank >= s->nranks) return;
  /* the key it is latest in speaks for it */
  for (int k = 0; k < AH_STRAG_KEYS; k++) {
    if (!s->keys[k].used) continue;
    ah_strag_stats_t ks;
    win_stats(s, &s->keys[k].win[rank], &ks);
    if (ks.calls && (!st->calls || ks.late_p50 > st->late_p50)) *st = ks;
  }
  st->flagged = s->nflagged[rank] > 0;
}

static void event_push(ah_strag_t *s, uint32_t rank, int flagged, const rank_win_t *w,
                       const pending_t *p) {
  if (s->ev_n == EVENTS) { /* not taken for long: the oldest goes (the flag itself is kept) */
    s->ev_head = (s->ev_head + 1) % EVENTS;
    s->ev_n--;
  }
  ah_strag_event_t *e = &s->ev[(s->ev_head + s->ev_n++) % EVENTS];
  e->rank = rank;
  e->flagged = flagged;
  win_stats(s, w, &e->st);
  e->coll = p->coll;
  e->bin = p->bin;
  e->index = p->index;
}

/* The windows of p's key; NULL when AH_STRAG_KEYS other keys hold every slot. */
static key_win_t *key_wins(ah_strag_t *s, const pending_t *p) {
  key_win_t *free_slot = NULL;
  for (int k = 0; k < AH_STRAG_KEYS; k++) {
    key_win_t *kw = &s->keys[k];
    if (kw->used && kw->coll == p->coll && kw->bin == p->bin) return kw;
    if (!kw->used && !free_slot) free_slot = kw;
  }
  if (!free_slot || !(free_slot->win = calloc(s->nranks, sizeof *free_slot->win))) return NULL;
  free_slot->used = 1;
  free_slot->coll = p->coll;
  free_slot->bin = p->bin;
  return free_slot;
}

/* Whether a window shows its rank consistently late: late beyond the threshold and the calls'
 * jitter in three of its calls in four. */
static int win_late(const rank_win_t *w) {
  int late = 0;
  for (int i = 0; i < w->n; i++) late += w->late_sig[i];
  return 4 * late >= 3 * w->n;
}

/* Every rank reported call p: its lateness goes into each rank's window of p's key, and flags are
 * revised. */
static void judge(ah_strag_t *s, pending_t *p) {
  uint32_t n = s->nranks;
  memcpy(s->sorted, p->us, n * sizeof *s->sorted);
  float med = quantile(s->sorted, (int)n, 0.5), low = s->sorted[0];
  if (!(med >= 1.0f)) return; /* under a microsecond: no time to be late by */
  key_win_t *kw = key_wins(s, p);
  if (!kw) return;
  s->judged++;
  /* The call's jitter: the spread of every rank's lateness (1.4826 x their median absolute value,
   * the lateness being 0 at the median rank), robust to the few ranks that are really late. A
   * rank is late in this call when it is beyond the threshold and 4 such spreads: with small calls
   * after long compute, healthy ranks' arrival jitter alone is a large share of the call's time. */
  for (uint32_t r = 0; r < n; r++) s->sorted[r] = fabsf((med - p->us[r]) / med);
  double sigma = 1.4826 * quantile(s->sorted, (int)n, 0.5);
  double bar = fmax(s->pct / 100.0, 4 * sigma);
  for (uint32_t r = 0; r < n; r++) {
    rank_win_t *w = &kw->win[r];
    int at = w->head; /* the oldest entry is replaced once the window is full */
    if (w->n < AH_STRAG_WINDOW) at = w->n++;
    else w->head = (w->head + 1) % AH_STRAG_WINDOW;
    w->late[at] = (med - p->us[r]) / med;
    w->late_sig[at] = w->late[at] > bar;
    w->wait[at] = p->us[r] == low ? med - low : 0;
    w->med[at] = med;
    if (w->n < AH_STRAG_MIN) continue;
    if (!w->flagged && win_late(w)) {
      w->flagged = 1;
      if (s->nflagged[r]++ == 0) event_push(s, r, 1, w, p);
    } else if (w->flagged) {
      float v[AH_STRAG_WINDOW];
      memcpy(v, w->late, (size_t)w->n * sizeof *v);
      if (quantile(v, w->n, 0.5) * 100.0 >= s->pct / 2) continue;
      w->flagged = 0;
      if (--s->nflagged[r] == 0) event_push(s, r, 0, w, p);
    }
  }
}

static void slot_clear(pending_t *p) {
  p->used = 0;
  p->have = 0;
}

void ah_strag_add(ah_strag_t *s, uint32_t rank, const ah_health_sample_t *x, uint64_t now_ns) {
  if (rank >= s->nranks || !(x->us >= 0) || !isfinite(x->us)) return;
  pending_t *p = NULL, *free_slot = NULL, *oldest = NULL;
  for (int i = 0; i < AH_STRAG_PENDING; i++) {
    pending_t *q = &s->pend[i];
    if (q->used && now_ns - q->born_ns > AH_STRAG_MAX_AGE_NS) { /* some rank never reported it */
      slot_clear(q);
      s->dropped++;
    }
    if (!q->used) {
      if (!free_slot) free_slot = q;
      continue;
    }
    if (q->coll == x->coll && q->bin == x->bin && q->index == x->index) p = q;
    if (!oldest || q->born_ns < oldest->born_ns) oldest = q;
  }
  if (!p) {
    if (!free_slot) { /* more calls in flight than slots: the oldest is given up */
      slot_clear(oldest);
      s->dropped++;
      free_slot = oldest;
    }
    p = free_slot;
    if (!p->us && !(p->us = malloc(s->nranks * sizeof *p->us))) return;
    for (uint32_t r = 0; r < s->nranks; r++) p->us[r] = NAN;
    p->used = 1;
    p->coll = x->coll;
    p->bin = x->bin;
    p->index = x->index;
    p->born_ns = now_ns;
  }
  if (!isnan(p->us[rank])) return; /* a duplicate */
  p->us[rank] = x->us;
  if (++p->have < s->nranks) return;
  judge(s, p);
  slot_clear(p);
}

int ah_strag_next(ah_strag_t *s, ah_strag_event_t *ev) {
  if (s->ev_n == 0) return 0;
  *ev = s->ev[s->ev_head];
  s->ev_head = (s->ev_head + 1) % EVENTS;
  s->ev_n--;
  return 1;
}

uint64_t ah_strag_judged(const ah_strag_t *s) { return s->judged; }
uint64_t ah_strag_dropped(const ah_strag_t *s) { return s->dropped; }

void ah_strag_text(uint64_t comm, const ah_strag_event_t *ev, const char *who, char *text) {
  char size[16];
  ah_size_format(ah_size_bin_floor(ev->bin), size, sizeof size);
  const ah_strag_stats_t *st = &ev->st;
  if (ev->flagged)
    snprintf(
        text, AH_HEALTH_TEXT,
        "straggler on comm %016llx: rank %u (%s) late in %d of its last "
        "%d sampled calls by %.1f%% of the call (median, p90 %.1f%%); the others waited %.1f%% "
        "of those calls for it, up to %s %s+ #%llu",
        (unsigned long long)comm, ev->rank, who, st->late_calls, st->calls, st->late_p50 * 100,
        st->late_p90 * 100, st->wait_share * 100, ah_coll_name(ev->coll), size,
        (unsigned long long)ev->index);
  else
    snprintf(text, AH_HEALTH_TEXT,
             "straggler on comm %016llx: rank %u (%s) is on time again: late "
             "by %.1f%% of the call (median of its last %d sampled calls), up to %s %s+ #%llu",
             (unsigned long long)comm, ev->rank, who, st->late_p50 * 100, st->calls,
             ah_coll_name(ev->coll), size, (unsigned long long)ev->index);
}
