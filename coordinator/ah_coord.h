/* ah_coord.h: the coordinator — carries each communicator leader's committed schedule segments
 * (tuner/ah_sched.h) to every process that holds ranks of that communicator, over TCP.
 *
 * One hub per job, started in the process that calls ncclGetUniqueId first; its address and a
 * 128-bit job secret travel in bytes 64..127 of the ncclUniqueId (the "stamp"), so every process
 * that receives the id can connect and prove it belongs. One client connection per process,
 * multiplexing all of that process's communicators (with the host relay on, a host's processes
 * share one TCP connection: the first carries the others' as channels); ranks inside one process
 * share schedules without sockets. All socket I/O runs on one background thread per process (epoll); the
 * collective hot path never touches a socket.
 *
 * This header is the whole interface the shim uses; the wire protocol is in docs/coordinator.md. */
#ifndef AH_COORD_H
#define AH_COORD_H

#include <stddef.h>
#include <stdint.h>

#include "ah_config.h"
#include "ah_coord_health.h"
#include "ah_sched.h"

/* The hub's defaults that are settings too (AUTOHA_COORD_JOIN_S, AUTOHA_HANG_S,
 * AUTOHA_STRAGGLER_PCT, AUTOHA_SLOW_LINK_PCT): the settings table's rows write their text from
 * these. */
#define AH_COORD_JOIN_S_DEFAULT 30
#define AH_COORD_HANG_S_DEFAULT 60 /* docs/diagnosis.md says why */
/* The hub's memory budget for what a job makes it keep (AUTOHA_HUB_MEM_MB; docs/coordinator.md
 * "Scale" sizes it: a 131,072-GPU job of TP8 x PP8 x DP takes about 185 MiB, and its straggler
 * windows 0.4 GiB with 4 keys judged a communicator, 1.7 GiB with all 16). */
#define AH_COORD_HUB_MEM_MB_DEFAULT 1024
#define AH_COORD_STRAGGLER_PCT_DEFAULT 20
#define AH_COORD_STRAGGLER_AUDIT_S_DEFAULT 10
#define AH_COORD_SLOW_LINK_PCT_DEFAULT 20

#define AH_COORD_STAMP_OFFSET 64
#define AH_COORD_STAMP_BYTES 64

/* What the stamp carries. */
typedef struct {
  uint8_t secret[16];
  uint8_t family;   /* AF_INET or AF_INET6 */
  uint16_t port;    /* host order */
  uint8_t addr[16]; /* IPv4 in the first 4 bytes, or IPv6 */
} ah_coord_stamp_t;

/* Writes the stamp into id[64..127] (magic, version, fields, checksum). */
void ah_coord_stamp_write(const ah_coord_stamp_t *st, unsigned char id[128]);
/* Reads a stamp. Returns 0, or -1 when the tail carries no valid stamp (an id made without the
 * shim): the caller puts that communicator in pass-through. */
int ah_coord_stamp_read(const unsigned char id[128], ah_coord_stamp_t *st_p);

/* Called by the coordinator's thread when a segment for (comm, key) arrives from the hub, in
 * commit order, possibly as a replay of one already delivered. The shim appends it to the local
 * schedule of that key (creating the key's state if needed). */
typedef void (*ah_coord_deliver_fn)(void *arg, const ah_key_t *key, const ah_segment_t *seg);

typedef struct ah_coord ah_coord_t;

/* What the process-wide hub and connections are set up with: the caller's typed settings (the
 * shim passes AUTOHA_COORD_ADDR and AUTOHA_COORD_JOIN_S as its environment table parsed them); the
 * coordinator reads no environment itself. */
typedef struct {
  const char *addr; /* "host:port" (port 1..65535): where the hub listens, and where clients
                      * connect instead of the stamp's address (NAT); NULL or "" for neither */
  double join_s;    /* the hub's join deadline (AUTOHA_COORD_JOIN_S); <= 0: its default */
  double hang_s;    /* the hub's hang diagnosis after this long without progress (AUTOHA_HANG_S);
                      * 0: its default; < 0: never */
  double straggler_pct;     /* AUTOHA_STRAGGLER_PCT: 0 the default, < 0 off */
  double straggler_audit_s; /* AUTOHA_STRAGGLER_AUDIT_S: 0 the default, < 0 off */
  double slow_link_pct;     /* AUTOHA_SLOW_LINK_PCT: 0 the default, < 0 off */
  const char *ifname; /* AUTOHA_COORD_IFNAME: which interface's address the hub binds and advertises
                       * when addr is not given (NCCL_SOCKET_IFNAME's syntax); NULL or "": NCCL's
                       * default order (ib*, then any but docker* and lo*, then docker*, then lo*) */
  int relay;          /* AUTOHA_COORD_RELAY: 1 shares one connection to the hub per host (the first
                       * process of the host relays the others'), 0 connects every process directly */
  long hub_mem_mb;    /* AUTOHA_HUB_MEM_MB: the hub's memory budget for the job's tables; <= 0 its
                       * default */
} ah_coord_setup_t;

/* Starts this process's hub (idempotent), listening on setup->addr or on the address of the
 * interface setup->ifname chooses (loopback when none has one), with a fresh random secret. Fills the stamp to write
 * into the unique id. Returns 0, or -1 after logging why. */
int ah_coord_hub_start(const ah_coord_setup_t *setup, ah_coord_stamp_t *stamp_p);
/* The process that runs the hub exits (an atexit handler): the hub says goodbye to every client,
 * so that they take its going for the job's end, not for a hub that died (waits at most 100 ms). */
void ah_coord_hub_goodbye(void);

/* Connects this process to the hub of a stamp (idempotent per stamp), authenticates, and starts
 * the I/O thread. deliver is called for every segment of every communicator joined. Returns the
 * process's coordinator, or NULL after logging why (the caller falls back to pass-through). */
ah_coord_t *ah_coord_connect(const ah_coord_stamp_t *stamp, const ah_coord_setup_t *setup,
                             ah_coord_deliver_fn deliver, void *arg);

/* Whether a communicator spanning processes may run autoha's choices: the hub decides once per
 * communicator and tells every process joined to it. COMPLETE: all nranks ranks joined with the
 * same settings digest (the leader tunes, the others follow its segments); ABANDONED: not all
 * joined within AUTOHA_COORD_JOIN_S of the first join; MISMATCH: all joined, but their settings
 * digests differ. After ABANDONED or MISMATCH every rank runs NCCL's own choices — what a rank
 * without autoha runs. */
enum {
  AH_COORD_VERDICT_NONE = 0,
  AH_COORD_VERDICT_COMPLETE = 1,
  AH_COORD_VERDICT_ABANDONED = 2,
  AH_COORD_VERDICT_MISMATCH = 3
};

/* What a rank joins with: digests of the settings that decide its choices (settings/ah_digest.h's
 * parts, opaque here). The hub compares each part with the first rank's. */
#define AH_COORD_DIGEST_PARTS 3
typedef struct {
  uint64_t part[AH_COORD_DIGEST_PARTS];
} ah_coord_digest_t;

/* The evidence of a MISMATCH verdict: which parts differ (bit i = part i), the rank whose digest
 * the others were compared with, the lowest rank that differs from it and how many do. */
typedef struct {
  uint32_t mask;
  uint32_t ref_rank, first_rank, ndiffer;
} ah_coord_mismatch_t;

/* Joins local rank `rank` (0..nranks-1) of a communicator and subscribes this process to its
 * segments and its verdict. A process calls it once per local rank (the hub counts ranks, not
 * processes; a rank joined twice counts once). Segments already committed, and the verdict once
 * decided, are replayed. `digest` (NULL: all zero) is the process's settings digest; a process
 * joins every local rank with the same one. Returns 0, or -1 when the hub is gone, the rank is out
 * of range or memory ran out (logged). */
int ah_coord_join_rank(ah_coord_t *c, uint64_t comm, int nranks, int rank,
                       const ah_coord_digest_t *digest);
/* Subscribes this process to a communicator's segments and verdict without joining a rank (an
 * observer, or bench/coord_scale's simulated processes): it never makes the verdict COMPLETE. */
int ah_coord_join(ah_coord_t *c, uint64_t comm, int nranks);
/* The verdict this process received for comm: AH_COORD_VERDICT_NONE until it arrives. Note that a
 * verdict never changes once decided, so a caller may poll it without any other synchronisation. */
int ah_coord_verdict(ah_coord_t *c, uint64_t comm);
/* For a MISMATCH verdict: fills *m_p and returns 1; otherwise returns 0. */
int ah_coord_mismatch(ah_coord_t *c, uint64_t comm, ah_coord_mismatch_t *m_p);
void ah_coord_leave(ah_coord_t *c, uint64_t comm);
/* The process exits (an atexit handler): tells the hub, so that its connection closing next is not
 * taken for a death (docs/diagnosis.md), and waits at most 500 ms for its answer, which comes after
 * the findings the hub sent before (so they reach the log and the report): at once, or 250 ms
 * later when the process still has communicators joined (it may be exiting because a peer died).
 * Never blocks on the network: at most 50 ms for the connection's lock, then the wait. */
void ah_coord_goodbye(ah_coord_t *c);

/* Leader side: sends a committed segment of (comm, key) to the hub, which forwards it to every
 * process joined to comm and keeps it for replay. Non-blocking: sent at once when the socket's
 * write side is free, else queued for the I/O thread; kept until the hub acknowledges it.
 * Returns 0, or -1 when the connection is gone for good. */
int ah_coord_publish(ah_coord_t *c, const ah_key_t *key, const ah_segment_t *seg);

/* 1 while the connection to the hub is healthy or being re-established, 0 once the hub is known
 * to be gone (workers waiting on a decision then fail over instead of waiting forever). */
int ah_coord_alive(const ah_coord_t *c);
/* 1 while the hub can be heard from soon: a connection is up, or one lost only with its host
 * relay (the relay's process died; the hub lives) is being re-made; 0 once the hub is known gone
 * (a connection lost without its goodbye, or given up). */
int ah_coord_reachable(const ah_coord_t *c);

/* For a thread waiting for a segment: through a host relay, segments wait in this process's ring
 * until a thread takes them (the relay wakes the process for them only after a while), so this
 * takes and delivers them, on the calling thread. Returns 1 when the ring held something, 0 when
 * it was empty, the process is not behind a relay, or another thread is taking them. Never blocks
 * and makes no system call. */
int ah_coord_poll(ah_coord_t *c);

/* For a thread waiting for a segment or a verdict without polling in a loop (the shim's waiting
 * ranks): take a ticket, look once more (ah_coord_poll, then the schedule or the verdict), then
 * sleep in ah_coord_wait with the ticket. It returns once something arrived for this process since
 * the ticket was taken — the host relay put bytes into its ring, a segment or a verdict was
 * delivered here — or after timeout_us, whichever comes first, and may return early for nothing
 * (the caller looks again). Bytes left in the ring end the sleep at once, so the caller takes them
 * (ah_coord_poll) before it sleeps. A forked child, or a process whose hub is gone, just sleeps
 * timeout_us. */
uint64_t ah_coord_wait_ticket(ah_coord_t *c);
void ah_coord_wait(ah_coord_t *c, uint64_t ticket, long timeout_us);

/* Sends the hub rank rec->rank's progress record of comm (at most once a second per rank): the
 * hub diagnoses a communicator that stops advancing (docs/diagnosis.md) and every process of it
 * logs the finding. Returns 0, or -1 when the hub is gone. */
struct ah_health_rec;
int ah_coord_progress(ah_coord_t *c, uint64_t comm, const struct ah_health_rec *rec);
/* Sends the hub n (<= AH_HEALTH_SAMPLES) of rank's sampled call durations of comm, for its
 * straggler detection. Returns 0, or -1 when the hub is gone. */
int ah_coord_samples(ah_coord_t *c, uint64_t comm, uint32_t rank, const ah_health_sample_t *x,
                     int n);

/* ---- the shortest duration of a search call across ranks (docs/coordinator.md "Search times") ----
 * Sends the hub rank's measured duration (us) of call `index` of key (comm, coll, bin), a call of
 * the leader's search. Returns 0, or -1 when the hub is gone. Non-blocking, like ah_coord_samples. */
int ah_coord_search_time(ah_coord_t *c, uint64_t comm, uint32_t rank, int coll, int bin,
                         uint64_t index, double us);
/* Called on the coordinator's I/O thread of the leader's process with the shortest duration of a
 * search call across the `reported` (of nranks) ranks that sent one; NULL: none. */
typedef void (*ah_coord_mintime_fn)(uint64_t comm, int coll, int bin, uint64_t index, double us,
                                    uint32_t reported, uint32_t nranks);
void ah_coord_set_mintime_handler(ah_coord_mintime_fn fn);

/* ---- the straggler audit (ah_coord_audit.h) ----
 * Called on the coordinator's I/O thread for each key of an AUDIT the hub sent about a communicator
 * of this process: time `calls` calls of key (comm, coll, bin) from call index `from` (or from the
 * next call, when the rank is past it). NULL: audits are ignored. */
typedef void (*ah_coord_audit_fn)(uint64_t comm, int coll, int bin, uint64_t from, unsigned calls);
void ah_coord_set_audit_handler(ah_coord_audit_fn fn);

/* ---- the job's key/value directory (docs/coordinator.md "Directory") ----
 * A small store in the hub that processes of a job use to exchange what one end of a connection
 * must learn from the other (the shim's HA layer: shadow-QP parameters and "delivered" counters,
 * keyed by GID + QP number). Keys are opaque 32-byte strings; a key has one writer. */
#define AH_COORD_DIR_KEY 32
#define AH_COORD_DIR_VAL_MAX 512
/* Stores val (len <= AH_COORD_DIR_VAL_MAX) under key in the job's hub, replacing an earlier
 * value. Returns 0 when queued for the hub, -1 when the hub is gone or len is too large.
 *
 * Note that the client keeps its own puts and stores them again after a reconnection (the hub
 * keeps the directory across connections, so this is idempotent), and that the hub bounds the
 * directory per client and per job: a put beyond a bound is refused there with one log line and
 * never becomes visible (a get of it times out). Non-blocking, like ah_coord_publish. */
int ah_coord_dir_put(ah_coord_t *c, const uint8_t key[AH_COORD_DIR_KEY], const void *val,
                     size_t len);
/* What ah_coord_dir_get returns when it has no value: the hub said the key was not stored (and no
 * put came within the wait), or no answer came at all (the hub is gone or slower than the slack). */
#define AH_COORD_DIR_ABSENT (-1)
#define AH_COORD_DIR_UNANSWERED (-2)
/* How much longer than its timeout a get waits for the hub's answer to arrive (seconds). */
#define AH_COORD_DIR_SLACK_S 0.2
/* Looks key up in the hub, waiting up to timeout_s for it to be stored. Returns the value's
 * length (copying min(len, cap) bytes into val); AH_COORD_DIR_ABSENT when the hub answered that
 * the key was not stored and no put of it came within timeout_s; AH_COORD_DIR_UNANSWERED when the
 * hub is gone or its answer did not arrive within timeout_s + AH_COORD_DIR_SLACK_S. Blocking: call
 * it from a background thread, never from NCCL's.
 *
 * Note that the hub answers at once (the value, or DIR_ABSENT) and, on a miss, remembers the
 * request until a put of the key arrives or timeout_s passes; a request outstanding across a
 * reconnection is asked again for the time it has left. A miss is therefore never a late answer
 * mistaken for one: it waits for the hub's word, up to the slack. */
int ah_coord_dir_get(ah_coord_t *c, const uint8_t key[AH_COORD_DIR_KEY], void *val, size_t cap,
                     double timeout_s);
/* Looks n keys up at once (one round trip through the hub, not n): key i's value goes to
 * vals + i * cap (at most cap bytes; vals may be NULL), and lens[i] is what ah_coord_dir_get would
 * have returned for it. Returns 0, or -1 when c is NULL, n is negative or memory ran out (lens are
 * then AH_COORD_DIR_UNANSWERED). */
int ah_coord_dir_get_many(ah_coord_t *c, const uint8_t (*keys)[AH_COORD_DIR_KEY], int n, void *vals,
                          size_t cap, int *lens, double timeout_s);

/* Called on the coordinator's I/O thread after each finding of the hub is logged (kind:
 * AH_FINDING_* of ah_coord_health.h), for the process to act on it; NULL: none. */
typedef void (*ah_coord_finding_fn)(uint64_t comm, const ah_finding_t *f);
void ah_coord_set_finding_handler(ah_coord_finding_fn fn);
ah_coord_finding_fn ah_coord_finding_handler(void);

#endif
