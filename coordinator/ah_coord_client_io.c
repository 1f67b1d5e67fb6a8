/* ah_coord_client_io.c: the client's I/O thread — it owns the socket: the handshake (both sides
 * prove the secret), installing a connection (re-joining every communicator since its last
 * delivered segment and resending unacknowledged publishes), reading frames and delivering
 * segments and verdicts in order, heartbeats, and reconnecting with backoff after a cut. */
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

#include "ah_coord_audit.h"
#include "ah_coord_client_internal.h"
#include "ah_log.h"

/* Note that with the host relay on, the election comes first: through the host's relay when
 * another process holds it, else as the relay itself (then directly); a relay that cannot be used
 * (it fails the handshake, or is stuck) costs one line and a direct connection, never the job. */
int ah_coord_client_handshake(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, char *err,
                              size_t errlen) {
  if (c->o.relay && c->lfd < 0) {
    char rerr[300];
    int r = ah_coord_client_relay_elect(c, fd_p, last_pub_p, rerr, sizeof rerr);
    if (r == 0) return 0;
    if (r < 0)
      AH_LOG_CAPPED(5, AH_LOG_INFO, "coordinator: %s; connecting to hub %s directly", rerr,
                    c->addr);
  }
  int rc = ah_coord_dial((const struct sockaddr *)&c->ss, c->sl, c->stamp.secret, c->client_id,
                         c->o.connect_ms, fd_p, NULL, last_pub_p, err, errlen);
  int e = errno; /* ECONNREFUSED: nothing listens at the hub's address (client_reconnect) */
  if (rc != 0 && c->lfd >= 0)
    ah_coord_client_relay_release(c); /* no relay without a hub: let another try */
  errno = e;
  return rc;
}

/* Installs a fresh connection: rebuilds the outgoing bytes from the state (JOIN since the last
 * delivered sequence number of every communicator, then every unacknowledged publish). */
int ah_coord_client_install(ah_coord_t *c, int fd, uint64_t last_pub) {
  /* Through a relay the socket is watched for its end only: its bytes are announced by the doorbell
   * the relay rings once for all its processes (edge-triggered: it is never read, every ring wakes). */
  uint32_t fd_ev = c->bell >= 0 ? EPOLLRDHUP : EPOLLIN;
  struct epoll_event ev = {.events = fd_ev, .data.fd = fd};
  struct epoll_event bev = {.events = EPOLLIN | EPOLLET, .data.fd = c->bell};
  if (epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
    close(fd);
    return -1;
  }
  if (c->bell >= 0 && epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->bell, &bev) != 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    return -1;
  }
  pthread_mutex_lock(&c->rmu);
  c->rlen = 0;
  pthread_mutex_unlock(&c->rmu);
  pthread_mutex_lock(&c->wmu);
  c->fd = fd;
  c->fd_ev = fd_ev;
  atomic_store(&c->up, 1);
  c->want_out = 0;
  c->w.off = c->w.len = 0;
  uint64_t now = ah_coord_now_ns();
  atomic_store(&c->last_rx_ns, now);
  atomic_store(&c->last_tx_ns, now);
  c->last_ping_ns = 0;
  c->installed_ns = now;
  int rc = 0;
  pthread_mutex_lock(&c->mu);
  ah_coord_client_pubs_ack(c, last_pub);
  c->outq.off = c->outq.len = 0;
  for (int i = 0; i < c->ncomms; i++) rc |= ah_coord_client_queue_join(c, &c->comms[i]);
  for (size_t i = c->pub_head; i < c->npubs; i++)
    rc |= ah_coord_client_queue_publish(c, &c->pubs[i]);
  rc |= ah_coord_client_queue_dir_all(c);
  pthread_mutex_unlock(&c->mu);
  pthread_mutex_unlock(&c->wmu);
  atomic_fetch_add(&c->connects, 1);
  ah_coord_client_wake(c);
  return rc;
}

void ah_coord_client_drop(ah_coord_t *c) {
  atomic_store(&c->up, 0);
  ah_coord_client_relay_release(
      c); /* the host's processes lost their channels with this connection */
  ah_coord_client_ring_set(c, NULL); /* and the partial frame of this connection is dropped */
  pthread_mutex_lock(&c->wmu);
  if (c->fd >= 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->fd = -1;
  }
  if (c->bell >= 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->bell, NULL);
    close(c->bell);
    c->bell = -1;
  }
  pthread_mutex_unlock(&c->wmu);
}

static void client_interest(ah_coord_t *c, int want_out) {
  if (c->want_out == want_out || c->fd < 0) return;
  struct epoll_event ev = {.events = c->fd_ev | (want_out ? EPOLLOUT : 0), .data.fd = c->fd};
  epoll_ctl(c->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

/* Sends what is queued; wmu held. Returns 0 when everything went, 1 when bytes wait for the socket
 * (the I/O thread arms EPOLLOUT; another thread leaves that to it), -1 when the connection failed. */
static int client_flush_locked(ah_coord_t *c, int io_thread, char *why, size_t whylen) {
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  if (c->outq.len > c->outq.off) {
    rc = ah_coord_client_buf_put(&c->w, c->outq.b + c->outq.off, c->outq.len - c->outq.off);
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
  int rc = c->fd >= 0 ? client_flush_locked(c, 1, why, whylen) : 0;
  pthread_mutex_unlock(&c->wmu);
  return rc < 0 ? -1 : 0;
}

/* Application thread, after queueing: sends at once when the socket is free, else (or when bytes
 * remain, or on an error the I/O thread will meet too) wakes the I/O thread. Never blocks on the
 * network: the socket is non-blocking and the lock is only tried. */
void ah_coord_client_send_now(ah_coord_t *c) {
  char why[64];
  if (pthread_mutex_trylock(&c->wmu) != 0) {
    ah_coord_client_wake(c);
    return;
  }
  int rc = c->fd >= 0 ? client_flush_locked(c, 0, why, sizeof why) : 1;
  pthread_mutex_unlock(&c->wmu);
  if (rc != 0) ah_coord_client_wake(c);
}

int ah_coord_client_send_sync(ah_coord_t *c) {
  char why[64];
  if (pthread_mutex_trylock(&c->wmu) != 0) return 0;
  int rc = c->fd >= 0 ? client_flush_locked(c, 0, why, sizeof why) : -1;
  pthread_mutex_unlock(&c->wmu);
  return rc != 1; /* sent, or nothing can be */
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
  ah_coord_mismatch_t mm = {ah_coord_get_u32(p + 12), ah_coord_get_u32(p + 16),
                            ah_coord_get_u32(p + 20), ah_coord_get_u32(p + 24)};
  if (v != AH_COORD_VERDICT_COMPLETE && v != AH_COORD_VERDICT_ABANDONED &&
      v != AH_COORD_VERDICT_MISMATCH) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR,
                  "coordinator client: ignored a verdict from hub %s: comm "
                  "%016llx verdict %u out of range",
                  c->addr, (unsigned long long)comm, v);
    return;
  }
  int news = 0;
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm && c->comms[i].verdict == AH_COORD_VERDICT_NONE) {
      c->comms[i].verdict = (int)v;
      c->comms[i].mm = mm;
      news = 1;
    }
  pthread_mutex_unlock(&c->mu);
  if (news) ah_coord_client_notify(c); /* the ranks asleep at their first call (ah_coord_wait) */
}

static _Atomic(ah_coord_mintime_fn) mintime_fn;
void ah_coord_set_mintime_handler(ah_coord_mintime_fn fn) { atomic_store(&mintime_fn, fn); }

/* The shortest duration of a search call, for the leader's search (the shim's handler). A malformed
 * one is refused by name and ignored: the search counts the call as lost. */
static void client_on_min_time(ah_coord_t *c, const uint8_t *p) {
  char err[160];
  ah_coord_time_t t;
  if (ah_coord_time_unpack(AH_MSG_MIN_TIME, p, &t, err, sizeof err) != 0) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR, "coordinator client: ignored a search time from hub %s: %s",
                  c->addr, err);
    return;
  }
  ah_coord_mintime_fn fn = atomic_load(&mintime_fn);
  if (fn) fn(t.comm, t.coll, t.bin, t.index, (double)t.us, t.reported, t.nranks);
}

static _Atomic(ah_coord_audit_fn) audit_fn;
void ah_coord_set_audit_handler(ah_coord_audit_fn fn) { atomic_store(&audit_fn, fn); }

/* The hub's straggler audit: handed to the shim key by key. A malformed one is refused by name and
 * ignored (the calls are timed as usual). */
static void client_on_audit(ah_coord_t *c, const uint8_t *p) {
  char err[160];
  ah_audit_t a;
  uint64_t comm = ah_coord_get_u64(p);
  if (ah_audit_unpack(p + 8, &a, err, sizeof err) != 0) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR,
                  "coordinator client: ignored an audit from hub %s: comm %016llx: %s", c->addr,
                  (unsigned long long)comm, err);
    return;
  }
  ah_coord_audit_fn fn = atomic_load(&audit_fn);
  for (int i = 0; fn && i < a.nkeys; i++)
    fn(comm, a.keys[i].coll, a.keys[i].bin, a.keys[i].from, a.calls);
}

static _Atomic(ah_coord_finding_fn) finding_fn;
void ah_coord_set_finding_handler(ah_coord_finding_fn fn) { atomic_store(&finding_fn, fn); }
ah_coord_finding_fn ah_coord_finding_handler(void) { return atomic_load(&finding_fn); }

/* The hub's diagnosis of a communicator of this process: one line on this process's stderr (an
 * error for a hang, info when it advances again). A malformed finding is refused by name. */
static void client_on_finding(ah_coord_t *c, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  ah_finding_t f;
  char err[160];
  if (ah_finding_unpack(p + 8, &f, err, sizeof err) != 0) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR,
                  "coordinator client: ignored a finding from hub %s: comm %016llx: "
                  "%s",
                  c->addr, (unsigned long long)comm, err);
    return;
  }
  /* a standing finding told again (this process joined while it stood) is handled once */
  uint64_t d = ah_coord_fnv64(p, 8 + AH_FINDING_BYTES, AH_COORD_FNV_BASIS);
  for (uint64_t i = 0; i < c->nseen_findings && i < 8; i++)
    if (c->seen_findings[i] == d) return;
  c->seen_findings[c->nseen_findings++ % 8] = d;
  int kind = f.kind;
  /* The process's own handling first (the report's note, AUTOHA_HEALTH_CMD, the abort action), then
   * the line: a launcher that ends the job on the line leaves no process without its alert sent */
  atomic_fetch_add(&c->findings, 1);
  ah_coord_finding_fn fn = ah_coord_finding_handler();
  if (fn) fn(comm, &f);
  ah_log(kind == AH_FINDING_RESUMED || kind == AH_FINDING_RECOVERED || kind == AH_FINDING_LINK_OK
             ? AH_LOG_INFO
         : kind == AH_FINDING_STRAGGLER || kind == AH_FINDING_SLOW_LINK ? AH_LOG_WARN
                                                                        : AH_LOG_ERROR,
         "%s", f.text);
}

/* A DIR_VAL answers the waiting get with its request number (and key); one for a get that has
 * timed out meanwhile finds nobody and is dropped. A malformed one is refused by name and ignored
 * (the caller times out); the connection stays. */
static void client_on_dir_val(ah_coord_t *c, const uint8_t *p, uint32_t len) {
  char err[200];
  int vlen = ah_coord_dir_vlen(p, len, 8 + AH_COORD_DIR_KEY, err, sizeof err);
  if (vlen < 0) {
    AH_LOG_CAPPED(5, AH_LOG_ERROR, "coordinator client: ignored a directory value from hub %s: %s",
                  c->addr, err);
    return;
  }
  uint64_t req = ah_coord_get_u64(p);
  pthread_mutex_lock(&c->mu);
  for (client_dir_wait_t *w = c->dir_waits; w; w = w->next)
    if (w->req == req && !w->done && memcmp(w->key, p + 8, AH_COORD_DIR_KEY) == 0) {
      size_t n = (size_t)vlen < w->cap ? (size_t)vlen : w->cap;
      if (n) memcpy(w->buf, p + AH_COORD_DIR_VAL_FIXED, n);
      w->len = vlen;
      w->done = 1;
      pthread_cond_broadcast(&c->dir_cv);
      break;
    }
  pthread_mutex_unlock(&c->mu);
}

/* A DIR_ABSENT marks the waiting get answered "not stored" (a DIR_VAL may still follow within its
 * wait); the waiter is woken, since a get whose deadline has passed waits only for this. */
static void client_on_dir_absent(ah_coord_t *c, const uint8_t *p) {
  uint64_t req = ah_coord_get_u64(p);
  pthread_mutex_lock(&c->mu);
  for (client_dir_wait_t *w = c->dir_waits; w; w = w->next)
    if (w->req == req && !w->done && memcmp(w->key, p + 8, AH_COORD_DIR_KEY) == 0) {
      w->absent = 1;
      pthread_cond_broadcast(&c->dir_cv);
      break;
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
             (unsigned long long)m->comm, (unsigned long long)seq, (unsigned long long)m->last_seq);
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
  if (deliver)
    ah_coord_client_notify(c); /* a rank asleep in ah_coord_wait looks at its schedule again */
}

/* Reads what the socket holds and handles every complete frame. Returns 1 when the read filled the
 * buffer (more may wait), 0 when the socket was drained, or -1 with why set when the connection must
 * be dropped. Note that one read(2) per wake-up takes many frames at once (a replay, or a burst of
 * segments): at 1,024 clients per hub the syscalls per segment are what the fan-out costs. A stream
 * socket's read returning less than asked means it held no more, so a doorbell's wake-up (which
 * needs the socket drained) costs no read that finds nothing. */
static int client_parse(ah_coord_t *c, char *why, size_t whylen);
static int client_read_locked(ah_coord_t *c, char *why, size_t whylen) {
  ssize_t r;
  size_t room = sizeof c->rbuf - c->rlen;
  while ((r = read(c->fd, c->rbuf + c->rlen, room)) < 0 && errno == EINTR) {}
  if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (r <= 0) {
    snprintf(why, whylen, "%s", r == 0 ? "the hub closed the connection" : strerror(errno));
    return -1;
  }
  c->rlen += (size_t)r;
  if (client_parse(c, why, whylen) != 0) return -1;
  return (size_t)r == room;
}

static int client_read(ah_coord_t *c, char *why, size_t whylen) {
  pthread_mutex_lock(&c->rmu);
  int rc = client_read_locked(c, why, whylen);
  pthread_mutex_unlock(&c->rmu);
  return rc;
}

/* Takes what this process's ring holds and handles every complete frame; rmu held. Returns 0, or
 * -1 with why set when the connection must be dropped. */
static int client_take(ah_coord_t *c, char *why, size_t whylen) {
  if (!c->ring) return 0;
  for (;;) {
    long n = ah_coord_client_ring_take(c, c->rbuf + c->rlen, sizeof c->rbuf - c->rlen);
    if (n < 0) {
      snprintf(why, whylen, "the host relay's ring is corrupt");
      return -1;
    }
    if (n == 0) return 0;
    c->rlen += (size_t)n;
    if (client_parse(c, why, whylen) != 0) return -1;
  }
}

/* Handles every complete frame in rbuf (bytes from the socket or the ring). Returns 0, or -1 with why
 * set when the connection must be dropped. */
static int client_parse(ah_coord_t *c, char *why, size_t whylen) {
  char err[200];
  atomic_store_explicit(&c->last_rx_ns, ah_coord_now_ns(), memory_order_relaxed);
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
        ah_coord_client_pubs_ack(c, ah_coord_get_u64(p));
        pthread_mutex_unlock(&c->mu);
        break;
      case AH_MSG_PONG: break;
      case AH_MSG_BYE:
        atomic_store(&c->hub_bye, 1);
        atomic_fetch_add(&c->byes, 1);
        break;
      case AH_MSG_VERDICT: client_on_verdict(c, p); break;
      case AH_MSG_FINDING: client_on_finding(c, p); break;
      case AH_MSG_DIR_VAL: client_on_dir_val(c, p, h.len); break;
      case AH_MSG_DIR_ABSENT: client_on_dir_absent(c, p); break;
      case AH_MSG_MIN_TIME: client_on_min_time(c, p); break;
      case AH_MSG_AUDIT: client_on_audit(c, p); break;
      case AH_MSG_RELAY_OPEN:
      case AH_MSG_RELAY_DATA:
      case AH_MSG_RELAY_CLOSE:
        if (ah_coord_client_relay_from_hub(c, h.type, p, h.len, why, whylen) != 0) return -1;
        break;
      default: snprintf(why, whylen, "unexpected message type %u from the hub", h.type); return -1;
    }
  }
  memmove(c->rbuf, c->rbuf + off, c->rlen - off);
  c->rlen -= off;
  ah_coord_client_relay_flush(
      c); /* a batch of the hub's frames: into each local process's ring, one ring */
  return 0;
}

/* Note that the relay rings the doorbell for segments only when they sit unread for a while: a
 * thread that needs one takes it from the ring here, on its own time, so a decision reaching a
 * host's processes wakes none of them. A ring the relay corrupted is handed to the I/O thread,
 * which drops the connection as it does for its own reads. */
int ah_coord_poll(ah_coord_t *c) {
  /* Not alive: the hub is gone, or this is a forked child (a data loader's worker), which must not
   * take its parent's segments out of the ring they share. */
  if (!c || !atomic_load(&c->alive)) return 0;
  if (pthread_mutex_trylock(&c->rmu) != 0) return 0; /* the I/O thread is taking them */
  client_ring_t *r = c->ring;
  int any = r && atomic_load_explicit(&r->head, memory_order_acquire) !=
                     atomic_load_explicit(&r->tail, memory_order_relaxed);
  char why[200];
  if (any && client_take(c, why, sizeof why) != 0) {
    AH_LOG_CAPPED(5, AH_LOG_WARN, "coordinator: %s (hub %s); reconnecting", why, c->addr);
    atomic_store(&c->cut_req, 1);
    ah_coord_client_wake(c);
  }
  pthread_mutex_unlock(&c->rmu);
  return any;
}

/* Whether a communicator of this process is joined at the hub now (ncclCommDestroy may leave
 * one while the client reconnects, so each message that depends on it reads it again). */
static int client_joined(ah_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  int joined = c->ncomms > 0;
  pthread_mutex_unlock(&c->mu);
  return joined;
}

/* Reconnects. Returns 0 when connected again, -1 when the hub is gone (logged) or the client is
 * stopping.
 *
 * Key choice: the hub is given up only when nothing has listened at its address for reconnect_ms
 * (every attempt refused: its process ended — it is a rank's, so the job is failing anyway). A
 * hub that does not answer (its process frozen by SIGSTOP or a debugger, starved, or its network
 * cut) is tried for the rest of the job, every LONG_RETRY_MS once reconnect_ms have passed, and
 * tuning and diagnosis resume when it answers. Giving that one up was worse than waiting: a rank
 * waiting for the leader's decision then ran NCCL's choice for the call while the leader, frozen
 * with the hub in rank 0's process, ran its own once thawed — the ranks disagreed on the call
 * (real NCCL hangs; 8 of 8 ranks failed on sim/ after a 20 s SIGSTOP of rank 0). The wait for a
 * decision stays bounded by AUTOHA_SYNC_TIMEOUT_S.
 *
 * Note that a loss after the hub's goodbye (every job's end: the hub's process exits first and
 * the others lose their connection moments before they exit themselves) is logged at info; one
 * without it is the one warning that the hub is gone, and a second later still unreachable is
 * info again. A process whose communicators were all destroyed (it left them at the hub) loses
 * nothing with the hub, however slowly it exits: it says so at info only — also when it destroys
 * them while reconnecting (the hub's process may exit while this one is still in
 * ncclCommDestroy), so the count is read again when a warning or an error would be said. */
/* A connection cut within QUICK_CUT_NS of coming up (the hub refused what this process sent, or
 * drops it at once) is followed by a pause before the next attempt, doubling at each such cut up to
 * QUICK_CUT_MAX_MS: every handshake of such a loop succeeds, so the attempts' own backoff never
 * applied, and a hub refusing one frame saw thousands of reconnections a second. */
#define QUICK_CUT_NS 2000000000ull
#define QUICK_CUT_MAX_MS 1000
/* Between attempts once reconnect_ms have passed. Short enough that a hub thawed after a long
 * freeze sees every process back well within its grace for a process gone after a stall of its
 * own (ah_coord_hub_health.c), cheap at any scale: one connect a second per process. */
#define LONG_RETRY_MS 1000

/* The one warning that the hub is gone: no goodbye came, its process died or its host went down
 * (or the network failed). */
static void client_hub_gone(ah_coord_t *c, const char *why) {
  atomic_store(&c->hub_lost, 1);
  ah_log(AH_LOG_WARN,
         "coordinator: hub %s is gone (%s) without its goodbye: its process died or froze, or "
         "its host or the network failed; reconnecting, the job goes on with the decisions it "
         "has",
         c->addr, why);
}

/* relayed: the lost connection went through the host's relay. Its end says only that the relay's
 * process ended (the process that was killed, or crashed, may be the relay's own): the hub is
 * said gone only if the first attempt after it, at once, cannot reach the hub either. asked: this
 * process cut it (the reason was warned where it was found): the hub is not gone. */
static int client_reconnect(ah_coord_t *c, const char *why, int relayed, int asked) {
  int warned = !client_joined(c) || atomic_load(&c->hub_bye); /* never warn then */
  int deferred = 0;
  if (warned) {
    atomic_store(&c->hub_lost, 1); /* the job's end, or nothing joined: no finding comes */
    ah_log(AH_LOG_INFO, "coordinator: connection to hub %s lost (%s); reconnecting", c->addr, why);
  } else if (asked) {
    ah_log(AH_LOG_INFO, "coordinator: connection to hub %s %s; reconnecting", c->addr, why);
  } else if (relayed) {
    deferred = 1;
    ah_log(AH_LOG_INFO,
           "coordinator: the host relay's channel to hub %s closed (%s): the relay's process "
           "ended; reconnecting",
           c->addr, why);
  } else {
    client_hub_gone(c, why);
  }
  uint64_t start = ah_coord_now_ns();
  uint64_t limit = (uint64_t)c->o.reconnect_ms * 1000000ull;
  int backoff = 20;
  if (c->installed_ns && start - c->installed_ns < QUICK_CUT_NS) {
    c->cut_backoff_ms = c->cut_backoff_ms ? c->cut_backoff_ms * 2 : 50;
    if (c->cut_backoff_ms > QUICK_CUT_MAX_MS) c->cut_backoff_ms = QUICK_CUT_MAX_MS;
    AH_LOG_CAPPED(5, AH_LOG_INFO,
                  "coordinator: connection to hub %s cut %.0f ms after it came up; next attempt "
                  "in %d ms",
                  c->addr, (double)(start - c->installed_ns) / 1e6, c->cut_backoff_ms);
    if (!atomic_load(&c->stop) && !ah_coord_exiting())
      ah_coord_client_sleep_us(c->cut_backoff_ms * 1000L);
  } else {
    c->cut_backoff_ms = 0;
  }
  char err[300] = "no attempt made";
  uint64_t refused_since = 0; /* every attempt since was refused (0: the last one was not) */
  int long_said = 0;
  while (!atomic_load(&c->stop) && !ah_coord_exiting()) {
    int fd;
    uint64_t last_pub;
    if (ah_coord_client_handshake(c, &fd, &last_pub, err, sizeof err) == 0) {
      if (ah_coord_client_install(c, fd, last_pub) == 0) {
        atomic_store(&c->hub_lost, 0);
        double s = (double)(ah_coord_now_ns() - start) / 1e9;
        if (long_said)
          ah_log(AH_LOG_WARN,
                 "coordinator: hub %s answers again after %.1f s; tuning and diagnosis resume",
                 c->addr, s);
        else
          ah_log(AH_LOG_INFO, "coordinator: reconnected to hub %s after %.0f ms", c->addr, s * 1e3);
        return 0;
      }
      snprintf(err, sizeof err, "cannot register the new connection (out of memory?)");
      ah_coord_client_drop(c);
      errno = 0;
    }
    uint64_t now = ah_coord_now_ns();
    if (errno != ECONNREFUSED) refused_since = 0;
    else if (!refused_since) refused_since = now;
    if (deferred) { /* the hub is not reachable without the relay either */
      deferred = 0;
      char both[520];
      snprintf(both, sizeof both, "%s, then %s", why, err);
      client_hub_gone(c, both);
    }
    if (refused_since && now - refused_since > limit) break; /* nothing listens there any more */
    if (!warned && now - start > 1000000000ull) {
      warned = 1; /* info: the warning above already said the hub is gone (a process that outlives
                   * its hub by a second, on NCCL's error, said it twice) */
      ah_log(AH_LOG_INFO,
             "coordinator: connection to hub %s lost (%s) and not re-established "
             "after 1 s (%s); retrying",
             c->addr, why, err);
    }
    if (!long_said && !refused_since && now - start > limit) { /* it does not answer */
      long_said = 1;
      ah_log(client_joined(c) && !atomic_load(&c->hub_bye) ? AH_LOG_WARN : AH_LOG_INFO,
             "coordinator: hub %s has not answered for %d ms (last error: %s): its process is "
             "frozen or starved, or its network is cut; the job goes on with the decisions it has "
             "(a rank waiting for the leader's waits up to AUTOHA_SYNC_TIMEOUT_S), and this "
             "process tries every %d ms for the rest of the job",
             c->addr, c->o.reconnect_ms, err, LONG_RETRY_MS);
    }
    ah_coord_client_sleep_us((now - start > limit ? LONG_RETRY_MS : backoff) * 1000L);
    if (backoff < 500) backoff *= 2;
  }
  if (atomic_load(&c->stop) || ah_coord_exiting()) return -1;
  atomic_store(&c->alive, 0);
  int joined = client_joined(c);
  ah_log(joined ? AH_LOG_ERROR : AH_LOG_INFO,
         "coordinator: hub %s refused every connection for %d ms (last error: "
         "%s): its process ended; giving up%s",
         c->addr, c->o.reconnect_ms, err,
         joined ? " — ranks waiting for a decision will fail over"
                : " (no communicator of this process is joined)");
  return -1;
}

/* This process's share of half a heartbeat (from its random id), added to when its PING is due.
 * Note why: every process of a job hears the same decision at the same moment, so without it their
 * I/O threads all wake a heartbeat later at once — the processes behind a host relay, whose ranks
 * take segments from their rings, wake only for this timer — and their wake-ups, DELIVERED reports
 * and the relays' forwarding of them came as one burst on the decisions of the next half-second
 * (bench/coord_scale, 1,024 processes: 896 wake-ups and about as many DELIVERED forwarded within 20
 * consecutive decisions of every 65, 50-120 extra wake-ups on each). Spread over half a heartbeat
 * they cost each decision a few. */
static uint64_t client_ping_phase(const ah_coord_t *c, uint64_t hb) {
  return c->client_id % 1024 * (hb / 2048);
}

/* When the next PING is due: after heartbeat_ms without hearing the hub (and at most one PING per
 * heartbeat_ms while its PONG is awaited), or after 5 x heartbeat_ms without sending (the hub drops
 * a client silent for its idle_ms, 30 s). Note that a connection carrying segments therefore pings
 * rarely: traffic from the hub already proves it alive, and at 1,024 clients the PINGs would cost
 * the hub as much as a fan-out a second. What this process sends proves nothing about the hub: a
 * process sending progress records every second and hearing nothing back must still ping, or it
 * takes the hub for dead after dead_ms (it did, every 6 s, once its keys had converged). */
static uint64_t client_ping_due(const ah_coord_t *c) {
  uint64_t hb = (uint64_t)c->o.heartbeat_ms * 1000000ull;
  uint64_t tx = atomic_load(&c->last_tx_ns), rx = atomic_load(&c->last_rx_ns);
  uint64_t deaf = (c->last_ping_ns > rx ? c->last_ping_ns : rx) + hb + client_ping_phase(c, hb);
  uint64_t mute = tx + 5 * hb;
  return deaf < mute ? deaf : mute;
}

/* Milliseconds until the next heartbeat or liveness check is due (at least 1, at most 10 s). Note
 * that an idle client wakes only for these — about once per heartbeat — so a host with many
 * processes (or the 1,024 clients of bench/coord_scale) is not kept busy by timers: everything else
 * that needs the I/O thread (bytes to send, a cut, stopping) writes its eventfd. */
static int client_timeout_ms(ah_coord_t *c) {
  uint64_t now = ah_coord_now_ns();
  uint64_t hb = client_ping_due(c);
  uint64_t dead = atomic_load(&c->last_rx_ns) + (uint64_t)c->o.dead_ms * 1000000ull;
  uint64_t next = hb < dead && client_w_empty(c) ? hb : dead; /* no PING behind queued bytes */
  if (c->lazy_ns && c->lazy_ns < next) next = c->lazy_ns;     /* the relay's lazy doorbell */
  if (next <= now || c->behind) return 1;
  uint64_t ms = (next - now) / 1000000ull + 1;
  return ms > 10000 ? 10000 : (int)ms;
}

void *ah_coord_client_main(void *arg) {
  ah_coord_t *c = arg;
  pthread_setname_np(pthread_self(), "autoha-coord"); /* visible in top -H, gdb, perf */
  struct epoll_event evs[64];
  char why[300];
  while (!atomic_load(&c->stop)) {
    int timeout_ms = client_timeout_ms(c);
    uint64_t slept = ah_coord_now_ns();
    int n = epoll_wait(c->epfd, evs, 64, timeout_ms);
    if (n < 0 && errno != EINTR) {
      ah_log(AH_LOG_ERROR, "coordinator: epoll_wait: %s; client stopped", strerror(errno));
      atomic_store(&c->alive, 0);
      break;
    }
    /* This process stalled (frozen, or not scheduled) a second past its timeout: the hub's
     * silence meanwhile says nothing about the hub, which gets dead_ms again from now. */
    uint64_t woke = ah_coord_now_ns();
    if (woke - slept > (uint64_t)timeout_ms * 1000000ull + 1000000000ull)
      atomic_store(&c->last_rx_ns, woke);
    int lost = 0, asked = 0;
    why[0] = 0;
    for (int i = 0; i < n && !lost; i++) {
      if (evs[i].data.fd == c->efd) {
        uint64_t v;
        if (read(c->efd, &v, sizeof v) < 0) { /* spurious wake-up */
        }
        if (c->fd >= 0 && client_flush(c, why, sizeof why) != 0) lost = 1;
      } else if (evs[i].data.fd == c->fd) {
        if ((evs[i].events & EPOLLOUT) && client_flush(c, why, sizeof why) != 0) lost = 1;
        if (!lost && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP | EPOLLRDHUP)) &&
            client_read(c, why, sizeof why) < 0)
          lost = 1;
      } else if (c->bell >= 0 && evs[i].data.fd == c->bell) {
        pthread_mutex_lock(&c->rmu); /* edge-triggered: the ring drained */
        if (client_take(c, why, sizeof why) != 0) lost = 1;
        pthread_mutex_unlock(&c->rmu);
      } else {
        (void)ah_coord_client_relay_event(c, evs[i].data.fd, evs[i].events);
      }
    }
    /* A local process's ring was full (its bytes wait here), or segments may sit unread. */
    if (c->behind || c->lazy_ns) ah_coord_client_relay_flush(c);
    uint64_t now = ah_coord_now_ns();
    if (!lost && c->fd >= 0) { /* every 64 segments, so the hub can drop what all delivered */
      pthread_mutex_lock(&c->mu);
      int rc = ah_coord_client_queue_delivered(c, 64);
      int queued = c->outq.len > c->outq.off;
      pthread_mutex_unlock(&c->mu);
      if (rc != 0 || (queued && client_flush(c, why, sizeof why) != 0)) lost = 1;
    }
    if (!lost && atomic_exchange(&c->cut_req, 0)) {
      /* Said first, best effort (a connection that failed closes anyway): the hub then gives this
       * process's ranks the grace of a reconnection instead of naming them dead at the close. */
      if (c->fd >= 0) {
        pthread_mutex_lock(&c->mu);
        int rc = ah_coord_client_buf_put_msg(&c->outq, AH_MSG_RECONNECT, NULL, 0);
        pthread_mutex_unlock(&c->mu);
        if (rc == 0) (void)client_flush(c, why, sizeof why);
      }
      snprintf(why, sizeof why, "cut on request");
      lost = asked = 1;
    }
    /* last_rx_ns may be newer than `now`: an application thread taking the hub's frames from the
     * relay's ring (ah_coord_poll) stamps it at any moment, and the unsigned difference then read as
     * a hub silent for centuries (a job making communicators by the thousand took its hub for dead
     * twice a second) */
    uint64_t rx = atomic_load(&c->last_rx_ns);
    if (!lost && rx < now && now - rx > (uint64_t)c->o.dead_ms * 1000000ull) {
      snprintf(why, sizeof why, "nothing heard for %d ms", c->o.dead_ms);
      lost = 1;
    }
    if (!lost && now >= client_ping_due(c) && client_w_empty(c)) {
      pthread_mutex_lock(&c->mu);
      int rc = ah_coord_client_queue_delivered(c, 1) |
               ah_coord_client_buf_put_msg(&c->outq, AH_MSG_PING, NULL, 0);
      c->last_ping_ns = now;
      pthread_mutex_unlock(&c->mu);
      if (rc != 0 || client_flush(c, why, sizeof why) != 0) lost = 1;
    }
    if (lost) {
      int relayed = c->bell >= 0; /* the connection was a channel of the host's relay */
      ah_coord_client_drop(c);
      if (client_reconnect(c, why, relayed, asked) != 0) break;
    }
  }
  pthread_mutex_lock(&c->mu); /* threads in ah_coord_dir_get see the hub gone (alive 0) at once */
  pthread_cond_broadcast(&c->dir_cv);
  pthread_mutex_unlock(&c->mu);
  return NULL;
}
