/* The truths a tuner_quality run is scored on: --truth and --report-truth's text (dev,
 * heldout:SEED, or a range heldout:A-B of the held-out family, sim/model/sim_model_heldout.h)
 * turned into members. The key choice: one member's text goes through sim_truth_parse, the parser
 * sim/ and ncclsim-optimum use, so the three accept and refuse the same text. */
#include "tq_truth.h"

#include <stdio.h>

int tq_truths_add(const char *text, sim_truth_sel_t *tr, int *n, int cap) {
  char err[200];
  unsigned long long a, b;
  int len = 0;
  if (sscanf(text, "heldout:%llu-%llu%n", &a, &b, &len) == 2 && !text[len] && a >= 1 && b >= a) {
    if (b - a >= (unsigned long long)(cap - *n)) {
      fprintf(stderr, "tuner_quality: --truth '%s': more than %d members\n", text, cap);
      return -1;
    }
    for (unsigned long long sd = a; sd <= b; sd++) tr[(*n)++] = (sim_truth_sel_t){1, sd};
    return 0;
  }
  if (*n >= cap) {
    fprintf(stderr, "tuner_quality: --truth '%s': more than %d members\n", text, cap);
    return -1;
  }
  if (sim_truth_parse(text, &tr[*n], err, sizeof err) != 0) {
    fprintf(stderr, "tuner_quality: --truth: %s\n", err);
    return -1;
  }
  (*n)++;
  return 0;
}
