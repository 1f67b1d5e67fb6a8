/* `autoha status [FILE] [--json]`: a running job as its coordinator hub sees it — every diagnosed
 * communicator, its ranks' latest progress and the current finding — read with the credentials
 * the hub's process wrote (AUTOHA_STATUS_FILE), through the handshake every client makes. */
#include <arpa/inet.h>
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

/* A communicator's state in an operator's words: "joining" until the hub's verdict, "hung" while
 * a hang (or a rank's death or silence) is the finding, "stalled" after STALLED_MS without
 * progress and no such finding yet (AUTOHA_HANG_S decides when it becomes one), else "running" (a
 * straggler's or a slow link's finding is shown beside it). */
#define STALLED_MS 10000
static const char *comm_state(const ah_status_comm_t *c) {
  if (c->verdict == AH_COORD_VERDICT_NONE) return "joining";
  switch (c->finding) {
    case AH_FINDING_MISSING:
    case AH_FINDING_INCOMPLETE:
    case AH_FINDING_MISMATCH:
    case AH_FINDING_DIED:
    case AH_FINDING_STOPPED: return "hung";
    case AH_FINDING_NIC_DOWN: return "nic down"; /* its connections over the port fail */
    default: break;
  }
  return c->stalled_ms >= STALLED_MS ? "stalled" : "running";
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
        "%s\n  {\"comm\": \"0x%016llx\", \"nranks\": %u, \"state\": \"%s\", \"verdict\": \"%s\", "
        "\"stalled_s\": %.1f, \"finding\": ",
        s->ncomms ? "]}," : "", (unsigned long long)c->comm, c->nranks, comm_state(c),
        verdict_name(c->verdict), c->stalled_ms / 1000.0);
    if (c->finding) {
      fprintf(s->out, "{\"kind\": %u, \"text\": \"", c->finding);
      json_str(s->out, c->text);
      fprintf(s->out, "\"}");
    } else {
      fprintf(s->out, "null");
    }
    fprintf(s->out, ", \"ranks\": [");
  } else {
    /* The verdict is news only when it is not complete: then every rank runs NCCL's own choices. */
    char verdict[64] = "";
    if (c->verdict == AH_COORD_VERDICT_ABANDONED || c->verdict == AH_COORD_VERDICT_MISMATCH)
      snprintf(verdict, sizeof verdict, " (verdict %s: NCCL's own choices)",
               verdict_name(c->verdict));
    fprintf(s->out, "%scommunicator 0x%016llx: %u ranks, %s%s, last progress %.1f s ago\n",
            s->ncomms ? "\n" : "", (unsigned long long)c->comm, c->nranks, comm_state(c), verdict,
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

/* The hub's address as "host:port" ("[v6]:port"). Returns out. */
static char *stamp_addr(const ah_coord_stamp_t *st, char *out, size_t len) {
  char a[INET6_ADDRSTRLEN] = "?";
  int v6 = st->family == AF_INET6;
  inet_ntop(v6 ? AF_INET6 : AF_INET, st->addr, a, sizeof a);
  snprintf(out, len, v6 ? "[%s]:%u" : "%s:%u", a, st->port);
  return out;
}

/* A failure: its line on stderr (naming the credentials file when there is one) and, under
 * --json, a whole JSON object on stdout with the same text in "error". Returns 1, the exit status. */
static int status_fail(const show_t *s, const char *file, const char *why) {
  if (file) fprintf(stderr, "autoha status: %s (credentials %s)\n", why, file);
  else fprintf(stderr, "autoha status: %s\n", why);
  if (s->json) {
    printf("{\"comms\": [], \"error\": \"");
    json_str(stdout, why);
    printf("\", \"credentials\": ");
    if (file) {
      printf("\"");
      json_str(stdout, file);
      printf("\"}\n");
    } else {
      printf("null}\n");
    }
  }
  return 1;
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
  if (!file && !(file = found = newest_cred()))
    return status_fail(&s, NULL,
                       "no credentials file under autoha-reports/ (give the path "
                       "AUTOHA_STATUS_FILE named)");
  ah_coord_stamp_t st;
  char err[512], msg[1024];
  int rc = 1;
  char *json = NULL;
  size_t json_len = 0;
  if (ah_coord_cred_read(file, &st, err, sizeof err) != 0) {
    rc = status_fail(&s, file, err);
    goto free_found;
  }
  /* --json is printed whole or not at all: a query that fails half-way prints the error object. */
  if (s.json && !(s.out = open_memstream(&json, &json_len))) {
    rc = status_fail(&s, file, "out of memory");
    goto free_found;
  }
  if (s.json) fprintf(s.out, "{\"comms\": [");
  int q = ah_coord_status_query(&st, 5000, on_comm, on_rank, &s, err, sizeof err);
  if (s.json) {
    if (!q) fprintf(s.out, "%s]}\n", s.ncomms ? "]}\n" : "");
    fclose(s.out);
    s.out = stdout;
  }
  if (q == AH_COORD_STATUS_GONE) {
    char addr[INET6_ADDRSTRLEN + 16];
    snprintf(msg, sizeof msg,
             "the job's hub at %s is gone: the job ended, or its rank 0 process died (%s)",
             stamp_addr(&st, addr, sizeof addr), err);
    rc = status_fail(&s, file, msg);
  } else if (q != 0) {
    rc = status_fail(&s, file, err);
  } else {
    if (s.json) fwrite(json, 1, json_len, stdout);
    else if (!s.ncomms) printf("no communicator spans processes yet (credentials %s)\n", file);
    rc = 0;
  }
  free(json);
free_found:
  free(found);
  return rc;
}
