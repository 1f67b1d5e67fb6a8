/* vb_cq.c: completion queues and completion channels. The engine thread adds completions, the
 * application polls them through context->ops.poll_cq (verbs.h's inline ibv_poll_cq). An armed
 * CQ with a channel gets one event (the CQ pointer written to the channel's pipe) at its next
 * completion, as ibv_req_notify_cq promises. A full CQ drops the completion and raises CQ_ERR. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "vb_internal.h"

VB_API struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *c) {
  struct ibv_comp_channel *ch = calloc(1, sizeof *ch);
  int fds[2];
  if (!ch || pipe2(fds, O_CLOEXEC) != 0) {
    free(ch);
    errno = ENOMEM;
    return NULL;
  }
  ch->context = c;
  ch->fd = fds[0];
  ch->refcnt = fds[1]; /* the write end; no CQ counts here (rdma-core's refcnt is internal) */
  return ch;
}

VB_API int ibv_destroy_comp_channel(struct ibv_comp_channel *ch) {
  close(ch->fd);
  close(ch->refcnt);
  free(ch);
  return 0;
}

VB_API struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
  if (cqe < 1 || cqe > (1 << 22) || comp_vector < 0 || comp_vector >= c->num_comp_vectors) {
    errno = EINVAL;
    return NULL;
  }
  vb_cq_t *q = calloc(1, sizeof *q);
  if (!q || !(q->wc = calloc((size_t)cqe + 1, sizeof *q->wc))) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->cap = cqe + 1;
  q->cq.context = c;
  q->cq.channel = channel;
  q->cq.cq_context = cq_context;
  q->cq.cqe = cqe;
  pthread_mutex_init(&q->lock, NULL);
  pthread_mutex_init(&q->cq.mutex, NULL);
  pthread_cond_init(&q->cq.cond, NULL);
  return &q->cq;
}

VB_API int ibv_destroy_cq(struct ibv_cq *cq) {
  vb_cq_t *q = (vb_cq_t *)cq;
  free(q->wc);
  pthread_mutex_destroy(&q->lock);
  free(q);
  return 0;
}

VB_API int ibv_resize_cq(struct ibv_cq *cq, int cqe) {
  vb_cq_t *q = (vb_cq_t *)cq;
  pthread_mutex_lock(&q->lock);
  int rc = 0;
  if (cqe < q->count || cqe > (1 << 22)) {
    rc = EINVAL;
  } else {
    struct ibv_wc *w = calloc((size_t)cqe + 1, sizeof *w);
    if (!w) {
      rc = ENOMEM;
    } else {
      for (int i = 0; i < q->count; i++) w[i] = q->wc[(q->head + i) % q->cap];
      free(q->wc);
      q->wc = w;
      q->head = 0;
      q->cap = cqe + 1;
      cq->cqe = cqe;
    }
  }
  pthread_mutex_unlock(&q->lock);
  return rc;
}

void vb_cq_push(vb_cq_t *q, const struct ibv_wc *wc) {
  int overflow = 0, notify = 0;
  pthread_mutex_lock(&q->lock);
  if (q->count >= q->cq.cqe) {
    overflow = 1;
  } else {
    q->wc[(q->head + q->count) % q->cap] = *wc;
    q->count++;
    if (q->armed && (!q->solicited_only || (wc->wc_flags & IBV_WC_WITH_IMM) || wc->status)) {
      q->armed = 0;
      notify = 1;
    }
  }
  pthread_mutex_unlock(&q->lock);
  if (notify && q->cq.channel) {
    struct ibv_cq *p = &q->cq;
    if (write(q->cq.channel->refcnt, &p, sizeof p) != (ssize_t)sizeof p)
      vb_log("completion channel write failed");
  }
  if (overflow) vb_async_push(vb_ctx(q->cq.context), IBV_EVENT_CQ_ERR, &q->cq);
}

static int vb_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  vb_cq_t *q = (vb_cq_t *)cq;
  if (n < 0) return -1;
  pthread_mutex_lock(&q->lock);
  int got = 0;
  while (got < n && q->count > 0) {
    wc[got++] = q->wc[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
  }
  pthread_mutex_unlock(&q->lock);
  return got;
}

static int vb_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  vb_cq_t *q = (vb_cq_t *)cq;
  pthread_mutex_lock(&q->lock);
  q->armed = 1;
  q->solicited_only = solicited_only;
  pthread_mutex_unlock(&q->lock);
  return 0;
}

VB_API int ibv_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context) {
  struct ibv_cq *p;
  ssize_t n;
  do n = read(ch->fd, &p, sizeof p);
  while (n < 0 && errno == EINTR);
  if (n != (ssize_t)sizeof p) return -1;
  *cq = p;
  *cq_context = p->cq_context;
  return 0;
}

VB_API void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += nevents;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

/* The async events of a context: written to a pipe whose read end is context->async_fd, so a
 * caller may poll() it as rdma-core documents; ibv_get_async_event blocks on it. */
void vb_async_push(vb_ctx_t *ctx, enum ibv_event_type type, void *element) {
  struct ibv_async_event ev;
  memset(&ev, 0, sizeof ev);
  ev.event_type = type;
  if (type == IBV_EVENT_PORT_ACTIVE || type == IBV_EVENT_PORT_ERR)
    ev.element.port_num = (int)(uintptr_t)element;
  else if (type == IBV_EVENT_CQ_ERR) ev.element.cq = element;
  else ev.element.qp = element;
  if (write(ctx->async_wr, &ev, sizeof ev) != (ssize_t)sizeof ev)
    vb_log("async event pipe write failed");
}

VB_API int ibv_get_async_event(struct ibv_context *c, struct ibv_async_event *event) {
  ssize_t n;
  do n = read(c->async_fd, event, sizeof *event);
  while (n < 0 && errno == EINTR);
  return n == (ssize_t)sizeof *event ? 0 : -1;
}

VB_API void ibv_ack_async_event(struct ibv_async_event *event) {}

void vb_cq_install_ops(vb_ctx_t *ctx) {
  struct ibv_context_ops *o = &ctx->vctx.context.ops;
  o->poll_cq = vb_poll_cq;
  o->req_notify_cq = vb_req_notify_cq;
}
