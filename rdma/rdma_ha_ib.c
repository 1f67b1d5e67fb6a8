/* rdma_ha_ib.c: InfiniBand queue pairs under AUTOHA_HA (docs/ha.md, "InfiniBand"). NCCL connects an
 * IB queue pair within its subnet with no GRH: the peer is a LID, and the GIDs the failover's
 * directory is keyed by are not there. Each end's LID becomes a 16-byte address (ah_ha_ib.h) — this
 * end's from ibv_query_port, the peer's from the dlid — and a shadow publishes its own port's the
 * way a RoCE shadow publishes its GID, so the peer's shadow connects to that LID: the other port's
 * (port) or the backup NIC's (nic). The rest of the layer (records, replay, failback) is the
 * RoCE code unchanged. */
#include <errno.h>
#include <string.h>

#include "ah_env.h"
#include "ah_ha_ib.h"
#include "rdma_ha_ib.h"

typedef int (*query_port_fn)(struct ibv_context *, uint8_t, struct ibv_port_attr *);

/* The provider's ibv_query_port (the exported one takes the compat attributes, a prefix of struct
 * ibv_port_attr that holds the LID), or NULL. */
static query_port_fn query_port(const ha_ctx_t *hc) {
  static _Atomic(query_port_fn) fn;
  query_port_fn f = atomic_load(&fn);
  if (!f && hc->real.resolve) {
    *(void **)&f = hc->real.resolve("ibv_query_port", "IBVERBS_1.1");
    if (f) atomic_store(&fn, f);
  }
  return f;
}

/* The LID of port `port` of ctx; 0 when it has none (not InfiniBand, not yet swept, no such port). */
static uint16_t port_lid(const ha_ctx_t *hc, struct ibv_context *ctx, int port) {
  query_port_fn f = query_port(hc);
  struct ibv_port_attr a;
  memset(&a, 0, sizeof a);
  if (!f || f(ctx, (uint8_t)port, &a) != 0 || a.link_layer == IBV_LINK_LAYER_ETHERNET) return 0;
  return a.lid < 0xC000 ? a.lid : 0; /* a unicast LID */
}

int ah_shim_ha_ib_rtr(ha_qp_t *m, struct ibv_qp *qp) {
  int saved = errno, ok;
  if (!ha_by_lid(m)) {
    ok = m->hc->real.query_gid(qp->context, (uint8_t)m->port, m->rtr.ah_attr.grh.sgid_index,
                               &m->sgid) == 0;
  } else {
    uint16_t lid = port_lid(m->hc, qp->context, m->port);
    ok = lid != 0 && m->rtr.ah_attr.dlid != 0;
    if (ok) {
      ah_ha_ib_lid_addr(lid, m->sgid.raw);
      ah_ha_ib_lid_addr(m->rtr.ah_attr.dlid, m->rtr.ah_attr.grh.dgid.raw);
    }
  }
  errno = saved;
  return ok;
}

int ah_shim_ha_ib_policy_ok(const ha_qp_t *m) {
  if (!ha_by_lid(m) || ah_env_settings()->ha != AH_HA_POLICY_PATH) return 1;
  AH_LOG_DEV_CAPPED(
      1, m->gpu, AH_LOG_INFO,
      "HA: QP %u is addressed by LID (InfiniBand, no GRH): AUTOHA_HA=path moves a RoCE "
      "queue pair's UDP source port, which it has not, so it runs without a shadow "
      "(AUTOHA_HA=port or nic give InfiniBand queue pairs shadows)",
      m->qpn);
  return 0;
}

int ah_shim_ha_port_addr(ha_qp_t *m, struct ibv_context *ctx, int port, int gid_index,
                         union ibv_gid *addr_p) {
  if (!ha_by_lid(m)) return m->hc->real.query_gid(ctx, (uint8_t)port, gid_index, addr_p) ? -1 : 0;
  uint16_t lid = port_lid(m->hc, ctx, port);
  if (!lid) return -1;
  ah_ha_ib_lid_addr(lid, addr_p->raw);
  return 0;
}

void ah_shim_ha_av_peer(const ha_qp_t *m, struct ibv_ah_attr *av, const uint8_t addr[16]) {
  if (ha_by_lid(m)) av->dlid = ah_ha_ib_addr_lid(addr);
  memcpy(av->grh.dgid.raw, addr, 16); /* on IB only the directory's keys read it */
}
