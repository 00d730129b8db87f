/*
 * csi: talking CSI (and the kubelet's plugin registration) over gRPC on a
 * unix socket, with the gRPC C core and protobuf-c.
 *
 * Client side: one csi_conn per driver socket, shared by every worker
 * thread. All calls go through csi_call(): pack the protobuf-c request,
 * run one unary gRPC call with its own completion queue and deadline, unpack
 * the answer. The typed helpers below are thin wrappers that add the checks
 * upstream's csi-lib-utils makes (empty driver name, probe-until-ready, all
 * ListVolumes pages).
 *
 * Server side: csi_server serves handlers on a unix socket for drivers
 * written in C, the kubelet registration socket and tests. Unknown methods
 * get UNIMPLEMENTED at once.
 *
 * Errors: functions return 0 or a negative errno. A call that reached the
 * driver and failed returns -EREMOTEIO and fills csi_status with the gRPC
 * code and message; transport failures (deadline, unavailable) come back the
 * same way with gRPC's own code, so a caller only ever looks at csi_status.
 */
#ifndef CSISIDECAR_CSI_H
#define CSISIDECAR_CSI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "csi.pb-c.h"
#include "pluginregistration.pb-c.h"
#include "util/util.h"

/* ---- endpoints ---------------------------------------------------------- */

/*
 * Accepts "unix:///abs/path" and "/abs/path"; anything else is -EINVAL with
 * a message naming `flag_name`. `*target` gets the gRPC target
 * ("unix:///abs/path"), `*path` (may be NULL) the file system path; both are
 * the caller's to free.
 */
int csi_endpoint_parse(const char *flag_name, const char *value, char **target, char **path);

/* ---- status ------------------------------------------------------------- */

/* gRPC status codes, numbered as on the wire. */
enum {
    CSI_OK = 0,
    CSI_CANCELLED = 1,
    CSI_UNKNOWN = 2,
    CSI_INVALID_ARGUMENT = 3,
    CSI_DEADLINE_EXCEEDED = 4,
    CSI_NOT_FOUND = 5,
    CSI_ALREADY_EXISTS = 6,
    CSI_PERMISSION_DENIED = 7,
    CSI_RESOURCE_EXHAUSTED = 8,
    CSI_FAILED_PRECONDITION = 9,
    CSI_ABORTED = 10,
    CSI_OUT_OF_RANGE = 11,
    CSI_UNIMPLEMENTED = 12,
    CSI_INTERNAL = 13,
    CSI_UNAVAILABLE = 14,
    CSI_DATA_LOSS = 15,
    CSI_UNAUTHENTICATED = 16,
};

#define CSI_STATUS_MSG_MAX 1024

typedef struct csi_status {
    int code;                         /* CSI_OK ... CSI_UNAUTHENTICATED */
    char message[CSI_STATUS_MSG_MAX]; /* the peer's message, cut to fit */
} csi_status;

/* "OK", "NOT_FOUND", ...; "UNKNOWN_CODE" outside the range. */
const char *csi_code_name(int code);
/* The name grpc-go prints ("InvalidArgument", "Unavailable"): what upstream's
 * events and the grpc_status_code metric label carry. */
const char *csi_code_go_name(int code);
/* A failed call as upstream's sidecars store and log it (Go's
 * status.Error text): "rpc error: code = <Go name> desc = <message>".
 * Caller frees. */
char *csi_status_text(const csi_status *st);
/* Parses a name as csi_code_name prints it; -EINVAL when unknown. */
int csi_code_from_name(const char *name, int *code);
/* Sets *st and returns -EREMOTEIO unless code is CSI_OK (then 0). */
int csi_status_set(csi_status *st, int code, const char *fmt, ...) UTIL_ATTR_PRINTF(3, 4);

/* ---- message rendering -------------------------------------------------- */

/*
 * Renders a message as compact JSON-like text for logs, with the value of
 * every `secrets` map and of `mount_flags` replaced by "***stripped***", and
 * of each entry of COSI's grant `credentials` (its protocol key is shown).
 * Returns a malloc'ed string (caller frees). `max_len` > 0 cuts the text.
 */
char *csi_msg_to_text(const ProtobufCMessage *msg, size_t max_len);

/* ---- client ------------------------------------------------------------- */

typedef struct csi_conn csi_conn;

/* Called after every call: full method path, gRPC code name, duration. */
typedef void (*csi_call_hook)(void *ud, const char *method, const char *code_name,
                              util_duration took);
/* Called once, from a monitor thread, when an established connection drops. */
typedef void (*csi_loss_hook)(void *ud);

typedef struct csi_conn_opts {
    util_duration connect_timeout; /* 0: upstream's 30 s; < 0: wait forever */
    util_duration max_backoff;     /* 0: 1 s */
    util_duration progress_every;  /* "still connecting" interval; 0: 10 s */
    csi_call_hook on_call;
    void *on_call_ud;
    csi_loss_hook on_loss;
    void *on_loss_ud;
    size_t max_log_len; /* cut logged responses at -v=5 (0: no cut) */
} csi_conn_opts;

/*
 * Connects to `endpoint` (either accepted form): waits for the socket to
 * appear and for the driver to accept the connection, retrying with backoff.
 * -ETIMEDOUT after the bound, -EINVAL for a bad endpoint.
 */
int csi_conn_new(const char *endpoint, const csi_conn_opts *opts, csi_conn **out);
void csi_conn_free(csi_conn *c);
/* After a burst: keeps `keep` of the idle completion queues kept for the
 * next calls and destroys the rest, with the memory they hold. */
void csi_conn_trim(csi_conn *c, size_t keep);
/* True once an established connection was lost (and stays true). */
bool csi_conn_lost(const csi_conn *c);
const char *csi_conn_endpoint(const csi_conn *c);

/*
 * A ready-made csi_loss_hook with upstream's behaviour: writes "Lost
 * connection to CSI driver, exiting" to the termination log and exits 1.
 */
void csi_loss_exit(void *ud);

/*
 * One unary call. `method` is the full path ("/csi.v1.Controller/CreateVolume").
 * On success *resp is an unpacked message of `resp_desc` (free it with
 * protobuf_c_message_free_unpacked(resp, NULL)) and 0 is returned.
 * Otherwise *resp is NULL, st says why and the result is -EREMOTEIO.
 * Thread-safe; timeout <= 0 means no deadline.
 */
int csi_call(csi_conn *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, util_duration timeout,
             ProtobufCMessage **resp, csi_status *st);

/* ---- typed helpers ------------------------------------------------------ */
/* Each wraps csi_call for one method; the response is the caller's to free
 * with the matching __free_unpacked(resp, NULL). */

int csi_get_plugin_info(csi_conn *c, util_duration timeout, Csi__V1__GetPluginInfoResponse **resp,
                        csi_status *st);
int csi_get_plugin_capabilities(csi_conn *c, util_duration timeout,
                                Csi__V1__GetPluginCapabilitiesResponse **resp, csi_status *st);
int csi_probe(csi_conn *c, util_duration timeout, bool *ready, csi_status *st);
/*
 * Probes until the driver says ready: ready=false and DEADLINE_EXCEEDED are
 * retried every second; any other error ends it (-EREMOTEIO). An unset
 * `ready` counts as ready. `give_up` <= 0 waits forever.
 */
int csi_probe_until_ready(csi_conn *c, util_duration timeout, util_duration give_up,
                          csi_status *st);
int csi_controller_get_capabilities(csi_conn *c, util_duration timeout,
                                    Csi__V1__ControllerGetCapabilitiesResponse **resp,
                                    csi_status *st);
int csi_node_get_info(csi_conn *c, util_duration timeout, Csi__V1__NodeGetInfoResponse **resp,
                      csi_status *st);
int csi_node_get_capabilities(csi_conn *c, util_duration timeout,
                              Csi__V1__NodeGetCapabilitiesResponse **resp, csi_status *st);
int csi_create_volume(csi_conn *c, const Csi__V1__CreateVolumeRequest *req, util_duration timeout,
                      Csi__V1__CreateVolumeResponse **resp, csi_status *st);
int csi_delete_volume(csi_conn *c, const Csi__V1__DeleteVolumeRequest *req, util_duration timeout,
                      csi_status *st);
int csi_controller_publish_volume(csi_conn *c, const Csi__V1__ControllerPublishVolumeRequest *req,
                                  util_duration timeout,
                                  Csi__V1__ControllerPublishVolumeResponse **resp, csi_status *st);
int csi_controller_unpublish_volume(csi_conn *c,
                                    const Csi__V1__ControllerUnpublishVolumeRequest *req,
                                    util_duration timeout, csi_status *st);
/* Calls `fn` for every entry over all pages; `fn` returning non-zero stops
 * the walk and becomes the result. `page_size` 0 lets the driver choose. */
typedef int (*csi_volume_fn)(void *ud, const Csi__V1__ListVolumesResponse__Entry *entry);
int csi_list_volumes_all(csi_conn *c, int32_t page_size, util_duration timeout, csi_volume_fn fn,
                         void *ud, csi_status *st);
int csi_get_capacity(csi_conn *c, const Csi__V1__GetCapacityRequest *req, util_duration timeout,
                     Csi__V1__GetCapacityResponse **resp, csi_status *st);
int csi_controller_expand_volume(csi_conn *c, const Csi__V1__ControllerExpandVolumeRequest *req,
                                 util_duration timeout,
                                 Csi__V1__ControllerExpandVolumeResponse **resp, csi_status *st);
int csi_create_snapshot(csi_conn *c, const Csi__V1__CreateSnapshotRequest *req,
                        util_duration timeout, Csi__V1__CreateSnapshotResponse **resp,
                        csi_status *st);
int csi_delete_snapshot(csi_conn *c, const Csi__V1__DeleteSnapshotRequest *req,
                        util_duration timeout, csi_status *st);

/* Capability sets, as bit masks indexed by the proto enum values. */
typedef struct csi_caps {
    uint64_t plugin;     /* bit Csi__V1__PluginCapability__Service__Type */
    uint64_t expansion;  /* bit Csi__V1__PluginCapability__VolumeExpansion__Type */
    uint64_t controller; /* bit Csi__V1__ControllerServiceCapability__RPC__Type */
    uint64_t node;       /* bit Csi__V1__NodeServiceCapability__RPC__Type */
} csi_caps;

#define CSI_CAP(mask, bit) ((((mask) >> (bit)) & 1u) != 0)

/* Fill the masks of `caps` from the responses (either may be NULL). */
void csi_caps_from_plugin(csi_caps *caps, const Csi__V1__GetPluginCapabilitiesResponse *r);
void csi_caps_from_controller(csi_caps *caps, const Csi__V1__ControllerGetCapabilitiesResponse *r);
void csi_caps_from_node(csi_caps *caps, const Csi__V1__NodeGetCapabilitiesResponse *r);

/* ---- server ------------------------------------------------------------- */

typedef struct csi_server csi_server;
typedef struct csi_reply csi_reply;

/*
 * A method handler. It runs on one of the server's threads (many at once)
 * and must answer exactly once with csi_reply_ok or csi_reply_error; a
 * handler that returns without answering produces INTERNAL.
 */
typedef void (*csi_handler_fn)(void *ud, const char *method, const ProtobufCMessage *req,
                               csi_reply *reply);

/* Packs `resp` at once: the handler may free it as soon as this returns. */
int csi_reply_ok(csi_reply *reply, const ProtobufCMessage *resp);
int csi_reply_error(csi_reply *reply, int code, const char *fmt, ...) UTIL_ATTR_PRINTF(3, 4);
/* Remaining time until the caller's deadline (INT64_MAX when none). */
util_duration csi_reply_time_left(const csi_reply *reply);

typedef struct csi_server_opts {
    int threads;          /* handler threads; 0: 8 */
    unsigned socket_mode; /* chmod of the socket file; 0: leave as created */
    bool owner_only;      /* umask 0077 around bind (registrar) */
} csi_server_opts;

/*
 * Prepares a server on `endpoint` (either accepted form). A stale socket
 * file there is replaced at start; any other kind of file is an error.
 */
int csi_server_new(const char *endpoint, const csi_server_opts *opts, csi_server **out);
/* Routes `method` of `svc` ("CreateVolume" of csi__v1__controller__descriptor). */
int csi_server_handle(csi_server *s, const ProtobufCServiceDescriptor *svc, const char *method,
                      csi_handler_fn fn, void *ud);
/* Routes every method of `svc` to one handler, which switches on `method`. */
int csi_server_handle_all(csi_server *s, const ProtobufCServiceDescriptor *svc, csi_handler_fn fn,
                          void *ud);
int csi_server_start(csi_server *s);
/*
 * Stops accepting calls, lets in-flight handlers finish for up to `grace`
 * (then cancels them), removes the socket file. Safe to call twice.
 */
void csi_server_stop(csi_server *s, util_duration grace);
void csi_server_free(csi_server *s);
const char *csi_server_path(const csi_server *s);

#endif
