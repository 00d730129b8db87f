/*
 * Benchmark helper of hack/bench/bench_attach.sh, which starts kube-lite,
 * the example driver and csi-attacher; this program talks to kube-lite
 * through common/kube (no client-side limit) and measures.
 *
 *   bench_attach setup --kubeconfig=F --count=N --state-dir=DIR
 *     Creates Nodes worker-1 and worker-2 with CSINodes (node ids node-1,
 *     node-2), N PVs pv-NNNNN (ReadWriteMany, handle vol-NNNNN) and writes
 *     DIR/state.json with the N volumes, for the driver started afterwards.
 *
 *   bench_attach run --kubeconfig=F --count=N --att-pid=PID --state-dir=DIR
 *                    --qps=Q --burst=B [--threads=8] [--timeout=1800]
 *     Phases, each started once kube-lite's request counters have been
 *     still for 2.5 s (so the attacher's token bucket is full again):
 *       1. first attach: N VolumeAttachments on worker-1 created at once
 *          (N POSTs from --threads threads), done when status.attached;
 *          then the attacher's idle memory with N attached;
 *       2. later attach: N more on worker-2 for the same PVs (their PV
 *          finalizer is there already); idle memory with 2N attached;
 *       3. detach: the worker-2 VolumeAttachments deleted, done when gone;
 *       4. last detach: the worker-1 ones deleted;
 *       5. the PVs deleted, done when gone (the attacher's PV finalizer).
 *     Latency per object is taken from one VolumeAttachment watch (and one
 *     PV watch), opened before the first create, on the monotonic clock as
 *     events arrive: ADDED -> first seen attached, and first seen with a
 *     deletionTimestamp -> DELETED. Requests come from kube-lite's /metrics,
 *     this program's own creates and deletes subtracted, split into object
 *     writes, Event writes and reads; the counts at the moment the last
 *     object was done give "the physical limit": with a token bucket of
 *     Q/s and B tokens, R requests take at least (R - B) / Q seconds, so N
 *     operations cannot go faster than N * Q / (R - B) per second. CPU
 *     seconds are utime + stime from /proc/PID/stat over the phase; memory
 *     is VmRSS, VmHWM (peak), RssAnon, and Private_Dirty from
 *     /proc/PID/smaps_rollup. Exits 1 when an operation did not complete or
 *     the driver is left with a publication; it asserts nothing about time.
 *     --audit-log=F --audit-user=NAME: the counts come from the real
 *     kube-apiserver's audit log F, the requests of user NAME (the
 *     attacher's token) alone, instead of kube-lite's /metrics (see
 *     bench_audit.h); the kubeconfig gives the server, CA and token.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>

#include "bench_audit.h"
#include "kobj/kobj.h"
#include "kube/kube.h"

#define VAS        "/apis/storage.k8s.io/v1/volumeattachments"
#define PVS        "/api/v1/persistentvolumes"
#define DRIVER     "hostpath.csi.example.com"
#define NS_PER_S   1e9
#define MAX_SERIES 256

static struct {
    const char *kubeconfig;
    const char *state_dir;
    int count;
    int threads;
    int att_pid;
    int timeout_s;
    double qps;
    int burst;
    const char *audit_log;  /* counts from this audit log instead of /metrics */
    const char *audit_user; /* ... of this caller (the attacher) */
} cfg = {.threads = 8, .timeout_s = 1800};

static kube_config *kcfg;
static kube_client *kc;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_attach: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* ---- the objects --------------------------------------------------------------------------- */

static int post(const char *collection, const char *body)
{
    kube_resp r = {0};
    int rc = kube_request(kc, "POST", collection, "application/json", body, &r);
    if (rc < 0)
        fprintf(stderr, "bench_attach: POST %s: %d %s\n", collection, r.code, r.message);
    kube_resp_clear(&r);
    return rc;
}

static int del(const char *path)
{
    kube_resp r = {0};
    int rc = kube_delete(kc, path, NULL, &r);
    if (rc < 0)
        fprintf(stderr, "bench_attach: DELETE %s: %d %s\n", path, r.code, r.message);
    kube_resp_clear(&r);
    return rc;
}

enum op { OP_PV, OP_VA_CREATE, OP_VA_DELETE, OP_PV_DELETE };

struct par {
    enum op op;
    int node; /* 1 or 2 */
    atomic_int next;
    atomic_int failed;
};

static void *par_worker(void *arg)
{
    struct par *p = arg;
    char body[1024], path[256];
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= cfg.count)
            break;
        int rc = 0;
        switch (p->op) {
        case OP_PV:
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{"
                     "\"name\":\"pv-%05d\"},\"spec\":{\"capacity\":{\"storage\":\"1Gi\"},"
                     "\"accessModes\":[\"ReadWriteMany\"],\"persistentVolumeReclaimPolicy\":"
                     "\"Retain\",\"volumeMode\":\"Filesystem\",\"csi\":{\"driver\":\"" DRIVER
                     "\",\"volumeHandle\":\"vol-%05d\",\"fsType\":\"ext4\"}}}",
                     i, i);
            rc = post(PVS, body);
            break;
        case OP_VA_CREATE:
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"VolumeAttachment\","
                     "\"metadata\":{\"name\":\"va-w%d-%05d\"},\"spec\":{\"attacher\":\"" DRIVER
                     "\",\"nodeName\":\"worker-%d\",\"source\":{\"persistentVolumeName\":"
                     "\"pv-%05d\"}}}",
                     p->node, i, p->node, i);
            rc = post(VAS, body);
            break;
        case OP_VA_DELETE:
            snprintf(path, sizeof(path), VAS "/va-w%d-%05d", p->node, i);
            rc = del(path);
            break;
        case OP_PV_DELETE:
            snprintf(path, sizeof(path), PVS "/pv-%05d", i);
            rc = del(path);
            break;
        }
        if (rc < 0)
            atomic_fetch_add(&p->failed, 1);
    }
    return NULL;
}

/* cfg.count requests from cfg.threads threads; the seconds taken. */
static double run_parallel(enum op op, int node, int *failed)
{
    struct par p = {.op = op, .node = node};
    pthread_t th[64];
    int nt = cfg.threads < 64 ? cfg.threads : 64;
    int64_t t0 = now_ns();
    for (int i = 0; i < nt; i++)
        if (pthread_create(&th[i], NULL, par_worker, &p) != 0)
            die("pthread_create failed");
    for (int i = 0; i < nt; i++)
        pthread_join(th[i], NULL);
    *failed = atomic_load(&p.failed);
    return (double)(now_ns() - t0) / NS_PER_S;
}

/* ---- kube-lite's /metrics ------------------------------------------------------------------ */

struct series {
    char verb[32], resource[96];
    double n;
};

struct metrics {
    struct series s[MAX_SERIES];
    int n;
};

struct text {
    char *p;
    size_t len;
};

static size_t to_text(char *p, size_t size, size_t n, void *ud)
{
    struct text *t = ud;
    char *np = realloc(t->p, t->len + size * n + 1);
    if (!np)
        return 0;
    t->p = np;
    memcpy(t->p + t->len, p, size * n);
    t->len += size * n;
    t->p[t->len] = '\0';
    return size * n;
}

/* The real API server: the attacher's requests from the audit log,
 * accumulated since the start of this program. */
static struct audit_reader audit;
static struct metrics audit_sum;

static void audit_add(void *ud, const char *verb, const char *resource, int code)
{
    struct metrics *m = ud;
    (void)code;
    int k = 0;
    while (k < m->n &&
           !(strcmp(m->s[k].verb, verb) == 0 && strcmp(m->s[k].resource, resource) == 0))
        k++;
    if (k == m->n) {
        if (m->n == MAX_SERIES)
            return;
        snprintf(m->s[k].verb, sizeof(m->s[k].verb), "%s", verb);
        snprintf(m->s[k].resource, sizeof(m->s[k].resource), "%s", resource);
        m->n++;
    }
    m->s[k].n++;
}

/* Request counts by verb and resource (codes summed). */
static void metrics_get(struct metrics *m)
{
    if (cfg.audit_log) {
        audit.path = cfg.audit_log;
        audit.user = cfg.audit_user;
        if (audit_read(&audit, audit_add, &audit_sum) < 0)
            die("cannot read %s", cfg.audit_log);
        *m = audit_sum;
        return;
    }
    memset(m, 0, sizeof(*m));
    char url[512];
    snprintf(url, sizeof(url), "%s/metrics", kube_config_server(kcfg));
    struct text t = {0};
    CURL *h = curl_easy_init();
    if (!h)
        die("curl_easy_init failed");
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, to_text);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &t);
    CURLcode rc = curl_easy_perform(h);
    long code = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(h);
    if (rc != CURLE_OK || code != 200 || !t.p)
        die("GET %s: %s (HTTP %ld)", url, curl_easy_strerror(rc), code);
    char *save = NULL;
    for (char *line = strtok_r(t.p, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct series s = {0};
        int code_ignored = 0;
        if (sscanf(line,
                   "apiserver_request_total{verb=\"%31[^\"]\",resource=\"%95[^\"]\",code=\"%d\"} "
                   "%lf",
                   s.verb, s.resource, &code_ignored, &s.n) != 4 &&
            sscanf(line, "apiserver_request_total{verb=\"%31[^\"]\",resource=\"\",code=\"%d\"} %lf",
                   s.verb, &code_ignored, &s.n) != 3)
            continue;
        int k = 0;
        while (k < m->n &&
               !(strcmp(m->s[k].verb, s.verb) == 0 && strcmp(m->s[k].resource, s.resource) == 0))
            k++;
        if (k == m->n) {
            if (m->n == MAX_SERIES)
                continue;
            m->s[m->n++] = s;
        } else {
            m->s[k].n += s.n;
        }
    }
    free(t.p);
}

static double metrics_total(const struct metrics *m)
{
    double t = 0;
    for (int i = 0; i < m->n; i++)
        t += m->s[i].n;
    return t;
}

static bool is_write(const char *verb)
{
    static const char *const w[] = {"create", "update", "patch", "delete", "deletecollection"};
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
        if (strcmp(verb, w[i]) == 0)
            return true;
    return false;
}

/* The attacher's requests between two snapshots. */
struct usage {
    double writes, event_writes, reads, total;
    char detail[1024];
};

/* own_verb/own_resource/own_n: this program's requests in the window, and
 * its watches (opened before the first snapshot) are not in it. */
static void usage_between(const struct metrics *a, const struct metrics *b, const char *own_verb,
                          const char *own_resource, double own_n, double per, struct usage *u)
{
    memset(u, 0, sizeof(*u));
    size_t pos = 0;
    for (int i = 0; i < b->n; i++) {
        double d = b->s[i].n;
        for (int j = 0; j < a->n; j++)
            if (strcmp(a->s[j].verb, b->s[i].verb) == 0 &&
                strcmp(a->s[j].resource, b->s[i].resource) == 0)
                d -= a->s[j].n;
        if (strcmp(b->s[i].verb, own_verb) == 0 && strcmp(b->s[i].resource, own_resource) == 0 &&
            !cfg.audit_log) /* the audit log's counts are the attacher's alone */
            d -= own_n;
        if (d <= 0 || strcmp(b->s[i].verb, "FAULT") == 0)
            continue;
        u->total += d;
        if (!is_write(b->s[i].verb))
            u->reads += d;
        else if (strcmp(b->s[i].resource, "events") == 0)
            u->event_writes += d;
        else
            u->writes += d;
        if (pos < sizeof(u->detail))
            pos += (size_t)snprintf(
                u->detail + pos, sizeof(u->detail) - pos, "%s%s %s %.2f", pos ? ", " : "",
                b->s[i].verb, b->s[i].resource[0] ? b->s[i].resource : "(non-resource)", d / per);
    }
    if (!pos)
        snprintf(u->detail, sizeof(u->detail), "none");
}

/* Waits until the request counters stop moving for quiet_ms, at most max_s. */
static void settle(int quiet_ms, int max_s, struct metrics *out)
{
    int64_t end = now_ns() + (int64_t)max_s * 1000000000;
    metrics_get(out);
    double last = metrics_total(out);
    int64_t since = now_ns();
    while (now_ns() < end) {
        sleep_ms(100);
        metrics_get(out);
        double t = metrics_total(out);
        if (t != last) {
            last = t;
            since = now_ns();
        } else if (now_ns() - since >= (int64_t)quiet_ms * 1000000) {
            return;
        }
    }
}

/* ---- the attacher process ------------------------------------------------------------------ */

static long proc_kib(const char *file, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/%s", cfg.att_pid, file);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long v = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, flen) == 0 && line[flen] == ':')
            v = strtol(line + flen + 1, NULL, 10);
    fclose(f);
    return v;
}

/* utime + stime in seconds */
static double cpu_s(void)
{
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", cfg.att_pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* Fields after the command name (which may hold spaces): state is the
     * 3rd field, utime the 14th and stime the 15th. */
    const char *p = strrchr(buf, ')');
    if (!p)
        return -1;
    unsigned long long ut = 0, st = 0;
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void print_memory(const char *when)
{
    long rss = proc_kib("status", "VmRSS"), hwm = proc_kib("status", "VmHWM");
    long anon = proc_kib("status", "RssAnon"), file = proc_kib("status", "RssFile");
    long threads = proc_kib("status", "Threads");
    long dirty = proc_kib("smaps_rollup", "Private_Dirty");
    double c0 = cpu_s();
    sleep_ms(2000);
    double c1 = cpu_s();
    printf("  attacher idle %s: VmRSS %.1f MiB (RssAnon %.1f, RssFile %.1f: shared libraries), "
           "Private_Dirty %.1f MiB, peak VmHWM %.1f MiB, %ld threads, CPU %.3f s in 2 s idle "
           "(targets with 1,000 attached: idle RSS <= 20 MB, private dirty <= 8 MB)\n",
           when, rss / 1024.0, anon / 1024.0, file / 1024.0, dirty / 1024.0, hwm / 1024.0, threads,
           c1 - c0);
}

/* ---- watches ------------------------------------------------------------------------------- */

/* What the watchers saw of one object (times: now_ns(), 0 = not yet). */
struct seen {
    int64_t added, attached, deleting, deleted;
};

static struct {
    pthread_mutex_t mu;
    struct seen *va[3]; /* [node] */
    struct seen *pv;
    int n_attached[3], n_deleted[3], n_pv_deleted;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER};

/* "va-w<node>-<i>": i, and the node in *node; -1 for another name. */
static int va_index(const char *name, int *node)
{
    int i = -1;
    char tail;
    if (!name || sscanf(name, "va-w%d-%05d%c", node, &i, &tail) != 2)
        return -1;
    return i >= 0 && i < cfg.count && (*node == 1 || *node == 2) ? i : -1;
}

static int pv_index(const char *name)
{
    int i = -1;
    char tail;
    if (!name || sscanf(name, "pv-%05d%c", &i, &tail) != 1)
        return -1;
    return i >= 0 && i < cfg.count ? i : -1;
}

static void note(struct seen *s, const char *type, json_object *obj, bool attach, int *n_att,
                 int *n_del, int64_t t)
{
    if (!s->added)
        s->added = t;
    if (strcmp(type, "DELETED") == 0) {
        if (!s->deleted) {
            s->deleted = t;
            (*n_del)++;
        }
        if (!s->deleting)
            s->deleting = t;
        return;
    }
    if (attach && !s->attached && kobj_bool(kobj_obj(obj, "status"), "attached", false)) {
        s->attached = t;
        (*n_att)++;
    }
    if (!s->deleting && kobj_deleting(obj))
        s->deleting = t;
}

static int va_event(void *ud, const char *type, json_object *obj)
{
    (void)ud;
    int64_t t = now_ns();
    int node = 0;
    int i = va_index(kobj_name(obj), &node);
    if (i < 0)
        return 0;
    pthread_mutex_lock(&w.mu);
    note(&w.va[node][i], type, obj, true, &w.n_attached[node], &w.n_deleted[node], t);
    pthread_mutex_unlock(&w.mu);
    return 0;
}

static int pv_event(void *ud, const char *type, json_object *obj)
{
    (void)ud;
    int64_t t = now_ns();
    int i = pv_index(kobj_name(obj));
    if (i < 0)
        return 0;
    int unused = 0;
    pthread_mutex_lock(&w.mu);
    note(&w.pv[i], type, obj, false, &unused, &w.n_pv_deleted, t);
    pthread_mutex_unlock(&w.mu);
    return 0;
}

struct watch {
    const char *path;
    kube_watch_fn fn;
    char rv[64];
    kube_watch *kw;
    pthread_t th;
    atomic_bool stop;
};

static int track_rv(void *ud, const char *type, json_object *obj)
{
    struct watch *wt = ud;
    const char *rv = kobj_rv(obj);
    if (rv)
        snprintf(wt->rv, sizeof(wt->rv), "%s", rv);
    return strcmp(type, "BOOKMARK") == 0 ? 0 : wt->fn(NULL, type, obj);
}

static void *watch_run(void *arg)
{
    struct watch *wt = arg;
    while (!atomic_load(&wt->stop)) {
        char path[512];
        snprintf(path, sizeof(path), "%s?watch=true&resourceVersion=%s", wt->path, wt->rv);
        int rc = kube_watch_run(wt->kw, path, track_rv, wt);
        if (rc == -ECANCELED || atomic_load(&wt->stop))
            break;
        if (rc == -ERANGE)
            die("watch %s: resourceVersion %s is gone", wt->path, wt->rv);
        sleep_ms(100); /* ended by the server: resume where it stopped */
    }
    return NULL;
}

static void watch_start(struct watch *wt)
{
    kube_resp r = {0};
    if (kube_get(kc, wt->path, &r) < 0)
        die("list %s: %d %s", wt->path, r.code, r.message);
    const char *rv = kobj_rv(r.body);
    if (!rv)
        die("list %s: no resourceVersion", wt->path);
    snprintf(wt->rv, sizeof(wt->rv), "%s", rv);
    kube_resp_clear(&r);
    wt->kw = kube_watch_new(kc);
    if (pthread_create(&wt->th, NULL, watch_run, wt) != 0)
        die("pthread_create failed");
}

static void watch_stop(struct watch *wt)
{
    atomic_store(&wt->stop, true);
    kube_watch_cancel(wt->kw);
    pthread_join(wt->th, NULL);
    kube_watch_free(wt->kw);
}

/* ---- phases -------------------------------------------------------------------------------- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static double pct_ms(const int64_t *v, int n, double q)
{
    if (n == 0)
        return 0;
    int k = (int)((double)n * q + 0.999999) - 1;
    if (k < 0)
        k = 0;
    if (k >= n)
        k = n - 1;
    return (double)v[k] / 1e6;
}

enum kind { K_ATTACH, K_DETACH, K_PV };

static int done_count(enum kind k, int node)
{
    pthread_mutex_lock(&w.mu);
    int n = k == K_ATTACH ? w.n_attached[node] : k == K_DETACH ? w.n_deleted[node] : w.n_pv_deleted;
    pthread_mutex_unlock(&w.mu);
    return n;
}

/* One phase: its requests, wait, figures. 0, or 1 when it did not complete. */
static int phase(const char *title, enum kind k, int node, const char *per_what,
                 const char *targets)
{
    int n = cfg.count;
    struct metrics m0, m_done, m_end;
    settle(2500, 120, &m0);
    double cpu0 = cpu_s();
    int64_t t0 = now_ns();
    int failed = 0;
    enum op op = k == K_ATTACH ? OP_VA_CREATE : k == K_DETACH ? OP_VA_DELETE : OP_PV_DELETE;
    double req_s = run_parallel(op, node, &failed);
    int64_t deadline = t0 + (int64_t)cfg.timeout_s * 1000000000;
    while (done_count(k, node) < n && now_ns() < deadline)
        sleep_ms(5);
    metrics_get(&m_done);
    int done = done_count(k, node);
    settle(1500, 120, &m_end);
    double cpu1 = cpu_s();

    int64_t *lat = calloc((size_t)n, sizeof(int64_t));
    if (!lat)
        die("out of memory");
    int nl = 0;
    int64_t last = 0;
    pthread_mutex_lock(&w.mu);
    for (int i = 0; i < n; i++) {
        const struct seen *s = k == K_PV ? &w.pv[i] : &w.va[node][i];
        int64_t from = k == K_ATTACH ? s->added : s->deleting;
        int64_t to = k == K_ATTACH ? s->attached : s->deleted;
        if (!to || !from)
            continue;
        lat[nl++] = to - from;
        if (to > last)
            last = to;
    }
    pthread_mutex_unlock(&w.mu);
    qsort(lat, (size_t)nl, sizeof(int64_t), cmp_i64);
    double span = last > t0 ? (double)(last - t0) / NS_PER_S : 0;
    double per = nl ? nl : 1;
    const char *own_verb = k == K_ATTACH ? "create" : "delete";
    const char *own_res = k == K_PV ? "persistentvolumes" : "volumeattachments";
    struct usage u_done, u;
    usage_between(&m0, &m_done, own_verb, own_res, n, per, &u_done);
    usage_between(&m0, &m_end, own_verb, own_res, n, per, &u);

    printf("== %s: %d %s\n", title, n, per_what);
    printf("  requests: %d in %.2f s by %d client threads (%d failed)\n", n, req_s, cfg.threads,
           failed);
    printf("  done: %d of %d in %.2f s from the first request: %.1f/s\n", nl, n, span,
           span > 0 ? nl / span : 0);
    printf("  latency (%s): p50 %.0f ms, p99 %.0f ms, max %.0f ms\n",
           k == K_ATTACH ? "VA created -> attached" : "deletionTimestamp -> gone",
           pct_ms(lat, nl, 0.50), pct_ms(lat, nl, 0.99), pct_ms(lat, nl, 1.0));
    printf("  attacher API requests per %s: %.2f object writes, %.2f Event writes, %.2f reads "
           "(%s)\n",
           k == K_PV ? "PV" : "operation", u.writes / per, u.event_writes / per, u.reads / per,
           targets);
    printf("    by verb and resource: %s\n", u.detail);
    if (cfg.qps > 0 && span > 0) {
        /* The bucket starts full (settled >= 2.5 s > burst / qps at upstream's default). */
        double need = u_done.total - cfg.burst;
        if (need > 0) {
            double limit = nl * cfg.qps / need;
            printf("  client budget qps %.0f burst %d: %.0f attacher requests until the last was "
                   "done allow at most %.2f/s (the physical limit); measured %.2f/s = %.0f%% of "
                   "it\n",
                   cfg.qps, cfg.burst, u_done.total, limit, nl / span, 100.0 * (nl / span) / limit);
        } else {
            printf("  client budget qps %.0f burst %d: %.0f attacher requests fit in the burst\n",
                   cfg.qps, cfg.burst, u_done.total);
        }
    }
    long hwm = proc_kib("status", "VmHWM"), threads = proc_kib("status", "Threads");
    printf("  attacher CPU %.2f s over the phase (%.2f ms per %s), peak VmHWM %.1f MiB, %ld "
           "threads\n",
           cpu1 - cpu0, 1000.0 * (cpu1 - cpu0) / per, k == K_PV ? "PV" : "operation", hwm / 1024.0,
           threads);
    fflush(stdout);
    free(lat);
    if (done < n) {
        fprintf(stderr, "bench_attach: %s: only %d of %d done within %d s\n", title, done, n,
                cfg.timeout_s);
        return 1;
    }
    return 0;
}

static int driver_publications(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/status.json", cfg.state_dir);
    json_object *st = json_object_from_file(path);
    json_object *vols = kobj_arr(st, "volumes");
    int n = vols ? 0 : -1;
    for (size_t i = 0; i < kobj_len(vols); i++)
        n += (int)kobj_len(kobj_arr(kobj_at(vols, i), "published_nodes"));
    json_object_put(st);
    return n;
}

static int cmd_run(void)
{
    if (!cfg.state_dir || cfg.att_pid <= 0)
        die("run needs --state-dir and --att-pid");
    int bad = 0;
    for (int nd = 1; nd <= 2; nd++) {
        w.va[nd] = calloc((size_t)cfg.count, sizeof(struct seen));
        if (!w.va[nd])
            die("out of memory");
    }
    w.pv = calloc((size_t)cfg.count, sizeof(struct seen));
    if (!w.pv)
        die("out of memory");
    struct watch wva = {.path = VAS, .fn = va_event};
    struct watch wpv = {.path = PVS, .fn = pv_event};
    watch_start(&wva);
    watch_start(&wpv);
    sleep_ms(300);
    printf("  attacher at start: VmRSS %.1f MiB, %ld threads\n",
           proc_kib("status", "VmRSS") / 1024.0, proc_kib("status", "Threads"));

    bad |= phase("first attach of each PV (worker-1)", K_ATTACH, 1, "VolumeAttachments",
                 "target <= 3 object writes; upstream 3");
    if (!bad)
        print_memory("with 1x N attached VolumeAttachments");
    bad |= phase("later attach of the same PVs (worker-2)", K_ATTACH, 2, "VolumeAttachments",
                 "target <= 2 object writes; upstream 2");
    if (!bad)
        print_memory("with 2x N attached VolumeAttachments");
    bad |= phase("detach (worker-2 VolumeAttachments deleted)", K_DETACH, 2, "VolumeAttachments",
                 "target <= 1 object write per detach of a deleted VA; upstream 2");
    bad |= phase("last detach of each PV (worker-1 VolumeAttachments deleted)", K_DETACH, 1,
                 "VolumeAttachments", "target <= 1 object write; upstream 2");
    bad |= phase("PVs deleted (the attacher removes its PV finalizer)", K_PV, 0, "PVs",
                 "upstream 1 object write");
    int pubs = driver_publications();
    printf("  driver publications left: %d\n", pubs);
    if (pubs != 0) {
        fprintf(stderr, "bench_attach: the driver still holds %d publications\n", pubs);
        bad = 1;
    }
    watch_stop(&wva);
    watch_stop(&wpv);
    for (int nd = 1; nd <= 2; nd++)
        free(w.va[nd]);
    free(w.pv);
    return bad;
}

static int cmd_setup(void)
{
    if (!cfg.state_dir)
        die("setup needs --state-dir");
    char body[512];
    for (int nd = 1; nd <= 2; nd++) {
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"name\":\"worker-%d\"}}",
                 nd);
        if (post("/api/v1/nodes", body) < 0)
            return 1;
        snprintf(body, sizeof(body),
                 "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"CSINode\",\"metadata\":{"
                 "\"name\":\"worker-%d\"},\"spec\":{\"drivers\":[{\"name\":\"" DRIVER
                 "\",\"nodeID\":\"node-%d\",\"topologyKeys\":null}]}}",
                 nd, nd);
        if (post("/apis/storage.k8s.io/v1/csinodes", body) < 0)
            return 1;
    }
    int failed = 0;
    double s = run_parallel(OP_PV, 0, &failed);
    char path[1024];
    snprintf(path, sizeof(path), "%s/state.json", cfg.state_dir);
    FILE *f = fopen(path, "w");
    if (!f)
        die("cannot write %s: %s", path, strerror(errno));
    fprintf(f, "{\"version\":1,\"volumes\":[");
    for (int i = 0; i < cfg.count; i++)
        fprintf(f,
                "%s{\"id\":\"vol-%05d\",\"name\":\"seed-%05d\",\"capacity_bytes\":1073741824,"
                "\"access_type\":\"mount\",\"parameters\":{}}",
                i ? "," : "", i, i);
    fprintf(f, "],\"snapshots\":[]}\n");
    if (fclose(f) != 0)
        die("cannot write %s", path);
    printf("  set up: 2 nodes with CSINodes, %d PVs (%.0f/s, %d failed), %d driver volumes\n",
           cfg.count, cfg.count / s, failed, cfg.count);
    return failed ? 1 : 0;
}

/* ---- main ---------------------------------------------------------------------------------- */

static bool str_arg(const char *a, const char *name, const char **dst)
{
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0 || a[n] != '=')
        return false;
    *dst = a + n + 1;
    return true;
}

static bool num_arg(const char *a, const char *name, double *dst)
{
    const char *v;
    if (!str_arg(a, name, &v))
        return false;
    char *end = NULL;
    double x = strtod(v, &end);
    if (*end || end == v || x < 0 || x > 1e9)
        die("%s: expected a number >= 0", a);
    *dst = x;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "setup") != 0)) {
        fprintf(stderr,
                "usage: %s setup --kubeconfig=F --count=N --state-dir=DIR\n"
                "       %s run --kubeconfig=F --count=N --att-pid=PID --state-dir=DIR --qps=Q "
                "--burst=B [--threads=8] [--timeout=1800] [--audit-log=F --audit-user=NAME]\n",
                argv[0], argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        double v = 0;
        if (str_arg(a, "--kubeconfig", &cfg.kubeconfig) ||
            str_arg(a, "--state-dir", &cfg.state_dir) || num_arg(a, "--qps", &cfg.qps) ||
            str_arg(a, "--audit-log", &cfg.audit_log) ||
            str_arg(a, "--audit-user", &cfg.audit_user))
            continue;
        if (num_arg(a, "--count", &v))
            cfg.count = (int)v;
        else if (num_arg(a, "--threads", &v))
            cfg.threads = (int)v;
        else if (num_arg(a, "--att-pid", &v))
            cfg.att_pid = (int)v;
        else if (num_arg(a, "--timeout", &v))
            cfg.timeout_s = (int)v;
        else if (num_arg(a, "--burst", &v))
            cfg.burst = (int)v;
        else
            die("unknown argument %s", a);
    }
    if (!cfg.kubeconfig || cfg.count <= 0 || cfg.count > 99999 || cfg.threads <= 0)
        die("--kubeconfig and --count (1..99999) are required");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    if (kube_config_from_file(cfg.kubeconfig, NULL, &kcfg) < 0)
        die("%s", util_err_last());
    kube_client_opts o = {.qps = 0, .user_agent = "bench_attach", .timeout = 60 * UTIL_SECOND};
    if (kube_client_new(kcfg, &o, &kc) < 0)
        die("%s", util_err_last());
    int rc = strcmp(argv[1], "run") == 0 ? cmd_run() : cmd_setup();
    kube_client_free(kc);
    kube_config_free(kcfg);
    curl_global_cleanup();
    return rc;
}
