/* job_keys.h: what the shim's test jobs (shim_job, multi_gpu_job) print so that the checker can
 * compare a run's reports with the calls it really made — per rank, the calls of each
 * (communicator size, collective, size bin) key, as "calls rank=R nranks=N coll=C bin=B n=K" — and
 * the FNV-1a hash of every output buffer ("checksum rank=R ..."), equal with and without the shim.
 * Header-only: each job is one program. */
#ifndef JOB_KEYS_H
#define JOB_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum { C_BCAST = 0, C_REDUCE = 1, C_ALLGATHER = 2, C_REDUCESCATTER = 3, C_ALLREDUCE = 4 };

typedef struct {
  int nranks, coll, bin;
  long n;
} job_key_t;

typedef struct {
  job_key_t v[64];
  int n;
} job_keys_t;

#define JOB_HASH_BASIS 0xcbf29ce484222325ull

/* Counts one call of key (nranks, coll, floor(log2(bytes per rank))). */
static inline void job_keys_count(job_keys_t *k, int nranks, int coll, size_t bytes_per_rank) {
  int bin = 0;
  while (bytes_per_rank > 1) bytes_per_rank >>= 1, bin++;
  for (int i = 0; i < k->n; i++)
    if (k->v[i].nranks == nranks && k->v[i].coll == coll && k->v[i].bin == bin) {
      k->v[i].n++;
      return;
    }
  if (k->n < 64) k->v[k->n++] = (job_key_t){nranks, coll, bin, 1};
}

static inline uint64_t job_hash(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

/* Prints a rank's checksum line and its "calls" lines. */
static inline void job_keys_print(int rank, uint64_t hash, const job_keys_t *k) {
  static const char *const names[] = {"broadcast", "reduce", "allgather", "reducescatter",
                                      "allreduce"};
  printf("checksum rank=%d %016llx\n", rank, (unsigned long long)hash);
  for (int i = 0; i < k->n; i++)
    printf("calls rank=%d nranks=%d coll=%s bin=%d n=%ld\n", rank, k->v[i].nranks,
           names[k->v[i].coll], k->v[i].bin, k->v[i].n);
}

#endif
