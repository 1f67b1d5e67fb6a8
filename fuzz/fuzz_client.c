/* Fuzz target: the client's frame handling, handshake included (the hub's side is the input).
 * A fake hub on 127.0.0.1 accepts the client's connection and, when the first byte is odd,
 * completes a genuine handshake and then sends the rest of the input as frames (segments,
 * verdicts, acks, directory values, anything); when it is even, the rest of the input is the handshake itself
 * (HELLO, then whatever follows the client's AUTH). The client joins a communicator, asks the
 * directory for a key (request 1; the key is 32 bytes of 0x6b) for 10 ms, and is closed; it must neither crash nor hang (every wait it has is bounded). */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_log.h"
#include "coord_fake_hub.h"
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
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) return NULL;
  struct timeval tv = {0, 300000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  if ((in->data[0] & 1) && coord_fake_handshake(fd, st.secret, 0x77) != 0) goto out;
  /* MSG_NOSIGNAL: the client may have closed already (a loaded machine), and a SIGPIPE would end
   * the fuzzer without a word */
  if (in->size > 1 && send(fd, in->data + 1, in->size - 1, MSG_NOSIGNAL) < 0) goto out;
  char b[4096];
  while (read(fd, b, sizeof b) > 0) { /* until the client closes (or 300 ms of silence) */
  }
out:
  close(fd);
  return NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR);
  if (size < 1) return 0;
  if ((lfd = coord_fake_listen(&st.port)) < 0) abort();
  struct timeval atv = {2, 0}; /* accept gives up if the client never dialled */
  setsockopt(lfd, SOL_SOCKET, SO_RCVTIMEO, &atv, sizeof atv);
  for (int i = 0; i < 16; i++) st.secret[i] = (uint8_t)(0xc0 + i);
  st.family = AF_INET;
  st.addr[0] = 127, st.addr[3] = 1;
  input_t in = {data, size};
  pthread_t t;
  if (pthread_create(&t, NULL, fake_hub, &in) != 0) return 0;
  ah_coord_client_opts_t o = {
      .connect_ms = 300, .heartbeat_ms = 50, .dead_ms = 200, .reconnect_ms = 1};
  ah_coord_t *c = ah_coord_client_open(&st, NULL, &o, NULL, NULL);
  if (c) {
    ah_coord_join_rank(c, 0x45, 2, 0, NULL);
    uint8_t key[AH_COORD_DIR_KEY], val[AH_COORD_DIR_VAL_MAX];
    memset(key, 0x6b, sizeof key);
    int n = ah_coord_dir_get(c, key, val, sizeof val, 0.01);
    if (n > AH_COORD_DIR_VAL_MAX) abort(); /* a length the decoder should have refused */
    ah_coord_verdict(c, 0x45);
    ah_coord_client_close(c);
  }
  pthread_join(t, NULL); /* the client connected (the listener was ready), so accept returned */
  close(lfd);
  lfd = -1;
  return 0;
}
