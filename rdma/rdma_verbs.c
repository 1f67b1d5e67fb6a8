/* rdma_verbs.c: the QP hook — sets the RoCEv2 UDP source port (ECMP path) and traffic class of every
 * RDMA queue pair the job creates, by rewriting grh.flow_label and grh.traffic_class of the INIT→RTR
 * ibv_modify_qp (the policy is path/ah_path_policy.c).
 *
 * libnccl opens libibverbs with dlopen and resolves verbs with dlvsym(handle, name, "IBVERBS_1.1"),
 * which searches only that handle, so a preloaded ibv_modify_qp alone never sees NCCL's calls. The
 * shim therefore exports dlsym and dlvsym and hands back its wrappers for ibv_create_qp and
 * ibv_modify_qp (and, for the failover layer, destroy_qp, get_async_event and with AUTOHA_HA=nic the
 * memory-registration verbs); it also exports those two for programs and net plugins linked to libibverbs. The
 * exports stay unversioned (shim.map), since only an unversioned definition satisfies the versioned
 * references dlvsym@GLIBC_2.2.5, dlvsym@GLIBC_2.34 and ibv_modify_qp@IBVERBS_1.1.
 *
 * Every other dlsym/dlvsym resolves exactly as without the shim: on x86-64 the exported entry
 * points are assembly trampolines that ask a C function where to go and then *jump* there, so the
 * real dlsym sees the caller's return address (RTLD_NEXT and the caller's scope stay the caller's).
 * The real dlsym/dlvsym are found without calling dlsym at all (which would recurse into the
 * shim): by reading the dynamic symbol table of the next loaded object that defines them, walking
 * the loader's object list (_r_debug), which needs no lock and no intercepted call. */
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>
#include <link.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_env.h"
#include "ah_log.h"
#include "ah_path.h"
#include "ah_elf.h"
#include "rdma.h"
#include "rdma_ha.h"
#include "rdma_link.h"
#include "rdma_qp_topo.h"
#include "rdma_verbs.h"
#include "ah_uthash.h"

#define AH_VERBS_EXPORT __attribute__((visibility("default")))

typedef void *(*dlsym_fn)(void *, const char *);
typedef void *(*dlvsym_fn)(void *, const char *, const char *);
typedef struct ibv_qp *(*create_qp_fn)(struct ibv_pd *, struct ibv_qp_init_attr *);
typedef int (*modify_qp_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);
typedef int (*destroy_qp_fn)(struct ibv_qp *);
typedef int (*query_gid_fn)(struct ibv_context *, uint8_t, int, union ibv_gid *);
typedef int (*udp_sport_fn)(struct ibv_qp *, uint16_t);
typedef int (*get_async_event_fn)(struct ibv_context *, struct ibv_async_event *);
typedef void (*ack_async_event_fn)(struct ibv_async_event *);
typedef struct ibv_mr *(*reg_mr_fn)(struct ibv_pd *, void *, size_t, int);
typedef struct ibv_mr *(*reg_mr_iova2_fn)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
typedef struct ibv_mr *(*reg_dmabuf_mr_fn)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
typedef int (*dereg_mr_fn)(struct ibv_mr *);

/* ---- the real dlsym/dlvsym, found by reading ELF tables --------------------------------------- */

/* The first definition of `name` in an object loaded after the one holding this code (what
 * RTLD_NEXT would give), walking the loader's list of objects in load order. The shim recognises
 * itself by its own dynamic section, _DYNAMIC. */
AH_EARLY static void *elf_find_next(const char *name) {
  extern ElfW(Dyn) _DYNAMIC[] __attribute__((visibility("hidden")));
  int seen_self = 0;
  for (struct link_map *m = _r_debug.r_map; m; m = m->l_next) {
    if (m->l_ld == _DYNAMIC) {
      seen_self = 1;
      continue;
    }
    if (!seen_self) continue;
    void *f = ah_elf_lookup(m->l_addr, m->l_ld, name);
    if (f) return f;
  }
  return NULL;
}

static _Atomic(dlsym_fn) real_dlsym_p;
static _Atomic(dlvsym_fn) real_dlvsym_p;

static void *missing_dlsym(void *h, const char *name) { return NULL; }
static void *missing_dlvsym(void *h, const char *name, const char *ver) { return NULL; }
static void missing_dl_log(void) {
  ah_log(AH_LOG_ERROR,
         "cannot find the C library's dlsym/dlvsym; dynamic symbol lookups will fail");
}

AH_EARLY static void real_dl_init(void) {
  if (atomic_load(&real_dlvsym_p)) return;
  dlsym_fn s = (dlsym_fn)elf_find_next("dlsym");
  dlvsym_fn v = (dlvsym_fn)elf_find_next("dlvsym");
  if (!s || !v) {
    missing_dl_log();
    s = s ? s : missing_dlsym;
    v = v ? v : missing_dlvsym;
  }
  atomic_store(&real_dlsym_p, s);
  atomic_store(&real_dlvsym_p, v);
}

/* ---- the policy, built once on first use ------------------------------------------------------ */

static pthread_once_t policy_once = PTHREAD_ONCE_INIT;
static ah_path_policy_t *policy;
static udp_sport_fn mlx5_udp_sport;
static ah_path_tc_rules_t comm_rules; /* AUTOHA_QP_TC_COMM, validated by the env table */
static int comm_rules_ok;

static void policy_init(void) {
  /* The env table (settings/ah_env.c) parsed every AUTOHA_QP* value and logged the bad ones; the
   * policy takes the typed values. */
  const ah_settings_t *env = ah_env_settings();
  char host[256] = "";
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  ah_path_settings_t s = {
      .on = env->enable && env->qp,
      .sport = env->qp_sport,
      .sport_file = env->qp_sport_file,
      .tc = env->qp_tc,
      .tc_is_dscp = env->qp_tc_dscp,
      .topo = ah_shim_qp_topo_path(),
      .method =
          env->qp_method == AH_QP_METHOD_MLX5DV ? AH_PATH_METHOD_MLX5DV : AH_PATH_METHOD_LABEL,
      .host = host,
  };
  char why[256];
  comm_rules_ok = env->enable && env->qp && env->qp_tc_comm[0] &&
                  ah_path_tc_rules_parse(env->qp_tc_comm, &comm_rules, why, sizeof why) == 0;
  policy = ah_path_policy_create(&s);
  if (!policy) {
    ah_log(AH_LOG_ERROR, "QP hook: out of memory; QPs left as NCCL sets them");
    return;
  }
  if (ah_path_policy_active(policy) && ah_path_policy_method(policy) == AH_PATH_METHOD_MLX5DV) {
    real_dl_init();
    void *h = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
    if (h)
      mlx5_udp_sport =
          (udp_sport_fn)atomic_load(&real_dlvsym_p)(h, "mlx5dv_modify_qp_udp_sport", "MLX5_1.17");
    if (!mlx5_udp_sport)
      ah_log(
          AH_LOG_WARN,
          "AUTOHA_QP_METHOD=mlx5dv: libmlx5.so.1 with mlx5dv_modify_qp_udp_sport (rdma-core 33+) "
          "not found; setting the source port through the flow label instead");
  }
  ah_log(AH_LOG_DEBUG, "QP hook: %s, source ports %d, traffic class %d",
         ah_path_policy_active(policy) ? "active" : "off", ah_path_policy_sport_mode(policy),
         ah_path_policy_config_tc(policy));
}

static ah_path_policy_t *policy_get(void) {
  pthread_once(&policy_once, policy_init);
  return policy;
}

ncclConfig_t *ah_shim_qp_config_tc(ncclConfig_t *cfg, int nranks, ncclConfig_t *copy_p) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 26, 0)
  ah_path_policy_t *p = policy_get();
  const char *name = NULL;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 27, 0)
  if (cfg && cfg->magic == 0xcafebeef && cfg->version >= NCCL_VERSION(2, 27, 0) &&
      cfg->size >= offsetof(ncclConfig_t, commName) + sizeof cfg->commName)
    name = cfg->commName;
#endif
  int tc = comm_rules_ok ? ah_path_tc_rules_match(&comm_rules, name, nranks) : -1;
  if (tc < 0) tc = ah_path_policy_config_tc(p);
  if (tc < 0) return cfg;
  if (!cfg) {
    ncclConfig_t nccl_default = NCCL_CONFIG_INITIALIZER;
    *copy_p = nccl_default;
  } else {
    if (cfg->magic != 0xcafebeef || cfg->version < NCCL_VERSION(2, 26, 0) ||
        cfg->size > sizeof *cfg ||
        cfg->size < offsetof(ncclConfig_t, trafficClass) + sizeof cfg->trafficClass ||
        cfg->trafficClass != NCCL_CONFIG_UNDEF_INT)
      return cfg;
    memcpy(copy_p, cfg, cfg->size);
  }
  copy_p->trafficClass = tc;
  ah_log(AH_LOG_DEBUG, "communicator '%s' (%d ranks): traffic class %d", name ? name : "", nranks,
         tc);
  return copy_p;
#else
  (void)nranks;
  (void)copy_p;
  return cfg;
#endif
}

/* ---- per-QP state: the port from INIT and the source port chosen at RTR ----------------------- */

typedef struct {
  struct ibv_qp *qp; /* key */
  uint32_t qp_num;   /* a destroyed QP's address may be reused: state is valid only for this QPN */
  int port;
  uint32_t rqpn;
  uint16_t sport;
  int receiver; /* created with receive WRs: the receiving end of a NCCL connection */
  UT_hash_handle hh;
} qp_state_t;

static pthread_mutex_t qps_lock = PTHREAD_MUTEX_INITIALIZER;
static qp_state_t *qps;

/* Finds or creates the state of `qp` (a fresh one when the QPN changed); call under qps_lock. */
static qp_state_t *qp_state(struct ibv_qp *qp) {
  qp_state_t *s = NULL;
  HASH_FIND_PTR(qps, &qp, s);
  if (s && s->qp_num != qp->qp_num) {
    HASH_DEL(qps, s);
    free(s);
    s = NULL;
  }
  if (!s && (s = calloc(1, sizeof *s)) != NULL) {
    s->qp = qp;
    s->qp_num = qp->qp_num;
    s->port = 1;
    HASH_ADD_PTR(qps, qp, s);
    if (!AH_HASH_ADDED(s)) {
      free(s);
      s = NULL;
    }
  }
  if (!s)
    AH_LOG_CAPPED(1, AH_LOG_WARN, "QP hook: out of memory; a QP keeps the port and class NCCL set");
  return s;
}

static uint16_t qp_sport(struct ibv_qp *qp) {
  uint16_t sport = 0;
  pthread_mutex_lock(&qps_lock);
  qp_state_t *s = NULL;
  HASH_FIND_PTR(qps, &qp, s);
  if (s && s->qp_num == qp->qp_num) sport = s->sport;
  pthread_mutex_unlock(&qps_lock);
  return sport;
}

/* mlx5dv_modify_qp_udp_sport for the rebalance, resolved once whatever AUTOHA_QP_METHOD says. */
static pthread_once_t move_once = PTHREAD_ONCE_INIT;
static udp_sport_fn move_fn;
static void move_init(void) {
  real_dl_init();
  void *h = dlopen("libmlx5.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h)
    move_fn =
        (udp_sport_fn)atomic_load(&real_dlvsym_p)(h, "mlx5dv_modify_qp_udp_sport", "MLX5_1.17");
}

static int qp_move_sport(struct ibv_qp *qp, uint16_t sport) {
  pthread_once(&move_once, move_init);
  if (!move_fn) {
    errno = ENOSYS;
    return -1;
  }
  int rc = move_fn(qp, sport);
  if (rc != 0) {
    errno = rc > 0 ? rc : errno;
    return -1;
  }
  pthread_mutex_lock(&qps_lock);
  qp_state_t *s = NULL;
  HASH_FIND_PTR(qps, &qp, s);
  if (s && s->qp_num == qp->qp_num) s->sport = sport;
  pthread_mutex_unlock(&qps_lock);
  return 0;
}

/* ---- the wrappers ----------------------------------------------------------------------------- */

static _Atomic(create_qp_fn) dl_create_qp; /* what the dlvsym path resolved */
static _Atomic(modify_qp_fn) dl_modify_qp;
static _Atomic(create_qp_fn) next_create_qp; /* RTLD_NEXT, for direct callers */
static _Atomic(modify_qp_fn) next_modify_qp;
static _Atomic(query_gid_fn) real_query_gid;

static struct ibv_qp *verbs_create(create_qp_fn real, struct ibv_pd *pd,
                                   struct ibv_qp_init_attr *init) {
  /* what the caller asked for: a provider writes its own (rounded) capacities back into init */
  int receiver = init && init->cap.max_recv_wr > 0 && !init->srq;
  struct ibv_qp *qp = real(pd, init);
  if (qp && ah_path_policy_active(policy_get())) {
    int saved = errno;
    pthread_mutex_lock(&qps_lock);
    qp_state_t *s = NULL;
    HASH_FIND_PTR(qps, &qp, s); /* a new QP at a destroyed one's address starts clean */
    if (s) {
      HASH_DEL(qps, s);
      free(s);
    }
    if (receiver && (s = qp_state(qp)) != NULL) s->receiver = 1;
    pthread_mutex_unlock(&qps_lock);
    errno = saved;
  }
  return qp;
}

static void local_gid(struct ibv_qp *qp, int port, int index, uint8_t gid_p[16], int *ok_p) {
  query_gid_fn q = atomic_load(&real_query_gid);
  union ibv_gid g;
  *ok_p = 0;
  if (q && qp->context && q(qp->context, (uint8_t)port, index, &g) == 0) {
    memcpy(gid_p, g.raw, 16);
    *ok_p = 1;
  }
}

static int verbs_modify(modify_qp_fn real, struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  ah_path_policy_t *p = policy_get();
  if (!ah_path_policy_active(p) || !qp || !attr || !(mask & IBV_QP_STATE))
    return real(qp, attr, mask);
  int saved = errno;
  if (attr->qp_state == IBV_QPS_INIT && (mask & IBV_QP_PORT)) {
    pthread_mutex_lock(&qps_lock);
    qp_state_t *s = qp_state(qp);
    if (s) s->port = attr->port_num;
    pthread_mutex_unlock(&qps_lock);
    errno = saved;
    return real(qp, attr, mask);
  }
  int rtr = attr->qp_state == IBV_QPS_RTR && (mask & IBV_QP_AV) && (mask & IBV_QP_DEST_QPN) &&
            attr->ah_attr.is_global && attr->dest_qp_num != qp->qp_num &&
            (qp->qp_type == IBV_QPT_RC || qp->qp_type == IBV_QPT_UC);
  if (rtr) {
    struct ibv_qp_attr a;
    memcpy(&a, attr, sizeof a); /* byte for byte: only the two fields below may differ */
    uint16_t sport = 0;
    int port = 1;
    pthread_mutex_lock(&qps_lock);
    qp_state_t *s = qp_state(qp);
    if (s && s->sport && s->rqpn == attr->dest_qp_num)
      sport = s->sport; /* NCCL retried the modify */
    int receiver = 0;
    if (s) port = s->port, receiver = s->receiver;
    pthread_mutex_unlock(&qps_lock);
    ah_path_qp_t q = {.dev = qp->context && qp->context->device ? qp->context->device->name : "",
                      .port = port,
                      .lqpn = qp->qp_num,
                      .rqpn = attr->dest_qp_num,
                      .receiver = receiver};
    memcpy(q.dgid, attr->ah_attr.grh.dgid.raw, 16);
    local_gid(qp, port, attr->ah_attr.grh.sgid_index, q.sgid, &q.has_sgid);
    if (!sport) {
      sport = ah_path_policy_sport(p, &q);
      pthread_mutex_lock(&qps_lock);
      if ((s = qp_state(qp)) != NULL) s->sport = sport, s->rqpn = attr->dest_qp_num;
      pthread_mutex_unlock(&qps_lock);
    }
    if (sport && !(ah_path_policy_method(p) == AH_PATH_METHOD_MLX5DV && mlx5_udp_sport))
      a.ah_attr.grh.flow_label = ah_path_sport_to_label(sport);
    int tc = ah_path_policy_qp_tc(p, &q, attr->ah_attr.grh.traffic_class);
    if (tc >= 0) a.ah_attr.grh.traffic_class = (uint8_t)tc;
    ah_log(AH_LOG_DEBUG, "QP %u -> %u: source port %u (label 0x%05x), traffic class %u", qp->qp_num,
           attr->dest_qp_num, sport, a.ah_attr.grh.flow_label, a.ah_attr.grh.traffic_class);
    errno = saved;
    return real(qp, &a, mask);
  }
  if (attr->qp_state == IBV_QPS_RTS && mlx5_udp_sport &&
      ah_path_policy_method(p) == AH_PATH_METHOD_MLX5DV) {
    int rc = real(qp, attr, mask);
    if (rc == 0) {
      saved = errno;
      uint16_t sport = 0;
      pthread_mutex_lock(&qps_lock);
      qp_state_t *s = qp_state(qp);
      if (s) sport = s->sport;
      pthread_mutex_unlock(&qps_lock);
      if (sport && mlx5_udp_sport(qp, sport) != 0)
        AH_LOG_CAPPED(3, AH_LOG_WARN,
                      "mlx5dv_modify_qp_udp_sport(QP %u, %u) failed: %s; the QP keeps its port",
                      qp->qp_num, sport, strerror(errno));
      errno = saved;
    }
    return rc;
  }
  errno = saved;
  return real(qp, attr, mask);
}

static _Atomic(destroy_qp_fn) dl_destroy_qp;

/* The real control verbs of the dlvsym route, for the HA layer's shadows. */
static void *verbs_real(const char *name, const char *version);
static ah_shim_ha_verbs_t dl_real_verbs(void) {
  ah_shim_ha_verbs_t r = {atomic_load(&dl_create_qp),
                          atomic_load(&dl_modify_qp),
                          atomic_load(&dl_destroy_qp),
                          atomic_load(&real_query_gid),
                          qp_sport,
                          qp_move_sport,
                          verbs_real};
  return r;
}

/* What dlsym/dlvsym hand back for the hooked verbs: these call the function the lookup found (and,
 * with AUTOHA_HA, tell the HA layer about NCCL's queue pairs: rdma_ha_qp.c). */
static struct ibv_qp *dl_create_wrapper(struct ibv_pd *pd, struct ibv_qp_init_attr *init) {
  int receiver = init && init->cap.max_recv_wr > 0 && !init->srq; /* before the provider's write */
  struct ibv_qp *qp = verbs_create(atomic_load(&dl_create_qp), pd, init);
  if (qp && (ah_shim_ha_on() || ah_shim_link_on())) {
    ah_shim_ha_verbs_t r = dl_real_verbs();
    /* the failover layer first: the timing's wrappers go in front of its own (NCCL's view) */
    if (ah_shim_ha_on()) ah_shim_ha_created(qp, init, &r);
    ah_shim_link_created(qp, init, receiver, &r);
  }
  return qp;
}
static int dl_modify_wrapper(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  struct ibv_qp_attr ha_rts; /* AUTOHA_HA_IB_TIMEOUT: a shorter RC retry window at RTS */
  if (ah_shim_ha_on() && ah_shim_ha_rts_attr(qp, attr, mask, &ha_rts)) attr = &ha_rts;
  int rc = verbs_modify(atomic_load(&dl_modify_qp), qp, attr, mask);
  if (rc == 0 && ah_shim_ha_on()) ah_shim_ha_modified(qp, attr, mask);
  if (rc == 0) ah_shim_link_modified(qp, attr, mask);
  return rc;
}
static int dl_destroy_wrapper(struct ibv_qp *qp) {
  ah_shim_link_destroying(qp);
  ah_shim_ha_destroying(qp);
  destroy_qp_fn f = atomic_load(&dl_destroy_qp);
  return f ? f(qp) : ENOSYS;
}

/* NCCL's async-event thread: events the HA layer owns (its shadows', and those of primaries it
 * failed over or a port whose queue pairs all have a shadow elsewhere) are acknowledged here and
 * the next event is read; every other event reaches NCCL unchanged, and a port's going down or
 * coming back, or the NIC failing whole, among them is told to the hub (rdma_link_qp.c: the
 * NIC-down finding). */
static _Atomic(get_async_event_fn) dl_get_async_event;
static _Atomic(ack_async_event_fn) dl_ack_async_event;
static int dl_get_async_event_wrapper(struct ibv_context *ctx, struct ibv_async_event *ev) {
  get_async_event_fn f = atomic_load(&dl_get_async_event);
  if (!f) return ENOSYS;
  for (;;) {
    int rc = f(ctx, ev);
    ack_async_event_fn ack = atomic_load(&dl_ack_async_event);
    if (rc != 0) return rc;
    if (!ack || !ah_shim_ha_event_absorbed(ctx, ev)) {
      ah_shim_link_port_event(ctx, ev); /* what NCCL is told */
      return rc;
    }
    ack(ev);
  }
}

/* AUTOHA_HA=nic: NCCL's memory registrations, reported to the HA layer so that it mirrors them on
 * the backup NIC (rdma_ha_nic.c). Each wrapper calls the function NCCL's lookup found. */
static _Atomic(void *) dl_reg_mr, dl_reg_mr_iova2, dl_reg_dmabuf_mr, dl_dereg_mr;
static struct ibv_mr *dl_reg_mr_wrapper(struct ibv_pd *pd, void *addr, size_t len, int access) {
  struct ibv_mr *mr = ((reg_mr_fn)atomic_load(&dl_reg_mr))(pd, addr, len, access);
  if (mr) ah_shim_ha_mr_registered(mr, (uint64_t)(uintptr_t)addr, access, -1, 0);
  return mr;
}
static struct ibv_mr *dl_reg_mr_iova2_wrapper(struct ibv_pd *pd, void *addr, size_t len,
                                              uint64_t iova, unsigned access) {
  struct ibv_mr *mr = ((reg_mr_iova2_fn)atomic_load(&dl_reg_mr_iova2))(pd, addr, len, iova, access);
  if (mr) ah_shim_ha_mr_registered(mr, iova, (int)access, -1, 0);
  return mr;
}
static struct ibv_mr *dl_reg_dmabuf_mr_wrapper(struct ibv_pd *pd, uint64_t offset, size_t len,
                                               uint64_t iova, int fd, int access) {
  struct ibv_mr *mr =
      ((reg_dmabuf_mr_fn)atomic_load(&dl_reg_dmabuf_mr))(pd, offset, len, iova, fd, access);
  if (mr) ah_shim_ha_mr_registered(mr, iova, access, fd, offset);
  return mr;
}
static int dl_dereg_mr_wrapper(struct ibv_mr *mr) {
  ah_shim_ha_mr_deregistering(mr);
  return ((dereg_mr_fn)atomic_load(&dl_dereg_mr))(mr);
}

/* The libibverbs handle NCCL resolved its verbs from, for the HA layer's own verbs: the real verb
 * name@version there, or NULL when NCCL has resolved none yet or the library lacks it. */
static _Atomic(void *) dl_handle;
static void *verbs_real(const char *name, const char *version) {
  void *h = atomic_load(&dl_handle);
  if (!h) return NULL;
  real_dl_init();
  return atomic_load(&real_dlvsym_p)(h, name, version);
}

/* The libibverbs of the shim's own reads when NCCL has resolved no verb: one this process can
 * dlopen as NCCL's net_ib would ($NCCL_IBVERBS_LIB, else libibverbs.so.1), opened once. */
static void *own_handle;
static pthread_once_t own_once = PTHREAD_ONCE_INIT;
static void own_open(void) {
  const char *lib = getenv("NCCL_IBVERBS_LIB");
  own_handle = dlopen(lib && *lib ? lib : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
}

void *ah_shim_verbs_lookup(const char *name, const char *version) {
  void *f = verbs_real(name, version);
  if (f || atomic_load(&dl_handle)) return f;
  pthread_once(&own_once, own_open);
  if (!own_handle) return NULL;
  real_dl_init();
  return atomic_load(&real_dlvsym_p)(own_handle, name, version);
}

/* Direct callers (programs and net plugins linked to libibverbs): the next definition. */
static void *next_verb(const char *name) {
  real_dl_init();
  void *f = atomic_load(&real_dlvsym_p)(RTLD_NEXT, name, "IBVERBS_1.1");
  if (!f) f = atomic_load(&real_dlsym_p)(RTLD_NEXT, name);
  if (!f) AH_LOG_CAPPED(1, AH_LOG_ERROR, "%s called but no libibverbs defines it", name);
  return f;
}

AH_VERBS_EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init) {
  create_qp_fn f = atomic_load(&next_create_qp);
  if (!f && (f = (create_qp_fn)next_verb("ibv_create_qp")) != NULL)
    atomic_store(&next_create_qp, f);
  if (!f) {
    errno = ENOSYS;
    return NULL;
  }
  return verbs_create(f, pd, init);
}

AH_VERBS_EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  modify_qp_fn f = atomic_load(&next_modify_qp);
  if (!f && (f = (modify_qp_fn)next_verb("ibv_modify_qp")) != NULL)
    atomic_store(&next_modify_qp, f);
  if (!f) return ENOSYS;
  if (!atomic_load(&real_query_gid)) {
    query_gid_fn q = (query_gid_fn)next_verb("ibv_query_gid");
    if (q) atomic_store(&real_query_gid, q);
  }
  return verbs_modify(f, qp, attr, mask);
}

/* ---- dlsym / dlvsym --------------------------------------------------------------------------- */

/* The wrapper of a memory-registration verb (slot: where the found function is kept), or found
 * itself when another library's verb already took the slot. */
static void *hook_mr(_Atomic(void *) *slot, void *found, void *wrapper) {
  void *expected = NULL;
  if (!atomic_compare_exchange_strong(slot, &expected, found) && expected != found) return found;
  return wrapper;
}

/* Resolves the real verb through the same lookup the caller asked for and returns the wrapper in its
 * place. Note that the lookup runs from the shim, so RTLD_NEXT here means "after the shim"; only
 * the hooked names (hooked_name) take this path. */
static void *hook_verb(void *found, const char *name, void *handle) {
  if (!found) return NULL; /* dlerror() already says why */
  if (handle) {
    void *expected = NULL;
    atomic_compare_exchange_strong(&dl_handle, &expected, handle);
  }
  if (strcmp(name, "ibv_reg_mr") == 0) return hook_mr(&dl_reg_mr, found, (void *)dl_reg_mr_wrapper);
  if (strcmp(name, "ibv_reg_mr_iova2") == 0)
    return hook_mr(&dl_reg_mr_iova2, found, (void *)dl_reg_mr_iova2_wrapper);
  if (strcmp(name, "ibv_reg_dmabuf_mr") == 0)
    return hook_mr(&dl_reg_dmabuf_mr, found, (void *)dl_reg_dmabuf_mr_wrapper);
  if (strcmp(name, "ibv_dereg_mr") == 0)
    return hook_mr(&dl_dereg_mr, found, (void *)dl_dereg_mr_wrapper);
  if (!atomic_load(&real_query_gid) && handle) {
    query_gid_fn q =
        (query_gid_fn)atomic_load(&real_dlvsym_p)(handle, "ibv_query_gid", "IBVERBS_1.1");
    if (q) atomic_store(&real_query_gid, q);
  }
  if (strcmp(name, "ibv_get_async_event") == 0) {
    ack_async_event_fn ack = handle ? (ack_async_event_fn)atomic_load(&real_dlvsym_p)(
                                          handle, "ibv_ack_async_event", "IBVERBS_1.1")
                                    : NULL;
    get_async_event_fn expected = NULL;
    if (!ack || (!atomic_compare_exchange_strong(&dl_get_async_event, &expected,
                                                 (get_async_event_fn)found) &&
                 expected != found))
      return found;
    atomic_store(&dl_ack_async_event, ack);
    return (void *)dl_get_async_event_wrapper;
  }
  if (strcmp(name, "ibv_destroy_qp") == 0) {
    destroy_qp_fn expected = NULL;
    if (!atomic_compare_exchange_strong(&dl_destroy_qp, &expected, (destroy_qp_fn)found) &&
        expected != found)
      return found;
    return (void *)dl_destroy_wrapper;
  }
  int create = strcmp(name, "ibv_create_qp") == 0;
  if (found == (create ? (void *)ibv_create_qp : (void *)ibv_modify_qp)) return found;
  if (create) {
    create_qp_fn expected = NULL;
    if (!atomic_compare_exchange_strong(&dl_create_qp, &expected, (create_qp_fn)found) &&
        expected != found) {
      AH_LOG_CAPPED(2, AH_LOG_WARN,
                    "ibv_create_qp resolved from a second library; its QPs are not hooked");
      return found;
    }
    return (void *)dl_create_wrapper;
  }
  modify_qp_fn expected = NULL;
  if (!atomic_compare_exchange_strong(&dl_modify_qp, &expected, (modify_qp_fn)found) &&
      expected != found) {
    AH_LOG_CAPPED(2, AH_LOG_WARN,
                  "ibv_modify_qp resolved from a second library; its QPs are not hooked");
    return found;
  }
  if (!atomic_load(&real_query_gid) && handle) {
    query_gid_fn q =
        (query_gid_fn)atomic_load(&real_dlvsym_p)(handle, "ibv_query_gid", "IBVERBS_1.1");
    if (q) atomic_store(&real_query_gid, q);
  }
  return (void *)dl_modify_wrapper;
}

/* Hidden entry points the trampolines jump to for the hooked names. */
void *ah_shim_dlsym_hooked(void *handle, const char *name);
void *ah_shim_dlvsym_hooked(void *handle, const char *name, const char *version);
void *ah_shim_dlsym_hooked(void *handle, const char *name) {
  return hook_verb(atomic_load(&real_dlsym_p)(handle, name), name, handle);
}
void *ah_shim_dlvsym_hooked(void *handle, const char *name, const char *version) {
  return hook_verb(atomic_load(&real_dlvsym_p)(handle, name, version), name, handle);
}

/* Called by the trampolines with the looked-up name: returns the function to jump to, with the
 * caller's arguments and return address untouched. */
void *ah_shim_verbs_route(const char *name, const char *version, int is_vsym);
/* 1 for the queue-pair verbs, 2 for the memory-registration ones (AUTOHA_HA=nic only), each in
 * the version node NCCL asks for; 0 for every other name. */
AH_EARLY static int hooked_name(const char *name, const char *version, int is_vsym) {
  if (!name) return 0;
  int v11 = !is_vsym || (version && ah_elf_streq(version, "IBVERBS_1.1"));
  if (ah_elf_streq(name, "ibv_reg_mr") || ah_elf_streq(name, "ibv_dereg_mr")) return v11 ? 2 : 0;
  if (ah_elf_streq(name, "ibv_reg_mr_iova2"))
    return !is_vsym || (version && ah_elf_streq(version, "IBVERBS_1.8")) ? 2 : 0;
  if (ah_elf_streq(name, "ibv_reg_dmabuf_mr"))
    return !is_vsym || (version && ah_elf_streq(version, "IBVERBS_1.12")) ? 2 : 0;
  return (ah_elf_streq(name, "ibv_modify_qp") || ah_elf_streq(name, "ibv_create_qp") ||
          ah_elf_streq(name, "ibv_destroy_qp") || ah_elf_streq(name, "ibv_get_async_event")) &&
         v11;
}

__attribute__((used)) AH_EARLY void *ah_shim_verbs_route(const char *name, const char *version,
                                                         int is_vsym) {
  real_dl_init();
  int hooked = 0, kind = hooked_name(name, version, is_vsym);
  if (kind) { /* never during a runtime's early start */
    int saved = errno;
    /* the destroy and async-event hooks serve the HA layer (shadows go before NCCL's QP; its
     * events are not NCCL's) and the per-connection diagnosis; the registration hooks only
     * AUTOHA_HA=nic (mirrors on the backup NIC) */
    if (kind == 2) hooked = ah_shim_ha_nic_on();
    else {
      /* the per-connection timing (rdma_link_*.c) needs creation, connection and destruction, and
       * a port's events (the NIC-down finding) */
      int destroy = ah_elf_streq(name, "ibv_destroy_qp"),
          async = ah_elf_streq(name, "ibv_get_async_event");
      hooked = ah_shim_ha_on() || ah_shim_link_on() ||
               (!destroy && !async && ah_path_policy_active(policy_get()));
    }
    errno = saved;
  }
  if (is_vsym) return hooked ? (void *)ah_shim_dlvsym_hooked : (void *)atomic_load(&real_dlvsym_p);
  return hooked ? (void *)ah_shim_dlsym_hooked : (void *)atomic_load(&real_dlsym_p);
}

#if defined(__x86_64__) &&                                                                         \
    !defined(AH_VERBS_C_TRAMPOLINE) /* the C form can be forced for testing */
/* The pieces of the two trampolines below: a function's start and end, and a push or pop with
 * the unwinder's note of how the stack moved. */
#define TRAMPOLINE_BEGIN(name)                                                                     \
  ".globl " name "\n.type " name ", @function\n" name ":\n.cfi_startproc\n  endbr64\n"
#define TRAMPOLINE_END(name) "  jmp *%rax\n.cfi_endproc\n.size " name ", .-" name "\n"
#define PUSH(reg) "  push %" reg "\n.cfi_adjust_cfa_offset 8\n"
#define POP(reg) "  pop %" reg "\n.cfi_adjust_cfa_offset -8\n"
/* dlsym(handle, name): save the arguments, route(name, NULL, 0), restore, jump. The stack is
 * 16-byte aligned at the call (entry rsp = 8 mod 16, two pushes and 8 more). */
__asm__(".text\n"
        TRAMPOLINE_BEGIN("dlsym")
        PUSH("rdi")
        PUSH("rsi")
        "  sub $8, %rsp\n"
        ".cfi_adjust_cfa_offset 8\n"
        "  mov %rsi, %rdi\n"
        "  xor %esi, %esi\n"
        "  xor %edx, %edx\n"
        "  call ah_shim_verbs_route\n"
        "  add $8, %rsp\n"
        ".cfi_adjust_cfa_offset -8\n"
        POP("rsi")
        POP("rdi")
        TRAMPOLINE_END("dlsym")
        /* dlvsym(handle, name, version): three pushes keep the call aligned */
        TRAMPOLINE_BEGIN("dlvsym")
        PUSH("rdi")
        PUSH("rsi")
        PUSH("rdx")
        "  mov %rsi, %rdi\n"
        "  mov %rdx, %rsi\n"
        "  mov $1, %edx\n"
        "  call ah_shim_verbs_route\n"
        POP("rdx")
        POP("rsi")
        POP("rdi")
        TRAMPOLINE_END("dlvsym"));
#undef TRAMPOLINE_BEGIN
#undef TRAMPOLINE_END
#undef PUSH
#undef POP
#else
/* Other architectures: plain C. The forward is in tail position, which optimised builds turn into
 * a jump; unoptimised builds resolve RTLD_NEXT relative to the shim (docs/qp.md). */
AH_VERBS_EXPORT void *dlsym(void *handle, const char *name) {
  return ((dlsym_fn)ah_shim_verbs_route(name, NULL, 0))(handle, name);
}
AH_VERBS_EXPORT void *dlvsym(void *handle, const char *name, const char *version) {
  return ((dlvsym_fn)ah_shim_verbs_route(name, version, 1))(handle, name, version);
}
#endif
