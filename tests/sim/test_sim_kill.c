/* Killing one rank of an 8-rank job: the seven others must notice through sim/, fail their call
 * with an NCCL error, and the job (ncclsim-run) must end non-zero within 30 s. The test also
 * checks that the survivors failed by themselves, before the launcher's grace period would have
 * had to terminate them. */
#include <check.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int read_pid(const char *dir, int rank) {
  char path[512];
  snprintf(path, sizeof path, "%s/rank%d.pid", dir, rank);
  FILE *f = fopen(path, "r");
  if (!f) return 0;
  int pid = 0;
  if (fscanf(f, "%d", &pid) != 1) pid = 0;
  fclose(f);
  return pid;
}

START_TEST(test_kill_one_of_eight) {
  char dir[] = "/tmp/sim-kill-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char log[600];
  snprintf(log, sizeof log, "%s/stderr.log", dir);
  pid_t job = fork();
  ck_assert_int_ge(job, 0);
  if (job == 0) {
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd >= 0) dup2(fd, 2);
    setenv("LOOP_PIDDIR", dir, 1);
    setenv("LOOP_SECONDS", "90", 1);
    setenv("NCCLSIM_RUN_GRACE_S", "25", 1); /* survivors must fail on their own, well before */
    execl(NCCLSIM_RUN_PATH, NCCLSIM_RUN_PATH, "-n", "8", "--", LOOP_JOB_PATH, (char *)NULL);
    _exit(127);
  }
  /* Wait until every rank is in its loop (its pid file is written after its first collective),
   * then kill rank 3. */
  int victim = 0, up = 0;
  for (double t0 = now_s(); now_s() - t0 < 30 && up < 8; usleep(20000)) {
    up = 0;
    for (int r = 0; r < 8; r++) up += read_pid(dir, r) > 0;
  }
  ck_assert_int_eq(up, 8);
  victim = read_pid(dir, 3);
  ck_assert_int_eq(kill(victim, SIGKILL), 0);
  double killed_at = now_s();
  int status = 0;
  pid_t got;
  while ((got = waitpid(job, &status, WNOHANG)) == 0 && now_s() - killed_at < 40) usleep(20000);
  double took = now_s() - killed_at;
  if (got == 0) {
    kill(job, SIGKILL);
    waitpid(job, &status, 0);
  }
  ck_assert_msg(got == job && took < 30, "the job did not end within 30 s of the kill (%.1f s)",
                took);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGKILL,
                "ncclsim-run should exit with 137 (rank killed by SIGKILL); status 0x%x", status);
  /* Every survivor reported an NCCL error of its own. */
  FILE *f = fopen(log, "r");
  ck_assert_ptr_nonnull(f);
  char line[1024];
  int failed[8] = {0}, termed = 0;
  while (fgets(line, sizeof line, f)) {
    int r;
    if (sscanf(line, "sim_loop_job: rank %d: ncclAllReduce", &r) == 1 && r >= 0 && r < 8 &&
        strstr(line, "failed"))
      failed[r] = 1;
    if (strstr(line, "sending SIGTERM")) termed = 1;
  }
  fclose(f);
  for (int r = 0; r < 8; r++)
    if (r != 3) ck_assert_msg(failed[r], "rank %d did not report a failed call (log: %s)", r, log);
  ck_assert_msg(!termed, "the launcher had to terminate survivors (log: %s)", log);
  char cmd[700];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
  printf("kill test: job ended %.2f s after rank 3 was killed\n", took);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_kill_one_of_eight};
  return ah_check_main("sim_kill", (ah_check_case_t){.name = "kill", .timeout = 90}, tests,
                       AH_CHECK_COUNT(tests));
}
