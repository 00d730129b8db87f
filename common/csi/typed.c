/*
 * Typed wrappers over csi_call for the RPCs the sidecars make, with the
 * checks csi-lib-utils adds on top of the raw calls.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "csi/csi.h"
#include "obs/obs.h"

#define CALL(c, method, req, resp_type, timeout, resp, st)                                         \
    csi_call((c), (method), (const ProtobufCMessage *)(req), &resp_type##__descriptor, (timeout),  \
             (ProtobufCMessage **)(resp), (st))

int csi_get_plugin_info(csi_conn *c, util_duration timeout, Csi__V1__GetPluginInfoResponse **resp,
                        csi_status *st)
{
    Csi__V1__GetPluginInfoRequest req = CSI__V1__GET_PLUGIN_INFO_REQUEST__INIT;
    int r = CALL(c, "/csi.v1.Identity/GetPluginInfo", &req, csi__v1__get_plugin_info_response,
                 timeout, resp, st);
    if (r < 0)
        return r;
    if (!(*resp)->name || !(*resp)->name[0]) {
        csi__v1__get_plugin_info_response__free_unpacked(*resp, NULL);
        *resp = NULL;
        return csi_status_set(st, CSI_INTERNAL, "driver name is empty");
    }
    return 0;
}

int csi_get_plugin_capabilities(csi_conn *c, util_duration timeout,
                                Csi__V1__GetPluginCapabilitiesResponse **resp, csi_status *st)
{
    Csi__V1__GetPluginCapabilitiesRequest req = CSI__V1__GET_PLUGIN_CAPABILITIES_REQUEST__INIT;
    return CALL(c, "/csi.v1.Identity/GetPluginCapabilities", &req,
                csi__v1__get_plugin_capabilities_response, timeout, resp, st);
}

int csi_probe(csi_conn *c, util_duration timeout, bool *ready, csi_status *st)
{
    Csi__V1__ProbeRequest req = CSI__V1__PROBE_REQUEST__INIT;
    Csi__V1__ProbeResponse *resp = NULL;
    int r = CALL(c, "/csi.v1.Identity/Probe", &req, csi__v1__probe_response, timeout, &resp, st);
    if (r < 0)
        return r;
    /* An unset wrapper means the driver does not report readiness: ready. */
    *ready = !resp->ready || resp->ready->value;
    csi__v1__probe_response__free_unpacked(resp, NULL);
    return 0;
}

int csi_probe_until_ready(csi_conn *c, util_duration timeout, util_duration give_up, csi_status *st)
{
    util_duration start = util_now_mono();
    for (;;) {
        bool ready = false;
        int r = csi_probe(c, timeout, &ready, st);
        if (r == 0 && ready)
            return 0;
        if (r < 0 && st->code != CSI_DEADLINE_EXCEEDED)
            return r;
        if (r == 0)
            obs_v(2, "CSI driver is not ready yet");
        else
            obs_v(2, "CSI driver probe timed out: %s", st->message);
        if (give_up > 0 && util_now_mono() - start >= give_up)
            return csi_status_set(st, CSI_DEADLINE_EXCEEDED, "driver not ready after %.0f s",
                                  (double)give_up / UTIL_SECOND);
        util_sleep(UTIL_SECOND);
    }
}

int csi_controller_get_capabilities(csi_conn *c, util_duration timeout,
                                    Csi__V1__ControllerGetCapabilitiesResponse **resp,
                                    csi_status *st)
{
    Csi__V1__ControllerGetCapabilitiesRequest req =
        CSI__V1__CONTROLLER_GET_CAPABILITIES_REQUEST__INIT;
    return CALL(c, "/csi.v1.Controller/ControllerGetCapabilities", &req,
                csi__v1__controller_get_capabilities_response, timeout, resp, st);
}

int csi_node_get_info(csi_conn *c, util_duration timeout, Csi__V1__NodeGetInfoResponse **resp,
                      csi_status *st)
{
    Csi__V1__NodeGetInfoRequest req = CSI__V1__NODE_GET_INFO_REQUEST__INIT;
    return CALL(c, "/csi.v1.Node/NodeGetInfo", &req, csi__v1__node_get_info_response, timeout, resp,
                st);
}

int csi_node_get_capabilities(csi_conn *c, util_duration timeout,
                              Csi__V1__NodeGetCapabilitiesResponse **resp, csi_status *st)
{
    Csi__V1__NodeGetCapabilitiesRequest req = CSI__V1__NODE_GET_CAPABILITIES_REQUEST__INIT;
    return CALL(c, "/csi.v1.Node/NodeGetCapabilities", &req,
                csi__v1__node_get_capabilities_response, timeout, resp, st);
}

int csi_create_volume(csi_conn *c, const Csi__V1__CreateVolumeRequest *req, util_duration timeout,
                      Csi__V1__CreateVolumeResponse **resp, csi_status *st)
{
    int r = CALL(c, "/csi.v1.Controller/CreateVolume", req, csi__v1__create_volume_response,
                 timeout, resp, st);
    if (r == 0 &&
        (!(*resp)->volume || !(*resp)->volume->volume_id || !(*resp)->volume->volume_id[0])) {
        csi__v1__create_volume_response__free_unpacked(*resp, NULL);
        *resp = NULL;
        return csi_status_set(st, CSI_INTERNAL, "CreateVolume response has no volume id");
    }
    return r;
}

int csi_delete_volume(csi_conn *c, const Csi__V1__DeleteVolumeRequest *req, util_duration timeout,
                      csi_status *st)
{
    Csi__V1__DeleteVolumeResponse *resp = NULL;
    int r = CALL(c, "/csi.v1.Controller/DeleteVolume", req, csi__v1__delete_volume_response,
                 timeout, &resp, st);
    if (resp)
        csi__v1__delete_volume_response__free_unpacked(resp, NULL);
    return r;
}

int csi_controller_publish_volume(csi_conn *c, const Csi__V1__ControllerPublishVolumeRequest *req,
                                  util_duration timeout,
                                  Csi__V1__ControllerPublishVolumeResponse **resp, csi_status *st)
{
    return CALL(c, "/csi.v1.Controller/ControllerPublishVolume", req,
                csi__v1__controller_publish_volume_response, timeout, resp, st);
}

int csi_controller_unpublish_volume(csi_conn *c,
                                    const Csi__V1__ControllerUnpublishVolumeRequest *req,
                                    util_duration timeout, csi_status *st)
{
    Csi__V1__ControllerUnpublishVolumeResponse *resp = NULL;
    int r = CALL(c, "/csi.v1.Controller/ControllerUnpublishVolume", req,
                 csi__v1__controller_unpublish_volume_response, timeout, &resp, st);
    if (resp)
        csi__v1__controller_unpublish_volume_response__free_unpacked(resp, NULL);
    return r;
}

int csi_list_volumes_all(csi_conn *c, int32_t page_size, util_duration timeout, csi_volume_fn fn,
                         void *ud, csi_status *st)
{
    char *token = NULL;
    int r = 0;
    /* A driver that hands back the same token forever would loop us forever. */
    for (int pages = 0;; pages++) {
        if (pages > 1000000) {
            r = csi_status_set(st, CSI_INTERNAL, "ListVolumes: driver keeps returning pages");
            break;
        }
        Csi__V1__ListVolumesRequest req = CSI__V1__LIST_VOLUMES_REQUEST__INIT;
        req.max_entries = page_size;
        req.starting_token = token ? token : "";
        Csi__V1__ListVolumesResponse *resp = NULL;
        r = CALL(c, "/csi.v1.Controller/ListVolumes", &req, csi__v1__list_volumes_response, timeout,
                 &resp, st);
        if (r < 0)
            break;
        for (size_t i = 0; i < resp->n_entries && r == 0; i++)
            r = fn(ud, resp->entries[i]);
        bool more = r == 0 && resp->next_token && resp->next_token[0];
        bool same = more && token && strcmp(token, resp->next_token) == 0;
        free(token);
        token = more ? util_strdup(resp->next_token) : NULL;
        csi__v1__list_volumes_response__free_unpacked(resp, NULL);
        if (same) {
            r = csi_status_set(st, CSI_INTERNAL, "ListVolumes: driver repeated its next_token");
            break;
        }
        if (!more)
            break;
    }
    free(token);
    return r;
}

int csi_get_capacity(csi_conn *c, const Csi__V1__GetCapacityRequest *req, util_duration timeout,
                     Csi__V1__GetCapacityResponse **resp, csi_status *st)
{
    return CALL(c, "/csi.v1.Controller/GetCapacity", req, csi__v1__get_capacity_response, timeout,
                resp, st);
}

int csi_controller_expand_volume(csi_conn *c, const Csi__V1__ControllerExpandVolumeRequest *req,
                                 util_duration timeout,
                                 Csi__V1__ControllerExpandVolumeResponse **resp, csi_status *st)
{
    return CALL(c, "/csi.v1.Controller/ControllerExpandVolume", req,
                csi__v1__controller_expand_volume_response, timeout, resp, st);
}

int csi_create_snapshot(csi_conn *c, const Csi__V1__CreateSnapshotRequest *req,
                        util_duration timeout, Csi__V1__CreateSnapshotResponse **resp,
                        csi_status *st)
{
    return CALL(c, "/csi.v1.Controller/CreateSnapshot", req, csi__v1__create_snapshot_response,
                timeout, resp, st);
}

int csi_delete_snapshot(csi_conn *c, const Csi__V1__DeleteSnapshotRequest *req,
                        util_duration timeout, csi_status *st)
{
    Csi__V1__DeleteSnapshotResponse *resp = NULL;
    int r = CALL(c, "/csi.v1.Controller/DeleteSnapshot", req, csi__v1__delete_snapshot_response,
                 timeout, &resp, st);
    if (resp)
        csi__v1__delete_snapshot_response__free_unpacked(resp, NULL);
    return r;
}

static void set_bit(uint64_t *mask, int bit)
{
    if (bit > 0 && bit < 64)
        *mask |= (uint64_t)1 << bit;
}

void csi_caps_from_plugin(csi_caps *caps, const Csi__V1__GetPluginCapabilitiesResponse *r)
{
    for (size_t i = 0; r && i < r->n_capabilities; i++) {
        const Csi__V1__PluginCapability *pc = r->capabilities[i];
        if (pc->type_case == CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE && pc->service)
            set_bit(&caps->plugin, (int)pc->service->type);
        else if (pc->type_case == CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION &&
                 pc->volume_expansion)
            set_bit(&caps->expansion, (int)pc->volume_expansion->type);
    }
}

void csi_caps_from_controller(csi_caps *caps, const Csi__V1__ControllerGetCapabilitiesResponse *r)
{
    for (size_t i = 0; r && i < r->n_capabilities; i++) {
        const Csi__V1__ControllerServiceCapability *cc = r->capabilities[i];
        if (cc->type_case == CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC && cc->rpc)
            set_bit(&caps->controller, (int)cc->rpc->type);
    }
}

void csi_caps_from_node(csi_caps *caps, const Csi__V1__NodeGetCapabilitiesResponse *r)
{
    for (size_t i = 0; r && i < r->n_capabilities; i++) {
        const Csi__V1__NodeServiceCapability *nc = r->capabilities[i];
        if (nc->type_case == CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC && nc->rpc)
            set_bit(&caps->node, (int)nc->rpc->type);
    }
}
