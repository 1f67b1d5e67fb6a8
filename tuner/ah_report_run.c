/* ah_report_run.c: what reproduces a run, as the report records it — the AUTOHA_* and NCCL_*
 * variables (secret-looking names left out), the GPU, the CUDA driver and runtime versions, the
 * job's hosts, the loaded NCCL's version and the refused AUTOHA_OVERRIDE rules — and its JSON.
 *
 * The shim gathers the facts (it owns the CUDA entry points); this file only sorts, filters and
 * serialises them, so it stays testable without a GPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ah_report.h"
#include "ah_report_run.h"

int ah_report_var_secret(const char *name) {
  static const char *const words[] = {"SECRET", "TOKEN", "PASSWORD", "PASSWD", "CREDENTIAL", "KEY"};
  for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
    size_t wl = strlen(words[i]);
    for (const char *p = strstr(name, words[i]); p; p = strstr(p + 1, words[i])) {
      /* A word of the name: bounded by '_' or the ends (NCCL_IB_PKEY is not a key). */
      int before = p == name || p[-1] == '_';
      int after =
          p[wl] == 0 || p[wl] == '_' || (p[wl] == 'S' && (p[wl + 1] == 0 || p[wl + 1] == '_'));
      if (before && after) return 1;
    }
  }
  return 0;
}

static int var_cmp(const void *a, const void *b) {
  return strcmp(((const ah_report_var_t *)a)->name, ((const ah_report_var_t *)b)->name);
}

void ah_report_run_vars(ah_report_run_t *run_p, char *const *envp) {
  run_p->nvars = run_p->vars_dropped = 0;
  for (char *const *e = envp; e && *e; e++) {
    const char *eq = strchr(*e, '=');
    if (!eq || (strncmp(*e, "AUTOHA_", 7) != 0 && strncmp(*e, "NCCL_", 5) != 0)) continue;
    size_t nl = (size_t)(eq - *e);
    ah_report_var_t *v = &run_p->vars[run_p->nvars];
    if (nl >= sizeof v->name) {
      run_p->vars_dropped++;
      continue;
    }
    memcpy(v->name, *e, nl);
    v->name[nl] = 0;
    if (ah_report_var_secret(v->name)) continue;
    if (run_p->nvars == AH_REPORT_VARS_MAX) {
      run_p->vars_dropped++;
      continue;
    }
    ah_report_text_copy(v->value, sizeof v->value, eq + 1);
    run_p->nvars++;
  }
  qsort(run_p->vars, (size_t)run_p->nvars, sizeof run_p->vars[0], var_cmp);
}

char *ah_report_version_text(int code, int nccl, char *buf, size_t len) {
  if (code <= 0) snprintf(buf, len, "%s", "");
  else if (nccl && code >= 10000)
    snprintf(buf, len, "%d.%d.%d", code / 10000, code / 100 % 100, code % 100);
  else if (nccl) snprintf(buf, len, "%d.%d.%d", code / 1000, code / 100 % 10, code % 100);
  else snprintf(buf, len, "%d.%d", code / 1000, code % 1000 / 10);
  return buf;
}

static json_t *version_json(int code, int nccl) {
  char text[32];
  return code > 0 ? json_string(ah_report_version_text(code, nccl, text, sizeof text))
                  : json_null();
}

json_t *ah_report_run_to_json(const ah_report_run_t *run) {
  json_t *env = json_object(), *nodes = json_array(), *refused = json_array();
  char text[AH_REPORT_TEXT_MAX];
  for (int i = 0; i < run->nvars; i++)
    json_object_set_new(env, run->vars[i].name,
                        json_string(ah_report_text_copy(text, sizeof text, run->vars[i].value)));
  for (int i = 0; i < run->nnodes && i < AH_REPORT_NODES_MAX; i++)
    json_array_append_new(nodes,
                          json_string(ah_report_text_copy(text, sizeof text, run->nodes[i])));
  for (int i = 0; i < run->nrefused && i < AH_REPORT_REFUSED_MAX; i++)
    json_array_append_new(refused,
                          json_string(ah_report_text_copy(text, sizeof text, run->refused[i])));
  char gpu[AH_REPORT_TEXT_MAX], drv[64];
  return json_pack(
      "{s:o, s:i, s:s, s:o, s:i, s:o, s:i, s:o, s:o, s:o}", "env", env, "env_dropped",
      run->vars_dropped, "gpu", ah_report_text_copy(gpu, sizeof gpu, run->gpu), "cuda_driver",
      version_json(run->cuda_driver, 0), "cuda_driver_code", run->cuda_driver, "cuda_runtime",
      version_json(run->cuda_runtime, 0), "cuda_runtime_code", run->cuda_runtime, "gpu_driver",
      run->gpu_driver[0] ? json_string(ah_report_text_copy(drv, sizeof drv, run->gpu_driver))
                         : json_null(),
      "nodes", nodes, "refused_overrides", refused);
}

/* An array of strings into out[max][AH_REPORT_TEXT_MAX]; -1 when j is not one. */
static int strings_from(json_t *j, char out[][AH_REPORT_TEXT_MAX], int max, int *n_p,
                        const char *field, char *err, size_t errlen) {
  *n_p = 0;
  if (!j) return 0;
  if (!json_is_array(j)) {
    snprintf(err, errlen, "%s: expected an array of strings", field);
    return -1;
  }
  for (size_t i = 0; i < json_array_size(j); i++) {
    const char *s = json_string_value(json_array_get(j, i));
    if (!s) {
      snprintf(err, errlen, "%s[%zu]: expected a string", field, i);
      return -1;
    }
    if (*n_p < max) ah_report_text_copy(out[(*n_p)++], AH_REPORT_TEXT_MAX, s);
  }
  return 0;
}

static int int_from(json_t *o, const char *field, int *v_p, char *err, size_t errlen) {
  json_t *v = json_object_get(o, field);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1000000000) {
    snprintf(err, errlen, "%s: expected a non-negative integer", field);
    return -1;
  }
  *v_p = (int)json_integer_value(v);
  return 0;
}

static int text_from(json_t *o, const char *field, char *out, size_t len, char *err,
                     size_t errlen) {
  json_t *v = json_object_get(o, field);
  if (!v || json_is_null(v)) return 0;
  if (!json_is_string(v)) {
    snprintf(err, errlen, "%s: expected a string or null", field);
    return -1;
  }
  ah_report_text_copy(out, len, json_string_value(v));
  return 0;
}

int ah_report_run_from_json(json_t *j, ah_report_run_t *run_p, char *err, size_t errlen) {
  memset(run_p, 0, sizeof *run_p);
  if (!json_is_object(j)) {
    snprintf(err, errlen, "expected an object");
    return -1;
  }
  json_t *env = json_object_get(j, "env");
  if (env && !json_is_object(env)) {
    snprintf(err, errlen, "env: expected an object");
    return -1;
  }
  const char *name;
  json_t *v;
  json_object_foreach(env, name, v) {
    if (!json_is_string(v)) {
      snprintf(err, errlen, "env.%.64s: expected a string", name);
      return -1;
    }
    if (run_p->nvars == AH_REPORT_VARS_MAX || strlen(name) >= sizeof run_p->vars[0].name) {
      run_p->vars_dropped++;
      continue;
    }
    ah_report_var_t *rv = &run_p->vars[run_p->nvars++];
    snprintf(rv->name, sizeof rv->name, "%s", name);
    ah_report_text_copy(rv->value, sizeof rv->value, json_string_value(v));
  }
  qsort(run_p->vars, (size_t)run_p->nvars, sizeof run_p->vars[0], var_cmp);
  int dropped = 0;
  if (int_from(j, "env_dropped", &dropped, err, errlen) ||
      int_from(j, "cuda_driver_code", &run_p->cuda_driver, err, errlen) ||
      int_from(j, "cuda_runtime_code", &run_p->cuda_runtime, err, errlen) ||
      text_from(j, "gpu", run_p->gpu, sizeof run_p->gpu, err, errlen) ||
      text_from(j, "gpu_driver", run_p->gpu_driver, sizeof run_p->gpu_driver, err, errlen) ||
      strings_from(json_object_get(j, "nodes"), run_p->nodes, AH_REPORT_NODES_MAX, &run_p->nnodes,
                   "nodes", err, errlen) ||
      strings_from(json_object_get(j, "refused_overrides"), run_p->refused, AH_REPORT_REFUSED_MAX,
                   &run_p->nrefused, "refused_overrides", err, errlen))
    return -1;
  run_p->vars_dropped += dropped;
  run_p->present = 1;
  return 0;
}
