/* The truth model (docs/sim.md): how long a collective takes with a given
 * configuration and interference, the seeded noise around it, and the exhaustive optimum tuners
 * are scored against. The key choice: time is a sum of a one-time latency (NCCL's own formula),
 * CTA admission, a bandwidth term that is the slower of the links and the CTAs, a per-loop
 * handshake cost that falls with chunk size and a pipeline-fill cost that rises with it. That
 * gives one sweet spot per (algorithm, protocol) along channels, threads and chunk, which
 * interference moves toward fewer channels, and it differs from NCCL's cost table where NCCL
 * mispredicts (interference, chunk, tree pipelining). It never reads the tuner-editable tables. */
#include <math.h>
#include <string.h>

#include "sim_model_heldout.h"
#include "sim_model_internal.h"

typedef struct {
  double tau, bw; /* bytes moved per byte of the call, over a link of bw GB/s */
} sim_path_t;

/* Per-protocol constants: per-CTA GB/s at 640 threads, thread half-saturation, share of CTA
 * throughput interference takes, protocol efficiency on the wire, per-step handshake (NVLink,
 * network) and per-warp barrier cost. */
typedef struct {
  double b_cta, h, mu, w, a_nvl, a_net, a_warp;
} sim_proto_k_t;

static sim_proto_k_t proto_k(const sim_model_t *m, int p) {
  /* mu is 0: a per-CTA tax would make interference want MORE channels (each slower CTA moves
   * less), the opposite of what AutoCCL observes; interference acts through eta_c (many CTAs
   * thrash L2 and the fabric), the per-step handshakes and CTA admission instead. */
  static const sim_proto_k_t h100[3] = {{10, 96, 0, .5, .3, 1.0, .004},
                                        {40, 160, 0, .9375, .6, 1.5, .01},
                                        {32, 128, 0, 1.0, 1.0, 3.0, .02}};
  sim_proto_k_t k = h100[p];
  if (m->topo.gpu == SIM_GPU_A100) {
    k.b_cta *=
        p == AH_PROTO_LL128 ? 22.0 / 40 : 18.0 / 32; /* NCCL's Ampere/Hopper per-channel ratio */
    k.a_nvl *= 1.2;
    k.a_net *= 1.2;
  }
  return k;
}

/* The busiest path of each kind the algorithm drives. Returns the number of paths. */
static int paths(const sim_model_t *m, int coll, int a, sim_path_t *pp) {
  const sim_topo_t *t = &m->topo;
  int n = t->nranks, N = t->nnodes, q = t->ranks_per_node, k = 0;
  int ar = coll == AH_FUNC_ALLREDUCE;
  double nvl = t->nvl_gbps, net = t->nic_count * t->nic_gbps, eta = 0.85;
  double ring_tau = ar ? 2.0 * (n - 1) / n
                    : (coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER)
                        ? (double)(n - 1) / n
                        : 1.0;
  switch (a) {
    case AH_ALGO_RING:
      pp[k++] = (sim_path_t){ring_tau, nvl};
      if (N > 1) pp[k++] = (sim_path_t){ring_tau, 0.94 * net};
      break;
    case AH_ALGO_TREE:
      pp[k++] = (sim_path_t){2.0, 0.92 * nvl};
      if (N > 1) pp[k++] = (sim_path_t){N == 2 ? 1.0 : 2.0, 0.92 * net};
      break;
    case AH_ALGO_NVLS:
      pp[k++] = (sim_path_t){ar ? (double)(n + 1) / n : (double)(n - 1) / n, eta * nvl};
      if (N > 1) pp[k++] = (sim_path_t){1.0, net};
      break;
    case AH_ALGO_NVLS_TREE:
      pp[k++] = (sim_path_t){(double)(q + 1) / q, 0.9 * eta * nvl};
      pp[k++] = (sim_path_t){N == 2 ? 1.0 : 2.0, net};
      break;
    case AH_ALGO_PAT: pp[k++] = (sim_path_t){(double)(n - 1) / n, 0.75 * net}; break;
    case AH_ALGO_COLLNET_DIRECT:
      pp[k++] = (sim_path_t){ar ? (double)(q + 1) / q : (double)(n - 1) / n, nvl};
      pp[k++] = (sim_path_t){ar ? 1.0 : (double)(N - 1) / N, 0.9 * net};
      break;
    default: /* CollNetChain */
      pp[k++] = (sim_path_t){2.0, 0.92 * nvl};
      pp[k++] = (sim_path_t){1.0, 0.9 * net};
      break;
  }
  return k;
}

/* Pipeline shape: u ranks share the data per loop, k steps per loop, d fill depth, and the share
 * of steps that cross the network. */
static void pipeline(const sim_model_t *m, int coll, int a, double *u_p, double *k_p, double *d_p,
                     double *fnet_p) {
  const sim_topo_t *t = &m->topo;
  int n = t->nranks, N = t->nnodes, q = t->ranks_per_node, l2 = sim_log2_ceil(N);
  int ar = coll == AH_FUNC_ALLREDUCE,
      agrs = coll == AH_FUNC_ALLGATHER || coll == AH_FUNC_REDUCESCATTER;
  double u = n, k = 2, d = 2, f = 0;
  switch (a) {
    case AH_ALGO_RING:
      if (ar || agrs) {
        k = ar ? 2.0 * (n - 1) : n - 1;
        f = N > 1 ? (ar ? 2.0 * (N - 1) : N - 1) / k : 0;
      } else { /* Broadcast, Reduce: a chain */
        u = 1;
        k = 1;
        d = n - 1 > 1 ? n - 1 : 2;
        f = N > 1 ? (double)(N - 1) / (n - 1) : 0;
      }
      break;
    case AH_ALGO_TREE:
      u = 1;
      d = 2.0 * ((q - 1) + l2);
      f = N > 1 ? (double)l2 / ((q - 1) + l2) : 0;
      break;
    case AH_ALGO_NVLS:
    case AH_ALGO_NVLS_TREE:
      d = 2 + 2 * l2;
      f = N > 1 ? (double)l2 / (1 + l2) : 0;
      break;
    case AH_ALGO_PAT:
      k = sim_log2_ceil(n) > 0 ? sim_log2_ceil(n) : 1;
      f = 1;
      break;
    case AH_ALGO_COLLNET_DIRECT:
      u = 1;
      d = 4;
      f = 0.5;
      break;
    default:
      u = 1;
      d = 2.0 * (q - 1) + 2;
      f = 0.5;
      break;
  }
  if (d < 2) d = 2;
  *u_p = u;
  *k_p = k;
  *d_p = d;
  *fnet_p = f;
}

static int clamp_threads(int nt, int a, int p) {
  nt = nt / 32 * 32;
  int lo = p == AH_PROTO_LL128 ? 160 : 64,
      hi = p == AH_PROTO_SIMPLE && a == AH_ALGO_RING ? 544 : 640;
  return nt < lo ? lo : nt > hi ? hi : nt;
}

/* The development truth's parts of one call that can run (supported, nbytes > 0, nranks > 1),
 * phi in [0, 0.99], nc the channels it really runs. */
static void dev_parts(const sim_model_t *m, int coll, size_t nbytes, const sim_config_t *cfg,
                      double phi, int nc, sim_time_parts_t *pt) {
  const sim_topo_t *t = &m->topo;
  int a = cfg->algo, p = cfg->proto;
  double S = (double)nbytes;
  int nt = cfg->nthreads > 0 ? clamp_threads(cfg->nthreads, a, p) : m->nthreads[a][p];
  size_t C = cfg->chunk ? cfg->chunk : sim_model_default_chunk(m, coll, nbytes, a, p, nc);
  ah_tuner_constants_v5_t k0;
  sim_model_default_constants(&k0, t->version);
  double L = sim_model_nccl_latency(m, &k0, coll, a, p, nbytes);
  sim_proto_k_t pk = proto_k(m, p);

  /* Bandwidth: the slower of the links and the CTAs. */
  double bcta = pk.b_cta * (nt / (nt + pk.h)) / (640.0 / (640.0 + pk.h)) * (1 - pk.mu * phi);
  double eta_c = 1.0 / (1.0 + 0.5 * phi * (nc / 16.0) * (nc / 16.0));
  double cap = INFINITY, cap_nvl = INFINITY;
  if (p == AH_PROTO_LL) {
    cap_nvl = t->gpu == SIM_GPU_A100 ? 87.7 : 141.0;
    cap = t->nnodes <= 1   ? cap_nvl
          : t->nnodes == 2 ? (t->cpu_amd ? 22.5 : 39.0)
                           : (t->cpu_amd ? 19.0 : 20.4);
  }
  sim_path_t pp[4];
  int np = paths(m, coll, a, pp);
  double t_link = 0, tau_max = 0;
  for (int j = 0; j < np; j++) {
    double bw = fmin(pk.w * pp[j].bw, cap) * eta_c;
    double tj = pp[j].tau * S / (1000.0 * bw);
    if (tj > t_link) t_link = tj;
    if (pp[j].tau > tau_max) tau_max = pp[j].tau;
  }
  double t_sm = tau_max * S / (1000.0 * nc * bcta);

  /* Pipeline: per-loop handshakes against fill. */
  double u, ks, d, fnet;
  pipeline(m, coll, a, &u, &ks, &d, &fnet);
  double cmax = S / (u * nc), cc = (double)C;
  if (cc > cmax) cc = cmax;
  if (cc < (double)sim_model_grain(p)) cc = (double)sim_model_grain(p);
  double loops = S / (u * nc * cc);
  double alpha =
      ((1 - fnet) * pk.a_nvl + fnet * (pk.a_net + 0.05 * nc) + pk.a_warp * nt / 32.0) * (1 + phi);
  double t_ovh = fmax(0.0, loops - 1) * ks * alpha;
  /* The pipeline fills stage by stage, one slice per stage on every channel, each channel at the
   * slower of its share of the links (NVLink stages at NVLink's, network stages at the network's)
   * and its CTA. Stages pass slices, not whole chunks: Simple moves a chunk as 2 slices (NCCL's
   * ring slicing); LL and LL128 flag every line, so their data follows at a fraction of a chunk. */
  double b_nvl = fmin(pk.w * pp[0].bw, cap_nvl) * eta_c,
         b_net = np > 1 ? fmin(pk.w * pp[1].bw, cap) * eta_c : b_nvl;
  double link_s_per_byte = (1 - fnet) / b_nvl + fnet / b_net; /* per GB/s, all channels */
  double chan_s_per_byte = fmax(nc * link_s_per_byte, 1.0 / bcta);
  double slices = p == AH_PROTO_SIMPLE ? 2.0 : 8.0;
  double t_fill = (d - 1) * fmin(cc, S / (u * nc)) / slices * chan_s_per_byte / 1000.0;
  double t_adm = 0.08 * nc + phi * 15.0 * nc / (nc + 4.0);
  *pt = (sim_time_parts_t){L, t_adm, t_link, t_sm, t_ovh, t_fill, fnet};
}

void sim_model_truth_set(sim_model_t *m, int heldout, uint64_t seed) {
  m->truth_heldout = heldout != 0;
  m->truth_seed = heldout ? seed : 0;
}

double sim_model_time_at_us(const sim_model_t *m, int coll, size_t nbytes, const sim_config_t *cfg,
                            double phi, uint64_t call) {
  const sim_topo_t *t = &m->topo;
  int p = cfg->proto;
  if (!sim_model_supported(m, coll, cfg->algo, p)) return -1.0;
  if (nbytes == 0) return 0.0;
  if (t->nranks <= 1) return 2.0 + (double)nbytes / (1000.0 * 1500.0); /* a local copy in HBM */
  if (!(phi >= 0)) phi = 0;
  if (phi > 0.99) phi = 0.99;
  int nc = cfg->nchannels < 1                  ? 1
           : cfg->nchannels > SIM_MAX_CHANNELS ? SIM_MAX_CHANNELS
                                               : cfg->nchannels;
  nc = sim_model_traffic_channels(coll, p, nbytes, nc);
  sim_time_parts_t pt;
  if (!m->truth_heldout) {
    dev_parts(m, coll, nbytes, cfg, phi, nc, &pt);
    return pt.lat + pt.adm + fmax(pt.link, pt.sm) + pt.ovh + pt.fill;
  }
  /* A held-out member: the development parts on the links as they are at this call (the drift),
   * perturbed by sim_model_heldout.c. */
  sim_heldout_t h;
  sim_heldout_draw(m->truth_seed, &h);
  double nic, nvl;
  sim_heldout_links(&h, call, &nic, &nvl);
  if (nic != 1.0 || nvl != 1.0) {
    static _Thread_local sim_model_t drifted; /* 2.4 KB: kept off the stack */
    drifted = *m;
    drifted.topo.nic_gbps *= nic;
    drifted.topo.nvl_gbps *= nvl;
    dev_parts(&drifted, coll, nbytes, cfg, phi, nc, &pt);
  } else {
    dev_parts(m, coll, nbytes, cfg, phi, nc, &pt);
  }
  return sim_heldout_time_us(&h, m, coll, nbytes, cfg, nc, &pt);
}

double sim_model_time_us(const sim_model_t *m, int coll, size_t nbytes, const sim_config_t *cfg,
                         double phi) {
  return sim_model_time_at_us(m, coll, nbytes, cfg, phi, UINT64_MAX);
}

/* splitmix64: small, seedable, and the same sequence on every platform. */
static uint64_t next_u64(uint64_t *s) {
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static double next_unit(uint64_t *s) {
  return ((double)(next_u64(s) >> 11) + 0.5) / 9007199254740992.0;
}

double sim_model_noise(double us, double sigma, double outlier_rate, uint64_t *state) {
  double u1 = next_unit(state), u2 = next_unit(state), u3 = next_unit(state);
  double z = sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
  double f = sigma > 0 ? exp(sigma * z) : 1.0;
  if (u3 < outlier_rate) f *= 1.5;
  return us * f;
}

double sim_model_truth_noise(const sim_model_t *m, double us, double sigma, double outlier_rate,
                             uint64_t key, uint64_t call, uint64_t *state) {
  if (!m->truth_heldout) return sim_model_noise(us, sigma, outlier_rate, state);
  sim_heldout_t h;
  sim_heldout_draw(m->truth_seed, &h);
  return sim_heldout_noise(&h, us, sigma, outlier_rate, key, call);
}

int sim_model_optimum(const sim_model_t *m, int coll, size_t nbytes, double phi,
                      sim_optimum_t *out_p) {
  float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  sim_model_cost_table(m, coll, nbytes, 1, table);
  sim_optimum_t o;
  memset(&o, 0, sizeof o);
  if (sim_model_select(m, coll, nbytes, table, 0, 0, &o.def) != 0) return -1;
  o.def_us = sim_model_time_us(m, coll, nbytes, &o.def, phi);
  o.best = o.def;
  o.best_us = o.def_us;
  int per_call_chunk = m->topo.version >= 23000;
  for (int a = 0; a < SIM_NUM_ALGOS; a++) {
    for (int p = 0; p < SIM_NUM_PROTOS; p++) {
      if (table[a][p] < 0) continue; /* what a v3+ tuner can pick: the non-negative cells */
      int cap = a == AH_ALGO_NVLS || a == AH_ALGO_NVLS_TREE ? m->nvls_channels : m->nchannels;
      for (int nc = 1; nc <= cap; nc++) {
        sim_config_t cfg;
        sim_model_config_for(m, coll, nbytes, a, p, nc, 0, &cfg);
        if (cfg.nchannels != nc) break; /* NCCL's traffic rule: more channels are not used */
        size_t most = sim_model_max_chunk(m, a, p);
        for (size_t c = per_call_chunk ? 1024 : 0;; c = c ? c * 2 : 0) {
          if (c) sim_model_config_for(m, coll, nbytes, a, p, nc, c > most ? most : c, &cfg);
          double us = sim_model_time_us(m, coll, nbytes, &cfg, phi);
          if (us >= 0 && us < o.best_us) {
            o.best = cfg;
            o.best_us = us;
          }
          if (!c || c >= most) break;
        }
      }
    }
  }
  *out_p = o;
  return 0;
}
