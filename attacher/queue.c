/*
 * queue: common/wq plus "since when does each key wait", so an attach or
 * detach backlog shows up as metrics and log lines instead of as silence
 * (external-attacher#706: attaches waited 27-45 minutes with nothing
 * telling anyone why).
 *
 * The wait table maps a key to the monotonic time of its first direct add
 * since it was last handed to a worker; a worker taking the key removes the
 * entry and learns how long the key waited. The oldest age is a scan of the
 * table at render time: scrapes are rare, adds are frequent.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include <json-c/linkhash.h>

#include "internal.h"
#include "wq/wq.h"

#define SLOW_LOG_EVERY (10 * UTIL_SECOND)

struct att_queue {
    wq *q;
    char *name;
    obs_registry *metrics;
    obs_metric *depth, *oldest, *slow_total;
    util_duration slow;
    pthread_mutex_t mu;
    struct lh_table *since; /* key -> util_duration* */
    util_duration last_log;
    unsigned slow_since_log;
    util_duration worst_since_log;
};

static void free_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free(lh_entry_v(e));
}

static void collect(void *ud)
{
    att_queue *q = ud;
    const char *v[] = {q->name};
    obs_gauge_set(q->depth, v, (double)att_queue_depth(q));
    obs_gauge_set(q->oldest, v, (double)att_queue_oldest(q) / (double)UTIL_SECOND);
}

att_queue *att_queue_new(const char *name, util_duration base, util_duration max,
                         obs_registry *metrics, util_duration slow)
{
    att_queue *q = util_calloc(1, sizeof(*q));
    q->name = util_strdup(name);
    wq_opts o = {.name = q->name, .base_delay = base, .max_delay = max, .metrics = metrics};
    q->q = wq_new(&o);
    q->slow = slow > 0 ? slow : 30 * UTIL_SECOND;
    pthread_mutex_init(&q->mu, NULL);
    q->since = lh_kchar_table_new(64, free_entry);
    q->metrics = metrics;
    if (metrics) {
        static const char *const labels[] = {"queue", NULL};
        q->depth = obs_gauge_new(metrics, "csi_attacher_queue_depth",
                                 "Keys waiting in the queue for a worker (items in backoff not "
                                 "counted).",
                                 labels);
        q->oldest = obs_gauge_new(metrics, "csi_attacher_queue_oldest_waiting_seconds",
                                  "How long the oldest key waiting in the queue has waited, in "
                                  "seconds; 0 when none waits.",
                                  labels);
        q->slow_total = obs_counter_new(metrics, "csi_attacher_queue_slow_items_total",
                                        "Keys that waited in the queue longer than the slow "
                                        "threshold (30s) before a worker took them.",
                                        labels);
        const char *v[] = {q->name};
        obs_counter_add(q->slow_total, v, 0);
        obs_registry_on_render(metrics, collect, q);
    }
    return q;
}

void att_queue_free(att_queue *q)
{
    if (!q)
        return;
    if (q->metrics)
        obs_registry_off_render(q->metrics, collect, q);
    wq_free(q->q);
    lh_table_free(q->since);
    pthread_mutex_destroy(&q->mu);
    free(q->name);
    free(q);
}

void att_queue_add(att_queue *q, const char *key)
{
    pthread_mutex_lock(&q->mu);
    if (!lh_table_lookup_entry(q->since, key)) {
        util_duration *t = util_calloc(1, sizeof(*t));
        *t = util_now_mono();
        lh_table_insert(q->since, util_strdup(key), t);
    }
    pthread_mutex_unlock(&q->mu);
    wq_add(q->q, key);
}

void att_queue_add_after(att_queue *q, const char *key, util_duration d)
{
    wq_add_after(q->q, key, d);
}

void att_queue_add_rate_limited(att_queue *q, const char *key)
{
    wq_add_rate_limited(q->q, key);
}

void att_queue_forget(att_queue *q, const char *key)
{
    wq_forget(q->q, key);
}

/* Called with q->mu held: counts a slow item and logs at most every 10 s. */
static void note_slow(att_queue *q, const char *key, util_duration waited, util_duration now)
{
    const char *v[] = {q->name};
    if (q->slow_total)
        obs_counter_add(q->slow_total, v, 1);
    q->slow_since_log++;
    if (waited > q->worst_since_log)
        q->worst_since_log = waited;
    if (now - q->last_log < SLOW_LOG_EVERY)
        return;
    char worst[32], thr[32];
    util_duration_format(q->worst_since_log, worst, sizeof(worst));
    util_duration_format(q->slow, thr, sizeof(thr));
    obs_v(2,
          "queue %s: %u item(s) waited longer than %s for a worker (longest %s, latest %s); "
          "%zu waiting now",
          q->name, q->slow_since_log, thr, worst, key, wq_len(q->q));
    q->last_log = now;
    q->slow_since_log = 0;
    q->worst_since_log = 0;
}

int att_queue_get(att_queue *q, char **key)
{
    int r = wq_get(q->q, key);
    if (r < 0)
        return r;
    pthread_mutex_lock(&q->mu);
    util_duration *t = NULL;
    if (lh_table_lookup_ex(q->since, *key, (void **)&t) && t) {
        util_duration now = util_now_mono();
        if (now - *t > q->slow)
            note_slow(q, *key, now - *t, now);
        lh_table_delete(q->since, *key);
    }
    pthread_mutex_unlock(&q->mu);
    return 0;
}

void att_queue_done(att_queue *q, const char *key)
{
    wq_done(q->q, key);
}

void att_queue_shutdown(att_queue *q)
{
    wq_shutdown(q->q, false);
}

size_t att_queue_depth(att_queue *q)
{
    return wq_len(q->q);
}

util_duration att_queue_oldest(att_queue *q)
{
    util_duration now = util_now_mono(), oldest = now;
    pthread_mutex_lock(&q->mu);
    struct lh_entry *e;
    lh_foreach(q->since, e)
    {
        const util_duration *t = lh_entry_v(e);
        if (*t < oldest)
            oldest = *t;
    }
    pthread_mutex_unlock(&q->mu);
    return now - oldest;
}
