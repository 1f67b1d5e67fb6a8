/* The per-thread block of the collective path (shim_thread.h), defined apart from the files that
 * write its fields so that none of them depends on another for it. */
#include "shim_internal.h"

AH_TLS_HOT ah_thread_t ah_thread;
