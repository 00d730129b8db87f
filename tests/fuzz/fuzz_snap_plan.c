/*
 * fuzz_snap_plan: the snapshotter's pure core fed arbitrary JSON as the
 * objects it reads: {"content": VolumeSnapshotContent, "old": its previous
 * copy, "class": VolumeSnapshotClass, "secret": Secret, "message": text,
 * "flags": integer}, read with kobj's JSON reader as the informer reads the
 * API's answers. Any member may be missing or of any type. The bytes after
 * that JSON value are the driver's texts (an error message when "message"
 * is missing, a handle), as a driver may send them: any bytes. Every patch
 * built must parse back as JSON.
 */
#include "snapshotter/snapshotter.h"

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

static void requests(const snap_config *cfg, const json_object *content, const json_object *cls,
                     const json_object *secret)
{
    Csi__V1__CreateSnapshotRequest *req = NULL;
    if (snap_create_request(cfg, content, cls, &req) == 0) {
        if (req == NULL || req->name == NULL || strncmp(req->name, "snapshot-", 9) != 0)
            abort();
        (void)snap_create_set_secrets(req, secret);
        snap_create_request_free(req);
    } else if (req != NULL) {
        abort();
    }
    Csi__V1__DeleteSnapshotRequest del = CSI__V1__DELETE_SNAPSHOT_REQUEST__INIT;
    (void)snap_delete_set_secrets(&del, secret);
    for (size_t i = 0; i < del.n_secrets; i++) {
        free(del.secrets[i]->key);
        free(del.secrets[i]->value);
        free(del.secrets[i]);
    }
    free(del.secrets);
    const char *ns = NULL, *name = NULL;
    (void)snap_secret_ref(content, &ns, &name);
    char *lns = NULL, *lname = NULL;
    if (snap_list_secret_ref(cls, kobj_name(content), &lns, &lname) == 0 &&
        (lns == NULL) != (lname == NULL))
        abort();
    free(lns);
    free(lname);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = NULL;
    size_t used = 0;
    if (kobj_parse((const char *)data, size, &used, &in) < 0 || in == NULL)
        return 0;
    char *raw = fuzz_cstr(data + used, size - used);
    if (raw == NULL) {
        json_object_put(in);
        return 0;
    }
    int64_t flags = 0;
    (void)kobj_int64(in, "flags", &flags);
    snap_config cfg = {.driver_name = DRIVER,
                       .prefix = "snapshot",
                       .uuid_length = (flags & 1) ? (int)((flags >> 8) & 63) : -1,
                       .extra_create_metadata = (flags & 2) != 0,
                       .list_snapshots = (flags & 4) != 0};
    const json_object *content = kobj_get(in, "content");
    const json_object *old = kobj_get(in, "old");
    const json_object *cls = kobj_get(in, "class");
    const json_object *secret = kobj_get(in, "secret");
    const char *message = kobj_str(in, "message");
    if (message == NULL)
        message = raw;

    snap_content d;
    if (snap_content_decode(content, &d) == 0) {
        (void)snap_content_is_ours(&cfg, &d, cls);
        snap_step step = snap_plan(&d);
        if (strcmp(snap_step_name(step), "unknown") == 0)
            abort();
        /* the deletion never deletes a snapshot it cannot name */
        if (step == SNAP_DELETE && d.status_handle == NULL)
            abort();
        requests(&cfg, content, cls, secret);
        snap_result r = {
            .handle = raw, .ready = (flags & 8) != 0, .created_ns = flags, .size = flags >> 4};
        must_parse(snap_patch_status(content, &r, 1));
        must_parse(snap_patch_error(content, message, (time_t)(flags & 0xffffffff)));
        must_parse(snap_patch_clear_status(content));
        must_parse(snap_patch_set_creating(content));
        if (old != NULL)
            (void)snap_update_needs_sync(old, content);
    }
    must_parse(snap_patch_drop_creating());
    char *n = NULL;
    if (snap_name(&cfg, kobj_str(in, "message"), &n) == 0 && n == NULL)
        abort();
    free(n);
    free(raw);
    json_object_put(in);
    return 0;
}
