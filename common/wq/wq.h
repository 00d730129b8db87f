/*
 * wq: the work queue every controller runs on, with client-go's semantics.
 *
 * Keys are strings ("namespace/name"). A key waiting in the queue is never
 * queued twice; a key added while a worker processes it runs once more after
 * that worker calls wq_done, never on two workers at once. Failed keys come
 * back with per-key exponential backoff (base_delay * 2^failures, capped at
 * max_delay) until wq_forget. Delayed adds wait in a timer heap.
 *
 * Metrics use upstream's names with the label name=<queue name>:
 * workqueue_depth, workqueue_adds_total, workqueue_retries_total,
 * workqueue_queue_duration_seconds, workqueue_work_duration_seconds,
 * workqueue_unfinished_work_seconds, workqueue_longest_running_processor_seconds.
 */
#ifndef CSISIDECAR_WQ_H
#define CSISIDECAR_WQ_H

#include <stdbool.h>
#include <stddef.h>

#include "obs/obs.h"
#include "util/util.h"

typedef struct wq wq;

typedef struct wq_opts {
    const char *name;         /* metric label; "" allowed */
    util_duration base_delay; /* first retry delay; 0: 5 ms (client-go default) */
    util_duration max_delay;  /* backoff cap; 0: 1000 s (client-go default) */
    obs_registry *metrics;    /* may be NULL: no metrics */
} wq_opts;

wq *wq_new(const wq_opts *opts);
/* Shuts down (if not yet) and frees; no worker may still be inside wq_get.
 * The metrics registry, if any, must outlive the queue. */
void wq_free(wq *q);

/* Queues `key` unless it is already waiting (ignored after shutdown). */
void wq_add(wq *q, const char *key);
/* Queues `key` once `delay` has passed (d <= 0: now). */
void wq_add_after(wq *q, const char *key, util_duration delay);
/* Queues `key` after its backoff and counts one more failure for it. */
void wq_add_rate_limited(wq *q, const char *key);
/* Clears the failure count of `key` (call on success). */
void wq_forget(wq *q, const char *key);
/* How many times `key` failed since its last wq_forget. */
int wq_num_requeues(wq *q, const char *key);
/* The delay wq_add_rate_limited would use now for `key` (no side effect). */
util_duration wq_backoff(wq *q, const char *key);

/*
 * Blocks for the next key. *key is malloc'ed (the caller frees it after
 * wq_done). Returns 0, or -ESHUTDOWN once the queue is shut down and empty.
 */
int wq_get(wq *q, char **key);
/* Marks `key` processed; a re-add that arrived meanwhile is queued now. */
void wq_done(wq *q, const char *key);

/* Keys waiting now (not counting delayed ones or ones being processed). */
size_t wq_len(wq *q);
/*
 * Stops accepting keys. With `drain`, wq_get keeps handing out what is
 * already waiting and returns -ESHUTDOWN once empty; without, waiting keys
 * are dropped and every wq_get returns -ESHUTDOWN at once. Delayed keys are
 * dropped either way.
 */
void wq_shutdown(wq *q, bool drain);
bool wq_shutting_down(wq *q);

/*
 * An elastic pool of workers on one queue: at most max_workers threads run
 * `sync` on its keys. It keeps min_workers threads (0: none while idle),
 * starts one more when a key is queued while none waits for one (up to the
 * maximum; a delayed key coming due counts as queued then), and a thread
 * beyond the minimum exits after idle_exit without a key. A thread that
 * exits hands back glibc's per-thread malloc cache, which a long-lived idle
 * thread keeps for good. What `sync` returns decides the key's next turn: 0
 * done (wq_forget), > 0 again after slow_delay, < 0 again after its backoff
 * (wq_add_rate_limited).
 */
typedef struct wq_pool_opts {
    int max_workers;         /* < 1: 1 */
    int min_workers;         /* threads kept while idle; < 0: 0; capped at max_workers */
    util_duration idle_exit; /* 0: 30 s */
    util_duration slow_delay;
    int (*sync)(void *ud, const char *key);
    void *ud;
    /* May be NULL: called by the last thread to leave when the pool shrank
     * back to min_workers after a burst (drop what the burst grew); the
     * allocator is trimmed once that thread has exited. */
    void (*quiet)(void *ud);
} wq_pool_opts;

/* Starts the queue's pool (one per queue): 0, -EBUSY when one runs, or
 * -EAGAIN when no thread could be started (only when some are wanted at
 * once: min_workers, or keys already queued). */
int wq_pool_start(wq *q, const wq_pool_opts *opts);
/* After wq_shutdown: waits until every worker of the pool has exited. */
void wq_pool_join(wq *q);
/* Worker threads now, of them waiting for a key, and the most at once. */
void wq_pool_stats(wq *q, int *threads, int *idle, int *peak);

#endif
