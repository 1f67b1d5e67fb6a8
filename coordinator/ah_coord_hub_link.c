/* ah_coord_hub_link.c: the hub's slow-link diagnosis (docs/diagnosis.md "Slow links"). It keeps
 * every queue pair the job's processes announce (LINK_QP) and adds up what each sending end moved
 * (LINK_RATES); once a second it puts each connection in the matrix of every communicator whose
 * ranks it joins (ah_coord_linkmat.c), closes those matrices' windows and sends their findings to
 * the communicators' processes, as the hang and straggler findings go.
 *
 * A connection's ends become ranks through the progress records: a queue pair is announced with
 * its process (the connection's host and the pid) and the GPU current on the thread that created
 * it, a rank's record carries the same three; the peer end is the queue pair its process announced
 * under the GIDs and QP numbers the sending end named at its RTR. A process with one rank in a
 * communicator needs no GPU to tell. Key choice: the hub pairs the two ends itself, so a process
 * needs to know nothing of its peers, and a connection whose peer never announced (a process
 * without autoha) is simply not in the matrix. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_coord_hub_internal.h"
#include "ah_coord_link.h"
#include "ah_coord_linkmat.h"
#include "ah_log.h"

#define LINK_WINDOW_NS 1000000000ull /* the matrices' window */

typedef struct {
  uint8_t gid[16];
  uint32_t qpn;
} lkey_t;

typedef struct hub_lqp {
  lkey_t key; /* its GID and QP number */
  ah_link_qp_t q;
  char host[64];
  uint32_t pid;
  uint64_t bytes; /* the window being filled */
  double busy_s;
  uint32_t wrs;
  uint32_t gen; /* announcements of it so far */
  /* its hops' ids, as hops_of made them for peer at generations gen and peer_gen */
  uint32_t hops[AH_LM_HOPS];
  int nhops;
  const struct hub_lqp *hops_peer;
  uint32_t hops_gen, hops_peer_gen;
  UT_hash_handle hh;
} hub_lqp_t;

struct hub_link {
  hub_lqp_t *qps;
  uint32_t nqps;
  uint64_t window_ns; /* when the window being filled started */
};

/* A communicator's matrix and its current finding (for autoha status). */
struct hub_link_comm {
  ah_lm_t *lm;
  char text[AH_HEALTH_TEXT]; /* the latest slow finding while any is flagged, "" none */
};

static lkey_t key_of(const uint8_t gid[16], uint32_t qpn) {
  lkey_t k;
  memset(&k, 0, sizeof k);
  memcpy(k.gid, gid, 16);
  k.qpn = qpn;
  return k;
}

static hub_lqp_t *qp_find(struct hub_link *l, const uint8_t gid[16], uint32_t qpn) {
  if (!l) return NULL;
  lkey_t k = key_of(gid, qpn);
  hub_lqp_t *q = NULL;
  HASH_FIND(hh, l->qps, &k, sizeof k, q);
  return q;
}

/* The host a connection names (its peer address without the port), as the progress records'. */
void ah_coord_hub_conn_host(const hub_conn_t *c, char *out, size_t len) {
  snprintf(out, len, "%s", c->peer);
  char *colon = strrchr(out, ':');
  if (colon) *colon = 0;
}

void ah_coord_hub_rank_place(const hub_comm_t *m, uint32_t r, char *out, size_t len) {
  const hub_prog_t *s = m->prog && r < m->nranks ? &m->prog[r] : NULL;
  if (!s || !s->have) snprintf(out, len, "no progress record");
  else if (s->rec.gpu == 0xffff) snprintf(out, len, "%s pid %u", s->host, s->rec.pid);
  else snprintf(out, len, "%s pid %u gpu %u", s->host, s->rec.pid, s->rec.gpu);
}

static struct hub_link *link_get(ah_coord_hub_t *h) {
  if (!h->link) h->link = calloc(1, sizeof *h->link);
  return h->link;
}

/* A LINK_QP or LINK_RATES as its unpack left it: the pid it names and, malformed, why; then the
 * host of the connection it came on. */
typedef struct {
  uint32_t pid;
  char err[160];
  char host[64];
} link_msg_t;

/* Whether a message whose unpack returned n is taken; one that is malformed (n < 0) is refused by
 * name and its connection dropped (as a malformed PROGRESS). A taken one gets its host. */
static int link_msg_taken(ah_coord_hub_t *h, hub_conn_t *c, const char *what, int n,
                          link_msg_t *m) {
  if (n < 0) {
    ah_coord_hub_refuse(h, RATE_LINK, "refused a %s from %s: %s; connection dropped", what, c->peer,
                        m->err);
    ah_coord_hub_conn_close_later(h, c);
    return 0;
  }
  ah_coord_hub_conn_host(c, m->host, sizeof m->host);
  return 1;
}

void ah_coord_hub_on_link_qps(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  ah_link_qp_t q[AH_LINK_QPS];
  link_msg_t m = {0};
  int n = ah_link_qps_unpack(p, &m.pid, q, m.err, sizeof m.err);
  if (!link_msg_taken(h, c, "LINK_QP", n, &m)) return;
  struct hub_link *l = h->o.slow_link_pct > 0 ? link_get(h) : NULL;
  if (!l) return;
  for (int i = 0; i < n; i++) {
    hub_lqp_t *e = qp_find(l, q[i].lgid, q[i].lqpn);
    if (!e) {
      if (ah_coord_hub_mem_take(h, sizeof *e) != 0) {
        ah_coord_hub_mem_refuse(
            h, RATE_LINK, sizeof *e, "its link is not diagnosed (no slow-link findings for it)",
            "queue pair %u of %s pid %u (the %u-th)", q[i].lqpn, m.host, m.pid, l->nqps + 1);
        continue;
      }
      if (!(e = calloc(1, sizeof *e))) {
        ah_coord_hub_mem_give(h, sizeof *e);
        return;
      }
      e->key = key_of(q[i].lgid, q[i].lqpn);
      HASH_ADD(hh, l->qps, key, sizeof e->key, e);
      if (!AH_HASH_ADDED(e)) {
        free(e);
        ah_coord_hub_mem_give(h, sizeof *e);
        return;
      }
      l->nqps++;
    }
    /* a new queue pair with a number and GID a destroyed one had replaces it */
    e->q = q[i];
    e->gen++;
    e->pid = m.pid;
    snprintf(e->host, sizeof e->host, "%s", m.host);
  }
}

void ah_coord_hub_on_link_rates(ah_coord_hub_t *h, hub_conn_t *c, const uint8_t *p) {
  ah_link_rate_t r[AH_LINK_RATES];
  link_msg_t m = {0};
  int n = ah_link_rates_unpack(p, &m.pid, r, m.err, sizeof m.err);
  if (!link_msg_taken(h, c, "LINK_RATES", n, &m)) return;
  for (int i = 0; i < n; i++) {
    hub_lqp_t *e = qp_find(h->link, r[i].lgid, r[i].lqpn);
    /* only the process that announced it speaks for it (a number reused is announced again) */
    if (!e || e->pid != m.pid || strcmp(e->host, m.host) != 0 || e->q.role != AH_LINK_SENDER)
      continue;
    e->bytes += r[i].bytes;
    e->busy_s += r[i].busy_us / 1e6;
    e->wrs += r[i].wrs;
  }
}

/* ---- the window: connections into the communicators' matrices -------------------------------- */

/* One rank of one communicator, at a process. */
typedef struct {
  hub_comm_t *m;
  uint32_t rank;
  uint16_t gpu;
} place_t;

/* The ranks a process (host, pid) holds in the communicators diagnosed. */
typedef struct {
  char key[80]; /* "host/pid" */
  place_t *p;
  int n, cap;
  UT_hash_handle hh;
} proc_t;

static void proc_key(char *key, size_t len, const char *host, uint32_t pid) {
  snprintf(key, len, "%s/%u", host, pid);
}

static proc_t *procs_build(ah_coord_hub_t *h) {
  proc_t *procs = NULL;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->prog) continue;
    for (uint32_t r = 0; r < m->nranks; r++) {
      const hub_prog_t *s = &m->prog[r];
      if (!s->have) continue;
      char key[80];
      proc_key(key, sizeof key, s->host, s->rec.pid);
      proc_t *pr = NULL;
      HASH_FIND_STR(procs, key, pr);
      if (!pr) {
        if (!(pr = calloc(1, sizeof *pr))) continue;
        snprintf(pr->key, sizeof pr->key, "%s", key);
        HASH_ADD_STR(procs, key, pr);
        if (!AH_HASH_ADDED(pr)) {
          free(pr);
          continue;
        }
      }
      if (pr->n == pr->cap) {
        int cap = pr->cap ? 2 * pr->cap : 4;
        place_t *np = realloc(pr->p, (size_t)cap * sizeof *np);
        if (!np) continue;
        pr->p = np;
        pr->cap = cap;
      }
      pr->p[pr->n++] = (place_t){m, r, s->rec.gpu};
    }
  }
  return procs;
}

static void procs_free(proc_t *procs) {
  proc_t *pr, *tmp;
  HASH_ITER(hh, procs, pr, tmp) {
    HASH_DEL(procs, pr);
    free(pr->p);
    free(pr);
  }
}

/* The rank of communicator m that a queue pair created on `gpu` is at its process: the process's
 * only rank in m, or of several the one on that GPU. -1 when none. */
static int rank_of(const proc_t *pr, const hub_comm_t *m, uint16_t gpu) {
  int only = -1, n = 0;
  for (int i = 0; pr && i < pr->n; i++) {
    if (pr->p[i].m != m) continue;
    n++;
    only = (int)pr->p[i].rank;
  }
  if (n <= 1) return only;
  for (int i = 0; gpu != 0xffff && i < pr->n; i++)
    if (pr->p[i].m == m && pr->p[i].gpu == gpu) return (int)pr->p[i].rank;
  return -1;
}

/* The hops of connection e -> peer (its NIC port, the two leaf-spine links of its modelled route,
 * the peer's NIC port), as ids and names. Returns how many. A link is named as a cable, both
 * directions in one: a connection up through leaf L to spine S and one down from S to L then
 * point at the same cable, where a degraded cable (or optic) slows both. */
#define HOP_NAME 96
static int hops_of(const hub_lqp_t *e, const hub_lqp_t *peer, uint32_t *ids,
                   char (*names)[HOP_NAME]) {
  int n = 0;
  char gid[48];
  const ah_link_qp_t *q = &e->q;
  int txp = q->tx_port ? q->tx_port : q->port;
  ah_link_gid_text(q->lgid, gid, sizeof gid);
  snprintf(names[n], HOP_NAME, "port %s:%d (%s)", q->dev, txp, gid);
  ids[n] = (uint32_t)ah_coord_fnv64(names[n], strlen(names[n]), 1469598103934665603ull);
  n++;
  if (q->spine != AH_LINK_NONE) {
    snprintf(names[n], HOP_NAME, "link leaf%u-spine%u", q->src_leaf, q->spine);
    ids[n] = (uint32_t)ah_coord_fnv64(names[n], strlen(names[n]), 1469598103934665603ull);
    n++;
    snprintf(names[n], HOP_NAME, "link leaf%u-spine%u", q->dst_leaf, q->spine);
    ids[n] = (uint32_t)ah_coord_fnv64(names[n], strlen(names[n]), 1469598103934665603ull);
    n++;
  }
  int rxp = q->rx_port ? q->rx_port : peer->q.port;
  ah_link_gid_text(q->rgid, gid, sizeof gid);
  snprintf(names[n], HOP_NAME, "port %s:%d (%s)", peer->q.dev, rxp, gid);
  ids[n] = (uint32_t)ah_coord_fnv64(names[n], strlen(names[n]), 1469598103934665603ull);
  n++;
  return n;
}

/* A connection of this window in a communicator's matrix: its id and queue pairs. */
typedef struct {
  hub_comm_t *m;
  uint64_t id;
  const hub_lqp_t *e, *peer;
} wconn_t;

/* What ev's text says of where: the hop found, and the slowest connection's queue pair. */
static void where_text(const ah_lm_event_t *ev, const wconn_t *w, char *out, size_t len) {
  out[0] = 0;
  if (!w) return;
  uint32_t ids[AH_LM_HOPS];
  char names[AH_LM_HOPS][HOP_NAME];
  int nh = hops_of(w->e, w->peer, ids, names), o = 0, named = 0;
  if (ev->nhop > 2) o = snprintf(out, len, "one of %d: ", ev->nhop);
  /* the cables first, then the NIC ports (a tie is most often a cable and the ports it feeds) */
  for (int pass = 0; pass < 2; pass++)
    for (int k = 0; k < ev->nhop; k++)
      for (int j = 0; j < nh; j++)
        if (ids[j] == ev->hop[k] && (strncmp(names[j], "link ", 5) == 0) == !pass && o >= 0 &&
            (size_t)o < len)
          o += snprintf(out + o, len - (size_t)o, "%s%s",
                        !named++       ? ""
                        : ev->nhop > 2 ? ", "
                                       : " or ",
                        names[j]);
  if (!ev->nhop && o >= 0 && (size_t)o < len)
    o += snprintf(out + o, len - (size_t)o, "no single link or port");
  if (o >= 0 && (size_t)o < len)
    snprintf(out + o, len - (size_t)o, "; QP %u %s:%d, %d of %d slow", w->e->q.lqpn, w->e->q.dev,
             w->e->q.tx_port ? w->e->q.tx_port : w->e->q.port, ev->nslow, ev->nconns);
}

void ah_coord_hub_finding_send(ah_coord_hub_t *h, hub_comm_t *m, const ah_finding_t *f) {
  uint8_t p[8 + AH_FINDING_BYTES];
  ah_coord_put_u64(p, m->comm);
  ah_finding_pack(f, p + 8);
  for (int i = 0; i < m->nsubs; i++)
    ah_coord_hub_conn_send_msg(h, m->subs[i], AH_MSG_FINDING, p, sizeof p);
}

static void events_send(ah_coord_hub_t *h, hub_comm_t *m, const wconn_t *wc, int nwc) {
  ah_lm_event_t ev;
  while (ah_lm_next(m->link->lm, &ev)) {
    const wconn_t *w = NULL;
    for (int i = 0; i < nwc && !w; i++)
      if (wc[i].m == m && wc[i].id == ev.worst) w = &wc[i];
    char src[96], dst[96], where[160];
    ah_coord_hub_rank_place(m, ev.src, src, sizeof src);
    ah_coord_hub_rank_place(m, ev.dst, dst, sizeof dst);
    where_text(&ev, ev.cleared ? NULL : w, where, sizeof where);
    ah_finding_t f = {.kind = ev.cleared ? AH_FINDING_LINK_OK : AH_FINDING_SLOW_LINK};
    ah_lm_text(m->comm, &ev, src, dst, where, f.text, sizeof f.text);
    uint32_t at[2] = {ev.kind == AH_LM_COL ? ev.dst : ev.src, ev.dst};
    for (int k = 0; k < (ev.kind == AH_LM_CELL ? 2 : 1); k++) {
      const hub_prog_t *s = &m->prog[at[k]];
      ah_finding_add_rank(&f, at[k], s->have ? &s->rec : NULL, s->have ? s->host : NULL);
    }
    ah_log(AH_LOG_DEBUG, "coordinator hub %s: %s", h->addr, f.text);
    ah_coord_hub_finding_send(h, m, &f);
    ah_lm_stats_t st;
    ah_lm_stats(m->link->lm, &st);
    if (!ev.cleared) snprintf(m->link->text, sizeof m->link->text, "%s", f.text);
    else if (!st.flagged) m->link->text[0] = 0;
  }
}

/* m's matrix (made at its first connection), or NULL. */
static ah_lm_t *comm_lm(ah_coord_hub_t *h, hub_comm_t *m) {
  if (!m->link && !(m->link = calloc(1, sizeof *m->link))) return NULL;
  if (!m->link->lm) {
    ah_lm_opts_t o;
    ah_lm_opts_default(&o);
    o.pct = h->o.slow_link_pct;
    m->link->lm = ah_lm_new(m->nranks, &o);
  }
  return m->link->lm;
}

void ah_coord_hub_link_tick(ah_coord_hub_t *h, uint64_t now) {
  struct hub_link *l = h->link;
  if (!l || h->o.slow_link_pct <= 0) return;
  if (!l->window_ns) l->window_ns = now;
  if (now - l->window_ns < LINK_WINDOW_NS) return;
  double window_s = (double)(now - l->window_ns) / 1e9;
  l->window_ns = now;
  proc_t *procs = procs_build(h);
  wconn_t *wc = NULL;
  int nwc = 0, capwc = 0;
  for (hub_lqp_t *e = l->qps; e; e = e->hh.next) {
    if (e->q.role != AH_LINK_SENDER || !e->wrs) continue;
    const hub_lqp_t *peer = qp_find(l, e->q.rgid, e->q.rqpn);
    char key[80];
    proc_t *ps = NULL, *pd = NULL;
    if (peer) {
      proc_key(key, sizeof key, e->host, e->pid);
      HASH_FIND_STR(procs, key, ps);
      proc_key(key, sizeof key, peer->host, peer->pid);
      HASH_FIND_STR(procs, key, pd);
    }
    for (int i = 0; ps && pd && i < ps->n; i++) {
      hub_comm_t *m = ps->p[i].m;
      int a = rank_of(ps, m, e->q.gpu), b = rank_of(pd, m, peer->q.gpu);
      if (a < 0 || b < 0 || a == b || (int)ps->p[i].rank != a) continue;
      ah_lm_t *lm = comm_lm(h, m);
      if (!lm) continue;
      ah_lm_conn_t c = {.src = (uint32_t)a,
                        .dst = (uint32_t)b,
                        .id = ah_coord_fnv64(&e->key, sizeof e->key, 1469598103934665603ull),
                        .bytes = (double)e->bytes,
                        .busy_s = e->busy_s,
                        .wrs = e->wrs};
      if (e->hops_peer != peer || e->hops_gen != e->gen || e->hops_peer_gen != peer->gen) {
        char names[AH_LM_HOPS][HOP_NAME]; /* made once per pair of announcements */
        e->nhops = hops_of(e, peer, e->hops, names);
        e->hops_peer = peer, e->hops_gen = e->gen, e->hops_peer_gen = peer->gen;
      }
      c.nhops = e->nhops;
      memcpy(c.hops, e->hops, sizeof c.hops);
      ah_lm_add(lm, &c);
      if (nwc == capwc) {
        int cap = capwc ? 2 * capwc : 256;
        wconn_t *n = realloc(wc, (size_t)cap * sizeof *n);
        if (!n) continue;
        wc = n;
        capwc = cap;
      }
      wc[nwc++] = (wconn_t){m, c.id, e, peer};
    }
  }
  for (hub_lqp_t *e = l->qps; e; e = e->hh.next) e->bytes = 0, e->busy_s = 0, e->wrs = 0;
  for (hub_comm_t *m = h->comms; m; m = m->hh.next) {
    if (!m->link || !m->link->lm) continue;
    if (ah_lm_close(m->link->lm, (double)now / 1e9, window_s)) events_send(h, m, wc, nwc);
  }
  free(wc);
  procs_free(procs);
}

int ah_coord_hub_link_status(const hub_comm_t *m, char *text, size_t len) {
  if (!m->link || !m->link->text[0]) return 0;
  snprintf(text, len, "%s", m->link->text);
  return AH_FINDING_SLOW_LINK;
}

void ah_coord_hub_link_comm_free(hub_comm_t *m) {
  if (!m->link) return;
  ah_lm_free(m->link->lm);
  free(m->link);
  m->link = NULL;
}

void ah_coord_hub_link_free(ah_coord_hub_t *h) {
  if (!h->link) return;
  hub_lqp_t *e, *tmp;
  HASH_ITER(hh, h->link->qps, e, tmp) {
    HASH_DEL(h->link->qps, e);
    free(e);
    ah_coord_hub_mem_give(h, sizeof *e);
  }
  free(h->link);
  h->link = NULL;
}
