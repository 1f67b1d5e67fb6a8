/* ah_ha_beat.h: the health rule of a standby shadow's heartbeats (docs/ha.md, "Standbys,
 * generations and heartbeats"): a window of its last heartbeat rounds, each hit or missed, and the
 * N-of-M rule AUTOHA_HA_HEARTBEAT_MISS sets. Pure C like rdma/ah_ha_*.c: the background thread
 * (rdma/rdma_ha_shadow.c) records a round at each heartbeat interval and asks whether the standby
 * is dead. */
#ifndef AH_HA_BEAT_H
#define AH_HA_BEAT_H

#include <stdint.h>

#define AH_HA_BEAT_MAX 32 /* the longest window M */

/* The last rounds of one standby, newest in bit 0 (1: missed). Zeroed: no round yet. */
typedef struct {
  uint32_t bits;
} ah_ha_beat_t;

/* Records one round (missed 1: the round's heartbeat had not completed when the next was due) and
 * returns how many of the last m rounds (1 <= m <= AH_HA_BEAT_MAX) missed. Note that a round
 * older than m no longer counts, so misses spread thinner than n in m never add up. */
int ah_ha_beat_round(ah_ha_beat_t *b, int missed, int m);

/* 1 when the rule "n of the last m rounds missed" (1 <= n <= m) holds for b, else 0. */
int ah_ha_beat_dead(const ah_ha_beat_t *b, int n, int m);

#endif
