/* What this job runs on, for the report's topology and the check a profile must pass: the GPU
 * model (from the CUDA driver the shim already opened for timing) and this host's RDMA NICs (from
 * sysfs, as rdma-core lists them), with the shape of the job's first communicator and the loaded
 * NCCL's version. A fact that cannot be read is "unknown" (GPU) or 0 (NICs), never a guess. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shim_internal.h"
#include "shim_real.h"

/* The model of the current context's GPU, or "" when the driver cannot tell. */
static void gpu_model(char *out, size_t len) {
  CUdevice dev;
  out[0] = 0;
  if (!ah_shim_cuda_init() || !ah_cuda.CtxGetDevice || !ah_cuda.DeviceGetName) return;
  if (ah_cuda.CtxGetDevice(&dev) != CUDA_SUCCESS || ah_cuda.DeviceGetName(out, (int)len, dev) != CUDA_SUCCESS)
    out[0] = 0;
  out[len - 1] = 0;
}

/* RDMA devices under /sys/class/infiniband and the rate of the first one's port 1 in Gb/s (the
 * file reads "400 Gb/sec (4X NDR)"). */
static void rdma_nics(int *n_p, int *gbps_p) {
  *n_p = *gbps_p = 0;
  DIR *d = opendir("/sys/class/infiniband");
  if (!d) return;
  char first[256] = "";
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (e->d_name[0] == '.') continue;
    if (!first[0] || strcmp(e->d_name, first) < 0) snprintf(first, sizeof first, "%s", e->d_name);
    (*n_p)++;
  }
  closedir(d);
  if (!first[0]) return;
  char path[400];
  snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/1/rate", first);
  FILE *f = fopen(path, "r");
  if (!f) return;
  double rate = 0;
  if (fscanf(f, "%lf", &rate) == 1 && rate > 0 && rate < 1e6) *gbps_p = (int)rate;
  fclose(f);
}

void ah_shim_topology(int nranks, int nnodes, char out[AH_REPORT_TOPO_MAX]) {
  ah_topology_t t;
  memset(&t, 0, sizeof t);
  gpu_model(t.gpu, sizeof t.gpu);
  rdma_nics(&t.nics, &t.nic_gbps);
  t.nodes = nnodes;
  t.ranks = nranks;
  t.nccl_version = ah_shim.nccl_version;
  ah_report_topology(&t, out);
}
