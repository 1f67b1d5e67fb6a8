/* Unit tests of the shim's tuner face and decision path, in-process: the test links the same
 * objects libautoha.so is built from and calls the exported ncclTunerPlugin_vN structs as NCCL
 * would. The environment (AUTOHA_MODE, AUTOHA_OVERRIDE, ...) is set per CTest entry, and argv[1]
 * names the scenario: fixed, malformed, observe, disabled, tune.
 *
 * Checked: an override forces its cell to 0.0 and its channels, never touches a -1 cell, leaves
 * non-matching keys alone; v1/v2 answers come back in the out-parameters; v6 gets the chunk; call
 * indices count per key; a malformed rule is dropped and the others still apply; observe and
 * AUTOHA_ENABLE=0 change nothing; in tune mode two local ranks of one communicator get identical
 * configurations call by call. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "ah_config.h"
#include "ah_tune.h"
#include "shim_control.h"
#include "shim_decide.h"
#include "shim_internal.h"

extern const ah_tuner_v2_t ncclTunerPlugin_v2;
extern const ah_tuner_v5_t ncclTunerPlugin_v5;
extern const ah_tuner_v6_t ncclTunerPlugin_v6;

static const char *scenario = "fixed";

/* A cost table with every pair allowed except the NVLS/CollNet family (-1), costs distinct. */
static void table_fill(float t[AH_NUM_ALGOS][AH_NUM_PROTOS]) {
  for (int a = 0; a < AH_NUM_ALGOS; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++) t[a][p] = 100.0f + (float)(a * 3 + p);
  for (int a = AH_ALGO_COLLNET_DIRECT; a <= AH_ALGO_NVLS_TREE; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++) t[a][p] = AH_COST_IGNORE;
}

static void *ctx_new(uint64_t id, int nranks) {
  void *ctx = NULL;
  ck_assert_int_eq(ncclTunerPlugin_v5.init(&ctx, id, (size_t)nranks, 1, NULL, NULL, NULL),
                   ncclSuccess);
  return ctx;
}

static int get(const void *plugin_v5, void *ctx, int coll, size_t nbytes,
               float t[AH_NUM_ALGOS][AH_NUM_PROTOS], int *nch) {
  const ah_tuner_v5_t *p = plugin_v5;
  *nch = 0;
  return p->getCollInfo(ctx, coll, nbytes, 1, (float **)(void *)t, AH_NUM_ALGOS, AH_NUM_PROTOS, 0,
                        nch);
}

/* Asks the v5 face about one call on a freshly filled table: the table must come back exactly as
 * NCCL filled it (no pair forced) and the channel count as want_nch (0: NCCL's own). */
static void expect_table_kept(void *ctx, int coll, size_t nbytes, int want_nch) {
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  table_fill(t);
  memcpy(ref, t, sizeof t);
  get(&ncclTunerPlugin_v5, ctx, coll, nbytes, t, &nch);
  ck_assert_int_eq(memcmp(t, ref, sizeof t), 0);
  ck_assert_int_eq(nch, want_nch);
}

static int argmin(float t[AH_NUM_ALGOS][AH_NUM_PROTOS], int *proto) {
  int ba = -1, bp = -1;
  for (int a = 0; a < AH_NUM_ALGOS; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++)
      if (t[a][p] >= 0 && (ba < 0 || t[a][p] < t[ba][bp])) ba = a, bp = p;
  *proto = bp;
  return ba;
}

/* ---- fixed: AUTOHA_OVERRIDE="allreduce@1M-64M:algo=ring,proto=simple,nchannels=16;
 *                              allgather:nchannels=8;reduce:algo=ring,chunk=512K" ---- */

START_TEST(test_override_applies) {
  void *ctx = ctx_new(0x1111, 8);
  ck_assert_ptr_nonnull(ctx);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch, proto;
  table_fill(t);
  memcpy(ref, t, sizeof t);
  ck_assert_int_eq(get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch), ncclSuccess);
  ck_assert_float_eq(t[AH_ALGO_RING][AH_PROTO_SIMPLE], 0.0f);
  ck_assert_int_eq(argmin(t, &proto), AH_ALGO_RING);
  ck_assert_int_eq(proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(nch, 16);
  for (int a = AH_ALGO_COLLNET_DIRECT; a <= AH_ALGO_NVLS_TREE; a++)
    for (int p = 0; p < AH_NUM_PROTOS; p++) ck_assert_float_eq(t[a][p], AH_COST_IGNORE);
  /* 64M is inside the range (inclusive end); 128M and 512K are not */
  table_fill(t);
  get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLREDUCE, 64 << 20, t, &nch);
  ck_assert_int_eq(nch, 16);
  expect_table_kept(ctx, AH_FUNC_ALLREDUCE, 128 << 20, 0);
  expect_table_kept(ctx, AH_FUNC_ALLREDUCE, 512 << 10, 0);
  /* AllGather: keyed by bytes per rank (8M total over 8 ranks), channels only */
  expect_table_kept(ctx, AH_FUNC_ALLGATHER, 8 << 20, 8);
  /* Broadcast: no rule */
  expect_table_kept(ctx, AH_FUNC_BROADCAST, 8 << 20, 0);
}
END_TEST

START_TEST(test_override_never_forces_ignored_cell) {
  void *ctx = ctx_new(0x2222, 8);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  table_fill(t);
  t[AH_ALGO_RING][AH_PROTO_SIMPLE] = AH_COST_IGNORE;
  memcpy(ref, t, sizeof t);
  ck_assert_int_eq(get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch), ncclSuccess);
  ck_assert_int_eq(memcmp(t, ref, sizeof t), 0); /* refused: NCCL's choice kept, channels too */
  ck_assert_int_eq(nch, 0);
}
END_TEST

/* A v3+ cost table can forbid a pair at one call and allow it at the next (NCCL marks cells per
 * size and registered buffer): each call is checked before it is counted, so a refused call is
 * NCCL's from the start and the calls around it run the override. */
START_TEST(test_refused_call_counted_as_nccl) {
  ah_comm_t *c = ctx_new(0x2323, 8);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  table_fill(t);
  get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
  ck_assert_float_eq(t[AH_ALGO_RING][AH_PROTO_SIMPLE], 0.0f);
  ah_shim_rankkey_t *ck =
      c->keys[AH_FUNC_ALLREDUCE][ah_shim_bin(AH_FUNC_ALLREDUCE, 4 << 20, c->nranks)];
  ck_assert_ptr_nonnull(ck);
  ck_assert_uint_eq(ck->applied.calls, 1);
  table_fill(t);
  t[AH_ALGO_RING][AH_PROTO_SIMPLE] = AH_COST_IGNORE;
  memcpy(ref, t, sizeof t);
  get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
  ck_assert_int_eq(memcmp(t, ref, sizeof t), 0);
  ck_assert_int_eq(nch, 0);
  ck_assert_uint_eq(ck->applied.calls, 1);
  ck_assert_uint_eq(ck->nccl_default.calls, 1);
  table_fill(t);
  get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
  ck_assert_float_eq(t[AH_ALGO_RING][AH_PROTO_SIMPLE], 0.0f);
  ck_assert_int_eq(nch, 16);
  ck_assert_uint_eq(ck->applied.calls, 2);
  ck_assert_uint_eq(ck->nccl_default.calls, 1);
}
END_TEST

START_TEST(test_call_index_counts) {
  ah_comm_t *c = ctx_new(0x3333, 4);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  for (int i = 0; i < 25; i++) {
    table_fill(t);
    get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
  }
  for (int i = 0; i < 7; i++) {
    table_fill(t);
    get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 5 << 20, t, &nch); /* same bin as 4M */
  }
  table_fill(t);
  get(&ncclTunerPlugin_v5, c, AH_FUNC_REDUCESCATTER, 4 << 20, t, &nch); /* 1M per rank */
  int bin4m = ah_size_bin(AH_FUNC_ALLREDUCE, 4 << 20, 4);
  ck_assert_ptr_nonnull(c->keys[AH_FUNC_ALLREDUCE][bin4m]);
  ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin4m]->next, 32);
  ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin4m]->applied.calls, 32);
  ck_assert_int_eq(c->keys[AH_FUNC_ALLREDUCE][bin4m]->source, AH_SOURCE_OVERRIDE);
  int bin1m = ah_size_bin(AH_FUNC_REDUCESCATTER, 4 << 20, 4);
  ck_assert_int_eq(bin1m, 20);
  ck_assert_ptr_nonnull(c->keys[AH_FUNC_REDUCESCATTER][bin1m]);
  ck_assert_uint_eq(c->keys[AH_FUNC_REDUCESCATTER][bin1m]->next, 1);
  ck_assert_uint_eq(c->keys[AH_FUNC_REDUCESCATTER][bin1m]->nccl_default.calls, 1);
}
END_TEST

/* ncclGroupSimulateEnd: a simulated bucket gets what the next real call would get, and counts
 * nothing. */
START_TEST(test_simulate_counts_nothing) {
  ah_comm_t *c = ctx_new(0x9999, 8);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch, proto;
  table_fill(t);
  get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch); /* creates the key, index 0 */
  int bin = ah_size_bin(AH_FUNC_ALLREDUCE, 4 << 20, 8);
  ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->next, 1);
  ah_shim_simulating(1);
  for (int i = 0; i < 5; i++) {
    table_fill(t);
    get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
    ck_assert_int_eq(argmin(t, &proto), AH_ALGO_RING); /* the override, as a real call would get */
    ck_assert_int_eq(nch, 16);
  }
  ah_shim_simulating(0);
  ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->next, 1);
  ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->applied.calls, 1);
}
END_TEST

/* Grouped constructors: NCCL runs the tuner's init on its own threads; the identity and rank the
 * wrappers shared are claimed there (by NCCL's commId, or by rank count when unambiguous). */
typedef struct {
  uint64_t comm_id;
  ah_comm_t *ctx;
} claim_t;

static void *claim_main(void *arg) {
  claim_t *a = arg;
  void *ctx = NULL;
  ncclTunerPlugin_v5.init(&ctx, a->comm_id, 2, 1, NULL, NULL, NULL);
  a->ctx = ctx;
  return NULL;
}

START_TEST(test_grouped_init_claims_shared) {
  uint64_t id = 0xaaaa, nccl_hash = 0xbbbb;
  ah_comm_pending_share(id, nccl_hash, 2, 0, -1);
  ah_comm_pending_share(id, nccl_hash, 2, 1, -1);
  claim_t a[2] = {{nccl_hash, NULL}, {nccl_hash, NULL}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, claim_main, &a[i]);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  ck_assert_ptr_nonnull(a[0].ctx);
  ck_assert_ptr_nonnull(a[1].ctx);
  ck_assert_uint_eq(a[0].ctx->id, nccl_hash);           /* schedules keyed by NCCL's commId */
  ck_assert_ptr_eq(a[0].ctx->rec, a[1].ctx->rec);       /* one locality record ... */
  ck_assert_uint_eq(a[0].ctx->rec->id, id);             /* ... the one the wrappers announced */
  ck_assert_int_eq(a[0].ctx->rank + a[1].ctx->rank, 1); /* ranks 0 and 1, in some order */
  /* no commId (v2-v4): by rank count, only when one identity is pending */
  ah_comm_pending_share(0xcccc, 0, 3, 2, -1);
  uint64_t got = 0;
  int rank = -1;
  ck_assert_int_eq(ah_comm_pending_claim(0, 3, -1, &got, &rank), 1);
  ck_assert_uint_eq(got, 0xcccc);
  ck_assert_int_eq(rank, 2);
  ah_comm_pending_share(0xdddd, 0, 4, 0, -1);
  ah_comm_pending_share(0xeeee, 0, 4, 0, -1);
  ck_assert_int_eq(ah_comm_pending_claim(0, 4, -1, &got, &rank), 0); /* ambiguous: not guessed */
  ah_comm_pending_unshare_mine();
  ck_assert_int_eq(ah_comm_pending_claim(0x0, 4, -1, &got, &rank), 0);
}
END_TEST

/* One thread creating a communicator per GPU (nccl-tests, JAX): NCCL runs their inits with each
 * one's device current, in an order of its own; each init takes the entry of its device. */
START_TEST(test_pending_by_device) {
  for (int g = 0; g < 4; g++) ah_comm_pending_push(0x77, 4 + g, g);
  uint64_t got = 0;
  int rank = -1;
  ck_assert_int_eq(ah_comm_pending_pop(3, &got, &rank), 1);
  ck_assert_int_eq(rank, 7);
  ck_assert_int_eq(ah_comm_pending_pop(0, &got, &rank), 1);
  ck_assert_int_eq(rank, 4);
  ck_assert_int_eq(ah_comm_pending_pop(-1, &got, &rank), 1); /* device unknown: the oldest */
  ck_assert_int_eq(rank, 5);
  ck_assert_int_eq(ah_comm_pending_pop(6, &got, &rank), 1); /* no entry of it: the oldest */
  ck_assert_int_eq(rank, 6);
  ck_assert_uint_eq(got, 0x77);
  ck_assert_int_eq(ah_comm_pending_pop(0, &got, &rank), 0);
  for (int g = 0; g < 4; g++) ah_comm_pending_share(0x88, 0x99, 8, 4 + g, g);
  ck_assert_int_eq(ah_comm_pending_claim(0x99, 8, 2, &got, &rank), 1);
  ck_assert_int_eq(rank, 6);
  ck_assert_int_eq(ah_comm_pending_claim(0, 8, 1, &got, &rank), 1); /* by rank count */
  ck_assert_int_eq(rank, 5);
  ck_assert_int_eq(ah_comm_pending_claim(0x88, 8, 2, &got, &rank), 1); /* none of it left */
  ck_assert_int_eq(rank, 4);
  ah_comm_pending_unshare_mine();
  ck_assert_int_eq(ah_comm_pending_claim(0x88, 8, 3, &got, &rank), 0);
}
END_TEST

START_TEST(test_v2_out_params) {
  void *ctx = NULL;
  ck_assert_int_eq(ncclTunerPlugin_v2.init(8, 1, NULL, &ctx), ncclSuccess);
  int algo = -1, proto = -1, nch = 0;
  ck_assert_int_eq(
      ncclTunerPlugin_v2.getCollInfo(ctx, AH_FUNC_ALLREDUCE, 4 << 20, 0, 0, 1, &algo, &proto, &nch),
      ncclSuccess);
  ck_assert_int_eq(algo, AH_ALGO_RING);
  ck_assert_int_eq(proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(nch, 16);
  algo = proto = -1;
  nch = 0;
  ncclTunerPlugin_v2.getCollInfo(ctx, AH_FUNC_ALLREDUCE, 256, 0, 0, 1, &algo, &proto, &nch);
  ck_assert_int_eq(algo, -1);
  ck_assert_int_eq(proto, -1);
  ck_assert_int_eq(nch, 0);
  ck_assert_int_eq(ncclTunerPlugin_v2.destroy(ctx), ncclSuccess);
}
END_TEST

START_TEST(test_v6_chunk) {
  void *ctx = NULL;
  ck_assert_int_eq(ncclTunerPlugin_v6.init(&ctx, 0x4444, 8, 1, NULL, NULL, NULL), ncclSuccess);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
  table_fill(t);
  int nch = 0;
  ncclTunerPlugin_v6.getCollInfo(ctx, AH_FUNC_REDUCE, 2 << 20, 1, (float **)(void *)t, AH_NUM_ALGOS,
                                 AH_NUM_PROTOS, 0, &nch);
  int proto;
  ck_assert_int_eq(argmin(t, &proto), AH_ALGO_RING); /* algo only: the cheapest ring protocol */
  ck_assert_int_eq(proto, AH_PROTO_LL);
  size_t chunk = 131072;
  ck_assert_int_eq(ncclTunerPlugin_v6.getChunkSize(ctx, AH_FUNC_REDUCE, 2 << 20, AH_ALGO_RING,
                                                   AH_PROTO_LL, 8, &chunk),
                   ncclSuccess);
  ck_assert_uint_eq(chunk, 512 << 10);
  /* a call the rule does not cover keeps NCCL's chunk */
  table_fill(t);
  ncclTunerPlugin_v6.getCollInfo(ctx, AH_FUNC_BROADCAST, 2 << 20, 1, (float **)(void *)t,
                                 AH_NUM_ALGOS, AH_NUM_PROTOS, 0, &nch);
  chunk = 131072;
  ncclTunerPlugin_v6.getChunkSize(ctx, AH_FUNC_BROADCAST, 2 << 20, AH_ALGO_RING, AH_PROTO_SIMPLE, 8,
                                  &chunk);
  ck_assert_uint_eq(chunk, 131072);
  ck_assert_int_eq(ncclTunerPlugin_v6.finalize(ctx), ncclSuccess);
}
END_TEST

/* A settled key's calls past its first 16 take the short path (shim_decide_hot.h): it must force,
 * count and refuse exactly as the full path does. Checked over 200 calls of one key: the same cell
 * and channels every call; a call whose table forbids the cell is refused and counted as NCCL's;
 * every call counted once; the bytes range follows calls made on the short path; the key was made
 * eligible for it. A key with a chunk (v6) keeps the full path and its chunk at every call. */
START_TEST(test_settled_calls_short_path) {
  ah_comm_t *c = ctx_new(0x6767, 8);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch, proto;
  for (int i = 0; i < 200; i++) {
    size_t bytes = i == 90    ? (size_t)4 << 20
                   : i == 150 ? (size_t)7 << 20
                              : (size_t)5 << 20; /* one bin */
    int forbid = i == 40 || i == 100;
    table_fill(t);
    if (forbid) t[AH_ALGO_RING][AH_PROTO_SIMPLE] = AH_COST_IGNORE;
    memcpy(ref, t, sizeof t);
    ck_assert_int_eq(get(&ncclTunerPlugin_v5, c, AH_FUNC_ALLREDUCE, bytes, t, &nch), ncclSuccess);
    if (forbid) {
      ck_assert_int_eq(memcmp(t, ref, sizeof t), 0);
      ck_assert_int_eq(nch, 0);
    } else {
      ck_assert_float_eq(t[AH_ALGO_RING][AH_PROTO_SIMPLE], 0.0f);
      ck_assert_int_eq(argmin(t, &proto), AH_ALGO_RING);
      ck_assert_int_eq(proto, AH_PROTO_SIMPLE);
      ck_assert_int_eq(nch, 16);
    }
  }
  ah_shim_rankkey_t *ck =
      c->keys[AH_FUNC_ALLREDUCE][ah_shim_bin(AH_FUNC_ALLREDUCE, 5 << 20, c->nranks)];
  ck_assert_ptr_nonnull(ck);
  ck_assert_uint_eq(ck->next, 200);
  ck_assert_uint_eq(ck->applied.calls, 198);
  ck_assert_uint_eq(ck->nccl_default.calls, 2);
  ck_assert_uint_eq(ck->bytes_min, (uint64_t)4 << 20);
  ck_assert_uint_eq(ck->bytes_max, (uint64_t)7 << 20);
  ck_assert_uint_ne(ck->hot_published, UINT64_MAX);
  void *ctx6 = NULL;
  ck_assert_int_eq(ncclTunerPlugin_v6.init(&ctx6, 0x6868, 8, 1, NULL, NULL, NULL), ncclSuccess);
  for (int i = 0; i < 100; i++) {
    table_fill(t);
    ncclTunerPlugin_v6.getCollInfo(ctx6, AH_FUNC_REDUCE, 2 << 20, 1, (float **)(void *)t,
                                   AH_NUM_ALGOS, AH_NUM_PROTOS, 0, &nch);
    size_t chunk = 131072;
    ncclTunerPlugin_v6.getChunkSize(ctx6, AH_FUNC_REDUCE, 2 << 20, AH_ALGO_RING, AH_PROTO_LL, 8,
                                    &chunk);
    ck_assert_uint_eq(chunk, 512 << 10);
  }
  ck_assert_int_eq(ncclTunerPlugin_v6.finalize(ctx6), ncclSuccess);
}
END_TEST

/* The short path takes the table's width (protocols per algorithm) to be the one its key's last full
 * decision saw — NCCL passes compile-time constants — and the full decision checks it. A table one
 * protocol wider at a sampled call (the full path) turns the short path off for the key: from then
 * on every call, whatever its width, forces Ring/Simple's own cell in its own table's layout (the
 * width going back at call 200, not a sampled call, would otherwise meet a cell set for the wide one). */
static void short_path_width_call(ah_comm_t *c, int width) {
  const ah_tuner_v5_t *p = (const ah_tuner_v5_t *)(const void *)&ncclTunerPlugin_v5;
  float w[AH_NUM_ALGOS * (AH_NUM_PROTOS + 1)];
  for (int a = 0; a < AH_NUM_ALGOS; a++)
    for (int q = 0; q < width; q++)
      w[a * width + q] =
          a < AH_ALGO_COLLNET_DIRECT ? 100.0f + (float)(a * width + q) : AH_COST_IGNORE;
  int nch = 0;
  ck_assert_int_eq(p->getCollInfo(c, AH_FUNC_ALLREDUCE, 5 << 20, 1, (float **)(void *)w,
                                  AH_NUM_ALGOS, width, 0, &nch),
                   ncclSuccess);
  for (int i = 0; i < AH_NUM_ALGOS * width; i++)
    if (i == AH_ALGO_RING * width + AH_PROTO_SIMPLE) ck_assert_float_eq(w[i], 0.0f);
    else ck_assert_float_ne(w[i], 0.0f);
  ck_assert_int_eq(nch, 16);
}

START_TEST(test_short_path_table_width) {
  ah_comm_t *c = ctx_new(0x6969, 8);
  for (int i = 0; i < 128; i++)
    short_path_width_call(c, AH_NUM_PROTOS); /* on the short path by call 16 */
  ah_shim_rankkey_t *ck =
      c->keys[AH_FUNC_ALLREDUCE][ah_shim_bin(AH_FUNC_ALLREDUCE, 5 << 20, c->nranks)];
  ck_assert_ptr_nonnull(ck);
  ck_assert_int_eq(ck->hot_num_proto, AH_NUM_PROTOS);
  for (int i = 128; i < 200; i++) short_path_width_call(c, AH_NUM_PROTOS + 1); /* 128 is sampled */
  ck_assert_int_eq(ck->hot_num_proto, -1);
  for (int i = 200; i < 300; i++) short_path_width_call(c, AH_NUM_PROTOS);
  ck_assert_uint_eq(ck->next, 300);
}
END_TEST

START_TEST(test_bin_matches_ah_size_bin) {
  static const int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER,
                              AH_FUNC_BROADCAST};
  static const int ranks[] = {1, 2, 3, 8, 16};
  for (size_t ci = 0; ci < 4; ci++)
    for (size_t ri = 0; ri < 5; ri++)
      for (size_t b = 0; b < (1ull << 40); b = b * 3 + 1) {
        ck_assert_int_eq(ah_shim_bin(colls[ci], b, ranks[ri]),
                         ah_size_bin(colls[ci], b, ranks[ri]));
        ck_assert_int_eq(ah_shim_bin(colls[ci], b + 1, ranks[ri]),
                         ah_size_bin(colls[ci], b + 1, ranks[ri]));
      }
}
END_TEST

/* ---- malformed: AUTOHA_OVERRIDE="allreduce:algo=rong;allgather:nchannels=8" ---- */

START_TEST(test_malformed_rest_applies) {
  void *ctx = ctx_new(0x5555, 8);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  table_fill(t);
  memcpy(ref, t, sizeof t);
  get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch);
  ck_assert_int_eq(memcmp(t, ref, sizeof t), 0);
  ck_assert_int_eq(nch, 0);
  get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLGATHER, 8 << 20, t, &nch);
  ck_assert_int_eq(nch, 8);
}
END_TEST

/* ---- observe and disabled: the fixed override is set but must change nothing ---- */

START_TEST(test_nothing_changes) {
  void *ctx = NULL;
  ck_assert_int_eq(ncclTunerPlugin_v5.init(&ctx, 0x6666, 8, 1, NULL, NULL, NULL), ncclSuccess);
  if (strcmp(scenario, "disabled") == 0) ck_assert_ptr_null(ctx);
  else ck_assert_ptr_nonnull(ctx);
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS], ref[AH_NUM_ALGOS][AH_NUM_PROTOS];
  int nch;
  for (int i = 0; i < 10; i++) {
    table_fill(t);
    memcpy(ref, t, sizeof t);
    ck_assert_int_eq(get(&ncclTunerPlugin_v5, ctx, AH_FUNC_ALLREDUCE, 4 << 20, t, &nch),
                     ncclSuccess);
    ck_assert_int_eq(memcmp(t, ref, sizeof t), 0);
    ck_assert_int_eq(nch, 0);
  }
  if (ctx) {
    ah_comm_t *c = ctx;
    int bin = ah_size_bin(AH_FUNC_ALLREDUCE, 4 << 20, 8);
    ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->next, 10); /* observed: still counted */
    ck_assert_uint_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->nccl_default.calls, 10);
    ck_assert_int_eq(c->keys[AH_FUNC_ALLREDUCE][bin]->nccl_cfg.algo,
                     0); /* tree/ll: cheapest cell */
  }
}
END_TEST

/* ---- tune: two local ranks of one communicator ---- */

#define TUNE_CALLS 600
typedef struct {
  int rank;
  uint64_t id;
  int algo[TUNE_CALLS], proto[TUNE_CALLS], nch[TUNE_CALLS];
} rank_run_t;

static void *rank_main(void *arg) {
  rank_run_t *r = arg;
  ah_comm_pending_push(r->id, r->rank, -1);
  void *ctx = NULL;
  ncclTunerPlugin_v5.init(&ctx, r->id, 2, 1, NULL, NULL, NULL);
  for (int i = 0; i < TUNE_CALLS; i++) {
    float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
    table_fill(t);
    int nch = 0;
    ncclTunerPlugin_v5.getCollInfo(ctx, AH_FUNC_ALLREDUCE, 1 << 20, 1, (float **)(void *)t,
                                   AH_NUM_ALGOS, AH_NUM_PROTOS, 0, &nch);
    r->algo[i] = argmin(t, &r->proto[i]);
    r->nch[i] = nch;
  }
  return NULL;
}

/* The two ranks meet after each call, as a collective makes them: a rank's time of a call exists
 * only once every rank has joined it, so no rank reports times far ahead of the other's. */
static pthread_barrier_t call_barrier;

/* Runs fn on two threads, as ranks 0 and 1 (r0, r1, their rank and id set) of a communicator `id`
 * whose two ranks are both in this process, under NCCL 2.28 (channels are a dimension from 2.22). */
static void run_two_ranks(uint64_t id, void *(*fn)(void *), void *r0, void *r1) {
  ah_shim.nccl_version = 22809;
  ah_commrec_announce(id, 2);
  ah_commrec_announce(id, 2);
  pthread_barrier_init(&call_barrier, NULL, 2);
  pthread_t th[2];
  pthread_create(&th[0], NULL, fn, r0);
  pthread_create(&th[1], NULL, fn, r1);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&call_barrier);
}

START_TEST(test_tune_local_ranks_agree) {
  uint64_t id = 0x7777;
  static rank_run_t r[2];
  for (int i = 0; i < 2; i++) {
    r[i].rank = i;
    r[i].id = id;
  }
  run_two_ranks(id, rank_main, &r[0], &r[1]);
  int distinct = 0;
  for (int i = 0; i < TUNE_CALLS; i++) {
    ck_assert_msg(r[0].algo[i] == r[1].algo[i] && r[0].proto[i] == r[1].proto[i] &&
                      r[0].nch[i] == r[1].nch[i],
                  "call %d: rank 0 ran %d/%d/%d, rank 1 ran %d/%d/%d", i, r[0].algo[i],
                  r[0].proto[i], r[0].nch[i], r[1].algo[i], r[1].proto[i], r[1].nch[i]);
    if (i > 0 && (r[0].algo[i] != r[0].algo[i - 1] || r[0].proto[i] != r[0].proto[i - 1] ||
                  r[0].nch[i] != r[0].nch[i - 1]))
      distinct++;
  }
  ck_assert_int_gt(distinct, 0); /* the search probed more than one configuration */
  ah_key_t key = {id, AH_FUNC_ALLREDUCE, 20};
  ck_assert_uint_ge(ah_sched_horizon(ah_shim_keystate_get(&key)->sched), TUNE_CALLS);
}
END_TEST

/* The search driven through the decision path with synthetic times: ring/simple takes 50 us,
 * everything else 100 us. Each rank's thread reports the time of each of its calls as the timing
 * harvest would (the search learns a probe call's shortest once both have). The search must settle on ring/simple with both ranks agreeing call by call; a
 * drift re-open then cuts the forever segment past the furthest rank, and they still agree. */
#define DRIVE_CALLS 900
typedef struct {
  int rank;
  uint64_t id;
  _Atomic int *reopen_at; /* call index at which rank 0 simulates a drift re-open */
  int untimed;            /* this rank's times never come (a call NCCL decided on its own thread) */
  int algo[DRIVE_CALLS], proto[DRIVE_CALLS], nch[DRIVE_CALLS];
} drive_t;

static void *drive_main(void *arg) {
  drive_t *r = arg;
  ah_comm_pending_push(r->id, r->rank, -1);
  void *ctx = NULL;
  ncclTunerPlugin_v5.init(&ctx, r->id, 2, 1, NULL, NULL, NULL);
  ah_comm_t *c = ctx;
  for (int i = 0; i < DRIVE_CALLS; i++) {
    float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
    table_fill(t);
    int nch = 0;
    ncclTunerPlugin_v5.getCollInfo(ctx, AH_FUNC_ALLREDUCE, 4 << 20, 1, (float **)(void *)t,
                                   AH_NUM_ALGOS, AH_NUM_PROTOS, 0, &nch);
    r->algo[i] = argmin(t, &r->proto[i]);
    r->nch[i] = nch;
    pthread_barrier_wait(&call_barrier);
    ah_shim_rankkey_t *ck = c->keys[AH_FUNC_ALLREDUCE][22];
    if (ck &&
        !r->untimed) { /* every rank times its calls; the search learns a probe call's shortest */
      double us = r->algo[i] == AH_ALGO_RING && r->proto[i] == AH_PROTO_SIMPLE ? 50.0 : 100.0;
      int kept = ck->seg_keep || ck->seg_refused || ck->seg_nccl;
      ah_shim_record_time(ck, ck->next - 1, ck->source, kept ? 0 : ck->gen, us, 4 << 20);
      if (ck->leader && i == atomic_load(r->reopen_at)) ah_shim_key_reopen(ck); /* as drift does */
    }
  }
  return NULL;
}

/* The status of AllReduce bin `bin`'s search on communicator id, which must have converged. */
static ah_tune_status_t key_converged(uint64_t id, int bin) {
  ah_key_t k = {id, AH_FUNC_ALLREDUCE, bin};
  ah_shim_keystate_t *ks = ah_shim_keystate_get(&k);
  ck_assert_ptr_nonnull(ks->tune);
  ah_tune_status_t st;
  ah_tune_status(ks->tune, &st);
  ck_assert_int_eq(st.state, AH_TUNE_CONVERGED);
  return st;
}

/* Both driven ranks ran the same configuration at every call. */
static void drive_agree(const drive_t *r) {
  for (int i = 0; i < DRIVE_CALLS; i++)
    ck_assert_msg(r[0].algo[i] == r[1].algo[i] && r[0].proto[i] == r[1].proto[i] &&
                      r[0].nch[i] == r[1].nch[i],
                  "call %d: rank 0 ran %d/%d/%d, rank 1 ran %d/%d/%d", i, r[0].algo[i],
                  r[0].proto[i], r[0].nch[i], r[1].algo[i], r[1].proto[i], r[1].nch[i]);
}

START_TEST(test_tune_search_and_cut) {
  uint64_t id = 0x8888;
  static drive_t r[2];
  static _Atomic int reopen_at = 600;
  for (int i = 0; i < 2; i++) {
    r[i].rank = i;
    r[i].id = id;
    r[i].reopen_at = &reopen_at;
  }
  run_two_ranks(id, drive_main, &r[0], &r[1]);
  drive_agree(r);
  /* settled on the fast pair before the re-open */
  ck_assert_int_eq(r[0].algo[590], AH_ALGO_RING);
  ck_assert_int_eq(r[0].proto[590], AH_PROTO_SIMPLE);
  ah_key_t key = {id, AH_FUNC_ALLREDUCE, 22};
  ah_shim_keystate_t *ks = ah_shim_keystate_get(&key);
  /* the re-open cut the forever segment: a segment starts at or after call 600 + 64 */
  ah_segment_t seg;
  ck_assert_int_eq(ah_sched_lookup(ks->sched, 600 + 64, &seg), 1);
  ah_segment_t before;
  ck_assert_int_eq(ah_sched_lookup(ks->sched, 600, &before), 1);
  ck_assert_uint_lt(before.first, 600);              /* the forever segment began before */
  ck_assert_uint_ne(before.count, AH_SCHED_FOREVER); /* and was cut */
  ck_assert_uint_ge(before.first + before.count, 600 + 64);
  /* at the leader's next call, not at its next one sampled for timing (640): a short path that
   * missed the re-open would cut at 704 */
  ck_assert_uint_le(before.first + before.count, 600 + 8 + 64);
}
END_TEST

/* A rank whose times never come does not stop the search: the shortest of what the other ranks
 * reported is passed on when a later call needs its slot (or 500 ms after the first report). Rank 1
 * reports nothing; the key still converges on ring/simple, both ranks agreeing call by call. */
START_TEST(test_tune_untimed_rank) {
  uint64_t id = 0x8889;
  static drive_t r[2];
  static _Atomic int never = -1;
  for (int i = 0; i < 2; i++) {
    r[i].rank = i;
    r[i].id = id;
    r[i].reopen_at = &never;
    r[i].untimed = i == 1;
  }
  run_two_ranks(id, drive_main, &r[0], &r[1]);
  drive_agree(r);
  ah_tune_status_t st = key_converged(id, 22);
  ck_assert_int_eq(st.winner.algo, AH_ALGO_RING);
  ck_assert_int_eq(st.winner.proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(r[0].algo[DRIVE_CALLS - 1], AH_ALGO_RING);
}
END_TEST

/* What a communicator learned passes on: two local ranks run AllReduce of 4 MiB (bin 22) until it
 * converges, then 2 MiB (bin 21). Ring/simple is fastest, at 4 channels (synthetic times; NCCL's
 * cost table prefers tree/ll). Bin 22's search finds it; bin 21's must start there: ring/simple at
 * 4 channels among its first 8 calls, where a search that knows nothing screens every pair at 16
 * channels first. */
#define WARM_CALLS 600
typedef struct {
  int rank;
  uint64_t id;
} warm_t;

/* One all-reduce of `bytes` (bin `bin`) through the tuner face; the rank records its time on a
 * surface whose optimum is ring/simple at 4 channels (50 us there, +2 us per channel away; 100 us
 * elsewhere). */
static void warm_call(void *ctx, size_t bytes, int bin) {
  ah_comm_t *c = ctx;
  int proto;
  float t[AH_NUM_ALGOS][AH_NUM_PROTOS];
  table_fill(t);
  int nch = 0;
  ncclTunerPlugin_v5.getCollInfo(ctx, AH_FUNC_ALLREDUCE, bytes, 1, (float **)(void *)t,
                                 AH_NUM_ALGOS, AH_NUM_PROTOS, 0, &nch);
  int algo = argmin(t, &proto);
  pthread_barrier_wait(&call_barrier);
  ah_shim_rankkey_t *ck = c->keys[AH_FUNC_ALLREDUCE][bin];
  if (ck) { /* every rank, as the timing harvest does */
    int n = nch > 0 ? nch : 16;
    double us = algo == AH_ALGO_RING && proto == AH_PROTO_SIMPLE ? 50.0 + 2.0 * abs(n - 4) : 100.0;
    int kept = ck->seg_keep || ck->seg_refused || ck->seg_nccl;
    ah_shim_record_time(ck, ck->next - 1, ck->source, kept ? 0 : ck->gen, us, (double)bytes);
  }
}

static void *warm_main(void *arg) {
  warm_t *r = arg;
  ah_comm_pending_push(r->id, r->rank, -1);
  void *ctx = NULL;
  ncclTunerPlugin_v5.init(&ctx, r->id, 2, 1, NULL, NULL, NULL);
  for (int i = 0; i < WARM_CALLS + 40; i++) {
    size_t bytes = i < WARM_CALLS ? 4 << 20 : 2 << 20;
    int bin = i < WARM_CALLS ? 22 : 21;
    warm_call(ctx, bytes, bin);
  }
  return NULL;
}

/* The same two bins, bin 21 joining after SHARE_AFTER calls of bin 22 and then called in turn
 * with it: bin 22 has not converged when bin 21 starts (no warm start), so it hands its point to
 * bin 21 mid-search when it converges (shim_search.c search_share); bin 21 must take it (one hint
 * between them) and pin ring/simple at 4 channels. */
#define SHARE_AFTER 16
static void *share_main(void *arg) {
  warm_t *r = arg;
  ah_comm_pending_push(r->id, r->rank, -1);
  void *ctx = NULL;
  ncclTunerPlugin_v5.init(&ctx, r->id, 2, 1, NULL, NULL, NULL);
  for (int i = 0; i < 2 * WARM_CALLS; i++) {
    int bin = i % 2 && i > SHARE_AFTER ? 21 : 22;
    size_t bytes = bin == 22 ? 4 << 20 : 2 << 20;
    warm_call(ctx, bytes, bin);
  }
  return NULL;
}

START_TEST(test_tune_share_mid_search) {
  uint64_t id = 0x9a9a;
  static warm_t r[2];
  for (int i = 0; i < 2; i++) {
    r[i].rank = i;
    r[i].id = id;
  }
  run_two_ranks(id, share_main, &r[0], &r[1]);
  int hinted = 0;
  for (int bin = 22; bin >= 21; bin--) {
    ah_tune_status_t st = key_converged(id, bin);
    ck_assert_int_eq(st.winner.algo, AH_ALGO_RING);
    ck_assert_int_eq(st.winner.proto, AH_PROTO_SIMPLE);
    ck_assert_int_eq(st.winner.res[AH_DIM_NCHANNELS], 4);
    hinted += st.hints;
  }
  ck_assert_msg(hinted == 1, "%d hints passed between two bins searching side by side (want 1)",
                hinted);
}
END_TEST

START_TEST(test_tune_warm_start) {
  uint64_t id = 0x9999;
  static warm_t r[2];
  for (int i = 0; i < 2; i++) {
    r[i].rank = i;
    r[i].id = id;
  }
  run_two_ranks(id, warm_main, &r[0], &r[1]);
  ah_key_t k21 = {id, AH_FUNC_ALLREDUCE, 21};
  ah_shim_keystate_t *ks21 = ah_shim_keystate_get(&k21);
  ah_tune_status_t st = key_converged(id, 22);
  ck_assert_int_eq(st.learned.algo, AH_ALGO_RING);
  ck_assert_int_eq(st.learned.proto, AH_PROTO_SIMPLE);
  ck_assert_int_eq(st.learned.res[AH_DIM_NCHANNELS], 4);
  int seen = 0;
  for (uint64_t i = 0; i < 8; i++) {
    ah_segment_t seg;
    ck_assert_int_eq(ah_sched_lookup(ks21->sched, i, &seg), 1);
    if (seg.config.algo == AH_ALGO_RING && seg.config.proto == AH_PROTO_SIMPLE &&
        seg.config.res[AH_DIM_NCHANNELS] == 4)
      seen = 1;
  }
  ck_assert_msg(seen, "bin 21 did not start from bin 22's ring/simple at 4 channels");
}
END_TEST

int main(int argc, char **argv) {
  if (argc > 1) scenario = argv[1];
  ah_shim_init();
  Suite *s = suite_create("shim_face");
  TCase *tc = tcase_create(scenario);
  tcase_set_timeout(tc, 60);
  if (strcmp(scenario, "fixed") == 0) {
    tcase_add_test(tc, test_override_applies);
    tcase_add_test(tc, test_override_never_forces_ignored_cell);
    tcase_add_test(tc, test_refused_call_counted_as_nccl);
    tcase_add_test(tc, test_call_index_counts);
    tcase_add_test(tc, test_v2_out_params);
    tcase_add_test(tc, test_simulate_counts_nothing);
    tcase_add_test(tc, test_grouped_init_claims_shared);
    tcase_add_test(tc, test_pending_by_device);
    tcase_add_test(tc, test_v6_chunk);
    tcase_add_test(tc, test_settled_calls_short_path);
    tcase_add_test(tc, test_short_path_table_width);
    tcase_add_test(tc, test_bin_matches_ah_size_bin);
  } else if (strcmp(scenario, "malformed") == 0) {
    tcase_add_test(tc, test_malformed_rest_applies);
  } else if (strcmp(scenario, "observe") == 0 || strcmp(scenario, "disabled") == 0) {
    tcase_add_test(tc, test_nothing_changes);
  } else if (strcmp(scenario, "tune") == 0) {
    tcase_add_test(tc, test_tune_local_ranks_agree);
    tcase_add_test(tc, test_tune_search_and_cut);
    tcase_add_test(tc, test_tune_untimed_rank);
    tcase_add_test(tc, test_tune_warm_start);
    tcase_add_test(tc, test_tune_share_mid_search);
  } else {
    fprintf(stderr, "unknown scenario %s\n", scenario);
    return 2;
  }
  suite_add_tcase(s, tc);
  return ah_check_run(s);
}
