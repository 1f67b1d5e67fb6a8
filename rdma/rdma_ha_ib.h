/* rdma_ha_ib.h: the verbs side of the HA layer's InfiniBand support (rdma_ha_ib.c; docs/ha.md,
 * "InfiniBand"): the address of a queue pair's ends and of a shadow's port, and the peer's address
 * put into a shadow's RTR attributes — a GID on RoCE, a LID on InfiniBand without a GRH. */
#ifndef AH_RDMA_HA_IB_H
#define AH_RDMA_HA_IB_H

#include "rdma_ha_int.h"

#pragma GCC visibility push(hidden)

/* Whether m's primary is addressed by LID (InfiniBand, no GRH in NCCL's RTR attributes). */
static inline int ha_by_lid(const ha_qp_t *m) { return !m->rtr.ah_attr.is_global; }

/* At NCCL's RTR of m (attr: its attributes, kept in m->rtr): m->sgid becomes this end's address
 * and, for a LID-addressed queue pair, m->rtr's GRH the peer's (made from the dlid; the GRH is not
 * used while is_global is 0), so that the directory's keys name both ends as on RoCE. Returns 1
 * when m->sgid was set. errno is left as it was. */
int ah_shim_ha_ib_rtr(ha_qp_t *m, struct ibv_qp *qp);
/* Whether AUTOHA_HA's policy can give m a shadow: path moves a RoCE queue pair's UDP source port,
 * which a LID-addressed one has not (said once; port and nic can). */
int ah_shim_ha_ib_policy_ok(const ha_qp_t *m);
/* The address of port `port` of ctx for a shadow of m: its GID `gid_index` on RoCE, the address of
 * its LID (ibv_query_port) for a LID-addressed m. Returns 0, or -1 (no such port or GID, or the
 * port has no LID yet). */
int ah_shim_ha_port_addr(ha_qp_t *m, struct ibv_context *ctx, int port, int gid_index,
                         union ibv_gid *addr_p);
/* Points a shadow's RTR attributes at the peer's shadow, whose address (as published) is addr:
 * its dlid for a LID-addressed m, its GID otherwise. */
void ah_shim_ha_av_peer(const ha_qp_t *m, struct ibv_ah_attr *av, const uint8_t addr[16]);

#pragma GCC visibility pop

#endif
