/* vb_mlx5.c: sim/'s libmlx5.so.1 — the three direct-verbs calls NCCL and autoha make on mlx5
 * devices, answered for the devices of sim/'s libibverbs stand-in (which this library links):
 * mlx5dv_is_supported, a minimal mlx5dv_query_device, and mlx5dv_modify_qp_udp_sport. */
#include <errno.h>
#include <infiniband/mlx5dv.h>
#include <string.h>

#include "../ncclsim_verbs.h"

#define VB_API __attribute__((visibility("default")))

VB_API bool mlx5dv_is_supported(struct ibv_device *device) {
  return ncclsimVerbsIsDevice(device) != 0;
}

VB_API int mlx5dv_query_device(struct ibv_context *ctx, struct mlx5dv_context *attrs) {
  if (!ctx || !attrs || !ncclsimVerbsIsDevice(ctx->device)) return EOPNOTSUPP;
  uint64_t asked = attrs->comp_mask;
  memset(attrs, 0, sizeof *attrs);
  attrs->version = 0;
  attrs->flags = MLX5DV_CONTEXT_FLAGS_CQE_V1;
  attrs->comp_mask = 0; /* none of the optional blocks is filled */
  (void)asked;
  return 0;
}

VB_API int mlx5dv_modify_qp_udp_sport(struct ibv_qp *qp, uint16_t udp_sport) {
  return ncclsimVerbsQpSetSport(qp, udp_sport);
}
