/*
 * Benchmark helper of hack/bench/bench_provision.sh, which starts kube-lite,
 * the example driver and csi-provisioner; this program drives kube-lite
 * over HTTP (keep-alive libcurl clients, as client-go) and measures.
 *
 *   bench_provision run --url=URL --count=N --prov-pid=PID --state-dir=DIR
 *                       [--threads=8] [--class=bench] [--timeout=600]
 *     Creates N PVCs at once (N POSTs from --threads threads) and follows
 *     them with two watches (PVCs, PVs) opened before the first create.
 *     Per claim the latency is the time from the watcher seeing it ADDED to
 *     the watcher seeing it with status.phase Bound: both are taken on the
 *     same monotonic clock as the events arrive. creationTimestamp is not
 *     used: the API gives it to the second, useless for sub-second figures;
 *     the ADDED event reaches the watcher ~1 ms after the create (kube-lite
 *     bench: watch delivery p50 1.1 ms). The latency is also split at the
 *     PV's ADDED event: create -> PV (the provisioner's part) and PV ->
 *     Bound (kube-lite's binder). Then it deletes every claim and
 *     times the PVs' DELETED events, until the driver holds no volume.
 *     Figures: volumes/s to Bound, latency p50/p99, API requests per volume
 *     from kube-lite's /metrics (this program's own creates and deletes
 *     subtracted; its watches were opened before the first snapshot), its
 *     writes split into object writes (of which Leases: the provisioner's
 *     intent record) and Events,
 *     provisioner VmRSS/VmHWM; volumes deleted/s and writes per deletion.
 *     Exits 1 when not every claim got Bound, or not everything was deleted.
 *     --no-binder: for a kube-lite without its binder (--controllers=), so
 *     that only the provisioner's work is timed: the claims are created
 *     with the storage-provisioner annotation the binder would add, a claim
 *     counts as done when its PV appears (then the in-progress finalizers
 *     are waited for), and there is no deletion phase (nobody would release
 *     the PVs).
 *
 *     --cacert=CA --token=T: HTTPS with that CA and bearer token (the real
 *     kube-apiserver of hack/kubernetes/cluster.sh); --audit-log=F
 *     --audit-user=NAME: the request counts come from kube-apiserver's
 *     audit log F, the requests of user NAME (the provisioner's token)
 *     alone, instead of kube-lite's /metrics (see bench_audit.h).
 *
 *   bench_provision fill --url=URL --count=N [--threads=8] [--fill-driver=NAME]
 *     Creates N PVCs and N PVs (~1 KB each), already bound, of driver NAME
 *     (default other.csi.example.com, another driver's objects a
 *     provisioner need not cache; the benchmarked driver's name gives
 *     settled volumes of its own).
 */
#include <dirent.h>
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

#define PVCS        "/api/v1/namespaces/default/persistentvolumeclaims"
#define PVS         "/api/v1/persistentvolumes"
#define IN_PROGRESS "external-provisioner.volume.kubernetes.io/provisioning-in-progress"
#define NS_PER_S    1e9

static struct {
    const char *url;
    int count;
    int threads;
    int prov_pid;
    const char *state_dir;
    const char *class;
    int timeout_s;
    bool no_binder;
    const char *driver;
    const char *fill_driver;
    const char *cacert;     /* HTTPS: the API server's CA */
    const char *token;      /* a bearer token */
    const char *audit_log;  /* counts from this audit log instead of /metrics */
    const char *audit_user; /* ... of this caller (the provisioner) */
} cfg = {.threads = 8,
         .class = "bench",
         .timeout_s = 600,
         .driver = "hostpath.csi.example.com",
         .fill_driver = "other.csi.example.com"};

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "bench_provision: ");
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

/* ---- HTTP ------------------------------------------------------------------------------ */

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

static size_t to_buf(char *p, size_t size, size_t n, void *ud)
{
    buf_add(ud, p, size * n);
    return size * n;
}

/* One keep-alive connection, as client-go keeps one. */
struct client {
    CURL *h;
    struct curl_slist *headers;
    struct buf body;
};

static void client_init(struct client *c)
{
    memset(c, 0, sizeof(*c));
    c->h = curl_easy_init();
    if (!c->h)
        die("curl_easy_init failed");
    c->headers = curl_slist_append(c->headers, "Content-Type: application/json");
    c->headers = curl_slist_append(c->headers, "Accept: application/json");
    c->headers = curl_slist_append(c->headers, "Expect:");
    if (cfg.token) {
        char auth[1024];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", cfg.token);
        c->headers = curl_slist_append(c->headers, auth);
    }
    if (cfg.cacert)
        curl_easy_setopt(c->h, CURLOPT_CAINFO, cfg.cacert);
    curl_easy_setopt(c->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c->h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c->h, CURLOPT_HTTPHEADER, c->headers);
    curl_easy_setopt(c->h, CURLOPT_WRITEFUNCTION, to_buf);
    curl_easy_setopt(c->h, CURLOPT_WRITEDATA, &c->body);
    curl_easy_setopt(c->h, CURLOPT_TIMEOUT, 60L);
}

static void client_free(struct client *c)
{
    curl_easy_cleanup(c->h);
    curl_slist_free_all(c->headers);
    free(c->body.p);
}

/* method NULL: GET, or POST when body is given. The HTTP code, or -1. */
static long client_do(struct client *c, const char *method, const char *path, const char *body)
{
    char url[512];
    snprintf(url, sizeof(url), "%s%s", cfg.url, path);
    c->body.len = 0;
    if (c->body.p)
        c->body.p[0] = '\0';
    curl_easy_setopt(c->h, CURLOPT_URL, url);
    curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, method);
    if (body) {
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDS, body);
        curl_easy_setopt(c->h, CURLOPT_POSTFIELDSIZE, (long)strlen(body));
    } else {
        curl_easy_setopt(c->h, CURLOPT_HTTPGET, 1L);
        curl_easy_setopt(c->h, CURLOPT_CUSTOMREQUEST, method);
    }
    CURLcode rc = curl_easy_perform(c->h);
    long code = 0;
    /* Injected faults (kube-lite --error-rate) are answered before the
     * request is handled: the load generator sends it again. */
    for (int i = 0; rc == CURLE_OK && i < 50; i++) {
        curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
        if (code != 429 && code < 500)
            break;
        sleep_ms(10);
        c->body.len = 0;
        rc = curl_easy_perform(c->h);
    }
    if (rc != CURLE_OK) {
        const char *msg = curl_easy_strerror(rc);
        c->body.len = 0;
        buf_add(&c->body, msg, strlen(msg));
        return -1;
    }
    curl_easy_getinfo(c->h, CURLINFO_RESPONSE_CODE, &code);
    return code;
}

static const char *first_line(struct buf *b)
{
    if (!b->p)
        return "";
    size_t n = strcspn(b->p, "\n");
    b->p[n < 300 ? n : 300] = '\0';
    return b->p;
}

/* ---- kube-lite's /metrics ------------------------------------------------------------------ */

#define MAX_SERIES 256

struct series {
    char verb[32], resource[96];
    int code;
    double n;
};

struct metrics {
    struct series s[MAX_SERIES];
    int n;
};

/* The real API server: the provisioner's requests from the audit log,
 * accumulated since the start of this program. */
static struct audit_reader audit;
static struct metrics audit_sum;

static void audit_add(void *ud, const char *verb, const char *resource, int code)
{
    struct metrics *m = ud;
    int k = 0;
    while (k < m->n && !(strcmp(m->s[k].verb, verb) == 0 &&
                         strcmp(m->s[k].resource, resource) == 0 && m->s[k].code == code))
        k++;
    if (k == m->n) {
        if (m->n == MAX_SERIES)
            return;
        snprintf(m->s[k].verb, sizeof(m->s[k].verb), "%s", verb);
        snprintf(m->s[k].resource, sizeof(m->s[k].resource), "%s", resource);
        m->s[k].code = code;
        m->n++;
    }
    m->s[k].n++;
}

static void metrics_get(struct client *c, struct metrics *m)
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
    long code = client_do(c, NULL, "/metrics", NULL);
    if (code != 200)
        die("GET /metrics: %ld %s", code, first_line(&c->body));
    for (char *line = strtok(c->body.p, "\n"); line; line = strtok(NULL, "\n")) {
        struct series s = {0};
        if (sscanf(
                line,
                "apiserver_request_total{verb=\"%31[^\"]\",resource=\"%95[^\"]\",code=\"%d\"} %lf",
                s.verb, s.resource, &s.code, &s.n) == 4 ||
            sscanf(line, "apiserver_request_total{verb=\"%31[^\"]\",resource=\"\",code=\"%d\"} %lf",
                   s.verb, &s.code, &s.n) == 3) {
            if (m->n < MAX_SERIES)
                m->s[m->n++] = s;
        }
    }
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
    static const char *const w[] = {"create", "update", "patch", "delete", "deletecollection",
                                    "POST",   "PUT",    "PATCH", "DELETE"};
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
        if (strcmp(verb, w[i]) == 0)
            return true;
    return false;
}

/* Requests between two snapshots, by verb and resource (codes summed). */
struct usage {
    double writes, reads;
    double event_writes; /* of writes: Events */
    double lease_writes; /* of writes: Leases (the provisioner's intent record) */
    char detail[1024];
};

/* own_verb/own_resource/own_n: this program's requests in the window. */
static void usage_between(const struct metrics *a, const struct metrics *b, const char *own_verb,
                          const char *own_resource, double own_n, double per, struct usage *u)
{
    struct {
        char verb[32], resource[96];
        double n;
    } agg[MAX_SERIES];
    int na = 0;
    memset(agg, 0, sizeof(agg));
    if (cfg.audit_log)
        own_n = 0; /* the audit log's counts are the provisioner's alone */
    memset(u, 0, sizeof(*u));
    for (int i = 0; i < b->n; i++) {
        double d = b->s[i].n;
        for (int j = 0; j < a->n; j++)
            if (strcmp(a->s[j].verb, b->s[i].verb) == 0 &&
                strcmp(a->s[j].resource, b->s[i].resource) == 0 && a->s[j].code == b->s[i].code)
                d -= a->s[j].n;
        if (d <= 0 || strcmp(b->s[i].verb, "FAULT") == 0)
            continue;
        int k = 0;
        while (k < na && !(strcmp(agg[k].verb, b->s[i].verb) == 0 &&
                           strcmp(agg[k].resource, b->s[i].resource) == 0))
            k++;
        if (k == na) {
            snprintf(agg[k].verb, sizeof(agg[k].verb), "%s", b->s[i].verb);
            snprintf(agg[k].resource, sizeof(agg[k].resource), "%s", b->s[i].resource);
            agg[k].n = 0;
            na++;
        }
        agg[k].n += d;
    }
    size_t pos = 0;
    for (int k = 0; k < na; k++) {
        if (strcmp(agg[k].verb, own_verb) == 0 && strcmp(agg[k].resource, own_resource) == 0)
            agg[k].n -= own_n;
        if (agg[k].n <= 0)
            continue;
        bool write = is_write(agg[k].verb);
        if (write)
            u->writes += agg[k].n;
        else
            u->reads += agg[k].n;
        if (write && strcmp(agg[k].resource, "events") == 0)
            u->event_writes += agg[k].n;
        if (write && strcmp(agg[k].resource, "leases") == 0)
            u->lease_writes += agg[k].n;
        pos += (size_t)snprintf(
            u->detail + pos, sizeof(u->detail) - pos, "%s%s %s %.2f", pos ? ", " : "", agg[k].verb,
            agg[k].resource[0] ? agg[k].resource : "(non-resource)", agg[k].n / per);
        if (pos >= sizeof(u->detail))
            pos = sizeof(u->detail) - 1;
    }
}

/* Waits until kube-lite's request counters stop moving for `quiet_ms` (the
 * provisioner's trailing writes: the intent record's idle write, events),
 * at most max_s. */
static void settle(struct client *c, int quiet_ms, int max_s, struct metrics *out)
{
    int64_t end = now_ns() + (int64_t)max_s * 1000000000;
    metrics_get(c, out);
    double last = metrics_total(out);
    int64_t since = now_ns();
    while (now_ns() < end) {
        sleep_ms(100);
        metrics_get(c, out);
        double t = metrics_total(out);
        if (t != last) {
            last = t;
            since = now_ns();
        } else if (now_ns() - since >= (int64_t)quiet_ms * 1000000) {
            return;
        }
    }
}

/* ---- the provisioner's memory ------------------------------------------------------------------
 */

static long proc_kib(int pid, const char *field)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    long kib = -1;
    size_t flen = strlen(field);
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, flen) == 0 && line[flen] == ':')
            kib = strtol(line + flen + 1, NULL, 10);
    fclose(f);
    return kib;
}

/* CPU time (user + system) the process has used so far, in ms; -1 if
 * unreadable. *sys_ms (may be NULL) gets the system part alone. */
static double proc_cpu_split(int pid, double *sys_ms)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Fields after the command name, which may hold spaces: state is 3rd,
     * utime the 14th and stime the 15th field. */
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    double tick_ms = 1000.0 / (double)sysconf(_SC_CLK_TCK);
    if (sys_ms)
        *sys_ms = (double)st * tick_ms;
    return (double)(ut + st) * tick_ms;
}

static double proc_cpu_ms(int pid)
{
    return proc_cpu_split(pid, NULL);
}

/* CPU by thread role: the sidecars name their threads (w:claims,
 * watch:PVC, events, ...); threads of one name are summed. */
#define ROLES_MAX 48
struct roles {
    int n;
    char name[ROLES_MAX][16];
    double ms[ROLES_MAX];
    double total; /* the whole process, exited threads included */
};

static void roles_get(int pid, struct roles *r)
{
    memset(r, 0, sizeof(*r));
    r->total = proc_cpu_ms(pid);
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        /* schedstat's first field is the thread's run time in ns; the
         * per-thread utime/stime are tick samples that miss most of the
         * short runs of a thread that blocks often. */
        char p2[128], name[32] = "";
        unsigned long long ns = 0;
        snprintf(p2, sizeof(p2), "/proc/%d/task/%s/schedstat", pid, de->d_name);
        FILE *f = fopen(p2, "r");
        if (!f)
            continue;
        int ok = fscanf(f, "%llu", &ns) == 1;
        fclose(f);
        snprintf(p2, sizeof(p2), "/proc/%d/task/%s/comm", pid, de->d_name);
        f = fopen(p2, "r");
        if (!f)
            continue;
        ok = ok && fgets(name, sizeof(name), f) != NULL;
        fclose(f);
        if (!ok)
            continue;
        name[strcspn(name, "\n")] = 0;
        int i = 0;
        while (i < r->n && strcmp(r->name[i], name) != 0)
            i++;
        if (i == r->n) {
            if (r->n == ROLES_MAX)
                continue;
            snprintf(r->name[r->n++], sizeof(r->name[0]), "%s", name);
        }
        r->ms[i] += (double)ns / 1e6;
    }
    closedir(d);
}

/* Prints what each role used between a and b, per volume, largest first;
 * what threads that exited in between used is the remainder. */
static void roles_print(const struct roles *a, const struct roles *b, int per)
{
    double used[ROLES_MAX] = {0}, live = 0;
    int order[ROLES_MAX] = {0};
    for (int i = 0; i < b->n; i++) {
        double before = 0;
        for (int j = 0; j < a->n; j++)
            if (strcmp(a->name[j], b->name[i]) == 0)
                before = a->ms[j];
        used[i] = b->ms[i] > before ? b->ms[i] - before : 0;
        live += used[i];
        order[i] = i;
    }
    for (int i = 1; i < b->n; i++)
        for (int j = i; j > 0 && used[order[j]] > used[order[j - 1]]; j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    printf("    by thread role (ms per volume):");
    for (int k = 0; k < b->n; k++)
        if (used[order[k]] > 0)
            printf(" %s %.3f,", b->name[order[k]], used[order[k]] / per);
    /* The process total comes in clock ticks: a remainder under a tick
     * per volume is rounding, not a thread. */
    double gone = (b->total - a->total) - live;
    printf(" threads that exited %.3f\n", gone > 0 ? gone / per : 0);
}

/* ---- watches ------------------------------------------------------------------------------- */

/* What the watchers saw of claim i (times: now_ns(), 0 = not yet). */
struct claim {
    int64_t added, bound, pvc_deleted, pv_added, pv_deleted;
    bool in_progress; /* as of the last event */
};

static struct {
    pthread_mutex_t mu;
    struct claim *c;
    int n_added, n_bound, n_in_progress, n_pvc_deleted, n_pv_added, n_pv_deleted;
    atomic_bool stop;
} w = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int claim_index(const char *name)
{
    int i = -1;
    char tail;
    if (!name || sscanf(name, "bench-%d%c", &i, &tail) != 1 || i < 0 || i >= cfg.count)
        return -1;
    return i;
}

static void pvc_event(const char *type, json_object *obj, int64_t t)
{
    int i = claim_index(kobj_name(obj));
    if (i < 0)
        return;
    struct claim *c = &w.c[i];
    pthread_mutex_lock(&w.mu);
    if (!c->added) {
        c->added = t;
        w.n_added++;
    }
    if (strcmp(type, "DELETED") == 0) {
        if (!c->pvc_deleted) {
            c->pvc_deleted = t;
            w.n_pvc_deleted++;
        }
    } else {
        const char *phase = kobj_path_str(obj, "status.phase");
        if (!c->bound && phase && strcmp(phase, "Bound") == 0) {
            c->bound = t;
            w.n_bound++;
        }
    }
    bool ip = strcmp(type, "DELETED") != 0 && kobj_has_finalizer(obj, IN_PROGRESS);
    if (ip != c->in_progress) {
        c->in_progress = ip;
        w.n_in_progress += ip ? 1 : -1;
    }
    pthread_mutex_unlock(&w.mu);
}

static void pv_event(const char *type, json_object *obj, int64_t t)
{
    int i = claim_index(kobj_path_str(obj, "spec.claimRef.name"));
    if (i < 0)
        return;
    struct claim *c = &w.c[i];
    pthread_mutex_lock(&w.mu);
    if (!c->pv_added) {
        c->pv_added = t;
        w.n_pv_added++;
    }
    if (strcmp(type, "DELETED") == 0 && !c->pv_deleted) {
        c->pv_deleted = t;
        w.n_pv_deleted++;
    }
    pthread_mutex_unlock(&w.mu);
}

struct watch {
    const char *path;
    void (*on_event)(const char *type, json_object *obj, int64_t t);
    char rv[64];
    struct buf line;
    atomic_bool established;
    pthread_t th;
    long code;
};

static size_t watch_data(char *p, size_t size, size_t n, void *ud)
{
    struct watch *wt = ud;
    int64_t t = now_ns();
    size_t len = size * n;
    buf_add(&wt->line, p, len);
    char *start = wt->line.p, *nl;
    while ((nl = memchr(start, '\n', wt->line.len - (size_t)(start - wt->line.p)))) {
        *nl = '\0';
        json_object *ev = json_tokener_parse(start);
        const char *type = kobj_str(ev, "type");
        json_object *obj = kobj_obj(ev, "object");
        if (type && obj && strcmp(type, "BOOKMARK") != 0 && strcmp(type, "ERROR") != 0)
            wt->on_event(type, obj, t);
        else if (type && strcmp(type, "ERROR") == 0)
            fprintf(stderr, "bench_provision: watch %s: ERROR event: %.300s\n", wt->path, start);
        json_object_put(ev);
        start = nl + 1;
    }
    size_t rest = wt->line.len - (size_t)(start - wt->line.p);
    memmove(wt->line.p, start, rest);
    wt->line.len = rest;
    wt->line.p[rest] = '\0';
    return atomic_load(&w.stop) ? 0 : len;
}

static size_t watch_header(char *p, size_t size, size_t n, void *ud)
{
    struct watch *wt = ud;
    if (n * size >= 5 && strncmp(p, "HTTP/", 5) == 0)
        atomic_store(&wt->established, true);
    return size * n;
}

static int watch_progress(void *ud, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d)
{
    (void)ud, (void)a, (void)b, (void)c, (void)d;
    return atomic_load(&w.stop) ? 1 : 0;
}

static void *watch_run(void *arg)
{
    struct watch *wt = arg;
    char url[512];
    snprintf(url, sizeof(url), "%s%s?watch=1&resourceVersion=%s", cfg.url, wt->path, wt->rv);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_data);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, wt);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, watch_header);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, wt);
    curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, watch_progress);
    struct curl_slist *hdr = NULL;
    if (cfg.token) {
        char auth[1024];
        snprintf(auth, sizeof(auth), "Authorization: Bearer %s", cfg.token);
        hdr = curl_slist_append(hdr, auth);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    }
    if (cfg.cacert)
        curl_easy_setopt(h, CURLOPT_CAINFO, cfg.cacert);
    CURLcode rc;
    for (;;) {
        wt->line.len = 0;
        rc = curl_easy_perform(h);
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &wt->code);
        /* kube-lite --error-rate answers watches 500 too: the same
         * resourceVersion again replays what came meanwhile. */
        if (atomic_load(&w.stop) || !(wt->code == 429 || wt->code >= 500))
            break;
        sleep_ms(20);
    }
    if (!atomic_load(&w.stop))
        fprintf(stderr, "bench_provision: watch %s ended early: %s (HTTP %ld)\n", wt->path,
                curl_easy_strerror(rc), wt->code);
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    atomic_store(&wt->established, true);
    return NULL;
}

static void watch_start(struct client *c, struct watch *wt)
{
    long code = client_do(c, NULL, wt->path, NULL);
    if (code != 200)
        die("list %s: %ld %s", wt->path, code, first_line(&c->body));
    json_object *list = json_tokener_parse(c->body.p);
    const char *rv = kobj_rv(list);
    if (!rv)
        die("list %s: no resourceVersion", wt->path);
    snprintf(wt->rv, sizeof(wt->rv), "%s", rv);
    json_object_put(list);
    if (pthread_create(&wt->th, NULL, watch_run, wt) != 0)
        die("pthread_create failed");
    for (int i = 0; i < 5000 && !atomic_load(&wt->established); i++)
        sleep_ms(1);
    if (!atomic_load(&wt->established))
        die("watch %s did not start", wt->path);
}

/* ---- parallel requests ---------------------------------------------------------------------- */

enum op { OP_CREATE_CLAIM, OP_DELETE_CLAIM, OP_FILL_PVC, OP_FILL_PV };

struct par {
    enum op op;
    int n;
    atomic_int next;
    atomic_int failed;
};

static void fake_uid(char out[37], uint32_t i, uint32_t salt)
{
    uint64_t x = ((uint64_t)i * UINT64_C(0x9E3779B97F4A7C15)) ^ salt;
    snprintf(out, 37, "%08x-%04x-4%03x-8%03x-%012" PRIx64, (uint32_t)(x >> 32),
             (unsigned)(x & 0xffff), (unsigned)((x >> 16) & 0xfff), (unsigned)(i & 0xfff),
             (uint64_t)((x * 31) & 0xffffffffffffu));
}

/* A claim bound to a volume of another driver, as it sits in a cluster. */
static void fill_pvc(char *out, size_t len, int i)
{
    char uid[37];
    fake_uid(uid, (uint32_t)i, 0x5eed);
    snprintf(out, len,
             "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
             "\"name\":\"data-statefulset-%07d\",\"namespace\":\"default\",\"labels\":{"
             "\"app.kubernetes.io/name\":\"database\",\"app.kubernetes.io/instance\":\"db-%d\"},"
             "\"annotations\":{\"pv.kubernetes.io/bind-completed\":\"yes\","
             "\"pv.kubernetes.io/bound-by-controller\":\"yes\","
             "\"volume.beta.kubernetes.io/storage-provisioner\":\"%s\","
             "\"volume.kubernetes.io/storage-provisioner\":\"%s\","
             "\"volume.kubernetes.io/selected-node\":\"node-%d.cluster.example.com\"},"
             "\"finalizers\":[\"kubernetes.io/pvc-protection\"]},"
             "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{"
             "\"storage\":\"10Gi\"}},\"storageClassName\":\"other\","
             "\"volumeMode\":\"Filesystem\",\"volumeName\":\"pvc-%s\"},"
             "\"status\":{\"phase\":\"Bound\",\"accessModes\":[\"ReadWriteOnce\"],"
             "\"capacity\":{\"storage\":\"10Gi\"}}}",
             i, i % 1000, cfg.fill_driver, cfg.fill_driver, i % 64, uid);
}

static void fill_pv(char *out, size_t len, int i)
{
    char uid[37], handle[37];
    fake_uid(uid, (uint32_t)i, 0x5eed);
    fake_uid(handle, (uint32_t)i, 0xbeef);
    snprintf(out, len,
             "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolume\",\"metadata\":{"
             "\"name\":\"pvc-%s\",\"annotations\":{"
             "\"pv.kubernetes.io/provisioned-by\":\"%s\","
             "\"volume.kubernetes.io/provisioner-deletion-secret-name\":\"\","
             "\"volume.kubernetes.io/provisioner-deletion-secret-namespace\":\"\"},"
             "\"finalizers\":[\"external-provisioner.volume.kubernetes.io/finalizer\","
             "\"kubernetes.io/pv-protection\"]},"
             "\"spec\":{\"capacity\":{\"storage\":\"10Gi\"},\"accessModes\":[\"ReadWriteOnce\"],"
             "\"persistentVolumeReclaimPolicy\":\"Delete\",\"storageClassName\":\"other\","
             "\"volumeMode\":\"Filesystem\",\"claimRef\":{\"kind\":\"PersistentVolumeClaim\","
             "\"namespace\":\"default\",\"name\":\"data-statefulset-%07d\",\"uid\":\"%s\","
             "\"apiVersion\":\"v1\",\"resourceVersion\":\"%d\"},"
             "\"csi\":{\"driver\":\"%s\",\"volumeHandle\":\"%s\","
             "\"fsType\":\"ext4\",\"volumeAttributes\":{"
             "\"storage.kubernetes.io/"
             "csiProvisionerIdentity\":\"1700000000000-8081-%s\","
             "\"kind\":\"filesystem\"}},"
             "\"nodeAffinity\":{\"required\":{\"nodeSelectorTerms\":[{\"matchExpressions\":[{"
             "\"key\":\"topology.hostpath.csi/node\",\"operator\":\"In\",\"values\":["
             "\"node-%d.cluster.example.com\"]}]}]}}},"
             "\"status\":{\"phase\":\"Bound\"}}",
             uid, cfg.fill_driver, i, uid, 1000 + i, cfg.fill_driver, handle, cfg.fill_driver,
             i % 64);
}

static void *par_worker(void *arg)
{
    struct par *p = arg;
    struct client c;
    client_init(&c);
    char path[256], body[4096];
    for (;;) {
        int i = atomic_fetch_add(&p->next, 1);
        if (i >= p->n)
            break;
        long code = 0, want = 201;
        switch (p->op) {
        case OP_CREATE_CLAIM:
            /* Without kube-lite's binder the claim carries the annotation
             * the binder would add. */
            snprintf(body, sizeof(body),
                     "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{"
                     "\"name\":\"bench-%07d\",\"namespace\":\"default\",\"labels\":{\"app\":"
                     "\"bench\"}%s%s%s},\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],"
                     "\"resources\":{\"requests\":{\"storage\":\"1Mi\"}},"
                     "\"storageClassName\":\"%s\"}}",
                     i,
                     cfg.no_binder
                         ? ",\"annotations\":{\"volume.kubernetes.io/storage-provisioner\":\""
                         : "",
                     cfg.no_binder ? cfg.driver : "", cfg.no_binder ? "\"}" : "", cfg.class);
            code = client_do(&c, NULL, PVCS, body);
            break;
        case OP_DELETE_CLAIM:
            snprintf(path, sizeof(path), PVCS "/bench-%07d", i);
            code = client_do(&c, "DELETE", path, NULL);
            want = 200;
            break;
        case OP_FILL_PVC:
        case OP_FILL_PV: {
            bool claim = p->op == OP_FILL_PVC;
            if (claim)
                fill_pvc(body, sizeof(body), i);
            else
                fill_pv(body, sizeof(body), i);
            code = client_do(&c, NULL, claim ? PVCS : PVS, body);
            if (code != 201)
                break;
            /* The API server ignores status on create: Bound is set the way
             * the binder sets it, through the status subresource. */
            const char *name = strstr(body, "\"name\":\"");
            size_t n = name ? strcspn(name + 8, "\"") : 0;
            snprintf(path, sizeof(path), "%s/%.*s/status", claim ? PVCS : PVS, (int)n,
                     name ? name + 8 : "");
            code = client_do(&c, "PUT", path, body) == 200 ? 201 : 0;
            break;
        }
        }
        if (code != want && !(p->op == OP_DELETE_CLAIM && code == 202) &&
            atomic_fetch_add(&p->failed, 1) < 5)
            fprintf(stderr, "bench_provision: request %d: %ld %s\n", i, code, first_line(&c.body));
    }
    client_free(&c);
    return NULL;
}

/* n requests from cfg.threads threads; returns the seconds taken. */
static double run_parallel(enum op op, int n, int *failed)
{
    struct par p = {.op = op, .n = n};
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

/* ---- run ------------------------------------------------------------------------------------- */

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

static int driver_volumes(void)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/status.json", cfg.state_dir);
    json_object *st = json_object_from_file(path);
    json_object *v = kobj_arr(st, "volumes");
    int n = v ? (int)kobj_len(v) : -1;
    json_object_put(st);
    return n;
}

/* Waits (polling the watchers' counters) until cond() or the deadline. */
static bool wait_for(bool (*cond)(void), int64_t deadline)
{
    while (now_ns() < deadline) {
        pthread_mutex_lock(&w.mu);
        bool ok = cond();
        pthread_mutex_unlock(&w.mu);
        if (ok)
            return true;
        sleep_ms(5);
    }
    pthread_mutex_lock(&w.mu);
    bool ok = cond();
    pthread_mutex_unlock(&w.mu);
    return ok;
}

/* "Done" is Bound, or with --no-binder (nobody binds) the PV created. */
static int n_done(void)
{
    return cfg.no_binder ? w.n_pv_added : w.n_bound;
}

static bool all_bound(void)
{
    return n_done() == cfg.count;
}

static bool all_released(void)
{
    return n_done() == cfg.count && w.n_in_progress == 0;
}

static bool all_deleted(void)
{
    return w.n_pv_deleted == cfg.count && w.n_pvc_deleted == cfg.count;
}

/* The most threads the provisioner had while the run went on, read from
 * /proc every 50 ms by a thread of this helper (a shell loop forking at
 * that rate took a sixth of a core from what is measured). */
static struct {
    atomic_bool stop;
    atomic_long peak;
} threads_seen;

static void *sample_threads(void *arg)
{
    (void)arg;
    while (!atomic_load(&threads_seen.stop)) {
        long n = proc_kib(cfg.prov_pid, "Threads");
        if (n > atomic_load(&threads_seen.peak))
            atomic_store(&threads_seen.peak, n);
        sleep_ms(50);
    }
    return NULL;
}

static int cmd_run(void)
{
    if (!cfg.state_dir || cfg.prov_pid <= 0)
        die("run needs --state-dir and --prov-pid");
    int n = cfg.count, bad = 0;
    w.c = calloc((size_t)n, sizeof(*w.c));
    struct client c;
    client_init(&c);
    struct watch wpvc = {.path = PVCS, .on_event = pvc_event};
    struct watch wpv = {.path = PVS, .on_event = pv_event};
    watch_start(&c, &wpvc);
    watch_start(&c, &wpv);
    pthread_t sampler;
    bool sampling = pthread_create(&sampler, NULL, sample_threads, NULL) == 0;

    /* ---- provisioning ---- */
    struct metrics m0, m1;
    metrics_get(&c, &m0);
    double sys0 = 0, sys3 = 0;
    double cpu0 = proc_cpu_split(cfg.prov_pid, &sys0);
    struct roles r0, r1;
    roles_get(cfg.prov_pid, &r0);
    int64_t t0 = now_ns();
    int failed = 0;
    double create_s = run_parallel(OP_CREATE_CLAIM, n, &failed);
    if (failed) {
        fprintf(stderr, "bench_provision: %d creates failed\n", failed);
        bad = 1;
    }
    int64_t deadline = t0 + (int64_t)cfg.timeout_s * 1000000000;
    if (!wait_for(all_bound, deadline)) {
        fprintf(stderr, "bench_provision: only %d of %d claims %s within %d s\n", n_done(), n,
                cfg.no_binder ? "got a PV" : "Bound", cfg.timeout_s);
        bad = 1;
    }
    int64_t t_bound = now_ns();
    wait_for(all_released, deadline);
    long rss_bound = proc_kib(cfg.prov_pid, "VmRSS");
    /* 6.5 s: the intent record's idle write comes 5 s after the last
     * change, and belongs to this phase. */
    settle(&c, 6500, 120, &m1);
    double window = (double)(now_ns() - t0) / NS_PER_S;
    double cpu1 = proc_cpu_ms(cfg.prov_pid);
    roles_get(cfg.prov_pid, &r1);
    long rss = proc_kib(cfg.prov_pid, "VmRSS"), hwm = proc_kib(cfg.prov_pid, "VmHWM");
    long anon = proc_kib(cfg.prov_pid, "RssAnon"), file = proc_kib(cfg.prov_pid, "RssFile");

    int64_t *lat = calloc((size_t)n, sizeof(int64_t));
    int64_t *to_pv = calloc((size_t)n, sizeof(int64_t));
    int64_t *pv_to_bound = calloc((size_t)n, sizeof(int64_t));
    int nl = 0, np = 0;
    int64_t last = 0, last_pv = 0;
    pthread_mutex_lock(&w.mu);
    for (int i = 0; i < n; i++) {
        if (w.c[i].pv_added) {
            to_pv[np] = w.c[i].pv_added - w.c[i].added;
            if (w.c[i].pv_added > last_pv)
                last_pv = w.c[i].pv_added;
            if (w.c[i].bound)
                pv_to_bound[np] = w.c[i].bound - w.c[i].pv_added;
            np++;
        }
        int64_t done = cfg.no_binder ? w.c[i].pv_added : w.c[i].bound;
        if (!done)
            continue;
        lat[nl++] = done - w.c[i].added;
        if (done > last)
            last = done;
    }
    int in_progress_left = w.n_in_progress;
    pthread_mutex_unlock(&w.mu);
    qsort(lat, (size_t)nl, sizeof(int64_t), cmp_i64);
    qsort(to_pv, (size_t)np, sizeof(int64_t), cmp_i64);
    qsort(pv_to_bound, (size_t)np, sizeof(int64_t), cmp_i64);
    if (!last)
        last = t_bound;
    double span = (double)(last - t0) / NS_PER_S;
    struct usage u;
    usage_between(&m0, &m1, "create", "persistentvolumeclaims", n, nl ? nl : 1, &u);

    printf("  claims created: %d in %.2f s by %d client threads (%.0f/s)\n", n, create_s,
           cfg.threads, n / create_s);
    const char *what = cfg.no_binder ? "PV created" : "Bound";
    printf("  %s: %d of %d in %.2f s from the first create: %.2f volumes/s (targets: >= 500/s "
           "with a high QPS budget on 2 cores, >= 4.7/s at qps 5/burst 10)\n",
           what, nl, n, span, nl / span);
    printf("  create -> %s latency: p50 %.0f ms, p99 %.0f ms, max %.0f ms\n", what,
           pct_ms(lat, nl, 0.50), pct_ms(lat, nl, 0.99), pct_ms(lat, nl, 1.0));
    if (!cfg.no_binder) {
        printf(
            "    of which create -> PV created (the provisioner: intent record, CreateVolume, PV): "
            "p50 %.0f ms, p99 %.0f ms; all %d PVs in %.2f s: %.0f PVs/s\n",
            pct_ms(to_pv, np, 0.50), pct_ms(to_pv, np, 0.99), np, (double)(last_pv - t0) / NS_PER_S,
            np / ((double)(last_pv - t0) / NS_PER_S));
        printf("    and PV created -> claim Bound (the PV binder): p50 %.0f ms, p99 %.0f ms\n",
               pct_ms(pv_to_bound, np, 0.50), pct_ms(pv_to_bound, np, 0.99));
    }
    double per = nl ? nl : 1;
    printf(
        "  API requests per provisioned volume: %.2f writes = %.2f object writes (target: 1, the "
        "PV create, + the amortised intent record; of them %.2f intent record writes) + %.2f "
        "Events; %.2f reads (%.0f writes, %.0f reads in all, over %.1f s until the counters "
        "settled; the %d PVC creates of this benchmark not counted)\n",
        u.writes / per, (u.writes - u.event_writes) / per, u.lease_writes / per,
        u.event_writes / per, u.reads / per, u.writes, u.reads, window, n);
    printf("    per volume by verb: %s\n", u.detail);
    printf("  provisioner CPU: %.3f ms per provisioned volume (%.0f ms user+system over the "
           "phase)\n",
           (cpu1 - cpu0) / per, cpu1 - cpu0);
    roles_print(&r0, &r1, (int)per);
    printf("  provisioner memory with %d claims + %d PVs: VmRSS %.1f MiB when all were %s, "
           "%.1f MiB settled (RssAnon %.1f MiB, RssFile %.1f MiB); peak VmHWM %.1f MiB (target "
           "<= 10 MB with 1,000 PVCs)\n",
           n, n, rss_bound / 1024.0, what, rss / 1024.0, anon / 1024.0, file / 1024.0,
           hwm / 1024.0);
    int vols = driver_volumes();
    printf("  driver volumes: %d\n", vols);
    if (vols != n || in_progress_left) {
        fprintf(stderr,
                "bench_provision: driver holds %d volumes for %d claims; %d claims keep "
                "the in-progress finalizer\n",
                vols, n, in_progress_left);
        bad = 1;
    }
    fflush(stdout);

    if (cfg.no_binder)
        goto done; /* nobody would release the PVs */

    /* ---- deletion ---- */
    struct metrics m2, m3;
    metrics_get(&c, &m2);
    int64_t d0 = now_ns();
    double delete_s = run_parallel(OP_DELETE_CLAIM, n, &failed);
    if (failed) {
        fprintf(stderr, "bench_provision: %d deletes failed\n", failed);
        bad = 1;
    }
    deadline = d0 + (int64_t)cfg.timeout_s * 1000000000;
    if (!wait_for(all_deleted, deadline)) {
        fprintf(stderr, "bench_provision: %d of %d PVs, %d of %d PVCs deleted within %d s\n",
                w.n_pv_deleted, n, w.n_pvc_deleted, n, cfg.timeout_s);
        bad = 1;
    }
    while ((vols = driver_volumes()) != 0 && now_ns() < deadline)
        sleep_ms(20);
    settle(&c, 1500, 120, &m3);
    double cpu3 = proc_cpu_split(cfg.prov_pid, &sys3);
    struct roles r3;
    roles_get(cfg.prov_pid, &r3);
    int64_t dlast = 0;
    int nd = 0;
    pthread_mutex_lock(&w.mu);
    for (int i = 0; i < n; i++)
        if (w.c[i].pv_deleted) {
            nd++;
            if (w.c[i].pv_deleted > dlast)
                dlast = w.c[i].pv_deleted;
        }
    pthread_mutex_unlock(&w.mu);
    double dspan = dlast ? (double)(dlast - d0) / NS_PER_S : 0;
    usage_between(&m2, &m3, "delete", "persistentvolumeclaims", n, nd ? nd : 1, &u);
    printf("  claims deleted: %d in %.2f s by %d client threads\n", n, delete_s, cfg.threads);
    printf("  PVs deleted: %d of %d in %.2f s from the first delete: %.2f volumes/s\n", nd, n,
           dspan, dspan > 0 ? nd / dspan : 0);
    printf("  API requests per deleted volume: %.2f writes = %.2f object writes + %.2f Events; "
           "%.2f reads (the %d PVC deletes of this benchmark not counted)\n",
           u.writes / (nd ? nd : 1), (u.writes - u.event_writes) / (nd ? nd : 1),
           u.event_writes / (nd ? nd : 1), u.reads / (nd ? nd : 1), n);
    printf("    per volume by verb: %s\n", u.detail);
    printf("  provisioner CPU: %.3f ms per deleted volume; %.3f ms per provisioned + deleted "
           "volume, of which %.3f ms in the kernel (target <= 0.4 ms with a high budget)\n",
           (cpu3 - cpu1) / (nd ? nd : 1), (cpu3 - cpu0) / (nd ? nd : 1),
           (sys3 - sys0) / (nd ? nd : 1));
    roles_print(&r1, &r3, nd ? nd : 1);
    printf("  driver volumes left: %d\n", vols);
    if (vols != 0) {
        fprintf(stderr, "bench_provision: the driver still holds %d volumes\n", vols);
        bad = 1;
    }
    fflush(stdout);

done:
    atomic_store(&threads_seen.stop, true);
    if (sampling) {
        pthread_join(sampler, NULL);
        printf("  provisioner peak threads during the run: %ld\n", atomic_load(&threads_seen.peak));
    }
    atomic_store(&w.stop, true);
    pthread_join(wpvc.th, NULL);
    pthread_join(wpv.th, NULL);
    free(wpvc.line.p);
    free(wpv.line.p);
    client_free(&c);
    free(lat);
    free(to_pv);
    free(pv_to_bound);
    free(w.c);
    return bad;
}

static int cmd_fill(void)
{
    int f1 = 0, f2 = 0;
    double s1 = run_parallel(OP_FILL_PVC, cfg.count, &f1);
    double s2 = run_parallel(OP_FILL_PV, cfg.count, &f2);
    printf("  filled kube-lite: %d PVCs (%.0f/s) and %d PVs (%.0f/s) of %s, bound, "
           "~1 KB each (%d failures)\n",
           cfg.count, cfg.count / s1, cfg.count, cfg.count / s2, cfg.fill_driver, f1 + f2);
    return f1 + f2 ? 1 : 0;
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

static bool int_arg(const char *a, const char *name, int *dst)
{
    const char *v;
    if (!str_arg(a, name, &v))
        return false;
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (*end || x <= 0 || x > 100000000)
        die("%s: expected a positive number", a);
    *dst = (int)x;
    return true;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "run") != 0 && strcmp(argv[1], "fill") != 0)) {
        fprintf(stderr,
                "usage: %s run --url=URL --count=N --prov-pid=PID --state-dir=DIR [--threads=8] "
                "[--class=bench] [--timeout=600] [--no-binder [--driver=NAME]]\n"
                "           [--cacert=CA --token=T] [--audit-log=F --audit-user=NAME]\n"
                "       %s fill --url=URL --count=N [--threads=8] [--fill-driver=NAME]\n",
                argv[0], argv[0]);
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (str_arg(a, "--url", &cfg.url) || int_arg(a, "--count", &cfg.count) ||
            int_arg(a, "--threads", &cfg.threads) || int_arg(a, "--prov-pid", &cfg.prov_pid) ||
            str_arg(a, "--state-dir", &cfg.state_dir) || str_arg(a, "--class", &cfg.class) ||
            int_arg(a, "--timeout", &cfg.timeout_s) || str_arg(a, "--driver", &cfg.driver) ||
            str_arg(a, "--fill-driver", &cfg.fill_driver) || str_arg(a, "--cacert", &cfg.cacert) ||
            str_arg(a, "--token", &cfg.token) || str_arg(a, "--audit-log", &cfg.audit_log) ||
            str_arg(a, "--audit-user", &cfg.audit_user))
            continue;
        if (strcmp(a, "--no-binder") == 0) {
            cfg.no_binder = true;
            continue;
        }
        die("unknown argument %s", a);
    }
    if (!cfg.url || cfg.count <= 0)
        die("--url and --count are required");
    if (cfg.audit_log && !cfg.audit_user)
        die("--audit-log needs --audit-user");
    curl_global_init(CURL_GLOBAL_DEFAULT);
    int rc = strcmp(argv[1], "run") == 0 ? cmd_run() : cmd_fill();
    curl_global_cleanup();
    return rc;
}
