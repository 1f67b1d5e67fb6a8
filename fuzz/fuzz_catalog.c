/* Fuzz target: the QP path catalog (AUTOHA_QP_SPORT=file:PATH): parse, then look up a few ports
 * by device and by address. */
#include "ah_log.h"
#include "ah_path.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR);
  char *s = fuzz_cstr(data, size);
  if (!s) return 0;
  ah_path_catalog_t *c = NULL;
  if (ah_path_catalog_parse(s, "fuzz", &c) == 0) {
    uint8_t sg[16] = {0}, dg[16] = {0};
    sg[10] = sg[11] = dg[10] = dg[11] = 0xff;
    sg[12] = 10, sg[15] = 1, dg[12] = 10, dg[15] = 2;
    for (unsigned k = 0; k < 4; k++) {
      ah_path_catalog_port(c, "mlx5_0", sg, dg, k);
      ah_path_catalog_port(c, "mlx5_1", NULL, dg, k);
    }
    ah_path_catalog_free(c);
  }
  free(s);
  return 0;
}
