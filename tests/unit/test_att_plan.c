/*
 * Unit tests for the attacher's pure core (attacher/plan.c), checked against
 * external-attacher v4 behaviour (upstream-behaviour.md A2.2, A2.3, B) and
 * this project's documented differences (error messages cut to the API's
 * 1024-byte limit, the Node annotation as a node-id fallback). Every table
 * row is one rule and names it; a failing row prints its name.
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

#include "attacher/attacher.h"
#include "kobj/kobj.h"
#include "volcap/volcap.h"
#include "table.h"

#define MODE(m) CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__##m

/* ---- names ------------------------------------------------------------------------- */

static void test_finalizer_name_is_sanitized_as_upstream(void **state)
{
    (void)state;
    static const struct {
        const char *row, *driver, *want;
    } rows[] = {
        {"dots become dashes", "ebs.csi.aws.com", "external-attacher/ebs-csi-aws-com"},
        {"slashes and underscores become dashes", "a/b_c", "external-attacher/a-b-c"},
        {"a trailing dash gets an X", "driver.", "external-attacher/driver-X"},
        {"an original trailing dash gets an X too", "driver-", "external-attacher/driver-X"},
        {"letters, digits and dashes stay", "Abc-09", "external-attacher/Abc-09"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *f = att_finalizer(rows[i].driver);
        expect_str(rows[i].row, "finalizer", f, rows[i].want);
        free(f);
    }
    char *l = att_lock_name("ebs.csi.aws.com");
    expect_str("lock name", "lock", l, "external-attacher-leader-ebs.csi.aws.com");
    free(l);
}

/* ---- actions ----------------------------------------------------------------------- */

static void test_va_action_by_state(void **state)
{
    (void)state;
    att_config cfg = {.driver_name = "d.example.com"};
    const char *fin = "external-attacher/d-example-com";
    static const struct {
        const char *row, *va;
        bool forced;
        att_action want;
    } rows[] = {
        {"another attacher's VA is skipped", "{`spec`:{`attacher`:`other`}}", false, ATT_SKIP},
        {"a new VA is attached", "{`spec`:{`attacher`:`d.example.com`}}", false, ATT_ATTACH},
        {"an attached VA is skipped",
         "{`spec`:{`attacher`:`d.example.com`},`status`:{`attached`:true}}", false, ATT_SKIP},
        {"an attached VA is attached again when forced",
         "{`spec`:{`attacher`:`d.example.com`},`status`:{`attached`:true}}", true, ATT_ATTACH},
        {"attached of the wrong type reads as false",
         "{`spec`:{`attacher`:`d.example.com`},`status`:{`attached`:`true`}}", false, ATT_ATTACH},
        {"a deleted VA with our finalizer is detached",
         "{`metadata`:{`deletionTimestamp`:`2024-01-01T00:00:00Z`,`finalizers`:[`external-attacher/"
         "d-example-com`]},`spec`:{`attacher`:`d.example.com`}}",
         false, ATT_DETACH},
        {"a deleted VA without our finalizer is skipped",
         "{`metadata`:{`deletionTimestamp`:`2024-01-01T00:00:00Z`,`finalizers`:[`x`]},`spec`:{`"
         "attacher`:`d.example.com`}}",
         false, ATT_SKIP},
        {"a deleted VA without our finalizer is detached when forced",
         "{`metadata`:{`deletionTimestamp`:`2024-01-01T00:00:00Z`},`spec`:{`attacher`:`d.example."
         "com`}}",
         true, ATT_DETACH},
        {"metadata of the wrong type: attach (never crash)",
         "{`metadata`:7,`spec`:{`attacher`:`d.example.com`}}", false, ATT_ATTACH},
        {"spec of the wrong type: skipped", "{`spec`:[1]}", false, ATT_SKIP},
        {"not even an object: skipped", "[1,2]", false, ATT_SKIP},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *va = J(rows[i].va);
        expect_int(rows[i].row, "action", att_va_action(&cfg, va, fin, rows[i].forced),
                   rows[i].want);
        json_object_put(va);
    }
}

static void test_va_source_rules(void **state)
{
    (void)state;
    static const struct {
        const char *row, *va;
        int rc;
        const char *pv, *msg;
    } rows[] = {
        {"a PV name", "{`metadata`:{`name`:`va`},`spec`:{`source`:{`persistentVolumeName`:`pv1`}}}",
         0, "pv1", NULL},
        {"both is an error",
         "{`metadata`:{`name`:`va`},`spec`:{`source`:{`persistentVolumeName`:`pv1`,`"
         "inlineVolumeSpec`:{}}}}",
         -EINVAL, NULL,
         "VolumeAttachment va: both InlineVolumeSpec and PersistentVolumeName specified"},
        {"neither is an error", "{`metadata`:{`name`:`va`},`spec`:{`source`:{}}}", -EINVAL, NULL,
         "VolumeAttachment va: neither InlineVolumeSpec nor PersistentVolumeName specified"},
        {"an inline volume is not supported",
         "{`metadata`:{`name`:`va`},`spec`:{`source`:{`inlineVolumeSpec`:{}}}}", -ENOTSUP, NULL,
         NULL},
        {"a PV name of the wrong type counts as none",
         "{`metadata`:{`name`:`va`},`spec`:{`source`:{`persistentVolumeName`:5}}}", -EINVAL, NULL,
         NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *va = J(rows[i].va);
        const char *pv = NULL;
        int rc = att_va_source(va, &pv);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        expect_str(rows[i].row, "pv", pv, rows[i].pv);
        if (rows[i].msg)
            expect_str(rows[i].row, "message", util_err_last(), rows[i].msg);
        json_object_put(va);
    }
}

/* ---- node ids ---------------------------------------------------------------------- */

static void test_node_id_resolution_order(void **state)
{
    (void)state;
    const char *csinode = "{`spec`:{`drivers`:[{`name`:`x`,`nodeID`:`x-id`},{`name`:`d`,`nodeID`:`"
                          "csinode-id`}]}}";
    const char *csinode_other = "{`spec`:{`drivers`:[{`name`:`x`,`nodeID`:`x-id`}]}}";
    const char *node = "{`metadata`:{`annotations`:{`csi.volume.kubernetes.io/nodeid`:`{\\`d\\`:"
                       "\\`ann-id\\`}`}}}";
    const char *node_bad = "{`metadata`:{`annotations`:{`csi.volume.kubernetes.io/nodeid`:`not "
                           "json`}}}";
    const char *va = "{`metadata`:{`annotations`:{`csi.alpha.kubernetes.io/node-id`:`va-id`}}}";
    static const struct {
        const char *row;
        int csinode, node, va; /* which fixture: 0 none, 1 good, 2 other/bad */
        int rc;
        const char *id;
        att_node_id_source src;
    } rows[] = {
        {"the CSINode entry wins", 1, 1, 1, 0, "csinode-id", ATT_NODE_ID_CSINODE},
        {"no entry in the CSINode: the Node annotation", 2, 1, 1, 0, "ann-id",
         ATT_NODE_ID_NODE_ANNOTATION},
        {"no CSINode: the Node annotation", 0, 1, 0, 0, "ann-id", ATT_NODE_ID_NODE_ANNOTATION},
        {"detach: no CSINode nor annotation: the VA annotation", 0, 0, 1, 0, "va-id",
         ATT_NODE_ID_VA_ANNOTATION},
        {"detach: an annotation that is no JSON falls through to the VA", 2, 2, 1, 0, "va-id",
         ATT_NODE_ID_VA_ANNOTATION},
        {"attach: nothing found is an error", 0, 0, 0, -ENOENT, NULL, ATT_NODE_ID_NONE},
        {"attach: CSINode without the driver is an error", 2, 2, 0, -ENOENT, NULL,
         ATT_NODE_ID_NONE},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *cn = rows[i].csinode == 1   ? J(csinode)
                          : rows[i].csinode == 2 ? J(csinode_other)
                                                 : NULL;
        json_object *n = rows[i].node == 1 ? J(node) : rows[i].node == 2 ? J(node_bad) : NULL;
        json_object *v = rows[i].va ? J(va) : NULL;
        char *id = NULL;
        att_node_id_source src = ATT_NODE_ID_CSINODE;
        int rc = att_node_id("d", "node-1", cn, n, v, &id, &src);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        expect_str(rows[i].row, "id", id, rows[i].id);
        expect_int(rows[i].row, "source", src, rows[i].src);
        free(id);
        json_object_put(cn);
        json_object_put(n);
        json_object_put(v);
    }
    json_object *cn = J(csinode_other);
    char *id = NULL;
    att_node_id("d", "node-1", cn, NULL, NULL, &id, NULL);
    expect_str("missing entry message", "message", util_err_last(),
               "CSINode node-1 does not contain an entry for driver d");
    json_object_put(cn);
    json_object *wrong = J("{`spec`:{`drivers`:{`name`:`d`}}}");
    expect_int("drivers of the wrong type", "rc",
               att_node_id("d", "n", wrong, NULL, NULL, &id, NULL), -ENOENT);
    json_object_put(wrong);
}

/* ---- requests ---------------------------------------------------------------------- */

#define PV_BASE                                                                                    \
    "{`metadata`:{`name`:`pv1`},`spec`:{`accessModes`:%s,%s`csi`:{`driver`:`d`,`volumeHandle`:`"   \
    "vol-"                                                                                         \
    "1`%s}}}"

static json_object *pv_with(const char *modes, const char *spec_extra, const char *csi_extra)
{
    char buf[2048];
    snprintf(buf, sizeof(buf), PV_BASE, modes, spec_extra, csi_extra);
    return J(buf);
}

static void test_access_modes_whole_list_to_one_capability(void **state)
{
    (void)state;
    static const struct {
        const char *row, *modes;
        bool snmw;
        int rc, mode;
    } rows[] = {
        {"RWO with SINGLE_NODE_MULTI_WRITER", "[`ReadWriteOnce`]", true, 0,
         MODE(SINGLE_NODE_MULTI_WRITER)},
        {"RWO without the cap", "[`ReadWriteOnce`]", false, 0, MODE(SINGLE_NODE_WRITER)},
        {"RWOP with the cap", "[`ReadWriteOncePod`]", true, 0, MODE(SINGLE_NODE_SINGLE_WRITER)},
        {"RWOP without the cap", "[`ReadWriteOncePod`]", false, 0, MODE(SINGLE_NODE_WRITER)},
        {"RWX", "[`ReadWriteMany`]", false, 0, MODE(MULTI_NODE_MULTI_WRITER)},
        {"RWX overrides RWO", "[`ReadWriteOnce`,`ReadWriteMany`]", true, 0,
         MODE(MULTI_NODE_MULTI_WRITER)},
        {"ROX", "[`ReadOnlyMany`]", true, 0, MODE(MULTI_NODE_READER_ONLY)},
        {"ROX with RWO is an error", "[`ReadOnlyMany`,`ReadWriteOnce`]", true, -EINVAL, 0},
        {"RWOP with another mode is an error", "[`ReadWriteOncePod`,`ReadWriteOnce`]", true,
         -EINVAL, 0},
        {"no mode is an error", "[]", true, -EINVAL, 0},
        {"an unknown mode alone is an error", "[`Sometimes`]", true, -EINVAL, 0},
        {"a list of the wrong type is an error", "`ReadWriteOnce`", true, -EINVAL, 0},
        {"items of the wrong type are ignored", "[1,`ReadWriteOnce`]", false, 0,
         MODE(SINGLE_NODE_WRITER)},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = pv_with(rows[i].modes, "", "");
        Csi__V1__VolumeCapability__AccessMode__Mode m;
        int rc = volcap_pv_access_mode(pv, rows[i].snmw, &m);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        if (rc == 0)
            expect_int(rows[i].row, "mode", m, rows[i].mode);
        json_object_put(pv);
    }
}

static void test_publish_request_fields(void **state)
{
    (void)state;
    static const struct {
        const char *row, *spec_extra, *csi_extra, *default_fs;
        bool publish_readonly;
        bool block;
        const char *fs;    /* NULL: unset */
        const char *flags; /* joined by , */
        bool readonly;
        const char *ctx; /* k=v, sorted */
    } rows[] = {
        {"mount with the PV's fsType", "", ",`fsType`:`xfs`", "ext4", false, false, "xfs", "",
         false, ""},
        {"fsType empty: --default-fstype", "", ",`fsType`:``", "ext4", false, false, "ext4", "",
         false, ""},
        {"no fsType and no default: unset", "", "", "", false, false, NULL, "", false, ""},
        {"Block: no mount, no fsType", "`volumeMode`:`Block`,", ",`fsType`:`xfs`", "ext4", false,
         true, NULL, "", false, ""},
        {"mount options become mount flags", "`mountOptions`:[`noatime`,`nfsvers=4.1`],", "", NULL,
         false, false, NULL, "noatime,nfsvers=4.1", false, ""},
        {"readonly with PUBLISH_READONLY", "", ",`readOnly`:true", NULL, true, false, NULL, "",
         true, ""},
        {"readonly without PUBLISH_READONLY is false", "", ",`readOnly`:true", NULL, false, false,
         NULL, "", false, ""},
        {"readOnly of the wrong type is false", "", ",`readOnly`:`yes`", NULL, true, false, NULL,
         "", false, ""},
        {"volumeAttributes become volume_context", "",
         ",`volumeAttributes`:{`a`:`1`,`b`:`2`,`bad`:3}", NULL, false, false, NULL, "", false,
         "a=1,b=2"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        att_config cfg = {.driver_name = "d",
                          .default_fstype = rows[i].default_fs,
                          .publish_readonly = rows[i].publish_readonly,
                          .single_node_multi_writer = true};
        json_object *pv = pv_with("[`ReadWriteOnce`]", rows[i].spec_extra, rows[i].csi_extra);
        Csi__V1__ControllerPublishVolumeRequest *req = NULL;
        int rc = att_publish_request(&cfg, pv, "node-id-1", &req);
        expect_int(rows[i].row, "rc", rc, 0);
        expect_str(rows[i].row, "volume_id", req->volume_id, "vol-1");
        expect_str(rows[i].row, "node_id", req->node_id, "node-id-1");
        Csi__V1__VolumeCapability *cap = req->volume_capability;
        assert_non_null(cap);
        expect_int(rows[i].row, "mode", cap->access_mode->mode, MODE(SINGLE_NODE_MULTI_WRITER));
        expect_int(rows[i].row, "block",
                   cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK,
                   rows[i].block);
        if (!rows[i].block) {
            const char *fs =
                cap->mount->fs_type && *cap->mount->fs_type ? cap->mount->fs_type : NULL;
            expect_str(rows[i].row, "fs_type", fs, rows[i].fs);
            char flags[256] = "";
            for (size_t j = 0; j < cap->mount->n_mount_flags; j++) {
                if (j)
                    strcat(flags, ",");
                strcat(flags, cap->mount->mount_flags[j]);
            }
            expect_str(rows[i].row, "mount flags", flags, rows[i].flags);
        }
        expect_int(rows[i].row, "readonly", req->readonly, rows[i].readonly);
        char ctx[256] = "";
        for (size_t j = 0; j < req->n_volume_context; j++) {
            char kv[64];
            snprintf(kv, sizeof(kv), "%s%s=%s", j ? "," : "", req->volume_context[j]->key,
                     req->volume_context[j]->value);
            strcat(ctx, kv);
        }
        expect_str(rows[i].row, "volume_context", ctx, rows[i].ctx);
        att_request_free(&req->base);
        json_object_put(pv);
    }
}

static void test_request_errors_on_malformed_pv(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pv, *msg;
    } rows[] = {
        {"not a CSI volume", "{`metadata`:{`name`:`p`},`spec`:{`accessModes`:[`ReadWriteOnce`]}}",
         "PersistentVolume p is not a CSI volume"},
        {"csi of the wrong type", "{`metadata`:{`name`:`p`},`spec`:{`csi`:`x`}}",
         "PersistentVolume p is not a CSI volume"},
        {"no handle", "{`metadata`:{`name`:`p`},`spec`:{`csi`:{`driver`:`d`}}}",
         "PersistentVolume p has no spec.csi.volumeHandle"},
        {"handle of the wrong type", "{`metadata`:{`name`:`p`},`spec`:{`csi`:{`volumeHandle`:1}}}",
         "PersistentVolume p has no spec.csi.volumeHandle"},
        {"spec of the wrong type", "{`metadata`:{`name`:`p`},`spec`:1}",
         "PersistentVolume p is not a CSI volume"},
        {"not even an object", "`pv`", "PersistentVolume  is not a CSI volume"},
    };
    att_config cfg = {.driver_name = "d"};
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv);
        Csi__V1__ControllerPublishVolumeRequest *req = NULL;
        expect_int(rows[i].row, "publish rc", att_publish_request(&cfg, pv, "n", &req), -EINVAL);
        expect_str(rows[i].row, "message", util_err_last(), rows[i].msg);
        assert_null(req);
        Csi__V1__ControllerUnpublishVolumeRequest *ureq = NULL;
        expect_int(rows[i].row, "unpublish rc", att_unpublish_request(pv, "n", &ureq), -EINVAL);
        assert_null(ureq);
        json_object_put(pv);
    }
}

static void test_unpublish_request_and_secrets(void **state)
{
    (void)state;
    json_object *pv = pv_with("[`ReadWriteOnce`]", "",
                              ",`controllerPublishSecretRef`:{`name`:`s`,`namespace`:`ns`}");
    const char *ns, *name;
    expect_int("secret ref", "rc", att_secret_ref(pv, &ns, &name), 0);
    expect_str("secret ref", "namespace", ns, "ns");
    expect_str("secret ref", "name", name, "s");
    Csi__V1__ControllerUnpublishVolumeRequest *req = NULL;
    expect_int("unpublish", "rc", att_unpublish_request(pv, "nid", &req), 0);
    expect_str("unpublish", "volume_id", req->volume_id, "vol-1");
    expect_str("unpublish", "node_id", req->node_id, "nid");
    /* "user" -> dXNlcg==, "p4ss!" -> cDRzcyE=, "" -> "" */
    json_object *secret = J("{`data`:{`user`:`dXNlcg==`,`pass`:`cDRzcyE=`,`empty`:``}}");
    expect_int("unpublish secrets", "rc", att_unpublish_set_secrets(req, secret), 0);
    expect_int("unpublish secrets", "n", (long long)req->n_secrets, 3);
    for (size_t i = 0; i < req->n_secrets; i++) {
        const char *k = req->secrets[i]->key, *v = req->secrets[i]->value;
        const char *want = strcmp(k, "user") == 0 ? "user" : strcmp(k, "pass") == 0 ? "p4ss!" : "";
        expect_str(k, "decoded value", v, want);
    }
    att_request_free(&req->base);

    att_config cfg = {.driver_name = "d"};
    Csi__V1__ControllerPublishVolumeRequest *preq = NULL;
    expect_int("publish", "rc", att_publish_request(&cfg, pv, "nid", &preq), 0);
    expect_int("publish secrets", "rc", att_publish_set_secrets(preq, secret), 0);
    expect_int("publish secrets", "n", (long long)preq->n_secrets, 3);
    json_object *bad = J("{`data`:{`k`:`not base64!`}}");
    att_request_free(&preq->base);
    preq = NULL;
    att_publish_request(&cfg, pv, "nid", &preq);
    expect_int("bad base64", "rc", att_publish_set_secrets(preq, bad), -EINVAL);
    expect_str("bad base64", "message", util_err_last(),
               "secret data for key \"k\" is not base64 text");
    att_request_free(&preq->base);
    json_object *nodata = J("{`data`:[1]}");
    preq = NULL;
    att_publish_request(&cfg, pv, "nid", &preq);
    expect_int("data of the wrong type: no secrets", "rc", att_publish_set_secrets(preq, nodata),
               0);
    expect_int("data of the wrong type: no secrets", "n", (long long)preq->n_secrets, 0);
    att_request_free(&preq->base);
    json_object_put(nodata);
    json_object_put(bad);
    json_object_put(secret);
    json_object_put(pv);

    static const struct {
        const char *row, *csi_extra;
        int rc;
    } refs[] = {
        {"no ref", "", 0},
        {"ref without namespace", ",`controllerPublishSecretRef`:{`name`:`s`}", -EINVAL},
        {"ref of the wrong type is none", ",`controllerPublishSecretRef`:`s`", 0},
    };
    for (size_t i = 0; i < N_ROWS(refs); i++) {
        json_object *p = pv_with("[`ReadWriteOnce`]", "", refs[i].csi_extra);
        expect_int(refs[i].row, "rc", att_secret_ref(p, &ns, &name), refs[i].rc);
        assert_null(ns);
        assert_null(name);
        json_object_put(p);
    }
}

/* ---- messages and status patches ---------------------------------------------------- */

static char *repeat(char c, size_t n)
{
    char *s = malloc(n + 1);
    assert_non_null(s);
    memset(s, c, n);
    s[n] = '\0';
    return s;
}

static void test_message_fits_the_api_limit(void **state)
{
    (void)state;
    size_t mlen = strlen(ATT_TRUNCATED_MARKER);
    /* exactly the limit: unchanged */
    char *s = repeat('a', ATT_MESSAGE_MAX);
    char *f = att_message_fit(s);
    expect_str("1024 bytes stay whole", "text", f, s);
    free(f);
    free(s);
    /* one byte over: cut, marker appended, exactly at the limit */
    s = repeat('a', ATT_MESSAGE_MAX + 1);
    f = att_message_fit(s);
    expect_int("1025 bytes are cut", "length", (long long)strlen(f), ATT_MESSAGE_MAX);
    expect_str("1025 bytes are cut", "ending", f + ATT_MESSAGE_MAX - mlen, ATT_TRUNCATED_MARKER);
    free(f);
    free(s);
    /* a 3-byte character straddling the cut is dropped whole */
    size_t cut = ATT_MESSAGE_MAX - mlen;
    s = repeat('b', 2000);
    s[cut - 1] = (char)0xe2;
    s[cut] = (char)0x82;
    s[cut + 1] = (char)0xac; /* EURO SIGN over bytes cut-1..cut+1 */
    f = att_message_fit(s);
    expect_int("multibyte at the cut", "length", (long long)strlen(f), ATT_MESSAGE_MAX - 1);
    expect_int("multibyte at the cut", "last kept byte", (unsigned char)f[cut - 2], 'b');
    expect_str("multibyte at the cut", "ending", f + cut - 1, ATT_TRUNCATED_MARKER);
    free(f);
    /* a character ending right before the cut stays */
    memset(s, 'b', 2000);
    s[cut - 3] = (char)0xe2;
    s[cut - 2] = (char)0x82;
    s[cut - 1] = (char)0xac;
    f = att_message_fit(s);
    expect_int("multibyte before the cut", "length", (long long)strlen(f), ATT_MESSAGE_MAX);
    assert_memory_equal(f + cut - 3, "\xe2\x82\xac", 3);
    free(f);
    free(s);
    /* invalid UTF-8 becomes '?' */
    f = att_message_fit("ok \xff\xfe done \xc3\xa9 \xc3");
    expect_str("invalid bytes", "text", f, "ok ?? done \xc3\xa9 ?");
    free(f);
    f = att_message_fit(NULL);
    expect_str("NULL", "text", f, "");
    free(f);
}

/* A ControllerPublish answer with one publish_context entry devicePath=/dev/x. */
struct publish_answer {
    Csi__V1__ControllerPublishVolumeResponse r;
    Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry e, *ep;
};

static Csi__V1__ControllerPublishVolumeResponse *publish_answer_init(struct publish_answer *a)
{
    a->r =
        (Csi__V1__ControllerPublishVolumeResponse)CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__INIT;
    a->e = (Csi__V1__ControllerPublishVolumeResponse__PublishContextEntry)
        CSI__V1__CONTROLLER_PUBLISH_VOLUME_RESPONSE__PUBLISH_CONTEXT_ENTRY__INIT;
    a->e.key = "devicePath";
    a->e.value = "/dev/x";
    a->ep = &a->e;
    a->r.n_publish_context = 1;
    a->r.publish_context = &a->ep;
    return &a->r;
}

static void test_status_patches(void **state)
{
    (void)state;
    time_t t = 1700000000; /* 2023-11-14T22:13:20Z */
    char *p = att_status_attach_error("boom", 0, t);
    expect_str(
        "attach error before the driver call: no errorCode", "patch", p,
        "{\"status\":{\"attachError\":{\"message\":\"boom\",\"time\":\"2023-11-14T22:13:20Z\"}}}");
    free(p);
    p = att_status_attach_error("boom", CSI_INTERNAL, t);
    expect_str("attach error from the driver: the gRPC code as errorCode", "patch", p,
               "{\"status\":{\"attachError\":{\"message\":\"boom\",\"time\":\"2023-11-"
               "14T22:13:20Z\",\"errorCode\":13}}}");
    free(p);
    p = att_status_detach_error("it's \"quoted\"", t);
    expect_str(
        "detach error escapes", "patch", p,
        "{\"status\":{\"detachError\":{\"message\":\"it's \\\"quoted\\\"\",\"time\":\"2023-11-"
        "14T22:13:20Z\"}}}");
    free(p);
    p = att_status_detached();
    expect_str(
        "detached", "patch", p,
        "{\"status\":{\"attached\":false,\"detachError\":null,\"attachmentMetadata\":null}}");
    free(p);
    p = att_status_attached_plain();
    expect_str("trivial handler", "patch", p, "{\"status\":{\"attached\":true}}");
    free(p);
    p = att_status_attached(NULL);
    expect_str("attached without context", "patch", p,
               "{\"status\":{\"attached\":true,\"attachmentMetadata\":null,\"attachError\":null}}");
    free(p);
    struct publish_answer a;
    Csi__V1__ControllerPublishVolumeResponse *r = publish_answer_init(&a);
    p = att_status_attached(r);
    expect_str("attached with metadata", "patch", p,
               "{\"status\":{\"attached\":true,\"attachmentMetadata\":{\"devicePath\":\"/dev/x\"},"
               "\"attachError\":null}}");
    free(p);
    /* a long error lands cut to the limit inside the patch */
    char *long_msg = repeat('x', 2000);
    p = att_status_attach_error(long_msg, CSI_INTERNAL, t);
    json_object *o = json_tokener_parse(p);
    json_object *st = NULL, *ae = NULL, *m = NULL;
    json_object_object_get_ex(o, "status", &st);
    json_object_object_get_ex(st, "attachError", &ae);
    json_object_object_get_ex(ae, "message", &m);
    expect_int("long error", "message length", json_object_get_string_len(m), ATT_MESSAGE_MAX);
    json_object_put(o);
    free(p);
    free(long_msg);
    csi_status cs = {.code = CSI_FAILED_PRECONDITION};
    strcpy(cs.message, "published elsewhere");
    p = csi_status_text(&cs);
    expect_str("error text as upstream's", "text", p,
               "rpc error: code = FailedPrecondition desc = published elsewhere");
    free(p);
}

static void test_status_is_current(void **state)
{
    (void)state;
    struct publish_answer a;
    Csi__V1__ControllerPublishVolumeResponse *r = publish_answer_init(&a);
    static const struct {
        const char *row, *va;
        bool with_context, want;
    } rows[] = {
        {"no status", "{}", false, false},
        {"not attached", "{`status`:{`attached`:false}}", false, false},
        {"attached is a string", "{`status`:{`attached`:`true`}}", false, false},
        {"attached, no context either side", "{`status`:{`attached`:true}}", false, true},
        {"attached, null metadata, no context",
         "{`status`:{`attached`:true,`attachmentMetadata`:null}}", false, true},
        {"attached with an old error", "{`status`:{`attached`:true,`attachError`:{`message`:`x`}}}",
         false, false},
        {"attached, null error", "{`status`:{`attached`:true,`attachError`:null}}", false, true},
        {"same metadata",
         "{`status`:{`attached`:true,`attachmentMetadata`:{`devicePath`:`/dev/x`}}}", true, true},
        {"other value", "{`status`:{`attached`:true,`attachmentMetadata`:{`devicePath`:`/dev/y`}}}",
         true, false},
        {"value of another type",
         "{`status`:{`attached`:true,`attachmentMetadata`:{`devicePath`:7}}}", true, false},
        {"extra key",
         "{`status`:{`attached`:true,`attachmentMetadata`:{`devicePath`:`/dev/x`,`a`:`b`}}}", true,
         false},
        {"metadata missing", "{`status`:{`attached`:true}}", true, false},
        {"metadata left over, none now",
         "{`status`:{`attached`:true,`attachmentMetadata`:{`devicePath`:`/dev/x`}}}", false, false},
        {"status of another type", "{`status`:[1]}", false, false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        json_object *va = J(rows[i].va);
        bool got = att_status_is_current(va, rows[i].with_context ? r : NULL);
        expect_int(rows[i].row, "current", got, rows[i].want);
        json_object_put(va);
    }
}

static void test_va_metadata_patch(void **state)
{
    (void)state;
    const char *fin = "external-attacher/d";
    static const struct {
        const char *row, *va;
        int rc;
        const char *want;
    } rows[] = {
        {"fresh VA: finalizer list and annotation map added, both guarded",
         "{`metadata`:{`name`:`v`}}", 0,
         "[{\"op\":\"test\",\"path\":\"/metadata/finalizers\",\"value\":null},{\"op\":\"add\","
         "\"path\":\"/metadata/finalizers\",\"value\":[\"external-attacher/d\"]},{\"op\":\"test\","
         "\"path\":\"/metadata/annotations\",\"value\":null},{\"op\":\"add\",\"path\":\"/metadata/"
         "annotations\",\"value\":{\"csi.alpha.kubernetes.io/node-id\":\"nid\"}}]"},
        {"existing lists: appended and set",
         "{`metadata`:{`name`:`v`,`finalizers`:[`x`],`annotations`:{`a`:`b`}}}", 0,
         "[{\"op\":\"add\",\"path\":\"/metadata/finalizers/-\",\"value\":\"external-attacher/d\"},"
         "{\"op\":\"add\",\"path\":\"/metadata/annotations/csi.alpha.kubernetes.io~1node-id\","
         "\"value\":\"nid\"}]"},
        {"finalizer there, annotation stale: only the annotation",
         "{`metadata`:{`finalizers`:[`external-attacher/d`],`annotations`:{`csi.alpha.kubernetes."
         "io/node-id`:`old`}}}",
         0,
         "[{\"op\":\"add\",\"path\":\"/metadata/annotations/csi.alpha.kubernetes.io~1node-id\","
         "\"value\":\"nid\"}]"},
        {"both in place: no write",
         "{`metadata`:{`finalizers`:[`external-attacher/d`],`annotations`:{`csi.alpha.kubernetes."
         "io/node-id`:`nid`}}}",
         0, NULL},
        {"finalizers of the wrong type: refused", "{`metadata`:{`finalizers`:`x`}}", -EINVAL, NULL},
        {"annotations of the wrong type: refused", "{`metadata`:{`annotations`:[1]}}", -EINVAL,
         NULL},
        {"metadata of the wrong type: refused", "{`metadata`:[]}", -EINVAL, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *va = J(rows[i].va);
        char *p = NULL;
        expect_int(rows[i].row, "rc", att_patch_va_meta(va, fin, "nid", &p), rows[i].rc);
        expect_str(rows[i].row, "patch", p, rows[i].want);
        free(p);
        json_object_put(va);
    }
    json_object *va = J("{`metadata`:{`finalizers`:[`external-attacher/d`]}}");
    assert_true(att_va_last_finalizer(va, fin));
    json_object_put(va);
    va = J("{`metadata`:{`finalizers`:[`external-attacher/d`,`other`]}}");
    assert_false(att_va_last_finalizer(va, fin));
    json_object_put(va);
}

static void test_reconcile_and_resource_versions(void **state)
{
    (void)state;
    const char *nodes[] = {"a", NULL, "b"};
    assert_true(att_published_on(nodes, 3, "b"));
    assert_false(att_published_on(nodes, 3, "c"));
    assert_false(att_published_on(nodes, 3, NULL));
    expect_int("rv less", "cmp", kobj_rv_cmp("9", "10"), -1);
    expect_int("rv equal", "cmp", kobj_rv_cmp("10", "10"), 0);
    expect_int("rv greater", "cmp", kobj_rv_cmp("11", "10"), 1);
    expect_int("rv not a number", "cmp", kobj_rv_cmp("a1", "10"), -2);
    expect_int("rv missing", "cmp", kobj_rv_cmp(NULL, "10"), -2);
}

static void test_capabilities_choose_the_handler(void **state)
{
    (void)state;
    csi_caps caps = {0};
    assert_false(att_caps_publish(&caps));
    caps.plugin = 1u << CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
    assert_false(att_caps_publish(&caps));
    caps.controller =
        1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_UNPUBLISH_VOLUME;
    assert_true(att_caps_publish(&caps));
    assert_false(att_caps_list_published(&caps));
    caps.controller |=
        (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES) |
        (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES_PUBLISHED_NODES);
    assert_true(att_caps_list_published(&caps));
    att_config cfg = {0};
    att_config_set_caps(&cfg, &caps);
    assert_false(cfg.publish_readonly);
    caps.controller |=
        (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__PUBLISH_READONLY) |
        (1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER);
    att_config_set_caps(&cfg, &caps);
    assert_true(cfg.publish_readonly);
    assert_true(cfg.single_node_multi_writer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_finalizer_name_is_sanitized_as_upstream),
        cmocka_unit_test(test_va_action_by_state),
        cmocka_unit_test(test_va_source_rules),
        cmocka_unit_test(test_node_id_resolution_order),
        cmocka_unit_test(test_access_modes_whole_list_to_one_capability),
        cmocka_unit_test(test_publish_request_fields),
        cmocka_unit_test(test_request_errors_on_malformed_pv),
        cmocka_unit_test(test_unpublish_request_and_secrets),
        cmocka_unit_test(test_message_fits_the_api_limit),
        cmocka_unit_test(test_status_patches),
        cmocka_unit_test(test_status_is_current),
        cmocka_unit_test(test_va_metadata_patch),
        cmocka_unit_test(test_reconcile_and_resource_versions),
        cmocka_unit_test(test_capabilities_choose_the_handler),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
