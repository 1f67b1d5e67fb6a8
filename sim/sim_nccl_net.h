/* sim_nccl_net.h: the inter-node transport of sim/'s NCCL stand-in, shaped as NCCL's net_ib: per
 * channel and node boundary of the ring, RC queue pairs between the two ranks that own the
 * channel's NIC, connected with NCCL's attributes, carrying every chunk of a collective that
 * crosses a node boundary as RDMA WRITE + WRITE_WITH_IMM, completions polled from CQs. */
#ifndef SIM_NCCL_NET_H
#define SIM_NCCL_NET_H

#include "sim_nccl.h"
#include "ncclsim.h"

struct sim_net;

/* Starts connecting the communicator (after every rank joined and the model is built): plans the
 * connections, creates and registers this rank's side and sends its half of the handshake. Does
 * nothing (returns ncclSuccess with comm->net NULL) for a one-node communicator or without IB. */
ncclResult_t sim_net_setup(struct ncclComm *comm);
/* Advances the handshake: SIM_PROGRESS_DONE once every QP is RTS (or on error: *res_p is set),
 * SIM_PROGRESS_STALLED while a peer's half has not arrived. */
int sim_net_connect_progress(struct ncclComm *comm, ncclResult_t *res_p);
/* One chunk's inter-node step: this rank sends its `bytes` deposited bytes to the next node and
 * receives the previous node's; virt_us is the chunk's modelled time (for the stall counters).
 * Returns SIM_PROGRESS_DONE (step complete, or failed: *res_p set) or SIM_PROGRESS_STALLED
 * (completions outstanding; call again). Note that a step with no completion for NCCLSIM_NET_LOST_MS
 * fails with ncclSystemError naming the missing chunk instead of waiting for ever. */
int sim_net_step(struct ncclComm *comm, size_t bytes, double virt_us, ncclResult_t *res_p);
/* This rank's completion accounting on the communicator (zeros without queue pairs). */
ncclResult_t sim_net_stats(const struct ncclComm *comm, struct ncclsimNetStats *stats);
/* The fraction of the collision-free network bandwidth the communicator's flows get on the fabric
 * now (1 without verbs or fabric); the truth model scales the NICs' bandwidth by it. */
double sim_net_bw_factor(const struct ncclComm *comm, double virt_us);
void sim_net_free(struct ncclComm *comm);
/* The job's fabric (built once per process from NCCLSIM_TOPO, NCCLSIM_FABRIC, NCCLSIM_NODES and
 * NCCLSIM_FABRIC_FAULTS), or NULL when it cannot be built (logged once). */
sim_fabric_t *sim_nccl_fabric(void);
/* The job's traffic across communicators (sim_nccl_traffic.c): this rank's flows in the job-wide
 * directory, its collectives in flight (+1 at a group's launch, -1 at its end), and the flows of
 * other communicators' ranks busy now (at most max; returns the count). */
void sim_traffic_publish(struct ncclComm *comm, const sim_fabric_flow_t *flows, int n);
void sim_traffic_busy(struct ncclComm *comm, int delta);
int sim_traffic_others(const struct ncclComm *comm, sim_fabric_flow_t *out, int max);
void sim_traffic_release(struct ncclComm *comm);
/* Publishes this rank's flows in the communicator's segment (sim_nccl_fabric.c). */
void sim_net_publish_flows(struct ncclComm *comm, const sim_fabric_flow_t *flows, int n);
/* Publishes the flows again when the provider's QPs changed (a state or source-port change): a
 * failed QP's flow is replaced by those of the QPs now carrying its traffic (a failover layer's
 * shadows, ncclsimVerbsQpCarriers), so the modelled time follows the bytes. Cheap when nothing
 * changed (one atomic load). */
void sim_net_refresh_flows(struct ncclComm *comm);
/* Set by sim_net_step when it waited for the provider's completions (which ring none of the
 * segment's bells): the group loop then goes round again instead of sleeping on the bell. */
extern _Thread_local int sim_net_polling;

#endif
