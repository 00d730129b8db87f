/*
 * Helpers of the table-driven unit tests: fixtures written with ` for "
 * (so JSON reads without escapes in C strings) and comparisons that fail the
 * running cmocka test naming the row and what was compared.
 *
 * Include after <cmocka.h>. The short names below (J, Q, expect_*, N_ROWS)
 * are macros over the th_ functions, so that a table test's rows and checks
 * stay one line each; a file that wants other meanings for them can use the
 * th_ names and #undef the short ones.
 */
#ifndef CSISIDECAR_TEST_TABLE_H
#define CSISIDECAR_TEST_TABLE_H

#include <json-c/json.h>

/* The number of rows of the array `t`. */
#define TH_N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* A malloc'ed copy of `text` with every ` turned into " (NULL: NULL). */
char *th_quote(const char *text);
/* The JSON value of the fixture `text` written with ` for " (NULL: NULL);
 * text that is not exactly one JSON value (strict, as kobj_parse_text reads
 * it; a JSON null included) fails the test, printing the text. */
json_object *th_json(const char *text);
/* Fails unless `got` and `want` are the same string or both NULL. `what`
 * (may be NULL when `row` says it all) names the compared value. */
void th_expect_str(const char *row, const char *what, const char *got, const char *want);
/* th_expect_str against `want_q` written with ` for " (NULL: NULL). */
void th_expect_text(const char *row, const char *what, const char *got, const char *want_q);
void th_expect_int(const char *row, const char *what, long long got, long long want);
/* Fails unless the JSON value `got` equals the fixture `want_q` (written
 * with ` for "); both are printed on a difference. */
void th_expect_json(const char *row, const json_object *got, const char *want_q);
/* The same for `got` as JSON text; a NULL `got` equals only a NULL
 * `want_q`, and text that does not parse fails. */
void th_expect_json_text(const char *row, const char *got, const char *want_q);

#define N_ROWS(t)                           TH_N_ROWS(t)
#define Q(text)                             th_quote(text)
#define J(text)                             th_json(text)
#define expect_str(row, what, got, want)    th_expect_str(row, what, got, want)
#define expect_text(row, what, got, want_q) th_expect_text(row, what, got, want_q)
#define expect_int(row, what, got, want)    th_expect_int(row, what, got, want)
#define expect_json(row, got, want_q)       th_expect_json(row, got, want_q)
#define expect_json_text(row, got, want_q)  th_expect_json_text(row, got, want_q)

#endif
