/* ah_ha_ib.c: the 16-byte address of an InfiniBand port, made from its LID and read back
 * (ah_ha_ib.h). The prefix is the link-local subnet prefix every IB GID starts with; the
 * interface-ID half is ffff:ffff:0:LID, which no HCA's GUID is (OUI ff:ff:ff is not assigned),
 * so an address made here is never a port's real GID. */
#include "ah_ha_ib.h"

#include <string.h>

static const uint8_t lid_prefix[14] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0};

void ah_ha_ib_lid_addr(uint16_t lid, uint8_t addr[16]) {
  memcpy(addr, lid_prefix, sizeof lid_prefix);
  addr[14] = (uint8_t)(lid >> 8);
  addr[15] = (uint8_t)lid;
}

uint16_t ah_ha_ib_addr_lid(const uint8_t addr[16]) {
  if (memcmp(addr, lid_prefix, sizeof lid_prefix) != 0) return 0;
  return (uint16_t)(addr[14] << 8 | addr[15]);
}
