/* The async events of the devices sim/'s NCCL opened, read as NCCL's net_ib reads them: one thread
 * per device blocked in ibv_get_async_event (reached through dlvsym, so a preloaded failover layer
 * sees the lookup as it sees real NCCL's and may filter what comes back). What each event does
 * follows net_ib up to 2.29:
 *   DEVICE_FATAL, CQ_ERR                  every communicator using the device fails its next step
 *                                         with ncclSystemError (net_ib counts them on the device and
 *                                         the CQ's owner; sim/'s CQs are per communicator and
 *                                         device, so the device's count stands for both);
 *   QP_FATAL, QP_REQ_ERR, QP_ACCESS_ERR   the owner of the QP fails its next step; net_ib finds the
 *                                         owner through qp_context, which it treats as its own: an
 *                                         event of a QP whose qp_context is not NCCL's (a failover
 *                                         layer's shadow leaking through) would make it write
 *                                         through a foreign pointer — sim/ stops the process there,
 *                                         loudly, instead;
 *   PORT_ERR                              a warning only;
 *   others                                logged at info.
 * Then each event is acknowledged. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "sim_ib_async.h"
#include "sim_internal.h"

#define ASYNC_MAX_QPS 256

static _Atomic unsigned dev_fatal[SIM_IB_ASYNC_MAX_DEVS];
static pthread_mutex_t qp_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct ibv_qp *fatal_qps[ASYNC_MAX_QPS];
static int nfatal_qps;
static _Atomic unsigned fatal_gen; /* bumped whenever the counts or the list change */
static const void *own_tag;

typedef struct {
  const sim_verbs_table_t *t;
  sim_ib_dev_t *dev;
  int index;
} async_arg_t;

static const char *event_name(enum ibv_event_type e) {
  switch (e) {
    case IBV_EVENT_DEVICE_FATAL: return "device fatal";
    case IBV_EVENT_CQ_ERR: return "CQ error";
    case IBV_EVENT_QP_FATAL: return "QP fatal";
    case IBV_EVENT_QP_REQ_ERR: return "QP invalid request";
    case IBV_EVENT_QP_ACCESS_ERR: return "QP access error";
    case IBV_EVENT_PORT_ERR: return "port error";
    case IBV_EVENT_PORT_ACTIVE: return "port active";
    case IBV_EVENT_COMM_EST: return "communication established";
    default: return "other";
  }
}

static void on_event(const async_arg_t *a, const struct ibv_async_event *ev) {
  const char *what = event_name(ev->event_type);
  switch (ev->event_type) {
    case IBV_EVENT_DEVICE_FATAL:
    case IBV_EVENT_CQ_ERR:
      atomic_fetch_add(&dev_fatal[a->index], 1);
      atomic_fetch_add(&fatal_gen, 1);
      sim_log_warn("NET/IB: %s: async event: %s", a->dev->name, what);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR: {
      const struct ibv_qp *qp = ev->element.qp;
      if (!qp || qp->qp_context != own_tag) {
        sim_log_warn(
            "NET/IB: %s: async event: %s on QP %u, whose qp_context (%p) is not this library's: "
            "NCCL's net_ib would write through it; stopping the process",
            a->dev->name, what, qp ? qp->qp_num : 0u, qp ? qp->qp_context : NULL);
        abort();
      }
      pthread_mutex_lock(&qp_lock);
      if (nfatal_qps < ASYNC_MAX_QPS) fatal_qps[nfatal_qps++] = qp;
      pthread_mutex_unlock(&qp_lock);
      atomic_fetch_add(&fatal_gen, 1);
      sim_log_warn("NET/IB: %s: async event: %s on QP %u", a->dev->name, what, qp->qp_num);
      break;
    }
    case IBV_EVENT_PORT_ERR:
      sim_log_warn("NET/IB: %s: async event: %s on port %d", a->dev->name, what,
                   ev->element.port_num);
      break;
    default:
      sim_log_info("NET/IB: %s: async event: %s (%d)", a->dev->name, what, (int)ev->event_type);
      break;
  }
}

static void *async_main(void *arg) {
  async_arg_t *a = arg;
  struct ibv_async_event ev;
  while (a->t->get_async_event(a->dev->ctx, &ev) == 0) { /* -1: the context was closed */
    on_event(a, &ev);
    a->t->ack_async_event(&ev);
  }
  free(a);
  return NULL;
}

void sim_ib_async_start(const sim_verbs_table_t *t, sim_ib_dev_t *devs, int n, const void *tag) {
  own_tag = tag;
  if (!t->get_async_event || !t->ack_async_event) return;
  for (int i = 0; i < n && i < SIM_IB_ASYNC_MAX_DEVS; i++) {
    async_arg_t *a = malloc(sizeof *a);
    if (!a) return;
    *a = (async_arg_t){t, &devs[i], i};
    pthread_t th;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&th, &at, async_main, a) != 0) {
      free(a);
      sim_log_warn("NET/IB: %s: cannot start the async event thread; its events go unread",
                   devs[i].name);
    }
    pthread_attr_destroy(&at);
  }
}

unsigned sim_ib_async_gen(void) { return atomic_load(&fatal_gen); }

unsigned sim_ib_async_dev_fatal(int devi) {
  return devi >= 0 && devi < SIM_IB_ASYNC_MAX_DEVS ? atomic_load(&dev_fatal[devi]) : 0;
}

int sim_ib_async_qp_fatal(const struct ibv_qp *qp) {
  int hit = 0;
  pthread_mutex_lock(&qp_lock);
  for (int i = 0; i < nfatal_qps && !hit; i++) hit = fatal_qps[i] == qp;
  pthread_mutex_unlock(&qp_lock);
  return hit;
}
