/* shim_ha_shadow.c: building a managed queue pair's shadow (docs/ha.md, "Shadows"): an RC queue
 * pair on NCCL's protection domain and CQs, on a backup path — another UDP source port
 * (AUTOHA_HA=path), the NIC's other port (port) — or on another NIC's (nic: shim_ha_nic.c gives
 * its protection domain, CQs and port), connected with the peer's shadow through the directory,
 * and ready once a heartbeat completed. */
#include <errno.h>
#include <string.h>

#include "ah_env.h"
#include "ah_path.h"
#include "shim_ha_int.h"
#include "shim_verbs.h"

#define SHADOW_MAGIC 0x68615348u

typedef struct {
  uint32_t magic, qpn;
  uint8_t gid[16];
  uint32_t port, policy;
  uint32_t sport; /* the primary's UDP source port as the hook set it (0: NCCL's own) */
} shadow_info_t;

/* Creates the shadow of m, takes it to INIT on its port and publishes it. Returns 0, or -1 (m then
 * runs without a shadow). */
static int shadow_create(ha_qp_t *m) {
  ha_ctx_t *hc = m->hc;
  int policy = ah_env_settings()->ha;
  int port = m->port;
  union ibv_gid gid = m->sgid;
  int gid_index = m->rtr.ah_attr.grh.sgid_index;
  struct ibv_pd *pd = m->pd;
  struct ibv_cq *scq = m->send_cq, *rcq = m->recv_cq;
  if (policy == 3 && ha_nic_shadow_prepare(m, &pd, &scq, &rcq, &port, &gid) != 0) return -1; /* it said why */
  if (policy == 2) {
    port = m->port == 1 ? 2 : 1;
    if (hc->real.query_gid(m->qp->context, (uint8_t)port, gid_index, &gid) != 0) {
      AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: AUTOHA_HA=port but %s has no port %d (or no GID %d on it): QPs "
                    "on it run without a shadow", m->qp->context->device->name, port, gid_index);
      return -1;
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
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot create a shadow for QP %u: %s", m->qpn, strerror(errno));
    return -1;
  }
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = (uint16_t)m->pkey_index;
  a.port_num = (uint8_t)port;
  a.qp_access_flags = (unsigned)m->access;
  if (hc->real.modify_qp(sh, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to INIT: %s", m->qpn, strerror(errno));
    hc->real.destroy_qp(sh);
    return -1;
  }
  pthread_mutex_lock(&ha_mu);
  m->sh = sh;
  m->sh_qpn = sh->qp_num;
  m->sh_gid = gid;
  m->sh_port = port;
  int listed = m->nq ? ha_nic_shadow_add(m) : ha_table_set(hc, sh->qp_num, m); /* another NIC numbers it apart */
  pthread_mutex_unlock(&ha_mu);
  if (listed != 0) {
    AH_LOG_CAPPED(1, AH_LOG_WARN, "HA: too many shadows; QP %u runs without one", m->qpn);
    return -1;
  }
  shadow_info_t info = {SHADOW_MAGIC, sh->qp_num, {0}, (uint32_t)port, (uint32_t)policy, m->hc->real.qp_sport(m->qp)};
  memcpy(info.gid, gid.raw, 16);
  uint8_t key[HA_KEY];
  ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_SHADOW);
  if (ha_dir_put(key, &info, sizeof info) != 0) return -1;
  return 0;
}

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static ah_path_topo_t *topo;
static void topo_load(void) {
  const char *path = ah_shim_qp_topo_path();
  if (!path[0]) return;
  if (ah_path_topo_load(path, &topo) != 0) topo = NULL; /* the loader said why */
}

ah_path_topo_t *ha_topo(void) {
  pthread_once(&topo_once, topo_load);
  return topo;
}

/* The flow label of m's shadow: AUTOHA_HA=path with a topology picks a source port whose modelled
 * spine avoids both directions of the primary; otherwise the shadow's own QP numbers give
 * another port than the primary's (another ECMP hash, not a guaranteed other link). */
static uint32_t shadow_label(ha_qp_t *m, const shadow_info_t *peer) {
  uint32_t peer_sh_qpn = peer->qpn;
  /* the primaries' ports as they run: the hook's (AUTOHA_QP_SPORT) when it set one, else NCCL's */
  uint32_t plabel = m->rtr.ah_attr.grh.flow_label ? m->rtr.ah_attr.grh.flow_label
                                                  : ah_path_label_from_qpn(m->qpn, m->rtr.dest_qp_num);
  uint16_t psport = m->hc->real.qp_sport(m->qp);
  if (!psport) psport = ah_path_label_to_sport(plabel);
  uint16_t peer_sport = peer->sport ? (uint16_t)peer->sport
                                    : ah_path_label_to_sport(ah_path_label_from_qpn(m->rtr.dest_qp_num, m->qpn));
  uint32_t label = ah_path_label_from_qpn(m->sh_qpn, peer_sh_qpn);
  if (ah_env_settings()->ha == 1) {
    uint16_t sport = ah_path_backup_sport(ha_topo(), m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw, psport, peer_sport,
                                          ah_path_label_to_sport(label));
    if (sport) return ah_path_sport_to_label(sport);
  }
  if (ah_path_label_to_sport(label) == psport) label ^= 0x1;
  return label;
}

/* RTR and RTS of the shadow towards the peer's, then a heartbeat. Returns 0 or -1. */
static int shadow_connect(ha_qp_t *m, const shadow_info_t *peer) {
  ha_ctx_t *hc = m->hc;
  struct ibv_qp_attr a = m->rtr;
  a.qp_state = IBV_QPS_RTR;
  a.dest_qp_num = peer->qpn;
  a.rq_psn = 0;
  a.ah_attr.port_num = (uint8_t)m->sh_port;
  memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
  uint32_t label = shadow_label(m, peer);
  a.ah_attr.grh.flow_label = label;
  int rc = hc->real.modify_qp(m->sh, &a, m->rtr_mask);
  if (rc != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTR: %s", m->qpn, strerror(rc));
    return -1;
  }
  a = m->rts;
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if ((rc = hc->real.modify_qp(m->sh, &a, m->rts_mask)) != 0) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot take the shadow of QP %u to RTS: %s", m->qpn, strerror(rc));
    return -1;
  }
  /* the heartbeat waits for the peer's shadow to be at RTR too: a request it holds longer than the
   * transport timeout would fail both shadows */
  uint8_t key[HA_KEY];
  uint32_t one = 1;
  ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_RTS);
  if (ha_dir_put(key, &one, sizeof one) != 0) return -1;
  atomic_store(&m->sh_state, SH_RTS);
  return 0;
}

/* Both shadows are connected: a signalled 0-byte write whose success makes the shadow usable. */
static int shadow_heartbeat(ha_qp_t *m) {
  atomic_store(&m->sh_state, SH_CONNECTED);
  struct ibv_send_wr w, *bad;
  memset(&w, 0, sizeof w);
  w.wr_id = WRID_HB;
  w.opcode = IBV_WR_RDMA_WRITE;
  w.send_flags = IBV_SEND_SIGNALED;
  if (ha_sh_post_send(m, &w, &bad) != 0) return -1;
  return 0;
}

/* Gives NCCL the failed completion it would have had without autoha (the failover could not be
 * completed). Call with m->mu held. */
/* One step of m's shadow setup (the background thread's); returns 1 when it moved. */
int ha_shadow_step(ha_qp_t *m) {
  int s = atomic_load(&m->sh_state);
  if (s == SH_WANTED) {
    if (!ha_dir_coord()) return 0; /* the hub is known once the process joined a communicator */
    if (m->sh_deadline == 0) m->sh_deadline = ha_now_s() + ah_env_settings()->ha_connect_s;
    if (shadow_create(m) != 0) {
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    atomic_store(&m->sh_state, SH_PUBLISHED);
    return 1;
  }
  if (s == SH_RTS) {
    uint8_t key[HA_KEY];
    uint32_t one = 0;
    ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_RTS);
    if (ha_dir_get(key, &one, sizeof one, 0.002) == (int)sizeof one) {
      if (shadow_heartbeat(m) != 0) atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    if (ha_now_s() > m->sh_deadline) {
      ah_log(AH_LOG_INFO, "HA: QP %u: the peer's shadow did not connect within AUTOHA_HA_CONNECT_S; it runs "
             "without one", m->qpn);
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    return 0;
  }
  if (s == SH_PUBLISHED) {
    uint8_t key[HA_KEY];
    ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_SHADOW);
    shadow_info_t peer;
    int n = ha_dir_get(key, &peer, sizeof peer, 0.002);
    if (n == (int)sizeof peer && peer.magic == SHADOW_MAGIC) {
      if (shadow_connect(m, &peer) != 0) atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
    if (ha_now_s() > m->sh_deadline) {
      ah_log(AH_LOG_INFO, "HA: QP %u: the peer published no shadow within AUTOHA_HA_CONNECT_S (no autoha or "
             "AUTOHA_HA=off there?); it runs without one", m->qpn);
      atomic_store(&m->sh_state, SH_DEAD);
      return 1;
    }
  }
  return 0;
}
