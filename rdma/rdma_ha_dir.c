/* rdma_ha_dir.c: the HA layer's records in the coordinator hub's directory (docs/coordinator.md,
 * "Directory"): shadows' parameters, failover counts and doorbells, keyed by GID and QP numbers,
 * so that the two ends of a queue pair meet outside NCCL's bootstrap. */
#include <string.h>

#include "rdma.h"
#include "rdma_ha_int.h"

_Static_assert(HA_KEY == AH_COORD_DIR_KEY, "a directory key is the coordinator's");

/* The directory key of one end's record: its GID, its QP number, the peer's QP number, the kind. */
void ah_shim_ha_dir_key(uint8_t key[HA_KEY], const uint8_t gid[16], uint32_t qpn, uint32_t peer_qpn,
                        uint32_t kind) {
  memset(key, 0, HA_KEY);
  memcpy(key, gid, 16);
  memcpy(key + 16, &qpn, 4);
  memcpy(key + 20, &peer_qpn, 4);
  memcpy(key + 24, &kind, 4);
}

/* The process's coordinator connection, handed over by shim_coord.c when the process joins a
 * communicator (NULL before, or when the process talks to several hubs). */
static _Atomic(ah_coord_t *) ha_coord;
void ah_shim_ha_set_coord(struct ah_coord *c) { atomic_store(&ha_coord, c); }
ah_coord_t *ah_shim_ha_dir_coord(void) { return atomic_load(&ha_coord); }

int ah_shim_ha_dir_put(const uint8_t key[HA_KEY], const void *val, size_t len) {
  ah_coord_t *c = ah_shim_ha_dir_coord();
  return c ? ah_coord_dir_put(c, key, val, len) : -1;
}

_Static_assert(HA_KEY == AH_COORD_DIR_KEY, "the HA layer's keys are the directory's");

void ah_shim_ha_dir_get_many(const uint8_t (*keys)[HA_KEY], int n, void *vals, size_t cap,
                             int *lens, double timeout_s) {
  ah_coord_t *c = ah_shim_ha_dir_coord();
  if (c) ah_coord_dir_get_many(c, keys, n, vals, cap, lens, timeout_s);
  else
    for (int i = 0; i < n; i++) lens[i] = AH_COORD_DIR_UNANSWERED;
}

int ah_shim_ha_dir_get(const uint8_t key[HA_KEY], void *val, size_t cap, double timeout_s) {
  ah_coord_t *c = ah_shim_ha_dir_coord();
  return c ? ah_coord_dir_get(c, key, val, cap, timeout_s) : AH_COORD_DIR_UNANSWERED;
}
