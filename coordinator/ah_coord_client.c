/* The client: one connection per process to the job's hub, multiplexing every communicator the
 * process joined. Application threads only queue bytes under a mutex and wake the I/O thread (an
 * eventfd); the I/O thread owns the socket, runs the epoll loop, delivers segments in commit order,
 * sends heartbeats and reconnects.
 *
 * Key choice: the connection is disposable, the state is not. The client remembers, per joined
 * communicator, its local ranks, the hub's verdict once received and the sequence number of the
 * last segment delivered, and every publish until the hub acknowledges it; after a cut it
 * re-authenticates, re-joins each local rank "since" those numbers (the hub replays the verdict
 * too) and resends the unacknowledged publishes (the hub drops duplicates), so nothing is lost or
 * delivered twice. Only when the hub stays unreachable for reconnect_ms does ah_coord_alive()
 * turn 0. */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <netinet/in.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_internal.h"
#include "ah_log.h"


typedef struct {
  uint64_t comm;
  uint32_t nranks;
  uint64_t last_seq;
  int verdict;          /* AH_COORD_VERDICT_*: the first one received is kept */
  ah_coord_mismatch_t mm; /* MISMATCH's evidence */
  ah_coord_digest_t digest; /* this process's settings, sent with every JOIN */
  uint32_t *ranks;      /* local ranks joined, each re-joined after a reconnection */
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

struct ah_coord {
  ah_coord_stamp_t stamp;
  struct sockaddr_storage ss;
  socklen_t sl;
  char addr[96];
  ah_coord_client_opts_t o;
  ah_coord_deliver_fn deliver;
  void *arg;
  uint64_t client_id;

  pthread_mutex_t mu; /* guards comms, pubs, next_pub and outq */
  client_comm_t *comms;
  int ncomms, capcomms;
  client_pub_t *pubs;
  size_t pub_head, npubs, cappubs; /* unacknowledged: pubs[pub_head .. npubs) */
  uint64_t next_pub;
  client_buf_t outq;

  /* The socket's write side: fd (replaced only by the I/O thread), w and want_out, under wmu.
   * Application threads that publish try to send directly (one wake-up less per segment) and
   * hand over to the I/O thread when the lock is taken or the socket is full. Lock order: wmu, mu. */
  pthread_mutex_t wmu;
  int fd, epfd, efd;
  client_buf_t w;
  int want_out;
  _Atomic uint64_t last_tx_ns;

  /* I/O thread only */
  uint8_t rbuf[16384]; /* bytes read but not yet parsed: rbuf[0 .. rlen) */
  size_t rlen;
  uint64_t last_rx_ns;

  pthread_t thr;
  atomic_int stop, alive, cut_req, connects;
  struct ah_coord *next; /* ah_coord_connect's list */
};

void ah_coord_client_opts_default(ah_coord_client_opts_t *o_p) {
  o_p->connect_ms = 5000;
  o_p->heartbeat_ms = 2000;
  o_p->dead_ms = 6000;
  o_p->reconnect_ms = 10000;
}

static int buf_put(client_buf_t *b, const void *p, size_t n) {
  if (b->off > 0 && b->len + n > b->cap) {
    memmove(b->b, b->b + b->off, b->len - b->off);
    b->len -= b->off;
    b->off = 0;
  }
  if (b->len + n > b->cap) {
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + n) cap *= 2;
    uint8_t *nb = realloc(b->b, cap);
    if (!nb) return -1;
    b->b = nb;
    b->cap = cap;
  }
  memcpy(b->b + b->len, p, n);
  b->len += n;
  return 0;
}

static int buf_put_msg(client_buf_t *b, uint8_t type, const uint8_t *payload, uint32_t len) {
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(type, len, f);
  if (len) memcpy(f + AH_COORD_HDR_BYTES, payload, len);
  return buf_put(b, f, AH_COORD_HDR_BYTES + len);
}

static void client_wake(ah_coord_t *c) {
  uint64_t one = 1;
  if (write(c->efd, &one, sizeof one) < 0) { /* counter saturated: already awake */
  }
}

static int queue_join_rank(ah_coord_t *c, const client_comm_t *m, uint32_t rank) {
  uint8_t p[24 + 8 * AH_COORD_DIGEST_PARTS];
  ah_coord_put_u64(p, m->comm);
  ah_coord_put_u32(p + 8, m->nranks);
  ah_coord_put_u32(p + 12, rank);
  ah_coord_put_u64(p + 16, m->last_seq);
  for (int i = 0; i < AH_COORD_DIGEST_PARTS; i++) ah_coord_put_u64(p + 24 + 8 * i, m->digest.part[i]);
  return buf_put_msg(&c->outq, AH_MSG_JOIN, p, sizeof p);
}

/* One JOIN per local rank (the hub counts ranks), or one that only subscribes. Caller holds mu. */
static int queue_join(ah_coord_t *c, const client_comm_t *m) {
  int rc = 0;
  for (int i = 0; i < m->nlocal; i++) rc |= queue_join_rank(c, m, m->ranks[i]);
  if (m->nlocal == 0) rc |= queue_join_rank(c, m, AH_COORD_NO_RANK);
  return rc;
}

static int queue_publish(ah_coord_t *c, const client_pub_t *pb) {
  uint8_t p[8 + AH_COORD_KEYSEG_BYTES];
  ah_coord_put_u64(p, pb->seq);
  memcpy(p + 8, pb->keyseg, AH_COORD_KEYSEG_BYTES);
  return buf_put_msg(&c->outq, AH_MSG_PUBLISH, p, sizeof p);
}

/* Drops acknowledged publishes. Caller holds mu. */
static void pubs_ack(ah_coord_t *c, uint64_t upto) {
  while (c->pub_head < c->npubs && c->pubs[c->pub_head].seq <= upto) c->pub_head++;
  if (c->pub_head == c->npubs) c->pub_head = c->npubs = 0;
}

/* Connects and runs the handshake, all before one deadline. Returns 0 with fd_p and last_pub_p
 * set, or -1 with err filled. Note that the hub proves it knows the secret too (WELCOME carries
 * its own MAC over both nonces), so a client never takes segments from an impostor. */
static int client_handshake(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, char *err,
                            size_t errlen) {
  char nerr[AH_NET_ERR_LEN];
  uint64_t deadline = ah_coord_now_ns() + (uint64_t)c->o.connect_ms * 1000000ull;
  int fd = -1;
  if (ah_coord_net_connect(nerr, (struct sockaddr *)&c->ss, c->sl, deadline, &fd) != AH_NET_OK) {
    snprintf(err, errlen, "%.200s", nerr);
    return -1;
  }
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_t h;
  char perr[200];
  if (ah_coord_net_read_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "waiting for the hub's HELLO: %.200s", nerr);
    goto fail;
  }
  if (ah_coord_hdr_decode(f, &h, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "bad HELLO from the hub: %.200s", perr);
    goto fail;
  }
  if (h.type != AH_MSG_HELLO) {
    snprintf(err, errlen, "bad HELLO from the hub: message type %u where HELLO (%u) belongs",
             h.type, AH_MSG_HELLO);
    goto fail;
  }
  uint8_t nonce_h[32];
  if (ah_coord_net_read_full(nerr, fd, nonce_h, 32, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "reading the hub's HELLO: %.200s", nerr);
    goto fail;
  }
  uint8_t auth[72];
  if (ah_coord_random(auth, 32) != 0) {
    snprintf(err, errlen, "no random bytes for the nonce (RAND_bytes failed)");
    goto fail;
  }
  ah_coord_put_u64(auth + 32, c->client_id);
  if (ah_coord_mac(c->stamp.secret, "autoha-client", nonce_h, auth, c->client_id, auth + 40) != 0) {
    snprintf(err, errlen, "HMAC-SHA256 failed in libcrypto");
    goto fail;
  }
  ah_coord_hdr_encode(AH_MSG_AUTH, sizeof auth, f);
  memcpy(f + AH_COORD_HDR_BYTES, auth, sizeof auth);
  if (ah_coord_net_write_full(nerr, fd, f, AH_COORD_HDR_BYTES + sizeof auth, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "sending AUTH: %.200s", nerr);
    goto fail;
  }
  if (ah_coord_net_read_full(nerr, fd, f, AH_COORD_HDR_BYTES, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "waiting for WELCOME: %.200s (does the hub have another job's secret?)", nerr);
    goto fail;
  }
  if (ah_coord_hdr_decode(f, &h, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "bad WELCOME from the hub: %.200s", perr);
    goto fail;
  }
  if (h.type != AH_MSG_WELCOME) {
    snprintf(err, errlen, "bad WELCOME from the hub: message type %u where WELCOME (%u) belongs",
             h.type, AH_MSG_WELCOME);
    goto fail;
  }
  uint8_t wel[40], want[32];
  if (ah_coord_net_read_full(nerr, fd, wel, 40, deadline) != AH_NET_OK) {
    snprintf(err, errlen, "reading WELCOME: %.200s", nerr);
    goto fail;
  }
  uint64_t last_pub = ah_coord_get_u64(wel + 32);
  if (ah_coord_mac(c->stamp.secret, "autoha-hub", auth, nonce_h, last_pub, want) != 0 ||
      !ah_coord_mac_equal(want, wel)) {
    snprintf(err, errlen, "the hub failed to prove it knows the job secret (impostor or another "
             "job's hub)");
    goto fail;
  }
  *fd_p = fd;
  *last_pub_p = last_pub;
  return 0;
fail:
  close(fd);
  return -1;
}

/* Installs a fresh connection: rebuilds the outgoing bytes from the state (JOIN since the last
 * delivered sequence number of every communicator, then every unacknowledged publish). */
static int client_install(ah_coord_t *c, int fd, uint64_t last_pub) {
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
  if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return -1;
  }
  pthread_mutex_lock(&c->wmu);
  c->fd = fd;
  c->want_out = 0;
  c->rlen = 0;
  c->w.off = c->w.len = 0;
  c->last_rx_ns = ah_coord_now_ns();
  atomic_store(&c->last_tx_ns, c->last_rx_ns);
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  pubs_ack(c, last_pub);
  c->outq.off = c->outq.len = 0;
  for (int i = 0; i < c->ncomms; i++) rc |= queue_join(c, &c->comms[i]);
  for (size_t i = c->pub_head; i < c->npubs; i++) rc |= queue_publish(c, &c->pubs[i]);
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&c->wmu);
  atomic_fetch_add(&c->connects, 1);
  client_wake(c);
  return rc;
}

static void client_drop(ah_coord_t *c) {
  pthread_mutex_lock(&c->wmu);
  if (c->fd >= 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
  }
  pthread_mutex_unlock(&c->wmu);
}

static void client_interest(ah_coord_t *c, int want_out) {
  if (c->want_out == want_out || c->fd < 0) return;
  struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.fd = c->fd};
  epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

/* Sends what is queued; wmu held. Returns 0 when everything went, 1 when bytes wait for the socket
 * (the I/O thread arms EPOLLOUT; another thread leaves that to it), -1 when the connection failed. */
static int flush_locked(ah_coord_t *c, int io_thread, char *why, size_t whylen) {
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (c->outq.len > c->outq.off) {
    rc = buf_put(&c->w, c->outq.b + c->outq.off, c->outq.len - c->outq.off);
    c->outq.off = c->outq.len = 0;
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    snprintf(why, whylen, "out of memory queueing messages");
    return -1;
  }
  while (c->w.off < c->w.len) {
    ssize_t r = send(c->fd, c->w.b + c->w.off, c->w.len - c->w.off, MSG_NOSIGNAL);
    if (r > 0) {
      c->w.off += (size_t)r;
      atomic_store(&c->last_tx_ns, ah_coord_now_ns());
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (io_thread) client_interest(c, 1);
      return 1;
    }
    snprintf(why, whylen, "send(): %s", r < 0 ? strerror(errno) : "0 bytes");
    return -1;
  }
  c->w.off = c->w.len = 0;
  if (io_thread) client_interest(c, 0);
  return 0;
}

/* I/O thread: sends what is queued. Returns 0, or -1 when the connection failed. */
static int client_flush(ah_coord_t *c, char *why, size_t whylen) {
  pthread_mutex_lock(&c->wmu);
  int rc = c->fd >= 0 ? flush_locked(c, 1, why, whylen) : 0;
  pthread_mutex_unlock(&c->wmu);
  return rc < 0 ? -1 : 0;
}

/* Application thread, after queueing: sends at once when the socket is free, else (or when bytes
 * remain, or on an error the I/O thread will meet too) wakes the I/O thread. Never blocks on the
 * network: the socket is non-blocking and the lock is only tried. */
static void client_send_now(ah_coord_t *c) {
  char why[64];
  if (pthread_mutex_trylock(&c->wmu) != 0) {
    client_wake(c);
    return;
  }
  int rc = c->fd >= 0 ? flush_locked(c, 0, why, sizeof why) : 1;
  pthread_mutex_unlock(&c->wmu);
  if (rc != 0) client_wake(c);
}

static int client_w_empty(ah_coord_t *c) {
  pthread_mutex_lock(&c->wmu);
  int empty = c->w.off == c->w.len;
  pthread_mutex_unlock(&c->wmu);
  return empty;
}

/* Note that a VERDICT with an unknown value is refused with one log line and ignored (the rank
 * keeps waiting; the hub's replay or the hub-gone path ends the wait), like a bad segment. */
static void client_on_verdict(ah_coord_t *c, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  uint32_t v = ah_coord_get_u32(p + 8);
  ah_coord_mismatch_t mm = {ah_coord_get_u32(p + 12), ah_coord_get_u32(p + 16), ah_coord_get_u32(p + 20),
                            ah_coord_get_u32(p + 24)};
  if (v != AH_COORD_VERDICT_COMPLETE && v != AH_COORD_VERDICT_ABANDONED && v != AH_COORD_VERDICT_MISMATCH) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR, "coordinator client: ignored a verdict from hub %s: comm "
                  "%016llx verdict %u out of range", c->addr, (unsigned long long)comm, v);
    return;
  }
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm && c->comms[i].verdict == AH_COORD_VERDICT_NONE) {
      c->comms[i].verdict = (int)v;
      c->comms[i].mm = mm;
    }
  pthread_mutex_unlock(&c->mu);
}

static void client_on_segment(ah_coord_t *c, const uint8_t *p) {
  char err[200];
  uint64_t seq = ah_coord_get_u64(p);
  ah_key_t k;
  ah_segment_t s;
  uint64_t comm = ah_coord_get_u64(p + 8);
  int bad = ah_coord_keyseg_unpack(p + 8, &k, &s, err, sizeof err);
  int deliver = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++) {
    client_comm_t *m = &c->comms[i];
    if (m->comm != comm) continue;
    if (seq <= m->last_seq) break; /* a replay already delivered */
    if (seq != m->last_seq + 1)
      ah_log(AH_LOG_WARN, "coordinator client: comm %016llx segment %llu arrived after %llu",
             (unsigned long long)m->comm, (unsigned long long)seq,
             (unsigned long long)m->last_seq);
    m->last_seq = seq;
    deliver = !bad;
    break;
  }
  pthread_mutex_unlock(&c->mu);
  if (bad) {
    ah_log(AH_LOG_ERROR, "coordinator client: ignored a segment from hub %s: %s", c->addr, err);
    return;
  }
  if (deliver && c->deliver) c->deliver(c->arg, &k, &s);
}

/* Reads what the socket holds and handles every complete frame. Returns 0, or -1 with why set when
 * the connection must be dropped. Note that one read(2) per wake-up takes many frames at once (a
 * replay, or a burst of segments): at 1,024 clients per hub the syscalls per segment are what the
 * fan-out costs. */
static int client_read(ah_coord_t *c, char *why, size_t whylen) {
  char err[200];
  ssize_t r;
  while ((r = read(c->fd, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen)) < 0 && errno == EINTR) {
  }
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (r <= 0) {
    snprintf(why, whylen, "%s", r == 0 ? "the hub closed the connection" : strerror(errno));
    return -1;
  }
  c->rlen += (size_t)r;
  c->last_rx_ns = ah_coord_now_ns();
  size_t off = 0;
  while (c->rlen - off >= AH_COORD_HDR_BYTES) {
    ah_coord_hdr_t h;
    if (ah_coord_hdr_decode(c->rbuf + off, &h, err, sizeof err) != 0) {
      snprintf(why, whylen, "refused a frame from the hub: %s", err);
      return -1;
    }
    if (c->rlen - off < AH_COORD_HDR_BYTES + h.len) break;
    const uint8_t *p = c->rbuf + off + AH_COORD_HDR_BYTES;
    off += AH_COORD_HDR_BYTES + h.len;
    switch (h.type) {
      case AH_MSG_SEGMENT: client_on_segment(c, p); break;
      case AH_MSG_ACK:
        pthread_mutex_lock(&c->mu);
        pubs_ack(c, ah_coord_get_u64(p));
        pthread_mutex_unlock(&c->mu);
        break;
      case AH_MSG_PONG: break;
      case AH_MSG_VERDICT: client_on_verdict(c, p); break;
      default:
        snprintf(why, whylen, "unexpected message type %u from the hub", h.type);
        return -1;
    }
  }
  memmove(c->rbuf, c->rbuf + off, c->rlen - off);
  c->rlen -= off;
  return 0;
}

static void client_sleep_ms(int ms) {
  struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* Reconnects until reconnect_ms have passed. Returns 0 when connected again, -1 when the hub is
 * gone (logged) or the client is stopping.
 *
 * Note that the loss itself is logged at info and becomes a warning only when the hub is still
 * unreachable after a second: at the end of every job the hub's process exits first and the
 * others lose their connection moments before they exit themselves, which is not worth a warning
 * on every rank. */
static int client_reconnect(ah_coord_t *c, const char *why) {
  ah_log(AH_LOG_INFO, "coordinator: connection to hub %s lost (%s); reconnecting", c->addr, why);
  int warned = 0;
  uint64_t start = ah_coord_now_ns();
  uint64_t limit = (uint64_t)c->o.reconnect_ms * 1000000ull;
  int backoff = 20;
  char err[300] = "no attempt made";
  while (!atomic_load(&c->stop) && !ah_coord_exiting()) {
    int fd;
    uint64_t last_pub;
    if (client_handshake(c, &fd, &last_pub, err, sizeof err) == 0) {
      if (client_install(c, fd, last_pub) == 0) {
        ah_log(AH_LOG_INFO, "coordinator: reconnected to hub %s after %.0f ms", c->addr,
               (double)(ah_coord_now_ns() - start) / 1e6);
        return 0;
      }
      snprintf(err, sizeof err, "cannot register the new connection (out of memory?)");
      client_drop(c);
    }
    if (ah_coord_now_ns() - start > limit) break;
    if (!warned && ah_coord_now_ns() - start > 1000000000ull) {
      warned = 1;
      ah_log(AH_LOG_WARN, "coordinator: connection to hub %s lost (%s) and not re-established "
             "after 1 s (%s); retrying for up to %d ms", c->addr, why, err, c->o.reconnect_ms);
    }
    client_sleep_ms(backoff);
    if (backoff < 500) backoff *= 2;
  }
  if (atomic_load(&c->stop) || ah_coord_exiting()) return -1;
  atomic_store(&c->alive, 0);
  ah_log(AH_LOG_ERROR, "coordinator: hub %s unreachable for %d ms (last error: %s); giving up — "
         "ranks waiting for a decision will fail over", c->addr, c->o.reconnect_ms, err);
  return -1;
}

/* When the next PING is due: after heartbeat_ms with the connection quiet both ways, or after
 * 5 x heartbeat_ms without sending (the hub drops a client silent for its idle_ms, 30 s). Note that
 * a connection carrying segments therefore pings rarely: traffic from the hub already proves it
 * alive, and at 1,024 clients the PINGs would cost the hub as much as a fan-out a second. */
static uint64_t client_ping_due(const ah_coord_t *c) {
  uint64_t hb = (uint64_t)c->o.heartbeat_ms * 1000000ull;
  uint64_t tx = atomic_load(&c->last_tx_ns);
  uint64_t quiet = (tx > c->last_rx_ns ? tx : c->last_rx_ns) + hb;
  uint64_t mute = tx + 5 * hb;
  return quiet < mute ? quiet : mute;
}

/* Milliseconds until the next heartbeat or liveness check is due (at least 1). Note that an idle
 * client wakes only for these — about once per heartbeat — so a host with many processes (or the
 * 1,024 clients of bench/coord_scale) is not kept busy by timers. */
static int client_timeout_ms(ah_coord_t *c) {
  uint64_t now = ah_coord_now_ns();
  uint64_t hb = client_ping_due(c);
  uint64_t dead = c->last_rx_ns + (uint64_t)c->o.dead_ms * 1000000ull;
  uint64_t next = hb < dead && client_w_empty(c) ? hb : dead; /* no PING behind queued bytes */
  if (next <= now) return 1;
  uint64_t ms = (next - now) / 1000000ull + 1;
  return ms > 1000 ? 1000 : (int)ms;
}

static void *client_main(void *arg) {
  ah_coord_t *c = arg;
  pthread_setname_np(pthread_self(), "autoha-coord"); /* visible in top -H, gdb, perf */
  struct epoll_event evs[4];
  char why[300];
  while (!atomic_load(&c->stop)) {
    int n = epoll_wait(c->epfd, evs, 4, client_timeout_ms(c));
    if (n < 0 && errno != EINTR) {
      ah_log(AH_LOG_ERROR, "coordinator: epoll_wait: %s; client stopped", strerror(errno));
      atomic_store(&c->alive, 0);
      break;
    }
    int lost = 0;
    why[0] = 0;
    for (int i = 0; i < n && !lost; i++) {
      if (evs[i].data.fd == c->efd) {
        uint64_t v;
        if (read(c->efd, &v, sizeof v) < 0) { /* spurious wake-up */
        }
        if (c->fd >= 0 && client_flush(c, why, sizeof why) != 0) lost = 1;
      } else if (evs[i].data.fd == c->fd) {
        if ((evs[i].events & EPOLLOUT) && client_flush(c, why, sizeof why) != 0) lost = 1;
        if (!lost && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP)) &&
            client_read(c, why, sizeof why) != 0)
          lost = 1;
      }
    }
    uint64_t now = ah_coord_now_ns();
    if (!lost && atomic_exchange(&c->cut_req, 0)) {
      snprintf(why, sizeof why, "cut on request");
      lost = 1;
    }
    if (!lost && now - c->last_rx_ns > (uint64_t)c->o.dead_ms * 1000000ull) {
      snprintf(why, sizeof why, "nothing heard for %d ms", c->o.dead_ms);
      lost = 1;
    }
    if (!lost && now >= client_ping_due(c) && client_w_empty(c)) {
      pthread_mutex_lock(&c->mu);
      int rc = buf_put_msg(&c->outq, AH_MSG_PING, NULL, 0);
      pthread_mutex_unlock(&c->mu);
      if (rc != 0 || client_flush(c, why, sizeof why) != 0) lost = 1;
    }
    if (lost) {
      client_drop(c);
      if (client_reconnect(c, why) != 0) break;
    }
  }
  return NULL;
}

ah_coord_t *ah_coord_client_open(const ah_coord_stamp_t *stamp, const char *addr,
                                 const ah_coord_client_opts_t *opts, ah_coord_deliver_fn deliver,
                                 void *arg) {
  char err[300];
  ah_coord_crypto_init();
  ah_coord_t *c = calloc(1, sizeof *c);
  if (!c) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory");
    return NULL;
  }
  c->stamp = *stamp;
  c->deliver = deliver;
  c->arg = arg;
  c->fd = c->epfd = c->efd = -1;
  if (opts) c->o = *opts;
  else ah_coord_client_opts_default(&c->o);
  if (addr) {
    if (ah_coord_net_addr_parse(err, addr, &c->ss, &c->sl) != AH_NET_OK) {
      ah_log(AH_LOG_ERROR, "coordinator: invalid hub address %s", err);
      goto undo_alloc;
    }
  } else if (stamp->family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&c->ss;
    in->sin_family = AF_INET;
    in->sin_port = htons(stamp->port);
    memcpy(&in->sin_addr, stamp->addr, 4);
    c->sl = sizeof *in;
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&c->ss;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(stamp->port);
    memcpy(&in6->sin6_addr, stamp->addr, 16);
    c->sl = sizeof *in6;
  }
  ah_coord_net_addr_format((struct sockaddr *)&c->ss, c->addr, sizeof c->addr);
  if (ah_coord_random(&c->client_id, sizeof c->client_id) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: no random bytes for the client id (RAND_bytes failed)");
    goto undo_alloc;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->wmu, NULL);
  c->epfd = epoll_create1(EPOLL_CLOEXEC);
  c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->efd};
  if (c->epfd < 0 || c->efd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->efd, &ev) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: epoll/eventfd setup: %s", strerror(errno));
    goto undo_fds;
  }
  int fd;
  uint64_t last_pub;
  if (client_handshake(c, &fd, &last_pub, err, sizeof err) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot join hub %s: %s", c->addr, err);
    goto undo_fds;
  }
  if (client_install(c, fd, last_pub) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot register the connection to %s", c->addr);
    client_drop(c);
    goto undo_fds;
  }
  atomic_store(&c->alive, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int rc = pthread_create(&c->thr, &attr, client_main, c);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: pthread_create: %s", strerror(rc));
    client_drop(c);
    goto undo_fds;
  }
  return c;
undo_fds:
  if (c->efd >= 0) close(c->efd);
  if (c->epfd >= 0) close(c->epfd);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
undo_alloc:
  free(c);
  return NULL;
}

void ah_coord_client_close(ah_coord_t *c) {
  if (!c) return;
  atomic_store(&c->stop, 1);
  client_wake(c);
  pthread_join(c->thr, NULL);
  client_drop(c);
  close(c->efd);
  close(c->epfd);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
  for (int i = 0; i < c->ncomms; i++) free(c->comms[i].ranks);
  free(c->comms);
  free(c->pubs);
  free(c->outq.b);
  free(c->w.b);
  free(c);
}

void ah_coord_client_cut(ah_coord_t *c) {
  atomic_store(&c->cut_req, 1);
  client_wake(c);
}

size_t ah_coord_client_unacked(ah_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->npubs - c->pub_head;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int ah_coord_client_connects(ah_coord_t *c) { return atomic_load(&c->connects); }

/* Returns 0, or -1 when the hub is gone, the rank is out of range or memory ran out (logged).
 * Note that joining a rank twice asks for nothing new: the hub replays only what this process has
 * not seen. */
static int client_join(ah_coord_t *c, uint64_t comm, int nranks, uint32_t rank,
                       const ah_coord_digest_t *digest) {
  if (!atomic_load(&c->alive)) return -1;
  if (nranks <= 0 || (uint32_t)nranks > AH_COORD_MAX_RANKS ||
      (rank != AH_COORD_NO_RANK && rank >= (uint32_t)nranks)) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot join rank %d of %d ranks of comm %016llx (out of "
           "range)", (int)rank, nranks, (unsigned long long)comm);
    return -1;
  }
  int rc = 0, dup = 0;
  pthread_mutex_lock(&c->mu);
  client_comm_t *m = NULL;
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm) m = &c->comms[i];
  if (!m) {
    if (c->ncomms == c->capcomms) {
      int cap = c->capcomms ? 2 * c->capcomms : 8;
      client_comm_t *cs = realloc(c->comms, (size_t)cap * sizeof *cs);
      if (!cs) rc = -1;
      else {
        c->comms = cs;
        c->capcomms = cap;
      }
    }
    if (rc == 0) {
      m = &c->comms[c->ncomms++];
      memset(m, 0, sizeof *m);
      m->comm = comm;
    }
  }
  if (m) {
    m->nranks = (uint32_t)nranks;
    if (digest) m->digest = *digest;
    dup = rank == AH_COORD_NO_RANK;
    for (int i = 0; i < m->nlocal; i++) dup |= m->ranks[i] == rank;
    if (!dup && m->nlocal == m->caplocal) {
      int cap = m->caplocal ? 2 * m->caplocal : 4;
      uint32_t *rs = realloc(m->ranks, (size_t)cap * sizeof *rs);
      if (!rs) rc = -1;
      else {
        m->ranks = rs;
        m->caplocal = cap;
      }
    }
    if (rc == 0 && !dup) m->ranks[m->nlocal++] = rank;
    if (rc == 0) rc = queue_join_rank(c, m, rank);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory joining comm %016llx", (unsigned long long)comm);
    return -1;
  }
  client_wake(c);
  return 0;
}

int ah_coord_join_rank(ah_coord_t *c, uint64_t comm, int nranks, int rank,
                       const ah_coord_digest_t *digest) {
  if (rank < 0) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot join rank %d of comm %016llx (out of range)", rank,
           (unsigned long long)comm);
    return -1;
  }
  return client_join(c, comm, nranks, (uint32_t)rank, digest);
}

int ah_coord_join(ah_coord_t *c, uint64_t comm, int nranks) {
  return client_join(c, comm, nranks, AH_COORD_NO_RANK, NULL);
}

int ah_coord_verdict(ah_coord_t *c, uint64_t comm) {
  int v = AH_COORD_VERDICT_NONE;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm) v = c->comms[i].verdict;
  pthread_mutex_unlock(&c->mu);
  return v;
}

int ah_coord_mismatch(ah_coord_t *c, uint64_t comm, ah_coord_mismatch_t *m_p) {
  int found = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm && c->comms[i].verdict == AH_COORD_VERDICT_MISMATCH) {
      *m_p = c->comms[i].mm;
      found = 1;
    }
  pthread_mutex_unlock(&c->mu);
  return found;
}

void ah_coord_leave(ah_coord_t *c, uint64_t comm) {
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm) {
      free(c->comms[i].ranks);
      c->comms[i] = c->comms[--c->ncomms];
      uint8_t p[8];
      ah_coord_put_u64(p, comm);
      if (buf_put_msg(&c->outq, AH_MSG_LEAVE, p, 8) != 0)
        ah_log(AH_LOG_WARN, "coordinator: out of memory sending LEAVE for comm %016llx",
               (unsigned long long)comm);
      break;
    }
  pthread_mutex_unlock(&c->mu);
  client_wake(c);
}

/* Returns 0, or -1 when the hub is gone or memory ran out. Note that the segment is kept until the
 * hub acknowledges it, so a publish made while the connection is down is sent after reconnecting. */
int ah_coord_publish(ah_coord_t *c, const ah_key_t *key, const ah_segment_t *seg) {
  if (!atomic_load(&c->alive)) return -1;
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  if (c->npubs == c->cappubs) {
    if (c->pub_head > 0) {
      memmove(c->pubs, c->pubs + c->pub_head, (c->npubs - c->pub_head) * sizeof *c->pubs);
      c->npubs -= c->pub_head;
      c->pub_head = 0;
    }
    if (c->npubs == c->cappubs) {
      size_t cap = c->cappubs ? 2 * c->cappubs : 64;
      client_pub_t *ps = realloc(c->pubs, cap * sizeof *ps);
      if (!ps) rc = -1;
      else {
        c->pubs = ps;
        c->cappubs = cap;
      }
    }
  }
  if (rc == 0) {
    client_pub_t *pb = &c->pubs[c->npubs++];
    pb->seq = ++c->next_pub;
    ah_coord_keyseg_pack(key, seg, pb->keyseg);
    rc = queue_publish(c, pb);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory publishing a segment of comm %016llx",
           (unsigned long long)key->comm);
    return -1;
  }
  client_send_now(c);
  return 0;
}

int ah_coord_alive(const ah_coord_t *c) { return c && atomic_load(&c->alive); }

/* ---- the process's coordinators, one per stamp ---- */
static pthread_mutex_t connect_mu = PTHREAD_MUTEX_INITIALIZER;
static ah_coord_t *connect_list;

static int stamp_same(const ah_coord_stamp_t *a, const ah_coord_stamp_t *b) {
  return a->family == b->family && a->port == b->port && memcmp(a->addr, b->addr, 16) == 0 &&
         memcmp(a->secret, b->secret, 16) == 0;
}

/* Returns the process's coordinator for this stamp, or NULL (logged). Note that
 * AUTOHA_COORD_ADDR, when it names a non-zero port, replaces the stamp's address (a hub behind
 * NAT or a forwarded port); the secret always comes from the stamp. A coordinator whose hub is
 * gone is not reused. A lost hub is retried for 10 s (ah_coord_client_opts_default) before
 * ah_coord_alive() turns 0. */
/* In a child made by fork(), the coordinators copied from the parent have no I/O thread: they are
 * marked gone (a communicator mapped to one runs NCCL's own choices instead of waiting forever) and forgotten,
 * so the child's own communicators connect afresh. */
static void connect_atfork_child(void) {
  for (ah_coord_t *c = connect_list; c; c = c->next) atomic_store(&c->alive, 0);
  connect_list = NULL;
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  connect_mu = fresh; /* another thread may have held it at the fork */
}

static void connect_atfork_register(void) { pthread_atfork(NULL, NULL, connect_atfork_child); }

ah_coord_t *ah_coord_connect(const ah_coord_stamp_t *stamp, const ah_coord_setup_t *setup,
                             ah_coord_deliver_fn deliver, void *arg) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, connect_atfork_register);
  pthread_mutex_lock(&connect_mu);
  ah_coord_t *c;
  for (c = connect_list; c; c = c->next)
    if (stamp_same(&c->stamp, stamp) && atomic_load(&c->alive)) break;
  if (!c) {
    ah_coord_client_opts_t o;
    ah_coord_client_opts_default(&o);
    const char *addr = setup && setup->addr && *setup->addr ? setup->addr : NULL;
    c = ah_coord_client_open(stamp, addr, &o, deliver, arg);
    if (c) {
      c->next = connect_list;
      connect_list = c;
    }
  }
  pthread_mutex_unlock(&connect_mu);
  return c;
}
