/*
 * The Node, as its kubelet keeps it:
 *
 *   - at start (--register-node) the Node is created when missing, with
 *     the hostname label and the controller-managed-attach-detach
 *     annotation (set on an existing Node too: the attach/detach
 *     controller manages only nodes that carry it), and an empty CSINode;
 *   - status through nodes/status, as one strategic merge patch: Ready
 *     True (KubeletReady) and the three pressure conditions False, each
 *     keeping its transition time while its status holds; capacity and
 *     allocatable (cpu, memory, pods, ephemeral-storage) for a scheduler;
 *     nodeInfo; and volumesInUse, which the volume manager asks for before
 *     it mounts anything. Written at start, whenever the volumes in use
 *     change, and at least every --node-status-report-frequency (the
 *     heartbeat of the conditions);
 *   - the Lease kube-node-lease/<node> (holder the node, owned by the
 *     Node) renewed every quarter of its duration, as the kubelet's
 *     10 s for 40 s.
 *
 * One heartbeat thread does the periodic writes; status writes of the
 * volume manager's workers and of that thread take one mutex, so the set
 * written last is always the newest. Failures are logged (once per new
 * message, then at -v=2) and retried; nothing here exits.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kubelet-sim/ksim.h"
#include "nodereg/nodereg.h"
#include "obs/obs.h"

#define RETRY_EVERY (2 * UTIL_SECOND)

struct ksim_node {
    kube_client *kube;
    ksim_node_opts o;
    void (*in_use)(void *ud, char ***v, size_t *n);
    void *in_use_ud;

    pthread_mutex_t mu; /* one status write at a time; guards the fields below */
    char **written;     /* volumesInUse as last written */
    size_t n_written;
    bool have_written;
    util_duration last_status; /* monotonic time of the last status write */
    char *uid;                 /* the Node's uid once read */

    /* Only the heartbeat thread uses these. */
    bool lease_owned;
    char *status_error, *lease_error; /* the last failure of each logged at error severity */

    pthread_t th;
    bool running;
    pthread_mutex_t stop_mu;
    pthread_cond_t stop_cv;
    bool stop;
};

/* Logs a failure of the heartbeat thread at error severity the first time
 * it reads so, then at -v=2: a Node or Lease the API refuses to let us
 * write is one line each, not a flood; a success clears it. `last` is that
 * write's slot. */
static void note(char **last, bool ok, const char *what)
{
    if (ok) {
        if (*last)
            obs_info("%s: works again", what);
        free(*last);
        *last = NULL;
        return;
    }
    const char *msg = util_err_last();
    bool repeat = *last && strcmp(*last, msg) == 0;
    if (!repeat) {
        free(*last);
        *last = util_strdup(msg);
    }
    if (repeat)
        obs_v(2, "%s: %s (will retry)", what, msg);
    else
        obs_error("%s: %s (will retry)", what, msg);
}

static void set_uid(ksim_node *nd, const json_object *node)
{
    const char *uid = kobj_uid(node);
    if (!uid || (nd->uid && strcmp(nd->uid, uid) == 0))
        return;
    free(nd->uid);
    nd->uid = util_strdup(uid);
}

/* ---- registration -------------------------------------------------------------------- */

/* Answers the Node as read (json_object_put it) or NULL with -errno. */
static int get_node(ksim_node *nd, json_object **out)
{
    *out = NULL;
    char *path = kube_path(&KUBE_NODE, NULL, nd->o.info.name, NULL);
    kube_resp r = {0};
    int rc = kube_get(nd->kube, path, &r);
    free(path);
    if (rc < 0)
        rc = util_err_set(kube_is_not_found(&r) ? -ENOENT : rc, "Node %s: %d %s", nd->o.info.name,
                          r.code, r.message);
    else
        *out = json_object_get(r.body);
    kube_resp_clear(&r);
    return rc;
}

int ksim_node_register(ksim_node *nd)
{
    const char *name = nd->o.info.name;
    json_object *node = NULL;
    int rc = get_node(nd, &node);
    if (rc == -ENOENT) {
        json_object *n = ksim_node_object(name);
        char *coll = kube_path(&KUBE_NODE, NULL, NULL, NULL);
        kube_resp r = {0};
        rc = kube_create(nd->kube, coll, n, &r);
        free(coll);
        json_object_put(n);
        if (rc == 0) {
            obs_info("Registered Node %s", name);
            node = json_object_get(r.body);
        } else if (kube_is_already_exists(&r)) {
            rc = get_node(nd, &node);
        } else {
            rc = util_err_set(rc, "Node %s: %d %s", name, r.code, r.message);
        }
        kube_resp_clear(&r);
    }
    if (rc < 0)
        return rc;
    char *patch = ksim_node_cmad_patch(node);
    if (patch) {
        char *path = kube_path(&KUBE_NODE, NULL, name, NULL);
        kube_resp r = {0};
        rc = kube_patch(nd->kube, path, KUBE_PATCH_MERGE, patch, &r);
        if (rc == 0) {
            obs_info("Node %s: set %s", name, KSIM_CMAD_ANNOTATION);
            json_object_put(node);
            node = json_object_get(r.body);
        } else {
            rc = util_err_set(rc, "Node %s: cannot set %s: %d %s", name, KSIM_CMAD_ANNOTATION,
                              r.code, r.message);
        }
        kube_resp_clear(&r);
        free(path);
        free(patch);
    }
    if (rc == 0 && kobj_uid(node)) {
        pthread_mutex_lock(&nd->mu);
        set_uid(nd, node);
        pthread_mutex_unlock(&nd->mu);
        /* The kubelet creates its (empty) CSINode at start, owned by the Node. */
        json_object *cn = nodereg_csinode_new(node, NULL, NODEREG_KUBELET_MIGRATED_PLUGINS);
        char *coll = kube_path(&KUBE_CSINODE, NULL, NULL, NULL);
        kube_resp r = {0};
        if (kube_create(nd->kube, coll, cn, &r) < 0 && !kube_is_already_exists(&r))
            obs_warn("cannot create CSINode %s: %d %s", name, r.code, r.message);
        free(coll);
        kube_resp_clear(&r);
        json_object_put(cn);
    }
    json_object_put(node);
    return rc;
}

/* ---- status -------------------------------------------------------------------------- */

static bool same_set(char *const *a, size_t na, char *const *b, size_t nb)
{
    if (na != nb)
        return false;
    for (size_t i = 0; i < na; i++)
        if (strcmp(a[i], b[i]) != 0)
            return false;
    return true;
}

/* The volume manager's set now (sorted), empty without one. */
static void current_set(ksim_node *nd, char ***v, size_t *n)
{
    *v = NULL;
    *n = 0;
    if (nd->in_use)
        nd->in_use(nd->in_use_ud, v, n);
}

/* Reads the Node, posts its status with `v`; under nd->mu. Takes `v`. */
static int write_status_locked(ksim_node *nd, char **v, size_t n)
{
    json_object *node = NULL;
    int rc = get_node(nd, &node);
    if (rc < 0) {
        ksim_strv_free(v, n);
        return rc;
    }
    set_uid(nd, node);
    char *patch = ksim_node_status_patch(&nd->o.info, node, v, n, time(NULL));
    json_object_put(node);
    char *path = kube_path(&KUBE_NODE, NULL, nd->o.info.name, "status");
    kube_resp r = {.skip_body = true};
    rc = kube_patch(nd->kube, path, KUBE_PATCH_STRATEGIC, patch, &r);
    if (rc < 0)
        rc = util_err_set(rc, "Node %s status: %d %s", nd->o.info.name, r.code, r.message);
    kube_resp_clear(&r);
    free(path);
    free(patch);
    if (rc < 0) {
        ksim_strv_free(v, n);
        return rc;
    }
    if (!nd->have_written || !same_set(v, n, nd->written, nd->n_written))
        obs_v(2, "Node %s: volumesInUse now %zu volume(s)", nd->o.info.name, n);
    ksim_strv_free(nd->written, nd->n_written);
    nd->written = v;
    nd->n_written = n;
    nd->have_written = true;
    nd->last_status = util_now_mono();
    return 0;
}

int ksim_node_sync_in_use(ksim_node *nd)
{
    pthread_mutex_lock(&nd->mu);
    char **v = NULL;
    size_t n = 0;
    current_set(nd, &v, &n);
    int rc = 0;
    if (nd->have_written && same_set(v, n, nd->written, nd->n_written))
        ksim_strv_free(v, n);
    else
        rc = write_status_locked(nd, v, n);
    pthread_mutex_unlock(&nd->mu);
    return rc;
}

/* The periodic write: the conditions' heartbeat. */
static int heartbeat(ksim_node *nd)
{
    pthread_mutex_lock(&nd->mu);
    char **v = NULL;
    size_t n = 0;
    current_set(nd, &v, &n);
    int rc = write_status_locked(nd, v, n);
    pthread_mutex_unlock(&nd->mu);
    return rc;
}

/* ---- the Lease ----------------------------------------------------------------------- */

static int create_lease(ksim_node *nd, const char *uid, const struct timespec *now)
{
    json_object *l = ksim_lease_object(nd->o.info.name, uid, nd->o.lease_duration_s, now);
    char *coll = kube_path(&KUBE_LEASE, KSIM_LEASE_NAMESPACE, NULL, NULL);
    kube_resp r = {.skip_body = true};
    int rc = kube_create(nd->kube, coll, l, &r);
    if (rc == 0)
        nd->lease_owned = uid != NULL;
    else if (!kube_is_already_exists(&r))
        rc = util_err_set(rc, "Lease %s/%s: %d %s", KSIM_LEASE_NAMESPACE, nd->o.info.name, r.code,
                          r.message);
    kube_resp_clear(&r);
    free(coll);
    json_object_put(l);
    return rc;
}

static int renew_lease(ksim_node *nd)
{
    const char *name = nd->o.info.name;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    pthread_mutex_lock(&nd->mu);
    char *uid = nd->uid ? util_strdup(nd->uid) : NULL;
    pthread_mutex_unlock(&nd->mu);
    char *path = kube_path(&KUBE_LEASE, KSIM_LEASE_NAMESPACE, name, NULL);
    json_object *lease = NULL;
    kube_resp r = {0};
    int rc = 0;
    if (!nd->lease_owned && uid) {
        /* Once: read it to see whether it still lacks its ownerReference. */
        rc = kube_get(nd->kube, path, &r);
        lease = rc == 0 ? json_object_get(r.body) : NULL;
        if (rc < 0 && kube_is_not_found(&r))
            rc = -ENOENT;
        kube_resp_clear(&r);
    }
    if (rc == 0) {
        char *patch =
            ksim_lease_renew_patch(lease, name, lease ? uid : NULL, nd->o.lease_duration_s, &now);
        r.skip_body = true;
        rc = kube_patch(nd->kube, path, KUBE_PATCH_MERGE, patch, &r);
        if (rc == 0 && lease)
            nd->lease_owned = true;
        if (rc < 0 && kube_is_not_found(&r))
            rc = -ENOENT;
        else if (rc < 0)
            rc = util_err_set(rc, "Lease %s/%s: %d %s", KSIM_LEASE_NAMESPACE, name, r.code,
                              r.message);
        kube_resp_clear(&r);
        free(patch);
    }
    if (rc == -ENOENT)
        rc = create_lease(nd, uid, &now);
    json_object_put(lease);
    free(uid);
    free(path);
    return rc;
}

/* ---- the heartbeat thread ------------------------------------------------------------ */

/* Sleeps until `until` (monotonic) or a stop; true when stopping. */
static bool wait_until(ksim_node *nd, util_duration until)
{
    pthread_mutex_lock(&nd->stop_mu);
    while (!nd->stop) {
        util_duration left = until - util_now_mono();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += (time_t)(left / UTIL_SECOND);
        ts.tv_nsec += (long)(left % UTIL_SECOND);
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&nd->stop_cv, &nd->stop_mu, &ts);
    }
    bool stop = nd->stop;
    pthread_mutex_unlock(&nd->stop_mu);
    return stop;
}

static void *heartbeat_main(void *arg)
{
    ksim_node *nd = arg;
    util_thread_name("node-status");
    util_duration renew_every = (util_duration)nd->o.lease_duration_s * UTIL_SECOND / 4;
    util_duration next_lease = 0, next_status = 0;
    for (;;) {
        util_duration now = util_now_mono();
        if (now >= next_status) {
            bool ok = heartbeat(nd) == 0;
            note(&nd->status_error, ok, "posting node status");
            /* A status written meanwhile for volumesInUse counts too. */
            pthread_mutex_lock(&nd->mu);
            util_duration last = nd->last_status;
            pthread_mutex_unlock(&nd->mu);
            next_status =
                ok ? last + nd->o.report_every
                   : now + (RETRY_EVERY < nd->o.report_every ? RETRY_EVERY : nd->o.report_every);
        }
        if (now >= next_lease) {
            bool ok = renew_lease(nd) == 0;
            note(&nd->lease_error, ok, "renewing the node lease");
            next_lease = now + (ok || renew_every < RETRY_EVERY ? renew_every : RETRY_EVERY);
        }
        if (wait_until(nd, next_lease < next_status ? next_lease : next_status))
            break;
    }
    return NULL;
}

/* ---- life ---------------------------------------------------------------------------- */

int ksim_node_new(kube_client *kube, const ksim_node_opts *o, ksim_node **out)
{
    ksim_node *nd = util_calloc(1, sizeof(*nd));
    nd->kube = kube;
    nd->o = *o;
    if (nd->o.lease_duration_s < 1)
        nd->o.lease_duration_s = 40;
    if (nd->o.report_every <= 0)
        nd->o.report_every = UTIL_MINUTE;
    pthread_mutex_init(&nd->mu, NULL);
    pthread_mutex_init(&nd->stop_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&nd->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    *out = nd;
    return 0;
}

void ksim_node_in_use_source(ksim_node *nd, void (*fn)(void *ud, char ***v, size_t *n), void *ud)
{
    nd->in_use = fn;
    nd->in_use_ud = ud;
}

int ksim_node_start(ksim_node *nd)
{
    if (pthread_create(&nd->th, NULL, heartbeat_main, nd) != 0)
        return util_err_set(-EAGAIN, "cannot start the node status thread");
    nd->running = true;
    return 0;
}

void ksim_node_stop(ksim_node *nd)
{
    if (!nd || !nd->running)
        return;
    pthread_mutex_lock(&nd->stop_mu);
    nd->stop = true;
    pthread_cond_broadcast(&nd->stop_cv);
    pthread_mutex_unlock(&nd->stop_mu);
    pthread_join(nd->th, NULL);
    nd->running = false;
}

void ksim_node_free(ksim_node *nd)
{
    if (!nd)
        return;
    ksim_node_stop(nd);
    ksim_strv_free(nd->written, nd->n_written);
    free(nd->uid);
    free(nd->status_error);
    free(nd->lease_error);
    pthread_mutex_destroy(&nd->mu);
    pthread_mutex_destroy(&nd->stop_mu);
    pthread_cond_destroy(&nd->stop_cv);
    free(nd);
}
