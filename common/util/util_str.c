/*
 * util_str: allocation helpers that abort on out-of-memory, and small string
 * predicates. Running out of memory is not an input error a sidecar can
 * report usefully, so callers stay straight-line.
 */
#include "util.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static void oom(void)
{
    fputs("util: out of memory\n", stderr);
    abort();
}

char *util_strdup(const char *s)
{
    if (s == NULL)
        return NULL;
    char *p = strdup(s);
    if (p == NULL)
        oom();
    return p;
}

char *util_asprintf(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        /* Only an invalid format gets here; treat it like OOM rather than
         * hand back NULL to code that never checks. */
        fputs("util: asprintf: bad format\n", stderr);
        abort();
    }
    char *p = malloc((size_t)n + 1);
    if (p == NULL)
        oom();
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void *util_calloc(size_t n, size_t size)
{
    /* Ask for at least one byte so that NULL can only mean OOM. */
    if (n == 0 || size == 0) {
        n = 1;
        size = 1;
    }
    void *p = calloc(n, size);
    if (p == NULL)
        oom();
    return p;
}

void util_thread_name(const char *fmt, ...)
{
    char name[16];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    pthread_setname_np(pthread_self(), name);
}

void util_buf_put(util_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *nb = realloc(b->buf, cap);
        if (nb == NULL)
            oom();
        b->buf = nb;
        b->cap = cap;
    }
    if (n > 0)
        memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

/* The value of one character of the standard alphabet, or -1. */
static int b64_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

int util_base64_decode(const char *in, char **out)
{
    size_t n = strlen(in);
    char *clean = util_calloc(n + 1, 1);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (in[i] != '\r' && in[i] != '\n')
            clean[m++] = in[i];
    char *res = util_calloc(m / 4 * 3 + 1, 1);
    size_t o = 0;
    bool ok = m % 4 == 0;
    for (size_t i = 0; ok && i < m; i += 4) {
        int v[4];
        int pad = 0;
        for (int k = 0; k < 4; k++) {
            if (clean[i + k] == '=' && i + 4 == m && k >= 2) {
                v[k] = 0;
                pad++;
            } else {
                v[k] = pad > 0 ? -1 : b64_value(clean[i + k]);
            }
            ok = ok && v[k] >= 0;
        }
        if (!ok)
            break;
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        res[o++] = (char)(w >> 16);
        if (pad < 2)
            res[o++] = (char)(w >> 8 & 0xff);
        if (pad < 1)
            res[o++] = (char)(w & 0xff);
    }
    free(clean);
    /* A C string cannot carry a NUL byte; refuse rather than truncate. */
    if (!ok || memchr(res, '\0', o) != NULL) {
        free(res);
        return -EINVAL;
    }
    res[o] = '\0';
    *out = res;
    return 0;
}

size_t util_utf8_decode(const char *s, size_t len, unsigned *rune)
{
    const unsigned char *p = (const unsigned char *)s;
    unsigned c = p[0];
    if (c < 0x80) {
        *rune = c;
        return 1;
    }
    size_t n;
    unsigned min, r;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2, min = 0x80, r = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3, min = 0x800, r = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4, min = 0x10000, r = c & 0x07;
    } else {
        return 0;
    }
    if (len < n)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        r = (r << 6) | (p[i] & 0x3f);
    }
    if (r < min || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
        return 0;
    *rune = r;
    return n;
}

bool util_has_prefix(const char *s, const char *prefix)
{
    if (s == NULL || prefix == NULL)
        return false;
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

uint64_t util_hash_byte(uint64_t h, unsigned char b)
{
    return (h ^ b) * 1099511628211ULL;
}

uint64_t util_hash_str(uint64_t h, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++)
        h = util_hash_byte(h, *p);
    return h;
}
