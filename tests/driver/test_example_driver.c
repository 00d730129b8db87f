/*
 * The example CSI driver against common/csi's client: every RPC's success
 * path, every error code the spec's tables (and the driver's README) list,
 * idempotency, state across SIGKILL, fault injection and capability flags.
 *
 * Most tests share one driver (unique names keep them apart); tests that
 * need other flags, a fresh pool or a crash start their own on a fresh
 * state directory and socket.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "harness.h"

#define TMO (10 * UTIL_SECOND)
#define GIB ((int64_t)1 << 30)
#define MIB ((int64_t)1 << 20)

#define SNW  CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER
#define SNRO CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_READER_ONLY
#define MNRO CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY
#define MNMW CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER
#define SNMW CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER

#define CTRL "/csi.v1.Controller/"
#define NODE "/csi.v1.Node/"

/* ---- driver processes ---------------------------------------------------------- */

typedef struct dproc {
    pid_t pid;
    char *dir;
    char *endpoint;
    char *flags[16];
    int n_flags;
    csi_conn *c;
    char *log;               /* stderr goes here when set */
    const char *const *wrap; /* NULL-ended command the driver runs under, or NULL */
} dproc;

static char *driver_bin;
static int counter;
static dproc *shared;

static void dspawn(dproc *p)
{
    char *ep = util_asprintf("--endpoint=%s", p->endpoint);
    char *sd = util_asprintf("--state-dir=%s", p->dir);
    char *argv[32];
    int n = 0;
    for (int i = 0; p->wrap && p->wrap[i]; i++)
        argv[n++] = (char *)p->wrap[i];
    argv[n++] = driver_bin;
    argv[n++] = ep;
    argv[n++] = sd;
    argv[n++] = "--nodeid=node-1";
    argv[n++] = "--known-nodes=node-2,node-3";
    argv[n++] = "--topology=topology.example.com/zone=z1";
    for (int i = 0; i < p->n_flags; i++)
        argv[n++] = p->flags[i];
    argv[n] = NULL;
    if (p->log) {
        /* Through a shell that execs the driver: same pid, stderr to a file. */
        char *cmd = util_strdup("exec");
        for (int i = 0; i < n; i++) {
            char *next = util_asprintf("%s '%s'", cmd, argv[i]);
            free(cmd);
            cmd = next;
        }
        char *next = util_asprintf("%s 2>'%s'", cmd, p->log);
        free(cmd);
        char *sh[] = {"/bin/sh", "-c", next, NULL};
        p->pid = th_spawn(sh, NULL);
        free(next);
    } else {
        p->pid = th_spawn(argv, NULL);
    }
    free(ep);
    free(sd);
    assert_true(p->pid > 0);
    csi_conn_opts o = {.connect_timeout = 20 * UTIL_SECOND};
    if (csi_conn_new(p->endpoint, &o, &p->c) < 0)
        fail_msg("cannot connect to the driver: %s", util_err_last());
}

/* Extra flags as a NULL-ended array; FLAGS("--a", "--b") builds one. */
#define FLAGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static void dset_flags(dproc *p, const char *const *flags)
{
    for (int i = 0; i < p->n_flags; i++)
        free(p->flags[i]);
    p->n_flags = 0;
    for (; flags && *flags; flags++)
        p->flags[p->n_flags++] = util_strdup(*flags);
}

/* A driver with its own state directory and socket, plus `flags` (may be
 * NULL); its stderr goes to `log` when that is set. */
static dproc *dstart_wrapped(const char *const *flags, const char *log, const char *const *wrap)
{
    dproc *p = util_calloc(1, sizeof(*p));
    p->wrap = wrap;
    counter++;
    p->dir = util_asprintf("%s/state%d", th_tmpdir(), counter);
    p->endpoint = util_asprintf("unix://%s/d%d.sock", th_tmpdir(), counter);
    p->log = log ? util_strdup(log) : NULL;
    dset_flags(p, flags);
    dspawn(p);
    return p;
}

static dproc *dstart_logged(const char *const *flags, const char *log)
{
    return dstart_wrapped(flags, log, NULL);
}

static dproc *dstart(const char *const *flags)
{
    return dstart_logged(flags, NULL);
}

/* Sends `sig` (0: just waits for an exit already under way); wait status. */
static int dstop(dproc *p, int sig)
{
    csi_conn_free(p->c);
    p->c = NULL;
    int status = th_stop(p->pid, sig);
    p->pid = 0;
    return status;
}

/* Same state directory and socket, new process, `flags` instead of the old ones. */
static void drestart(dproc *p, const char *const *flags)
{
    dset_flags(p, flags);
    dspawn(p);
}

static void dfree(dproc *p)
{
    if (!p)
        return;
    if (p->pid)
        dstop(p, SIGTERM);
    for (int i = 0; i < p->n_flags; i++)
        free(p->flags[i]);
    free(p->dir);
    free(p->endpoint);
    free(p->log);
    free(p);
}

/* Distinct names, from a ring of buffers (tests are single-threaded). */
static const char *nm(const char *prefix)
{
    static char ring[16][96];
    static int at;
    char *b = ring[at++ % 16];
    snprintf(b, sizeof(ring[0]), "%s-%d", prefix, ++counter);
    return b;
}

/* ---- requests ----------------------------------------------------------------------- */

typedef struct capb {
    Csi__V1__VolumeCapability cap;
    Csi__V1__VolumeCapability__MountVolume mount;
    Csi__V1__VolumeCapability__BlockVolume block;
    Csi__V1__VolumeCapability__AccessMode mode;
} capb;

static Csi__V1__VolumeCapability *capb_init(capb *b, bool block, int mode)
{
    csi__v1__volume_capability__init(&b->cap);
    csi__v1__volume_capability__mount_volume__init(&b->mount);
    csi__v1__volume_capability__block_volume__init(&b->block);
    csi__v1__volume_capability__access_mode__init(&b->mode);
    b->mode.mode = mode;
    b->cap.access_mode = &b->mode;
    if (block) {
        b->cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
        b->cap.block = &b->block;
    } else {
        b->mount.fs_type = "ext4";
        b->cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
        b->cap.mount = &b->mount;
    }
    return &b->cap;
}

typedef struct cvr {
    Csi__V1__CreateVolumeRequest req;
    Csi__V1__CapacityRange cr;
    capb cb[2];
    Csi__V1__VolumeCapability *caps[2];
    Csi__V1__VolumeContentSource src;
    Csi__V1__VolumeContentSource__SnapshotSource snap;
    Csi__V1__VolumeContentSource__VolumeSource vol;
    Csi__V1__CreateVolumeRequest__ParametersEntry param;
    Csi__V1__CreateVolumeRequest__ParametersEntry *paramp;
    Csi__V1__CreateVolumeRequest__SecretsEntry secret;
    Csi__V1__CreateVolumeRequest__SecretsEntry *secretp;
} cvr;

/* A mount SINGLE_NODE_WRITER request; required/limit 0 leave the range unset. */
static Csi__V1__CreateVolumeRequest *cvr_init(cvr *r, const char *name, int64_t required,
                                              int64_t limit)
{
    memset(r, 0, sizeof(*r));
    csi__v1__create_volume_request__init(&r->req);
    r->req.name = (char *)name;
    r->caps[0] = capb_init(&r->cb[0], false, SNW);
    r->req.n_volume_capabilities = 1;
    r->req.volume_capabilities = r->caps;
    if (required || limit) {
        csi__v1__capacity_range__init(&r->cr);
        r->cr.required_bytes = required;
        r->cr.limit_bytes = limit;
        r->req.capacity_range = &r->cr;
    }
    /* Secrets ride along everywhere; the driver must never print them. */
    csi__v1__create_volume_request__secrets_entry__init(&r->secret);
    r->secret.key = "password";
    r->secret.value = "hunter2-never-logged";
    r->secretp = &r->secret;
    r->req.n_secrets = 1;
    r->req.secrets = &r->secretp;
    return &r->req;
}

static void cvr_snapshot(cvr *r, const char *id)
{
    csi__v1__volume_content_source__init(&r->src);
    csi__v1__volume_content_source__snapshot_source__init(&r->snap);
    r->snap.snapshot_id = (char *)id;
    r->src.type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT;
    r->src.snapshot = &r->snap;
    r->req.volume_content_source = &r->src;
}

static void cvr_clone(cvr *r, const char *id)
{
    csi__v1__volume_content_source__init(&r->src);
    csi__v1__volume_content_source__volume_source__init(&r->vol);
    r->vol.volume_id = (char *)id;
    r->src.type_case = CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME;
    r->src.volume = &r->vol;
    r->req.volume_content_source = &r->src;
}

static void cvr_param(cvr *r, const char *key, const char *value)
{
    csi__v1__create_volume_request__parameters_entry__init(&r->param);
    r->param.key = (char *)key;
    r->param.value = (char *)value;
    r->paramp = &r->param;
    r->req.n_parameters = 1;
    r->req.parameters = &r->paramp;
}

static int code(int r, const csi_status *st)
{
    return r == 0 ? CSI_OK : st->code;
}

/* Any RPC by full path; `resp` NULL frees the answer. Returns the gRPC code. */
static int rpc(dproc *p, const char *method, const ProtobufCMessage *req,
               const ProtobufCMessageDescriptor *rd, void *resp)
{
    csi_status st = {0};
    ProtobufCMessage *out = NULL;
    int r = csi_call(p->c, method, req, rd, TMO, &out, &st);
    if (resp)
        *(ProtobufCMessage **)resp = out;
    else if (out)
        protobuf_c_message_free_unpacked(out, NULL);
    return code(r, &st);
}

static int create(dproc *p, const Csi__V1__CreateVolumeRequest *req,
                  Csi__V1__CreateVolumeResponse **resp)
{
    return rpc(p, CTRL "CreateVolume", &req->base, &csi__v1__create_volume_response__descriptor,
               resp);
}

/* Creates a volume that must succeed; returns its id (caller frees). */
static char *new_volume(dproc *p, const char *name, int64_t bytes)
{
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(p, cvr_init(&r, name, bytes, 0), &resp), CSI_OK);
    char *id = util_strdup(resp->volume->volume_id);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    return id;
}

static char *new_block_volume(dproc *p, const char *name)
{
    cvr r;
    cvr_init(&r, name, 0, 0);
    capb_init(&r.cb[0], true, SNW);
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(p, &r.req, &resp), CSI_OK);
    char *id = util_strdup(resp->volume->volume_id);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    return id;
}

static int delete_volume(dproc *p, const char *id)
{
    Csi__V1__DeleteVolumeRequest req = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)id;
    return rpc(p, CTRL "DeleteVolume", &req.base, &csi__v1__delete_volume_response__descriptor,
               NULL);
}

static int cpub_full(dproc *p, const char *vol, const char *node, bool block, int mode, bool ro,
                     char **device_path)
{
    capb cb;
    Csi__V1__ControllerPublishVolumeRequest req = CSI__V1__CONTROLLER_PUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.node_id = (char *)node;
    req.volume_capability = capb_init(&cb, block, mode);
    req.readonly = ro;
    Csi__V1__ControllerPublishVolumeResponse *resp = NULL;
    int c = rpc(p, CTRL "ControllerPublishVolume", &req.base,
                &csi__v1__controller_publish_volume_response__descriptor, &resp);
    if (device_path)
        *device_path = NULL;
    if (resp && device_path)
        for (size_t i = 0; i < resp->n_publish_context; i++)
            if (strcmp(resp->publish_context[i]->key, "devicePath") == 0)
                *device_path = util_strdup(resp->publish_context[i]->value);
    if (resp)
        csi__v1__controller_publish_volume_response__free_unpacked(resp, NULL);
    return c;
}

static int cpub(dproc *p, const char *vol, const char *node, int mode, bool ro)
{
    return cpub_full(p, vol, node, false, mode, ro, NULL);
}

static int cunpub(dproc *p, const char *vol, const char *node)
{
    Csi__V1__ControllerUnpublishVolumeRequest req =
        CSI__V1__CONTROLLER_UNPUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.node_id = (char *)(node ? node : "");
    return rpc(p, CTRL "ControllerUnpublishVolume", &req.base,
               &csi__v1__controller_unpublish_volume_response__descriptor, NULL);
}

static int create_snapshot(dproc *p, const char *name, const char *vol,
                           Csi__V1__CreateSnapshotResponse **resp)
{
    Csi__V1__CreateSnapshotRequest req = CSI__V1__CREATE_SNAPSHOT_REQUEST__INIT;
    req.name = (char *)name;
    req.source_volume_id = (char *)vol;
    return rpc(p, CTRL "CreateSnapshot", &req.base, &csi__v1__create_snapshot_response__descriptor,
               resp);
}

static char *new_snapshot(dproc *p, const char *name, const char *vol)
{
    Csi__V1__CreateSnapshotResponse *resp = NULL;
    assert_int_equal(create_snapshot(p, name, vol, &resp), CSI_OK);
    char *id = util_strdup(resp->snapshot->snapshot_id);
    csi__v1__create_snapshot_response__free_unpacked(resp, NULL);
    return id;
}

static int delete_snapshot(dproc *p, const char *id)
{
    Csi__V1__DeleteSnapshotRequest req = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    req.snapshot_id = (char *)id;
    return rpc(p, CTRL "DeleteSnapshot", &req.base, &csi__v1__delete_snapshot_response__descriptor,
               NULL);
}

static int expand(dproc *p, const char *vol, int64_t required, int64_t limit, bool block,
                  Csi__V1__ControllerExpandVolumeResponse **resp)
{
    capb cb;
    Csi__V1__CapacityRange cr = CSI__V1__CAPACITY_RANGE__INIT;
    cr.required_bytes = required;
    cr.limit_bytes = limit;
    Csi__V1__ControllerExpandVolumeRequest req = CSI__V1__CONTROLLER_EXPAND_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.capacity_range = &cr;
    req.volume_capability = capb_init(&cb, block, SNW);
    return rpc(p, CTRL "ControllerExpandVolume", &req.base,
               &csi__v1__controller_expand_volume_response__descriptor, resp);
}

static int64_t capacity(dproc *p)
{
    Csi__V1__GetCapacityRequest req = CSI__V1__GET_CAPACITY_REQUEST__INIT;
    Csi__V1__GetCapacityResponse *resp = NULL;
    assert_int_equal(
        rpc(p, CTRL "GetCapacity", &req.base, &csi__v1__get_capacity_response__descriptor, &resp),
        CSI_OK);
    int64_t v = resp->available_capacity;
    csi__v1__get_capacity_response__free_unpacked(resp, NULL);
    return v;
}

typedef struct ctxb {
    Csi__V1__NodeStageVolumeRequest__PublishContextEntry e;
    Csi__V1__NodeStageVolumeRequest__PublishContextEntry *ep;
} ctxb;

static int nstage_cap(dproc *p, const char *vol, const char *path, bool block, int mode,
                      const char *dev)
{
    capb cb;
    ctxb ctx;
    Csi__V1__NodeStageVolumeRequest req = CSI__V1__NODE_STAGE_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.staging_target_path = (char *)path;
    req.volume_capability = capb_init(&cb, block, mode);
    if (dev) {
        csi__v1__node_stage_volume_request__publish_context_entry__init(&ctx.e);
        ctx.e.key = "devicePath";
        ctx.e.value = (char *)dev;
        ctx.ep = &ctx.e;
        req.n_publish_context = 1;
        req.publish_context = &ctx.ep;
    }
    return rpc(p, NODE "NodeStageVolume", &req.base,
               &csi__v1__node_stage_volume_response__descriptor, NULL);
}

static int nstage(dproc *p, const char *vol, const char *path, int mode, const char *dev)
{
    return nstage_cap(p, vol, path, false, mode, dev);
}

static int nunstage(dproc *p, const char *vol, const char *path)
{
    Csi__V1__NodeUnstageVolumeRequest req = CSI__V1__NODE_UNSTAGE_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.staging_target_path = (char *)path;
    return rpc(p, NODE "NodeUnstageVolume", &req.base,
               &csi__v1__node_unstage_volume_response__descriptor, NULL);
}

static int npublish_cap(dproc *p, const char *vol, const char *staging, const char *target,
                        bool block, int mode, bool ro)
{
    capb cb;
    Csi__V1__NodePublishVolumeRequest req = CSI__V1__NODE_PUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.staging_target_path = (char *)(staging ? staging : "");
    req.target_path = (char *)target;
    req.volume_capability = capb_init(&cb, block, mode);
    req.readonly = ro;
    return rpc(p, NODE "NodePublishVolume", &req.base,
               &csi__v1__node_publish_volume_response__descriptor, NULL);
}

static int npublish(dproc *p, const char *vol, const char *staging, const char *target, int mode,
                    bool ro)
{
    return npublish_cap(p, vol, staging, target, false, mode, ro);
}

static int nunpublish(dproc *p, const char *vol, const char *target)
{
    Csi__V1__NodeUnpublishVolumeRequest req = CSI__V1__NODE_UNPUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.target_path = (char *)target;
    return rpc(p, NODE "NodeUnpublishVolume", &req.base,
               &csi__v1__node_unpublish_volume_response__descriptor, NULL);
}

static Csi__V1__ListVolumesResponse *list_volumes(dproc *p, int32_t max, const char *token, int *c)
{
    Csi__V1__ListVolumesRequest req = CSI__V1__LIST_VOLUMES_REQUEST__INIT;
    req.max_entries = max;
    req.starting_token = (char *)(token ? token : "");
    Csi__V1__ListVolumesResponse *resp = NULL;
    *c = rpc(p, CTRL "ListVolumes", &req.base, &csi__v1__list_volumes_response__descriptor, &resp);
    return resp;
}

/* ---- status.json and faults.json ------------------------------------------------------- */

static json_object *status(dproc *p)
{
    char *path = util_asprintf("%s/status.json", p->dir);
    json_object *o = json_object_from_file(path);
    free(path);
    assert_non_null(o);
    return o;
}

static int64_t status_calls(dproc *p, const char *method)
{
    json_object *st = status(p), *calls, *n;
    int64_t v = 0;
    if (json_object_object_get_ex(st, "calls", &calls) &&
        json_object_object_get_ex(calls, method, &n))
        v = json_object_get_int64(n);
    json_object_put(st);
    return v;
}

/* The status entry of the volume called `name` (NULL when absent). */
static json_object *status_volume(json_object *st, const char *name)
{
    json_object *vols, *n;
    assert_true(json_object_object_get_ex(st, "volumes", &vols));
    for (size_t i = 0; i < json_object_array_length(vols); i++) {
        json_object *v = json_object_array_get_idx(vols, i);
        if (json_object_object_get_ex(v, "name", &n) &&
            strcmp(json_object_get_string(n), name) == 0)
            return v;
    }
    return NULL;
}

static bool status_has_volume(dproc *p, const char *name)
{
    json_object *st = status(p);
    bool found = status_volume(st, name) != NULL;
    json_object_put(st);
    return found;
}

/* Atomically, so that the driver never reads half a file. */
static void write_faults(dproc *p, const char *json)
{
    char *tmp = util_asprintf("%s/faults.json.tmp", p->dir);
    char *path = util_asprintf("%s/faults.json", p->dir);
    FILE *f = fopen(tmp, "w");
    assert_non_null(f);
    fputs(json, f);
    fclose(f);
    assert_int_equal(rename(tmp, path), 0);
    free(tmp);
    free(path);
}

static void remove_faults(dproc *p)
{
    char *path = util_asprintf("%s/faults.json", p->dir);
    unlink(path);
    free(path);
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static bool exists(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0;
}

/* ---- setup ------------------------------------------------------------------------ */

static int group_setup(void **state)
{
    (void)state;
    driver_bin = th_build_path("bin/example-csi-driver");
    shared = dstart(FLAGS("--capacity=1Ti"));
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    dfree(shared);
    th_stop_all();
    free(driver_bin);
    return 0;
}

/* ---- flags and lifecycle -------------------------------------------------------------- */

/* Runs the driver with `flags` and stderr to a file; returns its exit
 * status and the number of lines it printed. */
static int run_bad(const char *flags, int *lines)
{
    char *err = util_asprintf("%s/stderr%d", th_tmpdir(), ++counter);
    char *cmd = util_asprintf("exec '%s' %s 2>'%s'", driver_bin, flags, err);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    pid_t pid = th_spawn(argv, NULL);
    int status = th_stop(pid, 0);
    FILE *f = fopen(err, "r");
    assert_non_null(f);
    *lines = 0;
    for (int ch; (ch = fgetc(f)) != EOF;)
        *lines += ch == '\n';
    fclose(f);
    free(cmd);
    free(err);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_bad_flags_print_one_line_and_exit_1(void **state)
{
    (void)state;
    char *sd = util_asprintf("--state-dir=%s/bad", th_tmpdir());
    char *ep = util_asprintf("--endpoint=unix://%s/bad.sock", th_tmpdir());
    const char *bad[] = {
        "",                                   /* no --state-dir */
        "--capacity=10Qi",                    /* unknown suffix */
        "--capacity=-5",                      /* negative */
        "--controller-caps=CREATE_VOLUME",    /* no such capability */
        "--plugin-caps=ONLINE,OFFLINE",       /* two expansion modes */
        "--node-caps=STAGE",                  /* no such capability */
        "--topology=zone",                    /* not key=value */
        "--fault=CreateVolume:explode=1",     /* unknown rule */
        "--fault=NoSuchCall:delay=1s",        /* unknown method */
        "--fault=CreateVolume:fail=2:NOPE",   /* unknown code */
        "--fault=CreateVolume:crash=0:after", /* count must be positive */
        "--drivername=-bad-",                 /* not a driver name */
        "--max-volumes-per-node=-1",          /* negative */
        "--no-such-flag",                     /* unknown flag */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *flags = util_asprintf("%s %s %s", ep, i ? sd : "", bad[i]);
        int lines = -1;
        int rc = run_bad(flags, &lines);
        if (rc != 1 || lines != 1)
            fail_msg("%s: exit %d, %d lines on stderr", bad[i], rc, lines);
        free(flags);
    }
    free(sd);
    free(ep);
}

static void test_sigterm_stops_gracefully_and_removes_socket(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    bool ready = false;
    csi_status st;
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    const char *path = p->endpoint + strlen("unix://");
    assert_true(exists(path));
    int status = dstop(p, SIGTERM);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_false(exists(path));
    dfree(p);
}

static void test_capacity_flag_accepts_kubernetes_suffixes(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--capacity=3Gi"));
    assert_int_equal(capacity(p), 3 * GIB);
    dfree(p);
    p = dstart(FLAGS("--capacity=1073741824"));
    assert_int_equal(capacity(p), GIB);
    dfree(p);
}

/* ---- Identity ------------------------------------------------------------------------ */

static void test_get_plugin_info_names_the_driver(void **state)
{
    (void)state;
    csi_status st;
    Csi__V1__GetPluginInfoResponse *info = NULL;
    assert_int_equal(csi_get_plugin_info(shared->c, TMO, &info, &st), 0);
    assert_string_equal(info->name, "hostpath.csi.example.com");
    assert_true(info->vendor_version && info->vendor_version[0]);
    csi__v1__get_plugin_info_response__free_unpacked(info, NULL);

    dproc *p = dstart(FLAGS("--drivername=other.csi.example.org"));
    assert_int_equal(csi_get_plugin_info(p->c, TMO, &info, &st), 0);
    assert_string_equal(info->name, "other.csi.example.org");
    csi__v1__get_plugin_info_response__free_unpacked(info, NULL);
    dfree(p);
}

static void test_plugin_capabilities_follow_the_flag(void **state)
{
    (void)state;
    csi_status st;
    Csi__V1__GetPluginCapabilitiesResponse *pc = NULL;
    assert_int_equal(csi_get_plugin_capabilities(shared->c, TMO, &pc, &st), 0);
    csi_caps caps = {0};
    csi_caps_from_plugin(&caps, pc);
    csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
    assert_true(
        CSI_CAP(caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE));
    assert_true(CSI_CAP(
        caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS));
    assert_true(
        CSI_CAP(caps.expansion, CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__ONLINE));

    dproc *p = dstart(FLAGS("--plugin-caps=CONTROLLER_SERVICE,OFFLINE"));
    assert_int_equal(csi_get_plugin_capabilities(p->c, TMO, &pc, &st), 0);
    memset(&caps, 0, sizeof(caps));
    csi_caps_from_plugin(&caps, pc);
    csi__v1__get_plugin_capabilities_response__free_unpacked(pc, NULL);
    assert_false(CSI_CAP(
        caps.plugin, CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS));
    assert_true(
        CSI_CAP(caps.expansion, CSI__V1__PLUGIN_CAPABILITY__VOLUME_EXPANSION__TYPE__OFFLINE));
    dfree(p);
}

static void test_probe_is_ready(void **state)
{
    (void)state;
    csi_status st;
    assert_int_equal(csi_probe_until_ready(shared->c, TMO, TMO, &st), 0);
}

/* ---- CreateVolume ---------------------------------------------------------------------- */

static void test_create_volume_returns_size_context_and_topology(void **state)
{
    (void)state;
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), 5 * MIB, 0), &resp), CSI_OK);
    const Csi__V1__Volume *v = resp->volume;
    assert_true(util_has_prefix(v->volume_id, "vol-"));
    assert_int_equal(v->capacity_bytes, 5 * MIB);
    assert_int_equal(v->n_volume_context, 1);
    assert_string_equal(v->volume_context[0]->key, "path");
    assert_true(is_dir(v->volume_context[0]->value));
    /* No requirements: where this node is. */
    assert_int_equal(v->n_accessible_topology, 1);
    assert_int_equal(v->accessible_topology[0]->n_segments, 1);
    assert_string_equal(v->accessible_topology[0]->segments[0]->key, "topology.example.com/zone");
    assert_string_equal(v->accessible_topology[0]->segments[0]->value, "z1");
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
}

static void test_create_volume_same_name_compatible_request_is_idempotent(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    char *a = new_volume(shared, name, 10 * MIB);
    char *b = new_volume(shared, name, 10 * MIB);
    assert_string_equal(a, b);
    /* A range the existing size satisfies is compatible too. */
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(shared, cvr_init(&r, name, 5 * MIB, 20 * MIB), &resp), CSI_OK);
    assert_string_equal(resp->volume->volume_id, a);
    assert_int_equal(resp->volume->capacity_bytes, 10 * MIB);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    free(a);
    free(b);
}

static void test_create_volume_same_name_incompatible_size_is_already_exists(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    free(new_volume(shared, name, 10 * MIB));
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, name, 20 * MIB, 0), NULL), CSI_ALREADY_EXISTS);
    assert_int_equal(create(shared, cvr_init(&r, name, 0, 5 * MIB), NULL), CSI_ALREADY_EXISTS);
}

static void test_create_volume_same_name_different_source_is_already_exists(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    char *src = new_volume(shared, nm("src"), 10 * MIB);
    char *vol = new_volume(shared, name, 10 * MIB);
    cvr r;
    cvr_init(&r, name, 10 * MIB, 0);
    cvr_clone(&r, src);
    assert_int_equal(create(shared, &r.req, NULL), CSI_ALREADY_EXISTS);
    free(src);
    free(vol);
}

static void test_create_volume_same_name_different_parameters_is_already_exists(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    cvr r;
    cvr_init(&r, name, 0, 0);
    cvr_param(&r, "tier", "gold");
    assert_int_equal(create(shared, &r.req, NULL), CSI_OK);
    assert_int_equal(create(shared, &r.req, NULL), CSI_OK);
    cvr_param(&r, "tier", "silver");
    assert_int_equal(create(shared, &r.req, NULL), CSI_ALREADY_EXISTS);
}

static void test_create_volume_same_name_other_access_type_is_already_exists(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    free(new_volume(shared, name, 0));
    cvr r;
    cvr_init(&r, name, 0, 0);
    capb_init(&r.cb[0], true, SNW);
    assert_int_equal(create(shared, &r.req, NULL), CSI_ALREADY_EXISTS);
}

static void test_create_volume_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, "", 0, 0), NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, nm("pvc"), 0, 0);
    r.req.n_volume_capabilities = 0;
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, nm("pvc"), 0, 0);
    r.cb[0].cap.access_mode = NULL;
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, nm("pvc"), 0, 0);
    r.cb[0].cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE__NOT_SET;
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, nm("pvc"), 0, 0);
    r.cb[0].mode.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__UNKNOWN;
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
}

static void test_create_volume_limit_below_required_is_invalid_argument(void **state)
{
    (void)state;
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), 20 * MIB, 10 * MIB), NULL),
                     CSI_INVALID_ARGUMENT);
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), -1, 0), NULL), CSI_INVALID_ARGUMENT);
}

static void test_create_volume_block_and_mount_together_is_invalid_argument(void **state)
{
    (void)state;
    cvr r;
    cvr_init(&r, nm("pvc"), 0, 0);
    r.caps[1] = capb_init(&r.cb[1], true, SNW);
    r.req.n_volume_capabilities = 2;
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
}

static void test_create_volume_name_with_control_character_is_invalid_argument(void **state)
{
    (void)state;
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, "bad\x01name", 0, 0), NULL), CSI_INVALID_ARGUMENT);
    char longname[200];
    memset(longname, 'a', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(create(shared, cvr_init(&r, longname, 0, 0), NULL), CSI_INVALID_ARGUMENT);
}

static void test_request_with_invalid_utf8_is_invalid_argument(void **state)
{
    (void)state;
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, "bad\xc3\x28", 0, 0), NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, nm("pvc"), 0, 0);
    cvr_param(&r, "key", "\xff\xfe");
    assert_int_equal(create(shared, &r.req, NULL), CSI_INVALID_ARGUMENT);
}

static void test_create_volume_size_defaults_to_1gi_clamped_to_limit(void **state)
{
    (void)state;
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), 0, 0), &resp), CSI_OK);
    assert_int_equal(resp->volume->capacity_bytes, GIB);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), 0, 300 * MIB), &resp), CSI_OK);
    assert_int_equal(resp->volume->capacity_bytes, 300 * MIB);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
}

static void test_create_volume_larger_than_the_pool_is_out_of_range(void **state)
{
    (void)state;
    cvr r;
    assert_int_equal(create(shared, cvr_init(&r, nm("pvc"), 2048 * GIB, 0), NULL),
                     CSI_OUT_OF_RANGE);
}

static void test_create_volume_beyond_free_capacity_is_resource_exhausted(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--capacity=100Mi"));
    free(new_volume(p, "a", 60 * MIB));
    cvr r;
    assert_int_equal(create(p, cvr_init(&r, "b", 60 * MIB, 0), NULL), CSI_RESOURCE_EXHAUSTED);
    assert_int_equal(create(p, cvr_init(&r, "c", 40 * MIB, 0), NULL), CSI_OK);
    assert_int_equal(capacity(p), 0);
    dfree(p);
}

static void test_create_volume_from_missing_source_is_not_found(void **state)
{
    (void)state;
    cvr r;
    cvr_init(&r, nm("pvc"), 0, 0);
    cvr_snapshot(&r, "snap-0000000000000000");
    assert_int_equal(create(shared, &r.req, NULL), CSI_NOT_FOUND);
    cvr_init(&r, nm("pvc"), 0, 0);
    cvr_clone(&r, "vol-0000000000000000");
    assert_int_equal(create(shared, &r.req, NULL), CSI_NOT_FOUND);
}

static void test_create_volume_from_snapshot_and_clone_report_the_source(void **state)
{
    (void)state;
    char *src = new_volume(shared, nm("src"), 50 * MIB);
    char *snap = new_snapshot(shared, nm("snap"), src);
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    cvr_init(&r, nm("restore"), 0, 0);
    cvr_snapshot(&r, snap);
    assert_int_equal(create(shared, &r.req, &resp), CSI_OK);
    assert_int_equal(resp->volume->capacity_bytes, 50 * MIB); /* the source's size */
    assert_non_null(resp->volume->content_source);
    assert_int_equal(resp->volume->content_source->type_case,
                     CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT);
    assert_string_equal(resp->volume->content_source->snapshot->snapshot_id, snap);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);

    cvr_init(&r, nm("clone"), 80 * MIB, 0);
    cvr_clone(&r, src);
    assert_int_equal(create(shared, &r.req, &resp), CSI_OK);
    assert_int_equal(resp->volume->capacity_bytes, 80 * MIB);
    assert_int_equal(resp->volume->content_source->type_case,
                     CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_VOLUME);
    assert_string_equal(resp->volume->content_source->volume->volume_id, src);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    free(src);
    free(snap);
}

static void test_create_volume_smaller_than_its_source_is_out_of_range(void **state)
{
    (void)state;
    char *src = new_volume(shared, nm("src"), 50 * MIB);
    cvr r;
    cvr_init(&r, nm("clone"), 0, 10 * MIB);
    cvr_clone(&r, src);
    assert_int_equal(create(shared, &r.req, NULL), CSI_OUT_OF_RANGE);
    free(src);
}

static void test_create_volume_source_without_capability_is_invalid_argument(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME"));
    char *src = new_volume(p, "src", 0);
    cvr r;
    cvr_init(&r, "clone", 0, 0);
    cvr_clone(&r, src);
    assert_int_equal(create(p, &r.req, NULL), CSI_INVALID_ARGUMENT);
    cvr_init(&r, "restore", 0, 0);
    cvr_snapshot(&r, "snap-1");
    assert_int_equal(create(p, &r.req, NULL), CSI_INVALID_ARGUMENT);
    free(src);
    dfree(p);
}

typedef struct topob {
    Csi__V1__TopologyRequirement tr;
    Csi__V1__Topology t[3];
    Csi__V1__Topology *tp[3];
    Csi__V1__Topology__SegmentsEntry s[3];
    Csi__V1__Topology__SegmentsEntry *sp[3];
} topob;

/* Requisite z1, z2, z3; preferred (when `preferred`) z2. */
static Csi__V1__TopologyRequirement *topob_init(topob *b, bool preferred)
{
    static const char *zones[] = {"z1", "z2", "z3"};
    csi__v1__topology_requirement__init(&b->tr);
    for (int i = 0; i < 3; i++) {
        csi__v1__topology__segments_entry__init(&b->s[i]);
        b->s[i].key = "topology.example.com/zone";
        b->s[i].value = (char *)zones[i];
        b->sp[i] = &b->s[i];
        csi__v1__topology__init(&b->t[i]);
        b->t[i].n_segments = 1;
        b->t[i].segments = &b->sp[i];
        b->tp[i] = &b->t[i];
    }
    b->tr.n_requisite = 3;
    b->tr.requisite = b->tp;
    if (preferred) {
        b->tr.n_preferred = 1;
        b->tr.preferred = &b->tp[1];
    }
    return &b->tr;
}

static const char *zone_of(const Csi__V1__CreateVolumeResponse *resp)
{
    assert_int_equal(resp->volume->n_accessible_topology, 1);
    return resp->volume->accessible_topology[0]->segments[0]->value;
}

static void test_create_volume_topology_is_first_preferred_else_first_requisite(void **state)
{
    (void)state;
    cvr r;
    topob tb;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    cvr_init(&r, nm("pvc"), 0, 0);
    r.req.accessibility_requirements = topob_init(&tb, true);
    assert_int_equal(create(shared, &r.req, &resp), CSI_OK);
    assert_string_equal(zone_of(resp), "z2");
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    /* Retried with the preference moved: still the same volume. */
    tb.tr.n_preferred = 0;
    assert_int_equal(create(shared, &r.req, &resp), CSI_OK);
    assert_string_equal(zone_of(resp), "z2");
    csi__v1__create_volume_response__free_unpacked(resp, NULL);

    cvr_init(&r, nm("pvc"), 0, 0);
    r.req.accessibility_requirements = topob_init(&tb, false);
    assert_int_equal(create(shared, &r.req, &resp), CSI_OK);
    assert_string_equal(zone_of(resp), "z1");
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
}

static void test_create_volume_topology_without_capability_is_invalid_argument(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--plugin-caps=CONTROLLER_SERVICE"));
    cvr r;
    topob tb;
    cvr_init(&r, "pvc", 0, 0);
    r.req.accessibility_requirements = topob_init(&tb, true);
    assert_int_equal(create(p, &r.req, NULL), CSI_INVALID_ARGUMENT);
    /* And no accessible_topology in answers without the capability. */
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(p, cvr_init(&r, "pvc", 0, 0), &resp), CSI_OK);
    assert_int_equal(resp->volume->n_accessible_topology, 0);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    Csi__V1__NodeGetInfoResponse *ni = NULL;
    csi_status st;
    assert_int_equal(csi_node_get_info(p->c, TMO, &ni, &st), 0);
    assert_null(ni->accessible_topology);
    csi__v1__node_get_info_response__free_unpacked(ni, NULL);
    dfree(p);
}

/* ---- DeleteVolume ------------------------------------------------------------------------ */

static void test_delete_volume_is_idempotent(void **state)
{
    (void)state;
    const char *name = nm("pvc");
    char *id = new_volume(shared, name, 0);
    json_object *st = status(shared);
    json_object *path;
    assert_true(json_object_object_get_ex(status_volume(st, name), "path", &path));
    char *dir = util_strdup(json_object_get_string(path));
    json_object_put(st);
    assert_true(is_dir(dir));
    assert_int_equal(delete_volume(shared, id), CSI_OK);
    assert_false(exists(dir));
    assert_false(status_has_volume(shared, name));
    assert_int_equal(delete_volume(shared, id), CSI_OK);
    assert_int_equal(delete_volume(shared, "vol-never-existed"), CSI_OK);
    free(dir);
    free(id);
}

static void test_delete_volume_without_id_is_invalid_argument(void **state)
{
    (void)state;
    assert_int_equal(delete_volume(shared, ""), CSI_INVALID_ARGUMENT);
}

static void test_delete_published_volume_is_failed_precondition(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, id, "node-2", SNW, false), CSI_OK);
    assert_int_equal(delete_volume(shared, id), CSI_FAILED_PRECONDITION);
    assert_int_equal(cunpub(shared, id, "node-2"), CSI_OK);
    assert_int_equal(delete_volume(shared, id), CSI_OK);
    free(id);
}

/* ---- ControllerPublishVolume / ControllerUnpublishVolume ---------------------------------- */

static void test_controller_publish_returns_device_path_and_is_idempotent(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    char *dev1 = NULL, *dev2 = NULL;
    assert_int_equal(cpub_full(shared, id, "node-1", false, SNW, false, &dev1), CSI_OK);
    assert_non_null(dev1);
    assert_int_equal(cpub_full(shared, id, "node-1", false, SNW, false, &dev2), CSI_OK);
    assert_non_null(dev2);
    assert_string_equal(dev1, dev2);
    assert_int_equal(status_calls(shared, "ControllerPublishVolume") >= 2, 1);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    free(dev1);
    free(dev2);
    free(id);
}

static void test_controller_publish_unknown_volume_is_not_found(void **state)
{
    (void)state;
    assert_int_equal(cpub(shared, "vol-0000000000000000", "node-1", SNW, false), CSI_NOT_FOUND);
}

static void test_controller_publish_unknown_node_is_not_found(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, id, "node-99", SNW, false), CSI_NOT_FOUND);
    free(id);
}

static void test_controller_publish_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, "", "node-1", SNW, false), CSI_INVALID_ARGUMENT);
    assert_int_equal(cpub(shared, id, "", SNW, false), CSI_INVALID_ARGUMENT);
    Csi__V1__ControllerPublishVolumeRequest req = CSI__V1__CONTROLLER_PUBLISH_VOLUME_REQUEST__INIT;
    req.volume_id = id;
    req.node_id = "node-1";
    assert_int_equal(rpc(shared, CTRL "ControllerPublishVolume", &req.base,
                         &csi__v1__controller_publish_volume_response__descriptor, NULL),
                     CSI_INVALID_ARGUMENT);
    free(id);
}

static void test_controller_publish_as_another_access_type_is_invalid_argument(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub_full(shared, id, "node-1", true, SNW, false, NULL), CSI_INVALID_ARGUMENT);
    free(id);
}

static void
test_controller_publish_single_node_volume_elsewhere_is_failed_precondition(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, id, "node-1", SNW, false), CSI_OK);
    assert_int_equal(cpub(shared, id, "node-2", SNW, false), CSI_FAILED_PRECONDITION);
    assert_int_equal(cpub(shared, id, "node-2", SNRO, true), CSI_FAILED_PRECONDITION);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    assert_int_equal(cpub(shared, id, "node-2", SNW, false), CSI_OK);
    assert_int_equal(cunpub(shared, id, "node-2"), CSI_OK);
    free(id);
}

static void test_controller_publish_multi_node_volume_to_many_nodes_is_ok(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, id, "node-1", MNMW, false), CSI_OK);
    assert_int_equal(cpub(shared, id, "node-2", MNMW, false), CSI_OK);
    assert_int_equal(cpub(shared, id, "node-3", MNRO, true), CSI_OK);
    assert_int_equal(cunpub(shared, id, NULL), CSI_OK); /* every node */
    json_object *st = status(shared), *vols;
    assert_true(json_object_object_get_ex(st, "volumes", &vols));
    for (size_t i = 0; i < json_object_array_length(vols); i++) {
        json_object *v = json_object_array_get_idx(vols, i), *vid, *nodes;
        json_object_object_get_ex(v, "id", &vid);
        if (strcmp(json_object_get_string(vid), id) != 0)
            continue;
        assert_true(json_object_object_get_ex(v, "published_nodes", &nodes));
        assert_int_equal(json_object_array_length(nodes), 0);
    }
    json_object_put(st);
    free(id);
}

static void test_controller_republish_incompatible_is_already_exists(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cpub(shared, id, "node-1", SNW, false), CSI_OK);
    assert_int_equal(cpub(shared, id, "node-1", SNW, true), CSI_ALREADY_EXISTS);
    assert_int_equal(cpub(shared, id, "node-1", SNMW, false), CSI_ALREADY_EXISTS);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    free(id);
}

static void test_controller_publish_beyond_max_volumes_is_resource_exhausted(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--max-volumes-per-node=1"));
    char *a = new_volume(p, "a", 0), *b = new_volume(p, "b", 0);
    assert_int_equal(cpub(p, a, "node-1", SNW, false), CSI_OK);
    assert_int_equal(cpub(p, b, "node-1", SNW, false), CSI_RESOURCE_EXHAUSTED);
    assert_int_equal(cpub(p, b, "node-2", SNW, false), CSI_OK);
    Csi__V1__NodeGetInfoResponse *ni = NULL;
    csi_status st;
    assert_int_equal(csi_node_get_info(p->c, TMO, &ni, &st), 0);
    assert_int_equal(ni->max_volumes_per_node, 1);
    csi__v1__node_get_info_response__free_unpacked(ni, NULL);
    free(a);
    free(b);
    dfree(p);
}

static void test_controller_publish_readonly_without_capability_is_invalid_argument(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME,PUBLISH_UNPUBLISH_VOLUME"));
    char *id = new_volume(p, "a", 0);
    assert_int_equal(cpub(p, id, "node-1", SNW, true), CSI_INVALID_ARGUMENT);
    assert_int_equal(cpub(p, id, "node-1", SNW, false), CSI_OK);
    free(id);
    dfree(p);
}

static void test_controller_unpublish_is_idempotent(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK); /* never published */
    assert_int_equal(cpub(shared, id, "node-1", SNW, false), CSI_OK);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    free(id);
}

/* CSI v1.12: a plugin SHOULD answer OK when it can regard the volume as
 * unpublished (csi-sanity's idempotency checks rely on it). */
static void test_controller_unpublish_unknown_volume_answers_ok_by_default(void **state)
{
    (void)state;
    assert_int_equal(cunpub(shared, "vol-0000000000000000", "node-1"), CSI_OK);
}

static void test_controller_unpublish_unknown_node_answers_ok_by_default(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(cunpub(shared, id, "node-99"), CSI_OK);
    free(id);
}

static void test_controller_unpublish_without_volume_id_is_invalid_argument(void **state)
{
    (void)state;
    assert_int_equal(cunpub(shared, "", "node-1"), CSI_INVALID_ARGUMENT);
}

/* The spec's error table, kept for the attacher's deleted-node tests. */
static void test_controller_unpublish_missing_ok_false_answers_not_found(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--unpublish-missing-ok=false"));
    assert_int_equal(cunpub(p, "vol-0000000000000000", "node-1"), CSI_NOT_FOUND);
    char *id = new_volume(p, "v", 0);
    assert_int_equal(cunpub(p, id, "node-99"), CSI_NOT_FOUND);
    assert_int_equal(cunpub(p, id, "node-1"), CSI_OK); /* known node, not published */
    free(id);
    dfree(p);
}

/* ---- ValidateVolumeCapabilities, ControllerGetVolume, capabilities -------------------------- */

static int validate(dproc *p, const char *id, bool block, bool *confirmed)
{
    capb cb;
    Csi__V1__VolumeCapability *cp = capb_init(&cb, block, SNW);
    Csi__V1__ValidateVolumeCapabilitiesRequest req =
        CSI__V1__VALIDATE_VOLUME_CAPABILITIES_REQUEST__INIT;
    req.volume_id = (char *)id;
    req.n_volume_capabilities = 1;
    req.volume_capabilities = &cp;
    Csi__V1__ValidateVolumeCapabilitiesResponse *resp = NULL;
    int c = rpc(p, CTRL "ValidateVolumeCapabilities", &req.base,
                &csi__v1__validate_volume_capabilities_response__descriptor, &resp);
    *confirmed = false;
    if (resp) {
        *confirmed = resp->confirmed != NULL;
        if (resp->confirmed) {
            assert_int_equal(resp->confirmed->n_volume_capabilities, 1);
            assert_int_equal(resp->confirmed->volume_capabilities[0]->access_mode->mode, SNW);
        } else {
            assert_true(resp->message && resp->message[0]);
        }
        csi__v1__validate_volume_capabilities_response__free_unpacked(resp, NULL);
    }
    return c;
}

static void test_validate_volume_capabilities_confirms_supported_ones(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    bool confirmed;
    assert_int_equal(validate(shared, id, false, &confirmed), CSI_OK);
    assert_true(confirmed);
    assert_int_equal(validate(shared, id, true, &confirmed), CSI_OK);
    assert_false(confirmed); /* a mount volume is no block device */
    free(id);
}

static void test_validate_volume_capabilities_unknown_volume_is_not_found(void **state)
{
    (void)state;
    bool confirmed;
    assert_int_equal(validate(shared, "vol-0000000000000000", false, &confirmed), CSI_NOT_FOUND);
}

static void test_validate_volume_capabilities_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    bool confirmed;
    assert_int_equal(validate(shared, "", false, &confirmed), CSI_INVALID_ARGUMENT);
    char *id = new_volume(shared, nm("pvc"), 0);
    Csi__V1__ValidateVolumeCapabilitiesRequest req =
        CSI__V1__VALIDATE_VOLUME_CAPABILITIES_REQUEST__INIT;
    req.volume_id = id;
    assert_int_equal(rpc(shared, CTRL "ValidateVolumeCapabilities", &req.base,
                         &csi__v1__validate_volume_capabilities_response__descriptor, NULL),
                     CSI_INVALID_ARGUMENT);
    free(id);
}

static void test_controller_get_volume_reports_published_nodes(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 7 * MIB);
    assert_int_equal(cpub(shared, id, "node-3", SNW, false), CSI_OK);
    Csi__V1__ControllerGetVolumeRequest req = CSI__V1__CONTROLLER_GET_VOLUME_REQUEST__INIT;
    req.volume_id = id;
    Csi__V1__ControllerGetVolumeResponse *resp = NULL;
    assert_int_equal(rpc(shared, CTRL "ControllerGetVolume", &req.base,
                         &csi__v1__controller_get_volume_response__descriptor, &resp),
                     CSI_OK);
    assert_string_equal(resp->volume->volume_id, id);
    assert_int_equal(resp->volume->capacity_bytes, 7 * MIB);
    assert_int_equal(resp->status->n_published_node_ids, 1);
    assert_string_equal(resp->status->published_node_ids[0], "node-3");
    csi__v1__controller_get_volume_response__free_unpacked(resp, NULL);
    assert_int_equal(cunpub(shared, id, "node-3"), CSI_OK);
    req.volume_id = "vol-0000000000000000";
    assert_int_equal(rpc(shared, CTRL "ControllerGetVolume", &req.base,
                         &csi__v1__controller_get_volume_response__descriptor, NULL),
                     CSI_NOT_FOUND);
    free(id);
}

static void test_controller_get_capabilities_follow_the_flag(void **state)
{
    (void)state;
    csi_status st;
    Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
    assert_int_equal(csi_controller_get_capabilities(shared->c, TMO, &cc, &st), 0);
    assert_int_equal(cc->n_capabilities, 12);
    csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);

    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME,LIST_VOLUMES"));
    assert_int_equal(csi_controller_get_capabilities(p->c, TMO, &cc, &st), 0);
    csi_caps caps = {0};
    csi_caps_from_controller(&caps, cc);
    csi__v1__controller_get_capabilities_response__free_unpacked(cc, NULL);
    assert_int_equal(
        caps.controller,
        (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME) |
            (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES));
    dfree(p);
}

static void test_capabilities_not_advertised_make_rpcs_unimplemented(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME", "--node-caps="));
    char *id = new_volume(p, "a", 0);
    assert_int_equal(cpub(p, id, "node-1", SNW, false), CSI_UNIMPLEMENTED);
    assert_int_equal(cunpub(p, id, "node-1"), CSI_UNIMPLEMENTED);
    int c;
    assert_null(list_volumes(p, 0, NULL, &c));
    assert_int_equal(c, CSI_UNIMPLEMENTED);
    Csi__V1__GetCapacityRequest gc = CSI__V1__GET_CAPACITY_REQUEST__INIT;
    assert_int_equal(
        rpc(p, CTRL "GetCapacity", &gc.base, &csi__v1__get_capacity_response__descriptor, NULL),
        CSI_UNIMPLEMENTED);
    assert_int_equal(create_snapshot(p, "s", id, NULL), CSI_UNIMPLEMENTED);
    assert_int_equal(delete_snapshot(p, "snap-1"), CSI_UNIMPLEMENTED);
    assert_int_equal(expand(p, id, 2 * GIB, 0, false, NULL), CSI_UNIMPLEMENTED);
    Csi__V1__ListSnapshotsRequest ls = CSI__V1__LIST_SNAPSHOTS_REQUEST__INIT;
    assert_int_equal(
        rpc(p, CTRL "ListSnapshots", &ls.base, &csi__v1__list_snapshots_response__descriptor, NULL),
        CSI_UNIMPLEMENTED);
    Csi__V1__ControllerGetVolumeRequest gv = CSI__V1__CONTROLLER_GET_VOLUME_REQUEST__INIT;
    gv.volume_id = id;
    assert_int_equal(rpc(p, CTRL "ControllerGetVolume", &gv.base,
                         &csi__v1__controller_get_volume_response__descriptor, NULL),
                     CSI_UNIMPLEMENTED);
    assert_int_equal(nstage(p, id, "/tmp/x", SNW, NULL), CSI_UNIMPLEMENTED);
    assert_int_equal(nunstage(p, id, "/tmp/x"), CSI_UNIMPLEMENTED);
    Csi__V1__NodeGetVolumeStatsRequest vs = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
    assert_int_equal(rpc(p, NODE "NodeGetVolumeStats", &vs.base,
                         &csi__v1__node_get_volume_stats_response__descriptor, NULL),
                     CSI_UNIMPLEMENTED);
    /* Counted all the same. */
    assert_int_equal(status_calls(p, "ControllerPublishVolume"), 1);
    free(id);
    dfree(p);
}

static void test_without_controller_service_every_controller_rpc_is_unimplemented(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--plugin-caps="));
    cvr r;
    assert_int_equal(create(p, cvr_init(&r, "a", 0, 0), NULL), CSI_UNIMPLEMENTED);
    csi_status st;
    Csi__V1__ControllerGetCapabilitiesResponse *cc = NULL;
    assert_int_equal(csi_controller_get_capabilities(p->c, TMO, &cc, &st), -EREMOTEIO);
    assert_int_equal(st.code, CSI_UNIMPLEMENTED);
    /* Identity and Node still answer. */
    bool ready;
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    Csi__V1__NodeGetInfoResponse *ni = NULL;
    assert_int_equal(csi_node_get_info(p->c, TMO, &ni, &st), 0);
    csi__v1__node_get_info_response__free_unpacked(ni, NULL);
    dfree(p);
}

static void test_unsupported_rpcs_are_unimplemented(void **state)
{
    (void)state;
    Csi__V1__GetSnapshotRequest gs = CSI__V1__GET_SNAPSHOT_REQUEST__INIT;
    gs.snapshot_id = "snap-1";
    assert_int_equal(rpc(shared, CTRL "GetSnapshot", &gs.base,
                         &csi__v1__get_snapshot_response__descriptor, NULL),
                     CSI_UNIMPLEMENTED);
    Csi__V1__GroupControllerGetCapabilitiesRequest gc =
        CSI__V1__GROUP_CONTROLLER_GET_CAPABILITIES_REQUEST__INIT;
    assert_int_equal(rpc(shared, "/csi.v1.GroupController/GroupControllerGetCapabilities", &gc.base,
                         &csi__v1__group_controller_get_capabilities_response__descriptor, NULL),
                     CSI_UNIMPLEMENTED);
}

/* ---- ListVolumes, GetCapacity, ControllerExpandVolume ------------------------------------- */

static void test_list_volumes_pages_and_reports_published_nodes(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *ids[5];
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "v%d", i);
        ids[i] = new_volume(p, name, 0);
    }
    assert_int_equal(cpub(p, ids[3], "node-2", SNW, false), CSI_OK);
    char *token = util_strdup("");
    int seen = 0, c, published = 0;
    for (int page = 0; page < 10; page++) {
        Csi__V1__ListVolumesResponse *resp = list_volumes(p, 2, token, &c);
        assert_int_equal(c, CSI_OK);
        assert_true(resp->n_entries <= 2);
        for (size_t i = 0; i < resp->n_entries; i++, seen++) {
            assert_string_equal(resp->entries[i]->volume->volume_id, ids[seen]);
            assert_non_null(resp->entries[i]->status);
            if (resp->entries[i]->status->n_published_node_ids) {
                assert_string_equal(resp->entries[i]->status->published_node_ids[0], "node-2");
                published++;
            }
        }
        free(token);
        token = util_strdup(resp->next_token);
        csi__v1__list_volumes_response__free_unpacked(resp, NULL);
        if (!*token)
            break;
    }
    assert_int_equal(seen, 5);
    assert_int_equal(published, 1);
    /* No limit: everything at once. */
    Csi__V1__ListVolumesResponse *all = list_volumes(p, 0, NULL, &c);
    assert_int_equal(all->n_entries, 5);
    assert_string_equal(all->next_token, "");
    csi__v1__list_volumes_response__free_unpacked(all, NULL);
    free(token);
    for (int i = 0; i < 5; i++)
        free(ids[i]);
    dfree(p);
}

static void test_list_volumes_invalid_token_is_aborted(void **state)
{
    (void)state;
    int c;
    assert_null(list_volumes(shared, 0, "not-a-token", &c));
    assert_int_equal(c, CSI_ABORTED);
    assert_null(list_volumes(shared, 0, "999999", &c));
    assert_int_equal(c, CSI_ABORTED);
}

static void test_list_volumes_negative_max_entries_is_invalid_argument(void **state)
{
    (void)state;
    int c;
    assert_null(list_volumes(shared, -1, NULL, &c));
    assert_int_equal(c, CSI_INVALID_ARGUMENT);
}

static void test_get_capacity_reports_remaining_bytes(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--capacity=1Gi"));
    assert_int_equal(capacity(p), GIB);
    char *id = new_volume(p, "a", 100 * MIB);
    assert_int_equal(capacity(p), GIB - 100 * MIB);
    assert_int_equal(delete_volume(p, id), CSI_OK);
    assert_int_equal(capacity(p), GIB);

    /* Another zone holds none of this pool. */
    Csi__V1__Topology__SegmentsEntry seg = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
    seg.key = "topology.example.com/zone";
    seg.value = "z9";
    Csi__V1__Topology__SegmentsEntry *segp = &seg;
    Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
    topo.n_segments = 1;
    topo.segments = &segp;
    Csi__V1__GetCapacityRequest req = CSI__V1__GET_CAPACITY_REQUEST__INIT;
    req.accessible_topology = &topo;
    Csi__V1__GetCapacityResponse *resp = NULL;
    assert_int_equal(
        rpc(p, CTRL "GetCapacity", &req.base, &csi__v1__get_capacity_response__descriptor, &resp),
        CSI_OK);
    assert_int_equal(resp->available_capacity, 0);
    csi__v1__get_capacity_response__free_unpacked(resp, NULL);
    seg.value = "z1";
    assert_int_equal(
        rpc(p, CTRL "GetCapacity", &req.base, &csi__v1__get_capacity_response__descriptor, &resp),
        CSI_OK);
    assert_int_equal(resp->available_capacity, GIB);
    csi__v1__get_capacity_response__free_unpacked(resp, NULL);
    free(id);
    dfree(p);
}

static void test_expand_volume_grows_and_accounts_capacity(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--capacity=1Gi"));
    char *id = new_volume(p, "a", 100 * MIB);
    Csi__V1__ControllerExpandVolumeResponse *resp = NULL;
    assert_int_equal(expand(p, id, 300 * MIB, 0, false, &resp), CSI_OK);
    assert_int_equal(resp->capacity_bytes, 300 * MIB);
    assert_true(resp->node_expansion_required);
    csi__v1__controller_expand_volume_response__free_unpacked(resp, NULL);
    assert_int_equal(capacity(p), GIB - 300 * MIB);
    free(id);
    dfree(p);
}

/* ---- ControllerModifyVolume ------------------------------------------------------------ */

static int modify(dproc *p, const char *vol, const char *key, const char *value)
{
    Csi__V1__ControllerModifyVolumeRequest__MutableParametersEntry e =
        CSI__V1__CONTROLLER_MODIFY_VOLUME_REQUEST__MUTABLE_PARAMETERS_ENTRY__INIT;
    Csi__V1__ControllerModifyVolumeRequest__MutableParametersEntry *ep = &e;
    e.key = (char *)key;
    e.value = (char *)value;
    Csi__V1__ControllerModifyVolumeRequest req = CSI__V1__CONTROLLER_MODIFY_VOLUME_REQUEST__INIT;
    req.volume_id = (char *)vol;
    req.n_mutable_parameters = key ? 1 : 0;
    req.mutable_parameters = key ? &ep : NULL;
    return rpc(p, CTRL "ControllerModifyVolume", &req.base,
               &csi__v1__controller_modify_volume_response__descriptor, NULL);
}

/* The volume's mutable_parameters in status.json as JSON text (caller frees). */
static char *mutable_of(dproc *p, const char *name)
{
    json_object *st = status(p), *mp = NULL;
    json_object *v = status_volume(st, name);
    char *t = util_strdup(v && json_object_object_get_ex(v, "mutable_parameters", &mp)
                              ? json_object_to_json_string_ext(mp, JSON_C_TO_STRING_PLAIN)
                              : "");
    json_object_put(st);
    return t;
}

#define MODIFY_CAPS "--controller-caps=CREATE_DELETE_VOLUME,MODIFY_VOLUME"

static void test_modify_volume_records_the_mutable_parameters(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS(MODIFY_CAPS));
    cvr r;
    cvr_init(&r, "m", 100 * MIB, 0);
    Csi__V1__CreateVolumeRequest__MutableParametersEntry me =
        CSI__V1__CREATE_VOLUME_REQUEST__MUTABLE_PARAMETERS_ENTRY__INIT;
    Csi__V1__CreateVolumeRequest__MutableParametersEntry *mep = &me;
    me.key = "iops";
    me.value = "100";
    r.req.n_mutable_parameters = 1;
    r.req.mutable_parameters = &mep;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(p, &r.req, &resp), CSI_OK);
    char *id = util_strdup(resp->volume->volume_id);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    char *t = mutable_of(p, "m");
    assert_string_equal(t, "{\"iops\":\"100\"}"); /* CreateVolume's */
    free(t);
    assert_int_equal(modify(p, id, "iops", "3000"), CSI_OK);
    assert_int_equal(modify(p, id, "tier", "fast"), CSI_OK);
    t = mutable_of(p, "m");
    assert_string_equal(t, "{\"iops\":\"3000\",\"tier\":\"fast\"}"); /* replaced, added */
    free(t);
    assert_int_equal(modify(p, "no-such-volume", "iops", "1"), CSI_NOT_FOUND);
    assert_int_equal(modify(p, "", "iops", "1"), CSI_INVALID_ARGUMENT);
    free(id);
    dfree(p);
}

static void test_modify_volume_needs_the_capability(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME"));
    char *id = new_volume(p, "m", 100 * MIB);
    assert_int_equal(modify(p, id, "iops", "1"), CSI_UNIMPLEMENTED);
    free(id);
    dfree(p);
}

static void test_expand_volume_is_idempotent_and_never_shrinks(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 100 * MIB);
    int64_t asks[] = {300 * MIB, 300 * MIB, 200 * MIB};
    for (size_t i = 0; i < 3; i++) {
        Csi__V1__ControllerExpandVolumeResponse *resp = NULL;
        assert_int_equal(expand(shared, id, asks[i], 0, false, &resp), CSI_OK);
        assert_int_equal(resp->capacity_bytes, 300 * MIB);
        csi__v1__controller_expand_volume_response__free_unpacked(resp, NULL);
    }
    free(id);
}

static void test_expand_volume_limit_below_its_size_is_out_of_range(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 100 * MIB);
    assert_int_equal(expand(shared, id, 10 * MIB, 50 * MIB, false, NULL), CSI_OUT_OF_RANGE);
    free(id);
}

static void test_expand_volume_beyond_the_pool_is_out_of_range(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(expand(shared, id, 2048 * GIB, 0, false, NULL), CSI_OUT_OF_RANGE);
    free(id);
}

static void test_expand_volume_beyond_free_capacity_is_resource_exhausted(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--capacity=1Gi"));
    char *a = new_volume(p, "a", 100 * MIB), *b = new_volume(p, "b", 600 * MIB);
    assert_int_equal(expand(p, a, 500 * MIB, 0, false, NULL), CSI_RESOURCE_EXHAUSTED);
    assert_int_equal(expand(p, a, 400 * MIB, 0, false, NULL), CSI_OK);
    free(a);
    free(b);
    dfree(p);
}

static void test_expand_unknown_volume_is_not_found(void **state)
{
    (void)state;
    assert_int_equal(expand(shared, "vol-0000000000000000", GIB, 0, false, NULL), CSI_NOT_FOUND);
}

static void test_expand_volume_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    assert_int_equal(expand(shared, id, 0, 0, false, NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(expand(shared, "", GIB, 0, false, NULL), CSI_INVALID_ARGUMENT);
    free(id);
}

static void test_expand_block_volume_needs_no_node_expansion(void **state)
{
    (void)state;
    char *id = new_block_volume(shared, nm("blk"));
    Csi__V1__ControllerExpandVolumeResponse *resp = NULL;
    assert_int_equal(expand(shared, id, 2 * GIB, 0, true, &resp), CSI_OK);
    assert_int_equal(resp->capacity_bytes, 2 * GIB);
    assert_false(resp->node_expansion_required);
    csi__v1__controller_expand_volume_response__free_unpacked(resp, NULL);
    free(id);
}

static void test_offline_expansion_of_a_published_volume_is_failed_precondition(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--plugin-caps=CONTROLLER_SERVICE,OFFLINE"));
    char *id = new_volume(p, "a", 0);
    assert_int_equal(cpub(p, id, "node-1", SNW, false), CSI_OK);
    assert_int_equal(expand(p, id, 2 * GIB, 0, false, NULL), CSI_FAILED_PRECONDITION);
    assert_int_equal(cunpub(p, id, "node-1"), CSI_OK);
    assert_int_equal(expand(p, id, 2 * GIB, 0, false, NULL), CSI_OK);
    free(id);
    dfree(p);
}

/* ---- snapshots ------------------------------------------------------------------------------ */

static void test_create_snapshot_is_idempotent_and_ready(void **state)
{
    (void)state;
    char *vol = new_volume(shared, nm("pvc"), 20 * MIB);
    const char *name = nm("snap");
    Csi__V1__CreateSnapshotResponse *a = NULL, *b = NULL;
    assert_int_equal(create_snapshot(shared, name, vol, &a), CSI_OK);
    assert_int_equal(create_snapshot(shared, name, vol, &b), CSI_OK);
    assert_string_equal(a->snapshot->snapshot_id, b->snapshot->snapshot_id);
    assert_string_equal(a->snapshot->source_volume_id, vol);
    assert_int_equal(a->snapshot->size_bytes, 20 * MIB);
    assert_true(a->snapshot->ready_to_use);
    assert_non_null(a->snapshot->creation_time);
    assert_true(a->snapshot->creation_time->seconds > 1600000000);
    assert_int_equal(a->snapshot->creation_time->seconds, b->snapshot->creation_time->seconds);
    csi__v1__create_snapshot_response__free_unpacked(a, NULL);
    csi__v1__create_snapshot_response__free_unpacked(b, NULL);
    free(vol);
}

static void test_create_snapshot_same_name_other_source_is_already_exists(void **state)
{
    (void)state;
    char *v1 = new_volume(shared, nm("pvc"), 0), *v2 = new_volume(shared, nm("pvc"), 0);
    const char *name = nm("snap");
    assert_int_equal(create_snapshot(shared, name, v1, NULL), CSI_OK);
    assert_int_equal(create_snapshot(shared, name, v2, NULL), CSI_ALREADY_EXISTS);
    free(v1);
    free(v2);
}

static void test_create_snapshot_of_missing_volume_is_not_found(void **state)
{
    (void)state;
    assert_int_equal(create_snapshot(shared, nm("snap"), "vol-0000000000000000", NULL),
                     CSI_NOT_FOUND);
}

static void test_create_snapshot_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    assert_int_equal(create_snapshot(shared, "", "vol-1", NULL), CSI_INVALID_ARGUMENT);
    assert_int_equal(create_snapshot(shared, nm("snap"), "", NULL), CSI_INVALID_ARGUMENT);
}

static void test_delete_snapshot_is_idempotent(void **state)
{
    (void)state;
    char *vol = new_volume(shared, nm("pvc"), 0);
    char *snap = new_snapshot(shared, nm("snap"), vol);
    assert_int_equal(delete_snapshot(shared, snap), CSI_OK);
    assert_int_equal(delete_snapshot(shared, snap), CSI_OK);
    assert_int_equal(delete_snapshot(shared, "snap-never-existed"), CSI_OK);
    free(vol);
    free(snap);
}

static void test_delete_snapshot_without_id_is_invalid_argument(void **state)
{
    (void)state;
    assert_int_equal(delete_snapshot(shared, ""), CSI_INVALID_ARGUMENT);
}

static void test_snapshot_outlives_its_source_volume(void **state)
{
    (void)state;
    char *vol = new_volume(shared, nm("pvc"), 0);
    char *snap = new_snapshot(shared, nm("snap"), vol);
    assert_int_equal(delete_volume(shared, vol), CSI_OK);
    cvr r;
    cvr_init(&r, nm("restore"), 0, 0);
    cvr_snapshot(&r, snap);
    assert_int_equal(create(shared, &r.req, NULL), CSI_OK);
    free(vol);
    free(snap);
}

static int list_snapshots(dproc *p, int32_t max, const char *token, const char *snap_id,
                          const char *vol_id, Csi__V1__ListSnapshotsResponse **resp)
{
    Csi__V1__ListSnapshotsRequest req = CSI__V1__LIST_SNAPSHOTS_REQUEST__INIT;
    req.max_entries = max;
    req.starting_token = (char *)(token ? token : "");
    req.snapshot_id = (char *)(snap_id ? snap_id : "");
    req.source_volume_id = (char *)(vol_id ? vol_id : "");
    return rpc(p, CTRL "ListSnapshots", &req.base, &csi__v1__list_snapshots_response__descriptor,
               resp);
}

static void test_list_snapshots_filters_and_pages(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *v1 = new_volume(p, "v1", 0), *v2 = new_volume(p, "v2", 0);
    char *s[3] = {new_snapshot(p, "s1", v1), new_snapshot(p, "s2", v1), new_snapshot(p, "s3", v2)};
    Csi__V1__ListSnapshotsResponse *resp = NULL;
    assert_int_equal(list_snapshots(p, 2, NULL, NULL, NULL, &resp), CSI_OK);
    assert_int_equal(resp->n_entries, 2);
    char *next = util_strdup(resp->next_token);
    csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
    assert_int_equal(list_snapshots(p, 2, next, NULL, NULL, &resp), CSI_OK);
    assert_int_equal(resp->n_entries, 1);
    assert_string_equal(resp->entries[0]->snapshot->snapshot_id, s[2]);
    assert_string_equal(resp->next_token, "");
    csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
    assert_int_equal(list_snapshots(p, 0, NULL, NULL, v1, &resp), CSI_OK);
    assert_int_equal(resp->n_entries, 2);
    csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
    assert_int_equal(list_snapshots(p, 0, NULL, s[1], NULL, &resp), CSI_OK);
    assert_int_equal(resp->n_entries, 1);
    assert_string_equal(resp->entries[0]->snapshot->snapshot_id, s[1]);
    csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
    assert_int_equal(list_snapshots(p, 0, NULL, "snap-0000000000000000", NULL, &resp), CSI_OK);
    assert_int_equal(resp->n_entries, 0);
    csi__v1__list_snapshots_response__free_unpacked(resp, NULL);
    free(next);
    for (int i = 0; i < 3; i++)
        free(s[i]);
    free(v1);
    free(v2);
    dfree(p);
}

static void test_list_snapshots_invalid_token_is_aborted(void **state)
{
    (void)state;
    assert_int_equal(list_snapshots(shared, 0, "x", NULL, NULL, NULL), CSI_ABORTED);
    assert_int_equal(list_snapshots(shared, 0, "99999999", NULL, NULL, NULL), CSI_ABORTED);
}

/* ---- Node ----------------------------------------------------------------------------------- */

static void test_node_get_info_and_capabilities(void **state)
{
    (void)state;
    csi_status st;
    Csi__V1__NodeGetInfoResponse *ni = NULL;
    assert_int_equal(csi_node_get_info(shared->c, TMO, &ni, &st), 0);
    assert_string_equal(ni->node_id, "node-1");
    assert_int_equal(ni->max_volumes_per_node, 0);
    assert_non_null(ni->accessible_topology);
    assert_int_equal(ni->accessible_topology->n_segments, 1);
    assert_string_equal(ni->accessible_topology->segments[0]->key, "topology.example.com/zone");
    assert_string_equal(ni->accessible_topology->segments[0]->value, "z1");
    csi__v1__node_get_info_response__free_unpacked(ni, NULL);
    Csi__V1__NodeGetCapabilitiesResponse *nc = NULL;
    assert_int_equal(csi_node_get_capabilities(shared->c, TMO, &nc, &st), 0);
    csi_caps caps = {0};
    csi_caps_from_node(&caps, nc);
    csi__v1__node_get_capabilities_response__free_unpacked(nc, NULL);
    assert_true(
        CSI_CAP(caps.node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__STAGE_UNSTAGE_VOLUME));
    assert_true(CSI_CAP(caps.node, CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__GET_VOLUME_STATS));
}

/* A volume ControllerPublished to node-1, with its device path. */
static char *attached_volume(dproc *p, char **dev)
{
    char *id = new_volume(p, nm("pvc"), 0);
    assert_int_equal(cpub_full(p, id, "node-1", false, SNW, false, dev), CSI_OK);
    return id;
}

/* Paths under the scratch directory, for staging and targets. */
static char *scratch(const char *prefix)
{
    return util_asprintf("%s/%s", th_tmpdir(), nm(prefix));
}

/* A volume ControllerPublished to node-1 and staged at *staging. */
static char *staged_volume(dproc *p, char **dev, char **staging)
{
    char *id = attached_volume(p, dev);
    *staging = scratch("staging");
    assert_int_equal(nstage(p, id, *staging, SNW, *dev), CSI_OK);
    return id;
}

/* ---- data and mounts -------------------------------------------------------------- */

static void put_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f) {
        fail_msg("cannot write %s: %s", path, strerror(errno));
        return;
    }
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
}

/* The file's first line, or "" when it cannot be read (static buffer). */
static const char *get_text(const char *path)
{
    static char buf[256];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f) {
        if (!fgets(buf, sizeof(buf), f))
            buf[0] = '\0';
        fclose(f);
    }
    return buf;
}

static char *volume_dir(dproc *p, const char *id)
{
    return util_asprintf("%s/volumes/%s", p->dir, id);
}

static char *restore_from(dproc *p, bool snapshot, const char *src)
{
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    cvr_init(&r, nm(snapshot ? "restore" : "clone"), 0, 0);
    if (snapshot)
        cvr_snapshot(&r, src);
    else
        cvr_clone(&r, src);
    assert_int_equal(create(p, &r.req, &resp), CSI_OK);
    char *id = util_strdup(resp->volume->volume_id);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    return id;
}

/* A snapshot is a copy of its volume's data when it was cut; a restore
 * starts from that copy, a clone from the source as it is now; deleting
 * the snapshot deletes its copy. */
static void test_snapshot_restore_and_clone_carry_the_data(void **state)
{
    (void)state;
    char *src = new_volume(shared, nm("data"), 0);
    char *dir = volume_dir(shared, src);
    char *file = util_asprintf("%s/f", dir), *sub = util_asprintf("%s/sub", dir);
    put_text(file, "before");
    assert_int_equal(mkdir(sub, 0700), 0);
    char *subfile = util_asprintf("%s/g", sub);
    put_text(subfile, "nested");
    char *link = util_asprintf("%s/l", dir);
    assert_int_equal(symlink("f", link), 0);
    char *snap = new_snapshot(shared, nm("snap"), src);
    char *copy = util_asprintf("%s/snapshots/%s/f", shared->dir, snap);
    assert_string_equal(get_text(copy), "before");
    put_text(file, "after");

    char *restored = restore_from(shared, true, snap);
    char *rdir = volume_dir(shared, restored);
    char *rf = util_asprintf("%s/f", rdir), *rg = util_asprintf("%s/sub/g", rdir);
    char *rl = util_asprintf("%s/l", rdir);
    assert_string_equal(get_text(rf), "before");
    assert_string_equal(get_text(rg), "nested");
    char target[16] = {0};
    assert_int_equal(readlink(rl, target, sizeof(target) - 1), 1);
    assert_string_equal(target, "f");
    char *partial = util_asprintf("%s.partial", rdir);
    assert_false(exists(partial));

    char *clone = restore_from(shared, false, src);
    char *cdir = volume_dir(shared, clone);
    char *cf = util_asprintf("%s/f", cdir);
    assert_string_equal(get_text(cf), "after");

    assert_int_equal(delete_snapshot(shared, snap), CSI_OK);
    char *sdir = util_asprintf("%s/snapshots/%s", shared->dir, snap);
    assert_false(exists(sdir));
    /* A restore from the deleted snapshot finds nothing to start from. */
    cvr r;
    cvr_init(&r, nm("late"), 0, 0);
    cvr_snapshot(&r, snap);
    assert_int_equal(create(shared, &r.req, NULL), CSI_NOT_FOUND);
    char *ids[] = {restored, clone, src};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(delete_volume(shared, ids[i]), CSI_OK);
        free(ids[i]);
    }
    assert_false(exists(dir));
    char *frees[] = {dir, file, sub, subfile, link, snap, copy, rdir,
                     rf,  rg,   rl,  partial, cdir, cf,   sdir};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        free(frees[i]);
}

/* How many mounts of the driver's mount namespace are at `path`. */
static int mounts_at(const dproc *p, const char *path)
{
    char *mi = util_asprintf("/proc/%d/mountinfo", (int)p->pid);
    FILE *f = fopen(mi, "r");
    free(mi);
    assert_non_null(f);
    char *want = util_asprintf(" %s ", path);
    int n = 0;
    char line[4096];
    while (fgets(line, sizeof(line), f)) {
        /* id parent major:minor root mount-point: the fifth field */
        char *at = line;
        for (int i = 0; i < 4 && at; i++)
            at = strchr(at + 1, ' ');
        n += at && strncmp(at, want, strlen(want)) == 0;
    }
    fclose(f);
    free(want);
    return n;
}

/* `path` as the driver's mount namespace sees it. */
static char *in_driver(const dproc *p, const char *path)
{
    return util_asprintf("/proc/%d/root%s", (int)p->pid, path);
}

/* The driver in a mount namespace of its own: its mounts go with it. */
static const char *const PRIVATE_NS[] = {"/usr/bin/unshare", "--mount", "--propagation", "private",
                                         NULL};

/* With --mount the workload's data lands in the volume: staging and target
 * are bind mounts of its folder (each once, however often asked), read-only
 * when asked, and gone after unpublish and unstage. */
static void test_mount_flag_bind_mounts_the_volume_where_the_co_asks(void **state)
{
    (void)state;
    dproc *d = dstart_wrapped(FLAGS("--mount"), NULL, PRIVATE_NS);
    char *dev = NULL;
    char *id = attached_volume(d, &dev);
    char *staging = scratch("staging");
    char *pod = scratch("pod");
    char *target = util_asprintf("%s/mount", pod);
    assert_int_equal(nstage(d, id, staging, SNW, dev), CSI_OK);
    assert_int_equal(nstage(d, id, staging, SNW, dev), CSI_OK);
    assert_int_equal(mounts_at(d, staging), 1);
    assert_int_equal(npublish(d, id, staging, target, SNW, false), CSI_OK);
    assert_int_equal(npublish(d, id, staging, target, SNW, false), CSI_OK);
    assert_int_equal(mounts_at(d, target), 1);
    assert_int_equal(mounts_at(&(dproc){.pid = getpid()}, target), 0); /* not on this machine */

    char *written = util_asprintf("%s/hello", target);
    char *seen = in_driver(d, written);
    put_text(seen, "from the pod");
    char *dir = volume_dir(d, id);
    char *backing = util_asprintf("%s/hello", dir);
    assert_string_equal(get_text(backing), "from the pod");

    assert_int_equal(nunpublish(d, id, target), CSI_OK);
    assert_int_equal(mounts_at(d, target), 0);
    char *tview = in_driver(d, target);
    assert_false(exists(tview));
    /* Read-only: the data is there, a write is refused. */
    assert_int_equal(npublish(d, id, staging, target, SNW, true), CSI_OK);
    assert_string_equal(get_text(seen), "from the pod");
    char *other = util_asprintf("%s/other", tview);
    assert_null(fopen(other, "w"));
    assert_int_equal(errno, EROFS);
    assert_int_equal(nunpublish(d, id, target), CSI_OK);
    assert_int_equal(nunstage(d, id, staging), CSI_OK);
    assert_int_equal(mounts_at(d, staging), 0);
    assert_int_equal(nunstage(d, id, staging), CSI_OK);
    /* The data stays in the volume. */
    assert_string_equal(get_text(backing), "from the pod");
    char *frees[] = {dev, id, staging, pod, target, written, seen, dir, backing, tview, other};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        free(frees[i]);
    dfree(d);
}

/* A block volume's target is its backing file, as large as the volume. */
static void test_mount_flag_publishes_a_block_volume_as_its_backing_file(void **state)
{
    (void)state;
    dproc *d = dstart_wrapped(FLAGS("--mount"), NULL, PRIVATE_NS);
    char *id = new_block_volume(d, nm("blk"));
    char *dev = NULL;
    assert_int_equal(cpub_full(d, id, "node-1", true, SNW, false, &dev), CSI_OK);
    char *staging = scratch("staging");
    char *pod = scratch("pod");
    assert_int_equal(mkdir(pod, 0750), 0);
    char *target = util_asprintf("%s/dev", pod);
    assert_int_equal(nstage_cap(d, id, staging, true, SNW, dev), CSI_OK);
    assert_int_equal(mounts_at(d, staging), 0);
    assert_int_equal(npublish_cap(d, id, staging, target, true, SNW, false), CSI_OK);
    assert_int_equal(mounts_at(d, target), 1);
    char *seen = in_driver(d, target);
    int fd = open(seen, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(pwrite(fd, "blocks", 6, 4096), 6);
    close(fd);
    char *dir = volume_dir(d, id);
    char *backing = util_asprintf("%s/block", dir);
    struct stat st;
    assert_int_equal(stat(backing, &st), 0);
    assert_int_equal(st.st_size, GIB);
    char buf[8] = {0};
    fd = open(backing, O_RDONLY);
    assert_int_equal(pread(fd, buf, 6, 4096), 6);
    close(fd);
    assert_string_equal(buf, "blocks");
    assert_int_equal(nunpublish(d, id, target), CSI_OK);
    assert_int_equal(mounts_at(d, target), 0);
    assert_int_equal(nunstage(d, id, staging), CSI_OK);
    char *frees[] = {id, dev, staging, pod, target, seen, dir, backing};
    for (size_t i = 0; i < sizeof(frees) / sizeof(frees[0]); i++)
        free(frees[i]);
    dfree(d);
}

/* Without the privilege to mount, NodeStage says which one is missing and
 * records nothing. */
static void test_mount_flag_without_cap_sys_admin_is_a_clear_error(void **state)
{
    (void)state;
    static const char *const no_admin[] = {"/usr/bin/unshare",
                                           "--mount",
                                           "--propagation",
                                           "private",
                                           "/usr/bin/setpriv",
                                           "--inh-caps=-sys_admin",
                                           "--bounding-set=-sys_admin",
                                           NULL};
    dproc *d = dstart_wrapped(FLAGS("--mount"), NULL, no_admin);
    char *dev = NULL;
    char *id = attached_volume(d, &dev);
    char *staging = scratch("staging");
    capb cb;
    ctxb ctx;
    Csi__V1__NodeStageVolumeRequest req = CSI__V1__NODE_STAGE_VOLUME_REQUEST__INIT;
    req.volume_id = id;
    req.staging_target_path = staging;
    req.volume_capability = capb_init(&cb, false, SNW);
    csi__v1__node_stage_volume_request__publish_context_entry__init(&ctx.e);
    ctx.e.key = "devicePath";
    ctx.e.value = dev;
    ctx.ep = &ctx.e;
    req.n_publish_context = 1;
    req.publish_context = &ctx.ep;
    csi_status st = {0};
    ProtobufCMessage *out = NULL;
    assert_int_not_equal(csi_call(d->c, NODE "NodeStageVolume", &req.base,
                                  &csi__v1__node_stage_volume_response__descriptor, TMO, &out, &st),
                         0);
    assert_int_equal(st.code, CSI_INTERNAL);
    if (!strstr(st.message, "needs CAP_SYS_ADMIN"))
        fail_msg("message: %s", st.message);
    assert_int_equal(mounts_at(d, staging), 0);
    /* Nothing was recorded: the volume is not staged there. */
    char *target = scratch("target");
    assert_int_equal(npublish(d, id, staging, target, SNW, false), CSI_FAILED_PRECONDITION);
    assert_int_equal(nunstage(d, id, staging), CSI_OK);
    free(target);
    free(id);
    free(dev);
    free(staging);
    dfree(d);
}

static void test_node_stage_publish_unpublish_unstage_round_trip(void **state)
{
    (void)state;
    char *dev = NULL;
    char *id = attached_volume(shared, &dev);
    char *staging = scratch("staging");
    char *target = util_asprintf("%s/%s/mount", th_tmpdir(), nm("pod"));
    /* Every step twice: each one is idempotent. */
    assert_int_equal(nstage(shared, id, staging, SNW, dev), CSI_OK);
    assert_true(is_dir(staging));
    assert_int_equal(nstage(shared, id, staging, SNW, dev), CSI_OK);
    assert_int_equal(npublish(shared, id, staging, target, SNW, false), CSI_OK);
    assert_true(is_dir(target));
    assert_int_equal(npublish(shared, id, staging, target, SNW, false), CSI_OK);
    assert_int_equal(nunpublish(shared, id, target), CSI_OK);
    assert_false(exists(target));
    assert_int_equal(nunpublish(shared, id, target), CSI_OK);
    assert_int_equal(nunstage(shared, id, staging), CSI_OK);
    assert_int_equal(nunstage(shared, id, staging), CSI_OK);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    assert_int_equal(delete_volume(shared, id), CSI_OK);
    free(staging);
    free(target);
    free(dev);
    free(id);
}

/* A node process with --backend-dir stages and publishes what another
 * process (the controller) created and published, and nothing else. */
static void test_backend_dir_node_stages_what_the_controller_published(void **state)
{
    (void)state;
    dproc *ctrl = dstart(NULL);
    char *flag = util_asprintf("--backend-dir=%s", ctrl->dir);
    dproc *node = dstart(FLAGS(flag));
    char *id = new_volume(ctrl, nm("pvc"), 0);
    char *staging = scratch("staging");
    char *target = util_asprintf("%s/%s/mount", th_tmpdir(), nm("pod"));
    char *dev = NULL;
    assert_int_equal(nstage(node, id, staging, SNW, NULL), CSI_FAILED_PRECONDITION);
    assert_int_equal(cpub_full(ctrl, id, "node-1", false, SNW, false, &dev), CSI_OK);
    assert_int_equal(nstage(node, id, staging, SNW, dev), CSI_OK);
    assert_int_equal(npublish(node, id, staging, target, SNW, false), CSI_OK);
    assert_true(is_dir(target));
    assert_int_equal(nunpublish(node, id, target), CSI_OK);
    assert_int_equal(nunstage(node, id, staging), CSI_OK);
    assert_int_equal(cunpub(ctrl, id, "node-1"), CSI_OK);
    /* Detached meanwhile: the node sees it at once. */
    assert_int_equal(nstage(node, id, staging, SNW, dev), CSI_FAILED_PRECONDITION);
    assert_int_equal(nstage(node, "vol-0000000000000000", staging, SNW, NULL), CSI_NOT_FOUND);
    /* Without the flag a process knows only its own volumes. */
    assert_int_equal(nstage(shared, id, staging, SNW, dev), CSI_NOT_FOUND);
    assert_int_equal(delete_volume(ctrl, id), CSI_OK);
    free(dev);
    free(target);
    free(staging);
    free(id);
    free(flag);
    dfree(node);
    dfree(ctrl);
}

static void test_node_get_volume_stats_reports_usage_where_the_volume_is(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    Csi__V1__NodeGetVolumeStatsRequest vs = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
    vs.volume_id = id;
    vs.volume_path = staging;
    Csi__V1__NodeGetVolumeStatsResponse *stats = NULL;
    assert_int_equal(rpc(shared, NODE "NodeGetVolumeStats", &vs.base,
                         &csi__v1__node_get_volume_stats_response__descriptor, &stats),
                     CSI_OK);
    assert_int_equal(stats->n_usage, 1);
    assert_int_equal(stats->usage[0]->unit, CSI__V1__VOLUME_USAGE__UNIT__BYTES);
    assert_int_equal(stats->usage[0]->total, GIB);
    csi__v1__node_get_volume_stats_response__free_unpacked(stats, NULL);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_get_volume_stats_at_another_path_is_not_found(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    Csi__V1__NodeGetVolumeStatsRequest vs = CSI__V1__NODE_GET_VOLUME_STATS_REQUEST__INIT;
    vs.volume_id = id;
    vs.volume_path = "/not/there";
    assert_int_equal(rpc(shared, NODE "NodeGetVolumeStats", &vs.base,
                         &csi__v1__node_get_volume_stats_response__descriptor, NULL),
                     CSI_NOT_FOUND);
    free(staging);
    free(dev);
    free(id);
}

static void test_controller_unpublish_while_staged_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_FAILED_PRECONDITION);
    assert_int_equal(cunpub(shared, id, NULL), CSI_FAILED_PRECONDITION);
    assert_int_equal(nunstage(shared, id, staging), CSI_OK);
    assert_int_equal(cunpub(shared, id, "node-1"), CSI_OK);
    free(staging);
    free(dev);
    free(id);
}

static void test_delete_volume_staged_on_the_node_is_failed_precondition(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--controller-caps=CREATE_DELETE_VOLUME"));
    char *id = new_volume(p, "a", 0);
    char *staging = scratch("staging");
    assert_int_equal(nstage(p, id, staging, SNW, NULL), CSI_OK);
    assert_int_equal(delete_volume(p, id), CSI_FAILED_PRECONDITION);
    assert_int_equal(nunstage(p, id, staging), CSI_OK);
    assert_int_equal(delete_volume(p, id), CSI_OK);
    free(staging);
    free(id);
    dfree(p);
}

static void test_node_unstage_while_published_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    char *target = scratch("target");
    assert_int_equal(npublish(shared, id, staging, target, SNW, false), CSI_OK);
    assert_int_equal(nunstage(shared, id, staging), CSI_FAILED_PRECONDITION);
    assert_int_equal(nunpublish(shared, id, target), CSI_OK);
    assert_int_equal(nunstage(shared, id, staging), CSI_OK);
    free(target);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_stage_before_controller_publish_is_failed_precondition(void **state)
{
    (void)state;
    char *id = new_volume(shared, nm("pvc"), 0);
    char *staging = scratch("staging");
    assert_int_equal(nstage(shared, id, staging, SNW, NULL), CSI_FAILED_PRECONDITION);
    free(staging);
    free(id);
}

static void test_node_stage_with_another_publish_context_is_invalid_argument(void **state)
{
    (void)state;
    char *dev = NULL;
    char *id = attached_volume(shared, &dev);
    char *staging = scratch("staging");
    assert_int_equal(nstage(shared, id, staging, SNW, "/dev/wrong"), CSI_INVALID_ARGUMENT);
    assert_int_equal(nstage(shared, id, staging, SNW, NULL), CSI_INVALID_ARGUMENT);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_stage_unknown_volume_is_not_found(void **state)
{
    (void)state;
    char *staging = scratch("staging");
    assert_int_equal(nstage(shared, "vol-0000000000000000", staging, SNW, NULL), CSI_NOT_FOUND);
    assert_int_equal(nunstage(shared, "vol-0000000000000000", staging), CSI_NOT_FOUND);
    free(staging);
}

static void test_node_stage_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    char *dev = NULL;
    char *id = attached_volume(shared, &dev);
    assert_int_equal(nstage(shared, id, "", SNW, dev), CSI_INVALID_ARGUMENT);
    assert_int_equal(nstage(shared, "", "/tmp/x", SNW, dev), CSI_INVALID_ARGUMENT);
    assert_int_equal(nstage(shared, id, "relative", SNW, dev), CSI_INVALID_ARGUMENT);
    assert_int_equal(nunstage(shared, id, ""), CSI_INVALID_ARGUMENT);
    free(dev);
    free(id);
}

static void test_node_stage_incompatible_is_already_exists(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    assert_int_equal(nstage(shared, id, staging, SNMW, dev), CSI_ALREADY_EXISTS);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_stage_at_a_second_path_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    char *other = scratch("staging");
    assert_int_equal(nstage(shared, id, other, SNW, dev), CSI_FAILED_PRECONDITION);
    free(other);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_publish_before_stage_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL;
    char *id = attached_volume(shared, &dev);
    char *staging = scratch("staging"), *target = scratch("target");
    assert_int_equal(npublish(shared, id, staging, target, SNW, false), CSI_FAILED_PRECONDITION);
    free(target);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_publish_without_staging_path_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    char *target = scratch("target");
    assert_int_equal(npublish(shared, id, NULL, target, SNW, false), CSI_FAILED_PRECONDITION);
    free(target);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_republish_incompatible_is_already_exists(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    char *target = scratch("target");
    assert_int_equal(npublish(shared, id, staging, target, SNW, false), CSI_OK);
    assert_int_equal(npublish(shared, id, staging, target, SNW, true), CSI_ALREADY_EXISTS);
    assert_int_equal(npublish(shared, id, staging, target, SNMW, false), CSI_ALREADY_EXISTS);
    free(target);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_publish_single_writer_at_a_second_target_is_failed_precondition(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    char *t1 = scratch("target"), *t2 = scratch("target");
    assert_int_equal(npublish(shared, id, staging, t1, SNW, false), CSI_OK);
    assert_int_equal(npublish(shared, id, staging, t2, SNW, false), CSI_FAILED_PRECONDITION);
    free(t1);
    free(t2);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_publish_unknown_volume_is_not_found(void **state)
{
    (void)state;
    char *staging = scratch("staging"), *target = scratch("target");
    assert_int_equal(npublish(shared, "vol-0000000000000000", staging, target, SNW, false),
                     CSI_NOT_FOUND);
    assert_int_equal(nunpublish(shared, "vol-0000000000000000", target), CSI_NOT_FOUND);
    free(target);
    free(staging);
}

static void test_node_publish_missing_fields_are_invalid_argument(void **state)
{
    (void)state;
    char *dev = NULL, *staging = NULL;
    char *id = staged_volume(shared, &dev, &staging);
    assert_int_equal(npublish(shared, id, staging, "relative/path", SNW, false),
                     CSI_INVALID_ARGUMENT);
    assert_int_equal(npublish(shared, id, staging, "", SNW, false), CSI_INVALID_ARGUMENT);
    assert_int_equal(npublish(shared, "", staging, "/tmp/t", SNW, false), CSI_INVALID_ARGUMENT);
    assert_int_equal(nunpublish(shared, id, ""), CSI_INVALID_ARGUMENT);
    free(staging);
    free(dev);
    free(id);
}

static void test_node_multi_writer_volume_publishes_at_many_targets(void **state)
{
    (void)state;
    dproc *p = dstart(
        FLAGS("--node-caps=SINGLE_NODE_MULTI_WRITER", "--controller-caps=CREATE_DELETE_VOLUME"));
    char *id = new_volume(p, "a", 0);
    char *t1 = util_asprintf("%s/%s", th_tmpdir(), nm("target"));
    char *t2 = util_asprintf("%s/%s", th_tmpdir(), nm("target"));
    /* Neither staging nor attach: publish goes straight through. */
    assert_int_equal(npublish(p, id, NULL, t1, SNMW, false), CSI_OK);
    assert_int_equal(npublish(p, id, NULL, t2, SNMW, false), CSI_OK);
    assert_int_equal(nunpublish(p, id, t1), CSI_OK);
    assert_int_equal(nunpublish(p, id, t2), CSI_OK);
    free(t1);
    free(t2);
    free(id);
    dfree(p);
}

/* ---- persistence and status ------------------------------------------------------------- */

static void test_state_survives_sigkill_and_restart(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *ids[20];
    for (int i = 0; i < 20; i++) {
        char name[16];
        snprintf(name, sizeof(name), "v%02d", i);
        ids[i] = new_volume(p, name, (i + 1) * MIB);
    }
    assert_int_equal(cpub(p, ids[4], "node-2", SNW, false), CSI_OK);
    char *snap = new_snapshot(p, "s", ids[7]);
    assert_int_equal(expand(p, ids[9], 50 * MIB, 0, false, NULL), CSI_OK);
    char *dev = NULL;
    assert_int_equal(cpub_full(p, ids[5], "node-1", false, SNW, false, &dev), CSI_OK);
    char *staging = util_asprintf("%s/%s", th_tmpdir(), nm("staging"));
    char *target = util_asprintf("%s/%s", th_tmpdir(), nm("target"));
    assert_int_equal(nstage(p, ids[5], staging, SNW, dev), CSI_OK);
    assert_int_equal(npublish(p, ids[5], staging, target, SNW, true), CSI_OK);
    int status_ = dstop(p, SIGKILL);
    assert_true(WIFSIGNALED(status_));

    drestart(p, NULL);
    int c;
    Csi__V1__ListVolumesResponse *resp = list_volumes(p, 0, NULL, &c);
    assert_int_equal(c, CSI_OK);
    assert_int_equal(resp->n_entries, 20);
    for (int i = 0; i < 20; i++) {
        assert_string_equal(resp->entries[i]->volume->volume_id, ids[i]);
        assert_int_equal(resp->entries[i]->volume->capacity_bytes,
                         i == 9 ? 50 * MIB : (i + 1) * MIB);
        assert_int_equal(resp->entries[i]->status->n_published_node_ids, i == 4 || i == 5);
    }
    csi__v1__list_volumes_response__free_unpacked(resp, NULL);
    /* Bookkeeping came back too: idempotent answers, the right errors. */
    char *again = new_volume(p, "v03", 4 * MIB);
    assert_string_equal(again, ids[3]);
    assert_int_equal(cpub(p, ids[4], "node-3", SNW, false), CSI_FAILED_PRECONDITION);
    Csi__V1__CreateSnapshotResponse *sr = NULL;
    assert_int_equal(create_snapshot(p, "s", ids[7], &sr), CSI_OK);
    assert_string_equal(sr->snapshot->snapshot_id, snap);
    csi__v1__create_snapshot_response__free_unpacked(sr, NULL);
    assert_int_equal(capacity(p), 100 * GIB - 250 * MIB);
    /* Node bookkeeping too: the same calls are idempotent, others refused. */
    assert_int_equal(nstage(p, ids[5], staging, SNW, dev), CSI_OK);
    assert_int_equal(npublish(p, ids[5], staging, target, SNW, true), CSI_OK);
    assert_int_equal(npublish(p, ids[5], staging, target, SNW, false), CSI_ALREADY_EXISTS);
    assert_int_equal(cunpub(p, ids[5], "node-1"), CSI_FAILED_PRECONDITION);
    assert_int_equal(nunpublish(p, ids[5], target), CSI_OK);
    assert_int_equal(nunstage(p, ids[5], staging), CSI_OK);
    assert_int_equal(cunpub(p, ids[5], "node-1"), CSI_OK);
    free(staging);
    free(target);
    free(dev);
    free(again);
    free(snap);
    for (int i = 0; i < 20; i++)
        free(ids[i]);
    dfree(p);
}

static void test_status_json_counts_calls_and_lists_volumes(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    assert_int_equal(status_calls(p, "CreateVolume"), 0);
    char *id = new_volume(p, "a", 5 * MIB);
    cvr r;
    assert_int_equal(create(p, cvr_init(&r, "a", 50 * MIB, 0), NULL), CSI_ALREADY_EXISTS);
    assert_int_equal(cpub(p, id, "node-2", SNW, false), CSI_OK);
    char *snap = new_snapshot(p, "s", id);
    assert_int_equal(status_calls(p, "CreateVolume"), 2);
    assert_int_equal(status_calls(p, "ControllerPublishVolume"), 1);
    json_object *st = status(p), *v = status_volume(st, "a"), *f;
    assert_non_null(v);
    assert_true(json_object_object_get_ex(v, "id", &f));
    assert_string_equal(json_object_get_string(f), id);
    assert_true(json_object_object_get_ex(v, "capacity_bytes", &f));
    assert_int_equal(json_object_get_int64(f), 5 * MIB);
    assert_true(json_object_object_get_ex(v, "published_nodes", &f));
    assert_int_equal(json_object_array_length(f), 1);
    assert_string_equal(json_object_get_string(json_object_array_get_idx(f, 0)), "node-2");
    assert_true(json_object_object_get_ex(st, "snapshots", &f));
    assert_int_equal(json_object_array_length(f), 1);
    json_object_put(st);
    /* state.json holds the same volumes; secrets appear in neither file
     * nor in the log (the log is the test's own output, checked by eye). */
    char *path = util_asprintf("%s/state.json", p->dir);
    json_object *saved = json_object_from_file(path);
    assert_non_null(saved);
    const char *text = json_object_to_json_string(saved);
    assert_non_null(strstr(text, id));
    assert_null(strstr(text, "hunter2"));
    json_object_put(saved);
    free(path);
    free(snap);
    free(id);
    dfree(p);
}

static void test_secrets_never_reach_the_log(void **state)
{
    (void)state;
    char *log = util_asprintf("%s/%s.log", th_tmpdir(), nm("verbose"));
    dproc *p = dstart_logged(FLAGS("-v=5"), log);
    cvr r;
    cvr_init(&r, "with-secret", 0, 0);
    r.cb[0].mount.n_mount_flags = 1;
    char *flags[] = {"password=mount-flag-secret"};
    r.cb[0].mount.mount_flags = flags;
    assert_int_equal(create(p, &r.req, NULL), CSI_OK);
    char *path = util_asprintf("%s/state.json", p->dir);
    json_object *saved = json_object_from_file(path);
    assert_non_null(saved);
    assert_null(strstr(json_object_to_json_string(saved), "mount-flag-secret"));
    json_object_put(saved);
    free(path);
    dfree(p);
    FILE *f = fopen(log, "r");
    assert_non_null(f);
    char buf[65536];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    fclose(f);
    /* The request was logged at -v=5, with both kinds of secret stripped. */
    assert_non_null(strstr(buf, "with-secret"));
    assert_null(strstr(buf, "hunter2"));
    assert_null(strstr(buf, "mount-flag-secret"));
    free(log);
}

static void test_damaged_state_file_refuses_to_start(void **state)
{
    (void)state;
    char *dir = util_asprintf("%s/%s", th_tmpdir(), nm("damaged"));
    assert_int_equal(mkdir(dir, 0755), 0);
    char *path = util_asprintf("%s/state.json", dir);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("{\"volumes\": [", f);
    fclose(f);
    char *flags = util_asprintf("--state-dir=%s --endpoint=unix://%s/x.sock", dir, dir);
    int lines = 0;
    assert_int_equal(run_bad(flags, &lines), 1);
    free(flags);
    free(path);
    free(dir);
}

/* ---- fault injection ------------------------------------------------------------------------ */

static void test_fault_delay_shows_as_deadline_exceeded(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--fault=CreateVolume:delay=1500ms"));
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    csi_status st;
    assert_int_equal(csi_create_volume(p->c, cvr_init(&r, "slow", 0, 0), 200 * UTIL_MS, &resp, &st),
                     -EREMOTEIO);
    assert_int_equal(st.code, CSI_DEADLINE_EXCEEDED);
    /* Other methods are not delayed. */
    bool ready;
    assert_int_equal(csi_probe(p->c, 200 * UTIL_MS, &ready, &st), 0);
    dfree(p);
}

static void test_fault_fail_n_calls_then_success(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    write_faults(p, "{\"CreateVolume\": {\"fail\": {\"count\": 2, \"code\": \"UNAVAILABLE\","
                    " \"message\": \"try again\"}}}");
    cvr r;
    Csi__V1__CreateVolumeResponse *resp = NULL;
    csi_status st;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(csi_create_volume(p->c, cvr_init(&r, "a", 0, 0), TMO, &resp, &st),
                         -EREMOTEIO);
        assert_int_equal(st.code, CSI_UNAVAILABLE);
        assert_string_equal(st.message, "try again");
    }
    assert_false(status_has_volume(p, "a"));
    assert_int_equal(create(p, cvr_init(&r, "a", 0, 0), NULL), CSI_OK);
    assert_true(status_has_volume(p, "a"));
    assert_int_equal(status_calls(p, "CreateVolume"), 3);
    dfree(p);
}

static void test_fault_fail_flag_applies_from_start(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--fault=DeleteVolume:fail=1:INTERNAL:disk on fire;"
                            "CreateVolume:delay=10ms"));
    char *id = new_volume(p, "a", 0);
    csi_status st;
    Csi__V1__DeleteVolumeRequest req = CSI__V1__DELETE_VOLUME_REQUEST__INIT;
    req.volume_id = id;
    assert_int_equal(csi_delete_volume(p->c, &req, TMO, &st), -EREMOTEIO);
    assert_int_equal(st.code, CSI_INTERNAL);
    assert_string_equal(st.message, "disk on fire");
    assert_int_equal(csi_delete_volume(p->c, &req, TMO, &st), 0);
    free(id);
    dfree(p);
}

static void test_fault_file_changes_apply_at_run_time(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--fault=Probe:fail=100:UNAVAILABLE"));
    bool ready;
    csi_status st;
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), -EREMOTEIO);
    /* The file replaces the flag's rules... */
    write_faults(p, "{\"Probe\": {\"delay_ms\": 1000}}");
    assert_int_equal(csi_probe(p->c, 200 * UTIL_MS, &ready, &st), -EREMOTEIO);
    assert_int_equal(st.code, CSI_DEADLINE_EXCEEDED);
    /* ...and removing it clears them. */
    remove_faults(p);
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    /* A damaged file is ignored. */
    write_faults(p, "{\"Probe\": ");
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    dfree(p);
}

/* Injected messages up to 4 KiB reach the client whole (here: as much as
 * csi_status holds), so sidecars can be tested against the API's 1024-byte
 * limit on stored errors; mistyped rule fields make the file damaged. */
static void test_fault_long_message_and_mistyped_file(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *msg = util_calloc(3001, 1);
    memset(msg, 'm', 3000);
    char *json = util_asprintf("{\"Probe\": {\"fail\": {\"count\": 1, \"code\": \"INTERNAL\", "
                               "\"message\": \"%s\"}}}",
                               msg);
    write_faults(p, json);
    bool ready;
    csi_status st;
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), -EREMOTEIO);
    assert_int_equal(st.code, CSI_INTERNAL);
    assert_int_equal(strlen(st.message), CSI_STATUS_MSG_MAX - 1);
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    write_faults(p, "{\"Probe\": {\"fail\": {\"count\": \"3\", \"code\": \"INTERNAL\"}}}");
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    write_faults(p, "{\"Probe\": {\"crash\": {\"at\": 1, \"when\": 7}}}");
    assert_int_equal(csi_probe(p->c, TMO, &ready, &st), 0);
    free(json);
    free(msg);
    dfree(p);
}

static void test_fault_crash_before_leaves_no_volume(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    free(new_volume(p, "first", 0));
    write_faults(p, "{\"CreateVolume\": {\"crash\": {\"at\": 1, \"when\": \"before\"}}}");
    cvr r;
    assert_int_equal(create(p, cvr_init(&r, "doomed", 0, 0), NULL), CSI_UNAVAILABLE);
    int status_ = dstop(p, 0);
    assert_true(WIFEXITED(status_));
    assert_int_equal(WEXITSTATUS(status_), 137);
    assert_true(status_has_volume(p, "first"));
    assert_false(status_has_volume(p, "doomed"));
    remove_faults(p);
    drestart(p, NULL);
    assert_false(status_has_volume(p, "doomed"));
    int c;
    Csi__V1__ListVolumesResponse *resp = list_volumes(p, 0, NULL, &c);
    assert_int_equal(resp->n_entries, 1);
    csi__v1__list_volumes_response__free_unpacked(resp, NULL);
    dfree(p);
}

static void test_fault_crash_after_keeps_volume_after_restart(void **state)
{
    (void)state;
    dproc *p = dstart(FLAGS("--fault=CreateVolume:crash=2:after"));
    char *first = new_volume(p, "first", 0);
    cvr r;
    assert_int_equal(create(p, cvr_init(&r, "second", 0, 0), NULL), CSI_UNAVAILABLE);
    int status_ = dstop(p, 0);
    assert_true(WIFEXITED(status_));
    assert_int_equal(WEXITSTATUS(status_), 137);
    /* The call took effect before the exit: a retry finds the volume. */
    assert_true(status_has_volume(p, "second"));
    drestart(p, NULL);
    assert_true(status_has_volume(p, "second"));
    Csi__V1__CreateVolumeResponse *resp = NULL;
    assert_int_equal(create(p, cvr_init(&r, "second", 0, 0), &resp), CSI_OK);
    assert_string_not_equal(resp->volume->volume_id, first);
    csi__v1__create_volume_response__free_unpacked(resp, NULL);
    int c;
    Csi__V1__ListVolumesResponse *list = list_volumes(p, 0, NULL, &c);
    assert_int_equal(list->n_entries, 2);
    csi__v1__list_volumes_response__free_unpacked(list, NULL);
    free(first);
    dfree(p);
}

static void test_fault_crash_after_delete_is_durable(void **state)
{
    (void)state;
    dproc *p = dstart(NULL);
    char *id = new_volume(p, "gone", 0);
    write_faults(p, "{\"DeleteVolume\": {\"crash\": {\"at\": 1, \"when\": \"after\"}}}");
    assert_int_equal(delete_volume(p, id), CSI_UNAVAILABLE);
    dstop(p, 0);
    remove_faults(p);
    drestart(p, NULL);
    assert_false(status_has_volume(p, "gone"));
    assert_int_equal(delete_volume(p, id), CSI_OK);
    free(id);
    dfree(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_flags_print_one_line_and_exit_1),
        cmocka_unit_test(test_sigterm_stops_gracefully_and_removes_socket),
        cmocka_unit_test(test_capacity_flag_accepts_kubernetes_suffixes),
        cmocka_unit_test(test_get_plugin_info_names_the_driver),
        cmocka_unit_test(test_plugin_capabilities_follow_the_flag),
        cmocka_unit_test(test_probe_is_ready),
        cmocka_unit_test(test_create_volume_returns_size_context_and_topology),
        cmocka_unit_test(test_create_volume_same_name_compatible_request_is_idempotent),
        cmocka_unit_test(test_create_volume_same_name_incompatible_size_is_already_exists),
        cmocka_unit_test(test_create_volume_same_name_different_source_is_already_exists),
        cmocka_unit_test(test_create_volume_same_name_different_parameters_is_already_exists),
        cmocka_unit_test(test_create_volume_same_name_other_access_type_is_already_exists),
        cmocka_unit_test(test_create_volume_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_create_volume_limit_below_required_is_invalid_argument),
        cmocka_unit_test(test_create_volume_block_and_mount_together_is_invalid_argument),
        cmocka_unit_test(test_create_volume_name_with_control_character_is_invalid_argument),
        cmocka_unit_test(test_request_with_invalid_utf8_is_invalid_argument),
        cmocka_unit_test(test_create_volume_size_defaults_to_1gi_clamped_to_limit),
        cmocka_unit_test(test_create_volume_larger_than_the_pool_is_out_of_range),
        cmocka_unit_test(test_create_volume_beyond_free_capacity_is_resource_exhausted),
        cmocka_unit_test(test_create_volume_from_missing_source_is_not_found),
        cmocka_unit_test(test_create_volume_from_snapshot_and_clone_report_the_source),
        cmocka_unit_test(test_create_volume_smaller_than_its_source_is_out_of_range),
        cmocka_unit_test(test_create_volume_source_without_capability_is_invalid_argument),
        cmocka_unit_test(test_create_volume_topology_is_first_preferred_else_first_requisite),
        cmocka_unit_test(test_create_volume_topology_without_capability_is_invalid_argument),
        cmocka_unit_test(test_delete_volume_is_idempotent),
        cmocka_unit_test(test_delete_volume_without_id_is_invalid_argument),
        cmocka_unit_test(test_delete_published_volume_is_failed_precondition),
        cmocka_unit_test(test_controller_publish_returns_device_path_and_is_idempotent),
        cmocka_unit_test(test_controller_publish_unknown_volume_is_not_found),
        cmocka_unit_test(test_controller_publish_unknown_node_is_not_found),
        cmocka_unit_test(test_controller_publish_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_controller_publish_as_another_access_type_is_invalid_argument),
        cmocka_unit_test(
            test_controller_publish_single_node_volume_elsewhere_is_failed_precondition),
        cmocka_unit_test(test_controller_publish_multi_node_volume_to_many_nodes_is_ok),
        cmocka_unit_test(test_controller_republish_incompatible_is_already_exists),
        cmocka_unit_test(test_controller_publish_beyond_max_volumes_is_resource_exhausted),
        cmocka_unit_test(test_controller_publish_readonly_without_capability_is_invalid_argument),
        cmocka_unit_test(test_controller_unpublish_is_idempotent),
        cmocka_unit_test(test_controller_unpublish_unknown_volume_answers_ok_by_default),
        cmocka_unit_test(test_controller_unpublish_unknown_node_answers_ok_by_default),
        cmocka_unit_test(test_controller_unpublish_without_volume_id_is_invalid_argument),
        cmocka_unit_test(test_controller_unpublish_missing_ok_false_answers_not_found),
        cmocka_unit_test(test_validate_volume_capabilities_confirms_supported_ones),
        cmocka_unit_test(test_validate_volume_capabilities_unknown_volume_is_not_found),
        cmocka_unit_test(test_validate_volume_capabilities_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_controller_get_volume_reports_published_nodes),
        cmocka_unit_test(test_controller_get_capabilities_follow_the_flag),
        cmocka_unit_test(test_capabilities_not_advertised_make_rpcs_unimplemented),
        cmocka_unit_test(test_without_controller_service_every_controller_rpc_is_unimplemented),
        cmocka_unit_test(test_unsupported_rpcs_are_unimplemented),
        cmocka_unit_test(test_list_volumes_pages_and_reports_published_nodes),
        cmocka_unit_test(test_list_volumes_invalid_token_is_aborted),
        cmocka_unit_test(test_list_volumes_negative_max_entries_is_invalid_argument),
        cmocka_unit_test(test_get_capacity_reports_remaining_bytes),
        cmocka_unit_test(test_expand_volume_grows_and_accounts_capacity),
        cmocka_unit_test(test_modify_volume_records_the_mutable_parameters),
        cmocka_unit_test(test_modify_volume_needs_the_capability),
        cmocka_unit_test(test_expand_volume_is_idempotent_and_never_shrinks),
        cmocka_unit_test(test_expand_volume_limit_below_its_size_is_out_of_range),
        cmocka_unit_test(test_expand_volume_beyond_the_pool_is_out_of_range),
        cmocka_unit_test(test_expand_volume_beyond_free_capacity_is_resource_exhausted),
        cmocka_unit_test(test_expand_unknown_volume_is_not_found),
        cmocka_unit_test(test_expand_volume_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_expand_block_volume_needs_no_node_expansion),
        cmocka_unit_test(test_offline_expansion_of_a_published_volume_is_failed_precondition),
        cmocka_unit_test(test_create_snapshot_is_idempotent_and_ready),
        cmocka_unit_test(test_create_snapshot_same_name_other_source_is_already_exists),
        cmocka_unit_test(test_create_snapshot_of_missing_volume_is_not_found),
        cmocka_unit_test(test_create_snapshot_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_delete_snapshot_is_idempotent),
        cmocka_unit_test(test_delete_snapshot_without_id_is_invalid_argument),
        cmocka_unit_test(test_snapshot_outlives_its_source_volume),
        cmocka_unit_test(test_list_snapshots_filters_and_pages),
        cmocka_unit_test(test_list_snapshots_invalid_token_is_aborted),
        cmocka_unit_test(test_node_get_info_and_capabilities),
        cmocka_unit_test(test_node_stage_publish_unpublish_unstage_round_trip),
        cmocka_unit_test(test_snapshot_restore_and_clone_carry_the_data),
        cmocka_unit_test(test_mount_flag_bind_mounts_the_volume_where_the_co_asks),
        cmocka_unit_test(test_mount_flag_publishes_a_block_volume_as_its_backing_file),
        cmocka_unit_test(test_mount_flag_without_cap_sys_admin_is_a_clear_error),
        cmocka_unit_test(test_node_get_volume_stats_reports_usage_where_the_volume_is),
        cmocka_unit_test(test_node_get_volume_stats_at_another_path_is_not_found),
        cmocka_unit_test(test_controller_unpublish_while_staged_is_failed_precondition),
        cmocka_unit_test(test_delete_volume_staged_on_the_node_is_failed_precondition),
        cmocka_unit_test(test_node_unstage_while_published_is_failed_precondition),
        cmocka_unit_test(test_node_stage_before_controller_publish_is_failed_precondition),
        cmocka_unit_test(test_node_stage_with_another_publish_context_is_invalid_argument),
        cmocka_unit_test(test_node_stage_unknown_volume_is_not_found),
        cmocka_unit_test(test_backend_dir_node_stages_what_the_controller_published),
        cmocka_unit_test(test_node_stage_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_node_stage_incompatible_is_already_exists),
        cmocka_unit_test(test_node_stage_at_a_second_path_is_failed_precondition),
        cmocka_unit_test(test_node_publish_before_stage_is_failed_precondition),
        cmocka_unit_test(test_node_publish_without_staging_path_is_failed_precondition),
        cmocka_unit_test(test_node_republish_incompatible_is_already_exists),
        cmocka_unit_test(test_node_publish_single_writer_at_a_second_target_is_failed_precondition),
        cmocka_unit_test(test_node_publish_unknown_volume_is_not_found),
        cmocka_unit_test(test_node_publish_missing_fields_are_invalid_argument),
        cmocka_unit_test(test_node_multi_writer_volume_publishes_at_many_targets),
        cmocka_unit_test(test_state_survives_sigkill_and_restart),
        cmocka_unit_test(test_status_json_counts_calls_and_lists_volumes),
        cmocka_unit_test(test_secrets_never_reach_the_log),
        cmocka_unit_test(test_damaged_state_file_refuses_to_start),
        cmocka_unit_test(test_fault_delay_shows_as_deadline_exceeded),
        cmocka_unit_test(test_fault_fail_n_calls_then_success),
        cmocka_unit_test(test_fault_fail_flag_applies_from_start),
        cmocka_unit_test(test_fault_file_changes_apply_at_run_time),
        cmocka_unit_test(test_fault_long_message_and_mistyped_file),
        cmocka_unit_test(test_fault_crash_before_leaves_no_volume),
        cmocka_unit_test(test_fault_crash_after_keeps_volume_after_restart),
        cmocka_unit_test(test_fault_crash_after_delete_is_durable),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
