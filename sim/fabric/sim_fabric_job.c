/* sim_fabric_job.c: the fabric every process of a job builds alike — from NCCLSIM_TOPO,
 * NCCLSIM_FABRIC and the job's node count — with the job's shared link state (when the job has a
 * shared-memory prefix of its own, NCCLSIM_SHM_PREFIX, as every ncclsim-run job has) and the
 * fault schedule of NCCLSIM_FABRIC_FAULTS. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fabric.h"

sim_fabric_t *sim_fabric_job(int nnodes, char *err, size_t errlen) {
  sim_fabric_t *f = sim_fabric_create(getenv("NCCLSIM_TOPO"), getenv("NCCLSIM_FABRIC"), nnodes, err, errlen);
  if (!f) return NULL;
  const char *prefix = getenv("NCCLSIM_SHM_PREFIX");
  if (prefix && *prefix && !strchr(prefix, '/') && strlen(prefix) <= 64) {
    char name[128];
    snprintf(name, sizeof name, "/%sfabric", prefix);
    if (sim_fabric_attach(f, name, err, errlen) != 0) {
      sim_fabric_free(f);
      return NULL;
    }
  }
  const char *faults = getenv("NCCLSIM_FABRIC_FAULTS");
  if (faults && *faults && sim_fabric_schedule(f, faults, err, errlen) != 0) {
    sim_fabric_free(f);
    return NULL;
  }
  return f;
}
