/*
 * Event recorder: core/v1 Events about objects, written by one background
 * thread so a worker never waits on the API to report something.
 *
 * Like client-go's recorder: an Event is named <object>.<hex unix nanos>;
 * the same (object, type, reason, message) seen again patches the existing
 * Event's count and lastTimestamp instead of creating another (a 404 on that
 * patch creates it afresh); each object may produce a burst of 25 events,
 * then one per 5 minutes; a full queue drops events (counted, logged at -v=2).
 * Both memories (which Event to patch, each object's burst) hold the last
 * 4,096 keys, as client-go's LRU caches do, in two fixed tables of hashes
 * allocated once: a burst of events for thousands of objects leaves no
 * small allocations behind to pin the allocator's pages.
 * Events are written at background priority: under a client-side rate
 * limit they use only spare tokens, so at a low qps they wait (and, past
 * the queue's size, are dropped) instead of delaying the writes that bind
 * volumes. Upstream sends them through the same limiter as everything else.
 * The writer thread runs only while there is writing to do: after IDLE_EXIT
 * with nothing queued it exits (an idle thread would keep glibc's malloc
 * cache of its last burst for good) and the next event starts another.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

#define QUEUE_MAX   1000
#define BURST       25
#define REFILL      (300 * UTIL_SECOND)
#define MESSAGE_MAX 1024
#define CACHE_WAYS  4
#define CACHE_SETS  1024 /* x CACHE_WAYS: client-go's 4,096 entries */
#define CACHE_SLOTS ((size_t)CACHE_SETS * CACHE_WAYS)
#define IDLE_EXIT   (30 * UTIL_SECOND) /* as the work queues' pools */

struct pending {
    json_object *involved; /* involvedObject */
    char *ns;              /* where the Event lives */
    char *type, *reason, *message;
    char when[32];
    struct pending *next;
};

/*
 * One entry of a set-associative cache keyed by a 64-bit hash; the least
 * recently used entry of a full set makes room. `i` and `d` are the
 * payload: for an Event, its name's timestamp suffix and its count; for an
 * object's burst, the time of the last refill and the tokens left.
 */
struct slot {
    uint64_t key;
    uint64_t used; /* 0: empty */
    int64_t i;
    double d;
};

struct cache {
    struct slot *slots; /* CACHE_SETS * CACHE_WAYS */
    uint64_t clock;
};

struct kube_recorder {
    kube_client *c;
    char *component;
    char *host;
    pthread_t th; /* the writer, while `running` */
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* the writer waits for an event or stop (monotonic) */
    pthread_cond_t start_cv; /* `starting` dropped to 0 */
    struct pending *head, *tail;
    size_t len;
    /* A writer thread is there and looks at the queue again before it
     * leaves; set by the kube_event that starts one, cleared by a writer
     * that leaves idle (or a start that failed). */
    bool running;
    int starting; /* writers created but not yet in `th` */
    util_duration idle_exit;
    bool stop;
    bool draining;
    util_duration drain_until;
    atomic_ulong dropped;
    struct cache seen;    /* (object, type, reason, message) -> Event (writer thread only) */
    struct cache buckets; /* object -> its burst (under mu) */
};

/* The entry for `key`, or NULL. */
static struct slot *cache_find(struct cache *c, uint64_t key)
{
    key |= 1; /* never 0, so an empty slot never matches */
    struct slot *set = &c->slots[(key >> 1) % CACHE_SETS * CACHE_WAYS];
    for (int w = 0; w < CACHE_WAYS; w++)
        if (set[w].used && set[w].key == key) {
            set[w].used = ++c->clock;
            return &set[w];
        }
    return NULL;
}

/* A fresh entry for `key` (zeroed payload), in place of the set's least
 * recently used one when the set is full. */
static struct slot *cache_add(struct cache *c, uint64_t key)
{
    key |= 1;
    struct slot *set = &c->slots[(key >> 1) % CACHE_SETS * CACHE_WAYS];
    struct slot *victim = &set[0];
    for (int w = 0; w < CACHE_WAYS; w++)
        if (set[w].used < victim->used)
            victim = &set[w];
    *victim = (struct slot){.key = key, .used = ++c->clock};
    return victim;
}

static void cache_drop(struct slot *s)
{
    *s = (struct slot){0};
}

/* The cache key of n strings (NULL as ""), each ended by a separator. */
static uint64_t fields_key(const char *const *parts, size_t n)
{
    uint64_t h = UTIL_HASH_INIT;
    for (size_t i = 0; i < n; i++)
        h = util_hash_byte(util_hash_str(h, parts[i]), 0xff);
    return h;
}

/* The Event's name: the object's name and the creation time in hex nanoseconds. */
static char *event_name(const char *iname, int64_t nanos)
{
    return util_asprintf("%s.%llx", iname ? iname : "object", (unsigned long long)nanos);
}

static void pending_free(struct pending *p)
{
    json_object_put(p->involved);
    free(p->ns);
    free(p->type);
    free(p->reason);
    free(p->message);
    free(p);
}

static void now_rfc3339(char *buf, size_t len)
{
    util_time_rfc3339(time(NULL), buf, len);
}

/* Writes one event: patch the aggregate when we have one, else create. */
static void write_event(kube_recorder *r, struct pending *p)
{
    const char *iname = kobj_str(p->involved, "name");
    const char *iuid = kobj_str(p->involved, "uid");
    const char *const parts[] = {p->ns, iname, iuid, p->type, p->reason, p->message};
    uint64_t akey = fields_key(parts, sizeof(parts) / sizeof(parts[0]));
    kube_resp resp = {0};
    struct slot *s = cache_find(&r->seen, akey);
    if (s) {
        s->d += 1;
        resp.skip_body = true; /* nothing reads the Event written */
        char *ename = event_name(iname, s->i);
        char *path = kube_path(&KUBE_EVENT, p->ns, ename, NULL);
        json_object *patch = json_object_new_object();
        json_object_object_add(patch, "count", json_object_new_int((int)s->d));
        json_object_object_add(patch, "lastTimestamp", json_object_new_string(p->when));
        json_object_object_add(patch, "message", json_object_new_string(p->message));
        char *text = kobj_to_text(patch, NULL);
        json_object_put(patch);
        int rc = kube_request_prio(r->c, KUBE_PRIO_BACKGROUND, "PATCH", path,
                                   kube_patch_content_type(KUBE_PATCH_STRATEGIC), text, &resp);
        free(text);
        free(path);
        bool gone = rc < 0 && kube_is_not_found(&resp);
        if (!gone && rc < 0)
            obs_v(2, "event %s/%s: %s", p->ns, ename, resp.message);
        kube_resp_clear(&resp);
        free(ename);
        if (!gone)
            return;
        cache_drop(s);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int64_t nanos = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
    char *name = event_name(iname, nanos);
    json_object *ev = json_object_new_object();
    json_object_object_add(ev, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(ev, "kind", json_object_new_string("Event"));
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "name", json_object_new_string(name));
    json_object_object_add(meta, "namespace", json_object_new_string(p->ns));
    json_object_object_add(ev, "metadata", meta);
    json_object_object_add(ev, "involvedObject", json_object_get(p->involved));
    json_object_object_add(ev, "reason", json_object_new_string(p->reason));
    json_object_object_add(ev, "message", json_object_new_string(p->message));
    json_object *src = json_object_new_object();
    json_object_object_add(src, "component", json_object_new_string(r->component));
    if (r->host)
        json_object_object_add(src, "host", json_object_new_string(r->host));
    json_object_object_add(ev, "source", src);
    json_object_object_add(ev, "firstTimestamp", json_object_new_string(p->when));
    json_object_object_add(ev, "lastTimestamp", json_object_new_string(p->when));
    json_object_object_add(ev, "count", json_object_new_int(1));
    json_object_object_add(ev, "type", json_object_new_string(p->type));
    json_object_object_add(ev, "reportingComponent", json_object_new_string(r->component));
    json_object_object_add(ev, "reportingInstance", json_object_new_string(r->host ? r->host : ""));
    char *coll = kube_path(&KUBE_EVENT, p->ns, NULL, NULL);
    resp.skip_body = true;
    char *text = kobj_to_text(ev, NULL);
    json_object_put(ev);
    int rc = kube_request_prio(r->c, KUBE_PRIO_BACKGROUND, "POST", coll, "application/json", text,
                               &resp);
    free(text);
    free(coll);
    if (rc == 0) {
        s = cache_add(&r->seen, akey);
        s->i = nanos;
        s->d = 1;
    } else {
        obs_v(2, "event on %s: %s", iname ? iname : "?", resp.message);
    }
    kube_resp_clear(&resp);
    free(name);
}

/*
 * Writes queued events until stop, then what is left until drain_until:
 * returns false. Or, when idle_exit passed with nothing queued and no stop,
 * clears `running` and returns true: the caller leaves, and the next event
 * starts a writer. One writer at a time (`seen` is its own).
 */
static bool write_queued(kube_recorder *r)
{
    for (;;) {
        pthread_mutex_lock(&r->mu);
        util_duration idle_until = util_now_mono() + r->idle_exit;
        while (!r->head && !r->stop) {
            struct timespec ts = {.tv_sec = (time_t)(idle_until / UTIL_SECOND),
                                  .tv_nsec = (long)(idle_until % UTIL_SECOND)};
            if (pthread_cond_timedwait(&r->cv, &r->mu, &ts) == ETIMEDOUT && !r->head && !r->stop) {
                r->running = false;
                pthread_mutex_unlock(&r->mu);
                return true;
            }
        }
        struct pending *p = r->head;
        bool out_of_time = r->draining && util_now_mono() > r->drain_until;
        if (p && !out_of_time) {
            r->head = p->next;
            if (!r->head)
                r->tail = NULL;
            r->len--;
        } else {
            p = NULL;
        }
        bool stop = r->stop && (!r->head || out_of_time) && !p;
        pthread_mutex_unlock(&r->mu);
        if (p) {
            write_event(r, p);
            pending_free(p);
        }
        if (stop)
            return false;
    }
}

static void *run(void *arg)
{
    kube_recorder *r = arg;
    util_thread_name("events");
    /* Known before this writer can leave, so the handle is always the
     * latest writer's. */
    pthread_mutex_lock(&r->mu);
    r->th = pthread_self();
    if (--r->starting == 0)
        pthread_cond_broadcast(&r->start_cv);
    pthread_mutex_unlock(&r->mu);
    if (write_queued(r))
        util_thread_leave_trimmed();
    return NULL;
}

/* Starts a writer for the kube_event that set `running` (not under mu). */
static void start_writer(kube_recorder *r)
{
    pthread_t th;
    if (pthread_create(&th, NULL, run, r) == 0)
        return;
    /* The events stay queued: the next event tries again, and free writes
     * them if none could be started by then. */
    pthread_mutex_lock(&r->mu);
    r->running = false;
    if (--r->starting == 0)
        pthread_cond_broadcast(&r->start_cv);
    pthread_mutex_unlock(&r->mu);
    obs_warn("events: no writer thread could be started; the events wait");
}

kube_recorder *kube_recorder_new(kube_client *c, const char *component, const char *host)
{
    kube_recorder *r = util_calloc(1, sizeof(*r));
    r->c = c;
    r->component = util_strdup(component ? component : "");
    r->host = host ? util_strdup(host) : NULL;
    r->idle_exit = IDLE_EXIT;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_cond_init(&r->start_cv, NULL);
    r->seen.slots = util_calloc(CACHE_SLOTS, sizeof(struct slot));
    r->buckets.slots = util_calloc(CACHE_SLOTS, sizeof(struct slot));
    /* No writer yet: the first event starts it. */
    return r;
}

/* Tests: how long the writer waits for an event before it leaves; set
 * before the first event (not declared in kube.h). */
void kube_recorder__set_idle_exit(kube_recorder *r, util_duration d)
{
    pthread_mutex_lock(&r->mu);
    r->idle_exit = d > 0 ? d : IDLE_EXIT;
    pthread_mutex_unlock(&r->mu);
}

/* Per-object spam filter: BURST events, then one per REFILL. Under mu. */
static bool allow(kube_recorder *r, uint64_t okey)
{
    util_duration now = util_now_mono();
    struct slot *b = cache_find(&r->buckets, okey);
    if (!b) {
        b = cache_add(&r->buckets, okey);
        b->d = BURST;
        b->i = now;
    }
    b->d += (double)(now - b->i) / (double)REFILL;
    if (b->d > BURST)
        b->d = BURST;
    b->i = now;
    if (b->d < 1)
        return false;
    b->d -= 1;
    return true;
}

void kube_event(kube_recorder *r, const json_object *obj, const char *type, const char *reason,
                const char *fmt, ...)
{
    if (!r || !obj)
        return;
    char msg[MESSAGE_MAX + 1];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    json_object *meta = kobj_meta(obj);
    const char *ns = kobj_str(meta, "namespace");
    json_object *inv = json_object_new_object();
    const char *v;
    if ((v = kobj_str(obj, "kind")))
        json_object_object_add(inv, "kind", json_object_new_string(v));
    if (ns)
        json_object_object_add(inv, "namespace", json_object_new_string(ns));
    if ((v = kobj_str(meta, "name")))
        json_object_object_add(inv, "name", json_object_new_string(v));
    if ((v = kobj_str(meta, "uid")))
        json_object_object_add(inv, "uid", json_object_new_string(v));
    if ((v = kobj_str(obj, "apiVersion")))
        json_object_object_add(inv, "apiVersion", json_object_new_string(v));
    if ((v = kobj_str(meta, "resourceVersion")))
        json_object_object_add(inv, "resourceVersion", json_object_new_string(v));

    struct pending *p = util_calloc(1, sizeof(*p));
    p->involved = inv;
    /* Events about cluster-scoped objects live in "default", as client-go puts them. */
    p->ns = util_strdup(ns && *ns ? ns : "default");
    p->type = util_strdup(type);
    p->reason = util_strdup(reason);
    p->message = util_strdup(msg);
    now_rfc3339(p->when, sizeof(p->when));
    const char *const object[] = {p->ns, kobj_str(meta, "name")};
    uint64_t okey = fields_key(object, 2);

    pthread_mutex_lock(&r->mu);
    bool ok = !r->stop && r->len < QUEUE_MAX && allow(r, okey);
    bool start = false;
    if (ok) {
        if (r->tail)
            r->tail->next = p;
        else
            r->head = p;
        r->tail = p;
        r->len++;
        pthread_cond_signal(&r->cv);
        /* No writer (none yet, or it left after a quiet while): this call
         * starts one, once the lock is dropped. A writer that is there
         * sees the event before it may leave (it looks under mu). */
        if (!r->running) {
            r->running = true;
            r->starting++;
            start = true;
        }
    }
    pthread_mutex_unlock(&r->mu);
    if (start)
        start_writer(r);
    if (!ok) {
        atomic_fetch_add(&r->dropped, 1);
        obs_v(2, "event dropped (%s %s): queue full or object over its rate", type, reason);
        pending_free(p);
    }
}

void kube_recorder_free(kube_recorder *r, util_duration timeout)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stop = true;
    r->draining = true;
    r->drain_until = util_now_mono() + timeout;
    pthread_cond_broadcast(&r->cv);
    /* A writer being started is waited for; with stop set none leaves idle
     * and no event starts another, so `running` says whom to join. */
    while (r->starting > 0)
        pthread_cond_wait(&r->start_cv, &r->mu);
    bool writer = r->running;
    pthread_t th = r->th;
    pthread_mutex_unlock(&r->mu);
    if (writer)
        pthread_join(th, NULL);
    else
        (void)write_queued(r); /* no writer could be started: write them here */
    while (r->head) {
        struct pending *n = r->head->next;
        pending_free(r->head);
        r->head = n;
    }
    free(r->seen.slots);
    free(r->buckets.slots);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    pthread_cond_destroy(&r->start_cv);
    free(r->component);
    free(r->host);
    free(r);
}
