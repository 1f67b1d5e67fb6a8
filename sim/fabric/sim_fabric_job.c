/* sim_fabric_job.c: the fabric every process of a job builds alike — from NCCLSIM_TOPO,
 * NCCLSIM_FABRIC and the job's node count — with the job's shared link state and the fault
 * schedule of NCCLSIM_FABRIC_FAULTS. The state is named per job by ncclsim-run's
 * NCCLSIM_SHM_PREFIX (removed at the job's end); outside ncclsim-run it is one per user, so a
 * fault one job left in it, and its epoch, outlive the job (docs/sim-fabric.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim_fabric.h"

char *sim_shm_job_prefix(char *buf, size_t len) {
  const char *p = getenv("NCCLSIM_SHM_PREFIX");
  if (p && *p && !strchr(p, '/') && strlen(p) < 64) snprintf(buf, len, "%s", p);
  else snprintf(buf, len, "ncclsim-%u-", (unsigned)getuid());
  return buf;
}

sim_fabric_t *sim_fabric_job(int node, char *err, size_t errlen) {
  const char *ns = getenv("NCCLSIM_NODES");
  char *end = NULL;
  long nodes = ns && *ns ? strtol(ns, &end, 10) : 0;
  if ((end && *end) || nodes < 0 || nodes > 65535) {
    snprintf(err, errlen, "invalid value for NCCLSIM_NODES: '%s' (expected 1..65535)", ns);
    return NULL;
  }
  sim_fabric_t *f =
      sim_fabric_create(getenv("NCCLSIM_TOPO"), getenv("NCCLSIM_FABRIC"), (int)nodes, err, errlen);
  if (!f) return NULL;
  if (node >= sim_fabric_nodes(f)) {
    snprintf(err, errlen,
             "NCCLSIM_NODE=%d but the fabric has %d node(s): set NCCLSIM_NODES (ncclsim-run "
             "--nodes does) or nodes= in NCCLSIM_TOPO",
             node, sim_fabric_nodes(f));
    sim_fabric_free(f);
    return NULL;
  }
  /* NCCLSIM_FABRIC_SHM, else <prefix>fabric: the name the verbs provider and libncclsim agree on */
  char name[160], prefix[80];
  const char *named = getenv("NCCLSIM_FABRIC_SHM"), *job = getenv("NCCLSIM_SHM_PREFIX");
  if (named && *named && !strchr(named, '/')) snprintf(name, sizeof name, "%s", named);
  else snprintf(name, sizeof name, "%sfabric", sim_shm_job_prefix(prefix, sizeof prefix));
  int per_user = !(named && *named) && !(job && *job);
  if (sim_fabric_attach(f, name, err, errlen) != 0 && !per_user) {
    sim_fabric_free(f);
    return NULL;
  }
  /* the per-user object may be an earlier job's, of another size: this process keeps its state
   * private then (faults set from other processes are not seen; ncclsim-run jobs have their own) */
  const char *faults = getenv("NCCLSIM_FABRIC_FAULTS");
  if (faults && *faults && sim_fabric_schedule(f, faults, err, errlen) != 0) {
    sim_fabric_free(f);
    return NULL;
  }
  return f;
}
