/*
 * The volume manager's memory on disk. Every publication and every staging
 * gets a record, vol_data.json, written before the driver is called and
 * removed once the driver undid it, in the directories the kubelet keeps
 * beside them:
 *
 *   <root>/pods/<uid>/volumes/kubernetes.io~csi/<pv>/vol_data.json
 *   <root>/plugins/kubernetes.io/csi/<driver>/<sha256(handle)>/vol_data.json
 *
 * At start the records are read back: a pod that vanished while kubelet-sim
 * was away still gets its volumes unpublished and unstaged, and volumes of
 * pods that still run count in volumesInUse at once. A record only says
 * "maybe": the driver is asked again (the CSI calls are idempotent).
 *
 * The field names of the kubelet's own vol_data.json are used where it has
 * them (driverName, volumeHandle, specVolID, nodeName); the rest are ours.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kobj/kobj.h"
#include "kubelet-sim/ksim.h"
#include "obs/obs.h"

#define RECORD "vol_data.json"

void ksim_pub_free(ksim_pub *p)
{
    if (!p)
        return;
    free(p->pod_uid);
    free(p->pod_ns);
    free(p->pod_name);
    free(p->vol_name);
    free(p->spec_name);
    free(p->driver);
    free(p->handle);
    free(p->unique);
    free(p->target);
    free(p->staging);
    free(p);
}

void ksim_stage_free(ksim_stage *s)
{
    if (!s)
        return;
    free(s->driver);
    free(s->handle);
    free(s->unique);
    free(s->spec_name);
    free(s->staging);
    free(s);
}

/* ---- the texts ----------------------------------------------------------------------- */

static void put(json_object *o, const char *k, const char *v)
{
    if (v)
        json_object_object_add(o, k, json_object_new_string(v));
}

char *ksim_pub_to_json(const ksim_pub *p, const char *node)
{
    json_object *o = json_object_new_object();
    put(o, "driverName", p->driver);
    put(o, "volumeHandle", p->handle);
    put(o, "specVolID", p->spec_name);
    put(o, "nodeName", node);
    put(o, "volName", p->vol_name);
    put(o, "podNamespace", p->pod_ns);
    put(o, "podName", p->pod_name);
    put(o, "podUID", p->pod_uid);
    put(o, "targetPath", p->target);
    put(o, "stagingPath", p->staging);
    json_object_object_add(o, "attachRequired", json_object_new_boolean(p->attach));
    char *t = kobj_to_text(o, NULL);
    json_object_put(o);
    return t;
}

char *ksim_stage_to_json(const ksim_stage *s, const char *node)
{
    json_object *o = json_object_new_object();
    put(o, "driverName", s->driver);
    put(o, "volumeHandle", s->handle);
    put(o, "specVolID", s->spec_name);
    put(o, "nodeName", node);
    put(o, "stagingPath", s->staging);
    json_object_object_add(o, "attachRequired", json_object_new_boolean(s->attach));
    char *t = kobj_to_text(o, NULL);
    json_object_put(o);
    return t;
}

/* Copies the string `key` of `o`; false when it is missing or empty. */
static bool take(const json_object *o, const char *key, char **dst)
{
    const char *v = kobj_str(o, key);
    if (!v || !*v)
        return false;
    *dst = util_strdup(v);
    return true;
}

int ksim_pub_from_json(const json_object *o, ksim_pub **out)
{
    *out = NULL;
    ksim_pub *p = util_calloc(1, sizeof(*p));
    bool ok = take(o, "driverName", &p->driver) && take(o, "volumeHandle", &p->handle) &&
              take(o, "specVolID", &p->spec_name) && take(o, "volName", &p->vol_name) &&
              take(o, "podNamespace", &p->pod_ns) && take(o, "podName", &p->pod_name) &&
              take(o, "podUID", &p->pod_uid) && take(o, "targetPath", &p->target);
    if (!ok) {
        ksim_pub_free(p);
        return util_err_set(-EINVAL, "a publication record lacks a field");
    }
    take(o, "stagingPath", &p->staging);
    p->attach = kobj_bool(o, "attachRequired", false);
    p->unique = ksim_unique_name(p->driver, p->handle);
    *out = p;
    return 0;
}

int ksim_stage_from_json(const json_object *o, ksim_stage **out)
{
    *out = NULL;
    ksim_stage *s = util_calloc(1, sizeof(*s));
    bool ok = take(o, "driverName", &s->driver) && take(o, "volumeHandle", &s->handle) &&
              take(o, "specVolID", &s->spec_name) && take(o, "stagingPath", &s->staging);
    if (!ok) {
        ksim_stage_free(s);
        return util_err_set(-EINVAL, "a staging record lacks a field");
    }
    s->attach = kobj_bool(o, "attachRequired", false);
    s->unique = ksim_unique_name(s->driver, s->handle);
    *out = s;
    return 0;
}

/* ---- files --------------------------------------------------------------------------- */

int ksim_mkdir_p(const char *path, mode_t mode)
{
    char *p = util_strdup(path);
    int r = 0;
    for (char *s = p + 1; r == 0; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, mode) < 0 && errno != EEXIST)
            r = util_err_set(-errno, "cannot create %s: %m", p);
        *s = c;
        if (c == '\0')
            break;
    }
    free(p);
    return r;
}

static int write_record(const char *dir, const char *text)
{
    int r = ksim_mkdir_p(dir, 0750);
    if (r < 0)
        return r;
    char *path = util_asprintf("%s/" RECORD, dir);
    char *tmp = util_asprintf("%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
    size_t len = strlen(text);
    if (fd < 0 || write(fd, text, len) != (ssize_t)len) {
        r = util_err_set(-EIO, "cannot write %s: %m", tmp);
        if (fd >= 0)
            close(fd);
        unlink(tmp);
    } else {
        close(fd);
        if (rename(tmp, path) < 0)
            r = util_err_set(-errno, "cannot rename %s: %m", tmp);
    }
    free(tmp);
    free(path);
    return r;
}

/* Removes `dir` and its parents while they are empty, up to (not
 * including) `stop`. */
static void rmdir_up(const char *dir, const char *stop)
{
    char *p = util_strdup(dir);
    size_t stop_len = strlen(stop);
    while (strlen(p) > stop_len && strncmp(p, stop, stop_len) == 0 && rmdir(p) == 0) {
        char *slash = strrchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
    free(p);
}

static void unlink_record(const char *dir)
{
    char *path = util_asprintf("%s/" RECORD, dir);
    if (unlink(path) < 0 && errno != ENOENT)
        obs_warn("cannot remove %s: %m", path);
    free(path);
}

int ksim_record_put_pub(const char *root, const char *node, const ksim_pub *p)
{
    char *dir = NULL;
    int r = ksim_pub_dir(root, p->pod_uid, p->spec_name, &dir);
    if (r < 0)
        return r;
    char *text = ksim_pub_to_json(p, node);
    r = write_record(dir, text);
    free(text);
    free(dir);
    return r;
}

int ksim_record_put_stage(const char *root, const char *node, const ksim_stage *s)
{
    char *dir = NULL;
    int r = ksim_stage_dir(root, s->driver, s->handle, &dir);
    if (r < 0)
        return r;
    char *text = ksim_stage_to_json(s, node);
    r = write_record(dir, text);
    free(text);
    free(dir);
    return r;
}

void ksim_record_drop_pub(const char *root, const ksim_pub *p)
{
    char *dir = NULL;
    if (ksim_pub_dir(root, p->pod_uid, p->spec_name, &dir) < 0)
        return;
    unlink_record(dir);
    /* The driver removes what it made at the target; whatever directory
     * is left empty around it is the kubelet's to remove. */
    char *parent = util_strdup(p->target);
    char *slash = strrchr(parent, '/');
    if (slash)
        *slash = '\0';
    rmdir(p->target);
    char *csi_dir = util_asprintf("%s/plugins/kubernetes.io/csi", root);
    if (strcmp(parent, dir) != 0)
        rmdir_up(parent, csi_dir);
    char *pods = util_asprintf("%s/pods", root);
    rmdir_up(dir, pods);
    free(pods);
    free(csi_dir);
    free(parent);
    free(dir);
}

void ksim_record_drop_stage(const char *root, const ksim_stage *s)
{
    char *dir = NULL;
    if (ksim_stage_dir(root, s->driver, s->handle, &dir) < 0)
        return;
    unlink_record(dir);
    rmdir(s->staging);
    char *csi_dir = util_asprintf("%s/plugins/kubernetes.io/csi", root);
    rmdir_up(dir, csi_dir);
    free(csi_dir);
    free(dir);
}

/* ---- reading back -------------------------------------------------------------------- */

static json_object *read_json(const char *path)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return NULL;
    char buf[16384];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    if (n == sizeof(buf))
        return NULL; /* no record is this long */
    return kobj_parse_text(buf, n);
}

/* Calls fn(ud, path) for every <base>/<a>/<mid>/<b>/vol_data.json (mid may
 * be NULL for <base>/<a>/<b>/vol_data.json). */
static void each_record(const char *base, const char *mid, void (*fn)(void *ud, const char *path),
                        void *ud)
{
    DIR *d1 = opendir(base);
    for (struct dirent *a; d1 && (a = readdir(d1));) {
        if (a->d_name[0] == '.')
            continue;
        char *lvl = mid ? util_asprintf("%s/%s/%s", base, a->d_name, mid)
                        : util_asprintf("%s/%s", base, a->d_name);
        DIR *d2 = opendir(lvl);
        for (struct dirent *b; d2 && (b = readdir(d2));) {
            if (b->d_name[0] == '.')
                continue;
            char *path = util_asprintf("%s/%s/" RECORD, lvl, b->d_name);
            if (access(path, F_OK) == 0)
                fn(ud, path);
            free(path);
        }
        if (d2)
            closedir(d2);
        free(lvl);
    }
    if (d1)
        closedir(d1);
}

struct loader {
    const char *node;
    ksim_pub *pubs;
    ksim_stage *stages;
};

/* The record at `path` when it is one of this node's (several
 * kubelet-sims may share a root); NULL otherwise, with a warning for a
 * damaged one. */
static json_object *read_ours(const struct loader *l, const char *path)
{
    json_object *o = read_json(path);
    if (!o) {
        obs_warn("ignoring %s: not a JSON record", path);
        return NULL;
    }
    const char *n = kobj_str(o, "nodeName");
    if (!n || strcmp(n, l->node) != 0) {
        json_object_put(o);
        return NULL;
    }
    return o;
}

static void load_pub(void *ud, const char *path)
{
    struct loader *l = ud;
    json_object *o = read_ours(l, path);
    ksim_pub *p = NULL;
    if (o && ksim_pub_from_json(o, &p) < 0)
        obs_warn("ignoring %s: %s", path, util_err_last());
    if (p) {
        p->next = l->pubs;
        l->pubs = p;
        obs_info("found publication of %s for pod %s/%s (%s) at %s", p->unique, p->pod_ns,
                 p->pod_name, p->pod_uid, p->target);
    }
    json_object_put(o);
}

static void load_stage(void *ud, const char *path)
{
    struct loader *l = ud;
    json_object *o = read_ours(l, path);
    ksim_stage *s = NULL;
    if (o && ksim_stage_from_json(o, &s) < 0)
        obs_warn("ignoring %s: %s", path, util_err_last());
    if (s) {
        s->next = l->stages;
        l->stages = s;
        obs_info("found staging of %s at %s", s->unique, s->staging);
    }
    json_object_put(o);
}

int ksim_records_load(const char *root, const char *node, ksim_pub **pubs, ksim_stage **stages)
{
    struct loader l = {.node = node};
    char *pods = util_asprintf("%s/pods", root);
    each_record(pods, "volumes/kubernetes.io~csi", load_pub, &l);
    free(pods);
    char *csi = util_asprintf("%s/plugins/kubernetes.io/csi", root);
    each_record(csi, NULL, load_stage, &l);
    free(csi);
    *pubs = l.pubs;
    *stages = l.stages;
    return 0;
}
