/*
 * What the attacher's own files share and nobody else uses: the queue with
 * backlog visibility (queue.c) and the controller's hooks for the reconcile
 * (controller.c <-> reconcile.c).
 */
#ifndef CSISIDECAR_ATTACHER_INTERNAL_H
#define CSISIDECAR_ATTACHER_INTERNAL_H

#include "attacher.h"

/* ---- queue.c ---------------------------------------------------------------------------- */

/*
 * A common/wq queue that also knows since when each key waits, so the
 * backlog is visible: gauges csi_attacher_queue_depth{queue} and
 * csi_attacher_queue_oldest_waiting_seconds{queue}, a counter
 * csi_attacher_queue_slow_items_total{queue} of items that waited longer
 * than `slow`, and at -v=2 one log line per queue at most every 10 s
 * naming how many did. Only direct adds count as waiting; an item in
 * backoff (a retry) is not backlog.
 */
typedef struct att_queue att_queue;

att_queue *att_queue_new(const char *name, util_duration base, util_duration max,
                         obs_registry *metrics, util_duration slow);
void att_queue_free(att_queue *q);
void att_queue_add(att_queue *q, const char *key);
void att_queue_add_after(att_queue *q, const char *key, util_duration d);
void att_queue_add_rate_limited(att_queue *q, const char *key);
void att_queue_forget(att_queue *q, const char *key);
/* Blocks for the next key (malloc'ed); -ESHUTDOWN once shut down. */
int att_queue_get(att_queue *q, char **key);
void att_queue_done(att_queue *q, const char *key);
void att_queue_shutdown(att_queue *q);
size_t att_queue_depth(att_queue *q);
/* Age of the oldest waiting key, 0 when none waits. */
util_duration att_queue_oldest(att_queue *q);

/* ---- controller.c, for reconcile.c --------------------------------------------------------- */

/* Calls fn for every cached VA of this driver (the freshest copy known). */
void att_ctrl_each_va(att_ctrl *c, void (*fn)(void *ud, json_object *va), void *ud);
/* The node id a sync of `va` would use (detach rules), or NULL. Caller frees. */
char *att_ctrl_node_id(att_ctrl *c, const json_object *va);
/* The volume handle of the VA's PV (cached), or NULL. Caller frees. */
char *att_ctrl_volume_handle(att_ctrl *c, const json_object *va);
/* Marks the VA for a forced sync and queues it. */
void att_ctrl_force(att_ctrl *c, const json_object *va);

/* ---- reconcile.c --------------------------------------------------------------------------- */

typedef struct att_reconciler att_reconciler;

/* Every `period`, ListVolumes (all pages of `max_entries`, one `timeout`
 * for the whole walk) against status.attached of every VA. */
int att_reconciler_start(att_ctrl *c, csi_conn *csi, util_duration period, int max_entries,
                         util_duration timeout, att_reconciler **out);
void att_reconciler_stop(att_reconciler *r);
/* One pass now (tests and the first run). */
int att_reconcile_once(att_ctrl *c, csi_conn *csi, int max_entries, util_duration timeout);

#endif
