/* The process-wide state of the shim (ah_shim_t, shim_internal.h): its own file, so that every
 * other file can read it without depending on the file that fills it (shim_init.c). */
#include "shim_internal.h"

ah_shim_t ah_shim;
