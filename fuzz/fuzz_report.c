/* Fuzz target: the report reader that `autoha show`/`autoha compare` and the profile loader use
 * (ah_report_parse), then the writer on what was read: every report that loads must format again
 * (issue 18 #1: a loaded mode or job that could not be written back). */
#include <stdio.h>

#include "ah_log.h"
#include "ah_report.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  ah_log_set_level(AH_LOG_ERROR);
  char *s = fuzz_cstr(data, size);
  if (!s) return 0;
  ah_report_t *r = NULL;
  char err[512];
  if (ah_report_parse(s, &r, err, sizeof err) == 0) {
    char *text = ah_report_to_string(r);
    if (!text) {
      fprintf(stderr, "fuzz_report: a report that loaded cannot be written again\n");
      abort();
    }
    free(text);
    ah_report_free(r);
  }
  free(s);
  return 0;
}
