/* ncclsim.h: what sim/ offers beyond the NCCL and CUDA APIs it stands in for.
 *
 * Programs that only use the real APIs need nothing from here. Tests and benchmarks use it to put
 * simulated compute on a stream, to set the interference that overlapping compute causes, and to
 * pass a ncclUniqueId from rank 0 to the other ranks of an ncclsim-run job. */
#ifndef NCCLSIM_H
#define NCCLSIM_H

#include <cuda_runtime_api.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Advances the stream's virtual clock by `us` microseconds of simulated compute, as a kernel of that
 * length would. Returns cudaErrorInvalidValue for a negative time or a dead stream. */
cudaError_t ncclsimStreamAddCompute(cudaStream_t stream, double us);

/* Sets the share (0 <= phi < 1) of SM and memory time that compute overlapping this stream's
 * collectives holds. Collectives issued on the stream are timed with it. */
cudaError_t ncclsimStreamSetInterference(cudaStream_t stream, double phi);

/* Sets interference for every collective of a communicator (overrides the stream's value when
 * larger). */
ncclResult_t ncclsimCommSetInterference(ncclComm_t comm, double phi);

/* Virtual time of a stream in microseconds: the end of the last work issued on it. */
double ncclsimStreamTime(cudaStream_t stream);

/* Passes a ncclUniqueId from the root to the other ranks of a job started by ncclsim-run, through
 * the folder named by NCCLSIM_RDZV. The root (which created the id with ncclGetUniqueId) publishes
 * it under `tag`; the others wait for it, at most NCCLSIM_TIMEOUT_S seconds (default 300).
 * Different tags carry different ids. Returns 0, or -1 with a message on stderr. */
int ncclsimExchangeUniqueId(const char *tag, int is_root, ncclUniqueId *id);

/* The modelled duration, in microseconds, of one `coll` call (NCCL's ncclFunc_t numbering:
 * 2 AllGather, 3 ReduceScatter, 4 AllReduce) of `bytes` (nccl-tests' size: the output buffer of
 * AllGather, the input of ReduceScatter) on this communicator now: NCCL's default configuration,
 * the fabric as the communicator's queue pairs load it, NCCLSIM_NOISE as for its calls. For figures at sizes whose data
 * would be too large to move on the simulating machine. */
ncclResult_t ncclsimCommModelTime(ncclComm_t comm, int coll, size_t bytes, double *us);

/* The fraction (0..1] of its collision-free network bandwidth the communicator's slowest flow
 * gets on the fabric now, with the traffic of other communicators' ranks that have a collective in
 * flight (their traffic classes served by the fabric's scheduler) and the link faults of the
 * moment (those scheduled in virtual time as at time 0). 1 for a communicator without queue
 * pairs. */
ncclResult_t ncclsimCommNetShare(ncclComm_t comm, double *share);

/* Sets a fabric link's capacity fraction for the whole job (0: down, 1: up, between: degraded),
 * by the name docs/sim-fabric.md gives ("leaf0-spine3", "node1/mlx5_2:1"). Every process of the
 * job sees it at once. Returns 0, or -1 with a message on stderr for an unknown name. */
int ncclsimFabricSetLink(const char *link, double fraction);

/* Completion accounting of this rank's inter-node queue pairs on a communicator (sim/'s net_ib,
 * docs/sim-nccl.md): what a failover layer between NCCL and the NIC must never change. */
struct ncclsimNetStats {
  unsigned long long chunks;          /* pieces received, each once and in order */
  unsigned long long sendCompletions; /* send WRs completed, each once */
  unsigned long long lost;            /* pieces whose completion never came (the call failed) */
  unsigned long long duplicated;      /* receive completions for a piece already received */
  unsigned long long reordered;       /* receive completions for another step's piece */
  unsigned long long sendUnposted;    /* send completions for a WR that was never posted */
  unsigned long long sendDuplicated;  /* second send completions for a WR */
  double maxStallWallMs; /* longest wall time between two completions of a connection in a step */
  double maxStallVirtMs; /* longest modelled time between the chunks of consecutive completions */
};

/* Fills *stats with this rank's counters on the communicator (zeros when it has no queue pairs).
 * Returns ncclInvalidArgument for a bad communicator or NULL stats. */
ncclResult_t ncclsimNetStats(ncclComm_t comm, struct ncclsimNetStats *stats);

#ifdef __cplusplus
}
#endif
#endif
