/* TEMPORARY weak fallbacks until sim_device.c lands; deleted then. */
#include "sim_internal.h"
static struct CUstream_st fallback_stream[SIM_MAX_DEVICES];
__attribute__((weak)) int sim_device_current(void) { return 0; }
__attribute__((weak)) int sim_device_count(void) { return 8; }
__attribute__((weak)) struct CUstream_st *sim_stream_resolve(cudaStream_t s) { return s ? (struct CUstream_st *)s : &fallback_stream[0]; }
__attribute__((weak)) double sim_stream_time(struct CUstream_st *s) { return s->vt_us; }
__attribute__((weak)) void sim_stream_set_time(struct CUstream_st *s, double vt_us) { s->vt_us = vt_us; }
