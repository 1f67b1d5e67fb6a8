/* The shim's one idempotent init, run from the constructor and again lazily from every wrapper
 * (another library's constructor may call NCCL before ours has run): read the AUTOHA_* settings,
 * then — once NCCL is loaded, which may be long after the constructor (PyTorch loads it with
 * `import torch`) — resolve the real NCCL, learn its version, and make NCCL load this very library
 * as its tuner. Until then every wrapper looks for NCCL again; after, the check is one load.
 *
 * Note that NCCL_TUNER_PLUGIN is pointed at the shim's own path: dlopen of an already-preloaded
 * object returns the same instance, so the tuner face shares all state with the wrappers. A tuner
 * the user named there is loaded by the shim and runs underneath it (shim_chain.c); with
 * NCCL_TUNER_PLUGIN=none NCCL loads no tuner and autoha observes from the API (shim_nccl.c). */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shim_chain.h"
#include "shim_decide.h"
#include "shim_internal.h"
#include "shim_real.h"
#include "ah_report.h"
#include "ah_version.h"

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_once_t attach_once = PTHREAD_ONCE_INIT;

static void at_exit(void) {
  if (!ah_shim.enabled) return;
  ah_timing_harvest();
  ah_shim_report_write("exit");
}

/* What needs no NCCL: the settings, the shim's own path, the report at exit. */
static void init_run(void) {
  const ah_settings_t *s = ah_env_settings();
  ah_log_set_level(s->log_level);
  if (!s->enable) {
    ah_log(AH_LOG_INFO, "AUTOHA_ENABLE=0: pure pass-through");
    return;
  }
  Dl_info info;
  if (dladdr((void *)&init_run, &info) && info.dli_fname)
    snprintf(ah_shim.self_path, sizeof ah_shim.self_path, "%s", info.dli_fname);
  ah_shim.enabled = 1;
  ah_shim_link_init(); /* before NCCL creates a queue pair */
  atexit(at_exit);
}

/* What the loaded NCCL decides, derived once when the table first holds it. */
static void attach_run(void) {
  if (!ah_shim.enabled) return;
  int v = 0;
  if (ah_real.GetVersion(&v) != ncclSuccess) v = 0;
  ah_shim.nccl_version = v;
  ah_shim.tuner_capable = v >= AH_NCCL_FIRST_TUNER;
  /* NCCL loads autoha as its tuner: NCCL_TUNER_PLUGIN names it, unless the user disabled tuners
   * (none) or asked for the preloaded symbols (STATIC_PLUGIN, which finds autoha's). A tuner the
   * user named runs underneath autoha (shim_chain.c). NCCL reads the variable when it creates a
   * communicator, which only a wrapper that has been through here can ask it to do. */
  const char *tp = getenv("NCCL_TUNER_PLUGIN");
  if (ah_shim.tuner_capable && ah_shim.self_path[0] &&
      (!tp || !*tp || ah_shim_chain_load(tp, ah_shim.self_path)))
    setenv("NCCL_TUNER_PLUGIN", ah_shim.self_path, 1);
  tp = getenv("NCCL_TUNER_PLUGIN");
  ah_shim.tuner_expected =
      ah_shim.tuner_capable && tp && ah_shim.self_path[0] &&
      (strcmp(tp, ah_shim.self_path) == 0 || ah_shim_chain_is_self(tp, ah_shim.self_path));
  char vtext[32]; /* 22809 -> "2.28.9", as the reports and `autoha report` write it */
  ah_report_version_text(v, 1, vtext, sizeof vtext);
  ah_log(AH_LOG_INFO, "autoha %s enabled: mode %s, NCCL %s%s", ah_version(),
         ah_env_mode_name(ah_env_settings()->mode), vtext[0] ? vtext : "unknown",
         ah_shim.tuner_capable ? "" : " (no tuner ABI: observing from the API)");
}

_Atomic int ah_shim_init_ready; /* settings read and NCCL resolved: nothing left to do */
_Atomic int ah_shim_wrap_on;    /* that, and enabled */

void ah_shim_init_slow(void) {
  int saved = errno;
  pthread_once(&init_once, init_run);
  if (ah_shim_real_init()) {
    pthread_once(&attach_once, attach_run);
    atomic_store_explicit(&ah_shim_init_ready, 1, memory_order_release);
    if (ah_shim.enabled) atomic_store_explicit(&ah_shim_wrap_on, 1, memory_order_release);
  }
  errno = saved;
}

__attribute__((constructor)) static void shim_constructor(void) { ah_shim_init(); }
