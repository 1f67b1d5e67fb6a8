/* vb_mr.c: protection domains and memory regions. A key is valid for one device context; the
 * responder looks a remote key up in the table of the context its QP belongs to and checks the VA
 * range and access flags there, as a NIC checks its MPT (the rkey equals the lkey). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vb_internal.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova

VB_API struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (!pd) {
    errno = ENOMEM;
    return NULL;
  }
  pd->context = c;
  return pd;
}

VB_API int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

#define ACCESS_KNOWN                                                                               \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                     \
   IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_ON_DEMAND |  \
   IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

VB_API struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                       unsigned int access) {
  access &= ~(unsigned)IBV_ACCESS_OPTIONAL_RANGE; /* optional flags may be ignored */
  if (!pd || (access & ~(unsigned)ACCESS_KNOWN) ||
      ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
       !(access & IBV_ACCESS_LOCAL_WRITE)) ||
      (length && !addr) || iova + length < iova) {
    errno = EINVAL;
    return NULL;
  }
  vb_ctx_t *ctx = vb_ctx(pd->context);
  vb_mr_t *m = calloc(1, sizeof *m);
  if (!m) {
    errno = ENOMEM;
    return NULL;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->iova = iova;
  m->access = (int)access;
  pthread_mutex_lock(&ctx->lock);
  uint32_t idx = ctx->next_key++ & 0xffffff;
  m->mr.lkey = m->mr.rkey = idx << 8 | (uint32_t)((idx * 37u + 0x5a) & 0xff);
  m->mr.handle = idx;
  HASH_ADD(hh, ctx->mrs, mr.rkey, sizeof(uint32_t), m);
  int added = VB_HASH_ADDED(m);
  pthread_mutex_unlock(&ctx->lock);
  if (!added) {
    free(m);
    errno = ENOMEM;
    return NULL;
  }
  return &m->mr;
}

VB_API struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  return ibv_reg_mr_iova2(pd, addr, length, (uintptr_t)addr, (unsigned)access);
}

VB_API struct ibv_mr *ibv_reg_mr_iova(struct ibv_pd *pd, void *addr, size_t length, uint64_t iova,
                                      int access) {
  return ibv_reg_mr_iova2(pd, addr, length, iova, (unsigned)access);
}

/* No device memory exists here: every dma-buf registration is refused with EOPNOTSUPP, the
 * answer NCCL's probe (fd -1) reads as "DMA-BUF unsupported". */
VB_API struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                        uint64_t iova, int fd, int access) {
  errno = EOPNOTSUPP;
  return NULL;
}

VB_API int ibv_dereg_mr(struct ibv_mr *mr) {
  if (!mr) return EINVAL;
  vb_ctx_t *ctx = vb_ctx(mr->context);
  vb_mr_t *m = (vb_mr_t *)mr;
  pthread_mutex_lock(&ctx->lock);
  HASH_DEL(ctx->mrs, m);
  pthread_mutex_unlock(&ctx->lock);
  free(m);
  return 0;
}

void *vb_mr_find(vb_ctx_t *ctx, uint32_t key, int is_local, uint64_t va, uint64_t len, int access) {
  vb_mr_t *m;
  HASH_FIND(hh, ctx->mrs, &key, sizeof key, m);
  if (!m) return NULL;
  if ((m->access & access) != access) return NULL;
  uint64_t base = is_local ? (uintptr_t)m->mr.addr : m->iova;
  if (va < base || va - base > m->mr.length || len > m->mr.length - (va - base)) return NULL;
  return (uint8_t *)m->mr.addr + (va - base);
}
