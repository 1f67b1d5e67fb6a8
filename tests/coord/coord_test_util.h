/* Helpers shared by the coordinator tests: a recorder of delivered segments, stderr capture (to
 * assert the one log line each refusal must produce) and a deadline-bounded wait. */
#ifndef COORD_TEST_UTIL_H
#define COORD_TEST_UTIL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "ah_coord_internal.h"

#define REC_MAX 4096

typedef struct {
  pthread_mutex_t mu;
  int n;
  ah_key_t keys[REC_MAX];
  ah_segment_t segs[REC_MAX];
} rec_t;

void rec_init(rec_t *r);
int rec_count(rec_t *r);
/* deliver callback appending to a rec_t */
void rec_deliver(void *arg, const ah_key_t *key, const ah_segment_t *seg);
/* Waits until rec has at least n entries or ms pass. Returns 1 when reached. */
int rec_wait(rec_t *r, int n, int ms);

/* A segment of test index i: first = 10*i, count 10, channels i%32+1. */
ah_segment_t seg_make(uint64_t i);
ah_key_t key_make(uint64_t comm);

/* Redirects stderr into a temporary file; log_text() returns what was written since (static
 * buffer, NUL-terminated); log_stop() restores stderr. */
void log_start(void);
const char *log_text(void);
void log_stop(void);
/* Waits until the captured log contains needle or ms pass. Returns 1 when found. */
int log_wait(const char *needle, int ms);

/* A hub on 127.0.0.1 with a fixed secret and short deadlines (auth 1500 ms, frame 1000 ms, join
 * 1000 ms, hang diagnosis 1000 ms). */
ah_coord_hub_t *hub_start_test(ah_coord_stamp_t *st_p);
/* Client options for tests: connect 5000 ms, heartbeat 200 ms, dead 2000 ms, reconnect 3000 ms. */
void client_opts_test(ah_coord_client_opts_t *o_p);
/* Opens nprocs clients (client_opts_test) and joins rank r of comm (nranks ranks) from client
 * proc_of[r]. Returns 0 once the verdict is COMPLETE (within 2 s), -1 otherwise. */
int clients_join_complete(const ah_coord_stamp_t *st, ah_coord_t **cs, int nprocs,
                          const int *proc_of, int nranks, uint64_t comm);
/* A legitimate pair of clients: both join comm, one publishes three segments, the other must
 * receive all three. Returns 1 on success. */
int legit_roundtrip(const ah_coord_stamp_t *st, uint64_t comm);
/* Raw TCP connection to the stamp's address (no handshake). Returns the fd or -1. */
int raw_connect(const ah_coord_stamp_t *st);
/* raw_connect, then the client's side of the handshake by hand as client `client_id` (the socket
 * left non-blocking). Returns the fd, or -1. */
int raw_authed_connect(const ah_coord_stamp_t *st, uint64_t client_id);
/* Sends a PING on fd and reads until the PONG (within 2 s). Returns 1 when it came: the hub kept
 * the connection and handled everything sent before. */
int raw_ping(int fd);
void sleep_ms(int ms);
/* kB of a field (VmRSS, VmHWM) of /proc/PID/status, or -1. */
long proc_status_kb(int pid, const char *field);
/* Thread body: reads and drops whatever arrives on the fd at arg (an int *) until EOF or error. */
void *drain_fd(void *arg);

/* A connection writing directory puts (one key, an empty value: frames that need no answer, so
 * the flood never fills the other end's send buffer and gets dropped for not reading) as fast as
 * it can, on a thread, until put_flood_stop or for at most 12 s (capped is then set). */
typedef struct {
  int fd;
  pthread_t t;
  _Atomic int stop, batches, capped;
} put_flood_t;
/* Starts f's thread on f->fd (made blocking) and returns once it wrote 8 batches (0), or -1 when
 * it did not within 10 s. */
int put_flood_start(put_flood_t *f);
/* Stops f's thread and waits for it (f->fd stays open). */
void put_flood_stop(put_flood_t *f);
/* ---- an authenticated client's flood (issue 18 #4): frames about forged communicators ---- */
enum {
  FLOOD_FRAMES = 1000, /* frames a batch */
  FLOOD_JOIN_BYTES = AH_COORD_HDR_BYTES + 48,
  FLOOD_PUB_BYTES = AH_COORD_HDR_BYTES + 8 + AH_COORD_KEYSEG_BYTES /* the larger: size buf by it */
};
/* Fills buf with batch `batch` of JOINs: communicator comm0 + batch * FLOOD_FRAMES + i, each
 * claiming AH_COORD_MAX_RANKS ranks, as rank 0. Returns the bytes to send. */
size_t flood_joins(uint8_t *buf, uint64_t comm0, int batch);
/* Fills buf with batch `batch` of PUBLISHes: segment n = batch * FLOOD_FRAMES + i (seg_make) of
 * communicator comm0 + n % FLOOD_FRAMES, sequence number n + 1. Returns the bytes to send. */
size_t flood_publishes(uint8_t *buf, uint64_t comm0, int batch);

/* Waits until every other thread of the process sleeps in epoll_wait (the hub's and the clients'
 * loops between events), or ms pass. Returns 1 when they do. A test that forks calls it first:
 * a thread inside malloc at the fork leaves the allocator's lock held in the child, and
 * AddressSanitizer's allocator (unlike glibc's) does not take its locks across fork. */
int threads_idle_wait(int ms);
/* Forks a child that reports to the parent through a pipe, once this process's other threads are
 * idle (threads_idle_wait). Returns the child's pid in the parent, with *rd_p the pipe's read end;
 * 0 in the child, with *wr_p its write end; -1 when the pipe, the wait or the fork failed. */
pid_t fork_reporting(int *rd_p, int *wr_p);

#endif
