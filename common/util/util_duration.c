/*
 * util_duration: Go's time.ParseDuration / Duration.String() for int64
 * nanoseconds, plus the monotonic clock and a signal-proof sleep.
 * Parsing uses integer arithmetic only, so fractions are exact
 * ("1.1h" is 3960000000000ns, never 3959999999999).
 */
#include "util.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* |MinInt64|: the largest magnitude a (negative) duration can have. */
#define MAG_LIMIT ((uint64_t)1 << 63)

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Go's unitMap; both micro signs (U+00B5, U+03BC) are accepted like Go. */
static uint64_t unit_of(const char *u, size_t len)
{
    static const struct {
        const char *name;
        uint64_t ns;
    } units[] = {
        {"ns", 1},       {"us", 1000},      {"\xc2\xb5s", 1000},       {"\xce\xbcs", 1000},
        {"ms", 1000000}, {"s", 1000000000}, {"m", 60ULL * 1000000000}, {"h", 3600ULL * 1000000000},
    };

    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].name) == len && memcmp(units[i].name, u, len) == 0)
            return units[i].ns;
    }
    return 0;
}

int util_duration_parse(const char *s, util_duration *out)
{
    if (s == NULL || out == NULL)
        return util_err_set(-EINVAL, "invalid duration: no input");

    const char *p = s;
    bool neg = false;
    uint64_t total = 0;

    if (*p == '-' || *p == '+') {
        neg = *p == '-';
        p++;
    }
    if (strcmp(p, "0") == 0) {
        *out = 0;
        return 0;
    }
    if (*p == '\0')
        return util_err_set(-EINVAL, "invalid duration \"%s\"", s);

    while (*p != '\0') {
        uint64_t v = 0;
        bool pre = false;

        if (!(*p == '.' || is_digit(*p)))
            return util_err_set(-EINVAL, "invalid duration \"%s\"", s);
        for (; is_digit(*p); p++) {
            if (v > MAG_LIMIT / 10)
                return util_err_set(-ERANGE, "duration out of range \"%s\"", s);
            v = v * 10 + (uint64_t)(*p - '0');
            if (v > MAG_LIMIT)
                return util_err_set(-ERANGE, "duration out of range \"%s\"", s);
            pre = true;
        }

        const char *frac = p;
        size_t nfrac = 0;
        if (*p == '.') {
            frac = ++p;
            while (is_digit(*p))
                p++;
            nfrac = (size_t)(p - frac);
        }
        if (!pre && nfrac == 0)
            return util_err_set(-EINVAL, "invalid duration \"%s\"", s);

        /* Like Go, the unit is everything up to the next digit or '.'. */
        const char *u = p;
        while (*p != '\0' && *p != '.' && !is_digit(*p))
            p++;
        size_t ulen = (size_t)(p - u);
        if (ulen == 0)
            return util_err_set(-EINVAL, "missing unit in duration \"%s\"", s);
        uint64_t unit = unit_of(u, ulen);
        if (unit == 0)
            return util_err_set(-EINVAL, "unknown unit \"%.*s\" in duration \"%s\"", (int)ulen, u,
                                s);

        if (v > MAG_LIMIT / unit)
            return util_err_set(-ERANGE, "duration out of range \"%s\"", s);
        v *= unit;

        /* floor(0.<frac> * unit), exactly: Horner's rule from the last
         * digit, since floor((a + floor(x)) / 10) == floor((a + x) / 10)
         * for integer a. Each step stays below 10 * unit, so no overflow
         * however many digits there are. */
        uint64_t r = 0;
        for (size_t k = nfrac; k-- > 0;)
            r = ((uint64_t)(frac[k] - '0') * unit + r) / 10;
        v += r;
        if (v > MAG_LIMIT)
            return util_err_set(-ERANGE, "duration out of range \"%s\"", s);

        total += v; /* both <= 2^63: cannot wrap */
        if (total > MAG_LIMIT)
            return util_err_set(-ERANGE, "duration out of range \"%s\"", s);
    }

    if (neg) {
        *out = total == MAG_LIMIT ? INT64_MIN : -(int64_t)total;
        return 0;
    }
    if (total > MAG_LIMIT - 1)
        return util_err_set(-ERANGE, "duration out of range \"%s\"", s);
    *out = (int64_t)total;
    return 0;
}

/* Writes v's decimal digits ending just before buf[w]; returns new start. */
static size_t put_uint(char *buf, size_t w, uint64_t v)
{
    do {
        buf[--w] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    return w;
}

/* Go's fmtFrac: writes ".ddd" for the low `prec` digits of *v without
 * trailing zeros (nothing at all when they are zero), leaves *v / 10^prec. */
static size_t put_frac(char *buf, size_t w, uint64_t *v, int prec)
{
    bool print = false;

    for (int i = 0; i < prec; i++) {
        unsigned digit = (unsigned)(*v % 10);
        print = print || digit != 0;
        if (print)
            buf[--w] = (char)('0' + digit);
        *v /= 10;
    }
    if (print)
        buf[--w] = '.';
    return w;
}

void util_duration_format(util_duration d, char *buf, size_t len)
{
    /* Longest is "-2562047h47m16.854775808s" (25 bytes); built backwards. */
    char tmp[32];
    size_t w = sizeof(tmp);
    bool neg = d < 0;
    uint64_t u = neg ? -(uint64_t)d : (uint64_t)d;

    if (buf == NULL || len == 0)
        return;

    tmp[--w] = 's';
    if (u == 0) {
        tmp[--w] = '0';
    } else if (u < (uint64_t)UTIL_SECOND) {
        /* Below a second Go switches to the largest unit that fits: 1.2ms. */
        int prec;

        if (u < (uint64_t)UTIL_US) {
            prec = 0;
            tmp[--w] = 'n';
        } else if (u < (uint64_t)UTIL_MS) {
            prec = 3;
            tmp[--w] = '\xb5'; /* U+00B5 MICRO SIGN, as Go prints it */
            tmp[--w] = '\xc2';
        } else {
            prec = 6;
            tmp[--w] = 'm';
        }
        w = put_frac(tmp, w, &u, prec);
        w = put_uint(tmp, w, u);
    } else {
        w = put_frac(tmp, w, &u, 9);
        w = put_uint(tmp, w, u % 60); /* seconds */
        u /= 60;
        if (u > 0) {
            tmp[--w] = 'm';
            w = put_uint(tmp, w, u % 60);
            u /= 60;
            /* Stop at hours: days vary in length. */
            if (u > 0) {
                tmp[--w] = 'h';
                w = put_uint(tmp, w, u);
            }
        }
    }
    if (neg)
        tmp[--w] = '-';

    size_t n = sizeof(tmp) - w;
    if (n >= len)
        n = len - 1;
    memcpy(buf, tmp + w, n);
    buf[n] = '\0';
}

util_duration util_now_mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (util_duration)ts.tv_sec * UTIL_SECOND + ts.tv_nsec;
}

void util_sleep(util_duration d)
{
    if (d <= 0)
        return;

    struct timespec req = {
        .tv_sec = (time_t)(d / UTIL_SECOND),
        .tv_nsec = (long)(d % UTIL_SECOND),
    };
    struct timespec rem;

    /* nanosleep reports what is left when a signal cuts it short. */
    while (nanosleep(&req, &rem) != 0 && errno == EINTR)
        req = rem;
}

void util_time_rfc3339(time_t t, char *buf, size_t len)
{
    struct tm tm;
    if (!gmtime_r(&t, &tm) || strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0) {
        /* A year past 9999 (or a buffer too small): the epoch, never garbage. */
        if (len > 0)
            snprintf(buf, len, "%s", "1970-01-01T00:00:00Z");
    }
}
