/* ah_coord_hub_comm.c: the hub's communicators — created under the per-client caps and the hub's
 * memory budget (each table's growth charged to it first),
 * joined rank by rank with each rank's settings digest until the verdict (COMPLETE, ABANDONED or
 * MISMATCH) is decided once and sent to every member, and the segments the leader publishes,
 * retained for replay and forwarded to every connection joined to the communicator. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

/* What each member slot of a communicator costs the memory budget: the member and its connection's
 * place among the subscribers (there are never more subscribers than members' connections). */
#define MEMBER_BYTES (sizeof(hub_member_t) + sizeof(hub_conn_t *))
/* What each retained segment slot costs: the frame and its publisher. */
#define SEGMENT_BYTES (FRAME_SEGMENT_BYTES + sizeof(uint64_t))

/* Returns the communicator, created and charged to client cl when new; NULL when a cap or the
 * memory budget refuses it (logged, rate-limited) or memory runs out (logged). */
static hub_comm_t *hub_comm_get(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, uint64_t comm) {
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  if (m) return m;
  if (cl->ncomms >= h->o.max_client_comms) {
    ah_coord_hub_refuse(h, RATE_CAP_COMM,
                        "refused comm %016llx from %s: the client already holds %d communicators "
                        "(at most %d per client); its ranks run NCCL's own choices",
                        (unsigned long long)comm, c->peer, cl->ncomms, h->o.max_client_comms);
    return NULL;
  }
  if (ah_coord_hub_mem_take(h, sizeof *m) != 0) {
    ah_coord_hub_mem_refuse(h, RATE_CAP_COMM, sizeof *m, "its ranks run NCCL's own choices",
                            "comm %016llx from %s (the %d-th)", (unsigned long long)comm, c->peer,
                            h->ncomms + 1);
    return NULL;
  }
  m = calloc(1, sizeof *m);
  if (!m) {
    ah_coord_hub_mem_give(h, sizeof *m);
    ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory adding comm %016llx for %s", h->addr,
           (unsigned long long)comm, c->peer);
    return NULL;
  }
  m->comm = comm;
  m->owner = cl->id;
  cl->ncomms++;
  h->ncomms++;
  HASH_ADD(hh, h->comms, comm, sizeof(uint64_t), m);
  if (!AH_HASH_ADDED(m)) { /* out of memory: the caller refuses the message as for calloc */
    cl->ncomms--;
    h->ncomms--;
    ah_coord_hub_mem_give(h, sizeof *m);
    free(m);
    return NULL;
  }
  return m;
}

hub_client_t *ah_coord_hub_client_find(ah_coord_hub_t *h, uint64_t id) {
  hub_client_t *cl = NULL;
  HASH_FIND(hh, h->clients, &id, sizeof id, cl);
  return cl;
}

static void verdict_send(ah_coord_hub_t *h, hub_conn_t *c, const hub_comm_t *m) {
  uint8_t p[28];
  int mm = m->verdict == AH_COORD_VERDICT_MISMATCH;
  ah_coord_put_u64(p, m->comm);
  ah_coord_put_u32(p + 8, (uint32_t)m->verdict);
  ah_coord_put_u32(p + 12, mm ? m->mm.mask : 0);
  ah_coord_put_u32(p + 16, mm ? m->mm.ref_rank : 0);
  ah_coord_put_u32(p + 20, mm ? m->mm.first_rank : 0);
  ah_coord_put_u32(p + 24, mm ? m->mm.ndiffer : 0);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_VERDICT, p, sizeof p);
}

static void digest_count(hub_digest_t *g, uint32_t rank) {
  if (!g->n || rank < g->min_rank) g->min_rank = rank;
  g->n++;
}

/* Counts a newly joined rank under its settings digest. */
static void digest_add(hub_comm_t *m, uint32_t rank, const uint8_t *p) {
  ah_coord_digest_t d;
  for (int i = 0; i < AH_COORD_DIGEST_PARTS; i++) d.part[i] = ah_coord_get_u64(p + 8 * i);
  for (int i = 0; i < m->ndg; i++)
    if (memcmp(&m->dg[i].d, &d, sizeof d) == 0) {
      digest_count(&m->dg[i], rank);
      return;
    }
  if (m->ndg < HUB_DIGESTS) {
    m->dg[m->ndg].d = d;
    digest_count(&m->dg[m->ndg++], rank);
  } else {
    digest_count(&m->dg_more, rank);
  }
}

/* Whether the joined ranks' digests differ; if so fills m->mm. The reference is the digest of the
 * lowest rank (normally rank 0), whatever order the ranks joined in. */
static int digest_mismatch(hub_comm_t *m) {
  if (m->ndg + (m->dg_more.n > 0) <= 1) return 0;
  int ref = 0;
  for (int i = 1; i < m->ndg; i++)
    if (m->dg[i].min_rank < m->dg[ref].min_rank) ref = i;
  ah_coord_mismatch_t mm = {.ref_rank = m->dg[ref].min_rank, .first_rank = UINT32_MAX};
  for (int i = 0; i < m->ndg; i++) {
    if (i == ref) continue;
    for (int k = 0; k < AH_COORD_DIGEST_PARTS; k++)
      if (m->dg[i].d.part[k] != m->dg[ref].d.part[k]) mm.mask |= 1u << k;
    mm.ndiffer += m->dg[i].n;
    if (m->dg[i].min_rank < mm.first_rank) mm.first_rank = m->dg[i].min_rank;
  }
  if (m->dg_more.n) { /* digests not kept: which parts differ is unknown */
    mm.mask = (1u << AH_COORD_DIGEST_PARTS) - 1;
    mm.ndiffer += m->dg_more.n;
    if (m->dg_more.min_rank < mm.first_rank) mm.first_rank = m->dg_more.min_rank;
  }
  m->mm = mm;
  return 1;
}

/* Decides a communicator's verdict (once) and tells every connection joined to it. Later joiners
 * get it from ah_coord_hub_on_join. */
/* Decides m's verdict and sends it to every connection joined. */
static void verdict_set(ah_coord_hub_t *h, hub_comm_t *m, int verdict) {
  m->verdict = verdict;
  if (m->joined) { /* it was pending */
    hub_client_t *cl = ah_coord_hub_client_find(h, m->pending_by);
    if (cl) cl->npending--;
  }
  for (int i = 0; i < m->nsubs; i++) verdict_send(h, m->subs[i], m);
}

void ah_coord_hub_verdict_decide(ah_coord_hub_t *h, hub_comm_t *m, int verdict) {
  if (verdict == AH_COORD_VERDICT_COMPLETE && digest_mismatch(m))
    verdict = AH_COORD_VERDICT_MISMATCH;
  if (verdict == AH_COORD_VERDICT_COMPLETE)
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: comm %016llx: all %u ranks joined", h->addr,
           (unsigned long long)m->comm, m->nranks);
  else if (verdict == AH_COORD_VERDICT_MISMATCH) /* each rank's process names the difference */
    ah_log(AH_LOG_DEBUG,
           "coordinator hub %s: comm %016llx: %u ranks joined with other settings "
           "than rank %u",
           h->addr, (unsigned long long)m->comm, m->mm.ndiffer, m->mm.ref_rank);
  else /* rate-limited: forged communicators must not flood the log when their deadline passes */
    ah_coord_hub_refuse(h, RATE_VERDICT,
                        "comm %016llx: only %u of its %u ranks joined within %d ms; every "
                        "rank runs NCCL's own choices",
                        (unsigned long long)m->comm, m->njoined, m->nranks, h->o.join_ms);
  verdict_set(h, m, verdict);
}

/* Note that a JOIN is refused (and the connection dropped) when its rank is not below its rank
 * count, or when the count is 0 or above AH_COORD_MAX_RANKS: no legitimate rank sends these. One
 * whose count differs from the communicator's first JOIN is answered ABANDONED instead (see
 * ah_coord_hub_on_join). */
/* Tells one connection that a communicator the caps refused is abandoned: the rank then runs NCCL's
 * own choices at once, as if it never reached the hub, instead of waiting for a verdict. */
static void verdict_refuse(ah_coord_hub_t *h, hub_conn_t *c, uint64_t comm) {
  uint8_t p[28] = {0}; /* no mismatch evidence */
  ah_coord_put_u64(p, comm);
  ah_coord_put_u32(p + 8, (uint32_t)AH_COORD_VERDICT_ABANDONED);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_VERDICT, p, sizeof p);
}

/* A JOIN of m the memory budget had no room for (logged by the caller): m is ABANDONED for every
 * rank (so those joined do not wait out the join deadline for a rank that cannot be counted), the
 * sender is told, and m is freed when it has no member left to ask for it. */
static void budget_abandon(ah_coord_hub_t *h, hub_conn_t *c, hub_comm_t *m) {
  if (m->verdict == AH_COORD_VERDICT_NONE) verdict_set(h, m, AH_COORD_VERDICT_ABANDONED);
  verdict_refuse(h, c, m->comm);
  if (m->nmembers == 0 && m->nsubs == 0) ah_coord_hub_comm_free(h, m);
}

/* Records that client `id` has delivered comm m's segments up to `seq` (a member joins with its
 * JOIN's "since"). Returns 0, -1 when m already has `most` members, 1 when the memory budget has no
 * room for more, -2 when out of memory. */
static int member_note(ah_coord_hub_t *h, hub_comm_t *m, uint64_t id, uint64_t seq, uint32_t most) {
  for (int i = 0; i < m->nmembers; i++)
    if (m->members[i].client_id == id) {
      if (seq > m->members[i].delivered) m->members[i].delivered = seq;
      m->members[i].left = 0; /* it joins again */
      return 0;
    }
  if ((uint32_t)m->nmembers >= most) return -1;
  if (m->nmembers == m->capmembers) {
    int cap = m->capmembers ? 2 * m->capmembers : 4;
    size_t more = (size_t)(cap - m->capmembers) * MEMBER_BYTES;
    if (ah_coord_hub_mem_take(h, more) != 0) return 1;
    hub_member_t *ms = realloc(m->members, (size_t)cap * sizeof *ms);
    if (!ms) {
      ah_coord_hub_mem_give(h, more);
      return -2;
    }
    m->members = ms;
    m->capmembers = cap;
  }
  m->members[m->nmembers++] = (hub_member_t){id, seq, 0};
  return 0;
}

/* Drops the frames every member has delivered: no member can ask for them again (a reconnecting
 * client asks "since" what it delivered), so a long job's hub keeps only what is in flight.
 * Only once every rank joined (verdict COMPLETE): before that a process still to join would need
 * the frames from the first. Batched (64 frames, or half of what is kept) so the copy-down is
 * amortised. */
static void hub_comm_trim(ah_coord_hub_t *h, hub_comm_t *m) {
  if (m->nmembers == 0 || m->verdict != AH_COORD_VERDICT_COMPLETE) return;
  uint64_t low = UINT64_MAX;
  for (int i = 0; i < m->nmembers; i++)
    if (m->members[i].delivered < low) low = m->members[i].delivered;
  if (low <= m->frame_base) return;
  size_t drop = (size_t)(low - m->frame_base);
  if (drop > m->nframes) drop = m->nframes;
  if (drop < 64 && 2 * drop < m->nframes) return;
  for (size_t i = 0; i < drop; i++) {
    hub_client_t *pub = ah_coord_hub_client_find(h, m->frame_pub[i]);
    if (pub && pub->nframes > 0) pub->nframes--;
  }
  h->nframes -= drop;
  atomic_store_explicit(&h->nframes_seen, h->nframes, memory_order_relaxed);
  memmove(m->frames, m->frames + drop, (m->nframes - drop) * FRAME_SEGMENT_BYTES);
  memmove(m->frame_pub, m->frame_pub + drop, (m->nframes - drop) * sizeof *m->frame_pub);
  m->nframes -= drop;
  m->frame_base += drop;
}

void ah_coord_hub_on_join(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  uint32_t nranks = ah_coord_get_u32(p + 8);
  uint32_t rank = ah_coord_get_u32(p + 12);
  uint64_t since = ah_coord_get_u64(p + 16);
  if (nranks == 0 || nranks > AH_COORD_MAX_RANKS || (rank >= nranks && rank != AH_COORD_NO_RANK)) {
    ah_coord_hub_refuse(h, RATE_FRAME,
                        "refused a JOIN from %s: rank %u of %u ranks out of range (at most "
                        "%u ranks); connection dropped",
                        c->peer, rank, nranks, AH_COORD_MAX_RANKS);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  hub_comm_t *found = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, found);
  if (found && found->nranks && found->nranks != nranks) {
    /* Two rank counts for one communicator: a stale process of an earlier incarnation, a buggy
     * rank or a forged JOIN — which count is the real one, the hub cannot know. Refusing every JOIN
     * of the other count (and dropping their connections, which came straight back) left the real
     * ranks without a verdict for good: one frame hung the job. Instead a communicator not yet
     * decided is ABANDONED for every rank joined, and this connection is told so and kept, so every
     * rank runs NCCL's own choices whatever any peer sent. A decided one keeps its verdict. */
    ah_coord_hub_refuse(h, RATE_FRAME, "comm %016llx has %u ranks, a JOIN from %s says %u; %s",
                        (unsigned long long)comm, found->nranks, c->peer, nranks,
                        found->verdict == AH_COORD_VERDICT_NONE
                            ? "every rank of it runs NCCL's own choices"
                            : "that process's ranks run NCCL's own choices");
    if (found->verdict == AH_COORD_VERDICT_NONE) verdict_set(h, found, AH_COORD_VERDICT_ABANDONED);
    verdict_refuse(h, c, comm);
    return;
  }
  hub_comm_t *m = hub_comm_get(h, c, cl, comm);
  if (!m) {
    verdict_refuse(h, c, comm);
    return;
  }
  /* A process asking for segments every member delivered (and the hub dropped) never joined
   * before: its ranks could not agree with the others. Processes per communicator are capped (the
   * JOIN's rank count, already checked against the communicator's, + spares for a subscriber or a
   * reconnection under a new id). */
  uint64_t last = m->frame_base + m->nframes;
  if (since < m->frame_base) {
    ah_coord_hub_refuse(
        h, RATE_REPLAY,
        "%s asks for comm %016llx segments after %llu, but every member had "
        "delivered up to %llu and they were dropped; its ranks run NCCL's own choices",
        c->peer, (unsigned long long)comm, (unsigned long long)since,
        (unsigned long long)m->frame_base);
    verdict_refuse(h, c, comm);
    return;
  }
  int noted = member_note(h, m, cl->id, since > last ? last : since, nranks + HUB_MEMBERS_SPARE);
  if (noted == 1) {
    ah_coord_hub_mem_refuse(h, RATE_CAP_JOIN,
                            (size_t)(m->capmembers ? m->capmembers : 4) * MEMBER_BYTES,
                            "its ranks run NCCL's own choices",
                            "the members of comm %016llx (%d joined) for a JOIN from %s",
                            (unsigned long long)comm, m->nmembers, c->peer);
    budget_abandon(h, c, m);
    return;
  }
  if (noted == -2) goto oom;
  if (noted != 0) {
    ah_coord_hub_refuse(h, RATE_CAP_JOIN,
                        "refused a JOIN of comm %016llx from %s: %d processes joined it "
                        "already (at most its %u ranks + %d); its ranks run NCCL's own choices",
                        (unsigned long long)comm, c->peer, m->nmembers, nranks, HUB_MEMBERS_SPARE);
    verdict_refuse(h, c, comm);
    return;
  }
  if (!m->joined && rank != AH_COORD_NO_RANK && m->verdict == AH_COORD_VERDICT_NONE) {
    size_t bytes = (nranks + 7) / 8;
    if (cl->npending >= h->o.max_client_pending_joins) {
      ah_coord_hub_refuse(h, RATE_CAP_JOIN,
                          "refused a JOIN of comm %016llx (%u ranks) from %s: %d pending joins "
                          "of the client (at most %d); its ranks run NCCL's own choices",
                          (unsigned long long)comm, nranks, c->peer, cl->npending,
                          h->o.max_client_pending_joins);
      verdict_refuse(h, c, comm);
      return;
    }
    if (ah_coord_hub_mem_take(h, bytes) != 0) {
      ah_coord_hub_mem_refuse(h, RATE_CAP_JOIN, bytes, "its ranks run NCCL's own choices",
                              "the rank bitmap of comm %016llx (%u ranks) for a JOIN from %s",
                              (unsigned long long)comm, nranks, c->peer);
      budget_abandon(h, c, m);
      return;
    }
    m->joined = calloc(bytes, 1);
    if (!m->joined) {
      ah_coord_hub_mem_give(h, bytes);
      goto oom;
    }
    m->nranks = nranks;
    m->first_join_ns = ah_coord_now_ns();
    m->pending_by = cl->id;
    cl->npending++;
  }
  if (rank != AH_COORD_NO_RANK && !(m->joined[rank / 8] & (1u << (rank % 8)))) {
    m->joined[rank / 8] |= (uint8_t)(1u << (rank % 8));
    m->njoined++;
    if (m->verdict == AH_COORD_VERDICT_NONE) digest_add(m, rank, p + 24);
  }
  int already = 0;
  for (int i = 0; i < c->ncomms; i++) already |= c->comms[i] == comm;
  if (!already) {
    if (c->ncomms == c->capcomms) {
      int cap = c->capcomms ? 2 * c->capcomms : 4;
      uint64_t *cs = realloc(c->comms, (size_t)cap * sizeof *cs);
      if (!cs) goto oom;
      c->comms = cs;
      c->capcomms = cap;
    }
    if (m->nsubs == m->capsubs) { /* charged with the members (MEMBER_BYTES) */
      int cap = m->capsubs ? 2 * m->capsubs : 8;
      hub_conn_t **ss = realloc(m->subs, (size_t)cap * sizeof *ss);
      if (!ss) goto oom;
      m->subs = ss;
      m->capsubs = cap;
    }
    c->comms[c->ncomms++] = comm;
    m->subs[m->nsubs++] = c;
  }
  /* the search's shortest times go to rank 0's process; set once c is a subscriber, so an
   * out-of-memory close above never leaves m pointing at a freed connection */
  if (rank == 0) m->leader = c;
  ah_log(AH_LOG_DEBUG,
         "coordinator hub %s: %s joined comm %016llx (rank %u of %u; %u joined) "
         "since %llu of %llu",
         h->addr, c->peer, (unsigned long long)comm, rank, nranks, m->njoined,
         (unsigned long long)since, (unsigned long long)last);
  if (since > last)
    ah_coord_hub_refuse(h, RATE_REPLAY,
                        "%s asks for comm %016llx segments after %llu, but only %llu exist (a "
                        "different job's hub?); replaying none",
                        c->peer, (unsigned long long)comm, (unsigned long long)since,
                        (unsigned long long)last);
  else if (since < last) /* the stored frames are contiguous: one copy, one send */
    ah_coord_hub_conn_send(h, c, m->frames[since - m->frame_base],
                           (size_t)(last - since) * FRAME_SEGMENT_BYTES);
  /* The verdict after the replay; a connection joining again (another local rank, a reconnection)
   * simply gets it again, and the client keeps the first. */
  if (m->verdict != AH_COORD_VERDICT_NONE) verdict_send(h, c, m);
  else if (m->joined && m->njoined == m->nranks)
    ah_coord_hub_verdict_decide(h, m, AH_COORD_VERDICT_COMPLETE);
  ah_coord_hub_health_joined(h, m, c, cl, rank);
  return;
oom:
  ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory joining %s to comm %016llx", h->addr,
         c->peer, (unsigned long long)comm);
  ah_coord_hub_conn_close_later(h, c);
}

void ah_coord_hub_comm_free(ah_coord_hub_t *h, hub_comm_t *m) {
  HASH_DEL(h->comms, m);
  hub_client_t *owner = ah_coord_hub_client_find(h, m->owner);
  if (owner && owner->ncomms > 0) owner->ncomms--;
  h->ncomms--;
  for (size_t i = 0; i < m->nframes; i++) {
    hub_client_t *pub = ah_coord_hub_client_find(h, m->frame_pub[i]);
    if (pub && pub->nframes > 0) pub->nframes--;
  }
  h->nframes -= m->nframes;
  atomic_store_explicit(&h->nframes_seen, h->nframes, memory_order_relaxed);
  /* everything its growth was charged for (ah_coord_hub_health.c charges prog and strag) */
  size_t held = sizeof *m + (size_t)m->capmembers * MEMBER_BYTES + m->capframes * SEGMENT_BYTES;
  if (m->prog) held += (size_t)m->nranks * sizeof *m->prog;
  held += m->strag_charged;
  if (m->joined) held += (m->nranks + 7) / 8;
  ah_coord_hub_mem_give(h, held);
  if (m->joined) {
    if (m->verdict == AH_COORD_VERDICT_NONE) { /* still pending */
      hub_client_t *cl = ah_coord_hub_client_find(h, m->pending_by);
      if (cl && cl->npending > 0) cl->npending--;
    }
  }
  ah_coord_hub_gather_free(h, m);
  ah_coord_hub_health_free(h, m);
  ah_coord_hub_link_comm_free(m);
  ah_coord_hub_nic_comm_free(m);
  ah_strag_free(m->strag);
  free(m->joined);
  free(m->frames);
  free(m->frame_pub);
  free(m->members);
  free(m->prog);
  free(m->subs);
  free(m);
}

/* Note that a communicator every member left is freed: a job that splits and destroys
 * communicators by the thousand otherwise filled its processes' communicator cap (1,024 per
 * client) with destroyed ones, and the next were refused. A member whose connection dropped has
 * not left (it may reconnect and ask for what it missed). */
void ah_coord_hub_on_leave(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i] == comm) {
      c->comms[i] = c->comms[--c->ncomms];
      break;
    }
  if (!m) return;
  ah_coord_hub_comm_unsub(m, c);
  int staying = 0;
  for (int i = 0; i < m->nmembers; i++) {
    if (m->members[i].client_id == c->client_id) m->members[i].left = 1;
    staying += !m->members[i].left;
  }
  /* undecided: a peer's JOIN may still come, and must find the ranks joined so far */
  if (m->nmembers > 0 && staying == 0 && m->nsubs == 0 && m->verdict != AH_COORD_VERDICT_NONE)
    ah_coord_hub_comm_free(h, m);
}

hub_client_t *ah_coord_hub_client_get(ah_coord_hub_t *h, uint64_t id, const char *peer) {
  hub_client_t *cl = NULL;
  HASH_FIND(hh, h->clients, &id, sizeof id, cl);
  if (cl) return cl;
  /* Kept for the job's life (its publish numbering must survive reconnections), so charged: a
   * holder of the secret authenticating under ever new ids would otherwise grow the hub. */
  if (ah_coord_hub_mem_take(h, sizeof *cl) != 0) {
    ah_coord_hub_mem_refuse(h, RATE_AUTH, sizeof *cl,
                            "it is refused (its process runs NCCL's own choices)",
                            "the record of client %016llx from %s", (unsigned long long)id, peer);
    return NULL;
  }
  cl = calloc(1, sizeof *cl);
  if (cl) {
    cl->id = id;
    HASH_ADD(hh, h->clients, id, sizeof(uint64_t), cl);
    if (AH_HASH_ADDED(cl)) return cl;
    free(cl);
  }
  ah_coord_hub_mem_give(h, sizeof *cl);
  ah_log(AH_LOG_ERROR, "coordinator hub %s: cannot answer %s (out of memory)", h->addr, peer);
  return NULL;
}

/* Note that publishes are numbered per client and the hub remembers the last one applied across
 * connections: a client that lost its connection resends what was not acknowledged, and a
 * resent segment the hub already has is acknowledged again but not stored or forwarded twice. */
void ah_coord_hub_on_publish(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p) {
  char err[160];
  uint64_t pub = ah_coord_get_u64(p);
  ah_key_t k;
  ah_segment_t s;
  if (ah_coord_keyseg_unpack(p + 8, &k, &s, err, sizeof err) != 0) {
    ah_coord_hub_refuse(h, RATE_FRAME, "refused a segment from %s: %s; connection dropped", c->peer,
                        err);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  uint8_t ack[8];
  ah_coord_put_u64(ack, pub);
  if (pub <= cl->last_pub) {
    ah_coord_hub_conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  if (cl->nframes >= h->o.max_client_segments) {
    /* Acknowledged so the client does not resend it, but neither stored nor forwarded. */
    ah_coord_hub_refuse(h, RATE_CAP_SEGMENT,
                        "refused a segment of comm %016llx from %s: %zu segments retained for "
                        "the client (at most %zu); its ranks wait for it, then run NCCL's own "
                        "choice for the call",
                        (unsigned long long)k.comm, c->peer, cl->nframes, h->o.max_client_segments);
    cl->last_pub = pub;
    ah_coord_hub_conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  hub_comm_t *m = hub_comm_get(h, c, cl, k.comm);
  if (!m) {
    cl->last_pub = pub;
    ah_coord_hub_conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  if (m->nframes == m->capframes) {
    size_t cap = m->capframes ? 2 * m->capframes : 8;
    if (ah_coord_hub_mem_take(h, (cap - m->capframes) * SEGMENT_BYTES) != 0) {
      ah_coord_hub_mem_refuse(h, RATE_CAP_SEGMENT, (cap - m->capframes) * SEGMENT_BYTES,
                              "its ranks wait for it, then run NCCL's own choice for the call",
                              "room for %zu more segments of comm %016llx (%zu retained) from %s",
                              cap - m->capframes, (unsigned long long)k.comm, m->nframes, c->peer);
      cl->last_pub = pub;
      ah_coord_hub_conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
      return;
    }
    void *f = realloc(m->frames, cap * FRAME_SEGMENT_BYTES);
    if (!f) {
      ah_coord_hub_mem_give(h, (cap - m->capframes) * SEGMENT_BYTES);
      goto oom;
    }
    m->frames = f;
    uint64_t *fp = realloc(m->frame_pub, cap * sizeof *fp);
    if (!fp) {
      ah_coord_hub_mem_give(h, (cap - m->capframes) * SEGMENT_BYTES);
      goto oom;
    }
    m->frame_pub = fp;
    m->capframes = cap;
  }
  uint8_t *f = m->frames[m->nframes];
  ah_coord_hdr_encode(AH_MSG_SEGMENT, 8 + AH_COORD_KEYSEG_BYTES, f);
  ah_coord_put_u64(f + AH_COORD_HDR_BYTES, m->frame_base + m->nframes + 1);
  memcpy(f + AH_COORD_HDR_BYTES + 8, p + 8, AH_COORD_KEYSEG_BYTES);
  m->frame_pub[m->nframes] = cl->id;
  m->nframes++;
  cl->nframes++;
  h->nframes++;
  atomic_store_explicit(&h->nframes_seen, h->nframes, memory_order_relaxed);
  cl->last_pub = pub;
  struct timespec cpu0,
      cpu1; /* the thread's CPU time: the fan-out's cost, apart from waiting for a CPU */
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu0);
  for (int i = 0; i < m->nsubs; i++) ah_coord_hub_conn_send(h, m->subs[i], f, FRAME_SEGMENT_BYTES);
  ah_coord_hub_flush_dirty(
      h); /* the relays' connections: one send each for their channels' copies */
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu1);
  uint32_t nf = atomic_load_explicit(&h->nfan, memory_order_relaxed);
  atomic_store_explicit(&h->fan_ns[nf % HUB_FAN_RING], ah_coord_now_ns() - h->frame_rx_ns,
                        memory_order_relaxed);
  atomic_store_explicit(
      &h->fan_cpu_ns[nf % HUB_FAN_RING],
      (uint64_t)((cpu1.tv_sec - cpu0.tv_sec) * 1000000000ll + (cpu1.tv_nsec - cpu0.tv_nsec)),
      memory_order_relaxed);
  atomic_store_explicit(&h->nfan, nf + 1, memory_order_release);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
  return;
oom:
  ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory storing a segment from %s", h->addr,
         c->peer);
  ah_coord_hub_conn_close_later(h, c);
}

/* A member reports what it has delivered; what every member has delivered is dropped. A report
 * for a communicator the client never joined, or beyond what exists, is refused (and the
 * connection dropped): no legitimate client sends one. */
void ah_coord_hub_on_delivered(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                               const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p), seq = ah_coord_get_u64(p + 8);
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  int member = 0;
  for (int i = 0; m && i < m->nmembers && !member; i++) member = m->members[i].client_id == cl->id;
  if (!member || seq > m->frame_base + m->nframes) {
    ah_coord_hub_refuse(h, RATE_DELIVERED,
                        "refused a DELIVERED from %s: comm %016llx segment %llu (%s); "
                        "connection dropped",
                        c->peer, (unsigned long long)comm, (unsigned long long)seq,
                        !member ? "not a member" : "beyond the segments that exist");
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  (void)member_note(h, m, cl->id, seq, UINT32_MAX); /* a member already: no growth */
  hub_comm_trim(h, m);
}
