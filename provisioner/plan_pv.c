/*
 * plan_pv: what happens after CreateVolume answered. The response checks of
 * A1.5 step 7 (a size of 0 means "as requested", a smaller one or a missing
 * content source means the new volume must be deleted again), and the
 * PersistentVolume object: upstream's csiProvisioner.Provision fields plus
 * what sig-storage-lib-external-provisioner adds before saving (claimRef,
 * finalizer, provisioned-by, storageClassName).
 *
 * The PV is returned as JSON ready to POST. Fields Go would omit as empty
 * are omitted here too, so the object reads the same as upstream's.
 */
#include "plan_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

static int64_t requested_bytes(const Csi__V1__CreateVolumeRequest *req)
{
    return req != NULL && req->capacity_range != NULL ? req->capacity_range->required_bytes : 0;
}

/* The PVC has a data source the driver must have used. */
static bool expects_source(const prov_config *cfg, const json_object *pvc)
{
    if (kobj_path(pvc, "spec.dataSource") != NULL)
        return true;
    const char *ns = kobj_path_str(pvc, "spec.dataSourceRef.namespace");
    return cfg->cross_namespace_source && ns != NULL && ns[0] != '\0';
}

int prov_check_response(const prov_config *cfg, const json_object *pvc,
                        const Csi__V1__CreateVolumeRequest *req,
                        const Csi__V1__CreateVolumeResponse *resp, int64_t *capacity)
{
    *capacity = 0;
    /* Upstream dereferences the volume unchecked and would crash. */
    if (resp == NULL || resp->volume == NULL)
        return util_err_set(-EPROTO, "CreateVolume response has no volume");
    int64_t want = requested_bytes(req);
    int64_t got = resp->volume->capacity_bytes;
    if (got == 0) {
        /* "Unknown" in CSI; the API server needs a size. */
        got = want;
    } else if (got < want) {
        return util_err_set(
            -ERANGE, "created volume capacity %" PRId64 " less than requested capacity %" PRId64,
            got, want);
    }
    if (expects_source(cfg, pvc) && resp->volume->content_source == NULL)
        return util_err_set(-ENODATA, "volume content source missing");
    *capacity = got;
    return 0;
}

char *prov_orphan_message(int check_rc, const char *check_msg, const char *pv_name,
                          const char *cleanup_err)
{
    /* Upstream's two messages differ in the case of one letter. */
    return util_asprintf("%s. %s of volume %s failed, volume is orphaned: %s", check_msg,
                         check_rc == -ENODATA ? "cleanup" : "Cleanup", pv_name, cleanup_err);
}

/* ---- the PersistentVolume ------------------------------------------------ */

static void add_str(json_object *obj, const char *key, const char *value)
{
    json_object_object_add(obj, key, json_object_new_string(value != NULL ? value : ""));
}

/* Adds key: value unless value is NULL or "" (Go's omitempty). */
static void add_opt(json_object *obj, const char *key, const char *value)
{
    if (value != NULL && value[0] != '\0')
        add_str(obj, key, value);
}

/* A deep copy of a non-empty array member, else nothing (omitempty). */
static void add_array_copy(json_object *obj, const char *key, const json_object *src)
{
    json_object *a = kobj_typed(src, json_type_array);
    if (a == NULL || json_object_array_length(a) == 0)
        return;
    json_object *copy = NULL;
    if (json_object_deep_copy(a, &copy, NULL) == 0)
        json_object_object_add(obj, key, copy);
}

static json_object *claim_ref(const json_object *pvc)
{
    json_object *ref = json_object_new_object();
    add_str(ref, "kind", "PersistentVolumeClaim");
    add_opt(ref, "namespace", kobj_path_str(pvc, "metadata.namespace"));
    add_opt(ref, "name", kobj_path_str(pvc, "metadata.name"));
    add_opt(ref, "uid", kobj_path_str(pvc, "metadata.uid"));
    add_str(ref, "apiVersion", "v1");
    add_opt(ref, "resourceVersion", kobj_path_str(pvc, "metadata.resourceVersion"));
    return ref;
}

static json_object *metadata(const json_object *sc, const char *pv_name,
                             const prov_secret_refs *refs)
{
    json_object *ann = json_object_new_object();
    add_str(ann, PROV_ANN_PROVISIONED_BY, kobj_path_str(sc, "provisioner"));
    /* Always written: empty means "no secret", and Delete trusts these over
     * the StorageClass, which may have changed or gone. */
    const prov_secret_ref *prov = refs != NULL ? &refs->ref[PROV_SECRET_PROVISIONER] : NULL;
    add_str(ann, PROV_ANN_DELETION_SECRET_NAME, prov != NULL ? prov->name : NULL);
    add_str(ann, PROV_ANN_DELETION_SECRET_NAMESPACE, prov != NULL ? prov->namespace : NULL);
    const prov_secret_ref *mod = refs != NULL ? &refs->ref[PROV_SECRET_CONTROLLER_MODIFY] : NULL;
    if (mod != NULL && mod->name != NULL) {
        add_str(ann, PROV_ANN_MODIFY_SECRET_NAME, mod->name);
        add_str(ann, PROV_ANN_MODIFY_SECRET_NAMESPACE, mod->namespace);
    }
    json_object *finalizers = json_object_new_array();
    json_object_array_add(finalizers, json_object_new_string(PROV_PV_FINALIZER));
    json_object *meta = json_object_new_object();
    add_str(meta, "name", pv_name);
    json_object_object_add(meta, "annotations", ann);
    json_object_object_add(meta, "finalizers", finalizers);
    return meta;
}

static json_object *csi_source(const prov_config *cfg, const json_object *pvc,
                               const json_object *sc, const Csi__V1__CreateVolumeRequest *req,
                               const Csi__V1__Volume *vol, const prov_secret_refs *refs)
{
    json_object *csi = json_object_new_object();
    add_str(csi, "driver", cfg->driver_name);
    add_str(csi, "volumeHandle", vol->volume_id);

    /* ROX as the only access mode: publish read-only when asked to. */
    if (cfg->controller_publish_readonly && req != NULL && req->n_volume_capabilities == 1 &&
        req->volume_capabilities[0]->access_mode != NULL &&
        req->volume_capabilities[0]->access_mode->mode ==
            CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY)
        json_object_object_add(csi, "readOnly", json_object_new_boolean(1));

    const char *mode = kobj_path_str(pvc, "spec.volumeMode");
    if (mode == NULL || strcmp(mode, "Block") != 0) {
        prov_config quiet = *cfg; /* the request already warned */
        quiet.warn = NULL;
        char *fs = NULL;
        if (prov_fstype(&quiet, kobj_path(sc, "parameters"), &fs) == 0)
            add_opt(csi, "fsType", fs);
        free(fs);
    }

    json_object *attrs = json_object_new_object();
    add_str(attrs, PROV_IDENTITY_KEY, cfg->identity);
    for (size_t i = 0; i < vol->n_volume_context; i++)
        add_str(attrs, vol->volume_context[i]->key, vol->volume_context[i]->value);
    json_object_object_add(csi, "volumeAttributes", attrs);

    static const struct {
        prov_secret_kind kind;
        const char *field;
    } pv_refs[] = {
        {PROV_SECRET_CONTROLLER_PUBLISH, "controllerPublishSecretRef"},
        {PROV_SECRET_NODE_STAGE, "nodeStageSecretRef"},
        {PROV_SECRET_NODE_PUBLISH, "nodePublishSecretRef"},
        {PROV_SECRET_CONTROLLER_EXPAND, "controllerExpandSecretRef"},
        {PROV_SECRET_NODE_EXPAND, "nodeExpandSecretRef"},
    };
    for (size_t i = 0; refs != NULL && i < sizeof(pv_refs) / sizeof(pv_refs[0]); i++) {
        const prov_secret_ref *r = &refs->ref[pv_refs[i].kind];
        if (r->name == NULL)
            continue;
        json_object *ref = json_object_new_object();
        add_opt(ref, "name", r->name);
        add_opt(ref, "namespace", r->namespace);
        json_object_object_add(csi, pv_refs[i].field, ref);
    }
    return csi;
}

int prov_build_pv(const prov_config *cfg, const json_object *pvc, const json_object *sc,
                  const Csi__V1__CreateVolumeRequest *req,
                  const Csi__V1__CreateVolumeResponse *resp, const prov_secret_refs *refs,
                  json_object **out)
{
    *out = NULL;
    if (resp == NULL || resp->volume == NULL)
        return util_err_set(-EPROTO, "CreateVolume response has no volume");
    if (req == NULL || req->name == NULL || req->name[0] == '\0')
        return util_err_set(-EINVAL, "CreateVolume request has no name");
    const Csi__V1__Volume *vol = resp->volume;
    int64_t capacity = vol->capacity_bytes != 0 ? vol->capacity_bytes : requested_bytes(req);

    json_object *spec = json_object_new_object();
    add_array_copy(spec, "accessModes", kobj_path(pvc, "spec.accessModes"));
    char qty[PROV_QUANTITY_MAX];
    prov_quantity_format(capacity, qty, sizeof(qty));
    json_object *cap = json_object_new_object();
    add_str(cap, "storage", qty);
    json_object_object_add(spec, "capacity", cap);
    json_object_object_add(spec, "claimRef", claim_ref(pvc));
    json_object_object_add(spec, "csi", csi_source(cfg, pvc, sc, req, vol, refs));
    add_array_copy(spec, "mountOptions", kobj_path(sc, "mountOptions"));
    add_opt(spec, "persistentVolumeReclaimPolicy", kobj_path_str(sc, "reclaimPolicy"));
    add_opt(spec, "storageClassName", prov_pvc_class(pvc));
    add_opt(spec, "volumeMode", kobj_path_str(pvc, "spec.volumeMode"));
    if (cfg->vac_enabled)
        add_opt(spec, "volumeAttributesClassName",
                kobj_path_str(pvc, "spec.volumeAttributesClassName"));
    if (cfg->topology) {
        json_object *affinity =
            prov_node_affinity(vol->accessible_topology, vol->n_accessible_topology);
        if (affinity != NULL)
            json_object_object_add(spec, "nodeAffinity", affinity);
    }

    json_object *pv = json_object_new_object();
    add_str(pv, "apiVersion", "v1");
    add_str(pv, "kind", "PersistentVolume");
    json_object_object_add(pv, "metadata", metadata(sc, req->name, refs));
    json_object_object_add(pv, "spec", spec);
    *out = pv;
    return 0;
}

bool prov_pv_sync_idle(const json_object *pv, const char *driver)
{
    const char *by = kobj_annotation(pv, PROV_ANN_PROVISIONED_BY);
    const char *csi_driver = kobj_path_str(pv, "spec.csi.driver");
    if (!driver || !by || strcmp(by, driver) != 0 || !csi_driver || strcmp(csi_driver, driver) != 0)
        return true;
    bool has_fin = kobj_finalizer_index(pv, PROV_PV_FINALIZER) >= 0;
    const char *policy = kobj_path_str(pv, "spec.persistentVolumeReclaimPolicy");
    if (!policy || strcmp(policy, "Delete") != 0)
        return !has_fin;
    /* Being deleted without our finalizer: the volume is gone already
     * (upstream shouldDelete); another finalizer such as
     * kubernetes.io/pv-protection merely keeps the object a while. */
    if (kobj_deleting(pv) && !has_fin)
        return true;
    const char *phase = kobj_path_str(pv, "status.phase");
    return (!phase || strcmp(phase, "Released") != 0) && has_fin;
}
