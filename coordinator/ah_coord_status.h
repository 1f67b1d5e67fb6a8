/* ah_coord_status.h: `autoha status` — the hub's view of a running job (its communicators, their
 * ranks' progress, the current findings), read through the same authenticated handshake every
 * client uses. The hub's process writes the job's credentials (the hub's address and the job
 * secret) to a file only its user can read; whoever can read that file may ask. */
#ifndef AH_COORD_STATUS_H
#define AH_COORD_STATUS_H

#include <stddef.h>
#include <stdint.h>

#include "ah_coord.h"
#include "ah_coord_health.h"

/* Writes the credentials of the hub of `st` to path, mode 0600 (replacing the file). Returns 0, or
 * -1 with the reason in err. */
int ah_coord_cred_write(const char *path, const ah_coord_stamp_t *st, char *err, size_t errlen);
/* Reads them back. Returns 0 with *st, or -1 with the reason in err (naming the offending text). */
int ah_coord_cred_read(const char *path, ah_coord_stamp_t *st, char *err, size_t errlen);

/* One communicator the hub diagnoses, and one of its ranks. */
typedef struct {
  uint64_t comm;
  uint32_t nranks;
  uint8_t verdict;           /* AH_COORD_VERDICT_* */
  uint8_t finding;           /* AH_FINDING_* of the current stall, 0 none */
  uint32_t stalled_ms;       /* since any of its ranks advanced */
  char text[AH_HEALTH_TEXT]; /* the current finding's line, "" none */
} ah_status_comm_t;

typedef struct {
  uint64_t comm;
  uint32_t rank;
  uint8_t have;     /* a progress record arrived */
  uint8_t state;    /* AH_HEALTH_*, or AH_STATUS_* below */
  uint64_t entered; /* calls entered, all keys the record lists */
  uint32_t age_ms;  /* since its latest record */
  uint32_t pid;
  uint16_t gpu; /* 0xffff unknown */
  char host[64];
  /* Its lateness over its latest sampled calls (ah_coord_straggler.h), in tenths of a percent of
   * the calls' time: median and p90 (negative: early), and the others' wait for it. */
  uint8_t straggler;  /* flagged now */
  uint8_t late_calls; /* calls judged (0: no figure yet) */
  int16_t late_p50, late_p90;
  uint16_t wait_share;
} ah_status_rank_t;
/* A rank's state beyond its record's (ah_coord_hub_health.c): its process died, stopped
 * responding, or left the communicator. */
enum { AH_STATUS_DEAD = 3, AH_STATUS_SILENT = 4, AH_STATUS_LEFT = 5 };

/* Asks the hub of `st` for its status: calls on_comm for each communicator, then on_rank for each
 * of its ranks. Returns 0; AH_COORD_STATUS_GONE when nothing listens at the hub's address (the
 * connection was refused: its process is gone, so the job ended or its hub's rank died); or -1
 * with the reason in err (unreachable, refused credentials, a malformed answer). err is filled
 * for both failures. */
#define AH_COORD_STATUS_GONE (-2)
int ah_coord_status_query(const ah_coord_stamp_t *st, int timeout_ms,
                          void (*on_comm)(void *arg, const ah_status_comm_t *c),
                          void (*on_rank)(void *arg, const ah_status_rank_t *r), void *arg,
                          char *err, size_t errlen);

/* Wire lengths of the hub's answers (STATUS_COMM, STATUS_RANK, STATUS_END). */
#define AH_STATUS_COMM_BYTES (8 + 4 + 1 + 1 + 4 + AH_HEALTH_TEXT)
#define AH_STATUS_RANK_BYTES (8 + 4 + 1 + 1 + 8 + 4 + 4 + 2 + 64 + 1 + 1 + 2 + 2 + 2)
void ah_status_comm_pack(const ah_status_comm_t *c, uint8_t *out);
void ah_status_rank_pack(const ah_status_rank_t *r, uint8_t *out);

#endif
