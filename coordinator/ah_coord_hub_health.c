/* The hub's diagnosis (docs/diagnosis.md): it keeps every rank's latest progress record per
 * communicator and, at each tick of its loop (50 ms), looks for a communicator none of whose ranks
 * has advanced for hang_ms; it classifies that stall from the records (ah_coord_health.c) and sends the one-line
 * finding to every process of the communicator, once per stall, and says when it advances again.
 * Records are kept only for communicators whose every rank joined (COMPLETE), from members, and
 * within the hub's memory budget (ah_coord_hub_mem.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_coord_status.h"
#include "ah_log.h"

static void standing_set(ah_coord_hub_t *h, hub_comm_t *m, int kind, const ah_finding_t *f);

/* Whether a rank's calls advanced between two of its records (its state alone changing is not
 * progress: a probe completing says nothing new was entered). */
static int advanced(const ah_health_rec_t *a, const ah_health_rec_t *b) {
  if (a->nkeys != b->nkeys) return 1;
  for (int i = 0; i < a->nkeys; i++)
    if (a->keys[i].coll != b->keys[i].coll || a->keys[i].bin != b->keys[i].bin ||
        a->keys[i].entered != b->keys[i].entered)
      return 1;
  return 0;
}

/* The communicator a PROGRESS or SAMPLES about `rank` may speak of: one the sender joined, that
 * is COMPLETE, with that rank joined. NULL after refusing the message (named by `what`, with err
 * when its body was malformed) and dropping the connection; NULL without a word when a member
 * sends it for a communicator that is not COMPLETE (not yet: its health thread may tick before the
 * last rank has joined; or never: only COMPLETE communicators are diagnosed). */
static hub_comm_t *sender_comm(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, uint64_t comm,
                               uint32_t rank, const char *what, char *err, size_t errlen) {
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  int member = 0;
  for (int i = 0; m && i < m->nmembers && !member; i++) member = m->members[i].client_id == cl->id;
  if (!err[0]) {
    if (!member) snprintf(err, errlen, "comm %016llx not joined", (unsigned long long)comm);
    else if (m->verdict != AH_COORD_VERDICT_COMPLETE) return NULL;
    else if (rank >= m->nranks || !(m->joined[rank / 8] & (1u << (rank % 8))))
      snprintf(err, errlen, "rank %u of comm %016llx (%u ranks)", rank, (unsigned long long)comm,
               m->nranks);
  }
  if (!err[0]) return m;
  ah_coord_hub_refuse(h, RATE_PROGRESS, "refused a %s from %s: %s; connection dropped", what,
                      c->peer, err);
  ah_coord_hub_conn_close_later(h, c);
  return NULL;
}

void ah_coord_hub_on_progress(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                              const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  ah_health_rec_t rec;
  char err[160] = "";
  (void)ah_health_rec_unpack(p + 8, &rec, err, sizeof err);
  hub_comm_t *m = sender_comm(h, c, cl, comm, rec.rank, "PROGRESS", err, sizeof err);
  if (!m) return;
  uint64_t now = ah_coord_now_ns();
  atomic_fetch_add_explicit(&h->nrecords, 1, memory_order_relaxed);
  if (!m->prog) {
    if (m->prog_off) return; /* refused once, said once: not diagnosed */
    size_t bytes = (size_t)m->nranks * sizeof *m->prog;
    if (ah_coord_hub_mem_take(h, bytes) != 0) {
      m->prog_off = 1;
      ah_coord_hub_mem_refuse(h, RATE_PROGRESS, bytes,
                              "it is not diagnosed (no hang findings: NCCL's own watchdog only)",
                              "the progress records of comm %016llx's %u ranks",
                              (unsigned long long)comm, m->nranks);
      return;
    }
    if (!(m->prog = calloc(m->nranks, sizeof *m->prog))) {
      ah_coord_hub_mem_give(h, bytes);
      return; /* not diagnosed; the job goes on */
    }
    m->advanced_ns = now;
  }
  hub_prog_t *s = &m->prog[rec.rank];
  int moved = !s->have || advanced(&s->rec, &rec);
  if (!s->have) ah_coord_hub_conn_host(c, s->host, sizeof s->host);
  s->rec = rec;
  s->have = 1;
  s->rx_ns = now;
  s->client_id = cl->id;
  s->gone_ns = 0;
  s->left = 0;
  if (s->said == AH_FINDING_STOPPED) { /* its process runs again */
    s->said = 0;
    ah_finding_t f = {.kind = AH_FINDING_RESUMED};
    snprintf(f.text, sizeof f.text, "comm %016llx: rank %u responds again",
             (unsigned long long)comm, rec.rank);
    ah_coord_hub_finding_send(h, m, &f);
    if (m->finding == AH_FINDING_STOPPED) standing_set(h, m, 0, NULL);
  }
  if (!moved) return;
  m->advanced_ns = now;
  if (m->finding && m->finding != AH_FINDING_DIED) { /* the dead stay dead */
    ah_finding_t f = {.kind = AH_FINDING_RESUMED};
    snprintf(f.text, sizeof f.text, "comm %016llx advances again (rank %u)",
             (unsigned long long)comm, rec.rank);
    ah_coord_hub_finding_send(h, m, &f);
    standing_set(h, m, 0, NULL);
  }
}

/* A process gone without a goodbye is dead once it has not come back within this (a connection
 * the hub closed, or one whose host relay went away, is back within a few hundred ms; 2 s leaves
 * room for a loaded machine, where a relay's death makes every process of the host elect a new
 * one and run its handshake again). */
#define GONE_GRACE_NS 2000000000ull
/* After a stall of the hub's own, every process cut its connection and retries on its own clock
 * (at most a second apart once the hub stayed silent long: ah_coord_client_io.c LONG_RETRY_MS), and
 * each attempt under way waits up to its connect timeout: their connections read as closed by
 * their peers, and come back over a few seconds. */
#define GONE_GRACE_STALL_NS 6000000000ull

/* A connection its peer closed after this long without a byte from it: a client that gave up on a
 * hub it could not hear (it does after 6 s of silence), not a process that died mid-stream. */
#define CLOSE_QUIET_NS 4000000000ull

int ah_coord_hub_stalled(const ah_coord_hub_t *h, uint64_t now) {
  return h->stall_ns && now - h->stall_ns < 10000000000ull;
}

/* m's finding for the current stall is f, of kind `kind` (0: none stands any more). */
static void standing_set(ah_coord_hub_t *h, hub_comm_t *m, int kind, const ah_finding_t *f) {
  m->finding = kind;
  if (!kind) {
    ah_coord_hub_health_free(h, m);
    return;
  }
  snprintf(m->finding_text, sizeof m->finding_text, "%s", f->text);
  if (!m->standing && ah_coord_hub_mem_take(h, sizeof *m->standing) == 0 &&
      !(m->standing = malloc(sizeof *m->standing)))
    ah_coord_hub_mem_give(h, sizeof *m->standing);
  if (m->standing) *m->standing = *f; /* else it is not told again: the budget refused 1 KiB */
}

void ah_coord_hub_health_free(ah_coord_hub_t *h, hub_comm_t *m) {
  if (!m->standing) return;
  free(m->standing);
  m->standing = NULL;
  ah_coord_hub_mem_give(h, sizeof(ah_finding_t));
}

void ah_coord_hub_health_joined(ah_coord_hub_t *h, hub_comm_t *m, hub_conn_t *c, hub_client_t *cl,
                                uint32_t rank) {
  if (m->prog && rank < m->nranks) {
    hub_prog_t *s = &m->prog[rank];
    /* back before its grace ran out: not dead (a dead process never joins again) */
    if (s->have && s->client_id == cl->id && s->gone_ns && s->said != AH_FINDING_DIED)
      s->gone_ns = 0;
  }
  if (!m->standing) return;
  uint8_t p[8 + AH_FINDING_BYTES];
  ah_coord_put_u64(p, m->comm);
  ah_finding_pack(m->standing, p + 8);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_FINDING, p, sizeof p);
}

static int lost_ranks(ah_coord_hub_t *h, hub_comm_t *m, uint64_t now, int kind);

void ah_coord_hub_health_client(ah_coord_hub_t *h, hub_conn_t *c, uint64_t comm, int gone) {
  uint64_t now = ah_coord_now_ns();
  for (int i = 0; i < c->ncomms; i++) {
    if (comm && c->comms[i] != comm) continue;
    hub_comm_t *m = NULL;
    HASH_FIND(hh, h->comms, &c->comms[i], sizeof(uint64_t), m);
    for (uint32_t r = 0; m && m->prog && r < m->nranks; r++) {
      hub_prog_t *s = &m->prog[r];
      if (!s->have || s->client_id != c->client_id) continue;
      if (!gone) {
        s->left = 1;
      } else if (!s->gone_ns) {
        s->gone_ns = now;
        /* Its peer closed the connection: the process's sockets closed as it died, while it was
         * sending (its records come every second). A client that reconnects closes it too, but
         * only after a hub it could not hear: after a stall of the hub's own, or after a network
         * cut that kept its records from the hub as well — its close then comes after seconds of
         * silence (CLOSE_QUIET_NS), when the cut heals. A connection the hub closed (a refusal,
         * its relay's connection lost) comes back within a few hundred ms when its process
         * lives, and so does one whose client said RECONNECT before closing it (a cut it asked
         * for: corrupt bytes from the hub or its relay's ring). */
        int quiet = now - c->last_rx_ns > CLOSE_QUIET_NS, reconnect = c->reconnecting;
        s->gone_grace_ns = ah_coord_hub_stalled(h, now)     ? GONE_GRACE_STALL_NS
                           : c->eof && !quiet && !reconnect ? 0
                                                            : GONE_GRACE_NS;
      }
    }
    /* said at once, not at the next tick: the survivors' NCCL may fail them out of the job first */
    if (gone && m && m->prog && h->o.hang_ms > 0) (void)lost_ranks(h, m, now, AH_FINDING_DIED);
  }
}

void ah_coord_hub_on_samples(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  ah_health_sample_t x[AH_HEALTH_SAMPLES];
  uint32_t rank = 0;
  char err[160] = "";
  int n = ah_health_samples_unpack(p + 8, &rank, x, err, sizeof err);
  hub_comm_t *m = sender_comm(h, c, cl, comm, rank, "SAMPLES", err, sizeof err);
  if (!m || h->o.straggler_pct <= 0 || m->nranks < 3) return; /* two ranks: no one is typical */
  atomic_fetch_add_explicit(&h->nrecords, 1, memory_order_relaxed);
  if (!m->strag) {
    if (m->strag_off) return; /* the budget refused its windows once: not looked for again */
    if (!(m->strag = ah_strag_new(m->nranks, h->o.straggler_pct))) return;
  }
  /* Charged as it grows: a key's windows and a call's slot are allocated when first used, a
   * detector that had every one allocated for 16 keys would be 4.5 KiB a rank (docs/coordinator.md
   * "Memory budget"). What outgrows the budget is freed at once and never made again. */
  size_t before = m->strag_charged;
  uint64_t now = ah_coord_now_ns();
  for (int i = 0; i < n; i++) ah_strag_add(m->strag, rank, &x[i], now);
  size_t after = ah_strag_held(m->strag);
  if (after > before && ah_coord_hub_mem_take(h, after - before) != 0) {
    ah_coord_hub_mem_refuse(h, RATE_PROGRESS, after - before, "its stragglers are not looked for",
                            "the straggler windows of comm %016llx's %u ranks",
                            (unsigned long long)comm, m->nranks);
    ah_coord_hub_mem_give(h, before);
    ah_strag_free(m->strag);
    m->strag = NULL;
    m->strag_charged = 0;
    m->strag_off = 1;
    return;
  }
  if (after < before) ah_coord_hub_mem_give(h, before - after);
  m->strag_charged = after;
  ah_strag_event_t ev;
  while (ah_strag_next(m->strag, &ev)) {
    char who[96];
    ah_coord_hub_rank_place(m, ev.rank, who, sizeof who);
    ah_finding_t f = {.kind = ev.flagged ? AH_FINDING_STRAGGLER : AH_FINDING_RECOVERED,
                      .has_call = 1,
                      .coll = ev.coll,
                      .bin = ev.bin,
                      .index = ev.index};
    ah_strag_text(m->comm, &ev, who, f.text);
    const hub_prog_t *s = m->prog ? &m->prog[ev.rank] : NULL;
    ah_finding_add_rank(&f, ev.rank, s && s->have ? &s->rec : NULL, s ? s->host : NULL);
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
    ah_coord_hub_finding_send(h, m, &f);
  }
}

/* A rank whose records (one a second) stopped for 5 s — NCCL RAS calls a peer unresponsive after
 * 5 s too — or for the hang threshold when that is shorter (at least 3 s), while another rank's are
 * fresh (younger than FRESH_NS), stopped responding — provided its communicator has not advanced
 * for as long either, and the hub's own loop ran all that time. A collective needs every rank, so
 * a communicator whose ranks still enter calls has no frozen rank in it: a record that late comes
 * from a process starved of CPU on an overloaded host, or from a hub that was not scheduled (at
 * load 40 on 2 cores both happened, and two healthy ranks were named beside the frozen one). A
 * hang is not classified while a rank's record is not fresh: its last record may be from before
 * its process froze. */
#define STALE_MAX_NS 5000000000ull
#define STALE_MIN_NS 3000000000ull
#define FRESH_NS 2500000000ull

/* Names the ranks of m that died (kind AH_FINDING_DIED) or stopped responding (_STOPPED) and were
 * not named yet. Returns 1 when m has such a rank, named now or before: a hang then is theirs. */
static int lost_ranks(ah_coord_hub_t *h, hub_comm_t *m, uint64_t now, int kind) {
  uint64_t stale_ns = (uint64_t)h->o.hang_ms * 1000000ull;
  stale_ns = stale_ns > STALE_MAX_NS   ? STALE_MAX_NS
             : stale_ns < STALE_MIN_NS ? STALE_MIN_NS
                                       : stale_ns;
  uint32_t nfresh = 0, nlost = 0, nnew = 0;
  for (uint32_t r = 0; r < m->nranks; r++) {
    const hub_prog_t *s = &m->prog[r];
    if (s->have && !s->gone_ns && now - s->rx_ns < FRESH_NS) nfresh++;
  }
  /* see above: the communicator went on, or the hub's loop stalled, within the window */
  int judge = now - m->advanced_ns > stale_ns && !(h->stall_ns && now - h->stall_ns < stale_ns);
  ah_finding_t f = {.kind = kind};
  uint64_t age = 0;
  for (uint32_t r = 0; r < m->nranks; r++) {
    hub_prog_t *s = &m->prog[r];
    int lost =
        kind == AH_FINDING_DIED
            ? s->have && !s->left && s->gone_ns && now - s->gone_ns >= s->gone_grace_ns
            : s->have && !s->left && !s->gone_ns && now - s->rx_ns > stale_ns && nfresh && judge;
    if (!lost) continue;
    nlost++;
    if (s->said == kind) continue;
    s->said = kind;
    nnew++;
    ah_finding_add_rank(&f, r, &s->rec, s->host);
    uint64_t a = now - (kind == AH_FINDING_DIED ? s->gone_ns : s->rx_ns);
    if (a > age) age = a;
  }
  if (!nnew) return nlost > 0;
  char who[120] = "", place[96];
  size_t off = 0;
  for (uint32_t i = 0; i < f.nranks && i < 2 && off < sizeof who; i++) {
    ah_coord_hub_rank_place(m, f.ranks[i].rank, place, sizeof place);
    off += (size_t)snprintf(who + off, sizeof who - off, "%s%u (%s)", i ? "," : "", f.ranks[i].rank,
                            place);
  }
  if (f.nranks > 2 && off < sizeof who)
    snprintf(who + off, sizeof who - off, " +%u more", f.nranks - 2);
  char line[512]; /* cut to the finding's bound below (two named ranks fit it) */
  if (kind == AH_FINDING_DIED)
    snprintf(line, sizeof line,
             "comm %016llx: rank %s died: its process left the hub without a goodbye %.1f s ago "
             "(killed, crashed, or its host went down)",
             (unsigned long long)m->comm, who, (double)age / 1e9);
  else
    snprintf(line, sizeof line,
             "comm %016llx: rank %s stopped responding: no progress record for %.0f s while %u "
             "other ranks send theirs (process frozen, or its host overloaded or cut off)",
             (unsigned long long)m->comm, who, (double)age / 1e9, nfresh);
  snprintf(f.text, sizeof f.text, "%.*s", (int)sizeof f.text - 1, line);
  ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
  ah_coord_hub_finding_send(h, m, &f);
  if (!m->finding || m->finding == AH_FINDING_STOPPED) standing_set(h, m, kind, &f);
  return 1;
}

void ah_coord_hub_health_tick(ah_coord_hub_t *h, uint64_t now) {
  if (h->last_tick_ns && now - h->last_tick_ns > 1000000000ull) h->stall_ns = now;
  h->last_tick_ns = now;
  if (h->o.hang_ms <= 0) return;
  uint64_t hang_ns = (uint64_t)h->o.hang_ms * 1000000ull;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog) continue;
    /* the dead first: a process that stopped responding may be one whose goodbye never came */
    int lost = lost_ranks(h, m, now, AH_FINDING_DIED);
    lost |= lost_ranks(h, m, now, AH_FINDING_STOPPED);
    /* a hub that stalled saw nothing meanwhile: the hang is counted from its waking at most */
    uint64_t since = m->advanced_ns > h->stall_ns ? m->advanced_ns : h->stall_ns;
    if (lost || m->finding || now - since < hang_ns || now < m->recheck_ns) continue;
    int late = 0; /* a record not fresh: wait until it is, or its rank is named as lost */
    for (uint32_t r = 0; r < m->nranks && !late; r++)
      late = m->prog[r].have && !m->prog[r].left && now - m->prog[r].rx_ns > FRESH_NS;
    if (late) continue;
    ah_health_rank_t *ranks = calloc(m->nranks, sizeof *ranks);
    if (!ranks) return;
    for (uint32_t r = 0; r < m->nranks; r++)
      ranks[r] = (ah_health_rank_t){m->prog[r].have ? &m->prog[r].rec : NULL, m->prog[r].host};
    ah_finding_t f;
    int kind =
        ah_health_classify(m->comm, ranks, m->nranks, (double)(now - m->advanced_ns) / 1e9, &f);
    free(ranks);
    if (kind == AH_FINDING_NONE) { /* the job waits outside NCCL: look again in a second */
      m->recheck_ns = now + 1000000000ull;
      continue;
    }
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
    ah_coord_hub_finding_send(h, m, &f);
    standing_set(h, m, kind, &f);
  }
}

/* A share as tenths of a percent, within int16_t. */
static int16_t permille(double x) {
  double v = x * 1000.0;
  return (int16_t)(v > 30000 ? 30000 : v < -30000 ? -30000 : (v < 0 ? v - 0.5 : v + 0.5));
}

void ah_coord_hub_on_status(ah_coord_hub_t *h, hub_conn_t *c) {
  uint64_t now = ah_coord_now_ns();
  uint32_t n = 0;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog) continue;
    n++;
    ah_status_comm_t sc = {.comm = m->comm,
                           .nranks = m->nranks,
                           .verdict = (uint8_t)m->verdict,
                           .finding = (uint8_t)m->finding,
                           .stalled_ms = (uint32_t)((now - m->advanced_ns) / 1000000ull)};
    if (m->finding) snprintf(sc.text, sizeof sc.text, "%s", m->finding_text);
    else if (!(sc.finding = (uint8_t)ah_coord_hub_nic_status(m, sc.text, sizeof sc.text)))
      sc.finding = (uint8_t)ah_coord_hub_link_status(m, sc.text, sizeof sc.text); /* no hang */
    uint8_t p[AH_STATUS_RANK_BYTES > AH_STATUS_COMM_BYTES ? AH_STATUS_RANK_BYTES
                                                          : AH_STATUS_COMM_BYTES];
    ah_status_comm_pack(&sc, p);
    ah_coord_hub_conn_send_msg(h, c, AH_MSG_STATUS_COMM, p, AH_STATUS_COMM_BYTES);
    for (uint32_t r = 0; r < m->nranks; r++) {
      const hub_prog_t *s = &m->prog[r];
      ah_status_rank_t sr = {.comm = m->comm, .rank = r, .have = (uint8_t)s->have, .gpu = 0xffff};
      if (s->have) {
        sr.state = s->left                         ? AH_STATUS_LEFT
                   : s->said == AH_FINDING_DIED    ? AH_STATUS_DEAD
                   : s->said == AH_FINDING_STOPPED ? AH_STATUS_SILENT
                                                   : s->rec.state;
        for (int k = 0; k < s->rec.nkeys; k++) sr.entered += s->rec.keys[k].entered;
        sr.age_ms = (uint32_t)((now - s->rx_ns) / 1000000ull);
        sr.pid = s->rec.pid;
        sr.gpu = s->rec.gpu;
        snprintf(sr.host, sizeof sr.host, "%s", s->host);
      }
      if (m->strag) {
        ah_strag_stats_t st;
        ah_strag_stats(m->strag, r, &st);
        sr.straggler = (uint8_t)st.flagged;
        sr.late_calls = (uint8_t)st.calls;
        sr.late_p50 = permille(st.late_p50);
        sr.late_p90 = permille(st.late_p90);
        double w = st.wait_share * 1000.0;
        sr.wait_share = (uint16_t)(w > 1000 ? 1000 : w < 0 ? 0 : w + 0.5);
      }
      ah_status_rank_pack(&sr, p);
      ah_coord_hub_conn_send_msg(h, c, AH_MSG_STATUS_RANK, p, AH_STATUS_RANK_BYTES);
    }
  }
  uint8_t e[4];
  ah_coord_put_u32(e, n);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_STATUS_END, e, sizeof e);
}
