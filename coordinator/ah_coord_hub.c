/* The hub: one per job, in the process that made the ncclUniqueId. It authenticates clients,
 * keeps every committed segment of every communicator (so a client that joins late or reconnects
 * gets the ones it missed), and forwards each published segment to every connection joined to its
 * communicator. It also decides, once per communicator, whether it is tuned at all: COMPLETE when
 * every rank joined, ABANDONED when not all did within join_ms of the first (then every rank runs
 * it fixed, like a process that never reached the hub). One background thread runs an epoll loop
 * over non-blocking sockets.
 *
 * Key choice: the hub trusts nothing before the handshake and bounds everything after it — a
 * length prefix is checked against the exact size of its message type before any payload is read,
 * unauthenticated connections are capped (the oldest is dropped first) and must finish the
 * handshake within auth_ms, a started frame must complete within frame_ms, and a client that does
 * not read is dropped once max_outbuf bytes wait for it, and the connection with the most queued
 * once every connection's send buffers together hold max_outbuf_job. An authenticated client is
 * bounded too:
 * communicators, pending joins, rank bitmaps and retained segments are capped per client id and
 * per job, and what a cap refuses is refused on the wire (an ABANDONED verdict for a JOIN, an ACK
 * without storing for a PUBLISH), so a legitimate rank falls back to NCCL's own choices instead
 * of waiting. Each refusal is one log line (rate-limited per kind) and the loop goes on serving
 * everyone else. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "ah_coord_hub_internal.h"
#include "ah_log.h"

void ah_coord_hub_opts_default(ah_coord_hub_opts_t *o_p) {
  o_p->auth_ms = 3000;
  o_p->frame_ms = 5000;
  o_p->idle_ms = 30000;
  o_p->max_pending = 256;
  o_p->max_outbuf = 64u << 20;
  o_p->max_outbuf_job = 256u << 20; /* 4 such clients: the sum of per-connection caps is no bound */
  o_p->join_ms = AH_COORD_JOIN_S_DEFAULT * 1000; /* ah_coord_hub_start applies the setup's */
  o_p->hang_ms = AH_COORD_HANG_S_DEFAULT * 1000; /* AUTOHA_HANG_S's (docs/diagnosis.md says why) */
  o_p->straggler_pct = AH_COORD_STRAGGLER_PCT_DEFAULT;
  o_p->straggler_audit_ms = AH_COORD_STRAGGLER_AUDIT_S_DEFAULT * 1000;
  o_p->slow_link_pct = AH_COORD_SLOW_LINK_PCT_DEFAULT;
  o_p->mem_bytes = (size_t)AH_COORD_HUB_MEM_MB_DEFAULT << 20; /* ah_coord_hub_start: the setup's */
  o_p->max_client_comms = 1024;
  o_p->max_client_pending_joins = 256;
  o_p->max_client_segments = 16384;
  o_p->max_client_dir_bytes = 8u << 20;
  o_p->max_conn_dir_waits = 8192;
  o_p->gather_ms = 500;
  o_p->max_comm_gathers = 4096;
}

static void hub_on_auth(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  uint8_t want[32], reply[40];
  uint64_t id = ah_coord_get_u64(p + 32);
  if (ah_coord_exiting()) { /* the process is exiting: answer nothing */
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  if (ah_coord_mac(h->secret, "autoha-client", c->nonce, p, id, want) != 0 ||
      !ah_coord_mac_equal(want, p + 40)) {
    ah_coord_hub_refuse(h, RATE_AUTH, "refused %s: authentication failed (wrong job secret)",
                        c->peer);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  hub_client_t *cl = ah_coord_hub_client_get(h, id, c->peer);
  if (!cl) { /* logged */
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  if (ah_coord_mac(h->secret, "autoha-hub", p, c->nonce, cl->last_pub, reply) != 0) {
    if (ah_coord_exiting()) {
      ah_coord_hub_conn_close_later(h, c);
      return;
    }
    ah_log(AH_LOG_ERROR, "coordinator hub %s: cannot answer %s (out of memory or exiting)", h->addr,
           c->peer);
    ah_coord_hub_conn_close_later(h, c);
    return;
  }
  ah_coord_put_u64(reply + 32, cl->last_pub);
  ah_coord_hub_pend_unlink(h, c);
  c->authed = 1;
  c->client_id = id;
  cl->nconns++;
  cl->bye = 0; /* alive after all */
  atomic_fetch_add(&h->nclients, 1);
  ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s authenticated (client %016llx)", h->addr, c->peer,
         (unsigned long long)id);
  ah_coord_hub_conn_send_msg(h, c, AH_MSG_WELCOME, reply, 40);
}

static void hub_on_frame(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type, const uint8_t *p,
                         uint32_t len) {
  if (!c->authed) {
    if (type != AH_MSG_AUTH) {
      ah_coord_hub_refuse(h, RATE_AUTH, "refused %s: message type %u before authentication",
                          c->peer, type);
      ah_coord_hub_conn_close_later(h, c);
    } else {
      hub_on_auth(h, c, p);
    }
    return;
  }
  hub_client_t *cl = NULL;
  switch (type) {
    case AH_MSG_LEAVE: /* its ranks left: never named dead (before the membership goes) */
      ah_coord_hub_health_client(h, c, ah_coord_get_u64(p), 0);
      ah_coord_hub_on_leave(h, c, p);
      break;
    case AH_MSG_BYE:
      if ((cl = ah_coord_hub_client_find(h, c->client_id))) cl->bye = 1;
      ah_coord_hub_health_client(h, c, 0, 0);
      /* Answered after the findings sent before. A process that exits with communicators still
       * joined may be a survivor that NCCL failed because a peer died: the answer waits 250 ms, so
       * the death's finding (its peer's socket may close via a relay that is slower) goes first. */
      c->bye_answer_ns = ah_coord_now_ns() + (c->ncomms > 0 ? 250000000ull : 1);
      break;
    case AH_MSG_JOIN:
    case AH_MSG_PUBLISH:
    case AH_MSG_DELIVERED:
    case AH_MSG_PROGRESS:
    case AH_MSG_SAMPLES:
    case AH_MSG_DIR_PUT:
    case AH_MSG_SEARCH_TIME:
      cl = ah_coord_hub_client_find(h, c->client_id);
      if (!cl) {
        ah_coord_hub_conn_close_later(h, c);
        return;
      }
      if (type == AH_MSG_JOIN) ah_coord_hub_on_join(h, c, cl, p);
      else if (type == AH_MSG_PUBLISH) ah_coord_hub_on_publish(h, c, cl, p);
      else if (type == AH_MSG_DELIVERED) ah_coord_hub_on_delivered(h, c, cl, p);
      else if (type == AH_MSG_PROGRESS) ah_coord_hub_on_progress(h, c, cl, p);
      else if (type == AH_MSG_DIR_PUT) ah_coord_hub_on_dir_put(h, c, cl, p, len);
      else if (type == AH_MSG_SEARCH_TIME) ah_coord_hub_on_search_time(h, c, cl, p);
      else ah_coord_hub_on_samples(h, c, cl, p);
      break;
    case AH_MSG_DIR_GET: ah_coord_hub_on_dir_get(h, c, p); break;
    case AH_MSG_LINK_QP: ah_coord_hub_on_link_qps(h, c, p); break;
    case AH_MSG_LINK_RATES: ah_coord_hub_on_link_rates(h, c, p); break;
    case AH_MSG_NIC_PORT: ah_coord_hub_on_nic_port(h, c, p); break;
    case AH_MSG_RECONNECT: c->reconnecting = 1; break; /* its close next is no death */
    case AH_MSG_PING:
      atomic_fetch_add_explicit(&h->npings, 1, memory_order_relaxed);
      ah_coord_hub_conn_send_msg(h, c, AH_MSG_PONG, NULL, 0);
      break;
    case AH_MSG_STATUS: ah_coord_hub_on_status(h, c); break;
    case AH_MSG_RELAY_OPEN:
    case AH_MSG_RELAY_DATA:
    case AH_MSG_RELAY_CLOSE: {
      uint8_t itype;
      const uint8_t *ip;
      uint32_t ilen;
      hub_conn_t *ch = ah_coord_hub_relay_on_frame(h, c, type, p, len, &itype, &ip, &ilen);
      if (ch) hub_on_frame(h, ch, itype, ip, ilen);
      break;
    }
    default:
      ah_coord_hub_refuse(h, RATE_FRAME,
                          "refused %s: unexpected message type %u from a client; connection "
                          "dropped",
                          c->peer, type);
      ah_coord_hub_conn_close_later(h, c);
  }
}

/* Frames handled per connection per wake-up. Note that without a bound a client writing as fast as
 * the hub reads (a flood, or a bug) is never drained to EAGAIN, and the hub thread serves it alone:
 * other clients' PINGs go unanswered until they give the hub up. The connection is watched
 * level-triggered, so what is left is read again after every other ready connection had its turn. */
#define HUB_READ_FRAMES 128

static void hub_conn_read(ah_coord_hub_t *h, hub_conn_t *c) {
  char err[200];
  for (int frames = 0; frames < HUB_READ_FRAMES;) {
    size_t want = c->need ? c->need : AH_COORD_HDR_BYTES;
    ssize_t r = read(c->fd, c->rbuf + c->rlen, want - c->rlen);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      c->eof = r == 0 || errno == ECONNRESET; /* its process closed it: it exited (or gave up) */
      if (c->rlen > 0)
        ah_coord_hub_refuse(h, RATE_FRAME,
                            "refused %s: truncated frame (connection closed after %zu of %u "
                            "bytes)",
                            c->peer, c->rlen, c->need ? c->need : AH_COORD_HDR_BYTES);
      else if (!c->authed && ah_coord_hub_stalled(h, ah_coord_now_ns()))
        AH_LOG_CAPPED(5, AH_LOG_INFO,
                      "coordinator hub %s: %s closed the connection before authenticating (an "
                      "attempt that timed out while this hub stalled)",
                      h->addr, c->peer);
      else if (!c->authed)
        ah_coord_hub_refuse(h, RATE_CLOSED, "%s closed the connection before authenticating",
                            c->peer);
      else if (r < 0 && errno != ECONNRESET)
        ah_coord_hub_refuse(h, RATE_CLOSED, "read from %s failed: %s", c->peer, strerror(errno));
      else if (r < 0)
        ah_log(AH_LOG_INFO, "coordinator hub %s: %s reset the connection", h->addr, c->peer);
      else ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s disconnected", h->addr, c->peer);
      ah_coord_hub_conn_close_later(h, c);
      return;
    }
    uint64_t now = ah_coord_now_ns();
    if (c->rlen == 0) c->frame_start_ns = now;
    c->rlen += (size_t)r;
    c->last_rx_ns = now;
    h->frame_rx_ns = now;
    if (c->rlen < want) continue;
    if (!c->need) {
      ah_coord_hdr_t hd;
      if (ah_coord_hdr_decode(c->rbuf, &hd, err, sizeof err) != 0) {
        ah_coord_hub_refuse(h, RATE_FRAME, "refused %s: %s; connection dropped", c->peer, err);
        ah_coord_hub_conn_close_later(h, c);
        return;
      }
      c->need = AH_COORD_HDR_BYTES + hd.len;
      if (hd.len > 0) continue;
    }
    uint8_t type = c->rbuf[5];
    uint32_t len = c->need ? c->need - AH_COORD_HDR_BYTES : 0;
    c->rlen = 0;
    c->need = 0;
    hub_on_frame(h, c, type, c->rbuf + AH_COORD_HDR_BYTES, len);
    if (c->closing) return;
    frames++;
  }
}

static void hub_accept(ah_coord_hub_t *h) {
  char err[AH_NET_ERR_LEN];
  for (;;) {
    int fd;
    char peer[64];
    int r = ah_coord_net_accept(err, h->lfd, &fd, peer, sizeof peer);
    if (r == AH_NET_TIMEOUT) return;
    if (r == AH_NET_ERR) {
      if ((errno == EMFILE || errno == ENFILE) && h->spare_fd >= 0) {
        /* Out of descriptors: take the connection with the spare one and close it at once, so the
         * listener does not spin on a connection it can never accept. */
        close(h->spare_fd);
        int fd2 = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd2 >= 0) close(fd2);
        h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        ah_coord_hub_refuse(h, RATE_ACCEPT, "out of file descriptors (%s); refused a connection",
                            err);
        continue;
      }
      ah_coord_hub_refuse(h, RATE_ACCEPT, "%s", err);
      return;
    }
    if (ah_coord_exiting()) { /* exit() is tearing the process down: no new handshakes */
      close(fd);
      continue;
    }
    hub_conn_t *c = calloc(1, sizeof *c);
    if (!c) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory accepting %s", h->addr, peer);
      close(fd);
      continue;
    }
    c->fd = fd;
    snprintf(c->peer, sizeof c->peer, "%s", peer);
    c->accepted_ns = c->last_rx_ns = ah_coord_now_ns();
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
    if (ah_coord_random(c->nonce, sizeof c->nonce) != 0 ||
        epoll_ctl(h->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: cannot register %s (%s)", h->addr, peer,
             strerror(errno));
      free(c);
      close(fd);
      continue;
    }
    if (ah_coord_hub_conn_admit(h, c) != 0) {
      epoll_ctl(h->epfd, EPOLL_CTL_DEL, fd, NULL);
      free(c);
      close(fd);
    }
  }
}

/* Enforces the per-connection deadlines. Note that this walks every connection each tick (50 ms):
 * at thousands of connections that is microseconds, and it keeps deadlines out of the I/O path. */
static void hub_sweep(ah_coord_hub_t *h) {
  uint64_t now = ah_coord_now_ns();
  for (int k = 0; k < RATE_N; k++) ah_coord_hub_rate_roll(h, &h->rate[k], now);
  uint64_t join_ns = (uint64_t)h->o.join_ms * 1000000ull;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next)
    if (m->verdict == AH_COORD_VERDICT_NONE && m->joined && now - m->first_join_ns > join_ns)
      ah_coord_hub_verdict_decide(h, m, AH_COORD_VERDICT_ABANDONED);
  uint64_t auth_ns = (uint64_t)h->o.auth_ms * 1000000ull;
  uint64_t frame_ns = (uint64_t)h->o.frame_ms * 1000000ull;
  uint64_t idle_ns = (uint64_t)h->o.idle_ms * 1000000ull;
  for (int i = 0; i < h->nall; i++) {
    hub_conn_t *c = h->all[i];
    if (c->closing) continue;
    if (c->bye_answer_ns && now >= c->bye_answer_ns) {
      c->bye_answer_ns = 0;
      ah_coord_hub_conn_send_msg(h, c, AH_MSG_BYE, NULL, 0);
    }
    if (!c->authed && now - c->accepted_ns > auth_ns) {
      ah_coord_hub_refuse(h, RATE_TIMEOUT,
                          "refused %s: no authentication within %d ms (%zu bytes of a "
                          "frame received; slow or stalled client)",
                          c->peer, h->o.auth_ms, c->rlen);
      ah_coord_hub_conn_close_later(h, c);
    } else if (c->authed && c->rlen > 0 && now - c->frame_start_ns > frame_ns) {
      ah_coord_hub_refuse(h, RATE_TIMEOUT,
                          "refused %s: frame incomplete after %d ms (%zu of %u bytes; "
                          "slow client or truncated frame)",
                          c->peer, h->o.frame_ms, c->rlen, c->need ? c->need : AH_COORD_HDR_BYTES);
      ah_coord_hub_conn_close_later(h, c);
    } else if (c->authed && now - c->last_rx_ns > idle_ns) {
      ah_coord_hub_refuse(h, RATE_TIMEOUT, "dropped %s: silent for %d ms", c->peer, h->o.idle_ms);
      ah_coord_hub_conn_close_later(h, c);
    }
  }
}

/* Frees the connections marked for closing, after forgetting their directory waiters. */
static void hub_close_now(ah_coord_hub_t *h) {
  for (hub_conn_t *c = h->close_list; c; c = c->close_next) {
    ah_coord_hub_dir_conn_gone(h, c);
    /* its process's last connection, without a goodbye: its ranks may be dead */
    hub_client_t *cl = c->authed ? ah_coord_hub_client_find(h, c->client_id) : NULL;
    if (cl && --cl->nconns == 0 && !cl->bye && !atomic_load(&h->stop))
      ah_coord_hub_health_client(h, c, 0, 1);
  }
  ah_coord_hub_close_pending(h);
}

static void *hub_main(void *arg) {
  ah_coord_hub_t *h = arg;
  pthread_setname_np(pthread_self(), "autoha-hub"); /* visible in top -H, gdb, perf */
  struct epoll_event evs[256];
  uint64_t last_sweep = ah_coord_now_ns();
  while (!atomic_load(&h->stop)) {
    h->loop_ns = ah_coord_now_ns();
    int n = epoll_wait(h->epfd, evs, 256, HUB_TICK_MS);
    if (n < 0 && errno != EINTR) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: epoll_wait: %s; hub stopped", h->addr,
             strerror(errno));
      break;
    }
    /* Note that a stall (the process frozen, or not scheduled) is seen before the events it
     * piled up: each connection its clients cut meanwhile reads as a process that died. */
    uint64_t woke = ah_coord_now_ns();
    if (woke - h->loop_ns > (uint64_t)HUB_TICK_MS * 1000000ull + 1000000000ull) h->stall_ns = woke;
    for (int i = 0; i < n; i++) {
      void *p = evs[i].data.ptr;
      if (p == &h->lfd) {
        hub_accept(h);
      } else if (p == &h->efd) {
        uint64_t v;
        if (read(h->efd, &v, sizeof v) < 0) { /* nothing to do: stop is re-checked */
        }
      } else {
        hub_conn_t *c = p;
        if (c->closing) continue;
        if (evs[i].events & EPOLLOUT) ah_coord_hub_conn_flush(h, c);
        if (!c->closing && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) hub_conn_read(h, c);
      }
    }
    if (atomic_load(&h->bye) == 1) { /* the process exits: the job's end, not a death */
      for (int i = 0; i < h->nall; i++)
        if (h->all[i]->authed && !h->all[i]->closing)
          ah_coord_hub_conn_send_msg(h, h->all[i], AH_MSG_BYE, NULL, 0);
      ah_coord_hub_flush_dirty(h);
      atomic_store(&h->bye, 2);
    }
    uint64_t now = ah_coord_now_ns();
    if (now - last_sweep >= (uint64_t)HUB_TICK_MS * 1000000ull) {
      hub_sweep(h);
      ah_coord_hub_health_tick(h, now);
      ah_coord_hub_audit_tick(h, now);
      ah_coord_hub_link_tick(h, now);
      ah_coord_hub_dir_tick(h, now);
      ah_coord_hub_gather_tick(h, now);
      last_sweep = now;
    }
    ah_coord_hub_flush_dirty(h);
    hub_close_now(h);
  }
  return NULL;
}

ah_coord_hub_t *ah_coord_hub_open(const char *addr, const uint8_t secret[16],
                                  const ah_coord_hub_opts_t *opts, ah_coord_stamp_t *stamp_p) {
  char err[AH_NET_ERR_LEN];
  struct sockaddr_storage ss;
  socklen_t sl;
  if (addr) {
    if (ah_coord_net_addr_parse(err, addr, &ss, &sl) != AH_NET_OK) {
      ah_log(AH_LOG_ERROR, "coordinator hub: invalid address %s", err);
      return NULL;
    }
  } else {
    char ifn[64];
    if (ah_coord_net_host_addr(opts ? opts->ifname : NULL, &ss, &sl, ifn, sizeof ifn) != 0)
      ah_log(AH_LOG_WARN,
             "coordinator hub: AUTOHA_COORD_IFNAME '%s' matches no interface that is up with an "
             "address; using %s, NCCL's default choice",
             opts->ifname, ifn[0] ? ifn : "loopback");
    else
      ah_log(AH_LOG_DEBUG, "coordinator hub: binding interface %s",
             ifn[0] ? ifn : "(none: loopback)");
  }
  ah_coord_crypto_init();
  ah_coord_hub_t *h = calloc(1, sizeof *h);
  if (!h) {
    ah_log(AH_LOG_ERROR, "coordinator hub: out of memory");
    return NULL;
  }
  h->lfd = h->epfd = h->efd = h->spare_fd = -1;
  memcpy(h->secret, secret, 16);
  if (opts) h->o = *opts;
  else ah_coord_hub_opts_default(&h->o);
  if (ah_coord_net_listen(err, &ss, &sl, 4096, &h->lfd) != AH_NET_OK) {
    ah_log(AH_LOG_ERROR, "coordinator hub: %s", err);
    goto undo_alloc;
  }
  ah_coord_net_addr_format((struct sockaddr *)&ss, h->addr, sizeof h->addr);
  h->epfd = epoll_create1(EPOLL_CLOEXEC);
  h->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  h->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  struct epoll_event el = {.events = EPOLLIN, .data.ptr = &h->lfd};
  struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &h->efd};
  if (h->epfd < 0 || h->efd < 0 || epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->lfd, &el) != 0 ||
      epoll_ctl(h->epfd, EPOLL_CTL_ADD, h->efd, &ee) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: epoll/eventfd setup: %s", h->addr, strerror(errno));
    goto undo_fds;
  }
  /* The stamp names the address clients should dial: a wildcard listen address is replaced by
   * this host's address. */
  ah_coord_stamp_t st;
  memset(&st, 0, sizeof st);
  memcpy(st.secret, secret, 16);
  st.family = (uint8_t)ss.ss_family;
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    st.port = ntohs(in->sin_port);
    if (in->sin_addr.s_addr == htonl(INADDR_ANY)) {
      struct sockaddr_storage hs;
      socklen_t hl;
      /* Advertised: the chosen interface's address, when IPv4 like the listen socket (else loopback). */
      (void)ah_coord_net_host_addr(h->o.ifname, &hs, &hl, NULL, 0);
      memcpy(st.addr,
             hs.ss_family == AF_INET ? (const void *)&((struct sockaddr_in *)&hs)->sin_addr
                                     : (const void *)&(struct in_addr){htonl(INADDR_LOOPBACK)},
             4);
    } else {
      memcpy(st.addr, &in->sin_addr, 4);
    }
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    st.port = ntohs(in6->sin6_port);
    memcpy(st.addr, &in6->sin6_addr, 16);
  }
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int rc = pthread_create(&h->thr, &attr, hub_main, h);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: pthread_create: %s", h->addr, strerror(rc));
    goto undo_fds;
  }
  ah_log(AH_LOG_INFO, "coordinator hub listening on %s", h->addr);
  *stamp_p = st;
  return h;
undo_fds:
  if (h->spare_fd >= 0) close(h->spare_fd);
  if (h->efd >= 0) close(h->efd);
  if (h->epfd >= 0) close(h->epfd);
  close(h->lfd);
undo_alloc:
  free(h);
  return NULL;
}

void ah_coord_hub_close(ah_coord_hub_t *h) {
  if (!h) return;
  atomic_store(&h->stop, 1);
  uint64_t one = 1;
  if (write(h->efd, &one, sizeof one) < 0) { /* the tick ends the loop anyway */
  }
  pthread_join(h->thr, NULL);
  for (int i = 0; i < h->nall; i++) ah_coord_hub_conn_close_later(h, h->all[i]);
  hub_close_now(h);
  ah_coord_hub_dir_free(h);
  ah_coord_hub_link_free(h);
  hub_comm_t *m, *mt;
  HASH_ITER(hh, h->comms, m, mt) ah_coord_hub_comm_free(h, m);
  hub_client_t *cl, *ct;
  HASH_ITER(hh, h->clients, cl, ct) {
    HASH_DEL(h->clients, cl);
    free(cl);
    ah_coord_hub_mem_give(h, sizeof *cl);
  }
  free(h->all);
  close(h->lfd);
  close(h->epfd);
  close(h->efd);
  if (h->spare_fd >= 0) close(h->spare_fd);
  free(h);
}

int ah_coord_hub_clients(ah_coord_hub_t *h) { return atomic_load(&h->nclients); }

int ah_coord_hub_pings(ah_coord_hub_t *h) { return atomic_load(&h->npings); }

int ah_coord_hub_fanout(ah_coord_hub_t *h, uint64_t *ns, uint64_t *cpu_ns, int max) {
  uint32_t n = atomic_load_explicit(&h->nfan, memory_order_acquire);
  int k = 0;
  for (uint32_t i = n > HUB_FAN_RING ? n - HUB_FAN_RING : 0; i < n && k < max; i++, k++) {
    ns[k] = atomic_load_explicit(&h->fan_ns[i % HUB_FAN_RING], memory_order_relaxed);
    cpu_ns[k] = atomic_load_explicit(&h->fan_cpu_ns[i % HUB_FAN_RING], memory_order_relaxed);
  }
  return k;
}

size_t ah_coord_hub_buffered_peak(ah_coord_hub_t *h) {
  return atomic_load_explicit(&h->wbuf_peak, memory_order_relaxed);
}

uint64_t ah_coord_hub_records(ah_coord_hub_t *h) {
  return atomic_load_explicit(&h->nrecords, memory_order_relaxed);
}

size_t ah_coord_hub_retained(ah_coord_hub_t *h) {
  return atomic_load_explicit(&h->nframes_seen, memory_order_relaxed);
}

/* The process's hub, started once. */
static pthread_mutex_t hub_once_mu = PTHREAD_MUTEX_INITIALIZER;
static ah_coord_hub_t *hub_once;
static ah_coord_stamp_t hub_once_stamp;

/* Returns 0 and fills stamp_p, or -1 after logging. Note that AUTOHA_COORD_ADDR names the listen
 * address (host:port, port 1..65535, as the environment table validates it); without it the hub listens on the address
 * of the interface AUTOHA_COORD_IFNAME chooses (NCCL_SOCKET_IFNAME's rules and default), and the process keeps one hub for its lifetime (a second call returns the
 * same stamp, so every id the process makes names the same hub and secret). */
/* In a child made by fork(), the parent's hub thread does not exist: the child starts its own hub
 * if it makes ids itself (the parent's keeps serving the parent's ids). */
static void hub_atfork_child(void) {
  hub_once = NULL;
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  hub_once_mu = fresh;
}

static void hub_atfork_register(void) { pthread_atfork(NULL, NULL, hub_atfork_child); }

void ah_coord_hub_goodbye(void) {
  pthread_mutex_lock(&hub_once_mu);
  ah_coord_hub_t *h = hub_once;
  pthread_mutex_unlock(&hub_once_mu);
  if (!h) return;
  atomic_store(&h->bye, 1);
  uint64_t one = 1;
  if (write(h->efd, &one, sizeof one) < 0) { /* the tick comes anyway */
  }
  for (int i = 0; i < 100 && atomic_load(&h->bye) != 2; i++) {
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
}

int ah_coord_hub_start(const ah_coord_setup_t *setup, ah_coord_stamp_t *stamp_p) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, hub_atfork_register);
  pthread_mutex_lock(&hub_once_mu);
  if (!hub_once) {
    uint8_t secret[16];
    const char *env = setup ? setup->addr : NULL;
    if (ah_coord_random(secret, sizeof secret) != 0) {
      ah_log(AH_LOG_ERROR,
             "coordinator hub: no random bytes for the job secret (getrandom "
             "failed)");
    } else {
      char err[AH_NET_ERR_LEN];
      struct sockaddr_storage ss;
      socklen_t sl;
      int use = env && *env; /* its shape the environment table validated (AUTOHA_COORD_ADDR) */
      if (use && ah_coord_net_addr_parse(err, env, &ss, &sl) != AH_NET_OK) {
        ah_log(AH_LOG_INFO, "coordinator hub: address %s; listening on this host's address", err);
        use = 0;
      }
      ah_coord_hub_opts_t o;
      ah_coord_hub_opts_default(&o);
      if (setup && setup->join_s > 0) o.join_ms = (int)(setup->join_s * 1000.0 + 0.5);
      if (o.join_ms < 1) o.join_ms = 1;
      if (setup && setup->hang_s > 0) o.hang_ms = (int)(setup->hang_s * 1000.0 + 0.5);
      else if (setup && setup->hang_s < 0) o.hang_ms = 0;
      if (setup && setup->straggler_pct != 0) o.straggler_pct = setup->straggler_pct;
      if (setup && setup->straggler_audit_s > 0)
        o.straggler_audit_ms = (int)(setup->straggler_audit_s * 1000.0 + 0.5);
      else if (setup && setup->straggler_audit_s < 0) o.straggler_audit_ms = 0;
      if (setup && setup->slow_link_pct != 0) o.slow_link_pct = setup->slow_link_pct;
      if (setup && setup->hub_mem_mb > 0) o.mem_bytes = (size_t)setup->hub_mem_mb << 20;
      o.ifname = setup && setup->ifname && *setup->ifname ? setup->ifname : NULL;
      hub_once = ah_coord_hub_open(use ? env : NULL, secret, &o, &hub_once_stamp);
    }
  }
  int rc = hub_once ? 0 : -1;
  if (hub_once) *stamp_p = hub_once_stamp;
  pthread_mutex_unlock(&hub_once_mu);
  return rc;
}
