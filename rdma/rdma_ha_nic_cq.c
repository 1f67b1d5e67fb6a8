/* rdma_ha_nic_cq.c: the completions of shadows on a backup NIC (AUTOHA_HA=nic, docs/ha.md "Policy
 * nic"). They arrive on the backup NIC's CQs, which NCCL never polls: the background thread polls
 * them (heartbeats), and once a queue pair of a context has switched to its nic shadow, that
 * context's poll_cq entry (already the context's HA wrapper, rdma_ha_data.c) becomes nic_poll_cq,
 * which polls the backup CQs standing behind the CQ NCCL polls and then runs that wrapper.
 *
 * Key choice: whoever polls a backup CQ queues what NCCL gets behind the context's synthesized
 * completions (which NCCL's poll hands out first), under the backup CQ's lock — so each queue
 * pair's completions reach NCCL once and in order whichever thread took them. Peace time is
 * unchanged: the entry is replaced only on a nic failover. */
#include "rdma_ha_int.h"

typedef int (*poll_fn)(struct ibv_cq *, int, struct ibv_wc *);

static pthread_mutex_t live_mu = PTHREAD_MUTEX_INITIALIZER;

/* Polls c and queues what NCCL gets for its next poll of c->nccl (one poller at a time). */
static void nic_cq_drain(ha_nic_cq_t *c, void *arg) {
  (void)arg;
  struct ibv_wc wc[32];
  pthread_mutex_lock(&c->mu);
  for (int round = 0; round < 64; round++) { /* bounded: a busy CQ refills */
    int r = c->bk->context->ops.poll_cq(c->bk, 32, wc);
    if (r <= 0) break;
    for (int i = 0; i < r; i++) {
      ha_qp_t *m = ah_shim_ha_nic_shadow_of(c->bk, wc[i].qp_num);
      if (m && ah_shim_ha_wc_from_shadow(m, &wc[i])) ah_shim_ha_synth_push(m->hc, c->nccl, &wc[i]);
    }
    if (r < 32) break;
  }
  pthread_mutex_unlock(&c->mu);
}

/* NCCL's poll of a context one of whose queue pairs runs on a nic shadow: the backup CQs behind
 * cq first (queued behind the synthesized completions), then the HA wrapper. Returns what it does. */
static int nic_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  ah_shim_ha_nic_cq_each(cq, nic_cq_drain, NULL);
  ha_ctx_t *hc = ctx_of(cq->context); /* each context has its own HA poll wrapper */
  return hc ? hc->ha_poll_cq(cq, n, wc) : -1;
}

void ah_shim_ha_nic_poll_all(void) { ah_shim_ha_nic_cq_each(NULL, nic_cq_drain, NULL); }

void ah_shim_ha_nic_go_live(ha_qp_t *m) {
  if (!m->nq) return;
  struct ibv_context *ctx = m->qp->context;
  pthread_mutex_lock(&live_mu);
  poll_fn cur = __atomic_load_n(&ctx->ops.poll_cq, __ATOMIC_ACQUIRE);
  if (cur != nic_poll_cq) { __atomic_store_n(&ctx->ops.poll_cq, nic_poll_cq, __ATOMIC_RELEASE); }
  pthread_mutex_unlock(&live_mu);
}
