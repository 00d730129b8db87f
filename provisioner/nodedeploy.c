/*
 * nodedeploy: the decisions of --node-deployment (distributed provisioning),
 * pure like the rest of the planning core.
 *
 * Every node runs a provisioner beside its own driver. A claim is this
 * node's when its selected-node annotation names the node; an Immediate
 * claim nobody selected is raced for: each instance waits a jittered delay
 * (so the herd does not patch at once), checks capacity, and then sets the
 * annotation to its own node with a precondition, so only one wins. Node
 * topology comes from the local driver's NodeGetInfo only, as upstream's
 * static fake Node and CSINode; a PV is deleted only by the node that its
 * nodeAffinity selects.
 *
 * Not here: the waiting, the GetCapacity calls and the patch (controller.c).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "plan_internal.h"

const char *prov_node_claim_name(prov_node_claim e)
{
    switch (e) {
    case PROV_NODE_OURS:
        return "ours";
    case PROV_NODE_OTHER:
        return "other";
    case PROV_NODE_CANDIDATE:
        return "candidate";
    case PROV_NODE_WAIT:
        return "wait";
    }
    return "unknown";
}

prov_node_claim prov_node_eligibility(const json_object *pvc, const json_object *sc,
                                      const char *node_name, bool immediate_binding)
{
    const char *sel = kobj_str(kobj_path(pvc, "metadata.annotations"), PROV_ANN_SELECTED_NODE);
    if (sel != NULL && *sel != '\0')
        return node_name != NULL && strcmp(sel, node_name) == 0 ? PROV_NODE_OURS : PROV_NODE_OTHER;
    /* Upstream takes only an explicit Immediate (a nil mode is not); the API
     * server always fills the field in. */
    const char *mode = kobj_path_str(sc, "volumeBindingMode");
    if (sc == NULL || mode == NULL || strcmp(mode, "Immediate") != 0 || !immediate_binding)
        return PROV_NODE_WAIT;
    return PROV_NODE_CANDIDATE;
}

util_duration prov_node_delay(util_duration base, util_duration max, int requeues, double rnd)
{
    if (base < 0)
        base = 0;
    if (requeues < 0)
        requeues = 0;
    /* client-go's exponential limiter works in float64 nanoseconds and
     * falls back to the cap when the product leaves int64's range. */
    double backoff = (double)base;
    for (int i = 0; i < requeues && backoff < (double)INT64_MAX; i++)
        backoff *= 2;
    util_duration delay;
    if (backoff >= (double)INT64_MAX || (util_duration)backoff > max)
        delay = max;
    else
        delay = (util_duration)backoff;
    if (rnd < 0)
        rnd = 0;
    util_duration jitter = (util_duration)((double)base * rnd);
    return jitter > delay ? 0 : delay - jitter;
}

json_object *prov_node_labels(const Csi__V1__Topology *t)
{
    if (t == NULL)
        return NULL;
    json_object *labels = json_object_new_object();
    for (size_t i = 0; i < t->n_segments; i++)
        json_object_object_add(labels, t->segments[i]->key,
                               json_object_new_string(t->segments[i]->value));
    return labels;
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

void prov_node_local_objects(const char *node_name, const char *driver, const char *node_id,
                             const Csi__V1__Topology *t, json_object **node, json_object **csinode)
{
    json_object *nmeta = json_object_new_object();
    json_object_object_add(nmeta, "name", json_object_new_string(node_name));
    json_object *labels = prov_node_labels(t);
    if (labels != NULL)
        json_object_object_add(nmeta, "labels", labels);
    *node = json_object_new_object();
    json_object_object_add(*node, "metadata", nmeta);

    json_object *d = json_object_new_object();
    json_object_object_add(d, "name", json_object_new_string(driver));
    json_object_object_add(d, "nodeID", json_object_new_string(node_id != NULL ? node_id : ""));
    if (t != NULL && t->n_segments > 0) {
        /* Upstream lists map keys in random order; sorted is the same set. */
        const char **keys = util_calloc(t->n_segments, sizeof(*keys));
        for (size_t i = 0; i < t->n_segments; i++)
            keys[i] = t->segments[i]->key;
        qsort(keys, t->n_segments, sizeof(*keys), str_cmp);
        json_object *arr = json_object_new_array();
        for (size_t i = 0; i < t->n_segments; i++)
            json_object_array_add(arr, json_object_new_string(keys[i]));
        free(keys);
        json_object_object_add(d, "topologyKeys", arr);
    }
    json_object *drivers = json_object_new_array();
    json_object_array_add(drivers, d);
    json_object *spec = json_object_new_object();
    json_object_object_add(spec, "drivers", drivers);
    json_object *cmeta = json_object_new_object();
    json_object_object_add(cmeta, "name", json_object_new_string(node_name));
    *csinode = json_object_new_object();
    json_object_object_add(*csinode, "metadata", cmeta);
    json_object_object_add(*csinode, "spec", spec);
}

/* ---- node selector matching (MatchNodeSelectorTerms) ------------------------------ */

/* Item i as a string; "" for any other type (it then matches nothing). */
static const char *arr_str(const json_object *a, size_t i)
{
    const char *v = kobj_str_at(a, i);
    return v != NULL ? v : "";
}

static bool in_values(const json_object *values, const char *v)
{
    for (size_t i = 0; i < kobj_len(values); i++)
        if (strcmp(arr_str(values, i), v) == 0)
            return true;
    return false;
}

static bool parse_int64(const char *s, int64_t *out)
{
    if (s == NULL || *s == '\0')
        return false;
    char *end = NULL;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno != 0 || *end != '\0')
        return false;
    *out = v;
    return true;
}

/*
 * One requirement against a value (`have` NULL: the label is absent).
 * 1 match, 0 no match, -EINVAL a requirement that does not parse.
 */
static int requirement(const json_object *req, const char *have)
{
    const char *op = kobj_path_str(req, "operator");
    const char *key = kobj_path_str(req, "key");
    const json_object *values = kobj_get(req, "values");
    size_t n = kobj_len(values);
    if (key == NULL || *key == '\0' || op == NULL)
        return -EINVAL;
    if (strcmp(op, "In") == 0 || strcmp(op, "NotIn") == 0) {
        if (n == 0)
            return -EINVAL;
        bool in = have != NULL && in_values(values, have);
        return strcmp(op, "In") == 0 ? in : !in;
    }
    if (strcmp(op, "Exists") == 0 || strcmp(op, "DoesNotExist") == 0) {
        if (n != 0)
            return -EINVAL;
        return strcmp(op, "Exists") == 0 ? have != NULL : have == NULL;
    }
    if (strcmp(op, "Gt") == 0 || strcmp(op, "Lt") == 0) {
        int64_t want = 0, got = 0;
        if (n != 1 || !parse_int64(arr_str(values, 0), &want))
            return -EINVAL;
        if (have == NULL || !parse_int64(have, &got))
            return 0;
        return strcmp(op, "Gt") == 0 ? got > want : got < want;
    }
    return -EINVAL;
}

/* A term: every expression and field requirement holds; an empty term
 * matches nothing. */
static int term_matches(const json_object *term, const json_object *labels)
{
    const json_object *exprs = kobj_get(term, "matchExpressions");
    const json_object *fields = kobj_get(term, "matchFields");
    size_t ne = kobj_len(exprs), nf = kobj_len(fields);
    if (ne == 0 && nf == 0)
        return 0;
    int result = 1;
    for (size_t i = 0; i < ne; i++) {
        const json_object *req = kobj_at(exprs, i);
        const char *key = kobj_path_str(req, "key");
        int r = requirement(req, key != NULL ? kobj_str(labels, key) : NULL);
        if (r < 0)
            return r;
        if (r == 0)
            result = 0;
    }
    for (size_t i = 0; i < nf; i++) {
        const json_object *req = kobj_at(fields, i);
        const char *key = kobj_path_str(req, "key"), *op = kobj_path_str(req, "operator");
        /* Only metadata.name with In/NotIn and one value is a valid field
         * selector; upstream's node here has no name. */
        if (key == NULL || strcmp(key, "metadata.name") != 0 || op == NULL ||
            (strcmp(op, "In") != 0 && strcmp(op, "NotIn") != 0) ||
            kobj_len(kobj_get(req, "values")) != 1)
            return -EINVAL;
        int r = requirement(req, "");
        if (r < 0)
            return r;
        if (r == 0)
            result = 0;
    }
    return result;
}

int prov_node_pv_accessible(const json_object *pv, const json_object *labels, bool *out)
{
    *out = true;
    const json_object *terms = kobj_path(pv, "spec.nodeAffinity.required");
    if (labels == NULL || terms == NULL)
        return 0;
    terms = kobj_get(terms, "nodeSelectorTerms");
    bool bad = false;
    for (size_t i = 0; i < kobj_len(terms); i++) {
        int r = term_matches(kobj_at(terms, i), labels);
        if (r > 0)
            return 0;
        if (r < 0)
            bad = true;
    }
    *out = false;
    if (bad)
        return util_err_set(-EINVAL,
                            "checking volume affinity failed: a node selector term of "
                            "PV %s does not parse",
                            kobj_path_str(pv, "metadata.name") ? kobj_path_str(pv, "metadata.name")
                                                               : "");
    return 0;
}

/* ---- capacity check -------------------------------------------------------------- */

size_t prov_node_capacity_count(const Csi__V1__CreateVolumeRequest *req)
{
    const Csi__V1__TopologyRequirement *t = req->accessibility_requirements;
    return t != NULL && t->n_requisite > 0 ? t->n_requisite : 1;
}

void prov_node_capacity_request(const Csi__V1__CreateVolumeRequest *req, size_t i,
                                Csi__V1__GetCapacityRequest *out)
{
    *out = (Csi__V1__GetCapacityRequest)CSI__V1__GET_CAPACITY_REQUEST__INIT;
    out->n_volume_capabilities = req->n_volume_capabilities;
    out->volume_capabilities = req->volume_capabilities;
    /* The map entries of both messages have the same fields (key 1, value
     * 2), so the request's entries pack to the same bytes. */
    out->n_parameters = req->n_parameters;
    out->parameters = (Csi__V1__GetCapacityRequest__ParametersEntry **)req->parameters;
    const Csi__V1__TopologyRequirement *t = req->accessibility_requirements;
    if (t != NULL && i < t->n_requisite)
        out->accessible_topology = t->requisite[i];
}
