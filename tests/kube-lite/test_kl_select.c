/*
 * kube-lite selectors: label selectors (apimachinery labels.Parse syntax and
 * matching, with its 400 texts) and field selectors (syntax, escapes, the
 * per-type supported fields with both message styles, dotted-path matching
 * and the pod/event aliases). Table-driven: one row per rule; a failing row
 * names itself.
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

#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* JSON written with single quotes, for readable tables. */
static json_object *J(const char *s)
{
    if (s == NULL)
        return NULL;
    char *d = strdup(s);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_object *o = json_tokener_parse(d);
    free(d);
    if (o == NULL)
        fail_msg("bad test JSON: %s", s);
    return o;
}

static void expect_str(const char *row, const char *what, const char *got, const char *want)
{
    if (got == NULL)
        got = "(null)";
    if (want == NULL)
        want = "(null)";
    if (strcmp(got, want) != 0)
        fail_msg("[%s] %s:\n  got  \"%s\"\n  want \"%s\"", row, what, got, want);
}

#define QNAME_MSG                                                                                  \
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "  \
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for " \
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
#define LABEL_VALUE_MSG                                                                            \
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "    \
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "             \
    "'my_value',  or '12345', regex used for validation is "                                       \
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"

/* ---- label selectors: matching ---------------------------------------- */

static const struct {
    const char *name;
    const char *sel;
    const char *labels; /* NULL: the object has no labels */
    bool want;
} label_match[] = {
    {"empty selector selects everything", "", "{'a':'b'}", true},
    {"blank selector selects everything", "   ", NULL, true},
    {"equals matches the value", "a=b", "{'a':'b'}", true},
    {"double equals is equals", "a==b", "{'a':'b'}", true},
    {"equals rejects another value", "a=b", "{'a':'c'}", false},
    {"equals rejects a missing key", "a=b", "{}", false},
    {"not equals matches a missing key", "a!=b", "{}", true},
    {"not equals matches objects without labels", "a!=b", NULL, true},
    {"not equals rejects the value", "a!=b", "{'a':'b'}", false},
    {"in matches any listed value", "a in (b, c)", "{'a':'c'}", true},
    {"in rejects an unlisted value", "a in (b,c)", "{'a':'d'}", false},
    {"notin matches a missing key", "a notin (b,c)", "{}", true},
    {"notin rejects a listed value", "a notin (b,c)", "{'a':'b'}", false},
    {"bare key requires the key", "a", "{'a':''}", true},
    {"bare key rejects a missing key", "a", "{'b':'x'}", false},
    {"bang key requires absence", "!a", "{'a':'x'}", false},
    {"bang key matches absence", "!a", "{}", true},
    {"greater than compares integers", "n>5", "{'n':'10'}", true},
    {"less than compares integers", "n<5", "{'n':'10'}", false},
    {"greater than rejects a non-integer label", "n>5", "{'n':'abc'}", false},
    {"greater than rejects a missing key", "n>5", "{}", false},
    {"whitespace around tokens is ignored", "  a = b ,  c  ", "{'a':'b','c':'1'}", true},
    {"comma is AND", "a=b,c!=d", "{'a':'b','c':'d'}", false},
    {"empty parentheses hold the empty value", "a in ()", "{'a':''}", true},
    {"keywords are plain values inside parentheses", "x in (in, notin)", "{'x':'in'}", true},
    {"prefixed keys are allowed", "app.kubernetes.io/name=csi", "{'app.kubernetes.io/name':'csi'}",
     true},
};

static void test_label_selector_matches_like_apimachinery(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(label_match); i++) {
        kl_labelsel *sel = NULL;
        int rc = kl_labelsel_parse(label_match[i].sel, &sel);
        if (rc != 0)
            fail_msg("[%s] parse failed: %s", label_match[i].name, util_err_last());
        json_object *labels = J(label_match[i].labels);
        bool got = kl_labelsel_match(sel, labels);
        if (got != label_match[i].want)
            fail_msg("[%s] match = %d, want %d", label_match[i].name, got, label_match[i].want);
        json_object_put(labels);
        kl_labelsel_free(sel);
    }
}

/* ---- label selectors: errors ------------------------------------------ */

static const struct {
    const char *name;
    const char *sel;
    const char *want;
} label_errors[] = {
    {"a second operator after a term", "a=b=c", "found '=', expected: ',' or 'end of string'"},
    {"two words without operator", "a b",
     "unable to parse requirement: found 'b', expected: in, notin, =, ==, !=, gt, lt"},
    {"in without parentheses", "a in b", "unable to parse requirement: found 'b' expected: '('"},
    {"unclosed parentheses", "a in (b",
     "unable to parse requirement: found '', expected: ',' or ')'"},
    {"trailing comma", "a,", "found '', expected: identifier after ','"},
    {"leading comma", ",a", "found ',', expected: !, identifier, or 'end of string'"},
    {"bad key is reported with a nil path", "a@b=c",
     "unable to parse requirement: <nil>: Invalid value: \"a@b\": " QNAME_MSG},
    {"space inside a value", "a=b c", "found 'c', expected: ',' or 'end of string'"},
    {"non-integer for greater than", "x>abc",
     "unable to parse requirement: values[0]: Invalid value: \"abc\": for 'Gt', 'Lt' operators, "
     "the value must be an integer"},
    {"invalid label value", "a=-b",
     "unable to parse requirement: values[0][a]: Invalid value: \"-b\": " LABEL_VALUE_MSG},
    {"bang key takes no operator", "!a=b", "found '=', expected: ',' or 'end of string'"},
};

static void test_label_selector_syntax_errors_read_like_apimachinery(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(label_errors); i++) {
        kl_labelsel *sel = (kl_labelsel *)&sel;
        int rc = kl_labelsel_parse(label_errors[i].sel, &sel);
        if (rc != -EINVAL)
            fail_msg("[%s] rc = %d, want -EINVAL", label_errors[i].name, rc);
        assert_null(sel);
        expect_str(label_errors[i].name, "message", util_err_last(), label_errors[i].want);
    }
}

/* ---- field selectors: matching ----------------------------------------- */

static const struct {
    const char *name;
    const char *sel;
    const char *obj;
    bool want;
} field_match[] = {
    {"name equals", "metadata.name=p", "{'metadata':{'name':'p'}}", true},
    {"name not equals", "metadata.name!=p", "{'metadata':{'name':'p'}}", false},
    {"double equals", "spec.nodeName==n1", "{'spec':{'nodeName':'n1'}}", true},
    {"pods' spec.host reads spec.nodeName", "spec.host=n1", "{'spec':{'nodeName':'n1'}}", true},
    {"any pod IP matches status.podIPs", "status.podIPs=10.0.0.2",
     "{'status':{'podIPs':[{'ip':'10.0.0.1'},{'ip':'10.0.0.2'}]}}", true},
    {"an absent Go bool selects as false", "spec.hostNetwork=false", "{'spec':{}}", true},
    {"a JSON bool reads true", "spec.unschedulable=true", "{'spec':{'unschedulable':true}}", true},
    {"a missing field reads empty", "spec.nodeName=", "{'spec':{}}", true},
    {"event source is source.component", "source=kubelet", "{'source':{'component':'kubelet'}}",
     true},
    {"event source falls back to reportingComponent", "source=ctrl",
     "{'reportingComponent':'ctrl'}", true},
    {"comma is AND", "type=Opaque,metadata.namespace=ns",
     "{'type':'Opaque','metadata':{'namespace':'ns'}}", true},
    {"escaped comma is part of the value", "metadata.name=a\\,b", "{'metadata':{'name':'a,b'}}",
     true},
    {"numbers compare as decimal text", "involvedObject.resourceVersion=12",
     "{'involvedObject':{'resourceVersion':12}}", true},
    {"empty selector selects everything", "", "{}", true},
};

static void test_field_selector_reads_dotted_paths_and_aliases(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(field_match); i++) {
        kl_fieldsel *sel = NULL;
        if (kl_fieldsel_parse(field_match[i].sel, &sel) != 0)
            fail_msg("[%s] parse failed: %s", field_match[i].name, util_err_last());
        json_object *obj = J(field_match[i].obj);
        bool got = kl_fieldsel_match(sel, obj);
        if (got != field_match[i].want)
            fail_msg("[%s] match = %d, want %d", field_match[i].name, got, field_match[i].want);
        json_object_put(obj);
        kl_fieldsel_free(sel);
    }
}

/* ---- field selectors: supported fields ----------------------------------- */

static const struct {
    const char *name;
    const char *group, *resource;
    const char *sel;
    const char *want; /* NULL: accepted */
} field_check[] = {
    {"pods list their own fields", "", "pods", "spec.foo=x", "field label not supported: spec.foo"},
    {"pods accept spec.host", "", "pods", "spec.host=n", NULL},
    {"PVCs use the default message", "", "persistentvolumeclaims", "spec.volumeName=x",
     "\"spec.volumeName\" is not a known field selector: only \"metadata.name\", "
     "\"metadata.namespace\""},
    {"nodes have no namespace field", "", "nodes", "metadata.namespace=x",
     "field label not supported: metadata.namespace"},
    {"the default knows metadata.namespace even cluster-scoped", "", "persistentvolumes",
     "metadata.namespace=", NULL},
    {"cluster-scoped CRs have no namespace field", "snapshot.storage.k8s.io",
     "volumesnapshotcontents", "metadata.namespace=x",
     "field label not supported: metadata.namespace"},
    {"namespaced CRs have a namespace field", "snapshot.storage.k8s.io", "volumesnapshots",
     "metadata.namespace=x", NULL},
    {"core events list involvedObject fields", "", "events", "involvedObject.name=x", NULL},
    {"events.k8s.io events use the default", "events.k8s.io", "events", "involvedObject.name=x",
     "\"involvedObject.name\" is not a known field selector: only \"metadata.name\", "
     "\"metadata.namespace\""},
    {"secrets select by type", "", "secrets", "type=Opaque", NULL},
    {"terms are checked in sorted order", "", "pods", "zzz=1,aaa=2",
     "field label not supported: aaa"},
    {"leases know metadata.name", "coordination.k8s.io", "leases", "metadata.name=lock", NULL},
};

static void test_field_selector_check_uses_each_types_message(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(field_check); i++) {
        const kl_type *t = NULL;
        size_t n;
        const kl_type *all = kl_types(&n);
        for (size_t j = 0; j < n && t == NULL; j++)
            if (strcmp(all[j].group, field_check[i].group) == 0 &&
                strcmp(all[j].resource, field_check[i].resource) == 0)
                t = &all[j];
        assert_non_null(t);
        kl_fieldsel *sel = NULL;
        assert_int_equal(kl_fieldsel_parse(field_check[i].sel, &sel), 0);
        int rc = kl_fieldsel_check(sel, t);
        if (field_check[i].want == NULL) {
            if (rc != 0)
                fail_msg("[%s] rejected: %s", field_check[i].name, util_err_last());
        } else {
            if (rc != -EINVAL)
                fail_msg("[%s] rc = %d, want -EINVAL", field_check[i].name, rc);
            expect_str(field_check[i].name, "message", util_err_last(), field_check[i].want);
        }
        kl_fieldsel_free(sel);
    }
}

/* ---- field selectors: syntax errors ------------------------------------ */

static const struct {
    const char *name;
    const char *sel;
    const char *want;
} field_errors[] = {
    {"a term without operator", "a", "invalid selector: 'a'; can't understand 'a'"},
    {"a trailing backslash", "a=b\\", "invalid field selector: invalid escape sequence: \\"},
    {"an unknown escape", "a=b\\x", "invalid field selector: invalid escape sequence: \\x"},
    {"an unescaped equals in the value (Go prints the rune number)", "a=b=c",
     "invalid field selector: unescaped character in value: 61"},
};

static void test_field_selector_syntax_errors(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(field_errors); i++) {
        kl_fieldsel *sel = (kl_fieldsel *)&sel;
        int rc = kl_fieldsel_parse(field_errors[i].sel, &sel);
        if (rc != -EINVAL)
            fail_msg("[%s] rc = %d, want -EINVAL", field_errors[i].name, rc);
        assert_null(sel);
        expect_str(field_errors[i].name, "message", util_err_last(), field_errors[i].want);
    }
}

static void test_field_selector_name_is_the_equality_term(void **state)
{
    (void)state;
    static const struct {
        const char *sel, *want;
    } rows[] = {
        {"metadata.name=x,spec.nodeName=n", "x"},
        {"metadata.name==y", "y"},
        {"metadata.name!=x", NULL},
        {"spec.nodeName=n", NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        kl_fieldsel *sel = NULL;
        assert_int_equal(kl_fieldsel_parse(rows[i].sel, &sel), 0);
        expect_str(rows[i].sel, "name", kl_fieldsel_name(sel), rows[i].want);
        kl_fieldsel_free(sel);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_label_selector_matches_like_apimachinery),
        cmocka_unit_test(test_label_selector_syntax_errors_read_like_apimachinery),
        cmocka_unit_test(test_field_selector_reads_dotted_paths_and_aliases),
        cmocka_unit_test(test_field_selector_check_uses_each_types_message),
        cmocka_unit_test(test_field_selector_syntax_errors),
        cmocka_unit_test(test_field_selector_name_is_the_equality_term),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
