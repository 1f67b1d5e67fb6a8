/* ah_coord_link.h: what a process tells the hub about the connections NCCL runs over its queue
 * pairs, for the slow-link diagnosis (docs/diagnosis.md "Slow links"): each queue pair's identity
 * once (LINK_QP: both GIDs and QP numbers, so that the hub pairs the two ends of a connection and
 * so their ranks; the GPU it was created for; its device, port, source port and the leaf-spine
 * route the fabric model gives it), and once a second what each sending end moved (LINK_RATES:
 * bytes, busy time, post-to-completion time, work requests). Wire forms and their checks
 * (ah_coord_link.c); the hub's use of them is ah_coord_hub_link.c. */
#ifndef AH_COORD_LINK_H
#define AH_COORD_LINK_H

#include <stddef.h>
#include <stdint.h>

#define AH_LINK_DEV 16      /* a verbs device name, NUL included */
#define AH_LINK_NONE 0xffff /* a leaf or spine the model does not know (or a flow without one) */

enum { AH_LINK_SENDER = 1, AH_LINK_RECEIVER = 2 };

/* One queue pair's identity. */
typedef struct {
  uint8_t lgid[16], rgid[16]; /* its GID and its peer's */
  uint32_t lqpn, rqpn;        /* its QP number and its peer's */
  uint16_t gpu;               /* the GPU current on the thread that created it (0xffff unknown) */
  uint8_t role;               /* AH_LINK_SENDER or AH_LINK_RECEIVER (created with receives) */
  uint8_t port;               /* the verbs port (1-based) */
  uint16_t sport;             /* the UDP source port it sends with */
  char dev[AH_LINK_DEV];      /* the verbs device, NUL-terminated */
  /* the route the fabric model (AUTOHA_QP_TOPO) gives its packets */
  uint8_t tx_port, rx_port; /* the physical port it leaves its NIC on, and arrives on at the peer's
                             * (1 or 2; 0 unknown) */
  uint16_t src_leaf, spine, dst_leaf; /* AH_LINK_NONE: unknown, or no spine (one leaf pair) */
} ah_link_qp_t;

/* What one sending end moved in a window. */
typedef struct {
  uint8_t lgid[16];
  uint32_t lqpn;
  uint64_t bytes; /* carried by the signalled sends that completed (and unsignalled before them) */
  uint32_t busy_us; /* time with a work request outstanding */
  uint32_t wait_us; /* the completed work requests' post-to-completion times, summed */
  uint32_t wrs;     /* signalled sends completed */
} ah_link_rate_t;

/* Messages: LINK_QP pid u32 count u8 and AH_LINK_QPS entries, LINK_RATES pid u32 count u8 and
 * AH_LINK_RATES entries (unused ones zero). */
#define AH_LINK_QPS 7
#define AH_LINK_QP_BYTES (16 + 16 + 4 + 4 + 2 + 1 + 1 + 2 + AH_LINK_DEV + 1 + 1 + 2 + 2 + 2)
#define AH_LINK_QP_MSG_BYTES (4 + 1 + AH_LINK_QPS * AH_LINK_QP_BYTES)
#define AH_LINK_RATES 13
#define AH_LINK_RATE_BYTES (16 + 4 + 8 + 4 + 4 + 4)
#define AH_LINK_RATE_MSG_BYTES (4 + 1 + AH_LINK_RATES * AH_LINK_RATE_BYTES)

/* Packs n (<= AH_LINK_QPS) identities of process pid into out[AH_LINK_QP_MSG_BYTES]. */
void ah_link_qps_pack(uint32_t pid, const ah_link_qp_t *q, int n, uint8_t *out);
/* Unpacks and validates (count, role, port, device name printable and NUL-terminated, ports and
 * route in range, unused slots zero). Returns the count, or -1 with a reason naming the offending
 * value. */
int ah_link_qps_unpack(const uint8_t *in, uint32_t *pid, ah_link_qp_t *q, char *err, size_t errlen);
/* The same for rates (n <= AH_LINK_RATES; a window's busy and wait times at most 60 s each). */
void ah_link_rates_pack(uint32_t pid, const ah_link_rate_t *r, int n, uint8_t *out);
int ah_link_rates_unpack(const uint8_t *in, uint32_t *pid, ah_link_rate_t *r, char *err,
                         size_t errlen);

/* Sends the hub n (<= AH_LINK_QPS) queue pairs' identities, or n (<= AH_LINK_RATES) windows, of
 * process pid. Non-blocking, like ah_coord_samples (while disconnected they wait in the out queue,
 * which a reconnection rebuilds without them: the caller announces its queue pairs again now and
 * then). Returns 0, or -1 when the hub is gone. */
struct ah_coord;
int ah_coord_link_qps(struct ah_coord *c, uint32_t pid, const ah_link_qp_t *q, int n);
int ah_coord_link_rates(struct ah_coord *c, uint32_t pid, const ah_link_rate_t *r, int n);

/* 1 when dev, a device name off the wire, is printable text (0x21..0x7e), NUL-terminated within
 * AH_LINK_DEV bytes, not empty, and zero after its NUL (as packing leaves it); else 0. Shared by
 * LINK_QP's and NIC_PORT's checks. */
int ah_link_dev_valid(const char dev[AH_LINK_DEV]);

/* A GID as text: the IPv4 address of an IPv4-mapped GID (RoCEv2's ::ffff:a.b.c.d), else IPv6. */
void ah_link_gid_text(const uint8_t gid[16], char *buf, size_t len);

#endif
