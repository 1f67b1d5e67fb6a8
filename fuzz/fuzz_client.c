/* Fuzz target: the client's frame handling, handshake included (the hub's side is the input).
 * A fake hub on 127.0.0.1 accepts the client's connection and, when the first byte is odd,
 * completes a genuine handshake and then sends the rest of the input as frames (segments,
 * verdicts, acks, anything); when it is even, the rest of the input is the handshake itself
 * (HELLO, then whatever follows the client's AUTH). The client joins a communicator, runs briefly
 * and is closed; it must neither crash nor hang (every wait it has is bounded). */
#include <arpa/inet.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_log.h"
#include "fuzz.h"

static int lfd = -1; /* a fresh listener per input: a reconnection left over from one input must
                      * never be accepted as the next input's client */
static ah_coord_stamp_t st;

typedef struct {
  const uint8_t *data;
  size_t size;
} input_t;

static void *fake_hub(void *arg) {
  const input_t *in = arg;
  char err[AH_NET_ERR_LEN];
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) return NULL;
  struct timeval tv = {0, 300000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  uint64_t dl = ah_coord_now_ns() + 1000000000ull;
  if (in->data[0] & 1) {
    uint8_t hello[AH_COORD_HDR_BYTES + 32], auth[AH_COORD_HDR_BYTES + 72], wel[AH_COORD_HDR_BYTES + 40];
    ah_coord_hdr_encode(AH_MSG_HELLO, 32, hello);
    memset(hello + AH_COORD_HDR_BYTES, 0x77, 32);
    size_t got = 0;
    if (write(fd, hello, sizeof hello) != (ssize_t)sizeof hello) goto out;
    while (got < sizeof auth) {
      ssize_t r = read(fd, auth + got, sizeof auth - got);
      if (r <= 0) goto out;
      got += (size_t)r;
    }
    ah_coord_hdr_encode(AH_MSG_WELCOME, 40, wel);
    ah_coord_mac(st.secret, "autoha-hub", auth + AH_COORD_HDR_BYTES, hello + AH_COORD_HDR_BYTES, 0,
                 wel + AH_COORD_HDR_BYTES);
    memset(wel + AH_COORD_HDR_BYTES + 32, 0, 8);
    if (write(fd, wel, sizeof wel) != (ssize_t)sizeof wel) goto out;
  }
  (void)dl;
  if (in->size > 1 && write(fd, in->data + 1, in->size - 1) < 0) goto out;
  char b[4096];
  while (read(fd, b, sizeof b) > 0) { /* until the client closes (or 300 ms of silence) */
  }
out:
  (void)err;
  close(fd);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[AH_NET_ERR_LEN];
  struct sockaddr_storage ss;
  socklen_t sl;
  ah_log_set_level(AH_LOG_ERROR);
  if (size < 1) return 0;
  if (ah_coord_net_addr_parse(err, "127.0.0.1:0", &ss, &sl) != AH_NET_OK ||
      ah_coord_net_listen(err, &ss, &sl, 16, &lfd) != AH_NET_OK)
    abort();
  int flags = fcntl(lfd, F_GETFL);
  fcntl(lfd, F_SETFL, flags & ~O_NONBLOCK);
  struct timeval atv = {2, 0}; /* accept gives up if the client never dialled */
  setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &atv, sizeof atv);
  for (int i = 0; i < 16; i++) st.secret[i] = (uint8_t)(0xc0 + i);
  st.family = AF_INET;
  st.port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  st.addr[0] = 127, st.addr[3] = 1;
  input_t in = {data, size};
  pthread_t t;
  if (pthread_create(&t, NULL, fake_hub, &in) != 0) return 0;
  ah_coord_client_opts_t o;
  ah_coord_client_opts_default(&o);
  o.connect_ms = 300;
  o.heartbeat_ms = 50;
  o.dead_ms = 200;
  o.reconnect_ms = 1;
  ah_coord_t *c = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
  if (c) {
    ah_coord_join_rank(c, 0x45, 2, 0, NULL);
    usleep(10000);
    ah_coord_verdict(c, 0x45);
    ah_coord_client_close(c);
  }
  pthread_join(t, NULL); /* the client connected (the listener was ready), so accept returned */
  close(lfd);
  lfd = -1;
  return 0;
}
