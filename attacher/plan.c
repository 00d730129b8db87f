/*
 * plan: the attacher's pure core. VolumeAttachment + PersistentVolume +
 * node id + driver capabilities -> the CSI requests, and the texts of every
 * API write (status merge patches, the finalizer/annotation JSON patch).
 *
 * Everything is a function of its arguments: no I/O, no clock, no global
 * state, so each rule is a table row in tests/unit/test_att_plan.c. Values
 * read from objects go through kobj, which answers NULL for a missing field
 * and for a field of the wrong JSON type alike: malformed input ends in an
 * error message, never in a crash.
 */
#include "attacher.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "volcap/volcap.h"

/* ---- names -------------------------------------------------------------------------- */

char *att_finalizer(const char *driver)
{
    /* Upstream's finalizer sanitizing is the lease-name rule. */
    char *s = kube_leader_lease_name(driver ? driver : "");
    char *f = util_asprintf("external-attacher/%s", s);
    free(s);
    return f;
}

char *att_lock_name(const char *driver)
{
    return util_asprintf("external-attacher-leader-%s", driver ? driver : "");
}

/* ---- configuration ---------------------------------------------------------------- */

void att_config_set_caps(att_config *cfg, const csi_caps *caps)
{
    cfg->publish_readonly = CSI_CAP(
        caps->controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_READONLY);
    cfg->single_node_multi_writer =
        CSI_CAP(caps->controller,
                CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER);
}

bool att_caps_publish(const csi_caps *caps)
{
    return CSI_CAP(caps->plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE) &&
           CSI_CAP(caps->controller,
                   CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME);
}

bool att_caps_list_published(const csi_caps *caps)
{
    return CSI_CAP(caps->controller,
                   CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES) &&
           CSI_CAP(caps->controller,
                   CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES_PUBLISHED_NODES);
}

/* ---- VolumeAttachments ------------------------------------------------------------------ */

bool att_va_is_ours(const att_config *cfg, const json_object *va)
{
    const char *a = kobj_path_str(va, "spec.attacher");
    return a && cfg->driver_name && strcmp(a, cfg->driver_name) == 0;
}

const char *att_va_node(const json_object *va)
{
    return kobj_path_str(va, "spec.nodeName");
}

const char *att_va_pv(const json_object *va)
{
    return kobj_path_str(va, "spec.source.persistentVolumeName");
}

att_action att_va_action(const att_config *cfg, const json_object *va, const char *finalizer,
                         bool forced)
{
    if (!att_va_is_ours(cfg, va))
        return ATT_SKIP;
    if (kobj_deleting(va))
        return forced || kobj_has_finalizer(va, finalizer) ? ATT_DETACH : ATT_SKIP;
    if (!forced && kobj_bool(kobj_obj(va, "status"), "attached", false))
        return ATT_SKIP;
    return ATT_ATTACH;
}

int att_va_source(const json_object *va, const char **pv_name)
{
    *pv_name = NULL;
    json_object *src = kobj_path(va, "spec.source");
    const char *pv = kobj_str(src, "persistentVolumeName");
    bool inline_spec = kobj_get(src, "inlineVolumeSpec") != NULL;
    const char *name = kobj_name(va);
    if (pv && *pv && inline_spec)
        return util_err_set(-EINVAL,
                            "VolumeAttachment %s: both InlineVolumeSpec and PersistentVolumeName "
                            "specified",
                            name ? name : "");
    if (inline_spec)
        return util_err_set(-ENOTSUP,
                            "VolumeAttachment %s: inline volumes (CSI migration) are not supported",
                            name ? name : "");
    if (!pv || !*pv)
        return util_err_set(
            -EINVAL,
            "VolumeAttachment %s: neither InlineVolumeSpec nor PersistentVolumeName "
            "specified",
            name ? name : "");
    *pv_name = pv;
    return 0;
}

/* ---- node ids ------------------------------------------------------------------------ */

static const char *csinode_id(const char *driver, const json_object *csinode, bool *has_entry)
{
    json_object *drivers = kobj_arr(kobj_obj(csinode, "spec"), "drivers");
    size_t n = kobj_len(drivers);
    for (size_t i = 0; i < n; i++) {
        json_object *d = kobj_at(drivers, i);
        const char *name = kobj_str(d, "name");
        if (name && strcmp(name, driver) == 0) {
            *has_entry = true;
            const char *id = kobj_str(d, "nodeID");
            return id && *id ? id : NULL;
        }
    }
    return NULL;
}

/* The Node annotation's value for `driver`: the annotation is JSON text. */
static char *node_annotation_id(const char *driver, const json_object *node)
{
    const char *text = kobj_annotation(node, ATT_ANN_NODE_IDS);
    if (!text)
        return NULL;
    json_object *map = kobj_parse_text(text, strlen(text));
    const char *id = kobj_str(map, driver);
    char *r = id && *id ? util_strdup(id) : NULL;
    json_object_put(map);
    return r;
}

int att_node_id(const char *driver, const char *node_name, const json_object *csinode,
                const json_object *node, const json_object *va, char **out, att_node_id_source *src)
{
    *out = NULL;
    if (src)
        *src = ATT_NODE_ID_NONE;
    if (!driver)
        driver = "";
    if (!node_name)
        node_name = "";
    bool entry = false;
    const char *id = csinode_id(driver, csinode, &entry);
    if (id) {
        *out = util_strdup(id);
        if (src)
            *src = ATT_NODE_ID_CSINODE;
        return 0;
    }
    char *ann = node_annotation_id(driver, node);
    if (ann) {
        *out = ann;
        if (src)
            *src = ATT_NODE_ID_NODE_ANNOTATION;
        return 0;
    }
    const char *va_id = va ? kobj_annotation(va, ATT_ANN_VA_NODE_ID) : NULL;
    if (va_id && *va_id) {
        *out = util_strdup(va_id);
        if (src)
            *src = ATT_NODE_ID_VA_ANNOTATION;
        return 0;
    }
    if (!csinode)
        return util_err_set(-ENOENT,
                            "CSINode %s not found and node %s has no %s annotation for driver %s",
                            node_name, node_name, ATT_ANN_NODE_IDS, driver);
    return util_err_set(-ENOENT, "CSINode %s does not contain %s for driver %s", node_name,
                        entry ? "a node ID" : "an entry", driver);
}

/* ---- CSI requests ---------------------------------------------------------------- */

/* spec.csi and its volumeHandle, or -EINVAL naming the PV. */
static int pv_handle(const json_object *pv, json_object **csi, const char **handle)
{
    const char *name = kobj_name(pv);
    *csi = kobj_path(pv, "spec.csi");
    *handle = kobj_str(*csi, "volumeHandle");
    if (!kobj_typed(*csi, json_type_object))
        return util_err_set(-EINVAL, "PersistentVolume %s is not a CSI volume", name ? name : "");
    if (!*handle || !**handle)
        return util_err_set(-EINVAL, "PersistentVolume %s has no spec.csi.volumeHandle",
                            name ? name : "");
    return 0;
}

int att_publish_request(const att_config *cfg, const json_object *pv, const char *node_id,
                        Csi__V1__ControllerPublishVolumeRequest **out)
{
    *out = NULL;
    json_object *csi;
    const char *handle;
    int r = pv_handle(pv, &csi, &handle);
    if (r < 0)
        return r;
    Csi__V1__VolumeCapability *cap = NULL;
    r = volcap_of_pv(pv, cfg->single_node_multi_writer, cfg->default_fstype, &cap);
    if (r < 0)
        return r;
    Csi__V1__ControllerPublishVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__controller_publish_volume_request__init(req);
    req->volume_id = util_strdup(handle);
    req->node_id = util_strdup(node_id ? node_id : "");
    req->volume_capability = cap;
    req->readonly = cfg->publish_readonly && kobj_bool(csi, "readOnly", false);
    json_object *attrs = kobj_obj(csi, "volumeAttributes");
    if (attrs) {
        size_t n = (size_t)json_object_object_length(attrs);
        req->volume_context = util_calloc(n ? n : 1, sizeof(void *));
        json_object_object_foreach(attrs, k, v)
        {
            if (!json_object_is_type(v, json_type_string))
                continue;
            Csi__V1__ControllerPublishVolumeRequest__VolumeContextEntry *e =
                util_calloc(1, sizeof(*e));
            csi__v1__controller_publish_volume_request__volume_context_entry__init(e);
            e->key = util_strdup(k);
            e->value = util_strdup(json_object_get_string(v));
            req->volume_context[req->n_volume_context++] = e;
        }
    }
    *out = req;
    return 0;
}

int att_unpublish_request(const json_object *pv, const char *node_id,
                          Csi__V1__ControllerUnpublishVolumeRequest **out)
{
    *out = NULL;
    json_object *csi;
    const char *handle;
    int r = pv_handle(pv, &csi, &handle);
    if (r < 0)
        return r;
    Csi__V1__ControllerUnpublishVolumeRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__controller_unpublish_volume_request__init(req);
    req->volume_id = util_strdup(handle);
    req->node_id = util_strdup(node_id ? node_id : "");
    *out = req;
    return 0;
}

void att_request_free(ProtobufCMessage *req)
{
    /* Every member was malloc'ed here; protobuf-c's static empty string
     * (unset fields) is skipped by free_unpacked. */
    if (req)
        protobuf_c_message_free_unpacked(req, NULL);
}

int att_secret_ref(const json_object *pv, const char **ns, const char **name)
{
    *ns = *name = NULL;
    json_object *ref = kobj_obj(kobj_path(pv, "spec.csi"), "controllerPublishSecretRef");
    if (!ref)
        return 0;
    const char *n = kobj_str(ref, "name"), *s = kobj_str(ref, "namespace");
    if (!n || !*n || !s || !*s)
        return util_err_set(-EINVAL,
                            "PersistentVolume %s: controllerPublishSecretRef needs a name and a "
                            "namespace",
                            kobj_name(pv) ? kobj_name(pv) : "");
    *ns = s;
    *name = n;
    return 0;
}

/* Calls add(key, decoded value) for every data entry, keys sorted. */
static int secret_each(const json_object *secret, void (*add)(void *ud, char *k, char *v), void *ud)
{
    json_object *data = kobj_obj(secret, "data");
    if (!data)
        return 0;
    json_object_object_foreach(data, k, v)
    {
        const char *text = kobj_typed(v, json_type_string) ? json_object_get_string(v) : "";
        char *dec = NULL;
        if (util_base64_decode(text, &dec) < 0)
            return util_err_set(-EINVAL, "secret data for key \"%s\" is not base64 text", k);
        add(ud, util_strdup(k), dec);
    }
    return 0;
}

static size_t secret_count(const json_object *secret)
{
    json_object *data = kobj_obj(secret, "data");
    return data ? (size_t)json_object_object_length(data) : 0;
}

static void add_pub_secret(void *ud, char *k, char *v)
{
    Csi__V1__ControllerPublishVolumeRequest *req = ud;
    Csi__V1__ControllerPublishVolumeRequest__SecretsEntry *e = util_calloc(1, sizeof(*e));
    csi__v1__controller_publish_volume_request__secrets_entry__init(e);
    e->key = k;
    e->value = v;
    req->secrets[req->n_secrets++] = e;
}

static void add_unpub_secret(void *ud, char *k, char *v)
{
    Csi__V1__ControllerUnpublishVolumeRequest *req = ud;
    Csi__V1__ControllerUnpublishVolumeRequest__SecretsEntry *e = util_calloc(1, sizeof(*e));
    csi__v1__controller_unpublish_volume_request__secrets_entry__init(e);
    e->key = k;
    e->value = v;
    req->secrets[req->n_secrets++] = e;
}

int att_publish_set_secrets(Csi__V1__ControllerPublishVolumeRequest *req, const json_object *secret)
{
    size_t n = secret_count(secret);
    if (!n)
        return 0;
    req->secrets = util_calloc(n, sizeof(void *));
    return secret_each(secret, add_pub_secret, req);
}

int att_unpublish_set_secrets(Csi__V1__ControllerUnpublishVolumeRequest *req,
                              const json_object *secret)
{
    size_t n = secret_count(secret);
    if (!n)
        return 0;
    req->secrets = util_calloc(n, sizeof(void *));
    return secret_each(secret, add_unpub_secret, req);
}

/* ---- messages ------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *s)
{
    unsigned char c = s[0];
    size_t n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0) {
        n = 2;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 3;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (size_t i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* Overlong forms, surrogates and values beyond U+10FFFF are invalid. */
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

char *att_message_fit(const char *msg)
{
    const unsigned char *s = (const unsigned char *)(msg ? msg : "");
    size_t len = strlen((const char *)s);
    /* Clean copy first: invalid bytes become '?', one byte each, so the
     * length and the cut below are those of the stored text. */
    char *clean = util_calloc(len + 1, 1);
    size_t i = 0;
    while (i < len) {
        size_t n = utf8_len(s + i);
        if (n == 0) {
            clean[i++] = '?';
            continue;
        }
        memcpy(clean + i, s + i, n);
        i += n;
    }
    if (len <= ATT_MESSAGE_MAX)
        return clean;
    size_t cut = ATT_MESSAGE_MAX - strlen(ATT_TRUNCATED_MARKER);
    /* Never split a character: back up over continuation bytes. */
    while (cut > 0 && ((unsigned char)clean[cut] & 0xC0) == 0x80)
        cut--;
    memcpy(clean + cut, ATT_TRUNCATED_MARKER, sizeof(ATT_TRUNCATED_MARKER));
    return clean;
}

/* ---- patches ---------------------------------------------------------------------- */

static char *status_patch(json_object *status)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "status", status);
    char *s = kobj_to_text(root, NULL);
    json_object_put(root);
    return s;
}

char *att_status_attached(const Csi__V1__ControllerPublishVolumeResponse *resp)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "attached", json_object_new_boolean(1));
    json_object *md = NULL;
    if (resp && resp->n_publish_context) {
        md = json_object_new_object();
        for (size_t i = 0; i < resp->n_publish_context; i++) {
            const Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *e =
                resp->publish_context[i];
            if (e && e->key)
                json_object_object_add(md, e->key,
                                       json_object_new_string(e->value ? e->value : ""));
        }
    }
    /* null clears what an earlier publish left (merge patch semantics). */
    json_object_object_add(st, "attachmentMetadata", md);
    json_object_object_add(st, "attachError", NULL);
    return status_patch(st);
}

bool att_status_is_current(const json_object *va,
                           const Csi__V1__ControllerPublishVolumeResponse *resp)
{
    const json_object *st = kobj_obj(va, "status");
    if (!kobj_bool(st, "attached", false))
        return false;
    if (kobj_get(st, "attachError"))
        return false;
    const json_object *md = kobj_obj(st, "attachmentMetadata");
    size_t want = resp ? resp->n_publish_context : 0;
    size_t have = md ? (size_t)json_object_object_length(md) : 0;
    if (have != want)
        return false;
    for (size_t i = 0; i < want; i++) {
        const Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *e =
            resp->publish_context[i];
        const char *v = e && e->key ? kobj_str(md, e->key) : NULL;
        if (!v || strcmp(v, e->value ? e->value : "") != 0)
            return false;
    }
    return true;
}

char *att_status_attached_plain(void)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "attached", json_object_new_boolean(1));
    return status_patch(st);
}

static char *error_patch(const char *field, const char *msg, int code, time_t now)
{
    char when[32];
    util_time_rfc3339(now, when, sizeof(when));
    char *fit = att_message_fit(msg);
    json_object *err = json_object_new_object();
    json_object_object_add(err, "message", json_object_new_string(fit));
    json_object_object_add(err, "time", json_object_new_string(when));
    if (code > 0)
        json_object_object_add(err, "errorCode", json_object_new_int(code));
    free(fit);
    json_object *st = json_object_new_object();
    json_object_object_add(st, field, err);
    return status_patch(st);
}

char *att_status_attach_error(const char *msg, int code, time_t now)
{
    return error_patch("attachError", msg, code, now);
}

char *att_status_detach_error(const char *msg, time_t now)
{
    return error_patch("detachError", msg, 0, now);
}

char *att_status_detached(void)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "attached", json_object_new_boolean(0));
    json_object_object_add(st, "detachError", NULL);
    json_object_object_add(st, "attachmentMetadata", NULL);
    return status_patch(st);
}

static json_object *op(const char *name, const char *path, json_object *value)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(name));
    json_object_object_add(o, "path", json_object_new_string(path));
    json_object_object_add(o, "value", value);
    return o;
}

int att_patch_va_meta(const json_object *va, const char *finalizer, const char *node_id, char **out)
{
    *out = NULL;
    json_object *md = kobj_meta(va);
    if (!md)
        return util_err_set(-EINVAL, "VolumeAttachment without metadata");
    bool need_fin = !kobj_has_finalizer(va, finalizer);
    const char *cur = kobj_annotation(va, ATT_ANN_VA_NODE_ID);
    bool need_ann = !cur || strcmp(cur, node_id) != 0;
    if (!need_fin && !need_ann)
        return 0;
    json_object *ops = NULL;
    if (need_fin) {
        char *text = kobj_patch_add_finalizer(va, finalizer, false);
        ops = text ? kobj_parse_text(text, strlen(text)) : NULL;
        free(text);
        if (!kobj_typed(ops, json_type_array)) {
            json_object_put(ops);
            return util_err_set(-EINVAL, "VolumeAttachment %s: malformed metadata.finalizers",
                                kobj_name(va) ? kobj_name(va) : "");
        }
    } else {
        ops = json_object_new_array();
    }
    if (need_ann) {
        json_object *anns = kobj_get(md, "annotations");
        if (anns && !kobj_typed(anns, json_type_object)) {
            json_object_put(ops);
            return util_err_set(-EINVAL, "VolumeAttachment %s: malformed metadata.annotations",
                                kobj_name(va) ? kobj_name(va) : "");
        }
        if (!anns) {
            /* The whole map is written: only while it is still absent. */
            json_object *m = json_object_new_object();
            json_object_object_add(m, ATT_ANN_VA_NODE_ID, json_object_new_string(node_id));
            json_object_array_add(ops, op("test", "/metadata/annotations", NULL));
            json_object_array_add(ops, op("add", "/metadata/annotations", m));
        } else {
            char *key = kobj_pointer_escape(ATT_ANN_VA_NODE_ID);
            char *path = util_asprintf("/metadata/annotations/%s", key);
            json_object_array_add(ops, op("add", path, json_object_new_string(node_id)));
            free(path);
            free(key);
        }
    }
    *out = kobj_to_text(ops, NULL);
    json_object_put(ops);
    return 0;
}

bool att_va_last_finalizer(const json_object *va, const char *finalizer)
{
    json_object *f = kobj_arr(kobj_meta(va), "finalizers");
    return kobj_len(f) == 1 && kobj_has_finalizer(va, finalizer);
}

bool att_published_on(const char *const *nodes, size_t n, const char *node_id)
{
    for (size_t i = 0; node_id && i < n; i++)
        if (nodes[i] && strcmp(nodes[i], node_id) == 0)
            return true;
    return false;
}
