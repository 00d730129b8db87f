/*
 * fuzz_csi_resp: arbitrary bytes from the driver. The first byte picks the
 * response message a sidecar decodes; the rest is unpacked as it and, when
 * it unpacks, handed to the code that uses that answer: the capability
 * masks and the configurations built from them, the registrar's node
 * registration and the provisioner's node labels from NodeGetInfo, the
 * provisioner's checks and PV from CreateVolume (for a fixed claim and
 * class), the attacher's status patch from ControllerPublish, the capacity
 * decision from GetCapacity, and the log text of every message.
 */
#include <stdlib.h>

#include "attacher/attacher.h"
#include "nodereg/nodereg.h"
#include "provisioner/provisioner.h"

#include "fuzz.h"

#define DRIVER "csi.example.com"

static const char pvc_text[] =
    "{\"metadata\":{\"name\":\"data-web-1\",\"namespace\":\"team-a\","
    "\"uid\":\"0a1b2c3d-4e5f-6789-abcd-ef0123456789\",\"resourceVersion\":\"42\","
    "\"annotations\":{\"volume.kubernetes.io/selected-node\":\"n1\"}},"
    "\"spec\":{\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":"
    "{\"storage\":\"1Gi\"}},\"storageClassName\":\"fast\"}}";
static const char sc_text[] = "{\"metadata\":{\"name\":\"fast\"},\"provisioner\":\"" DRIVER
                              "\",\"parameters\":{\"type\":\"gp3\"},\"reclaimPolicy\":\"Delete\","
                              "\"volumeBindingMode\":\"WaitForFirstConsumer\"}";
static const char node_text[] = "{\"metadata\":{\"name\":\"n1\",\"labels\":{\"zone\":\"z1\"}}}";
static const char csinode_text[] =
    "{\"metadata\":{\"name\":\"n1\"},\"spec\":{\"drivers\":[{\"name\":\"" DRIVER
    "\",\"nodeID\":\"n1\",\"topologyKeys\":[\"zone\"]}]}}";

static prov_config prov_cfg(void)
{
    prov_config c = {
        .driver_name = DRIVER,
        .volume_name_prefix = "pvc",
        .volume_name_uuid_length = -1,
        .immediate_topology = true,
        .topology = true,
        .controller_service = true,
        .create_delete_volume = true,
        .identity = "1700000000000-42-" DRIVER,
    };
    return c;
}

/* The claim, class and request every CreateVolume answer is checked
 * against, built once (fuzzing state, not product state). */
static json_object *pvc;
static json_object *sc;
static Csi__V1__CreateVolumeRequest *req;
static prov_secret_refs refs;

static int setup(void)
{
    if (req != NULL)
        return 0;
    pvc = json_tokener_parse(pvc_text);
    sc = json_tokener_parse(sc_text);
    json_object *node = json_tokener_parse(node_text);
    json_object *csinode = json_tokener_parse(csinode_text);
    json_object *nodes = json_object_new_array();
    json_object_array_add(nodes, json_object_get(node));
    prov_config cfg = prov_cfg();
    prov_request_in in = {
        .pvc = pvc, .sc = sc, .topology = {.node = node, .csinode = csinode, .nodes = nodes}};
    int rc = prov_build_request(&cfg, &in, &req, &refs, NULL);
    json_object_put(nodes);
    json_object_put(node);
    json_object_put(csinode);
    if (rc != 0) {
        fprintf(stderr, "fuzz_csi_resp: fixed request: %s\n", util_err_last());
        abort();
    }
    return 0;
}

static void caps_use(const csi_caps *caps)
{
    prov_config pc = prov_cfg();
    prov_config_set_caps(&pc, caps, true);
    att_config ac = {.driver_name = DRIVER};
    att_config_set_caps(&ac, caps);
    (void)att_caps_publish(caps);
    (void)att_caps_list_published(caps);
}

static void create_volume(const Csi__V1__CreateVolumeResponse *r)
{
    prov_config cfg = prov_cfg();
    int64_t capacity = 0;
    (void)prov_check_response(&cfg, pvc, req, r, &capacity);
    json_object *pv = NULL;
    if (prov_build_pv(&cfg, pvc, sc, req, r, &refs, &pv) == 0) {
        /* The PV as the attacher would read it later. */
        att_config ac = {.driver_name = DRIVER};
        Csi__V1__ControllerPublishVolumeRequest *pub = NULL;
        if (att_publish_request(&ac, pv, "n1", &pub) == 0)
            att_request_free(&pub->base);
        json_object_put(pv);
    }
    if (r->volume != NULL)
        json_object_put(
            prov_node_affinity(r->volume->accessible_topology, r->volume->n_accessible_topology));
}

static void node_info(const Csi__V1__NodeGetInfoResponse *r)
{
    nodereg_driver d = {0};
    if (nodereg_driver_from_info(DRIVER, r, &d) == 0) {
        json_object_put(nodereg_csinode_entry(&d));
        nodereg_driver_clear(&d);
    }
    json_object_put(prov_node_labels(r->accessible_topology));
    json_object *node = NULL;
    json_object *csinode = NULL;
    prov_node_local_objects("n1", DRIVER, r->node_id, r->accessible_topology, &node, &csinode);
    json_object_put(node);
    json_object_put(csinode);
    char *seg = NULL;
    if (prov_cap_fixed_segment(r->accessible_topology, &seg) == 0)
        free(seg);
}

static void capacity(const Csi__V1__GetCapacityResponse *r)
{
    prov_cap_config cc = {
        .driver_name = DRIVER, .managed_by = PROV_CAP_MANAGED_BY, .namespace = "default"};
    int64_t max = r->maximum_volume_size != NULL ? r->maximum_volume_size->value : 0;
    const int64_t *maxp = r->maximum_volume_size != NULL ? &max : NULL;
    json_object *obj = NULL;
    if (prov_cap_build(&cc, "fast/zone=z1", r->available_capacity, maxp, &obj) != 0)
        return;
    prov_cap_action act = PROV_CAP_NONE;
    char *patch = NULL;
    if (prov_cap_decide(&cc, obj, r->available_capacity, maxp, &act, &patch) == 0)
        free(patch);
    json_object_put(obj);
}

static void list_volumes(const Csi__V1__ListVolumesResponse *r)
{
    for (size_t i = 0; i < r->n_entries; i++) {
        const Csi__V1__ListVolumesResponse__Entry *e = r->entries[i];
        if (e == NULL || e->status == NULL)
            continue;
        (void)att_published_on((const char *const *)e->status->published_node_ids,
                               e->status->n_published_node_ids, "n1");
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || setup() != 0)
        return 0;
    static const ProtobufCMessageDescriptor *const descs[] = {
        &csi__v1__get_plugin_info_response__descriptor,
        &csi__v1__get_plugin_capabilities_response__descriptor,
        &csi__v1__controller_get_capabilities_response__descriptor,
        &csi__v1__node_get_capabilities_response__descriptor,
        &csi__v1__node_get_info_response__descriptor,
        &csi__v1__create_volume_response__descriptor,
        &csi__v1__controller_publish_volume_response__descriptor,
        &csi__v1__get_capacity_response__descriptor,
        &csi__v1__list_volumes_response__descriptor,
        &csi__v1__probe_response__descriptor,
        &csi__v1__delete_volume_response__descriptor,
    };
    size_t which = data[0] % (sizeof(descs) / sizeof(descs[0]));
    ProtobufCMessage *m = protobuf_c_message_unpack(descs[which], NULL, size - 1, data + 1);
    if (m == NULL)
        return 0;
    free(csi_msg_to_text(m, 512));
    free(csi_msg_to_text(m, 0));
    csi_caps caps = {0};
    switch (which) {
    case 1:
        csi_caps_from_plugin(&caps, (const Csi__V1__GetPluginCapabilitiesResponse *)m);
        caps_use(&caps);
        break;
    case 2:
        csi_caps_from_controller(&caps, (const Csi__V1__ControllerGetCapabilitiesResponse *)m);
        caps_use(&caps);
        break;
    case 3:
        csi_caps_from_node(&caps, (const Csi__V1__NodeGetCapabilitiesResponse *)m);
        caps_use(&caps);
        break;
    case 4:
        node_info((const Csi__V1__NodeGetInfoResponse *)m);
        break;
    case 5:
        create_volume((const Csi__V1__CreateVolumeResponse *)m);
        break;
    case 6:
        free(att_status_attached((const Csi__V1__ControllerPublishVolumeResponse *)m));
        break;
    case 7:
        capacity((const Csi__V1__GetCapacityResponse *)m);
        break;
    case 8:
        list_volumes((const Csi__V1__ListVolumesResponse *)m);
        break;
    default:
        break;
    }
    protobuf_c_message_free_unpacked(m, NULL);
    return 0;
}
