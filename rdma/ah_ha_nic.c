/* ah_ha_nic.c: AUTOHA_HA=nic's pure logic (ah_ha_nic.h): the backup NIC of a device, chosen among
 * the devices NCCL_IB_HCA lets NCCL use, nearest first in the host's PCI topology (same PCIe
 * switch, else same NUMA node, else any), and the memory-key translation table (uthash, keyed by
 * key space and key). Within the nearest group the pairing is the neighbour i^1, not "the next
 * one", so that two NICs of a pair back each other and a NIC's failure moves its traffic to exactly
 * one other. */
#include <stdlib.h>
#include <string.h>

#include "ah_ha_nic.h"
#include "ah_ha_pci.h"
#include "ah_uthash.h"

/* 1 when NCCL_IB_HCA's list (without its '^' or '=') names `dev`: an item "NAME[:PORT]" matches
 * when NAME is a prefix of dev (exact: equal). */
static int hca_lists(const char *list, const char *dev, int exact) {
  size_t dl = strlen(dev);
  for (const char *p = list; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    const char *colon = memchr(p, ':', len);
    size_t nl = colon ? (size_t)(colon - p) : len;
    while (nl && p[0] == ' ') p++, nl--;
    if (nl && (exact ? nl == dl : nl <= dl) && strncmp(p, dev, nl) == 0) return 1;
    if (!end) break;
    p = end + 1;
  }
  return 0;
}

int ah_ha_nic_selected(const char *hca, const char *dev) {
  if (!hca || !*hca) return 1;
  if (hca[0] == '^') return !hca_lists(hca + 1, dev, hca[1] == '=');
  if (hca[0] == '=') return hca_lists(hca + 1, dev, 1);
  return hca_lists(hca, dev, 0);
}

int ah_ha_nic_backup(const char *const *names, const ah_ha_pci_t *where, int n, const char *primary,
                     const char *hca, int *near_p) {
  if (!names || n <= 0 || !primary) return -1;
  int *cand = malloc(sizeof(int) * ((size_t)n + 1) * 2);
  if (!cand) return -1;
  int *group = cand + n + 1;
  int nc = 0, me = -1, self = -1;
  for (int i = 0; i < n; i++) {
    if (!names[i]) continue;
    int is_me = strcmp(names[i], primary) == 0;
    if (is_me) self = i;
    if (!ah_ha_nic_selected(hca, names[i])) continue;
    if (is_me) me = nc;
    cand[nc++] = i;
  }
  if (me < 0 && self >= 0) { /* not NCCL's to use by the list, yet NCCL uses it: append it */
    me = nc;
    cand[nc++] = self;
  }
  int out = -1, best = AH_HA_PCI_FAR;
  if (me >= 0 && nc >= 2) {
    /* the nearest class any other candidate is in, then the group: the primary and the
     * candidates of that class, in the order given (every candidate when none is near) */
    for (int j = 0; j < nc && where; j++) {
      if (j == me || strcmp(names[cand[j]], primary) == 0) continue;
      int c = ah_ha_pci_near(&where[cand[me]], &where[cand[j]]);
      if (c > best) best = c;
    }
    int ng = 0, pos = -1;
    for (int j = 0; j < nc; j++) {
      if (j != me && best > AH_HA_PCI_FAR &&
          ah_ha_pci_near(&where[cand[me]], &where[cand[j]]) != best)
        continue;
      if (j == me) pos = ng;
      group[ng++] = cand[j];
    }
    int b = pos ^ 1;
    if (b >= ng) b = 0; /* the last of an odd count */
    out = strcmp(names[group[b]], primary) == 0 ? -1 : group[b];
  }
  free(cand);
  if (out >= 0 && near_p) *near_p = best;
  return out;
}

/* ---- the key translation table ---------------------------------------------------------------- */

typedef struct {
  uint8_t space[16];
  uint32_t key;
} keys_id_t;

typedef struct {
  keys_id_t id; /* the hash key: zeroed before filling, so its padding (none today) is defined */
  uint32_t to;
  UT_hash_handle hh;
} keys_entry_t;

struct ah_ha_keys {
  keys_entry_t *map;
};

ah_ha_keys_t *ah_ha_keys_new(void) { return calloc(1, sizeof(ah_ha_keys_t)); }

void ah_ha_keys_free(ah_ha_keys_t *t) {
  if (!t) return;
  keys_entry_t *e, *tmp;
  HASH_ITER(hh, t->map, e, tmp) {
    HASH_DEL(t->map, e);
    free(e);
  }
  free(t);
}

static keys_id_t keys_id(const ah_ha_keyspace_t *space, uint32_t key) {
  keys_id_t id;
  memset(&id, 0, sizeof id);
  memcpy(id.space, space->b, sizeof id.space);
  id.key = key;
  return id;
}

static keys_entry_t *keys_find(const ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key) {
  keys_id_t id = keys_id(space, key);
  keys_entry_t *e = NULL;
  HASH_FIND(hh, t->map, &id, sizeof id, e);
  return e;
}

int ah_ha_keys_put(ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key, uint32_t to) {
  keys_entry_t *e = keys_find(t, space, key);
  if (e) {
    e->to = to;
    return 0;
  }
  if (!(e = calloc(1, sizeof *e))) return -1;
  e->id = keys_id(space, key);
  e->to = to;
  HASH_ADD(hh, t->map, id, sizeof e->id, e);
  if (!AH_HASH_ADDED(e)) {
    free(e);
    return -1;
  }
  return 0;
}

int ah_ha_keys_get(const ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key,
                   uint32_t *to_p) {
  keys_entry_t *e = t ? keys_find(t, space, key) : NULL;
  if (!e) return -1;
  *to_p = e->to;
  return 0;
}

int ah_ha_keys_del(ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key) {
  keys_entry_t *e = keys_find(t, space, key);
  if (!e) return 0;
  HASH_DEL(t->map, e);
  free(e);
  return 1;
}

int ah_ha_keys_del_space(ah_ha_keys_t *t, const ah_ha_keyspace_t *space) {
  int n = 0;
  keys_entry_t *e, *tmp;
  HASH_ITER(hh, t->map, e, tmp) {
    if (memcmp(e->id.space, space->b, sizeof e->id.space) != 0) continue;
    HASH_DEL(t->map, e);
    free(e);
    n++;
  }
  return n;
}

size_t ah_ha_keys_count(const ah_ha_keys_t *t) { return t ? HASH_COUNT(t->map) : 0; }
