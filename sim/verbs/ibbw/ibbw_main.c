/* ncclsim-ibbw: an ib_write_bw-like check of a verbs provider between two processes. The server
 * and the client each open a device, exchange QP number, GID, buffer address and rkey over TCP,
 * and connect RC QPs with NCCL's attributes. The client then runs RDMA WRITE, WRITE_WITH_IMM, READ
 * and SEND for every size, each message split into a batch of unsignalled WRs ending in one
 * signalled WR, and both sides check every byte against a pattern that differs per message.
 * --expect-lib DIR fails the run unless the libibverbs mapped into the process comes from DIR;
 * --crash kills the server outright once the peers have exchanged their addresses;
 * --check-sport native|hooked checks the client QP's UDP source port (ibbw_sport.c).
 * Prints one line per (op, size) and ends with OK or FAILED; exits non-zero on any mismatch. */
#include <arpa/inet.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ibbw_ctl.h"
#include "ibbw_sport.h"
#include "ibbw_verbs.h"

static sim_verbs_table_t V;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static struct ibv_mr *mr;
static uint8_t *buf;
static ibbw_peer_t peer;
static int ctl = -1;

static uint8_t pat(uint32_t seq, uint64_t k) {
  uint64_t x = (k + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t)(seq + 1) * 0xC2B2AE3D27D4EB4Full;
  return (uint8_t)(x >> 56);
}
static void fill(uint32_t seq, uint64_t n) {
  for (uint64_t k = 0; k < n; k++) buf[k] = pat(seq, k);
}
/* Index of the first wrong byte, or -1. */
static long long check(uint32_t seq, uint64_t n) {
  for (uint64_t k = 0; k < n; k++)
    if (buf[k] != pat(seq, k)) return (long long)k;
  return -1;
}

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Polls until `want` completions arrived (30 s at most); each must be a success. */
static int poll_n(struct ibv_wc *wc, int want) {
  int got = 0;
  double t0 = now_s();
  while (got < want) {
    int n = ibv_poll_cq(cq, want - got, wc + got);
    if (n < 0) return -1;
    for (int i = got; i < got + n; i++)
      if (wc[i].status != IBV_WC_SUCCESS) {
        fprintf(stderr, "ncclsim-ibbw: completion wr_id %llu: %s (vendor_err 0x%x)\n",
                (unsigned long long)wc[i].wr_id, V.wc_status_str(wc[i].status), wc[i].vendor_err);
        return -1;
      }
    got += n;
    if (!n) {
      if (now_s() - t0 > 30) {
        fprintf(stderr, "ncclsim-ibbw: %d of %d completions after 30 s\n", got, want);
        return -1;
      }
      usleep(50);
    }
  }
  return 0;
}

static int check_lib(const char *dir) {
  char want[PATH_MAX], line[PATH_MAX + 256], found[PATH_MAX] = "";
  FILE *f = fopen("/proc/self/maps", "r");
  while (f && fgets(line, sizeof line, f)) {
    char *p = strchr(line, '/');
    if (p && strstr(p, "/libibverbs.so")) {
      p[strcspn(p, "\n")] = 0;
      snprintf(found, sizeof found, "%s", p);
      break;
    }
  }
  if (f) fclose(f);
  printf("ncclsim-ibbw: %s, libibverbs from %s\n", ibbw_mode, found[0] ? found : "(not mapped)");
  if (!dir) return 0;
  if (!realpath(dir, want) || strncmp(found, want, strlen(want)) != 0 ||
      found[strlen(want)] != '/') {
    fprintf(stderr, "ncclsim-ibbw: libibverbs is %s, not the one in %s\n", found, dir);
    return -1;
  }
  return 0;
}

static int
    crash_after_exchange; /* --crash: the server dies (SIGKILL) once the peers know each other */
/* --send-only: the client's queue pair takes no receive work requests, as net_ib's sending end
 * (the client never receives), so that a layer telling the two ends apart sees a sender */
static int send_only;

static int setup(const char *devname, uint64_t size, int server, const char *rdv) {
  int n = 0;
  struct ibv_device **list = V.get_device_list(&n), *dev = NULL;
  for (int i = 0; list && i < n; i++)
    if (strcmp(V.get_device_name(list[i]), devname) == 0) dev = list[i];
  if (!dev) {
    fprintf(stderr, "ncclsim-ibbw: no device %s (%d devices)\n", devname, n);
    return -1;
  }
  struct ibv_context *ctx = V.open_device(dev);
  V.free_device_list(list);
  struct ibv_port_attr pa;
  union ibv_gid gid;
  if (!ctx || V.query_port(ctx, 1, &pa) != 0 || pa.state != IBV_PORT_ACTIVE ||
      V.query_gid(ctx, 1, 0, &gid) != 0) {
    fprintf(stderr, "ncclsim-ibbw: %s: no active port 1 with a GID\n", devname);
    return -1;
  }
  struct ibv_pd *pd = V.alloc_pd(ctx);
  buf = aligned_alloc(4096, (size + 4095) & ~4095ull);
  int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  mr = !pd || !buf      ? NULL
       : V.reg_mr_iova2 ? V.reg_mr_iova2(pd, buf, size, (uintptr_t)buf,
                                         (unsigned)access | IBV_ACCESS_RELAXED_ORDERING)
                        : V.reg_mr(pd, buf, size, access);
  cq = mr ? V.create_cq(ctx, 2048, NULL, NULL, 0) : NULL;
  struct ibv_qp_init_attr ia = {.send_cq = cq,
                                .recv_cq = cq,
                                .qp_type = IBV_QPT_RC,
                                .cap = {.max_send_wr = 512,
                                        .max_recv_wr = 512,
                                        .max_send_sge = 1,
                                        .max_recv_sge = 1,
                                        .max_inline_data = 64}};
  if (send_only && !server) ia.cap.max_recv_wr = 0;
  qp = cq ? V.create_qp(pd, &ia) : NULL;
  if (!qp) {
    fprintf(stderr, "ncclsim-ibbw: PD/MR/CQ/QP creation failed\n");
    return -1;
  }
  ctl = server ? ibbw_ctl_serve(rdv) : ibbw_ctl_dial(rdv, 60);
  ibbw_peer_t me = {
      .qpn = qp->qp_num, .port = 1, .addr = (uintptr_t)buf, .size = size, .rkey = mr->rkey};
  memcpy(me.gid, gid.raw, 16);
  if (ctl < 0 || ibbw_ctl_send(ctl, &me, sizeof me) || ibbw_ctl_recv(ctl, &peer, sizeof peer))
    return -1;
  if (crash_after_exchange) raise(SIGKILL); /* a vanished peer: nothing is cleaned up */
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
                          .pkey_index = 0,
                          .port_num = 1,
                          .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
  if (V.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = pa.active_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = 1;
  memcpy(a.ah_attr.grh.dgid.raw, peer.gid, 16);
  a.ah_attr.grh.hop_limit = 255;
  a.ah_attr.port_num = (uint8_t)peer.port;
  if (V.modify_qp(qp, &a,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return -1;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 20;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (V.modify_qp(qp, &a,
                  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                      IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)) {
    fprintf(stderr, "ncclsim-ibbw: modify_qp failed\n");
    return -1;
  }
  return 0;
}

static int post_recvs(uint64_t size, uint32_t batch, int sgeless) {
  for (uint32_t k = 0; k < batch; k++) {
    uint64_t lo = size * k / batch, hi = size * (k + 1) / batch;
    struct ibv_sge sge = {(uintptr_t)buf + lo, (uint32_t)(hi - lo), mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = k, .sg_list = &sge, .num_sge = sgeless ? 0 : 1}, *bad;
    if (ibv_post_recv(qp, &wr, &bad)) return -1;
  }
  return 0;
}

static int32_t serve_one(const ibbw_cmd_t *c) {
  struct ibv_wc wc[512];
  int32_t ready = 0;
  switch (c->cmd) {
    case IBBW_CMD_CHECK: return check(c->seq, c->size) < 0 ? 0 : 1;
    case IBBW_CMD_FILL: fill(c->seq, c->size); return 0;
    case IBBW_CMD_POST_RECV:
    case IBBW_CMD_WAIT_IMM: {
      int sends = c->cmd == IBBW_CMD_POST_RECV;
      uint32_t n = sends ? c->batch : 1;
      memset(buf, 0, c->size);
      if (post_recvs(c->size, n, !sends) || ibbw_ctl_send(ctl, &ready, sizeof ready) ||
          poll_n(wc, (int)n))
        return 2;
      for (uint32_t k = 0; k < n; k++) {
        uint64_t want = sends ? c->size * (k + 1) / n - c->size * k / n
                              : c->size - c->size * (c->batch - 1) / c->batch;
        int last = k == n - 1;
        int op_ok = sends ? wc[k].opcode == IBV_WC_RECV : wc[k].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
        int imm_ok =
            !last || ((wc[k].wc_flags & IBV_WC_WITH_IMM) && wc[k].imm_data == htonl(c->seq));
        if (wc[k].wr_id != k || !op_ok || wc[k].byte_len != want || !imm_ok ||
            wc[k].qp_num != qp->qp_num) {
          fprintf(
              stderr,
              "ncclsim-ibbw: receive %u: wr_id %llu opcode %d byte_len %u (want %llu) imm 0x%x\n",
              k, (unsigned long long)wc[k].wr_id, wc[k].opcode, wc[k].byte_len,
              (unsigned long long)want, wc[k].imm_data);
          return 3;
        }
      }
      long long bad = check(c->seq, c->size);
      if (bad >= 0)
        fprintf(stderr, "ncclsim-ibbw: byte %lld of %llu differs\n", bad,
                (unsigned long long)c->size);
      return bad < 0 ? 0 : 1;
    }
    default: return 4;
  }
}

static int server_loop(void) {
  ibbw_cmd_t c;
  while (ibbw_ctl_recv(ctl, &c, sizeof c) == 0 && c.cmd != IBBW_CMD_DONE) {
    int32_t st = serve_one(&c);
    if (ibbw_ctl_send(ctl, &st, sizeof st)) return -1;
  }
  return 0;
}

enum { OP_WRITE, OP_WRITE_IMM, OP_READ, OP_SEND, OP_INLINE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"write", "write_imm", "read", "send", "inline"};

static int ask(uint32_t cmd, uint32_t seq, uint64_t size, uint32_t batch, int32_t *st_p) {
  ibbw_cmd_t c = {cmd, seq, batch, 0, size};
  return ibbw_ctl_send(ctl, &c, sizeof c) || ibbw_ctl_recv(ctl, st_p, sizeof *st_p) ? -1 : 0;
}

/* One message of `op`: a batch of WRs, only the last signalled; returns 0 when every check held. */
static int run_one(int op, uint32_t seq, uint64_t size, uint32_t batch) {
  int32_t st = 0;
  struct ibv_wc wc[2];
  if (op == OP_READ && ask(IBBW_CMD_FILL, seq, size, batch, &st)) return -1;
  if ((op == OP_WRITE_IMM || op == OP_SEND) &&
      (ask(op == OP_SEND ? IBBW_CMD_POST_RECV : IBBW_CMD_WAIT_IMM, seq, size, batch, &st) || st))
    return -1;
  if (op == OP_READ) memset(buf, 0, size);
  else fill(seq, size);
  for (uint32_t k = 0; k < batch; k++) {
    uint64_t lo = size * k / batch, hi = size * (k + 1) / batch;
    int last = k == batch - 1;
    struct ibv_sge sge = {(uintptr_t)buf + lo, (uint32_t)(hi - lo), mr->lkey};
    struct ibv_send_wr wr = {.wr_id = seq * 1000ull + k, .sg_list = &sge, .num_sge = 1}, *bad;
    wr.send_flags = last ? IBV_SEND_SIGNALED : 0;
    wr.wr.rdma.remote_addr = peer.addr + lo;
    wr.wr.rdma.rkey = peer.rkey;
    switch (op) {
      case OP_WRITE: wr.opcode = IBV_WR_RDMA_WRITE; break;
      case OP_INLINE:
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags |= IBV_SEND_INLINE;
        break;
      case OP_WRITE_IMM: wr.opcode = last ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE; break;
      case OP_READ: wr.opcode = IBV_WR_RDMA_READ; break;
      default: wr.opcode = last ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND; break;
    }
    wr.imm_data = htonl(seq);
    if (ibv_post_send(qp, &wr, &bad)) {
      fprintf(stderr, "ncclsim-ibbw: post_send failed\n");
      return -1;
    }
    if (op == OP_INLINE) memset(buf + lo, 0xee, hi - lo); /* inline: the data was copied at post */
  }
  if (poll_n(wc, 1)) return -1;
  static const int wc_ops[OP_COUNT] = {IBV_WC_RDMA_WRITE, IBV_WC_RDMA_WRITE, IBV_WC_RDMA_READ,
                                       IBV_WC_SEND, IBV_WC_RDMA_WRITE};
  usleep(100);
  if (wc[0].opcode != (enum ibv_wc_opcode)wc_ops[op] || wc[0].wr_id != seq * 1000ull + batch - 1 ||
      ibv_poll_cq(cq, 1, wc + 1) != 0) {
    fprintf(stderr,
            "ncclsim-ibbw: %s: completion opcode %d wr_id %llu, or an unsignalled WR completed\n",
            op_names[op], wc[0].opcode, (unsigned long long)wc[0].wr_id);
    return -1;
  }
  if (op == OP_READ) {
    long long bad = check(seq, size);
    if (bad >= 0) fprintf(stderr, "ncclsim-ibbw: read: byte %lld differs\n", bad);
    return bad < 0 ? 0 : -1;
  }
  if (op == OP_WRITE || op == OP_INLINE)
    return ask(IBBW_CMD_CHECK, seq, size, batch, &st) || st ? -1 : 0;
  if (ibbw_ctl_recv(ctl, &st, sizeof st) || st)
    return -1; /* the server's verdict after its receives */
  return 0;
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: ncclsim-ibbw --server|--client --rendezvous FILE [--dev mlx5_0] [--ops write,write_imm,"
      "read,send,inline] [--sizes 1,4096,...] [--iters N] [--batch N] [--expect-lib DIR] [--crash] [--send-only] [--check-sport native|hooked]\n");
}

int main(int argc, char **argv) {
  int server = -1, iters = 2, batch = 4;
  const char *rdv = NULL, *dev = "mlx5_0", *expect = NULL, *sport = NULL;
  char ops[128] = "write,write_imm,read,send,inline";
  char sizes[512] = "1,2,7,64,100,4096,65536,65537,1048576,67108864";
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--server")) server = 1;
    else if (!strcmp(a, "--client")) server = 0;
    else if (!strcmp(a, "--crash")) crash_after_exchange = 1;
    else if (!strcmp(a, "--send-only")) send_only = 1;
    else if (v && !strcmp(a, "--rendezvous")) rdv = argv[++i];
    else if (v && !strcmp(a, "--dev")) dev = argv[++i];
    else if (v && !strcmp(a, "--expect-lib")) expect = argv[++i];
    else if (v && !strcmp(a, "--check-sport")) sport = argv[++i];
    else if (v && !strcmp(a, "--ops")) snprintf(ops, sizeof ops, "%s", argv[++i]);
    else if (v && !strcmp(a, "--sizes")) snprintf(sizes, sizeof sizes, "%s", argv[++i]);
    else if (v && !strcmp(a, "--iters")) iters = atoi(argv[++i]);
    else if (v && !strcmp(a, "--batch")) batch = atoi(argv[++i]);
    else {
      usage();
      return 2;
    }
  }
  if (server < 0 || !rdv || iters < 1 || batch < 1 || batch > 256) {
    usage();
    return 2;
  }
  uint64_t maxsize = 1, list[64];
  int nsizes = 0;
  for (char *save, *t = strtok_r(sizes, ",", &save); t && nsizes < 64;
       t = strtok_r(NULL, ",", &save)) {
    list[nsizes] = strtoull(t, NULL, 0);
    if (list[nsizes] > maxsize) maxsize = list[nsizes];
    nsizes++;
  }
  if (ibbw_verbs_load(&V) || check_lib(expect) || setup(dev, maxsize, server, rdv)) {
    printf("ncclsim-ibbw: FAILED (setup)\n");
    return 1;
  }
  if (server) {
    int rc = server_loop();
    printf("ncclsim-ibbw: server %s\n", rc ? "FAILED" : "OK");
    return rc ? 1 : 0;
  }
  int failed = sport && ibbw_check_sport(&V, qp, sport) != 0, enabled[OP_COUNT] = {0};
  for (char *save, *t = strtok_r(ops, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int op = 0; op < OP_COUNT; op++)
      if (!strcmp(t, op_names[op])) enabled[op] = found = 1;
    if (!found) {
      usage();
      return 2;
    }
  }
  uint32_t seq = 1;
  for (int op = 0; op < OP_COUNT && !failed; op++) {
    if (!enabled[op]) continue;
    for (int s = 0; s < nsizes && !failed; s++) {
      uint64_t size = list[s];
      uint32_t b = size < (uint64_t)batch ? (uint32_t)size : (uint32_t)batch;
      if (b < 1) b = 1;
      if (op == OP_INLINE && size / b > 64) continue;
      double t0 = now_s();
      for (int it = 0; it < iters && !failed; it++) failed = run_one(op, seq++, size, b) != 0;
      double dt = now_s() - t0;
      printf("ncclsim-ibbw: %-9s %10llu B x%d in %u WRs: %s, %.3f GB/s\n", op_names[op],
             (unsigned long long)size, iters, b, failed ? "MISMATCH" : "exact",
             (double)size * iters / dt / 1e9);
    }
  }
  ibbw_cmd_t done = {IBBW_CMD_DONE, 0, 0, 0, 0};
  ibbw_ctl_send(ctl, &done, sizeof done);
  printf("ncclsim-ibbw: %s\n", failed ? "FAILED" : "OK");
  return failed;
}
