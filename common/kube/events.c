/*
 * Event recorder: core/v1 Events about objects, written by one background
 * thread so a worker never waits on the API to report something.
 *
 * Like client-go's recorder: an Event is named <object>.<hex unix nanos>;
 * the same (object, type, reason, message) seen again patches the existing
 * Event's count and lastTimestamp instead of creating another (a 404 on that
 * patch creates it afresh); each object may produce a burst of 25 events,
 * then one per 5 minutes; a full queue drops events (counted, logged at -v=2).
 * Events are written at background priority: under a client-side rate
 * limit they use only spare tokens, so at a low qps they wait (and, past
 * the queue's size, are dropped) instead of delaying the writes that bind
 * volumes. Upstream sends them through the same limiter as everything else.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

#define QUEUE_MAX   1000
#define BURST       25
#define REFILL      (300 * UTIL_SECOND)
#define MESSAGE_MAX 1024

struct pending {
    json_object *involved; /* involvedObject */
    char *ns;              /* where the Event lives */
    char *type, *reason, *message;
    char when[32];
    struct pending *next;
};

struct seen {
    char *name; /* the Event object's name */
    int count;
};

struct bucket {
    double tokens;
    util_duration last;
};

struct kube_recorder {
    kube_client *c;
    char *component;
    char *host;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    struct pending *head, *tail;
    size_t len;
    bool stop;
    bool draining;
    util_duration drain_until;
    atomic_ulong dropped;
    struct lh_table *seen;    /* aggregation key -> struct seen* (writer thread only) */
    struct lh_table *buckets; /* object key -> struct bucket* (under mu) */
};

static void free_seen(struct lh_entry *e)
{
    struct seen *s = (struct seen *)lh_entry_v(e);
    free(lh_entry_k(e));
    if (s)
        free(s->name);
    free(s);
}

static void free_bucket(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
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
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Writes one event: patch the aggregate when we have one, else create. */
static void write_event(kube_recorder *r, struct pending *p)
{
    const char *iname = kobj_str(p->involved, "name");
    const char *iuid = kobj_str(p->involved, "uid");
    char *akey = util_asprintf("%s|%s|%s|%s|%s|%s", p->ns, iname ? iname : "", iuid ? iuid : "",
                               p->type, p->reason, p->message);
    struct seen *s = NULL;
    kube_resp resp = {0};
    if (lh_table_lookup_ex(r->seen, akey, (void **)&s)) {
        s->count++;
        char *path = kube_path(&KUBE_EVENT, p->ns, s->name, NULL);
        json_object *patch = json_object_new_object();
        json_object_object_add(patch, "count", json_object_new_int(s->count));
        json_object_object_add(patch, "lastTimestamp", json_object_new_string(p->when));
        json_object_object_add(patch, "message", json_object_new_string(p->message));
        int rc =
            kube_request_prio(r->c, KUBE_PRIO_BACKGROUND, "PATCH", path,
                              kube_patch_content_type(KUBE_PATCH_STRATEGIC),
                              json_object_to_json_string_ext(patch, JSON_C_TO_STRING_PLAIN), &resp);
        json_object_put(patch);
        free(path);
        bool gone = rc < 0 && kube_is_not_found(&resp);
        kube_resp_clear(&resp);
        if (!gone) {
            if (rc < 0)
                obs_v(2, "event %s/%s: %s", p->ns, s->name, resp.message);
            free(akey);
            return;
        }
        lh_table_delete(r->seen, akey);
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char *name = util_asprintf("%s.%llx", iname ? iname : "object",
                               (unsigned long long)ts.tv_sec * 1000000000ull +
                                   (unsigned long long)ts.tv_nsec);
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
    int rc = kube_request_prio(r->c, KUBE_PRIO_BACKGROUND, "POST", coll, "application/json",
                               json_object_to_json_string_ext(ev, JSON_C_TO_STRING_PLAIN), &resp);
    free(coll);
    json_object_put(ev);
    if (rc == 0) {
        s = util_calloc(1, sizeof(*s));
        s->name = name;
        s->count = 1;
        lh_table_insert(r->seen, akey, s);
        akey = NULL;
        name = NULL;
    } else {
        obs_v(2, "event on %s: %s", iname ? iname : "?", resp.message);
    }
    kube_resp_clear(&resp);
    free(name);
    free(akey);
}

static void *run(void *arg)
{
    kube_recorder *r = arg;
    for (;;) {
        pthread_mutex_lock(&r->mu);
        while (!r->head && !r->stop)
            pthread_cond_wait(&r->cv, &r->mu);
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
            break;
    }
    return NULL;
}

kube_recorder *kube_recorder_new(kube_client *c, const char *component, const char *host)
{
    kube_recorder *r = util_calloc(1, sizeof(*r));
    r->c = c;
    r->component = util_strdup(component ? component : "");
    r->host = host ? util_strdup(host) : NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    r->seen = lh_kchar_table_new(256, free_seen);
    r->buckets = lh_kchar_table_new(256, free_bucket);
    if (pthread_create(&r->th, NULL, run, r) != 0)
        abort();
    return r;
}

/* Per-object spam filter: BURST events, then one per REFILL. Under mu. */
static bool allow(kube_recorder *r, const char *okey)
{
    struct bucket *b = NULL;
    util_duration now = util_now_mono();
    if (!lh_table_lookup_ex(r->buckets, okey, (void **)&b)) {
        b = util_calloc(1, sizeof(*b));
        b->tokens = BURST;
        b->last = now;
        lh_table_insert(r->buckets, util_strdup(okey), b);
    }
    b->tokens += (double)(now - b->last) / (double)REFILL;
    if (b->tokens > BURST)
        b->tokens = BURST;
    b->last = now;
    if (b->tokens < 1)
        return false;
    b->tokens -= 1;
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
    char *okey =
        util_asprintf("%s/%s", p->ns, kobj_str(meta, "name") ? kobj_str(meta, "name") : "");

    pthread_mutex_lock(&r->mu);
    bool ok = !r->stop && r->len < QUEUE_MAX && allow(r, okey);
    if (ok) {
        if (r->tail)
            r->tail->next = p;
        else
            r->head = p;
        r->tail = p;
        r->len++;
        pthread_cond_signal(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    free(okey);
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
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    while (r->head) {
        struct pending *n = r->head->next;
        pending_free(r->head);
        r->head = n;
    }
    lh_table_free(r->seen);
    lh_table_free(r->buckets);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r->component);
    free(r->host);
    free(r);
}
