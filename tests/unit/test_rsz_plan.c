/*
 * Unit tests for the resizer's pure core (resizer/plan.c), checked against
 * external-resizer v2 (pkg/controller: controller.go, expand_and_recover.go,
 * resize_status.go; pkg/resizer/csi_resizer.go; pkg/util). Every table row
 * is one rule and names it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable; J() turns
 * them back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "resizer/resizer.h"
#include "table.h"

#define NOW      ((time_t)1700000000)
#define NOW_TEXT "2023-11-14T22:13:20Z"
#define MODE(m)  CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__##m

static const rsz_config CFG = {.driver_name = "hostpath.csi.example.com",
                               .single_node_multi_writer = true,
                               .recover = true,
                               .annotate_resize = true};
static const rsz_config LEGACY = {.driver_name = "hostpath.csi.example.com",
                                  .single_node_multi_writer = true,
                                  .annotate_resize = true};

/* A claim: request REQ, capacity CAP, extra status members ST (starting with ',' or ""). */
#define PVC(req, cap, st)                                                                          \
    "{`metadata`:{`name`:`c`,`namespace`:`ns`,`uid`:`u1`,`resourceVersion`:`7`},"                  \
    "`spec`:{`volumeName`:`pv-1`,`resources`:{`requests`:{`storage`:`" req "`}}},"                 \
    "`status`:{`phase`:`Bound`,`capacity`:{`storage`:`" cap "`}" st "}}"
#define PV(cap, extra)                                                                             \
    "{`metadata`:{`name`:`pv-1`,`resourceVersion`:`3`},`spec`:{`capacity`:{`storage`:`" cap        \
    "`},`accessModes`:[`ReadWriteOnce`],`claimRef`:{`namespace`:`ns`,`uid`:`u1`},"                 \
    "`csi`:{`driver`:`hostpath.csi.example.com`,`volumeHandle`:`vol-1`,`fsType`:`ext4`}" extra     \
    "}}"

/* A PV with extra members in spec.csi. */
#define PVS(extra)                                                                                 \
    "{`metadata`:{`name`:`pv-1`},`spec`:{`capacity`:{`storage`:`1Gi`},`accessModes`:["             \
    "`ReadWriteOnce`],`csi`:{`driver`:`hostpath.csi.example.com`,`volumeHandle`:`vol-1`" extra     \
    "}}}"

/* ---- names and capabilities ------------------------------------------------------------------ */

static void test_names_are_upstreams(void **state)
{
    (void)state;
    char *l = rsz_lock_name("hostpath.csi.example.com");
    expect_str("lock", "lock name", l, "external-resizer-hostpath.csi.example.com");
    char *lease = kube_leader_lease_name(l);
    expect_str("lease", "lease", lease, "external-resizer-hostpath-csi-example-com");
    char *c = rsz_component("d.example");
    expect_str("component", "event source", c, "external-resizer d.example");
    free(l);
    free(lease);
    free(c);
}

static void test_capabilities_choose_the_resizer(void **state)
{
    (void)state;
    enum {
        CTRL = 1 << CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE,
        EXP = 1 << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
        NEXP = 1 << CSI__V1__NODE_SERVICE_CAPABILITY__RPC__TYPE__EXPAND_VOLUME,
    };
    static const struct {
        const char *row;
        uint64_t plugin, controller, node;
        rsz_mode want;
    } rows[] = {
        {"controller EXPAND_VOLUME: ControllerExpandVolume", CTRL, EXP, 0, RSZ_MODE_CONTROLLER},
        {"controller and node expansion: the controller call", CTRL, EXP, NEXP,
         RSZ_MODE_CONTROLLER},
        {"node expansion only: the trivial resizer", CTRL, 0, NEXP, RSZ_MODE_TRIVIAL},
        {"no expansion at all: no resizer", CTRL, 0, 0, RSZ_MODE_NONE},
        {"no controller service: refused", 0, EXP, NEXP, RSZ_MODE_NO_CONTROLLER},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        csi_caps caps = {
            .plugin = rows[i].plugin, .controller = rows[i].controller, .node = rows[i].node};
        expect_int(rows[i].row, "mode", rsz_mode_from_caps(&caps), rows[i].want);
    }
}

/* ---- ours, needs resize --------------------------------------------------------------------- */

static void test_claims_and_volumes(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pvc, *pv;
        bool ours, bound, needs;
    } rows[] = {
        {"bound claim asking for more: ours, needs a resize", PVC("2Gi", "1Gi", ""), PV("1Gi", ""),
         true, true, true},
        {"same size: no resize", PVC("1Gi", "1Gi", ""), PV("1Gi", ""), true, true, false},
        {"smaller request: no resize (no shrinking)", PVC("1Gi", "2Gi", ""), PV("2Gi", ""), true,
         true, false},
        {"sizes compare as numbers: 1024Mi is 1Gi", PVC("1024Mi", "1Gi", ""), PV("1Gi", ""), true,
         true, false},
        {"decimal and binary: 2G > 1Gi", PVC("2G", "1Gi", ""), PV("1Gi", ""), true, true, true},
        {"no capacity yet counts as zero",
         "{`metadata`:{`namespace`:`ns`,`uid`:`u1`},"
         "`spec`:{`volumeName`:`pv-1`,`resources`:{`requests`:{"
         "`storage`:`1Gi`}}},`status`:{`phase`:`Bound`}}",
         PV("1Gi", ""), true, true, true},
        {"pending claim: no resize",
         "{`spec`:{`volumeName`:`pv-1`,`resources`:{`requests`:{"
         "`storage`:`2Gi`}}},`status`:{`phase`:`Pending`}}",
         PV("1Gi", ""), true, false, false},
        {"no volumeName: no resize",
         "{`spec`:{`resources`:{`requests`:{`storage`:`2Gi`}}},"
         "`status`:{`phase`:`Bound`}}",
         PV("1Gi", ""), true, false, false},
        {"an unreadable request is zero: no resize", PVC("lots", "1Gi", ""), PV("1Gi", ""), true,
         true, false},
        {"another driver's PV is not ours", PVC("2Gi", "1Gi", ""),
         "{`spec`:{`csi`:{`driver`:`other`},`claimRef`:{`namespace`:`ns`,`uid`:`u1`}}}", false,
         true, true},
        {"a PV without CSI source is not ours", PVC("2Gi", "1Gi", ""),
         "{`spec`:{`hostPath`:{`path`:`/x`}}}", false, false, true},
        {"a claimRef with another uid: not bound to it", PVC("2Gi", "1Gi", ""),
         "{`spec`:{`csi`:{`driver`:`hostpath.csi.example.com`},`claimRef`:{`namespace`:`ns`,"
         "`uid`:`u2`}}}",
         true, false, true},
        {"wrong JSON types read as missing",
         "{`spec`:{`volumeName`:7,`resources`:`x`},"
         "`status`:{`phase`:[`Bound`]}}",
         "{`spec`:{`csi`:{`driver`:42},`claimRef`:`ns/c`}}", false, false, false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc), *pv = J(rows[i].pv);
        expect_int(rows[i].row, "ours", rsz_pv_is_ours(&CFG, pv), rows[i].ours);
        if (strstr(rows[i].row, "uid") || strstr(rows[i].row, "types") ||
            strstr(rows[i].row, "without CSI"))
            expect_int(rows[i].row, "bound", rsz_pv_bound_to(pv, pvc), rows[i].bound);
        expect_int(rows[i].row, "needs resize", rsz_pvc_needs_resize(pvc), rows[i].needs);
        json_object_put(pvc);
        json_object_put(pv);
    }
}

static void test_informer_updates_that_need_a_sync(void **state)
{
    (void)state;
#define PVCU(rv, req, cap, st, ann)                                                                \
    "{`metadata`:{`resourceVersion`:`" rv "`" ann                                                  \
    "},`spec`:{`resources`:{`requests`:{`storage`:`" req                                           \
    "`}}},`status`:{`capacity`:{`storage`:`" cap "`}" st "}}"
    static const struct {
        const char *row, *old, *obj;
        bool recover, want;
    } rows[] = {
        {"a bigger request", PVCU("1", "1Gi", "1Gi", "", ""), PVCU("2", "2Gi", "1Gi", "", ""),
         false, true},
        {"a resync (same resourceVersion)", PVCU("1", "1Gi", "1Gi", "", ""),
         PVCU("1", "1Gi", "1Gi", "", ""), false, true},
        {"a label change: not ours", PVCU("1", "1Gi", "1Gi", "", ""),
         PVCU("2", "1Gi", "1Gi", "", ",`labels`:{`a`:`b`}"), false, false},
        {"a grown capacity (node expansion done)", PVCU("1", "2Gi", "1Gi", "", ""),
         PVCU("2", "2Gi", "2Gi", "", ""), false, true},
        {"the resizer annotation changed", PVCU("1", "1Gi", "1Gi", "", ""),
         PVCU("2", "1Gi", "1Gi", "", ",`annotations`:{`volume.kubernetes.io/storage-resizer`:`x`}"),
         false, true},
        {"a smaller request: only with recovery", PVCU("1", "2Gi", "1Gi", "", ""),
         PVCU("2", "1Gi", "1Gi", "", ""), false, false},
        {"a smaller request with recovery", PVCU("1", "2Gi", "1Gi", "", ""),
         PVCU("2", "1Gi", "1Gi", "", ""), true, true},
        {"a new resize status with recovery", PVCU("1", "2Gi", "1Gi", "", ""),
         PVCU("2", "2Gi", "1Gi", ",`allocatedResourceStatuses`:{`storage`:`NodeResizeInfeasible`}",
              ""),
         true, true},
        {"a new resize status without recovery: ignored", PVCU("1", "2Gi", "1Gi", "", ""),
         PVCU("2", "2Gi", "1Gi", ",`allocatedResourceStatuses`:{`storage`:`NodeResizeInfeasible`}",
              ""),
         false, false},
    };
#undef PVCU
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *old = J(rows[i].old), *obj = J(rows[i].obj);
        expect_int(rows[i].row, "sync",
                   rsz_pvc_update_needs_sync(rows[i].recover ? &CFG : &LEGACY, old, obj),
                   rows[i].want);
        json_object_put(old);
        json_object_put(obj);
    }
    json_object *o = J(PVC("1Gi", "1Gi", ""));
    expect_int("no old object (an add)", "sync", rsz_pvc_update_needs_sync(&CFG, NULL, o), true);
    json_object_put(o);
}

/* ---- the decision ------------------------------------------------------------------------------
 */

#define ST(s)    ",`allocatedResourceStatuses`:{`storage`:`" s "`}"
#define ALLOC(s) ",`allocatedResources`:{`storage`:`" s "`}"
#define FSPEND   ",`conditions`:[{`type`:`FileSystemResizePending`,`status`:`True`}]"

static void test_which_size_to_expand_to(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pvc, *pv;
        const rsz_config *cfg;
        bool final_error, slow;
        rsz_step step;
        const char *size;
        bool update_status;
    } rows[] = {
        {"first resize: the request", PVC("2Gi", "1Gi", ""), PV("1Gi", ""), &CFG, false, false,
         RSZ_EXPAND, "2Gi", true},
        {"not ours: nothing", PVC("2Gi", "1Gi", ""),
         "{`spec`:{`csi`:{`driver`:`x`},`claimRef`:{`namespace`:`ns`,`uid`:`u1`}}}", &CFG, false,
         false, RSZ_NONE, NULL, true},
        {"node resize pending and PV already as big as allocated: wait for the node",
         PVC("3Gi", "1Gi", ST("NodeResizePending") ALLOC("2Gi")), PV("2Gi", ""), &CFG, false, false,
         RSZ_NONE, NULL, true},
        {"node resize in progress and PV smaller than allocated: the allocated size",
         PVC("3Gi", "1Gi", ST("NodeResizeInProgress") ALLOC("2Gi")), PV("1Gi", ""), &CFG, false,
         false, RSZ_EXPAND, "2Gi", false},
        {"node infeasible, PV small: the allocated size",
         PVC("3Gi", "1Gi", ST("NodeResizeInfeasible") ALLOC("2Gi")), PV("1Gi", ""), &CFG, false,
         false, RSZ_EXPAND, "2Gi", false},
        {"controller in progress (uncertain): finish the allocated size first",
         PVC("3Gi", "1Gi", ST("ControllerResizeInProgress") ALLOC("2Gi")), PV("1Gi", ""), &CFG,
         false, false, RSZ_EXPAND, "2Gi", false},
        {"controller in progress after a final error: the new request",
         PVC("3Gi", "1Gi", ST("ControllerResizeInProgress") ALLOC("2Gi")), PV("1Gi", ""), &CFG,
         true, false, RSZ_EXPAND, "3Gi", true},
        {"infeasible and the user asks for another size: the request, at once",
         PVC("3Gi", "1Gi", ST("ControllerResizeInfeasible") ALLOC("5Gi")), PV("1Gi", ""), &CFG,
         false, true, RSZ_EXPAND, "3Gi", true},
        {"infeasible at the same size in the slow set: later",
         PVC("5Gi", "1Gi", ST("ControllerResizeInfeasible") ALLOC("5Gi")), PV("1Gi", ""), &CFG,
         false, true, RSZ_DELAY, "5Gi", true},
        {"infeasible at the same size, slow period over: again, no status change",
         PVC("5Gi", "1Gi", ST("ControllerResizeInfeasible") ALLOC("5Gi")), PV("1Gi", ""), &CFG,
         false, false, RSZ_EXPAND, "5Gi", false},
        {"PV grown, node pending: nothing (spurious event)",
         PVC("2Gi", "1Gi", ST("NodeResizePending") ALLOC("2Gi")), PV("2Gi", ""), &CFG, false, false,
         RSZ_NONE, NULL, true},
        {"PV grown, status writes were lost: resume with the allocated size",
         PVC("2Gi", "1Gi", ST("ControllerResizeInProgress") ALLOC("2Gi")), PV("2Gi", ""), &CFG,
         false, false, RSZ_EXPAND, "2Gi", false},
        {"PV grown, node infeasible: the allocated size for a controller driver",
         PVC("2Gi", "1Gi", ST("NodeResizeInfeasible") ALLOC("3Gi")), PV("3Gi", ""), &CFG, false,
         false, RSZ_EXPAND, "3Gi", false},
        {"PV grown, no status but allocated: the allocated size", PVC("2Gi", "1Gi", ALLOC("2Gi")),
         PV("2Gi", ""), &CFG, false, false, RSZ_EXPAND, "2Gi", false},
        {"old API server (no status, no allocated), FileSystemResizePending: nothing",
         PVC("2Gi", "1Gi", FSPEND), PV("2Gi", ""), &CFG, false, false, RSZ_NONE, NULL, true},
        {"old API server, PV grown, no condition: expand again (idempotent)", PVC("2Gi", "1Gi", ""),
         PV("2Gi", ""), &CFG, false, false, RSZ_EXPAND, "2Gi", true},
        {"legacy: PV small: the request", PVC("2Gi", "1Gi", ALLOC("5Gi")), PV("1Gi", ""), &LEGACY,
         false, false, RSZ_EXPAND, "2Gi", true},
        {"legacy: PV grown, fs pending: nothing", PVC("2Gi", "1Gi", FSPEND), PV("2Gi", ""), &LEGACY,
         false, false, RSZ_NONE, NULL, true},
        {"legacy: PV grown, still Resizing: again to learn about the node", PVC("2Gi", "1Gi", ""),
         PV("2Gi", ""), &LEGACY, false, false, RSZ_EXPAND, "2Gi", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc), *pv = J(rows[i].pv);
        rsz_plan p;
        int rc = rsz_plan_expand(rows[i].cfg, pvc, pv, rows[i].final_error, rows[i].slow, &p);
        expect_int(rows[i].row, "rc", rc, 0);
        expect_int(rows[i].row, "step", p.step, rows[i].step);
        if (rows[i].step != RSZ_NONE) {
            expect_str(rows[i].row, "size", p.new_size, rows[i].size);
            expect_int(rows[i].row, "update status", p.update_status, rows[i].update_status);
        }
        json_object_put(pvc);
        json_object_put(pv);
    }
    json_object *pvc = J(PVC("2Gi", "1Gi", ALLOC("lots"))), *pv = J(PV("2Gi", ""));
    rsz_plan p;
    expect_int("an allocated size that is no quantity", "rc",
               rsz_plan_expand(&CFG, pvc, pv, false, false, &p), -EINVAL);
    json_object_put(pvc);
    json_object_put(pv);
}

/* ---- the request -------------------------------------------------------------------------------
 */

static void test_expand_request(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pv;
        bool snmw;
        int rc;
        bool block;
        int mode;
        const char *fs, *err;
        size_t flags;
    } rows[] = {
        {"mount, ext4, RWO with SINGLE_NODE_MULTI_WRITER", PV("1Gi", ""), true, 0, false,
         MODE(SINGLE_NODE_MULTI_WRITER), "ext4", NULL, 0},
        {"RWO without the capability: SINGLE_NODE_WRITER", PV("1Gi", ""), false, 0, false,
         MODE(SINGLE_NODE_WRITER), "ext4", NULL, 0},
        {"block volume", PV("1Gi", ",`volumeMode`:`Block`"), true, 0, true,
         MODE(SINGLE_NODE_MULTI_WRITER), NULL, NULL, 0},
        {"mount options go along", PV("1Gi", ",`mountOptions`:[`ro`,`noatime`]"), true, 0, false,
         MODE(SINGLE_NODE_MULTI_WRITER), "ext4", NULL, 2},
        {"no CSI source", "{`metadata`:{`name`:`p`},`spec`:{}}", true, -EINVAL, false, 0, NULL,
         "volume p is not migrated to CSI", 0},
        {"no handle", "{`metadata`:{`name`:`p`},`spec`:{`csi`:{`driver`:`d`}}}", true, -EINVAL,
         false, 0, NULL, "empty volume handle", 0},
        {"ROX with RWO is refused",
         "{`metadata`:{`name`:`p`},`spec`:{`accessModes`:[`ReadOnlyMany`,`ReadWriteOnce`],"
         "`csi`:{`driver`:`d`,`volumeHandle`:`h`}}}",
         true, -EINVAL, false, 0, NULL,
         "failed to get capabilities of volume p with CSI does not support ReadOnlyMany and "
         "ReadWriteOnce on the same PersistentVolume",
         0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv);
        rsz_config cfg = CFG;
        cfg.single_node_multi_writer = rows[i].snmw;
        Csi__V1__ControllerExpandVolumeRequest *req = NULL;
        int rc = rsz_expand_request(&cfg, pv, 2147483648LL, &req);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        if (rc < 0) {
            expect_str(rows[i].row, "error", util_err_last(), rows[i].err);
            assert_null(req);
        } else {
            expect_str(rows[i].row, "volume_id", req->volume_id, "vol-1");
            expect_int(rows[i].row, "required_bytes", req->capacity_range->required_bytes,
                       2147483648LL);
            expect_int(rows[i].row, "limit_bytes", req->capacity_range->limit_bytes, 0);
            expect_int(rows[i].row, "mode", req->volume_capability->access_mode->mode,
                       rows[i].mode);
            expect_int(rows[i].row, "block",
                       req->volume_capability->access_type_case ==
                           CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK,
                       rows[i].block);
            if (!rows[i].block) {
                expect_str(rows[i].row, "fs", req->volume_capability->mount->fs_type, rows[i].fs);
                expect_int(rows[i].row, "mount flags",
                           (long long)req->volume_capability->mount->n_mount_flags, rows[i].flags);
            }
            expect_int(rows[i].row, "no secrets", (long long)req->n_secrets, 0);
        }
        rsz_request_free(req);
        json_object_put(pv);
    }
}

static void test_secrets(void **state)
{
    (void)state;
    json_object *pv = J(PVS(",`controllerExpandSecretRef`:{`name`:`s`,`namespace`:`sn`}"));
    const char *ns, *name;
    expect_int("ref", "rc", rsz_secret_ref(pv, &ns, &name), 0);
    expect_str("ref", "ns", ns, "sn");
    expect_str("ref", "name", name, "s");
    json_object_put(pv);

    pv = J(PVS(",`controllerPublishSecretRef`:{`name`:`s`,`namespace`:`sn`}"));
    expect_int("only a publish secret: none for expansion", "rc", rsz_secret_ref(pv, &ns, &name),
               0);
    assert_null(name);
    json_object_put(pv);

    pv = J(PVS(",`controllerExpandSecretRef`:{`name`:`s`}"));
    expect_int("a ref without namespace", "rc", rsz_secret_ref(pv, &ns, &name), -EINVAL);
    json_object_put(pv);

    pv = J(PVS(",`controllerExpandSecretRef`:`s`"));
    expect_int("a ref of the wrong type reads as none", "rc", rsz_secret_ref(pv, &ns, &name), 0);
    assert_null(name);

    Csi__V1__ControllerExpandVolumeRequest *req = NULL;
    assert_int_equal(rsz_expand_request(&CFG, pv, 1, &req), 0);
    json_object *secret = J("{`data`:{`user`:`YWRtaW4=`}}");
    expect_int("secret data", "rc", rsz_request_set_secrets(req, secret), 0);
    expect_int("secret data", "n", (long long)req->n_secrets, 1);
    expect_str("secret data", "key", req->secrets[0]->key, "user");
    expect_str("secret data", "value", req->secrets[0]->value, "admin");
    rsz_request_free(req);
    json_object_put(secret);

    assert_int_equal(rsz_expand_request(&CFG, pv, 1, &req), 0);
    secret = J("{`data`:{`user`:`not base64!`}}");
    expect_int("bad base64", "rc", rsz_request_set_secrets(req, secret), -EINVAL);
    rsz_request_free(req);
    json_object_put(secret);
    json_object_put(pv);
}

static void test_errors_final_and_infeasible(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        int code;
        bool final, infeasible;
    } rows[] = {
        {"not a driver answer", 0, false, false},
        {"DEADLINE_EXCEEDED may still be going on", CSI_DEADLINE_EXCEEDED, false, false},
        {"UNAVAILABLE", CSI_UNAVAILABLE, false, false},
        {"ABORTED", CSI_ABORTED, false, false},
        {"RESOURCE_EXHAUSTED", CSI_RESOURCE_EXHAUSTED, false, false},
        {"CANCELLED", CSI_CANCELLED, false, false},
        {"INTERNAL is final", CSI_INTERNAL, true, false},
        {"FAILED_PRECONDITION is final", CSI_FAILED_PRECONDITION, true, false},
        {"OUT_OF_RANGE is infeasible", CSI_OUT_OF_RANGE, true, true},
        {"INVALID_ARGUMENT is infeasible", CSI_INVALID_ARGUMENT, true, true},
        {"NOT_FOUND is infeasible", CSI_NOT_FOUND, true, true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        expect_int(rows[i].row, "final", rsz_error_final(rows[i].code), rows[i].final);
        expect_int(rows[i].row, "infeasible", rsz_error_infeasible(rows[i].code),
                   rows[i].infeasible);
    }
    char *t = rsz_failed_text("pv-1", "d.example", "rpc error: code = Internal desc = boom");
    expect_str("failure text", "text", t,
               "resize volume \"pv-1\" by resizer \"d.example\" failed: rpc error: code = Internal "
               "desc = boom");
    free(t);
}

/* ---- volumes in use (upstream's inuse_pvc_store.go, inUseError) ------------------------------ */

#define POD(phase, vols)                                                                           \
    "{`metadata`:{`name`:`p`,`namespace`:`ns`,`uid`:`pu`,`resourceVersion`:`9`,`labels`:{`a`:`b`}" \
    "},`spec`:{`nodeName`:`n1`,`containers`:[{`name`:`c`,`image`:`i`}],`volumes`:[" vols "]},"     \
    "`status`:{`phase`:`" phase "`}}"
#define CLAIMVOL(v, c) "{`name`:`" v "`,`persistentVolumeClaim`:{`claimName`:`" c "`}}"
#define EMPTYDIR(v)    "{`name`:`" v "`,`emptyDir`:{}}"

static void collect(void *ctx, const char *key)
{
    char *all = ctx;
    if (*all)
        strcat(all, ",");
    strcat(all, key);
}

static void test_pods_that_use_claims(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        const char *pod;
        bool finished, uses;
        const char *keys;
    } rows[] = {
        {"a running pod with a claim uses it", POD("Running", CLAIMVOL("d", "c")), false, true,
         "ns/c"},
        {"a pending pod uses its claim too (not terminated)", POD("Pending", CLAIMVOL("d", "c")),
         false, true, "ns/c"},
        {"a pod without a phase is not finished",
         "{`metadata`:{`name`:`p`,`namespace`:`ns`},"
         "`spec`:{`volumes`:[" CLAIMVOL("d", "c") "]}}",
         false, true, "ns/c"},
        {"Succeeded: terminated, uses nothing", POD("Succeeded", CLAIMVOL("d", "c")), true, false,
         ""},
        {"Failed: terminated, uses nothing", POD("Failed", CLAIMVOL("d", "c")), true, false, ""},
        {"Unknown is not terminated", POD("Unknown", CLAIMVOL("d", "c")), false, true, "ns/c"},
        {"no claim volume: not kept", POD("Running", EMPTYDIR("e")), false, false, ""},
        {"every claim, in the pod's namespace, once each",
         POD("Running",
             CLAIMVOL("a", "c1") "," EMPTYDIR("e") "," CLAIMVOL("b", "c2") "," CLAIMVOL("x", "c1")),
         false, true, "ns/c1,ns/c2"},
        {"an empty claimName is no claim", POD("Running", CLAIMVOL("d", "")), false, false, ""},
        {"volumes of the wrong type read as none",
         "{`metadata`:{`name`:`p`,`namespace`:`ns`},`spec`:{`volumes`:{}}}", false, false, ""},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pod = J(rows[i].pod);
        expect_int(rows[i].row, "finished", rsz_pod_finished(pod), rows[i].finished);
        expect_int(rows[i].row, "uses claims", rsz_pod_uses_claims(pod), rows[i].uses);
        char keys[256] = "";
        rsz_pod_claim_keys(pod, collect, keys);
        expect_str(rows[i].row, "index keys", keys, rows[i].keys);
        json_object_put(pod);
    }
}

static void test_pod_slimmed_to_claim_names(void **state)
{
    (void)state;
    json_object *pod =
        J(POD("Running", CLAIMVOL("a", "c1") "," EMPTYDIR("e") "," CLAIMVOL("b", "c2")));
    rsz_pod_slim(pod);
    char *text = kobj_to_text(pod, NULL);
    expect_text("slim pod", "cached text", text,
                "{`metadata`:{`name`:`p`,`namespace`:`ns`,`uid`:`pu`,`resourceVersion`:`9`},"
                "`spec`:{`volumes`:[{`persistentVolumeClaim`:{`claimName`:`c1`}},"
                "{`persistentVolumeClaim`:{`claimName`:`c2`}}]}}");
    char keys[64] = "";
    rsz_pod_claim_keys(pod, collect, keys);
    expect_str("slim pod", "the index reads the same keys", keys, "ns/c1,ns/c2");
    free(text);
    json_object_put(pod);
}

static void test_inuse_decision(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        int code;
        bool inuse;
    } codes[] = {
        {"FAILED_PRECONDITION: offline expansion only", CSI_FAILED_PRECONDITION, true},
        {"INTERNAL is no in-use error", CSI_INTERNAL, false},
        {"ABORTED is no in-use error", CSI_ABORTED, false},
        {"UNAVAILABLE is no in-use error", CSI_UNAVAILABLE, false},
        {"not a driver answer", 0, false},
    };
    for (size_t i = 0; i < N_ROWS(codes); i++)
        expect_int(codes[i].row, "in use", rsz_error_inuse(codes[i].code), codes[i].inuse);
    static const struct {
        const char *row;
        bool error;
        size_t pods;
        bool blocks;
    } rows[] = {
        {"in-use error and a pod uses the claim: wait", true, 1, true},
        {"in-use error, several pods: wait", true, 3, true},
        {"in-use error, no pod any more: expand", true, 0, false},
        {"a pod but no in-use error: expand (online expansion)", false, 2, false},
        {"neither: expand", false, 0, false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_int(rows[i].row, "blocks", rsz_inuse_blocks(rows[i].error, rows[i].pods),
                   rows[i].blocks);
    json_object *pvc = J(PVC("2Gi", "1Gi", ""));
    char *t = rsz_inuse_text(pvc, "d.example");
    expect_str("upstream's in-use text", "text", t,
               "Unable to expand ns/c because CSI driver d.example only supports offline "
               "expansion and volume is currently in-use");
    free(t);
    json_object_put(pvc);
}

/* ---- patches -----------------------------------------------------------------------------------
 */

#define COND(t)                                                                                    \
    "{`type`:`" t "`,`status`:`True`,`lastProbeTime`:null,`lastTransitionTime`:`" NOW_TEXT "`}"
#define CONDM(t, m)                                                                                \
    "{`type`:`" t "`,`status`:`True`,`lastProbeTime`:null,`lastTransitionTime`:`" NOW_TEXT         \
    "`,`message`:`" m "`}"
#define OLD(t)     "{`type`:`" t "`,`status`:`True`}"
#define CONDS(...) ",`conditions`:[" __VA_ARGS__ "]"
#define FSMSG      "Waiting for user to (re-)start a pod to finish file system resize of volume on node."

enum { IN_PROGRESS, IN_PROGRESS_SAME, NODE_PENDING, FINISHED, FAILED, INFEASIBLE };

static void test_claim_patches(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        const rsz_config *cfg;
        int kind;
        const char *pvc, *want;
    } rows[] = {
        {"in progress: Resizing, allocated size, ControllerResizeInProgress, guarded", &CFG,
         IN_PROGRESS, PVC("2Gi", "1Gi", ""),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" COND(
             "Resizing") "],"
                         "`allocatedResourceStatuses`:{`storage`:`ControllerResizeInProgress`},"
                         "`allocatedResources`:{`storage`:`2Gi`}}}"},
        {"in progress keeps foreign conditions, drops old resize ones", &CFG, IN_PROGRESS,
         PVC("2Gi", "1Gi",
             CONDS(OLD("Foo") "," OLD("FileSystemResizePending") "," OLD("Resizing"))),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" OLD("Foo") "," COND(
             "Resizing") "],`allocatedResourceStatuses`:{`storage`:`ControllerResizeInProgress`},"
                         "`allocatedResources`:{`storage`:`2Gi`}}}"},
        {"in progress at the recorded size keeps old resize conditions, no status", &CFG,
         IN_PROGRESS_SAME, PVC("2Gi", "1Gi", CONDS(OLD("ControllerResizeError"))),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" OLD(
             "ControllerResizeError") "," COND("Resizing") "],"
                                                           "`allocatedResources`:{`storage`:`2Gi`}}"
                                                           "}"},
        {"in progress drops node-expansion-not-required", &CFG, IN_PROGRESS,
         "{`metadata`:{`resourceVersion`:`7`,`annotations`:{`volume.kubernetes.io/"
         "node-expansion-not-required`:`true`}},`status`:{}}",
         "{`metadata`:{`resourceVersion`:`7`,`annotations`:{`volume.kubernetes.io/"
         "node-expansion-not-required`:null}},`status`:{`conditions`:[" COND(
             "Resizing") "],"
                         "`allocatedResourceStatuses`:{`storage`:`ControllerResizeInProgress`},"
                         "`allocatedResources`:{`storage`:`2Gi`}}}"},
        {"legacy in progress: the condition only", &LEGACY, IN_PROGRESS, PVC("2Gi", "1Gi", ""),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" COND("Resizing") "]}}"},
        {"node pending: FileSystemResizePending with upstream's message, NodeResizePending", &CFG,
         NODE_PENDING, PVC("2Gi", "1Gi", CONDS(OLD("Resizing"))),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" OLD("Resizing") "," CONDM(
             "FileSystemResizePending",
             FSMSG) "],`allocatedResourceStatuses`:{`storage`:`NodeResizePending`}}}"},
        {"legacy node pending replaces Resizing", &LEGACY, NODE_PENDING,
         PVC("2Gi", "1Gi", CONDS(OLD("Resizing"))),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" CONDM(
             "FileSystemResizePending", FSMSG) "]}}"},
        {"finished: capacity, resize conditions gone, status removed, annotation set", &CFG,
         FINISHED, PVC("2Gi", "1Gi", CONDS(OLD("Resizing")) ST("ControllerResizeInProgress")),
         "{`metadata`:{`resourceVersion`:`7`,`annotations`:{`volume.kubernetes.io/"
         "node-expansion-not-required`:`true`}},`status`:{`capacity`:{`storage`:`2Gi`},"
         "`conditions`:null,`allocatedResourceStatuses`:{`storage`:null}}}"},
        {"finished keeps foreign conditions", &CFG, FINISHED,
         PVC("2Gi", "1Gi", CONDS(OLD("Resizing") "," OLD("Foo"))),
         "{`metadata`:{`resourceVersion`:`7`,`annotations`:{`volume.kubernetes.io/"
         "node-expansion-not-required`:`true`}},`status`:{`capacity`:{`storage`:`2Gi`},"
         "`conditions`:[" OLD("Foo") "]}}"},
        {"legacy finished: capacity and conditions only", &LEGACY, FINISHED,
         PVC("2Gi", "1Gi", CONDS(OLD("Resizing"))),
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`capacity`:{`storage`:`2Gi`},"
         "`conditions`:null}}"},
        {"a final failure: ControllerResizeError, unguarded", &CFG, FAILED,
         PVC("2Gi", "1Gi", CONDS(OLD("Resizing"))),
         "{`status`:{`conditions`:[" OLD("Resizing") "," CONDM(
             "ControllerResizeError", "failed to expand pvc with rpc error: code = Internal desc "
                                      "= boom") "]}}"},
        {"an infeasible failure: ControllerResizeInfeasible too", &CFG, INFEASIBLE,
         PVC("2Gi", "1Gi", ""),
         "{`status`:{`conditions`:[" CONDM("ControllerResizeError",
                                           "failed to expand pvc with rpc error: code = Internal "
                                           "desc = boom") "],"
                                                          "`allocatedResourceStatuses`:{`storage`:"
                                                          "`ControllerResizeInfeasible`}}}"},
        {"conditions of the wrong type are skipped, a claim without status is fine", &CFG,
         IN_PROGRESS, "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[7,`x`]}}",
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" COND(
             "Resizing") "],"
                         "`allocatedResourceStatuses`:{`storage`:`ControllerResizeInProgress`},"
                         "`allocatedResources`:{`storage`:`2Gi`}}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc);
        char *got = NULL;
        const char *err = "rpc error: code = Internal desc = boom";
        switch (rows[i].kind) {
        case IN_PROGRESS:
            got = rsz_patch_in_progress(rows[i].cfg, pvc, "2Gi", true, NOW);
            break;
        case IN_PROGRESS_SAME:
            got = rsz_patch_in_progress(rows[i].cfg, pvc, "2Gi", false, NOW);
            break;
        case NODE_PENDING:
            got = rsz_patch_node_pending(rows[i].cfg, pvc, NOW);
            break;
        case FINISHED:
            got = rsz_patch_finished(rows[i].cfg, pvc, "2Gi", NOW);
            break;
        case FAILED:
            got = rsz_patch_failed(pvc, err, false, NOW);
            break;
        default:
            got = rsz_patch_failed(pvc, err, true, NOW);
            break;
        }
        expect_text(rows[i].row, "patch", got, rows[i].want);
        free(got);
        json_object_put(pvc);
    }
}

static void test_pv_patches(void **state)
{
    (void)state;
    json_object *pv = J(PV("1Gi", ""));
    char *got = rsz_patch_pv_capacity(pv, "2Gi", NULL);
    expect_text("capacity only", "patch", got, "{`spec`:{`capacity`:{`storage`:`2Gi`}}}");
    free(got);
    got = rsz_patch_pv_capacity(pv, "2Gi", "1Gi");
    expect_text(
        "node expansion: the pre-resize capacity is kept", "patch", got,
        "{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/pre-resize-capacity`:`1Gi`}},"
        "`spec`:{`capacity`:{`storage`:`2Gi`}}}");
    free(got);
    json_object_put(pv);

    pv = J("{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/pre-resize-capacity`:`1Gi`}},"
           "`spec`:{`capacity`:{`storage`:`2Gi`}}}");
    got = rsz_patch_pv_capacity(pv, "3Gi", "2Gi");
    expect_text("an existing pre-resize annotation stays as it is", "patch", got,
                "{`spec`:{`capacity`:{`storage`:`3Gi`}}}");
    free(got);
    json_object *pvc = J(PVC("2Gi", "1Gi", ""));
    expect_int("node expansion not done: the annotation stays", "drop",
               rsz_pv_drop_pre_resize(pvc, pv), false);
    json_object_put(pvc);
    pvc = J(PVC("2Gi", "2Gi", ""));
    expect_int("node expansion done: the annotation goes", "drop", rsz_pv_drop_pre_resize(pvc, pv),
               true);
    got = rsz_patch_pv_drop_pre_resize();
    expect_text(
        "drop", "patch", got,
        "{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/pre-resize-capacity`:null}}}");
    free(got);
    json_object_put(pvc);
    json_object_put(pv);
}

static void test_conditions(void **state)
{
    (void)state;
    json_object *pvc = J(PVC("2Gi", "1Gi", FSPEND));
    expect_int("FileSystemResizePending True", "pending", rsz_pvc_fs_pending(pvc), true);
    json_object_put(pvc);
    pvc =
        J(PVC("2Gi", "1Gi", ",`conditions`:[{`type`:`FileSystemResizePending`,`status`:`False`}]"));
    expect_int("FileSystemResizePending False", "pending", rsz_pvc_fs_pending(pvc), false);
    json_object_put(pvc);
    pvc = J(PVC("2Gi", "1Gi", ",`conditions`:{`type`:`FileSystemResizePending`}"));
    expect_int("conditions of the wrong type", "pending", rsz_pvc_fs_pending(pvc), false);
    expect_str("no resize status", "status", rsz_pvc_resize_status(pvc), "");
    json_object_put(pvc);
    pvc = J(PVC("2Gi", "1Gi", ST("NodeResizePending")));
    expect_str("a resize status", "status", rsz_pvc_resize_status(pvc), "NodeResizePending");
    json_object_put(pvc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_are_upstreams),
        cmocka_unit_test(test_capabilities_choose_the_resizer),
        cmocka_unit_test(test_claims_and_volumes),
        cmocka_unit_test(test_informer_updates_that_need_a_sync),
        cmocka_unit_test(test_which_size_to_expand_to),
        cmocka_unit_test(test_expand_request),
        cmocka_unit_test(test_secrets),
        cmocka_unit_test(test_errors_final_and_infeasible),
        cmocka_unit_test(test_pods_that_use_claims),
        cmocka_unit_test(test_pod_slimmed_to_claim_names),
        cmocka_unit_test(test_inuse_decision),
        cmocka_unit_test(test_claim_patches),
        cmocka_unit_test(test_pv_patches),
        cmocka_unit_test(test_conditions),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
