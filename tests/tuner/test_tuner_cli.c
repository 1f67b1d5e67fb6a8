/* Tests of the `autoha` command as users run it: `autoha report` prints an aligned table per
 * communicator from a report written by tuner/, `autoha check-override` accepts a good string and
 * rejects a bad one naming the token and position, `autoha compare` matches keys of two runs,
 * `autoha env` shows values set in the
 * environment, and bad input gives a clear error and a non-zero exit. */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_report.h"
#include "cli_run.h"

static char dir[256];

static int fixture_rank;      /* the rank the next fixture report's communicator has */
static int fixture_searching; /* 1: the allreduce key is tuned and its search still runs */

static void write_report_scaled(const char *path, double scale, uint64_t id) {
  static ah_report_key_t keys[2];
  static ah_report_comm_t comm;
  ah_report_t r;
  memset(&r, 0, sizeof r);
  memset(keys, 0, sizeof keys);
  snprintf(r.host, sizeof r.host, "node7");
  r.pid = 99;
  r.rank = 0;
  r.nccl_version = 22805;
  ah_topology_t topo = {.gpu = "NVIDIA H100", .nodes = 1, .ranks = 8, .nccl_version = 22805};
  ah_report_topology(&topo, r.topo);
  snprintf(r.mode, sizeof r.mode, "fixed");
  r.ncomms = 1;
  r.comms = &comm;
  comm.id = id;
  comm.rank = fixture_rank;
  comm.nranks = 8;
  comm.nnodes = 1;
  comm.nkeys = 2;
  comm.keys = keys;
  keys[0].coll = AH_FUNC_ALLREDUCE;
  keys[0].bin = 24;
  keys[0].calls = 400;
  keys[0].source = AH_SOURCE_OVERRIDE;
  keys[0].nccl_default.cfg = cfg(AH_ALGO_TREE, AH_PROTO_SIMPLE, 16);
  keys[0].nccl_default.calls = keys[0].nccl_default.timed = 100;
  keys[0].nccl_default.us_total = 100 * 2000.0;
  keys[0].nccl_default.bytes_total = 100 * 16777216.0;
  keys[0].applied.cfg = cfg(AH_ALGO_RING, AH_PROTO_SIMPLE, 16);
  keys[0].applied.calls = keys[0].applied.timed = 300;
  keys[0].applied.us_total = 300 * 1000.0 * scale;
  keys[0].applied.bytes_total = 300 * 16777216.0;
  keys[1].coll = AH_FUNC_BROADCAST;
  keys[1].bin = 3;
  keys[1].calls = 2;
  keys[1].source = AH_SOURCE_DEFAULT;
  keys[1].nccl_default.cfg = cfg(AH_ALGO_RING, AH_PROTO_LL, 2);
  keys[1].applied = keys[1].nccl_default;
  /* The run's record: rank 2 started with another NCCL_ALGO, rank 1's override was refused. */
  r.run.present = 1;
  r.run.nvars = 2;
  snprintf(r.run.vars[0].name, sizeof r.run.vars[0].name, "AUTOHA_OVERRIDE");
  snprintf(r.run.vars[0].value, sizeof r.run.vars[0].value, "allreduce:algo=ring;x:y");
  snprintf(r.run.vars[1].name, sizeof r.run.vars[1].name, "NCCL_ALGO");
  snprintf(r.run.vars[1].value, sizeof r.run.vars[1].value, "%s",
           fixture_rank == 2 ? "tree" : "ring");
  snprintf(r.run.gpu, sizeof r.run.gpu, "NVIDIA H100");
  r.run.cuda_driver = 12040;
  r.run.nnodes = 1;
  snprintf(r.run.nodes[0], sizeof r.run.nodes[0], "node%d", 7 + fixture_rank);
  r.run.nrefused = 1;
  snprintf(r.run.refused[0], sizeof r.run.refused[0], "'x' at position 22: unknown collective");
  keys[0].refused = fixture_rank == 1;
  if (fixture_searching) {
    keys[0].source = AH_SOURCE_TUNED;
    keys[0].tuned = 1;
    keys[0].tune.state = AH_TUNE_SEARCHING;
    keys[0].tune.calls_spent = 4;
    keys[0].tune.probes = 2;
  }
  char err[256];
  ck_assert_msg(ah_report_write(&r, path, err, sizeof err) == 0, "%s", err);
}

static void write_report(const char *path) { write_report_scaled(path, 1.0, 0xabc); }

/* The line of `text` that contains `needle`, copied (static buffer). */
static const char *line_with(const char *text, const char *needle) {
  static char line[1024];
  const char *p = strstr(text, needle);
  ck_assert_msg(p != NULL, "no '%s' in:\n%s", needle, text);
  while (p > text && p[-1] != '\n') p--;
  size_t n = strcspn(p, "\n");
  if (n >= sizeof line) n = sizeof line - 1;
  memcpy(line, p, n);
  line[n] = 0;
  return line;
}

static int col(const char *line, const char *word) {
  const char *p = strstr(line, word);
  ck_assert_msg(p != NULL, "no '%s' in '%s'", word, line);
  return (int)(p - line);
}

START_TEST(report_table) {
  char path[512];
  snprintf(path, sizeof path, "%s/r.json", dir);
  write_report(path);
  const char *out =
      cli(0, "host node7, pid 99, rank 0, NCCL 2.28.5, mode fixed", "report '%s'", path);
  ck_assert_ptr_nonnull(strstr(out, "communicator 0x0000000000000abc: 8 ranks on 1 nodes"));
  char head[1024], row[1024], row2[1024];
  snprintf(head, sizeof head, "%s", line_with(out, "bytes/rank"));
  snprintf(row, sizeof row, "%s", line_with(out, "allreduce"));
  snprintf(row2, sizeof row2, "%s", line_with(out, "broadcast"));
  /* Left-aligned columns start where their heading starts. */
  ck_assert_int_eq(col(head, "bytes/rank"), col(row, "16M-32M"));
  ck_assert_int_eq(col(head, "source"), col(row, "override"));
  ck_assert_int_eq(col(head, "source"), col(row2, "default"));
  ck_assert_int_eq(col(head, "nccl config"), col(row, "tree/simple nch=16"));
  ck_assert_int_eq(col(head, "autoha config"), col(row, "ring/simple nch=16"));
  ck_assert_ptr_nonnull(strstr(row, " 2000.0 "));
  ck_assert_ptr_nonnull(strstr(row, " 1000.0 "));
  ck_assert_ptr_nonnull(strstr(row, " 2.00x "));
  /* busbw: 16 MiB in 1 ms on 8 ranks = 16.777 GB/s algbw x 1.75. */
  ck_assert_ptr_nonnull(strstr(row, " 29.36 "));
  ck_assert_ptr_nonnull(strstr(row2, "8-16"));
  /* Right-aligned: numbers end where their heading ends. */
  ck_assert_int_eq(col(head, "calls") + 5, col(row, "400") + 3);
  ck_assert_int_eq(col(head, "calls") + 5, col(row2, " 2 ") + 2);
}
END_TEST

START_TEST(report_errors) {
  char path[512];
  snprintf(path, sizeof path, "%s/bad.json", dir);
  FILE *f = fopen(path, "w");
  fputs("{\"schema\": 1,\n \"host\": ", f);
  fclose(f);
  const char *out = cli(1, "bad.json: line 2", "report '%s'", path);
  ck_assert_ptr_nonnull(strstr(out, "autoha: "));
  cli(1, "none.json: cannot open: No such file", "report '%s/none.json'", dir);
  cli(2, "unknown command 'frobnicate'", "frobnicate");
  cli(2, "usage: autoha report DIR|FILE", "%s", ""); /* no arguments at all */
}
END_TEST

START_TEST(check_override) {
  const char *out = cli(
      0, "rule 1 (position 0): allreduce@1M-64M:algo=ring,proto=simple,nchannels=16\n",
      "check-override 'allreduce@1M-64M:algo=ring,proto=simple,nchannels=16;allgather:nchannels=8'");
  ck_assert_ptr_nonnull(strstr(out, "rule 2 (position 53): allgather:nchannels=8\n"));
  ck_assert_ptr_nonnull(strstr(out, "ok: 2 rules"));
  out = cli(
      1, "autoha: invalid value for AUTOHA_OVERRIDE: 'algo=rong' at position 17: unknown algorithm",
      "check-override 'allreduce@1M-64M:algo=rong;allgather:nchannels=8'");
  ck_assert_ptr_nonnull(strstr(out, "rule 1 (position 27): allgather:nchannels=8"));
  ck_assert_ptr_nonnull(strstr(out, "1 error; the 1 valid rule would still apply"));
}
END_TEST

START_TEST(env_listing) {
  char cmd[1024];
  const char *out;
  snprintf(cmd, sizeof cmd, "env AUTOHA_MODE=observe AUTOHA_OVRRIDE=x '%s' env", AUTOHA_CLI);
  ck_assert_int_eq(run(cmd, &out), 0);
  ck_assert_ptr_nonnull(strstr(out, "AUTOHA_MODE=observe "));
  ck_assert_ptr_nonnull(strstr(out, "(set; default: tune)"));
  ck_assert_ptr_nonnull(
      strstr(out, "unknown environment variable AUTOHA_OVRRIDE (maybe AUTOHA_OVERRIDE?)"));
  cli(0, "# syntax:  observe|fixed|tune\n# default: tune\n", "env --docs");
  cli(0, "<!-- env-table:begin -->", "env --markdown");
  cli(2, NULL, "env --bogus");
}
END_TEST

START_TEST(compare_runs) {
  char base[512], fresh[512];
  snprintf(base, sizeof base, "%s/base.json", dir);
  snprintf(fresh, sizeof fresh, "%s/new.json", dir);
  write_report_scaled(base, 2.0, 0x111);  /* AllReduce at 2000 us */
  write_report_scaled(fresh, 0.5, 0x222); /* at 500 us; another communicator id, same shape */
  const char *out = cli(0, NULL, "compare '%s' '%s'", base, fresh);
  char head[1024], row[1024];
  snprintf(head, sizeof head, "%s", line_with(out, "base config"));
  snprintf(row, sizeof row, "%s", line_with(out, "allreduce"));
  ck_assert_int_eq(col(head, "base us") + 7, col(row, "2000.0") + 6);
  ck_assert_int_eq(col(head, "new us") + 6, col(row, "500.0") + 5);
  ck_assert_ptr_nonnull(strstr(row, " 4.00x "));
  ck_assert_ptr_nonnull(strstr(row, "1x8"));
  /* The broadcast key was never timed: not counted in the total. */
  ck_assert_ptr_nonnull(
      strstr(out, "1 keys timed in both runs: 800.0 ms in base, 200.0 ms in new"));
  cli(2, NULL, "compare '%s'", base);
  cli(1, "none.json: cannot open", "compare '%s' '%s/none.json'", base, dir);
}
END_TEST

/* The job, not one rank: three ranks' reports merged, rank 2's tuned time 50% over the median. */
START_TEST(report_merge) {
  char path[512];
  for (int r = 0; r < 3; r++) {
    fixture_rank = r;
    snprintf(path, sizeof path, "%s/%d.json", dir, r);
    write_report_scaled(path, r == 2 ? 1.5 : 1.0, 0xabc);
  }
  snprintf(path, sizeof path, "%s/hub.cred", dir); /* not a report: skipped by the folder walk */
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fclose(f);
  const char *out =
      cli(0, "comm 0x0000000000000abc: 8 ranks on 1 nodes", "report --merge '%s'", dir);
  const char *row = line_with(out, "allreduce 16M-32M");
  ck_assert_msg(strstr(row, " 3  ring/simple nch=16 ") && strstr(row, "1000.0/1000.0/1500.0") &&
                    strstr(row, "2000.0/2000.0/2000.0") && strstr(row, " 2.00x ") &&
                    strstr(row, "2(+50%)"),
                "%s", row);
  ck_assert_ptr_nonnull(strstr(line_with(out, "broadcast 8-16"), " nccl "));
  /* The environment the job ran with, and the refused overrides. */
  ck_assert_ptr_nonnull(strstr(
      out, "environment (3 reports, 3 with a record of the run):\n  hosts: node7, node8, node9\n"));
  ck_assert_ptr_nonnull(strstr(out, "  GPU: NVIDIA H100\n"));
  ck_assert_ptr_nonnull(strstr(out, "  CUDA driver: 12.4\n"));
  ck_assert_ptr_nonnull(strstr(out, "  NCCL version: 2.28.5\n"));
  ck_assert_ptr_nonnull(strstr(out, "  AUTOHA_OVERRIDE=allreduce:algo=ring;x:y\n"));
  ck_assert_ptr_nonnull(strstr(out, "  NCCL_ALGO=ring (2 of 3 reports), tree (1 of 3 reports)\n"));
  ck_assert_ptr_nonnull(strstr(out, "refused overrides:\n"));
  ck_assert_ptr_nonnull(strstr(out, "  'x' at position 22: unknown collective (3 of 3 reports)\n"));
  ck_assert_ptr_nonnull(
      strstr(out,
             "  allreduce 16M-32M on comm 0x0000000000000abc: a pair NCCL cannot run here, "
             "NCCL's choice ran (1 of 3 reports)\n"));
  out = cli(0, "comm,nranks,nnodes,coll,bin,bytes_min,ranks,config,", "report --csv --merge '%s'",
            dir);
  ck_assert_ptr_nonnull(strstr(out,
                               "0x0000000000000abc,8,1,allreduce,24,16777216,3,ring/simple nch=16,"
                               "1000.0,1000.0,1500.0,2000.0,2000.0,2000.0,2(+50%)\n"));
  out = cli(0, "{\"rank\": 2, \"why\": \"+50%\"}",
            "report --merge --json '%s/0.json' '%s/1.json' '%s/2.json'", dir, dir, dir);
  char cmd[1024];
  snprintf(cmd, sizeof cmd,
           "'%s' report --merge --json '%s' | python3 -c 'import json,sys; "
           "d = json.load(sys.stdin); assert len(d[\"keys\"]) == 2, d'",
           AUTOHA_CLI, dir);
  ck_assert_int_eq(system(cmd), 0);
  /* AUTOHA_REPORT's default layout, autoha-reports/<job>/<host>-<pid>.json: the top folder will do */
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/tree/job' && cp '%s'/?.json '%s/tree/job/'", dir, dir,
           dir);
  ck_assert_int_eq(system(cmd), 0);
  out = cli(0, "comm 0x0000000000000abc: 8 ranks on 1 nodes", "report --merge '%s/tree'", dir);
  ck_assert_ptr_nonnull(strstr(line_with(out, "allreduce 16M-32M"), "2(+50%)"));
  cli(2, "autoha report --merge: unknown option '--bogus'", "report --merge --bogus '%s'", dir);
  cli(0, "usage: autoha report --merge", "report --merge --help");
  cli(1, "no report read from", "report --merge '%s/none'", dir);
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/empty'", dir); /* a folder with no report names itself */
  ck_assert_int_eq(system(cmd), 0);
  char want[600];
  snprintf(want, sizeof want, "no report read from %s/empty (a report is a .json file", dir);
  cli(1, want, "report --merge '%s/empty'", dir);
}
END_TEST

/* A key whose search still runs is shown searching, not tuned; once converged, tuned. */
START_TEST(report_searching) {
  char path[512];
  snprintf(path, sizeof path, "%s/s.json", dir);
  fixture_searching = 1;
  write_report(path);
  const char *out = cli(0, "allreduce", "report '%s'", path);
  char row[1024];
  snprintf(row, sizeof row, "%s", line_with(out, "allreduce"));
  ck_assert_int_eq(col(line_with(out, "bytes/rank"), "source"), col(row, "searching"));
  ck_assert_msg(strstr(row, " tuned ") == NULL, "a searching key shown tuned: %s", row);
  ck_assert_ptr_nonnull(strstr(row, "searching, 4 calls, 2 probes"));
  fixture_searching = 0;
}
END_TEST

/* `autoha report DIR` takes a folder as plot, trace and report --merge do: every report in it and
 * its subfolders, in name order; an empty folder says so and exits 1. */
START_TEST(report_folder) {
  char path[512], cmd[1200];
  snprintf(cmd, sizeof cmd, "mkdir -p '%s/job/sub' '%s/empty'", dir, dir);
  ck_assert_int_eq(system(cmd), 0);
  snprintf(path, sizeof path, "%s/job/b.json", dir);
  write_report(path);
  snprintf(path, sizeof path, "%s/job/sub/c.json", dir);
  write_report(path);
  snprintf(path, sizeof path, "%s/job/a.json", dir);
  write_report(path);
  snprintf(cmd, sizeof cmd, "%s/job/a.json: host node7", dir);
  const char *out = cli(0, cmd, "report '%s/job'", dir);
  char want[3][600];
  const char *at[3];
  static const char *const names[] = {"a.json", "b.json", "sub/c.json"};
  for (int i = 0; i < 3; i++) {
    snprintf(want[i], sizeof want[i], "%s/job/%s: host node7", dir, names[i]);
    at[i] = strstr(out, want[i]);
    ck_assert_msg(at[i] != NULL, "no '%s' in:\n%s", want[i], out);
  }
  ck_assert_msg(at[0] < at[1] && at[1] < at[2], "not in name order:\n%s", out);
  snprintf(want[0], sizeof want[0], "autoha report: no report read from %s/empty", dir);
  cli(1, want[0], "report '%s/empty'", dir);
}
END_TEST

/* `autoha help` is the usage, exit 0; an unknown command is still a usage error. */
START_TEST(help_command) {
  const char *out = cli(0, "usage: autoha report", "help");
  ck_assert_ptr_nonnull(strstr(out, "autoha help"));
  cli(2, "unknown command 'helpme'", "helpme");
}
END_TEST

/* The credentials of a job whose hub is gone (nothing listens at its address): the text says the
 * job ended, --json is one whole object with the error, and both exit 1. */
START_TEST(status_job_ended) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t sl = sizeof sa;
  ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sl), 0);
  ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
  close(fd); /* the port is free again: a connection to it is refused */
  char path[512], cmd[1200], want[256];
  snprintf(path, sizeof path, "%s/hub.cred", dir);
  FILE *f = fopen(path, "w");
  ck_assert_ptr_nonnull(f);
  fprintf(f, "autoha-hub-credentials 1 127.0.0.1 %u 00112233445566778899aabbccddeeff\n",
          ntohs(sa.sin_port));
  fclose(f);
  snprintf(want, sizeof want,
           "the job's hub at 127.0.0.1:%u is gone: the job ended, or its rank 0 process died",
           ntohs(sa.sin_port));
  cli(1, want, "status '%s'", path);
  const char *out;
  snprintf(
      cmd, sizeof cmd,
      "'%s' status --json '%s' 2>/dev/null | python3 -c 'import json, sys; d = json.load(sys.stdin); "
      "assert d[\"comms\"] == [] and \"is gone\" in d[\"error\"], d; print(\"json ok\")'",
      AUTOHA_CLI, path);
  ck_assert_msg(run(cmd, &out) == 0 && strstr(out, "json ok"), "%s", out);
  snprintf(cmd, sizeof cmd, "'%s' status --json '%s' >/dev/null 2>&1", AUTOHA_CLI, path);
  ck_assert_int_eq(run(cmd, &out), 1);
  /* A missing file under --json: an object too. */
  snprintf(cmd, sizeof cmd,
           "'%s' status --json '%s/none.cred' 2>/dev/null | python3 -c 'import json, sys; "
           "assert \"cannot read\" in json.load(sys.stdin)[\"error\"]; print(\"json ok\")'",
           AUTOHA_CLI, dir);
  ck_assert_msg(run(cmd, &out) == 0 && strstr(out, "json ok"), "%s", out);
}
END_TEST

/* Every subcommand parses with getopt_long: --help prints its usage and exits 0; an unknown option,
 * long or short, is one line naming it and the way to the help, exit 2; a missing value likewise. */
START_TEST(subcommand_options) {
  static const char *const cmds[] = {"report", "compare",       "env", "check-override",
                                     "status", "lib",           "run", "plot",
                                     "trace",  "report --merge"};
  for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
    char want[128];
    snprintf(want, sizeof want, "usage: autoha %s", cmds[i]);
    const char *out = cli(0, want, "%s --help", cmds[i]);
    ck_assert_msg(strstr(out, "-h, --help") != NULL || strstr(out, "--help") != NULL, "%s", out);
    cli(0, want, "%s -h", cmds[i]);
    snprintf(want, sizeof want, "autoha %s: unknown option '--bogus' (see autoha %s --help)\n",
             cmds[i], cmds[i]);
    out = cli(2, want, "%s --bogus x", cmds[i]);
    ck_assert_msg(strcmp(out, want) == 0, "autoha %s --bogus: more than the one line:\n%s", cmds[i],
                  out);
    snprintf(want, sizeof want, "autoha %s: unknown option '-Z'", cmds[i]);
    cli(2, want, "%s -Z x", cmds[i]);
  }
  cli(2, "autoha report --merge: option '--pct' needs a value", "report --merge '%s' --pct", dir);
  cli(2, "autoha env: option '--docs' takes no value", "env --docs=1");
  cli(2, "autoha env: unexpected argument 'x'", "env x");
  cli(2, "autoha compare: wants two reports", "compare a");
  cli(2, "autoha report: no report given", "report");
  /* run stops at its command: the command's options are not autoha's. (echo runs with the library
   * preloaded: in a sanitizer build its runtime comes with it, not first, which ASan must allow.) */
  const char *asan = getenv("ASAN_OPTIONS");
  char saved[512] = "", opts[600];
  if (asan) snprintf(saved, sizeof saved, "%s", asan);
  snprintf(opts, sizeof opts, "%s%sverify_asan_link_order=0", saved, saved[0] ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
  cli(0, "-Z", "run echo -Z");
  if (asan) setenv("ASAN_OPTIONS", saved, 1);
  else unsetenv("ASAN_OPTIONS");
}
END_TEST

static void make_dir(void) {
  snprintf(dir, sizeof dir, "/tmp/ah-cli-test-XXXXXX");
  ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void remove_dir(void) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
  const TTest *const tests[] = {report_table,  report_errors, check_override,     env_listing,
                                compare_runs,  report_merge,  subcommand_options, report_searching,
                                report_folder, help_command,  status_job_ended};
  return ah_check_main(
      "tuner_cli",
      (ah_check_case_t){.name = "cli", .timeout = 30, .setup = make_dir, .teardown = remove_dir},
      tests, AH_CHECK_COUNT(tests));
}
