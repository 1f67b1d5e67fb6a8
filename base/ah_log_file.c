/* AUTOHA_LOG_FILE: expands the template with base/ah_template.c (ah_template_expand) and
 * points ah_log's descriptor at the file; a template with %r holds the lines until the rank is
 * known (ah_log_file.h). The file is opened for appending, so a restarted process adds to it. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "ah_file.h"
#include "ah_log.h"
#include "ah_log_file.h"
#include "ah_template.h"

static pthread_mutex_t file_lock = PTHREAD_MUTEX_INITIALIZER;
static char file_tmpl[1024]; /* non-empty while waiting for the rank */
static char file_path[2048];

/* Opens the file for `rank` (-1: "all"). Returns the descriptor, or -1 with err. */
static int open_for(const char *tmpl, int rank, char *err, size_t errlen) {
  char host[256] = "unknown", job[128] = "", perr[512];
  if (gethostname(host, sizeof host) != 0) strcpy(host, "unknown");
  host[sizeof host - 1] = 0;
  if (!ah_template_job_id(job, sizeof job)) snprintf(job, sizeof job, "nojob");
  char path[sizeof file_path];
  if (ah_template_expand(tmpl, host, (int)getpid(), rank, job, path, sizeof path, perr,
                         sizeof perr) != 0) {
    snprintf(err, errlen, "AUTOHA_LOG_FILE: %s", perr);
    return -1;
  }
  if (ah_file_make_parents(path, perr, sizeof perr) != 0) {
    snprintf(err, errlen, "AUTOHA_LOG_FILE: %s", perr);
    return -1;
  }
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) {
    snprintf(err, errlen, "AUTOHA_LOG_FILE: cannot open %s: %m", path);
    return -1;
  }
  snprintf(file_path, sizeof file_path, "%s", path);
  return fd;
}

int ah_log_file_start(const char *tmpl, char *err, size_t errlen) {
  if (!tmpl || !*tmpl) return 0;
  pthread_mutex_lock(&file_lock);
  int rc = 0;
  if (strstr(tmpl, "%r")) { /* checked now, opened with the rank */
    char path[sizeof file_path], perr[512];
    if (ah_template_expand(tmpl, "h", 1, 0, "j", path, sizeof path, perr, sizeof perr) != 0 ||
        strlen(tmpl) >= sizeof file_tmpl) {
      snprintf(err, errlen, "AUTOHA_LOG_FILE: %s", perr);
      rc = -1;
    } else {
      snprintf(file_tmpl, sizeof file_tmpl, "%s", tmpl);
      ah_log_set_fd(AH_LOG_FD_HOLD);
    }
  } else {
    int fd = open_for(tmpl, -1, err, errlen);
    if (fd < 0) rc = -1;
    else ah_log_set_fd(fd);
  }
  pthread_mutex_unlock(&file_lock);
  return rc;
}

void ah_log_file_rank(int rank) {
  if (rank < 0 || !__atomic_load_n(&file_tmpl[0], __ATOMIC_ACQUIRE)) return;
  char err[2600] = "";
  int fd = -1;
  pthread_mutex_lock(&file_lock);
  if (file_tmpl[0]) {
    fd = open_for(file_tmpl, rank, err, sizeof err);
    file_tmpl[0] = 0;
    ah_log_set_fd(fd >= 0 ? fd : 2); /* the held lines go to the file, or to stderr */
  }
  pthread_mutex_unlock(&file_lock);
  if (fd < 0 && err[0]) ah_log_at(AH_SUB_ENV, AH_LOG_ERROR, "%s; logging to stderr", err);
}

const char *ah_log_file_path(void) { return file_path; }

/* A process that never learnt a rank still leaves its held lines in a file ("all"). */
__attribute__((destructor)) static void log_file_at_exit(void) {
  if (file_tmpl[0] && ah_log_held() > 0) { /* a process that logged nothing leaves no file */
    char err[2600] = "";
    pthread_mutex_lock(&file_lock);
    int fd = file_tmpl[0] ? open_for(file_tmpl, -1, err, sizeof err) : -1;
    file_tmpl[0] = 0;
    ah_log_set_fd(fd >= 0 ? fd : 2);
    pthread_mutex_unlock(&file_lock);
  }
}
