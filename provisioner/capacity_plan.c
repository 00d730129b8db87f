/*
 * Storage capacity planning: what CSIStorageCapacity objects should exist
 * (topology segments x wanted StorageClasses), what each one looks like, and
 * what to write to get there from what the API holds. No I/O: capacity.c
 * feeds it informer contents and GetCapacity answers.
 *
 * Segments and work items are canonical strings (see provisioner.h), so
 * equality is strcmp, sets are sorted arrays or hash tables of text, and
 * the work queue dedups items for free.
 */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provisioner.h"
#include "kobj/kobj.h"

/* ---- small helpers ----------------------------------------------------------- */

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

typedef struct {
    const char *key;
    const char *value;
} kv;

static int kv_cmp(const void *a, const void *b)
{
    return strcmp(((const kv *)a)->key, ((const kv *)b)->key);
}

/* "k=v,k2=v2" of pairs sorted by key; NULL when a key or value holds a
 * separator (then no segment can equal it). */
static char *join_pairs(kv *p, size_t n)
{
    qsort(p, n, sizeof(*p), kv_cmp);
    size_t len = 1;
    for (size_t i = 0; i < n; i++) {
        if (strpbrk(p[i].key, "=,") || strpbrk(p[i].value, "=,") || !*p[i].key)
            return NULL;
        len += strlen(p[i].key) + strlen(p[i].value) + 2;
    }
    char *s = util_calloc(1, len);
    char *w = s;
    for (size_t i = 0; i < n; i++)
        w += sprintf(w, "%s%s=%s", i ? "," : "", p[i].key, p[i].value);
    return s;
}

/* Calls fn for each "key=value" pair of a segment. */
static void each_pair(const char *segment,
                      void (*fn)(void *ud, const char *k, size_t klen, const char *v, size_t vlen),
                      void *ud)
{
    const char *p = segment;
    while (p && *p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (eq)
            fn(ud, p, (size_t)(eq - p), eq + 1, len - (size_t)(eq - p) - 1);
        p = end ? end + 1 : NULL;
    }
}

/* ---- classes and segments --------------------------------------------------------- */

bool prov_cap_class_wanted(const prov_cap_config *cc, const json_object *sc)
{
    if (!streq(kobj_str(sc, "provisioner"), cc->driver_name))
        return false;
    /* An unset mode is Immediate, the API server's default. */
    return streq(kobj_str(sc, "volumeBindingMode"), "WaitForFirstConsumer") ||
           cc->immediate_binding;
}

int prov_cap_node_segment(const char *driver, const json_object *csinode, const json_object *node,
                          char **out)
{
    *out = NULL;
    json_object *drivers = kobj_path(csinode, "spec.drivers");
    size_t nd = kobj_len(drivers);
    json_object *keys = NULL;
    bool found = false;
    for (size_t i = 0; i < nd && !found; i++) {
        json_object *d = kobj_at(drivers, i);
        if (streq(kobj_str(d, "name"), driver)) {
            found = true;
            keys = kobj_get(d, "topologyKeys");
        }
    }
    if (!found)
        return util_err_set(-ENOENT, "driver %s is not on CSINode %s", driver, kobj_name(csinode));
    if (!node)
        return util_err_set(-ENOENT, "no Node for CSINode %s", kobj_name(csinode));
    size_t nk = kobj_len(keys);
    json_object *labels = kobj_path(node, "metadata.labels");
    kv *pairs = util_calloc(nk + 1, sizeof(*pairs));
    size_t n = 0;
    for (size_t i = 0; i < nk; i++) {
        const char *k = kobj_str_at(keys, i);
        const char *v = kobj_str(labels, k);
        if (!k || !v) {
            /* kubelet recorded the key before the Node got its label: the
             * node counts once the label arrives. */
            free(pairs);
            return util_err_set(-ENOENT, "Node %s lacks topology label %s", kobj_name(node),
                                k ? k : "");
        }
        bool dup = false;
        for (size_t j = 0; j < n; j++)
            dup = dup || strcmp(pairs[j].key, k) == 0;
        if (!dup)
            pairs[n++] = (kv){k, v};
    }
    *out = join_pairs(pairs, n);
    free(pairs);
    if (!*out)
        return util_err_set(-ENOENT, "Node %s has a topology label that cannot be a segment",
                            kobj_name(node));
    return 0;
}

char *prov_cap_key(const char *sc_name, const char *segment)
{
    return util_asprintf("%s/%s", sc_name, segment ? segment : "");
}

int prov_cap_key_split(const char *key, char **sc_name, char **segment)
{
    *sc_name = NULL;
    *segment = NULL;
    const char *slash = key ? strchr(key, '/') : NULL;
    if (!slash || slash == key)
        return util_err_set(-EINVAL, "not a capacity work item: %s", key ? key : "(null)");
    *sc_name = strndup(key, (size_t)(slash - key));
    if (!*sc_name)
        abort();
    *segment = util_strdup(slash + 1);
    return 0;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int prov_cap_items(const prov_cap_config *cc, const char *const *segments, size_t n_segments,
                   const json_object *const *classes, size_t n_classes, char ***keys, size_t *n)
{
    size_t wanted = 0;
    for (size_t i = 0; i < n_classes; i++)
        wanted += prov_cap_class_wanted(cc, classes[i]);
    char **k = util_calloc(wanted * n_segments + 1, sizeof(*k));
    size_t m = 0;
    for (size_t i = 0; i < n_classes; i++) {
        if (!prov_cap_class_wanted(cc, classes[i]))
            continue;
        const char *name = kobj_name(classes[i]);
        for (size_t j = 0; name && j < n_segments; j++)
            k[m++] = prov_cap_key(name, segments[j]);
    }
    qsort(k, m, sizeof(*k), str_cmp);
    *keys = k;
    *n = m;
    return 0;
}

void prov_cap_keys_free(char **keys, size_t n)
{
    for (size_t i = 0; keys && i < n; i++)
        free(keys[i]);
    free(keys);
}

int prov_cap_affinity_segments(const json_object *pv, char ***segs, size_t *n)
{
    json_object *terms = kobj_path(pv, "spec.nodeAffinity.required.nodeSelectorTerms");
    size_t nt = kobj_len(terms);
    char **out = util_calloc(nt + 1, sizeof(void *));
    size_t m = 0;
    for (size_t i = 0; i < nt; i++) {
        json_object *term = kobj_at(terms, i);
        json_object *fields = kobj_get(term, "matchFields");
        json_object *exprs = kobj_get(term, "matchExpressions");
        if (kobj_len(fields) > 0)
            continue;
        size_t ne = kobj_len(exprs);
        kv *pairs = util_calloc(ne + 1, sizeof(*pairs));
        bool ok = true;
        for (size_t j = 0; j < ne && ok; j++) {
            json_object *e = kobj_at(exprs, j);
            json_object *values = kobj_get(e, "values");
            ok = streq(kobj_str(e, "operator"), "In") && kobj_str(e, "key") &&
                 kobj_len(values) == 1 && kobj_str_at(values, 0);
            if (ok)
                pairs[j] = (kv){kobj_str(e, "key"), kobj_str_at(values, 0)};
        }
        char *seg = ok ? join_pairs(pairs, ne) : NULL;
        free(pairs);
        if (!seg)
            continue;
        bool dup = false;
        for (size_t k = 0; k < m && !dup; k++)
            dup = strcmp(out[k], seg) == 0;
        if (dup)
            free(seg);
        else
            out[m++] = seg;
    }
    qsort(out, m, sizeof(*out), str_cmp);
    *segs = out;
    *n = m;
    return 0;
}

int prov_cap_fixed_segment(const Csi__V1__Topology *t, char **out)
{
    *out = NULL;
    size_t n = t ? t->n_segments : 0;
    kv *pairs = util_calloc(n + 1, sizeof(*pairs));
    size_t m = 0;
    for (size_t i = 0; i < n; i++) {
        const char *k = t->segments[i]->key ? t->segments[i]->key : "";
        const char *v = t->segments[i]->value ? t->segments[i]->value : "";
        /* A protobuf map keeps the last entry of a repeated key. */
        size_t j = 0;
        while (j < m && strcmp(pairs[j].key, k) != 0)
            j++;
        pairs[j] = (kv){k, v};
        m += j == m;
    }
    *out = join_pairs(pairs, m);
    free(pairs);
    if (!*out)
        return util_err_set(-EINVAL, "the node's topology has an empty key or a key or value "
                                     "with \"=\" or \",\": no topology segment can hold it");
    return 0;
}

/* ---- managed-by ------------------------------------------------------------------------ */

void plan_fnv32a_hex(const char *s, char out[9])
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        h ^= *p;
        h *= 16777619u;
    }
    snprintf(out, 9, "%08x", h);
}

char *prov_cap_managed_by(const char *node)
{
    if (!node || !*node)
        return util_strdup(PROV_CAP_MANAGED_BY);
    const char *base = PROV_CAP_MANAGED_BY;
    char *name = util_asprintf("%s-%s", base, node);
    size_t nl = strlen(node);
    if (strlen(name) <= PROV_CAP_LABEL_MAX)
        return name;
    char hash[9];
    char *out;
    if (nl + 10 >= PROV_CAP_LABEL_MAX) {
        /* No room for the node: the base and a hash of the whole name
         * (20 + 1 + 8 characters). */
        plan_fnv32a_hex(name, hash);
        out = util_asprintf("%s-%s", base, hash);
    } else {
        /* Keep the node whole, cut the base, and tell cut bases apart by
         * the hash of the base (upstream's rule, so labels match). */
        plan_fnv32a_hex(base, hash);
        out = util_asprintf("%.*s-%s-%s", (int)(PROV_CAP_LABEL_MAX - 10 - nl), base, hash, node);
    }
    free(name);
    return out;
}

bool prov_cap_label_value_ok(const char *v)
{
    size_t n = v ? strlen(v) : 0;
    if (n > PROV_CAP_LABEL_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)v[i];
        bool alnum = isalnum(ch) != 0;
        if (!alnum && ((i == 0 || i == n - 1) || !strchr("-_.", ch)))
            return false;
    }
    return true;
}

/* ---- existing objects --------------------------------------------------------------- */

bool prov_cap_is_managed(const prov_cap_config *cc, const json_object *csc)
{
    json_object *labels = kobj_path(csc, "metadata.labels");
    return streq(kobj_str(labels, PROV_CAP_LABEL_DRIVER), cc->driver_name) &&
           streq(kobj_str(labels, PROV_CAP_LABEL_MANAGED_BY), cc->managed_by);
}

char *prov_cap_object_key(const json_object *csc)
{
    const char *name = kobj_name(csc);
    const char *sc = kobj_str(csc, "storageClassName");
    json_object *sel = kobj_get(csc, "nodeTopology");
    json_object *exprs = kobj_get(sel, "matchExpressions");
    json_object *ml = kobj_get(sel, "matchLabels");
    char *seg = NULL;
    bool ok = sc && *sc && !strchr(sc, '/') && kobj_len(exprs) == 0;
    if (ok) {
        size_t n = ml && json_object_is_type(ml, json_type_object)
                       ? (size_t)json_object_object_length(ml)
                       : 0;
        kv *pairs = util_calloc(n + 1, sizeof(*pairs));
        size_t i = 0;
        if (n > 0) {
            json_object_object_foreach(ml, k, v)
            {
                pairs[i++] = (kv){
                    k, json_object_is_type(v, json_type_string) ? json_object_get_string(v) : ","};
            }
        }
        seg = join_pairs(pairs, i);
        free(pairs);
    }
    char *key = seg ? prov_cap_key(sc, seg) : util_asprintf("!%s", name ? name : "");
    free(seg);
    return key;
}

/* ---- objects to write ----------------------------------------------------------------- */

static void add_label(void *ud, const char *k, size_t klen, const char *v, size_t vlen)
{
    char *key = strndup(k, klen);
    if (!key)
        abort();
    json_object_object_add(ud, key, json_object_new_string_len(v, (int)vlen));
    free(key);
}

json_object *prov_cap_node_topology(const char *segment)
{
    json_object *sel = json_object_new_object();
    if (segment && *segment) {
        json_object *ml = json_object_new_object();
        each_pair(segment, add_label, ml);
        json_object_object_add(sel, "matchLabels", ml);
    }
    return sel;
}

struct topo_build {
    Csi__V1__Topology *t;
};

static void add_segment_entry(void *ud, const char *k, size_t klen, const char *v, size_t vlen)
{
    Csi__V1__Topology *t = ((struct topo_build *)ud)->t;
    Csi__V1__Topology__SegmentsEntry *e = util_calloc(1, sizeof(*e));
    csi__v1__topology__segments_entry__init(e);
    e->key = strndup(k, klen);
    e->value = strndup(v, vlen);
    if (!e->key || !e->value)
        abort();
    t->segments[t->n_segments++] = e;
}

Csi__V1__Topology *prov_cap_segment_topology(const char *segment)
{
    if (!segment || !*segment)
        return NULL;
    size_t n = 1;
    for (const char *p = segment; *p; p++)
        n += *p == ',';
    Csi__V1__Topology *t = util_calloc(1, sizeof(*t));
    csi__v1__topology__init(t);
    t->segments = util_calloc(n, sizeof(void *));
    struct topo_build b = {t};
    each_pair(segment, add_segment_entry, &b);
    return t;
}

void prov_cap_topology_free(Csi__V1__Topology *t)
{
    if (t)
        protobuf_c_message_free_unpacked(&t->base, NULL);
}

static json_object *quantity(int64_t v)
{
    char buf[PROV_QUANTITY_MAX];
    prov_quantity_format(v, buf, sizeof(buf));
    return json_object_new_string(buf);
}

int prov_cap_build(const prov_cap_config *cc, const char *key, int64_t capacity,
                   const int64_t *max_size, json_object **out)
{
    *out = NULL;
    char *sc = NULL, *seg = NULL;
    int rc = prov_cap_key_split(key, &sc, &seg);
    if (rc < 0)
        return rc;
    json_object *o = json_object_new_object();
    json_object_object_add(o, "apiVersion", json_object_new_string("storage.k8s.io/v1"));
    json_object_object_add(o, "kind", json_object_new_string("CSIStorageCapacity"));
    json_object *m = json_object_new_object();
    json_object_object_add(m, "generateName", json_object_new_string(PROV_CAP_GENERATE_NAME));
    json_object_object_add(m, "namespace", json_object_new_string(cc->namespace));
    json_object *labels = json_object_new_object();
    json_object_object_add(labels, PROV_CAP_LABEL_DRIVER, json_object_new_string(cc->driver_name));
    json_object_object_add(labels, PROV_CAP_LABEL_MANAGED_BY,
                           json_object_new_string(cc->managed_by));
    json_object_object_add(m, "labels", labels);
    if (cc->owner) {
        json_object *refs = json_object_new_array();
        json_object *copy = NULL;
        json_object_deep_copy((json_object *)cc->owner, &copy, NULL);
        json_object_array_add(refs, copy);
        json_object_object_add(m, "ownerReferences", refs);
    }
    json_object_object_add(o, "metadata", m);
    json_object_object_add(o, "storageClassName", json_object_new_string(sc));
    json_object_object_add(o, "nodeTopology", prov_cap_node_topology(seg));
    json_object_object_add(o, "capacity", quantity(capacity));
    if (max_size)
        json_object_object_add(o, "maximumVolumeSize", quantity(*max_size));
    free(sc);
    free(seg);
    *out = o;
    return 0;
}

/* Upstream's isOwnedByUs: a controller reference with the owner's UID. */
static bool owned_by(const json_object *csc, const json_object *owner)
{
    const char *uid = kobj_str(owner, "uid");
    json_object *refs = kobj_path(csc, "metadata.ownerReferences");
    size_t n = kobj_len(refs);
    for (size_t i = 0; i < n; i++) {
        json_object *r = kobj_at(refs, i);
        if (kobj_bool(r, "controller", false) && streq(kobj_str(r, "uid"), uid))
            return true;
    }
    return false;
}

/* Parsed value of a quantity field; false when absent or unparsable. */
static bool field_value(const json_object *o, const char *key, int64_t *v)
{
    const char *s = kobj_str(o, key);
    return s && prov_quantity_parse(s, v) == 0;
}

int prov_cap_decide(const prov_cap_config *cc, const json_object *existing, int64_t capacity,
                    const int64_t *max_size, prov_cap_action *action, char **patch)
{
    *patch = NULL;
    if (!existing) {
        *action = PROV_CAP_CREATE;
        return 0;
    }
    int64_t cur = 0, cur_max = 0;
    bool has_cur = field_value(existing, "capacity", &cur);
    bool has_max = field_value(existing, "maximumVolumeSize", &cur_max);
    bool same_max = max_size ? has_max && cur_max == *max_size : !has_max;
    bool owned = !cc->owner || owned_by(existing, cc->owner);
    /* Values, not texts: "1Gi" and "1073741824" are the same capacity. */
    if (has_cur && cur == capacity && same_max && owned) {
        *action = PROV_CAP_NONE;
        return 0;
    }
    json_object *p = json_object_new_object();
    json_object *m = json_object_new_object();
    const char *rv = kobj_rv(existing);
    if (rv)
        json_object_object_add(m, "resourceVersion", json_object_new_string(rv));
    if (!owned) {
        /* A merge patch replaces the list: keep the others' references. */
        json_object *refs = json_object_new_array();
        json_object *old = kobj_path(existing, "metadata.ownerReferences");
        size_t n = kobj_len(old);
        for (size_t i = 0; i < n; i++)
            json_object_array_add(refs, json_object_get(kobj_at(old, i)));
        json_object *copy = NULL;
        json_object_deep_copy((json_object *)cc->owner, &copy, NULL);
        json_object_array_add(refs, copy);
        json_object_object_add(m, "ownerReferences", refs);
    }
    json_object_object_add(p, "metadata", m);
    json_object_object_add(p, "capacity", quantity(capacity));
    json_object_object_add(p, "maximumVolumeSize", max_size ? quantity(*max_size) : NULL);
    *patch = kobj_to_text(p, NULL);
    json_object_put(p);
    *action = PROV_CAP_UPDATE;
    return 0;
}

const char *prov_cap_action_name(prov_cap_action a)
{
    switch (a) {
    case PROV_CAP_NONE:
        return "none";
    case PROV_CAP_CREATE:
        return "create";
    case PROV_CAP_UPDATE:
        return "update";
    case PROV_CAP_KEEP:
        return "keep";
    case PROV_CAP_DELETE:
        return "delete";
    }
    return "?";
}

/* ---- desired vs existing -------------------------------------------------------------- */

struct obj_ref {
    char *key;
    const char *name;
    bool owned;
};

static int obj_cmp(const void *a, const void *b)
{
    const struct obj_ref *x = a, *y = b;
    int c = strcmp(x->key, y->key);
    if (c)
        return c;
    /* Within a key, the object to keep first: ours, then by name. */
    if (x->owned != y->owned)
        return x->owned ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void push(prov_cap_step **s, size_t *n, size_t *cap, prov_cap_action a, const char *key,
                 const char *name)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 16;
        prov_cap_step *bigger = util_calloc(*cap, sizeof(**s));
        if (*n)
            memcpy(bigger, *s, *n * sizeof(**s));
        free(*s);
        *s = bigger;
    }
    (*s)[(*n)++] = (prov_cap_step){a, util_strdup(key), name ? util_strdup(name) : NULL};
}

static bool in_sorted(const char *const *set, size_t n, const char *key)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(set[mid], key);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

static int step_name_cmp(const void *a, const void *b)
{
    const prov_cap_step *x = a, *y = b;
    return strcmp(x->name, y->name);
}

int prov_cap_diff(const prov_cap_config *cc, const char *const *desired, size_t n_desired,
                  const json_object *const *existing, size_t n_existing, prov_cap_step **steps,
                  size_t *n_steps)
{
    struct obj_ref *objs = util_calloc(n_existing + 1, sizeof(*objs));
    size_t m = 0;
    for (size_t i = 0; i < n_existing; i++) {
        const char *name = kobj_name(existing[i]);
        if (!name || !prov_cap_is_managed(cc, existing[i]))
            continue;
        objs[m++] = (struct obj_ref){prov_cap_object_key(existing[i]), name,
                                     !cc->owner || owned_by(existing[i], cc->owner)};
    }
    qsort(objs, m, sizeof(*objs), obj_cmp);
    prov_cap_step *s = NULL;
    size_t n = 0, cap = 0;
    /* Merge the sorted desired keys with the sorted objects. */
    size_t j = 0;
    for (size_t i = 0; i < n_desired; i++) {
        while (j < m && strcmp(objs[j].key, desired[i]) < 0)
            j++;
        if (j < m && strcmp(objs[j].key, desired[i]) == 0)
            push(&s, &n, &cap, PROV_CAP_KEEP, desired[i], objs[j].name);
        else
            push(&s, &n, &cap, PROV_CAP_CREATE, desired[i], NULL);
    }
    size_t first_delete = n;
    for (size_t k = 0; k < m; k++) {
        bool kept = in_sorted(desired, n_desired, objs[k].key) &&
                    (k == 0 || strcmp(objs[k - 1].key, objs[k].key) != 0);
        if (!kept)
            push(&s, &n, &cap, PROV_CAP_DELETE, objs[k].key, objs[k].name);
    }
    if (n > first_delete)
        qsort(s + first_delete, n - first_delete, sizeof(*s), step_name_cmp);
    for (size_t k = 0; k < m; k++)
        free(objs[k].key);
    free(objs);
    *steps = s;
    *n_steps = n;
    return 0;
}

void prov_cap_steps_free(prov_cap_step *steps, size_t n)
{
    for (size_t i = 0; steps && i < n; i++) {
        free(steps[i].key);
        free(steps[i].name);
    }
    free(steps);
}

/* ---- owner ---------------------------------------------------------------------------- */

char *prov_cap_owner_path(const char *api_version, const char *kind, const char *ns,
                          const char *name)
{
    size_t kl = strlen(kind);
    char *plural = util_calloc(1, kl + 3);
    for (size_t i = 0; i < kl; i++)
        plural[i] = (char)tolower((unsigned char)kind[i]);
    char last = kl ? plural[kl - 1] : 0;
    char before = kl > 1 ? plural[kl - 2] : 0;
    if (last == 's' || last == 'x' || last == 'z' ||
        (last == 'h' && (before == 'c' || before == 's')))
        strcpy(plural + kl, "es");
    else if (last == 'y' && before && !strchr("aeiou", before))
        strcpy(plural + kl - 1, "ies");
    else
        strcpy(plural + kl, "s");
    /* The core group is "v1" under /api; every other one lives under /apis. */
    char *path = strchr(api_version, '/')
                     ? util_asprintf("/apis/%s/namespaces/%s/%s/%s", api_version, ns, plural, name)
                     : util_asprintf("/api/%s/namespaces/%s/%s/%s", api_version, ns, plural, name);
    free(plural);
    return path;
}

static json_object *owner_ref(const char *api_version, const char *kind, const char *name,
                              const char *uid)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "apiVersion", json_object_new_string(api_version));
    json_object_object_add(r, "kind", json_object_new_string(kind));
    json_object_object_add(r, "name", json_object_new_string(name));
    json_object_object_add(r, "uid", json_object_new_string(uid));
    json_object_object_add(r, "controller", json_object_new_boolean(1));
    return r;
}

int prov_cap_owner_step(const json_object *obj, const char *api_version, const char *kind,
                        int levels, json_object **ref, char **next_path, char **next_api_version,
                        char **next_kind)
{
    *ref = NULL;
    *next_path = NULL;
    *next_api_version = NULL;
    *next_kind = NULL;
    json_object *m = kobj_get(obj, "metadata");
    const char *name = kobj_str(m, "name"), *ns = kobj_str(m, "namespace"),
               *uid = kobj_str(m, "uid");
    if (!name || !uid)
        return util_err_set(-EINVAL, "%s %s has no name or uid", api_version, kind);
    if (levels <= 0) {
        *ref = owner_ref(api_version, kind, name, uid);
        return 0;
    }
    json_object *refs = kobj_get(m, "ownerReferences");
    size_t n = kobj_len(refs);
    for (size_t i = 0; i < n; i++) {
        json_object *r = kobj_at(refs, i);
        if (!kobj_bool(r, "controller", false))
            continue;
        const char *av = kobj_str(r, "apiVersion"), *k = kobj_str(r, "kind"),
                   *on = kobj_str(r, "name"), *ou = kobj_str(r, "uid");
        if (!av || !k || !on || !ou)
            return util_err_set(-EINVAL, "%s %s %s has an incomplete controller reference",
                                api_version, kind, name);
        if (levels == 1) {
            *ref = owner_ref(av, k, on, ou);
            return 0;
        }
        *next_path = prov_cap_owner_path(av, k, ns ? ns : "", on);
        *next_api_version = util_strdup(av);
        *next_kind = util_strdup(k);
        return 0;
    }
    return util_err_set(-ENOENT,
                        "%s/%s \"%s\" in namespace \"%s\" has no controlling owner, cannot unwind "
                        "the ownership further",
                        api_version, kind, name, ns ? ns : "");
}

/* ---- the API at start-up ----------------------------------------------------- */

bool prov_cap_api_served(const json_object *resource_list)
{
    if (!streq(kobj_str(resource_list, "groupVersion"), PROV_CAP_GROUP_VERSION))
        return false;
    json_object *res = kobj_arr(resource_list, "resources");
    for (size_t i = 0; i < kobj_len(res); i++) {
        json_object *r = kobj_at(res, i);
        /* "csistoragecapacities/status" would be a subresource, not the type */
        if (streq(kobj_str(r, "name"), "csistoragecapacities") &&
            streq(kobj_str(r, "kind"), "CSIStorageCapacity"))
            return true;
    }
    return false;
}
