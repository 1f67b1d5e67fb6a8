/* ah_coord_health.h: what a communicator's ranks' progress records say when the communicator has
 * stopped advancing — which rank or ranks hang it, and how. Pure logic (ah_coord_health.c), fed by
 * the hub from the PROGRESS records every rank sends at most once a second; see docs/diagnosis.md.
 *
 * A record carries, for one rank: the calls it entered per key (collective, size bin) — counted by
 * the shim when NCCL plans each call — and whether its GPU stream has completed every call it
 * entered (a probe event recorded once the rank's calls stop advancing). */
#ifndef AH_COORD_HEALTH_H
#define AH_COORD_HEALTH_H

#include <stddef.h>
#include <stdint.h>

/* Keys a record carries: the ones whose counts changed last (a hang involves the latest calls). */
#define AH_HEALTH_KEYS 16
/* Bytes of a finding's text, NUL included. */
#define AH_HEALTH_TEXT 232

enum {
  AH_HEALTH_IDLE = 0,   /* every call the rank entered has completed on its stream */
  AH_HEALTH_BUSY = 1,   /* a call it entered has not completed (yet) */
  AH_HEALTH_UNKNOWN = 2 /* no probe possible (no CUDA driver, a capturing stream) */
};

/* Where the rank's host thread is, as far as the shim knows: inside the NCCL call it made last
 * (blocked there, e.g. waiting for its peers) or back in the program (computing, or waiting for its
 * own GPU in a stream synchronisation). Tells "the others wait for my GPU inside NCCL" from "my
 * host waits for my GPU" when a hang leaves every rank busy (ah_coord_health.c). */
enum { AH_HEALTH_HOST_UNKNOWN = 0, AH_HEALTH_HOST_IN_NCCL = 1, AH_HEALTH_HOST_OUTSIDE = 2 };

typedef struct {
  uint8_t coll, bin;
  uint64_t entered;
} ah_health_key_t;

typedef struct ah_health_rec {
  uint32_t rank, pid;
  uint16_t gpu;
  uint8_t state; /* AH_HEALTH_* */
  uint8_t host;  /* AH_HEALTH_HOST_* (on the wire: the state byte's high nibble) */
  uint8_t nkeys;
  ah_health_key_t keys[AH_HEALTH_KEYS];
} ah_health_rec_t;

/* What the hub concludes. */
enum {
  AH_FINDING_NONE = 0,
  AH_FINDING_MISSING = 1,    /* (a) some ranks never entered a call the others entered */
  AH_FINDING_INCOMPLETE = 2, /* (b) a call was entered and its GPU work never completed */
  AH_FINDING_MISMATCH = 3,   /* (c) ranks entered different calls */
  AH_FINDING_RESUMED = 4,    /* the communicator advances again after a finding */
  AH_FINDING_STRAGGLER = 5,  /* a rank is consistently late (ah_coord_straggler.h) */
  AH_FINDING_RECOVERED = 6,  /* a straggler is on time again */
  AH_FINDING_SLOW_LINK =
      7, /* a connection, or every connection of a rank, is slow (ah_coord_linkmat.h) */
  AH_FINDING_LINK_OK = 8,  /* it is at speed again */
  AH_FINDING_DIED = 9,     /* a rank's process left the hub without a goodbye (killed, crashed) */
  AH_FINDING_STOPPED = 10, /* a rank's records stopped while the others' arrive (frozen process) */
  AH_FINDING_NIC_DOWN = 11 /* a port of a rank's NIC went down (its NIC said so: ah_coord_nic.h) */
};
#define AH_FINDING_LAST AH_FINDING_NIC_DOWN /* names: ah_report_health_kind (tuner/ah_report.h) */

/* Where a rank runs, for the text: its host (the hub knows the connection's address). */
typedef struct {
  const ah_health_rec_t *rec;
  const char *host;
} ah_health_rank_t;

/* A finding as the hub sends it: the line every process logs, and its parts for programs (the
 * AUTOHA_HEALTH_CMD event): the ranks at fault and the call it is about. */
#define AH_FINDING_RANKS 4 /* ranks at fault carried with their place; the rest are counted */
#define AH_FINDING_HOST 48
typedef struct {
  uint32_t rank, pid;
  uint16_t gpu;               /* 0xffff unknown */
  char host[AH_FINDING_HOST]; /* "" when the rank never reported */
} ah_finding_rank_t;

typedef struct {
  int kind; /* AH_FINDING_* */
  char text[AH_HEALTH_TEXT];
  uint32_t nranks;                           /* ranks at fault, all of them (0: none singled out) */
  ah_finding_rank_t ranks[AH_FINDING_RANKS]; /* the first of them */
  int has_call; /* the call it is about (key and index), when there is one */
  uint8_t coll, bin;
  uint64_t index;
} ah_finding_t;

/* Classifies a stalled communicator of n ranks (ranks[i] is rank i's latest record; a NULL rec
 * means that rank never reported). `comm` and `stalled_s` (seconds since any rank advanced) go
 * into the text. Returns the AH_FINDING_* kind and fills *f (its line, the ranks at fault and the
 * call), or AH_FINDING_NONE when the records show no collective hang (every rank idle with the same
 * calls entered: the job waits outside NCCL). */
int ah_health_classify(uint64_t comm, const ah_health_rank_t *ranks, uint32_t n, double stalled_s,
                       ah_finding_t *f);
/* Adds rank r (its record, or NULL, and host) to f's ranks at fault. */
void ah_finding_add_rank(ah_finding_t *f, uint32_t r, const ah_health_rec_t *rec, const char *host);

/* Wire form of a finding (the FINDING message after its comm u64): AH_FINDING_BYTES. */
#define AH_FINDING_RANK_BYTES (4 + 4 + 2 + AH_FINDING_HOST)
#define AH_FINDING_BYTES                                                                           \
  (1 + AH_HEALTH_TEXT + 4 + AH_FINDING_RANKS * AH_FINDING_RANK_BYTES + 1 + 1 + 1 + 8)
void ah_finding_pack(const ah_finding_t *f, uint8_t *out);
/* Unpacks and validates (kind, texts printable and NUL-terminated, the call's key). Returns 0, or
 * -1 with a reason naming the offending value. */
int ah_finding_unpack(const uint8_t *in, ah_finding_t *f, char *err, size_t errlen);

/* Wire form of a record (the PROGRESS message after its comm u64): AH_HEALTH_REC_BYTES. */
#define AH_HEALTH_REC_BYTES (4 + 4 + 2 + 1 + 1 + AH_HEALTH_KEYS * 10)
void ah_health_rec_pack(const ah_health_rec_t *r, uint8_t *out);
/* Unpacks and validates (state, nkeys, each used key's collective and bin, unused keys zero).
 * Returns 0, or -1 with a reason naming the offending value. */
int ah_health_rec_unpack(const uint8_t *in, ah_health_rec_t *r, char *err, size_t errlen);

/* One sampled call's GPU duration on one rank, for the straggler detector. The shim samples the
 * same call indices on every rank; a SAMPLES message (after its comm u64 and rank u32) carries a
 * count u8 and AH_HEALTH_SAMPLES of them (unused ones zero). */
#define AH_HEALTH_SAMPLES 16
typedef struct {
  uint8_t coll, bin;
  uint64_t index;
  float us;
} ah_health_sample_t;
#define AH_HEALTH_SAMPLE_BYTES 14
#define AH_HEALTH_SAMPLES_BYTES (4 + 1 + AH_HEALTH_SAMPLES * AH_HEALTH_SAMPLE_BYTES)
void ah_health_samples_pack(uint32_t rank, const ah_health_sample_t *x, int n, uint8_t *out);
/* Unpacks and validates (count, keys, durations finite and non-negative, unused slots zero).
 * Returns the count, or -1 with a reason naming the offending value. */
int ah_health_samples_unpack(const uint8_t *in, uint32_t *rank, ah_health_sample_t *x, char *err,
                             size_t errlen);

#endif
