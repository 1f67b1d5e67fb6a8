/* ah_coord_linkmat.h: which link, NIC port or host slows a communicator, read from the effective
 * rate of every connection between its ranks — C4D's matrix. Pure logic (ah_coord_linkmat.c), fed
 * by the hub once a window from the per-connection summaries the ranks' processes send
 * (docs/diagnosis.md, "Slow links").
 *
 * A connection is one queue pair NCCL sends on: from rank src to rank dst of the communicator. Its
 * effective rate in a window is the bytes its work requests moved over the time it had any of them
 * outstanding (post to completion, overlaps counted once), so a connection that idles while the
 * ring waits for another still reads at its path's speed. A cell (src, dst) reads at its slowest
 * connection. Each window the cells are judged against the median connection of the communicator:
 * a cell below pct percent of its rate is slow. A whole row of at least two slow cells points at the source (its
 * NIC or host), a whole column at the destination, a lone slow cell at its path. Only a verdict
 * that holds in AH_LM_PERSIST of a target's last AH_LM_WINDOWS measured windows is reported, so a
 * burst of congestion from another job, or an ECMP collision (a flow at a half or a third of the
 * others' rate, above the threshold), reads as nothing. */
#ifndef AH_COORD_LINKMAT_H
#define AH_COORD_LINKMAT_H

#include <stddef.h>
#include <stdint.h>

#define AH_LM_HOPS 6     /* what a connection's path crosses, for localisation (NIC ports, links) */
#define AH_LM_WINDOWS 4  /* a target's latest measured verdicts kept */
#define AH_LM_PERSIST 3  /* slow in this many of them to be reported */
#define AH_LM_IDLE 30    /* windows a target may go unmeasured before it is forgotten */
#define AH_LM_BURST 4    /* slow findings per communicator in AH_LM_BURST_S; more wait */
#define AH_LM_BURST_S 60 /* seconds */

/* One connection's measurement in the window being filled. */
typedef struct {
  uint32_t src, dst; /* ranks of the communicator */
  uint64_t id;       /* the caller's name for the connection, the same every window */
  double bytes;      /* moved by its completed work requests */
  double busy_s;     /* time with a work request outstanding */
  uint32_t wrs; /* completed signalled work requests (each covers the unsignalled ones before it) */
  int nhops;
  uint32_t hops[AH_LM_HOPS]; /* the caller's names of what its path crosses, in path order */
} ah_lm_conn_t;

typedef struct {
  double pct;       /* a cell is slow below this percent of the median connection (0 < pct < 100) */
  double min_bytes; /* a connection counts in a window when it moved at least this much */
  uint32_t min_wrs; /* and completed at least this many signalled work requests */
  int min_cells;    /* a window is judged when at least this many cells were measured (>= 2) */
} ah_lm_opts_t;

/* pct 20, 64 KiB, 2 work requests, 3 cells. */
void ah_lm_opts_default(ah_lm_opts_t *o_p);

enum {
  AH_LM_CELL = 1, /* the connections from src to dst: their path (a link, a NIC port) */
  AH_LM_ROW = 2,  /* every connection from src: the source's NIC or host */
  AH_LM_COL = 3   /* every connection to dst: the destination's NIC or host */
};

/* A target's report: found slow, or back at speed (cleared). */
typedef struct {
  int kind;          /* AH_LM_* */
  int cleared;       /* 0: slow now; 1: at speed again for AH_LM_WINDOWS windows */
  uint32_t src, dst; /* CELL: the cell; ROW: src (dst: its slowest cell's); COL: dst (src: the
                       * slowest cell's) */
  double rate, ref;  /* bytes/s: the target's slowest connection's rate, the median one's */
  double window_s;   /* the window's length */
  int slow, windows; /* slow verdicts among the last measured ones */
  int ncells;        /* cells of the target measured in its latest window (CELL: 1) */
  int nconns, nslow; /* its connections measured in that window, and how many were slow */
  uint64_t worst;    /* the slowest connection's id */
  int nhop; /* the hops of the slowest connection's path that no connection at speed crosses
             * and most of the window's slow connections cross (several when they tie: the data
             * cannot tell them apart), in path order; 0 when none */
  uint32_t hop[AH_LM_HOPS];
  int hop_slow;        /* how many of the window's slow connections cross hop[0] */
  uint32_t suppressed; /* slow findings of this communicator held back by the rate limit so far */
} ah_lm_event_t;

/* A communicator's figures for `autoha status`: the latest judged window. */
typedef struct {
  int windows;     /* windows judged so far */
  int cells, slow; /* cells measured in the latest one, and slow ones */
  double ref;      /* its median connection's rate, bytes/s (0: none yet) */
  int flagged;     /* targets reported slow and not cleared */
} ah_lm_stats_t;

typedef struct ah_lm ah_lm_t;

/* A matrix for a communicator of nranks ranks, or NULL (out of memory, nranks 0, opts out of
 * range). */
ah_lm_t *ah_lm_new(uint32_t nranks, const ah_lm_opts_t *opts);
void ah_lm_free(ah_lm_t *lm);
/* Adds a connection's measurement to the window being filled (a connection added twice in a
 * window adds up). Ignored when src or dst is out of range or src == dst. */
void ah_lm_add(ah_lm_t *lm, const ah_lm_conn_t *c);
/* Closes the window (now_s: its end, window_s: its length), judges it and starts the next.
 * Returns the number of events it queued. */
int ah_lm_close(ah_lm_t *lm, double now_s, double window_s);
/* Takes the oldest event not yet taken. Returns 1 with *ev, 0 when none. */
int ah_lm_next(ah_lm_t *lm, ah_lm_event_t *ev);
void ah_lm_stats(const ah_lm_t *lm, ah_lm_stats_t *st);

/* The finding's line for ev (AH_HEALTH_TEXT bytes at text): `comm`, the places of its ranks
 * (src_who, dst_who: "host pid P gpu G"), and where (what the worst connection's path is and the
 * hop found, as the hub names them; "" when it knows nothing), last: a line cut at the finding's
 * bound loses the least telling part. The persistence (slow, windows) is the rule's, not said. */
void ah_lm_text(uint64_t comm, const ah_lm_event_t *ev, const char *src_who, const char *dst_who,
                const char *where, char *text, size_t len);

#endif
