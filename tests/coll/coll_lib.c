/* Runs NCCL collectives on generated data and checks them against references computed on the host,
 * through the public NCCL and CUDA runtime APIs only, so the checks hold for real NCCL too.
 *
 * The key choice is that inputs are a hash of (seed, rank, index): any rank can rebuild any other
 * rank's input, so references need no communication, and values are picked per (type, operator)
 * so that the exact answer does not depend on NCCL's reduction order: wrap-around integers,
 * small integers for floating sums, powers of two for floating products, arbitrary finite bit
 * patterns for max and min, raw random bytes for collectives that only move data. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coll_lib.h"

#define POISON 0xa5
#define MAX_PRINTED 40

static const char *const coll_names[COLL_NCOLLS] = {
    "AllReduce", "Broadcast", "Bcast", "Reduce", "AllGather", "ReduceScatter", "SendRecv"};

const char *coll_name(int coll) { return coll >= 0 && coll < COLL_NCOLLS ? coll_names[coll] : "?"; }

int coll_reduces(int coll) {
  return coll == COLL_ALLREDUCE || coll == COLL_REDUCE || coll == COLL_REDUCESCATTER;
}

void coll_report_nccl(const char *who, const char *what, ncclResult_t res, ncclComm_t comm) {
  const char *last = ncclGetLastError(comm);
  fprintf(stderr, "%s: NCCL error %d (%s) in %s: %s\n", who, (int)res, ncclGetErrorString(res),
          what, last && *last ? last : "(ncclGetLastError is empty)");
}

static uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

static uint64_t coll_rand(uint64_t seed, int rank, size_t idx, unsigned salt) {
  return mix64(seed ^ mix64(((uint64_t)(unsigned)rank << 48) ^ ((uint64_t)salt << 42) ^ idx));
}

/* ---- input values and references ------------------------------------------------------------ */

/* Bound of |x| for floating sums and averages: 8 ranks' partial sums stay integers the type holds
 * exactly (e4m3: 3 mantissa bits, every integer up to 16; e5m2: up to 8; bfloat16: up to 256). */
static double float_sum_bound(const coll_type_t *t) {
  switch (t->dt) {
    case ncclFloat8e4m3: return 2;
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 16;
    case ncclFloat32: return 1 << 20;
    default: return 1099511627776.0; /* 2^40 */
  }
}

/* Bound for integer averages: 8 ranks' sum must not wrap, so the average is sum / n exactly as
 * NCCL's SumPostDiv computes it (truncation toward zero). */
static uint64_t int_avg_bound(const coll_type_t *t) {
  switch (t->size) {
    case 1: return t->is_signed ? 15 : 31;
    case 4: return t->is_signed ? 1u << 20 : 1u << 24;
    default: return t->is_signed ? 1ull << 40 : 1ull << 50;
  }
}

/* A finite value of floating type t from arbitrary bits (rehashes NaN and infinity patterns). */
static double random_finite(const coll_type_t *t, uint64_t seed, int rank, size_t idx) {
  unsigned char tmp[8];
  for (unsigned salt = 2;; salt++) {
    uint64_t r = coll_rand(seed, rank, idx, salt);
    memcpy(tmp, &r, sizeof tmp);
    if (!coll_val_nonfinite(t, tmp, 0)) return coll_val_load(t, tmp, 0).f;
  }
}

static coll_val_t input_val(const coll_case_t *c, const coll_type_t *t, int rank, size_t idx) {
  static const double prod_vals[6] = {-2, -1, -0.5, 0.5, 1, 2};
  uint64_t r = coll_rand(c->seed, rank, idx, 0);
  coll_val_t v = {0, 0};
  if (!t->is_float) {
    if (c->op == ncclProd) {
      v.i = coll_int_wrap(t, r | 1); /* odd: products never collapse to 0 mod 2^bits */
    } else if (c->op == ncclAvg) {
      uint64_t b = int_avg_bound(t);
      v.i = t->is_signed ? (uint64_t)((int64_t)(r % (2 * b + 1)) - (int64_t)b) : r % (b + 1);
    } else {
      v.i = coll_int_wrap(t, r);
    }
    return v;
  }
  if (c->op == ncclProd) {
    v.f = prod_vals[r % 6];
  } else if (c->op == ncclMax || c->op == ncclMin) {
    v.f = random_finite(t, c->seed, rank, idx);
  } else {
    int64_t b = (int64_t)float_sum_bound(t);
    v.f = (double)((int64_t)(r % (uint64_t)(2 * b + 1)) - b);
  }
  return v;
}

/* Reference reduction of element idx over ranks 0..n-1; *abs_p gets the sum of |inputs|. */
static coll_val_t ref_reduce(const coll_case_t *c, const coll_type_t *t, int n, size_t idx,
                             double *abs_p) {
  coll_val_t acc = input_val(c, t, 0, idx);
  double abs_sum = fabs(acc.f);
  for (int r = 1; r < n; r++) {
    coll_val_t x = input_val(c, t, r, idx);
    if (!t->is_float) {
      int gt = t->is_signed ? (int64_t)x.i > (int64_t)acc.i : x.i > acc.i;
      switch (c->op) {
        case ncclSum:
        case ncclAvg: acc.i += x.i; break;
        case ncclProd: acc.i *= x.i; break;
        case ncclMax:
          if (gt) acc.i = x.i;
          break;
        case ncclMin:
          if (!gt && x.i != acc.i) acc.i = x.i;
          break;
        default: break;
      }
    } else {
      abs_sum += fabs(x.f);
      switch (c->op) {
        case ncclSum:
        case ncclAvg: acc.f += x.f; break;
        case ncclProd: acc.f *= x.f; break;
        case ncclMax: acc.f = x.f > acc.f ? x.f : acc.f; break;
        case ncclMin: acc.f = x.f < acc.f ? x.f : acc.f; break;
        default: break;
      }
    }
  }
  if (c->op == ncclAvg) {
    if (!t->is_float) acc.i = t->is_signed ? (uint64_t)((int64_t)acc.i / n) : acc.i / (uint64_t)n;
    else acc.f /= n;
  }
  acc.i = coll_int_wrap(t, acc.i);
  *abs_p = abs_sum;
  return acc;
}

/* Floating ncclAvg over a rank count that is not a power of two cannot be exact: NCCL multiplies
 * every input by 1/n rounded to the type and rounds every partial sum. Each of those n+1 roundings
 * costs at most one ulp of the type relative to the inputs' magnitude, hence this bound. */
static double avg_tolerance(const coll_type_t *t, int n, double abs_sum) {
  unsigned char one[8] = {1, 0, 0, 0, 0, 0, 0, 0};
  double tiny = t->dt == ncclFloat32   ? 1.4e-45
                : t->dt == ncclFloat64 ? 5e-324
                                       : coll_val_load(t, one, 0).f;
  return (n + 2) * ldexp(1.0, 1 - t->mant_bits) * abs_sum / n + tiny;
}

static int val_matches(const coll_case_t *c, const coll_type_t *t, int n, coll_val_t got,
                       coll_val_t exp, double abs_sum) {
  if (!t->is_float) return got.i == exp.i;
  if (got.f == exp.f) return 1;
  if (c->op == ncclAvg && (n & (n - 1)) != 0 && isfinite(got.f))
    return fabs(got.f - exp.f) <= avg_tolerance(t, n, abs_sum);
  return 0;
}

static void val_format(const coll_type_t *t, coll_val_t v, char *buf, size_t len) {
  if (t->is_float) snprintf(buf, len, "%.9g", v.f);
  else if (t->is_signed) snprintf(buf, len, "%lld", (long long)v.i);
  else snprintf(buf, len, "%llu", (unsigned long long)v.i);
}

/* Raw random bytes for collectives that only move data: bit patterns (NaNs included) must arrive
 * unchanged, which a conversion anywhere on the path would break. */
static void raw_fill(const coll_case_t *c, const coll_type_t *t, int rank, size_t first, size_t n,
                     void *buf) {
  unsigned char *p = buf;
  for (size_t j = 0; j < n; j++) {
    uint64_t r = coll_rand(c->seed, rank, first + j, 1);
    memcpy(p + j * t->size, &r, t->size);
  }
}

static void val_fill(const coll_case_t *c, const coll_type_t *t, int rank, size_t first, size_t n,
                     void *buf) {
  for (size_t j = 0; j < n; j++) coll_val_store(t, buf, j, input_val(c, t, rank, first + j));
}

/* ---- buffer layout ------------------------------------------------------------------------------ */

typedef struct {
  size_t send_elems, recv_elems; /* what NCCL reads and writes, per rank */
  size_t send_off, recv_off;     /* in place: element offsets inside the one buffer */
  size_t buf_elems;              /* in place: size of the one buffer */
} layout_t;

static layout_t layout_of(const coll_case_t *c, int n, int rank) {
  layout_t L = {c->count, c->count, 0, 0, c->count};
  if (c->coll == COLL_ALLGATHER) {
    L.recv_elems = c->count * (size_t)n;
    L.buf_elems = L.recv_elems;
    L.send_off = c->count * (size_t)rank;
  } else if (c->coll == COLL_REDUCESCATTER) {
    L.send_elems = c->count * (size_t)n;
    L.buf_elems = L.send_elems;
    L.recv_off = c->count * (size_t)rank;
  }
  return L;
}

/* The input rank `rank` feeds NCCL (send_elems elements). */
static void input_image(const coll_case_t *c, const coll_type_t *t, int rank, size_t elems,
                        void *buf) {
  if (coll_reduces(c->coll)) val_fill(c, t, rank, 0, elems, buf);
  else raw_fill(c, t, rank, 0, elems, buf);
}

static int cuda_ok(cudaError_t e, const char *what, int rank) {
  if (e == cudaSuccess) return 1;
  fprintf(stderr, "coll rank %d: CUDA error %d (%s) in %s\n", rank, (int)e, cudaGetErrorString(e),
          what);
  return 0;
}

int coll_comms_streams(coll_comms_t *cs) {
  for (int l = 0; l < cs->nlocal; l++) {
    if (!cuda_ok(cudaSetDevice(cs->dev[l]), "cudaSetDevice", cs->rank[l]) ||
        !cuda_ok(cudaStreamCreate(&cs->stream[l]), "cudaStreamCreate", cs->rank[l]))
      return -1;
  }
  return 0;
}

void coll_comms_release(coll_comms_t *cs, int destroy) {
  for (int l = 0; l < cs->nlocal; l++) {
    cudaSetDevice(cs->dev[l]);
    if (cs->stream[l]) cudaStreamDestroy(cs->stream[l]);
    cs->stream[l] = NULL;
    if (destroy && cs->comm[l]) {
      ncclResult_t res = ncclCommDestroy(cs->comm[l]);
      if (res != ncclSuccess) coll_report_nccl("coll", "ncclCommDestroy", res, NULL);
    }
    if (destroy) cs->comm[l] = NULL;
  }
}

/* Allocates and fills the device buffers of op for local rank l. Out-of-place outputs and every
 * byte of an in-place buffer that NCCL must write are poisoned first, so a skipped write shows. */
static int op_setup(coll_op_t *op, int l) {
  const coll_case_t *c = &op->c;
  const coll_type_t *t = coll_type_get(c->dt);
  int n = op->cs->nranks, rank = op->cs->rank[l];
  layout_t L = layout_of(c, n, rank);
  size_t sz = t->size;
  int ok = cuda_ok(cudaSetDevice(op->cs->dev[l]), "cudaSetDevice", rank);
  if (!ok) return -1;
  if (c->inplace) {
    size_t bytes = (L.buf_elems ? L.buf_elems : 1) * sz;
    unsigned char *img = malloc(bytes);
    if (!img) return -1;
    memset(img, POISON, bytes);
    int has_input = !(c->coll == COLL_BROADCAST || c->coll == COLL_BCAST) || rank == c->root;
    if (has_input) input_image(c, t, rank, L.send_elems, img + L.send_off * sz);
    ok = cuda_ok(cudaMalloc(&op->dbase[l], bytes), "cudaMalloc", rank) &&
         cuda_ok(cudaMemcpy(op->dbase[l], img, bytes, cudaMemcpyHostToDevice), "cudaMemcpy", rank);
    free(img);
    op->dsend[l] = (char *)op->dbase[l] + L.send_off * sz;
    op->drecv[l] = (char *)op->dbase[l] + L.recv_off * sz;
    return ok ? 0 : -1;
  }
  size_t sbytes = (L.send_elems ? L.send_elems : 1) * sz,
         rbytes = (L.recv_elems ? L.recv_elems : 1) * sz;
  unsigned char *simg = malloc(sbytes), *rimg = malloc(rbytes);
  if (!simg || !rimg) {
    free(simg);
    free(rimg);
    return -1;
  }
  memset(simg, POISON, sbytes);
  memset(rimg, POISON, rbytes);
  input_image(c, t, rank, L.send_elems, simg);
  ok =
      cuda_ok(cudaMalloc(&op->dbase[l], sbytes), "cudaMalloc", rank) &&
      cuda_ok(cudaMalloc(&op->dbase2[l], rbytes), "cudaMalloc", rank) &&
      cuda_ok(cudaMemcpy(op->dbase[l], simg, sbytes, cudaMemcpyHostToDevice), "cudaMemcpy", rank) &&
      cuda_ok(cudaMemcpy(op->dbase2[l], rimg, rbytes, cudaMemcpyHostToDevice), "cudaMemcpy", rank);
  free(simg);
  free(rimg);
  op->dsend[l] = op->dbase[l];
  op->drecv[l] = op->dbase2[l];
  return ok ? 0 : -1;
}

static void op_free(coll_op_t *op) {
  for (int l = 0; l < op->cs->nlocal; l++) {
    cudaSetDevice(op->cs->dev[l]);
    if (op->dbase[l]) cudaFree(op->dbase[l]);
    if (op->dbase2[l]) cudaFree(op->dbase2[l]);
    op->dbase[l] = op->dbase2[l] = NULL;
  }
}

static ncclResult_t op_issue(coll_op_t *op, int l, const char **what_p) {
  const coll_case_t *c = &op->c;
  ncclComm_t comm = op->cs->comm[l];
  cudaStream_t s = op->cs->stream[l];
  int n = op->cs->nranks, rank = op->cs->rank[l];
  void *sb = op->dsend[l], *rb = op->drecv[l];
  *what_p = coll_name(c->coll);
  switch (c->coll) {
    case COLL_ALLREDUCE: return ncclAllReduce(sb, rb, c->count, c->dt, c->op, comm, s);
    case COLL_BROADCAST: return ncclBroadcast(sb, rb, c->count, c->dt, c->root, comm, s);
    case COLL_BCAST: return ncclBcast(rb, c->count, c->dt, c->root, comm, s);
    case COLL_REDUCE: return ncclReduce(sb, rb, c->count, c->dt, c->op, c->root, comm, s);
    case COLL_ALLGATHER: return ncclAllGather(sb, rb, c->count, c->dt, comm, s);
    case COLL_REDUCESCATTER: return ncclReduceScatter(sb, rb, c->count, c->dt, c->op, comm, s);
    case COLL_SENDRECV: {
      ncclResult_t res = ncclSend(sb, c->count, c->dt, (rank + 1) % n, comm, s);
      *what_p = "ncclSend";
      if (res != ncclSuccess) return res;
      *what_p = "ncclRecv";
      return ncclRecv(rb, c->count, c->dt, (rank + n - 1) % n, comm, s);
    }
    default: return ncclInvalidArgument;
  }
}

static void case_label(const coll_op_t *op, int l, char *buf, size_t len) {
  const coll_case_t *c = &op->c;
  snprintf(buf, len, "rank %d/%d: %s %s%s%s count=%zu root=%d %s", op->cs->rank[l], op->cs->nranks,
           coll_name(c->coll), coll_type_get(c->dt)->name, coll_reduces(c->coll) ? " " : "",
           coll_reduces(c->coll) ? coll_op_name(c->op) : "", c->count, c->root,
           c->inplace ? "in-place" : "out-of-place");
}

static void mismatch(coll_tally_t *tally, long *case_bad, const coll_op_t *op, int l,
                     const char *detail) {
  (*case_bad)++;
  if (*case_bad > 3 || tally->printed >= MAX_PRINTED) return;
  char label[256];
  case_label(op, l, label, sizeof label);
  fprintf(stderr, "coll MISMATCH %s: %s\n", label, detail);
  tally->printed++;
}

/* Checks the output of op on local rank l; returns the number of bad elements (or -1). */
static long op_check(coll_op_t *op, int l, coll_tally_t *tally) {
  const coll_case_t *c = &op->c;
  const coll_type_t *t = coll_type_get(c->dt);
  int n = op->cs->nranks, rank = op->cs->rank[l];
  layout_t L = layout_of(c, n, rank);
  size_t sz = t->size;
  long bad = 0;
  char detail[256], gs[64], es[64];
  if (!cuda_ok(cudaSetDevice(op->cs->dev[l]), "cudaSetDevice", rank) ||
      !cuda_ok(cudaStreamSynchronize(op->cs->stream[l]), "cudaStreamSynchronize", rank))
    return -1;
  if (L.recv_elems == 0) return 0;
  unsigned char *got = malloc(L.recv_elems * sz), *exp = malloc((L.send_elems + 1) * sz);
  if (!got || !exp) {
    free(got);
    free(exp);
    return -1;
  }
  if (!cuda_ok(cudaMemcpy(got, op->drecv[l], L.recv_elems * sz, cudaMemcpyDeviceToHost),
               "cudaMemcpy", rank)) {
    free(got);
    free(exp);
    return -1;
  }
  if (coll_reduces(c->coll)) {
    if (c->coll != COLL_REDUCE || rank == c->root) {
      size_t first = c->coll == COLL_REDUCESCATTER ? (size_t)rank * c->count : 0;
      for (size_t j = 0; j < L.recv_elems; j++) {
        double abs_sum;
        coll_val_t e = ref_reduce(c, t, n, first + j, &abs_sum);
        coll_val_t g = coll_val_load(t, got, j);
        if (val_matches(c, t, n, g, e, abs_sum)) continue;
        val_format(t, g, gs, sizeof gs);
        val_format(t, e, es, sizeof es);
        snprintf(detail, sizeof detail, "element %zu: got %s, expected %s", j, gs, es);
        mismatch(tally, &bad, op, l, detail);
      }
    }
  } else {
    /* Data movement: which rank's bytes should be where. */
    int nchunks = c->coll == COLL_ALLGATHER ? n : 1;
    for (int q = 0; q < nchunks; q++) {
      int src = c->coll == COLL_ALLGATHER  ? q
                : c->coll == COLL_SENDRECV ? (rank + n - 1) % n
                                           : c->root;
      raw_fill(c, t, src, 0, c->count, exp);
      for (size_t j = 0; j < c->count; j++) {
        const unsigned char *g = got + ((size_t)q * c->count + j) * sz;
        if (memcmp(g, exp + j * sz, sz) == 0) continue;
        uint64_t gv = 0, ev = 0;
        memcpy(&gv, g, sz);
        memcpy(&ev, exp + j * sz, sz);
        snprintf(detail, sizeof detail,
                 "element %zu (from rank %d): got bytes 0x%llx, expected 0x%llx",
                 (size_t)q * c->count + j, src, (unsigned long long)gv, (unsigned long long)ev);
        mismatch(tally, &bad, op, l, detail);
      }
    }
  }
  /* Out of place, NCCL must leave the input alone. */
  if (!c->inplace && L.send_elems > 0) {
    unsigned char *in = malloc(L.send_elems * sz);
    if (in && cuda_ok(cudaMemcpy(in, op->dsend[l], L.send_elems * sz, cudaMemcpyDeviceToHost),
                      "cudaMemcpy", rank)) {
      unsigned char *ref = malloc(L.send_elems * sz);
      if (ref) {
        input_image(c, t, rank, L.send_elems, ref);
        for (size_t j = 0; j < L.send_elems; j++) {
          if (memcmp(in + j * sz, ref + j * sz, sz) == 0) continue;
          snprintf(detail, sizeof detail, "send buffer element %zu was modified", j);
          mismatch(tally, &bad, op, l, detail);
        }
        free(ref);
      }
    }
    free(in);
  }
  free(got);
  free(exp);
  return bad;
}

int coll_ops_run(coll_op_t *ops, int nops, int grouped, coll_tally_t *tally) {
  int rc = 0, need_group = grouped, in_group = 0;
  for (int i = 0; i < nops; i++) {
    if (ops[i].cs->nlocal > 1) need_group = 1;
    for (int l = 0; l < ops[i].cs->nlocal; l++)
      if (op_setup(&ops[i], l) != 0) {
        rc = -1;
        goto free_ops;
      }
  }
  if (need_group) {
    ncclResult_t res = ncclGroupStart();
    if (res != ncclSuccess) {
      coll_report_nccl("coll", "ncclGroupStart", res, NULL);
      rc = -1;
      goto free_ops;
    }
    in_group = 1;
  }
  for (int i = 0; i < nops && rc == 0; i++) {
    for (int l = 0; l < ops[i].cs->nlocal && rc == 0; l++) {
      const char *what = "?";
      /* Send and recv of a ring must be in one group, or each would wait for the other. */
      int own_group = !in_group && ops[i].c.coll == COLL_SENDRECV;
      ncclResult_t res = own_group ? ncclGroupStart() : ncclSuccess;
      if (res == ncclSuccess) res = op_issue(&ops[i], l, &what);
      if (own_group) {
        ncclResult_t end = ncclGroupEnd();
        if (res == ncclSuccess && end != ncclSuccess) {
          res = end;
          what = "ncclGroupEnd";
        }
      }
      if (res != ncclSuccess) {
        char label[256], who[300];
        case_label(&ops[i], l, label, sizeof label);
        snprintf(who, sizeof who, "coll %s", label);
        coll_report_nccl(who, what, res, ops[i].cs->comm[l]);
        tally->errors++;
        rc = -1;
      }
    }
  }
  if (in_group) {
    ncclResult_t res = ncclGroupEnd();
    if (res != ncclSuccess && rc == 0) {
      coll_report_nccl("coll", "ncclGroupEnd", res, ops[0].cs->comm[0]);
      tally->errors++;
      rc = -1;
    }
  }
  for (int i = 0; i < nops && rc == 0; i++) {
    for (int l = 0; l < ops[i].cs->nlocal; l++) {
      long bad = op_check(&ops[i], l, tally);
      if (bad < 0) {
        tally->errors++;
        rc = -1;
        break;
      }
      tally->mismatches += bad;
    }
    tally->cases++;
  }
free_ops:
  for (int i = 0; i < nops; i++) op_free(&ops[i]);
  return rc;
}

int coll_case_run(const coll_comms_t *cs, const coll_case_t *c, int grouped, coll_tally_t *tally) {
  coll_op_t op;
  memset(&op, 0, sizeof op);
  op.c = *c;
  op.cs = cs;
  return coll_ops_run(&op, 1, grouped, tally);
}

/* Counts that are not multiples of 2, 3, 4 or 8 ranks (primes), from one element up. */
static const size_t matrix_counts[4] = {1, 13, 997, 4099};

int coll_matrix_run(const coll_comms_t *cs, int coll, int grouped, coll_tally_t *tally) {
  static const ncclRedOp_t ops[COLL_NOPS] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  int nops = coll_reduces(coll) ? COLL_NOPS : 1;
  unsigned k = 0;
  for (int ti = 0; ti < COLL_NTYPES; ti++) {
    for (int oi = 0; oi < nops; oi++) {
      for (int inplace = 0; inplace < 2; inplace++) {
        if (coll == COLL_BCAST && !inplace) continue;   /* ncclBcast has one buffer */
        if (coll == COLL_SENDRECV && inplace) continue; /* a ring exchange needs two */
        coll_case_t c = {coll,
                         coll_type_at(ti)->dt,
                         ops[oi],
                         matrix_counts[k % 4],
                         (int)(k % (unsigned)cs->nranks),
                         inplace,
                         mix64(((uint64_t)coll << 32) ^ k)};
        k++;
        if (coll_case_run(cs, &c, grouped, tally) != 0) return -1;
      }
    }
  }
  return 0;
}

int coll_grouped_run(const coll_comms_t *a, const coll_comms_t *b, coll_tally_t *tally) {
  static const ncclRedOp_t redops[COLL_NOPS] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  int n = a->nranks;
  for (int ti = 0; ti < COLL_NTYPES; ti++) {
    ncclDataType_t dt = coll_type_at(ti)->dt;
    coll_op_t ops[9];
    memset(ops, 0, sizeof ops);
    const coll_case_t cases[9] = {
        {COLL_ALLREDUCE, dt, redops[ti % 5], 101, 0, ti & 1, 0},
        {COLL_BROADCAST, dt, ncclSum, 77, n - 1, 0, 0},
        {COLL_REDUCE, dt, redops[(ti + 1) % 5], 203, 0, 1, 0},
        {COLL_ALLGATHER, dt, ncclSum, 31, 0, (ti >> 1) & 1, 0},
        {COLL_REDUCESCATTER, dt, redops[(ti + 2) % 5], 29, 0, ti & 1, 0},
        {COLL_SENDRECV, dt, ncclSum, 57, 0, 0, 0},
        {COLL_ALLREDUCE, dt, redops[(ti + 3) % 5], 55, 0, 1, 0},
        {COLL_ALLGATHER, dt, ncclSum, 19, 0, 1, 0},
        {COLL_REDUCESCATTER, dt, redops[(ti + 4) % 5], 23, 0, 0, 0},
    };
    for (int i = 0; i < 9; i++) {
      ops[i].c = cases[i];
      ops[i].c.seed = mix64(0x6770ull << 32 ^ (uint64_t)(ti * 16 + i));
      ops[i].cs = i < 6 ? a : b;
    }
    if (coll_ops_run(ops, 9, 1, tally) != 0) return -1;
  }
  return 0;
}

int coll_large_run(const coll_comms_t *cs, int grouped, coll_tally_t *tally) {
  int n = cs->nranks;
  /* 3M int32 elements = 12 MiB, several of NCCL's 2 MiB ring chunks and of any staging slot. */
  const coll_case_t cases[] = {
      {COLL_ALLREDUCE, ncclInt32, ncclSum, 3145739, 0, 0, 0x1a},
      {COLL_ALLREDUCE, ncclFloat32, ncclMax, 1048583, 0, 1, 0x1b},
      {COLL_BROADCAST, ncclUint8, ncclSum, 5000011, n - 1, 1, 0x1c},
      {COLL_REDUCE, ncclFloat64, ncclSum, 524309, n / 2, 0, 0x1d},
      {COLL_ALLGATHER, ncclFloat32, ncclSum, 262147, 0, 0, 0x1e},
      {COLL_REDUCESCATTER, ncclBfloat16, ncclMax, 262147, 0, 1, 0x1f},
      {COLL_SENDRECV, ncclInt64, ncclSum, 393241, 0, 0, 0x20},
      /* NCCL accepts zero counts and does nothing. */
      {COLL_ALLREDUCE, ncclFloat32, ncclSum, 0, 0, 0, 0x21},
      {COLL_BROADCAST, ncclInt8, ncclSum, 0, 0, 0, 0x22},
      {COLL_REDUCE, ncclInt32, ncclMax, 0, 0, 0, 0x23},
      {COLL_ALLGATHER, ncclFloat16, ncclSum, 0, 0, 1, 0x24},
      {COLL_REDUCESCATTER, ncclUint64, ncclSum, 0, 0, 0, 0x25},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (coll_case_run(cs, &cases[i], grouped, tally) != 0) return -1;
  return 0;
}
