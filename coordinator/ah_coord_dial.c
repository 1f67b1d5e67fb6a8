/* ah_coord_dial.c: a client's side of the hub's handshake — connect, prove the job secret, check the
 * hub proves it too — for the clients' I/O threads and for `autoha status`. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ah_coord_internal.h"

/* Connects and runs the handshake, all before one deadline. Returns 0 with fd_p and last_pub_p
 * set, or -1 with err filled. Note that the hub proves it knows the secret too (WELCOME carries
 * its own MAC over both nonces), so a client never takes segments from an impostor. */
int ah_coord_dial(const struct sockaddr *sa, socklen_t sl, const uint8_t secret[16],
                  uint64_t client_id, int connect_ms, int *fd_p, int *relay_fds,
                  uint64_t *last_pub_p, char *err, size_t errlen) {
  char nerr[AH_NET_ERR_LEN];
  uint64_t deadline = ah_coord_now_ns() + (uint64_t)connect_ms * 1000000ull;
  int fd = -1;
  if (ah_coord_net_connect(nerr, sa, sl, deadline, &fd) != AH_NET_OK) {
    int e = errno; /* the connection's error, for a caller that words a refusal (autoha status) */
    snprintf(err, errlen, "%.200s", nerr);
    errno = e;
    return -1;
  }
  errno = 0; /* connected: a later failure is never a refusal (the client tells the two apart) */
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_t h;
  char perr[200];
  int passed[AH_COORD_RELAY_FDS] = {-1, -1};
  if (ah_coord_net_read_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "waiting for the hub's HELLO: %.200s", nerr);
    goto fail;
  }
  if (ah_coord_hdr_decode(f, &h, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "bad HELLO from the hub: %.200s", perr);
    goto fail;
  }
  if (h.type != AH_MSG_HELLO) {
    snprintf(err, errlen, "bad HELLO from the hub: message type %u where HELLO (%u) belongs",
             h.type, AH_MSG_HELLO);
    goto fail;
  }
  uint8_t nonce_h[32];
  if (ah_coord_net_read_full(nerr, fd, nonce_h, 32, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "reading the hub's HELLO: %.200s", nerr);
    goto fail;
  }
  uint8_t auth[72];
  if (ah_coord_random(auth, 32) != 0) {
    snprintf(err, errlen, "no random bytes for the nonce (getrandom failed)");
    goto fail;
  }
  ah_coord_put_u64(auth + 32, client_id);
  if (ah_coord_mac(secret, "autoha-client", nonce_h, auth, client_id, auth + 40) != 0) {
    snprintf(err, errlen, "cannot compute the HMAC-SHA256 proof (the process is exiting)");
    goto fail;
  }
  ah_coord_hdr_encode(AH_MSG_AUTH, sizeof auth, f);
  memcpy(f + AH_COORD_HDR_BYTES, auth, sizeof auth);
  if (ah_coord_net_write_full(nerr, fd, f, AH_COORD_HDR_BYTES + sizeof auth, deadline) !=
      AH_NET_OK) {
    snprintf(err, errlen, "sending AUTH: %.200s", nerr);
    goto fail;
  }
  if (ah_coord_net_read_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "waiting for WELCOME: %.200s (does the hub have another job's secret?)",
             nerr);
    goto fail;
  }
  if (ah_coord_hdr_decode(f, &h, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "bad WELCOME from the hub: %.200s", perr);
    goto fail;
  }
  if (h.type != AH_MSG_WELCOME) {
    snprintf(err, errlen, "bad WELCOME from the hub: message type %u where WELCOME (%u) belongs",
             h.type, AH_MSG_WELCOME);
    goto fail;
  }
  uint8_t wel[40], want[32];
  if (ah_coord_net_read_full(nerr, fd, wel, 40, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "reading WELCOME: %.200s", nerr);
    goto fail;
  }
  uint64_t last_pub = ah_coord_get_u64(wel + 32);
  if (ah_coord_mac(secret, "autoha-hub", auth, nonce_h, last_pub, want) != 0 ||
      !ah_coord_mac_equal(want, wel)) {
    snprintf(err, errlen,
             "the hub failed to prove it knows the job secret (impostor or another "
             "job's hub)");
    goto fail;
  }
  /* Through a host relay, the doorbell and this process's ring come right behind WELCOME (a relay
   * passes them only to a process the hub welcomed). */
  if (relay_fds &&
      ah_coord_net_fd_recv(nerr, fd, deadline, passed, AH_COORD_RELAY_FDS) != AH_NET_OK) {
    snprintf(err, errlen, "waiting for the relay's doorbell and ring: %.200s", nerr);
    goto fail;
  }
  *fd_p = fd;
  if (relay_fds) memcpy(relay_fds, passed, sizeof passed);
  *last_pub_p = last_pub;
  return 0;
fail:
  for (int i = 0; i < AH_COORD_RELAY_FDS; i++)
    if (passed[i] >= 0) close(passed[i]);
  int e = errno; /* a reset before the HELLO: a hub going (autoha status says it is gone) */
  close(fd);
  errno = e;
  return -1;
}
