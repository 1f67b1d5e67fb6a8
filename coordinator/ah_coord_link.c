/* The wire forms of the slow-link diagnosis's messages (ah_coord_link.h): fixed-size big-endian
 * entries after a pid and a count, and checks that refuse, by name, anything no process of autoha
 * would send — so that the hub can take a decoded entry as it is. Both messages are one list form
 * (list_form_t): its framing, its count's bound and its zero unused slots are handled once, each
 * entry by its message's put and take. */
#include "ah_coord_link.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "ah_coord_internal.h"

int ah_link_dev_valid(const char dev[AH_LINK_DEV]) {
  int nul = 0;
  for (int j = 0; j < AH_LINK_DEV; j++) {
    if (!dev[j]) nul = 1;
    else if (nul || dev[j] < 0x21 || dev[j] > 0x7e) return 0;
  }
  return nul && dev[0];
}

/* A message's list: fixed-size entries after a pid and a count, the slots past the count zero. */
typedef struct {
  int max;           /* entries at most */
  size_t bytes;      /* of one entry */
  const char *count; /* what a count over max is too many of: "queue pairs in a LINK_QP" */
  const char *slot;  /* what an entry's slot is: "queue-pair" */
  /* entry i of the array at in, packed at p */
  void (*put)(const void *in, int i, uint8_t *p);
  /* the entry at p, unpacked as entry i of the array at out and checked: 0, or -1 with err set */
  int (*take)(const uint8_t *p, void *out, int i, char *err, size_t errlen);
} list_form_t;

static void list_pack(const list_form_t *f, uint32_t pid, const void *in, int n, uint8_t *out) {
  memset(out, 0, 5 + (size_t)f->max * f->bytes);
  if (n < 0) n = 0;
  if (n > f->max) n = f->max;
  ah_coord_put_u32(out, pid);
  out[4] = (uint8_t)n;
  for (int i = 0; i < n; i++) f->put(in, i, out + 5 + (size_t)i * f->bytes);
}

/* Returns the count, with the pid and the entries at out, or -1 with err set: a count over f->max,
 * an entry f->take refuses, an unused slot not zero (the first of them to be met, in order). */
static int list_unpack(const list_form_t *f, const uint8_t *in, uint32_t *pid, void *out, char *err,
                       size_t errlen) {
  *pid = ah_coord_get_u32(in);
  int n = in[4];
  if (n > f->max) {
    snprintf(err, errlen, "%d %s (at most %d)", n, f->count, f->max);
    return -1;
  }
  for (int i = 0; i < f->max; i++) {
    const uint8_t *p = in + 5 + (size_t)i * f->bytes;
    if (i < n) {
      if (f->take(p, out, i, err, errlen) < 0) return -1;
    } else if (!ah_coord_zero(p, f->bytes)) {
      snprintf(err, errlen, "unused %s slot %d is not zero", f->slot, i);
      return -1;
    }
  }
  return n;
}

static void qp_put(const void *in, int i, uint8_t *p) {
  const ah_link_qp_t *q = (const ah_link_qp_t *)in + i;
  memcpy(p, q->lgid, 16), p += 16;
  memcpy(p, q->rgid, 16), p += 16;
  ah_coord_put_u32(p, q->lqpn), p += 4;
  ah_coord_put_u32(p, q->rqpn), p += 4;
  ah_coord_put_u16(p, q->gpu), p += 2;
  *p++ = q->role;
  *p++ = q->port;
  ah_coord_put_u16(p, q->sport), p += 2;
  memset(p, 0, AH_LINK_DEV);
  size_t n = strnlen(q->dev, AH_LINK_DEV - 1);
  memcpy(p, q->dev, n), p += AH_LINK_DEV;
  *p++ = q->tx_port;
  *p++ = q->rx_port;
  ah_coord_put_u16(p, q->src_leaf), p += 2;
  ah_coord_put_u16(p, q->spine), p += 2;
  ah_coord_put_u16(p, q->dst_leaf);
}

static int qp_take(const uint8_t *p, void *out, int i, char *err, size_t errlen) {
  ah_link_qp_t *x = (ah_link_qp_t *)out + i;
  memcpy(x->lgid, p, 16), p += 16;
  memcpy(x->rgid, p, 16), p += 16;
  x->lqpn = ah_coord_get_u32(p), p += 4;
  x->rqpn = ah_coord_get_u32(p), p += 4;
  x->gpu = ah_coord_get_u16(p), p += 2;
  x->role = *p++;
  x->port = *p++;
  x->sport = ah_coord_get_u16(p), p += 2;
  memcpy(x->dev, p, AH_LINK_DEV), p += AH_LINK_DEV;
  x->tx_port = *p++;
  x->rx_port = *p++;
  x->src_leaf = ah_coord_get_u16(p), p += 2;
  x->spine = ah_coord_get_u16(p), p += 2;
  x->dst_leaf = ah_coord_get_u16(p);
  if (!ah_link_dev_valid(x->dev)) {
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
  return 0;
}

static const list_form_t qp_list = {.max = AH_LINK_QPS,
                                    .bytes = AH_LINK_QP_BYTES,
                                    .count = "queue pairs in a LINK_QP",
                                    .slot = "queue-pair",
                                    .put = qp_put,
                                    .take = qp_take};

void ah_link_qps_pack(uint32_t pid, const ah_link_qp_t *q, int n, uint8_t *out) {
  list_pack(&qp_list, pid, q, n, out);
}

int ah_link_qps_unpack(const uint8_t *in, uint32_t *pid, ah_link_qp_t *q, char *err,
                       size_t errlen) {
  return list_unpack(&qp_list, in, pid, q, err, errlen);
}

static void rate_put(const void *in, int i, uint8_t *p) {
  const ah_link_rate_t *r = (const ah_link_rate_t *)in + i;
  memcpy(p, r->lgid, 16), p += 16;
  ah_coord_put_u32(p, r->lqpn), p += 4;
  ah_coord_put_u64(p, r->bytes), p += 8;
  ah_coord_put_u32(p, r->busy_us), p += 4;
  ah_coord_put_u32(p, r->wait_us), p += 4;
  ah_coord_put_u32(p, r->wrs);
}

#define RATE_MAX_US 60000000u /* a window's busy or wait time: a minute at most */

static int rate_take(const uint8_t *p, void *out, int i, char *err, size_t errlen) {
  ah_link_rate_t *x = (ah_link_rate_t *)out + i;
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
  return 0;
}

static const list_form_t rate_list = {.max = AH_LINK_RATES,
                                      .bytes = AH_LINK_RATE_BYTES,
                                      .count = "rates in a LINK_RATES",
                                      .slot = "rate",
                                      .put = rate_put,
                                      .take = rate_take};

void ah_link_rates_pack(uint32_t pid, const ah_link_rate_t *r, int n, uint8_t *out) {
  list_pack(&rate_list, pid, r, n, out);
}

int ah_link_rates_unpack(const uint8_t *in, uint32_t *pid, ah_link_rate_t *r, char *err,
                         size_t errlen) {
  return list_unpack(&rate_list, in, pid, r, err, errlen);
}

void ah_link_gid_text(const uint8_t gid[16], char *buf, size_t len) {
  static const uint8_t mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  char t[INET6_ADDRSTRLEN] = "?";
  if (memcmp(gid, mapped, 12) == 0) inet_ntop(AF_INET, gid + 12, t, sizeof t);
  else inet_ntop(AF_INET6, gid, t, sizeof t);
  snprintf(buf, len, "%s", t);
}
