/*
 * wq: client-go's workqueue (Type + DelayingQueue + RateLimitingQueue with
 * the per-item exponential failure limiter) behind one mutex.
 *
 * Every key that the queue knows about has one entry in a hash table; the
 * entry carries all of that key's state (waiting, re-added while processing,
 * processing, failure count, delayed deadline), so the FIFO and the timer heap
 * link entries instead of copying keys. An entry is freed as soon as no state
 * is left. Delayed keys sit in a min-heap served by one timer thread per queue;
 * that thread also joins the pool's exited workers, so a pool may shrink to
 * no thread at all: a key added, or a delayed one coming due, starts one.
 * Metric updates are collected under the lock and applied after it is
 * released, so the queue never holds its lock while calling into the registry.
 */
#include "wq/wq.h"

#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define POOL_STACK         (8u << 20) /* glibc's default (RLIMIT_STACK); only touched pages cost */
#define DEFAULT_BASE_DELAY (5 * UTIL_MS)
#define DEFAULT_MAX_DELAY  (1000 * UTIL_SECOND)
#define NOT_IN_HEAP        SIZE_MAX
#define MIN_BUCKETS        64

typedef struct entry {
    struct entry *hnext; /* hash chain */
    struct entry *qnext; /* FIFO link, valid while queued */
    uint64_t hash;
    char *key;
    bool queued;     /* in the FIFO */
    bool dirty;      /* added and not yet handed out (client-go's dirty set) */
    bool processing; /* handed out by wq_get, no wq_done yet */
    int failures;
    size_t heap_idx;          /* NOT_IN_HEAP unless delayed */
    util_duration ready_at;   /* delayed: when to add */
    uint64_t seq;             /* delayed: tie-break so equal deadlines stay FIFO */
    util_duration added_at;   /* when it became dirty (queue duration) */
    util_duration started_at; /* when wq_get handed it out (work duration) */
} entry;

/* Metric changes made under the lock, applied after it is dropped. */
typedef struct delta {
    double depth;
    double adds;
    double retries;
    double queue_wait; /* seconds; < 0: nothing to observe */
    double work_time;  /* seconds; < 0: nothing to observe */
} delta;

struct wq {
    obs_registry *reg; /* where the render-time collector is registered */
    pthread_mutex_t mu;
    pthread_cond_t cv;       /* getters wait for a key or shutdown */
    pthread_cond_t timer_cv; /* the timer thread waits for its next deadline */
    pthread_t timer;

    char *name;
    util_duration base_delay;
    util_duration max_delay;

    entry **buckets;
    size_t n_buckets; /* power of two */
    size_t n_entries;

    entry *head, *tail; /* FIFO of waiting keys */
    size_t len;

    entry **heap; /* delayed keys, earliest ready_at first */
    size_t heap_len, heap_cap;
    uint64_t next_seq;

    bool shutting_down;
    bool drain;

    obs_metric *m_depth, *m_adds, *m_retries, *m_queue_dur, *m_work_dur;
    obs_metric *m_unfinished, *m_longest;

    /* the elastic worker pool (wq_pool_start), under mu */
    bool pool_on;
    wq_pool_opts pool;
    int pool_threads, pool_waiting, pool_peak;
    pthread_cond_t pool_exit_cv; /* pool_threads or pool_reaping dropped */
    struct pool_thread *reap;    /* threads that left, to join (a list) */
    int pool_reaping;            /* taken off `reap`, being joined */
    bool pool_trim;              /* the pool went quiet: trim once `reap` is joined */
};

/*
 * A pool thread runs on a stack of our own: glibc keeps the stacks of
 * exited threads it allocated (up to 40 MiB) with their touched pages, so
 * after a burst the memory of a hundred workers would stay dirty for the
 * process's life; ours is unmapped once the thread is joined.
 */
struct pool_thread {
    wq *q;
    pthread_t id;
    void *stack; /* NULL: glibc's own */
    size_t size;
    struct pool_thread *next; /* in q->reap */
};

static void pool_spawn_locked(wq *q);
static void reap_unlocked(wq *q, bool trim);
static void reap_all(wq *q);

/* ---- entries ------------------------------------------------------------ */

static uint64_t hash_key(const char *s)
{
    return util_hash_str(UTIL_HASH_INIT, s);
}

static entry *lookup(const wq *q, const char *key)
{
    uint64_t h = hash_key(key);

    for (entry *e = q->buckets[h & (q->n_buckets - 1)]; e != NULL; e = e->hnext)
        if (e->hash == h && strcmp(e->key, key) == 0)
            return e;
    return NULL;
}

static void grow(wq *q)
{
    size_t n = q->n_buckets * 2;
    entry **b = util_calloc(n, sizeof(entry *));

    for (size_t i = 0; i < q->n_buckets; i++) {
        entry *e = q->buckets[i];
        while (e != NULL) {
            entry *next = e->hnext;
            e->hnext = b[e->hash & (n - 1)];
            b[e->hash & (n - 1)] = e;
            e = next;
        }
    }
    free(q->buckets);
    q->buckets = b;
    q->n_buckets = n;
}

static entry *lookup_or_create(wq *q, const char *key)
{
    entry *e = lookup(q, key);
    if (e != NULL)
        return e;

    if (q->n_entries >= q->n_buckets)
        grow(q);
    e = util_calloc(1, sizeof(*e));
    e->key = util_strdup(key);
    e->hash = hash_key(key);
    e->heap_idx = NOT_IN_HEAP;
    e->hnext = q->buckets[e->hash & (q->n_buckets - 1)];
    q->buckets[e->hash & (q->n_buckets - 1)] = e;
    q->n_entries++;
    return e;
}

/* Frees `e` once nothing refers to it; keeps the table small for churny keys. */
static void release_if_idle(wq *q, entry *e)
{
    if (e->dirty || e->queued || e->processing || e->failures > 0 || e->heap_idx != NOT_IN_HEAP)
        return;

    entry **pp = &q->buckets[e->hash & (q->n_buckets - 1)];
    while (*pp != e)
        pp = &(*pp)->hnext;
    *pp = e->hnext;
    q->n_entries--;
    free(e->key);
    free(e);
}

/* ---- FIFO --------------------------------------------------------------- */

static void fifo_push(wq *q, entry *e)
{
    e->queued = true;
    e->qnext = NULL;
    if (q->tail != NULL)
        q->tail->qnext = e;
    else
        q->head = e;
    q->tail = e;
    q->len++;
    pthread_cond_signal(&q->cv);
    /* More keys wait than workers do (threads just started count as not
     * waiting yet, so a burst grows the pool by its size): one more worker,
     * within the pool's maximum. */
    if (q->pool_on && !q->shutting_down && q->len > (size_t)q->pool_waiting &&
        q->pool_threads < q->pool.max_workers)
        pool_spawn_locked(q);
}

static entry *fifo_pop(wq *q)
{
    entry *e = q->head;

    q->head = e->qnext;
    if (q->head == NULL)
        q->tail = NULL;
    e->qnext = NULL;
    e->queued = false;
    q->len--;
    return e;
}

/* ---- timer heap --------------------------------------------------------- */

static bool heap_less(const entry *a, const entry *b)
{
    return a->ready_at < b->ready_at || (a->ready_at == b->ready_at && a->seq < b->seq);
}

static void heap_set(wq *q, size_t i, entry *e)
{
    q->heap[i] = e;
    e->heap_idx = i;
}

static void heap_up(wq *q, size_t i)
{
    entry *e = q->heap[i];

    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!heap_less(e, q->heap[parent]))
            break;
        heap_set(q, i, q->heap[parent]);
        i = parent;
    }
    heap_set(q, i, e);
}

static void heap_down(wq *q, size_t i)
{
    entry *e = q->heap[i];

    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= q->heap_len)
            break;
        if (c + 1 < q->heap_len && heap_less(q->heap[c + 1], q->heap[c]))
            c++;
        if (!heap_less(q->heap[c], e))
            break;
        heap_set(q, i, q->heap[c]);
        i = c;
    }
    heap_set(q, i, e);
}

static void heap_push(wq *q, entry *e)
{
    if (q->heap_len == q->heap_cap) {
        size_t cap = q->heap_cap != 0 ? q->heap_cap * 2 : 16;
        entry **h = util_calloc(cap, sizeof(entry *));
        if (q->heap_len > 0)
            memcpy(h, q->heap, q->heap_len * sizeof(entry *));
        free(q->heap);
        q->heap = h;
        q->heap_cap = cap;
    }
    heap_set(q, q->heap_len++, e);
    heap_up(q, e->heap_idx);
}

static entry *heap_pop(wq *q)
{
    entry *top = q->heap[0];

    q->heap_len--;
    if (q->heap_len > 0) {
        heap_set(q, 0, q->heap[q->heap_len]);
        heap_down(q, 0);
    }
    top->heap_idx = NOT_IN_HEAP;
    return top;
}

/* ---- core (called with q->mu held) -------------------------------------- */

static void delta_init(delta *d)
{
    memset(d, 0, sizeof(*d));
    d->queue_wait = -1;
    d->work_time = -1;
}

static double seconds(util_duration d)
{
    return (double)d / (double)UTIL_SECOND;
}

static void add_locked(wq *q, entry *e, delta *d)
{
    /* Already dirty: either waiting (dedup) or due to run again after done. */
    if (q->shutting_down || e->dirty)
        return;
    e->dirty = true;
    e->added_at = util_now_mono();
    d->adds++;
    d->depth++;
    /* A key being processed waits for wq_done so it never runs twice at once. */
    if (!e->processing)
        fifo_push(q, e);
}

static void add_after_locked(wq *q, entry *e, util_duration delay, delta *d)
{
    d->retries++; /* client-go counts every AddAfter as a retry, even delay 0 */
    if (delay <= 0) {
        add_locked(q, e, d);
        return;
    }

    util_duration now = util_now_mono();
    util_duration at = delay < INT64_MAX - now ? now + delay : INT64_MAX; /* "forever" */
    if (e->heap_idx != NOT_IN_HEAP) {
        /* Already delayed: the earlier deadline wins, as in client-go. */
        if (at < e->ready_at) {
            e->ready_at = at;
            heap_up(q, e->heap_idx);
            if (e->heap_idx == 0)
                pthread_cond_signal(&q->timer_cv);
        }
        return;
    }
    e->ready_at = at;
    e->seq = q->next_seq++;
    heap_push(q, e);
    if (e->heap_idx == 0)
        pthread_cond_signal(&q->timer_cv);
}

static util_duration backoff_locked(const wq *q, const entry *e)
{
    int n = e != NULL ? e->failures : 0;

    /* base << n without overflowing int64 */
    if (n >= 62 || q->base_delay > (INT64_MAX >> n))
        return q->max_delay;
    util_duration b = q->base_delay << n;
    return b < q->max_delay ? b : q->max_delay;
}

static void shutdown_locked(wq *q, bool drain, delta *d)
{
    q->drain = q->shutting_down ? (q->drain && drain) : drain;
    q->shutting_down = true;

    while (q->heap_len > 0)
        release_if_idle(q, heap_pop(q));

    if (!q->drain) {
        while (q->head != NULL)
            (void)fifo_pop(q);
        /* Drop waiting keys and re-adds pending behind a processing worker. */
        for (size_t i = 0; i < q->n_buckets; i++) {
            entry *e = q->buckets[i];
            while (e != NULL) {
                entry *next = e->hnext;
                if (e->dirty) {
                    e->dirty = false;
                    d->depth--;
                    release_if_idle(q, e);
                }
                e = next;
            }
        }
    }
    pthread_cond_broadcast(&q->cv);
    pthread_cond_signal(&q->timer_cv);
}

/* ---- metrics ------------------------------------------------------------ */

static void apply(wq *q, const delta *d)
{
    const char *v[] = {q->name};

    if (q->m_depth != NULL && d->depth != 0)
        obs_gauge_add(q->m_depth, v, d->depth);
    if (q->m_adds != NULL && d->adds != 0)
        obs_counter_add(q->m_adds, v, d->adds);
    if (q->m_retries != NULL && d->retries != 0)
        obs_counter_add(q->m_retries, v, d->retries);
    if (q->m_queue_dur != NULL && d->queue_wait >= 0)
        obs_histogram_observe(q->m_queue_dur, v, d->queue_wait);
    if (q->m_work_dur != NULL && d->work_time >= 0)
        obs_histogram_observe(q->m_work_dur, v, d->work_time);
}

/* Render-time collector: in-progress work, like client-go's updateUnfinishedWork. */
static void collect(void *ud)
{
    wq *q = ud;
    double total = 0, longest = 0;

    pthread_mutex_lock(&q->mu);
    util_duration now = util_now_mono();
    for (size_t i = 0; i < q->n_buckets; i++) {
        for (const entry *e = q->buckets[i]; e != NULL; e = e->hnext) {
            if (!e->processing)
                continue;
            double age = seconds(now - e->started_at);
            total += age;
            if (age > longest)
                longest = age;
        }
    }
    pthread_mutex_unlock(&q->mu);

    const char *v[] = {q->name};
    if (q->m_unfinished != NULL)
        obs_gauge_set(q->m_unfinished, v, total);
    if (q->m_longest != NULL)
        obs_gauge_set(q->m_longest, v, longest);
}

static void create_metrics(wq *q, obs_registry *r)
{
    /*
     * client-go's ExponentialBuckets(10e-9, 10, 10), 1e-8 s .. 10 s, computed
     * by the same repeated multiplication so the le="..." labels come out
     * exactly as upstream's (e.g. 9.999999999999999e-06), which queries match.
     */
    static const char *const labels[] = {"name", NULL};
    double buckets[10];
    const size_t nb = sizeof(buckets) / sizeof(buckets[0]);
    buckets[0] = 10e-9;
    for (size_t i = 1; i < nb; i++)
        buckets[i] = buckets[i - 1] * 10;

    /* Help texts are upstream's (k8s.io/component-base workqueue metrics). */
    q->m_depth = obs_gauge_new(r, "workqueue_depth", "Current depth of workqueue", labels);
    q->m_adds = obs_counter_new(r, "workqueue_adds_total",
                                "Total number of adds handled by workqueue", labels);
    q->m_queue_dur =
        obs_histogram_new(r, "workqueue_queue_duration_seconds",
                          "How long in seconds an item stays in workqueue before being requested.",
                          labels, buckets, nb);
    q->m_work_dur = obs_histogram_new(
        r, "workqueue_work_duration_seconds",
        "How long in seconds processing an item from workqueue takes.", labels, buckets, nb);
    q->m_unfinished = obs_gauge_new(
        r, "workqueue_unfinished_work_seconds",
        "How many seconds of work has done that is in progress and hasn't been observed by "
        "work_duration. Large values indicate stuck threads. One can deduce the number of stuck "
        "threads by observing the rate at which this increases.",
        labels);
    q->m_longest = obs_gauge_new(
        r, "workqueue_longest_running_processor_seconds",
        "How many seconds has the longest running processor for workqueue been running.", labels);
    q->m_retries = obs_counter_new(r, "workqueue_retries_total",
                                   "Total number of retries handled by workqueue", labels);

    /* Series exist from the start, as with client-go's WithLabelValues. */
    const char *v[] = {q->name};
    if (q->m_depth != NULL)
        obs_gauge_add(q->m_depth, v, 0);
    if (q->m_adds != NULL)
        obs_counter_add(q->m_adds, v, 0);
    if (q->m_retries != NULL)
        obs_counter_add(q->m_retries, v, 0);
}

/* ---- timer thread ------------------------------------------------------- */

static struct timespec mono_timespec(util_duration t)
{
    struct timespec ts = {
        .tv_sec = (time_t)(t / UTIL_SECOND),
        .tv_nsec = (long)(t % UTIL_SECOND),
    };
    return ts;
}

/*
 * The timer thread moves delayed keys to the FIFO when they come due (a key
 * pushed there starts a pool worker when none waits, also when the pool had
 * shrunk to none), and joins the pool's workers that left: a worker cannot
 * join itself, and what its malloc cache held only goes back to the
 * allocator once it has exited, so the trim after a burst happens here,
 * after the join.
 */
static void *timer_main(void *arg)
{
    wq *q = arg;
    util_thread_name("t:%s", q->name);

    pthread_mutex_lock(&q->mu);
    while (!q->shutting_down) {
        delta d;
        delta_init(&d);
        util_duration now = util_now_mono();
        while (q->heap_len > 0 && q->heap[0]->ready_at <= now) {
            entry *e = heap_pop(q);
            add_locked(q, e, &d);
            release_if_idle(q, e);
        }
        if (d.adds != 0) {
            /* Metrics outside the lock; then look at the heap afresh. */
            pthread_mutex_unlock(&q->mu);
            apply(q, &d);
            pthread_mutex_lock(&q->mu);
            continue;
        }
        if (q->reap != NULL) {
            bool trim = q->pool_trim;
            q->pool_trim = false;
            reap_unlocked(q, trim); /* unlocks, joins, locks again */
            continue;
        }
        util_duration wake = q->heap_len > 0 ? q->heap[0]->ready_at : 0;
        /* Keys wait and no worker could be started (thread limit): try
         * again each second rather than leave them until the next add. */
        if (q->pool_on && q->len > 0 && q->pool_threads == 0) {
            pool_spawn_locked(q);
            if (q->pool_threads == 0 && (wake == 0 || wake > now + UTIL_SECOND))
                wake = now + UTIL_SECOND;
        }
        if (wake == 0) {
            pthread_cond_wait(&q->timer_cv, &q->mu);
        } else {
            struct timespec ts = mono_timespec(wake);
            pthread_cond_timedwait(&q->timer_cv, &q->mu, &ts);
        }
    }
    pthread_mutex_unlock(&q->mu);
    return NULL;
}

/* ---- API ---------------------------------------------------------------- */

wq *wq_new(const wq_opts *opts)
{
    static const wq_opts none = {0};
    if (opts == NULL)
        opts = &none;

    wq *q = util_calloc(1, sizeof(*q));
    q->name = util_strdup(opts->name != NULL ? opts->name : "");
    q->base_delay = opts->base_delay > 0 ? opts->base_delay : DEFAULT_BASE_DELAY;
    q->max_delay = opts->max_delay > 0 ? opts->max_delay : DEFAULT_MAX_DELAY;
    q->n_buckets = MIN_BUCKETS;
    q->buckets = util_calloc(q->n_buckets, sizeof(entry *));

    /* Deadlines are monotonic so wall-clock steps cannot stall delayed keys. */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->cv, &ca);
    pthread_cond_init(&q->timer_cv, &ca);
    pthread_cond_init(&q->pool_exit_cv, NULL);
    pthread_condattr_destroy(&ca);
    /* Before the timer thread starts, which reads the metric pointers. */
    if (opts->metrics != NULL)
        create_metrics(q, opts->metrics);

    if (pthread_create(&q->timer, NULL, timer_main, q) != 0) {
        pthread_cond_destroy(&q->pool_exit_cv);
        pthread_cond_destroy(&q->timer_cv);
        pthread_cond_destroy(&q->cv);
        pthread_mutex_destroy(&q->mu);
        free(q->buckets);
        free(q->name);
        free(q);
        return NULL;
    }
    /* Last: from here on a render may run the collector on this queue. */
    if (opts->metrics != NULL)
        obs_registry_on_render(opts->metrics, collect, q);
    q->reg = opts->metrics;
    return q;
}

/* The registry must outlive the queue: the collector is removed here. */
void wq_free(wq *q)
{
    if (q == NULL)
        return;
    obs_registry_off_render(q->reg, collect, q);

    delta d;
    delta_init(&d);
    pthread_mutex_lock(&q->mu);
    shutdown_locked(q, false, &d);
    pthread_mutex_unlock(&q->mu);
    pthread_join(q->timer, NULL);

    for (size_t i = 0; i < q->n_buckets; i++) {
        entry *e = q->buckets[i];
        while (e != NULL) {
            entry *next = e->hnext;
            free(e->key);
            free(e);
            e = next;
        }
    }
    free(q->buckets);
    free(q->heap);
    reap_all(q); /* left already (wq_pool_join), or none */
    pthread_cond_destroy(&q->pool_exit_cv);
    pthread_cond_destroy(&q->timer_cv);
    pthread_cond_destroy(&q->cv);
    pthread_mutex_destroy(&q->mu);
    free(q->name);
    free(q);
}

void wq_add(wq *q, const char *key)
{
    delta d;
    delta_init(&d);

    pthread_mutex_lock(&q->mu);
    if (!q->shutting_down)
        add_locked(q, lookup_or_create(q, key), &d);
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
}

void wq_add_after(wq *q, const char *key, util_duration delay)
{
    delta d;
    delta_init(&d);

    pthread_mutex_lock(&q->mu);
    if (!q->shutting_down) {
        entry *e = lookup_or_create(q, key);
        add_after_locked(q, e, delay, &d);
        release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
}

void wq_add_rate_limited(wq *q, const char *key)
{
    delta d;
    delta_init(&d);

    pthread_mutex_lock(&q->mu);
    if (!q->shutting_down) {
        entry *e = lookup_or_create(q, key);
        util_duration delay = backoff_locked(q, e);
        if (e->failures < INT_MAX)
            e->failures++;
        add_after_locked(q, e, delay, &d);
    }
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
}

void wq_forget(wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    entry *e = lookup(q, key);
    if (e != NULL) {
        e->failures = 0;
        release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
}

int wq_num_requeues(wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    const entry *e = lookup(q, key);
    int n = e != NULL ? e->failures : 0;
    pthread_mutex_unlock(&q->mu);
    return n;
}

util_duration wq_backoff(wq *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    util_duration d = backoff_locked(q, lookup(q, key));
    pthread_mutex_unlock(&q->mu);
    return d;
}

/* wq_get with q->mu held, until `deadline` (0: no limit): 0 with *key set
 * and q->mu unlocked, or -ETIMEDOUT or -ESHUTDOWN with q->mu still held.
 * A pool worker passes pool_waiting: it counts as waiting until it takes a
 * key or gives up, and stops counting under the same lock, so a key added
 * meanwhile never counts on a worker that is already busy (the pool would
 * not grow for it). */
static int get_locked(wq *q, char **key, util_duration deadline, int *waiting)
{
    delta d;
    delta_init(&d);

    *key = NULL;
    if (waiting)
        (*waiting)++;
    while (q->head == NULL && !q->shutting_down) {
        if (deadline == 0) {
            pthread_cond_wait(&q->cv, &q->mu);
            continue;
        }
        struct timespec ts = mono_timespec(deadline);
        if (pthread_cond_timedwait(&q->cv, &q->mu, &ts) == ETIMEDOUT && q->head == NULL &&
            !q->shutting_down) {
            if (waiting)
                (*waiting)--;
            return -ETIMEDOUT;
        }
    }
    if (waiting)
        (*waiting)--;
    /* Without drain the FIFO was emptied at shutdown and stays empty. */
    if (q->head == NULL)
        return -ESHUTDOWN;
    entry *e = fifo_pop(q);
    util_duration now = util_now_mono();
    e->dirty = false;
    e->processing = true;
    e->started_at = now;
    d.depth--;
    d.queue_wait = seconds(now - e->added_at);
    *key = util_strdup(e->key);
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
    return 0;
}

int wq_get(wq *q, char **key)
{
    pthread_mutex_lock(&q->mu);
    int rc = get_locked(q, key, 0, NULL);
    if (rc < 0)
        pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_done(wq *q, const char *key)
{
    delta d;
    delta_init(&d);

    pthread_mutex_lock(&q->mu);
    entry *e = lookup(q, key);
    if (e != NULL && e->processing) {
        e->processing = false;
        d.work_time = seconds(util_now_mono() - e->started_at);
        /* Re-added while processing: its turn is now (also when draining). */
        if (e->dirty)
            fifo_push(q, e);
        release_if_idle(q, e);
    }
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
}

size_t wq_len(wq *q)
{
    pthread_mutex_lock(&q->mu);
    size_t n = q->len;
    pthread_mutex_unlock(&q->mu);
    return n;
}

void wq_shutdown(wq *q, bool drain)
{
    delta d;
    delta_init(&d);

    pthread_mutex_lock(&q->mu);
    shutdown_locked(q, drain, &d);
    pthread_mutex_unlock(&q->mu);
    apply(q, &d);
}

bool wq_shutting_down(wq *q)
{
    pthread_mutex_lock(&q->mu);
    bool s = q->shutting_down;
    pthread_mutex_unlock(&q->mu);
    return s;
}

/* ---- elastic pool -------------------------------------------------------- */

/* Joins a thread that left (it no longer touches the queue), frees its stack. */
static void join_thread(struct pool_thread *t)
{
    pthread_join(t->id, NULL);
    if (t->stack)
        munmap(t->stack, t->size);
    free(t);
}

/* With q->mu held: joins the threads that left so far, without the lock
 * (each may still be on its way out), then, with `trim`, hands the pages
 * they freed back to the kernel. Returns with q->mu held. */
static void reap_unlocked(wq *q, bool trim)
{
    struct pool_thread *list = q->reap;
    q->reap = NULL;
    int n = 0;
    for (const struct pool_thread *t = list; t != NULL; t = t->next)
        n++;
    q->pool_reaping += n;
    pthread_mutex_unlock(&q->mu);
    while (list != NULL) {
        struct pool_thread *next = list->next;
        join_thread(list);
        list = next;
    }
    /* The burst is over and its threads are gone, their malloc caches
     * with them: what they freed goes back to the kernel instead of
     * staying in the allocator's arenas. */
    if (trim)
        malloc_trim(0);
    pthread_mutex_lock(&q->mu);
    q->pool_reaping -= n;
    pthread_cond_broadcast(&q->pool_exit_cv);
}

/* Joins every thread that left and waits for joins under way elsewhere. */
static void reap_all(wq *q)
{
    pthread_mutex_lock(&q->mu);
    if (q->reap != NULL)
        reap_unlocked(q, false);
    while (q->pool_reaping > 0)
        pthread_cond_wait(&q->pool_exit_cv, &q->mu);
    pthread_mutex_unlock(&q->mu);
}

/* Records the calling thread as leaving, for the timer thread to join. */
static void pool_leave_locked(wq *q, struct pool_thread *self)
{
    self->next = q->reap;
    q->reap = self;
    q->pool_threads--;
    pthread_cond_broadcast(&q->pool_exit_cv);
    pthread_cond_signal(&q->timer_cv);
}

/* One key through the pool's sync, then back to the queue as its result says. */
static void pool_run(wq *q, char *key)
{
    int rc = q->pool.sync(q->pool.ud, key);
    if (rc == 0)
        wq_forget(q, key);
    else if (rc > 0)
        wq_add_after(q, key, q->pool.slow_delay);
    else
        wq_add_rate_limited(q, key);
    wq_done(q, key);
    free(key);
}

static void *pool_main(void *arg)
{
    struct pool_thread *self = arg;
    wq *q = self->q;
    util_thread_name("w:%s", q->name);
    for (;;) {
        char *key = NULL;
        pthread_mutex_lock(&q->mu);
        bool extra = q->pool_threads > q->pool.min_workers;
        int rc =
            get_locked(q, &key, extra ? util_now_mono() + q->pool.idle_exit : 0, &q->pool_waiting);
        if (rc == 0) {
            pool_run(q, key);
            continue;
        }
        /* Still locked. A timed-out thread leaves only while others keep
         * the minimum (which may be none: the next key starts a thread). */
        if (rc == -ESHUTDOWN || (rc == -ETIMEDOUT && q->pool_threads > q->pool.min_workers)) {
            bool back_to_min = rc == -ETIMEDOUT && q->pool_threads - 1 == q->pool.min_workers;
            /* The trim waits for this thread's exit, which hands its
             * malloc cache back (the timer thread joins, then trims). */
            if (back_to_min)
                q->pool_trim = true;
            pool_leave_locked(q, self);
            pthread_mutex_unlock(&q->mu);
            /* Here, so what the hook frees goes to this thread's cache,
             * which leaves with it. */
            if (back_to_min && q->pool.quiet)
                q->pool.quiet(q->pool.ud);
            return NULL;
        }
        pthread_mutex_unlock(&q->mu);
    }
}

static void pool_spawn_locked(wq *q)
{
    struct pool_thread *t = util_calloc(1, sizeof(*t));
    t->q = q;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    void *stack = mmap(NULL, POOL_STACK, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
    long page = sysconf(_SC_PAGESIZE);
    if (stack != MAP_FAILED) {
        /* A guard page below, as glibc gives its own stacks. */
        if (mprotect(stack, (size_t)(page > 0 ? page : 4096), PROT_NONE) == 0 &&
            pthread_attr_setstack(&attr, stack, POOL_STACK) == 0) {
            t->stack = stack;
            t->size = POOL_STACK;
        } else {
            munmap(stack, POOL_STACK);
        }
    }
    int rc = pthread_create(&t->id, &attr, pool_main, t);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        if (t->stack)
            munmap(t->stack, t->size);
        free(t);
        return; /* the threads there are carry on */
    }
    q->pool_threads++;
    if (q->pool_threads > q->pool_peak)
        q->pool_peak = q->pool_threads;
}

int wq_pool_start(wq *q, const wq_pool_opts *opts)
{
    pthread_mutex_lock(&q->mu);
    if (q->pool_on) {
        pthread_mutex_unlock(&q->mu);
        return -EBUSY;
    }
    q->pool = *opts;
    if (q->pool.max_workers < 1)
        q->pool.max_workers = 1;
    if (q->pool.min_workers < 0)
        q->pool.min_workers = 0;
    if (q->pool.min_workers > q->pool.max_workers)
        q->pool.min_workers = q->pool.max_workers;
    if (q->pool.idle_exit <= 0)
        q->pool.idle_exit = 30 * UTIL_SECOND;
    q->pool_on = true;
    /* Keys queued before the start (a restart's backlog) get workers at
     * once, as many as they need up to the maximum. */
    size_t want = q->len > (size_t)q->pool.min_workers ? q->len : (size_t)q->pool.min_workers;
    if (want > (size_t)q->pool.max_workers)
        want = (size_t)q->pool.max_workers;
    for (size_t i = 0; i < want; i++)
        pool_spawn_locked(q);
    /* Keys queued before the pool started wait for the first workers. */
    int rc = q->pool_threads > 0 || want == 0 ? 0 : -EAGAIN;
    if (rc < 0)
        q->pool_on = false;
    pthread_mutex_unlock(&q->mu);
    return rc;
}

void wq_pool_join(wq *q)
{
    pthread_mutex_lock(&q->mu);
    while (q->pool_threads > 0)
        pthread_cond_wait(&q->pool_exit_cv, &q->mu);
    q->pool_on = false;
    pthread_mutex_unlock(&q->mu);
    /* Joined here too: a thread that left may still be in the quiet hook. */
    reap_all(q);
}

void wq_pool_stats(wq *q, int *threads, int *idle, int *peak)
{
    pthread_mutex_lock(&q->mu);
    if (threads)
        *threads = q->pool_threads;
    if (idle)
        *idle = q->pool_waiting;
    if (peak)
        *peak = q->pool_peak;
    pthread_mutex_unlock(&q->mu);
}
