/*
 * kube-lite: a single-process Kubernetes API server for the storage API,
 * used by the local world, the end-to-end tests and the benchmarks.
 *
 * Objects are json-c trees, stored whole (unknown fields survive), keyed by
 * resource + namespace/name, with one resourceVersion counter shared by all
 * resources like an etcd revision. The parts below are the pure pieces the
 * HTTP layer (server.c) and the store (store.c) are built from:
 *
 *   types     the table of served resources (one row per type)
 *   errs      field errors accumulated into a 422 Invalid Status
 *   patch     RFC 7386 merge patch, RFC 6902 JSON patch, strategic merge
 *   select    label and field selectors
 *   validate  names, labels, defaults and per-type create/update rules
 *   auth      bearer tokens and RBAC evaluation over the stored objects
 *
 * Prefix kl_. Functions return 0 or a negative errno; util_err_last() holds
 * the message a client should see.
 */
#ifndef KUBE_LITE_KL_H
#define KUBE_LITE_KL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "util/util.h"

/* ---- types ---------------------------------------------------------------- */

/*
 * A list inside an object that strategic merge patch merges instead of
 * replacing. `path` is dotted from the object root with "[]" stepping into
 * list elements ("metadata.finalizers", "spec.containers",
 * "spec.containers[].env"). `key` is the merge key of element maps, or NULL
 * for a list of primitives merged as a set. `retain_keys` marks lists whose
 * elements honour "$retainKeys".
 */
typedef struct kl_merge_key {
    const char *path;
    const char *key;
    bool retain_keys;
} kl_merge_key;

typedef struct kl_type {
    const char *group; /* "" for core */
    const char *version;
    const char *resource; /* plural, e.g. "persistentvolumeclaims" */
    const char *kind;
    const char *list_kind;
    const char *singular;
    const char *short_names[3]; /* NULL-ended */
    bool namespaced;
    bool has_status;     /* a /status subresource exists */
    bool return_deleted; /* DELETE answers with the deleted object, not a Status */
    bool custom;         /* a CRD (snapshots): no strategic merge, has generation */
    /* Field selectors beyond metadata.name (and metadata.namespace when
     * namespaced), NULL-ended; NULL means none. */
    const char *const *fields;
    const kl_merge_key *merge_keys; /* strategic merge lists, n_merge_keys long */
    size_t n_merge_keys;
    /* metadata.generation is kept (1 on create, +1 on spec changes) although
     * not a CRD: the apps/v1 workloads. */
    bool generation;
} kl_type;

/* Every served type, in a fixed order. */
const kl_type *kl_types(size_t *n);
/* By group + version + plural resource; NULL when not served. */
const kl_type *kl_type_find(const char *group, const char *version, const char *resource);
/* By group + kind (e.g. "" + "PersistentVolumeClaim"). */
const kl_type *kl_type_by_kind(const char *group, const char *kind);
/* "persistentvolumeclaims" for core, "storageclasses.storage.k8s.io" otherwise:
 * the resource string of error messages. Static storage per type. */
const char *kl_type_qualified(const kl_type *t);
/* "v1" or "storage.k8s.io/v1". Static storage per type. */
const char *kl_type_api_version(const kl_type *t);

/* ---- crd: types served for CustomResourceDefinitions (crd.c) --------------- */

/*
 * The registry of custom resource types, one per CustomResourceDefinition
 * (its storage version), owned by the API. A type stays allocated until the
 * registry is freed (watches and requests in flight keep pointers to it); a
 * deleted CRD's type is only taken out of the lookups.
 */
typedef struct kl_crds kl_crds;
typedef struct kl_store kl_store;
typedef struct kl_errs kl_errs;

kl_crds *kl_crds_new(kl_store *s);
void kl_crds_free(kl_crds *c);
/* The served type of group/version/plural, or NULL. */
const kl_type *kl_crds_find(kl_crds *c, const char *group, const char *version,
                            const char *resource);
/* The served types (malloc'ed array, caller frees) and the generation of
 * that set: it changes whenever a type starts or stops being served. */
const kl_type **kl_crds_list(kl_crds *c, size_t *n, uint64_t *gen);
uint64_t kl_crds_generation(kl_crds *c);
/*
 * Brings the served types in line with the stored CRDs, as
 * kube-apiserver's CRD controllers do: serves new ones and marks them
 * Established and NamesAccepted, follows schema and column changes, and for
 * a CRD deleted (or being deleted) stops serving its type and removes its
 * objects. Level-triggered: call it after any CRD write.
 */
void kl_crds_reconcile(kl_crds *c);
/* True for a type a CRD serves. */
bool kl_type_is_crd(const kl_type *t);
const char *kl_crd_type_qualified(const kl_type *t);
const char *kl_crd_type_api_version(const kl_type *t);
/* The CustomResourceDefinition rules (names, scope, versions, the
 * api-approved.kubernetes.io annotation of protected groups); `old` is NULL
 * on create. */
void kl_crd_validate_definition(const json_object *old, const json_object *crd, kl_errs *e);
/* Server-side defaults of a CustomResourceDefinition (conversion strategy,
 * Age column, storedVersions). */
void kl_crd_definition_defaults(json_object *crd);
/* Custom objects: prunes fields the schema does not know and fills its
 * defaults (what decoding does), then validation against the schema. */
void kl_crd_admit(const kl_type *t, json_object *obj);
void kl_crd_validate(const kl_type *t, const json_object *obj, kl_errs *e);
/* The version's additionalPrinterColumns (the Age column when it declares
 * none). Borrowed: valid as long as the API, never to be modified. */
json_object *kl_crd_columns(const kl_type *t);

/* ---- crd_schema: structural OpenAPI v3 schemas (crd_schema.c) ------------- */

/* Drops the fields of `obj` the schema does not specify (objects without
 * x-kubernetes-preserve-unknown-fields); `root` keeps apiVersion, kind and
 * metadata. */
void kl_schema_prune(const json_object *schema, json_object *obj, bool root);
/* Fills `default` values of absent properties and drops nulls of fields
 * that are not nullable. */
void kl_schema_default(const json_object *schema, json_object *obj);
/* type, properties, required, enum, items, additionalProperties, nullable,
 * with kube-apiserver's wording ("spec.a: Required value", "Invalid value:
 * \"integer\": spec.a in body must be of type string: \"integer\""). `path` is
 * the field path of `obj` ("" at the root). */
void kl_schema_validate(const json_object *schema, const json_object *obj, const char *path,
                        kl_errs *e);

/* ---- discovery: /api, /apis, /apis/<g>/<v> and OpenAPI v3 (discovery.c) ----- */

typedef struct kl_discovery {
    char *api;               /* /api */
    char *apis;              /* /apis */
    char *openapi_root;      /* /openapi/v3 */
    json_object *gv_lists;   /* "api/v1" or "apis/g/v" -> APIResourceList */
    json_object *gv_groups;  /* group -> APIGroup */
    json_object *openapi_gv; /* "api/v1" ... -> OpenAPI v3 document */
    uint64_t gen;            /* kl_crds generation it was built for */
    int refs;                /* atomic */
} kl_discovery;

/* The documents for the built-in types followed by `extra` (may be NULL). */
kl_discovery *kl_discovery_build(const kl_type **extra, size_t n_extra, uint64_t gen);
kl_discovery *kl_discovery_ref(kl_discovery *d);
void kl_discovery_unref(kl_discovery *d);

/* ---- table: server-side printing (meta.k8s.io Table) ----------------------- */

enum { KL_TABLE_V1 = 1, KL_TABLE_V1BETA1 = 2 };
enum { KL_INCLUDE_NONE = 0, KL_INCLUDE_METADATA = 1, KL_INCLUDE_OBJECT = 2 };

/* Which Table version an Accept header asks for first (KL_TABLE_V1 or
 * KL_TABLE_V1BETA1), or 0 for plain JSON. */
int kl_table_accept(const char *accept);
/* The includeObject query parameter (NULL: Metadata); -1 when unknown. */
int kl_table_include(const char *include_object);
/* An empty Table for `t` with (when `columns`) kube-apiserver's column
 * definitions for that type; rows are added with kl_table_add_row. */
json_object *kl_table_new(const kl_type *t, int version, bool columns);
/* A creationTimestamp-style time as kubectl's age ("5m"), against `now`;
 * caller frees. */
char *kl_table_age(const char *ts, int64_t now);
/* Appends the row of `obj` (cells, and the object as asked by `include`),
 * ages computed against `now` (Unix seconds). */
void kl_table_add_row(json_object *table, const kl_type *t, const json_object *obj, int version,
                      int include, int64_t now);

/* ---- proto: the protobuf encoding (application/vnd.kubernetes.protobuf) ------ */

#define KL_PROTO_TYPE       "application/vnd.kubernetes.protobuf"
#define KL_PROTO_WATCH_TYPE "application/vnd.kubernetes.protobuf;stream=watch"

/*
 * Decodes a request body ("k8s\0" + runtime.Unknown{typeMeta{apiVersion,
 * kind}, raw, contentEncoding, contentType}) into the JSON object
 * kube-apiserver's JSON encoding of the same Go struct would be. -EINVAL for
 * malformed bytes (bounds, wire types, nesting), -ENOTSUP for a kind without
 * tables (custom resources); util_err_last() says why. An envelope without
 * apiVersion and kind is read as `dflt_api_version` / `dflt_kind` (may be
 * NULL); DeleteOptions is read under any apiVersion.
 */
int kl_proto_decode(const void *body, size_t len, const char *dflt_api_version,
                    const char *dflt_kind, json_object **out);
/* The envelope of `obj`, typed by its own apiVersion and kind; *out is
 * malloc'ed. -ENOTSUP when there are no tables for it. */
int kl_proto_encode(const json_object *obj, char **out, size_t *len);
/* The message alone (no envelope) of `kind` in `api_version`. */
int kl_proto_msg_decode(const char *api_version, const char *kind, const void *msg, size_t len,
                        json_object **out);
int kl_proto_msg_encode(const char *api_version, const char *kind, const json_object *obj,
                        char **out, size_t *len);
/*
 * A JSON watch stream (lines of {"type":..,"object":..}) as protobuf frames:
 * each a 4-byte big-endian length and a bare metav1.WatchEvent{type = 1,
 * object = 2 RawExtension{raw = 1}} whose raw is the object's envelope, as
 * kube-apiserver's raw stream serializer writes them. -ENOTSUP for an
 * object without tables.
 */
int kl_proto_watch_frames(const char *lines, size_t len, char **out, size_t *out_len);
/* One frame's WatchEvent: its type (caller frees) and decoded object. */
int kl_proto_watch_event_decode(const void *msg, size_t len, char **type, json_object **obj);
/* True when kube-apiserver's negotiation of `accept` picks the protobuf
 * encoding (before JSON, without a conversion such as as=Table). */
bool kl_proto_accepts(const char *accept);
/* True when there are tables for this apiVersion and kind. */
bool kl_proto_known(const char *api_version, const char *kind);

/*
 * The field tables, generated into proto_tables.c by gen-proto-tables.py
 * from Kubernetes' generated.proto files and the Go structs beside them.
 */
enum {
    KL_PB_STRING = 1,
    KL_PB_BYTES, /* base64 in JSON */
    KL_PB_BOOL,
    KL_PB_INT32,
    KL_PB_INT64,
    KL_PB_MSG,       /* kl_pb_msgs[msg] */
    KL_PB_TIME,      /* metav1.Time {seconds = 1, nanos = 2}: RFC 3339 seconds */
    KL_PB_MICROTIME, /* the same message: RFC 3339 with 6 fractional digits */
    KL_PB_QUANTITY,  /* resource.Quantity {string = 1}: its string */
    KL_PB_INTORSTR,  /* intstr.IntOrString {type = 1, intVal = 2, strVal = 3} */
    KL_PB_RAWEXT,    /* runtime.RawExtension {raw = 1}: raw JSON */
    KL_PB_FIELDSV1,  /* metav1.FieldsV1 {Raw = 1}: raw JSON */
};
enum {
    KL_PBF_REPEATED = 1,
    KL_PBF_MAP = 2,       /* map<string, kind>: entries {key = 1, value = 2} */
    KL_PBF_PTR = 4,       /* a Go pointer: on the wire only when set */
    KL_PBF_OMITEMPTY = 8, /* json:",omitempty" */
    KL_PBF_INLINE = 16,   /* json:",inline": the message's fields sit in the parent */
    KL_PBF_OMITZERO = 32, /* json:",omitzero" */
    KL_PBF_GONE = 64,     /* removed in the newest source: written only when the JSON has it */
};
typedef struct kl_pb_field {
    uint32_t num;
    uint16_t msg; /* KL_PB_MSG */
    uint8_t kind;
    uint8_t flags;
    const char *json; /* the JSON member ("" for an inline field) */
} kl_pb_field;
typedef struct kl_pb_msg {
    const char *name;
    uint16_t first; /* its fields: kl_pb_fields[first .. first + n), by number */
    uint16_t n;
    uint16_t order; /* kl_pb_order[order .. order + n): Go declaration order */
} kl_pb_msg;
typedef struct kl_pb_root {
    const char *api_version; /* NULL: any (the meta.k8s.io kinds) */
    const char *kind;
    uint16_t msg;
} kl_pb_root;
extern const kl_pb_field kl_pb_fields[];
extern const uint8_t kl_pb_order[];
extern const kl_pb_msg kl_pb_msgs[];
extern const size_t kl_pb_n_msgs;
extern const kl_pb_root kl_pb_roots[];
extern const size_t kl_pb_n_roots;

/* Shared by the proto*.c files. */
const kl_pb_msg *kl_pb_root_msg(const char *api_version, const char *kind);
/* RFC 3339 text <-> Unix seconds and nanoseconds (years 0..9999). */
int kl_pb_time_parse(const char *s, int64_t *secs, int32_t *nanos);
int kl_pb_time_format(int64_t secs, int32_t nanos, bool micro, char *buf, size_t len);
/* Standard base64 with padding (what encoding/json does with []byte). */
char *kl_pb_base64(const uint8_t *p, size_t len, size_t *out_len);
int kl_pb_unbase64(const char *s, size_t len, uint8_t **out, size_t *out_len);

/* ---- shape: JSON types of request bodies ------------------------------------ */

/* -EINVAL with Go's "json: cannot unmarshal <t> into Go struct field
 * <Kind>.<path> of type <T>" when a known field of `obj` (an object of type
 * `t`) has the wrong JSON type, as kube-apiserver's decoding would fail. */
int kl_check_shape(const kl_type *t, const json_object *obj);

/* ---- errs: field errors for 422 Invalid ------------------------------------ */

/* Cause reasons, as metav1.CauseType. */
#define KL_REQUIRED      "FieldValueRequired"
#define KL_INVALID       "FieldValueInvalid"
#define KL_FORBIDDEN     "FieldValueForbidden"
#define KL_NOT_SUPPORTED "FieldValueNotSupported"
#define KL_DUPLICATE     "FieldValueDuplicate"
#define KL_TOO_LONG      "FieldValueTooLong"

typedef struct kl_errs kl_errs;

kl_errs *kl_errs_new(void);
void kl_errs_free(kl_errs *e);
/*
 * Adds a cause. `message` is the cause's message body as kube-apiserver
 * words it: "Required value", "Invalid value: \"Foo\": <detail>",
 * "Forbidden: <detail>", "Unsupported value: ...", "Duplicate value: ...",
 * "Too long: may not be more than N bytes".
 */
void kl_errs_add(kl_errs *e, const char *reason, const char *field, const char *fmt, ...)
    UTIL_ATTR_PRINTF(4, 5);
size_t kl_errs_count(const kl_errs *e);
/*
 * The 422 Status body: message "<Kind>[.<group>] \"<name>\" is invalid: <f>: <m>"
 * (several joined as "[e1, e2]"), details {name, group?, kind: Kind, causes}.
 * Caller owns the result.
 */
json_object *kl_errs_status(const kl_errs *e, const kl_type *t, const char *name);
/* The same, qualified by `what` instead of the Kind: store.Update's 422 for a
 * missing resourceVersion names the plural resource ("volumeattachments",
 * details.kind too), as its GroupKind is built from the GroupResource. */
json_object *kl_errs_status_as(const kl_errs *e, const char *group, const char *what,
                               const char *name);
/* Go's strconv.Quote of `s` (the %q of kube-apiserver's messages: names,
 * invalid values). Caller frees. */
char *kl_quote(const char *s);

/* ---- patch ------------------------------------------------------------------ */

/*
 * Each returns a new object the caller owns in *out and leaves `target`
 * untouched. -EINVAL: the patch itself is malformed (HTTP 400).
 * -ECANCELED: the patch is well-formed but cannot be applied, e.g. a failed
 * JSON patch "test" or a path that does not exist (HTTP 422).
 */
int kl_merge_patch(const json_object *target, const json_object *patch, json_object **out);
int kl_json_patch(const json_object *target, const json_object *patch, json_object **out);
/*
 * Strategic merge patch: merge patch, except the lists named in `keys`
 * merge by key (or as sets), and the directives "$patch" (delete, replace,
 * merge), "$retainKeys", "$deleteFromPrimitiveList/<f>" and
 * "$setElementOrder/<f>" are honoured and never stored.
 */
int kl_strategic_merge_patch(const json_object *target, const json_object *patch,
                             const kl_merge_key *keys, size_t n_keys, json_object **out);

/* ---- select: label and field selectors --------------------------------------- */

typedef struct kl_labelsel kl_labelsel;
typedef struct kl_fieldsel kl_fieldsel;

/*
 * Label selector syntax of apimachinery: k=v, k==v, k!=v, k in (a,b),
 * k notin (a,b), k, !k, k>N, k<N; comma = AND. "" selects everything.
 * -EINVAL with the message for a 400 on bad syntax.
 */
int kl_labelsel_parse(const char *s, kl_labelsel **out);
/* `labels` is metadata.labels (may be NULL). */
bool kl_labelsel_match(const kl_labelsel *sel, const json_object *labels);
void kl_labelsel_free(kl_labelsel *sel);

/* Field selector syntax: f=v, f==v, f!=v, comma = AND, backslash escapes. */
int kl_fieldsel_parse(const char *s, kl_fieldsel **out);
/*
 * Checks every field against what type `t` supports (metadata.name always;
 * metadata.namespace when namespaced; t->fields); -EINVAL with
 * kube-apiserver's 400 message otherwise ("field label not supported: f" for
 * pods, nodes, namespaces, secrets, core events and CRDs; "\"f\" is not a known
 * field selector: only \"metadata.name\", \"metadata.namespace\"" for the rest).
 */
int kl_fieldsel_check(const kl_fieldsel *sel, const kl_type *t);
/* Matches `obj`, reading each field by its dotted path (aliases such as
 * pods' spec.host and events' source resolved); a missing field reads as "";
 * booleans as "true"/"false". */
bool kl_fieldsel_match(const kl_fieldsel *sel, const json_object *obj);
/* The X of a "metadata.name=X" term, or NULL (used to authorize by name). */
const char *kl_fieldsel_name(const kl_fieldsel *sel);
void kl_fieldsel_free(kl_fieldsel *sel);

/* ---- validate ------------------------------------------------------------------ */

bool kl_is_dns1123_subdomain(const char *s);
bool kl_is_dns1123_label(const char *s);
/* A label or annotation key: optional "prefix/" (DNS subdomain) + name. */
bool kl_is_qualified_name(const char *s);
bool kl_is_label_value(const char *s);
/* apimachinery's reasons why `s` is not a qualified name (IsQualifiedName) or
 * not a label value (IsValidLabelValue), joined by "; " as label selectors
 * report them; NULL when valid. Caller frees. */
char *kl_qualified_name_msgs(const char *s);
char *kl_label_value_msgs(const char *s);

/* Fills server-side defaults of `t` into a new object (StorageClass
 * reclaimPolicy, CSIDriver attachRequired, PV volumeMode, ...). */
void kl_apply_defaults(const kl_type *t, json_object *obj);
/* Adds what kube-apiserver's decoding into Go structs adds (gozero.c): the
 * members that are not omitempty (Node spec and nodeInfo, Event eventTime,
 * CSINode topologyKeys, condition times, ...) and the Node allocatable
 * default. Run on every stored state, /status writes included. */
void kl_go_fill(const kl_type *t, json_object *obj);
/* The Lease, core Event and Secret rules (validate_core.c); `old` is NULL
 * on create. Called by kl_validate_create and kl_validate_update. */
void kl_validate_core(const kl_type *t, const json_object *old, const json_object *obj, kl_errs *e);
/* Validates a new object (metadata and the per-type rules the sidecars'
 * correctness depends on); adds causes to `errs`. */
void kl_validate_create(const kl_type *t, const json_object *obj, kl_errs *errs);
/* Validates an update of `old` to `obj` (immutable fields, the PVC spec, the
 * VolumeAttachment error message limit, finalizers during deletion, ...).
 * `status_only` is true for writes through the /status subresource. */
void kl_validate_update(const kl_type *t, const json_object *old, const json_object *obj,
                        bool status_only, kl_errs *errs);

/* ---- auth ---------------------------------------------------------------------- */

typedef struct kl_user {
    char *name;
    char **groups; /* includes "system:authenticated" */
    size_t n_groups;
} kl_user;

typedef struct kl_tokens kl_tokens;

/*
 * Loads a kube-apiserver --token-auth-file: CSV lines
 * `token,user,uid[,"group1,group2"]`; blank lines and lines starting with
 * '#' are skipped. A user named system:serviceaccount:<ns>:<sa> also gets
 * the service-account groups. -EINVAL naming the line on a bad file.
 */
int kl_tokens_load(const char *path, kl_tokens **out);
/* NULL when the token is unknown. */
const kl_user *kl_tokens_lookup(const kl_tokens *t, const char *token);
void kl_tokens_free(kl_tokens *t);

/* Service-account tokens answered to TokenRequests: HMAC-SHA256-signed
 * JWTs under a key of KL_TOKEN_KEY_LEN random bytes. */
#define KL_TOKEN_KEY_LEN 32
/* The token for service account ns/name (uid) with the `audiences` array
 * (may be NULL), issued at `iat`, expiring at `exp` (Unix seconds). */
char *kl_sa_token_mint(const unsigned char key[KL_TOKEN_KEY_LEN], const char *ns, const char *name,
                       const char *uid, const json_object *audiences, int64_t iat, int64_t exp);
/* 0 and the service account's namespace, name and uid (caller frees) for a
 * token this key signed that has not expired at `now`; -EINVAL malformed,
 * -EACCES bad signature, -EKEYEXPIRED expired. */
int kl_sa_token_verify(const unsigned char key[KL_TOKEN_KEY_LEN], const char *token, int64_t now,
                       char **ns, char **name, char **uid);

/* What a request asks for, as kube-apiserver's RequestInfo. */
typedef struct kl_attrs {
    bool resource_request; /* false: a non-resource path such as /version */
    const char *verb;      /* get list watch create update patch delete deletecollection;
                              lower-case HTTP method for non-resource paths */
    const char *group;     /* "" for core */
    const char *resource;
    const char *subresource; /* NULL or "status" ... */
    const char *ns;          /* NULL or "" for cluster scope */
    const char *name;        /* NULL or "" when the request names no object */
    const char *path;        /* the URL path, for non-resource requests */
} kl_attrs;

/* Read access to the stored RBAC objects, supplied by the store. */
typedef struct kl_rbac_view {
    void *ud;
    /* Calls fn for every object of `resource` ("roles", "rolebindings",
     * "clusterroles", "clusterrolebindings") in namespace `ns` (NULL for the
     * cluster-scoped ones); fn returns true to stop early. */
    void (*each)(void *ud, const char *resource, const char *ns,
                 bool (*fn)(void *fud, const json_object *obj), void *fud);
    /* One object or NULL. */
    const json_object *(*get)(void *ud, const char *resource, const char *ns, const char *name);
} kl_rbac_view;

/*
 * True when `u` may do `a` under the RBAC objects in `v`: group
 * system:masters always; discovery paths for every authenticated user;
 * otherwise a rule of a (Cluster)Role bound to the user, one of its groups or
 * its service account matches (verbs, apiGroups, resources with
 * subresources, resourceNames, nonResourceURLs) as kube-apiserver matches.
 */
bool kl_rbac_allows(const kl_rbac_view *v, const kl_user *u, const kl_attrs *a);
/* kube-apiserver's 403 message for a denied request (caller frees), e.g.
 * `leases.coordination.k8s.io "lock" is forbidden: User "x" cannot get resource
 * "leases" in API group "coordination.k8s.io" in the namespace "ns"`. */
char *kl_forbidden_message(const kl_user *u, const kl_attrs *a);

/* ---- store ---------------------------------------------------------------------- */

/*
 * A stored object: immutable once stored, shared by reference between the
 * store, list snapshots and watch history. It is kept as its serialized JSON
 * (what GET, LIST and WATCH send) plus the few fields lookups need; a parsed
 * tree costs ~10x the text in json-c, so only the low-count types that are
 * read on every request (RBAC, classes, namespaces) keep one.
 */
typedef struct kl_obj {
    char *json; /* the serialized object */
    size_t len;
    uint64_t rv;
    char *ns;            /* metadata.namespace, NULL for cluster-scoped */
    char *name;          /* metadata.name */
    json_object *labels; /* metadata.labels, NULL when none */
    json_object *obj;    /* the parsed object for the kept types, else NULL */
    int refs;            /* atomic */
} kl_obj;

/* The object as a tree the caller owns and puts: a copy of the kept tree
 * for the kept types, a parse of the text otherwise. Never the kept tree
 * itself: json-c's reference counts are not atomic, and many request
 * threads read the same StorageClass or CSIDriver at once (a borrowed
 * o->obj, held through `o`, is the way to read a kept tree in place). */
json_object *kl_obj_tree(const kl_obj *o);

kl_obj *kl_obj_ref(kl_obj *o);
void kl_obj_unref(kl_obj *o);
/* A new object (unref it) with o's content under resourceVersion `rv`: the
 * last state a watch shows for an object that left its selection. */
kl_obj *kl_obj_restamp(const kl_type *t, const kl_obj *o, uint64_t rv);

typedef struct kl_store kl_store;

/* `history` events are kept for watches to resume from. */
kl_store *kl_store_new(size_t history);
void kl_store_free(kl_store *s);
/* The newest resourceVersion handed out. */
uint64_t kl_store_rv(kl_store *s);

/* Gives type `t` (a type a CRD serves, alive until the store is freed) a
 * table of its own. */
void kl_store_add_type(kl_store *s, const kl_type *t);

/* A referenced object (kl_obj_unref it) or NULL. */
kl_obj *kl_store_get(kl_store *s, const kl_type *t, const char *ns, const char *name);

typedef bool (*kl_filter_fn)(void *ud, const kl_obj *o);
/*
 * A consistent snapshot of the objects of `t` (in namespace `ns`, or all for
 * NULL) in key order, starting after `after` (a key from an earlier page's
 * *next, or NULL) and keeping those `filter` accepts (NULL: all), at most
 * `limit` (0: no limit). *items is an array of references (free with
 * kl_objs_free); *next is the key to continue from, or NULL at the end.
 */
void kl_store_list(kl_store *s, const kl_type *t, const char *ns, const char *after, size_t limit,
                   kl_filter_fn filter, void *ud, kl_obj ***items, size_t *n, uint64_t *rv,
                   char **next);
void kl_objs_free(kl_obj **items, size_t n);
/* Calls fn on every object of `t` in `ns` under the read lock (RBAC view). */
void kl_store_each(kl_store *s, const kl_type *t, const char *ns,
                   bool (*fn)(void *ud, const kl_obj *o), void *ud);

/* What a mutation decided, under the store's write lock. */
typedef enum {
    KL_MUT_ERROR,  /* answer `code` with `status` */
    KL_MUT_NOOP,   /* nothing changes; answer with the current object */
    KL_MUT_PUT,    /* store `obj` (create or replace) */
    KL_MUT_DELETE, /* remove the object */
} kl_mut_kind;

typedef struct kl_mut {
    kl_mut_kind kind;
    json_object *obj;    /* KL_MUT_PUT: the new state, handed to the store */
    int code;            /* KL_MUT_ERROR: HTTP status */
    json_object *status; /* KL_MUT_ERROR: the Status body, handed to the caller */
} kl_mut;

/*
 * Read-modify-write of one object, atomic against every other write: `fn`
 * sees the current object (NULL when absent; its `obj` tree is always
 * filled here) and fills a kl_mut. The store
 * sets metadata.resourceVersion on what it stores. On success *result is a
 * reference to the new state (PUT), the last state with the deletion's
 * resourceVersion (DELETE), or the current object (NOOP); on KL_MUT_ERROR,
 * *code and *status are set and *result is NULL. Returns the kind.
 */
typedef void (*kl_mutate_fn)(void *ud, const kl_obj *cur, kl_mut *m);
kl_mut_kind kl_store_mutate(kl_store *s, const kl_type *t, const char *ns, const char *name,
                            kl_mutate_fn fn, void *ud, kl_obj **result, int *code,
                            json_object **status);

/* Saves every object to `path` (temp file, fsync, rename) / loads them back
 * (new resourceVersions; an absent file loads nothing). */
int kl_store_save(kl_store *s, const char *path);
int kl_store_load(kl_store *s, const char *path, size_t *n_loaded);

/* ---- watch ---------------------------------------------------------------------- */

enum { KL_ADDED = 1, KL_MODIFIED, KL_DELETED };

typedef struct kl_event {
    int type;
    const kl_type *t;
    kl_obj *obj; /* new state; last state for DELETED */
    kl_obj *old; /* previous state for MODIFIED and DELETED, else NULL */
    uint64_t rv;
} kl_event;

typedef struct kl_watch kl_watch;

/*
 * Follows the changes of type `t` after resourceVersion `from`. -ERANGE when
 * `from` is older than the kept history (the client gets 410 Expired).
 * `notify` (may be NULL) is called from a writer's thread, without store
 * locks held, whenever new events may be available.
 */
int kl_store_watch(kl_store *s, const kl_type *t, uint64_t from, void (*notify)(void *ud), void *ud,
                   kl_watch **out);
/* Copies up to `max` pending events (references: kl_event_clear each) and
 * returns how many; -ERANGE if history moved past this watch. */
int kl_watch_next(kl_watch *w, kl_event *out, size_t max);
void kl_event_clear(kl_event *e);
uint64_t kl_watch_cursor(const kl_watch *w);
void kl_watch_free(kl_watch *w);
/* Drops all kept history (fault injection): watches behind get -ERANGE. */
void kl_store_compact(kl_store *s);

/* ---- api: requests to responses (rest.c), streamed watches ---------------------- */

typedef struct kl_api kl_api;

typedef struct kl_api_opts {
    kl_tokens *tokens;               /* NULL: no authentication (every request is admin) */
    bool rbac;                       /* authorize with the stored RBAC objects */
    util_duration bookmark_every;    /* 0: 60 s */
    util_duration watch_close_after; /* fault: end every watch after this long (0: never) */
    const char *version_minor;       /* /version minor, "32" by default */
} kl_api_opts;

kl_api *kl_api_new(kl_store *store, const kl_api_opts *opts);
void kl_api_free(kl_api *a);
kl_store *kl_api_store(kl_api *a);

typedef struct kl_request {
    const char *method;
    const char *path; /* without the query string */
    /* Query parameter lookup (already URL-decoded); NULL when absent. */
    const char *(*query)(void *ud, const char *key);
    void *query_ud;
    const char *content_type;
    const char *accept;
    const char *authorization; /* the Authorization header or NULL */
    const char *user_agent;
    const char *body;
    size_t body_len;
    bool trusted; /* kube-lite's own requests: no authentication */
} kl_request;

typedef struct kl_stream kl_stream;

typedef struct kl_response {
    int code;
    char *body; /* malloc'ed; NULL with a stream */
    size_t len;
    const char *content_type;
    kl_stream *stream;       /* a watch: stream its output instead of body */
    const char *retry_after; /* Retry-After header value or NULL */
    /* for metrics and logs */
    const char *verb;
    const char *resource;
} kl_response;

/* Answers one request (never NULL fields on return: body or stream is set). */
void kl_api_handle(kl_api *a, const kl_request *req, kl_response *resp);

/*
 * Produces the next piece of a watch stream into *buf (malloc'ed, caller
 * frees). Returns 1 with data, 0 when nothing is ready yet (call again after
 * the wake-up), -1 at the end of the stream.
 */
int kl_stream_next(kl_stream *st, char **buf, size_t *len);
/* Registers the wake-up: called from any thread when the stream may have
 * more to say (new events, a bookmark or the timeout being due). */
void kl_stream_set_wakeup(kl_stream *st, void (*fn)(void *ud), void *ud);
/* When the stream next wants to be asked even without events (bookmark or
 * timeout), on the monotonic clock. */
util_duration kl_stream_deadline(const kl_stream *st);
void kl_stream_free(kl_stream *st);

/* Creates an object from JSON text through the API, as the server itself
 * (no authentication); 0 or -EIO with the answer in util_err_last(). */
int kl_api_create_json(kl_api *a, const char *path, const char *json);
/*
 * One request through the API as the server itself (no authentication):
 * returns the HTTP code; *answer (may be NULL) gets the parsed body.
 */
int kl_api_call(kl_api *a, const char *method, const char *path, const char *content_type,
                const char *body, json_object **answer);
/* Creates the namespaces every cluster starts with (default, kube-system, ...). */
void kl_api_bootstrap(kl_api *a);

/* Runtime fault knob (admin endpoint): end every watch after `d` (0: never). */
void kl_api_set_watch_close_after(kl_api *a, util_duration d);

/* ---- controllers: stand-ins for kube-controller-manager, scheduler, kubelet ---------- */

typedef struct kl_controllers kl_controllers;

typedef struct kl_controllers_opts {
    bool binder;     /* PV controller: provisioner annotation, binding, Released */
    bool attach;     /* selected-node for pods' WaitForFirstConsumer claims; VolumeAttachments */
    bool namespaces; /* empties and removes namespaces being deleted */
} kl_controllers_opts;

int kl_controllers_start(kl_api *api, const kl_controllers_opts *opts, kl_controllers **out);
void kl_controllers_stop(kl_controllers *c);

/* ---- server: HTTP(S) over libmicrohttpd (server.c) ------------------------------------ */

typedef struct kl_faults {
    double error_rate;     /* fraction of requests answered with error_code */
    int error_code;        /* 429 (with Retry-After), 500 or 503 */
    util_duration latency; /* added to every request */
} kl_faults;

typedef struct kl_server_opts {
    const char *host;         /* "127.0.0.1" */
    int port;                 /* 0: pick a free one */
    const char *tls_cert_pem; /* PEM text (not paths); both or neither */
    const char *tls_key_pem;
    int threads; /* 0: 4 */
    kl_faults faults;
} kl_server_opts;

typedef struct kl_server kl_server;

int kl_server_start(kl_api *api, const kl_server_opts *opts, kl_server **out);
int kl_server_port(const kl_server *s);
/* Ends every watch, stops serving, frees. */
void kl_server_stop(kl_server *s);

#endif
