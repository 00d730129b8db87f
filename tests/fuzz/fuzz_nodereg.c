/*
 * fuzz_nodereg: the registrar's annotation and label merge (common/nodereg)
 * fed arbitrary JSON as the Node and CSINode it reads:
 * {"node": Node, "csinode": CSINode, "annotation": nodeid annotation text,
 *  "migrated": text, "driver": {"name", "node_id", "max", "topology": {k: v}}}.
 * The driver's registration comes through nodereg_driver_from_info, as a
 * NodeGetInfo answer would.
 */
#include "nodereg/nodereg.h"

#include <stdlib.h>

#include "kobj/kobj.h"
#include "registrar/registrar.h"

#include "fuzz.h"

#define MAX_SEGMENTS 16

static int driver_from(const json_object *dj, nodereg_driver *d)
{
    Csi__V1__NodeGetInfoResponse info;
    Csi__V1__Topology topo;
    Csi__V1__Topology__SegmentsEntry seg[MAX_SEGMENTS];
    Csi__V1__Topology__SegmentsEntry *segp[MAX_SEGMENTS];
    csi__v1__node_get_info_response__init(&info);
    csi__v1__topology__init(&topo);
    const char *id = kobj_str(dj, "node_id");
    info.node_id = (char *)(id != NULL ? id : "node-id-1");
    int64_t max = 0;
    if (kobj_int64(dj, "max", &max) == 0)
        info.max_volumes_per_node = max;
    json_object *t = kobj_obj(dj, "topology");
    if (t != NULL) {
        size_t n = 0;
        json_object_object_foreach(t, k, v)
        {
            if (n == MAX_SEGMENTS || !json_object_is_type(v, json_type_string))
                continue;
            csi__v1__topology__segments_entry__init(&seg[n]);
            seg[n].key = k;
            seg[n].value = (char *)json_object_get_string(v);
            segp[n] = &seg[n];
            n++;
        }
        topo.n_segments = n;
        topo.segments = segp;
        info.accessible_topology = &topo;
    }
    const char *name = kobj_str(dj, "name");
    return nodereg_driver_from_info(name != NULL ? name : "csi.example.com", &info, d);
}

static void plan(const json_object *node, const json_object *csinode, const nodereg_driver *d,
                 const char *migrated)
{
    static const bool installs[] = {true, false};
    (void)nodereg_labels_check(node, d);
    (void)nodereg_node_has(node, d);
    (void)nodereg_csinode_has(csinode, d);
    json_object *entry = nodereg_csinode_entry(d);
    (void)nodereg_csinode_entry_matches(entry, d);
    json_object_put(entry);
    json_object *drivers = kobj_path(csinode, "spec.drivers");
    for (size_t i = 0; i < kobj_len(drivers) && i < 32; i++)
        (void)nodereg_csinode_entry_matches(kobj_at(drivers, i), d);
    for (size_t i = 0; i < 2; i++) {
        char *patch = NULL;
        if (nodereg_node_patch(node, d, installs[i], &patch) == 0)
            free(patch);
        patch = NULL;
        bool again = false;
        if (nodereg_csinode_patch(csinode, d, installs[i], migrated, &patch, &again) == 0)
            free(patch);
    }
    json_object_put(nodereg_csinode_new(node, d, migrated));
    json_object_put(nodereg_csinode_new(node, NULL, NULL));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = fuzz_json(data, size);
    if (in == NULL)
        return 0;
    nodereg_driver d = {0};
    if (driver_from(kobj_get(in, "driver"), &d) == 0) {
        const char *ann = kobj_str(in, "annotation");
        if (ann == NULL)
            ann = kobj_annotation(kobj_get(in, "node"), NODEREG_NODEID_ANNOTATION);
        char *merged = NULL;
        if (nodereg_nodeid_merge(ann, d.name, d.node_id, &merged) == 0)
            free(merged);
        merged = NULL;
        if (nodereg_nodeid_merge(ann, d.name, NULL, &merged) == 0)
            free(merged);
        plan(kobj_get(in, "node"), kobj_get(in, "csinode"), &d, kobj_str(in, "migrated"));
        free(reg_socket_path("/registration", d.name));
        nodereg_driver_clear(&d);
    }
    json_object_put(in);
    return 0;
}
