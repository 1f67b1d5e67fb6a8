/* ah_coord_hub_internal.h: the hub's state and the functions its three files share —
 * ah_coord_hub_conn.c (connections: the rate-limited refusal log, write queues, the pending list,
 * closing, admitting) < ah_coord_hub_mem.c (the memory budget every table is charged to) <
 * ah_coord_hub_relay.c (a host relay's channels) < ah_coord_hub_comm.c (communicators: creation under caps, JOIN and its verdict,
 * settings digests, LEAVE, PUBLISH and the retained segments) < ah_coord_hub_gather.c (the shortest
 * search durations across ranks) < ah_coord_hub_dir.c (the key/value
 * directory: DIR_PUT, DIR_GET and their waiters) < ah_coord_hub.c (the handshake, frame
 * dispatch, reading, accepting, the sweep, the epoll loop, open/close/start). Internal to
 * coordinator/. */
#ifndef AH_COORD_HUB_INTERNAL_H
#define AH_COORD_HUB_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "ah_coord_internal.h"
#include "ah_coord_straggler.h"
#include "ah_uthash.h"

#define FRAME_SEGMENT_BYTES (AH_COORD_HDR_BYTES + 8 + AH_COORD_KEYSEG_BYTES)
#define HUB_TICK_MS 50

typedef struct hub_conn {
  int fd;
  int authed;
  int closing;
  char peer[64];
  uint8_t nonce[AH_COORD_NONCE_BYTES];
  uint64_t client_id; /* set at AUTH */
  uint64_t accepted_ns, frame_start_ns, last_rx_ns;
  uint8_t rbuf[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  size_t rlen;
  uint32_t need; /* bytes of the current frame, header included; 0 until the header is decoded */
  uint8_t *wbuf;
  size_t woff, wlen, wcap;
  int want_out;
  uint64_t *comms;
  int ncomms, capcomms;
  struct hub_conn *prev, *next; /* pending (unauthenticated) list, oldest first */
  struct hub_conn *close_next;
  struct hub_dir_wait *dir_waits; /* its DIR_GETs waiting for a put (ah_coord_hub_dir.c) */
  int ndir_waits;
  /* A host relay's channel (ah_coord_hub_relay.c): via is the relay's connection that carries it
   * (fd -1, whole frames only); a relay's connection lists its open channels. */
  struct hub_conn *via;
  uint32_t chan;
  struct hub_conn **chans;
  int nchans, capchans;
  int dirty;              /* bytes queued, to be sent at the end of the loop's turn */
  uint64_t bye_answer_ns; /* when to answer its BYE (0: no answer due) */
  int eof; /* its peer closed it (end of file, a reset, or its relay's RELAY_CLOSE): the process
              * exited, unless it said goodbye; a connection the hub closes may come back */
  int reconnecting; /* its client said it closes this connection to connect again (RECONNECT) */
  struct hub_conn *dirty_next;
} hub_conn_t;
/* Channels one relay may carry: a host's processes (8 GPUs, or a few hundred threads' worth). */
#define HUB_RELAY_CHANS 256

/* The ranks of a communicator that joined with one settings digest. */
typedef struct {
  ah_coord_digest_t d;
  uint32_t n, min_rank;
} hub_digest_t;
/* Distinct digests kept per communicator: a job has one, a job with a stray setting two or three. */
#define HUB_DIGESTS 8

/* A client (one process) that joined a communicator, and the last segment it reported delivered
 * (its JOIN's "since", then DELIVERED). It stays a member after its connection drops: it may
 * reconnect and ask for what it has not delivered. */
typedef struct {
  uint64_t client_id;
  uint64_t delivered;
  int left; /* it sent LEAVE: its last local rank of the communicator is destroyed */
} hub_member_t;
/* Members a communicator may have beyond its rank count (subscribe-only joins): a cap, since
 * each is kept for the job's life. */
#define HUB_MEMBERS_SPARE 16

/* A rank's latest progress record (diagnosis), and where it runs. */
typedef struct {
  ah_health_rec_t rec;
  int have;
  uint64_t rx_ns; /* when it arrived */
  char host[64];
  uint64_t client_id; /* the process that sends it */
  uint64_t gone_ns;   /* when that process's last connection closed without a goodbye (0: none) */
  uint64_t gone_grace_ns; /* how long it may take to come back before it is dead */
  int left; /* that process left the communicator or said goodbye: no finding about it */
  int said; /* AH_FINDING_DIED or _STOPPED once said about this rank (0: nothing) */
} hub_prog_t;

typedef struct {
  uint64_t comm;
  uint64_t owner;         /* client id whose JOIN or PUBLISH created it: charged for it */
  uint64_t pending_by;    /* client id charged for its pending join (the bitmap's allocation) */
  uint32_t nranks;        /* from the first JOIN; 0 while only publishes named the comm */
  uint32_t njoined;       /* distinct ranks joined */
  uint8_t *joined;        /* one bit per rank */
  uint64_t first_join_ns; /* the join deadline (join_ms) runs from here */
  int verdict;            /* AH_COORD_VERDICT_*, decided once and never changed */
  hub_digest_t dg[HUB_DIGESTS]; /* the distinct settings digests its ranks joined with */
  int ndg;
  hub_digest_t dg_more;   /* ranks whose digest did not fit in dg[] (n 0: none) */
  ah_coord_mismatch_t mm; /* MISMATCH's evidence, set when it is decided */
  /* The SEGMENT frames still retained: frames[i] has seq frame_base + i + 1 and was published by
   * client frame_pub[i]. Those every member has delivered are dropped (hub_comm_trim). */
  uint8_t (*frames)[FRAME_SEGMENT_BYTES];
  uint64_t *frame_pub;
  size_t nframes, capframes;
  uint64_t frame_base;
  hub_member_t *members; /* every client id that joined it, with what it has delivered */
  int nmembers, capmembers;
  hub_conn_t **subs;
  int nsubs, capsubs;
  /* Diagnosis (ah_coord_hub_health.c): every rank's latest record once it is COMPLETE, when any
   * rank's calls last advanced, and the kind of the finding sent for the current stall (0: none). */
  hub_prog_t *prog;
  ah_strag_t *strag;    /* its ranks' lateness (ah_coord_straggler.c), from their SAMPLES */
  size_t strag_charged; /* of strag, what is charged to the memory budget */
  int strag_off;        /* the budget refused strag's growth: stragglers not looked for */
  int prog_off;         /* the budget refused prog: the communicator is not diagnosed */
  uint64_t audit_ns;    /* its next straggler audit (ah_coord_hub_audit.c; 0: not scheduled yet) */
  uint64_t advanced_ns;
  uint64_t recheck_ns; /* a stall that showed no hang is looked at again from here */
  int finding;
  char finding_text[AH_HEALTH_TEXT];
  /* the finding standing for the current stall, told again to a process that joins while it stands
   * (one whose connection was lost as it was sent: its host relay's process was the one that died);
   * NULL: none. Charged to the memory budget. */
  ah_finding_t *standing;
  hub_conn_t *leader; /* the connection that joined rank 0: MIN_TIMEs go there (NULL: none now) */
  struct hub_link_comm *link; /* its connections' matrix (ah_coord_hub_link.c), NULL: none yet */
  struct hub_nic *nic;        /* its NIC ports standing down (ah_coord_hub_nic.c), NULL: none yet */
  struct hub_gather
      *gather; /* search calls whose durations are being gathered (ah_coord_hub_gather.c) */
  int ngather;
  UT_hash_handle hh;
} hub_comm_t;

typedef struct {
  uint64_t id;
  uint64_t last_pub;
  int ncomms;       /* communicators this client created */
  int npending;     /* of the pending joins, those this client started */
  size_t nframes;   /* segments of this client retained */
  size_t dir_bytes; /* directory bytes charged to it (the entries it wrote last) */
  int nconns;       /* its authenticated connections now open */
  int bye;          /* it said goodbye (BYE): it exits, its connections closing are no death */
  UT_hash_handle hh;
} hub_client_t;

/* Rate limit of one kind of refusal: 5 lines a second, then a count of what was suppressed. */
typedef struct {
  uint64_t window_ns;
  int n;
  int suppressed;
} hub_rate_t;

enum {
  RATE_RELAY,
  RATE_AUTH,
  RATE_FRAME,
  RATE_TIMEOUT,
  RATE_FLOOD,
  RATE_CLOSED,
  RATE_SLOW,
  RATE_ACCEPT,
  RATE_CAP_COMM,
  RATE_CAP_JOIN,
  RATE_CAP_SEGMENT,
  RATE_VERDICT,
  RATE_REPLAY,
  RATE_DELIVERED,
  RATE_PROGRESS,
  RATE_DIR,
  RATE_GATHER,
  RATE_LINK,
  RATE_N
};

struct ah_coord_hub {
  int lfd, epfd, efd, spare_fd;
  pthread_t thr;
  atomic_int stop;
  atomic_int bye; /* 1: the process exits, say goodbye to every client; 2: said */
  atomic_int nclients;
  atomic_int npings; /* PINGs answered (tests) */
  uint8_t secret[16];
  ah_coord_hub_opts_t o;
  char addr[96];
  hub_conn_t *pend_head, *pend_tail;
  int npending;
  hub_conn_t **all; /* every open connection, for the sweep */
  int nall, capall;
  hub_conn_t *close_list;
  hub_conn_t
      *dirty_list; /* relay connections with channel frames queued (ah_coord_hub_flush_dirty) */
  hub_comm_t *comms;
  int ncomms;              /* communicators */
  size_t mem_bytes;        /* charged to the memory budget (ah_coord_hub_mem.c) */
  _Atomic size_t mem_seen; /* the same, for other threads, and its peak */
  _Atomic size_t mem_peak;
  _Atomic uint64_t nrecords;   /* PROGRESS and SAMPLES records handled (bench/coord_scale) */
  size_t wbuf_bytes;           /* bytes allocated to every connection's send buffer */
  _Atomic size_t wbuf_peak;    /* the most wbuf_bytes has been, for other threads */
  size_t nframes;              /* segments retained, all communicators */
  _Atomic size_t nframes_seen; /* the same, for other threads (ah_coord_hub_retained) */
  hub_client_t *clients;
  hub_rate_t rate[RATE_N];
  uint64_t last_tick_ns, stall_ns; /* the health tick's last run; when the loop last stalled 1 s */
  uint64_t loop_ns;                /* when the loop last went to wait for events */
  /* How long each PUBLISH's fan-out took (from its frame's arrival to the last subscriber's send)
   * and the hub thread's CPU time in its sends, a ring of the last HUB_FAN_RING, for
   * bench/coord_scale (ah_coord_hub_fanout). */
#define HUB_FAN_RING 1024
  _Atomic uint64_t fan_ns[HUB_FAN_RING];
  _Atomic uint64_t fan_cpu_ns[HUB_FAN_RING];
  _Atomic uint32_t nfan;
  uint64_t frame_rx_ns;  /* when the frame being handled was read */
  struct hub_dir *dir;   /* the directory: stored keys, and keys someone waits for */
  size_t dir_bytes;      /* bytes charged for stored entries, all clients */
  int ndir_waits;        /* DIR_GETs waiting, all connections */
  int ngather;           /* search calls being gathered, all communicators */
  struct hub_link *link; /* the job's queue pairs (ah_coord_hub_link.c), NULL: none yet */
};

/* ---- ah_coord_hub_conn.c ---- */

/* Logs a refusal of a kind, at most 5 lines a second per kind, then a count of the rest. */
void ah_coord_hub_refuse(ah_coord_hub_t *h, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Closes a kind's one-second window once it has passed, logging what it suppressed. */
void ah_coord_hub_rate_roll(ah_coord_hub_t *h, hub_rate_t *r, uint64_t now);
void ah_coord_hub_pend_unlink(ah_coord_hub_t *h, hub_conn_t *c); /* off the unauthenticated list */
void ah_coord_hub_conn_close_later(ah_coord_hub_t *h,
                                   hub_conn_t *c);          /* closed at the loop's next turn */
void ah_coord_hub_comm_unsub(hub_comm_t *m, hub_conn_t *c); /* c no longer receives m's segments */
void ah_coord_hub_close_pending(ah_coord_hub_t *h);         /* frees what close_later marked */
void ah_coord_hub_conn_flush(ah_coord_hub_t *h, hub_conn_t *c); /* writes what the socket takes */
/* Queues bytes for c (dropping c once max_outbuf bytes wait for it), or a framed message. */
void ah_coord_hub_conn_send(ah_coord_hub_t *h, hub_conn_t *c, const void *buf, size_t n);
void ah_coord_hub_conn_send_msg(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type,
                                const uint8_t *payload, uint32_t len);
/* Sends what channels queued on their relays' connections: one send(2) per relay for all the frames
 * of a fan-out. Called after each fan-out and at the end of every turn of the loop. */
void ah_coord_hub_flush_dirty(ah_coord_hub_t *h);
/* Takes a new connection (c->fd, peer, nonce set; a channel's via and chan too) into the hub's
 * lists, drops the oldest unauthenticated one beyond max_pending, and greets it with HELLO.
 * Returns 0, or -1 (out of memory; logged) with c untouched for the caller to free. */
int ah_coord_hub_conn_admit(ah_coord_hub_t *h, hub_conn_t *c);

/* ---- ah_coord_hub_mem.c ---- */

/* Charges bytes the caller is about to allocate for the job's tables. Returns 0, or -1 (nothing
 * charged) when they would take the hub past o.mem_bytes: the caller refuses what needed them. */
int ah_coord_hub_mem_take(ah_coord_hub_t *h, size_t bytes);
/* Gives back bytes taken (their table entry is freed). */
void ah_coord_hub_mem_give(ah_coord_hub_t *h, size_t bytes);
/* The one line for what did not fit (rate-limited per kind, like every refusal): the formatted
 * thing refused, its size, the budget and what held, and `instead` (what runs in its place). */
void ah_coord_hub_mem_refuse(ah_coord_hub_t *h, int kind, size_t bytes, const char *instead,
                             const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* ---- ah_coord_hub_relay.c ---- */

/* Handles a relay's RELAY_OPEN and RELAY_CLOSE. For a RELAY_DATA, returns the channel it is for
 * with its inner frame checked (type, payload and length set), for the caller to handle as if the
 * channel's own socket had carried it; NULL when there is nothing to handle (a channel already
 * closed, or a frame refused: logged, the channel or the relay dropped). */
hub_conn_t *ah_coord_hub_relay_on_frame(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type,
                                        const uint8_t *p, uint32_t len, uint8_t *itype_p,
                                        const uint8_t **ip_p, uint32_t *ilen_p);

/* ---- ah_coord_hub_comm.c ---- */

hub_client_t *ah_coord_hub_client_find(ah_coord_hub_t *h, uint64_t id);
/* Found or created (charged to the memory budget); NULL, logged, when the budget or memory has no
 * room for it. */
hub_client_t *ah_coord_hub_client_get(ah_coord_hub_t *h, uint64_t id, const char *peer);
void ah_coord_hub_verdict_decide(ah_coord_hub_t *h, hub_comm_t *m, int verdict);
/* Frees a communicator (every member left it, or the hub closes) and gives back what it was
 * charged: its creator's and the job's count, its retained frames (to their publishers), its
 * progress and straggler slots, its pending join and rank bitmap. Nothing outlives the hub loop's
 * step that calls this: the link and gather passes build their references to communicators afresh
 * at each tick. */
void ah_coord_hub_comm_free(ah_coord_hub_t *h, hub_comm_t *m);
void ah_coord_hub_on_join(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p);
void ah_coord_hub_on_leave(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p);
void ah_coord_hub_on_publish(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p);
void ah_coord_hub_on_delivered(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                               const uint8_t *p);

/* ---- ah_coord_hub_gather.c ---- */

/* A rank's duration of a search call: kept as the call's minimum so far; the minimum goes to the
 * leader's connection once every rank reported (MIN_TIME). */
void ah_coord_hub_on_search_time(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                                 const uint8_t *p);
/* Sends the minimum of every call first reported gather_ms ago or more (each tick). */
void ah_coord_hub_gather_tick(ah_coord_hub_t *h, uint64_t now);
/* Frees a communicator's calls being gathered (hub close). */
void ah_coord_hub_gather_free(ah_coord_hub_t *h, hub_comm_t *m);

/* ---- ah_coord_hub_dir.c ---- */

/* Stores a DIR_PUT's value (replacing the key's) and answers every DIR_GET waiting for the key;
 * refused with one log line (the message dropped, the connection kept) when malformed or beyond the
 * directory's bounds. len is the payload's length. */
void ah_coord_hub_on_dir_put(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p,
                             uint32_t len);
/* Answers a DIR_GET at once when the key is stored, else keeps it until a put or its timeout. */
void ah_coord_hub_on_dir_get(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p);
/* Forgets the waiters of a connection being closed (before it is freed). */
void ah_coord_hub_dir_conn_gone(ah_coord_hub_t *h, hub_conn_t *c);
/* Forgets waiters whose timeout passed (each tick). */
void ah_coord_hub_dir_tick(ah_coord_hub_t *h, uint64_t now);
/* Frees the whole directory (hub close). */
void ah_coord_hub_dir_free(ah_coord_hub_t *h);

/* ---- ah_coord_hub_nic.c ---- */

/* A process's NIC_PORT: a port of a NIC it opened went down (the ranks of its queue pairs on the
 * port are named to every communicator they are in) or came back. A malformed one is refused by
 * name and the connection dropped. */
void ah_coord_hub_on_nic_port(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p);
/* m's NIC-down finding for autoha status while a port of it is down: AH_FINDING_NIC_DOWN with the
 * text — the finding's own line for one port, a line naming each port and its ranks for several
 * ("NIC down on comm C: 2 ports down: rank R (place)'s NIC D port N; ...", "+K more" past the
 * bound) — or 0 (none). */
int ah_coord_hub_nic_status(const hub_comm_t *m, char *text, size_t len);
/* Frees m's NIC-down state (with m). */
void ah_coord_hub_nic_comm_free(hub_comm_t *m);

/* ---- ah_coord_hub_health.c ---- */

/* Stores a rank's progress record (refused, with the connection dropped, for a communicator the
 * client is not a member of, before its verdict is COMPLETE, or when malformed). */
void ah_coord_hub_on_progress(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p);
/* A rank's sampled call durations: judged for stragglers once every rank reported a call. */
void ah_coord_hub_on_samples(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p);
/* At each tick: diagnoses every communicator whose ranks all stopped advancing for hang_ms and
 * sends the finding to its processes (once per stall). */
/* (each loop tick; it also notes when the hub itself stalled — its process frozen or starved —
 * after which connections it finds closed may be clients that gave it up and come back) */
void ah_coord_hub_health_tick(ah_coord_hub_t *h, uint64_t now);
/* Whether the hub's loop stalled (1 s or more without running) within the last 10 s. */
int ah_coord_hub_stalled(const ah_coord_hub_t *h, uint64_t now);
/* Sends each diagnosed communicator whose audit is due its straggler AUDIT (ah_coord_audit.h). */
void ah_coord_hub_audit_tick(ah_coord_hub_t *h, uint64_t now);
/* A client's process: its last connection closed (gone, 1) without a goodbye, or it left comm
 * (LEAVE) or said goodbye (BYE, comm 0: every communicator of connection c) (gone 0). Marks its
 * ranks' progress so the tick names dead ranks and never names those that left. */
void ah_coord_hub_health_client(ah_coord_hub_t *h, hub_conn_t *c, uint64_t comm, int gone);
/* Rank `rank` of m joined from connection c of client cl (AH_COORD_NO_RANK: a subscriber): a rank
 * whose process lost its connection is back, and the standing finding of m, if any, goes to c. */
void ah_coord_hub_health_joined(ah_coord_hub_t *h, hub_comm_t *m, hub_conn_t *c, hub_client_t *cl,
                                uint32_t rank);
/* Frees m's standing finding (with m). */
void ah_coord_hub_health_free(ah_coord_hub_t *h, hub_comm_t *m);
/* Answers `autoha status`: every diagnosed communicator and its ranks' latest progress. */
void ah_coord_hub_on_status(ah_coord_hub_t *h, hub_conn_t *c);

/* ---- ah_coord_hub_link.c ---- */

/* The host of connection c as progress records name it: its peer's address without the port. */
void ah_coord_hub_conn_host(const hub_conn_t *c, char *out, size_t len);
/* Where rank r of m runs, for a finding's text, from its progress record: "host pid P gpu G",
 * "host pid P" when its GPU is unknown, "no progress record" without one. Every finding that
 * places a rank (hang, death, straggler, slow link, NIC down) words it so. */
void ah_coord_hub_rank_place(const hub_comm_t *m, uint32_t r, char *out, size_t len);
/* Sends finding f to every process subscribed to m (a FINDING frame). */
void ah_coord_hub_finding_send(ah_coord_hub_t *h, hub_comm_t *m, const ah_finding_t *f);

/* A process's queue pairs (LINK_QP) and their windows (LINK_RATES); a malformed one is refused by
 * name and the connection dropped. */
void ah_coord_hub_on_link_qps(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p);
void ah_coord_hub_on_link_rates(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p);
/* Once a window (each tick looks): every connection into the matrices of the communicators its
 * ranks are in, judged, and the findings sent to those communicators' processes. */
void ah_coord_hub_link_tick(ah_coord_hub_t *h, uint64_t now);
/* m's current slow-link finding for autoha status: its kind with the text, or 0 (none). */
int ah_coord_hub_link_status(const hub_comm_t *m, char *text, size_t len);
/* Frees a communicator's matrix, and the job's queue pairs (hub close). */
void ah_coord_hub_link_comm_free(hub_comm_t *m);
void ah_coord_hub_link_free(ah_coord_hub_t *h);

#endif
