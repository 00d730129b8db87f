/*
 * kube config: where the API server is and how to authenticate, as client-go's
 * clientcmd.BuildConfigFromFlags and rest.InClusterConfig decide it.
 *
 * A kubeconfig is parsed with libyaml's document API; every entry of
 * clusters/contexts/users is type-checked (as client-go's decoder does), the
 * entries the current context uses are validated (as ConfirmUsable does) and
 * copied into an immutable kube_config. The only mutable parts are the
 * credential caches behind kube_config_token (a token file re-read when it
 * changes, an exec plugin's credential kept until it expires), guarded by
 * one mutex per config.
 *
 * Errors name the file, the key and the problem on one line; token values
 * never appear in messages or logs.
 *
 * Deliberate differences from client-go: only the first existing file of a
 * $KUBECONFIG list is read (no merging); a context naming a missing cluster
 * or user is an error (client-go goes on without); basic auth, auth-provider,
 * impersonation and interactiveMode Always are rejected; proxy-url is ignored
 * with a warning; an exec plugin gets 60 s and no stdin.
 */
#include "kube/kube.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <yaml.h>

extern char **environ;

#define DEFAULT_SA_DIR     "/var/run/secrets/kubernetes.io/serviceaccount"
#define EXEC_API_V1        "client.authentication.k8s.io/v1"
#define EXEC_API_V1BETA1   "client.authentication.k8s.io/v1beta1"
#define EXEC_EXTENSION     "client.authentication.k8s.io/exec"
#define EMPTY_CONFIG_MSG   "invalid configuration: no configuration has been provided"
#define MAX_CONFIG_BYTES   (4 << 20) /* kubeconfigs are kilobytes; this bounds a mistake */
#define MAX_SMALL_FILE     (1 << 20) /* tokens, CA bundles, namespace */
#define MAX_EXEC_STDOUT    (1 << 20)
#define MAX_STDERR_KEPT    4096
#define MAX_JSON_NODES     10000 /* bounds YAML alias expansion in extensions */
#define EXEC_TIMEOUT_MS    (60 * 1000)
#define EXEC_REFRESH_EARLY 10 /* seconds: refresh a credential this long before it expires */
#define KEY_LEN            256

/* A token file re-read whenever stat(2) says it changed (bound service
 * account tokens are rotated by the kubelet through an atomic symlink swap,
 * so inode, size and mtime all move). */
struct token_file {
    char *path;
    char *value; /* last good content, whitespace-trimmed; NULL before the first read */
    dev_t dev;
    ino_t ino;
    off_t size;
    struct timespec mtime;
};

/* An exec credential plugin and its cached answer. */
struct exec_plugin {
    char *where;       /* "kubeconfig <file>: users[i].user.exec", for messages */
    char *api_version; /* EXEC_API_V1 or EXEC_API_V1BETA1 */
    char **argv;       /* command then args, NULL-ended */
    char **env;        /* "NAME=value" from the kubeconfig, NULL-ended */
    char *exec_info;   /* "KUBERNETES_EXEC_INFO=<ExecCredential JSON>" */
    /* Cache, under kube_config.mu. */
    bool have;
    char *token; /* NULL when the plugin gave only a certificate */
    time_t exp;  /* 0: never expires */
};

struct kube_config {
    char *server;
    char *ns;
    kube_tls tls; /* points at the strings below */
    char *ca_file, *ca_pem, *server_name, *cert_file, *cert_pem, *key_file, *key_pem;
    /* An exec plugin's previous certificate and key, kept for one more
     * rotation so that a kube_tls pointer read just before a rotation stays
     * valid while the caller copies it. */
    char *old_cert_pem, *old_key_pem;

    char *token;           /* static bearer token, or NULL */
    struct token_file tf;  /* tf.path NULL when none; wins over token */
    struct exec_plugin *x; /* NULL when none */
    pthread_mutex_t mu;    /* guards tf and x's cache and the exec certificate */
};

/* ---- small helpers --------------------------------------------------------------- */

static void free_strv(char **v)
{
    if (v == NULL)
        return;
    for (size_t i = 0; v[i] != NULL; i++)
        free(v[i]);
    free(v);
}

/* Reads a whole file, NUL-terminated. NULL with errno set on failure
 * (EFBIG when larger than `max`). */
static char *read_all(int fd, size_t max, size_t *len)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (buf == NULL)
        return NULL;
    for (;;) {
        if (n + 1 >= cap) {
            if (cap > max) {
                free(buf);
                errno = EFBIG;
                return NULL;
            }
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                errno = ENOMEM;
                return NULL;
            }
            buf = grown;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + n, cap - n - 1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            int e = errno;
            free(buf);
            errno = e;
            return NULL;
        }
        if (r == 0)
            break;
        n += (size_t)r;
    }
    if (n > max) {
        free(buf);
        errno = EFBIG;
        return NULL;
    }
    buf[n] = '\0';
    if (len != NULL)
        *len = n;
    return buf;
}

static char *read_file(const char *path, size_t max, size_t *len, struct stat *st)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    if (st != NULL && fstat(fd, st) != 0) {
        int e = errno;
        close(fd);
        errno = e;
        return NULL;
    }
    char *buf = read_all(fd, max, len);
    int e = errno;
    close(fd);
    errno = e;
    return buf;
}

static bool is_space(char ch)
{
    return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r' || ch == '\v' || ch == '\f';
}

/* Trims leading and trailing whitespace in place. */
static char *trim(char *s)
{
    size_t n = strlen(s);
    while (n > 0 && is_space(s[n - 1]))
        s[--n] = '\0';
    size_t i = 0;
    while (is_space(s[i]))
        i++;
    if (i > 0)
        memmove(s, s + i, n - i + 1);
    return s;
}

/* Lexically cleans an absolute path in place, as Go's filepath.Clean:
 * drops empty and "." elements and resolves ".." against the element before. */
static void clean_path(char *path)
{
    char *out = path + 1; /* after the leading '/' */
    const char *in = path + 1;
    while (*in != '\0') {
        const char *end = strchr(in, '/');
        size_t len = end != NULL ? (size_t)(end - in) : strlen(in);
        if (len == 0 || (len == 1 && in[0] == '.')) {
            /* skip */
        } else if (len == 2 && in[0] == '.' && in[1] == '.') {
            /* Drop the last element written (never above the root). */
            while (out > path + 1 && out[-1] != '/')
                out--;
            if (out > path + 1)
                out--;
        } else {
            if (out > path + 1)
                *out++ = '/';
            memmove(out, in, len);
            out += len;
        }
        in += len;
        if (*in == '/')
            in++;
    }
    *out = '\0';
}

/* `p` made absolute against `dir` (client-go resolves kubeconfig paths
 * against the kubeconfig's own directory with filepath.Join). */
static char *resolve(const char *dir, const char *p)
{
    if (p == NULL)
        return NULL;
    char *abs = p[0] == '/' ? util_strdup(p) : util_asprintf("%s/%s", dir, p);
    clean_path(abs);
    return abs;
}

/* The absolute directory of `path` (filepath.Abs(filepath.Dir(path))). */
static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir;
    if (slash == NULL)
        dir = util_strdup(".");
    else if (slash == path)
        dir = util_strdup("/");
    else
        dir = strndup(path, (size_t)(slash - path));
    if (dir == NULL)
        abort();
    if (dir[0] == '/')
        return dir;
    char cwd[PATH_MAX];
    if (getcwd(cwd, sizeof(cwd)) == NULL) {
        free(dir);
        return util_strdup(".");
    }
    char *abs = strcmp(dir, ".") == 0 ? util_strdup(cwd) : util_asprintf("%s/%s", cwd, dir);
    free(dir);
    return abs;
}

/* ---- base64 (Go's StdEncoding: padded; CR and LF are skipped) -------------------- */

static int b64_value(char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

/* Decodes `in`; NULL when it is not valid base64. The result is NUL-terminated. */
static char *b64_decode(const char *in, size_t *out_len)
{
    size_t n = strlen(in);
    char *out = util_calloc(n / 4 * 3 + 4, 1);
    size_t o = 0;
    unsigned quad[4];
    size_t q = 0, pad = 0;
    for (size_t i = 0; i < n; i++) {
        char ch = in[i];
        if (ch == '\r' || ch == '\n')
            continue;
        int v;
        if (ch == '=') {
            pad++;
            v = 0;
            if (q < 2)
                goto bad;
        } else {
            v = b64_value(ch);
            if (v < 0 || pad > 0)
                goto bad;
        }
        quad[q++] = (unsigned)v;
        if (q == 4) {
            unsigned w = quad[0] << 18 | quad[1] << 12 | quad[2] << 6 | quad[3];
            out[o++] = (char)(w >> 16 & 0xff);
            if (pad < 2)
                out[o++] = (char)(w >> 8 & 0xff);
            if (pad < 1)
                out[o++] = (char)(w & 0xff);
            q = 0;
            if (pad > 0) {
                /* Only line breaks may follow the padding. */
                for (i++; i < n; i++)
                    if (in[i] != '\r' && in[i] != '\n')
                        goto bad;
                break;
            }
        }
    }
    if (q != 0)
        goto bad;
    out[o] = '\0';
    *out_len = o;
    return out;
bad:
    free(out);
    return NULL;
}

static char *b64_encode(const char *in, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *out = util_calloc((n + 2) / 3 * 4 + 1, 1);
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned w = (unsigned)(unsigned char)in[i] << 16;
        if (i + 1 < n)
            w |= (unsigned)(unsigned char)in[i + 1] << 8;
        if (i + 2 < n)
            w |= (unsigned char)in[i + 2];
        out[o++] = tab[w >> 18 & 63];
        out[o++] = tab[w >> 12 & 63];
        out[o++] = i + 1 < n ? tab[w >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? tab[w & 63] : '=';
    }
    out[o] = '\0';
    return out;
}

/* PEM text as kube_tls promises it: the decoded bytes hold no NUL and a
 * BEGIN line (client-go would fail later, at the first connection). */
static bool looks_like_pem(const char *s, size_t n)
{
    return strlen(s) == n && strstr(s, "-----BEGIN ") != NULL;
}

/* ---- RFC 3339 -------------------------------------------------------------------- */

static bool digits(const char *s, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return true;
}

/* "2006-01-02T15:04:05[.frac](Z|+hh:mm|-hh:mm)" -> seconds since the epoch. */
static bool parse_rfc3339(const char *s, time_t *out)
{
    int year, mon, day, hour, min, sec, oh = 0, om = 0;
    if (strlen(s) < 20 || !digits(s, 4, &year) || s[4] != '-' || !digits(s + 5, 2, &mon) ||
        s[7] != '-' || !digits(s + 8, 2, &day) || (s[10] != 'T' && s[10] != 't') ||
        !digits(s + 11, 2, &hour) || s[13] != ':' || !digits(s + 14, 2, &min) || s[16] != ':' ||
        !digits(s + 17, 2, &sec))
        return false;
    const char *p = s + 19;
    if (*p == '.') {
        p++;
        if (*p < '0' || *p > '9')
            return false;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    int sign = 0;
    if ((*p == 'Z' || *p == 'z') && p[1] == '\0') {
        sign = 0;
    } else if ((*p == '+' || *p == '-') && strlen(p) == 6 && digits(p + 1, 2, &oh) && p[3] == ':' &&
               digits(p + 4, 2, &om)) {
        sign = *p == '+' ? 1 : -1;
    } else {
        return false;
    }
    if (mon < 1 || mon > 12 || day < 1 || day > 31 || hour > 23 || min > 59 || sec > 60 ||
        oh > 23 || om > 59)
        return false;
    struct tm tm = {0};
    tm.tm_year = year - 1900;
    tm.tm_mon = mon - 1;
    tm.tm_mday = day;
    tm.tm_hour = hour;
    tm.tm_min = min;
    tm.tm_sec = sec;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return false;
    *out = t - (time_t)sign * (oh * 3600 + om * 60);
    return true;
}

/* ---- config object --------------------------------------------------------------- */

static kube_config *config_new(void)
{
    kube_config *c = util_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

static void config_sync_tls(kube_config *c)
{
    c->tls.ca_file = c->ca_file;
    c->tls.ca_pem = c->ca_pem;
    c->tls.server_name = c->server_name;
    c->tls.cert_file = c->cert_file;
    c->tls.cert_pem = c->cert_pem;
    c->tls.key_file = c->key_file;
    c->tls.key_pem = c->key_pem;
}

static void exec_free(struct exec_plugin *x)
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

void kube_config_free(kube_config *c)
{
    if (c == NULL)
        return;
    free(c->server);
    free(c->ns);
    free(c->ca_file);
    free(c->ca_pem);
    free(c->server_name);
    free(c->cert_file);
    free(c->cert_pem);
    free(c->key_file);
    free(c->key_pem);
    free(c->old_cert_pem);
    free(c->old_key_pem);
    free(c->token);
    free(c->tf.path);
    free(c->tf.value);
    exec_free(c->x);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

const char *kube_config_server(const kube_config *c)
{
    return c->server;
}

const char *kube_config_namespace(const kube_config *c)
{
    return c->ns != NULL ? c->ns : "default";
}

const kube_tls *kube_config_tls(const kube_config *c)
{
    return &c->tls;
}

/* The server URL as client-go's DefaultServerURL makes it: a URL without a
 * scheme gets https when TLS is configured, else http. Trailing slashes go
 * so that callers can append "/api/...". */
static char *normalize_server(const char *server, bool default_tls)
{
    char *s;
    if (strstr(server, "://") != NULL)
        s = util_strdup(server);
    else
        s = util_asprintf("%s://%s", default_tls ? "https" : "http", server);
    size_t n = strlen(s);
    const char *scheme_end = strstr(s, "://");
    const char *host = scheme_end != NULL ? scheme_end + 3 : s;
    while (n > 0 && s[n - 1] == '/' && s + n - 1 > host)
        s[--n] = '\0';
    return s;
}

static bool is_https(const char *server)
{
    return strncasecmp(server, "https://", 8) == 0;
}

/* ---- token file ------------------------------------------------------------------ */

/* Re-reads tf when stat says it changed. Returns 0, or a negative errno with
 * util_err set (tf->value untouched). */
static int token_file_refresh(struct token_file *tf, const char *where)
{
    struct stat st;
    if (stat(tf->path, &st) != 0) {
        int e = errno;
        return util_err_set(-e, "%s: cannot read %s: %s", where, tf->path, strerror(e));
    }
    if (tf->value != NULL && st.st_dev == tf->dev && st.st_ino == tf->ino &&
        st.st_size == tf->size && st.st_mtim.tv_sec == tf->mtime.tv_sec &&
        st.st_mtim.tv_nsec == tf->mtime.tv_nsec)
        return 0;
    char *v = read_file(tf->path, MAX_SMALL_FILE, NULL, &st);
    if (v == NULL) {
        int e = errno;
        return util_err_set(-e, "%s: cannot read %s: %s", where, tf->path, strerror(e));
    }
    trim(v);
    if (v[0] == '\0') {
        free(v);
        return util_err_set(-EINVAL, "%s: token file %s is empty", where, tf->path);
    }
    free(tf->value);
    tf->value = v;
    tf->dev = st.st_dev;
    tf->ino = st.st_ino;
    tf->size = st.st_size;
    tf->mtime = st.st_mtim;
    return 0;
}

/* ---- exec credential plugin ------------------------------------------------------ */

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
    json_object *root = json_tokener_parse(out);
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
        (!looks_like_pem(cert, strlen(cert)) || !looks_like_pem(key, strlen(key)))) {
        rc = util_err_set(-EACCES, "%s: failed parsing client key/certificate: not PEM", x->where);
        goto out;
    }
    time_t exp = 0;
    if (exp_s != NULL && !parse_rfc3339(exp_s, &exp)) {
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
        config_sync_tls(c);
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
static int exec_refresh(kube_config *c, struct exec_plugin *x)
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

int kube_config_token(kube_config *c, char **token)
{
    *token = NULL;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->tf.path != NULL) {
        int r = token_file_refresh(&c->tf, "bearer token file");
        if (r != 0 && c->tf.value != NULL) {
            /* As client-go's cachingTokenSource: keep the last good token. */
            obs_warn("unable to rotate token: %s", util_err_last());
        } else if (r != 0 && c->token == NULL) {
            rc = util_err_set(-EACCES, "%s", util_err_last());
            goto out;
        }
        if (c->tf.value != NULL) {
            *token = util_strdup(c->tf.value);
            goto out;
        }
    }
    if (c->token != NULL) {
        *token = util_strdup(c->token);
        goto out;
    }
    if (c->x != NULL) {
        rc = exec_refresh(c, c->x);
        if (rc == 0 && c->x->token != NULL)
            *token = util_strdup(c->x->token);
    }
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

/* ---- in-cluster ------------------------------------------------------------------ */

static int in_cluster(const char *sa_dir, const char *master, kube_config **out)
{
    *out = NULL;
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (host == NULL || host[0] == '\0' || port == NULL || port[0] == '\0')
        return util_err_set(-ENOENT, "unable to load in-cluster configuration, "
                                     "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must "
                                     "be defined");
    if (sa_dir == NULL)
        sa_dir = DEFAULT_SA_DIR;
    kube_config *c = config_new();
    c->tf.path = util_asprintf("%s/token", sa_dir);
    int rc = token_file_refresh(&c->tf, "in-cluster configuration");
    if (rc != 0) {
        kube_config_free(c);
        return rc;
    }
    /* As upstream: a missing or broken CA is logged and the system roots used. */
    char *ca = util_asprintf("%s/ca.crt", sa_dir);
    size_t ca_len = 0;
    char *pem = read_file(ca, MAX_SMALL_FILE, &ca_len, NULL);
    if (pem == NULL)
        obs_error("Expected to load root CA config from %s, but got err: %s", ca, strerror(errno));
    else if (!looks_like_pem(pem, ca_len))
        obs_error("Expected to load root CA config from %s, but got err: no PEM certificate", ca);
    if (pem != NULL && looks_like_pem(pem, ca_len)) {
        c->ca_file = ca;
        ca = NULL;
    }
    free(ca);
    free(pem);

    char *nsf = util_asprintf("%s/namespace", sa_dir);
    char *ns = read_file(nsf, MAX_SMALL_FILE, NULL, NULL);
    free(nsf);
    if (ns != NULL && trim(ns)[0] != '\0')
        c->ns = ns;
    else
        free(ns);

    if (master != NULL && master[0] != '\0')
        c->server = normalize_server(master, true);
    else if (strchr(host, ':') != NULL)
        c->server = util_asprintf("https://[%s]:%s", host, port); /* IPv6 */
    else
        c->server = util_asprintf("https://%s:%s", host, port);
    config_sync_tls(c);
    *out = c;
    return 0;
}

int kube_config_in_cluster(const char *sa_dir, kube_config **out)
{
    return in_cluster(sa_dir, NULL, out);
}

/* rest's inClusterClientConfig.Possible(): the env and a token file. */
static bool in_cluster_possible(void)
{
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    struct stat st;
    return host != NULL && host[0] != '\0' && port != NULL && port[0] != '\0' &&
           stat(DEFAULT_SA_DIR "/token", &st) == 0 && !S_ISDIR(st.st_mode);
}

/* ---- kubeconfig: YAML access ----------------------------------------------------- */

struct kp {
    const char *file; /* as given, for messages */
    char *dir;        /* its absolute directory, for relative paths */
    yaml_document_t doc;
};

static int kp_err(const struct kp *p, const char *key, const char *fmt, ...) UTIL_ATTR_PRINTF(3, 4);

static int kp_err(const struct kp *p, const char *key, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (key == NULL || key[0] == '\0')
        return util_err_set(-EINVAL, "kubeconfig %s: %s", p->file, msg);
    return util_err_set(-EINVAL, "kubeconfig %s: %s: %s", p->file, key, msg);
}

static const char *sval(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
    if (n == NULL)
        return true;
    if (n->type != YAML_SCALAR_NODE)
        return false;
    if (n->tag != NULL && strcmp((const char *)n->tag, YAML_NULL_TAG) == 0)
        return true;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = sval(n);
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static yaml_node_t *node_at(struct kp *p, int id)
{
    return yaml_document_get_node(&p->doc, id);
}

/* map[key], the last one when repeated (as go-yaml), or NULL. */
static yaml_node_t *map_get(struct kp *p, yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    yaml_node_t *found = NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = node_at(p, pr->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && strcmp(sval(k), key) == 0)
            found = node_at(p, pr->value);
    }
    return found;
}

/* Formats a key path ("users[0].user.exec") into a KEY_LEN buffer; a
 * longer one is cut, which only shortens a message. */
static void key_fmt(char *buf, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);

static void key_fmt(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, KEY_LEN, fmt, ap);
    va_end(ap);
}

static void join_key(char *buf, const char *parent, const char *key)
{
    key_fmt(buf, "%s%s%s", parent, parent[0] != '\0' ? "." : "", key);
}

/* map[key] as a string: NULL when absent, null or "". */
static int get_str(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                   const char **out)
{
    *out = NULL;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    if (n->type != YAML_SCALAR_NODE) {
        char k[KEY_LEN];
        join_key(k, parent, key);
        return kp_err(p, k, "not a string");
    }
    if (sval(n)[0] != '\0')
        *out = sval(n);
    return 0;
}

static int get_bool(struct kp *p, yaml_node_t *map, const char *parent, const char *key, bool *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on",   "On",   "ON",   "y",   "Y"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off",   "Off",   "OFF",   "n",  "N"};
    *out = false;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    /* YAML 1.1 booleans as go-yaml reads them; a quoted "true" is a string
     * and client-go's decoder rejects it. */
    if (n->type == YAML_SCALAR_NODE &&
        (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
         (n->tag != NULL && strcmp((const char *)n->tag, YAML_BOOL_TAG) == 0))) {
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
            if (strcmp(sval(n), yes[i]) == 0) {
                *out = true;
                return 0;
            }
            if (strcmp(sval(n), no[i]) == 0)
                return 0;
        }
    }
    char k[KEY_LEN];
    join_key(k, parent, key);
    if (n->type == YAML_SCALAR_NODE)
        return kp_err(p, k, "not a boolean (\"%.40s\")", sval(n));
    return kp_err(p, k, "not a boolean");
}

static int get_typed(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                     yaml_node_type_t type, yaml_node_t **out)
{
    *out = NULL;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    if (n->type != type) {
        char k[KEY_LEN];
        join_key(k, parent, key);
        return kp_err(p, k, type == YAML_MAPPING_NODE ? "not a mapping" : "not a list");
    }
    *out = n;
    return 0;
}

/* map[key] as base64-encoded PEM, decoded (NULL when absent). */
static int get_pem_data(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                        char **out)
{
    *out = NULL;
    const char *s;
    int rc = get_str(p, map, parent, key, &s);
    if (rc != 0 || s == NULL)
        return rc;
    char k[KEY_LEN];
    join_key(k, parent, key);
    size_t n = 0;
    char *data = b64_decode(s, &n);
    if (data == NULL)
        return kp_err(p, k, "not valid base64");
    if (!looks_like_pem(data, n)) {
        free(data);
        return kp_err(p, k, "decoded data is not PEM (no \"-----BEGIN\" line)");
    }
    *out = data;
    return 0;
}

/* A YAML value as JSON (the exec plugin's cluster config), with go-yaml's
 * resolution of plain scalars. `budget` bounds alias expansion. */
static json_object *yaml_to_json(struct kp *p, yaml_node_t *n, int *budget)
{
    if (n == NULL || --*budget < 0)
        return NULL;
    if (n->type == YAML_MAPPING_NODE) {
        json_object *o = json_object_new_object();
        for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
             pr++) {
            yaml_node_t *k = node_at(p, pr->key);
            if (k != NULL && k->type == YAML_SCALAR_NODE)
                json_object_object_add(o, sval(k), yaml_to_json(p, node_at(p, pr->value), budget));
        }
        return o;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_object *a = json_object_new_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++)
            json_object_array_add(a, yaml_to_json(p, node_at(p, *it), budget));
        return a;
    }
    if (is_null(n))
        return NULL;
    const char *v = sval(n);
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
            return json_object_new_boolean(1);
        if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
            return json_object_new_boolean(0);
        char *end = NULL;
        errno = 0;
        long long ll = strtoll(v, &end, 10);
        if (errno == 0 && end != v && *end == '\0')
            return json_object_new_int64(ll);
        errno = 0;
        double d = strtod(v, &end);
        if (errno == 0 && end != v && *end == '\0' && strpbrk(v, "xXnN") == NULL)
            return json_object_new_double(d);
    }
    return json_object_new_string(v);
}

/* ---- kubeconfig: entries --------------------------------------------------------- */

struct kc_cluster {
    const char *name, *server, *ca_file, *tls_server_name, *proxy_url;
    char *ca_pem;
    bool insecure;
    json_object *exec_config; /* extensions[client.authentication.k8s.io/exec].extension */
};

struct kc_context {
    const char *name, *cluster, *user, *ns;
};

struct kc_user {
    const char *name, *token, *token_file, *cert_file, *key_file, *username, *password;
    char *cert_pem, *key_pem;
    const char *impersonate_key; /* the first "as*" key present, or NULL */
    bool auth_provider;
    yaml_node_t *exec; /* the exec mapping, checked */
};

/* One entry of a named list: {name: ..., <inner>: {...}}. */
static int list_item(struct kp *p, yaml_node_t *seq, size_t i, const char *list, const char *inner,
                     const char **name, yaml_node_t **body, char *at)
{
    char item[KEY_LEN];
    *name = NULL;
    *body = NULL;
    key_fmt(item, "%s[%zu]", list, i);
    yaml_node_t *m = node_at(p, seq->data.sequence.items.start[i]);
    if (m == NULL || m->type != YAML_MAPPING_NODE)
        return kp_err(p, item, "not a mapping");
    int rc = get_str(p, m, item, "name", name);
    if (rc == 0)
        rc = get_typed(p, m, item, inner, YAML_MAPPING_NODE, body);
    key_fmt(at, "%s.%s", item, inner);
    return rc;
}

static int parse_cluster(struct kp *p, yaml_node_t *m, const char *at, struct kc_cluster *c)
{
    int rc;
    if ((rc = get_str(p, m, at, "server", &c->server)) != 0 ||
        (rc = get_str(p, m, at, "certificate-authority", &c->ca_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "certificate-authority-data", &c->ca_pem)) != 0 ||
        (rc = get_bool(p, m, at, "insecure-skip-tls-verify", &c->insecure)) != 0 ||
        (rc = get_str(p, m, at, "tls-server-name", &c->tls_server_name)) != 0 ||
        (rc = get_str(p, m, at, "proxy-url", &c->proxy_url)) != 0)
        return rc;
    yaml_node_t *exts;
    if ((rc = get_typed(p, m, at, "extensions", YAML_SEQUENCE_NODE, &exts)) != 0 || exts == NULL)
        return rc;
    size_t n = (size_t)(exts->data.sequence.items.top - exts->data.sequence.items.start);
    for (size_t i = 0; i < n; i++) {
        char ext_at[KEY_LEN];
        key_fmt(ext_at, "%s.extensions[%zu]", at, i);
        yaml_node_t *e = node_at(p, exts->data.sequence.items.start[i]);
        if (e == NULL || e->type != YAML_MAPPING_NODE)
            return kp_err(p, ext_at, "not a mapping");
        const char *name;
        if ((rc = get_str(p, e, ext_at, "name", &name)) != 0)
            return rc;
        if (name != NULL && strcmp(name, EXEC_EXTENSION) == 0) {
            int budget = MAX_JSON_NODES;
            json_object_put(c->exec_config);
            c->exec_config = yaml_to_json(p, map_get(p, e, "extension"), &budget);
            if (budget < 0)
                return kp_err(p, ext_at, "extension is too large");
        }
    }
    return 0;
}

static int parse_context(struct kp *p, yaml_node_t *m, const char *at, struct kc_context *c)
{
    int rc;
    if ((rc = get_str(p, m, at, "cluster", &c->cluster)) != 0 ||
        (rc = get_str(p, m, at, "user", &c->user)) != 0 ||
        (rc = get_str(p, m, at, "namespace", &c->ns)) != 0)
        return rc;
    return 0;
}

/* Type-checks an exec mapping; it is read again when the user is chosen. */
static int check_exec(struct kp *p, yaml_node_t *m, const char *at)
{
    const char *s;
    bool b;
    yaml_node_t *args, *env;
    int rc;
    if ((rc = get_str(p, m, at, "apiVersion", &s)) != 0 ||
        (rc = get_str(p, m, at, "command", &s)) != 0 ||
        (rc = get_str(p, m, at, "interactiveMode", &s)) != 0 ||
        (rc = get_str(p, m, at, "installHint", &s)) != 0 ||
        (rc = get_bool(p, m, at, "provideClusterInfo", &b)) != 0 ||
        (rc = get_typed(p, m, at, "args", YAML_SEQUENCE_NODE, &args)) != 0 ||
        (rc = get_typed(p, m, at, "env", YAML_SEQUENCE_NODE, &env)) != 0)
        return rc;
    for (size_t i = 0;
         args != NULL && args->data.sequence.items.start + i < args->data.sequence.items.top; i++) {
        yaml_node_t *a = node_at(p, args->data.sequence.items.start[i]);
        if (a == NULL || a->type != YAML_SCALAR_NODE) {
            char k[KEY_LEN];
            key_fmt(k, "%s.args[%zu]", at, i);
            return kp_err(p, k, "not a string");
        }
    }
    for (size_t i = 0;
         env != NULL && env->data.sequence.items.start + i < env->data.sequence.items.top; i++) {
        char k[KEY_LEN];
        key_fmt(k, "%s.env[%zu]", at, i);
        yaml_node_t *e = node_at(p, env->data.sequence.items.start[i]);
        if (e == NULL || e->type != YAML_MAPPING_NODE)
            return kp_err(p, k, "not a mapping");
        if ((rc = get_str(p, e, k, "name", &s)) != 0 || (rc = get_str(p, e, k, "value", &s)) != 0)
            return rc;
    }
    return 0;
}

static int parse_user(struct kp *p, yaml_node_t *m, const char *at, struct kc_user *u)
{
    static const char *const impersonation[] = {"as", "as-uid", "as-groups", "as-user-extra"};
    yaml_node_t *ap;
    int rc;
    if ((rc = get_str(p, m, at, "token", &u->token)) != 0 ||
        (rc = get_str(p, m, at, "tokenFile", &u->token_file)) != 0 ||
        (rc = get_str(p, m, at, "client-certificate", &u->cert_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "client-certificate-data", &u->cert_pem)) != 0 ||
        (rc = get_str(p, m, at, "client-key", &u->key_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "client-key-data", &u->key_pem)) != 0 ||
        (rc = get_str(p, m, at, "username", &u->username)) != 0 ||
        (rc = get_str(p, m, at, "password", &u->password)) != 0 ||
        (rc = get_typed(p, m, at, "auth-provider", YAML_MAPPING_NODE, &ap)) != 0 ||
        (rc = get_typed(p, m, at, "exec", YAML_MAPPING_NODE, &u->exec)) != 0)
        return rc;
    u->auth_provider = ap != NULL;
    for (size_t i = 0; i < sizeof(impersonation) / sizeof(impersonation[0]); i++)
        if (u->impersonate_key == NULL && !is_null(map_get(p, m, impersonation[i])))
            u->impersonate_key = impersonation[i];
    if (u->exec != NULL) {
        char k[KEY_LEN];
        join_key(k, at, "exec");
        return check_exec(p, u->exec, k);
    }
    return 0;
}

static size_t seq_len(const yaml_node_t *seq)
{
    return seq == NULL ? 0
                       : (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

static const char *nz(const char *s)
{
    return s != NULL ? s : "";
}

/* Rejects a name used twice in one list (client-go: "duplicate name"). */
static int check_unique(struct kp *p, const char *list, const char *const *names, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (strcmp(nz(names[j]), nz(names[i])) == 0) {
            char k[KEY_LEN];
            key_fmt(k, "%s[%zu].name", list, i);
            return kp_err(p, k, "\"%s\" is already used by %s[%zu]", nz(names[i]), list, j);
        }
    }
    return 0;
}

/* ---- kubeconfig: the chosen context ---------------------------------------------- */

struct kc_all {
    struct kc_cluster *clusters;
    struct kc_context *contexts;
    struct kc_user *users;
    size_t n_clusters, n_contexts, n_users;
};

static void kc_all_free(struct kc_all *a)
{
    for (size_t i = 0; i < a->n_clusters; i++) {
        free(a->clusters[i].ca_pem);
        json_object_put(a->clusters[i].exec_config);
    }
    for (size_t i = 0; i < a->n_users; i++) {
        free(a->users[i].cert_pem);
        free(a->users[i].key_pem);
    }
    free(a->clusters);
    free(a->contexts);
    free(a->users);
}

static int parse_lists(struct kp *p, yaml_node_t *root, struct kc_all *a)
{
    yaml_node_t *clusters, *contexts, *users;
    int rc;
    if ((rc = get_typed(p, root, "", "clusters", YAML_SEQUENCE_NODE, &clusters)) != 0 ||
        (rc = get_typed(p, root, "", "contexts", YAML_SEQUENCE_NODE, &contexts)) != 0 ||
        (rc = get_typed(p, root, "", "users", YAML_SEQUENCE_NODE, &users)) != 0)
        return rc;
    a->n_clusters = seq_len(clusters);
    a->n_contexts = seq_len(contexts);
    a->n_users = seq_len(users);
    a->clusters = util_calloc(a->n_clusters, sizeof(*a->clusters));
    a->contexts = util_calloc(a->n_contexts, sizeof(*a->contexts));
    a->users = util_calloc(a->n_users, sizeof(*a->users));
    /* Names of the list being read, for check_unique (reused per list). */
    size_t most = a->n_clusters > a->n_contexts ? a->n_clusters : a->n_contexts;
    const char **names = util_calloc(most > a->n_users ? most : a->n_users, sizeof(char *));
    char at[KEY_LEN];
    yaml_node_t *body;
    for (size_t i = 0; i < a->n_clusters && rc == 0; i++) {
        rc = list_item(p, clusters, i, "clusters", "cluster", &a->clusters[i].name, &body, at);
        names[i] = a->clusters[i].name;
        if (rc == 0)
            rc = check_unique(p, "clusters", names, i);
        if (rc == 0)
            rc = parse_cluster(p, body, at, &a->clusters[i]);
    }
    for (size_t i = 0; i < a->n_contexts && rc == 0; i++) {
        rc = list_item(p, contexts, i, "contexts", "context", &a->contexts[i].name, &body, at);
        names[i] = a->contexts[i].name;
        if (rc == 0)
            rc = check_unique(p, "contexts", names, i);
        if (rc == 0)
            rc = parse_context(p, body, at, &a->contexts[i]);
    }
    for (size_t i = 0; i < a->n_users && rc == 0; i++) {
        rc = list_item(p, users, i, "users", "user", &a->users[i].name, &body, at);
        names[i] = a->users[i].name;
        if (rc == 0)
            rc = check_unique(p, "users", names, i);
        if (rc == 0)
            rc = parse_user(p, body, at, &a->users[i]);
    }
    free(names);
    return rc;
}

static bool name_is(const char *name, const char *want)
{
    return strcmp(nz(name), want) == 0;
}

static int check_readable(struct kp *p, const char *key, const char *path)
{
    if (access(path, R_OK) == 0)
        return 0;
    return kp_err(p, key, "cannot read %s: %s", path, strerror(errno));
}

static int use_cluster(struct kp *p, const struct kc_cluster *cl, size_t idx, kube_config *c,
                       bool master)
{
    char at[KEY_LEN];
    key_fmt(at, "clusters[%zu].cluster", idx);
    char key[KEY_LEN];
    if (cl->server == NULL && !master) {
        join_key(key, at, "server");
        return kp_err(p, key, "not set (no server found for cluster \"%s\")",
                      cl->name != NULL ? cl->name : "");
    }
    if (cl->ca_file != NULL && cl->ca_pem != NULL)
        return kp_err(p, at, "certificate-authority and certificate-authority-data are both set");
    if (cl->ca_file != NULL) {
        c->ca_file = resolve(p->dir, cl->ca_file);
        join_key(key, at, "certificate-authority");
        int rc = check_readable(p, key, c->ca_file);
        if (rc != 0)
            return rc;
    }
    if (cl->insecure && (cl->ca_file != NULL || cl->ca_pem != NULL)) {
        join_key(key, at, "insecure-skip-tls-verify");
        return kp_err(p, key,
                      "cannot be combined with a certificate authority (specifying a "
                      "root certificates file with the insecure flag is not allowed)");
    }
    if (cl->proxy_url != NULL)
        obs_warn("kubeconfig %s: %s.proxy-url is not supported and is ignored", p->file, at);
    c->ca_pem = util_strdup(cl->ca_pem);
    c->tls.insecure = cl->insecure;
    /* As client-go: --master clears the kubeconfig's tls-server-name. */
    if (!master)
        c->server_name = util_strdup(cl->tls_server_name);
    return 0;
}

static int use_user_certs(struct kp *p, const struct kc_user *u, const char *at, kube_config *c)
{
    char key[KEY_LEN];
    bool cert = u->cert_file != NULL || u->cert_pem != NULL;
    bool keyset = u->key_file != NULL || u->key_pem != NULL;
    if (u->cert_file != NULL && u->cert_pem != NULL)
        return kp_err(p, at, "client-certificate and client-certificate-data are both set");
    if (u->key_file != NULL && u->key_pem != NULL)
        return kp_err(p, at, "client-key and client-key-data are both set");
    if (cert && !keyset)
        return kp_err(p, at, "client-certificate needs client-key or client-key-data");
    if (keyset && !cert)
        return kp_err(p, at, "client-key needs client-certificate or client-certificate-data");
    int rc = 0;
    if (u->cert_file != NULL) {
        c->cert_file = resolve(p->dir, u->cert_file);
        join_key(key, at, "client-certificate");
        rc = check_readable(p, key, c->cert_file);
    }
    if (rc == 0 && u->key_file != NULL) {
        c->key_file = resolve(p->dir, u->key_file);
        join_key(key, at, "client-key");
        rc = check_readable(p, key, c->key_file);
    }
    c->cert_pem = util_strdup(u->cert_pem);
    c->key_pem = util_strdup(u->key_pem);
    return rc;
}

/* The ExecCredential request the plugin finds in KUBERNETES_EXEC_INFO. */
static char *exec_info(const char *api, bool provide, const kube_config *c,
                       const struct kc_cluster *cl)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "kind", json_object_new_string("ExecCredential"));
    json_object_object_add(root, "apiVersion", json_object_new_string(api));
    json_object *spec = json_object_new_object();
    if (provide) {
        json_object *cj = json_object_new_object();
        json_object_object_add(cj, "server", json_object_new_string(c->server));
        if (c->server_name != NULL)
            json_object_object_add(cj, "tls-server-name", json_object_new_string(c->server_name));
        if (c->tls.insecure)
            json_object_object_add(cj, "insecure-skip-tls-verify", json_object_new_boolean(1));
        /* CA data always travels as bytes, read from the file when need be. */
        size_t n = 0;
        char *ca = c->ca_pem != NULL    ? util_strdup(c->ca_pem)
                   : c->ca_file != NULL ? read_file(c->ca_file, MAX_SMALL_FILE, &n, NULL)
                                        : NULL;
        if (c->ca_pem != NULL)
            n = strlen(ca);
        if (ca != NULL) {
            char *b64 = b64_encode(ca, n);
            json_object_object_add(cj, "certificate-authority-data", json_object_new_string(b64));
            free(b64);
            free(ca);
        }
        if (cl != NULL && cl->proxy_url != NULL)
            json_object_object_add(cj, "proxy-url", json_object_new_string(cl->proxy_url));
        if (cl != NULL && cl->exec_config != NULL)
            json_object_object_add(cj, "config", json_object_get(cl->exec_config));
        json_object_object_add(spec, "cluster", cj);
    }
    json_object_object_add(spec, "interactive", json_object_new_boolean(0));
    json_object_object_add(root, "spec", spec);
    char *s = util_asprintf("KUBERNETES_EXEC_INFO=%s",
                            json_object_to_json_string_ext(
                                root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return s;
}

static int use_exec(struct kp *p, yaml_node_t *m, const char *at, kube_config *c,
                    const struct kc_cluster *cl, bool active)
{
    const char *api, *command, *mode;
    bool provide = false;
    yaml_node_t *args, *env;
    char key[KEY_LEN];
    /* Already type-checked by check_exec. */
    get_str(p, m, at, "apiVersion", &api);
    get_str(p, m, at, "command", &command);
    get_str(p, m, at, "interactiveMode", &mode);
    get_bool(p, m, at, "provideClusterInfo", &provide);
    get_typed(p, m, at, "args", YAML_SEQUENCE_NODE, &args);
    get_typed(p, m, at, "env", YAML_SEQUENCE_NODE, &env);
    if (command == NULL) {
        join_key(key, at, "command");
        return kp_err(p, key, "not set (command must be specified to use exec authentication)");
    }
    if (api == NULL) {
        join_key(key, at, "apiVersion");
        return kp_err(p, key, "not set (apiVersion must be specified to use exec authentication)");
    }
    join_key(key, at, "apiVersion");
    if (strcmp(api, EXEC_API_V1) != 0 && strcmp(api, EXEC_API_V1BETA1) != 0)
        return kp_err(p, key, "\"%s\" is not supported (use %s or %s)", api, EXEC_API_V1,
                      EXEC_API_V1BETA1);
    join_key(key, at, "interactiveMode");
    /* client-go defaults interactiveMode to IfAvailable for v1beta1 only. */
    if (mode == NULL && strcmp(api, EXEC_API_V1) == 0)
        return kp_err(p, key, "not set (interactiveMode must be specified for %s)", EXEC_API_V1);
    if (mode != NULL && strcmp(mode, "Always") == 0)
        return kp_err(p, key,
                      "Always is not supported: a sidecar has no terminal (exec plugin "
                      "cannot support interactive mode: standard input is not a "
                      "terminal); use IfAvailable or Never");
    if (mode != NULL && strcmp(mode, "Never") != 0 && strcmp(mode, "IfAvailable") != 0)
        return kp_err(p, key, "invalid value \"%s\" (want Never, IfAvailable or Always)", mode);
    size_t n_env = seq_len(env);
    for (size_t i = 0; i < n_env; i++) {
        const char *name;
        key_fmt(key, "%s.env[%zu]", at, i);
        get_str(p, node_at(p, env->data.sequence.items.start[i]), key, "name", &name);
        if (name == NULL) {
            char k2[KEY_LEN];
            join_key(k2, key, "name");
            return kp_err(p, k2, "not set (env variable name must be specified)");
        }
    }
    if (!active)
        return 0;

    struct exec_plugin *x = util_calloc(1, sizeof(*x));
    x->where = util_asprintf("kubeconfig %s: %s", p->file, at);
    x->api_version = util_strdup(api);
    size_t n_args = seq_len(args);
    x->argv = util_calloc(n_args + 2, sizeof(char *));
    /* Like client-go, a command with a slash is a path (relative to the
     * kubeconfig's directory); a bare name is looked up in $PATH. */
    x->argv[0] = strchr(command, '/') != NULL ? resolve(p->dir, command) : util_strdup(command);
    for (size_t i = 0; i < n_args; i++)
        x->argv[i + 1] = util_strdup(sval(node_at(p, args->data.sequence.items.start[i])));
    x->env = util_calloc(n_env + 1, sizeof(char *));
    for (size_t i = 0; i < n_env; i++) {
        yaml_node_t *e = node_at(p, env->data.sequence.items.start[i]);
        const char *name, *value;
        get_str(p, e, "", "name", &name);
        get_str(p, e, "", "value", &value);
        x->env[i] = util_asprintf("%s=%s", name, value != NULL ? value : "");
    }
    x->exec_info = exec_info(api, provide, c, cl);
    c->x = x;
    return 0;
}

static int use_user(struct kp *p, const struct kc_user *u, size_t idx, kube_config *c,
                    const struct kc_cluster *cl)
{
    char at[KEY_LEN], key[KEY_LEN];
    key_fmt(at, "users[%zu].user", idx);
    if (u->username != NULL || u->password != NULL) {
        join_key(key, at, u->username != NULL ? "username" : "password");
        return kp_err(p, key,
                      "basic authentication (username/password) is not supported; use a "
                      "token, a client certificate or an exec plugin");
    }
    if (u->auth_provider) {
        join_key(key, at, "auth-provider");
        return kp_err(p, key, "auth providers are not supported; use an exec plugin");
    }
    if (u->impersonate_key != NULL) {
        join_key(key, at, u->impersonate_key);
        return kp_err(p, key, "impersonation is not supported");
    }
    int rc = use_user_certs(p, u, at, c);
    if (rc != 0)
        return rc;
    c->token = util_strdup(u->token);
    if (u->token_file != NULL) {
        c->tf.path = resolve(p->dir, u->token_file);
        /* client-go reads the file up front only when there is no token. */
        rc = token_file_refresh(&c->tf, "");
        if (rc != 0 && u->token == NULL) {
            join_key(key, at, "tokenFile");
            if (rc == -EINVAL)
                return kp_err(p, key, "%s is empty", c->tf.path);
            return kp_err(p, key, "cannot read %s: %s", c->tf.path, strerror(-rc));
        }
    }
    /* client-go ignores the plugin when a token or a client certificate is
     * there; it is still validated. */
    bool active =
        u->token == NULL && u->token_file == NULL && c->cert_file == NULL && c->cert_pem == NULL;
    if (u->exec != NULL) {
        join_key(key, at, "exec");
        return use_exec(p, u->exec, key, c, cl, active);
    }
    return 0;
}

/* Drops what an http:// server never gets (client-go only sends credentials
 * and TLS settings when the transport is TLS). */
static void drop_tls_and_auth(kube_config *c, const char *file)
{
    if (c->token != NULL || c->tf.path != NULL || c->x != NULL || c->cert_file != NULL ||
        c->cert_pem != NULL)
        obs_warn("kubeconfig %s: server %s is not https; credentials are not sent", file,
                 c->server);
    char **fields[] = {&c->ca_file,  &c->ca_pem,  &c->server_name, &c->cert_file, &c->cert_pem,
                       &c->key_file, &c->key_pem, &c->token,       &c->tf.path,   &c->tf.value};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
    exec_free(c->x);
    c->x = NULL;
    c->tls.insecure = false;
}

/* The config for `--master` alone (client-go: no kubeconfig, nothing but
 * the host, no credentials). */
static kube_config *master_only(const char *master)
{
    kube_config *c = config_new();
    c->server = normalize_server(master, false);
    config_sync_tls(c);
    return c;
}

static int build(struct kp *p, yaml_node_t *root, const char *master, kube_config **out,
                 bool *empty)
{
    bool have_master = master != NULL && master[0] != '\0';
    *empty = false;
    if (root == NULL || is_null(root)) {
        if (have_master) {
            *out = master_only(master);
            return 0;
        }
        *empty = true;
        return kp_err(p, NULL, EMPTY_CONFIG_MSG " (the file is empty)");
    }
    if (root->type != YAML_MAPPING_NODE)
        return kp_err(p, NULL, "not a kubeconfig: top level is not a mapping");
    const char *s, *current;
    int rc;
    if ((rc = get_str(p, root, "", "kind", &s)) != 0)
        return rc;
    if (s != NULL && strcmp(s, "Config") != 0)
        return kp_err(p, "kind", "\"%s\" is not Config: not a kubeconfig", s);
    if ((rc = get_str(p, root, "", "apiVersion", &s)) != 0)
        return rc;
    if (s != NULL && strcmp(s, "v1") != 0)
        return kp_err(p, "apiVersion", "\"%s\" is not v1", s);
    if ((rc = get_str(p, root, "", "current-context", &current)) != 0)
        return rc;

    struct kc_all a = {0};
    rc = parse_lists(p, root, &a);
    if (rc != 0)
        goto out;
    if (current == NULL) {
        if (have_master) {
            *out = master_only(master);
            goto out;
        }
        *empty = true;
        rc = kp_err(p, NULL, EMPTY_CONFIG_MSG " (current-context is not set)");
        goto out;
    }
    size_t ci = 0;
    while (ci < a.n_contexts && !name_is(a.contexts[ci].name, current))
        ci++;
    if (ci == a.n_contexts) {
        rc = kp_err(p, "current-context", "\"%s\" not found in contexts", current);
        goto out;
    }
    const struct kc_context *ctx = &a.contexts[ci];
    char at[KEY_LEN], key[KEY_LEN];
    key_fmt(at, "contexts[%zu].context", ci);

    const struct kc_cluster *cl = NULL;
    size_t cli = 0;
    if (ctx->cluster != NULL) {
        while (cli < a.n_clusters && !name_is(a.clusters[cli].name, ctx->cluster))
            cli++;
        if (cli == a.n_clusters) {
            join_key(key, at, "cluster");
            rc = kp_err(p, NULL, "%s \"%s\" not found in clusters", key, ctx->cluster);
            goto out;
        }
        cl = &a.clusters[cli];
    } else if (!have_master) {
        join_key(key, at, "cluster");
        rc = kp_err(p, key, "not set");
        goto out;
    }
    const struct kc_user *u = NULL;
    size_t ui = 0;
    if (ctx->user != NULL) {
        while (ui < a.n_users && !name_is(a.users[ui].name, ctx->user))
            ui++;
        if (ui == a.n_users) {
            join_key(key, at, "user");
            rc = kp_err(p, NULL, "%s \"%s\" not found in users", key, ctx->user);
            goto out;
        }
        u = &a.users[ui];
    }

    kube_config *c = config_new();
    c->ns = util_strdup(ctx->ns);
    if (cl != NULL)
        rc = use_cluster(p, cl, cli, c, have_master);
    if (rc == 0 && (have_master || cl != NULL)) {
        const char *server = have_master ? master : cl->server;
        /* As client-go decides whether to send credentials: with the host
         * alone, a URL without a scheme is http. */
        c->server = normalize_server(server, false);
    }
    if (rc == 0 && u != NULL)
        rc = use_user(p, u, ui, c, cl);
    if (rc != 0) {
        kube_config_free(c);
        goto out;
    }
    if (!is_https(c->server))
        drop_tls_and_auth(c, p->file);
    config_sync_tls(c);
    *out = c;
out:
    kc_all_free(&a);
    return rc;
}

static int from_file(const char *path, const char *master, kube_config **out, bool *empty)
{
    *out = NULL;
    *empty = false;
    struct kp p = {.file = path};
    size_t len = 0;
    char *text = read_file(path, MAX_CONFIG_BYTES, &len, NULL);
    if (text == NULL) {
        int e = errno;
        if (e == EFBIG)
            return util_err_set(-EINVAL, "kubeconfig %s: larger than %d bytes", path,
                                MAX_CONFIG_BYTES);
        return util_err_set(-e, "kubeconfig %s: cannot read: %s", path, strerror(e));
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        abort();
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &p.doc)) {
        const char *problem = parser.problem != NULL ? parser.problem : "unknown error";
        if (parser.error == YAML_READER_ERROR)
            rc = kp_err(&p, NULL, "YAML syntax error at byte %zu: %s", parser.problem_offset,
                        problem);
        else if (parser.context != NULL)
            rc = kp_err(&p, NULL, "YAML syntax error at line %zu, column %zu: %s (%s)",
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem,
                        parser.context);
        else
            rc = kp_err(&p, NULL, "YAML syntax error at line %zu, column %zu: %s",
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem);
        yaml_parser_delete(&parser);
        free(text);
        return rc;
    }
    p.dir = dir_of(path);
    rc = build(&p, yaml_document_get_root_node(&p.doc), master, out, empty);
    yaml_document_delete(&p.doc);
    yaml_parser_delete(&parser);
    free(text);
    free(p.dir);
    return rc;
}

int kube_config_from_file(const char *path, const char *master, kube_config **out)
{
    bool empty;
    if (path == NULL || path[0] == '\0') {
        *out = NULL;
        return util_err_set(-EINVAL, "kubeconfig: no path given");
    }
    return from_file(path, master, out, &empty);
}

/* ---- the upstream order ---------------------------------------------------------- */

/* The first existing file of a colon-separated $KUBECONFIG. A simplification:
 * client-go merges all the files (first one wins per key); a sidecar's
 * kubeconfig is one file, so only the first existing one is read. */
static char *first_existing(const char *list)
{
    char *copy = util_strdup(list);
    char *save = NULL, *found = NULL;
    for (char *tok = strtok_r(copy, ":", &save); tok != NULL; tok = strtok_r(NULL, ":", &save)) {
        struct stat st;
        if (stat(tok, &st) == 0) {
            found = util_strdup(tok);
            break;
        }
    }
    free(copy);
    return found;
}

int kube_config_load(const char *kubeconfig, const char *master, bool use_env, kube_config **out)
{
    *out = NULL;
    const char *env = getenv("KUBECONFIG");
    char *path = NULL;
    if (kubeconfig != NULL && kubeconfig[0] != '\0') {
        path = util_strdup(kubeconfig);
    } else if (use_env && env != NULL && env[0] != '\0') {
        path = first_existing(env);
        if (path == NULL)
            return util_err_set(-ENOENT, "kubeconfig $KUBECONFIG=%s: no such file", env);
    }
    if (path == NULL) {
        if (master != NULL && master[0] != '\0') {
            *out = master_only(master);
            return 0;
        }
        return in_cluster(NULL, NULL, out);
    }
    bool empty = false;
    int rc = from_file(path, master, out, &empty);
    if (rc != 0 && empty && in_cluster_possible()) {
        /* client-go's deferred loader falls back to in-cluster when the
         * kubeconfig says nothing. */
        obs_v(4, "kubeconfig %s is empty; using in-cluster configuration", path);
        rc = in_cluster(NULL, master, out);
    }
    free(path);
    return rc;
}
