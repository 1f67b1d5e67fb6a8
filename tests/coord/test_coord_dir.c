/* The hub's key/value directory (ah_coord_dir_put / ah_coord_dir_get) on a live hub on 127.0.0.1:
 * a value put by one process or thread is read by another, a put replaces, a get waits for a later
 * put (also across a cut connection) and gives up at its timeout, sizes are bounded on both sides,
 * thousands of keys coexist, a client flooding the directory is refused with one log line while
 * others are served, a malformed directory frame is refused by name without dropping the
 * connection, and an answer that arrives after the get's timeout is still taken (a miss is the
 * hub's word, never a timeout's guess). */
#include <check.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_test_util.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;
static ah_coord_t *opened[8];
static int nopened;

static void setup(void) {
  log_start();
  hub = hub_start_test(&st);
  ck_assert_ptr_nonnull(hub);
}

static void teardown(void) {
  while (nopened > 0) ah_coord_client_close(opened[--nopened]);
  ah_coord_hub_close(hub);
  log_stop();
}

static ah_coord_t *client_of(const ah_coord_stamp_t *stamp) {
  ah_coord_client_opts_t o;
  client_opts_test(&o);
  ah_coord_t *c = ah_coord_client_open(stamp, NULL, &o, NULL, NULL);
  ck_assert_ptr_nonnull(c);
  ck_assert_int_lt(nopened, (int)(sizeof opened / sizeof *opened));
  opened[nopened++] = c;
  return c;
}

static ah_coord_t *client(void) { return client_of(&st); }

/* Key number n: "qp" and n in its first bytes, the rest a pattern (a GID + QPN in real use). */
static void key_of(uint32_t n, uint8_t key[AH_COORD_DIR_KEY]) {
  for (int i = 0; i < AH_COORD_DIR_KEY; i++) key[i] = (uint8_t)(i * 7 + 1);
  key[0] = 'q', key[1] = 'p';
  ah_coord_put_u32(key + 2, n);
}

static double now_s(void) { return (double)ah_coord_now_ns() / 1e9; }

START_TEST(put_in_one_client_is_read_by_another) {
  ah_coord_t *a = client(), *b = client();
  uint8_t k[AH_COORD_DIR_KEY], v[64];
  key_of(1, k);
  ck_assert_int_eq(ah_coord_dir_put(a, k, "shadow qp 0x1234 psn 77", 23), 0);
  memset(v, 0, sizeof v);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 5.0), 23);
  ck_assert_str_eq((char *)v, "shadow qp 0x1234 psn 77");
  /* the writer reads its own value too, and an empty value is a value */
  key_of(2, k);
  ck_assert_int_eq(ah_coord_dir_put(a, k, NULL, 0), 0);
  ck_assert_int_eq(ah_coord_dir_get(a, k, v, sizeof v, 5.0), 0);
}
END_TEST

START_TEST(put_replaces_the_value) {
  ah_coord_t *a = client(), *b = client();
  uint8_t k[AH_COORD_DIR_KEY];
  uint64_t v = 0;
  key_of(3, k);
  uint64_t delivered = 100;
  ck_assert_int_eq(ah_coord_dir_put(a, k, &delivered, sizeof delivered), 0);
  ck_assert_int_eq(ah_coord_dir_get(b, k, &v, sizeof v, 5.0), 8);
  ck_assert_uint_eq(v, 100);
  delivered = 250;
  ck_assert_int_eq(ah_coord_dir_put(a, k, &delivered, sizeof delivered), 0);
  ck_assert_int_eq(ah_coord_dir_get(a, k, &v, sizeof v, 5.0), 8); /* a's frames arrive in order */
  ck_assert_int_eq(ah_coord_dir_get(b, k, &v, sizeof v, 5.0), 8);
  ck_assert_uint_eq(v, 250);
  /* a shorter value replaces a longer one whole */
  ck_assert_int_eq(ah_coord_dir_put(a, k, "xy", 2), 0);
  ck_assert_int_eq(ah_coord_dir_get(a, k, &v, sizeof v, 5.0), 2);
  ck_assert_int_eq(ah_coord_dir_get(b, k, &v, sizeof v, 5.0), 2);
}
END_TEST

typedef struct {
  ah_coord_t *c;
  uint8_t key[AH_COORD_DIR_KEY];
  double timeout_s;
  char val[64];
  int rc;
  double took_s;
} getter_t;

static void *getter(void *arg) {
  getter_t *g = arg;
  double t0 = now_s();
  g->rc = ah_coord_dir_get(g->c, g->key, g->val, sizeof g->val, g->timeout_s);
  g->took_s = now_s() - t0;
  return NULL;
}

START_TEST(get_waits_for_a_later_put) {
  ah_coord_t *a = client(), *b = client();
  getter_t g = {.c = b, .timeout_s = 10.0};
  key_of(4, g.key);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, getter, &g), 0);
  sleep_ms(400); /* the get is at the hub, waiting */
  ck_assert_int_eq(ah_coord_dir_put(a, g.key, "late", 5), 0);
  pthread_join(t, NULL);
  ck_assert_int_eq(g.rc, 5);
  ck_assert_str_eq(g.val, "late");
  ck_assert_msg(g.took_s >= 0.35 && g.took_s < 5.0, "get took %.3f s", g.took_s);
}
END_TEST

START_TEST(get_times_out_when_nobody_puts) {
  ah_coord_t *b = client();
  uint8_t k[AH_COORD_DIR_KEY], v[8];
  key_of(5, k);
  double t0 = now_s();
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 0.3), AH_COORD_DIR_ABSENT);
  double took = now_s() - t0;
  ck_assert_msg(took >= 0.29 && took < 2.0, "timed out after %.3f s", took);
  /* timeout 0 looks once */
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 0.0), AH_COORD_DIR_ABSENT);
  /* the hub forgets the abandoned request at its deadline: a later put of the key is stored, and
   * the next get finds it */
  sleep_ms(200);
  ck_assert_int_eq(ah_coord_dir_put(b, k, "now", 3), 0);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 5.0), 3);
}
END_TEST

/* A batch of look-ups: stored keys give their values, the others the hub's "absent"; a client
 * that is not there gives "unanswered" for every key. */
START_TEST(a_batch_of_gets_answers_each_key) {
  ah_coord_t *a = client(), *b = client();
  uint8_t keys[64][AH_COORD_DIR_KEY];
  for (uint32_t i = 0; i < 64; i++) key_of(1000 + i, keys[i]);
  for (uint32_t i = 0; i < 64; i += 3)
    ck_assert_int_eq(ah_coord_dir_put(a, keys[i], &i, sizeof i), 0);
  uint32_t back = 0;
  ck_assert_int_eq(ah_coord_dir_get(b, keys[63], &back, sizeof back, 5.0), 4); /* every put is in */
  uint32_t vals[64];
  int lens[64];
  memset(vals, 0xff, sizeof vals);
  ck_assert_int_eq(ah_coord_dir_get_many(b, (const uint8_t(*)[AH_COORD_DIR_KEY])keys, 64, vals,
                                         sizeof vals[0], lens, 0.0),
                   0);
  for (uint32_t i = 0; i < 64; i++) {
    if (i % 3 == 0) {
      ck_assert_int_eq(lens[i], 4);
      ck_assert_uint_eq(vals[i], i);
    } else {
      ck_assert_int_eq(lens[i], AH_COORD_DIR_ABSENT);
      ck_assert_uint_eq(vals[i], 0xffffffffu);
    }
  }
  ck_assert_int_eq(
      ah_coord_dir_get_many(NULL, (const uint8_t(*)[AH_COORD_DIR_KEY])keys, 2, NULL, 0, lens, 0.0),
      -1);
  ck_assert_int_eq(lens[0], AH_COORD_DIR_UNANSWERED);
}
END_TEST

START_TEST(oversized_values_are_refused_and_gets_copy_at_most_cap) {
  ah_coord_t *a = client(), *b = client();
  uint8_t k[AH_COORD_DIR_KEY], big[AH_COORD_DIR_VAL_MAX + 1], out[AH_COORD_DIR_VAL_MAX + 16];
  for (size_t i = 0; i < sizeof big; i++) big[i] = (uint8_t)(i * 13);
  key_of(6, k);
  ck_assert_int_eq(ah_coord_dir_put(a, k, big, AH_COORD_DIR_VAL_MAX + 1), -1);
  ck_assert(log_wait("directory value of 513 bytes refused (at most 512)", 2000));
  ck_assert_int_eq(ah_coord_dir_get(b, k, out, sizeof out, 0.2),
                   AH_COORD_DIR_ABSENT); /* nothing was stored */
  ck_assert_int_eq(ah_coord_dir_put(a, k, big, AH_COORD_DIR_VAL_MAX), 0);
  ck_assert_int_eq(ah_coord_dir_get(b, k, out, sizeof out, 5.0), AH_COORD_DIR_VAL_MAX);
  ck_assert_mem_eq(out, big, AH_COORD_DIR_VAL_MAX);
  memset(out, 0xee, sizeof out);
  ck_assert_int_eq(ah_coord_dir_get(b, k, out, 10, 5.0),
                   AH_COORD_DIR_VAL_MAX); /* the full length */
  ck_assert_mem_eq(out, big, 10);
  ck_assert_uint_eq(out[10], 0xee); /* nothing past cap */
}
END_TEST

START_TEST(thousands_of_keys_coexist) {
  ah_coord_t *a = client(), *b = client();
  enum { N = 3000 };
  for (uint32_t i = 0; i < N; i++) {
    uint8_t k[AH_COORD_DIR_KEY];
    uint32_t v[4] = {i, i * 3, i ^ 0xabcd, 7};
    key_of(1000 + i, k);
    ck_assert_int_eq(ah_coord_dir_put(a, k, v, sizeof v), 0);
  }
  for (uint32_t i = 0; i < N; i++) {
    uint8_t k[AH_COORD_DIR_KEY];
    uint32_t v[4] = {0};
    key_of(1000 + i, k);
    ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 5.0), 16);
    ck_assert_msg(v[0] == i && v[1] == i * 3 && v[2] == (i ^ 0xabcd) && v[3] == 7,
                  "key %u: %u %u %u", i, v[0], v[1], v[2]);
  }
}
END_TEST

START_TEST(waiting_get_survives_a_cut_connection) {
  ah_coord_t *a = client(), *b = client();
  getter_t g = {.c = b, .timeout_s = 10.0};
  key_of(7, g.key);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, getter, &g), 0);
  sleep_ms(200);
  ah_coord_client_cut(b); /* the hub forgets b's waiting get with its connection */
  for (int i = 0; i < 300 && ah_coord_client_connects(b) < 2; i++) sleep_ms(10);
  ck_assert_int_ge(ah_coord_client_connects(b), 2);
  sleep_ms(100); /* the reconnection asked again */
  ck_assert_int_eq(ah_coord_dir_put(a, g.key, "after the cut", 14), 0);
  pthread_join(t, NULL);
  ck_assert_int_eq(g.rc, 14);
  ck_assert_str_eq(g.val, "after the cut");
  /* a's puts are stored again after its own cut: still readable, and replaced only by a */
  ah_coord_client_cut(a);
  for (int i = 0; i < 300 && ah_coord_client_connects(a) < 2; i++) sleep_ms(10);
  char v[32] = {0};
  ck_assert_int_eq(ah_coord_dir_get(b, g.key, v, sizeof v, 5.0), 14);
}
END_TEST

START_TEST(put_in_another_process_answers_a_waiting_get) {
  ah_coord_t *b = client();
  uint8_t k[AH_COORD_DIR_KEY];
  key_of(8, k);
  ck_assert(threads_idle_wait(5000)); /* no thread inside malloc at the fork */
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) { /* its own connection, as another process of the job */
    ah_coord_client_opts_t o;
    client_opts_test(&o);
    ah_coord_t *c = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
    if (!c) _exit(10);
    sleep_ms(300); /* the parent's get is waiting at the hub by now */
    uint32_t qpn = 0x4321;
    if (ah_coord_dir_put(c, k, &qpn, sizeof qpn) != 0) _exit(11);
    uint32_t back = 0; /* read back: the hub has it before this process exits */
    _exit(ah_coord_dir_get(c, k, &back, sizeof back, 10.0) == 4 && back == qpn ? 0 : 12);
  }
  uint32_t v = 0;
  double t0 = now_s();
  int n = ah_coord_dir_get(b, k, &v, sizeof v, 15.0);
  double took = now_s() - t0;
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
  ck_assert_int_eq(n, 4);
  ck_assert_uint_eq(v, 0x4321);
  ck_assert_msg(took >= 0.2, "the get returned after %.3f s, before the child put", took);
}
END_TEST

/* A hub whose directory holds little: one client fills its share, is refused with a line naming
 * the bound, and another client's puts and gets still work. */
START_TEST(flooding_client_is_refused_and_others_are_served) {
  uint8_t secret[16];
  for (int i = 0; i < 16; i++) secret[i] = (uint8_t)(0xd0 + i);
  ah_coord_hub_opts_t o;
  ah_coord_hub_opts_default(&o);
  o.max_client_dir_bytes = 16 * (AH_COORD_DIR_KEY + 100 + 64); /* 16 entries of 100 bytes each */
  ah_coord_stamp_t st2;
  ah_coord_hub_t *h2 = ah_coord_hub_open("127.0.0.1:0", secret, &o, &st2);
  ck_assert_ptr_nonnull(h2);
  ah_coord_t *a = client_of(&st2), *b = client_of(&st2);
  uint8_t k[AH_COORD_DIR_KEY], v[100];
  memset(v, 0x42, sizeof v);
  for (uint32_t i = 0; i < 200; i++) {
    key_of(i, k);
    ck_assert_int_eq(ah_coord_dir_put(a, k, v, sizeof v), 0); /* queued; the hub decides */
  }
  ck_assert(log_wait("refused a DIR_PUT of key 71700000", 3000));
  ck_assert(log_wait("for this client", 100));
  key_of(15, k);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 5.0), 100); /* within the bound: stored */
  key_of(16, k);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 0.3),
                   AH_COORD_DIR_ABSENT); /* beyond it: never stored */
  /* a replacement within a's share is still accepted */
  key_of(3, k);
  ck_assert_int_eq(ah_coord_dir_put(a, k, "ok", 2), 0);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 5.0), 2);
  /* b has its own share */
  key_of(5000, k);
  ck_assert_int_eq(ah_coord_dir_put(b, k, "mine", 4), 0);
  ck_assert_int_eq(ah_coord_dir_get(a, k, v, sizeof v, 5.0), 4);
  ck_assert_int_eq(ah_coord_hub_clients(h2), 2); /* nobody was dropped */
  while (nopened > 0) ah_coord_client_close(opened[--nopened]);
  ah_coord_hub_close(h2);
}
END_TEST

/* Waiting gets are bounded per connection, and one that timed out stops counting: the hub forgets
 * it at its deadline. */
START_TEST(waiting_gets_are_bounded_and_forgotten_at_their_deadline) {
  uint8_t secret[16];
  for (int i = 0; i < 16; i++) secret[i] = (uint8_t)(0xe0 + i);
  ah_coord_hub_opts_t o;
  ah_coord_hub_opts_default(&o);
  o.max_conn_dir_waits = 4;
  ah_coord_stamp_t st2;
  ah_coord_hub_t *h2 = ah_coord_hub_open("127.0.0.1:0", secret, &o, &st2);
  ck_assert_ptr_nonnull(h2);
  ah_coord_t *a = client_of(&st2), *b = client_of(&st2);
  /* Five waiting requests of b: four wait, one is refused. Which one depends on the order their
   * threads reach the hub (on a loaded machine the last started can overtake another), so the
   * refused key is read from the hub's line, and that key's put must not reach its getter. Each
   * waits 2 s, so the four still wait when the last arrives however slow the machine. */
  getter_t g[5];
  pthread_t t[5];
  memset(g, 0, sizeof g);
  for (int i = 0; i < 5; i++) {
    g[i].c = b;
    g[i].timeout_s = 2.0;
    key_of(100 + (uint32_t)i, g[i].key);
    ck_assert_int_eq(pthread_create(&t[i], NULL, getter, &g[i]), 0);
    if (i == 3) sleep_ms(150);
  }
  ck_assert(log_wait("4 requests wait on this connection (at most 4)", 4000));
  int refused = -1;
  for (int i = 0; i < 5; i++) {
    char line[96];
    snprintf(line, sizeof line, "refused a DIR_GET of key %02x%02x%02x%02x%02x%02x%02x%02x",
             g[i].key[0], g[i].key[1], g[i].key[2], g[i].key[3], g[i].key[4], g[i].key[5],
             g[i].key[6], g[i].key[7]);
    if (log_wait(line, 0)) refused = i;
  }
  ck_assert_msg(refused >= 0, "the hub's refusal names none of the five keys");
  ck_assert_int_eq(ah_coord_dir_put(a, g[refused].key, "x", 1), 0);
  for (int i = 0; i < 5; i++) {
    pthread_join(t[i], NULL);
    ck_assert_int_eq(g[i].rc, -1); /* the refused one too, though its put came */
  }
  sleep_ms(300); /* the four are past their deadline, and the hub's tick (50 ms) forgot them */
  getter_t g6 = {.c = b, .timeout_s = 5.0};
  key_of(201, g6.key);
  pthread_t t6;
  ck_assert_int_eq(pthread_create(&t6, NULL, getter, &g6), 0);
  sleep_ms(200);
  ck_assert_int_eq(ah_coord_dir_put(a, g6.key, "late", 4), 0);
  pthread_join(t6, NULL);
  ck_assert_int_eq(g6.rc, 4);
  while (nopened > 0) ah_coord_client_close(opened[--nopened]);
  ah_coord_hub_close(h2);
}
END_TEST

START_TEST(malformed_directory_frames_are_refused_by_name) {
  char err[AH_NET_ERR_LEN];
  int fd = raw_authed_connect(&st, 0x77);
  ck_assert_int_ge(fd, 0);
  uint64_t dl = ah_coord_now_ns() + 2000000000ull;
  /* a DIR_PUT whose value length (9) disagrees with its frame (5 value bytes) */
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  memset(f, 0, sizeof f);
  ah_coord_hdr_encode(AH_MSG_DIR_PUT, AH_COORD_DIR_PUT_FIXED + 5, f);
  key_of(9, f + AH_COORD_HDR_BYTES);
  f[AH_COORD_HDR_BYTES + AH_COORD_DIR_KEY + 1] = 9;
  ck_assert_int_eq(
      ah_coord_net_write_full(err, fd, f, AH_COORD_HDR_BYTES + AH_COORD_DIR_PUT_FIXED + 5, dl),
      AH_NET_OK);
  ck_assert(log_wait("refused a DIR_PUT from 127.0.0.1", 2000));
  ck_assert(log_wait("value length 9 does not match the 5 bytes the frame carries", 100));
  ck_assert(raw_ping(fd)); /* the connection stays */
  /* nothing was stored under the key */
  ah_coord_t *b = client();
  uint8_t k[AH_COORD_DIR_KEY], v[16];
  key_of(9, k);
  ck_assert_int_eq(ah_coord_dir_get(b, k, v, sizeof v, 0.2), AH_COORD_DIR_ABSENT);
  /* a length prefix beyond a value's bound is refused from the header (the framing is lost then) */
  ah_coord_hdr_encode(AH_MSG_DIR_PUT, AH_COORD_DIR_PUT_FIXED + AH_COORD_DIR_VAL_MAX + 1, f);
  ck_assert_int_eq(ah_coord_net_write_full(err, fd, f, AH_COORD_HDR_BYTES, dl), AH_NET_OK);
  ck_assert(log_wait("message type 20 with length 547 (expected 34..546)", 2000));
  close(fd);
  /* the unit decoder names both lengths */
  uint8_t p[AH_COORD_DIR_PUT_FIXED + 4] = {0};
  p[AH_COORD_DIR_KEY] = 0x02; /* 512 + 4 */
  p[AH_COORD_DIR_KEY + 1] = 0x04;
  ck_assert_int_eq(ah_coord_dir_vlen(p, sizeof p, AH_COORD_DIR_KEY, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "value length 516") != NULL, "%s", err);
  p[AH_COORD_DIR_KEY] = 0, p[AH_COORD_DIR_KEY + 1] = 4;
  ck_assert_int_eq(ah_coord_dir_vlen(p, sizeof p, AH_COORD_DIR_KEY, err, sizeof err), 4);
}
END_TEST

/* Stops the child pid and returns once it is stopped (a signal lands asynchronously: a request
 * sent right after kill() could still be answered). */
static void stop_hub(pid_t pid) {
  int status = 0;
  ck_assert_int_eq(kill(pid, SIGSTOP), 0);
  ck_assert_int_eq(waitpid(pid, &status, WUNTRACED), pid);
  ck_assert(WIFSTOPPED(status));
}

/* A hub in a child process, stopped (SIGSTOP) while a get is on its way: the answer arrives after
 * the get's 10 ms, and the get still returns the stored value, not a miss; a hub that stays
 * stopped past the slack gives AH_COORD_DIR_UNANSWERED, never AH_COORD_DIR_ABSENT. */
START_TEST(a_late_answer_is_not_taken_for_a_miss) {
  int rd, wr;
  pid_t pid = fork_reporting(&rd, &wr);
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    ah_coord_stamp_t cst;
    ah_coord_hub_t *ch = hub_start_test(&cst);
    if (!ch || write(wr, &cst, sizeof cst) != (ssize_t)sizeof cst) _exit(10);
    for (;;) pause(); /* the parent kills it */
  }
  ah_coord_stamp_t cst;
  ck_assert_int_eq(read(rd, &cst, sizeof cst), (ssize_t)sizeof cst);
  close(rd);
  ah_coord_t *a = client_of(&cst), *b = client_of(&cst);
  getter_t g = {.c = b, .timeout_s = 0.01};
  key_of(11, g.key);
  ck_assert_int_eq(ah_coord_dir_put(a, g.key, "stored", 7), 0);
  char v[16];
  ck_assert_int_eq(ah_coord_dir_get(b, g.key, v, sizeof v, 5.0), 7); /* the hub has it */
  stop_hub(pid);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, getter, &g), 0);
  sleep_ms(80); /* 8 times the get's timeout */
  ck_assert_int_eq(kill(pid, SIGCONT), 0);
  pthread_join(t, NULL);
  ck_assert_int_eq(g.rc, 7);
  ck_assert_str_eq(g.val, "stored");
  ck_assert_msg(g.took_s >= 0.07, "the get returned after %.3f s, before the hub could answer",
                g.took_s);
  /* a key not stored: the hub's absent answer ends the get at its timeout */
  key_of(12, g.key);
  ck_assert_int_eq(ah_coord_dir_get(b, g.key, v, sizeof v, 0.01), AH_COORD_DIR_ABSENT);
  /* a hub that does not answer within the slack: no answer, not a miss */
  stop_hub(pid);
  double t0 = now_s();
  ck_assert_int_eq(ah_coord_dir_get(b, g.key, v, sizeof v, 0.01), AH_COORD_DIR_UNANSWERED);
  double took = now_s() - t0;
  ck_assert_msg(took >= AH_COORD_DIR_SLACK_S && took < AH_COORD_DIR_SLACK_S + 1.0,
                "gave up after %.3f s", took);
  ck_assert_int_eq(kill(pid, SIGCONT), 0);
  ck_assert_int_eq(kill(pid, SIGKILL), 0);
  ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
}
END_TEST

START_TEST(gets_end_when_the_hub_is_gone) {
  ah_coord_t *b = client();
  getter_t g = {.c = b, .timeout_s = 30.0};
  key_of(10, g.key);
  pthread_t t;
  ck_assert_int_eq(pthread_create(&t, NULL, getter, &g), 0);
  sleep_ms(200);
  ah_coord_hub_close(hub); /* the client gives up after its reconnect_ms (3 s in tests) */
  hub = NULL;
  pthread_join(t, NULL);
  ck_assert_int_eq(g.rc, AH_COORD_DIR_UNANSWERED); /* the hub's "absent" covered 0.2 s of 30 */
  ck_assert_msg(g.took_s < 8.0, "the get waited %.1f s for a gone hub", g.took_s);
  ck_assert_int_eq(ah_coord_dir_put(b, g.key, "x", 1), -1);
  ck_assert_int_eq(ah_coord_dir_get(b, g.key, NULL, 0, 1.0), AH_COORD_DIR_UNANSWERED);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_INFO);
  const TTest *const tests[] = {put_in_one_client_is_read_by_another,
                                put_replaces_the_value,
                                get_waits_for_a_later_put,
                                get_times_out_when_nobody_puts,
                                a_batch_of_gets_answers_each_key,
                                oversized_values_are_refused_and_gets_copy_at_most_cap,
                                thousands_of_keys_coexist,
                                waiting_get_survives_a_cut_connection,
                                put_in_another_process_answers_a_waiting_get,
                                flooding_client_is_refused_and_others_are_served,
                                waiting_gets_are_bounded_and_forgotten_at_their_deadline,
                                malformed_directory_frames_are_refused_by_name,
                                gets_end_when_the_hub_is_gone,
                                a_late_answer_is_not_taken_for_a_miss};
  return ah_check_main(
      "coord_dir",
      (ah_check_case_t){.name = "dir", .timeout = 30, .setup = setup, .teardown = teardown}, tests,
      AH_CHECK_COUNT(tests));
}
