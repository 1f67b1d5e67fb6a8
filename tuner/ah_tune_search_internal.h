/* ah_tune_search_internal.h: what the three files of the search's state machine share, in their one
 * direction of dependency — ah_tune_confirm.c (confirmation and finishing) < ah_tune_descent.c
 * (descent inside the subspaces, and their driver) < ah_tune_screen.c (the screen, the quick warm
 * check, the designed batches, and ah_tune_advance). Their interface to the rest of the engine is in
 * ah_tune_internal.h; this one is internal to those three files. */
#ifndef AH_TUNE_SEARCH_INTERNAL_H
#define AH_TUNE_SEARCH_INTERNAL_H

#include <stdint.h>

#include "ah_config.h"
#include "ah_tune_internal.h"

/* ---- ah_tune_confirm.c ---- */

/* Faces the best point with NCCL's default: pins one of them at once when the evidence already
 * decides, else wants fresh samples of both (phase AH_PH_CONFIRM). */
void ah_tune_start_confirm(ah_tune_t *t);
/* The confirmation's samples are in: pins the winner, or the default, or wants more of both. */
void ah_tune_eval_confirm(ah_tune_t *t);

/* ---- ah_tune_descent.c ---- */

/* Value index along dimension d one step (ratio 2^(1/2^level)) from probe c's in direction dir,
 * within the window of c's subspace; -1 past its ends. */
int ah_tune_step_to(const ah_tune_t *t, int c, int d, int dir, int level);
/* Index of the value of dim nearest (in ratio) to v > 0. */
int ah_tune_value_pos(const ah_dim_t *dim, int64_t v);
/* pos (a point of the whole space) as a point of subspace s in out: each index clamped into s's
 * window; with `start`, a dimension the start leaves to NCCL at the window's middle. */
void ah_tune_sub_pos(const ah_tune_t *t, int s, const int *pos, int start, int *out);
/* 1 when probe p should replace q as the best so far (faster, or as fast on fewer channels). */
int ah_tune_prefer(const ah_tune_t *t, int p, int q);
/* How far behind the best subspace s may measure and still be descended (a ratio > 1). */
double ah_tune_abandon_ratio(const ah_tune_t *t, int s);
/* The current subspace is done: its centre competes for best, and the next one is descended (or
 * the confirmation starts when none is left). */
void ah_tune_next_subspace(ah_tune_t *t);
/* The evaluations of the descent's phases once their samples are in: a descent step, a model step
 * (t->fit_p set), and a re-screen (phase AH_PH_RESCREEN). */
void ah_tune_eval_step(ah_tune_t *t);
void ah_tune_eval_fit(ah_tune_t *t);
void ah_tune_eval_rescreen(ah_tune_t *t);

#endif
