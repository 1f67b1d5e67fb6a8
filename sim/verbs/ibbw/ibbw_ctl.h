/* ibbw_ctl.h: ncclsim-ibbw's out-of-band channel (TCP on loopback, port in a rendezvous file). */
#ifndef IBBW_CTL_H
#define IBBW_CTL_H

#include <stddef.h>
#include <stdint.h>

/* Server: listens, publishes the port in `file`, returns the accepted socket or -1. */
int ibbw_ctl_serve(const char *file);
/* Client: waits up to timeout_s for `file` and a server behind it; the socket or -1. */
int ibbw_ctl_dial(const char *file, double timeout_s);
/* Whole-buffer send and receive; 0 or -1. */
int ibbw_ctl_send(int s, const void *buf, size_t len);
int ibbw_ctl_recv(int s, void *buf, size_t len);

/* What the two sides tell each other. */
typedef struct {
  uint32_t qpn, port;
  uint8_t gid[16];
  uint64_t addr, size;
  uint32_t rkey, pad;
} ibbw_peer_t;

enum { IBBW_CMD_CHECK = 1, IBBW_CMD_FILL, IBBW_CMD_POST_RECV, IBBW_CMD_WAIT_IMM, IBBW_CMD_DONE };
typedef struct {
  uint32_t cmd, seq, batch, pad;
  uint64_t size;
} ibbw_cmd_t;

#endif
