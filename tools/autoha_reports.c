/* Reading a job's reports for `autoha report`, `plot` and `trace`: files and folders of reports
 * (their subfolders too, as autoha-reports/<job>/ has them) in name order into one list, and the
 * ranks they hold. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "autoha_reports.h"

int cli_reports_walk(const char *path, int (*fn)(void *arg, const char *file), void *arg) {
  DIR *d = opendir(path);
  if (!d) return fn(arg, path);
  closedir(d);
  /* In name order, so the tables, pictures and the trace do not depend on the folder's order. */
  struct dirent **names;
  int nn = scandir(path, &names, NULL, alphasort), bad = 0;
  if (nn < 0) {
    fprintf(stderr, "autoha: %s: cannot list the folder\n", path);
    return 1;
  }
  for (int i = 0; i < nn; i++) {
    const char *name = names[i]->d_name;
    size_t n = strlen(name);
    char p[4096];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", path, name);
    if (name[0] == '.') { /* ".", "..", and hidden files are not reports */
    } else if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) { /* autoha-reports/<job>/ */
      bad += cli_reports_walk(p, fn, arg);
    } else if (n >= 5 && strcmp(name + n - 5, ".json") == 0) {
      bad += fn(arg, p);
    }
    free(names[i]);
  }
  free(names);
  return bad;
}

static int add_one(void *arg, const char *path) {
  plot_reports_t *rs = arg;
  ah_report_t *r = NULL;
  char err[512];
  if (ah_report_read(path, &r, err, sizeof err) != 0) {
    fprintf(stderr, "autoha: %s: %s\n", path, err);
    return 1;
  }
  if (rs->n == rs->cap) {
    int cap = rs->cap ? 2 * rs->cap : 16;
    ah_report_t **n = realloc(rs->r, sizeof *n * (size_t)cap);
    if (!n) {
      ah_report_free(r);
      fprintf(stderr, "autoha: %s: out of memory\n", path);
      return 1;
    }
    rs->r = n;
    rs->cap = cap;
  }
  rs->r[rs->n++] = r;
  return 0;
}

int plot_reports_read(plot_reports_t *rs, const char *path) {
  return cli_reports_walk(path, add_one, rs);
}

void plot_reports_free(plot_reports_t *rs) {
  for (int i = 0; i < rs->n; i++) ah_report_free(rs->r[i]);
  free(rs->r);
  memset(rs, 0, sizeof *rs);
}

int plot_reports_have_rank(const plot_reports_t *rs, int rank) {
  for (int i = 0; i < rs->n; i++)
    for (int c = 0; c < rs->r[i]->ncomms; c++)
      if (rs->r[i]->comms[c].rank == rank) return 1;
  return 0;
}

int plot_reports_ranks(const plot_reports_t *rs, char *out, size_t len) {
  /* Ascending, each once: the next rank above the last one printed, until none is left. */
  int n = 0, last = -1;
  size_t used = 0;
  out[0] = 0;
  for (;;) {
    int next = -1;
    for (int i = 0; i < rs->n; i++)
      for (int c = 0; c < rs->r[i]->ncomms; c++) {
        int r = rs->r[i]->comms[c].rank;
        if (r > last && (next < 0 || r < next)) next = r;
      }
    if (next < 0) break;
    if (used < len) used += (size_t)snprintf(out + used, len - used, "%s%d", n ? ", " : "", next);
    n++;
    last = next;
  }
  return n;
}
