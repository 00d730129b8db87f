/*
 * plan_util: the helpers the plan*.c files share (declared in
 * plan_internal.h): a growable string, Go's %q and %v formatting for the
 * values upstream's messages print, and JSON readers that treat a missing
 * key, a null and a wrong type alike, as Go's zero values do.
 */
#include "plan_internal.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- plan_buf ------------------------------------------------------------ */

void plan_buf_addn(plan_buf *b, const char *s, size_t n)
{
    /* The one growing buffer of the project does the work. */
    util_buf u = {b->s, b->len, b->cap};
    util_buf_put(&u, s, n);
    b->s = u.buf;
    b->len = u.len;
    b->cap = u.cap;
}

void plan_buf_add(plan_buf *b, const char *s)
{
    plan_buf_addn(b, s, strlen(s));
}

void plan_buf_addf(plan_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0)
        abort();
    plan_buf_addn(b, s, (size_t)n);
    free(s);
}

char *plan_buf_take(plan_buf *b)
{
    char *s = b->s != NULL ? b->s : util_strdup("");
    b->s = NULL;
    b->len = b->cap = 0;
    return s;
}

void plan_buf_free(plan_buf *b)
{
    free(b->s);
    b->s = NULL;
    b->len = b->cap = 0;
}

/* ---- Go formatting ------------------------------------------------------- */

/* Decodes one UTF-8 sequence like Go's utf8.DecodeRuneInString: *width 1
 * and -1 for anything invalid (overlong, surrogate, out of range, cut). */
static int32_t utf8_rune(const unsigned char *s, size_t *width)
{
    *width = 1;
    if (s[0] < 0x80)
        return s[0];
    int n = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc0 ? 2 : 0;
    if (n == 0 || s[0] > 0xf4)
        return -1;
    int32_t r = s[0] & (0x7f >> n);
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return -1;
        r = r << 6 | (s[i] & 0x3f);
    }
    static const int32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (r < min[n] || r > 0x10ffff || (r >= 0xd800 && r <= 0xdfff))
        return -1;
    *width = (size_t)n;
    return r;
}

/* Non-ASCII runes unicode.IsPrint rejects that names may plausibly carry;
 * everything else outside ASCII prints as is. */
static bool rune_unprintable(int32_t r)
{
    return (r >= 0x80 && r <= 0xa0) || r == 0xad || (r >= 0x2000 && r <= 0x200f) ||
           (r >= 0x2028 && r <= 0x202f) || (r >= 0x205f && r <= 0x206f) || r == 0x3000 ||
           r == 0xfeff || (r >= 0xfff9 && r <= 0xfffb);
}

void plan_buf_add_quoted(plan_buf *b, const char *s)
{
    plan_buf_add(b, "\"");
    const unsigned char *p = (const unsigned char *)s;
    while (*p != '\0') {
        size_t w;
        int32_t r = utf8_rune(p, &w);
        if (r < 0) {
            plan_buf_addf(b, "\\x%02x", *p);
        } else if (r == '"' || r == '\\') {
            plan_buf_addf(b, "\\%c", (char)r);
        } else if (r >= 0x20 && r < 0x7f) {
            plan_buf_addn(b, (const char *)p, 1);
        } else if (r < 0x80) {
            static const char esc[] = {'\a', 'a',  '\b', 'b',  '\f', 'f',  '\n',
                                       'n',  '\r', 'r',  '\t', 't',  '\v', 'v'};
            const char *e = NULL;
            for (size_t i = 0; i < sizeof(esc); i += 2)
                if (esc[i] == (char)r)
                    e = &esc[i + 1];
            if (e != NULL)
                plan_buf_addf(b, "\\%c", *e);
            else
                plan_buf_addf(b, "\\x%02x", (unsigned)r);
        } else if (rune_unprintable(r)) {
            plan_buf_addf(b, "\\u%04x", (unsigned)r);
        } else {
            plan_buf_addn(b, (const char *)p, w);
        }
        p += w;
    }
    plan_buf_add(b, "\"");
}

void plan_buf_add_term(plan_buf *b, const plan_term *t)
{
    plan_buf_add(b, "[");
    for (size_t i = 0; i < t->n; i++)
        plan_buf_addf(b, "%s{%s %s}", i > 0 ? " " : "", t->segs[i].key, t->segs[i].value);
    plan_buf_add(b, "]");
}

/* ---- JSON ---------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char **plan_sorted_keys(const json_object *obj, size_t *n)
{
    *n = 0;
    if (kobj_typed(obj, json_type_object) == NULL)
        return NULL;
    size_t count = (size_t)json_object_object_length(obj);
    const char **keys = util_calloc(count, sizeof(*keys));
    json_object_object_foreach((json_object *)obj, k, v)
    {
        (void)v;
        keys[(*n)++] = k;
    }
    qsort(keys, *n, sizeof(*keys), cmp_str);
    return keys;
}
