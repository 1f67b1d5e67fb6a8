/* Tuner-plugin loading and calling on sim/, as each emulated NCCL version does: test plugins
 * exporting each ABI (v1..v6, and one exporting v2..v6) run in 4-rank jobs (2 virtual nodes)
 * under NCCLSIM_VERSION 2.18 ... 2.30. The plugin logs what it was given (init arguments, the cost
 * table's -1 cells, nBytes, numPipeOps, the nChannels it found) and NCCLSIM_TRACE shows what sim/
 * applied (the channel cap, the v6 chunk). A plugin answering differently on one rank must fail
 * the job at the first call with the mismatch text; the same plugin answering alike passes. */
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ah_check.h"
#include "sim_model.h"

#define NRANKS 4
#define NNODES 2

static char dir[] = "/tmp/simtuner-XXXXXX";
static char out_path[300], log_path[300], trace_path[300];
static char *out_text, *log_text, *trace_text;

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) return strdup("");
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = calloc(1, (size_t)n + 1);
  if (b && n > 0 && fread(b, 1, (size_t)n, f) != (size_t)n) b[0] = 0;
  fclose(f);
  return b;
}

static const char *plugin_path(int abi) {
  static char p[400];
  snprintf(p, sizeof p, "%s/libsimtuner-v%d.so", SIMTUNER_DIR, abi);
  return p;
}

static int job_ranks = NRANKS, job_nodes = NNODES;

/* Runs the job with the given env (NULL-terminated "K=V" list). Returns its exit status. */
static int run_job(const char *version, const char *plugin, const char *policy,
                   const char *const *env) {
  snprintf(out_path, sizeof out_path, "%s/out", dir);
  snprintf(log_path, sizeof log_path, "%s/log", dir);
  snprintf(trace_path, sizeof trace_path, "%s/trace", dir);
  unlink(out_path);
  unlink(log_path);
  unlink(trace_path);
  pid_t pid = fork();
  ck_assert_int_ge(pid, 0);
  if (pid == 0) {
    setenv("NCCLSIM_VERSION", version, 1);
    if (plugin) setenv("NCCL_TUNER_PLUGIN", plugin, 1);
    else unsetenv("NCCL_TUNER_PLUGIN");
    setenv("SIMTUNER_POLICY", policy ? policy : "", 1);
    setenv("SIMTUNER_LOG", log_path, 1);
    setenv("NCCLSIM_TRACE", trace_path, 1);
    setenv("NCCLSIM_TOPO", "h100", 1);
    setenv("NCCLSIM_RUN_GRACE_S", "5", 1);
    setenv("NCCLSIM_TIMEOUT_S", "20", 1);
    for (int i = 0; env && env[i]; i++) putenv((char *)env[i]);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) _exit(126);
    dup2(fd, 1);
    dup2(fd, 2);
    char n[8], m[8];
    snprintf(n, sizeof n, "%d", job_ranks);
    snprintf(m, sizeof m, "%d", job_nodes);
    execl(NCCLSIM_RUN_PATH, NCCLSIM_RUN_PATH, "-n", n, "--nodes", m, "--", SIMTUNER_JOB_PATH,
          (char *)NULL);
    _exit(127);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  free(out_text);
  free(log_text);
  free(trace_text);
  out_text = slurp(out_path);
  log_text = slurp(log_path);
  trace_text = slurp(trace_path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* Lines of `text` containing every one of the (NULL-terminated) substrings. */
static int count(const char *text, ...) {
  int n = 0;
  for (const char *line = text; line && *line;) {
    const char *end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line) : strlen(line);
    char buf[1024];
    if (len >= sizeof buf) len = sizeof buf - 1;
    memcpy(buf, line, len);
    buf[len] = 0;
    va_list ap;
    va_start(ap, text);
    int all = 1;
    for (const char *s = va_arg(ap, const char *); s; s = va_arg(ap, const char *))
      if (!strstr(buf, s)) all = 0;
    va_end(ap);
    n += all;
    line = end ? end + 1 : NULL;
  }
  return n;
}
#define COUNT(text, ...) count(text, __VA_ARGS__, (const char *)NULL)

static int version_code(const char *v) {
  int a = 0, b = 0, c = 0;
  sscanf(v, "%d.%d.%d", &a, &b, &c);
  return a * 10000 + b * 100 + c;
}

/* The ABI the emulated version takes from a plugin exporting only ncclTunerPlugin_v<abi>. */
static int accepted(int code, int abi) {
  if (code < 21900) return 0;
  if (code < 22100) return abi == 1;
  int newest = code >= 23206   ? 7
               : code >= 23000 ? 6
               : code >= 22800 ? 5
               : code >= 22400 ? 4
               : code >= 22200 ? 3
                               : 2;
  return abi >= 2 && abi <= newest;
}

/* The -1 pattern the plugin must see: the model's cost table for this job's layout. */
static void expected_cells(int code, int coll, size_t nbytes, int num_algo, char *cells) {
  sim_topo_t t;
  char err[200];
  ck_assert_int_eq(sim_topo_parse("h100", 0, &t, err, sizeof err), 0);
  t.version = code;
  sim_topo_set_layout(&t, NRANKS, NNODES, NRANKS / NNODES);
  static sim_model_t m;
  sim_model_init(&m, &t, 0, 0);
  float tab[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&m, coll, nbytes, 1, tab);
  int k = 0;
  for (int a = 0; a < num_algo; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++) cells[k++] = tab[a][p] < 0 ? '-' : '+';
  cells[k] = 0;
}

static const char *versions[] = {"2.18", "2.19", "2.21", "2.22",   "2.24",
                                 "2.28", "2.30", "2.31", "2.32.3", "2.32.6"};

static void check_matrix_cell(const char *version, int abi) {
  int code = version_code(version);
  int rc = run_job(version, plugin_path(abi), "ring_simple,nch=40", NULL);
  ck_assert_msg(rc == 0, "%s v%d: job failed (%d):\n%s", version, abi, rc, out_text);
  ck_assert_int_eq(COUNT(out_text, " ok "), NRANKS);
  char abi_s[32];
  snprintf(abi_s, sizeof abi_s, "abi=%d ", abi);
  if (!accepted(code, abi)) {
    ck_assert_msg(COUNT(log_text, "event=") == 0, "%s must not load a v%d-only plugin:\n%s",
                  version, abi, log_text);
    ck_assert_int_eq(COUNT(trace_text, "tuned=1"), 0);
    ck_assert_int_eq(COUNT(trace_text, "tuned=0"), 5 * NRANKS);
    return;
  }
  /* init once per communicator (one per rank), with NCCL's arguments; finalize at destroy */
  ck_assert_msg(
      COUNT(log_text, abi_s, "event=init", "nranks=4 nnodes=2", "logger=1 ctxslot=1") == NRANKS,
      "%s v%d init:\n%s", version, abi, log_text);
  ck_assert_int_eq(COUNT(log_text, abi_s, "event=fini ctx=1"), NRANKS);
  if (abi >= 5) ck_assert_int_eq(COUNT(log_text, "event=init", "constants=1"), NRANKS);
  /* one getCollInfo per bucket: 2.22+ aggregates the grouped pair into one 8 MiB bucket */
  int buckets = code >= 22200 ? 4 : 5;
  ck_assert_msg(COUNT(log_text, abi_s, "event=coll", "ctx=1") == buckets * NRANKS,
                "%s v%d: coll calls\n%s", version, abi, log_text);
  ck_assert_int_eq(COUNT(log_text, "event=coll coll=2 nbytes=1048576 "),
                   NRANKS); /* AllGather: total */
  ck_assert_int_eq(COUNT(log_text, "event=coll coll=4 nbytes=4096 "), NRANKS);
  if (code >= 22200)
    ck_assert_int_eq(COUNT(log_text, "event=coll coll=4 nbytes=8388608 npipe=1 "), NRANKS);
  else ck_assert_int_eq(COUNT(log_text, "event=coll coll=4 nbytes=4194304 npipe=1 "), 3 * NRANKS);
  if (abi >= 3) {
    int num_algo = code >= 22300 ? 7 : 6;
    char shape[64], cells[32], want[200];
    snprintf(shape, sizeof shape, "numalgo=%d numproto=3 regbuff=%d nch_in=0", num_algo,
             abi >= 4 ? 0 : -1);
    ck_assert_msg(COUNT(log_text, "event=coll", shape) == buckets * NRANKS, "%s v%d: want %s\n%s",
                  version, abi, shape, log_text);
    expected_cells(code, 4, 4096, num_algo, cells);
    snprintf(want, sizeof want, "nbytes=4096 npipe=1 %s ctx=1 cells=%s", shape, cells);
    ck_assert_msg(COUNT(log_text, want) == NRANKS, "%s v%d: want %s\n%s", version, abi, want,
                  log_text);
    expected_cells(code, 2, 1048576, num_algo, cells);
    snprintf(want, sizeof want, "cells=%s", cells);
    ck_assert_msg(COUNT(log_text, "coll=2 ", want) == NRANKS, "%s v%d AllGather: want %s\n%s",
                  version, abi, want, log_text);
  } else {
    /* v1/v2: NCCL derives the support flags (NVLSTree on H100, no CollNet), out-params start UNDEF */
    ck_assert_int_eq(
        COUNT(log_text, "event=coll coll=4 ", "collnet=0 nvls=1 algo_in=-1 proto_in=-1 nch_in=0"),
        (buckets - 1) * NRANKS);
    ck_assert_int_eq(
        COUNT(log_text, "event=coll coll=2 ", "collnet=0 nvls=0 algo_in=-1 proto_in=-1 nch_in=0"),
        NRANKS);
  }
  /* what sim/ applied: Ring/Simple everywhere; 40 channels capped at the comm's 16 (2.22+), at
   * MAXCHANNELS before; small calls keep NCCL's 32 KiB-per-channel rule */
  ck_assert_msg(COUNT(trace_text, "algo=Ring proto=Simple") == 5 * NRANKS, "%s v%d trace:\n%s",
                version, abi, trace_text);
  const char *big = code >= 22200 ? "bytes=4194304 algo=Ring proto=Simple nchannels=16 "
                                  : "bytes=4194304 algo=Ring proto=Simple nchannels=32 ";
  ck_assert_msg(COUNT(trace_text, big, "tuned=1") == 3 * NRANKS, "%s v%d: want %s\n%s", version,
                abi, big, trace_text);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4096 algo=Ring proto=Simple nchannels=1 "), NRANKS);
  /* the grouped pair: one bucket of two from 2.22, two buckets of one before */
  if (code >= 22200) ck_assert_int_eq(COUNT(trace_text, "bucket=3 bucket_ops=2"), 2 * NRANKS);
  else ck_assert_int_eq(COUNT(trace_text, "call=4 ", "bucket=4 bucket_ops=1"), NRANKS);
}

START_TEST(abi_matrix) {
  const char *version = versions[_i];
  for (int abi = 1; abi <= 7; abi++) check_matrix_cell(version, abi);
}
END_TEST

/* A plugin exporting v2..v6 is used through the newest symbol the version accepts. */
START_TEST(newest_symbol_first) {
  static const char *v[] = {"2.19", "2.21", "2.22", "2.24", "2.28", "2.30", "2.32.3", "2.32.6"};
  static const int want[] = {0, 2, 3, 4, 5, 6, 6, 7};
  for (int i = 0; i < 8; i++) {
    int rc = run_job(v[i], plugin_path(0), "", NULL);
    ck_assert_msg(rc == 0, "%s: job failed:\n%s", v[i], out_text);
    char abi_s[32];
    snprintf(abi_s, sizeof abi_s, "abi=%d event=init", want[i]);
    if (want[i] == 0) ck_assert_int_eq(COUNT(log_text, "event=init"), 0); /* 2.19 takes v1 only */
    else ck_assert_msg(COUNT(log_text, abi_s) == NRANKS, "%s: want %s\n%s", v[i], abi_s, log_text);
    ck_assert_int_eq(COUNT(trace_text, "tuned=1"), 0); /* an empty policy changes nothing */
  }
}
END_TEST

/* v6 on 2.30: getChunkSize after algorithm/protocol/channels are chosen; the chunk is clamped
 * and grain-aligned. v5 on 2.30 has no chunk say. */
START_TEST(v6_chunk) {
  int rc = run_job("2.30", plugin_path(6), "ring_simple,nch=8,chunk=1000000", NULL);
  ck_assert_msg(rc == 0, "job failed:\n%s", out_text);
  ck_assert_int_eq(
      COUNT(log_text, "event=chunk coll=4 nbytes=4194304 algo=1 proto=2 nch=8 chunk_in=2097152"),
      NRANKS);
  ck_assert_int_eq(
      COUNT(log_text, "event=chunk coll=4 nbytes=8388608 algo=1 proto=2 nch=8 chunk_in=2097152"),
      NRANKS);
  ck_assert_msg(
      COUNT(trace_text,
            "bytes=4194304 algo=Ring proto=Simple nchannels=8 nthreads=544 chunk=999936 tuned=1") ==
          3 * NRANKS,
      "%s", trace_text);
  rc = run_job("2.30", plugin_path(6), "ring_simple,chunk=100000000", NULL);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4194304 algo=Ring proto=Simple", "chunk=2097152 "),
                   3 * NRANKS); /* clamped */
  rc = run_job("2.30", plugin_path(5), "ring_simple,chunk=1000000", NULL);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(COUNT(log_text, "event=chunk"), 0);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4194304 algo=Ring proto=Simple", "chunk=2097152 "),
                   3 * NRANKS);
}
END_TEST

/* Env-disabled pairs reach the plugin as -1 cells, including the 2.24+ per-collective syntax. */
START_TEST(env_disabled_cells) {
  const char *env[] = {"NCCL_ALGO=^tree;allgather:ring", "NCCL_PROTO=allreduce:ll,simple", NULL};
  setenv("NCCL_ALGO", "^tree;allgather:ring", 1);
  setenv("NCCL_PROTO", "allreduce:ll,simple", 1);
  char cells[32], want[200];
  expected_cells(22809, 4, 4096, 7, cells);
  ck_assert(cells[0] == '-' && cells[1] == '-' && cells[2] == '-'); /* Tree off */
  ck_assert(cells[4] == '-'); /* Ring/LL128 off for AllReduce */
  snprintf(want, sizeof want,
           "nbytes=4096 npipe=1 numalgo=7 numproto=3 regbuff=0 nch_in=0 ctx=1 cells=%s", cells);
  int rc = run_job("2.28", plugin_path(5), "", env);
  ck_assert_msg(rc == 0, "job failed:\n%s", out_text);
  ck_assert_msg(COUNT(log_text, want) == NRANKS, "want %s\n%s", want, log_text);
  expected_cells(22809, 2, 1048576, 7, cells);
  ck_assert(strncmp(cells + 3, "+++", 3) == 0 &&
            strchr(cells + 6, '+') == NULL); /* AllGather: Ring only */
  snprintf(want, sizeof want,
           "coll=2 nbytes=1048576 npipe=1 numalgo=7 numproto=3 regbuff=0 nch_in=0 ctx=1 cells=%s",
           cells);
  ck_assert_msg(COUNT(log_text, want) == NRANKS, "want %s\n%s", want, log_text);
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
}
END_TEST

/* The inconsistent tuner: Ring/LL on rank 1, Ring/Simple elsewhere. Every rank's first call fails
 * with ncclInvalidUsage and a text naming the communicator, the call and each rank's choice. */
START_TEST(mismatch_fails_within_one_call) {
  static const char *v[] = {"2.28", "2.21"};
  static const int abi[] = {5, 2};
  for (int i = 0; i < 2; i++) {
    int rc = run_job(v[i], plugin_path(abi[i]), "ring_simple,mismatch", NULL);
    ck_assert_msg(rc == 3, "%s: want exit 3, got %d:\n%s", v[i], rc, out_text);
    ck_assert_msg(
        COUNT(out_text, "call 0 failed: 5 ", "ranks disagree on the configuration of communicator",
              "call #0", "rank 0: AllReduce count=1048576 float sum root=0 config=(Ring/Simple",
              "rank 1: AllReduce count=1048576 float sum root=0 config=(Ring/LL,") == NRANKS,
        "%s:\n%s", v[i], out_text);
    ck_assert_int_eq(COUNT(out_text, " ok "), 0);
  }
}
END_TEST

/* An error from getCollInfo fails the call (NCCL's NCCLCHECK), it is not a fallback. */
START_TEST(tuner_error_fails_the_call) {
  int rc = run_job("2.28", plugin_path(5), "fail", NULL);
  ck_assert_int_eq(rc, 3);
  ck_assert_msg(COUNT(out_text, "call 0 failed:", "getCollInfo returned 3") == NRANKS, "%s",
                out_text);
}
END_TEST

/* Every cell -1: 2.22/2.23 fall back to Ring/Simple, 2.24+ fail the call. */
START_TEST(no_cell_left) {
  int rc = run_job("2.22", plugin_path(3), "none_left", NULL);
  ck_assert_msg(rc == 0, "%s", out_text);
  ck_assert_int_eq(COUNT(trace_text, "algo=Ring proto=Simple"), 5 * NRANKS);
  rc = run_job("2.24", plugin_path(4), "none_left", NULL);
  ck_assert_int_eq(rc, 3);
  ck_assert_msg(COUNT(out_text, "call 0 failed: 3 ", "no algorithm/protocol is left") == NRANKS,
                "%s", out_text);
}
END_TEST

/* A pair the topology cannot run, forced by a native v2 answer (2.21) or by overwriting a -1
 * cell (2.24): NCCL does not re-check and would crash or hang; sim/ fails the call and says why. */
START_TEST(forced_unsupported_pair) {
  static const char *v[] = {"2.21", "2.24"};
  static const int abi[] = {2, 4};
  for (int i = 0; i < 2; i++) {
    int rc = run_job(v[i], plugin_path(abi[i]), "force_bad", NULL);
    ck_assert_int_eq(rc, 3);
    ck_assert_msg(COUNT(out_text, "call 0 failed: 5 ", "the tuner plugin chose NVLS/LL",
                        "cannot run") == NRANKS,
                  "%s:\n%s", v[i], out_text);
  }
}
END_TEST

/* v5+: commId is the communicator's hash, the same on every rank; the constants a plugin edits
 * at init change NCCL's choice (here: Ring/LL made 1 ms slower is no longer picked). */
START_TEST(v5_commid_and_constants) {
  int rc = run_job("2.28", plugin_path(5), "", NULL);
  ck_assert_int_eq(rc, 0);
  const char *p = strstr(log_text, "commid=");
  ck_assert_ptr_nonnull(p);
  char id[40];
  ck_assert_int_eq(sscanf(p, "commid=%39s", id), 1);
  char want[64];
  snprintf(want, sizeof want, "commid=%s ", id);
  ck_assert_int_eq(COUNT(log_text, want), NRANKS);
  ck_assert_str_ne(id, "0");
  ck_assert_int_eq(
      COUNT(log_text, "event=domain nvldomains=2 minranks=2 maxranks=2 ringllbase=6.60"), NRANKS);
  rc = run_job("2.28", plugin_path(5), "slow_ring_ll", NULL);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(COUNT(log_text, "ringllbase=1006.60"), NRANKS);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4096 algo=Ring proto=LL "), 0);
  rc = run_job("2.28", NULL, "", NULL);
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4096 algo=Ring proto=LL "),
                   NRANKS); /* NCCL's own pick */
}
END_TEST

/* v7 (2.32.6): the wider constants table reaches the plugin with a fifth compute capability's row
 * (sim/ fills it with Blackwell's), and an edit of the rows v5 had still changes NCCL's choice. */
START_TEST(v7_constants) {
  int rc = run_job("2.32.6", plugin_path(7), "slow_ring_ll", NULL);
  ck_assert_msg(rc == 0, "job failed:\n%s", out_text);
  ck_assert_int_eq(COUNT(log_text, "abi=7 event=init", "constants=1"), NRANKS);
  ck_assert_int_eq(COUNT(log_text, "ringllbase=1006.60"), NRANKS);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4096 algo=Ring proto=LL "), 0);
  const char *p = strstr(log_text, "llmax4=");
  ck_assert_ptr_nonnull(p);
  double llmax4 = 0;
  ck_assert_int_eq(sscanf(p, "llmax4=%lf", &llmax4), 1);
  ck_assert_msg(llmax4 > 0, "the fifth row is empty: %s", p);
  rc = run_job("2.32.6", plugin_path(6), "slow_ring_ll", NULL); /* v6 under 2.32.6: v6's table */
  ck_assert_int_eq(rc, 0);
  ck_assert_int_eq(COUNT(log_text, "abi=6 event=init", "constants=1"), NRANKS);
  ck_assert_int_eq(COUNT(trace_text, "bytes=4096 algo=Ring proto=LL "), 0);
}
END_TEST

/* Which library each version opens (NCCL's src/plugin/tuner.cc, docs/sim.md). `want` is the ABI whose init the
 * plugin logs, 0 for none. */
static void check_load(const char *version, const char *plugin_env, const char *subdir,
                       const char *preload, const char *net, int want) {
  char lib[500], pre[500], netenv[100];
  snprintf(lib, sizeof lib, "LD_LIBRARY_PATH=%s/%s", SIMTUNER_DIR, subdir ? subdir : "none");
  snprintf(pre, sizeof pre, "LD_PRELOAD=%s", preload ? plugin_path(5) : "");
  snprintf(netenv, sizeof netenv, "NCCL_NET_PLUGIN=%s", net ? net : "");
  const char *env[] = {lib, pre, netenv, NULL};
  int rc = run_job(version, plugin_env, "", env);
  ck_assert_msg(rc == 0, "%s %s: job failed:\n%s", version, plugin_env ? plugin_env : "(unset)",
                out_text);
  char abi_s[32];
  snprintf(abi_s, sizeof abi_s, "abi=%d event=init", want);
  int n = want ? COUNT(log_text, abi_s) : COUNT(log_text, "event=init");
  ck_assert_msg(n == (want ? NRANKS : 0),
                "%s NCCL_TUNER_PLUGIN=%s dir=%s preload=%d net=%s: want abi %d\n%s", version,
                plugin_env ? plugin_env : "(unset)", subdir ? subdir : "-", preload != NULL,
                net ? net : "-", want, log_text);
}

START_TEST(load_rules) {
  /* libnccl-tuner-X.so expansion: 2.21+, not 2.19/2.20 */
  check_load("2.28", "simv5", "expand", NULL, NULL, 5);
  check_load("2.21", "simv5", "expand", NULL, NULL, 0); /* found, but 2.21 takes only v2 */
  check_load("2.19", "simv5", "expand", NULL, NULL, 0);
  /* 2.27+: no expansion of a name that is already lib*.so */
  check_load("2.24", "libnccl-tuner-simv5.so", "expand", NULL, NULL,
             0); /* opens, exports only v5 */
  check_load("2.28", "libnccl-tuner-simv5.so", "expand", NULL, NULL, 5);
  /* NCCL_TUNER_PLUGIN unset: libnccl-tuner.so (2.21+) */
  check_load("2.24", NULL, "default", NULL, NULL, 4);
  check_load("2.19", NULL, "default", NULL, NULL, 0);
  /* none disables the tuner from 2.28; before, it is just a name that does not open */
  check_load("2.28", "none", "default", NULL, NULL, 0);
  check_load("2.24", "none", "default", NULL, NULL, 0);
  /* the net plugin's library: 2.21-2.25 derive its names; 2.26+ reuse the opened one (none here) */
  check_load("2.24", NULL, "net", NULL, "simnet", 3);
  check_load("2.21", NULL, "netdefault", NULL, NULL, 2);
  check_load("2.28", NULL, "net", NULL, "simnet", 0);
  /* STATIC_PLUGIN (any case-insensitive prefix): the program's own scope, incl. LD_PRELOAD, 2.22+ */
  check_load("2.28", "STATIC_PLUGIN", NULL, "preload", NULL, 5);
  check_load("2.28", "static", NULL, "preload", NULL, 5);
  check_load("2.21", "STATIC_PLUGIN", NULL, "preload", NULL, 0);
}
END_TEST

static int name_to(const char *name, int algo) {
  for (int i = 0; i < (algo ? SIM_NUM_ALGOS : SIM_NUM_PROTOS); i++)
    if (strcmp(name, algo ? sim_model_algo_name(i) : sim_model_proto_name(i)) == 0) return i;
  return -1;
}

/* Checks every trace line's time against the truth model for the configuration it shows; with
 * noise, against the model within the noise, equal across the ranks of a call. Returns the sum
 * of the times. */
static double check_trace_times(int code, double phi, int noisy) {
  sim_topo_t t;
  char err[200];
  ck_assert_int_eq(sim_topo_parse("h100", 0, &t, err, sizeof err), 0);
  t.version = code;
  sim_topo_set_layout(&t, NRANKS, NNODES, NRANKS / NNODES);
  static sim_model_t m;
  sim_model_init(&m, &t, 0, 0);
  int lines = 0;
  double sum = 0, first[8] = {0};
  for (const char *line = trace_text; line && *line;
       line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
    char coll[32], algo[32], proto[32];
    unsigned long long call, chunk;
    size_t bytes;
    int rank, nranks, nch, nt, tuned;
    double us;
    int n =
        sscanf(line,
               "comm=%*x rank=%d nranks=%d call=%llu coll=%31s bytes=%zu algo=%31s proto=%31s "
               "nchannels=%d nthreads=%d chunk=%llu tuned=%d time_us=%lf",
               &rank, &nranks, &call, coll, &bytes, algo, proto, &nch, &nt, &chunk, &tuned, &us);
    ck_assert_msg(n == 12, "bad trace line: %.200s", line);
    int c = -1;
    for (int i = 0; i < AH_NUM_FUNCTIONS; i++)
      if (strcmp(coll, sim_model_coll_name(i)) == 0) c = i;
    sim_config_t cfg = {name_to(algo, 1), name_to(proto, 0), nch, nt, (size_t)chunk};
    double want = sim_model_time_us(&m, c, bytes, &cfg, phi);
    ck_assert_msg(want > 0, "unrunnable config in trace: %.200s", line);
    if (!noisy)
      ck_assert_msg(fabs(us - want) <= 1e-3 + 1e-6 * want, "trace %.3f != model %.3f: %.200s", us,
                    want, line);
    else
      ck_assert_msg(us > want * 0.7 && us < want * 1.3 * 1.5, "trace %.3f far from model %.3f", us,
                    want);
    if (call < 8) {
      if (first[call] == 0) first[call] = us;
      ck_assert_msg(first[call] == us, "ranks disagree on the duration of call %llu: %.6f vs %.6f",
                    call, first[call], us);
    }
    sum += us;
    lines++;
  }
  ck_assert_int_eq(lines, 5 * NRANKS);
  return sum / NRANKS;
}

/* The trace's time is the truth model's time of the configuration applied; interference set on
 * the communicator slows it; noise is seeded, the same on every rank, and reproducible. */
START_TEST(trace_times_are_the_model) {
  ck_assert_int_eq(run_job("2.28", NULL, "", NULL), 0);
  double t0 = check_trace_times(22809, 0, 0);
  const char *phi_env[] = {"SIMTUNER_JOB_PHI=0.8", NULL};
  ck_assert_int_eq(run_job("2.28", NULL, "", phi_env), 0);
  double t8 = check_trace_times(22809, 0.8, 0);
  ck_assert_msg(t8 > t0 * 1.05, "interference: %.3f vs %.3f us", t8, t0);
  const char *noise7[] = {"NCCLSIM_NOISE=0.05,0.01", "NCCLSIM_SEED=7", NULL};
  ck_assert_int_eq(run_job("2.28", NULL, "", noise7), 0);
  double n7 = check_trace_times(22809, 0, 1);
  ck_assert(n7 != t0);
  ck_assert_int_eq(run_job("2.28", NULL, "", noise7), 0);
  ck_assert_double_eq(check_trace_times(22809, 0, 1), n7);
  const char *noise8[] = {"NCCLSIM_NOISE=0.05,0.01", "NCCLSIM_SEED=8", NULL};
  ck_assert_int_eq(run_job("2.28", NULL, "", noise8), 0);
  ck_assert(check_trace_times(22809, 0, 1) != n7);
}
END_TEST

/* A one-rank communicator asks the tuner before 2.28 (only Ring/Simple open, at cost 0), never
 * from 2.28 on. */
START_TEST(one_rank_communicator) {
  job_ranks = job_nodes = 1;
  int rc = run_job("2.24", plugin_path(4), "", NULL);
  ck_assert_msg(rc == 0, "%s", out_text);
  ck_assert_int_eq(COUNT(log_text, "abi=4 event=init nranks=1 nnodes=1"), 1);
  ck_assert_int_eq(COUNT(log_text, "abi=4 event=coll", "cells=-----+---------------"), 4);
  rc = run_job("2.28", plugin_path(5), "", NULL);
  ck_assert_msg(rc == 0, "%s", out_text);
  ck_assert_int_eq(COUNT(log_text, "abi=5 event=init nranks=1 nnodes=1"), 1);
  ck_assert_int_eq(COUNT(log_text, "event=coll"), 0);
  ck_assert_int_eq(COUNT(trace_text, "algo=Ring proto=Simple"), 5);
  job_ranks = NRANKS;
  job_nodes = NNODES;
}
END_TEST

int main(void) {
  if (!mkdtemp(dir)) {
    perror("mkdtemp");
    return EXIT_FAILURE;
  }
  Suite *s = suite_create("simtuner");
  TCase *tc = tcase_create("load");
  tcase_set_timeout(tc, 120);
  tcase_add_loop_test(tc, abi_matrix, 0, (int)(sizeof versions / sizeof versions[0]));
  tcase_add_test(tc, newest_symbol_first);
  tcase_add_test(tc, v7_constants);
  tcase_add_test(tc, v6_chunk);
  tcase_add_test(tc, env_disabled_cells);
  tcase_add_test(tc, mismatch_fails_within_one_call);
  tcase_add_test(tc, tuner_error_fails_the_call);
  tcase_add_test(tc, no_cell_left);
  tcase_add_test(tc, v5_commid_and_constants);
  tcase_add_test(tc, load_rules);
  tcase_add_test(tc, trace_times_are_the_model);
  tcase_add_test(tc, one_rank_communicator);
  tcase_add_test(tc, forced_unsupported_pair);
  suite_add_tcase(s, tc);
  int status = ah_check_run(s);
  free(out_text);
  free(log_text);
  free(trace_text);
  char cmd[400];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
  return status;
}
