/*
 * fuzz_json: kobj's JSON reader (common/kobj/json.c) against json-c's
 * strict tokener, the reader it replaced, on any bytes.
 *
 * Checked: both accept or both refuse (json-c also takes a few numbers RFC
 * 8259 refuses, such as "05e1", "-.5" and NaN, and object keys in single
 * quotes; kobj refuses all of them. json-c also turns some valid surrogate
 * pairs into U+FFFD: those are let through); what kobj writes is what
 * json-c writes for its own tree; writing is a fixed point (read back,
 * written again: the same text); a prefix of an accepted text is never
 * taken for a whole value when it is a container; the framer finds the
 * same end as the reader.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "util/util.h"

#include "fuzz.h"

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static json_object *jc_parse(const char *s, size_t n, bool *ok)
{
    json_tokener *tok = json_tokener_new_ex(KOBJ_JSON_DEPTH + 1);
    if (!tok)
        abort();
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    *ok = json_tokener_get_error(tok) == json_tokener_success;
    size_t end = *ok ? json_tokener_get_parse_end(tok) : 0;
    json_tokener_free(tok);
    for (; *ok && end < n; end++)
        if (!is_ws(s[end]))
            *ok = false;
    if (!*ok) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* kobj's text k equals json-c's j once each 4-byte UTF-8 sequence of k is
 * read as U+FFFD (json-c 0.16 garbles some valid surrogate pairs). */
static bool same_but_pairs(const char *k, size_t kl, const char *j, size_t jl)
{
    size_t a = 0, b = 0;
    while (a < kl && b < jl) {
        if ((unsigned char)k[a] >= 0xF0 && a + 4 <= kl && jl - b >= 3 &&
            memcmp(j + b, "\xef\xbf\xbd", 3) == 0) {
            a += 4;
            b += 3;
        } else if (k[a] == j[b]) {
            a++;
            b++;
        } else {
            return false;
        }
    }
    return a == kl && b == jl;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *s = (const char *)data;
    size_t i = 0;
    while (i < size && is_ws(s[i]))
        i++;
    bool container = i < size && (s[i] == '{' || s[i] == '[');

    json_object *ko = kobj_parse_text(s, size);
    const char *why = util_err_last();
    /* kobj is stricter on numbers, and on UTF-8 (json-c takes overlong
     * forms, surrogates and code points past U+10FFFF). */
    bool number_quirk = !ko && (strstr(why, "number") || strstr(why, "exponent") ||
                                strstr(why, "UTF-8") || memmem(s, size, "NaN", 3) ||
                                memmem(s, size, "Infinity", 8) || memchr(s, '\'', size));
    /* json-c cannot tell a top-level scalar that ends with the text from
     * one that goes on: only containers are compared. */
    if (container) {
        bool jok = false;
        json_object *jo = jc_parse(s, size, &jok);
        if (jok != (ko != NULL) && !(jok && number_quirk)) {
            fprintf(stderr, "json-c %s, kobj %s (%s)\n", jok ? "accepts" : "refuses",
                    ko ? "accepts" : "refuses", why);
            abort();
        }
        if (jok && ko) {
            size_t kl = 0, jl = 0;
            char *kt = kobj_to_text(ko, &kl);
            const char *jt = json_object_to_json_string_length(
                jo, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
            if ((kl != jl || memcmp(kt, jt, kl) != 0) && !same_but_pairs(kt, kl, jt, jl)) {
                fprintf(stderr, "kobj wrote %s, json-c %s\n", kt, jt);
                abort();
            }
            free(kt);
        }
        json_object_put(jo);
    }
    if (ko) {
        /* Writing is a fixed point. */
        size_t l1 = 0, l2 = 0;
        char *t1 = kobj_to_text(ko, &l1);
        json_object *back = kobj_parse_text(t1, l1);
        char *t2 = back ? kobj_to_text(back, &l2) : NULL;
        if (!back || l1 != l2 || memcmp(t1, t2, l1) != 0) {
            fprintf(stderr, "not a fixed point: %s / %s\n", t1, t2 ? t2 : "(refused)");
            abort();
        }
        /* The framer ends a container where the reader does. */
        if (container) {
            kobj_frame f;
            kobj_frame_init(&f);
            long end = kobj_frame_scan(&f, s, size);
            size_t used = 0;
            json_object *again = NULL;
            if (kobj_parse(s, size, &used, &again) != 0 || end != (long)used) {
                fprintf(stderr, "framer ends at %ld, reader at %zu\n", end, used);
                abort();
            }
            json_object_put(again);
            /* Cut one byte short, a container is never whole. */
            size_t cut_used = 0;
            json_object *cut = NULL;
            if (kobj_parse(s, used - 1, &cut_used, &cut) != -EAGAIN) {
                fprintf(stderr, "a container cut short was not taken as unfinished\n");
                abort();
            }
            json_object_put(cut);
        }
        free(t1);
        free(t2);
        json_object_put(back);
        json_object_put(ko);
    }
    return 0;
}
