/* ncclsim-run as a user sees it: the environment each rank gets, the exit status of the job (the
 * worst rank's), bad arguments, and signal forwarding. The ranks are shell commands, so the
 * launcher is tested on its own, without NCCL. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"

/* Runs ncclsim-run with `args` under sh; returns its exit code and fills out (sorted lines). */
static int run(const char *args, char *out, size_t len) {
  char cmd[2048];
  /* The launcher's status goes through a file: sh has no PIPESTATUS. */
  char status_file[] = "/tmp/sim-launcher-XXXXXX";
  int fd = mkstemp(status_file);
  ck_assert_int_ge(fd, 0);
  close(fd);
  snprintf(cmd, sizeof cmd, "{ '%s' %s 2>/dev/null; echo $? > %s; } | sort", NCCLSIM_RUN_PATH, args,
           status_file);
  FILE *p = popen(cmd, "r");
  ck_assert_ptr_nonnull(p);
  size_t n = fread(out, 1, len - 1, p);
  out[n] = 0;
  pclose(p);
  FILE *f = fopen(status_file, "r");
  int code = -1;
  ck_assert_ptr_nonnull(f);
  ck_assert_int_eq(fscanf(f, "%d", &code), 1);
  fclose(f);
  unlink(status_file);
  return code;
}

START_TEST(test_environment) {
  char out[4096];
  int code = run(
      "-n 4 --nodes 2 -- sh -c 'echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE "
      "$NCCLSIM_NODE $GROUP_RANK; test -d \"$NCCLSIM_RDZV\" && test -n \"$NCCLSIM_SHM_PREFIX\"'",
      out, sizeof out);
  ck_assert_int_eq(code, 0);
  ck_assert_str_eq(out, "0 4 0 2 0 0\n1 4 1 2 0 0\n2 4 0 2 1 1\n3 4 1 2 1 1\n");
}
END_TEST

/* torchrun's variables: one MASTER_ADDR/MASTER_PORT for the whole job (a free port unless the
 * caller set one), GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_* (the run id "none" unless set),
 * OMP_NUM_THREADS=1 unless set. */
START_TEST(test_torchrun_environment) {
  char out[4096];
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  unsetenv("OMP_NUM_THREADS");
  unsetenv("TORCHELASTIC_RUN_ID");
  int code =
      run("-n 4 --nodes 2 -- sh -c 'echo $RANK $GROUP_WORLD_SIZE $ROLE_RANK $ROLE_WORLD_SIZE "
          "$ROLE_NAME $MASTER_ADDR $OMP_NUM_THREADS $TORCHELASTIC_RESTART_COUNT "
          "$TORCHELASTIC_MAX_RESTARTS $TORCHELASTIC_RUN_ID; test \"$MASTER_PORT\" -gt 0'",
          out, sizeof out);
  ck_assert_int_eq(code, 0);
  ck_assert_str_eq(out,
                   "0 2 0 4 default 127.0.0.1 1 0 0 none\n1 2 1 4 default 127.0.0.1 1 0 0 none\n"
                   "2 2 2 4 default 127.0.0.1 1 0 0 none\n3 2 3 4 default 127.0.0.1 1 0 0 none\n");
  code = run("-n 3 -- sh -c 'echo $MASTER_PORT'", out, sizeof out);
  ck_assert_int_eq(code, 0);
  char *nl = strchr(out, '\n');
  ck_assert_ptr_nonnull(nl);
  size_t len = (size_t)(nl - out + 1);
  ck_assert_int_eq(strlen(out), 3 * len); /* every rank the same port */
  ck_assert(strncmp(out, out + len, len) == 0 && strncmp(out, out + 2 * len, len) == 0);
  setenv("MASTER_ADDR", "10.1.2.3", 1);
  setenv("MASTER_PORT", "29500", 1);
  setenv("OMP_NUM_THREADS", "3", 1);
  setenv("TORCHELASTIC_RUN_ID", "job-7", 1);
  code = run("-n 2 -- sh -c 'echo $MASTER_ADDR $MASTER_PORT $OMP_NUM_THREADS $TORCHELASTIC_RUN_ID'",
             out, sizeof out);
  unsetenv("MASTER_ADDR");
  unsetenv("MASTER_PORT");
  unsetenv("OMP_NUM_THREADS");
  unsetenv("TORCHELASTIC_RUN_ID");
  ck_assert_int_eq(code, 0);
  ck_assert_str_eq(out, "10.1.2.3 29500 3 job-7\n10.1.2.3 29500 3 job-7\n");
}
END_TEST

/* --preload appends the four stand-ins after what LD_PRELOAD holds; the launcher's own marker of
 * its second start does not reach the ranks; a missing stand-in folder is refused. */
START_TEST(test_preload) {
  char out[4096], want[4096];
  setenv("LD_PRELOAD", "libm.so.6", 1);
  int code = run("--preload -n 2 -- sh -c 'echo $LD_PRELOAD ${NCCLSIM_RUN_PRELOADED-unset}'", out,
                 sizeof out);
  unsetenv("LD_PRELOAD");
  ck_assert_int_eq(code, 0);
  const char *d = SIM_PRELOAD_DIR;
  snprintf(want, sizeof want,
           "libm.so.6 %s/libcuda.so.1 %s/libcudart.so.13 %s/libcudart.so.12 "
           "%s/libnccl.so.2 unset\n",
           d, d, d, d);
  ck_assert_int_eq(strlen(out), 2 * strlen(want));
  ck_assert(strncmp(out, want, strlen(want)) == 0 && strcmp(out + strlen(want), want) == 0);
  setenv("NCCLSIM_PRELOAD_DIR", "/nonexistent", 1);
  code = run("--preload -n 2 -- true", out, sizeof out);
  unsetenv("NCCLSIM_PRELOAD_DIR");
  ck_assert_int_eq(code, 2);
}
END_TEST

START_TEST(test_exit_status) {
  char out[256];
  ck_assert_int_eq(run("-n 4 -- sh -c 'exit $RANK'", out, sizeof out), 3);
  ck_assert_int_eq(run("-n 3 -- sh -c '[ $RANK = 1 ] && kill -9 $$; exit 5'", out, sizeof out),
                   128 + SIGKILL);
  ck_assert_int_eq(run("-n 2 -- true", out, sizeof out), 0);
  ck_assert_int_eq(run("-n 2 -- /nonexistent/program", out, sizeof out), 127);
}
END_TEST

START_TEST(test_bad_arguments) {
  char out[256];
  ck_assert_int_eq(run("-n 0 -- true", out, sizeof out), 2);
  ck_assert_int_eq(run("-n x -- true", out, sizeof out), 2);
  ck_assert_int_eq(run("-n 4 --nodes 3 -- true", out, sizeof out), 2);
  ck_assert_int_eq(run("-n 4", out, sizeof out), 2);
  ck_assert_int_eq(run("--bogus -n 2 -- true", out, sizeof out), 2);
}
END_TEST

/* SIGTERM to the launcher reaches every rank; the ranks' own exit status comes back. */
START_TEST(test_signal_forwarding) {
  char dir[] = "/tmp/sim-launcher-sig-XXXXXX";
  ck_assert_ptr_nonnull(mkdtemp(dir));
  char script[1024];
  snprintf(script, sizeof script,
           "trap 'exit 7' TERM; touch %s/up.$RANK; while :; do sleep 0.05; done", dir);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    execl(NCCLSIM_RUN_PATH, NCCLSIM_RUN_PATH, "-n", "3", "--", "sh", "-c", script, (char *)NULL);
    _exit(127);
  }
  char path[512];
  int up = 0;
  for (int i = 0; i < 500 && up < 3; i++, usleep(10000)) {
    up = 0;
    for (int r = 0; r < 3; r++) {
      snprintf(path, sizeof path, "%s/up.%d", dir, r);
      up += access(path, F_OK) == 0;
    }
  }
  ck_assert_int_eq(up, 3);
  ck_assert_int_eq(kill(pid, SIGTERM), 0);
  int status;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert(WIFEXITED(status));
  ck_assert_int_eq(WEXITSTATUS(status), 7);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {test_environment,   test_torchrun_environment,
                                test_preload,       test_exit_status,
                                test_bad_arguments, test_signal_forwarding};
  return ah_check_main("sim_launcher", (ah_check_case_t){.name = "launcher", .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
