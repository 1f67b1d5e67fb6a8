/* Helpers shared by the coordinator tests: a recorder of delivered segments, stderr capture (to
 * assert the one log line each refusal must produce) and a deadline-bounded wait. */
#ifndef COORD_TEST_UTIL_H
#define COORD_TEST_UTIL_H

#include <pthread.h>
#include <stdint.h>

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
/* A legitimate pair of clients: both join comm, one publishes three segments, the other must
 * receive all three. Returns 1 on success. */
int legit_roundtrip(const ah_coord_stamp_t *st, uint64_t comm);
/* Raw TCP connection to the stamp's address (no handshake). Returns the fd or -1. */
int raw_connect(const ah_coord_stamp_t *st);
void sleep_ms(int ms);
/* Waits until every other thread of the process sleeps in epoll_wait (the hub's and the clients'
 * loops between events), or ms pass. Returns 1 when they do. A test that forks calls it first:
 * a thread inside malloc at the fork leaves the allocator's lock held in the child, and
 * AddressSanitizer's allocator (unlike glibc's) does not take its locks across fork. */
int threads_idle_wait(int ms);

#endif
