/*
 * kube-lite: the command line. Starts the store, the API and the HTTP(S)
 * server, writes a kubeconfig that kubectl and client-go can use, prints one
 * line when ready and exits 0 on SIGTERM or SIGINT.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kube-lite/kl.h"
#include "obs/obs.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

struct config {
    const char *listen;
    const char *kubeconfig_out;
    const char *tls_cert;
    const char *tls_key;
    const char *ca_file;
    const char *token_file;
    const char *kubeconfig_token;
    const char *authorization;
    int threads;
    int64_t history;
    util_duration bookmark_every;
    util_duration watch_close_after;
    double error_rate;
    int error_code;
    util_duration latency;
    const char *controllers;
    const char *data_dir;
};

static char *read_file(const char *flag, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "kube-lite: --%s: cannot read %s: %s\n", flag, path, strerror(errno));
        exit(1);
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&buf, &len);
    char chunk[4096];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        fwrite(chunk, 1, n, m);
    fclose(f);
    fclose(m);
    return buf;
}

static int write_kubeconfig(const struct config *cfg, const char *url)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", cfg->kubeconfig_out);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return util_err_set(-errno, "--write-kubeconfig: cannot write %s: %m", tmp);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: kube-lite\n  cluster:\n"
            "    server: %s\n",
            url);
    if (cfg->tls_cert && cfg->ca_file)
        fprintf(f, "    certificate-authority: %s\n", cfg->ca_file);
    else if (cfg->tls_cert)
        fprintf(f, "    insecure-skip-tls-verify: true\n");
    fprintf(f, "contexts:\n- name: kube-lite\n  context:\n    cluster: kube-lite\n"
               "    user: kube-lite\ncurrent-context: kube-lite\nusers:\n- name: kube-lite\n"
               "  user:\n");
    if (cfg->kubeconfig_token)
        fprintf(f, "    token: %s\n", cfg->kubeconfig_token);
    else
        fprintf(f, "    {}\n");
    if (fclose(f) != 0 || rename(tmp, cfg->kubeconfig_out) != 0)
        return util_err_set(-errno, "--write-kubeconfig: cannot write %s: %m", cfg->kubeconfig_out);
    return 0;
}

int main(int argc, char **argv)
{
    struct config cfg = {
        .listen = "127.0.0.1:0",
        .authorization = "AlwaysAllow",
        .history = 100000,
        .bookmark_every = 60 * UTIL_SECOND,
        .error_code = 500,
        .controllers = "binder,attach,namespaces",
    };
    util_flags *f = util_flags_new("kube-lite", SIDECAR_VERSION);
    util_flags_string(f, "listen", &cfg.listen, "host:port to serve on (port 0 picks a free one)");
    util_flags_string(f, "write-kubeconfig", &cfg.kubeconfig_out,
                      "write a kubeconfig for this server to this file once listening");
    util_flags_string(f, "tls-cert-file", &cfg.tls_cert, "serve HTTPS with this PEM certificate");
    util_flags_string(f, "tls-private-key-file", &cfg.tls_key, "PEM key of --tls-cert-file");
    util_flags_string(f, "client-ca-file", &cfg.ca_file,
                      "CA to name in the written kubeconfig (else insecure-skip-tls-verify)");
    util_flags_string(f, "token-auth-file", &cfg.token_file,
                      "CSV of bearer tokens: token,user,uid,\"group1,group2\" (requests without "
                      "a valid token get 401)");
    util_flags_string(f, "kubeconfig-token", &cfg.kubeconfig_token,
                      "bearer token to put in the written kubeconfig");
    util_flags_string(f, "authorization-mode", &cfg.authorization, "AlwaysAllow or RBAC");
    util_flags_int(f, "threads", &cfg.threads, "HTTP worker threads (0: 4)");
    util_flags_int64(f, "history", &cfg.history, "watch events kept for resuming watches");
    util_flags_duration(f, "bookmark-interval", &cfg.bookmark_every,
                        "how often watches with allowWatchBookmarks get a BOOKMARK");
    util_flags_duration(f, "watch-close-after", &cfg.watch_close_after,
                        "fault: end every watch after this long (0: never)");
    util_flags_double(f, "error-rate", &cfg.error_rate,
                      "fault: fraction of requests answered with --error-code");
    util_flags_int(f, "error-code", &cfg.error_code, "fault: 429, 500 or 503");
    util_flags_duration(f, "latency", &cfg.latency, "fault: added to every request");
    util_flags_string(f, "data-dir", &cfg.data_dir,
                      "keep the objects in DIR/objects.db: loaded at start, saved at exit");
    util_flags_string(f, "controllers", &cfg.controllers,
                      "built-in controllers to run, comma-separated: binder (PV binding), attach "
                      "(selected-node and VolumeAttachments for pods), namespaces (deletion); "
                      "\"\" for none");
    obs_log_add_flags(f);
    util_flags_parse_or_exit(f, argc, argv);
    if (obs_log_apply() < 0) {
        fprintf(stderr, "kube-lite: %s\n", util_err_last());
        return 1;
    }

    char host[64] = "127.0.0.1";
    int port = 0;
    const char *colon = strrchr(cfg.listen, ':');
    if (!colon || (size_t)(colon - cfg.listen) >= sizeof(host) ||
        sscanf(colon + 1, "%d", &port) != 1 || port < 0 || port > 65535) {
        fprintf(stderr, "kube-lite: --listen: expected host:port, got \"%s\"\n", cfg.listen);
        return 1;
    }
    memcpy(host, cfg.listen, (size_t)(colon - cfg.listen));
    host[colon - cfg.listen] = '\0';
    bool rbac = strcmp(cfg.authorization, "RBAC") == 0;
    if (!rbac && strcmp(cfg.authorization, "AlwaysAllow") != 0) {
        fprintf(stderr, "kube-lite: --authorization-mode: use AlwaysAllow or RBAC, got \"%s\"\n",
                cfg.authorization);
        return 1;
    }
    if (!cfg.tls_cert != !cfg.tls_key) {
        fprintf(stderr, "kube-lite: --tls-cert-file and --tls-private-key-file go together\n");
        return 1;
    }
    if (cfg.history <= 0) {
        fprintf(stderr, "kube-lite: --history must be positive\n");
        return 1;
    }
    kl_tokens *tokens = NULL;
    if (cfg.token_file && kl_tokens_load(cfg.token_file, &tokens) < 0) {
        fprintf(stderr, "kube-lite: --token-auth-file: %s\n", util_err_last());
        return 1;
    }
    if (rbac && !tokens) {
        fprintf(stderr, "kube-lite: --authorization-mode=RBAC needs --token-auth-file\n");
        return 1;
    }
    kl_controllers_opts co = {0};
    char *list = util_strdup(cfg.controllers);
    for (char *save = NULL, *tok = strtok_r(list, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        if (strcmp(tok, "binder") == 0)
            co.binder = true;
        else if (strcmp(tok, "attach") == 0)
            co.attach = true;
        else if (strcmp(tok, "namespaces") == 0)
            co.namespaces = true;
        else {
            fprintf(stderr,
                    "kube-lite: --controllers: unknown controller \"%s\" (use binder, "
                    "attach, namespaces)\n",
                    tok);
            return 1;
        }
    }
    free(list);
    char *cert = cfg.tls_cert ? read_file("tls-cert-file", cfg.tls_cert) : NULL;
    char *key = cfg.tls_key ? read_file("tls-private-key-file", cfg.tls_key) : NULL;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    kl_store *store = kl_store_new((size_t)cfg.history);
    kl_api_opts ao = {.tokens = tokens,
                      .rbac = rbac,
                      .bookmark_every = cfg.bookmark_every,
                      .watch_close_after = cfg.watch_close_after};
    kl_api *api = kl_api_new(store, &ao);
    char *db = cfg.data_dir ? util_asprintf("%s/objects.db", cfg.data_dir) : NULL;
    size_t loaded = 0;
    if (db && kl_store_load(store, db, &loaded) < 0) {
        fprintf(stderr, "kube-lite: --data-dir: %s\n", util_err_last());
        return 1;
    }
    if (loaded == 0)
        kl_api_bootstrap(api);
    kl_server_opts so = {.host = host,
                         .port = port,
                         .tls_cert_pem = cert,
                         .tls_key_pem = key,
                         .threads = cfg.threads,
                         .faults = {.error_rate = cfg.error_rate,
                                    .error_code = cfg.error_code,
                                    .latency = cfg.latency}};
    kl_server *srv = NULL;
    int rc = kl_server_start(api, &so, &srv);
    if (rc < 0) {
        fprintf(stderr, "kube-lite: %s\n", util_err_last());
        return 1;
    }
    kl_controllers *ctrl = NULL;
    if ((co.binder || co.attach || co.namespaces) && kl_controllers_start(api, &co, &ctrl) < 0) {
        fprintf(stderr, "kube-lite: %s\n", util_err_last());
        kl_server_stop(srv);
        return 1;
    }
    char url[128];
    snprintf(url, sizeof(url), "%s://%s:%d", cert ? "https" : "http", host, kl_server_port(srv));
    if (cfg.kubeconfig_out && write_kubeconfig(&cfg, url) < 0) {
        fprintf(stderr, "kube-lite: %s\n", util_err_last());
        kl_server_stop(srv);
        return 1;
    }
    printf("kube-lite: serving on %s\n", url);
    fflush(stdout);

    int sig = 0;
    sigwait(&set, &sig);
    obs_v(1, "kube-lite: signal %d, stopping", sig);
    kl_controllers_stop(ctrl);
    kl_server_stop(srv);
    if (db && kl_store_save(store, db) < 0)
        fprintf(stderr, "kube-lite: --data-dir: %s\n", util_err_last());
    free(db);
    kl_api_free(api);
    kl_store_free(store);
    kl_tokens_free(tokens);
    free(cert);
    free(key);
    util_flags_free(f);
    return 0;
}
