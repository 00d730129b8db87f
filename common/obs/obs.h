/*
 * obs: what an operator sees of a sidecar.
 *
 * Logging follows klog so that existing log tooling keeps working:
 * "I1122 14:41:54.123456   12345 file.c:42] message" on stderr, one write(2)
 * per line so lines of concurrent workers never interleave. Verbosity comes
 * from -v/--v and --vmodule; --logging-format=json gives one JSON object per
 * line. The log configuration is the only global state, set once from flags
 * before threads start.
 */
#ifndef CSISIDECAR_OBS_H
#define CSISIDECAR_OBS_H

#include <stdbool.h>

#include "util/util.h"

/* Registers -v, --vmodule, --logging-format and klog's other logging flags. */
int obs_log_add_flags(util_flags *f);
/* Checks the parsed logging flags; -EINVAL with util_err_last() on error. */
int obs_log_apply(void);
/* Direct setters, for tests and programs without flags. */
void obs_log_set_verbosity(int v);
int obs_log_set_vmodule(const char *spec);
void obs_log_set_json(bool json);

/* True when a message at verbosity `v` from source file `file` is printed. */
bool obs_log_enabled(int v, const char *file);
void obs_log_write(char severity, int v, const char *file, int line, const char *fmt, ...)
    UTIL_ATTR_PRINTF(5, 6);

#define obs_info(...)  obs_log_write('I', 0, __FILE__, __LINE__, __VA_ARGS__)
#define obs_warn(...)  obs_log_write('W', 0, __FILE__, __LINE__, __VA_ARGS__)
#define obs_error(...) obs_log_write('E', 0, __FILE__, __LINE__, __VA_ARGS__)
#define obs_v(level, ...)                                                                          \
    do {                                                                                           \
        if (obs_log_enabled((level), __FILE__))                                                    \
            obs_log_write('I', (level), __FILE__, __LINE__, __VA_ARGS__);                          \
    } while (0)

/* Logs at error severity, writes the message to the termination log (when
 * writable, as Kubernetes reads it into the container status) and exits 1. */
void obs_fatal_exit(const char *fmt, ...) UTIL_ATTR_PRINTF(1, 2) __attribute__((noreturn));
/* Overrides /dev/termination-log (tests). */
void obs_set_termination_log(const char *path);

/* ---- metrics ----------------------------------------------------------------
 *
 * A small Prometheus registry: counters, gauges and histograms with a fixed
 * list of label names each, rendered in the text exposition format (HELP and
 * TYPE per family, histogram buckets cumulative with +Inf, _sum and _count).
 * Thread-safe; series are created on first use of a label-value tuple.
 */

typedef struct obs_registry obs_registry;
typedef struct obs_metric obs_metric;

obs_registry *obs_registry_new(void);
void obs_registry_free(obs_registry *r);

/* `labels` is NULL-ended (NULL or {NULL} for none). Registering a name twice
 * returns the existing metric when its type and labels match, else NULL. */
obs_metric *obs_counter_new(obs_registry *r, const char *name, const char *help,
                            const char *const *labels);
obs_metric *obs_gauge_new(obs_registry *r, const char *name, const char *help,
                          const char *const *labels);
/* `buckets` are the upper bounds in increasing order, n_buckets of them. */
obs_metric *obs_histogram_new(obs_registry *r, const char *name, const char *help,
                              const char *const *labels, const double *buckets, size_t n_buckets);

/* `values` match the metric's label names in order (NULL when it has none). */
void obs_counter_add(obs_metric *m, const char *const *values, double v);
void obs_gauge_set(obs_metric *m, const char *const *values, double v);
void obs_gauge_add(obs_metric *m, const char *const *values, double v);
void obs_histogram_observe(obs_metric *m, const char *const *values, double v);
/* Removes one series (e.g. a gauge of an object that is gone). */
void obs_metric_remove(obs_metric *m, const char *const *values);
/* Current value of a counter or gauge series (0 when absent); tests. */
double obs_metric_value(obs_metric *m, const char *const *values);

/*
 * A collector runs before every render so gauges computed on demand
 * (queue depth, unfinished work) are fresh.
 */
void obs_registry_on_render(obs_registry *r, void (*fn)(void *ud), void *ud);
/* Removes a collector; returns once no render is running it. */
void obs_registry_off_render(obs_registry *r, void (*fn)(void *ud), void *ud);
/* Prometheus text; malloc'ed, *len set. */
char *obs_registry_render(obs_registry *r, size_t *len);

/* ---- diagnostics HTTP server (libmicrohttpd) ----------------------------------- */

typedef struct obs_http obs_http;

/*
 * A handler answers one GET: fills *code, *body (malloc'ed) and *ctype
 * (static string; NULL means text/plain).
 */
typedef void (*obs_http_fn)(void *ud, int *code, char **body, const char **ctype);

/*
 * Prepares a server on `address` ("host:port" or ":port"; port 0 picks a
 * free one) serving the registry's metrics at `metrics_path` (NULL: none).
 * -EINVAL with a message naming `flag_name` on a bad address.
 */
int obs_http_new(const char *flag_name, const char *address, obs_registry *r,
                 const char *metrics_path, obs_http **out);
/* Adds a path (exact match) before start. */
int obs_http_handle(obs_http *h, const char *path, obs_http_fn fn, void *ud);
int obs_http_start(obs_http *h);
int obs_http_port(const obs_http *h);
void obs_http_free(obs_http *h);

#endif
