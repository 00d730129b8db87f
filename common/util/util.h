/*
 * util: small pieces every sidecar shares.
 *
 * - errors: functions return 0 or a negative errno-style code; the detail a
 *   user can act on is kept per thread and read with util_err_last().
 * - durations: Go's time.Duration syntax ("500ms", "15s", "1m30s"), held as
 *   int64 nanoseconds like Go, so flag defaults read the same as upstream's.
 * - flags: Go's `flag` package syntax (-x, --x, -x=v, --x v, --bool=false),
 *   because deployments pass the upstream sidecars' flags unchanged.
 *
 * No I/O beyond printing usage; no global state beyond the thread-local
 * error text.
 */
#ifndef CSISIDECAR_UTIL_H
#define CSISIDECAR_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define UTIL_ATTR_PRINTF(a, b) __attribute__((format(printf, a, b)))

/* ---- errors ------------------------------------------------------------ */

/* Records a message for this thread and returns `code` (a negative errno). */
int util_err_set(int code, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);
/* The last message set on this thread, or "" when none. Never NULL. */
const char *util_err_last(void);
void util_err_clear(void);

/* ---- durations --------------------------------------------------------- */

typedef int64_t util_duration; /* nanoseconds */

#define UTIL_NS     ((util_duration)1)
#define UTIL_US     ((util_duration)1000)
#define UTIL_MS     ((util_duration)1000000)
#define UTIL_SECOND ((util_duration)1000000000)
#define UTIL_MINUTE (60 * UTIL_SECOND)
#define UTIL_HOUR   (60 * UTIL_MINUTE)

/*
 * Parses Go duration syntax: an optional sign, then one or more
 * <decimal number><unit> with units ns, us, µs, ms, s, m, h; "0" alone is
 * allowed. Returns 0, or -EINVAL (bad syntax) / -ERANGE (overflow) with
 * util_err_last() saying why.
 */
int util_duration_parse(const char *s, util_duration *out);
/* Formats like Go's Duration.String(): "1m30s", "500ms", "0s", "1h0m0s". */
void util_duration_format(util_duration d, char *buf, size_t len);

/* Monotonic clock in nanoseconds. */
util_duration util_now_mono(void);
/* Sleeps for d (no-op for d <= 0); restarts after signals. */
void util_sleep(util_duration d);

/* Bytes of "2006-01-02T15:04:05Z" with its NUL. */
#define UTIL_TIME_RFC3339_LEN 21
/* `t` in RFC 3339 in UTC to the second, as metav1.Time writes it
 * ("2006-01-02T15:04:05Z"); len >= UTIL_TIME_RFC3339_LEN. */
void util_time_rfc3339(time_t t, char *buf, size_t len);

/* ---- quantities (quantity.c) ------------------------------------------ */

/*
 * A Kubernetes resource.Quantity ("10Gi", "1.5G", "500m", "1e3", "+.5Ki")
 * as Go's Quantity.Value(): exact on any number of digits, a fraction
 * rounded away from zero, a binary (Ki..Ei) magnitude capped at INT64_MAX
 * ("-8Ei" is -INT64_MAX), a decimal one saturating at INT64_MAX/INT64_MIN,
 * an e/E exponent narrowed to int32 as Go does ("1e4294967297" is 10).
 * -EINVAL with apimachinery's message on bad syntax, an unknown suffix or a
 * number Go cannot read.
 */
int util_quantity_parse(const char *s, int64_t *out);

#define UTIL_QUANTITY_MAX 32
/* Formats an integer as the API server prints a BinarySI quantity: "1Gi",
 * "1536Mi", "1500", "1k" (below 1024 the decimal form); parses back to v. */
void util_quantity_format(int64_t v, char *buf, size_t len);

/* ---- flags ------------------------------------------------------------- */

typedef struct util_flags util_flags;

typedef enum {
    UTIL_FLAGS_OK = 0,     /* parsed; the program goes on */
    UTIL_FLAGS_EXIT_0 = 1, /* --help or --version was handled: exit 0 */
} util_flags_result;

/* `prog` is the binary name for messages; `version` is printed by --version. */
util_flags *util_flags_new(const char *prog, const char *version);
void util_flags_free(util_flags *f);

/*
 * Registration: `dst` holds the default on entry and receives the parsed
 * value. Names are given without dashes ("csi-address"). Registering the
 * same name twice returns -EEXIST. Strings point into argv or at the
 * default; nothing is copied, so argv must outlive their use.
 */
int util_flags_bool(util_flags *f, const char *name, bool *dst, const char *help);
int util_flags_int(util_flags *f, const char *name, int *dst, const char *help);
int util_flags_int64(util_flags *f, const char *name, int64_t *dst, const char *help);
int util_flags_double(util_flags *f, const char *name, double *dst, const char *help);
int util_flags_string(util_flags *f, const char *name, const char **dst, const char *help);
int util_flags_duration(util_flags *f, const char *name, util_duration *dst, const char *help);
/* A flag that is accepted and ignored, logged as deprecated when set
 * (kept so that old manifests still start). `takes_value` false for booleans. */
int util_flags_deprecated(util_flags *f, const char *name, bool takes_value, const char *help);
/* Takes the flag's variable as its default from now on (what usage shows):
 * for a binary whose defaults differ from a shared registration's. -ENOENT
 * for a name not registered. */
int util_flags_redefault(util_flags *f, const char *name);

/*
 * Parses argv[1..argc-1] with Go `flag` rules:
 *   -x / --x (one or two dashes alike); -x=v; -x v (non-boolean only);
 *   booleans take -x, -x=true|false|1|0|t|f|TRUE|FALSE|True|False;
 *   "--" ends the flags; the first non-flag argument ends the flags.
 * -h/--help/-help print usage to stdout and give UTIL_FLAGS_EXIT_0;
 * --version prints "<prog> <version>" and gives UTIL_FLAGS_EXIT_0.
 * On error (unknown flag, missing or bad value) returns -EINVAL with a
 * one-line message in util_err_last() naming the flag.
 * `*first_arg` (may be NULL) receives the index of the first positional arg.
 */
int util_flags_parse(util_flags *f, int argc, char **argv, int *first_arg);
/* True when the flag appeared on the command line (even with its default). */
bool util_flags_is_set(const util_flags *f, const char *name);
/* Prints "Usage of <prog>:" and every flag with its default, sorted by name. */
void util_flags_usage(const util_flags *f, FILE *out);

/*
 * The usual start-up sequence for a binary: parse; on error print
 * "<prog>: <message>" to stderr and exit(1); on --help/--version exit(0).
 * Returns the index of the first positional argument.
 */
int util_flags_parse_or_exit(util_flags *f, int argc, char **argv);

/*
 * A scope of `f`: every flag registered or asked of it by name is
 * "<prefix><name>" in `f` (a module's flags as "--attacher-timeout" in a
 * process hosting several). Parse and print usage with `f`; a scope lives
 * as long as `f` and is not freed on its own.
 */
util_flags *util_flags_scope(util_flags *f, const char *prefix);
/* After parsing: each flag of `scope` not given, whose unprefixed name is a
 * flag of the same type given on the command line, takes that value (a
 * global flag applies to every scope unless a scope's own overrides it).
 * Returns how many were taken. */
int util_flags_inherit(util_flags *scope);
/* The full name of a flag of `scope` given on the command line, or NULL. */
const char *util_flags_scope_first_set(const util_flags *scope);

/* ---- strings ----------------------------------------------------------- */

/* strdup that aborts on out-of-memory (allocation failure is not an input
 * error we can report usefully; this keeps callers straight-line). */
char *util_strdup(const char *s);
/* Allocating printf; aborts on out-of-memory. */
char *util_asprintf(const char *fmt, ...) UTIL_ATTR_PRINTF(1, 2);
void *util_calloc(size_t n, size_t size);
bool util_has_prefix(const char *s, const char *prefix);
/* A growing text: start from {0}; after the first put, buf holds len bytes
 * and a NUL (the owner frees buf). Aborts on out-of-memory. */
typedef struct util_buf {
    char *buf;
    size_t len, cap;
} util_buf;
void util_buf_put(util_buf *b, const char *s, size_t n);
/* Decodes standard padded base64, as Go's encoding/json writes []byte (a
 * Secret's data values); line breaks are skipped as Go's decoder does. A
 * decoded NUL byte is refused (a C string cannot carry it). 0 with *out
 * malloc'ed, or -EINVAL. */
int util_base64_decode(const char *in, char **out);
/* The UTF-8 sequence at s (len bytes available): its length with *rune
 * set, or 0 when it is not valid UTF-8 (overlong, surrogate, beyond
 * U+10FFFF, cut short). */
size_t util_utf8_decode(const char *s, size_t len, unsigned *rune);
/* Names the calling thread (what `top -H` and /proc/PID/task/TID/comm show);
 * the kernel keeps 15 bytes. A thread's name says its role, so CPU and
 * memory can be told apart by role without a debugger. */
void util_thread_name(const char *fmt, ...) UTIL_ATTR_PRINTF(1, 2);
/* For a joinable thread about to return from its start function for good,
 * with nobody to join it: a short detached helper joins it, then trims the
 * allocator (glibc returns a thread's malloc cache only once it exited). */
void util_thread_leave_trimmed(void);

/* 64-bit FNV-1a, for hash tables (not for anything an attacker must not
 * collide): start from UTIL_HASH_INIT and feed a string (NULL as "") or
 * bytes; a separator byte between fields keeps ("a","bc") apart from
 * ("ab","c"). */
#define UTIL_HASH_INIT 14695981039346656037ULL
uint64_t util_hash_str(uint64_t h, const char *s);
uint64_t util_hash_byte(uint64_t h, unsigned char b);

#endif
