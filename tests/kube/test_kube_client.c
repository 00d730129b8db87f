/*
 * common/kube client and watch against a real kube-lite: CRUD, Status
 * decoding, the three patch types, retries under injected 429/5xx faults,
 * TLS (CA file, CA data, insecure, server name) with bearer tokens, the
 * client-side rate limiter, connection reuse across threads, and watch
 * streams (order, 1,000 objects, 410 after compaction, cancel, server close).
 * A scripted HTTP server checks the exact chunkings of a watch stream that
 * kube-lite cannot be made to produce on purpose (events split anywhere,
 * several per chunk, ERROR events, bad JSON).
 *
 * Worker threads never assert (cmocka asserts only work on the test's own
 * thread): they count what went wrong and the test asserts the counts.
 * Measured figures (rate, connections) are printed with a "figure:" prefix.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "harness.h"
#include "kube/kube.h"

/* ---- small helpers ---------------------------------------------------------------- */

static double secs(util_duration d)
{
    return (double)d / (double)UTIL_SECOND;
}

/* JSON text with single quotes for double quotes, parsed. */
static json_object *js(const char *fmt, ...) UTIL_ATTR_PRINTF(1, 2);
static json_object *js(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0)
        abort();
    va_end(ap);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_object *o = json_tokener_parse(s);
    if (!o)
        fprintf(stderr, "test: bad JSON: %s\n", s);
    free(s);
    return o;
}

/* Single quotes for double quotes, as text (patches). Caller frees. */
static char *jtext(const char *s)
{
    char *t = util_strdup(s);
    for (char *p = t; *p; p++)
        if (*p == '\'')
            *p = '"';
    return t;
}

/* Follows a dotted path ("metadata.labels.a"); NULL when absent. */
static json_object *jat(json_object *o, const char *path)
{
    char *copy = util_strdup(path);
    char *save = NULL;
    for (char *k = strtok_r(copy, ".", &save); k && o; k = strtok_r(NULL, ".", &save)) {
        json_object *v = NULL;
        o = json_object_object_get_ex(o, k, &v) ? v : NULL;
    }
    free(copy);
    return o;
}

static const char *jstr(json_object *o, const char *path)
{
    json_object *v = jat(o, path);
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

static long long jrv(json_object *o)
{
    const char *rv = jstr(o, "metadata.resourceVersion");
    return rv ? strtoll(rv, NULL, 10) : -1;
}

static char *uname(const char *prefix)
{
    static atomic_int n;
    return util_asprintf("%s-%d-%d", prefix, (int)getpid() % 10000, atomic_fetch_add(&n, 1));
}

static char *repo_file(const char *rel)
{
    char *dir = th_build_path(".");
    for (int up = 0; up < 8; up++) {
        char *cand = util_asprintf("%s/%s", dir, rel);
        if (access(cand, R_OK) == 0) {
            free(dir);
            return cand;
        }
        free(cand);
        char *parent = util_asprintf("%s/..", dir);
        free(dir);
        dir = parent;
    }
    free(dir);
    return access(rel, R_OK) == 0 ? util_strdup(rel) : NULL;
}

static char *base64(const char *text)
{
    size_t n = strlen(text);
    char *out = util_calloc(4 * ((n + 2) / 3) + 1, 1);
    EVP_EncodeBlock((unsigned char *)out, (const unsigned char *)text, (int)n);
    return out;
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    fclose(m);
    return buf;
}

/* A kubeconfig with one cluster and one user; `cluster` and `user` are the
 * indented key lines. Returns its path (caller frees). */
static char *write_kubeconfig(const char *server, const char *cluster, const char *user)
{
    char *path = uname("kubeconfig");
    char *full = util_asprintf("%s/%s", th_tmpdir(), path);
    free(path);
    FILE *f = fopen(full, "w");
    if (!f)
        abort();
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: %s\n%s"
            "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
            "current-context: c\nusers:\n- name: u\n  user:\n%s",
            server, cluster ? cluster : "", user && *user ? user : "    {}\n");
    fclose(f);
    return full;
}

/* ---- kube-lite -------------------------------------------------------------------- */

typedef struct kl {
    pid_t pid;
    int port;
    char url[128];
    char *kubeconfig;
} kl;

static int kl_start(kl *s, char *const *flags)
{
    memset(s, 0, sizeof(*s));
    char *url = NULL;
    s->pid = th_kube_lite(flags, &url, &s->kubeconfig);
    if (s->pid <= 0) {
        fprintf(stderr, "kube-lite did not start\n");
        return -1;
    }
    snprintf(s->url, sizeof(s->url), "%s", url);
    const char *colon = strrchr(url, ':');
    s->port = colon ? atoi(colon + 1) : 0;
    free(url);
    return 0;
}

static void kl_stop(kl *s)
{
    if (s->pid > 0)
        th_stop(s->pid, SIGTERM);
    s->pid = 0;
    free(s->kubeconfig);
    s->kubeconfig = NULL;
}

/* A client and the configuration it borrows. */
typedef struct conn {
    kube_config *cfg;
    kube_client *c;
} conn;

static int conn_open(conn *k, const char *kubeconfig, const kube_client_opts *opts)
{
    memset(k, 0, sizeof(*k));
    int rc = kube_config_from_file(kubeconfig, NULL, &k->cfg);
    if (rc < 0) {
        fprintf(stderr, "kube_config_from_file %s: %s\n", kubeconfig, util_err_last());
        return rc;
    }
    kube_client_opts o = {.user_agent = "test-kube-client/0"};
    if (opts)
        o = *opts;
    rc = kube_client_new(k->cfg, &o, &k->c);
    if (rc < 0) {
        fprintf(stderr, "kube_client_new: %s\n", util_err_last());
        kube_config_free(k->cfg);
        k->cfg = NULL;
    }
    return rc;
}

static void conn_close(conn *k)
{
    kube_client_free(k->c);
    kube_config_free(k->cfg);
    memset(k, 0, sizeof(*k));
}

/* ---- kube-lite's /metrics and admin endpoints (plain libcurl) ---------------------- */

static size_t collect(char *d, size_t size, size_t n, void *ud)
{
    fwrite(d, size, n, ud);
    return size * n;
}

static char *raw_http(const kl *s, const char *method, const char *path, const char *body)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    CURL *h = curl_easy_init();
    char *url = util_asprintf("%s%s", s->url, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, m);
    if (strcmp(method, "POST") == 0)
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
    CURLcode e = curl_easy_perform(h);
    curl_easy_cleanup(h);
    free(url);
    fclose(m);
    if (e != CURLE_OK) {
        free(text);
        return NULL;
    }
    return text;
}

/* Sum of apiserver_request_total over lines whose verb is (or, with a
 * leading '!', is not) `verb`; NULL code matches any code. */
static long requests(const kl *s, const char *verb, const char *code)
{
    char *text = raw_http(s, "GET", "/metrics", NULL);
    long total = 0;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "apiserver_request_total{", 24) != 0)
            continue;
        char v[64] = "", c[16] = "";
        const char *pv = strstr(line, "verb=\"");
        const char *pc = strstr(line, "code=\"");
        const char *val = strrchr(line, ' ');
        if (!pv || !pc || !val || sscanf(pv + 6, "%63[^\"]", v) != 1 ||
            sscanf(pc + 6, "%15[^\"]", c) != 1)
            continue;
        bool verb_ok = !verb || (verb[0] == '!' ? strcmp(v, verb + 1) != 0 : strcmp(v, verb) == 0);
        if (verb_ok && (!code || strcmp(c, code) == 0))
            total += atol(val + 1);
    }
    free(text);
    return total;
}

static void set_faults(const kl *s, const char *json)
{
    free(raw_http(s, "POST", "/kube-lite/faults", json));
}

/* ---- the plain group's server and client --------------------------------------------- */

static kl S;
static conn C;

static int api_setup(void **state)
{
    (void)state;
    if (kl_start(&S, NULL) < 0)
        return -1;
    kube_client_opts o = {.user_agent = "test-kube-client/0"};
    return conn_open(&C, S.kubeconfig, &o);
}

static int api_teardown(void **state)
{
    (void)state;
    conn_close(&C);
    kl_stop(&S);
    return 0;
}

/* Faults and watch closing are server-wide: every test starts without them. */
static int reset_faults(void **state)
{
    (void)state;
    set_faults(&S, "{\"error_rate\":0,\"error_code\":500,\"latency_ms\":0,"
                   "\"watch_close_after_ms\":0}");
    return 0;
}

static char *new_namespace(void)
{
    char *name = uname("ns");
    json_object *o = js("{'metadata':{'name':'%s'}}", name);
    kube_resp r = {0};
    int rc = kube_create(C.c, "/api/v1/namespaces", o, &r);
    if (rc != 0)
        fprintf(stderr, "create namespace %s: %s\n", name, r.message);
    kube_resp_clear(&r);
    json_object_put(o);
    return name;
}

static int create_secret(kube_client *c, const char *ns, const char *name, kube_resp *r)
{
    json_object *o = js("{'metadata':{'name':'%s','labels':{'a':'1'}},'data':{'k':'dg=='}}", name);
    char *coll = kube_path(&KUBE_SECRET, ns, NULL, NULL);
    int rc = kube_create(c, coll, o, r);
    free(coll);
    json_object_put(o);
    return rc;
}

/* ---- resources ---------------------------------------------------------------------- */

static void test_kube_path_builds_paths_and_escapes_names(void **state)
{
    (void)state;
    struct {
        const kube_resource *r;
        const char *ns, *name, *sub, *want;
    } rows[] = {
        {&KUBE_PVC, "ns1", "claim", "status",
         "/api/v1/namespaces/ns1/persistentvolumeclaims/claim/status"},
        {&KUBE_PVC, NULL, NULL, NULL, "/api/v1/persistentvolumeclaims"},
        {&KUBE_PV, "ignored", "pv1", NULL, "/api/v1/persistentvolumes/pv1"},
        {&KUBE_STORAGECLASS, NULL, "fast", NULL, "/apis/storage.k8s.io/v1/storageclasses/fast"},
        {&KUBE_VOLUMEATTACHMENT, NULL, "va", "status",
         "/apis/storage.k8s.io/v1/volumeattachments/va/status"},
        {&KUBE_CSISTORAGECAPACITY, "kube-system", NULL, NULL,
         "/apis/storage.k8s.io/v1/namespaces/kube-system/csistoragecapacities"},
        {&KUBE_LEASE, "default", "ebs-csi-aws-com", NULL,
         "/apis/coordination.k8s.io/v1/namespaces/default/leases/ebs-csi-aws-com"},
        {&KUBE_VOLUMESNAPSHOT, "a", "s", NULL,
         "/apis/snapshot.storage.k8s.io/v1/namespaces/a/volumesnapshots/s"},
        {&KUBE_VOLUMESNAPSHOTCONTENT, NULL, "c", NULL,
         "/apis/snapshot.storage.k8s.io/v1/volumesnapshotcontents/c"},
        {&KUBE_NODE, NULL, "node-1", NULL, "/api/v1/nodes/node-1"},
        {&KUBE_SECRET, "n s", "a/b?c%d", NULL, "/api/v1/namespaces/n%20s/secrets/a%2Fb%3Fc%25d"},
        /* every byte escaped: the buffer is sized for three per byte */
        {&KUBE_LEASE, "%%%", "////", "status",
         "/apis/coordination.k8s.io/v1/namespaces/%25%25%25/leases/%2F%2F%2F%2F/status"},
        {&KUBE_SECRET, "", "\xff\x01", NULL, "/api/v1/secrets/%FF%01"},
        {&KUBE_VOLUMEATTRIBUTESCLASS, NULL, NULL, NULL,
         "/apis/storage.k8s.io/v1/volumeattributesclasses"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *p = kube_path(rows[i].r, rows[i].ns, rows[i].name, rows[i].sub);
        assert_string_equal(p, rows[i].want);
        free(p);
    }
    assert_true(KUBE_PVC.namespaced && !KUBE_PV.namespaced && KUBE_EVENT.namespaced &&
                KUBE_POD.namespaced && !KUBE_NAMESPACE.namespaced && !KUBE_CSINODE.namespaced &&
                !KUBE_CSIDRIVER.namespaced);
    assert_string_equal(KUBE_CSIDRIVER.kind, "CSIDriver");
    assert_string_equal(KUBE_EVENT.resource, "events");
}

/* An answer's identity must be one the API server can store: its name and
 * namespace are its key in every cache, so a namespace on a cluster-scoped
 * object (or none on a namespaced one) would file it under another key. */
static void test_kube_object_check_refuses_identities_no_server_stores(void **state)
{
    (void)state;
    struct {
        const kube_resource *r;
        const char *json, *name;
        const char *bad; /* NULL: accepted; else a part of the message */
    } rows[] = {
        {&KUBE_VOLUMEATTACHMENT, "{'metadata':{'uid':'u','name':'va'}}", NULL, NULL},
        {&KUBE_VOLUMEATTACHMENT, "{'metadata':{'uid':'u','name':'va','namespace':''}}", NULL, NULL},
        {&KUBE_VOLUMEATTACHMENT, "{'metadata':{'uid':'u','name':'va','namespace':'hostile'}}", NULL,
         "cluster-scoped"},
        {&KUBE_CSINODE, "{'metadata':{'uid':'u','name':'node-1','namespace':'default'}}", NULL,
         "cluster-scoped"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c','namespace':'default'}}", NULL, NULL},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'1Gi'}}}}",
         NULL, NULL},
        /* A claim that asks for no size is none an API server stores. */
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{}}}}",
         NULL, "spec.resources.requests.storage"},
        /* The resize status csi-resizer decides on (the hostile test's CI
         * run: a copy whose allocatedResourceStatuses had another type
         * read as "no resize under way", and a claim grown again while it
         * waited for the node was expanded once more). */
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'allocatedResources':{'storage':'2Gi'},'allocatedResourceStatuses':"
         "{'storage':'NodeResizePending'},'capacity':{'storage':'1Gi'},'conditions':[{'type':"
         "'FileSystemResizePending','status':'True'}]}}",
         NULL, NULL},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'allocatedResourceStatuses':'hostile'}}",
         NULL, "status.allocatedResourceStatuses"},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'allocatedResourceStatuses':null}}",
         NULL, "status.allocatedResourceStatuses"},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'allocatedResources':{'storage':null}}}",
         NULL, "status.allocatedResources"},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'capacity':[1]}}",
         NULL, "status.capacity"},
        {&KUBE_PVC,
         "{'metadata':{'uid':'u','name':'c','namespace':'default'},'spec':{'resources':{'requests':"
         "{'storage'"
         ":'3Gi'}}},'status':{'conditions':[{'type':7}]}}",
         NULL, "status.conditions[].type"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c','namespace':'default'}}", "c", NULL},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c','namespace':'default'}}", "d",
         "another object"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c'}}", NULL, "no metadata.namespace"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c','namespace':''}}", NULL,
         "no metadata.namespace"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'c','namespace':7}}", NULL,
         "metadata.namespace"},
        {&KUBE_SECRET, "{'metadata':{'uid':'u','name':'','namespace':'default'}}", NULL,
         "metadata.name"},
        {&KUBE_SECRET, "{'metadata':{'namespace':'default'}}", NULL, "metadata.name"},
        {&KUBE_BUCKETACCESS, "{'metadata':{'uid':'u','name':'a'}}", NULL, "no metadata.namespace"},
        {&KUBE_BUCKET, "{'metadata':{'uid':'u','name':'b','namespace':'x'}}", NULL,
         "cluster-scoped"},
        /* Every object an API server stores has a UID (the hostile test's
         * seed 243222314: a claim copy whose uid read null owned no Bucket,
         * and the COSI controller let the claim go with its Bucket left). */
        /* A null where an API server never writes one (seed 2005058346: a
         * deleting content whose finalizers read null looked done, and
         * seed 1729998110's content whose status read wrong stayed so). */
        {&KUBE_VOLUMESNAPSHOTCONTENT, "{'metadata':{'uid':'u','name':'c','finalizers':null}}", NULL,
         "metadata.finalizers"},
        {&KUBE_VOLUMESNAPSHOTCONTENT, "{'metadata':{'uid':'u','name':'c'},'status':null}", NULL,
         "status"},
        {&KUBE_VOLUMESNAPSHOTCONTENT,
         "{'metadata':{'uid':'u','name':'c'},'status':{'snapshotHandle':null}}", NULL,
         "status.snapshotHandle"},
        {&KUBE_VOLUMESNAPSHOTCONTENT,
         "{'metadata':{'uid':'u','name':'c'},'status':{'creationTime':'soon'}}", NULL,
         "status.creationTime"},
        {&KUBE_VOLUMESNAPSHOTCONTENT,
         "{'metadata':{'uid':'u','name':'c','finalizers':['f']},'status':{'snapshotHandle':'s',"
         "'creationTime':1,'restoreSize':2}}",
         NULL, NULL},
        /* A CSINode driver's topologyKeys is not omitempty: an API server
         * writes null there, and it passes. */
        {&KUBE_CSINODE,
         "{'metadata':{'uid':'u','name':'n'},'spec':{'drivers':[{'name':'d','nodeID':'x',"
         "'topologyKeys':null}]}}",
         NULL, NULL},
        /* An item of a list of objects that is none (seed 1416338706: a
         * CSINode whose drivers[0] was a string read as one without the
         * driver, cached for good). */
        {&KUBE_CSINODE, "{'metadata':{'uid':'u','name':'n'},'spec':{'drivers':['hostile']}}", NULL,
         "spec.drivers[]"},
        {&KUBE_CSINODE, "{'metadata':{'uid':'u','name':'n'},'spec':{'drivers':[null]}}", NULL,
         "spec.drivers[]"},
        {&KUBE_CSINODE, "{'metadata':{'uid':'u','name':'n'},'spec':{'drivers':null}}", NULL, NULL},
        {&KUBE_STORAGECLASS,
         "{'metadata':{'uid':'u','name':'sc'},'provisioner':'p','allowedTopologies':[7]}", NULL,
         "allowedTopologies[]"},
        {&KUBE_STORAGECLASS, "{'metadata':{'uid':'u','name':'sc'},'provisioner':null}", NULL,
         "provisioner"},
        {&KUBE_BUCKET, "{'metadata':{'name':'b'}}", NULL, "no metadata.uid"},
        {&KUBE_BUCKET, "{'metadata':{'name':'b','uid':null}}", NULL, "no metadata.uid"},
        {&KUBE_BUCKET, "{'metadata':{'name':'b','uid':''}}", NULL, "no metadata.uid"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_object *o = js("%s", rows[i].json);
        int rc = kube_object_check(rows[i].r, o, rows[i].name);
        json_object_put(o);
        if (!rows[i].bad && rc != 0)
            fail_msg("row %zu %s: refused (%s)", i, rows[i].json, util_err_last());
        if (rows[i].bad && (rc != -EBADMSG || !strstr(util_err_last(), rows[i].bad)))
            fail_msg("row %zu %s: %d %s, want %s", i, rows[i].json, rc,
                     rc ? util_err_last() : "accepted", rows[i].bad);
    }
    /* A name of 254 bytes is none an API server stores. */
    char name[256];
    memset(name, 'a', 254);
    name[254] = '\0';
    json_object *o = json_object_new_object(), *md = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(name));
    json_object_object_add(md, "uid", json_object_new_string("u"));
    json_object_object_add(o, "metadata", md);
    assert_int_equal(kube_object_check(&KUBE_PV, o, NULL), -EBADMSG);
    assert_non_null(strstr(util_err_last(), "metadata.name"));
    json_object_put(o);
}

static void test_kube_key_is_namespace_slash_name(void **state)
{
    (void)state;
    json_object *a = js("{'metadata':{'name':'x','namespace':'ns'}}");
    json_object *b = js("{'metadata':{'name':'pv1'}}");
    char *ka = kube_key(a), *kb = kube_key(b);
    assert_string_equal(ka, "ns/x");
    assert_string_equal(kb, "pv1");
    free(ka);
    free(kb);
    json_object_put(a);
    json_object_put(b);
}

/* ---- CRUD and Status ---------------------------------------------------------------- */

static void test_crud_round_trip_of_a_secret(void **state)
{
    (void)state;
    char *name = uname("crud");
    kube_resp r = {0};
    assert_int_equal(create_secret(C.c, "default", name, &r), 0);
    assert_int_equal(r.code, 201);
    assert_string_equal(jstr(r.body, "metadata.name"), name);
    kube_resp_clear(&r);

    char *path = kube_path(&KUBE_SECRET, "default", name, NULL);
    assert_int_equal(kube_get(C.c, path, &r), 0);
    assert_int_equal(r.code, 200);
    assert_string_equal(jstr(r.body, "data.k"), "dg==");
    json_object *obj = json_object_get(r.body);
    kube_resp_clear(&r);

    json_object *labels = jat(obj, "metadata.labels");
    json_object_object_add(labels, "b", json_object_new_string("2"));
    assert_int_equal(kube_update(C.c, path, obj, &r), 0);
    assert_int_equal(r.code, 200);
    assert_string_equal(jstr(r.body, "metadata.labels.b"), "2");
    assert_true(jrv(r.body) > jrv(obj));
    kube_resp_clear(&r);
    json_object_put(obj);

    assert_int_equal(kube_delete(C.c, path, NULL, &r), 0);
    kube_resp_clear(&r);
    assert_int_equal(kube_get(C.c, path, &r), -EREMOTEIO);
    assert_true(kube_is_not_found(&r));
    kube_resp_clear(&r);
    free(path);
    free(name);
}

static void test_crud_of_a_cluster_scoped_storage_class(void **state)
{
    (void)state;
    char *name = uname("sc");
    json_object *o = js("{'metadata':{'name':'%s'},'provisioner':'csi.example.com'}", name);
    char *coll = kube_path(&KUBE_STORAGECLASS, "ignored", NULL, NULL);
    kube_resp r = {0};
    assert_int_equal(kube_create(C.c, coll, o, &r), 0);
    assert_string_equal(jstr(r.body, "reclaimPolicy"), "Delete"); /* server default */
    kube_resp_clear(&r);
    char *path = kube_path(&KUBE_STORAGECLASS, NULL, name, NULL);
    assert_int_equal(kube_get(C.c, path, &r), 0);
    assert_string_equal(jstr(r.body, "provisioner"), "csi.example.com");
    kube_resp_clear(&r);
    assert_int_equal(kube_delete(C.c, path, NULL, &r), 0);
    kube_resp_clear(&r);
    json_object_put(o);
    free(coll);
    free(path);
    free(name);
}

static void test_status_not_found_is_decoded(void **state)
{
    (void)state;
    kube_resp r = {0};
    assert_int_equal(kube_get(C.c, "/api/v1/namespaces/default/secrets/no-such-secret", &r),
                     -EREMOTEIO);
    assert_int_equal(r.code, 404);
    assert_string_equal(r.reason, "NotFound");
    assert_string_equal(r.message, "secrets \"no-such-secret\" not found");
    assert_true(kube_is_not_found(&r));
    assert_false(kube_is_conflict(&r));
    assert_false(kube_is_already_exists(&r));
    assert_non_null(strstr(util_err_last(), "not found"));
    kube_resp_clear(&r);
}

/* skip_body: a success is reported without parsing what came back; an
 * error's Status is still read; kube_resp_clear resets the wish. */
static void test_skip_body_leaves_successes_unparsed_but_not_errors(void **state)
{
    (void)state;
    char *name = uname("skip");
    kube_resp r = {.skip_body = true};
    assert_int_equal(create_secret(C.c, "default", name, &r), 0);
    assert_int_equal(r.code, 201);
    assert_null(r.body);
    kube_resp_clear(&r);
    assert_false(r.skip_body);
    r.skip_body = true;
    assert_int_equal(create_secret(C.c, "default", name, &r), -EREMOTEIO);
    assert_int_equal(r.code, 409);
    assert_true(kube_is_already_exists(&r));
    assert_non_null(r.body);
    kube_resp_clear(&r);
    char *path = kube_path(&KUBE_SECRET, "default", name, NULL);
    assert_int_equal(kube_get(C.c, path, &r), 0);
    assert_string_equal(jstr(r.body, "metadata.name"), name);
    kube_resp_clear(&r);
    r.skip_body = true;
    assert_int_equal(kube_delete(C.c, path, NULL, &r), 0);
    assert_null(r.body);
    kube_resp_clear(&r);
    free(path);
    free(name);
}

static void test_status_already_exists_and_conflict_are_decoded(void **state)
{
    (void)state;
    char *name = uname("dup");
    kube_resp r = {0};
    assert_int_equal(create_secret(C.c, "default", name, &r), 0);
    json_object *first = json_object_get(r.body);
    kube_resp_clear(&r);

    assert_int_equal(create_secret(C.c, "default", name, &r), -EREMOTEIO);
    assert_int_equal(r.code, 409);
    assert_string_equal(r.reason, "AlreadyExists");
    assert_true(kube_is_already_exists(&r));
    assert_false(kube_is_conflict(&r));
    kube_resp_clear(&r);

    /* Two updates from the same resourceVersion: the second one conflicts. */
    char *path = kube_path(&KUBE_SECRET, "default", name, NULL);
    json_object_object_add(jat(first, "metadata.labels"), "u", json_object_new_string("1"));
    assert_int_equal(kube_update(C.c, path, first, &r), 0);
    kube_resp_clear(&r);
    json_object_object_add(jat(first, "metadata.labels"), "u", json_object_new_string("2"));
    assert_int_equal(kube_update(C.c, path, first, &r), -EREMOTEIO);
    assert_int_equal(r.code, 409);
    assert_string_equal(r.reason, "Conflict");
    assert_true(kube_is_conflict(&r));
    assert_false(kube_is_already_exists(&r));
    assert_non_null(strstr(r.message, "the object has been modified"));
    kube_resp_clear(&r);

    /* DeleteOptions travel in the body: a wrong UID precondition conflicts. */
    assert_int_equal(kube_delete(C.c, path, "{\"preconditions\":{\"uid\":\"not-the-uid\"}}", &r),
                     -EREMOTEIO);
    assert_true(kube_is_conflict(&r));
    kube_resp_clear(&r);
    assert_int_equal(kube_delete(C.c, path, NULL, &r), 0);
    kube_resp_clear(&r);
    json_object_put(first);
    free(path);
    free(name);
}

static void test_status_invalid_carries_the_message(void **state)
{
    (void)state;
    kube_resp r = {0};
    assert_int_equal(create_secret(C.c, "default", "Not_A_Valid_Name", &r), -EREMOTEIO);
    assert_int_equal(r.code, 422);
    assert_string_equal(r.reason, "Invalid");
    assert_non_null(strstr(r.message, "Secret \"Not_A_Valid_Name\" is invalid: metadata.name"));
    assert_false(kube_is_not_found(&r) || kube_is_conflict(&r) || kube_is_already_exists(&r));
    kube_resp_clear(&r);
}

static void test_patch_types_merge_json_and_strategic(void **state)
{
    (void)state;
    char *name = uname("patch");
    kube_resp r = {0};
    assert_int_equal(create_secret(C.c, "default", name, &r), 0);
    kube_resp_clear(&r);
    char *path = kube_path(&KUBE_SECRET, "default", name, NULL);

    char *p = jtext("{'metadata':{'labels':{'m':'x','a':null},'finalizers':['example.com/a']}}");
    assert_int_equal(kube_patch(C.c, path, KUBE_PATCH_MERGE, p, &r), 0);
    assert_string_equal(jstr(r.body, "metadata.labels.m"), "x");
    assert_null(jat(r.body, "metadata.labels.a"));
    kube_resp_clear(&r);
    free(p);

    p = jtext("[{'op':'test','path':'/metadata/labels/m','value':'x'},"
              "{'op':'add','path':'/metadata/labels/j','value':'y'}]");
    assert_int_equal(kube_patch(C.c, path, KUBE_PATCH_JSON, p, &r), 0);
    assert_string_equal(jstr(r.body, "metadata.labels.j"), "y");
    kube_resp_clear(&r);
    free(p);
    p = jtext("[{'op':'test','path':'/metadata/labels/m','value':'wrong'}]");
    assert_int_equal(kube_patch(C.c, path, KUBE_PATCH_JSON, p, &r), -EREMOTEIO);
    assert_int_equal(r.code, 422);
    kube_resp_clear(&r);
    free(p);

    /* Strategic merge merges the finalizer list as a set (a merge patch
     * would replace it): proof that the right Content-Type went out. */
    p = jtext("{'metadata':{'finalizers':['example.com/b']}}");
    assert_int_equal(kube_patch(C.c, path, KUBE_PATCH_STRATEGIC, p, &r), 0);
    json_object *fin = jat(r.body, "metadata.finalizers");
    assert_int_equal(json_object_array_length(fin), 2);
    kube_resp_clear(&r);
    free(p);

    p = jtext("{'metadata':{'finalizers':null}}");
    assert_int_equal(kube_patch(C.c, path, KUBE_PATCH_MERGE, p, &r), 0);
    kube_resp_clear(&r);
    free(p);
    assert_int_equal(kube_delete(C.c, path, NULL, &r), 0);
    kube_resp_clear(&r);
    free(path);
    free(name);
}

static void test_client_metrics_count_requests_by_code(void **state)
{
    (void)state;
    obs_registry *reg = obs_registry_new();
    conn k;
    kube_client_opts o = {.qps = 100, .burst = 10, .metrics = reg};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    kube_resp r = {0};
    assert_int_equal(kube_get(k.c, "/api/v1/namespaces/default", &r), 0);
    kube_resp_clear(&r);
    assert_int_equal(kube_get(k.c, "/api/v1/namespaces/no-such-namespace", &r), -EREMOTEIO);
    kube_resp_clear(&r);
    size_t len = 0;
    char *text = obs_registry_render(reg, &len);
    char *host = util_asprintf("host=\"127.0.0.1:%d\"", S.port);
    assert_non_null(strstr(text, "rest_client_requests_total{code=\"200\","));
    assert_non_null(strstr(text, "rest_client_requests_total{code=\"404\","));
    assert_non_null(strstr(text, host));
    assert_non_null(strstr(text, "rest_client_request_duration_seconds_count{"));
    assert_non_null(strstr(text, "verb=\"GET\""));
    assert_non_null(strstr(text, "rest_client_rate_limiter_duration_seconds_bucket"));
    free(host);
    free(text);
    conn_close(&k);
    obs_registry_free(reg);
}

/* ---- retries ----------------------------------------------------------------------- */

struct burst_job {
    conn *k;
    int n;
    bool writes; /* creates (POST) instead of reads */
    atomic_int *ok, *failed;
};

static void *burst_worker(void *ud)
{
    struct burst_job *j = ud;
    for (int i = 0; i < j->n; i++) {
        kube_resp r = {0};
        int rc;
        if (j->writes) {
            char *name = uname("retry");
            rc = create_secret(j->k->c, "default", name, &r);
            free(name);
        } else {
            rc = kube_get(j->k->c, "/api/v1/namespaces/default", &r);
        }
        if (rc == 0)
            atomic_fetch_add(j->ok, 1);
        else {
            fprintf(stderr, "request failed: %d %s %s\n", r.code, r.reason, r.message);
            atomic_fetch_add(j->failed, 1);
        }
        kube_resp_clear(&r);
    }
    return NULL;
}

/* 8 threads: 4 reading and 4 creating, 2 requests each, under a 50% fault
 * rate with `code`; every request must succeed through retries. */
static void retries_survive(int code)
{
    conn k;
    /* 20 retries: the chance that a request meets 21 faults in a row is 5e-7. */
    kube_client_opts o = {.max_retries = 20};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    long before = requests(&S, "!FAULT", NULL);
    char cs[8];
    snprintf(cs, sizeof(cs), "%d", code);
    long faults_before = requests(&S, "FAULT", cs);
    char *f = util_asprintf("{\"error_rate\":0.5,\"error_code\":%d}", code);
    set_faults(&S, f);
    free(f);
    atomic_int ok = 0, failed = 0;
    pthread_t th[8];
    struct burst_job jobs[8];
    util_duration start = util_now_mono();
    for (int i = 0; i < 8; i++) {
        jobs[i] = (struct burst_job){&k, 2, i % 2 == 1, &ok, &failed};
        pthread_create(&th[i], NULL, burst_worker, &jobs[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    util_duration took = util_now_mono() - start;
    set_faults(&S, "{\"error_rate\":0}");
    long served = requests(&S, "!FAULT", NULL) - before;
    long faults = requests(&S, "FAULT", cs) - faults_before;
    printf("figure: %d at 50%%: 16 requests succeeded after %ld faults (%ld attempts) in %.1f s\n",
           code, faults, served + faults, secs(took));
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(atomic_load(&ok), 16);
    /* Each operation reached the API exactly once (no duplicate creates),
     * and the faults were met and retried. */
    assert_int_equal(served, 16);
    assert_true(faults > 0);
    conn_close(&k);
}

static void test_retries_survive_half_503(void **state)
{
    (void)state;
    retries_survive(503);
}

static void test_retries_survive_half_429(void **state)
{
    (void)state;
    retries_survive(429);
}

static void test_retry_after_is_honoured_and_bounded(void **state)
{
    (void)state;
    conn k;
    kube_client_opts o = {.max_retries = 1};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    long faults_before = requests(&S, "FAULT", "429");
    set_faults(&S, "{\"error_rate\":1,\"error_code\":429}");
    kube_resp r = {0};
    util_duration start = util_now_mono();
    assert_int_equal(kube_get(k.c, "/api/v1/namespaces/default", &r), -EREMOTEIO);
    util_duration took = util_now_mono() - start;
    set_faults(&S, "{\"error_rate\":0}");
    assert_int_equal(r.code, 429);
    assert_string_equal(r.reason, "TooManyRequests");
    kube_resp_clear(&r);
    /* Two attempts with the server's "Retry-After: 1" between them. */
    assert_int_equal(requests(&S, "FAULT", "429") - faults_before, 2);
    assert_true(took >= 950 * UTIL_MS);
    assert_true(took < 3 * UTIL_SECOND);
    conn_close(&k);
}

static void test_500_is_retried_for_reads_and_creates(void **state)
{
    (void)state;
    conn k;
    kube_client_opts o = {.max_retries = 2};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    set_faults(&S, "{\"error_rate\":1,\"error_code\":500}");
    kube_resp r = {0};
    long f0 = requests(&S, "FAULT", "500");
    assert_int_equal(kube_get(k.c, "/api/v1/namespaces/default", &r), -EREMOTEIO);
    assert_int_equal(r.code, 500);
    kube_resp_clear(&r);
    long f1 = requests(&S, "FAULT", "500");
    assert_int_equal(create_secret(k.c, "default", "retried", &r), -EREMOTEIO);
    assert_int_equal(r.code, 500);
    kube_resp_clear(&r);
    long f2 = requests(&S, "FAULT", "500");
    set_faults(&S, "{\"error_rate\":0}");
    assert_int_equal(f1 - f0, 3); /* GET: 1 + max_retries */
    /* POST too: a repeat of an applied create answers AlreadyExists, which
     * callers treat as done. */
    assert_int_equal(f2 - f1, 3);
    conn_close(&k);
}

/* Retries stop once the next wait would pass the request timeout: with
 * Retry-After 1 s and a 1.5 s timeout, at most two attempts. */
static void test_retries_stay_within_the_request_timeout(void **state)
{
    (void)state;
    conn k;
    kube_client_opts o = {.max_retries = 10, .timeout = 1500 * UTIL_MS};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    set_faults(&S, "{\"error_rate\":1,\"error_code\":503}");
    kube_resp r = {0};
    long f0 = requests(&S, "FAULT", "503");
    assert_int_equal(create_secret(k.c, "default", "bounded", &r), -EREMOTEIO);
    assert_int_equal(r.code, 503);
    kube_resp_clear(&r);
    long f1 = requests(&S, "FAULT", "503");
    set_faults(&S, "{\"error_rate\":0}");
    assert_true(f1 - f0 >= 1);
    assert_true(f1 - f0 <= 2);
    conn_close(&k);
}

static void test_refused_connection_is_retried_then_eio(void **state)
{
    (void)state;
    /* A port that nothing listens on: bind one, then close it. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sa, &sl), 0);
    close(fd);
    char *server = util_asprintf("http://127.0.0.1:%d", ntohs(sa.sin_port));
    char *kc = write_kubeconfig(server, NULL, NULL);
    conn k;
    kube_client_opts o = {.max_retries = 3};
    assert_int_equal(conn_open(&k, kc, &o), 0);
    kube_resp r = {0};
    util_duration start = util_now_mono();
    assert_int_equal(create_secret(k.c, "default", "x", &r), -EIO);
    util_duration took = util_now_mono() - start;
    assert_int_equal(r.code, 0);
    assert_null(r.body);
    assert_non_null(strstr(r.message, "onnect"));
    /* Three backoffs of 25..50, 50..100 and 100..200 ms. */
    assert_true(took >= 175 * UTIL_MS);
    kube_resp_clear(&r);
    conn_close(&k);
    free(kc);
    free(server);
}

/* A server that reads each request and hangs up without answering. */
typedef struct hangup_srv {
    int fd;
    pthread_t th;
    atomic_int requests;
    char *kubeconfig;
} hangup_srv;

static void *hangup_main(void *ud)
{
    hangup_srv *s = ud;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        char req[4096];
        size_t got = 0;
        while (got < sizeof(req) - 1) {
            ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
            if (n <= 0)
                break;
            got += (size_t)n;
            req[got] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        atomic_fetch_add(&s->requests, 1);
        close(c);
    }
}

static void test_reset_after_sending_retries_reads_and_creates(void **state)
{
    (void)state;
    hangup_srv s = {0};
    s.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(s.fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s.fd, 8), 0);
    assert_int_equal(getsockname(s.fd, (struct sockaddr *)&sa, &sl), 0);
    char *server = util_asprintf("http://127.0.0.1:%d", ntohs(sa.sin_port));
    s.kubeconfig = write_kubeconfig(server, NULL, NULL);
    pthread_create(&s.th, NULL, hangup_main, &s);
    conn k;
    kube_client_opts o = {.max_retries = 2};
    assert_int_equal(conn_open(&k, s.kubeconfig, &o), 0);
    kube_resp r = {0};
    assert_int_equal(kube_get(k.c, "/api/v1/namespaces/default", &r), -EIO);
    kube_resp_clear(&r);
    int reads = atomic_load(&s.requests);
    assert_int_equal(create_secret(k.c, "default", "maybe-created", &r), -EIO);
    assert_non_null(strstr(r.message, "POST"));
    kube_resp_clear(&r);
    int creates = atomic_load(&s.requests) - reads;
    conn_close(&k);
    shutdown(s.fd, SHUT_RDWR);
    pthread_join(s.th, NULL);
    close(s.fd);
    assert_int_equal(reads, 3);   /* GET: 1 + max_retries */
    assert_int_equal(creates, 3); /* POST too: callers take a repeat as done */
    free(s.kubeconfig);
    free(server);
}

/* ---- rate limiter and connections ------------------------------------------------------ */

struct timed_job {
    conn *k;
    int n;
    util_duration t0;
    util_duration *done; /* completion times, shared */
    atomic_int *next, *failed;
};

static void *timed_worker(void *ud)
{
    struct timed_job *j = ud;
    for (int i = 0; i < j->n; i++) {
        kube_resp r = {0};
        if (kube_get(j->k->c, "/api/v1/namespaces/default", &r) != 0)
            atomic_fetch_add(j->failed, 1);
        kube_resp_clear(&r);
        j->done[atomic_fetch_add(j->next, 1)] = util_now_mono() - j->t0;
    }
    return NULL;
}

static int cmp_dur(const void *a, const void *b)
{
    util_duration x = *(const util_duration *)a, y = *(const util_duration *)b;
    return x < y ? -1 : x > y;
}

static void test_rate_limiter_qps20_burst5_shared_by_threads(void **state)
{
    (void)state;
    enum { N = 125, THREADS = 4 };
    conn k;
    kube_client_opts o = {.qps = 20, .burst = 5};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    util_duration done[N] = {0};
    atomic_int next = 0, failed = 0;
    pthread_t th[THREADS];
    struct timed_job jobs[THREADS];
    util_duration t0 = util_now_mono();
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct timed_job){&k, N / THREADS + (i < N % THREADS), t0, done, &next, &failed};
        pthread_create(&th[i], NULL, timed_worker, &jobs[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&next), N);
    assert_int_equal(atomic_load(&failed), 0);
    qsort(done, N, sizeof(done[0]), cmp_dur);
    /* The burst goes at once; after it, one request per 1/qps. */
    double window = secs(done[N - 1] - done[4]);
    double rate = (N - 5) / window;
    printf("figure: qps=20 burst=5: first 5 done by %.0f ms, %d done in %.2f s, %.2f req/s after "
           "the burst over %.2f s\n",
           secs(done[4]) * 1000, N, secs(done[N - 1]), rate, window);
    assert_true(done[4] < 250 * UTIL_MS);
    assert_true(window >= 5.0 * 0.9);
    assert_true(rate >= 18.0 && rate <= 22.0);
    conn_close(&k);
}

struct bg_job {
    conn *k;
    atomic_int *next;
    int rc, order; /* completion order among all requests */
};

static void *bg_worker(void *ud)
{
    struct bg_job *j = ud;
    kube_resp r = {0};
    j->rc = kube_request_prio(j->k->c, KUBE_PRIO_BACKGROUND, "GET", "/api/v1/namespaces/default",
                              NULL, NULL, &r);
    kube_resp_clear(&r);
    j->order = atomic_fetch_add(j->next, 1);
    return NULL;
}

/* Events go at background priority: while workers keep the bucket empty, a
 * background request waits for all of them; it is never starved for good. */
static void test_background_request_waits_for_every_normal_one(void **state)
{
    (void)state;
    enum { N = 40, THREADS = 4 };
    conn k;
    kube_client_opts o = {.qps = 20, .burst = 5};
    assert_int_equal(conn_open(&k, S.kubeconfig, &o), 0);
    util_duration done[N + 1] = {0};
    atomic_int next = 0, failed = 0;
    pthread_t th[THREADS], bg;
    struct timed_job jobs[THREADS];
    util_duration t0 = util_now_mono();
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct timed_job){&k, N / THREADS, t0, done, &next, &failed};
        pthread_create(&th[i], NULL, timed_worker, &jobs[i]);
    }
    /* Once the burst is spent, every token is spoken for. */
    while (atomic_load(&next) < 5)
        util_sleep(UTIL_MS);
    struct bg_job b = {.k = &k, .next = &next, .rc = -1, .order = -1};
    pthread_create(&bg, NULL, bg_worker, &b);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_join(bg, NULL);
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(b.rc, 0);
    assert_int_equal(b.order, N); /* after all N normal requests */
    conn_close(&k);
}

/* Client-side ports of every TCP connection to `port` in /proc/net/tcp
 * (any state, TIME_WAIT included, so closed connections count too). */
static void tcp_ports(int port, unsigned char *seen)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned lp = 0, rp = 0;
        if (sscanf(line, " %*d: %*8x:%x %*8x:%x", &lp, &rp) != 2)
            continue;
        if ((int)rp == port)
            seen[lp] = 1;
        else if ((int)lp == port && rp != 0)
            seen[rp] = 1;
    }
    fclose(f);
}

static void test_connections_are_reused_across_16_threads(void **state)
{
    (void)state;
    enum { THREADS = 16, EACH = 200 };
    conn k;
    assert_int_equal(conn_open(&k, S.kubeconfig, NULL), 0);
    unsigned char *before = util_calloc(65536, 1), *after = util_calloc(65536, 1);
    tcp_ports(S.port, before);
    util_duration *done = util_calloc((size_t)THREADS * EACH, sizeof(util_duration));
    atomic_int next = 0, failed = 0;
    pthread_t th[THREADS];
    struct timed_job jobs[THREADS];
    util_duration t0 = util_now_mono();
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct timed_job){&k, EACH, t0, done, &next, &failed};
        pthread_create(&th[i], NULL, timed_worker, &jobs[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    util_duration took = util_now_mono() - t0;
    tcp_ports(S.port, after);
    int conns = 0;
    for (int p = 0; p < 65536; p++)
        conns += after[p] && !before[p];
    printf("figure: %d threads x %d GETs: %d TCP connections, %.0f req/s\n", THREADS, EACH, conns,
           THREADS * EACH / secs(took));
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(atomic_load(&next), THREADS * EACH);
    /* One per concurrent request at most: one handle (and connection) per thread. */
    assert_true(conns >= 1 && conns <= THREADS);
    free(before);
    free(after);
    free(done);
    conn_close(&k);
}

/* ---- watches against kube-lite ---------------------------------------------------------- */

typedef struct rec {
    atomic_int n;
    int cap;
    int stop_after; /* return 1 once this many events came (0: never) */
    char (*types)[16];
    char (*names)[64];
    long long *rvs;
} rec;

static void rec_init(rec *r, int cap, int stop_after)
{
    memset(r, 0, sizeof(*r));
    r->cap = cap;
    r->stop_after = stop_after;
    r->types = util_calloc((size_t)cap, sizeof(*r->types));
    r->names = util_calloc((size_t)cap, sizeof(*r->names));
    r->rvs = util_calloc((size_t)cap, sizeof(*r->rvs));
}

static void rec_free(rec *r)
{
    free(r->types);
    free(r->names);
    free(r->rvs);
}

static int on_event(void *ud, const char *type, json_object *obj)
{
    rec *r = ud;
    if (strcmp(type, "BOOKMARK") == 0 && r->stop_after)
        return 0;
    int i = atomic_load(&r->n);
    if (i < r->cap) {
        snprintf(r->types[i], sizeof(r->types[i]), "%s", type);
        const char *name = jstr(obj, "metadata.name");
        snprintf(r->names[i], sizeof(r->names[i]), "%s", name ? name : "");
        r->rvs[i] = jrv(obj);
    }
    atomic_store(&r->n, i + 1);
    return r->stop_after && i + 1 >= r->stop_after ? 1 : 0;
}

struct watch_job {
    kube_watch *w;
    const char *path;
    rec *r;
    int rc;
    char err[256];
    util_duration ended;
};

static void *watch_main(void *ud)
{
    struct watch_job *j = ud;
    j->rc = kube_watch_run(j->w, j->path, on_event, j->r);
    snprintf(j->err, sizeof(j->err), "%s", util_err_last());
    j->ended = util_now_mono();
    return NULL;
}

static char *list_rv(const char *collection)
{
    kube_resp r = {0};
    char *rv = NULL;
    if (kube_get(C.c, collection, &r) == 0)
        rv = util_strdup(jstr(r.body, "metadata.resourceVersion"));
    kube_resp_clear(&r);
    return rv ? rv : util_strdup("0");
}

static void test_watch_delivers_events_in_order(void **state)
{
    (void)state;
    char *ns = new_namespace();
    char *coll = kube_path(&KUBE_SECRET, ns, NULL, NULL);
    char *rv = list_rv(coll);
    char *wpath =
        util_asprintf("%s?watch=true&allowWatchBookmarks=true&resourceVersion=%s", coll, rv);
    rec r;
    rec_init(&r, 16, 3);
    kube_watch *w = kube_watch_new(C.c);
    struct watch_job j = {w, wpath, &r, 0, "", 0};
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &j);

    kube_resp resp = {0};
    assert_int_equal(create_secret(C.c, ns, "s1", &resp), 0);
    kube_resp_clear(&resp);
    char *path = kube_path(&KUBE_SECRET, ns, "s1", NULL);
    assert_int_equal(
        kube_patch(C.c, path, KUBE_PATCH_MERGE, "{\"metadata\":{\"labels\":{\"b\":\"2\"}}}", &resp),
        0);
    kube_resp_clear(&resp);
    assert_int_equal(kube_delete(C.c, path, NULL, &resp), 0);
    kube_resp_clear(&resp);
    pthread_join(th, NULL);

    assert_int_equal(j.rc, 1); /* fn's value */
    assert_int_equal(atomic_load(&r.n), 3);
    assert_string_equal(r.types[0], "ADDED");
    assert_string_equal(r.types[1], "MODIFIED");
    assert_string_equal(r.types[2], "DELETED");
    for (int i = 0; i < 3; i++)
        assert_string_equal(r.names[i], "s1");
    assert_true(r.rvs[0] > atoll(rv) && r.rvs[1] > r.rvs[0] && r.rvs[2] > r.rvs[1]);
    kube_watch_free(w);
    rec_free(&r);
    free(path);
    free(wpath);
    free(rv);
    free(coll);
    free(ns);
}

struct create_job {
    const char *ns;
    int from, to;
    atomic_int *failed;
};

static void *create_worker(void *ud)
{
    struct create_job *j = ud;
    for (int i = j->from; i < j->to; i++) {
        char name[32];
        snprintf(name, sizeof(name), "o-%04d", i);
        kube_resp r = {0};
        if (create_secret(C.c, j->ns, name, &r) != 0)
            atomic_fetch_add(j->failed, 1);
        kube_resp_clear(&r);
    }
    return NULL;
}

static void test_watch_of_1000_fast_creates_sees_each_once_in_order(void **state)
{
    (void)state;
    enum { N = 1000, THREADS = 8 };
    char *ns = new_namespace();
    char *coll = kube_path(&KUBE_SECRET, ns, NULL, NULL);
    char *rv = list_rv(coll);
    char *wpath = util_asprintf("%s?watch=true&resourceVersion=%s", coll, rv);
    rec r;
    rec_init(&r, N + 8, N);
    kube_watch *w = kube_watch_new(C.c);
    struct watch_job j = {w, wpath, &r, 0, "", 0};
    pthread_t wt;
    pthread_create(&wt, NULL, watch_main, &j);

    atomic_int failed = 0;
    pthread_t th[THREADS];
    struct create_job jobs[THREADS];
    util_duration start = util_now_mono();
    for (int i = 0; i < THREADS; i++) {
        jobs[i] = (struct create_job){ns, i * N / THREADS, (i + 1) * N / THREADS, &failed};
        pthread_create(&th[i], NULL, create_worker, &jobs[i]);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    pthread_join(wt, NULL);
    printf("figure: 1000 creates and their watch events in %.2f s\n", secs(j.ended - start));
    assert_int_equal(atomic_load(&failed), 0);
    assert_int_equal(j.rc, 1);
    assert_int_equal(atomic_load(&r.n), N);
    bool *seen = util_calloc(N, sizeof(bool));
    int dup = 0, bad_order = 0, not_added = 0;
    for (int i = 0; i < N; i++) {
        int k = atoi(r.names[i] + 2);
        if (k < 0 || k >= N || seen[k])
            dup++;
        else
            seen[k] = true;
        if (i > 0 && r.rvs[i] <= r.rvs[i - 1])
            bad_order++;
        if (strcmp(r.types[i], "ADDED") != 0)
            not_added++;
    }
    assert_int_equal(dup, 0);
    assert_int_equal(bad_order, 0);
    assert_int_equal(not_added, 0);
    free(seen);
    kube_watch_free(w);
    rec_free(&r);
    free(wpath);
    free(rv);
    free(coll);
    free(ns);
}

static void test_watch_from_a_compacted_version_is_erange(void **state)
{
    (void)state;
    char *coll = kube_path(&KUBE_SECRET, "default", NULL, NULL);
    char *rv = list_rv(coll);
    char *name = uname("compact");
    kube_resp resp = {0};
    assert_int_equal(create_secret(C.c, "default", name, &resp), 0);
    kube_resp_clear(&resp);
    free(raw_http(&S, "POST", "/kube-lite/compact", ""));
    char *wpath = util_asprintf("%s?watch=true&resourceVersion=%s", coll, rv);
    rec r;
    rec_init(&r, 4, 0);
    kube_watch *w = kube_watch_new(C.c);
    assert_int_equal(kube_watch_run(w, wpath, on_event, &r), -ERANGE);
    assert_non_null(strstr(util_err_last(), "too old resource version"));
    assert_int_equal(atomic_load(&r.n), 0);
    kube_watch_free(w);
    rec_free(&r);
    free(wpath);
    free(name);
    free(rv);
    free(coll);
}

static void test_watch_cancel_from_another_thread_is_prompt(void **state)
{
    (void)state;
    char *ns = new_namespace();
    char *coll = kube_path(&KUBE_SECRET, ns, NULL, NULL);
    char *rv = list_rv(coll);
    char *wpath = util_asprintf("%s?watch=true&resourceVersion=%s", coll, rv);
    rec r;
    rec_init(&r, 4, 0);
    kube_watch *w = kube_watch_new(C.c);
    struct watch_job j = {w, wpath, &r, 0, "", 0};
    pthread_t th;
    pthread_create(&th, NULL, watch_main, &j);
    util_sleep(700 * UTIL_MS); /* connected and idle */
    util_duration at = util_now_mono();
    kube_watch_cancel(w);
    pthread_join(th, NULL);
    util_duration took = j.ended - at;
    printf("figure: idle watch ended %.1f ms after kube_watch_cancel\n", secs(took) * 1000);
    assert_int_equal(j.rc, -ECANCELED);
    assert_true(took < UTIL_SECOND);
    /* Cancelled stays cancelled: a later run returns at once. */
    assert_int_equal(kube_watch_run(w, wpath, on_event, &r), -ECANCELED);
    assert_int_equal(atomic_load(&r.n), 0);
    kube_watch_free(w);
    rec_free(&r);
    free(wpath);
    free(rv);
    free(coll);
    free(ns);
}

static void test_watch_cancel_before_run(void **state)
{
    (void)state;
    kube_watch *w = kube_watch_new(C.c);
    kube_watch_cancel(w);
    rec r;
    rec_init(&r, 1, 0);
    assert_int_equal(kube_watch_run(w, "/api/v1/secrets?watch=true", on_event, &r), -ECANCELED);
    kube_watch_free(w);
    kube_watch_free(NULL);
    rec_free(&r);
}

static void test_watch_closed_by_the_server_returns_zero(void **state)
{
    (void)state;
    set_faults(&S, "{\"watch_close_after_ms\":1000}");
    char *coll = kube_path(&KUBE_SECRET, "default", NULL, NULL);
    char *rv = list_rv(coll);
    char *wpath = util_asprintf("%s?watch=true&resourceVersion=%s", coll, rv);
    rec r;
    rec_init(&r, 4, 0);
    kube_watch *w = kube_watch_new(C.c);
    util_duration start = util_now_mono();
    int rc = kube_watch_run(w, wpath, on_event, &r);
    util_duration took = util_now_mono() - start;
    assert_int_equal(rc, 0);
    assert_true(took >= 900 * UTIL_MS && took < 5 * UTIL_SECOND);
    /* The same watch object runs again (the informer's rewatch). */
    set_faults(&S, "{\"watch_close_after_ms\":300}");
    assert_int_equal(kube_watch_run(w, wpath, on_event, &r), 0);
    kube_watch_free(w);
    rec_free(&r);
    free(wpath);
    free(rv);
    free(coll);
}

/* ---- TLS and tokens ------------------------------------------------------------------ */

static kl T;
static char *certs;
static char *ca_pem;
#define TOKEN "s3cr3t-token-for-tests"

static int tls_setup(void **state)
{
    (void)state;
    char *script = repo_file("hack/kube-lite/gen-certs.sh");
    if (!script) {
        fprintf(stderr, "hack/kube-lite/gen-certs.sh not found\n");
        return -1;
    }
    certs = util_asprintf("%s/certs", th_tmpdir());
    char *cmd = util_asprintf("bash '%s' '%s' >/dev/null", script, certs);
    int rc = system(cmd);
    free(cmd);
    free(script);
    char *tokens = util_asprintf("%s/tokens.csv", th_tmpdir());
    FILE *f = fopen(tokens, "w");
    if (rc != 0 || !f) {
        free(tokens);
        if (f)
            fclose(f);
        return -1;
    }
    fprintf(f, "%s,tester,1,\"system:masters\"\n", TOKEN);
    fclose(f);
    char *ca = util_asprintf("%s/ca.crt", certs);
    ca_pem = slurp(ca);
    char *flags[] = {util_asprintf("--tls-cert-file=%s/server.crt", certs),
                     util_asprintf("--tls-private-key-file=%s/server.key", certs),
                     util_asprintf("--client-ca-file=%s", ca),
                     util_asprintf("--token-auth-file=%s", tokens),
                     util_strdup("--kubeconfig-token=" TOKEN),
                     NULL};
    rc = kl_start(&T, flags);
    for (int i = 0; flags[i]; i++)
        free(flags[i]);
    free(ca);
    free(tokens);
    return rc == 0 && ca_pem ? 0 : -1;
}

static int tls_teardown(void **state)
{
    (void)state;
    kl_stop(&T);
    free(certs);
    free(ca_pem);
    return 0;
}

/* GET through a client made from `kubeconfig`; fills r. */
static int tls_get(const char *kubeconfig, kube_resp *r)
{
    conn k;
    kube_client_opts o = {.max_retries = 1};
    int rc = conn_open(&k, kubeconfig, &o);
    if (rc < 0)
        return rc;
    rc = kube_get(k.c, "/api/v1/namespaces/default/secrets", r);
    conn_close(&k);
    return rc;
}

static void test_tls_with_ca_file_and_token(void **state)
{
    (void)state;
    kube_resp r = {0};
    /* The kubeconfig kube-lite wrote: certificate-authority (a file) and a token. */
    assert_int_equal(tls_get(T.kubeconfig, &r), 0);
    assert_int_equal(r.code, 200);
    assert_string_equal(jstr(r.body, "kind"), "SecretList");
    kube_resp_clear(&r);
}

static void test_tls_with_ca_data_and_token(void **state)
{
    (void)state;
    char *b64 = base64(ca_pem);
    char *cl = util_asprintf("    certificate-authority-data: %s\n", b64);
    char *kc = write_kubeconfig(T.url, cl, "    token: " TOKEN "\n");
    kube_resp r = {0};
    assert_int_equal(tls_get(kc, &r), 0);
    assert_int_equal(r.code, 200);
    kube_resp_clear(&r);
    free(kc);
    free(cl);
    free(b64);
}

static void test_tls_without_token_is_401(void **state)
{
    (void)state;
    char *cl = util_asprintf("    certificate-authority: %s/ca.crt\n", certs);
    char *kc = write_kubeconfig(T.url, cl, NULL);
    kube_resp r = {0};
    assert_int_equal(tls_get(kc, &r), -EREMOTEIO);
    assert_int_equal(r.code, 401);
    assert_string_equal(r.reason, "Unauthorized");
    kube_resp_clear(&r);
    free(kc);
    kc = write_kubeconfig(T.url, cl, "    token: wrong-token\n");
    assert_int_equal(tls_get(kc, &r), -EREMOTEIO);
    assert_int_equal(r.code, 401);
    kube_resp_clear(&r);
    free(kc);
    free(cl);
}

static void test_tls_insecure_skip_verify(void **state)
{
    (void)state;
    char *kc =
        write_kubeconfig(T.url, "    insecure-skip-tls-verify: true\n", "    token: " TOKEN "\n");
    kube_resp r = {0};
    assert_int_equal(tls_get(kc, &r), 0);
    kube_resp_clear(&r);
    free(kc);
}

static void test_tls_unknown_ca_fails_without_retrying(void **state)
{
    (void)state;
    /* No CA given: the system roots do not know kube-lite's CA. */
    char *kc = write_kubeconfig(T.url, NULL, "    token: " TOKEN "\n");
    kube_resp r = {0};
    util_duration start = util_now_mono();
    assert_int_equal(tls_get(kc, &r), -EIO);
    /* Ten retries would back off for many seconds; one failed handshake takes
     * milliseconds, and well under 5 s even on a machine loaded to 20+. */
    assert_true(util_now_mono() - start < 5 * UTIL_SECOND);
    assert_int_equal(r.code, 0);
    assert_true(strstr(r.message, "certificate") || strstr(r.message, "SSL"));
    kube_resp_clear(&r);
    free(kc);
}

static void test_tls_server_name_is_the_name_verified(void **state)
{
    (void)state;
    /* The URL says 127.0.0.1; the certificate also names "localhost". */
    char *ok = util_asprintf("    certificate-authority: %s/ca.crt\n"
                             "    tls-server-name: localhost\n",
                             certs);
    char *bad = util_asprintf("    certificate-authority: %s/ca.crt\n"
                              "    tls-server-name: not-in-the-cert.example\n",
                              certs);
    char *kc_ok = write_kubeconfig(T.url, ok, "    token: " TOKEN "\n");
    char *kc_bad = write_kubeconfig(T.url, bad, "    token: " TOKEN "\n");
    kube_resp r = {0};
    assert_int_equal(tls_get(kc_ok, &r), 0);
    kube_resp_clear(&r);
    assert_int_equal(tls_get(kc_bad, &r), -EIO);
    kube_resp_clear(&r);
    free(kc_ok);
    free(kc_bad);
    free(ok);
    free(bad);
}

static void test_tls_client_certificate_files_and_data_are_loaded(void **state)
{
    (void)state;
    /* kube-lite does not ask for client certificates, so this checks that
     * the client loads them: a valid pair works, a mismatched pair fails
     * before any request goes out. */
    char *crt = util_asprintf("%s/server.crt", certs), *key = util_asprintf("%s/server.key", certs);
    char *crt_pem = slurp(crt), *key_pem = slurp(key);
    char *b_crt = base64(crt_pem), *b_key = base64(key_pem), *b_ca = base64(ca_pem);
    char *cl = util_asprintf("    certificate-authority-data: %s\n", b_ca);
    char *files = util_asprintf("    token: " TOKEN "\n    client-certificate: %s\n"
                                "    client-key: %s\n",
                                crt, key);
    char *data = util_asprintf("    token: " TOKEN "\n    client-certificate-data: %s\n"
                               "    client-key-data: %s\n",
                               b_crt, b_key);
    char *wrong = util_asprintf("    token: " TOKEN "\n    client-certificate-data: %s\n"
                                "    client-key-data: %s\n",
                                b_ca, b_key);
    char *kc_files = write_kubeconfig(T.url, cl, files);
    char *kc_data = write_kubeconfig(T.url, cl, data);
    char *kc_wrong = write_kubeconfig(T.url, cl, wrong);
    kube_resp r = {0};
    assert_int_equal(tls_get(kc_files, &r), 0);
    kube_resp_clear(&r);
    assert_int_equal(tls_get(kc_data, &r), 0);
    kube_resp_clear(&r);
    assert_int_equal(tls_get(kc_wrong, &r), -EIO);
    assert_int_equal(r.code, 0);
    kube_resp_clear(&r);
    char *all[] = {crt,   key,  crt_pem, key_pem,  b_crt,   b_key,    b_ca, cl,
                   files, data, wrong,   kc_files, kc_data, kc_wrong, NULL};
    for (int i = 0; all[i]; i++)
        free(all[i]);
}

static void test_v5_logs_requests_but_never_the_token_or_bodies(void **state)
{
    (void)state;
    char *log = util_asprintf("%s/v5.log", th_tmpdir());
    int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    close(fd);
    obs_log_set_verbosity(5);
    conn k;
    int rc = conn_open(&k, T.kubeconfig, NULL);
    kube_resp r = {0};
    int rc_create = rc == 0 ? create_secret(k.c, "default", "logged", &r) : rc;
    kube_resp_clear(&r);
    int rc_get = rc == 0 ? kube_get(k.c, "/api/v1/namespaces/default/secrets/logged", &r) : rc;
    kube_resp_clear(&r);
    if (rc == 0)
        conn_close(&k);
    obs_log_set_verbosity(0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    char *text = slurp(log);
    assert_int_equal(rc_create, 0);
    assert_int_equal(rc_get, 0);
    assert_non_null(text);
    assert_non_null(strstr(text, "POST https://127.0.0.1:"));
    assert_non_null(strstr(text, "/api/v1/namespaces/default/secrets/logged 200 in "));
    assert_null(strstr(text, TOKEN));
    assert_null(strstr(text, "dg==")); /* the Secret's data */
    free(text);
    free(log);
}

/* ---- scripted watch streams ---------------------------------------------------------- */

typedef struct raw_srv {
    int fd, port;
    pthread_t th;
    int status;
    const char *const *chunks; /* NULL-ended, each sent as one HTTP chunk */
    char *kubeconfig;
} raw_srv;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

static void *raw_main(void *ud)
{
    raw_srv *s = ud;
    int c = accept(s->fd, NULL, NULL);
    if (c < 0)
        return NULL;
    int one = 1;
    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    char req[4096];
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    char head[256];
    int n = snprintf(head, sizeof(head),
                     "HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                     "Transfer-Encoding: chunked\r\n\r\n",
                     s->status);
    send_all(c, head, (size_t)n);
    for (const char *const *ch = s->chunks; ch && *ch; ch++) {
        char size[32];
        n = snprintf(size, sizeof(size), "%zx\r\n", strlen(*ch));
        send_all(c, size, (size_t)n);
        send_all(c, *ch, strlen(*ch));
        send_all(c, "\r\n", 2);
        util_sleep(15 * UTIL_MS); /* separate reads on the client */
    }
    send_all(c, "0\r\n\r\n", 5);
    shutdown(c, SHUT_WR);
    char drain[256];
    while (recv(c, drain, sizeof(drain), 0) > 0) {
    }
    close(c);
    return NULL;
}

static int raw_start(raw_srv *s, int status, const char *const *chunks)
{
    memset(s, 0, sizeof(*s));
    s->status = status;
    s->chunks = chunks;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(s->fd, 4) < 0 ||
        getsockname(s->fd, (struct sockaddr *)&sa, &sl) < 0)
        return -1;
    s->port = ntohs(sa.sin_port);
    char *server = util_asprintf("http://127.0.0.1:%d", s->port);
    s->kubeconfig = write_kubeconfig(server, NULL, NULL);
    free(server);
    return pthread_create(&s->th, NULL, raw_main, s) == 0 ? 0 : -1;
}

static void raw_stop(raw_srv *s)
{
    pthread_join(s->th, NULL);
    close(s->fd);
    free(s->kubeconfig);
}

/* Runs one watch against a scripted stream; returns kube_watch_run's value. */
static int raw_watch(int status, const char *const *chunks, rec *r)
{
    raw_srv s;
    if (raw_start(&s, status, chunks) < 0)
        return -999;
    conn k;
    int rc = conn_open(&k, s.kubeconfig, NULL);
    if (rc == 0) {
        kube_watch *w = kube_watch_new(k.c);
        rc = kube_watch_run(w, "/api/v1/secrets?watch=true", on_event, r);
        kube_watch_free(w);
        conn_close(&k);
    }
    raw_stop(&s);
    return rc;
}

#define EV(type, name, rv)                                                                         \
    "{\"type\":\"" type "\",\"object\":{\"kind\":\"Secret\",\"metadata\":{\"name\":\"" name        \
    "\",\"resourceVersion\":\"" rv "\"}}}\n"

static void test_watch_events_split_anywhere_or_batched(void **state)
{
    (void)state;
    static const char *const chunks[] = {
        /* Two and a half events in one chunk... */
        EV("ADDED", "a", "1") EV("ADDED", "b", "2") "{\"type\":\"MODI",
        /* ...the rest of it, split inside a string, then inside a number. */
        "FIED\",\"object\":{\"metadata\":{\"name\":\"b\",\"resource", "Version\":\"3\",\"n\":12",
        "34}}}",
        /* The newline alone, then a bookmark and two events together. */
        "\n",
        "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"4\"}}}\n" EV(
            "DELETED", "a", "5") EV("ADDED", "c", "6"),
        /* One event a byte or two at a time. */
        "{", "\"", "type\":", "\"ADDED\"", ",\"object\":{\"metadata\":{\"name\":\"d\",",
        "\"resourceVersion\":\"7\"}", "}", "}", "\r\n", NULL};
    rec r;
    rec_init(&r, 16, 0);
    assert_int_equal(raw_watch(200, chunks, &r), 0);
    const char *want_types[] = {"ADDED",   "ADDED", "MODIFIED", "BOOKMARK",
                                "DELETED", "ADDED", "ADDED"};
    const char *want_names[] = {"a", "b", "b", "", "a", "c", "d"};
    assert_int_equal(atomic_load(&r.n), 7);
    for (int i = 0; i < 7; i++) {
        assert_string_equal(r.types[i], want_types[i]);
        assert_string_equal(r.names[i], want_names[i]);
        assert_int_equal(r.rvs[i], i + 1);
    }
    rec_free(&r);
}

static void test_watch_error_events_end_the_stream(void **state)
{
    (void)state;
    static const char *const expired[] = {
        EV("ADDED", "a", "1"),
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":"
        "\"Failure\",\"message\":\"too old resource version: 1 (9)\",\"reason\":\"Expired\","
        "\"code\":410}}\n" EV("ADDED", "never", "2"),
        NULL};
    static const char *const internal[] = {
        "{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":"
        "\"etcd is sad\",\"reason\":\"InternalError\",\"code\":500}}\n",
        NULL};
    rec r;
    rec_init(&r, 4, 0);
    assert_int_equal(raw_watch(200, expired, &r), -ERANGE);
    assert_int_equal(atomic_load(&r.n), 1); /* nothing after the ERROR event */
    rec_free(&r);
    rec_init(&r, 4, 0);
    assert_int_equal(raw_watch(200, internal, &r), -EREMOTEIO);
    assert_non_null(strstr(util_err_last(), "etcd is sad"));
    assert_int_equal(atomic_load(&r.n), 0);
    rec_free(&r);
}

static void test_watch_refused_with_a_status_answer(void **state)
{
    (void)state;
    static const char *const forbidden[] = {
        "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\",\"message\":\"secrets "
        "is forbidden: User \\\"x\\\" cannot watch resource \\\"secrets\\\"\",\"reason\":"
        "\"Forbidden\",\"code\":403}",
        NULL};
    static const char *const gone[] = {
        "{\"kind\":\"Status\",\"status\":\"Failure\",\"reason\":\"Expired\",\"code\":410}", NULL};
    rec r;
    rec_init(&r, 4, 0);
    assert_int_equal(raw_watch(403, forbidden, &r), -EREMOTEIO);
    assert_non_null(strstr(util_err_last(), "cannot watch resource"));
    assert_int_equal(raw_watch(410, gone, &r), -ERANGE);
    assert_int_equal(atomic_load(&r.n), 0);
    rec_free(&r);
}

static void test_watch_bad_json_or_cut_event_is_eio(void **state)
{
    (void)state;
    static const char *const bad[] = {EV("ADDED", "a", "1") "{\"type\":\"ADDED\",\"object\":{]}\n",
                                      NULL};
    static const char *const cut[] = {EV("ADDED", "a", "1") "{\"type\":\"ADDED\",\"obj", NULL};
    static const char *const no_type[] = {"{\"object\":{}}\n", NULL};
    rec r;
    rec_init(&r, 4, 0);
    assert_int_equal(raw_watch(200, bad, &r), -EIO);
    assert_int_equal(atomic_load(&r.n), 1);
    assert_int_equal(raw_watch(200, cut, &r), -EIO);
    assert_int_equal(raw_watch(200, no_type, &r), -EIO);
    rec_free(&r);
}

static int stop_at_first(void *ud, const char *type, json_object *obj)
{
    (void)type;
    (void)obj;
    (*(int *)ud)++;
    return 42;
}

static void test_watch_returns_what_fn_returns(void **state)
{
    (void)state;
    static const char *const two[] = {EV("ADDED", "a", "1") EV("ADDED", "b", "2"), NULL};
    raw_srv s;
    assert_int_equal(raw_start(&s, 200, two), 0);
    conn k;
    assert_int_equal(conn_open(&k, s.kubeconfig, NULL), 0);
    kube_watch *w = kube_watch_new(k.c);
    int calls = 0;
    assert_int_equal(kube_watch_run(w, "/api/v1/secrets?watch=true", stop_at_first, &calls), 42);
    assert_int_equal(calls, 1);
    kube_watch_free(w);
    conn_close(&k);
    raw_stop(&s);
}

int main(void)
{
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const char *v = getenv("KUBE_TEST_V"); /* e.g. 5: request logging */
    if (v)
        obs_log_set_verbosity(atoi(v));
    const struct CMUnitTest api[] = {
        cmocka_unit_test(test_kube_path_builds_paths_and_escapes_names),
        cmocka_unit_test(test_kube_object_check_refuses_identities_no_server_stores),
        cmocka_unit_test(test_kube_key_is_namespace_slash_name),
        cmocka_unit_test_setup(test_crud_round_trip_of_a_secret, reset_faults),
        cmocka_unit_test_setup(test_crud_of_a_cluster_scoped_storage_class, reset_faults),
        cmocka_unit_test_setup(test_status_not_found_is_decoded, reset_faults),
        cmocka_unit_test_setup(test_skip_body_leaves_successes_unparsed_but_not_errors,
                               reset_faults),
        cmocka_unit_test_setup(test_status_already_exists_and_conflict_are_decoded, reset_faults),
        cmocka_unit_test_setup(test_status_invalid_carries_the_message, reset_faults),
        cmocka_unit_test_setup(test_patch_types_merge_json_and_strategic, reset_faults),
        cmocka_unit_test_setup(test_client_metrics_count_requests_by_code, reset_faults),
        cmocka_unit_test_setup_teardown(test_retries_survive_half_503, reset_faults, reset_faults),
        cmocka_unit_test_setup_teardown(test_retries_survive_half_429, reset_faults, reset_faults),
        cmocka_unit_test_setup_teardown(test_retry_after_is_honoured_and_bounded, reset_faults,
                                        reset_faults),
        cmocka_unit_test_setup_teardown(test_500_is_retried_for_reads_and_creates, reset_faults,
                                        reset_faults),
        cmocka_unit_test_setup_teardown(test_retries_stay_within_the_request_timeout, reset_faults,
                                        reset_faults),
        cmocka_unit_test(test_refused_connection_is_retried_then_eio),
        cmocka_unit_test(test_reset_after_sending_retries_reads_and_creates),
        cmocka_unit_test_setup(test_rate_limiter_qps20_burst5_shared_by_threads, reset_faults),
        cmocka_unit_test_setup(test_background_request_waits_for_every_normal_one, reset_faults),
        cmocka_unit_test_setup(test_connections_are_reused_across_16_threads, reset_faults),
        cmocka_unit_test_setup(test_watch_delivers_events_in_order, reset_faults),
        cmocka_unit_test_setup(test_watch_of_1000_fast_creates_sees_each_once_in_order,
                               reset_faults),
        cmocka_unit_test_setup(test_watch_from_a_compacted_version_is_erange, reset_faults),
        cmocka_unit_test_setup(test_watch_cancel_from_another_thread_is_prompt, reset_faults),
        cmocka_unit_test(test_watch_cancel_before_run),
        cmocka_unit_test_setup_teardown(test_watch_closed_by_the_server_returns_zero, reset_faults,
                                        reset_faults),
    };
    const struct CMUnitTest tls[] = {
        cmocka_unit_test(test_tls_with_ca_file_and_token),
        cmocka_unit_test(test_tls_with_ca_data_and_token),
        cmocka_unit_test(test_tls_without_token_is_401),
        cmocka_unit_test(test_tls_insecure_skip_verify),
        cmocka_unit_test(test_tls_unknown_ca_fails_without_retrying),
        cmocka_unit_test(test_tls_server_name_is_the_name_verified),
        cmocka_unit_test(test_tls_client_certificate_files_and_data_are_loaded),
        cmocka_unit_test(test_v5_logs_requests_but_never_the_token_or_bodies),
    };
    const struct CMUnitTest streams[] = {
        cmocka_unit_test(test_watch_events_split_anywhere_or_batched),
        cmocka_unit_test(test_watch_error_events_end_the_stream),
        cmocka_unit_test(test_watch_refused_with_a_status_answer),
        cmocka_unit_test(test_watch_bad_json_or_cut_event_is_eio),
        cmocka_unit_test(test_watch_returns_what_fn_returns),
    };
    int failed =
        cmocka_run_group_tests_name("kube client (kube-lite)", api, api_setup, api_teardown);
    failed += cmocka_run_group_tests_name("kube client TLS", tls, tls_setup, tls_teardown);
    failed += cmocka_run_group_tests_name("kube watch streams", streams, NULL, NULL);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
