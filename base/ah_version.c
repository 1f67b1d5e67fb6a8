/* ah_version.c: the one file that includes the generated version header (cmake/Version.cmake), so
 * a new commit recompiles this file alone. */
#include "ah_version.h"

#include "ah_version_gen.h"

const char *ah_version(void) { return AH_VERSION_STRING; }
