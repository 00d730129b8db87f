/*
 * plan: the controller's pure core. BucketClaim + BucketClass + Bucket ->
 * the next step and the exact text of its write.
 *
 * A sync runs one step, feeds the API server's answer back in and asks
 * again, so the steps only need to be right one at a time: each is decided
 * from the state it will be applied to, and each write names that state's
 * resourceVersion. Values are read through kobj, so a malformed object ends
 * in a FAIL or an error, never in a crash. Texts are built as json-c trees
 * and printed by kobj_to_text: no value is ever pasted into a format string.
 */
#include "controller.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/cosi.h"
#include "kobj/kobj.h"

#define RES_BUCKETS "buckets.objectstorage.k8s.io"
#define RES_CLASSES "bucketclasses.objectstorage.k8s.io"

/* ---- names ------------------------------------------------------------------------------ */

/* ---- reading ------------------------------------------------------------------------------ */

/* A string member that counts only when non-empty (Go's "" is unset). */
static const char *nonempty(const char *s)
{
    return s && *s ? s : NULL;
}

const char *cctl_class_name(const json_object *claim)
{
    return nonempty(kobj_path_str(claim, "spec.bucketClassName"));
}

const char *cctl_existing_name(const json_object *claim)
{
    return nonempty(kobj_path_str(claim, "spec.existingBucketName"));
}

static const char *status_bucket(const json_object *claim)
{
    return nonempty(kobj_path_str(claim, "status.bucketName"));
}

/* Longest object name the API server stores (a DNS subdomain). */
#define NAME_MAX_LEN 253

static char *generated_name(const json_object *claim)
{
    /* A UID too long for a name comes from a corrupted or hostile answer:
     * treated as none, as kobj treats such names. */
    const char *uid = nonempty(kobj_uid(claim));
    if (!uid || strlen(uid) > NAME_MAX_LEN - strlen(COSI_BUCKET_PREFIX))
        return NULL;
    return util_asprintf("%s%s", COSI_BUCKET_PREFIX, uid);
}

char *cctl_bucket_name(const json_object *claim)
{
    const char *s = kobj_deleting(claim) ? status_bucket(claim) : NULL;
    if (!s)
        s = cctl_existing_name(claim);
    return s ? util_strdup(s) : generated_name(claim);
}

static const char *bound_uid(const json_object *bucket)
{
    return nonempty(kobj_path_str(bucket, "spec.bucketClaim.uid"));
}

bool cctl_bucket_bound_to(const json_object *bucket, const json_object *claim)
{
    const char *b = bound_uid(bucket), *c = nonempty(kobj_uid(claim));
    return b && c && strcmp(b, c) == 0;
}

char *cctl_bucket_claim_key(const json_object *bucket)
{
    const char *ns = nonempty(kobj_path_str(bucket, "spec.bucketClaim.namespace"));
    const char *name = nonempty(kobj_path_str(bucket, "spec.bucketClaim.name"));
    return ns && name ? util_asprintf("%s/%s", ns, name) : NULL;
}

/* ---- texts -------------------------------------------------------------------------------- */

static json_object *jstr(const char *s)
{
    return json_object_new_string(s ? s : "");
}

static json_object *op(const char *name, const char *path, json_object *value, bool with_value)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(name));
    json_object_object_add(o, "path", json_object_new_string(path));
    if (with_value)
        json_object_object_add(o, "value", value);
    return o;
}

/* Prints and releases `o`. */
static char *text_of(json_object *o)
{
    char *s = kobj_to_text(o, NULL);
    json_object_put(o);
    return s;
}

/* {"metadata":{"resourceVersion":rv}}: the merge patch's precondition. */
static json_object *guarded(const char *rv)
{
    json_object *md = json_object_new_object();
    json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
    json_object *root = json_object_new_object();
    json_object_object_add(root, "metadata", md);
    return root;
}

/* The claim's spec.protocols, string items only (Go's decoder would have
 * refused the others; the cache already did). */
static json_object *protocols_of(const json_object *claim)
{
    json_object *list = kobj_arr(kobj_obj(claim, "spec"), "protocols");
    json_object *out = json_object_new_array();
    for (size_t i = 0; i < kobj_len(list); i++) {
        const char *p = kobj_str_at(list, i);
        if (p)
            json_object_array_add(out, json_object_new_string(p));
    }
    return out;
}

static json_object *claim_ref(const json_object *claim)
{
    json_object *ref = json_object_new_object();
    json_object_object_add(ref, "name", jstr(kobj_name(claim)));
    json_object_object_add(ref, "namespace", jstr(kobj_namespace(claim)));
    json_object_object_add(ref, "uid", jstr(kobj_uid(claim)));
    return ref;
}

char *cctl_patch_add_finalizer(const json_object *claim)
{
    return kobj_patch_add_finalizer(claim, COSI_FINALIZER_CLAIM, true);
}

char *cctl_patch_remove_finalizer(const json_object *claim)
{
    int i = kobj_finalizer_index(claim, COSI_FINALIZER_CLAIM);
    const char *rv = kobj_rv(claim);
    if (i < 0 || !rv)
        return NULL;
    char path[64];
    snprintf(path, sizeof(path), "/metadata/finalizers/%d", i);
    json_object *ops = json_object_new_array();
    json_object_array_add(
        ops, op("test", "/metadata/resourceVersion", json_object_new_string(rv), true));
    json_object_array_add(ops,
                          op("test", path, json_object_new_string(COSI_FINALIZER_CLAIM), true));
    json_object_array_add(ops, op("remove", path, NULL, false));
    return text_of(ops);
}

char *cctl_bucket_object(const json_object *claim, const json_object *cls)
{
    char *name = generated_name(claim);
    if (!name)
        return NULL;
    json_object *md = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(name));
    free(name);
    json_object *fins = json_object_new_array();
    json_object_array_add(fins, json_object_new_string(COSI_FINALIZER_BUCKET));
    json_object_object_add(md, "finalizers", fins);

    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "driverName", jstr(kobj_str(cls, "driverName")));
    json_object_object_add(spec, "bucketClassName", jstr(cctl_class_name(claim)));
    json_object_object_add(spec, "bucketClaim", claim_ref(claim));
    json_object_object_add(spec, "protocols", protocols_of(claim));
    json_object *params = kobj_obj(cls, "parameters"), *copy = json_object_new_object();
    if (params) {
        json_object_object_foreach(params, k, v)
        {
            if (kobj_typed(v, json_type_string))
                json_object_object_add(copy, k, json_object_new_string(json_object_get_string(v)));
        }
    }
    /* Go leaves an empty map out (omitempty). */
    if (json_object_object_length(copy) > 0)
        json_object_object_add(spec, "parameters", copy);
    else
        json_object_put(copy);
    const char *policy = kobj_str(cls, "deletionPolicy");
    if (policy)
        json_object_object_add(spec, "deletionPolicy", json_object_new_string(policy));

    json_object *root = json_object_new_object();
    json_object_object_add(root, "apiVersion",
                           json_object_new_string("objectstorage.k8s.io/v1alpha1"));
    json_object_object_add(root, "kind", json_object_new_string("Bucket"));
    json_object_object_add(root, "metadata", md);
    json_object_object_add(root, "spec", spec);
    return text_of(root);
}

char *cctl_patch_status(const json_object *claim, const char *bucket, bool ready)
{
    const char *rv = kobj_rv(claim);
    if (!rv || !bucket)
        return NULL;
    json_object *st = json_object_new_object();
    json_object_object_add(st, "bucketName", json_object_new_string(bucket));
    json_object_object_add(st, "bucketReady", json_object_new_boolean(ready));
    json_object *root = guarded(rv);
    json_object_object_add(root, "status", st);
    return text_of(root);
}

static bool same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

bool cctl_bucket_binding_current(const json_object *bucket, const json_object *claim)
{
    json_object *ref = kobj_path(bucket, "spec.bucketClaim");
    if (!same(kobj_str(ref, "name"), kobj_name(claim)) ||
        !same(kobj_str(ref, "namespace"), kobj_namespace(claim)) ||
        !same(kobj_str(ref, "uid"), kobj_uid(claim)))
        return false;
    json_object *want = protocols_of(claim);
    json_object *have = protocols_of(bucket);
    bool eq = json_object_equal(want, have) != 0;
    json_object_put(want);
    json_object_put(have);
    return eq;
}

char *cctl_patch_bind(const json_object *bucket, const json_object *claim)
{
    const char *rv = kobj_rv(bucket);
    if (!rv)
        return NULL;
    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "bucketClaim", claim_ref(claim));
    json_object_object_add(spec, "protocols", protocols_of(claim));
    json_object *root = guarded(rv);
    json_object_object_add(root, "spec", spec);
    return text_of(root);
}

char *cctl_delete_options(const json_object *bucket)
{
    const char *uid = nonempty(kobj_uid(bucket)), *rv = nonempty(kobj_rv(bucket));
    if (!uid || !rv)
        return NULL;
    json_object *pre = json_object_new_object();
    json_object_object_add(pre, "uid", json_object_new_string(uid));
    json_object_object_add(pre, "resourceVersion", json_object_new_string(rv));
    json_object *root = json_object_new_object();
    json_object_object_add(root, "kind", json_object_new_string("DeleteOptions"));
    json_object_object_add(root, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(root, "preconditions", pre);
    return text_of(root);
}

/* Go's %q for printable text: quotes, backslash escapes, \xNN for other
 * control bytes. */
static void go_quote(util_buf *b, const char *s)
{
    util_buf_put(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        static const char named[] = "\a\b\f\n\r\t\v", letters[] = "abfnrtv";
        const char *hit = *p ? strchr(named, *p) : NULL;
        char esc[5];
        if (*p == '"' || *p == '\\') {
            esc[0] = '\\';
            esc[1] = (char)*p;
            util_buf_put(b, esc, 2);
        } else if (hit) {
            esc[0] = '\\';
            esc[1] = letters[hit - named];
            util_buf_put(b, esc, 2);
        } else if (*p < 0x20 || *p == 0x7f) {
            snprintf(esc, sizeof(esc), "\\x%02x", *p);
            util_buf_put(b, esc, 4);
        } else {
            util_buf_put(b, (const char *)p, 1);
        }
    }
    util_buf_put(b, "\"", 1);
}

/* `<resource> "<name>" <what>`. */
static char *about(const char *resource, const char *name, const char *what)
{
    util_buf b = {0};
    util_buf_put(&b, resource, strlen(resource));
    util_buf_put(&b, " ", 1);
    go_quote(&b, name);
    util_buf_put(&b, " ", 1);
    util_buf_put(&b, what, strlen(what));
    return b.buf;
}

char *cctl_msg_not_found(const char *resource, const char *name)
{
    return about(resource, name, "not found");
}

/* ---- the decision ---------------------------------------------------------------------------- */

void cctl_plan_clear(cctl_plan *p)
{
    if (!p)
        return;
    free(p->bucket);
    free(p->text);
    free(p->message);
    memset(p, 0, sizeof(*p));
}

static int fail(cctl_plan *p, const char *reason, char *message)
{
    p->step = CCTL_FAIL;
    p->reason = reason;
    p->message = message;
    return 0;
}

/* A write step; no text means the object lacks what the write needs. */
static int write_step(cctl_plan *p, cctl_step step, char *text, const json_object *obj,
                      const char *what)
{
    if (!text) {
        const char *name = kobj_name(obj);
        return util_err_set(-EINVAL, "%s %s: malformed metadata (no resourceVersion or UID)", what,
                            name ? name : "");
    }
    p->step = step;
    p->text = text;
    return 0;
}

bool cctl_bucket_owned(const json_object *bucket, const json_object *claim)
{
    if (!bucket)
        return false;
    if (bound_uid(bucket))
        return cctl_bucket_bound_to(bucket, claim);
    /* A Bucket found through spec.existingBucketName alone was never
     * recorded as bound: only its claim UID makes it ours. */
    return status_bucket(claim) || !cctl_existing_name(claim);
}

static int plan_delete(const json_object *claim, const json_object *bucket, cctl_plan *p)
{
    if (!kobj_has_finalizer(claim, COSI_FINALIZER_CLAIM))
        return 0;
    p->bucket = cctl_bucket_name(claim);
    if (cctl_bucket_owned(bucket, claim)) {
        if (kobj_deleting(bucket))
            return 0; /* the sidecar is at work; the Bucket's end requeues us */
        return write_step(p, CCTL_DELETE_BUCKET, cctl_delete_options(bucket), bucket, "Bucket");
    }
    /* Absent, or someone else's: on the word of a copy that may be old or
     * corrupted, the Bucket would leak with the claim gone. */
    p->confirm = p->bucket != NULL;
    return write_step(p, CCTL_REMOVE_FINALIZER, cctl_patch_remove_finalizer(claim), claim,
                      "BucketClaim");
}

/* Plans the finalizer's patch when the claim lacks it (true then). */
static bool plan_finalizer(const json_object *claim, cctl_plan *p, int *rc)
{
    if (kobj_has_finalizer(claim, COSI_FINALIZER_CLAIM))
        return false;
    *rc = write_step(p, CCTL_ADD_FINALIZER, cctl_patch_add_finalizer(claim), claim, "BucketClaim");
    return true;
}

static int plan_brownfield(const json_object *claim, const char *name, const json_object *bucket,
                           cctl_plan *p)
{
    p->bucket = util_strdup(name);
    if (!bucket)
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET, cctl_msg_not_found(RES_BUCKETS, name));
    /* The other claim is not named: it may live in a namespace this
     * claim's readers must not learn about. */
    if (bound_uid(bucket) && !cctl_bucket_bound_to(bucket, claim))
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET,
                    about(RES_BUCKETS, name, "is bound to another BucketClaim"));
    if (kobj_deleting(bucket))
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET,
                    about(RES_BUCKETS, name, "is being deleted"));
    int rc = 0;
    if (plan_finalizer(claim, p, &rc))
        return rc;
    if (!cctl_bucket_binding_current(bucket, claim))
        return write_step(p, CCTL_BIND_BUCKET, cctl_patch_bind(bucket, claim), bucket, "Bucket");
    return write_step(p, CCTL_SET_STATUS, cctl_patch_status(claim, name, true), claim,
                      "BucketClaim");
}

static int plan_greenfield(const json_object *claim, const json_object *cls,
                           const json_object *bucket, cctl_plan *p)
{
    const char *class_name = cctl_class_name(claim);
    if (!class_name)
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET, util_strdup(CCTL_MSG_NO_CLASS));
    p->bucket = generated_name(claim);
    if (!p->bucket)
        return util_err_set(-EINVAL, "BucketClaim %s: no usable metadata.uid",
                            kobj_name(claim) ? kobj_name(claim) : "");
    /* Once the Bucket exists the class is not read again. */
    if (!bucket && !cls)
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET,
                    cctl_msg_not_found(RES_CLASSES, class_name));
    if (bucket && !cctl_bucket_bound_to(bucket, claim))
        return fail(p, COSI_REASON_FAILED_CREATE_BUCKET,
                    about(RES_BUCKETS, p->bucket,
                          "already exists and is not bound to this "
                          "BucketClaim"));
    if (bucket && kobj_deleting(bucket))
        return 0; /* its deletion event requeues us, and a new one is made */
    int rc = 0;
    if (plan_finalizer(claim, p, &rc))
        return rc;
    if (!bucket)
        return write_step(p, CCTL_CREATE_BUCKET, cctl_bucket_object(claim, cls), claim,
                          "BucketClaim");
    /* bucketReady false is written once only: it must never undo the
     * sidecar's true. */
    if (status_bucket(claim))
        return 0;
    return write_step(p, CCTL_SET_STATUS, cctl_patch_status(claim, p->bucket, false), claim,
                      "BucketClaim");
}

int cctl_plan_next(const json_object *claim, const json_object *cls, const json_object *bucket,
                   cctl_plan *out)
{
    memset(out, 0, sizeof(*out));
    if (!kobj_meta(claim))
        return util_err_set(-EINVAL, "BucketClaim without metadata");
    int rc;
    const char *existing = cctl_existing_name(claim);
    if (kobj_deleting(claim))
        rc = plan_delete(claim, bucket, out);
    else if (kobj_bool(kobj_obj(claim, "status"), "bucketReady", false))
        rc = 0;
    else if (existing)
        rc = plan_brownfield(claim, existing, bucket, out);
    else
        rc = plan_greenfield(claim, cls, bucket, out);
    if (rc < 0)
        cctl_plan_clear(out);
    return rc;
}
