/*
 * Data sources of the claim controller: clone sources (claims) and
 * snapshot restores (VolumeSnapshots) are resolved and checked as upstream
 * does, protected by a finalizer while a volume is made from them, released
 * once no claim in flight still uses them, and swept for snapshots whose
 * release a crash interrupted (upstream #1507).
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- data sources ------------------------------------------------------------------ */

/* The claim's data source: spec.dataSourceRef, else spec.dataSource. */
static json_object *data_source(const json_object *pvc)
{
    json_object *spec = kobj_get(pvc, "spec");
    json_object *ref = kobj_get(spec, "dataSourceRef");
    return ref ? ref : kobj_get(spec, "dataSource");
}

void ctrl_source_clear(struct ctrl_source *src)
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
static int resolve_clone(prov_ctrl *c, const json_object *pvc, const char *name,
                         struct ctrl_source *src)
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
                            struct ctrl_source *src)
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
prov_source_kind ctrl_source_kind(const json_object *pvc)
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
int ctrl_resolve_source(prov_ctrl *c, const json_object *pvc, struct ctrl_source *src)
{
    memset(src, 0, sizeof(*src));
    json_object *ds = data_source(pvc);
    const char *kind = kobj_str(ds, "kind"), *name = kobj_str(ds, "name");
    if (!kind || !name)
        return 0;
    prov_source_kind k = ctrl_source_kind(pvc);
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

/* An intent entry is a claim whose volume may be made from the source:
 * undoing it repeats the CreateVolume, which needs the source, also after
 * the claim itself is gone. */
static int check_intent_use(prov_ctrl *c, const prov_intent *in, void *ud)
{
    (void)c;
    check_use(ud, (json_object *)in->claim);
    return 0;
}

/*
 * Drops a source's protection finalizer once no claim that is still being
 * provisioned from it remains, nor an intent entry of one (the
 * cloning-protection controller, and the orphan sweep for snapshots).
 * -EBUSY while a claim still uses it.
 */
int ctrl_release_source(prov_ctrl *c, const char *ns, const char *kind, const char *name,
                        const char *except)
{
    struct pending_use u = {ns, kind, name, except, false};
    kube_informer_each(c->pvcs, check_use, &u);
    if (!u.used)
        ctrl_intent_each(c, ns, NULL, check_intent_use, &u);
    if (u.used)
        return -EBUSY;
    bool clone = strcmp(kind, "PersistentVolumeClaim") == 0;
    const kube_resource *res = clone ? &KUBE_PVC : &KUBE_VOLUMESNAPSHOT;
    char *path = kube_path(res, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_get_object(c->o.kube, res, path, name, &r);
    if (rc == 0)
        rc = ctrl_remove_finalizer(c, res, path, r.body,
                                   clone ? CLONE_FINALIZER : SNAPSHOT_FINALIZER);
    else if (kube_is_not_found(&r))
        rc = 0;
    kube_resp_clear(&r);
    free(path);
    return rc;
}

/* ---- snapshot sweeper ------------------------------------------------------------------ */

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
                ctrl_release_source(c, kobj_namespace(vs), "VolumeSnapshot", kobj_name(vs), NULL);
        }
    }
    kube_resp_clear(&r);
}

void *ctrl_sweeper(void *arg)
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
