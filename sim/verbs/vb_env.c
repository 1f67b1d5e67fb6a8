/* vb_env.c: the provider's settings, read once from the environment, its log line and its clock.
 * A bad value is reported once and the default kept, as everywhere in sim/. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "vb_internal.h"

static vb_settings_t settings;
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;

void vb_log(const char *fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  fprintf(stderr, "ncclsim-verbs[%d]: %s\n", (int)getpid(), line);
}

double vb_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double env_double(const char *name, double def, double lo, double hi) {
  const char *s = getenv(name);
  if (!s || !*s) return def;
  char *end;
  double v = strtod(s, &end);
  if (*end || !(v >= lo && v <= hi)) {
    vb_log("invalid value for %s: '%s' (expected a number in [%g, %g]); using %g", name, s, lo, hi,
           def);
    return def;
  }
  return v;
}

static void settings_read(void) {
  settings.node = (int)env_double("NCCLSIM_NODE", 0, 0, 65535);
  settings.timeout_scale = env_double("NCCLSIM_VERBS_TIMEOUT_SCALE", 1.0, 1e-9, 1e6);
  settings.ring_bytes = (size_t)env_double("NCCLSIM_VERBS_RING_KB", 256, 64, 65536) * 1024;
  settings.pace_gbps = env_double("NCCLSIM_VERBS_PACE_GBPS", 0, 0, 1e6);
  sim_shm_job_prefix(settings.prefix, sizeof settings.prefix);
  const char *pci = getenv("NCCLSIM_VERBS_PCI");
  snprintf(settings.pci, sizeof settings.pci, "%s", pci ? pci : "");
  const char *ports = getenv("NCCLSIM_VERBS_PORTS");
  snprintf(settings.ports, sizeof settings.ports, "%s", ports ? ports : "");
}

const vb_settings_t *vb_settings(void) {
  pthread_once(&settings_once, settings_read);
  return &settings;
}
