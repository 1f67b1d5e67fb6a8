/* ah_version.h: autoha's version string, the one the banner, every report, `autoha env` and
 * `autoha --version` show. */
#ifndef AH_VERSION_H
#define AH_VERSION_H

/* Returns the project version followed, in a git checkout, by "+" and `git describe --always
 * --dirty` at build time ("0.1.0+c176ef7-dirty"); a static string.
 *
 * Note that the string is fixed when the library is built, not when it is loaded: two ranks
 * reporting different strings ran different builds. */
const char *ah_version(void);

#endif
