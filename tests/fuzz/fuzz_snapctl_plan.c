/*
 * fuzz_snapctl_plan: snapshot-controller-sim's pure core fed arbitrary JSON
 * as the objects its syncs read: {"snapshot", "class", "classes", "pvc",
 * "pv", "content", "flags": [content_deleted, others, restoring]}. Any member
 * may be missing or of any type. Every text a step writes must be JSON that
 * parses back; every Event has a reason and a message.
 */
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "snapshot-controller-sim/snapctl.h"
#include "fuzz.h"

/* A built text is JSON (or NULL). */
static void must_parse(const char *text)
{
    if (text == NULL)
        return;
    json_object *o = kobj_parse_text(text, strlen(text));
    if (o == NULL)
        abort();
    json_object_put(o);
}

static void check_plan(const snapctl_plan *p)
{
    must_parse(p->step == SNAPCTL_ADD_CONTENT_FINALIZER ? NULL : p->text);
    for (int i = 0; i < 2; i++)
        if (p->event[i].type && (!p->event[i].reason || !p->event[i].message))
            abort();
    bool writes = p->step != SNAPCTL_NONE && p->step != SNAPCTL_FAIL;
    if (writes && p->step != SNAPCTL_DELETE_CONTENT && !p->text)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_object *in = kobj_parse_text((const char *)data, size);
    if (in == NULL)
        return 0;
    const json_object *snap = kobj_get(in, "snapshot");
    const json_object *content = kobj_get(in, "content");
    const json_object *flags = kobj_arr(in, "flags");
    snapctl_in si = {.snapshot = snap,
                     .cls = kobj_get(in, "class"),
                     .classes = kobj_get(in, "classes"),
                     .pvc = kobj_get(in, "pvc"),
                     .pv = kobj_get(in, "pv"),
                     .content = content,
                     .content_deleted = json_object_get_boolean(kobj_at(flags, 0)),
                     .pvc_used_by_others = json_object_get_boolean(kobj_at(flags, 1)),
                     .restoring = json_object_get_boolean(kobj_at(flags, 2)),
                     .now = 1700000000};
    const snapctl_config cfg = {.prevent_volume_mode_conversion = true};
    snapctl_plan p;
    if (snapctl_plan_snapshot(&cfg, &si, &p) == 0)
        check_plan(&p);
    snapctl_plan_clear(&p);
    if (snapctl_plan_content(content, snap, &p) == 0)
        check_plan(&p);
    snapctl_plan_clear(&p);

    free(snapctl_content_for(snap));
    free(snapctl_dynamic_content_name(snap));
    free(snapctl_content_snapshot_key(content));
    (void)snapctl_status_stale(snap, content);
    (void)snapctl_pvc_restores(si.pvc, snap);
    (void)snapctl_snapshot_uses_pvc(snap, kobj_str(in, "name"));
    char *ns = NULL, *name = NULL;
    (void)snapctl_secret_ref(si.cls, &ns, &name);
    free(ns);
    free(name);
    json_object_put(in);
    return 0;
}
