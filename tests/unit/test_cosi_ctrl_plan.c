/*
 * Unit tests for objectstorage-controller's pure core (cosi/controller/plan.c),
 * checked against the shared COSI design (greenfield, brownfield, deletion)
 * and upstream v0.2.2's names and messages. Every table row is one rule and
 * names it; a failing row prints its name. Every write is asserted as its
 * exact text.
 *
 * JSON fixtures and expected texts are written with ` for " so they stay
 * readable; Q() turns them back.
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

#include "cosi/controller/controller.h"
#include "cosi/cosi.h"
#include "kobj/kobj.h"
#include "table.h"

/* ---- fixtures ---------------------------------------------------------------------------- */

#define FIN     "cosi.objectstorage.k8s.io/bucketclaim-protection"
#define ID      "`name`:`c1`,`namespace`:`ns1`,`uid`:`u-1`,`resourceVersion`:`7`"
#define MD      "`metadata`:{" ID "}"
#define MD_FIN  "`metadata`:{" ID ",`finalizers`:[`" FIN "`]}"
#define DEL_TS  "`deletionTimestamp`:`2024-01-01T00:00:00Z`"
#define MD_DEL  "`metadata`:{" ID "," DEL_TS ",`finalizers`:[`" FIN "`]}"
#define SPEC_G  "`spec`:{`bucketClassName`:`gold`,`protocols`:[`S3`]}"
#define SPEC_B  "`spec`:{`existingBucketName`:`old`,`protocols`:[`S3`]}"
#define ST_NAME "`status`:{`bucketName`:`bucket-u-1`}"

#define CLASS                                                                                      \
    "{`metadata`:{`name`:`gold`},`driverName`:`cosi.example.com`,`deletionPolicy`:`Delete`,`"      \
    "parameters`:{`tier`:`fast`}}"

#define REF_US "`bucketClaim`:{`name`:`c1`,`namespace`:`ns1`,`uid`:`u-1`}"
#define B_OURS                                                                                     \
    "{`metadata`:{`name`:`bucket-u-1`,`uid`:`b-1`,`resourceVersion`:`9`},`spec`:{" REF_US          \
    ",`protocols`:[`S3`]}}"
#define B_OURS_DYING                                                                               \
    "{`metadata`:{`name`:`bucket-u-1`,`uid`:`b-1`,`resourceVersion`:`9`," DEL_TS                   \
    "},`spec`:{" REF_US ",`protocols`:[`S3`]}}"
#define B_OTHER                                                                                    \
    "{`metadata`:{`name`:`bucket-u-1`,`uid`:`b-1`,`resourceVersion`:`9`},`spec`:{`bucketClaim`:{`" \
    "name`:`c9`,`namespace`:`ns9`,`uid`:`u-9`}}}"
#define B_NO_UID                                                                                   \
    "{`metadata`:{`name`:`bucket-u-1`,`uid`:`b-1`,`resourceVersion`:`9`},`spec`:{`bucketClaim`:{`" \
    "name`:`c1`,`namespace`:`ns1`}}}"
#define OLD_FREE                                                                                   \
    "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{`driverName`:`d`,`"      \
    "protocols`:[]}}"
#define OLD_OURS                                                                                   \
    "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{" REF_US                 \
    ",`protocols`:[`S3`]}}"
#define OLD_OURS_GCP                                                                               \
    "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{" REF_US                 \
    ",`protocols`:[`GCP`]}}"
#define OLD_OTHER                                                                                  \
    "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{`bucketClaim`:{`name`:`" \
    "c9`,`namespace`:`ns9`,`uid`:`u-9`},`protocols`:[`S3`]}}"
#define OLD_DYING                                                                                  \
    "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`," DEL_TS "},`spec`:{}}"

/* Expected texts. */
#define TEST_RV(rv) "{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`" rv "`}"
#define T_ADD_FIN                                                                                  \
    "[" TEST_RV("7") ",{`op`:`add`,`path`:`/metadata/finalizers`,`value`:[`" FIN "`]}]"
#define T_APPEND_FIN                                                                               \
    "[" TEST_RV("7") ",{`op`:`add`,`path`:`/metadata/finalizers/-`,`value`:`" FIN "`}]"
#define T_REMOVE_FIN(i)                                                                            \
    "[" TEST_RV("7") ",{`op`:`test`,`path`:`/metadata/finalizers/" #i "`,`value`:`" FIN            \
                     "`},{`op`:`remove`,`path`:`/metadata/finalizers/" #i "`}]"
#define T_CREATE                                                                                   \
    "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`bucket-u-"  \
    "1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`driverName`:`cosi." \
    "example.com`,`bucketClassName`:`gold`," REF_US ",`protocols`:[`S3`],`parameters`:{`tier`:`"   \
    "fast`},`deletionPolicy`:`Delete`}}"
#define T_STATUS_NOT_READY                                                                         \
    "{`metadata`:{`resourceVersion`:`7`},`status`:{`bucketName`:`bucket-u-1`,`bucketReady`:false}" \
    "}"
#define T_STATUS_READY_OLD                                                                         \
    "{`metadata`:{`resourceVersion`:`7`},`status`:{`bucketName`:`old`,`bucketReady`:true}}"
#define T_BIND "{`metadata`:{`resourceVersion`:`3`},`spec`:{" REF_US ",`protocols`:[`S3`]}}"
#define T_DELETE_B1                                                                                \
    "{`kind`:`DeleteOptions`,`apiVersion`:`v1`,`preconditions`:{`uid`:`b-1`,`resourceVersion`:`9`" \
    "}}"
#define T_DELETE_B2                                                                                \
    "{`kind`:`DeleteOptions`,`apiVersion`:`v1`,`preconditions`:{`uid`:`b-2`,`resourceVersion`:`3`" \
    "}}"

#define NO_CLASS_MSG "cannot find bucket class with the name specified in the bucket claim"
#define FCB          "FailedCreateBucket"

/* ---- names ---------------------------------------------------------------------------------- */

static void test_lease_name_is_cosi_sanitized(void **state)
{
    (void)state;
    static const struct {
        const char *row, *in, *want;
    } rows[] = {
        {"the controller's lock", CCTL_LOCK_NAME, "leader-lock-cosi-controller-manager"},
        {"a sidecar's lock", "cosi.example.com/cosi", "cosi-example-com-cosi"},
        {"upper case goes lower", "Leader/COSI", "leader-cosi"},
        {"a trailing dash gets an X", "driver/", "driver-X"},
        {"an original trailing dash gets an X too", "driver-", "driver-X"},
        {"underscores and spaces become dashes", "a_b c", "a-b-c"},
        {"a multi-byte character (one rune) becomes one dash", "\xc3\xa9", "-X"},
        {"each invalid byte becomes a dash",
         "a\xff\xfe"
         "b",
         "a--b"},
        {"digits and dashes stay", "0-9", "0-9"},
        {"empty stays empty", "", ""},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *got = cosi_lease_name(rows[i].in);
        expect_str(rows[i].row, "lease", got, rows[i].want);
        free(got);
    }
    char *n = cosi_lease_name(NULL);
    expect_str("NULL is empty", "lease", n, "");
    free(n);
    char big[600];
    memset(big, '.', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    n = cosi_lease_name(big);
    expect_int("a huge name keeps its length plus the X", "length", (long long)strlen(n), 600);
    expect_int("a huge name ends in X", "last", n[599], 'X');
    free(n);
}

static void test_resource_versions_compare_as_integers(void **state)
{
    (void)state;
    static const struct {
        const char *row, *a, *b;
        int want;
    } rows[] = {
        {"smaller", "9", "10", -1},
        {"equal", "10", "10", 0},
        {"larger", "11", "10", 1},
        {"not a number", "abc", "1", -2},
        {"empty", "", "1", -2},
        {"NULL", NULL, "1", -2},
        {"longer than 64 bits still compares by value", "12345678901234567890", "1", 1},
        {"leading zeros do not count", "007", "7", 0},
        {"19 digits fit", "1234567890123456789", "1", 1},
        {"a sign is no digit", "-1", "1", -2},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_int(rows[i].row, "cmp", kobj_rv_cmp(rows[i].a, rows[i].b), rows[i].want);
}

static void test_bucket_name_by_claim_state(void **state)
{
    (void)state;
    static const struct {
        const char *row, *claim, *want;
    } rows[] = {
        {"greenfield: bucket- and the UID", "{" MD "," SPEC_G "}", "bucket-u-1"},
        {"brownfield: the existing name", "{" MD "," SPEC_B "}", "old"},
        {"an empty existing name is greenfield",
         "{" MD ",`spec`:{`existingBucketName`:``,`bucketClassName`:`gold`}}", "bucket-u-1"},
        {"an existing name of the wrong type is greenfield",
         "{" MD ",`spec`:{`existingBucketName`:7}}", "bucket-u-1"},
        {"status.bucketName is ignored while the claim lives",
         "{" MD "," SPEC_G ",`status`:{`bucketName`:`elsewhere`}}", "bucket-u-1"},
        {"being deleted: status.bucketName first",
         "{" MD_DEL "," SPEC_B ",`status`:{`bucketName`:`elsewhere`}}", "elsewhere"},
        {"being deleted without status: the existing name", "{" MD_DEL "," SPEC_B "}", "old"},
        {"being deleted, greenfield, no status: the generated name", "{" MD_DEL "," SPEC_G "}",
         "bucket-u-1"},
        {"being deleted, status.bucketName of the wrong type: the generated name",
         "{" MD_DEL "," SPEC_G ",`status`:{`bucketName`:[]}}", "bucket-u-1"},
        {"no UID: none", "{`metadata`:{`name`:`c1`}," SPEC_G "}", NULL},
        {"a UID of the wrong type: none", "{`metadata`:{`uid`:1}," SPEC_G "}", NULL},
        {"not an object: none", "[1]", NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *c = J(rows[i].claim);
        char *got = cctl_bucket_name(c);
        expect_str(rows[i].row, "bucket name", got, rows[i].want);
        free(got);
        json_object_put(c);
    }
}

static void test_bucket_binding_reads(void **state)
{
    (void)state;
    static const struct {
        const char *row, *bucket;
        bool bound;
        const char *key;
    } rows[] = {
        {"bound to us", B_OURS, true, "ns1/c1"},
        {"bound to another", B_OTHER, false, "ns9/c9"},
        {"a reference without uid binds nobody", B_NO_UID, false, "ns1/c1"},
        {"no reference", OLD_FREE, false, NULL},
        {"a reference of the wrong type", "{`spec`:{`bucketClaim`:`ns1/c1`}}", false, NULL},
        {"an empty namespace gives no key",
         "{`spec`:{`bucketClaim`:{`name`:`c1`,`namespace`:``,`uid`:`u-1`}}}", true, NULL},
        {"a name of the wrong type gives no key",
         "{`spec`:{`bucketClaim`:{`name`:1,`namespace`:`ns1`,`uid`:`u-1`}}}", true, NULL},
        {"an empty uid binds nobody",
         "{`spec`:{`bucketClaim`:{`name`:`c1`,`namespace`:`ns1`,`uid`:``}}}", false, "ns1/c1"},
    };
    json_object *claim = J("{" MD "," SPEC_G "}");
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *b = J(rows[i].bucket);
        expect_int(rows[i].row, "bound", cctl_bucket_bound_to(b, claim), rows[i].bound);
        char *key = cctl_bucket_claim_key(b);
        expect_str(rows[i].row, "key", key, rows[i].key);
        free(key);
        json_object_put(b);
    }
    json_object *no_uid = J("{`metadata`:{`name`:`c1`}}");
    json_object *b = J(B_NO_UID);
    expect_int("a claim without UID is bound to nothing", "bound", cctl_bucket_bound_to(b, no_uid),
               false);
    json_object_put(b);
    json_object_put(no_uid);
    json_object_put(claim);
}

/* ---- the decision ------------------------------------------------------------------------------
 */

struct plan_row {
    const char *row, *claim, *cls, *bucket;
    cctl_step step;
    const char *bucket_name; /* plan.bucket */
    const char *text;        /* backtick-written */
    const char *reason, *message;
    bool confirm;
};

static void check_plan_rows(const struct plan_row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct plan_row *r = &rows[i];
        json_object *claim = J(r->claim), *cls = J(r->cls), *bucket = J(r->bucket);
        cctl_plan p;
        int rc = cctl_plan_next(claim, cls, bucket, &p);
        if (rc != 0)
            fail_msg("[%s] rc %d: %s", r->row, rc, util_err_last());
        expect_int(r->row, "step", p.step, r->step);
        expect_str(r->row, "bucket", p.bucket, r->bucket_name);
        expect_text(r->row, "text", p.text, r->text);
        expect_str(r->row, "reason", p.reason, r->reason);
        expect_text(r->row, "message", p.message, r->message);
        expect_int(r->row, "confirm", p.confirm, r->confirm);
        cctl_plan_clear(&p);
        json_object_put(claim);
        json_object_put(cls);
        json_object_put(bucket);
    }
}

static void test_greenfield_steps(void **state)
{
    (void)state;
    static const struct plan_row rows[] = {
        {"1: the finalizer first, guarded by the resourceVersion", "{" MD "," SPEC_G "}", CLASS,
         NULL, CCTL_ADD_FINALIZER, "bucket-u-1", T_ADD_FIN, NULL, NULL, false},
        {"1: a finalizer list that exists is appended to",
         "{`metadata`:{" ID ",`finalizers`:[`other`]}," SPEC_G "}", CLASS, NULL, CCTL_ADD_FINALIZER,
         "bucket-u-1", T_APPEND_FIN, NULL, NULL, false},
        {"2: then the Bucket, with its protection finalizer and the class's settings",
         "{" MD_FIN "," SPEC_G "}", CLASS, NULL, CCTL_CREATE_BUCKET, "bucket-u-1", T_CREATE, NULL,
         NULL, false},
        {"3: then the status, not ready (also after AlreadyExists of our own Bucket)",
         "{" MD_FIN "," SPEC_G "}", CLASS, B_OURS, CCTL_SET_STATUS, "bucket-u-1",
         T_STATUS_NOT_READY, NULL, NULL, false},
        {"status written: wait for the sidecar", "{" MD_FIN "," SPEC_G "," ST_NAME "}", CLASS,
         B_OURS, CCTL_NONE, "bucket-u-1", NULL, NULL, NULL, false},
        {"ready: nothing, whatever else is missing",
         "{" MD "," SPEC_G ",`status`:{`bucketReady`:true}}", NULL, NULL, CCTL_NONE, NULL, NULL,
         NULL, NULL, false},
        {"bucketReady of the wrong type reads as false",
         "{" MD "," SPEC_G ",`status`:{`bucketReady`:`true`}}", CLASS, NULL, CCTL_ADD_FINALIZER,
         "bucket-u-1", T_ADD_FIN, NULL, NULL, false},
        {"an empty class name: FailedCreateBucket, no write",
         "{" MD ",`spec`:{`bucketClassName`:``}}", CLASS, NULL, CCTL_FAIL, NULL, NULL, FCB,
         NO_CLASS_MSG, false},
        {"no class name at all", "{" MD ",`spec`:{}}", NULL, NULL, CCTL_FAIL, NULL, NULL, FCB,
         NO_CLASS_MSG, false},
        {"a class name of the wrong type", "{" MD ",`spec`:{`bucketClassName`:5}}", CLASS, NULL,
         CCTL_FAIL, NULL, NULL, FCB, NO_CLASS_MSG, false},
        {"a spec of the wrong type", "{" MD ",`spec`:`gold`}", CLASS, NULL, CCTL_FAIL, NULL, NULL,
         FCB, NO_CLASS_MSG, false},
        {"a missing class: its not-found text, before any write", "{" MD "," SPEC_G "}", NULL, NULL,
         CCTL_FAIL, "bucket-u-1", NULL, FCB, "bucketclasses.objectstorage.k8s.io `gold` not found",
         false},
        {"a missing class once the Bucket exists: the status still goes", "{" MD_FIN "," SPEC_G "}",
         NULL, B_OURS, CCTL_SET_STATUS, "bucket-u-1", T_STATUS_NOT_READY, NULL, NULL, false},
        {"AlreadyExists of another claim's Bucket: FailedCreateBucket", "{" MD_FIN "," SPEC_G "}",
         CLASS, B_OTHER, CCTL_FAIL, "bucket-u-1", NULL, FCB,
         "buckets.objectstorage.k8s.io `bucket-u-1` already exists and is not bound to this "
         "BucketClaim",
         false},
        {"a Bucket of our name bound without UID is not ours", "{" MD_FIN "," SPEC_G "}", CLASS,
         B_NO_UID, CCTL_FAIL, "bucket-u-1", NULL, FCB,
         "buckets.objectstorage.k8s.io `bucket-u-1` already exists and is not bound to this "
         "BucketClaim",
         false},
        {"our Bucket being deleted: wait for it to go", "{" MD_FIN "," SPEC_G "," ST_NAME "}",
         CLASS, B_OURS_DYING, CCTL_NONE, "bucket-u-1", NULL, NULL, NULL, false},
        {"the status names the Bucket but it is gone: make it again",
         "{" MD_FIN "," SPEC_G "," ST_NAME "}", CLASS, NULL, CCTL_CREATE_BUCKET, "bucket-u-1",
         T_CREATE, NULL, NULL, false},
        {"never turn a status back: bucketName set, nothing more",
         "{" MD_FIN "," SPEC_G ",`status`:{`bucketName`:`bucket-u-1`,`bucketReady`:false}}", CLASS,
         B_OURS, CCTL_NONE, "bucket-u-1", NULL, NULL, NULL, false},
        {"a status.bucketName of the wrong type reads as unset",
         "{" MD_FIN "," SPEC_G ",`status`:{`bucketName`:5}}", CLASS, B_OURS, CCTL_SET_STATUS,
         "bucket-u-1", T_STATUS_NOT_READY, NULL, NULL, false},
        {"an existing name of the wrong type is greenfield",
         "{" MD ",`spec`:{`bucketClassName`:`gold`,`existingBucketName`:true}}", CLASS, NULL,
         CCTL_ADD_FINALIZER, "bucket-u-1", T_ADD_FIN, NULL, NULL, false},
        {"the status of the wrong type reads as empty", "{" MD_FIN "," SPEC_G ",`status`:7}", CLASS,
         B_OURS, CCTL_SET_STATUS, "bucket-u-1", T_STATUS_NOT_READY, NULL, NULL, false},
    };
    check_plan_rows(rows, N_ROWS(rows));
}

static void test_brownfield_steps(void **state)
{
    (void)state;
    static const struct plan_row rows[] = {
        {"the Bucket missing: its not-found text, no write", "{" MD "," SPEC_B "}", NULL, NULL,
         CCTL_FAIL, "old", NULL, FCB, "buckets.objectstorage.k8s.io `old` not found", false},
        {"bound to another claim: refused, the other not named", "{" MD_FIN "," SPEC_B "}", NULL,
         OLD_OTHER, CCTL_FAIL, "old", NULL, FCB,
         "buckets.objectstorage.k8s.io `old` is bound to another BucketClaim", false},
        {"being deleted: refused", "{" MD "," SPEC_B "}", NULL, OLD_DYING, CCTL_FAIL, "old", NULL,
         FCB, "buckets.objectstorage.k8s.io `old` is being deleted", false},
        {"1: the finalizer first", "{" MD "," SPEC_B "}", NULL, OLD_FREE, CCTL_ADD_FINALIZER, "old",
         T_ADD_FIN, NULL, NULL, false},
        {"2: then the binding, guarded by the Bucket's resourceVersion", "{" MD_FIN "," SPEC_B "}",
         NULL, OLD_FREE, CCTL_BIND_BUCKET, "old", T_BIND, NULL, NULL, false},
        {"2: bound to us with other protocols: bound again", "{" MD_FIN "," SPEC_B "}", NULL,
         OLD_OURS_GCP, CCTL_BIND_BUCKET, "old", T_BIND, NULL, NULL, false},
        {"2: a reference without uid is completed", "{" MD_FIN "," SPEC_B "}", NULL,
         "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{`bucketClaim`:{`"
         "name`:`c1`,`namespace`:`ns1`},`protocols`:[`S3`]}}",
         CCTL_BIND_BUCKET, "old", T_BIND, NULL, NULL, false},
        {"2: a reference of the wrong type counts as none", "{" MD_FIN "," SPEC_B "}", NULL,
         "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{`bucketClaim`:`c1`"
         "}}",
         CCTL_BIND_BUCKET, "old", T_BIND, NULL, NULL, false},
        {"3: bound: the status, ready at once", "{" MD_FIN "," SPEC_B "}", NULL, OLD_OURS,
         CCTL_SET_STATUS, "old", T_STATUS_READY_OLD, NULL, NULL, false},
        {"no protocols on either side are equal",
         "{" MD_FIN ",`spec`:{`existingBucketName`:`old`}}", NULL,
         "{`metadata`:{`name`:`old`,`uid`:`b-2`,`resourceVersion`:`3`},`spec`:{" REF_US "}}",
         CCTL_SET_STATUS, "old", T_STATUS_READY_OLD, NULL, NULL, false},
        {"a class is neither needed nor read",
         "{" MD_FIN ",`spec`:{`existingBucketName`:`old`,`bucketClassName`:`gone`,`protocols`:[`"
         "S3`]}}",
         NULL, OLD_OURS, CCTL_SET_STATUS, "old", T_STATUS_READY_OLD, NULL, NULL, false},
        {"ready: nothing", "{" MD_FIN "," SPEC_B ",`status`:{`bucketReady`:true}}", NULL, NULL,
         CCTL_NONE, NULL, NULL, NULL, NULL, false},
    };
    check_plan_rows(rows, N_ROWS(rows));
}

static void test_deletion_steps(void **state)
{
    (void)state;
    static const struct plan_row rows[] = {
        {"without our finalizer: nothing",
         "{`metadata`:{" ID "," DEL_TS ",`finalizers`:[`x`]}," SPEC_G "," ST_NAME "}", NULL, B_OURS,
         CCTL_NONE, NULL, NULL, NULL, NULL, false},
        {"our Bucket: deleted, under its uid and resourceVersion",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL, B_OURS, CCTL_DELETE_BUCKET, "bucket-u-1",
         T_DELETE_B1, NULL, NULL, false},
        {"our Bucket being deleted already: wait for the sidecar",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL, B_OURS_DYING, CCTL_NONE, "bucket-u-1", NULL,
         NULL, NULL, false},
        {"no Bucket in the cache: the finalizer goes once a GET confirms",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL, NULL, CCTL_REMOVE_FINALIZER, "bucket-u-1",
         T_REMOVE_FIN(0), NULL, NULL, true},
        {"no status (the Bucket was never made): the generated name is looked for",
         "{" MD_DEL "," SPEC_G "}", NULL, NULL, CCTL_REMOVE_FINALIZER, "bucket-u-1",
         T_REMOVE_FIN(0), NULL, NULL, true},
        {"the Bucket is another claim's: left alone, the finalizer goes once a GET confirms",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL, B_OTHER, CCTL_REMOVE_FINALIZER, "bucket-u-1",
         T_REMOVE_FIN(0), NULL, NULL, true},
        {"the status names a Bucket with no claim UID: deleted (upstream deletes what status "
         "names)",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL, B_NO_UID, CCTL_DELETE_BUCKET, "bucket-u-1",
         T_DELETE_B1, NULL, NULL, false},
        {"brownfield never bound: a free Bucket found by name is not ours",
         "{" MD_DEL "," SPEC_B "}", NULL, OLD_FREE, CCTL_REMOVE_FINALIZER, "old", T_REMOVE_FIN(0),
         NULL, NULL, true},
        {"brownfield bound and ready: deleted",
         "{" MD_DEL "," SPEC_B ",`status`:{`bucketName`:`old`,`bucketReady`:true}}", NULL, OLD_OURS,
         CCTL_DELETE_BUCKET, "old", T_DELETE_B2, NULL, NULL, false},
        {"brownfield bound, status not yet written (a crash between): our UID makes it ours",
         "{" MD_DEL "," SPEC_B "}", NULL, OLD_OURS, CCTL_DELETE_BUCKET, "old", T_DELETE_B2, NULL,
         NULL, false},
        {"brownfield bound to another: left alone", "{" MD_DEL "," SPEC_B "}", NULL, OLD_OTHER,
         CCTL_REMOVE_FINALIZER, "old", T_REMOVE_FIN(0), NULL, NULL, true},
        {"our finalizer second in the list: its own index is tested and removed",
         "{`metadata`:{" ID "," DEL_TS ",`finalizers`:[`x`,`" FIN "`]}," SPEC_G "}", NULL, NULL,
         CCTL_REMOVE_FINALIZER, "bucket-u-1", T_REMOVE_FIN(1), NULL, NULL, true},
        {"a finalizer item of the wrong type is skipped, never compared",
         "{`metadata`:{" ID "," DEL_TS ",`finalizers`:[5,`" FIN "`]}," SPEC_G "}", NULL, NULL,
         CCTL_REMOVE_FINALIZER, "bucket-u-1", T_REMOVE_FIN(1), NULL, NULL, true},
        {"finalizers of the wrong type: none of ours, nothing",
         "{`metadata`:{" ID "," DEL_TS ",`finalizers`:`" FIN "`}," SPEC_G "}", NULL, NULL,
         CCTL_NONE, NULL, NULL, NULL, NULL, false},
        {"a ready claim being deleted still takes its Bucket",
         "{" MD_DEL "," SPEC_G ",`status`:{`bucketName`:`bucket-u-1`,`bucketReady`:true}}", NULL,
         B_OURS, CCTL_DELETE_BUCKET, "bucket-u-1", T_DELETE_B1, NULL, NULL, false},
    };
    check_plan_rows(rows, N_ROWS(rows));
}

static void test_plan_refuses_what_it_cannot_write(void **state)
{
    (void)state;
    static const struct {
        const char *row, *claim, *cls, *bucket, *msg;
    } rows[] = {
        {"not an object", "[1]", NULL, NULL, "BucketClaim without metadata"},
        {"metadata of the wrong type", "{`metadata`:5," SPEC_G "}", CLASS, NULL,
         "BucketClaim without metadata"},
        {"no resourceVersion for the finalizer's guard",
         "{`metadata`:{`name`:`c1`,`namespace`:`ns1`,`uid`:`u-1`}," SPEC_G "}", CLASS, NULL,
         "BucketClaim c1: malformed metadata (no resourceVersion or UID)"},
        {"finalizers of the wrong type cannot be added to",
         "{`metadata`:{" ID ",`finalizers`:{}}," SPEC_G "}", CLASS, NULL,
         "BucketClaim c1: malformed metadata (no resourceVersion or UID)"},
        {"greenfield without UID", "{`metadata`:{`name`:`c1`,`resourceVersion`:`7`}," SPEC_G "}",
         CLASS, NULL, "BucketClaim c1: no usable metadata.uid"},
        {"a brownfield Bucket without resourceVersion cannot be bound", "{" MD_FIN "," SPEC_B "}",
         NULL, "{`metadata`:{`name`:`old`,`uid`:`b-2`},`spec`:{}}",
         "Bucket old: malformed metadata (no resourceVersion or UID)"},
        {"a Bucket without uid cannot be deleted under a precondition",
         "{" MD_DEL "," SPEC_G "," ST_NAME "}", NULL,
         "{`metadata`:{`name`:`bucket-u-1`,`resourceVersion`:`9`},`spec`:{}}",
         "Bucket bucket-u-1: malformed metadata (no resourceVersion or UID)"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *claim = J(rows[i].claim), *cls = J(rows[i].cls), *b = J(rows[i].bucket);
        cctl_plan p;
        int rc = cctl_plan_next(claim, cls, b, &p);
        expect_int(rows[i].row, "rc", rc, -EINVAL);
        expect_str(rows[i].row, "message", util_err_last(), rows[i].msg);
        expect_int(rows[i].row, "step after an error", p.step, CCTL_NONE);
        if (p.bucket || p.text || p.message)
            fail_msg("[%s] the plan keeps allocations after an error", rows[i].row);
        json_object_put(claim);
        json_object_put(cls);
        json_object_put(b);
    }
    cctl_plan_clear(NULL);
}

/* ---- texts ------------------------------------------------------------------------------------
 */

static void test_bucket_object_texts(void **state)
{
    (void)state;
    static const struct {
        const char *row, *claim, *cls, *want;
    } rows[] = {
        {"the whole Bucket", "{" MD "," SPEC_G "}", CLASS, T_CREATE},
        {"no parameters: left out (Go's omitempty)", "{" MD "," SPEC_G "}",
         "{`driverName`:`d`,`deletionPolicy`:`Retain`}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:`d`,`bucketClassName`:`gold`," REF_US
         ",`protocols`:[`S3`],`deletionPolicy`:`Retain`}}"},
        {"empty parameters: left out too", "{" MD "," SPEC_G "}",
         "{`driverName`:`d`,`deletionPolicy`:`Retain`,`parameters`:{}}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:`d`,`bucketClassName`:`gold`," REF_US
         ",`protocols`:[`S3`],`deletionPolicy`:`Retain`}}"},
        {"parameter values that are no strings are dropped, order kept", "{" MD "," SPEC_G "}",
         "{`driverName`:`d`,`deletionPolicy`:`Delete`,`parameters`:{`z`:`1`,`n`:2,`a`:`x`,`o`:{}}}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:`d`,`bucketClassName`:`gold`," REF_US
         ",`protocols`:[`S3`],`parameters`:{`z`:`1`,`a`:`x`},`deletionPolicy`:`Delete`}}"},
        {"no deletionPolicy, or one of the wrong type: left to the CRD's default",
         "{" MD "," SPEC_G "}", "{`driverName`:`d`,`deletionPolicy`:1}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:`d`,`bucketClassName`:`gold`," REF_US ",`protocols`:[`S3`]}}"},
        {"no driverName: empty, as Go writes it; no protocols: [] (the CRD requires the list)",
         "{" MD ",`spec`:{`bucketClassName`:`gold`}}", "{}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:``,`bucketClassName`:`gold`," REF_US ",`protocols`:[]}}"},
        {"protocol items that are no strings are dropped",
         "{" MD ",`spec`:{`bucketClassName`:`gold`,`protocols`:[`S3`,1,null,`Azure`]}}",
         "{`driverName`:`d`}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-u-1`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`spec`:{`"
         "driverName`:`d`,`bucketClassName`:`gold`," REF_US ",`protocols`:[`S3`,`Azure`]}}"},
        {"odd names are escaped, never pasted",
         "{`metadata`:{`name`:`a\\`b`,`namespace`:`n\\\\s`,`uid`:`\\u00e9/\\n`,`"
         "resourceVersion`:`7`},`spec`:{`bucketClassName`:`g</script>`,`protocols`:[`S3`]}}",
         "{`driverName`:`d\\u0001`}",
         "{`apiVersion`:`objectstorage.k8s.io/v1alpha1`,`kind`:`Bucket`,`metadata`:{`name`:`"
         "bucket-\xc3\xa9/\\n`,`finalizers`:[`cosi.objectstorage.k8s.io/bucket-protection`]},`"
         "spec`:{`driverName`:`d\\u0001`,`bucketClassName`:`g</script>`,`bucketClaim`:{`name`:`"
         "a\\`b`,`namespace`:`n\\\\s`,`uid`:`\xc3\xa9/\\n`},`protocols`:[`S3`]}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *c = J(rows[i].claim), *cls = J(rows[i].cls);
        char *got = cctl_bucket_object(c, cls);
        expect_text(rows[i].row, "bucket", got, rows[i].want);
        free(got);
        json_object_put(c);
        json_object_put(cls);
    }
    json_object *no_uid = J("{`metadata`:{`name`:`c1`}," SPEC_G "}");
    json_object *cls = J(CLASS);
    char *none = cctl_bucket_object(no_uid, cls);
    expect_str("no UID: no Bucket", "bucket", none, NULL);
    json_object_put(no_uid);
    json_object_put(cls);
}

static json_object *claim_with_uid_of(size_t n)
{
    char *uid = calloc(n + 1, 1);
    assert_non_null(uid);
    memset(uid, 'a', n);
    char *text = NULL;
    if (asprintf(&text,
                 "{`metadata`:{`name`:`c1`,`namespace`:`ns1`,`uid`:`%s`,`resourceVersion`:`7`,`"
                 "finalizers`:[`" FIN "`]}," SPEC_G "}",
                 uid) < 0)
        fail();
    free(uid);
    json_object *claim = J(text);
    free(text);
    return claim;
}

static void test_long_uids(void **state)
{
    (void)state;
    json_object *cls = J(CLASS);
    /* 246 bytes of UID make a 253-byte name, the API's longest. */
    json_object *claim = claim_with_uid_of(246);
    char *name = cctl_bucket_name(claim);
    expect_int("bucket- and all 246 bytes", "length", (long long)(name ? strlen(name) : 0), 253);
    cctl_plan p;
    assert_int_equal(cctl_plan_next(claim, cls, NULL, &p), 0);
    expect_int("the longest name is made", "step", p.step, CCTL_CREATE_BUCKET);
    expect_str("the plan names it whole", "bucket", p.bucket, name);
    json_object *obj = kobj_parse_text(p.text, strlen(p.text));
    expect_str("the Bucket's name is whole", "name", kobj_name(obj), name);
    json_object_put(obj);
    cctl_plan_clear(&p);
    free(name);
    json_object_put(claim);

    /* One more byte and no API server would take the name: no Bucket. */
    claim = claim_with_uid_of(247);
    name = cctl_bucket_name(claim);
    expect_str("a UID too long for a name gives none", "name", name, NULL);
    expect_int("and the plan refuses", "rc", cctl_plan_next(claim, cls, NULL, &p), -EINVAL);
    expect_str("saying why", "message", util_err_last(), "BucketClaim c1: no usable metadata.uid");
    json_object_put(claim);
    claim = claim_with_uid_of(100000);
    expect_int("a huge UID is refused the same", "rc", cctl_plan_next(claim, cls, NULL, &p),
               -EINVAL);
    json_object_put(claim);
    json_object_put(cls);
}

static void test_patch_texts(void **state)
{
    (void)state;
    json_object *claim = J("{" MD "," SPEC_G "}");
    json_object *claim_fin = J("{" MD_FIN "," SPEC_G "}");
    json_object *bucket = J(OLD_FREE);

    char *t = cctl_patch_add_finalizer(claim);
    expect_text("add finalizer", "text", t, T_ADD_FIN);
    free(t);
    t = cctl_patch_remove_finalizer(claim);
    expect_str("remove a finalizer that is not there", "text", t, NULL);
    t = cctl_patch_remove_finalizer(claim_fin);
    expect_text("remove finalizer", "text", t, T_REMOVE_FIN(0));
    free(t);
    t = cctl_patch_status(claim, "bucket-u-1", false);
    expect_text("status not ready", "text", t, T_STATUS_NOT_READY);
    free(t);
    t = cctl_patch_status(claim, "b\"1", true);
    expect_text("status ready, the name escaped", "text", t,
                "{`metadata`:{`resourceVersion`:`7`},`status`:{`bucketName`:`b\\`1`,`"
                "bucketReady`:true}}");
    free(t);
    t = cctl_patch_status(claim, NULL, true);
    expect_str("status without a Bucket name", "text", t, NULL);
    t = cctl_patch_bind(bucket, claim);
    expect_text("bind", "text", t, T_BIND);
    free(t);
    expect_int("a free Bucket's binding is not current", "current",
               cctl_bucket_binding_current(bucket, claim), false);
    json_object *ours = J(OLD_OURS);
    expect_int("our binding with our protocols is current", "current",
               cctl_bucket_binding_current(ours, claim), true);
    t = cctl_delete_options(ours);
    expect_text("delete options", "text", t, T_DELETE_B2);
    free(t);
    json_object_put(ours);

    json_object *no_rv = J("{`metadata`:{`name`:`c1`,`uid`:`u-1`,`finalizers`:[`" FIN "`]}}");
    expect_str("no rv: no add", "text", cctl_patch_add_finalizer(no_rv), NULL);
    expect_str("no rv: no remove", "text", cctl_patch_remove_finalizer(no_rv), NULL);
    expect_str("no rv: no status", "text", cctl_patch_status(no_rv, "b", true), NULL);
    expect_str("no rv: no bind", "text", cctl_patch_bind(no_rv, claim), NULL);
    expect_str("no rv: no delete", "text", cctl_delete_options(no_rv), NULL);
    json_object_put(no_rv);
    json_object *empty_rv = J("{`metadata`:{`name`:`b`,`uid`:`x`,`resourceVersion`:``}}");
    expect_str("an empty rv guards nothing", "text", cctl_delete_options(empty_rv), NULL);
    json_object_put(empty_rv);

    json_object_put(claim);
    json_object_put(claim_fin);
    json_object_put(bucket);
}

static void test_not_found_messages_quote_as_go(void **state)
{
    (void)state;
    static const struct {
        const char *row, *name, *want;
    } rows[] = {
        {"a plain name", "old", "buckets.objectstorage.k8s.io \"old\" not found"},
        {"quotes and backslashes", "a\"b\\c",
         "buckets.objectstorage.k8s.io \"a\\\"b\\\\c\" not found"},
        {"named control characters", "a\nb\tc\r",
         "buckets.objectstorage.k8s.io \"a\\nb\\tc\\r\" not found"},
        {"other control bytes as \\x", "a\x01\x7f",
         "buckets.objectstorage.k8s.io \"a\\x01\\x7f\" not found"},
        {"UTF-8 text stays", "\xc3\xa9t\xc3\xa9",
         "buckets.objectstorage.k8s.io \"\xc3\xa9t\xc3\xa9\" not found"},
        {"empty", "", "buckets.objectstorage.k8s.io \"\" not found"},
        {"NULL reads as empty", NULL, "buckets.objectstorage.k8s.io \"\" not found"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *got = cctl_msg_not_found("buckets.objectstorage.k8s.io", rows[i].name);
        expect_str(rows[i].row, "message", got, rows[i].want);
        free(got);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_name_is_cosi_sanitized),
        cmocka_unit_test(test_resource_versions_compare_as_integers),
        cmocka_unit_test(test_bucket_name_by_claim_state),
        cmocka_unit_test(test_bucket_binding_reads),
        cmocka_unit_test(test_greenfield_steps),
        cmocka_unit_test(test_brownfield_steps),
        cmocka_unit_test(test_deletion_steps),
        cmocka_unit_test(test_plan_refuses_what_it_cannot_write),
        cmocka_unit_test(test_bucket_object_texts),
        cmocka_unit_test(test_long_uids),
        cmocka_unit_test(test_patch_texts),
        cmocka_unit_test(test_not_found_messages_quote_as_go),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
