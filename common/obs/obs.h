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

#endif
