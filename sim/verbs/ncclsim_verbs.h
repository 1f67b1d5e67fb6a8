/* ncclsim_verbs.h: sim/'s private questions to its libibverbs stand-in (version node
 * NCCLSIM_VERBS_1.0). Resolve them with dlvsym(handle, name, "NCCLSIM_VERBS_1.0"): a real
 * libibverbs does not have them, and their absence means "not on the simulator". */
#ifndef NCCLSIM_VERBS_H
#define NCCLSIM_VERBS_H

#include <infiniband/verbs.h>
#include <stdint.h>

/* Fills a sim_fabric_flow_t (sim/fabric/sim_fabric.h) with the QP's flow: this device's port, the
 * endpoint its destination GID names, the UDP source port (the one mlx5dv_modify_qp_udp_sport set,
 * else the one derived from the flow label and the QP numbers) and the traffic class. Returns 0, or
 * -1 when the QP is not connected (not in RTR/RTS, or its GID is not a fabric address). */
int ncclsimVerbsQpFlow(struct ibv_qp *qp, void *sim_fabric_flow_out);
/* Payload bytes the QP has put on the wire (requests, and READ responses it served). */
uint64_t ncclsimVerbsQpTxBytes(struct ibv_qp *qp);
/* 1 when the device comes from this provider. */
int ncclsimVerbsIsDevice(struct ibv_device *device);
/* The UDP source port a RoCE RC/UC QP in RTS uses from now on; 0 or EINVAL. */
int ncclsimVerbsQpSetSport(struct ibv_qp *qp, uint16_t sport);
/* Counts QP state changes and source-port changes in this process: when it has not moved, the
 * flows the QPs put on the wire have not either. */
uint64_t ncclsimVerbsEpoch(void);
/* The flows (sim_fabric_flow_t, at most max) that carry the QP's traffic now: its own when it is
 * connected (RTR/RTS); when it has failed, those of the other RC QPs of its context in RTS towards
 * the same node that have sent more than 4 KiB and whose qp_context is not owner_tag — a failover
 * layer's shadow QPs, which the provider cannot otherwise tell apart (owner_tag marks the caller's
 * own QPs). Returns how many, or -1 when the QP never had a flow. */
int ncclsimVerbsQpCarriers(struct ibv_qp *qp, const void *owner_tag, void *flows_out, int max);

#endif
