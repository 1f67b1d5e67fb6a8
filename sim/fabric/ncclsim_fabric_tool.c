/* ncclsim-fabric: what fabric a sim/ job with this environment runs on.
 *
 *   ncclsim-fabric topo [NODES]   the autoha planner's topology file (AUTOHA_QP_TOPO) describing it
 *   ncclsim-fabric links [NODES]  every link: its name, capacity and latency
 *
 * NODES defaults to NCCLSIM_NODES (what ncclsim-run --nodes sets), else 1. The fabric comes from
 * NCCLSIM_TOPO and NCCLSIM_FABRIC as in the job's processes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_fabric.h"

int main(int argc, char **argv) {
  if (argc < 2 || argc > 3 || (strcmp(argv[1], "topo") != 0 && strcmp(argv[1], "links") != 0)) {
    fprintf(
        stderr,
        "usage: ncclsim-fabric topo|links [NODES]\n"
        "  Prints the fabric NCCLSIM_TOPO and NCCLSIM_FABRIC describe for NODES nodes\n"
        "  (default NCCLSIM_NODES): as an autoha topology file (AUTOHA_QP_TOPO), or its links.\n");
    return 2;
  }
  const char *ns = argc == 3 ? argv[2] : getenv("NCCLSIM_NODES");
  char *end = NULL;
  long nodes = ns && *ns ? strtol(ns, &end, 10) : 1;
  if ((end && *end) || nodes < 1 || nodes > 65535) {
    fprintf(stderr, "ncclsim-fabric: invalid node count '%s'\n", ns);
    return 2;
  }
  char err[300];
  sim_fabric_t *f = sim_fabric_create(getenv("NCCLSIM_TOPO"), getenv("NCCLSIM_FABRIC"), (int)nodes,
                                      err, sizeof err);
  if (!f) {
    fprintf(stderr, "ncclsim-fabric: %s\n", err);
    return 1;
  }
  int rc = 0;
  if (strcmp(argv[1], "topo") == 0) {
    int len = sim_fabric_topo_text(f, NULL, NULL, 0);
    char *buf = len >= 0 ? malloc((size_t)len + 1) : NULL;
    if (len < 0 || !buf) {
      fprintf(stderr,
              "ncclsim-fabric: this fabric cannot be written as an autoha topology file (the "
              "planner's model needs bonded dual-port NICs: NCCLSIM_TOPO nic=COUNTxGBITSx2)\n");
      rc = 1;
    } else {
      sim_fabric_topo_text(f, NULL, buf, (size_t)len + 1);
      fputs(buf, stdout);
    }
    free(buf);
  } else {
    for (int l = 0; l < sim_fabric_link_count(f); l++) {
      sim_fabric_link_t info;
      char name[96];
      sim_fabric_link_info(f, l, &info);
      printf("%-28s %7.0f Gb/s %6.2f us\n", sim_fabric_link_name(f, l, name, sizeof name),
             info.gbps, info.latency_us);
    }
  }
  sim_fabric_free(f);
  return rc;
}
