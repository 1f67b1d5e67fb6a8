/* Fuzz target: sim/'s fault schedule (NCCLSIM_FAULT), the grammar the diagnosis tests feed it:
 * every parsed fault must hold values the grammar allows, and the count stays within its bound. */
#include <stdlib.h>

#include "fuzz.h"
#include "sim_fault_parse.h"

static void ignore(void *arg, const char *entry, const char *why) {
  (void)arg, (void)entry, (void)why;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s) return 0;
  sim_fault_t f[SIM_MAX_FAULTS];
  int n = sim_fault_parse(s, f, ignore, NULL);
  if (n < 0 || n > SIM_MAX_FAULTS) abort();
  for (int i = 0; i < n; i++)
    if (f[i].rank < 0 || (f[i].kind == SIM_FAULT_SLOW && !(f[i].pct > 0 && f[i].pct <= 10000)) ||
        (f[i].kind != SIM_FAULT_HANG && f[i].kind != SIM_FAULT_SLOW))
      abort();
  free(s);
  return 0;
}
