/*
 * Unit tests for the snapshotter's pure core (snapshotter/plan.c), checked
 * against external-snapshotter v8 (pkg/sidecar-controller:
 * snapshot_controller.go, snapshot_controller_base.go, csi_handler.go;
 * pkg/utils/util.go). Every table row is one rule and names it; a failing
 * row prints its name.
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
#include "snapshotter/snapshotter.h"
#include "table.h"

#define NOW       ((time_t)1700000000)
#define NOW_NS    ((int64_t)1700000000123456789)
#define FIN       "`snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection`"
#define BEING_DEL "`snapshot.storage.kubernetes.io/volumesnapshot-being-deleted`:`yes`"
#define BEING_CRE "`snapshot.storage.kubernetes.io/volumesnapshot-being-created`:`yes`"
#define GROUP_ANN "`groupsnapshot.storage.k8s.io/volumeGroupSnapshotHandle`:`g-1`"
#define DELETING  "`deletionTimestamp`:`2023-11-14T22:13:20Z`,"

static const snap_config CFG = {.driver_name = "hostpath.csi.example.com",
                                .prefix = "snapshot",
                                .uuid_length = -1,
                                .list_snapshots = true};

/* A content: metadata extras MD (ending with ','), annotations ANN, spec
 * extras SPEC (ending with ','), source SRC, status ST ("" for none). */
static char *content(const char *md, const char *ann, const char *spec, const char *src,
                     const char *st)
{
    char *s = util_asprintf(
        "{`metadata`:{`name`:`c-1`,`resourceVersion`:`7`,%s`finalizers`:[" FIN
        "],`annotations`:{%s}},`spec`:{`driver`:`hostpath.csi.example.com`,%s`source`:%s,"
        "`volumeSnapshotRef`:{`name`:`vs-1`,`namespace`:`ns-1`,`uid`:`u-1`}}%s%s}",
        md, ann, spec, src, *st ? ",`status`:" : "", st);
    return s;
}

#define DYN "{`volumeHandle`:`vol-1`}"
#define PRE "{`snapshotHandle`:`snap-9`}"

/* ---- decode ---------------------------------------------------------------------------------- */

static void test_decode_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *json;
        int rc;
    } rows[] = {
        {"a dynamic content reads",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`d`,`source`:{`volumeHandle`:`v`}}}", 0},
        {"not an object is refused", "[1]", -EINVAL},
        {"no name is refused", "{`metadata`:{},`spec`:{`driver`:`d`}}", -EINVAL},
        {"a driver of the wrong type is refused (Go's decoder)",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:1}}", -EINVAL},
        {"readyToUse of the wrong type is refused",
         "{`metadata`:{`name`:`c`},`status`:{`readyToUse`:`yes`}}", -EINVAL},
        {"creationTime as text is refused",
         "{`metadata`:{`name`:`c`},`status`:{`creationTime`:`now`}}", -EINVAL},
        {"restoreSize as text is refused",
         "{`metadata`:{`name`:`c`},`status`:{`restoreSize`:`1Gi`}}", -EINVAL},
        {"an error time that is no RFC 3339 time is refused",
         "{`metadata`:{`name`:`c`},`status`:{`error`:{`time`:`x`}}}", -EINVAL},
        {"integers read", "{`metadata`:{`name`:`c`},`status`:{`creationTime`:1,`restoreSize`:2}}",
         0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].json);
        snap_content d;
        int rc = snap_content_decode(o, &d);
        if (rc != rows[i].rc)
            fail_msg("[%s] rc %d, want %d", rows[i].name, rc, rows[i].rc);
        json_object_put(o);
    }
}

static void test_decode_fields(void **state)
{
    (void)state;
    char *s = content(DELETING, BEING_DEL "," BEING_CRE "," GROUP_ANN,
                      "`deletionPolicy`:`Delete`,`volumeSnapshotClassName`:`cls`,", DYN,
                      "{`snapshotHandle`:`h`,`readyToUse`:true,`volumeGroupSnapshotHandle`:`g`,"
                      "`error`:{`message`:`m`}}");
    json_object *o = J(s);
    snap_content d;
    assert_int_equal(snap_content_decode(o, &d), 0);
    expect_str("fields", "name", d.name, "c-1");
    expect_str("fields", "policy", d.policy, "Delete");
    expect_str("fields", "class", d.class_name, "cls");
    expect_str("fields", "volume", d.volume_handle, "vol-1");
    expect_str("fields", "ref", d.ref_uid, "u-1");
    expect_str("fields", "status handle", d.status_handle, "h");
    expect_str("fields", "group handle", d.group_handle, "g");
    expect_str("fields", "error", d.error_message, "m");
    assert_true(d.deleting && d.has_finalizer && d.being_created && d.being_deleted &&
                d.group_member && d.has_status && d.ready);
    assert_null(d.snapshot_handle);
    json_object_put(o);
    free(s);
}

/* ---- ours ------------------------------------------------------------------------------------ */

static void test_is_ours_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *json, *cls;
        bool ours;
    } rows[] = {
        {"our driver with a volume source",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`hostpath.csi.example.com`,`source`:{`"
         "volumeHandle`:`v`}}}",
         NULL, true},
        {"our driver with a snapshot source",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`hostpath.csi.example.com`,`source`:{`"
         "snapshotHandle`:`s`}}}",
         NULL, true},
        {"no source: not ours",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`hostpath.csi.example.com`}}", NULL, false},
        {"another driver",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`other`,`source`:{`volumeHandle`:`v`}}}", NULL,
         false},
        {"a class of another driver",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`hostpath.csi.example.com`,`source`:{`"
         "volumeHandle`:`v`}}}",
         "{`driver`:`other`}", false},
        {"a class of ours",
         "{`metadata`:{`name`:`c`},`spec`:{`driver`:`hostpath.csi.example.com`,`source`:{`"
         "volumeHandle`:`v`}}}",
         "{`driver`:`hostpath.csi.example.com`}", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].json), *cls = rows[i].cls ? J(rows[i].cls) : NULL;
        snap_content d;
        assert_int_equal(snap_content_decode(o, &d), 0);
        if (snap_content_is_ours(&CFG, &d, cls) != rows[i].ours)
            fail_msg("[%s] ours %d", rows[i].name, !rows[i].ours);
        json_object_put(o);
        json_object_put(cls);
    }
}

/* ---- the decision ------------------------------------------------------------------------------
 */

static void test_plan_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *md, *ann, *spec, *src, *st;
        snap_step want;
    } rows[] = {
        {"dynamic without status: CreateSnapshot", "", "", "`deletionPolicy`:`Delete`,", DYN, "",
         SNAP_CREATE},
        {"dynamic not ready yet: CreateSnapshot again (upstream polls with it)", "", "",
         "`deletionPolicy`:`Delete`,", DYN, "{`snapshotHandle`:`h`,`readyToUse`:false}",
         SNAP_CREATE},
        {"dynamic ready: nothing", "", "", "`deletionPolicy`:`Delete`,", DYN,
         "{`snapshotHandle`:`h`,`readyToUse`:true}", SNAP_NONE},
        {"dynamic ready with the being-created annotation: drop it", "", BEING_CRE,
         "`deletionPolicy`:`Delete`,", DYN, "{`snapshotHandle`:`h`,`readyToUse`:true}",
         SNAP_DROP_CREATING},
        {"pre-provisioned without status: ListSnapshots", "", "", "`deletionPolicy`:`Retain`,", PRE,
         "", SNAP_CHECK},
        {"pre-provisioned not ready: ListSnapshots", "", "", "`deletionPolicy`:`Retain`,", PRE,
         "{`snapshotHandle`:`snap-9`,`readyToUse`:false}", SNAP_CHECK},
        {"being deleted, Delete, a handle: DeleteSnapshot", DELETING, BEING_DEL,
         "`deletionPolicy`:`Delete`,", DYN, "{`snapshotHandle`:`h`,`readyToUse`:true}",
         SNAP_DELETE},
        {"being deleted, Retain: only the finalizer", DELETING, BEING_DEL,
         "`deletionPolicy`:`Retain`,", DYN, "{`snapshotHandle`:`h`,`readyToUse`:true}",
         SNAP_REMOVE_FINALIZER},
        {"being deleted, Delete, no handle (never cut or cleared): only the finalizer", DELETING,
         BEING_DEL, "`deletionPolicy`:`Delete`,", DYN, "{`readyToUse`:false}",
         SNAP_REMOVE_FINALIZER},
        {"being deleted while being created: the creation goes on", DELETING,
         BEING_DEL "," BEING_CRE, "`deletionPolicy`:`Delete`,", DYN, "", SNAP_CREATE},
        {"deletionTimestamp without the being-deleted annotation: not yet", DELETING, "",
         "`deletionPolicy`:`Delete`,", DYN, "{`snapshotHandle`:`h`,`readyToUse`:true}", SNAP_NONE},
        {"a group snapshot member's handle: no DeleteSnapshot", DELETING, BEING_DEL,
         "`deletionPolicy`:`Delete`,", DYN,
         "{`snapshotHandle`:`h`,`readyToUse`:true,`volumeGroupSnapshotHandle`:`g`}",
         SNAP_REMOVE_FINALIZER},
        {"a group member without status: left to the group controller", "", GROUP_ANN,
         "`deletionPolicy`:`Delete`,", DYN, "", SNAP_NONE},
        {"a group member with handles, not ready: ListSnapshots", "", GROUP_ANN,
         "`deletionPolicy`:`Delete`,", DYN,
         "{`snapshotHandle`:`h`,`readyToUse`:false,`volumeGroupSnapshotHandle`:`g`}", SNAP_CHECK},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *s = content(rows[i].md, rows[i].ann, rows[i].spec, rows[i].src, rows[i].st);
        json_object *o = J(s);
        snap_content d;
        assert_int_equal(snap_content_decode(o, &d), 0);
        expect_str(rows[i].name, "step", snap_step_name(snap_plan(&d)),
                   snap_step_name(rows[i].want));
        json_object_put(o);
        free(s);
    }
}

static void test_plan_unbound_preprovisioned_goes(void **state)
{
    (void)state;
    /* upstream: a pre-provisioned content with no VolumeSnapshot UID is
     * deleted without waiting for the annotation */
    json_object *o = J("{`metadata`:{`name`:`c`," DELETING "`finalizers`:[" FIN
                       "]},`spec`:{`driver`:`d`,`deletionPolicy`:`Retain`,`source`:" PRE
                       ",`volumeSnapshotRef`:{`name`:`vs`,`namespace`:`ns`}}}");
    snap_content d;
    assert_int_equal(snap_content_decode(o, &d), 0);
    assert_int_equal(snap_plan(&d), SNAP_REMOVE_FINALIZER);
    json_object_put(o);
}

static void test_update_needs_sync_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *old, *obj;
        bool want;
    } rows[] = {
        {"a resync (same resourceVersion)",
         "{`metadata`:{`resourceVersion`:`1`},`spec`:{`driver`:`d`}}",
         "{`metadata`:{`resourceVersion`:`1`},`spec`:{`driver`:`d`}}", true},
        {"status only: no sync", "{`metadata`:{`resourceVersion`:`1`},`status`:{`x`:1}}",
         "{`metadata`:{`resourceVersion`:`2`},`status`:{`x`:2}}", false},
        {"readyToUse turned true", "{`metadata`:{`resourceVersion`:`1`},`status`:{}}",
         "{`metadata`:{`resourceVersion`:`2`},`status`:{`readyToUse`:true}}", true},
        {"finalizers only: no sync", "{`metadata`:{`resourceVersion`:`1`}}",
         "{`metadata`:{`resourceVersion`:`2`,`finalizers`:[`f`]}}", false},
        {"the being-created annotation only: no sync", "{`metadata`:{`resourceVersion`:`1`}}",
         "{`metadata`:{`resourceVersion`:`2`,`annotations`:{" BEING_CRE "}}}", false},
        {"the being-created annotation removed: no sync",
         "{`metadata`:{`resourceVersion`:`1`,`annotations`:{" BEING_CRE ",`a`:`b`}}}",
         "{`metadata`:{`resourceVersion`:`2`,`annotations`:{`a`:`b`}}}", false},
        {"the last annotation, being-created, removed and the map gone (the API server's "
         "answer): no sync",
         "{`metadata`:{`resourceVersion`:`1`,`annotations`:{" BEING_CRE "}}}",
         "{`metadata`:{`resourceVersion`:`2`}}", false},
        {"the last annotation, being-created, removed leaving an empty map: no sync",
         "{`metadata`:{`resourceVersion`:`1`,`annotations`:{" BEING_CRE "}}}",
         "{`metadata`:{`resourceVersion`:`2`,`annotations`:{}}}", false},
        {"being-created set on a content without annotations: no sync",
         "{`metadata`:{`resourceVersion`:`1`,`annotations`:{}}}",
         "{`metadata`:{`resourceVersion`:`2`,`annotations`:{" BEING_CRE "}}}", false},
        {"the being-created annotation removed from a content being deleted: sync (the "
         "deletion it held back goes on)",
         "{`metadata`:{`resourceVersion`:`1`," DELETING "`annotations`:{" BEING_CRE "," BEING_DEL
         "}}}",
         "{`metadata`:{`resourceVersion`:`2`," DELETING "`annotations`:{" BEING_DEL "}}}", true},
        {"the being-deleted annotation: sync", "{`metadata`:{`resourceVersion`:`1`}}",
         "{`metadata`:{`resourceVersion`:`2`,`annotations`:{" BEING_DEL "}}}", true},
        {"a deletionTimestamp: sync", "{`metadata`:{`resourceVersion`:`1`}}",
         "{`metadata`:{`resourceVersion`:`2`," DELETING "`x`:1}}", true},
        {"a label: sync", "{`metadata`:{`resourceVersion`:`1`}}",
         "{`metadata`:{`resourceVersion`:`2`,`labels`:{`a`:`b`}}}", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *a = J(rows[i].old), *b = J(rows[i].obj);
        if (snap_update_needs_sync(a, b) != rows[i].want)
            fail_msg("[%s] want %d", rows[i].name, rows[i].want);
        json_object_put(a);
        json_object_put(b);
    }
}

/* ---- CSI
 * ----------------------------------------------------------------------------------------- */

static void test_name_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *uid;
        int len;
        const char *want;
    } rows[] = {
        {"prefix-uid", "1b2c-3d4e", -1, "snapshot-1b2c-3d4e"},
        {"the UID without dashes, cut", "1b2c-3d4e", 6, "snapshot-1b2c3d"},
        {"a length beyond the UID is an error", "1b2c", 6, NULL},
        {"no UID is an error", "", -1, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        snap_config cfg = CFG;
        cfg.uuid_length = rows[i].len;
        char *got = NULL;
        int rc = snap_name(&cfg, rows[i].uid, &got);
        if ((rc == 0) != (rows[i].want != NULL))
            fail_msg("[%s] rc %d", rows[i].name, rc);
        expect_str(rows[i].name, "name", got, rows[i].want);
        free(got);
    }
}

static const char *param(const Csi__V1__CreateSnapshotRequest *req, const char *k)
{
    for (size_t i = 0; i < req->n_parameters; i++)
        if (strcmp(req->parameters[i]->key, k) == 0)
            return req->parameters[i]->value;
    return NULL;
}

static void test_create_request(void **state)
{
    (void)state;
    char *s = content("", "", "", DYN, "");
    json_object *o = J(s);
    json_object *cls = J("{`driver`:`d`,`parameters`:{`color`:`blue`,"
                         "`csi.storage.k8s.io/snapshotter-secret-name`:`s`,"
                         "`csi.storage.k8s.io/snapshotter-secret-namespace`:`n`,"
                         "`csi.storage.k8s.io/snapshotter-list-secret-name`:`s`,"
                         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`n`}}");
    Csi__V1__CreateSnapshotRequest *req = NULL;
    assert_int_equal(snap_create_request(&CFG, o, cls, &req), 0);
    expect_str("create", "name", req->name, "snapshot-u-1");
    expect_str("create", "source", req->source_volume_id, "vol-1");
    assert_int_equal(req->n_parameters, 1);
    expect_str("the secret keys are stripped", "color", param(req, "color"), "blue");
    snap_create_request_free(req);

    snap_config extra = CFG;
    extra.extra_create_metadata = true;
    assert_int_equal(snap_create_request(&extra, o, cls, &req), 0);
    assert_int_equal(req->n_parameters, 4);
    expect_str("extra metadata", "name", param(req, SNAP_PARAM_SNAPSHOT_NAME), "vs-1");
    expect_str("extra metadata", "ns", param(req, SNAP_PARAM_SNAPSHOT_NS), "ns-1");
    expect_str("extra metadata", "content", param(req, SNAP_PARAM_CONTENT_NAME), "c-1");
    snap_create_request_free(req);

    json_object *bare = J("{`driver`:`d`}");
    assert_int_equal(snap_create_request(&CFG, o, bare, &req), 0);
    assert_int_equal(req->n_parameters, 0); /* a class without parameters (a fuzz finding) */
    snap_create_request_free(req);
    json_object_put(bare);

    assert_int_equal(snap_create_request(&CFG, o, NULL, &req), -EINVAL);
    expect_str("no class", "error", util_err_last(),
               "failed to take snapshot c-1 without a snapshot class");
    json_object *bad = J("{`driver`:`d`,`parameters`:{`csi.storage.k8s.io/fstype`:`ext4`}}");
    assert_int_equal(snap_create_request(&CFG, o, bad, &req), -EINVAL);
    expect_str("unknown reserved key", "error", util_err_last(),
               "failed to remove CSI Parameters of prefixed keys: found unknown parameter key "
               "\"csi.storage.k8s.io/fstype\" with reserved namespace csi.storage.k8s.io/");
    assert_null(req);
    json_object_put(bad);
    json_object_put(o);
    free(s);

    o = J("{`metadata`:{`name`:`c-2`},`spec`:{`driver`:`d`,`source`:" DYN "}}");
    assert_int_equal(snap_create_request(&CFG, o, cls, &req), -EINVAL);
    expect_str("unbound", "error", util_err_last(),
               "cannot create snapshot. Snapshot content c-2 not bound to a snapshot");
    json_object_put(o);
    json_object_put(cls);
}

static void test_secret_ref_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *ann, *ns, *sname;
        int rc;
    } rows[] = {
        {"no annotations: no secret", "", NULL, NULL, 0},
        {"both annotations",
         "`snapshot.storage.kubernetes.io/deletion-secret-name`:`s`,"
         "`snapshot.storage.kubernetes.io/deletion-secret-namespace`:`n`",
         "n", "s", 0},
        {"only one of them: no secret (upstream needs both)",
         "`snapshot.storage.kubernetes.io/deletion-secret-name`:`s`", NULL, NULL, 0},
        {"an empty one: an error",
         "`snapshot.storage.kubernetes.io/deletion-secret-name`:``,"
         "`snapshot.storage.kubernetes.io/deletion-secret-namespace`:`n`",
         NULL, NULL, -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *s = content("", rows[i].ann, "", DYN, "");
        json_object *o = J(s);
        const char *ns, *name;
        int rc = snap_secret_ref(o, &ns, &name);
        if (rc != rows[i].rc)
            fail_msg("[%s] rc %d", rows[i].name, rc);
        expect_str(rows[i].name, "namespace", ns, rows[i].ns);
        expect_str(rows[i].name, "name", name, rows[i].sname);
        json_object_put(o);
        free(s);
    }
}

static void test_list_secret_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *params, *ns, *sname;
        int rc;
    } rows[] = {
        {"no keys: no secret", "{}", NULL, NULL, 0},
        {"plain names",
         "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`s`,"
         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`n`}",
         "n", "s", 0},
        {"the content's name expands",
         "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`s-${volumesnapshotcontent.name}`,"
         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`${volumesnapshotcontent.name}`}",
         "c-1", "s-c-1", 0},
        {"half a pair is an error", "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`s`}", NULL,
         NULL, -EINVAL},
        {"an unknown token is an error",
         "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`${volumesnapshot.name}`,"
         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`n`}",
         NULL, NULL, -EINVAL},
        {"a namespace that is no DNS label is an error",
         "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`s`,"
         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`a.b`}",
         NULL, NULL, -EINVAL},
        {"a name that is no DNS subdomain is an error",
         "{`csi.storage.k8s.io/snapshotter-list-secret-name`:`S_1`,"
         "`csi.storage.k8s.io/snapshotter-list-secret-namespace`:`n`}",
         NULL, NULL, -EINVAL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *c = util_asprintf("{`driver`:`d`,`parameters`:%s}", rows[i].params);
        json_object *cls = J(c);
        char *ns = NULL, *name = NULL;
        int rc = snap_list_secret_ref(cls, "c-1", &ns, &name);
        if (rc != rows[i].rc)
            fail_msg("[%s] rc %d (%s)", rows[i].name, rc, util_err_last());
        expect_str(rows[i].name, "namespace", ns, rows[i].ns);
        expect_str(rows[i].name, "name", name, rows[i].sname);
        free(ns);
        free(name);
        json_object_put(cls);
        free(c);
    }
}

static void test_set_secrets(void **state)
{
    (void)state;
    json_object *secret = J("{`data`:{`user`:`YWRtaW4=`}}");
    Csi__V1__DeleteSnapshotRequest req = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    assert_int_equal(snap_delete_set_secrets(&req, secret), 0);
    assert_int_equal(req.n_secrets, 1);
    expect_str("secrets", "user", req.secrets[0]->value, "admin");
    free(req.secrets[0]->key);
    free(req.secrets[0]->value);
    free(req.secrets[0]);
    free(req.secrets);
    json_object_put(secret);
    secret = J("{`data`:{`user`:`not base64!`}}");
    Csi__V1__ListSnapshotsRequest lr = CSI__V1__LIST_SNAPSHOTS_REQUEST__INIT;
    assert_int_equal(snap_list_set_secrets(&lr, secret), -EINVAL);
    free(lr.secrets);
    json_object_put(secret);
}

static void test_error_final_rows(void **state)
{
    (void)state;
    static const struct {
        int code;
        bool final;
    } rows[] = {
        {CSI_OK, false},          {CSI_CANCELLED, false},          {CSI_DEADLINE_EXCEEDED, false},
        {CSI_UNAVAILABLE, false}, {CSI_RESOURCE_EXHAUSTED, false}, {CSI_ABORTED, false},
        {CSI_NOT_FOUND, true},    {CSI_INVALID_ARGUMENT, true},    {CSI_ALREADY_EXISTS, true},
        {CSI_INTERNAL, true}};
    for (size_t i = 0; i < N_ROWS(rows); i++)
        if (snap_error_final(rows[i].code) != rows[i].final)
            fail_msg("code %d: final %d", rows[i].code, !rows[i].final);
}

/* ---- API writes
 * ------------------------------------------------------------------------------------ */

static void test_patch_status_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *st;
        snap_result r;
        const char *want;
    } rows[] = {
        {"no status: every field",
         "",
         {"h-1", true, 5, 1024, NULL},
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`snapshotHandle`:`h-1`,`readyToUse`:true,"
         "`creationTime`:5,`restoreSize`:1024}}"},
        {"no status, unknown time and size: now, no restoreSize",
         "",
         {"h-1", false, 0, 0, NULL},
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`snapshotHandle`:`h-1`,`readyToUse`:false,"
         "`creationTime`:1700000000123456789}}"},
        {"an error status: the rest is added, ready drops the error",
         "{`readyToUse`:false,`error`:{`message`:`m`}}",
         {"h-1", true, 5, 1024, NULL},
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`snapshotHandle`:`h-1`,`readyToUse`:true,"
         "`error`:null,`creationTime`:5,`restoreSize`:1024}}"},
        {"what is set stays: only readyToUse changes",
         "{`snapshotHandle`:`h-0`,`readyToUse`:false,`creationTime`:1,`restoreSize`:2}",
         {"h-1", true, 5, 1024, NULL},
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`readyToUse`:true}}"},
        {"nothing changes: no write",
         "{`snapshotHandle`:`h-0`,`readyToUse`:true,`creationTime`:1,`restoreSize`:2}",
         {"h-1", true, 5, 1024, NULL},
         NULL},
        {"a group handle is added once",
         "{`snapshotHandle`:`h-0`,`readyToUse`:true,`creationTime`:1}",
         {"h-0", true, 1, 0, "g-1"},
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`volumeGroupSnapshotHandle`:`g-1`}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *s = content("", "", "", DYN, rows[i].st);
        json_object *o = J(s);
        char *got = snap_patch_status(o, &rows[i].r, NOW_NS);
        expect_text(rows[i].name, "patch", got, rows[i].want);
        free(got);
        json_object_put(o);
        free(s);
    }
}

static void test_patch_error(void **state)
{
    (void)state;
    char *s = content("", "", "", DYN, "");
    json_object *o = J(s);
    char *got = snap_patch_error(o, "Failed to create snapshot: x", NOW);
    expect_text("error status", "patch", got,
                "{`metadata`:{`resourceVersion`:`7`},`status`:{`error`:{`message`:`Failed to "
                "create snapshot: x`,`time`:`2023-11-14T22:13:20Z`},`readyToUse`:false}}");
    free(got);
    json_object_put(o);
    free(s);
    s = content("", "", "", DYN, "{`error`:{`message`:`same`}}");
    o = J(s);
    assert_null(snap_patch_error(o, "same", NOW)); /* upstream: no write, no event */
    json_object_put(o);
    free(s);
    /* a driver's message that is not UTF-8: U+FFFD, as Go writes it (a fuzz finding) */
    s = content("", "", "", DYN, "");
    o = J(s);
    got = snap_patch_error(o, "bad \xff byte", NOW);
    expect_text(
        "not UTF-8", "patch", got,
        "{`metadata`:{`resourceVersion`:`7`},`status`:{`error`:{`message`:`bad \xef\xbf\xbd "
        "byte`,`time`:`2023-11-14T22:13:20Z`},`readyToUse`:false}}");
    free(got);
    json_object_put(o);
    free(s);
}

static void test_patch_texts(void **state)
{
    (void)state;
    char *s = content("", "", "", DYN, "{`snapshotHandle`:`h`}");
    json_object *o = J(s);
    char *got = snap_patch_clear_status(o);
    expect_text("clear", "patch", got,
                "{`metadata`:{`resourceVersion`:`7`},`status`:{`snapshotHandle`:null,"
                "`readyToUse`:null,`creationTime`:null,`restoreSize`:null}}");
    free(got);
    got = snap_patch_set_creating(o);
    expect_text(
        "set creating", "patch", got,
        "[{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`7`},{`op`:`add`,`path`:`/"
        "metadata/annotations/"
        "snapshot.storage.kubernetes.io~1volumesnapshot-being-created`,`value`:`yes`}]");
    free(got);
    got = snap_patch_drop_creating();
    expect_text("drop creating", "patch", got,
                "[{`op`:`remove`,`path`:`/metadata/annotations/"
                "snapshot.storage.kubernetes.io~1volumesnapshot-being-created`}]");
    free(got);
    json_object_put(o);
    free(s);
}

static void test_names(void **state)
{
    (void)state;
    char *n = snap_lock_name("hostpath.csi/example");
    expect_str("lock", "name", n, "external-snapshotter-leader-hostpath.csi-example");
    free(n);
    n = snap_component("d");
    expect_str("component", "name", n, "csi-snapshotter d");
    free(n);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_rows),
        cmocka_unit_test(test_decode_fields),
        cmocka_unit_test(test_is_ours_rows),
        cmocka_unit_test(test_plan_rows),
        cmocka_unit_test(test_plan_unbound_preprovisioned_goes),
        cmocka_unit_test(test_update_needs_sync_rows),
        cmocka_unit_test(test_name_rows),
        cmocka_unit_test(test_create_request),
        cmocka_unit_test(test_secret_ref_rows),
        cmocka_unit_test(test_list_secret_rows),
        cmocka_unit_test(test_set_secrets),
        cmocka_unit_test(test_error_final_rows),
        cmocka_unit_test(test_patch_status_rows),
        cmocka_unit_test(test_patch_error),
        cmocka_unit_test(test_patch_texts),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests_name("snap_plan", tests, NULL, NULL);
}
