/*
 * kube-lite patch tests: RFC 7386 merge patch (the RFC's appendix), RFC 6902
 * JSON patch (every op, the RFC's appendix A, 400 vs 422 error classes) and
 * strategic merge patch as apimachinery applies it to built-in types.
 *
 * Table-driven: one row per rule, {target, patch, result or error}, with
 * JSON written using ' for " to stay readable. Results compare by semantic
 * JSON equality; every row also checks that target and patch are unchanged.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

typedef struct row {
    const char *name;
    const char *target;
    const char *patch;
    const char *want; /* the result, when err is 0 */
    int err;
} row;

/* ---- helpers ------------------------------------------------------------ */

/* The table's JSON with ' turned into ". */
static json_object *parse(const char *name, const char *text)
{
    char *s = strdup(text);
    enum json_tokener_error e = json_tokener_success;

    assert_non_null(s);
    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_object *o = json_tokener_parse_verbose(s, &e);
    if (e != json_tokener_success)
        fail_msg("[%s] bad JSON in the table: %s", name, s);
    free(s);
    return o;
}

/* Semantic equality: numbers by value, object members in any order. */
static bool same(const json_object *a, const json_object *b)
{
    enum json_type ta = json_object_get_type(a), tb = json_object_get_type(b);
    bool na = ta == json_type_int || ta == json_type_double;
    bool nb = tb == json_type_int || tb == json_type_double;

    if (na && nb)
        return json_object_get_double(a) == json_object_get_double(b);
    if (ta != tb)
        return false;
    switch (ta) {
    case json_type_null:
        return true;
    case json_type_boolean:
        return json_object_get_boolean(a) == json_object_get_boolean(b);
    case json_type_string:
        return strcmp(json_object_get_string((json_object *)a),
                      json_object_get_string((json_object *)b)) == 0;
    case json_type_array:
        if (json_object_array_length(a) != json_object_array_length(b))
            return false;
        for (size_t i = 0; i < json_object_array_length(a); i++)
            if (!same(json_object_array_get_idx(a, i), json_object_array_get_idx(b, i)))
                return false;
        return true;
    case json_type_object: {
        struct json_object_iter it;
        if (json_object_object_length(a) != json_object_object_length(b))
            return false;
        json_object_object_foreachC(a, it)
        {
            json_object *v = NULL;
            if (!json_object_object_get_ex(b, it.key, &v) || !same(it.val, v))
                return false;
        }
        return true;
    }
    default:
        return false;
    }
}

/* True when a key starting with '$' is anywhere in v. */
static bool has_directive(const json_object *v)
{
    if (json_object_is_type(v, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(v); i++)
            if (has_directive(json_object_array_get_idx(v, i)))
                return true;
    } else if (json_object_is_type(v, json_type_object)) {
        struct json_object_iter it;
        json_object_object_foreachC(v, it)
        {
            if (it.key[0] == '$' || has_directive(it.val))
                return true;
        }
    }
    return false;
}

static char *text_of(json_object *v)
{
    char *s = strdup(json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN));
    assert_non_null(s);
    return s;
}

typedef int (*patch_fn)(const json_object *t, const json_object *p, const kl_merge_key *keys,
                        size_t n_keys, json_object **out);

static int do_merge(const json_object *t, const json_object *p, const kl_merge_key *keys,
                    size_t n_keys, json_object **out)
{
    (void)keys;
    (void)n_keys;
    return kl_merge_patch(t, p, out);
}

static int do_json(const json_object *t, const json_object *p, const kl_merge_key *keys,
                   size_t n_keys, json_object **out)
{
    (void)keys;
    (void)n_keys;
    return kl_json_patch(t, p, out);
}

static void run_row(const row *r, patch_fn fn, const kl_merge_key *keys, size_t n_keys)
{
    json_object *target = parse(r->name, r->target);
    json_object *patch = parse(r->name, r->patch);
    char *target_before = text_of(target), *patch_before = text_of(patch);
    json_object *out = (json_object *)&out; /* must be overwritten */

    util_err_clear();
    int rc = fn(target, patch, keys, n_keys, &out);

    if (r->err != 0) {
        if (rc != r->err)
            fail_msg("[%s] got rc %d (%s), want %d", r->name, rc, util_err_last(), r->err);
        if (out != NULL)
            fail_msg("[%s] *out must be NULL on error", r->name);
        if (util_err_last()[0] == '\0')
            fail_msg("[%s] no error message", r->name);
    } else {
        if (rc != 0)
            fail_msg("[%s] got rc %d (%s), want a result", r->name, rc, util_err_last());
        json_object *want = parse(r->name, r->want);
        if (!same(out, want))
            fail_msg("[%s]\n  got  %s\n  want %s", r->name,
                     json_object_to_json_string_ext(out, JSON_C_TO_STRING_PLAIN), r->want);
        json_object_put(want);
        if (fn != do_json && fn != do_merge && has_directive(out))
            fail_msg("[%s] a directive survived into the result", r->name);
    }

    char *target_after = text_of(target), *patch_after = text_of(patch);
    if (strcmp(target_before, target_after) != 0)
        fail_msg("[%s] target changed: %s", r->name, target_after);
    if (strcmp(patch_before, patch_after) != 0)
        fail_msg("[%s] patch changed: %s", r->name, patch_after);
    free(target_before);
    free(target_after);
    free(patch_before);
    free(patch_after);
    if (rc == 0)
        json_object_put(out);
    json_object_put(target);
    json_object_put(patch);
}

/* ---- RFC 7386 merge patch -------------------------------------------------- */

static const row merge_rows[] = {
    /* RFC 7386 appendix A, in order. */
    {"rfc7386 replace member", "{'a':'b'}", "{'a':'c'}", "{'a':'c'}", 0},
    {"rfc7386 add member", "{'a':'b'}", "{'b':'c'}", "{'a':'b','b':'c'}", 0},
    {"rfc7386 null deletes", "{'a':'b'}", "{'a':null}", "{}", 0},
    {"rfc7386 null deletes one of two", "{'a':'b','b':'c'}", "{'a':null}", "{'b':'c'}", 0},
    {"rfc7386 scalar replaces array", "{'a':['b']}", "{'a':'c'}", "{'a':'c'}", 0},
    {"rfc7386 array replaces scalar", "{'a':'c'}", "{'a':['b']}", "{'a':['b']}", 0},
    {"rfc7386 nested merge", "{'a':{'b':'c'}}", "{'a':{'b':'d','c':null}}", "{'a':{'b':'d'}}", 0},
    {"rfc7386 array of objects replaced", "{'a':[{'b':'c'}]}", "{'a':[1]}", "{'a':[1]}", 0},
    {"rfc7386 array replaces array", "['a','b']", "['c','d']", "['c','d']", 0},
    {"rfc7386 array replaces object", "{'a':'b'}", "['c']", "['c']", 0},
    {"rfc7386 null patch", "{'a':'foo'}", "null", "null", 0},
    {"rfc7386 string patch", "{'a':'foo'}", "'bar'", "'bar'", 0},
    {"rfc7386 target null member kept", "{'e':null}", "{'a':1}", "{'e':null,'a':1}", 0},
    {"rfc7386 array target starts from {}", "[1,2]", "{'a':'b','c':null}", "{'a':'b'}", 0},
    {"rfc7386 nested nulls dropped", "{}", "{'a':{'bb':{'ccc':null}}}", "{'a':{'bb':{}}}", 0},
    /* Beyond the appendix. */
    {"null target", "null", "{'a':1}", "{'a':1}", 0},
    {"scalar target", "5", "{'a':{'b':null,'c':2}}", "{'a':{'c':2}}", 0},
    {"object replaces scalar member", "{'a':1}", "{'a':{'b':1,'c':null}}", "{'a':{'b':1}}", 0},
    {"arrays are verbatim, nulls inside kept", "{'a':[1]}", "{'a':[null,{'b':null}]}",
     "{'a':[null,{'b':null}]}", 0},
    {"empty patch is a no-op", "{'a':{'b':[1,2]}}", "{}", "{'a':{'b':[1,2]}}", 0},
    {"delete a missing key", "{'a':1}", "{'z':null}", "{'a':1}", 0},
    {"label removal", "{'metadata':{'name':'n','labels':{'a':'1','b':'2'}}}",
     "{'metadata':{'labels':{'a':null,'c':'3'}}}",
     "{'metadata':{'name':'n','labels':{'b':'2','c':'3'}}}", 0},
    {"finalizers replaced whole", "{'metadata':{'finalizers':['a','b']}}",
     "{'metadata':{'finalizers':['c']}}", "{'metadata':{'finalizers':['c']}}", 0},
    {"numbers and booleans", "{'a':1.5,'b':true}", "{'a':2,'b':false,'c':-3}",
     "{'a':2,'b':false,'c':-3}", 0},
};

static void test_merge_patch(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(merge_rows); i++)
        run_row(&merge_rows[i], do_merge, NULL, 0);
}

/* ---- RFC 6902 JSON patch --------------------------------------------------- */

static const row json_rows[] = {
    /* RFC 6902 appendix A (A.13, a duplicate "op" member, cannot survive a
     * JSON parser into a tree, so it has no row). */
    {"A.1 add object member", "{'foo':'bar'}", "[{'op':'add','path':'/baz','value':'qux'}]",
     "{'baz':'qux','foo':'bar'}", 0},
    {"A.2 add array element", "{'foo':['bar','baz']}",
     "[{'op':'add','path':'/foo/1','value':'qux'}]", "{'foo':['bar','qux','baz']}", 0},
    {"A.3 remove object member", "{'baz':'qux','foo':'bar'}", "[{'op':'remove','path':'/baz'}]",
     "{'foo':'bar'}", 0},
    {"A.4 remove array element", "{'foo':['bar','qux','baz']}", "[{'op':'remove','path':'/foo/1'}]",
     "{'foo':['bar','baz']}", 0},
    {"A.5 replace value", "{'baz':'qux','foo':'bar'}",
     "[{'op':'replace','path':'/baz','value':'boo'}]", "{'baz':'boo','foo':'bar'}", 0},
    {"A.6 move value", "{'foo':{'bar':'baz','waldo':'fred'},'qux':{'corge':'grault'}}",
     "[{'op':'move','from':'/foo/waldo','path':'/qux/thud'}]",
     "{'foo':{'bar':'baz'},'qux':{'corge':'grault','thud':'fred'}}", 0},
    {"A.7 move array element", "{'foo':['all','grass','cows','eat']}",
     "[{'op':'move','from':'/foo/1','path':'/foo/3'}]", "{'foo':['all','cows','eat','grass']}", 0},
    {"A.8 test success", "{'baz':'qux','foo':['a',2,'c']}",
     "[{'op':'test','path':'/baz','value':'qux'},{'op':'test','path':'/foo/1','value':2}]",
     "{'baz':'qux','foo':['a',2,'c']}", 0},
    {"A.9 test failure", "{'baz':'qux'}", "[{'op':'test','path':'/baz','value':'bar'}]", NULL,
     -ECANCELED},
    {"A.10 add nested member object", "{'foo':'bar'}",
     "[{'op':'add','path':'/child','value':{'grandchild':{}}}]",
     "{'foo':'bar','child':{'grandchild':{}}}", 0},
    {"A.11 unrecognized members ignored", "{'foo':'bar'}",
     "[{'op':'add','path':'/baz','value':'qux','xyz':123}]", "{'foo':'bar','baz':'qux'}", 0},
    {"A.12 add to nonexistent target", "{'foo':'bar'}",
     "[{'op':'add','path':'/baz/bat','value':'qux'}]", NULL, -ECANCELED},
    {"A.14 ~ escape ordering", "{'/':9,'~1':10}", "[{'op':'test','path':'/~01','value':10}]",
     "{'/':9,'~1':10}", 0},
    {"A.15 string is not a number", "{'/':9,'~1':10}", "[{'op':'test','path':'/~01','value':'10'}]",
     NULL, -ECANCELED},
    {"A.16 add array value", "{'foo':['bar']}",
     "[{'op':'add','path':'/foo/-','value':['abc','def']}]", "{'foo':['bar',['abc','def']]}", 0},

    /* add */
    {"add replaces an existing member", "{'a':1}", "[{'op':'add','path':'/a','value':2}]",
     "{'a':2}", 0},
    {"add at root replaces the document", "{'a':1}", "[{'op':'add','path':'','value':[1]}]", "[1]",
     0},
    {"add at index == length", "{'a':[1]}", "[{'op':'add','path':'/a/1','value':2}]", "{'a':[1,2]}",
     0},
    {"add at index 0", "{'a':[1,2]}", "[{'op':'add','path':'/a/0','value':0}]", "{'a':[0,1,2]}", 0},
    {"add null value", "{'a':1}", "[{'op':'add','path':'/b','value':null}]", "{'a':1,'b':null}", 0},
    {"add empty-string key", "{}", "[{'op':'add','path':'/','value':1}]", "{'':1}", 0},
    {"add into array element", "{'spec':{'containers':[{'name':'a'}]}}",
     "[{'op':'add','path':'/spec/containers/0/image','value':'x'}]",
     "{'spec':{'containers':[{'name':'a','image':'x'}]}}", 0},
    {"add index past length", "{'a':[1]}", "[{'op':'add','path':'/a/2','value':2}]", NULL,
     -ECANCELED},
    {"add index with leading zero", "{'a':[1,2]}", "[{'op':'add','path':'/a/01','value':2}]", NULL,
     -ECANCELED},
    {"add index not a number", "{'a':[1]}", "[{'op':'add','path':'/a/x','value':2}]", NULL,
     -ECANCELED},
    {"add under a scalar", "{'a':1}", "[{'op':'add','path':'/a/b','value':2}]", NULL, -ECANCELED},
    /* remove */
    {"remove ~0 escape", "{'a~b':1,'c':2}", "[{'op':'remove','path':'/a~0b'}]", "{'c':2}", 0},
    {"remove ~1 escape", "{'a/b':1}", "[{'op':'remove','path':'/a~1b'}]", "{}", 0},
    {"remove a null member", "{'a':null,'b':1}", "[{'op':'remove','path':'/a'}]", "{'b':1}", 0},
    {"remove missing member", "{'a':1}", "[{'op':'remove','path':'/b'}]", NULL, -ECANCELED},
    {"remove index out of range", "{'a':[1]}", "[{'op':'remove','path':'/a/1'}]", NULL, -ECANCELED},
    {"remove with - index", "{'a':[1]}", "[{'op':'remove','path':'/a/-'}]", NULL, -ECANCELED},
    {"remove the root", "{'a':1}", "[{'op':'remove','path':''}]", NULL, -ECANCELED},
    /* replace */
    {"replace array element", "{'a':[1,2]}", "[{'op':'replace','path':'/a/0','value':9}]",
     "{'a':[9,2]}", 0},
    {"replace root", "{'a':1}", "[{'op':'replace','path':'','value':{'b':2}}]", "{'b':2}", 0},
    {"replace missing member", "{'a':1}", "[{'op':'replace','path':'/b','value':2}]", NULL,
     -ECANCELED},
    {"replace index == length", "{'a':[1]}", "[{'op':'replace','path':'/a/1','value':2}]", NULL,
     -ECANCELED},
    /* move */
    {"move to the same path is a no-op", "{'a':{'b':1}}", "[{'op':'move','from':'/a','path':'/a'}]",
     "{'a':{'b':1}}", 0},
    {"move array element to front", "{'a':[1,2,3]}", "[{'op':'move','from':'/a/2','path':'/a/0'}]",
     "{'a':[3,1,2]}", 0},
    {"move between containers", "{'a':[1,{'x':2}],'b':{}}",
     "[{'op':'move','from':'/a/1','path':'/b/y'}]", "{'a':[1],'b':{'y':{'x':2}}}", 0},
    {"move a child over its parent", "{'a':{'b':1}}", "[{'op':'move','from':'/a/b','path':'/a'}]",
     "{'a':1}", 0},
    {"move into own child", "{'a':{'b':{}}}", "[{'op':'move','from':'/a','path':'/a/b/c'}]", NULL,
     -ECANCELED},
    {"move missing from", "{'a':1}", "[{'op':'move','from':'/x','path':'/y'}]", NULL, -ECANCELED},
    /* copy */
    {"copy object", "{'a':{'b':1}}", "[{'op':'copy','from':'/a','path':'/c'}]",
     "{'a':{'b':1},'c':{'b':1}}", 0},
    {"copy array element to end", "{'a':[1,2]}", "[{'op':'copy','from':'/a/0','path':'/a/-'}]",
     "{'a':[1,2,1]}", 0},
    {"copy then change the copy only", "{'a':{'b':1}}",
     "[{'op':'copy','from':'/a','path':'/c'},{'op':'replace','path':'/c/b','value':2}]",
     "{'a':{'b':1},'c':{'b':2}}", 0},
    {"copy into own child", "{'a':{'b':1}}", "[{'op':'copy','from':'/a','path':'/a/c'}]",
     "{'a':{'b':1,'c':{'b':1}}}", 0},
    {"copy missing from", "{'a':1}", "[{'op':'copy','from':'/x','path':'/y'}]", NULL, -ECANCELED},
    /* test */
    {"test int equals double", "{'a':1}", "[{'op':'test','path':'/a','value':1.0}]", "{'a':1}", 0},
    {"test ignores object key order", "{'a':{'x':1,'y':[1,{'z':true}]}}",
     "[{'op':'test','path':'/a','value':{'y':[1,{'z':true}],'x':1}}]",
     "{'a':{'x':1,'y':[1,{'z':true}]}}", 0},
    {"test array order matters", "{'a':[1,2]}", "[{'op':'test','path':'/a','value':[2,1]}]", NULL,
     -ECANCELED},
    {"test extra object member differs", "{'a':{'x':1}}",
     "[{'op':'test','path':'/a','value':{'x':1,'y':2}}]", NULL, -ECANCELED},
    {"test null value", "{'a':null}", "[{'op':'test','path':'/a','value':null}]", "{'a':null}", 0},
    /* kube-apiserver's json-patch library reads a missing member as null. */
    {"test missing member with null passes", "{}", "[{'op':'test','path':'/a','value':null}]", "{}",
     0},
    {"test missing nested member with null passes", "{'metadata':{}}",
     "[{'op':'test','path':'/metadata/finalizers','value':null}]", "{'metadata':{}}", 0},
    {"test missing member with a value fails", "{}", "[{'op':'test','path':'/a','value':1}]", NULL,
     -ECANCELED},
    {"test missing member with an empty list fails", "{'metadata':{}}",
     "[{'op':'test','path':'/metadata/finalizers','value':[]}]", NULL, -ECANCELED},
    {"test member of a missing parent fails", "{}",
     "[{'op':'test','path':'/metadata/finalizers','value':null}]", NULL, -ECANCELED},
    {"test whole document", "{'a':[1]}", "[{'op':'test','path':'','value':{'a':[1]}}]", "{'a':[1]}",
     0},
    {"test bool is not number", "{'a':true}", "[{'op':'test','path':'/a','value':1}]", NULL,
     -ECANCELED},
    /* whole patches */
    {"empty patch", "{'a':1}", "[]", "{'a':1}", 0},
    {"ops apply in order", "{}",
     "[{'op':'add','path':'/a','value':[]},{'op':'add','path':'/a/-','value':1},"
     "{'op':'add','path':'/a/0','value':0},{'op':'test','path':'/a','value':[0,1]}]",
     "{'a':[0,1]}", 0},
    {"all or nothing", "{'a':1}",
     "[{'op':'add','path':'/b','value':2},{'op':'test','path':'/a','value':2}]", NULL, -ECANCELED},
    {"guarded finalizer removal", "{'metadata':{'finalizers':['a','b']}}",
     "[{'op':'test','path':'/metadata/finalizers/0','value':'a'},"
     "{'op':'remove','path':'/metadata/finalizers/0'}]",
     "{'metadata':{'finalizers':['b']}}", 0},
    {"null document replaced", "null", "[{'op':'add','path':'','value':{'a':1}}]", "{'a':1}", 0},
    {"document replaced by null", "{'a':1}", "[{'op':'replace','path':'','value':null}]", "null",
     0},
    {"path through null", "{'a':null}", "[{'op':'add','path':'/a/b','value':1}]", NULL, -ECANCELED},
    /* malformed: 400 (only what does not decode into operation maps, as
     * kube-apiserver's json-patch library decodes the patch) */
    {"patch is an object", "{}", "{'op':'add','path':'/a','value':1}", NULL, -EINVAL},
    {"operation is not an object", "{}", "[1]", NULL, -EINVAL},
    {"malformed after a failing op is 400", "{}", "[{'op':'test','path':'/x','value':1},2]", NULL,
     -EINVAL},
    {"null is an empty patch", "{'a':1}", "null", "{'a':1}", 0},
    /* operations that fail when applied: 422, as the library finds out op by op */
    {"unknown op", "{}", "[{'op':'frob','path':'/a'}]", NULL, -ECANCELED},
    {"missing op", "{}", "[{'path':'/a','value':1}]", NULL, -ECANCELED},
    {"op not a string", "{}", "[{'op':1,'path':'/a','value':1}]", NULL, -ECANCELED},
    {"missing path", "{}", "[{'op':'add','value':1}]", NULL, -ECANCELED},
    {"path not a string", "{}", "[{'op':'remove','path':1}]", NULL, -ECANCELED},
    {"path not a pointer", "{'a':1}", "[{'op':'remove','path':'a'}]", NULL, -ECANCELED},
    {"bad ~ escape", "{'a':1}", "[{'op':'remove','path':'/~2'}]", NULL, -ECANCELED},
    {"trailing ~", "{'a':1}", "[{'op':'remove','path':'/a~'}]", NULL, -ECANCELED},
    {"add without value", "{}", "[{'op':'add','path':'/a'}]", NULL, -ECANCELED},
    {"replace without value", "{'a':1}", "[{'op':'replace','path':'/a'}]", NULL, -ECANCELED},
    {"test without value", "{'a':1}", "[{'op':'test','path':'/a'}]", NULL, -ECANCELED},
    {"move without from", "{'a':1}", "[{'op':'move','path':'/b'}]", NULL, -ECANCELED},
    {"copy with bad from", "{'a':1}", "[{'op':'copy','from':'a','path':'/b'}]", NULL, -ECANCELED},
};

static void test_json_patch(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(json_rows); i++)
        run_row(&json_rows[i], do_json, NULL, 0);
}

/* ---- strategic merge patch ------------------------------------------------- */

/* As the CSINode and Pod types declare them (k8s.io/api patch tags). */
static const kl_merge_key csinode_keys[] = {
    {"metadata.finalizers", NULL, false},
    {"spec.drivers", "name", false},
};

static const kl_merge_key pod_keys[] = {
    {"metadata.finalizers", NULL, false},
    {"metadata.ownerReferences", "uid", false},
    {"spec.containers", "name", false},
    {"spec.containers[].env", "name", false},
    {"spec.containers[].ports", "containerPort", false},
    {"spec.volumes", "name", true},
};

static const kl_merge_key *smp_keys;
static size_t smp_n_keys;

static int do_smp(const json_object *t, const json_object *p, const kl_merge_key *keys,
                  size_t n_keys, json_object **out)
{
    return kl_strategic_merge_patch(t, p, keys, n_keys, out);
}

static void run_smp(const row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++)
        run_row(&rows[i], do_smp, smp_keys, smp_n_keys);
}

/* Rules that need no merge keys. */
static const row smp_plain_rows[] = {
    {"merges maps, null deletes", "{'a':{'b':1,'c':2}}", "{'a':{'b':null,'d':3}}",
     "{'a':{'c':2,'d':3}}", 0},
    {"unlisted lists are atomic", "{'a':[1,2]}", "{'a':[3]}", "{'a':[3]}", 0},
    {"root $patch replace", "{'a':1,'b':2}", "{'$patch':'replace','c':3}", "{'c':3}", 0},
    {"root $patch replace with nothing", "{'a':1}", "{'$patch':'replace'}", "{}", 0},
    {"root $patch delete", "{'a':1}", "{'$patch':'delete'}", "{}", 0},
    {"map $patch replace", "{'metadata':{'labels':{'a':'1','b':'2'},'name':'n'}}",
     "{'metadata':{'labels':{'$patch':'replace','c':'3'}}}",
     "{'metadata':{'labels':{'c':'3'},'name':'n'}}", 0},
    {"map $patch delete removes the map", "{'metadata':{'labels':{'a':'1'},'name':'n'}}",
     "{'metadata':{'labels':{'$patch':'delete'}}}", "{'metadata':{'name':'n'}}", 0},
    {"map $patch delete of a missing map", "{'a':1}", "{'b':{'$patch':'delete','c':1}}", "{'a':1}",
     0},
    {"map $patch merge is the default", "{'a':{'x':1}}", "{'a':{'$patch':'merge','y':2}}",
     "{'a':{'x':1,'y':2}}", 0},
    {"directives stripped from new subtrees", "{}",
     "{'spec':{'x':{'$patch':'replace','y':1,'z':null},'$setElementOrder/l':[1]}}",
     "{'spec':{'x':{'y':1}}}", 0},
    {"$retainKeys drops unlisted keys", "{'a':1,'b':2,'c':3}", "{'$retainKeys':['a','d'],'d':4}",
     "{'a':1,'d':4}", 0},
    {"$retainKeys with a null for an unlisted key", "{'a':1,'b':2}",
     "{'$retainKeys':['a'],'b':null}", "{'a':1}", 0},
    {"$deleteFromPrimitiveList on an atomic list", "{'l':[1,2,3]}",
     "{'$deleteFromPrimitiveList/l':[2]}", "{'l':[1,3]}", 0},
    {"$deleteFromPrimitiveList on a missing list", "{'foo':['bar']}",
     "{'$deleteFromPrimitiveList/l':[3]}", "{'foo':['bar']}", 0},
    {"$setElementOrder of an atomic list is ignored", "{'l':[1,2]}", "{'$setElementOrder/l':[2,1]}",
     "{'l':[1,2]}", 0},
    {"null target starts from {}", "null", "{'a':{'b':1}}", "{'a':{'b':1}}", 0},
    /* malformed: 400 */
    {"patch is not an object", "{}", "[1]", NULL, -EINVAL},
    {"null patch", "{}", "null", NULL, -EINVAL},
    {"unknown map $patch", "{'a':{}}", "{'a':{'$patch':'frob'}}", NULL, -EINVAL},
    {"non-string map $patch", "{}", "{'$patch':1}", NULL, -EINVAL},
    {"$retainKeys not a list", "{'a':1}", "{'$retainKeys':'a'}", NULL, -EINVAL},
    {"$retainKeys of non-strings", "{'a':1}", "{'$retainKeys':[1]}", NULL, -EINVAL},
    {"patch sets a key $retainKeys drops", "{'a':1}", "{'$retainKeys':['a'],'b':2}", NULL, -EINVAL},
    {"$deleteFromPrimitiveList not a list", "{'l':[1]}", "{'$deleteFromPrimitiveList/l':1}", NULL,
     -EINVAL},
    {"$setElementOrder without a field", "{}", "{'$setElementOrder/':[]}", NULL, -EINVAL},
};

static void test_smp_plain(void **state)
{
    (void)state;
    smp_keys = NULL;
    smp_n_keys = 0;
    run_smp(smp_plain_rows, N_ROWS(smp_plain_rows));
}

static const row smp_csinode_rows[] = {
    {"finalizers merge as a set", "{'metadata':{'finalizers':['a','b']}}",
     "{'metadata':{'finalizers':['b','c']}}", "{'metadata':{'finalizers':['a','b','c']}}", 0},
    {"finalizers union drops duplicates", "{'metadata':{'finalizers':['a','a']}}",
     "{'metadata':{'finalizers':['a','b','b']}}", "{'metadata':{'finalizers':['a','b']}}", 0},
    {"finalizers added to a missing list", "{'metadata':{'name':'n'}}",
     "{'metadata':{'finalizers':['x']}}", "{'metadata':{'name':'n','finalizers':['x']}}", 0},
    {"finalizers null deletes the list", "{'metadata':{'finalizers':['a'],'name':'n'}}",
     "{'metadata':{'finalizers':null}}", "{'metadata':{'name':'n'}}", 0},
    {"$deleteFromPrimitiveList", "{'metadata':{'finalizers':['a','b','c']}}",
     "{'metadata':{'$deleteFromPrimitiveList/finalizers':['b','zz']}}",
     "{'metadata':{'finalizers':['a','c']}}", 0},
    {"$deleteFromPrimitiveList with additions", "{'metadata':{'finalizers':['a','b']}}",
     "{'metadata':{'$deleteFromPrimitiveList/finalizers':['a'],'finalizers':['c']}}",
     "{'metadata':{'finalizers':['c','b']}}", 0},
    /* apimachinery's normalizeElementOrder: what the patch names comes first
     * unless the original had a server-only element before it. */
    {"a new finalizer goes first", "{'metadata':{'finalizers':['a']}}",
     "{'metadata':{'finalizers':['b']}}", "{'metadata':{'finalizers':['b','a']}}", 0},
    {"a new keyed element goes first", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'drivers':[{'name':'c','nodeID':'n'}]}}",
     "{'spec':{'drivers':[{'name':'c','nodeID':'n'},{'name':'a'}]}}", 0},
    {"patch and server-only elements interleave",
     "{'spec':{'drivers':[{'name':'a'},{'name':'b'},{'name':'c'}]}}",
     "{'spec':{'drivers':[{'name':'d'},{'name':'b','v':1}]}}",
     "{'spec':{'drivers':[{'name':'d'},{'name':'a'},{'name':'b','v':1},{'name':'c'}]}}", 0},
    {"primitive list $patch replace", "{'metadata':{'finalizers':['a','b']}}",
     "{'metadata':{'finalizers':[{'$patch':'replace'},'c']}}", "{'metadata':{'finalizers':['c']}}",
     0},
    {"$setElementOrder of primitives", "{'metadata':{'finalizers':['x','y','z']}}",
     "{'metadata':{'$setElementOrder/finalizers':['z','x']}}",
     "{'metadata':{'finalizers':['z','x','y']}}", 0},
    {"keyed merge updates and appends",
     "{'spec':{'drivers':[{'name':'a','nodeID':'n0','topologyKeys':['k0']},"
     "{'name':'b','nodeID':'n0'}]}}",
     "{'spec':{'drivers':[{'name':'b','nodeID':'n1'},{'name':'c','nodeID':'n2'}]}}",
     "{'spec':{'drivers':[{'name':'a','nodeID':'n0','topologyKeys':['k0']},"
     "{'name':'b','nodeID':'n1'},{'name':'c','nodeID':'n2'}]}}",
     0},
    {"lists inside keyed elements are atomic",
     "{'spec':{'drivers':[{'name':'a','topologyKeys':['k0','k1']}]}}",
     "{'spec':{'drivers':[{'name':'a','topologyKeys':['k2']}]}}",
     "{'spec':{'drivers':[{'name':'a','topologyKeys':['k2']}]}}", 0},
    {"null inside a keyed element deletes",
     "{'spec':{'drivers':[{'name':'a','nodeID':'n','allocatable':{'count':3}}]}}",
     "{'spec':{'drivers':[{'name':'a','allocatable':null}]}}",
     "{'spec':{'drivers':[{'name':'a','nodeID':'n'}]}}", 0},
    {"keyed element $patch delete",
     "{'spec':{'drivers':[{'name':'a','nodeID':'n'},{'name':'b','nodeID':'n'}]}}",
     "{'spec':{'drivers':[{'$patch':'delete','name':'a'}]}}",
     "{'spec':{'drivers':[{'name':'b','nodeID':'n'}]}}", 0},
    {"keyed delete removes every match",
     "{'spec':{'drivers':[{'name':'a'},{'name':'a'},{'name':'b','v':1},{'name':'c'}]}}",
     "{'spec':{'drivers':[{'name':'a','$patch':'delete'},{'name':'c','$patch':'delete'}]}}",
     "{'spec':{'drivers':[{'name':'b','v':1}]}}", 0},
    {"keyed delete of a missing element", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'drivers':[{'$patch':'delete','name':'z'}]}}", "{'spec':{'drivers':[{'name':'a'}]}}",
     0},
    {"keyed delete comes before re-add",
     "{'spec':{'drivers':[{'name':'a','nodeID':'old','extra':1}]}}",
     "{'spec':{'drivers':[{'name':'a','nodeID':'new'},{'$patch':'delete','name':'a'}]}}",
     "{'spec':{'drivers':[{'name':'a','nodeID':'new'}]}}", 0},
    {"keyed list $patch replace", "{'spec':{'drivers':[{'name':'a','x':1},{'name':'b'}]}}",
     "{'spec':{'drivers':[{'$patch':'replace'},{'name':'z'},{'name':'a','y':2}]}}",
     "{'spec':{'drivers':[{'name':'z'},{'name':'a','y':2}]}}", 0},
    {"keyed list $patch replace alone empties", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'drivers':[{'$patch':'replace'}]}}", "{'spec':{'drivers':[]}}", 0},
    {"keyed list into a missing list strips nulls", "{'spec':{}}",
     "{'spec':{'drivers':[{'name':'a','nodeID':null,'x':{'$patch':'delete'}}]}}",
     "{'spec':{'drivers':[{'name':'a'}]}}", 0},
    {"keyed list replaces a non-list", "{'spec':{'drivers':{'x':1}}}",
     "{'spec':{'drivers':[{'name':'a'}]}}", "{'spec':{'drivers':[{'name':'a'}]}}", 0},
    {"$setElementOrder of keyed maps",
     "{'spec':{'drivers':[{'name':'a'},{'name':'b'},{'name':'c','v':1}]}}",
     "{'spec':{'$setElementOrder/drivers':[{'name':'c'},{'name':'zz'},{'name':'a'}]}}",
     "{'spec':{'drivers':[{'name':'c','v':1},{'name':'a'},{'name':'b'}]}}", 0},
    {"$setElementOrder with merged and new elements",
     "{'spec':{'drivers':[{'name':'a'},{'name':'b'}]}}",
     "{'spec':{'$setElementOrder/drivers':[{'name':'c'},{'name':'b'},{'name':'a'}],"
     "'drivers':[{'name':'c'},{'name':'a','v':2}]}}",
     "{'spec':{'drivers':[{'name':'c'},{'name':'b'},{'name':'a','v':2}]}}", 0},
    {"kubectl apply on a CSINode",
     "{'metadata':{'name':'n1','finalizers':['a.io/x','b.io/y']},"
     "'spec':{'drivers':[{'name':'a.csi.io','nodeID':'n1a'},"
     "{'name':'b.csi.io','nodeID':'n1','allocatable':{'count':3}}]}}",
     "{'metadata':{'$deleteFromPrimitiveList/finalizers':['a.io/x'],"
     "'$setElementOrder/finalizers':['b.io/y']},"
     "'spec':{'$setElementOrder/drivers':[{'name':'b.csi.io'},{'name':'c.csi.io'}],"
     "'drivers':[{'name':'b.csi.io','nodeID':'n1b'},"
     "{'name':'c.csi.io','nodeID':'n1','topologyKeys':['k1']},"
     "{'$patch':'delete','name':'a.csi.io'}]}}",
     "{'metadata':{'name':'n1','finalizers':['b.io/y']},"
     "'spec':{'drivers':[{'name':'b.csi.io','nodeID':'n1b','allocatable':{'count':3}},"
     "{'name':'c.csi.io','nodeID':'n1','topologyKeys':['k1']}]}}",
     0},
    /* malformed: 400 */
    {"keyed element without the merge key", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'drivers':[{'nodeID':'x'}]}}", NULL, -EINVAL},
    {"keyed element not a map", "{'spec':{'drivers':[]}}", "{'spec':{'drivers':['a']}}", NULL,
     -EINVAL},
    {"keyed $patch delete without the key", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'drivers':[{'$patch':'delete'}]}}", NULL, -EINVAL},
    {"unknown list $patch", "{'spec':{'drivers':[]}}",
     "{'spec':{'drivers':[{'$patch':'frob','name':'a'}]}}", NULL, -EINVAL},
    {"primitive list $patch delete", "{'metadata':{'finalizers':['a']}}",
     "{'metadata':{'finalizers':[{'$patch':'delete'}]}}", NULL, -EINVAL},
    {"$setElementOrder entry without the key", "{'spec':{'drivers':[{'name':'a'}]}}",
     "{'spec':{'$setElementOrder/drivers':['a']}}", NULL, -EINVAL},
};

static void test_smp_csinode(void **state)
{
    (void)state;
    smp_keys = csinode_keys;
    smp_n_keys = N_ROWS(csinode_keys);
    run_smp(smp_csinode_rows, N_ROWS(smp_csinode_rows));
}

#define POD_BASE                                                                                   \
    "{'metadata':{'name':'p'},'spec':{'containers':["                                              \
    "{'name':'app','image':'i1','env':[{'name':'A','value':'1'},{'name':'B','value':'2'}],"        \
    "'ports':[{'containerPort':80,'name':'http'}]},"                                               \
    "{'name':'side','image':'s1'}],"                                                               \
    "'tolerations':[{'key':'t1'}],"                                                                \
    "'volumes':[{'name':'v','hostPath':{'path':'/a'}}]}}"

static const row smp_pod_rows[] = {
    {"nested env merges by name", POD_BASE,
     "{'spec':{'containers':[{'name':'app','env':[{'name':'B','value':'3'},"
     "{'name':'C','value':'4'},{'$patch':'delete','name':'A'}]}]}}",
     "{'metadata':{'name':'p'},'spec':{'containers':["
     "{'name':'app','image':'i1','env':[{'name':'B','value':'3'},{'name':'C','value':'4'}],"
     "'ports':[{'containerPort':80,'name':'http'}]},"
     "{'name':'side','image':'s1'}],"
     "'tolerations':[{'key':'t1'}],"
     "'volumes':[{'name':'v','hostPath':{'path':'/a'}}]}}",
     0},
    {"new container keeps nested lists clean", "{'spec':{'containers':[{'name':'app'}]}}",
     "{'spec':{'containers':[{'name':'new','env':[{'$patch':'delete','name':'X'},"
     "{'name':'Y','value':'y'}]}]}}",
     "{'spec':{'containers':[{'name':'new','env':[{'name':'Y','value':'y'}]},{'name':'app'}]}}", 0},
    {"ports merge by an integer key",
     "{'spec':{'containers':[{'name':'app','ports':[{'containerPort':80,'name':'http'}]}]}}",
     "{'spec':{'containers':[{'name':'app','ports':[{'containerPort':80.0,'protocol':'TCP'},"
     "{'containerPort':443}]}]}}",
     "{'spec':{'containers':[{'name':'app','ports':[{'containerPort':80,'name':'http',"
     "'protocol':'TCP'},{'containerPort':443}]}]}}",
     0},
    {"atomic tolerations replaced", "{'spec':{'tolerations':[{'key':'t1'},{'key':'t2'}]}}",
     "{'spec':{'tolerations':[{'key':'t3'}]}}", "{'spec':{'tolerations':[{'key':'t3'}]}}", 0},
    {"$retainKeys in a volume element",
     "{'spec':{'volumes':[{'name':'v','hostPath':{'path':'/a'}},"
     "{'name':'w','emptyDir':{}}]}}",
     "{'spec':{'volumes':[{'name':'v','$retainKeys':['name','emptyDir'],'emptyDir':{}}]}}",
     "{'spec':{'volumes':[{'name':'v','emptyDir':{}},{'name':'w','emptyDir':{}}]}}", 0},
    {"ownerReferences keyed by uid",
     "{'metadata':{'ownerReferences':[{'uid':'u1','kind':'A'},{'uid':'u2','kind':'B'}]}}",
     "{'metadata':{'ownerReferences':[{'uid':'u2','controller':true},{'uid':'u3','kind':'C'}]}}",
     "{'metadata':{'ownerReferences':[{'uid':'u1','kind':'A'},"
     "{'uid':'u2','kind':'B','controller':true},{'uid':'u3','kind':'C'}]}}",
     0},
    {"$setElementOrder of nested env",
     "{'spec':{'containers':[{'name':'app','env':[{'name':'A'},{'name':'B'}]}]}}",
     "{'spec':{'containers':[{'name':'app','$setElementOrder/env':[{'name':'B'},{'name':'A'}]}]}}",
     "{'spec':{'containers':[{'name':'app','env':[{'name':'B'},{'name':'A'}]}]}}", 0},
    {"list $patch replace element carries no data", POD_BASE,
     "{'spec':{'containers':[{'name':'side','$patch':'replace'}]}}",
     "{'metadata':{'name':'p'},'spec':{'containers':[],"
     "'tolerations':[{'key':'t1'}],"
     "'volumes':[{'name':'v','hostPath':{'path':'/a'}}]}}",
     0},
    {"env element without the key", POD_BASE,
     "{'spec':{'containers':[{'name':'app','env':[{'value':'x'}]}]}}", NULL, -EINVAL},
};

static void test_smp_pod(void **state)
{
    (void)state;
    smp_keys = pod_keys;
    smp_n_keys = N_ROWS(pod_keys);
    run_smp(smp_pod_rows, N_ROWS(smp_pod_rows));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_patch), cmocka_unit_test(test_json_patch),
        cmocka_unit_test(test_smp_plain),   cmocka_unit_test(test_smp_csinode),
        cmocka_unit_test(test_smp_pod),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
