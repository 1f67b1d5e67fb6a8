/* Slow-link localisation (coordinator/ah_coord_linkmat.c) on crafted matrices: a ring with ECMP
 * collisions and jitter reads as nothing; a connection at 5% is reported once, after three slow
 * windows of four, with the hop only slow connections cross; one slow window, or slow every other
 * window, is not; a whole row is the source and a whole column the destination (one finding, not
 * one per cell); a uniformly slower job moves the reference; too few cells or bytes are not judged;
 * recovery is reported; and findings are rate-limited. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_rand.h"
#include "ah_coord_health.h"
#include "ah_coord_linkmat.h"

#define BASE 3.0e9 /* bytes/s of a healthy connection (24 Gb/s) */
#define WIN 1.0

/* Connection id of the q-th queue pair from src to dst. */
static uint64_t cid(uint32_t src, uint32_t dst, int q) {
  return (uint64_t)src << 40 | (uint64_t)dst << 8 | (uint64_t)q;
}

/* Adds a connection at `rate` bytes/s (busy for half the window) with up to 3 hops (0: none). */
static void add(ah_lm_t *lm, uint32_t src, uint32_t dst, int q, double rate, uint32_t h0,
                uint32_t h1, uint32_t h2) {
  ah_lm_conn_t c = {.src = src, .dst = dst, .id = cid(src, dst, q), .busy_s = 0.5, .wrs = 100};
  c.bytes = rate * c.busy_s;
  uint32_t h[3] = {h0, h1, h2};
  for (int i = 0; i < 3; i++)
    if (h[i]) c.hops[c.nhops++] = h[i];
  ah_lm_add(lm, &c);
}

/* A jittered healthy rate: within +-30%. */
static double healthy(void) { return BASE * (0.7 + 0.6 * uniform()); }

#define FOUND_MAX 32

/* The events of a run of windows, oldest first, with the window each came in. */
typedef struct {
  ah_lm_event_t ev[FOUND_MAX];
  int at[FOUND_MAX];
  int n;
} found_t;

/* Closes window w (it ends at w * WIN) and keeps its events in f, as many as f has room for.
 * Returns how many it kept. */
static int close_window(ah_lm_t *lm, int w, found_t *f) {
  ah_lm_close(lm, w * WIN, WIN);
  int n = 0;
  ah_lm_event_t ev;
  while (ah_lm_next(lm, &ev))
    if (f->n < FOUND_MAX) {
      f->at[f->n] = w;
      f->ev[f->n++] = ev;
      n++;
    }
  return n;
}

/* Ring of n ranks, two queue pairs per cell; queue pair q of cell r crosses spine (2r + q) % 4,
 * whose link is hop 200 + spine; hops 100 + r and 300 + (r + 1) are the NICs. The queue pairs on
 * spine `bad` run at `frac` of their rate, and `collide` of the others at a half and a third. */
static void ring_window(ah_lm_t *lm, uint32_t n, int bad, double frac, int collide) {
  for (uint32_t r = 0; r < n; r++)
    for (int q = 0; q < 2; q++) {
      int spine = (int)(2 * r + (uint32_t)q) % 4;
      double rate = healthy();
      if (spine == bad) rate *= frac;
      else if (collide && r % 3 == 0) rate *= q ? 1.0 / 3 : 0.5;
      add(lm, r, (r + 1) % n, q, rate, 100 + r, 200 + (uint32_t)spine, 300 + (r + 1) % n);
    }
}

/* A finding of ring_window's ring of 8 with spine 2 slow: the cell of an odd rank and the next. */
static void assert_spine2_cell(const ah_lm_event_t *e) {
  ck_assert_int_eq(e->kind, AH_LM_CELL);
  ck_assert_uint_eq(e->src % 2, 1);
  ck_assert_uint_eq(e->dst, (e->src + 1) % 8);
}

START_TEST(a_ring_with_collisions_and_jitter_reads_as_nothing) {
  ah_lm_t *lm = ah_lm_new(16, NULL);
  ck_assert_ptr_nonnull(lm);
  found_t f = {0};
  for (int w = 0; w < 40; w++) {
    ring_window(lm, 16, -1, 1, 1);
    ck_assert_int_eq(close_window(lm, w, &f), 0);
  }
  ah_lm_stats_t st;
  ah_lm_stats(lm, &st);
  ck_assert_int_eq(st.windows, 40);
  ck_assert_int_eq(st.cells, 16);
  ck_assert_int_eq(st.flagged, 0);
  ck_assert_msg(st.ref > 0.5 * BASE && st.ref < 1.3 * BASE, "ref %g", st.ref);
  ah_lm_free(lm);
}
END_TEST

START_TEST(a_slow_connection_is_reported_once_with_its_hop) {
  ah_lm_t *lm = ah_lm_new(8, NULL);
  found_t f = {0};
  for (int w = 0; w < 20; w++) {
    /* spine 2 at 5%: queue pair 0 of the odd ranks' cells (2r + 1 is never 2 mod 4) */
    ring_window(lm, 8, 2, 0.05, 1);
    if (close_window(lm, w, &f)) ck_assert_int_eq(w, AH_LM_PERSIST - 1); /* as soon as it may be */
  }
  ck_assert_int_eq(f.n, 4);
  unsigned seen = 0;
  for (int i = 0; i < f.n; i++) {
    const ah_lm_event_t *e = &f.ev[i];
    assert_spine2_cell(e);
    ck_assert_int_eq(e->cleared, 0);
    seen |= 1u << e->src;
    ck_assert_uint_eq(e->worst, cid(e->src, e->dst, 0));
    ck_assert_int_eq(e->nconns, 2);
    ck_assert_int_eq(e->nslow, 1);
    ck_assert_int_eq(e->slow, AH_LM_PERSIST);
    ck_assert_int_eq(e->windows, AH_LM_PERSIST);
    ck_assert_msg(e->rate < 0.2 * e->ref, "rate %g ref %g", e->rate, e->ref);
    /* its NICs carry its queue pair 1 at speed: the link is spine 2's alone, which the slow
     * connections of all four cells cross */
    ck_assert_int_eq(e->nhop, 1);
    ck_assert_uint_eq(e->hop[0], 202);
    ck_assert_int_eq(e->hop_slow, 4);
  }
  ck_assert_uint_eq(seen, 0xaa);
  ah_lm_free(lm);
}
END_TEST

/* One degraded cable seen by two connections whose paths each have another hop no connection at
 * speed crosses: the hop both cross is named, for each. A third slow connection whose two hops
 * nothing else crosses gets both (the data cannot tell them apart). */
START_TEST(the_hop_most_slow_connections_cross_wins_a_tie) {
  ah_lm_t *lm = ah_lm_new(8, NULL);
  found_t f = {0};
  for (int w = 0; w < 6; w++) {
    for (uint32_t r = 0; r < 8; r++) {
      uint32_t up = 500 + r, down = 600 + (r + 1) % 8; /* each path's own two cables */
      if (r == 1) down = 900;                          /* the bad cable, down to rank 2's leaf */
      if (r == 4) up = 900;                            /* and up from rank 4's */
      double rate = healthy() * (r == 1 || r == 4 || r == 6 ? 0.05 : 1);
      add(lm, r, (r + 1) % 8, 0, rate, up, down, 0);
    }
    close_window(lm, w, &f);
  }
  ck_assert_int_eq(f.n, 3);
  for (int i = 0; i < 3; i++) {
    const ah_lm_event_t *e = &f.ev[i];
    if (e->src == 6) {
      ck_assert_int_eq(e->nhop, 2);
      ck_assert(e->hop[0] == 506 && e->hop[1] == 607);
      ck_assert_int_eq(e->hop_slow, 1);
      continue;
    }
    ck_assert(e->src == 1 || e->src == 4);
    ck_assert_int_eq(e->nhop, 1);
    ck_assert_uint_eq(e->hop[0], 900);
    ck_assert_int_eq(e->hop_slow, 2);
  }
  ah_lm_free(lm);
}
END_TEST

START_TEST(one_slow_window_or_every_other_is_not_reported) {
  ah_lm_t *lm = ah_lm_new(8, NULL);
  found_t f = {0};
  for (int w = 0; w < 30; w++) {
    int slow = w == 2 || (w >= 10 && w % 2 == 0);
    ring_window(lm, 8, slow ? 2 : -1, 0.05, 0);
    ck_assert_int_eq(close_window(lm, w, &f), 0);
  }
  ah_lm_free(lm);
}
END_TEST

/* All-to-all of n ranks, one queue pair per cell; src `row` sends at frac (-1: none), dst `col`
 * receives at frac. */
static void a2a_window(ah_lm_t *lm, uint32_t n, int row, int col, double frac) {
  for (uint32_t s = 0; s < n; s++)
    for (uint32_t d = 0; d < n; d++) {
      if (s == d) continue;
      double rate = healthy();
      if ((int)s == row || (int)d == col) rate *= frac;
      add(lm, s, d, 0, rate, 100 + s, 0, 300 + d);
    }
}

START_TEST(a_slow_row_is_the_source_and_a_slow_column_the_destination) {
  for (int side = 0; side < 2; side++) {
    ah_lm_t *lm = ah_lm_new(8, NULL);
    found_t f = {0};
    for (int w = 0; w < 10; w++) {
      a2a_window(lm, 8, side ? -1 : 5, side ? 5 : -1, 0.05);
      close_window(lm, w, &f);
    }
    ck_assert_int_eq(f.n, 1); /* one finding, not one per cell */
    const ah_lm_event_t *e = &f.ev[0];
    ck_assert_int_eq(e->kind, side ? AH_LM_COL : AH_LM_ROW);
    ck_assert_uint_eq(side ? e->dst : e->src, 5);
    ck_assert_int_eq(e->ncells, 7);
    ck_assert_int_eq(e->nslow, 7);
    /* the NIC hop: every slow connection crosses it, no connection at speed does */
    ck_assert_int_eq(e->nhop, 1);
    ck_assert_uint_eq(e->hop[0], side ? 305 : 105);
    ck_assert_int_eq(e->hop_slow, 7);
    ah_lm_free(lm);
  }
}
END_TEST

START_TEST(a_uniformly_slower_job_moves_the_reference) {
  ah_lm_t *lm = ah_lm_new(8, NULL);
  found_t f = {0};
  for (int w = 0; w < 20; w++) {
    double x = w >= 5 ? 0.05 : 1; /* every connection at 5%: smaller messages, a loaded job */
    for (uint32_t r = 0; r < 8; r++) add(lm, r, (r + 1) % 8, 0, healthy() * x, 0, 0, 0);
    ck_assert_int_eq(close_window(lm, w, &f), 0);
  }
  ah_lm_free(lm);
}
END_TEST

START_TEST(too_few_cells_or_bytes_are_not_judged) {
  ah_lm_t *lm = ah_lm_new(4, NULL);
  found_t f = {0};
  for (int w = 0; w < 10; w++) {
    add(lm, 0, 1, 0, BASE * 0.01, 0, 0, 0); /* two cells: no median to judge them by */
    add(lm, 1, 0, 0, BASE, 0, 0, 0);
    ck_assert_int_eq(close_window(lm, w, &f), 0);
  }
  ah_lm_stats_t st;
  ah_lm_stats(lm, &st);
  ck_assert_int_eq(st.windows, 0);
  for (int w = 10; w < 20; w++) {
    for (uint32_t r = 0; r < 4; r++) add(lm, r, (r + 1) % 4, 0, healthy(), 0, 0, 0);
    /* a connection that moved almost nothing, or completed one work request, is not measured */
    ah_lm_conn_t idle = {.src = 2, .dst = 0, .id = 99, .bytes = 1000, .busy_s = 0.5, .wrs = 9};
    ah_lm_add(lm, &idle);
    ah_lm_conn_t one = {.src = 3, .dst = 1, .id = 98, .bytes = 1e6, .busy_s = 0.5, .wrs = 1};
    ah_lm_add(lm, &one);
    ah_lm_conn_t self = {.src = 3, .dst = 3, .id = 97, .bytes = 1e6, .busy_s = 0.5, .wrs = 9};
    ah_lm_add(lm, &self);
    ck_assert_int_eq(close_window(lm, w, &f), 0);
  }
  ah_lm_stats(lm, &st);
  ck_assert_int_eq(st.windows, 10);
  ck_assert_int_eq(st.cells, 4);
  ah_lm_free(lm);
}
END_TEST

START_TEST(recovery_is_reported_after_the_windows_at_speed) {
  ah_lm_t *lm = ah_lm_new(8, NULL);
  found_t f = {0};
  for (int w = 0; w < 20; w++) {
    ring_window(lm, 8, w < 6 ? 2 : -1, 0.05, 0);
    close_window(lm, w, &f);
  }
  ck_assert_int_eq(f.n, 8); /* four cells found, the four at speed again */
  for (int i = 0; i < 4; i++) ck_assert(!f.ev[i].cleared && f.at[i] == 2);
  for (int i = 4; i < 8; i++) {
    ck_assert_int_eq(f.ev[i].cleared, 1);
    ck_assert_int_eq(f.at[i], 6 + AH_LM_WINDOWS - 1);
    assert_spine2_cell(&f.ev[i]);
  }
  ah_lm_stats_t st;
  ah_lm_stats(lm, &st);
  ck_assert_int_eq(st.flagged, 0);
  ah_lm_free(lm);
}
END_TEST

START_TEST(findings_are_rate_limited) {
  ah_lm_t *lm = ah_lm_new(32, NULL);
  found_t f = {0};
  for (int w = 0; w < 80; w++) {
    /* 8 of 32 cells slow, each its own link: 8 findings, AH_LM_BURST a minute */
    for (uint32_t r = 0; r < 32; r++)
      add(lm, r, (r + 1) % 32, 0, healthy() * (r % 4 == 1 ? 0.05 : 1), 0, 0, 0);
    close_window(lm, w, &f);
    if (w < AH_LM_BURST_S + AH_LM_PERSIST - 1) ck_assert_int_le(f.n, AH_LM_BURST);
  }
  ck_assert_int_eq(f.n, 8);
  ck_assert_uint_gt(f.ev[AH_LM_BURST].suppressed, 0);
  ah_lm_free(lm);
}
END_TEST

START_TEST(the_lines_say_where_and_how_slow) {
  ah_lm_event_t e = {.kind = AH_LM_CELL,
                     .src = 3,
                     .dst = 4,
                     .rate = 0.05 * BASE,
                     .ref = BASE,
                     .slow = 3,
                     .windows = 3,
                     .ncells = 1};
  char text[AH_HEALTH_TEXT];
  ah_lm_text(0x17b6a90064bb2783ull, &e, "10.0.0.1 pid 42 gpu 3", "10.0.0.2 pid 43 gpu 0",
             "link leaf0-spine3; QP 77 mlx5_2:1, 1 of 2 slow", text, sizeof text);
  ck_assert_str_eq(text,
                   "slow link on comm 17b6a90064bb2783: rank 3 (10.0.0.1 pid 42 gpu 3) -> rank 4 "
                   "(10.0.0.2 pid 43 gpu 0) at 1.20 Gb/s, 5.0% of the median 24.00: link "
                   "leaf0-spine3; QP 77 mlx5_2:1, 1 of 2 slow");
  e.kind = AH_LM_ROW;
  e.ncells = 7;
  ah_lm_text(0x1ull, &e, "h pid 1", "x", "", text, sizeof text);
  ck_assert_str_eq(text,
                   "slow link on comm 0000000000000001: every connection from rank 3 (h pid 1), 7 "
                   "peers, at 1.20 Gb/s or less, 5.0% of the median 24.00");
  e.cleared = 1;
  e.kind = AH_LM_CELL;
  e.rate = BASE;
  ah_lm_text(0x1ull, &e, "", "", "", text, sizeof text);
  ck_assert_str_eq(text,
                   "comm 0000000000000001: rank 3 -> rank 4 is at speed again: 24.00 Gb/s, "
                   "median 24.00");
  ck_assert_ptr_null(ah_lm_new(0, NULL));
  ah_lm_opts_t o;
  ah_lm_opts_default(&o);
  o.pct = 100;
  ck_assert_ptr_null(ah_lm_new(4, &o));
}
END_TEST

int main(void) {
  const TTest *const tests[] = {
      a_ring_with_collisions_and_jitter_reads_as_nothing,
      a_slow_connection_is_reported_once_with_its_hop,
      the_hop_most_slow_connections_cross_wins_a_tie,
      one_slow_window_or_every_other_is_not_reported,
      a_slow_row_is_the_source_and_a_slow_column_the_destination,
      a_uniformly_slower_job_moves_the_reference,
      too_few_cells_or_bytes_are_not_judged,
      recovery_is_reported_after_the_windows_at_speed,
      findings_are_rate_limited,
      the_lines_say_where_and_how_slow,
  };
  return ah_check_main("coord_linkmat", (ah_check_case_t){.name = "linkmat", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
