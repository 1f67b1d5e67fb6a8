/* ah_rand.h: the tests' reproducible jitter — xorshift64 from a fixed seed, a state per test
 * program (a static of each file that includes it). */
#ifndef AH_RAND_H
#define AH_RAND_H

#include <stdint.h>

static uint64_t ah_rand_state = 88172645463325252ull;

/* Uniform in [0, 1). */
static inline double uniform(void) {
  ah_rand_state ^= ah_rand_state << 13;
  ah_rand_state ^= ah_rand_state >> 7;
  ah_rand_state ^= ah_rand_state << 17;
  return (double)(ah_rand_state >> 11) / 9007199254740992.0;
}

#endif
