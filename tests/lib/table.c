/*
 * See table.h. Failures go through cmocka's fail_msg, which ends the running
 * test; a string that would print as "(null)" is told from a NULL by its
 * quotes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "table.h"
#include "util/util.h"

char *th_quote(const char *text)
{
    if (!text)
        return NULL;
    char *s = strdup(text);
    assert_non_null(s);
    for (char *p = s; *p; p++)
        if (*p == '`')
            *p = '"';
    return s;
}

json_object *th_json(const char *text)
{
    if (!text)
        return NULL;
    char *s = th_quote(text);
    json_object *o = kobj_parse_text(s, strlen(s));
    if (!o)
        fail_msg("bad fixture JSON (%s): %s", util_err_last(), s);
    free(s);
    return o;
}

void th_expect_str(const char *row, const char *what, const char *got, const char *want)
{
    if (got && want ? strcmp(got, want) == 0 : got == want)
        return;
    const char *gq = got ? "\"" : "", *wq = want ? "\"" : "";
    fail_msg("[%s]%s%s:\n  got  %s%s%s\n  want %s%s%s", row, what ? " " : "", what ? what : "", gq,
             got ? got : "(null)", gq, wq, want ? want : "(null)", wq);
}

void th_expect_text(const char *row, const char *what, const char *got, const char *want_q)
{
    char *want = th_quote(want_q);
    th_expect_str(row, what, got, want);
    free(want);
}

void th_expect_int(const char *row, const char *what, long long got, long long want)
{
    if (got != want)
        fail_msg("[%s]%s%s: got %lld, want %lld", row, what ? " " : "", what ? what : "", got,
                 want);
}

void th_expect_json(const char *row, const json_object *got, const char *want_q)
{
    json_object *want = th_json(want_q);
    /* json_object_equal takes non-const pointers but does not write. */
    if (!json_object_equal((json_object *)got, want))
        fail_msg("[%s]\n  got  %s\n  want %s", row,
                 got ? json_object_to_json_string((json_object *)got) : "(none)",
                 want ? json_object_to_json_string(want) : "(none)");
    json_object_put(want);
}

void th_expect_json_text(const char *row, const char *got, const char *want_q)
{
    if (!got || !want_q) {
        if (got || want_q)
            fail_msg("[%s]\n  got  %s\n  want %s", row, got ? got : "(none)",
                     want_q ? want_q : "(none)");
        return;
    }
    json_object *g = kobj_parse_text(got, strlen(got));
    if (!g)
        fail_msg("[%s] not JSON (%s):\n  got  %s", row, util_err_last(), got);
    th_expect_json(row, g, want_q);
    json_object_put(g);
}
