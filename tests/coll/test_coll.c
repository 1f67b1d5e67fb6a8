/* Check tests of sim/'s collectives against host references (coll_lib.c): every collective x data
 * type x reduction op, in place and out of place, grouped and not, on 1, 2, 3, 4 and 8 ranks, with
 * ranks as processes (ncclsim-run), as threads (one per rank) and as devices of one thread
 * (ncclCommInitAll, and ncclCommInitRank for each device inside one group).
 *
 * The process cases run the coll_rank program under the launcher; its path and the launcher's are
 * compiled in (COLL_RANK_PATH, NCCLSIM_RUN_PATH). `test_coll processes` runs those (an e2e test),
 * `test_coll threads` the in-process ones (a unit test, so CI also runs it under ASan+UBSan). */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "coll_suite.h"

static const int rank_counts[] = {1, 2, 3, 4, 8};
#define NCOUNTS (int)(sizeof rank_counts / sizeof rank_counts[0])

/* ---- ranks as processes -------------------------------------------------------------------------- */

START_TEST(test_processes) {
  int n = rank_counts[_i];
  char ncount[16];
  snprintf(ncount, sizeof ncount, "%d", n);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl(NCCLSIM_RUN_PATH, NCCLSIM_RUN_PATH, "-n", ncount, "--", COLL_RANK_PATH,
          n == 4 ? "--large" : (char *)NULL, (char *)NULL);
    _exit(127);
  }
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                "ncclsim-run -n %d -- coll_rank failed (status 0x%x): see the ranks' lines above",
                n, status);
}
END_TEST

/* ---- ranks as threads, one per rank, each creating its communicator in a group --------------------- */

typedef struct {
  int n, rank;
  ncclUniqueId id;
  coll_tally_t tally;
  int rc;
} thread_arg_t;

static void *rank_thread(void *p) {
  thread_arg_t *t = p;
  coll_comms_t a, b;
  t->rc = coll_comms_init_rank(t->n, t->rank, t->rank, t->id, 1, &a, &b);
  if (t->rc == 0) t->rc = coll_suite_run(&a, &b, t->n == 3, &t->tally);
  coll_comms_release(&b, 1);
  coll_comms_release(&a, 1);
  return NULL;
}

START_TEST(test_threads) {
  int n = rank_counts[_i];
  ncclUniqueId id;
  ck_assert_int_eq(ncclGetUniqueId(&id), ncclSuccess);
  thread_arg_t args[8];
  pthread_t th[8];
  for (int r = 0; r < n; r++) {
    memset(&args[r], 0, sizeof args[r]);
    args[r].n = n;
    args[r].rank = r;
    args[r].id = id;
    ck_assert_int_eq(pthread_create(&th[r], NULL, rank_thread, &args[r]), 0);
  }
  for (int r = 0; r < n; r++) ck_assert_int_eq(pthread_join(th[r], NULL), 0);
  for (int r = 0; r < n; r++) {
    ck_assert_int_gt(args[r].tally.cases, 800);
    ck_assert_msg(args[r].rc == 0,
                  "rank %d of %d threads: %ld mismatched elements, %ld failed calls", r, n,
                  args[r].tally.mismatches, args[r].tally.errors);
  }
}
END_TEST

/* ---- all ranks driven by one thread ---------------------------------------------------------------- */

START_TEST(test_one_thread) {
  int n = rank_counts[_i];
  coll_comms_t a, b;
  coll_tally_t tally = {0, 0, 0, 0};
  int rc = coll_comms_init_all(n, &a, &b);
  ck_assert_msg(rc == 0, "creating %d ranks in one thread failed", n);
  rc = coll_suite_run(&a, &b, n == 2, &tally);
  coll_comms_release(&b, 1);
  coll_comms_release(&a, 1);
  ck_assert_int_gt(tally.cases, 400);
  ck_assert_msg(rc == 0, "%d ranks in one thread: %ld mismatched elements, %ld failed calls", n,
                tally.mismatches, tally.errors);
}
END_TEST

/* `which` is "processes" (ranks under ncclsim-run: e2e) or "threads" (in-process: unit, so it is
 * also run under the sanitizers). */
static Suite *coll_suite(const char *which) {
  Suite *s = suite_create("coll");
  TCase *tc;
  if (strcmp(which, "processes") == 0) {
    tc = tcase_create("processes");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, test_processes, 0, NCOUNTS);
    suite_add_tcase(s, tc);
    return s;
  }
  tc = tcase_create("threads");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, test_threads, 0, NCOUNTS);
  suite_add_tcase(s, tc);
  tc = tcase_create("one_thread");
  tcase_set_timeout(tc, 240);
  tcase_add_loop_test(tc, test_one_thread, 0, NCOUNTS);
  suite_add_tcase(s, tc);
  return s;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "processes") != 0 && strcmp(argv[1], "threads") != 0)) {
    fprintf(stderr, "usage: test_coll processes|threads\n");
    return 2;
  }
  return ah_check_run(coll_suite(argv[1]));
}
