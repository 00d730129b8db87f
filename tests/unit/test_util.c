/*
 * Unit tests for common/util. Durations are checked against what Go's
 * time.ParseDuration / Duration.String give, flags against Go's `flag`
 * package, since deployments pass the upstream sidecars' flags unchanged.
 * Tests are table-driven: one row per rule, and a failing row names itself.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/util.h"
#include "table.h"

/* ---- helpers ------------------------------------------------------------ */

static void expect_prefix(const char *row, const char *what, const char *got, const char *want)
{
    if (strncmp(got, want, strlen(want)) != 0)
        fail_msg("[%s] %s:\n  got  \"%s\"\n  want prefix \"%s\"", row, what, got, want);
}

static void slurp(FILE *fp, char *buf, size_t len)
{
    rewind(fp);
    size_t n = fread(buf, 1, len - 1, fp);
    buf[n] = '\0';
}

/* Redirects fds 1 and 2 to temp files; no cmocka asserts until stopped. */
struct capture {
    FILE *out, *err;
    int saved_out, saved_err;
};

static void capture_start(struct capture *c)
{
    fflush(stdout);
    fflush(stderr);
    c->out = tmpfile();
    c->err = tmpfile();
    assert_non_null(c->out);
    assert_non_null(c->err);
    c->saved_out = dup(STDOUT_FILENO);
    c->saved_err = dup(STDERR_FILENO);
    assert_true(c->saved_out >= 0 && c->saved_err >= 0);
    dup2(fileno(c->out), STDOUT_FILENO);
    dup2(fileno(c->err), STDERR_FILENO);
}

static void capture_stop(struct capture *c, char *out, size_t outlen, char *err, size_t errlen)
{
    fflush(stdout);
    fflush(stderr);
    dup2(c->saved_out, STDOUT_FILENO);
    dup2(c->saved_err, STDERR_FILENO);
    close(c->saved_out);
    close(c->saved_err);
    slurp(c->out, out, outlen);
    slurp(c->err, err, errlen);
    fclose(c->out);
    fclose(c->err);
}

/* Builds argv = {"test-prog", args..., NULL}; returns argc. */
static int make_argv(char **argv, size_t cap, const char *const *args)
{
    int argc = 0;

    argv[argc++] = (char *)"test-prog";
    for (size_t i = 0; args[i] != NULL && (size_t)argc + 1 < cap; i++)
        argv[argc++] = (char *)args[i];
    argv[argc] = NULL;
    return argc;
}

/* ---- durations ---------------------------------------------------------- */

static void test_duration_parse_accepts_go_syntax(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        util_duration want;
    } rows[] = {
        {"0", 0},
        {"+0", 0},
        {"-0", 0},
        {"0s", 0},
        {"1ns", 1},
        {"1us", UTIL_US},
        {"1\xc2\xb5s", UTIL_US}, /* U+00B5 micro sign */
        {"1\xce\xbcs", UTIL_US}, /* U+03BC greek mu, also accepted by Go */
        {"500ms", 500 * UTIL_MS},
        {"15s", 15 * UTIL_SECOND},
        {"1.5s", 1500 * UTIL_MS},
        {".5s", 500 * UTIL_MS},
        {"1.s", UTIL_SECOND},
        {"1m30s", 90 * UTIL_SECOND},
        {"2h45m", 2 * UTIL_HOUR + 45 * UTIL_MINUTE},
        {"1h1m1s1ms1us1ns", UTIL_HOUR + UTIL_MINUTE + UTIL_SECOND + UTIL_MS + UTIL_US + 1},
        {"1s1s", 2 * UTIL_SECOND},
        {"-1s", -UTIL_SECOND},
        {"+5m", 5 * UTIL_MINUTE},
        {"-1.5h", -90 * UTIL_MINUTE},
        {"1.1h", 3960 * UTIL_SECOND},    /* exact, no float rounding */
        {"0.1s", 100 * UTIL_MS},         /* 0.1 has no exact double */
        {"1.999999999999s", 1999999999}, /* fraction truncates */
        {"1.5ns", 1},                    /* below 1ns truncates */
        {"0.000000001s", 1},             /* nine fraction digits */
        /* Exact on purpose: Go's float64 step rounds this one up to 2ns. */
        {"0.0000000019999999999999999999999s", 1},
        {"0015s", 15 * UTIL_SECOND},              /* leading zeros */
        {"9223372036854775807ns", INT64_MAX},     /* largest */
        {"2562047h47m16.854775807s", INT64_MAX},  /* largest, in hours */
        {"-9223372036854775808ns", INT64_MIN},    /* smallest */
        {"-2562047h47m16.854775808s", INT64_MIN}, /* smallest, in hours */
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        util_duration d = 12345;
        int rc = util_duration_parse(rows[i].in, &d);
        expect_int(rows[i].in, "rc", rc, 0);
        expect_int(rows[i].in, "value", d, rows[i].want);
    }
}

static void test_duration_parse_rejects_bad_syntax_and_overflow(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *err;
    } rows[] = {
        {"", -EINVAL, "invalid duration \"\""},
        {"-", -EINVAL, "invalid duration \"-\""},
        {"1", -EINVAL, "missing unit in duration \"1\""},
        {"s", -EINVAL, "invalid duration \"s\""},
        {"1x", -EINVAL, "unknown unit \"x\" in duration \"1x\""},
        {"1s1", -EINVAL, "missing unit in duration \"1s1\""},
        {"--1s", -EINVAL, "invalid duration \"--1s\""},
        {"+-1s", -EINVAL, "invalid duration \"+-1s\""},
        {".s", -EINVAL, "invalid duration \".s\""},
        {"1..5s", -EINVAL, "missing unit in duration \"1..5s\""},
        {" 1s", -EINVAL, "invalid duration \" 1s\""},
        {"1s ", -EINVAL, "unknown unit \"s \" in duration \"1s \""},
        {"1S", -EINVAL, "unknown unit \"S\" in duration \"1S\""},
        {"1d", -EINVAL, "unknown unit \"d\" in duration \"1d\""},
        {"1e3s", -EINVAL, "unknown unit \"e\" in duration \"1e3s\""},
        {"00", -EINVAL, "missing unit in duration \"00\""},
        {"9223372036854775808ns", -ERANGE, "duration out of range \"9223372036854775808ns\""},
        {"2562048h", -ERANGE, "duration out of range \"2562048h\""},     /* ~292 years */
        {"2562047h47m16.854775808s", -ERANGE, "duration out of range"},  /* max + 1ns */
        {"-2562047h47m16.854775809s", -ERANGE, "duration out of range"}, /* min - 1ns */
        {"99999999999999999999ns", -ERANGE, "duration out of range"},    /* digits overflow */
        {"2562047h2562047h", -ERANGE, "duration out of range"},          /* sum overflows */
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        util_duration d = 12345;
        util_err_clear();
        int rc = util_duration_parse(rows[i].in, &d);
        expect_int(rows[i].in, "rc", rc, rows[i].rc);
        expect_int(rows[i].in, "value untouched", d, 12345);
        expect_prefix(rows[i].in, "error", util_err_last(), rows[i].err);
    }
    assert_int_equal(util_duration_parse(NULL, &(util_duration){0}), -EINVAL);
}

static void test_duration_format_matches_go_string(void **state)
{
    (void)state;
    static const struct {
        util_duration d;
        const char *want;
    } rows[] = {
        {0, "0s"},
        {1, "1ns"},
        {999, "999ns"},
        {UTIL_US, "1\xc2\xb5s"},
        {1500, "1.5\xc2\xb5s"}, /* Go prints U+00B5 */
        {1100, "1.1\xc2\xb5s"},
        {500 * UTIL_MS, "500ms"},
        {999999999, "999.999999ms"},
        {15 * UTIL_SECOND, "15s"},
        {1500 * UTIL_MS, "1.5s"},
        {UTIL_SECOND + 1, "1.000000001s"},
        {UTIL_MINUTE, "1m0s"},
        {90 * UTIL_SECOND, "1m30s"},
        {UTIL_HOUR, "1h0m0s"},
        {2 * UTIL_HOUR + 45 * UTIL_MINUTE, "2h45m0s"},
        {-90 * UTIL_SECOND, "-1m30s"},
        {-1, "-1ns"},
        {INT64_MAX, "2562047h47m16.854775807s"},
        {INT64_MIN, "-2562047h47m16.854775808s"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char buf[64];
        util_duration back = 0;
        util_duration_format(rows[i].d, buf, sizeof(buf));
        expect_str(rows[i].want, "format", buf, rows[i].want);
        /* Whatever we print must read back to the same value. */
        expect_int(rows[i].want, "parse rc", util_duration_parse(buf, &back), 0);
        expect_int(rows[i].want, "round trip", back, rows[i].d);
    }
}

static void test_duration_format_truncates_to_buffer(void **state)
{
    (void)state;
    static const struct {
        size_t len;
        const char *want;
    } rows[] = {
        {1, ""},
        {2, "1"},
        {5, "1m30"},
        {6, "1m30s"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char buf[8];
        memset(buf, 'X', sizeof(buf));
        util_duration_format(90 * UTIL_SECOND, buf, rows[i].len);
        expect_str(rows[i].want, "truncated", buf, rows[i].want);
    }
    util_duration_format(UTIL_SECOND, NULL, 0); /* nowhere to write: no crash */
}

/* ---- clock -------------------------------------------------------------- */

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

static void test_sleep_waits_at_least_duration(void **state)
{
    (void)state;
    static const struct {
        util_duration d;
        util_duration min, max;
    } rows[] = {
        {-UTIL_SECOND, 0, 500 * UTIL_MS}, /* negative: returns at once */
        {0, 0, 500 * UTIL_MS},
        {1, 1, UTIL_SECOND},
        {20 * UTIL_MS, 20 * UTIL_MS, 2 * UTIL_SECOND},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        util_duration t0 = util_now_mono();
        util_sleep(rows[i].d);
        util_duration took = util_now_mono() - t0;
        assert_true(took >= rows[i].min);
        assert_true(took <= rows[i].max);
    }
}

static void test_sleep_restarts_after_signal(void **state)
{
    (void)state;
    struct sigaction sa, old;
    struct itimerval it;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART: nanosleep sees EINTR */
    sigemptyset(&sa.sa_mask);
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    memset(&it, 0, sizeof(it));
    it.it_value.tv_usec = 5000;
    alarms = 0;

    util_duration t0 = util_now_mono();
    assert_int_equal(setitimer(ITIMER_REAL, &it, NULL), 0);
    util_sleep(40 * UTIL_MS);
    util_duration took = util_now_mono() - t0;

    sigaction(SIGALRM, &old, NULL);
    assert_int_equal(alarms, 1);
    assert_true(took >= 40 * UTIL_MS);
}

static void test_now_mono_never_goes_back(void **state)
{
    (void)state;
    util_duration prev = util_now_mono();

    assert_true(prev > 0);
    for (int i = 0; i < 1000; i++) {
        util_duration now = util_now_mono();
        assert_true(now >= prev);
        prev = now;
    }
}

/* ---- flags: a fixture shaped like a real sidecar ------------------------ */

struct fixture {
    bool lead;    /* leader-election, default false */
    bool metrics; /* default true */
    bool v;       /* one-letter bool */
    int workers;
    int64_t big;
    double ratio;
    const char *addr;
    util_duration timeout;
    util_flags *f;
};

static void fixture_init(struct fixture *x)
{
    memset(x, 0, sizeof(*x));
    x->metrics = true;
    x->workers = 10;
    x->ratio = 0.5;
    x->addr = "/run/csi/socket";
    x->timeout = 15 * UTIL_SECOND;
    x->f = util_flags_new("test-prog", "v1.2.3");
    assert_non_null(x->f);
    assert_int_equal(util_flags_bool(x->f, "leader-election", &x->lead, "Enable leader election."),
                     0);
    assert_int_equal(util_flags_bool(x->f, "metrics", &x->metrics, "Serve metrics."), 0);
    assert_int_equal(util_flags_bool(x->f, "v", &x->v, "Verbose."), 0);
    assert_int_equal(util_flags_int(x->f, "workers", &x->workers, "Number of workers."), 0);
    assert_int_equal(util_flags_int64(x->f, "big", &x->big, "A 64-bit number."), 0);
    assert_int_equal(util_flags_double(x->f, "ratio", &x->ratio, "A ratio."), 0);
    assert_int_equal(
        util_flags_string(x->f, "csi-address", &x->addr, "Address of the CSI driver `socket`."), 0);
    assert_int_equal(util_flags_duration(x->f, "timeout", &x->timeout, "Timeout for calls."), 0);
    assert_int_equal(util_flags_deprecated(x->f, "old-value", true, "Deprecated, no effect."), 0);
    assert_int_equal(util_flags_deprecated(x->f, "old-bool", false, "Deprecated, no effect."), 0);
}

static void append(char *buf, size_t len, const char *fmt, ...) UTIL_ATTR_PRINTF(3, 4);

static void append(char *buf, size_t len, const char *fmt, ...)
{
    size_t used = strlen(buf);
    va_list ap;

    if (used > 0 && used + 1 < len)
        buf[used++] = ' ';
    buf[used] = '\0';
    va_start(ap, fmt);
    vsnprintf(buf + used, len - used, fmt, ap);
    va_end(ap);
}

/* The values that differ from the defaults, in a fixed order. */
static void fixture_changes(const struct fixture *x, char *buf, size_t len)
{
    char dur[64];

    buf[0] = '\0';
    if (x->lead)
        append(buf, len, "leader-election=true");
    if (!x->metrics)
        append(buf, len, "metrics=false");
    if (x->v)
        append(buf, len, "v=true");
    if (x->workers != 10)
        append(buf, len, "workers=%d", x->workers);
    if (x->big != 0)
        append(buf, len, "big=%" PRId64, x->big);
    if (x->ratio != 0.5)
        append(buf, len, "ratio=%g", x->ratio);
    if (strcmp(x->addr, "/run/csi/socket") != 0)
        append(buf, len, "csi-address=%s", x->addr);
    if (x->timeout != 15 * UTIL_SECOND) {
        util_duration_format(x->timeout, dur, sizeof(dur));
        append(buf, len, "timeout=%s", dur);
    }
}

/* The flags util_flags_is_set reports, in a fixed order. */
static void fixture_set(const struct fixture *x, char *buf, size_t len)
{
    static const char *const names[] = {
        "leader-election", "metrics",   "v",        "workers", "big",  "ratio", "csi-address",
        "timeout",         "old-value", "old-bool", "version", "help", "h",     "nope",
    };

    buf[0] = '\0';
    for (size_t i = 0; i < N_ROWS(names); i++) {
        if (util_flags_is_set(x->f, names[i]))
            append(buf, len, "%s", names[i]);
    }
}

static const char DEPRECATED_OLD_VALUE[] =
    "test-prog: flag --old-value is deprecated and has no effect\n";
static const char DEPRECATED_OLD_BOOL[] =
    "test-prog: flag --old-bool is deprecated and has no effect\n";

static void test_flags_parse_follows_go_rules(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        const char *args[8];
        int rc;
        int first_arg;
        const char *changes; /* values that differ from the defaults */
        const char *set;     /* what util_flags_is_set reports */
        const char *err;     /* util_err_last() when rc < 0 */
        const char *out;     /* stdout must start with this */
        const char *errout;  /* stderr, exactly */
    } rows[] = {
        {.why = "no arguments", .args = {NULL}, .first_arg = 1},
        {.why = "one or two dashes are the same",
         .args = {"-workers=3", "--big=4"},
         .first_arg = 3,
         .changes = "workers=3 big=4",
         .set = "workers big"},
        {.why = "--x v takes the next argument",
         .args = {"--workers", "7"},
         .first_arg = 3,
         .changes = "workers=7",
         .set = "workers"},
        {.why = "-x v takes the next argument",
         .args = {"-timeout", "1m30s"},
         .first_arg = 3,
         .changes = "timeout=1m30s",
         .set = "timeout"},
        {.why = "--x=v",
         .args = {"--csi-address=/tmp/csi.sock", "-ratio=0.25"},
         .first_arg = 3,
         .changes = "ratio=0.25 csi-address=/tmp/csi.sock",
         .set = "ratio csi-address"},
        {.why = "value keeps later '='",
         .args = {"--csi-address=a=b"},
         .first_arg = 2,
         .changes = "csi-address=a=b",
         .set = "csi-address"},
        {.why = "empty value after '='",
         .args = {"--csi-address="},
         .first_arg = 2,
         .changes = "csi-address=",
         .set = "csi-address"},
        {.why = "separate value may look like a flag",
         .args = {"--csi-address", "--workers=3"},
         .first_arg = 3,
         .changes = "csi-address=--workers=3",
         .set = "csi-address"},
        {.why = "bare bool means true",
         .args = {"--leader-election", "-v"},
         .first_arg = 3,
         .changes = "leader-election=true v=true",
         .set = "leader-election v"},
        {.why = "bool takes =false",
         .args = {"--metrics=false"},
         .first_arg = 2,
         .changes = "metrics=false",
         .set = "metrics"},
        {.why = "bool never consumes the next argument",
         .args = {"--metrics", "false"},
         .first_arg = 2,
         .set = "metrics"},
        {.why = "-- ends the flags and is consumed",
         .args = {"--workers=2", "--", "--workers=3"},
         .first_arg = 3,
         .changes = "workers=2",
         .set = "workers"},
        {.why = "first non-flag ends the flags", .args = {"pos", "--workers=3"}, .first_arg = 1},
        {.why = "flags after a positional are positional",
         .args = {"--workers=2", "pos", "-v"},
         .first_arg = 2,
         .changes = "workers=2",
         .set = "workers"},
        {.why = "lone - is positional", .args = {"-", "--workers=3"}, .first_arg = 1},
        {.why = "last occurrence wins",
         .args = {"--workers=1", "-workers", "2"},
         .first_arg = 4,
         .changes = "workers=2",
         .set = "workers"},
        {.why = "is_set even when given the default",
         .args = {"--workers=10"},
         .first_arg = 2,
         .set = "workers"},
        {.why = "int64 takes its full range",
         .args = {"--big=-9223372036854775808"},
         .first_arg = 2,
         .changes = "big=-9223372036854775808",
         .set = "big"},
        {.why = "---x is bad syntax",
         .args = {"---workers=3"},
         .rc = -EINVAL,
         .first_arg = 1,
         .err = "bad flag syntax: ---workers=3"},
        {.why = "-=x is bad syntax",
         .args = {"-=x"},
         .rc = -EINVAL,
         .first_arg = 1,
         .err = "bad flag syntax: -=x"},
        {.why = "--=x is bad syntax",
         .args = {"--=x"},
         .rc = -EINVAL,
         .first_arg = 1,
         .err = "bad flag syntax: --=x"},
        {.why = "unknown flag",
         .args = {"--nope"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "flag provided but not defined: -nope"},
        {.why = "unknown flag is named without its value",
         .args = {"-nope=1"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "flag provided but not defined: -nope"},
        {.why = "missing value",
         .args = {"--workers"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "flag needs an argument: -workers"},
        {.why = "bad duration",
         .args = {"--timeout=abc"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "invalid value \"abc\" for flag -timeout: parse error"},
        {.why = "duration overflow is a parse error, as in Go",
         .args = {"--timeout", "3000000h"},
         .rc = -EINVAL,
         .first_arg = 3,
         .err = "invalid value \"3000000h\" for flag -timeout: parse error"},
        {.why = "bad int",
         .args = {"--workers", "ten"},
         .rc = -EINVAL,
         .first_arg = 3,
         .err = "invalid value \"ten\" for flag -workers: parse error"},
        {.why = "int out of range",
         .args = {"--workers=2147483648"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "invalid value \"2147483648\" for flag -workers: value out of range"},
        {.why = "bad bool",
         .args = {"--leader-election=yes"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "invalid boolean value \"yes\" for -leader-election: parse error"},
        {.why = "value is quoted like Go's %q",
         .args = {"--workers=a\"b\\\t"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "invalid value \"a\\\"b\\\\\\t\" for flag -workers: parse error"},
        {.why = "flags before an error are kept",
         .args = {"--workers=3", "--nope"},
         .rc = -EINVAL,
         .first_arg = 3,
         .changes = "workers=3",
         .set = "workers",
         .err = "flag provided but not defined: -nope"},
        {.why = "--help prints usage and exits 0",
         .args = {"--help"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 2,
         .out = "Usage of test-prog:\n  -big int\n"},
        {.why = "-h prints usage and exits 0",
         .args = {"-h"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 2,
         .out = "Usage of test-prog:\n"},
        {.why = "-help prints usage and exits 0",
         .args = {"-help"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 2,
         .out = "Usage of test-prog:\n"},
        {.why = "help stops parsing at once",
         .args = {"--workers=3", "-h", "--nope"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 3,
         .changes = "workers=3",
         .set = "workers",
         .out = "Usage of test-prog:\n"},
        {.why = "an error before help wins",
         .args = {"--nope", "-h"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "flag provided but not defined: -nope"},
        {.why = "--version prints prog and version",
         .args = {"--version"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 2,
         .set = "version",
         .out = "test-prog v1.2.3\n"},
        {.why = "--version=false does nothing",
         .args = {"--version=false"},
         .first_arg = 2,
         .set = "version"},
        {.why = "--version waits for every flag to parse",
         .args = {"--version", "--nope"},
         .rc = -EINVAL,
         .first_arg = 3,
         .set = "version",
         .err = "flag provided but not defined: -nope"},
        {.why = "--version with a positional",
         .args = {"--version", "pos"},
         .rc = UTIL_FLAGS_EXIT_0,
         .first_arg = 2,
         .set = "version",
         .out = "test-prog v1.2.3\n"},
        {.why = "deprecated flag consumes its value and warns",
         .args = {"--old-value", "x", "pos"},
         .first_arg = 3,
         .set = "old-value",
         .errout = DEPRECATED_OLD_VALUE},
        {.why = "deprecated bool does not consume the next argument",
         .args = {"--old-bool", "x"},
         .first_arg = 2,
         .set = "old-bool",
         .errout = DEPRECATED_OLD_BOOL},
        {.why = "deprecated flag warns once",
         .args = {"--old-bool", "--old-bool=false", "-old-value=1", "--old-value", "2"},
         .first_arg = 6,
         .set = "old-value old-bool",
         .errout = "test-prog: flag --old-bool is deprecated and has no effect\n"
                   "test-prog: flag --old-value is deprecated and has no effect\n"},
        {.why = "deprecated bool still checks its value",
         .args = {"--old-bool=maybe"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "invalid boolean value \"maybe\" for -old-bool: parse error"},
        {.why = "deprecated flag with value needs one",
         .args = {"--old-value"},
         .rc = -EINVAL,
         .first_arg = 2,
         .err = "flag needs an argument: -old-value"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        struct fixture x;
        struct capture cap;
        char *argv[10];
        char out[4096], errout[1024], got[512];
        int first = -1;

        fixture_init(&x);
        int argc = make_argv(argv, N_ROWS(argv), rows[i].args);
        util_err_clear();
        capture_start(&cap);
        int rc = util_flags_parse(x.f, argc, argv, &first);
        capture_stop(&cap, out, sizeof(out), errout, sizeof(errout));

        const char *why = rows[i].why;
        expect_int(why, "rc", rc, rows[i].rc);
        expect_int(why, "first_arg", first, rows[i].first_arg);
        expect_str(why, "error", util_err_last(), rows[i].rc < 0 ? rows[i].err : "");
        fixture_changes(&x, got, sizeof(got));
        expect_str(why, "values", got, rows[i].changes ? rows[i].changes : "");
        fixture_set(&x, got, sizeof(got));
        expect_str(why, "is_set", got, rows[i].set ? rows[i].set : "");
        if (rows[i].out != NULL)
            expect_prefix(why, "stdout", out, rows[i].out);
        else
            expect_str(why, "stdout", out, "");
        expect_str(why, "stderr", errout, rows[i].errout ? rows[i].errout : "");
        util_flags_free(x.f);
    }
}

static void test_flags_bool_accepts_go_parsebool_values(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        int rc;
        bool want;
    } rows[] = {
        {"1", 0, true},        {"t", 0, true},          {"T", 0, true},
        {"true", 0, true},     {"TRUE", 0, true},       {"True", 0, true},
        {"0", 0, false},       {"f", 0, false},         {"F", 0, false},
        {"false", 0, false},   {"FALSE", 0, false},     {"False", 0, false},
        {"", -EINVAL, false},  {"yes", -EINVAL, false}, {"tRUE", -EINVAL, false},
        {"2", -EINVAL, false}, {"on", -EINVAL, false},  {" true", -EINVAL, false},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char arg[64];
        char *argv[] = {(char *)"test-prog", arg, NULL};
        bool b = !rows[i].want; /* start opposite so both outcomes show */
        util_flags *f = util_flags_new("test-prog", NULL);

        assert_int_equal(util_flags_bool(f, "b", &b, ""), 0);
        snprintf(arg, sizeof(arg), "--b=%s", rows[i].value);
        int rc = util_flags_parse(f, 2, argv, NULL);
        expect_int(arg, "rc", rc, rows[i].rc);
        if (rc == 0)
            expect_int(arg, "value", b, rows[i].want);
        else
            expect_prefix(arg, "error", util_err_last(), "invalid boolean value \"");
        util_flags_free(f);
    }
}

static void test_flags_int_parses_like_go_parseint_base0(void **state)
{
    (void)state;
    static const struct {
        const char *flag; /* "big" is int64, "n" is int */
        const char *value;
        int64_t want;
        const char *err; /* NULL, "parse error" or "value out of range" */
    } rows[] = {
        {"big", "42", 42, NULL},
        {"big", "-42", -42, NULL},
        {"big", "+7", 7, NULL},
        {"big", "0", 0, NULL},
        {"big", "-0", 0, NULL},
        {"big", "0x1f", 31, NULL},
        {"big", "0X1F", 31, NULL},
        {"big", "-0x10", -16, NULL},
        {"big", "017", 15, NULL},
        {"big", "0o17", 15, NULL},
        {"big", "0O17", 15, NULL},
        {"big", "0b101", 5, NULL},
        {"big", "1_000", 1000, NULL},
        {"big", "0x_1f", 31, NULL},
        {"big", "9223372036854775807", INT64_MAX, NULL},
        {"big", "-9223372036854775808", INT64_MIN, NULL},
        {"big", "0x7fffffffffffffff", INT64_MAX, NULL},
        {"big", "9223372036854775808", 0, "value out of range"},
        {"big", "-9223372036854775809", 0, "value out of range"},
        {"big", "99999999999999999999", 0, "value out of range"},
        {"big", "", 0, "parse error"},
        {"big", "-", 0, "parse error"},
        {"big", "1__0", 0, "parse error"},
        {"big", "_1", 0, "parse error"},
        {"big", "1_", 0, "parse error"},
        {"big", "08", 0, "parse error"},
        {"big", "0x", 0, "parse error"},
        {"big", "0b2", 0, "parse error"},
        {"big", "0xg", 0, "parse error"},
        {"big", "1.5", 0, "parse error"},
        {"big", "1e3", 0, "parse error"},
        {"big", " 1", 0, "parse error"},
        {"big", "+-1", 0, "parse error"},
        {"n", "2147483647", INT32_MAX, NULL},
        {"n", "-2147483648", INT32_MIN, NULL},
        {"n", "2147483648", 0, "value out of range"},
        {"n", "-2147483649", 0, "value out of range"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char arg[64], err[160], row[80];
        char *argv[] = {(char *)"test-prog", arg, NULL};
        int64_t big = 99;
        int n = 99;
        util_flags *f = util_flags_new("test-prog", NULL);

        assert_int_equal(util_flags_int64(f, "big", &big, ""), 0);
        assert_int_equal(util_flags_int(f, "n", &n, ""), 0);
        snprintf(arg, sizeof(arg), "-%s=%s", rows[i].flag, rows[i].value);
        snprintf(row, sizeof(row), "%s (row %zu)", arg, i);
        int rc = util_flags_parse(f, 2, argv, NULL);
        bool is_big = strcmp(rows[i].flag, "big") == 0;
        if (rows[i].err == NULL) {
            expect_int(row, "rc", rc, 0);
            expect_int(row, "value", is_big ? big : n, rows[i].want);
        } else {
            expect_int(row, "rc", rc, -EINVAL);
            expect_int(row, "value untouched", is_big ? big : n, 99);
            snprintf(err, sizeof(err), "invalid value \"%s\" for flag -%s: %s", rows[i].value,
                     rows[i].flag, rows[i].err);
            expect_str(row, "error", util_err_last(), err);
        }
        util_flags_free(f);
    }
}

static void test_flags_double_parses_whole_string(void **state)
{
    (void)state;
    static const struct {
        const char *value;
        double want;
        const char *err;
    } rows[] = {
        {"0.25", 0.25, NULL},
        {"-1e3", -1000, NULL},
        {"3", 3, NULL},
        {"1e-400", 0, NULL}, /* underflow is not an error in Go */
        {"inf", INFINITY, NULL},
        {"1e400", 0, "value out of range"},
        {"abc", 0, "parse error"},
        {"1.5x", 0, "parse error"},
        {"", 0, "parse error"},
        {" 1", 0, "parse error"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char arg[64], err[160];
        char *argv[] = {(char *)"test-prog", arg, NULL};
        double d = 99;
        util_flags *f = util_flags_new("test-prog", NULL);

        assert_int_equal(util_flags_double(f, "r", &d, ""), 0);
        snprintf(arg, sizeof(arg), "-r=%s", rows[i].value);
        int rc = util_flags_parse(f, 2, argv, NULL);
        if (rows[i].err == NULL) {
            expect_int(arg, "rc", rc, 0);
            if (d != rows[i].want)
                fail_msg("[%s] got %g, want %g", arg, d, rows[i].want);
        } else {
            expect_int(arg, "rc", rc, -EINVAL);
            snprintf(err, sizeof(err), "invalid value \"%s\" for flag -r: %s", rows[i].value,
                     rows[i].err);
            expect_str(arg, "error", util_err_last(), err);
        }
        util_flags_free(f);
    }
}

static void test_flags_register_rejects_bad_and_duplicate_names(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        char kind; /* b bool, i int, s string, D deprecated, n bool with NULL dst */
        const char *name;
        int rc;
    } rows[] = {
        {"duplicate name", 'i', "workers", -EEXIST},
        {"duplicate name of another type", 'b', "csi-address", -EEXIST},
        {"duplicate deprecated name", 'D', "old-bool", -EEXIST},
        {"empty name", 's', "", -EINVAL},
        {"name with a dash in front", 'b', "-x", -EINVAL},
        {"name with '='", 'i', "a=b", -EINVAL},
        {"NULL name", 'b', NULL, -EINVAL},
        {"NULL destination", 'n', "fresh", -EINVAL},
        {"new name", 'i', "fresh", 0},
        {"built-in -version can be replaced", 's', "version", 0},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        struct fixture x;
        bool b = false;
        int n = 0;
        const char *s = NULL;
        int rc = 0;

        fixture_init(&x);
        switch (rows[i].kind) {
        case 'b':
            rc = util_flags_bool(x.f, rows[i].name, &b, "");
            break;
        case 'i':
            rc = util_flags_int(x.f, rows[i].name, &n, "");
            break;
        case 's':
            rc = util_flags_string(x.f, rows[i].name, &s, "");
            break;
        case 'D':
            rc = util_flags_deprecated(x.f, rows[i].name, false, "");
            break;
        case 'n':
            rc = util_flags_bool(x.f, rows[i].name, NULL, "");
            break;
        default:
            fail();
        }
        expect_int(rows[i].why, "rc", rc, rows[i].rc);
        if (rc == -EEXIST) {
            char want[128];
            snprintf(want, sizeof(want), "flag redefined: %s", rows[i].name);
            expect_str(rows[i].why, "error", util_err_last(), want);
        }
        util_flags_free(x.f);
    }
    assert_int_equal(util_flags_int(NULL, "x", &(int){0}, ""), -EINVAL);
}

static void test_flags_program_may_define_help_and_version(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        const char *arg;
        const char *want; /* "h=<bool> help=<str> version=<str>" */
    } rows[] = {
        {"-h is the program's bool", "-h", "h=1 help= version="},
        {"-help is the program's string", "-help=me", "h=0 help=me version="},
        {"-version is the program's string", "--version=2", "h=0 help= version=2"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        bool h = false;
        const char *help = "";
        const char *version = "";
        char *argv[] = {(char *)"test-prog", (char *)rows[i].arg, NULL};
        char out[256], errout[256], got[128];
        struct capture cap;
        util_flags *f = util_flags_new("test-prog", "v1.2.3");

        assert_int_equal(util_flags_bool(f, "h", &h, ""), 0);
        assert_int_equal(util_flags_string(f, "help", &help, ""), 0);
        assert_int_equal(util_flags_string(f, "version", &version, ""), 0);
        capture_start(&cap);
        int rc = util_flags_parse(f, 2, argv, NULL);
        capture_stop(&cap, out, sizeof(out), errout, sizeof(errout));
        expect_int(rows[i].why, "rc", rc, UTIL_FLAGS_OK);
        expect_str(rows[i].why, "stdout", out, "");
        snprintf(got, sizeof(got), "h=%d help=%s version=%s", h, help, version);
        expect_str(rows[i].why, "values", got, rows[i].want);
        util_flags_free(f);
    }
}

/* ---- usage -------------------------------------------------------------- */

static char *usage_of(const util_flags *f)
{
    char *text = NULL;
    size_t len = 0;
    FILE *fp = open_memstream(&text, &len);

    assert_non_null(fp);
    util_flags_usage(f, fp);
    fclose(fp);
    return text;
}

/* A binary that changes a shared flag's default after registering it shows
 * the new one in --help; an unknown name is -ENOENT. */
static void test_flags_redefault_shows_the_new_default(void **state)
{
    (void)state;
    util_flags *f = util_flags_new("p", NULL);
    bool le = false;
    util_duration lease = 15 * UTIL_SECOND;
    const char *addr = "a";
    assert_int_equal(util_flags_bool(f, "leader-election", &le, "Elect."), 0);
    assert_int_equal(util_flags_duration(f, "lease", &lease, "Lease."), 0);
    assert_int_equal(util_flags_string(f, "addr", &addr, "Addr."), 0);
    le = true;
    lease = 150 * UTIL_SECOND;
    addr = "unix:///x";
    assert_int_equal(util_flags_redefault(f, "leader-election"), 0);
    assert_int_equal(util_flags_redefault(f, "lease"), 0);
    assert_int_equal(util_flags_redefault(f, "addr"), 0);
    assert_int_equal(util_flags_redefault(f, "nope"), -ENOENT);
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);
    util_flags_usage(f, out);
    fclose(out);
    assert_non_null(strstr(text, "Elect. (default true)"));
    assert_non_null(strstr(text, "Lease. (default 2m30s)"));
    assert_non_null(strstr(text, "Addr. (default \"unix:///x\")"));
    free(text);
    util_flags_free(f);
}

/* A scope names its flags "<prefix><name>" in the root; a global flag of the
 * same name and type applies unless the scope's own was given. */
static void test_flags_scope_prefixes_and_inherits(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        const char *args[4];
        int argc;
        util_duration want_global, want_a, want_b;
        int want_workers_a;
        const char *first_set_b; /* NULL: none of b's given */
    } rows[] = {
        {"defaults", {"p"}, 1, 15 * UTIL_SECOND, 30 * UTIL_SECOND, 60 * UTIL_SECOND, 10, NULL},
        {"global applies to both",
         {"p", "--timeout=5s"},
         2,
         5 * UTIL_SECOND,
         5 * UTIL_SECOND,
         5 * UTIL_SECOND,
         10,
         NULL},
        {"own overrides global",
         {"p", "--timeout=5s", "--b-timeout=7s"},
         3,
         5 * UTIL_SECOND,
         5 * UTIL_SECOND,
         7 * UTIL_SECOND,
         10,
         "b-timeout"},
        {"own alone",
         {"p", "-a-timeout", "2s"},
         3,
         15 * UTIL_SECOND,
         2 * UTIL_SECOND,
         60 * UTIL_SECOND,
         10,
         NULL},
        {"no global workers: a's own",
         {"p", "--a-workers=3"},
         2,
         15 * UTIL_SECOND,
         30 * UTIL_SECOND,
         60 * UTIL_SECOND,
         3,
         NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        util_flags *f = util_flags_new("p", NULL);
        util_duration global = 15 * UTIL_SECOND, ta = 30 * UTIL_SECOND, tb = 60 * UTIL_SECOND;
        int wa = 10;
        assert_int_equal(util_flags_duration(f, "timeout", &global, "g"), 0);
        util_flags *a = util_flags_scope(f, "a-");
        util_flags *b = util_flags_scope(f, "b-");
        assert_int_equal(util_flags_duration(a, "timeout", &ta, "a"), 0);
        assert_int_equal(util_flags_int(a, "workers", &wa, "a"), 0);
        assert_int_equal(util_flags_duration(b, "timeout", &tb, "b"), 0);
        assert_int_equal(util_flags_duration(a, "timeout", &ta, "a"), -EEXIST);
        assert_int_equal(util_flags_parse(f, rows[i].argc, (char **)rows[i].args, NULL), 0);
        util_flags_inherit(a);
        util_flags_inherit(b);
        if (global != rows[i].want_global || ta != rows[i].want_a || tb != rows[i].want_b ||
            wa != rows[i].want_workers_a)
            fail_msg("%s: global %lld a %lld b %lld workers %d", rows[i].row, (long long)global,
                     (long long)ta, (long long)tb, wa);
        const char *first = util_flags_scope_first_set(b);
        if ((first == NULL) != (rows[i].first_set_b == NULL) ||
            (first != NULL && strcmp(first, rows[i].first_set_b) != 0))
            fail_msg("%s: first set of b: %s", rows[i].row, first ? first : "(none)");
        assert_int_equal(util_flags_is_set(b, "timeout"), rows[i].first_set_b != NULL);
        assert_int_equal(util_flags_redefault(a, "timeout"), 0);
        assert_int_equal(util_flags_redefault(a, "nope"), -ENOENT);
        util_flags_free(f);
    }
    /* Usage through a scope is the root's, with the full names. */
    util_flags *f = util_flags_new("p", NULL);
    int w = 1;
    util_flags *a = util_flags_scope(f, "attacher-");
    assert_int_equal(util_flags_int(a, "worker-threads", &w, "Workers."), 0);
    char *out = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&out, &len);
    util_flags_usage(a, mem);
    fclose(mem);
    assert_non_null(strstr(out, "-attacher-worker-threads int"));
    free(out);
    util_flags_free(f);
}

static void test_flags_usage_prints_go_defaults(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        char kind; /* b bool, i int, I int64, d double, s string, D duration,
                      X deprecated with value, x deprecated bool */
        const char *name;
        const char *help;
        bool b;
        int64_t i;
        double d;
        const char *s;
        util_duration dur;
        const char *want; /* after "Usage of p:\n" */
    } rows[] = {
        {.why = "bool false: no default",
         .kind = 'b',
         .name = "leader-election",
         .help = "Enable it.",
         .want = "  -leader-election\n    \tEnable it.\n"},
        {.why = "bool true",
         .kind = 'b',
         .name = "metrics",
         .help = "Serve.",
         .b = true,
         .want = "  -metrics\n    \tServe. (default true)\n"},
        {.why = "one-letter bool stays on one line",
         .kind = 'b',
         .name = "v",
         .help = "Verbose.",
         .want = "  -v\tVerbose.\n"},
        {.why = "one-letter int does not",
         .kind = 'i',
         .name = "n",
         .help = "Count.",
         .i = 3,
         .want = "  -n int\n    \tCount. (default 3)\n"},
        {.why = "int zero: no default",
         .kind = 'i',
         .name = "workers",
         .help = "Workers.",
         .want = "  -workers int\n    \tWorkers.\n"},
        {.why = "int64 negative",
         .kind = 'I',
         .name = "big",
         .help = "Big.",
         .i = -5,
         .want = "  -big int\n    \tBig. (default -5)\n"},
        {.why = "float",
         .kind = 'd',
         .name = "ratio",
         .help = "Ratio.",
         .d = 0.5,
         .want = "  -ratio float\n    \tRatio. (default 0.5)\n"},
        {.why = "float zero: no default",
         .kind = 'd',
         .name = "ratio",
         .help = "Ratio.",
         .want = "  -ratio float\n    \tRatio.\n"},
        {.why = "float 1e6 in exponent form",
         .kind = 'd',
         .name = "qps",
         .help = "QPS.",
         .d = 1e6,
         .want = "  -qps float\n    \tQPS. (default 1e+06)\n"},
        {.why = "float 100000 in plain form",
         .kind = 'd',
         .name = "qps",
         .help = "QPS.",
         .d = 100000,
         .want = "  -qps float\n    \tQPS. (default 100000)\n"},
        {.why = "float 1e-05 in exponent form",
         .kind = 'd',
         .name = "qps",
         .help = "QPS.",
         .d = 1e-5,
         .want = "  -qps float\n    \tQPS. (default 1e-05)\n"},
        {.why = "float shortest round-trip digits",
         .kind = 'd',
         .name = "qps",
         .help = "QPS.",
         .d = 1.0 / 3,
         .want = "  -qps float\n    \tQPS. (default 0.3333333333333333)\n"},
        {.why = "string quoted",
         .kind = 's',
         .name = "csi-address",
         .help = "Address.",
         .s = "/run/csi/socket",
         .want = "  -csi-address string\n    \tAddress. (default \"/run/csi/socket\")\n"},
        {.why = "string escaped like %q",
         .kind = 's',
         .name = "sep",
         .help = "Sep.",
         .s = "a\"b\\c\n",
         .want = "  -sep string\n    \tSep. (default \"a\\\"b\\\\c\\n\")\n"},
        {.why = "string empty: no default",
         .kind = 's',
         .name = "sep",
         .help = "Sep.",
         .s = "",
         .want = "  -sep string\n    \tSep.\n"},
        {.why = "back-quoted word names the value",
         .kind = 's',
         .name = "kubeconfig",
         .help = "Path to a `file`.",
         .want = "  -kubeconfig file\n    \tPath to a file.\n"},
        {.why = "duration",
         .kind = 'D',
         .name = "timeout",
         .help = "Timeout.",
         .dur = 15 * UTIL_SECOND,
         .want = "  -timeout duration\n    \tTimeout. (default 15s)\n"},
        {.why = "duration in hours",
         .kind = 'D',
         .name = "resync",
         .help = "Resync.",
         .dur = UTIL_HOUR,
         .want = "  -resync duration\n    \tResync. (default 1h0m0s)\n"},
        {.why = "duration zero: no default",
         .kind = 'D',
         .name = "timeout",
         .help = "Timeout.",
         .want = "  -timeout duration\n    \tTimeout.\n"},
        {.why = "multi-line help is indented",
         .kind = 'i',
         .name = "workers",
         .help = "First.\nSecond.",
         .want = "  -workers int\n    \tFirst.\n    \tSecond.\n"},
        {.why = "deprecated with value",
         .kind = 'X',
         .name = "old",
         .help = "Deprecated.",
         .want = "  -old value\n    \tDeprecated.\n"},
        {.why = "deprecated bool",
         .kind = 'x',
         .name = "old-bool",
         .help = "Deprecated.",
         .want = "  -old-bool\n    \tDeprecated.\n"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        bool b = rows[i].b;
        int n = (int)rows[i].i;
        int64_t i64 = rows[i].i;
        double d = rows[i].d;
        const char *s = rows[i].s;
        util_duration dur = rows[i].dur;
        char want[512];
        util_flags *f = util_flags_new("p", NULL);

        switch (rows[i].kind) {
        case 'b':
            util_flags_bool(f, rows[i].name, &b, rows[i].help);
            break;
        case 'i':
            util_flags_int(f, rows[i].name, &n, rows[i].help);
            break;
        case 'I':
            util_flags_int64(f, rows[i].name, &i64, rows[i].help);
            break;
        case 'd':
            util_flags_double(f, rows[i].name, &d, rows[i].help);
            break;
        case 's':
            util_flags_string(f, rows[i].name, &s, rows[i].help);
            break;
        case 'D':
            util_flags_duration(f, rows[i].name, &dur, rows[i].help);
            break;
        case 'X':
        case 'x':
            util_flags_deprecated(f, rows[i].name, rows[i].kind == 'X', rows[i].help);
            break;
        default:
            fail();
        }
        char *got = usage_of(f);
        snprintf(want, sizeof(want), "Usage of p:\n%s", rows[i].want);
        expect_str(rows[i].why, "usage", got, want);
        free(got);
        util_flags_free(f);
    }
}

static void test_flags_usage_lists_all_sorted_with_version(void **state)
{
    (void)state;
    struct fixture x;
    struct capture cap;
    char *argv[] = {(char *)"test-prog", (char *)"--help", NULL};
    char out[4096], errout[256];
    static const char want[] = "Usage of test-prog:\n"
                               "  -big int\n"
                               "    \tA 64-bit number.\n"
                               "  -csi-address socket\n"
                               "    \tAddress of the CSI driver socket. (default "
                               "\"/run/csi/socket\")\n"
                               "  -leader-election\n"
                               "    \tEnable leader election.\n"
                               "  -metrics\n"
                               "    \tServe metrics. (default true)\n"
                               "  -old-bool\n"
                               "    \tDeprecated, no effect.\n"
                               "  -old-value value\n"
                               "    \tDeprecated, no effect.\n"
                               "  -ratio float\n"
                               "    \tA ratio. (default 0.5)\n"
                               "  -timeout duration\n"
                               "    \tTimeout for calls. (default 15s)\n"
                               "  -v\tVerbose.\n"
                               "  -version\n"
                               "    \tShow version.\n"
                               "  -workers int\n"
                               "    \tNumber of workers. (default 10)\n";

    fixture_init(&x);
    /* Defaults are the registered ones, not whatever parsing left behind. */
    x.workers = 99;
    char *got = usage_of(x.f);
    expect_str("util_flags_usage", "usage", got, want);
    free(got);

    capture_start(&cap);
    int rc = util_flags_parse(x.f, 2, argv, NULL);
    capture_stop(&cap, out, sizeof(out), errout, sizeof(errout));
    assert_int_equal(rc, UTIL_FLAGS_EXIT_0);
    expect_str("--help", "stdout", out, want);
    expect_str("--help", "stderr", errout, "");
    util_flags_free(x.f);
}

static void test_flags_usage_without_version_or_prog(void **state)
{
    (void)state;
    bool v = false;
    util_flags *f = util_flags_new(NULL, NULL);

    assert_int_equal(util_flags_bool(f, "v", &v, "Verbose."), 0);
    char *got = usage_of(f);
    expect_str("no prog, no version", "usage", got, "Usage:\n  -v\tVerbose.\n");
    free(got);
    util_flags_free(f);
    util_flags_free(NULL); /* no-op */
}

/* ---- parse_or_exit: it exits, so it runs in a fresh exec of this binary
 * (a clean process, so LeakSanitizer there sees only its own heap) ------- */

#define CHILD_FLAG "--run-parse-or-exit"

/* main() hands over here when started with CHILD_FLAG; argv[0] is the flag. */
static int parse_or_exit_child(int argc, char **argv)
{
    struct fixture x;

    fixture_init(&x);
    int first = util_flags_parse_or_exit(x.f, argc, argv);
    util_flags_free(x.f);
    return 40 + first;
}

static void test_flags_parse_or_exit_prints_one_line_and_exits(void **state)
{
    (void)state;
    static const struct {
        const char *why;
        const char *args[4];
        int status; /* 40 + returned index when it returns */
        const char *out;
        const char *errout;
    } rows[] = {
        {"returns the first positional", {"--workers=3", "pos"}, 42, "", ""},
        {"returns argc without positionals", {"-v"}, 42, "", ""},
        {"unknown flag exits 1",
         {"--nope"},
         1,
         "",
         "test-prog: flag provided but not defined: -nope\n"},
        {"bad value exits 1",
         {"--timeout=x"},
         1,
         "",
         "test-prog: invalid value \"x\" for flag -timeout: parse error\n"},
        {"--version exits 0", {"--version"}, 0, "test-prog v1.2.3\n", ""},
        {"--help exits 0", {"--help"}, 0, "Usage of test-prog:\n", ""},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        FILE *out_fp = tmpfile(), *err_fp = tmpfile();
        char out[4096], errout[4096];
        char *argv[8];
        int status = -1;

        assert_non_null(out_fp);
        assert_non_null(err_fp);
        make_argv(argv, N_ROWS(argv), rows[i].args);
        argv[0] = (char *)CHILD_FLAG;
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            char *child_argv[9] = {(char *)"test_util"};
            memcpy(child_argv + 1, argv, sizeof(argv));
            dup2(fileno(out_fp), STDOUT_FILENO);
            dup2(fileno(err_fp), STDERR_FILENO);
            execv("/proc/self/exe", child_argv);
            _exit(127);
        }
        assert_int_equal(waitpid(pid, &status, 0), pid);
        slurp(out_fp, out, sizeof(out));
        slurp(err_fp, errout, sizeof(errout));
        fclose(out_fp);
        fclose(err_fp);

        if (!WIFEXITED(status) || WEXITSTATUS(status) != rows[i].status)
            fail_msg("[%s] child status %d, stderr:\n%s", rows[i].why, status, errout);
        expect_prefix(rows[i].why, "stdout", out, rows[i].out);
        if (rows[i].out[0] == '\0')
            expect_str(rows[i].why, "stdout", out, "");
        expect_str(rows[i].why, "stderr", errout, rows[i].errout);
    }
}

/* ---- errors ------------------------------------------------------------- */

static void test_err_set_formats_and_returns_code(void **state)
{
    (void)state;
    static const struct {
        int code;
        const char *arg;
        const char *want;
    } rows[] = {
        {-EINVAL, "bad", "ctx: bad"},
        {-ENOENT, "", "ctx: "},
        {0, "ok", "ctx: ok"},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        expect_int(rows[i].want, "code", util_err_set(rows[i].code, "ctx: %s", rows[i].arg),
                   rows[i].code);
        expect_str(rows[i].want, "text", util_err_last(), rows[i].want);
    }
    util_err_clear();
    assert_string_equal(util_err_last(), "");
}

static void test_err_set_may_wrap_the_last_message(void **state)
{
    (void)state;
    util_err_set(-EIO, "inner %d", 1);
    util_err_set(-EIO, "outer: %s", util_err_last());
    assert_string_equal(util_err_last(), "outer: inner 1");
}

static void test_err_set_truncates_long_text(void **state)
{
    (void)state;
    static const struct {
        size_t in_len;
        size_t want_len;
    } rows[] = {
        {0, 0},
        {1023, 1023},
        {1024, 1023},
        {5000, 1023},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *big = util_calloc(rows[i].in_len + 1, 1);
        memset(big, 'a', rows[i].in_len);
        util_err_set(-E2BIG, "%s", big);
        assert_int_equal(strlen(util_err_last()), rows[i].want_len);
        free(big);
    }
}

static void *other_thread(void *arg)
{
    char *seen = arg;

    strcpy(seen, util_err_last()); /* starts empty here */
    util_err_set(-EPERM, "from thread");
    return NULL;
}

static void test_err_is_per_thread(void **state)
{
    (void)state;
    pthread_t t;
    char seen[64] = "unset";

    util_err_set(-EINVAL, "from main");
    assert_int_equal(pthread_create(&t, NULL, other_thread, seen), 0);
    assert_int_equal(pthread_join(t, NULL), 0);
    assert_string_equal(seen, "");
    assert_string_equal(util_err_last(), "from main");
}

/* ---- strings ------------------------------------------------------------ */

static void test_has_prefix_matches_leading_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *s, *prefix;
        bool want;
    } rows[] = {
        {"unix:///csi.sock", "unix://", true},
        {"abc", "abc", true},
        {"abc", "", true},
        {"", "", true},
        {"ab", "abc", false},
        {"xabc", "abc", false},
        {"ABC", "abc", false},
        {NULL, "a", false},
        {"a", NULL, false},
    };

    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char row[64];
        snprintf(row, sizeof(row), "row %zu", i);
        expect_int(row, "has_prefix", util_has_prefix(rows[i].s, rows[i].prefix), rows[i].want);
    }
}

static void test_hash_is_fnv1a_64(void **state)
{
    (void)state;
    /* Published FNV-1a 64-bit test vectors. */
    static const struct {
        const char *in;
        uint64_t want;
    } rows[] = {
        {"", 0xcbf29ce484222325ULL},
        {"a", 0xaf63dc4c8601ec8cULL},
        {"foobar", 0x85944171f73967e8ULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        assert_true(util_hash_str(UTIL_HASH_INIT, rows[i].in) == rows[i].want);
    assert_true(util_hash_str(UTIL_HASH_INIT, NULL) == UTIL_HASH_INIT);
    /* Fields apart from their separator: ("a","bc") differs from ("ab","c"). */
    uint64_t x = util_hash_str(util_hash_byte(util_hash_str(UTIL_HASH_INIT, "a"), 0xff), "bc");
    uint64_t y = util_hash_str(util_hash_byte(util_hash_str(UTIL_HASH_INIT, "ab"), 0xff), "c");
    assert_true(x != y);
}

static void test_str_helpers_allocate_owned_copies(void **state)
{
    (void)state;
    const char src[] = "csi.sock";
    char *dup = util_strdup(src);

    assert_ptr_not_equal(dup, src);
    assert_string_equal(dup, src);
    free(dup);
    assert_null(util_strdup(NULL));

    char *s = util_asprintf("%s:%d/%s", "host", 8080, "");
    assert_string_equal(s, "host:8080/");
    free(s);
    s = util_asprintf("%s", "");
    assert_string_equal(s, "");
    free(s);

    unsigned char *z = util_calloc(16, 4);
    for (size_t i = 0; i < 64; i++)
        assert_int_equal(z[i], 0);
    free(z);
    z = util_calloc(0, 8); /* never NULL, even for zero bytes */
    assert_non_null(z);
    free(z);
}

/* util_buf: NUL-terminated after any put (an empty one too), grows past
 * its first 256 bytes without losing what it held. */
/* Secret data as encoding/json writes []byte: padded standard base64. */
static void test_base64_decode_is_strict_standard_padded(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want; /* want NULL: refused */
    } cases[] = {
        {"", ""},
        {"YQ==", "a"},
        {"YWI=", "ab"},
        {"YWJj", "abc"},
        {"c2VjcmV0", "secret"},
        {"c2Vj\ncmV0", "secret"}, /* line breaks skipped, as Go does */
        {"c2Vj\r\ncmV0", "secret"},
        {"Pz8/", "???"},
        {"-_-_", NULL}, /* the URL alphabet is not this one */
        {"YQ", NULL},   /* padding is required */
        {"YQ=", NULL},
        {"Y===", NULL},
        {"YQ==YQ==", NULL}, /* padding only at the end */
        {"=QQQ", NULL},
        {"YW J", NULL},
        {"AA==", NULL}, /* a NUL byte cannot be a C string's */
        {"YQBi", NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *out = (char *)"untouched";
        int r = util_base64_decode(cases[i].in, &out);
        if (cases[i].want) {
            assert_int_equal(r, 0);
            assert_string_equal(out, cases[i].want);
            free(out);
        } else {
            assert_int_equal(r, -EINVAL);
        }
    }
}

static void test_buf_grows_and_stays_terminated(void **state)
{
    (void)state;
    util_buf b = {0};
    util_buf_put(&b, "", 0);
    assert_non_null(b.buf);
    assert_int_equal(b.len, 0);
    assert_string_equal(b.buf, "");
    for (int i = 0; i < 100; i++)
        util_buf_put(&b, "abcdefghij", 10);
    assert_int_equal(b.len, 1000);
    assert_int_equal(strlen(b.buf), 1000);
    assert_memory_equal(b.buf + 990, "abcdefghij", 10);
    assert_true(b.cap > b.len);
    free(b.buf);
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], CHILD_FLAG) == 0)
        return parse_or_exit_child(argc - 1, argv + 1);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_base64_decode_is_strict_standard_padded),
        cmocka_unit_test(test_flags_redefault_shows_the_new_default),
        cmocka_unit_test(test_flags_scope_prefixes_and_inherits),
        cmocka_unit_test(test_duration_parse_accepts_go_syntax),
        cmocka_unit_test(test_duration_parse_rejects_bad_syntax_and_overflow),
        cmocka_unit_test(test_duration_format_matches_go_string),
        cmocka_unit_test(test_duration_format_truncates_to_buffer),
        cmocka_unit_test(test_sleep_waits_at_least_duration),
        cmocka_unit_test(test_sleep_restarts_after_signal),
        cmocka_unit_test(test_now_mono_never_goes_back),
        cmocka_unit_test(test_flags_parse_follows_go_rules),
        cmocka_unit_test(test_flags_bool_accepts_go_parsebool_values),
        cmocka_unit_test(test_flags_int_parses_like_go_parseint_base0),
        cmocka_unit_test(test_flags_double_parses_whole_string),
        cmocka_unit_test(test_flags_register_rejects_bad_and_duplicate_names),
        cmocka_unit_test(test_flags_program_may_define_help_and_version),
        cmocka_unit_test(test_flags_usage_prints_go_defaults),
        cmocka_unit_test(test_flags_usage_lists_all_sorted_with_version),
        cmocka_unit_test(test_flags_usage_without_version_or_prog),
        cmocka_unit_test(test_flags_parse_or_exit_prints_one_line_and_exits),
        cmocka_unit_test(test_err_set_formats_and_returns_code),
        cmocka_unit_test(test_err_set_may_wrap_the_last_message),
        cmocka_unit_test(test_err_set_truncates_long_text),
        cmocka_unit_test(test_err_is_per_thread),
        cmocka_unit_test(test_has_prefix_matches_leading_bytes),
        cmocka_unit_test(test_str_helpers_allocate_owned_copies),
        cmocka_unit_test(test_hash_is_fnv1a_64),
        cmocka_unit_test(test_buf_grows_and_stays_terminated),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
