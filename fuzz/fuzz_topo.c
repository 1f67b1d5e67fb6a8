/* Fuzz target: the QP topology file (AUTOHA_QP_TOPO): parse, derive the jobs' flows and, for a
 * small enough topology, plan them — the planner is where a parsed but odd topology (no NICs,
 * all links failed, one host) would misbehave. */
#include "ah_log.h"
#include "ah_path.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR);
  char *s = fuzz_cstr(data, size);
  if (!s) return 0;
  ah_path_topo_t *t = NULL;
  if (ah_path_topo_parse(s, "fuzz", &t) == 0) {
    ah_path_flow_t *f = NULL;
    int n = ah_path_topo_flows(t, &f);
    if (n > 0 && n <= 4096) {
      ah_path_route_t *r = calloc((size_t)n, sizeof *r);
      if (r) ah_path_plan(t, f, n, r);
      free(r);
    }
    for (int j = 0; j < t->njobs; j++) ah_path_job_class(t, j);
    free(f);
    ah_path_topo_free(t);
  }
  free(s);
  return 0;
}
