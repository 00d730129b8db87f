/*
 * Unit tests for common/wq against client-go's workqueue semantics: dedup of
 * waiting keys, one worker per key at a time with re-adds run after wq_done,
 * per-key exponential backoff, delayed adds, both shutdown modes and the
 * workqueue_* metrics. Timing checks assert ordering and lower bounds only,
 * so a loaded machine can make them slow but never make them fail.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "obs/obs.h"
#include "wq/wq.h"

/* ---- helpers ------------------------------------------------------------ */

static wq *new_queue(const char *name, util_duration base, util_duration max, obs_registry *r)
{
    wq_opts o = {.name = name, .base_delay = base, .max_delay = max, .metrics = r};
    wq *q = wq_new(&o);
    assert_non_null(q);
    return q;
}

/* Takes the next key, checks it is `want`, marks it done. */
static void expect_next(wq *q, const char *want)
{
    char *k = NULL;
    assert_int_equal(wq_get(q, &k), 0);
    assert_non_null(k);
    assert_string_equal(k, want);
    wq_done(q, k);
    free(k);
}

static char *get_key(wq *q)
{
    char *k = NULL;
    assert_int_equal(wq_get(q, &k), 0);
    assert_non_null(k);
    return k;
}

static void expect_shutdown(wq *q)
{
    char *k = (char *)"unset";
    assert_int_equal(wq_get(q, &k), -ESHUTDOWN);
    assert_null(k);
}

/* A wq_get on another thread, to see whether (and what) it returns. */
typedef struct getter {
    pthread_t t;
    wq *q;
    atomic_bool returned;
    int rc;
    char *key;
} getter;

static void *getter_main(void *arg)
{
    getter *g = arg;
    g->rc = wq_get(g->q, &g->key);
    atomic_store(&g->returned, true);
    return NULL;
}

static void getter_start(getter *g, wq *q)
{
    memset(g, 0, sizeof(*g));
    g->q = q;
    assert_int_equal(pthread_create(&g->t, NULL, getter_main, g), 0);
}

/* True once the getter returned; the generous limit only bounds a failing run. */
static bool getter_wait(getter *g)
{
    util_duration t0 = util_now_mono();
    while (!atomic_load(&g->returned) && util_now_mono() - t0 < 30 * UTIL_SECOND)
        util_sleep(5 * UTIL_MS);
    return atomic_load(&g->returned);
}

static util_duration since(util_duration t0)
{
    return util_now_mono() - t0;
}

/* ---- dedup and processing ----------------------------------------------- */

static void test_free_null(void **state)
{
    (void)state;
    wq_free(NULL);
    wq *q = wq_new(NULL); /* all defaults */
    assert_non_null(q);
    assert_int_equal(wq_backoff(q, "k"), 5 * UTIL_MS);
    wq_free(q);
}

static void test_dedup_waiting(void **state)
{
    (void)state;
    wq *q = new_queue("dedup", 0, 0, NULL);

    wq_add(q, "a");
    wq_add(q, "b");
    wq_add(q, "a");
    wq_add(q, "b");
    assert_int_equal(wq_len(q), 2);
    expect_next(q, "a");
    expect_next(q, "b");
    assert_int_equal(wq_len(q), 0);

    /* Once handed out and done, the key can be queued again. */
    wq_add(q, "a");
    assert_int_equal(wq_len(q), 1);
    expect_next(q, "a");
    wq_free(q);
}

static void test_readd_while_processing(void **state)
{
    (void)state;
    wq *q = new_queue("readd", 0, 0, NULL);

    wq_add(q, "a");
    char *k = get_key(q);
    assert_string_equal(k, "a");

    /* Re-adds wait behind the worker: not queued, and collapsed into one. */
    wq_add(q, "a");
    wq_add(q, "a");
    assert_int_equal(wq_len(q), 0);

    /* A second worker must not get "a" while the first still holds it. */
    getter g;
    getter_start(&g, q);
    util_sleep(50 * UTIL_MS);
    assert_false(atomic_load(&g.returned));

    wq_done(q, k);
    free(k);
    if (!getter_wait(&g)) {
        wq_shutdown(q, false); /* release the getter before failing */
        pthread_join(g.t, NULL);
        fail_msg("the re-added key was not handed out after wq_done");
    }
    pthread_join(g.t, NULL);
    assert_int_equal(g.rc, 0);
    assert_string_equal(g.key, "a");
    assert_int_equal(wq_len(q), 0);
    wq_done(q, g.key);
    free(g.key);

    /* Exactly once more: nothing is left. */
    assert_int_equal(wq_len(q), 0);
    wq_add(q, "b");
    expect_next(q, "b");

    /* wq_done of a key that is not being processed changes nothing. */
    wq_done(q, "nope");
    assert_int_equal(wq_len(q), 0);
    wq_free(q);
}

/* ---- many adders, many workers -------------------------------------------- */

#define H_KEYS    50
#define H_ADDERS  16
#define H_WORKERS 8
#define H_ADDS    2000

typedef struct hammer {
    wq *q;
    atomic_long clock; /* logical time: one tick per add and per processing start */
    atomic_long last_add[H_KEYS];
    atomic_long last_start[H_KEYS];
    atomic_int active[H_KEYS];
    atomic_int overlaps;
    atomic_long processed;
    atomic_int seed;
} hammer;

static void store_max(atomic_long *dst, long v)
{
    long cur = atomic_load(dst);
    while (cur < v && !atomic_compare_exchange_weak(dst, &cur, v))
        ;
}

static void *adder_main(void *arg)
{
    hammer *h = arg;
    unsigned seed = (unsigned)atomic_fetch_add(&h->seed, 1) * 2654435761U + 1;

    for (int i = 0; i < H_ADDS; i++) {
        int k = (int)(rand_r(&seed) % H_KEYS);
        char key[16];
        snprintf(key, sizeof(key), "ns/k%d", k);
        /* Tick before the add: a processing start ticked later began after it. */
        store_max(&h->last_add[k], atomic_fetch_add(&h->clock, 1) + 1);
        wq_add(h->q, key);
        if (i % 64 == 0)
            sched_yield();
    }
    return NULL;
}

static void *worker_main(void *arg)
{
    hammer *h = arg;
    char *key;

    while (wq_get(h->q, &key) == 0) {
        int k = atoi(key + strlen("ns/k"));
        store_max(&h->last_start[k], atomic_fetch_add(&h->clock, 1) + 1);
        if (atomic_fetch_add(&h->active[k], 1) != 0)
            atomic_fetch_add(&h->overlaps, 1);
        /* Stay busy a little so re-adds land while the key is processed. */
        for (int i = 0; i < 3; i++)
            sched_yield();
        atomic_fetch_sub(&h->active[k], 1);
        atomic_fetch_add(&h->processed, 1);
        wq_done(h->q, key);
        free(key);
    }
    return NULL;
}

static void test_concurrent_adds_and_workers(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    hammer *h = calloc(1, sizeof(*h));
    assert_non_null(h);
    h->q = new_queue("hammer", 0, 0, r);

    pthread_t adders[H_ADDERS], workers[H_WORKERS];
    for (int i = 0; i < H_WORKERS; i++)
        assert_int_equal(pthread_create(&workers[i], NULL, worker_main, h), 0);
    for (int i = 0; i < H_ADDERS; i++)
        assert_int_equal(pthread_create(&adders[i], NULL, adder_main, h), 0);
    for (int i = 0; i < H_ADDERS; i++)
        pthread_join(adders[i], NULL);
    /* Drain: workers finish everything added (and re-added) so far. */
    wq_shutdown(h->q, true);
    for (int i = 0; i < H_WORKERS; i++)
        pthread_join(workers[i], NULL);

    assert_int_equal(atomic_load(&h->overlaps), 0);
    for (int k = 0; k < H_KEYS; k++) {
        long added = atomic_load(&h->last_add[k]);
        long started = atomic_load(&h->last_start[k]);
        if (added != 0 && started <= added)
            fail_msg("key ns/k%d: last add at tick %ld, last processing started at %ld", k, added,
                     started);
    }
    long processed = atomic_load(&h->processed);
    assert_true(processed >= H_KEYS);
    assert_true(processed <= (long)H_ADDERS * H_ADDS);
    assert_int_equal(wq_len(h->q), 0);

    /* Every counted add is handed out exactly once; nothing is left. */
    const char *const labels[] = {"name", NULL};
    const char *const v[] = {"hammer"};
    obs_metric *adds = obs_counter_new(r, "workqueue_adds_total", "", labels);
    obs_metric *depth = obs_gauge_new(r, "workqueue_depth", "", labels);
    assert_non_null(adds);
    assert_non_null(depth);
    assert_true(obs_metric_value(adds, v) == (double)processed);
    assert_true(obs_metric_value(depth, v) == 0);

    wq_free(h->q);
    obs_registry_free(r);
    free(h);
}

/* ---- backoff -------------------------------------------------------------- */

static void test_backoff_growth_and_cap(void **state)
{
    (void)state;
    wq *q = new_queue("backoff", 0, 0, NULL);

    /* client-go defaults: 5 ms doubling, capped at 1000 s (reached at 2^18). */
    util_duration want = 5 * UTIL_MS;
    for (int i = 0; i < 30; i++) {
        assert_int_equal(wq_num_requeues(q, "k"), i);
        assert_int_equal(wq_backoff(q, "k"), want);
        assert_int_equal(wq_backoff(q, "k"), want); /* no side effect */
        wq_add_rate_limited(q, "k");
        want = want * 2 < 1000 * UTIL_SECOND ? want * 2 : 1000 * UTIL_SECOND;
    }
    assert_int_equal(wq_backoff(q, "k"), 1000 * UTIL_SECOND);
    /* Far past the point where base << n overflows int64. */
    for (int i = 0; i < 100; i++)
        wq_add_rate_limited(q, "k");
    assert_int_equal(wq_num_requeues(q, "k"), 130);
    assert_int_equal(wq_backoff(q, "k"), 1000 * UTIL_SECOND);
    /* Other keys are independent. */
    assert_int_equal(wq_backoff(q, "other"), 5 * UTIL_MS);
    assert_int_equal(wq_num_requeues(q, "other"), 0);
    wq_free(q);

    q = new_queue("backoff-custom", UTIL_MS, 8 * UTIL_MS, NULL);
    const util_duration seq[] = {1 * UTIL_MS, 2 * UTIL_MS, 4 * UTIL_MS, 8 * UTIL_MS, 8 * UTIL_MS};
    for (size_t i = 0; i < sizeof(seq) / sizeof(seq[0]); i++) {
        assert_int_equal(wq_backoff(q, "k"), seq[i]);
        wq_add_rate_limited(q, "k");
    }
    wq_free(q);
}

static void test_backoff_delays_the_key(void **state)
{
    (void)state;
    wq *q = new_queue("backoff-time", 20 * UTIL_MS, 0, NULL);

    for (int i = 0; i < 3; i++) {
        util_duration want = (20 * UTIL_MS) << i;
        util_duration t0 = util_now_mono();
        wq_add_rate_limited(q, "k");
        char *k = get_key(q);
        util_duration took = since(t0);
        assert_string_equal(k, "k");
        if (took < want)
            fail_msg("failure %d: key back after %lld ns, backoff is %lld ns", i + 1,
                     (long long)took, (long long)want);
        wq_done(q, k);
        free(k);
    }
    assert_int_equal(wq_num_requeues(q, "k"), 3);

    /* A long backoff keeps the key out of the waiting keys. */
    wq_free(q);
    q = new_queue("backoff-long", 10 * UTIL_SECOND, 0, NULL);
    wq_add_rate_limited(q, "slow");
    assert_int_equal(wq_len(q), 0);
    wq_free(q);
}

static void test_forget_resets(void **state)
{
    (void)state;
    wq *q = new_queue("forget", UTIL_SECOND, 0, NULL);

    for (int i = 0; i < 3; i++)
        wq_add_rate_limited(q, "k");
    assert_int_equal(wq_num_requeues(q, "k"), 3);
    assert_int_equal(wq_backoff(q, "k"), 8 * UTIL_SECOND);

    wq_forget(q, "k");
    assert_int_equal(wq_num_requeues(q, "k"), 0);
    assert_int_equal(wq_backoff(q, "k"), UTIL_SECOND);
    wq_add_rate_limited(q, "k");
    assert_int_equal(wq_num_requeues(q, "k"), 1);
    assert_int_equal(wq_backoff(q, "k"), 2 * UTIL_SECOND);

    /* Forgetting an unknown key is harmless. */
    wq_forget(q, "never-seen");
    assert_int_equal(wq_num_requeues(q, "never-seen"), 0);
    wq_free(q);
}

/* ---- delayed adds ----------------------------------------------------------- */

static void test_add_after_order(void **state)
{
    (void)state;
    wq *q = new_queue("after", 0, 0, NULL);

    util_duration t0 = util_now_mono();
    wq_add_after(q, "late", 300 * UTIL_MS);
    wq_add_after(q, "early", 100 * UTIL_MS);

    char *k = get_key(q);
    util_duration t1 = since(t0);
    assert_string_equal(k, "early");
    assert_true(t1 >= 100 * UTIL_MS);
    wq_done(q, k);
    free(k);

    k = get_key(q);
    assert_string_equal(k, "late");
    assert_true(since(t0) >= 300 * UTIL_MS);
    wq_done(q, k);
    free(k);

    /* Zero or negative delay: queued at once. */
    wq_add_after(q, "now", 0);
    wq_add_after(q, "past", -UTIL_SECOND);
    assert_int_equal(wq_len(q), 2);
    expect_next(q, "now");
    expect_next(q, "past");

    /* Delayed keys are not waiting keys. */
    wq_add_after(q, "far", 10 * UTIL_SECOND);
    assert_int_equal(wq_len(q), 0);
    wq_free(q);
}

static void test_add_after_same_key_earliest_wins(void **state)
{
    (void)state;
    wq *q = new_queue("after-dedup", 0, 0, NULL);

    util_duration t0 = util_now_mono();
    wq_add_after(q, "k", 300 * UTIL_MS);
    wq_add_after(q, "other", 150 * UTIL_MS);
    wq_add_after(q, "k", 50 * UTIL_MS);  /* earlier: replaces the 300 ms deadline */
    wq_add_after(q, "k", 200 * UTIL_MS); /* later than pending: ignored */
    expect_next(q, "k");
    assert_true(since(t0) >= 50 * UTIL_MS);
    expect_next(q, "other");
    assert_true(since(t0) >= 150 * UTIL_MS);

    /* One delayed entry per key: nothing comes back at 200 or 300 ms. */
    util_sleep(450 * UTIL_MS);
    assert_int_equal(wq_len(q), 0);
    wq_free(q);
}

/* ---- shutdown --------------------------------------------------------------- */

static void test_shutdown_wakes_getters(void **state)
{
    (void)state;
    for (int drain = 0; drain <= 1; drain++) {
        wq *q = new_queue("wake", 0, 0, NULL);
        getter g[3];
        for (int i = 0; i < 3; i++)
            getter_start(&g[i], q);
        util_sleep(30 * UTIL_MS);
        assert_false(wq_shutting_down(q));
        wq_shutdown(q, drain != 0);
        assert_true(wq_shutting_down(q));
        for (int i = 0; i < 3; i++) {
            pthread_join(g[i].t, NULL);
            assert_int_equal(g[i].rc, -ESHUTDOWN);
            assert_null(g[i].key);
        }
        expect_shutdown(q);
        wq_free(q);
    }
}

static void test_shutdown_without_drain(void **state)
{
    (void)state;
    wq *q = new_queue("nodrain", 0, 0, NULL);

    wq_add(q, "a");
    wq_add(q, "b");
    wq_add(q, "c");
    char *k = get_key(q);
    assert_string_equal(k, "a");
    wq_add(q, "a"); /* pending re-add behind the worker */
    wq_add_after(q, "later", 20 * UTIL_MS);
    assert_int_equal(wq_len(q), 2);

    wq_shutdown(q, false);
    assert_int_equal(wq_len(q), 0);
    expect_shutdown(q);

    /* The worker finishes; its pending re-add was dropped too. */
    wq_done(q, k);
    free(k);
    assert_int_equal(wq_len(q), 0);
    expect_shutdown(q);

    /* Nothing is accepted any more, delayed or not. */
    wq_add(q, "d");
    wq_add_after(q, "e", 0);
    wq_add_rate_limited(q, "f");
    assert_int_equal(wq_len(q), 0);
    util_sleep(60 * UTIL_MS); /* "later" would be due by now */
    assert_int_equal(wq_len(q), 0);
    expect_shutdown(q);
    wq_free(q);
}

static void test_shutdown_with_drain(void **state)
{
    (void)state;
    wq *q = new_queue("drain", 0, 0, NULL);

    wq_add(q, "a");
    wq_add(q, "b");
    wq_add(q, "c");
    char *a = get_key(q);
    assert_string_equal(a, "a");
    wq_add(q, "a");
    wq_add_after(q, "later", 20 * UTIL_MS);

    wq_shutdown(q, true);
    assert_true(wq_shutting_down(q));
    wq_add(q, "d"); /* ignored */
    assert_int_equal(wq_len(q), 2);
    expect_next(q, "b");
    expect_next(q, "c");
    /* Empty while "a" is still processed: getters are told to stop. */
    expect_shutdown(q);

    /* The re-add accepted before shutdown still runs after wq_done. */
    wq_done(q, a);
    free(a);
    assert_int_equal(wq_len(q), 1);
    expect_next(q, "a");
    expect_shutdown(q);

    /* Delayed keys were dropped. */
    util_sleep(60 * UTIL_MS);
    assert_int_equal(wq_len(q), 0);
    expect_shutdown(q);
    wq_free(q);

    /* A later shutdown without drain drops what a drain left waiting. */
    q = new_queue("drain-then-drop", 0, 0, NULL);
    wq_add(q, "x");
    wq_shutdown(q, true);
    assert_int_equal(wq_len(q), 1);
    wq_shutdown(q, false);
    assert_int_equal(wq_len(q), 0);
    expect_shutdown(q);
    wq_free(q);

    /* Freeing with keys still waiting, delayed and processing is clean. */
    q = new_queue("free-busy", 0, 0, NULL);
    wq_add(q, "x");
    wq_add(q, "y");
    wq_add_after(q, "z", 10 * UTIL_SECOND);
    wq_add_after(q, "never", INT64_MAX); /* no overflow of the deadline */
    wq_add_rate_limited(q, "w");
    char *x = get_key(q);
    wq_free(q);
    free(x);
}

static void test_len(void **state)
{
    (void)state;
    wq *q = new_queue("len", 0, 0, NULL);

    assert_int_equal(wq_len(q), 0);
    wq_add(q, "a");
    wq_add(q, "b");
    wq_add(q, "c");
    assert_int_equal(wq_len(q), 3);
    char *k = get_key(q);
    assert_int_equal(wq_len(q), 2);
    wq_add(q, k); /* pending behind the worker: not waiting yet */
    wq_add_after(q, "d", 10 * UTIL_SECOND);
    assert_int_equal(wq_len(q), 2);
    wq_done(q, k);
    free(k);
    assert_int_equal(wq_len(q), 3);
    wq_free(q);
}

/* ---- metrics ------------------------------------------------------------------ */

/* Value of the sample `series` (e.g. `x_count{name="m"}`) in the rendered text. */
static double sample(const char *text, const char *series)
{
    size_t n = strlen(series);
    for (const char *p = text; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = p ? p + 1 : p) {
        if (strncmp(p, series, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
    }
    fail_msg("no sample %s in:\n%s", series, text);
    return -1;
}

static char *render(obs_registry *r)
{
    size_t len = 0;
    char *text = obs_registry_render(r, &len);
    assert_non_null(text);
    assert_int_equal(strlen(text), len);
    return text;
}

static void test_metrics(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    wq *q = new_queue("m", 0, 0, r);
    wq *other = new_queue("other", 0, 0, r);

    const char *const labels[] = {"name", NULL};
    const char *const v[] = {"m"};
    const char *const vo[] = {"other"};
    obs_metric *adds = obs_counter_new(r, "workqueue_adds_total", "", labels);
    obs_metric *retries = obs_counter_new(r, "workqueue_retries_total", "", labels);
    obs_metric *depth = obs_gauge_new(r, "workqueue_depth", "", labels);
    assert_non_null(adds);
    assert_non_null(retries);
    assert_non_null(depth);

    wq_add(q, "a");
    wq_add(q, "b");
    wq_add(q, "a"); /* deduplicated: not an add */
    assert_true(obs_metric_value(adds, v) == 2);
    assert_true(obs_metric_value(depth, v) == 2);

    char *a = get_key(q);
    assert_true(obs_metric_value(depth, v) == 1);
    wq_add(q, "a"); /* re-add while processing counts, as in client-go */
    assert_true(obs_metric_value(adds, v) == 3);
    assert_true(obs_metric_value(depth, v) == 2);

    /* While "a" is processed, the render-time gauges see it running. */
    util_sleep(20 * UTIL_MS);
    char *text = render(r);
    double longest = sample(text, "workqueue_longest_running_processor_seconds{name=\"m\"}");
    double unfinished = sample(text, "workqueue_unfinished_work_seconds{name=\"m\"}");
    assert_true(longest >= 0.02);
    assert_true(unfinished >= longest);
    assert_true(sample(text, "workqueue_longest_running_processor_seconds{name=\"other\"}") == 0);
    assert_non_null(strstr(text, "# HELP workqueue_depth Current depth of workqueue\n"));
    free(text);

    wq_done(q, a);
    free(a);
    assert_true(obs_metric_value(depth, v) == 2);
    assert_int_equal(wq_len(q), 2);

    wq_add_rate_limited(q, "c"); /* a retry; an add once its 5 ms are up */
    assert_true(obs_metric_value(retries, v) == 1);
    expect_next(q, "b");
    expect_next(q, "a");
    expect_next(q, "c");
    /* The timer thread counts its adds just after it releases the key, so
     * the getter may see "c" a moment before the counter does. */
    for (int i = 0; i < 2000 && obs_metric_value(adds, v) != 4; i++)
        util_sleep(UTIL_MS);
    assert_true(obs_metric_value(adds, v) == 4);
    assert_true(obs_metric_value(depth, v) == 0);

    wq_add_after(q, "d", 0); /* AddAfter always counts a retry */
    assert_true(obs_metric_value(retries, v) == 2);
    assert_true(obs_metric_value(adds, v) == 5);
    assert_true(obs_metric_value(depth, v) == 1);
    expect_next(q, "d");

    text = render(r);
    assert_non_null(strstr(text, "# TYPE workqueue_queue_duration_seconds histogram\n"));
    assert_non_null(strstr(text, "# TYPE workqueue_work_duration_seconds histogram\n"));
    /* Upstream's bucket bounds, as Go's ExponentialBuckets computes them. */
    static const char *const les[] = {"1e-08",
                                      "1e-07",
                                      "1e-06",
                                      "9.999999999999999e-06",
                                      "9.999999999999999e-05",
                                      "0.001",
                                      "0.01",
                                      "0.1",
                                      "1",
                                      "10"};
    for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
        char want[128];
        snprintf(want, sizeof(want),
                 "workqueue_queue_duration_seconds_bucket{name=\"m\",le=\"%s\"} ", les[i]);
        if (strstr(text, want) == NULL)
            fail_msg("no bucket le=\"%s\" in:\n%s", les[i], text);
    }
    assert_non_null(
        strstr(text, "workqueue_work_duration_seconds_bucket{name=\"m\",le=\"10\"} 5\n"));
    assert_true(sample(text, "workqueue_queue_duration_seconds_count{name=\"m\"}") == 5);
    assert_true(sample(text, "workqueue_work_duration_seconds_count{name=\"m\"}") == 5);
    assert_true(sample(text, "workqueue_work_duration_seconds_sum{name=\"m\"}") >= 0.02);
    assert_true(sample(text, "workqueue_longest_running_processor_seconds{name=\"m\"}") == 0);
    assert_true(sample(text, "workqueue_unfinished_work_seconds{name=\"m\"}") == 0);
    assert_true(sample(text, "workqueue_depth{name=\"m\"}") == 0);
    free(text);

    /* The other queue's series exist from the start and stay untouched. */
    assert_true(obs_metric_value(adds, vo) == 0);
    assert_true(obs_metric_value(retries, vo) == 0);
    assert_true(obs_metric_value(depth, vo) == 0);

    /* Shutdown without drain takes dropped keys out of the depth. */
    wq_add(q, "e");
    wq_add(q, "f");
    assert_true(obs_metric_value(depth, v) == 2);
    wq_shutdown(q, false);
    assert_true(obs_metric_value(depth, v) == 0);

    wq_free(other);
    wq_free(q);
    obs_registry_free(r);
}

/* ---- elastic pool ------------------------------------------------------------ */

typedef struct pool_probe {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running, most, done;
    int quiet;      /* times the pool's quiet hook ran */
    bool release;   /* blocked syncs may return */
    int fail_first; /* keys "fail" (return -1) this many times in all */
    int slow_first; /* then return 1 this many times */
} pool_probe;

static int probe_sync(void *ud, const char *key)
{
    (void)key;
    pool_probe *p = ud;
    pthread_mutex_lock(&p->mu);
    p->running++;
    if (p->running > p->most)
        p->most = p->running;
    while (!p->release)
        pthread_cond_wait(&p->cv, &p->mu);
    p->running--;
    int rc = 0;
    if (p->fail_first > 0) {
        p->fail_first--;
        rc = -1;
    } else if (p->slow_first > 0) {
        p->slow_first--;
        rc = 1;
    } else {
        p->done++;
    }
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static void probe_init(pool_probe *p)
{
    memset(p, 0, sizeof(*p));
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
}

static void probe_release(pool_probe *p)
{
    pthread_mutex_lock(&p->mu);
    p->release = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

static int probe_get(pool_probe *p, const int *field)
{
    pthread_mutex_lock(&p->mu);
    int v = *field;
    pthread_mutex_unlock(&p->mu);
    return v;
}

/* Polls (up to ~20 s) until `cond` holds for the pool's thread count. */
static int wait_threads(wq *q, int want)
{
    int n = -1;
    for (int i = 0; i < 2000; i++) {
        wq_pool_stats(q, &n, NULL, NULL);
        if (n == want)
            break;
        util_sleep(10 * UTIL_MS);
    }
    return n;
}

static void test_pool_keeps_min_workers_idle(void **state)
{
    (void)state;
    wq *q = new_queue("pool", 0, 0, NULL);
    pool_probe p;
    probe_init(&p);
    wq_pool_opts o = {.max_workers = 8, .min_workers = 2, .sync = probe_sync, .ud = &p};
    assert_int_equal(wq_pool_start(q, &o), 0);
    assert_int_equal(wq_pool_start(q, &o), -EBUSY);
    int threads = 0, peak = 0;
    wq_pool_stats(q, &threads, NULL, &peak);
    assert_int_equal(threads, 2);
    assert_int_equal(peak, 2);
    wq_shutdown(q, false);
    wq_pool_join(q);
    wq_pool_stats(q, &threads, NULL, NULL);
    assert_int_equal(threads, 0);
    wq_free(q);
}

static void test_pool_grows_to_max_under_a_burst_and_not_beyond(void **state)
{
    (void)state;
    wq *q = new_queue("pool", 0, 0, NULL);
    pool_probe p;
    probe_init(&p);
    wq_pool_opts o = {.max_workers = 4, .min_workers = 1, .sync = probe_sync, .ud = &p};
    assert_int_equal(wq_pool_start(q, &o), 0);
    char key[16];
    for (int i = 0; i < 20; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        wq_add(q, key);
    }
    /* Every sync blocks: the pool grows until 4 run at once. */
    for (int i = 0; i < 2000 && probe_get(&p, &p.running) < 4; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.running), 4);
    probe_release(&p);
    for (int i = 0; i < 2000 && probe_get(&p, &p.done) < 20; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.done), 20);
    int peak = 0;
    wq_pool_stats(q, NULL, NULL, &peak);
    assert_int_equal(peak, 4);
    assert_int_equal(probe_get(&p, &p.most), 4);
    wq_shutdown(q, false);
    wq_pool_join(q);
    wq_free(q);
}

/* A restart's backlog (keys queued before the pool starts) gets as many
 * workers as it has keys, up to the maximum, at once. */
static void test_pool_started_on_a_backlog_spawns_for_it(void **state)
{
    (void)state;
    static const struct {
        int queued, min, max, want;
    } cases[] = {{0, 1, 8, 1}, {3, 1, 8, 3}, {20, 2, 8, 8}, {1, 4, 8, 4}};
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        wq *q = new_queue("pool", 0, 0, NULL);
        pool_probe p;
        probe_init(&p);
        char key[16];
        for (int i = 0; i < cases[c].queued; i++) {
            snprintf(key, sizeof(key), "k%d", i);
            wq_add(q, key);
        }
        wq_pool_opts o = {
            .max_workers = cases[c].max, .min_workers = cases[c].min, .sync = probe_sync, .ud = &p};
        assert_int_equal(wq_pool_start(q, &o), 0);
        int threads = 0;
        wq_pool_stats(q, &threads, NULL, NULL);
        assert_int_equal(threads, cases[c].want);
        probe_release(&p);
        wq_shutdown(q, false);
        wq_pool_join(q);
        wq_free(q);
    }
}

static void count_quiet(void *ud)
{
    pool_probe *p = ud;
    pthread_mutex_lock(&p->mu);
    p->quiet++;
    pthread_mutex_unlock(&p->mu);
}

static void test_pool_shrinks_to_min_after_idle_exit(void **state)
{
    (void)state;
    wq *q = new_queue("pool", 0, 0, NULL);
    pool_probe p;
    probe_init(&p);
    wq_pool_opts o = {.max_workers = 6,
                      .min_workers = 1,
                      .idle_exit = 50 * UTIL_MS,
                      .sync = probe_sync,
                      .ud = &p,
                      .quiet = count_quiet};
    assert_int_equal(wq_pool_start(q, &o), 0);
    char key[16];
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        wq_add(q, key);
    }
    for (int i = 0; i < 2000 && probe_get(&p, &p.running) < 6; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.running), 6);
    assert_int_equal(probe_get(&p, &p.quiet), 0);
    probe_release(&p);
    assert_int_equal(wait_threads(q, 1), 1);
    /* Back at the minimum: the quiet hook runs once, by the last thread to
     * go, just after it left the count. */
    for (int i = 0; i < 2000 && probe_get(&p, &p.quiet) < 1; i++)
        util_sleep(10 * UTIL_MS);
    util_sleep(50 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.quiet), 1);
    /* Still working after shrinking: a new burst is handled. */
    for (int i = 0; i < 6; i++) {
        snprintf(key, sizeof(key), "again%d", i);
        wq_add(q, key);
    }
    for (int i = 0; i < 2000 && probe_get(&p, &p.done) < 12; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.done), 12);
    wq_shutdown(q, false);
    wq_pool_join(q);
    wq_free(q);
}

/* Read-write mappings of exactly a pool thread's stack (8 MiB less the
 * guard page) in this process. */
static int stack_mappings(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return -1;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f)) {
        unsigned long lo = 0, hi = 0;
        char perms[8] = "";
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) == 3 && strcmp(perms, "rw-p") == 0 &&
            hi - lo == (8ul << 20) - (unsigned long)sysconf(_SC_PAGESIZE))
            n++;
    }
    fclose(f);
    return n;
}

/* glibc would keep the stacks of exited threads mapped (its stack cache);
 * the pool's own are unmapped once their thread is joined. */
static void test_pool_stacks_are_unmapped_after_shrinking(void **state)
{
    (void)state;
    int before = stack_mappings();
    assert_true(before >= 0);
    wq *q = new_queue("pool", 0, 0, NULL);
    pool_probe p;
    probe_init(&p);
    wq_pool_opts o = {.max_workers = 16,
                      .min_workers = 1,
                      .idle_exit = 50 * UTIL_MS,
                      .sync = probe_sync,
                      .ud = &p};
    assert_int_equal(wq_pool_start(q, &o), 0);
    char key[16];
    for (int i = 0; i < 16; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        wq_add(q, key);
    }
    for (int i = 0; i < 2000 && probe_get(&p, &p.running) < 16; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.running), 16);
    assert_true(stack_mappings() >= before + 16);
    probe_release(&p);
    assert_int_equal(wait_threads(q, 1), 1);
    /* The one running and the last one to leave, which the timer thread
     * joins (it may still be exiting). */
    int after = stack_mappings();
    for (int i = 0; i < 500 && after > before + 2; i++) {
        util_sleep(10 * UTIL_MS);
        after = stack_mappings();
    }
    printf("figure: pool stacks mapped: %d before, >= %d at 16 threads, %d after shrinking\n",
           before, before + 16, after);
    assert_true(after <= before + 2);
    wq_shutdown(q, false);
    wq_pool_join(q);
    assert_true(stack_mappings() <= before);
    wq_free(q);
}

/* A pool whose minimum is none exits its last thread once idle, and comes
 * back for the next key: one added now, or one added with a delay while no
 * thread exists (the timer thread, which stays, queues it when due and that
 * starts a worker). */
static void test_pool_shrinks_to_zero_and_restarts_for_a_new_or_delayed_key(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        util_duration delay; /* 0: wq_add */
    } cases[] = {
        {"a key added", 0},
        {"a key added with a delay", 200 * UTIL_MS},
        {"a key coming back after a failure", -1},
    };
    int stacks_before = stack_mappings();
    assert_true(stacks_before >= 0);
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        wq *q = new_queue("pool", 50 * UTIL_MS, 50 * UTIL_MS, NULL);
        pool_probe p;
        probe_init(&p);
        p.release = true;
        wq_pool_opts o = {.max_workers = 4,
                          .min_workers = 0,
                          .idle_exit = 50 * UTIL_MS,
                          .sync = probe_sync,
                          .ud = &p,
                          .quiet = count_quiet};
        assert_int_equal(wq_pool_start(q, &o), 0);
        int threads = -1;
        wq_pool_stats(q, &threads, NULL, NULL);
        assert_int_equal(threads, 0); /* nothing queued: nothing started */
        /* A burst, then quiet: back to no thread, the quiet hook run once. */
        wq_add(q, "first");
        for (int i = 0; i < 2000 && probe_get(&p, &p.done) < 1; i++)
            util_sleep(10 * UTIL_MS);
        assert_int_equal(probe_get(&p, &p.done), 1);
        assert_int_equal(wait_threads(q, 0), 0);
        for (int i = 0; i < 2000 && probe_get(&p, &p.quiet) < 1; i++)
            util_sleep(10 * UTIL_MS);
        assert_int_equal(probe_get(&p, &p.quiet), 1);
        /* The last thread was joined (by the timer thread): its stack is gone. */
        int mapped = stack_mappings();
        for (int i = 0; i < 2000 && mapped > stacks_before; i++) {
            util_sleep(10 * UTIL_MS);
            mapped = stack_mappings();
        }
        assert_int_equal(mapped, stacks_before);

        if (cases[c].delay > 0) {
            wq_add_after(q, "second", cases[c].delay);
        } else if (cases[c].delay < 0) {
            pthread_mutex_lock(&p.mu);
            p.fail_first = 1; /* fails once: back after its backoff (50 ms) */
            pthread_mutex_unlock(&p.mu);
            wq_add(q, "second");
        } else {
            wq_add(q, "second");
        }
        for (int i = 0; i < 2000 && probe_get(&p, &p.done) < 2; i++)
            util_sleep(10 * UTIL_MS);
        if (probe_get(&p, &p.done) != 2)
            fail_msg("%s: not run after the pool shrank to none", cases[c].name);
        assert_int_equal(wait_threads(q, 0), 0);
        wq_shutdown(q, false);
        wq_pool_join(q);
        wq_free(q);
    }
}

static void test_pool_sync_result_decides_the_next_turn(void **state)
{
    (void)state;
    wq *q = new_queue("pool", 1 * UTIL_MS, 10 * UTIL_MS, NULL);
    pool_probe p;
    probe_init(&p);
    p.release = true;
    p.fail_first = 2; /* backoff twice, */
    p.slow_first = 1; /* then slow_delay once, then done */
    wq_pool_opts o = {.max_workers = 1, .slow_delay = 5 * UTIL_MS, .sync = probe_sync, .ud = &p};
    assert_int_equal(wq_pool_start(q, &o), 0);
    wq_add(q, "k");
    for (int i = 0; i < 2000 && probe_get(&p, &p.done) < 1; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(probe_get(&p, &p.done), 1);
    /* Done: the failures were forgotten. */
    for (int i = 0; i < 200 && wq_num_requeues(q, "k") != 0; i++)
        util_sleep(10 * UTIL_MS);
    assert_int_equal(wq_num_requeues(q, "k"), 0);
    wq_shutdown(q, false);
    wq_pool_join(q);
    wq_free(q);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_free_null),
        cmocka_unit_test(test_dedup_waiting),
        cmocka_unit_test(test_readd_while_processing),
        cmocka_unit_test(test_concurrent_adds_and_workers),
        cmocka_unit_test(test_backoff_growth_and_cap),
        cmocka_unit_test(test_backoff_delays_the_key),
        cmocka_unit_test(test_forget_resets),
        cmocka_unit_test(test_add_after_order),
        cmocka_unit_test(test_add_after_same_key_earliest_wins),
        cmocka_unit_test(test_shutdown_wakes_getters),
        cmocka_unit_test(test_shutdown_without_drain),
        cmocka_unit_test(test_shutdown_with_drain),
        cmocka_unit_test(test_len),
        cmocka_unit_test(test_metrics),
        cmocka_unit_test(test_pool_keeps_min_workers_idle),
        cmocka_unit_test(test_pool_grows_to_max_under_a_burst_and_not_beyond),
        cmocka_unit_test(test_pool_started_on_a_backlog_spawns_for_it),
        cmocka_unit_test(test_pool_shrinks_to_min_after_idle_exit),
        cmocka_unit_test(test_pool_stacks_are_unmapped_after_shrinking),
        cmocka_unit_test(test_pool_shrinks_to_zero_and_restarts_for_a_new_or_delayed_key),
        cmocka_unit_test(test_pool_sync_result_decides_the_next_turn),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
