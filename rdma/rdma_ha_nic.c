/* rdma_ha_nic.c: AUTOHA_HA=nic (docs/ha.md, "Policy nic"): a queue pair's shadow on another NIC of
 * the host. The backup NIC (rdma/ah_ha_nic.c picks it: the neighbour mlx5_(i^1) among
 * NCCL_IB_HCA's devices) is opened once per process with the real verbs — its own context, one
 * protection domain, one CQ per NCCL CQ its shadows need. NCCL's memory registrations are mirrored
 * on it (all of them when the first shadow is built there, then each new one as NCCL registers it;
 * deregistered with the original), and each mirror's remote key is published in the hub's
 * directory so that the peer can translate the remote keys it posts. Every post on a nic shadow
 * (the replay included) goes through ah_shim_ha_sh_post_send/recv, which translate local keys (the
 * mirror's) and remote keys (the peer's published mapping, cached).
 *
 * Key choice: the backup NIC is the process's, not NCCL's — its own context and protection domain,
 * so NCCL's objects are never touched and a mirror's keys never collide with NCCL's; the price is a
 * second registration of NCCL's memory (made lazily, at the first shadow there). The completions
 * of its CQs are rdma_ha_nic_cq.c's. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_ha_nic.h"
#include "ah_uthash.h"
#include "rdma_ha_ib.h"
#include "rdma_ha_int.h"

#define NIC_MAX 16             /* backup NICs per process */
#define NIC_CQS 64             /* NCCL CQs one backup NIC mirrors */
#define NIC_SHADOWS 4096       /* shadows per backup NIC */
#define NICX_MAGIC 0x4e49434bu /* "KCIN": the per-queue-pair record of its key space */
#define RKEY_MAGIC 0x59454b52u /* "RKEY": a published remote-key mapping */
#define KIND_NICX 0x31584148u  /* "HAX1": (sgid, qpn, peer qpn) -> the key space of its memory */
#define KIND_RKEY                                                                                  \
  0x314b4148u          /* "HAK1": (key space, rkey) -> the same memory's rkey on the backup NIC */
#define DIR_WAIT_S 2.0 /* how long a translation waits for the peer's record */

typedef struct ha_nic {
  char name[64];
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  ha_nic_cq_t cq[NIC_CQS];
  _Atomic int ncq;
  int events; /* its async events can be read without blocking */
  /* its shadows, by QP number (under nic_mu; read on the slow paths only) */
  uint32_t sh_qpn[NIC_SHADOWS];
  ha_qp_t *sh_m[NIC_SHADOWS];
  int nsh;
} ha_nic_t;

struct ha_nic_qp {
  ha_nic_t *nic;
  ah_ha_keyspace_t local, peer; /* the primary's memory keys, the peer's */
  int have_peer;
};

/* A registration NCCL made, and its mirror on the backup NIC once there is one. */
typedef struct mr_rec {
  struct ibv_mr *mr; /* key: NCCL's */
  struct ibv_context *ctx;
  void *addr;
  size_t len;
  uint64_t iova, offset;
  int access, fd; /* fd: a dup of NCCL's dma-buf fd, -1 for host memory */
  struct ibv_mr *mirror;
  UT_hash_handle hh;
} mr_rec_t;

/* the real verbs of the backup NIC, resolved through NCCL's libibverbs handle */
static struct {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  struct ibv_context *(*open_device)(struct ibv_device *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  struct ibv_mr *(*reg_mr_iova2)(struct ibv_pd *, void *, size_t, uint64_t, unsigned);
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *, uint64_t, size_t, uint64_t, int, int);
  int (*dereg_mr)(struct ibv_mr *);
  int (*query_gid)(struct ibv_context *, uint8_t, int, union ibv_gid *);
  int (*get_async_event)(struct ibv_context *, struct ibv_async_event *); /* optional: events */
  void (*ack_async_event)(struct ibv_async_event *);
  int ok;
} rv;

static pthread_mutex_t nic_mu = PTHREAD_MUTEX_INITIALIZER; /* nics, MR records, key tables */
static ha_nic_t *nics[NIC_MAX];
static _Atomic int nnics;
static mr_rec_t *mrs;
static ah_ha_keys_t *lkeys; /* (a context's space, lkey) -> the mirror's lkey */
static ah_ha_keys_t *rkeys; /* (a peer's space, rkey) -> its mirror's rkey, as published */
static uint64_t nonce;      /* this process's part of its key spaces */

/* Resolves the verbs above once with `resolve` (the hook's: NCCL's libibverbs). Returns 1 when the
 * required ones are there. Call under nic_mu. */
static int verbs_load(void *(*resolve)(const char *, const char *)) {
  if (rv.ok) return rv.ok > 0;
  if (!resolve) return 0;
#define R(f, n, v) *(void **)&rv.f = resolve(n, v)
  R(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
  R(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
  R(open_device, "ibv_open_device", "IBVERBS_1.1");
  R(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
  R(create_cq, "ibv_create_cq", "IBVERBS_1.1");
  R(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
  R(reg_mr_iova2, "ibv_reg_mr_iova2", "IBVERBS_1.8");
  R(reg_dmabuf_mr, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
  R(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
  R(query_gid, "ibv_query_gid", "IBVERBS_1.1");
  R(get_async_event, "ibv_get_async_event", "IBVERBS_1.1");
  R(ack_async_event, "ibv_ack_async_event", "IBVERBS_1.1");
#undef R
  int ok = rv.get_device_list && rv.free_device_list && rv.open_device && rv.alloc_pd &&
           rv.create_cq && rv.reg_mr && rv.dereg_mr && rv.query_gid;
  if (!ok)
    ah_log(
        AH_LOG_WARN,
        "HA: AUTOHA_HA=nic cannot resolve the verbs it needs from NCCL's libibverbs; queue pairs run "
        "without shadows");
  if (!lkeys) lkeys = ah_ha_keys_new();
  if (!rkeys) rkeys = ah_ha_keys_new();
  if (!lkeys || !rkeys) ok = 0;
  if (!nonce)
    nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)(ha_now_s() * 1e9) ^ (uint64_t)(uintptr_t)&nonce;
  rv.ok = ok ? 1 : -1;
  return ok;
}

/* The key space of a context's memory keys in this process. */
static ah_ha_keyspace_t space_of(struct ibv_context *ctx) {
  ah_ha_keyspace_t s;
  uint64_t c = (uint64_t)(uintptr_t)ctx;
  memcpy(s.b, &nonce, 8);
  memcpy(s.b + 8, &c, 8);
  return s;
}

/* The name of the NIC that backs ctx's device, or "" when none (logged once). Call under nic_mu. */
static void backup_name(struct ibv_context *ctx, char name[64]) {
  static struct {
    struct ibv_context *ctx;
    char name[64];
  } known[HA_MAX_CTX];
  static int nknown;
  name[0] = '\0';
  for (int i = 0; i < nknown; i++)
    if (known[i].ctx == ctx) {
      memcpy(name, known[i].name, 64);
      return;
    }
  int n = 0;
  struct ibv_device **list = rv.get_device_list(&n);
  if (!list) return;
  const char **names = calloc((size_t)n + 1, sizeof *names);
  ah_ha_pci_t *where = calloc((size_t)n + 1, sizeof *where);
  if (names && where) {
    /* where each device sits, from the sysfs directory libibverbs names for it (sim/'s provider
     * names a tree of the same shape) */
    for (int i = 0; i < n; i++) {
      names[i] = list[i]->name;
      ah_ha_pci_read(list[i]->ibdev_path, &where[i]);
    }
    int near = AH_HA_PCI_FAR;
    int b = ah_ha_nic_backup(names, where, n, ctx->device->name, getenv("NCCL_IB_HCA"), &near);
    if (b >= 0) {
      snprintf(name, 64, "%s", list[b]->name);
      static const char *const why[] = {"no NIC nearer: by the device list's order",
                                        "on the same NUMA node", "on the same PCIe switch"};
      ah_log(AH_LOG_INFO, "HA: AUTOHA_HA=nic: %s is backed by %s (%s)", ctx->device->name, name,
             why[near]);
    } else
      AH_LOG_CAPPED(
          2, AH_LOG_WARN,
          "HA: AUTOHA_HA=nic: no other NIC to back %s (NCCL_IB_HCA '%s'); its queue pairs "
          "run without shadows",
          ctx->device->name, getenv("NCCL_IB_HCA") ? getenv("NCCL_IB_HCA") : "");
  }
  free(names);
  free(where);
  rv.free_device_list(list);
  if (nknown < HA_MAX_CTX) {
    known[nknown].ctx = ctx;
    memcpy(known[nknown++].name, name, 64);
  }
}

/* Registers r's memory on the backup NIC and publishes its remote key. Returns 0 or -1 (logged).
 * Call under nic_mu. */
static int mirror(ha_nic_t *nic, mr_rec_t *r) {
  struct ibv_mr *mr = NULL;
  if (r->fd >= 0)
    mr = rv.reg_dmabuf_mr ? rv.reg_dmabuf_mr(nic->pd, r->offset, r->len, r->iova, r->fd, r->access)
                          : NULL;
  else if (rv.reg_mr_iova2)
    mr = rv.reg_mr_iova2(nic->pd, r->addr, r->len, r->iova, (unsigned)r->access);
  else if (r->iova == (uint64_t)(uintptr_t)r->addr)
    mr = rv.reg_mr(nic->pd, r->addr, r->len, r->access);
  if (!mr) {
    AH_LOG_CAPPED(
        3, AH_LOG_WARN,
        "HA: cannot register NCCL's memory (%zu bytes) on the backup NIC %s: %s; a failover "
        "to it that uses this memory fails",
        r->len, nic->name, strerror(errno));
    return -1;
  }
  ah_ha_keyspace_t s = space_of(r->ctx);
  if (ah_ha_keys_put(lkeys, &s, r->mr->lkey, mr->lkey) != 0) {
    rv.dereg_mr(mr);
    return -1;
  }
  r->mirror = mr;
  if (r->access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)) {
    uint8_t key[HA_KEY];
    uint32_t val[2] = {RKEY_MAGIC, mr->rkey};
    ah_shim_ha_dir_key(key, s.b, r->mr->rkey, 0, KIND_RKEY);
    if (ah_shim_ha_dir_put(key, val, sizeof val) != 0)
      AH_LOG_CAPPED(2, AH_LOG_WARN,
                    "HA: cannot publish a remote key's mirror on %s (the hub is gone?); a peer's "
                    "failover to it fails",
                    nic->name);
  }
  return 0;
}

/* The open backup NIC named `name`, opening it (and mirroring every registration it backs) the
 * first time. NULL when it cannot be opened (logged). Call under nic_mu. */
static ha_nic_t *nic_open(const char *name) {
  int n = atomic_load(&nnics);
  for (int i = 0; i < n; i++)
    if (strcmp(nics[i]->name, name) == 0) return nics[i];
  if (n >= NIC_MAX) return NULL;
  int nd = 0;
  struct ibv_device **list = rv.get_device_list(&nd);
  struct ibv_context *ctx = NULL;
  for (int i = 0; list && i < nd && !ctx; i++)
    if (strcmp(list[i]->name, name) == 0) ctx = rv.open_device(list[i]);
  if (list) rv.free_device_list(list);
  struct ibv_pd *pd = ctx ? rv.alloc_pd(ctx) : NULL;
  ha_nic_t *nic = pd ? calloc(1, sizeof *nic) : NULL;
  if (!nic) {
    /* the context (if any) stays open: closing needs one more verb, and this happens once */
    AH_LOG_CAPPED(2, AH_LOG_WARN,
                  "HA: cannot open the backup NIC %s: %s; queue pairs it would back run without "
                  "shadows",
                  name, strerror(errno));
    return NULL;
  }
  snprintf(nic->name, sizeof nic->name, "%s", name);
  nic->ctx = ctx;
  nic->pd = pd;
  /* its async events are read by the background thread without blocking (rdma_ha_nic_event.c):
   * NCCL never opened this context, so nobody else reads them */
  int fl = rv.get_async_event && rv.ack_async_event ? fcntl(ctx->async_fd, F_GETFL) : -1;
  nic->events = fl >= 0 && fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) == 0;
  nics[n] = nic;
  atomic_store(&nnics, n + 1);
  /* lazily: the registrations NCCL made before the first shadow here */
  int done = 0;
  for (mr_rec_t *r = mrs; r; r = r->hh.next) {
    char b[64];
    if (r->mirror) continue;
    backup_name(r->ctx, b);
    if (strcmp(b, name) == 0 && mirror(nic, r) == 0) done++;
  }
  ah_log(AH_LOG_INFO, "HA: backup NIC %s opened; %d of NCCL's memory registrations mirrored on it",
         name, done);
  return nic;
}

/* The backup CQ standing in for NCCL's cq on nic, created on first use. NULL on failure. Call
 * under nic_mu. */
static ha_nic_cq_t *nic_cq(ha_nic_t *nic, struct ibv_cq *cq) {
  int n = atomic_load(&nic->ncq);
  for (int i = 0; i < n; i++)
    if (nic->cq[i].nccl == cq) return &nic->cq[i];
  if (n >= NIC_CQS) return NULL;
  struct ibv_cq *bk = rv.create_cq(nic->ctx, cq->cqe > 0 ? cq->cqe : 1024, NULL, NULL, 0);
  if (!bk) {
    AH_LOG_CAPPED(2, AH_LOG_WARN, "HA: cannot create a CQ on the backup NIC %s: %s", nic->name,
                  strerror(errno));
    return NULL;
  }
  ha_nic_cq_t *c = &nic->cq[n];
  c->nccl = cq;
  c->bk = bk;
  pthread_mutex_init(&c->mu, NULL);
  atomic_store_explicit(&nic->ncq, n + 1, memory_order_release);
  return c;
}

/* ---- memory registrations (the verbs hook reports NCCL's) ------------------------------------- */

void ah_shim_ha_mr_registered(struct ibv_mr *mr, uint64_t iova, int access, int dmabuf_fd,
                              uint64_t offset) {
  if (!mr) return;
  int saved = errno;
  pthread_mutex_lock(&nic_mu);
  mr_rec_t *r = calloc(1, sizeof *r);
  if (r) {
    r->mr = mr;
    r->ctx = mr->context;
    r->addr = mr->addr;
    r->len = mr->length;
    r->iova = iova;
    r->offset = offset;
    r->access = access;
    r->fd = dmabuf_fd >= 0 ? dup(dmabuf_fd) : -1; /* NCCL may close its own once registered */
    HASH_ADD_PTR(mrs, mr, r);
    if (!AH_HASH_ADDED(r)) {
      if (r->fd >= 0) close(r->fd);
      free(r);
      r = NULL;
    }
  }
  if (!r) {
    AH_LOG_CAPPED(1, AH_LOG_WARN,
                  "HA: out of memory recording NCCL's memory registration; a nic failover that "
                  "uses it fails");
  } else if (rv.ok > 0) { /* no NIC is open before the verbs are (the first shadow's build) */
    char b[64];
    backup_name(r->ctx, b);
    int n = atomic_load(&nnics);
    for (int i = 0; b[0] && i < n; i++)
      if (strcmp(nics[i]->name, b) == 0) mirror(nics[i], r); /* the NIC is open: mirror now */
  }
  pthread_mutex_unlock(&nic_mu);
  errno = saved;
}

void ah_shim_ha_mr_deregistering(struct ibv_mr *mr) {
  if (!mr) return;
  int saved = errno;
  pthread_mutex_lock(&nic_mu);
  mr_rec_t *r = NULL;
  HASH_FIND_PTR(mrs, &mr, r);
  if (r) {
    HASH_DEL(mrs, r);
    if (r->mirror) {
      ah_ha_keyspace_t s = space_of(r->ctx);
      ah_ha_keys_del(lkeys, &s, mr->lkey);
      rv.dereg_mr(r->mirror);
    }
    if (r->fd >= 0) close(r->fd);
    free(r);
  }
  pthread_mutex_unlock(&nic_mu);
  errno = saved;
}

/* ---- shadows on the backup NIC ---------------------------------------------------------------- */

int ah_shim_ha_nic_shadow_prepare(ha_qp_t *m, struct ibv_pd **pd_p, struct ibv_cq **scq_p,
                                  struct ibv_cq **rcq_p, int *port_p, union ibv_gid *gid_p) {
  struct ibv_context *pctx = m->qp->context;
  pthread_mutex_lock(&nic_mu);
  ha_nic_t *nic = NULL;
  ha_nic_cq_t *s = NULL, *r = NULL;
  char b[64] = "";
  if (m->nq) nic = m->nq->nic; /* a later generation: the same NIC, key spaces and records */
  else if (verbs_load(m->hc->real.resolve)) backup_name(pctx, b);
  if (!nic && b[0]) nic = nic_open(b);
  if (nic) s = nic_cq(nic, m->send_cq);
  if (nic && m->recv_cq) r = m->recv_cq == m->send_cq ? s : nic_cq(nic, m->recv_cq);
  int gid_index = m->rtr.ah_attr.grh.sgid_index, port = m->port;
  union ibv_gid gid;
  int ok = nic && s && (r || !m->recv_cq);
  /* the primary's port number when the backup NIC has it (with a GID there), else port 1 */
  /* (its GID, or on InfiniBand its LID) */
  if (ok && ah_shim_ha_port_addr(m, nic->ctx, port, gid_index, &gid) != 0) {
    port = 1;
    if (ah_shim_ha_port_addr(m, nic->ctx, 1, gid_index, &gid) != 0) {
      AH_LOG_CAPPED(1, AH_LOG_WARN,
                    "HA: the backup NIC %s has no %s; queue pairs it would back run without "
                    "shadows",
                    nic->name, ha_by_lid(m) ? "LID on its port 1" : "GID at NCCL's index");
      ok = 0;
    }
  }
  if (ok && m->nq) {
    pthread_mutex_unlock(&nic_mu);
    *pd_p = nic->pd;
    *scq_p = s->bk;
    *rcq_p = r ? r->bk : NULL;
    *port_p = port;
    *gid_p = gid;
    return 0;
  }
  struct ha_nic_qp *nq = ok ? calloc(1, sizeof *nq) : NULL;
  if (nq) {
    nq->nic = nic;
    nq->local = space_of(m->pd->context);
  }
  pthread_mutex_unlock(&nic_mu);
  if (!nq) return -1;
  /* the key space the peer translates this side's remote keys in; before the shadow's own record,
   * so that a peer that found the shadow finds this too */
  uint8_t key[HA_KEY];
  uint32_t val[5] = {NICX_MAGIC};
  memcpy(val + 1, nq->local.b, 16);
  ah_shim_ha_dir_key(key, m->sgid.raw, m->qpn, m->rtr.dest_qp_num, KIND_NICX);
  if (ah_shim_ha_dir_put(key, val, sizeof val) != 0) {
    free(nq);
    return -1;
  }
  m->nq = nq;
  *pd_p = nic->pd;
  *scq_p = s->bk;
  *rcq_p = r ? r->bk : NULL;
  *port_p = port;
  *gid_p = gid;
  return 0;
}

int ah_shim_ha_nic_shadow_add(ha_qp_t *m, uint32_t qpn) {
  ha_nic_t *nic = m->nq->nic;
  int rc = -1;
  pthread_mutex_lock(&nic_mu);
  if (nic->nsh < NIC_SHADOWS) {
    nic->sh_qpn[nic->nsh] = qpn;
    nic->sh_m[nic->nsh++] = m;
    rc = 0;
  }
  pthread_mutex_unlock(&nic_mu);
  return rc;
}

void ah_shim_ha_nic_shadow_forget(ha_qp_t *m) {
  if (!m->nq) return;
  ha_nic_t *nic = m->nq->nic;
  pthread_mutex_lock(&nic_mu);
  for (int i = 0; i < nic->nsh;) /* every generation of m's */
    if (nic->sh_m[i] == m) {
      nic->sh_qpn[i] = nic->sh_qpn[nic->nsh - 1];
      nic->sh_m[i] = nic->sh_m[--nic->nsh];
    } else {
      i++;
    }
  if (m->nq->have_peer) ah_ha_keys_del_space(rkeys, &m->nq->peer);
  m->nq->have_peer = 0;
  pthread_mutex_unlock(&nic_mu);
}

/* ---- key translation -------------------------------------------------------------------------- */

/* The mirror's key for a local key of m's primary's memory. Returns 0, or -1 (logged) when that
 * memory has no mirror on the backup NIC. */
static int xlate_lkey(ha_qp_t *m, uint32_t lkey, uint32_t *out_p) {
  pthread_mutex_lock(&nic_mu);
  int rc = ah_ha_keys_get(lkeys, &m->nq->local, lkey, out_p);
  pthread_mutex_unlock(&nic_mu);
  if (rc != 0)
    AH_LOG_DEV_CAPPED(3, m->gpu, AH_LOG_WARN,
                      "HA: QP %u: local key 0x%x has no mirror on the backup NIC %s", m->qpn, lkey,
                      m->nq->nic->name);
  return rc;
}

/* The peer's backup-NIC key for rkey: the cache, else the peer's published mapping (waiting up to
 * DIR_WAIT_S for it: the peer publishes a mapping before its registration returns, or before its
 * shadow's record). Returns 0 or -1 (logged). */
static int xlate_rkey(ha_qp_t *m, uint32_t rkey, uint32_t *out_p) {
  struct ha_nic_qp *nq = m->nq;
  uint8_t key[HA_KEY];
  if (!nq->have_peer) {
    uint32_t val[5];
    ah_shim_ha_dir_key(key, m->rtr.ah_attr.grh.dgid.raw, m->rtr.dest_qp_num, m->qpn, KIND_NICX);
    if (ah_shim_ha_dir_get(key, val, sizeof val, DIR_WAIT_S) != (int)sizeof val ||
        val[0] != NICX_MAGIC) {
      AH_LOG_DEV_CAPPED(3, m->gpu, AH_LOG_WARN,
                        "HA: QP %u: the peer published no key space for its nic shadow", m->qpn);
      return -1;
    }
    pthread_mutex_lock(&nic_mu);
    memcpy(nq->peer.b, val + 1, 16);
    nq->have_peer = 1;
    pthread_mutex_unlock(&nic_mu);
  }
  pthread_mutex_lock(&nic_mu);
  int rc = ah_ha_keys_get(rkeys, &nq->peer, rkey, out_p);
  pthread_mutex_unlock(&nic_mu);
  if (rc == 0) return 0;
  uint32_t val[2];
  ah_shim_ha_dir_key(key, nq->peer.b, rkey, 0, KIND_RKEY);
  if (ah_shim_ha_dir_get(key, val, sizeof val, DIR_WAIT_S) != (int)sizeof val ||
      val[0] != RKEY_MAGIC) {
    AH_LOG_DEV_CAPPED(3, m->gpu, AH_LOG_WARN,
                      "HA: QP %u: the peer published no mirror of its remote key 0x%x", m->qpn,
                      rkey);
    return -1;
  }
  pthread_mutex_lock(&nic_mu);
  ah_ha_keys_put(rkeys, &nq->peer, rkey, val[1]);
  pthread_mutex_unlock(&nic_mu);
  *out_p = val[1];
  return 0;
}

int ah_shim_ha_sh_post_send(ha_qp_t *m, struct ibv_qp *qp, struct ibv_send_wr *wr,
                            struct ibv_send_wr **bad) {
  if (!ha_on_nic(m, qp)) return m->hc->post_send(qp, wr, bad);
  for (struct ibv_send_wr *w = wr; w; w = w->next) {
    struct ibv_send_wr c = *w, *b;
    struct ibv_sge sg[16];
    c.next = NULL;
    int rc = w->num_sge > 16 || w->num_sge < 0 ? EINVAL : 0;
    uint64_t total = 0;
    for (int i = 0; i < w->num_sge && !rc; i++) {
      sg[i] = w->sg_list[i];
      total += sg[i].length;
      if (!(w->send_flags & IBV_SEND_INLINE) && sg[i].length &&
          xlate_lkey(m, sg[i].lkey, &sg[i].lkey))
        rc = EINVAL;
    }
    c.sg_list = w->num_sge > 0 ? sg : NULL;
    /* a 0-byte operation checks no remote key (a heartbeat, NCCL's empty WRITE_WITH_IMM) */
    int remote = w->opcode == IBV_WR_RDMA_WRITE || w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
                 w->opcode == IBV_WR_RDMA_READ;
    if (!rc && remote && total && xlate_rkey(m, w->wr.rdma.rkey, &c.wr.rdma.rkey)) rc = EINVAL;
    if (!rc) rc = qp->context->ops.post_send(qp, &c, &b);
    if (rc) {
      *bad = w;
      return rc;
    }
  }
  return 0;
}

int ah_shim_ha_sh_post_recv(ha_qp_t *m, struct ibv_qp *qp, struct ibv_recv_wr *wr,
                            struct ibv_recv_wr **bad) {
  if (!ha_on_nic(m, qp)) return m->hc->post_recv(qp, wr, bad);
  for (struct ibv_recv_wr *w = wr; w; w = w->next) {
    struct ibv_recv_wr c = *w, *b;
    struct ibv_sge sg[16];
    c.next = NULL;
    int rc = w->num_sge > 16 || w->num_sge < 0 ? EINVAL : 0;
    for (int i = 0; i < w->num_sge && !rc; i++) {
      sg[i] = w->sg_list[i];
      if (sg[i].length && xlate_lkey(m, sg[i].lkey, &sg[i].lkey)) rc = EINVAL;
    }
    c.sg_list = w->num_sge > 0 ? sg : NULL;
    if (!rc) rc = qp->context->ops.post_recv(qp, &c, &b);
    if (rc) {
      *bad = w;
      return rc;
    }
  }
  return 0;
}

/* ---- the backup CQs, for the completion side (rdma_ha_nic_cq.c) ------------------------------- */

void ah_shim_ha_nic_cq_each(struct ibv_cq *nccl, void (*fn)(ha_nic_cq_t *, void *), void *arg) {
  int nn = atomic_load_explicit(&nnics, memory_order_acquire);
  for (int i = 0; i < nn; i++) {
    ha_nic_t *nic = nics[i];
    int nc = atomic_load_explicit(&nic->ncq, memory_order_acquire);
    for (int k = 0; k < nc; k++)
      if (!nccl || nic->cq[k].nccl == nccl) fn(&nic->cq[k], arg);
  }
}

ha_qp_t *ah_shim_ha_nic_shadow_of(struct ibv_cq *bk, uint32_t qpn) {
  ha_qp_t *m = NULL;
  pthread_mutex_lock(&nic_mu);
  int nn = atomic_load(&nnics);
  for (int k = 0; k < nn && !m; k++) {
    ha_nic_t *nic = nics[k];
    if (nic->ctx != bk->context) continue;
    for (int i = 0; i < nic->nsh && !m; i++)
      if (nic->sh_qpn[i] == qpn) m = nic->sh_m[i];
  }
  pthread_mutex_unlock(&nic_mu);
  return m;
}

const char *ah_shim_ha_nic_name(const ha_qp_t *m) { return m->nq ? m->nq->nic->name : NULL; }

int ah_shim_ha_nic_event(int i, struct ibv_async_event *ev, const char **name_p) {
  if (i < 0 || i >= atomic_load_explicit(&nnics, memory_order_acquire)) return -1;
  ha_nic_t *nic = nics[i];
  *name_p = nic->name;
  return nic->events && rv.get_async_event(nic->ctx, ev) == 0;
}

void ah_shim_ha_nic_event_ack(struct ibv_async_event *ev) { rv.ack_async_event(ev); }
