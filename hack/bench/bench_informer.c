/*
 * Informer cache cost and throughput, against a live kube-lite:
 *   - bytes of cache per PVC and per PV, with the default transform (drop
 *     managedFields) and with a sidecar-style slim transform;
 *   - watch events processed per second with 100,000 objects cached.
 *
 *   bench_informer <kube-lite binary> [objects]
 *
 * Prints one figure per line. kube-lite is started on a free loopback port
 * and killed on exit.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kube/kube.h"

static pid_t server;
static char kubeconfig[256];

static void kill_server(void)
{
    if (server > 0) {
        kill(server, SIGKILL);
        waitpid(server, NULL, 0);
    }
    unlink(kubeconfig);
}

static void die(const char *msg)
{
    fprintf(stderr, "bench_informer: %s\n", msg);
    exit(1);
}

static void start_server(const char *bin)
{
    snprintf(kubeconfig, sizeof(kubeconfig), "/tmp/bench-informer-%d.kubeconfig", getpid());
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    server = fork();
    if (server == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], STDOUT_FILENO);
        execl(bin, bin, "--listen", "127.0.0.1:0", "--write-kubeconfig", kubeconfig,
              "--controllers=", "--history=1000000", (char *)NULL);
        _exit(127);
    }
    atexit(kill_server);
    close(p[1]);
    char line[256] = {0};
    size_t len = 0;
    while (len < sizeof(line) - 1 && !strchr(line, '\n')) {
        ssize_t n = read(p[0], line + len, sizeof(line) - 1 - len);
        if (n <= 0)
            die("kube-lite did not start");
        len += (size_t)n;
    }
    close(p[0]);
}

struct writer {
    kube_client *c;
    int from, to;
    bool pv;
    int failures;
};

static void *write_objects(void *arg)
{
    struct writer *w = arg;
    char body[2048];
    for (int i = w->from; i < w->to; i++) {
        kube_resp r = {0};
        if (w->pv)
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{\"name\":"
                     "\"pvc-%08d-1111-2222-3333-444455556666\",\"annotations\":{\"pv.kubernetes.io/"
                     "provisioned-by\":\"hostpath.csi.example.com\",\"volume.kubernetes.io/"
                     "provisioner-deletion-secret-name\":\"\",\"volume.kubernetes.io/"
                     "provisioner-deletion-secret-namespace\":\"\"},\"finalizers\":[\"external-"
                     "provisioner.volume.kubernetes.io/finalizer\"]},\"spec\":{\"capacity\":{"
                     "\"storage\":\"1Gi\"},\"accessModes\":[\"ReadWriteOnce\"],"
                     "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"fast\","
                     "\"volumeMode\":\"Filesystem\",\"claimRef\":{\"kind\":"
                     "\"PersistentVolumeClaim\",\"namespace\":\"default\",\"name\":\"claim-%08d\","
                     "\"uid\":\"%08d-1111-2222-3333-444455556666\",\"apiVersion\":\"v1\","
                     "\"resourceVersion\":\"12345\"},\"csi\":{\"driver\":\"hostpath.csi.example."
                     "com\",\"volumeHandle\":\"vol-%08d-1111-2222-3333-444455556666\","
                     "\"fsType\":\"ext4\",\"volumeAttributes\":{\"storage.kubernetes.io/"
                     "csiProvisionerIdentity\":\"1700000000000-1234-hostpath.csi.example.com\"}}}}",
                     i, i, i, i);
        else
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
                     "\"name\":\"claim-%08d\",\"namespace\":\"default\",\"labels\":{\"app\":"
                     "\"bench\"},\"annotations\":{\"volume.kubernetes.io/storage-provisioner\":"
                     "\"hostpath.csi.example.com\",\"volume.beta.kubernetes.io/storage-"
                     "provisioner\":\"hostpath.csi.example.com\",\"kubectl.kubernetes.io/last-"
                     "applied-configuration\":\"{\\\"apiVersion\\\":\\\"v1\\\",\\\"kind\\\":"
                     "\\\"PersistentVolumeClaim\\\"}\"}},\"spec\":{\"accessModes\":["
                     "\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}},"
                     "\"storageClassName\":\"fast\",\"volumeMode\":\"Filesystem\"}}",
                     i);
        const char *coll = w->pv ? "/api/v1/persistentvolumes"
                                 : "/api/v1/namespaces/default/persistentvolumeclaims";
        if (kube_request(w->c, "POST", coll, "application/json", body, &r) < 0)
            w->failures++;
        kube_resp_clear(&r);
    }
    return NULL;
}

static void fill(kube_client *c, int n, bool pv)
{
    enum { T = 8 };
    pthread_t th[T];
    struct writer w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (struct writer){c, n * i / T, n * (i + 1) / T, pv, 0};
        pthread_create(&th[i], NULL, write_objects, &w[i]);
    }
    int failures = 0;
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        failures += w[i].failures;
    }
    if (failures)
        die("object creation failed");
}

/* What a provisioner keeps of a PV: identity, annotations it reads,
 * finalizers, the CSI source, claimRef and phase. */
static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *meta = NULL, *v = NULL;
    if (json_object_object_get_ex(obj, "metadata", &meta)) {
        json_object_object_del(meta, "managedFields");
        json_object_object_del(meta, "creationTimestamp");
        json_object *ann = NULL;
        if (json_object_object_get_ex(meta, "annotations", &ann))
            json_object_object_del(ann, "kubectl.kubernetes.io/last-applied-configuration");
    }
    if (json_object_object_get_ex(obj, "spec", &v)) {
        json_object *csi = NULL;
        if (json_object_object_get_ex(v, "csi", &csi))
            json_object_object_del(csi, "volumeAttributes");
        json_object *ref = NULL;
        if (json_object_object_get_ex(v, "claimRef", &ref)) {
            json_object_object_del(ref, "apiVersion");
            json_object_object_del(ref, "kind");
            json_object_object_del(ref, "resourceVersion");
        }
    }
}

static double cache_bytes(kube_client *c, const kube_resource *res, bool slimmed, int n)
{
    kube_informer_opts o = {.res = res, .transform = slimmed ? slim : NULL};
    kube_informer *inf = NULL;
    if (kube_informer_new(c, &o, &inf) < 0 || kube_informer_start(inf) < 0 ||
        kube_informer_wait_for_sync(inf, 120 * UTIL_SECOND) < 0)
        die("informer did not sync");
    if ((int)kube_informer_count(inf) != n)
        die("informer count mismatch");
    double per = (double)kube_informer_bytes(inf) / n;
    kube_informer_free(inf);
    return per;
}

static atomic_int events;

struct patcher {
    kube_client *c;
    int from, to;
};

/* Labels PVs [from, to): one MODIFIED event each. */
static void *patch_objects(void *arg)
{
    struct patcher *p = arg;
    for (int i = p->from; i < p->to; i++) {
        char path[128], patch[64];
        snprintf(path, sizeof(path),
                 "/api/v1/persistentvolumes/pvc-%08d-1111-2222-3333-444455556666", i);
        snprintf(patch, sizeof(patch), "{\"metadata\":{\"labels\":{\"n\":\"%d\"}}}", i);
        kube_resp r = {0};
        kube_patch(p->c, path, KUBE_PATCH_MERGE, patch, &r);
        kube_resp_clear(&r);
    }
    return NULL;
}

static void count_update(void *ud, json_object *old, json_object *obj)
{
    (void)ud;
    (void)old;
    (void)obj;
    atomic_fetch_add(&events, 1);
}

int main(int argc, char **argv)
{
    if (argc < 2)
        die("usage: bench_informer <kube-lite> [objects]");
    int n = argc > 2 ? atoi(argv[2]) : 100000;
    start_server(argv[1]);
    kube_config *cfg = NULL;
    kube_client *c = NULL;
    if (kube_config_from_file(kubeconfig, NULL, &cfg) < 0 ||
        kube_client_new(cfg, &(kube_client_opts){.user_agent = "bench_informer/1"}, &c) < 0)
        die(util_err_last());
    fill(c, n, false);
    fill(c, n, true);
    printf("cache bytes per PVC: %.0f (default transform), %.0f (slim transform)\n",
           cache_bytes(c, &KUBE_PVC, false, n), cache_bytes(c, &KUBE_PVC, true, n));
    printf("cache bytes per PV: %.0f (default transform), %.0f (slim transform)\n",
           cache_bytes(c, &KUBE_PV, false, n), cache_bytes(c, &KUBE_PV, true, n));

    /* Events per second with n PVs cached: 8 writers label PVs once each. */
    kube_informer_opts o = {.res = &KUBE_PV, .handlers = {.on_update = count_update}};
    kube_informer *inf = NULL;
    if (kube_informer_new(c, &o, &inf) < 0 || kube_informer_start(inf) < 0 ||
        kube_informer_wait_for_sync(inf, 120 * UTIL_SECOND) < 0)
        die("informer did not sync");
    int updates = n < 40000 ? n : 40000;
    enum { P = 8 };
    pthread_t th[P];
    struct patcher pw[P];
    util_duration t0 = util_now_mono();
    for (int i = 0; i < P; i++) {
        pw[i] = (struct patcher){c, updates * i / P, updates * (i + 1) / P};
        pthread_create(&th[i], NULL, patch_objects, &pw[i]);
    }
    for (int i = 0; i < P; i++)
        pthread_join(th[i], NULL);
    util_duration sent = util_now_mono();
    while (atomic_load(&events) < updates && util_now_mono() - sent < 60 * UTIL_SECOND)
        util_sleep(UTIL_MS);
    util_duration t1 = util_now_mono();
    printf("watch events processed with %d PVs cached: %d in %.2f s = %.0f events/s (the "
           "writer's own rate bounds it: %.0f patches/s)\n",
           n, atomic_load(&events), (double)(t1 - t0) / UTIL_SECOND,
           atomic_load(&events) / ((double)(t1 - t0) / UTIL_SECOND),
           updates / ((double)(sent - t0) / UTIL_SECOND));
    kube_informer_free(inf);
    kube_client_free(c);
    kube_config_free(cfg);
    return 0;
}
