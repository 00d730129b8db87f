/*
 * Unit tests for the JSON accessor module (common/kobj): every getter on a
 * missing key, JSON null and each wrong type answers NULL/default rather
 * than crash inside json-c; setters refuse wrong-typed containers without
 * leaking (the ASan build checks the leaks); the patch builders' exact texts.
 *
 * JSON fixtures are written with ` for " so they stay readable; J() turns
 * them back.
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
#include "table.h"

/* ---- getters on hostile shapes ------------------------------------------------- */

/* Each row: an object, and what every getter must answer on it. */
static const struct getter_row {
    const char *name;
    const char *json;
    const char *key;
    bool is_obj, is_arr;
    const char *str;
    bool present; /* kobj_get non-NULL */
} getter_rows[] = {
    {"missing key", "{`x`:1}", "k", false, false, NULL, false},
    {"JSON null", "{`k`:null}", "k", false, false, NULL, false},
    {"string", "{`k`:`v`}", "k", false, false, "v", true},
    {"number where a string is expected", "{`k`:5}", "k", false, false, NULL, true},
    {"double", "{`k`:5.5}", "k", false, false, NULL, true},
    {"bool", "{`k`:true}", "k", false, false, NULL, true},
    {"array", "{`k`:[1]}", "k", false, true, NULL, true},
    {"object", "{`k`:{}}", "k", true, false, NULL, true},
    {"container is a string", "`k`", "k", false, false, NULL, false},
    {"container is an array", "[{`k`:1}]", "k", false, false, NULL, false},
    {"container is a number", "7", "k", false, false, NULL, false},
    {"container is null", NULL, "k", false, false, NULL, false},
    {"key is NULL", "{`k`:1}", NULL, false, false, NULL, false},
};

static void test_getters_answer_null_on_wrong_types(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(getter_rows); i++) {
        const struct getter_row *r = &getter_rows[i];
        json_object *o = J(r->json);
        if ((kobj_get(o, r->key) != NULL) != r->present)
            fail_msg("%s: kobj_get", r->name);
        if ((kobj_obj(o, r->key) != NULL) != r->is_obj)
            fail_msg("%s: kobj_obj", r->name);
        if ((kobj_arr(o, r->key) != NULL) != r->is_arr)
            fail_msg("%s: kobj_arr", r->name);
        expect_str(r->name, "kobj_str", kobj_str(o, r->key), r->str);
        expect_str(r->name, "kobj_path_str", kobj_path_str(o, r->key), r->str);
        json_object_put(o);
    }
}

static void test_typed_checks_type_and_null(void **state)
{
    (void)state;
    json_object *o = J("{`a`:1}");
    assert_ptr_equal(kobj_typed(o, json_type_object), o);
    assert_null(kobj_typed(o, json_type_array));
    assert_null(kobj_typed(NULL, json_type_object));
    json_object_put(o);
}

static const struct bool_row {
    const char *name, *json;
    bool dflt, want;
} bool_rows[] = {
    {"true", "{`b`:true}", false, true},
    {"false", "{`b`:false}", true, false},
    {"missing gives default", "{}", true, true},
    {"null gives default", "{`b`:null}", true, true},
    {"string `true` is not a bool", "{`b`:`true`}", false, false},
    {"number is not a bool", "{`b`:1}", false, false},
    {"container is an array", "[true]", true, true},
};

static void test_bool_defaults_on_wrong_types(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(bool_rows); i++) {
        json_object *o = J(bool_rows[i].json);
        if (kobj_bool(o, "b", bool_rows[i].dflt) != bool_rows[i].want)
            fail_msg("%s", bool_rows[i].name);
        json_object_put(o);
    }
}

static const struct int_row {
    const char *name, *json;
    int rc;
    int64_t want;
} int_rows[] = {
    {"int", "{`n`:42}", 0, 42},
    {"negative int", "{`n`:-7}", 0, -7},
    {"int64 max", "{`n`:9223372036854775807}", 0, INT64_MAX},
    {"above int64 max", "{`n`:9223372036854775808}", -EINVAL, 0},
    {"integral double", "{`n`:3.0}", 0, 3},
    {"fractional double", "{`n`:3.5}", -EINVAL, 0},
    {"double out of range", "{`n`:1e300}", -EINVAL, 0},
    {"double at 2^63", "{`n`:9223372036854775808.0}", -EINVAL, 0},
    {"string number", "{`n`:`5`}", -EINVAL, 0},
    {"bool", "{`n`:true}", -EINVAL, 0},
    {"object", "{`n`:{}}", -EINVAL, 0},
    {"missing", "{}", -ENOENT, 0},
    {"null", "{`n`:null}", -ENOENT, 0},
    {"container is a string", "`n`", -ENOENT, 0},
};

static void test_int64_accepts_ints_and_integral_doubles(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(int_rows); i++) {
        const struct int_row *r = &int_rows[i];
        json_object *o = J(r->json);
        int64_t got = -12345;
        int rc = kobj_int64(o, "n", &got);
        if (rc != r->rc)
            fail_msg("%s: rc %d, want %d", r->name, rc, r->rc);
        if (rc == 0 && got != r->want)
            fail_msg("%s: got %lld", r->name, (long long)got);
        if (rc != 0 && got != -12345)
            fail_msg("%s: out written on failure", r->name);
        json_object_put(o);
    }
}

static const struct path_row {
    const char *name, *json, *path, *want;
    bool present;
} path_rows[] = {
    {"three steps", "{`spec`:{`csi`:{`volumeHandle`:`h`}}}", "spec.csi.volumeHandle", "h", true},
    {"one step", "{`a`:`x`}", "a", "x", true},
    {"last step any type", "{`a`:{`b`:[1]}}", "a.b", NULL, true},
    {"middle step a string", "{`spec`:{`csi`:`h`}}", "spec.csi.volumeHandle", NULL, false},
    {"middle step an array", "{`spec`:[{`csi`:1}]}", "spec.csi", NULL, false},
    {"middle step a number", "{`spec`:3}", "spec.csi", NULL, false},
    {"middle step null", "{`spec`:null}", "spec.csi", NULL, false},
    {"middle step missing", "{}", "spec.csi", NULL, false},
    {"last step null", "{`a`:{`b`:null}}", "a.b", NULL, false},
    {"root an array", "[1]", "a", NULL, false},
    {"path NULL", "{`a`:1}", NULL, NULL, false},
};

static void test_path_walks_object_members_only(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(path_rows); i++) {
        const struct path_row *r = &path_rows[i];
        json_object *o = J(r->json);
        if ((kobj_path(o, r->path) != NULL) != r->present)
            fail_msg("%s: kobj_path", r->name);
        expect_str(r->name, "kobj_path_str", kobj_path_str(o, r->path), r->want);
        json_object_put(o);
    }
}

static void test_array_accessors_check_type_and_range(void **state)
{
    (void)state;
    json_object *a = J("[`a`,null,3,{`x`:1}]");
    assert_int_equal(kobj_len(a), 4);
    expect_str("string item", "kobj_str_at", kobj_str_at(a, 0), "a");
    assert_null(kobj_at(a, 1));
    assert_null(kobj_str_at(a, 1));
    assert_non_null(kobj_at(a, 2));
    assert_null(kobj_str_at(a, 2));
    assert_null(kobj_str_at(a, 3));
    assert_null(kobj_at(a, 4));
    assert_null(kobj_str_at(a, (size_t)-1));
    json_object *o = J("{`0`:`a`}");
    assert_int_equal(kobj_len(o), 0);
    assert_null(kobj_at(o, 0));
    assert_null(kobj_str_at(o, 0));
    assert_int_equal(kobj_len(NULL), 0);
    assert_null(kobj_at(NULL, 0));
    json_object_put(a);
    json_object_put(o);
}

/* ---- metadata ------------------------------------------------------------------ */

#define S10  "aaaaaaaaaa"
#define S63  S10 S10 S10 S10 S10 S10 "aaa"
#define S64  S63 "a"
#define S253 S63 S63 S63 S63 "a"
#define S254 S253 "a"

static const struct meta_row {
    const char *name, *json;
    const char *obj_name, *ns, *uid, *rv, *ann, *label;
    bool deleting;
} meta_rows[] = {
    {"well formed",
     "{`metadata`:{`name`:`n`,`namespace`:`ns`,`uid`:`u`,`resourceVersion`:`5`,"
     "`annotations`:{`a`:`av`},`labels`:{`l`:`lv`},`deletionTimestamp`:`2024-01-01T00:00:00Z`}}",
     "n", "ns", "u", "5", "av", "lv", true},
    {"metadata a string", "{`metadata`:`x`}", NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"metadata an array", "{`metadata`:[{`name`:`n`}]}", NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"metadata a number", "{`metadata`:1}", NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"metadata null", "{`metadata`:null}", NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"object a string", "`metadata`", NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"fields of wrong types",
     "{`metadata`:{`name`:1,`namespace`:{},`uid`:[],`resourceVersion`:5,"
     "`annotations`:`a`,`labels`:[`l`],`deletionTimestamp`:null}}",
     NULL, NULL, NULL, NULL, NULL, NULL, false},
    {"a name over 253 bytes and a namespace over 63 are no names",
     "{`metadata`:{`name`:`" S254 "`,`namespace`:`" S64 "`,`uid`:`u`}}", NULL, NULL, "u", NULL,
     NULL, NULL, false},
    {"a name of 253 bytes and a namespace of 63 are names",
     "{`metadata`:{`name`:`" S253 "`,`namespace`:`" S63 "`}}", S253, S63, NULL, NULL, NULL, NULL,
     false},
    {"annotation values of wrong types",
     "{`metadata`:{`annotations`:{`a`:1},`labels`:{`l`:null},`deletionTimestamp`:0}}", NULL, NULL,
     NULL, NULL, NULL, NULL, true},
};

static void test_metadata_getters_on_hostile_metadata(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(meta_rows); i++) {
        const struct meta_row *r = &meta_rows[i];
        json_object *o = J(r->json);
        expect_str(r->name, "kobj_name", kobj_name(o), r->obj_name);
        expect_str(r->name, "kobj_namespace", kobj_namespace(o), r->ns);
        expect_str(r->name, "kobj_uid", kobj_uid(o), r->uid);
        expect_str(r->name, "kobj_rv", kobj_rv(o), r->rv);
        expect_str(r->name, "kobj_meta_str", kobj_meta_str(o, "uid"), r->uid);
        expect_str(r->name, "kobj_annotation", kobj_annotation(o, "a"), r->ann);
        expect_str(r->name, "kobj_label", kobj_label(o, "l"), r->label);
        if (kobj_deleting(o) != r->deleting)
            fail_msg("%s: kobj_deleting", r->name);
        json_object_put(o);
    }
}

static const struct fin_row {
    const char *name, *json;
    int index;
} fin_rows[] = {
    {"first", "{`metadata`:{`finalizers`:[`f`,`g`]}}", 0},
    {"second", "{`metadata`:{`finalizers`:[`g`,`f`]}}", 1},
    {"absent", "{`metadata`:{`finalizers`:[`g`]}}", -1},
    {"no list", "{`metadata`:{}}", -1},
    {"list null", "{`metadata`:{`finalizers`:null}}", -1},
    {"list an object", "{`metadata`:{`finalizers`:{`f`:`f`}}}", -1},
    {"list a string", "{`metadata`:{`finalizers`:`f`}}", -1},
    {"null, number, object items skipped", "{`metadata`:{`finalizers`:[null,1,{`f`:1},[],`f`]}}",
     4},
    {"metadata a string", "{`metadata`:`f`}", -1},
};

static void test_finalizer_index_skips_non_string_items(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(fin_rows); i++) {
        json_object *o = J(fin_rows[i].json);
        int got = kobj_finalizer_index(o, "f");
        if (got != fin_rows[i].index)
            fail_msg("%s: index %d, want %d", fin_rows[i].name, got, fin_rows[i].index);
        if (kobj_has_finalizer(o, "f") != (fin_rows[i].index >= 0))
            fail_msg("%s: has_finalizer", fin_rows[i].name);
        json_object_put(o);
    }
    assert_int_equal(kobj_finalizer_index(NULL, "f"), -1);
}

/* ---- setters ------------------------------------------------------------------- */

static const struct set_row {
    const char *name, *json;
    int rc;
    const char *after; /* the object afterwards */
} set_ann_rows[] = {
    {"creates metadata and map", "{}", 0, "{`metadata`:{`annotations`:{`k`:`v`}}}"},
    {"null metadata replaced", "{`metadata`:null}", 0, "{`metadata`:{`annotations`:{`k`:`v`}}}"},
    {"overwrites value", "{`metadata`:{`annotations`:{`k`:1}}}", 0,
     "{`metadata`:{`annotations`:{`k`:`v`}}}"},
    {"metadata a string", "{`metadata`:`x`}", -EINVAL, "{`metadata`:`x`}"},
    {"metadata an array", "{`metadata`:[]}", -EINVAL, "{`metadata`:[]}"},
    {"map a string", "{`metadata`:{`annotations`:`x`}}", -EINVAL,
     "{`metadata`:{`annotations`:`x`}}"},
    {"map an array", "{`metadata`:{`annotations`:[1]}}", -EINVAL,
     "{`metadata`:{`annotations`:[1]}}"},
    {"object an array", "[]", -EINVAL, "[]"},
};

static void test_set_annotation_refuses_wrong_typed_containers(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(set_ann_rows); i++) {
        const struct set_row *r = &set_ann_rows[i];
        json_object *o = J(r->json);
        int rc = kobj_set_annotation(o, "k", "v");
        if (rc != r->rc)
            fail_msg("%s: rc %d, want %d", r->name, rc, r->rc);
        expect_json(r->name, o, r->after);
        json_object_put(o);
    }
    assert_int_equal(kobj_set_annotation(NULL, "k", "v"), -EINVAL);
}

static void test_set_label_writes_labels_map(void **state)
{
    (void)state;
    json_object *o = J("{`metadata`:{`name`:`n`}}");
    assert_int_equal(kobj_set_label(o, "a/b", "c"), 0);
    expect_json("label", o, "{`metadata`:{`name`:`n`,`labels`:{`a/b`:`c`}}}");
    expect_str("label read back", "kobj_label", kobj_label(o, "a/b"), "c");
    json_object_put(o);
    o = J("{`metadata`:{`labels`:7}}");
    assert_int_equal(kobj_set_label(o, "a", "c"), -EINVAL);
    json_object_put(o);
}

static void test_set_releases_value_when_refused(void **state)
{
    (void)state;
    /* Under ASan a leak of the refused value fails the suite. */
    json_object *arr = J("[1]");
    assert_int_equal(kobj_set(arr, "k", json_object_new_string("v")), -EINVAL);
    assert_int_equal(kobj_set(NULL, "k", json_object_new_object()), -EINVAL);
    json_object *o = J("{}");
    assert_int_equal(kobj_set(o, NULL, json_object_new_int(1)), -EINVAL);
    assert_int_equal(kobj_set(o, "k", json_object_new_int(1)), 0);
    assert_int_equal(kobj_set_str(o, "s", "v"), 0);
    assert_int_equal(kobj_set_str(o, "t", NULL), -EINVAL);
    assert_int_equal(kobj_set_str(arr, "s", "v"), -EINVAL);
    expect_json("after sets", o, "{`k`:1,`s`:`v`}");
    kobj_del(o, "k");
    kobj_del(o, "missing");
    kobj_del(arr, "k");
    kobj_del(NULL, "k");
    expect_json("after del", o, "{`s`:`v`}");
    json_object_put(arr);
    json_object_put(o);
}

static void test_ensure_obj_creates_or_refuses(void **state)
{
    (void)state;
    json_object *o = J("{`a`:{`x`:1},`b`:`s`,`c`:null,`d`:[]}");
    json_object *a = kobj_ensure_obj(o, "a");
    assert_ptr_equal(a, kobj_obj(o, "a"));
    assert_null(kobj_ensure_obj(o, "b"));
    assert_null(kobj_ensure_obj(o, "d"));
    assert_non_null(kobj_ensure_obj(o, "c"));
    assert_non_null(kobj_ensure_obj(o, "e"));
    expect_json("ensured", o, "{`a`:{`x`:1},`b`:`s`,`c`:{},`d`:[],`e`:{}}");
    json_object *s = J("`str`");
    assert_null(kobj_ensure_obj(s, "a"));
    assert_null(kobj_ensure_obj(NULL, "a"));
    json_object_put(s);
    json_object_put(o);
}

/* ---- patches ------------------------------------------------------------------- */

static const struct patch_row {
    const char *name, *json;
    bool test_rv;
    const char *want; /* NULL: refused */
} add_rows[] = {
    {"list present, rv", "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[`x`]}}", true,
     "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`5`},"
     "{`op`:`add`,`path`:`/metadata/finalizers/-`,`value`:`f`}]"},
    {"list present, no rv test", "{`metadata`:{`finalizers`:[]}}", false,
     "[{`op`:`add`,`path`:`/metadata/finalizers/-`,`value`:`f`}]"},
    {"list absent, rv", "{`metadata`:{`resourceVersion`:`5`}}", true,
     "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`5`},"
     "{`op`:`add`,`path`:`/metadata/finalizers`,`value`:[`f`]}]"},
    {"list absent, no rv test", "{`metadata`:{}}", false,
     "[{`op`:`test`,`path`:`/metadata/finalizers`,`value`:null},"
     "{`op`:`add`,`path`:`/metadata/finalizers`,`value`:[`f`]}]"},
    {"list null, no rv test", "{`metadata`:{`finalizers`:null}}", false,
     "[{`op`:`test`,`path`:`/metadata/finalizers`,`value`:null},"
     "{`op`:`add`,`path`:`/metadata/finalizers`,`value`:[`f`]}]"},
    {"list null, rv", "{`metadata`:{`finalizers`:null,`resourceVersion`:`9`}}", true,
     "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`9`},"
     "{`op`:`add`,`path`:`/metadata/finalizers`,`value`:[`f`]}]"},
    {"list an object", "{`metadata`:{`finalizers`:{},`resourceVersion`:`5`}}", true, NULL},
    {"list a string", "{`metadata`:{`finalizers`:`f`}}", false, NULL},
    {"rv wanted but missing", "{`metadata`:{`finalizers`:[]}}", true, NULL},
    {"rv wanted but a number", "{`metadata`:{`resourceVersion`:5}}", true, NULL},
    {"metadata a string", "{`metadata`:`m`}", false, NULL},
    {"metadata missing", "{}", false, NULL},
};

static void test_patch_add_finalizer_texts(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(add_rows); i++) {
        const struct patch_row *r = &add_rows[i];
        json_object *o = J(r->json);
        char *got = kobj_patch_add_finalizer(o, "f", r->test_rv);
        expect_text(r->name, NULL, got, r->want);
        free(got);
        json_object_put(o);
    }
}

static void test_patch_values_are_escaped(void **state)
{
    (void)state;
    json_object *o = J("{`metadata`:{`resourceVersion`:`1\\`2`,`finalizers`:[]}}");
    char *got = kobj_patch_add_finalizer(o, "a\"b\\c", true);
    expect_str("add", NULL, got,
               "[{\"op\":\"test\",\"path\":\"/metadata/resourceVersion\",\"value\":\"1\\\"2\"},"
               "{\"op\":\"add\",\"path\":\"/metadata/finalizers/-\",\"value\":\"a\\\"b\\\\c\"}]");
    free(got);
    got = kobj_patch_remove_finalizer_at(2, "a\"b\\c");
    expect_str("remove", NULL, got,
               "[{\"op\":\"test\",\"path\":\"/metadata/finalizers/2\",\"value\":\"a\\\"b\\\\c\"},"
               "{\"op\":\"remove\",\"path\":\"/metadata/finalizers/2\"}]");
    free(got);
    /* The texts parse back to the very values. */
    got = kobj_patch_add_finalizer(o, "q\"\\", false);
    json_object *p = json_tokener_parse(got);
    expect_str("round trip", "kobj_str", kobj_str(kobj_at(p, 0), "value"), "q\"\\");
    json_object_put(p);
    free(got);
    json_object_put(o);
}

static void test_patch_remove_finalizer(void **state)
{
    (void)state;
    json_object *o = J("{`metadata`:{`finalizers`:[1,`g`,`f`]}}");
    char *got = kobj_patch_remove_finalizer(o, "f");
    expect_text("remove f", NULL, got,
                "[{`op`:`test`,`path`:`/metadata/finalizers/2`,`value`:`f`},"
                "{`op`:`remove`,`path`:`/metadata/finalizers/2`}]");
    free(got);
    assert_null(kobj_patch_remove_finalizer(o, "h"));
    assert_null(kobj_patch_remove_finalizer_at(-1, "f"));
    assert_null(kobj_patch_remove_finalizer_at(0, NULL));
    json_object_put(o);
}

static const struct patch_row ann_rows[] = {
    {"map present, rv", "{`metadata`:{`resourceVersion`:`5`,`annotations`:{`x`:`y`}}}", true,
     "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`5`},"
     "{`op`:`add`,`path`:`/metadata/annotations/a.io~1k~0e`,`value`:`v\\\\`}]"},
    {"map absent, rv", "{`metadata`:{`resourceVersion`:`5`}}", true,
     "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`5`},"
     "{`op`:`add`,`path`:`/metadata/annotations`,`value`:{`a.io/k~e`:`v\\\\`}}]"},
    {"map null, no rv test", "{`metadata`:{`annotations`:null}}", false,
     "[{`op`:`add`,`path`:`/metadata/annotations`,`value`:{`a.io/k~e`:`v\\\\`}}]"},
    {"map a string", "{`metadata`:{`annotations`:`x`,`resourceVersion`:`5`}}", true, NULL},
    {"map an array", "{`metadata`:{`annotations`:[]}}", false, NULL},
    {"rv wanted but missing", "{`metadata`:{}}", true, NULL},
    {"metadata an array", "{`metadata`:[]}", false, NULL},
};

static void test_patch_set_annotation_texts(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(ann_rows); i++) {
        const struct patch_row *r = &ann_rows[i];
        json_object *o = J(r->json);
        char *got = kobj_patch_set_annotation(o, "a.io/k~e", "v\\", r->test_rv);
        expect_text(r->name, NULL, got, r->want);
        free(got);
        json_object_put(o);
    }
}

static const struct esc_row {
    const char *in, *want;
} esc_rows[] = {
    {"a/b~c", "a~1b~0c"},
    {"", ""},
    {"plain", "plain"},
    {"~/", "~0~1"},
    {"example.com/key", "example.com~1key"},
};

static void test_pointer_escape(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(esc_rows); i++) {
        char *got = kobj_pointer_escape(esc_rows[i].in);
        expect_str(esc_rows[i].in, NULL, got, esc_rows[i].want);
        free(got);
    }
    assert_null(kobj_pointer_escape(NULL));
}

/* ---- field types ------------------------------------------------------------ */

static const char *const check_rules[] = {
    "s provisioner", "m parameters", "b allowVolumeExpansion", "l mountOptions", "o spec",
    "a spec.drivers", "s spec.drivers[].name", "l spec.drivers[].keys", "s deep.a[].b[].c",
    /* steps shared with the rule before */
    "o spec.csi", "s spec.csi.driver", "m spec.csi.attrs", "s spec.csix", "s spec.cs",
    "o spec.csi.x.y", "s spec.csi.x.y.z", "s spec.csi.xy", "n name", "t at", NULL};

static const struct check_row {
    const char *json;
    const char *bad; /* the path named, or NULL: accepted */
} check_rows[] = {
    {"{}", NULL},
    {"{`provisioner`:`p`,`parameters`:{`a`:`b`},`allowVolumeExpansion`:true,`mountOptions`:[`ro`]}",
     NULL},
    {"{`provisioner`:null,`parameters`:null,`spec`:null,`mountOptions`:[null]}", NULL},
    {"{`provisioner`:1}", "provisioner"},
    {"{`provisioner`:[`p`]}", "provisioner"},
    {"{`parameters`:`x`}", "parameters"},
    {"{`parameters`:{`a`:1}}", "parameters"},
    {"{`allowVolumeExpansion`:`true`}", "allowVolumeExpansion"},
    {"{`mountOptions`:`ro`}", "mountOptions"},
    {"{`mountOptions`:[`ro`,2]}", "mountOptions"},
    {"{`spec`:`x`}", "spec"},
    {"{`spec`:{`drivers`:{}}}", "spec.drivers"},
    {"{`spec`:{`drivers`:[{`name`:`d`,`keys`:[`k`]},{`name`:`e`}]}}", NULL},
    {"{`spec`:{`drivers`:[{`name`:`d`},{`name`:7}]}}", "spec.drivers[].name"},
    {"{`spec`:{`drivers`:[{`name`:`d`,`keys`:[1]}]}}", "spec.drivers[].keys"},
    {"{`spec`:{`drivers`:[`not an object`]}}", NULL}, /* an item's own type: no rule */
    {"{`deep`:{`a`:[{`b`:[{`c`:`x`},{}]}]}}", NULL},
    {"{`deep`:{`a`:[{`b`:[{`c`:`x`},{`c`:false}]}]}}", "deep.a[].b[].c"},
    {"{`deep`:{`a`:[{`b`:{}}]}}", "deep.a[].b[].c"},
    {"{`spec`:{`csi`:{`driver`:`d`,`attrs`:{`k`:`v`},`x`:{`y`:{`z`:`z`}},`xy`:`s`},`csix`:`s`,`cs`:"
     "`s`}}",
     NULL},
    {"{`spec`:{`csi`:`x`}}", "spec.csi"},
    {"{`spec`:{`csi`:{`driver`:1}}}", "spec.csi.driver"},
    {"{`spec`:{`csi`:{`driver`:`d`,`attrs`:{`k`:2}}}}", "spec.csi.attrs"},
    {"{`spec`:{`csi`:{`driver`:`d`},`csix`:{}}}", "spec.csix"},
    {"{`spec`:{`csi`:{},`cs`:[]}}", "spec.cs"},
    {"{`spec`:{`csi`:{`x`:{`y`:[]}}}}", "spec.csi.x.y"},
    {"{`spec`:{`csi`:{`x`:{`y`:{`z`:{}}}}}}", "spec.csi.x.y.z"},
    {"{`spec`:{`csi`:{`x`:{`y`:{`z`:`z`}},`xy`:{}}}}", "spec.csi.xy"},
    {"{`spec`:{`csi`:{`x`:null,`xy`:true}}}", "spec.csi.xy"},
    {"{`name`:`bucket-1`}", NULL},
    {"{`name`:``}", NULL},
    {"{`name`:null}", NULL},
    {"{`name`:7}", "name"},
    {"{`name`:[`n`]}", "name"},
    {"{`at`:`2026-11-27T05:07:11Z`}", NULL},
    {"{`at`:`2026-11-27T05:07:11.123456Z`}", NULL},
    {"{`at`:`2026-11-27T05:07:11+01:00`}", NULL},
    {"{`at`:null}", NULL},
    {"{`at`:``}", "at"},
    {"{`at`:`hostile`}", "at"},
    {"{`at`:`2026-11-27T05:07:11`}", "at"},
    {"{`at`:`2026-11-27T05:07:11.Z`}", "at"},
    {"{`at`:`2026-11-27T05:07:11Zx`}", "at"},
    {"{`at`:`2026-11-27 05:07:11Z`}", "at"},
    {"{`at`:`2026-11-27T05:07:11+0100`}", "at"},
    {"{`at`:7}", "at"},
};

static void test_check_field_types(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(check_rows); i++) {
        json_object *o = J(check_rows[i].json);
        int rc = kobj_check(o, check_rules);
        if (!check_rows[i].bad && rc != 0)
            fail_msg("row %zu %s: refused (%s)", i, check_rows[i].json, util_err_last());
        if (check_rows[i].bad) {
            if (rc != -EINVAL)
                fail_msg("row %zu %s: accepted", i, check_rows[i].json);
            if (strncmp(util_err_last(), check_rows[i].bad, strlen(check_rows[i].bad)) != 0)
                fail_msg("row %zu: message %s, want %s", i, util_err_last(), check_rows[i].bad);
        }
        json_object_put(o);
    }
    /* A name of 253 bytes is the longest an API server stores; one byte
     * more is a corrupted answer. */
    static const char *const name_rule[] = {"n name", NULL};
    for (size_t len = 252; len <= 254; len++) {
        char *name = util_calloc(len + 1, 1);
        memset(name, 'a', len);
        json_object *n = json_object_new_object();
        json_object_object_add(n, "name", json_object_new_string(name));
        assert_int_equal(kobj_check(n, name_rule), len <= 253 ? 0 : -EINVAL);
        json_object_put(n);
        free(name);
    }
    /* A text of 1.5 MiB is the longest an object can hold; one byte more
     * in a string, a map's value or a list's item is a lie of the right
     * type (a CSINode's node id of 2 MiB stayed cached and went to the
     * driver with every attach). */
    static const char *const text_rules[] = {"s id", "m attrs", "l keys", NULL};
    static const struct {
        const char *where; /* id, attrs or keys */
        size_t len;
        int want;
    } text_rows[] = {
        {"id", (size_t)3 << 19, 0},
        {"id", ((size_t)3 << 19) + 1, -EINVAL},
        {"id", (size_t)2 << 20, -EINVAL},
        {"attrs", (size_t)3 << 19, 0},
        {"attrs", ((size_t)3 << 19) + 1, -EINVAL},
        {"keys", (size_t)3 << 19, 0},
        {"keys", ((size_t)3 << 19) + 1, -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(text_rows); i++) {
        char *text = util_calloc(text_rows[i].len + 1, 1);
        memset(text, 'h', text_rows[i].len);
        json_object *v = json_object_new_string(text), *t = json_object_new_object();
        if (strcmp(text_rows[i].where, "attrs") == 0) {
            json_object *m = json_object_new_object();
            json_object_object_add(m, "k", v);
            v = m;
        } else if (strcmp(text_rows[i].where, "keys") == 0) {
            json_object *l = json_object_new_array();
            json_object_array_add(l, json_object_new_string("short"));
            json_object_array_add(l, v);
            v = l;
        }
        json_object_object_add(t, text_rows[i].where, v);
        int rc = kobj_check(t, text_rules);
        if (rc != text_rows[i].want)
            fail_msg("text row %zu (%s, %zu bytes): %d, want %d", i, text_rows[i].where,
                     text_rows[i].len, rc, text_rows[i].want);
        json_object_put(t);
        free(text);
    }
    /* A required string: missing, null or on a missing parent fails. */
    static const char *const req_rule[] = {"r spec.req.storage", NULL};
    static const struct {
        const char *json;
        int want;
    } req_rows[] = {
        {"{`spec`:{`req`:{`storage`:`1Gi`}}}", 0},
        {"{`spec`:{`req`:{}}}", -EINVAL},
        {"{`spec`:{`req`:{`storage`:null}}}", -EINVAL},
        {"{`spec`:{}}", -EINVAL},
        {"{}", -EINVAL},
        {"{`spec`:{`req`:{`storage`:7}}}", -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(req_rows); i++) {
        json_object *r = J(req_rows[i].json);
        if (kobj_check(r, req_rule) != req_rows[i].want)
            fail_msg("required row %zu %s: want %d", i, req_rows[i].json, req_rows[i].want);
        json_object_put(r);
    }
    /* M: a map that is never null, nor its values (an API server omits an
     * empty omitempty map); missing passes. */
    static const char *const never_null_rule[] = {"M status.st", NULL};
    static const struct {
        const char *json;
        int want;
    } never_null_rows[] = {
        {"{`status`:{`st`:{`storage`:`NodeResizePending`}}}", 0},
        {"{`status`:{`st`:{}}}", 0},
        {"{`status`:{}}", 0},
        {"{}", 0},
        {"{`status`:null}", 0},
        {"{`status`:{`st`:null}}", -EINVAL},
        {"{`status`:{`st`:{`storage`:null}}}", -EINVAL},
        {"{`status`:{`st`:`hostile`}}", -EINVAL},
        {"{`status`:{`st`:{`storage`:7}}}", -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(never_null_rows); i++) {
        json_object *r = J(never_null_rows[i].json);
        if (kobj_check(r, never_null_rule) != never_null_rows[i].want)
            fail_msg("never-null row %zu %s: want %d", i, never_null_rows[i].json,
                     never_null_rows[i].want);
        json_object_put(r);
    }
    /* No rules, or an object that is not one: nothing to refuse. */
    json_object *o = J("{`provisioner`:1}");
    assert_int_equal(kobj_check(o, NULL), 0);
    json_object_put(o);
    o = J("[1]");
    assert_int_equal(kobj_check(o, check_rules), 0);
    json_object_put(o);
}

static void free_key_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
}

/* A table a burst grew shrinks to fit what it holds, keeps every entry (and
 * its free function), and is left alone when it is still well used. */
static void test_table_shrink(void **state)
{
    (void)state;
    static const struct {
        int grow_to, keep, min_size, want_size;
    } rows[] = {
        {3000, 0, 64, 64},      /* emptied: back to its minimum */
        {3000, 10, 64, 64},     /* a few left */
        {3000, 40, 64, 128},    /* kept at most half full */
        {3000, 100, 16, 256},   /* min below the fit */
        {3000, 1500, 64, 4096}, /* under a quarter used: halved */
        {3000, 3000, 64, 8192}, /* well used: left as it is */
        {100, 0, 1024, 1024},   /* never grew past its minimum */
        {10, 0, 4, 16},         /* never below 16 */
    };
    static int vals[3000]; /* each entry's value points at its own slot */
    for (size_t r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        struct lh_table *t = lh_kchar_table_new(rows[r].min_size, free_key_entry);
        char k[32];
        for (int i = 0; i < rows[r].grow_to; i++) {
            snprintf(k, sizeof k, "key-%d", i);
            assert_int_equal(lh_table_insert(t, strdup(k), &vals[i]), 0);
        }
        int grown = t->size;
        for (int i = rows[r].keep; i < rows[r].grow_to; i++) {
            snprintf(k, sizeof k, "key-%d", i);
            assert_int_equal(lh_table_delete(t, k), 0);
        }
        kobj_table_shrink(t, rows[r].min_size);
        int want = rows[r].want_size < grown ? rows[r].want_size : grown;
        if (t->size != want)
            fail_msg("row %zu: size %d, want %d (grown to %d)", r, t->size, want, grown);
        assert_int_equal(t->count, rows[r].keep);
        for (int i = 0; i < rows[r].keep; i++) {
            snprintf(k, sizeof k, "key-%d", i);
            void *v = NULL;
            if (!lh_table_lookup_ex(t, k, &v) || v != &vals[i])
                fail_msg("row %zu: %s lost", r, k);
        }
        /* Still a working table: it grows again, and frees its keys. */
        for (int i = 0; i < 200; i++) {
            snprintf(k, sizeof k, "again-%d", i);
            assert_int_equal(lh_table_insert(t, strdup(k), NULL), 0);
        }
        assert_int_equal(t->count, rows[r].keep + 200);
        lh_table_free(t);
    }
    kobj_table_shrink(NULL, 64);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_getters_answer_null_on_wrong_types),
        cmocka_unit_test(test_typed_checks_type_and_null),
        cmocka_unit_test(test_bool_defaults_on_wrong_types),
        cmocka_unit_test(test_int64_accepts_ints_and_integral_doubles),
        cmocka_unit_test(test_path_walks_object_members_only),
        cmocka_unit_test(test_array_accessors_check_type_and_range),
        cmocka_unit_test(test_metadata_getters_on_hostile_metadata),
        cmocka_unit_test(test_finalizer_index_skips_non_string_items),
        cmocka_unit_test(test_set_annotation_refuses_wrong_typed_containers),
        cmocka_unit_test(test_set_label_writes_labels_map),
        cmocka_unit_test(test_set_releases_value_when_refused),
        cmocka_unit_test(test_ensure_obj_creates_or_refuses),
        cmocka_unit_test(test_patch_add_finalizer_texts),
        cmocka_unit_test(test_patch_values_are_escaped),
        cmocka_unit_test(test_patch_remove_finalizer),
        cmocka_unit_test(test_patch_set_annotation_texts),
        cmocka_unit_test(test_pointer_escape),
        cmocka_unit_test(test_check_field_types),
        cmocka_unit_test(test_table_shrink),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
