/*
 * Unit tests for kobj's JSON reader, writer and stream framer
 * (common/kobj/json.c).
 *
 * - a table of texts with what the reader must answer (the tree written
 *   back, "more" for a text that ends inside a value, "bad");
 * - the reader against json-c's strict tokener, the one it replaces, over
 *   every prefix of a set of seeds and ~60,000 seeded random mutations of
 *   them: both accept or both refuse (but for numbers such as "05e1",
 *   "-.5" and NaN that json-c takes and RFC 8259 does not), and the trees
 *   read alike;
 * - the writer against json-c's printer on every tree both accepted;
 * - the framer over each seed cut at every byte, against the reader.
 *
 * Fixtures write " as ` so they stay readable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "util/util.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

static char *T(const char *text)
{
    char *s = strdup(text);
    assert_non_null(s);
    for (char *p = s; *p != '\0'; p++)
        if (*p == '`')
            *p = '"';
    return s;
}

/* ---- the table ------------------------------------------------------------------ */

static const struct row {
    const char *in;
    const char *want; /* written back; "more": -EAGAIN; "bad": -EINVAL */
} rows[] = {
    {"{}", "{}"},
    {"[]", "[]"},
    {" \t\r\n{ } ", "{}"},
    {"{`a`:1,`b`:[true,false,null],`c`:{`d`:`e`}}", "{`a`:1,`b`:[true,false,null],`c`:{`d`:`e`}}"},
    {"{`a` : 1 , `b` : [ 1 , 2 ] }", "{`a`:1,`b`:[1,2]}"},
    {"{`a`:1,`a`:2}", "{`a`:2}"},
    {"`x/y`", "`x/y`"},
    {"`\\/`", "`/`"},
    {"`\\`\\\\\\b\\f\\n\\r\\t`", "`\\`\\\\\\b\\f\\n\\r\\t`"},
    {"`\\u0041\\u00e9\\u20ac`", "`A\xc3\xa9\xe2\x82\xac`"},
    {"`\\ud83d\\ude00`", "`\xf0\x9f\x98\x80`"},
    {"`\\ud800`", "`\xef\xbf\xbd`"},
    {"`\\ud800x`", "`\xef\xbf\xbdx`"},
    {"`\\udc00`", "`\xef\xbf\xbd`"},
    {"`\\ud800\\n`", "`\xef\xbf\xbd\\n`"},
    {"`\\u0000a`", "`\\u0000a`"},
    {"`\\u001f\\u007f`", "`\\u001f\x7f`"},
    {"`a\tb`", "`a\\tb`"},
    {"[0,-0,1,-1,9223372036854775807,-9223372036854775808]",
     "[0,0,1,-1,9223372036854775807,-9223372036854775808]"},
    /* Out of range: clamped, as json-c does. */
    {"[9223372036854775808,18446744073709551615,18446744073709551616,-9223372036854775809]",
     "[9223372036854775808,18446744073709551615,18446744073709551615,-9223372036854775808]"},
    {"[1.5,-0.0,1e2,1E+2,2.5e-3,1E400,1.]", "[1.5,-0.0,1e2,1E+2,2.5e-3,1E400,1.]"},
    {"{`k\\u0041`:`v`}", "{`kA`:`v`}"},
    /* Ends inside a value: more may come. */
    {"", "more"},
    {"   ", "more"},
    {"{", "more"},
    {"{`a`", "more"},
    {"{`a`:", "more"},
    {"{`a`:1", "more"},
    {"{`a`:1,", "more"},
    {"[1,2", "more"},
    {"`abc", "more"},
    {"`a\\", "more"},
    {"`a\\u00", "more"},
    {"`\\ud83d", "more"},
    {"`\\ud83d\\u", "more"},
    {"tr", "more"},
    {"[-", "more"},
    {"[1e", "more"},
    /* Not JSON. */
    {"{,}", "bad"},
    {"{`a`:1,}", "bad"},
    {"[1,]", "bad"},
    {"[01]", "bad"},
    {"[.5]", "bad"},
    {"[-a]", "bad"},
    {"[1e+]", "bad"},
    {"{a:1}", "bad"},
    {"{`a` 1}", "bad"},
    {"[1 2]", "bad"},
    {"[tru]", "bad"},
    {"[nul1]", "bad"},
    {"`\\x`", "bad"},
    {"`\\u12g4`", "bad"},
    {"'a'", "bad"},
    {"/* c */ {}", "bad"},
    {"}", "bad"},
    /* Raw bytes that are not UTF-8: no API server writes them. */
    {"`a\xff`", "bad"},
    {"`\xc3(`", "bad"},
    {"`\xc0\x80`", "bad"},         /* overlong */
    {"`\xed\xa0\x80`", "bad"},     /* a surrogate */
    {"`\xf4\x90\x80\x80`", "bad"}, /* past U+10FFFF */
    {"`\xe2\x82`", "bad"},         /* cut short */
    {"`\x80`", "bad"},
    {"`\\n\xff`", "bad"},   /* after an escape */
    {"{`k\xff`:1}", "bad"}, /* in a key */
    {"`abcdefgh\xc3\xa9ijklmnop\xf0\x9f\x98\x80`", "`abcdefgh\xc3\xa9ijklmnop\xf0\x9f\x98\x80`"},
    {"`\\n\xc3\xa9`", "`\\n\xc3\xa9`"},
};

static void test_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *in = T(rows[i].in);
        char *want = T(rows[i].want);
        json_object *o = NULL;
        size_t used = 0;
        int rc = kobj_parse(in, strlen(in), &used, &o);
        if (strcmp(want, "more") == 0) {
            if (rc != -EAGAIN)
                fail_msg("row %zu %s: rc %d, want -EAGAIN", i, in, rc);
        } else if (strcmp(want, "bad") == 0) {
            if (rc != -EINVAL)
                fail_msg("row %zu %s: rc %d, want -EINVAL", i, in, rc);
            if (strstr(util_err_last(), "bad JSON") == NULL)
                fail_msg("row %zu %s: message %s", i, in, util_err_last());
        } else {
            if (rc != 0)
                fail_msg("row %zu %s: rc %d (%s)", i, in, rc, util_err_last());
            size_t len = 0;
            char *got = kobj_to_text(o, &len);
            if (strcmp(got, want) != 0 || len != strlen(got))
                fail_msg("row %zu %s: wrote %s, want %s", i, in, got, want);
            free(got);
        }
        json_object_put(o);
        free(in);
        free(want);
    }
}

static void test_used_and_trailing_text(void **state)
{
    (void)state;
    const char *s = "{\"a\":1} {\"b\":2}\n";
    json_object *o = NULL;
    size_t used = 0;
    assert_int_equal(kobj_parse(s, strlen(s), &used, &o), 0);
    assert_int_equal(used, 7);
    json_object_put(o);
    assert_int_equal(kobj_parse(s + used, strlen(s) - used, &used, &o), 0);
    assert_int_equal(used, 8);
    json_object_put(o);

    assert_null(kobj_parse_text(s, strlen(s)));
    assert_non_null(strstr(util_err_last(), "text after the value"));
    assert_null(kobj_parse_text("{\"a\":", 5));
    assert_non_null(strstr(util_err_last(), "ends inside"));
    assert_null(kobj_parse_text("null", 4));
    o = kobj_parse_text(" {\"a\":1}\n ", 10);
    assert_non_null(o);
    json_object_put(o);
    /* A raw NUL byte in a string or key is refused, as json-c does. */
    assert_null(kobj_parse_text("[\"a\0b\"]", 7));
    assert_non_null(strstr(util_err_last(), "NUL byte"));
    assert_null(kobj_parse_text("{\"a\0b\":1}", 9));
    assert_null(kobj_parse_text("[\"a\\n\0b\"]", 9));
    /* A length that stops short of the NUL is honoured. */
    o = kobj_parse_text("[1,2]xyz", 5);
    assert_non_null(o);
    assert_int_equal(json_object_array_length(o), 2);
    json_object_put(o);
}

static char *nested(int depth)
{
    char *s = malloc((size_t)depth * 2 + 1);
    assert_non_null(s);
    size_t d = (size_t)depth;
    for (size_t i = 0; i < d; i++) {
        s[i] = '[';
        s[2 * d - 1 - i] = ']';
    }
    s[2 * d] = '\0';
    return s;
}

static void test_depth(void **state)
{
    (void)state;
    char *ok = nested(KOBJ_JSON_DEPTH), *deep = nested(KOBJ_JSON_DEPTH + 1);
    json_object *o = kobj_parse_text(ok, strlen(ok));
    assert_non_null(o);
    json_object_put(o);
    assert_null(kobj_parse_text(deep, strlen(deep)));
    assert_non_null(strstr(util_err_last(), "nested deeper"));
    kobj_frame f;
    kobj_frame_init(&f);
    assert_int_equal(kobj_frame_scan(&f, ok, strlen(ok)), (long)strlen(ok));
    kobj_frame_init(&f);
    assert_int_equal(kobj_frame_scan(&f, deep, strlen(deep)), -EINVAL);
    free(ok);
    free(deep);
    /* A million opening brackets: refused at the limit, not a stack overflow. */
    char *huge = malloc(1000001);
    assert_non_null(huge);
    memset(huge, '[', 1000000);
    huge[1000000] = '\0';
    assert_null(kobj_parse_text(huge, 1000000));
    free(huge);
}

/* ---- against json-c ---------------------------------------------------------- */

static const char *seeds[] = {
    "{`kind`:`PersistentVolumeClaim`,`apiVersion`:`v1`,`metadata`:{`name`:`pvc-1`,`namespace`:"
    "`default`,`uid`:`0b6f5c55-7a1e-4b9f-a0e3-1c2d3e4f5a6b`,`resourceVersion`:`12345`,"
    "`generation`:1,`annotations`:{`volume.kubernetes.io/storage-provisioner`:`hostpath.csi`},"
    "`finalizers`:[`kubernetes.io/pvc-protection`]},`spec`:{`accessModes`:[`ReadWriteOnce`],"
    "`resources`:{`requests`:{`storage`:`1Gi`}},`storageClassName`:`fast`,`volumeMode`:"
    "`Filesystem`},`status`:{`phase`:`Pending`}}",
    "{`type`:`MODIFIED`,`object`:{`metadata`:{`name`:`a`,`labels`:{}},`spec`:{`capacity`:"
    "{`storage`:`5Gi`},`csi`:{`driver`:`d`,`volumeHandle`:`v-1`,`volumeAttributes`:{`x`:`"
    "\\u00e9\\n`"
    "}},`mountOptions`:[],`persistentVolumeReclaimPolicy`:`Delete`}}}",
    "[1,-2,3.25,-4e10,0.5E-3,true,false,null,``,`\\`\\\\\\/\\b\\f\\n\\r\\t`,[],{},[[{}]]]",
    "{`s`:`\\ud83d\\ude00 \\ud800 \\udc00 \\u0041`,`n`:[9223372036854775807,-9223372036854775808,"
    "18446744073709551615,1E400,1.]}",
    "{`a`:{`b`:{`c`:{`d`:[1,{`e`:null}]}}},`a`:2,`z`:`\\u0000`}",
    "[ 1 , 2 ,\t3 ,\n{ `k` : `v` } ]",
};

/* json-c's strict reading of the whole text, as the code before kobj's
 * reader did it: NULL unless the text is one value and whitespace. */
static json_object *jc_parse(const char *s, size_t n, bool *ok)
{
    json_tokener *tok = json_tokener_new_ex(KOBJ_JSON_DEPTH + 1);
    assert_non_null(tok);
    json_tokener_set_flags(tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS |
                                    JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(tok, s, (int)n);
    *ok = json_tokener_get_error(tok) == json_tokener_success;
    size_t end = *ok ? json_tokener_get_parse_end(tok) : 0;
    json_tokener_free(tok);
    for (; *ok && end < n; end++)
        if (s[end] != ' ' && s[end] != '\n' && s[end] != '\r' && s[end] != '\t')
            *ok = false;
    if (!*ok) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static bool top_is_container(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t'))
        i++;
    return i < n && (s[i] == '{' || s[i] == '[');
}

static int compared, both_ok;

/*
 * json-c 0.16 turns some valid surrogate pairs into U+FFFD ("\ud836\ude00"
 * but not "\ud83e\ude00"). True when `k` (kobj's text) becomes `j` once
 * each 4-byte UTF-8 sequence in it is replaced by U+FFFD.
 */
static bool same_but_json_c_pairs(const char *k, size_t kl, const char *j, size_t jl)
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

/* Both readers on s[0..n): the same verdict and, when both accept, the
 * same text from both writers (but for json-c's surrogate-pair bug). */
static void compare(const char *s, size_t n)
{
    /* json-c cannot tell "1" from the start of "12": top-level scalars
     * only end with the text, which the two readers treat differently. */
    if (!top_is_container(s, n))
        return;
    bool jok = false;
    json_object *jo = jc_parse(s, n, &jok);
    json_object *ko = kobj_parse_text(s, n);
    compared++;
    /* json-c takes some numbers RFC 8259 does not ("05e1", "-.5", NaN,
     * Infinity), keys in single quotes and UTF-8 that is not (overlong
     * forms, surrogates, past U+10FFFF); kobj refuses them. The other way
     * round (kobj taking what json-c refused) is never let through. */
    const char *why = util_err_last();
    if (jok && !ko &&
        (strstr(why, "number") || strstr(why, "exponent") || strstr(why, "UTF-8") ||
         memmem(s, n, "NaN", 3) || memmem(s, n, "Infinity", 8) || memchr(s, '\'', n))) {
        json_object_put(jo);
        return;
    }
    if (jok != (ko != NULL))
        fail_msg("json-c %s, kobj %s (%s) on [%.*s]", jok ? "accepts" : "refuses",
                 ko ? "accepts" : "refuses", util_err_last(), (int)n, s);
    if (jok) {
        both_ok++;
        size_t kl = 0, jl = 0;
        char *kt = kobj_to_text(ko, &kl);
        const char *jt = json_object_to_json_string_length(
            jo, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
        if ((kl != jl || memcmp(kt, jt, kl) != 0) && !same_but_json_c_pairs(kt, kl, jt, jl))
            fail_msg("on [%.*s]: kobj wrote %s, json-c %s", (int)n, s, kt, jt);
        /* And json-c's printer on kobj's tree: the trees are alike. */
        const char *kj = json_object_to_json_string_length(
            ko, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE, &jl);
        if (kl != jl || memcmp(kt, kj, kl) != 0)
            fail_msg("on [%.*s]: trees differ: %s / %s", (int)n, s, kt, kj);
        free(kt);
    }
    json_object_put(jo);
    json_object_put(ko);
}

static void test_prefixes_match_json_c(void **state)
{
    (void)state;
    compared = both_ok = 0;
    for (size_t i = 0; i < N_ROWS(seeds); i++) {
        char *s = T(seeds[i]);
        size_t n = strlen(s);
        for (size_t k = 0; k <= n; k++)
            compare(s, k);
        free(s);
    }
    assert_true(both_ok >= (int)N_ROWS(seeds));
}

static uint64_t rng = 0x9e3779b97f4a7c15u;

static unsigned next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (unsigned)(rng >> 32);
}

static void test_mutations_match_json_c(void **state)
{
    (void)state;
    /* Bytes worth putting in: structure, escapes, digits, controls, UTF-8. */
    static const char pool[] = "{}[]:,\"\\/ -+.eE0123456789abfnrtuxDd\t\n\x01\x1f\x7f\xc3\xa9\xff";
    compared = both_ok = 0;
    for (int round = 0; round < 60000; round++) {
        char *s = T(seeds[next() % N_ROWS(seeds)]);
        size_t n = strlen(s);
        int edits = 1 + (int)(next() % 4);
        for (int e = 0; e < edits; e++) {
            if (n == 0)
                break;
            size_t at = next() % n;
            switch (next() % 3) {
            case 0: /* replace */
                s[at] = pool[next() % (sizeof(pool) - 1)];
                break;
            case 1: /* delete */
                memmove(s + at, s + at + 1, n - at);
                n--;
                break;
            default: /* cut */
                n = at + 1;
                s[n] = '\0';
                break;
            }
        }
        compare(s, n);
        free(s);
    }
    /* The mutations must reach both verdicts often. */
    assert_true(compared > 50000);
    assert_true(both_ok > 5000);
    assert_true(compared - both_ok > 5000);
}

/* ---- the framer ------------------------------------------------------------------- */

static void test_frame_every_cut(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(seeds); i++) {
        char *s = T(seeds[i]);
        size_t n = strlen(s);
        for (size_t cut = 0; cut <= n; cut++) {
            kobj_frame f;
            kobj_frame_init(&f);
            long a = kobj_frame_scan(&f, s, cut);
            long b = a == 0 ? kobj_frame_scan(&f, s + cut, n - cut) : 0;
            long end = a > 0 ? a : (long)cut + b;
            if (a < 0 || (a == 0 && b <= 0) || end != (long)n)
                fail_msg("seed %zu cut at %zu: %ld then %ld, want the end at %zu", i, cut, a, b, n);
        }
        /* Two values back to back: the first ends where the reader says. */
        char *two = util_asprintf("%s\n%s", s, s);
        kobj_frame f;
        kobj_frame_init(&f);
        assert_int_equal(kobj_frame_scan(&f, two, strlen(two)), (long)n);
        free(two);
        free(s);
    }
}

static const struct frame_row {
    const char *in;
    long want; /* bytes to the value's end; 0: not ended; -EINVAL */
} frame_rows[] = {
    {"{`a`:`}`}", 9}, {"{`a`:`\\``}x", 10}, {"[`\\\\`]", 6}, {"  {}", 4},
    {"{`a`:[1,2", 0}, {"{`a\\", 0},         {"", 0},         {"\n", 0},
    {"`a`", -EINVAL}, {"1", -EINVAL},       {"}", -EINVAL},  {"x{}", -EINVAL},
    {"{}}", 2},       {"[{]}", 4},
};

static void test_frame_table(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(frame_rows); i++) {
        char *in = T(frame_rows[i].in);
        kobj_frame f;
        kobj_frame_init(&f);
        long got = kobj_frame_scan(&f, in, strlen(in));
        if (got != frame_rows[i].want)
            fail_msg("row %zu %s: %ld, want %ld", i, in, got, frame_rows[i].want);
        free(in);
    }
}

const char *kobj__common_key(size_t i);

/* The interned member names: sorted as the lookup's binary search needs,
 * each found (a parsed object keeps it, a repeated one still wins last), and
 * trees holding them copy, compare, print and lose members like others. */
static void test_common_keys(void **state)
{
    (void)state;
    const char *keys[512];
    size_t n = 0;
    while (n < sizeof keys / sizeof keys[0] && (keys[n] = kobj__common_key(n)) != NULL)
        n++;
    assert_true(n > 50 && n < sizeof keys / sizeof keys[0]);
    for (size_t i = 1; i < n; i++) {
        size_t a = strlen(keys[i - 1]), b = strlen(keys[i]);
        if (a > b || (a == b && memcmp(keys[i - 1], keys[i], a) >= 0))
            fail_msg("common keys out of order at %zu: %s, %s", i, keys[i - 1], keys[i]);
    }
    for (size_t i = 0; i < n; i++) {
        char *text = util_asprintf("{\"%s\":1,\"x%s\":2,\"%s\":3}", keys[i], keys[i], keys[i]);
        json_object *o = kobj_parse_text(text, strlen(text));
        assert_non_null(o);
        json_object *v = NULL;
        if (!json_object_object_get_ex(o, keys[i], &v) || json_object_get_int(v) != 3)
            fail_msg("[%s] not found or not the last value", keys[i]);
        json_object *copy = NULL;
        assert_int_equal(json_object_deep_copy(o, &copy, NULL), 0);
        assert_true(json_object_equal(o, copy));
        char *back = kobj_to_text(copy, NULL);
        char *want = util_asprintf("{\"%s\":3,\"x%s\":2}", keys[i], keys[i]);
        assert_string_equal(back, want);
        json_object_object_del(copy, keys[i]);
        assert_int_equal(json_object_object_length(copy), 1);
        free(want);
        free(back);
        json_object_put(copy);
        json_object_put(o);
        free(text);
    }
    /* A prefix, an extension or a near miss of a common key is a plain key. */
    static const char *const near[] = {"nam", "names", "Name", "metadat", "metadata ", "", "zzzz"};
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        char *text = util_asprintf("{\"%s\":true}", near[i]);
        json_object *o = kobj_parse_text(text, strlen(text));
        json_object *v = NULL;
        assert_true(json_object_object_get_ex(o, near[i], &v));
        assert_int_equal(json_object_object_length(o), 1);
        json_object_put(o);
        free(text);
    }
}

/* Bytes that are not UTF-8 (a driver's text may hold any) are written as
 * \ufffd, one per byte, as Go's encoding/json writes them; the text reads
 * back. Valid multi-byte characters and escapes are kept. */
static void test_writer_replaces_bytes_that_are_not_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        size_t len;
        const char *want;
    } bytes_rows[] = {
        {"a\xff"
         "b",
         3, "\"a\\ufffdb\""},
        {"\xc3\xa9", 2, "\"\xc3\xa9\""},
        {"\xe2\x82", 2, "\"\\ufffd\\ufffd\""},                       /* cut short */
        {"\xc0\xaf", 2, "\"\\ufffd\\ufffd\""},                       /* overlong */
        {"\xed\xa0\x80", 3, "\"\\ufffd\\ufffd\\ufffd\""},            /* a surrogate */
        {"\xf4\x90\x80\x80", 4, "\"\\ufffd\\ufffd\\ufffd\\ufffd\""}, /* past U+10FFFF */
        {"0123456789\x80\"\n\xf0\x9f\x98\x80", 17, "\"0123456789\\ufffd\\\"\\n\xf0\x9f\x98\x80\""},
    };
    for (size_t i = 0; i < N_ROWS(bytes_rows); i++) {
        json_object *o = json_object_new_string_len(bytes_rows[i].in, (int)bytes_rows[i].len);
        size_t len = 0;
        char *got = kobj_to_text(o, &len);
        if (strcmp(got, bytes_rows[i].want) != 0 || len != strlen(bytes_rows[i].want))
            fail_msg("row %zu: wrote %s, want %s", i, got, bytes_rows[i].want);
        json_object *back = kobj_parse_text(got, len);
        if (!back)
            fail_msg("row %zu: %s does not read back: %s", i, got, util_err_last());
        json_object_put(back);
        free(got);
        json_object_put(o);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_table),
        cmocka_unit_test(test_used_and_trailing_text),
        cmocka_unit_test(test_depth),
        cmocka_unit_test(test_prefixes_match_json_c),
        cmocka_unit_test(test_mutations_match_json_c),
        cmocka_unit_test(test_frame_every_cut),
        cmocka_unit_test(test_frame_table),
        cmocka_unit_test(test_common_keys),
        cmocka_unit_test(test_writer_replaces_bytes_that_are_not_utf8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
