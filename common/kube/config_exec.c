/*
 * kube config: the exec credential plugin (client-go's exec authenticator).
 * The plugin is run with posix_spawn, no stdin and a deadline; its
 * ExecCredential is decoded and cached in the kube_config until it expires.
 * The kubeconfig parser (config_file.c) builds the exec_plugin;
 * kube_config_token (config.c) asks for a credential under the config's mutex.
 */
#include "kobj/kobj.h"
#include "kube/config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_EXEC_STDOUT    (1 << 20)
#define MAX_STDERR_KEPT    4096
#define EXEC_TIMEOUT_MS    (60 * 1000)
#define EXEC_REFRESH_EARLY 10 /* seconds: refresh a credential this long before it expires */

/* ---- exec credential plugin ------------------------------------------------------ */

static void free_strv(char **v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

void kcfg_exec_free(struct exec_plugin *x)
{
    if (x == NULL)
        return;
    free(x->where);
    free(x->api_version);
    free_strv(x->argv);
    free_strv(x->env);
    free(x->exec_info);
    free(x->token);
    free(x);
}

/* Keeps the first line of what the plugin wrote to stderr, printable only. */
static void first_line(const char *in, char *out, size_t len)
{
    size_t o = 0;
    while (*in == '\n' || *in == '\r' || *in == ' ')
        in++;
    for (; *in != '\0' && *in != '\n' && *in != '\r' && o + 1 < len; in++)
        out[o++] = (unsigned char)*in < 0x20 || *in == 0x7f ? ' ' : *in;
    out[o] = '\0';
}

/* The environment for the plugin: ours, then the kubeconfig's entries
 * (which win, as later entries win in Go's exec), then KUBERNETES_EXEC_INFO. */
static char **exec_environ(const struct exec_plugin *x)
{
    size_t n_env = 0, n_extra = 0;
    while (environ != NULL && environ[n_env] != NULL)
        n_env++;
    while (x->env[n_extra] != NULL)
        n_extra++;
    char **envp = util_calloc(n_env + n_extra + 2, sizeof(char *));
    size_t o = 0;
    for (size_t i = 0; i < n_env; i++) {
        const char *eq = strchr(environ[i], '=');
        size_t klen = eq != NULL ? (size_t)(eq - environ[i]) : strlen(environ[i]);
        bool overridden = klen == strlen("KUBERNETES_EXEC_INFO") &&
                          strncmp(environ[i], "KUBERNETES_EXEC_INFO", klen) == 0;
        for (size_t j = 0; j < n_extra && !overridden; j++)
            overridden = strncmp(environ[i], x->env[j], klen) == 0 && x->env[j][klen] == '=';
        if (!overridden)
            envp[o++] = environ[i];
    }
    for (size_t j = 0; j < n_extra; j++)
        envp[o++] = x->env[j];
    envp[o] = x->exec_info;
    return envp; /* the strings are borrowed */
}

struct exec_output {
    char *out; /* stdout, NUL-terminated */
    size_t out_len;
    char err[MAX_STDERR_KEPT]; /* start of stderr */
    size_t err_len;
    bool too_big, timed_out;
};

/* Reads stdout and stderr until both close or the deadline passes. */
static void exec_collect(int out_fd, int err_fd, struct exec_output *o)
{
    size_t cap = 4096;
    o->out = util_calloc(cap, 1);
    struct pollfd pf[2] = {{.fd = out_fd, .events = POLLIN}, {.fd = err_fd, .events = POLLIN}};
    util_duration deadline = util_now_mono() + (util_duration)EXEC_TIMEOUT_MS * UTIL_MS;
    while (pf[0].fd >= 0 || pf[1].fd >= 0) {
        util_duration left = deadline - util_now_mono();
        if (left <= 0) {
            o->timed_out = true;
            return;
        }
        int r = poll(pf, 2, (int)(left / UTIL_MS) + 1);
        if (r < 0 && errno != EINTR)
            return;
        if (r <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd < 0 || pf[i].revents == 0)
                continue;
            char buf[4096];
            ssize_t n = read(pf[i].fd, buf, sizeof(buf));
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0) {
                pf[i].fd = -1;
                continue;
            }
            if (i == 1) {
                size_t room = sizeof(o->err) - 1 - o->err_len;
                size_t take = (size_t)n < room ? (size_t)n : room;
                memcpy(o->err + o->err_len, buf, take);
                o->err_len += take;
                o->err[o->err_len] = '\0';
                continue;
            }
            if (o->out_len + (size_t)n > MAX_EXEC_STDOUT) {
                o->too_big = true;
                continue; /* keep draining so the plugin is not stuck on a full pipe */
            }
            while (o->out_len + (size_t)n + 1 > cap) {
                char *grown = realloc(o->out, cap * 2);
                if (grown == NULL)
                    abort();
                o->out = grown;
                cap *= 2;
            }
            memcpy(o->out + o->out_len, buf, (size_t)n);
            o->out_len += (size_t)n;
            o->out[o->out_len] = '\0';
        }
    }
}

static bool is_executable(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && !S_ISDIR(st.st_mode) && (st.st_mode & 0111) != 0;
}

/* The plugin's path, found up front as Go's exec.LookPath does (so that "not
 * found" does not depend on how the C library reports a failed exec): a
 * command with a slash is used as is, a bare name is searched in $PATH.
 * NULL when there is no such executable. */
static char *look_path(const char *cmd)
{
    if (strchr(cmd, '/') != NULL)
        return is_executable(cmd) ? util_strdup(cmd) : NULL;
    const char *path = getenv("PATH");
    if (path == NULL)
        return NULL;
    for (const char *dir = path;;) {
        const char *end = strchr(dir, ':');
        size_t len = end != NULL ? (size_t)(end - dir) : strlen(dir);
        char *full =
            len == 0 ? util_asprintf("./%s", cmd) : util_asprintf("%.*s/%s", (int)len, dir, cmd);
        if (is_executable(full))
            return full;
        free(full);
        if (end == NULL)
            return NULL;
        dir = end + 1;
    }
}

/* Runs the plugin; fills *o. Returns 0 when it exited 0, else -EACCES with
 * util_err set. */
static int exec_spawn(const struct exec_plugin *x, struct exec_output *o)
{
    char *exe = look_path(x->argv[0]);
    if (exe == NULL)
        return util_err_set(-EACCES, "%s: executable %s not found", x->where, x->argv[0]);
    int out_p[2], err_p[2];
    if (pipe2(out_p, O_CLOEXEC) != 0) {
        free(exe);
        return util_err_set(-EACCES, "%s: pipe: %s", x->where, strerror(errno));
    }
    if (pipe2(err_p, O_CLOEXEC) != 0) {
        int e = errno;
        free(exe);
        close(out_p[0]);
        close(out_p[1]);
        return util_err_set(-EACCES, "%s: pipe: %s", x->where, strerror(e));
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    /* No stdin: interactive plugins are not supported (client-go gives a
     * non-interactive plugin no stdin either). */
    posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, out_p[1], STDOUT_FILENO);
    posix_spawn_file_actions_adddup2(&fa, err_p[1], STDERR_FILENO);
    /* The sidecar may block or ignore signals in its threads; the plugin
     * starts with a clean slate. */
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    sigaddset(&defaults, SIGINT);
    sigaddset(&defaults, SIGTERM);
    sigaddset(&defaults, SIGHUP);
    sigaddset(&defaults, SIGCHLD);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    char **envp = exec_environ(x);
    pid_t pid = -1;
    int rc = posix_spawn(&pid, exe, &fa, &attr, x->argv, envp);
    free(envp);
    free(exe);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    close(out_p[1]);
    close(err_p[1]);
    if (rc != 0) {
        close(out_p[0]);
        close(err_p[0]);
        return util_err_set(-EACCES, "%s: cannot run %s: %s", x->where, x->argv[0], strerror(rc));
    }
    exec_collect(out_p[0], err_p[0], o);
    close(out_p[0]);
    close(err_p[0]);
    if (o->timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR)
            return util_err_set(-EACCES, "%s: waiting for %s: %s", x->where, x->argv[0],
                                strerror(errno));
    }
    char line[256];
    first_line(o->err, line, sizeof(line));
    const char *sep = line[0] != '\0' ? ": " : "";
    if (o->timed_out)
        return util_err_set(-EACCES, "%s: executable %s did not finish within %d s", x->where,
                            x->argv[0], EXEC_TIMEOUT_MS / 1000);
    if (WIFSIGNALED(status))
        return util_err_set(-EACCES, "%s: executable %s was killed by signal %d%s%s", x->where,
                            x->argv[0], WTERMSIG(status), sep, line);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return util_err_set(-EACCES, "%s: executable %s failed with exit code %d%s%s", x->where,
                            x->argv[0], WIFEXITED(status) ? WEXITSTATUS(status) : -1, sep, line);
    if (o->too_big)
        return util_err_set(-EACCES, "%s: executable %s wrote more than %d bytes", x->where,
                            x->argv[0], MAX_EXEC_STDOUT);
    return 0;
}

/* A string member of `obj`: NULL when absent or null, "" marks a wrong type. */
static const char *json_str(json_object *obj, const char *key, bool *bad)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(obj, key, &v) || v == NULL)
        return NULL;
    if (!json_object_is_type(v, json_type_string)) {
        *bad = true;
        return NULL;
    }
    const char *s = json_object_get_string(v);
    return s[0] != '\0' ? s : NULL;
}

/* Decodes the plugin's ExecCredential and stores it. Called under c->mu. */
static int exec_store(kube_config *c, struct exec_plugin *x, const char *out)
{
    json_object *root = kobj_parse_text(out, strlen(out));
    int rc = 0;
    if (root == NULL || !json_object_is_type(root, json_type_object)) {
        /* Never quote the output: it may hold a credential. */
        const char *why = out[strspn(out, " \t\r\n")] == '\0' ? "the plugin wrote nothing"
                          : root == NULL                      ? "not valid JSON"
                                                              : "not a JSON object";
        rc = util_err_set(-EACCES, "%s: decoding stdout: %s", x->where, why);
        goto out;
    }
    bool bad = false;
    const char *api = json_str(root, "apiVersion", &bad);
    const char *kind = json_str(root, "kind", &bad);
    if (api == NULL || strcmp(api, x->api_version) != 0) {
        rc = util_err_set(-EACCES,
                          "%s: exec plugin is configured to use API version %s, plugin returned "
                          "version %s",
                          x->where, x->api_version, api != NULL ? api : "\"\"");
        goto out;
    }
    if (kind == NULL || strcmp(kind, "ExecCredential") != 0) {
        rc = util_err_set(-EACCES, "%s: decoding stdout: kind is \"%s\", want ExecCredential",
                          x->where, kind != NULL ? kind : "");
        goto out;
    }
    json_object *status = NULL;
    if (!json_object_object_get_ex(root, "status", &status) || status == NULL) {
        rc = util_err_set(-EACCES, "%s: exec plugin didn't return a status field", x->where);
        goto out;
    }
    if (!json_object_is_type(status, json_type_object)) {
        rc = util_err_set(-EACCES, "%s: decoding stdout: status is not an object", x->where);
        goto out;
    }
    const char *token = json_str(status, "token", &bad);
    const char *cert = json_str(status, "clientCertificateData", &bad);
    const char *key = json_str(status, "clientKeyData", &bad);
    const char *exp_s = json_str(status, "expirationTimestamp", &bad);
    if (bad) {
        rc = util_err_set(-EACCES, "%s: decoding stdout: a status field is not a string", x->where);
        goto out;
    }
    if (token == NULL && cert == NULL && key == NULL) {
        rc = util_err_set(-EACCES, "%s: exec plugin didn't return a token or cert/key pair",
                          x->where);
        goto out;
    }
    if ((cert == NULL) != (key == NULL)) {
        rc = util_err_set(-EACCES, "%s: exec plugin returned only certificate or key, not both",
                          x->where);
        goto out;
    }
    if (cert != NULL &&
        (!kcfg_looks_like_pem(cert, strlen(cert)) || !kcfg_looks_like_pem(key, strlen(key)))) {
        rc = util_err_set(-EACCES, "%s: failed parsing client key/certificate: not PEM", x->where);
        goto out;
    }
    time_t exp = 0;
    if (exp_s != NULL && !kcfg_parse_rfc3339(exp_s, &exp)) {
        rc = util_err_set(-EACCES, "%s: status.expirationTimestamp \"%s\" is not RFC 3339",
                          x->where, exp_s);
        goto out;
    }
    free(x->token);
    x->token = util_strdup(token);
    x->exp = exp;
    x->have = true;
    /* A new credential replaces the old one whole, certificate included
     * (the plugin only runs when the kubeconfig has no certificate). */
    if (cert != NULL || c->cert_pem != NULL) {
        free(c->old_cert_pem);
        free(c->old_key_pem);
        c->old_cert_pem = c->cert_pem;
        c->old_key_pem = c->key_pem;
        c->cert_pem = util_strdup(cert);
        c->key_pem = util_strdup(key);
        kcfg_config_sync_tls(c);
    }
out:
    json_object_put(root);
    return rc;
}

static bool exec_fresh(const struct exec_plugin *x, time_t now)
{
    return x->have && (x->exp == 0 || now < x->exp - EXEC_REFRESH_EARLY);
}

/* Makes x's cache usable, running the plugin when needed. Under c->mu. */
int kcfg_exec_refresh(kube_config *c, struct exec_plugin *x)
{
    if (exec_fresh(x, time(NULL)))
        return 0;
    struct exec_output o = {0};
    int rc = exec_spawn(x, &o);
    if (rc == 0)
        rc = exec_store(c, x, o.out != NULL ? o.out : "");
    free(o.out);
    if (rc != 0 && x->have && (x->exp == 0 || time(NULL) < x->exp)) {
        /* Refreshing early failed but the old credential still works. */
        obs_warn("%s; using the cached credential until it expires", util_err_last());
        return 0;
    }
    if (rc != 0)
        x->have = false;
    return rc;
}
