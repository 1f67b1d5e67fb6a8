/* ah_coord_client_relay.c: the host relay. The first process of a host (same job secret, hub address
 * and host identity) to bind the host's abstract unix endpoint becomes its relay: it keeps its own
 * connection to the hub and carries the other processes of the host over it, each as a numbered
 * channel (RELAY_OPEN / RELAY_DATA / RELAY_CLOSE), so a segment reaching a host costs the hub one
 * send(2) instead of one per process (docs/coordinator.md "Host relay"); the relay puts each local
 * process's frames into a shared-memory ring and wakes them all with one doorbell write, so it costs
 * the host one system call and no read, not a send and a read per process.
 *
 * Key choice: the relay is a pipe for whole frames, not a second hub. A local process runs the
 * usual handshake with the hub itself, through the channel, so it proves the job secret to the hub
 * and the hub proves it back, and keeps its own client id, joins, deliveries and publishes: every
 * guarantee of the hub (order, exactly-once, replay, bounds, refusals) holds per process unchanged.
 * When the relay exits or loses the hub, its local processes see their socket close and reconnect as
 * after any cut — electing a new relay, or dialling the hub directly when no relay can be used. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord_client_internal.h"
#include "ah_coord_sha256.h"
#include "ah_log.h"

/* Note that the endpoint's name is an HMAC of the hub's address and the host identity under the job
 * secret: another job on the host (another secret or hub) never collides with it, and a process
 * that does not know the secret cannot compute it ahead of the relay. It can read it once bound
 * (/proc/net/unix lists abstract names) and connect, but then fails the hub's handshake like any
 * client without the secret. Abstract names vanish with the last socket that holds them, so a dead
 * relay leaves nothing behind. */
void ah_coord_client_relay_name(ah_coord_t *c) {
  char host[64] = "";
  if (c->o.host[0]) snprintf(host, sizeof host, "%s", c->o.host);
  else if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
  char msg[256];
  int n = snprintf(msg, sizeof msg, "autoha-relay-4|%s|%s", c->addr, host);
  uint8_t d[32];
  ah_coord_hmac_sha256(c->stamp.secret, sizeof c->stamp.secret, msg, (size_t)n, d);
  memset(&c->rsa, 0, sizeof c->rsa);
  c->rsa.sun_family = AF_UNIX;
  char *name = c->rsa.sun_path + 1; /* sun_path[0] == 0: the abstract namespace */
  int k = snprintf(name, sizeof c->rsa.sun_path - 1, "autoha-relay-");
  for (int i = 0; i < 16; i++)
    k += snprintf(name + k, sizeof c->rsa.sun_path - 1 - (size_t)k, "%02x", d[i]);
  c->rsl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)k);
}

/* One round of the election: 1 this process took the endpoint, 0 connected through the relay that
 * holds it, -1 with err (*busy_p set when the endpoint was taken but its holder failed us). */
static int relay_elect_once(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, int *busy_p, char *err,
                            size_t errlen) {
  char ep[96];
  ah_coord_net_addr_format((const struct sockaddr *)&c->rsa, ep, sizeof ep);
  *busy_p = 0;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    snprintf(err, errlen, "socket(AF_UNIX): %s", strerror(errno));
    return -1;
  }
  if (bind(fd, (const struct sockaddr *)&c->rsa, c->rsl) == 0) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    int bell = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (bell < 0 || listen(fd, CLIENT_RELAY_LOCALS) != 0 ||
        epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      snprintf(err, errlen, "%s(%s): %s", bell < 0 ? "eventfd" : "listen", ep, strerror(errno));
      if (bell >= 0) close(bell);
      close(fd);
      return -1;
    }
    c->lfd = fd;
    c->lbell = bell;
    atomic_store(&c->relay_role, 2);
    ah_log(AH_LOG_DEBUG, "coordinator: this process is the host's relay (%s) to hub %s", ep,
           c->addr);
    return 1;
  }
  int e = errno;
  close(fd);
  if (e != EADDRINUSE) {
    snprintf(err, errlen, "bind(%s): %s", ep, strerror(e));
    return -1;
  }
  *busy_p = 1;
  char derr[300];
  int fds[AH_COORD_RELAY_FDS];
  if (ah_coord_dial((const struct sockaddr *)&c->rsa, c->rsl, c->stamp.secret, c->client_id,
                    c->o.connect_ms, fd_p, fds, last_pub_p, derr, sizeof derr) != 0) {
    snprintf(err, errlen, "host relay %s: %.250s", ep, derr);
    return -1;
  }
  client_ring_t *ring = ah_coord_client_ring_map(fds[1], derr, sizeof derr);
  if (!ring) {
    snprintf(err, errlen, "host relay %s: %.250s", ep, derr);
    close(fds[0]);
    close(*fd_p);
    return -1;
  }
  ah_coord_client_ring_set(
      c, ring); /* under rmu: an application thread may be polling (ah_coord_poll) */
  c->bell = fds[0];
  atomic_store(&c->relay_role, 1);
  return 0;
}

/* Note that a relay killed by a signal closes its local processes' sockets before the kernel frees
 * its endpoint's name (a dying process's files are released last-opened first), so the processes
 * that see their relay go may find the name still taken by nobody: a holder that fails within a
 * moment gets two more rounds, 10 and 20 ms later, before the caller dials the hub directly. */
int ah_coord_client_relay_elect(ah_coord_t *c, int *fd_p, uint64_t *last_pub_p, char *err,
                                size_t errlen) {
  uint64_t t0 = ah_coord_now_ns();
  int rc = -1;
  for (int round = 0; round < 3; round++) {
    int busy;
    rc = relay_elect_once(c, fd_p, last_pub_p, &busy, err, errlen);
    if (rc >= 0 || !busy || ah_coord_now_ns() - t0 > 100000000ull)
      break; /* a slow failure: no retry */
    struct timespec ts = {0, 10000000L * (round + 1)};
    nanosleep(&ts, NULL);
  }
  return rc;
}

/* Queues a relay message about channel chan (and a frame, for RELAY_DATA) for the hub. */
static int relay_queue(ah_coord_t *c, uint8_t type, uint32_t chan, const uint8_t *frame,
                       size_t flen) {
  uint8_t h[AH_COORD_HDR_BYTES + AH_COORD_RELAY_FIXED];
  ah_coord_hdr_encode(type, (uint32_t)(AH_COORD_RELAY_FIXED + flen), h);
  ah_coord_put_u32(h + AH_COORD_HDR_BYTES, chan);
  pthread_mutex_lock(&c->mu);
  int rc = ah_coord_client_buf_put(&c->outq, h, sizeof h);
  if (rc == 0 && flen) rc = ah_coord_client_buf_put(&c->outq, frame, flen);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

client_ring_t *ah_coord_client_ring_map(int ring_fd, char *err, size_t errlen) {
  struct stat sb;
  void *m = MAP_FAILED;
  if (fstat(ring_fd, &sb) != 0 || (size_t)sb.st_size != sizeof(client_ring_t))
    snprintf(err, errlen, "the ring it passed has %lld bytes, not %zu", (long long)sb.st_size,
             sizeof(client_ring_t));
  else if ((m = mmap(NULL, sizeof(client_ring_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                     ring_fd, 0)) == MAP_FAILED)
    snprintf(err, errlen, "mmap of its ring: %s", strerror(errno));
  close(ring_fd);
  return m == MAP_FAILED ? NULL : m;
}

void ah_coord_client_ring_unmap(client_ring_t *r) {
  if (r) munmap(r, sizeof *r);
}

/* Makes a local process's ring: a memfd of one client_ring_t, mapped here. Returns it with its
 * descriptor (to pass), or NULL with err. Note that both mappings are populated (MAP_POPULATE, here
 * and in ah_coord_client_ring_map), so the ring is backed in full before the first frame: a page allocated
 * as the writes reach it would fault the relay and every local process on the same decision, every
 * 45 segments (4 KiB), in every process of the job at once — at 1,024 processes about 7 ms of CPU
 * on that one decision. 256 KiB per local process. */
static client_ring_t *ring_create(int *fd_p, char *err, size_t errlen) {
  int fd = memfd_create("autoha-relay-ring", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, (off_t)sizeof(client_ring_t)) != 0) {
    snprintf(err, errlen, "%s: %s", fd < 0 ? "memfd_create" : "ftruncate", strerror(errno));
    if (fd >= 0) close(fd);
    return NULL;
  }
  void *m =
      mmap(NULL, sizeof(client_ring_t), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (m == MAP_FAILED) {
    snprintf(err, errlen, "mmap: %s", strerror(errno));
    close(fd);
    return NULL;
  }
  *fd_p = fd;
  return m;
}

long ah_coord_client_ring_take(ah_coord_t *c, uint8_t *dst, size_t room) {
  client_ring_t *r = c->ring;
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_relaxed); /* ours */
  uint64_t head =
      atomic_load_explicit(&r->head, memory_order_acquire); /* the data before it is written */
  if (head - tail > CLIENT_RING_BYTES) return -1;
  size_t n = (size_t)(head - tail) < room ? (size_t)(head - tail) : room;
  size_t at = (size_t)(tail % CLIENT_RING_BYTES),
         first = CLIENT_RING_BYTES - at < n ? CLIENT_RING_BYTES - at : n;
  memcpy(dst, r->data + at, first);
  memcpy(dst + first, r->data, n - first);
  atomic_store_explicit(&r->tail, tail + n,
                        memory_order_release); /* the relay may reuse the space */
  return (long)n;
}

/* Closes local process i's socket; tell: say so to the hub (RELAY_CLOSE), which drops the channel. */
static void relay_local_close(ah_coord_t *c, int i, int tell) {
  client_local_t *l = c->locals[i];
  if (tell && c->fd >= 0) (void)relay_queue(c, AH_MSG_RELAY_CLOSE, l->chan, NULL, 0);
  epoll_ctl(c->epfd, EPOLL_CTL_DEL, l->fd, NULL);
  close(l->fd);
  ah_coord_client_ring_unmap(l->ring);
  free(l->w.b);
  free(l);
  c->locals[i] = c->locals[--c->nlocals];
}

void ah_coord_client_relay_release(ah_coord_t *c) {
  while (c->nlocals > 0) relay_local_close(c, c->nlocals - 1, 0);
  if (c->lfd >= 0) {
    epoll_ctl(c->epfd, EPOLL_CTL_DEL, c->lfd, NULL);
    close(c->lfd);
    c->lfd = -1;
  }
  if (c->lbell >= 0) {
    close(c->lbell);
    c->lbell = -1;
  }
  c->ring_due = 0;
  c->lazy_ns = 0;
  c->behind = 0;
  free(c->locals);
  c->locals = NULL;
  c->caplocals = 0;
  atomic_store(&c->relay_role, 0);
}

/* Passes local process l its doorbell and its ring, right behind the hub's WELCOME on its socket:
 * the hub sends WELCOME only to a process that proved the job secret, so a process without it never
 * holds the doorbell (with which it could wake the host's processes in vain, in a loop). From here
 * on the hub's frames for it go into the ring. Returns 0, or -1 (logged) when they cannot be made or
 * passed: the process then fails its dial and connects to the hub directly. */
static int relay_pass_ring(ah_coord_t *c, client_local_t *l) {
  char nerr[AH_NET_ERR_LEN];
  int fds[AH_COORD_RELAY_FDS] = {c->lbell, -1};
  if (!(l->ring = ring_create(&fds[1], nerr, sizeof nerr)) ||
      ah_coord_net_fd_send(nerr, l->fd, fds, AH_COORD_RELAY_FDS) != AH_NET_OK) {
    AH_LOG_CAPPED(5, AH_LOG_WARN,
                  "coordinator: host relay to hub %s cannot pass its doorbell and ring to "
                  "a local process (%s); it connects directly",
                  c->addr, nerr);
    if (fds[1] >= 0) close(fds[1]);
    return -1;
  }
  close(fds[1]); /* the mapping stays */
  l->ringed = 1;
  return 0;
}

static void relay_accept(ah_coord_t *c) {
  for (;;) {
    int fd = accept4(c->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0 && errno == EINTR) continue;
    if (fd < 0) return;
    if (c->nlocals == c->caplocals && c->nlocals < CLIENT_RELAY_LOCALS) {
      int cap = c->caplocals ? 2 * c->caplocals : 8;
      client_local_t **ls = realloc(c->locals, (size_t)cap * sizeof *ls);
      if (ls) {
        c->locals = ls;
        c->caplocals = cap;
      }
    }
    client_local_t *l = c->nlocals < c->caplocals ? calloc(1, sizeof *l) : NULL;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    /* The doorbell and the process's ring are passed after its handshake (relay_pass_ring). */
    if (!l || epoll_ctl(c->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      AH_LOG_CAPPED(5, AH_LOG_WARN,
                    "coordinator: host relay to hub %s refused a local process (%d "
                    "connected, at most %d, or out of memory); it connects directly",
                    c->addr, c->nlocals, CLIENT_RELAY_LOCALS);
      free(l);
      close(fd);
      continue;
    }
    l->fd = fd;
    l->chan = ++c->next_chan;
    c->locals[c->nlocals++] = l;
    if (relay_queue(c, AH_MSG_RELAY_OPEN, l->chan, NULL, 0) != 0)
      relay_local_close(c, c->nlocals - 1, 0);
  }
}

/* Puts what waits for local process i into its ring, as much as fits (after its handshake; the
 * hub's HELLO and WELCOME go through its socket, which ah_coord_dial reads). Returns 0, or -1 when it was
 * closed (its ring's tail out of range). Note that a frame may straddle two puts: the process reads a
 * byte stream, as from a socket. */
static int relay_local_send(ah_coord_t *c, int i) {
  client_local_t *l = c->locals[i];
  client_ring_t *r = l->ring;
  uint64_t head =
      l->head; /* ours: the copy in the ring is for the process to read, never trusted */
  uint64_t tail = atomic_load_explicit(&r->tail, memory_order_acquire);
  if (head - tail > CLIENT_RING_BYTES) {
    AH_LOG_CAPPED(5, AH_LOG_WARN,
                  "coordinator: host relay to hub %s dropped a local process whose ring "
                  "is corrupt (tail %llu, head %llu)",
                  c->addr, (unsigned long long)tail, (unsigned long long)head);
    relay_local_close(c, i, 1);
    return -1;
  }
  size_t want = l->w.len - l->w.off, room = CLIENT_RING_BYTES - (size_t)(head - tail);
  size_t n = want < room ? want : room;
  size_t at = (size_t)(head % CLIENT_RING_BYTES),
         first = CLIENT_RING_BYTES - at < n ? CLIENT_RING_BYTES - at : n;
  memcpy(r->data + at, l->w.b + l->w.off, first);
  memcpy(r->data, l->w.b + l->w.off + first, n - first);
  l->head = head + n;
  atomic_store_explicit(&r->head, l->head, memory_order_release); /* the bytes before the index */
  if (n) ah_coord_client_ring_wake(r); /* a rank of the process asleep for them (ah_coord_wait) */
  l->w.off += n;
  /* Segments alone wait for the rank that needs them (ah_coord_poll) or the lazy ring; anything
   * else, or a ring filling up, rings now. */
  if (n && (l->urgent || l->head - tail > CLIENT_RING_BYTES / 2)) c->ring_due = 1;
  else if (n && !c->lazy_ns)
    c->lazy_ns = ah_coord_now_ns() + (uint64_t)c->o.relay_lazy_ms * 1000000ull;
  if (l->w.off == l->w.len) {
    l->w.off = l->w.len = 0;
    l->urgent = 0;
  } else {
    c->behind++;
    atomic_fetch_add(&c->ring_waits, 1);
  }
  return 0;
}

/* Frames read from one local process per wake-up: as the hub's reader (HUB_READ_FRAMES), so that a
 * process writing without pause cannot keep the relay from the hub's frames and the other local
 * processes (its socket is watched level-triggered: the rest is read at the next wake-up). */
#define RELAY_READ_FRAMES 128

/* Reads whole frames from local process i and queues each, wrapped, for the hub. Note that the
 * relay checks only the framing (the header's version, type and length, as the hub's reader does)
 * and refuses a relay message inside a channel; what a frame means is the hub's to judge. */
static void relay_local_read(ah_coord_t *c, int i) {
  client_local_t *l = c->locals[i];
  char err[200];
  for (int frames = 0; frames < RELAY_READ_FRAMES;) {
    size_t want =
        AH_COORD_HDR_BYTES + (l->rlen >= AH_COORD_HDR_BYTES ? ah_coord_get_u32(l->rbuf) : 0);
    ssize_t r = read(l->fd, l->rbuf + l->rlen, want - l->rlen);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) { /* the local process closed its connection or exited */
      relay_local_close(c, i, 1);
      return;
    }
    l->rlen += (size_t)r;
    if (l->rlen == AH_COORD_HDR_BYTES) {
      ah_coord_hdr_t h;
      if (ah_coord_hdr_decode(l->rbuf, &h, err, sizeof err) != 0 ||
          ((h.type == AH_MSG_RELAY_OPEN || h.type == AH_MSG_RELAY_DATA ||
            h.type == AH_MSG_RELAY_CLOSE) &&
           snprintf(err, sizeof err, "message type %u from a local process", h.type))) {
        AH_LOG_CAPPED(5, AH_LOG_WARN,
                      "coordinator: host relay to hub %s refused a local process: %s; "
                      "connection dropped",
                      c->addr, err);
        relay_local_close(c, i, 1);
        return;
      }
    }
    if (l->rlen >= AH_COORD_HDR_BYTES &&
        l->rlen == AH_COORD_HDR_BYTES + ah_coord_get_u32(l->rbuf)) {
      if (relay_queue(c, AH_MSG_RELAY_DATA, l->chan, l->rbuf, l->rlen) != 0) {
        relay_local_close(c, i, 1);
        return;
      }
      l->rlen = 0;
      frames++;
    }
  }
}

/* 1 when some local process has not taken everything put into its ring. */
static int relay_unread(const ah_coord_t *c) {
  for (int i = 0; i < c->nlocals; i++) {
    const client_local_t *l = c->locals[i];
    if (l->ringed && atomic_load_explicit(&l->ring->tail, memory_order_relaxed) != l->head)
      return 1;
  }
  return 0;
}

/* Rings the doorbell when bytes other than segments went to local processes since the last ring,
 * or segments sat unread for the lazy time (a waiting rank takes its own). Note that one write
 * wakes every local process at once (each watches the eventfd edge-triggered), in one system call:
 * putting each its bytes into its ring is a memcpy, so a segment reaching 7 local processes costs
 * the relay one system call, not 7 sends, and each process no read — and the relay is preempted by
 * the processes it wakes at most once, not after each send. A process with nothing new finds its
 * ring empty. */
static void relay_ring(ah_coord_t *c) {
  if (c->lbell < 0) return;
  if (!c->ring_due && c->lazy_ns && ah_coord_now_ns() >= c->lazy_ns) {
    c->lazy_ns = 0; /* segments put a while ago: ring only if some process has not taken them */
    c->ring_due = relay_unread(c);
  }
  if (!c->ring_due) return;
  c->ring_due = 0;
  c->lazy_ns = 0; /* every process is woken and takes all its ring holds */
  uint64_t one = 1;
  if (write(c->lbell, &one, sizeof one) < 0) { /* EAGAIN only after 2^64 - 2 rings */
  }
}

int ah_coord_client_relay_event(ah_coord_t *c, int fd, uint32_t events) {
  if (fd < 0) return 0;
  if (fd == c->lfd) {
    relay_accept(c);
    return 1;
  }
  for (int i = 0; i < c->nlocals; i++)
    if (c->locals[i]->fd == fd) {
      if (events & (EPOLLIN | EPOLLERR | EPOLLHUP)) relay_local_read(c, i);
      return 1;
    }
  return 0;
}

int ah_coord_client_relay_from_hub(ah_coord_t *c, uint8_t type, const uint8_t *p, uint32_t len,
                                   char *why, size_t whylen) {
  if (c->lfd < 0) {
    snprintf(why, whylen, "relay message type %u from the hub to a process that is no relay", type);
    return -1;
  }
  if (type == AH_MSG_RELAY_OPEN) {
    snprintf(why, whylen, "unexpected message type %u from the hub", type);
    return -1;
  }
  uint32_t chan = ah_coord_get_u32(p);
  int i = 0;
  while (i < c->nlocals && c->locals[i]->chan != chan) i++;
  if (i == c->nlocals) return 0; /* closed here while the hub's frame was in flight */
  if (type == AH_MSG_RELAY_CLOSE) {
    relay_local_close(c, i, 0);
    return 0;
  }
  client_local_t *l = c->locals[i];
  size_t n = len - AH_COORD_RELAY_FIXED;
  const uint8_t *inner = p + AH_COORD_RELAY_FIXED;
  if (!l->ringed) { /* the handshake (HELLO, WELCOME), which the process reads from its socket */
    ssize_t r;
    while ((r = send(l->fd, inner, n, MSG_NOSIGNAL)) < 0 && errno == EINTR) {}
    if (r != (ssize_t)n) { /* a fresh socket takes two small frames: this one is gone */
      relay_local_close(c, i, 1);
      return 0;
    }
    if (n >= AH_COORD_HDR_BYTES && inner[5] == AH_MSG_WELCOME && relay_pass_ring(c, l) != 0)
      relay_local_close(c, i, 1);
    return 0;
  }
  if (n < AH_COORD_HDR_BYTES || inner[5] != AH_MSG_SEGMENT)
    l->urgent = 1; /* the hub wraps one frame in each */
  if (l->w.len - l->w.off + n > CLIENT_RELAY_OUTBUF ||
      ah_coord_client_buf_put(&l->w, p + AH_COORD_RELAY_FIXED, n) != 0) {
    AH_LOG_CAPPED(5, AH_LOG_WARN,
                  "coordinator: host relay to hub %s dropped a local process that does "
                  "not read (%zu bytes queued)",
                  c->addr, l->w.len - l->w.off);
    relay_local_close(c, i, 1);
  }
  return 0;
}

void ah_coord_client_relay_flush(ah_coord_t *c) {
  if (c->lfd < 0) return;
  /* Every ring taken since the lazy doorbell was armed (the ranks took their segments): the timer
   * restarts with this batch's segments, so a steady stream of decisions that ranks take never
   * wakes the relay for nothing. */
  if (c->lazy_ns && !relay_unread(c)) c->lazy_ns = 0;
  c->behind = 0;
  for (int i = c->nlocals - 1; i >= 0; i--)
    if (c->locals[i]->w.len > c->locals[i]->w.off) (void)relay_local_send(c, i);
  relay_ring(c);
}
