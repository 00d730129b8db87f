/*
 * fuzz_quantity: Kubernetes quantities and Go durations from arbitrary text.
 * Besides "no crash", each property below is a bug when it fails:
 *   - a quantity with at most 18 digits and a plain suffix has the value
 *     128-bit arithmetic gives (rounded away from zero, capped as Go);
 *   - writing the same number differently keeps its value: a sign in
 *     front negates it (saturating), "+", a leading "0" or one more
 *     trailing fraction zero change nothing;
 *   - any integer the parser answers formats and parses back to itself;
 *   - a duration formatted as Go does parses back to itself.
 */
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#include "fuzz.h"

#define MAX_TEXT 256

static void fail(const char *what, const char *s, int64_t got, int64_t want)
{
    fprintf(stderr, "quantity \"%s\": %s: got %lld, want %lld\n", s, what, (long long)got,
            (long long)want);
    abort();
}

/*
 * The value of "[+-]digits[.digits]suffix" with at most 18 digits and a
 * suffix of the table (no exponent), by 128-bit arithmetic: false when the
 * text is not of that shape.
 */
static bool oracle(const char *s, int64_t *out)
{
    static const struct {
        const char *s;
        int e2, e10;
    } sfx[] = {
        {"Ki", 10, 0}, {"Mi", 20, 0}, {"Gi", 30, 0}, {"Ti", 40, 0}, {"Pi", 50, 0}, {"Ei", 60, 0},
        {"n", 0, -9},  {"u", 0, -6},  {"m", 0, -3},  {"", 0, 0},    {"k", 0, 3},   {"M", 0, 6},
        {"G", 0, 9},   {"T", 0, 12},  {"P", 0, 15},  {"E", 0, 18},
    };
    const char *p = s;
    bool neg = *p == '-';
    if (*p == '-' || *p == '+')
        p++;
    unsigned __int128 m = 0;
    int digits = 0, frac = 0;
    bool dot = false;
    for (; (*p >= '0' && *p <= '9') || (*p == '.' && !dot); p++) {
        if (*p == '.') {
            dot = true;
            continue;
        }
        if (++digits > 18)
            return false;
        m = m * 10 + (unsigned)(*p - '0');
        frac += dot;
    }
    if (digits == 0)
        return false;
    size_t i = 0;
    while (i < sizeof(sfx) / sizeof(sfx[0]) && strcmp(p, sfx[i].s) != 0)
        i++;
    if (i == sizeof(sfx) / sizeof(sfx[0]))
        return false;
    /* value = m * 2^e2 * 10^e10 / 10^frac, each factor below 2^60 * 10^36. */
    unsigned __int128 num = m << sfx[i].e2, den = 1;
    int e = sfx[i].e10 - frac;
    for (; e > 0; e--)
        num *= 10;
    for (; e < 0; e++)
        den *= 10;
    unsigned __int128 v = num / den + (num % den != 0);
    bool binary = sfx[i].e2 > 0;
    unsigned __int128 max = neg && !binary ? (unsigned __int128)INT64_MAX + 1 : INT64_MAX;
    if (v > max)
        v = max;
    *out = neg ? (int64_t)(0 - (uint64_t)v) : (int64_t)v;
    return true;
}

/* `s` with `ins` inserted at `at`, or NULL when it would be too long. */
static char *insert(const char *s, size_t at, const char *ins, char *buf, size_t len)
{
    size_t n = strlen(s), k = strlen(ins);
    if (n + k + 1 > len)
        return NULL;
    snprintf(buf, len, "%.*s%s%s", (int)at, s, ins, s + at);
    return buf;
}

static void same_value(const char *what, const char *s, const char *t, int ra, int64_t a)
{
    int64_t b = 0;
    int rb = util_quantity_parse(t, &b);
    if (rb != ra || b != a) {
        fprintf(stderr, "quantity \"%s\" (%d) and \"%s\" (%d) differ: %s\n", s, ra, t, rb, what);
        fail(what, t, b, a);
    }
}

static void quantity(const char *s)
{
    int64_t a = 0;
    int ra = util_quantity_parse(s, &a);
    if (ra != 0 && a != 0)
        fail("a failed parse leaves 0", s, a, 0);

    int64_t want = 0;
    if (ra == 0 && oracle(s, &want) && a != want)
        fail("128-bit arithmetic", s, a, want);

    char buf[MAX_TEXT + 8];
    if (s[0] >= '0' && s[0] <= '9') {
        char *t = insert(s, 0, "+", buf, sizeof(buf));
        if (t != NULL)
            same_value("a leading +", s, t, ra, a);
        t = insert(s, 0, "0", buf, sizeof(buf));
        if (t != NULL)
            same_value("a leading 0", s, t, ra, a);
        t = insert(s, 0, "-", buf, sizeof(buf));
        int64_t b = 0;
        int rb = t != NULL ? util_quantity_parse(t, &b) : ra;
        if (t != NULL && rb != ra)
            fail("a leading - changes whether it parses", t, rb, ra);
        /* -x, except that a decimal beyond int64 saturates on each side. */
        if (t != NULL && rb == 0 && b != -a && !(a == INT64_MAX && b == INT64_MIN))
            fail("a leading - negates", t, b, -a);
    }
    /* One more zero at the end of the fraction (or ".0" without one). */
    size_t end = strspn(s, "+-");
    end += strspn(s + end, "0123456789");
    bool has_dot = s[end] == '.';
    if (has_dot)
        end += 1 + strspn(s + end + 1, "0123456789");
    if (end > 0 && s[end - 1] >= '0' && s[end - 1] <= '9') {
        char *t = insert(s, end, has_dot ? "0" : ".0", buf, sizeof(buf));
        if (t != NULL)
            same_value("a trailing fraction zero", s, t, ra, a);
    }

    if (ra == 0) {
        char out[UTIL_QUANTITY_MAX];
        util_quantity_format(a, out, sizeof(out));
        int64_t back = 0;
        if (util_quantity_parse(out, &back) != 0 || back != a) {
            fprintf(stderr, "%lld formats as \"%s\"\n", (long long)a, out);
            fail("format then parse", out, back, a);
        }
    }
}

static void duration(const char *s)
{
    util_duration d = 0;
    if (util_duration_parse(s, &d) != 0)
        return;
    char buf[64];
    util_duration_format(d, buf, sizeof(buf));
    util_duration back = 0;
    if (util_duration_parse(buf, &back) != 0 || back != d) {
        fprintf(stderr, "duration %lld formats as %s, parses back as %lld\n", (long long)d, buf,
                (long long)back);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > MAX_TEXT)
        return 0;
    char *s = fuzz_cstr(data, size);
    if (s == NULL)
        return 0;
    quantity(s);
    duration(s);
    free(s);
    return 0;
}
