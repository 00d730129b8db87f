/*
 * plan_topology: where a new volume must and should be reachable from
 * (A1.7), and the PV nodeAffinity that records where it is.
 *
 * A term is a list of key=value segments that must all hold, kept sorted by
 * key. The requisite list is an OR of terms: the selected node's own term
 * (--strict-topology), else StorageClass.allowedTopologies flattened into
 * the cross product of its value lists, else the aggregate of every Node
 * carrying all of the driver's topology keys. It is then sorted (shorter
 * terms first, then by key and value) and deduplicated. The preferred list
 * is the requisite list rotated: to the first term the selected node
 * satisfies, or, with immediate binding, by an FNV-1 hash of the PVC name so
 * that StatefulSet replicas ("<claim>-<set>-<N>") spread across segments.
 *
 * Strings in terms are borrowed from the input objects; the CSI messages
 * returned own copies.
 */
#include "plan_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct terms {
    plan_term *t;
    size_t n, cap;
} terms;

static void terms_push(terms *ts, plan_term t)
{
    if (ts->n == ts->cap) {
        size_t cap = ts->cap != 0 ? ts->cap * 2 : 8;
        plan_term *p = realloc(ts->t, cap * sizeof(*p));
        if (p == NULL)
            abort();
        ts->t = p;
        ts->cap = cap;
    }
    ts->t[ts->n++] = t;
}

static void terms_free(terms *ts)
{
    for (size_t i = 0; i < ts->n; i++)
        free(ts->t[i].segs);
    free(ts->t);
    ts->t = NULL;
    ts->n = ts->cap = 0;
}

static int seg_cmp(const void *a, const void *b)
{
    const plan_seg *x = a, *y = b;
    int r = strcmp(x->key, y->key);
    return r != 0 ? r : strcmp(x->value, y->value);
}

static void term_sort(plan_term *t)
{
    if (t->n > 1)
        qsort(t->segs, t->n, sizeof(*t->segs), seg_cmp);
}

/* topologyTerm.compare: length first, then segment by segment. */
static int term_cmp(const void *a, const void *b)
{
    const plan_term *x = a, *y = b;
    if (x->n != y->n)
        return x->n < y->n ? -1 : 1;
    for (size_t i = 0; i < x->n; i++) {
        int r = seg_cmp(&x->segs[i], &y->segs[i]);
        if (r != 0)
            return r;
    }
    return 0;
}

/* topologyTerm.subset: every segment of t is in other (both sorted). */
static bool term_subset(const plan_term *t, const plan_term *other)
{
    if (t->n == 0)
        return true;
    size_t j = 0;
    for (size_t i = 0; i < other->n; i++) {
        if (strcmp(t->segs[j].key, other->segs[i].key) != 0)
            continue;
        if (strcmp(t->segs[j].value, other->segs[i].value) != 0)
            return false;
        if (++j == t->n)
            return true;
    }
    return false;
}

static plan_term term_clone_add(const plan_term *old, const char *key, const char *value)
{
    plan_term t = {.segs = util_calloc(old->n + 1, sizeof(plan_seg)), .n = old->n + 1};
    if (old->n > 0)
        memcpy(t.segs, old->segs, old->n * sizeof(plan_seg));
    t.segs[old->n] = (plan_seg){key, value};
    return t;
}

static const char *jstr_or_empty(const json_object *o)
{
    return kobj_typed(o, json_type_string) != NULL ? json_object_get_string((json_object *)o) : "";
}

/* flatten(): the OR of values under each key distributed over the AND of
 * keys, term by term, in upstream's order (it shows in one message). */
static void flatten(const json_object *allowed, terms *out)
{
    size_t n_terms = kobj_len(allowed);
    for (size_t i = 0; i < n_terms; i++) {
        json_object *exprs = kobj_path(kobj_at(allowed, i), "matchLabelExpressions");
        terms old = {0};
        for (size_t e = 0; e < kobj_len(exprs); e++) {
            json_object *expr = kobj_at(exprs, e);
            const char *key = kobj_path_str(expr, "key");
            json_object *values = kobj_path(expr, "values");
            terms next = {0};
            for (size_t v = 0; v < kobj_len(values); v++) {
                const char *val = jstr_or_empty(kobj_at(values, v));
                const plan_term none = {0};
                /* With nothing to distribute over (first key, or a key
                 * before it had no values) a term starts afresh. */
                if (old.n == 0)
                    terms_push(&next, term_clone_add(&none, key != NULL ? key : "", val));
                for (size_t o = 0; o < old.n; o++)
                    terms_push(&next, term_clone_add(&old.t[o], key != NULL ? key : "", val));
            }
            terms_free(&old);
            old = next;
        }
        for (size_t o = 0; o < old.n; o++) {
            term_sort(&old.t[o]);
            terms_push(out, old.t[o]);
        }
        free(old.t);
    }
}

/* The term of a node for `keys`; false when a key is not a label. */
static bool node_term(const json_object *labels, const json_object *keys, plan_term *out)
{
    size_t n = kobj_len(keys);
    plan_term t = {.segs = util_calloc(n, sizeof(plan_seg)), .n = 0};
    for (size_t i = 0; i < n; i++) {
        const char *key = jstr_or_empty(kobj_at(keys, i));
        const char *v = kobj_str(labels, key);
        if (v == NULL) {
            json_object *raw = NULL;
            /* A label whose value is not a string cannot happen in Kubernetes. */
            if (kobj_typed(labels, json_type_object) == NULL ||
                !json_object_object_get_ex(labels, key, &raw)) {
                free(t.segs);
                return false;
            }
            v = "";
        }
        t.segs[t.n++] = (plan_seg){key, v};
    }
    term_sort(&t);
    *out = t;
    return true;
}

/* fmt %v of a []string: "[a b]". */
static void add_keys(plan_buf *b, const json_object *keys)
{
    plan_buf_add(b, "[");
    for (size_t i = 0; i < kobj_len(keys); i++)
        plan_buf_addf(b, "%s%s", i > 0 ? " " : "", jstr_or_empty(kobj_at(keys, i)));
    plan_buf_add(b, "]");
}

/* fmt %v of a []topologyTerm: "[[{k v}] [{k w}]]". */
static void add_terms(plan_buf *b, const terms *ts)
{
    plan_buf_add(b, "[");
    for (size_t i = 0; i < ts->n; i++) {
        if (i > 0)
            plan_buf_add(b, " ");
        plan_buf_add_term(b, &ts->t[i]);
    }
    plan_buf_add(b, "]");
}

static int fail_buf(plan_buf *b, int code)
{
    int r = util_err_set(code, "%s", b->s);
    plan_buf_free(b);
    return r;
}

const json_object *prov_csinode_keys(const json_object *csinode, const char *driver)
{
    json_object *drivers = kobj_path(csinode, "spec.drivers");
    for (size_t i = 0; driver != NULL && i < kobj_len(drivers); i++) {
        json_object *d = kobj_at(drivers, i);
        const char *name = kobj_path_str(d, "name");
        if (name != NULL && strcmp(name, driver) == 0)
            return kobj_typed(kobj_path(d, "topologyKeys"), json_type_array);
    }
    return NULL;
}

/* aggregateTopologies: the term of every node that has all the keys. */
static int aggregate(const prov_config *cfg, const prov_topology_in *in, const json_object *keys,
                     terms *out)
{
    if (kobj_len(keys) == 0) {
        /* Immediate binding and no CSINode lists keys: the caller then
         * reports "no available topology found". */
        if (cfg->warn != NULL)
            cfg->warn(cfg->warn_ud, "No topology keys found on any node");
        return 0;
    }
    for (size_t i = 0; i < kobj_len(in->nodes); i++) {
        plan_term t;
        if (node_term(kobj_path(kobj_at(in->nodes, i), "metadata.labels"), keys, &t))
            terms_push(out, t);
    }
    if (out->n == 0) {
        plan_buf b = {0};
        plan_buf_add(&b, "topologyKeys ");
        add_keys(&b, keys);
        plan_buf_add(&b, " were not found on any nodes");
        return fail_buf(&b, -EINVAL);
    }
    return 0;
}

/* getPVCNameHashAndIndexOffset: FNV-1 of the name, or for "<a>-<b>-<N>"
 * of "<b>" with N as the offset, so replicas of a StatefulSet rotate. */
static uint32_t spread_offset(const char *pvc_name)
{
    if (pvc_name == NULL || pvc_name[0] == '\0')
        return 0; /* upstream draws a random number; never happens for a PVC */
    size_t start = 0, end = strlen(pvc_name);
    uint32_t index = 0;
    const char *dash = strrchr(pvc_name, '-');
    if (dash != NULL && dash[1] != '\0') {
        uint64_t id = 0;
        bool ok = true;
        for (const char *p = dash + 1; *p != '\0' && ok; p++) {
            ok = *p >= '0' && *p <= '9';
            id = id * 10 + (uint64_t)(*p - '0');
            ok = ok && id <= UINT32_MAX;
        }
        if (ok) {
            index = (uint32_t)id;
            end = (size_t)(dash - pvc_name);
            for (size_t i = end; i > 0; i--) {
                if (pvc_name[i - 1] == '-') {
                    start = i;
                    break;
                }
            }
        }
    }
    uint32_t h = 2166136261u;
    for (size_t i = start; i < end; i++) {
        h *= 16777619u;
        h ^= (uint8_t)pvc_name[i];
    }
    return h + index;
}

static Csi__V1__Topology *to_csi(const plan_term *t)
{
    Csi__V1__Topology *topo = util_calloc(1, sizeof(*topo));
    csi__v1__topology__init(topo);
    topo->segments = util_calloc(t->n, sizeof(void *));
    for (size_t i = 0; i < t->n; i++) {
        /* A Go map keeps one value per key: the last of the sorted run. */
        if (i + 1 < t->n && strcmp(t->segs[i].key, t->segs[i + 1].key) == 0)
            continue;
        Csi__V1__Topology__SegmentsEntry *e = util_calloc(1, sizeof(*e));
        csi__v1__topology__segments_entry__init(e);
        e->key = util_strdup(t->segs[i].key);
        e->value = util_strdup(t->segs[i].value);
        topo->segments[topo->n_segments++] = e;
    }
    return topo;
}

/* requisite = ts; preferred = ts rotated left by `shift`. */
static Csi__V1__TopologyRequirement *to_requirement(const terms *ts, size_t shift)
{
    Csi__V1__TopologyRequirement *req = util_calloc(1, sizeof(*req));
    csi__v1__topology_requirement__init(req);
    req->requisite = util_calloc(ts->n, sizeof(void *));
    req->preferred = util_calloc(ts->n, sizeof(void *));
    for (size_t i = 0; i < ts->n; i++) {
        if (ts->t[i].n == 0)
            continue;
        req->requisite[req->n_requisite++] = to_csi(&ts->t[i]);
    }
    for (size_t i = 0; i < ts->n; i++) {
        const plan_term *t = &ts->t[(i + shift) % ts->n];
        if (t->n == 0)
            continue;
        req->preferred[req->n_preferred++] = to_csi(t);
    }
    return req;
}

void prov_topology_free(Csi__V1__TopologyRequirement *t)
{
    if (t != NULL)
        protobuf_c_message_free_unpacked(&t->base, NULL);
}

/* The selected node's keys and term; the strict check against
 * allowedTopologies. `sel` owns its segments on success. */
static int selected_term(const prov_config *cfg, const prov_topology_in *in, plan_term *sel,
                         const json_object **keys_out, terms *req)
{
    const char *node = in->selected_node;
    plan_buf b = {0};

    if (in->csinode == NULL)
        return util_err_set(-ENOENT,
                            "failed to get selected CSINode %s: csinode.storage.k8s.io \"%s\" not "
                            "found",
                            node, node);
    const json_object *keys = prov_csinode_keys(in->csinode, cfg->driver_name);
    if (kobj_len(keys) == 0)
        return util_err_set(-EINVAL, "no topology key found for node %s", node);
    /* A Node that is gone counts as missing labels, as upstream's lister
     * lookup does; the lib has normally rescheduled before (prov_build_request). */
    if (in->node == NULL || !node_term(kobj_path(in->node, "metadata.labels"), keys, sel)) {
        /* Upstream prints the labels it no longer holds at this point: map[]. */
        plan_buf_add(&b, "topology labels from selected node map[] does not match topology keys "
                         "from CSINode ");
        add_keys(&b, keys);
        return fail_buf(&b, -EINVAL);
    }
    *keys_out = keys;
    if (!cfg->strict_topology)
        return 0;
    if (kobj_len(in->allowed_topologies) != 0) {
        terms flat = {0};
        bool found = false;
        flatten(in->allowed_topologies, &flat);
        for (size_t i = 0; i < flat.n && !found; i++)
            found = term_subset(&flat.t[i], sel);
        if (!found) {
            plan_buf_add(&b, "selected node '");
            plan_buf_add_quoted(&b, node);
            plan_buf_add(&b, "' topology '");
            plan_buf_add_term(&b, sel);
            plan_buf_add(&b, "' is not in allowed topologies: ");
            add_terms(&b, &flat);
            terms_free(&flat);
            return fail_buf(&b, -EINVAL);
        }
        terms_free(&flat);
    }
    /* Only the selected node's topology: a copy, `sel` keeps its own. */
    plan_term copy = {.segs = util_calloc(sel->n, sizeof(plan_seg)), .n = sel->n};
    memcpy(copy.segs, sel->segs, sel->n * sizeof(plan_seg));
    terms_push(req, copy);
    return 0;
}

static int plan_topology(const prov_config *cfg, const prov_topology_in *in, plan_term *sel,
                         terms *req, Csi__V1__TopologyRequirement **out)
{
    bool selected = in->selected_node != NULL && in->selected_node[0] != '\0';
    const json_object *keys = NULL;

    if (selected) {
        int r = selected_term(cfg, in, sel, &keys, req);
        if (r < 0)
            return r;
    }
    if (req->n == 0) {
        if (kobj_len(in->allowed_topologies) != 0) {
            flatten(in->allowed_topologies, req);
        } else {
            if (!selected && !cfg->immediate_topology)
                return 0; /* neither the class nor the driver asks for topology */
            int r = aggregate(cfg, in, selected ? keys : in->immediate_keys, req);
            if (r < 0)
                return r;
            if (req->n == 0)
                return util_err_set(-EINVAL, "no available topology found");
        }
    }
    if (req->n == 0)
        return 0; /* allowedTopologies without values: as without topology */

    qsort(req->t, req->n, sizeof(*req->t), term_cmp);
    size_t w = 0;
    for (size_t i = 0; i < req->n; i++) {
        if (w > 0 && term_cmp(&req->t[w - 1], &req->t[i]) == 0) {
            free(req->t[i].segs);
            continue;
        }
        req->t[w++] = req->t[i];
    }
    req->n = w;

    size_t shift = 0;
    if (!selected) {
        shift = spread_offset(in->pvc_name) % (uint32_t)req->n;
    } else if (!cfg->strict_topology) {
        size_t i = 0;
        while (i < req->n && !term_subset(&req->t[i], sel))
            i++;
        if (i == req->n) {
            plan_buf b = {0};
            plan_buf_add(&b, "topology ");
            plan_buf_add_term(&b, sel);
            plan_buf_add(&b, " from selected node ");
            plan_buf_add_quoted(&b, in->selected_node);
            plan_buf_add(&b, " is not in requisite: ");
            add_terms(&b, req);
            return fail_buf(&b, -EINVAL);
        }
        shift = i;
    }
    *out = to_requirement(req, shift);
    return 0;
}

int prov_topology(const prov_config *cfg, const prov_topology_in *in,
                  Csi__V1__TopologyRequirement **out)
{
    plan_term sel = {0};
    terms req = {0};

    *out = NULL;
    if (!cfg->topology)
        return 0;
    int r = plan_topology(cfg, in, &sel, &req, out);
    free(sel.segs);
    terms_free(&req);
    return r;
}

/* ---- PV nodeAffinity ----------------------------------------------------- */

json_object *prov_node_affinity(Csi__V1__Topology *const *topologies, size_t n)
{
    terms ts = {0};
    for (size_t i = 0; i < n; i++) {
        const Csi__V1__Topology *topo = topologies[i];
        if (topo == NULL || topo->n_segments == 0)
            continue;
        plan_term t = {.segs = util_calloc(topo->n_segments, sizeof(plan_seg)), .n = 0};
        for (size_t s = 0; s < topo->n_segments; s++) {
            const char *k = topo->segments[s]->key, *v = topo->segments[s]->value;
            size_t j = 0;
            while (j < t.n && strcmp(t.segs[j].key, k) != 0)
                j++;
            /* A repeated key on the wire: the last value wins, as in a map. */
            t.segs[j] = (plan_seg){k, v};
            if (j == t.n)
                t.n++;
        }
        term_sort(&t);
        terms_push(&ts, t);
    }
    if (ts.n == 0) {
        terms_free(&ts);
        return NULL;
    }
    /* Sorted terms and expressions: deterministic output (upstream follows
     * Go's map order, so its PV differs run to run). */
    qsort(ts.t, ts.n, sizeof(*ts.t), term_cmp);
    json_object *node_terms = json_object_new_array();
    for (size_t i = 0; i < ts.n; i++) {
        json_object *exprs = json_object_new_array();
        for (size_t s = 0; s < ts.t[i].n; s++) {
            json_object *e = json_object_new_object();
            json_object *values = json_object_new_array();
            json_object_array_add(values, json_object_new_string(ts.t[i].segs[s].value));
            json_object_object_add(e, "key", json_object_new_string(ts.t[i].segs[s].key));
            json_object_object_add(e, "operator", json_object_new_string("In"));
            json_object_object_add(e, "values", values);
            json_object_array_add(exprs, e);
        }
        json_object *term = json_object_new_object();
        json_object_object_add(term, "matchExpressions", exprs);
        json_object_array_add(node_terms, term);
    }
    terms_free(&ts);
    json_object *required = json_object_new_object();
    json_object_object_add(required, "nodeSelectorTerms", node_terms);
    json_object *affinity = json_object_new_object();
    json_object_object_add(affinity, "required", required);
    return affinity;
}
