/* Calibration tests of sim/'s timing model (docs/sim.md): the published H100 figures, NCCL's
 * own tables and default picks, the shape a tuner relies on (one minimum per resource axis,
 * fewer channels under interference, larger chunks for larger messages), the topology and
 * environment parsing, and ncclsim-optimum against an independent brute-force loop. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ah_check.h"
#include "model_check.h"
#include "sim_model.h"

/* NCCL's configuration for a forced (algo, proto): the table holds only that cell. */
static int forced(const sim_model_t *m, int coll, size_t bytes, int a, int p, int nch, size_t chunk,
                  sim_config_t *cfg) {
  float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(m, coll, bytes, 1, t);
  if (t[a][p] < 0) return -1;
  for (int i = 0; i < SIM_NUM_ALGOS; i++)
    for (int j = 0; j < SIM_NUM_PROTOS; j++)
      if (i != a || j != p) t[i][j] = -1.0f;
  return sim_model_select(m, coll, bytes, t, nch, chunk, cfg);
}

static double ar_busbw(const sim_model_t *m, size_t bytes, double us) {
  int n = m->topo.nranks;
  return (double)bytes / (us * 1000.0) * 2.0 * (n - 1) / n;
}

static double forced_time(const sim_model_t *m, int coll, size_t bytes, int a, int p, double phi) {
  sim_config_t c;
  ck_assert_int_eq(forced(m, coll, bytes, a, p, 0, 0, &c), 0);
  return sim_model_time_us(m, coll, bytes, &c, phi);
}

static sim_model_t M; /* large struct: one per test process */

/* The AllReduce bus bandwidth (GB/s) of 1 GiB with algo/Simple forced, on the 2.28.9 model of the
 * topology `spec`, is within [lo, hi]. */
static void expect_1g_busbw(const char *spec, int algo, double lo, double hi) {
  model_for(&M, spec, 22809);
  double bw = ar_busbw(&M, GiB, forced_time(&M, AH_FUNC_ALLREDUCE, GiB, algo, AH_PROTO_SIMPLE, 0));
  ck_assert_msg(bw >= lo && bw <= hi, "%s: %s/Simple 1 GiB busbw %.1f not in %.0f-%.0f", spec,
                sim_model_algo_name(algo), bw, lo, hi);
}

START_TEST(ring_simple_1x8_1g) {
  expect_1g_busbw("nodes=1,gpus=8,gpu=h100", AH_ALGO_RING, 350, 370);
}
END_TEST

/* DGX-A100 one node: ~230-240 GB/s (nccl#1712); A100 has no NVLS, so Ring/Simple is the default. */
START_TEST(a100_1x8_1g) {
  model_for(&M, "nodes=1,gpus=8,gpu=a100", 22809);
  sim_optimum_t o;
  ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLREDUCE, GiB, 0, &o), 0);
  ck_assert_int_eq(o.def.algo * 10 + o.def.proto, AH_ALGO_RING * 10 + AH_PROTO_SIMPLE);
  double bw = ar_busbw(&M, GiB, o.def_us);
  ck_assert_msg(bw >= 225 && bw <= 245, "A100 1x8 1 GiB default busbw %.1f not in 225-245", bw);
}
END_TEST

START_TEST(nvls_1x8_1g) {
  expect_1g_busbw("nodes=1,gpus=8,gpu=h100", AH_ALGO_NVLS, 450, 490);
  sim_optimum_t o; /* and it is NCCL's default there */
  ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLREDUCE, GiB, 0, &o), 0);
  ck_assert_int_eq(o.def.algo, AH_ALGO_NVLS);
}
END_TEST

START_TEST(nvlstree_4node_1g) {
  expect_1g_busbw("nodes=4,gpus=8,gpu=h100,nic=8x400", AH_ALGO_NVLS_TREE, 340, 370);
}
END_TEST

START_TEST(small_allreduce_1x8) {
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22809);
  for (size_t b = 1 * KiB; b <= 16 * KiB; b *= 4) {
    sim_optimum_t o;
    ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLREDUCE, b, 0, &o), 0);
    ck_assert_msg(o.def_us >= 12 && o.def_us <= 20,
                  "1x8 AllReduce %zu B default %.2f us not in 12-20", b, o.def_us);
    ck_assert_int_eq(o.def.algo, AH_ALGO_RING); /* NCCL: Ring/LL for small messages on one node */
    ck_assert_int_eq(o.def.proto, AH_PROTO_LL);
  }
}
END_TEST

START_TEST(tree_ll_2node_small) {
  model_for(&M, "nodes=2,gpus=8,gpu=h100,nic=8x400", 22809);
  for (size_t b = 1 * KiB; b <= 16 * KiB; b *= 4) {
    double us = forced_time(&M, AH_FUNC_ALLREDUCE, b, AH_ALGO_TREE, AH_PROTO_LL, 0);
    ck_assert_msg(us >= 25 && us <= 30, "2x8 Tree/LL %zu B: %.2f us not in 25-30", b, us);
    sim_optimum_t o;
    ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLREDUCE, b, 0, &o), 0);
    ck_assert_int_eq(o.def.algo, AH_ALGO_TREE);
    ck_assert_int_eq(o.def.proto, AH_PROTO_LL);
  }
}
END_TEST

/* NCCL's own table reproduces the latencies worked out from its source (src/graph/tuning.cc). */
START_TEST(nccl_table_latencies) {
  model_for(&M, "nodes=2,gpus=8,gpu=h100,nic=8x400", 22809);
  float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 0, 1, t);
  ck_assert_float_eq_tol(t[AH_ALGO_TREE][AH_PROTO_LL], 25.2, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_TREE][AH_PROTO_LL128], 48.5, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_TREE][AH_PROTO_SIMPLE], 92.4, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_RING][AH_PROTO_LL], 40.0, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE], 66.8, 0.01);
  ck_assert_float_eq(t[AH_ALGO_NVLS][AH_PROTO_SIMPLE], -1.0f); /* NVLS multi-node needs CollNet */
  ck_assert_float_eq(t[AH_ALGO_PAT][AH_PROTO_SIMPLE], -1.0f);  /* PAT needs one rank per node */
  ck_assert_float_eq(t[AH_ALGO_TREE][AH_PROTO_LL] >= 0 && t[AH_ALGO_NVLS_TREE][AH_PROTO_LL] < 0, 1);
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22809);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 0, 1, t);
  ck_assert_float_eq_tol(t[AH_ALGO_RING][AH_PROTO_LL], 15.0, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_RING][AH_PROTO_LL128], 40.6, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_RING][AH_PROTO_SIMPLE], 56.0, 0.01);
  ck_assert_float_eq_tol(t[AH_ALGO_NVLS][AH_PROTO_SIMPLE], 25.0, 0.01);
  ck_assert_float_eq(t[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE], -1.0f); /* off on one node */
  ck_assert_int_eq(M.nchannels, 24);
  /* AllGather has no Tree; Broadcast only Ring. */
  sim_model_cost_table(&M, AH_FUNC_ALLGATHER, MiB, 1, t);
  ck_assert_float_eq(t[AH_ALGO_TREE][AH_PROTO_LL], -1.0f);
  sim_model_cost_table(&M, AH_FUNC_BROADCAST, MiB, 1, t);
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    if (a != AH_ALGO_RING) ck_assert_float_eq(t[a][AH_PROTO_SIMPLE], -1.0f);
  /* Version history: PAT appears in 2.23, Tree/Simple's hop was 28 us in 2.19-2.22. */
  model_for(&M, "nodes=4,gpus=1,gpu=h100", 22300);
  sim_model_cost_table(&M, AH_FUNC_ALLGATHER, MiB, 1, t);
  ck_assert(t[AH_ALGO_PAT][AH_PROTO_SIMPLE] >= 0);
  model_for(&M, "nodes=4,gpus=1,gpu=h100", 22204);
  sim_model_cost_table(&M, AH_FUNC_ALLGATHER, MiB, 1, t);
  ck_assert_float_eq(t[AH_ALGO_PAT][AH_PROTO_SIMPLE], -1.0f);
}
END_TEST

/* NCCL's picks by size follow §1.5: 1x8 Ring/LL then NVLS; 2x8 Tree/LL, Tree/LL128, NVLSTree. */
START_TEST(nccl_default_picks) {
  sim_config_t c;
  float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22809);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 64 * KiB, 1, t);
  ck_assert_int_eq(sim_model_select(&M, AH_FUNC_ALLREDUCE, 64 * KiB, t, 0, 0, &c), 0);
  ck_assert_int_eq(c.algo * 10 + c.proto, AH_ALGO_RING * 10 + AH_PROTO_LL);
  ck_assert_int_eq(c.nchannels, 2); /* 64 KiB < nc x 512 threads x 64 B until nc = 2 */
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 64 * MiB, 1, t);
  ck_assert_int_eq(sim_model_select(&M, AH_FUNC_ALLREDUCE, 64 * MiB, t, 0, 0, &c), 0);
  ck_assert_int_eq(c.algo, AH_ALGO_NVLS);
  ck_assert_int_eq(c.nchannels, 16);
  ck_assert_int_eq((int)c.chunk, 32768);
  model_for(&M, "nodes=2,gpus=8,gpu=h100,nic=8x400", 22809);
  size_t sizes[] = {4 * KiB, 1 * MiB, 64 * MiB};
  int want[][2] = {{AH_ALGO_TREE, AH_PROTO_LL},
                   {AH_ALGO_TREE, AH_PROTO_LL128},
                   {AH_ALGO_NVLS_TREE, AH_PROTO_SIMPLE}};
  for (int i = 0; i < 3; i++) {
    sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, sizes[i], 1, t);
    ck_assert_int_eq(sim_model_select(&M, AH_FUNC_ALLREDUCE, sizes[i], t, 0, 0, &c), 0);
    ck_assert_msg(c.algo == want[i][0] && c.proto == want[i][1], "2x8 %zu B: picked %s/%s",
                  sizes[i], sim_model_algo_name(c.algo), sim_model_proto_name(c.proto));
  }
  /* Ring/Simple uses NCCL's 2 MiB chunk and 512+32 threads at large sizes. */
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 0, 0, &c), 0);
  ck_assert_int_eq((int)c.chunk, 2 * 1024 * 1024);
  ck_assert_int_eq(c.nthreads, 544);
  ck_assert_int_eq(c.nchannels, 16);
}
END_TEST

/* The tuner's channel count is a cap at the communicator's channels (2.22+), not before; its
 * chunk is clamped to the buffer and aligned to the protocol's grain. */
START_TEST(tuner_channels_and_chunk) {
  sim_config_t c;
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22809);
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 40, 0, &c), 0);
  ck_assert_int_eq(c.nchannels, 24);
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 5, 0, &c), 0);
  ck_assert_int_eq(c.nchannels, 5);
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, 4 * KiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 8, 0, &c),
                   0);
  ck_assert_int_eq(c.nchannels, 1); /* 32 KiB of traffic per channel */
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22100);
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 40, 0, &c), 0);
  ck_assert_int_eq(c.nchannels, 32); /* no cap before 2.22, only MAXCHANNELS (32 before 2.25) */
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 23007);
  ck_assert_int_eq(
      forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 0, 1000000, &c), 0);
  ck_assert_int_eq((int)c.chunk, 1000000 / 512 * 512);
  ck_assert_int_eq(
      forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 0, 64 * MiB, &c), 0);
  ck_assert_int_eq((int)c.chunk, 2 * 1024 * 1024);
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, GiB, AH_ALGO_RING, AH_PROTO_LL128, 0, 4 * MiB, &c),
                   0);
  ck_assert_int_eq((int)c.chunk, 576000);
}
END_TEST

/* Along one axis, T falls to one minimum and then rises (plateaus within 1% allowed). */
static void check_unimodal(const double *v, int n, const char *what) {
  int g = 0;
  for (int i = 1; i < n; i++)
    if (v[i] < v[g]) g = i;
  for (int i = g; i > 0; i--)
    ck_assert_msg(v[i - 1] >= v[i] * 0.99, "%s: second minimum left of index %d (%.3f < %.3f)",
                  what, g, v[i - 1], v[i]);
  for (int i = g; i + 1 < n; i++)
    ck_assert_msg(v[i + 1] >= v[i] * 0.99,
                  "%s: second minimum right of index %d (%.3f < %.3f at %d)", what, g, v[i + 1],
                  v[i], i + 1);
}

/* The model's time of base with one resource swept over its range, into v: channels 1..64,
 * threads 64..640 by 32, chunk 1 KiB..4 MiB doubling. Returns how many. */
enum { AXIS_CHANNELS, AXIS_THREADS, AXIS_CHUNK };
static const char *const axis_name[] = {"channels", "threads", "chunk"};
static int sweep(const sim_config_t *base, int coll, size_t S, double phi, int axis, double v[64]) {
  int n = 0;
  for (int i = 0; i < 64; i++) {
    sim_config_t c = *base;
    if (axis == AXIS_CHANNELS) c.nchannels = i + 1;
    else if (axis == AXIS_THREADS && 64 + 32 * i <= 640) c.nthreads = 64 + 32 * i;
    else if (axis == AXIS_CHUNK && ((size_t)1024 << i) <= 4 * MiB) c.chunk = (size_t)1024 << i;
    else break;
    v[n++] = sim_model_time_us(&M, coll, S, &c, phi);
  }
  return n;
}

START_TEST(one_minimum_per_axis) {
  const char *topos[] = {"nodes=1,gpus=8,gpu=h100", "nodes=2,gpus=8,gpu=h100",
                         "nodes=4,gpus=8,gpu=a100,nic=8x200"};
  int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER, AH_FUNC_BROADCAST,
                 AH_FUNC_REDUCE};
  size_t sizes[] = {64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB};
  double phis[] = {0, 0.8};
  char what[200];
  for (int ti = 0; ti < 3; ti++) {
    model_for(&M, topos[ti], 23007);
    for (int ci = 0; ci < 5; ci++)
      for (int si = 0; si < 4; si++)
        for (int a = 0; a < SIM_NUM_ALGOS; a++)
          for (int p = 0; p < SIM_NUM_PROTOS; p++)
            for (int fi = 0; fi < 2; fi++) {
              sim_config_t base;
              int coll = colls[ci];
              size_t S = sizes[si];
              if (forced(&M, coll, S, a, p, 0, 0, &base) != 0) continue;
              for (int axis = 0; axis < 3; axis++) {
                double v[64];
                int n = sweep(&base, coll, S, phis[fi], axis, v);
                snprintf(what, sizeof what, "%s %s %zu %s/%s phi=%.1f %s", topos[ti],
                         sim_model_coll_name(coll), S, sim_model_algo_name(a),
                         sim_model_proto_name(p), phis[fi], axis_name[axis]);
                check_unimodal(v, n, what);
              }
            }
  }
}
END_TEST

static int best_channels(const sim_config_t *base, int coll, size_t S, double phi) {
  int best = 1;
  double bt = INFINITY;
  for (int nc = 1; nc <= 64; nc++) {
    sim_config_t c = *base;
    c.nchannels = nc;
    double t = sim_model_time_us(&M, coll, S, &c, phi);
    if (t < bt * 0.999) { /* the first of a plateau */
      bt = t;
      best = nc;
    }
  }
  return best;
}

START_TEST(interference_wants_fewer_channels) {
  const char *topos[] = {"nodes=1,gpus=8,gpu=h100", "nodes=2,gpus=8,gpu=h100"};
  int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER, AH_FUNC_BROADCAST,
                 AH_FUNC_REDUCE};
  for (int ti = 0; ti < 2; ti++) {
    model_for(&M, topos[ti], 22809);
    for (int ci = 0; ci < 5; ci++)
      for (size_t S = 4 * MiB; S <= GiB; S *= 4)
        for (int a = 0; a < SIM_NUM_ALGOS; a++)
          for (int p = 0; p < SIM_NUM_PROTOS; p++) {
            sim_config_t base;
            if (forced(&M, colls[ci], S, a, p, 0, 0, &base) != 0) continue;
            int b0 = best_channels(&base, colls[ci], S, 0),
                b8 = best_channels(&base, colls[ci], S, 0.8);
            ck_assert_msg(b8 <= b0, "%s %s %zu %s/%s: best channels %d at phi=0.8 > %d at phi=0",
                          topos[ti], sim_model_coll_name(colls[ci]), S, sim_model_algo_name(a),
                          sim_model_proto_name(p), b8, b0);
          }
  }
}
END_TEST

START_TEST(best_chunk_grows_with_size) {
  const char *topos[] = {"nodes=1,gpus=8,gpu=h100", "nodes=2,gpus=8,gpu=h100"};
  for (int ti = 0; ti < 2; ti++) {
    model_for(&M, topos[ti], 23007);
    for (int coll = 0; coll < AH_NUM_FUNCTIONS; coll++)
      for (int a = 0; a < SIM_NUM_ALGOS; a++)
        for (int p = 0; p < SIM_NUM_PROTOS; p++)
          for (int fi = 0; fi < 2; fi++) {
            size_t prev = 0;
            for (size_t S = 256 * KiB; S <= GiB; S *= 4) { /* 8 channels, all used from 256 KiB */
              sim_config_t base;
              if (forced(&M, coll, S, a, p, 8, 0, &base) != 0) break;
              ck_assert_int_eq(base.nchannels, 8);
              size_t best = 0;
              double bt = INFINITY;
              for (size_t ch = 1024; ch <= 4 * MiB; ch *= 2) {
                sim_config_t c = base;
                c.chunk = ch;
                double t = sim_model_time_us(&M, coll, S, &c, fi * 0.8);
                if (t < bt * 0.999) {
                  bt = t;
                  best = ch;
                }
              }
              ck_assert_msg(
                  best >= prev,
                  "%s %s %s/%s phi=%.1f: best chunk %zu at %zu B < %zu at the size before",
                  topos[ti], sim_model_coll_name(coll), sim_model_algo_name(a),
                  sim_model_proto_name(p), fi * 0.8, best, S, prev);
              prev = best;
            }
          }
  }
}
END_TEST

/* The default is close to the optimum without interference and AutoCCL-sized gains appear with it. */
START_TEST(default_gap_is_autoccl_sized) {
  sim_optimum_t o;
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 23007);
  ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLREDUCE, GiB, 0, &o), 0);
  ck_assert_msg(o.def_us / o.best_us < 1.10, "1x8 1 GiB phi=0 gap %.3f", o.def_us / o.best_us);
  double worst = 1, sum = 0;
  int n = 0;
  for (size_t S = 4 * MiB; S <= GiB; S *= 4) {
    ck_assert_int_eq(sim_model_optimum(&M, AH_FUNC_ALLGATHER, S, 0.8, &o), 0);
    double g = o.def_us / o.best_us;
    if (g > worst) worst = g;
    sum += g;
    n++;
  }
  ck_assert_msg(sum / n >= 1.05 && worst <= 1.8, "AllGather 1x8 phi=0.8: mean gain %.3f, max %.3f",
                sum / n, worst);
}
END_TEST

START_TEST(optimum_matches_brute_force) {
  const char *topos[] = {"nodes=2,gpus=8,gpu=h100,nic=8x400", "nodes=1,gpus=8,gpu=a100"};
  int versions[] = {23007, 22809};
  size_t sizes[] = {48 * KiB, 3 * MiB, GiB};
  for (int ti = 0; ti < 2; ti++) {
    model_for(&M, topos[ti], versions[ti]);
    for (int si = 0; si < 3; si++)
      for (int fi = 0; fi < 2; fi++) {
        int coll = si == 1 ? AH_FUNC_REDUCESCATTER : AH_FUNC_ALLREDUCE;
        double phi = fi * 0.6;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        sim_optimum_t o;
        ck_assert_int_eq(sim_model_optimum(&M, coll, sizes[si], phi, &o), 0);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        ck_assert_msg(secs < 1.0, "optimum took %.3f s", secs);
        /* Independent loop: every (algo, proto) cell NCCL leaves open, channels 1..64 through
         * the tuner's cap, every power-of-two chunk where the version takes one. */
        double best = INFINITY;
        for (int a = 0; a < SIM_NUM_ALGOS; a++)
          for (int p = 0; p < SIM_NUM_PROTOS; p++)
            for (int nc = 1; nc <= 64; nc++)
              for (size_t ch = 0; ch <= 8 * MiB; ch = ch                      ? ch * 2
                                                      : versions[ti] >= 23000 ? 1024
                                                                              : 8 * MiB + 1) {
                sim_config_t c;
                if (forced(&M, coll, sizes[si], a, p, nc, ch, &c) != 0) continue;
                double us = sim_model_time_us(&M, coll, sizes[si], &c, phi);
                if (us >= 0 && us < best) best = us;
              }
        ck_assert_msg(fabs(best - o.best_us) <= 1e-9 * best, "optimum %.6f != brute force %.6f",
                      o.best_us, best);
        ck_assert(o.best_us <= o.def_us);
        ck_assert_double_eq_tol(sim_model_time_us(&M, coll, sizes[si], &o.best, phi), o.best_us,
                                1e-9);
      }
  }
}
END_TEST

START_TEST(noise_is_seeded) {
  uint64_t s1 = 42, s2 = 42, s3 = 43;
  double a = 0, b = 0, c = 0, sum = 0, out = 0;
  for (int i = 0; i < 20000; i++) {
    a = sim_model_noise(100, 0.02, 0.01, &s1);
    b = sim_model_noise(100, 0.02, 0.01, &s2);
    c = sim_model_noise(100, 0.02, 0.01, &s3);
    ck_assert_double_eq(a, b);
    sum += a;
    if (a > 130) out++;
  }
  ck_assert(a != c);
  ck_assert_msg(sum / 20000 > 99 && sum / 20000 < 102.5, "mean %.3f", sum / 20000);
  ck_assert_msg(out > 100 && out < 320, "outliers %.0f of 20000", out);
  uint64_t s4 = 1;
  ck_assert_double_eq(sim_model_noise(50, 0, 0, &s4), 50);
}
END_TEST

START_TEST(topology_parsing) {
  sim_topo_t t;
  char err[256];
  ck_assert_int_eq(sim_topo_parse("nodes=2,gpus=8,gpu=a100,nic=4x200", 0, &t, err, sizeof err), 0);
  ck_assert_int_eq(t.nranks, 16);
  ck_assert_int_eq(t.nnodes, 2);
  ck_assert_int_eq(t.ranks_per_node, 8);
  ck_assert_int_eq(t.gpu, SIM_GPU_A100);
  ck_assert_int_eq(t.nic_count, 4);
  ck_assert_double_eq_tol(t.nic_gbps, 24.0, 1e-9);
  ck_assert_int_eq(t.nvls, 0);
  ck_assert_int_eq(sim_topo_parse("H100", 16, &t, err, sizeof err), 0);
  ck_assert_int_eq(t.nnodes, 2);
  ck_assert_int_eq(t.nvls, 1);
  ck_assert_int_eq(sim_topo_parse("gpu=h100,nic=8x4OO", 8, &t, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'nic=8x4OO'") != NULL, "%s", err);
  ck_assert_int_eq(sim_topo_parse("nodes=2,gpus=8,bogus=1", 0, &t, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'bogus=1'") != NULL, "%s", err);
  ck_assert_int_eq(sim_topo_parse("nodes=3,gpus=8", 16, &t, err, sizeof err), -1);
  /* dual-port NICs move twice a port's bytes; the link layer is kept for sim/fabric */
  ck_assert_int_eq(sim_topo_parse("nic=8x200x2,ib=1", 8, &t, err, sizeof err), 0);
  ck_assert_int_eq(t.nic_ports, 2);
  ck_assert_int_eq(t.ib, 1);
  ck_assert_double_eq_tol(t.nic_line_gbps, 200.0, 1e-9);
  ck_assert_double_eq_tol(t.nic_gbps, 48.0, 1e-9);
  ck_assert_int_eq(sim_topo_parse("gpu=a100,ports=2", 8, &t, err, sizeof err), 0);
  ck_assert_double_eq_tol(t.nic_gbps, 48.0, 1e-9);
  ck_assert_int_eq(sim_topo_parse("nic=8x400x3", 8, &t, err, sizeof err), -1);
  ck_assert_msg(strstr(err, "'nic=8x400x3'") != NULL, "%s", err);
  char path[] = "/tmp/ncclsim-topo-XXXXXX";
  int fd = mkstemp(path);
  ck_assert_int_ge(fd, 0);
  const char *text = "# a DGX pair\nnodes=2 gpus=8\ngpu=h100 # Hopper\nnic=8x400\n";
  ck_assert_int_eq((int)write(fd, text, strlen(text)), (int)strlen(text));
  close(fd);
  char spec[64];
  snprintf(spec, sizeof spec, "file:%s", path);
  ck_assert_int_eq(sim_topo_parse(spec, 0, &t, err, sizeof err), 0);
  unlink(path);
  ck_assert_int_eq(t.nranks, 16);
  ck_assert_int_eq(sim_topo_parse(spec, 0, &t, err, sizeof err), -1);
  ck_assert_msg(strstr(err, path) != NULL, "%s", err);
}
END_TEST

START_TEST(environment) {
  float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_topo_t topo;
  char err[256];
  ck_assert_int_eq(sim_topo_parse("nodes=2,gpus=8", 0, &topo, err, sizeof err), 0);
  topo.version = 22809;
  setenv("NCCL_ALGO", "ring,tree;allgather:ring", 1);
  setenv("NCCL_PROTO", "^LL128", 1);
  setenv("NCCL_MAX_NCHANNELS", "8", 1);
  sim_model_init(&M, &topo, 0, 0);
  ck_assert_str_eq(M.error, "");
  ck_assert_int_eq(M.nchannels, 8);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, MiB, 1, t);
  ck_assert(t[AH_ALGO_RING][AH_PROTO_LL] >= 0 && t[AH_ALGO_TREE][AH_PROTO_SIMPLE] >= 0);
  ck_assert_float_eq(t[AH_ALGO_RING][AH_PROTO_LL128], -1.0f);
  ck_assert_float_eq(t[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE], -1.0f);
  /* The per-collective syntax needs 2.24: before, the value is an error and defaults stay. */
  topo.version = 22204;
  sim_model_init(&M, &topo, 0, 0);
  ck_assert_msg(strstr(M.error, "NCCL_ALGO") && strstr(M.error, "'ring,tree;allgather:ring'"), "%s",
                M.error);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, MiB, 1, t);
  ck_assert(t[AH_ALGO_NVLS_TREE][AH_PROTO_SIMPLE] >= 0);
  setenv("NCCL_ALGO", "ring,warp", 1);
  setenv("NCCL_PROTO", "ll,simpel", 1);
  topo.version = 22809;
  sim_model_init(&M, &topo, 0, 0);
  ck_assert_msg(strstr(M.error, "NCCL_ALGO: 'ring,warp'") != NULL, "%s", M.error);
  ck_assert_msg(
      strstr(M.error, "NCCL_PROTO: 'll,simpel' (expected a list such as 'll,simple'") != NULL, "%s",
      M.error);
  unsetenv("NCCL_ALGO");
  unsetenv("NCCL_PROTO");
  unsetenv("NCCL_MAX_NCHANNELS");
  setenv("NCCL_NTHREADS", "100", 1);
  sim_model_init(&M, &topo, 4, 12); /* config minCTAs/maxCTAs */
  ck_assert_msg(strstr(M.error, "NCCL_NTHREADS") != NULL, "%s", M.error);
  ck_assert_int_eq(M.nchannels, 12);
  setenv("NCCL_NTHREADS", "256", 1);
  sim_model_init(&M, &topo, 0, 0);
  ck_assert_int_eq(M.nthreads[AH_ALGO_RING][AH_PROTO_SIMPLE], 256);
  unsetenv("NCCL_NTHREADS");
  /* Every cell disabled: selection fails. */
  setenv("NCCL_ALGO", "pat", 1);
  sim_model_init(&M, &topo, 0, 0);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, MiB, 1, t);
  sim_config_t c;
  ck_assert_int_eq(sim_model_select(&M, AH_FUNC_ALLREDUCE, MiB, t, 0, 0, &c), -1);
  unsetenv("NCCL_ALGO");
}
END_TEST

/* A v5+ tuner may edit NCCL's tables at init: the cost table changes, the truth does not. */
START_TEST(constants_edit_changes_nccl_not_truth) {
  model_for(&M, "nodes=1,gpus=8,gpu=h100", 22809);
  float t0[SIM_NUM_ALGOS][SIM_NUM_PROTOS], t1[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 4 * KiB, 1, t0);
  sim_config_t c;
  ck_assert_int_eq(forced(&M, AH_FUNC_ALLREDUCE, 4 * KiB, AH_ALGO_RING, AH_PROTO_LL, 0, 0, &c), 0);
  double truth = sim_model_time_us(&M, AH_FUNC_ALLREDUCE, 4 * KiB, &c, 0);
  ah_tuner_constants_v5_t k;
  sim_model_constants_get(&M, &k);
  ck_assert_double_eq_tol(k.baseLatencies[AH_ALGO_RING][AH_PROTO_LL], 6.6, 1e-9);
  k.baseLatencies[AH_ALGO_RING][AH_PROTO_LL] += 100;
  sim_model_constants_set(&M, &k);
  sim_model_cost_table(&M, AH_FUNC_ALLREDUCE, 4 * KiB, 1, t1);
  ck_assert_float_eq_tol(t1[AH_ALGO_RING][AH_PROTO_LL] - t0[AH_ALGO_RING][AH_PROTO_LL], 100, 0.01);
  ck_assert_double_eq(sim_model_time_us(&M, AH_FUNC_ALLREDUCE, 4 * KiB, &c, 0), truth);
}
END_TEST

int main(void) {
  Suite *s = suite_create("model");
  const TTest *const calibration_tests[] = {
      ring_simple_1x8_1g,          nvls_1x8_1g,         a100_1x8_1g,
      nvlstree_4node_1g,           small_allreduce_1x8, tree_ll_2node_small,
      nccl_table_latencies,        nccl_default_picks,  tuner_channels_and_chunk,
      default_gap_is_autoccl_sized};
  ah_check_add(s, (ah_check_case_t){.name = "calibration", .timeout = 60}, calibration_tests,
               AH_CHECK_COUNT(calibration_tests));
  const TTest *const shape_tests[] = {one_minimum_per_axis, interference_wants_fewer_channels,
                                      best_chunk_grows_with_size};
  ah_check_add(s, (ah_check_case_t){.name = "shape", .timeout = 120}, shape_tests,
               AH_CHECK_COUNT(shape_tests));
  const TTest *const misc_tests[] = {optimum_matches_brute_force, noise_is_seeded, topology_parsing,
                                     environment, constants_edit_changes_nccl_not_truth};
  ah_check_add(s, (ah_check_case_t){.name = "misc", .timeout = 60}, misc_tests,
               AH_CHECK_COUNT(misc_tests));
  return ah_check_run(s);
}
