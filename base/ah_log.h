/* ah_log.h: autoha's log lines, in NCCL's shape —
 *   host:pid:tid [rank] autoha LEVEL subsys: message
 * ("[-]" before the rank is known; on a thread with no rank of its own — the HA thread, NCCL's
 * proxy thread, one thread driving several GPUs — the process's ranks, "[3]" or "[0-3]"), optionally preceded by a timestamp (AUTOHA_LOG_TIME), filtered by
 * level (AUTOHA_LOG=error|warn|info|debug, default warn) and by subsystem (AUTOHA_LOG_SUBSYS, as
 * NCCL_DEBUG_SUBSYS), written to stderr or the file AUTOHA_LOG_FILE names (ah_log_file.h), and —
 * once NCCL has handed the tuner plugin its logger — also through NCCL's logger, so that
 * NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING shows them in NCCL's own stream.
 *
 * Each file's lines carry the subsystem AH_LOG_SUBSYS names when the file is compiled (the build
 * sets it per folder and per file, see the CMakeLists.txt of base/, tuner/, shim/ and the others),
 * so the call sites stay `ah_log(level, fmt, ...)`.
 *
 * Note that logging never changes errno and never allocates: a guest library must leave the
 * application's state as it found it. Lines are written with one write(2) so lines from several
 * ranks of a process do not interleave. */
#ifndef AH_LOG_H
#define AH_LOG_H

#include <stddef.h>

enum { AH_LOG_ERROR = 0, AH_LOG_WARN = 1, AH_LOG_INFO = 2, AH_LOG_DEBUG = 3 };

/* Subsystems, one bit each in a mask (AUTOHA_LOG_SUBSYS). */
enum {
  AH_SUB_INIT = 0,   /* loading, NCCL and CUDA discovery, the tuner plugin face */
  AH_SUB_ENV = 1,    /* AUTOHA_* parsing and the override grammar */
  AH_SUB_TUNE = 2,   /* the search, schedules, decisions */
  AH_SUB_COORD = 3,  /* the coordinator hub and its clients */
  AH_SUB_QP = 4,     /* the queue-pair hook and the path policy */
  AH_SUB_REPORT = 5, /* reports and profiles */
  AH_SUB_HEALTH = 6, /* hang and straggler diagnosis */
  AH_SUB_COUNT = 7
};
#define AH_LOG_SUBSYS_ALL ((1u << AH_SUB_COUNT) - 1u)

#ifndef AH_LOG_SUBSYS
#define AH_LOG_SUBSYS AH_SUB_INIT
#endif

/* Current threshold (reads AUTOHA_LOG once, quietly: the env table reports a bad value). */
int ah_log_level(void);
/* Sets the threshold (tests, or the env table after it validated AUTOHA_LOG). */
void ah_log_set_level(int level);
/* Sets the subsystems shown (a mask of 1 << AH_SUB_*; the env table, from AUTOHA_LOG_SUBSYS). */
void ah_log_set_subsys(unsigned mask);
/* Turns the timestamp in front of each line on or off (AUTOHA_LOG_TIME). */
void ah_log_set_time(int on);
/* Sets the rank shown in log lines of the calling thread (-1: none). */
void ah_log_set_rank(int rank);
/* The same for a rank in a communicator of `nranks`: kept only when no larger communicator of the
 * thread has set one, so a thread's lines show its rank in the job's world, not in a split. */
void ah_log_set_rank_of(int rank, int nranks);
/* Records that this process holds `rank` of a communicator of `nranks` (every local rank, from
 * whichever thread creates its context): lines of threads without a rank of their own name the
 * process's ranks in its largest communicator — a larger one replaces the set, an equal one adds to
 * it, a smaller one (a split) is ignored, as for ah_log_set_rank_of. */
void ah_log_set_proc_rank(int rank, int nranks);
/* Records that this process's rank `rank` of a communicator of `nranks` runs on CUDA device `dev`
 * (from the thread that creates its context, with the device current): lines about that device's
 * work (ah_log_dev) name this rank, the one in the largest communicator the device is in. */
void ah_log_set_dev_rank(int dev, int rank, int nranks);
/* Writes the ranks of `ranks` (n of them, any order, duplicates allowed) as ascending ranges,
 * "0-3" or "0,2,5-7"; when that does not fit in len, "<n> ranks". "-" for none. Returns buf. */
char *ah_log_ranks_format(const int *ranks, int n, char *buf, size_t len);
/* Bytes of lines held for a log file not opened yet (AH_LOG_FD_HOLD). */
size_t ah_log_held(void);

/* Where lines go: a file descriptor (2 at start). AH_LOG_FD_HOLD keeps lines in a small buffer
 * (the log file's name needs a rank not known yet); setting a real descriptor writes the held lines
 * to it first. Returns the previous descriptor. */
#define AH_LOG_FD_HOLD (-2)
int ah_log_set_fd(int fd);

/* NCCL's logger, as the tuner plugin's init receives it: void (*)(level, flags, file, line, fmt, ...)
 * with NCCL's levels (WARN 2, INFO 3) and subsystem flags. Once set (the first non-NULL one of the
 * process wins: NCCL has one logger), every line up to info is also passed to it with NCCL's
 * TUNING flag, whatever AUTOHA_LOG says: NCCL_DEBUG and NCCL_DEBUG_SUBSYS then decide. */
typedef void (*ah_log_nccl_fn)(int level, unsigned long flags, const char *file, int line,
                               const char *fmt, ...);
void ah_log_set_nccl(ah_log_nccl_fn fn);
/* 1 once NCCL's logger is set (lines up to info are then formatted whatever AUTOHA_LOG says). */
int ah_log_nccl_set(void);

/* Parses a subsystem list — "tune,coord", "^qp,health" (all but those), "all" — as NCCL_DEBUG_SUBSYS
 * does, case-insensitive. Returns 0 with *mask_p set, or -1 naming the first unknown word in err. */
int ah_log_subsys_parse(const char *s, unsigned *mask_p, char *err, size_t errlen);
/* Writes a mask back as such a list ("all" for every subsystem). Returns buf. */
char *ah_log_subsys_format(unsigned mask, char *buf, size_t len);
/* Name of subsystem `sub` ("tune"), "?" out of range. */
const char *ah_log_subsys_name(int sub);

/* The one entry of every line; call it through ah_log(), which adds the file's subsystem. */
void ah_log_at(int subsys, int level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#define ah_log(level, ...) ah_log_at(AH_LOG_SUBSYS, (level), __VA_ARGS__)

/* A line about the whole process rather than the calling thread's rank (a decision every local
 * rank of a communicator applies, said once): its prefix names the process's ranks. */
void ah_log_proc_at(int subsys, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define ah_log_proc(level, ...) ah_log_proc_at(AH_LOG_SUBSYS, (level), __VA_ARGS__)

/* A line about the work of the rank on CUDA device `dev` (a queue pair NCCL created for it),
 * written by whichever thread (the failover's own): its prefix names that rank once the device's
 * rank is known (ah_log_set_dev_rank), else the calling thread's or the process's ranks, as
 * ah_log's. */
void ah_log_dev_at(int subsys, int level, int dev, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define ah_log_dev(dev, level, ...) ah_log_dev_at(AH_LOG_SUBSYS, (level), (dev), __VA_ARGS__)

/* Logs at most `cap` times per call site; the last permitted line says further ones are
 * suppressed. Usage: AH_LOG_CAPPED(3, AH_LOG_WARN, "...", ...). */
#define AH_LOG_CAPPED(cap, level, ...)                                                             \
  do {                                                                                             \
    static _Atomic int ah_log_count_;                                                              \
    int ah_n_ = ah_log_count_++;                                                                   \
    if (ah_n_ < (cap)) ah_log((level), __VA_ARGS__);                                               \
    if (ah_n_ == (cap)-1) ah_log((level), "(further messages like the last are suppressed)");      \
  } while (0)

/* The same for lines about a device's work (ah_log_dev). */
#define AH_LOG_DEV_CAPPED(cap, dev, level, ...)                                                    \
  do {                                                                                             \
    static _Atomic int ah_log_count_;                                                              \
    int ah_n_ = ah_log_count_++;                                                                   \
    if (ah_n_ < (cap)) ah_log_dev((dev), (level), __VA_ARGS__);                                    \
    if (ah_n_ == (cap)-1)                                                                          \
      ah_log_dev((dev), (level), "(further messages like the last are suppressed)");               \
  } while (0)

#endif
