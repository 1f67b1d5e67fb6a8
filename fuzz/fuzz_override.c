/* Fuzz target: the AUTOHA_OVERRIDE grammar (ah_override_parse), then a match against every
 * collective and a spread of sizes, which walks every rule that parsed. */
#include "ah_override.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *s = fuzz_cstr(data, size);
  if (!s) return 0;
  ah_override_t ov;
  char err[1024];
  ah_override_parse(s, &ov, err, sizeof err);
  ah_config_t c;
  for (int coll = 0; coll < 8; coll++)
    for (int sh = 0; sh < 64; sh += 7) ah_override_match(&ov, coll, (uint64_t)1 << sh, &c);
  free(s);
  return 0;
}
