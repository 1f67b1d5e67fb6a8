/* ah_jansson.c: jansson's functions as autoha calls them, each forwarding to the distribution's
 * libjansson.so.4, opened once with dlopen. A preloaded library is a guest: libautoha.so needs
 * nothing beyond the C library (tests/install/check_needed.sh), so that it never brings a jansson
 * into a process that may carry its own, and a distribution's libjansson.a is built without
 * -fPIC, unusable in a shared object. So jansson is opened only by a process that writes or reads
 * a report, RTLD_LOCAL (its names never join the process's), and the hidden definitions below
 * stand in for its names: callers include <jansson.h> and call json_object() as usual.
 *
 * Note that only the functions autoha calls are here, those behind jansson.h's macros and inlines
 * included (json_decref's json_delete, json_object_foreach's iterators, json_boolean's
 * json_true/json_false): a call to any other is an undefined reference at link time, and it is
 * added to the list. The `autoha` command, the tests and the fuzz targets link this same file. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* jansson's own headers (stdio.h, stdlib.h, stdarg.h) come first, so that only its declarations
 * are hidden: the definitions below are then never exported, whatever the target's flags. */
#pragma GCC visibility push(hidden)
#include <jansson.h>
#pragma GCC visibility pop

#include "ah_jansson.h"
#include "ah_log.h"

/* Every forwarded function: return type, name, parameters, the arguments passed on, and the
 * value returned without a library (jansson's own error value for it). json_delete (void) and
 * json_pack (variadic, forwarded through json_vpack_ex) are written out below. Kept out of
 * clang-format, which reads the parameter lists as multiplications ("json_t * object"). */
/* clang-format off */
#define AH_JANSSON_FUNCS(X)                                                                        \
  X(json_t *, json_object, (void), (), NULL)                                                       \
  X(json_t *, json_array, (void), (), NULL)                                                        \
  X(json_t *, json_string, (const char *value), (value), NULL)                                     \
  X(json_t *, json_integer, (json_int_t value), (value), NULL)                                     \
  X(json_t *, json_real, (double value), (value), NULL)                                            \
  X(json_t *, json_true, (void), (), NULL)                                                         \
  X(json_t *, json_false, (void), (), NULL)                                                        \
  X(json_t *, json_null, (void), (), NULL)                                                         \
  X(json_t *, json_object_get, (const json_t *object, const char *key), (object, key), NULL)       \
  X(int, json_object_set_new, (json_t *object, const char *key, json_t *value),                    \
    (object, key, value), -1)                                                                      \
  X(int, json_object_update, (json_t *object, json_t *other), (object, other), -1)                 \
  X(void *, json_object_iter, (json_t *object), (object), NULL)                                    \
  X(void *, json_object_key_to_iter, (const char *key), (key), NULL)                               \
  X(void *, json_object_iter_next, (json_t *object, void *iter), (object, iter), NULL)             \
  X(const char *, json_object_iter_key, (void *iter), (iter), NULL)                                \
  X(json_t *, json_object_iter_value, (void *iter), (iter), NULL)                                  \
  X(size_t, json_array_size, (const json_t *array), (array), 0)                                    \
  X(json_t *, json_array_get, (const json_t *array, size_t i), (array, i), NULL)                   \
  X(int, json_array_append_new, (json_t *array, json_t *value), (array, value), -1)                \
  X(const char *, json_string_value, (const json_t *string), (string), NULL)                       \
  X(json_int_t, json_integer_value, (const json_t *integer), (integer), 0)                         \
  X(double, json_real_value, (const json_t *real), (real), 0)                                      \
  X(double, json_number_value, (const json_t *json), (json), 0)                                    \
  X(json_t *, json_vpack_ex, (json_error_t *error, size_t flags, const char *fmt, va_list ap),     \
    (error, flags, fmt, ap), NULL)                                                                 \
  X(json_t *, json_loads, (const char *input, size_t flags, json_error_t *error),                  \
    (input, flags, error), NULL)                                                                   \
  X(json_t *, json_load_file, (const char *path, size_t flags, json_error_t *error),               \
    (path, flags, error), NULL)                                                                    \
  X(char *, json_dumps, (const json_t *json, size_t flags), (json, flags), NULL)                   \
  X(int, json_dumpf, (const json_t *json, FILE *output, size_t flags), (json, output, flags), -1)
/* clang-format on */

/* The library's functions: filled whole by one load, or not at all (a library lacking one of
 * them is refused, naming it). */
typedef struct {
#define AH_JANSSON_SLOT(ret, name, params, args, fail) ret(*name) params;
  AH_JANSSON_FUNCS(AH_JANSSON_SLOT)
#undef AH_JANSSON_SLOT
  void (*json_delete)(json_t *json);
} fns_t;

static fns_t fn;
static int fn_ok; /* written once inside load(); read after pthread_once, which orders it */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t path_lock = PTHREAD_MUTEX_INITIALIZER;
static char path_set[1024]; /* ah_jansson_set_path's file; "" = the search */
static int path_too_long, load_started;

void ah_jansson_set_path(const char *path) {
  size_t n = path ? strlen(path) : 0;
  pthread_mutex_lock(&path_lock);
  if (!load_started) {
    path_too_long = n >= sizeof path_set;
    if (path_too_long) n = 0;
    if (n) memcpy(path_set, path, n);
    path_set[n] = 0;
  }
  pthread_mutex_unlock(&path_lock);
}

/* One attempt's outcome, appended to the error line being built: ", FILE (why)". */
static void why_add(char *why, size_t len, const char *label, const char *file, const char *err) {
  size_t used = strlen(why);
  if (used + 1 >= len) return;
  /* dlerror() starts with the file name, which the line already gives. */
  size_t fl = strlen(file);
  if (err && strncmp(err, file, fl) == 0 && strncmp(err + fl, ": ", 2) == 0) err += fl + 2;
  int n = snprintf(why + used, len - used, "%s%s%s (%s)", used ? ", " : "", label, file,
                   err ? err : "?");
  if (n < 0) why[used] = 0;
}

/* Opens `file` and resolves every function. Returns the handle, or NULL with the reason added to
 * `why`; *where_p gets the file the loader actually opened. */
static void *open_one(const char *label, const char *file, char *why, size_t len,
                      const char **where_p) {
  void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    why_add(why, len, label, file, dlerror());
    return NULL;
  }
  fns_t f;
  void *p = NULL;
  const char *missing = NULL;
  _Static_assert(sizeof p == sizeof f.json_delete, "a function pointer is not a data pointer");
#define AH_JANSSON_RESOLVE(ret, name, params, args, fail)                                          \
  if (!missing && !(p = dlsym(h, #name))) missing = #name;                                         \
  else if (!missing) memcpy(&f.name, &p, sizeof p);
  AH_JANSSON_FUNCS(AH_JANSSON_RESOLVE)
  AH_JANSSON_RESOLVE(void, json_delete, , , )
#undef AH_JANSSON_RESOLVE
  if (missing) {
    char text[96];
    (void)dlerror();
    snprintf(text, sizeof text, "it has no %s", missing);
    dlclose(h);
    why_add(why, len, label, file, text);
    return NULL;
  }
  Dl_info info; /* p: json_delete, inside the file the loader chose */
  *where_p = dladdr(p, &info) && info.dli_fname && info.dli_fname[0] ? info.dli_fname : file;
  fn = f;
  return h;
}

/* The copy beside the object holding this code (the wheel ships one beside libautoha.so), as
 * "DIR/libjansson.so.4"; 0 when that object's path names no folder (a program run from PATH). */
static int beside_self(char *out, size_t len) {
  Dl_info info;
  if (!dladdr(&load_once, &info) || !info.dli_fname) return 0;
  const char *slash = strrchr(info.dli_fname, '/');
  if (!slash) return 0;
  int n = snprintf(out, len, "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                   AH_JANSSON_SONAME);
  return n > 0 && (size_t)n < len;
}

static void load(void) {
  char path[sizeof path_set], why[4096] = "", beside[4096];
  pthread_mutex_lock(&path_lock);
  load_started = 1;
  memcpy(path, path_set, sizeof path);
  int too_long = path_too_long;
  pthread_mutex_unlock(&path_lock);
  const char *where = NULL;
  void *h = NULL;
  if (too_long) {
    /* A named file is the only one tried: a job that names one never runs on another. */
    why_add(why, sizeof why, "AUTOHA_JANSSON=", "...", "longer than 1023 bytes");
  } else if (path[0]) {
    h = open_one("AUTOHA_JANSSON=", path, why, sizeof why, &where);
  } else {
    if (beside_self(beside, sizeof beside)) h = open_one("", beside, why, sizeof why, &where);
    if (!h) h = open_one("", AH_JANSSON_SONAME, why, sizeof why, &where);
  }
  if (!h) {
    ah_log(
        AH_LOG_ERROR,
        "reports need %s (Debian/Ubuntu package libjansson4): tried %s; no report is written or read",
        AH_JANSSON_SONAME, why);
    return;
  }
  const char *(*version)(void) = NULL; /* jansson 2.13+; only for the line below */
  void *v = dlsym(h, "jansson_version_str");
  if (v) memcpy(&version, &v, sizeof v);
  else (void)dlerror();
  ah_log(AH_LOG_INFO, "jansson %s loaded from %s", version ? version() : "(before 2.13)", where);
  fn_ok = 1; /* the handle stays open: the objects made by the library outlive any one report */
}

int ah_jansson_ready(void) {
  pthread_once(&load_once, load);
  return fn_ok;
}

/* ---- the forwarders -------------------------------------------------------------------------- */

#define AH_JANSSON_FORWARD(ret, name, params, args, fail)                                          \
  ret name params { return ah_jansson_ready() ? fn.name args : fail; }
AH_JANSSON_FUNCS(AH_JANSSON_FORWARD)
#undef AH_JANSSON_FORWARD

void json_delete(json_t *json) {
  if (ah_jansson_ready()) fn.json_delete(json);
}

json_t *json_pack(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  json_t *j = json_vpack_ex(NULL, 0, fmt, ap); /* what jansson's own json_pack does */
  va_end(ap);
  return j;
}
