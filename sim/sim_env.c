/* Process-wide settings of the simulator, read once from the environment. A malformed value is
 * reported once and the default kept: the simulator must never be the reason a job fails to start. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_internal.h"
#include "sim_model_heldout.h"

static pthread_once_t env_once = PTHREAD_ONCE_INIT;
static int env_version = 22809;
static double env_timeout = 300.0;
static int env_node = 0;
static int env_host_clock = 0;
static sim_truth_sel_t env_truth; /* NCCLSIM_TRUTH: dev unless heldout:SEED */

/* Parses "2.28.9", "2.28" or a version code such as 22809. Returns 0 on success. */
static int parse_version(const char *s, int *code_p) {
  unsigned major, minor, patch = 0;
  char tail;
  if (sscanf(s, "%u.%u.%u%c", &major, &minor, &patch, &tail) == 3 ||
      sscanf(s, "%u.%u%c", &major, &minor, &tail) == 2) {
    if (major != 2 || minor > 99 || patch > 99) return -1;
    *code_p = (int)(major * 10000 + minor * 100 + patch);
    return 0;
  }
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || *end || v < 20000 || v > 29999) return -1;
  *code_p = (int)v;
  return 0;
}

static void env_init(void) {
  const char *s = getenv("NCCLSIM_VERSION");
  if (s && *s && parse_version(s, &env_version) != 0) {
    sim_log_warn(
        "invalid value for NCCLSIM_VERSION: '%s' (expected 2.X.Y or a code like 22809); "
        "emulating 2.28.9",
        s);
    env_version = 22809;
  }
  s = getenv("NCCLSIM_TIMEOUT_S");
  if (s && *s) {
    char *end;
    double v = strtod(s, &end);
    if (*end || !(v > 0))
      sim_log_warn("invalid value for NCCLSIM_TIMEOUT_S: '%s' (expected seconds > 0)", s);
    else env_timeout = v;
  }
  s = getenv("NCCLSIM_NODE");
  if (s && *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 0 || v > 1000000)
      sim_log_warn("invalid value for NCCLSIM_NODE: '%s' (expected an integer >= 0)", s);
    else env_node = (int)v;
  }
  s = getenv("NCCLSIM_HOST_CLOCK");
  if (s && *s) {
    if (strcmp(s, "1") == 0) env_host_clock = 1;
    else if (strcmp(s, "0") != 0)
      sim_log_warn("invalid value for NCCLSIM_HOST_CLOCK: '%s' (expected 0 or 1); keeping 0", s);
  }
  char err[200];
  if (sim_truth_parse(getenv("NCCLSIM_TRUTH"), &env_truth, err, sizeof err) != 0)
    sim_log_warn("%s; using dev", err); /* env_truth stays dev */
}

/* The version is read on every collective: after the first call it costs one acquire load, not a
 * pthread_once, so sim/'s own per-call cost stays close to what NCCL's would be. */
static _Atomic int env_version_ready;

int sim_nccl_version(void) {
  if (!atomic_load_explicit(&env_version_ready, memory_order_acquire)) {
    pthread_once(&env_once, env_init);
    atomic_store_explicit(&env_version_ready, 1, memory_order_release);
  }
  return env_version;
}

double sim_timeout_s(void) {
  pthread_once(&env_once, env_init);
  return env_timeout;
}

int sim_node_id(void) {
  pthread_once(&env_once, env_init);
  return env_node;
}

int sim_env_int(const char *name, int dflt, int lo, int hi) {
  const char *s = getenv(name);
  if (!s || !*s) return dflt;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || *end || v < lo || v > hi) {
    sim_log_warn("invalid value for %s: '%s' (expected %d..%d); using %d", name, s, lo, hi, dflt);
    return dflt;
  }
  return (int)v;
}

int sim_host_clock(void) {
  pthread_once(&env_once, env_init);
  return env_host_clock;
}

int sim_truth(uint64_t *seed_p) {
  pthread_once(&env_once, env_init);
  *seed_p = env_truth.seed;
  return env_truth.heldout;
}
