/* rdma_ha_event.c: NCCL's async events, filtered (docs/ha.md). NCCL aborts a communicator on a
 * fatal QP or port event; the events of shadows, of primaries the HA layer has moved off, a
 * port's PORT_ERR when every managed queue pair on it has a ready shadow elsewhere, and a device's
 * DEVICE_FATAL when every one on the device has one on another NIC are the HA layer's, and never
 * reach NCCL. */
#include "rdma_ha_int.h"

static _Atomic unsigned long st_events; /* events absorbed */

int ah_shim_ha_event_absorbed(struct ibv_context *ctx, const struct ibv_async_event *ev) {
  if (!ev || !atomic_load(&ah_shim_ha_nctx)) return 0;
  ha_ctx_t *hc = ctx_of(ctx);
  if (!hc) return 0;
  switch (ev->event_type) {
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED: {
      struct ibv_qp *qp = ev->element.qp;
      ha_qp_t *m = qp ? table_find(hc, qp->qp_num) : NULL;
      if (!m) return 0;
      int st = atomic_load(&m->state);
      /* a shadow's event would look to NCCL like one of its own QPs' (its qp_context is NULL); a
     * primary the HA layer is moving off, or moved off, is no longer NCCL's concern */
      int own = m->qp != qp || st == HA_FAILING || st == HA_SHADOW;
      if (own) {
        atomic_fetch_add(&st_events, 1);
        AH_LOG_DEV_CAPPED(4, m->gpu, AH_LOG_INFO, "HA: async event %d of %s QP %u absorbed",
                          (int)ev->event_type, m->qp != qp ? "a shadow of" : "failed-over", m->qpn);
      }
      return own;
    }
    case IBV_EVENT_PORT_ERR: {
      int port = ev->element.port_num, n = 0, covered = 0;
      pthread_mutex_lock(&ah_shim_ha_mu);
      for (ha_qp_t *m = ah_shim_ha_qps; m; m = m->next) {
        if (m->hc != hc || m->port != port) continue;
        n++;
        int st = atomic_load(&m->state), sb = atomic_load(&m->sb.state);
        /* a nic shadow is on another NIC: this one's port events do not touch it */
        covered += (st == HA_SHADOW && (m->sh_port != port || ha_on_nic(m, m->sh))) ||
                   ((st == HA_PEACE || st == HA_FAILING) && sb == SH_READY &&
                    (m->sb.port != port || ha_on_nic(m, m->sb.qp)));
      }
      pthread_mutex_unlock(&ah_shim_ha_mu);
      if (n == 0 || covered != n) return 0;
      atomic_fetch_add(&st_events, 1);
      ah_log(AH_LOG_WARN,
             "HA: %s port %d is down; its %d queue pairs have shadows off it, so NCCL is not told "
             "(PORT_ERR absorbed)",
             ctx->device ? ctx->device->name : "?", port, n);
      return 1;
    }
    case IBV_EVENT_DEVICE_FATAL: {
      /* NCCL fails every communicator on the device; the queue pairs whose traffic runs, or can run,
     * on the backup NIC (AUTOHA_HA=nic) do not need it to */
      int n = 0, covered = 0;
      pthread_mutex_lock(&ah_shim_ha_mu);
      for (ha_qp_t *m = ah_shim_ha_qps; m; m = m->next) {
        if (m->hc != hc) continue;
        n++;
        int st = atomic_load(&m->state), sb = atomic_load(&m->sb.state);
        covered +=
            (st == HA_SHADOW && ha_on_nic(m, m->sh)) ||
            ((st == HA_PEACE || st == HA_FAILING) && sb == SH_READY && ha_on_nic(m, m->sb.qp));
      }
      pthread_mutex_unlock(&ah_shim_ha_mu);
      if (n == 0 || covered != n) return 0;
      atomic_fetch_add(&st_events, 1);
      ah_log(AH_LOG_WARN,
             "HA: %s reported a fatal error (DEVICE_FATAL); its %d queue pairs have shadows on "
             "another NIC, so NCCL is not told",
             ctx->device ? ctx->device->name : "?", n);
      return 1;
    }
    default: return 0;
  }
}
