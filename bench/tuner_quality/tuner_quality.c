/* tuner_quality: how close the online search gets to the optimum, and in how many calls, on sim/'s
 * truth model. For every cell of the grid (collective x size x topology x interference x seed) it
 * builds the space the shim offers the tuner (the cost table's non -1 cells; the shim's channel
 * list {1,2,4,8,12,16,24,32,48,64}, whatever the communicator's own count, and its chunk list where
 * the emulated version takes one), starts from NCCL's choice with resources 0 ("NCCL's own"), drives
 * ah_tune with noisy results reported late and shuffled, and scores the pinned config with the
 * exhaustive optimum. --full-space instead lists channels 1..the communicator's count and starts at
 * NCCL's default resources (what the engine would see if the shim knew that count).
 *
 * A probe runs exactly as sim/sim_nccl_select.c runs a tuner's answer: the cost table edited so
 * only the chosen cell is eligible, then sim_model_select with the tuner's channel count as a cap
 * (so every value above the communicator's count runs as that count: a plateau the search has to
 * cross), which fills threads and chunk. All figures are from sim/'s model, not hardware. Prints
 * one CSV row per cell, then the summary line with OK or FAILED; exits 1 when a bar is missed. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ah_log.h"
#include "ah_tune.h"
#include "sim_model.h"
#include "tune_drive.h"

/* Bars from the issue. */
#define BAR_MEDIAN_Q 0.98
#define BAR_P5_Q 0.93
#define BAR_MEDIAN_CALLS 60
#define BAR_MAX_CALLS 200
#define SLOWER_TOL 0.01

typedef struct {
  const sim_model_t *m;
  int coll;
  size_t nbytes;
  double phi;
  int ndims;
} cell_t;

/* The run of one configuration, as NCCL would launch it when the tuner picks it. */
static int cell_sim_config(const cell_t *c, const ah_config_t *cfg, sim_config_t *out_p) {
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  for (int a = 0; a < SIM_NUM_ALGOS; a++)
    for (int p = 0; p < SIM_NUM_PROTOS; p++) table[a][p] = -1.0f;
  if (cfg->algo < 0 || cfg->proto < 0) { /* NCCL's own choice */
    sim_model_cost_table(c->m, c->coll, c->nbytes, 1, table);
  } else {
    table[cfg->algo][cfg->proto] = 0.0f;
  }
  int nch = cfg->ndims > 0 ? (int)cfg->res[0] : 0;
  size_t chunk = cfg->ndims > 1 ? (size_t)cfg->res[1] : 0;
  return sim_model_select(c->m, c->coll, c->nbytes, table, nch, chunk, out_p);
}

static double cell_time(void *arg, const ah_config_t *cfg, uint64_t call) {
  const cell_t *c = arg;
  sim_config_t sc;
  if (cell_sim_config(c, cfg, &sc) != 0) return 1e9;
  double us = sim_model_time_us(c->m, c->coll, c->nbytes, &sc, c->phi);
  return us > 0 ? us : 1e9;
}

static double noise_sigma = 0.02, noise_outliers = 0.01;

static double cell_noise(void *arg, double us, uint64_t *state) {
  (void)arg;
  return sim_model_noise(us, noise_sigma, noise_outliers, state);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double quantile(double *v, int n, double q) {
  qsort(v, (size_t)n, sizeof(double), cmp_double);
  if (n == 0) return NAN;
  double pos = q * (n - 1);
  int i = (int)pos;
  if (i + 1 >= n) return v[n - 1];
  return v[i] + (pos - i) * (v[i + 1] - v[i]);
}

static void fmt_sim(const sim_config_t *c, char *buf, size_t len) {
  snprintf(buf, len, "%s/%s/%d/%zu", sim_model_algo_name(c->algo), sim_model_proto_name(c->proto),
           c->nchannels, c->chunk);
}

int main(int argc, char **argv) {
  const char *csv_path = "tuner_quality.csv";
  int quick = 0, lag = 2, shim_space = 1, version = 0, seeds = 3, only_coll = -1, only_nodes = 0, only_seed = 0;
  double only_phi = -1;
  size_t only_bytes = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--csv") == 0 && i + 1 < argc) csv_path = argv[++i];
    else if (strcmp(argv[i], "--quick") == 0) quick = 1;
    else if (strcmp(argv[i], "--shim-space") == 0) shim_space = 1; /* the default */
    else if (strcmp(argv[i], "--full-space") == 0) shim_space = 0;
    else if (strcmp(argv[i], "--version") == 0 && i + 1 < argc) version = atoi(argv[++i]);
    else if (strcmp(argv[i], "--seeds") == 0 && i + 1 < argc) seeds = atoi(argv[++i]);
    else if (strcmp(argv[i], "--noise") == 0 && i + 1 < argc &&
             sscanf(argv[++i], "%lf,%lf", &noise_sigma, &noise_outliers) == 2) {
    }
    else if (strcmp(argv[i], "--lag") == 0 && i + 1 < argc) lag = atoi(argv[++i]);
    else if (strcmp(argv[i], "--cell") == 0 && i + 1 < argc &&
             sscanf(argv[++i], "%d,%zu,%d,%lf,%d", &only_coll, &only_bytes, &only_nodes, &only_phi,
                    &only_seed) == 5)
      ah_log_set_level(AH_LOG_DEBUG); /* one cell, with the engine's decisions logged */
    else {
      fprintf(stderr, "usage: tuner_quality [--csv PATH] [--quick] [--lag CALLS] [--shim-space | --full-space] [--version CODE] [--seeds N] [--noise SIGMA,OUTLIERS] [--cell COLL,BYTES,NODES,PHI,SEED]\n"
                      "  COLL: 0 broadcast, 1 reduce, 2 allgather, 3 reducescatter, 4 allreduce\n");
      return 2;
    }
  }
  FILE *csv = fopen(csv_path, "w");
  if (!csv) {
    perror(csv_path);
    return 2;
  }
  fprintf(csv, "coll,bytes,topo,phi,seed,default,default_us,optimum,optimum_us,tuned,tuned_us,"
               "quality,speedup,calls,probes,state,search_cost\n");
  static const int colls[] = {AH_FUNC_ALLREDUCE, AH_FUNC_ALLGATHER, AH_FUNC_REDUCESCATTER,
                              AH_FUNC_BROADCAST, AH_FUNC_REDUCE};
  static const int nodes[] = {1, 2, 4, 16};
  static const double phis[] = {0.0, 0.5, 0.8};
  int nseeds = quick ? 1 : (seeds < 1 ? 1 : seeds);
  int maxcells = 5 * 11 * 4 * 3 * nseeds;
  double *q = malloc(sizeof(double) * (size_t)maxcells);
  double *calls = malloc(sizeof(double) * (size_t)maxcells);
  double *extra = malloc(sizeof(double) * (size_t)maxcells);
  double log_speedup = 0.0;
  int ncells = 0, nslower = 0, nskipped = 0;
  clock_t t0 = clock();
  for (int ti = 0; ti < 4; ti++) {
    char spec[64], err[256];
    snprintf(spec, sizeof(spec), "nodes=%d,gpus=8,gpu=h100", nodes[ti]);
    sim_topo_t topo;
    if (sim_topo_parse(spec, nodes[ti] * 8, &topo, err, sizeof(err)) != 0) {
      fprintf(stderr, "tuner_quality: %s\n", err);
      return 2;
    }
    if (version > 0) topo.version = version; /* e.g. 23007: NCCL 2.30, per-call chunk (tuner v6) */
    static sim_model_t m;
    sim_model_init(&m, &topo, 0, 0);
    for (int ci = 0; ci < 5; ci++) {
      for (size_t bytes = 1024; bytes <= ((size_t)1 << 30); bytes *= 4) {
        if (only_coll >= 0 && (colls[ci] != only_coll || bytes != only_bytes || nodes[ti] != only_nodes))
          continue;
        if (quick && bytes != 1024 && bytes != ((size_t)1 << 20) && bytes != ((size_t)1 << 30)) continue;
        /* The space: what NCCL allows for this call. */
        float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
        sim_model_cost_table(&m, colls[ci], bytes, 1, table);
        ah_space_t sp;
        memset(&sp, 0, sizeof(sp));
        for (int a = 0; a < SIM_NUM_ALGOS; a++)
          for (int p = 0; p < SIM_NUM_PROTOS; p++)
            if (table[a][p] >= 0) {
              sp.sub[sp.nsub].algo = (int8_t)a;
              sp.sub[sp.nsub].proto = (int8_t)p;
              sp.nsub++;
            }
        int maxch = m.nchannels > m.nvls_channels ? m.nchannels : m.nvls_channels;
        if (maxch > AH_MAX_DIM_VALUES) maxch = AH_MAX_DIM_VALUES;
        sp.ndims = 1;
        if (shim_space) { /* the shim's channel list (shim/shim_decide.c): it cannot know the
                           * communicator's count, so the list runs past it to NCCL's limit */
          static const int64_t ch[] = {1, 2, 4, 8, 12, 16, 24, 32, 48, 64};
          int shim_max = m.topo.version >= 22500 ? 64 : 32;
          for (int i = 0; i < 10 && ch[i] <= shim_max; i++) sp.dims[0].values[sp.dims[0].nvalues++] = ch[i];
        } else {
          sp.dims[0].nvalues = maxch;
          for (int i = 0; i < maxch; i++) sp.dims[0].values[i] = i + 1;
        }
        if (m.topo.version >= 23000) { /* per-call chunk (tuner v6) */
          sp.ndims = 2;
          if (shim_space) { /* the shim's chunk list: 64 KiB .. 4 MiB */
            sp.dims[1].nvalues = 7;
            for (int i = 0; i < 7; i++) sp.dims[1].values[i] = (int64_t)65536 << i;
          } else {
            sp.dims[1].nvalues = 13;
            for (int i = 0; i < 13; i++) sp.dims[1].values[i] = (int64_t)1024 << i;
          }
        }
        for (int pi = 0; pi < 3; pi++) {
          if (only_coll >= 0 && fabs(phis[pi] - only_phi) > 1e-9) continue;
          sim_optimum_t opt;
          if (sp.nsub == 0 || sim_model_optimum(&m, colls[ci], bytes, phis[pi], &opt) != 0) {
            nskipped++;
            continue;
          }
          sp.start.algo = (int8_t)opt.def.algo;
          sp.start.proto = (int8_t)opt.def.proto;
          sp.start.ndims = sp.ndims;
          sp.start.res[0] = shim_space ? 0 : opt.def.nchannels;
          if (sp.ndims > 1) sp.start.res[1] = shim_space ? 0 : (int64_t)opt.def.chunk;
          cell_t cell = {&m, colls[ci], bytes, phis[pi], sp.ndims};
          for (int seed = 1; seed <= nseeds; seed++) {
            if (only_coll >= 0 && seed != only_seed) continue;
            ah_tune_params_t prm;
            ah_tune_params_default(&prm);
            prm.seed = (uint64_t)seed;
            ah_tune_t *t = ah_tune_create(&sp, &prm);
            if (!t) return 2;
            tune_drive_opts_t o;
            tune_drive_opts_default(&o);
            o.seed = (uint64_t)seed * 1000003 + (uint64_t)((ti * 5 + ci) * 64 + pi * 16) + bytes;
            o.noise = cell_noise;
            o.lag = lag < 0 ? 0 : lag;
            o.max_calls = 2000;
            tune_drive_result_t r;
            tune_drive_run(t, cell_time, &cell, &o, &r);
            ah_tune_status_t st;
            ah_tune_status(t, &st);
            sim_config_t tuned;
            cell_sim_config(&cell, &r.final, &tuned);
            double tuned_us = cell_time(&cell, &r.final, 0);
            double qq = opt.best_us / tuned_us;
            double sp_up = opt.def_us / tuned_us;
            uint64_t cc = r.pinned_at == UINT64_MAX ? r.calls : r.pinned_at;
            if (tuned_us > opt.def_us * (1.0 + SLOWER_TOL)) nslower++;
            q[ncells] = qq;
            calls[ncells] = (double)cc;
            /* The search's cost: its calls' time over what NCCL's default would have taken, in
             * default calls. */
            extra[ncells] = r.search_us / opt.def_us - (double)cc;
            log_speedup += log(sp_up);
            char bd[64], bb[64], bt[64];
            fmt_sim(&opt.def, bd, sizeof(bd));
            fmt_sim(&opt.best, bb, sizeof(bb));
            fmt_sim(&tuned, bt, sizeof(bt));
            fprintf(csv, "%s,%zu,%dx8,%.1f,%d,%s,%.3f,%s,%.3f,%s,%.3f,%.4f,%.4f,%llu,%d,%d,%.1f\n",
                    sim_model_coll_name(colls[ci]), bytes, nodes[ti], phis[pi], seed, bd, opt.def_us,
                    bb, opt.best_us, bt, tuned_us, qq, sp_up, (unsigned long long)cc, st.probes,
                    st.state, extra[ncells]);
            ncells++;
            ah_tune_destroy(t);
          }
        }
      }
    }
  }
  fclose(csv);
  double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
  double geo = ncells ? exp(log_speedup / ncells) : NAN;
  double maxc = 0;
  for (int i = 0; i < ncells; i++)
    if (calls[i] > maxc) maxc = calls[i];
  double med_q = quantile(q, ncells, 0.5), p5_q = quantile(q, ncells, 0.05);
  double med_c = quantile(calls, ncells, 0.5);
  double med_x = quantile(extra, ncells, 0.5), p95_x = quantile(extra, ncells, 0.95);
  int ok = ncells > 0 && med_q >= BAR_MEDIAN_Q && p5_q >= BAR_P5_Q && med_c <= BAR_MEDIAN_CALLS &&
           maxc <= BAR_MAX_CALLS && nslower == 0;
  printf("tuner_quality: %d cells (%d skipped) in %.1f s, noise sigma %.3f with %.3f outliers at "
         "1.5x, results reported %d calls late, per-cell CSV in %s\n", ncells, nskipped, secs,
         noise_sigma, noise_outliers, lag, csv_path);
  printf("tuner_quality: search cost (extra time over NCCL's default while searching, in default "
         "calls) median %.1f p95 %.1f\n", med_x, p95_x);
  printf("tuner_quality (sim/ truth model): optimum/tuned median %.4f (bar >= %.2f) p5 %.4f (bar >= "
         "%.2f); calls to converge median %.0f (bar <= %d) max %.0f (bar <= %d); slower than "
         "default by >1%%: %d/%d keys (bar 0); geomean speedup over default %.4fx %s\n",
         med_q, BAR_MEDIAN_Q, p5_q, BAR_P5_Q, med_c, BAR_MEDIAN_CALLS, maxc, BAR_MAX_CALLS, nslower,
         ncells, geo, ok ? "OK" : "FAILED");
  free(q);
  free(calls);
  free(extra);
  return ok ? 0 : 1;
}
