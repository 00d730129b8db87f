/*
 * Unit tests for objectstorage-sidecar's pure core (cosi/sidecar/plan*.c),
 * checked against upstream COSI v0.2.2's sidecar and the project's design
 * (/tmp/cosi-design.md's "objectstorage-sidecar" section): one table row
 * per rule, named after it; a failing row prints its name.
 *
 * The BucketInfo and Azure expiry rows hold the bytes Go's json.Marshal
 * and time.Parse give (checked against a Go program while writing them).
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

#include "cosi/sidecar/cosisidecar.h"
#include "kobj/kobj.h"
#include "table.h"

#define DRIVER "cosi.example.com"

/* ---- fixtures -------------------------------------------------------------------------- */

#define FIN_B         "`cosi.objectstorage.k8s.io/bucket-protection`"
#define FIN_BAB       "`cosi.objectstorage.k8s.io/bucketaccess-bucket-protection`"
#define FIN_A         "`cosi.objectstorage.k8s.io/bucketaccess-protection`"
#define CLAIM_REF     "`bucketClaim`:{`name`:`c1`,`namespace`:`apps`,`uid`:`c-uid`}"
#define B_META(extra) "`metadata`:{`name`:`bucket-u1`,`uid`:`b-uid`,`resourceVersion`:`7`" extra "}"
#define B_SPEC(extra)                                                                              \
    "`spec`:{`driverName`:`cosi.example.com`,`bucketClassName`:`gold`," CLAIM_REF                  \
    ",`protocols`:[`S3`],`parameters`:{`region`:`eu`},`deletionPolicy`:`Delete`" extra "}"
#define DELETING ",`deletionTimestamp`:`2025-01-01T00:00:00Z`"

/* ---- names ------------------------------------------------------------------------------- */

static void test_lease_name_is_sanitized_as_upstream(void **state)
{
    (void)state;
    static const struct {
        const char *row, *in, *want;
    } rows[] = {
        {"dots and the slash become dashes", "cosi.example.com/cosi", "cosi-example-com-cosi"},
        {"upper case is lowered", "COSI.Example.COM", "cosi-example-com"},
        {"a trailing dash gets an X", "driver.", "driver-X"},
        {"an original trailing dash gets an X too", "driver-", "driver-X"},
        {"a multibyte rune is one dash",
         "a\xc3\xa9"
         "b",
         "a-b"},
        {"each invalid byte is one dash",
         "a\xff\xfe"
         "b",
         "a--b"},
        {"digits and dashes stay", "a-0-9", "a-0-9"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *s = cosi_lease_name(rows[i].in);
        expect_str(rows[i].row, "sanitize", s, rows[i].want);
        free(s);
    }
    char *l = csc_lease_name("cosi.example.com");
    expect_str("lease name", "lease", l, "cosi-example-com-cosi");
    free(l);
    l = csc_lease_name("Cosi.Example.Com");
    expect_str("lease name of an upper-case driver", "lease", l, "cosi-example-com-cosi");
    free(l);
}

static void test_driver_names_compare_as_go_equal_fold(void **state)
{
    (void)state;
    static const struct {
        const char *row, *a, *b;
        bool want;
    } rows[] = {
        {"the same", "cosi.example.com", "cosi.example.com", true},
        {"case differs", "cosi.example.com", "COSI.Example.Com", true},
        {"another name", "cosi.example.com", "cosi.example.org", false},
        {"a prefix is not equal", "cosi.example.com", "cosi.example.co", false},
        {"longer is not equal", "cosi.example.com", "cosi.example.comm", false},
        {"KELVIN SIGN folds to k", "k8s.io",
         "\xe2\x84\xaa"
         "8s.io",
         true},
        {"LONG S folds to s", "s3.io",
         "\xc5\xbf"
         "3.io",
         true},
        {"LONG S is not t", "t3.io",
         "\xc5\xbf"
         "3.io",
         false},
        {"punctuation has no case", "a[b", "a{b", false},
        {"an invalid byte is not a letter", "a", "\xff", false},
        {"empty equals empty", "", "", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        expect_int(rows[i].row, "a,b", csc_equal_fold(rows[i].a, rows[i].b), rows[i].want);
        expect_int(rows[i].row, "b,a", csc_equal_fold(rows[i].b, rows[i].a), rows[i].want);
    }
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
        {"greater", "100", "99", 1},
        {"leading zeros", "010", "10", 0},
        {"beyond 64 bits", "123456789012345678901234567890", "123456789012345678901234567891", -1},
        {"not a number", "abc", "10", -2},
        {"empty", "", "10", -2},
        {"missing", NULL, "10", -2},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_int(rows[i].row, "cmp", kobj_rv_cmp(rows[i].a, rows[i].b), rows[i].want);
}

static void test_error_texts_are_worded_as_upstream(void **state)
{
    (void)state;
    csi_status st = {.code = CSI_UNAVAILABLE};
    snprintf(st.message, sizeof(st.message), "driver down");
    char *m = csc_rpc_error("failed to create bucket", &st);
    expect_str("gRPC error with a prefix", "text", m,
               "failed to create bucket: rpc error: code = Unavailable desc = driver down");
    free(m);
    st.code = CSI_INVALID_ARGUMENT;
    m = csc_rpc_error(NULL, &st);
    expect_str("gRPC error alone", "text", m,
               "rpc error: code = InvalidArgument desc = driver down");
    free(m);
    m = csc_not_found(&KUBE_BUCKETACCESSCLASS, "key");
    expect_str("not found, custom resource", "text", m,
               "bucketaccessclasses.objectstorage.k8s.io \"key\" not found");
    free(m);
    m = csc_not_found(&KUBE_SECRET, "creds");
    expect_str("not found, core resource", "text", m, "secrets \"creds\" not found");
    free(m);
}

/* ---- Bucket decisions ----------------------------------------------------------------------- */

/* One row per rule: PROV(row, bucket, add_finalizer, class_params, existing_id),
 * DEL(row, bucket, delete_accesses, delete_in_driver, bucket_id, release_claim). */
#define PROV(r, b, fin, params, id)                                                                \
    {                                                                                              \
        .row = (r), .bucket = (b), .action = CSC_BUCKET_PROVISION, .add_fin = (fin),               \
        .class_params = (params), .existing = (id)                                                 \
    }
#define DEL(r, b, acc, drv, id, rel)                                                               \
    {                                                                                              \
        .row = (r), .bucket = (b), .action = CSC_BUCKET_DELETE, .del_accesses = (acc),             \
        .del_driver = (drv), .bucket_id = (id), .release = (rel)                                   \
    }
#define B_SKIP(r, b)                                                                               \
    {                                                                                              \
        .row = (r), .bucket = (b), .action = CSC_BUCKET_SKIP                                       \
    }
#define B_CLAIM(r, b)                                                                              \
    {                                                                                              \
        .row = (r), .bucket = (b), .action = CSC_BUCKET_CLAIM                                      \
    }
#define B_REFUSE(r, b, msg)                                                                        \
    {                                                                                              \
        .row = (r), .bucket = (b), .action = CSC_BUCKET_REFUSE,                                    \
        .reason = COSI_REASON_FAILED_CREATE_BUCKET, .message = (msg)                               \
    }

static void test_bucket_decisions(void **state)
{
    (void)state;
    static const struct {
        const char *row, *bucket;
        int rc;
        csc_bucket_action action;
        bool add_fin, class_params;
        const char *existing;
        bool del_accesses, del_driver;
        const char *bucket_id;
        bool release;
        const char *reason, *message;
    } rows[] = {
        PROV("greenfield made by the controller: create, status, claim",
             "{" B_META(",`finalizers`:[" FIN_B "]") "," B_SPEC("") "}", false, false, NULL),
        PROV("greenfield without our finalizer: the finalizer first",
             "{" B_META("") "," B_SPEC("") "}", true, false, NULL),
        PROV("brownfield without parameters takes the class's with the finalizer",
             "{" B_META("") ",`spec`:{`driverName`:`cosi.example.com`,`bucketClassName`:`gold`,"
                            "`existingBucketID`:`id-9`,`deletionPolicy`:`Retain`}}",
             true, true, "id-9"),
        PROV("brownfield with parameters keeps them",
             "{" B_META("") "," B_SPEC(",`existingBucketID`:`id-9`") "}", true, false, "id-9"),
        PROV("brownfield with our finalizer already: no parameter copy",
             "{" B_META(",`finalizers`:[" FIN_B
                        "]") ",`spec`:{`driverName`:`cosi.example.com`,"
                             "`bucketClassName`:`gold`,`existingBucketID`:`id-9`}}",
             false, false, "id-9"),
        PROV("brownfield with null parameters takes the class's",
             "{" B_META("") ",`spec`:{`driverName`:`cosi.example.com`,`bucketClassName`:`gold`,"
                            "`existingBucketID`:`id-9`,`parameters`:null}}",
             true, true, "id-9"),
        B_CLAIM("ready: only the claim",
                "{" B_META(",`finalizers`:[" FIN_B "]") "," B_SPEC(
                    "") ",`status`:{`bucketReady`:true,`bucketID`:`bkt-1`}}"),
        PROV("bucketReady as a string is not ready",
             "{" B_META(",`finalizers`:[" FIN_B
                        "]") "," B_SPEC("") ",`status`:{`bucketReady`:`true`}}",
             false, false, NULL),
        B_SKIP("another driver's Bucket is not ours",
               "{" B_META("") ",`spec`:{`driverName`:`other.example.com`,`bucketClassName`:`g`}}"),
        PROV("the driver name compares case-insensitively",
             "{" B_META(",`finalizers`:[" FIN_B "]") ",`spec`:{`driverName`:`COSI.Example.COM`,"
                                                     "`bucketClassName`:`g`}}",
             false, false, NULL),
        B_SKIP("a driverName of another type is no driver",
               "{" B_META("") ",`spec`:{`driverName`:7,`bucketClassName`:`g`}}"),
        B_SKIP("a spec that is a string is no spec", "{" B_META("") ",`spec`:`x`}"),
        B_REFUSE("no class name: an Event",
                 "{" B_META("") ",`spec`:{`driverName`:`cosi.example.com`}}",
                 "BucketClassName not defined for Bucket bucket-u1"),
        B_REFUSE("a class name of another type is none",
                 "{" B_META("") ",`spec`:{`driverName`:`cosi.example.com`,`bucketClassName`:[]}}",
                 "BucketClassName not defined for Bucket bucket-u1"),
        DEL("deleting with Delete: the driver deletes bucketID, the claim is released",
            "{" B_META(",`finalizers`:[" FIN_B "]" DELETING) "," B_SPEC(
                "") ",`status`:{`bucketReady`:true,`bucketID`:`bkt-1`}}",
            false, true, "bkt-1", true),
        DEL("deleting with Retain: no driver call, the claim is released",
            "{" B_META(",`finalizers`:[" FIN_B
                       "]" DELETING) ",`spec`:{`driverName`:`cosi.example.com`,`bucketClassName`:`"
                                     "gold`," CLAIM_REF ",`deletionPolicy`:`Retain`},`status`:{`"
                                     "bucketReady`:true,`bucketID`:`bkt-1`}}",
            false, false, "bkt-1", true),
        DEL("deleting with a lower-case delete policy: no driver call (upstream compares exactly)",
            "{" B_META(
                ",`finalizers`:[" FIN_B
                "]" DELETING) ",`spec`:{`driverName`:`cosi.example.com`,`deletionPolicy`:`delete`},"
                              "`status`:{`bucketID`:`bkt-1`}}",
            false, false, "bkt-1", true),
        DEL("deleting before bucketID: the existing id",
            "{" B_META(",`finalizers`:[" FIN_B
                       "]" DELETING) "," B_SPEC(",`existingBucketID`:`id-9`") "}",
            false, true, "id-9", true),
        DEL("deleting without any id: learn it from the driver first",
            "{" B_META(",`finalizers`:[" FIN_B "]" DELETING) "," B_SPEC("") "}", false, true, NULL,
            true),
        DEL("deleting with an empty bucketID: learn it too",
            "{" B_META(",`finalizers`:[" FIN_B
                       "]" DELETING) "," B_SPEC("") ",`status`:{`bucketID`:``}}",
            false, true, NULL, true),
        DEL("deleting with accesses: they go first",
            "{" B_META(",`finalizers`:[" FIN_BAB "," FIN_B "]" DELETING) "," B_SPEC(
                "") ",`status`:{`bucketReady`:true,`bucketID`:`bkt-1`}}",
            true, true, "bkt-1", true),
        DEL("deleting with only the access finalizer: accesses, then the finalizer",
            "{" B_META(",`finalizers`:[" FIN_BAB "]" DELETING) "," B_SPEC("") "}", true, false,
            NULL, false),
        B_SKIP("deleting without our finalizers: nothing",
               "{" B_META(",`finalizers`:[`example.com/other`]" DELETING) "," B_SPEC("") "}"),
        B_SKIP("deleting another driver's Bucket: nothing",
               "{" B_META(",`finalizers`:[" FIN_B
                          "]" DELETING) ",`spec`:{`driverName`:`other.example.com`}}"),
        DEL("deleting without a class name: still deleted",
            "{" B_META(
                ",`finalizers`:[" FIN_B
                "]" DELETING) ",`spec`:{`driverName`:`cosi.example.com`,`deletionPolicy`:`Delete`},"
                              "`status`:{`bucketID`:`bkt-1`}}",
            false, true, "bkt-1", true),
        {.row = "a Bucket that is an array is refused", .bucket = "[]", .rc = -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *b = J(rows[i].bucket);
        csc_bucket_plan p;
        int rc = csc_bucket_plan_make(DRIVER, b, &p);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        expect_int(rows[i].row, "action", p.action, rows[i].action);
        expect_int(rows[i].row, "add_finalizer", p.add_finalizer, rows[i].add_fin);
        expect_int(rows[i].row, "class_params", p.class_params, rows[i].class_params);
        expect_str(rows[i].row, "existing_id", p.existing_id, rows[i].existing);
        expect_int(rows[i].row, "delete_accesses", p.delete_accesses, rows[i].del_accesses);
        expect_int(rows[i].row, "delete_in_driver", p.delete_in_driver, rows[i].del_driver);
        expect_str(rows[i].row, "bucket_id", p.bucket_id, rows[i].bucket_id);
        expect_int(rows[i].row, "release_claim", p.release_claim, rows[i].release);
        expect_str(rows[i].row, "reason", p.event.reason, rows[i].reason);
        expect_str(rows[i].row, "message", p.event.message, rows[i].message);
        csc_bucket_plan_clear(&p);
        json_object_put(b);
    }
    /* A NULL Bucket is refused too. */
    csc_bucket_plan p;
    expect_int("a NULL Bucket", "rc", csc_bucket_plan_make(DRIVER, NULL, &p), -EINVAL);
    csc_bucket_plan_clear(&p);
    csc_bucket_plan_clear(NULL);
}

static void test_bucket_claim_references(void **state)
{
    (void)state;
    json_object *b = J("{" B_META("") "," B_SPEC("") "}");
    csc_ref ref;
    assert_true(csc_bucket_claim_ref(b, &ref));
    expect_str("claim ref", "ns", ref.ns, "apps");
    expect_str("claim ref", "name", ref.name, "c1");
    expect_str("claim ref", "uid", ref.uid, "c-uid");
    static const struct {
        const char *row, *claim;
        bool want;
    } rows[] = {
        {"same namespace, name and uid",
         "{`metadata`:{`name`:`c1`,`namespace`:`apps`,`uid`:`c-uid`}}", true},
        {"a claim of the same name made later is another",
         "{`metadata`:{`name`:`c1`,`namespace`:`apps`,`uid`:`other`}}", false},
        {"another namespace", "{`metadata`:{`name`:`c1`,`namespace`:`x`,`uid`:`c-uid`}}", false},
        {"a claim without a uid is not the one referenced",
         "{`metadata`:{`name`:`c1`,`namespace`:`apps`}}", false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *c = J(rows[i].claim);
        expect_int(rows[i].row, "matches", csc_claim_matches(c, &ref), rows[i].want);
        json_object_put(c);
    }
    json_object_put(b);
    /* A reference without a uid matches by namespace and name. */
    b = J("{`spec`:{`bucketClaim`:{`name`:`c1`,`namespace`:`apps`}}}");
    assert_true(csc_bucket_claim_ref(b, &ref));
    json_object *c = J("{`metadata`:{`name`:`c1`,`namespace`:`apps`,`uid`:`any`}}");
    assert_true(csc_claim_matches(c, &ref));
    json_object_put(c);
    json_object_put(b);
    static const char *const no_ref[] = {
        "{`spec`:{}}",
        "{`spec`:{`bucketClaim`:null}}",
        "{`spec`:{`bucketClaim`:{`name`:`c1`}}}",
        "{`spec`:{`bucketClaim`:{`name`:`c1`,`namespace`:``}}}",
        "{`spec`:{`bucketClaim`:`apps/c1`}}",
        "{`spec`:{`bucketClaim`:{`name`:1,`namespace`:`apps`}}}",
    };
    for (size_t i = 0; i < N_ROWS(no_ref); i++) {
        b = J(no_ref[i]);
        if (csc_bucket_claim_ref(b, &ref))
            fail_msg("a claim reference read from %s", no_ref[i]);
        json_object_put(b);
    }
}

/* ---- patches ------------------------------------------------------------------------------- */

#define P(r, k, o, a, p, w)                                                                        \
    {                                                                                              \
        .row = (r), .kind = (k), .obj = (o), .arg = (a), .params = (p), .want = (w)                \
    }

static void test_patches_carry_the_resource_version(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        int kind; /* 0 add fin, 1 remove fins, 2 bucket ready, 3 claim ready, 4 access granted */
        const char *obj, *arg, *params, *want;
        int rc;
    } rows[] = {
        P("finalizer added to none", 0, "{`metadata`:{`resourceVersion`:`7`}}", "f/x", NULL,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`f/x`]}}"),
        P("finalizer appended, others kept as they are (a number too)", 0,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`a`,5,null]}}", "f/x", NULL,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`a`,5,null,`f/x`]}}"),
        P("finalizers of another type are replaced", 0,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:`a`}}", "f/x", NULL,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`f/x`]}}"),
        P("finalizer there already: no patch", 0,
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`f/x`]}}", "f/x", NULL, NULL),
        P("finalizer with the class's parameters", 0, "{`metadata`:{`resourceVersion`:`7`}}", "f/x",
          "{`a`:`1`,`b`:`<&>`}",
          "{`metadata`:{`resourceVersion`:`7`,`finalizers`:[`f/x`]},"
          "`spec`:{`parameters`:{`a`:`1`,`b`:`<&>`}}}"),
        {.row = "no resourceVersion: nothing to guard with",
         .kind = 0,
         .obj = "{`metadata`:{}}",
         .arg = "f/x",
         .rc = -EINVAL},
        {.row = "a resourceVersion of another type is none",
         .kind = 0,
         .obj = "{`metadata`:{`resourceVersion`:7}}",
         .arg = "f/x",
         .rc = -EINVAL},
        P("one of two finalizers removed", 1,
          "{`metadata`:{`resourceVersion`:`9`,`finalizers`:[`other`,`f/x`]}}", "f/x", NULL,
          "{`metadata`:{`resourceVersion`:`9`,`finalizers`:[`other`]}}"),
        P("the last finalizer removed: null", 1,
          "{`metadata`:{`resourceVersion`:`9`,`finalizers`:[`f/x`]}}", "f/x", NULL,
          "{`metadata`:{`resourceVersion`:`9`,`finalizers`:null}}"),
        P("a finalizer not there: no patch", 1,
          "{`metadata`:{`resourceVersion`:`9`,`finalizers`:[`other`]}}", "f/x", NULL, NULL),
        P("no finalizers at all: no patch", 1, "{`metadata`:{`resourceVersion`:`9`}}", "f/x", NULL,
          NULL),
        P("Bucket ready", 2, "{`metadata`:{`resourceVersion`:`8`}}", "bkt-1", NULL,
          "{`metadata`:{`resourceVersion`:`8`},`status`:{`bucketReady`:true,`bucketID`:`bkt-"
          "1`}}"),
        P("Bucket ready already: no patch", 2,
          "{`metadata`:{`resourceVersion`:`8`},`status`:{`bucketReady`:true,`bucketID`:`bkt-"
          "1`}}",
          "bkt-1", NULL, NULL),
        P("Bucket ready with another id: patched", 2,
          "{`metadata`:{`resourceVersion`:`8`},`status`:{`bucketReady`:true,`bucketID`:`old`}}",
          "bkt-1", NULL,
          "{`metadata`:{`resourceVersion`:`8`},`status`:{`bucketReady`:true,`bucketID`:`bkt-"
          "1`}}"),
        P("claim ready", 3, "{`metadata`:{`resourceVersion`:`3`},`status`:{`bucketReady`:false}}",
          "bucket-u1", NULL,
          "{`metadata`:{`resourceVersion`:`3`},"
          "`status`:{`bucketReady`:true,`bucketName`:`bucket-u1`}}"),
        P("claim ready already: no patch", 3,
          "{`metadata`:{`resourceVersion`:`3`},"
          "`status`:{`bucketReady`:true,`bucketName`:`bucket-u1`}}",
          "bucket-u1", NULL, NULL),
        P("claim ready without its bucket name: patched", 3,
          "{`metadata`:{`resourceVersion`:`3`},`status`:{`bucketReady`:true}}", "bucket-u1", NULL,
          "{`metadata`:{`resourceVersion`:`3`},"
          "`status`:{`bucketReady`:true,`bucketName`:`bucket-u1`}}"),
        P("access granted", 4, "{`metadata`:{`resourceVersion`:`12`},`status`:{}}", "acct-1", NULL,
          "{`metadata`:{`resourceVersion`:`12`},"
          "`status`:{`accessGranted`:true,`accountID`:`acct-1`}}"),
        P("access granted already: no patch", 4,
          "{`metadata`:{`resourceVersion`:`12`},"
          "`status`:{`accessGranted`:true,`accountID`:`acct-1`}}",
          "acct-1", NULL, NULL),
        P("access intent: the finalizer and the bucket id in one write", 5,
          "{`metadata`:{`resourceVersion`:`12`,`finalizers`:[`x`]}}", "bkt-1", NULL,
          "{`metadata`:{`resourceVersion`:`12`,`finalizers`:[`x`," FIN_A "],"
          "`annotations`:{`" COSI_ANN_BUCKET_ID "`:`bkt-1`}}}"),
        P("access intent: the finalizer there, the id not yet", 5,
          "{`metadata`:{`resourceVersion`:`12`,`finalizers`:[" FIN_A "]}}", "bkt-1", NULL,
          "{`metadata`:{`resourceVersion`:`12`,"
          "`annotations`:{`" COSI_ANN_BUCKET_ID "`:`bkt-1`}}}"),
        P("access intent: both there: no patch", 5,
          "{`metadata`:{`resourceVersion`:`12`,`finalizers`:[" FIN_A "],"
          "`annotations`:{`" COSI_ANN_BUCKET_ID "`:`bkt-1`}}}",
          "bkt-1", NULL, NULL),
        P("access intent: another id recorded is replaced", 5,
          "{`metadata`:{`resourceVersion`:`12`,`finalizers`:[" FIN_A "],"
          "`annotations`:{`" COSI_ANN_BUCKET_ID "`:`bkt-0`,`other`:`kept`}}}",
          "bkt-1", NULL,
          "{`metadata`:{`resourceVersion`:`12`,"
          "`annotations`:{`" COSI_ANN_BUCKET_ID "`:`bkt-1`}}}"),
        P("status of another type is no status", 4,
          "{`metadata`:{`resourceVersion`:`12`},`status`:7}", "acct-1", NULL,
          "{`metadata`:{`resourceVersion`:`12`},"
          "`status`:{`accessGranted`:true,`accountID`:`acct-1`}}"),
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].obj), *params = J(rows[i].params);
        const char *fins[] = {rows[i].arg, NULL};
        char *out = (char *)"unset";
        int rc = -1;
        switch (rows[i].kind) {
        case 0:
            rc = csc_patch_add_finalizer(o, rows[i].arg, params, &out);
            break;
        case 1:
            rc = csc_patch_remove_finalizers(o, fins, &out);
            break;
        case 2:
            rc = csc_patch_bucket_ready(o, rows[i].arg, &out);
            break;
        case 3:
            rc = csc_patch_claim_ready(o, rows[i].arg, &out);
            break;
        case 4:
            rc = csc_patch_access_granted(o, rows[i].arg, &out);
            break;
        case 5:
            rc = csc_patch_access_intent(o, rows[i].arg, &out);
            break;
        }
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        expect_text(rows[i].row, "patch", out, rows[i].want);
        free(out);
        json_object_put(o);
        json_object_put(params);
    }
    /* The Bucket's deletion removes both of ours in one patch. */
    json_object *b =
        J("{`metadata`:{`resourceVersion`:`20`,`finalizers`:[" FIN_BAB ",`keep`," FIN_B "]}}");
    static const char *const ours[] = {COSI_FINALIZER_BA_BUCKET, COSI_FINALIZER_BUCKET, NULL};
    char *out = NULL;
    assert_int_equal(csc_patch_remove_finalizers(b, ours, &out), 0);
    expect_text("both of ours in one patch", "patch", out,
                "{`metadata`:{`resourceVersion`:`20`,`finalizers`:[`keep`]}}");
    free(out);
    json_object_put(b);
}

/* ---- driver requests --------------------------------------------------------------------------
 */

static const char *param_of(Cosi__V1alpha1__DriverCreateBucketRequest *r, const char *key)
{
    for (size_t i = 0; i < r->n_parameters; i++)
        if (strcmp(r->parameters[i]->key, key) == 0)
            return r->parameters[i]->value;
    return NULL;
}

static void test_bucket_requests(void **state)
{
    (void)state;
    json_object *b = J("{`metadata`:{`name`:`bucket-u1`},`spec`:{`parameters`:"
                       "{`region`:`eu`,`protocol`:`s3`,`bad`:5}}}");
    Cosi__V1alpha1__DriverCreateBucketRequest *cr = NULL;
    assert_int_equal(csc_create_bucket_request(b, &cr), 0);
    expect_str("create", "name", cr->name, "bucket-u1");
    expect_int("create: parameters of another type are left out", "n", (long long)cr->n_parameters,
               2);
    expect_str("create", "region", param_of(cr, "region"), "eu");
    expect_str("create", "protocol", param_of(cr, "protocol"), "s3");
    csc_request_free(&cr->base);

    Cosi__V1alpha1__DriverDeleteBucketRequest *dr = NULL;
    assert_int_equal(csc_delete_bucket_request(b, "bkt-1", &dr), 0);
    expect_str("delete", "bucket_id", dr->bucket_id, "bkt-1");
    expect_int("delete: delete_context is spec.parameters", "n", (long long)dr->n_delete_context,
               2);
    expect_str("delete", "key", dr->delete_context[0]->key, "region");
    csc_request_free(&dr->base);
    expect_int("delete without an id", "rc", csc_delete_bucket_request(b, NULL, &dr), -EINVAL);
    assert_null(dr);
    json_object_put(b);

    b = J("{`metadata`:{`name`:`bucket-u2`},`spec`:{`parameters`:null}}");
    assert_int_equal(csc_create_bucket_request(b, &cr), 0);
    expect_int("create without parameters", "n", (long long)cr->n_parameters, 0);
    csc_request_free(&cr->base);
    json_object_put(b);
    b = J("{`metadata`:{`name`:5}}");
    expect_int("create without a name", "rc", csc_create_bucket_request(b, &cr), -EINVAL);
    json_object_put(b);
    csc_request_free(NULL);
}

/* ---- BucketAccess decisions --------------------------------------------------------------------
 */

#define A_META(extra)                                                                              \
    "`metadata`:{`name`:`a1`,`namespace`:`apps`,`uid`:`a-uid`,`resourceVersion`:`11`" extra "}"
#define A_SPEC(extra)                                                                              \
    "`spec`:{`bucketClaimName`:`c1`,`bucketAccessClassName`:`key`,"                                \
    "`credentialsSecretName`:`creds`,`protocol`:`S3`" extra "}"
#define ACCESS "{" A_META("") "," A_SPEC("") "}"
#define CLASS_KEY                                                                                  \
    "{`metadata`:{`name`:`key`},`driverName`:`cosi.example.com`,`authenticationType`:`Key`,"       \
    "`parameters`:{`p`:`1`}}"
#define CLASS_IAM                                                                                  \
    "{`metadata`:{`name`:`key`},`driverName`:`cosi.example.com`,`authenticationType`:`IAM`}"
#define CLASS_OTHER                                                                                \
    "{`metadata`:{`name`:`key`},`driverName`:`other.example.com`,`authenticationType`:`Key`}"
#define CLAIM_READY                                                                                \
    "{`metadata`:{`name`:`c1`,`namespace`:`apps`,`uid`:`c-uid`,`resourceVersion`:`3`},"            \
    "`status`:{`bucketReady`:true,`bucketName`:`bucket-u1`}}"
#define CLAIM_WAITING "{`metadata`:{`name`:`c1`,`namespace`:`apps`},`status`:{`bucketReady`:false}}"
#define BUCKET_READY                                                                               \
    "{" B_META(",`finalizers`:[" FIN_B                                                             \
               "]") "," B_SPEC("") ",`status`:{`bucketReady`:true,`bucketID`:`bkt-1`}}"
#define BUCKET_OTHER                                                                               \
    "{" B_META("") ",`spec`:{`driverName`:`other.example.com`},"                                   \
                   "`status`:{`bucketReady`:true,`bucketID`:`bkt-1`}}"
#define MSG_STATE "BucketAccess can't be granted to Bucket not in Ready state"

/* The bucket id recorded on an access at its grant. */
#define REC(id) ",`annotations`:{`" COSI_ANN_BUCKET_ID "`:`" id "`}"

/* One row per rule, over (access, class, claim, bucket). */
#define GRANT(r, a, c, cl, b, fin)                                                                 \
    {                                                                                              \
        .row = (r), .access = (a), .cls = (c), .claim = (cl), .bucket = (b),                       \
        .action = CSC_ACCESS_GRANT, .add_fin = (fin), .bucket_id = "bkt-1"                         \
    }
#define A_SKIP(r, a, c, cl, b)                                                                     \
    {                                                                                              \
        .row = (r), .access = (a), .cls = (c), .claim = (cl), .bucket = (b),                       \
        .action = CSC_ACCESS_SKIP                                                                  \
    }
#define A_REFUSE(r, a, c, cl, b, why, msg)                                                         \
    {                                                                                              \
        .row = (r), .access = (a), .cls = (c), .claim = (cl), .bucket = (b),                       \
        .action = CSC_ACCESS_REFUSE, .reason = (why), .message = (msg)                             \
    }
#define REVOKE(r, a, c, cl, b, id, acct, again)                                                    \
    {                                                                                              \
        .row = (r), .access = (a), .cls = (c), .claim = (cl), .bucket = (b),                       \
        .action = CSC_ACCESS_REVOKE, .bucket_id = (id), .account = (acct), .regrant = (again)      \
    }

static void test_access_decisions(void **state)
{
    (void)state;
    static const struct {
        const char *row, *access, *cls, *claim, *bucket;
        csc_access_action action;
        bool add_fin;
        const char *bucket_id, *account;
        bool regrant;
        const char *reason, *message;
    } rows[] = {
        GRANT("grant: the finalizer first", ACCESS, CLASS_KEY, CLAIM_READY, BUCKET_READY, true),
        GRANT("grant with our finalizer, the bucket id not yet recorded: record it first",
              "{" A_META(",`finalizers`:[" FIN_A "]") "," A_SPEC("") "}", CLASS_KEY, CLAIM_READY,
              BUCKET_READY, true),
        GRANT("grant with our finalizer and the bucket id recorded",
              "{" A_META(",`finalizers`:[" FIN_A "]" REC("bkt-1")) "," A_SPEC("") "}", CLASS_KEY,
              CLAIM_READY, BUCKET_READY, false),
        GRANT("grant with another bucket id recorded: this one recorded first",
              "{" A_META(",`finalizers`:[" FIN_A "]" REC("bkt-0")) "," A_SPEC("") "}", CLASS_KEY,
              CLAIM_READY, BUCKET_READY, true),
        A_SKIP(
            "granted with an account: nothing",
            "{" A_META("") "," A_SPEC("") ",`status`:{`accessGranted`:true,`accountID`:`acct-1`}}",
            CLASS_KEY, CLAIM_READY, BUCKET_READY),
        GRANT("granted without an account: granted again to record it",
              "{" A_META("") "," A_SPEC("") ",`status`:{`accessGranted`:true}}", CLASS_KEY,
              CLAIM_READY, BUCKET_READY, true),
        GRANT("accessGranted as a string is not granted",
              "{" A_META("") "," A_SPEC("") ",`status`:{`accessGranted`:`true`,`accountID`:`x`}}",
              CLASS_KEY, CLAIM_READY, BUCKET_READY, true),
        A_REFUSE("class missing: an Event", ACCESS, NULL, CLAIM_READY, BUCKET_READY,
                 COSI_REASON_FAILED_GRANT_ACCESS,
                 "bucketaccessclasses.objectstorage.k8s.io \"key\" not found"),
        A_REFUSE("no class name", "{" A_META("") ",`spec`:{`credentialsSecretName`:`creds`}}", NULL,
                 CLAIM_READY, BUCKET_READY, COSI_REASON_FAILED_GRANT_ACCESS,
                 "resource name may not be empty"),
        A_SKIP("another driver's class: nothing", ACCESS, CLASS_OTHER, CLAIM_READY, BUCKET_READY),
        A_REFUSE("no secret name: an Event",
                 "{" A_META("") ",`spec`:{`bucketClaimName`:`c1`,"
                                "`bucketAccessClassName`:`key`}}",
                 CLASS_KEY, CLAIM_READY, BUCKET_READY, COSI_REASON_FAILED_GRANT_ACCESS,
                 "CredentialsSecretName not defined in the BucketAccess"),
        A_REFUSE("a secret name of another type is none",
                 "{" A_META("") ",`spec`:{`bucketClaimName`:`c1`,`bucketAccessClassName`:`key`,"
                                "`credentialsSecretName`:42}}",
                 CLASS_KEY, CLAIM_READY, BUCKET_READY, COSI_REASON_FAILED_GRANT_ACCESS,
                 "CredentialsSecretName not defined in the BucketAccess"),
        A_REFUSE("waiting for the claim: missing", ACCESS, CLASS_KEY, NULL, NULL,
                 COSI_REASON_WAITING_FOR_BUCKET, "invalid bucket state: " MSG_STATE),
        A_REFUSE("waiting for the claim: not ready", ACCESS, CLASS_KEY, CLAIM_WAITING, NULL,
                 COSI_REASON_WAITING_FOR_BUCKET, "invalid bucket state: " MSG_STATE),
        A_REFUSE("waiting for the claim: ready without a bucket name", ACCESS, CLASS_KEY,
                 "{`metadata`:{`name`:`c1`,`namespace`:`apps`},`status`:{`bucketReady`:true}}",
                 NULL, COSI_REASON_WAITING_FOR_BUCKET, "invalid bucket state: " MSG_STATE),
        A_REFUSE("IAM without a service account: an Event", ACCESS, CLASS_IAM, CLAIM_READY,
                 BUCKET_READY, COSI_REASON_FAILED_GRANT_ACCESS,
                 "ServiceAccountName required when AuthenticationType is IAM"),
        GRANT("IAM with a service account: grant",
              "{" A_META("") "," A_SPEC(",`serviceAccountName`:`sa`") "}", CLASS_IAM, CLAIM_READY,
              BUCKET_READY, true),
        A_REFUSE("the Bucket missing: an Event", ACCESS, CLASS_KEY, CLAIM_READY, NULL,
                 COSI_REASON_FAILED_GRANT_ACCESS,
                 "failed to fetch bucket: buckets.objectstorage.k8s.io \"bucket-u1\" not found"),
        A_REFUSE("waiting for the Bucket: not ready", ACCESS, CLASS_KEY, CLAIM_READY,
                 "{" B_META("") "," B_SPEC("") "}", COSI_REASON_WAITING_FOR_BUCKET,
                 MSG_STATE ": (isReady? false), (ID empty? true)"),
        A_REFUSE("waiting for the Bucket: ready without an id", ACCESS, CLASS_KEY, CLAIM_READY,
                 "{" B_META("") "," B_SPEC("") ",`status`:{`bucketReady`:true}}",
                 COSI_REASON_WAITING_FOR_BUCKET, MSG_STATE ": (isReady? true), (ID empty? true)"),
        REVOKE("deleting with an account: revoke it",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING) "," A_SPEC(
                   "") ",`status`:{`accessGranted`:true,`accountID`:`acct-1`}}",
               CLASS_KEY, CLAIM_READY, BUCKET_READY, "bkt-1", "acct-1", false),
        REVOKE("deleting without an account on a ready Bucket: grant again to learn it",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING) "," A_SPEC("") "}", CLASS_KEY,
               CLAIM_READY, BUCKET_READY, "bkt-1", NULL, true),
        REVOKE("deleting without an account and no Bucket id: nothing to revoke",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING) "," A_SPEC("") "}", CLASS_KEY,
               CLAIM_WAITING, NULL, NULL, NULL, false),
        A_SKIP("deleting without our finalizer: nothing",
               "{" A_META(",`finalizers`:[`x`]" DELETING) "," A_SPEC(
                   "") ",`status`:{`accountID`:`acct-1`}}",
               CLASS_KEY, CLAIM_READY, BUCKET_READY),
        A_SKIP("deleting another driver's access: nothing",
               "{" A_META(",`finalizers`:[" FIN_A
                          "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
               CLASS_OTHER, CLAIM_READY, BUCKET_READY),
        REVOKE("deleting with the class gone: the Bucket says it is ours",
               "{" A_META(",`finalizers`:[" FIN_A
                          "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
               NULL, CLAIM_READY, BUCKET_READY, "bkt-1", "acct-1", false),
        A_SKIP("deleting with the class gone and another driver's Bucket: nothing",
               "{" A_META(",`finalizers`:[" FIN_A
                          "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
               NULL, CLAIM_READY, BUCKET_OTHER),
        A_SKIP("deleting with the class and the Bucket gone: not known to be ours",
               "{" A_META(",`finalizers`:[" FIN_A
                          "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
               NULL, NULL, NULL),
        A_REFUSE("deleting with the class gone and no account: cannot learn it",
                 "{" A_META(",`finalizers`:[" FIN_A "]" DELETING) "," A_SPEC("") "}", NULL,
                 CLAIM_READY, BUCKET_READY, COSI_REASON_FAILED_REVOKE_ACCESS,
                 "failed to revoke access: cannot learn the account: "
                 "bucketaccessclasses.objectstorage.k8s.io \"key\" not found"),
        A_REFUSE("deleting with an account but the claim gone: cannot revoke",
                 "{" A_META(",`finalizers`:[" FIN_A
                            "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
                 CLASS_KEY, NULL, NULL, COSI_REASON_FAILED_REVOKE_ACCESS,
                 "failed to revoke access: bucketclaims.objectstorage.k8s.io \"c1\" not found"),
        A_REFUSE("deleting with an account but the Bucket gone: cannot revoke",
                 "{" A_META(",`finalizers`:[" FIN_A
                            "]" DELETING) "," A_SPEC("") ",`status`:{`accountID`:`acct-1`}}",
                 CLASS_KEY, CLAIM_READY, NULL, COSI_REASON_FAILED_REVOKE_ACCESS,
                 "failed to revoke access: buckets.objectstorage.k8s.io \"bucket-u1\" not found"),
        REVOKE("deleting with an account, the claim and Bucket gone, the id recorded: revoke it",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING REC("bkt-rec")) "," A_SPEC(
                   "") ",`status`:{`accessGranted`:true,`accountID`:`acct-1`}}",
               CLASS_KEY, NULL, NULL, "bkt-rec", "acct-1", false),
        REVOKE("deleting with the id recorded: it wins over the Bucket's",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING REC("bkt-rec")) "," A_SPEC(
                   "") ",`status`:{`accountID`:`acct-1`}}",
               CLASS_KEY, CLAIM_READY, BUCKET_READY, "bkt-rec", "acct-1", false),
        REVOKE("deleting without an account, the Bucket gone, the id recorded: grant again",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING REC("bkt-rec")) "," A_SPEC("") "}",
               CLASS_KEY, NULL, NULL, "bkt-rec", NULL, true),
        A_SKIP("deleting with the id recorded but neither class nor Bucket: not known to be ours",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING REC("bkt-rec")) "," A_SPEC(
                   "") ",`status`:{`accountID`:`acct-1`}}",
               NULL, NULL, NULL),
        REVOKE("deleting without a class name or secret: still revoked",
               "{" A_META(",`finalizers`:[" FIN_A "]" DELETING) ",`spec`:{`bucketClaimName`:`c1`},"
                                                                "`status`:{`accountID`:`acct-1`}}",
               NULL, CLAIM_READY, BUCKET_READY, "bkt-1", "acct-1", false),
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *a = J(rows[i].access), *cls = J(rows[i].cls), *claim = J(rows[i].claim),
                    *b = J(rows[i].bucket);
        csc_access_plan p;
        int rc = csc_access_plan_make(DRIVER, a, cls, claim, b, &p);
        expect_int(rows[i].row, "rc", rc, 0);
        expect_int(rows[i].row, "action", p.action, rows[i].action);
        expect_int(rows[i].row, "record", p.record, rows[i].add_fin);
        expect_str(rows[i].row, "bucket_id", p.bucket_id, rows[i].bucket_id);
        expect_str(rows[i].row, "account_id", p.account_id, rows[i].account);
        expect_int(rows[i].row, "regrant", p.regrant, rows[i].regrant);
        expect_str(rows[i].row, "reason", p.event.reason, rows[i].reason);
        expect_str(rows[i].row, "message", p.event.message, rows[i].message);
        if (p.action == CSC_ACCESS_GRANT)
            expect_str(rows[i].row, "bucket_name", p.bucket_name, "bucket-u1");
        csc_access_plan_clear(&p);
        json_object_put(a);
        json_object_put(cls);
        json_object_put(claim);
        json_object_put(b);
    }
    csc_access_plan p;
    json_object *arr = J("[1]");
    expect_int("an access that is an array", "rc",
               csc_access_plan_make(DRIVER, arr, NULL, NULL, NULL, &p), -EINVAL);
    csc_access_plan_clear(&p);
    json_object_put(arr);
    csc_access_plan_clear(NULL);
}

static void test_access_names_and_requests(void **state)
{
    (void)state;
    json_object *a = J(ACCESS), *key = J(CLASS_KEY), *iam = J(CLASS_IAM);
    json_object *odd = J("{`driverName`:`cosi.example.com`,`authenticationType`:`key`}");
    char *acct = csc_account_name(a);
    expect_str("account name", "name", acct, "ba-a-uid");
    free(acct);
    Cosi__V1alpha1__DriverGrantBucketAccessRequest *g = NULL;
    assert_int_equal(csc_grant_request(a, key, "bkt-1", &g), 0);
    expect_str("grant", "bucket_id", g->bucket_id, "bkt-1");
    expect_str("grant", "name", g->name, "ba-a-uid");
    expect_int("grant Key", "auth", g->authentication_type,
               COSI__V1ALPHA1__AUTHENTICATION_TYPE__Key);
    expect_int("grant: the class's parameters", "n", (long long)g->n_parameters, 1);
    expect_str("grant", "p", g->parameters[0]->value, "1");
    csc_request_free(&g->base);
    assert_int_equal(csc_grant_request(a, iam, "bkt-1", &g), 0);
    expect_int("grant IAM", "auth", g->authentication_type,
               COSI__V1ALPHA1__AUTHENTICATION_TYPE__IAM);
    expect_int("grant IAM without parameters", "n", (long long)g->n_parameters, 0);
    csc_request_free(&g->base);
    assert_int_equal(csc_grant_request(a, odd, "bkt-1", &g), 0);
    expect_int("an authentication type spelled otherwise is unknown (upstream)", "auth",
               g->authentication_type,
               COSI__V1ALPHA1__AUTHENTICATION_TYPE__UnknownAuthenticationType);
    csc_request_free(&g->base);
    expect_int("grant without a bucket id", "rc", csc_grant_request(a, key, NULL, &g), -EINVAL);
    json_object *nouid = J("{`metadata`:{`name`:`a1`}}");
    expect_int("grant without a uid", "rc", csc_grant_request(nouid, key, "b", &g), -EINVAL);
    assert_null(csc_account_name(nouid));
    json_object_put(nouid);

    Cosi__V1alpha1__DriverRevokeBucketAccessRequest *r = NULL;
    assert_int_equal(csc_revoke_request("bkt-1", "acct-1", &r), 0);
    expect_str("revoke", "bucket_id", r->bucket_id, "bkt-1");
    expect_str("revoke", "account_id", r->account_id, "acct-1");
    csc_request_free(&r->base);
    expect_int("revoke without an account", "rc", csc_revoke_request("bkt-1", "", &r), -EINVAL);

    expect_str("class name", "", csc_access_class_name(a), "key");
    expect_str("claim name", "", csc_access_claim_name(a), "c1");
    expect_str("secret name", "", csc_access_secret_name(a), "creds");
    assert_true(csc_class_is_ours(DRIVER, key));
    json_object *upper = J("{`driverName`:`COSI.EXAMPLE.COM`}");
    assert_true(csc_class_is_ours(DRIVER, upper));
    json_object_put(upper);
    json_object_put(odd);
    json_object_put(iam);
    json_object_put(key);
    json_object_put(a);
}

/* ---- the grant's answer ---------------------------------------------------------------------- */

typedef Cosi__V1alpha1__DriverGrantBucketAccessResponse grant_resp;
typedef Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry cred_entry;
typedef Cosi__V1alpha1__CredentialDetails cred_details;
typedef Cosi__V1alpha1__CredentialDetails__SecretsEntry secret_entry;

/* A response built on the heap: protocols[i] names the entry, kv[i] holds
 * "key=value" pairs (NULL-ended; NULL for no details at all). */
static grant_resp *resp_new(size_t n, const char *const *protocols, const char *const *const *kv)
{
    grant_resp *r = calloc(1, sizeof(*r));
    cosi__v1alpha1__driver_grant_bucket_access_response__init(r);
    r->account_id = strdup("acct-1");
    r->n_credentials = n;
    r->credentials = calloc(n + 1, sizeof(void *));
    for (size_t i = 0; i < n; i++) {
        cred_entry *e = calloc(1, sizeof(*e));
        cosi__v1alpha1__driver_grant_bucket_access_response__credentials_entry__init(e);
        e->key = strdup(protocols[i]);
        if (kv[i]) {
            cred_details *d = calloc(1, sizeof(*d));
            cosi__v1alpha1__credential_details__init(d);
            size_t m = 0;
            while (kv[i][m])
                m++;
            d->secrets = calloc(m + 1, sizeof(void *));
            for (size_t k = 0; k < m; k++) {
                secret_entry *s = calloc(1, sizeof(*s));
                cosi__v1alpha1__credential_details__secrets_entry__init(s);
                const char *eq = strchr(kv[i][k], '=');
                s->key = strndup(kv[i][k], (size_t)(eq - kv[i][k]));
                s->value = strdup(eq + 1);
                d->secrets[d->n_secrets++] = s;
            }
            e->value = d;
        }
        r->credentials[i] = e;
    }
    return r;
}

static void resp_free(grant_resp *r)
{
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_grant_answers_need_exactly_one_credential(void **state)
{
    (void)state;
    json_object *a = J(ACCESS);
    static const char *const s3kv[] = {"accessKeyID=AK", NULL};
    static const struct {
        const char *row;
        size_t n;
        const char *protos[3];
        int rc;
    } rows[] = {
        {"none", 0, {NULL}, -EINVAL},
        {"one", 1, {"s3"}, 0},
        {"two protocols", 2, {"s3", "azure"}, -EINVAL},
        {"a key repeated on the wire is one map entry (Go)", 2, {"s3", "s3"}, 0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        const char *const *kv[] = {s3kv, s3kv, s3kv};
        grant_resp *r = resp_new(rows[i].n, rows[i].protos, kv);
        csc_event ev;
        int rc = csc_grant_check(a, r, &ev);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        if (rc < 0) {
            expect_str(rows[i].row, "reason", ev.reason, COSI_REASON_FAILED_GRANT_ACCESS);
            expect_str(rows[i].row, "message", ev.message,
                       "BucketAccess a1: Credentials returned in "
                       "DriverGrantBucketAccessResponse should be of length 1");
        }
        free(ev.message);
        resp_free(r);
    }
    json_object_put(a);
}

/* ---- BucketInfo ---------------------------------------------------------------------------- */

#define BI_HEAD "{`metadata`:{`name`:`bc-a-uid`,`creationTimestamp`:null},`spec`:{"

static void test_bucket_info_bytes(void **state)
{
    (void)state;
    static const char *const s3[] = {"endpoint=https://s3.example.com", "region=us-east-1",
                                     "accessKeyID=AKIA", "accessSecretKey=SECRET", NULL};
    static const char *const s3_part[] = {"accessKeyID=AKIA", NULL};
    static const char *const s3_esc[] = {
        "endpoint=https://e<x>&y", "region=r\xe2\x80\xa8\xe2\x80\xa9",
        "accessKeyID=a\"\\\n\t\x01\b\f\r\x1f\x7f", "accessSecretKey=\xc3\xa9\xff\xe2\x80", NULL};
    static const char *const az[] = {"accessToken=TOKEN", "expiryTs=2025-01-02 03:04:05 +0000 UTC",
                                     NULL};
    static const char *const az_bad[] = {"accessToken=TOKEN", "expiryTs=tomorrow", NULL};
    static const char *const az_none[] = {"accessToken=TOKEN", NULL};
    static const char *const gcs[] = {"projectID=p", "privateKey=KEY", NULL};
    static const char *const s3_last[] = {"accessKeyID=LAST", NULL};
    static const struct {
        const char *row, *access, *cls;
        size_t n;
        const char *protos[2];
        const char *const *kv[2];
        const char *want;
    } rows[] = {
        {"S3",
         ACCESS,
         CLASS_KEY,
         1,
         {"s3"},
         {s3},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:`https://s3.example.com`,`region`:`us-east-1`,"
                 "`accessKeyID`:`AKIA`,`accessSecretKey`:`SECRET`},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"S3 with keys missing: empty strings",
         ACCESS,
         CLASS_KEY,
         1,
         {"s3"},
         {s3_part},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:``,`region`:``,`accessKeyID`:`AKIA`,`accessSecretKey`:``},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"S3 without details at all: empty strings",
         ACCESS,
         CLASS_KEY,
         1,
         {"s3"},
         {NULL},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:``,`region`:``,`accessKeyID`:``,`accessSecretKey`:``},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"a repeated s3 entry: the last one (Go's map)",
         ACCESS,
         CLASS_KEY,
         2,
         {"s3", "s3"},
         {s3, s3_last},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:``,`region`:``,`accessKeyID`:`LAST`,`accessSecretKey`:``},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"Azure with an expiry",
         "{" A_META("") "," A_SPEC(",`protocol`:`Azure`") "}",
         CLASS_KEY,
         1,
         {"azure"},
         {az},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,`secretS3`:null,"
                 "`secretAzure`:{`accessToken`:`TOKEN`,`expiryTimeStamp`:`2025-01-02T03:04:05Z`},"
                 "`protocols`:[`Azure`]}}"},
        {"Azure with an expiry that does not parse: null",
         ACCESS,
         CLASS_KEY,
         1,
         {"azure"},
         {az_bad},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,`secretS3`:null,"
                 "`secretAzure`:{`accessToken`:`TOKEN`,`expiryTimeStamp`:null},"
                 "`protocols`:[`S3`]}}"},
        {"Azure without an expiry: null",
         ACCESS,
         CLASS_KEY,
         1,
         {"azure"},
         {az_none},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,`secretS3`:null,"
                 "`secretAzure`:{`accessToken`:`TOKEN`,`expiryTimeStamp`:null},"
                 "`protocols`:[`S3`]}}"},
        {"S3 and Azure: only S3",
         ACCESS,
         CLASS_KEY,
         2,
         {"azure", "s3"},
         {az, s3_part},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:``,`region`:``,`accessKeyID`:`AKIA`,`accessSecretKey`:``},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"GCS only: both null",
         ACCESS,
         CLASS_IAM,
         1,
         {"gcs"},
         {gcs},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`IAM`,`secretS3`:null,"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
        {"no protocol and no authentication type: empty strings",
         "{" A_META("") ",`spec`:{`protocol`:5,`credentialsSecretName`:`creds`}}",
         "{`driverName`:`cosi.example.com`}",
         1,
         {"gcs"},
         {gcs},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:``,`secretS3`:null,"
                 "`secretAzure`:null,`protocols`:[``]}}"},
        {"Go's escaping: <>&, U+2028/9, controls, invalid UTF-8 as U+FFFD",
         ACCESS,
         CLASS_KEY,
         1,
         {"s3"},
         {s3_esc},
         BI_HEAD "`bucketName`:`bucket-u1`,`authenticationType`:`Key`,"
                 "`secretS3`:{`endpoint`:`https://e\\u003cx\\u003e\\u0026y`,"
                 "`region`:`r\\u2028\\u2029`,"
                 "`accessKeyID`:`a\\`\\\\\\n\\t\\u0001\\b\\f\\r\\u001f\x7f`,"
                 "`accessSecretKey`:`\xc3\xa9\\ufffd\\ufffd\\ufffd`},"
                 "`secretAzure`:null,`protocols`:[`S3`]}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *a = J(rows[i].access), *cls = J(rows[i].cls);
        grant_resp *r = resp_new(rows[i].n, rows[i].protos, rows[i].kv);
        char *info = NULL;
        assert_int_equal(csc_bucket_info(a, cls, "bucket-u1", r, &info), 0);
        expect_text(rows[i].row, "BucketInfo", info, rows[i].want);
        /* What the Secret carries is this text, unchanged. */
        json_object *sec = NULL;
        assert_int_equal(csc_secret_object(a, info, &sec), 0);
        expect_str(rows[i].row, "Secret stringData",
                   kobj_str(kobj_obj(sec, "stringData"), COSI_SECRET_KEY), info);
        json_object_put(sec);
        free(info);
        resp_free(r);
        json_object_put(a);
        json_object_put(cls);
    }
}

static void test_bucket_info_escapes_the_backquote_row_right(void **state)
{
    (void)state;
    /* The escaping row above goes through Q(), which turns ` into ": check
     * the quote escape on its own, with real quotes. */
    static const char *const kv[] = {"accessKeyID=say \"hi\" `x`", NULL};
    const char *protos[] = {"s3"};
    const char *const *kvs[] = {kv};
    grant_resp *r = resp_new(1, protos, kvs);
    json_object *a = J(ACCESS), *cls = J(CLASS_KEY);
    char *info = NULL;
    assert_int_equal(csc_bucket_info(a, cls, "bucket-u1", r, &info), 0);
    assert_non_null(strstr(info, "\"accessKeyID\":\"say \\\"hi\\\" `x`\""));
    free(info);
    resp_free(r);
    json_object_put(a);
    json_object_put(cls);
}

static void test_bucket_info_of_huge_values(void **state)
{
    (void)state;
    size_t n = 1 << 20;
    char *big = malloc(n + 32);
    assert_non_null(big);
    strcpy(big, "accessKeyID=");
    memset(big + 12, '<', n);
    big[12 + n] = '\0';
    const char *kv[] = {big, NULL};
    const char *protos[] = {"s3"};
    const char *const *kvs[] = {kv};
    grant_resp *r = resp_new(1, protos, kvs);
    json_object *a = J(ACCESS), *cls = J(CLASS_KEY);
    char *info = NULL;
    assert_int_equal(csc_bucket_info(a, cls, "bucket-u1", r, &info), 0);
    /* Each '<' becomes six bytes, nothing is cut. */
    const char *p = strstr(info, "\"accessKeyID\":\"");
    assert_non_null(p);
    p += strlen("\"accessKeyID\":\"");
    for (size_t i = 0; i < n; i++)
        if (memcmp(p + 6 * i, "\\u003c", 6) != 0)
            fail_msg("escape %zu of the huge value is wrong", i);
    assert_memory_equal(p + 6 * n, "\",", 2);
    free(info);
    resp_free(r);
    free(big);
    json_object_put(a);
    json_object_put(cls);
}

static void test_azure_expiry_parses_as_go(void **state)
{
    (void)state;
    static const struct {
        const char *row, *in, *want;
    } rows[] = {
        {"UTC", "2025-01-02 03:04:05 +0000 UTC", "\"2025-01-02T03:04:05Z\""},
        {"nanoseconds dropped", "2025-01-02 03:04:05.123456789 +0000 UTC",
         "\"2025-01-02T03:04:05Z\""},
        {"a comma before the fraction", "2025-01-02 03:04:05,5 +0000 UTC",
         "\"2025-01-02T03:04:05Z\""},
        {"more than nine fraction digits", "2025-01-02 03:04:05.1234567891234 +0000 UTC",
         "\"2025-01-02T03:04:05Z\""},
        {"a positive offset", "2025-01-02 03:04:05 +0130 CET", "\"2025-01-02T01:34:05Z\""},
        {"a negative offset", "2025-01-02 03:04:05 -0800 PST", "\"2025-01-02T11:04:05Z\""},
        {"the name UTC wins over the offset", "2025-01-02 03:04:05 +0100 UTC",
         "\"2025-01-02T03:04:05Z\""},
        {"across a year", "2025-01-01 00:30:00 +0100 CET", "\"2024-12-31T23:30:00Z\""},
        {"a leap day", "2024-02-29 12:00:00 +0000 UTC", "\"2024-02-29T12:00:00Z\""},
        {"no leap day", "2023-02-29 12:00:00 +0000 UTC", "null"},
        {"a one-digit hour", "2025-01-02 3:04:05 +0000 UTC", "\"2025-01-02T03:04:05Z\""},
        {"runs of spaces", "2025-01-02   03:04:05  +0000   UTC", "\"2025-01-02T03:04:05Z\""},
        {"RFC 3339 is another layout", "2025-01-02T03:04:05Z", "null"},
        {"empty", "", "null"},
        {"garbage", "garbage", "null"},
        {"trailing text", "2025-01-02 03:04:05 +0000 UTC extra", "null"},
        {"UTC with a letter more", "2025-01-02 03:04:05 +0000 UTCX", "null"},
        {"GMT with an hour", "2025-01-02 03:04:05 +0500 GMT+5", "\"2025-01-01T22:04:05Z\""},
        {"GMT with too many hours", "2025-01-02 03:04:05 +0500 GMT+25", "null"},
        {"GMT alone", "2025-01-02 03:04:05 +0000 GMT", "\"2025-01-02T03:04:05Z\""},
        {"GMT with a letter more", "2025-01-02 03:04:05 +0000 GMTX", "null"},
        {"a numeric zone name", "2025-01-02 03:04:05 +0500 +05", "\"2025-01-01T22:04:05Z\""},
        {"ChST", "2025-01-02 03:04:05 +1000 ChST", "\"2025-01-01T17:04:05Z\""},
        {"MeST", "2025-01-02 03:04:05 +0000 MeST", "\"2025-01-02T03:04:05Z\""},
        {"WITA", "2025-01-02 03:04:05 +0800 WITA", "\"2025-01-01T19:04:05Z\""},
        {"four capitals not ending in T", "2025-01-02 03:04:05 +0800 ABCD", "null"},
        {"five capitals ending in T", "2025-01-02 03:04:05 +0800 ABCDT",
         "\"2025-01-01T19:04:05Z\""},
        {"six capitals", "2025-01-02 03:04:05 +0800 ABCDEF", "null"},
        {"lower case", "2025-01-02 03:04:05 +0800 Abc", "null"},
        {"utc in lower case", "2025-01-02 03:04:05 +0000 utc", "null"},
        {"no zone name", "2025-01-02 03:04:05 +0000", "null"},
        {"hour 24", "2025-01-02 24:00:00 +0000 UTC", "null"},
        {"minute 60", "2025-01-02 23:60:00 +0000 UTC", "null"},
        {"second 60", "2025-01-02 23:00:60 +0000 UTC", "null"},
        {"month 13", "2025-13-02 03:04:05 +0000 UTC", "null"},
        {"month 0", "2025-00-02 03:04:05 +0000 UTC", "null"},
        {"a one-digit month", "2025-1-02 03:04:05 +0000 UTC", "null"},
        {"day 0", "2025-01-00 03:04:05 +0000 UTC", "null"},
        {"day 32", "2025-01-32 03:04:05 +0000 UTC", "null"},
        {"offset 24 hours", "2025-01-02 03:04:05 +2400 XYZ", "\"2025-01-01T03:04:05Z\""},
        {"offset 60 minutes", "2025-01-02 03:04:05 +0060 XYZ", "\"2025-01-02T02:04:05Z\""},
        {"offset 25 hours", "2025-01-02 03:04:05 +2500 XYZ", "null"},
        {"offset 61 minutes", "2025-01-02 03:04:05 +0061 XYZ", "null"},
        {"offset without a sign", "2025-01-02 03:04:05 0000 UTC", "null"},
        {"offset with a colon", "2025-01-02 03:04:05 +00:00 UTC", "null"},
        {"a fraction point without digits", "2025-01-02 03:04:05. +0000 UTC", "null"},
        {"no seconds", "2025-01-02 03:04 +0000 UTC", "null"},
        {"a signed year", "+025-01-02 03:04:05 +0000 UTC", "null"},
        {"year 0", "0000-01-01 00:00:00 +0000 UTC", "\"0000-01-01T00:00:00Z\""},
        {"Go's zero time is null", "0001-01-01 00:00:00 +0000 UTC", "null"},
        {"just after the zero time", "0001-01-01 00:00:00.5 +0000 UTC", "\"0001-01-01T00:00:00Z\""},
        {"the zero time by an offset is null", "0001-01-01 01:00:00 +0100 CET", "null"},
        {"before year 0", "0000-01-01 00:00:00 +0100 CET", "\"-0001-12-31T23:00:00Z\""},
        {"after year 9999", "9999-12-31 23:59:59 -0100 XYZ", "\"10000-01-01T00:59:59Z\""},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char out[CSC_EXPIRY_MAX];
        int rc = csc_azure_expiry(rows[i].in, out);
        expect_str(rows[i].row, "expiry", out, rows[i].want);
        expect_int(rows[i].row, "rc", rc, strcmp(rows[i].want, "null") == 0 ? -EINVAL : 0);
    }
    char out[CSC_EXPIRY_MAX];
    expect_int("NULL", "rc", csc_azure_expiry(NULL, out), -EINVAL);
    expect_str("NULL", "expiry", out, "null");
}

/* ---- the Secret -------------------------------------------------------------------------------
 */

static void test_secret_object(void **state)
{
    (void)state;
    json_object *a = J(ACCESS), *s = NULL;
    assert_int_equal(csc_secret_object(a, "{}", &s), 0);
    char *text = kobj_to_text(s, NULL);
    expect_text("the Secret", "object", text,
                "{`apiVersion`:`v1`,`kind`:`Secret`,`metadata`:{`name`:`creds`,`namespace`:`apps`,"
                "`finalizers`:[`cosi.objectstorage.k8s.io/secret-protection`]},`type`:`Opaque`,"
                "`stringData`:{`BucketInfo`:`{}`}}");
    free(text);
    assert_true(csc_secret_is_ours(s));
    json_object_put(s);
    json_object *theirs = J("{`metadata`:{`finalizers`:[`x`]}}");
    assert_false(csc_secret_is_ours(theirs));
    json_object_put(theirs);
    json_object *nons = J("{`metadata`:{`name`:`a1`},`spec`:{`credentialsSecretName`:`c`}}");
    expect_int("a Secret needs a namespace", "rc", csc_secret_object(nons, "{}", &s), -EINVAL);
    assert_null(s);
    json_object_put(nons);
    json_object_put(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lease_name_is_sanitized_as_upstream),
        cmocka_unit_test(test_driver_names_compare_as_go_equal_fold),
        cmocka_unit_test(test_resource_versions_compare_as_integers),
        cmocka_unit_test(test_error_texts_are_worded_as_upstream),
        cmocka_unit_test(test_bucket_decisions),
        cmocka_unit_test(test_bucket_claim_references),
        cmocka_unit_test(test_patches_carry_the_resource_version),
        cmocka_unit_test(test_bucket_requests),
        cmocka_unit_test(test_access_decisions),
        cmocka_unit_test(test_access_names_and_requests),
        cmocka_unit_test(test_grant_answers_need_exactly_one_credential),
        cmocka_unit_test(test_bucket_info_bytes),
        cmocka_unit_test(test_bucket_info_escapes_the_backquote_row_right),
        cmocka_unit_test(test_bucket_info_of_huge_values),
        cmocka_unit_test(test_azure_expiry_parses_as_go),
        cmocka_unit_test(test_secret_object),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
