/*
 * CPU floor of one provisioned + deleted volume: single-threaded loops over
 * the primitives the provisioner spends per volume, through the project's
 * own library (common/kube client, common/csi client, common/kobj JSON),
 * against a kube-lite (plain HTTP on loopback) and the example CSI driver
 * (unix socket). Per operation it prints the CPU of the calling thread
 * (getrusage RUSAGE_THREAD, user + system), the CPU of the whole process
 * (gRPC and libcurl may work on threads of their own) and the wall time:
 *   api_create_pv      POST of a ~1 KB PV shaped like the provisioner's
 *   api_patch_pv       JSON patch removing its finalizer (as the provisioner does)
 *   api_delete_pv      DELETE of the PV
 *   api_post_event     POST of a ~650-byte core/v1 Event as common/kube/events.c writes
 *   csi_create_delete  one CreateVolume + one DeleteVolume
 *   json_event         parse a ~1.25 KB PV watch event, serialize its object
 * Every request is answered with skip_body and checked; any failure exits 1.
 * Each loop runs --warmup iterations untimed first. Then the floor: the
 * per-op thread CPU times the per-volume counts (flags), against 0.4 ms.
 *
 * Usage: bench_floor --kubeconfig=FILE --endpoint=unix:///path/csi.sock
 *                    [--n=2000] [--warmup=100] [--csi-pairs=1] [--pv-creates=1]
 *                    [--pv-patches=1] [--pv-deletes=1] [--events=1.66]
 *                    [--intents=0.1] [--watch-events=9]
 * Built and run by hack/bench/bench_floor.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench_csi.h"
#include "csi/csi.h"
#include "kobj/kobj.h"
#include "kube/kube.h"

#define DRIVER    "hostpath.csi.example.com"
#define FINALIZER "external-provisioner.volume.kubernetes.io/finalizer"
#define PVS       "/api/v1/persistentvolumes"
#define EVENTS    "/api/v1/namespaces/default/events"
#define VOL_SIZE  ((int64_t)1 << 20)

struct bench {
    kube_client *kc;
    csi_conn *csi;
    json_object *pv;    /* template; metadata.name set per call */
    json_object *event; /* template; metadata.name set per call */
    char *patch;        /* the finalizer-removing JSON patch, the same for every PV */
    char *watch_text;   /* one PV watch event */
    size_t watch_len;
};

/* CPU of this thread and of the process, and the monotonic clock, in ns. */
struct sample {
    int64_t thread_cpu, proc_cpu, wall;
};

static int64_t tv_ns(const struct timeval *t)
{
    return (int64_t)t->tv_sec * 1000000000 + (int64_t)t->tv_usec * 1000;
}

static struct sample sample_now(void)
{
    struct rusage th, pr;
    getrusage(RUSAGE_THREAD, &th);
    getrusage(RUSAGE_SELF, &pr);
    struct sample s = {
        .thread_cpu = tv_ns(&th.ru_utime) + tv_ns(&th.ru_stime),
        .proc_cpu = tv_ns(&pr.ru_utime) + tv_ns(&pr.ru_stime),
        .wall = util_now_mono(),
    };
    return s;
}

/* Per-operation averages of one loop, in µs. */
struct result {
    double thread_us, proc_us, wall_us;
};

typedef int (*op_fn)(struct bench *b, int i);

/* 0 when the request got `want`; else says what came back. Clears r. */
static int check(const char *what, int i, int rc, kube_resp *r, int want)
{
    int ok = rc == 0 && r->code == want;
    if (!ok)
        fprintf(stderr, "%s #%d failed (rc %d): HTTP %d %s %s\n", what, i, rc, r->code, r->reason,
                r->message);
    kube_resp_clear(r);
    return ok ? 0 : -1;
}

static int op_create_pv(struct bench *b, int i)
{
    char name[64];
    snprintf(name, sizeof(name), "pvc-floor-%08d", i);
    if (kobj_set_str(kobj_meta(b->pv), "name", name) < 0)
        return -1;
    kube_resp r = {.skip_body = true};
    return check("create PV", i, kube_create(b->kc, PVS, b->pv, &r), &r, 201);
}

static int op_patch_pv(struct bench *b, int i)
{
    char path[96];
    snprintf(path, sizeof(path), PVS "/pvc-floor-%08d", i);
    kube_resp r = {.skip_body = true};
    return check("patch PV", i, kube_patch(b->kc, path, KUBE_PATCH_JSON, b->patch, &r), &r, 200);
}

static int op_delete_pv(struct bench *b, int i)
{
    char path[96];
    snprintf(path, sizeof(path), PVS "/pvc-floor-%08d", i);
    kube_resp r = {.skip_body = true};
    return check("delete PV", i, kube_delete(b->kc, path, NULL, &r), &r, 200);
}

static int op_post_event(struct bench *b, int i)
{
    /* client-go's naming: <object>.<hex unix nanos>, unique per call */
    char name[96];
    snprintf(name, sizeof(name), "floor-claim.%016llx", 0x17c0000000000000ULL + (unsigned)i);
    if (kobj_set_str(kobj_meta(b->event), "name", name) < 0)
        return -1;
    kube_resp r = {.skip_body = true};
    return check("post Event", i, kube_create(b->kc, EVENTS, b->event, &r), &r, 201);
}

static int op_csi_pair(struct bench *b, int i)
{
    char name[64];
    snprintf(name, sizeof(name), "pvc-floor-%08d", i);
    struct bench_create c;
    bench_create_init(&c, name, VOL_SIZE);
    Csi__V1__CreateVolumeResponse *resp = NULL;
    csi_status st;
    if (csi_create_volume(b->csi, &c.req, 60 * UTIL_SECOND, &resp, &st) < 0) {
        fprintf(stderr, "CreateVolume %s: %s: %s\n", name, csi_code_name(st.code), st.message);
        return -1;
    }
    if (!resp->volume || !resp->volume->volume_id || !resp->volume->volume_id[0] ||
        resp->volume->capacity_bytes != VOL_SIZE) {
        fprintf(stderr, "CreateVolume %s: wrong answer\n", name);
        csi__v1__create_volume_response__free_unpacked(resp, NULL);
        return -1;
    }
    Csi__V1__DeleteVolumeRequest del = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
    del.volume_id = resp->volume->volume_id;
    int rc = csi_delete_volume(b->csi, &del, 60 * UTIL_SECOND, &st);
    if (rc < 0)
        fprintf(stderr, "DeleteVolume %s: %s: %s\n", name, csi_code_name(st.code), st.message);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    return rc < 0 ? -1 : 0;
}

/* What the informer does with each event's JSON: parse it whole, keep the
 * object as compact text. */
static int op_json_event(struct bench *b, int i)
{
    json_object *ev = kobj_parse_text(b->watch_text, b->watch_len);
    if (!ev) {
        fprintf(stderr, "json_event #%d: %s\n", i, util_err_last());
        return -1;
    }
    size_t len = 0;
    char *text = kobj_to_text(kobj_obj(ev, "object"), &len);
    int ok = text && len > 1000;
    if (!ok)
        fprintf(stderr, "json_event #%d: object serialized to %zu bytes\n", i, len);
    free(text);
    json_object_put(ev);
    return ok ? 0 : -1;
}

/* Runs op for i in [0, warmup) untimed, then [warmup, warmup + n) timed. */
static int run_loop(struct bench *b, const char *name, op_fn op, int warmup, int n,
                    struct result *out)
{
    for (int i = 0; i < warmup; i++)
        if (op(b, i) < 0)
            return -1;
    struct sample s0 = sample_now();
    for (int i = warmup; i < warmup + n; i++)
        if (op(b, i) < 0)
            return -1;
    struct sample s1 = sample_now();
    out->thread_us = (double)(s1.thread_cpu - s0.thread_cpu) / 1e3 / n;
    out->proc_us = (double)(s1.proc_cpu - s0.proc_cpu) / 1e3 / n;
    out->wall_us = (double)(s1.wall - s0.wall) / 1e3 / n;
    printf("%-18s %6d ops: CPU %7.1f us/op (thread), %7.1f us/op (process), wall %7.1f us/op\n",
           name, n, out->thread_us, out->proc_us, out->wall_us);
    fflush(stdout);
    return 0;
}

/* The provisioner's PV (ctrl_volumes.c): what is written for one claim. */
static const char PV_TEXT[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{"
    "\"name\":\"pvc-floor-template\",\"annotations\":{"
    "\"pv.kubernetes.io/provisioned-by\":\"" DRIVER "\","
    "\"volume.kubernetes.io/provisioner-deletion-secret-name\":\"\","
    "\"volume.kubernetes.io/provisioner-deletion-secret-namespace\":\"\"},"
    "\"finalizers\":[\"" FINALIZER "\"]},"
    "\"spec\":{\"capacity\":{\"storage\":\"1Gi\"},"
    "\"csi\":{\"driver\":\"" DRIVER "\",\"volumeHandle\":"
    "\"0e1b4a6c-5f4f-4c1d-9d7a-2a3f7c9b1e42\",\"fsType\":\"ext4\","
    "\"volumeAttributes\":{\"storage.kubernetes.io/csiProvisionerIdentity\":"
    "\"1712345678901-8081-" DRIVER "\",\"kind\":\"directory\",\"path\":"
    "\"/var/lib/csi-hostpath-data/0e1b4a6c-5f4f-4c1d-9d7a-2a3f7c9b1e42\"}},"
    "\"accessModes\":[\"ReadWriteOnce\"],"
    "\"claimRef\":{\"kind\":\"PersistentVolumeClaim\",\"namespace\":\"default\","
    "\"name\":\"floor-claim\",\"uid\":\"5b0c3a7e-1f2d-4e6a-8b9c-0d1e2f3a4b5c\","
    "\"apiVersion\":\"v1\",\"resourceVersion\":\"123456\"},"
    "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"bench\","
    "\"volumeMode\":\"Filesystem\"}}";

/* An Event as common/kube/events.c writes it for a claim. */
static const char EVENT_TEXT[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"Event\",\"metadata\":{"
    "\"name\":\"floor-claim.17c0000000000000\",\"namespace\":\"default\"},"
    "\"involvedObject\":{\"kind\":\"PersistentVolumeClaim\",\"namespace\":\"default\","
    "\"name\":\"floor-claim\",\"uid\":\"5b0c3a7e-1f2d-4e6a-8b9c-0d1e2f3a4b5c\","
    "\"apiVersion\":\"v1\",\"resourceVersion\":\"123456\"},"
    "\"reason\":\"ProvisioningSucceeded\","
    "\"message\":\"Successfully provisioned volume pvc-5b0c3a7e-1f2d-4e6a-8b9c-0d1e2f3a4b5c\","
    "\"source\":{\"component\":\"external-provisioner\",\"host\":\"csi-controller-0\"},"
    "\"firstTimestamp\":\"2024-04-05T10:11:12Z\",\"lastTimestamp\":\"2024-04-05T10:11:12Z\","
    "\"count\":1,\"type\":\"Normal\",\"reportingComponent\":\"external-provisioner\","
    "\"reportingInstance\":\"csi-controller-0\"}";

/* The PV as the API server sends it back in a watch event: the written
 * object plus server fields and status. */
static char *watch_event_text(void)
{
    json_object *obj = kobj_parse_text(PV_TEXT, sizeof(PV_TEXT) - 1);
    if (!obj)
        return NULL;
    json_object *meta = kobj_meta(obj);
    if (kobj_set_str(meta, "name", "pvc-5b0c3a7e-1f2d-4e6a-8b9c-0d1e2f3a4b5c") < 0 ||
        kobj_set_str(meta, "uid", "c3d4e5f6-a7b8-4c9d-8e0f-1a2b3c4d5e6f") < 0 ||
        kobj_set_str(meta, "resourceVersion", "1234567") < 0 ||
        kobj_set_str(meta, "creationTimestamp", "2024-04-05T10:11:12Z") < 0) {
        json_object_put(obj);
        return NULL;
    }
    json_object *status = json_object_new_object();
    json_object_object_add(status, "phase", json_object_new_string("Bound"));
    json_object_object_add(status, "lastPhaseTransitionTime",
                           json_object_new_string("2024-04-05T10:11:12Z"));
    if (kobj_set(obj, "status", status) < 0) {
        json_object_put(obj);
        return NULL;
    }
    json_object *ev = json_object_new_object();
    json_object_object_add(ev, "type", json_object_new_string("MODIFIED"));
    json_object_object_add(ev, "object", obj);
    char *text = kobj_to_text(ev, NULL);
    json_object_put(ev);
    return text;
}

struct counts {
    double csi_pairs, pv_creates, pv_patches, pv_deletes, events, intents, watch_events;
};

static void print_term(const char *what, double count, double per_op_us, double *sum_ms)
{
    double ms = count * per_op_us / 1e3;
    *sum_ms += ms;
    printf("  %-36s %5.2f x %7.1f us = %.4f ms\n", what, count, per_op_us, ms);
}

int main(int argc, char **argv)
{
    const char *kubeconfig = "", *endpoint = "";
    int n = 2000, warmup = 100;
    struct counts k = {1, 1, 1, 1, 1.66, 0.1, 9};
    util_flags *f = util_flags_new("bench_floor", "dev");
    util_flags_string(f, "kubeconfig", &kubeconfig, "kube-lite's kubeconfig (plain HTTP)");
    util_flags_string(f, "endpoint", &endpoint, "the CSI driver, unix:///path");
    util_flags_int(f, "n", &n, "timed iterations per loop");
    util_flags_int(f, "warmup", &warmup, "untimed iterations before each loop");
    util_flags_double(f, "csi-pairs", &k.csi_pairs, "CreateVolume+DeleteVolume pairs per volume");
    util_flags_double(f, "pv-creates", &k.pv_creates, "PV creates per volume");
    util_flags_double(f, "pv-patches", &k.pv_patches, "PV patches per volume");
    util_flags_double(f, "pv-deletes", &k.pv_deletes, "PV deletes per volume");
    util_flags_double(f, "events", &k.events, "Events posted per volume");
    util_flags_double(f, "intents", &k.intents, "intent-record writes per volume (patch cost)");
    util_flags_double(f, "watch-events", &k.watch_events, "watch events parsed per volume");
    util_flags_parse_or_exit(f, argc, argv);
    if (!kubeconfig[0] || !endpoint[0] || n <= 0 || warmup < 0) {
        fprintf(stderr, "bench_floor: --kubeconfig and --endpoint are required; --n > 0, "
                        "--warmup >= 0\n");
        util_flags_free(f);
        return 2;
    }

    struct bench b = {0};
    kube_config *cfg = NULL;
    int status = 1;
    if (kube_config_load(kubeconfig, NULL, false, &cfg) < 0) {
        fprintf(stderr, "kubeconfig: %s\n", util_err_last());
        goto out;
    }
    /* No client-side rate limit, no retries: a failed request is a failure. */
    kube_client_opts ko = {.qps = 0, .user_agent = "bench-floor/dev", .max_retries = -1};
    if (kube_client_new(cfg, &ko, &b.kc) < 0) {
        fprintf(stderr, "kube client: %s\n", util_err_last());
        goto out;
    }
    csi_conn_opts co = {.connect_timeout = 30 * UTIL_SECOND};
    if (csi_conn_new(endpoint, &co, &b.csi) < 0) {
        fprintf(stderr, "connect %s: %s\n", endpoint, util_err_last());
        goto out;
    }
    b.pv = kobj_parse_text(PV_TEXT, sizeof(PV_TEXT) - 1);
    b.event = kobj_parse_text(EVENT_TEXT, sizeof(EVENT_TEXT) - 1);
    b.patch = kobj_patch_remove_finalizer_at(0, FINALIZER);
    if (!b.pv || !b.event || !b.patch) {
        fprintf(stderr, "templates: %s\n", util_err_last());
        goto out;
    }
    b.watch_text = watch_event_text();
    if (!b.watch_text) {
        fprintf(stderr, "watch event template failed\n");
        goto out;
    }
    b.watch_len = strlen(b.watch_text);
    size_t pv_len = 0, ev_len = 0;
    free(kobj_to_text(b.pv, &pv_len));
    free(kobj_to_text(b.event, &ev_len));

    printf("kube-lite: %s (plain HTTP, one keep-alive connection); driver: %s\n",
           kube_config_server(cfg), endpoint);
    printf("one thread; %d timed iterations per loop after %d untimed\n", n, warmup);
    printf("PV %zu bytes, Event %zu bytes, watch event %zu bytes, patch %zu bytes\n", pv_len,
           ev_len, b.watch_len, strlen(b.patch));

    struct result create, patch, del, event, csi, json;
    /* The PV loops share names: each patches and deletes what the one before
     * created, warm-up PVs included. */
    if (run_loop(&b, "api_create_pv", op_create_pv, warmup, n, &create) < 0 ||
        run_loop(&b, "api_patch_pv", op_patch_pv, warmup, n, &patch) < 0 ||
        run_loop(&b, "api_delete_pv", op_delete_pv, warmup, n, &del) < 0 ||
        run_loop(&b, "api_post_event", op_post_event, warmup, n, &event) < 0 ||
        run_loop(&b, "csi_create_delete", op_csi_pair, warmup, n, &csi) < 0 ||
        run_loop(&b, "json_event", op_json_event, warmup, n, &json) < 0)
        goto out;
    printf("%-18s per call: CPU %7.1f us (thread), %7.1f us (process), wall %7.1f us\n", "csi",
           csi.thread_us / 2, csi.proc_us / 2, csi.wall_us / 2);

    printf("floor per provisioned + deleted volume (this thread's CPU; the servers' not "
           "counted):\n");
    double sum = 0;
    print_term("csi_create_delete (pairs)", k.csi_pairs, csi.thread_us, &sum);
    print_term("api_create_pv", k.pv_creates, create.thread_us, &sum);
    print_term("api_patch_pv", k.pv_patches, patch.thread_us, &sum);
    print_term("api_delete_pv", k.pv_deletes, del.thread_us, &sum);
    print_term("api_post_event", k.events, event.thread_us, &sum);
    print_term("intent-record writes (as api_patch)", k.intents, patch.thread_us, &sum);
    print_term("json_event (watch events)", k.watch_events, json.thread_us, &sum);
    printf("floor per provisioned + deleted volume: %.3f ms CPU (target 0.4 ms)\n", sum);
    /* The same sum with the process's CPU: what gRPC's and libcurl's own
     * threads add on top of the calling thread. */
    double psum = k.csi_pairs * csi.proc_us + k.pv_creates * create.proc_us +
                  (k.pv_patches + k.intents) * patch.proc_us + k.pv_deletes * del.proc_us +
                  k.events * event.proc_us + k.watch_events * json.proc_us;
    printf("floor with the whole process's CPU: %.3f ms (target 0.4 ms)\n", psum / 1e3);
    status = 0;
out:
    free(b.watch_text);
    free(b.patch);
    if (b.event)
        json_object_put(b.event);
    if (b.pv)
        json_object_put(b.pv);
    if (b.csi)
        csi_conn_free(b.csi);
    if (b.kc)
        kube_client_free(b.kc);
    if (cfg)
        kube_config_free(cfg);
    util_flags_free(f);
    return status;
}
