/*
 * A scripted CSI driver for the client tests, built on the server helpers.
 *
 * Its answers follow from the request, so a test says what it wants in the
 * request itself:
 *   CreateVolume/DeleteVolume name or id "err-<CODE>-<text>": fail with that
 *   gRPC code and message; "sleep-<ms>": answer after that many ms.
 * Environment knobs: TEST_DRIVER_NAME (GetPluginInfo name, may be empty),
 * TEST_PROBE_NOT_READY (the first N probes say ready=false),
 * TEST_PROBE_ERROR (every probe fails with this code name),
 * TEST_PROBE_NO_READY_FIELD (leave `ready` unset).
 * Node/NodeStageVolume and all other unlisted methods are left unhandled.
 *
 * Usage: csi_test_server <endpoint> [--delay=<duration>]
 * Runs until SIGTERM/SIGINT, then stops gracefully.
 */
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csi/csi.h"
#include "obs/obs.h"

#define N_LISTED 25

static atomic_int probes;

static int scripted_failure(const char *key, csi_reply *reply)
{
    if (util_has_prefix(key, "err-")) {
        char code_name[64];
        const char *dash = strchr(key + 4, '-');
        size_t n = dash ? (size_t)(dash - key - 4) : strlen(key + 4);
        if (n >= sizeof(code_name))
            n = sizeof(code_name) - 1;
        memcpy(code_name, key + 4, n);
        code_name[n] = '\0';
        int code = CSI_UNKNOWN;
        csi_code_from_name(code_name, &code);
        csi_reply_error(reply, code, "%s", dash ? dash + 1 : "");
        return 1;
    }
    if (util_has_prefix(key, "sleep-"))
        util_sleep(atoll(key + 6) * UTIL_MS);
    return 0;
}

static void identity(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)ud;
    (void)req;
    if (strstr(method, "/GetPluginInfo")) {
        Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
        const char *name = getenv("TEST_DRIVER_NAME");
        r.name = (char *)(name ? name : "test.csi.example.com");
        r.vendor_version = "1.2.3";
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/GetPluginCapabilities")) {
        Csi__V1__PluginCapability__Service svc[2] = {CSI__V1__PLUGIN_CAPABILITY__SERVICE__INIT,
                                                     CSI__V1__PLUGIN_CAPABILITY__SERVICE__INIT};
        svc[0].type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
        svc[1].type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS;
        Csi__V1__PluginCapability__VolumeExpansion exp =
            CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__INIT;
        exp.type = CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE;
        Csi__V1__PluginCapability caps[3] = {CSI__V1__PLUGIN_CAPABILITY__INIT,
                                             CSI__V1__PLUGIN_CAPABILITY__INIT,
                                             CSI__V1__PLUGIN_CAPABILITY__INIT};
        Csi__V1__PluginCapability *ptrs[3];
        for (int i = 0; i < 2; i++) {
            caps[i].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
            caps[i].service = &svc[i];
        }
        caps[2].type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_VOLUME_EXPANSION;
        caps[2].volume_expansion = &exp;
        for (int i = 0; i < 3; i++)
            ptrs[i] = &caps[i];
        Csi__V1__GetPluginCapabilitiesResponse r = CSI__V1__GET_PLUGIN_CAPABILITIES_RESPONSE__INIT;
        r.n_capabilities = 3;
        r.capabilities = ptrs;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/Probe")) {
        int n = atomic_fetch_add(&probes, 1);
        const char *err = getenv("TEST_PROBE_ERROR");
        if (err) {
            int code = CSI_UNKNOWN;
            csi_code_from_name(err, &code);
            csi_reply_error(reply, code, "probe failed on purpose");
            return;
        }
        const char *nr = getenv("TEST_PROBE_NOT_READY");
        Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
        ready.value = !(nr && n < atoi(nr));
        Csi__V1__ProbeResponse r = CSI__V1__PROBE_RESPONSE__INIT;
        if (!getenv("TEST_PROBE_NO_READY_FIELD"))
            r.ready = &ready;
        csi_reply_ok(reply, &r.base);
    }
}

static Csi__V1__ControllerServiceCapability *
ctrl_cap(Csi__V1__ControllerServiceCapability *c, Csi__V1__ControllerServiceCapability__RPC *rpc,
         int type)
{
    csi__v1__controller_service_capability__rpc__init(rpc);
    rpc->type = type;
    csi__v1__controller_service_capability__init(c);
    c->type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
    c->rpc = rpc;
    return c;
}

static void list_volumes(const Csi__V1__ListVolumesRequest *in, csi_reply *reply)
{
    int start = in->starting_token && in->starting_token[0] ? atoi(in->starting_token) : 0;
    if (start < 0 || start > N_LISTED) {
        csi_reply_error(reply, CSI_ABORTED, "bad starting_token");
        return;
    }
    int n = in->max_entries > 0 ? in->max_entries : 10;
    if (start + n > N_LISTED)
        n = N_LISTED - start;
    Csi__V1__ListVolumesResponse__Entry entries[N_LISTED];
    Csi__V1__ListVolumesResponse__Entry *ptrs[N_LISTED];
    Csi__V1__Volume vols[N_LISTED];
    char ids[N_LISTED][32];
    for (int i = 0; i < n; i++) {
        csi__v1__volume__init(&vols[i]);
        snprintf(ids[i], sizeof(ids[i]), "listed-%02d", start + i);
        vols[i].volume_id = ids[i];
        csi__v1__list_volumes_response__entry__init(&entries[i]);
        entries[i].volume = &vols[i];
        ptrs[i] = &entries[i];
    }
    char next[16] = "";
    if (start + n < N_LISTED)
        snprintf(next, sizeof(next), "%d", start + n);
    Csi__V1__ListVolumesResponse r = CSI__V1__LIST_VOLUMES_RESPONSE__INIT;
    r.n_entries = (size_t)n;
    r.entries = ptrs;
    r.next_token = next;
    csi_reply_ok(reply, &r.base);
}

static void controller(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)ud;
    if (strstr(method, "/CreateVolume")) {
        const Csi__V1__CreateVolumeRequest *in = (const void *)req;
        if (scripted_failure(in->name, reply))
            return;
        char *id = util_asprintf("vol-%s", in->name);
        Csi__V1__Volume__VolumeContextEntry ctx = CSI__V1__VOLUME__VOLUME_CONTEXT_ENTRY__INIT;
        ctx.key = "name";
        ctx.value = in->name;
        Csi__V1__Volume__VolumeContextEntry *ctxp = &ctx;
        Csi__V1__Volume vol = CSI__V1__VOLUME__INIT;
        vol.volume_id = id;
        vol.capacity_bytes = in->capacity_range ? in->capacity_range->required_bytes : 0;
        vol.n_volume_context = 1;
        vol.volume_context = &ctxp;
        Csi__V1__CreateVolumeResponse r = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
        r.volume = &vol;
        csi_reply_ok(reply, &r.base);
        free(id);
    } else if (strstr(method, "/DeleteVolume")) {
        const Csi__V1__DeleteVolumeRequest *in = (const void *)req;
        if (scripted_failure(in->volume_id, reply))
            return;
        Csi__V1__DeleteVolumeResponse r = CSI__V1__DELETE_VOLUME_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/ControllerPublishVolume")) {
        const Csi__V1__ControllerPublishVolumeRequest *in = (const void *)req;
        Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry e[2] = {
            CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__PUBLISH_CONTEXT_ENTRY__INIT,
            CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__PUBLISH_CONTEXT_ENTRY__INIT};
        e[0].key = "node";
        e[0].value = in->node_id;
        e[1].key = "volume";
        e[1].value = in->volume_id;
        Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry *ep[2] = {&e[0], &e[1]};
        Csi__V1__ControllerPublishVolumeResponse r =
            CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__INIT;
        r.n_publish_context = 2;
        r.publish_context = ep;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/ControllerUnpublishVolume")) {
        Csi__V1__ControllerUnpublishVolumeResponse r =
            CSI__V1__CONTROLLER_UNPUBLISH_VOLUME_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/ListVolumes")) {
        list_volumes((const void *)req, reply);
    } else if (strstr(method, "/GetCapacity")) {
        Csi__V1__GetCapacityResponse r = CSI__V1__GET_CAPACITY_RESPONSE__INIT;
        r.available_capacity = (int64_t)1 << 30;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/ControllerExpandVolume")) {
        const Csi__V1__ControllerExpandVolumeRequest *in = (const void *)req;
        Csi__V1__ControllerExpandVolumeResponse r =
            CSI__V1__CONTROLLER_EXPAND_VOLUME_RESPONSE__INIT;
        r.capacity_bytes = in->capacity_range ? in->capacity_range->required_bytes : 0;
        r.node_expansion_required = 1;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/CreateSnapshot")) {
        const Csi__V1__CreateSnapshotRequest *in = (const void *)req;
        char *id = util_asprintf("snap-%s", in->name);
        Google__Protobuf__Timestamp ts = GOOGLE__PROTOBUF__TIMESTAMP__INIT;
        ts.seconds = 1700000000;
        Csi__V1__Snapshot snap = CSI__V1__SNAPSHOT__INIT;
        snap.snapshot_id = id;
        snap.source_volume_id = in->source_volume_id;
        snap.size_bytes = 4096;
        snap.creation_time = &ts;
        snap.ready_to_use = 1;
        Csi__V1__CreateSnapshotResponse r = CSI__V1__CREATE_SNAPSHOT_RESPONSE__INIT;
        r.snapshot = &snap;
        csi_reply_ok(reply, &r.base);
        free(id);
    } else if (strstr(method, "/DeleteSnapshot")) {
        Csi__V1__DeleteSnapshotResponse r = CSI__V1__DELETE_SNAPSHOT_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/ControllerGetCapabilities")) {
        Csi__V1__ControllerServiceCapability c[3];
        Csi__V1__ControllerServiceCapability__RPC rpc[3];
        Csi__V1__ControllerServiceCapability *p[3] = {
            ctrl_cap(&c[0], &rpc[0],
                     CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME),
            ctrl_cap(&c[1], &rpc[1],
                     CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME),
            ctrl_cap(&c[2], &rpc[2],
                     CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES),
        };
        Csi__V1__ControllerGetCapabilitiesResponse r =
            CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
        r.n_capabilities = 3;
        r.capabilities = p;
        csi_reply_ok(reply, &r.base);
    }
}

static void node(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)ud;
    (void)req;
    if (strstr(method, "/NodeGetInfo")) {
        Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
        seg.key = "topology.example.com/zone";
        seg.value = "z1";
        Csi__V1__Topology__SegmentsEntry *segp = &seg;
        Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
        topo.n_segments = 1;
        topo.segments = &segp;
        Csi__V1__NodeGetInfoResponse r = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
        r.node_id = "node-1";
        r.max_volumes_per_node = 7;
        r.accessible_topology = &topo;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "/NodeGetCapabilities")) {
        Csi__V1__NodeServiceCapability__RPC rpc = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__INIT;
        rpc.type = CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME;
        Csi__V1__NodeServiceCapability cap = CSI__V1__NODE_SERVICE_CAPABILITY__INIT;
        cap.type_case = CSI__V1__NODE_SERVICE_CAPABILITY__TYPE_RPC;
        cap.rpc = &rpc;
        Csi__V1__NodeServiceCapability *capp = &cap;
        Csi__V1__NodeGetCapabilitiesResponse r = CSI__V1__NODE_GET_CAPABILITIES_RESPONSE__INIT;
        r.n_capabilities = 1;
        r.capabilities = &capp;
        csi_reply_ok(reply, &r.base);
    }
}

static void registration(void *ud, const char *method, const ProtobufCMessage *req,
                         csi_reply *reply)
{
    (void)ud;
    if (strstr(method, "/GetInfo")) {
        char *versions[] = {"1.0.0"};
        Pluginregistration__PluginInfo r = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
        r.type = "CSIPlugin";
        r.name = "test.csi.example.com";
        r.endpoint = "/var/lib/kubelet/plugins/test/csi.sock";
        r.n_supported_versions = 1;
        r.supported_versions = versions;
        csi_reply_ok(reply, &r.base);
    } else {
        const Pluginregistration__RegistrationStatus *in = (const void *)req;
        if (!in->plugin_registered) {
            csi_reply_error(reply, CSI_FAILED_PRECONDITION, "told: %s", in->error);
            return;
        }
        Pluginregistration__RegistrationStatusResponse r =
            PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <endpoint> [--delay=<duration>]\n", argv[0]);
        return 1;
    }
    util_duration delay = 0;
    if (argc > 2 && util_has_prefix(argv[2], "--delay=") &&
        util_duration_parse(argv[2] + 8, &delay) < 0) {
        fprintf(stderr, "%s\n", util_err_last());
        return 1;
    }
    util_sleep(delay);

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);

    csi_server *srv = NULL;
    csi_server_opts opts = {.threads = 16};
    if (csi_server_new(argv[1], &opts, &srv) < 0 ||
        csi_server_handle_all(srv, &csi__v1__identity__descriptor, identity, NULL) < 0 ||
        csi_server_handle_all(srv, &csi__v1__controller__descriptor, controller, NULL) < 0 ||
        csi_server_handle(srv, &csi__v1__node__descriptor, "NodeGetInfo", node, NULL) < 0 ||
        csi_server_handle(srv, &csi__v1__node__descriptor, "NodeGetCapabilities", node, NULL) < 0 ||
        csi_server_handle_all(srv, &pluginregistration__registration__descriptor, registration,
                              NULL) < 0 ||
        csi_server_start(srv) < 0) {
        fprintf(stderr, "csi_test_server: %s\n", util_err_last());
        csi_server_free(srv);
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    csi_server_stop(srv, UTIL_SECOND);
    csi_server_free(srv);
    return 0;
}
