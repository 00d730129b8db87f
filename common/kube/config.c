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
 * This file holds the config object, the token file, in-cluster and the
 * upstream order; the exec credential plugin is in config_exec.c, the
 * kubeconfig parser in config_file.c, and config_internal.h has what the
 * three share.
 *
 * Deliberate differences from client-go: only the first existing file of a
 * $KUBECONFIG list is read (no merging); a context naming a missing cluster
 * or user is an error (client-go goes on without); basic auth, auth-provider,
 * impersonation and interactiveMode Always are rejected; proxy-url is ignored
 * with a warning; an exec plugin gets 60 s and no stdin.
 */
#include "kube/config_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define DEFAULT_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* ---- small helpers --------------------------------------------------------------- */

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

char *kcfg_read_file(const char *path, size_t max, size_t *len, struct stat *st)
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
char *kcfg_resolve(const char *dir, const char *p)
{
    if (p == NULL)
        return NULL;
    char *abs = p[0] == '/' ? util_strdup(p) : util_asprintf("%s/%s", dir, p);
    clean_path(abs);
    return abs;
}

/* The absolute directory of `path` (filepath.Abs(filepath.Dir(path))). */
char *kcfg_dir_of(const char *path)
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
char *kcfg_b64_decode(const char *in, size_t *out_len)
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

char *kcfg_b64_encode(const char *in, size_t n)
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
bool kcfg_looks_like_pem(const char *s, size_t n)
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
bool kcfg_parse_rfc3339(const char *s, time_t *out)
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

kube_config *kcfg_config_new(void)
{
    kube_config *c = util_calloc(1, sizeof(*c));
    pthread_mutex_init(&c->mu, NULL);
    return c;
}

void kcfg_config_sync_tls(kube_config *c)
{
    c->tls.ca_file = c->ca_file;
    c->tls.ca_pem = c->ca_pem;
    c->tls.server_name = c->server_name;
    c->tls.cert_file = c->cert_file;
    c->tls.cert_pem = c->cert_pem;
    c->tls.key_file = c->key_file;
    c->tls.key_pem = c->key_pem;
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
    kcfg_exec_free(c->x);
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
char *kcfg_normalize_server(const char *server, bool default_tls)
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

bool kcfg_is_https(const char *server)
{
    return strncasecmp(server, "https://", 8) == 0;
}

/* ---- token file ------------------------------------------------------------------ */

/* Re-reads tf when stat says it changed. Returns 0, or a negative errno with
 * util_err set (tf->value untouched). */
int kcfg_token_file_refresh(struct token_file *tf, const char *where)
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
    char *v = kcfg_read_file(tf->path, MAX_SMALL_FILE, NULL, &st);
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

int kube_config_token(kube_config *c, char **token)
{
    *token = NULL;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    if (c->tf.path != NULL) {
        int r = kcfg_token_file_refresh(&c->tf, "bearer token file");
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
        rc = kcfg_exec_refresh(c, c->x);
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
    kube_config *c = kcfg_config_new();
    c->tf.path = util_asprintf("%s/token", sa_dir);
    int rc = kcfg_token_file_refresh(&c->tf, "in-cluster configuration");
    if (rc != 0) {
        kube_config_free(c);
        return rc;
    }
    /* As upstream: a missing or broken CA is logged and the system roots used. */
    char *ca = util_asprintf("%s/ca.crt", sa_dir);
    size_t ca_len = 0;
    char *pem = kcfg_read_file(ca, MAX_SMALL_FILE, &ca_len, NULL);
    if (pem == NULL)
        obs_error("Expected to load root CA config from %s, but got err: %s", ca, strerror(errno));
    else if (!kcfg_looks_like_pem(pem, ca_len))
        obs_error("Expected to load root CA config from %s, but got err: no PEM certificate", ca);
    if (pem != NULL && kcfg_looks_like_pem(pem, ca_len)) {
        c->ca_file = ca;
        ca = NULL;
    }
    free(ca);
    free(pem);

    char *nsf = util_asprintf("%s/namespace", sa_dir);
    char *ns = kcfg_read_file(nsf, MAX_SMALL_FILE, NULL, NULL);
    free(nsf);
    if (ns != NULL && trim(ns)[0] != '\0')
        c->ns = ns;
    else
        free(ns);

    if (master != NULL && master[0] != '\0')
        c->server = kcfg_normalize_server(master, true);
    else if (strchr(host, ':') != NULL)
        c->server = util_asprintf("https://[%s]:%s", host, port); /* IPv6 */
    else
        c->server = util_asprintf("https://%s:%s", host, port);
    kcfg_config_sync_tls(c);
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
            *out = kcfg_master_only(master);
            return 0;
        }
        return in_cluster(NULL, NULL, out);
    }
    bool empty = false;
    int rc = kcfg_from_file(path, master, out, &empty);
    if (rc != 0 && empty && in_cluster_possible()) {
        /* client-go's deferred loader falls back to in-cluster when the
         * kubeconfig says nothing. */
        obs_v(4, "kubeconfig %s is empty; using in-cluster configuration", path);
        rc = in_cluster(NULL, master, out);
    }
    free(path);
    return rc;
}
