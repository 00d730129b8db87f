/*
 * Unit tests for the provisioner's intent record (provisioner/intent_plan.c):
 * the entry a claim leaves before CreateVolume (what it keeps, what it never
 * keeps), reading a record that may have been edited by hand, the group
 * commit's join/flush/drop bookkeeping and its bounds, the record's name,
 * and what recovery does with an entry. Every table row is one rule and
 * names it; a failing row prints its name. Against kube-lite (intent.c):
 * the thread that does the idle write runs only while done entries are
 * left in the record.
 *
 * JSON fixtures are written with ` for " so they stay readable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "harness.h"
#include "provisioner/ctrl_internal.h"
#include "provisioner/provisioner.h"
#include "table.h"

/* An entry text for claim `name` with uid `uid`. */
static char *entry(const char *uid, const char *name)
{
    char *pvc = NULL;
    if (asprintf(&pvc,
                 "{\"metadata\":{\"name\":\"%s\",\"namespace\":\"default\",\"uid\":\"%s\"},"
                 "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"storageClassName\":\"fast\","
                 "\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}}",
                 name, uid) < 0)
        fail();
    json_object *o = json_tokener_parse(pvc);
    free(pvc);
    char *vol = NULL, *text = NULL;
    if (asprintf(&vol, "pvc-%s", uid) < 0)
        fail();
    assert_int_equal(prov_intent_encode(o, NULL, vol, &text), 0);
    json_object_put(o);
    free(vol);
    return text;
}

/* ---- encode ------------------------------------------------------------------------------ */

static const struct {
    const char *name;
    const char *pvc;
    const char *sc;
    const char *want; /* the entry, or NULL: refused */
} encode_rows[] = {
    {"an entry keeps name, namespace, uid, the request's spec fields and the volume",
     "{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `resourceVersion`: `7`, "
     "`labels`: {`a`: `b`}, `managedFields`: [{}]}, `spec`: {`accessModes`: [`ReadWriteOnce`], "
     "`resources`: {`requests`: {`storage`: `1Gi`}}, `storageClassName`: `fast`, `volumeMode`: "
     "`Block`, `volumeName`: ``}, `status`: {`phase`: `Pending`}}",
     NULL,
     "{`claim`: {`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`}, `spec`: "
     "{`accessModes`: [`ReadWriteOnce`], `resources`: {`requests`: {`storage`: `1Gi`}}, "
     "`storageClassName`: `fast`, `volumeMode`: `Block`}}, `volume`: `pvc-u1`}"},
    {"the selected node, class and provisioner annotations are kept, others are not",
     "{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `annotations`: "
     "{`volume.kubernetes.io/selected-node`: `n1`, `volume.beta.kubernetes.io/storage-class`: "
     "`old`, `volume.kubernetes.io/storage-provisioner`: `d`, "
     "`kubectl.kubernetes.io/last-applied-configuration`: `{...}`, `team`: `x`}}, `spec`: {}}",
     NULL,
     "{`claim`: {`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `annotations`: "
     "{`volume.kubernetes.io/selected-node`: `n1`, `volume.beta.kubernetes.io/storage-class`: "
     "`old`, `volume.kubernetes.io/storage-provisioner`: `d`}}, `spec`: {}}, `volume`: `v`}"},
    {"an annotation the class's secret template reads is kept (the repeat resolves it)",
     "{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `annotations`: {`team`: `x`, "
     "`other`: `y`}}, `spec`: {}}",
     "{`parameters`: {`csi.storage.k8s.io/provisioner-secret-name`: "
     "`s-${pvc.annotations['team']}`}}",
     "{`claim`: {`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `annotations`: "
     "{`team`: `x`}}, `spec`: {}}, `volume`: `v`}"},
    {"data sources and the attributes class are kept (the repeat needs the same source)",
     "{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`}, `spec`: {`dataSource`: "
     "{`kind`: `PersistentVolumeClaim`, `name`: `src`}, `dataSourceRef`: {`kind`: "
     "`PersistentVolumeClaim`, `name`: `src`}, `volumeAttributesClassName`: `gold`, `selector`: "
     "{`matchLabels`: {`a`: `b`}}}}",
     NULL,
     "{`claim`: {`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`}, `spec`: "
     "{`dataSource`: {`kind`: `PersistentVolumeClaim`, `name`: `src`}, `dataSourceRef`: "
     "{`kind`: `PersistentVolumeClaim`, `name`: `src`}, `volumeAttributesClassName`: "
     "`gold`}}, `volume`: `v`}"},
    {"a non-string annotation value is not copied",
     "{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, `annotations`: "
     "{`volume.kubernetes.io/selected-node`: 5}}, `spec`: {}}",
     NULL,
     "{`claim`: {`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`}, `spec`: {}}, "
     "`volume`: `v`}"},
    {"a claim without uid gives no entry", "{`metadata`: {`name`: `c1`, `namespace`: `ns`}}", NULL,
     NULL},
    {"a claim whose metadata is a string gives no entry", "{`metadata`: `x`}", NULL, NULL},
};

static void test_encode_keeps_what_the_repeat_needs_and_nothing_else(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(encode_rows); i++) {
        json_object *pvc = J(encode_rows[i].pvc), *sc = J(encode_rows[i].sc);
        const char *vol = strstr(encode_rows[i].name, "keeps name") ? "pvc-u1" : "v";
        char *text = NULL;
        int rc = prov_intent_encode(pvc, sc, vol, &text);
        if (!encode_rows[i].want) {
            if (rc == 0)
                fail_msg("[%s] accepted: %s", encode_rows[i].name, text);
        } else {
            if (rc != 0)
                fail_msg("[%s] refused: %s", encode_rows[i].name, util_err_last());
            json_object *got = json_tokener_parse(text);
            expect_json(encode_rows[i].name, got, encode_rows[i].want);
            json_object_put(got);
        }
        free(text);
        json_object_put(pvc);
        json_object_put(sc);
    }
}

static void test_encode_of_a_huge_template_annotation_keeps_the_entry_without_it(void **state)
{
    (void)state;
    char *big = calloc(1, PROV_INTENT_ENTRY_MAX + 2);
    memset(big, 'a', PROV_INTENT_ENTRY_MAX + 1);
    json_object *pvc = J("{`metadata`: {`name`: `c1`, `namespace`: `ns`, `uid`: `u1`, "
                         "`annotations`: {}}, `spec`: {}}");
    json_object_object_add(
        json_object_object_get(json_object_object_get(pvc, "metadata"), "annotations"), "team",
        json_object_new_string(big));
    json_object *sc = J("{`parameters`: {`x`: `${pvc.annotations['team']}`}}");
    char *text = NULL;
    assert_int_equal(prov_intent_encode(pvc, sc, "v", &text), 0);
    assert_true(strlen(text) <= PROV_INTENT_ENTRY_MAX);
    assert_null(strstr(text, "team"));
    free(text);
    free(big);
    json_object_put(pvc);
    json_object_put(sc);
}

/* ---- decode / merge of hostile records ------------------------------------------------------ */

static void count_cb(void *ud, const prov_intent *in)
{
    (void)in;
    (*(int *)ud)++;
}

static const struct {
    const char *name;
    const char *text; /* NULL: no annotation */
    size_t added, skipped;
} merge_rows[] = {
    {"no annotation: nothing", NULL, 0, 0},
    {"an empty record", "{`entries`: []}", 0, 0},
    {"text that is no JSON is skipped", "{`entries`: [", 0, 1},
    {"a record that is an array is skipped", "[1, 2]", 0, 1},
    {"entries that are no array: skipped", "{`entries`: {`a`: 1}}", 0, 1},
    {"two good entries",
     "{`entries`: [{`claim`: {`metadata`: {`name`: `a`, `namespace`: `ns`, `uid`: `u1`}, "
     "`spec`: {}}, `volume`: `pvc-u1`}, {`claim`: {`metadata`: {`name`: `b`, `namespace`: "
     "`ns`, `uid`: `u2`}, `spec`: {}}, `volume`: `pvc-u2`}]}",
     2, 0},
    {"a duplicate uid counts once",
     "{`entries`: [{`claim`: {`metadata`: {`name`: `a`, `namespace`: `ns`, `uid`: `u1`}, "
     "`spec`: {}}, `volume`: `pvc-u1`}, {`claim`: {`metadata`: {`name`: `a`, `namespace`: "
     "`ns`, `uid`: `u1`}, `spec`: {}}, `volume`: `pvc-u1`}]}",
     1, 0},
    {"wrong types are skipped, the good entry kept",
     "{`entries`: [5, `x`, null, {`claim`: `c`, `volume`: `v`}, {`claim`: {`metadata`: "
     "{`name`: 7, `namespace`: `ns`, `uid`: `u9`}, `spec`: {}}, `volume`: `v`}, {`claim`: "
     "{`metadata`: {`name`: `a`, `namespace`: `ns`, `uid`: `u1`}, `spec`: {}}, `volume`: 3}, "
     "{`claim`: {`metadata`: {`name`: `a`, `namespace`: `ns`, `uid`: `u1`}, `spec`: []}, "
     "`volume`: `v`}, {`claim`: {`metadata`: {`name`: `a`, `namespace`: `ns`, `uid`: `u1`, "
     "`annotations`: []}, `spec`: {}}, `volume`: `v`}, {`claim`: {`metadata`: {`name`: `ok`, "
     "`namespace`: `ns`, `uid`: `u2`}, `spec`: {}}, `volume`: `pvc-u2`}]}",
     1, 8},
    {"empty strings are skipped",
     "{`entries`: [{`claim`: {`metadata`: {`name`: ``, `namespace`: `ns`, `uid`: `u1`}, "
     "`spec`: {}}, `volume`: `v`}, {`claim`: {`metadata`: {`name`: `a`, `namespace`: `ns`, "
     "`uid`: ``}, `spec`: {}}, `volume`: `v`}]}",
     0, 2},
};

static void test_merge_reads_hostile_records_without_trusting_them(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(merge_rows); i++) {
        prov_intent_set *s = prov_intent_set_new(10, 1 << 20);
        char *text = Q(merge_rows[i].text);
        size_t skipped = 99;
        int calls = 0;
        size_t added = prov_intent_set_merge(s, text, &skipped, count_cb, &calls);
        if (added != merge_rows[i].added || skipped != merge_rows[i].skipped ||
            (size_t)calls != added)
            fail_msg("[%s] added %zu skipped %zu calls %d; want %zu %zu", merge_rows[i].name, added,
                     skipped, calls, merge_rows[i].added, merge_rows[i].skipped);
        free(text);
        prov_intent_set_free(s);
    }
}

static void test_merge_skips_a_record_text_over_the_limit(void **state)
{
    (void)state;
    size_t n = PROV_INTENT_TEXT_MAX + 16;
    char *text = malloc(n + 1);
    memset(text, ' ', n);
    memcpy(text, "{\"entries\":[", 12);
    memcpy(text + n - 2, "]}", 2);
    text[n] = '\0';
    prov_intent_set *s = prov_intent_set_new(10, 1 << 20);
    size_t skipped = 0;
    assert_int_equal(prov_intent_set_merge(s, text, &skipped, NULL, NULL), 0);
    assert_int_equal(skipped, 1);
    prov_intent_set_free(s);
    free(text);
}

static void test_merged_entries_are_durable_and_read_back_as_a_claim(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(10, 1 << 20);
    char *e = entry("u1", "c1");
    char *rec = NULL;
    assert_true(asprintf(&rec, "{\"entries\":[%s]}", e) > 0);
    size_t skipped = 0;
    assert_int_equal(prov_intent_set_merge(s, rec, &skipped, NULL, NULL), 1);
    int err = 0;
    assert_int_equal(prov_intent_set_status(s, "u1", 0, &err), PROV_INTENT_DURABLE);
    /* A worker joining the recovered claim's entry needs no write. */
    assert_int_equal(prov_intent_set_join(s, e), PROV_INTENT_DURABLE);
    json_object *o = json_tokener_parse(e);
    prov_intent in;
    assert_int_equal(prov_intent_decode(o, &in), 0);
    json_object *claim = prov_intent_claim(&in);
    assert_string_equal(prov_pvc_class(claim), "fast");
    assert_string_equal(in.volume, "pvc-u1");
    json_object_put(claim);
    json_object_put(o);
    free(rec);
    free(e);
    prov_intent_set_free(s);
}

/* ---- the group commit --------------------------------------------------------------------- */

static size_t entries_in(const char *text)
{
    json_object *o = json_tokener_parse(text);
    size_t n = json_object_array_length(json_object_object_get(o, "entries"));
    json_object_put(o);
    return n;
}

static void test_concurrent_joiners_share_one_write(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *e[5];
    char uid[8];
    for (int i = 0; i < 5; i++) {
        snprintf(uid, sizeof(uid), "u%d", i);
        e[i] = entry(uid, uid);
        assert_int_equal(prov_intent_set_join(s, e[i]), PROV_INTENT_PENDING);
    }
    char *text = NULL;
    uint64_t seq = 0;
    assert_int_equal(prov_intent_set_flush_begin(s, &text, &seq), 0);
    assert_int_equal(entries_in(text), 5);
    /* One write at a time. */
    char *t2 = NULL;
    uint64_t seq2 = 0;
    assert_int_equal(prov_intent_set_flush_begin(s, &t2, &seq2), -EBUSY);
    prov_intent_set_flush_end(s, seq, 0);
    int err = 0;
    for (int i = 0; i < 5; i++) {
        snprintf(uid, sizeof(uid), "u%d", i);
        assert_int_equal(prov_intent_set_status(s, uid, 0, &err), PROV_INTENT_DURABLE);
        free(e[i]);
    }
    free(text);
    prov_intent_set_free(s);
}

static void test_a_joiner_after_the_write_started_waits_for_the_next(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a"), *b = entry("ub", "b");
    prov_intent_set_join(s, a);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    assert_int_equal(prov_intent_set_join(s, b), PROV_INTENT_PENDING);
    prov_intent_set_flush_end(s, seq, 0);
    int err = 0;
    assert_int_equal(prov_intent_set_status(s, "ua", 0, &err), PROV_INTENT_DURABLE);
    assert_int_equal(prov_intent_set_status(s, "ub", 0, &err), PROV_INTENT_PENDING);
    size_t joiners, done;
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(joiners, 1);
    free(text);
    prov_intent_set_flush_begin(s, &text, &seq);
    assert_int_equal(entries_in(text), 2);
    prov_intent_set_flush_end(s, seq, 0);
    assert_int_equal(prov_intent_set_status(s, "ub", 0, &err), PROV_INTENT_DURABLE);
    free(text);
    free(a);
    free(b);
    prov_intent_set_free(s);
}

static void test_a_failed_write_fails_its_joiners_and_forgets_nothing(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a");
    uint64_t since = prov_intent_set_seq(s);
    prov_intent_set_join(s, a);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    free(text);
    prov_intent_set_flush_end(s, seq, -EIO);
    int err = 0;
    assert_int_equal(prov_intent_set_status(s, "ua", since, &err), PROV_INTENT_FAILED);
    assert_int_equal(err, -EIO);
    /* The write may have landed: a done entry stays until a write drops it. */
    prov_intent_set_done(s, "ua");
    size_t joiners, done;
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(done, 1);
    prov_intent_set_flush_begin(s, &text, &seq);
    assert_int_equal(entries_in(text), 0);
    free(text);
    prov_intent_set_flush_end(s, seq, 0);
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(done, 0);
    assert_false(prov_intent_set_has(s, "ua"));
    free(a);
    prov_intent_set_free(s);
}

static void test_done_entries_leave_with_the_next_write_only(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a"), *b = entry("ub", "b");
    prov_intent_set_join(s, a);
    prov_intent_set_join(s, b);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    free(text);
    prov_intent_set_flush_end(s, seq, 0);
    prov_intent_set_done(s, "ua");
    size_t joiners, done;
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(joiners, 0);
    assert_int_equal(done, 1); /* the record still names it: an idle write is due */
    prov_intent_set_flush_begin(s, &text, &seq);
    assert_int_equal(entries_in(text), 1);
    assert_null(strstr(text, "\"ua\""));
    free(text);
    prov_intent_set_flush_end(s, seq, 0);
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(done, 0);
    /* An entry done before it was ever written needs no write at all. */
    char *c = entry("uc", "c");
    prov_intent_set_join(s, c);
    prov_intent_set_done(s, "uc");
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(joiners + done, 0);
    free(a);
    free(b);
    free(c);
    prov_intent_set_free(s);
}

static void test_done_during_a_write_stays_until_the_following_one(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a");
    prov_intent_set_join(s, a);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    free(text);
    prov_intent_set_done(s, "ua"); /* the write under way still carries it */
    prov_intent_set_flush_end(s, seq, 0);
    size_t joiners, done;
    prov_intent_set_pending(s, &joiners, &done);
    assert_int_equal(done, 1);
    free(a);
    prov_intent_set_free(s);
}

static void test_a_done_entry_joined_again_is_wanted_again(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a");
    prov_intent_set_join(s, a);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    free(text);
    prov_intent_set_flush_end(s, seq, 0);
    prov_intent_set_done(s, "ua");
    /* Still in the record: durable again at once, no write needed. */
    assert_int_equal(prov_intent_set_join(s, a), PROV_INTENT_DURABLE);
    assert_true(prov_intent_set_has(s, "ua"));
    free(a);
    prov_intent_set_free(s);
}

static void test_bounds_hold_back_joiners_until_entries_are_done(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(2, 1 << 20);
    char *a = entry("ua", "a"), *b = entry("ub", "b"), *c = entry("uc", "c");
    assert_int_equal(prov_intent_set_join(s, a), PROV_INTENT_PENDING);
    assert_int_equal(prov_intent_set_join(s, b), PROV_INTENT_PENDING);
    assert_int_equal(prov_intent_set_join(s, c), PROV_INTENT_FULL);
    assert_int_equal(prov_intent_set_count(s), 2);
    prov_intent_set_done(s, "ua");
    assert_int_equal(prov_intent_set_join(s, c), PROV_INTENT_PENDING);
    prov_intent_set_free(s);
    /* The byte cap: room for one entry's text only. */
    s = prov_intent_set_new(100, strlen(a) + 1);
    assert_int_equal(prov_intent_set_join(s, a), PROV_INTENT_PENDING);
    assert_int_equal(prov_intent_set_join(s, b), PROV_INTENT_FULL);
    /* A joiner of an entry already there never waits for room. */
    assert_int_equal(prov_intent_set_join(s, a), PROV_INTENT_PENDING);
    prov_intent_set_free(s);
    free(a);
    free(b);
    free(c);
}

static void test_a_conflict_merges_unknown_entries_into_the_same_write(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("ua", "a"), *x = entry("ux", "x");
    prov_intent_set_join(s, a);
    char *text = NULL;
    uint64_t seq = 0;
    prov_intent_set_flush_begin(s, &text, &seq);
    free(text);
    /* The record read after the conflict names an entry of another writer. */
    char *rec = NULL;
    assert_true(asprintf(&rec, "{\"entries\":[%s]}", x) > 0);
    size_t skipped = 0;
    assert_int_equal(prov_intent_set_merge(s, rec, &skipped, NULL, NULL), 1);
    assert_int_equal(prov_intent_set_flush_text(s, &text), 0);
    assert_int_equal(entries_in(text), 2);
    free(text);
    prov_intent_set_flush_end(s, seq, 0);
    int err = 0;
    assert_int_equal(prov_intent_set_status(s, "ua", 0, &err), PROV_INTENT_DURABLE);
    assert_int_equal(prov_intent_set_status(s, "ux", 0, &err), PROV_INTENT_DURABLE);
    assert_int_equal(prov_intent_set_flush_text(s, &text), -EINVAL);
    free(rec);
    free(a);
    free(x);
    prov_intent_set_free(s);
}

static void test_each_finds_the_entries_of_one_claim_key(void **state)
{
    (void)state;
    prov_intent_set *s = prov_intent_set_new(100, 1 << 20);
    char *a = entry("u1", "a"), *a2 = entry("u2", "a"), *b = entry("u3", "b");
    prov_intent_set_join(s, a);
    prov_intent_set_join(s, a2);
    prov_intent_set_join(s, b);
    int n = 0;
    assert_int_equal(prov_intent_set_each(s, "default", "a", count_cb, &n), 2);
    assert_int_equal(n, 2);
    prov_intent_set_done(s, "u1");
    assert_int_equal(prov_intent_set_each(s, "default", "a", count_cb, &n), 1);
    assert_int_equal(prov_intent_set_each(s, "other", "a", count_cb, &n), 0);
    /* The claim's last wanted entry done: none left for the key; joined
     * again (a retried create), it is found again. */
    prov_intent_set_done(s, "u2");
    assert_int_equal(prov_intent_set_each(s, "default", "a", count_cb, &n), 0);
    assert_int_equal(prov_intent_set_each(s, "default", "b", count_cb, &n), 1);
    prov_intent_set_join(s, a2);
    assert_int_equal(prov_intent_set_each(s, "default", "a", count_cb, &n), 1);
    assert_true(prov_intent_set_has(s, "u2"));
    assert_false(prov_intent_set_has(s, "u1"));
    /* Flushed and written without them, done entries leave memory. */
    char *text = NULL;
    uint64_t seq = 0;
    assert_int_equal(prov_intent_set_flush_begin(s, &text, &seq), 0);
    prov_intent_set_flush_end(s, seq, 0);
    free(text);
    assert_false(prov_intent_set_has(s, "u1"));
    assert_int_equal(prov_intent_set_count(s), 2);
    assert_int_equal(prov_intent_set_each(s, NULL, NULL, count_cb, &n), 2);
    free(a);
    free(a2);
    free(b);
    prov_intent_set_free(s);
}

/* ---- names ------------------------------------------------------------------------------- */

static void test_record_name_is_a_valid_object_name(void **state)
{
    (void)state;
    static const struct {
        const char *name, *driver, *node, *want;
    } rows[] = {
        {"driver with dots", "hostpath.csi.example.com", NULL,
         "hostpath-csi-example-com-provisioner-intents"},
        {"node mode adds the node", "hostpath.csi.example.com", "node-1",
         "hostpath-csi-example-com-provisioner-intents-node-1"},
        {"upper case and slashes are folded", "Ex/Driver_A", "Node.A",
         "ex-driver-a-provisioner-intents-node-a"},
        {"leading and trailing separators go", "..drv..", NULL, "drv-provisioner-intents"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *got = prov_intent_record_name(rows[i].driver, rows[i].node);
        if (strcmp(got, rows[i].want) != 0)
            fail_msg("[%s] got %s want %s", rows[i].name, got, rows[i].want);
        free(got);
    }
    char node[300];
    memset(node, 'n', sizeof(node) - 1);
    node[sizeof(node) - 1] = '\0';
    char *a = prov_intent_record_name("drv", node);
    node[0] = 'm';
    char *b = prov_intent_record_name("drv", node);
    assert_true(strlen(a) <= PROV_INTENT_NAME_MAX);
    assert_string_not_equal(a, b); /* a hash keeps long names apart */
    free(a);
    free(b);
}

/* ---- recovery decisions -------------------------------------------------------------------- */

static void test_recovery_decides_from_claim_pv_and_class(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        prov_intent_facts f;
        prov_intent_action want;
    } rows[] = {
        {"PV exists: done (a gone claim's PV is released and deleted the normal way)",
         {.pv_exists = true, .class_exists = true, .volume = "v"},
         PROV_INTENT_DONE},
        {"PV exists without class: still done, never a second delete",
         {.pv_exists = true, .volume = "v"},
         PROV_INTENT_DONE},
        {"claim alive and unbound: the normal sync finishes it",
         {.claim_alive = true, .class_exists = true, .volume = "v"},
         PROV_INTENT_SYNC},
        {"claim alive, empty volumeName: the normal sync",
         {.claim_alive = true, .claim_bound_to = "", .class_exists = true, .volume = "v"},
         PROV_INTENT_SYNC},
        {"claim bound to our volume: done",
         {.claim_alive = true, .claim_bound_to = "v", .volume = "v"},
         PROV_INTENT_DONE},
        {"claim bound to another volume: ours is undone",
         {.claim_alive = true, .claim_bound_to = "w", .class_exists = true, .volume = "v"},
         PROV_INTENT_CLEANUP},
        {"claim gone, no PV: repeat CreateVolume and delete",
         {.class_exists = true, .volume = "v"},
         PROV_INTENT_CLEANUP},
        {"claim gone, no PV, class gone: keep and retry", {.volume = "v"}, PROV_INTENT_WAIT_CLASS},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_intent_action got = prov_intent_recover(&rows[i].f);
        if (got != rows[i].want)
            fail_msg("[%s] got %s want %s", rows[i].name, prov_intent_action_name(got),
                     prov_intent_action_name(rows[i].want));
    }
}

/* ---- the idle writer's lifetime (intent.c, against kube-lite) ------------------------------- */

/* Polls (up to ~30 s: the idle write comes INTENT_IDLE, 5 s, after the
 * last activity) until `want` threads are named "intent-idle". */
static int wait_idle_threads(int want)
{
    int n = th_threads_named("intent-idle", NULL);
    for (int i = 0; i < 3000 && n != want; i++) {
        util_sleep(10 * UTIL_MS);
        n = th_threads_named("intent-idle", NULL);
    }
    return n;
}

/* The record's annotation as kube-lite holds it ("" when none). */
static char *record_text(kube_client *kc, const char *path)
{
    kube_resp r = {0};
    char *text = NULL;
    if (kube_get(kc, path, &r) == 0) {
        const char *t = kobj_annotation(r.body, PROV_INTENT_ANNOTATION);
        text = strdup(t ? t : "");
    }
    kube_resp_clear(&r);
    assert_non_null(text);
    return text;
}

/* A done entry starts the idle writer; once the idle write dropped it the
 * thread leaves, and the next done entry starts it again. */
static void
test_intent_idle_writer_leaves_when_clean_and_restarts_for_the_next_done_entry(void **state)
{
    (void)state;
    char *url = NULL, *kubeconfig = NULL;
    pid_t server = th_kube_lite(NULL, &url, &kubeconfig);
    assert_true(server > 0);
    kube_config *cfg = NULL;
    assert_int_equal(kube_config_from_file(kubeconfig, NULL, &cfg), 0);
    kube_client_opts ko = {.user_agent = "test_prov_intent/test"};
    kube_client *kc = NULL;
    assert_int_equal(kube_client_new(cfg, &ko, &kc), 0);

    prov_ctrl *c = calloc(1, sizeof(*c));
    assert_non_null(c);
    c->o.kube = kc;
    c->o.intent_namespace = "default";
    c->o.workers = 1;
    c->cfg.driver_name = "idle.csi.example.com";
    assert_int_equal(ctrl_intents_start(c), 0);
    char *name = prov_intent_record_name(c->cfg.driver_name, NULL);
    char *path = kube_path(&KUBE_LEASE, "default", name, NULL);
    assert_int_equal(th_threads_named("intent-idle", NULL), 0); /* nothing done: no idle writer */

    static const struct {
        const char *uid, *claim;
    } rows[] = {{"u-first", "first"}, {"u-again", "again"}};
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *text = entry(rows[i].uid, rows[i].claim);
        json_object *in = json_tokener_parse(text);
        json_object *pvc = NULL;
        json_object_object_get_ex(in, "claim", &pvc);
        assert_int_equal(ctrl_intent_join(c, pvc, NULL, "pvc-x"), 0);
        json_object_put(in);
        free(text);
        char *rec = record_text(kc, path);
        assert_non_null(strstr(rec, rows[i].uid)); /* written before CreateVolume */
        free(rec);
        ctrl_intent_done(c, rows[i].uid);
        if (wait_idle_threads(1) != 1)
            fail_msg("%s: no idle writer after a done entry", rows[i].claim);
        /* The idle write drops the entry; nothing is left, the thread goes. */
        assert_int_equal(wait_idle_threads(0), 0);
        rec = record_text(kc, path);
        if (strstr(rec, rows[i].uid))
            fail_msg("%s: still in the record after the idle writer left: %s", rows[i].claim, rec);
        free(rec);
    }
    ctrl_intents_free(c);
    free(c);
    free(name);
    free(path);
    kube_client_free(kc);
    kube_config_free(cfg);
    int st = th_stop(server, SIGTERM);
    assert_true(WIFEXITED(st));
    free(url);
    free(kubeconfig);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode_keeps_what_the_repeat_needs_and_nothing_else),
        cmocka_unit_test(test_encode_of_a_huge_template_annotation_keeps_the_entry_without_it),
        cmocka_unit_test(test_merge_reads_hostile_records_without_trusting_them),
        cmocka_unit_test(test_merge_skips_a_record_text_over_the_limit),
        cmocka_unit_test(test_merged_entries_are_durable_and_read_back_as_a_claim),
        cmocka_unit_test(test_concurrent_joiners_share_one_write),
        cmocka_unit_test(test_a_joiner_after_the_write_started_waits_for_the_next),
        cmocka_unit_test(test_a_failed_write_fails_its_joiners_and_forgets_nothing),
        cmocka_unit_test(test_done_entries_leave_with_the_next_write_only),
        cmocka_unit_test(test_done_during_a_write_stays_until_the_following_one),
        cmocka_unit_test(test_a_done_entry_joined_again_is_wanted_again),
        cmocka_unit_test(test_bounds_hold_back_joiners_until_entries_are_done),
        cmocka_unit_test(test_a_conflict_merges_unknown_entries_into_the_same_write),
        cmocka_unit_test(test_each_finds_the_entries_of_one_claim_key),
        cmocka_unit_test(test_record_name_is_a_valid_object_name),
        cmocka_unit_test(test_recovery_decides_from_claim_pv_and_class),
        cmocka_unit_test(
            test_intent_idle_writer_leaves_when_clean_and_restarts_for_the_next_done_entry),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
