/* The inter-node transport's data path (sim_nccl_net.h), as NCCL's net_ib runs it over libibverbs:
 * each chunk's step over the connections sim_nccl_net_connect.c made, the completion accounting
 * (ncclsimNetStats) and re-publishing the flows when the provider moved a QP's traffic.
 *
 * Plan. NCCL's rings cross a node boundary once per channel, rail-aligned: channel c leaves node k
 * on NIC c mod nics, from the local rank that owns that NIC, to the same local rank of node k+1.
 * Each such connection has NCCL_IB_QPS_PER_CONNECTION RC QPs on that NIC; both ranks derive the
 * same list of connections from the communicator's layout.
 * Handshake. Each rank sends every peer it shares connections with one message through the
 * communicator's point-to-point mailbox (sim/'s stand-in for NCCL's TCP bootstrap socket): per
 * connection its QP numbers, GID, and (receiver) buffer address and rkey. Then INIT → RTR → RTS
 * with NCCL's attributes (flow label 0, NCCL_IB_TC, NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT).
 * Data. Per chunk, the sender RDMA-WRITEs a checksum of each QP's piece (unsignalled) and then the
 * piece itself as a signalled WRITE_WITH_IMM (imm = the piece's size, big-endian), exactly as
 * net_ib's chain; the receiver keeps receives pre-posted, counts RECV_RDMA_WITH_IMM completions and
 * checks every piece against its checksum. The collective's result still comes from the shared
 * segment; what crosses the wire is checked byte for byte.
 * Accounting. Each QP's messages are numbered from 0 (both ends count them, the steps being in
 * lockstep); the number rides in the immediate and is folded into the piece's checksum, so a
 * completion that is lost (bounded wait, then an error naming the chunk), delivered twice or out of
 * order (a replay on another QP) is seen here; send completions carry the number in wr_id, so one
 * for a WR never posted, or a second one, is seen too (ncclsimNetStats). */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sim_ib_async.h"
#include "sim_nccl_net_conn.h"

_Thread_local int sim_net_polling;

/* What every QP this library creates has as qp_context: the provider tells them apart from QPs a
 * failover layer adds to the same contexts (net_ib points qp_context at its own stats block). */
const char sim_net_qp_tag = 0;

/* Test-only injection (NCCLSIM_NET_INJECT=drop=N|dup=N|phantom=N|ahead=N): the process's Nth
 * receive completion is dropped or taken twice, or a send completion for a WR never posted is made
 * up after the Nth send completion, or a receive completion carrying the next message's number is
 * made up after the Nth receive — what a faulty failover layer would hand NCCL. */
static int inject_kind = -1, inject_at;
static uint64_t inject_recvs, inject_sends;

void sim_net_inject_init(void) {
  if (inject_kind >= 0) return;
  inject_kind = 0;
  const char *s = getenv("NCCLSIM_NET_INJECT");
  if (!s || !*s) return;
  static const char *const kinds[] = {"drop=", "dup=", "phantom=", "ahead="};
  for (int i = 0; i < 4; i++)
    if (strncmp(s, kinds[i], strlen(kinds[i])) == 0) {
      char *end;
      long v = strtol(s + strlen(kinds[i]), &end, 10);
      if (*end == 0 && v > 0 && v < (1L << 30)) {
        inject_kind = i + 1;
        inject_at = (int)v;
        return;
      }
    }
  sim_log_warn(
      "invalid value for NCCLSIM_NET_INJECT: '%s' (expected drop=N, dup=N, phantom=N or ahead=N); none injected",
      s);
}

static double wall_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Mixes a message number into a checksum, so a piece that arrives with another message's number
 * fails the check even when its bytes are the same. */
static uint64_t seq_mix(uint32_t seq) { return ((uint64_t)seq + 1) * 0xff51afd7ed558ccdull; }

static uint64_t checksum(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n, w;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    memcpy(&w, b + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
    h ^= h >> 29;
  }
  for (; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

int sim_net_post_recvs(struct ibv_qp *qp, int count) {
  for (int i = 0; i < count; i++) {
    struct ibv_recv_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = 0;
    if (ibv_post_recv(qp, &wr, &bad)) return -1;
  }
  return 0;
}

void sim_net_refresh_flows(struct ncclComm *c) {
  struct sim_net *n = c->net;
  const sim_verbs_table_t *v = sim_ib_verbs();
  if (!n || !n->connected || !v->epoch || !v->qp_carriers) return;
  uint64_t e = v->epoch();
  if (e == n->flows_epoch && !n->flows_moved) return;
  n->flows_epoch = e;
  n->flows_moved = 0;
  sim_fabric_flow_t flows[SIM_NET_MAX_FLOWS], moved[SIM_NET_MAX_FLOWS];
  int nf = 0, nm = 0;
  for (int i = 0; i < n->nconn; i++)
    for (int q = 0; q < n->nqps && n->conn[i].send; q++) {
      struct ibv_qp *qp = n->conn[i].qp[q];
      sim_fabric_flow_t got[8];
      int k = v->qp_carriers(qp, &sim_net_qp_tag, got, 8);
      if (k <= 0) continue;
      if (qp->state == IBV_QPS_RTR || qp->state == IBV_QPS_RTS) {
        if (nf < SIM_NET_MAX_FLOWS) flows[nf++] = got[0];
        continue;
      }
      n->flows_moved = 1; /* its carriers may change at every call (a second failover, a re-plan) */
      for (int j = 0; j < k && nm < SIM_NET_MAX_FLOWS; j++) {
        int dup = 0; /* a QP carrying for several failed ones counts once */
        for (int m = 0; m < nm && !dup; m++) dup = memcmp(&moved[m], &got[j], sizeof got[j]) == 0;
        if (!dup) moved[nm++] = got[j];
      }
    }
  for (int m = 0; m < nm && nf < SIM_NET_MAX_FLOWS; m++) flows[nf++] = moved[m];
  sim_net_publish_flows(c, flows, nf);
  sim_traffic_publish(c, flows, nf);
}

/* The byte range of QP q's piece of a `bytes` message (NCCL: roundup(ceil(size / nqps), 128) per
 * QP when the data is split over the QPs, else all of it on one QP, rotating per message). */
static void piece_of(const struct sim_net *n, const net_conn_t *k, size_t bytes, int q,
                     size_t *off_p, size_t *len_p, int *used_p) {
  *off_p = *len_p = 0;
  if (!n->split) {
    *used_p = (int)(k->msgs % (uint64_t)n->nqps) == q;
    if (*used_p) *len_p = bytes;
    return;
  }
  size_t per = (bytes + (size_t)n->nqps - 1) / (size_t)n->nqps;
  per = (per + 127) / 128 * 128;
  size_t off = per * (size_t)q;
  *used_p = 1;
  *off_p = off < bytes ? off : bytes;
  *len_p = off < bytes ? (bytes - off < per ? bytes - off : per) : 0;
}

/* wr_id of a send: message number, connection index, QP — so a completion names what it retires. */
static uint64_t send_wr_id(uint32_t seq, int conn, int q) {
  return (uint64_t)seq << 24 | (uint64_t)conn << 8 | (uint64_t)q;
}

static int post_piece(struct ncclComm *c, int conn, net_conn_t *k, int q, size_t off, size_t len) {
  const char *src = (const char *)sim_seg_slot(c->seg, c->rank) + off;
  uint32_t seq = k->step_seq[q];
  k->sums[q] = checksum(src, len) ^ seq_mix(seq);
  struct ibv_sge ssum = {(uint64_t)(uintptr_t)&k->sums[q], sizeof(uint64_t), k->sum_mr->lkey};
  struct ibv_sge sdata = {(uint64_t)(uintptr_t)src, (uint32_t)len, k->mr->lkey};
  struct ibv_send_wr w[2], *bad;
  memset(w, 0, sizeof w);
  w[0].opcode = IBV_WR_RDMA_WRITE; /* unsignalled: retires with the signalled one after it */
  w[0].sg_list = &ssum;
  w[0].num_sge = 1;
  w[0].wr.rdma.remote_addr = k->peer_addr + c->seg->slot_bytes + (uint64_t)q * sizeof(uint64_t);
  w[0].wr.rdma.rkey = k->peer_rkey;
  w[0].next = &w[1];
  w[1].wr_id = send_wr_id(seq, conn, q);
  w[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w[1].send_flags = IBV_SEND_SIGNALED;
  w[1].sg_list = len ? &sdata : NULL;
  w[1].num_sge = len ? 1 : 0;
  w[1].imm_data = htonl(seq); /* net_ib sends the size; the receiver reads it from byte_len */
  w[1].wr.rdma.remote_addr = k->peer_addr + off;
  w[1].wr.rdma.rkey = k->peer_rkey;
  return ibv_post_send(k->qp[q], w, &bad);
}

static net_conn_t *conn_of_qpn(struct sim_net *n, uint32_t qpn, int *q_p, int *idx_p) {
  for (int i = 0; i < n->nconn; i++)
    for (int q = 0; q < n->nqps; q++)
      if (n->conn[i].qp[q]->qp_num == qpn) {
        *q_p = q;
        *idx_p = i;
        return &n->conn[i];
      }
  return NULL;
}

/* Records a completion's stall: wall time since the connection's previous completion (or the
 * step's start), and the modelled time between the chunks of the two. */
static void note_stall(struct sim_net *n, net_conn_t *k, double now) {
  double w = now - k->mark_wall;
  if (w > n->st.maxStallWallMs) n->st.maxStallWallMs = w;
  k->mark_wall = now;
  if (k->have_virt) {
    double v = (n->step_virt - k->last_virt) / 1e3;
    if (v > n->st.maxStallVirtMs) n->st.maxStallVirtMs = v;
  }
  k->last_virt = n->step_virt;
  k->have_virt = 1;
  n->progress_wall = now;
}

/* Accounts one receive completion carrying message number `seq` on QP q. Returns 1 when it is
 * this step's piece, seen for the first time (the step may count it), else 0: a duplicate when
 * that message was already received, reordered when it is another one (steps run in lockstep, so a
 * QP's message of another step cannot arrive now; it is not marked received, so the real one
 * still counts when it comes). */
static int take_recv(struct sim_net *n, net_conn_t *k, int q, uint32_t seq) {
  uint32_t d = seq - k->rnext[q];
  if (d >= 0x80000000u ||
      (d < NET_WIN && (k->rwin[q] >> d & 1u))) { /* behind the window, or seen */
    n->st.duplicated++;
    return 0;
  }
  if (seq != k->step_seq[q] || d >= NET_WIN) {
    n->st.reordered++;
    return 0;
  }
  k->rwin[q] |= 1ull << d;
  while (k->rwin[q] & 1u) {
    k->rwin[q] >>= 1;
    k->rnext[q]++;
  }
  n->st.chunks++;
  return 1;
}

/* Accounts one send completion: 1 when it retires this step's outstanding WR on its QP. */
static int take_send(struct sim_net *n, int idx, const net_conn_t *k, int q, uint64_t wr_id) {
  uint32_t seq = (uint32_t)(wr_id >> 24);
  int wc_conn = (int)(wr_id >> 8 & 0xffff), wc_q = (int)(wr_id & 0xff);
  if (wc_conn != idx || wc_q != q || seq >= k->nseq[q]) {
    n->st.sendUnposted++;
    return 0;
  }
  if (!k->outstanding[q] || seq != k->step_seq[q]) {
    n->st.sendDuplicated++;
    return 0;
  }
  n->st.sendCompletions++;
  return 1;
}

static ncclResult_t wc_error(struct ncclComm *c, net_conn_t *k, const struct ibv_wc *wc) {
  const sim_verbs_table_t *v = sim_ib_verbs();
  char gid[64];
  inet_ntop(AF_INET6, k ? k->peer_gid.raw : (const uint8_t[16]){0}, gid, sizeof gid);
  return sim_error(
      ncclRemoteError,
      "NET/IB: Got completion from peer %s (rank %d) with status=%s(%d) opcode=%d len=%u "
      "vendor_err=%u hca %s (rank %d, channel %d); communicator %016llx",
      gid, k ? k->peer : -1, v->wc_status_str ? v->wc_status_str(wc->status) : "?", (int)wc->status,
      (int)wc->opcode, wc->byte_len, wc->vendor_err, k ? k->dev->name : "?", c->rank,
      k ? k->ch : -1, (unsigned long long)c->hash);
}

/* Sleeps until a completion may have arrived on one of the communicator's CQs, or 1 ms (the
 * caller then checks its peers and polls again): armed CQs and their channels when the provider
 * has them, else a 20 us nap. 16 ranks polling 2 cores would leave the provider's engines no time. */
static void wait_completions(struct sim_net *n) {
  const sim_verbs_table_t *v = sim_ib_verbs();
  struct pollfd fds[64];
  int nfds = 0, map[64];
  for (int d = 0; d < 64; d++) {
    if (!n->cq[d] || !n->ch[d]) continue;
    if (ibv_req_notify_cq(n->cq[d], 0) != 0) continue;
    struct ibv_wc wc;
    /* a completion that arrived before the CQ was armed raises no event: peek first */
    if (ibv_poll_cq(n->cq[d], 0, &wc) < 0) continue;
    fds[nfds].fd = n->ch[d]->fd;
    fds[nfds].events = POLLIN;
    fds[nfds].revents = 0;
    map[nfds++] = d;
  }
  if (!nfds) {
    struct timespec ts = {0, 20000};
    nanosleep(&ts, NULL);
    return;
  }
  if (poll(fds, (nfds_t)nfds, 1) <= 0) return;
  for (int i = 0; i < nfds; i++) {
    if (!(fds[i].revents & POLLIN)) continue;
    struct ibv_cq *cq;
    void *ctx;
    if (v->get_cq_event(n->ch[map[i]], &cq, &ctx) == 0) v->ack_cq_events(cq, 1);
  }
}

/* Fails the step whose completions stopped coming: names the first piece still missing. */
static ncclResult_t lost_error(struct ncclComm *c, struct sim_net *n, double waited) {
  for (int i = 0; i < n->nconn; i++)
    if (n->conn[i].pending > 0) n->st.lost += (unsigned long long)n->conn[i].pending;
  for (int i = 0; i < n->nconn; i++) {
    net_conn_t *k = &n->conn[i];
    if (k->pending <= 0) continue;
    for (int q = 0; q < n->nqps; q++) {
      int missing = k->send ? k->outstanding[q]
                            : k->step_seq[q] - k->rnext[q] < 0x80000000u &&
                                  !(k->rwin[q] >> (k->step_seq[q] - k->rnext[q]) & 1u);
      size_t off, len;
      int used;
      piece_of(n, k, n->step_bytes, q, &off, &len, &used);
      if (!used || !missing) continue;
      return sim_error(
          ncclSystemError,
          "NET/IB: rank %d lost a completion: chunk %u (%zu bytes) %s rank %d on "
          "channel %d QP %d (%s) has not completed after %.0f ms; communicator %016llx",
          c->rank, k->step_seq[q], len, k->send ? "sent to" : "received from", k->peer, k->ch, q,
          k->dev->name, waited, (unsigned long long)c->hash);
    }
  }
  return sim_error(ncclSystemError, "NET/IB: rank %d lost a completion after %.0f ms", c->rank,
                   waited);
}

/* A fatal async event on a device or QP of the communicator (sim_ib_async.c) fails it for good, as
 * net_ib's next isend/irecv/test does: ncclSystemError. Returns 1 with *res_p set, else 0. */
static int async_fatal(struct ncclComm *c, struct sim_net *n, ncclResult_t *res_p) {
  unsigned g = sim_ib_async_gen();
  if (g == n->async_gen) return 0;
  for (int i = 0; i < n->nconn; i++) {
    net_conn_t *k = &n->conn[i];
    int qp_hit = -1;
    for (int q = 0; q < n->nqps && qp_hit < 0; q++)
      if (k->qp[q] && sim_ib_async_qp_fatal(k->qp[q])) qp_hit = q;
    if (!sim_ib_async_dev_fatal(k->devi) && qp_hit < 0) continue;
    char qp[24] = "";
    if (qp_hit >= 0) snprintf(qp, sizeof qp, ", QP %u", k->qp[qp_hit]->qp_num);
    *res_p = sim_error(ncclSystemError,
                       "NET/IB: rank %d: communicator %016llx encountered a fatal error (an "
                       "async event on %s%s)",
                       c->rank, (unsigned long long)c->hash, k->dev->name, qp);
    n->step_active = 0;
    return 1;
  }
  n->async_gen = g; /* only when nothing of ours failed: a failed communicator stays failed */
  return 0;
}

int sim_net_step(struct ncclComm *c, size_t bytes, double virt_us, ncclResult_t *res_p) {
  struct sim_net *n = c->net;
  *res_p = ncclSuccess;
  if (!n || !n->connected) return SIM_PROGRESS_DONE;
  if (async_fatal(c, n, res_p)) return SIM_PROGRESS_DONE;
  if (bytes > c->seg->slot_bytes) bytes = c->seg->slot_bytes;
  if (n->carry && bytes > n->carry) bytes = n->carry;
  if (!n->step_active) {
    sim_net_refresh_flows(
        c); /* a QP failed over or moved: the fabric sees its traffic's new path */
    n->step_active = 1;
    n->step_bytes = bytes;
    n->step_virt = virt_us;
    n->progress_wall = wall_ms();
    for (int i = 0; i < n->nconn; i++) {
      net_conn_t *k = &n->conn[i];
      k->pending = 0;
      k->mark_wall = n->progress_wall;
      for (int q = 0; q < n->nqps; q++) {
        size_t off, len;
        int used;
        piece_of(n, k, bytes, q, &off, &len, &used);
        if (!used) continue;
        k->pending++;
        k->step_seq[q] = k->nseq[q]++;
        if (!k->send) continue;
        k->outstanding[q] = 1;
        if (post_piece(c, i, k, q, off, len) != 0) {
          *res_p =
              sim_error(ncclSystemError, "NET/IB: ibv_post_send on rank %d, channel %d failed: %s",
                        c->rank, k->ch, strerror(errno));
          n->step_active = 0;
          return SIM_PROGRESS_DONE;
        }
      }
    }
  }
  int left = 0;
  for (int d = 0; d < 64; d++) {
    if (!n->cq[d]) continue;
    struct ibv_wc wc[17];
    int got;
    while ((got = ibv_poll_cq(n->cq[d], 16, wc)) > 0) {
      for (int i = 0; i < got; i++) {
        int q = 0, idx = -1;
        net_conn_t *k = conn_of_qpn(n, wc[i].qp_num, &q, &idx);
        if (wc[i].status != IBV_WC_SUCCESS || !k) {
          *res_p = wc_error(c, k, &wc[i]);
          n->step_active = 0;
          return SIM_PROGRESS_DONE;
        }
        if (inject_kind > 0) { /* test-only: a faulty layer between NCCL and the provider */
          if (!k->send && ++inject_recvs == (uint64_t)inject_at && inject_kind == 1) continue;
          if (!k->send && inject_recvs == (uint64_t)inject_at && inject_kind == 2 && got < 17) {
            wc[got++] = wc[i];
            inject_recvs++;
          }
          if (!k->send && inject_recvs == (uint64_t)inject_at && inject_kind == 4 && got < 17) {
            wc[got] = wc[i];
            wc[got++].imm_data = htonl(k->nseq[q]); /* a message not sent yet */
            inject_recvs++;
          }
          if (k->send && ++inject_sends == (uint64_t)inject_at && inject_kind == 3 && got < 17) {
            wc[got] = wc[i];
            wc[got++].wr_id = send_wr_id(k->nseq[q] + 7, idx, q);
          }
        }
        if (!k->send) {
          sim_net_post_recvs(k->qp[q], 1); /* keep the pre-posted depth, as net_ib does */
          if (!take_recv(n, k, q, ntohl(wc[i].imm_data))) continue;
        } else {
          if (!take_send(n, idx, k, q, wc[i].wr_id)) continue;
          k->outstanding[q] = 0;
        }
        note_stall(n, k, wall_ms());
        k->pending--;
      }
    }
    if (got < 0) {
      *res_p = sim_error(ncclSystemError, "NET/IB: ibv_poll_cq failed on rank %d", c->rank);
      n->step_active = 0;
      return SIM_PROGRESS_DONE;
    }
  }
  for (int i = 0; i < n->nconn; i++) left += n->conn[i].pending > 0;
  if (left) {
    double waited = wall_ms() - n->progress_wall;
    if (waited > n->lost_ms) {
      *res_p = lost_error(c, n, waited);
      n->step_active = 0;
      return SIM_PROGRESS_DONE;
    }
    if (async_fatal(c, n, res_p)) return SIM_PROGRESS_DONE;
    wait_completions(n);
    sim_net_polling = 1;
    return SIM_PROGRESS_STALLED;
  }
  n->step_active = 0;
  for (int i = 0; i < n->nconn; i++) {
    net_conn_t *k = &n->conn[i];
    if (!k->send)
      for (int q = 0; q < n->nqps; q++) {
        size_t off, len;
        int used;
        piece_of(n, k, n->step_bytes, q, &off, &len, &used);
        uint64_t want;
        memcpy(&want, k->buf + c->seg->slot_bytes + (size_t)q * sizeof(uint64_t), sizeof want);
        if (used && (checksum(k->buf + off, len) ^ seq_mix(k->step_seq[q])) != want) {
          *res_p = sim_error(ncclInternalError,
                             "NET/IB: rank %d received %zu bytes from rank %d on channel %d "
                             "QP %d (chunk %u) that differ from what was sent",
                             c->rank, len, k->peer, k->ch, q, k->step_seq[q]);
          return SIM_PROGRESS_DONE;
        }
      }
    k->msgs++;
  }
  return SIM_PROGRESS_DONE;
}

ncclResult_t sim_net_stats(const struct ncclComm *c, struct ncclsimNetStats *st) {
  memset(st, 0, sizeof *st);
  if (c->net) *st = c->net->st;
  return ncclSuccess;
}
