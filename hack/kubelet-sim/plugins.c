/*
 * Plugin registration, the kubelet's side: the plugins_registry directory,
 * so the registrar is tested against the protocol and not against itself.
 *
 * As the kubelet's plugin manager and CSI plugin do:
 *   - watch the directory (inotify, plus a scan at start);
 *   - for each socket: GetInfo with a 1 s timeout; type must be CSIPlugin,
 *     the highest parseable version 1.x, a driver already registered from
 *     another socket must have a lower version; an empty endpoint means the
 *     socket itself;
 *   - NodeGetInfo on the endpoint (node id not empty), then the Node
 *     annotation and labels and the CSINode entry (common/nodereg, with the
 *     kubelet's ownerReference and migrated-plugins annotation);
 *   - NotifyRegistrationStatus(true), or (false, why) and undo on any
 *     failure; failed sockets are tried again with backoff;
 *   - a socket that goes away deregisters its driver (CSINode entry and
 *     annotation entry removed; labels stay).
 * It trusts nothing a plugin answers: wrong types, odd versions, hangs and
 * dead sockets are logged and retried, never fatal.
 *
 * The registered drivers and their endpoints are what the volume manager
 * dials (ksim_plugins_endpoint); it hears of every change.
 *
 * Data: one record per socket path in a list under a mutex; work items are
 * socket paths on a common/wq queue (a path is never handled by two workers
 * at once), so each sync compares the directory with the records.
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kobj/kobj.h"
#include "kubelet-sim/ksim.h"
#include "nodereg/nodereg.h"
#include "obs/obs.h"
#include "wq/wq.h"

#define GETINFO_TIMEOUT       (1 * UTIL_SECOND)
#define DIAL_TIMEOUT          (10 * UTIL_SECOND)
#define NODE_GET_INFO_TIMEOUT (2 * UTIL_MINUTE)
#define NOTIFY_TIMEOUT        (5 * UTIL_SECOND)
#define WORKERS               4

typedef struct plugin {
    char *path;
    dev_t dev;
    ino_t ino;
    unsigned gen; /* the socket's creation event this registration answers */
    char *driver;
    char *endpoint;
    long version[KSIM_VERSION_PARTS];
    struct plugin *next;
} plugin;

/* The latest creation event per path: a socket unlinked and created again
 * may get the same inode number back (tmpfs does), so as the kubelet (which
 * keys on the event's timestamp) a new creation means a new registration. */
typedef struct created {
    char *path;
    unsigned gen;
    struct created *next;
} created;

struct ksim_plugins {
    kube_client *kube;
    const char *node;
    const char *dir;
    wq *q;
    int ifd;
    pthread_t workers[WORKERS];
    int n_workers;
    void (*on_change)(void *ud);
    void *on_change_ud;
    pthread_mutex_t mu;
    plugin *plugins; /* registered ones */
    created *created;
    unsigned next_gen;
};

/* ---- records ------------------------------------------------------------------------- */

static plugin *find_path(ksim_plugins *s, const char *path)
{
    for (plugin *p = s->plugins; p; p = p->next)
        if (strcmp(p->path, path) == 0)
            return p;
    return NULL;
}

static void plugin_free(plugin *p)
{
    if (!p)
        return;
    free(p->path);
    free(p->driver);
    free(p->endpoint);
    free(p);
}

/* Takes the record of `path` out of the list (NULL when none). */
static plugin *take(ksim_plugins *s, const char *path)
{
    pthread_mutex_lock(&s->mu);
    plugin **pp = &s->plugins, *p = NULL;
    while (*pp && strcmp((*pp)->path, path) != 0)
        pp = &(*pp)->next;
    if (*pp) {
        p = *pp;
        *pp = p->next;
    }
    pthread_mutex_unlock(&s->mu);
    return p;
}

/* Records a creation event for `path` (under s->mu). */
static void bump(ksim_plugins *s, const char *path)
{
    created *c = s->created;
    while (c && strcmp(c->path, path) != 0)
        c = c->next;
    if (!c) {
        c = util_calloc(1, sizeof(*c));
        c->path = util_strdup(path);
        c->next = s->created;
        s->created = c;
    }
    c->gen = ++s->next_gen;
}

/* The latest creation event of `path`, 0 when none (under s->mu). */
static unsigned gen_of(ksim_plugins *s, const char *path)
{
    for (created *c = s->created; c; c = c->next)
        if (strcmp(c->path, path) == 0)
            return c->gen;
    return 0;
}

static void changed(ksim_plugins *s)
{
    if (s->on_change)
        s->on_change(s->on_change_ud);
}

/* C.10: a socket gone (or replaced) takes its driver off the node. */
static void deregister(ksim_plugins *s, plugin *p)
{
    obs_info("DeRegisterPlugin: driver %s (socket %s)", p->driver, p->path);
    if (nodereg_uninstall(s->kube, s->node, p->driver) < 0)
        obs_error("deregistering driver %s: %s", p->driver, util_err_last());
    plugin_free(p);
    changed(s);
}

int ksim_plugins_endpoint(ksim_plugins *s, const char *driver, char **endpoint)
{
    *endpoint = NULL;
    pthread_mutex_lock(&s->mu);
    for (plugin *p = s->plugins; p && !*endpoint; p = p->next)
        if (strcmp(p->driver, driver) == 0)
            *endpoint = util_strdup(p->endpoint);
    pthread_mutex_unlock(&s->mu);
    return *endpoint ? 0
                     : util_err_set(-ENOENT,
                                    "driver name %s not found in the list of registered CSI "
                                    "drivers",
                                    driver);
}

/* ---- registration -------------------------------------------------------------------- */

static void notify(csi_conn *c, const char *path, bool ok, const char *error)
{
    Pluginregistration__RegistrationStatus st = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
    st.plugin_registered = ok;
    st.error = (char *)(error ? error : "");
    ProtobufCMessage *resp = NULL;
    csi_status cs;
    if (csi_call(c, "/pluginregistration.Registration/NotifyRegistrationStatus", &st.base,
                 &pluginregistration__registration_status_response__descriptor, NOTIFY_TIMEOUT,
                 &resp, &cs) < 0)
        obs_error("NotifyRegistrationStatus(%s) to %s failed: %s: %s", ok ? "true" : "false", path,
                  csi_code_go_name(cs.code), cs.message);
    else
        protobuf_c_message_free_unpacked(resp, NULL);
}

/* C.6-C.8: NodeGetInfo on the endpoint and the API writes. */
static int register_driver(ksim_plugins *s, const char *driver, const char *endpoint)
{
    csi_conn_opts co = {.connect_timeout = DIAL_TIMEOUT};
    csi_conn *c = NULL;
    if (csi_conn_new(endpoint, &co, &c) < 0)
        return util_err_set(-EIO, "cannot connect to driver %s at %s: %s", driver, endpoint,
                            util_err_last());
    Csi__V1__NodeGetInfoResponse *info = NULL;
    csi_status st;
    int r = csi_node_get_info(c, NODE_GET_INFO_TIMEOUT, &info, &st);
    csi_conn_free(c);
    if (r < 0) {
        char *text = csi_status_text(&st);
        r = util_err_set(r, "NodeGetInfo of driver %s failed: %s", driver, text);
        free(text);
        return r;
    }
    nodereg_driver d;
    r = nodereg_driver_from_info(driver, info, &d);
    csi__v1__node_get_info_response__free_unpacked(info, NULL);
    if (r < 0)
        return r;
    r = nodereg_install(s->kube, s->node, &d, NODEREG_KUBELET_MIGRATED_PLUGINS, NULL);
    if (r < 0) {
        char *msg = util_asprintf("error updating Node/CSINode with CSI driver node info: %s",
                                  util_err_last());
        util_err_set(r, "%s", msg);
        free(msg);
    }
    nodereg_driver_clear(&d);
    return r;
}

/* C.3-C.5: checks of the GetInfo answer against what is registered. */
static int validate(ksim_plugins *s, const char *path, const Pluginregistration__PluginInfo *info,
                    long version[KSIM_VERSION_PARTS])
{
    const char *type = info->type ? info->type : "";
    if (strcmp(type, "CSIPlugin") != 0)
        return util_err_set(-EINVAL, "no handler registered for plugin type: %s at socket %s", type,
                            path);
    if (!info->name || !*info->name)
        return util_err_set(-EINVAL, "plugin at socket %s reports an empty name", path);
    int r = ksim_highest_version(info->supported_versions, info->n_supported_versions, version);
    if (r < 0)
        return r;
    pthread_mutex_lock(&s->mu);
    for (plugin *p = s->plugins; p && r == 0; p = p->next)
        if (strcmp(p->driver, info->name) == 0 && strcmp(p->path, path) != 0 &&
            ksim_version_cmp(p->version, version) >= 0)
            r = util_err_set(-EEXIST,
                             "Failed to validate plugin: a version of driver %s is already "
                             "registered (socket %s) with a higher or equal version",
                             info->name, p->path);
    pthread_mutex_unlock(&s->mu);
    return r;
}

static int register_socket(ksim_plugins *s, const char *path, const struct stat *sst, unsigned gen)
{
    csi_conn_opts co = {.connect_timeout = DIAL_TIMEOUT};
    csi_conn *c = NULL;
    if (csi_conn_new(path, &co, &c) < 0)
        return util_err_set(-EIO, "failed to dial socket %s: %s", path, util_err_last());
    Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    csi_status st;
    int r = csi_call(c, "/pluginregistration.Registration/GetInfo", &req.base,
                     &pluginregistration__plugin_info__descriptor, GETINFO_TIMEOUT, &resp, &st);
    if (r < 0) {
        csi_conn_free(c);
        return util_err_set(r,
                            "failed to get plugin info using RPC GetInfo at socket %s: rpc "
                            "error: code = %s desc = %s",
                            path, csi_code_go_name(st.code), st.message);
    }
    const Pluginregistration__PluginInfo *info = (const Pluginregistration__PluginInfo *)resp;
    long version[KSIM_VERSION_PARTS] = {0};
    r = validate(s, path, info, version);
    const char *endpoint = info->endpoint && *info->endpoint ? info->endpoint : path;
    if (r == 0) {
        obs_info("Register plugin %s at endpoint %s (socket %s)", info->name, endpoint, path);
        r = register_driver(s, info->name, endpoint);
        if (r < 0) {
            char *msg = util_strdup(util_err_last());
            /* As the kubelet: a failed registration is undone. */
            if (nodereg_uninstall(s->kube, s->node, info->name) < 0)
                obs_error("undoing the registration of %s: %s", info->name, util_err_last());
            util_err_set(r, "%s", msg);
            free(msg);
        }
    }
    if (r < 0) {
        char *msg = util_strdup(util_err_last());
        notify(c, path, false, msg);
        util_err_set(r, "%s", msg);
        free(msg);
    } else {
        plugin *p = util_calloc(1, sizeof(*p));
        p->path = util_strdup(path);
        p->dev = sst->st_dev;
        p->ino = sst->st_ino;
        p->gen = gen;
        p->driver = util_strdup(info->name);
        p->endpoint = util_strdup(endpoint);
        memcpy(p->version, version, sizeof(version));
        pthread_mutex_lock(&s->mu);
        p->next = s->plugins;
        s->plugins = p;
        pthread_mutex_unlock(&s->mu);
        obs_info("Registered driver %s on node %s", info->name, s->node);
        notify(c, path, true, NULL);
        changed(s);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    csi_conn_free(c);
    return r;
}

/* Level-triggered: makes the records agree with the directory for `path`. */
static int sync_path(ksim_plugins *s, const char *path)
{
    struct stat st;
    bool is_sock = lstat(path, &st) == 0 && S_ISSOCK(st.st_mode);
    pthread_mutex_lock(&s->mu);
    plugin *p = find_path(s, path);
    unsigned gen = gen_of(s, path);
    bool same = p && is_sock && p->dev == st.st_dev && p->ino == st.st_ino && p->gen == gen;
    pthread_mutex_unlock(&s->mu);
    if (same)
        return 0;
    if (p)
        deregister(s, take(s, path)); /* gone, or a new socket in its place */
    if (!is_sock)
        return 0;
    return register_socket(s, path, &st, gen);
}

static void *worker_main(void *arg)
{
    ksim_plugins *s = arg;
    util_thread_name("plugins");
    char *key = NULL;
    while (wq_get(s->q, &key) == 0) {
        if (sync_path(s, key) < 0) {
            obs_error("%s (will retry)", util_err_last());
            wq_add_rate_limited(s->q, key);
        } else {
            wq_forget(s->q, key);
        }
        wq_done(s->q, key);
        free(key);
        key = NULL;
    }
    return NULL;
}

/* ---- the directory ------------------------------------------------------------------- */

/* `create`: a creation event (or the scan at start) rather than a removal. */
static void queue_name(ksim_plugins *s, const char *name, bool create)
{
    if (name[0] == '.')
        return; /* the kubelet ignores hidden files */
    char *path = util_asprintf("%s/%s", s->dir, name);
    if (create) {
        pthread_mutex_lock(&s->mu);
        bump(s, path);
        pthread_mutex_unlock(&s->mu);
    }
    wq_add(s->q, path);
    free(path);
}

static int scan(ksim_plugins *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return util_err_set(-errno, "cannot read %s: %m", s->dir);
    for (struct dirent *e; (e = readdir(d));)
        queue_name(s, e->d_name, true);
    closedir(d);
    return 0;
}

void ksim_plugins_readable(ksim_plugins *s)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(s->ifd, buf, sizeof(buf));
    for (ssize_t off = 0; n > 0 && off < n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        if (ev->len > 0)
            queue_name(s, ev->name, (ev->mask & (IN_CREATE | IN_MOVED_TO)) != 0);
        if (ev->mask & IN_Q_OVERFLOW)
            scan(s);
        off += (ssize_t)(sizeof(*ev) + ev->len);
    }
}

int ksim_plugins_fd(const ksim_plugins *s)
{
    return s->ifd;
}

/* ---- life ---------------------------------------------------------------------------- */

int ksim_plugins_new(kube_client *kube, const char *node, const char *dir, ksim_plugins **out)
{
    ksim_plugins *s = util_calloc(1, sizeof(*s));
    s->kube = kube;
    s->node = node;
    s->dir = dir;
    s->ifd = -1;
    pthread_mutex_init(&s->mu, NULL);
    wq_opts qo = {.name = "plugins", .base_delay = UTIL_SECOND, .max_delay = 2 * UTIL_MINUTE};
    s->q = wq_new(&qo);
    *out = s;
    return 0;
}

void ksim_plugins_on_change(ksim_plugins *s, void (*fn)(void *ud), void *ud)
{
    s->on_change = fn;
    s->on_change_ud = ud;
}

int ksim_plugins_start(ksim_plugins *s)
{
    s->ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (s->ifd < 0 ||
        inotify_add_watch(s->ifd, s->dir,
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB) < 0)
        return util_err_set(-errno, "cannot watch %s: %m", s->dir);
    for (; s->n_workers < WORKERS; s->n_workers++)
        if (pthread_create(&s->workers[s->n_workers], NULL, worker_main, s) != 0)
            return util_err_set(-EAGAIN, "cannot start worker threads");
    return scan(s);
}

void ksim_plugins_stop(ksim_plugins *s)
{
    wq_shutdown(s->q, false);
    for (int i = 0; i < s->n_workers; i++)
        pthread_join(s->workers[i], NULL);
    s->n_workers = 0;
}

void ksim_plugins_free(ksim_plugins *s)
{
    if (!s)
        return;
    ksim_plugins_stop(s);
    wq_free(s->q);
    while (s->plugins) {
        plugin *p = s->plugins;
        s->plugins = p->next;
        plugin_free(p);
    }
    while (s->created) {
        created *c = s->created;
        s->created = c->next;
        free(c->path);
        free(c);
    }
    if (s->ifd >= 0)
        close(s->ifd);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
