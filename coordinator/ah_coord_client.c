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
 * delivered twice. Only when the hub's address refuses every connection for reconnect_ms does
 * ah_coord_alive() turn 0: a hub that does not answer is tried for the rest of the job. */
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

#include "ah_coord_client_internal.h"
#include "ah_coord_link.h"
#include "ah_coord_nic.h"
#include "ah_log.h"

void ah_coord_client_opts_default(ah_coord_client_opts_t *o_p) {
  o_p->connect_ms = 5000;
  o_p->heartbeat_ms = 2000;
  o_p->dead_ms = 6000;
  o_p->reconnect_ms = 10000;
  o_p->relay = 0; /* the shim turns it on (AUTOHA_COORD_RELAY); tests and benchmarks choose */
  o_p->host[0] = 0;
  o_p->relay_lazy_ms = 200;
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
  c->fd = c->epfd = c->efd = c->lfd = c->bell = c->lbell = -1;
  if (opts) c->o = *opts;
  else ah_coord_client_opts_default(&c->o);
  if (addr) {
    if (ah_coord_net_addr_parse(err, addr, &c->ss, &c->sl) != AH_NET_OK) {
      ah_log(AH_LOG_ERROR, "coordinator: invalid hub address %s", err);
      goto undo_alloc;
    }
  } else {
    ah_coord_stamp_sockaddr(stamp, &c->ss, &c->sl);
  }
  ah_coord_net_addr_format((struct sockaddr *)&c->ss, c->addr, sizeof c->addr);
  if (c->o.relay) ah_coord_client_relay_name(c);
  if (ah_coord_random(&c->client_id, sizeof c->client_id) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: no random bytes for the client id (getrandom failed)");
    goto undo_alloc;
  }
  pthread_mutex_init(&c->mu, NULL);
  pthread_mutex_init(&c->wmu, NULL);
  pthread_mutex_init(&c->rmu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(
      &ca, CLOCK_MONOTONIC); /* ah_coord_now_ns's clock: deadlines ignore date changes */
  pthread_cond_init(&c->dir_cv, &ca);
  pthread_condattr_destroy(&ca);
  c->epfd = epoll_create1(EPOLL_CLOEXEC);
  c->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  struct epoll_event ev = {.events = EPOLLIN, .data.fd = c->efd};
  if (c->epfd < 0 || c->efd < 0 || epoll_ctl(c->epfd, EPOLL_CTL_ADD, c->efd, &ev) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: epoll/eventfd setup: %s", strerror(errno));
    goto undo_fds;
  }
  int fd;
  uint64_t last_pub;
  if (ah_coord_client_handshake(c, &fd, &last_pub, err, sizeof err) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot join hub %s: %s", c->addr, err);
    goto undo_fds;
  }
  if (ah_coord_client_install(c, fd, last_pub) != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: cannot register the connection to %s", c->addr);
    ah_coord_client_drop(c);
    goto undo_fds;
  }
  atomic_store(&c->alive, 1);
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setstacksize(&attr, 256 * 1024);
  int rc = pthread_create(&c->thr, &attr, ah_coord_client_main, c);
  pthread_attr_destroy(&attr);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: pthread_create: %s", strerror(rc));
    ah_coord_client_drop(c);
    goto undo_fds;
  }
  return c;
undo_fds:
  if (c->efd >= 0) close(c->efd);
  if (c->epfd >= 0) close(c->epfd);
  pthread_cond_destroy(&c->dir_cv);
  pthread_mutex_destroy(&c->rmu);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
undo_alloc:
  free(c);
  return NULL;
}

void ah_coord_client_close(ah_coord_t *c) {
  if (!c) return;
  atomic_store(&c->stop, 1);
  ah_coord_client_wake(c);
  pthread_join(c->thr, NULL);
  ah_coord_client_drop(c);
  close(c->efd);
  close(c->epfd);
  pthread_cond_destroy(&c->dir_cv);
  pthread_mutex_destroy(&c->rmu);
  pthread_mutex_destroy(&c->wmu);
  pthread_mutex_destroy(&c->mu);
  client_dir_put_t *d, *dt;
  HASH_ITER(hh, c->dir_puts, d, dt) {
    HASH_DEL(c->dir_puts, d);
    free(d->val);
    free(d);
  }
  for (int i = 0; i < c->ncomms; i++) free(c->comms[i].ranks);
  free(c->comms);
  free(c->pubs);
  free(c->outq.b);
  free(c->w.b);
  free(c);
}

void ah_coord_client_cut(ah_coord_t *c) {
  atomic_store(&c->cut_req, 1);
  ah_coord_client_wake(c);
}

size_t ah_coord_client_unacked(ah_coord_t *c) {
  pthread_mutex_lock(&c->mu);
  size_t n = c->npubs - c->pub_head;
  pthread_mutex_unlock(&c->mu);
  return n;
}

int ah_coord_client_connects(ah_coord_t *c) { return atomic_load(&c->connects); }

int ah_coord_client_relay_role(ah_coord_t *c) { return atomic_load(&c->relay_role); }

int ah_coord_client_ring_waits(ah_coord_t *c) { return atomic_load(&c->ring_waits); }

int ah_coord_client_relay_endpoint(ah_coord_t *c, struct sockaddr_storage *ss_p, socklen_t *len_p) {
  if (!c->o.relay) return -1;
  memset(ss_p, 0, sizeof *ss_p);
  memcpy(ss_p, &c->rsa, c->rsl);
  *len_p = c->rsl;
  return 0;
}

/* Returns 0, or -1 when the hub is gone, the rank is out of range or memory ran out (logged).
 * Note that joining a rank twice asks for nothing new: the hub replays only what this process has
 * not seen. */
static int client_join(ah_coord_t *c, uint64_t comm, int nranks, uint32_t rank,
                       const ah_coord_digest_t *digest) {
  if (!atomic_load(&c->alive)) return -1;
  if (nranks <= 0 || (uint32_t)nranks > AH_COORD_MAX_RANKS ||
      (rank != AH_COORD_NO_RANK && rank >= (uint32_t)nranks)) {
    ah_log(AH_LOG_ERROR,
           "coordinator: cannot join rank %d of %d ranks of comm %016llx (out of "
           "range)",
           (int)rank, nranks, (unsigned long long)comm);
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
    if (rc == 0) rc = ah_coord_client_queue_join_rank(c, m, rank);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory joining comm %016llx",
           (unsigned long long)comm);
    return -1;
  }
  ah_coord_client_send_now(c); /* the I/O thread's wake-up and hop only when the socket is busy */
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

void ah_coord_goodbye(ah_coord_t *c) {
  if (!c || !atomic_load(&c->alive)) return;
  pthread_mutex_lock(&c->mu);
  int rc = ah_coord_client_buf_put_msg(&c->outq, AH_MSG_BYE, NULL, 0);
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) return;
  int byes = atomic_load(&c->byes);
  for (int i = 0; i < 50 && !ah_coord_client_send_sync(c); i++) ah_coord_client_sleep_us(1000);
  /* The hub answers once what it sent before has gone: a finding about the rank whose death
   * brought this process down (its NCCL failed) is logged and reported before it exits. */
  for (int i = 0; i < 500 && atomic_load(&c->byes) == byes && atomic_load(&c->alive); i++)
    ah_coord_client_sleep_us(1000);
}

void ah_coord_leave(ah_coord_t *c, uint64_t comm) {
  pthread_mutex_lock(&c->mu);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm) {
      free(c->comms[i].ranks);
      c->comms[i] = c->comms[--c->ncomms];
      uint8_t p[8];
      ah_coord_put_u64(p, comm);
      if (ah_coord_client_buf_put_msg(&c->outq, AH_MSG_LEAVE, p, 8) != 0)
        ah_log(AH_LOG_WARN, "coordinator: out of memory sending LEAVE for comm %016llx",
               (unsigned long long)comm);
      break;
    }
  pthread_mutex_unlock(&c->mu);
  ah_coord_client_send_now(c);
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
    rc = ah_coord_client_queue_publish(c, pb);
  }
  pthread_mutex_unlock(&c->mu);
  if (rc != 0) {
    ah_log(AH_LOG_ERROR, "coordinator: out of memory publishing a segment of comm %016llx",
           (unsigned long long)key->comm);
    return -1;
  }
  ah_coord_client_send_now(c);
  return 0;
}

int ah_coord_alive(const ah_coord_t *c) { return c && atomic_load(&c->alive); }
int ah_coord_reachable(const ah_coord_t *c) {
  return c && (atomic_load(&c->up) || (atomic_load(&c->alive) && !atomic_load(&c->hub_lost)));
}

/* Whether comm is still joined here (under c->mu). A record about one the process has left is not
 * sent: LEAVE went first on the same queue, the hub may have freed the communicator since, and it
 * drops a connection that speaks of a communicator it does not know (a health tick that read the
 * verdict just before the last local rank retired would otherwise cut the connection). */
static int comm_joined_locked(const ah_coord_t *c, uint64_t comm) {
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i].comm == comm) return 1;
  return 0;
}

int ah_coord_progress(ah_coord_t *c, uint64_t comm, const ah_health_rec_t *rec) {
  if (!c || !atomic_load(&c->alive)) return -1;
  uint8_t p[8 + AH_HEALTH_REC_BYTES];
  ah_coord_put_u64(p, comm);
  ah_health_rec_pack(rec, p + 8);
  pthread_mutex_lock(&c->mu);
  /* while disconnected it waits in outq, which a reconnection rebuilds without it (stale by then) */
  int rc = comm_joined_locked(c, comm)
               ? ah_coord_client_buf_put_msg(&c->outq, AH_MSG_PROGRESS, p, sizeof p)
               : 0;
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) ah_coord_client_send_now(c);
  return rc;
}

int ah_coord_samples(ah_coord_t *c, uint64_t comm, uint32_t rank, const ah_health_sample_t *x,
                     int n) {
  if (!c || !atomic_load(&c->alive)) return -1;
  uint8_t p[8 + AH_HEALTH_SAMPLES_BYTES];
  ah_coord_put_u64(p, comm);
  ah_health_samples_pack(rank, x, n, p + 8);
  pthread_mutex_lock(&c->mu);
  int rc = comm_joined_locked(c, comm)
               ? ah_coord_client_buf_put_msg(&c->outq, AH_MSG_SAMPLES, p, sizeof p)
               : 0;
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) ah_coord_client_send_now(c);
  return rc;
}

static int link_send(ah_coord_t *c, uint8_t type, const uint8_t *p, uint32_t len) {
  if (!c || !atomic_load(&c->alive)) return -1;
  pthread_mutex_lock(&c->mu);
  int rc = ah_coord_client_buf_put_msg(&c->outq, type, p, len);
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) ah_coord_client_send_now(c);
  return rc;
}

int ah_coord_link_qps(ah_coord_t *c, uint32_t pid, const ah_link_qp_t *q, int n) {
  uint8_t p[AH_LINK_QP_MSG_BYTES];
  ah_link_qps_pack(pid, q, n, p);
  return link_send(c, AH_MSG_LINK_QP, p, sizeof p);
}

int ah_coord_link_rates(ah_coord_t *c, uint32_t pid, const ah_link_rate_t *r, int n) {
  uint8_t p[AH_LINK_RATE_MSG_BYTES];
  ah_link_rates_pack(pid, r, n, p);
  return link_send(c, AH_MSG_LINK_RATES, p, sizeof p);
}

int ah_coord_nic_port(ah_coord_t *c, const ah_nic_port_t *x) {
  uint8_t p[AH_NIC_PORT_BYTES];
  ah_nic_port_pack(x, p);
  return link_send(c, AH_MSG_NIC_PORT, p, sizeof p);
}

/* Note that the report waits in the out queue like a SAMPLES: a reconnection rebuilds the queue
 * without it (the leader's search counts the call as lost, which it tolerates). */
int ah_coord_search_time(ah_coord_t *c, uint64_t comm, uint32_t rank, int coll, int bin,
                         uint64_t index, double us) {
  if (!c || !atomic_load(&c->alive)) return -1;
  if (coll < 0 || coll >= AH_NUM_FUNCTIONS || bin < 0 || bin > 63 || !(us >= 0)) return -1;
  ah_coord_time_t t = {.comm = comm,
                       .rank = rank,
                       .coll = (uint8_t)coll,
                       .bin = (uint8_t)bin,
                       .index = index,
                       .us = (float)us};
  uint8_t p[8 + 4 + 1 + 1 + 8 + 4];
  ah_coord_time_pack(AH_MSG_SEARCH_TIME, &t, p);
  pthread_mutex_lock(&c->mu);
  int rc = ah_coord_client_buf_put_msg(&c->outq, AH_MSG_SEARCH_TIME, p, sizeof p);
  pthread_mutex_unlock(&c->mu);
  if (rc == 0) ah_coord_client_send_now(c);
  return rc;
}

int ah_coord_client_findings(ah_coord_t *c) { return atomic_load(&c->findings); }

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
  for (ah_coord_t *c = connect_list; c; c = c->next) {
    atomic_store(&c->alive, 0);
    /* The parent's relay endpoint and its local processes' sockets: held here they would keep the
     * endpoint's name taken after the parent exits, with nobody serving it. */
    if (c->lfd >= 0) close(c->lfd);
    if (c->lbell >= 0) close(c->lbell);
    for (int i = 0; i < c->nlocals; i++) close(c->locals[i]->fd);
  }
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
    o.relay = setup ? setup->relay : 0;
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
