/* vb_context.c: opening and closing a context — its async-event pipe, the verbs ops (CQ ops from
 * vb_cq.c, posting from vb_post.c, the extended query_port from vb_device.c), its doorbell and its
 * engine thread (vb_engine.c) — and entering it in vb_device.c's registry of open contexts. It is
 * the top of the provider's files: it ties the others together and nothing calls into it. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "vb_internal.h"

static _Atomic int ctx_serial;

VB_API struct ibv_context *ibv_open_device(struct ibv_device *device) {
  vb_dev_t *d = vb_dev(device);
  if (!d) {
    errno = ENODEV;
    return NULL;
  }
  vb_ctx_t *ctx = calloc(1, sizeof *ctx);
  int fds[2] = {-1, -1};
  if (!ctx) goto fail;
  if (pipe2(fds, O_CLOEXEC) != 0) goto fail_ctx;
  ctx->dev = d;
  pthread_mutex_init(&ctx->lock, NULL);
  struct ibv_context *c = &ctx->vctx.context;
  c->device = device;
  c->cmd_fd = -1;
  c->async_fd = fds[0];
  ctx->async_wr = fds[1];
  c->num_comp_vectors = 1;
  pthread_mutex_init(&c->mutex, NULL);
  c->abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx->vctx.sz = sizeof ctx->vctx;
  ctx->vctx.query_port = vb_query_port_ext;
  vb_cq_install_ops(ctx);
  c->ops.post_send = vb_post_send;
  c->ops.post_recv = vb_post_recv;
  ctx->next_key = 0x100u + (uint32_t)(getpid() & 0xff);
  for (int p = 0; p < 2; p++) ctx->port_up[p] = vb_net_port_up(d->node, d->nic, p + 1);
  snprintf(ctx->bell_name, sizeof ctx->bell_name, "/%sverbs-bell-%d-%d", vb_settings()->prefix,
           (int)getpid(), atomic_fetch_add(&ctx_serial, 1));
  ctx->bell = vb_bell_create(ctx->bell_name);
  if (!ctx->bell) goto fail_pipe;
  if (vb_engine_start(ctx) != 0) goto fail_bell;
  vb_ctx_register(ctx);
  return c;
fail_bell:
  vb_bell_close(ctx->bell, ctx->bell_name);
fail_pipe:
  close(fds[0]);
  close(fds[1]);
fail_ctx:
  free(ctx);
fail:
  errno = ENOMEM;
  return NULL;
}

VB_API int ibv_close_device(struct ibv_context *c) {
  vb_ctx_t *ctx = vb_ctx(c);
  vb_ctx_unregister(ctx);
  vb_engine_stop(ctx);
  vb_bell_close(ctx->bell, ctx->bell_name);
  close(ctx->async_wr); /* first: a thread blocked in ibv_get_async_event sees end of file */
  close(c->async_fd);
  free(ctx);
  return 0;
}
