/* lazy_main: NCCL arrives after the program started, the way `import torch` brings it in. The
 * program links no NCCL; it opens a library that does (shim_job built as a module) with
 * dlopen(RTLD_NOW | RTLD_LOCAL), as Python opens extension modules, and runs the job through it.
 *
 *   lazy_main [--early-call] MODULE [shim_job arguments...]
 *
 * It checks that the test means what it says: no libnccl is visible before the dlopen, and after
 * it libnccl is still outside the global scope (dlsym(RTLD_DEFAULT) cannot find a function only
 * sim/'s libnccl defines), so the preloaded shim must find it some other way. With --early-call it
 * first calls the preloaded shim's ncclGetUniqueId while no NCCL is loaded, which must fail with
 * ncclInvalidUsage (and must not stop the job's calls after the dlopen from reaching NCCL).
 * Exit status: the job's, or 3 when a check fails. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <nccl.h>

#define SIM_ONLY "ncclsimExchangeUniqueId" /* defined by sim/'s libnccl and nothing else */

int main(int argc, char **argv) {
  int early = argc > 1 && strcmp(argv[1], "--early-call") == 0;
  argc -= early;
  argv += early;
  if (argc < 2) {
    fprintf(stderr, "usage: lazy_main [--early-call] MODULE [shim_job arguments...]\n");
    return 2;
  }
  if (dlsym(RTLD_DEFAULT, SIM_ONLY)) {
    fprintf(stderr, "lazy_main: NCCL is loaded before main: this test would prove nothing\n");
    return 3;
  }
  if (early) {
    ncclResult_t (*get_id)(ncclUniqueId *) =
        (ncclResult_t(*)(ncclUniqueId *))dlsym(RTLD_DEFAULT, "ncclGetUniqueId");
    if (!get_id) {
      fprintf(stderr, "lazy_main: --early-call needs the shim preloaded (no ncclGetUniqueId)\n");
      return 3;
    }
    ncclUniqueId id;
    ncclResult_t r = get_id(&id);
    printf("early ncclGetUniqueId: %d\n", (int)r);
    if (r != ncclInvalidUsage) {
      fprintf(stderr,
              "lazy_main: ncclGetUniqueId without any NCCL returned %d, not ncclInvalidUsage\n",
              (int)r);
      return 3;
    }
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "lazy_main: dlopen %s: %s\n", argv[1], dlerror());
    return 3;
  }
  if (dlsym(RTLD_DEFAULT, SIM_ONLY)) {
    fprintf(stderr, "lazy_main: libnccl is in the global scope after an RTLD_LOCAL dlopen\n");
    return 3;
  }
  int (*job)(int, char **) = (int (*)(int, char **))dlsym(h, "shim_job_main");
  if (!job) {
    fprintf(stderr, "lazy_main: %s has no shim_job_main: %s\n", argv[1], dlerror());
    return 3;
  }
  argv[1] = argv[0]; /* the job sees its own arguments after its name */
  return job(argc - 1, argv + 1);
}
