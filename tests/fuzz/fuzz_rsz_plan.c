/*
 * fuzz_rsz_plan: csi-resizer's pure cores fed arbitrary JSON as the objects
 * they read: {"pvc": claim, "old": its previous copy, "pv": volume, "vac":
 * VolumeAttributesClass, "secret": Secret, "pod": Pod, "flags": integer},
 * read with kobj's JSON reader as the informers read the API's answers. Any
 * member may be missing or of any type. The bytes after that JSON value are
 * the driver's error text, as a driver may send it: any bytes. Every patch
 * built must parse back as JSON, every request must carry the volume's
 * handle, and the plans must keep their own invariants.
 */
#include "resizer/resizer.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kobj/kobj.h"

#include "fuzz.h"

#define DRIVER "csi.example.com"

static void must_parse(char *text)
{
    if (text == NULL)
        return;
    json_object *o = kobj_parse_text(text, strlen(text));
    if (o == NULL)
        abort();
    json_object_put(o);
    free(text);
}

static void count_key(void *ctx, const char *key)
{
    if (key == NULL)
        abort();
    (*(size_t *)ctx)++;
}

static void expand(const rsz_config *cfg, const json_object *pvc, const json_object *pv,
                   const json_object *secret, int64_t flags, const char *err)
{
    time_t now = (time_t)(flags & 0xffffffff);
    rsz_plan plan = {0};
    if (rsz_plan_expand(cfg, pvc, pv, (flags & 16) != 0, (flags & 32) != 0, &plan) == 0) {
        if (plan.step == RSZ_EXPAND && plan.new_size == NULL)
            abort();
        if (plan.step == RSZ_EXPAND)
            must_parse(rsz_patch_in_progress(cfg, pvc, plan.new_size, plan.update_status, now));
        if (plan.new_size != NULL) {
            must_parse(rsz_patch_finished(cfg, pvc, plan.new_size, now));
            must_parse(rsz_patch_pv_capacity(pv, plan.new_size,
                                             kobj_path_str(pv, "spec.capacity.storage")));
        }
    }
    Csi__V1__ControllerExpandVolumeRequest *req = NULL;
    if (rsz_expand_request(cfg, pv, flags >> 8, &req) == 0) {
        if (req == NULL || req->volume_id == NULL ||
            strcmp(req->volume_id, kobj_path_str(pv, "spec.csi.volumeHandle")) != 0)
            abort();
        (void)rsz_request_set_secrets(req, secret);
        rsz_request_free(req);
    } else if (req != NULL) {
        abort();
    }
    const char *ns = NULL, *name = NULL;
    (void)rsz_secret_ref(pv, &ns, &name);
    must_parse(rsz_patch_node_pending(cfg, pvc, now));
    must_parse(rsz_patch_failed(pvc, err, (flags & 64) != 0, now));
    json_object_put(rsz_merge_conditions(pvc, (flags & 128) ? RSZ_COND_RESIZING : NULL, err, now,
                                         (flags & 256) != 0));
    free(rsz_failed_text(kobj_name(pv), DRIVER, err));
    free(rsz_inuse_text(pvc, DRIVER));
    (void)rsz_pv_is_ours(cfg, pv);
    (void)rsz_pv_bound_to(pv, pvc);
    (void)rsz_pvc_needs_resize(pvc);
    (void)rsz_pvc_fs_pending(pvc);
    if (rsz_pvc_resize_status(pvc) == NULL)
        abort();
    (void)rsz_pv_drop_pre_resize(pvc, pv);
}

static void modify(const rsz_config *cfg, const json_object *pvc, const json_object *pv,
                   const json_object *vac, const json_object *secret, int64_t flags,
                   const char *err)
{
    rsz_mod_plan mp = {0};
    rsz_modify_plan(pvc, (flags & 512) != 0, (flags & 1024) != 0, &mp);
    if ((mp.step == RSZ_MOD_START || mp.step == RSZ_MOD_CONTINUE) && mp.target == NULL)
        abort();
    if (mp.slow_forget && mp.slow_mark)
        abort();
    Csi__V1__ControllerModifyVolumeRequest *req = NULL;
    if (rsz_modify_request(pv, vac, pvc, cfg->extra_modify_metadata, &req) == 0) {
        if (req == NULL || req->volume_id == NULL)
            abort();
        (void)rsz_modify_request_set_secrets(req, secret);
        rsz_modify_request_free(req);
    } else if (req != NULL) {
        abort();
    }
    const char *ns = NULL, *name = NULL;
    rsz_modify_secret_ref(pv, &ns, &name);
    if ((ns == NULL) != (name == NULL))
        abort();
    int code = (int)(flags >> 12) & 31;
    const char *status = rsz_modify_failed_status(code);
    if (status == NULL)
        abort();
    must_parse(rsz_patch_modify_status(pvc, status, code, err, (time_t)(flags & 0xffffffff)));
    must_parse(rsz_patch_modify_done(pvc, mp.target != NULL ? mp.target : err));
    must_parse(rsz_patch_modify_rolled_back(pvc));
    must_parse(rsz_patch_pv_vac(err));
    (void)rsz_pvc_vac(pvc);
    (void)rsz_pvc_current_vac(pvc);
    (void)rsz_pvc_modify_status(pvc);
    (void)rsz_pvc_modify_target(pvc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = NULL;
    size_t used = 0;
    if (kobj_parse((const char *)data, size, &used, &in) < 0 || in == NULL)
        return 0;
    char *err = fuzz_cstr(data + used, size - used);
    if (err == NULL) {
        json_object_put(in);
        return 0;
    }
    int64_t flags = 0;
    (void)kobj_int64(in, "flags", &flags);
    rsz_config cfg = {.driver_name = DRIVER,
                      .single_node_multi_writer = (flags & 1) != 0,
                      .trivial = (flags & 2) != 0,
                      .recover = (flags & 4) != 0,
                      .annotate_resize = (flags & 8) != 0,
                      .modify = true,
                      .extra_modify_metadata = (flags & 2048) != 0};
    const json_object *pvc = kobj_obj(in, "pvc");
    const json_object *old = kobj_obj(in, "old");
    const json_object *pv = kobj_obj(in, "pv");
    const json_object *secret = kobj_obj(in, "secret");

    if (pvc != NULL && pv != NULL) {
        expand(&cfg, pvc, pv, secret, flags, err);
        modify(&cfg, pvc, pv, kobj_obj(in, "vac"), secret, flags, err);
    }
    if (pvc != NULL && old != NULL) {
        (void)rsz_pvc_update_needs_sync(&cfg, old, pvc);
        (void)rsz_modify_update_needs_sync(old, pvc);
    }

    /* The informers hand the cores objects only (kube_object_check). */
    json_object *pod = kobj_obj(in, "pod");
    if (pod != NULL) {
        size_t n = 0;
        (void)rsz_pod_finished(pod);
        bool uses = rsz_pod_uses_claims(pod);
        rsz_pod_claim_keys(pod, count_key, &n);
        if (uses != (n > 0))
            abort();
        /* slimming a pod the cache keeps (unfinished, using claims) keeps
         * what the cache decides on */
        json_object *copy = NULL;
        if (uses && json_object_deep_copy(pod, &copy, NULL) == 0 && copy != NULL) {
            rsz_pod_slim(copy);
            size_t m = 0;
            rsz_pod_claim_keys(copy, count_key, &m);
            if (m != n || rsz_pod_uses_claims(copy) != uses)
                abort();
            json_object_put(copy);
        }
    }
    (void)rsz_inuse_blocks((flags & 4096) != 0, (size_t)(flags & 3));
    (void)rsz_error_final((int)(flags & 31));
    (void)rsz_error_infeasible((int)(flags & 31));
    (void)rsz_error_inuse((int)(flags & 31));
    free(err);
    json_object_put(in);
    return 0;
}
