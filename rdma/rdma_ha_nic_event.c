/* rdma_ha_nic_event.c: the async events of the backup NICs (AUTOHA_HA=nic, docs/ha.md "Policy
 * nic"). autoha opens the backup NIC itself, so NCCL's async thread never reads that context's
 * events; the background thread does, without blocking, once per round. A port that goes down
 * (PORT_ERR) or a device that fails (DEVICE_FATAL) kills the standbys on it at once, and a QP
 * error kills the standby it names: they are rebuilt as after a failed heartbeat.
 *
 * Key choice: without the events, a standby on a dead backup port is found dead only by its next
 * heartbeat (every 2 s), which fails only after RC's retry window (34 s with NCCL's timeout 20 and
 * retry count 7): a failover arriving meanwhile would wait that long for a standby that cannot
 * work. The event costs nothing in peace time, and unread events would otherwise pile up in the
 * context's event queue for the life of the job. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rdma_ha_int.h"

/* Marks dead the standbys on NIC `name` (port `port`; 0: every port), and with qpn, only the one
 * with that QP number. Returns how many.
 *
 * Every queue pair on the NIC is looked at (a process with many channels and peers has hundreds):
 * each is marked busy, which keeps it from a destroy while its lock is taken outside ah_shim_ha_mu. Only
 * this thread marks queue pairs busy, and each of its other loops clears its marks before it
 * returns, so none on the NIC is skipped as another loop's. */
static int standbys_dead(const char *name, int port, uint32_t qpn, const char *why) {
  ha_qp_t **hit = NULL;
  int n = 0, cap = 0, dead = 0;
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (ha_qp_t *m = ah_shim_ha_qps; m; m = m->next) {
    const char *nic = ah_shim_ha_nic_name(m);
    if (!nic || strcmp(nic, name) != 0 || m->busy) continue;
    if (n == cap) {
      ha_qp_t **h = realloc(hit, (size_t)(cap ? 2 * cap : 64) * sizeof *h);
      if (!h) break; /* out of memory: the rest are found dead by their heartbeats, as before */
      hit = h, cap = cap ? 2 * cap : 64;
    }
    m->busy = 1;
    hit[n++] = m;
  }
  pthread_mutex_unlock(&ah_shim_ha_mu);
  for (int i = 0; i < n; i++) {
    ha_qp_t *m = hit[i];
    pthread_mutex_lock(&m->mu);
    int sb = atomic_load(&m->sb.state);
    if (sb != SH_DEAD && sb != SH_NONE && sb != SH_WANTED && ha_on_nic(m, m->sb.qp) &&
        (!port || m->sb.port == port) && (!qpn || m->sb.qpn == qpn)) {
      ah_shim_ha_standby_dead(m, why);
      dead++;
    }
    pthread_mutex_unlock(&m->mu);
  }
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (int i = 0; i < n; i++) hit[i]->busy = 0;
  pthread_cond_broadcast(&ah_shim_ha_idle_cv);
  pthread_mutex_unlock(&ah_shim_ha_mu);
  free(hit);
  return dead;
}

static void on_event(const char *name, const struct ibv_async_event *ev) {
  char why[128];
  switch (ev->event_type) {
    case IBV_EVENT_PORT_ERR: {
      int port = ev->element.port_num;
      snprintf(why, sizeof why, "port %d of the backup NIC %s went down (PORT_ERR)", port, name);
      int n = standbys_dead(name, port, 0, why);
      AH_LOG_CAPPED(
          8, AH_LOG_WARN,
          "HA: backup NIC %s port %d is down (PORT_ERR): %d standby shadows on it given up; "
          "they are rebuilt",
          name, port, n);
      break;
    }
    case IBV_EVENT_DEVICE_FATAL: {
      snprintf(why, sizeof why, "the backup NIC %s reported a fatal error (DEVICE_FATAL)", name);
      int n = standbys_dead(name, 0, 0, why);
      AH_LOG_CAPPED(
          8, AH_LOG_WARN,
          "HA: backup NIC %s reported a fatal error (DEVICE_FATAL): %d standby shadows on it "
          "given up",
          name, n);
      break;
    }
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      /* a standby's: dead; a carrier's: its completions fail too, and the failover starts from them */
      uint32_t qpn = ev->element.qp ? ev->element.qp->qp_num : 0;
      snprintf(why, sizeof why, "an async error event (%d) on the backup NIC %s",
               (int)ev->event_type, name);
      if (qpn && standbys_dead(name, 0, qpn, why) == 0)
        AH_LOG_CAPPED(
            8, AH_LOG_INFO,
            "HA: async error event %d on QP %u of the backup NIC %s (a shadow carrying traffic: "
            "its completions start the failover)",
            (int)ev->event_type, qpn, name);
      break;
    }
    case IBV_EVENT_CQ_ERR:
      AH_LOG_CAPPED(8, AH_LOG_WARN, "HA: a CQ of the backup NIC %s overran (CQ_ERR)", name);
      break;
    default:
      ah_log(AH_LOG_DEBUG, "HA: async event %d on the backup NIC %s", (int)ev->event_type, name);
      break;
  }
}

void ah_shim_ha_nic_events(void) {
  for (int i = 0;; i++) {
    /* bounded per round: a flapping port's further events wait for the next one */
    for (int k = 0; k < 64; k++) {
      struct ibv_async_event ev;
      const char *name = NULL;
      int r = ah_shim_ha_nic_event(i, &ev, &name);
      if (r < 0) return; /* past the last backup NIC */
      if (r == 0) break;
      on_event(name, &ev);
      ah_shim_ha_nic_event_ack(&ev);
    }
  }
}
