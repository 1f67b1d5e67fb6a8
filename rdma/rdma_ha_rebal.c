/* rdma_ha_rebal.c: the rebalance after failovers and around degraded links (AUTOHA_HA=path with
 * AUTOHA_QP_SPORT=plan; docs/ha.md, "Rebalance"), C4P's dynamic re-plan. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ah_env.h"
#include "ah_ha_rebal.h"
#include "ah_path.h"
#include "rdma_ha_int.h"

static ah_path_topo_t *topo; /* ah_shim_ha_topo(), once the plan is loaded */

/* Every process that fails a primary over publishes the leaf–spine links its planned route crossed
 * ("HAL1", keyed by leaf and spine); every process that failed over reads the job's whole set a
 * few times in the seconds after (other processes' failovers come in), re-plans the job's flows
 * around it with ah_path_replan — the same topology, plan and links give every process the same
 * answer — and moves its own queue pairs that the re-plan moved, live, with
 * mlx5dv_modify_qp_udp_sport. Without the re-plan every flow of a dead link lands on its shadow's
 * pre-picked port, and several of them can share one surviving link. It needs every primary on its
 * planned port (AUTOHA_QP_SPORT=plan), or the model does not know where the flows run. */
#define RB_LINKS_MAX 1024                          /* leaf–spine links looked up per re-plan */
static const double rb_checks[] = {0.3, 1.0, 3.0}; /* seconds after a failover: re-plan then */

static pthread_once_t rb_once = PTHREAD_ONCE_INIT;
static ah_path_flow_t *rb_flows;
static ah_path_route_t *rb_plan;
static int rb_n;     /* flows of the plan; 0: no rebalance */
static double rb_t0; /* the background thread's: the last failover, 0 none pending */
static int rb_step;
static _Atomic unsigned long st_rebal, st_rebal_moved;
static double st_rb_before, st_rb_share, st_rb_bound; /* under ah_shim_ha_events_mu */

static void rb_load(void) {
  const ah_settings_t *env = ah_env_settings();
  topo = ah_shim_ha_topo();
  if (env->ha != AH_HA_POLICY_PATH || !topo) return;
  if (!env->qp || env->qp_sport != AH_PATH_SPORT_PLAN) {
    ah_log(AH_LOG_INFO,
           "HA: no rebalance after failovers: it needs AUTOHA_QP_SPORT=plan (each primary on its "
           "planned port, so that the fabric model knows where every flow runs)");
    return;
  }
  int n = ah_path_topo_flows(topo, &rb_flows);
  if (n <= 0) return;
  rb_plan = calloc((size_t)n, sizeof *rb_plan);
  if (!rb_plan || ah_path_plan(topo, rb_flows, n, rb_plan) != 0) {
    ah_log(AH_LOG_WARN,
           "HA: out of memory for the rebalance's plan; failovers keep their shadows' ports");
    free(rb_plan);
    rb_plan = NULL;
    return;
  }
  rb_n = n;
}

/* m's flow in the plan, by the port the hook gave its primary; -1 when the plan does not have it
 * (the receiving end of a connection: the plan places senders). */
static int rb_flow_of(ha_qp_t *m) {
  if (!m->qp) return -1;
  return ah_ha_rebal_flow(topo, rb_flows, rb_plan, rb_n, m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw,
                          m->hc->real.qp_sport(m->qp), NULL);
}

int ah_shim_ha_rebal_on(void) {
  pthread_once(&rb_once, rb_load);
  return rb_n > 0;
}

int ah_shim_ha_rebal_spine(ha_qp_t *m) {
  if (ah_shim_ha_rebal_flow(m) < 0) return -1;
  int side, spine, rx;
  ah_path_model_route(topo, &rb_flows[m->flow], m->hc->real.qp_sport(m->qp), &side, &spine, &rx);
  return spine;
}

int ah_shim_ha_rebal_flow(ha_qp_t *m) {
  pthread_once(&rb_once, rb_load);
  if (!rb_n) return -1;
  if (m->flow == -2) m->flow = rb_flow_of(m);
  return m->flow;
}

/* The state of each leaf-spine link as this process knows it (1: healthy), by leaf x spines + spine.
 * A link once read as down (or degraded) stays so for this process (nothing brings one back yet): a
 * read that times out on a loaded hub must not put a shadow back on a dead link. */
static double known[RB_LINKS_MAX];

static void rb_known_init(void) {
  static int done;
  if (!done)
    for (int i = 0; i < RB_LINKS_MAX; i++) known[i] = 1;
  done = 1;
}

static void rb_link_key(uint8_t key[HA_KEY], int leaf, int spine) {
  static const uint8_t job[16] = {0};
  ah_shim_ha_dir_key(key, job, (uint32_t)leaf, (uint32_t)spine, KIND_LINK);
}

/* m failed over: publish the links its primary's planned route crossed, and re-plan soon. Runs on
 * the background thread. */
void ah_shim_ha_rebal_note(ha_qp_t *m) {
  pthread_once(&rb_once, rb_load);
  if (!rb_n) return;
  if (m->flow == -2) m->flow = rb_flow_of(m);
  if (m->flow >= 0) {
    ah_path_link_state_t l[2];
    int n = ah_ha_rebal_suspects(topo, &rb_flows[m->flow], rb_plan[m->flow].sport, l);
    for (int i = 0; i < n; i++) {
      uint8_t key[HA_KEY];
      double down = 0;
      int at = l[i].leaf * topo->nspines + l[i].spine;
      /* this process's own finding counts at once: the re-plan's look-ups of the hub wait 1 ms
       * each, and an answer through a busy host relay can miss that (then no re-plan at all) */
      rb_known_init();
      if (at < RB_LINKS_MAX) known[at] = down;
      rb_link_key(key, l[i].leaf, l[i].spine);
      ah_shim_ha_dir_put(key, &down, sizeof down);
    }
  }
  rb_t0 = ha_now_s();
  rb_step = 0;
}

/* A link suspected of being degraded is modelled at this fraction of its capacity: the measurement
 * says "slower than its peers", not by how much, and every process must model it alike (the re-plan
 * is the same everywhere only when the links are). A link slow enough to show in completion times
 * against a ring's other flows is far below its rate; at half, one flow on it would still get its
 * fair share in the model, and the re-plan would gain nothing by moving it. */
#define RB_DEGRADED 0.1

/* The source port m's traffic leaves with now: NCCL's queue pair's (the hook's port), or the shadow
 * carrying it. */
static uint16_t rb_cur_sport(ha_qp_t *m) {
  if (atomic_load(&m->state) == HA_PEACE) return m->hc->real.qp_sport(m->qp);
  return m->rb_sport ? m->rb_sport : m->sh_sport;
}

void ah_shim_ha_rebal_degraded(ha_qp_t *m) {
  ah_path_flow_t fl;
  if (!ah_shim_ha_rebal_on()) return;
  if (ah_shim_ha_rebal_flow(m) >= 0) {
    fl = rb_flows[m->flow];
  } else if (ah_ha_rebal_flow_by_gids(topo, m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw, &fl) == 0) {
    m->dg.clear = 1; /* the re-plan does not know it: it is moved off the bad links alone */
  } else {
    return;
  }
  ah_path_link_state_t l[2];
  int n = ah_ha_rebal_suspects(topo, &fl, rb_cur_sport(m), l);
  for (int i = 0; i < n; i++) {
    uint8_t key[HA_KEY];
    double frac = RB_DEGRADED, had = 1;
    int at = l[i].leaf * topo->nspines + l[i].spine;
    rb_known_init(); /* this process's own finding counts at once, whatever the hub answers */
    if (at < RB_LINKS_MAX && known[at] > frac) known[at] = frac;
    rb_link_key(key, l[i].leaf, l[i].spine);
    /* never raise a link another process found down */
    if (ah_shim_ha_dir_get(key, &had, sizeof had, HA_LOOK) == (int)sizeof had && had <= frac)
      continue;
    ah_shim_ha_dir_put(key, &frac, sizeof frac);
  }
  rb_t0 = ha_now_s();
  rb_step = 0;
}

/* Re-plans around the job's known failed links and moves this process's queue pairs the re-plan
 * moved. Runs on the background thread, at the times of rb_checks after the last failover. */
void ah_shim_ha_rebal_check(void) {
  if (!rb_n || rb_t0 == 0 || ha_now_s() < rb_t0 + rb_checks[rb_step]) return;
  if (++rb_step == (int)(sizeof rb_checks / sizeof rb_checks[0])) rb_t0 = 0;
  int nleaf = 2 * topo->npairs, S = topo->nspines;
  static ah_path_link_state_t links[RB_LINKS_MAX];
  rb_known_init();
  int nl = 0, ndeg = 0, nk = nleaf * S < RB_LINKS_MAX ? nleaf * S : RB_LINKS_MAX;
  /* the job's findings, every link in one round trip to the hub (one look-up per link, each
   * waiting for its answer, took longer than a short job's remaining life on a loaded host) */
  static uint8_t keys[RB_LINKS_MAX][HA_KEY];
  static double frac[RB_LINKS_MAX];
  static int lens[RB_LINKS_MAX];
  for (int i = 0; i < nk; i++) rb_link_key(keys[i], i / S, i % S);
  ah_shim_ha_dir_get_many((const uint8_t(*)[HA_KEY])keys, nk, frac, sizeof frac[0], lens, HA_LOOK);
  for (int i = 0; i < nk; i++) {
    if (lens[i] == (int)sizeof frac[0] && frac[i] < known[i]) known[i] = frac[i];
    if (known[i] < 1) links[nl++] = (ah_path_link_state_t){i / S, i % S, known[i]};
    ndeg += known[i] > 0 && known[i] < 1;
  }
  if (!nl) return;
  ah_path_route_t *routes = malloc((size_t)rb_n * sizeof *routes);
  unsigned char *moved = calloc((size_t)rb_n, 1);
  ah_ha_rebal_result_t res;
  if (!routes || !moved ||
      ah_ha_rebal_plan(topo, rb_flows, rb_plan, rb_n, links, nl, routes, moved, &res) != 0) {
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "HA: out of memory for a rebalance; failovers keep their shadows' ports");
    free(routes);
    free(moved);
    return;
  }
  ha_qp_t *work[256];
  int nw = 0, nmoved = 0, nfail = 0;
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (ha_qp_t *m = ah_shim_ha_qps; m && nw < 256; m = m->next)
    if ((atomic_load(&m->state) == HA_SHADOW || atomic_load(&m->state) == HA_PEACE) && !m->busy) {
      m->busy = 1;
      work[nw++] = m;
    }
  pthread_mutex_unlock(&ah_shim_ha_mu);
  for (int i = 0; i < nw; i++) {
    ha_qp_t *m = work[i];
    if (m->flow == -2) m->flow = rb_flow_of(m);
    /* a connection still on NCCL's queue pair (a degraded link: nothing failed over) moves that one;
     * after a failover, the shadow carrying the traffic */
    int peace = atomic_load(&m->state) == HA_PEACE;
    uint16_t *done = peace ? &m->rb_psport : &m->rb_sport, to;
    if (m->flow >= 0 && moved[m->flow]) {
      to = routes[m->flow].sport;
    } else if (m->flow < 0 &&
               m->dg.clear) { /* outside the plan and slow: a port clear of every bad link */
      ah_path_flow_t fl;
      uint16_t cur = rb_cur_sport(m);
      to = ah_ha_rebal_flow_by_gids(topo, m->sgid.raw, m->rtr.ah_attr.grh.dgid.raw, &fl) == 0
               ? ah_ha_rebal_clear_sport(topo, &fl, links, nl, (uint16_t)(cur + 1), cur)
               : 0;
      m->dg.clear = 0;
      if (!to) continue;
    } else {
      continue;
    }
    if (*done == to) continue;
    pthread_mutex_lock(&m->mu); /* no post on a shadow while its port changes */
    int st = atomic_load(&m->state), rc = -1, err = EAGAIN;
    if (st == (peace ? HA_PEACE : HA_SHADOW)) {
      rc = m->hc->real.move_sport(peace ? m->qp : m->sh, to);
      err = errno;
    }
    pthread_mutex_unlock(&m->mu);
    if (rc == 0) {
      *done = to;
      m->dg.slow = 0, m->dg.reported = 0; /* judged again on its new path */
      nmoved++;
    } else if (err !=
               EAGAIN) { /* EAGAIN: it failed over meanwhile; the next look moves its shadow */
      nfail++;
      AH_LOG_DEV_CAPPED(
          2, m->gpu, AH_LOG_WARN,
          "HA: rebalance: cannot move the %s of QP %u to port %u (%s); it keeps its "
          "own",
          peace ? "queue pair" : "shadow", m->qpn, to,
          err == ENOSYS ? "libmlx5 has no mlx5dv_modify_qp_udp_sport" : strerror(err));
    }
  }
  pthread_mutex_lock(&ah_shim_ha_mu);
  for (int i = 0; i < nw; i++) work[i]->busy = 0;
  pthread_cond_broadcast(&ah_shim_ha_idle_cv);
  pthread_mutex_unlock(&ah_shim_ha_mu);
  if (nmoved) {
    atomic_fetch_add(&st_rebal, 1);
    atomic_fetch_add(&st_rebal_moved, (unsigned long)nmoved);
    ah_log(
        AH_LOG_WARN,
        "HA: rebalance: %d leaf-spine links down, %d degraded, %d flows re-planned job-wide, %d of this "
        "process's queue pairs moved live; modelled slowest flow %.3f of a port with the plan's ports, %.3f re-planned, best "
        "possible %.3f (%.0f%%)",
        nl - ndeg, ndeg, res.moved, nmoved, res.before, res.share, res.bound,
        res.bound > 0 ? 100 * res.share / res.bound : 0.0);
  }
  pthread_mutex_lock(&ah_shim_ha_events_mu);
  st_rb_before = res.before, st_rb_share = res.share, st_rb_bound = res.bound;
  pthread_mutex_unlock(&ah_shim_ha_events_mu);
  (void)nfail;
  free(routes);
  free(moved);
}

void ah_shim_ha_rebal_report(ah_report_ha_t *h) {
  h->rebalances = atomic_load(&st_rebal);
  h->rebalanced = atomic_load(&st_rebal_moved);
  pthread_mutex_lock(&ah_shim_ha_events_mu);
  if (h->rebalances)
    h->rb_before = st_rb_before, h->rb_share = st_rb_share, h->rb_bound = st_rb_bound;
  pthread_mutex_unlock(&ah_shim_ha_events_mu);
}
