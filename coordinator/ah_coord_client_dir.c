/* ah_coord_client_dir.c: the directory's API on a client — ah_coord_dir_put queues a DIR_PUT and
 * remembers the value (stored again after a reconnection), ah_coord_dir_get queues a DIR_GET and
 * sleeps on a condition variable until the I/O thread hands it the hub's DIR_VAL, the deadline
 * passes or the hub is gone.
 *
 * Key choice: the caller's thread waits, never the I/O thread: a get is a request number on a list
 * under the client's mutex, and the I/O thread only copies the value and wakes it, so a get that
 * waits a minute for a peer delays no segment. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_coord_client_internal.h"
#include "ah_log.h"

/* Note that a put too large, or beyond what this client may keep, is refused by the caller's thread
 * with one log line (capped): the hub would refuse it anyway. */
int ah_coord_dir_put(ah_coord_t *c, const uint8_t key[AH_COORD_DIR_KEY], const void *val,
                     size_t len) {
  if (!c || !atomic_load(&c->alive)) return -1;
  if (len > AH_COORD_DIR_VAL_MAX || (len && !val)) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR, "coordinator: directory value of %zu bytes refused (at most %d)",
                  len, AH_COORD_DIR_VAL_MAX);
    return -1;
  }
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  client_dir_put_t *d = NULL;
  HASH_FIND(hh, c->dir_puts, key, AH_COORD_DIR_KEY, d);
  size_t old = d ? d->vlen : 0;
  if (c->dir_put_bytes - old + len + AH_COORD_DIR_KEY > CLIENT_DIR_BYTES_MAX) {
    pthread_mutex_unlock(&c->mu);
    AH_LOG_CAPPED(5, AH_LOG_ERROR,
                  "coordinator: directory put refused: this process already stored "
                  "%zu bytes (at most %u)",
                  c->dir_put_bytes, CLIENT_DIR_BYTES_MAX);
    return -1;
  }
  uint8_t *copy = malloc(len ? len : 1);
  int fresh = !d;
  if (fresh) d = calloc(1, sizeof *d);
  if (!copy || !d) {
    rc = -1;
    free(copy);
    if (fresh) free(d);
  } else {
    if (len) memcpy(copy, val, len);
    if (fresh) {
      memcpy(d->key, key, AH_COORD_DIR_KEY);
      HASH_ADD(hh, c->dir_puts, key, AH_COORD_DIR_KEY, d);
      c->dir_put_bytes += AH_COORD_DIR_KEY;
    }
    free(d->val);
    d->val = copy;
    d->vlen = (uint16_t)len;
    c->dir_put_bytes = c->dir_put_bytes - old + len;
    rc = ah_coord_client_queue_dir_put(c, d);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory storing a directory value");
    return -1;
  }
  ah_coord_client_send_now(c);
  return 0;
}

/* Note that the wait is sliced (at most 100 ms at a time) so a client whose I/O thread stopped
 * without waking it still notices the hub gone; the I/O thread's broadcast makes that immediate in
 * the usual case.
 *
 * Note that the deadline alone does not end the wait: a miss is known only once the hub's
 * DIR_ABSENT for this request has arrived; until then the get waits up to AH_COORD_DIR_SLACK_S
 * longer for the hub's answer, whichever it is. Through a host relay on a busy machine the answer
 * to a 2 ms look-up can take tens of milliseconds, and a key that was stored must not read as
 * missing then (the HA layer's doorbells and re-plans act on a miss). Every request of a batch is
 * queued before the first wait, so a batch costs one round trip, not one per key. */
int ah_coord_dir_get_many(ah_coord_t *c, const uint8_t (*keys)[AH_COORD_DIR_KEY], int n, void *vals,
                          size_t cap, int *lens, double timeout_s) {
  for (int i = 0; i < n; i++) lens[i] = AH_COORD_DIR_UNANSWERED;
  if (!c || !atomic_load(&c->alive) || n <= 0) return n < 0 || !c ? -1 : 0;
  if (!(timeout_s >= 0)) timeout_s = 0; /* NaN and negatives: look once */
  if (timeout_s > 1e6) timeout_s = 1e6;
  client_dir_wait_t *w = calloc((size_t)n, sizeof *w);
  if (!w) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory asking the directory");
    return -1;
  }
  const uint64_t deadline = ah_coord_now_ns() + (uint64_t)(timeout_s * 1e9);
  const uint64_t last_ns = deadline + (uint64_t)(AH_COORD_DIR_SLACK_S * 1e9);
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < n; i++) {
    memcpy(w[i].key, keys[i], AH_COORD_DIR_KEY);
    w[i].buf = vals ? (uint8_t *)vals + (size_t)i * cap : NULL;
    w[i].cap = vals ? cap : 0;
    w[i].deadline_ns = deadline;
    w[i].req = ++c->next_req;
    w[i].next = c->dir_waits;
    c->dir_waits = &w[i];
    rc |= ah_coord_client_queue_dir_get(c, &w[i]);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) ah_coord_client_send_now(c);
  pthread_mutex_lock(&c->mu);
  for (int k = 0; rc == 0 && atomic_load(&c->alive);) {
    uint64_t now = ah_coord_now_ns();
    while (k < n && (w[k].done || (w[k].absent && now >= deadline))) k++; /* answered, in order */
    if (k == n || now >= last_ns) break;
    uint64_t end = now < deadline ? deadline : last_ns;
    uint64_t until = end - now > 100000000ull ? now + 100000000ull : end;
    struct timespec ts = {.tv_sec = (time_t)(until / 1000000000ull),
                          .tv_nsec = (long)(until % 1000000000ull)};
    int e = pthread_cond_timedwait(&c->dir_cv, &c->mu, &ts);
    if (e != 0 && e != ETIMEDOUT && e != EINTR) break;
  }
  const uintptr_t lo = (uintptr_t)w, hi = (uintptr_t)(w + n);
  for (client_dir_wait_t **pp = &c->dir_waits; *pp;) /* unlink this batch's waiters */
    if ((uintptr_t)*pp >= lo && (uintptr_t)*pp < hi) *pp = (*pp)->next;
    else pp = &(*pp)->next;
  /* absent counts only for the whole wait: a get cut short by a gone hub knows nothing */
  uint64_t now = ah_coord_now_ns();
  for (int i = 0; i < n; i++)
    lens[i] = w[i].done                        ? w[i].len
              : w[i].absent && now >= deadline ? AH_COORD_DIR_ABSENT
                                               : AH_COORD_DIR_UNANSWERED;
  pthread_mutex_unlock(&c->mu);
  free(w);
  if (rc != 0) ah_log(AH_LOG_ERROR, "coordinator: out of memory asking the directory");
  return 0;
}

int ah_coord_dir_get(ah_coord_t *c, const uint8_t key[AH_COORD_DIR_KEY], void *val, size_t cap,
                     double timeout_s) {
  int len;
  const uint8_t(*k)[AH_COORD_DIR_KEY] = (const uint8_t(*)[AH_COORD_DIR_KEY])key;
  ah_coord_dir_get_many(c, k, 1, val, cap, &len, timeout_s);
  return len;
}
