/* vb_misc.c: the verbs calls that hold no simulated state — fork support, the strings of event
 * types, completion statuses, node types and port states, rate conversions, and ECE (which the
 * simulated NIC does not negotiate: ibv_query_ece/ibv_set_ece answer EOPNOTSUPP, which NCCL reads
 * as "ECE unsupported"). */
#include <errno.h>

#include "vb_internal.h"

static int fork_initialized;

VB_API int ibv_fork_init(void) {
  fork_initialized = 1; /* nothing is pinned here, so a fork is always safe */
  return 0;
}

VB_API enum ibv_fork_status ibv_is_fork_initialized(void) {
  return fork_initialized ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

VB_API const char *ibv_event_type_str(enum ibv_event_type event) {
  static const char *const s[] = {
      [IBV_EVENT_CQ_ERR] = "CQ error",
      [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
      [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
      [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
      [IBV_EVENT_COMM_EST] = "communication established",
      [IBV_EVENT_SQ_DRAINED] = "send queue drained",
      [IBV_EVENT_PATH_MIG] = "path migrated",
      [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
      [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
      [IBV_EVENT_PORT_ACTIVE] = "port active",
      [IBV_EVENT_PORT_ERR] = "port error",
      [IBV_EVENT_LID_CHANGE] = "LID change",
      [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
      [IBV_EVENT_SM_CHANGE] = "SM change",
      [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
      [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
      [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
      [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
      [IBV_EVENT_GID_CHANGE] = "GID table change",
      [IBV_EVENT_WQ_FATAL] = "WQ fatal",
  };
  if ((unsigned)event >= sizeof s / sizeof s[0] || !s[event]) return "unknown";
  return s[event];
}

VB_API const char *ibv_wc_status_str(enum ibv_wc_status status) {
  static const char *const s[] = {
      [IBV_WC_SUCCESS] = "success",
      [IBV_WC_LOC_LEN_ERR] = "local length error",
      [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
      [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
      [IBV_WC_LOC_PROT_ERR] = "local protection error",
      [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
      [IBV_WC_MW_BIND_ERR] = "memory management operation error",
      [IBV_WC_BAD_RESP_ERR] = "bad response error",
      [IBV_WC_LOC_ACCESS_ERR] = "local access error",
      [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
      [IBV_WC_REM_ACCESS_ERR] = "remote access error",
      [IBV_WC_REM_OP_ERR] = "remote operation error",
      [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
      [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
      [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
      [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
      [IBV_WC_REM_ABORT_ERR] = "aborted error",
      [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
      [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
      [IBV_WC_FATAL_ERR] = "fatal error",
      [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
      [IBV_WC_GENERAL_ERR] = "general error",
      [IBV_WC_TM_ERR] = "TM error",
      [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
  };
  if ((unsigned)status >= sizeof s / sizeof s[0] || !s[status]) return "unknown";
  return s[status];
}

VB_API const char *ibv_node_type_str(enum ibv_node_type t) {
  switch (t) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    case IBV_NODE_USNIC: return "usNIC";
    case IBV_NODE_USNIC_UDP: return "usNIC UDP";
    case IBV_NODE_UNSPECIFIED: return "unspecified";
    default: return "unknown";
  }
}

VB_API const char *ibv_port_state_str(enum ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "PORT_NOP";
    case IBV_PORT_DOWN: return "PORT_DOWN";
    case IBV_PORT_INIT: return "PORT_INIT";
    case IBV_PORT_ARMED: return "PORT_ARMED";
    case IBV_PORT_ACTIVE: return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "PORT_ACTIVE_DEFER";
    default: return "invalid state";
  }
}

VB_API int ibv_query_ece(struct ibv_qp *qp, struct ibv_ece *ece) { return EOPNOTSUPP; }
VB_API int ibv_set_ece(struct ibv_qp *qp, struct ibv_ece *ece) { return EOPNOTSUPP; }

VB_API int ibv_query_qp_data_in_order(struct ibv_qp *qp, enum ibv_wr_opcode op, uint32_t flags) {
  return 1; /* data is placed in order within a QP */
}
