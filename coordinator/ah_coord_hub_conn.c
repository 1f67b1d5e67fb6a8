/* ah_coord_hub_conn.c: the hub's connections — the rate-limited refusal log, each connection's
 * write queue (bounded: a client that does not read is dropped), the list of connections that have
 * not authenticated yet, and closing (deferred to the loop's next turn, so a handler never frees
 * the connection it is serving). A host relay's channel has no socket: its frames are wrapped in
 * RELAY_DATA on the relay's connection, which is sent once per turn however many channels wrote. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

/* A send buffer larger than this is freed once it has drained (a burst, a replay): what the hub
 * holds follows what waits, not the largest burst each connection ever had. */
#define WBUF_KEEP (256u << 10)

/* Closes a kind's one-second window once it has passed, logging what it suppressed. Called by each
 * refusal and by every sweep tick, so a burst's count is logged even when nothing follows it. */
void ah_coord_hub_rate_roll(ah_coord_hub_t *h, hub_rate_t *r, uint64_t now) {
  if (now - r->window_ns <= 1000000000ull) return;
  if (r->suppressed)
    ah_log(AH_LOG_WARN, "coordinator hub %s: %d more refusals like the last were not logged",
           h->addr, r->suppressed);
  r->window_ns = now;
  r->n = 0;
  r->suppressed = 0;
}

void ah_coord_hub_refuse(ah_coord_hub_t *h, int kind, const char *fmt, ...) {
  hub_rate_t *r = &h->rate[kind];
  ah_coord_hub_rate_roll(h, r, ah_coord_now_ns());
  if (r->n++ >= 5) {
    r->suppressed++;
    return;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ah_log(AH_LOG_WARN, "coordinator hub %s: %s", h->addr, msg);
}

void ah_coord_hub_pend_unlink(ah_coord_hub_t *h, hub_conn_t *c) {
  if (c->prev) c->prev->next = c->next;
  else if (h->pend_head == c) h->pend_head = c->next;
  else return; /* not on the list */
  if (c->next) c->next->prev = c->prev;
  else h->pend_tail = c->prev;
  c->prev = c->next = NULL;
  h->npending--;
}

static void hub_conn_queue(ah_coord_hub_t *h, hub_conn_t *c, const void *buf, size_t n, int flush);

/* Note that closing a relay's connection closes its channels (their processes reconnect), and
 * closing a channel tells its relay (RELAY_CLOSE), which closes the local socket. */
void ah_coord_hub_conn_close_later(ah_coord_hub_t *h, hub_conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  c->close_next = h->close_list;
  h->close_list = c;
  if (c->via) {
    hub_conn_t *r = c->via;
    for (int i = 0; i < r->nchans; i++)
      if (r->chans[i] == c) {
        r->chans[i] = r->chans[--r->nchans];
        break;
      }
    uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED];
    ah_coord_hdr_encode(AH_MSG_RELAY_CLOSE, AH_COORD_RELAY_FIXED, f);
    ah_coord_put_u32(f + AH_COORD_HDR_BYTES, c->chan);
    hub_conn_queue(h, r, f, sizeof f, 0);
    c->via = NULL;
  }
  for (int i = 0; i < c->nchans; i++) {
    c->chans[i]->via = NULL;
    ah_coord_hub_conn_close_later(h, c->chans[i]);
  }
  c->nchans = 0;
}

void ah_coord_hub_comm_unsub(hub_comm_t *m, hub_conn_t *c) {
  if (m->leader == c) m->leader = NULL; /* the leader's process reconnects and joins rank 0 again */
  for (int i = 0; i < m->nsubs; i++)
    if (m->subs[i] == c) {
      m->subs[i] = m->subs[--m->nsubs];
      return;
    }
}

static void hub_conn_free(ah_coord_hub_t *h, hub_conn_t *c) {
  ah_coord_hub_pend_unlink(h, c);
  for (int i = 0; i < c->ncomms; i++) {
    hub_comm_t *m = NULL;
    HASH_FIND(hh, h->comms, &c->comms[i], sizeof(uint64_t), m);
    if (m) ah_coord_hub_comm_unsub(m, c);
  }
  for (int i = 0; i < h->nall; i++)
    if (h->all[i] == c) {
      h->all[i] = h->all[--h->nall];
      break;
    }
  if (c->authed) atomic_fetch_sub(&h->nclients, 1);
  if (c->dirty)
    for (hub_conn_t **d = &h->dirty_list; *d; d = &(*d)->dirty_next)
      if (*d == c) {
        *d = c->dirty_next;
        break;
      }
  if (c->fd >= 0) {
    epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
  }
  h->wbuf_bytes -= c->wcap;
  free(c->wbuf);
  free(c->chans);
  free(c->comms);
  free(c);
}

void ah_coord_hub_close_pending(ah_coord_hub_t *h) {
  while (h->close_list) {
    hub_conn_t *c = h->close_list;
    h->close_list = c->close_next;
    hub_conn_free(h, c);
  }
}

static void hub_conn_interest(ah_coord_hub_t *h, hub_conn_t *c, int want_out) {
  if (c->want_out == want_out) return;
  struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
  epoll_ctl(h->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

void ah_coord_hub_conn_flush(ah_coord_hub_t *h, hub_conn_t *c) {
  if (c->fd < 0) return; /* a channel: its bytes went to its relay's connection */
  while (c->woff < c->wlen) {
    ssize_t r = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
    if (r > 0) {
      c->woff += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      hub_conn_interest(h, c, 1);
      return;
    }
    ah_coord_hub_refuse(h, RATE_CLOSED, "send to %s failed (%s); connection dropped", c->peer,
                        r < 0 ? strerror(errno) : "0 bytes");
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  c->woff = c->wlen = 0;
  if (c->wcap > WBUF_KEEP) { /* a burst's buffer goes back once sent */
    h->wbuf_bytes -= c->wcap;
    free(c->wbuf);
    c->wbuf = NULL;
    c->wcap = 0;
  }
  hub_conn_interest(h, c, 0);
}

void ah_coord_hub_flush_dirty(ah_coord_hub_t *h) {
  while (h->dirty_list) {
    hub_conn_t *c = h->dirty_list;
    h->dirty_list = c->dirty_next;
    c->dirty = 0;
    if (!c->closing) ah_coord_hub_conn_flush(h, c);
  }
}

/* Note that each connection's cap (max_outbuf) bounds one slow reader, not their sum: 16
 * connections that never read took the hub from 10 MB to 962 MB. Past max_outbuf_job for every
 * connection's buffers together, the one with the most queued is dropped (its buffer freed at
 * once), which may be the one queueing now. Returns 1 when c itself was dropped. */
static int job_budget(ah_coord_hub_t *h, hub_conn_t *c, size_t grow) {
  while (h->wbuf_bytes + grow > h->o.max_outbuf_job) {
    hub_conn_t *worst = NULL;
    for (int i = 0; i < h->nall; i++) {
      hub_conn_t *o = h->all[i];
      if (o->wcap && (!worst || o->wlen - o->woff > worst->wlen - worst->woff)) worst = o;
    }
    if (!worst) return 0; /* nothing to free: c's own growth alone is within its cap */
    if (worst->wlen ==
        worst->woff) { /* drained buffers only: give back the largest, keep them all */
      for (int i = 0; i < h->nall; i++)
        if (h->all[i]->wcap > worst->wcap && h->all[i]->wlen == h->all[i]->woff) worst = h->all[i];
      h->wbuf_bytes -= worst->wcap;
      free(worst->wbuf);
      worst->wbuf = NULL;
      worst->wcap = worst->wlen = worst->woff = 0;
      continue;
    }
    ah_coord_hub_refuse(h, RATE_SLOW,
                        "the hub's send buffers hold %zu bytes (at most %zu for the job): %s, "
                        "with the most queued (%zu bytes), dropped",
                        h->wbuf_bytes, h->o.max_outbuf_job, worst->peer, worst->wlen - worst->woff);
    ah_coord_hub_conn_close_later(h, worst);
    h->wbuf_bytes -= worst->wcap;
    free(worst->wbuf);
    worst->wbuf = NULL;
    worst->wcap = worst->wlen = worst->woff = 0;
    if (worst == c) return 1;
  }
  return 0;
}

/* Queues bytes for a connection with a socket; sends at once when nothing else waits and flush is
 * set, else marks it for ah_coord_hub_flush_dirty. */
static void hub_conn_queue(ah_coord_hub_t *h, hub_conn_t *c, const void *buf, size_t n, int flush) {
  if (c->closing) return;
  if (c->wlen - c->woff + n > h->o.max_outbuf) {
    ah_coord_hub_refuse(h, RATE_SLOW,
                        "client %s does not read (%zu bytes queued); connection dropped", c->peer,
                        c->wlen - c->woff);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  if (c->woff > 0 && c->wlen + n > c->wcap) {
    memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
    c->wlen -= c->woff;
    c->woff = 0;
  }
  if (c->wlen + n > c->wcap) {
    size_t cap = c->wcap ? c->wcap : 1024;
    while (cap < c->wlen + n) cap *= 2;
    if (job_budget(h, c, cap - c->wcap)) return;
    uint8_t *w = realloc(c->wbuf, cap);
    if (!w) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory queueing %zu bytes for %s", h->addr,
             n, c->peer);
      ah_coord_hub_conn_close_later(h, c);
      return;
    }
    h->wbuf_bytes += cap - c->wcap;
    if (h->wbuf_bytes > atomic_load_explicit(&h->wbuf_peak, memory_order_relaxed))
      atomic_store_explicit(&h->wbuf_peak, h->wbuf_bytes, memory_order_relaxed);
    c->wbuf = w;
    c->wcap = cap;
  }
  int was_empty = c->wlen == c->woff;
  memcpy(c->wbuf + c->wlen, buf, n);
  c->wlen += n;
  if (was_empty && flush) ah_coord_hub_conn_flush(h, c);
  else if (!flush && !c->dirty) {
    c->dirty = 1;
    c->dirty_next = h->dirty_list;
    h->dirty_list = c;
  }
}

/* Queues whole frames for a connection. Note that a channel's frames go, each wrapped in a
 * RELAY_DATA, to its relay's connection, sent when the loop's turn (or the fan-out) ends: a
 * segment reaching a host's 8 processes costs the hub one send(2), not 8 — nor 2, so a relay's
 * own frames wait for that send too (the relay process is woken once, not before and after). */
void ah_coord_hub_conn_send(ah_coord_hub_t *h, hub_conn_t *c, const void *buf, size_t n) {
  if (c->closing) return;
  if (!c->via) {
    hub_conn_queue(h, c, buf, n, c->nchans == 0);
    return;
  }
  const uint8_t *b = buf;
  size_t off = 0;
  while (off + AH_COORD_HDR_BYTES <= n) {
    size_t fl = AH_COORD_HDR_BYTES + ah_coord_get_u32(b + off);
    if (off + fl > n) break;
    uint8_t w[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED];
    ah_coord_hdr_encode(AH_MSG_RELAY_DATA, (uint32_t)(AH_COORD_RELAY_FIXED + fl), w);
    ah_coord_put_u32(w + AH_COORD_HDR_BYTES, c->chan);
    hub_conn_queue(h, c->via, w, sizeof w, 0);
    hub_conn_queue(h, c->via, b + off, fl, 0);
    off += fl;
  }
}

int ah_coord_hub_conn_admit(ah_coord_hub_t *h, hub_conn_t *c) {
  if (h->nall == h->capall) {
    int cap = h->capall ? 2 * h->capall : 64;
    hub_conn_t **all = realloc(h->all, (size_t)cap * sizeof *all);
    if (!all) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory accepting %s", h->addr, c->peer);
      return -1;
    }
    h->all = all;
    h->capall = cap;
  }
  h->all[h->nall++] = c;
  c->prev = h->pend_tail;
  if (h->pend_tail) h->pend_tail->next = c;
  else h->pend_head = c;
  h->pend_tail = c;
  h->npending++;
  if (h->npending > h->o.max_pending) {
    hub_conn_t *old = h->pend_head;
    ah_coord_hub_refuse(h, RATE_FLOOD,
                        "refused %s: %d unauthenticated connections held (connection "
                        "flood?); dropped the oldest",
                        old->peer, h->npending);
    ah_coord_hub_pend_unlink(h, old);
    ah_coord_hub_conn_close_later(h, old);
  }
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_HELLO, c->nonce, AH_COORD_NONCE_BYTES);
  return 0;
}

void ah_coord_hub_conn_send_msg(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type,
                                const uint8_t *payload, uint32_t len) {
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(type, len, f);
  if (len) memcpy(f + AH_COORD_HDR_BYTES, payload, len);
  ah_coord_hub_conn_send(h, c, f, AH_COORD_HDR_BYTES + len);
}
