/* The hub's memory budget (ah_coord_hub_mem.c, issue 38): a job's tables grow with it instead of
 * stopping at fixed counts — 5,120 communicators spanning processes (more than the 4,096 the hub
 * once held) all get their verdict and their decisions with the default budget — and what does not
 * fit a small budget is refused with the one line naming it and what runs instead, every other
 * communicator decided, and the budget given back to the byte when the communicators are freed;
 * progress records that do not fit are refused with one line, once. */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "coord_test_util.h"

/* 40 processes with 128 communicators each: communicator k*128+j has 2 ranks, rank 0 in process k
 * and rank 1 in process k+1 (mod 40). No process creates or holds pending more than the per-client
 * bounds (1,024 and 256: its own 128 and its neighbour's 128 at most), as in a job, where each
 * process has a few communicators of the thousands. */
#define PROCS 40
#define PER_PROC 128
#define NCOMMS (PROCS * PER_PROC)
#define COMM_BASE 0x5000000ull

typedef struct {
  _Atomic int n;
} count_t;

static void count_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  (void)key;
  (void)seg;
  atomic_fetch_add(&((count_t *)arg)->n, 1);
}

static ah_coord_hub_t *hub_with_budget(size_t bytes, ah_coord_stamp_t *st_p) {
  uint8_t secret[16];
  for (int i = 0; i < 16; i++) secret[i] = (uint8_t)(0x38 + i);
  ah_coord_hub_opts_t o;
  ah_coord_hub_opts_default(&o);
  if (bytes) o.mem_bytes = bytes;
  o.join_ms =
      20000; /* every rank joins well within it: a verdict other than COMPLETE is a refusal */
  return ah_coord_hub_open("127.0.0.1:0", secret, &o, st_p);
}

static ah_coord_t *client_of(const ah_coord_stamp_t *st, count_t *cnt) {
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  o.relay = 0; /* every process its own connection: 40 at the hub */
  ah_coord_t *c = ah_coord_client_open(st, NULL, &o, cnt ? count_deliver : NULL, cnt);
  ck_assert_ptr_nonnull(c);
  return c;
}

/* Joins every communicator's two ranks (see PROCS) and waits up to ms for a verdict at both ends
 * of each. Counts the verdicts by kind into n_p[verdict]. */
static void join_all(ah_coord_t **cs, int nprocs, int per, int *n_p, int ms) {
  for (int k = 0; k < nprocs; k++)
    for (int j = 0; j < per; j++) {
      ck_assert_int_eq(ah_coord_join_rank(cs[k], COMM_BASE + (uint64_t)(k * per + j), 2, 0, NULL),
                       0);
      int prev = (k + nprocs - 1) % nprocs;
      ck_assert_int_eq(
          ah_coord_join_rank(cs[k], COMM_BASE + (uint64_t)(prev * per + j), 2, 1, NULL), 0);
    }
  for (int v = 0; v < 4; v++) n_p[v] = 0;
  for (int k = 0; k < nprocs; k++)
    for (int j = 0; j < per; j++) {
      uint64_t comm = COMM_BASE + (uint64_t)(k * per + j);
      ah_coord_t *ends[2] = {cs[k], cs[(k + 1) % nprocs]};
      for (int e = 0; e < 2; e++) {
        int v;
        for (int t = 0; (v = ah_coord_verdict(ends[e], comm)) == AH_COORD_VERDICT_NONE && t < ms;
             t += 5)
          sleep_ms(5);
        ck_assert_msg(v != AH_COORD_VERDICT_NONE, "comm %llx: no verdict at end %d",
                      (unsigned long long)comm, e);
        if (e == 0) n_p[v]++;
        else ck_assert_int_eq(v, ah_coord_verdict(ends[0], comm)); /* both ends agree */
      }
    }
}

START_TEST(five_thousand_communicators_all_get_decisions) {
  ah_coord_stamp_t st;
  ah_coord_hub_t *h = hub_with_budget(0, &st); /* the default budget */
  ck_assert_ptr_nonnull(h);
  ah_coord_t *cs[PROCS];
  count_t got[PROCS];
  for (int k = 0; k < PROCS; k++) {
    atomic_init(&got[k].n, 0);
    cs[k] = client_of(&st, &got[k]);
  }
  int n[4];
  join_all(cs, PROCS, PER_PROC, n, 20000);
  ck_assert_int_eq(n[AH_COORD_VERDICT_COMPLETE], NCOMMS);
  /* Each communicator's leader (rank 0's process) publishes one decision; both of its processes
   * deliver it: the leader's own and its neighbour's, PER_PROC of each per process. */
  for (int k = 0; k < PROCS; k++)
    for (int j = 0; j < PER_PROC; j++) {
      ah_key_t key = key_make(COMM_BASE + (uint64_t)(k * PER_PROC + j));
      ah_segment_t seg = seg_make(0);
      ck_assert_int_eq(ah_coord_publish(cs[k], &key, &seg), 0);
    }
  for (int t = 0; t < 20000; t += 10) {
    int done = 1;
    for (int k = 0; k < PROCS; k++) done &= atomic_load(&got[k].n) >= 2 * PER_PROC;
    if (done) break;
    sleep_ms(10);
  }
  for (int k = 0; k < PROCS; k++) ck_assert_int_eq(atomic_load(&got[k].n), 2 * PER_PROC);
  size_t peak = 0, held = ah_coord_hub_mem_held(h, &peak);
  printf(
      "%d communicators of 2 ranks over %d processes: all COMPLETE and decided; the hub's tables "
      "hold %zu bytes (%.0f a communicator), peak %zu\n",
      NCOMMS, PROCS, held, (double)held / NCOMMS, peak);
  ck_assert_uint_gt(held, (size_t)NCOMMS * sizeof(uint64_t)); /* each communicator is charged */
  ck_assert_uint_le(peak, (size_t)AH_COORD_HUB_MEM_MB_DEFAULT << 20);
  for (int k = 0; k < PROCS; k++) ah_coord_client_close(cs[k]);
  ah_coord_hub_close(h);
}
END_TEST

/* A budget that holds about half of them: the rest are ABANDONED (NCCL's own choices, at both
 * ends, none left waiting) with the line naming what did not fit, and the hub keeps serving. Once
 * every process left every communicator, the budget holds only the processes' own records. */
START_TEST(what_does_not_fit_is_refused_by_name) {
  ah_coord_stamp_t st;
  enum { P = 8, PER = 64 }; /* 512 communicators */
  log_start();
  ah_coord_hub_t *h = hub_with_budget(256u << 10, &st); /* 256 KiB: about 250 communicators */
  ck_assert_ptr_nonnull(h);
  ah_coord_t *cs[P];
  for (int k = 0; k < P; k++) cs[k] = client_of(&st, NULL);
  for (int t = 0; t < 5000 && ah_coord_hub_clients(h) < P; t += 5) sleep_ms(5);
  size_t clients = ah_coord_hub_mem_held(h, NULL); /* the processes' own records, kept */
  ck_assert_uint_gt(clients, 0);
  int n[4];
  join_all(cs, P, PER, n, 10000);
  printf("512 communicators into a 256 KiB budget: %d COMPLETE, %d ABANDONED\n",
         n[AH_COORD_VERDICT_COMPLETE], n[AH_COORD_VERDICT_ABANDONED]);
  ck_assert_int_gt(n[AH_COORD_VERDICT_COMPLETE], 100);
  ck_assert_int_gt(n[AH_COORD_VERDICT_ABANDONED], 0);
  ck_assert_int_eq(n[AH_COORD_VERDICT_COMPLETE] + n[AH_COORD_VERDICT_ABANDONED], P * PER);
  ck_assert(log_wait("does not fit the hub's memory budget (", 3000));
  ck_assert(
      log_wait("of 256.0 KiB held; AUTOHA_HUB_MEM_MB sets it); its ranks run NCCL's own "
               "choices",
               100));
  size_t peak = 0;
  ck_assert_uint_le(ah_coord_hub_mem_held(h, &peak), 256u << 10);
  ck_assert_uint_le(peak, 256u << 10);
  for (int k = 0; k < P; k++)
    for (int j = 0; j < PER; j++) {
      ah_coord_leave(cs[k], COMM_BASE + (uint64_t)(k * PER + j));
      ah_coord_leave(cs[k], COMM_BASE + (uint64_t)(((k + P - 1) % P) * PER + j));
    }
  size_t held = 1;
  for (int t = 0; t < 5000 && (held = ah_coord_hub_mem_held(h, NULL)) > clients; t += 10)
    sleep_ms(10);
  ck_assert_uint_eq(held, clients);
  ck_assert(legit_roundtrip(&st, 0x77)); /* and what was given back serves the next */
  for (int k = 0; k < P; k++) ah_coord_client_close(cs[k]);
  ah_coord_hub_close(h);
  log_stop();
}
END_TEST

/* Progress records that do not fit: the communicator is decided and runs, is not diagnosed, and
 * the line says so once, however many records follow. */
START_TEST(progress_that_does_not_fit_is_said_once) {
  ah_coord_stamp_t st;
  enum { NR = 1000 }; /* 384 bytes a rank of progress: 375 KiB, beyond a 128 KiB budget */
  log_start();
  ah_coord_hub_t *h = hub_with_budget(128u << 10, &st);
  ck_assert_ptr_nonnull(h);
  ah_coord_t *c = client_of(&st, NULL);
  const uint64_t comm = 0x6600;
  for (int r = 0; r < NR; r++) ck_assert_int_eq(ah_coord_join_rank(c, comm, NR, r, NULL), 0);
  int v = 0;
  for (int t = 0; t < 5000 && (v = ah_coord_verdict(c, comm)) == AH_COORD_VERDICT_NONE; t += 5)
    sleep_ms(5);
  ck_assert_int_eq(v, AH_COORD_VERDICT_COMPLETE); /* the communicator itself fits */
  for (int i = 0; i < 3; i++) {
    ah_health_rec_t rec = {.rank = (uint32_t)i, .pid = 1, .state = AH_HEALTH_IDLE};
    ck_assert_int_eq(ah_coord_progress(c, comm, &rec), 0);
  }
  ck_assert(
      log_wait("the progress records of comm 0000000000006600's 1000 ranks (375.0 KiB) does "
               "not fit the hub's memory budget",
               3000));
  ck_assert(log_wait("it is not diagnosed", 100));
  sleep_ms(500); /* the other two records reach the hub (ahead of any later frame of c) */
  const char *t = log_text(), *p = t;
  int n = 0;
  while ((p = strstr(p, "the progress records of comm")) != NULL) n++, p++;
  ck_assert_int_eq(n, 1);
  ah_coord_client_close(c);
  ah_coord_hub_close(h);
  log_stop();
}
END_TEST

int main(void) {
  const TTest *const tests[] = {five_thousand_communicators_all_get_decisions,
                                what_does_not_fit_is_refused_by_name,
                                progress_that_does_not_fit_is_said_once};
  return ah_check_main("coord_mem", (ah_check_case_t){.name = "budget", .timeout = 90}, tests,
                       AH_CHECK_COUNT(tests));
}
