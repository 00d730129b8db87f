/*
 * reg_tool: the kubelet plugin-registration protocol from a test script.
 *
 *   reg_tool getinfo <socket>
 *       one GetInfo; prints "<type> <name> <endpoint> <v1,v2,...>"
 *   reg_tool wait <socket> <timeout-seconds>
 *       polls (1 ms) until the socket exists and GetInfo answers; prints
 *       the wall clock of that moment in nanoseconds (benchmarks)
 *   reg_tool fake <socket> <type> <name> <endpoint> <versions,...|-> [hang]
 *       serves a registration socket with that answer (versions "-": none;
 *       "hang": GetInfo answers only after 3 s); prints one line per
 *       NotifyRegistrationStatus ("notify true" / "notify false: <error>")
 *       until SIGTERM
 *
 * Exit status: 0 on success, 1 when the call failed, 2 for bad usage.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "csi/csi.h"

#define GETINFO "/pluginregistration.Registration/GetInfo"

static int usage(void)
{
    fprintf(stderr, "usage: reg_tool getinfo <socket>\n"
                    "       reg_tool wait <socket> <timeout-seconds>\n"
                    "       reg_tool fake <socket> <type> <name> <endpoint> <versions|-> [hang]\n");
    return 2;
}

/* One GetInfo; `*answered` (may be NULL) gets the wall clock in ns of the
 * answer, taken before the connection is torn down. */
static int getinfo(const char *sock, util_duration connect, bool print, long long *answered)
{
    csi_conn_opts o = {.connect_timeout = connect, .max_backoff = UTIL_MS};
    csi_conn *c = NULL;
    if (csi_conn_new(sock, &o, &c) < 0) {
        if (print)
            fprintf(stderr, "reg_tool: cannot connect to %s: %s\n", sock, util_err_last());
        return 1;
    }
    Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    csi_status st;
    int rc = 0;
    if (csi_call(c, GETINFO, &req.base, &pluginregistration__plugin_info__descriptor,
                 5 * UTIL_SECOND, &resp, &st) < 0) {
        if (print)
            fprintf(stderr, "reg_tool: GetInfo: %s: %s\n", csi_code_go_name(st.code), st.message);
        rc = 1;
    } else if (answered) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        *answered = (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
    }
    if (rc == 0 && print) {
        const Pluginregistration__PluginInfo *i = (const Pluginregistration__PluginInfo *)resp;
        printf("%s %s %s ", i->type, i->name, i->endpoint);
        for (size_t k = 0; k < i->n_supported_versions; k++)
            printf("%s%s", k ? "," : "", i->supported_versions[k]);
        printf("\n");
    }
    if (resp)
        protobuf_c_message_free_unpacked(resp, NULL);
    csi_conn_free(c);
    return rc;
}

static int wait_answer(const char *sock, double secs)
{
    util_duration end = util_now_mono() + (util_duration)(secs * (double)UTIL_SECOND);
    struct stat st;
    while (util_now_mono() < end) {
        long long at = 0;
        if (stat(sock, &st) == 0 && getinfo(sock, 100 * UTIL_MS, false, &at) == 0) {
            printf("%lld\n", at);
            return 0;
        }
        util_sleep(UTIL_MS);
    }
    fprintf(stderr, "reg_tool: %s did not answer GetInfo within %.0f s\n", sock, secs);
    return 1;
}

struct fake {
    const char *type, *name, *endpoint;
    char **versions;
    size_t n_versions;
    bool hang;
};

static void fake_call(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    const struct fake *f = ud;
    if (strcmp(method, GETINFO) == 0) {
        if (f->hang)
            util_sleep(3 * UTIL_SECOND);
        Pluginregistration__PluginInfo info = PLUGINREGISTRATION__PLUGIN_INFO__INIT;
        info.type = (char *)f->type;
        info.name = (char *)f->name;
        info.endpoint = (char *)f->endpoint;
        info.supported_versions = f->versions;
        info.n_supported_versions = f->n_versions;
        csi_reply_ok(reply, &info.base);
        return;
    }
    const Pluginregistration__RegistrationStatus *st =
        (const Pluginregistration__RegistrationStatus *)req;
    if (st->plugin_registered)
        printf("notify true\n");
    else
        printf("notify false: %s\n", st->error);
    fflush(stdout);
    Pluginregistration__RegistrationStatusResponse resp =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    csi_reply_ok(reply, &resp.base);
}

static int fake(int argc, char **argv)
{
    if (argc < 7)
        return usage();
    struct fake f = {.type = argv[3], .name = argv[4], .endpoint = argv[5]};
    f.hang = argc > 7 && strcmp(argv[7], "hang") == 0;
    char *list = strcmp(argv[6], "-") == 0 ? NULL : util_strdup(argv[6]);
    f.versions = util_calloc(strlen(argv[6]) + 1, sizeof(char *));
    for (char *save = NULL, *t = list ? strtok_r(list, ",", &save) : NULL; t;
         t = strtok_r(NULL, ",", &save))
        f.versions[f.n_versions++] = t;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    csi_server *srv = NULL;
    csi_server_opts so = {.threads = 2};
    if (csi_server_new(argv[2], &so, &srv) < 0 ||
        csi_server_handle_all(srv, &pluginregistration__registration__descriptor, fake_call, &f) <
            0 ||
        csi_server_start(srv) < 0) {
        fprintf(stderr, "reg_tool: %s\n", util_err_last());
        csi_server_free(srv);
        free(f.versions);
        free(list);
        return 1;
    }
    printf("serving\n");
    fflush(stdout);
    int sig = 0;
    sigwait(&sigs, &sig);
    csi_server_stop(srv, UTIL_SECOND);
    csi_server_free(srv);
    free(f.versions);
    free(list);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return usage();
    if (strcmp(argv[1], "getinfo") == 0)
        return getinfo(argv[2], 10 * UTIL_SECOND, true, NULL);
    if (strcmp(argv[1], "wait") == 0 && argc == 4)
        return wait_answer(argv[2], atof(argv[3]));
    if (strcmp(argv[1], "fake") == 0)
        return fake(argc, argv);
    return usage();
}
