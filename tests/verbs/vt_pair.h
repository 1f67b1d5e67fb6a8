/* vt_pair.h: two connected RC QPs for the provider's unit tests — one on mlx5_<a>, one on
 * mlx5_<b> of this process's simulated node — each with its own PD, CQ and a registered buffer. */
#ifndef VT_PAIR_H
#define VT_PAIR_H

#include <infiniband/verbs.h>

#define VT_BUF (1u << 20)

typedef struct {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  unsigned char *buf;
} vt_side_t;

typedef struct {
  int qp_type; /* IBV_QPT_RC (default 0 means RC) */
  int sq_sig_all;
  int mr_access; /* 0: LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ */
  int qp_access; /* 0: REMOTE_WRITE | REMOTE_READ */
  int timeout, retry_cnt, rnr_retry, min_rnr_timer;
  int max_inline;
} vt_opts_t;

struct ibv_context *vt_open(int nic);
/* Creates both sides (nics a and b) and takes both QPs to RTS; asserts on failure. */
void vt_pair(vt_side_t *s, vt_side_t *r, int a, int b, const vt_opts_t *o);
/* The same, but r stops in INIT (vt_qp_rtr_rts finishes it). */
void vt_pair_half(vt_side_t *s, vt_side_t *r, int a, int b, const vt_opts_t *o);
int vt_qp_init(struct ibv_qp *qp, const vt_opts_t *o);
int vt_qp_rtr_rts(struct ibv_qp *qp, struct ibv_qp *peer, struct ibv_context *peer_ctx,
                  const vt_opts_t *o);
void vt_side_free(vt_side_t *x);
/* Modifies a QP through the three connection steps toward `peer` (returns the first failure). */
int vt_connect(struct ibv_qp *qp, struct ibv_qp *peer, struct ibv_context *peer_ctx,
               const vt_opts_t *o);
/* Polls `cq` until `n` completions arrived or `timeout_s` passed; returns how many. */
int vt_poll(struct ibv_cq *cq, struct ibv_wc *wc, int n, double timeout_s);
/* Posts one WR of `opcode` from s->buf+loff to the peer's remote (addr, rkey). */
int vt_post(vt_side_t *s, int opcode, uint64_t wr_id, uint32_t loff, uint32_t len, uint64_t raddr,
            uint32_t rkey, int flags);
int vt_post_recv(vt_side_t *r, uint64_t wr_id, uint32_t off, uint32_t len);

#endif
