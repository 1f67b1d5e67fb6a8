/* The cluster client against a real 3-member etcd cluster on loopback (etcd_cluster.h): put, get,
 * range, delete and create-if-absent round trips; a job's registration gone within its lease's
 * TTL of its process's SIGKILL, at once after a clean unregister, and put back under a new lease
 * when its lease is lost; the planner election passing to the other candidate when the holder is
 * SIGKILLed or withdraws; requests that still succeed with the raft leader killed; and, with
 * every member down or stopped, calls that fail within their timeout. Each case starts its own
 * cluster (an unchecked fixture, in the parent process, which kills every member at the end
 * whatever the tests did). */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_cluster_elect.h"
#include "ah_cluster_etcd.h"
#include "ah_cluster_job.h"
#include "ah_log.h"
#include "etcd_cluster.h"

#define TTL_S 2
#define SLACK_S 1.5 /* etcd's expiry check runs every 0.5 s; a candidate polls every 0.5 s */

static etcd_cluster_t ec;
static int started;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void cluster_up(void) {
  char err[AH_CLUSTER_ERR_LEN];
  started = etcd_cluster_start(&ec, 3, 30, err, sizeof err) == 0;
  if (!started) fprintf(stderr, "test_cluster_etcd: the etcd cluster did not start: %s\n", err);
}

static void cluster_down(void) {
  etcd_cluster_stop(&ec);
  started = 0;
}

static ah_cluster_etcd_t *client(double timeout_s) {
  ck_assert_msg(started, "the etcd cluster did not start (see above)");
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c = NULL;
  ck_assert_msg(ah_cluster_etcd_open(&ec.eps, timeout_s, &c, err, sizeof err) == 0, "%s", err);
  return c;
}

/* Forks a child that runs fn(arg, fd) with the write end of a pipe; returns its pid and the read
 * end in *fd_p. The child dies with its parent. */
static pid_t child_start(void (*fn)(const char *arg, int fd), const char *arg, int *fd_p) {
  int p[2];
  ck_assert_int_eq(pipe(p), 0);
  pid_t parent = getpid(), pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    close(p[0]);
    fn(arg, p[1]);
    _exit(0);
  }
  close(p[1]);
  *fd_p = p[0];
  return pid;
}

/* Reads one byte from fd within s seconds: the byte, or -1. */
static int read_byte(int fd, double s) {
  struct pollfd pfd = {.fd = fd, .events = POLLIN};
  char b;
  if (poll(&pfd, 1, (int)(s * 1000)) != 1 || read(fd, &b, 1) != 1) return -1;
  return b;
}

static void child_kill(pid_t pid) {
  kill(pid, SIGKILL);
  while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}

START_TEST(put_get_range_delete_round_trip) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_kv_t kv;
  ck_assert_msg(ah_cluster_etcd_put(c, "/t/a/1", "one", 3, 0, err, sizeof err) == 0, "%s", err);
  ck_assert_msg(ah_cluster_etcd_put(c, "/t/a/2", "two", 3, 0, err, sizeof err) == 0, "%s", err);
  static const char bin[] = {'x', 0, 'y', (char)0xff, 0};
  ck_assert_msg(ah_cluster_etcd_put(c, "/t/b", bin, sizeof bin, 0, err, sizeof err) == 0, "%s",
                err);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/a/1", &kv, err, sizeof err), 1);
  ck_assert_str_eq(kv.key, "/t/a/1");
  ck_assert_str_eq(kv.value, "one");
  ck_assert_int_eq(kv.lease, 0);
  ck_assert_int_gt(kv.create_revision, 0);
  ah_cluster_kv_clear(&kv);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/b", &kv, err, sizeof err), 1);
  ck_assert_uint_eq(kv.value_len, sizeof bin); /* NUL and 0xff bytes survive base64 */
  ck_assert(memcmp(kv.value, bin, sizeof bin) == 0);
  ah_cluster_kv_clear(&kv);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/none", &kv, err, sizeof err), 0);

  ah_cluster_kv_t *kvs;
  int n = ah_cluster_etcd_range(c, "/t/a/", &kvs, err, sizeof err);
  ck_assert_msg(n == 2, "range: %d (%s)", n, err);
  ck_assert_str_eq(kvs[0].key, "/t/a/1");
  ck_assert_str_eq(kvs[1].value, "two");
  ah_cluster_kvs_free(kvs, n);
  ck_assert_int_eq(ah_cluster_etcd_range(c, "/t/", &kvs, err, sizeof err), 3);
  ah_cluster_kvs_free(kvs, 3);

  /* replaced, then create-if-absent: refused with the holder named */
  ck_assert_int_eq(ah_cluster_etcd_put(c, "/t/a/1", "uno", 3, 0, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_create(c, "/t/a/1", "x", 1, 0, &kv, err, sizeof err), 0);
  ck_assert_str_eq(kv.value, "uno");
  ah_cluster_kv_clear(&kv);
  ck_assert_int_eq(ah_cluster_etcd_create(c, "/t/c", "new", 3, 0, NULL, err, sizeof err), 1);

  ck_assert_int_eq(ah_cluster_etcd_delete(c, "/t/a/", 1, err, sizeof err), 2);
  ck_assert_int_eq(ah_cluster_etcd_delete(c, "/t/b", 0, err, sizeof err), 1);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/a/2", &kv, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_range(c, "/t/", &kvs, err, sizeof err), 1); /* /t/c */
  ah_cluster_kvs_free(kvs, 1);

  /* etcd's own refusal is final and named: a put under a lease that does not exist */
  ck_assert_int_eq(ah_cluster_etcd_put(c, "/t/d", "v", 1, 12345, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "lease not found"), "%s", err);
  ah_cluster_etcd_close(c);
}
END_TEST

/* A job's process: registers job `arg` and says so ('R'), then waits to be killed. */
static void job_child(const char *arg, int fd) {
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c;
  ah_cluster_job_t *job;
  if (ah_cluster_etcd_open(&ec.eps, 2, &c, err, sizeof err) != 0 ||
      ah_cluster_job_register(c, "/t/", arg, "{\"flows\":[]}", 12, TTL_S, &job, err, sizeof err) !=
          0) {
    fprintf(stderr, "job child: %s\n", err);
    _exit(1);
  }
  if (write(fd, "R", 1) != 1) _exit(1);
  for (;;) pause();
}

START_TEST(a_killed_jobs_key_goes_within_its_ttl) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_kv_t kv;
  int fd;
  pid_t pid = child_start(job_child, "train-7", &fd);
  ck_assert_int_eq(read_byte(fd, 10), 'R');
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/train-7", &kv, err, sizeof err), 1);
  ck_assert_str_eq(kv.value, "{\"flows\":[]}");
  ck_assert_int_ne(kv.lease, 0);
  ah_cluster_kv_clear(&kv);
  /* kept alive past its TTL while the process lives */
  usleep((useconds_t)(TTL_S * 1.5 * 1e6));
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/train-7", &kv, err, sizeof err), 1);
  ah_cluster_kv_clear(&kv);

  double t0 = now_s();
  child_kill(pid);
  close(fd);
  int rc;
  while ((rc = ah_cluster_etcd_get(c, "/t/jobs/train-7", &kv, err, sizeof err)) == 1 &&
         now_s() - t0 < TTL_S + 5) {
    ah_cluster_kv_clear(&kv);
    usleep(50000);
  }
  double took = now_s() - t0;
  ck_assert_msg(rc == 0, "the key is still there %.1f s after the kill (%d, %s)", took, rc, err);
  ck_assert_msg(took <= TTL_S + SLACK_S, "the key went %.2f s after the kill (TTL %d s)", took,
                TTL_S);
  fprintf(stderr, "a killed job's key went %.2f s after SIGKILL (lease TTL %d s)\n", took, TTL_S);
  ah_cluster_etcd_close(c);
}
END_TEST

START_TEST(a_clean_unregister_removes_the_key_at_once) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_kv_t kv;
  ah_cluster_job_t *job;
  ck_assert_msg(ah_cluster_job_register(c, "/t/", "clean", "a", 1, 30, &job, err, sizeof err) == 0,
                "%s", err);
  ck_assert_int_eq(ah_cluster_job_update(job, "bb", 2, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/clean", &kv, err, sizeof err), 1);
  ck_assert_str_eq(kv.value, "bb");
  ah_cluster_kv_clear(&kv);
  double t0 = now_s();
  ck_assert_msg(ah_cluster_job_unregister(job, err, sizeof err) == 0, "%s", err);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/clean", &kv, err, sizeof err), 0);
  ck_assert_msg(now_s() - t0 < 1.0, "unregister took %.2f s", now_s() - t0);
  /* a bad job id is refused by name, and nothing is put */
  ck_assert_int_eq(ah_cluster_job_register(c, "/t/", "a/b", "x", 1, 5, &job, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'a/b'"), "%s", err);
  ah_cluster_etcd_close(c);
}
END_TEST

START_TEST(a_lost_lease_is_replaced_and_the_job_put_back) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_kv_t kv;
  ah_cluster_job_t *job;
  ck_assert_msg(
      ah_cluster_job_register(c, "/t/", "phoenix", "v1", 2, TTL_S, &job, err, sizeof err) == 0,
      "%s", err);
  ck_assert_int_eq(ah_cluster_job_update(job, "v2", 2, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/phoenix", &kv, err, sizeof err), 1);
  int64_t first = kv.lease;
  ah_cluster_kv_clear(&kv);
  /* what etcd does to a lease not renewed for a TTL (an outage): it goes, and the key with it */
  ck_assert_int_eq(ah_cluster_etcd_lease_revoke(c, first, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/phoenix", &kv, err, sizeof err), 0);
  double t0 = now_s();
  int rc;
  while ((rc = ah_cluster_etcd_get(c, "/t/jobs/phoenix", &kv, err, sizeof err)) == 0 &&
         now_s() - t0 < TTL_S + 2)
    usleep(50000);
  ck_assert_msg(rc == 1, "the key was not put back within %.1f s", now_s() - t0);
  ck_assert_str_eq(kv.value, "v2"); /* the latest value, under a new lease */
  ck_assert(kv.lease != first && kv.lease != 0);
  ah_cluster_kv_clear(&kv);
  ck_assert_int_eq(ah_cluster_job_unregister(job, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_etcd_get(c, "/t/jobs/phoenix", &kv, err, sizeof err), 0);
  ah_cluster_etcd_close(c);
}
END_TEST

/* A planner candidate: campaigns as `arg`, says 'L' when it holds the role, then waits. */
static void candidate_child(const char *arg, int fd) {
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c;
  ah_cluster_elect_t *e;
  if (ah_cluster_etcd_open(&ec.eps, 2, &c, err, sizeof err) != 0 ||
      ah_cluster_elect_start(c, "/t/planner", arg, TTL_S, &e, err, sizeof err) != 0) {
    fprintf(stderr, "candidate %s: %s\n", arg, err);
    _exit(1);
  }
  while (!ah_cluster_elect_is_leader(e)) usleep(20000);
  if (write(fd, "L", 1) != 1) _exit(1);
  for (;;) pause();
}

START_TEST(the_election_passes_to_the_other_candidate_when_the_holder_dies) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN], holder[64];
  int fd[2];
  pid_t pid[2];
  pid[0] = child_start(candidate_child, "cand-0", &fd[0]);
  ck_assert_int_eq(read_byte(fd[0], 10), 'L'); /* alone, it wins */
  pid[1] = child_start(candidate_child, "cand-1", &fd[1]);
  /* the second does not take a held role, however long it polls */
  ck_assert_int_eq(read_byte(fd[1], TTL_S * 1.5), -1);
  ck_assert_int_eq(ah_cluster_elect_holder(c, "/t/planner", holder, sizeof holder, err, sizeof err),
                   1);
  ck_assert_str_eq(holder, "cand-0");

  double t0 = now_s();
  child_kill(pid[0]);
  close(fd[0]);
  ck_assert_int_eq(read_byte(fd[1], TTL_S + 5), 'L');
  double took = now_s() - t0;
  ck_assert_msg(took <= TTL_S + SLACK_S, "cand-1 took the role %.2f s after the kill", took);
  ck_assert_int_eq(ah_cluster_elect_holder(c, "/t/planner", holder, sizeof holder, err, sizeof err),
                   1);
  ck_assert_str_eq(holder, "cand-1");
  fprintf(stderr, "the planner role passed %.2f s after SIGKILL (lease TTL %d s)\n", took, TTL_S);
  child_kill(pid[1]);
  close(fd[1]);
  ah_cluster_etcd_close(c);
}
END_TEST

START_TEST(a_withdrawn_holder_hands_the_role_on) {
  ah_cluster_etcd_t *c = client(3);
  char err[AH_CLUSTER_ERR_LEN], holder[64];
  ah_cluster_elect_t *a, *b;
  ck_assert_msg(ah_cluster_elect_start(c, "/t/planner2", "a", 10, &a, err, sizeof err) == 0, "%s",
                err);
  ck_assert_int_eq(ah_cluster_elect_is_leader(a), 1); /* its first try is made at start */
  ck_assert_int_eq(ah_cluster_elect_start(c, "/t/planner2", "b", 10, &b, err, sizeof err), 0);
  ck_assert_int_eq(ah_cluster_elect_is_leader(b), 0);
  ck_assert_int_eq(ah_cluster_elect_stop(a, err, sizeof err), 0);
  double t0 = now_s();
  while (!ah_cluster_elect_is_leader(b) && now_s() - t0 < 3) usleep(20000);
  ck_assert_msg(ah_cluster_elect_is_leader(b), "b did not take a withdrawn role in 3 s");
  ck_assert_int_eq(
      ah_cluster_elect_holder(c, "/t/planner2", holder, sizeof holder, err, sizeof err), 1);
  ck_assert_str_eq(holder, "b");
  ck_assert_int_eq(ah_cluster_elect_stop(b, err, sizeof err), 0);
  ck_assert_int_eq(
      ah_cluster_elect_holder(c, "/t/planner2", holder, sizeof holder, err, sizeof err), 0);
  ah_cluster_etcd_close(c);
}
END_TEST

START_TEST(requests_succeed_with_the_raft_leader_killed) {
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c = client(3);
  int leader = ah_cluster_etcd_leader_index(c, err, sizeof err);
  ck_assert_msg(leader >= 0, "%s", err);
  ck_assert_int_eq(ah_cluster_etcd_put(c, "/t/before", "1", 1, 0, err, sizeof err), 0);
  /* a client that names the leader first, so its first try meets the dead member */
  ah_cluster_endpoints_t eps = ec.eps;
  for (int i = 0; i < eps.n; i++)
    snprintf(eps.url[i], sizeof eps.url[i], "%s", ec.eps.url[(leader + i) % eps.n]);
  ah_cluster_etcd_t *lf;
  ck_assert_int_eq(ah_cluster_etcd_open(&eps, 5, &lf, err, sizeof err), 0); /* the default */
  etcd_cluster_signal(&ec, leader, SIGKILL);
  /* a signal is delivered after kill() returns: wait until the member no longer answers */
  double t0 = now_s();
  while (ah_cluster_etcd_member_healthy(c, leader, err, sizeof err) != 0 && now_s() - t0 < 5)
    usleep(1000);
  ck_assert_msg(strstr(err, ec.eps.url[leader]), "%s", err);
  fprintf(stderr, "m%d stopped answering %.3f s after its SIGKILL\n", leader, now_s() - t0);
  /* at once, while the others elect a new leader (about a second) */
  t0 = now_s();
  ck_assert_msg(ah_cluster_etcd_put(lf, "/t/after", "2", 1, 0, err, sizeof err) == 0, "%s", err);
  double put_s = now_s() - t0;
  ck_assert_msg(put_s < 5.2, "the put took %.2f s (timeout 5 s)", put_s);
  ah_cluster_kv_t kv;
  ck_assert_msg(ah_cluster_etcd_get(lf, "/t/before", &kv, err, sizeof err) == 1, "%s", err);
  ck_assert_str_eq(kv.value, "1");
  ah_cluster_kv_clear(&kv);
  int64_t lease;
  ck_assert_msg(ah_cluster_etcd_lease_grant(lf, 5, &lease, err, sizeof err) == 0, "%s", err);
  fprintf(stderr, "with the leader (m%d) killed: the put took %.2f s; put, get and grant %.2f s\n",
          leader, put_s, now_s() - t0);
  ck_assert_int_eq(ah_cluster_etcd_lease_revoke(lf, lease, err, sizeof err), 0);
  int other = ah_cluster_etcd_leader_index(lf, err, sizeof err);
  ck_assert_msg(other >= 0 && strcmp(eps.url[other], ec.eps.url[leader]) != 0, "%d: %s", other,
                err);
  ah_cluster_etcd_close(lf);
  ah_cluster_etcd_close(c);
}
END_TEST

START_TEST(with_every_member_down_a_call_fails_within_its_timeout) {
  char err[AH_CLUSTER_ERR_LEN];
  ah_cluster_etcd_t *c = client(1.0);
  ck_assert_int_eq(ah_cluster_etcd_put(c, "/t/x", "1", 1, 0, err, sizeof err), 0);
  /* one member stopped (it accepts connections and never answers), the others killed */
  etcd_cluster_signal(&ec, 0, SIGSTOP);
  etcd_cluster_signal(&ec, 1, SIGKILL);
  etcd_cluster_signal(&ec, 2, SIGKILL);
  ah_cluster_kv_t kv;
  int64_t ttl;
  for (int k = 0; k < 3; k++) {
    double t0 = now_s();
    int rc = k == 0   ? ah_cluster_etcd_put(c, "/t/x", "2", 1, 0, err, sizeof err)
             : k == 1 ? ah_cluster_etcd_get(c, "/t/x", &kv, err, sizeof err)
                      : ah_cluster_etcd_lease_keepalive(c, 1, &ttl, err, sizeof err);
    double took = now_s() - t0;
    ck_assert_int_eq(rc, -1);
    ck_assert_msg(took < 1.0 + 0.3, "call %d failed after %.2f s (timeout 1 s)", k, took);
    for (int i = 0; i < 3; i++) ck_assert_msg(strstr(err, ec.eps.url[i]), "%s", err);
    ck_assert_msg(strstr(err, "no member answered"), "%s", err);
  }
  fprintf(stderr, "all down: %s\n", err);
  /* a job cannot register, and says why */
  ah_cluster_job_t *job;
  ck_assert_int_eq(ah_cluster_job_register(c, "/t/", "j", "x", 1, 5, &job, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "lease/grant"), "%s", err);
  ah_cluster_etcd_close(c);
}
END_TEST

int main(void) {
  ah_log_set_level(AH_LOG_INFO);
  Suite *s = suite_create("cluster_etcd");
  TCase *live = tcase_create("live");
  tcase_set_timeout(live, 60);
  tcase_add_unchecked_fixture(live, cluster_up, cluster_down);
  tcase_add_test(live, put_get_range_delete_round_trip);
  tcase_add_test(live, a_killed_jobs_key_goes_within_its_ttl);
  tcase_add_test(live, a_clean_unregister_removes_the_key_at_once);
  tcase_add_test(live, a_lost_lease_is_replaced_and_the_job_put_back);
  tcase_add_test(live, the_election_passes_to_the_other_candidate_when_the_holder_dies);
  tcase_add_test(live, a_withdrawn_holder_hands_the_role_on);
  suite_add_tcase(s, live);
  /* the faults take members down: each its own cluster, the all-down one last */
  TCase *leader = tcase_create("leader_killed");
  tcase_set_timeout(leader, 60);
  tcase_add_unchecked_fixture(leader, cluster_up, cluster_down);
  tcase_add_test(leader, requests_succeed_with_the_raft_leader_killed);
  suite_add_tcase(s, leader);
  TCase *down = tcase_create("all_down");
  tcase_set_timeout(down, 60);
  tcase_add_unchecked_fixture(down, cluster_up, cluster_down);
  tcase_add_test(down, with_every_member_down_a_call_fails_within_its_timeout);
  suite_add_tcase(s, down);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? 1 : 0;
}
