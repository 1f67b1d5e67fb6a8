/* ah_ha_beat.c: a standby's heartbeat rounds and the N-of-M rule (ah_ha_beat.h). A round is one
 * bit of a 32-bit word, so recording and counting take a shift and a popcount. */
#include "ah_ha_beat.h"

static int misses(const ah_ha_beat_t *b, int m) {
  if (m < 1) m = 1;
  uint32_t mask = m >= AH_HA_BEAT_MAX ? 0xffffffffu : (1u << m) - 1;
  return __builtin_popcount(b->bits & mask);
}

int ah_ha_beat_round(ah_ha_beat_t *b, int missed, int m) {
  b->bits = b->bits << 1 | (missed ? 1u : 0u);
  return misses(b, m);
}

int ah_ha_beat_dead(const ah_ha_beat_t *b, int n, int m) { return n >= 1 && misses(b, m) >= n; }
