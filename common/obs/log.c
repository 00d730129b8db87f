/*
 * klog-compatible logging. Each line is formatted into one buffer and
 * written with a single write(2): lines from many workers never interleave
 * and nothing waits in a stdio buffer when the process dies.
 *
 * --vmodule "pattern=N,..." matches the source file's base name without its
 * extension against a glob, as klog does for Go files.
 */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "obs/obs.h"

#define VMODULE_MAX  32
#define LINE_MAX_LEN 16384

struct vmodule_rule {
    char pattern[128];
    int level;
};

/* The parsed logging configuration: written once at start-up. */
static struct {
    int verbosity;
    const char *vmodule_flag;
    const char *format_flag;
    bool split_stream;
    bool json_split_stream;
    bool json;
    size_t n_rules;
    struct vmodule_rule rules[VMODULE_MAX];
    const char *termination_log;
    util_duration flush_frequency;
    const char *text_info_buffer;
    const char *json_info_buffer;
} cfg = {
    .format_flag = "text",
    .termination_log = "/dev/termination-log",
    .flush_frequency = 5 * UTIL_SECOND,
    .text_info_buffer = "0",
    .json_info_buffer = "0",
};

int obs_log_add_flags(util_flags *f)
{
    /* Registering sets the defaults, whatever an earlier parse left. */
    cfg.verbosity = 0;
    cfg.vmodule_flag = NULL;
    cfg.format_flag = "text";
    cfg.split_stream = false;
    cfg.json_split_stream = false;
    cfg.flush_frequency = 5 * UTIL_SECOND;
    cfg.text_info_buffer = "0";
    cfg.json_info_buffer = "0";
    int r = 0;
    r |= util_flags_int(f, "v", &cfg.verbosity, "number for the log level verbosity");
    r |= util_flags_string(f, "vmodule", &cfg.vmodule_flag,
                           "comma-separated list of pattern=N settings for file-filtered logging");
    r |= util_flags_string(f, "logging-format", &cfg.format_flag,
                           "Sets the log format. Permitted formats: \"json\", \"text\".");
    r |= util_flags_bool(f, "log-text-split-stream", &cfg.split_stream,
                         "[Alpha] In text format, write error messages to stderr and info "
                         "messages to stdout.");
    r |= util_flags_bool(f, "log-json-split-stream", &cfg.json_split_stream,
                         "[Alpha] In JSON format, write error messages to stderr and info "
                         "messages to stdout.");
    /* Every line is written unbuffered, so these only need to parse. */
    r |= util_flags_duration(f, "log-flush-frequency", &cfg.flush_frequency,
                             "Maximum number of seconds between log flushes (lines are written "
                             "unbuffered here)");
    r |= util_flags_string(f, "log-text-info-buffer-size", &cfg.text_info_buffer,
                           "[Alpha] Info buffer size in text split-stream mode (lines are "
                           "written unbuffered here)");
    r |= util_flags_string(f, "log-json-info-buffer-size", &cfg.json_info_buffer,
                           "[Alpha] Info buffer size in JSON split-stream mode (lines are "
                           "written unbuffered here)");
    return r ? -EINVAL : 0;
}

int obs_log_set_vmodule(const char *spec)
{
    cfg.n_rules = 0;
    if (!spec || !*spec)
        return 0;
    const char *p = spec;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p)
            return util_err_set(-EINVAL, "--vmodule: expected pattern=N, got \"%.*s\"", (int)len,
                                p);
        size_t plen = (size_t)(eq - p);
        if (plen >= sizeof(cfg.rules[0].pattern) || cfg.n_rules == VMODULE_MAX)
            return util_err_set(-EINVAL, "--vmodule: too many or too long patterns");
        char num[16];
        size_t nlen = len - plen - 1;
        if (nlen == 0 || nlen >= sizeof(num))
            return util_err_set(-EINVAL, "--vmodule: bad level in \"%.*s\"", (int)len, p);
        memcpy(num, eq + 1, nlen);
        num[nlen] = '\0';
        char *nend = NULL;
        long lvl = strtol(num, &nend, 10);
        if (*nend || lvl < 0 || lvl > 1000)
            return util_err_set(-EINVAL, "--vmodule: bad level in \"%.*s\"", (int)len, p);
        struct vmodule_rule *rule = &cfg.rules[cfg.n_rules++];
        memcpy(rule->pattern, p, plen);
        rule->pattern[plen] = '\0';
        rule->level = (int)lvl;
        p = end ? end + 1 : p + len;
    }
    return 0;
}

int obs_log_apply(void)
{
    if (cfg.verbosity < 0)
        return util_err_set(-EINVAL, "-v must not be negative, got %d", cfg.verbosity);
    if (strcmp(cfg.format_flag, "text") == 0)
        cfg.json = false;
    else if (strcmp(cfg.format_flag, "json") == 0)
        cfg.json = true;
    else
        return util_err_set(-EINVAL,
                            "--logging-format: format \"%s\" not supported (use \"text\" or "
                            "\"json\")",
                            cfg.format_flag);
    return obs_log_set_vmodule(cfg.vmodule_flag);
}

void obs_log_set_verbosity(int v)
{
    cfg.verbosity = v;
}

void obs_log_set_json(bool json)
{
    cfg.json = json;
}

void obs_set_termination_log(const char *path)
{
    cfg.termination_log = path;
}

static const char *base_name(const char *file)
{
    const char *slash = strrchr(file, '/');
    return slash ? slash + 1 : file;
}

bool obs_log_enabled(int v, const char *file)
{
    if (v <= cfg.verbosity)
        return true;
    if (cfg.n_rules == 0 || !file)
        return false;
    char stem[128];
    const char *b = base_name(file);
    size_t n = strcspn(b, ".");
    if (n >= sizeof(stem))
        n = sizeof(stem) - 1;
    memcpy(stem, b, n);
    stem[n] = '\0';
    for (size_t i = 0; i < cfg.n_rules; i++)
        if (fnmatch(cfg.rules[i].pattern, stem, 0) == 0)
            return v <= cfg.rules[i].level;
    return false;
}

/* Appends s to buf as a JSON string body (without quotes). */
static size_t json_escape(char *buf, size_t pos, size_t cap, const char *s)
{
    for (; *s && pos + 7 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            buf[pos++] = '\\';
            buf[pos++] = (char)c;
        } else if (c == '\n') {
            buf[pos++] = '\\';
            buf[pos++] = 'n';
        } else if (c < 0x20) {
            pos += (size_t)snprintf(buf + pos, cap - pos, "\\u%04x", c);
        } else {
            buf[pos++] = (char)c;
        }
    }
    return pos;
}

static void write_all(int fd, const char *buf, size_t len)
{
    while (len > 0) {
        ssize_t n = write(fd, buf, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return;
        }
        buf += n;
        len -= (size_t)n;
    }
}

static void vlog(char severity, int v, const char *file, int line, const char *fmt, va_list ap)
{
    char msg[LINE_MAX_LEN];
    int mlen = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (mlen < 0)
        return;
    /* A multi-line message would break line-oriented log collectors. */
    for (char *p = msg; *p; p++)
        if (*p == '\n' && p[1] != '\0')
            *p = ' ';
    size_t ml = strlen(msg);
    if (ml > 0 && msg[ml - 1] == '\n')
        msg[--ml] = '\0';

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    localtime_r(&ts.tv_sec, &tm);
    long tid = (long)syscall(SYS_gettid);

    char out[LINE_MAX_LEN + 512];
    size_t pos;
    if (cfg.json) {
        char when[64];
        strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
        char tz[8];
        strftime(tz, sizeof(tz), "%z", &tm);
        pos = (size_t)snprintf(out, sizeof(out), "{\"ts\":\"%s.%06ld%s\",\"caller\":\"%s:%d\",%s",
                               when, ts.tv_nsec / 1000, tz, base_name(file), line,
                               severity == 'E' ? "\"err\":\"" : "\"msg\":\"");
        pos = json_escape(out, pos, sizeof(out) - 16, msg);
        pos += (size_t)snprintf(out + pos, sizeof(out) - pos, "\",\"v\":%d}\n",
                                severity == 'I' ? v : 0);
    } else {
        pos = (size_t)snprintf(out, sizeof(out), "%c%02d%02d %02d:%02d:%02d.%06ld %7ld %s:%d] %s\n",
                               severity, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                               tm.tm_sec, ts.tv_nsec / 1000, tid, base_name(file), line, msg);
    }
    if (pos >= sizeof(out)) {
        pos = sizeof(out) - 1;
        out[pos - 1] = '\n';
    }
    bool split = cfg.json ? cfg.json_split_stream : cfg.split_stream;
    write_all(split && severity == 'I' ? STDOUT_FILENO : STDERR_FILENO, out, pos);
}

void obs_log_write(char severity, int v, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(severity, v, file, line, fmt, ap);
    va_end(ap);
}

void obs_fatal_exit(const char *fmt, ...)
{
    char msg[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    obs_log_write('E', 0, __FILE__, __LINE__, "%s", msg);
    if (cfg.termination_log) {
        int fd = open(cfg.termination_log, O_WRONLY | O_TRUNC | O_CLOEXEC);
        if (fd >= 0) {
            write_all(fd, msg, strlen(msg));
            close(fd);
        }
    }
    exit(1);
}
