/*
 * The volume rules of kubelet-sim, as pure functions: which volumes of a
 * pod are CSI volumes and what the kubelet's CSI plugin reads from them,
 * the names and paths it uses, the requests it sends, and the next step a
 * volume needs. No I/O here: volumes.c reads the objects and acts; the
 * tests feed tables of objects (tests/unit/test_kubelet_sim_plan.c).
 *
 * Paths follow the kubelet's layout under its root directory, because a
 * driver written for a real kubelet may look at them: staging in
 * plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/globalmount, targets
 * in pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount (block volumes in
 * plugins/kubernetes.io/csi/volumeDevices/). Every name that becomes a path
 * segment is checked first: it comes from the API.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "kobj/kobj.h"
#include "kubelet-sim/ksim.h"

#define CSI_DIR "plugins/kubernetes.io/csi"

/* ---- maps ---------------------------------------------------------------------------- */

void ksim_map_set(ksim_map *m, const char *key, const char *value)
{
    size_t i = 0;
    while (i < m->n && strcmp(m->kv[i].key, key) < 0)
        i++;
    if (i < m->n && strcmp(m->kv[i].key, key) == 0) {
        free(m->kv[i].value);
        m->kv[i].value = util_strdup(value);
        return;
    }
    ksim_kv *kv = realloc(m->kv, (m->n + 1) * sizeof(*kv));
    if (!kv)
        abort();
    m->kv = kv;
    memmove(&m->kv[i + 1], &m->kv[i], (m->n - i) * sizeof(*kv));
    m->kv[i].key = util_strdup(key);
    m->kv[i].value = util_strdup(value);
    m->n++;
}

const char *ksim_map_get(const ksim_map *m, const char *key)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->kv[i].key, key) == 0)
            return m->kv[i].value;
    return NULL;
}

void ksim_map_clear(ksim_map *m)
{
    for (size_t i = 0; i < m->n; i++) {
        free(m->kv[i].key);
        free(m->kv[i].value);
    }
    free(m->kv);
    m->kv = NULL;
    m->n = 0;
}

int ksim_map_add_json(ksim_map *m, const json_object *obj, const char *what)
{
    if (!obj)
        return 0;
    if (!kobj_typed(obj, json_type_object))
        return util_err_set(-EINVAL, "%s is not a map of strings", what);
    json_object_object_foreach((json_object *)obj, k, v)
    {
        if (!json_object_is_type(v, json_type_string))
            return util_err_set(-EINVAL, "%s[%s] is not a string", what, k);
        ksim_map_set(m, k, json_object_get_string(v));
    }
    return 0;
}

int ksim_secret_data(const json_object *secret, ksim_map *out)
{
    json_object *data = kobj_get(secret, "data");
    if (!data)
        return 0;
    if (!kobj_typed(data, json_type_object))
        return util_err_set(-EINVAL, "secret %s/%s: data is not a map",
                            kobj_namespace(secret) ? kobj_namespace(secret) : "",
                            kobj_name(secret) ? kobj_name(secret) : "");
    json_object_object_foreach(data, k, v)
    {
        char *plain = NULL;
        if (!json_object_is_type(v, json_type_string) ||
            util_base64_decode(json_object_get_string(v), &plain) < 0)
            return util_err_set(-EINVAL, "secret data for key \"%s\" is not base64 text", k);
        ksim_map_set(out, k, plain);
        free(plain);
    }
    return 0;
}

/* ---- names --------------------------------------------------------------------------- */

void ksim_sha256_hex(const char *s, char out[65])
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(s, strlen(s), md, &len, EVP_sha256(), NULL);
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < 32; i++) {
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[64] = '\0';
}

char *ksim_unique_name(const char *driver, const char *handle)
{
    return util_asprintf("kubernetes.io/csi/%s^%s", driver, handle);
}

static char *csi_hash_name(const char *a, const char *b, const char *c)
{
    char *in = util_asprintf("%s%s%s", a, b, c ? c : "");
    char hex[65];
    ksim_sha256_hex(in, hex);
    free(in);
    return util_asprintf("csi-%s", hex);
}

char *ksim_va_name(const char *handle, const char *driver, const char *node)
{
    return csi_hash_name(handle, driver, node);
}

char *ksim_ephemeral_handle(const char *pod_uid, const char *vol_name)
{
    return csi_hash_name(pod_uid, vol_name, NULL);
}

bool ksim_safe_segment(const char *s)
{
    return s && *s && !strchr(s, '/') && strcmp(s, ".") != 0 && strcmp(s, "..") != 0;
}

static int unsafe(const char *what, const char *s)
{
    return util_err_set(-EINVAL, "%s \"%s\" cannot be a path segment", what, s ? s : "");
}

/* ---- paths --------------------------------------------------------------------------- */

int ksim_stage_dir(const char *root, const char *driver, const char *handle, char **out)
{
    *out = NULL;
    if (!ksim_safe_segment(driver))
        return unsafe("driver name", driver);
    char hex[65];
    ksim_sha256_hex(handle ? handle : "", hex);
    *out = util_asprintf("%s/" CSI_DIR "/%s/%s", root, driver, hex);
    return 0;
}

int ksim_pub_dir(const char *root, const char *pod_uid, const char *spec_name, char **out)
{
    *out = NULL;
    if (!ksim_safe_segment(pod_uid))
        return unsafe("pod uid", pod_uid);
    if (!ksim_safe_segment(spec_name))
        return unsafe("volume name", spec_name);
    *out = util_asprintf("%s/pods/%s/volumes/kubernetes.io~csi/%s", root, pod_uid, spec_name);
    return 0;
}

int ksim_staging_path(const char *root, const ksim_vol *v, char **out)
{
    *out = NULL;
    if (v->block) {
        if (!ksim_safe_segment(v->spec_name))
            return unsafe("volume name", v->spec_name);
        *out = util_asprintf("%s/" CSI_DIR "/volumeDevices/staging/%s", root, v->spec_name);
        return 0;
    }
    char *dir = NULL;
    int r = ksim_stage_dir(root, v->driver, v->handle, &dir);
    if (r < 0)
        return r;
    *out = util_asprintf("%s/globalmount", dir);
    free(dir);
    return 0;
}

int ksim_target_path(const char *root, const char *pod_uid, const ksim_vol *v, char **out)
{
    *out = NULL;
    if (v->block) {
        if (!ksim_safe_segment(v->spec_name))
            return unsafe("volume name", v->spec_name);
        if (!ksim_safe_segment(pod_uid))
            return unsafe("pod uid", pod_uid);
        *out = util_asprintf("%s/" CSI_DIR "/volumeDevices/publish/%s/%s", root, v->spec_name,
                             pod_uid);
        return 0;
    }
    char *dir = NULL;
    int r = ksim_pub_dir(root, pod_uid, v->spec_name, &dir);
    if (r < 0)
        return r;
    *out = util_asprintf("%s/mount", dir);
    free(dir);
    return 0;
}

/* ---- the volumes of a pod ------------------------------------------------------------ */

void ksim_podvols_free(ksim_podvol *v, size_t n)
{
    for (size_t i = 0; v && i < n; i++) {
        free(v[i].name);
        free(v[i].claim);
        json_object_put(v[i].csi);
    }
    free(v);
}

int ksim_pod_volumes(const json_object *pod, ksim_podvol **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    json_object *vols = kobj_path(pod, "spec.volumes");
    size_t len = kobj_len(vols);
    ksim_podvol *v = util_calloc(len ? len : 1, sizeof(*v));
    size_t k = 0;
    for (size_t i = 0; i < len; i++) {
        json_object *vol = kobj_at(vols, i);
        json_object *claim = kobj_obj(vol, "persistentVolumeClaim");
        json_object *csi = kobj_obj(vol, "csi");
        if (!claim && !csi)
            continue;
        const char *name = kobj_str(vol, "name");
        if (!name || !*name) {
            ksim_podvols_free(v, k);
            return util_err_set(-EINVAL, "spec.volumes[%zu] has no name", i);
        }
        ksim_podvol *p = &v[k++];
        p->name = util_strdup(name);
        if (claim) {
            const char *cn = kobj_str(claim, "claimName");
            if (!cn || !*cn) {
                ksim_podvols_free(v, k);
                return util_err_set(-EINVAL, "volume %s: persistentVolumeClaim has no claimName",
                                    name);
            }
            p->kind = KSIM_VOL_PVC;
            p->claim = util_strdup(cn);
            p->readonly = kobj_bool(claim, "readOnly", false);
        } else {
            p->kind = KSIM_VOL_INLINE;
            p->csi = json_object_get(csi);
            p->readonly = kobj_bool(csi, "readOnly", false);
        }
    }
    *out = v;
    *n = k;
    return 0;
}

void ksim_vol_clear(ksim_vol *v)
{
    free(v->name);
    free(v->spec_name);
    free(v->driver);
    free(v->handle);
    free(v->unique);
    free(v->fs_type);
    for (size_t i = 0; i < v->n_mount_flags; i++)
        free(v->mount_flags[i]);
    free(v->mount_flags);
    free(v->access_mode);
    ksim_map_clear(&v->attrs);
    free(v->stage_secret_ns);
    free(v->stage_secret_name);
    free(v->pub_secret_ns);
    free(v->pub_secret_name);
    free(v->claim);
    free(v->expand_secret_ns);
    free(v->expand_secret_name);
    memset(v, 0, sizeof(*v));
}

static char *dup_or_null(const char *s)
{
    return s && *s ? util_strdup(s) : NULL;
}

/* A secret reference {name, namespace}; `dflt_ns` for inline volumes,
 * whose references name no namespace. */
static void secret_ref(const json_object *ref, const char *dflt_ns, char **ns, char **name)
{
    const char *n = kobj_str(ref, "name");
    const char *s = kobj_str(ref, "namespace");
    if (!n || !*n)
        return;
    *name = util_strdup(n);
    *ns = util_strdup(s && *s ? s : (dflt_ns ? dflt_ns : ""));
}

/* What the csi source says, common to PV and inline sources. */
static int fill_from_csi(ksim_vol *v, const json_object *csi, const char *dflt_ns)
{
    v->fs_type = dup_or_null(kobj_str(csi, "fsType"));
    int r = ksim_map_add_json(&v->attrs, kobj_get(csi, "volumeAttributes"), "volumeAttributes");
    if (r < 0)
        return r;
    secret_ref(kobj_obj(csi, "nodePublishSecretRef"), dflt_ns, &v->pub_secret_ns,
               &v->pub_secret_name);
    return 0;
}

int ksim_vol_from_claim(const ksim_podvol *pvol, const json_object *pvc, const json_object *pv,
                        ksim_vol *out)
{
    memset(out, 0, sizeof(*out));
    const char *claim = pvol->claim;
    const char *vn = kobj_path_str(pvc, "spec.volumeName");
    const char *phase = kobj_path_str(pvc, "status.phase");
    if (!pvc)
        return util_err_set(-EAGAIN, "waiting for claim %s", claim);
    if (!vn || !*vn || !phase || strcmp(phase, "Bound") != 0)
        return util_err_set(-EAGAIN, "waiting for claim %s to be bound", claim);
    if (!pv || strcmp(kobj_name(pv) ? kobj_name(pv) : "", vn) != 0)
        return util_err_set(-EAGAIN, "waiting for volume %s of claim %s", vn, claim);
    const char *ref_uid = kobj_path_str(pv, "spec.claimRef.uid");
    const char *pvc_uid = kobj_uid(pvc);
    if (ref_uid && pvc_uid && strcmp(ref_uid, pvc_uid) != 0)
        return util_err_set(-EINVAL, "volume %s is bound to another claim than %s", vn, claim);
    json_object *csi = kobj_path(pv, "spec.csi");
    if (!csi)
        return KSIM_NOT_CSI;
    const char *driver = kobj_str(csi, "driver"), *handle = kobj_str(csi, "volumeHandle");
    if (!kobj_typed(csi, json_type_object) || !driver || !*driver || !handle || !*handle)
        return util_err_set(-EINVAL, "volume %s: spec.csi needs driver and volumeHandle", vn);
    out->kind = KSIM_VOL_PVC;
    out->name = util_strdup(pvol->name);
    out->spec_name = util_strdup(vn);
    out->driver = util_strdup(driver);
    out->handle = util_strdup(handle);
    out->unique = ksim_unique_name(driver, handle);
    const char *mode = kobj_path_str(pv, "spec.volumeMode");
    out->block = mode && strcmp(mode, "Block") == 0;
    const char *first = kobj_str_at(kobj_path(pv, "spec.accessModes"), 0);
    out->access_mode = util_strdup(first ? first : "ReadWriteOnce");
    out->readonly = pvol->readonly || kobj_bool(csi, "readOnly", false);
    json_object *opts = kobj_path(pv, "spec.mountOptions");
    size_t n = kobj_len(opts);
    out->mount_flags = util_calloc(n ? n : 1, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        if (kobj_str_at(opts, i))
            out->mount_flags[out->n_mount_flags++] = util_strdup(kobj_str_at(opts, i));
    secret_ref(kobj_obj(csi, "nodeStageSecretRef"), NULL, &out->stage_secret_ns,
               &out->stage_secret_name);
    secret_ref(kobj_obj(csi, "nodeExpandSecretRef"), NULL, &out->expand_secret_ns,
               &out->expand_secret_name);
    out->claim = util_strdup(claim);
    ksim_resize rs;
    ksim_resize_plan(pvc, pv, out->readonly, &rs);
    out->resize = rs.step != KSIM_RESIZE_NONE;
    int r = fill_from_csi(out, csi, NULL);
    if (r < 0) {
        char *msg = util_asprintf("volume %s: %s", vn, util_err_last());
        ksim_vol_clear(out);
        util_err_set(r, "%s", msg);
        free(msg);
    }
    return r;
}

int ksim_vol_inline(const json_object *pod, const ksim_podvol *pvol, ksim_vol *out)
{
    memset(out, 0, sizeof(*out));
    const char *driver = kobj_str(pvol->csi, "driver");
    const char *uid = kobj_uid(pod);
    if (!driver || !*driver)
        return util_err_set(-EINVAL, "inline volume %s has no driver", pvol->name);
    if (!uid)
        return util_err_set(-EINVAL, "pod has no uid");
    out->kind = KSIM_VOL_INLINE;
    out->name = util_strdup(pvol->name);
    out->spec_name = util_strdup(pvol->name);
    out->driver = util_strdup(driver);
    out->handle = ksim_ephemeral_handle(uid, pvol->name);
    out->unique = ksim_unique_name(driver, out->handle);
    out->access_mode = util_strdup("ReadWriteOnce");
    out->readonly = pvol->readonly;
    int r = fill_from_csi(out, pvol->csi, kobj_namespace(pod));
    if (r < 0) {
        char *msg = util_asprintf("inline volume %s: %s", pvol->name, util_err_last());
        ksim_vol_clear(out);
        util_err_set(r, "%s", msg);
        free(msg);
    }
    return r;
}

void ksim_driver_info_of(const json_object *csidriver, ksim_driver_info *out)
{
    json_object *spec = kobj_obj(csidriver, "spec");
    out->attach_required = kobj_bool(spec, "attachRequired", true);
    out->pod_info_on_mount = kobj_bool(spec, "podInfoOnMount", false);
    json_object *modes = kobj_arr(spec, "volumeLifecycleModes");
    out->persistent = kobj_len(modes) == 0;
    out->ephemeral = false;
    for (size_t i = 0; i < kobj_len(modes); i++) {
        const char *m = kobj_str_at(modes, i);
        if (m && strcmp(m, "Persistent") == 0)
            out->persistent = true;
        else if (m && strcmp(m, "Ephemeral") == 0)
            out->ephemeral = true;
    }
}

/* ---- CSI requests -------------------------------------------------------------------- */

int ksim_access_mode(const char *mode, bool snmw, Csi__V1__VolumeCapability__AccessMode__Mode *out)
{
    *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__UNKNOWN;
    if (!mode || strcmp(mode, "ReadWriteOnce") == 0)
        *out = snmw ? CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER
                    : CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    else if (strcmp(mode, "ReadWriteOncePod") == 0)
        *out = snmw ? CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER
                    : CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    else if (strcmp(mode, "ReadOnlyMany") == 0)
        *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
    else if (strcmp(mode, "ReadWriteMany") == 0)
        *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER;
    else
        return util_err_set(-EINVAL, "unsupported access mode %s", mode);
    return 0;
}

void ksim_publish_volume_context(const ksim_vol *v, const json_object *pod,
                                 const ksim_driver_info *di, ksim_map *out)
{
    for (size_t i = 0; i < v->attrs.n; i++)
        ksim_map_set(out, v->attrs.kv[i].key, v->attrs.kv[i].value);
    if (!di || !di->pod_info_on_mount)
        return;
    const char *sa = kobj_path_str(pod, "spec.serviceAccountName");
    ksim_map_set(out, "csi.storage.k8s.io/pod.name", kobj_name(pod) ? kobj_name(pod) : "");
    ksim_map_set(out, "csi.storage.k8s.io/pod.namespace",
                 kobj_namespace(pod) ? kobj_namespace(pod) : "");
    ksim_map_set(out, "csi.storage.k8s.io/pod.uid", kobj_uid(pod) ? kobj_uid(pod) : "");
    ksim_map_set(out, "csi.storage.k8s.io/serviceAccount.name", sa ? sa : "");
    ksim_map_set(out, "csi.storage.k8s.io/ephemeral",
                 v->kind == KSIM_VOL_INLINE ? "true" : "false");
}

/* A map field of a request: entries of `desc` (every CSI map entry is a
 * message of a key and a value, found by name in its descriptor). */
static void **map_entries(const ProtobufCMessageDescriptor *desc, const ksim_map *m, size_t *n)
{
    *n = 0;
    if (!m || m->n == 0)
        return NULL;
    const ProtobufCFieldDescriptor *kf =
        protobuf_c_message_descriptor_get_field_by_name(desc, "key");
    const ProtobufCFieldDescriptor *vf =
        protobuf_c_message_descriptor_get_field_by_name(desc, "value");
    if (!kf || !vf)
        abort(); /* a descriptor that is no map entry: a bug here, not input */
    void **out = util_calloc(m->n, sizeof(void *));
    for (size_t i = 0; i < m->n; i++) {
        char *e = util_calloc(1, desc->sizeof_message);
        protobuf_c_message_init(desc, e);
        char *k = util_strdup(m->kv[i].key), *val = util_strdup(m->kv[i].value);
        memcpy(e + kf->offset, &k, sizeof(k));
        memcpy(e + vf->offset, &val, sizeof(val));
        out[i] = e;
    }
    *n = m->n;
    return out;
}

static int capability(const ksim_vol *v, bool snmw, Csi__V1__VolumeCapability **out)
{
    *out = NULL;
    Csi__V1__VolumeCapability__AccessMode__Mode mode;
    int r = ksim_access_mode(v->access_mode, snmw, &mode);
    if (r < 0)
        return r;
    Csi__V1__VolumeCapability *cap = util_calloc(1, sizeof(*cap));
    csi__v1__volume_capability__init(cap);
    cap->access_mode = util_calloc(1, sizeof(*cap->access_mode));
    csi__v1__volume_capability__access_mode__init(cap->access_mode);
    cap->access_mode->mode = mode;
    if (v->block) {
        cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
        cap->block = util_calloc(1, sizeof(*cap->block));
        csi__v1__volume_capability__block_volume__init(cap->block);
    } else {
        cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
        cap->mount = util_calloc(1, sizeof(*cap->mount));
        csi__v1__volume_capability__mount_volume__init(cap->mount);
        if (v->fs_type)
            cap->mount->fs_type = util_strdup(v->fs_type);
        if (v->n_mount_flags) {
            cap->mount->mount_flags = util_calloc(v->n_mount_flags, sizeof(char *));
            for (size_t i = 0; i < v->n_mount_flags; i++)
                cap->mount->mount_flags[i] = util_strdup(v->mount_flags[i]);
            cap->mount->n_mount_flags = v->n_mount_flags;
        }
    }
    *out = cap;
    return 0;
}

int ksim_stage_request(const ksim_vol *v, const char *staging, const ksim_map *pub_ctx,
                       const ksim_map *secrets, bool snmw, Csi__V1__NodeStageVolumeRequest **out)
{
    *out = NULL;
    Csi__V1__VolumeCapability *cap = NULL;
    int r = capability(v, snmw, &cap);
    if (r < 0)
        return r;
    Csi__V1__NodeStageVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__node_stage_volume_request__init(req);
    req->volume_id = util_strdup(v->handle);
    req->staging_target_path = util_strdup(staging);
    req->volume_capability = cap;
    req->publish_context = (Csi__V1__NodeStageVolumeRequest__PublishContextEntry **)map_entries(
        &csi__v1__node_stage_volume_request__publish_context_entry__descriptor, pub_ctx,
        &req->n_publish_context);
    req->secrets = (Csi__V1__NodeStageVolumeRequest__SecretsEntry **)map_entries(
        &csi__v1__node_stage_volume_request__secrets_entry__descriptor, secrets, &req->n_secrets);
    req->volume_context = (Csi__V1__NodeStageVolumeRequest__VolumeContextEntry **)map_entries(
        &csi__v1__node_stage_volume_request__volume_context_entry__descriptor, &v->attrs,
        &req->n_volume_context);
    *out = req;
    return 0;
}

int ksim_publish_request(const ksim_vol *v, const char *staging, const char *target,
                         const ksim_map *pub_ctx, const ksim_map *secrets, const ksim_map *vol_ctx,
                         bool snmw, Csi__V1__NodePublishVolumeRequest **out)
{
    *out = NULL;
    Csi__V1__VolumeCapability *cap = NULL;
    int r = capability(v, snmw, &cap);
    if (r < 0)
        return r;
    Csi__V1__NodePublishVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__node_publish_volume_request__init(req);
    req->volume_id = util_strdup(v->handle);
    if (staging)
        req->staging_target_path = util_strdup(staging);
    req->target_path = util_strdup(target);
    req->volume_capability = cap;
    req->readonly = v->readonly;
    req->publish_context = (Csi__V1__NodePublishVolumeRequest__PublishContextEntry **)map_entries(
        &csi__v1__node_publish_volume_request__publish_context_entry__descriptor, pub_ctx,
        &req->n_publish_context);
    req->secrets = (Csi__V1__NodePublishVolumeRequest__SecretsEntry **)map_entries(
        &csi__v1__node_publish_volume_request__secrets_entry__descriptor, secrets, &req->n_secrets);
    req->volume_context = (Csi__V1__NodePublishVolumeRequest__VolumeContextEntry **)map_entries(
        &csi__v1__node_publish_volume_request__volume_context_entry__descriptor, vol_ctx,
        &req->n_volume_context);
    *out = req;
    return 0;
}

int ksim_expand_request(const ksim_vol *v, const char *volume_path, const char *staging,
                        int64_t bytes, const ksim_map *secrets, bool snmw,
                        Csi__V1__NodeExpandVolumeRequest **out)
{
    *out = NULL;
    Csi__V1__VolumeCapability *cap = NULL;
    int r = capability(v, snmw, &cap);
    if (r < 0)
        return r;
    Csi__V1__NodeExpandVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__node_expand_volume_request__init(req);
    req->volume_id = util_strdup(v->handle);
    req->volume_path = util_strdup(volume_path);
    if (staging)
        req->staging_target_path = util_strdup(staging);
    req->capacity_range = util_calloc(1, sizeof(*req->capacity_range));
    csi__v1__capacity_range__init(req->capacity_range);
    req->capacity_range->required_bytes = bytes;
    req->volume_capability = cap;
    req->secrets = (Csi__V1__NodeExpandVolumeRequest__SecretsEntry **)map_entries(
        &csi__v1__node_expand_volume_request__secrets_entry__descriptor, secrets, &req->n_secrets);
    *out = req;
    return 0;
}

void ksim_request_free(void *req)
{
    /* Everything in a request is malloc'ed, so the unpacked-message free
     * releases it; unset strings are protobuf-c's shared empty string,
     * which it skips. */
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}

/* ---- the next step ------------------------------------------------------------------- */

ksim_step ksim_next_step(const ksim_facts *f)
{
    if (f->teardown) {
        /* A driver must be there to undo anything; with nothing recorded
         * there is nothing to undo. */
        if (!f->has_pub_record && (!f->has_stage_record || f->other_users))
            return KSIM_GONE;
        if (!f->driver_registered)
            return KSIM_WAIT_DRIVER;
        if (f->has_pub_record)
            return KSIM_UNPUBLISH;
        return KSIM_UNSTAGE;
    }
    if (f->published) {
        /* A mounted volume the controller grew: the node grows it too
         * (online expansion), when the driver's node service can. */
        if (!f->resize)
            return KSIM_READY;
        if (!f->driver_registered)
            return KSIM_WAIT_DRIVER;
        return f->expand_cap ? KSIM_EXPAND : KSIM_READY;
    }
    if (!f->driver_registered)
        return KSIM_WAIT_DRIVER;
    /* As the kubelet: an attachable volume is reported in use before it
     * waits for the attachment, so the attach/detach controller never
     * detaches what is about to be mounted. */
    if (f->attach_required && !f->in_use_reported)
        return KSIM_REPORT_IN_USE;
    if (f->attach_required && !f->attached)
        return KSIM_WAIT_ATTACH;
    if (f->stage_cap && !f->staged)
        return KSIM_STAGE;
    return KSIM_PUBLISH;
}

const char *ksim_step_name(ksim_step s)
{
    static const char *const names[] = {"wait-driver", "report-in-use", "wait-attach", "stage",
                                        "publish",     "expand",        "ready",       "unpublish",
                                        "unstage",     "gone"};
    return (size_t)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}
