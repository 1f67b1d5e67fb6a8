/* rdma_ha.h: transparent RDMA failover (rdma/rdma_ha_*.c, docs/ha.md) as the verbs hook
 * (rdma_verbs.c) drives it: it reports the queue pairs NCCL creates, connects and destroys, and
 * the HA layer takes over those contexts' data path. What shim/ asks of the layer is in rdma.h. */
#ifndef AH_RDMA_HA_H
#define AH_RDMA_HA_H

#include <infiniband/verbs.h>

#include "ah_report.h"

/* The real control verbs, as the hook resolved them for NCCL. */
typedef struct {
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  /* from the verbs hook, for the rebalance: the UDP source port the hook gave a queue pair at RTR
   * (0: none, NCCL's own); a live move of an RTS queue pair to another port with
   * mlx5dv_modify_qp_udp_sport (RTS->RTS), 0 or -1 when libmlx5 lacks it or it failed (errno) */
  uint16_t (*qp_sport)(struct ibv_qp *);
  int (*move_sport)(struct ibv_qp *, uint16_t);
  /* AUTOHA_HA=nic: the real verb name@version from the libibverbs NCCL resolved its verbs from,
   * or NULL (the backup NIC is opened and registered with these) */
  void *(*resolve)(const char *name, const char *version);
} ah_shim_ha_verbs_t;

/* 1 when AUTOHA_HA asks for shadows (path, port or nic), else 0. Cheap after the first call. */
int ah_shim_ha_on(void);
/* 1 when AUTOHA_HA=nic is on: the verbs hook then reports NCCL's memory registrations (below). */
int ah_shim_ha_nic_on(void);
/* AUTOHA_HA=nic (rdma_ha_nic.c; called only when ah_shim_ha_nic_on()): NCCL registered mr (iova: the address its peers use; dmabuf_fd
 * -1 for host memory, else the dma-buf fd and offset NCCL passed, which is duplicated); it is
 * mirrored on the backup NIC, now if that NIC is open, else when the first shadow opens it. NCCL is
 * about to deregister mr: its mirror goes with it. errno is left as it was. */
void ah_shim_ha_mr_registered(struct ibv_mr *mr, uint64_t iova, int access, int dmabuf_fd,
                              uint64_t offset);
void ah_shim_ha_mr_deregistering(struct ibv_mr *mr);
/* NCCL created `qp` with `init` (after the provider wrote its capacities back). An RC QP becomes
 * managed: its context's post_send, post_recv and poll_cq are wrapped (once per context). */
void ah_shim_ha_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init,
                        const ah_shim_ha_verbs_t *real);
/* NCCL is about to take qp to RTS with attr: when qp is one the layer protects (a managed RC QP
 * that gets a shadow) and AUTOHA_HA_IB_TIMEOUT / AUTOHA_HA_IB_RETRY_CNT ask for a shorter RC retry
 * window than NCCL's attributes, writes attr with the shorter timeout and retry count into *out_p
 * and returns 1 (the caller passes *out_p on); else 0. Never lengthens what NCCL asked. */
int ah_shim_ha_rts_attr(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_attr *out_p);
/* NCCL's ibv_modify_qp(qp, attr, mask) succeeded: INIT, RTR and RTS facts are kept, and at RTS the
 * background thread starts building the shadow. */
void ah_shim_ha_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask);
/* NCCL's ibv_get_async_event on ctx returned ev: 1 when the event is the HA layer's to absorb (the
 * caller acknowledges it and reads the next) — a shadow's QP event; a QP event of a primary failing
 * over or failed over; PORT_ERR of a port every one of whose managed queue pairs has a ready shadow
 * on another port, or runs on it — else 0 (NCCL gets it unchanged). */
int ah_shim_ha_event_absorbed(struct ibv_context *ctx, const struct ibv_async_event *ev);
/* NCCL is about to destroy qp: its shadow goes first (it shares NCCL's CQs). */
void ah_shim_ha_destroying(struct ibv_qp *qp);

#endif
