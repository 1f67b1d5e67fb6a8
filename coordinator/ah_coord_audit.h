/* ah_coord_audit.h: the straggler audit (docs/diagnosis.md "Late stragglers"). A settled key is
 * timed on its first 16 calls and then one in 64, so a rank that turns slow mid-job would take some
 * 12 x 64 calls of a key to fill the straggler window (ah_coord_straggler.h) with late calls. Every
 * AUTOHA_STRAGGLER_AUDIT_S the hub asks each process of a communicator to time the next
 * AH_AUDIT_CALLS calls of its busiest keys from one call index on: every rank times the same calls
 * (a call's index counts the key's calls, the same on every rank), their SAMPLES refill the window,
 * and a change of pace is named one audit after it. The calls between audits stay on the shim's
 * short path: an audit costs the ranks AH_AUDIT_KEYS x AH_AUDIT_CALLS timed calls per period.
 *
 * Pure logic: the AUDIT message's wire form and the choice of keys from the ranks' records. */
#ifndef AH_COORD_AUDIT_H
#define AH_COORD_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "ah_coord_health.h"

/* Calls of a key one audit times: the straggler window (16) with room for ranks that start a
 * few calls apart (a rank already past the first index starts at its next call). */
#define AH_AUDIT_CALLS 24
/* Keys one audit times, the busiest: within the shim's sample ring per tick (128) beside the
 * regular samples, and within the detector's calls waiting for every rank. */
#define AH_AUDIT_KEYS 4
/* An audit's first index is this many calls past the latest any rank reported: the message reaches
 * every rank before that call where calls are slow, and ranks past it start at their next call. */
#define AH_AUDIT_LEAD 2

typedef struct {
  uint8_t coll, bin;
  uint64_t from; /* the first call index to time */
} ah_audit_key_t;

typedef struct {
  uint16_t calls; /* calls of each key to time from its `from` */
  uint8_t nkeys;
  ah_audit_key_t keys[AH_AUDIT_KEYS];
} ah_audit_t;

/* Wire form (the AUDIT message after its comm u64): calls u16, nkeys u8, then AH_AUDIT_KEYS
 * entries of coll u8 bin u8 from u64 (unused ones zero). */
#define AH_AUDIT_BYTES (2 + 1 + AH_AUDIT_KEYS * 10)
void ah_audit_pack(const ah_audit_t *a, uint8_t *out);
/* Unpacks and validates (calls 1..1024, nkeys, each used key's collective and bin, unused entries
 * zero). Returns 0, or -1 with a reason naming the offending value. */
int ah_audit_unpack(const uint8_t *in, ah_audit_t *a, char *err, size_t errlen);

/* Chooses an audit from the ranks' latest records (recs[i] NULL: none from that rank): the
 * AH_AUDIT_KEYS keys entered most often (by the rank furthest along), past their first 16 calls
 * (timed already), each from AH_AUDIT_LEAD calls past the furthest rank's count. Returns nkeys. */
int ah_audit_pick(const ah_health_rec_t *const *recs, uint32_t n, ah_audit_t *a);

#endif
