/* qpnext.c: two tiny libraries (built twice, QPNEXT_VALUE 1 and 2) that both define qp_marker;
 * the first also asks dlsym(RTLD_NEXT, "qp_marker"). With the shim's dlsym in between, the answer
 * must still be the second library's: the lookup is relative to the caller, not to the shim. */
#include <dlfcn.h>

__attribute__((visibility("default"))) int qp_marker(void);
__attribute__((visibility("default"))) int qp_marker(void) { return QPNEXT_VALUE; }

#if QPNEXT_VALUE == 2
/* referenced by the test so the linker keeps this library in the search order */
__attribute__((visibility("default"))) int qpnext_two(void);
__attribute__((visibility("default"))) int qpnext_two(void) { return 2; }
#endif

#if QPNEXT_VALUE == 1
__attribute__((visibility("default"))) int qpnext_lookup(void);
__attribute__((visibility("default"))) int qpnext_lookup(void) {
  int (*next)(void) = (int (*)(void))dlsym(RTLD_NEXT, "qp_marker");
  return next ? next() : -1;
}
#endif
