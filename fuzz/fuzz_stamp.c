/* Fuzz target: the id stamp (ah_coord_stamp_read), over a whole 128-byte ncclUniqueId; a stamp
 * that reads must write back to the same bytes. */
#include <stdio.h>

#include "ah_coord.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  unsigned char id[128] = {0}, again[128];
  memcpy(id, data, size < sizeof id ? size : sizeof id);
  ah_coord_stamp_t st;
  if (ah_coord_stamp_read(id, &st) == 0) {
    memcpy(again, id, sizeof id);
    ah_coord_stamp_write(&st, again);
    ah_coord_stamp_t st2;
    if (ah_coord_stamp_read(again, &st2) != 0 || memcmp(&st, &st2, sizeof st) != 0) {
      fprintf(stderr, "fuzz_stamp: a stamp that read does not read back the same\n");
      abort();
    }
  }
  /* and any stamp written from the input's fields reads back as written */
  if (size >= 35) {
    ah_coord_stamp_t w;
    memset(&w, 0, sizeof w);
    memcpy(w.secret, data, 16);
    w.family = data[16] & 1 ? 10 : 2; /* AF_INET6 : AF_INET */
    w.port = (uint16_t)(data[17] << 8 | data[18]);
    if (!w.port) w.port = 1; /* port 0 is refused by design: no hub listens there */
    memcpy(w.addr, data + 19, 16);
    unsigned char id2[128];
    memset(id2, 0, sizeof id2);
    ah_coord_stamp_write(&w, id2);
    ah_coord_stamp_t r;
    if (ah_coord_stamp_read(id2, &r) != 0 || memcmp(w.secret, r.secret, 16) != 0 ||
        r.port != w.port) {
      fprintf(stderr, "fuzz_stamp: a written stamp does not read back\n");
      abort();
    }
  }
  return 0;
}
