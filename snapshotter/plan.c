/*
 * The snapshotter's pure core, after external-snapshotter v8's sidecar
 * controller (pkg/sidecar-controller, pkg/utils): the content decoded with
 * Go's typing rules, the step a sync takes (syncContent), the CSI requests
 * and the texts of the API writes. No I/O and no clock here: the controller
 * passes the time, so every rule is a table row in tests/unit/test_snap_plan.c.
 *
 * Upstream writes with JSON patches of `replace /status` after a fresh GET;
 * here a status write is one merge patch of the status subresource carrying
 * the resourceVersion it was built from, so a stale copy costs a 409 and a
 * retry rather than a lost field.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "snapshotter.h"

char *snap_lock_name(const char *driver)
{
    char *d = util_strdup(driver ? driver : "");
    for (char *p = d; *p; p++)
        if (*p == '/')
            *p = '-';
    char *n = util_asprintf("external-snapshotter-leader-%s", d);
    free(d);
    return n;
}

char *snap_component(const char *driver)
{
    return util_asprintf("csi-snapshotter %s", driver ? driver : "");
}

/* ---- the content ------------------------------------------------------------------------ */

static bool has_annotation(const json_object *o, const char *key)
{
    return kobj_annotation(o, key) != NULL;
}

int snap_content_decode(const json_object *obj, snap_content *out)
{
    *out = (snap_content){0};
    if (!kobj_typed(obj, json_type_object))
        return util_err_set(-EINVAL, "a VolumeSnapshotContent must be a JSON object");
    if (kobj_check(obj, KUBE_VOLUMESNAPSHOTCONTENT.fields) < 0)
        return -EINVAL;
    json_object *status = kobj_obj(obj, "status");
    int64_t n;
    if ((kobj_int64(status, "creationTime", &n) == -EINVAL) ||
        (kobj_int64(status, "restoreSize", &n) == -EINVAL))
        return util_err_set(-EINVAL, "status.creationTime and status.restoreSize must be integers");
    out->name = kobj_name(obj);
    if (!out->name || !*out->name)
        return util_err_set(-EINVAL, "a VolumeSnapshotContent needs metadata.name");
    out->driver = kobj_path_str(obj, "spec.driver");
    out->policy = kobj_path_str(obj, "spec.deletionPolicy");
    out->class_name = kobj_path_str(obj, "spec.volumeSnapshotClassName");
    out->volume_handle = kobj_path_str(obj, "spec.source.volumeHandle");
    out->snapshot_handle = kobj_path_str(obj, "spec.source.snapshotHandle");
    out->ref_name = kobj_path_str(obj, "spec.volumeSnapshotRef.name");
    out->ref_ns = kobj_path_str(obj, "spec.volumeSnapshotRef.namespace");
    out->ref_uid = kobj_path_str(obj, "spec.volumeSnapshotRef.uid");
    out->deleting = kobj_deleting(obj);
    out->has_finalizer = kobj_has_finalizer(obj, SNAP_FINALIZER);
    out->being_created = has_annotation(obj, SNAP_ANN_BEING_CREATED);
    out->being_deleted = has_annotation(obj, SNAP_ANN_BEING_DELETED);
    out->group_member = has_annotation(obj, SNAP_ANN_GROUP_HANDLE);
    out->has_status = status != NULL;
    out->status_handle = kobj_str(status, "snapshotHandle");
    out->group_handle = kobj_str(status, "volumeGroupSnapshotHandle");
    out->error_message = kobj_path_str(status, "error.message");
    out->ready = kobj_bool(status, "readyToUse", false);
    return 0;
}

bool snap_content_is_ours(const snap_config *cfg, const snap_content *c, const json_object *cls)
{
    if (!c->volume_handle && !c->snapshot_handle)
        return false;
    if (!c->driver || !cfg->driver_name || strcmp(c->driver, cfg->driver_name) != 0)
        return false;
    if (cls) {
        const char *d = kobj_str(cls, "driver");
        if (!d || strcmp(d, cfg->driver_name) != 0)
            return false;
    }
    return true;
}

/* A copy without the fields whose changes need no sync, the being-created
 * annotation among them: a sync sets and drops it around each CreateSnapshot
 * and must not wake itself with either (upstream's ShouldEnqueueContentChange
 * makes it equal on both sides too). */
static json_object *sanitized(const json_object *obj)
{
    json_object *o = NULL;
    if (json_object_deep_copy((json_object *)obj, &o, NULL) != 0 || !o)
        return NULL;
    kobj_del(o, "status");
    json_object *md = kobj_obj(o, "metadata");
    kobj_del(md, "resourceVersion");
    kobj_del(md, "managedFields");
    kobj_del(md, "finalizers");
    json_object *ann = kobj_obj(md, "annotations");
    kobj_del(ann, SNAP_ANN_BEING_CREATED);
    if (ann && json_object_object_length(ann) == 0)
        kobj_del(md, "annotations"); /* Go's semantic equality: empty == nil */
    return o;
}

bool snap_update_needs_sync(const json_object *old, const json_object *obj)
{
    const char *a = kobj_rv(old), *b = kobj_rv(obj);
    if (!a || !b || strcmp(a, b) == 0)
        return true;
    if (!kobj_bool(kobj_obj(old, "status"), "readyToUse", false) &&
        kobj_bool(kobj_obj(obj, "status"), "readyToUse", false))
        return true;
    /* A deletion held back by the being-created annotation goes on when the
     * annotation goes. Upstream counts on the readyToUse change above for it
     * (external-snapshotter#1388), which holds only when the sync that wrote
     * the status also dropped the annotation; when a later sync drops it, no
     * other change would wake the deletion. */
    if (kobj_deleting(obj) && has_annotation(old, SNAP_ANN_BEING_CREATED) &&
        !has_annotation(obj, SNAP_ANN_BEING_CREATED))
        return true;
    /* Removing the last annotation leaves no annotations map on a real API
     * server (kube-lite kept an empty one): compared with the annotation put
     * back on one side only, every drop woke a sync that set it again, a
     * loop of writes without backoff. */
    json_object *x = sanitized(old), *y = sanitized(obj);
    bool same = x && y && json_object_equal(x, y);
    json_object_put(x);
    json_object_put(y);
    return !same;
}

/* ---- the decision -------------------------------------------------------------------------- */

const char *snap_step_name(snap_step s)
{
    static const char *const names[] = {"none",   "delete", "remove-finalizer",
                                        "create", "check",  "drop-creating"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "unknown";
}

/* Upstream's shouldDelete. */
static bool should_delete(const snap_content *c)
{
    if (!c->deleting)
        return false;
    if (c->snapshot_handle && (!c->ref_uid || !*c->ref_uid))
        return true; /* a pre-provisioned content never bound */
    if (c->being_created)
        return false;
    return c->being_deleted;
}

snap_step snap_plan(const snap_content *c)
{
    if (should_delete(c)) {
        if (c->policy && strcmp(c->policy, "Delete") == 0 && c->status_handle && !c->group_handle)
            return SNAP_DELETE;
        return c->has_finalizer ? SNAP_REMOVE_FINALIZER : SNAP_NONE;
    }
    if (c->volume_handle && !c->has_status && !c->group_member)
        return SNAP_CREATE;
    if (c->ready)
        return c->being_created ? SNAP_DROP_CREATING : SNAP_NONE;
    if (c->snapshot_handle || (c->group_handle && c->status_handle))
        return SNAP_CHECK;
    return c->group_member ? SNAP_NONE : SNAP_CREATE;
}

/* ---- CSI ----------------------------------------------------------------------------------- */

int snap_name(const snap_config *cfg, const char *uid, char **out)
{
    *out = NULL;
    if (!uid || !*uid)
        return util_err_set(-EINVAL, "Corrupted snapshot object, it is missing UID");
    const char *prefix = cfg->prefix ? cfg->prefix : "snapshot";
    if (cfg->uuid_length < 0) {
        *out = util_asprintf("%s-%s", prefix, uid);
        return 0;
    }
    char *bare = util_calloc(strlen(uid) + 1, 1);
    size_t n = 0;
    for (const char *p = uid; *p; p++)
        if (*p != '-')
            bare[n++] = *p;
    if ((size_t)cfg->uuid_length > n) {
        free(bare);
        return util_err_set(-EINVAL, "--snapshot-name-uuid-length %d is longer than the UID %s",
                            cfg->uuid_length, uid);
    }
    bare[cfg->uuid_length] = '\0';
    *out = util_asprintf("%s-%s", prefix, bare);
    free(bare);
    return 0;
}

static bool known_secret_key(const char *k)
{
    static const char *const keys[] = {
        "snapshotter-secret-name",           "snapshotter-secret-namespace",
        "snapshotter-list-secret-name",      "snapshotter-list-secret-namespace",
        "group-snapshotter-get-secret-name", "group-snapshotter-get-secret-namespace",
        "group-snapshotter-secret-name",     "group-snapshotter-secret-namespace"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (strcmp(k, keys[i]) == 0)
            return true;
    return false;
}

static void add_param(Csi__V1__CreateSnapshotRequest *req, const char *k, const char *v)
{
    for (size_t i = 0; i < req->n_parameters; i++)
        if (strcmp(req->parameters[i]->key, k) == 0) {
            free(req->parameters[i]->value);
            req->parameters[i]->value = util_strdup(v ? v : "");
            return;
        }
    Csi__V1__CreateSnapshotRequest__ParametersEntry *e = util_calloc(1, sizeof(*e));
    csi__v1__create_snapshot_request__parameters_entry__init(e);
    e->key = util_strdup(k);
    e->value = util_strdup(v ? v : "");
    void *grown = realloc(req->parameters, (req->n_parameters + 1) * sizeof(void *));
    if (!grown)
        abort();
    req->parameters = grown;
    req->parameters[req->n_parameters++] = e;
}

int snap_create_request(const snap_config *cfg, const json_object *content, const json_object *cls,
                        Csi__V1__CreateSnapshotRequest **out)
{
    *out = NULL;
    const char *name = kobj_name(content) ? kobj_name(content) : "";
    const char *uid = kobj_path_str(content, "spec.volumeSnapshotRef.uid");
    const char *vol = kobj_path_str(content, "spec.source.volumeHandle");
    if (!cls)
        return util_err_set(-EINVAL, "failed to take snapshot %s without a snapshot class", name);
    Csi__V1__CreateSnapshotRequest *req = util_calloc(1, sizeof(*req));
    csi__v1__create_snapshot_request__init(req);
    json_object *params = kobj_obj(cls, "parameters");
    if (!params)
        params = json_object_new_object(); /* a class without parameters */
    else
        json_object_get(params);
    json_object_object_foreach(params, k, v)
    {
        if (strncmp(k, SNAP_PARAM_PREFIX, strlen(SNAP_PARAM_PREFIX)) == 0) {
            if (known_secret_key(k + strlen(SNAP_PARAM_PREFIX)))
                continue;
            snap_create_request_free(req);
            util_err_set(-EINVAL,
                         "failed to remove CSI Parameters of prefixed keys: found unknown "
                         "parameter key \"%s\" with reserved namespace %s",
                         k, SNAP_PARAM_PREFIX);
            json_object_put(params);
            return -EINVAL;
        }
        const char *s = kobj_typed(v, json_type_string) ? json_object_get_string(v) : "";
        add_param(req, k, s);
    }
    json_object_put(params);
    if (cfg->extra_create_metadata) {
        add_param(req, SNAP_PARAM_SNAPSHOT_NAME,
                  kobj_path_str(content, "spec.volumeSnapshotRef.name"));
        add_param(req, SNAP_PARAM_SNAPSHOT_NS,
                  kobj_path_str(content, "spec.volumeSnapshotRef.namespace"));
        add_param(req, SNAP_PARAM_CONTENT_NAME, name);
    }
    if (!uid || !*uid) {
        snap_create_request_free(req);
        return util_err_set(
            -EINVAL, "cannot create snapshot. Snapshot content %s not bound to a snapshot", name);
    }
    if (!vol) {
        snap_create_request_free(req);
        return util_err_set(
            -EINVAL, "cannot create snapshot. Volume handle not found in snapshot content %s",
            name);
    }
    int rc = snap_name(cfg, uid, &req->name);
    if (rc < 0) {
        snap_create_request_free(req);
        return rc;
    }
    req->source_volume_id = util_strdup(vol);
    *out = req;
    return 0;
}

void snap_create_request_free(Csi__V1__CreateSnapshotRequest *req)
{
    if (!req)
        return;
    for (size_t i = 0; i < req->n_secrets; i++)
        if (req->secrets[i]->value)
            explicit_bzero(req->secrets[i]->value, strlen(req->secrets[i]->value));
    /* Every part is malloc'ed (or protobuf-c's shared empty string, which
     * this skips): the unpacked-message free fits. */
    protobuf_c_message_free_unpacked(&req->base, NULL);
}

int snap_secret_ref(const json_object *content, const char **ns, const char **name)
{
    *ns = *name = NULL;
    const char *n = kobj_annotation(content, SNAP_ANN_SECRET_NAME);
    const char *s = kobj_annotation(content, SNAP_ANN_SECRET_NS);
    if (!n || !s)
        return 0;
    if (!*n || !*s)
        return util_err_set(-EINVAL,
                            "cannot retrieve secrets for snapshot content \"%s\", err: secret name "
                            "or namespace not specified",
                            kobj_name(content) ? kobj_name(content) : "");
    *ns = s;
    *name = n;
    return 0;
}

/* DNS-1123 label (63) or subdomain (253) of lower-case alphanumerics, '-'
 * and, for a subdomain, '.' between labels. */
static bool dns_name(const char *s, bool subdomain)
{
    if (!s)
        return false;
    size_t n = strlen(s), label = 0;
    if (n == 0 || n > (subdomain ? 253u : 63u))
        return false;
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        bool alnum = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9');
        if (ch == '.' && subdomain) {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
            continue;
        }
        if (!alnum && ch != '-')
            return false;
        if (ch == '-' && label == 0)
            return false;
        if (++label > 63)
            return false;
    }
    return s[n - 1] != '-' && s[n - 1] != '.';
}

/* Go's os.Expand with the one token the list secret may use. */
static int expand(const char *tmpl, const char *content_name, char **out)
{
    size_t cap = strlen(tmpl) + strlen(content_name) * 4 + 1, n = 0;
    char *buf = util_calloc(cap + strlen(tmpl) * strlen(content_name) + 1, 1);
    for (const char *p = tmpl; *p;) {
        if (p[0] != '$' || !p[1]) {
            buf[n++] = *p++;
            continue;
        }
        const char *tok, *end;
        size_t len;
        if (p[1] == '{') {
            tok = p + 2;
            end = strchr(tok, '}');
            if (!end) { /* Go: a bad syntax "${" eats the rest */
                free(buf);
                return util_err_set(-EINVAL, "error resolving value \"%s\": bad syntax", tmpl);
            }
            len = (size_t)(end - tok);
            p = end + 1;
        } else {
            tok = p + 1;
            len = 0;
            while (tok[len] == '_' || (tok[len] >= 'a' && tok[len] <= 'z') ||
                   (tok[len] >= 'A' && tok[len] <= 'Z') || (tok[len] >= '0' && tok[len] <= '9'))
                len++;
            if (len == 0) { /* "$" then something else: Go drops the "$" and that byte */
                p += 2;
                continue;
            }
            p = tok + len;
        }
        if (len == strlen("volumesnapshotcontent.name") &&
            strncmp(tok, "volumesnapshotcontent.name", len) == 0) {
            memcpy(buf + n, content_name, strlen(content_name));
            n += strlen(content_name);
        } else if (len > 0) {
            free(buf);
            return util_err_set(-EINVAL, "error resolving value \"%s\": invalid tokens: [\"%.*s\"]",
                                tmpl, (int)len, tok);
        }
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

int snap_list_secret_ref(const json_object *cls, const char *content_name, char **ns, char **name)
{
    *ns = *name = NULL;
    json_object *params = kobj_obj(cls, "parameters");
    json_object *jn = kobj_get(params, SNAP_PARAM_LIST_NAME);
    json_object *js = kobj_get(params, SNAP_PARAM_LIST_NS);
    if (!jn && !js)
        return 0;
    if (!jn || !js)
        return util_err_set(-EINVAL,
                            "failed to get name and namespace template from params: either name "
                            "and namespace for SnapshotterList secrets specified, Both must be "
                            "specified");
    const char *tn = kobj_typed(jn, json_type_string) ? json_object_get_string(jn) : "";
    const char *ts = kobj_typed(js, json_type_string) ? json_object_get_string(js) : "";
    if (!*tn || !*ts)
        return util_err_set(-EINVAL,
                            "failed to get name and namespace template from params: "
                            "SnapshotterList secrets name and namespace must not be empty");
    const char *cn = content_name ? content_name : "";
    int rc = expand(ts, cn, ns);
    if (rc == 0 && !dns_name(*ns, false))
        rc = util_err_set(-EINVAL, "\"%s\" resolved to \"%s\" which is not a valid namespace name",
                          ts, *ns);
    if (rc == 0)
        rc = expand(tn, cn, name);
    if (rc == 0 && !dns_name(*name, true))
        rc = util_err_set(-EINVAL, "\"%s\" resolved to \"%s\" which is not a valid secret name", tn,
                          *name);
    if (rc < 0) {
        free(*ns);
        free(*name);
        *ns = *name = NULL;
    }
    return rc;
}

/* The generated map entries of the three requests (…__SecretsEntry) share
 * this layout; each is made with its own descriptor. */
typedef struct secrets_entry {
    ProtobufCMessage base;
    char *key;
    char *value;
} secrets_entry;

/* A Secret's data decoded into a new array of map entries of `desc`. */
static int set_secrets(const json_object *secret, const ProtobufCMessageDescriptor *desc,
                       size_t *n_out, void ***out)
{
    json_object *data = kobj_obj(secret, "data");
    size_t n = data ? (size_t)json_object_object_length(data) : 0;
    if (!n)
        return 0;
    void **entries = util_calloc(n, sizeof(void *));
    *out = entries;
    json_object_object_foreach(data, k, v)
    {
        const char *text = kobj_typed(v, json_type_string) ? json_object_get_string(v) : "";
        char *dec = NULL;
        if (util_base64_decode(text, &dec) < 0)
            return util_err_set(-EINVAL, "secret data for key \"%s\" is not base64 text", k);
        secrets_entry *e = util_calloc(1, desc->sizeof_message);
        protobuf_c_message_init(desc, e);
        e->key = util_strdup(k);
        e->value = dec;
        entries[(*n_out)++] = e;
    }
    return 0;
}

int snap_create_set_secrets(Csi__V1__CreateSnapshotRequest *req, const json_object *secret)
{
    return set_secrets(secret, &csi__v1__create_snapshot_request__secrets_entry__descriptor,
                       &req->n_secrets, (void ***)&req->secrets);
}

int snap_delete_set_secrets(Csi__V1__DeleteSnapshotRequest *req, const json_object *secret)
{
    return set_secrets(secret, &csi__v1__delete_snapshot_request__secrets_entry__descriptor,
                       &req->n_secrets, (void ***)&req->secrets);
}

int snap_list_set_secrets(Csi__V1__ListSnapshotsRequest *req, const json_object *secret)
{
    return set_secrets(secret, &csi__v1__list_snapshots_request__secrets_entry__descriptor,
                       &req->n_secrets, (void ***)&req->secrets);
}

bool snap_error_final(int code)
{
    switch (code) {
    case CSI_OK:
    case CSI_CANCELLED:
    case CSI_DEADLINE_EXCEEDED:
    case CSI_UNAVAILABLE:
    case CSI_RESOURCE_EXHAUSTED:
    case CSI_ABORTED:
        return false;
    default:
        return true;
    }
}

/* ---- API writes ------------------------------------------------------------------------------ */

void snap_result_from_csi(const Csi__V1__Snapshot *s, snap_result *r)
{
    *r = (snap_result){0};
    if (!s)
        return;
    r->handle = s->snapshot_id;
    r->ready = s->ready_to_use;
    r->size = s->size_bytes;
    r->group_handle = s->group_snapshot_id && *s->group_snapshot_id ? s->group_snapshot_id : NULL;
    if (s->creation_time)
        r->created_ns = s->creation_time->seconds * 1000000000 + s->creation_time->nanos;
}

/* A JSON string of `s` with every byte that is not UTF-8 replaced by
 * U+FFFD, as Go's encoding/json writes it: the driver's texts (handles, gRPC
 * messages) are not checked by protobuf-c, and the API refuses such bytes. */
static json_object *utf8_string(const char *s)
{
    util_buf b = {0};
    size_t len = strlen(s);
    for (size_t i = 0; i < len;) {
        unsigned rune;
        size_t n = util_utf8_decode(s + i, len - i, &rune);
        if (n == 0) {
            util_buf_put(&b, "\xef\xbf\xbd", 3);
            i++;
        } else {
            util_buf_put(&b, s + i, n);
            i += n;
        }
    }
    json_object *o = json_object_new_string_len(b.buf ? b.buf : "", (int)b.len);
    free(b.buf);
    return o;
}

/* {"metadata":{"resourceVersion":rv},"status":status} (status taken). */
static char *guarded_status(const json_object *content, json_object *status)
{
    json_object *root = json_object_new_object();
    const char *rv = kobj_rv(content);
    if (rv) {
        json_object *md = json_object_new_object();
        json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
        json_object_object_add(root, "metadata", md);
    }
    json_object_object_add(root, "status", status);
    char *s = kobj_to_text(root, NULL);
    json_object_put(root);
    return s;
}

char *snap_patch_status(const json_object *content, const snap_result *r, int64_t now_ns)
{
    json_object *old = kobj_obj(content, "status");
    int64_t created = r->created_ns ? r->created_ns : now_ns, v;
    json_object *st = json_object_new_object();
    const char *handle = r->handle ? r->handle : "";
    if (!old) {
        json_object_object_add(st, "snapshotHandle", utf8_string(handle));
        json_object_object_add(st, "readyToUse", json_object_new_boolean(r->ready));
        json_object_object_add(st, "creationTime", json_object_new_int64(created));
        if (r->group_handle)
            json_object_object_add(st, "volumeGroupSnapshotHandle", utf8_string(r->group_handle));
        if (r->size > 0)
            json_object_object_add(st, "restoreSize", json_object_new_int64(r->size));
        return guarded_status(content, st);
    }
    if (!kobj_str(old, "snapshotHandle"))
        json_object_object_add(st, "snapshotHandle", utf8_string(handle));
    json_object *ready = kobj_typed(kobj_get(old, "readyToUse"), json_type_boolean);
    if (!ready || (bool)json_object_get_boolean(ready) != r->ready) {
        json_object_object_add(st, "readyToUse", json_object_new_boolean(r->ready));
        if (r->ready && kobj_get(old, "error"))
            json_object_object_add(st, "error", NULL);
    }
    if (kobj_int64(old, "creationTime", &v) < 0)
        json_object_object_add(st, "creationTime", json_object_new_int64(created));
    if (kobj_int64(old, "restoreSize", &v) < 0 && r->size > 0)
        json_object_object_add(st, "restoreSize", json_object_new_int64(r->size));
    if (!kobj_str(old, "volumeGroupSnapshotHandle") && r->group_handle)
        json_object_object_add(st, "volumeGroupSnapshotHandle", utf8_string(r->group_handle));
    if (json_object_object_length(st) == 0) {
        json_object_put(st);
        return NULL;
    }
    return guarded_status(content, st);
}

char *snap_patch_error(const json_object *content, const char *message, time_t now)
{
    json_object *msg = utf8_string(message);
    const char *old = kobj_path_str(content, "status.error.message");
    if (old && strcmp(old, json_object_get_string(msg)) == 0) {
        json_object_put(msg);
        return NULL;
    }
    char when[UTIL_TIME_RFC3339_LEN];
    util_time_rfc3339(now, when, sizeof(when));
    json_object *err = json_object_new_object();
    json_object_object_add(err, "message", msg);
    json_object_object_add(err, "time", json_object_new_string(when));
    json_object *st = json_object_new_object();
    json_object_object_add(st, "error", err);
    json_object_object_add(st, "readyToUse", json_object_new_boolean(0));
    return guarded_status(content, st);
}

char *snap_patch_clear_status(const json_object *content)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "snapshotHandle", NULL);
    json_object_object_add(st, "readyToUse", NULL);
    json_object_object_add(st, "creationTime", NULL);
    json_object_object_add(st, "restoreSize", NULL);
    return guarded_status(content, st);
}

char *snap_patch_set_creating(const json_object *content)
{
    return kobj_patch_set_annotation(content, SNAP_ANN_BEING_CREATED, "yes", true);
}

char *snap_patch_drop_creating(void)
{
    char *k = kobj_pointer_escape(SNAP_ANN_BEING_CREATED);
    char *p = util_asprintf("[{\"op\":\"remove\",\"path\":\"/metadata/annotations/%s\"}]", k);
    free(k);
    return p;
}
