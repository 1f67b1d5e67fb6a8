/* ah_ha_log.c: the send and receive logs of a shadowed queue pair and the replay rule (ah_ha.h).
 * Fixed-size rings indexed by free-running sequence numbers, so that an entry is found with a mask,
 * and a ring of the signalled entries' numbers beside the send log, so that a completion retires
 * without a search; nothing here allocates after init, since the shim appends on NCCL's data path. */
#include <stdlib.h>
#include <string.h>

#include "ah_ha.h"

/* The smallest power of two >= n (at least 1): entries are found with a mask, not a division. */
static uint32_t pow2_at_least(uint32_t n) {
  uint32_t c = 1;
  while (c < n && c < (1u << 31)) c <<= 1;
  return c;
}

int ah_ha_slog_init(ah_ha_slog_t *l, uint32_t cap) {
  memset(l, 0, sizeof *l);
  l->cap = pow2_at_least(cap);
  l->e = calloc(l->cap, sizeof *l->e);
  l->sig = calloc(l->cap, sizeof *l->sig);
  l->inl = calloc(l->cap, sizeof *l->inl);
  l->lim = l->cap;
  if (l->e && l->sig && l->inl) return 0;
  ah_ha_slog_free(l);
  return -1;
}

int ah_ha_rlog_init(ah_ha_rlog_t *l, uint32_t cap) {
  memset(l, 0, sizeof *l);
  l->cap = pow2_at_least(cap);
  l->e = calloc(l->cap, sizeof *l->e);
  return l->e ? 0 : -1;
}

void ah_ha_slog_free(ah_ha_slog_t *l) {
  free(l->e);
  free(l->sig);
  free(l->inl);
  l->e = NULL;
  l->sig = NULL;
  l->inl = NULL;
}

void ah_ha_rlog_free(ah_ha_rlog_t *l) {
  free(l->e);
  l->e = NULL;
}

uint64_t ah_ha_slog_push(ah_ha_slog_t *l, const ah_ha_swr_t *w) {
  uint64_t seq = l->head++;
  ah_ha_swr_t *e = &l->e[seq & (l->cap - 1)];
  *e = *w;
  l->cons += (uint64_t)ah_ha_consumes(w->opcode);
  e->cons = l->cons;
  if (ah_ha_swr_signaled(l, e)) l->sig[l->nsig++ & (l->cap - 1)] = seq;
  return seq;
}

void ah_ha_slog_unpush(ah_ha_slog_t *l, uint64_t seq) {
  while (l->head > seq && l->head > l->tail) {
    l->head--;
    l->cons -= (uint64_t)ah_ha_consumes(l->e[l->head & (l->cap - 1)].opcode);
  }
  while (l->nsig > l->sig_tail && l->sig[(l->nsig - 1) & (l->cap - 1)] >= l->head) l->nsig--;
}

ah_ha_swr_t *ah_ha_slog_at(ah_ha_slog_t *l, uint64_t seq) {
  return seq >= l->tail && seq < l->head ? &l->e[seq & (l->cap - 1)] : NULL;
}

uint32_t ah_ha_slog_retire(ah_ha_slog_t *l, uint64_t seq) {
  if (seq < l->tail || seq >= l->head) return 0;
  uint32_t n = (uint32_t)(seq + 1 - l->tail);
  l->tail = seq + 1;
  l->lim = seq + 1 + l->cap;
  while (l->sig_tail < l->nsig && l->sig[l->sig_tail & (l->cap - 1)] <= seq) l->sig_tail++;
  return n;
}

int64_t ah_ha_slog_complete_scan(ah_ha_slog_t *l) {
  for (uint64_t s = l->tail; s < l->head; s++)
    if (ah_ha_swr_signaled(l, &l->e[s & (l->cap - 1)])) {
      ah_ha_slog_retire(l, s);
      return (int64_t)s;
    }
  return -1;
}

uint64_t ah_ha_rlog_push(ah_ha_rlog_t *l, const ah_ha_rwr_t *w) {
  uint64_t seq = l->head++;
  l->e[seq & (l->cap - 1)] = *w;
  return seq;
}

void ah_ha_rlog_unpush(ah_ha_rlog_t *l, uint64_t seq) {
  if (seq >= l->tail && seq < l->head) l->head = seq;
}

ah_ha_rwr_t *ah_ha_rlog_at(ah_ha_rlog_t *l, uint64_t seq) {
  return seq >= l->tail && seq < l->head ? &l->e[seq & (l->cap - 1)] : NULL;
}

int ah_ha_rlog_complete(ah_ha_rlog_t *l, uint64_t seq) {
  if (seq != l->tail || l->tail == l->head) return -1;
  l->tail++;
  l->done++;
  return 0;
}

uint64_t ah_ha_slog_cons_tail(const ah_ha_slog_t *l) {
  uint64_t live = 0;
  for (uint64_t s = l->tail; s < l->head; s++)
    live += (uint64_t)ah_ha_consumes(l->e[s & (l->cap - 1)].opcode);
  return l->cons - live;
}

int ah_ha_replay_plan(const ah_ha_slog_t *l, uint64_t peer_done, uint64_t *first_replay_p) {
  const uint64_t cons_tail = ah_ha_slog_cons_tail(l);
  if (peer_done < cons_tail || peer_done > l->cons) return -1;
  uint64_t first = l->tail;
  if (peer_done > cons_tail) {
    /* the entry holding the peer_done-th consuming message: it and everything before it arrived */
    for (uint64_t s = l->tail; s < l->head; s++) {
      const ah_ha_swr_t *e = &l->e[s & (l->cap - 1)];
      if (ah_ha_consumes(e->opcode) && e->cons == peer_done) {
        first = s + 1;
        break;
      }
    }
  }
  *first_replay_p = first;
  return 0;
}
