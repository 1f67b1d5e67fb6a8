/* ah_coord_hub_fan.c: the hub's fan-out of one frame to every subscriber of a communicator. Up to
 * HUB_FAN_PAR_MIN subscribers the hub's thread sends to each in turn; beyond, the subscribers are
 * split between it and up to HUB_FAN_THREADS helper threads (one fewer than the CPUs), started at the
 * first large fan-out, which send their share at the same time.
 *
 * Key choice: a send(2) on TCP costs the sender 5-15 us (on loopback, the receiver's TCP path runs
 * on the sender's CPU too), so at 1,024 processes one thread spends 5-15 ms per decision, and a
 * machine with another busy process gives it less than a CPU; the CPUs the job left idle shorten
 * that. A helper only writes to the sockets of its share and queues what a socket does not take;
 * everything else a send can lead to (arming EPOLLOUT, refusing a slow reader, closing on an
 * error) is left to the hub's thread after the helpers are done, so the hub's state keeps one
 * writer. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

/* Below this many subscribers one thread sends (a helper's wake-up costs more than it saves). */
#define HUB_FAN_PAR_MIN 256

enum { FAN_QUEUED = 1, FAN_SLOW = 2, FAN_FAILED = 4, FAN_NOMEM = 8 };

typedef struct {
  hub_conn_t **subs;
  int lo, hi;
} fan_share_t;

struct hub_fan {
  pthread_t thr[HUB_FAN_THREADS];
  int nthr;
  pthread_mutex_t mu;
  pthread_cond_t go, done;
  uint64_t gen;       /* bumped per fan-out; a helper works once per value */
  int busy;           /* helpers still sending this fan-out */
  int stop;
  const uint8_t *f;
  size_t n;
  size_t max_outbuf;
  fan_share_t share[HUB_FAN_THREADS];
};

/* Appends what the socket did not take to c's write queue. Returns 0, FAN_SLOW when max_outbuf
 * bytes would wait, FAN_NOMEM. */
static int fan_queue(hub_conn_t *c, const uint8_t *p, size_t n, size_t max_outbuf) {
  if (c->wlen - c->woff + n > max_outbuf) return FAN_SLOW;
  if (c->woff > 0 && c->wlen + n > c->wcap) {
    memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
    c->wlen -= c->woff;
    c->woff = 0;
  }
  if (c->wlen + n > c->wcap) {
    size_t cap = c->wcap ? c->wcap : 1024;
    while (cap < c->wlen + n) cap *= 2;
    uint8_t *w = realloc(c->wbuf, cap);
    if (!w) return FAN_NOMEM;
    c->wbuf = w;
    c->wcap = cap;
  }
  memcpy(c->wbuf + c->wlen, p, n);
  c->wlen += n;
  return FAN_QUEUED;
}

/* One subscriber, on a helper: sends at once when nothing waits for the socket, else queues.
 * Records in c->fan_flags what the hub's thread must finish. */
static void fan_send_one(hub_conn_t *c, const uint8_t *f, size_t n, size_t max_outbuf) {
  c->fan_flags = 0;
  if (c->closing) return;
  size_t sent = 0;
  if (c->wlen == c->woff) {
    while (sent < n) {
      ssize_t r = send(c->fd, f + sent, n - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (r > 0) {
        sent += (size_t)r;
        continue;
      }
      if (r < 0 && errno == EINTR) continue;
      if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
      c->fan_flags = FAN_FAILED;
      c->fan_errno = r < 0 ? errno : EPIPE;
      return;
    }
    if (sent == n) return;
  }
  c->fan_flags = fan_queue(c, f + sent, n - sent, max_outbuf);
}

static void *fan_main(void *arg) {
  ah_coord_hub_t *h = arg;
  struct hub_fan *fa = h->fan;
  int me = -1;
  uint64_t seen = 0; /* the value before the first fan-out: one may be posted before this runs */
  pthread_setname_np(pthread_self(), "autoha-hub-fan");
  for (;;) {
    pthread_mutex_lock(&fa->mu);
    while (!fa->stop && fa->gen == seen) pthread_cond_wait(&fa->go, &fa->mu);
    if (fa->stop) {
      pthread_mutex_unlock(&fa->mu);
      return NULL;
    }
    seen = fa->gen;
    if (me < 0) /* its slot: fan_start stored its id under mu before any fan-out */
      for (int i = 0; i < fa->nthr; i++)
        if (pthread_equal(fa->thr[i], pthread_self())) me = i;
    fan_share_t sh = me >= 0 ? fa->share[me] : (fan_share_t){NULL, 0, 0};
    const uint8_t *f = fa->f;
    size_t n = fa->n, max_outbuf = fa->max_outbuf;
    pthread_mutex_unlock(&fa->mu);
    for (int i = sh.lo; i < sh.hi; i++) fan_send_one(sh.subs[i], f, n, max_outbuf);
    pthread_mutex_lock(&fa->mu);
    if (--fa->busy == 0) pthread_cond_signal(&fa->done);
    pthread_mutex_unlock(&fa->mu);
  }
}

/* Starts the helpers: one fewer than the CPUs, at most HUB_FAN_THREADS. Returns how many run
 * (0: the hub's thread sends alone). */
static int fan_start(ah_coord_hub_t *h) {
  if (h->fan) return h->fan->nthr;
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  int want = ncpu > 1 ? (int)(ncpu - 1) : 0;
  if (want > HUB_FAN_THREADS) want = HUB_FAN_THREADS;
  struct hub_fan *fa = calloc(1, sizeof *fa);
  if (!fa) return 0;
  pthread_mutex_init(&fa->mu, NULL);
  pthread_cond_init(&fa->go, NULL);
  pthread_cond_init(&fa->done, NULL);
  h->fan = fa;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 128 * 1024);
  pthread_mutex_lock(&fa->mu);
  for (int i = 0; i < want; i++) {
    int rc = pthread_create(&fa->thr[fa->nthr], &attr, fan_main, h);
    if (rc != 0) {
      ah_log(AH_LOG_INFO, "coordinator hub %s: fan-out helper not started (%s); one thread sends",
             h->addr, strerror(rc));
      break;
    }
    fa->nthr++;
  }
  pthread_mutex_unlock(&fa->mu);
  pthread_attr_destroy(&attr);
  return fa->nthr;
}

void hub_fan_stop(ah_coord_hub_t *h) {
  struct hub_fan *fa = h->fan;
  if (!fa) return;
  pthread_mutex_lock(&fa->mu);
  fa->stop = 1;
  pthread_cond_broadcast(&fa->go);
  pthread_mutex_unlock(&fa->mu);
  for (int i = 0; i < fa->nthr; i++) pthread_join(fa->thr[i], NULL);
  pthread_cond_destroy(&fa->done);
  pthread_cond_destroy(&fa->go);
  pthread_mutex_destroy(&fa->mu);
  free(fa);
  h->fan = NULL;
}

/* What a helper left for the hub's thread: a socket to watch for EPOLLOUT, a slow reader or a
 * failed send to drop. */
static void fan_finish(ah_coord_hub_t *h, hub_conn_t *c) {
  int fl = c->fan_flags;
  c->fan_flags = 0;
  if (!fl || c->closing) return;
  if (fl & FAN_FAILED) {
    hub_refuse(h, RATE_CLOSED, "send to %s failed (%s); connection dropped", c->peer, strerror(c->fan_errno));
    hub_conn_close_later(h, c);
  } else if (fl & FAN_SLOW) {
    hub_refuse(h, RATE_SLOW, "client %s does not read (%zu bytes queued); connection dropped", c->peer,
               c->wlen - c->woff);
    hub_conn_close_later(h, c);
  } else if (fl & FAN_NOMEM) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory queueing a segment for %s", h->addr, c->peer);
    hub_conn_close_later(h, c);
  } else {
    hub_conn_flush(h, c); /* arms EPOLLOUT for what waits */
  }
}

/* Note that the hub's thread takes the first share itself and waits for the helpers before
 * returning, so a caller sees every subscriber served (or queued) in the order it would have been
 * alone; the frame f must stay valid until then (it is the communicator's retained copy). */
void hub_fan_send(ah_coord_hub_t *h, hub_conn_t **subs, int nsubs, const uint8_t *f, size_t n) {
  int nthr = nsubs >= HUB_FAN_PAR_MIN ? fan_start(h) : 0;
  if (nthr == 0) {
    for (int i = 0; i < nsubs; i++) hub_conn_send(h, subs[i], f, n);
    return;
  }
  struct hub_fan *fa = h->fan;
  int per = nsubs / (nthr + 1);
  pthread_mutex_lock(&fa->mu);
  for (int i = 0; i < nthr; i++) {
    fa->share[i].subs = subs;
    fa->share[i].lo = per * (i + 1);
    fa->share[i].hi = i == nthr - 1 ? nsubs : per * (i + 2);
  }
  fa->f = f;
  fa->n = n;
  fa->max_outbuf = h->o.max_outbuf;
  fa->busy = nthr;
  fa->gen++;
  pthread_cond_broadcast(&fa->go);
  pthread_mutex_unlock(&fa->mu);
  for (int i = 0; i < per; i++) hub_conn_send(h, subs[i], f, n);
  pthread_mutex_lock(&fa->mu);
  while (fa->busy > 0) pthread_cond_wait(&fa->done, &fa->mu);
  pthread_mutex_unlock(&fa->mu);
  for (int i = per; i < nsubs; i++) fan_finish(h, subs[i]);
}
