/* ah_coord_nic.h: what a process tells the hub when a port of a NIC it opened goes down or comes
 * back (NIC_PORT), for the NIC-down diagnosis (docs/diagnosis.md "A NIC port down"): the device and
 * port, its new state, and the GPUs of the process's queue pairs on that port — the ranks the hub
 * names. Only the process whose own NIC reported the port's state sends it: a peer whose queue
 * pairs fail because the far end's port went down has nothing to say, so it is never named. Wire
 * form and its checks (ah_coord_nic.c); the hub's use of it is ah_coord_hub_nic.c. */
#ifndef AH_COORD_NIC_H
#define AH_COORD_NIC_H

#include <stddef.h>
#include <stdint.h>

#include "ah_coord_link.h"

#define AH_NIC_GPUS 8 /* distinct GPUs listed (a host's; more are counted in nqps only) */

typedef struct {
  uint32_t pid;
  char dev[AH_LINK_DEV];      /* the verbs device, NUL-terminated */
  uint8_t port;               /* 1-based */
  uint8_t up;                 /* 0: the port went down (PORT_ERR), 1: it is active again */
  uint8_t ngpus;              /* gpus used */
  uint16_t gpus[AH_NIC_GPUS]; /* the GPUs current when its queue pairs on the port were created
                               * (0xffff: unknown); unused slots zero */
  uint32_t nqps;              /* the process's queue pairs on the port (live) */
} ah_nic_port_t;

/* Message: NIC_PORT pid u32 dev[16] port u8 up u8 ngpus u8 gpu u16[AH_NIC_GPUS] nqps u32. */
#define AH_NIC_PORT_BYTES (4 + AH_LINK_DEV + 1 + 1 + 1 + 2 * AH_NIC_GPUS + 4)

void ah_nic_port_pack(const ah_nic_port_t *x, uint8_t *out);
/* Unpacks and validates (device name printable and NUL-terminated, port 1.., state 0 or 1, ngpus in
 * range, unused slots zero). Returns 0, or -1 with a reason naming the offending value. */
int ah_nic_port_unpack(const uint8_t *in, ah_nic_port_t *x, char *err, size_t errlen);

/* Sends the hub x. Returns 0, or -1 when the hub is gone (or out of memory). Note that it never
 * waits on the network, so NCCL's async-event thread may call it: x is queued under the client's
 * lock (which other threads hold only to copy memory, never across a socket call), then sent at
 * once by a non-blocking send when the write lock is free (only tried) and the socket takes it;
 * otherwise — socket buffer full, another thread writing, disconnected — the I/O thread is woken to
 * send it. While disconnected it waits in the out queue, which a reconnection rebuilds without it,
 * like ah_coord_link_qps: the caller tells standing ports again now and then. */
struct ah_coord;
int ah_coord_nic_port(struct ah_coord *c, const ah_nic_port_t *x);

#endif
