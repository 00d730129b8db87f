/*
 * Direct mode: the registrar writes the node's registration itself (the
 * seed design's "Kubernetes CSI Helper") instead of leaving it to the
 * kubelet: the driver's entry in the Node's nodeid annotation, its topology
 * labels and its CSINode entry (common/nodereg, the same code kubelet-sim
 * runs).
 *
 * One work queue key ("register") and one worker: the first write happens
 * at once; informers on this node's Node and CSINode only (field selector
 * metadata.name=<node>) queue it again whenever our entries are missing or
 * differ, so an entry removed by hand comes back. Failures (a topology
 * label another component set to a different value, a malformed annotation,
 * an API error) are logged, recorded as an Event on the Node, and retried
 * with backoff; nothing that is not ours is ever overwritten.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "obs/obs.h"
#include "registrar/registrar.h"
#include "wq/wq.h"

#define KEY "register"

struct reg_direct {
    reg_direct_opts o;
    wq *q;
    kube_informer *node_inf, *csinode_inf;
    pthread_t worker;
    bool worker_started;
    atomic_bool registered;
    char *last_error; /* worker thread only: log a repeated failure once at -v=0 */
};

static void sync_once(reg_direct *d)
{
    json_object *node = NULL;
    int r = nodereg_install(d->o.kube, d->o.node_name, d->o.driver, NULL, &node);
    if (r == 0) {
        if (!atomic_exchange(&d->registered, true))
            obs_info("Registered driver %s on node %s (node id %s)", d->o.driver->name,
                     d->o.node_name, d->o.driver->node_id);
        else
            obs_v(2, "registration of driver %s on node %s is in place", d->o.driver->name,
                  d->o.node_name);
        free(d->last_error);
        d->last_error = NULL;
        wq_forget(d->q, KEY);
    } else {
        const char *msg = util_err_last();
        bool repeat = d->last_error && strcmp(d->last_error, msg) == 0;
        if (!repeat)
            obs_error("Registering driver %s on node %s failed: %s", d->o.driver->name,
                      d->o.node_name, msg);
        else
            obs_v(2, "registering driver %s on node %s failed again: %s", d->o.driver->name,
                  d->o.node_name, msg);
        if (node && (r == -EEXIST || r == -EINVAL))
            kube_event(d->o.events, node, "Warning",
                       r == -EEXIST ? "TopologyValueCollision" : "NodeRegistrationFailed",
                       "driver %s: %s", d->o.driver->name, msg);
        free(d->last_error);
        d->last_error = util_strdup(msg);
        wq_add_rate_limited(d->q, KEY);
    }
    json_object_put(node);
}

static void *worker_main(void *arg)
{
    reg_direct *d = arg;
    char *key = NULL;
    util_thread_name("w:node");
    while (wq_get(d->q, &key) == 0) {
        sync_once(d);
        wq_done(d->q, key);
        free(key);
        key = NULL;
    }
    return NULL;
}

/* ---- watches --------------------------------------------------------------------- */

/* A failing registration already waits for its backoff: events of the
 * Node (status updates, say) must not turn that into a tight loop. */
static bool retry_pending(reg_direct *d)
{
    return wq_num_requeues(d->q, KEY) > 0;
}

static void node_changed(reg_direct *d, const json_object *obj)
{
    if (!retry_pending(d) && !nodereg_node_has(obj, d->o.driver)) {
        obs_v(2, "Node %s lacks the registration of %s, writing it again", d->o.node_name,
              d->o.driver->name);
        wq_add(d->q, KEY);
    }
}

static void csinode_changed(reg_direct *d, const json_object *obj)
{
    if (!retry_pending(d) && !nodereg_csinode_has(obj, d->o.driver)) {
        obs_v(2, "CSINode %s lacks the entry of %s, writing it again", d->o.node_name,
              d->o.driver->name);
        wq_add(d->q, KEY);
    }
}

static void node_add(void *ud, json_object *obj)
{
    node_changed(ud, obj);
}

static bool str_eq(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* Did what our registration depends on change (so a failing one may now
 * succeed, backoff or not)? */
static bool node_relevant_change(reg_direct *d, const json_object *old, const json_object *obj)
{
    if (!str_eq(kobj_annotation(old, NODEREG_NODEID_ANNOTATION),
                kobj_annotation(obj, NODEREG_NODEID_ANNOTATION)))
        return true;
    for (size_t i = 0; i < d->o.driver->n_segments; i++)
        if (!str_eq(kobj_label(old, d->o.driver->segments[i].key),
                    kobj_label(obj, d->o.driver->segments[i].key)))
            return true;
    return false;
}

static void node_update(void *ud, json_object *old, json_object *obj)
{
    reg_direct *d = ud;
    if (retry_pending(d) && node_relevant_change(d, old, obj))
        wq_add(d->q, KEY);
    else
        node_changed(d, obj);
}

static void csinode_add(void *ud, json_object *obj)
{
    csinode_changed(ud, obj);
}

static void csinode_update(void *ud, json_object *old, json_object *obj)
{
    reg_direct *d = ud;
    if (retry_pending(d) &&
        !json_object_equal(kobj_path(old, "spec.drivers"), kobj_path(obj, "spec.drivers")))
        wq_add(d->q, KEY);
    else
        csinode_changed(d, obj);
}

static void any_delete(void *ud, json_object *obj)
{
    (void)obj;
    reg_direct *d = ud;
    if (!retry_pending(d))
        wq_add(d->q, KEY);
}

/* The cache needs only what the checks read. */
static void slim(void *ud, json_object *obj)
{
    (void)ud;
    json_object *meta = kobj_meta(obj);
    kobj_del(meta, "managedFields");
    kobj_del(obj, "status");
}

static int watch(reg_direct *d, const kube_resource *res, kube_handlers h, kube_informer **out)
{
    char *sel = util_asprintf("metadata.name=%s", d->o.node_name);
    kube_informer_opts io = {.res = res, .field_selector = sel, .transform = slim, .handlers = h};
    int r = kube_informer_new(d->o.kube, &io, out);
    if (r == 0)
        r = kube_informer_start(*out);
    free(sel);
    return r;
}

int reg_direct_start(const reg_direct_opts *opts, reg_direct **out)
{
    *out = NULL;
    reg_direct *d = util_calloc(1, sizeof(*d));
    d->o = *opts;
    wq_opts qo = {
        .name = "registration", .base_delay = 500 * UTIL_MS, .max_delay = 5 * UTIL_MINUTE};
    d->q = wq_new(&qo);
    wq_add(d->q, KEY);
    if (pthread_create(&d->worker, NULL, worker_main, d) != 0) {
        reg_direct_stop(d, false);
        return util_err_set(-EAGAIN, "cannot start the registration thread");
    }
    d->worker_started = true;
    kube_handlers nh = {
        .on_add = node_add, .on_update = node_update, .on_delete = any_delete, .ud = d};
    kube_handlers ch = {
        .on_add = csinode_add, .on_update = csinode_update, .on_delete = any_delete, .ud = d};
    int r = watch(d, &KUBE_NODE, nh, &d->node_inf);
    if (r == 0)
        r = watch(d, &KUBE_CSINODE, ch, &d->csinode_inf);
    if (r < 0) {
        reg_direct_stop(d, false);
        return r;
    }
    *out = d;
    return 0;
}

bool reg_direct_registered(reg_direct *d)
{
    return d && atomic_load(&d->registered);
}

int reg_direct_stop(reg_direct *d, bool cleanup)
{
    if (!d)
        return 0;
    kube_informer_free(d->node_inf);
    kube_informer_free(d->csinode_inf);
    wq_shutdown(d->q, false);
    if (d->worker_started)
        pthread_join(d->worker, NULL);
    wq_free(d->q);
    int r = 0;
    if (cleanup) {
        r = nodereg_uninstall(d->o.kube, d->o.node_name, d->o.driver->name);
        if (r < 0)
            obs_error("Removing the registration of driver %s from node %s failed: %s",
                      d->o.driver->name, d->o.node_name, util_err_last());
        else
            obs_info("Removed the registration of driver %s from node %s", d->o.driver->name,
                     d->o.node_name);
    }
    free(d->last_error);
    free(d);
    return r;
}
