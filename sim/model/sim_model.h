/* sim_model.h: sim/'s timing model as pure functions (no NCCL runtime, no CUDA, no I/O beyond
 * parsing a topology string or file). Two models live behind this one interface:
 *
 *   - NCCL's own cost model (NCCL's src/graph/tuning.cc, docs/sim.md): the cost table NCCL fills at group
 *     launch, and the default configuration NCCL derives from it (argmin, per-size channel and
 *     thread reduction, chunk rules), honouring NCCL_ALGO/NCCL_PROTO/... as the emulated version does.
 *   - The truth model (docs/sim.md): how long a collective really takes with a given
 *     configuration, interference and noise. The tuner is scored against it.
 *
 * They differ on purpose where NCCL's model is known to mispredict (docs/sim.md). libncclsim.so,
 * ncclsim-optimum, the calibration tests and bench/tuner_quality all link this one static library
 * (ncclsim_model), so the numbers a tuner sees in a sim/ job and in a benchmark harness are the
 * same numbers. */
#ifndef SIM_MODEL_H
#define SIM_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "autoha/nccl_tuner_abi.h" /* AH_ALGO_*, AH_PROTO_*, AH_FUNC_* numbering */

#define SIM_NUM_ALGOS AH_NUM_ALGOS
#define SIM_NUM_PROTOS AH_NUM_PROTOS
#define SIM_MAX_CHANNELS 64

/* Hardware and placement of one communicator. */
typedef struct {
  int nranks, nnodes, ranks_per_node;
  int gpu; /* SIM_GPU_H100, SIM_GPU_A100 */
  int nic_count;
  double nic_gbps;  /* per NIC, GB/s */
  double nvl_gbps;  /* per-GPU NVLink bandwidth (GB/s) */
  int nvls;         /* NVLink SHARP available (H100, >= 2 local ranks) */
  int collnet;      /* CollNet (SHARP) available */
  int version;      /* emulated NCCL version code, e.g. 22809 */
  int nchannels;    /* channels set up at init (NCCL's ring/tree channel count) */
  int max_channels; /* upper bound the tuner may not exceed */
  /* ... the implementation may add fields; callers fill a topo only through sim_topo_* */
  int cpu_amd;          /* AMD host CPUs: NCCL's multi-node LL cap and net overhead differ */
  double net_lat_us;    /* NIC latency NCCL adds to every network hop (graph->latencyInter) */
  double nic_line_gbps; /* per NIC port, line rate in Gb/s (nic_gbps is this x 0.12 x ports) */
  int nic_ports;        /* ports per NIC: 1, or 2 for a dual-port NIC ("nic=8x400x2", "ports=2") */
  int ib;               /* link layer InfiniBand ("ib=1") instead of RoCE Ethernet */
  double reserved[14];
} sim_topo_t;

enum { SIM_GPU_H100 = 0, SIM_GPU_A100 = 1 };

/* One configuration of a collective call. chunk is payload bytes per chunk (0 = NCCL's rule). */
typedef struct {
  int algo, proto, nchannels, nthreads;
  size_t chunk;
} sim_config_t;

/* The communicator-level model state: topology plus the environment NCCL read at init
 * (NCCL_ALGO, NCCL_PROTO, NCCL_NTHREADS, NCCL_BUFFSIZE, NCCL_MIN/MAX_NCHANNELS, minCTAs/maxCTAs). */
typedef struct {
  sim_topo_t topo;
  int nchannels; /* channels after init clamps */
  int nthreads[SIM_NUM_ALGOS][SIM_NUM_PROTOS];
  size_t buffsize[SIM_NUM_PROTOS];
  unsigned char enabled[AH_NUM_FUNCTIONS][SIM_NUM_ALGOS][SIM_NUM_PROTOS]; /* NCCL_ALGO/PROTO */
  /* Implementation fields (added by issue 3; read them, fill them only through sim_model_*). */
  int nvls_channels;  /* channels NVLS/NVLSTree use (NCCL_NVLS_NCHANNELS) */
  int ring_graph_nch; /* topology search result: channels and per-channel GB/s */
  double ring_graph_bw_intra, ring_graph_bw_inter;
  int nvls_graph_nch;
  double nvls_graph_bw_intra, nvls_graph_bw_inter;
  ah_tuner_constants_v5_t consts; /* NCCL's tables; a v5+ tuner may edit them at init */
  char error[512];                /* bad NCCL_* values found by sim_model_init ("" when none) */
  uint64_t truth_seed;            /* the held-out member the truth runs (sim_model_truth_set) */
  int truth_heldout;              /* 0: the development truth (sim_model_init's) */
  int truth_pad;
  double reserved[30];
} sim_model_t;

/* Parses a topology spec ("nodes=2,gpus=8,gpu=h100,nic=8x400", or "file:PATH") for a communicator
 * of `nranks` ranks. Returns 0, or -1 with a message naming the bad text in err. */
int sim_topo_parse(const char *spec, int nranks, sim_topo_t *topo_p, char *err, size_t errlen);

/* Sets the placement of a parsed topology: the ranks, nodes and ranks per node a communicator
 * really has (sim/ learns them when every rank has joined). */
void sim_topo_set_layout(sim_topo_t *topo, int nranks, int nnodes, int ranks_per_node);

/* Builds the communicator's model from its topology, the emulated version and the environment
 * (getenv of NCCL_* variables) plus config minCTAs/maxCTAs (0 = unset). */
void sim_model_init(sim_model_t *m, const sim_topo_t *topo, int min_ctas, int max_ctas);

/* NCCL's tables as a v5+ tuner's init receives them, and storing the tuner's edits back: the
 * cost table then uses the edited values, as NCCL's ncclTopoTuneModel does after init. */
void sim_model_constants_get(const sim_model_t *m, ah_tuner_constants_v5_t *c_p);
void sim_model_constants_set(sim_model_t *m, const ah_tuner_constants_v5_t *c);

/* NCCL's cost table for (coll, nbytes in NCCL's convention, numPipeOps): estimated microseconds,
 * -1 for unsupported or disabled pairs. */
void sim_model_cost_table(const sim_model_t *m, int coll, size_t nbytes, int npipe,
                          float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS]);

/* NCCL's selection from a (possibly tuner-edited) table: argmin over non-negative cells, then
 * channels/threads/chunk by NCCL's rules, with tuner_nch (0 = none) as a cap from 2.22 on and
 * tuner_chunk (0 = none) clamped and grain-aligned as NCCL does. Returns 0, or -1 when every cell
 * is negative. */
int sim_model_select(const sim_model_t *m, int coll, size_t nbytes,
                     const float table[SIM_NUM_ALGOS][SIM_NUM_PROTOS], int tuner_nch,
                     size_t tuner_chunk, sim_config_t *cfg_p);

/* The truth: modelled microseconds of one call with configuration cfg under interference phi,
 * without noise. Returns a negative value for a configuration that cannot run. */
double sim_model_time_us(const sim_model_t *m, int coll, size_t nbytes, const sim_config_t *cfg,
                         double phi);

/* Selects the truth the model runs: the development truth (heldout 0, what sim_model_init
 * sets) or held-out member `seed` (sim/model/sim_model_heldout.h, NCCLSIM_TRUTH=heldout:SEED). */
void sim_model_truth_set(sim_model_t *m, int heldout, uint64_t seed);

/* The truth at call `call` of a job (the held-out family's links drift mid-job; the development
 * truth is the same at every call). sim_model_time_us is this at the end of the job
 * (call UINT64_MAX): what optima and scores are taken against. */
double sim_model_time_at_us(const sim_model_t *m, int coll, size_t nbytes, const sim_config_t *cfg,
                            double phi, uint64_t call);

/* The truth's noise on call `call` of call stream `key`: sim_model_noise with state for the
 * development truth, the held-out member's AR(1), call-site and outlier noise otherwise (a pure
 * function of seed, key and call; state is then left alone). */
double sim_model_truth_noise(const sim_model_t *m, double us, double sigma, double outlier_rate,
                             uint64_t key, uint64_t call, uint64_t *state);

/* Seeded noise: multiplies a time by LogNormal(0, sigma) with rare x1.5 outliers. state is a
 * caller-owned RNG state, so runs are reproducible. */
double sim_model_noise(double us, double sigma, double outlier_rate, uint64_t *state);

/* Ground truth for scoring tuners: the fastest legal configuration (algorithm, protocol,
 * channels 1..max_channels, and chunk where the emulated version takes a per-call chunk) by
 * exhaustive enumeration, its time, and NCCL's default configuration and its time.
 * Note that "legal" is what a tuner can reach: the cost-table cells NCCL leaves non-negative,
 * channels up to the communicator's count (NVLS/NVLSTree: its NVLS channels; NCCL_MIN_NCHANNELS
 * raises it up to 64), power-of-two chunks from 1 KiB to the buffer's limit from 2.30, and NCCL's
 * threads. Returns 0, or -1 when no cell is enabled. */
typedef struct {
  sim_config_t best, def;
  double best_us, def_us;
} sim_optimum_t;
int sim_model_optimum(const sim_model_t *m, int coll, size_t nbytes, double phi,
                      sim_optimum_t *out_p);

/* Whether (coll, algo, proto) can run on this topology at all (NCCL's support rules, ignoring
 * NCCL_ALGO/NCCL_PROTO). */
int sim_model_supported(const sim_model_t *m, int coll, int algo, int proto);

/* Names as NCCL prints them ("Ring", "LL128", "AllReduce"); "?" when out of range. */
const char *sim_model_algo_name(int algo);
const char *sim_model_proto_name(int proto);
const char *sim_model_coll_name(int coll);

#endif
