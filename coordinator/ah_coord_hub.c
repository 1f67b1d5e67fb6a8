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
 * not read is dropped once max_outbuf bytes wait for it. An authenticated client is bounded too:
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
#include "ah_uthash.h"

#include "ah_coord_internal.h"
#include "ah_log.h"

#define FRAME_SEGMENT_BYTES (AH_COORD_HDR_BYTES + 8 + AH_COORD_KEYSEG_BYTES)
#define HUB_TICK_MS 50

typedef struct hub_conn {
  int fd;
  int authed;
  int closing;
  char peer[64];
  uint8_t nonce[AH_COORD_NONCE_BYTES];
  uint64_t client_id; /* set at AUTH */
  uint64_t accepted_ns, frame_start_ns, last_rx_ns;
  uint8_t rbuf[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  size_t rlen;
  uint32_t need; /* bytes of the current frame, header included; 0 until the header is decoded */
  uint8_t *wbuf;
  size_t woff, wlen, wcap;
  int want_out;
  uint64_t *comms;
  int ncomms, capcomms;
  struct hub_conn *prev, *next; /* pending (unauthenticated) list, oldest first */
  struct hub_conn *close_next;
} hub_conn_t;

/* The ranks of a communicator that joined with one settings digest. */
typedef struct {
  ah_coord_digest_t d;
  uint32_t n, min_rank;
} hub_digest_t;
/* Distinct digests kept per communicator: a job has one, a job with a stray setting two or three. */
#define HUB_DIGESTS 8

typedef struct {
  uint64_t comm;
  uint64_t owner;         /* client id whose JOIN or PUBLISH created it: charged for it */
  uint64_t pending_by;    /* client id charged for its pending join (the bitmap's allocation) */
  uint32_t nranks;        /* from the first JOIN; 0 while only publishes named the comm */
  uint32_t njoined;       /* distinct ranks joined */
  uint8_t *joined;        /* one bit per rank */
  uint64_t first_join_ns; /* the join deadline (join_ms) runs from here */
  int verdict;            /* AH_COORD_VERDICT_*, decided once and never changed */
  hub_digest_t dg[HUB_DIGESTS]; /* the distinct settings digests its ranks joined with */
  int ndg;
  hub_digest_t dg_more;   /* ranks whose digest did not fit in dg[] (n 0: none) */
  ah_coord_mismatch_t mm; /* MISMATCH's evidence, set when it is decided */
  uint8_t (*frames)[FRAME_SEGMENT_BYTES]; /* SEGMENT frames, seq = index + 1 */
  size_t nframes, capframes;
  hub_conn_t **subs;
  int nsubs, capsubs;
  UT_hash_handle hh;
} hub_comm_t;

typedef struct {
  uint64_t id;
  uint64_t last_pub;
  int ncomms;     /* communicators this client created */
  int npending;   /* of the pending joins, those this client started */
  size_t nframes; /* segments of this client retained */
  UT_hash_handle hh;
} hub_client_t;

/* Rate limit of one kind of refusal: 5 lines a second, then a count of what was suppressed. */
typedef struct {
  uint64_t window_ns;
  int n;
  int suppressed;
} hub_rate_t;

enum {
  RATE_AUTH, RATE_FRAME, RATE_TIMEOUT, RATE_FLOOD, RATE_CLOSED, RATE_SLOW, RATE_ACCEPT, RATE_CAP_COMM,
  RATE_CAP_JOIN, RATE_CAP_SEGMENT, RATE_VERDICT, RATE_REPLAY, RATE_N
};

struct ah_coord_hub {
  int lfd, epfd, efd, spare_fd;
  pthread_t thr;
  atomic_int stop;
  atomic_int nclients;
  uint8_t secret[16];
  ah_coord_hub_opts_t o;
  char addr[96];
  hub_conn_t *pend_head, *pend_tail;
  int npending;
  hub_conn_t **all; /* every open connection, for the sweep */
  int nall, capall;
  hub_conn_t *close_list;
  hub_comm_t *comms;
  int ncomms, npending_joins; /* communicators; those with a join and no verdict yet */
  size_t rank_bytes;    /* bytes of every communicator's rank bitmap */
  size_t nframes;       /* segments retained, all communicators */
  hub_client_t *clients;
  hub_rate_t rate[RATE_N];
};

static void hub_refuse(ah_coord_hub_t *h, int kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Closes a kind's one-second window once it has passed, logging what it suppressed. Called by each
 * refusal and by every sweep tick, so a burst's count is logged even when nothing follows it. */
static void hub_rate_roll(ah_coord_hub_t *h, hub_rate_t *r, uint64_t now) {
  if (now - r->window_ns <= 1000000000ull) return;
  if (r->suppressed)
    ah_log(AH_LOG_WARN, "coordinator hub %s: %d more refusals like the last were not logged",
           h->addr, r->suppressed);
  r->window_ns = now;
  r->n = 0;
  r->suppressed = 0;
}

static void hub_refuse(ah_coord_hub_t *h, int kind, const char *fmt, ...) {
  hub_rate_t *r = &h->rate[kind];
  hub_rate_roll(h, r, ah_coord_now_ns());
  if (r->n++ >= 5) {
    r->suppressed++;
    return;
  }
  char msg[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  ah_log(AH_LOG_WARN, "coordinator hub %s: %s", h->addr, msg);
}

void ah_coord_hub_opts_default(ah_coord_hub_opts_t *o_p) {
  o_p->auth_ms = 3000;
  o_p->frame_ms = 5000;
  o_p->idle_ms = 30000;
  o_p->max_pending = 256;
  o_p->max_outbuf = 64u << 20;
  o_p->join_ms = 30000; /* AUTOHA_COORD_JOIN_S's default; ah_coord_hub_start applies the setup's */
  o_p->max_comms = 4096;
  o_p->max_client_comms = 1024;
  o_p->max_pending_joins = 1024;
  o_p->max_client_pending_joins = 256;
  o_p->max_rank_bytes = 16u << 20;
  o_p->max_segments = 65536;
  o_p->max_client_segments = 16384;
}

static void pend_unlink(ah_coord_hub_t *h, hub_conn_t *c) {
  if (c->prev) c->prev->next = c->next;
  else if (h->pend_head == c) h->pend_head = c->next;
  else return; /* not on the list */
  if (c->next) c->next->prev = c->prev;
  else h->pend_tail = c->prev;
  c->prev = c->next = NULL;
  h->npending--;
}

static void conn_close_later(ah_coord_hub_t *h, hub_conn_t *c) {
  if (c->closing) return;
  c->closing = 1;
  c->close_next = h->close_list;
  h->close_list = c;
}

static void comm_unsub(hub_comm_t *m, hub_conn_t *c) {
  for (int i = 0; i < m->nsubs; i++)
    if (m->subs[i] == c) {
      m->subs[i] = m->subs[--m->nsubs];
      return;
    }
}

static void conn_free(ah_coord_hub_t *h, hub_conn_t *c) {
  pend_unlink(h, c);
  for (int i = 0; i < c->ncomms; i++) {
    hub_comm_t *m = NULL;
    HASH_FIND(hh, h->comms, &c->comms[i], sizeof(uint64_t), m);
    if (m) comm_unsub(m, c);
  }
  for (int i = 0; i < h->nall; i++)
    if (h->all[i] == c) {
      h->all[i] = h->all[--h->nall];
      break;
    }
  if (c->authed) atomic_fetch_sub(&h->nclients, 1);
  epoll_ctl(h->epfd, EPOLL_CTL_DEL, c->fd, NULL);
  close(c->fd);
  free(c->wbuf);
  free(c->comms);
  free(c);
}

static void hub_close_pending(ah_coord_hub_t *h) {
  while (h->close_list) {
    hub_conn_t *c = h->close_list;
    h->close_list = c->close_next;
    conn_free(h, c);
  }
}

static void conn_interest(ah_coord_hub_t *h, hub_conn_t *c, int want_out) {
  if (c->want_out == want_out) return;
  struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
  epoll_ctl(h->epfd, EPOLL_CTL_MOD, c->fd, &ev);
  c->want_out = want_out;
}

static void conn_flush(ah_coord_hub_t *h, hub_conn_t *c) {
  while (c->woff < c->wlen) {
    ssize_t r = send(c->fd, c->wbuf + c->woff, c->wlen - c->woff, MSG_NOSIGNAL);
    if (r > 0) {
      c->woff += (size_t)r;
      continue;
    }
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      conn_interest(h, c, 1);
      return;
    }
    hub_refuse(h, RATE_CLOSED, "send to %s failed (%s); connection dropped", c->peer,
               r < 0 ? strerror(errno) : "0 bytes");
    conn_close_later(h, c);
    return;
  }
  c->woff = c->wlen = 0;
  conn_interest(h, c, 0);
}

/* Queues bytes for a connection; sends at once when nothing else waits. */
static void conn_send(ah_coord_hub_t *h, hub_conn_t *c, const void *buf, size_t n) {
  if (c->closing) return;
  if (c->wlen - c->woff + n > h->o.max_outbuf) {
    hub_refuse(h, RATE_SLOW, "client %s does not read (%zu bytes queued); connection dropped",
               c->peer, c->wlen - c->woff);
    conn_close_later(h, c);
    return;
  }
  if (c->woff > 0 && c->wlen + n > c->wcap) {
    memmove(c->wbuf, c->wbuf + c->woff, c->wlen - c->woff);
    c->wlen -= c->woff;
    c->woff = 0;
  }
  if (c->wlen + n > c->wcap) {
    size_t cap = c->wcap ? c->wcap : 1024;
    while (cap < c->wlen + n) cap *= 2;
    uint8_t *w = realloc(c->wbuf, cap);
    if (!w) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory queueing %zu bytes for %s", h->addr,
             n, c->peer);
      conn_close_later(h, c);
      return;
    }
    c->wbuf = w;
    c->wcap = cap;
  }
  int was_empty = c->wlen == c->woff;
  memcpy(c->wbuf + c->wlen, buf, n);
  c->wlen += n;
  if (was_empty) conn_flush(h, c);
}

static void conn_send_msg(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type, const uint8_t *payload,
                          uint32_t len) {
  uint8_t f[AH_COORD_HDR_BYTES + AH_COORD_MAX_PAYLOAD];
  ah_coord_hdr_encode(type, len, f);
  if (len) memcpy(f + AH_COORD_HDR_BYTES, payload, len);
  conn_send(h, c, f, AH_COORD_HDR_BYTES + len);
}

/* Returns the communicator, created and charged to client cl when new; NULL when a cap refuses
 * it (logged, rate-limited) or memory runs out (logged). */
static hub_comm_t *hub_comm_get(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl,
                                uint64_t comm) {
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  if (m) return m;
  if (cl->ncomms >= h->o.max_client_comms || h->ncomms >= h->o.max_comms) {
    hub_refuse(h, RATE_CAP_COMM, "refused comm %016llx from %s: %s already holds %d communicators (at "
               "most %d per client, %d per job); its ranks run NCCL's own choices",
               (unsigned long long)comm, c->peer, cl->ncomms >= h->o.max_client_comms ? "the client"
               : "the job", cl->ncomms >= h->o.max_client_comms ? cl->ncomms : h->ncomms,
               h->o.max_client_comms, h->o.max_comms);
    return NULL;
  }
  m = calloc(1, sizeof *m);
  if (!m) {
    ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory adding comm %016llx for %s", h->addr,
           (unsigned long long)comm, c->peer);
    return NULL;
  }
  m->comm = comm;
  m->owner = cl->id;
  cl->ncomms++;
  h->ncomms++;
  HASH_ADD(hh, h->comms, comm, sizeof(uint64_t), m);
  if (!AH_HASH_ADDED(m)) { /* out of memory: the caller refuses the message as for calloc */
    free(m);
    return NULL;
  }
  return m;
}

static hub_client_t *hub_client_find(ah_coord_hub_t *h, uint64_t id) {
  hub_client_t *cl = NULL;
  HASH_FIND(hh, h->clients, &id, sizeof id, cl);
  return cl;
}

static void verdict_send(ah_coord_hub_t *h, hub_conn_t *c, const hub_comm_t *m) {
  uint8_t p[28];
  int mm = m->verdict == AH_COORD_VERDICT_MISMATCH;
  ah_coord_put_u64(p, m->comm);
  ah_coord_put_u32(p + 8, (uint32_t)m->verdict);
  ah_coord_put_u32(p + 12, mm ? m->mm.mask : 0);
  ah_coord_put_u32(p + 16, mm ? m->mm.ref_rank : 0);
  ah_coord_put_u32(p + 20, mm ? m->mm.first_rank : 0);
  ah_coord_put_u32(p + 24, mm ? m->mm.ndiffer : 0);
  conn_send_msg(h, c, AH_MSG_VERDICT, p, sizeof p);
}

static void digest_count(hub_digest_t *g, uint32_t rank) {
  if (!g->n || rank < g->min_rank) g->min_rank = rank;
  g->n++;
}

/* Counts a newly joined rank under its settings digest. */
static void digest_add(hub_comm_t *m, uint32_t rank, const uint8_t *p) {
  ah_coord_digest_t d;
  for (int i = 0; i < AH_COORD_DIGEST_PARTS; i++) d.part[i] = ah_coord_get_u64(p + 8 * i);
  for (int i = 0; i < m->ndg; i++)
    if (memcmp(&m->dg[i].d, &d, sizeof d) == 0) {
      digest_count(&m->dg[i], rank);
      return;
    }
  if (m->ndg < HUB_DIGESTS) {
    m->dg[m->ndg].d = d;
    digest_count(&m->dg[m->ndg++], rank);
  } else {
    digest_count(&m->dg_more, rank);
  }
}

/* Whether the joined ranks' digests differ; if so fills m->mm. The reference is the digest of the
 * lowest rank (normally rank 0), whatever order the ranks joined in. */
static int digest_mismatch(hub_comm_t *m) {
  if (m->ndg + (m->dg_more.n > 0) <= 1) return 0;
  int ref = 0;
  for (int i = 1; i < m->ndg; i++)
    if (m->dg[i].min_rank < m->dg[ref].min_rank) ref = i;
  ah_coord_mismatch_t mm = {.ref_rank = m->dg[ref].min_rank, .first_rank = UINT32_MAX};
  for (int i = 0; i < m->ndg; i++) {
    if (i == ref) continue;
    for (int k = 0; k < AH_COORD_DIGEST_PARTS; k++)
      if (m->dg[i].d.part[k] != m->dg[ref].d.part[k]) mm.mask |= 1u << k;
    mm.ndiffer += m->dg[i].n;
    if (m->dg[i].min_rank < mm.first_rank) mm.first_rank = m->dg[i].min_rank;
  }
  if (m->dg_more.n) { /* digests not kept: which parts differ is unknown */
    mm.mask = (1u << AH_COORD_DIGEST_PARTS) - 1;
    mm.ndiffer += m->dg_more.n;
    if (m->dg_more.min_rank < mm.first_rank) mm.first_rank = m->dg_more.min_rank;
  }
  m->mm = mm;
  return 1;
}

/* Decides a communicator's verdict (once) and tells every connection joined to it. Later joiners
 * get it from hub_on_join. */
static void verdict_decide(ah_coord_hub_t *h, hub_comm_t *m, int verdict) {
  if (verdict == AH_COORD_VERDICT_COMPLETE && digest_mismatch(m)) verdict = AH_COORD_VERDICT_MISMATCH;
  m->verdict = verdict;
  if (m->joined) { /* it was pending */
    h->npending_joins--;
    hub_client_t *cl = hub_client_find(h, m->pending_by);
    if (cl) cl->npending--;
  }
  if (verdict == AH_COORD_VERDICT_COMPLETE)
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: comm %016llx: all %u ranks joined", h->addr,
           (unsigned long long)m->comm, m->nranks);
  else if (verdict == AH_COORD_VERDICT_MISMATCH) /* each rank's process names the difference */
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: comm %016llx: %u ranks joined with other settings "
           "than rank %u", h->addr, (unsigned long long)m->comm, m->mm.ndiffer, m->mm.ref_rank);
  else /* rate-limited: forged communicators must not flood the log when their deadline passes */
    hub_refuse(h, RATE_VERDICT, "comm %016llx: only %u of its %u ranks joined within %d ms; every "
               "rank runs NCCL's own choices", (unsigned long long)m->comm, m->njoined,
               m->nranks, h->o.join_ms);
  for (int i = 0; i < m->nsubs; i++) verdict_send(h, m->subs[i], m);
}

/* Note that a JOIN is refused (and the connection dropped) when its rank is not below its rank
 * count, when the count is 0 or above AH_COORD_MAX_RANKS, or when it differs from the count the
 * communicator's first JOIN gave: no legitimate rank sends any of these, and accepting them could
 * decide a verdict the other ranks never agreed to. */
/* Tells one connection that a communicator the caps refused is abandoned: the rank then runs NCCL's
 * own choices at once, as if it never reached the hub, instead of waiting for a verdict. */
static void verdict_refuse(ah_coord_hub_t *h, hub_conn_t *c, uint64_t comm) {
  uint8_t p[28] = {0}; /* no mismatch evidence */
  ah_coord_put_u64(p, comm);
  ah_coord_put_u32(p + 8, (uint32_t)AH_COORD_VERDICT_ABANDONED);
  conn_send_msg(h, c, AH_MSG_VERDICT, p, sizeof p);
}

static void hub_on_join(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  uint32_t nranks = ah_coord_get_u32(p + 8);
  uint32_t rank = ah_coord_get_u32(p + 12);
  uint64_t since = ah_coord_get_u64(p + 16);
  if (nranks == 0 || nranks > AH_COORD_MAX_RANKS || (rank >= nranks && rank != AH_COORD_NO_RANK)) {
    hub_refuse(h, RATE_FRAME, "refused a JOIN from %s: rank %u of %u ranks out of range (at most "
               "%u ranks); connection dropped", c->peer, rank, nranks, AH_COORD_MAX_RANKS);
    conn_close_later(h, c);
    return;
  }
  hub_comm_t *found = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, found);
  if (found && found->nranks && found->nranks != nranks) {
    hub_refuse(h, RATE_FRAME, "refused a JOIN from %s: comm %016llx has %u ranks, the JOIN says "
               "%u; connection dropped", c->peer, (unsigned long long)comm, found->nranks, nranks);
    conn_close_later(h, c);
    return;
  }
  hub_comm_t *m = hub_comm_get(h, c, cl, comm);
  if (!m) {
    verdict_refuse(h, c, comm);
    return;
  }
  if (!m->joined && rank != AH_COORD_NO_RANK && m->verdict == AH_COORD_VERDICT_NONE) {
    size_t bytes = (nranks + 7) / 8;
    if (cl->npending >= h->o.max_client_pending_joins || h->npending_joins >= h->o.max_pending_joins ||
        h->rank_bytes + bytes > h->o.max_rank_bytes) {
      hub_refuse(h, RATE_CAP_JOIN, "refused a JOIN of comm %016llx (%u ranks) from %s: %d pending joins "
                 "of the client, %d of the job, %zu bytes of rank bitmaps (at most %d, %d, %zu); "
                 "its ranks run NCCL's own choices", (unsigned long long)comm, nranks, c->peer,
                 cl->npending, h->npending_joins, h->rank_bytes, h->o.max_client_pending_joins,
                 h->o.max_pending_joins, h->o.max_rank_bytes);
      verdict_refuse(h, c, comm);
      return;
    }
    m->joined = calloc(bytes, 1);
    if (!m->joined) goto oom;
    m->nranks = nranks;
    m->first_join_ns = ah_coord_now_ns();
    m->pending_by = cl->id;
    cl->npending++;
    h->npending_joins++;
    h->rank_bytes += bytes;
  }
  if (rank != AH_COORD_NO_RANK && !(m->joined[rank / 8] & (1u << (rank % 8)))) {
    m->joined[rank / 8] |= (uint8_t)(1u << (rank % 8));
    m->njoined++;
    if (m->verdict == AH_COORD_VERDICT_NONE) digest_add(m, rank, p + 24);
  }
  int already = 0;
  for (int i = 0; i < c->ncomms; i++) already |= c->comms[i] == comm;
  if (!already) {
    if (c->ncomms == c->capcomms) {
      int cap = c->capcomms ? 2 * c->capcomms : 4;
      uint64_t *cs = realloc(c->comms, (size_t)cap * sizeof *cs);
      if (!cs) goto oom;
      c->comms = cs;
      c->capcomms = cap;
    }
    if (m->nsubs == m->capsubs) {
      int cap = m->capsubs ? 2 * m->capsubs : 8;
      hub_conn_t **ss = realloc(m->subs, (size_t)cap * sizeof *ss);
      if (!ss) goto oom;
      m->subs = ss;
      m->capsubs = cap;
    }
    c->comms[c->ncomms++] = comm;
    m->subs[m->nsubs++] = c;
  }
  ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s joined comm %016llx (rank %u of %u; %u joined) "
         "since %llu of %zu", h->addr, c->peer, (unsigned long long)comm, rank, nranks, m->njoined,
         (unsigned long long)since, m->nframes);
  if (since > m->nframes) {
    hub_refuse(h, RATE_REPLAY, "%s asks for comm %016llx segments after %llu, but only %zu exist (a "
               "different job's hub?); replaying none", c->peer, (unsigned long long)comm,
               (unsigned long long)since, m->nframes);
  } else if (since < m->nframes) /* the stored frames are contiguous: one copy, one send */
    conn_send(h, c, m->frames[since], (size_t)(m->nframes - since) * FRAME_SEGMENT_BYTES);
  /* The verdict after the replay; a connection joining again (another local rank, a reconnection)
   * simply gets it again, and the client keeps the first. */
  if (m->verdict != AH_COORD_VERDICT_NONE) verdict_send(h, c, m);
  else if (m->joined && m->njoined == m->nranks) verdict_decide(h, m, AH_COORD_VERDICT_COMPLETE);
  return;
oom:
  ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory joining %s to comm %016llx", h->addr,
         c->peer, (unsigned long long)comm);
  conn_close_later(h, c);
}

static void hub_on_leave(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  uint64_t comm = ah_coord_get_u64(p);
  hub_comm_t *m = NULL;
  HASH_FIND(hh, h->comms, &comm, sizeof comm, m);
  if (m) comm_unsub(m, c);
  for (int i = 0; i < c->ncomms; i++)
    if (c->comms[i] == comm) {
      c->comms[i] = c->comms[--c->ncomms];
      break;
    }
}

static hub_client_t *hub_client_get(ah_coord_hub_t *h, uint64_t id) {
  hub_client_t *cl = NULL;
  HASH_FIND(hh, h->clients, &id, sizeof id, cl);
  if (cl) return cl;
  cl = calloc(1, sizeof *cl);
  if (!cl) return NULL;
  cl->id = id;
  HASH_ADD(hh, h->clients, id, sizeof(uint64_t), cl);
  if (!AH_HASH_ADDED(cl)) {
    free(cl);
    return NULL;
  }
  return cl;
}

/* Note that publishes are numbered per client and the hub remembers the last one applied across
 * connections: a client that lost its connection resends what was not acknowledged, and a
 * resent segment the hub already has is acknowledged again but not stored or forwarded twice. */
static void hub_on_publish(ah_coord_hub_t *h, hub_conn_t *c, hub_client_t *cl, const uint8_t *p) {
  char err[160];
  uint64_t pub = ah_coord_get_u64(p);
  ah_key_t k;
  ah_segment_t s;
  if (ah_coord_keyseg_unpack(p + 8, &k, &s, err, sizeof err) != 0) {
    hub_refuse(h, RATE_FRAME, "refused a segment from %s: %s; connection dropped", c->peer, err);
    conn_close_later(h, c);
    return;
  }
  uint8_t ack[8];
  ah_coord_put_u64(ack, pub);
  if (pub <= cl->last_pub) {
    conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  if (cl->nframes >= h->o.max_client_segments || h->nframes >= h->o.max_segments) {
    /* Acknowledged so the client does not resend it, but neither stored nor forwarded. */
    hub_refuse(h, RATE_CAP_SEGMENT, "refused a segment of comm %016llx from %s: %zu segments retained for "
               "the client, %zu for the job (at most %zu, %zu)", (unsigned long long)k.comm,
               c->peer, cl->nframes, h->nframes, h->o.max_client_segments, h->o.max_segments);
    cl->last_pub = pub;
    conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  hub_comm_t *m = hub_comm_get(h, c, cl, k.comm);
  if (!m) {
    cl->last_pub = pub;
    conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
    return;
  }
  if (m->nframes == m->capframes) {
    size_t cap = m->capframes ? 2 * m->capframes : 8;
    void *f = realloc(m->frames, cap * FRAME_SEGMENT_BYTES);
    if (!f) goto oom;
    m->frames = f;
    m->capframes = cap;
  }
  uint8_t *f = m->frames[m->nframes];
  ah_coord_hdr_encode(AH_MSG_SEGMENT, 8 + AH_COORD_KEYSEG_BYTES, f);
  ah_coord_put_u64(f + AH_COORD_HDR_BYTES, m->nframes + 1);
  memcpy(f + AH_COORD_HDR_BYTES + 8, p + 8, AH_COORD_KEYSEG_BYTES);
  m->nframes++;
  cl->nframes++;
  h->nframes++;
  cl->last_pub = pub;
  for (int i = 0; i < m->nsubs; i++) conn_send(h, m->subs[i], f, FRAME_SEGMENT_BYTES);
  conn_send_msg(h, c, AH_MSG_ACK, ack, 8);
  return;
oom:
  ah_log(AH_LOG_ERROR, "coordinator hub %s: out of memory storing a segment from %s", h->addr,
         c->peer);
  conn_close_later(h, c);
}

static void hub_on_auth(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  uint8_t want[32], reply[40];
  uint64_t id = ah_coord_get_u64(p + 32);
  if (ah_coord_exiting()) { /* libcrypto may be torn down: answer nothing */
    conn_close_later(h, c);
    return;
  }
  if (ah_coord_mac(h->secret, "autoha-client", c->nonce, p, id, want) != 0 ||
      !ah_coord_mac_equal(want, p + 40)) {
    hub_refuse(h, RATE_AUTH, "refused %s: authentication failed (wrong job secret)", c->peer);
    conn_close_later(h, c);
    return;
  }
  hub_client_t *cl = hub_client_get(h, id);
  if (!cl || ah_coord_mac(h->secret, "autoha-hub", p, c->nonce, cl->last_pub, reply) != 0) {
    if (ah_coord_exiting()) {
      conn_close_later(h, c);
      return;
    }
    ah_log(AH_LOG_ERROR, "coordinator hub %s: cannot answer %s (out of memory or libcrypto "
           "failure)", h->addr, c->peer);
    conn_close_later(h, c);
    return;
  }
  ah_coord_put_u64(reply + 32, cl->last_pub);
  pend_unlink(h, c);
  c->authed = 1;
  c->client_id = id;
  atomic_fetch_add(&h->nclients, 1);
  ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s authenticated (client %016llx)", h->addr, c->peer,
         (unsigned long long)id);
  conn_send_msg(h, c, AH_MSG_WELCOME, reply, 40);
}

static void hub_on_frame(ah_coord_hub_t *h, hub_conn_t *c, uint8_t type, const uint8_t *p) {
  if (!c->authed) {
    if (type != AH_MSG_AUTH) {
      hub_refuse(h, RATE_AUTH, "refused %s: message type %u before authentication", c->peer, type);
      conn_close_later(h, c);
    } else {
      hub_on_auth(h, c, p);
    }
    return;
  }
  hub_client_t *cl = NULL;
  switch (type) {
    case AH_MSG_LEAVE: hub_on_leave(h, c, p); break;
    case AH_MSG_JOIN:
    case AH_MSG_PUBLISH:
      cl = hub_client_find(h, c->client_id);
      if (!cl) {
        conn_close_later(h, c);
        return;
      }
      if (type == AH_MSG_JOIN) hub_on_join(h, c, cl, p);
      else hub_on_publish(h, c, cl, p);
      break;
    case AH_MSG_PING: conn_send_msg(h, c, AH_MSG_PONG, NULL, 0); break;
    default:
      hub_refuse(h, RATE_FRAME, "refused %s: unexpected message type %u from a client; connection "
                 "dropped", c->peer, type);
      conn_close_later(h, c);
  }
}

static void hub_conn_read(ah_coord_hub_t *h, hub_conn_t *c) {
  char err[200];
  for (;;) {
    size_t want = c->need ? c->need : AH_COORD_HDR_BYTES;
    ssize_t r = read(c->fd, c->rbuf + c->rlen, want - c->rlen);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (r <= 0) {
      if (c->rlen > 0)
        hub_refuse(h, RATE_FRAME, "refused %s: truncated frame (connection closed after %zu of %u "
                   "bytes)", c->peer, c->rlen, c->need ? c->need : AH_COORD_HDR_BYTES);
      else if (!c->authed)
        hub_refuse(h, RATE_CLOSED, "%s closed the connection before authenticating", c->peer);
      else if (r < 0 && errno != ECONNRESET)
        hub_refuse(h, RATE_CLOSED, "read from %s failed: %s", c->peer, strerror(errno));
      else if (r < 0)
        ah_log(AH_LOG_INFO, "coordinator hub %s: %s reset the connection", h->addr, c->peer);
      else
        ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s disconnected", h->addr, c->peer);
      conn_close_later(h, c);
      return;
    }
    uint64_t now = ah_coord_now_ns();
    if (c->rlen == 0) c->frame_start_ns = now;
    c->rlen += (size_t)r;
    c->last_rx_ns = now;
    if (c->rlen < want) continue;
    if (!c->need) {
      ah_coord_hdr_t hd;
      if (ah_coord_hdr_decode(c->rbuf, &hd, err, sizeof err) != 0) {
        hub_refuse(h, RATE_FRAME, "refused %s: %s; connection dropped", c->peer, err);
        conn_close_later(h, c);
        return;
      }
      c->need = AH_COORD_HDR_BYTES + hd.len;
      if (hd.len > 0) continue;
    }
    uint8_t type = c->rbuf[5];
    c->rlen = 0;
    c->need = 0;
    hub_on_frame(h, c, type, c->rbuf + AH_COORD_HDR_BYTES);
    if (c->closing) return;
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
        hub_refuse(h, RATE_ACCEPT, "out of file descriptors (%s); refused a connection", err);
        continue;
      }
      hub_refuse(h, RATE_ACCEPT, "%s", err);
      return;
    }
    if (ah_coord_exiting()) { /* exit() may be tearing libcrypto down: no new handshakes */
      close(fd);
      continue;
    }
    if (h->nall == h->capall) {
      int cap = h->capall ? 2 * h->capall : 64;
      hub_conn_t **all = realloc(h->all, (size_t)cap * sizeof *all);
      if (all) {
        h->all = all;
        h->capall = cap;
      }
    }
    hub_conn_t *c = h->nall < h->capall ? calloc(1, sizeof *c) : NULL;
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
    h->all[h->nall++] = c;
    c->prev = h->pend_tail;
    if (h->pend_tail) h->pend_tail->next = c;
    else h->pend_head = c;
    h->pend_tail = c;
    h->npending++;
    if (h->npending > h->o.max_pending) {
      hub_conn_t *old = h->pend_head;
      hub_refuse(h, RATE_FLOOD, "refused %s: %d unauthenticated connections held (connection "
                 "flood?); dropped the oldest", old->peer, h->npending);
      pend_unlink(h, old);
      conn_close_later(h, old);
    }
    conn_send_msg(h, c, AH_MSG_HELLO, c->nonce, AH_COORD_NONCE_BYTES);
  }
}

/* Enforces the per-connection deadlines. Note that this walks every connection each tick (50 ms):
 * at thousands of connections that is microseconds, and it keeps deadlines out of the I/O path. */
static void hub_sweep(ah_coord_hub_t *h) {
  uint64_t now = ah_coord_now_ns();
  for (int k = 0; k < RATE_N; k++) hub_rate_roll(h, &h->rate[k], now);
  uint64_t join_ns = (uint64_t)h->o.join_ms * 1000000ull;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next)
    if (m->verdict == AH_COORD_VERDICT_NONE && m->joined && now - m->first_join_ns > join_ns)
      verdict_decide(h, m, AH_COORD_VERDICT_ABANDONED);
  uint64_t auth_ns = (uint64_t)h->o.auth_ms * 1000000ull;
  uint64_t frame_ns = (uint64_t)h->o.frame_ms * 1000000ull;
  uint64_t idle_ns = (uint64_t)h->o.idle_ms * 1000000ull;
  for (int i = 0; i < h->nall; i++) {
    hub_conn_t *c = h->all[i];
    if (c->closing) continue;
    if (!c->authed && now - c->accepted_ns > auth_ns) {
      hub_refuse(h, RATE_TIMEOUT, "refused %s: no authentication within %d ms (%zu bytes of a "
                 "frame received; slow or stalled client)", c->peer, h->o.auth_ms, c->rlen);
      conn_close_later(h, c);
    } else if (c->authed && c->rlen > 0 && now - c->frame_start_ns > frame_ns) {
      hub_refuse(h, RATE_TIMEOUT, "refused %s: frame incomplete after %d ms (%zu of %u bytes; "
                 "slow client or truncated frame)", c->peer, h->o.frame_ms, c->rlen,
                 c->need ? c->need : AH_COORD_HDR_BYTES);
      conn_close_later(h, c);
    } else if (c->authed && now - c->last_rx_ns > idle_ns) {
      hub_refuse(h, RATE_TIMEOUT, "dropped %s: silent for %d ms", c->peer, h->o.idle_ms);
      conn_close_later(h, c);
    }
  }
}

static void *hub_main(void *arg) {
  ah_coord_hub_t *h = arg;
  pthread_setname_np(pthread_self(), "autoha-hub"); /* visible in top -H, gdb, perf */
  struct epoll_event evs[256];
  uint64_t last_sweep = ah_coord_now_ns();
  while (!atomic_load(&h->stop)) {
    int n = epoll_wait(h->epfd, evs, 256, HUB_TICK_MS);
    if (n < 0 && errno != EINTR) {
      ah_log(AH_LOG_ERROR, "coordinator hub %s: epoll_wait: %s; hub stopped", h->addr,
             strerror(errno));
      break;
    }
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
        if (evs[i].events & EPOLLOUT) conn_flush(h, c);
        if (!c->closing && (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))) hub_conn_read(h, c);
      }
    }
    uint64_t now = ah_coord_now_ns();
    if (now - last_sweep >= (uint64_t)HUB_TICK_MS * 1000000ull) {
      hub_sweep(h);
      last_sweep = now;
    }
    hub_close_pending(h);
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
    ah_coord_net_host_addr(&ss, &sl);
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
      ah_coord_net_host_addr(&hs, &hl);
      memcpy(st.addr, &((struct sockaddr_in *)&hs)->sin_addr, 4);
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
  for (int i = 0; i < h->nall; i++) conn_close_later(h, h->all[i]);
  hub_close_pending(h);
  hub_comm_t *m, *mt;
  HASH_ITER(hh, h->comms, m, mt) {
    HASH_DEL(h->comms, m);
    free(m->joined);
    free(m->frames);
    free(m->subs);
    free(m);
  }
  hub_client_t *cl, *ct;
  HASH_ITER(hh, h->clients, cl, ct) {
    HASH_DEL(h->clients, cl);
    free(cl);
  }
  free(h->all);
  close(h->lfd);
  close(h->epfd);
  close(h->efd);
  if (h->spare_fd >= 0) close(h->spare_fd);
  free(h);
}

int ah_coord_hub_clients(ah_coord_hub_t *h) { return atomic_load(&h->nclients); }

/* The process's hub, started once. */
static pthread_mutex_t hub_once_mu = PTHREAD_MUTEX_INITIALIZER;
static ah_coord_hub_t *hub_once;
static ah_coord_stamp_t hub_once_stamp;

/* Returns 0 and fills stamp_p, or -1 after logging. Note that AUTOHA_COORD_ADDR names the listen
 * address (host:port, port 1..65535, as the environment table validates it); without it the hub listens on this host's first
 * non-loopback address, and the process keeps one hub for its lifetime (a second call returns the
 * same stamp, so every id the process makes names the same hub and secret). */
/* In a child made by fork(), the parent's hub thread does not exist: the child starts its own hub
 * if it makes ids itself (the parent's keeps serving the parent's ids). */
static void hub_atfork_child(void) {
  hub_once = NULL;
  pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
  hub_once_mu = fresh;
}

static void hub_atfork_register(void) { pthread_atfork(NULL, NULL, hub_atfork_child); }

int ah_coord_hub_start(const ah_coord_setup_t *setup, ah_coord_stamp_t *stamp_p) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, hub_atfork_register);
  pthread_mutex_lock(&hub_once_mu);
  if (!hub_once) {
    uint8_t secret[16];
    const char *env = setup ? setup->addr : NULL;
    if (ah_coord_random(secret, sizeof secret) != 0) {
      ah_log(AH_LOG_ERROR, "coordinator hub: no random bytes for the job secret (RAND_bytes "
             "failed)");
    } else {
      char err[AH_NET_ERR_LEN];
      struct sockaddr_storage ss;
      socklen_t sl;
      int use = env && *env;
      if (use && ah_coord_net_addr_parse(err, env, &ss, &sl) != AH_NET_OK) use = 0;
      else if (use && ((struct sockaddr_in *)&ss)->sin_port == 0) use = 0; /* same port for v6 */
      if (env && *env && !use)
        ah_log(AH_LOG_INFO, "coordinator hub: address '%s' not used (expected host:port with a port "
               "in 1..65535); listening on this host's address", env);
      ah_coord_hub_opts_t o;
      ah_coord_hub_opts_default(&o);
      if (setup && setup->join_s > 0) o.join_ms = (int)(setup->join_s * 1000.0 + 0.5);
      if (o.join_ms < 1) o.join_ms = 1;
      hub_once = ah_coord_hub_open(use ? env : NULL, secret, &o, &hub_once_stamp);
    }
  }
  int rc = hub_once ? 0 : -1;
  if (hub_once) *stamp_p = hub_once_stamp;
  pthread_mutex_unlock(&hub_once_mu);
  return rc;
}
