/*
 * The value conversions the protobuf encoding shares between its two
 * directions: which message a kind is, RFC 3339 times as metav1.Time and
 * MicroTime print and parse them, and base64 as encoding/json writes []byte.
 * Also the Accept negotiation, so rest.c asks one question.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube-lite/kl.h"

const kl_pb_msg *kl_pb_root_msg(const char *api_version, const char *kind)
{
    if (!kind)
        return NULL;
    for (size_t i = 0; i < kl_pb_n_roots; i++) {
        const kl_pb_root *r = &kl_pb_roots[i];
        if (strcmp(r->kind, kind) == 0 &&
            (!r->api_version || (api_version && strcmp(r->api_version, api_version) == 0)))
            return &kl_pb_msgs[r->msg];
    }
    return NULL;
}

bool kl_proto_known(const char *api_version, const char *kind)
{
    return kl_pb_root_msg(api_version, kind) != NULL;
}

/* ---- times ------------------------------------------------------------------------ */

/* The seconds of 0000-01-01T00:00:00Z and of 9999-12-31T23:59:59Z: the
 * years Time.MarshalJSON writes (it refuses others). */
#define YEAR0_SECS    (-62167219200LL)
#define YEAR9999_SECS 253402300799LL

static int digits(const char *s, int n)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static bool leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

int kl_pb_time_parse(const char *s, int64_t *secs, int32_t *nanos)
{
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    *secs = 0;
    *nanos = 0;
    size_t n = strlen(s);
    if (n < 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' || s[13] != ':' || s[16] != ':')
        return -EINVAL;
    int y = digits(s, 4), mo = digits(s + 5, 2), d = digits(s + 8, 2);
    int h = digits(s + 11, 2), mi = digits(s + 14, 2), se = digits(s + 17, 2);
    if (y < 0 || mo < 1 || mo > 12 || d < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 ||
        se > 59 || d > mdays[mo - 1] + (mo == 2 && leap(y)))
        return -EINVAL;
    const char *p = s + 19;
    int32_t ns = 0;
    if (*p == '.') {
        int nd = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, nd++)
            if (nd < 9)
                ns = ns * 10 + (*p - '0');
        if (nd == 0)
            return -EINVAL;
        for (; nd < 9; nd++)
            ns *= 10;
    }
    int off = 0;
    if (*p == 'Z') {
        p++;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
        int oh = digits(p + 1, 2), om = digits(p + 4, 2);
        if (oh < 0 || oh > 23 || om < 0 || om > 59)
            return -EINVAL;
        off = (oh * 60 + om) * 60 * (*p == '-' ? -1 : 1);
        p += 6;
    } else {
        return -EINVAL;
    }
    if (*p)
        return -EINVAL;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = se};
    *secs = (int64_t)timegm(&tm) - off;
    *nanos = ns;
    return 0;
}

int kl_pb_time_format(int64_t secs, int32_t nanos, bool micro, char *buf, size_t len)
{
    /* time.Unix normalizes nanoseconds outside [0, 1e9) into the seconds. */
    secs += nanos / 1000000000;
    nanos %= 1000000000;
    if (nanos < 0) {
        nanos += 1000000000;
        secs--;
    }
    if (secs < YEAR0_SECS || secs > YEAR9999_SECS)
        return util_err_set(-EINVAL, "time %lld is outside the years 0000..9999", (long long)secs);
    time_t t = (time_t)secs;
    struct tm tm;
    gmtime_r(&t, &tm);
    int n = snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
    if (n > 0 && (size_t)n < len)
        snprintf(buf + n, len - (size_t)n, micro ? ".%06dZ" : "Z", (int)(nanos / 1000));
    return 0;
}

/* ---- base64 ------------------------------------------------------------------------ */

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *kl_pb_base64(const uint8_t *p, size_t len, size_t *out_len)
{
    char *out = util_calloc(4 * ((len + 2) / 3) + 1, 1);
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)p[i + 1] << 8;
        if (i + 2 < len)
            v |= p[i + 2];
        out[o++] = b64[(v >> 18) & 63];
        out[o++] = b64[(v >> 12) & 63];
        out[o++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? b64[v & 63] : '=';
    }
    *out_len = o;
    return out;
}

static int b64_val(char c)
{
    const char *at = c ? strchr(b64, c) : NULL;
    return at ? (int)(at - b64) : -1;
}

int kl_pb_unbase64(const char *s, size_t len, uint8_t **out, size_t *out_len)
{
    /* encoding/json decodes []byte with base64.StdEncoding, which skips
     * line breaks and wants the padding. */
    uint8_t *buf = util_calloc(len / 4 * 3 + 3, 1);
    size_t o = 0;
    int quad[4];
    int q = 0, pad = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '\r' || c == '\n')
            continue;
        if (c == '=' && q >= 2) {
            quad[q++] = 0;
            pad++;
        } else {
            int v = pad ? -1 : b64_val(c);
            if (v < 0) {
                free(buf);
                return util_err_set(-EINVAL, "illegal base64 data at input byte %zu", i);
            }
            quad[q++] = v;
        }
        if (q == 4) {
            uint32_t v = (uint32_t)quad[0] << 18 | (uint32_t)quad[1] << 12 |
                         (uint32_t)quad[2] << 6 | (uint32_t)quad[3];
            buf[o++] = (uint8_t)(v >> 16);
            if (pad < 2)
                buf[o++] = (uint8_t)(v >> 8);
            if (pad < 1)
                buf[o++] = (uint8_t)v;
            q = 0;
            if (pad)
                pad = 3; /* nothing may follow the padding */
        }
    }
    if (q != 0) {
        free(buf);
        return util_err_set(-EINVAL, "illegal base64 data at input byte %zu", len);
    }
    *out = buf;
    *out_len = o;
    return 0;
}

/* ---- Accept ------------------------------------------------------------------------ */

typedef struct clause {
    const char *type; /* "application/json" ... within the header */
    size_t type_len;
    double q;
    bool convert; /* as=, g= or v=: a Table or metadata conversion */
} clause;

static bool type_is(const clause *c, const char *t)
{
    return c->type_len == strlen(t) && strncasecmp(c->type, t, c->type_len) == 0;
}

static bool wild_type(const clause *c)
{
    return c->type_len >= 1 && c->type[0] == '*';
}

static bool wild_subtype(const clause *c)
{
    return c->type_len >= 1 && c->type[c->type_len - 1] == '*';
}

static bool before(const clause *a, const clause *b)
{
    if (a->q != b->q)
        return a->q > b->q;
    return (!wild_type(a) && wild_type(b)) || (!wild_subtype(a) && wild_subtype(b));
}

bool kl_proto_accepts(const char *accept)
{
    if (!accept || !*accept)
        return false;
    clause cs[16];
    size_t n = 0;
    for (const char *p = accept; *p && n < 16;) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        clause c = {.q = 1.0};
        size_t i = 0;
        while (i < len && p[i] == ' ')
            i++;
        c.type = p + i;
        while (i < len && p[i] != ';' && p[i] != ' ')
            i++;
        c.type_len = (size_t)(p + i - c.type);
        while (i < len) {
            while (i < len && (p[i] == ';' || p[i] == ' '))
                i++;
            if (len - i > 2 && p[i + 1] == '=' && (p[i] == 'q' || p[i] == 'Q'))
                c.q = strtod(p + i + 2, NULL);
            if (len - i > 2 && p[i + 1] == '=' && (p[i] == 'g' || p[i] == 'v'))
                c.convert = true;
            if (len - i > 3 && strncmp(p + i, "as=", 3) == 0)
                c.convert = true;
            while (i < len && p[i] != ';')
                i++;
        }
        if (c.type_len && c.q > 0) {
            /* goautoneg's order (an insertion sort, so stable): higher q
             * first, then a concrete type or subtype before a wildcard. */
            size_t at = n;
            while (at > 0 && before(&c, &cs[at - 1]))
                at--;
            memmove(&cs[at + 1], &cs[at], (n - at) * sizeof(clause));
            cs[at] = c;
            n++;
        }
        p = end ? end + 1 : p + len;
    }
    /* The first clause the server can answer decides: JSON (also for
     * application/any and any/any, JSON being the first serializer) or protobuf;
     * protobuf with a conversion cannot be answered (Tables are JSON only). */
    for (size_t i = 0; i < n; i++) {
        if (type_is(&cs[i], KL_PROTO_TYPE) && !cs[i].convert)
            return true;
        if (type_is(&cs[i], "application/json") || type_is(&cs[i], "application/yaml") ||
            type_is(&cs[i], "application/*") || type_is(&cs[i], "*/*"))
            return false;
    }
    return false;
}
