/* tq_truth.h: the truths a tuner_quality run is scored on (--truth, --report-truth). */
#ifndef TQ_TRUTH_H
#define TQ_TRUTH_H

#include "sim_model_heldout.h"

/* Appends the members `text` names (dev, heldout:SEED, or heldout:A-B for seeds A..B) to tr,
 * which holds *n of cap. Returns 0, or -1 after one message on stderr naming the text (a bad
 * text, or more than cap members); tr and *n are then left as they were. */
int tq_truths_add(const char *text, sim_truth_sel_t *tr, int *n, int cap);

#endif
