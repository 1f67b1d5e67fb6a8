/* ah_coord_client_internal.h: the client's state and the functions its three files share —
 * ah_coord_client_queue.c (what application threads queue for the I/O thread) <
 * ah_coord_client_relay.c (the host relay: electing it, and carrying the host's other processes) <
 * ah_coord_client_io.c (the I/O thread: handshake, reading, delivering, heartbeats, reconnecting) <
 * ah_coord_client.c (the API: open, join, publish, verdicts, close) and ah_coord_client_dir.c (the
 * directory's put and get). Internal to coordinator/. */
#ifndef AH_COORD_CLIENT_INTERNAL_H
#define AH_COORD_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "ah_coord_internal.h"
#include "ah_uthash.h"

typedef struct {
  uint64_t comm;
  uint32_t nranks;
  uint64_t last_seq;      /* segments delivered (the hub numbers them 1, 2, ... per communicator) */
  uint64_t told_seq;      /* the last_seq the hub was last told (JOIN's since, DELIVERED) */
  int verdict;            /* AH_COORD_VERDICT_*: the first one received is kept */
  ah_coord_mismatch_t mm; /* MISMATCH's evidence */
  ah_coord_digest_t digest; /* this process's settings, sent with every JOIN */
  uint32_t *ranks;          /* local ranks joined, each re-joined after a reconnection */
  int nlocal, caplocal;
} client_comm_t;

typedef struct {
  uint64_t seq;
  uint8_t keyseg[AH_COORD_KEYSEG_BYTES];
} client_pub_t;

typedef struct {
  uint8_t *b;
  size_t off, len, cap;
} client_buf_t;

/* A value this process stored in the directory: stored again after a reconnection. */
typedef struct {
  uint8_t key[AH_COORD_DIR_KEY];
  uint16_t vlen;
  uint8_t *val;
  UT_hash_handle hh;
} client_dir_put_t;
/* Bytes of puts a client keeps (and so may have stored in the hub): the hub's default bound per
 * client id, so a put the hub would refuse is refused here, by the caller's thread. */
#define CLIENT_DIR_BYTES_MAX (8u << 20)

/* A thread waiting in ah_coord_dir_get (on its stack), answered by the I/O thread. */
typedef struct client_dir_wait {
  uint64_t req;
  uint8_t key[AH_COORD_DIR_KEY];
  void *buf;
  size_t cap;
  int len; /* the value's length once answered */
  int done;
  int absent; /* the hub read the get and had no value (DIR_ABSENT) */
  uint64_t deadline_ns;
  struct client_dir_wait *next;
} client_dir_wait_t;

/* The bytes a relay passes one local process: a ring in memory both map (a memfd the relay made and
 * passed), written only by the relay (data, head) and read only by the local process (tail). head and
 * tail count bytes since the start and sit on their own cache lines; each side checks the other's
 * index (head - tail never above CLIENT_RING_BYTES), so a corrupt ring drops that one connection.
 * waiters counts the process's threads asleep in ah_coord_wait and wake is the word they sleep on (a
 * futex shared by the two processes): the relay bumps it and wakes them when it puts bytes while
 * waiters is not zero, the process when it delivers a segment itself (ah_coord_client_wait.c). */
#define CLIENT_RING_BYTES (256u << 10)
typedef struct {
  _Atomic uint64_t head;
  char pad0[56];
  _Atomic uint64_t tail;
  char pad1[56];
  _Atomic uint32_t waiters;
  _Atomic uint32_t wake;
  char pad2[56];
  uint8_t data[CLIENT_RING_BYTES];
} client_ring_t;

/* A process of this host connected to this process's relay (I/O thread only): its frames go to the
 * hub as RELAY_DATA on channel chan, the hub's for it come back the same way, into its ring. */
typedef struct {
  int fd;
  uint32_t chan;
  client_ring_t *ring;
  uint64_t head; /* bytes put into its ring so far */
  int ringed;    /* its handshake is done (WELCOME passed): the hub's frames go into its ring */
  int urgent;    /* bytes other than segments wait for it: the doorbell rings once they are put */
  uint8_t rbuf[AH_COORD_HDR_BYTES + AH_COORD_MAX_INNER]; /* a frame being read: rbuf[0 .. rlen) */
  size_t rlen;
  client_buf_t w; /* bytes for it that its ring had no room for yet */
} client_local_t;
/* Local processes one relay carries (the hub's bound too), and the bytes one may leave unread. */
#define CLIENT_RELAY_LOCALS 256
#define CLIENT_RELAY_OUTBUF (4u << 20)

struct ah_coord {
  ah_coord_stamp_t stamp;
  struct sockaddr_storage ss;
  socklen_t sl;
  char addr[96];
  ah_coord_client_opts_t o;
  ah_coord_deliver_fn deliver;
  void *arg;
  uint64_t client_id;
  atomic_int findings; /* the hub's diagnoses received (tests) */
  /* digests of the last findings handled (I/O thread only): the hub tells a standing finding again
   * to a process that joins while it stands, which may have heard it before */
  uint64_t seen_findings[8];
  uint64_t nseen_findings; /* ever handled; the last 8 are kept */

  pthread_mutex_t mu; /* guards comms, pubs, next_pub and outq */
  client_comm_t *comms;
  int ncomms, capcomms;
  client_pub_t *pubs;
  size_t pub_head, npubs, cappubs; /* unacknowledged: pubs[pub_head .. npubs) */
  uint64_t next_pub;
  client_buf_t outq;
  client_dir_put_t *dir_puts; /* what this process stored in the directory */
  size_t dir_put_bytes;
  client_dir_wait_t *dir_waits; /* threads in ah_coord_dir_get */
  uint64_t next_req;
  pthread_cond_t dir_cv; /* a DIR_VAL arrived, or the hub is gone (CLOCK_MONOTONIC) */

  /* The socket's write side: fd (replaced only by the I/O thread), w and want_out, under wmu.
   * Application threads that publish try to send directly (one wake-up less per segment) and
   * hand over to the I/O thread when the lock is taken or the socket is full. Lock order: wmu, mu. */
  pthread_mutex_t wmu;
  int fd, epfd, efd;
  client_buf_t w;
  int want_out;
  /* Through a host relay, the relay's doorbell (an eventfd it passed; -1 when connected directly)
   * and this process's ring (NULL when direct): the I/O thread waits on the doorbell, edge-triggered,
   * and takes the hub's frames from the ring; it watches fd only for its end (fd_ev: what fd is
   * polled for besides EPOLLOUT). bell and fd_ev: I/O thread only; ring: under rmu. */
  int bell;
  client_ring_t *ring;
  uint32_t fd_ev;
  /* Threads waiting for news (ah_coord_client_wait.c): a connection without a ring has its futex
   * word here (wake, nwait); ring_gen counts ring changes (under rmu) and ring_pins the waiters
   * asleep on the current ring's word, which ah_coord_client_drop wakes and waits out before unmapping it. */
  _Atomic uint32_t wake, nwait, ring_pins;
  uint32_t ring_gen;
  _Atomic uint64_t last_tx_ns;
  _Atomic uint64_t last_rx_ns;
  uint64_t last_ping_ns; /* I/O thread only */
  uint64_t installed_ns; /* when the current connection was installed (I/O thread only) */
  int cut_backoff_ms;    /* the pause before reconnecting after a connection cut soon after it
                          * came up: doubles at each such cut (I/O thread only) */

  /* The reading side: the ring's consumer end and the frames being parsed, taken by the I/O thread
   * and, through a relay, by an application thread waiting for a segment (ah_coord_poll, which only
   * tries the lock). Lock order: rmu, wmu, mu. */
  pthread_mutex_t rmu;
  uint8_t rbuf[16384]; /* bytes read but not yet parsed: rbuf[0 .. rlen) */
  size_t rlen;

  /* The host relay (ah_coord_client_relay.c; I/O thread only, but relay_role): the endpoint this
   * host's relay listens on, its socket when this process is the relay, and its local processes. */
  struct sockaddr_un rsa;
  socklen_t rsl;
  int lfd;
  int lbell;        /* the doorbell this relay rings once per batch for all its local processes */
  int ring_due;     /* bytes other than segments went to a local process since the last ring */
  uint64_t lazy_ns; /* segments went into rings: ring the doorbell then if any is still unread */
  int behind;       /* local processes whose ring was full at the last flush (retried every 1 ms) */
  client_local_t **locals;
  int nlocals, caplocals;
  uint32_t next_chan;
  atomic_int relay_role; /* ah_coord_client_relay_role */
  atomic_int ring_waits; /* ah_coord_client_ring_waits */

  pthread_t thr;
  atomic_int stop, alive, cut_req, connects;
  atomic_int up;       /* a connection to the hub is installed now (not lost, not being re-made) */
  atomic_int hub_lost; /* said the hub is gone (a loss without its goodbye, not a host relay's);
                        * 0 again once connected */
  atomic_int hub_bye;  /* the hub said goodbye (its process exits): losing it is the job's end */
  atomic_int byes;     /* BYEs received (the hub's answer to ours comes after its findings) */
  struct ah_coord *next; /* ah_coord_connect's list */
};

/* ---- ah_coord_client_queue.c ---- */

int ah_coord_client_buf_put(client_buf_t *b, const void *p, size_t n); /* -1: out of memory */
int ah_coord_client_buf_put_msg(client_buf_t *b, uint8_t type, const uint8_t *payload,
                                uint32_t len);
void ah_coord_client_wake(ah_coord_t *c); /* the I/O thread's eventfd */
/* JOIN frames into the out queue: one rank, or every local rank (or one that only subscribes).
 * Caller holds mu. */
int ah_coord_client_queue_join_rank(ah_coord_t *c, client_comm_t *m, uint32_t rank);
int ah_coord_client_queue_join(ah_coord_t *c, client_comm_t *m);
int ah_coord_client_queue_publish(ah_coord_t *c, const client_pub_t *pb);
void ah_coord_client_pubs_ack(ah_coord_t *c,
                              uint64_t upto); /* drops acknowledged publishes; holds mu */
/* The directory's frames into the out queue: a put, a get (asking for the time it has left), and
 * every put and waiting get again after a reconnection. Caller holds mu. */
int ah_coord_client_queue_dir_put(ah_coord_t *c, const client_dir_put_t *d);
int ah_coord_client_queue_dir_get(ah_coord_t *c, const client_dir_wait_t *w);
int ah_coord_client_queue_dir_all(ah_coord_t *c);
/* DELIVERED for every communicator whose delivered count crossed a multiple of `step` (shifted by
 * a phase of this client's) since the hub was last told, so at least every `step` segments; step 1:
 * whenever it grew (the hub drops what every member delivered). Caller holds mu. Returns 0 or -1. */
int ah_coord_client_queue_delivered(ah_coord_t *c, uint64_t step);

/* ---- ah_coord_client_wait.c ---- */

/* Something arrived for this process (a segment delivered): wakes its threads in ah_coord_wait.
 * Caller holds rmu. */
void ah_coord_client_notify(ah_coord_t *c);
/* The relay put bytes into ring r: wakes the local process's threads asleep on it, if any. */
void ah_coord_client_ring_wake(client_ring_t *r);
/* Replaces this process's ring (NULL: none) under rmu; an old ring is unmapped once the threads
 * asleep on it have been woken and have left it. */
void ah_coord_client_ring_set(ah_coord_t *c, client_ring_t *ring);
/* Sleeps us microseconds, resumed across signals (a reconnection's backoff, a waiter's nap). */
void ah_coord_client_sleep_us(long us);

/* ---- ah_coord_client_relay.c ---- */

/* Derives this host's relay endpoint from the job secret, the hub's address and the host identity
 * (o.host, or the hostname). */
void ah_coord_client_relay_name(ah_coord_t *c);
/* The election, before dialling the hub: takes the relay's endpoint when free (returns 1: this
 * process is now the relay and dials the hub itself), else runs the handshake through the relay
 * that holds it (returns 0 with fd_p and last_pub_p). Returns -1 with err when that relay cannot be
 * used (the caller dials the hub directly). */
int ah_coord_client_relay_elect(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, char *err,
                                size_t errlen);
/* Stops being the relay: closes the endpoint and every local process's socket (they reconnect and
 * elect again). Called when the connection to the hub is lost or the client closes. */
void ah_coord_client_relay_release(ah_coord_t *c);
/* Handles readiness of the relay's endpoint or of a local process's socket (fd). Returns 1 when fd
 * was one of those, 0 otherwise. Bytes for the hub are queued in outq (caller flushes). */
int ah_coord_client_relay_event(ah_coord_t *c, int fd, uint32_t events);
/* A RELAY_DATA or RELAY_CLOSE from the hub: the frame goes to its local process's socket (sent by
 * ah_coord_client_relay_flush), or that process's socket is closed. Returns 0, or -1 with why when the frame
 * has no place here (this process is not a relay). */
int ah_coord_client_relay_from_hub(ah_coord_t *c, uint8_t type, const uint8_t *p, uint32_t len,
                                   char *why, size_t whylen);
/* Puts what the hub's frames left for every local process into its ring, then rings the doorbell
 * once when any of it was not a segment, or when segments sat unread for o.relay_lazy_ms. */
void ah_coord_client_relay_flush(ah_coord_t *c);
/* Maps the ring a relay passed (ring_fd, closed here). Returns it, or NULL with err. */
client_ring_t *ah_coord_client_ring_map(int ring_fd, char *err, size_t errlen);
/* Copies up to room bytes from this process's ring to dst. Returns the count (0: empty), or -1 when
 * the relay's index is out of range (the connection is dropped). */
long ah_coord_client_ring_take(ah_coord_t *c, uint8_t *dst, size_t room);
void ah_coord_client_ring_unmap(client_ring_t *r);

/* ---- ah_coord_client_io.c ---- */

/* Connects and authenticates before one deadline: 0 with fd_p and last_pub_p, or -1 with err. */
int ah_coord_client_handshake(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, char *err,
                              size_t errlen);
/* Makes fd the connection: re-joins every communicator and resends unacknowledged publishes. */
int ah_coord_client_install(ah_coord_t *c, int fd, uint64_t last_pub);
void ah_coord_client_drop(ah_coord_t *c); /* closes the connection (the state stays) */
void ah_coord_client_send_now(
    ah_coord_t *c);                    /* an application thread writes what it queued, if it can */
void *ah_coord_client_main(void *arg); /* the I/O thread */
/* Writes what is queued if the connection's lock is free: 1 when it went (or nothing can go), 0
 * when it should be tried again. Never blocks. */
int ah_coord_client_send_sync(ah_coord_t *c);

#endif
