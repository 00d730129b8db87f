/*
 * The I/O half of nodereg: read the Node or CSINode, plan with nodereg.c,
 * send the JSON patch; a failed `test` (422) or a conflict means another
 * writer came first, so read again and plan again, a few times with a
 * growing pause (the kubelet's 10 ms x5 backoff, a little longer).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "nodereg/nodereg.h"
#include "obs/obs.h"
#include "util/util.h"

#define ATTEMPTS 8

static util_duration pause_for(int attempt)
{
    util_duration d = 10 * UTIL_MS;
    for (int i = 0; i < attempt && d < UTIL_SECOND; i++)
        d *= 5;
    return d < UTIL_SECOND ? d : UTIL_SECOND;
}

/* Another writer changed the object since we read it. */
static bool lost_race(const kube_resp *r)
{
    return r->code == 422 || r->code == 409;
}

static int api_error(const char *what, const char *name, const kube_resp *r)
{
    return util_err_set(r->code == 404 ? -ENOENT : -EREMOTEIO, "%s %s: %d %s", what, name, r->code,
                        r->message);
}

/* GETs `name` of `res`: 0 and *obj, -ENOENT (404, *obj NULL) or an error. */
static int get_obj(kube_client *c, const kube_resource *res, const char *name, json_object **obj)
{
    *obj = NULL;
    char *path = kube_path(res, NULL, name, NULL);
    kube_resp r = {0};
    int rc = kube_get(c, path, &r);
    free(path);
    if (rc == 0 && !kobj_typed(r.body, json_type_object))
        rc = util_err_set(-EPROTO, "getting %s %s: the answer is not an object", res->kind, name);
    else if (rc == 0)
        *obj = json_object_get(r.body);
    else
        rc = api_error(r.code == 404 ? "no" : "cannot get", name, &r);
    if (rc == -ENOENT)
        util_err_set(-ENOENT, "%s %s not found", res->kind, name);
    kube_resp_clear(&r);
    return rc;
}

/* PATCHes: 0, 1 when the patch lost a race (read again), or an error. */
static int send_patch(kube_client *c, const kube_resource *res, const char *name, const char *patch)
{
    char *path = kube_path(res, NULL, name, NULL);
    kube_resp r = {0};
    int rc = kube_patch(c, path, KUBE_PATCH_JSON, patch, &r);
    free(path);
    if (rc < 0 && lost_race(&r)) {
        obs_v(4, "%s %s changed meanwhile (%d), reading it again", res->kind, name, r.code);
        rc = 1;
    } else if (rc < 0) {
        rc = api_error("cannot patch", name, &r);
    }
    kube_resp_clear(&r);
    return rc;
}

static int node_write(kube_client *c, const char *node_name, const nodereg_driver *d, bool install,
                      json_object **node_out)
{
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        if (attempt > 0)
            util_sleep(pause_for(attempt - 1));
        json_object *node = NULL;
        int rc = get_obj(c, &KUBE_NODE, node_name, &node);
        if (rc == -ENOENT && !install)
            return 0;
        if (rc < 0)
            return rc;
        char *patch = NULL;
        rc = nodereg_node_patch(node, d, install, &patch);
        if (rc < 0) {
            char *msg = util_asprintf("Node %s: %s", node_name, util_err_last());
            util_err_set(rc, "%s", msg);
            free(msg);
        }
        if (rc == 0 && patch) {
            obs_v(4, "patching Node %s: %s", node_name, patch);
            rc = send_patch(c, &KUBE_NODE, node_name, patch);
        }
        free(patch);
        if (node_out) {
            json_object_put(*node_out);
            *node_out = node;
        } else {
            json_object_put(node);
        }
        if (rc <= 0)
            return rc;
    }
    return util_err_set(-EAGAIN, "Node %s kept changing; gave up after %d attempts", node_name,
                        ATTEMPTS);
}

static int csinode_create(kube_client *c, const char *node_name, const nodereg_driver *d,
                          const char *migrated)
{
    json_object *node = NULL;
    int rc = get_obj(c, &KUBE_NODE, node_name, &node);
    if (rc < 0)
        return rc;
    json_object *obj = nodereg_csinode_new(node, d, migrated);
    json_object_put(node);
    char *path = kube_path(&KUBE_CSINODE, NULL, NULL, NULL);
    kube_resp r = {0};
    rc = kube_create(c, path, obj, &r);
    free(path);
    json_object_put(obj);
    if (rc < 0 && kube_is_already_exists(&r))
        rc = 1; /* someone else created it: patch that one */
    else if (rc < 0)
        rc = api_error("cannot create CSINode", node_name, &r);
    else
        obs_v(2, "created CSINode %s", node_name);
    kube_resp_clear(&r);
    return rc;
}

static int csinode_write(kube_client *c, const char *node_name, const nodereg_driver *d,
                         bool install, const char *migrated)
{
    /* An entry that differs takes two rounds (remove, then add): allow them. */
    int races = 0;
    for (int round = 0; round < 2 * ATTEMPTS && races < ATTEMPTS; round++) {
        json_object *cn = NULL;
        int rc = get_obj(c, &KUBE_CSINODE, node_name, &cn);
        if (rc == -ENOENT) {
            if (!install)
                return 0;
            rc = csinode_create(c, node_name, d, migrated);
        } else if (rc == 0) {
            char *patch = NULL;
            bool again = false;
            rc = nodereg_csinode_patch(cn, d, install, install ? migrated : NULL, &patch, &again);
            if (rc < 0) {
                char *msg = util_asprintf("CSINode %s: %s", node_name, util_err_last());
                util_err_set(rc, "%s", msg);
                free(msg);
            }
            if (rc == 0 && patch) {
                obs_v(4, "patching CSINode %s: %s", node_name, patch);
                rc = send_patch(c, &KUBE_CSINODE, node_name, patch);
                if (rc == 0 && again)
                    rc = 2;
            }
            free(patch);
        }
        json_object_put(cn);
        if (rc <= 0)
            return rc;
        if (rc == 1)
            util_sleep(pause_for(races++));
    }
    return util_err_set(-EAGAIN, "CSINode %s kept changing; gave up after %d attempts", node_name,
                        ATTEMPTS);
}

int nodereg_install(kube_client *c, const char *node_name, const nodereg_driver *d,
                    const char *migrated, json_object **node_out)
{
    if (node_out)
        *node_out = NULL;
    int rc = node_write(c, node_name, d, true, node_out);
    if (rc < 0)
        return rc;
    return csinode_write(c, node_name, d, true, migrated);
}

int nodereg_uninstall(kube_client *c, const char *node_name, const char *driver)
{
    nodereg_driver d = {.name = (char *)driver};
    int rc = csinode_write(c, node_name, &d, false, NULL);
    int rn = node_write(c, node_name, &d, false, NULL);
    return rc < 0 ? rc : rn;
}
