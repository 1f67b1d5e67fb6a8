/* A thread waiting for news of the hub (ah_coord_wait_ticket, ah_coord_wait; the shim's waiting
 * ranks) sleeps until it comes: behind a host relay the relay wakes it when it puts the bytes into
 * its process's ring (a segment alone still rings no doorbell), on a direct connection the I/O
 * thread wakes it when it delivers. News between the ticket and the sleep is not lost, a wait with
 * no news lasts its timeout, and a connection dropped under a sleeper wakes it before the ring it
 * sleeps on is unmapped. Timeouts here are 5 s and the bounds checked 2 s: a wake-up that does not
 * come shows as the whole timeout, far from any scheduling delay. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "ah_check.h"
#include "ah_coord_client_internal.h"
#include "ah_coord_internal.h"
#include "coord_test_util.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;
static rec_t recs[3];

static void setup(void) {
  log_start();
  hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
  for (int i = 0; i < 3; i++) rec_init(&recs[i]);
}

static void teardown(void) {
  ah_coord_hub_close(hub);
  log_stop();
}

#define LONG_US 5000000L /* a sleep nothing but news ends early */
#define SOON_MS 2000     /* what an ended-early sleep is checked against */

/* Clients of simulated host `host` (relay: whether the host relay is on), recording into r, without
 * heartbeats or a lazy doorbell during a test (either would end a sleep with news of its own). */
static ah_coord_t *quiet_client(const char *host, int relay, rec_t *r) {
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  o.relay = relay;
  o.relay_lazy_ms = 60000;
  o.heartbeat_ms = 20000;
  o.dead_ms = 60000;
  snprintf(o.host, sizeof o.host, "%s", host);
  return ah_coord_client_open(&st, NULL, &o, rec_deliver, r);
}

/* A relay and a local process of host `host`, and a leader on another host, joined to comm. */
static void open_host(const char *host, uint64_t comm, int relay, ah_coord_t **a_p,
                      ah_coord_t **b_p, ah_coord_t **lead_p) {
  ah_coord_t *a = quiet_client(host, relay, &recs[0]);
  ah_coord_t *b = quiet_client(host, relay, &recs[1]);
  ah_coord_t *lead = quiet_client("hostLead", relay, &recs[2]);
  ck_assert(a && b && lead);
  ck_assert_int_eq(ah_coord_client_relay_role(b), relay ? 1 : 0);
  ck_assert_int_eq(ah_coord_join_rank(a, comm, 3, 0, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(b, comm, 3, 1, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(lead, comm, 3, 2, NULL), 0);
  sleep_ms(200);
  *a_p = a, *b_p = b, *lead_p = lead;
}

static void close_host(ah_coord_t *a, ah_coord_t *b, ah_coord_t *lead) {
  ah_coord_client_close(lead);
  ah_coord_client_close(b);
  ah_coord_client_close(a);
}

static void publish_one(ah_coord_t *lead, uint64_t comm, uint64_t i) {
  ah_key_t k = key_make(comm);
  ah_segment_t s = seg_make(i);
  ck_assert_int_eq(ah_coord_publish(lead, &k, &s), 0);
}

/* A waiting rank, as the shim's: ticket, look (poll), sleep; how long the sleep lasted. */
typedef struct {
  ah_coord_t *c;
  long timeout_us;
  _Atomic int asleep; /* ticket taken and looked: about to sleep */
  uint64_t slept_ms;
  int took; /* what ah_coord_poll took right after the sleep */
} sleeper_t;

static void *sleeper_main(void *arg) {
  sleeper_t *s = arg;
  uint64_t t = ah_coord_wait_ticket(s->c);
  (void)ah_coord_poll(s->c);
  atomic_store(&s->asleep, 1);
  uint64_t t0 = ah_coord_now_ns();
  ah_coord_wait(s->c, t, s->timeout_us);
  s->slept_ms = (ah_coord_now_ns() - t0) / 1000000;
  s->took = ah_coord_poll(s->c);
  return NULL;
}

static void sleeper_start(pthread_t *th, sleeper_t *s, ah_coord_t *c, long timeout_us) {
  memset(s, 0, sizeof *s);
  s->c = c;
  s->timeout_us = timeout_us;
  ck_assert_int_eq(pthread_create(th, NULL, sleeper_main, s), 0);
  while (!atomic_load(&s->asleep)) sleep_ms(1);
  sleep_ms(100); /* in the futex by now */
}

/* A rank of host's second process asleep while the leader publishes one segment: it is woken long
 * before its 5 s. Behind a relay (relay 1) the segment goes into its ring and the relay wakes it;
 * the doorbell (lazy, 60 s) is not rung, so the sleeper's own poll delivers it, on its thread. On a
 * direct connection (relay 0) the I/O thread delivers the segment and wakes it. */
static void woken_by_a_publish(const char *host, uint64_t comm, int relay) {
  ah_coord_t *a, *b, *lead;
  open_host(host, comm, relay, &a, &b, &lead);
  pthread_t th;
  sleeper_t s;
  sleeper_start(&th, &s, b, LONG_US);
  publish_one(lead, comm, 0);
  pthread_join(th, NULL);
  ck_assert_uint_lt(s.slept_ms, SOON_MS);
  ck_assert_int_eq(s.took, relay); /* from its ring; without one, delivered on the I/O thread */
  ck_assert(rec_wait(&recs[1], 1, 1000));
  ck_assert_int_eq(atomic_load(relay ? &b->ring->waiters : &b->nwait), 0);
  close_host(a, b, lead);
}

START_TEST(test_wait_woken_by_the_relay) { woken_by_a_publish("hostW", 0xa17e1, 1); }
END_TEST

START_TEST(test_wait_woken_by_a_delivery) { woken_by_a_publish("hostD", 0xa17e2, 0); }
END_TEST

/* A rank asleep at its first call for the hub's verdict is woken when it comes (the last rank
 * joins), on a direct connection (the I/O thread delivers the verdict) and behind a relay (the relay
 * puts it into the ring; the sleeper's look takes it). */
START_TEST(test_wait_woken_by_the_verdict) {
  for (int relay = 0; relay <= 1; relay++) {
    const uint64_t comm = 0xa17e7 + (uint64_t)relay;
    ah_coord_t *a = quiet_client(relay ? "hostV1" : "hostV0", relay, &recs[0]);
    ah_coord_t *b = quiet_client(relay ? "hostV1" : "hostV0", relay, &recs[1]);
    ah_coord_t *lead = quiet_client("hostLead", relay, &recs[2]);
    ck_assert(a && b && lead);
    ck_assert_int_eq(ah_coord_join_rank(a, comm, 3, 0, NULL), 0);
    ck_assert_int_eq(ah_coord_join_rank(b, comm, 3, 1, NULL), 0);
    pthread_t th;
    sleeper_t s;
    sleeper_start(&th, &s, b, LONG_US);
    ck_assert_int_eq(ah_coord_verdict(b, comm), AH_COORD_VERDICT_NONE);
    ck_assert_int_eq(ah_coord_join_rank(lead, comm, 3, 2, NULL), 0);
    pthread_join(th, NULL);
    ck_assert_uint_lt(s.slept_ms, SOON_MS);
    for (int i = 0; i < 100 && ah_coord_verdict(b, comm) == AH_COORD_VERDICT_NONE; i++) {
      (void)ah_coord_poll(b);
      sleep_ms(10);
    }
    ck_assert_int_eq(ah_coord_verdict(b, comm), AH_COORD_VERDICT_COMPLETE);
    close_host(a, b, lead);
  }
}
END_TEST

/* News between the ticket and the sleep (bytes put into the ring after the look, on a relay; a
 * delivery, on a direct connection) ends the sleep at once; with nothing new, a sleep lasts its
 * timeout. */
START_TEST(test_wait_news_before_the_sleep) {
  for (int relay = 0; relay <= 1; relay++) {
    const uint64_t comm = 0xa17e3 + (uint64_t)relay;
    ah_coord_t *a, *b, *lead;
    open_host(relay ? "hostN1" : "hostN0", comm, relay, &a, &b, &lead);
    uint64_t t = ah_coord_wait_ticket(b);
    ck_assert_int_eq(ah_coord_poll(b), 0);
    publish_one(lead, comm, 0);
    ck_assert(rec_wait(&recs[0], 1, 5000)); /* the host has it */
    sleep_ms(100);
    uint64_t t0 = ah_coord_now_ns();
    ah_coord_wait(b, t, LONG_US);
    ck_assert_uint_lt((ah_coord_now_ns() - t0) / 1000000, SOON_MS);
    ck_assert_int_eq(ah_coord_poll(b), relay); /* in its ring, or delivered already */
    ck_assert(rec_wait(&recs[1], 1, 1000));
    t = ah_coord_wait_ticket(b); /* nothing new from here */
    t0 = ah_coord_now_ns();
    ah_coord_wait(b, t, 300000);
    ck_assert_uint_ge((ah_coord_now_ns() - t0) / 1000000, 250);
    close_host(a, b, lead);
  }
}
END_TEST

/* A local process's connection cut under its sleeper: it drops the ring the sleeper sleeps on,
 * waking it first and unmapping the ring only once it left; it then reconnects through the relay
 * and a later segment still reaches it. */
START_TEST(test_wait_ring_dropped_under_a_sleeper) {
  const uint64_t comm = 0xa17e5;
  ah_coord_t *a, *b, *lead;
  open_host("hostX", comm, 1, &a, &b, &lead);
  pthread_t th;
  sleeper_t s;
  sleeper_start(&th, &s, b, LONG_US);
  ah_coord_client_cut(b);
  pthread_join(th, NULL);
  ck_assert_uint_lt(s.slept_ms, SOON_MS);
  for (int i = 0; i < 100 && ah_coord_client_connects(b) < 2; i++) sleep_ms(20);
  ck_assert_int_ge(ah_coord_client_connects(b), 2);
  sleep_ms(200);
  publish_one(lead, comm, 0);
  for (int i = 0; i < 250 && rec_count(&recs[1]) == 0; i++) {
    (void)ah_coord_poll(b);
    sleep_ms(20);
  }
  ck_assert_int_eq(rec_count(&recs[1]), 1);
  close_host(a, b, lead);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_wait_woken_by_the_relay, test_wait_woken_by_a_delivery,
                                test_wait_woken_by_the_verdict, test_wait_news_before_the_sleep,
                                test_wait_ring_dropped_under_a_sleeper};
  return ah_check_main(
      "coord_wait",
      (ah_check_case_t){.name = "wait", .timeout = 60, .setup = setup, .teardown = teardown}, tests,
      AH_CHECK_COUNT(tests));
}
