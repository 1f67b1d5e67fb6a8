/* Fuzz target: the hub's frame handling, live. One hub on 127.0.0.1 serves every input (so what
 * inputs leave behind accumulates, and the hub's caps are exercised). The first byte picks the
 * connection's state: even, the input's bytes go to a fresh connection before authentication;
 * odd, the connection first completes the handshake with the job secret, then sends them. The
 * target then waits until the hub has dropped or kept the connection and has answered a PING on
 * another one, so a hub failure is charged to the input that caused it. And whatever an input's
 * JOINs said about a communicator (another rank count, ranks out of order, the same rank twice),
 * a legitimate pair joining it afterwards as its 2 ranks must each hear a verdict within the join
 * deadline: no frame from one peer may keep the real ranks from their verdict. */
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_log.h"
#include "fuzz.h"

static ah_coord_hub_t *hub;
static ah_coord_stamp_t st;
/* How long the target waits on the hub: generous, since a fuzzing machine is often loaded and a
 * hub thread starved for a second is not a finding (a hub that stops answering still is). */
#define HUB_WAIT_NS 5000000000ull
static const uint8_t secret[16] = {0x5e, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static int hub_dial(void) {
  char err[AH_NET_ERR_LEN], addr[64];
  struct sockaddr_storage ss;
  socklen_t sl;
  snprintf(addr, sizeof addr, "127.0.0.1:%u", st.port);
  int fd = -1;
  if (ah_coord_net_addr_parse(err, addr, &ss, &sl) != AH_NET_OK ||
      ah_coord_net_connect(err, (struct sockaddr *)&ss, sl, ah_coord_now_ns() + HUB_WAIT_NS, &fd) !=
          AH_NET_OK)
    return -1;
  return fd;
}

/* Reads HELLO, answers AUTH for client id `id`, reads WELCOME. Returns 0 or -1. */
static int handshake(int fd, uint64_t id) {
  char err[AH_NET_ERR_LEN];
  uint64_t dl = ah_coord_now_ns() + HUB_WAIT_NS;
  uint8_t hello[AH_COORD_HDR_BYTES + 32], auth[AH_COORD_HDR_BYTES + 72],
      wel[AH_COORD_HDR_BYTES + 40];
  if (ah_coord_net_read_full(err, fd, hello, sizeof hello, dl) != AH_NET_OK) return -1;
  ah_coord_hdr_encode(AH_MSG_AUTH, 72, auth);
  uint8_t *p = auth + AH_COORD_HDR_BYTES;
  memset(p, 0x3c, 32);
  ah_coord_put_u64(p + 32, id);
  if (ah_coord_mac(secret, "autoha-client", hello + AH_COORD_HDR_BYTES, p, id, p + 40) != 0 ||
      ah_coord_net_write_full(err, fd, auth, sizeof auth, dl) != AH_NET_OK ||
      ah_coord_net_read_full(err, fd, wel, sizeof wel, dl) != AH_NET_OK)
    return -1;
  return 0;
}

/* A PING answered on a fresh authenticated connection: the hub's loop is alive and has handled
 * what was sent before. */
static void hub_check_alive(void) {
  char err[AH_NET_ERR_LEN];
  int fd = hub_dial();
  if (fd < 0 || handshake(fd, 1) != 0) {
    fprintf(stderr, "fuzz_hub: the hub no longer completes a handshake\n");
    abort();
  }
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(AH_MSG_PING, 0, f);
  uint64_t dl = ah_coord_now_ns() + HUB_WAIT_NS;
  int ok = ah_coord_net_write_full(err, fd, f, AH_COORD_HDR_BYTES, dl) == AH_NET_OK;
  while (ok) { /* skip anything queued before the PONG */
    ah_coord_hdr_t h;
    ok =
        ah_coord_net_read_full(err, fd, f, AH_COORD_HDR_BYTES, dl) == AH_NET_OK &&
        ah_coord_hdr_decode(f, &h, err, sizeof err) == 0 &&
        (!h.len || ah_coord_net_read_full(err, fd, f + AH_COORD_HDR_BYTES, h.len, dl) == AH_NET_OK);
    if (ok && h.type == AH_MSG_PONG) break;
  }
  close(fd);
  if (!ok) {
    fprintf(stderr, "fuzz_hub: the hub did not answer a PING\n");
    abort();
  }
}

/* The comm of the first JOIN among the frames of p (an authenticated input's bytes), or 0x77. */
static uint64_t first_join_comm(const uint8_t *p, size_t n) {
  size_t off = 0;
  while (n - off >= AH_COORD_HDR_BYTES) {
    uint32_t len = ah_coord_get_u32(p + off);
    if (len > AH_COORD_MAX_PAYLOAD || n - off - AH_COORD_HDR_BYTES < len) break;
    if (p[off + 5] == AH_MSG_JOIN && len >= 8)
      return ah_coord_get_u64(p + off + AH_COORD_HDR_BYTES);
    off += AH_COORD_HDR_BYTES + len;
  }
  return 0x77;
}

/* A legitimate rank of comm's 2 joins and must read a VERDICT for it; returns its connection. */
static int legit_join(uint64_t id, uint64_t comm, uint32_t rank) {
  char err[AH_NET_ERR_LEN];
  int fd = hub_dial();
  if (fd < 0 || handshake(fd, id) != 0) {
    fprintf(stderr, "fuzz_hub: a legitimate rank cannot connect\n");
    abort();
  }
  uint8_t f[AH_COORD_HDR_BYTES + 48] = {0};
  ah_coord_hdr_encode(AH_MSG_JOIN, 48, f);
  ah_coord_put_u64(f + AH_COORD_HDR_BYTES, comm);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 8, 2);
  ah_coord_put_u32(f + AH_COORD_HDR_BYTES + 12, rank);
  if (ah_coord_net_write_full(err, fd, f, sizeof f, ah_coord_now_ns() + HUB_WAIT_NS) != AH_NET_OK) {
    fprintf(stderr, "fuzz_hub: a legitimate rank's JOIN was cut\n");
    abort();
  }
  return fd;
}

static void legit_verdict(int fd, uint64_t comm) {
  char err[AH_NET_ERR_LEN];
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  uint64_t dl = ah_coord_now_ns() + HUB_WAIT_NS; /* the join deadline (200 ms) with room */
  for (;;) {
    ah_coord_hdr_t h;
    if (ah_coord_net_read_full(err, fd, f, AH_COORD_HDR_BYTES, dl) != AH_NET_OK ||
        ah_coord_hdr_decode(f, &h, err, sizeof err) != 0 ||
        (h.len &&
         ah_coord_net_read_full(err, fd, f + AH_COORD_HDR_BYTES, h.len, dl) != AH_NET_OK)) {
      fprintf(stderr, "fuzz_hub: a legitimate rank of comm %016llx got no verdict (%s)\n",
              (unsigned long long)comm, err);
      abort();
    }
    if (h.type == AH_MSG_VERDICT && ah_coord_get_u64(f + AH_COORD_HDR_BYTES) == comm) return;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[AH_NET_ERR_LEN];
  if (!hub) {
    ah_log_set_level(AH_LOG_ERROR);
    ah_coord_hub_opts_t o;
    ah_coord_hub_opts_default(&o);
    o.join_ms = 200;
    hub = ah_coord_hub_open("127.0.0.1:0", secret, &o, &st);
    if (!hub) abort();
  }
  if (size < 1) return 0;
  int fd = hub_dial();
  if (fd < 0) abort();
  if ((data[0] & 1) && handshake(fd, 0xf0220000u + data[0]) != 0) {
    fprintf(stderr, "fuzz_hub: handshake failed\n");
    abort();
  }
  /* the hub may drop the connection mid-way: a failed write is the hub refusing, not a finding */
  ah_coord_net_write_full(err, fd, data + 1, size - 1, ah_coord_now_ns() + 1000000000ull);
  close(fd);
  hub_check_alive();
  if (data[0] & 1) {
    static uint64_t legit_id = 0xa11e000000000000ull;
    uint64_t comm = first_join_comm(data + 1, size - 1);
    int r0 = legit_join(++legit_id, comm, 0), r1 = legit_join(++legit_id, comm, 1);
    legit_verdict(r0, comm);
    legit_verdict(r1, comm);
    close(r0);
    close(r1);
  }
  return 0;
}
