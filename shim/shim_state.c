/* The process-wide state of the shim (ah_shim_t, shim_internal.h) and how its own threads start:
 * a file of their own, so that every other file can use them without depending on the file that
 * fills the state (shim_init.c). */
#include <pthread.h>

#include "shim_internal.h"

ah_shim_t ah_shim;

_Atomic int ah_shim_slow_calls;
_Atomic int ah_shim_stream_notes;

/* Calls noted per request: a group of every GPU of a node (8) several times over, and a bound on
 * the handle look-ups a tick costs. */
#define STREAM_NOTES 64

void ah_shim_stream_notes_request(void) {
  atomic_store(&ah_shim_stream_notes, STREAM_NOTES);
  atomic_fetch_or(&ah_shim_slow_calls, AH_SLOW_NOTE_STREAMS);
}

int ah_shim_thread_detached(void *(*fn)(void *), const char *what) {
  pthread_t th;
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&th, &attr, fn, NULL);
  pthread_attr_destroy(&attr);
  if (rc != 0) ah_log(AH_LOG_WARN, "cannot start %s", what);
  return rc == 0 ? 0 : -1;
}
