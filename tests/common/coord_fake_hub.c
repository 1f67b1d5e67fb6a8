/* The hub's side of the handshake for fake hubs (see coord_fake_hub.h). */
#include "coord_fake_hub.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_coord_internal.h"

int coord_fake_listen(uint16_t *port_p) {
  char err[AH_NET_ERR_LEN];
  struct sockaddr_storage ss;
  socklen_t sl;
  int lfd;
  if (ah_coord_net_addr_parse(err, "127.0.0.1:0", &ss, &sl) != AH_NET_OK ||
      ah_coord_net_listen(err, &ss, &sl, 16, &lfd) != AH_NET_OK)
    return -1;
  int flags = fcntl(lfd, F_GETFL);
  fcntl(lfd, F_SETFL, flags & ~O_NONBLOCK);
  *port_p = ntohs(((struct sockaddr_in *)&ss)->sin_port);
  return lfd;
}

int coord_fake_read(int fd, void *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t r = read(fd, (char *)buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

int coord_fake_handshake(int fd, const uint8_t secret[16], uint8_t fill) {
  uint8_t hello[AH_COORD_HDR_BYTES + 32], auth[AH_COORD_HDR_BYTES + 72],
      wel[AH_COORD_HDR_BYTES + 40];
  ah_coord_hdr_encode(AH_MSG_HELLO, 32, hello);
  memset(hello + AH_COORD_HDR_BYTES, fill, 32);
  /* send(MSG_NOSIGNAL): a client that gave up and closed must not end the test with SIGPIPE */
  if (send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello ||
      coord_fake_read(fd, auth, sizeof auth) != 0)
    return -1;
  ah_coord_hdr_encode(AH_MSG_WELCOME, 40, wel);
  ah_coord_mac(secret, "autoha-hub", auth + AH_COORD_HDR_BYTES, hello + AH_COORD_HDR_BYTES, 0,
               wel + AH_COORD_HDR_BYTES);
  memset(wel + AH_COORD_HDR_BYTES + 32, 0, 8);
  return send(fd, wel, sizeof wel, MSG_NOSIGNAL) == (ssize_t)sizeof wel ? 0 : -1;
}
