/* coord_job: a multi-process job on sim/ for the coordinator's end-to-end tests. Every rank runs
 * three keys (two AllReduce sizes and an AllGather) for --iters iterations, with random CPU delays
 * injected before calls on random ranks, and checks every result against the value the ranks'
 * inputs imply. Run with libautoha.so preloaded in tune mode, the ranks of different processes
 * can only agree on each call's configuration through the coordinator; sim/ fails any call on which
 * they disagree (the hang real NCCL would have), which this job counts as an error.
 *
 *   ncclsim-run -n P -- coord_job [--threads T] [--iters N] [--delay-prob p] [--delay-us D]
 *                                 [--cut-at I] [--exit-at I] [--unstamp 1] [--unreachable P]
 *                                 [--no-autoha P] [--id-proc P]
 *
 * --threads T runs T ranks per process (world = P x T). --cut-at I: at iteration I, every process
 * but rank 0's shuts down its connection toward the hub (TCP to the hub's port in the id's stamp, or
 * the unix socket to its host's relay), as a network cut or a dying relay would. --exit-at I: rank 0's process (the hub's) exits at iteration I.
 * --unstamp 1: the id's maker zeroes bytes 64..127 of the id before passing it on, as an id made by a
 * process without libautoha.so would be. --unreachable P: process P (not 0) re-executes itself with
 * AUTOHA_COORD_ADDR naming a loopback port where nothing listens, so its connection to the hub is
 * refused, as a firewall would refuse it. --no-autoha P: process P re-executes itself with
 * AUTOHA_ENABLE=0 (libautoha.so stays preloaded but passes every call through). --id-proc P:
 * process P (default 0) makes the unique id, so the hub runs there, not in the leader's process. */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "ncclsim.h"

#define NKEYS 3
#define NPAT 5

static const size_t key_count[NKEYS] = {64 * 1024, 2 * 1024, 8 * 1024}; /* floats per rank */
static const int key_coll[NKEYS] = {0, 0, 1}; /* 0 AllReduce, 1 AllGather */

static int nprocs, threads = 1, world;
static long iters = 2000, cut_at = -1, exit_at = -1;
static double delay_prob = 0.02, delay_us = 2000;
static ncclUniqueId id;
static int hub_port, unstamp, unreachable = -1, no_autoha = -1, id_proc;
static const char
    *id_file; /* --id-file: the id process writes the id and its pid there (attack tests) */

typedef struct {
  int rank;
  long calls, errors, bad_data;
} rank_state_t;

static float input_value(int rank, long it, size_t j) {
  return (float)(rank + 1) + (float)(it % NPAT) + (float)(j % 3);
}

/* Shuts down this process's connection toward the hub: its TCP connections whose peer port is the
 * hub's, and its connection to its host's relay (a unix socket whose peer is an abstract
 * "autoha-relay-..." name; docs/coordinator.md "Host relay"), whichever it has. */
static int cut_hub_connections(void) {
  int n = 0;
  DIR *d = opendir("/proc/self/fd");
  if (!d) return 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    int fd = atoi(e->d_name);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (fd <= 2 || getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) continue;
    const struct sockaddr_un *un = (const struct sockaddr_un *)&ss;
    if (ss.ss_family == AF_UNIX && sl > offsetof(struct sockaddr_un, sun_path) + 1 &&
        un->sun_path[0] == 0 && strncmp(un->sun_path + 1, "autoha-relay-", 13) == 0) {
      shutdown(fd, SHUT_RDWR);
      n++;
      continue;
    }
    if (ss.ss_family != AF_INET || ntohs(((struct sockaddr_in *)&ss)->sin_port) != hub_port)
      continue;
    shutdown(fd, SHUT_RDWR);
    n++;
  }
  closedir(d);
  return n;
}

static void *rank_main(void *arg) {
  rank_state_t *st = arg;
  int rank = st->rank;
  cudaSetDevice(rank % threads);
  ncclComm_t comm;
  ncclResult_t r = ncclCommInitRank(&comm, world, id, rank);
  if (r != ncclSuccess) {
    fprintf(stderr, "coord_job: rank %d: ncclCommInitRank: %s\n", rank, ncclGetErrorString(r));
    st->errors++;
    return NULL;
  }
  cudaStream_t s;
  cudaStreamCreate(&s);
  float *send[NKEYS][NPAT], *recv[NKEYS];
  float *host = malloc(key_count[0] * (size_t)world * sizeof(float));
  for (int k = 0; k < NKEYS; k++) {
    size_t n = key_count[k];
    for (int p = 0; p < NPAT; p++) {
      cudaMalloc((void **)&send[k][p], n * sizeof(float));
      for (size_t j = 0; j < n; j++) host[j] = input_value(rank, p, j);
      cudaMemcpy(send[k][p], host, n * sizeof(float), cudaMemcpyHostToDevice);
    }
    cudaMalloc((void **)&recv[k], n * (size_t)world * sizeof(float));
  }
  unsigned seed = 12345u + (unsigned)rank * 7919u;
  for (long it = 0; it < iters; it++) {
    if (it == exit_at && rank == 0) {
      fprintf(stderr, "coord_job: rank 0 (the hub's process) exits at iteration %ld\n", it);
      _exit(3);
    }
    if (it == cut_at && rank % threads == 0 && rank != 0)
      fprintf(stderr, "coord_job: rank %d cut %d hub connection(s) at iteration %ld\n", rank,
              cut_hub_connections(), it);
    for (int k = 0; k < NKEYS; k++) {
      if ((double)rand_r(&seed) / RAND_MAX < delay_prob) {
        struct timespec ts = {0, (long)((double)rand_r(&seed) / RAND_MAX * delay_us * 1000)};
        nanosleep(&ts, NULL);
      }
      size_t n = key_count[k];
      float *in = send[k][it % NPAT];
      r = key_coll[k] == 0 ? ncclAllReduce(in, recv[k], n, ncclFloat, ncclSum, comm, s)
                           : ncclAllGather(in, recv[k], n, ncclFloat, comm, s);
      st->calls++;
      if (r == ncclSuccess)
        r = cudaStreamSynchronize(s) == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
      /* a call completes only after the hub's verdict: tests wait for this line, not a sleep */
      if (it == 0 && k == 0 && r == ncclSuccess)
        fprintf(stderr, "coord_job: rank %d: first call done\n", rank);
      if (r != ncclSuccess) {
        if (st->errors++ < 3)
          fprintf(stderr, "coord_job: rank %d: call %ld of key %d failed: %s (%s)\n", rank, it, k,
                  ncclGetErrorString(r), ncclGetLastError(comm));
        if (st->errors > 20) goto out;
        continue;
      }
      /* check a sample of every result, and all of it every 64 iterations */
      size_t total = key_coll[k] == 0 ? n : n * (size_t)world;
      size_t step = it % 64 == 0 ? 1 : 997;
      cudaMemcpy(host, recv[k], total * sizeof(float), cudaMemcpyDeviceToHost);
      for (size_t j = 0; j < total; j += step) {
        float want;
        if (key_coll[k] == 0)
          want = (float)world * (float)(world + 1) / 2 + (float)world * (float)(it % NPAT + j % 3);
        else want = input_value((int)(j / n), it, j % n);
        if (host[j] != want) {
          if (st->bad_data++ < 3)
            fprintf(stderr, "coord_job: rank %d: call %ld key %d element %zu is %g, expected %g\n",
                    rank, it, k, j, host[j], want);
          break;
        }
      }
    }
  }
out:
  ncclCommDestroy(comm);
  for (int k = 0; k < NKEYS; k++) {
    for (int p = 0; p < NPAT; p++) cudaFree(send[k][p]);
    cudaFree(recv[k]);
  }
  free(host);
  return NULL;
}

int main(int argc, char **argv) {
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--threads")) threads = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--iters")) iters = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--delay-prob")) delay_prob = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--delay-us")) delay_us = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--cut-at")) cut_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--exit-at")) exit_at = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--unstamp")) unstamp = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--unreachable")) unreachable = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--no-autoha")) no_autoha = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--id-proc")) id_proc = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--id-file")) id_file = argv[i + 1];
    else {
      fprintf(stderr, "coord_job: unknown option '%s'\n", argv[i]);
      return 2;
    }
  }
  const char *r = getenv("RANK"), *w = getenv("WORLD_SIZE");
  if (!r || !w || threads < 1) {
    fprintf(stderr, "coord_job: RANK and WORLD_SIZE are not set: run under ncclsim-run\n");
    return 2;
  }
  int proc = atoi(r);
  nprocs = atoi(w);
  /* Before any NCCL call: the shim of the new image reads the changed environment. */
  if ((proc == unreachable || proc == no_autoha) && !getenv("COORD_JOB_REEXECED")) {
    setenv("COORD_JOB_REEXECED", "1", 1);
    if (proc == unreachable) setenv("AUTOHA_COORD_ADDR", "127.0.0.1:1", 1);
    if (proc == no_autoha) setenv("AUTOHA_ENABLE", "0", 1);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "coord_job: cannot re-execute process %d\n", proc);
    return 2;
  }
  world = nprocs * threads;
  if (proc == id_proc && ncclGetUniqueId(&id) != ncclSuccess) return 1;
  if (proc == id_proc && unstamp) memset(id.internal + 64, 0, 64);
  if (ncclsimExchangeUniqueId("coordjob", proc == id_proc, &id) != 0) return 1;
  if (proc == id_proc && id_file) { /* written whole, then renamed: a reader never sees half */
    char tmp[512];
    snprintf(tmp, sizeof tmp, "%s.tmp", id_file);
    FILE *f = fopen(tmp, "wb");
    int pid = (int)getpid();
    if (!f || fwrite(id.internal, 1, 128, f) != 128 || fwrite(&pid, sizeof pid, 1, f) != 1 ||
        fclose(f) != 0 || rename(tmp, id_file) != 0)
      return 1;
  }
  const unsigned char *tail = (const unsigned char *)id.internal + 64;
  hub_port = (tail[6] << 8) | tail[7];
  rank_state_t st[64];
  pthread_t th[64];
  if (threads > 64) return 2;
  for (int t = 0; t < threads; t++) {
    memset(&st[t], 0, sizeof st[t]);
    st[t].rank = proc * threads + t;
    pthread_create(&th[t], NULL, rank_main, &st[t]);
  }
  long calls = 0, errors = 0, bad = 0;
  for (int t = 0; t < threads; t++) {
    pthread_join(th[t], NULL);
    calls += st[t].calls;
    errors += st[t].errors;
    bad += st[t].bad_data;
  }
  printf("coord_job: process %d: %ld calls, %ld failed, %ld wrong results\n", proc, calls, errors,
         bad);
  return errors || bad ? 1 : 0;
}
