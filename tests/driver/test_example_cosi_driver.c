/*
 * The example COSI driver against common/cosi's client: every RPC's success
 * path, idempotency and error codes, both authentication types, state across
 * SIGKILL, status.json without secrets, credentials kept out of the -v=5
 * log, fault injection, flags and SIGTERM. (The client's checks of answers
 * that break the contract and the redaction table are in
 * tests/unit/test_cosi_client.c.)
 *
 * Most tests share one driver (unique names keep them apart); tests that
 * need other flags, a restart or a crash start their own.
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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>
#include <openssl/evp.h>

#include "cosi/cosi.h"
#include "harness.h"

#define TMO (10 * UTIL_SECOND)
#define KEY COSI__V1ALPHA1__AUTHENTICATION_TYPE__Key
#define IAM COSI__V1ALPHA1__AUTHENTICATION_TYPE__IAM

/* ---- driver processes ------------------------------------------------------------- */

typedef struct dproc {
    pid_t pid;
    char *dir, *endpoint, *extra, *log;
    csi_conn *c;
} dproc;

static char *driver_bin;
static int counter;
static dproc *shared;

static void dspawn(dproc *p)
{
    /* Through a shell that execs the driver: same pid, stderr to a file. */
    char *cmd = util_asprintf("exec '%s' --endpoint='%s' --state-dir='%s' "
                              "--drivername=cosi.test.example.com %s 2>>'%s'",
                              driver_bin, p->endpoint, p->dir, p->extra, p->log);
    char *sh[] = {"/bin/sh", "-c", cmd, NULL};
    p->pid = th_spawn(sh, NULL);
    free(cmd);
    assert_true(p->pid > 0);
    csi_conn_opts o = {.connect_timeout = 20 * UTIL_SECOND};
    if (csi_conn_new(p->endpoint, &o, &p->c) < 0)
        fail_msg("cannot connect to the driver: %s", util_err_last());
}

static dproc *dstart(const char *extra)
{
    dproc *p = util_calloc(1, sizeof(*p));
    counter++;
    p->dir = util_asprintf("%s/cstate%d", th_tmpdir(), counter);
    p->endpoint = util_asprintf("unix://%s/c%d.sock", th_tmpdir(), counter);
    p->log = util_asprintf("%s/c%d.log", th_tmpdir(), counter);
    p->extra = util_strdup(extra ? extra : "");
    dspawn(p);
    return p;
}

static int dstop(dproc *p, int sig)
{
    csi_conn_free(p->c);
    p->c = NULL;
    int status = th_stop(p->pid, sig);
    p->pid = 0;
    return status;
}

static void drestart(dproc *p, const char *extra)
{
    free(p->extra);
    p->extra = util_strdup(extra ? extra : "");
    dspawn(p);
}

static char *slurp(const char *path);

static void dfree(dproc *p)
{
    if (!p)
        return;
    if (p->pid)
        dstop(p, SIGTERM);
    /* The driver's stderr into the suite's output: tests/run.sh looks there
     * for sanitizer reports. */
    char *log = slurp(p->log);
    if (log)
        fputs(log, stderr);
    free(log);
    free(p->dir);
    free(p->endpoint);
    free(p->extra);
    free(p->log);
    free(p);
}

static const char *nm(const char *prefix)
{
    static char ring[16][96];
    static int at;
    char *b = ring[at++ % 16];
    snprintf(b, sizeof(ring[0]), "%s-%d", prefix, ++counter);
    return b;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    util_buf b = {0};
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        util_buf_put(&b, chunk, n);
    fclose(f);
    if (!b.buf)
        util_buf_put(&b, "", 0);
    return b.buf;
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- calls ---------------------------------------------------------------------------- */

/* A request's map<string,string> built from "k=v" strings (up to 4). */
typedef struct kvs {
    Cosi__V1alpha1__DriverCreateBucketRequest__ParametersEntry e[4];
    Cosi__V1alpha1__DriverCreateBucketRequest__ParametersEntry *p[4];
    char text[4][128];
    size_t n;
} kvs;

/* Both requests' parameter entries have the same layout; the descriptor is
 * the one packing looks at, so each user picks its own. */
static void kvs_fill(kvs *k, const ProtobufCMessageDescriptor *d, const char *const *pairs)
{
    memset(k, 0, sizeof(*k));
    for (; pairs && *pairs && k->n < 4; pairs++, k->n++) {
        snprintf(k->text[k->n], sizeof(k->text[0]), "%s", *pairs);
        char *eq = strchr(k->text[k->n], '=');
        assert_non_null(eq);
        *eq = '\0';
        k->e[k->n].base.descriptor = d;
        k->e[k->n].key = k->text[k->n];
        k->e[k->n].value = eq + 1;
        k->p[k->n] = &k->e[k->n];
    }
}

#define PAIRS(...) ((const char *const[]){__VA_ARGS__, NULL})

static int create(dproc *p, const char *name, const char *const *pairs,
                  Cosi__V1alpha1__DriverCreateBucketResponse **resp)
{
    kvs k;
    kvs_fill(&k, &cosi__v1alpha1__driver_create_bucket_request__parameters_entry__descriptor,
             pairs);
    Cosi__V1alpha1__DriverCreateBucketRequest req =
        COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_REQUEST__INIT;
    req.name = (char *)name;
    req.n_parameters = k.n;
    req.parameters = k.p;
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    csi_status st = {0};
    int rc = cosi_create_bucket(p->c, &req, TMO, &r, &st);
    if (resp)
        *resp = r;
    else if (r)
        cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
    return rc == 0 ? CSI_OK : st.code;
}

/* A new bucket's id (caller frees). */
static char *new_bucket(dproc *p, const char *const *pairs)
{
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    assert_int_equal(create(p, nm("bucket"), pairs, &r), CSI_OK);
    char *id = util_strdup(r->bucket_id);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
    return id;
}

static int delete_bucket(dproc *p, const char *id)
{
    Cosi__V1alpha1__DriverDeleteBucketRequest req =
        COSI__V1ALPHA1__DRIVER_DELETE_BUCKET_REQUEST__INIT;
    req.bucket_id = (char *)id;
    csi_status st = {0};
    return cosi_delete_bucket(p->c, &req, TMO, &st) == 0 ? CSI_OK : st.code;
}

static int grant(dproc *p, const char *bucket, const char *name, int auth, const char *const *pairs,
                 Cosi__V1alpha1__DriverGrantBucketAccessResponse **resp)
{
    kvs k;
    kvs_fill(&k, &cosi__v1alpha1__driver_grant_bucket_access_request__parameters_entry__descriptor,
             pairs);
    Cosi__V1alpha1__DriverGrantBucketAccessRequest req =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_REQUEST__INIT;
    req.bucket_id = (char *)bucket;
    req.name = (char *)name;
    req.authentication_type = auth;
    req.n_parameters = k.n;
    req.parameters = (Cosi__V1alpha1__DriverGrantBucketAccessRequest__ParametersEntry **)k.p;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *r = NULL;
    csi_status st = {0};
    int rc = cosi_grant_bucket_access(p->c, &req, TMO, &r, &st);
    if (resp)
        *resp = r;
    else if (r)
        cosi__v1alpha1__driver_grant_bucket_access_response__free_unpacked(r, NULL);
    return rc == 0 ? CSI_OK : st.code;
}

static int revoke_access(dproc *p, const char *bucket, const char *account)
{
    Cosi__V1alpha1__DriverRevokeBucketAccessRequest req =
        COSI__V1ALPHA1__DRIVER_REVOKE_BUCKET_ACCESS_REQUEST__INIT;
    req.bucket_id = (char *)bucket;
    req.account_id = (char *)account;
    csi_status st = {0};
    return cosi_revoke_bucket_access(p->c, &req, TMO, &st) == 0 ? CSI_OK : st.code;
}

static void free_grant(Cosi__V1alpha1__DriverGrantBucketAccessResponse *r)
{
    cosi__v1alpha1__driver_grant_bucket_access_response__free_unpacked(r, NULL);
}

/* ---- status.json and faults.json ------------------------------------------------------ */

static json_object *status(dproc *p)
{
    char *path = util_asprintf("%s/status.json", p->dir);
    json_object *o = json_object_from_file(path);
    free(path);
    assert_non_null(o);
    return o;
}

static int64_t status_calls(dproc *p, const char *method)
{
    json_object *st = status(p), *calls, *n;
    int64_t v = 0;
    if (json_object_object_get_ex(st, "calls", &calls) &&
        json_object_object_get_ex(calls, method, &n))
        v = json_object_get_int64(n);
    json_object_put(st);
    return v;
}

/* The status entry of bucket `id` (NULL when absent), borrowed from `st`. */
static json_object *status_bucket(json_object *st, const char *id)
{
    json_object *bs, *v;
    assert_true(json_object_object_get_ex(st, "buckets", &bs));
    for (size_t i = 0; i < json_object_array_length(bs); i++) {
        json_object *b = json_object_array_get_idx(bs, i);
        if (json_object_object_get_ex(b, "id", &v) && strcmp(json_object_get_string(v), id) == 0)
            return b;
    }
    return NULL;
}

static bool status_has_bucket(dproc *p, const char *id)
{
    json_object *st = status(p);
    bool found = status_bucket(st, id) != NULL;
    json_object_put(st);
    return found;
}

static void write_faults(dproc *p, const char *json)
{
    char *tmp = util_asprintf("%s/faults.json.tmp", p->dir);
    char *path = util_asprintf("%s/faults.json", p->dir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
    free(tmp);
    free(path);
}

static char *sha256_hex(const char *s)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    assert_int_equal(EVP_Digest(s, strlen(s), md, &n, EVP_sha256(), NULL), 1);
    char *hex = util_calloc(2 * (size_t)n + 1, 1);
    for (unsigned i = 0; i < n; i++)
        snprintf(hex + 2 * (size_t)i, 3, "%02x", md[i]);
    return hex;
}

/* ---- setup, flags, lifecycle ------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    driver_bin = th_build_path("bin/example-cosi-driver");
    shared = dstart(NULL);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    dfree(shared);
    th_stop_all();
    free(driver_bin);
    return 0;
}

static void test_bad_flags_print_one_line_and_exit_1(void **state)
{
    (void)state;
    const char *bad[] = {
        "",                                         /* no --state-dir */
        "--drivername=-bad-",                       /* not a driver name */
        "--drivername=",                            /* empty */
        "--fault=DriverCreateBucket:explode=1",     /* unknown rule */
        "--fault=CreateVolume:delay=1s",            /* a CSI method, not ours */
        "--fault=DriverCreateBucket:fail=2:NOPE",   /* unknown code */
        "--fault=DriverDeleteBucket:crash=0:after", /* count must be positive */
        "--no-such-flag",                           /* unknown flag */
        "stray-argument",                           /* positional */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *err = util_asprintf("%s/stderr%d", th_tmpdir(), ++counter);
        char *cmd =
            util_asprintf("exec '%s' --endpoint=unix://%s/bad.sock %s%s %s 2>'%s'", driver_bin,
                          th_tmpdir(), i ? "--state-dir=" : "", i ? th_tmpdir() : "", bad[i], err);
        char *argv[] = {"/bin/sh", "-c", cmd, NULL};
        int status = th_stop(th_spawn(argv, NULL), 0);
        char *text = slurp(err);
        assert_non_null(text);
        int lines = 0;
        for (const char *c = text; *c; c++)
            lines += *c == '\n';
        int rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
        if (rc != 1 || lines != 1)
            fail_msg("%s: exit %d, %d lines on stderr: %s", bad[i], rc, lines, text);
        free(text);
        free(cmd);
        free(err);
    }
}

static void test_sigterm_stops_gracefully_and_removes_socket(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    const char *path = p->endpoint + strlen("unix://");
    assert_true(exists(path));
    int status = dstop(p, SIGTERM);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(exists(path));
    dfree(p);
}

/* ---- Identity and buckets ----------------------------------------------------------------- */

static void test_driver_get_info_names_the_driver(void **state)
{
    (void)state;
    Cosi__V1alpha1__DriverGetInfoResponse *r = NULL;
    csi_status st = {0};
    assert_int_equal(cosi_driver_get_info(shared->c, TMO, &r, &st), 0);
    assert_string_equal(r->name, "cosi.test.example.com");
    cosi__v1alpha1__driver_get_info_response__free_unpacked(r, NULL);
}

static void test_create_bucket_is_a_folder_with_s3_info_by_default(void **state)
{
    (void)state;
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    assert_int_equal(create(shared, nm("plain"), NULL, &r), CSI_OK);
    assert_int_equal(r->bucket_info->type_case, COSI__V1ALPHA1__PROTOCOL__TYPE_S3);
    assert_string_equal(r->bucket_info->s3->region, "us-east-1");
    assert_int_equal(r->bucket_info->s3->signature_version,
                     COSI__V1ALPHA1__S3_SIGNATURE_VERSION__S3V4);
    char *path = util_asprintf("%s/buckets/%s", shared->dir, r->bucket_id);
    assert_true(exists(path));
    free(path);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
}

static void test_create_bucket_protocol_and_region_come_from_parameters(void **state)
{
    (void)state;
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    assert_int_equal(create(shared, nm("eu"), PAIRS("region=eu-west-1"), &r), CSI_OK);
    assert_string_equal(r->bucket_info->s3->region, "eu-west-1");
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
    assert_int_equal(create(shared, nm("az"), PAIRS("protocol=azure", "storageAccount=acct1"), &r),
                     CSI_OK);
    assert_int_equal(r->bucket_info->type_case, COSI__V1ALPHA1__PROTOCOL__TYPE_AZURE_BLOB);
    assert_string_equal(r->bucket_info->azureblob->storage_account, "acct1");
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
    assert_int_equal(create(shared, nm("gcs"), PAIRS("protocol=gcs", "projectID=p1"), &r), CSI_OK);
    assert_int_equal(r->bucket_info->type_case, COSI__V1ALPHA1__PROTOCOL__TYPE_GCS);
    assert_string_equal(r->bucket_info->gcs->project_id, "p1");
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
}

static void test_create_bucket_same_name_and_parameters_is_idempotent(void **state)
{
    (void)state;
    const char *name = nm("again");
    Cosi__V1alpha1__DriverCreateBucketResponse *a = NULL, *b = NULL;
    assert_int_equal(create(shared, name, PAIRS("region=r1", "tier=gold"), &a), CSI_OK);
    assert_int_equal(create(shared, name, PAIRS("tier=gold", "region=r1"), &b), CSI_OK);
    assert_string_equal(a->bucket_id, b->bucket_id);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(a, NULL);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(b, NULL);
    assert_int_equal(create(shared, name, PAIRS("region=r2"), NULL), CSI_ALREADY_EXISTS);
    assert_int_equal(create(shared, name, NULL, NULL), CSI_ALREADY_EXISTS);
}

static void test_create_bucket_bad_requests_are_invalid_argument(void **state)
{
    (void)state;
    assert_int_equal(create(shared, "", NULL, NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(create(shared, "tab\there", NULL, NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(create(shared, nm("x"), PAIRS("protocol=ftp"), NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(create(shared, nm("x"), PAIRS("signatureVersion=S3V9"), NULL),
                     CSI_INVALID_ARGUMENT);
    assert_int_equal(create(shared, "bad-utf8-\xc3\x28", NULL, NULL), CSI_INVALID_ARGUMENT);
}

static void test_delete_bucket_removes_it_and_is_idempotent(void **state)
{
    (void)state;
    char *id = new_bucket(shared, NULL);
    char *path = util_asprintf("%s/buckets/%s", shared->dir, id);
    assert_true(exists(path));
    assert_int_equal(delete_bucket(shared, id), CSI_OK);
    assert_false(exists(path));
    assert_false(status_has_bucket(shared, id));
    assert_int_equal(delete_bucket(shared, id), CSI_OK);
    assert_int_equal(delete_bucket(shared, "bkt-never-was"), CSI_OK);
    assert_int_equal(delete_bucket(shared, ""), CSI_INVALID_ARGUMENT);
    free(path);
    free(id);
}

static void test_delete_bucket_with_grants_takes_them_along(void **state)
{
    (void)state;
    char *id = new_bucket(shared, NULL);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *g = NULL;
    assert_int_equal(grant(shared, id, nm("ba"), KEY, NULL, &g), CSI_OK);
    assert_int_equal(delete_bucket(shared, id), CSI_OK);
    assert_false(status_has_bucket(shared, id));
    /* The sidecar's revoke after the bucket went answers OK. */
    assert_int_equal(revoke_access(shared, id, g->account_id), CSI_OK);
    free_grant(g);
    free(id);
}

/* ---- access ------------------------------------------------------------------------ */

static void test_grant_key_returns_s3_credentials_and_is_idempotent(void **state)
{
    (void)state;
    char *id = new_bucket(shared, PAIRS("region=eu-central-1"));
    const char *name = nm("ba");
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *a = NULL, *b = NULL;
    assert_int_equal(grant(shared, id, name, KEY, PAIRS("role=rw"), &a), CSI_OK);
    assert_int_equal(a->n_credentials, 1); /* upstream's sidecar wants exactly one */
    const char *key = cosi_credential(a, "s3", "accessKeyID");
    const char *secret = cosi_credential(a, "s3", "accessSecretKey");
    assert_non_null(key);
    assert_non_null(secret);
    assert_int_equal(strlen(key), 20);
    assert_int_equal(strlen(secret), 40);
    assert_string_equal(cosi_credential(a, "s3", "region"), "eu-central-1");
    assert_non_null(cosi_credential(a, "s3", "endpoint"));
    assert_int_equal(grant(shared, id, name, KEY, PAIRS("role=rw"), &b), CSI_OK);
    assert_string_equal(a->account_id, b->account_id);
    assert_string_equal(cosi_credential(b, "s3", "accessSecretKey"), secret);
    free_grant(b);
    /* Another name is another account with other keys. */
    assert_int_equal(grant(shared, id, nm("ba"), KEY, PAIRS("role=rw"), &b), CSI_OK);
    assert_string_not_equal(a->account_id, b->account_id);
    assert_string_not_equal(cosi_credential(b, "s3", "accessSecretKey"), secret);
    free_grant(b);
    /* Same name, other terms: refused. */
    assert_int_equal(grant(shared, id, name, IAM, PAIRS("role=rw"), NULL), CSI_ALREADY_EXISTS);
    assert_int_equal(grant(shared, id, name, KEY, PAIRS("role=ro"), NULL), CSI_ALREADY_EXISTS);
    /* Revoked and granted again: the same account, new keys. */
    assert_int_equal(revoke_access(shared, id, a->account_id), CSI_OK);
    assert_int_equal(grant(shared, id, name, KEY, PAIRS("role=rw"), &b), CSI_OK);
    assert_string_equal(a->account_id, b->account_id);
    assert_string_not_equal(cosi_credential(b, "s3", "accessSecretKey"), secret);
    free_grant(b);
    free_grant(a);
    free(id);
}

static void test_grant_iam_returns_the_account_without_secrets(void **state)
{
    (void)state;
    char *id = new_bucket(shared, NULL);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *r = NULL;
    assert_int_equal(grant(shared, id, nm("ba"), IAM, NULL, &r), CSI_OK);
    assert_non_null(r->account_id);
    assert_int_equal(r->n_credentials, 1);
    assert_null(cosi_credential(r, "s3", "accessKeyID"));
    assert_null(cosi_credential(r, "s3", "accessSecretKey"));
    assert_string_equal(cosi_credential(r, "s3", "region"), "us-east-1");
    free_grant(r);
    free(id);
}

static void test_grant_key_on_azure_returns_token_and_expiry(void **state)
{
    (void)state;
    char *id = new_bucket(shared, PAIRS("protocol=azure"));
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *r = NULL;
    assert_int_equal(grant(shared, id, nm("ba"), KEY, NULL, &r), CSI_OK);
    assert_non_null(cosi_credential(r, "azure", "accessToken"));
    const char *exp = cosi_credential(r, "azure", "expiryTs");
    assert_non_null(exp);
    assert_non_null(strstr(exp, " +0000 UTC"));
    assert_null(cosi_credential(r, "s3", "accessKeyID"));
    free_grant(r);
    free(id);
}

static void test_grant_errors(void **state)
{
    (void)state;
    char *id = new_bucket(shared, NULL);
    assert_int_equal(grant(shared, "bkt-missing", nm("ba"), KEY, NULL, NULL), CSI_NOT_FOUND);
    assert_int_equal(grant(shared, "", nm("ba"), KEY, NULL, NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(grant(shared, id, "", KEY, NULL, NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(grant(shared, id, nm("ba"),
                           COSI__V1ALPHA1__AUTHENTICATION_TYPE__UnknownAuthenticationType, NULL,
                           NULL),
                     CSI_INVALID_ARGUMENT);
    free(id);
}

static void test_revoke_removes_the_grant_and_unknown_is_ok(void **state)
{
    (void)state;
    char *id = new_bucket(shared, NULL);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *r = NULL;
    assert_int_equal(grant(shared, id, nm("ba"), KEY, NULL, &r), CSI_OK);
    json_object *st = status(shared), *grants;
    assert_true(json_object_object_get_ex(status_bucket(st, id), "grants", &grants));
    assert_int_equal(json_object_array_length(grants), 1);
    json_object_put(st);
    assert_int_equal(revoke_access(shared, id, r->account_id), CSI_OK);
    st = status(shared);
    assert_true(json_object_object_get_ex(status_bucket(st, id), "grants", &grants));
    assert_int_equal(json_object_array_length(grants), 0);
    json_object_put(st);
    assert_int_equal(revoke_access(shared, id, r->account_id), CSI_OK);
    assert_int_equal(revoke_access(shared, "bkt-missing", "acct-missing"), CSI_OK);
    assert_int_equal(revoke_access(shared, id, ""), CSI_INVALID_ARGUMENT);
    assert_int_equal(revoke_access(shared, "", r->account_id), CSI_INVALID_ARGUMENT);
    free_grant(r);
    free(id);
}

/* ---- state, status, logs ---------------------------------------------------------------- */

static void test_state_survives_sigkill_and_restart(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    const char *name = nm("kept");
    Cosi__V1alpha1__DriverCreateBucketResponse *c = NULL;
    assert_int_equal(create(p, name, PAIRS("region=r9"), &c), CSI_OK);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *a = NULL, *b = NULL;
    assert_int_equal(grant(p, c->bucket_id, "ba-kept", KEY, NULL, &a), CSI_OK);
    dstop(p, SIGKILL);
    drestart(p, NULL);
    Cosi__V1alpha1__DriverCreateBucketResponse *c2 = NULL;
    assert_int_equal(create(p, name, PAIRS("region=r9"), &c2), CSI_OK);
    assert_string_equal(c->bucket_id, c2->bucket_id);
    assert_int_equal(grant(p, c->bucket_id, "ba-kept", KEY, NULL, &b), CSI_OK);
    assert_string_equal(a->account_id, b->account_id);
    assert_string_equal(cosi_credential(a, "s3", "accessSecretKey"),
                        cosi_credential(b, "s3", "accessSecretKey"));
    free_grant(a);
    free_grant(b);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(c, NULL);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(c2, NULL);
    dfree(p);
}

static void test_status_json_counts_calls_and_holds_only_hashes(void **state)
{
    (void)state;
    dproc *p = dstart("-v=5");
    char *id = new_bucket(p, NULL);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse *r = NULL;
    assert_int_equal(grant(p, id, nm("ba"), KEY, NULL, &r), CSI_OK);
    const char *secret = cosi_credential(r, "s3", "accessSecretKey");
    assert_int_equal(status_calls(p, "DriverCreateBucket"), 1);
    assert_int_equal(status_calls(p, "DriverGrantBucketAccess"), 1);
    char *path = util_asprintf("%s/status.json", p->dir);
    char *text = slurp(path);
    assert_null(strstr(text, secret));
    char *hash = sha256_hex(secret);
    assert_non_null(strstr(text, hash)); /* tests compare credentials by their hash */
    free(hash);
    free(text);
    free(path);
    /* state.json holds the keys (the backend's account store), for its owner only. */
    path = util_asprintf("%s/state.json", p->dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    free(path);
    char *log_path = util_strdup(p->log);
    dfree(p);
    /* At -v=5 the driver logged the calls, with no credential. */
    char *log = slurp(log_path);
    assert_non_null(strstr(log, "DriverGrantBucketAccess"));
    assert_null(strstr(log, secret));
    assert_null(strstr(log, cosi_credential(r, "s3", "accessKeyID")));
    free(log);
    free(log_path);
    free_grant(r);
    free(id);
}

/* ---- fault injection ---------------------------------------------------------------------- */

static void test_fault_delay_shows_as_deadline_exceeded(void **state)
{
    (void)state;
    dproc *p = dstart("'--fault=DriverCreateBucket:delay=3s'");
    Cosi__V1alpha1__DriverCreateBucketRequest req =
        COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_REQUEST__INIT;
    req.name = "slow";
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    csi_status st = {0};
    assert_int_equal(cosi_create_bucket(p->c, &req, 500 * UTIL_MS, &r, &st), -EREMOTEIO);
    assert_int_equal(st.code, CSI_DEADLINE_EXCEEDED);
    dfree(p);
}

static void test_fault_fail_flag_then_success(void **state)
{
    (void)state;
    dproc *p = dstart("'--fault=DriverGrantBucketAccess:fail=2:UNAVAILABLE:try later'");
    char *id = new_bucket(p, NULL);
    const char *name = nm("ba");
    assert_int_equal(grant(p, id, name, KEY, NULL, NULL), CSI_UNAVAILABLE);
    assert_int_equal(grant(p, id, name, KEY, NULL, NULL), CSI_UNAVAILABLE);
    assert_int_equal(grant(p, id, name, KEY, NULL, NULL), CSI_OK);
    assert_int_equal(status_calls(p, "DriverGrantBucketAccess"), 3);
    free(id);
    dfree(p);
}

static void test_fault_file_applies_at_run_time(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *id = new_bucket(p, NULL);
    write_faults(p, "{\"DriverDeleteBucket\": {\"fail\": {\"count\": 1, \"code\": "
                    "\"RESOURCE_EXHAUSTED\"}}}");
    assert_int_equal(delete_bucket(p, id), CSI_RESOURCE_EXHAUSTED);
    assert_true(status_has_bucket(p, id));
    assert_int_equal(delete_bucket(p, id), CSI_OK);
    assert_false(status_has_bucket(p, id));
    free(id);
    dfree(p);
}

static void test_fault_crash_after_keeps_the_bucket(void **state)
{
    (void)state;
    dproc *p = dstart("--fault=DriverCreateBucket:crash=1:after");
    assert_int_equal(create(p, "crashing", NULL, NULL), CSI_UNAVAILABLE);
    int status_ = dstop(p, 0);
    assert_true(WIFEXITED(status_));
    assert_int_equal(WEXITSTATUS(status_), 137);
    drestart(p, NULL);
    /* The call took effect before the exit: the retry finds the bucket. */
    Cosi__V1alpha1__DriverCreateBucketResponse *r = NULL;
    assert_int_equal(create(p, "crashing", NULL, &r), CSI_OK);
    json_object *st = status(p), *bs;
    assert_true(json_object_object_get_ex(st, "buckets", &bs));
    assert_int_equal(json_object_array_length(bs), 1);
    json_object_put(st);
    cosi__v1alpha1__driver_create_bucket_response__free_unpacked(r, NULL);
    dfree(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_flags_print_one_line_and_exit_1),
        cmocka_unit_test(test_sigterm_stops_gracefully_and_removes_socket),
        cmocka_unit_test(test_driver_get_info_names_the_driver),
        cmocka_unit_test(test_create_bucket_is_a_folder_with_s3_info_by_default),
        cmocka_unit_test(test_create_bucket_protocol_and_region_come_from_parameters),
        cmocka_unit_test(test_create_bucket_same_name_and_parameters_is_idempotent),
        cmocka_unit_test(test_create_bucket_bad_requests_are_invalid_argument),
        cmocka_unit_test(test_delete_bucket_removes_it_and_is_idempotent),
        cmocka_unit_test(test_delete_bucket_with_grants_takes_them_along),
        cmocka_unit_test(test_grant_key_returns_s3_credentials_and_is_idempotent),
        cmocka_unit_test(test_grant_iam_returns_the_account_without_secrets),
        cmocka_unit_test(test_grant_key_on_azure_returns_token_and_expiry),
        cmocka_unit_test(test_grant_errors),
        cmocka_unit_test(test_revoke_removes_the_grant_and_unknown_is_ok),
        cmocka_unit_test(test_state_survives_sigkill_and_restart),
        cmocka_unit_test(test_status_json_counts_calls_and_holds_only_hashes),
        cmocka_unit_test(test_fault_delay_shows_as_deadline_exceeded),
        cmocka_unit_test(test_fault_fail_flag_then_success),
        cmocka_unit_test(test_fault_file_applies_at_run_time),
        cmocka_unit_test(test_fault_crash_after_keeps_the_bucket),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
