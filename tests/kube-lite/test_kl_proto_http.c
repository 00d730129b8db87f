/*
 * kube-lite speaking protobuf over HTTP, as client-go configured with
 * ContentType application/vnd.kubernetes.protobuf does: protobuf bodies for
 * create, update and status updates, JSON patch bodies, DeleteOptions in
 * protobuf, and `Accept: application/vnd.kubernetes.protobuf, * / *` on
 * every request. Answers come back in protobuf (objects, lists, Status
 * errors, watch frames) for built-in types, and in JSON for custom
 * resources' objects and discovery, as kube-apiserver answers.
 *
 * One kube-lite for the suite (th_kube_lite); a PV goes through create ->
 * get -> list -> update -> status -> patch -> delete -> 404, then a watch
 * from before its creation replays the story as protobuf frames. Other
 * kinds the sidecars write (PVC, VolumeAttachment, Lease, events.k8s.io
 * Event) are created and read back the same way.
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

#include <curl/curl.h>

#include "harness.h"
#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define ACCEPT_PB "application/vnd.kubernetes.protobuf, */*"

static char *base_url;

typedef struct answer {
    long code;
    char *body;
    size_t len;
    char *ctype;
} answer;

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    answer *a = ud;
    size_t add = size * n;
    char *p = realloc(a->body, a->len + add + 1);
    if (!p)
        return 0;
    memcpy(p + a->len, data, add);
    a->len += add;
    p[a->len] = '\0';
    a->body = p;
    return add;
}

static void answer_free(answer *a)
{
    free(a->body);
    free(a->ctype);
    memset(a, 0, sizeof(*a));
}

/* One request; `body` of `len` bytes with `ctype` (NULL: none). */
static answer call(const char *method, const char *path, const char *ctype, const void *body,
                   size_t len, const char *accept)
{
    answer a = {0};
    CURL *h = curl_easy_init();
    assert_non_null(h);
    char *url = util_asprintf("%s%s", base_url, path);
    char *acc = util_asprintf("Accept: %s", accept);
    char *ct = ctype ? util_asprintf("Content-Type: %s", ctype) : NULL;
    struct curl_slist *hl = curl_slist_append(NULL, acc);
    hl = curl_slist_append(hl, "Expect:");
    if (ct)
        hl = curl_slist_append(hl, ct);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)len);
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body);
    }
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &a);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    CURLcode rc = curl_easy_perform(h);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, path, curl_easy_strerror(rc));
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &a.code);
    char *ctv = NULL;
    curl_easy_getinfo(h, CURLINFO_CONTENT_TYPE, &ctv);
    a.ctype = util_strdup(ctv ? ctv : "");
    curl_slist_free_all(hl);
    curl_easy_cleanup(h);
    free(url);
    free(acc);
    free(ct);
    return a;
}

/* The protobuf answer decoded; fails unless the code and Content-Type match. */
static json_object *pb_answer(answer *a, long want_code, const char *what)
{
    if (a->code != want_code)
        fail_msg("%s: HTTP %ld, want %ld (%s)", what, a->code, want_code, a->ctype);
    if (strcmp(a->ctype, KL_PROTO_TYPE) != 0)
        fail_msg("%s: Content-Type %s, want protobuf", what, a->ctype);
    json_object *o = NULL;
    if (kl_proto_decode(a->body, a->len, NULL, NULL, &o) != 0)
        fail_msg("%s: the answer does not decode: %s", what, util_err_last());
    answer_free(a);
    return o;
}

static json_object *quoted(const char *text)
{
    char *s = util_strdup(text);
    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_object *o = kobj_parse_text(s, strlen(s));
    if (!o)
        fail_msg("bad JSON in the test: %s", s);
    free(s);
    return o;
}

/* Writes `json` (with ' for ") as protobuf with `method`; the decoded answer. */
static json_object *pb_write(const char *method, const char *path, const char *json, long want)
{
    json_object *o = quoted(json);
    char *pb = NULL;
    size_t n = 0;
    assert_int_equal(kl_proto_encode(o, &pb, &n), 0);
    answer a = call(method, path, KL_PROTO_TYPE, pb, n, ACCEPT_PB);
    free(pb);
    json_object_put(o);
    return pb_answer(&a, want, path);
}

static json_object *pb_get(const char *path, long want)
{
    answer a = call("GET", path, NULL, NULL, 0, ACCEPT_PB);
    return pb_answer(&a, want, path);
}

static void check_status(json_object *st, int code, const char *reason)
{
    assert_string_equal(kobj_str(st, "kind"), "Status");
    assert_string_equal(kobj_str(st, "status"), "Failure");
    assert_string_equal(kobj_str(st, "reason"), reason);
    int64_t c = 0;
    assert_int_equal(kobj_int64(st, "code", &c), 0);
    assert_int_equal(c, code);
}

/* ---- the PV's story ------------------------------------------------------------------------ */

#define PV_PATH "/api/v1/persistentvolumes"

static void test_pv_create_get_list_update_patch_delete_in_protobuf(void **state)
{
    (void)state;
    json_object *l = pb_get(PV_PATH, 200);
    assert_string_equal(kobj_str(l, "kind"), "PersistentVolumeList");
    char *rv0 = util_strdup(kobj_path_str(l, "metadata.resourceVersion"));
    json_object_put(l);

    json_object *pv =
        pb_write("POST", PV_PATH,
                 "{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':'pb-pv'},'spec':"
                 "{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],"
                 "'persistentVolumeReclaimPolicy':'Delete','storageClassName':'sc','csi':{'driver':"
                 "'d.example.com','volumeHandle':'h-1','volumeAttributes':{'a':'b'}}}}",
                 201);
    assert_string_equal(kobj_path_str(pv, "metadata.name"), "pb-pv");
    assert_non_null(kobj_path_str(pv, "metadata.uid"));
    assert_non_null(kobj_path_str(pv, "metadata.creationTimestamp"));
    assert_string_equal(kobj_path_str(pv, "spec.csi.volumeAttributes.a"), "b");
    char *uid = util_strdup(kobj_path_str(pv, "metadata.uid"));
    char *rv1 = util_strdup(kobj_path_str(pv, "metadata.resourceVersion"));
    json_object_put(pv);

    pv = pb_get(PV_PATH "/pb-pv", 200);
    assert_string_equal(kobj_path_str(pv, "spec.csi.driver"), "d.example.com");
    assert_string_equal(kobj_path_str(pv, "spec.capacity.storage"), "1Gi");
    json_object_put(pv);

    l = pb_get(PV_PATH, 200);
    assert_int_equal(kobj_len(kobj_arr(l, "items")), 1);
    assert_string_equal(kobj_path_str(kobj_at(kobj_arr(l, "items"), 0), "metadata.name"), "pb-pv");
    json_object_put(l);

    /* Update (PUT) with the resourceVersion, then through /status. */
    char *body = util_asprintf(
        "{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':'pb-pv',"
        "'resourceVersion':'%s','labels':{'l':'1'}},'spec':{'capacity':{'storage':'1Gi'},"
        "'accessModes':['ReadWriteOnce'],'persistentVolumeReclaimPolicy':'Retain',"
        "'storageClassName':'sc','csi':{'driver':'d.example.com','volumeHandle':'h-1',"
        "'volumeAttributes':{'a':'b'}}}}",
        rv1);
    pv = pb_write("PUT", PV_PATH "/pb-pv", body, 200);
    free(body);
    assert_string_equal(kobj_path_str(pv, "spec.persistentVolumeReclaimPolicy"), "Retain");
    assert_string_equal(kobj_path_str(pv, "metadata.labels.l"), "1");
    json_object_put(pv);
    /* A stale resourceVersion: 409 as a protobuf Status. */
    body = util_asprintf("{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':"
                         "'pb-pv','resourceVersion':'%s'},'spec':{}}",
                         rv1);
    json_object *st = pb_write("PUT", PV_PATH "/pb-pv", body, 409);
    free(body);
    check_status(st, 409, "Conflict");
    json_object_put(st);

    pv = pb_write("PUT", PV_PATH "/pb-pv/status",
                  "{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':'pb-pv'},"
                  "'status':{'phase':'Available','message':'from protobuf'}}",
                  200);
    assert_string_equal(kobj_path_str(pv, "status.message"), "from protobuf");
    json_object_put(pv);

    /* Patch bodies stay JSON; the answer is protobuf. */
    static const char merge[] = "{\"metadata\":{\"annotations\":{\"x\":\"y\"}}}";
    answer a = call("PATCH", PV_PATH "/pb-pv", "application/merge-patch+json", merge, strlen(merge),
                    ACCEPT_PB);
    pv = pb_answer(&a, 200, "patch");
    assert_string_equal(kobj_path_str(pv, "metadata.annotations.x"), "y");
    json_object_put(pv);

    /* DeleteOptions in protobuf: a wrong UID precondition is a 409, the
     * right one deletes (a PV answers with the deleted object). */
    json_object *opts = quoted("{'apiVersion':'v1','kind':'DeleteOptions','preconditions':"
                               "{'uid':'not-it'}}");
    char *pb = NULL;
    size_t n = 0;
    assert_int_equal(kl_proto_encode(opts, &pb, &n), 0);
    a = call("DELETE", PV_PATH "/pb-pv", KL_PROTO_TYPE, pb, n, ACCEPT_PB);
    st = pb_answer(&a, 409, "delete with a wrong uid");
    check_status(st, 409, "Conflict");
    json_object_put(st);
    free(pb);
    json_object_put(opts);
    body = util_asprintf("{'apiVersion':'meta.k8s.io/v1','kind':'DeleteOptions',"
                         "'preconditions':{'uid':'%s'},'propagationPolicy':'Background'}",
                         uid);
    opts = quoted(body);
    free(body);
    assert_int_equal(kl_proto_encode(opts, &pb, &n), 0);
    a = call("DELETE", PV_PATH "/pb-pv", KL_PROTO_TYPE, pb, n, ACCEPT_PB);
    pv = pb_answer(&a, 200, "delete");
    assert_string_equal(kobj_path_str(pv, "metadata.name"), "pb-pv");
    json_object_put(pv);
    free(pb);
    json_object_put(opts);

    st = pb_get(PV_PATH "/pb-pv", 404);
    check_status(st, 404, "NotFound");
    assert_string_equal(kobj_str(st, "message"), "persistentvolumes \"pb-pv\" not found");
    assert_string_equal(kobj_path_str(st, "details.name"), "pb-pv");
    json_object_put(st);

    /* The watch from before the create replays it as protobuf frames. */
    char *wpath = util_asprintf(PV_PATH "?watch=1&resourceVersion=%s&timeoutSeconds=1", rv0);
    a = call("GET", wpath, NULL, NULL, 0, ACCEPT_PB);
    free(wpath);
    assert_int_equal(a.code, 200);
    assert_string_equal(a.ctype, KL_PROTO_WATCH_TYPE);
    const char *want[] = {"ADDED", "MODIFIED", "MODIFIED", "MODIFIED", "DELETED"};
    size_t got = 0, off = 0;
    while (off + 4 <= a.len) {
        const unsigned char *p = (const unsigned char *)a.body + off;
        size_t flen = (size_t)p[0] << 24 | (size_t)p[1] << 16 | (size_t)p[2] << 8 | p[3];
        assert_true(off + 4 + flen <= a.len);
        char *type = NULL;
        json_object *obj = NULL;
        if (kl_proto_watch_event_decode(p + 4, flen, &type, &obj) != 0)
            fail_msg("frame %zu: %s", got, util_err_last());
        assert_true(got < 5);
        assert_string_equal(type, want[got]);
        assert_string_equal(kobj_str(obj, "kind"), "PersistentVolume");
        assert_string_equal(kobj_path_str(obj, "metadata.name"), "pb-pv");
        free(type);
        json_object_put(obj);
        got++;
        off += 4 + flen;
    }
    assert_int_equal(off, a.len);
    assert_int_equal(got, 5);
    answer_free(&a);
    free(uid);
    free(rv0);
    free(rv1);
}

/* ---- the other kinds the sidecars write ---------------------------------------------------------
 */

static void test_pvc_va_lease_event_through_protobuf(void **state)
{
    (void)state;
    static const struct {
        const char *path;
        const char *json;
        const char *check_path;
        const char *check;
    } rows[] = {
        {"/api/v1/namespaces/default/persistentvolumeclaims",
         "{'apiVersion':'v1','kind':'PersistentVolumeClaim','metadata':{'name':'pb-c'},'spec':"
         "{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}},"
         "'storageClassName':'sc'}}",
         "spec.resources.requests.storage", "1Gi"},
        {"/apis/storage.k8s.io/v1/volumeattachments",
         "{'apiVersion':'storage.k8s.io/v1','kind':'VolumeAttachment','metadata':{'name':"
         "'pb-va'},'spec':{'attacher':'d.example.com','source':{'persistentVolumeName':'pv'},"
         "'nodeName':'node-1'}}",
         "spec.source.persistentVolumeName", "pv"},
        {"/apis/coordination.k8s.io/v1/namespaces/default/leases",
         "{'apiVersion':'coordination.k8s.io/v1','kind':'Lease','metadata':{'name':'pb-l'},"
         "'spec':{'holderIdentity':'me','leaseDurationSeconds':15,'acquireTime':"
         "'2024-01-01T00:00:00.000000Z','renewTime':'2024-01-01T00:00:01.500000Z'}}",
         "spec.renewTime", "2024-01-01T00:00:01.500000Z"},
        {"/apis/events.k8s.io/v1/namespaces/default/events",
         "{'apiVersion':'events.k8s.io/v1','kind':'Event','metadata':{'name':'pb-e'},"
         "'eventTime':'2024-01-01T00:00:00.000001Z','reportingController':'c',"
         "'reportingInstance':'i','action':'Provision','reason':'Provisioning','regarding':"
         "{'kind':'PersistentVolumeClaim','namespace':'default','name':'pb-c'},'note':'n',"
         "'type':'Normal'}",
         "eventTime", "2024-01-01T00:00:00.000001Z"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_object *o = pb_write("POST", rows[i].path, rows[i].json, 201);
        const char *name = kobj_path_str(o, "metadata.name");
        assert_non_null(name);
        char *one = util_asprintf("%s/%s", rows[i].path, name);
        json_object_put(o);
        o = pb_get(one, 200);
        if (!kobj_path_str(o, rows[i].check_path) ||
            strcmp(kobj_path_str(o, rows[i].check_path), rows[i].check) != 0)
            fail_msg("%s: %s is %s", one, rows[i].check_path, kobj_path_str(o, rows[i].check_path));
        json_object_put(o);
        /* Lists of every kind come back in protobuf too. */
        o = pb_get(rows[i].path, 200);
        assert_true(kobj_len(kobj_arr(o, "items")) >= 1);
        json_object_put(o);
        free(one);
    }
}

/* ---- what stays JSON, and bad bodies
 * --------------------------------------------------------------- */

static void test_custom_resources_and_discovery_answer_json_errors_protobuf(void **state)
{
    (void)state;
    answer a = call("GET", "/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses", NULL, NULL, 0,
                    ACCEPT_PB);
    assert_int_equal(a.code, 200);
    assert_string_equal(a.ctype, "application/json");
    assert_non_null(strstr(a.body, "VolumeSnapshotClassList"));
    answer_free(&a);
    /* A custom resource's error is a Status, which every serializer writes. */
    json_object *st = pb_get("/apis/snapshot.storage.k8s.io/v1/volumesnapshotclasses/nope", 404);
    check_status(st, 404, "NotFound");
    json_object_put(st);
    a = call("GET", "/api/v1", NULL, NULL, 0, ACCEPT_PB);
    assert_int_equal(a.code, 200);
    assert_string_equal(a.ctype, "application/json");
    answer_free(&a);
    /* Plain JSON clients are unaffected. */
    a = call("GET", "/api/v1/namespaces/default", NULL, NULL, 0, "application/json, */*");
    assert_string_equal(a.ctype, "application/json");
    answer_free(&a);
    /* A body with a wrong wire type: 400, as a protobuf Status. */
    static const char bad[] = "k8s\0\x0a\x0f\x0a\x02v1\x12\x09"
                              "ConfigMap\x12\x02\x08\x07";
    a = call("POST", "/api/v1/namespaces/default/configmaps", KL_PROTO_TYPE, bad, sizeof(bad) - 1,
             ACCEPT_PB);
    st = pb_answer(&a, 400, "bad body");
    check_status(st, 400, "BadRequest");
    assert_non_null(strstr(kobj_str(st, "message"), "ConfigMap.metadata: wire type 0"));
    json_object_put(st);
}

/* ---- suite
 * ---------------------------------------------------------------------------------------- */

static pid_t kl_pid;

static int suite_setup(void **state)
{
    (void)state;
    char *kubeconfig = NULL;
    curl_global_init(CURL_GLOBAL_DEFAULT);
    /* No controllers: the watch below sees only this test's writes. */
    char *args[] = {"--controllers=", NULL};
    kl_pid = th_kube_lite(args, &base_url, &kubeconfig);
    free(kubeconfig);
    return kl_pid > 0 ? 0 : -1;
}

static int suite_teardown(void **state)
{
    (void)state;
    if (kl_pid > 0)
        th_stop(kl_pid, SIGTERM);
    free(base_url);
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pv_create_get_list_update_patch_delete_in_protobuf),
        cmocka_unit_test(test_pvc_va_lease_event_through_protobuf),
        cmocka_unit_test(test_custom_resources_and_discovery_answer_json_errors_protobuf),
    };
    return cmocka_run_group_tests_name("kube-lite protobuf over HTTP", tests, suite_setup,
                                       suite_teardown);
}
