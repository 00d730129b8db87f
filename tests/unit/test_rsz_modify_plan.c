/*
 * Unit tests for the resizer's VolumeAttributesClass modify core
 * (resizer/modify_plan.c), checked against external-resizer v2
 * (pkg/modifycontroller: controller.go, modify_volume.go, modify_status.go;
 * pkg/modifier/csi_modifier.go; pkg/util MergePVCConditions). Every table
 * row is one rule and names it.
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

/* A bound claim: spec extra SPEC (",`volumeAttributesClassName`:..." or ""),
 * status extra ST. */
#define PVC(spec, st)                                                                              \
    "{`metadata`:{`name`:`c`,`namespace`:`ns`,`uid`:`u1`,`resourceVersion`:`7`},"                  \
    "`spec`:{`volumeName`:`pv-1`" spec "},`status`:{`phase`:`Bound`" st "}}"
#define VAC(n) ",`volumeAttributesClassName`:`" n "`"
#define CUR(n) ",`currentVolumeAttributesClassName`:`" n "`"
#define MVS(s, t)                                                                                  \
    ",`modifyVolumeStatus`:{`status`:`" s "`,`targetVolumeAttributesClassName`:`" t "`}"
#define CONDS(...)   ",`conditions`:[" __VA_ARGS__ "]"
#define OLDC(t)      "{`type`:`" t "`,`status`:`True`,`lastTransitionTime`:`2020-01-01T00:00:00Z`}"
#define RESIZING     OLDC("Resizing")
#define MODIFYING    OLDC("ModifyingVolume")
#define MODIFY_ERROR OLDC("ModifyVolumeError")

static void test_which_claims_to_sync(void **state)
{
    (void)state;
    static const struct {
        const char *row, *old, *obj;
        bool sync;
    } rows[] = {
        {"the class changed on a bound claim", PVC(VAC("a"), CUR("a")), PVC(VAC("b"), CUR("a")),
         true},
        {"no modify recorded: a status write or resync is looked at", PVC(VAC("a"), ""),
         PVC(VAC("a"), CUR("a")), true},
        {"same class and a modify recorded: nothing new", PVC(VAC("b"), MVS("InProgress", "b")),
         PVC(VAC("b"), MVS("Infeasible", "b")), false},
        {"a claim that is not Bound is not modified", "{`metadata`:{`name`:`c`},`spec`:{}}",
         "{`metadata`:{`name`:`c`},`spec`:"
         "{"
         "`volumeAttributesClassName`:`b`},`status`:{`phase`:`Pending`}}",
         false},
        {"the class cleared", PVC(VAC("a"), MVS("Pending", "a")), PVC("", MVS("Pending", "a")),
         true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *old = J(rows[i].old), *obj = J(rows[i].obj);
        expect_int(rows[i].row, "sync", rsz_modify_update_needs_sync(old, obj), rows[i].sync);
        json_object_put(old);
        json_object_put(obj);
    }
}

static void test_what_a_sync_does(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pvc;
        bool uncertain, slow;
        rsz_mod_step step;
        const char *target;
        bool forget, mark;
    } rows[] = {
        {"no class and no status: nothing", PVC("", ""), false, false, RSZ_MOD_NONE, NULL, true,
         false},
        {"class already current: nothing", PVC(VAC("a"), CUR("a")), false, false, RSZ_MOD_NONE,
         NULL, true, false},
        {"a new class: start, target the spec's", PVC(VAC("b"), CUR("a")), false, false,
         RSZ_MOD_START, "b", true, false},
        {"a first class (nothing current): start", PVC(VAC("b"), ""), false, false, RSZ_MOD_START,
         "b", true, false},
        {"InProgress after a final error: the spec's class again",
         PVC(VAC("b"), MVS("InProgress", "b")), false, false, RSZ_MOD_START, "b", false, false},
        {"InProgress and uncertain: the recorded target, even when the spec moved on",
         PVC(VAC("c"), MVS("InProgress", "b")), true, false, RSZ_MOD_CONTINUE, "b", true, false},
        {"uncertain but not InProgress (edited by hand): the spec's class",
         PVC(VAC("c"), MVS("Infeasible", "b")), true, false, RSZ_MOD_START, "c", true, false},
        {"Infeasible with the same target, in the slow set: wait",
         PVC(VAC("b"), MVS("Infeasible", "b")), false, true, RSZ_MOD_DELAY, NULL, false, true},
        {"Infeasible with the same target, slow period over: try again (and mark)",
         PVC(VAC("b"), MVS("Infeasible", "b")), false, false, RSZ_MOD_START, "b", false, true},
        {"Infeasible, then a new class: no delay, forgotten by the slow set",
         PVC(VAC("c"), MVS("Infeasible", "b")), false, true, RSZ_MOD_START, "c", true, false},
        {"Pending (class missing before): start again", PVC(VAC("b"), MVS("Pending", "")), false,
         false, RSZ_MOD_START, "b", true, false},
        {"class cleared while InProgress: finish the recorded target",
         PVC("", MVS("InProgress", "b")), false, false, RSZ_MOD_CONTINUE, "b", true, false},
        {"class cleared after Infeasible with a ModifyingVolume condition: roll back",
         PVC(VAC(""), MVS("Infeasible", "b") CONDS(RESIZING "," MODIFYING)), false, false,
         RSZ_MOD_ROLLBACK, NULL, true, false},
        {"class cleared after Infeasible, no condition left: nothing",
         PVC(VAC(""), MVS("Infeasible", "b") CONDS(RESIZING)), false, false, RSZ_MOD_NONE, NULL,
         true, false},
        {"class cleared while Pending: nothing to roll back", PVC("", CUR("a") MVS("Pending", "")),
         false, false, RSZ_MOD_NONE, NULL, true, false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc);
        rsz_mod_plan p;
        rsz_modify_plan(pvc, rows[i].uncertain, rows[i].slow, &p);
        expect_int(rows[i].row, "step", p.step, rows[i].step);
        if (rows[i].target)
            expect_str(rows[i].row, "target", p.target, rows[i].target);
        expect_int(rows[i].row, "slow forget", p.slow_forget, rows[i].forget);
        expect_int(rows[i].row, "slow mark", p.slow_mark, rows[i].mark);
        json_object_put(pvc);
    }
}

static void test_failed_status_by_code(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        int code;
        const char *status;
    } rows[] = {
        {"INVALID_ARGUMENT: Infeasible", CSI_INVALID_ARGUMENT, "Infeasible"},
        {"OUT_OF_RANGE stays InProgress (only InvalidArgument is infeasible)", CSI_OUT_OF_RANGE,
         "InProgress"},
        {"NOT_FOUND stays InProgress", CSI_NOT_FOUND, "InProgress"},
        {"INTERNAL stays InProgress", CSI_INTERNAL, "InProgress"},
        {"UNAVAILABLE (uncertain) stays InProgress", CSI_UNAVAILABLE, "InProgress"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_str(rows[i].row, "status", rsz_modify_failed_status(rows[i].code), rows[i].status);
}

static char *params_text(const Csi__V1__ControllerModifyVolumeRequest *req)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < req->n_mutable_parameters; i++)
        json_object_object_add(o, req->mutable_parameters[i]->key,
                               json_object_new_string(req->mutable_parameters[i]->value));
    char *s = kobj_to_text(o, NULL);
    json_object_put(o);
    return s;
}

#define PV(csi, ann) "{`metadata`:{`name`:`pv-1`" ann "},`spec`:{" csi "}}"
#define CSI(extra)   "`csi`:{`driver`:`d`,`volumeHandle`:`vol-1`" extra "}"

static void test_modify_request(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pv, *vac;
        bool extra;
        int rc;
        const char *params, *err;
    } rows[] = {
        {"the class's parameters are the mutable parameters", PV(CSI(""), ""),
         "{`metadata`:{`name`:`gold`},`driverName`:`d`,`parameters`:{`iops`:`3000`,`tier`:`fast`}}",
         false, 0, "{`iops`:`3000`,`tier`:`fast`}", NULL},
        {"a class without parameters: none", PV(CSI(""), ""),
         "{`metadata`:{`name`:`gold`},`driverName`:`d`}", false, 0, "{}", NULL},
        {"--extra-modify-metadata adds the claim's and PV's names", PV(CSI(""), ""),
         "{`metadata`:{`name`:`gold`},`parameters`:{`iops`:`1`}}", true, 0,
         "{`iops`:`1`,`csi.storage.k8s.io/pvc/name`:`c`,`csi.storage.k8s.io/pvc/namespace`:`ns`,"
         "`csi.storage.k8s.io/pv/name`:`pv-1`}",
         NULL},
        {"extra metadata overrides a class key of the same name", PV(CSI(""), ""),
         "{`metadata`:{`name`:`gold`},`parameters`:{`csi.storage.k8s.io/pv/name`:`x`}}", true, 0,
         "{`csi.storage.k8s.io/pv/name`:`pv-1`,`csi.storage.k8s.io/pvc/name`:`c`,"
         "`csi.storage.k8s.io/pvc/namespace`:`ns`}",
         NULL},
        {"not a CSI volume: upstream's text", PV("`hostPath`:{}", ""), "{}", false, -EINVAL, NULL,
         "volume pv-1 is not a CSI volumes, modify volume feature only supports CSI volumes"},
        {"empty handle", PV("`csi`:{`driver`:`d`,`volumeHandle`:``}", ""), "{}", false, -EINVAL,
         NULL, "empty volume handle"},
    };
    json_object *pvc = J(PVC(VAC("gold"), ""));
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv), *vac = J(rows[i].vac);
        Csi__V1__ControllerModifyVolumeRequest *req = NULL;
        int rc = rsz_modify_request(pv, vac, pvc, rows[i].extra, &req);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        if (rc == 0) {
            expect_str(rows[i].row, "volume id", req->volume_id, "vol-1");
            char *p = params_text(req);
            expect_text(rows[i].row, "parameters", p, rows[i].params);
            free(p);
        } else {
            expect_str(rows[i].row, "error", util_err_last(), rows[i].err);
        }
        rsz_modify_request_free(req);
        json_object_put(pv);
        json_object_put(vac);
    }
    json_object_put(pvc);
}

static void test_modify_secret(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pv, *ns, *name;
    } rows[] = {
        {"no secret anywhere", PV(CSI(""), ""), NULL, NULL},
        {"the provisioner's modify-secret annotations",
         PV(CSI(",`controllerExpandSecretRef`:{`name`:`e`,`namespace`:`ens`}"),
            ",`annotations`:{`volume.kubernetes.io/controller-modify-secret-name`:`m`,"
            "`volume.kubernetes.io/controller-modify-secret-namespace`:`mns`}"),
         "mns", "m"},
        {"only one annotation: the expand secret instead",
         PV(CSI(",`controllerExpandSecretRef`:{`name`:`e`,`namespace`:`ens`}"),
            ",`annotations`:{`volume.kubernetes.io/controller-modify-secret-name`:`m`}"),
         "ens", "e"},
        {"the expand secret when no annotation",
         PV(CSI(",`controllerExpandSecretRef`:{`name`:`e`,"
                "`namespace`:`ens`}"),
            ""),
         "ens", "e"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv);
        const char *ns = "x", *name = "x";
        rsz_modify_secret_ref(pv, &ns, &name);
        expect_str(rows[i].row, "namespace", ns, rows[i].ns);
        expect_str(rows[i].row, "name", name, rows[i].name);
        json_object_put(pv);
    }
}

#define NEWC(t, r, m)                                                                              \
    "{`type`:`" t "`,`status`:`True`,`lastProbeTime`:`" NOW_TEXT                                   \
    "`,`lastTransitionTime`:`" NOW_TEXT "`" r ",`message`:`" m "`}"

static void test_status_patches(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pvc, *status;
        int code;
        const char *msg, *want;
    } rows[] = {
        {"InProgress: the spec's class is the target, ModifyingVolume added",
         PVC(VAC("gold"), CUR("silver") CONDS(RESIZING)), "InProgress", 0, NULL,
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" RESIZING "," NEWC(
             "ModifyingVolume", "",
             "Modifying volume to \\`gold\\` is in progress.") "],`modifyVolumeStatus`:{`status`:"
                                                               "`InProgress`,`"
                                                               "targetVolumeAttributesClassName`:`"
                                                               "gold`}}}"},
        {"Pending: status only, the conditions untouched", PVC(VAC("gold"), CONDS(RESIZING)),
         "Pending", 0, NULL,
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`modifyVolumeStatus`:{`status`:`Pending`}}"
         "}"},
        {"a final error: failed, waiting for retry, with ModifyVolumeError (reason: Go's code "
         "name)",
         PVC(VAC("gold"), MVS("InProgress", "gold")), "Infeasible", CSI_INVALID_ARGUMENT,
         "iops too high",
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[" NEWC(
             "ModifyingVolume", "",
             "Modifying volume to \\`gold\\` failed. Waiting for retry.") "," NEWC("ModifyVolumeErr"
                                                                                   "or",
                                                                                   ",`reason`:`"
                                                                                   "InvalidArgumen"
                                                                                   "t`",
                                                                                   "iops too "
                                                                                   "high") "],`"
                                                                                           "modifyV"
                                                                                           "olumeSt"
                                                                                           "atus`:{"
                                                                                           "`status"
                                                                                           "`:`"
                                                                                           "Infeasi"
                                                                                           "ble`}}"
                                                                                           "}"},
        {"a non-final error: still in progress; an old condition of the same type and reason "
         "keeps its transition time",
         PVC(VAC("gold"), MVS("InProgress", "gold") CONDS(MODIFYING)), "InProgress",
         CSI_UNAVAILABLE, "busy",
         "{`metadata`:{`resourceVersion`:`7`},`status`:{`conditions`:[{`type`:`ModifyingVolume`,`"
         "status`:`True`,`lastProbeTime`:`" NOW_TEXT
         "`,`lastTransitionTime`:`2020-01-01T00:00:00Z`,`message`:`Modifying volume to "
         "\\`gold\\` is still in progress.`}," NEWC("ModifyVolumeError", ",`reason`:`Unavailable`",
                                                    "busy") "],`modifyVolumeStatus`:{`status`:`"
                                                            "InProgress`}}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc);
        char *p = rsz_patch_modify_status(pvc, rows[i].status, rows[i].code, rows[i].msg, NOW);
        expect_text(rows[i].row, "patch", p, rows[i].want);
        free(p);
        json_object_put(pvc);
    }
}

static void test_done_and_rollback_patches(void **state)
{
    (void)state;
    json_object *pvc = J(
        PVC(VAC("gold"), MVS("InProgress", "gold") CONDS(MODIFYING "," RESIZING "," MODIFY_ERROR)));
    char *p = rsz_patch_modify_done(pvc, "gold");
    expect_text("done: status removed, current class set, modify conditions dropped, unguarded",
                "patch", p,
                "{`status`:{`modifyVolumeStatus`:null,`currentVolumeAttributesClassName`:`gold`,"
                "`conditions`:[" RESIZING "]}}");
    free(p);
    p = rsz_patch_modify_rolled_back(pvc);
    expect_text("rolled back: ModifyingVolume dropped only", "patch", p,
                "{`status`:{`conditions`:[" RESIZING "," MODIFY_ERROR "]}}");
    free(p);
    json_object_put(pvc);
    pvc = J(PVC(VAC("gold"), CONDS(MODIFYING)));
    p = rsz_patch_modify_done(pvc, "gold");
    expect_text("done: an emptied list is written as null", "patch", p,
                "{`status`:{`modifyVolumeStatus`:null,`currentVolumeAttributesClassName`:`gold`,"
                "`conditions`:null}}");
    free(p);
    json_object_put(pvc);
    p = rsz_patch_pv_vac("gold");
    expect_text("the PV's class", "patch", p, "{`spec`:{`volumeAttributesClassName`:`gold`}}");
    free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_which_claims_to_sync),
        cmocka_unit_test(test_what_a_sync_does),
        cmocka_unit_test(test_failed_status_by_code),
        cmocka_unit_test(test_modify_request),
        cmocka_unit_test(test_modify_secret),
        cmocka_unit_test(test_status_patches),
        cmocka_unit_test(test_done_and_rollback_patches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
