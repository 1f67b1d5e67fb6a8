/* rdma_qp_topo.c: where AUTOHA_QP_TOPO points, expanded once per process for both of its readers —
 * the source-port planner (AUTOHA_QP_SPORT=plan, rdma_verbs.c) and the failover layer's backup
 * ports (AUTOHA_HA=path, rdma_ha_shadow.c) — so that the two read the same file. Queue pairs are created
 * before the rank is known to the shim, so %r expands to "all" (every rank reads one file). */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "ah_env.h"
#include "ah_log.h"
#include "ah_report.h"
#include "rdma_qp_topo.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static char path[AH_ENV_PATH_MAX * 2];

static void expand(void) {
  const char *tmpl = ah_env_settings()->qp_topo;
  char host[256] = "", err[256];
  if (!tmpl[0]) return;
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  if (ah_template_expand(tmpl, host, (int)getpid(), -1, NULL, path, sizeof path, err, sizeof err) !=
      0) {
    ah_log(AH_LOG_ERROR, "AUTOHA_QP_TOPO '%s': %s; no topology is read", tmpl, err);
    path[0] = '\0';
  }
}

const char *ah_shim_qp_topo_path(void) {
  pthread_once(&once, expand);
  return path;
}
