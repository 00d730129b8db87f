/*
 * csi_call: one CSI controller call from a test script, through common/csi.
 *
 *   csi_call <endpoint> create-volume <name>
 *       prints the volume id of a 1 GiB mount volume on success
 *   csi_call <endpoint> create-snapshot <source-volume-id> <name>
 *       prints "<snapshot-id> <size-bytes>" on success
 *   csi_call <endpoint> delete-snapshot <snapshot-id>
 *   csi_call <endpoint> controller-unpublish <volume-id> <node-id>
 *
 * The endpoint is a socket path or unix://... Exit status: 0 on success,
 * 1 when the call failed (the gRPC code and message on stderr), 2 for bad
 * usage.
 */
#include <stdio.h>
#include <string.h>

#include "csi/csi.h"

#define CALL_TIMEOUT (10 * UTIL_SECOND)

static int usage(void)
{
    fprintf(stderr, "usage: csi_call <endpoint> create-volume <name>\n"
                    "       csi_call <endpoint> create-snapshot <source-volume-id> <name>\n"
                    "       csi_call <endpoint> delete-snapshot <snapshot-id>\n"
                    "       csi_call <endpoint> controller-unpublish <volume-id> <node-id>\n");
    return 2;
}

static int failed(const char *what, const csi_status *st)
{
    fprintf(stderr, "csi_call: %s: rpc error: code = %s desc = %s\n", what,
            csi_code_go_name(st->code), st->message);
    return 1;
}

static int create_volume(csi_conn *c, const char *name)
{
    Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
    Csi__V1__CapacityRange range = CSI__V1__CAPACITY_RANGE__INIT;
    Csi__V1__VolumeCapability cap = CSI__V1__VOLUME_CAPABILITY__INIT;
    Csi__V1__VolumeCapability__MountVolume mount = CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT;
    Csi__V1__VolumeCapability__AccessMode mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
    Csi__V1__VolumeCapability *caps[] = {&cap};
    range.required_bytes = 1LL << 30;
    mode.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    cap.mount = &mount;
    cap.access_mode = &mode;
    req.name = (char *)name;
    req.capacity_range = &range;
    req.volume_capabilities = caps;
    req.n_volume_capabilities = 1;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    csi_status st = {0};
    if (csi_create_volume(c, &req, CALL_TIMEOUT, &resp, &st) < 0)
        return failed("CreateVolume", &st);
    int rc = 0;
    if (!resp->volume || !resp->volume->volume_id || !*resp->volume->volume_id) {
        fprintf(stderr, "csi_call: CreateVolume: the response holds no volume id\n");
        rc = 1;
    } else {
        printf("%s\n", resp->volume->volume_id);
    }
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    return rc;
}

static int create_snapshot(csi_conn *c, const char *source, const char *name)
{
    Csi__V1__CreateSnapshotRequest req = CSI__V1__CREATE_SNAPSHOT_REQUEST__INIT;
    req.source_volume_id = (char *)source;
    req.name = (char *)name;
    Csi__V1__CreateSnapshotResponse *resp = NULL;
    csi_status st = {0};
    if (csi_create_snapshot(c, &req, CALL_TIMEOUT, &resp, &st) < 0)
        return failed("CreateSnapshot", &st);
    int rc = 0;
    if (!resp->snapshot || !resp->snapshot->snapshot_id || !*resp->snapshot->snapshot_id) {
        fprintf(stderr, "csi_call: CreateSnapshot: the response holds no snapshot id\n");
        rc = 1;
    } else {
        printf("%s %lld\n", resp->snapshot->snapshot_id, (long long)resp->snapshot->size_bytes);
    }
    csi__v1__create_snapshot_response__free_unpacked(resp, NULL);
    return rc;
}

static int delete_snapshot(csi_conn *c, const char *id)
{
    Csi__V1__DeleteSnapshotRequest req = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    req.snapshot_id = (char *)id;
    csi_status st = {0};
    if (csi_delete_snapshot(c, &req, CALL_TIMEOUT, &st) < 0)
        return failed("DeleteSnapshot", &st);
    return 0;
}

/* An unpublish behind the attacher's back (its reconcile tests). */
static int controller_unpublish(csi_conn *c, const char *volume, const char *node)
{
    Csi__V1__ControllerUnpublishVolumeRequest req =
        CSI__V1__CONTROLLER_UNPUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)volume;
    req.node_id = (char *)node;
    csi_status st = {0};
    if (csi_controller_unpublish_volume(c, &req, CALL_TIMEOUT, &st) < 0)
        return failed("ControllerUnpublishVolume", &st);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    const char *op = argv[2];
    bool volume = strcmp(op, "create-volume") == 0 && argc == 4;
    bool create = strcmp(op, "create-snapshot") == 0 && argc == 5;
    bool delete = strcmp(op, "delete-snapshot") == 0 && argc == 4;
    bool unpublish = strcmp(op, "controller-unpublish") == 0 && argc == 5;
    if (!volume && !create && !delete &&!unpublish)
        return usage();
    csi_conn_opts o = {.connect_timeout = 10 * UTIL_SECOND};
    csi_conn *c = NULL;
    if (csi_conn_new(argv[1], &o, &c) < 0) {
        fprintf(stderr, "csi_call: cannot connect to %s: %s\n", argv[1], util_err_last());
        return 1;
    }
    int rc = volume      ? create_volume(c, argv[3])
             : create    ? create_snapshot(c, argv[3], argv[4])
             : unpublish ? controller_unpublish(c, argv[3], argv[4])
                         : delete_snapshot(c, argv[3]);
    csi_conn_free(c);
    return rc;
}
