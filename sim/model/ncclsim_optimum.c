/* ncclsim-optimum: the fastest configuration of one collective call in sim/'s truth model, found
 * by exhaustive enumeration (sim_model_optimum), next to NCCL's default and its time. Benchmarks
 * score a tuner by how close it gets. The key choice: it reads the same NCCL_* environment a sim/
 * job reads, so its default is the default the job would run, and the truth NCCLSIM_TRUTH selects
 * (dev, or a held-out member heldout:SEED), so its optimum is the one that job is timed against.
 *
 * Usage: ncclsim-optimum [-t TOPO] [-c COLL] [-b BYTES] [-p PHI] [-v VERSION] [-j]
 * BYTES takes K/M/G suffixes (powers of 1024) and is NCCL's nBytes (the whole buffer for
 * AllGather/ReduceScatter). Exit status 0 on success, 2 on bad arguments. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "sim_model.h"
#include "sim_model_heldout.h"

static int parse_size(const char *s, size_t *out_p) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || !(v >= 0)) return -1;
  double mul = 1;
  if (*end == 'K' || *end == 'k') mul = 1024.0, end++;
  else if (*end == 'M' || *end == 'm') mul = 1048576.0, end++;
  else if (*end == 'G' || *end == 'g') mul = 1073741824.0, end++;
  if (*end == 'B' || *end == 'b') end++;
  if (*end || v * mul > 1e15) return -1;
  *out_p = (size_t)(v * mul);
  return 0;
}

static int parse_version(const char *s, int *code_p) {
  unsigned a, b, c = 0;
  char tail;
  if (sscanf(s, "%u.%u.%u%c", &a, &b, &c, &tail) == 3 || sscanf(s, "%u.%u%c", &a, &b, &tail) == 2) {
    if (a != 2 || b > 99 || c > 99) return -1;
    *code_p = (int)(a * 10000 + b * 100 + c);
    return 0;
  }
  return -1;
}

static int parse_coll(const char *s) {
  for (int c = 0; c < AH_NUM_FUNCTIONS; c++)
    if (strcasecmp(s, sim_model_coll_name(c)) == 0) return c;
  return -1;
}

static void print_cfg(const char *label, const sim_config_t *c, double us, int json) {
  if (json)
    printf(
        "\"%s\": {\"algo\": \"%s\", \"proto\": \"%s\", \"nchannels\": %d, \"nthreads\": %d, "
        "\"chunk\": %zu, \"time_us\": %.3f}",
        label, sim_model_algo_name(c->algo), sim_model_proto_name(c->proto), c->nchannels,
        c->nthreads, c->chunk, us);
  else
    printf("%-8s %s/%s nchannels=%d nthreads=%d chunk=%zu time_us=%.3f\n", label,
           sim_model_algo_name(c->algo), sim_model_proto_name(c->proto), c->nchannels, c->nthreads,
           c->chunk, us);
}

static void usage(FILE *f) {
  fprintf(
      f,
      "usage: ncclsim-optimum [-t TOPO] [-c COLL] [-b BYTES] [-p PHI] [-v VERSION] [-j]\n"
      "  -t TOPO     topology, as NCCLSIM_TOPO (default: $NCCLSIM_TOPO or nodes=1,gpus=8,gpu=h100)\n"
      "  -c COLL     AllReduce (default), AllGather, ReduceScatter, Broadcast, Reduce\n"
      "  -b BYTES    NCCL's nBytes, with K/M/G suffixes (default 1G)\n"
      "  -p PHI      interference 0 <= phi < 1 (default 0)\n"
      "  -v VERSION  emulated NCCL version, e.g. 2.30 (default $NCCLSIM_VERSION or 2.28.9)\n"
      "  -j          print JSON\n"
      "  NCCLSIM_TRUTH=dev|heldout:SEED selects the truth (default dev)\n");
}

int main(int argc, char **argv) {
  const char *topo_spec = getenv("NCCLSIM_TOPO");
  if (!topo_spec || !*topo_spec) topo_spec = "nodes=1,gpus=8,gpu=h100";
  int coll = AH_FUNC_ALLREDUCE, version = 22809, json = 0, opt;
  size_t bytes = (size_t)1 << 30;
  double phi = 0;
  const char *env_version = getenv("NCCLSIM_VERSION");
  if (env_version && *env_version && parse_version(env_version, &version)) {
    fprintf(stderr, "ncclsim-optimum: invalid value for NCCLSIM_VERSION: '%s' (expected 2.X[.Y])\n",
            env_version);
    return 2;
  }
  while ((opt = getopt(argc, argv, "t:c:b:p:v:jh")) != -1) {
    switch (opt) {
      case 't': topo_spec = optarg; break;
      case 'c':
        if ((coll = parse_coll(optarg)) < 0) {
          fprintf(stderr, "ncclsim-optimum: unknown collective '%s'\n", optarg);
          return 2;
        }
        break;
      case 'b':
        if (parse_size(optarg, &bytes)) {
          fprintf(stderr, "ncclsim-optimum: invalid size '%s' (expected e.g. 4096, 64K, 1G)\n",
                  optarg);
          return 2;
        }
        break;
      case 'p': {
        char *end;
        phi = strtod(optarg, &end);
        if (*end || !(phi >= 0 && phi < 1)) {
          fprintf(stderr, "ncclsim-optimum: invalid interference '%s' (expected 0 <= phi < 1)\n",
                  optarg);
          return 2;
        }
        break;
      }
      case 'v':
        if (parse_version(optarg, &version)) {
          fprintf(stderr, "ncclsim-optimum: invalid version '%s' (expected 2.X[.Y])\n", optarg);
          return 2;
        }
        break;
      case 'j': json = 1; break;
      case 'h': usage(stdout); return 0;
      default: usage(stderr); return 2;
    }
  }
  if (optind != argc) {
    usage(stderr);
    return 2;
  }
  sim_topo_t topo;
  char err[256];
  if (sim_topo_parse(topo_spec, 0, &topo, err, sizeof err)) {
    fprintf(stderr, "ncclsim-optimum: %s\n", err);
    return 2;
  }
  topo.version = version;
  sim_model_t *m = malloc(sizeof *m);
  if (!m) return 1;
  sim_model_init(m, &topo, 0, 0);
  if (m->error[0]) fprintf(stderr, "ncclsim-optimum: %s\n", m->error);
  sim_truth_sel_t truth = {0, 0};
  char terr[200];
  if (sim_truth_parse(getenv("NCCLSIM_TRUTH"), &truth, terr, sizeof terr) != 0)
    fprintf(stderr, "ncclsim-optimum: %s; using dev\n", terr); /* truth stays dev */
  sim_model_truth_set(m, truth.heldout, truth.seed);
  sim_optimum_t o;
  if (sim_model_optimum(m, coll, bytes, phi, &o)) {
    fprintf(
        stderr,
        "ncclsim-optimum: no algorithm/protocol is enabled for %s (check NCCL_ALGO/NCCL_PROTO)\n",
        sim_model_coll_name(coll));
    free(m);
    return 1;
  }
  if (json) {
    printf(
        "{\"coll\": \"%s\", \"bytes\": %zu, \"nranks\": %d, \"nnodes\": %d, \"phi\": %g, "
        "\"version\": %d, \"truth\": \"%s\", \"truth_seed\": %llu, ",
        sim_model_coll_name(coll), bytes, m->topo.nranks, m->topo.nnodes, phi, version,
        truth.heldout ? "heldout" : "dev", (unsigned long long)truth.seed);
    print_cfg("best", &o.best, o.best_us, 1);
    printf(", ");
    print_cfg("default", &o.def, o.def_us, 1);
    printf(", \"speedup\": %.4f}\n", o.best_us > 0 ? o.def_us / o.best_us : 1.0);
  } else {
    printf("%s of %zu bytes on %d ranks (%d nodes), phi=%g, NCCL %d, truth %s:%llu\n",
           sim_model_coll_name(coll), bytes, m->topo.nranks, m->topo.nnodes, phi, version,
           truth.heldout ? "heldout" : "dev", (unsigned long long)truth.seed);
    print_cfg("best", &o.best, o.best_us, 0);
    print_cfg("default", &o.def, o.def_us, 0);
    printf("speedup  %.4f\n", o.best_us > 0 ? o.def_us / o.best_us : 1.0);
  }
  free(m);
  return 0;
}
