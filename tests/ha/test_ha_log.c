/* test_ha_log.c: unit tests of the failover bookkeeping (rdma/ah_ha_log.c) — the send and receive
 * logs retire exactly what a completion covers, a failed post forgets only what was not posted,
 * and the replay plan matches a model of an RC connection: for a failure at every point of a
 * stream of NCCL-like chains (unsignalled RDMA WRITE + signalled WRITE_WITH_IMM, CTS-like plain
 * writes), the receiver ends up taking every message exactly once, in order, and the sender's
 * completions are exactly those it would have had without the failure. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_ha.h"
#include "ah_report.h"

static ah_ha_swr_t wr(int opcode, int signaled, uint64_t id) {
  ah_ha_swr_t w;
  memset(&w, 0, sizeof w);
  w.opcode = opcode;
  w.send_flags = signaled ? 2u /* IBV_SEND_SIGNALED */ : 0;
  w.wr_id = id;
  return w;
}

START_TEST(consuming_opcodes) {
  ck_assert_int_eq(ah_ha_consumes(AH_HA_WR_RDMA_WRITE), 0);
  ck_assert_int_eq(ah_ha_consumes(AH_HA_WR_RDMA_READ), 0);
  ck_assert_int_eq(ah_ha_consumes(AH_HA_WR_RDMA_WRITE_WITH_IMM), 1);
  ck_assert_int_eq(ah_ha_consumes(AH_HA_WR_SEND), 1);
  ck_assert_int_eq(ah_ha_consumes(AH_HA_WR_SEND_WITH_IMM), 1);
}
END_TEST

START_TEST(send_log_retire_and_unpush) {
  ah_ha_slog_t l;
  ck_assert_int_eq(ah_ha_slog_init(&l, 4), 0);
  ck_assert_uint_eq(ah_ha_slog_room(&l), 4);
  ah_ha_swr_t a = wr(AH_HA_WR_RDMA_WRITE, 0, 10), b = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, 11);
  ck_assert_uint_eq(ah_ha_slog_push(&l, &a), 0);
  ck_assert_uint_eq(ah_ha_slog_push(&l, &b), 1);
  ck_assert_uint_eq(ah_ha_slog_push(&l, &a), 2);
  ck_assert_uint_eq(l.cons, 1);
  ck_assert_uint_eq(ah_ha_slog_at(&l, 1)->wr_id, 11);
  ck_assert_uint_eq(ah_ha_slog_at(&l, 1)->cons, 1);
  ck_assert_ptr_null(ah_ha_slog_at(&l, 3));
  /* the signalled WR 1 completed: 0 and 1 are retired, 2 stays */
  ck_assert_uint_eq(ah_ha_slog_retire(&l, 1), 2);
  ck_assert_uint_eq(ah_ha_slog_cons_tail(&l), 1);
  ck_assert_ptr_null(ah_ha_slog_at(&l, 0));
  ck_assert_ptr_nonnull(ah_ha_slog_at(&l, 2));
  ck_assert_uint_eq(ah_ha_slog_retire(&l, 1), 0); /* already retired */
  /* a post that failed at its second WR keeps only the first */
  uint64_t first = l.head;
  ah_ha_slog_push(&l, &b);
  ah_ha_slog_push(&l, &b);
  ck_assert_uint_eq(l.cons, 3);
  ah_ha_slog_unpush(&l, first + 1);
  ck_assert_uint_eq(l.head, first + 1);
  ck_assert_uint_eq(l.cons, 2);
  /* the ring wraps: capacity 4, sequence numbers keep growing */
  ah_ha_slog_retire(&l, first);
  for (int i = 0; i < 4; i++) ah_ha_slog_push(&l, &a);
  ck_assert_uint_eq(ah_ha_slog_room(&l), 0);
  ck_assert_uint_eq(ah_ha_slog_at(&l, l.head - 1)->wr_id, 10);
  ah_ha_slog_free(&l);
}
END_TEST

/* Send completions name their entry by order: the next one retires up to the oldest signalled
 * entry (unsignalled WRs before it retire with it), and a QP signalling every WR retires one by one. */
START_TEST(send_log_complete_in_order) {
  ah_ha_slog_t l;
  ck_assert_int_eq(ah_ha_slog_init(&l, 8), 0);
  ah_ha_swr_t u = wr(AH_HA_WR_RDMA_WRITE, 0, 1), sg = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, 2);
  ah_ha_slog_push(&l, &u);
  ah_ha_slog_push(&l, &sg);
  ah_ha_slog_push(&l, &u);
  ah_ha_slog_push(&l, &u);
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), 1);
  ck_assert_uint_eq(l.tail, 2);
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), -1); /* no signalled entry left: nothing retired */
  ck_assert_uint_eq(l.tail, 2);
  l.sig_all = 1;
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), 2);
  ck_assert_uint_eq(l.tail, 3);
  ah_ha_slog_free(&l);
}
END_TEST

/* The ring of signalled entries names the entry each send completion retires: it forgets what a
 * failed post forgot, an explicit retire (a replay's) passes what it covers, and across many wraps
 * of a small log every completion retires exactly up to its own signalled WR. */
START_TEST(send_log_ring) {
  ah_ha_slog_t l;
  ck_assert_int_eq(ah_ha_slog_init(&l, 8), 0);
  ah_ha_swr_t u = wr(AH_HA_WR_RDMA_WRITE, 0, 1), sg = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, 2);
  ah_ha_slog_push(&l, &u);  /* 0 */
  ah_ha_slog_push(&l, &sg); /* 1 */
  ah_ha_slog_push(&l, &u);  /* 2 */
  ah_ha_slog_push(&l, &sg); /* 3 */
  ah_ha_slog_push(&l, &u);  /* 4 */
  ck_assert_uint_eq(l.nsig - l.sig_tail, 2);
  ah_ha_slog_unpush(&l, 3); /* the post of 3 and 4 failed: 3 leaves the ring too */
  ck_assert_uint_eq(l.nsig - l.sig_tail, 1);
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), 1);
  ck_assert_uint_eq(l.tail, 2);
  ck_assert_uint_eq(l.lim, 2 + l.cap);
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), -1); /* 2 is unsignalled: nothing to retire */
  ck_assert_uint_eq(l.tail, 2);
  ah_ha_slog_push(&l, &sg); /* 3 */
  ah_ha_slog_push(&l, &sg); /* 4 */
  ck_assert_uint_eq(ah_ha_slog_retire(&l, 3),
                    2); /* a replay's synthesized completion covers 2..3 */
  ck_assert_int_eq(ah_ha_slog_complete_next(&l), 4);
  ck_assert_uint_eq(ah_ha_slog_cons_tail(&l), 3);
  ck_assert_uint_eq(l.head, l.tail);
  /* chains of 1 to 3 WRs, the last signalled, through a log of 8 entries: 300 completions */
  uint64_t next = l.head;
  for (int k = 0; k < 300; k++) {
    int len = 1 + k % 3;
    for (int j = 0; j < len - 1; j++) ah_ha_slog_push(&l, &u);
    uint64_t want = ah_ha_slog_push(&l, &sg);
    ck_assert_uint_eq(want, next + (uint64_t)len - 1);
    next += (uint64_t)len;
    ck_assert_int_eq(ah_ha_slog_complete_next(&l), (int64_t)want);
    ck_assert_uint_eq(l.tail, want + 1);
    ck_assert_uint_eq(l.lim, want + 1 + l.cap);
  }
  ck_assert_uint_eq(ah_ha_slog_cons_tail(&l), l.cons);
  ah_ha_slog_free(&l);
}
END_TEST

START_TEST(recv_log_in_order) {
  ah_ha_rlog_t l;
  ck_assert_int_eq(ah_ha_rlog_init(&l, 3), 0);
  ah_ha_rwr_t r = {.wr_id = 7};
  ck_assert_uint_eq(ah_ha_rlog_push(&l, &r), 0);
  r.wr_id = 8;
  ck_assert_uint_eq(ah_ha_rlog_push(&l, &r), 1);
  ck_assert_int_eq(ah_ha_rlog_complete(&l, 1), -1); /* not the oldest */
  ck_assert_int_eq(ah_ha_rlog_complete(&l, 0), 0);
  ck_assert_int_eq(ah_ha_rlog_complete(&l, 1), 0);
  ck_assert_int_eq(ah_ha_rlog_complete(&l, 2), -1); /* never posted */
  ck_assert_uint_eq(l.done, 2);
  ck_assert_int_eq(ah_ha_rlog_complete_next(&l), -1); /* none live: nothing retired */
  ck_assert_uint_eq(l.done, 2);
  ah_ha_rlog_push(&l, &r);
  ah_ha_rlog_unpush(&l, 2);
  ck_assert_uint_eq(l.head, 2);
  ah_ha_rlog_free(&l);
}
END_TEST

START_TEST(plan_rejects_impossible_counts) {
  ah_ha_slog_t l;
  ah_ha_slog_init(&l, 8);
  ah_ha_swr_t b = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, 1);
  for (int i = 0; i < 3; i++) ah_ha_slog_push(&l, &b);
  ah_ha_slog_retire(&l, 0);
  uint64_t first = 99;
  ck_assert_int_eq(ah_ha_replay_plan(&l, 0, &first), -1); /* fewer than already confirmed */
  ck_assert_int_eq(ah_ha_replay_plan(&l, 4, &first), -1); /* more than ever posted */
  ck_assert_uint_eq(first, 99);
  ck_assert_int_eq(ah_ha_replay_plan(&l, 1, &first), 0);
  ck_assert_uint_eq(first, 1);
  ck_assert_int_eq(ah_ha_replay_plan(&l, 3, &first), 0);
  ck_assert_uint_eq(first, 3);
  ah_ha_slog_free(&l);
}
END_TEST

/* The sender's completions are exactly those of a run without the failure, in posting order: one
 * per signalled WR of posted[0..np). */
static void assert_completions_as_posted(const ah_ha_swr_t *posted, int np, const int *completions,
                                         int nc) {
  int want = 0;
  for (int i = 0; i < np; i++)
    if (posted[i].send_flags & 2u) {
      ck_assert_int_lt(want, nc);
      ck_assert_int_eq(completions[want], (int)posted[i].wr_id);
      want++;
    }
  ck_assert_int_eq(want, nc);
}

/* A model of one RC connection: the sender posts `nmsg` NCCL chains; the wire delivers the first
 * `delivered` WRs in order; ACKs (send completions) for the first `acked` of them reach the sender
 * (acked <= delivered). Then the primary fails. The plan must make the receiver see every
 * consuming message exactly once in order, and the sender's signalled completions come exactly
 * once in order. */
static void model(int nmsg, int delivered, int acked) {
  ah_ha_slog_t l;
  ck_assert_int_eq(ah_ha_slog_init(&l, 4096), 0);
  ah_ha_swr_t posted[1024];
  int np = 0;
  for (int m = 0; m < nmsg; m++) {
    posted[np] = wr(AH_HA_WR_RDMA_WRITE, 0, 1000 + (uint64_t)m); /* the chain's payload */
    ah_ha_slog_push(&l, &posted[np++]);
    posted[np] = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, (uint64_t)m); /* its signalled tail */
    ah_ha_slog_push(&l, &posted[np++]);
    if (m % 3 == 0) { /* a CTS-like plain write, signalled now and then */
      posted[np] = wr(AH_HA_WR_RDMA_WRITE, m % 2, 5000 + (uint64_t)m);
      ah_ha_slog_push(&l, &posted[np++]);
    }
  }
  if (delivered > np) delivered = np;
  if (acked > delivered) acked = delivered;
  /* what each side saw on the primary */
  uint64_t recv_taken = 0;
  for (int i = 0; i < delivered; i++) recv_taken += (uint64_t)ah_ha_consumes(posted[i].opcode);
  int completions[1024], nc = 0; /* wr_ids of signalled sends NCCL saw, in order */
  for (int i = 0; i < acked; i++)
    if (posted[i].send_flags & 2u) {
      completions[nc++] = (int)posted[i].wr_id;
      ah_ha_slog_retire(&l, (uint64_t)i);
    }
  /* the failover */
  uint64_t first;
  ck_assert_int_eq(ah_ha_replay_plan(&l, recv_taken, &first), 0);
  ck_assert_uint_ge(first, l.tail);
  ck_assert_uint_le(first, l.head);
  for (uint64_t s = l.tail; s < first; s++) /* synthesized: delivered, completion lost */
    if (l.e[s % l.cap].send_flags & 2u) completions[nc++] = (int)l.e[s % l.cap].wr_id;
  uint64_t taken_again = 0;
  for (uint64_t s = first; s < l.head;
       s++) { /* replayed on the shadow: delivered and acked there */
    const ah_ha_swr_t *e = &l.e[s % l.cap];
    taken_again += (uint64_t)ah_ha_consumes(e->opcode);
    if (e->send_flags & 2u) completions[nc++] = (int)e->wr_id;
    /* nothing the receiver already took is sent again */
    ck_assert_msg(!ah_ha_consumes(e->opcode) || e->cons > recv_taken, "message %llu replayed twice",
                  (unsigned long long)e->cons);
  }
  ck_assert_uint_eq(recv_taken + taken_again, l.cons); /* every message once */
  assert_completions_as_posted(posted, np, completions, nc);
  ah_ha_slog_free(&l);
}

START_TEST(plan_every_failure_point) {
  for (int nmsg = 1; nmsg <= 6; nmsg++) {
    int np = nmsg * 2 + (nmsg + 2) / 3;
    for (int d = 0; d <= np; d++)
      for (int a = 0; a <= d; a++) model(nmsg, d, a);
  }
}
END_TEST

/* Posts n NCCL-like chains numbered from m0 (as model() does) to l and posted[]. */
static void post_chains(ah_ha_slog_t *l, ah_ha_swr_t *posted, int *np, int m0, int n) {
  for (int m = m0; m < m0 + n; m++) {
    posted[*np] = wr(AH_HA_WR_RDMA_WRITE, 0, 1000 + (uint64_t)m);
    ah_ha_slog_push(l, &posted[(*np)++]);
    posted[*np] = wr(AH_HA_WR_RDMA_WRITE_WITH_IMM, 1, (uint64_t)m);
    ah_ha_slog_push(l, &posted[(*np)++]);
    if (m % 3 == 0) {
      posted[*np] = wr(AH_HA_WR_RDMA_WRITE, m % 2, 5000 + (uint64_t)m);
      ah_ha_slog_push(l, &posted[(*np)++]);
    }
  }
}

/* One queue pair carrying log entries [from, np): the wire delivers the first d in order (each
 * consuming message is counted in taken[] by its number), ACKs reach the sender for the first a. */
static void carry(ah_ha_slog_t *l, const ah_ha_swr_t *posted, int from, int np, int d, int a,
                  int *taken, uint64_t *recv_taken, int *completions, int *nc) {
  if (from + d > np) d = np - from;
  if (a > d) a = d;
  for (int i = from; i < from + d; i++)
    if (ah_ha_consumes(posted[i].opcode)) {
      taken[l->e[(uint64_t)i % l->cap].cons]++;
      (*recv_taken)++;
    }
  for (int i = from; i < from + a; i++)
    if (posted[i].send_flags & 2u) {
      completions[(*nc)++] = (int)posted[i].wr_id;
      ah_ha_slog_retire(l, (uint64_t)i);
    }
}

/* A failover with the receiver's cumulative count: synthesized completions up to the plan's point.
 * Returns the first entry the next queue pair carries. */
static int fail_over(ah_ha_slog_t *l, uint64_t recv_taken, int *completions, int *nc) {
  uint64_t first;
  ck_assert_int_eq(ah_ha_replay_plan(l, recv_taken, &first), 0);
  ck_assert_uint_ge(first, l->tail);
  ck_assert_uint_le(first, l->head);
  for (uint64_t s = l->tail; s < first; s++)
    if (l->e[s % l->cap].send_flags & 2u) completions[(*nc)++] = (int)l->e[s % l->cap].wr_id;
  if (first > l->tail) ah_ha_slog_retire(l, first - 1);
  return (int)first;
}

/* Two failures in a row (docs/ha.md, "A second failover"): the primary delivers d1 of the chains and
 * ACKs a1, fails over; NCCL posts `extra` more chains on the first shadow, which delivers d2 of what
 * it carries (replayed, then new) and ACKs a2, then fails too; the second shadow delivers the rest.
 * The same plan on the cumulative counts must give every message once and every signalled
 * completion once, in order. */
static void model2(int nmsg, int extra, int d1, int a1, int d2, int a2) {
  ah_ha_slog_t l;
  ck_assert_int_eq(ah_ha_slog_init(&l, 64), 0);
  ah_ha_swr_t posted[64];
  int np = 0, taken[64] = {0}, completions[64], nc = 0;
  uint64_t recv_taken = 0;
  post_chains(&l, posted, &np, 0, nmsg);
  carry(&l, posted, 0, np, d1, a1, taken, &recv_taken, completions, &nc);
  int first = fail_over(&l, recv_taken, completions, &nc);
  post_chains(&l, posted, &np, nmsg, extra);
  carry(&l, posted, first, np, d2, a2, taken, &recv_taken, completions, &nc);
  first = fail_over(&l, recv_taken, completions, &nc);
  carry(&l, posted, first, np, np, np, taken, &recv_taken, completions, &nc);
  ck_assert_uint_eq(recv_taken, l.cons);
  for (uint64_t k = 1; k <= l.cons; k++)
    ck_assert_msg(taken[k] == 1, "message %llu taken %d times", (unsigned long long)k, taken[k]);
  assert_completions_as_posted(posted, np, completions, nc);
  ah_ha_slog_free(&l);
}

START_TEST(plan_two_failures) {
  for (int nmsg = 1; nmsg <= 4; nmsg++)
    for (int extra = 0; extra <= 2; extra++) {
      int np1 = nmsg * 2 + (nmsg + 2) / 3, np = np1 + extra * 2 + 2;
      for (int d1 = 0; d1 <= np1; d1++)
        for (int a1 = 0; a1 <= d1; a1++)
          for (int d2 = 0; d2 <= np; d2++)
            for (int a2 = 0; a2 <= d2; a2++) model2(nmsg, extra, d1, a1, d2, a2);
    }
}
END_TEST

/* The report's "ha" section survives a write and a read, and is absent when HA is off. */
START_TEST(report_ha_roundtrip) {
  ah_report_t *r = calloc(1, sizeof *r);
  ck_assert_ptr_nonnull(r);
  snprintf(r->host, sizeof r->host, "h");
  snprintf(r->mode, sizeof r->mode, "tune");
  r->rank = 1;
  char *off = ah_report_to_string(r);
  ck_assert_ptr_nonnull(off);
  ck_assert_ptr_null(strstr(off, "\"ha\""));
  free(off);
  snprintf(r->ha.policy, sizeof r->ha.policy, "port");
  r->ha.shadows = 16, r->ha.failovers = 2, r->ha.replayed = 3, r->ha.synthesized = 1;
  r->ha.nfail = 2;
  for (int i = 0; i < 2; i++) {
    ah_report_failover_t *f = &r->ha.fail[i];
    f->time_s = 1000.5 + i, f->qpn = 77 + (uint32_t)i, f->port = 1, f->shadow_port = 2,
    f->stall_ms = 1.25;
    f->replayed = (uint32_t)(i + 1), f->synthesized = (uint32_t)i;
    snprintf(f->dev, sizeof f->dev, "mlx5_%d", i);
  }
  snprintf(r->ha.fail[1].shadow_dev, sizeof r->ha.fail[1].shadow_dev,
           "mlx5_0"); /* AUTOHA_HA=nic's */
  char *text = ah_report_to_string(r);
  ck_assert_ptr_nonnull(text);
  ah_report_t *back = NULL;
  char err[256];
  ck_assert_msg(ah_report_parse(text, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_str_eq(back->ha.policy, "port");
  ck_assert_uint_eq(back->ha.shadows, 16);
  ck_assert_uint_eq(back->ha.failovers, 2);
  ck_assert_uint_eq(back->ha.replayed, 3);
  ck_assert_uint_eq(back->ha.synthesized, 1);
  ck_assert_int_eq(back->ha.nfail, 2);
  ck_assert_uint_eq(back->ha.fail[1].qpn, 78);
  ck_assert_str_eq(back->ha.fail[1].dev, "mlx5_1");
  ck_assert_int_eq(back->ha.fail[1].shadow_port, 2);
  ck_assert_str_eq(back->ha.fail[1].shadow_dev, "mlx5_0");
  ck_assert_str_eq(back->ha.fail[0].shadow_dev,
                   ""); /* absent: the shadow is on the primary's NIC */
  ck_assert_uint_eq(back->ha.fail[1].replayed, 2);
  ck_assert(back->ha.fail[0].stall_ms > 1.2 && back->ha.fail[0].stall_ms < 1.3);
  ck_assert_uint_eq(back->ha.rebalances, 0); /* no re-plan: no rebalance fields */
  ck_assert_ptr_null(strstr(text, "rebalance"));
  ah_report_free(back);
  free(text);
  r->ha.rebalances = 2, r->ha.rebalanced = 5, r->ha.rb_before = 0, r->ha.rb_share = 0.5,
  r->ha.rb_bound = 0.5;
  text = ah_report_to_string(r);
  ck_assert_ptr_nonnull(text);
  ck_assert_msg(ah_report_parse(text, &back, err, sizeof err) == 0, "%s", err);
  ck_assert_uint_eq(back->ha.rebalances, 2);
  ck_assert_uint_eq(back->ha.rebalanced, 5);
  ck_assert(back->ha.rb_share == 0.5 && back->ha.rb_bound == 0.5 && back->ha.rb_before == 0);
  ah_report_free(back);
  free(text);
  free(r);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {consuming_opcodes,          send_log_retire_and_unpush,
                                send_log_complete_in_order, send_log_ring,
                                recv_log_in_order,          plan_rejects_impossible_counts,
                                plan_every_failure_point,   plan_two_failures,
                                report_ha_roundtrip};
  return ah_check_main("ha_log", (ah_check_case_t){.name = "ha_log", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
