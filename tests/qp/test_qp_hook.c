/* test_qp_hook.c: the QP hook as libnccl meets it. A fake libibverbs (qpfake.c, verbs versioned
 * IBVERBS_1.1) is opened with dlopen and resolved with dlvsym(handle, name, "IBVERBS_1.1") — or,
 * with QPTEST_LINK=direct, linked — and a RoCE RC QP, a second QP to the same peer, an InfiniBand
 * QP and NCCL's loopback flush QP are driven through INIT, RTR and RTS. What arrives in the fake is
 * compared byte for byte with what was passed. QPTEST_MODE says what must have happened:
 *   plain    nothing changed (no shim, or AUTOHA_QP=off)
 *   timing   AUTOHA_QP=off with per-connection timing on: the lookups return the shim's wrappers,
 *            and nothing changed
 *   hook     RTR of RoCE QPs carries the spread policy's ports (recomputed here) and DSCP 26 with
 *            the ECN bits kept; every other byte unchanged
 *   catalog  RTR labels map to the catalog's ports, in order
 *   plan     RTR labels map to the planner's ports for this host's flows, and the class is the
 *            topology's class for this host's job (topology in data/)
 *   bad*     malformed input: the error QPTEST_WANT_ERR names the bad line, nothing changed
 * (The test runs in one process per mode; CTest sets the environment.) */
#include <check.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ah_check.h"
#include "ah_path.h"
#include "qpfake.h"

#ifdef QPTEST_DIRECT
int qpnext_lookup(void);
int qpnext_two(void);
#endif

typedef struct ibv_qp *(*create_fn)(struct ibv_pd *, struct ibv_qp_init_attr *);
typedef int (*modify_fn)(struct ibv_qp *, struct ibv_qp_attr *, int);
typedef int (*ncalls_fn)(void);
typedef const qpfake_call_t *(*call_fn)(int);

static create_fn v_create;
static modify_fn v_modify;
static ncalls_fn v_ncalls;
static call_fn v_call;
static void *v_query_gid;

static struct ibv_device dev;
static struct ibv_context ctx;
static struct ibv_pd pd;

/* Whether two paths name the same file, whatever the directories are called (a checkout may live
 * in a folder named autoha, so a name in a path proves nothing). */
static int same_file(const char *a, const char *b) {
  char ra[4096], rb[4096];
  return a && b && realpath(a, ra) && realpath(b, rb) && strcmp(ra, rb) == 0;
}

#ifdef QPTEST_DIRECT
/* Whether LD_PRELOAD (separated by colons or spaces, as ld.so reads it) names the built shim. */
static int shim_preloaded(void) {
  const char *pre = getenv("LD_PRELOAD");
  char buf[8192];
  if (!pre || strlen(pre) >= sizeof buf) return 0;
  strcpy(buf, pre);
  for (char *save = NULL, *t = strtok_r(buf, ": ", &save); t; t = strtok_r(NULL, ": ", &save))
    if (same_file(t, AUTOHA_PATH)) return 1;
  return 0;
}
#endif

static const char *mode(void) {
  const char *m = getenv("QPTEST_MODE");
  return m ? m : "plain";
}

static void resolve(void) {
#ifdef QPTEST_DIRECT
  v_create = ibv_create_qp;
  v_modify = ibv_modify_qp;
  v_ncalls = qpfake_ncalls;
  v_call = qpfake_call;
  v_query_gid = (void *)ibv_query_gid;
#else
  /* exactly as libnccl: dlopen, then dlvsym with the IBVERBS_1.1 node */
  void *h = dlopen(QPFAKE_PATH, RTLD_NOW);
  ck_assert_msg(h != NULL, "dlopen %s: %s", QPFAKE_PATH, dlerror());
  v_create = (create_fn)dlvsym(h, "ibv_create_qp", "IBVERBS_1.1");
  v_modify = (modify_fn)dlvsym(h, "ibv_modify_qp", "IBVERBS_1.1");
  v_query_gid = dlvsym(h, "ibv_query_gid", "IBVERBS_1.1");
  v_ncalls = (ncalls_fn)dlvsym(h, "qpfake_ncalls", "QPFAKE_1.0");
  v_call = (call_fn)dlvsym(h, "qpfake_call", "QPFAKE_1.0");
#endif
  ck_assert(v_create && v_modify && v_ncalls && v_call && v_query_gid);
  snprintf(dev.name, sizeof dev.name, "mlx5_0");
  ctx.device = &dev;
  pd.context = &ctx;
}

static struct ibv_qp *make_qp(enum ibv_qp_type type) {
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof init);
  init.qp_type = type;
  struct ibv_qp *qp = v_create(&pd, &init);
  ck_assert_ptr_nonnull(qp);
  return qp;
}

/* Drives the modify and returns what the fake received (byte-compared by callers). */
static const qpfake_call_t *modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  int before = v_ncalls();
  ck_assert_int_eq(v_modify(qp, a, mask), 0);
  ck_assert_int_eq(v_ncalls(), before + 1);
  const qpfake_call_t *c = v_call(before);
  ck_assert_ptr_eq(c->qp, qp);
  ck_assert_int_eq(c->mask, mask);
  return c;
}

static void same(const qpfake_call_t *c, const struct ibv_qp_attr *a) {
  ck_assert_msg(memcmp(&c->attr, a, sizeof *a) == 0, "attributes changed where they must not");
}

static void init_attr(struct ibv_qp_attr *a, int *mask) {
  memset(a, 0, sizeof *a);
  a->qp_state = IBV_QPS_INIT;
  a->pkey_index = 0;
  a->port_num = 1;
  a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  *mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
}

/* RTR as ncclIbRtrQp builds it: RoCE when is_global, flow label 0, NCCL's traffic class. */
static void rtr_attr(struct ibv_qp_attr *a, int *mask, uint32_t dqpn, int roce, const char *dst) {
  memset(a, 0, sizeof *a);
  a->qp_state = IBV_QPS_RTR;
  a->path_mtu = IBV_MTU_4096;
  a->dest_qp_num = dqpn;
  a->rq_psn = 0;
  a->max_dest_rd_atomic = 1;
  a->min_rnr_timer = 12;
  if (roce) {
    a->ah_attr.is_global = 1;
    ck_assert_int_eq(ah_path_gid_parse(dst, a->ah_attr.grh.dgid.raw), 0);
    a->ah_attr.grh.flow_label = 0;
    a->ah_attr.grh.sgid_index = 3;
    a->ah_attr.grh.hop_limit = 255;
    a->ah_attr.grh.traffic_class = 0x02; /* ECN bits set: they must survive */
  } else {
    a->ah_attr.dlid = 7;
  }
  a->ah_attr.sl = 0;
  a->ah_attr.port_num = 1;
  *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
}

static void rts_attr(struct ibv_qp_attr *a, int *mask) {
  memset(a, 0, sizeof *a);
  a->qp_state = IBV_QPS_RTS;
  a->timeout = 20;
  a->retry_cnt = 7;
  a->rnr_retry = 7;
  a->sq_psn = 0;
  a->max_rd_atomic = 1;
  *mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
          IBV_QP_MAX_QP_RD_ATOMIC;
}

/* Takes a QP through INIT, RTR, RTS; checks INIT and RTS unchanged; returns the RTR label (after
 * checking every other RTR byte). `want_tc` -1: traffic class must be unchanged. */
static uint32_t drive(struct ibv_qp *qp, uint32_t dqpn, int roce, const char *dst, int want_label,
                      int want_tc) {
  struct ibv_qp_attr a;
  int mask;
  init_attr(&a, &mask);
  same(modify(qp, &a, mask), &a);
  rtr_attr(&a, &mask, dqpn, roce, dst);
  const qpfake_call_t *c = modify(qp, &a, mask);
  struct ibv_qp_attr want;
  memcpy(&want, &a, sizeof want);
  uint32_t label = c->attr.ah_attr.grh.flow_label;
  if (want_label) {
    ck_assert_msg(label != 0, "RTR flow label not set");
    ck_assert_uint_ge(ah_path_label_to_sport(label), AH_PATH_SPORT_MIN);
    want.ah_attr.grh.flow_label = label;
  }
  if (want_tc >= 0) want.ah_attr.grh.traffic_class = (uint8_t)want_tc;
  same(c, &want);
  /* NCCL retries a failed modify with the same arguments: the hook must answer the same */
  if (roce && dqpn != qp->qp_num) {
    const qpfake_call_t *again = modify(qp, &a, mask);
    ck_assert_uint_eq(again->attr.ah_attr.grh.flow_label, label);
  }
  rts_attr(&a, &mask);
  same(modify(qp, &a, mask), &a);
  return label;
}

static char stderr_path[64];

static void capture_stderr(void) {
  snprintf(stderr_path, sizeof stderr_path, "/tmp/qptest-XXXXXX");
  int fd = mkstemp(stderr_path);
  ck_assert_int_ge(fd, 0);
  dup2(fd, 2);
  close(fd);
}

static char *captured(void) {
  static char buf[8192];
  FILE *f = fopen(stderr_path, "r");
  size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
  buf[n] = '\0';
  if (f) fclose(f);
  unlink(stderr_path);
  printf("stderr of the job:\n%s", buf);
  return buf;
}

/* The ports the policy must have chosen for the first two QPs to 10.0.0.9 (mode hook: spread;
 * mode plan: the planner's), computed here from the same pure functions and inputs. */
static void expected_ports(int plan, uint16_t want[2]) {
  ah_path_qp_t q = {.dev = "mlx5_0", .port = 1, .has_sgid = 1};
  ck_assert_int_eq(ah_path_gid_parse("10.0.0.9", q.dgid), 0);
  ck_assert_int_eq(ah_path_gid_parse("10.0.0.1", q.sgid), 0); /* what qpfake's ibv_query_gid says */
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  ah_path_settings_t s = {.on = 1,
                          .sport = plan ? AH_PATH_SPORT_PLAN : AH_PATH_SPORT_SPREAD,
                          .topo = getenv("AUTOHA_QP_TOPO"),
                          .host = host,
                          .tc = -1};
  ah_path_policy_t *p = ah_path_policy_create(&s);
  ck_assert_int_eq(ah_path_policy_sport_mode(p), plan ? AH_PATH_SPORT_PLAN : AH_PATH_SPORT_SPREAD);
  for (int k = 0; k < 2; k++) want[k] = ah_path_policy_sport(p, &q);
  ah_path_policy_free(p);
}

START_TEST(qp_hook) {
  capture_stderr();
  resolve();
  const char *m = mode();
  int hook = strcmp(m, "hook") == 0, catalog = strcmp(m, "catalog") == 0,
      plan = strcmp(m, "plan") == 0;
  int bad = strncmp(m, "bad", 3) == 0, ports = hook || catalog || plan;
  int timing =
      strcmp(m, "timing") == 0; /* per-connection timing alone: wrappers, nothing changed */
  /* hook: AUTOHA_QP_TC=dscp=26; plan: the topology's first class (dscp=34) for its only job */
  int tc = hook ? ah_path_tc_with_dscp(0x02, 26) : plan ? ah_path_tc_with_dscp(0x02, 34) : -1;
  ck_assert_int_eq(tc == -1 || tc == ((26 << 2) | 2) || tc == ((34 << 2) | 2), 1);

  /* the lookups: hooked names come from the shim when it is active, every other name as before */
  Dl_info di;
  ck_assert(dladdr(v_query_gid, &di) && di.dli_sname && strcmp(di.dli_sname, "ibv_query_gid") == 0);
  ck_assert_msg(same_file(di.dli_fname, QPFAKE_PATH), "ibv_query_gid came from %s", di.dli_fname);
  ck_assert(dladdr((void *)v_modify, &di));
  int from_shim = same_file(di.dli_fname, AUTOHA_PATH);
  ck_assert_msg(from_shim || same_file(di.dli_fname, QPFAKE_PATH), "ibv_modify_qp came from %s",
                di.dli_fname);
#ifdef QPTEST_DIRECT
  /* linked callers bind to the shim's ibv_modify_qp whenever it is preloaded (it passes through
   * when inactive) */
  ck_assert_int_eq(from_shim, shim_preloaded());
  (void)timing;
#else
  ck_assert_int_eq(from_shim, ports || timing); /* dlvsym hands back the wrapper only when active */
#endif

  struct ibv_qp *a = make_qp(IBV_QPT_RC), *b = make_qp(IBV_QPT_RC);
  struct ibv_qp *ib = make_qp(IBV_QPT_RC), *flush = make_qp(IBV_QPT_RC);
  uint32_t la = drive(a, 0x777, 1, "10.0.0.9", ports, tc);
  uint32_t lb = drive(b, 0x778, 1, "10.0.0.9", ports, tc);
  drive(ib, 0x779, 0, NULL, 0, -1);                                /* InfiniBand: untouched */
  uint32_t lf = drive(flush, flush->qp_num, 1, "10.0.0.1", 0, -1); /* flush QP: untouched */
  ck_assert_uint_eq(lf, 0);
  if (hook || plan) {
    uint16_t want[2];
    expected_ports(plan, want);
    ck_assert_uint_eq(ah_path_label_to_sport(la), want[0]);
    ck_assert_uint_eq(ah_path_label_to_sport(lb), want[1]);
    ck_assert_uint_ne(want[0], want[1]); /* two QPs of one pair: two paths */
  } else if (catalog) {
    ck_assert_uint_eq(ah_path_label_to_sport(la), 50000);
    ck_assert_uint_eq(ah_path_label_to_sport(lb), 50001);
  } else {
    ck_assert_uint_eq(la, 0);
    ck_assert_uint_eq(lb, 0);
  }
#ifdef QPTEST_DIRECT
  /* RTLD_NEXT through the shim's dlsym is still relative to the caller (libqpnext1) */
  ck_assert_int_eq(qpnext_two(), 2);
  ck_assert_int_eq(qpnext_lookup(), 2);
#endif
  const char *err = captured();
  if (bad) {
    /* the policy is built at the first verbs lookup, inside this test: its error is captured */
    const char *want = getenv("QPTEST_WANT_ERR");
    ck_assert_msg(want && strstr(err, want) != NULL, "expected the error '%s'", want ? want : "?");
  } else {
    ck_assert_msg(strstr(err, "AUTOHA_QP") == NULL && strstr(err, "catalog") == NULL &&
                      strstr(err, "topology") == NULL && strstr(err, "QP hook") == NULL,
                  "unexpected QP-hook error: %s", err);
  }
}
END_TEST

int main(void) {
  const TTest *const tests[] = {qp_hook};
  return ah_check_main("qp_hook", (ah_check_case_t){.name = mode(), .timeout = 30}, tests,
                       AH_CHECK_COUNT(tests));
}
