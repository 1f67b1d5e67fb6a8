/* Tests of the held-out truth family (sim/model/sim_model_heldout.c, docs/sim.md): a member is the
 * same for the same seed and differs between seeds and from the development truth, and each
 * perturbation is there — channel steps, the protocol band, a winner NCCL's table rates over 2x
 * slower, contention, the mid-job drift, AR(1) noise and the slow call site — and NCCLSIM_TRUTH's
 * text is parsed or refused with a message naming it. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_check.h"
#include "model_check.h"
#include "sim_model.h"
#include "sim_model_heldout.h"

/* A configuration of (a, p) with nc channels as NCCL fills it (threads, chunk). */
static int config_of(const sim_model_t *m, int coll, size_t bytes, int a, int p, int nc,
                     sim_config_t *cfg) {
  float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(m, coll, bytes, 1, t);
  if (t[a][p] < 0) return -1;
  for (int i = 0; i < SIM_NUM_ALGOS; i++)
    for (int j = 0; j < SIM_NUM_PROTOS; j++)
      if (i != a || j != p) t[i][j] = -1.0f;
  return sim_model_select(m, coll, bytes, t, nc, 0, cfg);
}

/* Link-bound parts of a call (the parts sim_model_truth.c hands the family). */
static const sim_time_parts_t link_bound = {10.0, 1.0, 1000.0, 200.0, 20.0, 30.0, 0.5};

START_TEST(deterministic_per_seed) {
  sim_heldout_t a, b, c;
  sim_heldout_draw(5, &a);
  sim_heldout_draw(5, &b);
  sim_heldout_draw(6, &c);
  ck_assert_int_eq(memcmp(&a, &b, sizeof a), 0);
  ck_assert_int_ne(memcmp(&a, &c, sizeof a), 0);
  /* Two models of the same member time every configuration alike; another member does not. */
  sim_model_t *m1 = malloc(sizeof *m1), *m2 = malloc(sizeof *m2);
  model_for(m1, "nodes=2,gpus=8,gpu=h100", 22809);
  model_for(m2, "nodes=2,gpus=8,gpu=h100", 22809);
  sim_model_truth_set(m1, 1, 3);
  sim_model_truth_set(m2, 1, 3);
  int differ = 0;
  for (int nc = 1; nc <= 32; nc++) {
    sim_config_t cfg;
    ck_assert_int_eq(
        config_of(m1, AH_FUNC_ALLREDUCE, 64 * MiB, AH_ALGO_RING, AH_PROTO_SIMPLE, nc, &cfg), 0);
    double t1 = sim_model_time_us(m1, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 0.5);
    ck_assert_double_eq(t1, sim_model_time_us(m2, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 0.5));
    sim_model_truth_set(m2, 1, 4);
    differ += t1 != sim_model_time_us(m2, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 0.5);
    sim_model_truth_set(m2, 1, 3);
  }
  ck_assert_int_gt(differ, 16);
  free(m1);
  free(m2);
}
END_TEST

START_TEST(differs_from_dev_and_dev_unchanged) {
  sim_model_t *m = malloc(sizeof *m);
  model_for(m, "nodes=2,gpus=8,gpu=h100", 22809);
  int differ = 0, n = 0;
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++)
      for (int nc = 1; nc <= 16; nc += 3) {
        sim_config_t cfg;
        if (config_of(m, AH_FUNC_ALLREDUCE, 4 * MiB, a, p, nc, &cfg) != 0) continue;
        sim_model_truth_set(m, 0, 0);
        double dev = sim_model_time_us(m, AH_FUNC_ALLREDUCE, 4 * MiB, &cfg, 0);
        /* The development truth is the same at every call of a job. */
        ck_assert_double_eq(dev, sim_model_time_at_us(m, AH_FUNC_ALLREDUCE, 4 * MiB, &cfg, 0, 0));
        sim_model_truth_set(m, 1, 1);
        double ho = sim_model_time_us(m, AH_FUNC_ALLREDUCE, 4 * MiB, &cfg, 0);
        ck_assert(ho > 0);
        differ += fabs(ho / dev - 1) > 0.01;
        n++;
      }
  ck_assert_int_gt(n, 10);
  ck_assert_int_ge(differ, n / 2);
  free(m);
}
END_TEST

START_TEST(channel_steps) {
  sim_model_t *m = malloc(sizeof *m);
  model_for(m, "nodes=2,gpus=8,gpu=h100", 22809);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sim_heldout_t h;
    sim_heldout_draw(seed, &h);
    sim_config_t cfg = {AH_ALGO_RING, AH_PROTO_SIMPLE, 0, 512, 0};
    int s = h.step;
    /* One channel past a multiple of the NICs/rings loads the busiest one with one more. */
    double even = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 2 * s, &link_bound);
    double odd =
        sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 2 * s + 1, &link_bound);
    ck_assert_msg(odd > 1.1 * even, "seed %llu step %d: %g vs %g", (unsigned long long)seed, s, odd,
                  even);
  }
  free(m);
}
END_TEST

START_TEST(protocol_band) {
  sim_model_t *m = malloc(sizeof *m);
  model_for(m, "nodes=2,gpus=8,gpu=h100", 22809);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sim_heldout_t h;
    sim_heldout_draw(seed, &h);
    int other = h.cross_proto == AH_PROTO_SIMPLE ? AH_PROTO_LL128 : AH_PROTO_SIMPLE;
    int a = h.fast_algo == AH_ALGO_RING ? AH_ALGO_TREE : AH_ALGO_RING;
    sim_config_t in = {a, h.cross_proto, 0, 512, 0}, out = in;
    out.proto = other;
    size_t mid = (size_t)sqrt(h.cross_lo * h.cross_hi), far = (size_t)(h.cross_hi * 8);
    double t_in = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, mid, &in, 8, &link_bound);
    double t_out = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, mid, &out, 8, &link_bound);
    ck_assert_msg(t_in < 0.85 * t_out, "seed %llu: %g vs %g", (unsigned long long)seed, t_in,
                  t_out);
    t_in = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, far, &in, 8, &link_bound);
    t_out = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, far, &out, 8, &link_bound);
    ck_assert_double_eq_tol(t_in, t_out, 1e-9);
  }
  free(m);
}
END_TEST

/* The largest ratio, over the keys, of NCCL's table estimate of the optimum's cell to its best. */
static double worst_table_ratio(sim_model_t *m, int heldout, uint64_t seed) {
  static const int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER,
                              AH_FUNC_BROADCAST, AH_FUNC_REDUCE};
  double worst = 0;
  sim_model_truth_set(m, heldout, seed);
  for (int ci = 0; ci < 5; ci++)
    for (size_t bytes = 4 * KiB; bytes <= 1024 * MiB; bytes *= 8) {
      float t[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
      sim_optimum_t o;
      sim_model_cost_table(m, colls[ci], bytes, 1, t);
      ck_assert_int_eq(sim_model_optimum(m, colls[ci], bytes, 0, &o), 0);
      double best = INFINITY;
      for (int a = 0; a < SIM_NUM_ALGOS; a++)
        for (int p = 0; p < SIM_NUM_PROTOS; p++)
          if (t[a][p] >= 0 && t[a][p] < best) best = t[a][p];
      double r = t[o.best.algo][o.best.proto] / best;
      if (r > worst) worst = r;
    }
  return worst;
}

START_TEST(winner_nccl_rates_over_2x_slower) {
  static const char *topos[] = {"nodes=1,gpus=8,gpu=h100", "nodes=2,gpus=8,gpu=h100",
                                "nodes=4,gpus=8,gpu=h100"};
  sim_model_t *m = malloc(sizeof *m);
  double dev_worst = 0, ho_worst = 0;
  int seeds_with = 0;
  for (int ti = 0; ti < 3; ti++) {
    model_for(m, topos[ti], 22809);
    double r = worst_table_ratio(m, 0, 0);
    if (r > dev_worst) dev_worst = r;
  }
  for (uint64_t seed = 1; seed <= 8; seed++) {
    double worst = 0;
    for (int ti = 0; ti < 3; ti++) {
      model_for(m, topos[ti], 22809);
      double r = worst_table_ratio(m, 1, seed);
      if (r > worst) worst = r;
    }
    seeds_with += worst > 2.0;
    if (worst > ho_worst) ho_worst = worst;
  }
  /* The development truth never puts its winner 2x behind NCCL's best estimate; the family does. */
  ck_assert_msg(dev_worst < 2.0, "dev %g", dev_worst);
  ck_assert_msg(ho_worst > 2.0 && seeds_with >= 2, "held-out %g on %d seeds", ho_worst, seeds_with);
  free(m);
}
END_TEST

START_TEST(contention_wants_channels) {
  sim_model_t *m = malloc(sizeof *m);
  model_for(m, "nodes=2,gpus=8,gpu=h100", 22809);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sim_heldout_t h;
    sim_heldout_draw(seed, &h);
    sim_config_t cfg = {h.fast_algo == AH_ALGO_RING ? AH_ALGO_TREE : AH_ALGO_RING,
                        h.cross_proto == AH_PROTO_SIMPLE ? AH_PROTO_LL128 : AH_PROTO_SIMPLE, 0, 512,
                        0};
    /* Both counts multiples of the step: only the share of the shared links differs. */
    double few = sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, h.step, &link_bound);
    double many =
        sim_heldout_time_us(&h, m, AH_FUNC_ALLREDUCE, 64 * MiB, &cfg, 8 * h.step, &link_bound);
    double share = (double)h.cont_nch / h.step;
    double expect = 1000.0 * h.cont_duty * ((share < 2 ? share : 2) - h.cont_nch / (8.0 * h.step));
    ck_assert_double_eq_tol(few - many, expect, 1e-6);
    ck_assert(few > many);
  }
  free(m);
}
END_TEST

START_TEST(drift_mid_job) {
  sim_model_t *m = malloc(sizeof *m);
  for (uint64_t seed = 1; seed <= 8; seed++) {
    sim_heldout_t h;
    sim_heldout_draw(seed, &h);
    double nic, nvl;
    sim_heldout_links(&h, h.drift_call - 1, &nic, &nvl);
    ck_assert(nic == 1.0 && nvl == 1.0);
    sim_heldout_links(&h, h.drift_call, &nic, &nvl);
    ck_assert(nic * nvl == h.drift_scale && h.drift_scale < 1.0);
    /* A link-bound call slows from the drift call on, and stays slower to the end of the job. */
    model_for(m, h.drift_nic ? "nodes=2,gpus=8,gpu=h100" : "nodes=1,gpus=8,gpu=h100", 22809);
    sim_model_truth_set(m, 1, seed);
    sim_config_t cfg;
    ck_assert_int_eq(
        config_of(m, AH_FUNC_ALLREDUCE, 1024 * MiB, AH_ALGO_RING, AH_PROTO_SIMPLE, 24, &cfg), 0);
    double before =
        sim_model_time_at_us(m, AH_FUNC_ALLREDUCE, 1024 * MiB, &cfg, 0, h.drift_call - 1);
    double after = sim_model_time_at_us(m, AH_FUNC_ALLREDUCE, 1024 * MiB, &cfg, 0, h.drift_call);
    ck_assert_msg(after > 1.1 * before, "seed %llu: %g -> %g", (unsigned long long)seed, before,
                  after);
    ck_assert_double_eq(after, sim_model_time_us(m, AH_FUNC_ALLREDUCE, 1024 * MiB, &cfg, 0));
  }
  free(m);
}
END_TEST

START_TEST(noise_ar1_and_call_sites) {
  enum { N = 6000 };
  static double x[N];
  for (uint64_t seed = 1; seed <= 3; seed++) {
    sim_heldout_t h;
    sim_heldout_draw(seed, &h);
    double slow = 0, fast = 0;
    int ns = 0, nf = 0;
    for (int i = 0; i < N; i++) {
      double f = sim_heldout_noise(&h, 100.0, 0.02, 0, 42, (uint64_t)i) / 100.0;
      ck_assert_double_eq(f * 100.0, sim_heldout_noise(&h, 100.0, 0.02, 0, 42, (uint64_t)i));
      x[i] = log(f);
      if (i % h.site_period == h.site_period - 1) {
        slow += x[i], ns++;
        x[i] -= log(1 + h.site_gap); /* the AR(1) part alone */
      } else {
        fast += x[i], nf++;
      }
    }
    /* Bimodal between call sites: the slow site's calls sit site_gap above the others. */
    ck_assert_double_eq_tol(slow / ns - fast / nf, log(1 + h.site_gap), 0.01);
    double mean = 0, var = 0, cov = 0;
    for (int i = 0; i < N; i++) mean += x[i] / N;
    for (int i = 0; i < N; i++) var += (x[i] - mean) * (x[i] - mean);
    for (int i = 1; i < N; i++) cov += (x[i] - mean) * (x[i - 1] - mean);
    double rho = cov / var, sd = sqrt(var / N);
    ck_assert_msg(fabs(rho - h.ar_rho) < 0.08, "seed %llu: lag-1 %g, rho %g",
                  (unsigned long long)seed, rho, h.ar_rho);
    ck_assert_double_eq_tol(sd, 0.02, 0.006);
  }
  /* The development truth's noise is independent call to call. */
  sim_model_t *m = malloc(sizeof *m);
  model_for(m, "nodes=1,gpus=8,gpu=h100", 22809);
  uint64_t st = 7;
  double mean = 0, var = 0, cov = 0;
  for (int i = 0; i < N; i++) x[i] = log(sim_model_truth_noise(m, 1.0, 0.02, 0, 42, i, &st));
  for (int i = 0; i < N; i++) mean += x[i] / N;
  for (int i = 0; i < N; i++) var += (x[i] - mean) * (x[i] - mean);
  for (int i = 1; i < N; i++) cov += (x[i] - mean) * (x[i - 1] - mean);
  ck_assert_msg(fabs(cov / var) < 0.05, "dev lag-1 %g", cov / var);
  free(m);
}
END_TEST

START_TEST(truth_text) {
  sim_truth_sel_t sel = {0, 0};
  char err[200];
  ck_assert_int_eq(sim_truth_parse("dev", &sel, err, sizeof err), 0);
  ck_assert_int_eq(sel.heldout, 0);
  ck_assert_int_eq(sim_truth_parse(NULL, &sel, err, sizeof err), 0);
  ck_assert_int_eq(sim_truth_parse("heldout:17", &sel, err, sizeof err), 0);
  ck_assert(sel.heldout == 1 && sel.seed == 17);
  static const char *bad[] = {"heldout:", "heldout:0", "heldout:x",  "heldout:3x",
                              "Dev",      "held",      "heldout:-2", "heldout: 4"};
  for (int i = 0; i < 8; i++) {
    err[0] = 0;
    ck_assert_int_eq(sim_truth_parse(bad[i], &sel, err, sizeof err), -1);
    ck_assert(sel.heldout == 1 && sel.seed == 17); /* left alone */
    char want[80];
    snprintf(want, sizeof want, "invalid value for NCCLSIM_TRUTH: '%s'", bad[i]);
    ck_assert_msg(strstr(err, want) != NULL, "%s", err);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("model_heldout");
  const TTest *const family_tests[] = {deterministic_per_seed, differs_from_dev_and_dev_unchanged,
                                       truth_text};
  ah_check_add(s, (ah_check_case_t){.name = "family", .timeout = 60}, family_tests,
               AH_CHECK_COUNT(family_tests));
  const TTest *const perturbation_tests[] = {channel_steps,
                                             protocol_band,
                                             winner_nccl_rates_over_2x_slower,
                                             contention_wants_channels,
                                             drift_mid_job,
                                             noise_ar1_and_call_sites};
  ah_check_add(s, (ah_check_case_t){.name = "perturbations", .timeout = 120}, perturbation_tests,
               AH_CHECK_COUNT(perturbation_tests));
  return ah_check_run(s);
}
