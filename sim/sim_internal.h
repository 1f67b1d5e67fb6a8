/* Internal interface between the pieces of libncclsim.so: the CUDA runtime/driver stand-in
 * (sim_cuda_*.c), the device and stream model (sim_device.c) and the NCCL stand-in (sim_nccl_*.c).
 *
 * The key choice: the GPU is modelled as a clock, not as an executor. Work is done on the calling
 * thread when it is issued (memcpy at once, collectives when every rank has arrived), and each
 * stream carries a virtual time in microseconds that issued work advances by its modelled
 * duration. Events capture a stream's virtual time, so elapsed times are modelled durations,
 * identical from run to run whatever the machine's load. */
#ifndef SIM_INTERNAL_H
#define SIM_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdint.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define SIM_API __attribute__((visibility("default")))

/* ---- devices and streams (sim_device.c) ----------------------------------------------------- */

#define SIM_MAX_DEVICES 64

/* A stream. The runtime's cudaStream_t and the driver's CUstream are the same pointer type
 * (struct CUstream_st *), so one object serves both APIs. */
struct CUstream_st {
  uint32_t magic; /* SIM_STREAM_MAGIC while alive */
  int device;     /* device the stream belongs to */
  unsigned flags;
  int priority;
  double vt_us;            /* virtual time: when the last work issued on the stream ends */
  double compute_phi;      /* interference added by ncclsimStreamSetInterference, 0..1 */
  struct sim_capture *cap; /* the capture the stream belongs to, NULL: none (sim_cuda_capture.c) */
  /* A collective launch runs on its caller's thread; while it does, the stream has work in flight
   * (launch number `running`, 0: none) and an event recorded on it from another thread completes
   * only when launch `done` reaches it, as behind a kernel still running on a GPU. */
  _Atomic uint64_t running, done, launches;
};
#define SIM_STREAM_MAGIC 0x5354524du

struct CUevent_st {
  uint32_t magic; /* SIM_EVENT_MAGIC while alive */
  unsigned flags;
  int device;
  int recorded;              /* 0 until the first record */
  double vt_us;              /* virtual time captured by the last record */
  unsigned long long cap_id; /* last recorded in this capture (0: recorded eagerly, or never) */
  long cap_node;             /* and as its record number cap_node, on its stream cap_stream */
  int cap_stream;
  struct CUstream_st *behind; /* recorded while this stream's launch `behind_launch` ran, or NULL */
  uint64_t behind_launch;
};
#define SIM_EVENT_MAGIC 0x45564e54u

/* Device of the calling thread (cudaSetDevice / cuCtxSetCurrent). */
int sim_device_current(void);
int sim_device_count(void);

/* Resolves a stream handle as CUDA does: NULL (legacy default), cudaStreamPerThread and
 * cudaStreamLegacy map to the current device's default stream. Returns NULL for a handle that is
 * not a live stream. */
struct CUstream_st *sim_stream_resolve(cudaStream_t s);

/* 1 when s is a device's default (legacy) stream. */
int sim_stream_is_default(const struct CUstream_st *s);

/* Virtual clock of a stream. Note that ranks driven by one thread (ncclCommInitAll) each have
 * their own device and therefore their own default stream. */
double sim_stream_time(struct CUstream_st *s);
void sim_stream_set_time(struct CUstream_st *s, double vt_us);

/* Work that never finishes (an injected hang): a stream's clock is infinite, an event recorded
 * after it never completes, a device holding such a stream never synchronises. */
int sim_stream_stuck(struct CUstream_st *s);
int sim_device_stuck(int device);
int sim_event_stuck(const struct CUevent_st *e);
/* Whether an event waits for a collective launch still running on its stream's caller's thread. */
int sim_event_behind(const struct CUevent_st *e);
/* Whether a query of e or s answers not-ready; waits as a synchronisation would (for good when
 * stuck). */
int sim_event_pending(const struct CUevent_st *e);
int sim_stream_pending(struct CUstream_st *s);
void sim_event_wait(const struct CUevent_st *e);
void sim_stream_wait(struct CUstream_st *s);
/* Brackets a collective launch on stream s (sim_nccl_group.c). */
void sim_stream_launch_begin(struct CUstream_st *s);
void sim_stream_launch_end(struct CUstream_st *s);
void sim_block_forever(void) __attribute__((noreturn));

/* ---- process-wide settings (sim_env.c) ------------------------------------------------------- */

/* Emulated NCCL version code (NCCLSIM_VERSION, default 2.28.9 = 22809). */
int sim_nccl_version(void);
/* Seconds a rank waits for its peers before failing a call (NCCLSIM_TIMEOUT_S, default 300).
 * Dead peers are detected much sooner; this bounds a wait on a live but stuck peer. */
double sim_timeout_s(void);
/* Virtual node of this process (NCCLSIM_NODE, set by ncclsim-run; default 0). */
int sim_node_id(void);
/* An integer environment variable in [lo, hi] (decimal, or 0x hex); unset gives dflt, and a bad
 * value is reported once per read, naming it, and gives dflt. */
int sim_env_int(const char *name, int dflt, int lo, int hi);
/* NCCLSIM_HOST_CLOCK=1: an idle stream's clock follows the host's (CLOCK_MONOTONIC, in us, the
 * same for every process of the machine), so work a late host issues starts late, as on a GPU
 * whose stream ran dry; default 0: streams only advance by the work issued on them. */
int sim_host_clock(void);
/* The truth collectives are timed with (NCCLSIM_TRUTH=dev|heldout:SEED, docs/sim.md): returns 1
 * and the member's seed in seed_p for a held-out member, 0 for the development truth (the
 * default, and what a bad value gives after one warning naming it). */
int sim_truth(uint64_t *seed_p);

/* ---- injected faults (sim_fault.c: NCCLSIM_FAULT, NCCLSIM_MISMATCH) ------------------------- */
struct ncclComm;
/* After rank c->rank completed collective #call of c on `stream`: when a hang fault names it, the
 * stream never finishes (its clock becomes infinite). */
void sim_fault_after_coll(const struct ncclComm *c, uint64_t call, struct CUstream_st *stream);
/* The factor this process's simulated compute is slowed by (1.0 without a slow fault). */
double sim_fault_compute_factor(void);
/* us of simulated compute on `device` with NCCLSIM_NOISE's jitter: drawn per process (RANK),
 * device and call, so GPUs drift apart as real ones do (sim_nccl_timing.c). */
double sim_compute_jitter(double us, int device);
/* Whether ranks that disagree on a collective hang in it (NCCLSIM_MISMATCH=hang), as real NCCL. */
int sim_fault_mismatch_hangs(void);
void sim_fault_mismatch_block(void) __attribute__((noreturn));

/* ---- logging --------------------------------------------------------------------------------- */
/* NCCLSIM_DEBUG=WARN|INFO. Warnings always print with the "ncclsim:" prefix. */
void sim_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void sim_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Makes the next log call read NCCLSIM_DEBUG again (ncclResetDebugInit). */
void sim_log_reset(void);

#endif
