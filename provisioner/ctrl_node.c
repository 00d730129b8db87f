/*
 * --node-deployment: each node's provisioner handles the claims that select
 * its node, and for Immediate claims competes to become their owner
 * (selected-node patch guarded by resourceVersion) after a jittered,
 * growing delay and only if the node's topology and capacity fit.
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- node deployment ------------------------------------------------------------ */

/* Outside node mode every claim is; in it, one whose selected node is ours. */
bool ctrl_node_selected_here(prov_ctrl *c, const json_object *pvc)
{
    if (!c->local_node)
        return true;
    const char *sel = kobj_annotation(pvc, ANN_SELECTED_NODE);
    return sel && strcmp(sel, c->o.node.name) == 0;
}

/* A claim this node waits to own: upstream's per-claim backoff, and when
 * the current wait ends (0: not waiting). */
struct owning {
    char *uid;
    int requeues;
    util_duration due;
};

void ctrl_node_free_owning(struct lh_entry *e)
{
    struct owning *o = (struct owning *)lh_entry_v(e);
    if (o)
        free(o->uid);
    free(o);
    free(lh_entry_k(e));
}

/* The claim is owned (by us or another node) or gone: later attempts start
 * from the base delay again. */
void ctrl_node_forget(prov_ctrl *c, const char *key)
{
    if (!c->owning)
        return;
    pthread_mutex_lock(&c->done_mu);
    lh_table_delete(c->owning, key);
    pthread_mutex_unlock(&c->done_mu);
}

static double draw(void)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != (ssize_t)sizeof(r))
        r = 0;
    return (double)r / 4294967296.0;
}

/*
 * Starts the next wait for `key` (uid `uid`) unless one runs: 1 with *wait
 * set while waiting (the claim comes back after it), 0 when the wait is
 * over and the attempt is due now.
 */
static int node_wait(prov_ctrl *c, const char *key, const char *uid, bool again,
                     util_duration *wait)
{
    util_duration now = util_now_mono();
    *wait = 0;
    pthread_mutex_lock(&c->done_mu);
    void *found = NULL;
    struct owning *o = lh_table_lookup_ex(c->owning, key, &found) ? found : NULL;
    if (o && strcmp(o->uid, uid) != 0) {
        lh_table_delete(c->owning, key); /* the claim was replaced */
        o = NULL;
    }
    if (!o) {
        o = util_calloc(1, sizeof(*o));
        o->uid = util_strdup(uid);
        lh_table_insert(c->owning, util_strdup(key), o);
    }
    if (o->due == 0 || again) {
        util_duration d =
            prov_node_delay(c->o.node.base_delay, c->o.node.max_delay, o->requeues, draw());
        o->requeues++;
        o->due = d > 0 ? now + d : 0;
        *wait = d;
    } else if (now < o->due) {
        *wait = o->due - now;
    } else {
        o->due = 0;
    }
    int requeues = o->requeues;
    pthread_mutex_unlock(&c->done_mu);
    if (*wait > 0)
        obs_v(5, "will try to become owner of PVC %s in %.3f s (attempt #%d)", key,
              (double)*wait / UTIL_SECOND, requeues);
    return *wait > 0;
}

/* Whether the StorageClass's allowedTopologies admit this node (upstream
 * tries to build the requirements for it). */
static bool node_topology_allowed(prov_ctrl *c, const json_object *pvc, const json_object *sc)
{
    json_object *allowed = kobj_arr(sc, "allowedTopologies");
    if (!c->cfg.topology || kobj_len(allowed) == 0)
        return true;
    json_object *nodes = json_object_new_array();
    json_object_array_add(nodes, json_object_get(c->local_node));
    prov_topology_in in = {.selected_node = c->o.node.name,
                           .node = c->local_node,
                           .csinode = c->local_csinode,
                           .nodes = nodes,
                           .allowed_topologies = allowed,
                           .pvc_name = kobj_name(pvc)};
    Csi__V1__TopologyRequirement *t = NULL;
    int rc = prov_topology(&c->cfg, &in, &t);
    prov_topology_free(t);
    json_object_put(nodes);
    if (rc < 0)
        obs_v(5, "ignoring PVC %s/%s, allowed topologies is not compatible: %s",
              kobj_namespace(pvc), kobj_name(pvc), util_err_last());
    return rc == 0;
}

/*
 * Whether this node has room for the claim now: the request is planned as
 * if this node were selected, then GetCapacity per requisite topology.
 * Anything that fails on the way counts as room, as upstream: provisioning
 * then fails the same way and tells the user in an event.
 */
static bool node_has_capacity(prov_ctrl *c, const json_object *pvc, const json_object *sc)
{
    int64_t want = 0;
    if (!c->o.node.get_capacity || prov_pvc_request_bytes(pvc, &want) < 0 || want == 0)
        return true;
    json_object *copy = NULL;
    json_object_deep_copy((json_object *)pvc, &copy, NULL);
    if (kobj_set_annotation(copy, ANN_SELECTED_NODE, c->o.node.name) < 0) {
        json_object_put(copy);
        return true; /* malformed metadata: provisioning reports it */
    }
    Csi__V1__CreateVolumeRequest *req = NULL;
    prov_secret_refs refs = {0};
    prov_state state = PROV_FINAL;
    struct ctrl_source src;
    bool room = true;
    int rc = ctrl_resolve_source(c, copy, &src);
    if (rc == 0)
        rc = ctrl_plan_request(c, copy, sc, src.kind, src.id, &req, &refs, &state);
    if (rc != 0) {
        obs_v(3, "proceeding with becoming owner although the capacity check failed: %s",
              rc < 0 ? util_err_last() : "external data source");
        goto out;
    }
    room = false;
    for (size_t i = 0; i < prov_node_capacity_count(req) && !room; i++) {
        Csi__V1__GetCapacityRequest gc;
        prov_node_capacity_request(req, i, &gc);
        Csi__V1__GetCapacityResponse *resp = NULL;
        csi_status st = {0};
        if (csi_get_capacity(c->o.csi, &gc, c->o.timeout, &resp, &st) < 0) {
            obs_v(3,
                  "proceeding with becoming owner although the capacity check failed: "
                  "GetCapacity: %s",
                  st.message);
            room = true;
            break;
        }
        room = resp->available_capacity >= want;
        csi__v1__get_capacity_response__free_unpacked(resp, NULL);
    }
out:
    ctrl_source_clear(&src);
    prov_request_free(req);
    prov_secret_refs_clear(&refs);
    json_object_put(copy);
    return room;
}

/*
 * Sets the selected node to ours on the claim as the cache shows it: the
 * resourceVersion test makes a claim another node took meanwhile (or any
 * newer version) refuse the patch. 1: owned; 0: lost the race; <0: error.
 */
static int node_become_owner(prov_ctrl *c, const json_object *pvc, const char *path)
{
    char *patch = kobj_patch_set_annotation(pvc, ANN_SELECTED_NODE, c->o.node.name, true);
    if (!patch)
        return util_err_set(-EINVAL, "selecting node \"%s\" for PVC failed: malformed metadata",
                            c->o.node.name);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, &r);
    free(patch);
    if (rc == 0)
        rc = 1;
    else if (r.code == 409 || r.code == 422)
        rc = 0; /* a stale cache or another node won: look again later */
    else
        rc =
            util_err_set(rc, "selecting node \"%s\" for PVC failed: %s", c->o.node.name, r.message);
    kube_resp_clear(&r);
    return rc;
}

/*
 * A claim of our driver that is not ours yet, in node mode. 1: it selects
 * our node, provision it; 0: nothing to do now (another node's, waiting
 * for a node, or an attempt to own it is scheduled); <0: retry.
 */
int ctrl_node_claim(prov_ctrl *c, const char *key, const json_object *pvc)
{
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    prov_node_claim e = prov_node_eligibility(pvc, sc, c->o.node.name, c->o.node.immediate_binding);
    const char *uid = kobj_uid(pvc);
    int rc = 0;
    util_duration wait = 0;
    char *path = NULL;
    switch (e) {
    case PROV_NODE_OURS:
        ctrl_node_forget(c, key);
        rc = 1;
        goto out;
    case PROV_NODE_OTHER:
        ctrl_node_forget(c, key);
        goto out;
    case PROV_NODE_WAIT:
        /* An unknown class: upstream retries until it appears. */
        if (!sc && !prov_selected_node(pvc))
            rc = util_err_set(-ENOENT, "storageclass.storage.k8s.io \"%s\" not found",
                              class ? class : "");
        goto out;
    case PROV_NODE_CANDIDATE:
        break;
    }
    /* Wait first, so the instances on all nodes do not patch at once; an
     * update (another node took it) brings the claim back earlier. */
    if (node_wait(c, key, uid ? uid : "", false, &wait) > 0) {
        wq_add_after(c->claims, key, wait);
        goto out;
    }
    if (!node_topology_allowed(c, pvc, sc)) {
        ctrl_node_forget(c, key);
        goto out;
    }
    if (!node_has_capacity(c, pvc, sc)) {
        /* Upstream leaves such a claim until something changes; we look
         * again after the next (longer, capped) delay, so a claim no node
         * has room for now is provisioned once one has. */
        obs_v(5, "not enough capacity for PVC %s with resource version %s", key, kobj_rv(pvc));
        if (node_wait(c, key, uid ? uid : "", true, &wait) > 0)
            wq_add_after(c->claims, key, wait);
        else
            wq_add(c->claims, key);
        goto out;
    }
    path = ctrl_pvc_path(pvc);
    rc = node_become_owner(c, pvc, path);
    if (rc == 1) {
        obs_v(3, "became owner of PVC %s", key);
        ctrl_node_forget(c, key);
        rc = 0; /* the update event brings the claim back as ours */
    } else if (rc == 0) {
        obs_v(3, "conflict during PVC %s update, will try again", key);
        if (node_wait(c, key, uid ? uid : "", true, &wait) > 0)
            wq_add_after(c->claims, key, wait);
        else
            wq_add(c->claims, key);
    }
out:
    free(path);
    json_object_put(sc);
    return rc;
}
