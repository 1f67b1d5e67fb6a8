/* The job's environment and refused overrides for `autoha report --merge`: every report's record
 * of the run (docs/report.md, "run") tallied across the job's reports — each AUTOHA_* and NCCL_*
 * variable with the values the ranks ran with, the GPU, CUDA and NCCL versions, the hosts — and
 * the AUTOHA_OVERRIDE rules that did not parse or that named a pair NCCL could not run.
 *
 * A value every report agrees on prints once; a value that differs prints with how many reports
 * held each, since a rank started with another NCCL_ALGO is the first thing to rule out. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoha_merge_env.h"

static void tally(merge_env_t *m, const char *label, const char *text) {
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->e[i].label, label) == 0 && strcmp(m->e[i].text, text) == 0) {
      m->e[i].count++;
      return;
    }
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 64;
    merge_env_entry_t *n = realloc(m->e, sizeof *n * (size_t)cap);
    if (!n) return;
    m->e = n;
    m->cap = cap;
  }
  merge_env_entry_t *e = &m->e[m->n++];
  snprintf(e->label, sizeof e->label, "%s", label);
  snprintf(e->text, sizeof e->text, "%s", text);
  e->count = 1;
}

void merge_env_add(merge_env_t *m, const ah_report_t *r) {
  const ah_report_run_t *run = &r->run;
  char v[32];
  m->nreports++;
  tally(m, "~host", r->host);
  ah_report_version_text(r->nccl_version, 1, v, sizeof v);
  tally(m, "NCCL version", v[0] ? v : "unknown");
  for (int c = 0; c < r->ncomms; c++)
    for (int k = 0; k < r->comms[c].nkeys; k++) {
      const ah_report_key_t *key = &r->comms[c].keys[k];
      if (!key->refused) continue;
      char t[160], lo[24], hi[24];
      size_t f = ah_size_bin_floor(key->bin);
      snprintf(t, sizeof t,
               "%s %s-%s on comm 0x%016" PRIx64 ": a pair NCCL cannot run here, NCCL's choice ran",
               ah_coll_name(key->coll), ah_size_format(f, lo, sizeof lo),
               ah_size_format(f ? f * 2 : 2, hi, sizeof hi), r->comms[c].id);
      tally(m, "~refused", t);
    }
  if (!run->present) return;
  m->nrun++;
  for (int i = 0; i < run->nnodes; i++) tally(m, "~host", run->nodes[i]);
  tally(m, "GPU", run->gpu[0] ? run->gpu : "unknown");
  tally(m, "GPU driver", run->gpu_driver[0] ? run->gpu_driver : "none");
  tally(m, "CUDA driver",
        run->cuda_driver ? ah_report_version_text(run->cuda_driver, 0, v, sizeof v) : "unknown");
  tally(m, "CUDA runtime",
        run->cuda_runtime ? ah_report_version_text(run->cuda_runtime, 0, v, sizeof v)
                          : "none loaded");
  for (int i = 0; i < run->nrefused; i++) tally(m, "~refused", run->refused[i]);
  for (int i = 0; i < run->nvars; i++) tally(m, run->vars[i].name, run->vars[i].value);
}

static int entry_cmp(const void *a, const void *b) {
  const merge_env_entry_t *x = a, *y = b;
  int c = strcmp(x->label, y->label);
  return c ? c : strcmp(x->text, y->text);
}

/* Prints every entry of one label on one line: "label: value" when the `of` reports agree, else
 * each value with its count. `eq` joins label and value. */
static void print_label(const merge_env_t *m, int i, int j, int of, const char *eq) {
  const merge_env_entry_t *e = &m->e[i];
  if (j - i == 1 && e->count == of) {
    printf("  %s%s%s\n", e->label, eq, e->text);
    return;
  }
  printf("  %s%s", e->label, eq);
  for (int k = i; k < j; k++)
    printf("%s%s (%d of %d reports)", k > i ? ", " : "", m->e[k].text, m->e[k].count, of);
  printf("\n");
}

void merge_env_print(merge_env_t *m) {
  qsort(m->e, (size_t)m->n, sizeof m->e[0], entry_cmp);
  printf("\nenvironment (%d reports, %d with a record of the run):\n", m->nreports, m->nrun);
  printf("  hosts:");
  int nhost = 0;
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->e[i].label, "~host") == 0) printf("%s %s", nhost++ ? "," : "", m->e[i].text);
  printf("\n");
  static const char *const facts[] = {"GPU", "GPU driver", "CUDA driver", "CUDA runtime",
                                      "NCCL version"};
  for (int pass = 0; pass < 2; pass++)
    for (int i = 0, j; i < m->n; i = j) {
      for (j = i + 1; j < m->n && strcmp(m->e[j].label, m->e[i].label) == 0;) j++;
      int fact = 0;
      for (size_t f = 0; f < sizeof facts / sizeof facts[0]; f++)
        fact |= strcmp(m->e[i].label, facts[f]) == 0;
      if (m->e[i].label[0] == '~' || fact != (pass == 0)) continue;
      int of = strcmp(m->e[i].label, "NCCL version") == 0 ? m->nreports : m->nrun;
      print_label(m, i, j, of, pass == 0 ? ": " : "=");
    }
  printf("refused overrides:");
  int nref = 0;
  for (int i = 0; i < m->n; i++)
    if (strcmp(m->e[i].label, "~refused") == 0)
      printf("\n  %s (%d of %d reports)", m->e[i].text, m->e[i].count, m->nreports), nref++;
  printf("%s\n", nref ? "" : " none");
}

void merge_env_free(merge_env_t *m) {
  free(m->e);
  memset(m, 0, sizeof *m);
}
