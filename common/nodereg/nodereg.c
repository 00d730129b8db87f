/*
 * The pure half of nodereg: a NodeGetInfo answer becomes a driver record;
 * a Node or CSINode as read plus that record become a JSON patch that is
 * safe against other writers (see nodereg.h for the rules).
 *
 * Data: patches are built as json-c arrays of operations and serialized
 * once, so every value is escaped by json-c and never pasted into text.
 */
#include "nodereg/nodereg.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "obs/obs.h"
#include "util/util.h"

/* ---- the driver record ----------------------------------------------------------- */

static int seg_cmp(const void *a, const void *b)
{
    return strcmp(((const nodereg_segment *)a)->key, ((const nodereg_segment *)b)->key);
}

void nodereg_driver_clear(nodereg_driver *d)
{
    if (!d)
        return;
    for (size_t i = 0; i < d->n_segments; i++) {
        free(d->segments[i].key);
        free(d->segments[i].value);
    }
    free(d->segments);
    free(d->name);
    free(d->node_id);
    memset(d, 0, sizeof(*d));
}

int nodereg_driver_from_info(const char *driver, const Csi__V1__NodeGetInfoResponse *info,
                             nodereg_driver *d)
{
    memset(d, 0, sizeof(*d));
    if (!driver || !*driver)
        return util_err_set(-EINVAL, "error adding CSI driver node info: driver name is empty");
    if (!info || !info->node_id || !*info->node_id)
        return util_err_set(-EINVAL,
                            "error adding CSI driver node info: driverNodeID must not be empty");
    d->name = util_strdup(driver);
    d->node_id = util_strdup(info->node_id);
    if (info->max_volumes_per_node > INT32_MAX) {
        obs_warn("Exceeded max supported attach limit value, truncating it to %d", INT32_MAX);
        d->max_volumes = INT32_MAX;
    } else if (info->max_volumes_per_node < 0) {
        obs_error("Invalid attach limit value %lld cannot be added to CSINode object for %s",
                  (long long)info->max_volumes_per_node, driver);
    } else {
        d->max_volumes = info->max_volumes_per_node;
    }
    const Csi__V1__Topology *t = info->accessible_topology;
    size_t n = t ? t->n_segments : 0;
    d->segments = util_calloc(n ? n : 1, sizeof(*d->segments));
    for (size_t i = 0; i < n; i++) {
        const char *k = t->segments[i] ? t->segments[i]->key : NULL;
        const char *v = t->segments[i] ? t->segments[i]->value : NULL;
        if (!k || !*k) {
            nodereg_driver_clear(d);
            return util_err_set(-EINVAL, "driver %s reports a topology segment with an empty key",
                                driver);
        }
        d->segments[d->n_segments].key = util_strdup(k);
        d->segments[d->n_segments].value = util_strdup(v ? v : "");
        d->n_segments++;
    }
    /* A protobuf map may repeat a key on the wire; the last one wins there. */
    qsort(d->segments, d->n_segments, sizeof(*d->segments), seg_cmp);
    size_t w = 0;
    for (size_t i = 0; i < d->n_segments; i++) {
        if (w > 0 && strcmp(d->segments[w - 1].key, d->segments[i].key) == 0) {
            free(d->segments[w - 1].value);
            d->segments[w - 1].value = d->segments[i].value;
            free(d->segments[i].key);
        } else {
            d->segments[w++] = d->segments[i];
        }
    }
    d->n_segments = w;
    return 0;
}

/* ---- the nodeid annotation --------------------------------------------------------- */

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Parses `text` as Go's json.Unmarshal into map[string]string would: an
 * object of strings, or `null`; trailing blanks allowed, anything else not. */
static int nodeid_parse(const char *text, json_object **out)
{
    *out = NULL;
    if (!text || !*text) {
        *out = json_object_new_object();
        return 0;
    }
    size_t len = strlen(text), used = 0;
    json_object *o = NULL;
    bool ok = kobj_parse(text, len, &used, &o) == 0;
    for (size_t i = used; ok && i < len; i++)
        if (!strchr(" \t\r\n", text[i]))
            ok = false;
    if (ok && !o) {
        *out = json_object_new_object(); /* JSON null: Go's nil map */
        return 0;
    }
    if (ok && json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v)
        {
            (void)k;
            if (!json_object_is_type(v, json_type_string))
                ok = false;
        }
    } else {
        ok = false;
    }
    if (!ok) {
        json_object_put(o);
        return util_err_set(-EINVAL,
                            "failed to parse node's \"%s\" annotation value (%s): not a JSON "
                            "object of strings; fix or remove the annotation",
                            NODEREG_NODEID_ANNOTATION, text);
    }
    *out = o;
    return 0;
}

/* Compact JSON of `o` (an object of strings) with sorted keys, or NULL
 * when it is empty. */
static char *nodeid_render(json_object *o)
{
    size_t n = (size_t)json_object_object_length(o);
    if (n == 0)
        return NULL;
    const char **keys = util_calloc(n, sizeof(*keys));
    size_t i = 0;
    json_object_object_foreach(o, k, v)
    {
        (void)v;
        keys[i++] = k;
    }
    qsort(keys, n, sizeof(*keys), str_cmp);
    json_object *sorted = json_object_new_object();
    for (i = 0; i < n; i++)
        json_object_object_add(sorted, keys[i], json_object_get(kobj_get(o, keys[i])));
    char *s = kobj_to_text(sorted, NULL);
    json_object_put(sorted);
    free(keys);
    return s;
}

/* As nodereg_nodeid_merge; *changed tells whether our entry changed. */
static int nodeid_merge(const char *old, const char *driver, const char *node_id, char **out,
                        bool *changed)
{
    *out = NULL;
    *changed = false;
    json_object *m = NULL;
    int r = nodeid_parse(old, &m);
    if (r < 0)
        return r;
    const char *have = kobj_str(m, driver);
    if (node_id) {
        *changed = !have || strcmp(have, node_id) != 0;
        json_object_object_add(m, driver, json_object_new_string(node_id));
    } else {
        *changed = have != NULL;
        json_object_object_del(m, driver);
    }
    *out = nodeid_render(m);
    json_object_put(m);
    return 0;
}

int nodereg_nodeid_merge(const char *old, const char *driver, const char *node_id, char **out)
{
    bool changed;
    return nodeid_merge(old, driver, node_id, out, &changed);
}

/* ---- patch building ---------------------------------------------------------------- */

typedef struct plan {
    json_object *ops;
    bool need_rv; /* something absent is added: guard with the resourceVersion */
} plan;

/* Appends one operation; takes ownership of `value` (NULL for remove). */
static void op(plan *p, const char *name, const char *path, json_object *value)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "op", json_object_new_string(name));
    json_object_object_add(o, "path", json_object_new_string(path));
    if (value || strcmp(name, "remove") != 0)
        json_object_object_add(o, "value", value);
    json_object_array_add(p->ops, o);
}

static char *map_path(const char *map, const char *key)
{
    char *esc = kobj_pointer_escape(key);
    char *path = util_asprintf("/metadata/%s/%s", map, esc);
    free(esc);
    return path;
}

/* The patch text (NULL when there is nothing to do); frees p->ops. */
static int plan_finish(plan *p, const json_object *obj, const char *what, char **patch)
{
    *patch = NULL;
    size_t n = json_object_array_length(p->ops);
    int r = 0;
    if (n > 0) {
        json_object *all = json_object_new_array();
        if (p->need_rv) {
            const char *rv = kobj_rv(obj);
            if (!rv || !*rv) {
                json_object_put(all);
                json_object_put(p->ops);
                return util_err_set(-EINVAL, "%s has no metadata.resourceVersion", what);
            }
            plan tmp = {.ops = all};
            op(&tmp, "test", "/metadata/resourceVersion", json_object_new_string(rv));
        }
        for (size_t i = 0; i < n; i++)
            json_object_array_add(all, json_object_get(json_object_array_get_idx(p->ops, i)));
        *patch = kobj_to_text(all, NULL);
        json_object_put(all);
    }
    json_object_put(p->ops);
    p->ops = NULL;
    return r;
}

/* metadata.<map> as an object, NULL when absent/null; -EINVAL for another type. */
static int meta_map(const json_object *obj, const char *map, const char *what, json_object **out)
{
    *out = NULL;
    json_object *meta = kobj_meta(obj);
    if (!meta)
        return util_err_set(-EINVAL, "%s has no metadata object", what);
    json_object *m = kobj_get(meta, map);
    if (m && !json_object_is_type(m, json_type_object))
        return util_err_set(-EINVAL, "%s has metadata.%s that is not a map", what, map);
    *out = m;
    return 0;
}

/* Sets metadata.<map>[key] = value in the plan: `test` of the old value when
 * there is one, else an add guarded by the resourceVersion. */
static void plan_set_meta(plan *p, json_object *m, const char *map, const char *key,
                          const char *value)
{
    const char *old = kobj_str(m, key);
    if (!m) {
        json_object *nm = json_object_new_object();
        json_object_object_add(nm, key, json_object_new_string(value));
        char *path = util_asprintf("/metadata/%s", map);
        op(p, "add", path, nm);
        free(path);
        p->need_rv = true;
        return;
    }
    char *path = map_path(map, key);
    if (old) {
        op(p, "test", path, json_object_new_string(old));
        op(p, "replace", path, json_object_new_string(value));
    } else {
        op(p, "add", path, json_object_new_string(value));
        p->need_rv = true;
    }
    free(path);
}

/* ---- Node -------------------------------------------------------------------------------- */

int nodereg_labels_check(const json_object *node, const nodereg_driver *d)
{
    for (size_t i = 0; i < d->n_segments; i++) {
        const char *have = kobj_label(node, d->segments[i].key);
        if (have && strcmp(have, d->segments[i].value) != 0)
            return util_err_set(
                -EEXIST,
                "detected topology value collision: driver %s reported \"%s\":\"%s\" "
                "but existing label is \"%s\":\"%s\"",
                d->name, d->segments[i].key, d->segments[i].value, d->segments[i].key, have);
    }
    return 0;
}

int nodereg_node_patch(const json_object *node, const nodereg_driver *d, bool install, char **patch)
{
    *patch = NULL;
    json_object *ann = NULL, *labels = NULL;
    int r = meta_map(node, "annotations", "Node", &ann);
    if (r == 0)
        r = meta_map(node, "labels", "Node", &labels);
    if (r < 0)
        return r;
    json_object *raw = kobj_get(ann, NODEREG_NODEID_ANNOTATION);
    if (raw && !json_object_is_type(raw, json_type_string))
        return util_err_set(-EINVAL, "Node annotation %s is not a string",
                            NODEREG_NODEID_ANNOTATION);
    const char *old = kobj_str(ann, NODEREG_NODEID_ANNOTATION);
    if (install && (r = nodereg_labels_check(node, d)) < 0)
        return r;
    char *merged = NULL;
    bool changed = false;
    r = nodeid_merge(old, d->name, install ? d->node_id : NULL, &merged, &changed);
    if (r < 0)
        return r;
    plan p = {.ops = json_object_new_array()};
    if (changed && merged) {
        plan_set_meta(&p, ann, "annotations", NODEREG_NODEID_ANNOTATION, merged);
    } else if (changed) {
        char *path = map_path("annotations", NODEREG_NODEID_ANNOTATION);
        op(&p, "test", path, json_object_new_string(old));
        op(&p, "remove", path, NULL);
        free(path);
    }
    free(merged);
    if (install) {
        json_object *added = NULL; /* labels to add when the map is absent */
        for (size_t i = 0; i < d->n_segments; i++) {
            if (kobj_label(node, d->segments[i].key))
                continue; /* equal: nodereg_labels_check passed */
            if (!labels) {
                if (!added)
                    added = json_object_new_object();
                json_object_object_add(added, d->segments[i].key,
                                       json_object_new_string(d->segments[i].value));
            } else {
                plan_set_meta(&p, labels, "labels", d->segments[i].key, d->segments[i].value);
            }
        }
        if (added) {
            op(&p, "add", "/metadata/labels", added);
            p.need_rv = true;
        }
    }
    return plan_finish(&p, node, "Node", patch);
}

bool nodereg_node_has(const json_object *node, const nodereg_driver *d)
{
    if (!node)
        return false;
    json_object *m = NULL;
    const char *ann = kobj_annotation(node, NODEREG_NODEID_ANNOTATION);
    if (!ann || nodeid_parse(ann, &m) < 0) {
        util_err_clear();
        return false;
    }
    const char *id = kobj_str(m, d->name);
    bool ok = id && strcmp(id, d->node_id) == 0;
    json_object_put(m);
    for (size_t i = 0; ok && i < d->n_segments; i++) {
        const char *v = kobj_label(node, d->segments[i].key);
        ok = v && strcmp(v, d->segments[i].value) == 0;
    }
    return ok;
}

/* ---- CSINode ------------------------------------------------------------------------------- */

json_object *nodereg_csinode_entry(const nodereg_driver *d)
{
    json_object *e = json_object_new_object();
    json_object_object_add(e, "name", json_object_new_string(d->name));
    json_object_object_add(e, "nodeID", json_object_new_string(d->node_id ? d->node_id : ""));
    json_object *keys = json_object_new_array();
    for (size_t i = 0; i < d->n_segments; i++)
        json_object_array_add(keys, json_object_new_string(d->segments[i].key));
    json_object_object_add(e, "topologyKeys", keys);
    if (d->max_volumes > 0) {
        json_object *alloc = json_object_new_object();
        json_object_object_add(alloc, "count", json_object_new_int64(d->max_volumes));
        json_object_object_add(e, "allocatable", alloc);
    }
    return e;
}

bool nodereg_csinode_entry_matches(const json_object *have, const nodereg_driver *d)
{
    const char *name = kobj_str(have, "name"), *id = kobj_str(have, "nodeID");
    if (!name || strcmp(name, d->name) != 0 || !id || !d->node_id || strcmp(id, d->node_id) != 0)
        return false;
    json_object *keys = kobj_get(have, "topologyKeys");
    if (keys && !json_object_is_type(keys, json_type_array))
        return false;
    /* d's keys are unique: same length and every one present is set equality
     * unless `have` repeats one, which validation forbids; check anyway. */
    if (kobj_len(keys) != d->n_segments)
        return false;
    for (size_t i = 0; i < d->n_segments; i++) {
        bool found = false;
        for (size_t j = 0; j < kobj_len(keys) && !found; j++) {
            const char *k = kobj_str_at(keys, j);
            found = k && strcmp(k, d->segments[i].key) == 0;
        }
        if (!found)
            return false;
    }
    int64_t count = 0;
    int cr = kobj_int64(kobj_obj(have, "allocatable"), "count", &count);
    if (d->max_volumes > 0)
        return cr == 0 && count == d->max_volumes;
    return cr == -ENOENT;
}

/* Index of the entry named `name` in `drivers`, or -1 (non-objects skipped). */
static int entry_index(const json_object *drivers, const char *name)
{
    for (size_t i = 0; i < kobj_len(drivers); i++) {
        const char *n = kobj_str(kobj_at(drivers, i), "name");
        if (n && strcmp(n, name) == 0)
            return (int)i;
    }
    return -1;
}

/* Compares two comma-separated lists as sets (empty items ignored). */
static bool same_set(const char *a, const char *b)
{
    for (int pass = 0; pass < 2; pass++) {
        const char *x = pass ? b : a, *y = pass ? a : b;
        char *copy = util_strdup(x ? x : "");
        bool ok = true;
        for (char *save = NULL, *t = strtok_r(copy, ",", &save); t && ok;
             t = strtok_r(NULL, ",", &save)) {
            ok = false;
            char *other = util_strdup(y ? y : "");
            for (char *s2 = NULL, *u = strtok_r(other, ",", &s2); u && !ok;
                 u = strtok_r(NULL, ",", &s2))
                ok = strcmp(t, u) == 0;
            free(other);
        }
        free(copy);
        if (!ok)
            return false;
    }
    return true;
}

static int csinode_drivers(const json_object *csinode, json_object **spec, json_object **drivers)
{
    *spec = kobj_get(csinode, "spec");
    *drivers = NULL;
    if (*spec && !json_object_is_type(*spec, json_type_object))
        return util_err_set(-EINVAL, "CSINode has a spec that is not an object");
    *drivers = kobj_get(*spec, "drivers");
    if (*drivers && !json_object_is_type(*drivers, json_type_array))
        return util_err_set(-EINVAL, "CSINode has spec.drivers that is not a list");
    return 0;
}

int nodereg_csinode_patch(const json_object *csinode, const nodereg_driver *d, bool install,
                          const char *migrated, char **patch, bool *again)
{
    *patch = NULL;
    *again = false;
    json_object *spec = NULL, *drivers = NULL, *ann = NULL;
    int r = csinode_drivers(csinode, &spec, &drivers);
    if (r == 0)
        r = meta_map(csinode, "annotations", "CSINode", &ann);
    if (r < 0)
        return r;
    plan p = {.ops = json_object_new_array()};
    int i = entry_index(drivers, d->name);
    bool keep = install && i >= 0 && nodereg_csinode_entry_matches(kobj_at(drivers, (size_t)i), d);
    if (i >= 0 && !keep) {
        char *path = util_asprintf("/spec/drivers/%d", i);
        op(&p, "test", path, json_object_get(kobj_at(drivers, (size_t)i)));
        op(&p, "remove", path, NULL);
        free(path);
        *again = install;
    } else if (install && i < 0) {
        p.need_rv = true;
        json_object *e = nodereg_csinode_entry(d);
        if (!spec) {
            json_object *s = json_object_new_object();
            json_object *list = json_object_new_array();
            json_object_array_add(list, e);
            json_object_object_add(s, "drivers", list);
            op(&p, "add", "/spec", s);
        } else if (!drivers) {
            json_object *list = json_object_new_array();
            json_object_array_add(list, e);
            op(&p, "add", "/spec/drivers", list);
        } else {
            op(&p, "add", "/spec/drivers/-", e);
        }
    }
    if (install && migrated) {
        const char *have = kobj_str(ann, NODEREG_MIGRATED_ANNOTATION);
        if (!same_set(have, migrated)) {
            if (*migrated) {
                plan_set_meta(&p, ann, "annotations", NODEREG_MIGRATED_ANNOTATION, migrated);
            } else {
                char *path = map_path("annotations", NODEREG_MIGRATED_ANNOTATION);
                op(&p, "test", path, json_object_new_string(have));
                op(&p, "remove", path, NULL);
                free(path);
            }
        }
    }
    return plan_finish(&p, csinode, "CSINode", patch);
}

json_object *nodereg_csinode_new(const json_object *node, const nodereg_driver *d,
                                 const char *migrated)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "apiVersion", json_object_new_string("storage.k8s.io/v1"));
    json_object_object_add(o, "kind", json_object_new_string("CSINode"));
    json_object *meta = json_object_new_object();
    const char *name = kobj_name(node), *uid = kobj_uid(node);
    json_object_object_add(meta, "name", json_object_new_string(name ? name : ""));
    if (name && uid) {
        json_object *ref = json_object_new_object();
        json_object_object_add(ref, "apiVersion", json_object_new_string("v1"));
        json_object_object_add(ref, "kind", json_object_new_string("Node"));
        json_object_object_add(ref, "name", json_object_new_string(name));
        json_object_object_add(ref, "uid", json_object_new_string(uid));
        json_object *refs = json_object_new_array();
        json_object_array_add(refs, ref);
        json_object_object_add(meta, "ownerReferences", refs);
    }
    if (migrated && *migrated) {
        json_object *ann = json_object_new_object();
        json_object_object_add(ann, NODEREG_MIGRATED_ANNOTATION, json_object_new_string(migrated));
        json_object_object_add(meta, "annotations", ann);
    }
    json_object_object_add(o, "metadata", meta);
    json_object *spec = json_object_new_object();
    json_object *list = json_object_new_array();
    if (d)
        json_object_array_add(list, nodereg_csinode_entry(d));
    json_object_object_add(spec, "drivers", list);
    json_object_object_add(o, "spec", spec);
    return o;
}

bool nodereg_csinode_has(const json_object *csinode, const nodereg_driver *d)
{
    json_object *spec = NULL, *drivers = NULL;
    if (!csinode || csinode_drivers(csinode, &spec, &drivers) < 0) {
        util_err_clear();
        return false;
    }
    int i = entry_index(drivers, d->name);
    return i >= 0 && nodereg_csinode_entry_matches(kobj_at(drivers, (size_t)i), d);
}
