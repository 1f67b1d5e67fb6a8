/* shim_verbs.h: what the rest of the shim may ask of the verbs hook (shim/shim_verbs.c). */
#ifndef AH_SHIM_VERBS_H
#define AH_SHIM_VERBS_H

#include <nccl.h>

/* Sets cfg->trafficClass (NCCL 2.26+ per-communicator traffic class) from AUTOHA_QP_TC when the
 * config is new enough to carry the field and the application left it undefined. Returns 1 when it
 * changed the config, 0 otherwise. Call it on the shim's own copy of the application's config,
 * just before passing it to the real ncclCommInitRankConfig / ncclCommSplit.
 * Note that NCCL_IB_TC in the environment still wins inside NCCL (docs/qp.md). */
int ah_shim_qp_config_tc(ncclConfig_t *cfg);

#endif
