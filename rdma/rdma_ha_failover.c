/* rdma_ha_failover.c: failing a connection over to its standby (docs/ha.md, "Failover" and
 * "Replay"): the queue pair carrying the traffic (NCCL's, or the shadow a previous failover moved it
 * to) is moved to ERR and drained with markers, the two ends publish how many messages each took,
 * and once the standby is ready the switch hands NCCL synthesized completions for what the peer
 * confirmed, re-posts the receives and replays the rest in order on the standby, which carries the
 * traffic from then on while a new standby is built. A peer's doorbell starts this side's failover
 * when its own carrier shows no error. */
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_env.h"
#include "rdma_ha_int.h"

static enum ibv_wc_opcode ha_wc_opcode(int wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM: return IBV_WC_SEND;
    default: return IBV_WC_RDMA_WRITE;
  }
}

static void give_error(ha_qp_t *m, const char *why) {
  atomic_store(&m->state, HA_BROKEN);
  m->fo_step = FO_NONE;
  ah_log_dev(m->gpu, AH_LOG_WARN, "HA: QP %u cannot fail over (%s); NCCL gets the error", m->qpn,
             why);
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.qp_num = m->qpn;
  if (m->slog.head > m->slog.tail) {
    ah_ha_swr_t *e = ah_ha_slog_at(&m->slog, m->slog.tail);
    for (uint64_t s = m->slog.tail; s < m->slog.head; s++)
      if (m->slog.e[s & (m->slog.cap - 1)].send_flags & IBV_SEND_SIGNALED) {
        e = &m->slog.e[s & (m->slog.cap - 1)];
        break;
      }
    wc.wr_id = e->wr_id;
    wc.status = IBV_WC_RETRY_EXC_ERR;
    wc.opcode = ha_wc_opcode(e->opcode);
    ah_shim_ha_synth_push(m->hc, m->send_cq, &wc);
  } else if (m->rlog.head > m->rlog.tail) {
    wc.wr_id = m->rlog.e[m->rlog.tail & (m->rlog.cap - 1)].wr_id;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    ah_shim_ha_synth_push(m->hc, m->recv_cq, &wc);
  }
}

/* What a failover publishes: the count of messages this end took (final: its carrier is drained),
 * and the generation of the standby it will switch to (0: none ready yet). Both ends switch only
 * when they name the same one; the lower moves up to the higher. */
typedef struct {
  uint64_t done;
  uint32_t gen, pad;
} fail_rec_t;

/* The directory key of the count the failover of m's carrier publishes (mine: this side's; else
 * the peer's). Carriers are connected pairwise, so both ends' carriers have one generation. */
static void fail_key(uint8_t key[HA_KEY], const ha_qp_t *m, int mine) {
  uint32_t kind = ha_kind_gen(KIND_FAIL, m->sh_gen + 1);
  if (mine) ah_shim_ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, kind);
  else ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, kind);
}

/* Rings the doorbell of m's peer's GID ("a peer of yours failed over": rdma_ha_failover.c's
 * ah_shim_ha_notice_check there looks for this side's record) and sets when to look again. */
static void ring_peer(ha_qp_t *m, double t) {
  uint8_t key[HA_KEY];
  uint64_t nonce = (uint64_t)(ha_now_s() * 1e9) ^ ((uint64_t)m->qpn << 32) ^ (uint64_t)getpid();
  ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, 0, 0, KIND_NOTE);
  ah_shim_ha_dir_put(key, &nonce, sizeof nonce);
  m->fo_ring = t + m->fo_ring_gap;
  m->fo_ring_gap = m->fo_ring_gap * 2 > HA_RING_MAX_S ? HA_RING_MAX_S : m->fo_ring_gap * 2;
}

/* The peer has published no failover record of this carrier's generation yet (found: 0 when the
 * caller's own look found none; -1: look now): ring its doorbell again when due. A ring can still
 * be missed — the peer's look-ups get no answer within the coordinator's slack on a machine loaded
 * enough, or another carrier's ring replaces the nonce — and a peer that missed it starts its
 * failover only when its own carrier errs: 2-4.5 s later in bench/failover's runs (when look-ups
 * waited a fixed 1-3 ms and took a late answer for a miss), all of it this side's stall. */
static void ring_again(ha_qp_t *m, double t, int found) {
  if (t < m->fo_ring) return;
  if (found < 0) {
    uint8_t key[HA_KEY];
    fail_rec_t peer;
    fail_key(key, m, 0);
    found = ah_shim_ha_dir_get(key, &peer, sizeof peer, HA_LOOK) == (int)sizeof peer;
  }
  if (found) {
    m->fo_ring = t + HA_RING_MAX_S;
    return;
  }
  ah_log_dev(
      m->gpu, AH_LOG_DEBUG,
      "HA: QP %u: no failover record of its peer (QP %u) %.1f ms after the error; ringing its "
      "doorbell again",
      m->qpn, m->rtr.dest_qp_num, (t - m->t_fail) * 1e3);
  ring_peer(m, t);
}

/* The switch: synthesized completions for what the peer took, receives re-posted and the rest
 * replayed on the standby, in order; the standby becomes the shadow in use and a new standby is
 * wanted. Call with m->mu held. Returns 0 or -1 (give_error follows). */
static int replay(ha_qp_t *m, uint64_t peer_done, const char **why_p) {
  ha_ctx_t *hc = m->hc;
  uint64_t first;
  if (ah_ha_replay_plan(&m->slog, peer_done, &first) != 0) {
    *why_p = "the peer's count of delivered messages does not match this side's log";
    return -1;
  }
  struct ibv_qp *to = m->sb.qp;
  int from_port = m->sh ? m->sh_port : m->port;
  unsigned long nsynth = 0, nreplay = 0;
  for (uint64_t s = m->slog.tail; s < first; s++) {
    ah_ha_swr_t *e = &m->slog.e[s & (m->slog.cap - 1)];
    if (!ah_ha_swr_signaled(&m->slog, e)) continue;
    struct ibv_wc wc;
    memset(&wc, 0, sizeof wc);
    wc.wr_id = e->wr_id;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = ha_wc_opcode(e->opcode);
    wc.byte_len = e->opcode == IBV_WR_RDMA_READ ? e->length : 0;
    wc.qp_num = m->qpn;
    ah_shim_ha_synth_push(hc, m->send_cq, &wc);
    nsynth++;
  }
  if (first > m->slog.tail) ah_ha_slog_retire(&m->slog, first - 1);
  /* a nic shadow's completions arrive on the backup NIC's CQs: NCCL's poll takes them from now on */
  if (ha_on_nic(m, to)) ah_shim_ha_nic_go_live(m);
  for (uint64_t s = m->rlog.tail; s < m->rlog.head; s++) {
    ah_ha_rwr_t *e = &m->rlog.e[s & (m->rlog.cap - 1)];
    struct ibv_sge sge = {e->addr, e->length, e->lkey};
    struct ibv_recv_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = e->wr_id;
    w.sg_list = e->num_sge ? &sge : NULL;
    w.num_sge = e->num_sge;
    if (ah_shim_ha_sh_post_recv(m, to, &w, &bad) != 0) {
      *why_p = "re-posting a receive on the shadow failed";
      return -1;
    }
  }
  for (uint64_t s = first; s < m->slog.head; s++) {
    ah_ha_swr_t *e = &m->slog.e[s & (m->slog.cap - 1)];
    struct ibv_sge sge = {e->addr, e->length, e->lkey};
    if (e->send_flags & IBV_SEND_INLINE)
      sge.addr = (uint64_t)(uintptr_t)ah_ha_slog_inl(&m->slog, s);
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = e->wr_id;
    w.opcode = (enum ibv_wr_opcode)e->opcode;
    w.send_flags = e->send_flags;
    w.imm_data = e->imm;
    w.wr.rdma.remote_addr = e->raddr;
    w.wr.rdma.rkey = e->rkey;
    w.sg_list = e->num_sge ? &sge : NULL;
    w.num_sge = e->num_sge ? 1 : 0;
    if (ah_shim_ha_sh_post_send(m, to, &w, &bad) != 0) {
      *why_p = "replaying a work request on the shadow failed";
      return -1;
    }
    nreplay++;
  }
  /* the standby carries the traffic; the QP it replaces stays in ERR (and in the table: its late
   * flushes are absorbed) until NCCL destroys its own */
  m->sh = to;
  m->sh_status = m->fo_status; /* why it carries the traffic (an error class's repeat ends it) */
  m->sh_qpn = m->sb.qpn;
  m->sh_port = m->sb.port;
  m->sh_sport = m->sb.sport;
  m->sh_gen = m->sb.gen;
  m->rb_sport = 0;
  uint32_t next_gen = m->sb.gen + 1;
  memset(&m->sb, 0, sizeof m->sb);
  m->sb.gen = next_gen;
  atomic_store(&m->sb.state, m->ngens < HA_GEN_MAX ? SH_WANTED : SH_NONE);
  m->st_tail = m->slog.tail;
  m->st_since = ha_now_s();
  m->st_polled = 0;
  m->nfail++;
  atomic_store_explicit(&m->state, HA_SHADOW, memory_order_release);
  m->fo_step = FO_NONE;
  atomic_fetch_add(&ah_shim_ha_st_failovers, 1);
  atomic_fetch_add(&ah_shim_ha_st_replayed, nreplay);
  atomic_fetch_add(&ah_shim_ha_st_synth, nsynth);
  double stall_ms = (ha_now_s() - m->t_fail) * 1e3;
  const char *sh_nic =
      ha_on_nic(m, m->sh) ? ah_shim_ha_nic_name(m) : NULL; /* an even nic generation is on NCCL's */
  char where[96];
  if (sh_nic) snprintf(where, sizeof where, "%s port %d", sh_nic, m->sh_port);
  else snprintf(where, sizeof where, "port %d", m->sh_port);
  ah_log_dev(m->gpu, AH_LOG_WARN,
             "HA: QP %u (%s port %d) failed over to its shadow QP %u (%s) in %.1f ms: %lu work "
             "requests replayed, %lu completions the peer had confirmed handed to NCCL%s",
             m->qpn, m->qp->context->device->name, from_port, m->sh_qpn, where, stall_ms, nreplay,
             nsynth,
             m->fo_planned  ? " (failback: its original path is back, AUTOHA_HA_FAILBACK)"
             : m->nfail > 1 ? " (again: its previous shadow had failed)"
                            : "");
  m->fo_planned = 0;
  pthread_mutex_lock(&ah_shim_ha_events_mu);
  if (ah_shim_ha_nevents < AH_REPORT_HA_MAX) {
    ah_report_failover_t *f = &ah_shim_ha_events[ah_shim_ha_nevents++];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    f->time_s = (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
    f->qpn = m->qpn;
    snprintf(f->dev, sizeof f->dev, "%.31s", m->qp->context->device->name);
    f->port = from_port;
    f->shadow_port = m->sh_port;
    if (sh_nic) snprintf(f->shadow_dev, sizeof f->shadow_dev, "%.31s", sh_nic);
    f->stall_ms = stall_ms;
    f->replayed = (uint32_t)nreplay;
    f->synthesized = (uint32_t)nsynth;
  }
  pthread_mutex_unlock(&ah_shim_ha_events_mu);
  return 0;
}

/* One step of m's failover; returns 1 when it moved (run it again soon). */
int ah_shim_ha_failover_step(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  double t = ha_now_s();
  const ah_settings_t *env = ah_env_settings();
  struct ibv_qp *carrier = ha_carrier(m);
  if (m->fo_step == FO_DRAIN && m->fo_deadline == 0) {
    m->fo_deadline = t + env->ha_failover_s;
    /* the carrier to ERR (so the peer's count is final), then one marker per queue: when both
     * have been polled, every completion of the carrier has been seen */
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    hc->real.modify_qp(carrier, &a, IBV_QP_STATE);
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = WRID_DRAIN_SEND;
    w.opcode = IBV_WR_RDMA_WRITE;
    w.send_flags = IBV_SEND_SIGNALED;
    if (hc->post_send(carrier, &w, &bad) != 0) atomic_store(&m->drained_send, 1);
    if (m->cap.max_recv_wr > 0) {
      struct ibv_recv_wr r, *rbad;
      memset(&r, 0, sizeof r);
      r.wr_id = WRID_DRAIN_RECV;
      if (hc->post_recv(carrier, &r, &rbad) != 0) atomic_store(&m->drained_recv, 1);
    } else {
      atomic_store(&m->drained_recv, 1);
    }
    return 1;
  }
  if (m->fo_step == FO_DRAIN) {
    /* A queue with nothing outstanding (every signalled WR's completion polled: the logs retire on poll)
     * has nothing left for NCCL to see, and NCCL may not poll it at all — the receiving end whose
     * last message arrived waits, in NCCL's ring, for the sender whose failover waits for this
     * side's count. Its marker's flush comes later and is absorbed. */
    if (!atomic_load(&m->drained_send) || !atomic_load(&m->drained_recv)) ah_shim_ha_drain_poll(m);
    pthread_mutex_lock(&m->mu);
    int idle_s = 1, idle_r = m->rlog.head == m->rlog.tail;
    for (uint64_t q = m->slog.tail; q < m->slog.head && idle_s;
         q++) /* unsignalled WRs complete silently */
      idle_s =
          !m->slog.sig_all && !(m->slog.e[q & (m->slog.cap - 1)].send_flags & IBV_SEND_SIGNALED);
    pthread_mutex_unlock(&m->mu);
    if ((!atomic_load(&m->drained_send) && !idle_s) ||
        (!atomic_load(&m->drained_recv) && !idle_r)) {
      if (t > m->fo_deadline) {
        pthread_mutex_lock(&m->mu);
        give_error(
            m, atomic_load(&m->drained_recv)   ? "the send completions were not drained in time"
               : atomic_load(&m->drained_send) ? "the receive completions were not drained in time"
                                               : "the completions were not drained in time");
        pthread_mutex_unlock(&m->mu);
        return 1;
      }
      return 0;
    }
    pthread_mutex_lock(&m->mu);
    m->fo_done = m->rlog.done;
    pthread_mutex_unlock(&m->mu);
    uint8_t key[HA_KEY];
    fail_key(key, m, 1);
    fail_rec_t rec = {m->fo_done, 0, 0};
    if (ah_shim_ha_dir_put(key, &rec, sizeof rec) != 0) {
      pthread_mutex_lock(&m->mu);
      give_error(m, "the coordinator hub is gone");
      pthread_mutex_unlock(&m->mu);
      return 1;
    }
    /* ring the peer's doorbell: an RC responder whose requester lost the path sees no error of its
     * own (on sim/ the provider's peer-failure shortcut flushes it anyway); again while the peer
     * publishes nothing (ring_again) */
    m->fo_ring_gap = HA_RING_S;
    ring_peer(m, t);
    ah_log_dev(m->gpu, AH_LOG_DEBUG,
               "HA: QP %u: drained %.1f ms after the error, %lu messages taken; doorbell rung",
               m->qpn, (ha_now_s() - m->t_fail) * 1e3, (unsigned long)m->fo_done);
    m->fo_step = FO_WAIT;
    return 1;
  }
  if (m->fo_step == FO_WAIT) {
    /* the standby must be ready, with no heartbeat of its own outstanding (NCCL's poll would take
     * its completion for a replayed WR's); a fault before it was ready, or during a failover, waits
     * here for it to be built */
    pthread_mutex_lock(&m->mu);
    int sb = atomic_load(&m->sb.state), hb = m->sb.hb_out, hold = ah_shim_ha_can_hold(m);
    if (sb == SH_READY && !hb && t - m->sb.hb_ok > 0.5) {
      /* its last heartbeat is old: one more first, so that a standby the same fault cut is found
       * out before the replay goes to it (one round trip when it is alive) */
      hb = ah_shim_ha_heartbeat_post(m) == 0;
      sb = atomic_load(&m->sb.state);
    }
    if (sb == SH_READY && !hb) {
      /* tell the peer which standby this end will switch to */
      fail_rec_t rec = {m->fo_done, m->sb.gen, 0};
      pthread_mutex_unlock(&m->mu);
      uint8_t key[HA_KEY];
      fail_key(key, m, 1);
      if (ah_shim_ha_dir_put(key, &rec, sizeof rec) != 0) {
        pthread_mutex_lock(&m->mu);
        give_error(m, "the coordinator hub is gone");
        pthread_mutex_unlock(&m->mu);
        return 1;
      }
      ah_log_dev(
          m->gpu, AH_LOG_DEBUG,
          "HA: QP %u: standby generation %u ready %.1f ms after the error; waiting for the peer's count",
          m->qpn, rec.gen, (ha_now_s() - m->t_fail) * 1e3);
      m->fo_step = FO_EXCHANGE;
      return 1;
    }
    if (!hold || t > m->fo_deadline) {
      give_error(m, !hold ? "no shadow can be built for it"
                          : "no shadow became ready within AUTOHA_HA_FAILOVER_S");
      pthread_mutex_unlock(&m->mu);
      return 1;
    }
    pthread_mutex_unlock(&m->mu);
    /* the peer must be failing over meanwhile (its standby of the generation this side rebuilds at
     * is built only then) */
    ring_again(m, t, -1);
    if (hb)
      ah_shim_ha_drain_poll(m); /* the heartbeat's completion, which NCCL may never poll for */
    if (sb == SH_DEAD &&
        t >= m->fo_look) { /* a peer already building a newer standby: join it now */
      m->fo_look = t + 0.02;
      return ah_shim_ha_peer_ahead(m, 0);
    }
    return 0;
  }
  if (m->fo_step == FO_EXCHANGE) {
    uint8_t key[HA_KEY];
    /* the newest generation the peer gave up: at or above ours, its standby of our generation
     * died while ours still looked ready (a switch does not give one up) */
    uint32_t pg = 0;
    if (t >= m->fo_look) {
      m->fo_look = t + 0.02;
      uint32_t gave_up = 0;
      ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_GEN);
      if (ah_shim_ha_dir_get(key, &gave_up, sizeof gave_up, HA_LOOK) == (int)sizeof gave_up)
        pg = gave_up + 1;
    }
    fail_key(key, m, 0);
    fail_rec_t peer = {0, 0, 0};
    int n = ah_shim_ha_dir_get(key, &peer, sizeof peer, HA_LOOK);
    int have = n == (int)sizeof peer && peer.gen != 0;
    if (n != (int)sizeof peer) ring_again(m, t, 0);
    if (!(have && peer.gen == m->sb.gen)) {
      uint32_t ahead = have && peer.gen > m->sb.gen ? peer.gen : pg > m->sb.gen ? pg : 0;
      if (ahead) { /* the peer is on a newer standby: ours is rebuilt at it */
        ah_shim_ha_peer_ahead(m, ahead);
        m->fo_step = FO_WAIT;
        return 1;
      }
    }
    const char *why = NULL;
    pthread_mutex_lock(&m->mu);
    int switched = 0, moved = 0;
    if (atomic_load(&m->sb.state) != SH_READY || m->sb.hb_out) {
      m->fo_step = FO_WAIT; /* it died meanwhile */
      moved = 1;
    } else if (have && peer.gen == m->sb.gen) {
      if (replay(m, peer.done, &why) != 0) give_error(m, why);
      else switched = 1;
      moved = 1;
    } else if (ha_now_s() > m->fo_deadline) {
      /* nothing from the peer, or a peer still behind (it moves up when it reads this end's) */
      char why_b[160];
      snprintf(why_b, sizeof why_b,
               "the peer (QP %u) %s within AUTOHA_HA_FAILOVER_S; this end's shadow generation %u",
               m->rtr.dest_qp_num,
               n == (int)sizeof peer ? "named no ready shadow of this generation"
                                     : "did not publish what it received",
               m->sb.gen);
      give_error(m, why_b);
      moved = 1;
    }
    pthread_mutex_unlock(&m->mu);
    if (switched) ah_shim_ha_rebal_note(m);
    return moved;
  }
  return 0;
}

/* The doorbells of this process's GIDs: when one rang, every carrier on that GID whose peer
 * published a failover of the same generation is moved to ERR and its failover started (a carrier
 * with nothing outstanding produces no flushed completion, and NCCL may post nothing more on it
 * until the peer's failover, which waits for this side's count, has finished). Runs every 50 ms. */
void ah_shim_ha_notice_check(void) {
  static double next;
  static struct {
    uint8_t gid[16];
    uint64_t nonce;
  } seen[16];
  static int nseen;
  double t = ha_now_s();
  if (t < next) return;
  next = t + 0.05;
  uint8_t gids[16][16];
  int ngid = 0;
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (ha_qp_t *m = ah_shim_ha_qps; m; m = m->next) {
    int st = atomic_load(&m->state);
    if ((st != HA_PEACE && st != HA_SHADOW) || !ah_shim_ha_can_hold(m)) continue;
    int k = 0;
    while (k < ngid && memcmp(gids[k], m->sgid.raw, 16)) k++;
    if (k == ngid && ngid < 16) memcpy(gids[ngid++], m->sgid.raw, 16);
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
  for (int g = 0; g < ngid; g++) {
    uint8_t key[HA_KEY];
    uint64_t nonce = 0;
    ah_shim_ha_dir_key(key, gids[g], 0, 0, KIND_NOTE);
    if (ah_shim_ha_dir_get(key, &nonce, sizeof nonce, HA_LOOK) != (int)sizeof nonce) continue;
    int k = 0, unanswered = 0;
    while (k < nseen && memcmp(seen[k].gid, gids[g], 16)) k++;
    if (k < nseen && seen[k].nonce == nonce) continue;
    if (k == nseen) {
      if (nseen == 16) continue;
      memcpy(seen[nseen++].gid, gids[g], 16);
    }
    seen[k].nonce = nonce;
    double t_ring = ha_now_s();
    int nfound = 0;
    /* someone rang: look for published failovers of our carriers' peers */
    ha_qp_t *look[256];
    int nl = 0;
    pthread_mutex_lock(&ah_shim_ha_mu);
    for (ha_qp_t *m = ah_shim_ha_qps; m && nl < 256; m = m->next) {
      int st = atomic_load(&m->state);
      if ((st == HA_PEACE || st == HA_SHADOW) && !memcmp(m->sgid.raw, gids[g], 16) && !m->busy) {
        m->busy = 1;
        look[nl++] = m;
      }
    }
    pthread_mutex_unlock(&ah_shim_ha_mu);
    /* the peers' records of every carrier on the GID in one round trip, each the hub's answer
     * however late (a fixed 1 ms wait took late records for absent ones on a loaded machine); a
     * look that got none leaves the ring unseen, to be read again */
    static uint8_t keys[256][HA_KEY];
    static fail_rec_t recs[256];
    static int lens[256];
    for (int i = 0; i < nl; i++) fail_key(keys[i], look[i], 0);
    ah_shim_ha_dir_get_many((const uint8_t(*)[HA_KEY])keys, nl, recs, sizeof recs[0], lens,
                            HA_LOOK);
    for (int i = 0; i < nl; i++) {
      ha_qp_t *m = look[i];
      int st = atomic_load(&m->state);
      unanswered |= lens[i] == AH_COORD_DIR_UNANSWERED;
      if ((st == HA_PEACE || st == HA_SHADOW) && lens[i] == (int)sizeof recs[0]) {
        nfound++;
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_ERR;
        ah_log_dev(
            m->gpu, AH_LOG_INFO,
            "HA: QP %u: its peer failed over; moving the queue pair carrying it to the error state",
            m->qpn);
        m->hc->real.modify_qp(ha_carrier(m), &a, IBV_QP_STATE);
        pthread_mutex_lock(&m->mu);
        st = atomic_load(&m->state);
        if ((st == HA_PEACE || st == HA_SHADOW) && ah_shim_ha_can_hold(m)) {
          ah_shim_ha_failover_start(m, "its peer failed over");
        } else {
          ah_log_dev(
              m->gpu, AH_LOG_INFO,
              "HA: QP %u: cannot follow its peer's failover (state %d, shadow %d, unprotected %d)",
              m->qpn, st, atomic_load(&m->sb.state), m->unprotected);
        }
        pthread_mutex_unlock(&m->mu);
      }
    }
    if (unanswered) seen[k].nonce = 0; /* looked at again at the next check */
    ah_log(AH_LOG_DEBUG,
           "HA: a doorbell rang: %d queue pairs looked at in %.1f ms, %d peers' failovers found%s",
           nl, (ha_now_s() - t_ring) * 1e3, nfound,
           unanswered ? " (some look-ups unanswered: read again)" : "");
    pthread_mutex_lock(&ah_shim_ha_mu);
    for (int i = 0; i < nl; i++) look[i]->busy = 0;
    pthread_cond_broadcast(&ah_shim_ha_idle_cv);
    pthread_mutex_unlock(&ah_shim_ha_mu);
  }
}
