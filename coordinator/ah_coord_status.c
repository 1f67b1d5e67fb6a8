/* `autoha status` (ah_coord_status.h): the credentials file, and the query — the handshake every
 * client makes (ah_coord_dial), one STATUS frame, then the hub's STATUS_COMM and STATUS_RANK frames
 * up to STATUS_END. */
#include "ah_coord_status.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_file.h"

#define CRED_MAGIC "autoha-hub-credentials 1"

int ah_coord_cred_write(const char *path, const ah_coord_stamp_t *st, char *err, size_t errlen) {
  char addr[INET6_ADDRSTRLEN] = "", line[256], hex[33];
  if (!inet_ntop(st->family == AF_INET6 ? AF_INET6 : AF_INET, st->addr, addr, sizeof addr)) {
    snprintf(err, errlen, "cannot format the hub's address");
    return -1;
  }
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", st->secret[i]);
  int n = snprintf(line, sizeof line, "%s %s %u %s\n", CRED_MAGIC, addr, st->port, hex);
  if (ah_file_make_parents(path, err, errlen) != 0) return -1;
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    snprintf(err, errlen, "cannot create %s: %s", path, strerror(errno));
    return -1;
  }
  int ok = fchmod(fd, 0600) == 0 && write(fd, line, (size_t)n) == n; /* 0600 whatever the umask */
  if (!ok) snprintf(err, errlen, "cannot write %s: %s", path, strerror(errno));
  close(fd);
  return ok ? 0 : -1;
}

int ah_coord_cred_read(const char *path, ah_coord_stamp_t *st, char *err, size_t errlen) {
  char ferr[256];
  size_t len = 0;
  char *text = ah_file_read(path, 4096, &len, ferr, sizeof ferr);
  if (!text) {
    snprintf(err, errlen, "cannot read the credentials %s: %s", path, ferr);
    return -1;
  }
  char addr[INET6_ADDRSTRLEN + 1] = "", hex[40] = "", tail;
  unsigned port = 0;
  int n = sscanf(text, CRED_MAGIC " %46s %u %39s %c", addr, &port, hex, &tail);
  memset(st, 0, sizeof *st);
  int ok = n == 3 && port >= 1 && port <= 65535 && strlen(hex) == 32;
  for (int i = 0; ok && i < 16; i++) ok = sscanf(hex + 2 * i, "%2hhx", &st->secret[i]) == 1;
  if (ok && inet_pton(AF_INET, addr, st->addr) == 1) st->family = AF_INET;
  else if (ok && inet_pton(AF_INET6, addr, st->addr) == 1) st->family = AF_INET6;
  else ok = 0;
  st->port = (uint16_t)port;
  if (!ok) {
    char shown[80];
    snprintf(shown, sizeof shown, "%.60s", text);
    for (char *p = shown; *p; p++)
      if (*p == '\n') *p = 0;
    snprintf(err, errlen,
             "%s is not an autoha credentials file ('%s'; expected '" CRED_MAGIC
             " ADDRESS PORT SECRET')",
             path, shown);
  }
  free(text);
  return ok ? 0 : -1;
}

void ah_status_comm_pack(const ah_status_comm_t *c, uint8_t *out) {
  memset(out, 0, AH_STATUS_COMM_BYTES);
  ah_coord_put_u64(out, c->comm);
  ah_coord_put_u32(out + 8, c->nranks);
  out[12] = c->verdict;
  out[13] = c->finding;
  ah_coord_put_u32(out + 14, c->stalled_ms);
  snprintf((char *)out + 18, AH_HEALTH_TEXT, "%s", c->text);
}

static void put_u16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)(v >> 8);
  p[1] = (uint8_t)v;
}
static uint16_t get_u16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }

void ah_status_rank_pack(const ah_status_rank_t *r, uint8_t *out) {
  memset(out, 0, AH_STATUS_RANK_BYTES);
  ah_coord_put_u64(out, r->comm);
  ah_coord_put_u32(out + 8, r->rank);
  out[12] = r->have;
  out[13] = r->state;
  ah_coord_put_u64(out + 14, r->entered);
  ah_coord_put_u32(out + 22, r->age_ms);
  ah_coord_put_u32(out + 26, r->pid);
  out[30] = (uint8_t)(r->gpu >> 8);
  out[31] = (uint8_t)r->gpu;
  snprintf((char *)out + 32, 64, "%s", r->host);
  out[96] = r->straggler;
  out[97] = r->late_calls;
  put_u16(out + 98, (uint16_t)r->late_p50);
  put_u16(out + 100, (uint16_t)r->late_p90);
  put_u16(out + 102, r->wait_share);
}

/* A text field of a frame: NUL-terminated within its bytes. */
static int text_ok(const uint8_t *p, size_t n) { return memchr(p, 0, n) != NULL; }

int ah_coord_status_query(const ah_coord_stamp_t *st, int timeout_ms,
                          void (*on_comm)(void *arg, const ah_status_comm_t *c),
                          void (*on_rank)(void *arg, const ah_status_rank_t *r), void *arg,
                          char *err, size_t errlen) {
  struct sockaddr_storage ss;
  socklen_t sl;
  ah_coord_stamp_sockaddr(st, &ss, &sl);
  ah_coord_crypto_init();
  uint64_t id, last_pub;
  int fd = -1;
  if (ah_coord_random(&id, sizeof id) != 0) {
    snprintf(err, errlen, "no random bytes for a client id");
    return -1;
  }
  char derr[300], nerr[AH_NET_ERR_LEN], perr[200];
  errno = 0;
  if (ah_coord_dial((const struct sockaddr *)&ss, sl, st->secret, id, timeout_ms, &fd, NULL,
                    &last_pub, derr, sizeof derr) != 0) {
    /* refused, or reset before its HELLO: a hub whose process is gone or going (killed as we dial) */
    int gone = errno == ECONNREFUSED || errno == ECONNRESET;
    snprintf(err, errlen, "cannot reach the job's hub: %s", derr);
    return gone ? AH_COORD_STATUS_GONE : -1;
  }
  uint64_t deadline = ah_coord_now_ns() + (uint64_t)timeout_ms * 1000000ull;
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(AH_MSG_STATUS, 0, f);
  int rc = -1;
  if (ah_coord_net_write_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "sending STATUS: %s", nerr);
    goto out;
  }
  for (;;) {
    ah_coord_hdr_t h;
    if (ah_coord_net_read_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
      snprintf(err, errlen, "reading the hub's answer: %s", nerr);
      goto out;
    }
    if (ah_coord_hdr_decode(f, &h, perr, sizeof perr) != 0) {
      snprintf(err, errlen, "bad answer from the hub: %s", perr);
      goto out;
    }
    uint8_t *p = f + AH_COORD_HDR_BYTES;
    if (h.len && ah_coord_net_read_full(nerr, fd, p, h.len, deadline) != AH_NET_OK) {
      snprintf(err, errlen, "reading the hub's answer: %s", nerr);
      goto out;
    }
    if (h.type == AH_MSG_STATUS_END) break;
    if (h.type == AH_MSG_STATUS_COMM && text_ok(p + 18, AH_HEALTH_TEXT)) {
      ah_status_comm_t c = {
          ah_coord_get_u64(p), ah_coord_get_u32(p + 8), p[12], p[13], ah_coord_get_u32(p + 14), ""};
      memcpy(c.text, p + 18, sizeof c.text);
      if (on_comm) on_comm(arg, &c);
    } else if (h.type == AH_MSG_STATUS_RANK && text_ok(p + 32, 64)) {
      ah_status_rank_t r = {ah_coord_get_u64(p),
                            ah_coord_get_u32(p + 8),
                            p[12],
                            p[13],
                            ah_coord_get_u64(p + 14),
                            ah_coord_get_u32(p + 22),
                            ah_coord_get_u32(p + 26),
                            (uint16_t)((p[30] << 8) | p[31]),
                            "",
                            0,
                            0,
                            0,
                            0,
                            0};
      memcpy(r.host, p + 32, sizeof r.host); /* NUL-terminated within (text_ok) */
      r.straggler = p[96];
      r.late_calls = p[97];
      r.late_p50 = (int16_t)get_u16(p + 98);
      r.late_p90 = (int16_t)get_u16(p + 100);
      r.wait_share = get_u16(p + 102);
      if (on_rank) on_rank(arg, &r);
    } else if (h.type != AH_MSG_PONG) {
      snprintf(err, errlen, "bad answer from the hub: message type %u", h.type);
      goto out;
    }
  }
  rc = 0;
out:
  close(fd);
  return rc;
}
