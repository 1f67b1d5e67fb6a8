/* ibbw_load_dl.c: ncclsim-ibbw-dl's verbs, loaded the way libnccl loads them (sim_verbs_table_load:
 * dlopen of libibverbs.so.1, every required verb by dlvsym(..., "IBVERBS_1.1")). */
#include <stdio.h>

#include "ibbw_verbs.h"

const char *ibbw_mode = "dlopen";

int ibbw_verbs_load(sim_verbs_table_t *v) {
  char err[256];
  if (sim_verbs_table_load("libibverbs.so.1", v, err, sizeof err) == 0) return 0;
  fprintf(stderr, "ncclsim-ibbw-dl: %s\n", err);
  return -1;
}
