/* The wire forms of the slow-link diagnosis's messages (ah_coord_link.h): fixed-size big-endian
 * entries after a pid and a count, and checks that refuse, by name, anything no process of autoha
 * would send — so that the hub can take a decoded entry as it is. */
#include "ah_coord_link.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "ah_coord_internal.h"

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] << 8 | p[1]); }

static void qp_pack(const ah_link_qp_t *q, uint8_t *p) {
  memcpy(p, q->lgid, 16), p += 16;
  memcpy(p, q->rgid, 16), p += 16;
  ah_coord_put_u32(p, q->lqpn), p += 4;
  ah_coord_put_u32(p, q->rqpn), p += 4;
  put_u16(p, q->gpu), p += 2;
  *p++ = q->role;
  *p++ = q->port;
  put_u16(p, q->sport), p += 2;
  memset(p, 0, AH_LINK_DEV);
  size_t n = strnlen(q->dev, AH_LINK_DEV - 1);
  memcpy(p, q->dev, n), p += AH_LINK_DEV;
  *p++ = q->tx_port;
  *p++ = q->rx_port;
  put_u16(p, q->src_leaf), p += 2;
  put_u16(p, q->spine), p += 2;
  put_u16(p, q->dst_leaf);
}

static void qp_unpack(const uint8_t *p, ah_link_qp_t *q) {
  memcpy(q->lgid, p, 16), p += 16;
  memcpy(q->rgid, p, 16), p += 16;
  q->lqpn = ah_coord_get_u32(p), p += 4;
  q->rqpn = ah_coord_get_u32(p), p += 4;
  q->gpu = get_u16(p), p += 2;
  q->role = *p++;
  q->port = *p++;
  q->sport = get_u16(p), p += 2;
  memcpy(q->dev, p, AH_LINK_DEV), p += AH_LINK_DEV;
  q->tx_port = *p++;
  q->rx_port = *p++;
  q->src_leaf = get_u16(p), p += 2;
  q->spine = get_u16(p), p += 2;
  q->dst_leaf = get_u16(p);
}

static int zero(const uint8_t *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return 0;
  return 1;
}

void ah_link_qps_pack(uint32_t pid, const ah_link_qp_t *q, int n, uint8_t *out) {
  memset(out, 0, AH_LINK_QP_MSG_BYTES);
  if (n < 0) n = 0;
  if (n > AH_LINK_QPS) n = AH_LINK_QPS;
  ah_coord_put_u32(out, pid);
  out[4] = (uint8_t)n;
  for (int i = 0; i < n; i++) qp_pack(&q[i], out + 5 + (size_t)i * AH_LINK_QP_BYTES);
}

int ah_link_qps_unpack(const uint8_t *in, uint32_t *pid, ah_link_qp_t *q, char *err,
                       size_t errlen) {
  *pid = ah_coord_get_u32(in);
  int n = in[4];
  if (n > AH_LINK_QPS) {
    snprintf(err, errlen, "%d queue pairs in a LINK_QP (at most %d)", n, AH_LINK_QPS);
    return -1;
  }
  for (int i = 0; i < AH_LINK_QPS; i++) {
    const uint8_t *p = in + 5 + (size_t)i * AH_LINK_QP_BYTES;
    if (i >= n) {
      if (!zero(p, AH_LINK_QP_BYTES)) {
        snprintf(err, errlen, "unused queue-pair slot %d is not zero", i);
        return -1;
      }
      continue;
    }
    ah_link_qp_t *x = &q[i];
    qp_unpack(p, x);
    int nul = 0, bad = 0;
    for (int j = 0; j < AH_LINK_DEV; j++) {
      if (!x->dev[j]) nul = 1;
      else if (nul || x->dev[j] < 0x21 || x->dev[j] > 0x7e) bad = 1;
    }
    if (!nul || bad || !x->dev[0]) {
      snprintf(err, errlen, "queue pair %u: its device name is not printable text", x->lqpn);
      return -1;
    }
    if (x->role != AH_LINK_SENDER && x->role != AH_LINK_RECEIVER) {
      snprintf(err, errlen, "queue pair %u: role %u (expected 1 sender, 2 receiver)", x->lqpn,
               x->role);
      return -1;
    }
    if (x->port == 0 || x->tx_port > 2 || x->rx_port > 2) {
      snprintf(err, errlen, "queue pair %u: port %u, route ports %u and %u (expected 1.., 0..2)",
               x->lqpn, x->port, x->tx_port, x->rx_port);
      return -1;
    }
    if (x->lqpn == 0 || x->lqpn > 0xffffff || x->rqpn > 0xffffff) {
      snprintf(err, errlen, "queue pair %u -> %u: a QP number is not 24 bits", x->lqpn, x->rqpn);
      return -1;
    }
    if ((x->src_leaf == AH_LINK_NONE) != (x->dst_leaf == AH_LINK_NONE) ||
        (x->src_leaf == AH_LINK_NONE && x->spine != AH_LINK_NONE)) {
      snprintf(err, errlen, "queue pair %u: a partial route (leaf %u, spine %u, leaf %u)", x->lqpn,
               x->src_leaf, x->spine, x->dst_leaf);
      return -1;
    }
  }
  return n;
}

void ah_link_rates_pack(uint32_t pid, const ah_link_rate_t *r, int n, uint8_t *out) {
  memset(out, 0, AH_LINK_RATE_MSG_BYTES);
  if (n < 0) n = 0;
  if (n > AH_LINK_RATES) n = AH_LINK_RATES;
  ah_coord_put_u32(out, pid);
  out[4] = (uint8_t)n;
  for (int i = 0; i < n; i++) {
    uint8_t *p = out + 5 + (size_t)i * AH_LINK_RATE_BYTES;
    memcpy(p, r[i].lgid, 16), p += 16;
    ah_coord_put_u32(p, r[i].lqpn), p += 4;
    ah_coord_put_u64(p, r[i].bytes), p += 8;
    ah_coord_put_u32(p, r[i].busy_us), p += 4;
    ah_coord_put_u32(p, r[i].wait_us), p += 4;
    ah_coord_put_u32(p, r[i].wrs);
  }
}

#define RATE_MAX_US 60000000u /* a window's busy or wait time: a minute at most */

int ah_link_rates_unpack(const uint8_t *in, uint32_t *pid, ah_link_rate_t *r, char *err,
                         size_t errlen) {
  *pid = ah_coord_get_u32(in);
  int n = in[4];
  if (n > AH_LINK_RATES) {
    snprintf(err, errlen, "%d rates in a LINK_RATES (at most %d)", n, AH_LINK_RATES);
    return -1;
  }
  for (int i = 0; i < AH_LINK_RATES; i++) {
    const uint8_t *p = in + 5 + (size_t)i * AH_LINK_RATE_BYTES;
    if (i >= n) {
      if (!zero(p, AH_LINK_RATE_BYTES)) {
        snprintf(err, errlen, "unused rate slot %d is not zero", i);
        return -1;
      }
      continue;
    }
    ah_link_rate_t *x = &r[i];
    memcpy(x->lgid, p, 16), p += 16;
    x->lqpn = ah_coord_get_u32(p), p += 4;
    x->bytes = ah_coord_get_u64(p), p += 8;
    x->busy_us = ah_coord_get_u32(p), p += 4;
    x->wait_us = ah_coord_get_u32(p), p += 4;
    x->wrs = ah_coord_get_u32(p);
    if (x->busy_us > RATE_MAX_US || x->wait_us > RATE_MAX_US || x->bytes > (1ull << 50)) {
      snprintf(err, errlen, "queue pair %u: %llu bytes, busy %u us, wait %u us (at most %u us)",
               x->lqpn, (unsigned long long)x->bytes, x->busy_us, x->wait_us, RATE_MAX_US);
      return -1;
    }
    if (x->lqpn == 0 || x->lqpn > 0xffffff) {
      snprintf(err, errlen, "rate of queue pair %u: a QP number is not 24 bits", x->lqpn);
      return -1;
    }
  }
  return n;
}

void ah_link_gid_text(const uint8_t gid[16], char *buf, size_t len) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char t[INET6_ADDRSTRLEN] = "?";
  if (memcmp(gid, mapped, 12) == 0) inet_ntop(AF_INET, gid + 12, t, sizeof t);
  else inet_ntop(AF_INET6, gid, t, sizeof t);
  snprintf(buf, len, "%s", t);
}
