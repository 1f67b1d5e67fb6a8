/* Fuzz target: every AUTOHA_* value through the environment table. The first byte picks the row
 * (modulo the table's size), the rest is the value; the row's typed parser runs, then the value is
 * formatted back, as `autoha env` does. A second pass feeds the whole input as one NAME=value
 * environment to ah_env_parse (unknown names, nearest-name suggestions). */
#include <stdio.h>

#include "ah_env.h"
#include "ah_log.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  ah_log_set_level(AH_LOG_ERROR); /* a finding is a crash or a leak, not a log line */
  const ah_env_var_t *v = ah_env_var_get(data[0] % ah_env_var_count());
  char *value = fuzz_cstr(data + 1, size - 1);
  if (!v || !value) return free(value), 0;
  ah_settings_t s;
  ah_env_defaults(&s);
  char err[512], out[4096];
  ah_env_parse_one(v, value, &s, err, sizeof err);
  ah_env_value_format(v, &s, out, sizeof out);
  char *kv = malloc(size + 8);
  if (kv) {
    snprintf(kv, size + 8, "AUTOHA_%s", value);
    char *envp[] = {kv, NULL};
    ah_env_defaults(&s);
    ah_env_parse(envp, &s);
    free(kv);
  }
  free(value);
  return 0;
}
