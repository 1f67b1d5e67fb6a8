/* shim_verbs.h: what the rest of the shim may ask of the verbs hook (shim/shim_verbs.c). */
#ifndef AH_SHIM_VERBS_H
#define AH_SHIM_VERBS_H

#include <nccl.h>

/* The config to pass on to the real ncclCommInitRankConfig: `cfg` itself, or `copy_p` filled with
 * a copy of it (NCCL_CONFIG_INITIALIZER when cfg is NULL) whose trafficClass (NCCL 2.26+, the
 * per-communicator traffic class) is the first AUTOHA_QP_TC_COMM rule matching the communicator's
 * commName (2.27+) or size `nranks` (0: unknown), else AUTOHA_QP_TC — when one of them is set, the
 * application left the field undefined, and the application's struct is no larger than the header
 * the shim was built with. The application's own struct is never written.
 * Note that NCCL_IB_TC in the environment still wins inside NCCL (docs/qp.md), and that an older
 * libnccl ignores the field (it truncates the config to its own size). */
ncclConfig_t *ah_shim_qp_config_tc(ncclConfig_t *cfg, int nranks, ncclConfig_t *copy_p);

/* AUTOHA_QP_TOPO expanded for this process (shim_qp_topo.c), "" when unset or malformed (logged
 * once): the file the source-port planner and the failover layer's backup ports both read. */
const char *ah_shim_qp_topo_path(void);

#endif
