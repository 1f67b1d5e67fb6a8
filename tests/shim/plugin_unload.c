/* plugin_unload: libautoha.so loaded the way NCCL loads a tuner plugin that is not preloaded —
 * dlopen(RTLD_NOW | RTLD_LOCAL), a communicator's init, calls and finalize, then dlclose when the
 * last communicator is gone — after which the program goes on and starts and ends threads. The
 * shim keeps threads and thread-exit destructors, so it must stay mapped (-z nodelete): after the
 * dlclose it is still loaded, and nothing crashes.
 *   plugin_unload LIBAUTOHA   exits 0 when so, 1 (with the reason) otherwise */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "autoha/nccl_tuner_abi.h"

static void *nothing(void *arg) { return arg; }

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: plugin_unload LIBAUTOHA\n");
    return 2;
  }
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "plugin_unload: dlopen: %s\n", dlerror());
    return 1;
  }
  const ah_tuner_v5_t *p = dlsym(h, "ncclTunerPlugin_v5");
  if (!p) {
    fprintf(stderr, "plugin_unload: no ncclTunerPlugin_v5\n");
    return 1;
  }
  void *ctx = NULL;
  if (p->init(&ctx, 0x7171, 8, 1, NULL, NULL, NULL) != ncclSuccess) {
    fprintf(stderr, "plugin_unload: init failed\n");
    return 1;
  }
  float table[AH_NUM_ALGOS][AH_NUM_PROTOS] = {{0}};
  int nch = 0;
  for (int i = 0; i < 100; i++)
    p->getCollInfo(ctx, AH_FUNC_ALLREDUCE, 1 << 20, 1, (float **)(void *)table, AH_NUM_ALGOS,
                   AH_NUM_PROTOS, 0, &nch);
  p->finalize(ctx);
  dlclose(h);
  for (int i = 0; i < 4; i++) { /* threads come and go after the unload */
    pthread_t t;
    if (pthread_create(&t, NULL, nothing, NULL) != 0 || pthread_join(t, NULL) != 0) return 1;
  }
  if (!dlopen(argv[1], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
    fprintf(stderr, "plugin_unload: %s was unloaded by dlclose (not linked -z nodelete)\n",
            argv[1]);
    return 1;
  }
  printf("plugin_unload: %s stays loaded after NCCL-style dlclose\n", argv[1]);
  return 0;
}
