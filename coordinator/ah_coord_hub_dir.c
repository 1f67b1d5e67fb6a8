/* ah_coord_hub_dir.c: the hub's key/value directory — DIR_PUT stores a value under a 32-byte key
 * (replacing the key's earlier one) and DIR_GET answers with it, at once when the key is stored,
 * else with DIR_ABSENT at once and the value when a put of it arrives within the get's wait. A key someone waits for has an entry without a value that holds
 * its waiters, so a put finds them without a scan.
 *
 * Key choice: the directory is bounded like everything else an authenticated client makes the hub
 * keep — stored bytes per job and per client id, waiters per job and per connection — and a
 * message the hub cannot use (a malformed value length, a put beyond a bound) is refused with one
 * rate-limited line and dropped, never the connection: the framing is intact, and the job's
 * schedule segments travel on the same connection. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

/* Bookkeeping charged per stored entry on top of its key and value: a put of an empty value still
 * costs the hub an entry. */
#define DIR_ENTRY_OVERHEAD 64

typedef struct hub_dir_wait {
  struct hub_dir *e;
  hub_conn_t *conn;
  uint64_t req;
  uint64_t deadline_ns;
  struct hub_dir_wait *knext, *kprev; /* the key's waiters */
  struct hub_dir_wait *cnext, *cprev; /* the connection's waiters */
} hub_dir_wait_t;

typedef struct hub_dir {
  uint8_t key[AH_COORD_DIR_KEY];
  int have; /* a value is stored (else only waiters are) */
  uint16_t vlen;
  uint8_t *val;
  uint64_t owner; /* client id charged for it: the last writer */
  hub_dir_wait_t *waits;
  UT_hash_handle hh;
} hub_dir_t;

static size_t dir_charge(size_t vlen) { return AH_COORD_DIR_KEY + vlen + DIR_ENTRY_OVERHEAD; }
/* What a waiting DIR_GET costs the memory budget: itself, and the entry of its key it may have
 * created (freed with the last wait when no value came). */
#define WAIT_BYTES (sizeof(hub_dir_wait_t) + sizeof(hub_dir_t))

/* The first 8 bytes of a key in hex, for log lines. */
static void dir_key_text(const uint8_t *key, char out[17]) {
  for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", key[i]);
}

static void dir_send_val(ah_coord_hub_t *h, hub_conn_t *c, uint64_t req, const hub_dir_t *e) {
  uint8_t p[AH_COORD_MAX_PAYLOAD];
  ah_coord_put_u64(p, req);
  memcpy(p + 8, e->key, AH_COORD_DIR_KEY);
  p[8 + AH_COORD_DIR_KEY] = (uint8_t)(e->vlen >> 8);
  p[8 + AH_COORD_DIR_KEY + 1] = (uint8_t)e->vlen;
  if (e->vlen) memcpy(p + AH_COORD_DIR_VAL_FIXED, e->val, e->vlen);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_DIR_VAL, p, AH_COORD_DIR_VAL_FIXED + e->vlen);
}

/* Tells the client that key was not stored when its get req was read: with it, the client knows
 * a miss from an answer still on its way through a busy relay or hub, and a caller that waits only
 * milliseconds never takes a late answer for a missing key. */
static void dir_send_absent(ah_coord_hub_t *h, hub_conn_t *c, uint64_t req, const uint8_t *key) {
  uint8_t p[AH_COORD_DIR_ABSENT_BYTES];
  ah_coord_put_u64(p, req);
  memcpy(p + 8, key, AH_COORD_DIR_KEY);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_DIR_ABSENT, p, sizeof p);
}

/* Unlinks a waiter from its key and its connection and frees it; frees the key's entry too when it
 * holds neither a value nor other waiters. */
static void dir_wait_drop(ah_coord_hub_t *h, hub_dir_wait_t *w) {
  hub_dir_t *e = w->e;
  if (w->kprev) w->kprev->knext = w->knext;
  else e->waits = w->knext;
  if (w->knext) w->knext->kprev = w->kprev;
  if (w->cprev) w->cprev->cnext = w->cnext;
  else w->conn->dir_waits = w->cnext;
  if (w->cnext) w->cnext->cprev = w->cprev;
  w->conn->ndir_waits--;
  h->ndir_waits--;
  free(w);
  ah_coord_hub_mem_give(h, WAIT_BYTES);
  if (!e->have && !e->waits) {
    HASH_DEL(h->dir, e);
    free(e);
  }
}

/* Note that the value's length is checked against the frame's before anything is stored, and that
 * replacing a value moves its charge to the new writer (a key has one writer in practice; the
 * bound holds either way). */
void ah_coord_hub_on_dir_put(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p,
                             uint32_t len) {
  char err[200], kt[17];
  int vlen = ah_coord_dir_vlen(p, len, AH_COORD_DIR_KEY, err, sizeof err);
  if (vlen < 0) {
    ah_coord_hub_refuse(h, RATE_DIR, "refused a DIR_PUT from %s: %s; message dropped", c->peer,
                        err);
    return;
  }
  dir_key_text(p, kt);
  hub_dir_t *e = NULL;
  HASH_FIND(hh, h->dir, p, AH_COORD_DIR_KEY, e);
  size_t old = e && e->have ? dir_charge(e->vlen) : 0;
  size_t mine = cl->dir_bytes - (e && e->have && e->owner == cl->id ? old : 0);
  size_t add = dir_charge((size_t)vlen);
  if (mine + add > h->o.max_client_dir_bytes) {
    ah_coord_hub_refuse(h, RATE_DIR,
                        "refused a DIR_PUT of key %s… from %s: the directory would hold %zu "
                        "bytes for this client (at most %zu); not stored",
                        kt, c->peer, mine + add, h->o.max_client_dir_bytes);
    return;
  }
  size_t grow = add > old ? add - old : 0; /* a smaller value gives back below */
  if (grow && ah_coord_hub_mem_take(h, grow) != 0) {
    ah_coord_hub_mem_refuse(h, RATE_DIR, grow, "not stored (a get of it finds it absent)",
                            "refused a DIR_PUT of key %s… from %s: its entry", kt, c->peer);
    return;
  }
  uint8_t *val = malloc(vlen ? (size_t)vlen : 1);
  if (!e) e = calloc(1, sizeof *e);
  if (!val || !e) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory storing a directory key from %s",
           h->addr, c->peer);
    ah_coord_hub_mem_give(h, grow);
    free(val);
    if (e && !e->have && !e->waits) free(e); /* a fresh one, never added */
    return;
  }
  if (!e->have && !e->waits) { /* fresh */
    memcpy(e->key, p, AH_COORD_DIR_KEY);
    HASH_ADD(hh, h->dir, key, AH_COORD_DIR_KEY, e);
  }
  if (e->have) {
    hub_client_t *prev = ah_coord_hub_client_find(h, e->owner);
    if (prev) prev->dir_bytes -= old;
    h->dir_bytes -= old;
    free(e->val);
  }
  memcpy(val, p + AH_COORD_DIR_PUT_FIXED, (size_t)vlen);
  e->val = val;
  e->vlen = (uint16_t)vlen;
  e->have = 1;
  e->owner = cl->id;
  cl->dir_bytes += add;
  h->dir_bytes += add;
  if (old > add) ah_coord_hub_mem_give(h, old - add);
  while (e->waits) {
    hub_dir_wait_t *w = e->waits;
    dir_send_val(h, w->conn, w->req, e);
    dir_wait_drop(h, w);
  }
}

/* Note that a get that finds the key answers at once, with nothing kept; one that must wait is
 * kept for at most its own timeout (the client gives up then too), so an abandoned request costs
 * the hub one entry for a bounded time. */
void ah_coord_hub_on_dir_get(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  uint64_t req = ah_coord_get_u64(p);
  uint32_t timeout_ms = ah_coord_get_u32(p + 8);
  const uint8_t *key = p + 12;
  hub_dir_t *e = NULL;
  HASH_FIND(hh, h->dir, key, AH_COORD_DIR_KEY, e);
  if (e && e->have) {
    dir_send_val(h, c, req, e);
    return;
  }
  dir_send_absent(h, c, req, key); /* and a DIR_VAL later if a put comes within the wait */
  if (timeout_ms == 0) return;
  char kt[17];
  dir_key_text(key, kt);
  if (c->ndir_waits >= h->o.max_conn_dir_waits) {
    ah_coord_hub_refuse(h, RATE_DIR,
                        "refused a DIR_GET of key %s… from %s: %d requests wait on this "
                        "connection (at most %d); the request is dropped",
                        kt, c->peer, c->ndir_waits, h->o.max_conn_dir_waits);
    return;
  }
  if (ah_coord_hub_mem_take(h, WAIT_BYTES) != 0) {
    ah_coord_hub_mem_refuse(h, RATE_DIR, WAIT_BYTES,
                            "the request is dropped (its caller finds no answer)",
                            "refused a DIR_GET of key %s… from %s: its wait", kt, c->peer);
    return;
  }
  hub_dir_wait_t *w = calloc(1, sizeof *w);
  int fresh = !e;
  if (fresh) e = calloc(1, sizeof *e);
  if (!w || !e) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory keeping a directory request of %s",
           h->addr, c->peer);
    ah_coord_hub_mem_give(h, WAIT_BYTES);
    free(w);
    if (fresh) free(e);
    return;
  }
  if (fresh) {
    memcpy(e->key, key, AH_COORD_DIR_KEY);
    HASH_ADD(hh, h->dir, key, AH_COORD_DIR_KEY, e);
  }
  w->e = e;
  w->conn = c;
  w->req = req;
  w->deadline_ns = ah_coord_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  w->knext = e->waits;
  if (e->waits) e->waits->kprev = w;
  e->waits = w;
  w->cnext = c->dir_waits;
  if (c->dir_waits) c->dir_waits->cprev = w;
  c->dir_waits = w;
  c->ndir_waits++;
  h->ndir_waits++;
}

void ah_coord_hub_dir_conn_gone(ah_coord_hub_t *h, hub_conn_t *c) {
  while (c->dir_waits) dir_wait_drop(h, c->dir_waits);
}

/* Note that the connections' lists of waiters are walked, not the directory: a tick costs the
 * connections plus the waiting requests, however many keys are stored. */
void ah_coord_hub_dir_tick(ah_coord_hub_t *h, uint64_t now) {
  if (h->ndir_waits == 0) return;
  for (int i = 0; i < h->nall; i++) {
    hub_dir_wait_t *w = h->all[i]->dir_waits;
    while (w) {
      hub_dir_wait_t *next = w->cnext; /* dropping w frees it, never the next one */
      if (now >= w->deadline_ns) dir_wait_drop(h, w);
      w = next;
    }
  }
}

void ah_coord_hub_dir_free(ah_coord_hub_t *h) {
  hub_dir_t *e, *et;
  HASH_ITER(hh, h->dir, e, et) {
    while (e->waits) { /* left only if a connection outlived hub_close_now */
      hub_dir_wait_t *w = e->waits;
      e->waits = w->knext;
      free(w);
    }
    HASH_DEL(h->dir, e);
    free(e->val);
    free(e);
  }
  ah_coord_hub_mem_give(h, h->dir_bytes + (size_t)h->ndir_waits * WAIT_BYTES);
  h->dir_bytes = 0;
  h->ndir_waits = 0;
}
