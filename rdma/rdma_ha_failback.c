/* rdma_ha_failback.c: a recovered path becomes the next failover's at once (docs/ha.md,
 * "Failback"). After a failover the next standby goes back to the failed path (the other port, the
 * first NIC, another spine) and dies while that path is down; it is rebuilt with a backoff that
 * grows to 8 s, so that a port that stays down costs a few queue pairs. This file shortens the wait
 * when the standby's port comes back: the background thread reads the port's state (ibv_query_port,
 * at most every 0.25 s per port, only while a standby on it waits for its rebuild) and, once it has
 * seen the port down and then active again after the standby died, rebuilds that standby now.
 * Under port, a standby built on the carrier's own port because the other was down (rdma_ha_shadow.c)
 * moves the same way: once the other port reads active again it is retired and rebuilt there.
 *
 * Key choice: by default traffic is not moved back to the recovered path (that would be one more
 * drain and replay, a stall, for no gain in reach while both paths are healthy); the recovered path
 * becomes the standby, so a later fault of the path in use has somewhere to go. AUTOHA_HA_FAILBACK=1
 * moves it back (port, nic) once the standby on the original port has been ready, its heartbeats
 * on time, for FB_STABLE_S: the load the failover put on one port or NIC ends, at one stall. */
#include <string.h>

#include "ah_env.h"
#include "rdma_ha_int.h"

#define FB_PROBE_S 0.25 /* a port's state is read at most this often */
/* a standby on the original path moves the traffic back only once ready this long with no
 * heartbeat missed: a path that flaps must not cost two stalls per flap */
#define FB_STABLE_S 5.0

/* Per context slot and port (1, 2): when the state was last read, what it was (-1: never read),
 * and when it was last seen going from down to active. The background thread's own. */
static double probed_t[HA_MAX_CTX][3], up_t[HA_MAX_CTX][3];
static int probed_up[HA_MAX_CTX][3];

/* 1 when port `port` of hc is active now (read at most every FB_PROBE_S), 0 when not, -1 when it
 * cannot be read. Records a down-to-active change in up_t. */
static int port_active(ha_ctx_t *hc, int port, double now) {
  int i = 0, n = atomic_load(&ah_shim_ha_nctx);
  while (i < n && ah_shim_ha_ctxs[i] != hc) i++;
  if (i == n || port < 1 || port > 2) return -1;
  if (probed_t[i][port] == 0) probed_up[i][port] = -1;
  if (now - probed_t[i][port] < FB_PROBE_S) return probed_up[i][port];
  probed_t[i][port] = now;
  int st = ah_shim_ha_port_state(hc, port);
  if (st < 0) return -1;
  int up = st == IBV_PORT_ACTIVE;
  if (up != probed_up[i][port])
    ah_log(AH_LOG_DEBUG, "HA: %s port %d reads %s", hc->ctx->device ? hc->ctx->device->name : "?",
           port, up ? "active" : "not active");
  if (up && probed_up[i][port] == 0) up_t[i][port] = now;
  probed_up[i][port] = up;
  return up;
}

/* The port a ready standby of m should be on instead of the one it is on, or 0: under port, a
 * standby built on the carrier's own port while the other was down (shadow_create) goes to the
 * other port once it is active again — two ports are two paths, two hashes on one port may not be.
 * That port is read while such a standby stands, so its coming back is seen. */
static int same_port_due(ha_qp_t *m, double now) {
  int carrier_port = m->sh ? m->sh_port : m->port; /* NCCL's own QP's while it carries */
  if (ah_env_settings()->ha != AH_HA_POLICY_PORT || !m->sb.port || m->sb.port != carrier_port ||
      ha_on_nic(m, m->sb.qp) || (m->nq && !m->sb.qp))
    return 0;
  int other = m->sb.port == 1 ? 2 : 1;
  if (port_active(m->hc, other, now) != 1) return 0;
  int i = 0, n = atomic_load(&ah_shim_ha_nctx);
  while (i < n && ah_shim_ha_ctxs[i] != m->hc) i++;
  return i < n && up_t[i][other] > 0 && up_t[i][other] > m->fb_done ? other : 0;
}

static int failback_due(ha_qp_t *m, double now) {
  int sb = atomic_load(&m->sb.state);
  if (sb == SH_READY) return same_port_due(m, now) != 0;
  /* a standby not ready (dead and waiting for its rebuild, or built and waiting for the peer's) on
   * a port of m's own NIC, which has died at least once since its connection's last failover */
  if (sb == SH_READY || sb == SH_NONE || sb == SH_WANTED ||
      (sb == SH_DEAD && (!m->sb.rebuild_at || now >= m->sb.rebuild_at)) || !m->sb_fails ||
      !m->sb.port || ha_on_nic(m, m->sb.qp) || (m->nq && !m->sb.qp))
    return 0;
  if (port_active(m->hc, m->sb.port, now) != 1) return 0;
  int i = 0, n = atomic_load(&ah_shim_ha_nctx);
  while (i < n && ah_shim_ha_ctxs[i] != m->hc) i++;
  /* the port came back after this connection's standbys started dying */
  return i < n && up_t[i][m->sb.port] > 0 && up_t[i][m->sb.port] > m->fb_done;
}

static void failback_kick(ha_qp_t *m, double now, const char *why) {
  /* why: for the warning of a standby not yet dead (connected, waiting for the peer's) */
  /* give the standby up and skip one generation: the peer, whose own port may never have gone
   * down and whose rebuild may be seconds away, reads the given-up generation (HAG1) and follows
   * at once (ah_shim_ha_peer_ahead) */
  if (atomic_load(&m->sb.state) == SH_READY) {
    /* a healthy standby moved to the other port (same_port_due): retired as a dead one is, without
     * the warning that it died (the caller said why at info) */
    atomic_store(&m->sb.state, SH_DEAD);
    m->sb.hb_out = 0;
    m->sb.dead_t = now;
    m->sb_dead_port = m->sb.port;
    m->sb_dead_sport = m->sb.sport;
    m->sb.rebuild_at = m->ngens < HA_GEN_MAX ? now : 0;
  } else if (atomic_load(&m->sb.state) != SH_DEAD) {
    ah_shim_ha_standby_dead(m, why);
  }
  m->sb.want_gen = m->sb.gen + 2;
  if (m->gave_up < m->sb.gen + 1) m->gave_up = m->sb.gen + 1;
  if (m->sb.rebuild_at) m->sb.rebuild_at = now;
  m->sb_fails = 0;
  m->fb_done = now;
}

static void failback_follow(ha_qp_t *m, double now) {
  if (atomic_load(&m->sb.state) != SH_DEAD || !m->sb.rebuild_at || now >= m->sb.rebuild_at ||
      !m->peer_seen || now < m->fb_look)
    return;
  m->fb_look = now + FB_PROBE_S;
  uint8_t key[HA_KEY];
  uint32_t gave_up = 0;
  ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_GEN);
  /* the peer gave up a generation newer than the one dead here: it is ahead (its path came back) */
  if (ah_shim_ha_dir_get(key, &gave_up, sizeof gave_up, HA_LOOK) == (int)sizeof gave_up &&
      gave_up > m->sb.gen && ah_shim_ha_peer_ahead(m, gave_up + 1))
    AH_LOG_DEV_CAPPED(
        16, m->gpu, AH_LOG_INFO,
        "HA: QP %u: the peer rebuilt its standby at once (its path came back); so does this end",
        m->qpn);
}

/* 1 when m's traffic, on a shadow, should move back to its standby (AUTOHA_HA_FAILBACK): the
 * standby is on the path m failed over from (NCCL's own port; under nic, on NCCL's NIC), ready for
 * FB_STABLE_S with no heartbeat missed and none outstanding. Not under path: the standby's route is
 * only another hash, and the rebalance re-plans the routes. Call with m->mu held. */
static int move_back_due(ha_qp_t *m, double now) {
  const ah_settings_t *s = ah_env_settings();
  if (!s->ha_failback || s->ha == AH_HA_POLICY_PATH || atomic_load(&m->state) != HA_SHADOW ||
      !m->sh || atomic_load(&m->sb.state) != SH_READY || m->sb.hb_out || !m->sb.qp ||
      m->unprotected)
    return 0;
  if (m->sb.port != m->port || ha_on_nic(m, m->sb.qp) || !ah_shim_ha_can_hold(m)) return 0;
  return now - m->sb.ready_t >= FB_STABLE_S && !ah_ha_beat_dead(&m->sb.beat, 1, AH_HA_BEAT_MAX);
}

void ah_shim_ha_failback_step(ha_qp_t *m) {
  double now = ha_now_s();
  failback_follow(m, now); /* the peer's path came back: rebuild now */
  pthread_mutex_lock(&m->mu);
  if (atomic_load(&m->state) != HA_BROKEN && failback_due(m, now)) {
    /* its port is up again: the recovered path is the next standby's now, not at the backoff's */
    int moved = atomic_load(&m->sb.state) == SH_READY; /* a same-port standby (same_port_due) */
    AH_LOG_DEV_CAPPED(16, m->gpu, AH_LOG_INFO,
                      "HA: QP %u: port %d is up again; its standby is rebuilt there now", m->qpn,
                      moved ? (m->sb.port == 1 ? 2 : 1) : m->sb.port);
    failback_kick(m, now, "its port came back; it is rebuilt at once");
  } else if (move_back_due(m, now)) {
    /* a planned failover: the carrier is taken to ERR, as by the soft timeout, and the drain,
     * count exchange and replay run as after a fault (exactly once, in order) */
    AH_LOG_DEV_CAPPED(16, m->gpu, AH_LOG_WARN,
                      "HA: QP %u: its original path (port %d) has had a ready standby for %.0f s: "
                      "moving its traffic back (AUTOHA_HA_FAILBACK)",
                      m->qpn, m->sb.port, now - m->sb.ready_t);
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_ERR;
    m->hc->real.modify_qp(ha_carrier(m), &a, IBV_QP_STATE);
    m->fo_planned = 1;
    m->fo_status = 0;
    ah_shim_ha_failover_start(m, "failback (AUTOHA_HA_FAILBACK)");
  }
  pthread_mutex_unlock(&m->mu);
}
