/*
 * The provisioner's controllers: claims (PVC -> CreateVolume -> PV) and
 * volumes (released PV -> DeleteVolume -> PV removed).
 *
 * Informer events only queue keys ("namespace/name" for claims, the PV name
 * for volumes); workers run sync_claim / sync_volume, which read the caches,
 * take one step and are safe to rerun after a crash at any line:
 *
 *   - Before its first CreateVolume a claim gets the finalizer
 *     PROV_FINALIZER_IN_PROGRESS: the intent to create a volume lives in the
 *     API, not in memory. It goes once the PV exists; if the claim is deleted
 *     meanwhile, the same CreateVolume (same name, so idempotent) is repeated
 *     to learn the volume id, DeleteVolume removes it, and only then does the
 *     finalizer go. A restart therefore never leaks a volume (upstream #486).
 *   - Finalizers are removed with a JSON patch test+remove on the exact list
 *     entry, never a merge patch built from a stale cache (upstream #1217).
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "provisioner.h"
#include "kobj/kobj.h"

#include "wq/wq.h"

#define PV_FINALIZER           "external-provisioner.volume.kubernetes.io/finalizer"
#define ANN_PROVISIONER        "volume.kubernetes.io/storage-provisioner"
#define ANN_BETA_PROVISIONER   "volume.beta.kubernetes.io/storage-provisioner"
#define ANN_SELECTED_NODE      "volume.kubernetes.io/selected-node"
#define ANN_PROVISIONED_BY     "pv.kubernetes.io/provisioned-by"
#define ANN_DELETE_SECRET_NAME "volume.kubernetes.io/provisioner-deletion-secret-name"
#define ANN_DELETE_SECRET_NS   "volume.kubernetes.io/provisioner-deletion-secret-namespace"

#define CLONE_FINALIZER       "provisioner.storage.kubernetes.io/cloning-protection"
#define SNAPSHOT_FINALIZER    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
#define ANN_ALLOW_MODE_CHANGE "snapshot.storage.k8s.io/allow-volume-mode-change"

/* Returned by a sync that must wait --retry-interval-max (infeasible). */
#define SYNC_SLOW 1

struct prov_ctrl {
    /* PVs whose volume DeleteVolume already removed: a stale cache must not
     * send DeleteVolume twice (upstream #1235). Memory only: after a crash
     * the repeat is one idempotent call. */
    pthread_mutex_t done_mu;
    struct lh_table *deleted;
    /* Claims (by uid) whose in-progress finalizer we removed: a cached copy
     * still showing it is stale (only we add it, and adding it again drops
     * the entry), so a sync must not patch again (a 422 and a GET). */
    struct lh_table *released;
    /* Claims (by uid) whose PV this process created: until the claim is
     * bound (and leaves the cache) it waits for the binder, even when the
     * PV is not cached (yet, or no longer: Bound volumes are not), instead
     * of getting the finalizer and a CreateVolume again. */
    struct lh_table *provisioned;
    /* Volumes (by name) deleted and whose finalizer we removed: cached
     * copies still showing it are stale, not a reason for another patch. */
    struct lh_table *finalized;
    /* the snapshot orphan sweeper */
    pthread_t sweep_th;
    bool sweeping;
    pthread_mutex_t sweep_mu;
    pthread_cond_t sweep_cv;
    bool stopping;
    prov_ctrl_opts o;
    prov_config cfg;
    kube_informer *pvcs, *pvs, *classes, *nodes, *csinodes, *vas;
    /* --node-deployment: the static Node and CSINode of this node (built
     * from NodeGetInfo, as upstream, instead of watching every node), its
     * labels, and the Immediate claims this node waits to own (claim key ->
     * struct owning, under done_mu). All NULL outside node mode. */
    json_object *local_node, *local_csinode, *local_labels;
    struct lh_table *owning;
    wq *claims, *volumes;
    pthread_t *threads;
    int n_threads;
    obs_metric *provision_total, *provision_failed, *provision_seconds;
    obs_metric *delete_total, *delete_failed, *delete_seconds;
};

/* ---- finalizers ----------------------------------------------------------------- */

/* Adds `fin`, conditional on the resourceVersion we decided on. */
static int add_finalizer(prov_ctrl *c, const char *path, const json_object *obj, const char *fin)
{
    char *patch = kobj_patch_add_finalizer(obj, fin, true);
    if (!patch)
        return util_err_set(-EINVAL, "adding finalizer %s to %s: malformed metadata", fin, path);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, &r);
    if (rc < 0)
        obs_v(2, "adding finalizer %s to %s: %s", fin, path, r.message);
    kube_resp_clear(&r);
    free(patch);
    return rc;
}

/* add_finalizer unless it is there already. */
static int add_finalizer_idempotent(prov_ctrl *c, const char *path, const json_object *obj,
                                    const char *fin)
{
    return kobj_finalizer_index(obj, fin) >= 0 ? 0 : add_finalizer(c, path, obj, fin);
}

static int remove_at(prov_ctrl *c, const char *path, int i, const char *fin, kube_resp *r)
{
    char *patch = kobj_patch_remove_finalizer_at(i, fin);
    if (!patch)
        return -EINVAL;
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_JSON, patch, r);
    free(patch);
    return rc;
}

/*
 * Removes `fin` with test+remove on its exact entry. When the cached object
 * was stale (the test fails), the live object decides: done if the
 * finalizer is gone, else one more try at its current index.
 */
static int remove_finalizer(prov_ctrl *c, const char *path, const json_object *obj, const char *fin)
{
    int i = kobj_finalizer_index(obj, fin);
    if (i < 0)
        return 0;
    kube_resp r = {0};
    int rc = remove_at(c, path, i, fin, &r);
    if (rc < 0 && r.code == 422) {
        kube_resp_clear(&r);
        if (kube_get(c->o.kube, path, &r) == 0) {
            i = kobj_finalizer_index(r.body, fin);
            kube_resp_clear(&r);
            rc = i < 0 ? 0 : remove_at(c, path, i, fin, &r);
        }
    }
    if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    if (rc < 0)
        obs_v(2, "removing finalizer %s from %s: %s", fin, path, r.message);
    kube_resp_clear(&r);
    return rc;
}

/* Adds or drops `uid` in one of the uid sets guarded by done_mu. */
static void uid_mark(prov_ctrl *c, struct lh_table *set, const char *uid, bool on)
{
    if (!uid)
        return;
    pthread_mutex_lock(&c->done_mu);
    if (!on)
        lh_table_delete(set, uid);
    else if (!lh_table_lookup_entry(set, uid))
        lh_table_insert(set, util_strdup(uid), NULL);
    pthread_mutex_unlock(&c->done_mu);
}

static bool uid_marked(prov_ctrl *c, struct lh_table *set, const char *uid)
{
    if (!uid)
        return false;
    pthread_mutex_lock(&c->done_mu);
    bool yes = lh_table_lookup_entry(set, uid) != NULL;
    pthread_mutex_unlock(&c->done_mu);
    return yes;
}

/* Removes the claim's in-progress finalizer and remembers that we did. */
static int release_claim(prov_ctrl *c, const char *path, const json_object *pvc)
{
    int rc = remove_finalizer(c, path, pvc, PROV_FINALIZER_IN_PROGRESS);
    if (rc == 0)
        uid_mark(c, c->released, kobj_uid(pvc), true);
    return rc;
}

/* True when the cached claim still shows a finalizer we already removed. */
static bool released_already(prov_ctrl *c, const json_object *pvc)
{
    return uid_marked(c, c->released, kobj_uid(pvc));
}

/* ---- claims --------------------------------------------------------------------- */

static char *pvc_path(const json_object *pvc)
{
    return kube_path(&KUBE_PVC, kobj_namespace(pvc), kobj_name(pvc), NULL);
}

/* Whether this claim is ours to provision (shouldProvision, A1.5 step 2). */
static bool should_provision(prov_ctrl *c, const json_object *pvc)
{
    const char *want = kobj_annotation(pvc, ANN_PROVISIONER);
    if (!want)
        want = kobj_annotation(pvc, ANN_BETA_PROVISIONER);
    return want && strcmp(want, c->cfg.driver_name) == 0;
}

struct node_list {
    json_object *arr;
};

static void add_node(void *ud, json_object *obj)
{
    struct node_list *l = ud;
    json_object_array_add(l->arr, json_object_get(obj));
}

struct keys_pick {
    const char *driver;
    json_object *keys; /* a copy */
    unsigned seen;
    unsigned rnd;
};

static void pick_keys(void *ud, json_object *csinode)
{
    struct keys_pick *p = ud;
    const json_object *k = prov_csinode_keys(csinode, p->driver);
    if (kobj_len(k) == 0)
        return;
    /* Reservoir sampling: a random CSINode, as upstream picks one. */
    if (p->rnd % ++p->seen == 0) {
        json_object_put(p->keys);
        p->keys = NULL;
        json_object_deep_copy((json_object *)k, &p->keys, NULL);
    }
    p->rnd = p->rnd * 1103515245u + 12345u;
}

static void event_failed(prov_ctrl *c, const json_object *pvc, int code, const char *msg)
{
    if (code == CSI_INVALID_ARGUMENT)
        kube_event(c->o.recorder, pvc, "Warning", "ProvisioningFailed", "%s%s",
                   PROV_INFEASIBLE_EVENT_PREFIX, msg);
    else
        kube_event(c->o.recorder, pvc, "Warning", "ProvisioningFailed", "%s", msg);
}

/* Builds the CreateVolumeRequest from the caches; -errno with *state set. */
static int plan_request(prov_ctrl *c, const json_object *pvc, const json_object *sc,
                        prov_source_kind kind, const char *source_id,
                        Csi__V1__CreateVolumeRequest **req, prov_secret_refs *refs,
                        prov_state *state)
{
    prov_request_in in = {.pvc = pvc, .sc = sc, .source = kind, .source_id = source_id};
    const char *node = prov_selected_node(pvc);
    json_object *node_obj = NULL, *csinode = NULL, *keys = NULL;
    struct node_list nodes = {NULL};
    if (node && *node && c->local_node) {
        /* Node mode: only this node exists for the topology code. */
        if (strcmp(node, c->o.node.name) == 0) {
            node_obj = json_object_get(c->local_node);
            csinode = json_object_get(c->local_csinode);
        }
    } else if (node && *node) {
        node_obj = c->nodes ? kube_informer_get(c->nodes, NULL, node) : NULL;
        if (!c->nodes) {
            /* Without topology the lib still checks the Node exists. */
            kube_resp r = {0};
            char *path = kube_path(&KUBE_NODE, NULL, node, NULL);
            if (kube_get(c->o.kube, path, &r) == 0)
                node_obj = json_object_get(r.body);
            kube_resp_clear(&r);
            free(path);
        }
        csinode = c->csinodes ? kube_informer_get(c->csinodes, NULL, node) : NULL;
    }
    if (c->cfg.topology && c->local_node) {
        nodes.arr = json_object_new_array();
        add_node(&nodes, c->local_node);
        const json_object *k = prov_csinode_keys(c->local_csinode, c->cfg.driver_name);
        if ((!node || !*node) && k)
            json_object_deep_copy((json_object *)k, &keys, NULL);
    } else if (c->cfg.topology) {
        nodes.arr = json_object_new_array();
        kube_informer_each(c->nodes, add_node, &nodes);
        if (!node || !*node) {
            struct keys_pick p = {.driver = c->cfg.driver_name};
            if (getrandom(&p.rnd, sizeof(p.rnd), 0) != (ssize_t)sizeof(p.rnd))
                p.rnd = 1;
            kube_informer_each(c->csinodes, pick_keys, &p);
            keys = p.keys;
        }
    }
    /* The VolumeAttributesClass the claim names becomes mutable_parameters. */
    json_object *vac = NULL;
    const char *vac_name = kobj_path_str(pvc, "spec.volumeAttributesClassName");
    if (c->cfg.vac_enabled && vac_name && *vac_name) {
        char *vpath = kube_path(&KUBE_VOLUMEATTRIBUTESCLASS, NULL, vac_name, NULL);
        kube_resp r = {0};
        if (kube_get(c->o.kube, vpath, &r) == 0)
            vac = json_object_get(r.body);
        kube_resp_clear(&r);
        free(vpath);
    }
    in.vac = vac;
    in.topology.node = node_obj;
    in.topology.csinode = csinode;
    in.topology.nodes = nodes.arr;
    in.topology.immediate_keys = keys;
    int rc = prov_build_request(&c->cfg, &in, req, refs, state);
    if (rc == 0 && !*req)
        rc = util_err_set(-EINVAL, "no CreateVolume request was built");
    json_object_put(vac);
    json_object_put(node_obj);
    json_object_put(csinode);
    json_object_put(nodes.arr);
    json_object_put(keys);
    return rc;
}

/* Copies the provisioner secret's data into the request; a missing secret
 * is an error for create (upstream fails provisioning). */
static int add_secrets(prov_ctrl *c, Csi__V1__CreateVolumeRequest *req, const prov_secret_ref *ref)
{
    if (!ref->name)
        return 0;
    char *path = kube_path(&KUBE_SECRET, ref->namespace, ref->name, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc == 0)
        rc = prov_request_set_secrets(req, kobj_get(r.body, "data"));
    else
        rc = util_err_set(-EREMOTEIO, "error getting secret %s in namespace %s: %s", ref->name,
                          ref->namespace, r.message);
    kube_resp_clear(&r);
    free(path);
    return rc;
}

static int delete_volume(prov_ctrl *c, const char *volume_id, const json_object *secret_data,
                         csi_status *st)
{
    Csi__V1__DeleteVolumeRequest dr = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
    dr.volume_id = (char *)volume_id;
    /* Secrets travel as a map of strings, decoded from the Secret's data. */
    Csi__V1__CreateVolumeRequest tmp = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
    if (secret_data && prov_request_set_secrets(&tmp, secret_data) == 0) {
        dr.n_secrets = tmp.n_secrets;
        dr.secrets = (Csi__V1__DeleteVolumeRequest__SecretsEntry **)tmp.secrets;
    }
    int rc = csi_delete_volume(c->o.csi, &dr, c->o.timeout, st);
    prov_request_set_secrets(&tmp, NULL);
    return rc;
}

static void class_label(const json_object *sc, const char **v)
{
    const char *n = sc ? kobj_name(sc) : NULL;
    v[0] = n ? n : "";
}

/* ---- data sources ------------------------------------------------------------------ */

/* The claim's data source: spec.dataSourceRef, else spec.dataSource. */
static json_object *data_source(const json_object *pvc)
{
    json_object *spec = kobj_get(pvc, "spec");
    json_object *ref = kobj_get(spec, "dataSourceRef");
    return ref ? ref : kobj_get(spec, "dataSource");
}

struct source {
    prov_source_kind kind;
    char *id;
    char *path;       /* the source object's API path, for its finalizer */
    json_object *obj; /* the source object (PVC or VolumeSnapshot) */
};

static void source_clear(struct source *src)
{
    free(src->id);
    free(src->path);
    json_object_put(src->obj);
    memset(src, 0, sizeof(*src));
}

static int64_t quantity_of(json_object *q)
{
    int64_t v = 0;
    if (q && json_object_is_type(q, json_type_string) &&
        prov_quantity_parse(json_object_get_string(q), &v) == 0)
        return v;
    return 0;
}

/*
 * The cached object, or else the API server's: a clone's source claim and
 * volume are bound, and the caches leave settled bound objects out
 * (keep_pvc, keep_pv). NULL when neither has it.
 */
static json_object *cached_or_get(prov_ctrl *c, kube_informer *inf, const kube_resource *res,
                                  const char *ns, const char *name)
{
    json_object *obj = kube_informer_get(inf, ns, name);
    if (obj)
        return obj;
    char *path = kube_path(res, ns, name, NULL);
    kube_resp r = {0};
    if (kube_get(c->o.kube, path, &r) == 0)
        obj = json_object_get(r.body);
    kube_resp_clear(&r);
    free(path);
    return obj;
}

/* Both set and equal. */
static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

/* Upstream's answer for every problem with the source PV of a clone (the
 * details only go to the log). */
#define CLONE_PV_INVALID "claim in dataSource not bound or invalid"

/* spec.volumeMode, "Filesystem" when not set. */
static const char *volume_mode(const json_object *o)
{
    const char *m = kobj_path_str(o, "spec.volumeMode");
    return m && *m ? m : "Filesystem";
}

/*
 * A clone (getPVCSource): the source claim bound and not being deleted
 * (unless it still carries our finalizer: a clone of it was started before
 * the deletion and must be able to finish), both claims with a class, the
 * request at least the source's, the source PV ours and bound to it, equal
 * volume modes. Another class of the same driver is allowed (upstream since
 * v3.2).
 */
static int resolve_clone(prov_ctrl *c, const json_object *pvc, const char *name, struct source *src)
{
    const char *ns = kobj_namespace(pvc);
    json_object *spvc = cached_or_get(c, c->pvcs, &KUBE_PVC, ns, name);
    if (!spvc)
        return util_err_set(-ENOENT,
                            "error getting PVC %s (namespace \"%s\") from api server: "
                            "persistentvolumeclaim \"%s\" not found",
                            name, ns, name);
    json_object *pv = NULL;
    const char *vol = kobj_path_str(spvc, "spec.volumeName");
    int64_t want = 0, have = 0;
    prov_pvc_request_bytes(pvc, &want);
    prov_pvc_request_bytes(spvc, &have);
    int rc = 0;
    /* (the cache keeps no status: a claim is bound once it names its PV) */
    if (!vol || !*vol)
        rc = util_err_set(-EAGAIN, "the PVC DataSource %s must have a status of Bound", name);
    else if (kobj_deleting(spvc) && kobj_finalizer_index(spvc, CLONE_FINALIZER) < 0)
        rc = util_err_set(-EAGAIN, "the PVC DataSource %s is currently being deleted", name);
    else if (!kobj_path_str(spvc, "spec.storageClassName"))
        rc = util_err_set(-EINVAL, "the source PVC (%s) storageclass cannot be empty", name);
    else if (!kobj_path_str(pvc, "spec.storageClassName"))
        rc = util_err_set(-EINVAL, "the requested PVC (%s) storageclass cannot be empty",
                          kobj_name(pvc));
    else if (want < have)
        rc = util_err_set(-EINVAL,
                          "error, new PVC request must be greater than or equal in size to the "
                          "specified PVC data source, requested %lld but source is %lld",
                          (long long)want, (long long)have);
    if (rc < 0)
        goto out;
    pv = cached_or_get(c, c->pvs, &KUBE_PV, NULL, vol);
    json_object *csi = kobj_path(pv, "spec.csi");
    json_object *ref = kobj_path(pv, "spec.claimRef");
    const char *driver = kobj_str(csi, "driver"), *phase = kobj_path_str(pv, "status.phase");
    const char *why = NULL;
    if (!pv)
        why = "does not exist";
    else if (!csi || !kobj_str(csi, "volumeHandle"))
        why = "is not a CSI volume";
    else if (!streq(driver, c->cfg.driver_name))
        why = "is handled by another driver";
    else if (!streq(kobj_str(ref, "uid"), kobj_uid(spvc)) ||
             !streq(kobj_str(ref, "namespace"), ns) || !streq(kobj_str(ref, "name"), name))
        why = "is not bound to that claim";
    else if (!streq(phase, "Bound"))
        why = "is not Bound";
    if (why) {
        obs_warn("the source volume %s of claim %s/%s %s", vol, ns, name, why);
        rc = util_err_set(-EAGAIN, CLONE_PV_INVALID);
        goto out;
    }
    const char *want_mode = volume_mode(pvc), *src_mode = volume_mode(pv);
    if (strcmp(want_mode, src_mode) != 0) {
        rc = util_err_set(-EINVAL,
                          "the source PVC and destination PVCs must have the same volume mode "
                          "for cloning.  Source is %s, but new PVC requested %s",
                          src_mode, want_mode);
        goto out;
    }
    src->kind = PROV_SOURCE_VOLUME;
    src->id = util_strdup(kobj_str(csi, "volumeHandle"));
    src->path = kube_path(&KUBE_PVC, ns, name, NULL);
    src->obj = json_object_get(spvc);
out:
    json_object_put(pv);
    json_object_put(spvc);
    return rc;
}

/* strconv.ParseBool: 1 true, 0 false, -1 not a boolean. */
static int parse_bool(const char *s)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(s, yes[i]) == 0)
            return 1;
        if (strcmp(s, no[i]) == 0)
            return 0;
    }
    return -1;
}

/* Whether the content belongs to this snapshot and to our driver. */
static bool content_matches(prov_ctrl *c, const json_object *vs, const json_object *vsc)
{
    json_object *ref = kobj_path(vsc, "spec.volumeSnapshotRef");
    const char *driver = kobj_path_str(vsc, "spec.driver");
    if (!streq(kobj_str(ref, "uid"), kobj_uid(vs)) ||
        !streq(kobj_str(ref, "namespace"), kobj_namespace(vs)) ||
        !streq(kobj_str(ref, "name"), kobj_name(vs))) {
        obs_warn("snapshotcontent %s for snapshot %s/%s is bound to a different snapshot",
                 kobj_name(vsc), kobj_namespace(vs), kobj_name(vs));
        return false;
    }
    if (!streq(driver, c->cfg.driver_name)) {
        obs_warn("snapshotcontent %s for snapshot %s/%s is handled by driver %s, not %s",
                 kobj_name(vsc), kobj_namespace(vs), kobj_name(vs), driver ? driver : "",
                 c->cfg.driver_name);
        return false;
    }
    return true;
}

/*
 * A restore (getSnapshotSource), in upstream's order: the snapshot not being
 * deleted (unless our finalizer is still on it), bound to a content that
 * names it and belongs to our driver (all "not bound" otherwise), ready, with
 * a handle, a restore size within the request, and no volume mode change
 * without the content's permission.
 */
static int resolve_snapshot(prov_ctrl *c, const json_object *pvc, const char *name,
                            struct source *src)
{
    const char *ns = kobj_namespace(pvc);
    char *path = kube_path(&KUBE_VOLUMESNAPSHOT, ns, name, NULL);
    kube_resp r = {0}, cr = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc < 0) {
        rc =
            util_err_set(-EAGAIN, "error getting snapshot %s from api server: %s", name, r.message);
        goto out;
    }
    json_object *st = kobj_get(r.body, "status");
    const char *content = kobj_str(st, "boundVolumeSnapshotContentName");
    if (kobj_deleting(r.body) && kobj_finalizer_index(r.body, SNAPSHOT_FINALIZER) < 0) {
        rc = util_err_set(-EAGAIN, "snapshot %s is being deleted", name);
        goto out;
    }
    if (!content) {
        rc = util_err_set(-EAGAIN, "snapshot %s not bound", name);
        goto out;
    }
    char *cpath = kube_path(&KUBE_VOLUMESNAPSHOTCONTENT, NULL, content, NULL);
    rc = kube_get(c->o.kube, cpath, &cr);
    free(cpath);
    if (rc < 0)
        obs_warn("error getting snapshotcontent %s for snapshot %s/%s from api server: %s", content,
                 ns, name, cr.message);
    if (rc < 0 || !content_matches(c, r.body, cr.body)) {
        rc = util_err_set(-EAGAIN, "snapshot %s not bound", name);
        goto out;
    }
    if (!kobj_bool(st, "readyToUse", false)) {
        rc = util_err_set(-EAGAIN, "snapshot %s is not Ready", name);
        goto out;
    }
    const char *handle = kobj_path_str(cr.body, "status.snapshotHandle");
    if (!handle) {
        rc = util_err_set(-EAGAIN, "snapshot handle %s is not available", name);
        goto out;
    }
    if (kobj_get(st, "restoreSize")) {
        int64_t want = 0, restore = quantity_of(kobj_get(st, "restoreSize"));
        prov_pvc_request_bytes(pvc, &want);
        if (want < restore) {
            rc = util_err_set(-EINVAL,
                              "requested volume size %lld is less than the size %lld for the "
                              "source snapshot %s",
                              (long long)want, (long long)restore, name);
            goto out;
        }
    }
    const char *src_mode = kobj_path_str(cr.body, "spec.sourceVolumeMode");
    const char *mode = kobj_path_str(pvc, "spec.volumeMode");
    if (c->o.prevent_volume_mode_conversion && src_mode && mode && strcmp(src_mode, mode) != 0) {
        const char *allow = kobj_annotation(cr.body, ANN_ALLOW_MODE_CHANGE);
        int yes = allow ? parse_bool(allow) : 0;
        if (!allow)
            rc = util_err_set(-EINVAL,
                              "requested volume %s/%s modifies the mode of the source volume but "
                              "does not have permission to do so. %s annotation is not present "
                              "on snapshotcontent %s",
                              ns, kobj_name(pvc), ANN_ALLOW_MODE_CHANGE, content);
        else if (yes < 0)
            rc = util_err_set(-EINVAL,
                              "requested volume %s/%s modifies the mode of the source volume but "
                              "does not have permission to do so. failed to convert %s "
                              "annotation value to boolean with error: strconv.ParseBool: "
                              "parsing \"%s\": invalid syntax",
                              ns, kobj_name(pvc), ANN_ALLOW_MODE_CHANGE, allow);
        else if (yes == 0)
            rc = util_err_set(-EINVAL,
                              "requested volume %s/%s modifies the mode of the source volume but "
                              "does not have permission to do so. %s is set to false on "
                              "snapshotcontent %s",
                              ns, kobj_name(pvc), ANN_ALLOW_MODE_CHANGE, content);
        if (rc < 0)
            goto out;
    }
    src->kind = PROV_SOURCE_SNAPSHOT;
    src->id = util_strdup(handle);
    src->path = path;
    path = NULL;
    src->obj = json_object_get(r.body);
out:
    kube_resp_clear(&cr);
    kube_resp_clear(&r);
    free(path);
    return rc;
}

/* The kind of source the claim asks us for (NONE also for a populator's). */
static prov_source_kind source_kind(const json_object *pvc)
{
    json_object *ds = data_source(pvc);
    const char *kind = kobj_str(ds, "kind"), *group = kobj_str(ds, "apiGroup");
    if (!kind || !kobj_str(ds, "name"))
        return PROV_SOURCE_NONE;
    if (strcmp(kind, "PersistentVolumeClaim") == 0 && (!group || !*group))
        return PROV_SOURCE_VOLUME;
    if (strcmp(kind, "VolumeSnapshot") == 0 && group &&
        strcmp(group, "snapshot.storage.k8s.io") == 0)
        return PROV_SOURCE_SNAPSHOT;
    return PROV_SOURCE_NONE;
}

/* 0 with src filled (kind NONE without a source); 1: not ours (a populator's).
 * Errors carry upstream's "error getting handle for DataSource ..." prefix. */
static int resolve_source(prov_ctrl *c, const json_object *pvc, struct source *src)
{
    memset(src, 0, sizeof(*src));
    json_object *ds = data_source(pvc);
    const char *kind = kobj_str(ds, "kind"), *name = kobj_str(ds, "name");
    if (!kind || !name)
        return 0;
    prov_source_kind k = source_kind(pvc);
    if (k == PROV_SOURCE_NONE)
        return 1;
    int rc = k == PROV_SOURCE_VOLUME ? resolve_clone(c, pvc, name, src)
                                     : resolve_snapshot(c, pvc, name, src);
    if (rc < 0) {
        char *why = util_strdup(util_err_last());
        rc = util_err_set(rc, "error getting handle for DataSource Type %s by Name %s: %s", kind,
                          name, why);
        free(why);
    }
    return rc;
}

struct pending_use {
    const char *ns, *kind, *name;
    const char *except; /* a claim being done with it */
    bool used;
};

static void check_use(void *ud, json_object *pvc)
{
    struct pending_use *u = ud;
    json_object *ds = data_source(pvc);
    const char *k = kobj_str(ds, "kind"), *n = kobj_str(ds, "name"), *ns = kobj_namespace(pvc);
    const char *vol = kobj_path_str(pvc, "spec.volumeName");
    if (!k || !n || !ns || strcmp(k, u->kind) != 0 || strcmp(n, u->name) != 0 ||
        strcmp(ns, u->ns) != 0 || (vol && *vol))
        return;
    if (u->except && streq(kobj_name(pvc), u->except))
        return;
    u->used = true;
}

/*
 * Drops a source's protection finalizer once no claim that is still being
 * provisioned from it remains (the cloning-protection controller, and the
 * orphan sweep for snapshots). -EBUSY while a claim still uses it.
 */
static int release_source(prov_ctrl *c, const char *ns, const char *kind, const char *name,
                          const char *except)
{
    struct pending_use u = {ns, kind, name, except, false};
    kube_informer_each(c->pvcs, check_use, &u);
    if (u.used)
        return -EBUSY;
    bool clone = strcmp(kind, "PersistentVolumeClaim") == 0;
    char *path = kube_path(clone ? &KUBE_PVC : &KUBE_VOLUMESNAPSHOT, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc == 0)
        rc = remove_finalizer(c, path, r.body, clone ? CLONE_FINALIZER : SNAPSHOT_FINALIZER);
    else if (kube_is_not_found(&r))
        rc = 0;
    kube_resp_clear(&r);
    free(path);
    return rc;
}

/*
 * The claim was deleted while its volume may exist: repeat the create to
 * learn the id (idempotent by name), delete it, then let the claim go.
 */
static int cleanup_deleted_claim(prov_ctrl *c, const json_object *pvc, const char *path)
{
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    if (!sc) {
        obs_warn("claim %s/%s was deleted during provisioning and its StorageClass is gone: "
                 "cannot repeat CreateVolume to clean up; releasing the claim",
                 kobj_namespace(pvc), kobj_name(pvc));
        return release_claim(c, path, pvc);
    }
    Csi__V1__CreateVolumeRequest *req = NULL;
    prov_secret_refs refs = {0};
    prov_state state = PROV_FINAL;
    /* The repeat must match the original request, source included. */
    struct source src;
    int rc = resolve_source(c, pvc, &src);
    if (rc == 0)
        rc = plan_request(c, pvc, sc, src.kind, src.id, &req, &refs, &state);
    if (rc != 0) {
        /* No request can be built (or the source is a populator's), so none
         * was ever sent. */
        source_clear(&src);
        json_object_put(sc);
        prov_secret_refs_clear(&refs);
        return release_claim(c, path, pvc);
    }
    rc = add_secrets(c, req, &refs.ref[PROV_SECRET_PROVISIONER]);
    csi_status st = {0};
    Csi__V1__CreateVolumeResponse *resp = NULL;
    if (rc == 0)
        rc = csi_create_volume(c->o.csi, req, c->o.timeout, &resp, &st);
    if (rc == 0) {
        csi_status ds = {0};
        Csi__V1__DeleteVolumeRequest__SecretsEntry **sec =
            (Csi__V1__DeleteVolumeRequest__SecretsEntry **)req->secrets;
        Csi__V1__DeleteVolumeRequest dr = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
        dr.volume_id = resp->volume->volume_id;
        dr.n_secrets = req->n_secrets;
        dr.secrets = sec;
        rc = csi_delete_volume(c->o.csi, &dr, c->o.timeout, &ds);
        if (rc < 0)
            obs_warn("cleanup of volume %s of deleted claim %s/%s: %s", resp->volume->volume_id,
                     kobj_namespace(pvc), kobj_name(pvc), ds.message);
        else
            obs_info("deleted volume %s of claim %s/%s, which was deleted during provisioning",
                     resp->volume->volume_id, kobj_namespace(pvc), kobj_name(pvc));
        csi__v1__create_volume_response__free_unpacked(resp, NULL);
    } else if (st.code == CSI_ALREADY_EXISTS) {
        /* A volume of that name exists but this request does not match it:
         * we cannot learn its id, so the claim waits for an operator. */
        obs_warn("cleanup of deleted claim %s/%s: CreateVolume answers ALREADY_EXISTS: %s",
                 kobj_namespace(pvc), kobj_name(pvc), st.message);
    } else if (st.code != CSI_OK &&
               prov_classify(st.code, c->cfg.topology, prov_selected_node(pvc) != NULL) !=
                   PROV_IN_BACKGROUND) {
        /* A final answer: the driver holds no volume of that name. */
        rc = 0;
    }
    prov_request_free(req);
    prov_secret_refs_clear(&refs);
    json_object_put(sc);
    if (rc == 0 && src.kind != PROV_SOURCE_NONE)
        release_source(c, kobj_namespace(pvc),
                       src.kind == PROV_SOURCE_VOLUME ? "PersistentVolumeClaim" : "VolumeSnapshot",
                       kobj_name(src.obj), kobj_name(pvc));
    source_clear(&src);
    if (rc < 0)
        return rc;
    return release_claim(c, path, pvc);
}

static int remove_selected_node(prov_ctrl *c, const char *path)
{
    char patch[160];
    snprintf(patch, sizeof(patch), "{\"metadata\":{\"annotations\":{\"%s\":null}}}",
             ANN_SELECTED_NODE);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, patch, &r);
    kube_resp_clear(&r);
    return rc;
}

static int provision(prov_ctrl *c, json_object *pvc, const char *path, const char *volname)
{
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    const char *lv[1];
    class_label(sc, lv);
    if (!sc) {
        char *msg =
            util_asprintf("storageclass.storage.k8s.io \"%s\" not found", class ? class : "");
        event_failed(c, pvc, CSI_UNKNOWN, msg);
        free(msg);
        return -ENOENT;
    }
    const char *prov = kobj_str(sc, "provisioner");
    if (!prov || strcmp(prov, c->cfg.driver_name) != 0) {
        json_object_put(sc);
        return 0; /* the class is someone else's */
    }
    bool resp_ok = false;
    util_duration start = util_now_mono();
    kube_event(c->o.recorder, pvc, "Normal", "Provisioning",
               "External provisioner is provisioning volume for claim \"%s/%s\"",
               kobj_namespace(pvc), kobj_name(pvc));

    Csi__V1__CreateVolumeRequest *req = NULL;
    prov_secret_refs refs = {0};
    prov_state state = PROV_FINAL;
    /* A driver that cannot use the source fails before the source is
     * looked at or protected (upstream checks capabilities first): a
     * finalizer added here would never be released. */
    struct source src = {PROV_SOURCE_NONE, NULL, NULL, NULL};
    int rc = prov_check_capabilities(&c->cfg, source_kind(pvc), false);
    if (rc == 0)
        rc = resolve_source(c, pvc, &src);
    if (rc == 1) {
        /* Another kind of source: a volume populator's job, not ours. */
        kube_event(c->o.recorder, pvc, "Normal", "Provisioning",
                   "Assuming an external populator will provision the volume");
        json_object_put(sc);
        return 0;
    }
    if (rc == 0 && src.kind != PROV_SOURCE_NONE) {
        /* The source may not go away while the volume is made from it. */
        rc = add_finalizer_idempotent(c, src.path, src.obj,
                                      src.kind == PROV_SOURCE_VOLUME ? CLONE_FINALIZER
                                                                     : SNAPSHOT_FINALIZER);
    }
    if (rc == 0)
        rc = plan_request(c, pvc, sc, src.kind, src.id, &req, &refs, &state);
    if (rc == 0)
        rc = add_secrets(c, req, &refs.ref[PROV_SECRET_PROVISIONER]);
    if (rc != 0) {
        char *msg = util_strdup(util_err_last());
        event_failed(c, pvc, CSI_UNKNOWN, msg);
        obs_v(2, "claim %s: %s", path, msg);
        free(msg);
        if (state == PROV_RESCHEDULE && prov_selected_node(pvc)) {
            /* Release before giving the node back: in node mode another
             * node may own the claim as soon as the annotation is gone. */
            release_claim(c, path, pvc);
            remove_selected_node(c, path);
            rc = 0;
        }
        obs_counter_add(c->provision_failed, lv, 1);
        goto out;
    }
    csi_status st = {0};
    Csi__V1__CreateVolumeResponse *resp = NULL;
    rc = csi_create_volume(c->o.csi, req, c->o.timeout, &resp, &st);
    /* A failure may mean the class is full somewhere (upstream refreshes too). */
    if (rc < 0 && c->o.volume_changed)
        c->o.volume_changed(c->o.volume_changed_ud, kobj_name(sc), NULL);
    if (rc < 0) {
        state = prov_classify(st.code, c->cfg.topology, prov_selected_node(pvc) != NULL);
        char *msg =
            util_asprintf("rpc error: code = %s desc = %s", csi_code_go_name(st.code), st.message);
        event_failed(c, pvc, st.code, msg);
        obs_v(2, "CreateVolume for %s: %s (%s)", path, msg, prov_state_name(state));
        free(msg);
        obs_counter_add(c->provision_failed, lv, 1);
        if (state == PROV_RESCHEDULE) {
            /* The driver has no volume of that name (it would have returned
             * it), so the claim's intent goes with the node (released first,
             * as above). */
            rc = release_claim(c, path, pvc);
            if (rc == 0)
                rc = remove_selected_node(c, path);
        } else if (prov_is_infeasible(st.code)) {
            rc = SYNC_SLOW;
        }
        goto out;
    }
    resp_ok = true;
    int64_t capacity = 0;
    rc = prov_check_response(&c->cfg, pvc, req, resp, &capacity);
    if (rc < 0) {
        char *check = util_strdup(util_err_last());
        csi_status ds = {0};
        Csi__V1__DeleteVolumeRequest dr = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
        dr.volume_id = resp->volume ? resp->volume->volume_id : "";
        dr.n_secrets = req->n_secrets;
        dr.secrets = (Csi__V1__DeleteVolumeRequest__SecretsEntry **)req->secrets;
        if (resp->volume && csi_delete_volume(c->o.csi, &dr, c->o.timeout, &ds) < 0) {
            char *msg = prov_orphan_message(rc, check, volname, ds.message);
            event_failed(c, pvc, CSI_UNKNOWN, msg);
            free(msg);
        } else {
            event_failed(c, pvc, CSI_UNKNOWN, check);
        }
        free(check);
        csi__v1__create_volume_response__free_unpacked(resp, NULL);
        goto out;
    }
    json_object *pv = NULL;
    rc = prov_build_pv(&c->cfg, pvc, sc, req, resp, &refs, &pv);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    if (rc == 0 && c->o.volume_changed)
        c->o.volume_changed(c->o.volume_changed_ud, kobj_name(sc), pv);
    if (rc < 0) {
        event_failed(c, pvc, CSI_UNKNOWN, util_err_last());
        goto out;
    }
    kube_resp r = {0};
    rc = kube_create(c->o.kube, "/api/v1/persistentvolumes", pv, &r);
    if (rc < 0 && kube_is_already_exists(&r))
        rc = 0;
    if (rc < 0)
        obs_warn("creating PV %s for claim %s: %s", volname, path, r.message);
    kube_resp_clear(&r);
    json_object_put(pv);
    if (rc == 0) {
        obs_info("successfully provisioned volume %s for claim %s", volname, path);
        kube_event(c->o.recorder, pvc, "Normal", "ProvisioningSucceeded",
                   "Successfully provisioned volume %s", volname);
        obs_counter_add(c->provision_total, lv, 1);
        obs_histogram_observe(c->provision_seconds, lv,
                              (double)(util_now_mono() - start) / UTIL_SECOND);
        uid_mark(c, c->provisioned, kobj_uid(pvc), true);
        rc = release_claim(c, path, pvc);
    }
out:
    /* Done with the source once the volume exists (upstream drops the
     * snapshot's finalizer here too), unless other claims still need it. */
    if (src.kind != PROV_SOURCE_NONE && resp_ok)
        release_source(c, kobj_namespace(pvc),
                       src.kind == PROV_SOURCE_VOLUME ? "PersistentVolumeClaim" : "VolumeSnapshot",
                       kobj_name(src.obj), kobj_name(pvc));
    source_clear(&src);
    prov_request_free(req);
    prov_secret_refs_clear(&refs);
    json_object_put(sc);
    return rc;
}

/*
 * Whether a deleted claim still needs cleaning up, asked of the API rather
 * than the caches, which may be behind: a claim whose finalizer is already
 * gone (its PV made, or an earlier cleanup done) must not get a repeated
 * CreateVolume, which would make a volume nobody deletes; and when its PV
 * exists, the volume is the PV's, so DeleteVolume must not take it. 1: clean
 * up; 0: nothing to do (the finalizer is released when the PV exists).
 */
static int cleanup_needed(prov_ctrl *c, const json_object *pvc, const char *path,
                          const char *volname)
{
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc < 0) {
        if (kube_is_not_found(&r))
            rc = 0;
        kube_resp_clear(&r);
        return rc;
    }
    const char *uid = kobj_uid(r.body), *want = kobj_uid(pvc);
    bool still = uid && want && strcmp(uid, want) == 0 &&
                 kobj_finalizer_index(r.body, PROV_FINALIZER_IN_PROGRESS) >= 0;
    kube_resp_clear(&r);
    if (!still)
        return 0;
    char *pv_path = kube_path(&KUBE_PV, NULL, volname, NULL);
    rc = kube_get(c->o.kube, pv_path, &r);
    free(pv_path);
    if (rc == 0) {
        kube_resp_clear(&r);
        rc = release_claim(c, path, pvc);
        return rc < 0 ? rc : 0;
    }
    if (kube_is_not_found(&r))
        rc = 1;
    kube_resp_clear(&r);
    return rc;
}

/* ---- node deployment ------------------------------------------------------------ */

/* Outside node mode every claim is; in it, one whose selected node is ours. */
static bool node_selected_here(prov_ctrl *c, const json_object *pvc)
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

static void free_owning(struct lh_entry *e)
{
    struct owning *o = (struct owning *)lh_entry_v(e);
    if (o)
        free(o->uid);
    free(o);
    free(lh_entry_k(e));
}

/* The claim is owned (by us or another node) or gone: later attempts start
 * from the base delay again. */
static void node_forget(prov_ctrl *c, const char *key)
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
    struct source src;
    bool room = true;
    int rc = resolve_source(c, copy, &src);
    if (rc == 0)
        rc = plan_request(c, copy, sc, src.kind, src.id, &req, &refs, &state);
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
    source_clear(&src);
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
static int node_claim(prov_ctrl *c, const char *key, const json_object *pvc)
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
        node_forget(c, key);
        rc = 1;
        goto out;
    case PROV_NODE_OTHER:
        node_forget(c, key);
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
        node_forget(c, key);
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
    path = pvc_path(pvc);
    rc = node_become_owner(c, pvc, path);
    if (rc == 1) {
        obs_v(3, "became owner of PVC %s", key);
        node_forget(c, key);
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

static int sync_claim(prov_ctrl *c, const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    json_object *pvc = kube_informer_get(c->pvcs, ns, slash + 1);
    free(ns);
    if (!pvc) {
        node_forget(c, key);
        return 0;
    }
    int rc = 0;
    char *path = pvc_path(pvc);
    char *volname = NULL;
    /* Cloning protection: a clone source being deleted loses our finalizer
     * once no claim is still being cloned from it (retried with backoff
     * until then). Besides our own leftovers, upstream leaves the finalizer
     * on every clone source until it is deleted. */
    int protect = 0;
    if (c->cfg.clone_volume && kobj_deleting(pvc) &&
        kobj_finalizer_index(pvc, CLONE_FINALIZER) >= 0)
        protect =
            release_source(c, kobj_namespace(pvc), "PersistentVolumeClaim", kobj_name(pvc), NULL);
    /* Every driver's provisioner uses the same finalizer name: it is ours
     * only on a claim that asks for our driver (and, in node mode, that
     * selects our node). */
    bool ours = kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) >= 0 &&
                should_provision(c, pvc) && node_selected_here(c, pvc);
    if (ours && released_already(c, pvc))
        goto out; /* a stale copy: the update without the finalizer is on its way */
    bool deleting = kobj_deleting(pvc);
    const char *bound = kobj_path_str(pvc, "spec.volumeName");
    if (bound && *bound) {
        if (ours)
            rc = release_claim(c, path, pvc);
        goto out;
    }
    if (!ours && (deleting || !should_provision(c, pvc)))
        goto out;
    if (!ours && uid_marked(c, c->provisioned, kobj_uid(pvc)))
        goto out; /* our PV exists: the binder's turn */
    if (!ours && c->local_node) {
        rc = node_claim(c, key, pvc);
        if (rc <= 0)
            goto out; /* not ours (yet) */
    }
    rc = prov_volume_name(&c->cfg, kobj_uid(pvc), &volname);
    if (rc < 0)
        goto out;
    /* A PV of ours for this claim means the work is done (a crash may have
     * come between creating it and releasing the claim). */
    /* The informer synced before the workers started, so a PV made before a
     * restart is in the cache; one made moments ago by this process may not
     * be yet, and then CreateVolume (idempotent) and the PV create
     * (AlreadyExists) simply repeat. */
    json_object *pv = kube_informer_get(c->pvs, NULL, volname);
    if (pv) {
        json_object_put(pv);
        if (ours)
            rc = release_claim(c, path, pvc);
        goto out;
    }
    if (deleting) {
        rc = cleanup_needed(c, pvc, path, volname);
        if (rc > 0)
            rc = cleanup_deleted_claim(c, pvc, path);
        goto out;
    }
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    const char *mode = sc ? kobj_str(sc, "volumeBindingMode") : NULL;
    bool wffc = mode && strcmp(mode, "WaitForFirstConsumer") == 0;
    json_object_put(sc);
    if (wffc && !prov_selected_node(pvc))
        goto out; /* waits for the scheduler */
    if (!ours) {
        /* Record the intent first; the update event brings the claim back. */
        rc = add_finalizer(c, path, pvc, PROV_FINALIZER_IN_PROGRESS);
        if (rc == 0)
            uid_mark(c, c->released, kobj_uid(pvc), false);
        goto out;
    }
    rc = provision(c, pvc, path, volname);
out:
    if (rc == 0 && protect < 0)
        rc = protect;
    free(volname);
    free(path);
    json_object_put(pvc);
    return rc;
}

/* ---- volumes -------------------------------------------------------------------- */

struct attached {
    char *node;
};

static void first_attachment(void *ud, json_object *va)
{
    struct attached *a = ud;
    if (!a->node) {
        const char *n = kobj_path_str(va, "spec.nodeName");
        a->node = util_strdup(n ? n : "");
    }
}

static int sync_volume(prov_ctrl *c, const char *name)
{
    json_object *pv = kube_informer_get(c->pvs, NULL, name);
    if (!pv)
        return 0;
    int rc = 0;
    char *path = kube_path(&KUBE_PV, NULL, name, NULL);
    const char *by = kobj_annotation(pv, ANN_PROVISIONED_BY);
    json_object *csi = kobj_path(pv, "spec.csi");
    const char *driver = kobj_str(csi, "driver");
    if (!by || strcmp(by, c->cfg.driver_name) != 0 || !driver ||
        strcmp(driver, c->cfg.driver_name) != 0)
        goto out;
    if (c->local_node) {
        /* Node mode: only the node the volume lives on may delete it. */
        bool here = true;
        rc = prov_node_pv_accessible(pv, c->local_labels, &here);
        if (rc < 0 || !here)
            goto out;
    }
    const char *policy = kobj_path_str(pv, "spec.persistentVolumeReclaimPolicy");
    bool has_fin = kobj_finalizer_index(pv, PV_FINALIZER) >= 0;
    if (has_fin && uid_marked(c, c->finalized, name))
        goto out; /* a stale copy: the volume is deleted and its finalizer gone */
    bool deleting = kobj_deleting(pv);
    if (!policy || strcmp(policy, "Delete") != 0) {
        /* Retain and Recycle never reach DeleteVolume: no finalizer. */
        if (has_fin)
            rc = remove_finalizer(c, path, pv, PV_FINALIZER);
        goto out;
    }
    const char *phase = kobj_path_str(pv, "status.phase");
    if (!phase || strcmp(phase, "Released") != 0) {
        if (!has_fin && !deleting)
            rc = add_finalizer(c, path, pv, PV_FINALIZER);
        goto out;
    }
    const char *sc_v[1];
    const char *class = kobj_path_str(pv, "spec.storageClassName");
    sc_v[0] = class ? class : "";
    if (c->vas) {
        struct attached a = {NULL};
        kube_informer_by_index(c->vas, "pv", name, first_attachment, &a);
        if (a.node) {
            kube_event(c->o.recorder, pv, "Warning", "VolumeFailedDelete",
                       "persistentvolume %s is still attached to node %s", name, a.node);
            free(a.node);
            rc = -EBUSY;
            goto out;
        }
    }
    pthread_mutex_lock(&c->done_mu);
    bool already = lh_table_lookup_entry(c->deleted, name) != NULL;
    pthread_mutex_unlock(&c->done_mu);
    if (already)
        goto remove_pv;
    /* The PV read above may be gone by now: its delete event clears the
     * entry only after the cache dropped the PV, so a miss above with the
     * PV still cached means it was never deleted. Without this look, a
     * stale copy sent a second DeleteVolume. */
    json_object *still = kube_informer_get(c->pvs, NULL, name);
    if (!still)
        goto out;
    json_object_put(still);
    util_duration start = util_now_mono();
    json_object *secret_data = NULL;
    const char *sname = kobj_annotation(pv, ANN_DELETE_SECRET_NAME);
    const char *sns = kobj_annotation(pv, ANN_DELETE_SECRET_NS);
    if (sname && *sname) {
        char *spath = kube_path(&KUBE_SECRET, sns, sname, NULL);
        kube_resp r = {0};
        if (kube_get(c->o.kube, spath, &r) == 0)
            secret_data = json_object_get(kobj_get(r.body, "data"));
        else
            obs_warn("failed to get deletion secret %s/%s for %s: %s; deleting without it",
                     sns ? sns : "", sname, name, r.message);
        kube_resp_clear(&r);
        free(spath);
    }
    csi_status st = {0};
    rc = delete_volume(c, kobj_str(csi, "volumeHandle"), secret_data, &st);
    json_object_put(secret_data);
    if (rc < 0) {
        kube_event(c->o.recorder, pv, "Warning", "VolumeFailedDelete",
                   "rpc error: code = %s desc = %s", csi_code_go_name(st.code), st.message);
        obs_counter_add(c->delete_failed, sc_v, 1);
        goto out;
    }
    obs_counter_add(c->delete_total, sc_v, 1);
    if (c->o.volume_changed)
        c->o.volume_changed(c->o.volume_changed_ud, sc_v[0], pv);
    obs_histogram_observe(c->delete_seconds, sc_v, (double)(util_now_mono() - start) / UTIL_SECOND);
    obs_info("deleted volume %s of PV %s", kobj_str(csi, "volumeHandle"), name);
    pthread_mutex_lock(&c->done_mu);
    if (!lh_table_lookup_entry(c->deleted, name))
        lh_table_insert(c->deleted, util_strdup(name), NULL);
    pthread_mutex_unlock(&c->done_mu);
remove_pv:
    if (!deleting) {
        kube_resp r = {0};
        rc = kube_delete(c->o.kube, path, NULL, &r);
        if (rc < 0 && kube_is_not_found(&r))
            rc = 0;
        kube_resp_clear(&r);
        if (rc < 0)
            goto out;
    }
    rc = remove_finalizer(c, path, pv, PV_FINALIZER);
    if (rc == 0)
        uid_mark(c, c->finalized, name, true);
out:
    free(path);
    json_object_put(pv);
    return rc;
}

/* ---- snapshot sweeper -------------------------------------------------------------- */

/* Snapshots still carrying our finalizer with no pending restore left (a
 * crash between CreateVolume and the release, upstream #1507). */
static void sweep_snapshots(prov_ctrl *c)
{
    kube_resp r = {0};
    if (kube_get(c->o.kube, "/apis/snapshot.storage.k8s.io/v1/volumesnapshots", &r) == 0) {
        json_object *items = kobj_arr(r.body, "items");
        for (size_t i = 0; i < kobj_len(items); i++) {
            json_object *vs = kobj_at(items, i);
            if (kobj_finalizer_index(vs, SNAPSHOT_FINALIZER) >= 0 && kobj_namespace(vs) &&
                kobj_name(vs))
                release_source(c, kobj_namespace(vs), "VolumeSnapshot", kobj_name(vs), NULL);
        }
    }
    kube_resp_clear(&r);
}

static void *sweeper(void *arg)
{
    prov_ctrl *c = arg;
    for (;;) {
        pthread_mutex_lock(&c->sweep_mu);
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += (time_t)(c->o.sweep_interval / UTIL_SECOND);
        while (!c->stopping)
            if (pthread_cond_timedwait(&c->sweep_cv, &c->sweep_mu, &until) != 0)
                break;
        bool stop = c->stopping;
        pthread_mutex_unlock(&c->sweep_mu);
        if (stop)
            break;
        sweep_snapshots(c);
    }
    return NULL;
}

/* ---- wiring ----------------------------------------------------------------------- */

static void claim_changed(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    if (kobj_finalizer_index(obj, PROV_FINALIZER_IN_PROGRESS) < 0)
        uid_mark(c, c->released, kobj_uid(obj), false);
    char *key = kube_key(obj);
    wq_add(c->claims, key);
    free(key);
}

static void claim_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    claim_changed(ud, obj);
}

/* Gone from the cache (deleted, or bound and no longer cached): nothing of
 * it needs remembering. */
static void claim_gone(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    uid_mark(c, c->released, kobj_uid(obj), false);
    uid_mark(c, c->provisioned, kobj_uid(obj), false);
}

static void volume_changed(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    wq_add(c->volumes, kobj_name(obj));
    /* The claim waits for its PV to release the in-progress finalizer. */
    json_object *ref = kobj_path(obj, "spec.claimRef");
    const char *ns = kobj_str(ref, "namespace"), *n = kobj_str(ref, "name");
    if (ns && n) {
        char *key = util_asprintf("%s/%s", ns, n);
        wq_add(c->claims, key);
        free(key);
    }
}

static void volume_updated(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    volume_changed(ud, obj);
}

static bool keep_pv(void *ud, const json_object *pv);

static void volume_deleted(void *ud, json_object *obj)
{
    prov_ctrl *c = ud;
    const char *name = kobj_name(obj);
    /* A volume that only left the cache (settled, keep_pv) still exists. */
    if (!name || !keep_pv(c, obj))
        return;
    pthread_mutex_lock(&c->done_mu);
    lh_table_delete(c->deleted, name);
    pthread_mutex_unlock(&c->done_mu);
    uid_mark(c, c->finalized, name, false);
    /* A volume deleted before its claim was bound must be made again. */
    uid_mark(c, c->provisioned, kobj_path_str(obj, "spec.claimRef.uid"), false);
}

static void free_key(struct lh_entry *e)
{
    free(lh_entry_k(e));
}

static void free_key_value(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
}

static void slim_pvc(void *ud, json_object *obj)
{
    (void)ud;
    json_object *m = kobj_get(obj, "metadata"), *a = kobj_get(m, "annotations");
    kobj_del(m, "managedFields");
    kobj_del(a, "kubectl.kubernetes.io/last-applied-configuration");
    kobj_del(obj, "status");
}

/*
 * Claims worth caching: those waiting for a volume, and those carrying a
 * finalizer this provisioner removes. A bound claim is otherwise never read
 * from the cache (a clone source is fetched when it is not cached), and most
 * of a big cluster's claims are bound.
 */
static bool keep_pvc(void *ud, const json_object *pvc)
{
    (void)ud;
    const char *bound = kobj_path_str(pvc, "spec.volumeName");
    return !bound || !*bound || kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) >= 0 ||
           kobj_finalizer_index(pvc, CLONE_FINALIZER) >= 0;
}

/*
 * Volumes worth caching: our driver's (the others are never ours to
 * delete), and of those only the ones with work ahead. A Bound volume that
 * already has the finalizer its reclaim policy wants waits for its claim to
 * go: the update to Released brings it back as an add. Most volumes of a
 * big cluster are such, so the cache stays small however many there are.
 */
static bool keep_pv(void *ud, const json_object *pv)
{
    const prov_ctrl *c = ud;
    json_object *spec = kobj_get(pv, "spec");
    const char *driver = kobj_path_str(spec, "csi.driver");
    if (!driver || strcmp(driver, c->cfg.driver_name) != 0)
        return false;
    const char *phase = kobj_path_str(pv, "status.phase");
    if (!phase || strcmp(phase, "Bound") != 0 || kobj_deleting(pv))
        return true;
    const char *policy = kobj_str(spec, "persistentVolumeReclaimPolicy");
    bool wants_fin = policy && strcmp(policy, "Delete") == 0;
    return wants_fin != (kobj_finalizer_index(pv, PV_FINALIZER) >= 0);
}

/* Drops every member of `o` not named in `keys` (NULL-ended). */
static void keep_only(json_object *o, const char *const *keys)
{
    if (!o || !json_object_is_type(o, json_type_object))
        return;
    const char *drop[64];
    size_t n = 0;
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        bool keep = false;
        for (size_t i = 0; keys[i] && !keep; i++)
            keep = strcmp(k, keys[i]) == 0;
        if (!keep && n < sizeof(drop) / sizeof(drop[0]))
            drop[n++] = k;
    }
    for (size_t i = 0; i < n; i++)
        json_object_object_del(o, drop[i]);
}

/*
 * A PV keeps what the volume sync, the claim release, events about it and
 * node-local deletion read: a cached volume costs a few hundred bytes.
 */
static void slim_pv(void *ud, json_object *obj)
{
    (void)ud;
    static const char *const top[] = {"apiVersion", "kind", "metadata", "spec", "status", NULL};
    static const char *const m[] = {
        "name", "uid", "resourceVersion", "annotations", "finalizers", "deletionTimestamp", NULL};
    static const char *const ann[] = {ANN_PROVISIONED_BY, ANN_DELETE_SECRET_NAME,
                                      ANN_DELETE_SECRET_NS, NULL};
    static const char *const spec[] = {
        "capacity",         "claimRef",     "csi", "persistentVolumeReclaimPolicy",
        "storageClassName", "nodeAffinity", NULL};
    static const char *const ref[] = {"namespace", "name", "uid", NULL};
    static const char *const csi[] = {"driver", "volumeHandle", NULL};
    static const char *const status[] = {"phase", NULL};
    keep_only(obj, top);
    json_object *md = kobj_get(obj, "metadata"), *sp = kobj_get(obj, "spec");
    keep_only(md, m);
    keep_only(kobj_get(md, "annotations"), ann);
    keep_only(sp, spec);
    keep_only(kobj_get(sp, "claimRef"), ref);
    keep_only(kobj_get(sp, "csi"), csi);
    keep_only(kobj_get(obj, "status"), status);
}

static void slim_meta(void *ud, json_object *obj)
{
    (void)ud;
    kobj_del(kobj_get(obj, "metadata"), "managedFields");
}

/* A detached volume may now be deleted: look at its PV again. */
static void attachment_deleted(void *ud, json_object *va)
{
    prov_ctrl *c = ud;
    const char *pv = kobj_path_str(va, "spec.source.persistentVolumeName");
    if (pv)
        wq_add(c->volumes, pv);
}

static void va_by_pv(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *pv = kobj_path_str(obj, "spec.source.persistentVolumeName");
    if (pv)
        add(ctx, pv);
}

struct worker {
    prov_ctrl *c;
    wq *q;
    int (*sync)(prov_ctrl *c, const char *key);
};

static void *work(void *arg)
{
    struct worker *w = arg;
    char *key = NULL;
    while (wq_get(w->q, &key) == 0) {
        int rc = w->sync(w->c, key);
        if (rc == 0)
            wq_forget(w->q, key);
        else if (rc == SYNC_SLOW)
            wq_add_after(w->q, key, w->c->o.retry_max);
        else
            wq_add_rate_limited(w->q, key);
        wq_done(w->q, key);
        free(key);
    }
    free(w);
    return NULL;
}

static int informer(prov_ctrl *c, const kube_resource *res, void (*slim)(void *, json_object *),
                    bool (*keep)(void *, const json_object *), kube_handlers h, kube_informer **out)
{
    kube_informer_opts o = {
        .res = res, .transform = slim, .transform_ud = c, .keep = keep, .handlers = h};
    return kube_informer_new(c->o.kube, &o, out);
}

int prov_ctrl_start(const prov_ctrl_opts *opts, const prov_config *cfg, prov_ctrl **out)
{
    *out = NULL;
    prov_ctrl *c = util_calloc(1, sizeof(*c));
    c->o = *opts;
    c->cfg = *cfg;
    pthread_mutex_init(&c->done_mu, NULL);
    pthread_mutex_init(&c->sweep_mu, NULL);
    pthread_cond_init(&c->sweep_cv, NULL);
    c->deleted = lh_kchar_table_new(64, free_key);
    c->released = lh_kchar_table_new(64, free_key_value);
    c->provisioned = lh_kchar_table_new(64, free_key_value);
    c->finalized = lh_kchar_table_new(64, free_key_value);
    if (opts->node.name) {
        prov_node_local_objects(opts->node.name, cfg->driver_name, opts->node.node_id,
                                opts->node.topology, &c->local_node, &c->local_csinode);
        c->local_labels = prov_node_labels(opts->node.topology);
        c->owning = lh_kchar_table_new(64, free_owning);
    }
    obs_registry *m = opts->metrics;
    static const char *const cls[] = {"class", NULL};
    static const double buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};
    c->provision_total = obs_counter_new(m, "controller_persistentvolumeclaim_provision_total",
                                         "Total number of persistent volumes provisioned "
                                         "successfully, by storage class.",
                                         cls);
    c->provision_failed =
        obs_counter_new(m, "controller_persistentvolumeclaim_provision_failed_total",
                        "Total number of failed provisioning attempts, by storage class.", cls);
    c->provision_seconds = obs_histogram_new(
        m, "controller_persistentvolumeclaim_provision_duration_seconds",
        "Time to provision a volume, from the first attempt, in seconds, by storage class.", cls,
        buckets, sizeof(buckets) / sizeof(buckets[0]));
    c->delete_total = obs_counter_new(m, "controller_persistentvolume_delete_total",
                                      "Total number of persistent volumes deleted successfully, "
                                      "by storage class.",
                                      cls);
    c->delete_failed =
        obs_counter_new(m, "controller_persistentvolume_delete_failed_total",
                        "Total number of failed delete attempts, by storage class.", cls);
    c->delete_seconds = obs_histogram_new(m, "controller_persistentvolume_delete_duration_seconds",
                                          "Time to delete a volume, in seconds, by storage class.",
                                          cls, buckets, sizeof(buckets) / sizeof(buckets[0]));

    wq_opts qo = {.name = "claims",
                  .base_delay = opts->retry_start,
                  .max_delay = opts->retry_max,
                  .metrics = m};
    c->claims = wq_new(&qo);
    qo.name = "volumes";
    c->volumes = wq_new(&qo);

    int rc = informer(c, &KUBE_PVC, slim_pvc, keep_pvc,
                      (kube_handlers){claim_changed, claim_updated, claim_gone, c}, &c->pvcs);
    if (rc == 0)
        rc = informer(c, &KUBE_PV, slim_pv, keep_pv,
                      (kube_handlers){volume_changed, volume_updated, volume_deleted, c}, &c->pvs);
    if (rc == 0)
        rc = informer(c, &KUBE_STORAGECLASS, slim_meta, NULL, (kube_handlers){0}, &c->classes);
    if (rc == 0 && cfg->topology && !c->local_node) {
        rc = informer(c, &KUBE_NODE, slim_meta, NULL, (kube_handlers){0}, &c->nodes);
        if (rc == 0)
            rc = informer(c, &KUBE_CSINODE, slim_meta, NULL, (kube_handlers){0}, &c->csinodes);
    }
    if (rc == 0 && opts->publish_unpublish) {
        rc = informer(c, &KUBE_VOLUMEATTACHMENT, slim_meta, NULL,
                      (kube_handlers){NULL, NULL, attachment_deleted, c}, &c->vas);
        if (rc == 0)
            rc = kube_informer_add_index(c->vas, "pv", va_by_pv);
    }
    kube_informer *all[] = {c->classes, c->nodes, c->csinodes, c->vas, c->pvs, c->pvcs};
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_start(all[i]);
    for (size_t i = 0; rc == 0 && i < sizeof(all) / sizeof(all[0]); i++)
        if (all[i])
            rc = kube_informer_wait_for_sync(all[i], 5 * UTIL_MINUTE);
    if (rc < 0) {
        prov_ctrl_stop(c);
        return rc;
    }
    int n = opts->workers > 0 ? opts->workers : 1;
    c->threads = util_calloc((size_t)n * 2, sizeof(pthread_t));
    for (int i = 0; i < 2 * n; i++) {
        struct worker *w = util_calloc(1, sizeof(*w));
        w->c = c;
        w->q = i < n ? c->claims : c->volumes;
        w->sync = i < n ? sync_claim : sync_volume;
        if (pthread_create(&c->threads[i], NULL, work, w) != 0) {
            free(w);
            break;
        }
        c->n_threads++;
    }
    if (opts->sweep_interval > 0 && cfg->create_delete_snapshot &&
        pthread_create(&c->sweep_th, NULL, sweeper, c) == 0)
        c->sweeping = true;
    if (c->local_node)
        obs_info("node deployment: provisioning for node %s", opts->node.name);
    /* The first lists parsed every object of the cluster, cached or not:
     * give those pages back rather than carry them for the process's life. */
    malloc_trim(0);
    obs_info("provisioner started: %d claim and %d volume workers", n, n);
    obs_v(2, "cached: %zu claims (%zu bytes), %zu volumes (%zu bytes)",
          kube_informer_count(c->pvcs), kube_informer_bytes(c->pvcs), kube_informer_count(c->pvs),
          kube_informer_bytes(c->pvs));
    *out = c;
    return 0;
}

void prov_ctrl_stop(prov_ctrl *c)
{
    if (!c)
        return;
    if (c->sweeping) {
        pthread_mutex_lock(&c->sweep_mu);
        c->stopping = true;
        pthread_cond_broadcast(&c->sweep_cv);
        pthread_mutex_unlock(&c->sweep_mu);
        pthread_join(c->sweep_th, NULL);
    }
    /* Stop the sources first, then let the workers finish what they hold. */
    kube_informer *all[] = {c->pvcs, c->pvs, c->classes, c->nodes, c->csinodes, c->vas};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_stop(all[i]);
    wq_shutdown(c->claims, false);
    wq_shutdown(c->volumes, false);
    for (int i = 0; i < c->n_threads; i++)
        pthread_join(c->threads[i], NULL);
    free(c->threads);
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        kube_informer_free(all[i]);
    wq_free(c->claims);
    wq_free(c->volumes);
    lh_table_free(c->deleted);
    lh_table_free(c->released);
    lh_table_free(c->provisioned);
    lh_table_free(c->finalized);
    if (c->owning)
        lh_table_free(c->owning);
    json_object_put(c->local_node);
    json_object_put(c->local_csinode);
    json_object_put(c->local_labels);
    pthread_mutex_destroy(&c->done_mu);
    pthread_mutex_destroy(&c->sweep_mu);
    pthread_cond_destroy(&c->sweep_cv);
    free(c);
}
