/* shim_ha.h: transparent RDMA failover (shim/shim_ha.c, docs/ha.md) as the verbs hook
 * (shim_verbs.c) drives it: it reports the queue pairs NCCL creates, connects and destroys, and
 * the HA layer takes over those contexts' data path. */
#ifndef AH_SHIM_HA_H
#define AH_SHIM_HA_H

#include <infiniband/verbs.h>

#include "ah_report.h"

/* The real control verbs, as the hook resolved them for NCCL. */
typedef struct {
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
} ah_shim_ha_verbs_t;

/* 1 when AUTOHA_HA asks for shadows (path or port), else 0. Cheap after the first call. */
int ah_shim_ha_on(void);
/* NCCL created `qp` with `init` (after the provider wrote its capacities back). An RC QP becomes
 * managed: its context's post_send, post_recv and poll_cq are wrapped (once per context). */
void ah_shim_ha_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init, const ah_shim_ha_verbs_t *real);
/* NCCL's ibv_modify_qp(qp, attr, mask) succeeded: INIT, RTR and RTS facts are kept, and at RTS the
 * background thread starts building the shadow. */
void ah_shim_ha_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask);
/* NCCL is about to destroy qp: its shadow goes first (it shares NCCL's CQs). */
void ah_shim_ha_destroying(struct ibv_qp *qp);
/* The coordinator through whose hub shadows are exchanged: the process's one connection, or NULL
 * (called by shim_coord.c, which owns the connections). */
struct ah_coord;
void ah_shim_ha_set_coord(struct ah_coord *c);
/* The report's "ha" section: the policy ("" when off), shadows ready, failovers (the first
 * AH_REPORT_HA_MAX with time, device, stall and work requests replayed) and totals. */
void ah_shim_ha_report(ah_report_ha_t *h);

#endif
