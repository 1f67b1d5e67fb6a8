/* The stamp: where the hub listens and the job's 128-bit secret, written into bytes 64..127 of the
 * ncclUniqueId, which NCCL leaves zero from 2.23 on (src/bootstrap.cc, docs/coordinator.md). Every
 * framework that passes the id to the ranks therefore passes the stamp too.
 *
 * Layout of the 64 bytes (offsets from byte 64; integers big-endian):
 *   0..3 magic "AHC1"   4 version   5 family   6..7 port   8..23 address   24..39 secret
 *   40..55 zero         56..63 FNV-1a 64 of bytes 0..55
 * The checksum and the zero bytes reject an id whose tail holds leftover garbage (NCCL < 2.23
 * leaves the caller's bytes there), so such an id reads as "no stamp", never as a wrong address. */
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "ah_coord_internal.h"

#define STAMP_MAGIC 0x41484331u /* "AHC1" */
#define STAMP_VERSION 1

void ah_coord_stamp_write(const ah_coord_stamp_t *st, unsigned char id[128]) {
  unsigned char *t = id + AH_COORD_STAMP_OFFSET;
  memset(t, 0, AH_COORD_STAMP_BYTES);
  ah_coord_put_u32(t, STAMP_MAGIC);
  t[4] = STAMP_VERSION;
  t[5] = st->family;
  t[6] = (unsigned char)(st->port >> 8);
  t[7] = (unsigned char)(st->port & 0xff);
  memcpy(t + 8, st->addr, 16);
  memcpy(t + 24, st->secret, 16);
  ah_coord_put_u64(t + 56, ah_coord_fnv64(t, 56, AH_COORD_FNV_BASIS));
}

/* Returns 0 and fills st_p, or -1 when the tail is not a valid stamp (st_p untouched).
 *
 * Note that a stamp of a newer version is refused, not guessed at: its fields may mean something
 * else, and the caller's fallback (pass-through) is always safe. */
int ah_coord_stamp_read(const unsigned char id[128], ah_coord_stamp_t *st_p) {
  const unsigned char *t = id + AH_COORD_STAMP_OFFSET;
  if (ah_coord_get_u32(t) != STAMP_MAGIC || t[4] != STAMP_VERSION) return -1;
  if (ah_coord_get_u64(t + 56) != ah_coord_fnv64(t, 56, AH_COORD_FNV_BASIS)) return -1;
  for (int i = 40; i < 56; i++)
    if (t[i] != 0) return -1;
  if (t[5] != AF_INET && t[5] != AF_INET6) return -1;
  uint16_t port = (uint16_t)((t[6] << 8) | t[7]);
  if (port == 0) return -1;
  ah_coord_stamp_t st;
  memset(&st, 0, sizeof st);
  st.family = t[5];
  st.port = port;
  memcpy(st.addr, t + 8, 16);
  memcpy(st.secret, t + 24, 16);
  *st_p = st;
  return 0;
}

void ah_coord_stamp_sockaddr(const ah_coord_stamp_t *st, struct sockaddr_storage *ss,
                             socklen_t *sl) {
  memset(ss, 0, sizeof *ss);
  if (st->family == AF_INET6) {
    struct sockaddr_in6 *a = (struct sockaddr_in6 *)ss;
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(st->port);
    memcpy(&a->sin6_addr, st->addr, 16);
    *sl = sizeof *a;
  } else {
    struct sockaddr_in *a = (struct sockaddr_in *)ss;
    a->sin_family = AF_INET;
    a->sin_port = htons(st->port);
    memcpy(&a->sin_addr, st->addr, 4);
    *sl = sizeof *a;
  }
}
