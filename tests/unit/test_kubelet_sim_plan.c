/*
 * Unit tests for kubelet-sim's rules (hack/kubelet-sim/plan.c,
 * plan_objects.c and the record texts of records.c): the kubelet's names
 * and paths, which pod volumes are CSI volumes and what is read from them,
 * the next step for a volume, the pod and node patches, the Lease, the
 * CSI requests, and plugin registration's version rules. Every table row
 * is one rule and names it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable.
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
#include "kubelet-sim/ksim.h"
#include "table.h"

#define DA "hostpath.csi.example.com"

/* ---- names --------------------------------------------------------------------------- */

static void test_names_follow_the_kubelet_and_the_attach_detach_controller(void **state)
{
    (void)state;
    char *u = ksim_unique_name(DA, "vol-1");
    expect_str("unique name: kubernetes.io/csi/<driver>^<handle>", NULL, u,
               "kubernetes.io/csi/" DA "^vol-1");
    free(u);
    char *va = ksim_va_name("vol-1", DA, "node-1");
    expect_str("VolumeAttachment: csi-<sha256(handle + driver + node)>", NULL, va,
               "csi-45d45fb1c5277b851e6383b965bbe5528a1028e8329227d4284460a9bedf42b2");
    free(va);
    char *eh = ksim_ephemeral_handle("uid-1", "scratch");
    expect_str("inline handle: csi-<sha256(pod uid + volume name)>", NULL, eh,
               "csi-a919eb5a57ed1bf8c61a802fc713b36e9bfa4fbf009dfb5f4206d253a3a3dc32");
    free(eh);
    char hex[65];
    ksim_sha256_hex("", hex);
    expect_str("sha256 of nothing", NULL, hex,
               "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

struct seg_row {
    const char *name, *s;
    bool safe;
};

static const struct seg_row seg_rows[] = {
    {"a PV name", "pvc-0a1b", true},
    {"a driver name with dots", DA, true},
    {"empty", "", false},
    {"NULL", NULL, false},
    {"a slash would leave the directory", "a/b", false},
    {"dot", ".", false},
    {"dot dot", "..", false},
    {"dots inside are fine", "a..b", true},
};

static void test_only_safe_names_become_path_segments(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(seg_rows); i++)
        if (ksim_safe_segment(seg_rows[i].s) != seg_rows[i].safe)
            fail_msg("[%s] safe %d, want %d", seg_rows[i].name, !seg_rows[i].safe,
                     seg_rows[i].safe);
}

/* ---- paths --------------------------------------------------------------------------- */

struct path_row {
    const char *name;
    const char *driver, *handle, *spec_name, *uid;
    bool block;
    const char *staging, *target; /* NULL: -EINVAL */
};

static const struct path_row path_rows[] = {
    {"mount: globalmount under the driver and sha256(handle); target under the pod", DA, "vol-1",
     "pv-1", "uid-1", false,
     "/r/plugins/kubernetes.io/csi/" DA
     "/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount",
     "/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"},
    {"block: the kubelet's volumeDevices layout", DA, "vol-1", "pv-1", "uid-1", true,
     "/r/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1",
     "/r/plugins/kubernetes.io/csi/volumeDevices/publish/pv-1/uid-1"},
    {"a driver name with a slash is refused", "a/b", "vol-1", "pv-1", "uid-1", false, NULL,
     "/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"},
    {"a PV name of .. is refused", DA, "vol-1", "..", "uid-1", false,
     "/r/plugins/kubernetes.io/csi/" DA
     "/d2e8363faaac7ae76def3b14091d8eb5755f6b92e9531627aeec833a8731cc49/globalmount",
     NULL},
    {"a pod uid with a slash is refused", DA, "vol-1", "pv-1", "../x", true,
     "/r/plugins/kubernetes.io/csi/volumeDevices/staging/pv-1", NULL},
    {"a handle with a slash is fine: it is hashed", DA, "a/b", "pv-1", "uid-1", false,
     "/r/plugins/kubernetes.io/csi/" DA
     "/c14cddc033f64b9dea80ea675cf280a015e672516090a5626781153dc68fea11/globalmount",
     "/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1/mount"},
};

static void test_staging_and_target_paths_mimic_the_kubelet_layout(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(path_rows); i++) {
        const struct path_row *r = &path_rows[i];
        ksim_vol v = {.driver = (char *)r->driver,
                      .handle = (char *)r->handle,
                      .spec_name = (char *)r->spec_name,
                      .block = r->block};
        char *st = NULL, *tg = NULL;
        int rs = ksim_staging_path("/r", &v, &st);
        int rt = ksim_target_path("/r", r->uid, &v, &tg);
        if ((rs == 0) != (r->staging != NULL) || (rt == 0) != (r->target != NULL))
            fail_msg("[%s] rc %d/%d", r->name, rs, rt);
        expect_str(r->name, NULL, st, r->staging);
        expect_str(r->name, NULL, tg, r->target);
        free(st);
        free(tg);
    }
    char *d = NULL;
    assert_int_equal(ksim_pub_dir("/r", "uid-1", "pv-1", &d), 0);
    expect_str("the publication record's directory", NULL, d,
               "/r/pods/uid-1/volumes/kubernetes.io~csi/pv-1");
    free(d);
}

/* ---- the volumes of a pod ------------------------------------------------------------ */

struct podvol_row {
    const char *name, *pod;
    int rc;
    const char *want; /* "name:kind:claim:ro;..." */
};

static const struct podvol_row podvol_rows[] = {
    {"claims and inline csi volumes, in order; other kinds left out",
     "{`spec`:{`volumes`:[{`name`:`a`,`persistentVolumeClaim`:{`claimName`:`c1`}},"
     "{`name`:`cm`,`configMap`:{`name`:`x`}},"
     "{`name`:`b`,`csi`:{`driver`:`d`,`readOnly`:true}},"
     "{`name`:`c`,`persistentVolumeClaim`:{`claimName`:`c2`,`readOnly`:true}}]}}",
     0, "a:pvc:c1:0;b:inline::1;c:pvc:c2:1;"},
    {"no volumes at all", "{`spec`:{}}", 0, ""},
    {"no spec", "{}", 0, ""},
    {"a claim without claimName is refused",
     "{`spec`:{`volumes`:[{`name`:`a`,`persistentVolumeClaim`:{}}]}}", -EINVAL, ""},
    {"a volume without a name is refused",
     "{`spec`:{`volumes`:[{`persistentVolumeClaim`:{`claimName`:`c`}}]}}", -EINVAL, ""},
    {"a volumes field of the wrong type counts as none", "{`spec`:{`volumes`:`x`}}", 0, ""},
};

static void test_pod_volumes_are_the_claims_and_inline_csi_volumes(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(podvol_rows); i++) {
        const struct podvol_row *r = &podvol_rows[i];
        json_object *pod = J(r->pod);
        ksim_podvol *v = NULL;
        size_t n = 0;
        int rc = ksim_pod_volumes(pod, &v, &n);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d", r->name, rc, r->rc);
        char got[512] = "";
        for (size_t k = 0; k < n; k++) {
            size_t len = strlen(got);
            snprintf(got + len, sizeof(got) - len, "%s:%s:%s:%d;", v[k].name,
                     v[k].kind == KSIM_VOL_PVC ? "pvc" : "inline", v[k].claim ? v[k].claim : "",
                     v[k].readonly);
        }
        expect_str(r->name, NULL, got, r->want);
        ksim_podvols_free(v, n);
        json_object_put(pod);
    }
}

#define PVC_BOUND                                                                                  \
    "{`metadata`:{`name`:`c1`,`uid`:`pvc-uid`},`spec`:{`volumeName`:`pv-1`},"                      \
    "`status`:{`phase`:`Bound`}}"
#define PV_CSI(extra)                                                                              \
    "{`metadata`:{`name`:`pv-1`},`spec`:{`claimRef`:{`uid`:`pvc-uid`},"                            \
    "`accessModes`:[`ReadWriteOnce`,`ReadOnlyMany`],`csi`:{`driver`:`" DA "`,"                     \
    "`volumeHandle`:`vol-1`" extra "}}}"

struct claim_row {
    const char *name, *pvc, *pv;
    bool pod_ro;
    int rc;
    /* driver|handle|unique|block|fs|mode|ro|attrs|stage secret|publish secret|flags */
    const char *want;
};

static const struct claim_row claim_rows[] = {
    {"a bound claim of a CSI PV: driver, handle, unique name, the PV's first access mode",
     PVC_BOUND, PV_CSI(""), false, 0,
     DA "|vol-1|kubernetes.io/csi/" DA "^vol-1|0||ReadWriteOnce|0||||"},
    {"fsType, attributes, both secret references, mount options", PVC_BOUND,
     "{`metadata`:{`name`:`pv-1`},`spec`:{`mountOptions`:[`ro`,`noatime`],`csi`:{`driver`:`" DA
     "`,`volumeHandle`:`vol-1`,`fsType`:`xfs`,`volumeAttributes`:{`b`:`2`,`a`:`1`},"
     "`nodeStageSecretRef`:{`name`:`s1`,`namespace`:`ns1`},"
     "`nodePublishSecretRef`:{`name`:`s2`,`namespace`:`ns2`}}}}",
     false, 0,
     DA "|vol-1|kubernetes.io/csi/" DA "^vol-1|0|xfs|ReadWriteOnce|0|a=1,b=2,|ns1/s1|ns2/s2|ro,"
        "noatime,"},
    {"a Block PV", PVC_BOUND,
     "{`metadata`:{`name`:`pv-1`},`spec`:{`volumeMode`:`Block`,`accessModes`:[`ReadWriteMany`],"
     "`csi`:{`driver`:`" DA "`,`volumeHandle`:`vol-1`}}}",
     false, 0, DA "|vol-1|kubernetes.io/csi/" DA "^vol-1|1||ReadWriteMany|0||||"},
    {"readOnly from the pod volume", PVC_BOUND, PV_CSI(""), true, 0,
     DA "|vol-1|kubernetes.io/csi/" DA "^vol-1|0||ReadWriteOnce|1||||"},
    {"readOnly from the PV's csi source", PVC_BOUND, PV_CSI(",`readOnly`:true"), false, 0,
     DA "|vol-1|kubernetes.io/csi/" DA "^vol-1|0||ReadWriteOnce|1||||"},
    {"no claim yet: wait", NULL, NULL, false, -EAGAIN, NULL},
    {"a claim not bound yet: wait",
     "{`metadata`:{`name`:`c1`},`spec`:{},`status`:{`phase`:`Pending`}}", NULL, false, -EAGAIN,
     NULL},
    {"volumeName set but phase not Bound yet: wait",
     "{`metadata`:{`name`:`c1`},`spec`:{`volumeName`:`pv-1`},`status`:{`phase`:`Pending`}}",
     PV_CSI(""), false, -EAGAIN, NULL},
    {"the PV not read yet: wait", PVC_BOUND, NULL, false, -EAGAIN, NULL},
    {"a PV of another name: wait", PVC_BOUND,
     "{`metadata`:{`name`:`pv-2`},`spec`:{`csi`:{`driver`:`d`,`volumeHandle`:`h`}}}", false,
     -EAGAIN, NULL},
    {"a PV bound to another claim is refused", PVC_BOUND,
     "{`metadata`:{`name`:`pv-1`},`spec`:{`claimRef`:{`uid`:`other`},`csi`:{`driver`:`d`,"
     "`volumeHandle`:`h`}}}",
     false, -EINVAL, NULL},
    {"a PV without csi is none of ours", PVC_BOUND,
     "{`metadata`:{`name`:`pv-1`},`spec`:{`hostPath`:{`path`:`/x`}}}", false, KSIM_NOT_CSI, NULL},
    {"a csi source without a handle is refused", PVC_BOUND,
     "{`metadata`:{`name`:`pv-1`},`spec`:{`csi`:{`driver`:`d`}}}", false, -EINVAL, NULL},
    {"attributes that are no strings are refused", PVC_BOUND, PV_CSI(",`volumeAttributes`:{`a`:1}"),
     false, -EINVAL, NULL},
};

static void describe_vol(const ksim_vol *v, char *out, size_t len)
{
    char attrs[128] = "", flags[128] = "";
    for (size_t i = 0; i < v->attrs.n; i++) {
        size_t l = strlen(attrs);
        snprintf(attrs + l, sizeof(attrs) - l, "%s=%s,", v->attrs.kv[i].key, v->attrs.kv[i].value);
    }
    for (size_t i = 0; i < v->n_mount_flags; i++) {
        size_t l = strlen(flags);
        snprintf(flags + l, sizeof(flags) - l, "%s,", v->mount_flags[i]);
    }
    char ss[64] = "", ps[64] = "";
    if (v->stage_secret_name)
        snprintf(ss, sizeof(ss), "%s/%s", v->stage_secret_ns, v->stage_secret_name);
    if (v->pub_secret_name)
        snprintf(ps, sizeof(ps), "%s/%s", v->pub_secret_ns, v->pub_secret_name);
    snprintf(out, len, "%s|%s|%s|%d|%s|%s|%d|%s|%s|%s|%s", v->driver, v->handle, v->unique,
             v->block, v->fs_type ? v->fs_type : "", v->access_mode, v->readonly, attrs, ss, ps,
             flags);
}

static void test_claim_volumes_read_what_the_csi_plugin_reads(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(claim_rows); i++) {
        const struct claim_row *r = &claim_rows[i];
        json_object *pvc = J(r->pvc), *pv = J(r->pv);
        ksim_podvol pvol = {
            .name = "data", .kind = KSIM_VOL_PVC, .claim = "c1", .readonly = r->pod_ro};
        ksim_vol v;
        int rc = ksim_vol_from_claim(&pvol, pvc, pv, &v);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        if (rc == 0) {
            char got[1024];
            describe_vol(&v, got, sizeof(got));
            expect_str(r->name, NULL, got, r->want);
            expect_str(r->name, NULL, v.spec_name, "pv-1");
            expect_str(r->name, NULL, v.name, "data");
            ksim_vol_clear(&v);
        }
        json_object_put(pvc);
        json_object_put(pv);
    }
}

static void test_inline_volumes_get_a_handle_of_pod_and_name_and_the_pod_namespace(void **state)
{
    (void)state;
    json_object *pod = J("{`metadata`:{`name`:`p`,`namespace`:`ns`,`uid`:`uid-1`}}");
    json_object *csi = J("{`driver`:`d.io`,`volumeAttributes`:{`size`:`1`},"
                         "`nodePublishSecretRef`:{`name`:`sec`},`fsType`:`ext4`}");
    ksim_podvol pvol = {.name = "scratch", .kind = KSIM_VOL_INLINE, .csi = csi, .readonly = true};
    ksim_vol v;
    assert_int_equal(ksim_vol_inline(pod, &pvol, &v), 0);
    char got[1024];
    describe_vol(&v, got, sizeof(got));
    expect_str("inline: handle from uid + name, RWO, readOnly, secret in the pod's namespace", NULL,
               got,
               "d.io|csi-a919eb5a57ed1bf8c61a802fc713b36e9bfa4fbf009dfb5f4206d253a3a3dc32|"
               "kubernetes.io/csi/d.io^csi-a919eb5a57ed1bf8c61a802fc713b36e9bfa4fbf009dfb5f4206d2"
               "53a3a3dc32|0|ext4|ReadWriteOnce|1|size=1,||ns/sec|");
    expect_str("inline: the spec name is the volume's name", NULL, v.spec_name, "scratch");
    ksim_vol_clear(&v);
    json_object *nodrv = J("{}");
    pvol.csi = nodrv;
    assert_int_equal(ksim_vol_inline(pod, &pvol, &v), -EINVAL);
    json_object_put(nodrv);
    json_object_put(csi);
    json_object_put(pod);
}

struct drv_row {
    const char *name, *obj;
    ksim_driver_info want;
};

static const struct drv_row drv_rows[] = {
    {"no CSIDriver object: attach, persistent only", NULL, {true, false, true, false}},
    {"attachRequired false", "{`spec`:{`attachRequired`:false}}", {false, false, true, false}},
    {"podInfoOnMount", "{`spec`:{`podInfoOnMount`:true}}", {true, true, true, false}},
    {"Ephemeral only",
     "{`spec`:{`volumeLifecycleModes`:[`Ephemeral`]}}",
     {true, false, false, true}},
    {"both modes",
     "{`spec`:{`volumeLifecycleModes`:[`Persistent`,`Ephemeral`]}}",
     {true, false, true, true}},
    {"attachRequired of a wrong type keeps the default",
     "{`spec`:{`attachRequired`:`no`}}",
     {true, false, true, false}},
};

static void test_csidriver_defaults_are_the_apis(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(drv_rows); i++) {
        json_object *o = J(drv_rows[i].obj);
        ksim_driver_info di;
        ksim_driver_info_of(o, &di);
        const ksim_driver_info *w = &drv_rows[i].want;
        if (di.attach_required != w->attach_required ||
            di.pod_info_on_mount != w->pod_info_on_mount || di.persistent != w->persistent ||
            di.ephemeral != w->ephemeral)
            fail_msg("[%s] got %d%d%d%d", drv_rows[i].name, di.attach_required,
                     di.pod_info_on_mount, di.persistent, di.ephemeral);
        json_object_put(o);
    }
}

/* ---- CSI ----------------------------------------------------------------------------- */

struct mode_row {
    const char *name, *mode;
    bool snmw;
    int want; /* -1: refused */
};

static const struct mode_row mode_rows[] = {
    {"RWO: single node writer", "ReadWriteOnce", false,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER},
    {"RWO with SINGLE_NODE_MULTI_WRITER: multi writer", "ReadWriteOnce", true,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER},
    {"RWOP: single node writer without the capability", "ReadWriteOncePod", false,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER},
    {"RWOP with the capability: single writer", "ReadWriteOncePod", true,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER},
    {"ROX", "ReadOnlyMany", true,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY},
    {"RWX", "ReadWriteMany", false,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER},
    {"none given: RWO", NULL, false,
     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER},
    {"unknown is refused", "ReadSometimes", false, -1},
};

static void test_access_modes_map_as_the_kubelets(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(mode_rows); i++) {
        const struct mode_row *r = &mode_rows[i];
        Csi__V1__VolumeCapability__AccessMode__Mode m;
        int rc = ksim_access_mode(r->mode, r->snmw, &m);
        if ((r->want < 0) != (rc < 0) || (rc == 0 && (int)m != r->want))
            fail_msg("[%s] rc %d mode %d, want %d", r->name, rc, (int)m, r->want);
    }
}

static const char *entry(ProtobufCMessage **entries, size_t n, const char *key)
{
    /* Every map entry is {base, key, value}: read through the descriptor. */
    for (size_t i = 0; i < n; i++) {
        const ProtobufCMessageDescriptor *d = entries[i]->descriptor;
        const ProtobufCFieldDescriptor *kf =
            protobuf_c_message_descriptor_get_field_by_name(d, "key");
        const ProtobufCFieldDescriptor *vf =
            protobuf_c_message_descriptor_get_field_by_name(d, "value");
        const char *k = *(const char **)((const char *)entries[i] + kf->offset);
        if (strcmp(k, key) == 0)
            return *(const char **)((const char *)entries[i] + vf->offset);
    }
    return NULL;
}

static void test_stage_and_publish_requests_carry_what_the_kubelet_sends(void **state)
{
    (void)state;
    ksim_vol v = {.name = "data",
                  .spec_name = "pv-1",
                  .driver = DA,
                  .handle = "vol-1",
                  .fs_type = "ext4",
                  .access_mode = "ReadWriteOnce",
                  .readonly = true};
    char *flags[] = {"noatime"};
    v.mount_flags = flags;
    v.n_mount_flags = 1;
    ksim_map_set(&v.attrs, "attr", "x");
    ksim_map ctx = {0}, sec = {0}, volctx = {0};
    ksim_map_set(&ctx, "devicePath", "/dev/x");
    ksim_map_set(&sec, "password", "hunter2");
    ksim_map_set(&volctx, "attr", "x");
    ksim_map_set(&volctx, "csi.storage.k8s.io/pod.name", "p");

    Csi__V1__NodeStageVolumeRequest *st = NULL;
    assert_int_equal(ksim_stage_request(&v, "/s", &ctx, &sec, true, &st), 0);
    expect_str("stage: volume_id is the handle", NULL, st->volume_id, "vol-1");
    expect_str("stage: staging path", NULL, st->staging_target_path, "/s");
    assert_int_equal(st->volume_capability->access_type_case,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT);
    expect_str("stage: fsType", NULL, st->volume_capability->mount->fs_type, "ext4");
    assert_int_equal(st->volume_capability->mount->n_mount_flags, 1);
    expect_str("stage: mount flags", NULL, st->volume_capability->mount->mount_flags[0], "noatime");
    assert_int_equal(st->volume_capability->access_mode->mode,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER);
    expect_str("stage: publish_context from attachmentMetadata", NULL,
               entry((ProtobufCMessage **)st->publish_context, st->n_publish_context, "devicePath"),
               "/dev/x");
    expect_str("stage: secrets", NULL,
               entry((ProtobufCMessage **)st->secrets, st->n_secrets, "password"), "hunter2");
    expect_str("stage: volume_context is the attributes", NULL,
               entry((ProtobufCMessage **)st->volume_context, st->n_volume_context, "attr"), "x");
    /* The request packs: every entry is a well-formed message. */
    assert_true(protobuf_c_message_get_packed_size(&st->base) > 0);
    ksim_request_free(st);

    Csi__V1__NodePublishVolumeRequest *pub = NULL;
    assert_int_equal(ksim_publish_request(&v, NULL, "/t", NULL, NULL, &volctx, false, &pub), 0);
    expect_str("publish: target", NULL, pub->target_path, "/t");
    expect_str("publish without staging: no staging path", NULL, pub->staging_target_path, "");
    assert_true(pub->readonly);
    assert_int_equal(pub->n_secrets, 0);
    assert_int_equal(pub->n_publish_context, 0);
    assert_int_equal(pub->volume_capability->access_mode->mode,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER);
    expect_str("publish: volume_context with the pod's identity", NULL,
               entry((ProtobufCMessage **)pub->volume_context, pub->n_volume_context,
                     "csi.storage.k8s.io/pod.name"),
               "p");
    ksim_request_free(pub);

    v.block = true;
    assert_int_equal(ksim_publish_request(&v, "/s", "/t", &ctx, NULL, NULL, false, &pub), 0);
    assert_int_equal(pub->volume_capability->access_type_case,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK);
    expect_str("publish after staging: the staging path", NULL, pub->staging_target_path, "/s");
    ksim_request_free(pub);
    v.access_mode = "ReadSometimes";
    assert_int_equal(ksim_stage_request(&v, "/s", NULL, NULL, false, &st), -EINVAL);
    assert_null(st);
    ksim_map_clear(&v.attrs);
    ksim_map_clear(&ctx);
    ksim_map_clear(&sec);
    ksim_map_clear(&volctx);
}

static void test_publish_context_adds_the_pod_only_with_pod_info_on_mount(void **state)
{
    (void)state;
    json_object *pod = J("{`metadata`:{`name`:`p`,`namespace`:`ns`,`uid`:`u`},"
                         "`spec`:{`serviceAccountName`:`sa`}}");
    ksim_vol v = {.kind = KSIM_VOL_PVC};
    ksim_map_set(&v.attrs, "a", "1"); /* kept, with the pod's identity added */
    ksim_driver_info plain = {.attach_required = true}, info = {.pod_info_on_mount = true};
    ksim_map m = {0};
    ksim_publish_volume_context(&v, pod, &plain, &m);
    assert_int_equal(m.n, 1);
    ksim_map_clear(&m);
    ksim_publish_volume_context(&v, pod, &info, &m);
    expect_str("pod name", NULL, ksim_map_get(&m, "csi.storage.k8s.io/pod.name"), "p");
    expect_str("pod namespace", NULL, ksim_map_get(&m, "csi.storage.k8s.io/pod.namespace"), "ns");
    expect_str("pod uid", NULL, ksim_map_get(&m, "csi.storage.k8s.io/pod.uid"), "u");
    expect_str("service account", NULL, ksim_map_get(&m, "csi.storage.k8s.io/serviceAccount.name"),
               "sa");
    expect_str("a PV's volume is not ephemeral", NULL,
               ksim_map_get(&m, "csi.storage.k8s.io/ephemeral"), "false");
    expect_str("the attributes stay", NULL, ksim_map_get(&m, "a"), "1");
    ksim_map_clear(&m);
    ksim_map_clear(&v.attrs);
    json_object_put(pod);
}

/* ---- the next step ------------------------------------------------------------------- */

struct step_row {
    const char *name;
    ksim_facts f;
    ksim_step want;
};

#define SETUP(...)                                                                                 \
    {                                                                                              \
        .driver_registered = true, __VA_ARGS__                                                     \
    }
#define DOWN(...)                                                                                  \
    {                                                                                              \
        .teardown = true, .driver_registered = true, __VA_ARGS__                                   \
    }

static const struct step_row step_rows[] = {
    {"published: ready", SETUP(.published = true), KSIM_READY},
    {"published: ready even while the driver is away", {.published = true}, KSIM_READY},
    {"driver not registered: wait", {.attach_required = true}, KSIM_WAIT_DRIVER},
    {"attachable and not reported in use: report first",
     SETUP(.attach_required = true, .attached = true), KSIM_REPORT_IN_USE},
    {"in use, not attached: wait for the attachment",
     SETUP(.attach_required = true, .in_use_reported = true), KSIM_WAIT_ATTACH},
    {"attached, staging driver, not staged: stage",
     SETUP(.attach_required = true, .in_use_reported = true, .attached = true, .stage_cap = true),
     KSIM_STAGE},
    {"attached and staged: publish",
     SETUP(.attach_required = true, .in_use_reported = true, .attached = true, .stage_cap = true,
           .staged = true),
     KSIM_PUBLISH},
    {"no attach needed, no staging: publish at once", SETUP(.stage_cap = false), KSIM_PUBLISH},
    {"no attach needed: never reported in use, staged first", SETUP(.stage_cap = true), KSIM_STAGE},
    {"teardown: published record: unpublish",
     DOWN(.has_pub_record = true, .has_stage_record = true), KSIM_UNPUBLISH},
    {"teardown: unpublished, staged, nobody else: unstage", DOWN(.has_stage_record = true),
     KSIM_UNSTAGE},
    {"teardown: unpublished, staged, another pod uses it: done",
     DOWN(.has_stage_record = true, .other_users = true), KSIM_GONE},
    {"teardown: nothing recorded: done", DOWN(), KSIM_GONE},
    {"teardown: nothing recorded and no driver: done", {.teardown = true}, KSIM_GONE},
    {"teardown: a record but no driver: wait for it",
     {.teardown = true, .has_pub_record = true},
     KSIM_WAIT_DRIVER},
    {"teardown: a staging left for nobody but no driver: wait",
     {.teardown = true, .has_stage_record = true},
     KSIM_WAIT_DRIVER},
    {"published, the claim waits for the node, the driver expands: expand",
     SETUP(.published = true, .resize = true, .expand_cap = true), KSIM_EXPAND},
    {"published, the claim waits for the node, no EXPAND_VOLUME: ready (nothing to call)",
     SETUP(.published = true, .resize = true), KSIM_READY},
    {"published, the claim waits for the node, driver away: wait for it",
     {.published = true, .resize = true, .expand_cap = true},
     KSIM_WAIT_DRIVER},
    {"not published yet: a resize waits until the volume is mounted",
     SETUP(.resize = true, .expand_cap = true), KSIM_PUBLISH},
};

static void test_next_step_follows_the_kubelets_order(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(step_rows); i++) {
        ksim_step got = ksim_next_step(&step_rows[i].f);
        if (got != step_rows[i].want)
            fail_msg("[%s] %s, want %s", step_rows[i].name, ksim_step_name(got),
                     ksim_step_name(step_rows[i].want));
    }
    expect_str("step names", NULL, ksim_step_name(KSIM_REPORT_IN_USE), "report-in-use");
}

/* ---- node expansion ------------------------------------------------------------------ */

#define RPV(cap) "{`spec`:{`capacity`:{`storage`:`" cap "`}}}"
#define RPVC(status)                                                                               \
    "{`metadata`:{`name`:`c1`,`namespace`:`ns`,`resourceVersion`:`7`},`status`:{`capacity`:{`"     \
    "storage`:`1Gi`}" status "}}"
#define FS_PENDING "{`type`:`FileSystemResizePending`,`status`:`True`}"

struct resize_row {
    const char *name, *pvc, *pv;
    bool readonly;
    ksim_resize_step want;
    bool recover;
};

static const struct resize_row resize_rows[] = {
    {"NodeResizePending and a bigger PV: mark in progress, then expand",
     RPVC(",`allocatedResources`:{`storage`:`2Gi`},`allocatedResourceStatuses`:{`storage`:`"
          "NodeResizePending`}"),
     RPV("2Gi"), false, KSIM_RESIZE_MARK, true},
    {"NodeResizeInProgress (a restart in between): expand",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`NodeResizeInProgress`}"), RPV("2Gi"), false,
     KSIM_RESIZE_EXPAND, true},
    {"the controller is still at it: nothing",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`ControllerResizeInProgress`}"), RPV("2Gi"),
     false, KSIM_RESIZE_NONE, true},
    {"node expansion infeasible: never again at this size",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`NodeResizeInfeasible`}"), RPV("2Gi"), false,
     KSIM_RESIZE_NONE, true},
    {"allocatedResources without a status: the statuses rule, and none is pending",
     RPVC(",`allocatedResources`:{`storage`:`2Gi`}"), RPV("2Gi"), false, KSIM_RESIZE_NONE, true},
    {"NodeResizePending and the FileSystemResizePending condition: the status rules",
     RPVC(",`conditions`:[" FS_PENDING "],`allocatedResourceStatuses`:{`storage`:`"
          "NodeResizePending`}"),
     RPV("2Gi"), false, KSIM_RESIZE_MARK, true},
    {"no statuses (a 1.20 API server): FileSystemResizePending asks for it",
     RPVC(",`conditions`:[" FS_PENDING "]"), RPV("2Gi"), false, KSIM_RESIZE_EXPAND, false},
    {"no statuses and no condition yet: the resizer is not done, wait", RPVC(""), RPV("2Gi"), false,
     KSIM_RESIZE_NONE, false},
    {"FileSystemResizePending False: nothing",
     RPVC(",`conditions`:[{`type`:`FileSystemResizePending`,`status`:`False`}]"), RPV("2Gi"), false,
     KSIM_RESIZE_NONE, false},
    {"the PV is not bigger than the claim's capacity: nothing",
     RPVC(",`conditions`:[" FS_PENDING "],`allocatedResourceStatuses`:{`storage`:`"
          "NodeResizePending`}"),
     RPV("1024Mi"), false, KSIM_RESIZE_NONE, true},
    {"a read-only volume is never grown",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`NodeResizePending`}"), RPV("2Gi"), true,
     KSIM_RESIZE_NONE, true},
    {"a PV capacity that does not parse counts as zero",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`NodeResizePending`}"), RPV("lots"), false,
     KSIM_RESIZE_NONE, true},
    {"a claim without a capacity yet: any PV size is bigger",
     "{`status`:{`conditions`:[" FS_PENDING "]}}", RPV("1Gi"), false, KSIM_RESIZE_EXPAND, false},
};

static void test_node_expansion_follows_the_kubelets_node_expander(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(resize_rows); i++) {
        const struct resize_row *r = &resize_rows[i];
        json_object *pvc = J(r->pvc), *pv = J(r->pv);
        ksim_resize got;
        ksim_resize_plan(pvc, pv, r->readonly, &got);
        if (got.step != r->want || got.recover != r->recover)
            fail_msg("[%s] step %d recover %d, want %d %d", r->name, got.step, got.recover, r->want,
                     r->recover);
        if (got.step != KSIM_RESIZE_NONE &&
            (!got.new_size ||
             got.new_bytes != (strcmp(got.new_size, "2Gi") == 0 ? 2147483648LL : 1073741824LL)))
            fail_msg("[%s] new size %s / %lld", r->name, got.new_size ? got.new_size : "(none)",
                     (long long)got.new_bytes);
        json_object_put(pvc);
        json_object_put(pv);
    }
}

struct rpatch_row {
    const char *name, *pvc;
    int kind; /* 0 in progress, 1 finished at 2Gi, 2 failed */
    int code;
    const char *want; /* NULL: no patch */
};

#define RV7    "`metadata`:{`resourceVersion`:`7`},"
#define ERR_AT "`lastTransitionTime`:`2024-01-01T00:00:00Z`"

static const struct rpatch_row rpatch_rows[] = {
    {"in progress: NodeResizeInProgress, guarded by the resourceVersion",
     RPVC(",`allocatedResourceStatuses`:{`storage`:`NodeResizePending`}"), 0, 0,
     "{" RV7 "`status`:{`allocatedResourceStatuses`:{`storage`:`NodeResizeInProgress`}}}"},
    {"finished: the new capacity, resize conditions gone, the status map gone with its only "
     "entry",
     RPVC(",`conditions`:[{`type`:`Resizing`,`status`:`True`}," FS_PENDING
          ",{`type`:`Other`,`status`:`True`}],`allocatedResourceStatuses`:{`storage`:`"
          "NodeResizeInProgress`}"),
     1, 0,
     "{" RV7 "`status`:{`capacity`:{`storage`:`2Gi`},`conditions`:[{`type`:`Other`,`status`:`"
     "True`}],`allocatedResourceStatuses`:null}}"},
    {"finished: only the storage entry goes when the map holds others",
     RPVC(",`conditions`:[" FS_PENDING "],`allocatedResourceStatuses`:{`storage`:`"
          "NodeResizeInProgress`,`example.com/iops`:`x`}"),
     1, 0,
     "{" RV7 "`status`:{`capacity`:{`storage`:`2Gi`},`conditions`:null,"
     "`allocatedResourceStatuses`:{`storage`:null}}}"},
    {"finished without statuses or resize conditions (1.20): the capacity alone", RPVC(""), 1, 0,
     "{" RV7 "`status`:{`capacity`:{`storage`:`2Gi`}}}"},
    {"failed finally: NodeResizeError kept beside the others, not guarded",
     RPVC(",`conditions`:[" FS_PENDING ",{`type`:`NodeResizeError`,`status`:`True`}]"), 2,
     CSI_INTERNAL,
     "{`status`:{`conditions`:[" FS_PENDING ",{`type`:`NodeResizeError`,`status`:`True`," ERR_AT
     ",`message`:`failed to expand pvc with boom`}]}}"},
    {"failed infeasibly (OUT_OF_RANGE): NodeResizeInfeasible too", RPVC(""), 2, CSI_OUT_OF_RANGE,
     "{`status`:{`conditions`:[{`type`:`NodeResizeError`,`status`:`True`," ERR_AT
     ",`message`:`failed to expand pvc with boom`}],`allocatedResourceStatuses`:{`storage`:`"
     "NodeResizeInfeasible`}}}"},
    {"failed but maybe still going on (UNAVAILABLE): nothing written", RPVC(""), 2, CSI_UNAVAILABLE,
     NULL},
    {"no answer from the driver: nothing written", RPVC(""), 2, CSI_OK, NULL},
};

static void test_claim_patches_mark_progress_finish_and_failure_as_the_kubelet(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(rpatch_rows); i++) {
        const struct rpatch_row *r = &rpatch_rows[i];
        json_object *pvc = J(r->pvc);
        char *got = NULL;
        if (r->kind == 0)
            got = ksim_resize_in_progress_patch(pvc);
        else if (r->kind == 1)
            got = ksim_resize_finished_patch(pvc, "2Gi");
        else
            got = ksim_resize_failed_patch(pvc, r->code, "boom", 1704067200);
        expect_json_text(r->name, got, r->want);
        free(got);
        json_object_put(pvc);
    }
}

static void test_expand_request_carries_what_the_kubelet_sends(void **state)
{
    (void)state;
    json_object *pvc = J("{`metadata`:{`name`:`c1`,`uid`:`pvc-uid`},`spec`:{`volumeName`:`pv-1`},"
                         "`status`:{`phase`:`Bound`,`capacity`:{`storage`:`1Gi`},"
                         "`allocatedResourceStatuses`:{`storage`:`NodeResizePending`}}}");
    json_object *pv =
        J("{`metadata`:{`name`:`pv-1`},`spec`:{`capacity`:{`storage`:`2Gi`},`accessModes`:[`"
          "ReadWriteOnce`],`mountOptions`:[`noatime`],`csi`:{`driver`:`" DA
          "`,`volumeHandle`:`vol-1`,`fsType`:`ext4`,"
          "`nodeExpandSecretRef`:{`name`:`s3`,`namespace`:`ns3`}}}}");
    ksim_podvol pvol = {.name = "data", .kind = KSIM_VOL_PVC, .claim = "c1"};
    ksim_vol v;
    assert_int_equal(ksim_vol_from_claim(&pvol, pvc, pv, &v), 0);
    assert_true(v.resize);
    expect_str("the claim is remembered", NULL, v.claim, "c1");
    expect_str("nodeExpandSecretRef", NULL, v.expand_secret_name, "s3");
    expect_str("nodeExpandSecretRef namespace", NULL, v.expand_secret_ns, "ns3");
    ksim_map sec = {0};
    ksim_map_set(&sec, "key", "v");
    Csi__V1__NodeExpandVolumeRequest *req = NULL;
    assert_int_equal(ksim_expand_request(&v, "/t", "/s", 2147483648LL, &sec, true, &req), 0);
    expect_str("expand: volume_id is the handle", NULL, req->volume_id, "vol-1");
    expect_str("expand: volume_path is the target path", NULL, req->volume_path, "/t");
    expect_str("expand: staging_target_path", NULL, req->staging_target_path, "/s");
    assert_int_equal(req->capacity_range->required_bytes, 2147483648LL);
    assert_int_equal(req->capacity_range->limit_bytes, 0);
    assert_int_equal(req->volume_capability->access_type_case,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT);
    expect_str("expand: fsType", NULL, req->volume_capability->mount->fs_type, "ext4");
    expect_str("expand: mount flags", NULL, req->volume_capability->mount->mount_flags[0],
               "noatime");
    assert_int_equal(req->volume_capability->access_mode->mode,
                     CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER);
    expect_str("expand: secrets", NULL,
               entry((ProtobufCMessage **)req->secrets, req->n_secrets, "key"), "v");
    assert_true(protobuf_c_message_get_packed_size(&req->base) > 0);
    ksim_request_free(req);
    assert_int_equal(ksim_expand_request(&v, "/t", NULL, 1, NULL, false, &req), 0);
    expect_str("expand without staging: none sent", NULL, req->staging_target_path, "");
    ksim_request_free(req);
    ksim_map_clear(&sec);
    ksim_vol_clear(&v);
    /* A read-only pod volume is never grown. */
    pvol.readonly = true;
    assert_int_equal(ksim_vol_from_claim(&pvol, pvc, pv, &v), 0);
    assert_false(v.resize);
    ksim_vol_clear(&v);
    json_object_put(pvc);
    json_object_put(pv);
}

/* ---- pods ---------------------------------------------------------------------------- */

struct action_row {
    const char *name, *pod;
    ksim_pod_action want;
};

static const struct action_row action_rows[] = {
    {"a pending pod is set up", "{`status`:{`phase`:`Pending`}}", KSIM_POD_SETUP},
    {"a running pod is set up (idempotent)", "{`status`:{`phase`:`Running`}}", KSIM_POD_SETUP},
    {"a pod with a deletionTimestamp is finished",
     "{`metadata`:{`deletionTimestamp`:`2024-01-01T00:00:00Z`},`status`:{`phase`:`Running`}}",
     KSIM_POD_FINISH},
    {"Succeeded: volumes torn down, the pod stays", "{`status`:{`phase`:`Succeeded`}}",
     KSIM_POD_TEARDOWN},
    {"Failed: volumes torn down", "{`status`:{`phase`:`Failed`}}", KSIM_POD_TEARDOWN},
    {"no status at all is set up", "{}", KSIM_POD_SETUP},
};

static void test_pod_state_decides_setup_teardown_or_finish(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(action_rows); i++) {
        json_object *pod = J(action_rows[i].pod);
        if (ksim_pod_action_of(pod) != action_rows[i].want)
            fail_msg("[%s] got %d", action_rows[i].name, ksim_pod_action_of(pod));
        json_object_put(pod);
    }
}

#define T0 ((time_t)1700000000) /* 2023-11-14T22:13:20Z */

struct running_row {
    const char *name, *pod, *want;
};

static const struct running_row running_rows[] = {
    {"pending: Running, the four conditions True, startTime, container statuses, the uid",
     "{`metadata`:{`uid`:`u1`},`spec`:{`containers`:[{`name`:`app`,`image`:`busybox`}]},"
     "`status`:{`phase`:`Pending`}}",
     "{`metadata`:{`uid`:`u1`},`status`:{`phase`:`Running`,`startTime`:`2023-11-14T22:13:20Z`,"
     "`conditions`:["
     "{`type`:`PodScheduled`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`},"
     "{`type`:`Initialized`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`},"
     "{`type`:`ContainersReady`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`},"
     "{`type`:`Ready`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`}],"
     "`containerStatuses`:[{`name`:`app`,`image`:`busybox`,`imageID`:``,`ready`:true,"
     "`started`:true,`restartCount`:0,`state`:{`running`:{`startedAt`:`2023-11-14T22:13:20Z`}}}]}"
     "}"},
    {"a condition already True keeps its time (left out); startTime kept",
     "{`metadata`:{`uid`:`u1`},`spec`:{},`status`:{`phase`:`Pending`,`startTime`:`S`,"
     "`conditions`:[{`type`:`PodScheduled`,`status`:`True`}]}}",
     "{`metadata`:{`uid`:`u1`},`status`:{`phase`:`Running`,`startTime`:`S`,`conditions`:["
     "{`type`:`Initialized`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`},"
     "{`type`:`ContainersReady`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`},"
     "{`type`:`Ready`,`status`:`True`,`lastTransitionTime`:`2023-11-14T22:13:20Z`}],"
     "`containerStatuses`:[]}}"},
    {"already Running and Ready: nothing to write",
     "{`metadata`:{`uid`:`u1`},`status`:{`phase`:`Running`,`conditions`:["
     "{`type`:`PodScheduled`,`status`:`True`},{`type`:`Initialized`,`status`:`True`},"
     "{`type`:`ContainersReady`,`status`:`True`},{`type`:`Ready`,`status`:`True`}]}}",
     NULL},
};

static void test_running_patch_makes_a_pod_running_and_ready_once(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(running_rows); i++) {
        json_object *pod = J(running_rows[i].pod);
        char *p = ksim_pod_running_patch(pod, T0);
        expect_json_text(running_rows[i].name, p, running_rows[i].want);
        free(p);
        json_object_put(pod);
    }
    char *d = ksim_pod_delete_options("u1");
    expect_json_text("delete: grace period 0, precondition on the uid", d,
                     "{`apiVersion`:`v1`,`kind`:`DeleteOptions`,`gracePeriodSeconds`:0,"
                     "`preconditions`:{`uid`:`u1`}}");
    free(d);
}

/* ---- the Node and the Lease ---------------------------------------------------------- */

static void test_node_is_registered_with_the_attach_detach_annotation(void **state)
{
    (void)state;
    json_object *n = ksim_node_object("node-1");
    char *text = kobj_to_text(n, NULL);
    expect_json_text(
        "the Node: hostname label, controller-managed attach-detach", text,
        "{`apiVersion`:`v1`,`kind`:`Node`,`metadata`:{`name`:`node-1`,"
        "`labels`:{`kubernetes.io/hostname`:`node-1`},"
        "`annotations`:{`volumes.kubernetes.io/controller-managed-attach-detach`:`true`}}}");
    free(text);
    assert_null(ksim_node_cmad_patch(n));
    json_object_put(n);
    json_object *bare = J("{`metadata`:{`name`:`node-1`}}");
    char *p = ksim_node_cmad_patch(bare);
    expect_json_text("an existing Node without it gets it", p,
                     "{`metadata`:{`annotations`:{`volumes.kubernetes.io/"
                     "controller-managed-attach-detach`:`true`}}}");
    free(p);
    json_object_put(bare);
    json_object *off = J("{`metadata`:{`annotations`:{`volumes.kubernetes.io/"
                         "controller-managed-attach-detach`:`false`}}}");
    p = ksim_node_cmad_patch(off);
    assert_non_null(p);
    free(p);
    json_object_put(off);
}

static void test_node_status_keeps_transition_times_and_lists_volumes_in_use(void **state)
{
    (void)state;
    ksim_node_info ni = {.name = "node-1",
                         .cpus = 2,
                         .memory_bytes = 4LL << 30,
                         .ephemeral_bytes = 0,
                         .max_pods = 110,
                         .os = "linux",
                         .arch = "amd64"};
    /* Ready was True since OLD; MemoryPressure was True (now False: a transition). */
    json_object *node =
        J("{`status`:{`conditions`:["
          "{`type`:`Ready`,`status`:`True`,`lastTransitionTime`:`OLD`},"
          "{`type`:`MemoryPressure`,`status`:`True`,`lastTransitionTime`:`OLD`}]}}");
    char *in_use[] = {"kubernetes.io/csi/a^1", "kubernetes.io/csi/b^2"};
    char *p = ksim_node_status_patch(&ni, node, in_use, 2, T0);
    json_object *o = kobj_parse_text(p, strlen(p));
    assert_non_null(o);
    json_object *conds = kobj_path(o, "status.conditions");
    assert_int_equal(kobj_len(conds), 4);
    for (size_t i = 0; i < 4; i++) {
        json_object *c = kobj_at(conds, i);
        const char *type = kobj_str(c, "type");
        expect_str(type, NULL, kobj_str(c, "lastHeartbeatTime"), "2023-11-14T22:13:20Z");
        if (strcmp(type, "Ready") == 0) {
            expect_str("Ready True since before: transition time kept", NULL,
                       kobj_str(c, "lastTransitionTime"), "OLD");
            expect_str("Ready reason", NULL, kobj_str(c, "reason"), "KubeletReady");
            expect_str("Ready status", NULL, kobj_str(c, "status"), "True");
        } else {
            expect_str("a pressure condition that changed or is new: now", NULL,
                       kobj_str(c, "lastTransitionTime"), "2023-11-14T22:13:20Z");
            expect_str("pressure status", NULL, kobj_str(c, "status"), "False");
        }
    }
    char *cap = kobj_to_text(kobj_path(o, "status.capacity"), NULL);
    expect_json_text("capacity", cap, "{`cpu`:`2`,`memory`:`4Gi`,`pods`:`110`}");
    free(cap);
    char *alloc = kobj_to_text(kobj_path(o, "status.allocatable"), NULL);
    expect_json_text("allocatable", alloc, "{`cpu`:`2`,`memory`:`4Gi`,`pods`:`110`}");
    free(alloc);
    char *vols = kobj_to_text(kobj_path(o, "status.volumesInUse"), NULL);
    expect_json_text("volumesInUse", vols, "[`kubernetes.io/csi/a^1`,`kubernetes.io/csi/b^2`]");
    free(vols);
    expect_str("nodeInfo.kubeletVersion", NULL, kobj_path_str(o, "status.nodeInfo.kubeletVersion"),
               KSIM_KUBELET_VERSION);
    expect_str("nodeInfo.architecture", NULL, kobj_path_str(o, "status.nodeInfo.architecture"),
               "amd64");
    json_object_put(o);
    free(p);

    p = ksim_node_status_patch(&ni, NULL, NULL, 0, T0);
    o = kobj_parse_text(p, strlen(p));
    json_object *st = kobj_obj(o, "status");
    assert_true(json_object_object_get_ex(st, "volumesInUse", NULL));
    assert_null(kobj_get(st, "volumesInUse")); /* null: the list is deleted */
    json_object *ready = kobj_at(kobj_path(o, "status.conditions"), 3);
    expect_str("no Node read: every transition is now", NULL, kobj_str(ready, "lastTransitionTime"),
               "2023-11-14T22:13:20Z");
    json_object_put(o);
    free(p);
    json_object_put(node);
}

static void test_capacity_reports_ephemeral_storage_when_known(void **state)
{
    (void)state;
    ksim_node_info ni = {.name = "n",
                         .cpus = 1,
                         .memory_bytes = 1000,
                         .ephemeral_bytes = 2048,
                         .max_pods = 5,
                         .os = "linux",
                         .arch = "arm64"};
    char *p = ksim_node_status_patch(&ni, NULL, NULL, 0, T0);
    json_object *o = kobj_parse_text(p, strlen(p));
    char *cap = kobj_to_text(kobj_path(o, "status.capacity"), NULL);
    expect_json_text("ephemeral-storage when known; memory as the API server prints 1000 bytes",
                     cap, "{`cpu`:`1`,`memory`:`1k`,`pods`:`5`,`ephemeral-storage`:`2Ki`}");
    free(cap);
    json_object_put(o);
    free(p);
}

static void test_lease_is_held_by_the_node_and_owned_by_it(void **state)
{
    (void)state;
    struct timespec now = {.tv_sec = T0, .tv_nsec = 123456789};
    json_object *l = ksim_lease_object("node-1", "nuid", 40, &now);
    char *text = kobj_to_text(l, NULL);
    expect_json_text("the Lease: kube-node-lease, holder, 40 s, MicroTime, owner", text,
                     "{`apiVersion`:`coordination.k8s.io/v1`,`kind`:`Lease`,"
                     "`metadata`:{`name`:`node-1`,`namespace`:`kube-node-lease`,"
                     "`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Node`,`name`:`node-1`,"
                     "`uid`:`nuid`}]},"
                     "`spec`:{`holderIdentity`:`node-1`,`leaseDurationSeconds`:40,"
                     "`renewTime`:`2023-11-14T22:13:20.123456Z`}}");
    free(text);
    char *p = ksim_lease_renew_patch(l, "node-1", "nuid", 40, &now);
    expect_json_text("renewing an owned Lease touches the spec only", p,
                     "{`spec`:{`holderIdentity`:`node-1`,`leaseDurationSeconds`:40,"
                     "`renewTime`:`2023-11-14T22:13:20.123456Z`}}");
    free(p);
    json_object_put(l);
    l = ksim_lease_object("node-1", NULL, 40, &now);
    assert_null(kobj_path(l, "metadata.ownerReferences"));
    p = ksim_lease_renew_patch(l, "node-1", "nuid", 40, &now);
    expect_json_text("a Lease made before the Node was known gets its owner", p,
                     "{`metadata`:{`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Node`,"
                     "`name`:`node-1`,`uid`:`nuid`}]},"
                     "`spec`:{`holderIdentity`:`node-1`,`leaseDurationSeconds`:40,"
                     "`renewTime`:`2023-11-14T22:13:20.123456Z`}}");
    free(p);
    json_object_put(l);
}

/* ---- maps, secrets, lists ------------------------------------------------------------ */

static void test_secret_data_is_decoded_and_bad_entries_name_the_key_not_the_value(void **state)
{
    (void)state;
    json_object *s = J("{`metadata`:{`name`:`s`},`data`:{`user`:`YWRtaW4=`,`pw`:`aHVudGVyMg==`}}");
    ksim_map m = {0};
    assert_int_equal(ksim_secret_data(s, &m), 0);
    expect_str("user", NULL, ksim_map_get(&m, "user"), "admin");
    expect_str("pw", NULL, ksim_map_get(&m, "pw"), "hunter2");
    expect_str("sorted by key", NULL, m.kv[0].key, "pw");
    ksim_map_clear(&m);
    json_object_put(s);
    s = J("{`data`:{`token`:`c2VjcmV0!!`}}");
    assert_int_equal(ksim_secret_data(s, &m), -EINVAL);
    assert_non_null(strstr(util_err_last(), "token"));
    assert_null(strstr(util_err_last(), "c2VjcmV0"));
    ksim_map_clear(&m);
    json_object_put(s);
    s = J("{`metadata`:{`name`:`s`}}");
    assert_int_equal(ksim_secret_data(s, &m), 0);
    assert_int_equal(m.n, 0);
    json_object_put(s);
    json_object *attrs = J("{`a`:`1`,`b`:2}");
    assert_int_equal(ksim_map_add_json(&m, attrs, "volumeAttributes"), -EINVAL);
    assert_non_null(strstr(util_err_last(), "volumeAttributes[b]"));
    ksim_map_clear(&m);
    json_object_put(attrs);
    ksim_map_set(&m, "b", "1");
    ksim_map_set(&m, "a", "1");
    ksim_map_set(&m, "b", "2");
    assert_int_equal(m.n, 2);
    expect_str("set replaces", NULL, ksim_map_get(&m, "b"), "2");
    ksim_map_clear(&m);
}

static void test_string_lists_sort_and_drop_repeats(void **state)
{
    (void)state;
    static const char *const in[] = {"c", "a", "c", "b"};
    size_t n = N_ROWS(in);
    char **v = calloc(n, sizeof(char *));
    for (size_t i = 0; i < n; i++)
        v[i] = strdup(in[i]);
    ksim_strv_sort_unique(v, &n);
    assert_int_equal(n, 3);
    expect_str("sorted, repeats dropped", NULL, v[0][0] == 'a' && v[1][0] == 'b' ? v[2] : "?", "c");
    ksim_strv_free(v, n);
    n = 0;
    ksim_strv_sort_unique(NULL, &n);
}

/* ---- records ------------------------------------------------------------------------- */

static void test_records_round_trip_and_refuse_what_they_lack(void **state)
{
    (void)state;
    ksim_pub p = {.pod_uid = "u1",
                  .pod_ns = "ns",
                  .pod_name = "p",
                  .vol_name = "data",
                  .spec_name = "pv-1",
                  .driver = DA,
                  .handle = "vol-1",
                  .target = "/t",
                  .staging = "/s",
                  .attach = true};
    char *text = ksim_pub_to_json(&p, "node-1");
    json_object *o = kobj_parse_text(text, strlen(text));
    expect_str("the kubelet's field names", NULL, kobj_str(o, "driverName"), DA);
    expect_str("nodeName", NULL, kobj_str(o, "nodeName"), "node-1");
    ksim_pub *back = NULL;
    assert_int_equal(ksim_pub_from_json(o, &back), 0);
    expect_str("uid", NULL, back->pod_uid, "u1");
    expect_str("unique", NULL, back->unique, "kubernetes.io/csi/" DA "^vol-1");
    expect_str("staging", NULL, back->staging, "/s");
    assert_true(back->attach);
    assert_false(back->done); /* read back: the driver is asked again */
    ksim_pub_free(back);
    json_object_object_del(o, "targetPath");
    assert_int_equal(ksim_pub_from_json(o, &back), -EINVAL);
    assert_null(back);
    json_object_put(o);
    free(text);

    ksim_stage s = {.driver = DA, .handle = "vol-1", .spec_name = "pv-1", .staging = "/s"};
    text = ksim_stage_to_json(&s, "node-1");
    o = kobj_parse_text(text, strlen(text));
    ksim_stage *sb = NULL;
    assert_int_equal(ksim_stage_from_json(o, &sb), 0);
    expect_str("staging", NULL, sb->staging, "/s");
    assert_false(sb->attach);
    ksim_stage_free(sb);
    json_object_object_del(o, "volumeHandle");
    assert_int_equal(ksim_stage_from_json(o, &sb), -EINVAL);
    json_object_put(o);
    free(text);
}

/* ---- plugin registration versions
 * ------------------------------------------------------------------ */

struct version_row {
    const char *name;
    char *versions[4];
    size_t n;
    int rc;
    long want[KSIM_VERSION_PARTS];
};

static const struct version_row version_rows[] = {
    {"the highest 1.x", {"1.0.0", "1.2.0", "1.1"}, 3, 0, {1, 2, 0}},
    {"a v prefix and a pre-release suffix", {"v1.3.0-rc1"}, 1, 0, {1, 3, 0}},
    {"2.x and later are ignored", {"2.0.0", "1.0.0"}, 2, 0, {1, 0, 0}},
    {"only 2.x: refused", {"2.0.0", "3.1.0"}, 2, -EINVAL, {0}},
    {"0.x: refused", {"0.3.0"}, 1, -EINVAL, {0}},
    {"none: refused", {NULL}, 0, -EINVAL, {0}},
    {"unparseable: refused", {"latest", "v1", "1.x"}, 3, -EINVAL, {0}},
};

static void test_registration_takes_the_highest_1x_version(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(version_rows); i++) {
        const struct version_row *r = &version_rows[i];
        long got[KSIM_VERSION_PARTS];
        int rc = ksim_highest_version(r->versions, r->n, got);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d", r->name, rc, r->rc);
        if (rc == 0 && ksim_version_cmp(got, r->want) != 0)
            fail_msg("[%s] got %ld.%ld.%ld", r->name, got[0], got[1], got[2]);
    }
    long v[KSIM_VERSION_PARTS];
    assert_int_equal(ksim_parse_version("1.2.3.4", v), -1);
    assert_int_equal(ksim_parse_version("1", v), -1);
    assert_int_equal(ksim_parse_version("1.2+build", v), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_names_follow_the_kubelet_and_the_attach_detach_controller),
        cmocka_unit_test(test_only_safe_names_become_path_segments),
        cmocka_unit_test(test_staging_and_target_paths_mimic_the_kubelet_layout),
        cmocka_unit_test(test_pod_volumes_are_the_claims_and_inline_csi_volumes),
        cmocka_unit_test(test_claim_volumes_read_what_the_csi_plugin_reads),
        cmocka_unit_test(test_inline_volumes_get_a_handle_of_pod_and_name_and_the_pod_namespace),
        cmocka_unit_test(test_csidriver_defaults_are_the_apis),
        cmocka_unit_test(test_access_modes_map_as_the_kubelets),
        cmocka_unit_test(test_stage_and_publish_requests_carry_what_the_kubelet_sends),
        cmocka_unit_test(test_publish_context_adds_the_pod_only_with_pod_info_on_mount),
        cmocka_unit_test(test_next_step_follows_the_kubelets_order),
        cmocka_unit_test(test_node_expansion_follows_the_kubelets_node_expander),
        cmocka_unit_test(test_claim_patches_mark_progress_finish_and_failure_as_the_kubelet),
        cmocka_unit_test(test_expand_request_carries_what_the_kubelet_sends),
        cmocka_unit_test(test_pod_state_decides_setup_teardown_or_finish),
        cmocka_unit_test(test_running_patch_makes_a_pod_running_and_ready_once),
        cmocka_unit_test(test_node_is_registered_with_the_attach_detach_annotation),
        cmocka_unit_test(test_node_status_keeps_transition_times_and_lists_volumes_in_use),
        cmocka_unit_test(test_capacity_reports_ephemeral_storage_when_known),
        cmocka_unit_test(test_lease_is_held_by_the_node_and_owned_by_it),
        cmocka_unit_test(test_secret_data_is_decoded_and_bad_entries_name_the_key_not_the_value),
        cmocka_unit_test(test_string_lists_sort_and_drop_repeats),
        cmocka_unit_test(test_records_round_trip_and_refuse_what_they_lack),
        cmocka_unit_test(test_registration_takes_the_highest_1x_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
