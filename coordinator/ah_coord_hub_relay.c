/* ah_coord_hub_relay.c: the hub's side of a host relay — one authenticated client connection that
 * carries the connections of the other processes of its host as numbered channels (RELAY_OPEN,
 * RELAY_DATA, RELAY_CLOSE; docs/coordinator.md "Host relay").
 *
 * Key choice: a channel is a connection like any other, without a socket. It starts
 * unauthenticated, gets its own HELLO and must prove the job secret with its own AUTH, has its own
 * client id, joins, publishes and is bounded exactly like a TCP client; only its bytes travel
 * inside the relay's connection. So every guarantee of the hub holds per process, and the relay
 * only forwards whole frames it cannot forge a proof for. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

static hub_conn_t *relay_chan_find(hub_conn_t *r, uint32_t chan) {
  for (int i = 0; i < r->nchans; i++)
    if (r->chans[i]->chan == chan) return r->chans[i];
  return NULL;
}

/* A local process connected to the relay: a new unauthenticated connection, greeted with HELLO.
 * Beyond HUB_RELAY_CHANS, or out of memory, the channel is refused with a RELAY_CLOSE (that process
 * connects to the hub directly) and the relay kept. */
static void relay_open(ah_coord_hub_t *h, hub_conn_t *r, uint32_t chan) {
  if (relay_chan_find(r, chan)) {
    ah_coord_hub_refuse(h, RATE_RELAY,
                        "refused relay %s: channel %u opened twice; connection dropped", r->peer,
                        chan);
    ah_coord_hub_conn_close_later(h, r);
    return;
  }
  hub_conn_t *c = NULL;
  if (r->nchans == r->capchans && r->nchans < HUB_RELAY_CHANS) {
    int cap = r->capchans ? 2 * r->capchans : 8;
    hub_conn_t **cs = realloc(r->chans, (size_t)cap * sizeof *cs);
    if (cs) {
      r->chans = cs;
      r->capchans = cap;
    }
  }
  if (r->nchans < r->capchans) c = calloc(1, sizeof *c);
  if (c) {
    c->fd = -1;
    c->via = r;
    c->chan = chan;
    snprintf(c->peer, sizeof c->peer, "%.40s channel %u", r->peer, chan);
    c->accepted_ns = c->last_rx_ns = ah_coord_now_ns();
    if (ah_coord_random(c->nonce, sizeof c->nonce) != 0) {
      free(c);
      c = NULL;
    }
  }
  if (c) {
    r->chans[r->nchans++] = c;
    if (ah_coord_hub_conn_admit(h, c) == 0) return;
    r->nchans--;
    free(c);
  }
  ah_coord_hub_refuse(
      h, RATE_RELAY, "refused channel %u of relay %s: %s; that process connects directly", chan,
      r->peer, r->nchans >= HUB_RELAY_CHANS ? "too many channels" : "out of memory");
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED];
  ah_coord_hdr_encode(AH_MSG_RELAY_CLOSE, AH_COORD_RELAY_FIXED, f);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES, chan);
  ah_coord_hub_conn_send(h, r, f, sizeof f);
}

hub_conn_t *ah_coord_hub_relay_on_frame(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type,
                                        const uint8_t *p, uint32_t len, uint8_t *itype_p,
                                        const uint8_t **ip_p, uint32_t *ilen_p) {
  if (c->fd < 0) { /* a channel does not relay (the relay refuses such a frame itself) */
    ah_coord_hub_refuse(h, RATE_RELAY,
                        "refused %s: message type %u inside a relay's channel; connection dropped",
                        c->peer, type);
    ah_coord_hub_conn_close_later(h, c);
    return NULL;
  }
  uint32_t chan = ah_coord_get_u32(p);
  if (type == AH_MSG_RELAY_OPEN) {
    relay_open(h, c, chan);
    return NULL;
  }
  hub_conn_t *ch = relay_chan_find(c, chan);
  if (!ch) return NULL; /* closed here while the relay's frame was in flight */
  if (type == AH_MSG_RELAY_CLOSE) {
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s disconnected", h->addr, ch->peer);
    hub_conn_t *r = ch->via;
    ch->via = NULL; /* the relay knows: no RELAY_CLOSE back */
    ch->eof = 1;    /* its process's socket to the relay closed */
    for (int i = 0; i < r->nchans; i++)
      if (r->chans[i] == ch) {
        r->chans[i] = r->chans[--r->nchans];
        break;
      }
    ah_coord_hub_conn_close_later(h, ch);
    return NULL;
  }
  char err[200];
  ah_coord_hdr_t hd;
  const uint8_t *in = p + AH_COORD_RELAY_FIXED;
  uint32_t inlen = len - AH_COORD_RELAY_FIXED;
  if (ah_coord_hdr_decode(in, &hd, err, sizeof err) != 0 ||
      (hd.len != inlen - AH_COORD_HDR_BYTES &&
       snprintf(err, sizeof err, "a frame of %u bytes declaring %u", inlen,
                hd.len + AH_COORD_HDR_BYTES)) ||
      ((hd.type == AH_MSG_RELAY_OPEN || hd.type == AH_MSG_RELAY_DATA ||
        hd.type == AH_MSG_RELAY_CLOSE) &&
       snprintf(err, sizeof err, "message type %u inside a relay's channel", hd.type))) {
    ah_coord_hub_refuse(h, RATE_FRAME, "refused %s: %s; connection dropped", ch->peer, err);
    ah_coord_hub_conn_close_later(h, ch);
    return NULL;
  }
  ch->last_rx_ns = ah_coord_now_ns();
  *itype_p = hd.type;
  *ip_p = in + AH_COORD_HDR_BYTES;
  *ilen_p = hd.len;
  return ch;
}
