/*
 * Unit tests for snapshot-controller-sim's pure core
 * (hack/snapshot-controller-sim/plan.c), checked against external-snapshotter
 * v8 (pkg/common-controller: snapshot_controller.go,
 * snapshot_controller_base.go; pkg/utils/util.go). Every table row is one
 * rule and names it; a failing row prints its name.
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
#include "snapshot-controller-sim/snapctl.h"
#include "table.h"

#define NOW ((time_t)1700000000) /* 2023-11-14T22:13:20Z */

#define F_SRC     "`snapshot.storage.kubernetes.io/volumesnapshot-as-source-protection`"
#define F_BOUND   "`snapshot.storage.kubernetes.io/volumesnapshot-bound-protection`"
#define F_PVC     "`snapshot.storage.kubernetes.io/pvc-as-source-protection`"
#define F_CONTENT "`snapshot.storage.kubernetes.io/volumesnapshotcontent-bound-protection`"
#define BEING_DEL "`snapshot.storage.kubernetes.io/volumesnapshot-being-deleted`:`yes`"
#define DELETING  ",`deletionTimestamp`:`2023-11-14T22:13:20Z`"
#define BOTH_FINS ",`finalizers`:[" F_SRC "," F_BOUND "]"
#define SRC_FIN   ",`finalizers`:[" F_SRC "]"

/* Snapshots vs-1 in ns-1, UID u-1, resourceVersion 5. */
#define VS(md, spec, st)                                                                           \
    "{`metadata`:{`name`:`vs-1`,`namespace`:`ns-1`,`uid`:`u-1`,`resourceVersion`:`5`" md           \
    "},`spec`:{" spec "}" st "}"
#define DYN      "`source`:{`persistentVolumeClaimName`:`data`}"
#define DYN_CLS  DYN ",`volumeSnapshotClassName`:`snaps`"
#define PRE      "`source`:{`volumeSnapshotContentName`:`pre-1`}"
#define BOUND_ST ",`status`:{`boundVolumeSnapshotContentName`:`snapcontent-u-1`,`readyToUse`:false}"
#define READY_ST ",`status`:{`boundVolumeSnapshotContentName`:`snapcontent-u-1`,`readyToUse`:true}"

#define PVC(md, st)                                                                                \
    "{`metadata`:{`name`:`data`,`namespace`:`ns-1`,`uid`:`p-1`,`resourceVersion`:`3`" md           \
    "},`spec`:{`volumeName`:`pv-1`},`status`:{`phase`:`" st "`}}"
#define PVC_BOUND     PVC("", "Bound")
#define PVC_BOUND_FIN PVC(",`finalizers`:[" F_PVC "]", "Bound")
#define PV                                                                                         \
    "{`metadata`:{`name`:`pv-1`},`spec`:{`csi`:{`driver`:`d.example.com`,`volumeHandle`:`vol-1`}," \
    "`claimRef`:{`name`:`data`,`namespace`:`ns-1`,`uid`:`p-1`},`volumeMode`:`Filesystem`}}"
#define CLASS(name, ann, extra)                                                                    \
    "{`metadata`:{`name`:`" name "`,`annotations`:{" ann "}},`driver`:`d.example.com`,"            \
    "`deletionPolicy`:`Delete`" extra "}"
#define DEFAULT_ANN "`snapshot.storage.kubernetes.io/is-default-class`:`true`"
#define SNAPS       CLASS("snaps", "", "")

/* Contents: name, metadata extras, spec source, policy, ref uid, status. */
#define CONTENT(name, md, src, policy, uid, st)                                                    \
    "{`metadata`:{`name`:`" name "`,`resourceVersion`:`9`" md                                      \
    "},`spec`:{`driver`:`d.example.com`,"                                                          \
    "`deletionPolicy`:`" policy "`,`source`:" src ",`volumeSnapshotRef`:{`name`:`vs-1`,"           \
    "`namespace`:`ns-1`" uid "}}" st "}"
#define DYN_SRC "{`volumeHandle`:`vol-1`}"
#define PRE_SRC "{`snapshotHandle`:`h-1`}"
#define UID1    ",`uid`:`u-1`"
#define C_DYN                                                                                      \
    CONTENT("snapcontent-u-1", ",`finalizers`:[" F_CONTENT "]", DYN_SRC, "Delete", UID1, "")
#define C_DYN_ST(st)                                                                               \
    CONTENT("snapcontent-u-1", ",`finalizers`:[" F_CONTENT "]", DYN_SRC, "Delete", UID1,           \
            ",`status`:" st)

static const snapctl_config CFG = {.prevent_volume_mode_conversion = true};

/* ---- reading
 * ------------------------------------------------------------------------------------- */

static void test_content_for_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *snapshot, *want;
    } rows[] = {
        {"a dynamic snapshot looks at snapcontent-<uid>", VS("", DYN, ""), "snapcontent-u-1"},
        {"a pre-provisioned one at its source", VS("", PRE, ""), "pre-1"},
        {"a ready bound one at the bound content",
         VS("", DYN, ",`status`:{`boundVolumeSnapshotContentName`:`other`,`readyToUse`:true}"),
         "other"},
        {"an unready bound dynamic one still at snapcontent-<uid>",
         VS("", DYN, ",`status`:{`boundVolumeSnapshotContentName`:`other`}"), "snapcontent-u-1"},
        {"being deleted: the bound content", VS(DELETING, PRE, READY_ST), "snapcontent-u-1"},
        {"being deleted, unbound, dynamic: snapcontent-<uid>", VS(DELETING, DYN, ""),
         "snapcontent-u-1"},
        {"being deleted, unbound, pre-provisioned: none", VS(DELETING, PRE, ""), NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *s = J(rows[i].snapshot);
        char *got = snapctl_content_for(s);
        expect_str(rows[i].name, NULL, got, rows[i].want);
        free(got);
        json_object_put(s);
    }
}

static void test_uses_and_restores_rows(void **state)
{
    (void)state;
    json_object *unready = J(VS("", DYN, BOUND_ST)), *ready = J(VS("", DYN, READY_ST));
    json_object *pre = J(VS("", PRE, ""));
    assert_true(snapctl_snapshot_uses_pvc(unready, "data"));
    assert_false(snapctl_snapshot_uses_pvc(unready, "other"));
    assert_false(snapctl_snapshot_uses_pvc(ready, "data"));
    assert_false(snapctl_snapshot_uses_pvc(pre, "data"));
    static const struct {
        const char *name, *pvc;
        bool restores;
    } rows[] = {
        {"a Pending claim from this snapshot",
         "{`metadata`:{`name`:`r`},`spec`:{`dataSource`:{`name`:`vs-1`,`kind`:`VolumeSnapshot`,"
         "`apiGroup`:`snapshot.storage.k8s.io`}},`status`:{`phase`:`Pending`}}",
         true},
        {"a Bound one no longer holds it",
         "{`metadata`:{`name`:`r`},`spec`:{`dataSource`:{`name`:`vs-1`,`kind`:`VolumeSnapshot`,"
         "`apiGroup`:`snapshot.storage.k8s.io`}},`status`:{`phase`:`Bound`}}",
         false},
        {"another snapshot's",
         "{`metadata`:{`name`:`r`},`spec`:{`dataSource`:{`name`:`vs-2`,`kind`:`VolumeSnapshot`,"
         "`apiGroup`:`snapshot.storage.k8s.io`}},`status`:{`phase`:`Pending`}}",
         false},
        {"a claim source of that name",
         "{`metadata`:{`name`:`r`},`spec`:{`dataSource`:{`name`:`vs-1`,`kind`:"
         "`PersistentVolumeClaim`}},`status`:{`phase`:`Pending`}}",
         false},
        {"no apiGroup (upstream would dereference nil): not a restore",
         "{`metadata`:{`name`:`r`},`spec`:{`dataSource`:{`name`:`vs-1`,`kind`:`VolumeSnapshot`}},"
         "`status`:{`phase`:`Pending`}}",
         false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *p = J(rows[i].pvc);
        expect_int(rows[i].name, NULL, snapctl_pvc_restores(p, unready), rows[i].restores);
        json_object_put(p);
    }
    json_object_put(unready);
    json_object_put(ready);
    json_object_put(pre);
}

static void test_secret_ref_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *cls;
        int rc;
        const char *ns, *sname, *err;
    } rows[] = {
        {"no secret keys: none", SNAPS, 0, NULL, NULL, NULL},
        {"both keys: the pair",
         CLASS("s", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`sec`,"
               "`csi.storage.k8s.io/snapshotter-secret-namespace`:`kube-system`}"),
         0, "kube-system", "sec", NULL},
        {"half a pair is upstream's error",
         CLASS("s", "", ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`sec`}"),
         -EINVAL, NULL, NULL,
         "failed to get name and namespace template from params: either name and namespace for "
         "Snapshotter secrets specified, Both must be specified"},
        {"an empty value is upstream's error",
         CLASS("s", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:``,"
               "`csi.storage.k8s.io/snapshotter-secret-namespace`:`ns`}"),
         -EINVAL, NULL, NULL,
         "failed to get name and namespace template from params: Snapshotter secrets specified "
         "in parameters but value of either namespace or name is empty"},
        {"a namespace that is no DNS label",
         CLASS("s", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`sec`,"
               "`csi.storage.k8s.io/snapshotter-secret-namespace`:`Bad_NS`}"),
         -EINVAL, NULL, NULL, "\"Bad_NS\" is not a valid namespace name"},
        {"a name that is no DNS subdomain",
         CLASS("s", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`-x`,"
               "`csi.storage.k8s.io/snapshotter-secret-namespace`:`ns`}"),
         -EINVAL, NULL, NULL, "\"-x\" is not a valid secret name"},
        {"a template is refused, saying so",
         CLASS("s", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`${volumesnapshot."
               "name}`,`csi.storage.k8s.io/snapshotter-secret-namespace`:`ns`}"),
         -EINVAL, NULL, NULL,
         "secret templates (ns, ${volumesnapshot.name}) are not expanded by "
         "snapshot-controller-sim"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *c = J(rows[i].cls);
        char *ns = NULL, *name = NULL;
        int rc = snapctl_secret_ref(c, &ns, &name);
        expect_int(rows[i].name, "rc", rc, rows[i].rc);
        expect_str(rows[i].name, "namespace", ns, rows[i].ns);
        expect_str(rows[i].name, "name", name, rows[i].sname);
        if (rows[i].err)
            expect_str(rows[i].name, "error", util_err_last(), rows[i].err);
        free(ns);
        free(name);
        json_object_put(c);
    }
}

/* ---- the snapshot's plan
 * ------------------------------------------------------------------------- */

typedef struct row {
    const char *name;
    const char *snapshot, *cls, *classes, *pvc, *pv, *content;
    bool content_deleted, others, restoring;
    snapctl_step step;
    const char *target, *text; /* text with ` for "; NULL: not checked */
    const char *reason, *message;
    bool last, fail;
} row;

static void run_rows(const row *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const row *r = &rows[i];
        json_object *s = J(r->snapshot), *cls = J(r->cls), *classes = J(r->classes);
        json_object *pvc = J(r->pvc), *pv = J(r->pv), *content = J(r->content);
        snapctl_in in = {.snapshot = s,
                         .cls = cls,
                         .classes = classes,
                         .pvc = pvc,
                         .pv = pv,
                         .content = content,
                         .content_deleted = r->content_deleted,
                         .pvc_used_by_others = r->others,
                         .restoring = r->restoring,
                         .now = NOW};
        snapctl_plan p;
        expect_int(r->name, "rc", snapctl_plan_snapshot(&CFG, &in, &p), 0);
        expect_str(r->name, "step", snapctl_step_name(p.step), snapctl_step_name(r->step));
        expect_str(r->name, "target", p.target, r->target);
        if (r->text)
            expect_text(r->name, "text", p.text, r->text);
        expect_str(r->name, "reason", p.event[0].reason, r->reason);
        if (r->message)
            expect_str(r->name, "message", p.event[0].message, r->message);
        expect_int(r->name, "last", p.last, r->last);
        expect_int(r->name, "fail", p.fail, r->fail);
        snapctl_plan_clear(&p);
        json_object *all[] = {s, cls, classes, pvc, pv, content};
        for (size_t k = 0; k < 6; k++)
            json_object_put(all[k]);
    }
}

static void test_class_rows(void **state)
{
    (void)state;
    static const row rows[] = {
        {"no class named: the driver's default class is set on the snapshot", VS("", DYN, ""), NULL,
         "[" CLASS("snaps", DEFAULT_ANN, "") "," CLASS("plain", "", "") "]", PVC_BOUND, PV, NULL,
         false, false, false, SNAPCTL_SET_CLASS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`spec`:{`volumeSnapshotClassName`:`snaps`}}", NULL,
         NULL, false, false},
        {"another driver's default class does not count", VS("", DYN, ""), NULL,
         "[{`metadata`:{`name`:`o`,`annotations`:{" DEFAULT_ANN "}},`driver`:`other`}]", PVC_BOUND,
         PV, NULL, false, false, false, SNAPCTL_SET_ERROR, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`error`:{`time`:`2023-11-14T22:13:20Z`,"
         "`message`:`Failed to set default snapshot class with error cannot find default "
         "snapshot class`}}}",
         "SetDefaultSnapshotClassFailed", NULL, true, true},
        {"two default classes are an error", VS("", DYN, ""), NULL,
         "[" CLASS("a", DEFAULT_ANN, "") "," CLASS("b", DEFAULT_ANN, "") "]", PVC_BOUND, PV, NULL,
         false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SetDefaultSnapshotClassFailed",
         "Failed to set default snapshot class with error 2 default snapshot classes were found",
         true, true},
        {"the claim not Bound yet: no default class either", VS("", DYN, ""), NULL,
         "[" CLASS("snaps", DEFAULT_ANN, "") "]", PVC("", "Pending"), NULL, NULL, false, false,
         false, SNAPCTL_SET_ERROR, NULL, NULL, "SetDefaultSnapshotClassFailed",
         "Failed to set default snapshot class with error the PVC data is not yet bound to a PV, "
         "will not attempt to take a snapshot",
         true, true},
        {"the claim missing: the lister's error quoted", VS("", DYN, ""), NULL, "[]", NULL, NULL,
         NULL, false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SetDefaultSnapshotClassFailed",
         "Failed to set default snapshot class with error failed to retrieve PVC data from the "
         "lister: \"persistentvolumeclaim \\\"data\\\" not found\"",
         true, true},
        {"a volume not bound back to the claim", VS("", DYN, ""), NULL,
         "[" CLASS("snaps", DEFAULT_ANN, "") "]", PVC_BOUND,
         "{`metadata`:{`name`:`pv-1`},`spec`:{`csi`:{`driver`:`d.example.com`},`claimRef`:{`name`:"
         "`other`,`namespace`:`ns-1`}}}",
         NULL, false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SetDefaultSnapshotClassFailed",
         "Failed to set default snapshot class with error claim in dataSource not bound or invalid",
         true, true},
        {"a volume that is not CSI", VS("", DYN, ""), NULL, "[" CLASS("snaps", DEFAULT_ANN, "") "]",
         PVC_BOUND,
         "{`metadata`:{`name`:`pv-1`},`spec`:{`claimRef`:{`name`:`data`,`namespace`:`ns-1`}}}",
         NULL, false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SetDefaultSnapshotClassFailed",
         "Failed to set default snapshot class with error snapshotting non-CSI volumes is not "
         "supported, snapshot:ns-1/vs-1",
         true, true},
        {"a named class that does not exist: status.error, readyToUse untouched",
         VS("", DYN_CLS, ""), NULL, NULL, PVC_BOUND, PV, NULL, false, false, false,
         SNAPCTL_SET_ERROR, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`error`:{`time`:`2023-11-14T22:13:20Z`,"
         "`message`:`Failed to get snapshot class with error "
         "volumesnapshotclass.snapshot.storage.k8s.io \\`snaps\\` not found`}}}",
         "GetSnapshotClassFailed", NULL, true, true},
        {"the same error already recorded: no write, no event, retried",
         VS("", DYN_CLS,
            ",`status`:{`error`:{`message`:`Failed to get snapshot class with error "
            "volumesnapshotclass.snapshot.storage.k8s.io \\`snaps\\` not found`}}"),
         NULL, NULL, PVC_BOUND, PV, NULL, false, false, false, SNAPCTL_FAIL, NULL, NULL, NULL, NULL,
         true, true},
        {"a pre-provisioned snapshot needs no class", VS(SRC_FIN, PRE, ""), NULL, "[]", NULL, NULL,
         CONTENT("pre-1", "", PRE_SRC, "Retain", "", ""), false, false, false, SNAPCTL_BIND_CONTENT,
         "pre-1", NULL, NULL, NULL, false, false},
    };
    run_rows(rows, N_ROWS(rows));
}

static void test_dynamic_rows(void **state)
{
    (void)state;
    static const row rows[] = {
        {"first the as-source finalizer on the snapshot", VS("", DYN_CLS, ""), SNAPS, NULL,
         PVC_BOUND, PV, NULL, false, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[" F_SRC "]}}", NULL, NULL, false, false},
        {"other finalizers are kept", VS(",`finalizers`:[`x`]", DYN_CLS, ""), SNAPS, NULL,
         PVC_BOUND, PV, NULL, false, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[`x`," F_SRC "]}}", NULL, NULL, false,
         false},
        {"then pvc-as-source-protection on the claim", VS(SRC_FIN, DYN_CLS, ""), SNAPS, NULL,
         PVC_BOUND, PV, NULL, false, false, false, SNAPCTL_SET_PVC_FINALIZERS, "data",
         "{`metadata`:{`resourceVersion`:`3`,`finalizers`:[" F_PVC "]}}", NULL, NULL, false, false},
        {"a claim being deleted gets no finalizer: the content is not made",
         VS(SRC_FIN, DYN_CLS, ""), SNAPS, NULL, PVC(DELETING, "Bound"), PV, NULL, false, false,
         false, SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentCreationFailed",
         "Failed to create snapshot content with error snapshot controller failed to update data "
         "on API server: cannot add finalizer on claim because it is being deleted",
         true, true},
        {"then the content snapcontent-<uid>, with a CreatingSnapshot event",
         VS(SRC_FIN, DYN_CLS, ""), SNAPS, NULL, PVC_BOUND_FIN, PV, NULL, false, false, false,
         SNAPCTL_CREATE_CONTENT, "snapcontent-u-1",
         "{`apiVersion`:`snapshot.storage.k8s.io/v1`,`kind`:`VolumeSnapshotContent`,`metadata`:{"
         "`name`:`snapcontent-u-1`},`spec`:{`volumeSnapshotRef`:{`kind`:`VolumeSnapshot`,"
         "`namespace`:`ns-1`,`name`:`vs-1`,`uid`:`u-1`,`apiVersion`:`snapshot.storage.k8s.io/v1`,"
         "`resourceVersion`:`5`},`source`:{`volumeHandle`:`vol-1`},`volumeSnapshotClassName`:"
         "`snaps`,`deletionPolicy`:`Delete`,`driver`:`d.example.com`,`sourceVolumeMode`:"
         "`Filesystem`}}",
         "CreatingSnapshot", "Waiting for a snapshot ns-1/vs-1 to be created by the CSI driver.",
         false, false},
        {"the class's snapshotter secret becomes the deletion-secret annotations",
         VS(SRC_FIN, DYN_CLS, ""),
         CLASS("snaps", "",
               ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`sec`,"
               "`csi.storage.k8s.io/snapshotter-secret-namespace`:`kube-system`}"),
         NULL, PVC_BOUND_FIN, PV, NULL, false, false, false, SNAPCTL_CREATE_CONTENT,
         "snapcontent-u-1",
         "{`apiVersion`:`snapshot.storage.k8s.io/v1`,`kind`:`VolumeSnapshotContent`,`metadata`:{"
         "`name`:`snapcontent-u-1`,`annotations`:{`snapshot.storage.kubernetes.io/"
         "deletion-secret-name`:`sec`,`snapshot.storage.kubernetes.io/"
         "deletion-secret-namespace`:`kube-system`}},`spec`:{`volumeSnapshotRef`:{`kind`:"
         "`VolumeSnapshot`,`namespace`:`ns-1`,`name`:`vs-1`,`uid`:`u-1`,`apiVersion`:"
         "`snapshot.storage.k8s.io/v1`,`resourceVersion`:`5`},`source`:{`volumeHandle`:`vol-1`},"
         "`volumeSnapshotClassName`:`snaps`,`deletionPolicy`:`Delete`,`driver`:`d.example.com`,"
         "`sourceVolumeMode`:`Filesystem`}}",
         "CreatingSnapshot", NULL, false, false},
        {"a broken secret pair: the content is not made, upstream's words",
         VS(SRC_FIN, DYN_CLS, ""),
         CLASS("snaps", "", ",`parameters`:{`csi.storage.k8s.io/snapshotter-secret-name`:`sec`}"),
         NULL, PVC_BOUND_FIN, PV, NULL, false, false, false, SNAPCTL_SET_ERROR, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`error`:{`time`:`2023-11-14T22:13:20Z`,"
         "`message`:`Failed to create snapshot content with error failed to get input parameters "
         "to create snapshot vs-1: \\`failed to get name and namespace template from params: "
         "either name and namespace for Snapshotter secrets specified, Both must be "
         "specified\\``},`readyToUse`:false}}",
         "SnapshotContentCreationFailed", NULL, true, true},
        {"the content made: its name bound in the status, not ready", VS(SRC_FIN, DYN_CLS, ""),
         SNAPS, NULL, PVC_BOUND_FIN, PV, C_DYN, false, false, false, SNAPCTL_SET_STATUS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`boundVolumeSnapshotContentName`:"
         "`snapcontent-u-1`,`readyToUse`:false}}",
         NULL, NULL, false, false},
        {"the content cut and ready: time, size and readiness copied, two events",
         VS(BOTH_FINS, DYN_CLS, BOUND_ST), SNAPS, NULL, PVC_BOUND_FIN, PV,
         C_DYN_ST("{`snapshotHandle`:`h`,`readyToUse`:true,`creationTime`:1700000000123456789,"
                  "`restoreSize`:1073741824}"),
         false, false, false, SNAPCTL_SET_STATUS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`creationTime`:`2023-11-14T22:13:20Z`,"
         "`readyToUse`:true,`restoreSize`:`1Gi`}}",
         "SnapshotCreated", "Snapshot ns-1/vs-1 was successfully created by the CSI driver.", false,
         false},
        {"the content's error is copied", VS(BOTH_FINS, DYN_CLS, BOUND_ST), SNAPS, NULL,
         PVC_BOUND_FIN, PV,
         C_DYN_ST("{`readyToUse`:false,`error`:{`time`:`2023-11-14T22:00:00Z`,`message`:`boom`}}"),
         false, false, false, SNAPCTL_SET_STATUS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`error`:{`time`:`2023-11-14T22:00:00Z`,"
         "`message`:`boom`}}}",
         NULL, NULL, false, false},
        {"nothing new in the content: no write", VS(BOTH_FINS, DYN_CLS, BOUND_ST), SNAPS, NULL,
         PVC_BOUND_FIN, PV, C_DYN_ST("{`readyToUse`:false}"), false, false, false, SNAPCTL_NONE,
         NULL, NULL, NULL, NULL, true, false},
        {"a restoreSize of 0 is replaced by a real one",
         VS(BOTH_FINS, DYN_CLS,
            ",`status`:{`boundVolumeSnapshotContentName`:`snapcontent-u-1`,`readyToUse`:false,"
            "`restoreSize`:`0`}"),
         SNAPS, NULL, PVC_BOUND_FIN, PV, C_DYN_ST("{`readyToUse`:false,`restoreSize`:2048}"), false,
         false, false, SNAPCTL_SET_STATUS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`restoreSize`:`2Ki`}}", NULL, NULL, false,
         false},
        {"bound with a Delete content: the bound finalizer too", VS(SRC_FIN, DYN_CLS, BOUND_ST),
         SNAPS, NULL, PVC_BOUND_FIN, PV, C_DYN, false, false, false,
         SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[" F_SRC "," F_BOUND "]}}", NULL, NULL,
         false, false},
        {"bound with a Retain content: no bound finalizer", VS(SRC_FIN, DYN_CLS, READY_ST), SNAPS,
         NULL, PVC_BOUND, PV, CONTENT("snapcontent-u-1", "", DYN_SRC, "Retain", UID1, ""), false,
         false, false, SNAPCTL_NONE, NULL, NULL, NULL, NULL, true, false},
        {"ready: the claim's finalizer is released", VS(BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL,
         PVC_BOUND_FIN, PV, C_DYN, false, false, false, SNAPCTL_SET_PVC_FINALIZERS, "data",
         "{`metadata`:{`resourceVersion`:`3`,`finalizers`:[]}}", NULL, NULL, false, false},
        {"not while another snapshot of the claim is being cut", VS(BOTH_FINS, DYN_CLS, READY_ST),
         SNAPS, NULL, PVC_BOUND_FIN, PV, C_DYN, false, true, false, SNAPCTL_NONE, NULL, NULL, NULL,
         NULL, true, false},
        {"ready and bound: nothing to do", VS(BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND,
         PV, C_DYN, false, false, false, SNAPCTL_NONE, NULL, NULL, NULL, NULL, true, false},
        {"ready but its content gone: SnapshotContentMissing, not retried",
         VS(BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV, NULL, false, false, false,
         SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMissing",
         "VolumeSnapshotContent is missing", true, false},
        {"a content with a snapshotHandle at the dynamic name: mismatch", VS(SRC_FIN, DYN_CLS, ""),
         SNAPS, NULL, PVC_BOUND_FIN, PV,
         CONTENT("snapcontent-u-1", "", PRE_SRC, "Delete", UID1, ""), false, false, false,
         SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMismatch",
         "VolumeSnapshotContent snapcontent-u-1 is pre-provisioned while expecting a dynamically "
         "provisioned one",
         true, true},
        {"a content of another snapshot UID: misbound", VS(SRC_FIN, DYN_CLS, ""), SNAPS, NULL,
         PVC_BOUND_FIN, PV, CONTENT("snapcontent-u-1", "", DYN_SRC, "Delete", ",`uid`:`u-9`", ""),
         false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMisbound",
         "VolumeSnapshotContent [snapcontent-u-1] is bound to a different snapshot", true, true},
        {"both sources: a validation error",
         VS("",
            "`source`:{`persistentVolumeClaimName`:`data`,`volumeSnapshotContentName`:`c`},"
            "`volumeSnapshotClassName`:`snaps`",
            ""),
         SNAPS, NULL, PVC_BOUND, PV, NULL, false, false, false, SNAPCTL_SET_ERROR, NULL, NULL,
         "SnapshotValidationError",
         "Exactly one of PersistentVolumeClaimName and VolumeSnapshotContentName should be "
         "specified",
         true, true},
    };
    run_rows(rows, N_ROWS(rows));
}

static void test_preprovisioned_rows(void **state)
{
    (void)state;
    static const row rows[] = {
        {"the content missing: SnapshotContentMissing", VS(SRC_FIN, PRE, ""), NULL, NULL, NULL,
         NULL, NULL, false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMissing",
         "VolumeSnapshotContent is missing", true, true},
        {"a content naming it without a UID is bound: the UID", VS(SRC_FIN, PRE, ""), NULL, NULL,
         NULL, NULL, CONTENT("pre-1", "", PRE_SRC, "Retain", "", ""), false, false, false,
         SNAPCTL_BIND_CONTENT, "pre-1",
         "{`metadata`:{`resourceVersion`:`9`},`spec`:{`volumeSnapshotRef`:{`uid`:`u-1`}}}", NULL,
         NULL, false, false},
        {"and the snapshot's class when it names one",
         VS(SRC_FIN, PRE ",`volumeSnapshotClassName`:`snaps`", ""), SNAPS, NULL, NULL, NULL,
         CONTENT("pre-1", "", PRE_SRC, "Retain", "", ""), false, false, false, SNAPCTL_BIND_CONTENT,
         "pre-1",
         "{`metadata`:{`resourceVersion`:`9`},`spec`:{`volumeSnapshotRef`:{`uid`:`u-1`},"
         "`volumeSnapshotClassName`:`snaps`}}",
         NULL, NULL, false, false},
        {"bound: the status follows", VS(SRC_FIN, PRE, ""), NULL, NULL, NULL, NULL,
         CONTENT("pre-1", "", PRE_SRC, "Retain", UID1,
                 ",`status`:{`readyToUse`:true,`restoreSize`:1024}"),
         false, false, false, SNAPCTL_SET_STATUS, NULL,
         "{`metadata`:{`resourceVersion`:`5`},`status`:{`boundVolumeSnapshotContentName`:`pre-1`,"
         "`readyToUse`:true,`restoreSize`:`1Ki`}}",
         "SnapshotReady", "Snapshot ns-1/vs-1 is ready to use.", false, false},
        {"a content naming another snapshot: misbound", VS(SRC_FIN, PRE, ""), NULL, NULL, NULL,
         NULL,
         "{`metadata`:{`name`:`pre-1`,`resourceVersion`:`9`},`spec`:{`source`:" PRE_SRC
         ",`volumeSnapshotRef`:{`name`:`vs-2`,`namespace`:`ns-1`}}}",
         false, false, false, SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMisbound",
         "VolumeSnapshotContent [pre-1] is bound to a different snapshot", true, true},
        {"a dynamic content named as the source: mismatch", VS(SRC_FIN, PRE, ""), NULL, NULL, NULL,
         NULL, CONTENT("pre-1", "", DYN_SRC, "Retain", "", ""), false, false, false,
         SNAPCTL_SET_ERROR, NULL, NULL, "SnapshotContentMismatch",
         "VolumeSnapshotContent is dynamically provisioned while expecting a pre-provisioned one",
         true, true},
    };
    run_rows(rows, N_ROWS(rows));
}

static void test_deletion_rows(void **state)
{
    (void)state;
    static const row rows[] = {
        {"first the content is marked volumesnapshot-being-deleted",
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV, C_DYN, false, false,
         false, SNAPCTL_MARK_CONTENT, "snapcontent-u-1",
         "{`metadata`:{`annotations`:{" BEING_DEL "}}}", NULL, NULL, false, false},
        {"then, with Delete, the content is deleted", VS(DELETING BOTH_FINS, DYN_CLS, READY_ST),
         SNAPS, NULL, PVC_BOUND, PV,
         CONTENT("snapcontent-u-1", ",`annotations`:{" BEING_DEL "}", DYN_SRC, "Delete", UID1, ""),
         false, false, false, SNAPCTL_DELETE_CONTENT, "snapcontent-u-1", NULL, NULL, NULL, false,
         false},
        {"then as-source goes, bound stays while the content does",
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV,
         CONTENT("snapcontent-u-1", ",`annotations`:{" BEING_DEL "}", DYN_SRC, "Delete", UID1, ""),
         true, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[" F_BOUND "]}}", NULL, NULL, true,
         false},
        {"the content gone: the bound finalizer goes too",
         VS(DELETING ",`finalizers`:[" F_BOUND "]", DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV,
         NULL, false, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[]}}", NULL, NULL, true, false},
        {"Retain: marked, not deleted, both finalizers go",
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV,
         CONTENT("snapcontent-u-1", ",`annotations`:{" BEING_DEL "}", DYN_SRC, "Retain", UID1, ""),
         false, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[]}}", NULL, NULL, true, false},
        {"a Pending claim restoring from it holds the deletion back",
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV, C_DYN, false, false,
         true, SNAPCTL_FAIL, NULL, NULL, "SnapshotDeletePending",
         "Snapshot is being used to restore a PVC", true, true},
        {"without our finalizers there is nothing to do",
         VS(DELETING ",`finalizers`:[`x`]", DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV, C_DYN,
         false, false, false, SNAPCTL_NONE, NULL, NULL, NULL, NULL, true, false},
        {"a content of another incarnation is not touched",
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPS, NULL, PVC_BOUND, PV,
         CONTENT("snapcontent-u-1", "", DYN_SRC, "Delete", ",`uid`:`u-9`", ""), false, false, false,
         SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[]}}", NULL, NULL, true, false},
        {"the claim's finalizer is released before the snapshot's (deleted while being cut)",
         VS(DELETING SRC_FIN, DYN_CLS, ""), SNAPS, NULL, PVC_BOUND_FIN, PV, NULL, false, false,
         false, SNAPCTL_SET_PVC_FINALIZERS, "data",
         "{`metadata`:{`resourceVersion`:`3`,`finalizers`:[]}}", NULL, NULL, false, false},
        {"a missing class does not hold a deletion up (its error is recorded once)",
         VS(DELETING SRC_FIN, DYN_CLS,
            ",`status`:{`error`:{`message`:`Failed to get snapshot class with error "
            "volumesnapshotclass.snapshot.storage.k8s.io \\`snaps\\` not found`}}"),
         NULL, NULL, NULL, NULL, NULL, false, false, false, SNAPCTL_SET_SNAPSHOT_FINALIZERS, NULL,
         "{`metadata`:{`resourceVersion`:`5`,`finalizers`:[]}}", NULL, NULL, true, false},
    };
    run_rows(rows, N_ROWS(rows));
}

static void test_malformed_snapshot_is_refused(void **state)
{
    (void)state;
    json_object *s = J("{`metadata`:{`name`:`vs-1`,`namespace`:`ns-1`}}");
    snapctl_in in = {.snapshot = s, .now = NOW};
    snapctl_plan p;
    assert_int_equal(snapctl_plan_snapshot(&CFG, &in, &p), -EINVAL);
    snapctl_plan_clear(&p);
    json_object_put(s);
}

/* ---- the content's plan -------------------------------------------------------------------------
 */

static void test_content_rows(void **state)
{
    (void)state;
    static const struct {
        const char *name, *content, *snapshot;
        snapctl_step step;
        bool enqueue;
        const char *reason;
    } rows[] = {
        {"both handles: ContentValidationError",
         CONTENT("c", "", "{`volumeHandle`:`v`,`snapshotHandle`:`h`}", "Delete", UID1, ""), NULL,
         SNAPCTL_FAIL, false, "ContentValidationError"},
        {"no snapshot UID yet: left alone", CONTENT("c", "", PRE_SRC, "Retain", "", ""), NULL,
         SNAPCTL_NONE, false, NULL},
        {"bound: the content finalizer is the controller's to add",
         CONTENT("c", "", DYN_SRC, "Delete", UID1, ""), NULL, SNAPCTL_ADD_CONTENT_FINALIZER, false,
         NULL},
        {"being deleted: no finalizer added", CONTENT("c", DELETING, DYN_SRC, "Delete", UID1, ""),
         NULL, SNAPCTL_NONE, false, NULL},
        {"a status the snapshot lacks queues the snapshot", C_DYN_ST("{`readyToUse`:true}"),
         VS(SRC_FIN, DYN_CLS, BOUND_ST), SNAPCTL_NONE, true, NULL},
        {"an up-to-date snapshot is not queued", C_DYN_ST("{`readyToUse`:true}"),
         VS(SRC_FIN, DYN_CLS, READY_ST), SNAPCTL_NONE, false, NULL},
        {"a snapshot of another UID is not ours", C_DYN_ST("{`readyToUse`:true}"),
         "{`metadata`:{`name`:`vs-1`,`namespace`:`ns-1`,`uid`:`u-2`},`spec`:{}}", SNAPCTL_NONE,
         false, NULL},
        {"its snapshot being deleted: the content is marked", C_DYN,
         VS(DELETING BOTH_FINS, DYN_CLS, READY_ST), SNAPCTL_MARK_CONTENT, false, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *c = J(rows[i].content), *s = J(rows[i].snapshot);
        snapctl_plan p;
        expect_int(rows[i].name, "rc", snapctl_plan_content(c, s, &p), 0);
        expect_str(rows[i].name, "step", snapctl_step_name(p.step),
                   snapctl_step_name(rows[i].step));
        expect_int(rows[i].name, "enqueue", p.enqueue_snapshot, rows[i].enqueue);
        expect_str(rows[i].name, "reason", p.event[0].reason, rows[i].reason);
        if (p.step == SNAPCTL_ADD_CONTENT_FINALIZER &&
            !strstr(p.text, "volumesnapshotcontent-bound"))
            fail_msg("[%s] patch %s", rows[i].name, p.text);
        snapctl_plan_clear(&p);
        json_object_put(c);
        json_object_put(s);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_content_for_rows),
        cmocka_unit_test(test_uses_and_restores_rows),
        cmocka_unit_test(test_secret_ref_rows),
        cmocka_unit_test(test_class_rows),
        cmocka_unit_test(test_dynamic_rows),
        cmocka_unit_test(test_preprovisioned_rows),
        cmocka_unit_test(test_deletion_rows),
        cmocka_unit_test(test_malformed_snapshot_is_refused),
        cmocka_unit_test(test_content_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
