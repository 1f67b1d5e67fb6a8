/* What this job runs on, for the report's topology and the check a profile must pass: the GPU
 * model (from the CUDA driver the shim already opened for timing) and this host's RDMA NICs (from
 * the libibverbs NCCL uses, else sysfs), with the shape of the job's first communicator and the loaded
 * NCCL's version; and the report's record of the run (variables, CUDA versions, hosts). A fact
 * that cannot be read is "unknown" (GPU, NICs) or 0 (versions), never a guess. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <dirent.h>

#include "rdma.h"
#include "shim_internal.h"
#include "shim_real.h"

/* The model of the current context's GPU, or "" when the driver cannot tell. */
static void gpu_model(char *out, size_t len) {
  CUdevice dev;
  out[0] = 0;
  if (!ah_shim_cuda_init() || !ah_cuda.CtxGetDevice || !ah_cuda.DeviceGetName) return;
  if (ah_cuda.CtxGetDevice(&dev) != CUDA_SUCCESS ||
      ah_cuda.DeviceGetName(out, (int)len, dev) != CUDA_SUCCESS)
    out[0] = 0;
  out[len - 1] = 0;
}

/* The RDMA NICs NCCL may use and the rate of the first one's first active port in Gb/s: asked of
 * NCCL's libibverbs (rdma.h), else the devices under /sys/class/infiniband and the rate of the
 * first one's port 1 (the file reads "400 Gb/sec (4X NDR)"); 0 and 0 when neither knows. */
static void rdma_nics(int *n_p, int *gbps_p) {
  *n_p = *gbps_p = 0;
  if ((*n_p = ah_shim_rdma_nics(gbps_p)) > 0) return;
  *gbps_p = 0;
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

/* cudaRuntimeGetVersion of a CUDA runtime the process already loaded (the application's; the shim
 * never loads one itself), 0 when none is loaded or it fails. */
static int cuda_runtime_version(void) {
  int (*get)(int *) = (int (*)(int *))dlsym(RTLD_DEFAULT, "cudaRuntimeGetVersion");
  int v = 0;
  if (!get || get(&v) != 0) return 0;
  return v > 0 ? v : 0;
}

/* The NVIDIA kernel module's version ("550.54.15"), "" without one. */
static void kernel_driver(char *out, size_t len) {
  out[0] = 0;
  FILE *f = fopen("/sys/module/nvidia/version", "r");
  if (!f) return;
  if (!fgets(out, (int)len, f)) out[0] = 0;
  fclose(f);
  out[strcspn(out, "\n")] = 0;
}

extern char **environ;

void ah_shim_run_facts(ah_report_run_t *run_p) {
  ah_report_run_vars(run_p, environ);
  gpu_model(run_p->gpu, sizeof run_p->gpu);
  int v = 0;
  if (ah_shim_cuda_init() && ah_cuda.DriverGetVersion &&
      ah_cuda.DriverGetVersion(&v) == CUDA_SUCCESS && v > 0)
    run_p->cuda_driver = v;
  run_p->cuda_runtime = cuda_runtime_version();
  kernel_driver(run_p->gpu_driver, sizeof run_p->gpu_driver);
  run_p->nnodes = 1;
  if (gethostname(run_p->nodes[0], sizeof run_p->nodes[0] - 1) != 0)
    snprintf(run_p->nodes[0], sizeof run_p->nodes[0], "?");
  /* The AUTOHA_OVERRIDE rules that did not parse (logged at init), one line each, as the report's
   * reader wants them beside the variable itself. */
  const ah_settings_t *s = ah_env_settings();
  run_p->nrefused = 0;
  if (s->override_text[0]) {
    static ah_override_t ov; /* callers hold the report's write lock */
    char err[4096];
    if (ah_override_parse(s->override_text, &ov, err, sizeof err) > 0)
      for (char *line = err, *next; line && *line && run_p->nrefused < AH_REPORT_REFUSED_MAX;
           line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = 0;
        ah_report_text_copy(run_p->refused[run_p->nrefused++], AH_REPORT_TEXT_MAX, line);
      }
  }
  run_p->present = 1;
}
