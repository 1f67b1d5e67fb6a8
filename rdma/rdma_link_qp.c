/* rdma_link_qp.c: per-connection timing's control side (rdma_link.h, docs/diagnosis.md "Slow
 * links"): the queue pairs NCCL creates, connects and destroys, with the identity the hub needs to
 * put a connection in its communicator's matrix — both GIDs and QP numbers (the hub pairs a sending
 * end with the receiving end its peer announces), the GPU current on the creating thread (NCCL's
 * proxy thread runs on its rank's device, which tells the process's ranks apart), the device, port
 * and source port, and the leaf-spine route the fabric model (AUTOHA_QP_TOPO) gives it — and, once a
 * second on the shim's health thread, each sending end's window: what its counters gained.
 *
 * It also tells the hub when a port of a NIC the process opened goes down or comes back, or the
 * NIC fails whole (each of its ports down), with the GPUs of its queue pairs on the port
 * (ah_coord_nic.h), from the async event NCCL's thread reads — once a fall, not at every repeat.
 *
 * Key choice: nothing here runs on NCCL's threads but the bookkeeping of create, modify and
 * destroy, which NCCL makes at connection time, and a port's event, which is rare; a destroyed queue pair's state is freed two
 * seconds later, so that a poll still holding it (none should) reads memory that is still its. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_coord.h"
#include "ah_coord_link.h"
#include "ah_coord_nic.h"
#include "ah_env.h"
#include "ah_ha_rebal.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_uthash.h"
#include "rdma.h"
#include "rdma_ha_int.h"
#include "rdma_link.h"

static pthread_mutex_t lk_mu = PTHREAD_MUTEX_INITIALIZER; /* the list, the maps' writers */
static lk_qp_t *qps;                                      /* every queue pair known, newest first */
static _Atomic(int (*)(void)) gpu_fn;
static int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
static uint16_t (*hook_sport)(struct ibv_qp *); /* the port the QP hook gave a queue pair, or 0 */
/* the clock's calibration: ticks and CLOCK_MONOTONIC at the first use */
static uint64_t tick0;
static double sec0;

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ah_shim_link_on(void) {
  static _Atomic int on = -1;
  int v = atomic_load_explicit(&on, memory_order_relaxed);
  if (v < 0) {
    const ah_settings_t *s = ah_env_settings();
    v = s->enable && s->health && s->slow_link_pct > 0;
    if (v) {
      pthread_mutex_lock(&lk_mu);
      if (!tick0) tick0 = ah_shim_lk_ticks(), sec0 = now_s();
      pthread_mutex_unlock(&lk_mu);
    }
    atomic_store(&on, v);
  }
  return v;
}

void ah_shim_link_set_gpu(int (*fn)(void)) { atomic_store(&gpu_fn, fn); }

void ah_shim_link_created(struct ibv_qp *qp, const struct ibv_qp_init_attr *init, int receiver,
                          const ah_shim_ha_verbs_t *real) {
  if (!qp || !init || qp->qp_type != IBV_QPT_RC || !ah_shim_link_on()) return;
  int saved = errno;
  lk_qp_t *m = calloc(1, sizeof *m);
  uint32_t cap = 1;
  while (cap < init->cap.max_send_wr && cap < (1u << 16)) cap <<= 1;
  if (m && !receiver && !(m->ring = calloc(cap, sizeof *m->ring))) {
    free(m);
    m = NULL;
  }
  if (!m) {
    AH_LOG_CAPPED(1, AH_LOG_WARN, "link timing: out of memory; QP %u is not timed", qp->qp_num);
    errno = saved;
    return;
  }
  m->qp = qp;
  m->qpn = qp->qp_num;
  m->timed = !receiver;
  m->sig_all = init->sq_sig_all ? IBV_SEND_SIGNALED : 0;
  m->mask = cap - 1;
  m->port = 1;
  int (*g)(void) = atomic_load(&gpu_fn);
  m->gpu = g ? g() : -1;
  const char *dev = qp->context && qp->context->device ? qp->context->device->name : "";
  if (!dev[0]) dev = "?";
  size_t dn = strnlen(dev, sizeof m->dev - 1); /* a longer name is cut: it only names the NIC */
  memcpy(m->dev, dev, dn);
  m->dev[dn] = 0;
  pthread_mutex_lock(&lk_mu);
  /* a new queue pair at a destroyed one's address replaces it in the map */
  lk_ctx_t *lc = ah_shim_lk_ctx_get(qp->context);
  /* a receiving end is mapped too (marked untimed), for its posts to find their context's */
  if (!lc || ah_shim_lk_map(lc, qp, m->qpn, m) != 0) {
    if (lc) ah_shim_lk_map(lc, qp, m->qpn, NULL);
    pthread_mutex_unlock(&lk_mu);
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "link timing: too many contexts or queue pairs; QP %u is not timed", qp->qp_num);
    free(m->ring);
    free(m);
    errno = saved;
    return;
  }
  m->lc = lc;
  if (!query_gid) query_gid = real->query_gid;
  if (!hook_sport) hook_sport = real->qp_sport;
  m->next = qps;
  qps = m;
  pthread_mutex_unlock(&lk_mu);
  errno = saved;
}

/* The UDP source port m sends with: the QP hook's (AUTOHA_QP_SPORT, or a rebalance's move), else
 * the one the kernel derives from NCCL's flow label (NCCL's is 0: from the QP numbers). */
static uint16_t sport_now(const lk_qp_t *m, uint32_t label) {
  uint16_t s = hook_sport ? hook_sport(m->qp) : 0;
  if (s) return s;
  return ah_path_label_to_sport(label ? label : ah_path_label_from_qpn(m->qpn, m->rqpn));
}

/* The live state of qp (not destroyed), or NULL. Call under lk_mu. */
static lk_qp_t *find(struct ibv_qp *qp) {
  for (lk_qp_t *m = qps; m; m = m->next)
    if (m->qp == qp && m->dead_t == 0 && m->qpn == qp->qp_num) return m;
  return NULL;
}

void ah_shim_link_modified(struct ibv_qp *qp, const struct ibv_qp_attr *attr, int mask) {
  if (!qp || !attr || !(mask & IBV_QP_STATE) || !ah_shim_link_on()) return;
  int saved = errno;
  pthread_mutex_lock(&lk_mu);
  lk_qp_t *m = find(qp);
  if (m && attr->qp_state == IBV_QPS_INIT && (mask & IBV_QP_PORT)) m->port = attr->port_num;
  if (m && attr->qp_state == IBV_QPS_RTR && (mask & IBV_QP_AV) && (mask & IBV_QP_DEST_QPN) &&
      attr->dest_qp_num != qp->qp_num) {
    m->rqpn = attr->dest_qp_num;
    memcpy(m->rgid, attr->ah_attr.grh.dgid.raw, 16);
    m->label = attr->ah_attr.grh.flow_label;
    m->sport = sport_now(m, m->label);
    union ibv_gid g;
    /* RoCE: its own GID is the one the peer names it by; InfiniBand (no GRH) has none to pair */
    if (attr->ah_attr.is_global && query_gid && qp->context &&
        query_gid(qp->context, (uint8_t)m->port, attr->ah_attr.grh.sgid_index, &g) == 0) {
      memcpy(m->lgid, g.raw, 16);
      m->have_rtr = 1;
      m->announced = 0;
    }
  }
  pthread_mutex_unlock(&lk_mu);
  errno = saved;
}

void ah_shim_link_destroying(struct ibv_qp *qp) {
  if (!qp || !ah_shim_link_on()) return;
  int saved = errno;
  pthread_mutex_lock(&lk_mu);
  lk_qp_t *m = find(qp);
  if (m) {
    ah_shim_lk_map(m->lc, qp, m->qpn, NULL);
    m->dead_t = now_s();
  }
  pthread_mutex_unlock(&lk_mu);
  errno = saved;
}

/* m's route in the fabric model (AUTOHA_QP_TOPO), into q's route fields (unknown when the model has
 * no such topology, or not both GIDs). */
static void route(const lk_qp_t *m, ah_link_qp_t *q) {
  q->src_leaf = q->spine = q->dst_leaf = AH_LINK_NONE;
  ah_path_topo_t *t = ah_shim_ha_topo();
  ah_path_flow_t f;
  if (!t || ah_ha_rebal_flow_by_gids(t, m->lgid, m->rgid, &f) != 0) return;
  int side, spine, rx;
  ah_path_model_route(t, &f, m->sport, &side, &spine, &rx);
  int sp = t->hosts[f.shost].pair, dp = t->hosts[f.dhost].pair;
  if (side < 0 || side > 1) return;
  if (rx < 0 || rx > 1) rx = side;
  q->tx_port = (uint8_t)(side + 1);
  q->rx_port = (uint8_t)(rx + 1);
  q->src_leaf = (uint16_t)(2 * sp + side);
  q->dst_leaf =
      spine >= 0 ? (uint16_t)(2 * dp + rx) : q->src_leaf; /* one pair: its leaf delivers */
  q->spine = spine >= 0 ? (uint16_t)spine : AH_LINK_NONE;
}

static void identity(const lk_qp_t *m, ah_link_qp_t *q) {
  memset(q, 0, sizeof *q);
  memcpy(q->lgid, m->lgid, 16);
  memcpy(q->rgid, m->rgid, 16);
  q->lqpn = m->qpn & 0xffffff;
  q->rqpn = m->rqpn & 0xffffff;
  q->gpu = m->gpu >= 0 && m->gpu < 0xffff ? (uint16_t)m->gpu : 0xffff;
  q->role = m->timed ? AH_LINK_SENDER : AH_LINK_RECEIVER;
  q->port = (uint8_t)(m->port > 0 && m->port < 256 ? m->port : 1);
  q->sport = m->sport;
  memcpy(q->dev, m->dev, sizeof q->dev);
  route(m, q);
}

/* Microseconds of `ticks` at hz ticks a second, within the wire's bound. */
static uint32_t ticks_us(uint64_t ticks, double hz) {
  double us = (double)ticks / hz * 1e6;
  return us >= 6e7 ? 60000000u : (uint32_t)us;
}

/* Sends the hub what the tick collected (nothing when the process has no single hub). */
static void send_all(const ah_link_qp_t *q, int nq, const ah_link_rate_t *r, int nr) {
  ah_coord_t *c = ah_shim_ha_dir_coord();
  uint32_t pid = (uint32_t)getpid();
  for (int i = 0; c && i < nq; i += AH_LINK_QPS)
    (void)ah_coord_link_qps(c, pid, q + i, nq - i < AH_LINK_QPS ? nq - i : AH_LINK_QPS);
  for (int i = 0; c && i < nr; i += AH_LINK_RATES)
    (void)ah_coord_link_rates(c, pid, r + i, nr - i < AH_LINK_RATES ? nr - i : AH_LINK_RATES);
}

#define TICK_MAX 1024     /* queue pairs reported per tick (the rest at the next ones) */
#define REANNOUNCE_S 30.0 /* every queue pair's identity is sent again this often */

static void downs_retell(void);

void ah_shim_link_tick(void) {
  if (!ah_shim_link_on()) return;
  static ah_link_qp_t q[TICK_MAX];
  static ah_link_rate_t r[TICK_MAX];
  int nq = 0, nr = 0;
  double now = now_s();
  pthread_mutex_lock(&lk_mu);
  double hz = now - sec0 > 0.1 ? (double)(ah_shim_lk_ticks() - tick0) / (now - sec0) : 0;
  for (lk_qp_t **pm = &qps; *pm;) { /* destroyed two seconds ago: no poll can hold it now */
    lk_qp_t *m = *pm;
    if (m->dead_t > 0 && now - m->dead_t > 2) {
      *pm = m->next;
      free(m->ring);
      free(m);
      continue;
    }
    pm = &m->next;
  }
  /* every queue pair is announced again every REANNOUNCE_S: a hub that reconnected (the client's
   * out queue is rebuilt without what waited in it) or restarted learns them again */
  static double reannounce;
  int again = now >= reannounce;
  if (again) reannounce = now + REANNOUNCE_S;
  for (lk_qp_t *m = qps; m && hz > 0; m = m->next) {
    if (m->dead_t > 0 || !m->have_rtr) continue;
    if (again) m->announced = 0;
    uint16_t sport = m->timed ? sport_now(m, m->label) : m->sport; /* a rebalance moves it */
    if (sport != m->sport) m->sport = sport, m->announced = 0;
    if (!m->announced && nq < TICK_MAX) {
      identity(m, &q[nq++]);
      m->announced = 1;
    }
    if (!m->timed || nr >= TICK_MAX) continue;
    uint64_t bytes = atomic_load_explicit(&m->bytes, memory_order_relaxed),
             busy = atomic_load_explicit(&m->busy, memory_order_relaxed),
             wait = atomic_load_explicit(&m->wait, memory_order_relaxed),
             wrs = atomic_load_explicit(&m->wrs, memory_order_relaxed);
    ah_link_rate_t *x = &r[nr];
    memcpy(x->lgid, m->lgid, 16);
    x->lqpn = m->qpn & 0xffffff;
    x->bytes = bytes - m->s_bytes;
    x->busy_us = ticks_us(busy - m->s_busy, hz);
    x->wait_us = ticks_us(wait - m->s_wait, hz);
    x->wrs = (uint32_t)(wrs - m->s_wrs);
    m->s_bytes = bytes, m->s_busy = busy, m->s_wait = wait, m->s_wrs = wrs;
    if (!x->wrs) continue;
    nr++;
    if (ah_log_level() >= AH_LOG_DEBUG) {
      char peer[48], path[64] = "";
      ah_link_gid_text(m->rgid, peer, sizeof peer);
      ah_link_qp_t id;
      route(m, &id);
      if (id.spine != AH_LINK_NONE)
        snprintf(path, sizeof path, ", route leaf%u-spine%u-leaf%u", id.src_leaf, id.spine,
                 id.dst_leaf);
      ah_log(AH_LOG_DEBUG,
             "link: QP %u (%s:%d, source port %u) -> %s QP %u%s: %llu bytes in %u work requests, "
             "busy %.1f ms: %.3f Gb/s; %.3f ms from post to completion",
             m->qpn, m->dev, m->port, m->sport, peer, m->rqpn, path, (unsigned long long)x->bytes,
             x->wrs, x->busy_us / 1e3, x->busy_us ? (double)x->bytes * 8 / x->busy_us / 1e3 : 0.0,
             x->wait_us / 1e3 / x->wrs);
    }
  }
  pthread_mutex_unlock(&lk_mu);
  send_all(q, nq, r, nr);
  if (again) downs_retell();
}

/* Ports this process told the hub were down, keyed by context and port number, with what it told:
 * a repeated PORT_ERR is not told again (the hub would not name it again either), the port's
 * return is told only when its fall was, and the REANNOUNCE_S tick tells them again (a hub that
 * restarted, or a report lost with a reconnection's out queue; the hub takes a repeat as the same
 * finding). Unbounded: one entry a port down, freed when the port is back; an entry that cannot be
 * allocated is logged once and its port told anyway. Under lk_mu. */
typedef struct {
  struct ibv_context *ctx;
  int port;
} down_key_t;
typedef struct {
  down_key_t k;
  ah_nic_port_t told;
  UT_hash_handle hh;
} down_t;
static down_t *downs;

static down_t *down_find(struct ibv_context *ctx, int port) {
  down_key_t k;
  memset(&k, 0, sizeof k); /* the key's padding is hashed too */
  k.ctx = ctx, k.port = port;
  down_t *d = NULL;
  HASH_FIND(hh, downs, &k, sizeof k, d);
  return d;
}

/* Records x (of ctx) as told down. Call under lk_mu. */
static void down_add(struct ibv_context *ctx, const ah_nic_port_t *x) {
  down_t *d = calloc(1, sizeof *d);
  if (d) {
    d->k.ctx = ctx, d->k.port = x->port;
    d->told = *x;
    HASH_ADD(hh, downs, k, sizeof d->k, d);
    if (AH_HASH_ADDED(d)) return;
    free(d);
  }
  AH_LOG_CAPPED(1, AH_LOG_WARN,
                "NIC %s port %u: out of memory remembering it down; it is told to the hub now, but "
                "its return and a repeat are told as new",
                x->dev, x->port);
}

/* Forgets (ctx, port) as told down; returns whether it was. Call under lk_mu. */
static int down_forget(struct ibv_context *ctx, int port) {
  down_t *d = down_find(ctx, port);
  if (!d) return 0;
  HASH_DEL(downs, d);
  free(d);
  return 1;
}

/* What to tell of (ctx, port) going down: x filled with this process's queue pairs on the port and
 * their GPUs. Returns x->nqps. Call under lk_mu. */
static uint32_t port_qps(struct ibv_context *ctx, int port, ah_nic_port_t *x) {
  for (lk_qp_t *m = qps; m; m = m->next) {
    if (m->dead_t > 0 || !m->lc || m->lc->ctx != ctx || m->port != port) continue;
    x->nqps++;
    uint16_t g = m->gpu >= 0 && m->gpu < 0xffff ? (uint16_t)m->gpu : 0xffff;
    int seen = 0;
    for (int i = 0; i < x->ngpus; i++) seen |= x->gpus[i] == g;
    if (!seen && x->ngpus < AH_NIC_GPUS) x->gpus[x->ngpus++] = g;
  }
  return x->nqps;
}

/* The ports a DEVICE_FATAL names: every port of the device with a queue pair of this process on
 * it (a NIC has one or two; more than FATAL_PORTS are logged, not told). */
#define FATAL_PORTS 8

void ah_shim_link_port_event(struct ibv_context *ctx, const struct ibv_async_event *ev) {
  if (!ctx || !ev || !ah_shim_link_on()) return;
  int type = ev->event_type;
  if (type != IBV_EVENT_PORT_ERR && type != IBV_EVENT_PORT_ACTIVE && type != IBV_EVENT_DEVICE_FATAL)
    return;
  int saved = errno;
  ah_nic_port_t base = {.pid = (uint32_t)getpid(), .up = type == IBV_EVENT_PORT_ACTIVE};
  const char *dev = ctx->device && ctx->device->name[0] ? ctx->device->name : "?";
  memcpy(base.dev, dev,
         strnlen(dev, sizeof base.dev - 1)); /* a longer name is cut: it only names it */
  ah_nic_port_t tell[FATAL_PORTS];
  int ntell = 0, again = 0, over = 0;
  pthread_mutex_lock(&lk_mu);
  if (type == IBV_EVENT_DEVICE_FATAL) {
    /* the whole NIC: each port of it that carries queue pairs of this process and was not told */
    for (lk_qp_t *m = qps; m; m = m->next) {
      if (m->dead_t > 0 || !m->lc || m->lc->ctx != ctx || m->port <= 0 || m->port > 255) continue;
      int seen = down_find(ctx, m->port) != NULL;
      for (int i = 0; i < ntell; i++) seen |= tell[i].port == m->port;
      if (seen) continue;
      if (ntell == FATAL_PORTS) {
        over = 1;
        continue;
      }
      tell[ntell] = base;
      tell[ntell].port = (uint8_t)m->port;
      port_qps(ctx, m->port, &tell[ntell]);
      down_add(ctx, &tell[ntell]);
      ntell++;
    }
  } else {
    ah_nic_port_t x = base;
    x.port = (uint8_t)ev->element.port_num;
    if (x.up) {
      ntell = down_forget(ctx, x.port); /* its return is told only when its fall was */
    } else if (down_find(ctx, x.port)) {
      again = 1;                                /* told already, not back since: the same fall */
    } else if (port_qps(ctx, x.port, &x) > 0) { /* none on it: it says nothing of its ranks */
      down_add(ctx, &x);
      ntell = 1;
    }
    tell[0] = x;
  }
  pthread_mutex_unlock(&lk_mu);
  ah_coord_t *c = ntell ? ah_shim_ha_dir_coord() : NULL;
  const char *hub = c ? "the hub names its ranks to their communicators" : "no hub to tell";
  for (int i = 0; i < ntell; i++) {
    const ah_nic_port_t *x = &tell[i];
    if (x->up) ah_log(AH_LOG_INFO, "NIC %s port %u is active again (PORT_ACTIVE)", x->dev, x->port);
    else if (type == IBV_EVENT_DEVICE_FATAL)
      ah_log(AH_LOG_WARN,
             "NIC %s failed whole (DEVICE_FATAL): its port %u is down with %u of this process's "
             "queue pairs on it; %s",
             x->dev, x->port, x->nqps, hub);
    else
      ah_log(AH_LOG_WARN,
             "NIC %s port %u is down (PORT_ERR): %u of this process's queue pairs are on it; %s",
             x->dev, x->port, x->nqps, hub);
    if (c) (void)ah_coord_nic_port(c, x);
  }
  if (again)
    AH_LOG_CAPPED(5, AH_LOG_INFO, "NIC %s port %u: PORT_ERR again; the hub was told already",
                  base.dev, (unsigned)ev->element.port_num);
  if (over)
    AH_LOG_CAPPED(
        1, AH_LOG_WARN,
        "NIC %s failed whole (DEVICE_FATAL): this process has queue pairs on more than %d "
        "of its ports; the first %d are told to the hub",
        base.dev, FATAL_PORTS, FATAL_PORTS);
  errno = saved;
}

/* Tells the hub again every port still down (the REANNOUNCE_S tick): see downs. */
static void downs_retell(void) {
  pthread_mutex_lock(&lk_mu);
  unsigned n = HASH_COUNT(downs);
  ah_nic_port_t *x = n ? malloc(n * sizeof *x) : NULL;
  unsigned k = 0;
  for (down_t *d = downs; x && d; d = d->hh.next) x[k++] = d->told;
  pthread_mutex_unlock(&lk_mu);
  ah_coord_t *c = k ? ah_shim_ha_dir_coord() : NULL;
  for (unsigned i = 0; c && i < k; i++) (void)ah_coord_nic_port(c, &x[i]);
  free(x);
}
