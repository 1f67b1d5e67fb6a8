/* Helpers shared by the two halves of sim/model/ (NCCL's model in sim_model_nccl.c, the truth in
 * sim_model_truth.c). Hidden: nothing outside the static library calls them. */
#ifndef SIM_MODEL_INTERNAL_H
#define SIM_MODEL_INTERNAL_H

#include "sim_model.h"

int sim_model_compcap(const sim_model_t *m);
int sim_model_scale(const sim_model_t *m);
int sim_log2_ceil(int x);
/* NCCL's one-time latency (us) and algorithm bandwidth (GB/s) of a pair. */
double sim_model_nccl_latency(const sim_model_t *m, const ah_tuner_constants_v5_t *k, int coll,
                              int a, int p, size_t nbytes);
/* NCCL's tables as the emulated version ships them. */
void sim_model_default_constants(ah_tuner_constants_v5_t *k, int version);
double sim_model_nccl_bw(const sim_model_t *m, int coll, int a, int p);
size_t sim_model_grain(int p);
size_t sim_model_max_chunk(const sim_model_t *m, int a, int p);
size_t sim_model_default_chunk(const sim_model_t *m, int coll, size_t nbytes, int a, int p, int nc);
void sim_model_default_resources(const sim_model_t *m, int coll, size_t nbytes, int a, int p,
                                 int *nc_p, int *nt_p);
int sim_model_traffic_channels(int coll, int p, size_t nbytes, int nc);
/* NCCL's configuration for a given pair: its channels/threads, the tuner's channel cap and chunk. */
void sim_model_config_for(const sim_model_t *m, int coll, size_t nbytes, int a, int p,
                          int tuner_nch, size_t tuner_chunk, sim_config_t *cfg);

#endif
