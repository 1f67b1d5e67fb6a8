/* Fuzz target: an etcd answer as the cluster client decodes it (ah_cluster_etcd_range_answer):
 * JSON text whose "kvs" hold base64 keys and values from the network. Every key that decodes must
 * be a NUL-terminated string within its bounds, and its value's length must be what was decoded. */
#include <stdio.h>

#include "ah_cluster_etcd.h"
#include "ah_log.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR); /* a finding is a crash or a leak, not a log line */
  char *text = fuzz_cstr(data, size);
  if (!text) return 0;
  ah_cluster_kv_t *kvs = NULL;
  char err[AH_CLUSTER_ERR_LEN];
  int n = ah_cluster_etcd_range_answer(text, &kvs, err, sizeof err);
  for (int i = 0; i < n; i++) {
    if (strlen(kvs[i].key) > AH_CLUSTER_VALUE_MAX || kvs[i].value_len > AH_CLUSTER_VALUE_MAX ||
        kvs[i].value[kvs[i].value_len] != 0)
      abort();
  }
  ah_cluster_kvs_free(kvs, n);
  free(text);
  return 0;
}
