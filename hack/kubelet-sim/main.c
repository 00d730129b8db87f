/*
 * kubelet-sim: plays the kubelet of one node for storage, on kube-lite or
 * a real API server, so the sidecars and drivers meet the kubelet's side
 * of every protocol rather than a shortcut (see README.md and ksim.h):
 * plugin registration, the Node and its heartbeat, and the volumes of the
 * pods bound to the node.
 *
 * This file: flags, start-up in dependency order, the poll loop (the
 * plugins directory and the signals), and shutdown. SIGTERM/SIGINT stop
 * it (exit 0) without undoing anything: like a kubelet restart, it leaves
 * the node as it is, and its records let the next start pick up.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "kubelet-sim/ksim.h"
#include "obs/obs.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

static void die(const char *msg)
{
    fprintf(stderr, "kubelet-sim: %s\n", msg);
    exit(1);
}

/* Go's GOARCH for the machine uname reports. */
static const char *go_arch(void)
{
    static const struct {
        const char *uname, *go;
    } map[] = {{"x86_64", "amd64"},    {"aarch64", "arm64"}, {"armv7l", "arm"},
               {"ppc64le", "ppc64le"}, {"s390x", "s390x"},   {"i686", "386"}};
    struct utsname u;
    if (uname(&u) == 0)
        for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
            if (strcmp(u.machine, map[i].uname) == 0)
                return map[i].go;
    return "amd64";
}

/* What this machine offers, as the node's capacity. */
static void machine_info(ksim_node_info *ni, const char *root)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    ni->cpus = cpus > 0 ? cpus : 1;
    ni->memory_bytes = pages > 0 && page > 0 ? (int64_t)pages * page : 0;
    struct statvfs vfs;
    ni->ephemeral_bytes =
        statvfs(root, &vfs) == 0 ? (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize : 0;
    ni->os = "linux";
    ni->arch = go_arch();
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
    const char *root = "/var/lib/kubelet";
    bool register_node = true;
    int lease_s = 40, max_pods = 110;
    util_duration report_every = UTIL_MINUTE;
    util_duration sync_every = UTIL_MINUTE;
    util_flags_string(f, "kubeconfig", &kubeconfig, "Path to a kubeconfig file (required).");
    util_flags_string(f, "node-name", &node,
                      "The node's name (default: $NODE_NAME, else the "
                      "host name).");
    util_flags_string(f, "plugins-registry-dir", &dir,
                      "The directory plugins put their registration sockets in.");
    util_flags_bool(f, "register-node", &register_node,
                    "Create the Node (and its CSINode) when missing, as the kubelet does.");
    util_flags_string(f, "root-dir", &root,
                      "The kubelet's directory: staging and target paths and the volume "
                      "records live below it.");
    util_flags_int(f, "node-lease-duration-seconds", &lease_s,
                   "leaseDurationSeconds of the node's Lease; it is renewed every quarter of it.");
    util_flags_duration(f, "node-status-report-frequency", &report_every,
                        "How often the node status (the Ready heartbeat) is posted when nothing "
                        "changed.");
    util_flags_int(f, "max-pods", &max_pods, "The pods capacity the node reports.");
    util_flags_duration(f, "sync-frequency", &sync_every,
                        "Every pod is looked at again this often, as the kubelet's: a mounted "
                        "claim waiting for NodeExpandVolume is noticed then at the latest.");
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
    if (!root || root[0] != '/')
        die("--root-dir must be an absolute path");
    if (lease_s < 1 || report_every <= 0 || max_pods < 0 || sync_every < 0)
        die("--node-lease-duration-seconds, --node-status-report-frequency, --sync-frequency and "
            "--max-pods must be positive");

    kube_config *kc = NULL;
    if (kube_config_load(kubeconfig, NULL, false, &kc) < 0)
        die(util_err_last());
    kube_client *kube = NULL;
    kube_client_opts ko = {.qps = 50, .burst = 100, .user_agent = "kubelet-sim/" SIDECAR_VERSION};
    if (kube_client_new(kc, &ko, &kube) < 0)
        die(util_err_last());

    /* The pieces know each other: registration tells the volume manager of
     * drivers, the volume manager tells the node status its volumes. */
    ksim_plugins *plugins = NULL;
    ksim_node *nd = NULL;
    ksim_volumes *vm = NULL;
    ksim_node_opts no = {
        .register_node = register_node, .lease_duration_s = lease_s, .report_every = report_every};
    no.info.name = node;
    no.info.max_pods = max_pods;
    machine_info(&no.info, root);
    ksim_volumes_opts vo = {.node = node, .root = root, .workers = 4, .sync_frequency = sync_every};
    if (ksim_plugins_new(kube, node, dir, &plugins) < 0 || ksim_node_new(kube, &no, &nd) < 0 ||
        ksim_volumes_new(kube, plugins, nd, &vo, &vm) < 0)
        die(util_err_last());
    ksim_node_in_use_source(nd, ksim_volumes_in_use, vm);
    ksim_plugins_on_change(plugins, ksim_volumes_kick, vm);

    if (register_node && ksim_node_register(nd) < 0)
        die(util_err_last());
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    if (sfd < 0)
        die("signalfd failed");
    if (ksim_node_start(nd) < 0 || ksim_volumes_start(vm) < 0 || ksim_plugins_start(plugins) < 0)
        die(util_err_last());
    obs_info("kubelet-sim: node %s, watching %s, root %s", node, dir, root);

    for (;;) {
        struct pollfd fds[2] = {{.fd = ksim_plugins_fd(plugins), .events = POLLIN},
                                {.fd = sfd, .events = POLLIN}};
        if (poll(fds, 2, -1) < 0 && errno != EINTR)
            break;
        if (fds[1].revents & POLLIN)
            break;
        if (fds[0].revents & POLLIN)
            ksim_plugins_readable(plugins);
    }
    obs_info("kubelet-sim: shutting down");
    /* Callers first: registration calls into the volume manager, the
     * heartbeat and the volume workers into each other. */
    ksim_plugins_stop(plugins);
    ksim_node_stop(nd);
    ksim_volumes_free(vm);
    ksim_node_free(nd);
    ksim_plugins_free(plugins);
    close(sfd);
    kube_client_free(kube);
    kube_config_free(kc);
    util_flags_free(f);
    return 0;
}
