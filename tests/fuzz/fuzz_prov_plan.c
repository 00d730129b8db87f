/*
 * fuzz_prov_plan: the provisioner's pure core fed arbitrary JSON as the
 * objects it reads from the API. The input is one JSON object whose members
 * are the PVC, StorageClass, Node, CSINode, the list of Nodes, the
 * immediate-binding topology keys, the VolumeAttributesClass and a
 * Secret's data; "flags" (an integer) switches configuration options and
 * "volume" shapes the driver's answer. Any member may be missing or of any
 * type: the plan must answer with a request or an error, never crash.
 */
#include "provisioner/provisioner.h"

#include <stdlib.h>

#include "kobj/kobj.h"

#include "fuzz.h"

#define MAX_SEGMENTS 16

static prov_config config_from(int64_t flags)
{
    prov_config c = {
        .driver_name = "csi.example.com",
        .volume_name_prefix = (flags & 1) ? "" : "pvc",
        .volume_name_uuid_length = (flags & 2) ? (int)((flags >> 8) & 0x3f) : -1,
        .extra_create_metadata = (flags & 4) != 0,
        .default_fstype = (flags & 8) ? "ext4" : NULL,
        .strict_topology = (flags & 16) != 0,
        .immediate_topology = (flags & 32) == 0,
        .controller_publish_readonly = (flags & 64) != 0,
        .topology = (flags & 128) == 0,
        .vac_enabled = (flags & 0x4000) != 0,
        .cross_namespace_source = (flags & 0x8000) != 0,
        .controller_service = true,
        .create_delete_volume = true,
        .create_delete_snapshot = true,
        .clone_volume = true,
        .modify_volume = (flags & 0x10000) == 0,
        .single_node_multi_writer = (flags & 0x20000) != 0,
        .identity = "1700000000000-42-csi.example.com",
    };
    return c;
}

/* The driver's answer: a volume with id, size and one topology segment map
 * taken from the input's "volume" member (any type; defaults otherwise). */
typedef struct fake_resp {
    Csi__V1__CreateVolumeResponse resp;
    Csi__V1__Volume vol;
    Csi__V1__Topology topo;
    Csi__V1__Topology *topos[1];
    Csi__V1__Topology__SegmentsEntry seg[MAX_SEGMENTS];
    Csi__V1__Topology__SegmentsEntry *segp[MAX_SEGMENTS];
    Csi__V1__Volume__VolumeContextEntry ctx[MAX_SEGMENTS];
    Csi__V1__Volume__VolumeContextEntry *ctxp[MAX_SEGMENTS];
} fake_resp;

static void fake_resp_init(fake_resp *f, const json_object *v)
{
    csi__v1__create_volume_response__init(&f->resp);
    csi__v1__volume__init(&f->vol);
    csi__v1__topology__init(&f->topo);
    f->resp.volume = &f->vol;
    const char *id = kobj_str(v, "id");
    f->vol.volume_id = (char *)(id != NULL ? id : "vol-1");
    int64_t cap = 0;
    if (kobj_int64(v, "capacity", &cap) == 0)
        f->vol.capacity_bytes = cap;
    size_t n = 0;
    json_object *segs = kobj_obj(v, "topology");
    if (segs != NULL) {
        json_object_object_foreach(segs, k, val)
        {
            if (n == MAX_SEGMENTS || !json_object_is_type(val, json_type_string))
                continue;
            csi__v1__topology__segments_entry__init(&f->seg[n]);
            f->seg[n].key = k;
            f->seg[n].value = (char *)json_object_get_string(val);
            f->segp[n] = &f->seg[n];
            n++;
        }
        f->topo.n_segments = n;
        f->topo.segments = f->segp;
        f->topos[0] = &f->topo;
        f->vol.n_accessible_topology = 1;
        f->vol.accessible_topology = f->topos;
    }
    n = 0;
    json_object *ctx = kobj_obj(v, "context");
    if (ctx != NULL) {
        json_object_object_foreach(ctx, k, val)
        {
            if (n == MAX_SEGMENTS || !json_object_is_type(val, json_type_string))
                continue;
            csi__v1__volume__volume_context_entry__init(&f->ctx[n]);
            f->ctx[n].key = k;
            f->ctx[n].value = (char *)json_object_get_string(val);
            f->ctxp[n] = &f->ctx[n];
            n++;
        }
        f->vol.n_volume_context = n;
        f->vol.volume_context = f->ctxp;
    }
}

static void plan(const prov_config *cfg, const json_object *in, int64_t flags)
{
    const json_object *pvc = kobj_get(in, "pvc");
    const json_object *sc = kobj_get(in, "sc");
    json_object *params = kobj_get(sc, "parameters");

    /* The pieces on their own. */
    char *name = NULL;
    if (prov_volume_name(cfg, kobj_uid(pvc), &name) == 0)
        free(name);
    (void)prov_selected_node(pvc);
    (void)prov_pvc_class(pvc);
    char *fstype = NULL;
    if (prov_fstype(cfg, params, &fstype) == 0)
        free(fstype);
    json_object *stripped = NULL;
    if (prov_strip_parameters(params, &stripped) == 0)
        json_object_put(stripped);
    prov_secret_refs all;
    if (prov_secret_refs_resolve(cfg, params, "pvc-1", pvc, &all) == 0)
        prov_secret_refs_clear(&all);
    (void)prov_csinode_keys(kobj_get(in, "csinode"), cfg->driver_name);
    (void)prov_node_eligibility(pvc, sc, "node-1", (flags & 0x40000) != 0);
    bool ok = false;
    (void)prov_node_pv_accessible(kobj_get(in, "pv"), kobj_get(in, "labels"), &ok);
    (void)prov_node_eligibility(pvc, NULL, "node-1", true);

    /* The whole request, and the PV for an answer. */
    prov_request_in rin = {
        .pvc = pvc,
        .sc = sc,
        .topology =
            {
                .node = kobj_get(in, "node"),
                .csinode = kobj_get(in, "csinode"),
                .nodes = kobj_get(in, "nodes"),
                .immediate_keys = kobj_get(in, "keys"),
            },
        .source = (prov_source_kind)((flags >> 20) % 3),
        .source_id = kobj_str(in, "source_id"),
        .vac = kobj_get(in, "vac"),
    };
    Csi__V1__CreateVolumeRequest *req = NULL;
    prov_secret_refs refs;
    prov_state st = PROV_FINAL;
    if (prov_build_request(cfg, &rin, &req, &refs, &st) != 0)
        return;
    (void)prov_request_set_secrets(req, kobj_get(in, "secret"));
    size_t n = prov_node_capacity_count(req);
    for (size_t i = 0; i < n && i < 64; i++) {
        Csi__V1__GetCapacityRequest gc;
        csi__v1__get_capacity_request__init(&gc);
        prov_node_capacity_request(req, i, &gc);
    }
    fake_resp f;
    fake_resp_init(&f, kobj_get(in, "volume"));
    int64_t capacity = 0;
    (void)prov_check_response(cfg, pvc, req, &f.resp, &capacity);
    json_object *pv = NULL;
    if (prov_build_pv(cfg, pvc, sc, req, &f.resp, &refs, &pv) == 0)
        json_object_put(pv);
    prov_secret_refs_clear(&refs);
    prov_request_free(req);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = fuzz_json(data, size);
    if (in == NULL)
        return 0;
    int64_t flags = 0;
    (void)kobj_int64(in, "flags", &flags);
    prov_config cfg = config_from(flags);
    plan(&cfg, in, flags);
    json_object_put(in);
    return 0;
}
