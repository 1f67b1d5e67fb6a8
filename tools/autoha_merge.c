/* `autoha report --merge DIR|FILE...`: the job, not one rank — every report of a job read together,
 * one table per communicator, one row per key: how many ranks ran it, the configuration most of them
 * ran, the min / median / max over ranks of the tuned (applied) and of NCCL's default time, and the
 * ranks that deviate — another configuration than the majority's, or a time more than --pct percent
 * off the median. As text tables, --csv or --json.
 *
 * Communicators are matched by the identity every rank computes, so the reports of one run merge;
 * a rank's position is its rank in that communicator. */
#include <dirent.h>
#include <sys/stat.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autoha_cli.h"
#include "autoha_merge_env.h"
#include "ah_jansson.h"
#include "ah_report.h"

/* One rank's view of one key. */
typedef struct {
  int rank;
  double tuned_us, default_us; /* NAN when not timed */
  char cfg[64];
} row_t;

typedef struct {
  uint64_t comm;
  int nranks, nnodes, coll, bin;
  int n, cap;
  row_t *rows;
} mkey_t;

typedef struct {
  int n, cap;
  mkey_t *keys;
  merge_env_t env; /* the job's environment and refused overrides */
} merge_t;

static double mean(const ah_report_stat_t *s) {
  return s->timed ? s->us_total / (double)s->timed : NAN;
}

static mkey_t *key_get(merge_t *m, const ah_report_comm_t *c, const ah_report_key_t *k) {
  for (int i = 0; i < m->n; i++)
    if (m->keys[i].comm == c->id && m->keys[i].coll == k->coll && m->keys[i].bin == k->bin)
      return &m->keys[i];
  if (m->n == m->cap) {
    int cap = m->cap ? 2 * m->cap : 32;
    mkey_t *n = realloc(m->keys, sizeof *n * (size_t)cap);
    if (!n) return NULL;
    m->keys = n;
    m->cap = cap;
  }
  mkey_t *e = &m->keys[m->n++];
  memset(e, 0, sizeof *e);
  e->comm = c->id;
  e->nranks = c->nranks;
  e->nnodes = c->nnodes;
  e->coll = k->coll;
  e->bin = k->bin;
  return e;
}

static void add_report(merge_t *m, const ah_report_t *r) {
  merge_env_add(&m->env, r);
  for (int ci = 0; ci < r->ncomms; ci++) {
    const ah_report_comm_t *c = &r->comms[ci];
    for (int ki = 0; ki < c->nkeys; ki++) {
      const ah_report_key_t *k = &c->keys[ki];
      mkey_t *e = key_get(m, c, k);
      if (!e) continue;
      if (e->n == e->cap) {
        int cap = e->cap ? 2 * e->cap : 8;
        row_t *n = realloc(e->rows, sizeof *n * (size_t)cap);
        if (!n) continue;
        e->rows = n;
        e->cap = cap;
      }
      row_t *w = &e->rows[e->n++];
      w->rank = c->rank;
      w->default_us = mean(&k->nccl_default);
      w->tuned_us = mean(&k->applied);
      if (k->source == AH_SOURCE_DEFAULT) snprintf(w->cfg, sizeof w->cfg, "nccl");
      else ah_config_format(&k->applied.cfg, w->cfg, sizeof w->cfg);
    }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* min, median, max of the rows' tuned (which 0) or default (1) times; NAN when none is timed. */
static void spread(const mkey_t *e, int which, double out[3]) {
  double v[e->n > 0 ? e->n : 1];
  int n = 0;
  for (int i = 0; i < e->n; i++) {
    double x = which ? e->rows[i].default_us : e->rows[i].tuned_us;
    if (!isnan(x)) v[n++] = x;
  }
  if (!n) {
    out[0] = out[1] = out[2] = NAN;
    return;
  }
  qsort(v, (size_t)n, sizeof v[0], cmp_double);
  out[0] = v[0];
  out[1] = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  out[2] = v[n - 1];
}

/* The configuration most rows ran (ties: the first seen). */
static const char *majority(const mkey_t *e) {
  const char *best = e->n ? e->rows[0].cfg : "";
  int bestn = 0;
  for (int i = 0; i < e->n; i++) {
    int c = 0;
    for (int j = 0; j < e->n; j++) c += strcmp(e->rows[i].cfg, e->rows[j].cfg) == 0;
    if (c > bestn) bestn = c, best = e->rows[i].cfg;
  }
  return best;
}

/* The deviating ranks as "3(cfg),5(+23%)" into buf. Returns the count. */
static int deviants(const mkey_t *e, double pct, char *buf, size_t len) {
  const char *maj = majority(e);
  double t[3];
  spread(e, 0, t);
  size_t o = 0;
  int count = 0;
  buf[0] = 0;
  for (int i = 0; i < e->n && o + 1 < len; i++) {
    const row_t *w = &e->rows[i];
    char why[96] = "";
    if (strcmp(w->cfg, maj) != 0) snprintf(why, sizeof why, "%s", w->cfg);
    else if (!isnan(w->tuned_us) && !isnan(t[1]) && t[1] > 0 &&
             fabs(w->tuned_us / t[1] - 1) * 100 > pct)
      snprintf(why, sizeof why, "%+.0f%%", (w->tuned_us / t[1] - 1) * 100);
    if (!why[0]) continue;
    int n = snprintf(buf + o, len - o, "%s%d(%s)", count ? " " : "", w->rank, why);
    if (n > 0) o += (size_t)n;
    if (o >= len) o = len - 1;
    count++;
  }
  return count;
}

static void key_name(const mkey_t *e, char *buf, size_t len) {
  char lo[24], hi[24];
  size_t f = ah_size_bin_floor(e->bin);
  snprintf(buf, len, "%s %s-%s", ah_coll_name(e->coll), ah_size_format(f, lo, sizeof lo),
           ah_size_format(f ? f * 2 : 2, hi, sizeof hi));
}

static void us(double v, char *buf, size_t len) {
  if (isnan(v)) snprintf(buf, len, "-");
  else snprintf(buf, len, "%.1f", v);
}

static void print_text(const merge_t *m, double pct) {
  uint64_t done[m->n > 0 ? m->n : 1];
  int ndone = 0;
  for (int i = 0; i < m->n; i++) {
    uint64_t comm = m->keys[i].comm;
    int seen = 0;
    for (int j = 0; j < ndone; j++) seen |= done[j] == comm;
    if (seen) continue;
    done[ndone++] = comm;
    printf("%scomm 0x%016llx: %d ranks on %d nodes\n", ndone > 1 ? "\n" : "",
           (unsigned long long)comm, m->keys[i].nranks, m->keys[i].nnodes);
    printf("  %-26s %5s  %-24s %20s %20s %7s  %s\n", "key", "ranks", "config (majority)",
           "tuned us min/med/max", "NCCL us min/med/max", "speedup", "deviating ranks");
    for (int k = i; k < m->n; k++) {
      const mkey_t *e = &m->keys[k];
      if (e->comm != comm) continue;
      char name[64], dev[512], tv[3][16], dv[3][16], tcol[64], dcol[64], sp[16] = "-";
      double t[3], d[3];
      key_name(e, name, sizeof name);
      spread(e, 0, t);
      spread(e, 1, d);
      for (int j = 0; j < 3; j++) us(t[j], tv[j], sizeof tv[j]), us(d[j], dv[j], sizeof dv[j]);
      snprintf(tcol, sizeof tcol, "%s/%s/%s", tv[0], tv[1], tv[2]);
      snprintf(dcol, sizeof dcol, "%s/%s/%s", dv[0], dv[1], dv[2]);
      if (!isnan(t[1]) && !isnan(d[1]) && t[1] > 0) snprintf(sp, sizeof sp, "%.2fx", d[1] / t[1]);
      int nd = deviants(e, pct, dev, sizeof dev);
      printf("  %-26s %5d  %-24s %20s %20s %7s  %s\n", name, e->n, majority(e), tcol, dcol, sp,
             nd ? dev : "none");
    }
  }
}

static void print_csv(const merge_t *m, double pct) {
  printf(
      "comm,nranks,nnodes,coll,bin,bytes_min,ranks,config,tuned_min_us,tuned_median_us,tuned_max_us,"
      "default_min_us,default_median_us,default_max_us,deviating\n");
  for (int i = 0; i < m->n; i++) {
    const mkey_t *e = &m->keys[i];
    double t[3], d[3];
    char dev[512], v[6][16];
    spread(e, 0, t);
    spread(e, 1, d);
    for (int j = 0; j < 3; j++) us(t[j], v[j], sizeof v[j]), us(d[j], v[3 + j], sizeof v[3 + j]);
    deviants(e, pct, dev, sizeof dev);
    printf("0x%016llx,%d,%d,%s,%d,%zu,%d,%s,%s,%s,%s,%s,%s,%s,%s\n", (unsigned long long)e->comm,
           e->nranks, e->nnodes, ah_coll_name(e->coll), e->bin, ah_size_bin_floor(e->bin), e->n,
           majority(e), v[0], v[1], v[2], v[3], v[4], v[5], dev);
  }
}

static void json_num(double v) {
  if (isnan(v)) printf("null");
  else printf("%.3f", v);
}

static void print_json(const merge_t *m, double pct) {
  printf("{\"deviation_pct\": %g, \"keys\": [", pct);
  for (int i = 0; i < m->n; i++) {
    const mkey_t *e = &m->keys[i];
    double t[3], d[3];
    spread(e, 0, t);
    spread(e, 1, d);
    const char *maj = majority(e);
    printf(
        "%s\n  {\"comm\": \"0x%016llx\", \"nranks\": %d, \"nnodes\": %d, \"coll\": \"%s\", \"bin\": %d, "
        "\"ranks\": %d, \"config\": \"%s\", \"tuned_us\": [",
        i ? "," : "", (unsigned long long)e->comm, e->nranks, e->nnodes, ah_coll_name(e->coll),
        e->bin, e->n, maj);
    for (int j = 0; j < 3; j++) fputs(j ? ", " : "", stdout), json_num(t[j]);
    printf("], \"default_us\": [");
    for (int j = 0; j < 3; j++) fputs(j ? ", " : "", stdout), json_num(d[j]);
    printf("], \"deviating\": [");
    char dev[512];
    deviants(e, pct, dev, sizeof dev);
    int first = 1;
    for (char *p = strtok(dev, " "); p; p = strtok(NULL, " ")) {
      int rank = atoi(p);
      char *why = strchr(p, '(');
      size_t wl = why ? strlen(why + 1) : 0;
      if (wl) wl--; /* the closing parenthesis */
      printf("%s{\"rank\": %d, \"why\": \"%.*s\"}", first ? "" : ", ", rank, (int)wl,
             why ? why + 1 : "");
      first = 0;
    }
    printf("]}");
  }
  printf("\n]}\n");
}

static void merge_usage(FILE *f) {
  fprintf(f,
          "usage: autoha report --merge [--csv|--json] [--pct N] DIR|FILE...\n"
          "  One table per communicator across the job's reports (a DIR: its *.json files, and\n"
          "  its subfolders', e.g. autoha-reports/):\n"
          "  per key the ranks, the majority's configuration, min/median/max of the tuned and of\n"
          "  NCCL's default time, and the ranks whose configuration differs from the majority's\n"
          "  or whose tuned time is more than N%% (default 10) off the median. Then the\n"
          "  environment the job ran with (hosts, GPU, CUDA and NCCL versions, AUTOHA_* and\n"
          "  NCCL_* variables, with counts where reports differ) and the refused overrides.\n"
          "  --csv, --json   one row or object per communicator and key instead of tables\n"
          "  --pct N         the deviation from the median that names a rank (default 10)\n"
          "  -h, --help      this text\n");
}

/* Appends the reports a path names (a folder: its *.json files and those of its subfolders, as
 * AUTOHA_REPORT's default autoha-reports/<job>/ layout has them) to m. Returns the problems. */
static int read_path(merge_t *m, const char *path, int *nread_p) {
  DIR *d = opendir(path);
  int bad = 0;
  if (!d) {
    ah_report_t *r = NULL;
    char err[512];
    if (ah_report_read(path, &r, err, sizeof err) != 0) {
      fprintf(stderr, "autoha: %s: %s\n", path, err);
      return 1;
    }
    add_report(m, r);
    ah_report_free(r);
    (*nread_p)++;
    return 0;
  }
  struct dirent *de;
  while ((de = readdir(d))) {
    if (de->d_name[0] == '.') continue;
    size_t n = strlen(de->d_name);
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", path, de->d_name);
    struct stat st;
    if (stat(p, &st) == 0 && S_ISDIR(st.st_mode)) { /* autoha-reports/<job>/: the default layout */
      bad += read_path(m, p, nread_p);
      continue;
    }
    if (n < 5 || strcmp(de->d_name + n - 5, ".json") != 0) continue;
    bad += read_path(m, p, nread_p);
  }
  closedir(d);
  return bad;
}

int cmd_report_merge(int argc, char **argv) {
  static const struct option opts[] = {
      {"merge", no_argument, NULL, 'm'}, {"csv", no_argument, NULL, 'c'},
      {"json", no_argument, NULL, 'j'},  {"pct", required_argument, NULL, 'p'},
      {"help", no_argument, NULL, 'h'},  {NULL, 0, NULL, 0}};
  int fmt = 0, c;
  double pct = 10;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":hmcjp:", opts, NULL)) != -1) {
    switch (c) {
      case 'm': break;
      case 'c': fmt = 1; break;
      case 'j': fmt = 2; break;
      case 'p': {
        char *end;
        pct = strtod(optarg, &end);
        if (*end || !(pct >= 0)) {
          fprintf(stderr, "autoha report: --pct wants a percentage, not '%s'\n", optarg);
          return 2;
        }
        break;
      }
      case 'h': merge_usage(stdout); return 0;
      default: return cli_bad_option("report --merge", c, argv, opts);
    }
  }
  if (optind >= argc) {
    merge_usage(stderr);
    return 2;
  }
  if (!ah_jansson_ready()) return 1; /* it logged why, once, and no file is read */
  merge_t m = {0};
  int nread = 0, bad = 0;
  for (int i = optind; i < argc; i++) bad += read_path(&m, argv[i], &nread);
  if (nread == 0) {
    cli_no_report("report", argv + optind, argc - optind);
    return 1;
  }
  if (fmt == 1) print_csv(&m, pct);
  else if (fmt == 2) print_json(&m, pct);
  else {
    print_text(&m, pct);
    merge_env_print(&m.env);
  }
  merge_env_free(&m.env);
  for (int i = 0; i < m.n; i++) free(m.keys[i].rows);
  free(m.keys);
  return bad ? 1 : 0;
}
