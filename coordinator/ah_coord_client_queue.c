/* ah_coord_client_queue.c: what application threads hand to the client's I/O thread — frames
 * appended to a growable buffer under the client's mutex, and a wake-up through its eventfd — and
 * the list of publishes kept until the hub acknowledges them; and the directory's puts and gets. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_client_internal.h"
#include "ah_log.h"

int ah_coord_client_buf_put(client_buf_t *b, const void *p, size_t n) {
  if (b->off > 0 && b->len + n > b->cap) {
    memmove(b->b, b->b + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n) cap *= 2;
    uint8_t *nb = realloc(b->b, cap);
    if (!nb) return -1;
    b->b = nb;
    b->cap = cap;
  }
  memcpy(b->b + b->len, p, n);
  b->len += n;
  return 0;
}

int ah_coord_client_buf_put_msg(client_buf_t *b, uint8_t type, const uint8_t *payload,
                                uint32_t len) {
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(type, len, f);
  if (len) memcpy(f + AH_COORD_HDR_BYTES, payload, len);
  return ah_coord_client_buf_put(b, f, AH_COORD_HDR_BYTES + len);
}

void ah_coord_client_wake(ah_coord_t *c) {
  uint64_t one = 1;
  if (write(c->efd, &one, sizeof one) < 0) { /* counter saturated: already awake */
  }
}

int ah_coord_client_queue_join_rank(ah_coord_t *c, client_comm_t *m, uint32_t rank) {
  uint8_t p[24 + 8 * AH_COORD_DIGEST_PARTS];
  ah_coord_put_u64(p, m->comm);
  ah_coord_put_u32(p + 8, m->nranks);
  ah_coord_put_u32(p + 12, rank);
  ah_coord_put_u64(p + 16, m->last_seq);
  m->told_seq = m->last_seq;
  for (int i = 0; i < AH_COORD_DIGEST_PARTS; i++)
    ah_coord_put_u64(p + 24 + 8 * i, m->digest.part[i]);
  return ah_coord_client_buf_put_msg(&c->outq, AH_MSG_JOIN, p, sizeof p);
}

/* One JOIN per local rank (the hub counts ranks), or one that only subscribes. Caller holds mu. */
int ah_coord_client_queue_join(ah_coord_t *c, client_comm_t *m) {
  int rc = 0;
  for (int i = 0; i < m->nlocal; i++) rc |= ah_coord_client_queue_join_rank(c, m, m->ranks[i]);
  if (m->nlocal == 0) rc |= ah_coord_client_queue_join_rank(c, m, AH_COORD_NO_RANK);
  return rc;
}

int ah_coord_client_queue_publish(ah_coord_t *c, const client_pub_t *pb) {
  uint8_t p[8 + AH_COORD_KEYSEG_BYTES];
  ah_coord_put_u64(p, pb->seq);
  memcpy(p + 8, pb->keyseg, AH_COORD_KEYSEG_BYTES);
  return ah_coord_client_buf_put_msg(&c->outq, AH_MSG_PUBLISH, p, sizeof p);
}

/* Drops acknowledged publishes. Caller holds mu. */
void ah_coord_client_pubs_ack(ah_coord_t *c, uint64_t upto) {
  while (c->pub_head < c->npubs && c->pubs[c->pub_head].seq <= upto) c->pub_head++;
  if (c->pub_head == c->npubs) c->pub_head = c->npubs = 0;
}

/* Note that the report falls where last_seq crosses a multiple of step shifted by this client's
 * phase (its random id modulo step): every client reports every step segments, but the clients of
 * a job do not all report after the same segment — 1,024 DELIVERED frames at once would reach the
 * hub (and every relay) in the middle of the next segment's fan-out. */
int ah_coord_client_queue_delivered(ah_coord_t *c, uint64_t step) {
  int rc = 0;
  uint64_t ph = step > 1 ? c->client_id % step : 0;
  for (int i = 0; i < c->ncomms; i++) {
    client_comm_t *m = &c->comms[i];
    if (m->last_seq == m->told_seq || (m->last_seq + ph) / step == (m->told_seq + ph) / step)
      continue;
    uint8_t p[16];
    ah_coord_put_u64(p, m->comm);
    ah_coord_put_u64(p + 8, m->last_seq);
    rc |= ah_coord_client_buf_put_msg(&c->outq, AH_MSG_DELIVERED, p, sizeof p);
    m->told_seq = m->last_seq;
  }
  return rc;
}

int ah_coord_client_queue_dir_put(ah_coord_t *c, const client_dir_put_t *d) {
  uint8_t p[AH_COORD_DIR_PUT_FIXED + AH_COORD_DIR_VAL_MAX];
  memcpy(p, d->key, AH_COORD_DIR_KEY);
  p[AH_COORD_DIR_KEY] = (uint8_t)(d->vlen >> 8);
  p[AH_COORD_DIR_KEY + 1] = (uint8_t)d->vlen;
  if (d->vlen) memcpy(p + AH_COORD_DIR_PUT_FIXED, d->val, d->vlen);
  return ah_coord_client_buf_put_msg(&c->outq, AH_MSG_DIR_PUT, p, AH_COORD_DIR_PUT_FIXED + d->vlen);
}

/* Note that the hub is asked to wait for the time the caller has left; 0 still looks the key up
 * once (the hub answers DIR_VAL or DIR_ABSENT to every get) and keeps nothing. */
int ah_coord_client_queue_dir_get(ah_coord_t *c, const client_dir_wait_t *w) {
  uint8_t p[AH_COORD_DIR_GET_BYTES];
  uint64_t now = ah_coord_now_ns();
  uint64_t left = w->deadline_ns > now ? (w->deadline_ns - now) / 1000000ull : 0;
  if (left > UINT32_MAX) left = UINT32_MAX;
  ah_coord_put_u64(p, w->req);
  ah_coord_put_u32(p + 8, (uint32_t)left);
  memcpy(p + 12, w->key, AH_COORD_DIR_KEY);
  return ah_coord_client_buf_put_msg(&c->outq, AH_MSG_DIR_GET, p, sizeof p);
}

int ah_coord_client_queue_dir_all(ah_coord_t *c) {
  int rc = 0;
  for (client_dir_put_t *d = c->dir_puts; d; d = d->hh.next)
    rc |= ah_coord_client_queue_dir_put(c, d);
  for (client_dir_wait_t *w = c->dir_waits; w; w = w->next)
    if (!w->done) rc |= ah_coord_client_queue_dir_get(c, w);
  return rc;
}
