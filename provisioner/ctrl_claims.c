/*
 * The claim controller: a claim of our driver -> CreateVolume -> PV, and a
 * claim deleted during provisioning -> the same CreateVolume to learn the
 * id -> DeleteVolume. Each sync takes one step and is safe to rerun after a
 * crash at any line (see controller.c for the intent record).
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* ---- claims --------------------------------------------------------------------- */

char *ctrl_pvc_path(const json_object *pvc)
{
    return kube_path(&KUBE_PVC, kobj_namespace(pvc), kobj_name(pvc), NULL);
}

/* Whether this claim is ours to provision (shouldProvision, A1.5 step 2). */
bool ctrl_should_provision(prov_ctrl *c, const json_object *pvc)
{
    return prov_pvc_wants_driver(pvc, c->cfg.driver_name);
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

void ctrl_event_failed(prov_ctrl *c, const json_object *pvc, int code, const char *msg)
{
    if (code == CSI_INVALID_ARGUMENT)
        kube_event(c->o.recorder, pvc, "Warning", "ProvisioningFailed", "%s%s",
                   PROV_INFEASIBLE_EVENT_PREFIX, msg);
    else
        kube_event(c->o.recorder, pvc, "Warning", "ProvisioningFailed", "%s", msg);
}

/* Builds the CreateVolumeRequest from the caches; -errno with *state set. */
int ctrl_plan_request(prov_ctrl *c, const json_object *pvc, const json_object *sc,
                      prov_source_kind kind, const char *source_id,
                      Csi__V1__CreateVolumeRequest **req, prov_secret_refs *refs, prov_state *state)
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
int ctrl_add_secrets(prov_ctrl *c, Csi__V1__CreateVolumeRequest *req, const prov_secret_ref *ref)
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

void ctrl_class_label(const json_object *sc, const char **v)
{
    const char *n = sc ? kobj_name(sc) : NULL;
    v[0] = n ? n : "";
}

/*
 * A claim whose volume may exist is gone (or `pvc` is its intent entry's
 * copy): repeat the create to learn the id (idempotent by name) and delete
 * it. 0 when the driver holds no volume of that name any more (or no
 * request can be built, so none was ever sent); -ENOENT when the class is
 * gone and the request cannot be rebuilt; other errors are retried.
 */
int ctrl_cleanup_volume(prov_ctrl *c, const json_object *pvc)
{
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    if (!sc)
        return util_err_set(-ENOENT,
                            "claim %s/%s was deleted during provisioning and its StorageClass "
                            "\"%s\" is gone: cannot repeat CreateVolume to clean up",
                            kobj_namespace(pvc), kobj_name(pvc), class ? class : "");
    Csi__V1__CreateVolumeRequest *req = NULL;
    prov_secret_refs refs = {0};
    prov_state state = PROV_FINAL;
    /* The repeat must match the original request, source included. */
    struct ctrl_source src;
    int rc = ctrl_resolve_source(c, pvc, &src);
    if (rc == 0)
        rc = ctrl_plan_request(c, pvc, sc, src.kind, src.id, &req, &refs, &state);
    if (rc != 0) {
        /* No request can be built (or the source is a populator's), so none
         * was ever sent. */
        obs_v(2, "cleanup of deleted claim %s/%s: no request can be built: %s", kobj_namespace(pvc),
              kobj_name(pvc), rc < 0 ? util_err_last() : "populator");
        ctrl_source_clear(&src);
        json_object_put(sc);
        prov_secret_refs_clear(&refs);
        return 0;
    }
    rc = ctrl_add_secrets(c, req, &refs.ref[PROV_SECRET_PROVISIONER]);
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
        ctrl_release_source(c, kobj_namespace(pvc),
                            src.kind == PROV_SOURCE_VOLUME ? "PersistentVolumeClaim"
                                                           : "VolumeSnapshot",
                            kobj_name(src.obj), kobj_name(pvc));
    ctrl_source_clear(&src);
    return rc;
}

/* The same for a claim of an older version that carries the in-progress
 * finalizer: released once the volume is gone. */
int ctrl_cleanup_deleted_claim(prov_ctrl *c, const json_object *pvc, const char *path)
{
    int rc = ctrl_cleanup_volume(c, pvc);
    if (rc == -ENOENT) {
        /* As that version did: nothing can be repeated, let the claim go. */
        obs_warn("%s; releasing the claim", util_err_last());
        rc = 0;
    }
    if (rc < 0)
        return rc;
    ctrl_intent_done(c, kobj_uid(pvc));
    return ctrl_release_claim(c, path, pvc);
}

/*
 * Gives the node back. The cached copy that still names the node is
 * remembered (uid -> resourceVersion): a sync that sees it before the
 * cache catches up must not provision on that node again (no finalizer
 * step stands in the way any more).
 */
static int remove_selected_node(prov_ctrl *c, const char *path, const json_object *pvc)
{
    char patch[160];
    snprintf(patch, sizeof(patch), "{\"metadata\":{\"annotations\":{\"%s\":null}}}",
             ANN_SELECTED_NODE);
    kube_resp r = {0};
    int rc = kube_patch(c->o.kube, path, KUBE_PATCH_MERGE, patch, &r);
    kube_resp_clear(&r);
    const char *uid = kobj_uid(pvc), *rv = kobj_rv(pvc);
    if (rc == 0 && uid && rv) {
        pthread_mutex_lock(&c->done_mu);
        lh_table_delete(c->rescheduled, uid);
        lh_table_insert(c->rescheduled, util_strdup(uid), util_strdup(rv));
        pthread_mutex_unlock(&c->done_mu);
    }
    return rc;
}

/* True when `pvc` is the copy whose node was given back (see above). */
static bool rescheduled_stale(prov_ctrl *c, const json_object *pvc)
{
    const char *uid = kobj_uid(pvc), *rv = kobj_rv(pvc);
    if (!uid || !rv)
        return false;
    pthread_mutex_lock(&c->done_mu);
    void *v = NULL;
    const char *was = lh_table_lookup_ex(c->rescheduled, uid, &v) ? v : NULL;
    bool stale = was && strcmp(was, rv) == 0;
    if (was && !stale)
        lh_table_delete(c->rescheduled, uid);
    pthread_mutex_unlock(&c->done_mu);
    return stale;
}

/* sc: the claim's class as the caller read it (NULL when missing); this
 * function owns it. */
static int provision(prov_ctrl *c, json_object *pvc, json_object *sc, const char *path,
                     const char *volname)
{
    const char *class = prov_pvc_class(pvc);
    const char *lv[1];
    ctrl_class_label(sc, lv);
    if (!sc) {
        char *msg =
            util_asprintf("storageclass.storage.k8s.io \"%s\" not found", class ? class : "");
        ctrl_event_failed(c, pvc, CSI_UNKNOWN, msg);
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
    struct ctrl_source src = {PROV_SOURCE_NONE, NULL, NULL, NULL};
    int rc = prov_check_capabilities(&c->cfg, ctrl_source_kind(pvc), false);
    if (rc == 0)
        rc = ctrl_resolve_source(c, pvc, &src);
    if (rc == 1) {
        /* Another kind of source: a volume populator's job, not ours. */
        kube_event(c->o.recorder, pvc, "Normal", "Provisioning",
                   "Assuming an external populator will provision the volume");
        json_object_put(sc);
        return 0;
    }
    if (rc == 0 && src.kind != PROV_SOURCE_NONE) {
        /* The source may not go away while the volume is made from it. */
        rc = ctrl_add_finalizer_idempotent(c, src.path, src.obj,
                                           src.kind == PROV_SOURCE_VOLUME ? CLONE_FINALIZER
                                                                          : SNAPSHOT_FINALIZER);
    }
    if (rc == 0)
        rc = ctrl_plan_request(c, pvc, sc, src.kind, src.id, &req, &refs, &state);
    if (rc == 0)
        rc = ctrl_add_secrets(c, req, &refs.ref[PROV_SECRET_PROVISIONER]);
    if (rc != 0) {
        char *msg = util_strdup(util_err_last());
        ctrl_event_failed(c, pvc, CSI_UNKNOWN, msg);
        obs_v(2, "claim %s: %s", path, msg);
        free(msg);
        if (state == PROV_RESCHEDULE && prov_selected_node(pvc)) {
            /* Release before giving the node back: in node mode another
             * node may own the claim as soon as the annotation is gone. */
            ctrl_release_claim(c, path, pvc);
            /* A failed removal is retried: nothing else would wake the
             * claim, and the annotation would stay. */
            rc = remove_selected_node(c, path, pvc);
        }
        obs_counter_add(c->provision_failed, lv, 1);
        goto out;
    }
    /* The intent first: once the record holds it, neither a crash nor the
     * claim's deletion can leak what CreateVolume makes. */
    rc = ctrl_intent_join(c, pvc, sc, volname);
    if (rc < 0) {
        obs_v(2, "claim %s: %s", path, util_err_last());
        goto out;
    }
    ctrl_crash_point(c, "intent");
    csi_status st = {0};
    Csi__V1__CreateVolumeResponse *resp = NULL;
    rc = csi_create_volume(c->o.csi, req, c->o.timeout, &resp, &st);
    /* A failure may mean the class is full somewhere (upstream refreshes too). */
    if (rc < 0 && c->o.volume_changed)
        c->o.volume_changed(c->o.volume_changed_ud, kobj_name(sc), NULL);
    if (rc < 0) {
        state = prov_classify(st.code, c->cfg.topology, prov_selected_node(pvc) != NULL);
        char *msg = csi_status_text(&st);
        ctrl_event_failed(c, pvc, st.code, msg);
        obs_v(2, "CreateVolume for %s: %s (%s)", path, msg, prov_state_name(state));
        free(msg);
        obs_counter_add(c->provision_failed, lv, 1);
        /* A final answer means the driver holds no volume of that name
         * (ALREADY_EXISTS: one exists, made from another request). */
        if (state != PROV_IN_BACKGROUND && st.code != CSI_ALREADY_EXISTS)
            ctrl_intent_done(c, kobj_uid(pvc));
        if (state == PROV_RESCHEDULE) {
            /* The driver has no volume of that name (it would have returned
             * it), so the claim's intent goes with the node (released first,
             * as above). */
            rc = ctrl_release_claim(c, path, pvc);
            if (rc == 0)
                rc = remove_selected_node(c, path, pvc);
        } else if (prov_is_infeasible(st.code)) {
            rc = SYNC_SLOW;
        }
        goto out;
    }
    resp_ok = true;
    ctrl_crash_point(c, "create");
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
            ctrl_event_failed(c, pvc, CSI_UNKNOWN, msg);
            free(msg);
        } else {
            ctrl_event_failed(c, pvc, CSI_UNKNOWN, check);
            ctrl_intent_done(c, kobj_uid(pvc)); /* deleted again: nothing to undo */
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
        ctrl_event_failed(c, pvc, CSI_UNKNOWN, util_err_last());
        goto out;
    }
    /* Marked before the create: the PV's watch event often comes before the
     * create's answer, and the mark tells its handler not to wake a worker
     * for this claim. */
    ctrl_uid_mark(c, c->provisioned, kobj_uid(pvc), true);
    kube_resp r = {.skip_body = true};
    rc = kube_create(c->o.kube, "/api/v1/persistentvolumes", pv, &r);
    if (rc < 0 && kube_is_already_exists(&r))
        rc = 0;
    if (rc < 0) {
        ctrl_uid_mark(c, c->provisioned, kobj_uid(pvc), false);
        obs_warn("creating PV %s for claim %s: %s", volname, path, r.message);
    }
    kube_resp_clear(&r);
    json_object_put(pv);
    if (rc == 0) {
        obs_info("successfully provisioned volume %s for claim %s", volname, path);
        kube_event(c->o.recorder, pvc, "Normal", "ProvisioningSucceeded",
                   "Successfully provisioned volume %s", volname);
        obs_counter_add(c->provision_total, lv, 1);
        obs_histogram_observe(c->provision_seconds, lv,
                              (double)(util_now_mono() - start) / UTIL_SECOND);
        ctrl_intent_done(c, kobj_uid(pvc)); /* the PV records the volume now */
        rc = ctrl_release_claim(c, path, pvc);
    }
out:
    /* Done with the source once the volume exists (upstream drops the
     * snapshot's finalizer here too), unless other claims still need it. */
    if (src.kind != PROV_SOURCE_NONE && resp_ok)
        ctrl_release_source(c, kobj_namespace(pvc),
                            src.kind == PROV_SOURCE_VOLUME ? "PersistentVolumeClaim"
                                                           : "VolumeSnapshot",
                            kobj_name(src.obj), kobj_name(pvc));
    ctrl_source_clear(&src);
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
    int rc = kube_get_object(c->o.kube, &KUBE_PVC, path, kobj_name(pvc), &r);
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
        rc = ctrl_release_claim(c, path, pvc);
        return rc < 0 ? rc : 0;
    }
    if (kube_is_not_found(&r))
        rc = 1;
    kube_resp_clear(&r);
    return rc;
}

/* Whether the PV `volname` exists: the cache, else the API (the cache may
 * be behind a PV just made). 1 yes, 0 no, -errno when the API did not say. */
static int pv_exists(prov_ctrl *c, const char *volname)
{
    if (kube_informer_has(c->pvs, NULL, volname))
        return 1;
    char *path = kube_path(&KUBE_PV, NULL, volname, NULL);
    kube_resp r = {0};
    int rc = kube_get(c->o.kube, path, &r);
    if (rc == 0)
        rc = 1;
    else if (kube_is_not_found(&r))
        rc = 0;
    else
        rc = util_err_set(rc, "reading PV %s: %s", volname, r.message);
    kube_resp_clear(&r);
    free(path);
    return rc;
}

/*
 * One intent entry of claim key ns/name, given the claim as cached (`ud`,
 * NULL when it is not): finished by the normal sync, dropped, or undone
 * (repeat CreateVolume, DeleteVolume) when the claim went away.
 */
static int recover_entry(prov_ctrl *c, const prov_intent *in, void *ud)
{
    const json_object *pvc = ud;
    const char *uid = kobj_uid(pvc);
    bool same = pvc && uid && strcmp(uid, in->uid) == 0;
    if (same && kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) >= 0)
        return 0; /* an older version's claim: its finalizer's path finishes it */
    bool alive = same && !kobj_deleting(pvc);
    /* The record may have been edited: the volume it names must be the one
     * the repeat would ask for, or a wrong PV check could undo a volume in
     * use. Such an entry is dropped. */
    char *want = NULL;
    if (prov_volume_name(&c->cfg, in->uid, &want) < 0 || strcmp(want, in->volume) != 0) {
        obs_warn("intent of claim %s/%s names volume %s, not %s: dropped", in->ns, in->name,
                 in->volume, want ? want : "?");
        free(want);
        ctrl_intent_done(c, in->uid);
        return 0;
    }
    free(want);
    const char *class = prov_pvc_class(in->claim);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    prov_intent_facts f = {.claim_alive = alive,
                           .claim_bound_to = alive ? kobj_path_str(pvc, "spec.volumeName") : NULL,
                           .volume = in->volume,
                           .class_exists = sc != NULL};
    json_object_put(sc);
    int rc = 0;
    if (!alive) {
        /* Only a claim that is gone needs the API's word on the PV. */
        rc = pv_exists(c, in->volume);
        if (rc < 0)
            return rc;
        f.pv_exists = rc == 1;
    }
    prov_intent_action a = prov_intent_recover(&f);
    obs_v(4, "intent of claim %s/%s (uid %s, volume %s): %s", in->ns, in->name, in->uid, in->volume,
          prov_intent_action_name(a));
    switch (a) {
    case PROV_INTENT_SYNC:
        return 0;
    case PROV_INTENT_DONE:
        ctrl_intent_done(c, in->uid);
        return 0;
    case PROV_INTENT_WAIT_CLASS:
    case PROV_INTENT_CLEANUP:
        break;
    }
    json_object *claim = prov_intent_claim(in);
    rc = ctrl_cleanup_volume(c, claim);
    json_object_put(claim);
    if (rc == -ENOENT) {
        /* Kept: the volume may exist, and only the class can tell how to
         * ask for it again. Retried with backoff; upstream leaks it. */
        obs_warn("%s; keeping its intent and retrying", util_err_last());
        obs_v(2, "intent of claim %s/%s (volume %s) waits for StorageClass %s", in->ns, in->name,
              in->volume, class ? class : "");
        return rc;
    }
    if (rc == 0)
        ctrl_intent_done(c, in->uid);
    return rc;
}

int ctrl_sync_claim(prov_ctrl *c, const char *key)
{
    const char *slash = strchr(key, '/');
    if (!slash)
        return 0;
    char *ns = strndup(key, (size_t)(slash - key));
    json_object *pvc = kube_informer_get(c->pvcs, ns, slash + 1);
    /* Intents of this key whose claim is gone, deleting or replaced (a new
     * uid) are finished or undone first; the live claim's own entry is
     * finished by the sync below. */
    int irc = ctrl_intent_each(c, ns, slash + 1, recover_entry, pvc);
    free(ns);
    if (!pvc) {
        ctrl_node_forget(c, key);
        return irc;
    }
    int rc = 0;
    char *path = ctrl_pvc_path(pvc);
    char *volname = NULL;
    /* Cloning protection: a clone source being deleted loses our finalizer
     * once no claim is still being cloned from it (retried with backoff
     * until then). Besides our own leftovers, upstream leaves the finalizer
     * on every clone source until it is deleted. */
    int protect = 0;
    if (c->cfg.clone_volume && kobj_deleting(pvc) &&
        kobj_finalizer_index(pvc, CLONE_FINALIZER) >= 0)
        protect = ctrl_release_source(c, kobj_namespace(pvc), "PersistentVolumeClaim",
                                      kobj_name(pvc), NULL);
    /* The in-progress finalizer of an older version: every driver's
     * provisioner used the same name, so it is ours only on a claim that
     * asks for our driver (and, in node mode, that selects our node). */
    bool ours = kobj_finalizer_index(pvc, PROV_FINALIZER_IN_PROGRESS) >= 0 &&
                ctrl_should_provision(c, pvc) && ctrl_node_selected_here(c, pvc);
    if (ours && ctrl_released_already(c, pvc))
        goto out; /* a stale copy: the update without the finalizer is on its way */
    if (rescheduled_stale(c, pvc))
        goto out; /* a stale copy: the update without the node is on its way */
    bool deleting = kobj_deleting(pvc);
    const char *bound = kobj_path_str(pvc, "spec.volumeName");
    if (bound && *bound) {
        if (ours)
            rc = ctrl_release_claim(c, path, pvc);
        goto out;
    }
    if (!ours && (deleting || !ctrl_should_provision(c, pvc)))
        goto out;
    if (!ours && ctrl_uid_marked(c, c->provisioned, kobj_uid(pvc)))
        goto out; /* our PV exists: the binder's turn */
    if (!ours && c->local_node) {
        rc = ctrl_node_claim(c, key, pvc);
        if (rc <= 0)
            goto out; /* not ours (yet) */
    }
    rc = prov_volume_name(&c->cfg, kobj_uid(pvc), &volname);
    if (rc < 0)
        goto out;
    /* A PV of ours for this claim means the work is done (a crash may have
     * come between creating it and dropping the intent). */
    /* The informer synced before the workers started, so a PV made before a
     * restart is in the cache; one made moments ago by this process may not
     * be yet, and then CreateVolume (idempotent) and the PV create
     * (AlreadyExists) simply repeat. */
    if (kube_informer_has(c->pvs, NULL, volname)) {
        ctrl_intent_done(c, kobj_uid(pvc));
        if (ours)
            rc = ctrl_release_claim(c, path, pvc);
        goto out;
    }
    if (deleting) {
        /* Only an older version's claim gets here (ours). */
        rc = cleanup_needed(c, pvc, path, volname);
        if (rc > 0)
            rc = ctrl_cleanup_deleted_claim(c, pvc, path);
        goto out;
    }
    const char *class = prov_pvc_class(pvc);
    json_object *sc = class ? kube_informer_get(c->classes, NULL, class) : NULL;
    const char *mode = sc ? kobj_str(sc, "volumeBindingMode") : NULL;
    bool wffc = mode && strcmp(mode, "WaitForFirstConsumer") == 0;
    if (wffc && !prov_selected_node(pvc)) {
        json_object_put(sc);
        goto out; /* waits for the scheduler */
    }
    rc = provision(c, pvc, sc, path, volname);
out:
    if (rc == 0 && protect < 0)
        rc = protect;
    if (rc == 0 && irc < 0)
        rc = irc;
    free(volname);
    free(path);
    json_object_put(pvc);
    return rc;
}
