/*
 * kubelet-sim: the kubelet's side of plugin registration, for the local
 * world and the registrar's tests, so the registrar is tested against the
 * protocol and not against itself.
 *
 * As the kubelet's plugin manager and CSI plugin do:
 *   - watch the plugins_registry directory (inotify, plus a scan at start);
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
 * Data: one record per socket path in a list under a mutex; work items are
 * socket paths on a common/wq queue (a path is never handled by two workers
 * at once), so each sync compares the directory with the records.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <dirent.h>

#include "kobj/kobj.h"
#include "nodereg/nodereg.h"
#include "obs/obs.h"
#include "util/util.h"
#include "wq/wq.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define GETINFO_TIMEOUT       (1 * UTIL_SECOND)
#define DIAL_TIMEOUT          (10 * UTIL_SECOND)
#define NODE_GET_INFO_TIMEOUT (2 * UTIL_MINUTE)
#define NOTIFY_TIMEOUT        (5 * UTIL_SECOND)
#define WORKERS               4
#define MAX_VERSION_PARTS     3

typedef struct plugin {
    char *path;
    dev_t dev;
    ino_t ino;
    unsigned gen; /* the socket's creation event this registration answers */
    char *driver;
    long version[MAX_VERSION_PARTS];
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

typedef struct sim {
    kube_client *kube;
    const char *node;
    const char *dir;
    wq *q;
    pthread_mutex_t mu;
    plugin *plugins; /* registered ones */
    created *created;
    unsigned next_gen;
} sim;

/* ---- versions ---------------------------------------------------------------------- */

/* "1.0.0", "v1.2", "1.3.0-rc1": major.minor[.patch] with an optional v and a
 * pre-release or build suffix; 0 and the parts, or -1. */
static int parse_version(const char *s, long out[MAX_VERSION_PARTS])
{
    memset(out, 0, sizeof(long) * MAX_VERSION_PARTS);
    if (!s)
        return -1;
    if (*s == 'v')
        s++;
    int n = 0;
    for (;;) {
        if (*s < '0' || *s > '9' || n == MAX_VERSION_PARTS)
            return -1;
        char *end = NULL;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (errno)
            return -1;
        out[n++] = v;
        s = end;
        if (*s != '.')
            break;
        s++;
    }
    if (n < 2 || (*s && *s != '-' && *s != '+'))
        return -1;
    return 0;
}

static int version_cmp(const long a[MAX_VERSION_PARTS], const long b[MAX_VERSION_PARTS])
{
    for (int i = 0; i < MAX_VERSION_PARTS; i++)
        if (a[i] != b[i])
            return a[i] < b[i] ? -1 : 1;
    return 0;
}

/* The highest 1.x version of the list (2.x+ ignored, as the kubelet). */
static int highest_version(const Pluginregistration__PluginInfo *info, long out[MAX_VERSION_PARTS])
{
    if (info->n_supported_versions == 0)
        return util_err_set(-EINVAL, "CSI driver reporting empty array for supported versions");
    bool found = false;
    for (size_t i = 0; i < info->n_supported_versions; i++) {
        long v[MAX_VERSION_PARTS];
        if (parse_version(info->supported_versions[i], v) < 0 || v[0] > 1)
            continue;
        if (!found || version_cmp(out, v) < 0)
            memcpy(out, v, sizeof(v));
        found = true;
    }
    if (!found)
        return util_err_set(-EINVAL,
                            "could not find a highest supported version from the %zu "
                            "version(s) reported by this driver",
                            info->n_supported_versions);
    if (out[0] != 1)
        return util_err_set(-EINVAL,
                            "highest supported version reported by driver is %ld.%ld.%ld, must "
                            "be v1.x",
                            out[0], out[1], out[2]);
    return 0;
}

/* ---- records --------------------------------------------------------------------------- */

static plugin *find_path(sim *s, const char *path)
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
    free(p);
}

/* Takes the record of `path` out of the list (NULL when none). */
static plugin *take(sim *s, const char *path)
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
static void bump(sim *s, const char *path)
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
static unsigned gen_of(sim *s, const char *path)
{
    for (created *c = s->created; c; c = c->next)
        if (strcmp(c->path, path) == 0)
            return c->gen;
    return 0;
}

/* C.10: a socket gone (or replaced) takes its driver off the node. */
static void deregister(sim *s, plugin *p)
{
    obs_info("DeRegisterPlugin: driver %s (socket %s)", p->driver, p->path);
    if (nodereg_uninstall(s->kube, s->node, p->driver) < 0)
        obs_error("deregistering driver %s: %s", p->driver, util_err_last());
    plugin_free(p);
}

/* ---- registration ---------------------------------------------------------------------- */

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
static int register_driver(sim *s, const char *driver, const char *endpoint)
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
    if (r < 0)
        return util_err_set(r, "NodeGetInfo of driver %s failed: rpc error: code = %s desc = %s",
                            driver, csi_code_go_name(st.code), st.message);
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
static int validate(sim *s, const char *path, const Pluginregistration__PluginInfo *info,
                    long version[MAX_VERSION_PARTS])
{
    const char *type = info->type ? info->type : "";
    if (strcmp(type, "CSIPlugin") != 0)
        return util_err_set(-EINVAL, "no handler registered for plugin type: %s at socket %s", type,
                            path);
    if (!info->name || !*info->name)
        return util_err_set(-EINVAL, "plugin at socket %s reports an empty name", path);
    int r = highest_version(info, version);
    if (r < 0)
        return r;
    pthread_mutex_lock(&s->mu);
    for (plugin *p = s->plugins; p && r == 0; p = p->next)
        if (strcmp(p->driver, info->name) == 0 && strcmp(p->path, path) != 0 &&
            version_cmp(p->version, version) >= 0)
            r = util_err_set(-EEXIST,
                             "Failed to validate plugin: a version of driver %s is already "
                             "registered (socket %s) with a higher or equal version",
                             info->name, p->path);
    pthread_mutex_unlock(&s->mu);
    return r;
}

static int register_socket(sim *s, const char *path, const struct stat *sst, unsigned gen)
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
    long version[MAX_VERSION_PARTS] = {0};
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
        memcpy(p->version, version, sizeof(version));
        pthread_mutex_lock(&s->mu);
        p->next = s->plugins;
        s->plugins = p;
        pthread_mutex_unlock(&s->mu);
        obs_info("Registered driver %s on node %s", info->name, s->node);
        notify(c, path, true, NULL);
    }
    protobuf_c_message_free_unpacked(resp, NULL);
    csi_conn_free(c);
    return r;
}

/* Level-triggered: makes the records agree with the directory for `path`. */
static int sync_path(sim *s, const char *path)
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
    sim *s = arg;
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

/* ---- the directory --------------------------------------------------------------------- */

/* `create`: a creation event (or the scan at start) rather than a removal. */
static void queue_name(sim *s, const char *name, bool create)
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

static int scan(sim *s)
{
    DIR *d = opendir(s->dir);
    if (!d)
        return util_err_set(-errno, "cannot read %s: %m", s->dir);
    for (struct dirent *e; (e = readdir(d));)
        queue_name(s, e->d_name, true);
    closedir(d);
    return 0;
}

static void read_events(sim *s, int fd)
{
    char buf[4096] __attribute__((aligned(__alignof__(struct inotify_event))));
    ssize_t n = read(fd, buf, sizeof(buf));
    for (ssize_t off = 0; n > 0 && off < n;) {
        const struct inotify_event *ev = (const struct inotify_event *)(buf + off);
        if (ev->len > 0)
            queue_name(s, ev->name, (ev->mask & (IN_CREATE | IN_MOVED_TO)) != 0);
        if (ev->mask & IN_Q_OVERFLOW)
            scan(s);
        off += (ssize_t)(sizeof(*ev) + ev->len);
    }
}

/* The kubelet registers its Node and creates the CSINode at start. */
static int ensure_node(sim *s)
{
    char *path = kube_path(&KUBE_NODE, NULL, s->node, NULL);
    kube_resp r = {0};
    int rc = kube_get(s->kube, path, &r);
    free(path);
    if (rc < 0 && r.code == 404) {
        kube_resp_clear(&r);
        json_object *n = json_object_new_object();
        json_object_object_add(n, "apiVersion", json_object_new_string("v1"));
        json_object_object_add(n, "kind", json_object_new_string("Node"));
        json_object_object_add(n, "metadata", json_object_new_object());
        kobj_set_str(kobj_meta(n), "name", s->node);
        kobj_set_label(n, "kubernetes.io/hostname", s->node);
        char *coll = kube_path(&KUBE_NODE, NULL, NULL, NULL);
        rc = kube_create(s->kube, coll, n, &r);
        free(coll);
        json_object_put(n);
        if (rc == 0)
            obs_info("Registered Node %s", s->node);
        else if (kube_is_already_exists(&r))
            rc = 0;
    }
    if (rc < 0)
        rc = util_err_set(rc, "Node %s: %d %s", s->node, r.code, r.message);
    json_object *node = rc == 0 ? json_object_get(r.body) : NULL;
    kube_resp_clear(&r);
    if (rc == 0 && !kobj_uid(node)) {
        /* Created just now: the answer is the object; otherwise read it. */
        json_object_put(node);
        node = NULL;
    }
    if (rc == 0 && node) {
        json_object *cn = nodereg_csinode_new(node, NULL, NODEREG_KUBELET_MIGRATED_PLUGINS);
        char *coll = kube_path(&KUBE_CSINODE, NULL, NULL, NULL);
        if (kube_create(s->kube, coll, cn, &r) < 0 && !kube_is_already_exists(&r))
            obs_warn("cannot create CSINode %s: %d %s", s->node, r.code, r.message);
        free(coll);
        kube_resp_clear(&r);
        json_object_put(cn);
    }
    json_object_put(node);
    return rc;
}

/* ---- main ---------------------------------------------------------------------------------- */

static void die(const char *msg)
{
    fprintf(stderr, "kubelet-sim: %s\n", msg);
    exit(1);
}

int main(int argc, char **argv)
{
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    util_flags *f = util_flags_new("kubelet-sim", SIDECAR_VERSION);
    const char *kubeconfig = "", *node = "", *dir = "/var/lib/kubelet/plugins_registry";
    bool register_node = true;
    util_flags_string(f, "kubeconfig", &kubeconfig, "Path to a kubeconfig file (required).");
    util_flags_string(f, "node-name", &node,
                      "The node's name (default: $NODE_NAME, else the "
                      "host name).");
    util_flags_string(f, "plugins-registry-dir", &dir,
                      "The directory plugins put their registration sockets in.");
    util_flags_bool(f, "register-node", &register_node,
                    "Create the Node (and its CSINode) when missing, as the kubelet does.");
    obs_log_add_flags(f);
    util_flags_parse_or_exit(f, argc, argv);
    if (obs_log_apply() < 0)
        die(util_err_last());
    char host[256] = "";
    if (!node || !*node)
        node = getenv("NODE_NAME");
    if ((!node || !*node) && gethostname(host, sizeof(host) - 1) == 0)
        node = host;
    if (!node || !*node)
        die("--node-name is required");
    if (!kubeconfig || !*kubeconfig)
        die("--kubeconfig is required");

    kube_config *kc = NULL;
    if (kube_config_load(kubeconfig, NULL, false, &kc) < 0)
        die(util_err_last());
    sim s = {.node = node, .dir = dir};
    pthread_mutex_init(&s.mu, NULL);
    kube_client_opts ko = {.qps = 50, .burst = 100, .user_agent = "kubelet-sim/" SIDECAR_VERSION};
    if (kube_client_new(kc, &ko, &s.kube) < 0)
        die(util_err_last());
    if (register_node && ensure_node(&s) < 0)
        die(util_err_last());

    int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
    if (ifd < 0 ||
        inotify_add_watch(ifd, dir,
                          IN_CREATE | IN_DELETE | IN_MOVED_TO | IN_MOVED_FROM | IN_ATTRIB) < 0) {
        char *msg = util_asprintf("cannot watch %s: %m", dir);
        die(msg);
    }
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0)
        die("signalfd failed");
    wq_opts qo = {.name = "plugins", .base_delay = UTIL_SECOND, .max_delay = 2 * UTIL_MINUTE};
    s.q = wq_new(&qo);
    pthread_t workers[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        if (pthread_create(&workers[i], NULL, worker_main, &s) != 0)
            die("cannot start worker threads");
    if (scan(&s) < 0)
        die(util_err_last());
    obs_info("kubelet-sim: node %s, watching %s", node, dir);

    for (;;) {
        struct pollfd fds[2] = {{.fd = ifd, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents & POLLIN)
            break;
        if (fds[0].revents & POLLIN)
            read_events(&s, ifd);
    }
    obs_info("kubelet-sim: shutting down");
    wq_shutdown(s.q, false);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i], NULL);
    wq_free(s.q);
    while (s.plugins) {
        plugin *p = s.plugins;
        s.plugins = p->next;
        plugin_free(p);
    }
    while (s.created) {
        created *c = s.created;
        s.created = c->next;
        free(c->path);
        free(c);
    }
    close(sfd);
    close(ifd);
    kube_client_free(s.kube);
    kube_config_free(kc);
    pthread_mutex_destroy(&s.mu);
    util_flags_free(f);
    return 0;
}
