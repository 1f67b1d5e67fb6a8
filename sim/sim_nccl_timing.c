/* Modelled durations of collectives and point-to-point messages. This is the data plane's simple
 * model (a fixed latency plus bytes over a fixed bandwidth); the NCCL-faithful model of sim/model/
 * replaces it for collectives once a communicator has a model. */
#include "sim_nccl.h"
#include "sim_reduce.h"

double sim_coll_time_us(const struct ncclComm *comm, const sim_desc_t *d, double phi) {
  double bytes = (double)d->count * (double)sim_dtype_size(d->dtype);
  if (d->coll == SIM_COLL_ALLGATHER || d->coll == SIM_COLL_REDUCESCATTER) bytes *= comm->nranks;
  double bw_gbps = comm->nnodes > 1 ? 40.0 : 300.0;
  return (10.0 + bytes / (1000.0 * bw_gbps)) * (1.0 + phi);
}

double sim_p2p_time_us(const struct ncclComm *comm, int peer, size_t bytes) {
  (void)peer;
  double bw_gbps = comm->nnodes > 1 ? 40.0 : 300.0;
  return 5.0 + (double)bytes / (1000.0 * bw_gbps);
}
