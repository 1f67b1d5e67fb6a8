/* vb_qp_attr.c: which ibv_modify_qp attribute masks a QP state transition takes, as mlx5 checks
 * them (the kernel's table of required and optional attributes per transition, RC and UC).
 * Pure function: no QP, no locks; tests call it directly. */
#include "vb_internal.h"

typedef struct {
  int valid, req[2], opt[2]; /* [0] RC, [1] UC */
} rule_t;

#define S(x) IBV_QPS_##x
#define A(x) IBV_QP_##x

static rule_t rule(enum ibv_qp_state cur, enum ibv_qp_state next) {
  rule_t r = {0, {0, 0}, {0, 0}};
  if (next == S(RESET) || next == S(ERR)) {
    r.valid = 1; /* any state to RESET or ERR: STATE only */
    return r;
  }
  switch (cur) {
    case S(RESET):
      if (next == S(INIT)) {
        r.valid = 1;
        r.req[0] = r.req[1] = A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS);
      }
      break;
    case S(INIT):
      if (next == S(INIT)) {
        r.valid = 1;
        r.opt[0] = r.opt[1] = A(PKEY_INDEX) | A(PORT) | A(ACCESS_FLAGS);
      } else if (next == S(RTR)) {
        r.valid = 1;
        r.req[0] = A(AV) | A(PATH_MTU) | A(DEST_QPN) | A(RQ_PSN) | A(MAX_DEST_RD_ATOMIC) |
                   A(MIN_RNR_TIMER);
        r.req[1] = A(AV) | A(PATH_MTU) | A(DEST_QPN) | A(RQ_PSN);
        r.opt[0] = r.opt[1] = A(ALT_PATH) | A(ACCESS_FLAGS) | A(PKEY_INDEX);
      }
      break;
    case S(RTR):
      if (next == S(RTS)) {
        r.valid = 1;
        r.req[0] = A(SQ_PSN) | A(TIMEOUT) | A(RETRY_CNT) | A(RNR_RETRY) | A(MAX_QP_RD_ATOMIC);
        r.req[1] = A(SQ_PSN);
        r.opt[0] =
            A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(MIN_RNR_TIMER) | A(PATH_MIG_STATE);
        r.opt[1] = A(CUR_STATE) | A(ALT_PATH) | A(ACCESS_FLAGS) | A(PATH_MIG_STATE);
      }
      break;
    case S(RTS):
      if (next == S(RTS)) {
        r.valid = 1;
        r.opt[0] =
            A(CUR_STATE) | A(ACCESS_FLAGS) | A(ALT_PATH) | A(PATH_MIG_STATE) | A(MIN_RNR_TIMER);
        r.opt[1] = A(CUR_STATE) | A(ACCESS_FLAGS) | A(ALT_PATH) | A(PATH_MIG_STATE);
      }
      break;
    case S(SQE):
      if (next == S(RTS)) {
        r.valid = 1;
        r.opt[0] = A(CUR_STATE) | A(ACCESS_FLAGS) | A(MIN_RNR_TIMER);
        r.opt[1] = A(CUR_STATE) | A(ACCESS_FLAGS);
      }
      break;
    default: break;
  }
  return r;
}

/* Returns 1 when `mask` (which may lack IBV_QP_STATE: the QP stays in `cur`) is exactly legal for
 * cur -> next on an RC or UC QP: every required attribute present, nothing beyond the optional
 * ones. Note that SQD is not offered (mlx5 supports it; nobody here uses it). */
int vb_qp_transition_ok(enum ibv_qp_type type, enum ibv_qp_state cur, enum ibv_qp_state next,
                        int mask) {
  if (type != IBV_QPT_RC && type != IBV_QPT_UC) return 0;
  if (!(mask & IBV_QP_STATE)) next = cur;
  rule_t r = rule(cur, next);
  if (!r.valid) return 0;
  int t = type == IBV_QPT_UC;
  int m = mask & ~(IBV_QP_STATE);
  if ((m & r.req[t]) != r.req[t]) return 0;
  if (m & ~(r.req[t] | r.opt[t])) return 0;
  return 1;
}
