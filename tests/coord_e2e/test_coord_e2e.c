/* End-to-end tests of the coordinator: tuned multi-process jobs on sim/ with libautoha.so
 * preloaded (coord_job under ncclsim-run), random CPU delays on random ranks. Each asserts what the
 * issue's acceptance names: every call of every rank succeeded (sim/ fails a call on which the
 * ranks chose different configurations, the hang real NCCL would have), every result is correct,
 * every key of the leader left the search, and every process ended on the leader's configuration
 * for every key. Faults: connections cut mid-tuning reconnect and the job completes; the hub's
 * process exiting makes the job end with an error, not hang.
 *
 * The hub listens on a free loopback port (AUTOHA_COORD_ADDR), so nothing leaves 127.0.0.1. */
#include <arpa/inet.h>
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_coord_internal.h"
#include "coord_test_util.h"

static char outdir[256];

static int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t l = sizeof in;
  if (fd < 0 || bind(fd, (struct sockaddr *)&in, sizeof in) != 0 ||
      getsockname(fd, (struct sockaddr *)&in, &l) != 0)
    return -1;
  close(fd);
  return ntohs(in.sin_port);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int job_port;

/* Starts `ncclsim-run -n nprocs -- coord_job args...` with its output in outdir/out.txt. */
static pid_t start_job(int nprocs, const char *const *args) {
  char tmpl[] = "/tmp/coord_e2e_XXXXXX";
  char *d = mkdtemp(tmpl);
  ck_assert_ptr_nonnull(d);
  snprintf(outdir, sizeof outdir, "%s", d);
  char log[300], n[16], addr[64], rep[300];
  snprintf(log, sizeof log, "%s/out.txt", outdir);
  snprintf(n, sizeof n, "%d", nprocs);
  int port = free_port();
  ck_assert_int_gt(port, 0);
  job_port = port;
  snprintf(addr, sizeof addr, "127.0.0.1:%d", port);
  snprintf(rep, sizeof rep, "%s/report-%%r.json", outdir);
  pid_t pid = fork();
  if (pid == 0) {
    FILE *f = freopen(log, "w", stdout);
    if (!f || dup2(fileno(stdout), 2) < 0) _exit(126);
    setenv("LD_PRELOAD", AUTOHA_LIB_PATH, 1);
    setenv("LD_LIBRARY_PATH", SIMLIB_DIR, 1);
    setenv("AUTOHA_MODE", "tune", 1);
    setenv("AUTOHA_LOG", "info", 1);
    setenv("AUTOHA_COORD_ADDR", addr, 1);
    setenv("AUTOHA_REPORT", rep, 1);
    setenv("AUTOHA_SYNC_WARN_S", "5", 1);
    const char *argv[32] = {NCCLSIM_RUN_PATH, "-n", n, "--", COORD_JOB_PATH};
    int a = 5;
    for (int i = 0; args[i] && a < 31; i++) argv[a++] = args[i];
    argv[a] = NULL;
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  ck_assert_int_gt(pid, 0);
  return pid;
}

/* Waits for the job; returns the exit status (-1 on a signal) and the combined output in a static
 * buffer. */
static int wait_job(pid_t pid, const char **out_p) {
  static char out[1 << 21];
  char log[300];
  snprintf(log, sizeof log, "%s/out.txt", outdir);
  int st = 0;
  waitpid(pid, &st, 0);
  FILE *f = fopen(log, "r");
  size_t len = f ? fread(out, 1, sizeof out - 1, f) : 0;
  if (f) fclose(f);
  out[len] = 0;
  *out_p = out;
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int run_job(int nprocs, const char *const *args, const char **out_p, double *secs_p) {
  double t0 = now_s();
  pid_t pid = start_job(nprocs, args);
  int rc = wait_job(pid, out_p);
  *secs_p = now_s() - t0;
  return rc;
}

/* run_job for a job that must succeed: returns its output, and fails the test with that output
 * when the job exits non-zero. */
static const char *run_job_ok(int nprocs, const char *const *args, double *secs_p) {
  const char *out;
  int rc = run_job(nprocs, args, &out, secs_p);
  ck_assert_msg(rc == 0, "job failed (exit %d after %.1f s):\n%.4000s", rc, *secs_p, out);
  return out;
}

static int count_lines(const char *text, const char *needle) {
  int c = 0;
  for (const char *p = text; (p = strstr(p, needle)); p++) c++;
  return c;
}

/* Waits (up to timeout_s) until the running job's output has n lines containing needle. */
static int wait_output(const char *needle, int n, double timeout_s) {
  static char out[1 << 21];
  char log[300];
  snprintf(log, sizeof log, "%s/out.txt", outdir);
  double t0 = now_s();
  do {
    FILE *f = fopen(log, "r");
    size_t len = f ? fread(out, 1, sizeof out - 1, f) : 0;
    if (f) fclose(f);
    out[len] = 0;
    if (count_lines(out, needle) >= n) return 1;
    sleep_ms(20);
  } while (now_s() - t0 < timeout_s);
  return 0;
}

/* Checks the reports: the leader's keys all left the search; every other process ends each key
 * on the leader's configuration; some process waited for the leader (so the coordinator carried
 * decisions, not luck). Returns the number of keys of the leader, and the other processes' mean
 * wait for a decision in *mean_wait_us_p (when not NULL). */
static int check_reports(int nprocs, int first_rank_step, double *mean_wait_us_p) {
  char path[400];
  snprintf(path, sizeof path, "%s/report-0.json", outdir);
  json_error_t err;
  json_t *lead = json_load_file(path, 0, &err);
  ck_assert_msg(lead != NULL, "%s: %s", path, err.text);
  json_t *lkeys = json_object_get(json_array_get(json_object_get(lead, "comms"), 0), "keys");
  int nkeys = (int)json_array_size(lkeys);
  ck_assert_int_eq(nkeys, 3);
  for (int k = 0; k < nkeys; k++) {
    json_t *key = json_array_get(lkeys, (size_t)k);
    const char *state = json_string_value(json_object_get(json_object_get(key, "tuning"), "state"));
    ck_assert_msg(state && strcmp(state, "searching") != 0, "leader key %d still %s", k,
                  state ? state : "(no tuning state)");
  }
  double waits = 0, wait_us = 0;
  for (int p = 1; p < nprocs; p++) {
    snprintf(path, sizeof path, "%s/report-%d.json", outdir, p * first_rank_step);
    json_t *r = json_load_file(path, 0, &err);
    ck_assert_msg(r != NULL, "%s: %s", path, err.text);
    json_t *keys = json_object_get(json_array_get(json_object_get(r, "comms"), 0), "keys");
    ck_assert_int_eq((int)json_array_size(keys), nkeys);
    for (int k = 0; k < nkeys; k++) {
      json_t *key = json_array_get(keys, (size_t)k);
      int coll = -1, bin = -1;
      const char *cs = json_string_value(json_object_get(key, "coll"));
      bin = (int)json_integer_value(json_object_get(key, "bin"));
      const char *mine = json_string_value(
          json_object_get(json_object_get(json_object_get(key, "applied"), "config"), "text"));
      for (int j = 0; j < nkeys; j++) {
        json_t *lk = json_array_get(lkeys, (size_t)j);
        if (strcmp(json_string_value(json_object_get(lk, "coll")), cs) != 0 ||
            json_integer_value(json_object_get(lk, "bin")) != bin)
          continue;
        coll = j;
        const char *theirs = json_string_value(
            json_object_get(json_object_get(json_object_get(lk, "applied"), "config"), "text"));
        ck_assert_msg(mine && theirs && strcmp(mine, theirs) == 0,
                      "process of rank %d ends %s bin %d on '%s', the leader on '%s'",
                      p * first_rank_step, cs, bin, mine ? mine : "?", theirs ? theirs : "?");
      }
      ck_assert_msg(coll >= 0, "key %s bin %d unknown to the leader", cs, bin);
      waits += (double)json_integer_value(json_object_get(json_object_get(key, "sync"), "waits"));
      wait_us += json_number_value(json_object_get(json_object_get(key, "sync"), "wait_us"));
    }
    json_decref(r);
  }
  ck_assert_msg(waits > 0, "no process ever waited for the leader: was the coordinator used?");
  if (mean_wait_us_p) *mean_wait_us_p = wait_us / waits;
  json_decref(lead);
  return nkeys;
}

static void job_ok(int nprocs, int threads, int iters) {
  char it[16], th[16];
  snprintf(it, sizeof it, "%d", iters);
  snprintf(th, sizeof th, "%d", threads);
  const char *args[] = {"--iters", it,           "--threads", th,  "--delay-prob",
                        "0.02",    "--delay-us", "2000",      NULL};
  double secs;
  const char *out = run_job_ok(nprocs, args, &secs);
  fprintf(stderr, "%d processes x %d threads, %d calls per rank: %.1f s\n", nprocs, threads,
          3 * iters, secs);
  char want[64];
  snprintf(want, sizeof want, ": %d calls, 0 failed, 0 wrong results", 3 * iters * threads);
  ck_assert_int_eq(count_lines(out, want), nprocs);
  ck_assert_int_eq(count_lines(out, "disagree"), 0);
  double mean_us;
  check_reports(nprocs, threads, &mean_us);
  /* Behind the host relay a segment reaches a process's ring without waking it, and the waiting
   * rank takes it from there (ah_coord_poll); waiting for the relay's lazy doorbell instead (200
   * ms) would show here. */
  ck_assert_msg(mean_us < 100000, "a wait for the leader's decision took %.1f ms on average",
                mean_us / 1e3);
}

START_TEST(tuned_job_8_processes) { job_ok(8, 1, 7000); } /* 21,000 calls per rank */
END_TEST

START_TEST(tuned_job_32_processes) { job_ok(32, 1, 700); } /* 2,100 calls per rank, 67,200 in all */
END_TEST

START_TEST(tuned_job_64_processes) { job_ok(64, 1, 350); } /* 1,050 calls per rank, 67,200 in all */
END_TEST

START_TEST(tuned_job_4_processes_x_4_threads) {
  job_ok(4, 4, 1700);
} /* 5,100 per rank, 81,600 in all */
END_TEST

/* The leader's search under arrival skew (issue 17): with NCCLSIM_SKEW=0.3 every rank reaches each
 * call up to 30% of its time late, so a rank's own duration includes waiting for the last one. The
 * search learns from the shortest duration across ranks instead — the hub gathers it across
 * processes, the key state within one — and must then end every key on the configuration it
 * chooses without skew, from the same estimate of the winner's time, while the leader's own times
 * (the report's applied time) show the skew it no longer learns from. */
static json_t *leader_keys(json_t **doc_p) {
  char path[400];
  json_error_t err;
  snprintf(path, sizeof path, "%s/report-0.json", outdir);
  *doc_p = json_load_file(path, 0, &err);
  ck_assert_msg(*doc_p != NULL, "%s: %s", path, err.text);
  return json_object_get(json_array_get(json_object_get(*doc_p, "comms"), 0), "keys");
}

static void skew_converges_as_without(int nprocs, int threads) {
  char th[16], want[64];
  snprintf(th, sizeof th, "%d", threads);
  snprintf(want, sizeof want, ": %d calls, 0 failed, 0 wrong results", 9000 * threads);
  const char *args[] = {"--iters", "3000", "--threads", th, "--delay-prob", "0", NULL};
  double secs;
  json_t *docs[2], *keys[2];
  for (int run = 0; run < 2; run++) {
    if (run == 1) setenv("NCCLSIM_SKEW", "0.3", 1);
    const char *out = run_job_ok(nprocs, args, &secs);
    unsetenv("NCCLSIM_SKEW");
    ck_assert_int_eq(count_lines(out, want), nprocs);
    if (nprocs > 1) check_reports(nprocs, threads, NULL);
    keys[run] = leader_keys(&docs[run]);
    ck_assert_int_eq((int)json_array_size(keys[run]), 3);
  }
  int skewed = 0;
  for (size_t k = 0; k < json_array_size(keys[0]); k++) {
    json_t *a = json_array_get(keys[0], k), *b = NULL;
    for (size_t j = 0; j < json_array_size(keys[1]); j++) {
      json_t *c = json_array_get(keys[1], j);
      if (strcmp(json_string_value(json_object_get(c, "coll")),
                 json_string_value(json_object_get(a, "coll"))) == 0 &&
          json_integer_value(json_object_get(c, "bin")) ==
              json_integer_value(json_object_get(a, "bin")))
        b = c;
    }
    ck_assert_ptr_nonnull(b);
    json_t *ta = json_object_get(a, "tuning"), *tb = json_object_get(b, "tuning");
    const char *sa = json_string_value(json_object_get(ta, "state")),
               *sb = json_string_value(json_object_get(tb, "state"));
    ck_assert_msg(sa && sb && strcmp(sa, "searching") != 0 && strcmp(sb, "searching") != 0,
                  "key %zu still searching", k);
    const char *wa = json_string_value(json_object_get(json_object_get(ta, "winner"), "text"));
    const char *wb = json_string_value(json_object_get(json_object_get(tb, "winner"), "text"));
    ck_assert_msg(wa && wb && strcmp(wa, wb) == 0, "%s bin %lld: '%s' without skew, '%s' with",
                  json_string_value(json_object_get(a, "coll")),
                  json_integer_value(json_object_get(a, "bin")), wa ? wa : "?", wb ? wb : "?");
    double ua = json_real_value(json_object_get(ta, "winner_us")),
           ub = json_real_value(json_object_get(tb, "winner_us"));
    ck_assert_msg(ua > 0 && fabs(ub - ua) <= 0.02 * ua,
                  "winner's estimate %.3f us without skew, %.3f with", ua, ub);
    double oa = json_real_value(json_object_get(json_object_get(a, "applied"), "time_us"));
    double ob = json_real_value(json_object_get(json_object_get(b, "applied"), "time_us"));
    skewed += ob > oa * 1.03; /* the leader's own durations did include waiting */
  }
  ck_assert_msg(skewed > 0, "NCCLSIM_SKEW changed none of the leader's own times: was it applied?");
  json_decref(docs[0]);
  json_decref(docs[1]);
}

START_TEST(tuned_job_under_arrival_skew_converges_as_without) { skew_converges_as_without(8, 1); }
END_TEST

/* The same in one process driving 8 ranks (8 threads; no hub: the process decides alone). */
START_TEST(tuned_process_under_arrival_skew_converges_as_without) {
  skew_converges_as_without(1, 8);
}
END_TEST

START_TEST(cut_connections_reconnect_mid_tuning) {
  const char *args[] = {"--iters", "2000", "--cut-at", "15", "--delay-prob", "0.02", NULL};
  double secs;
  const char *out = run_job_ok(8, args, &secs);
  /* Every process but the hub's cuts what it holds. One behind the host relay holds nothing when
   * the relay's process cut the relay's connection a moment before (the relay then closed its
   * local processes' sockets, and they are reconnecting already): "cut 0". */
  ck_assert_msg(count_lines(out, " hub connection(s) at iteration 15") == 7, "%.4000s", out);
  ck_assert_msg(count_lines(out, "cut 1 hub connection(s) at iteration 15") >= 1, "%.4000s", out);
  ck_assert_int_ge(count_lines(out, "reconnected to hub"), 7);
  ck_assert_int_eq(count_lines(out, ": 6000 calls, 0 failed, 0 wrong results"), 8);
  check_reports(8, 1, NULL);
}
END_TEST

START_TEST(unstamped_id_runs_fixed_with_one_warning_per_process) {
  const char *args[] = {"--iters", "1000", "--unstamp", "1", "--delay-prob", "0.02", NULL};
  double secs;
  const char *out = run_job_ok(4, args, &secs);
  ck_assert_int_eq(count_lines(out, ": 3000 calls, 0 failed, 0 wrong results"), 4);
  ck_assert_int_eq(count_lines(out, "without autoha's stamp"), 4);
  ck_assert_int_eq(count_lines(out, "reconnect"), 0);
}
END_TEST

/* One process never joins the hub: the hub abandons the communicator after AUTOHA_COORD_JOIN_S
 * and every rank runs it fixed (here NCCL's choice, as the process that never joined runs it), so
 * the job completes with no call on which the ranks disagree. */
static void one_process_never_joins(const char *opt, const char *proc, const char *own_line) {
  const char *args[] = {"--iters", "1000",         opt,    proc, "--id-proc",
                        "1",       "--delay-prob", "0.02", NULL};
  double secs;
  setenv("AUTOHA_COORD_JOIN_S", "2", 1);
  const char *out = run_job_ok(4, args, &secs);
  unsetenv("AUTOHA_COORD_JOIN_S");
  fprintf(stderr, "%s %s: job ended after %.1f s\n", opt, proc, secs);
  ck_assert_int_eq(count_lines(out, ": 3000 calls, 0 failed, 0 wrong results"), 4);
  ck_assert_int_eq(count_lines(out, "disagree"), 0);
  ck_assert_msg(count_lines(out, "only 3 of its 4 ranks joined within 2000 ms") == 1, "%.4000s",
                out);
  /* one warning naming the communicator in each process that joined */
  ck_assert_int_eq(count_lines(out, "not every rank joined the coordinator hub"), 3);
  if (own_line) ck_assert_msg(strstr(out, own_line) != NULL, "no '%s' in:\n%.4000s", own_line, out);
  ck_assert_int_eq(count_lines(out, "waited"), 0);
}

START_TEST(unreachable_process_makes_every_rank_run_fixed) {
  one_process_never_joins("--unreachable", "2", "cannot join hub 127.0.0.1:1");
}
END_TEST

/* The leader's process (rank 0) cannot reach the hub, which runs in process 1: the workers do not
 * wait for a leader that never publishes; they run fixed like it. */
START_TEST(unreachable_leader_makes_every_rank_run_fixed) {
  one_process_never_joins("--unreachable", "0", "cannot join hub 127.0.0.1:1");
}
END_TEST

START_TEST(process_without_autoha_makes_every_rank_run_fixed) {
  one_process_never_joins("--no-autoha", "2", NULL);
}
END_TEST

START_TEST(hub_exit_fails_the_job_without_hanging) {
  const char *args[] = {"--iters", "100000", "--exit-at", "15", NULL};
  const char *out;
  double secs;
  int rc = run_job(8, args, &out, &secs);
  fprintf(stderr, "hub exit: job ended after %.1f s with exit %d\n", secs, rc);
  ck_assert_msg(rc != 0, "job succeeded although rank 0 exited:\n%.3000s", out);
  ck_assert_msg(secs < 60, "job took %.1f s to end", secs);
  ck_assert(strstr(out, "rank 0 (the hub's process) exits at iteration 15") != NULL);
  /* every survivor fails with a clear error rather than hanging */
  ck_assert_msg(count_lines(out, "failed: ") >= 7, "survivors did not report errors:\n%.4000s",
                out);
}
END_TEST

/* ---- attacks on the hub of a running job ---- */

static int hub_connect(void) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in in = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)job_port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (fd >= 0 && connect(fd, (struct sockaddr *)&in, sizeof in) == 0) return fd;
  if (fd >= 0) close(fd);
  return -1;
}

/* The wire protocol's version (docs/coordinator.md): the attacks speak it, but for the one that
 * sends the previous version. */
#define PROTO AH_COORD_PROTO_VERSION

/* A frame header as docs/coordinator.md describes it. */
static void hdr(uint8_t *h, uint32_t len, uint8_t version, uint8_t type) {
  h[0] = (uint8_t)(len >> 24), h[1] = (uint8_t)(len >> 16), h[2] = (uint8_t)(len >> 8),
  h[3] = (uint8_t)len;
  h[4] = version, h[5] = type, h[6] = h[7] = 0;
}

/* Sends bytes on a fresh connection and waits (at most 5 s) for the hub to hang up. */
static int attack_send(const void *buf, size_t n, int close_at_once) {
  int fd = hub_connect();
  if (fd < 0) return -1;
  struct timeval tv = {5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (send(fd, buf, n, MSG_NOSIGNAL) != (ssize_t)n) {
    close(fd);
    return -1;
  }
  if (!close_at_once) {
    char b[256];
    while (read(fd, b, sizeof b) > 0) {}
  }
  close(fd);
  return 0;
}

static void *slow_client(void *arg) {
  int *ok = arg;
  int fd = hub_connect();
  uint8_t h[8];
  hdr(h, 72, 2, 2);
  for (int i = 0; fd >= 0 && i < 6; i++) { /* one byte a second */
    if (send(fd, h + i, 1, MSG_NOSIGNAL) != 1) break;
    sleep_ms(1000);
  }
  *ok = fd >= 0;
  if (fd >= 0) close(fd);
  return NULL;
}

START_TEST(attacks_on_a_running_jobs_hub_are_refused) {
  struct rlimit rl;
  getrlimit(RLIMIT_NOFILE, &rl);
  rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
  setrlimit(RLIMIT_NOFILE, &rl);
  /* delays on 10% of each rank's calls (about 0.65 ms per call for the slowest of 8 ranks) keep
   * the job running for at least 11 s, longer than the attacks take (about 9 s), however fast the
   * machine */
  const char *args[] = {"--iters", "6000", "--delay-prob", "0.1", "--delay-us", "2000", NULL};
  double t0 = now_s();
  pid_t pid = start_job(8, args);
  int fd = -1;
  while (now_s() - t0 < 60 && (fd = hub_connect()) < 0) sleep_ms(20);
  ck_assert_msg(fd >= 0, "the job's hub never listened on port %d", job_port);
  close(fd);
  int slow_ok = 0;
  pthread_t slow;
  pthread_create(&slow, NULL, slow_client, &slow_ok);
  uint8_t f[8 + 72];
  /* wrong secret: a well-formed AUTH with a MAC made without the secret */
  int h = hub_connect();
  ck_assert_int_ge(h, 0);
  uint8_t hello[40];
  ck_assert_int_eq(read(h, hello, sizeof hello), 40);
  hdr(f, 72, PROTO, 2);
  for (int i = 8; i < 80; i++) f[i] = (uint8_t)(i * 37);
  ck_assert_int_eq(send(h, f, sizeof f, MSG_NOSIGNAL), (ssize_t)sizeof f);
  char b[64];
  ck_assert_int_le(read(h, b, sizeof b), 0); /* refused: closed without WELCOME */
  close(h);
  sleep_ms(250);
  uint8_t junk[200];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = (uint8_t)(i * 131 + 7);
  junk[4] = 0x55;
  ck_assert_int_eq(attack_send(junk, sizeof junk, 0), 0); /* random bytes */
  sleep_ms(250);
  hdr(f, 72, PROTO, 2);
  ck_assert_int_eq(attack_send(f, 18, 1), 0); /* truncated frame */
  sleep_ms(250);
  hdr(f, 16u << 20, PROTO, 2);
  ck_assert_int_eq(attack_send(f, 8, 0), 0); /* 16 MiB length prefix */
  sleep_ms(250);
  hdr(f, 72, PROTO - 1, 2);
  ck_assert_int_eq(attack_send(f, sizeof f, 0), 0); /* wrong protocol version (the previous one) */
  pthread_join(slow, NULL);                         /* ~6 s: the hub cuts it at 3 s */
  ck_assert(slow_ok);
  static int flood[1000];
  int held = 0;
  for (int i = 0; i < 1000; i++) held += (flood[i] = hub_connect()) >= 0;
  ck_assert_int_eq(held, 1000);
  sleep_ms(1500);
  for (int i = 0; i < 1000; i++) close(flood[i]);
  const char *out;
  int rc = wait_job(pid, &out);
  fprintf(stderr, "job beside the attacks: exit %d after %.1f s\n", rc, now_s() - t0);
  ck_assert_msg(rc == 0, "job failed (exit %d):\n%.4000s", rc, out);
  ck_assert_int_eq(count_lines(out, ": 18000 calls, 0 failed, 0 wrong results"), 8);
  char previous[64];
  snprintf(previous, sizeof previous, "wrong protocol version %d (expected %d", PROTO - 1, PROTO);
  const char *lines[] = {"authentication failed (wrong job secret)",
                         "wrong protocol version 85",
                         "truncated frame (connection closed after 18 of 80 bytes)",
                         "oversized frame: length prefix 16777216",
                         previous,
                         "no authentication within 3000 ms",
                         "unauthenticated connections held (connection flood?)"};
  for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
    ck_assert_msg(strstr(out, lines[i]) != NULL, "no log line '%s' in:\n%.3000s", lines[i], out);
  check_reports(8, 1, NULL);
}
END_TEST

/* ---- an authenticated client flooding the hub of a running job (issue 18 #4) ---- */

/* Completes the handshake as client `id` with the job's secret. Returns the fd (blocking) or -1. */
static int authed_connect(const ah_coord_stamp_t *st, uint64_t id) {
  int fd = hub_connect();
  if (fd < 0) return -1;
  uint8_t hello[40], auth[80], wel[48];
  if (read(fd, hello, sizeof hello) != (ssize_t)sizeof hello) goto fail;
  ah_coord_hdr_encode(AH_MSG_AUTH, 72, auth);
  memset(auth + 8, 0x6b, 32);
  ah_coord_put_u64(auth + 40, id);
  if (ah_coord_mac(st->secret, "autoha-client", hello + 8, auth + 8, id, auth + 48) != 0 ||
      send(fd, auth, sizeof auth, MSG_NOSIGNAL) != (ssize_t)sizeof auth)
    goto fail;
  size_t got = 0;
  while (got < sizeof wel) {
    ssize_t r = read(fd, wel + got, sizeof wel - got);
    if (r <= 0) goto fail;
    got += (size_t)r;
  }
  return fd;
fail:
  close(fd);
  return -1;
}

START_TEST(authenticated_flood_beside_a_tuned_job) {
  char idpath[400];
  const char *args[] = {"--iters", "5000",      "--delay-prob", "0.1", "--delay-us",
                        "2000",    "--id-file", NULL,           NULL};
  /* the id file lives beside the job's output, which start_job creates: name it after the fact */
  static char idarg[400];
  snprintf(idarg, sizeof idarg, "/tmp/coord_e2e_id_%d", (int)getpid());
  args[7] = idarg;
  snprintf(idpath, sizeof idpath, "%s", idarg);
  unlink(idpath);
  double t0 = now_s();
  pid_t pid = start_job(8, args);
  uint8_t idbuf[128 + sizeof(int)];
  FILE *f = NULL;
  while (now_s() - t0 < 60 && !(f = fopen(idpath, "rb"))) sleep_ms(20);
  ck_assert_msg(f != NULL, "the job never wrote its id to %s", idpath);
  ck_assert_int_eq(fread(idbuf, 1, sizeof idbuf, f), sizeof idbuf);
  fclose(f);
  unlink(idpath);
  int hub_pid;
  memcpy(&hub_pid, idbuf + 128, sizeof hub_pid);
  ah_coord_stamp_t st;
  ck_assert_int_eq(ah_coord_stamp_read(idbuf, &st), 0);
  ck_assert_int_eq(st.port, job_port);
  ck_assert_msg(wait_output(": first call done", 8, 60), "the job's ranks never completed a call");
  long rss0 = proc_status_kb(hub_pid, "VmRSS"), peak = rss0;
  int fd = authed_connect(&st, 0xa77ac4);
  ck_assert_int_ge(fd, 0);
  pthread_t t;
  pthread_create(&t, NULL, drain_fd, &fd);
  static uint8_t buf[FLOOD_FRAMES * FLOOD_PUB_BYTES];
  for (int batch = 0; batch < 110; batch++) { /* 10 of JOINs, then 100 of PUBLISHes */
    size_t n = batch < 10 ? flood_joins(buf, 0xf00d000000ull, batch)
                          : flood_publishes(buf, 0xf00d000000ull, batch - 10);
    ck_assert_int_eq(send(fd, buf, n, MSG_NOSIGNAL), (ssize_t)n);
    long kb = proc_status_kb(hub_pid, "VmRSS");
    if (kb > peak) peak = kb;
  }
  uint8_t ping[8];
  ah_coord_hdr_encode(AH_MSG_PING, 0, ping);
  ck_assert_int_eq(send(fd, ping, sizeof ping, MSG_NOSIGNAL), 8);
  for (int i = 0; i < 20; i++) { /* the hub works through what is queued */
    sleep_ms(100);
    long kb = proc_status_kb(hub_pid, "VmRSS");
    if (kb > peak) peak = kb;
  }
  long hwm = proc_status_kb(hub_pid, "VmHWM");
  printf(
      "authenticated flood (10,000 JOINs, 100,000 PUBLISHes) on the hub of an 8-process job: "
      "hub process resident %ld kB before, peak %ld kB sampled, VmHWM %ld kB (bound: +32768 kB)\n",
      rss0, peak, hwm);
  fflush(stdout);
  shutdown(fd, SHUT_RDWR);
  pthread_join(t, NULL);
  close(fd);
  ck_assert_int_gt(rss0, 0);
  ck_assert_int_lt(peak - rss0, 32768);
  const char *out;
  int rc = wait_job(pid, &out);
  fprintf(stderr, "job beside the flood: exit %d after %.1f s\n", rc, now_s() - t0);
  ck_assert_msg(rc == 0, "job failed (exit %d):\n%.4000s", rc, out);
  ck_assert_int_eq(count_lines(out, ": 15000 calls, 0 failed, 0 wrong results"), 8);
  ck_assert_msg(strstr(out, "(at most 1024 per client); its ranks run NCCL's own choices") != NULL,
                "no cap refusal in:\n%.3000s", out);
  check_reports(8, 1, NULL);
}
END_TEST

int main(void) {
  Suite *s = suite_create("coord_e2e");
  const TTest *const jobs_tests[] = {tuned_job_8_processes,
                                     tuned_job_32_processes,
                                     tuned_job_64_processes,
                                     tuned_job_4_processes_x_4_threads,
                                     cut_connections_reconnect_mid_tuning,
                                     unstamped_id_runs_fixed_with_one_warning_per_process,
                                     unreachable_process_makes_every_rank_run_fixed,
                                     unreachable_leader_makes_every_rank_run_fixed,
                                     process_without_autoha_makes_every_rank_run_fixed,
                                     hub_exit_fails_the_job_without_hanging};
  ah_check_add(s, (ah_check_case_t){.name = "jobs", .timeout = 280}, jobs_tests,
               AH_CHECK_COUNT(jobs_tests));
  const TTest *const skew_tests[] = {tuned_job_under_arrival_skew_converges_as_without,
                                     tuned_process_under_arrival_skew_converges_as_without};
  ah_check_add(s, (ah_check_case_t){.name = "skew", .timeout = 280}, skew_tests,
               AH_CHECK_COUNT(skew_tests));
  const TTest *const attacks_tests[] = {attacks_on_a_running_jobs_hub_are_refused,
                                        authenticated_flood_beside_a_tuned_job};
  ah_check_add(s, (ah_check_case_t){.name = "attacks", .timeout = 280}, attacks_tests,
               AH_CHECK_COUNT(attacks_tests));
  return ah_check_run(s);
}
