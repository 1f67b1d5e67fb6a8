/* ah_ha_ib.h: how the HA layer names an InfiniBand port (docs/ha.md, "InfiniBand"). A RoCE queue
 * pair names both ends by GID, and the failover's directory keys, notes and shadow records are
 * keyed by those 16 bytes. An InfiniBand queue pair without a GRH names its peer only by LID, so its
 * ends get a 16-byte address made from the LID, fe80::ffff:ffff:0:LLLL (a GUID no vendor uses),
 * and every key and record works unchanged. Pure C like rdma/ah_ha_*.c: no verbs calls. */
#ifndef AH_HA_IB_H
#define AH_HA_IB_H

#include <stdint.h>

/* Writes the address of the port with LID `lid` into addr. */
void ah_ha_ib_lid_addr(uint16_t lid, uint8_t addr[16]);
/* The LID an address made by ah_ha_ib_lid_addr names; 0 for any other address (a GID). */
uint16_t ah_ha_ib_addr_lid(const uint8_t addr[16]);

#endif
