/* Unit tests of tuner/ah_config.c and base/'s ah_size.c and ah_names.c: size bins
 * (AllGather/ReduceScatter binned per rank), the names of collectives, algorithms and protocols
 * both ways, configuration equality and formatting, and the chunk dimension's windows and starts. */
#include <check.h>
#include <string.h>

#include "ah_check.h"
#include "ah_config.h"

START_TEST(size_bins) {
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, 0, 8), 0);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, 1, 8), 0);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, 2, 8), 1);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, 1 << 20, 8), 20);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, (1 << 21) - 1, 8), 20);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_BROADCAST, 25u << 20, 8), 24);
  /* AllGather/ReduceScatter: NCCL passes the whole buffer; the bin is the per-rank share. */
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLGATHER, 8u << 20, 8), 20);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_REDUCESCATTER, 8u << 20, 8), 20);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLGATHER, 8u << 20, 1), 23);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLGATHER, 8u << 20, 0), 23);
  ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, (size_t)-1, 8), 63);
  ck_assert_uint_eq(ah_size_bin_floor(0), 0);
  ck_assert_uint_eq(ah_size_bin_floor(1), 2);
  ck_assert_uint_eq(ah_size_bin_floor(20), 1u << 20);
  for (int b = 1; b < 40; b++) {
    ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, ah_size_bin_floor(b), 4), b);
    ck_assert_int_eq(ah_size_bin(AH_FUNC_ALLREDUCE, ah_size_bin_floor(b) - 1, 4), b - 1);
  }
}
END_TEST

START_TEST(names_round_trip) {
  for (int a = 0; a < AH_NUM_ALGOS; a++) {
    const char *n = ah_algo_name(a);
    ck_assert_str_ne(n, "?");
    ck_assert_int_eq(ah_algo_parse(n, strlen(n)), a);
  }
  for (int p = 0; p < AH_NUM_PROTOS; p++) {
    const char *n = ah_proto_name(p);
    ck_assert_int_eq(ah_proto_parse(n, strlen(n)), p);
  }
  for (int c = 0; c < AH_NUM_FUNCTIONS; c++) {
    const char *n = ah_coll_name(c);
    ck_assert_int_eq(ah_coll_parse(n, strlen(n)), c);
  }
  ck_assert_str_eq(ah_algo_name(AH_ALGO_RING), "ring");
  ck_assert_str_eq(ah_proto_name(AH_PROTO_LL128), "ll128");
  ck_assert_str_eq(ah_coll_name(AH_FUNC_REDUCESCATTER), "reducescatter");
  ck_assert_str_eq(ah_algo_name(-1), "?");
  ck_assert_str_eq(ah_algo_name(AH_NUM_ALGOS), "?");
  ck_assert_str_eq(ah_coll_name(99), "?");
  /* NCCL's spellings, any case; lengths are honoured. */
  ck_assert_int_eq(ah_algo_parse("NVLSTree", 8), AH_ALGO_NVLS_TREE);
  ck_assert_int_eq(ah_algo_parse("CollNet_Direct", 14), AH_ALGO_COLLNET_DIRECT);
  ck_assert_int_eq(ah_algo_parse("ringX", 4), AH_ALGO_RING);
  ck_assert_int_eq(ah_proto_parse("SIMPLE", 6), AH_PROTO_SIMPLE);
  ck_assert_int_eq(ah_coll_parse("AllReduce", 9), AH_FUNC_ALLREDUCE);
  ck_assert_int_eq(ah_coll_parse("bcast", 5), AH_FUNC_BROADCAST);
  ck_assert_int_eq(ah_algo_parse("rong", 4), -1);
  ck_assert_int_eq(ah_algo_parse("", 0), -1);
  ck_assert_int_eq(ah_algo_parse(NULL, 3), -1);
  ck_assert_int_eq(ah_proto_parse("ll12", 4), -1);
  ck_assert_int_eq(ah_coll_parse("alltoall", 8), -1);
}
END_TEST

START_TEST(config_equal_and_format) {
  ah_config_t a, b;
  memset(&a, 0, sizeof a);
  a.algo = AH_ALGO_RING;
  a.proto = AH_PROTO_SIMPLE;
  a.ndims = 2;
  a.res[0] = 16;
  a.res[1] = 512 * 1024;
  b = a;
  b.res[3] = 77; /* beyond ndims: not part of the config */
  ck_assert(ah_config_equal(&a, &b));
  b.res[1] = 0;
  ck_assert(!ah_config_equal(&a, &b));
  b = a;
  b.proto = AH_PROTO_LL;
  ck_assert(!ah_config_equal(&a, &b));
  b = a;
  b.ndims = 1;
  ck_assert(!ah_config_equal(&a, &b));

  char buf[128];
  ck_assert_str_eq(ah_config_format(&a, buf, sizeof buf), "ring/simple nch=16 chunk=512K");
  a.res[1] = 0;
  ck_assert_str_eq(ah_config_format(&a, buf, sizeof buf), "ring/simple nch=16");
  a.algo = -1;
  a.proto = -1;
  a.res[0] = 0;
  ck_assert_str_eq(ah_config_format(&a, buf, sizeof buf), "auto/auto");
  a.algo = AH_ALGO_TREE;
  a.proto = AH_PROTO_LL128;
  a.res[0] = 4;
  a.res[1] = 1000;
  ck_assert_str_eq(ah_config_format(&a, buf, sizeof buf), "tree/ll128 nch=4 chunk=1000");
  /* A short buffer is cut, never overrun. */
  char tiny[6];
  memset(tiny, 'x', sizeof tiny);
  ah_config_format(&a, tiny, sizeof tiny);
  ck_assert_uint_eq(strlen(tiny), 5);
}
END_TEST

/* Chunk value at the start of subspace s's window. */
static int64_t chunk_start(const ah_space_t *sp, int s) {
  return sp->dims[AH_DIM_CHUNK].values[sp->win[s][AH_DIM_CHUNK].at];
}

/* A space of ring/simple, ring/ll, tree/simple and nvls/simple with the chunk built for a call. */
static void chunk_space(ah_space_t *sp, size_t nbytes, int coll, int nranks, int nnodes) {
  memset(sp, 0, sizeof(*sp));
  static const int ap[4][2] = {{AH_ALGO_RING, AH_PROTO_SIMPLE},
                               {AH_ALGO_RING, AH_PROTO_LL},
                               {AH_ALGO_TREE, AH_PROTO_SIMPLE},
                               {AH_ALGO_NVLS, AH_PROTO_SIMPLE}};
  for (int i = 0; i < 4; i++) {
    sp->sub[i].algo = (int8_t)ap[i][0];
    sp->sub[i].proto = (int8_t)ap[i][1];
  }
  sp->nsub = 4;
  sp->ndims = 2;
  ah_space_chunk_build(sp, nbytes, coll, nranks, nnodes);
}

START_TEST(chunk_windows_and_starts) {
  ah_space_t a, b;
  /* 64 MiB AllReduce on 8 ranks: Simple's window is 1 KiB .. 2 MiB, LL's 1 KiB .. 32 KiB, and the
   * start lies inside each window. */
  chunk_space(&a, (size_t)64 << 20, AH_FUNC_ALLREDUCE, 8, 1);
  ck_assert_int_eq(a.dims[AH_DIM_CHUNK].nvalues, 13);
  ck_assert_int_eq(
      a.dims[AH_DIM_CHUNK].values[a.win[0][AH_DIM_CHUNK].lo + a.win[0][AH_DIM_CHUNK].n - 1],
      2 << 20);
  ck_assert_int_eq(
      a.dims[AH_DIM_CHUNK].values[a.win[1][AH_DIM_CHUNK].lo + a.win[1][AH_DIM_CHUNK].n - 1],
      32 << 10);
  for (int s = 0; s < 4; s++) {
    ck_assert_int_ge(a.win[s][AH_DIM_CHUNK].at, a.win[s][AH_DIM_CHUNK].lo);
    ck_assert_int_lt(a.win[s][AH_DIM_CHUNK].at,
                     a.win[s][AH_DIM_CHUNK].lo + a.win[s][AH_DIM_CHUNK].n);
  }
  /* A ring 16 times deeper (128 ranks) starts 4 times smaller: sqrt of the bytes per stage. */
  chunk_space(&b, (size_t)64 << 20, AH_FUNC_ALLREDUCE, 128, 16);
  ck_assert_int_eq(chunk_start(&a, 0), 4 * chunk_start(&b, 0));
  /* A tree's depth is its nodes: 16 nodes start 4 times smaller than 1, NVLS's does not change. */
  ck_assert_int_eq(chunk_start(&a, 2), 4 * chunk_start(&b, 2));
  ck_assert_int_eq(chunk_start(&a, 3), chunk_start(&b, 3));
  /* A ring that forwards the whole message (broadcast) starts twice the reducing ring's chunk. */
  chunk_space(&b, (size_t)64 << 20, AH_FUNC_BROADCAST, 8, 1);
  ck_assert_int_eq(chunk_start(&b, 0), 2 * chunk_start(&a, 0));
  ck_assert_int_eq(chunk_start(&b, 2), chunk_start(&a, 2));
  /* Four times the message: twice the chunk. */
  chunk_space(&b, (size_t)16 << 20, AH_FUNC_ALLREDUCE, 8, 1);
  ck_assert_int_eq(chunk_start(&a, 0), 2 * chunk_start(&b, 0));
  /* A chunk at least the whole message runs as the message: 4 KiB ends every window at 4 KiB. */
  chunk_space(&b, 4096, AH_FUNC_ALLREDUCE, 8, 1);
  for (int s = 0; s < 4; s++)
    ck_assert_int_eq(
        b.dims[AH_DIM_CHUNK].values[b.win[s][AH_DIM_CHUNK].lo + b.win[s][AH_DIM_CHUNK].n - 1],
        4096);
}
END_TEST

int main(void) {
  const TTest *const tests[] = {size_bins, names_round_trip, config_equal_and_format,
                                chunk_windows_and_starts};
  return ah_check_main("tuner_config", (ah_check_case_t){.name = "config", .timeout = 10}, tests,
                       AH_CHECK_COUNT(tests));
}
