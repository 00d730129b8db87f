/*
 * Benchmark of kube-lite, driven over HTTP like its real clients. Every
 * measurement runs against a fresh kube-lite (loopback, free port,
 * --controllers="") that this program spawns and always kills, and prints
 * one figure per line next to its target:
 *   start time (spawn to ready line, and to the first 200 on /healthz)
 *   creates/s and gets/s of PVCs from 8 keep-alive client threads
 *   watch delivery latency from a paced writer to 100 watch streams
 *   RSS with 100,000 PVCs + 100,000 PVs of ~1 KB each
 * Every answer is checked; any failure makes the exit status 1.
 *
 * Usage: bench_kube_lite <kube-lite> [--only=start,rw,watch,rss] [--threads=8]
 *        [--ops=40000] [--watchers=100] [--events=1000] [--objects=100000]
 *        [--server-arg=ARG]...
 * Built and run by hack/bench/run-kube-lite-bench.sh.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>

#define MAX_SERVER_ARGS 16
#define NS_PER_MS       1000000.0

static struct {
    const char *bin;
    const char *only;
    int threads;
    int ops;
    int watchers;
    int events;
    int objects;
    const char *server_args[MAX_SERVER_ARGS];
    int n_server_args;
} cfg = {.threads = 8, .ops = 40000, .watchers = 100, .events = 1000, .objects = 100000};

static int failures; /* checks that failed, over all measurements */

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* ---- the kube-lite process -------------------------------------------------------- */

/* The running server, killed by the atexit and signal handlers whatever happens. */
static volatile pid_t child_pid;
static char child_log[64]; /* its stderr, shown when something fails */

static void kill_child(void)
{
    pid_t pid = child_pid;
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        child_pid = 0;
    }
    if (child_log[0])
        unlink(child_log);
}

static void on_signal(int sig)
{
    pid_t pid = child_pid;
    if (pid > 0)
        kill(pid, SIGKILL);
    if (child_log[0])
        unlink(child_log);
    _exit(128 + sig);
}

static void show_child_log(void)
{
    FILE *f = child_log[0] ? fopen(child_log, "r") : NULL;
    if (!f)
        return;
    char buf[2048];
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof(buf) - 1 ? size - (long)sizeof(buf) + 1 : 0, SEEK_SET);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    if (n)
        fprintf(stderr, "--- kube-lite stderr (tail) ---\n%s--- end ---\n", buf);
}

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_kube_lite: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    show_child_log();
    exit(1); /* the atexit handler kills kube-lite */
}

struct server {
    pid_t pid;
    char url[64];
    double ready_ms;   /* spawn to the ready line */
    double healthz_ms; /* spawn to the first 200 on /healthz */
};

static long http_get_code(CURL *h, const char *url);

static void server_start(struct server *s)
{
    memset(s, 0, sizeof(*s));
    if (!child_log[0])
        snprintf(child_log, sizeof(child_log), "/tmp/kube-lite-bench.%d.log", (int)getpid());
    int logfd = open(child_log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (logfd < 0)
        die("cannot create %s: %s", child_log, strerror(errno));
    int p[2];
    if (pipe2(p, O_CLOEXEC) != 0)
        die("pipe: %s", strerror(errno));
    const char *argv[MAX_SERVER_ARGS + 4];
    int argc = 0;
    argv[argc++] = cfg.bin;
    argv[argc++] = "--listen=127.0.0.1:0";
    argv[argc++] = "--controllers=";
    for (int i = 0; i < cfg.n_server_args; i++)
        argv[argc++] = cfg.server_args[i];
    argv[argc] = NULL;

    int64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid == 0) {
        /* Dies with the benchmark even if it is killed with SIGKILL. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(p[1], STDOUT_FILENO);
        dup2(logfd, STDERR_FILENO);
        execv(cfg.bin, (char *const *)argv);
        _exit(127);
    }
    child_pid = pid;
    s->pid = pid;
    close(p[1]);
    close(logfd);

    char line[256] = {0};
    size_t len = 0;
    while (len < sizeof(line) - 1 && !memchr(line, '\n', len)) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int rc = poll(&pfd, 1, 10000);
        if (rc == 0)
            die("kube-lite printed no ready line within 10 s");
        if (rc < 0 && errno == EINTR)
            continue;
        ssize_t n = read(p[0], line + len, sizeof(line) - 1 - len);
        if (n <= 0)
            die("kube-lite exited before it was ready");
        len += (size_t)n;
    }
    s->ready_ms = (double)(now_ns() - t0) / NS_PER_MS;
    close(p[0]); /* kube-lite writes nothing more to stdout */
    line[len] = '\0';
    int port = 0;
    if (sscanf(line, "kube-lite: serving on http://127.0.0.1:%d", &port) != 1 || port <= 0)
        die("unexpected ready line: %s", line);
    snprintf(s->url, sizeof(s->url), "http://127.0.0.1:%d", port);

    char url[128];
    snprintf(url, sizeof(url), "%s/healthz", s->url);
    CURL *h = curl_easy_init();
    for (int i = 0;; i++) {
        if (http_get_code(h, url) == 200)
            break;
        if (i == 1000)
            die("GET /healthz never answered 200");
        usleep(1000);
    }
    s->healthz_ms = (double)(now_ns() - t0) / NS_PER_MS;
    curl_easy_cleanup(h);
}

/* SIGTERM, then SIGKILL after 10 s; a crash or a nonzero exit is a failure. */
static double server_stop(struct server *s)
{
    int64_t t0 = now_ns();
    kill(s->pid, SIGTERM);
    int status = 0;
    for (;;) {
        pid_t r = waitpid(s->pid, &status, WNOHANG);
        if (r == s->pid)
            break;
        if (now_ns() - t0 > (int64_t)10000 * 1000000) {
            fprintf(stderr, "kube-lite did not stop within 10 s of SIGTERM; killing it\n");
            kill(s->pid, SIGKILL);
            waitpid(s->pid, &status, 0);
            failures++;
            break;
        }
        usleep(1000);
    }
    child_pid = 0;
    double ms = (double)(now_ns() - t0) / NS_PER_MS;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        if (WIFSIGNALED(status))
            fprintf(stderr, "kube-lite died of signal %d\n", WTERMSIG(status));
        else
            fprintf(stderr, "kube-lite exited with status %d\n", WEXITSTATUS(status));
        show_child_log();
        failures++;
    }
    return ms;
}

static long rss_kib(pid_t pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        die("cannot read %s: %s", path, strerror(errno));
    long kib = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, flen) == 0 && line[flen] == ':')
            kib = strtol(line + flen + 1, NULL, 10);
    fclose(f);
    if (kib < 0)
        die("no %s in %s", field, path);
    return kib;
}

/* ---- HTTP ---------------------------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
    if (!b->p || b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            abort();
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

/* The body's first line, cut to 300 bytes, for error messages. */
static const char *first_line(struct buf *b)
{
    if (!b->p)
        return "";
    size_t n = strcspn(b->p, "\n");
    b->p[n < 300 ? n : 300] = '\0';
    return b->p;
}

static size_t to_buf(char *p, size_t size, size_t n, void *ud)
{
    buf_add(ud, p, size * n);
    return size * n;
}

/* One client connection: an easy handle reused for every request, so the
 * TCP connection stays open (keep-alive) as client-go's does. */
struct client {
    CURL *h;
    struct curl_slist *headers;
    struct buf body;
    long connects; /* TCP connections opened: more than one means no keep-alive */
};

static void client_init(struct client *c)
{
    memset(c, 0, sizeof(*c));
    c->h = curl_easy_init();
    if (!c->h)
        die("curl_easy_init failed");
    /* curl sends "Expect: 100-continue" for bodies over 1 KiB: a round trip
     * that no Kubernetes client makes. */
    c->headers = curl_slist_append(c->headers, "Content-Type: application/json");
    c->headers = curl_slist_append(c->headers, "Accept: application/json");
    c->headers = curl_slist_append(c->headers, "Expect:");
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, to_buf);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->body);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 30L);
}

static void client_free(struct client *c)
{
    curl_easy_cleanup(c->h);
    curl_slist_free_all(c->headers);
    free(c->body.p);
}

/* The HTTP code, or -1 when no answer came (c->body then holds the error). */
static long client_do(struct client *c, const char *url, const char *body, size_t body_len)
{
    c->body.len = 0;
    if (c->body.p)
        c->body.p[0] = '\0';
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    if (body) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)body_len);
    } else {
        curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
    }
    CURLcode rc = curl_easy_perform(c->h);
    if (rc != CURLE_OK) {
        const char *msg = curl_easy_strerror(rc);
        c->body.len = 0;
        buf_add(&c->body, msg, strlen(msg));
        return -1;
    }
    long code = 0, connects = 0;
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_getinfo(c->h, CURLINFO_NUM_CONNECTS, &connects);
    c->connects += connects;
    return code;
}

static size_t discard(char *p, size_t size, size_t n, void *ud)
{
    (void)p;
    (void)ud;
    return size * n;
}

static long http_get_code(CURL *h, const char *url)
{
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, discard);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 5L);
    if (curl_easy_perform(h) != CURLE_OK)
        return -1;
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

/* ---- objects ----------------------------------------------------------------------- */

#define PVCS "/api/v1/namespaces/default/persistentvolumeclaims"
#define PVS  "/api/v1/persistentvolumes"

/* A claim as a user writes it. */
static int small_pvc(char *out, size_t len, int i)
{
    return snprintf(
        out, len,
        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
        "\"name\":\"bench-%07d\",\"namespace\":\"default\",\"labels\":{\"app\":"
        "\"bench\"}},\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{"
        "\"requests\":{\"storage\":\"1Gi\"}},\"storageClassName\":\"csi-hostpath-sc\"}}",
        i);
}

/* A uid-like string derived from i, so objects differ like real ones. */
static void fake_uid(char out[37], uint32_t i, uint32_t salt)
{
    uint64_t x = ((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) ^ salt;
    snprintf(out, 37, "%08x-%04x-4%03x-8%03x-%012" PRIx64, (uint32_t)(x >> 32),
             (unsigned)(x & 0xffff), (unsigned)((x >> 16) & 0xfff), (unsigned)(i & 0xfff),
             (uint64_t)((x * 31) & 0xffffffffffffu));
}

/* A claim bound to a provisioned volume, as it sits in a real cluster. */
static int big_pvc(char *out, size_t len, int i)
{
    char uid[37];
    fake_uid(uid, (uint32_t)i, 0x5eed);
    return snprintf(
        out, len,
        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
        "\"name\":\"data-statefulset-%07d\",\"namespace\":\"default\",\"labels\":{"
        "\"app.kubernetes.io/name\":\"database\",\"app.kubernetes.io/instance\":\"db-%d\"},"
        "\"annotations\":{\"pv.kubernetes.io/bind-completed\":\"yes\","
        "\"pv.kubernetes.io/bound-by-controller\":\"yes\","
        "\"volume.beta.kubernetes.io/storage-provisioner\":\"hostpath.csi.k8s.io\","
        "\"volume.kubernetes.io/storage-provisioner\":\"hostpath.csi.k8s.io\","
        "\"volume.kubernetes.io/selected-node\":\"node-%d.cluster.example.com\"},"
        "\"finalizers\":[\"kubernetes.io/pvc-protection\"]},"
        "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{"
        "\"storage\":\"10Gi\"}},\"storageClassName\":\"csi-hostpath-sc\","
        "\"volumeMode\":\"Filesystem\",\"volumeName\":\"pvc-%s\"}}",
        i, i % 1000, i % 64, uid);
}

/* A volume the external-provisioner created for the claim of the same i. */
static int big_pv(char *out, size_t len, int i)
{
    char uid[37], handle[37];
    fake_uid(uid, (uint32_t)i, 0x5eed);
    fake_uid(handle, (uint32_t)i, 0xbeef);
    return snprintf(
        out, len,
        "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{"
        "\"name\":\"pvc-%s\",\"annotations\":{"
        "\"pv.kubernetes.io/provisioned-by\":\"hostpath.csi.k8s.io\","
        "\"volume.kubernetes.io/provisioner-deletion-secret-name\":\"\","
        "\"volume.kubernetes.io/provisioner-deletion-secret-namespace\":\"\"},"
        "\"finalizers\":[\"external-provisioner.volume.kubernetes.io/finalizer\","
        "\"kubernetes.io/pv-protection\"]},"
        "\"spec\":{\"capacity\":{\"storage\":\"10Gi\"},\"accessModes\":[\"ReadWriteOnce\"],"
        "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"csi-hostpath-sc\","
        "\"volumeMode\":\"Filesystem\",\"claimRef\":{\"kind\":\"PersistentVolumeClaim\","
        "\"namespace\":\"default\",\"name\":\"data-statefulset-%07d\",\"uid\":\"%s\","
        "\"apiVersion\":\"v1\",\"resourceVersion\":\"%d\"},"
        "\"csi\":{\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"%s\","
        "\"fsType\":\"ext4\",\"volumeAttributes\":{"
        "\"storage.kubernetes.io/"
        "csiProvisionerIdentity\":\"1700000000000-8081-hostpath.csi.k8s.io\","
        "\"kind\":\"filesystem\"}},"
        "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{"
        "\"key\":\"topology.hostpath.csi/node\",\"operator\":\"In\",\"values\":["
        "\"node-%d.cluster.example.com\"]}]}]}}}}",
        uid, i, uid, 1000 + i, handle, i % 64);
}

/* ---- parallel requests ------------------------------------------------------------------ */

enum op { OP_CREATE_SMALL_PVC, OP_GET_SMALL_PVC, OP_CREATE_BIG_PVC, OP_CREATE_BIG_PV };

struct par {
    const struct server *srv;
    enum op op;
    int n;
    atomic_int next;
    atomic_int failed;
    atomic_long connects; /* TCP connections the clients opened */
};

static void *par_worker(void *arg)
{
    struct par *p = arg;
    struct client c;
    client_init(&c);
    char url[256], body[4096];
    long expect = p->op == OP_GET_SMALL_PVC ? 200 : 201;
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        int blen = 0;
        char want[64] = "";
        switch (p->op) {
        case OP_CREATE_SMALL_PVC:
            snprintf(url, sizeof(url), "%s" PVCS, p->srv->url);
            blen = small_pvc(body, sizeof(body), i);
            break;
        case OP_GET_SMALL_PVC:
            snprintf(url, sizeof(url), "%s" PVCS "/bench-%07d", p->srv->url, i);
            snprintf(want, sizeof(want), "\"name\":\"bench-%07d\"", i);
            break;
        case OP_CREATE_BIG_PVC:
            snprintf(url, sizeof(url), "%s" PVCS, p->srv->url);
            blen = big_pvc(body, sizeof(body), i);
            break;
        case OP_CREATE_BIG_PV:
            snprintf(url, sizeof(url), "%s" PVS, p->srv->url);
            blen = big_pv(body, sizeof(body), i);
            break;
        }
        if (blen < 0 || (size_t)blen >= sizeof(body))
            die("object %d does not fit the buffer", i);
        long code = client_do(&c, url, blen ? body : NULL, (size_t)blen);
        /* A GET must answer the object asked for, not just any 200. */
        bool ok = code == expect && (!want[0] || strstr(c.body.p, want));
        if (!ok && atomic_fetch_add(&p->failed, 1) < 5)
            fprintf(stderr, "request %d: %s %s: %ld %s\n", i, blen ? "POST" : "GET", url, code,
                    first_line(&c.body));
    }
    atomic_fetch_add(&p->connects, c.connects);
    client_free(&c);
    return NULL;
}

/* Runs n requests of one kind from cfg.threads threads; returns requests/s. */
static double run_parallel(const struct server *srv, enum op op, int n, int *failed, long *conns)
{
    struct par p = {.srv = srv, .op = op, .n = n};
    pthread_t th[64];
    int nt = cfg.threads < 64 ? cfg.threads : 64;
    int64_t t0 = now_ns();
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[i], NULL, par_worker, &p) != 0)
            die("pthread_create failed");
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(now_ns() - t0) / 1e9;
    *failed = atomic_load(&p.failed);
    *conns = atomic_load(&p.connects);
    failures += *failed;
    return (double)n / secs;
}

/* ---- 1. start time ---------------------------------------------------------------------- */

static void bench_start(void)
{
    enum { STARTS = 5 };
    double ready = 0, healthz = 0, stop = 0, rmin = 1e9, rmax = 0;
    for (int i = 0; i < STARTS; i++) {
        struct server s;
        server_start(&s);
        ready += s.ready_ms;
        healthz += s.healthz_ms;
        rmin = s.ready_ms < rmin ? s.ready_ms : rmin;
        rmax = s.ready_ms > rmax ? s.ready_ms : rmax;
        stop += server_stop(&s);
    }
    printf("kube-lite start (spawn to ready line): %.1f ms (target < 50 ms; mean of %d, min %.1f, "
           "max %.1f)\n",
           ready / STARTS, STARTS, rmin, rmax);
    printf("kube-lite start (spawn to first GET /healthz 200): %.1f ms (target < 50 ms)\n",
           healthz / STARTS);
    printf("kube-lite stop (SIGTERM to exit, empty store): %.1f ms\n", stop / STARTS);
    fflush(stdout);
}

/* ---- 2. creates/s and gets/s ------------------------------------------------------------ */

static void bench_rw(void)
{
    struct server s;
    server_start(&s);
    int failed = 0;
    long conns = 0;
    double cps = run_parallel(&s, OP_CREATE_SMALL_PVC, cfg.ops, &failed, &conns);
    printf("creates/s (%d threads, keep-alive): %.0f (target >= 5000 on 2 cores; %d PVC creates, "
           "%d failures, %ld connections)\n",
           cfg.threads, cps, cfg.ops, failed, conns);
    fflush(stdout);
    double gps = run_parallel(&s, OP_GET_SMALL_PVC, cfg.ops, &failed, &conns);
    printf("gets/s (%d threads, keep-alive): %.0f (%d PVC gets, %d failures, %ld connections)\n",
           cfg.threads, gps, cfg.ops, failed, conns);
    fflush(stdout);
    server_stop(&s);
}

/* ---- 3. watch delivery latency --------------------------------------------------------------- */

#define SENT_KEY "\"bench-sent-ns\":\""

struct watcher {
    struct watch_bench *wb;
    CURL *h;
    struct buf line; /* a partial event line */
    int got;         /* ADDED events with a send time */
    int bad;         /* any other line */
};

struct watch_bench {
    struct watcher *w;
    int64_t *lat; /* receive - send, ns, one per delivery */
    size_t n_lat, cap_lat;
    atomic_bool stop;
};

static void watch_line(struct watcher *w, const char *line, size_t len, int64_t now)
{
    struct watch_bench *wb = w->wb;
    const char *k = memmem(line, len, SENT_KEY, sizeof(SENT_KEY) - 1);
    if (strncmp(line, "{\"type\":\"ADDED\"", 15) != 0 || !k) {
        if (w->bad++ < 3)
            fprintf(stderr, "watch: unexpected event: %.200s\n", line);
        return;
    }
    int64_t sent = strtoll(k + sizeof(SENT_KEY) - 1, NULL, 10);
    if (wb->n_lat < wb->cap_lat)
        wb->lat[wb->n_lat++] = now - sent;
    w->got++;
}

/* Timestamps each chunk on arrival, before any parsing: a line's receive
 * time is when its last byte came in. */
static size_t watch_write(char *p, size_t size, size_t n, void *ud)
{
    int64_t now = now_ns();
    struct watcher *w = ud;
    size_t len = size * n;
    const char *end = p + len;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        if (!nl) {
            buf_add(&w->line, p, (size_t)(end - p));
            break;
        }
        if (w->line.len) {
            buf_add(&w->line, p, (size_t)(nl - p));
            watch_line(w, w->line.p, w->line.len, now);
            w->line.len = 0;
        } else if (nl > p) {
            watch_line(w, p, (size_t)(nl - p), now);
        }
        p = (char *)nl + 1;
    }
    return len;
}

struct watch_args {
    struct watch_bench *wb;
    const char *url;
    atomic_llong deadline_ns; /* set by the writer when it is done; 0 before */
};

/* One thread drives every watch stream through curl multi. */
static void *watch_main(void *arg)
{
    struct watch_args *a = arg;
    struct watch_bench *wb = a->wb;
    CURLM *m = curl_multi_init();
    for (int i = 0; i < cfg.watchers; i++) {
        struct watcher *w = &wb->w[i];
        w->wb = wb;
        w->h = curl_easy_init();
        curl_easy_setopt(w->h, CURLOPT_URL, a->url);
        curl_easy_setopt(w->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(w->h, CURLOPT_TCP_NODELAY, 1L);
        curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, watch_write);
        curl_easy_setopt(w->h, CURLOPT_WRITEDATA, w);
        curl_multi_add_handle(m, w->h);
    }
    size_t want = (size_t)cfg.watchers * (size_t)cfg.events;
    int ended = 0;
    while (!atomic_load(&wb->stop) && wb->n_lat < want) {
        long long dl = atomic_load(&a->deadline_ns);
        if (dl && now_ns() > dl)
            break;
        int running = 0;
        curl_multi_perform(m, &running);
        int left = 0;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg == CURLMSG_DONE && ended++ < 3)
                fprintf(stderr, "watch: stream ended early: %s\n",
                        curl_easy_strerror(msg->data.result));
        }
        curl_multi_poll(m, NULL, 0, 20, NULL);
    }
    for (int i = 0; i < cfg.watchers; i++) {
        curl_multi_remove_handle(m, wb->w[i].h);
        curl_easy_cleanup(wb->w[i].h);
        free(wb->w[i].line.p);
    }
    curl_multi_cleanup(m);
    return NULL;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Nearest rank: the smallest value with at least q of the samples at or below it. */
static double pct_ms(const int64_t *v, size_t n, double q)
{
    if (!n)
        return 0;
    size_t r = (size_t)(q * (double)n + 0.999999);
    if (r < 1)
        r = 1;
    return (double)v[r - 1] / NS_PER_MS;
}

/* The watches registered so far, from kube-lite's request counter. */
static long watches_open(struct client *c, const struct server *s)
{
    char url[128];
    snprintf(url, sizeof(url), "%s/metrics", s->url);
    if (client_do(c, url, NULL, 0) != 200)
        return -1;
    const char *k = strstr(c->body.p, "{verb=\"watch\",resource=\"persistentvolumeclaims\","
                                      "code=\"200\"} ");
    return k ? strtol(strchr(k, '}') + 2, NULL, 10) : 0;
}

static void bench_watch(void)
{
    struct server s;
    server_start(&s);
    struct client c;
    client_init(&c);

    /* Watch from the current resourceVersion, as an informer does after its list. */
    char url[512];
    snprintf(url, sizeof(url), "%s" PVCS "?limit=1", s.url);
    long code = client_do(&c, url, NULL, 0);
    json_object *list = code == 200 ? json_tokener_parse(c.body.p) : NULL;
    json_object *meta = NULL, *rvo = NULL;
    if (!json_object_object_get_ex(list, "metadata", &meta) ||
        !json_object_object_get_ex(meta, "resourceVersion", &rvo))
        die("list PVCs: %ld %s", code, first_line(&c.body));
    char watch_url[512];
    snprintf(watch_url, sizeof(watch_url), "%s" PVCS "?watch=true&resourceVersion=%s", s.url,
             json_object_get_string(rvo));
    json_object_put(list);

    struct watch_bench wb = {0};
    wb.w = calloc((size_t)cfg.watchers, sizeof(*wb.w));
    wb.cap_lat = (size_t)cfg.watchers * (size_t)cfg.events;
    wb.lat = calloc(wb.cap_lat, sizeof(*wb.lat));
    if (!wb.w || !wb.lat)
        die("out of memory");
    struct watch_args a = {.wb = &wb, .url = watch_url};
    pthread_t th;
    if (pthread_create(&th, NULL, watch_main, &a) != 0)
        die("pthread_create failed");
    /* Writes start once every watch is registered in the store. */
    int64_t t0 = now_ns();
    while (watches_open(&c, &s) < cfg.watchers) {
        if (now_ns() - t0 > (int64_t)10000 * 1000000) {
            atomic_store(&wb.stop, true);
            pthread_join(th, NULL);
            die("only %ld of %d watches registered after 10 s", watches_open(&c, &s), cfg.watchers);
        }
        usleep(2000);
    }

    /* The writer: one create every 2 ms on absolute deadlines, so a slow
     * create does not stretch the schedule. */
    snprintf(url, sizeof(url), "%s" PVCS, s.url);
    int failed = 0;
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    int64_t w0 = now_ns();
    for (int i = 0; i < cfg.events; i++) {
        next.tv_nsec += 2000000;
        if (next.tv_nsec >= 1000000000) {
            next.tv_nsec -= 1000000000;
            next.tv_sec++;
        }
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &next, NULL);
        char body[1024];
        int64_t sent = now_ns();
        int blen = snprintf(body, sizeof(body),
                            "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\","
                            "\"metadata\":{\"name\":\"watched-%05d\",\"annotations\":{"
                            "\"bench-sent-ns\":\"%" PRId64 "\"}},\"spec\":{\"accessModes\":["
                            "\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":"
                            "\"1Gi\"}}}}",
                            i, sent);
        code = client_do(&c, url, body, (size_t)blen);
        if (code != 201 && failed++ < 5)
            fprintf(stderr, "watch writer: create %d: %ld %s\n", i, code, first_line(&c.body));
    }
    double write_s = (double)(now_ns() - w0) / 1e9;
    atomic_store(&a.deadline_ns, now_ns() + (int64_t)20000 * 1000000);
    pthread_join(th, NULL);

    size_t want = (size_t)cfg.watchers * (size_t)cfg.events;
    int bad = 0;
    for (int i = 0; i < cfg.watchers; i++)
        bad += wb.w[i].bad;
    qsort(wb.lat, wb.n_lat, sizeof(*wb.lat), cmp_i64);
    printf("watch delivery latency to %d watchers: p50 %.2f ms, p99 %.2f ms (target p99 < 10 ms; "
           "max %.2f ms; %zu/%zu delivered, %d bad lines, %d write failures, %.0f writes/s)\n",
           cfg.watchers, pct_ms(wb.lat, wb.n_lat, 0.50), pct_ms(wb.lat, wb.n_lat, 0.99),
           wb.n_lat ? (double)wb.lat[wb.n_lat - 1] / NS_PER_MS : 0.0, wb.n_lat, want, bad, failed,
           cfg.events / write_s);
    fflush(stdout);
    if (wb.n_lat != want)
        failures++;
    failures += bad + failed;
    free(wb.lat);
    free(wb.w);
    client_free(&c);
    server_stop(&s);
}

/* ---- 4. memory ------------------------------------------------------------------------------ */

static size_t stored_len(struct client *c, const char *url)
{
    long code = client_do(c, url, NULL, 0);
    if (code != 200) {
        fprintf(stderr, "GET %s: %ld %s\n", url, code, first_line(&c->body));
        failures++;
        return 0;
    }
    return c->body.len;
}

static void bench_rss(void)
{
    struct server s;
    server_start(&s);
    long base = rss_kib(s.pid, "VmRSS");
    int f1 = 0, f2 = 0;
    long conns = 0;
    double pvc_rate = run_parallel(&s, OP_CREATE_BIG_PVC, cfg.objects, &f1, &conns);
    double pv_rate = run_parallel(&s, OP_CREATE_BIG_PV, cfg.objects, &f2, &conns);
    long rss = rss_kib(s.pid, "VmRSS");
    long hwm = rss_kib(s.pid, "VmHWM");

    struct client c;
    client_init(&c);
    char url[256], uid[37];
    snprintf(url, sizeof(url), "%s" PVCS "/data-statefulset-%07d", s.url, 0);
    size_t pvc_len = stored_len(&c, url);
    fake_uid(uid, 0, 0x5eed);
    snprintf(url, sizeof(url), "%s" PVS "/pvc-%s", s.url, uid);
    size_t pv_len = stored_len(&c, url);
    client_free(&c);

    long n = 2L * cfg.objects;
    printf("creates/s of ~1 KB objects (%d threads): %.0f PVCs/s, %.0f PVs/s (%d failures)\n",
           cfg.threads, pvc_rate, pv_rate, f1 + f2);
    printf("RSS with %d PVCs + %d PVs: %.0f MiB (target < 1024 MiB at 200000 objects; peak %.0f "
           "MiB, empty server %.1f MiB)\n",
           cfg.objects, cfg.objects, (double)rss / 1024, (double)hwm / 1024, (double)base / 1024);
    printf("bytes per object: %.0f (RSS growth / %ld objects; stored JSON: PVC %zu bytes, PV %zu "
           "bytes)\n",
           (double)(rss - base) * 1024 / (double)n, n, pvc_len, pv_len);
    fflush(stdout);
    double stop_ms = server_stop(&s);
    printf("kube-lite stop (SIGTERM to exit, %ld objects): %.0f ms\n", n, stop_ms);
    fflush(stdout);
}

/* ---- main ---------------------------------------------------------------------------------- */

static bool wanted(const char *name)
{
    if (!cfg.only)
        return true;
    size_t n = strlen(name);
    for (const char *p = cfg.only; (p = strstr(p, name)); p += n)
        if ((p == cfg.only || p[-1] == ',') && (p[n] == ',' || p[n] == '\0'))
            return true;
    return false;
}

static int int_arg(const char *arg, const char *name, int *dst)
{
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0 || arg[n] != '=')
        return 0;
    char *end = NULL;
    long v = strtol(arg + n + 1, &end, 10);
    if (*end || v <= 0 || v > 10000000)
        die("%s: expected a positive number", arg);
    *dst = (int)v;
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: %s <kube-lite> [--only=start,rw,watch,rss] [--threads=8] [--ops=40000] "
                "[--watchers=100] [--events=1000] [--objects=100000] [--server-arg=ARG]...\n",
                argv[0]);
        return 2;
    }
    cfg.bin = argv[1];
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (int_arg(a, "--threads", &cfg.threads) || int_arg(a, "--ops", &cfg.ops) ||
            int_arg(a, "--watchers", &cfg.watchers) || int_arg(a, "--events", &cfg.events) ||
            int_arg(a, "--objects", &cfg.objects))
            continue;
        if (strncmp(a, "--only=", 7) == 0)
            cfg.only = a + 7;
        else if (strncmp(a, "--server-arg=", 13) == 0 && cfg.n_server_args < MAX_SERVER_ARGS)
            cfg.server_args[cfg.n_server_args++] = a + 13;
        else
            die("unknown argument %s", a);
    }
    if (access(cfg.bin, X_OK) != 0)
        die("%s: not an executable: %s", cfg.bin, strerror(errno));

    atexit(kill_child);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
    curl_global_init(CURL_GLOBAL_DEFAULT);

    if (wanted("start"))
        bench_start();
    if (wanted("rw"))
        bench_rw();
    if (wanted("watch"))
        bench_watch();
    if (wanted("rss"))
        bench_rss();

    curl_global_cleanup();
    if (failures) {
        fprintf(stderr, "bench_kube_lite: %d failures\n", failures);
        return 1;
    }
    return 0;
}
