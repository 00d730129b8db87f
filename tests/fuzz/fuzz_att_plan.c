/*
 * fuzz_att_plan: the attacher's pure core fed arbitrary JSON as the objects
 * it reads: {"va": VolumeAttachment, "pv": PersistentVolume, "node": Node,
 * "csinode": CSINode, "secret": Secret, "flags": integer, "rv": [a, b]}.
 * Any member may be missing or of any type.
 */
#include "attacher/attacher.h"

#include <stdlib.h>
#include <time.h>

#include "kobj/kobj.h"
#include "volcap/volcap.h"

#include "fuzz.h"

#define DRIVER "csi.example.com"

static void requests(const att_config *cfg, const json_object *pv, const char *node_id,
                     const json_object *secret)
{
    Csi__V1__VolumeCapability__AccessMode__Mode mode;
    (void)volcap_pv_access_mode(pv, cfg->single_node_multi_writer, &mode);
    const char *ns = NULL;
    const char *name = NULL;
    (void)att_secret_ref(pv, &ns, &name);

    Csi__V1__ControllerPublishVolumeRequest *pub = NULL;
    if (att_publish_request(cfg, pv, node_id, &pub) == 0) {
        (void)att_publish_set_secrets(pub, secret);
        att_request_free(&pub->base);
    }
    Csi__V1__ControllerUnpublishVolumeRequest *unpub = NULL;
    if (att_unpublish_request(pv, node_id, &unpub) == 0) {
        (void)att_unpublish_set_secrets(unpub, secret);
        att_request_free(&unpub->base);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = fuzz_json(data, size);
    if (in == NULL)
        return 0;
    int64_t flags = 0;
    (void)kobj_int64(in, "flags", &flags);
    att_config cfg = {
        .driver_name = DRIVER,
        .default_fstype = (flags & 1) ? "ext4" : NULL,
        .publish_readonly = (flags & 2) != 0,
        .single_node_multi_writer = (flags & 4) != 0,
    };
    const json_object *va = kobj_get(in, "va");
    const json_object *pv = kobj_get(in, "pv");
    const json_object *node = kobj_get(in, "node");
    const json_object *csinode = kobj_get(in, "csinode");
    const json_object *secret = kobj_get(in, "secret");
    char *fin = att_finalizer(DRIVER);

    (void)att_va_is_ours(&cfg, va);
    const char *node_name = att_va_node(va);
    (void)att_va_pv(va);
    (void)att_va_action(&cfg, va, fin, false);
    (void)att_va_action(&cfg, va, fin, true);
    const char *pv_name = NULL;
    (void)att_va_source(va, &pv_name);
    (void)att_va_last_finalizer(va, fin);

    char *node_id = NULL;
    att_node_id_source src = ATT_NODE_ID_NONE;
    if (att_node_id(DRIVER, node_name, csinode, node, (flags & 8) ? va : NULL, &node_id, &src) ==
        0) {
        char *patch = NULL;
        if (att_patch_va_meta(va, fin, node_id, &patch) == 0)
            free(patch);
        const char *published[] = {node_id, "other"};
        (void)att_published_on(published, 2, node_id);
    }
    requests(&cfg, pv, node_id != NULL ? node_id : "node-1", secret);
    free(node_id);

    /* Status texts from any string in the input. */
    const char *msg = kobj_str(in, "message");
    if (msg != NULL) {
        free(att_message_fit(msg));
        free(att_status_attach_error(msg, (int)(flags & 0xff), (time_t)0));
        free(att_status_detach_error(msg, (time_t)1700000000));
    }
    json_object *rv = kobj_arr(in, "rv");
    const char *a = kobj_str_at(rv, 0);
    const char *b = kobj_str_at(rv, 1);
    if (a != NULL && b != NULL)
        (void)kobj_rv_cmp(a, b);

    free(fin);
    json_object_put(in);
    return 0;
}
