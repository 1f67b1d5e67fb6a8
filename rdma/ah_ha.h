/* ah_ha.h: the bookkeeping behind autoha's transparent RDMA failover (docs/ha.md) — per primary
 * queue pair, a log of the send work requests posted and not yet known delivered, a log of the
 * receives posted and not yet completed, and the replay rule: given how many receive-consuming
 * messages the peer took on the failed primary, which sends were delivered (their lost completions
 * are synthesized) and which are replayed, in order, on the shadow.
 *
 * Pure logic (rdma/ah_ha_*.c, like path/): no verbs calls. The shim (rdma/rdma_ha_data.c) copies each work
 * request into these logs (one scatter/gather entry, as NCCL's net_ib posts) in posting order; RC
 * completes signalled sends, and receives, in posting order, so a completion names its entry by its
 * place. Key choice: an entry is 64 bytes laid out as the verbs work request is, so the shim fills
 * it with a few wide copies, and the sequence numbers of the signalled entries are kept in a ring
 * beside it, so that a completion retires with a counter bump instead of a search. */
#ifndef AH_HA_H
#define AH_HA_H

#include <stddef.h>
#include <stdint.h>

#define AH_HA_INLINE_MAX 64 /* inline payload kept for a replay (NCCL's inline CTS is 64 bytes) */

/* The opcodes of a send WR as the log keeps them (IBV_WR_* values of verbs.h, mirrored so that this
 * folder needs no verbs header; rdma_ha_int.h checks they agree). */
enum {
  AH_HA_WR_RDMA_WRITE = 0,
  AH_HA_WR_RDMA_WRITE_WITH_IMM = 1,
  AH_HA_WR_SEND = 2,
  AH_HA_WR_SEND_WITH_IMM = 3,
  AH_HA_WR_RDMA_READ = 4,
};

#define AH_HA_SIGNALED 2u /* IBV_SEND_SIGNALED */

/* One posted send work request, as replayed: 64 bytes, one cache line. Note that the fields from
 * num_sge to imm, from raddr to rkey and from addr to lkey mirror struct ibv_send_wr's and struct
 * ibv_sge's layout (the shim checks it at compile time) so that the data path copies each group in
 * one move; an inline payload lives in the log's side array (ah_ha_slog_inl), not here. */
typedef struct {
  uint64_t wr_id;      /* the caller's */
  int num_sge;         /* 0 or 1 replayable (the shim marks a QP posting more unprotected) */
  int opcode;          /* AH_HA_WR_* */
  unsigned send_flags; /* IBV_SEND_* */
  uint32_t imm;        /* as posted (network order) */
  uint64_t raddr;
  uint32_t rkey, rsv; /* rsv: the verbs struct's reserved word, copied along */
  uint64_t addr;
  uint32_t length, lkey;
  uint64_t cons; /* receive-consuming messages posted on this QP up to and including this one */
} ah_ha_swr_t;

/* One posted receive (32 bytes; addr..lkey mirror struct ibv_sge). */
typedef struct {
  uint64_t wr_id;
  int num_sge; /* 0 or 1 */
  uint32_t rsv;
  uint64_t addr;
  uint32_t length, lkey;
} ah_ha_rwr_t;

/* A ring of send WRs: [tail, head) are posted and not known delivered; sequence numbers are
 * free-running from 0. The sequence numbers of the live signalled entries are in sig[] between
 * sig_tail and nsig (free-running too, same capacity): the next send completion retires up to
 * sig[sig_tail]. */
typedef struct {
  ah_ha_swr_t *e;
  uint64_t *sig;
  uint8_t (*inl)
      [AH_HA_INLINE_MAX]; /* IBV_SEND_INLINE: the bytes of entry seq, since the caller may reuse them */
  uint32_t cap;
  uint64_t head, tail;
  uint64_t lim; /* tail + cap: the log is full when head reaches it */
  uint64_t nsig, sig_tail;
  uint64_t cons; /* consuming messages posted so far (the newest entry's cons) */
  int sig_all;   /* the QP signals every WR (sq_sig_all) */
} ah_ha_slog_t;

/* A ring of receives: [tail, head) posted and not completed successfully, in posting order. */
typedef struct {
  ah_ha_rwr_t *e;
  uint32_t cap;
  uint64_t head, tail;
  uint64_t done; /* receives completed successfully (the messages this side took) */
} ah_ha_rlog_t;

/* 1 when a send with this opcode consumes a receive at the responder (SEND, SEND_WITH_IMM,
 * RDMA_WRITE_WITH_IMM), else 0. */
static inline int ah_ha_consumes(int opcode) {
  return opcode == AH_HA_WR_SEND || opcode == AH_HA_WR_SEND_WITH_IMM ||
         opcode == AH_HA_WR_RDMA_WRITE_WITH_IMM;
}

/* Allocates a log of at least `cap` entries (rounded up to a power of two, so that the shim finds an
 * entry with a mask: l->e[seq & (l->cap - 1)]). Returns 0, or -1 when out of memory. */
int ah_ha_slog_init(ah_ha_slog_t *l, uint32_t cap);
int ah_ha_rlog_init(ah_ha_rlog_t *l, uint32_t cap);
void ah_ha_slog_free(ah_ha_slog_t *l);
void ah_ha_rlog_free(ah_ha_rlog_t *l);

/* The consuming messages among the retired entries [0, tail): the ones posted less the live ones'
 * (computed, so that retiring stays a counter bump). */
uint64_t ah_ha_slog_cons_tail(const ah_ha_slog_t *l);

/* Free entries. */
static inline uint32_t ah_ha_slog_room(const ah_ha_slog_t *l) {
  return l->cap - (uint32_t)(l->head - l->tail);
}
static inline uint32_t ah_ha_rlog_room(const ah_ha_rlog_t *l) {
  return l->cap - (uint32_t)(l->head - l->tail);
}

/* Appends a copy of *w (its cons is filled in here). Returns the entry's sequence number; the log
 * must have room (ah_ha_slog_room). */
uint64_t ah_ha_slog_push(ah_ha_slog_t *l, const ah_ha_swr_t *w);
/* Forgets the entries pushed after sequence `seq` (exclusive): a post that failed part-way. */
void ah_ha_slog_unpush(ah_ha_slog_t *l, uint64_t seq);
/* The live entry with sequence seq, or NULL when it is retired or not yet pushed. */
ah_ha_swr_t *ah_ha_slog_at(ah_ha_slog_t *l, uint64_t seq);
/* A signalled WR completed successfully: it and every earlier entry are delivered and retired.
 * Returns the number retired (0 when seq is already retired). */
uint32_t ah_ha_slog_retire(ah_ha_slog_t *l, uint64_t seq);
/* 1 when the entry asks for a completion. */
static inline int ah_ha_swr_signaled(const ah_ha_slog_t *l, const ah_ha_swr_t *e) {
  return l->sig_all || (e->send_flags & AH_HA_SIGNALED);
}
/* The inline payload kept for entry seq (AH_HA_INLINE_MAX bytes). */
static inline uint8_t *ah_ha_slog_inl(ah_ha_slog_t *l, uint64_t seq) {
  return l->inl[seq & (l->cap - 1)];
}
/* ah_ha_slog_complete_next without the ring: searches the live entries (sig_all set after the
 * entries were pushed). Returns as ah_ha_slog_complete_next does. */
int64_t ah_ha_slog_complete_scan(ah_ha_slog_t *l);
/* The next successful send completion of the QP arrived: RC completes signalled sends in posting
 * order, so it is the oldest live signalled entry; it and everything before it are retired.
 * Returns that entry's sequence number, or -1 when the log holds no signalled entry (the log and
 * the QP disagree; nothing is retired).
 * Note that this is on the data path for every send completion: the ring of signalled entries
 * names the entry, so retiring is a few loads and stores. */
static inline int64_t ah_ha_slog_complete_next(ah_ha_slog_t *l) {
  if (__builtin_expect(l->sig_tail == l->nsig, 0)) return ah_ha_slog_complete_scan(l);
  uint64_t s = l->sig[l->sig_tail++ & (l->cap - 1)];
  l->tail = s + 1;
  l->lim = s + 1 + l->cap;
  return (int64_t)s;
}

uint64_t ah_ha_rlog_push(ah_ha_rlog_t *l, const ah_ha_rwr_t *w);
void ah_ha_rlog_unpush(ah_ha_rlog_t *l, uint64_t seq);
ah_ha_rwr_t *ah_ha_rlog_at(ah_ha_rlog_t *l, uint64_t seq);
/* The receive `seq` completed successfully. Returns 0, or -1 when it is not the oldest one (RC
 * completes receives in order, so this means the log and the QP disagree). */
int ah_ha_rlog_complete(ah_ha_rlog_t *l, uint64_t seq);
/* The next successful receive completion of the QP arrived (RC completes receives in posting
 * order: it is the oldest). Returns 0, or -1 when no receive is live (nothing is retired). */
static inline int ah_ha_rlog_complete_next(ah_ha_rlog_t *l) {
  if (__builtin_expect(l->tail == l->head, 0)) return -1;
  l->tail++;
  l->done++;
  return 0;
}

/* The replay plan after the primary failed, the peer having taken `peer_done` receive-consuming
 * messages on it: *first_replay_p is the first sequence number to post again (entries before it
 * were delivered: the signalled ones among them get a synthesized success completion, in order);
 * [*first_replay_p, head) are replayed in order.
 * Returns 0, or -1 when peer_done is outside what this log can explain (fewer than the messages
 * retired as delivered, or more than were ever posted): then nothing can be replayed safely.
 * Note that RDMA WRITEs after the last delivered consuming message are replayed even if they were
 * placed: they target memory the peer has not been told about yet, so writing it again is
 * harmless, and RDMA READs are idempotent. */
int ah_ha_replay_plan(const ah_ha_slog_t *l, uint64_t peer_done, uint64_t *first_replay_p);

#endif
