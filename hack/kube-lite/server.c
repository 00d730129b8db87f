/*
 * HTTP(S) for kube-lite: libmicrohttpd with an epoll thread pool, bodies
 * collected per connection, answers from rest.c.
 *
 * Watches are chunked responses fed by a content-reader callback. When a
 * watch has nothing to say the connection is suspended (it costs nothing
 * while idle) and resumed by the store's notification, or by a ticker when
 * a bookmark or the watch's end is due. One mutex guards every watch
 * connection's "suspended" flag: resuming a connection that is not suspended
 * is undefined in libmicrohttpd.
 *
 * Also served here, outside the Kubernetes API: /metrics (request counts by
 * verb, resource and code), POST /kube-lite/faults and /kube-lite/compact.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "kube-lite/kl.h"
#include "obs/obs.h"

struct conn;

struct counter {
    char *key; /* verb \t resource \t code */
    uint64_t n;
    struct counter *next;
};

struct kl_server {
    kl_api *api;
    kl_server_opts opts;
    struct MHD_Daemon *d;
    int port;
    /* watch connections */
    pthread_mutex_t mu;
    struct conn *watches;
    atomic_bool stopping;
    pthread_t ticker;
    /* faults, changed at run time */
    pthread_mutex_t fmu;
    kl_faults faults;
    /* metrics */
    pthread_mutex_t cmu;
    struct counter *counters;
};

struct conn {
    kl_server *srv;
    struct MHD_Connection *c;
    char *body;
    size_t len, cap;
    kl_stream *st;
    char *pending;
    size_t pending_len, pending_off;
    bool suspended; /* under srv->mu */
    struct conn *prev, *next;
};

/* ---- metrics ----------------------------------------------------------------------- */

static void count(kl_server *s, const char *verb, const char *resource, int code)
{
    char key[256];
    snprintf(key, sizeof(key), "%s\t%s\t%d", verb, resource ? resource : "", code);
    pthread_mutex_lock(&s->cmu);
    struct counter *c = s->counters;
    while (c && strcmp(c->key, key) != 0)
        c = c->next;
    if (!c) {
        c = util_calloc(1, sizeof(*c));
        c->key = util_strdup(key);
        c->next = s->counters;
        s->counters = c;
    }
    c->n++;
    pthread_mutex_unlock(&s->cmu);
}

static int cmp_counter(const void *a, const void *b)
{
    return strcmp((*(struct counter *const *)a)->key, (*(struct counter *const *)b)->key);
}

static char *metrics_text(kl_server *s, size_t *len)
{
    pthread_mutex_lock(&s->cmu);
    size_t n = 0;
    for (struct counter *c = s->counters; c; c = c->next)
        n++;
    struct counter **v = util_calloc(n ? n : 1, sizeof(struct counter *));
    size_t i = 0;
    for (struct counter *c = s->counters; c; c = c->next)
        v[i++] = c;
    qsort(v, n, sizeof(struct counter *), cmp_counter);
    size_t cap = 256 + n * 160;
    char *out = util_calloc(cap, 1);
    size_t pos = (size_t)snprintf(out, cap,
                                  "# HELP apiserver_request_total Requests answered, by verb, "
                                  "resource and HTTP code.\n"
                                  "# TYPE apiserver_request_total counter\n");
    for (i = 0; i < n; i++) {
        char verb[64], res[128];
        int code = 0;
        if (sscanf(v[i]->key, "%63[^\t]\t%127[^\t]\t%d", verb, res, &code) != 3 &&
            sscanf(v[i]->key, "%63[^\t]\t\t%d", verb, &code) == 2)
            res[0] = '\0';
        pos += (size_t)snprintf(out + pos, cap - pos,
                                "apiserver_request_total{verb=\"%s\",resource=\"%s\",code=\"%d\"} "
                                "%" PRIu64 "\n",
                                verb, res, code, v[i]->n);
    }
    pthread_mutex_unlock(&s->cmu);
    free(v);
    *len = pos;
    return out;
}

/* ---- watch streaming ------------------------------------------------------------------ */

static void wake(void *ud)
{
    struct conn *cn = ud;
    kl_server *s = cn->srv;
    pthread_mutex_lock(&s->mu);
    if (cn->suspended) {
        cn->suspended = false;
        MHD_resume_connection(cn->c);
    }
    pthread_mutex_unlock(&s->mu);
}

static ssize_t watch_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct conn *cn = cls;
    kl_server *s = cn->srv;
    if (cn->pending_off == cn->pending_len) {
        free(cn->pending);
        cn->pending = NULL;
        cn->pending_len = cn->pending_off = 0;
        pthread_mutex_lock(&s->mu);
        /* Checked under the lock so a stopping server never misses a
         * connection that is about to suspend. */
        if (atomic_load(&s->stopping)) {
            pthread_mutex_unlock(&s->mu);
            return MHD_CONTENT_READER_END_OF_STREAM;
        }
        int rc = kl_stream_next(cn->st, &cn->pending, &cn->pending_len);
        if (rc == 0) {
            /* Nothing yet: sleep until an event, a bookmark or the end. */
            cn->suspended = true;
            MHD_suspend_connection(cn->c);
            pthread_mutex_unlock(&s->mu);
            return 0;
        }
        pthread_mutex_unlock(&s->mu);
        if (rc < 0)
            return MHD_CONTENT_READER_END_OF_STREAM;
    }
    size_t n = cn->pending_len - cn->pending_off;
    if (n > max)
        n = max;
    memcpy(buf, cn->pending + cn->pending_off, n);
    cn->pending_off += n;
    return (ssize_t)n;
}

static void *ticker_main(void *arg)
{
    kl_server *s = arg;
    while (!atomic_load(&s->stopping)) {
        util_sleep(100 * UTIL_MS);
        util_duration now = util_now_mono();
        pthread_mutex_lock(&s->mu);
        for (struct conn *cn = s->watches; cn; cn = cn->next) {
            if (cn->suspended && now >= kl_stream_deadline(cn->st)) {
                cn->suspended = false;
                MHD_resume_connection(cn->c);
            }
        }
        pthread_mutex_unlock(&s->mu);
    }
    return NULL;
}

/* ---- requests ---------------------------------------------------------------------- */

static const char *get_arg(void *ud, const char *key)
{
    return MHD_lookup_connection_value(ud, MHD_GET_ARGUMENT_KIND, key);
}

static enum MHD_Result queue_text(struct MHD_Connection *c, int code, const char *ctype, char *text,
                                  size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", ctype);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return r;
}

static char *status_text(int code, const char *reason, const char *msg, size_t *len)
{
    char *t = util_asprintf("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":"
                            "\"Failure\",\"message\":\"%s\",\"reason\":\"%s\",\"details\":{},"
                            "\"code\":%d}\n",
                            msg, reason, code);
    *len = strlen(t);
    return t;
}

/* Admin endpoints for the reliability tests. */
static bool admin(kl_server *s, struct conn *cn, const char *url, const char *method,
                  enum MHD_Result *ret)
{
    if (strncmp(url, "/kube-lite/", 11) != 0)
        return false;
    size_t len = 0;
    char *text;
    int code = 200;
    if (strcmp(method, "POST") == 0 && strcmp(url, "/kube-lite/compact") == 0) {
        kl_store_compact(kl_api_store(s->api));
        text = util_strdup("{\"compacted\":true}\n");
    } else if (strcmp(method, "POST") == 0 && strcmp(url, "/kube-lite/faults") == 0) {
        json_object *f = cn->body ? json_tokener_parse(cn->body) : NULL;
        json_object *v = NULL;
        pthread_mutex_lock(&s->fmu);
        if (json_object_object_get_ex(f, "error_rate", &v))
            s->faults.error_rate = json_object_get_double(v);
        if (json_object_object_get_ex(f, "error_code", &v))
            s->faults.error_code = json_object_get_int(v);
        if (json_object_object_get_ex(f, "latency_ms", &v))
            s->faults.latency = json_object_get_int64(v) * UTIL_MS;
        pthread_mutex_unlock(&s->fmu);
        if (json_object_object_get_ex(f, "watch_close_after_ms", &v))
            kl_api_set_watch_close_after(s->api, json_object_get_int64(v) * UTIL_MS);
        json_object_put(f);
        text = util_strdup("{\"ok\":true}\n");
    } else {
        code = 404;
        text =
            status_text(404, "NotFound", "the server could not find the requested resource", &len);
    }
    len = strlen(text);
    *ret = queue_text(cn->c, code, "application/json", text, len);
    return true;
}

/* Injected failures; never on health, metrics or admin paths. */
static bool inject_fault(kl_server *s, struct conn *cn, const char *url, enum MHD_Result *ret)
{
    pthread_mutex_lock(&s->fmu);
    kl_faults f = s->faults;
    pthread_mutex_unlock(&s->fmu);
    if (strncmp(url, "/kube-lite/", 11) == 0 || strcmp(url, "/metrics") == 0 ||
        strcmp(url, "/healthz") == 0 || strcmp(url, "/readyz") == 0 || strcmp(url, "/livez") == 0)
        return false;
    if (f.latency > 0)
        util_sleep(f.latency);
    if (f.error_rate <= 0)
        return false;
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), 0) != (ssize_t)sizeof(rnd))
        return false;
    if ((double)rnd / 4294967296.0 >= f.error_rate)
        return false;
    int code = f.error_code ? f.error_code : 500;
    size_t len = 0;
    char *text = code == 429 ? status_text(429, "TooManyRequests",
                                           "Too many requests, please try again later.", &len)
                 : code == 503
                     ? status_text(503, "ServiceUnavailable", "injected: service unavailable", &len)
                     : status_text(code, "InternalError", "injected: internal error", &len);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(resp, "Content-Type", "application/json");
    if (code == 429 || code == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    *ret = MHD_queue_response(cn->c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    count(s, "FAULT", "", code);
    return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
    (void)version;
    kl_server *s = cls;
    struct conn *cn = *con_cls;
    if (!cn) {
        cn = util_calloc(1, sizeof(*cn));
        cn->srv = s;
        cn->c = c;
        *con_cls = cn;
        return MHD_YES;
    }
    if (*upload_size) {
        if (cn->len + *upload_size + 1 > cn->cap) {
            size_t cap = cn->cap ? cn->cap * 2 : 4096;
            while (cap < cn->len + *upload_size + 1)
                cap *= 2;
            char *nb = realloc(cn->body, cap);
            if (!nb)
                return MHD_NO;
            cn->body = nb;
            cn->cap = cap;
        }
        memcpy(cn->body + cn->len, upload, *upload_size);
        cn->len += *upload_size;
        cn->body[cn->len] = '\0';
        *upload_size = 0;
        return MHD_YES;
    }
    if (cn->st)
        return MHD_YES; /* already answering with a stream */

    util_duration start = util_now_mono();
    enum MHD_Result ret = MHD_YES;
    if (admin(s, cn, url, method, &ret) || inject_fault(s, cn, url, &ret))
        return ret;
    if (strcmp(url, "/metrics") == 0 && strcmp(method, "GET") == 0) {
        size_t len = 0;
        char *text = metrics_text(s, &len);
        return queue_text(c, 200, "text/plain; version=0.0.4", text, len);
    }

    kl_request req = {
        .method = method,
        .path = url,
        .query = get_arg,
        .query_ud = c,
        .content_type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type"),
        .accept = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Accept"),
        .authorization = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"),
        .user_agent = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "User-Agent"),
        .body = cn->body,
        .body_len = cn->len,
    };
    kl_response r;
    kl_api_handle(s->api, &req, &r);
    count(s, r.verb ? r.verb : method, r.resource, r.code);
    obs_v(2, "%s %s %d %.3f ms", method, url, r.code,
          (double)(util_now_mono() - start) / (double)UTIL_MS);

    struct MHD_Response *resp;
    if (r.stream) {
        cn->st = r.stream;
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, (size_t)64 * 1024, watch_reader,
                                                 cn, NULL);
        pthread_mutex_lock(&s->mu);
        cn->next = s->watches;
        if (s->watches)
            s->watches->prev = cn;
        s->watches = cn;
        pthread_mutex_unlock(&s->mu);
        kl_stream_set_wakeup(cn->st, wake, cn);
    } else {
        resp = MHD_create_response_from_buffer(r.len, r.body, MHD_RESPMEM_MUST_FREE);
    }
    MHD_add_response_header(resp, "Content-Type",
                            r.content_type ? r.content_type : "application/json");
    MHD_add_response_header(resp, "Cache-Control", "no-cache, private");
    if (r.retry_after)
        MHD_add_response_header(resp, "Retry-After", r.retry_after);
    ret = MHD_queue_response(c, (unsigned)r.code, resp);
    MHD_destroy_response(resp);
    return ret;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why)
{
    (void)c;
    (void)why;
    kl_server *s = cls;
    struct conn *cn = *con_cls;
    if (!cn)
        return;
    *con_cls = NULL;
    if (cn->st) {
        /* After this no store notification can reach the connection. */
        kl_stream_set_wakeup(cn->st, NULL, NULL);
        kl_stream_free(cn->st);
        pthread_mutex_lock(&s->mu);
        if (cn->prev)
            cn->prev->next = cn->next;
        else
            s->watches = cn->next;
        if (cn->next)
            cn->next->prev = cn->prev;
        pthread_mutex_unlock(&s->mu);
    }
    free(cn->pending);
    free(cn->body);
    free(cn);
}

/* ---- lifecycle ---------------------------------------------------------------------- */

int kl_server_start(kl_api *api, const kl_server_opts *opts, kl_server **out)
{
    *out = NULL;
    kl_server *s = util_calloc(1, sizeof(*s));
    s->api = api;
    if (opts)
        s->opts = *opts;
    s->faults = s->opts.faults;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->fmu, NULL);
    pthread_mutex_init(&s->cmu, NULL);

    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)s->opts.port);
    const char *host = s->opts.host ? s->opts.host : "127.0.0.1";
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        free(s);
        return util_err_set(-EINVAL, "--listen: \"%s\" is not an IPv4 address", host);
    }
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    bool tls = s->opts.tls_cert_pem && s->opts.tls_key_pem;
    if (tls)
        flags |= MHD_USE_TLS;
    unsigned threads = (unsigned)(s->opts.threads > 0 ? s->opts.threads : 4);
    if (tls)
        s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &sa,
                                MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED,
                                on_completed, s, MHD_OPTION_CONNECTION_LIMIT, 10000u,
                                MHD_OPTION_HTTPS_MEM_CERT, s->opts.tls_cert_pem,
                                MHD_OPTION_HTTPS_MEM_KEY, s->opts.tls_key_pem, MHD_OPTION_END);
    else
        s->d =
            MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &sa,
                             MHD_OPTION_THREAD_POOL_SIZE, threads, MHD_OPTION_NOTIFY_COMPLETED,
                             on_completed, s, MHD_OPTION_CONNECTION_LIMIT, 10000u, MHD_OPTION_END);
    if (!s->d) {
        pthread_mutex_destroy(&s->mu);
        pthread_mutex_destroy(&s->fmu);
        pthread_mutex_destroy(&s->cmu);
        free(s);
        return util_err_set(-EADDRINUSE, "cannot listen on %s:%d%s", host, opts ? opts->port : 0,
                            tls ? " (TLS: check the certificate and key)" : "");
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : s->opts.port;
    if (pthread_create(&s->ticker, NULL, ticker_main, s) != 0) {
        MHD_stop_daemon(s->d);
        free(s);
        return util_err_set(-EAGAIN, "cannot start the watch ticker");
    }
    *out = s;
    return 0;
}

int kl_server_port(const kl_server *s)
{
    return s->port;
}

void kl_server_stop(kl_server *s)
{
    if (!s)
        return;
    atomic_store(&s->stopping, true);
    pthread_join(s->ticker, NULL);
    /* Every suspended watch must run again to end before the daemon stops. */
    pthread_mutex_lock(&s->mu);
    for (struct conn *cn = s->watches; cn; cn = cn->next) {
        if (cn->suspended) {
            cn->suspended = false;
            MHD_resume_connection(cn->c);
        }
    }
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->d);
    while (s->counters) {
        struct counter *n = s->counters->next;
        free(s->counters->key);
        free(s->counters);
        s->counters = n;
    }
    pthread_mutex_destroy(&s->mu);
    pthread_mutex_destroy(&s->fmu);
    pthread_mutex_destroy(&s->cmu);
    free(s);
}
