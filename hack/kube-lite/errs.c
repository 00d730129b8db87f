/*
 * errs: field errors accumulated during validation and turned into the 422
 * Invalid Status body kube-apiserver sends (apimachinery errors.NewInvalid):
 * message "<Kind>[.<group>] \"<name>\" is invalid: <field>: <body>", several
 * joined "[a, b]" with duplicates dropped, details.causes in insertion order.
 * Also Go's strconv.Quote, since every %q in those messages is one.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube-lite/kl.h"

typedef struct kl_cause {
    char *reason;
    char *field;
    char *message;
} kl_cause;

struct kl_errs {
    kl_cause *v;
    size_t n, cap;
};

kl_errs *kl_errs_new(void)
{
    return util_calloc(1, sizeof(kl_errs));
}

void kl_errs_free(kl_errs *e)
{
    if (e == NULL)
        return;
    for (size_t i = 0; i < e->n; i++) {
        free(e->v[i].reason);
        free(e->v[i].field);
        free(e->v[i].message);
    }
    free(e->v);
    free(e);
}

void kl_errs_add(kl_errs *e, const char *reason, const char *field, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    char *msg = util_calloc((size_t)n + 1, 1);
    va_start(ap, fmt);
    vsnprintf(msg, (size_t)n + 1, fmt, ap);
    va_end(ap);

    if (e->n == e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 4;
        kl_cause *v = realloc(e->v, cap * sizeof(*v));
        if (v == NULL) {
            fputs("kube-lite: out of memory\n", stderr);
            abort();
        }
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n].reason = util_strdup(reason);
    e->v[e->n].field = util_strdup(field ? field : "");
    e->v[e->n].message = msg;
    e->n++;
}

size_t kl_errs_count(const kl_errs *e)
{
    return e ? e->n : 0;
}

/* ---- Go quoting --------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n;
    unsigned min;

    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf) {
        n = 2;
        min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        n = 3;
        min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = c & (0x3fu >> (n - 1));
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

char *kl_quote(const char *s)
{
    if (s == NULL)
        s = "";
    size_t len = strlen(s);
    /* Worst case every byte becomes \xNN. */
    char *out = util_calloc(len * 4 + 3, 1);
    char *o = out;
    const unsigned char *p = (const unsigned char *)s;

    *o++ = '"';
    while (*p) {
        unsigned c = *p;
        const char *esc = NULL;
        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\a':
            esc = "\\a";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\v':
            esc = "\\v";
            break;
        default:
            break;
        }
        if (esc) {
            size_t el = strlen(esc);
            memcpy(o, esc, el);
            o += el;
            p++;
            continue;
        }
        if (c < 0x20 || c == 0x7f) {
            o += sprintf(o, "\\x%02x", c);
            p++;
            continue;
        }
        size_t n = utf8_len(p);
        if (n == 0) {
            /* Go writes each byte of invalid UTF-8 as \xNN. */
            o += sprintf(o, "\\x%02x", c);
            p++;
            continue;
        }
        memcpy(o, p, n);
        o += n;
        p += n;
    }
    *o++ = '"';
    *o = '\0';
    return out;
}

/* ---- the Status body ---------------------------------------------------- */

static json_object *jstr(const char *s)
{
    return json_object_new_string(s);
}

json_object *kl_errs_status(const kl_errs *e, const kl_type *t, const char *name)
{
    return kl_errs_status_as(e, t->group, t->kind, name);
}

json_object *kl_errs_status_as(const kl_errs *e, const char *group, const char *what,
                               const char *name)
{
    size_t n = kl_errs_count(e);
    char *qname = kl_quote(name);
    char *kind = group[0] ? util_asprintf("%s.%s", what, group) : util_strdup(what);

    /* The message lists each distinct "field: message" once, in order
     * (ToAggregate drops repeats); one error stands alone, more are
     * bracketed. */
    char **seen = util_calloc(n ? n : 1, sizeof(char *));
    size_t n_seen = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        char *one = util_asprintf("%s: %s", e->v[i].field, e->v[i].message);
        bool dup = false;
        for (size_t j = 0; j < n_seen && !dup; j++)
            dup = strcmp(seen[j], one) == 0;
        if (dup) {
            free(one);
            continue;
        }
        total += strlen(one) + 2;
        seen[n_seen++] = one;
    }

    char *message;
    if (n_seen == 0) {
        message = util_asprintf("%s %s is invalid", kind, qname);
    } else if (n_seen == 1) {
        message = util_asprintf("%s %s is invalid: %s", kind, qname, seen[0]);
    } else {
        char *joined = util_calloc(total + 3, 1);
        char *w = joined;
        *w++ = '[';
        for (size_t j = 0; j < n_seen; j++) {
            if (j > 0) {
                memcpy(w, ", ", 2);
                w += 2;
            }
            size_t l = strlen(seen[j]);
            memcpy(w, seen[j], l);
            w += l;
        }
        *w++ = ']';
        *w = '\0';
        message = util_asprintf("%s %s is invalid: %s", kind, qname, joined);
        free(joined);
    }
    for (size_t j = 0; j < n_seen; j++)
        free(seen[j]);
    free(seen);

    /* Key order follows metav1.Status's Go field order, as the real server
     * serialises it; empty optional fields are omitted (omitempty). */
    json_object *st = json_object_new_object();
    json_object_object_add(st, "kind", jstr("Status"));
    json_object_object_add(st, "apiVersion", jstr("v1"));
    json_object_object_add(st, "metadata", json_object_new_object());
    json_object_object_add(st, "status", jstr("Failure"));
    json_object_object_add(st, "message", jstr(message));
    json_object_object_add(st, "reason", jstr("Invalid"));

    json_object *details = json_object_new_object();
    if (name && name[0])
        json_object_object_add(details, "name", jstr(name));
    if (group[0])
        json_object_object_add(details, "group", jstr(group));
    json_object_object_add(details, "kind", jstr(what));
    if (n > 0) {
        json_object *causes = json_object_new_array();
        for (size_t i = 0; i < n; i++) {
            json_object *c = json_object_new_object();
            json_object_object_add(c, "reason", jstr(e->v[i].reason));
            if (e->v[i].message[0])
                json_object_object_add(c, "message", jstr(e->v[i].message));
            if (e->v[i].field[0])
                json_object_object_add(c, "field", jstr(e->v[i].field));
            json_object_array_add(causes, c);
        }
        json_object_object_add(details, "causes", causes);
    }
    json_object_object_add(st, "details", details);
    json_object_object_add(st, "code", json_object_new_int(422));

    free(message);
    free(kind);
    free(qname);
    return st;
}
