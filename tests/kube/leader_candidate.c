/*
 * One leader-election candidate for the tests: campaigns for a lease on the
 * kube-lite behind KUBECONFIG and prints "LEADING <identity>" once it leads.
 * SIGTERM stops it, releasing the lease when started with "release".
 *
 *   leader_candidate <kubeconfig> <lock-name> <identity> [release]
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "kube/kube.h"

static const char *who;

static void leading(void *ud)
{
    (void)ud;
    printf("LEADING %s\n", who);
    fflush(stdout);
}

static void stopped(void *ud)
{
    (void)ud;
    printf("STOPPED %s\n", who);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    who = argv[3];
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    kube_config *cfg = NULL;
    kube_client *c = NULL;
    if (kube_config_from_file(argv[1], NULL, &cfg) < 0 ||
        kube_client_new(cfg, &(kube_client_opts){.user_agent = "leader_candidate/test"}, &c) < 0) {
        fprintf(stderr, "leader_candidate: %s\n", util_err_last());
        return 1;
    }
    kube_leader_opts o = {.lock_name = argv[2],
                          .ns = "default",
                          .identity = argv[3],
                          .lease_duration = 2 * UTIL_SECOND,
                          .renew_deadline = 1500 * UTIL_MS,
                          .retry_period = 500 * UTIL_MS,
                          .release_on_stop = argc > 4 && strcmp(argv[4], "release") == 0,
                          .on_started_leading = leading,
                          .on_stopped_leading = stopped};
    kube_leader *l = NULL;
    if (kube_leader_start(c, &o, &l) < 0) {
        fprintf(stderr, "leader_candidate: %s\n", util_err_last());
        return 1;
    }
    int sig = 0;
    sigwait(&set, &sig);
    kube_leader_stop(l);
    kube_client_free(c);
    kube_config_free(cfg);
    return 0;
}
