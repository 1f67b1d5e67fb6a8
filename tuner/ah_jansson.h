/* ah_jansson.h: jansson, the distribution's libjansson.so.4, loaded at run time by the process
 * that first writes or reads a report (tuner/ah_jansson.c says why it is not linked). Code keeps
 * including <jansson.h> and calling jansson's names; these two calls are the gate in front of
 * them: every report and profile entry point asks ah_jansson_ready() first. */
#ifndef AH_JANSSON_H
#define AH_JANSSON_H

/* The file name the library is loaded under (AUTOHA_JANSSON's fallback, the wheel's copy). */
#define AH_JANSSON_SONAME "libjansson.so.4"

/* Sets the one file to load (AUTOHA_JANSSON, a path to libjansson.so.4 or a name for the
 * loader), or with NULL or "" the search: libjansson.so.4 beside the object holding this code,
 * then the loader's own path. settings/ calls it with the parsed setting, as it sets the log's.
 * Note that it must come before the first ah_jansson_ready(): once loading started it changes
 * nothing. A path that does not fit (1024 bytes) is kept as given up to that size and fails to
 * load, naming it. */
void ah_jansson_set_path(const char *path);

/* Returns 1 when jansson is loaded, loading it at the first call (any thread; later calls cost
 * an atomic load), 0 when it cannot be: the first call then logs one error naming every file it
 * tried and why each failed, and no later call logs again.
 * Note that jansson's functions called without the library return their error values (NULL,
 * -1, 0) and do nothing, so a missed gate loses a report, never the job. */
int ah_jansson_ready(void);

#endif
