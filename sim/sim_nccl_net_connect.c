/* The inter-node transport's connections (sim_nccl_net.h), as NCCL's net_ib makes them: the plan
 * of connections from the communicator's layout, this rank's side (QPs, CQs, registered buffers),
 * the handshake through the point-to-point mailbox, INIT -> RTR -> RTS with NCCL's attributes, and
 * their release at destroy with the stats line. sim_nccl_net.c carries the chunks over them; the
 * plan and the handshake are described there, at the top. */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim_ib_async.h"
#include "sim_nccl_net_conn.h"

static pthread_once_t async_once = PTHREAD_ONCE_INIT;
static void async_start(void) {
  int ndev;
  sim_ib_dev_t *devs = sim_ib_devices(&ndev);
  sim_ib_async_start(sim_ib_verbs(), devs, ndev, &sim_net_qp_tag);
}

/* The ranks of each node, in rank order: node_ranks[k * rpn + l]. Returns rpn (0 when the layout
 * is uneven: such communicators keep the modelled network). */
static int layout(const struct ncclComm *c, int *node_of_rank, int *nodes, int *nn_p,
                  int **node_ranks_p) {
  int nn = 0;
  for (int r = 0; r < c->nranks; r++) {
    int node = sim_seg_rank(c->seg, r)->node, k;
    for (k = 0; k < nn && nodes[k] != node; k++) {}
    if (k == nn) nodes[nn++] = node;
    node_of_rank[r] = k;
  }
  if (c->nranks % nn) return 0;
  int rpn = c->nranks / nn;
  int *nr = malloc(sizeof(int) * (size_t)c->nranks), *fill = calloc((size_t)nn, sizeof(int));
  if (!nr || !fill) {
    free(nr);
    free(fill);
    return 0;
  }
  for (int r = 0; r < c->nranks; r++) {
    int k = node_of_rank[r];
    if (fill[k] >= rpn) {
      free(nr);
      free(fill);
      return 0;
    }
    nr[k * rpn + fill[k]++] = r;
  }
  free(fill);
  *nn_p = nn;
  *node_ranks_p = nr;
  return rpn;
}

static void add_peer(struct sim_net *n, int peer) {
  for (int i = 0; i < n->npeers; i++)
    if (n->peers[i] == peer) return;
  n->peers[n->npeers++] = peer;
}

static int create_side(struct ncclComm *c, struct sim_net *n, net_conn_t *k) {
  const sim_verbs_table_t *v = sim_ib_verbs();
  if (!n->cq[k->devi]) {
    if (v->create_comp_channel) n->ch[k->devi] = v->create_comp_channel(k->dev->ctx);
    n->cq[k->devi] = v->create_cq(k->dev->ctx, 4096, NULL, n->ch[k->devi], 0);
    if (!n->cq[k->devi]) return -1;
  }
  struct ibv_cq *cq = n->cq[k->devi];
  size_t slot = c->seg->slot_bytes;
  if (k->send) {
    k->mr = v->reg_mr(k->dev->pd, sim_seg_slot(c->seg, c->rank), slot, IBV_ACCESS_LOCAL_WRITE);
    k->sums = calloc(NET_MAX_QPS, sizeof(uint64_t));
    if (k->sums)
      k->sum_mr =
          v->reg_mr(k->dev->pd, k->sums, NET_MAX_QPS * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
    if (!k->mr || !k->sum_mr) return -1;
  } else {
    k->buf = calloc(1, slot + NET_TRAILER);
    if (!k->buf) return -1;
    k->mr = v->reg_mr(k->dev->pd, k->buf, slot + NET_TRAILER,
                      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    if (!k->mr) return -1;
  }
  for (int q = 0; q < n->nqps; q++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ia.recv_cq = cq;
    ia.qp_context = (void *)&sim_net_qp_tag;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 512;
    ia.cap.max_recv_wr = k->send ? 0 : NET_PREPOST * 2; /* as net_ib: sender QPs take no receives */
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    k->qp[q] = v->create_qp(k->dev->pd, &ia);
    if (!k->qp[q]) return -1;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = (uint8_t)k->dev->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | (k->send ? 0 : IBV_ACCESS_REMOTE_READ);
    if (v->modify_qp(k->qp[q], &a,
                     IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return -1;
  }
  return 0;
}

ncclResult_t sim_net_setup(struct ncclComm *c) {
  c->net = NULL;
  c->traffic_slot = -1;
  if (c->nnodes < 2 || !sim_ib_verbs()) return ncclSuccess;
  int ndev;
  sim_ib_dev_t *devs = sim_ib_devices(&ndev);
  pthread_once(&async_once, async_start);
  int *node_of = malloc(sizeof(int) * (size_t)c->nranks),
      *nodes = malloc(sizeof(int) * (size_t)c->nranks);
  int nn = 0, *node_ranks = NULL;
  int rpn = node_of && nodes ? layout(c, node_of, nodes, &nn, &node_ranks) : 0;
  free(nodes);
  if (!rpn) {
    free(node_of);
    return ncclSuccess;
  }
  struct sim_net *n = calloc(1, sizeof *n);
  int nch = c->model.nchannels > 0 ? c->model.nchannels : 1;
  int nics = c->model.topo.nic_count > 0 ? c->model.topo.nic_count : ndev;
  if (n) {
    n->nqps = sim_env_int("NCCL_IB_QPS_PER_CONNECTION", 1, 1, NET_MAX_QPS);
    n->split = sim_env_int("NCCL_IB_SPLIT_DATA_ON_QPS", 0, 0, 1);
    /* Whole chunks cost 2-3x a job's wall time on a 2-core machine (two copies through the
     * provider's rings per byte); 64 KiB of each keeps every step on the wire at a small cost. */
    n->carry = (size_t)sim_env_int("NCCLSIM_NET_CARRY_KB", 64, 0, 1 << 20) << 10;
    /* A completion is lost, not late, once the wait exceeds twice the RC retry window the QPs
     * were given (a dead path fails them before that) plus 5 s of a loaded machine's slack. */
    n->lost_ms = sim_env_int("NCCLSIM_NET_LOST_MS", 0, 0, 1 << 30);
    if (n->lost_ms <= 0) {
      const char *sc = getenv("NCCLSIM_VERBS_TIMEOUT_SCALE");
      double scale = sc && *sc ? strtod(sc, NULL) : 1.0;
      if (!(scale > 0)) scale = 1.0;
      double window = 4.096e-3 * (double)(1u << sim_env_int("NCCL_IB_TIMEOUT", 20, 1, 31)) *
                      (sim_env_int("NCCL_IB_RETRY_CNT", 7, 0, 7) + 1) * scale;
      n->lost_ms = 2 * window + 5000;
    }
    sim_net_inject_init();
    n->conn = calloc((size_t)nch * 2, sizeof(net_conn_t));
    n->peers = calloc((size_t)nch * 2, sizeof(int));
    n->got = calloc((size_t)nch * 2, sizeof(int));
    n->sent = calloc((size_t)nch * 2, sizeof(int));
  }
  if (!n || !n->conn || !n->peers || !n->got || !n->sent) goto oom;
  int me = node_of[c->rank];
  for (int ch = 0; ch < nch; ch++) {
    int nic = ch % nics;
    int l = rpn >= nics ? nic * rpn / nics : nic % rpn;
    int to = node_ranks[((me + 1) % nn) * rpn + l],
        from = node_ranks[((me + nn - 1) % nn) * rpn + l];
    if (node_ranks[me * rpn + l] != c->rank) continue;
    for (int s = 1; s >= 0; s--) { /* my send side, then my receive side, of channel ch */
      net_conn_t *k = &n->conn[n->nconn++];
      k->peer = s ? to : from;
      k->send = s;
      k->ch = ch;
      k->devi = nic % ndev;
      k->dev = &devs[k->devi];
      add_peer(n, k->peer);
    }
  }
  free(node_of);
  free(node_ranks);
  node_of = node_ranks = NULL;
  c->net = n;
  for (int i = 0; i < n->nconn; i++)
    if (create_side(c, n, &n->conn[i]) != 0)
      return sim_error(ncclSystemError,
                       "NET/IB: rank %d could not create its queue pairs for channel %d on %s: %s",
                       c->rank, n->conn[i].ch, n->conn[i].dev->name, strerror(errno));
  return ncclSuccess;
oom:
  free(node_of);
  free(node_ranks);
  if (n) {
    free(n->conn);
    free(n->peers);
    free(n->got);
    free(n->sent);
    free(n);
  }
  return sim_error(ncclSystemError, "NET/IB: out of memory setting up rank %d's connections",
                   c->rank);
}

/* Fills the message for `peer`: my connections with it, in plan order. */
static size_t build_info(const struct sim_net *n, int peer, net_info_t *out) {
  size_t m = 0;
  for (int i = 0; i < n->nconn; i++) {
    const net_conn_t *k = &n->conn[i];
    if (k->peer != peer) continue;
    net_info_t *e = &out[m++];
    memset(e, 0, sizeof *e);
    e->ch = (uint32_t)k->ch;
    e->send = (uint32_t)k->send;
    e->nqps = (uint32_t)n->nqps;
    for (int q = 0; q < n->nqps; q++) e->qpn[q] = k->qp[q]->qp_num;
    memcpy(e->gid, k->dev->gid.raw, 16);
    e->lid = k->dev->lid;
    e->addr = k->send ? 0 : (uint64_t)(uintptr_t)k->buf;
    e->rkey = k->send ? 0 : k->mr->rkey;
  }
  return m;
}

/* The traffic class, as NCCL 2.26+: NCCL_IB_TC, else the communicator's config.trafficClass, else
 * 0 (the receiver adopts the sender's; here both ends read the same settings). */
static int traffic_class(const struct ncclComm *c) {
  int tc = sim_env_int("NCCL_IB_TC", -1, 0, 255);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 26, 0)
  if (tc < 0 && c->config.trafficClass != NCCL_CONFIG_UNDEF_INT && c->config.trafficClass >= 0 &&
      c->config.trafficClass <= 255)
    tc = c->config.trafficClass;
#endif
  return tc < 0 ? 0 : tc;
}

static int connect_conn(const struct ncclComm *c, struct sim_net *n, net_conn_t *k) {
  const sim_verbs_table_t *v = sim_ib_verbs();
  int tc = traffic_class(c);
  for (int q = 0; q < n->nqps; q++) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = k->peer_qpn[q];
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.port_num = (uint8_t)k->dev->port;
    if (k->dev->link_layer == IBV_LINK_LAYER_ETHERNET) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = k->peer_gid;
      a.ah_attr.grh.sgid_index = (uint8_t)k->dev->gid_index;
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = (uint8_t)tc;
      a.ah_attr.grh.flow_label = 0; /* NCCL's, in every version */
    } else {
      /* InfiniBand within one subnet, as net_ib: the peer's LID, no GRH, path bits 0 */
      a.ah_attr.is_global = 0;
      a.ah_attr.dlid = k->peer_lid;
      a.ah_attr.src_path_bits = 0;
    }
    a.ah_attr.sl = (uint8_t)sim_env_int("NCCL_IB_SL", 0, 0, 15);
    if (v->modify_qp(k->qp[q], &a,
                     IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return -1;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    a.timeout = (uint8_t)sim_env_int("NCCL_IB_TIMEOUT", 20, 1, 31);
    a.retry_cnt = (uint8_t)sim_env_int("NCCL_IB_RETRY_CNT", 7, 0, 7);
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (v->modify_qp(k->qp[q], &a,
                     IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                         IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
      return -1;
    if (!k->send && sim_net_post_recvs(k->qp[q], NET_PREPOST)) return -1;
  }
  return 0;
}

int sim_net_connect_progress(struct ncclComm *c, ncclResult_t *res_p) {
  struct sim_net *n = c->net;
  *res_p = ncclSuccess;
  if (!n || n->connected) return SIM_PROGRESS_DONE;
  size_t cap = c->seg->p2p_bytes / sizeof(net_info_t);
  int moved = 0;
  for (int i = 0; i < n->npeers; i++) {
    int peer = n->peers[i];
    if (!n->sent[i]) {
      sim_p2p_ctl_t *ctl = sim_seg_p2p_ctl(c->seg, c->rank, peer);
      if (atomic_load(&ctl->posted) == atomic_load(&ctl->consumed)) {
        net_info_t *out = sim_seg_p2p_buf(c->seg, c->rank, peer);
        size_t m = build_info(n, peer, out);
        if (m > cap) { /* cannot happen with the segment's 64 KiB minimum */
          *res_p = sim_error(ncclInternalError, "NET/IB: handshake of rank %d too large", c->rank);
          return SIM_PROGRESS_DONE;
        }
        ctl->chunk_bytes = ctl->msg_bytes = m * sizeof(net_info_t);
        atomic_fetch_add(&ctl->posted, 1);
        sim_seg_ring(c->seg);
        n->sent[i] = moved = 1;
      }
    }
    if (!n->got[i]) {
      sim_p2p_ctl_t *ctl = sim_seg_p2p_ctl(c->seg, peer, c->rank);
      if (atomic_load(&ctl->posted) == atomic_load(&ctl->consumed)) continue;
      const net_info_t *in = sim_seg_p2p_buf(c->seg, peer, c->rank);
      size_t m = ctl->chunk_bytes / sizeof(net_info_t);
      for (int x = 0; x < n->nconn; x++) {
        net_conn_t *k = &n->conn[x];
        if (k->peer != peer) continue;
        /* the peer's entries are its own connections with me, in the same plan order: my send
         * side of channel ch pairs with its receive side of ch */
        const net_info_t *e = NULL;
        for (size_t y = 0; y < m && !e; y++)
          if ((int)in[y].ch == k->ch && (int)in[y].send == !k->send) e = &in[y];
        if (!e || (int)e->nqps != n->nqps) {
          *res_p = sim_error(ncclInternalError,
                             "NET/IB: rank %d and rank %d disagree on channel %d's "
                             "connection (NCCL_IB_QPS_PER_CONNECTION must match)",
                             c->rank, peer, k->ch);
          return SIM_PROGRESS_DONE;
        }
        memcpy(k->peer_qpn, e->qpn, sizeof k->peer_qpn);
        memcpy(k->peer_gid.raw, e->gid, 16);
        k->peer_lid = (uint16_t)e->lid;
        k->peer_addr = e->addr;
        k->peer_rkey = e->rkey;
      }
      atomic_fetch_add(&ctl->consumed, 1);
      sim_seg_ring(c->seg);
      n->got[i] = moved = 1;
    }
  }
  for (int i = 0; i < n->npeers; i++)
    if (!n->sent[i] || !n->got[i]) return moved ? SIM_PROGRESS_MOVED : SIM_PROGRESS_STALLED;
  for (int i = 0; i < n->nconn; i++)
    if (connect_conn(c, n, &n->conn[i]) != 0) {
      *res_p = sim_error(
          ncclSystemError, "NET/IB: rank %d could not connect channel %d to rank %d on %s: %s",
          c->rank, n->conn[i].ch, n->conn[i].peer, n->conn[i].dev->name, strerror(errno));
      return SIM_PROGRESS_DONE;
    }
  n->connected = 1;
  const sim_verbs_table_t *v = sim_ib_verbs();
  sim_fabric_flow_t flows[SIM_NET_MAX_FLOWS];
  int nf = 0;
  for (int i = 0; i < n->nconn && v->qp_flow; i++)
    for (int q = 0; q < n->nqps && n->conn[i].send && nf < SIM_NET_MAX_FLOWS; q++)
      if (v->qp_flow(n->conn[i].qp[q], &flows[nf]) == 0) nf++;
  n->flows_epoch = v->epoch ? v->epoch() : 0;
  sim_net_publish_flows(c, flows, nf);
  sim_traffic_publish(c, flows, nf);
  return SIM_PROGRESS_DONE;
}

/* The stats line at destroy: always when something went wrong, else with NCCLSIM_NET_STATS=1. */
static void print_stats(const struct ncclComm *c, const struct sim_net *n) {
  const struct ncclsimNetStats *s = &n->st;
  int bad = s->lost || s->duplicated || s->reordered || s->sendUnposted || s->sendDuplicated;
  if (!bad && sim_env_int("NCCLSIM_NET_STATS", 0, 0, 1) != 1) return;
  sim_log_warn(
      "NET/IB stats rank %d comm %016llx: chunks %llu sends %llu lost %llu duplicated %llu reordered %llu "
      "unposted %llu send-duplicated %llu max-stall %.3f ms wall %.3f ms virtual",
      c->rank, (unsigned long long)c->hash, s->chunks, s->sendCompletions, s->lost, s->duplicated,
      s->reordered, s->sendUnposted, s->sendDuplicated, s->maxStallWallMs, s->maxStallVirtMs);
}

void sim_net_free(struct ncclComm *c) {
  struct sim_net *n = c->net;
  const sim_verbs_table_t *v = sim_ib_verbs();
  if (!n || !v) return;
  print_stats(c, n);
  sim_traffic_release(c);
  for (int i = 0; i < n->nconn; i++) {
    net_conn_t *k = &n->conn[i];
    for (int q = 0; q < n->nqps; q++)
      if (k->qp[q]) v->destroy_qp(k->qp[q]);
    if (k->mr) v->dereg_mr(k->mr);
    if (k->sum_mr) v->dereg_mr(k->sum_mr);
    free(k->sums);
    free(k->buf);
  }
  for (int d = 0; d < 64; d++) {
    if (n->cq[d]) v->destroy_cq(n->cq[d]);
    if (n->ch[d]) v->destroy_comp_channel(n->ch[d]);
  }
  free(n->conn);
  free(n->peers);
  free(n->got);
  free(n->sent);
  free(n);
  c->net = NULL;
}
