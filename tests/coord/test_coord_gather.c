/* The shortest search duration across ranks on a live hub (SEARCH_TIME -> MIN_TIME): the leader's
 * connection (the one that joined rank 0) alone gets each call's minimum, once every rank reported
 * or the gather deadline passed with some; a malformed report is refused by name without dropping
 * the connection, one from a process that is not a member is refused and the connection dropped. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_test_util.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;
static ah_coord_t *cl[3];

/* What the process's MIN_TIME handler was called with (all clients of this process share it). */
static pthread_mutex_t got_mu = PTHREAD_MUTEX_INITIALIZER;
static ah_coord_time_t got[16];
static int ngot;

static void on_min(uint64_t comm, int coll, int bin, uint64_t index, double us, uint32_t reported,
                   uint32_t nranks) {
  pthread_mutex_lock(&got_mu);
  if (ngot < 16)
    got[ngot++] = (ah_coord_time_t){.comm = comm,
                                    .coll = (uint8_t)coll,
                                    .bin = (uint8_t)bin,
                                    .index = index,
                                    .us = (float)us,
                                    .reported = reported,
                                    .nranks = nranks};
  pthread_mutex_unlock(&got_mu);
}

static int got_wait(int n, int ms) {
  for (int t = 0; t < ms; t += 10) {
    pthread_mutex_lock(&got_mu);
    int k = ngot;
    pthread_mutex_unlock(&got_mu);
    if (k >= n) return 1;
    sleep_ms(10);
  }
  return 0;
}

enum { COMM = 0x5e7 };

static void setup(void) {
  log_start();
  hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
  ah_coord_set_mintime_handler(on_min);
  ngot = 0;
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  for (int r = 0; r < 3; r++) {
    cl[r] = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
    ck_assert_ptr_nonnull(cl[r]);
    ck_assert_int_eq(ah_coord_join_rank(cl[r], COMM, 3, r, NULL), 0);
  }
  for (int t = 0; t < 300 && ah_coord_verdict(cl[2], COMM) == AH_COORD_VERDICT_NONE; t++)
    sleep_ms(10);
  ck_assert_int_eq(ah_coord_verdict(cl[2], COMM), AH_COORD_VERDICT_COMPLETE);
}

static void teardown(void) {
  for (int r = 2; r >= 0; r--) ah_coord_client_close(cl[r]);
  ah_coord_set_mintime_handler(NULL);
  ah_coord_hub_close(hub);
  log_stop();
}

START_TEST(the_leader_gets_the_shortest_once_every_rank_reported) {
  const double us[3] = {52.5, 31.25,
                        77.0}; /* rank 0 arrived first: it timed the others' lateness */
  for (int r = 0; r < 3; r++)
    ck_assert_int_eq(ah_coord_search_time(cl[r], COMM, (uint32_t)r, 0, 13, 4, us[r]), 0);
  ck_assert(got_wait(1, 2000));
  sleep_ms(100); /* nothing more: one minimum per call, to the leader's connection only */
  ck_assert_int_eq(ngot, 1);
  ck_assert_uint_eq(got[0].comm, COMM);
  ck_assert_int_eq(got[0].coll, 0);
  ck_assert_int_eq(got[0].bin, 13);
  ck_assert_uint_eq(got[0].index, 4);
  ck_assert_float_eq_tol(got[0].us, 31.25, 1e-4);
  ck_assert_uint_eq(got[0].reported, 3);
  ck_assert_uint_eq(got[0].nranks, 3);
}
END_TEST

START_TEST(a_missing_rank_delays_the_minimum_to_the_deadline) {
  uint64_t t0 = ah_coord_now_ns();
  ck_assert_int_eq(ah_coord_search_time(cl[1], COMM, 1, 1, 7, 9, 20.0), 0);
  ck_assert_int_eq(ah_coord_search_time(cl[2], COMM, 2, 1, 7, 9, 12.5), 0);
  sleep_ms(200);
  ck_assert_int_eq(ngot, 0); /* rank 0 has not reported: the hub waits (500 ms) */
  ck_assert(got_wait(1, 3000));
  double took = (double)(ah_coord_now_ns() - t0) / 1e9;
  ck_assert_msg(took >= 0.45, "sent after %.3f s, before the deadline", took);
  ck_assert_float_eq_tol(got[0].us, 12.5, 1e-4);
  ck_assert_uint_eq(got[0].reported, 2);
  ck_assert_uint_eq(got[0].index, 9);
}
END_TEST

START_TEST(bad_reports_are_refused) {
  /* out of range on the client's side: nothing is sent */
  ck_assert_int_eq(ah_coord_search_time(cl[1], COMM, 1, 99, 7, 1, 5.0), -1);
  ck_assert_int_eq(ah_coord_search_time(cl[1], COMM, 1, 0, 7, 1, -5.0), -1);
  /* a negative duration by hand from a member (client id of cl[1] is not known here: a raw client
   * that joined rank 1 is a member too) */
  int fd = raw_authed_connect(&st, 0x4242);
  ck_assert_int_ge(fd, 0);
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + 48];
  memset(f, 0, sizeof f);
  ah_coord_hdr_encode(AH_MSG_JOIN, 48, f);
  ah_coord_put_u64(f + AH_COORD_HDR_BYTES, COMM);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 8, 3);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 12, 1);
  uint64_t dl = ah_coord_now_ns() + 2000000000ull;
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, f, sizeof f, dl), AH_NET_OK);
  ah_coord_time_t t = {.comm = COMM, .rank = 1, .coll = 0, .bin = 3, .index = 8, .us = -1.0f};
  uint8_t m[AH_COORD_HDR_BYTES + 26];
  ah_coord_hdr_encode(AH_MSG_SEARCH_TIME, 26, m);
  ah_coord_time_pack(AH_MSG_SEARCH_TIME, &t, m + AH_COORD_HDR_BYTES);
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, m, sizeof m, dl), AH_NET_OK);
  ck_assert(log_wait("refused a SEARCH_TIME from 127.0.0.1", 2000));
  ck_assert(log_wait("search time of call 8 is -1 us (expected a finite duration >= 0)", 100));
  ck_assert(raw_ping(fd)); /* kept */
  close(fd);
  /* a client that never joined: refused, dropped */
  fd = raw_authed_connect(&st, 0x4343);
  ck_assert_int_ge(fd, 0);
  t.us = 3.0f;
  ah_coord_time_pack(AH_MSG_SEARCH_TIME, &t, m + AH_COORD_HDR_BYTES);
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, m, sizeof m, dl), AH_NET_OK);
  ck_assert(log_wait("not a member: rank 1 of comm 00000000000005e7; connection dropped", 2000));
  ck_assert(!raw_ping(fd));
  close(fd);
  ck_assert_int_eq(ngot, 0);
  /* the unit decoder names a MIN_TIME over more ranks than exist */
  ah_coord_time_t mt = {
      .comm = 1, .coll = 0, .bin = 1, .index = 2, .us = 3.0f, .reported = 4, .nranks = 3};
  uint8_t p[30];
  ah_coord_time_pack(AH_MSG_MIN_TIME, &mt, p);
  ck_assert_int_eq(ah_coord_time_unpack(AH_MSG_MIN_TIME, p, &mt, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "over 4 of 3 ranks") != NULL, "%s", err);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_INFO);
  const TTest *const tests[] = {the_leader_gets_the_shortest_once_every_rank_reported,
                                a_missing_rank_delays_the_minimum_to_the_deadline,
                                bad_reports_are_refused};
  return ah_check_main(
      "coord_gather",
      (ah_check_case_t){.name = "gather", .timeout = 20, .setup = setup, .teardown = teardown},
      tests, AH_CHECK_COUNT(tests));
}
