/* NCCL's memory entry points: ncclMemAlloc/ncclMemFree (2.19+), user buffer registration
 * ncclCommRegister/Deregister (2.19+) and windows ncclCommWindowRegister/Deregister (2.27+).
 *
 * Device memory is host memory in sim/, so registration has nothing to pin or map: it keeps, per
 * communicator, what NCCL's registration cache keeps (page-aligned ranges with reference counts,
 * a window per registration) so that handles are checked as NCCL checks them. Note that a window
 * registration is collective in NCCL; sim/ registers it on the calling rank alone. */
#include <stdlib.h>
#include <unistd.h>

#include "sim_cuda.h"
#include "sim_nccl.h"

struct sim_reg {
  uintptr_t beg, end;
  int refs;
  struct sim_reg *next;
};

struct ncclWindow_vidmem {
  struct ncclComm *comm;
  void *buff;
  size_t size;
  int flags;
  struct sim_reg *reg;
  struct ncclWindow_vidmem *next;
};

SIM_NCCL_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size) {
  ncclResult_t res = sim_nccl_since("ncclMemAlloc", SIM_SINCE_MEM_REGISTER);
  if (res != ncclSuccess) return res;
  cudaError_t e = cudaMalloc(ptr, size);
  if (e != cudaSuccess)
    return sim_error(ncclUnhandledCudaError,
                     "ncclsim: ncclMemAlloc: cudaMalloc of %zu bytes "
                     "failed: %s",
                     size, cudaGetErrorString(e));
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclMemFree, void *ptr) {
  ncclResult_t res = sim_nccl_since("ncclMemFree", SIM_SINCE_MEM_REGISTER);
  if (res != ncclSuccess) return res;
  cudaError_t e = cudaFree(ptr);
  if (e != cudaSuccess)
    return sim_error(ncclUnhandledCudaError, "ncclsim: ncclMemFree(%p): cudaFree failed: %s", ptr,
                     cudaGetErrorString(e));
  return ncclSuccess;
}

/* Registers [buff, buff+size) rounded out to pages; a range inside an existing one shares it. */
static ncclResult_t reg_add(struct ncclComm *comm, void *buff, size_t size,
                            struct sim_reg **reg_p) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t beg = (uintptr_t)buff & ~(page - 1),
            end = ((uintptr_t)buff + size + page - 1) & ~(page - 1);
  for (struct sim_reg *r = comm->regs; r; r = r->next) {
    if (r->beg <= beg && r->end >= end) {
      r->refs++;
      *reg_p = r;
      return ncclSuccess;
    }
  }
  struct sim_reg *r = calloc(1, sizeof *r);
  if (!r) return sim_error(ncclSystemError, "ncclsim: out of memory registering a buffer");
  r->beg = beg;
  r->end = end;
  r->refs = 1;
  r->next = comm->regs;
  comm->regs = r;
  *reg_p = r;
  return ncclSuccess;
}

/* Drops one reference. Returns ncclInvalidUsage for a handle the communicator does not hold. */
static ncclResult_t reg_drop(struct ncclComm *comm, struct sim_reg *reg, const char *fn) {
  for (struct sim_reg **pp = &comm->regs; *pp; pp = &(*pp)->next) {
    if (*pp != reg) continue;
    if (--reg->refs == 0) {
      *pp = reg->next;
      free(reg);
    }
    return ncclSuccess;
  }
  return sim_error(ncclInvalidUsage,
                   "ncclsim: %s: handle %p is not registered with communicator "
                   "%016llx",
                   fn, (void *)reg, (unsigned long long)comm->hash);
}

void sim_reg_free_all(struct ncclComm *comm) {
  while (comm->wins) {
    struct ncclWindow_vidmem *next = comm->wins->next;
    free(comm->wins);
    comm->wins = next;
  }
  while (comm->regs) {
    struct sim_reg *next = comm->regs->next;
    free(comm->regs);
    comm->regs = next;
  }
}

SIM_NCCL_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff, size_t size,
             void **handle) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommRegister", SIM_SINCE_MEM_REGISTER);
  if (res != ncclSuccess) return res;
  if (!handle) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommRegister: handle is NULL");
  struct sim_reg *r;
  res = reg_add(comm, buff, size, &r);
  if (res == ncclSuccess) *handle = r;
  return res;
}

SIM_NCCL_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle) {
  ncclResult_t res = sim_comm_entry(comm, "ncclCommDeregister", SIM_SINCE_MEM_REGISTER);
  if (res != ncclSuccess) return res;
  if (!handle) return ncclSuccess;
  return reg_drop(comm, handle, "ncclCommDeregister");
}

SIM_NCCL_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff, size_t size,
             ncclWindow_t *win, int winFlags) {
  ncclResult_t res = sim_nccl_since("ncclCommWindowRegister", SIM_SINCE_SHRINK_WINDOW);
  if (res != ncclSuccess) return res;
  if (buff == NULL || size == 0)
    return ncclSuccess; /* as NCCL: nothing registered, *win untouched */
  res = sim_comm_live(comm, "ncclCommWindowRegister");
  if (res != ncclSuccess) return res;
  if (!win) return sim_error(ncclInvalidArgument, "ncclsim: ncclCommWindowRegister: win is NULL");
  if (winFlags & ~(NCCL_WIN_DEFAULT | NCCL_WIN_COLL_SYMMETRIC))
    return sim_error(ncclInvalidArgument, "ncclsim: ncclCommWindowRegister: unknown winFlags 0x%x",
                     winFlags);
  struct ncclWindow_vidmem *w = calloc(1, sizeof *w);
  if (!w) return sim_error(ncclSystemError, "ncclsim: out of memory registering a window");
  res = reg_add(comm, buff, size, &w->reg);
  if (res != ncclSuccess) {
    free(w);
    return res;
  }
  w->comm = comm;
  w->buff = buff;
  w->size = size;
  w->flags = winFlags;
  w->next = comm->wins;
  comm->wins = w;
  *win = w;
  return ncclSuccess;
}

SIM_NCCL_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm, ncclWindow_t win) {
  ncclResult_t res = sim_nccl_since("ncclCommWindowDeregister", SIM_SINCE_SHRINK_WINDOW);
  if (res != ncclSuccess) return res;
  if (win == NULL) return ncclSuccess;
  res = sim_comm_live(comm, "ncclCommWindowDeregister");
  if (res != ncclSuccess) return res;
  /* Looked up by address among the communicator's windows before anything is read from it, so a
   * stale or foreign handle is refused, not dereferenced. */
  for (struct ncclWindow_vidmem **pp = &comm->wins; *pp; pp = &(*pp)->next) {
    if (*pp != win) continue;
    *pp = win->next;
    res = reg_drop(comm, win->reg, "ncclCommWindowDeregister");
    free(win);
    return res;
  }
  return sim_error(ncclInvalidUsage,
                   "ncclsim: ncclCommWindowDeregister: window %p is not "
                   "registered with communicator %016llx",
                   (void *)win, (unsigned long long)comm->hash);
}

/* The buffer a window was registered with. */
SIM_NCCL_API(ncclResult_t, ncclWinGetUserPtr, ncclComm_t comm, ncclWindow_t win,
             void **outUserPtr) {
  ncclResult_t res = sim_comm_entry(comm, "ncclWinGetUserPtr", SIM_SINCE_WIN_USER_PTR);
  if (res != ncclSuccess) return res;
  if (!outUserPtr)
    return sim_error(ncclInvalidArgument, "ncclsim: ncclWinGetUserPtr: outUserPtr is NULL");
  for (struct ncclWindow_vidmem *w = comm->wins; w; w = w->next) /* found before it is read */
    if (w == win) {
      *outUserPtr = w->buff;
      return ncclSuccess;
    }
  return sim_error(ncclInvalidArgument,
                   "ncclsim: ncclWinGetUserPtr: window %p is not registered "
                   "with communicator %016llx",
                   (void *)win, (unsigned long long)comm->hash);
}
