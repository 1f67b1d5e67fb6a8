/* ah_coord_internal.h: what the coordinator's files share with each other and with its tests —
 * anet-style socket helpers, the wire format (frames, messages, HMAC), and the non-singleton
 * constructors of a hub and a client that the public ah_coord_hub_start/ah_coord_connect wrap.
 *
 * Note that tests and bench/coord_scale use the non-singleton forms to run several hubs, or
 * 1,024 clients, in one process; the shim only ever uses ah_coord.h. */
#ifndef AH_COORD_INTERNAL_H
#define AH_COORD_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "ah_coord.h"
#include "ah_coord_health.h"

/* ---- socket helpers (ah_coord_net.c), in the shape of Redis's anet.c ---- */
#define AH_NET_OK 0
#define AH_NET_ERR -1
#define AH_NET_TIMEOUT -2
#define AH_NET_ERR_LEN 256

/* Monotonic clock in nanoseconds. */
uint64_t ah_coord_now_ns(void);
int ah_coord_net_nonblock_set(char *err, int fd);
/* Parses "host:port" ("[v6]:port" too) into a socket address. */
int ah_coord_net_addr_parse(char *err, const char *text, struct sockaddr_storage *ss_p,
                            socklen_t *len_p);
/* Formats an address as "host:port". */
void ah_coord_net_addr_format(const struct sockaddr *sa, char *buf, size_t len);
/* Listens (non-blocking, close-on-exec, SO_REUSEADDR) on ss; fills the bound address back. */
int ah_coord_net_listen(char *err, struct sockaddr_storage *ss, socklen_t *len, int backlog,
                        int *fd_p);
/* Accepts one connection (non-blocking, close-on-exec, TCP_NODELAY). Returns AH_NET_OK with fd_p
 * set, AH_NET_TIMEOUT when none is pending (EAGAIN), AH_NET_ERR otherwise (errno kept). */
int ah_coord_net_accept(char *err, int lfd, int *fd_p, char *peer, size_t peer_len);
/* Connects with a deadline (ah_coord_now_ns() clock); the socket is left non-blocking. Returns
 * AH_NET_OK, AH_NET_TIMEOUT, or AH_NET_ERR with errno the connection's error (ECONNREFUSED: nothing
 * listens there). */
int ah_coord_net_connect(char *err, const struct sockaddr *sa, socklen_t len, uint64_t deadline_ns,
                         int *fd_p);
/* Reads/writes exactly n bytes from/to a non-blocking socket before the deadline. */
int ah_coord_net_read_full(char *err, int fd, void *buf, size_t n, uint64_t deadline_ns);
int ah_coord_net_write_full(char *err, int fd, const void *buf, size_t n, uint64_t deadline_ns);
/* Passes n (1..AH_NET_FD_MAX) descriptors over the unix socket fd (SCM_RIGHTS, with the one
 * marker byte AH_NET_FD_MARK); fd must have room (a fresh socket does). Returns AH_NET_OK or
 * AH_NET_ERR. */
#define AH_NET_FD_MARK ((char)0xb7)
#define AH_NET_FD_MAX 4
int ah_coord_net_fd_send(char *err, int fd, const int *passed, int n);
/* Receives exactly n descriptors that ah_coord_net_fd_send passed, before the deadline: AH_NET_OK
 * with passed[0..n) (close-on-exec), AH_NET_TIMEOUT, or AH_NET_ERR when the peer closed or sent
 * anything else first (descriptors that came anyway are closed). */
int ah_coord_net_fd_recv(char *err, int fd, uint64_t deadline_ns, int *passed, int n);
/* The address the hub binds and advertises: the interface ah_coord_if_choose picks from this host's
 * interfaces for `ifname` (AUTOHA_COORD_IFNAME; NULL or "" for NCCL's default order), or 127.0.0.1
 * when none has a usable address. Writes the interface's name into name (len bytes; "" for the
 * fallback). Returns 0, or -1 when ifname was given and matched no interface: the default order
 * chose instead (the caller logs it). */
int ah_coord_net_host_addr(const char *ifname, struct sockaddr_storage *ss_p, socklen_t *len_p,
                           char *name, size_t len);

/* ---- interface choice (ah_coord_ifname.c) ---- */
/* One address of one interface, as getifaddrs lists them. */
typedef struct {
  const char *name;            /* "eth0" */
  int family;                  /* AF_INET, AF_INET6 (others are never chosen) */
  int up;                      /* IFF_UP */
  const struct sockaddr *addr; /* NULL: the interface has no address of this entry */
} ah_coord_if_t;

/* Whether interface `name` is selected by a non-empty NCCL_SOCKET_IFNAME-style spec: comma-separated
 * name prefixes; a leading '^' selects every name but those; a '=' (after the '^', if any) makes the
 * names exact. Returns 1 or 0. */
int ah_coord_if_match(const char *name, const char *spec);
/* The entry whose address the hub uses: with a spec, the first up entry with a usable address (IPv4,
 * or IPv6 but link-local) whose name the spec selects; without one (NULL or ""), NCCL's order — the
 * first such entry named ib*, else one not docker* or lo*, else docker*, else lo*. Returns its
 * index, or -1 when none qualifies. */
int ah_coord_if_choose(const ah_coord_if_t *ifs, int n, const char *spec);
/* Raises RLIMIT_NOFILE's soft limit to `want` (or the hard limit). Returns the new soft limit. */
long ah_coord_net_nofile_raise(long want);

/* ---- wire format (ah_coord_proto.c); see docs/coordinator.md ---- */
#define AH_COORD_PROTO_VERSION                                                                     \
  11 /* 5: the directory's messages (DIR_PUT, DIR_GET, DIR_VAL) and the
                                  * shortest search durations (SEARCH_TIME, MIN_TIME); 6: the host
                                  * relay's channels (RELAY_OPEN, RELAY_DATA, RELAY_CLOSE); 7: the
                                  * directory's DIR_ABSENT; 8: the connections' LINK_QP and
                                  * LINK_RATES, and BYE; 9: the straggler AUDIT; 10: NIC_PORT;
                                  * 11: RECONNECT */
#define AH_COORD_HDR_BYTES 8
/* The directory's fixed parts: DIR_PUT key[32] vlen u16; DIR_GET req u64 timeout_ms u32 key[32];
 * DIR_VAL req u64 key[32] vlen u16, each followed by vlen (<= AH_COORD_DIR_VAL_MAX) value bytes;
 * DIR_ABSENT req u64 key[32]. */
#define AH_COORD_DIR_PUT_FIXED (AH_COORD_DIR_KEY + 2)
#define AH_COORD_DIR_GET_BYTES (8 + 4 + AH_COORD_DIR_KEY)
#define AH_COORD_DIR_VAL_FIXED (8 + AH_COORD_DIR_KEY + 2)
#define AH_COORD_DIR_ABSENT_BYTES (8 + AH_COORD_DIR_KEY)
/* Bound on the payload of any message a client and the hub exchange: the largest is a DIR_VAL with
 * the largest value (554). */
#define AH_COORD_MAX_INNER (AH_COORD_DIR_VAL_FIXED + AH_COORD_DIR_VAL_MAX)
/* Bound on any length prefix: a RELAY_DATA carrying the largest message (chan u32 + frame: 566). */
#define AH_COORD_RELAY_FIXED 4
#define AH_COORD_MAX_PAYLOAD (AH_COORD_RELAY_FIXED + AH_COORD_HDR_BYTES + AH_COORD_MAX_INNER)
#define AH_COORD_NONCE_BYTES 32
#define AH_COORD_MAC_BYTES 32

enum {
  AH_MSG_HELLO = 1,      /* hub -> client: nonce_h[32] */
  AH_MSG_AUTH = 2,       /* client -> hub: nonce_c[32] client_id u64 mac[32] */
  AH_MSG_WELCOME = 3,    /* hub -> client: mac[32] last_pub u64 */
  AH_MSG_JOIN = 4,       /* client -> hub: comm u64 nranks u32 rank u32 since u64 digest u64[3] */
  AH_MSG_LEAVE = 5,      /* client -> hub: comm u64 */
  AH_MSG_PUBLISH = 6,    /* client -> hub: pub_seq u64 key seg */
  AH_MSG_ACK = 7,        /* hub -> client: pub_seq u64 */
  AH_MSG_SEGMENT = 8,    /* hub -> client: seq u64 key seg */
  AH_MSG_PING = 9,       /* client -> hub: empty */
  AH_MSG_PONG = 10,      /* hub -> client: empty */
  AH_MSG_VERDICT = 11,   /* hub -> client: comm u64 verdict u32 (AH_COORD_VERDICT_*) mask u32
                        * ref_rank u32 first_rank u32 ndiffer u32 (MISMATCH's evidence, else 0) */
  AH_MSG_DELIVERED = 12, /* client -> hub: comm u64 seq u64 (every segment up to seq delivered) */
  AH_MSG_PROGRESS =
      13,              /* client -> hub: comm u64 record[AH_HEALTH_REC_BYTES] (ah_coord_health.h) */
  AH_MSG_FINDING = 14, /* hub -> client: comm u64 finding[AH_FINDING_BYTES] (ah_coord_health.h) */
  AH_MSG_STATUS = 15,  /* client -> hub: empty (autoha status) */
  AH_MSG_STATUS_COMM = 16, /* hub -> client: ah_status_comm_t (ah_coord_status.h) */
  AH_MSG_STATUS_RANK = 17, /* hub -> client: ah_status_rank_t */
  AH_MSG_STATUS_END = 18,  /* hub -> client: count u32 (communicators sent) */
  AH_MSG_SAMPLES =
      19, /* client -> hub: comm u64 samples[AH_HEALTH_SAMPLES_BYTES] (ah_coord_health.h) */
  AH_MSG_DIR_PUT = 20, /* client -> hub: key[32] vlen u16 val[vlen] */
  AH_MSG_DIR_GET = 21, /* client -> hub: req u64 timeout_ms u32 key[32] */
  AH_MSG_DIR_VAL = 22, /* hub -> client: req u64 key[32] vlen u16 val[vlen] (the answer to req) */
  AH_MSG_SEARCH_TIME = 23, /* client -> hub: comm u64 rank u32 coll u8 bin u8 index u64 us f32 */
  AH_MSG_MIN_TIME =
      24, /* hub -> leader: comm u64 coll u8 bin u8 index u64 us f32 reported u32 nranks u32 */
  /* A host's relay (docs/coordinator.md "Host relay"): one authenticated connection carries the
   * connections of the other processes of its host as numbered channels. */
  AH_MSG_RELAY_OPEN =
      25, /* relay -> hub: chan u32 (a local process connected; the hub greets it) */
  AH_MSG_RELAY_DATA = 26,  /* both: chan u32 frame (one whole frame of that channel's connection) */
  AH_MSG_RELAY_CLOSE = 27, /* both: chan u32 (that channel's connection ended) */
  AH_MSG_DIR_ABSENT = 28,  /* hub -> client: req u64 key[32] (req's key is not stored as the hub
                            * reads the DIR_GET; a DIR_VAL follows if a put comes within its wait) */
  /* The slow-link diagnosis (ah_coord_link.h): a process's queue pairs, and their windows. */
  AH_MSG_LINK_QP = 29,    /* client -> hub: pid u32 count u8 qp[AH_LINK_QPS] */
  AH_MSG_LINK_RATES = 30, /* client -> hub: pid u32 count u8 rate[AH_LINK_RATES] */
  AH_MSG_BYE = 31,   /* both: empty. client -> hub: the process exits (its connection closing next
                    * is no death, docs/diagnosis.md), answered by a BYE once what the hub sent
                    * before has gone; hub -> client: the hub's process exits */
  AH_MSG_AUDIT = 32, /* hub -> client: comm u64 audit[AH_AUDIT_BYTES] (ah_coord_audit.h): time
                      * these calls of these keys */
  AH_MSG_NIC_PORT = 33,  /* client -> hub: nic[AH_NIC_PORT_BYTES] (ah_coord_nic.h): a port of a NIC
                         * the process opened went down or came back */
  AH_MSG_RECONNECT = 34, /* client -> hub: empty. This connection closes next and the process
                          * connects again (a cut it asked for): its close is no death */
  AH_MSG_MAX = 34
};

#define AH_COORD_KEYSEG_BYTES (16 + 8 + 8 + 1 + 1 + 4 + 4 * 8 + 4) /* key + segment, packed: 74 */

typedef struct {
  uint32_t len; /* payload bytes */
  uint8_t version, type;
  uint16_t reserved;
} ah_coord_hdr_t;

/* Bound on a communicator's rank count in a JOIN: the hub keeps one bit per rank (128 KiB at most). */
#define AH_COORD_MAX_RANKS (1u << 20)
/* The rank of a JOIN that subscribes without joining a rank (ah_coord_join). */
#define AH_COORD_NO_RANK 0xffffffffu

/* Encodes a header into out[8]. */
void ah_coord_hdr_encode(uint8_t type, uint32_t len, uint8_t out[AH_COORD_HDR_BYTES]);
/* Decodes and checks a header: version, type, reserved bits and length bound (per type). Returns 0,
 * or -1 with a reason in err naming the offending value. */
int ah_coord_hdr_decode(const uint8_t in[AH_COORD_HDR_BYTES], ah_coord_hdr_t *h_p, char *err,
                        size_t errlen);
/* Exact payload length each type must have; for the types whose payload ends in a value
 * (DIR_PUT, DIR_VAL), the least (no value). */
uint32_t ah_coord_msg_len(uint8_t type);
/* SEARCH_TIME and MIN_TIME: pack and unpack. unpack refuses (-1, err naming it) a collective or bin
 * out of range or a negative or non-finite duration. */
typedef struct {
  uint64_t comm;
  uint32_t rank; /* SEARCH_TIME: the reporting rank */
  uint8_t coll, bin;
  uint64_t index;
  float us;
  uint32_t reported, nranks; /* MIN_TIME: ranks whose durations the minimum is over, of nranks */
} ah_coord_time_t;
void ah_coord_time_pack(uint8_t type, const ah_coord_time_t *t, uint8_t *out);
int ah_coord_time_unpack(uint8_t type, const uint8_t *in, ah_coord_time_t *t_p, char *err,
                         size_t errlen);
/* The value length a DIR_PUT or DIR_VAL frame of payload length len declares at offset `at`, when
 * it matches the bytes the frame carries. Returns it, or -1 with err naming the mismatch. */
int ah_coord_dir_vlen(const uint8_t *p, uint32_t len, uint32_t at, char *err, size_t errlen);

void ah_coord_put_u64(uint8_t *p, uint64_t v);
uint64_t ah_coord_get_u64(const uint8_t *p);
/* FNV-1a over n bytes from h (AH_COORD_FNV_BASIS to start one): the stamp's checksum, the hub's
 * link ids, the client's digests of findings. Not a MAC: nothing secret rests on it. */
#define AH_COORD_FNV_BASIS 0xcbf29ce484222325ull
uint64_t ah_coord_fnv64(const void *p, size_t n, uint64_t h);
void ah_coord_put_u32(uint8_t *p, uint32_t v);
uint32_t ah_coord_get_u32(const uint8_t *p);
void ah_coord_put_u16(uint8_t *p, uint16_t v);
uint16_t ah_coord_get_u16(const uint8_t *p);
/* Whether the n bytes at p are all zero (a record's unused slots must be). */
int ah_coord_zero(const uint8_t *p, size_t n);

/* Packs/unpacks (key, segment) in AH_COORD_KEYSEG_BYTES; unpack validates ranges (ndims,
 * algo/proto/source, coll) and returns -1 with a reason for a value no leader would send. */
void ah_coord_keyseg_pack(const ah_key_t *k, const ah_segment_t *s, uint8_t *out);
int ah_coord_keyseg_unpack(const uint8_t *in, ah_key_t *k_p, ah_segment_t *s_p, char *err,
                           size_t errlen);

/* HMAC-SHA256(secret, label || a || b || u64) — the two proofs of the handshake. Returns 0 or -1. */
int ah_coord_mac(const uint8_t secret[16], const char *label, const uint8_t a[32],
                 const uint8_t b[32], uint64_t v, uint8_t out[32]);
/* Constant-time equality of two MACs: 1 when equal. */
int ah_coord_mac_equal(const uint8_t a[32], const uint8_t b[32]);
/* Prepares the handshake's cryptography: marks the process exiting from an atexit handler
 * (idempotent; before the first hub or client). */
void ah_coord_crypto_init(void);
/* 1 once the process is exiting: its threads may be torn down, so no handshake is started or
 * answered (ah_coord_mac and ah_coord_random then fail). */
int ah_coord_exiting(void);
/* Fills buf with cryptographically random bytes. Returns 0 or -1. */
int ah_coord_random(void *buf, size_t n);

/* ---- a client's handshake (ah_coord_dial.c) ---- */
/* Connects to the hub at sa and runs the handshake with the job secret as client_id, all within
 * connect_ms. Returns 0 with *fd_p (blocking mode as connected) and *last_pub_p, or -1 with err
 * filled (when the connection itself failed, errno is its error). The hub proves it knows the secret too (WELCOME carries its own MAC over both nonces),
 * so a client never takes anything from an impostor. relay_fds: NULL when sa is the hub; when sa is
 * a host relay, the AH_COORD_RELAY_FDS descriptors it passes right behind the hub's WELCOME (its
 * doorbell, then this process's ring; docs/coordinator.md "Host relay") are returned there. */
#define AH_COORD_RELAY_FDS 2
int ah_coord_dial(const struct sockaddr *sa, socklen_t sl, const uint8_t secret[16],
                  uint64_t client_id, int connect_ms, int *fd_p, int *relay_fds,
                  uint64_t *last_pub_p, char *err, size_t errlen);

/* ---- hub (ah_coord_hub.c) ---- */
typedef struct ah_coord_hub ah_coord_hub_t;

typedef struct {
  int auth_ms;       /* an unauthenticated connection must finish the handshake within this */
  int frame_ms;      /* a started frame must complete within this */
  int idle_ms;       /* an authenticated connection silent this long is dropped */
  int max_pending;   /* unauthenticated connections held at once; the oldest is dropped beyond */
  size_t max_outbuf; /* bytes queued to one client before it is dropped as a slow reader */
  size_t max_outbuf_job; /* bytes of every connection's send buffer together: beyond, the
                          * connection with the most queued is dropped */
  int join_ms;           /* a communicator not joined by all its ranks this long after its first
                        * join is ABANDONED (AUTOHA_COORD_JOIN_S) */
  /* What authenticated clients make the hub keep for the job — communicators and their members,
   * rank bitmaps, retained segments, progress and straggler slots, search calls being gathered,
   * queue pairs, directory entries and waiters — grows with the job, bounded by one memory budget
   * (AUTOHA_HUB_MEM_MB; ah_coord_hub_mem.c). What does not fit is refused with one line: a
   * communicator or JOIN gets an ABANDONED verdict (NCCL's own choices), a segment is acknowledged
   * but neither stored nor forwarded, progress is not diagnosed. One client (id) is bounded on its
   * own besides, so that it cannot take the budget from the others. */
  size_t mem_bytes;
  int max_client_comms;         /* communicators one client created */
  int max_client_pending_joins; /* joined, no verdict yet, started by one client */
  size_t max_client_segments;   /* segments of one client retained */
  int hang_ms;            /* a communicator whose ranks all stopped advancing this long is diagnosed
                        * (AUTOHA_HANG_S); <= 0: never */
  double straggler_pct;   /* a rank late by more than this % of its calls' time is flagged
                         * (AUTOHA_STRAGGLER_PCT); <= 0: stragglers are not looked for */
  int straggler_audit_ms; /* each communicator's busiest keys are timed call by call this often
                           * (AUTOHA_STRAGGLER_AUDIT_S, ah_coord_audit.h); <= 0: never */
  double slow_link_pct;   /* a connection under this % of the median connection's rate is slow
                         * (AUTOHA_SLOW_LINK_PCT); <= 0: links are not diagnosed */
  /* The key/value directory: bytes of stored entries (key, value and 64 bytes of bookkeeping
   * each) per client id, and DIR_GETs waiting per connection (the job's within mem_bytes). A put
   * beyond a bound is refused (one log line), a get beyond one is dropped (its caller times out). */
  size_t max_client_dir_bytes;
  int max_conn_dir_waits;
  /* The shortest search duration across ranks (SEARCH_TIME -> MIN_TIME): a call's minimum goes to
   * the leader once every rank reported it or gather_ms after the first did; calls being gathered
   * are bounded per communicator (and the job's within mem_bytes; beyond, a call's reports are
   * dropped). */
  int gather_ms;
  int max_comm_gathers;
  const char *ifname; /* AUTOHA_COORD_IFNAME: the interface to bind and advertise when no
                         * address is given; NULL: NCCL's default order */
} ah_coord_hub_opts_t;

void ah_coord_hub_opts_default(ah_coord_hub_opts_t *o_p);
/* Opens a hub listening on `addr` ("host:port", port 0 = any; NULL = this host's address) with the
 * given secret and starts its thread. Fills stamp_p. Returns the hub, or NULL after logging. */
ah_coord_hub_t *ah_coord_hub_open(const char *addr, const uint8_t secret[16],
                                  const ah_coord_hub_opts_t *opts, ah_coord_stamp_t *stamp_p);
/* Stops the thread, closes every connection and frees the hub. */
void ah_coord_hub_close(ah_coord_hub_t *h);
/* Number of authenticated connections (tests). */
int ah_coord_hub_clients(ah_coord_hub_t *h);
/* Number of PINGs the hub has answered (tests). */
int ah_coord_hub_pings(ah_coord_hub_t *h);
/* Segments the hub keeps for replay, all communicators: those some member has not yet reported
 * delivered (for tests and benchmarks). */
size_t ah_coord_hub_retained(ah_coord_hub_t *h);
/* Bytes the job's tables hold charged to the hub's memory budget now (and their peak at *peak_p
 * when not NULL; for tests and benchmarks). */
size_t ah_coord_hub_mem_held(ah_coord_hub_t *h, size_t *peak_p);
/* PROGRESS and SAMPLES records the hub has handled (bench/coord_scale). */
uint64_t ah_coord_hub_records(ah_coord_hub_t *h);
/* The most bytes every connection's send buffers have held together (for tests). */
size_t ah_coord_hub_buffered_peak(ah_coord_hub_t *h);
/* The fan-out times of the hub's last publishes, oldest first: from the PUBLISH frame's arrival to
 * its SEGMENT handed to the last subscriber's socket (wall clock, ns) and the hub thread's CPU time
 * in those sends (cpu_ns). Copies at most max of each; returns how many (bench/coord_scale, to tell
 * the hub's share of a delivery from the clients', and its cost from its wait for a CPU). */
int ah_coord_hub_fanout(ah_coord_hub_t *h, uint64_t *ns, uint64_t *cpu_ns, int max);

/* ---- client (ah_coord_client.c) ---- */
typedef struct {
  int connect_ms;    /* connect + handshake deadline */
  int heartbeat_ms;  /* PING when nothing was sent for this long */
  int dead_ms;       /* nothing received for this long: connection lost */
  int reconnect_ms;  /* keep trying to reconnect for this long, then the hub is gone */
  int relay;         /* 1: share one connection to the hub per host (AUTOHA_COORD_RELAY;
                        * docs/coordinator.md "Host relay"); 0: connect directly */
  char host[64];     /* the host's identity for the relay's endpoint ("" = the hostname);
                        * bench/coord_scale and tests simulate hosts with it */
  int relay_lazy_ms; /* as the relay: how long segments may sit unread in a local process's ring
                        * before the doorbell wakes it for them (a rank waiting for one takes it
                        * itself, ah_coord_poll) */
} ah_coord_client_opts_t;

void ah_coord_client_opts_default(ah_coord_client_opts_t *o_p);
/* A new client (not shared with ah_coord_connect's): connects to `addr` when non-NULL, else to the
 * stamp's address. Returns NULL after logging. */
/* The hub's address a stamp names, as a socket address (ah_coord_stamp.c). */
void ah_coord_stamp_sockaddr(const ah_coord_stamp_t *st, struct sockaddr_storage *ss,
                             socklen_t *sl);
ah_coord_t *ah_coord_client_open(const ah_coord_stamp_t *stamp, const char *addr,
                                 const ah_coord_client_opts_t *opts, ah_coord_deliver_fn deliver,
                                 void *arg);
void ah_coord_client_close(ah_coord_t *c);
/* Cuts the current connection (fault tests); the client reconnects as after a network cut. */
void ah_coord_client_cut(ah_coord_t *c);
/* Publishes not yet acknowledged by the hub (tests). */
size_t ah_coord_client_unacked(ah_coord_t *c);
/* Connections made so far, the first included (tests). */
int ah_coord_client_connects(ah_coord_t *c);
/* Findings the hub sent this client (each logged). */
int ah_coord_client_findings(ah_coord_t *c);
/* This client's place in its host's relay (tests): 2 it is the relay, 1 its connection goes
 * through another process's relay, 0 it is connected directly (or the relay is off). */
int ah_coord_client_relay_role(ah_coord_t *c);
/* Times this relay found a local process's ring full and kept the rest of its bytes (tests). */
int ah_coord_client_ring_waits(ah_coord_t *c);
/* The host relay endpoint this client elects on (tests): fills *ss_p and *len_p. Returns 0, or -1
 * when its relay is off. */
int ah_coord_client_relay_endpoint(ah_coord_t *c, struct sockaddr_storage *ss_p, socklen_t *len_p);

#endif
