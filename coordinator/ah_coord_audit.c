/* The straggler audit's message and its choice of keys (ah_coord_audit.h). */
#include "ah_coord_audit.h"

#include <stdio.h>
#include <string.h>

#include "ah_coord_internal.h"

/* Most calls an audit may ask of a key: a bound on what a message can make a rank time. */
#define AUDIT_CALLS_MAX 1024

void ah_audit_pack(const ah_audit_t *a, uint8_t *out) {
  memset(out, 0, AH_AUDIT_BYTES);
  int n = a->nkeys > AH_AUDIT_KEYS ? AH_AUDIT_KEYS : a->nkeys;
  out[0] = (uint8_t)(a->calls >> 8);
  out[1] = (uint8_t)a->calls;
  out[2] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    uint8_t *k = out + 3 + 10 * i;
    k[0] = a->keys[i].coll;
    k[1] = a->keys[i].bin;
    ah_coord_put_u64(k + 2, a->keys[i].from);
  }
}

int ah_audit_unpack(const uint8_t *in, ah_audit_t *a, char *err, size_t errlen) {
  memset(a, 0, sizeof *a);
  unsigned calls = (unsigned)in[0] << 8 | in[1];
  if (calls < 1 || calls > AUDIT_CALLS_MAX) {
    snprintf(err, errlen, "audit of %u calls per key (1 to %d)", calls, AUDIT_CALLS_MAX);
    return -1;
  }
  if (in[2] > AH_AUDIT_KEYS) {
    snprintf(err, errlen, "audit of %u keys (at most %d)", in[2], AH_AUDIT_KEYS);
    return -1;
  }
  a->calls = (uint16_t)calls;
  a->nkeys = in[2];
  for (int i = 0; i < AH_AUDIT_KEYS; i++) {
    const uint8_t *k = in + 3 + 10 * i;
    if (i >= a->nkeys) {
      if (ah_coord_zero(k, 10)) continue;
      snprintf(err, errlen, "audit: unused entry %d is not zero", i);
      return -1;
    }
    if (k[0] >= AH_NUM_COLLS || k[1] >= 64) {
      snprintf(err, errlen, "audit: entry %d names collective %u bin %u (out of range)", i, k[0],
               k[1]);
      return -1;
    }
    a->keys[i] = (ah_audit_key_t){k[0], k[1], ah_coord_get_u64(k + 2)};
  }
  return 0;
}

int ah_audit_pick(const ah_health_rec_t *const *recs, uint32_t n, ah_audit_t *a) {
  /* every key any record carries, with the furthest count reported for it */
  ah_health_key_t seen[AH_HEALTH_KEYS * 4];
  int nseen = 0;
  for (uint32_t r = 0; r < n; r++) {
    if (!recs[r]) continue;
    for (int i = 0; i < recs[r]->nkeys && i < AH_HEALTH_KEYS; i++) {
      const ah_health_key_t *k = &recs[r]->keys[i];
      int j = 0;
      while (j < nseen && (seen[j].coll != k->coll || seen[j].bin != k->bin)) j++;
      if (j == nseen) {
        if (nseen == (int)(sizeof seen / sizeof seen[0])) continue; /* ranks disagree widely */
        seen[nseen++] = *k;
      } else if (k->entered > seen[j].entered) {
        seen[j].entered = k->entered;
      }
    }
  }
  *a = (ah_audit_t){.calls = AH_AUDIT_CALLS};
  while (a->nkeys < AH_AUDIT_KEYS) {
    int best = -1;
    for (int j = 0; j < nseen; j++)
      if (seen[j].entered >= 16 && (best < 0 || seen[j].entered > seen[best].entered)) best = j;
    if (best < 0) break;
    a->keys[a->nkeys++] =
        (ah_audit_key_t){seen[best].coll, seen[best].bin, seen[best].entered + AH_AUDIT_LEAD};
    seen[best].entered = 0; /* taken */
  }
  return a->nkeys;
}
