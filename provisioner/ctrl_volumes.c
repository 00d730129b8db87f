/*
 * The volume controller: a Released PV of ours with reclaim policy Delete
 * -> DeleteVolume -> PV deleted and its finalizer removed; the finalizer
 * added to or removed from other PVs of ours as their policy wants.
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

int ctrl_sync_volume(prov_ctrl *c, const char *name)
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
    if (has_fin && ctrl_uid_marked(c, c->finalized, name))
        goto out; /* a stale copy: the volume is deleted and its finalizer gone */
    bool deleting = kobj_deleting(pv);
    if (!policy || strcmp(policy, "Delete") != 0) {
        /* Retain and Recycle never reach DeleteVolume: no finalizer. */
        if (has_fin)
            rc = ctrl_remove_finalizer(c, &KUBE_PV, path, pv, PV_FINALIZER);
        goto out;
    }
    /* Upstream's shouldDelete: being deleted without our finalizer means
     * the volume was deleted already (the finalizer goes last); another
     * finalizer (kubernetes.io/pv-protection on a real cluster) only keeps
     * the object a while, and a successor must not DeleteVolume again. */
    if (deleting && !has_fin)
        goto out;
    const char *phase = kobj_path_str(pv, "status.phase");
    if (!phase || strcmp(phase, "Released") != 0) {
        if (!has_fin && !deleting)
            rc = ctrl_add_finalizer(c, path, pv, PV_FINALIZER);
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
    if (!kube_informer_has(c->pvs, NULL, name))
        goto out;
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
        char *text = csi_status_text(&st);
        kube_event(c->o.recorder, pv, "Warning", "VolumeFailedDelete", "%s", text);
        free(text);
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
        kube_resp r = {.skip_body = true};
        rc = kube_delete(c->o.kube, path, NULL, &r);
        if (rc < 0 && kube_is_not_found(&r))
            rc = 0;
        kube_resp_clear(&r);
        if (rc < 0)
            goto out;
    }
    rc = ctrl_remove_finalizer(c, &KUBE_PV, path, pv, PV_FINALIZER);
    if (rc == 0)
        ctrl_uid_mark(c, c->finalized, name, true);
out:
    free(path);
    json_object_put(pv);
    return rc;
}
