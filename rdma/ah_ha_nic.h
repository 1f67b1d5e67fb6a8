/* ah_ha_nic.h: the pure logic of AUTOHA_HA=nic (docs/ha.md, "Policy nic"), where a queue pair's
 * shadow lives on another NIC of the host: which NIC backs which (the nearest in the host's PCI
 * topology among the devices NCCL may use, ties by the list's order), and the key translation
 * table — a memory key of one key space (a device context of this process, or a peer's) to the key
 * of the same memory registered on the backup NIC. Pure C like rdma/ah_ha_*.c and path/: no verbs
 * calls; the shim (rdma/rdma_ha_nic.c) fills and reads it. */
#ifndef AH_HA_NIC_H
#define AH_HA_NIC_H

#include <stddef.h>
#include <stdint.h>

#include "ah_ha_pci.h"

/* 1 when NCCL_IB_HCA's value `hca` (NULL or "": every device) lets NCCL use device `dev`: a list
 * of names, matched as NCCL does (a prefix, or exactly after a leading '='; a ':PORT' suffix is
 * ignored), or after a leading '^' the devices not listed. Else 0. */
int ah_ha_nic_selected(const char *hca, const char *dev);

/* The index in names[0..n) of the NIC that backs `primary`, or -1 when none can (never primary
 * itself). The candidates are the devices NCCL_IB_HCA selects (hca: its value, NULL or "" for
 * all): a list of names (NCCL's prefix match, or exact after a leading '='; a ':PORT' suffix is
 * ignored), or, after a leading '^', the devices not listed. where[0..n) says where each device
 * sits (ah_ha_pci_read; NULL: nothing known). The backup is taken from the nearest group: the
 * candidates on primary's PCIe switch, else on its NUMA node, else all of them; within the group
 * (primary included, in the order given) the one at position i is backed by the one at i ^ 1, the
 * last of an odd count by the first — so ties are decided by the list's order alone, and with no
 * topology mlx5_0 <-> mlx5_1, mlx5_2 <-> mlx5_3 (on 8-NIC servers the two NICs behind one PCIe
 * switch). A primary that is not a candidate is backed as if it were appended to the candidates.
 * On success *near_p (when not NULL) is the group's class, AH_HA_PCI_SWITCH, _NUMA or _FAR.
 *
 * Note that the choice is not always mutual (a group of three: 0 -> 1, 1 -> 0, 2 -> 0), and that
 * each end of a connection chooses for itself: nothing requires the two ends' backups to match. */
int ah_ha_nic_backup(const char *const *names, const ah_ha_pci_t *where, int n, const char *primary,
                     const char *hca, int *near_p);

/* A key space: 16 opaque bytes (the shim uses a per-process nonce and a context, so spaces of
 * different processes and devices never meet). */
typedef struct {
  uint8_t b[16];
} ah_ha_keyspace_t;

typedef struct ah_ha_keys ah_ha_keys_t;

/* An empty table, or NULL when out of memory. Not thread-safe: the caller serialises. */
ah_ha_keys_t *ah_ha_keys_new(void);
void ah_ha_keys_free(ah_ha_keys_t *t);
/* Maps (space, key) to `to`, replacing an earlier mapping. Returns 0, or -1 when out of memory. */
int ah_ha_keys_put(ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key, uint32_t to);
/* Sets *to_p to what (space, key) maps to. Returns 0, or -1 (and *to_p unchanged) when unmapped. */
int ah_ha_keys_get(const ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key,
                   uint32_t *to_p);
/* Forgets (space, key). Returns 1 when it was mapped, else 0. */
int ah_ha_keys_del(ah_ha_keys_t *t, const ah_ha_keyspace_t *space, uint32_t key);
/* Forgets every key of `space` (a peer's connection went away). Returns how many. */
int ah_ha_keys_del_space(ah_ha_keys_t *t, const ah_ha_keyspace_t *space);
/* The number of mappings. */
size_t ah_ha_keys_count(const ah_ha_keys_t *t);

#endif
