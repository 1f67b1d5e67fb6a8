/* The network part of a collective's modelled time: the fabric (sim/fabric/) gives each flow the
 * communicator's queue pairs put on the wire its max–min fair rate, under the traffic-class
 * scheduler and the link faults of the moment; the ring is as fast as its slowest flow relative to
 * what that flow would get with no collision (its NIC port's share). The truth model's NIC
 * bandwidth is scaled by that fraction, so with no collision the calibration is today's.
 * Every rank reads every rank's published flows, so all ranks model the same duration. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_ib_verbs.h"
#include "sim_nccl_net.h"

static pthread_once_t fabric_once = PTHREAD_ONCE_INIT;
static sim_fabric_t *fabric;

static void fabric_init(void) {
  char err[300];
  fabric = sim_fabric_job(sim_node_id(), err, sizeof err);
  if (!fabric) sim_log_warn("ncclsim: %s; inter-node time ignores the fabric", err);
}

sim_fabric_t *sim_nccl_fabric(void) {
  pthread_once(&fabric_once, fabric_init);
  return fabric;
}

void sim_net_publish_flows(struct ncclComm *c, const sim_fabric_flow_t *flows, int n) {
  sim_flow_row_t *row = sim_seg_flows(c->seg, c->rank);
  if (n > SIM_NET_MAX_FLOWS) n = SIM_NET_MAX_FLOWS;
  memcpy(row->flows, flows, sizeof(*flows) * (size_t)n);
  atomic_store(&row->count, n);
}

double sim_net_bw_factor(const struct ncclComm *c, double virt_us) {
  sim_fabric_t *f = c->net ? sim_nccl_fabric() : NULL;
  if (!f) return 1.0;
  int total = 0, room = 0;
  for (int r = 0; r < c->nranks; r++) total += atomic_load(&sim_seg_flows(c->seg, r)->count);
  if (total == 0) return 1.0;
  room = total + 4 * SIM_NET_MAX_FLOWS; /* and what other communicators have in flight */
  sim_fabric_flow_t *flows = malloc(sizeof *flows * (size_t)room);
  double *rate = malloc(sizeof *rate * (size_t)room);
  if (!flows || !rate) {
    free(flows);
    free(rate);
    return 1.0;
  }
  int n = 0;
  for (int r = 0; r < c->nranks && n < total; r++) {
    const sim_flow_row_t *row = sim_seg_flows(c->seg, r);
    int k = atomic_load(&row->count);
    if (k > total - n) k = total - n;
    memcpy(flows + n, row->flows, sizeof *flows * (size_t)k);
    n += k;
  }
  int own = n;
  n += sim_traffic_others(c, flows + n, room - n);
  sim_fabric_rates(f, flows, n, sim_fabric_wall_s(f), virt_us, rate);
  /* No collision: a flow gets its NIC's share, the NIC (all its ports) divided among the flows
   * leaving or entering it, whichever are more. */
  double nic = sim_fabric_port_gbps(f) * sim_fabric_ports(f), worst = 1.0;
  int slowest = -1;
  for (int i = 0; i < own; i++) { /* the communicator's own flows, against its own share */
    int out = 0, in = 0;
    for (int j = 0; j < own; j++) {
      out += flows[j].src.node == flows[i].src.node && flows[j].src.nic == flows[i].src.nic;
      in += flows[j].dst.node == flows[i].dst.node && flows[j].dst.nic == flows[i].dst.nic;
    }
    double ideal = nic / (out > in ? out : in);
    if (rate[i] / ideal < worst) worst = rate[i] / ideal, slowest = i;
  }
  if (slowest >= 0 && c->rank == 0) {
    static _Atomic int logged; /* once per process: the flow the ring waits for */
    if (!atomic_exchange(&logged, 1)) {
      int links[8],
          nl = sim_fabric_route_at(f, &flows[slowest], sim_fabric_wall_s(f), virt_us, links, 8);
      char route[512] = "", name[96];
      for (int l = 0; l < nl; l++)
        snprintf(route + strlen(route), sizeof route - strlen(route), "%s%s", l ? " " : "",
                 sim_fabric_link_name(f, links[l], name, sizeof name));
      sim_log_info(
          "NET/IB: %d flows on the fabric (%d of other communicators); the slowest gets %.0f%% "
          "of its NIC share (source port %u: %s)",
          n, n - own, 100 * worst, flows[slowest].sport, route);
    }
  }
  free(flows);
  free(rate);
  return worst > 1e-3 ? worst : 1e-3;
}

SIM_API ncclResult_t ncclsimCommModelTime(ncclComm_t comm, int coll, size_t bytes, double *us) {
  if (!sim_comm_usable(comm) || !us || coll < 0 || coll >= AH_NUM_FUNCTIONS || !comm->has_model)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclsimCommModelTime: invalid argument");
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&comm->model, coll, bytes, 1, table);
  sim_config_t cfg;
  if (sim_model_select(&comm->model, coll, bytes, table, 0, 0, &cfg) != 0)
    return sim_error(ncclInvalidUsage,
                     "ncclsim: ncclsimCommModelTime: no algorithm is enabled for %s",
                     sim_coll_name(coll));
  sim_desc_t d;
  memset(&d, 0, sizeof d);
  d.coll = coll;
  d.dtype = ncclInt8;
  d.count = coll == SIM_COLL_ALLGATHER || coll == SIM_COLL_REDUCESCATTER
                ? bytes / (size_t)comm->nranks
                : bytes;
  d.algo = cfg.algo;
  d.proto = cfg.proto;
  d.nchannels = cfg.nchannels;
  d.nthreads = cfg.nthreads;
  d.chunk = cfg.chunk;
  *us = sim_coll_time_us(comm, &d, comm->phi);
  return ncclSuccess;
}

SIM_API int ncclsimFabricSetLink(const char *link, double fraction) {
  sim_fabric_t *f = sim_nccl_fabric();
  if (!f) {
    fprintf(stderr, "ncclsimFabricSetLink: the job has no fabric (see the warning above)\n");
    return -1;
  }
  int id = link ? sim_fabric_link_find(f, link) : -1;
  if (id < 0 || !(fraction >= 0 && fraction <= 1)) {
    fprintf(stderr, "ncclsimFabricSetLink: no link named '%s', or fraction %g outside [0, 1]\n",
            link ? link : "(null)", fraction);
    return -1;
  }
  return sim_fabric_set_link(f, id, fraction);
}

SIM_API ncclResult_t ncclsimNetStats(ncclComm_t comm, struct ncclsimNetStats *stats) {
  if (!sim_comm_usable(comm) || !stats)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclsimNetStats: invalid argument");
  return sim_net_stats(comm, stats);
}

SIM_API ncclResult_t ncclsimCommNetShare(ncclComm_t comm, double *share) {
  if (!sim_comm_usable(comm) || !share)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclsimCommNetShare: invalid argument");
  *share = comm->net ? sim_net_bw_factor(comm, 0) : 1.0;
  return ncclSuccess;
}
