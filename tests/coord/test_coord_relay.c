/* The host relay (docs/coordinator.md "Host relay") on a live hub on 127.0.0.1: the first client
 * of a host becomes its relay and the others reach the hub through it, with every guarantee of a
 * direct connection (segments in order and exactly once, verdicts, acknowledged publishes, the
 * directory); when the relay's connection is cut or its process is killed mid-stream, the others
 * elect a new relay and lose or repeat nothing; a local peer that cannot prove the job secret is
 * refused by the hub through the relay, one that sends garbage is refused by the relay, and neither
 * disturbs the legitimate processes of the host; and the hub's checks of channel frames, by hand. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_client_internal.h"
#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_test_util.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;
static rec_t recs[4];

static void setup(void) {
  log_start();
  hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
  for (int i = 0; i < 4; i++) rec_init(&recs[i]);
}

static void teardown(void) {
  ah_coord_hub_close(hub);
  log_stop();
}

/* A client of simulated host `host` with the relay on (r: where its segments are recorded). */
static ah_coord_t *client_on(const ah_coord_stamp_t *stamp, const char *host, rec_t *r) {
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  o.relay = 1;
  snprintf(o.host, sizeof o.host, "%s", host);
  return ah_coord_client_open(stamp, NULL, &o, r ? rec_deliver : NULL, r);
}

static int raw_local(ah_coord_t *relay, int *bell_p, client_ring_t **ring_p);
/* A SEGMENT frame's size on the wire (header, sequence number, key and segment). */
#define FRAME_SEGMENT_BYTES_TEST (AH_COORD_HDR_BYTES + 8 + AH_COORD_KEYSEG_BYTES)

/* Whether r holds exactly the segments seg_make(0 .. n-1) of comm, in that order (each once). */
static int rec_exactly(rec_t *r, int n) {
  pthread_mutex_lock(&r->mu);
  int ok = r->n == n;
  for (int k = 0; ok && k < n; k++) ok = r->segs[k].first == seg_make((uint64_t)k).first;
  pthread_mutex_unlock(&r->mu);
  return ok;
}

static void publish_range(ah_coord_t *lead, uint64_t comm, int from, int to, int pace_ms) {
  ah_key_t k = key_make(comm);
  for (int i = from; i < to; i++) {
    ah_segment_t s = seg_make((uint64_t)i);
    ck_assert_int_eq(ah_coord_publish(lead, &k, &s), 0);
    if (pace_ms) sleep_ms(pace_ms);
  }
}

/* Closes what host_and_lead or lazy_host opened: the leader, the local process, then the relay
 * (closed last, so the local process does not see its relay go and reconnect meanwhile). */
static void host_close(ah_coord_t *relay, ah_coord_t *peer, ah_coord_t *lead) {
  ah_coord_client_close(lead);
  ah_coord_client_close(peer);
  ah_coord_client_close(relay);
}

/* Four processes of one host: one relay, three through it; a leader on another host. Joins reach
 * the hub per process (the verdict needs all four ranks), segments arrive in order once each, a
 * publish from a channel is acknowledged and delivered, the directory works across channels, and a
 * cut of the relay's connection mid-stream loses and repeats nothing. */
START_TEST(test_relay_forwards) {
  const uint64_t comm = 0x5e1a7;
  ah_coord_t *c[4];
  for (int i = 0; i < 4; i++) {
    c[i] = client_on(&st, "hostA", &recs[i]);
    ck_assert_ptr_nonnull(c[i]);
  }
  ck_assert_int_eq(ah_coord_client_relay_role(c[0]), 2);
  for (int i = 1; i < 4; i++) ck_assert_int_eq(ah_coord_client_relay_role(c[i]), 1);
  ah_coord_t *lead = client_on(&st, "hostB", NULL);
  ck_assert_ptr_nonnull(lead);
  ck_assert_int_eq(ah_coord_client_relay_role(lead), 2); /* alone on its host: its own relay */
  for (int i = 0; i < 4; i++) ck_assert_int_eq(ah_coord_join_rank(c[i], comm, 4, i, NULL), 0);
  ck_assert_int_eq(ah_coord_join(lead, comm, 4), 0);
  /* each process learns the verdict on its own (through the relay or not): wait for every one */
  for (int i = 0; i < 4; i++) {
    for (int t = 0; t < 500 && ah_coord_verdict(c[i], comm) == AH_COORD_VERDICT_NONE; t++)
      sleep_ms(10);
    ck_assert_int_eq(ah_coord_verdict(c[i], comm), AH_COORD_VERDICT_COMPLETE);
  }
  ck_assert_int_eq(ah_coord_hub_clients(hub), 5); /* five authenticated processes, two sockets */

  /* One ring of the relay's doorbell per segment for its three local processes, not one wake-up
   * each: the doorbell's counter (read from a peer that took it like a local process) counts rings. */
  int bell = -1, raw = raw_local(c[0], &bell, NULL);
  ck_assert_int_ge(raw, 0);
  ck_assert_int_ge(bell, 0);
  sleep_ms(100);
  uint64_t rings = 0;
  if (read(bell, &rings, sizeof rings) < 0) rings = 0; /* reset: the rings so far */
  publish_range(lead, comm, 0, 20, 5);                 /* apart, so that each is its own batch */
  for (int i = 0; i < 4; i++)
    ck_assert_msg(rec_wait(&recs[i], 20, 5000), "client %d got %d", i, rec_count(&recs[i]));
  rings = 0;
  ck_assert_int_eq(read(bell, &rings, sizeof rings), (ssize_t)sizeof rings);
  ck_assert_msg(rings >= 1 && rings <= 30, "%llu rings for 20 segments to 3 local processes",
                (unsigned long long)rings);
  close(bell);
  close(raw);
  publish_range(lead, comm, 20, 100, 0);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(rec_wait(&recs[i], 100, 5000), "client %d got %d", i, rec_count(&recs[i]));
  for (int i = 0; i < 4; i++) ck_assert(rec_exactly(&recs[i], 100));

  /* A publish from a channel: stored once, acknowledged through the relay, delivered to all. */
  ah_key_t k = key_make(comm);
  ah_segment_t s = seg_make(100);
  ck_assert_int_eq(ah_coord_publish(c[2], &k, &s), 0);
  for (int i = 0; i < 4; i++) ck_assert(rec_wait(&recs[i], 101, 5000));
  for (int t = 0; t < 200 && ah_coord_client_unacked(c[2]) > 0; t++) sleep_ms(10);
  ck_assert_uint_eq(ah_coord_client_unacked(c[2]), 0);

  /* The directory between two channels. */
  uint8_t key[AH_COORD_DIR_KEY] = "relay-directory-key";
  uint32_t v = 0xfeedbeef, back = 0;
  ck_assert_int_eq(ah_coord_dir_put(c[1], key, &v, sizeof v), 0);
  ck_assert_int_eq(ah_coord_dir_get(c[3], key, &back, sizeof back, 5.0), 4);
  ck_assert_uint_eq(back, v);

  /* The relay's own connection cut mid-stream: its channels close, everyone reconnects (through a
   * relay again) and gets the rest exactly once. */
  publish_range(lead, comm, 101, 150, 1);
  ah_coord_client_cut(c[0]);
  publish_range(lead, comm, 150, 250, 1);
  for (int i = 0; i < 4; i++)
    ck_assert_msg(rec_wait(&recs[i], 250, 10000), "client %d got %d", i, rec_count(&recs[i]));
  sleep_ms(300); /* a duplicate would arrive by now */
  for (int i = 0; i < 4; i++)
    ck_assert_msg(rec_exactly(&recs[i], 250), "client %d: %d segments", i, rec_count(&recs[i]));
  for (int i = 0; i < 4; i++) ck_assert_int_ge(ah_coord_client_connects(c[i]), 2);
  int relays = 0;
  for (int i = 0; i < 4; i++) relays += ah_coord_client_relay_role(c[i]) == 2;
  ck_assert_int_eq(relays, 1);

  /* With the relay off a client connects directly even where a relay serves its host. */
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  snprintf(o.host, sizeof o.host, "hostA");
  ah_coord_t *direct = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
  ck_assert_ptr_nonnull(direct);
  ck_assert_int_eq(ah_coord_client_relay_role(direct), 0);
  ah_coord_client_close(direct);
  ah_coord_client_close(lead);
  for (int i = 3; i >= 0; i--) ah_coord_client_close(c[i]);
}
END_TEST

/* A deliver callback that holds its I/O thread for 300 ms at the first segment (a process that
 * stops reading), then records like rec_deliver. */
static void stall_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  if (rec_count(arg) == 0) sleep_ms(300);
  rec_deliver(arg, key, seg);
}

/* A replay larger than a local process's ring (4,000 segments, ~390 KB, through a 256 KiB ring) to a
 * process that stalls at the first: the relay finds the ring full, keeps what does not fit and puts
 * it in as the process drains the ring, so the process gets every segment once, in order. */
START_TEST(test_relay_ring_full) {
  const uint64_t comm = 0x41e9f011;
  ah_coord_t *relay = client_on(&st, "hostA", &recs[0]);
  ah_coord_t *lead = client_on(&st, "hostB", NULL);
  ck_assert(relay && lead);
  ck_assert_int_eq(ah_coord_join_rank(relay, comm, 3, 0, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(lead, comm, 3, 1, NULL), 0);
  const int n = 4000;
  ck_assert_uint_gt((unsigned)n * FRAME_SEGMENT_BYTES_TEST, CLIENT_RING_BYTES);
  publish_range(lead, comm, 0, n, 0);
  ck_assert_msg(rec_wait(&recs[0], n, 20000), "relay got %d", rec_count(&recs[0]));
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  o.relay = 1;
  snprintf(o.host, sizeof o.host, "hostA");
  ah_coord_t *late = ah_coord_client_open(&st, NULL, &o, stall_deliver, &recs[1]);
  ck_assert_ptr_nonnull(late);
  ck_assert_int_eq(ah_coord_client_relay_role(late), 1);
  ck_assert_int_eq(ah_coord_join_rank(late, comm, 3, 2, NULL), 0);
  ck_assert_msg(rec_wait(&recs[1], n, 20000), "late got %d", rec_count(&recs[1]));
  ck_assert(rec_exactly(&recs[1], n));
  ck_assert_int_eq(ah_coord_client_connects(late), 1);
  ck_assert_int_gt(ah_coord_client_ring_waits(relay), 0);
  ah_coord_client_close(late);
  ah_coord_client_close(lead);
  ah_coord_client_close(relay);
}
END_TEST

/* A deliver callback that records, and notes the thread it ran on. */
static _Atomic pthread_t deliver_thread;
static void thread_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  atomic_store(&deliver_thread, pthread_self());
  rec_deliver(arg, key, seg);
}

/* A relay (its doorbell for segments set to `lazy_ms`) and a local process of host `host` recording
 * into recs[0] and recs[1] (the local one noting its deliver thread), a leader on `other`; all
 * joined to comm of 3 ranks, 200 ms later. */
/* Options of a client of host `host` ("": this hostname) with the relay on, its lazy doorbell at
 * lazy_ms, and no heartbeat during a test (a PONG would ring the doorbell). */
static void quiet_relay_opts(ah_coord_client_opts_t *o, const char *host, int lazy_ms) {
  client_opts_test(o);
  o->relay = 1;
  o->relay_lazy_ms = lazy_ms;
  o->heartbeat_ms = 20000;
  o->dead_ms = 60000;
  snprintf(o->host, sizeof o->host, "%s", host);
}

/* Checks that relay, peer (through it) and lead opened, joins the three to comm of 3 ranks and
 * lets the joins land. */
static void host_join(ah_coord_t *relay, ah_coord_t *peer, ah_coord_t *lead, uint64_t comm) {
  ck_assert(relay && peer && lead);
  ck_assert_int_eq(ah_coord_client_relay_role(peer), 1);
  ck_assert_int_eq(ah_coord_join_rank(relay, comm, 3, 0, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(peer, comm, 3, 1, NULL), 0);
  ck_assert_int_eq(ah_coord_join_rank(lead, comm, 3, 2, NULL), 0);
  sleep_ms(200);
}

static void lazy_host(const char *host, const char *other, uint64_t comm, int lazy_ms,
                      ah_coord_t **relay_p, ah_coord_t **peer_p, ah_coord_t **lead_p) {
  ah_coord_client_opts_t o;
  quiet_relay_opts(&o, host, lazy_ms);
  ah_coord_t *relay = ah_coord_client_open(&st, NULL, &o, rec_deliver, &recs[0]);
  ah_coord_t *peer = ah_coord_client_open(&st, NULL, &o, thread_deliver, &recs[1]);
  ah_coord_t *lead = client_on(&st, other, NULL);
  host_join(relay, peer, lead, comm);
  ck_assert_int_eq(ah_coord_client_relay_role(relay), 2);
  *relay_p = relay, *peer_p = peer, *lead_p = lead;
}

/* A segment reaching a host wakes only its relay: it waits in the local process's ring until a
 * thread that needs it takes it (ah_coord_poll, delivered on that thread, at once), while anything
 * else for the process (a directory answer) rings the doorbell at once. With the relay's lazy
 * doorbell far off, nothing else delivers the segment. */
START_TEST(test_relay_segment_waits_for_the_rank) {
  const uint64_t comm = 0x1a2ee;
  ah_coord_t *relay, *peer, *lead;
  lazy_host("hostL", "hostM", comm, 60000, &relay, &peer, &lead);
  ck_assert_int_eq(ah_coord_poll(relay), 0); /* the relay reads its own socket: nothing to poll */
  ck_assert_int_eq(ah_coord_poll(peer), 0);  /* nothing waits yet */
  publish_range(lead, comm, 0, 1, 0);
  ck_assert(rec_wait(&recs[0], 1, 5000)); /* the relay's own copy, on its I/O thread */
  sleep_ms(100);
  ck_assert_int_eq(rec_count(&recs[1]), 0); /* no wake-up for it */
  ck_assert_int_eq(ah_coord_poll(peer), 1);
  ck_assert(rec_exactly(&recs[1], 1));
  ck_assert(pthread_equal(atomic_load(&deliver_thread), pthread_self()));
  ck_assert_int_eq(ah_coord_poll(peer), 0);
  /* A directory answer is no segment: the doorbell rings for it. */
  uint8_t dkey[AH_COORD_DIR_KEY] = {7}, val[8] = {1, 2, 3}, got[8] = {0};
  ck_assert_int_eq(ah_coord_dir_put(lead, dkey, val, sizeof val), 0);
  uint64_t t0 = ah_coord_now_ns();
  ck_assert_int_eq(ah_coord_dir_get(peer, dkey, got, sizeof got, 5.0), (int)sizeof val);
  ck_assert_uint_lt(ah_coord_now_ns() - t0, 4000000000ull);
  ck_assert_mem_eq(got, val, sizeof val);
  host_close(relay, peer, lead);
}
END_TEST

/* A process that forks (a data loader's workers) shares its ring with the child: the child's
 * poll takes nothing (its copy of the coordinator is not alive), and the parent still finds the
 * segment there. The shim's coordinator (ah_coord_connect) behind a relay of this host. */
START_TEST(test_relay_forked_child_takes_nothing) {
  const uint64_t comm = 0x1a2f0;
  ah_coord_client_opts_t o;
  quiet_relay_opts(&o, "", 60000);
  ah_coord_t *relay =
      ah_coord_client_open(&st, NULL, &o, rec_deliver, &recs[0]); /* this hostname */
  ah_coord_setup_t setup = {.relay = 1};
  ah_coord_t *peer = ah_coord_connect(&st, &setup, rec_deliver, &recs[1]);
  ah_coord_t *lead = client_on(&st, "hostF", NULL);
  host_join(relay, peer, lead, comm);
  publish_range(lead, comm, 0, 1, 0);
  ck_assert(rec_wait(&recs[0], 1, 5000));
  sleep_ms(100);
  pid_t pid = fork();
  if (pid == 0) _exit(ah_coord_poll(peer) == 0 && rec_count(&recs[1]) == 0 ? 0 : 1);
  int status = -1;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  ck_assert_int_eq(ah_coord_poll(peer), 1);
  ck_assert(rec_exactly(&recs[1], 1));
  ah_coord_client_close(lead);
  ah_coord_client_close(relay);
}
END_TEST

static _Atomic int poll_stop;
static void *poll_loop(void *arg) {
  while (!atomic_load(&poll_stop)) (void)ah_coord_poll(arg);
  return NULL;
}

/* Two consumers of one ring at once: a thread polling without pause and the I/O thread, woken by
 * the lazy doorbell (1 ms) and by the directory answers that arrive meanwhile. Every segment is
 * delivered once, in order. */
START_TEST(test_relay_poll_beside_the_io_thread) {
  const uint64_t comm = 0x1a2f1;
  ah_coord_t *relay, *peer, *lead;
  lazy_host("hostR", "hostS", comm, 1, &relay, &peer, &lead);
  atomic_store(&poll_stop, 0);
  pthread_t th;
  ck_assert_int_eq(pthread_create(&th, NULL, poll_loop, peer), 0);
  uint8_t dkey[AH_COORD_DIR_KEY] = {9}, val[4] = {4, 3, 2, 1}, got[4];
  ck_assert_int_eq(ah_coord_dir_put(lead, dkey, val, sizeof val), 0);
  const int n = 2000;
  ah_key_t k = key_make(comm);
  for (int i = 0; i < n; i++) {
    ah_segment_t sg = seg_make((uint64_t)i);
    ck_assert_int_eq(ah_coord_publish(lead, &k, &sg), 0);
    if (i % 200 == 0)
      ck_assert_int_eq(ah_coord_dir_get(peer, dkey, got, sizeof got, 5.0), (int)sizeof val);
  }
  ck_assert_msg(rec_wait(&recs[1], n, 20000), "local got %d", rec_count(&recs[1]));
  sleep_ms(100);
  atomic_store(&poll_stop, 1);
  pthread_join(th, NULL);
  ck_assert(rec_exactly(&recs[1], n));
  host_close(relay, peer, lead);
}
END_TEST

/* A deliver callback that only counts: it touches no new memory, so the faults counted below are
 * the ring's. */
static _Atomic int counted;
static void count_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg) {
  (void)arg, (void)key, (void)seg;
  atomic_fetch_add(&counted, 1);
}

/* This thread's minor page faults so far. */
static long thread_minflt(void) {
  struct rusage ru;
  return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_minflt : -1;
}

/* A local process's ring is backed and mapped in full when the relay passes it: taking segments
 * does not page-fault. Before, every process of a job faulted on the same decision each time its ring
 * crossed into a page not yet touched (4 KiB, every 45 segments): the relay allocating and zeroing
 * a page per local process, each waiting rank mapping it — at 1,024 processes about 7 ms of CPU on
 * one decision in 45 (bench/coord_scale). */
START_TEST(test_relay_ring_is_mapped_ahead) {
  const uint64_t comm = 0x1a2f2;
  ah_coord_client_opts_t o;
  quiet_relay_opts(&o, "hostP", 60000);
  ah_coord_t *relay = ah_coord_client_open(&st, NULL, &o, rec_deliver, &recs[0]);
  ah_coord_t *peer = ah_coord_client_open(&st, NULL, &o, count_deliver, NULL);
  ah_coord_t *lead = client_on(&st, "hostQ", NULL);
  host_join(relay, peer, lead, comm);
  /* Every page of the ring is there before any segment (the relay backed it). */
  size_t pg = (size_t)sysconf(_SC_PAGESIZE), npg = (sizeof(client_ring_t) + pg - 1) / pg;
  unsigned char *vec = calloc(npg, 1);
  ck_assert_ptr_nonnull(vec);
  ck_assert_int_eq(mincore(peer->ring, sizeof(client_ring_t), vec), 0);
  size_t absent = 0;
  for (size_t i = 0; i < npg; i++) absent += !(vec[i] & 1);
  free(vec);
  ck_assert_msg(absent == 0, "%zu of the ring's %zu pages not backed", absent, npg);
  /* Taking segments as a waiting rank does, a page of the ring's worth at a time (50 segments),
   * costs this thread no fault of the ring: 10 pages, where a ring backed page by page as the relay writes
   * faults on each (a fault maps the pages around it that exist, not those still to come). */
  atomic_store(&counted, 0);
  publish_range(lead, comm, 0, 1, 0);
  for (int t = 0; t < 5000 && atomic_load(&counted) < 1; t++, sleep_ms(1))
    (void)ah_coord_poll(peer);
  ck_assert_int_eq(atomic_load(&counted), 1); /* the take path has run once */
  long faults = 0;
  for (int chunk = 0; chunk < 10; chunk++) {
    int to = 1 + 50 * (chunk + 1);
    publish_range(lead, comm, 1 + 50 * chunk, to, 0);
    ck_assert(rec_wait(&recs[0], to, 10000)); /* the relay has put them into the ring */
    sleep_ms(5);
    long f0 = thread_minflt();
    while (ah_coord_poll(peer) > 0) {}
    faults += thread_minflt() - f0;
    ck_assert_int_eq(atomic_load(&counted), to);
  }
  /* At most 3: under AddressSanitizer the shadow of the ring's bytes faults in as they are first
   * read (a page of shadow per 32 KiB of ring, 2 here); a ring backed page by page gives 10. */
  ck_assert_msg(faults <= 3, "%ld page faults taking 500 segments", faults);
  host_close(relay, peer, lead);
}
END_TEST

/* Segments no thread takes reach the process anyway: the relay rings the doorbell once they have
 * sat unread for its lazy time, and the process's I/O thread delivers them, in order. */
START_TEST(test_relay_lazy_doorbell) {
  const uint64_t comm = 0x1a2ef;
  ah_coord_t *relay, *peer, *lead;
  lazy_host("hostN", "hostO", comm, 50, &relay, &peer, &lead);
  publish_range(lead, comm, 0, 20, 5);
  ck_assert_msg(rec_wait(&recs[1], 20, 5000), "local got %d", rec_count(&recs[1]));
  ck_assert(rec_exactly(&recs[1], 20));
  ck_assert(!pthread_equal(atomic_load(&deliver_thread), pthread_self()));
  host_close(relay, peer, lead);
}
END_TEST

/* Passing the doorbell and ring: both arrive; a peer that sends ordinary bytes first (a relay of
 * an older autoha, which sends HELLO) or too few descriptors is refused by name, and whatever
 * descriptors came are closed. */
START_TEST(test_relay_fd_passing) {
  char err[AH_NET_ERR_LEN];
  uint64_t dl = ah_coord_now_ns() + 2000000000ull;
  int sp[2], a = eventfd(0, EFD_CLOEXEC), b = eventfd(0, EFD_CLOEXEC);
  ck_assert(a >= 0 && b >= 0);
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  int two[2] = {a, b}, got[2] = {-1, -1};
  ck_assert_int_eq(ah_coord_net_fd_send(err, sp[0], two, 2), AH_NET_OK);
  ck_assert_int_eq(ah_coord_net_fd_recv(err, sp[1], dl, got, 2), AH_NET_OK);
  uint64_t one = 1, v = 0; /* the received doorbell is the same eventfd */
  ck_assert_int_eq(write(got[0], &one, sizeof one), (ssize_t)sizeof one);
  ck_assert_int_eq(read(a, &v, sizeof v), (ssize_t)sizeof v);
  ck_assert_uint_eq(v, 1);
  close(got[0]);
  close(got[1]);

  uint8_t hello[AH_COORD_HDR_BYTES];
  ah_coord_hdr_encode(AH_MSG_HELLO, AH_COORD_NONCE_BYTES, hello);
  ck_assert_int_eq(ah_coord_net_write_full(err, sp[0], hello, sizeof hello, dl), AH_NET_OK);
  ck_assert_int_eq(ah_coord_net_fd_recv(err, sp[1], dl, got, 2), AH_NET_ERR);
  ck_assert_msg(strstr(err, "expected 2 descriptors") && strstr(err, "and 0"), "%s", err);

  int fresh[2];
  ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fresh), 0);
  ck_assert_int_eq(ah_coord_net_fd_send(err, fresh[0], two, 1), AH_NET_OK);
  ck_assert_int_eq(ah_coord_net_fd_recv(err, fresh[1], dl, got, 2), AH_NET_ERR);
  ck_assert_msg(strstr(err, "and 1"), "%s", err);
  close(fresh[0]); /* nothing more comes: closed, not a wait to the deadline */
  ck_assert_int_eq(ah_coord_net_fd_recv(err, fresh[1], dl, got, 2), AH_NET_ERR);
  ck_assert_msg(strstr(err, "peer closed"), "%s", err);
  close(fresh[1]);
  close(sp[0]);
  close(sp[1]);
  close(a);
  close(b);
}
END_TEST

/* The relay is another process, killed with SIGKILL while the leader publishes: its three local
 * processes fall back (one becomes the relay) and each delivers every segment once, in order. */
START_TEST(test_relay_killed_midstream) {
  const uint64_t comm = 0xdead5e1a;
  int rd, wr;
  pid_t pid = fork_reporting(&rd, &wr);
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    ah_coord_t *c = client_on(&st, "hostK", NULL);
    char role = c ? (char)('0' + ah_coord_client_relay_role(c)) : 'x';
    if (write(wr, &role, 1) != 1) _exit(2);
    for (;;) pause();
  }
  char role = 0;
  ck_assert_int_eq(read(rd, &role, 1), 1);
  close(rd);
  ck_assert_int_eq(role, '2'); /* the child holds hostK's relay */
  ah_coord_t *c[3];
  for (int i = 0; i < 3; i++) {
    c[i] = client_on(&st, "hostK", &recs[i]);
    ck_assert_ptr_nonnull(c[i]);
    ck_assert_int_eq(ah_coord_client_relay_role(c[i]), 1);
    ck_assert_int_eq(ah_coord_join_rank(c[i], comm, 3, i, NULL), 0);
  }
  ah_coord_t *lead = client_on(&st, "hostL", NULL);
  ck_assert_ptr_nonnull(lead);
  ck_assert_int_eq(ah_coord_join(lead, comm, 3), 0);
  for (int t = 0; t < 200 && ah_coord_verdict(c[2], comm) == AH_COORD_VERDICT_NONE; t++)
    sleep_ms(10);
  ck_assert_int_eq(ah_coord_verdict(c[2], comm), AH_COORD_VERDICT_COMPLETE);
  publish_range(lead, comm, 0, 100, 1);
  kill(pid, SIGKILL);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  publish_range(lead, comm, 100, 300, 1);
  for (int i = 0; i < 3; i++)
    ck_assert_msg(rec_wait(&recs[i], 300, 10000), "client %d got %d", i, rec_count(&recs[i]));
  sleep_ms(300);
  int relays = 0, through = 0;
  for (int i = 0; i < 3; i++) {
    ck_assert_msg(rec_exactly(&recs[i], 300), "client %d: %d segments", i, rec_count(&recs[i]));
    ck_assert_int_ge(ah_coord_client_connects(c[i]), 2);
    relays += ah_coord_client_relay_role(c[i]) == 2;
    through += ah_coord_client_relay_role(c[i]) == 1;
  }
  ck_assert_msg(relays == 1, "%d relays: %s", relays,
                log_text()); /* a new relay was elected and carries the other two */
  ck_assert_msg(through == 2, "%d through the relay: %s", through, log_text());
  ah_coord_client_close(lead);
  for (int i = 2; i >= 0; i--) ah_coord_client_close(c[i]);
}
END_TEST

/* A connection to the relay's endpoint, by hand, with the job's secret: the handshake with the hub
 * through the relay, then the relay's doorbell (to bell_p, or closed) and this peer's ring (mapped
 * to ring_p, or unmapped), which it passes right behind WELCOME. Returns the fd or -1. */
static int raw_local(ah_coord_t *relay, int *bell_p, client_ring_t **ring_p) {
  struct sockaddr_storage ss;
  socklen_t sl;
  char err[AH_NET_ERR_LEN];
  int fd = -1, fds[AH_COORD_RELAY_FDS] = {-1, -1};
  uint64_t last_pub;
  client_ring_t *ring = NULL;
  if (ah_coord_client_relay_endpoint(relay, &ss, &sl) != 0 ||
      ah_coord_dial((struct sockaddr *)&ss, sl, st.secret, 0x10ca1, 3000, &fd, fds, &last_pub, err,
                    sizeof err) != 0)
    return -1;
  if (!(ring = ah_coord_client_ring_map(fds[1], err, sizeof err))) {
    close(fds[0]);
    close(fd);
    return -1;
  }
  if (bell_p) *bell_p = fds[0];
  else close(fds[0]);
  if (ring_p) *ring_p = ring;
  else ah_coord_client_ring_unmap(ring);
  return fd;
}

/* A connection to the relay's endpoint, by hand, with nothing else (no handshake). */
static int raw_connect_local(ah_coord_t *relay) {
  struct sockaddr_storage ss;
  socklen_t sl;
  if (ah_coord_client_relay_endpoint(relay, &ss, &sl) != 0) return -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && connect(fd, (struct sockaddr *)&ss, sl) != 0) {
    close(fd);
    fd = -1;
  }
  return fd;
}

/* Reads exactly n bytes from fd within 3 s with recvmsg. Returns 0, or -1 (closed, timed out, or a
 * descriptor came with them: each is closed and *fds_p counts it). */
static int read_no_fds(int fd, uint8_t *b, size_t n, int *fds_p) {
  struct timeval tv = {.tv_sec = 3};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  size_t got = 0;
  while (got < n) {
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(8 * sizeof(int))];
    } cm;
    struct iovec iov = {.iov_base = b + got, .iov_len = n - got};
    struct msghdr msg = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = &cm, .msg_controllen = sizeof cm};
    ssize_t r = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&msg); r > 0 && h; h = CMSG_NXTHDR(&msg, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS)
        for (size_t k = 0; k < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); k++) {
          int passed;
          memcpy(&passed, CMSG_DATA(h) + k * sizeof(int), sizeof passed);
          close(passed);
          (*fds_p)++;
        }
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return *fds_p ? -1 : 0;
}

/* Whether the peer closes fd within ms (reading and dropping what comes first; fd made blocking). */
static int closed_within(int fd, int ms) {
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK); /* reads wait, up to the timeout */
  struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  uint8_t b[1024];
  ssize_t r;
  while ((r = read(fd, b, sizeof b)) > 0) {}
  return r == 0;
}

/* Two processes of host `host` (the first becomes its relay, the second goes through it; recs[0]
 * and recs[1] record what they are delivered) and a leader alone on host `other`, all joined to
 * comm of 2 ranks, 200 ms later. */
static void host_and_lead(const char *host, const char *other, uint64_t comm, ah_coord_t **relay_p,
                          ah_coord_t **peer_p, ah_coord_t **lead_p) {
  ah_coord_t *relay = client_on(&st, host, &recs[0]);
  ah_coord_t *peer = client_on(&st, host, &recs[1]);
  ah_coord_t *lead = client_on(&st, other, NULL);
  ck_assert(relay && peer && lead);
  ck_assert_int_eq(ah_coord_client_relay_role(peer), 1);
  ck_assert_int_eq(ah_coord_join(relay, comm, 2), 0);
  ck_assert_int_eq(ah_coord_join(peer, comm, 2), 0);
  ck_assert_int_eq(ah_coord_join(lead, comm, 2), 0);
  sleep_ms(200);
  *relay_p = relay, *peer_p = peer, *lead_p = lead;
}

/* A local peer that does not know the secret gets the hub's HELLO through the relay and is refused
 * at AUTH by the hub; one that sends garbage is refused by the relay; a client of another job (other
 * secret) on the same host and hub address does not find this job's relay. The host's legitimate
 * processes keep being served. */
START_TEST(test_relay_refuses_local_without_secret) {
  const uint64_t comm = 0xa0717e1a;
  ah_coord_t *relay, *peer, *lead;
  host_and_lead("hostA", "hostB", comm, &relay, &peer, &lead);

  /* Wrong secret: HELLO comes (from the hub, through the relay) and nothing else — no doorbell, no
   * ring: the relay passes them only behind WELCOME — then AUTH fails and the channel closes. */
  int fd = raw_connect_local(relay), nfds = 0;
  ck_assert_int_ge(fd, 0);
  char err[AH_NET_ERR_LEN];
  uint8_t hello[AH_COORD_HDR_BYTES + AH_COORD_NONCE_BYTES];
  uint64_t dl = ah_coord_now_ns() + 3000000000ull;
  ck_assert_int_eq(read_no_fds(fd, hello, sizeof hello, &nfds), 0);
  ck_assert_int_eq(nfds, 0);
  ah_coord_hdr_t h;
  ck_assert_int_eq(ah_coord_hdr_decode(hello, &h, err, sizeof err), 0);
  ck_assert_int_eq(h.type, AH_MSG_HELLO);
  uint8_t auth[AH_COORD_HDR_BYTES + 72];
  memset(auth, 0x3c, sizeof auth); /* nonce_c */
  ah_coord_hdr_encode(AH_MSG_AUTH, 72, auth);
  uint8_t wrong[16];
  memset(wrong, 0x5a, sizeof wrong);
  ck_assert_int_eq(ah_coord_mac(wrong, "autoha-client", hello + AH_COORD_HDR_BYTES,
                                auth + AH_COORD_HDR_BYTES, 7, auth + AH_COORD_HDR_BYTES + 40),
                   0);
  ah_coord_put_u64(auth + AH_COORD_HDR_BYTES + 32, 7);
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, auth, sizeof auth, dl), AH_NET_OK);
  uint8_t more[1];
  ck_assert_int_eq(read_no_fds(fd, more, sizeof more, &nfds), -1); /* closed ... */
  ck_assert_int_eq(nfds, 0);                                       /* ... with no descriptor */
  close(fd);
  ck_assert(log_wait("channel", 2000));
  ck_assert_msg(strstr(log_text(), "authentication failed (wrong job secret)"), "%s", log_text());

  /* Garbage (another protocol version) to the relay: refused there, by name. */
  fd = raw_connect_local(relay);
  ck_assert_int_ge(fd, 0);
  uint8_t junk[AH_COORD_HDR_BYTES] = {0, 0, 0, 0, 4, AH_MSG_PING, 0, 0};
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, junk, sizeof junk, dl), AH_NET_OK);
  ck_assert(closed_within(fd, 3000));
  close(fd);
  ck_assert(log_wait("host relay to hub", 2000));
  ck_assert_msg(strstr(log_text(), "refused a local process: wrong protocol version 4"), "%s",
                log_text());

  /* Another job's secret, same host and hub address: it does not collide with this relay (it
   * elects itself on its own endpoint) and the hub refuses it. */
  ah_coord_stamp_t other = st;
  other.secret[0] ^= 0xff;
  ah_coord_t *intruder = client_on(&other, "hostA", NULL);
  ck_assert_ptr_null(intruder);

  /* The host's processes are still served through the relay. */
  ah_key_t k = key_make(comm);
  ah_segment_t s = seg_make(0);
  ck_assert_int_eq(ah_coord_publish(lead, &k, &s), 0);
  ck_assert(rec_wait(&recs[0], 1, 5000));
  ck_assert(rec_wait(&recs[1], 1, 5000));
  ck_assert_int_eq(ah_coord_client_relay_role(peer), 1);
  ck_assert_int_eq(ah_coord_client_connects(peer), 1);
  host_close(relay, peer, lead);
}
END_TEST

/* A local process writing without pause: the relay must still pass the hub's frames to its other
 * local processes (it reads at most RELAY_READ_FRAMES frames of one local process per wake-up).
 * Note that on a unix socket a blocked writer wakes only once much of its buffer is free, so the relay
 * often drains the socket between its writes: this test passes without the bound too on the machine it
 * was written on; it guards the behaviour, the bound guards a faster writer (the hub's own test,
 * over TCP, fails without its bound). */
START_TEST(test_relay_local_writing_without_pause) {
  const uint64_t comm = 0xf100d;
  ah_coord_t *relay, *peer, *lead;
  host_and_lead("hostF", "hostG", comm, &relay, &peer, &lead);
  put_flood_t f = {.fd = raw_local(relay, NULL, NULL)}; /* authenticated: its puts reach the hub */
  ck_assert_int_ge(f.fd, 0);
  ck_assert_int_eq(put_flood_start(&f), 0);
  ah_key_t k = key_make(comm);
  ah_segment_t s = seg_make(0);
  ck_assert_int_eq(ah_coord_publish(lead, &k, &s), 0);
  ck_assert(rec_wait(&recs[1], 1, 5000));      /* the host's other process got it ... */
  ck_assert_int_eq(atomic_load(&f.capped), 0); /* ... while the flood went on */
  put_flood_stop(&f);
  close(f.fd);
  host_close(relay, peer, lead);
}
END_TEST

/* Reads one frame from fd within 3 s into f (header included). Returns its type, or -1. */
static int frame_read(int fd, uint8_t *f) {
  char err[AH_NET_ERR_LEN];
  uint64_t dl = ah_coord_now_ns() + 3000000000ull;
  ah_coord_hdr_t h;
  if (ah_coord_net_read_full(err, fd, f, AH_COORD_HDR_BYTES, dl) != AH_NET_OK ||
      ah_coord_hdr_decode(f, &h, err, sizeof err) != 0 ||
      (h.len && ah_coord_net_read_full(err, fd, f + AH_COORD_HDR_BYTES, h.len, dl) != AH_NET_OK))
    return -1;
  return h.type;
}

/* Sends a relay message about channel chan, with an inner frame of n bytes for RELAY_DATA. */
static int relay_send(int fd, uint8_t type, uint32_t chan, const uint8_t *inner, size_t n) {
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(type, (uint32_t)(AH_COORD_RELAY_FIXED + n), f);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES, chan);
  if (n) memcpy(f + AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED, inner, n);
  return ah_coord_net_write_full(err, fd, f, AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED + n,
                                 ah_coord_now_ns() + 2000000000ull) == AH_NET_OK
             ? 0
             : -1;
}

/* The hub's side of the channels, driven by hand from an authenticated connection: a channel is
 * greeted with HELLO; a channel frame whose header fails, or that is itself a relay message, drops
 * that channel (RELAY_CLOSE back, one line naming it) and keeps the relay; a frame for an unknown
 * channel is ignored; an unauthenticated relay cannot open channels; a channel opened twice drops
 * the relay's connection. */
START_TEST(test_hub_refuses_bad_channel_frames) {
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  int fd = raw_authed_connect(&st, 0x7e1a);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_OPEN, 1, NULL, 0), 0);
  ck_assert_int_eq(frame_read(fd, f), AH_MSG_RELAY_DATA);
  ck_assert_uint_eq(ah_coord_get_u32(f + AH_COORD_HDR_BYTES), 1);
  ck_assert_int_eq(f[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED + 5], AH_MSG_HELLO);
  uint8_t bad[AH_COORD_HDR_BYTES] = {0, 0, 0, 0, 4, AH_MSG_PING, 0, 0};
  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_DATA, 1, bad, sizeof bad), 0);
  ck_assert_int_eq(frame_read(fd, f), AH_MSG_RELAY_CLOSE);
  ck_assert_uint_eq(ah_coord_get_u32(f + AH_COORD_HDR_BYTES), 1);
  ck_assert(log_wait("channel 1: wrong protocol version 4", 2000));

  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_OPEN, 2, NULL, 0), 0);
  ck_assert_int_eq(frame_read(fd, f), AH_MSG_RELAY_DATA); /* its HELLO */
  uint8_t nested[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED];
  ah_coord_hdr_encode(AH_MSG_RELAY_CLOSE, AH_COORD_RELAY_FIXED, nested);
  ah_coord_put_u32(nested + AH_COORD_HDR_BYTES, 9);
  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_DATA, 2, nested, sizeof nested), 0);
  ck_assert_int_eq(frame_read(fd, f), AH_MSG_RELAY_CLOSE);
  ck_assert(log_wait("inside a relay's channel", 2000));

  uint8_t ping[AH_COORD_HDR_BYTES];
  ah_coord_hdr_encode(AH_MSG_PING, 0, ping);
  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_DATA, 77, ping, sizeof ping),
                   0);     /* unknown: ignored */
  ck_assert(raw_ping(fd)); /* the relay's own connection is kept */

  int un = raw_connect(&st); /* not authenticated: RELAY_OPEN is refused with the connection */
  ck_assert_int_ge(un, 0);
  ck_assert_int_eq(frame_read(un, f), AH_MSG_HELLO);
  ck_assert_int_eq(relay_send(un, AH_MSG_RELAY_OPEN, 1, NULL, 0), 0);
  ck_assert(closed_within(un, 3000));
  close(un);

  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_OPEN, 3, NULL, 0), 0);
  ck_assert_int_eq(relay_send(fd, AH_MSG_RELAY_OPEN, 3, NULL, 0), 0);
  ck_assert(closed_within(fd, 3000));
  close(fd);
  ck_assert(log_wait("channel 3 opened twice", 2000));
  ck_assert(legit_roundtrip(&st, 0x7e1a7e1a)); /* and everyone else is served */
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_INFO);
  const TTest *const tests[] = {test_relay_forwards,
                                test_relay_ring_full,
                                test_relay_segment_waits_for_the_rank,
                                test_relay_lazy_doorbell,
                                test_relay_forked_child_takes_nothing,
                                test_relay_poll_beside_the_io_thread,
                                test_relay_ring_is_mapped_ahead,
                                test_relay_fd_passing,
                                test_relay_killed_midstream,
                                test_relay_refuses_local_without_secret,
                                test_hub_refuses_bad_channel_frames,
                                test_relay_local_writing_without_pause};
  return ah_check_main(
      "coord_relay",
      (ah_check_case_t){.name = "relay", .timeout = 60, .setup = setup, .teardown = teardown},
      tests, AH_CHECK_COUNT(tests));
}
