/* sim_fabric_addr.c: the fabric's arithmetic — endpoint addresses (IPv4-mapped RoCEv2 GIDs), the
 * UDP source port mlx5 and the kernel put on a QP's packets, and the switches' hash.
 *
 * The hash is written here again rather than linked from autoha's path/ (sim/ is the world and
 * must not depend on the code it tests); tests/fabric checks that both give the same answers. */
#include <pthread.h>
#include <string.h>

#include "sim_fabric_internal.h"

void sim_fabric_gid(sim_fabric_ep_t ep, uint8_t gid[16]) {
  memset(gid, 0, 16);
  gid[10] = gid[11] = 0xFF;
  gid[12] = 10;
  gid[13] = (uint8_t)(ep.node >> 8);
  gid[14] = (uint8_t)ep.node;
  gid[15] = (uint8_t)(ep.nic * 4 + ep.port);
}

int sim_fabric_gid_ep(const uint8_t gid[16], sim_fabric_ep_t *ep_p) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (memcmp(gid, mapped, sizeof mapped) != 0 || gid[12] != 10) return -1;
  int port = gid[15] & 3;
  if (port != 1 && port != 2) return -1;
  ep_p->node = gid[13] << 8 | gid[14];
  ep_p->nic = gid[15] >> 2;
  ep_p->port = port;
  return 0;
}

/* The kernel's rdma_calc_flow_label and rdma_flow_label_to_udp_sport (include/rdma/ib_verbs.h),
 * as mlx5 applies them at the RTR transition of an RC QP. */
uint16_t sim_fabric_sport(uint32_t flow_label, uint32_t lqpn, uint32_t rqpn) {
  uint32_t fl = flow_label & 0xFFFFFu;
  if (!fl) {
    uint64_t v = (uint64_t)lqpn * rqpn;
    v ^= v >> 20;
    v ^= v >> 40;
    fl = (uint32_t)(v & 0xFFFFFu);
  }
  uint32_t lo = fl & 0x03FFFu, hi = fl & 0xFC000u;
  lo ^= hi >> 14;
  return (uint16_t)(lo | 0xC000u);
}

/* ---- the switches' hash: CRC-32 over the 5-tuple, seeded per switch ---------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_table_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int b = 0; b < 8; b++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    crc_table[i] = c;
  }
}

static uint32_t crc32_update(uint32_t crc, const uint8_t *p, size_t n) {
  pthread_once(&crc_once, crc_table_init);
  for (size_t i = 0; i < n; i++) crc = (crc >> 8) ^ crc_table[(crc ^ p[i]) & 0xFFu];
  return crc;
}

uint32_t sim_fabric_hash_prefix(const uint8_t sgid[16], const uint8_t dgid[16]) {
  return crc32_update(crc32_update(~0u, sgid, 16), dgid, 16);
}

/* Note that the seed enters after the CRC, through MurmurHash3's finaliser: CRC-32 is linear, so
 * seeds mixed in linearly would make two switches' choices correlated (hash polarisation). */
uint32_t sim_fabric_hash_finish(uint32_t prefix, uint32_t seed, uint16_t sport) {
  const uint8_t tail[5] = {17, (uint8_t)(sport >> 8), (uint8_t)sport, 4791 >> 8, 4791 & 0xFF};
  uint32_t h = ~crc32_update(prefix, tail, sizeof tail) ^ (seed * 0x9E3779B9u);
  h ^= h >> 16;
  h *= 0x85EBCA6Bu;
  h ^= h >> 13;
  h *= 0xC2B2AE35u;
  h ^= h >> 16;
  return h;
}
