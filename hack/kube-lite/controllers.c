/*
 * Stand-ins for the parts of kube-controller-manager, the scheduler and the
 * kubelet that storage depends on, so a sidecar sees the same sequence of
 * writes it would see in a cluster:
 *
 *   binder      PVCs of a StorageClass get volume.kubernetes.io/storage-provisioner
 *               (Immediate at once, WaitForFirstConsumer once a node is selected);
 *               a PV whose claimRef names a PVC is bound to it (both Bound,
 *               pv.kubernetes.io/bind-completed); a PV whose claim is gone is
 *               Released; a PV without claimRef is Available.
 *   attach      a Pod with spec.nodeName selects that node for its
 *               WaitForFirstConsumer claims, and gets a VolumeAttachment
 *               (csi-<sha256(handle+driver+node)>) for each bound CSI volume
 *               whose CSIDriver requires attach; attachments of that name that
 *               no pod on the node uses any more are deleted.
 *   namespaces  a namespace being deleted is emptied and then removed.
 *
 * One thread follows the store's events and reconciles the objects they
 * name. Every write goes through the API as a merge patch, so a write that
 * changes nothing is a no-op and the loop settles.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/linkhash.h>
#include <openssl/evp.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"
#include "obs/obs.h"

enum { T_PVC, T_PV, T_POD, T_SC, T_NS, T_VA, T_CSIDRIVER, N_WATCHED };

struct kl_controllers {
    kl_api *api;
    kl_store *store;
    kl_controllers_opts o;
    const kl_type *t[N_WATCHED];
    kl_watch *w[N_WATCHED];
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool kicked;
    bool stop;
    /* "namespace/name" of a claim -> name of the PV whose claimRef names it.
     * Only the controller thread uses it; lookups are checked against the PV,
     * so a stale entry costs nothing. */
    struct lh_table *claim_pv;
};

static void kick(void *ud)
{
    kl_controllers *c = ud;
    pthread_mutex_lock(&c->mu);
    c->kicked = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

static void patch(kl_controllers *c, const char *path, json_object *body)
{
    const char *text = json_object_to_json_string_ext(body, JSON_C_TO_STRING_PLAIN);
    int code = kl_api_call(c->api, "PATCH", path, "application/merge-patch+json", text, NULL);
    if (code >= 300 && code != 404)
        obs_v(2, "controller: PATCH %s: %d", path, code);
    json_object_put(body);
}

/* {"metadata":{"annotations":{k:v}}} */
static json_object *annotations_patch(const char *k1, const char *v1, const char *k2,
                                      const char *v2)
{
    json_object *ann = json_object_new_object();
    json_object_object_add(ann, k1, json_object_new_string(v1));
    if (k2)
        json_object_object_add(ann, k2, json_object_new_string(v2));
    json_object *meta = json_object_new_object();
    json_object_object_add(meta, "annotations", ann);
    json_object *p = json_object_new_object();
    json_object_object_add(p, "metadata", meta);
    return p;
}

static json_object *status_patch(const char *phase)
{
    json_object *st = json_object_new_object();
    json_object_object_add(st, "phase", json_object_new_string(phase));
    json_object *p = json_object_new_object();
    json_object_object_add(p, "status", st);
    return p;
}

/* The current object as a tree (json_object_put it), or NULL. */
static json_object *get(kl_controllers *c, int which, const char *ns, const char *name)
{
    if (!name)
        return NULL;
    kl_obj *o = kl_store_get(c->store, c->t[which], ns, name);
    json_object *tree = o ? kl_obj_tree(o) : NULL;
    kl_obj_unref(o);
    return tree;
}

/* ---- binder ---------------------------------------------------------------------- */

struct claim_search {
    const char *ns, *name, *uid;
    char *found;
};

static bool find_pv_for_claim(void *ud, const kl_obj *o)
{
    struct claim_search *s = ud;
    json_object *tree = kl_obj_tree(o);
    bool found = false;
    json_object *ref = kobj_get(kobj_get(tree, "spec"), "claimRef");
    const char *ns = kobj_str(ref, "namespace"), *name = kobj_str(ref, "name"),
               *uid = kobj_str(ref, "uid");
    if (ns && name && strcmp(ns, s->ns) == 0 && strcmp(name, s->name) == 0 &&
        !(uid && *uid && s->uid && strcmp(uid, s->uid) != 0)) {
        s->found = util_strdup(o->name);
        found = true;
    }
    json_object_put(tree);
    return found;
}

static void free_index_entry(struct lh_entry *e)
{
    free(lh_entry_k(e));
    free((void *)lh_entry_v(e));
}

static void index_pv(kl_controllers *c, const char *pv_name, json_object *pv)
{
    json_object *ref = kobj_get(kobj_get(pv, "spec"), "claimRef");
    const char *ns = kobj_str(ref, "namespace"), *name = kobj_str(ref, "name");
    if (!ns || !name)
        return;
    char *key = util_asprintf("%s/%s", ns, name);
    char *old = NULL;
    if (lh_table_lookup_ex(c->claim_pv, key, (void **)&old) && old && strcmp(old, pv_name) == 0) {
        free(key);
        return;
    }
    lh_table_delete(c->claim_pv, key);
    lh_table_insert(c->claim_pv, key, util_strdup(pv_name));
}

/* The PV whose claimRef names ns/name (and uid when both have one), via the
 * index: no scan of every PV per claim event. Caller frees. */
static char *pv_for_claim(kl_controllers *c, const char *ns, const char *name, const char *uid)
{
    char *key = util_asprintf("%s/%s", ns, name);
    const char *pvname = NULL;
    bool hit = lh_table_lookup_ex(c->claim_pv, key, (void **)&pvname);
    free(key);
    if (!hit || !pvname)
        return NULL;
    kl_obj *o = kl_store_get(c->store, c->t[T_PV], NULL, pvname);
    if (!o)
        return NULL;
    struct claim_search s = {ns, name, uid, NULL};
    find_pv_for_claim(&s, o);
    kl_obj_unref(o);
    return s.found;
}

static bool index_each(void *ud, const kl_obj *o)
{
    kl_controllers *c = ud;
    json_object *tree = kl_obj_tree(o);
    index_pv(c, o->name, tree);
    json_object_put(tree);
    return false;
}

static void reconcile_pv(kl_controllers *c, const char *name);

static void reconcile_pvc(kl_controllers *c, const char *ns, const char *name)
{
    json_object *pvc = get(c, T_PVC, ns, name);
    if (!pvc)
        return;
    json_object *obj = pvc;
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns, name);
    const char *vol = kobj_str(kobj_get(obj, "spec"), "volumeName");
    const char *phase = kobj_str(kobj_get(obj, "status"), "phase");
    if (kobj_meta_str(obj, "deletionTimestamp")) {
        json_object_put(pvc);
        return;
    }
    if (!vol || !*vol) {
        struct claim_search s = {ns, name, kobj_meta_str(obj, "uid"),
                                 pv_for_claim(c, ns, name, kobj_meta_str(obj, "uid"))};
        if (s.found) {
            json_object *pv = get(c, T_PV, NULL, s.found);
            if (pv) {
                json_object *spec = json_object_new_object();
                json_object_object_add(spec, "volumeName", json_object_new_string(s.found));
                json_object *p = annotations_patch("pv.kubernetes.io/bind-completed", "yes",
                                                   "pv.kubernetes.io/bound-by-controller", "yes");
                json_object_object_add(p, "spec", spec);
                patch(c, path, p);
                json_object *st = json_object_new_object();
                json_object_object_add(st, "phase", json_object_new_string("Bound"));
                json_object *v = kobj_arr(kobj_obj(pv, "spec"), "accessModes");
                if (v)
                    json_object_object_add(st, "accessModes", json_object_get(v));
                v = kobj_obj(kobj_obj(pv, "spec"), "capacity");
                if (v)
                    json_object_object_add(st, "capacity", json_object_get(v));
                json_object *sp = json_object_new_object();
                json_object_object_add(sp, "status", st);
                char spath[640];
                snprintf(spath, sizeof(spath), "%s/status", path);
                patch(c, spath, sp);
                json_object_put(pv);
                reconcile_pv(c, s.found);
            }
            free(s.found);
            json_object_put(pvc);
            return;
        }
        /* Nothing to bind yet: ask for provisioning if the class names a provisioner. */
        const char *scname = kobj_str(kobj_get(obj, "spec"), "storageClassName");
        json_object *sc = get(c, T_SC, NULL, scname);
        const char *prov = sc ? kobj_str(sc, "provisioner") : NULL;
        const char *mode = sc ? kobj_str(sc, "volumeBindingMode") : NULL;
        bool wffc = mode && strcmp(mode, "WaitForFirstConsumer") == 0;
        bool ready = !wffc || kobj_annotation(obj, "volume.kubernetes.io/selected-node");
        if (prov && ready && strcmp(prov, "kubernetes.io/no-provisioner") != 0) {
            const char *have = kobj_annotation(obj, "volume.kubernetes.io/storage-provisioner");
            if (!have || strcmp(have, prov) != 0)
                patch(c, path,
                      annotations_patch("volume.kubernetes.io/storage-provisioner", prov,
                                        "volume.beta.kubernetes.io/storage-provisioner", prov));
        }
        json_object_put(sc);
    } else if (!phase || strcmp(phase, "Bound") != 0) {
        /* volumeName set by someone else (a pre-bound claim): finish the binding. */
        json_object *pv = get(c, T_PV, NULL, vol);
        if (pv) {
            char spath[640];
            snprintf(spath, sizeof(spath), "%s/status", path);
            patch(c, spath, status_patch("Bound"));
            json_object_put(pv);
        }
    }
    json_object_put(pvc);
}

static void reconcile_pv(kl_controllers *c, const char *name)
{
    json_object *pv = get(c, T_PV, NULL, name);
    if (!pv)
        return;
    char path[600];
    snprintf(path, sizeof(path), "/api/v1/persistentvolumes/%s/status", name);
    json_object *ref = kobj_get(kobj_get(pv, "spec"), "claimRef");
    const char *phase = kobj_str(kobj_get(pv, "status"), "phase");
    const char *want = NULL;
    if (!ref) {
        want = "Available";
    } else {
        const char *ns = kobj_str(ref, "namespace"), *cname = kobj_str(ref, "name");
        const char *uid = kobj_str(ref, "uid");
        json_object *pvc = get(c, T_PVC, ns, cname);
        const char *pvc_uid = pvc ? kobj_meta_str(pvc, "uid") : NULL;
        if (!pvc || (uid && *uid && (!pvc_uid || strcmp(uid, pvc_uid) != 0))) {
            if (uid && *uid)
                want = "Released";
        } else {
            const char *vol = kobj_str(kobj_get(pvc, "spec"), "volumeName");
            if (vol && strcmp(vol, name) == 0) {
                want = "Bound";
                if (!uid || !*uid) {
                    json_object *cr = json_object_new_object();
                    json_object_object_add(cr, "uid", json_object_new_string(pvc_uid));
                    json_object *spec = json_object_new_object();
                    json_object_object_add(spec, "claimRef", cr);
                    json_object *p = json_object_new_object();
                    json_object_object_add(p, "spec", spec);
                    char mpath[600];
                    snprintf(mpath, sizeof(mpath), "/api/v1/persistentvolumes/%s", name);
                    patch(c, mpath, p);
                }
            }
        }
        json_object_put(pvc);
    }
    /* Failed is terminal here; Released never goes back to Bound. */
    if (want && (!phase || strcmp(phase, want) != 0) && !(phase && strcmp(phase, "Failed") == 0) &&
        !(phase && strcmp(phase, "Released") == 0 && strcmp(want, "Bound") == 0))
        patch(c, path, status_patch(want));
    json_object_put(pv);
}

/* ---- attach stand-in ---------------------------------------------------------------- */

static void va_name(const char *handle, const char *driver, const char *node, char out[72])
{
    char *in = util_asprintf("%s%s%s", handle, driver, node);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_Digest(in, strlen(in), md, &len, EVP_sha256(), NULL);
    free(in);
    strcpy(out, "csi-");
    for (unsigned i = 0; i < len && i < 32; i++)
        snprintf(out + 4 + (size_t)2 * i, 3, "%02x", md[i]);
}

static bool attach_required(kl_controllers *c, const char *driver)
{
    json_object *d = get(c, T_CSIDRIVER, NULL, driver);
    if (!d)
        return true; /* no CSIDriver object: Kubernetes attaches */
    json_object *v = kobj_get(kobj_get(d, "spec"), "attachRequired");
    bool req = !v || json_object_get_boolean(v);
    json_object_put(d);
    return req;
}

static void reconcile_pod(kl_controllers *c, const char *ns, const char *name)
{
    json_object *pod = get(c, T_POD, ns, name);
    if (!pod)
        return;
    const char *node = kobj_str(kobj_get(pod, "spec"), "nodeName");
    json_object *vols = kobj_get(kobj_get(pod, "spec"), "volumes");
    size_t n = kobj_len(vols);
    for (size_t i = 0; node && *node && i < n; i++) {
        const char *claim =
            kobj_str(kobj_get(kobj_at(vols, i), "persistentVolumeClaim"), "claimName");
        json_object *pvc = get(c, T_PVC, ns, claim);
        if (!pvc)
            continue;
        const char *vol = kobj_str(kobj_get(pvc, "spec"), "volumeName");
        if (!vol || !*vol) {
            json_object *sc =
                get(c, T_SC, NULL, kobj_str(kobj_get(pvc, "spec"), "storageClassName"));
            const char *mode = sc ? kobj_str(sc, "volumeBindingMode") : NULL;
            if (mode && strcmp(mode, "WaitForFirstConsumer") == 0 &&
                !kobj_annotation(pvc, "volume.kubernetes.io/selected-node")) {
                char path[600];
                snprintf(path, sizeof(path), "/api/v1/namespaces/%s/persistentvolumeclaims/%s", ns,
                         claim);
                patch(c, path,
                      annotations_patch("volume.kubernetes.io/selected-node", node, NULL, NULL));
            }
            json_object_put(sc);
            json_object_put(pvc);
            continue;
        }
        json_object *pv = get(c, T_PV, NULL, vol);
        json_object *csi = pv ? kobj_get(kobj_get(pv, "spec"), "csi") : NULL;
        const char *driver = kobj_str(csi, "driver"), *handle = kobj_str(csi, "volumeHandle");
        if (driver && handle && attach_required(c, driver)) {
            char vaname[72];
            va_name(handle, driver, node, vaname);
            json_object *va = get(c, T_VA, NULL, vaname);
            if (!va) {
                char *body = util_asprintf(
                    "{\"apiVersion\":\"storage.k8s.io/v1\",\"kind\":\"VolumeAttachment\","
                    "\"metadata\":{\"name\":\"%s\"},\"spec\":{\"attacher\":\"%s\",\"nodeName\":"
                    "\"%s\",\"source\":{\"persistentVolumeName\":\"%s\"}}}",
                    vaname, driver, node, vol);
                if (kl_api_create_json(c->api, "/apis/storage.k8s.io/v1/volumeattachments", body) <
                    0)
                    obs_v(2, "controller: %s", util_err_last());
                free(body);
            }
            json_object_put(va);
        }
        json_object_put(pv);
        json_object_put(pvc);
    }
    json_object_put(pod);
}

struct va_use {
    const char *node;
    const char *claim_ns, *claim_name; /* the PV's claimRef */
    bool used;
};

static bool pod_uses(void *ud, const kl_obj *o)
{
    struct va_use *u = ud;
    if (!o->ns || strcmp(o->ns, u->claim_ns) != 0)
        return false;
    json_object *tree = kl_obj_tree(o);
    const char *node = kobj_str(kobj_get(tree, "spec"), "nodeName");
    if (!node || strcmp(node, u->node) != 0 || kobj_meta_str(tree, "deletionTimestamp")) {
        json_object_put(tree);
        return false;
    }
    json_object *vols = kobj_get(kobj_get(tree, "spec"), "volumes");
    size_t n = kobj_len(vols);
    for (size_t i = 0; i < n && !u->used; i++) {
        const char *claim =
            kobj_str(kobj_get(kobj_at(vols, i), "persistentVolumeClaim"), "claimName");
        if (claim && strcmp(claim, u->claim_name) == 0)
            u->used = true;
    }
    json_object_put(tree);
    return u->used;
}

struct va_list_ctx {
    char **names;
    char **nodes;
    char **pvs;
    size_t n, cap;
};

static bool collect_va(void *ud, const kl_obj *o)
{
    struct va_list_ctx *l = ud;
    json_object *tree = kl_obj_tree(o);
    json_object *spec = kobj_get(tree, "spec");
    const char *pv = kobj_str(kobj_get(spec, "source"), "persistentVolumeName");
    const char *node = kobj_str(spec, "nodeName");
    /* Only attachments named as this stand-in names them: kube-controller-manager's
     * attach-detach controller detaches by that computed name (csi-<sha256>), so
     * one made by someone else is never its to delete. */
    if (!pv || !node || kobj_meta_str(tree, "deletionTimestamp") ||
        strncmp(o->name, "csi-", 4) != 0) {
        json_object_put(tree);
        return false;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->names = realloc(l->names, l->cap * sizeof(char *));
        l->nodes = realloc(l->nodes, l->cap * sizeof(char *));
        l->pvs = realloc(l->pvs, l->cap * sizeof(char *));
        if (!l->names || !l->nodes || !l->pvs)
            abort();
    }
    l->names[l->n] = util_strdup(o->name);
    l->nodes[l->n] = util_strdup(node);
    l->pvs[l->n] = util_strdup(pv);
    l->n++;
    json_object_put(tree);
    return false;
}

/* Deletes attachments that no pod on their node uses any more. */
static void reconcile_detach(kl_controllers *c)
{
    struct va_list_ctx l = {0};
    kl_store_each(c->store, c->t[T_VA], NULL, collect_va, &l);
    for (size_t i = 0; i < l.n; i++) {
        json_object *pv = get(c, T_PV, NULL, l.pvs[i]);
        json_object *ref = pv ? kobj_get(kobj_get(pv, "spec"), "claimRef") : NULL;
        struct va_use u = {l.nodes[i], kobj_str(ref, "namespace"), kobj_str(ref, "name"), false};
        if (u.claim_ns && u.claim_name)
            kl_store_each(c->store, c->t[T_POD], NULL, pod_uses, &u);
        json_object_put(pv);
        if (!u.used) {
            char path[400];
            snprintf(path, sizeof(path), "/apis/storage.k8s.io/v1/volumeattachments/%s",
                     l.names[i]);
            kl_api_call(c->api, "DELETE", path, "application/json", NULL, NULL);
        }
        free(l.names[i]);
        free(l.nodes[i]);
        free(l.pvs[i]);
    }
    free(l.names);
    free(l.nodes);
    free(l.pvs);
}

/* ---- namespaces -------------------------------------------------------------------- */

struct ns_list {
    char **names;
    size_t n, cap;
};

static bool collect_terminating(void *ud, const kl_obj *o)
{
    struct ns_list *l = ud;
    json_object *tree = kl_obj_tree(o);
    bool deleting = kobj_meta_str(tree, "deletionTimestamp") != NULL;
    json_object_put(tree);
    if (!deleting)
        return false;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 4;
        l->names = realloc(l->names, l->cap * sizeof(char *));
        if (!l->names)
            abort();
    }
    l->names[l->n++] = util_strdup(o->name);
    return false;
}

static bool any(void *ud, const kl_obj *o)
{
    (void)o;
    *(bool *)ud = true;
    return true;
}

static void remove_namespace(void *ud, const kl_obj *cur, kl_mut *m)
{
    (void)ud;
    m->kind = cur ? KL_MUT_DELETE : KL_MUT_NOOP;
}

static void reconcile_namespaces(kl_controllers *c)
{
    struct ns_list l = {0};
    kl_store_each(c->store, c->t[T_NS], NULL, collect_terminating, &l);
    size_t nt = 0;
    const kl_type *types = kl_types(&nt);
    for (size_t i = 0; i < l.n; i++) {
        bool left = false;
        for (size_t k = 0; k < nt; k++) {
            if (!types[k].namespaced)
                continue;
            char path[600];
            if (!types[k].group[0])
                snprintf(path, sizeof(path), "/api/%s/namespaces/%s/%s", types[k].version,
                         l.names[i], types[k].resource);
            else
                snprintf(path, sizeof(path), "/apis/%s/%s/namespaces/%s/%s", types[k].group,
                         types[k].version, l.names[i], types[k].resource);
            bool found = false;
            kl_store_each(c->store, &types[k], l.names[i], any, &found);
            if (found) {
                kl_api_call(c->api, "DELETE", path, "application/json", NULL, NULL);
                kl_store_each(c->store, &types[k], l.names[i], any, &left);
            }
        }
        if (!left) {
            kl_obj *res = NULL;
            int code = 0;
            json_object *st = NULL;
            kl_store_mutate(c->store, c->t[T_NS], NULL, l.names[i], remove_namespace, NULL, &res,
                            &code, &st);
            kl_obj_unref(res);
            json_object_put(st);
        }
        free(l.names[i]);
    }
    free(l.names);
}

/* ---- loop -------------------------------------------------------------------------- */

struct key_list {
    char **ns, **names;
    size_t n, cap;
};

static bool collect_keys(void *ud, const kl_obj *o)
{
    struct key_list *l = ud;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 16;
        l->ns = realloc(l->ns, l->cap * sizeof(char *));
        l->names = realloc(l->names, l->cap * sizeof(char *));
        if (!l->ns || !l->names)
            abort();
    }
    l->ns[l->n] = util_strdup(o->ns ? o->ns : "");
    l->names[l->n] = util_strdup(o->name);
    l->n++;
    return false;
}

static void key_list_free(struct key_list *l)
{
    for (size_t i = 0; i < l->n; i++) {
        free(l->ns[i]);
        free(l->names[i]);
    }
    free(l->ns);
    free(l->names);
    memset(l, 0, sizeof(*l));
}

/* After a lost history or at start: look at everything once. */
static void resync(kl_controllers *c)
{
    struct key_list l = {0};
    if (c->o.binder) {
        kl_store_each(c->store, c->t[T_PV], NULL, index_each, c);
        kl_store_each(c->store, c->t[T_PVC], NULL, collect_keys, &l);
        for (size_t i = 0; i < l.n; i++)
            reconcile_pvc(c, l.ns[i], l.names[i]);
        key_list_free(&l);
        kl_store_each(c->store, c->t[T_PV], NULL, collect_keys, &l);
        for (size_t i = 0; i < l.n; i++)
            reconcile_pv(c, l.names[i]);
        key_list_free(&l);
    }
    if (c->o.attach) {
        kl_store_each(c->store, c->t[T_POD], NULL, collect_keys, &l);
        for (size_t i = 0; i < l.n; i++)
            reconcile_pod(c, l.ns[i], l.names[i]);
        key_list_free(&l);
        reconcile_detach(c);
    }
    if (c->o.namespaces)
        reconcile_namespaces(c);
}

static void handle(kl_controllers *c, int which, const kl_event *e)
{
    json_object *tree = kl_obj_tree(e->obj);
    const char *ns = e->obj->ns;
    const char *name = e->obj->name;
    switch (which) {
    case T_PVC:
        if (c->o.binder && e->type != KL_DELETED)
            reconcile_pvc(c, ns, name);
        if (c->o.binder && e->type == KL_DELETED) {
            /* Its PV becomes Released. */
            const char *vol = kobj_str(kobj_get(tree, "spec"), "volumeName");
            if (vol && *vol) {
                reconcile_pv(c, vol);
            } else {
                char *found = pv_for_claim(c, ns, name, NULL);
                if (found)
                    reconcile_pv(c, found);
                free(found);
            }
        }
        if (c->o.attach && e->type != KL_DELETED) {
            struct key_list l = {0};
            kl_store_each(c->store, c->t[T_POD], ns, collect_keys, &l);
            for (size_t i = 0; i < l.n; i++)
                reconcile_pod(c, l.ns[i], l.names[i]);
            key_list_free(&l);
        }
        break;
    case T_PV: {
        if (!c->o.binder)
            break;
        if (e->type != KL_DELETED)
            index_pv(c, name, tree);
        reconcile_pv(c, name);
        json_object *ref = kobj_get(kobj_get(tree, "spec"), "claimRef");
        if (ref && e->type != KL_DELETED)
            reconcile_pvc(c, kobj_str(ref, "namespace"), kobj_str(ref, "name"));
        break;
    }
    case T_POD:
        if (!c->o.attach)
            break;
        if (e->type == KL_DELETED)
            reconcile_detach(c);
        else
            reconcile_pod(c, ns, name);
        break;
    case T_SC:
    case T_CSIDRIVER:
        resync(c);
        break;
    case T_NS:
        if (c->o.namespaces && kobj_meta_str(tree, "deletionTimestamp"))
            reconcile_namespaces(c);
        break;
    default:
        break;
    }
    json_object_put(tree);
}

static void *loop(void *arg)
{
    kl_controllers *c = arg;
    resync(c);
    util_duration last_sweep = util_now_mono();
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->kicked && !c->stop) {
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_sec += 1;
            if (pthread_cond_timedwait(&c->cv, &c->mu, &until) != 0)
                break;
        }
        bool stop = c->stop;
        c->kicked = false;
        pthread_mutex_unlock(&c->mu);
        if (stop)
            break;
        for (int k = 0; k < N_WATCHED; k++) {
            kl_event ev[64];
            int n;
            while ((n = kl_watch_next(c->w[k], ev, 64)) > 0) {
                for (int i = 0; i < n; i++) {
                    handle(c, k, &ev[i]);
                    kl_event_clear(&ev[i]);
                }
            }
            if (n == -ERANGE) {
                kl_watch_free(c->w[k]);
                kl_store_watch(c->store, c->t[k], kl_store_rv(c->store), kick, c, &c->w[k]);
                resync(c);
            }
        }
        /* Namespaces empty out as their objects' finalizers go; look again. */
        if (c->o.namespaces && util_now_mono() - last_sweep > UTIL_SECOND) {
            reconcile_namespaces(c);
            last_sweep = util_now_mono();
        }
    }
    return NULL;
}

int kl_controllers_start(kl_api *api, const kl_controllers_opts *opts, kl_controllers **out)
{
    kl_controllers *c = util_calloc(1, sizeof(*c));
    c->api = api;
    c->store = kl_api_store(api);
    if (opts)
        c->o = *opts;
    c->t[T_PVC] = kl_type_find("", "v1", "persistentvolumeclaims");
    c->t[T_PV] = kl_type_find("", "v1", "persistentvolumes");
    c->t[T_POD] = kl_type_find("", "v1", "pods");
    c->t[T_SC] = kl_type_find("storage.k8s.io", "v1", "storageclasses");
    c->t[T_NS] = kl_type_find("", "v1", "namespaces");
    c->t[T_VA] = kl_type_find("storage.k8s.io", "v1", "volumeattachments");
    c->t[T_CSIDRIVER] = kl_type_find("storage.k8s.io", "v1", "csidrivers");
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    c->claim_pv = lh_kchar_table_new(1024, free_index_entry);
    uint64_t rv = kl_store_rv(c->store);
    for (int k = 0; k < N_WATCHED; k++)
        kl_store_watch(c->store, c->t[k], rv, kick, c, &c->w[k]);
    if (pthread_create(&c->th, NULL, loop, c) != 0) {
        kl_controllers_stop(c);
        return util_err_set(-EAGAIN, "cannot start the controllers");
    }
    *out = c;
    return 0;
}

void kl_controllers_stop(kl_controllers *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->stop = true;
    pthread_cond_signal(&c->cv);
    pthread_mutex_unlock(&c->mu);
    if (c->th)
        pthread_join(c->th, NULL);
    for (int k = 0; k < N_WATCHED; k++)
        kl_watch_free(c->w[k]);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    lh_table_free(c->claim_pv);
    free(c);
}
