/*
 * example-cosi-driver: flags, start-up and shutdown.
 *
 * main owns everything (configuration, store, fault table, server); the
 * handlers reach them through the cosid context passed as the routes' user
 * data. SIGTERM/SIGINT stop the server gracefully (in-flight calls finish,
 * the socket is removed) and the process exits 0. A bad flag is one line on
 * stderr and exit 1.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "cosid.h"
#include "obs/obs.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

#define PROG "example-cosi-driver"

int main(int argc, char **argv)
{
    const char *env_ep = getenv("COSI_ENDPOINT"); /* the spec's variable */
    cosid_config cfg = {
        .endpoint = env_ep && *env_ep ? env_ep : "unix:///tmp/cosi.sock",
        .driver_name = "cosi.example.com",
        .sync = true,
    };
    const char *fault = "";

    util_flags *f = util_flags_new(PROG, SIDECAR_VERSION);
    util_flags_string(f, "endpoint", &cfg.endpoint,
                      "COSI endpoint to serve (unix:///path or /path); default $COSI_ENDPOINT");
    util_flags_string(f, "drivername", &cfg.driver_name,
                      "name DriverGetInfo answers: at most 63 alphanumerics, '-' and '.'");
    util_flags_string(f, "state-dir", &cfg.state_dir,
                      "directory holding buckets/, state.json, status.json and faults.json "
                      "(required)");
    util_flags_string(f, "fault", &fault,
                      "fault injection, Method:rule;... with rules delay=<duration>, "
                      "fail=<n>:<CODE>[:<message>], crash=<n>[:before|:after]");
    util_flags_bool(f, "sync", &cfg.sync,
                    "fsync state.json after every change (false only for benchmarks)");
    obs_log_add_flags(f);
    int first = util_flags_parse_or_exit(f, argc, argv);

    int rc = 1;
    cosid d = {.cfg = &cfg};
    csi_server *srv = NULL;
    char *faults_file = NULL;
    sigset_t sigs;

    if (first < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\"\n", PROG, argv[first]);
        goto out;
    }
    if (obs_log_apply() < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }
    if (!cfg.state_dir || !*cfg.state_dir) {
        fprintf(stderr, "%s: --state-dir is required\n", PROG);
        goto out;
    }
    if (!cosi_driver_name_valid(cfg.driver_name)) {
        fprintf(stderr,
                "%s: --drivername \"%s\": want at most 63 alphanumerics, '-' and '.', "
                "starting and ending alphanumeric\n",
                PROG, cfg.driver_name);
        goto out;
    }
    faults_file = util_asprintf("%s/faults.json", cfg.state_dir);
    if (drvkit_faults_new(cosid_method_names(), COSID_N_METHODS, fault, faults_file, &d.faults) <
        0) {
        fprintf(stderr, "%s: --fault: %s\n", PROG, util_err_last());
        goto out;
    }
    if (cosid_store_new(cfg.state_dir, cfg.sync, &d.store) < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }

    /* Threads started from here on inherit the blocked signals. */
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);

    csi_server_opts opts = {.threads = 8};
    if (csi_server_new(cfg.endpoint, &opts, &srv) < 0 ||
        csi_server_handle_all(srv, &cosi__v1alpha1__identity__descriptor, cosid_dispatch, &d) < 0 ||
        csi_server_handle_all(srv, &cosi__v1alpha1__provisioner__descriptor, cosid_dispatch, &d) <
            0 ||
        csi_server_start(srv) < 0) {
        fprintf(stderr, "%s: %s\n", PROG, util_err_last());
        goto out;
    }
    obs_info("%s %s serving on %s (state in %s)", cfg.driver_name, SIDECAR_VERSION, cfg.endpoint,
             cfg.state_dir);

    int sig = 0;
    sigwait(&sigs, &sig);
    obs_info("signal %d: stopping", sig);
    atomic_store(&d.stopping, true);
    csi_server_stop(srv, 2 * UTIL_SECOND);
    rc = 0;

out:
    csi_server_free(srv);
    cosid_store_free(d.store);
    drvkit_faults_free(d.faults);
    free(faults_file);
    util_flags_free(f);
    return rc;
}
