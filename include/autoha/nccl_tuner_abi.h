/* NCCL's tuner-plugin ABI, versions 1 to 7, as NCCL 2.19 ... 2.32 look it up with
 * dlsym(handle, "ncclTunerPlugin_vN"). The public nccl.h does not carry these types (NCCL ships
 * them with its plugin headers, src/include/plugin/tuner/tuner_vN.h), so they are declared here
 * with the same layouts. Both sim/ (which loads a tuner as NCCL does) and the
 * shim (which is one) use this header, so a layout mistake would show up as a test failure between
 * the two as well as against real NCCL.
 *
 * Note that the v3+ cost table is one contiguous float[numAlgo][numProto] passed as float**: index
 * it through AH_COST_TABLE(), never as an array of row pointers. */
#ifndef AUTOHA_NCCL_TUNER_ABI_H
#define AUTOHA_NCCL_TUNER_ABI_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ncclFunc_t: the collective types a tuner sees (NCCL_NUM_FUNCTIONS = 5). */
enum {
  AH_FUNC_BROADCAST = 0,
  AH_FUNC_REDUCE = 1,
  AH_FUNC_ALLGATHER = 2,
  AH_FUNC_REDUCESCATTER = 3,
  AH_FUNC_ALLREDUCE = 4,
  AH_NUM_FUNCTIONS = 5
};
typedef int ah_nccl_func_t;

enum {
  AH_ALGO_TREE = 0,
  AH_ALGO_RING = 1,
  AH_ALGO_COLLNET_DIRECT = 2,
  AH_ALGO_COLLNET_CHAIN = 3,
  AH_ALGO_NVLS = 4,
  AH_ALGO_NVLS_TREE = 5,
  AH_ALGO_PAT = 6,
  AH_NUM_ALGOS = 7
};
enum { AH_PROTO_LL = 0, AH_PROTO_LL128 = 1, AH_PROTO_SIMPLE = 2, AH_NUM_PROTOS = 3 };
#define AH_ALGO_UNDEF (-1)
#define AH_PROTO_UNDEF (-1)
/* Cost-table value of a pair NCCL cannot run (NCCL_ALGO_PROTO_IGNORE). Never overwrite it. */
#define AH_COST_IGNORE (-1.0f)

/* View of a v3+ cost table as float[..][numProto]. */
#define AH_COST_TABLE(table, num_proto) ((float(*)[(num_proto)])(void *)(table))

typedef enum {
  AH_NCCL_LOG_NONE = 0,
  AH_NCCL_LOG_VERSION = 1,
  AH_NCCL_LOG_WARN = 2,
  AH_NCCL_LOG_INFO = 3,
  AH_NCCL_LOG_ABORT = 4,
  AH_NCCL_LOG_TRACE = 5
} ah_nccl_log_level_t;
typedef void (*ah_nccl_logger_t)(ah_nccl_log_level_t level, unsigned long flags, const char *file,
                                 int line, const char *fmt, ...);

/* v1: NCCL 2.19, 2.20. No context: state is process-global. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ah_nccl_logger_t logFunction);
  ncclResult_t (*getCollInfo)(ah_nccl_func_t collType, size_t nBytes, int collNetSupport,
                              int nvlsSupport, int numPipeOps, int *algorithm, int *protocol,
                              int *nChannels);
  ncclResult_t (*destroy)(void);
} ah_tuner_v1_t;

/* v2: NCCL 2.21 (and 2.22-2.30 through NCCL's adapter). Per-communicator context. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ah_nccl_logger_t logFunction, void **context);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes,
                              int collNetSupport, int nvlsSupport, int numPipeOps, int *algorithm,
                              int *protocol, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ah_tuner_v2_t;

/* v3: NCCL 2.22, 2.23. The cost table replaces the algorithm/protocol out-parameters. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ah_nccl_logger_t logFunction, void **context);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                              float **collCostTable, int numAlgo, int numProto, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ah_tuner_v3_t;

/* v4: NCCL 2.24 - 2.27. Adds regBuff. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ah_nccl_logger_t logFunction, void **context);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                              float **collCostTable, int numAlgo, int numProto, int regBuff,
                              int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ah_tuner_v4_t;

/* v5 (2.28, 2.29) side structures. */
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ah_nvl_domain_info_v5_t;

#define AH_TUNER_NUM_HW 3      /* NVLINK, PCI, NET */
#define AH_TUNER_NUM_COMPCAP 4 /* Volta, Ampere, Hopper, Blackwell */
#define AH_TUNER_NUM_SCALE 3   /* 1 node, 2 nodes, 4+ nodes */
/* The constants' members with NCAP compute-capability rows (v5/v6: 4; v7: 5). */
#define AH_TUNER_CONSTANTS_MEMBERS(NCAP)                                                           \
  double baseLatencies[AH_NUM_ALGOS][AH_NUM_PROTOS];                                               \
  double hwLatencies[AH_TUNER_NUM_HW][AH_NUM_ALGOS][AH_NUM_PROTOS];                                \
  double llMaxBws[NCAP][AH_TUNER_NUM_SCALE];                                                       \
  double perChMaxRingLL128Bws[NCAP][AH_TUNER_NUM_SCALE];                                           \
  double perChMaxTreeLL128Bws[NCAP][AH_TUNER_NUM_SCALE];                                           \
  double perChMaxTreeBws[NCAP][AH_TUNER_NUM_SCALE];                                                \
  double perChMaxNVLSTreeBws[NCAP][AH_TUNER_NUM_SCALE];
typedef struct {
  AH_TUNER_CONSTANTS_MEMBERS(AH_TUNER_NUM_COMPCAP)
} ah_tuner_constants_v5_t;

/* v5: NCCL 2.28, 2.29. init gets the commId (NCCL's commHash); destroy is renamed finalize. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ah_nccl_logger_t logFunction, ah_nvl_domain_info_v5_t *nvlDomainInfo,
                       ah_tuner_constants_v5_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                              float **collCostTable, int numAlgo, int numProto, int regBuff,
                              int *nChannels);
  ncclResult_t (*finalize)(void *ctx);
} ah_tuner_v5_t;

/* v6: NCCL 2.30. Adds an optional per-call chunk size (in/out; NULL allowed). */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ah_nccl_logger_t logFunction, ah_nvl_domain_info_v5_t *nvlDomainInfo,
                       ah_tuner_constants_v5_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                              float **collCostTable, int numAlgo, int numProto, int regBuff,
                              int *nChannels);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*getChunkSize)(void *ctx, ah_nccl_func_t collType, size_t nBytes, int algorithm,
                               int protocol, int nChannels, size_t *chunkSize);
} ah_tuner_v6_t;

/* v7: NCCL 2.32.6+. v6's functions; the constants' bandwidth rows gain a fifth compute capability
 * (Rubin), so the struct is larger than v5's and the two are converted row by row. */
#define AH_TUNER_NUM_COMPCAP_V7 5
typedef struct {
  AH_TUNER_CONSTANTS_MEMBERS(AH_TUNER_NUM_COMPCAP_V7)
} ah_tuner_constants_v7_t;

typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ah_nccl_logger_t logFunction, ah_nvl_domain_info_v5_t *nvlDomainInfo,
                       ah_tuner_constants_v7_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ah_nccl_func_t collType, size_t nBytes, int numPipeOps,
                              float **collCostTable, int numAlgo, int numProto, int regBuff,
                              int *nChannels);
  ncclResult_t (*finalize)(void *ctx);
  ncclResult_t (*getChunkSize)(void *ctx, ah_nccl_func_t collType, size_t nBytes, int algorithm,
                               int protocol, int nChannels, size_t *chunkSize);
} ah_tuner_v7_t;

/* The v5 rows of a v7 table (the first four compute capabilities), and back: the fifth row is
 * left as it is in the v7 table (what NCCL put there). Each bandwidth table is [compcap][scale], so
 * v5's rows are the v7 table's leading bytes: one copy of v5's size per member, either way. */
#define AH_TUNER_CONSTANTS_COPY(D, S, K5)                                                          \
  do {                                                                                             \
    memcpy((D)->baseLatencies, (S)->baseLatencies, sizeof(K5)->baseLatencies);                     \
    memcpy((D)->hwLatencies, (S)->hwLatencies, sizeof(K5)->hwLatencies);                           \
    memcpy((D)->llMaxBws, (S)->llMaxBws, sizeof(K5)->llMaxBws);                                    \
    memcpy((D)->perChMaxRingLL128Bws, (S)->perChMaxRingLL128Bws,                                   \
           sizeof(K5)->perChMaxRingLL128Bws);                                                      \
    memcpy((D)->perChMaxTreeLL128Bws, (S)->perChMaxTreeLL128Bws,                                   \
           sizeof(K5)->perChMaxTreeLL128Bws);                                                      \
    memcpy((D)->perChMaxTreeBws, (S)->perChMaxTreeBws, sizeof(K5)->perChMaxTreeBws);               \
    memcpy((D)->perChMaxNVLSTreeBws, (S)->perChMaxNVLSTreeBws, sizeof(K5)->perChMaxNVLSTreeBws);   \
  } while (0)
static inline void ah_tuner_constants_v7_to_v5(ah_tuner_constants_v5_t *d,
                                               const ah_tuner_constants_v7_t *s) {
  AH_TUNER_CONSTANTS_COPY(d, s, d);
}
static inline void ah_tuner_constants_v5_to_v7(ah_tuner_constants_v7_t *d,
                                               const ah_tuner_constants_v5_t *s) {
  AH_TUNER_CONSTANTS_COPY(d, s, s);
}

#ifdef __cplusplus
}
#endif
#endif
