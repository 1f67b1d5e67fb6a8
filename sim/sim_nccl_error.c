/* NCCL's error reporting: result strings, and the per-thread last-error text that
 * ncclGetLastError returns. Every error sim/ returns carries a text that names what was wrong. */
#include <stdio.h>

#include "sim_nccl.h"

static _Thread_local char last_error[2048];

ncclResult_t sim_error(ncclResult_t res, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  sim_log_info("%s", last_error);
  return res;
}

int sim_comm_usable(const struct ncclComm *comm) {
  return comm != NULL && comm->magic == SIM_COMM_MAGIC;
}

ncclResult_t sim_comm_live(const struct ncclComm *comm, const char *fn) {
  if (sim_comm_usable(comm)) return ncclSuccess;
  return sim_error(ncclInvalidArgument, "ncclsim: %s: invalid or destroyed communicator", fn);
}

SIM_NCCL_API(const char *, ncclGetErrorString, ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError:
      return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError:
      return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

SIM_NCCL_API(const char *, ncclGetLastError, ncclComm_t comm) {
  (void)comm;
  return last_error;
}

/* 2.24.3+: re-reads the logging settings (NCCLSIM_DEBUG here, NCCL_DEBUG in NCCL). It returns
 * nothing, so under an older emulated version the refusal is only the last-error text. */
SIM_NCCL_API(void, ncclResetDebugInit, void) {
  if (sim_nccl_since("ncclResetDebugInit", SIM_SINCE_RESET_DEBUG) != ncclSuccess) return;
  sim_log_reset();
}
