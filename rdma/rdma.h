/* rdma.h: all that the NCCL side of the shim (shim/) asks of the RDMA side (rdma/: the QP hook
 * and the failover layer) — the traffic class written into a communicator's config, the
 * coordinator through which shadows are exchanged, and the report's "ha" section. No file of
 * shim/ includes another header of rdma/. */
#ifndef AH_RDMA_H
#define AH_RDMA_H

#include <nccl.h>

#include "ah_report.h"

/* The config to pass on to the real ncclCommInitRankConfig (rdma_verbs.c): `cfg` itself, or
 * `copy_p` filled with a copy of it (NCCL_CONFIG_INITIALIZER when cfg is NULL) whose trafficClass
 * (NCCL 2.26+, the per-communicator traffic class) is the first AUTOHA_QP_TC_COMM rule matching the
 * communicator's commName (2.27+) or size `nranks` (0: unknown), else AUTOHA_QP_TC — when one of
 * them is set, the application left the field undefined, and the application's struct is no larger
 * than the header the shim was built with. The application's own struct is never written.
 * Note that NCCL_IB_TC in the environment still wins inside NCCL (docs/qp.md), and that an older
 * libnccl ignores the field (it truncates the config to its own size). */
ncclConfig_t *ah_shim_qp_config_tc(ncclConfig_t *cfg, int nranks, ncclConfig_t *copy_p);

/* The coordinator through whose hub shadows are exchanged (rdma_ha_dir.c): the process's one
 * connection, or NULL (called by shim_coord.c, which owns the connections). */
struct ah_coord;
void ah_shim_ha_set_coord(struct ah_coord *c);
/* The report's "ha" section (rdma_ha_qp.c): the policy ("" when off), shadows ready, failovers
 * (the first AH_REPORT_HA_MAX with time, device, stall and work requests replayed) and totals. */
void ah_shim_ha_report(ah_report_ha_t *h);

/* The RDMA NICs NCCL may use on this host (rdma_nics.c): the devices of NCCL's libibverbs that
 * NCCL_IB_HCA selects with an active port. Returns how many (0: none, or no libibverbs to ask) and
 * sets *gbps_p to the line rate in Gb/s of the first one's first active port (0: unknown).
 * Note that the devices are read once per process, at the first call, and never again. */
int ah_shim_rdma_nics(int *gbps_p);

/* Per-connection timing (rdma_link_*.c, docs/diagnosis.md "Slow links"): fn returns the GPU
 * current on the calling thread (-1: unknown), asked when NCCL creates a queue pair (on its proxy
 * thread, which runs on its rank's device); the shim sets it at init. The tick, once a second on
 * the shim's health thread, closes every sending end's window and sends the hub the new queue
 * pairs' identities and the windows' figures. */
void ah_shim_link_set_gpu(int (*fn)(void));
/* The same for the failover layer (rdma_ha_qp.c): its lines about a queue pair name the rank of
 * the device the queue pair was created on (ah_log_dev). */
void ah_shim_ha_set_gpu(int (*fn)(void));
void ah_shim_link_tick(void);

#endif
