/*
 * CustomResourceDefinitions: apiextensions.k8s.io/v1 served generically.
 *
 * The CRD objects themselves are a built-in type (types.c) stored like any
 * other. This file is what kube-apiserver's apiextensions controllers and
 * its custom resource handler add on top:
 *
 *   - the registry of served custom types: one kl_type per CRD, for its
 *     storage version, created when the CRD appears and taken out of the
 *     lookups (its objects removed) when the CRD is deleted. A type is never
 *     freed before the registry, because watches and requests in flight hold
 *     pointers to it; a re-created CRD gets a new type.
 *   - reconciliation after every CRD write (level-triggered, as the
 *     controllers are): serve what is stored, set status.acceptedNames and
 *     the NamesAccepted and Established conditions (and, for protected
 *     groups, the API approval controller's
 *     KubernetesAPIApprovalPolicyConformant), follow schema and printer
 *     column changes, stop serving what is gone.
 *   - the status a create starts with (empty accepted names, no
 *     conditions, the storage version stored), as the CRD strategy sets it.
 *   - the CRD rules kube-apiserver 1.20 checks that matter here (names,
 *     scope, one storage version, a schema per version, the
 *     api-approved.kubernetes.io annotation of protected groups).
 *   - the custom objects' schema handling (crd_schema.c does the walking).
 *
 * Everything else a custom object goes through (resourceVersions, watches,
 * selectors, finalizers, the status subresource, merge and JSON patches,
 * 415 for strategic merge, generation) is rest.c's, driven by the type's
 * flags (custom, has_status). Not done: several served versions with
 * conversion, scale subresources, categories, CEL rules.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define CRD_GROUP "apiextensions.k8s.io"

struct crd_type {
    kl_type t; /* first: a kl_type pointer is a crd_type pointer */
    char *uid; /* the CRD's uid: a CRD deleted and created again is a new type */
    char *name;
    char *group, *version, *resource, *kind, *list_kind, *singular, *shorts[2];
    char *qualified, *api_version;
    json_object *version_def; /* the served version's entry (atomic pointer) */
    json_object *retired;     /* earlier version entries, kept for readers */
    bool served;
    struct crd_type *next;
};

struct kl_crds {
    pthread_mutex_t lock;
    kl_store *store;
    const kl_type *crd_t;
    struct crd_type *types; /* newest first; served and retired */
    uint64_t gen;           /* atomic */
    json_object *age_cols;  /* the columns of a version that declares none */
};

static struct crd_type *ct_of(const kl_type *t)
{
    /* kl_type is the first member; the registry owns every crd_type and
     * changes it under its lock, so the const of a request's view goes. */
    return (struct crd_type *)(const struct crd_type *)t;
}

bool kl_type_is_crd(const kl_type *t)
{
    size_t n = 0;
    const kl_type *b = kl_types(&n);
    uintptr_t p = (uintptr_t)t, lo = (uintptr_t)b;
    return t && !(p >= lo && p < lo + n * sizeof(*t));
}

const char *kl_crd_type_qualified(const kl_type *t)
{
    return ct_of(t)->qualified;
}

const char *kl_crd_type_api_version(const kl_type *t)
{
    return ct_of(t)->api_version;
}

static json_object *version_def(const kl_type *t)
{
    return __atomic_load_n(&ct_of(t)->version_def, __ATOMIC_ACQUIRE);
}

static const json_object *schema_of(const kl_type *t)
{
    return kobj_path(version_def(t), "schema.openAPIV3Schema");
}

/* ---- registry -------------------------------------------------------------- */

kl_crds *kl_crds_new(kl_store *s)
{
    kl_crds *c = util_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->lock, NULL);
    c->store = s;
    c->crd_t = kl_type_find(CRD_GROUP, "v1", "customresourcedefinitions");
    c->age_cols = json_tokener_parse(
        "[{\"name\":\"Age\",\"type\":\"date\",\"jsonPath\":\".metadata.creationTimestamp\","
        "\"description\":\"CreationTimestamp is a timestamp representing the server time when "
        "this object was created. It is not guaranteed to be set in happens-before order across "
        "separate operations. Clients may not set this value. It is represented in RFC3339 form "
        "and is in UTC.\\n\\nPopulated by the system. Read-only. Null for lists. More info: "
        "https://git.k8s.io/community/contributors/devel/sig-architecture/"
        "api-conventions.md#metadata\"}]");
    return c;
}

static void ct_free(struct crd_type *ct)
{
    free(ct->uid);
    free(ct->name);
    free(ct->group);
    free(ct->version);
    free(ct->resource);
    free(ct->kind);
    free(ct->list_kind);
    free(ct->singular);
    free(ct->shorts[0]);
    free(ct->shorts[1]);
    free(ct->qualified);
    free(ct->api_version);
    json_object_put(ct->version_def);
    json_object_put(ct->retired);
    free(ct);
}

void kl_crds_free(kl_crds *c)
{
    if (!c)
        return;
    while (c->types) {
        struct crd_type *n = c->types->next;
        ct_free(c->types);
        c->types = n;
    }
    json_object_put(c->age_cols);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

const kl_type *kl_crds_find(kl_crds *c, const char *group, const char *version,
                            const char *resource)
{
    const kl_type *found = NULL;
    pthread_mutex_lock(&c->lock);
    for (struct crd_type *ct = c->types; ct && !found; ct = ct->next)
        if (ct->served && strcmp(ct->group, group) == 0 && strcmp(ct->version, version) == 0 &&
            strcmp(ct->resource, resource) == 0)
            found = &ct->t;
    pthread_mutex_unlock(&c->lock);
    return found;
}

const kl_type **kl_crds_list(kl_crds *c, size_t *n, uint64_t *gen)
{
    pthread_mutex_lock(&c->lock);
    size_t count = 0;
    for (struct crd_type *ct = c->types; ct; ct = ct->next)
        count += ct->served;
    const kl_type **out = util_calloc(count ? count : 1, sizeof(const kl_type *));
    /* Oldest first, so discovery lists them in creation order. */
    size_t i = count;
    for (struct crd_type *ct = c->types; ct; ct = ct->next)
        if (ct->served)
            out[--i] = &ct->t;
    *n = count;
    *gen = c->gen;
    pthread_mutex_unlock(&c->lock);
    return out;
}

uint64_t kl_crds_generation(kl_crds *c)
{
    return __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE);
}

json_object *kl_crd_columns(const kl_type *t)
{
    json_object *cols = kobj_arr(version_def(t), "additionalPrinterColumns");
    if (kobj_len(cols) > 0)
        return cols;
    return kobj_arr(kobj_obj(version_def(t), "x-kube-lite"), "defaultColumns");
}

/* ---- what a CRD asks for ------------------------------------------------------- */

/* The version a CRD's objects are served and stored in: the storage one. */
static json_object *storage_version(const json_object *crd)
{
    json_object *vs = kobj_arr(kobj_obj(crd, "spec"), "versions");
    for (size_t i = 0; i < kobj_len(vs); i++)
        if (kobj_bool(kobj_at(vs, i), "storage", false))
            return kobj_at(vs, i);
    return kobj_at(vs, 0);
}

static char *lower(const char *s)
{
    char *l = util_strdup(s ? s : "");
    for (char *p = l; *p; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    return l;
}

static char *dup_or(const char *s, const char *dflt)
{
    return util_strdup(s && *s ? s : dflt);
}

/* True when `ct` serves what `crd` asks for (same names, scope, version). */
static bool same_identity(const struct crd_type *ct, const json_object *crd)
{
    json_object *spec = kobj_obj(crd, "spec"), *names = kobj_obj(spec, "names");
    const char *uid = kobj_uid(crd), *g = kobj_str(spec, "group");
    const char *v = kobj_str(storage_version(crd), "name");
    const char *p = kobj_str(names, "plural"), *k = kobj_str(names, "kind");
    bool ns = strcmp(kobj_str(spec, "scope") ? kobj_str(spec, "scope") : "", "Namespaced") == 0;
    return uid && strcmp(ct->uid, uid) == 0 && g && strcmp(ct->group, g) == 0 && v &&
           strcmp(ct->version, v) == 0 && p && strcmp(ct->resource, p) == 0 && k &&
           strcmp(ct->kind, k) == 0 && ct->t.namespaced == ns;
}

/* A copy of the version entry with the logical defaults readers need. */
static json_object *version_copy(kl_crds *c, const json_object *crd)
{
    json_object *v = NULL;
    if (json_object_deep_copy(storage_version(crd), &v, NULL) != 0 || !v)
        v = json_object_new_object();
    json_object *extra = json_object_new_object();
    json_object_object_add(extra, "defaultColumns", json_object_get(c->age_cols));
    json_object_object_add(v, "x-kube-lite", extra);
    return v;
}

static struct crd_type *serve(kl_crds *c, const json_object *crd)
{
    json_object *spec = kobj_obj(crd, "spec"), *names = kobj_obj(spec, "names");
    struct crd_type *ct = util_calloc(1, sizeof(*ct));
    ct->uid = dup_or(kobj_uid(crd), "");
    ct->name = dup_or(kobj_name(crd), "");
    ct->group = dup_or(kobj_str(spec, "group"), "");
    ct->version = dup_or(kobj_str(storage_version(crd), "name"), "v1");
    ct->resource = dup_or(kobj_str(names, "plural"), "");
    ct->kind = dup_or(kobj_str(names, "kind"), "");
    ct->list_kind = kobj_str(names, "listKind") ? util_strdup(kobj_str(names, "listKind"))
                                                : util_asprintf("%sList", ct->kind);
    ct->singular =
        kobj_str(names, "singular") ? util_strdup(kobj_str(names, "singular")) : lower(ct->kind);
    json_object *shorts = kobj_arr(names, "shortNames");
    for (size_t i = 0; i < 2 && i < kobj_len(shorts); i++)
        ct->shorts[i] = dup_or(kobj_str_at(shorts, i), "");
    ct->qualified = util_asprintf("%s.%s", ct->resource, ct->group);
    ct->api_version = util_asprintf("%s/%s", ct->group, ct->version);
    ct->version_def = version_copy(c, crd);
    ct->retired = json_object_new_array();
    ct->t = (kl_type){.group = ct->group,
                      .version = ct->version,
                      .resource = ct->resource,
                      .kind = ct->kind,
                      .list_kind = ct->list_kind,
                      .singular = ct->singular,
                      .short_names = {ct->shorts[0], ct->shorts[0] ? ct->shorts[1] : NULL, NULL},
                      .namespaced = strcmp(kobj_str(spec, "scope") ? kobj_str(spec, "scope") : "",
                                           "Namespaced") == 0,
                      .has_status = kobj_path(ct->version_def, "subresources.status") != NULL,
                      .custom = true};
    ct->served = true;
    kl_store_add_type(c->store, &ct->t);
    ct->next = c->types;
    c->types = ct;
    return ct;
}

/* A CRD that changed its schema or columns: readers move to the new entry
 * (the old one stays alive for those still reading it). */
static bool follow(kl_crds *c, struct crd_type *ct, const json_object *crd)
{
    json_object *nv = version_copy(c, crd);
    if (json_object_equal(nv, ct->version_def)) {
        json_object_put(nv);
        return false;
    }
    json_object_array_add(ct->retired, ct->version_def);
    ct->t.has_status = kobj_path(nv, "subresources.status") != NULL;
    __atomic_store_n(&ct->version_def, nv, __ATOMIC_RELEASE);
    return true;
}

static void remove_all(void *ud, const kl_obj *cur, kl_mut *m)
{
    (void)ud;
    (void)cur;
    m->kind = KL_MUT_DELETE;
}

/* The finalizing controller's work, at once: every object of the type goes
 * (their own finalizers are not waited for). */
static void remove_objects(kl_crds *c, const kl_type *t)
{
    kl_obj **items = NULL;
    size_t n = 0;
    uint64_t rv = 0;
    char *next = NULL;
    kl_store_list(c->store, t, NULL, NULL, 0, NULL, NULL, &items, &n, &rv, &next);
    for (size_t i = 0; i < n; i++) {
        kl_obj *res = NULL;
        int code = 0;
        json_object *st = NULL;
        kl_store_mutate(c->store, t, items[i]->ns, items[i]->name, remove_all, NULL, &res, &code,
                        &st);
        kl_obj_unref(res);
        json_object_put(st);
    }
    kl_objs_free(items, n);
    free(next);
}

/* ---- status: what the naming, establishing and API approval controllers write ---------- */

static bool has_suffix(const char *s, const char *suffix)
{
    size_t ls = strlen(s), lx = strlen(suffix);
    return ls >= lx && strcmp(s + ls - lx, suffix) == 0;
}

/* k8s.io, kubernetes.io and their subdomains (IsProtectedCommunityGroup). */
static bool protected_group(const char *g)
{
    return strcmp(g, "k8s.io") == 0 || strcmp(g, "kubernetes.io") == 0 ||
           has_suffix(g, ".k8s.io") || has_suffix(g, ".kubernetes.io");
}

#define APPROVAL_PR "see https://github.com/kubernetes/enhancements/pull/1111"

enum approval { APPROVED, BYPASSED, INVALID, MISSING };

static enum approval approval_state(const json_object *crd)
{
    const char *a = kobj_annotation(crd, "api-approved.kubernetes.io");
    if (!a || !*a)
        return MISSING;
    if (strncmp(a, "unapproved", 10) == 0)
        return BYPASSED;
    /* url.ParseRequestURI with a scheme and a host. */
    const char *sep = strstr(a, "://");
    if (sep && sep > a && sep[3] && sep[3] != '/' && !strchr(a, ' '))
        return APPROVED;
    return INVALID;
}

/* The KubernetesAPIApprovalPolicyConformant condition kube-apiserver's API
 * approval controller keeps on CRDs of protected groups (none on others):
 * status, reason and message for the annotation as it is now. */
struct approval_cond {
    const char *status, *reason;
    char *message;
};

static bool approval_condition(const json_object *crd, struct approval_cond *out)
{
    const char *g = kobj_str(kobj_obj(crd, "spec"), "group");
    if (!g || !protected_group(g))
        return false;
    const char *a = kobj_annotation(crd, "api-approved.kubernetes.io");
    char *q = NULL;
    switch (approval_state(crd)) {
    case APPROVED:
        *out = (struct approval_cond){"True", "ApprovedAnnotation",
                                      util_asprintf("approved in %s", a)};
        break;
    case BYPASSED:
        q = kl_quote(a);
        *out = (struct approval_cond){"False", "UnapprovedAnnotation",
                                      util_asprintf("not approved: %s", q)};
        break;
    case INVALID:
        *out = (struct approval_cond){
            "False", "InvalidAnnotation",
            util_strdup("protected groups must have approval annotation "
                        "\"api-approved.kubernetes.io\" with either a URL or a reason starting "
                        "with \"unapproved\", " APPROVAL_PR)};
        break;
    case MISSING:
        *out = (struct approval_cond){"False", "MissingAnnotation",
                                      util_strdup("protected groups must have approval annotation "
                                                  "\"api-approved.kubernetes.io\", " APPROVAL_PR)};
        break;
    }
    free(q);
    return true;
}

static json_object *find_condition(const json_object *crd, const char *type)
{
    json_object *conds = kobj_arr(kobj_obj(crd, "status"), "conditions");
    for (size_t i = 0; i < kobj_len(conds); i++) {
        const char *t = kobj_str(kobj_at(conds, i), "type");
        if (t && strcmp(t, type) == 0)
            return kobj_at(conds, i);
    }
    return NULL;
}

static bool str_is(const json_object *o, const char *key, const char *want)
{
    const char *v = kobj_str(o, key);
    return v && strcmp(v, want) == 0;
}

/* SetCRDCondition's rule: an existing condition keeps its place and its
 * lastTransitionTime unless its status changes; a new one goes last. */
static void set_condition(json_object *status, const char *type, const char *st, const char *reason,
                          const char *message, const char *now)
{
    json_object *conds = kobj_arr(status, "conditions");
    if (!conds) {
        conds = json_object_new_array();
        json_object_object_add(status, "conditions", conds);
    }
    json_object *cnd = NULL;
    for (size_t i = 0; i < kobj_len(conds) && !cnd; i++)
        if (str_is(kobj_at(conds, i), "type", type))
            cnd = kobj_at(conds, i);
    if (!cnd) {
        cnd = json_object_new_object();
        json_object_object_add(cnd, "type", json_object_new_string(type));
        json_object_array_add(conds, cnd);
    }
    if (!str_is(cnd, "status", st) || !kobj_str(cnd, "lastTransitionTime"))
        json_object_object_add(cnd, "lastTransitionTime", json_object_new_string(now));
    json_object_object_add(cnd, "status", json_object_new_string(st));
    json_object_object_add(cnd, "reason", json_object_new_string(reason));
    json_object_object_add(cnd, "message", json_object_new_string(message));
}

static void set_established(void *ud, const kl_obj *cur, kl_mut *m)
{
    (void)ud;
    if (!cur) {
        m->kind = KL_MUT_NOOP;
        return;
    }
    json_object *obj = NULL;
    json_object_deep_copy(cur->obj, &obj, NULL);
    json_object *spec = kobj_obj(obj, "spec");
    json_object *status = kobj_ensure_obj(obj, "status");
    json_object *names = NULL;
    json_object_deep_copy(kobj_obj(spec, "names"), &names, NULL);
    json_object_object_add(status, "acceptedNames", names ? names : json_object_new_object());
    char now[UTIL_TIME_RFC3339_LEN];
    util_time_rfc3339(time(NULL), now, sizeof(now));
    /* In the order kube-apiserver's controllers usually get there: the
     * approval one reacts to the create first, then naming, establishing. */
    struct approval_cond ac;
    if (approval_condition(obj, &ac)) {
        set_condition(status, "KubernetesAPIApprovalPolicyConformant", ac.status, ac.reason,
                      ac.message, now);
        free(ac.message);
    }
    set_condition(status, "NamesAccepted", "True", "NoConflicts", "no conflicts found", now);
    set_condition(status, "Established", "True", "InitialNamesAccepted",
                  "the initial names have been accepted", now);
    if (!kobj_arr(status, "storedVersions")) {
        json_object *sv = json_object_new_array();
        json_object_array_add(
            sv, json_object_new_string(kobj_str(storage_version(obj), "name") ?: "v1"));
        json_object_object_add(status, "storedVersions", sv);
    }
    m->kind = KL_MUT_PUT;
    m->obj = obj;
}

/* True when the status is what set_established would write. */
static bool established(const json_object *crd)
{
    json_object *est = find_condition(crd, "Established");
    if (!est || !str_is(est, "status", "True"))
        return false;
    struct approval_cond ac;
    if (approval_condition(crd, &ac)) {
        json_object *cur = find_condition(crd, "KubernetesAPIApprovalPolicyConformant");
        bool same = cur && str_is(cur, "status", ac.status) && str_is(cur, "reason", ac.reason) &&
                    str_is(cur, "message", ac.message);
        free(ac.message);
        if (!same)
            return false;
    }
    return json_object_equal(kobj_obj(kobj_obj(crd, "status"), "acceptedNames"),
                             kobj_obj(kobj_obj(crd, "spec"), "names"));
}

/* ---- reconcile ------------------------------------------------------------------------ */

void kl_crds_reconcile(kl_crds *c)
{
    pthread_mutex_lock(&c->lock);
    kl_obj **items = NULL;
    size_t n = 0;
    uint64_t rv = 0;
    char *next = NULL;
    kl_store_list(c->store, c->crd_t, NULL, NULL, 0, NULL, NULL, &items, &n, &rv, &next);
    json_object **crds = util_calloc(n ? n : 1, sizeof(json_object *));
    for (size_t i = 0; i < n; i++)
        crds[i] = kl_obj_tree(items[i]);
    bool changed = false;
    const kl_type *gone[64];
    size_t n_gone = 0;

    /* Served types whose CRD is gone, being deleted, or asks for another shape. */
    for (struct crd_type *ct = c->types; ct; ct = ct->next) {
        if (!ct->served)
            continue;
        bool keep = false;
        for (size_t i = 0; i < n && !keep; i++)
            keep = !kobj_deleting(crds[i]) && same_identity(ct, crds[i]);
        if (keep)
            continue;
        ct->served = false;
        changed = true;
        if (n_gone < sizeof(gone) / sizeof(gone[0]))
            gone[n_gone++] = &ct->t;
    }
    for (size_t i = 0; i < n; i++) {
        if (kobj_deleting(crds[i]))
            continue;
        struct crd_type *ct = c->types;
        while (ct && !(ct->served && same_identity(ct, crds[i])))
            ct = ct->next;
        if (!ct) {
            serve(c, crds[i]);
            changed = true;
        } else if (follow(c, ct, crds[i])) {
            changed = true;
        }
        if (!established(crds[i])) {
            kl_obj *res = NULL;
            int code = 0;
            json_object *st = NULL;
            kl_store_mutate(c->store, c->crd_t, NULL, kobj_name(crds[i]), set_established, NULL,
                            &res, &code, &st);
            kl_obj_unref(res);
            json_object_put(st);
        }
    }
    if (changed)
        __atomic_add_fetch(&c->gen, 1, __ATOMIC_ACQ_REL);
    for (size_t i = 0; i < n_gone; i++)
        remove_objects(c, gone[i]);
    pthread_mutex_unlock(&c->lock);
    for (size_t i = 0; i < n; i++)
        json_object_put(crds[i]);
    free(crds);
    kl_objs_free(items, n);
    free(next);
}

/* ---- custom objects ------------------------------------------------------------------ */

void kl_crd_admit(const kl_type *t, json_object *obj)
{
    const json_object *schema = schema_of(t);
    if (!schema)
        return;
    kl_schema_prune(schema, obj, true);
    kl_schema_default(schema, obj);
}

void kl_crd_validate(const kl_type *t, const json_object *obj, kl_errs *e)
{
    kl_schema_validate(schema_of(t), obj, "", e);
}

/* ---- the CRD object ------------------------------------------------------------------- */

/* The status a write leaves (the strategy's PrepareForCreate and
 * PrepareForUpdate): a new CRD starts with empty accepted names, no
 * conditions and its storage version stored; an update keeps the status and
 * adds a new storage version to storedVersions. */
static void definition_status(json_object *crd)
{
    const char *storage = NULL;
    json_object *vs = kobj_arr(kobj_obj(crd, "spec"), "versions");
    for (size_t i = 0; i < kobj_len(vs) && !storage; i++)
        if (kobj_bool(kobj_at(vs, i), "storage", false))
            storage = kobj_str(kobj_at(vs, i), "name");
    json_object *status = kobj_obj(crd, "status");
    if (!status) {
        status = json_object_new_object();
        json_object *names = json_object_new_object();
        json_object_object_add(names, "plural", json_object_new_string(""));
        json_object_object_add(names, "kind", json_object_new_string(""));
        json_object_object_add(status, "conditions", NULL);
        json_object_object_add(status, "acceptedNames", names);
        json_object_object_add(status, "storedVersions", NULL);
        json_object_object_add(crd, "status", status);
    }
    if (!storage)
        return;
    json_object *stored = kobj_arr(status, "storedVersions");
    for (size_t i = 0; i < kobj_len(stored); i++)
        if (kobj_str_at(stored, i) && strcmp(kobj_str_at(stored, i), storage) == 0)
            return;
    if (!stored) {
        stored = json_object_new_array();
        json_object_object_add(status, "storedVersions", stored);
    }
    json_object_array_add(stored, json_object_new_string(storage));
}

void kl_crd_definition_defaults(json_object *crd)
{
    definition_status(crd);
    json_object *spec = kobj_obj(crd, "spec");
    if (!spec)
        return;
    json_object *names = kobj_obj(spec, "names");
    const char *kind = kobj_str(names, "kind");
    if (names && kind && !kobj_str(names, "singular")) {
        char *l = lower(kind);
        kobj_set_str(names, "singular", l);
        free(l);
    }
    if (names && kind && !kobj_str(names, "listKind")) {
        char *lk = util_asprintf("%sList", kind);
        kobj_set_str(names, "listKind", lk);
        free(lk);
    }
    if (!kobj_obj(spec, "conversion")) {
        json_object *conv = json_object_new_object();
        json_object_object_add(conv, "strategy", json_object_new_string("None"));
        json_object_object_add(spec, "conversion", conv);
    }
}

static void validate_approval(const json_object *old, const json_object *crd, kl_errs *e)
{
    const char *g = kobj_str(kobj_obj(crd, "spec"), "group");
    if (!g || !protected_group(g))
        return;
    enum approval now = approval_state(crd);
    /* An update that keeps the state never fails on it. */
    if (old && approval_state(old) == now)
        return;
    const char *field = "metadata.annotations[api-approved.kubernetes.io]";
    if (now == MISSING) {
        kl_errs_add(e, KL_REQUIRED, field,
                    "Required value: protected groups must have approval annotation "
                    "\"api-approved.kubernetes.io\", " APPROVAL_PR);
    } else if (now == INVALID) {
        char *q = kl_quote(kobj_annotation(crd, "api-approved.kubernetes.io"));
        kl_errs_add(e, KL_INVALID, field,
                    "Invalid value: %s: protected groups must have approval annotation "
                    "\"api-approved.kubernetes.io\" with either a URL or a reason starting with "
                    "\"unapproved\", " APPROVAL_PR,
                    q);
        free(q);
    }
}

static void validate_versions(const json_object *spec, kl_errs *e)
{
    json_object *vs = kobj_arr(spec, "versions");
    if (kobj_len(vs) == 0) {
        kl_errs_add(e, KL_INVALID, "spec.versions",
                    "Invalid value: \"null\": must have exactly one version marked as storage "
                    "version");
        return;
    }
    size_t storage = 0;
    for (size_t i = 0; i < kobj_len(vs); i++) {
        json_object *v = kobj_at(vs, i);
        storage += kobj_bool(v, "storage", false);
        char field[96];
        if (!kobj_str(v, "name") || !*kobj_str(v, "name")) {
            snprintf(field, sizeof(field), "spec.versions[%zu].name", i);
            kl_errs_add(e, KL_REQUIRED, field, "Required value");
        }
        if (!kobj_path(v, "schema.openAPIV3Schema")) {
            snprintf(field, sizeof(field), "spec.versions[%zu].schema.openAPIV3Schema", i);
            kl_errs_add(e, KL_REQUIRED, field, "Required value: schemas are required");
        }
    }
    if (storage != 1)
        kl_errs_add(e, KL_INVALID, "spec.versions",
                    "Invalid value: %zu: must have exactly one version marked as storage version",
                    storage);
}

void kl_crd_validate_definition(const json_object *old, const json_object *crd, kl_errs *e)
{
    json_object *spec = kobj_obj(crd, "spec"), *names = kobj_obj(spec, "names");
    const char *group = kobj_str(spec, "group"), *plural = kobj_str(names, "plural");
    const char *name = kobj_name(crd);
    char *want = util_asprintf("%s.%s", plural ? plural : "", group ? group : "");
    if (name && strcmp(name, want) != 0) {
        char *q = kl_quote(name);
        kl_errs_add(e, KL_INVALID, "metadata.name",
                    "Invalid value: %s: must be spec.names.plural+\".\"+spec.group", q);
        free(q);
    }
    free(want);
    if (!group || !*group)
        kl_errs_add(e, KL_REQUIRED, "spec.group", "Required value");
    else if (!strchr(group, '.'))
        kl_errs_add(e, KL_INVALID, "spec.group",
                    "Invalid value: \"%s\": should be a domain with at least one dot", group);
    const char *scope = kobj_str(spec, "scope");
    if (!scope || !*scope)
        kl_errs_add(e, KL_REQUIRED, "spec.scope", "Required value");
    else if (strcmp(scope, "Cluster") != 0 && strcmp(scope, "Namespaced") != 0)
        kl_errs_add(e, KL_NOT_SUPPORTED, "spec.scope",
                    "Unsupported value: \"%s\": supported values: \"Cluster\", \"Namespaced\"",
                    scope);
    if (!plural || !*plural)
        kl_errs_add(e, KL_REQUIRED, "spec.names.plural", "Required value");
    if (!kobj_str(names, "kind") || !*kobj_str(names, "kind"))
        kl_errs_add(e, KL_REQUIRED, "spec.names.kind", "Required value");
    validate_versions(spec, e);
    if (old && scope && kobj_str(kobj_obj(old, "spec"), "scope") &&
        strcmp(scope, kobj_str(kobj_obj(old, "spec"), "scope")) != 0)
        kl_errs_add(e, KL_INVALID, "spec.scope", "Invalid value: \"%s\": field is immutable",
                    scope);
    validate_approval(old, crd, e);
}
