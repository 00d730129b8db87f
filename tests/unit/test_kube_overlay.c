/*
 * Unit tests for kube_overlay, the own-writes overlay: which copy a sync
 * decides on — the cached one or the answer of our last write — by
 * resourceVersion, and when an entry goes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube/kube.h"

static json_object *obj(const char *rv, const char *mark)
{
    char buf[256];
    if (rv)
        snprintf(buf, sizeof(buf),
                 "{\"metadata\":{\"name\":\"c\",\"namespace\":\"ns\",\"resourceVersion\":\"%s\"},"
                 "\"mark\":\"%s\"}",
                 rv, mark);
    else
        snprintf(buf, sizeof(buf), "{\"metadata\":{\"name\":\"c\"},\"mark\":\"%s\"}", mark);
    json_object *o = kobj_parse_text(buf, strlen(buf));
    assert_non_null(o);
    return o;
}

static const char *mark_of(const json_object *o)
{
    return kobj_str(o, "mark");
}

struct row {
    const char *name;
    const char *written_rv; /* NULL: nothing written */
    const char *cached_rv;
    const char *want; /* "written" or "cached" */
    bool kept;        /* the entry is still there after the call */
};

static void test_the_fresher_copy_wins(void **state)
{
    (void)state;
    const struct row rows[] = {
        {"nothing written: the cache", NULL, "10", "cached", false},
        {"our write is newer than the cache: ours", "12", "10", "written", true},
        {"the cache caught up: the cache, the entry goes", "12", "12", "cached", false},
        {"the cache is past our write: the cache, the entry goes", "12", "15", "cached", false},
        {"numbers, not text: 9 < 10", "9", "10", "cached", false},
        {"numbers, not text: 100 > 99", "100", "99", "written", true},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        const struct row *r = &rows[i];
        kube_overlay *o = kube_overlay_new();
        if (r->written_rv) {
            json_object *w = obj(r->written_rv, "written");
            kube_overlay_put(o, "pvc:ns/c", w);
            json_object_put(w);
        }
        json_object *got = kube_overlay_fresh(o, "pvc:ns/c", obj(r->cached_rv, "cached"));
        if (strcmp(mark_of(got), r->want) != 0)
            fail_msg("%s: got the %s copy", r->name, mark_of(got));
        json_object_put(got);
        /* A second look tells whether the entry stayed: an older cache again. */
        got = kube_overlay_fresh(o, "pvc:ns/c", obj("1", "cached"));
        bool kept = strcmp(mark_of(got), "written") == 0;
        if (kept != r->kept)
            fail_msg("%s: entry %s", r->name, kept ? "kept" : "dropped");
        json_object_put(got);
        kube_overlay_free(o);
    }
}

static void test_put_replaces_forget_drops_and_keys_are_apart(void **state)
{
    (void)state;
    kube_overlay *o = kube_overlay_new();
    json_object *a = obj("5", "first"), *b = obj("7", "second"), *norv = obj(NULL, "no-rv");
    kube_overlay_put(o, "k", a);
    kube_overlay_put(o, "k", b);
    kube_overlay_put(o, "other", norv); /* without a version: not kept */
    json_object *got = kube_overlay_fresh(o, "k", obj("3", "cached"));
    assert_string_equal(mark_of(got), "second");
    json_object_put(got);
    got = kube_overlay_fresh(o, "other", obj("3", "cached"));
    assert_string_equal(mark_of(got), "cached");
    json_object_put(got);
    assert_null(kube_overlay_fresh(o, "k", NULL));
    kube_overlay_forget(o, "k");
    got = kube_overlay_fresh(o, "k", obj("3", "cached"));
    assert_string_equal(mark_of(got), "cached");
    json_object_put(got);
    json_object_put(a);
    json_object_put(b);
    json_object_put(norv);
    kube_overlay_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_the_fresher_copy_wins),
        cmocka_unit_test(test_put_replaces_forget_drops_and_keys_are_apart),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
