/* The JOIN/verdict protocol against a peer that holds the job's secret and sends what no rank of
 * the job would (a stale process of an earlier incarnation, a buggy rank, a mistaken launcher): a
 * JOIN that gives a communicator another rank count — before the real ranks join, among them, or
 * after their verdict — can cost the communicator its tuning (every rank then runs NCCL's own
 * choices) but never the real ranks' verdict: each gets one at once, keeps its connection, and
 * the hub logs the cause rate-limited. A hub that cuts every connection as soon as it is up is
 * reconnected to at a pace that slows, not thousands of times a second. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_fake_hub.h"
#include "coord_test_util.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;

static void setup(void) {
  log_start();
  hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
}

static void teardown(void) {
  ah_coord_hub_close(hub);
  log_stop();
}

static ah_coord_t *client(void) {
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  ah_coord_t *c = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
  ck_assert_ptr_nonnull(c);
  return c;
}

static int verdict_wait(ah_coord_t *c, uint64_t comm, int ms) {
  for (int t = 0; t < ms / 10 && ah_coord_verdict(c, comm) == AH_COORD_VERDICT_NONE; t++)
    sleep_ms(10);
  return ah_coord_verdict(c, comm);
}

static int raw_join(int fd, uint64_t comm, uint32_t nranks, uint32_t rank) {
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + 48];
  memset(f, 0, sizeof f);
  ah_coord_hdr_encode(AH_MSG_JOIN, 48, f);
  ah_coord_put_u64(f + AH_COORD_HDR_BYTES, comm);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 8, nranks);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 12, rank);
  return ah_coord_net_write_full(err, fd, f, sizeof f, ah_coord_now_ns() + 1000000000ull);
}

/* Reads frames until a VERDICT for comm arrives (within ms). Returns its value, or -1. */
static int raw_verdict(int fd, uint64_t comm, int ms) {
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  uint64_t dl = ah_coord_now_ns() + (uint64_t)ms * 1000000ull;
  for (;;) {
    ah_coord_hdr_t h;
    if (ah_coord_net_read_full(err, fd, f, AH_COORD_HDR_BYTES, dl) != AH_NET_OK ||
        ah_coord_hdr_decode(f, &h, err, sizeof err) != 0 ||
        (h.len && ah_coord_net_read_full(err, fd, f + AH_COORD_HDR_BYTES, h.len, dl) != AH_NET_OK))
      return -1;
    if (h.type == AH_MSG_VERDICT && ah_coord_get_u64(f + AH_COORD_HDR_BYTES) == comm)
      return (int)ah_coord_get_u32(f + AH_COORD_HDR_BYTES + 8);
  }
}

/* The outside run's case: one JOIN claiming 9 ranks before the 8 real ones join. Each real rank
 * is answered ABANDONED at its join (the deadline is 1 s here; they hear it well before), keeps its
 * connection (no reconnect storm), and the forger hears ABANDONED too. */
START_TEST(a_join_with_another_rank_count_first_cannot_hang_the_ranks) {
  int rogue = raw_authed_connect(&st, 0x7001);
  ck_assert_int_ge(rogue, 0);
  ck_assert_int_eq(raw_join(rogue, 80, 9, 8), AH_NET_OK);
  ck_assert(raw_ping(rogue)); /* the hub took it */
  ah_coord_t *c[8];
  uint64_t t0 = ah_coord_now_ns();
  for (int r = 0; r < 8; r++) {
    c[r] = client();
    ck_assert_int_eq(ah_coord_join_rank(c[r], 80, 8, (uint32_t)r, NULL), 0);
  }
  for (int r = 0; r < 8; r++)
    ck_assert_int_eq(verdict_wait(c[r], 80, 3000), AH_COORD_VERDICT_ABANDONED);
  double secs = (double)(ah_coord_now_ns() - t0) / 1e9;
  ck_assert_msg(secs < 0.9, "verdicts after %.2f s: the join deadline (1 s) decided, not the JOIN",
                secs);
  ck_assert(log_wait("comm 0000000000000050 has 9 ranks, a JOIN from 127.0.0.1", 1000));
  ck_assert(log_wait("says 8; every rank of it runs NCCL's own choices", 100));
  sleep_ms(300);
  ck_assert_ptr_null(strstr(log_text(), "reconnect")); /* nobody was dropped */
  for (int r = 0; r < 8; r++) {
    ck_assert_int_eq(ah_coord_alive(c[r]), 1);
    ah_coord_client_close(c[r]);
  }
  close(rogue);
}
END_TEST

/* Among them: 2 of 3 ranks joined, then a JOIN with 5 ranks — the two joined hear ABANDONED at
 * once, and so does the third when it joins; after a COMPLETE verdict, such a JOIN changes nothing
 * for the ranks and its sender is told ABANDONED. */
START_TEST(a_join_with_another_rank_count_later_leaves_the_ranks_a_verdict) {
  ah_coord_t *a = client(), *b = client(), *c = client();
  ck_assert_int_eq(ah_coord_join_rank(a, 81, 3, 0, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(b, 81, 3, 1, NULL), 0);
  sleep_ms(100);
  int rogue = raw_authed_connect(&st, 0x7002);
  ck_assert_int_eq(raw_join(rogue, 81, 5, 4), AH_NET_OK);
  ck_assert_int_eq(raw_verdict(rogue, 81, 2000), AH_COORD_VERDICT_ABANDONED);
  ck_assert_int_eq(verdict_wait(a, 81, 500), AH_COORD_VERDICT_ABANDONED);
  ck_assert_int_eq(verdict_wait(b, 81, 500), AH_COORD_VERDICT_ABANDONED);
  ck_assert_int_eq(ah_coord_join_rank(c, 81, 3, 2, NULL), 0);
  ck_assert_int_eq(verdict_wait(c, 81, 500), AH_COORD_VERDICT_ABANDONED);
  /* decided first: the rogue changes nothing */
  ck_assert_int_eq(ah_coord_join_rank(a, 82, 3, 0, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(b, 82, 3, 1, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(c, 82, 3, 2, NULL), 0);
  ck_assert_int_eq(verdict_wait(a, 82, 2000), AH_COORD_VERDICT_COMPLETE);
  ck_assert_int_eq(raw_join(rogue, 82, 4, 3), AH_NET_OK);
  ck_assert_int_eq(raw_verdict(rogue, 82, 2000), AH_COORD_VERDICT_ABANDONED);
  ck_assert(log_wait("that process's ranks run NCCL's own choices", 1000));
  sleep_ms(200);
  ck_assert_int_eq(ah_coord_verdict(a, 82), AH_COORD_VERDICT_COMPLETE);
  ck_assert_int_eq(ah_coord_verdict(c, 82), AH_COORD_VERDICT_COMPLETE);
  close(rogue);
  ah_coord_client_close(c);
  ah_coord_client_close(b);
  ah_coord_client_close(a);
}
END_TEST

/* A process that makes and destroys communicators by the thousand (ncclCommSplit per phase): each
 * is freed at the hub once every member left, so the 1,025th is served as the first was, where the
 * destroyed ones used to fill the process's cap (1,024) and the next were refused. */
START_TEST(communicators_every_member_left_are_freed) {
  ah_coord_t *a = client(), *b = client();
  for (uint64_t comm = 1000; comm < 1000 + 1100; comm++) {
    ck_assert_int_eq(ah_coord_join_rank(a, comm, 2, 0, NULL), 0);
    ck_assert_int_eq(ah_coord_join_rank(b, comm, 2, 1, NULL), 0);
    ck_assert_int_eq(verdict_wait(a, comm, 3000), AH_COORD_VERDICT_COMPLETE);
    ck_assert_int_eq(verdict_wait(b, comm, 3000), AH_COORD_VERDICT_COMPLETE);
    ah_coord_leave(a, comm);
    ah_coord_leave(b, comm);
  }
  ck_assert_ptr_null(strstr(log_text(), "refused comm"));
  ah_coord_client_close(b);
  ah_coord_client_close(a);
}
END_TEST

/* A hub that completes each handshake and closes the connection at once, counting them. */
static int cutter_lfd;
static atomic_int cutter_handshakes;
static void *cutter_hub(void *arg) {
  (void)arg;
  for (;;) {
    int fd = accept(cutter_lfd, NULL, NULL);
    if (fd < 0) break;
    if (coord_fake_handshake(fd, st.secret, 0x22) == 0) atomic_fetch_add(&cutter_handshakes, 1);
    close(fd);
  }
  return NULL;
}

/* Each handshake succeeds, so the attempts' own backoff never applied: the cut right after it
 * now doubles a pause (50 ms up to 1 s), about 7 reconnections in 3 s where there were thousands. */
START_TEST(a_hub_that_cuts_each_connection_is_retried_ever_slower) {
  ah_coord_stamp_t stamp = st;
  cutter_lfd = coord_fake_listen(&stamp.port);
  ck_assert_int_ge(cutter_lfd, 0);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, cutter_hub, NULL), 0);
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  o.reconnect_ms = 60000;
  ah_coord_t *c = ah_coord_client_open(&stamp, NULL, &o, NULL, NULL);
  ck_assert_ptr_nonnull(c);
  sleep_ms(3000);
  int n = atomic_load(&cutter_handshakes);
  ck_assert_msg(n >= 3 && n <= 12, "%d handshakes in 3 s", n);
  ck_assert(log_wait("ms after it came up; next attempt in", 100));
  ah_coord_client_close(c);
  shutdown(cutter_lfd, SHUT_RDWR);
  pthread_join(t, NULL);
  close(cutter_lfd);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_INFO);
  const TTest *const tests[] = {a_join_with_another_rank_count_first_cannot_hang_the_ranks,
                                a_join_with_another_rank_count_later_leaves_the_ranks_a_verdict,
                                a_hub_that_cuts_each_connection_is_retried_ever_slower,
                                communicators_every_member_left_are_freed};
  return ah_check_main(
      "coord_join",
      (ah_check_case_t){.name = "join", .timeout = 60, .setup = setup, .teardown = teardown}, tests,
      AH_CHECK_COUNT(tests));
}
