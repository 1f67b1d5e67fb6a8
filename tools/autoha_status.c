/* `autoha status [FILE] [--json]`: a running job as its coordinator hub sees it — every diagnosed
 * communicator, its ranks' latest progress and the current finding — read with the credentials
 * the hub's process wrote (AUTOHA_STATUS_FILE), through the handshake every client makes. */
#include <getopt.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ah_coord_status.h"
#include "autoha_cli.h"

#define MAX_SHOWN_RANKS 4096

typedef struct {
  int json, ncomms, nranks_seen;
  FILE *out;
} show_t;

static const char *verdict_name(int v) {
  switch (v) {
    case AH_COORD_VERDICT_COMPLETE: return "complete";
    case AH_COORD_VERDICT_ABANDONED: return "abandoned";
    case AH_COORD_VERDICT_MISMATCH: return "mismatch";
    default: return "pending";
  }
}

static const char *state_name(const ah_status_rank_t *r) {
  if (!r->have) return "no record";
  switch (r->state) {
    case AH_HEALTH_IDLE: return "idle";
    case AH_HEALTH_BUSY: return "busy";
    case AH_STATUS_DEAD: return "dead";
    case AH_STATUS_SILENT: return "silent"; /* stopped responding */
    case AH_STATUS_LEFT: return "left";
    default: return "unknown";
  }
}

/* Writes s as a JSON string body (printable ASCII from the hub: quotes and backslashes escaped). */
static void json_str(FILE *f, const char *s) {
  for (; *s; s++) {
    if (*s == '"' || *s == '\\') fputc('\\', f);
    fputc(*s >= 0x20 && *s < 0x7f ? *s : '?', f);
  }
}

static void on_comm(void *arg, const ah_status_comm_t *c) {
  show_t *s = arg;
  if (s->json) {
    fprintf(
        s->out,
        "%s\n  {\"comm\": \"0x%016llx\", \"nranks\": %u, \"verdict\": \"%s\", \"stalled_s\": %.1f, "
        "\"finding\": ",
        s->ncomms ? "]}," : "", (unsigned long long)c->comm, c->nranks, verdict_name(c->verdict),
        c->stalled_ms / 1000.0);
    if (c->finding) {
      fprintf(s->out, "{\"kind\": %u, \"text\": \"", c->finding);
      json_str(s->out, c->text);
      fprintf(s->out, "\"}");
    } else {
      fprintf(s->out, "null");
    }
    fprintf(s->out, ", \"ranks\": [");
  } else {
    fprintf(s->out, "%scommunicator 0x%016llx: %u ranks, verdict %s, last progress %.1f s ago\n",
            s->ncomms ? "\n" : "", (unsigned long long)c->comm, c->nranks, verdict_name(c->verdict),
            c->stalled_ms / 1000.0);
    if (c->finding) fprintf(s->out, "  finding: %s\n", c->text);
    fprintf(s->out, "  %6s  %-20s %8s %4s  %-9s %10s %8s  %8s %6s %6s\n", "rank", "host", "pid",
            "gpu", "state", "calls", "record", "late p50", "p90", "waited");
  }
  s->ncomms++;
  s->nranks_seen = 0;
}

/* The rank's lateness columns: median and p90 as % of its calls' time, the others' wait for it,
 * and the flag ("-" before its first judged call). */
static void lateness_cols(const ah_status_rank_t *r, char *out, size_t len) {
  if (!r->late_calls) snprintf(out, len, "  %8s %6s %6s", "-", "-", "-");
  else
    snprintf(out, len, "  %7.1f%% %5.1f%% %5.1f%%%s", r->late_p50 / 10.0, r->late_p90 / 10.0,
             r->wait_share / 10.0, r->straggler ? "  straggler" : "");
}

static void on_rank(void *arg, const ah_status_rank_t *r) {
  show_t *s = arg;
  char gpu[8] = "?", late[64];
  if (r->gpu != 0xffff) snprintf(gpu, sizeof gpu, "%u", r->gpu);
  lateness_cols(r, late, sizeof late);
  if (s->json) {
    fprintf(s->out, "%s\n    {\"rank\": %u, \"host\": \"", s->nranks_seen ? "," : "", r->rank);
    json_str(s->out, r->host);
    fprintf(
        s->out,
        "\", \"pid\": %u, \"gpu\": %s, \"state\": \"%s\", \"calls\": %llu, \"record_age_s\": %.1f, "
        "\"lateness\": ",
        r->pid, r->gpu == 0xffff ? "null" : gpu, state_name(r), (unsigned long long)r->entered,
        r->age_ms / 1000.0);
    if (!r->late_calls) fprintf(s->out, "null}");
    else
      fprintf(s->out,
              "{\"calls\": %u, \"p50_pct\": %.1f, \"p90_pct\": %.1f, \"waited_pct\": %.1f, "
              "\"straggler\": %s}}",
              r->late_calls, r->late_p50 / 10.0, r->late_p90 / 10.0, r->wait_share / 10.0,
              r->straggler ? "true" : "false");
  } else if (r->have) {
    fprintf(s->out, "  %6u  %-20s %8u %4s  %-9s %10llu %6.1f s%s\n", r->rank, r->host, r->pid, gpu,
            state_name(r), (unsigned long long)r->entered, r->age_ms / 1000.0, late);
  } else {
    fprintf(s->out, "  %6u  %-20s %8s %4s  %-9s %10s %8s%s\n", r->rank, "?", "?", "?",
            state_name(r), "-", "-", late);
  }
  s->nranks_seen++;
}

/* The newest credentials file under autoha-reports/ (AUTOHA_STATUS_FILE's default), or NULL. */
static char *newest_cred(void) {
  glob_t g;
  char *best = NULL;
  time_t best_t = 0;
  if (glob("autoha-reports/*/hub-*.cred", 0, NULL, &g) != 0) return NULL;
  for (size_t i = 0; i < g.gl_pathc; i++) {
    struct stat st;
    if (stat(g.gl_pathv[i], &st) == 0 && (!best || st.st_mtime >= best_t)) {
      free(best);
      best = strdup(g.gl_pathv[i]);
      best_t = st.st_mtime;
    }
  }
  globfree(&g);
  return best;
}

int cmd_status(int argc, char **argv) {
  static const struct option opts[] = {
      {"json", no_argument, NULL, 'j'}, {"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
  show_t s = {.out = stdout};
  const char *file = NULL;
  int c;
  optind = 1;
  opterr = 0;
  while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
      case 'j': s.json = 1; break;
      case 'h':
        printf(
            "usage: autoha status [--json] [FILE]\n"
            "  The running job's communicators, their ranks' progress and the current finding (a\n"
            "  hang, else a slow link), from its coordinator hub. FILE: the credentials the hub's\n"
            "  process wrote (AUTOHA_STATUS_FILE); default: the newest autoha-reports/*/hub-*.cred.\n"
            "  --json       one JSON object instead of tables\n"
            "  -h, --help   this text\n");
        return 0;
      default: return cli_bad_option("status", c, argv, opts);
    }
  }
  if (optind < argc) file = argv[optind++];
  if (optind < argc) {
    fprintf(stderr, "autoha status: unexpected argument '%s' (see autoha status --help)\n",
            argv[optind]);
    return 2;
  }
  char *found = NULL;
  if (!file && !(file = found = newest_cred())) {
    fprintf(stderr,
            "autoha status: no credentials file under autoha-reports/ (give the path "
            "AUTOHA_STATUS_FILE named)\n");
    return 1;
  }
  ah_coord_stamp_t st;
  char err[512];
  int rc = 1;
  if (ah_coord_cred_read(file, &st, err, sizeof err) != 0) {
    fprintf(stderr, "autoha status: %s\n", err);
  } else {
    if (s.json) fprintf(s.out, "{\"comms\": [");
    if (ah_coord_status_query(&st, 5000, on_comm, on_rank, &s, err, sizeof err) != 0) {
      if (s.json) fprintf(s.out, "\n");
      fprintf(stderr, "autoha status: %s (credentials %s)\n", err, file);
    } else {
      if (s.json) fprintf(s.out, "%s]}\n", s.ncomms ? "]}\n" : "");
      else if (!s.ncomms) printf("no communicator spans processes yet (credentials %s)\n", file);
      rc = 0;
    }
  }
  free(found);
  return rc;
}
