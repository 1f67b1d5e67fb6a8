/* rdma_ha_shadow.c: building a managed queue pair's standby (docs/ha.md, "Shadows"): an RC queue
 * pair on NCCL's protection domain and CQs, on a backup path — another UDP source port
 * (AUTOHA_HA=path), the NIC's other port (port) — or on another NIC's (nic: rdma_ha_nic.c gives
 * its protection domain, CQs and port; the odd generations there, the even ones on NCCL's NIC),
 * connected with the peer's standby of the same generation through the directory, ready once a
 * heartbeat completed, and kept known by a heartbeat every AUTOHA_HA_HEARTBEAT_MS (dead when N of
 * the last M missed, AUTOHA_HA_HEARTBEAT_MISS, or one failed). A dead standby is rebuilt (a new
 * generation) while its peer runs autoha. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ah_env.h"
#include "ah_path.h"
#include "rdma_ha_ib.h"
#include "rdma_ha_int.h"
#include "rdma_qp_topo.h"

#define SHADOW_MAGIC 0x68615348u

typedef struct {
  uint32_t magic, qpn;
  uint8_t gid[16]; /* its port's GID, or on InfiniBand its LID's address (ah_ha_ib.h) */
  uint32_t port, policy;
  uint32_t sport;  /* the primary's UDP source port as the hook set it (0: NCCL's own) */
  uint32_t sport2; /* the source port of the shadow carrying the traffic (0: none yet) */
} shadow_info_t;

/* The source port of the shadow carrying m's traffic: the rebalance's, else its own. */
static uint16_t carrier_sport(const ha_qp_t *m) {
  return m->sh ? (m->rb_sport ? m->rb_sport : m->sh_sport) : 0;
}

/* 0 when port `port` of m's NIC reports itself down, else 1 (up, or not known). */
static int port_up(const ha_qp_t *m, int port) {
  return ah_shim_ha_port_state(m->hc, port) != IBV_PORT_DOWN;
}

/* Creates m's standby (generation m->sb.gen), takes it to INIT on its port and publishes it.
 * Returns 0, -1 (the standby is then dead) or -2 (and none can ever be built: no other port). */
static int shadow_create(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  int policy = ah_env_settings()->ha;
  int port = m->port;
  union ibv_gid gid = m->sgid;
  int gid_index = m->rtr.ah_attr.grh.sgid_index;
  if (m->ngens >= HA_GEN_MAX) return -1;
  struct ibv_pd *pd = m->pd;
  struct ibv_cq *scq = m->send_cq, *rcq = m->recv_cq;
  /* nic: odd generations on the backup NIC, even ones on NCCL's own (its port, GID and objects), so
   * that a connection moved to the backup NIC can fail back over to a new queue pair on its first
   * NIC, and both ends — whose generation g pair up — put g on the same side: the key translation
   * (ah_shim_ha_sh_post_send) is right only when both ends' queue pairs are on their backup NICs or neither */
  if (policy == AH_HA_POLICY_NIC && (m->sb.gen & 1) &&
      ah_shim_ha_nic_shadow_prepare(m, &pd, &scq, &rcq, &port, &gid) != 0)
    return -2; /* it said why */
  if (policy == AH_HA_POLICY_PORT) {
    /* the other port than the one carrying the traffic: after a failover to port 2, back on port 1 */
    int cport = m->sh ? m->sh_port : m->port;
    port = cport == 1 ? 2 : 1;
    /* the carrier failed and the last standby on the other port died too: try the carrier's port
     * again (it may be back), alternating while neither comes up — but not while that port says it
     * is down: a standby there dies only after RC's retry window, and a second fault that cut the
     * other port's path (another ECMP hash may avoid it) cost bench/failover 2.1 s of alternating
     * onto the dead port. Not on InfiniBand: with two planes the ports pair up by number, and the
     * peer, whose carrier's port is up, would alternate out of step (its subnet manager routes
     * around a cut link instead) */
    if (atomic_load(&m->state) == HA_FAILING && m->sb_fails > 0 && m->sb_dead_port == port &&
        port_up(m, cport) && !ha_by_lid(m))
      port = cport;
    /* the other port is down (the fault that moved the traffic here): a standby there could only
     * die after RC's retry window, and the carrier would have none while it lasts; one on the
     * carrier's own port, on another path (another ECMP hash), covers a second fault on the
     * carrier's path (bench/failover's second faults: the carrier then failed with no standby
     * ready and waited 85-200 ms for one to be rebuilt). Not on InfiniBand (see above). */
    else if (!port_up(m, port) && port_up(m, cport) && !ha_by_lid(m)) port = cport;
    if (ah_shim_ha_port_addr(m, m->qp->context, port, gid_index, &gid) != 0) {
      /* a single-port NIC (a port that cannot even be queried): say once, in one line, what
       * would protect it */
      static _Atomic int said_single;
      if (ah_shim_ha_port_state(hc, port) < 0 && ah_shim_ha_port_state(hc, cport) >= 0) {
        if (!atomic_exchange(&said_single, 1))
          ah_log(AH_LOG_WARN,
                 "HA: AUTOHA_HA=port but %s has no second port (a single-port NIC): its queue "
                 "pairs run without shadows; AUTOHA_HA=nic puts them on another NIC of the host",
                 m->qp->context->device->name);
      } else
        AH_LOG_DEV_CAPPED(1, m->gpu, AH_LOG_WARN,
                          "HA: AUTOHA_HA=port but %s has no port %d (or no %s on it): QPs "
                          "on it run without a shadow",
                          m->qp->context->device->name, port,
                          ha_by_lid(m) ? "LID" : "GID at NCCL's index");
      return -2;
    }
  }
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = scq;
  ia.recv_cq = rcq;
  ia.cap = m->cap;
  ia.qp_type = IBV_QPT_RC;
  ia.qp_context = NULL; /* never NCCL's: its async events must not look like NCCL's QP's */
  struct ibv_qp *sh = hc->real.create_qp(pd, &ia);
  if (!sh) {
    AH_LOG_DEV_CAPPED(2, m->gpu, AH_LOG_WARN, "HA: cannot create a shadow for QP %u: %s", m->qpn,
                      strerror(errno));
    return -1;
  }
  pthread_mutex_lock(&ah_shim_ha_mu);
  m->gens[m->ngens++] = sh; /* destroyed with NCCL's QP, never before: late completions name it */
  /* another NIC numbers its queue pairs apart: a nic shadow is on that NIC's list */
  int listed = ha_on_nic(m, sh) ? ah_shim_ha_nic_shadow_add(m, sh->qp_num)
                                : ah_shim_ha_table_set(hc, sh->qp_num, m);
  pthread_mutex_unlock(&ah_shim_ha_mu);
  if (listed != 0) {
    AH_LOG_DEV_CAPPED(1, m->gpu, AH_LOG_WARN, "HA: too many shadows; QP %u runs without one",
                      m->qpn);
    return -2;
  }
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = (uint16_t)m->pkey_index;
  a.port_num = (uint8_t)port;
  a.qp_access_flags = (unsigned)m->access;
  if (hc->real.modify_qp(
          sh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    AH_LOG_DEV_CAPPED(2, m->gpu, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to INIT: %s",
                      m->qpn, strerror(errno));
    return -1;
  }
  pthread_mutex_lock(&m->mu);
  m->sb.qp = sh;
  m->sb.qpn = sh->qp_num;
  m->sb.gid = gid;
  m->sb.port = port;
  m->sb.hb_out = 0;
  pthread_mutex_unlock(&m->mu);
  shadow_info_t info = {SHADOW_MAGIC,    sh->qp_num,       {0},
                        (uint32_t)port,  (uint32_t)policy, m->hc->real.qp_sport(m->qp),
                        carrier_sport(m)};
  memcpy(info.gid, gid.raw, 16);
  uint8_t key[HA_KEY];
  ah_shim_ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num,
                     ha_kind_gen(KIND_SHADOW, m->sb.gen));
  if (ah_shim_ha_dir_put(key, &info, sizeof info) != 0) return -1;
  /* the newest generation this end gave up, for a peer that still takes its own for alive (never
   * the one a switch moved on from: that one carries the traffic) */
  if (m->gave_up) {
    ah_shim_ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_GEN);
    uint32_t g = m->gave_up;
    ah_shim_ha_dir_put(key, &g, sizeof g);
  }
  return 0;
}

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static ah_path_topo_t *topo;
static void topo_load(void) {
  const char *path = ah_shim_qp_topo_path();
  if (!path[0]) return;
  if (ah_path_topo_load(path, &topo) != 0) topo = NULL; /* the loader said why */
}

ah_path_topo_t *ah_shim_ha_topo(void) {
  pthread_once(&topo_once, topo_load);
  return topo;
}

/* The flow label of m's standby: AUTOHA_HA=path with a topology picks a source port whose modelled
 * spine avoids both directions of the primary and of the shadow carrying the traffic; otherwise the
 * standby's own QP numbers give another port (another ECMP hash, not a guaranteed other link). */
static uint32_t shadow_label(ha_qp_t *m, const shadow_info_t *peer) {
  uint32_t peer_sh_qpn = peer->qpn;
  /* the primaries' ports as they run: the hook's (AUTOHA_QP_SPORT) when it set one, else NCCL's */
  uint32_t plabel = m->rtr.ah_attr.grh.flow_label
                        ? m->rtr.ah_attr.grh.flow_label
                        : ah_path_label_from_qpn(m->qpn, m->rtr.dest_qp_num);
  uint16_t psport = m->hc->real.qp_sport(m->qp);
  if (!psport) psport = ah_path_label_to_sport(plabel);
  uint16_t peer_sport =
      peer->sport ? (uint16_t)peer->sport
                  : ah_path_label_to_sport(ah_path_label_from_qpn(m->rtr.dest_qp_num, m->qpn));
  uint16_t csport = carrier_sport(m);
  uint32_t label = ah_path_label_from_qpn(m->sb.qpn, peer_sh_qpn);
  if (ah_env_settings()->ha == AH_HA_POLICY_PATH) {
    /* and the path of the last standby that died, when it died in a row */
    uint16_t out[3] = {psport, csport, m->sb_fails ? m->sb_dead_sport : 0};
    uint16_t back[2] = {peer_sport, (uint16_t)peer->sport2};
    uint16_t sport =
        ah_path_backup_sport_avoid(ah_shim_ha_topo(), m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw, out,
                                   3, back, 2, ah_path_label_to_sport(label));
    if (sport) return ah_path_sport_to_label(sport);
  }
  for (int i = 0; i < 4 && (ah_path_label_to_sport(label) == psport ||
                            ah_path_label_to_sport(label) == csport);
       i++)
    label ^= 0x1u << i;
  return label;
}

/* RTR and RTS of the standby towards the peer's, then a heartbeat. Returns 0 or -1. */
static int shadow_connect(ha_qp_t *m, const shadow_info_t *peer) {
  ha_ctx_t *hc = m->hc;
  struct ibv_qp_attr a = m->rtr;
  a.qp_state = IBV_QPS_RTR;
  a.dest_qp_num = peer->qpn;
  a.rq_psn = 0;
  a.ah_attr.port_num = (uint8_t)m->sb.port;
  ah_shim_ha_av_peer(m, &a.ah_attr, peer->gid); /* its GID, or on InfiniBand its LID */
  uint32_t label = shadow_label(m, peer);
  a.ah_attr.grh.flow_label = label;
  int rc = hc->real.modify_qp(m->sb.qp, &a, m->rtr_mask);
  if (rc != 0) {
    AH_LOG_DEV_CAPPED(2, m->gpu, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTR: %s",
                      m->qpn, strerror(rc));
    return -1;
  }
  m->sb.sport = ah_path_label_to_sport(label);
  a = m->rts;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if ((rc = hc->real.modify_qp(m->sb.qp, &a, m->rts_mask)) != 0) {
    AH_LOG_DEV_CAPPED(2, m->gpu, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTS: %s",
                      m->qpn, strerror(rc));
    return -1;
  }
  /* the heartbeat waits for the peer's standby to be at RTR too: a request it holds longer than the
   * transport timeout would fail both standbys */
  uint8_t key[HA_KEY];
  uint32_t one = 1;
  ah_shim_ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num,
                     ha_kind_gen(KIND_RTS, m->sb.gen));
  if (ah_shim_ha_dir_put(key, &one, sizeof one) != 0) return -1;
  atomic_store(&m->sb.state, SH_RTS);
  return 0;
}

/* The heartbeat interval, in seconds (AUTOHA_HA_HEARTBEAT_MS). */
static double hb_period_s(void) { return ah_env_settings()->ha_hb_ms * 1e-3; }

int ah_shim_ha_heartbeat_post(ha_qp_t *m) {
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.wr_id = WRID_HB;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  if (ah_shim_ha_sh_post_send(m, m->sb.qp, &w, &bad) != 0) {
    ah_shim_ha_standby_dead(m, "posting its heartbeat failed");
    return -1;
  }
  m->sb.hb_out = 1;
  m->sb.hb_polled = 0;
  m->sb.hb_next = ha_now_s() + hb_period_s();
  return 0;
}

/* Both standbys are connected: a signalled 0-byte write whose success makes the standby usable. */
static int shadow_heartbeat(ha_qp_t *m) {
  pthread_mutex_lock(&m->mu);
  atomic_store(&m->sb.state, SH_CONNECTED);
  int rc = ah_shim_ha_heartbeat_post(m);
  pthread_mutex_unlock(&m->mu);
  return rc;
}

static void dead_locked(ha_qp_t *m, const char *why, int rebuild) {
  pthread_mutex_lock(&m->mu);
  ah_shim_ha_standby_dead(m, why);
  if (!rebuild) m->sb.rebuild_at = 0;
  pthread_mutex_unlock(&m->mu);
}

/* A peer ahead of us (it gave up our standby's generation, or named a newer one in its failover
 * record) builds a newer generation: ours is given up and rebuilt at the peer's at once. pg: the
 * generation to rebuild at, or 0 to read the peer's given-up one from the directory. Returns 1
 * when it was. */
int ah_shim_ha_peer_ahead(ha_qp_t *m, uint32_t pg) {
  if (!m->peer_seen) return 0;
  if (!pg) {
    uint8_t key[HA_KEY];
    uint32_t gave_up = 0;
    ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_GEN);
    if (ah_shim_ha_dir_get(key, &gave_up, sizeof gave_up, HA_LOOK) != (int)sizeof gave_up) return 0;
    pg = gave_up + 1;
  }
  if (pg <= m->sb.gen || pg >= m->sb.gen + HA_GEN_MAX) return 0;
  pthread_mutex_lock(&m->mu);
  int was_dead = atomic_load(&m->sb.state) == SH_DEAD;
  if (!was_dead) ah_shim_ha_standby_dead(m, "the peer built a newer one");
  int moved = m->sb.want_gen != pg || !was_dead;
  m->sb.want_gen = pg;
  if (m->sb.rebuild_at) m->sb.rebuild_at = ha_now_s();
  pthread_mutex_unlock(&m->mu);
  return moved;
}

/* One step of m's standby setup (the background thread's); returns 1 when it moved. */
int ah_shim_ha_shadow_step(ha_qp_t *m) {
  int s = atomic_load(&m->sb.state);
  if (s == SH_WANTED) {
    if (!ah_shim_ha_dir_coord())
      return 0; /* the hub is known once the process joined a communicator */
    if (m->sb.gen == 0) m->sb.gen = 1;
    m->sb.deadline = ha_now_s() + ah_env_settings()->ha_connect_s;
    int rc = shadow_create(m);
    if (rc != 0) {
      dead_locked(m, "it could not be created", rc == -1);
      return 1;
    }
    atomic_store(&m->sb.state, SH_PUBLISHED);
    return 1;
  }
  if (s == SH_RTS) {
    uint8_t key[HA_KEY];
    uint32_t one = 0;
    ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn,
                       ha_kind_gen(KIND_RTS, m->sb.gen));
    if (ah_shim_ha_dir_get(key, &one, sizeof one, HA_LOOK) == (int)sizeof one) {
      shadow_heartbeat(m);
      return 1;
    }
    if (ah_shim_ha_peer_ahead(m, 0)) return 1;
    if (ha_now_s() > m->sb.deadline) {
      dead_locked(m, "the peer's did not connect within AUTOHA_HA_CONNECT_S", 1);
      return 1;
    }
    return 0;
  }
  if (s == SH_PUBLISHED) {
    uint8_t key[HA_KEY];
    ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn,
                       ha_kind_gen(KIND_SHADOW, m->sb.gen));
    shadow_info_t peer;
    int n = ah_shim_ha_dir_get(key, &peer, sizeof peer, HA_LOOK);
    if (n == (int)sizeof peer && peer.magic == SHADOW_MAGIC) {
      m->peer_seen = 1;
      if (shadow_connect(m, &peer) != 0) dead_locked(m, "it could not be connected", 1);
      return 1;
    }
    if (ah_shim_ha_peer_ahead(m, 0)) return 1;
    if (ha_now_s() > m->sb.deadline) {
      if (!m->peer_seen) {
        ah_log_dev(
            m->gpu, AH_LOG_INFO,
            "HA: QP %u: the peer published no shadow within AUTOHA_HA_CONNECT_S (no autoha or "
            "AUTOHA_HA=off there?); it runs without one",
            m->qpn);
        atomic_store(&m->sb.state, SH_DEAD);
        m->sb.rebuild_at = 0;
      } else {
        dead_locked(m, "the peer published none within AUTOHA_HA_CONNECT_S", 1);
      }
      return 1;
    }
  }
  return 0;
}

/* The soft timeout of m's carrier, in seconds: AUTOHA_HA_SOFT_TIMEOUT_S, or twice the carrier's RC
 * retry window (NCCL's timeout 20 and retry count 7 when it set none). */
static double soft_timeout_s(const ha_qp_t *m) {
  double v = ah_env_settings()->ha_soft_timeout_s;
  if (v > 0) return v;
  int to = (m->rts_mask & IBV_QP_TIMEOUT) ? m->rts.timeout : 20;
  int rc = (m->rts_mask & IBV_QP_RETRY_CNT) ? m->rts.retry_cnt : 7;
  if (to == 0) return 3600; /* timeout 0: RC never times out; an hour, as a backstop */
  return 2 * 4.096e-6 * (double)(1ull << (to > 40 ? 40 : to)) * (rc + 1);
}

/* One heartbeat round of m's ready standby, due now: a hit when the last heartbeat completed (the
 * next is posted), a miss when it is still outstanding (its path drops it and RC retries; the next
 * waits for it). N misses in the last M rounds (AUTOHA_HA_HEARTBEAT_MISS) make the standby dead.
 * Call with m->mu held. */
static void heartbeat_round(ha_qp_t *m, double now) {
  const ah_settings_t *s = ah_env_settings();
  int n = s->ha_hb_miss[0], w = s->ha_hb_miss[1], missed = m->sb.hb_out;
  int k = ah_ha_beat_round(&m->sb.beat, missed, w);
  if (!missed) {
    ah_shim_ha_heartbeat_post(m);
    return;
  }
  m->sb.hb_next = now + hb_period_s();
  m->sb.hb_polled = 0;
  if (ah_ha_beat_dead(&m->sb.beat, n, w)) {
    char why[128];
    snprintf(why, sizeof why,
             "it missed %d of its last %d heartbeats (AUTOHA_HA_HEARTBEAT_MISS=%d/%d)", k, w, n, w);
    ah_shim_ha_standby_dead(m, why);
  } else {
    AH_LOG_DEV_CAPPED(16, m->gpu, AH_LOG_INFO,
                      "HA: QP %u: its standby shadow QP %u missed a heartbeat (%d of its last %d; "
                      "dead at %d, AUTOHA_HA_HEARTBEAT_MISS)",
                      m->qpn, m->sb.qpn, k, w, n);
  }
}

int ah_shim_ha_health_due(ha_qp_t *m, double now) {
  int st = atomic_load(&m->state), sb = atomic_load(&m->sb.state);
  if (st == HA_BROKEN || !m->qp) return 0;
  if (sb == SH_DEAD && m->sb.rebuild_at && now >= m->sb.rebuild_at) return 1;
  return (st == HA_PEACE || st == HA_SHADOW) && now >= m->health_next;
}

int ah_shim_ha_health_step(ha_qp_t *m) {
  double now = ha_now_s();
  int acted = 0;
  pthread_mutex_lock(&m->mu);
  int st = atomic_load(&m->state), sb = atomic_load(&m->sb.state);
  if (sb == SH_DEAD && m->sb.rebuild_at && now >= m->sb.rebuild_at && st != HA_BROKEN) {
    /* a new generation; the dead one is moved to ERR and kept (late completions name it) */
    if (m->sb.qp) {
      struct ibv_qp_attr a;
      memset(&a, 0, sizeof a);
      a.qp_state = IBV_QPS_ERR;
      m->hc->real.modify_qp(m->sb.qp, &a, IBV_QP_STATE);
    }
    uint32_t g = m->sb.gen + 1;
    if (m->sb.want_gen > g) g = m->sb.want_gen;
    if (m->sb.gen > m->gave_up) m->gave_up = m->sb.gen;
    memset(&m->sb, 0, sizeof m->sb);
    m->sb.gen = g;
    atomic_store(&m->sb.state, SH_WANTED);
    acted = 1;
  }
  if ((st == HA_PEACE || st == HA_SHADOW) && now >= m->health_next) {
    /* every 0.1 s, or twice per heartbeat interval when that is shorter */
    m->health_next = now + (hb_period_s() < 0.2 ? hb_period_s() / 2 : 0.1);
    if (atomic_load(&m->sb.state) == SH_READY && now >= m->sb.hb_next) {
      if (m->sb.hb_out && !m->sb.hb_polled) {
        /* before it counts as missed: its completion may wait in a CQ nobody polls (an idle
         * connection's); look again right after */
        m->sb.hb_polled = 1;
        m->health_next = now;
        pthread_mutex_unlock(&m->mu);
        ah_shim_ha_drain_poll(m);
        return 1;
      }
      heartbeat_round(m, now);
      acted = 1;
    }
    /* the soft timeout: the send log's tail has not moved for that long with signalled work in it */
    int outstanding = 0;
    for (uint64_t q = m->slog.tail; q < m->slog.head && !outstanding; q++)
      outstanding =
          m->slog.sig_all || (m->slog.e[q & (m->slog.cap - 1)].send_flags & IBV_SEND_SIGNALED);
    /* timed from the first look that saw this tail outstanding (st_since 0: not seen yet), so a
     * queue pair's first work request is not aged from the clock's epoch, nor one posted after an
     * idle gap from the last look before it */
    if (!outstanding || m->slog.tail != m->st_tail || m->st_since == 0) {
      m->st_tail = m->slog.tail;
      m->st_since = outstanding ? now : 0;
      m->st_polled = 0;
    } else if (now - m->st_since > soft_timeout_s(m) && !m->st_polled) {
      /* its completion may wait in a CQ nobody polled (a process that was stopped, a loaded
       * machine): poll, and look again right after */
      m->st_polled = 1;
      m->health_next = now;
      pthread_mutex_unlock(&m->mu);
      ah_shim_ha_drain_poll(m);
      return 1;
    } else if (now - m->st_since > soft_timeout_s(m) && !m->unprotected && ah_shim_ha_can_hold(m)) {
      char why[96];
      snprintf(why, sizeof why, "no completion for %.1f s (AUTOHA_HA_SOFT_TIMEOUT_S)",
               now - m->st_since);
      AH_LOG_DEV_CAPPED(8, m->gpu, AH_LOG_WARN,
                        "HA: QP %u: its oldest signalled work request has had %s and no error; "
                        "failing it over",
                        m->qpn, why);
      struct ibv_qp_attr a;
      memset(&a, 0, sizeof a);
      a.qp_state = IBV_QPS_ERR;
      m->hc->real.modify_qp(ha_carrier(m), &a, IBV_QP_STATE);
      ah_shim_ha_failover_start(m, why);
      acted = 1;
    }
  }
  pthread_mutex_unlock(&m->mu);
  return acted;
}
