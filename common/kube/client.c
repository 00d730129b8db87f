/*
 * The one request path to the API server: libcurl easy handles kept in a
 * small per-client pool (a handle keeps its keep-alive connection, so a
 * connection moves between threads with its handle and the number of
 * connections follows the peak number of concurrent requests), a token
 * bucket with client-go's qps/burst meaning shared by all threads, bounded
 * retries, and Status bodies decoded into reason and message.
 *
 * Connections are deliberately not shared through a CURLSH connection
 * cache: libcurl documents that as unsafe between concurrent threads (its
 * known bug "A shared connection cache is not thread-safe"). The share holds
 * the DNS and TLS session caches only, which are safe with locks.
 *
 * Watches (watch.c) use their own handle, and the kube_client__ functions
 * declared below.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>

#include <curl/curl.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

#define DEFAULT_TIMEOUT    (30 * UTIL_SECOND)
#define DEFAULT_RETRIES    10
#define CONNECT_TIMEOUT_MS 30000L
#define POOL_MAX           64 /* idle handles kept; more are closed */
#define RETRY_AFTER_MAX    10 /* seconds: a larger Retry-After is capped */
#define BACKOFF_BASE       (50 * UTIL_MS)
#define BACKOFF_MAX        (5 * UTIL_SECOND)
#define LONG_THROTTLE      (50 * UTIL_MS) /* client-go logs waits beyond this */

/* A pooled easy handle with its own error text. */
struct handle {
    CURL *h;
    char err[CURL_ERROR_SIZE];
};

struct kube_client {
    kube_config *cfg;
    char *base;        /* scheme://authority[/prefix] that paths are appended to */
    char *shown;       /* the server's own URL base for logs, when base differs */
    char *host;        /* host:port, for metrics */
    char *host_header; /* "Host: ..." when tls-server-name rewrote the URL */
    struct curl_slist *connect_to;
    char *user_agent;
    long timeout_ms;
    int max_retries;

    CURLSH *share;
    pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];

    pthread_mutex_t pool_mu;
    struct handle *pool[POOL_MAX];
    size_t n_pool;

    /* Token bucket (golang.org/x/time/rate semantics: reservations may take
     * the bucket below zero, so waiters are served in arrival order). */
    pthread_mutex_t rl_mu;
    double qps, burst, tokens;
    util_duration rl_last;

    obs_metric *m_requests, *m_latency, *m_throttle;
    obs_registry *metrics; /* kube_client_opts.metrics: informers count there too */
};

/* The registry of kube_client_opts.metrics (NULL: none), for informer.c. */
obs_registry *kube_client__metrics(kube_client *c);
obs_registry *kube_client__metrics(kube_client *c)
{
    return c->metrics;
}

/* Functions watch.c shares with this file (no header: only these two use them). */
int kube_client__prepare_get(kube_client *c, CURL *h, char *errbuf, const char *path,
                             struct curl_slist **headers, char **shown_url);
void kube_client__free_headers(struct curl_slist *headers);
void kube_client__throttle(kube_client *c, const char *method, const char *url);
void kube_client__decode(kube_resp *r, long code, const char *body, size_t len);

/* ---- process-wide libcurl initialisation --------------------------------------- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* ---- share locks ------------------------------------------------------------------ */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *ud)
{
    (void)h;
    (void)access;
    kube_client *c = ud;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_lock(&c->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *ud)
{
    (void)h;
    kube_client *c = ud;
    if ((int)data >= 0 && data < CURL_LOCK_DATA_LAST)
        pthread_mutex_unlock(&c->share_mu[data]);
}

/* ---- lifecycle --------------------------------------------------------------------- */

static char *url_part(CURLU *u, CURLUPart part, unsigned flags)
{
    char *s = NULL;
    if (curl_url_get(u, part, &s, flags) != CURLUE_OK)
        return NULL;
    char *copy = util_strdup(s);
    curl_free(s);
    return copy;
}

/*
 * Works out the URL base. With tls-server-name the URL names that host (so
 * SNI and certificate checks use it, as Go's tls.Config.ServerName does),
 * CONNECT_TO sends the connection to the real address, and the Host header
 * keeps the server's own authority.
 */
static int parse_server(kube_client *c, const char *server, const char *server_name)
{
    CURLU *u = curl_url();
    if (!u)
        abort();
    int rc = 0;
    char *scheme = NULL, *host = NULL, *port = NULL, *given_port = NULL, *path = NULL;
    if (curl_url_set(u, CURLUPART_URL, server, 0) != CURLUE_OK) {
        rc = util_err_set(-EINVAL, "kube client: server \"%s\" is not a URL", server);
        goto out;
    }
    scheme = url_part(u, CURLUPART_SCHEME, 0);
    host = url_part(u, CURLUPART_HOST, 0);
    port = url_part(u, CURLUPART_PORT, CURLU_DEFAULT_PORT);
    given_port = url_part(u, CURLUPART_PORT, 0);
    path = url_part(u, CURLUPART_PATH, 0);
    if (!scheme || !host || !port ||
        (strcmp(scheme, "https") != 0 && strcmp(scheme, "http") != 0)) {
        rc = util_err_set(-EINVAL, "kube client: server \"%s\" is not an http(s) URL", server);
        goto out;
    }
    size_t plen = path ? strlen(path) : 0;
    while (plen > 0 && path[plen - 1] == '/')
        plen--;
    const char *authority_port = given_port ? ":" : "";
    const char *gp = given_port ? given_port : "";
    c->host = util_asprintf("%s:%s", host, port);
    if (server_name && *server_name && strcmp(scheme, "https") == 0 &&
        strcmp(server_name, host) != 0) {
        c->base =
            util_asprintf("https://%s:%s%.*s", server_name, port, (int)plen, path ? path : "");
        char *ct = util_asprintf("%s:%s:%s:%s", server_name, port, host, port);
        c->connect_to = curl_slist_append(NULL, ct);
        free(ct);
        if (!c->connect_to)
            abort();
        c->host_header = util_asprintf("Host: %s%s%s", host, authority_port, gp);
        c->shown = util_asprintf("%s://%s%s%s%.*s", scheme, host, authority_port, gp, (int)plen,
                                 path ? path : "");
    } else {
        c->base = util_asprintf("%s://%s%s%s%.*s", scheme, host, authority_port, gp, (int)plen,
                                path ? path : "");
    }
out:
    free(scheme);
    free(host);
    free(port);
    free(given_port);
    free(path);
    curl_url_cleanup(u);
    return rc;
}

static const double latency_buckets[] = {0.005, 0.025, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60};

static void register_metrics(kube_client *c, obs_registry *reg)
{
    static const char *const req_labels[] = {"code", "host", "method", NULL};
    static const char *const lat_labels[] = {"verb", "host", NULL};
    size_t nb = sizeof(latency_buckets) / sizeof(latency_buckets[0]);
    c->m_requests = obs_counter_new(reg, "rest_client_requests_total",
                                    "Number of HTTP requests, partitioned by status code, method, "
                                    "and host.",
                                    req_labels);
    c->m_latency = obs_histogram_new(reg, "rest_client_request_duration_seconds",
                                     "Request latency in seconds. Broken down by verb, and host.",
                                     lat_labels, latency_buckets, nb);
    c->m_throttle = obs_histogram_new(reg, "rest_client_rate_limiter_duration_seconds",
                                      "Client side rate limiter latency in seconds. Broken down by "
                                      "verb, and host.",
                                      lat_labels, latency_buckets, nb);
}

int kube_client_new(kube_config *cfg, const kube_client_opts *opts, kube_client **out)
{
    *out = NULL;
    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK)
        return util_err_set(-ENOMEM, "kube client: curl_global_init: %s",
                            curl_easy_strerror(curl_init_rc));
    const char *server = cfg ? kube_config_server(cfg) : NULL;
    if (!server || !*server)
        return util_err_set(-EINVAL, "kube client: no API server URL in the configuration");
    kube_client_opts o = {0};
    if (opts)
        o = *opts;
    const kube_tls *tls = kube_config_tls(cfg);

    kube_client *c = util_calloc(1, sizeof(*c));
    c->cfg = cfg;
    int rc = parse_server(c, server, tls ? tls->server_name : NULL);
    if (rc < 0) {
        free(c);
        return rc;
    }
    c->user_agent = util_strdup(o.user_agent && *o.user_agent ? o.user_agent : "csi-sidecar");
    util_duration t = o.timeout > 0 ? o.timeout : DEFAULT_TIMEOUT;
    c->timeout_ms = (long)((t + UTIL_MS - 1) / UTIL_MS);
    c->max_retries = o.max_retries < 0 ? 0 : o.max_retries == 0 ? DEFAULT_RETRIES : o.max_retries;
    c->qps = o.qps > 0 ? o.qps : 0;
    c->burst = o.burst < 1 ? 1 : o.burst;
    c->tokens = c->burst; /* the bucket starts full: the first `burst` go at once */
    c->rl_last = util_now_mono();
    pthread_mutex_init(&c->pool_mu, NULL);
    pthread_mutex_init(&c->rl_mu, NULL);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_init(&c->share_mu[i], NULL);
    c->share = curl_share_init();
    if (!c->share)
        abort();
    curl_share_setopt(c->share, CURLSHOPT_LOCKFUNC, share_lock);
    curl_share_setopt(c->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
    curl_share_setopt(c->share, CURLSHOPT_USERDATA, c);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
    curl_share_setopt(c->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
    c->metrics = o.metrics;
    if (o.metrics)
        register_metrics(c, o.metrics);
    *out = c;
    return 0;
}

void kube_client_free(kube_client *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n_pool; i++) {
        curl_easy_cleanup(c->pool[i]->h);
        free(c->pool[i]);
    }
    /* Handles are gone, so nothing uses the share any more. */
    curl_share_cleanup(c->share);
    for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
        pthread_mutex_destroy(&c->share_mu[i]);
    pthread_mutex_destroy(&c->pool_mu);
    pthread_mutex_destroy(&c->rl_mu);
    curl_slist_free_all(c->connect_to);
    free(c->base);
    free(c->shown);
    free(c->host);
    free(c->host_header);
    free(c->user_agent);
    free(c);
}

/* ---- handles ----------------------------------------------------------------------- */

static void set_blob(CURL *h, CURLoption opt, const char *pem)
{
    struct curl_blob b = {.data = (void *)pem, .len = strlen(pem), .flags = CURL_BLOB_COPY};
    curl_easy_setopt(h, opt, &b);
}

/* Options that stay the same for every request of the client. */
static void setup_handle(kube_client *c, CURL *h, char *errbuf)
{
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    curl_easy_setopt(h, CURLOPT_SHARE, c->share);
    curl_easy_setopt(h, CURLOPT_USERAGENT, c->user_agent);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, CONNECT_TIMEOUT_MS);
    curl_easy_setopt(h, CURLOPT_ACCEPT_ENCODING, "gzip");
    /* Go's dialer keep-alive: notices a peer that vanished without a FIN. */
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 30L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 30L);
    if (c->connect_to)
        curl_easy_setopt(h, CURLOPT_CONNECT_TO, c->connect_to);
    const kube_tls *tls = kube_config_tls(c->cfg);
    if (!tls)
        return;
    if (tls->insecure) {
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 0L);
    } else if (tls->ca_pem || tls->ca_file) {
        /* Only the cluster's CA, as client-go: no system CA directory. The
         * data wins over the file when both are set (client-go's order). */
        curl_easy_setopt(h, CURLOPT_CAPATH, NULL);
        if (tls->ca_pem)
            set_blob(h, CURLOPT_CAINFO_BLOB, tls->ca_pem);
        else
            curl_easy_setopt(h, CURLOPT_CAINFO, tls->ca_file);
    }
    if (tls->cert_pem)
        set_blob(h, CURLOPT_SSLCERT_BLOB, tls->cert_pem);
    else if (tls->cert_file)
        curl_easy_setopt(h, CURLOPT_SSLCERT, tls->cert_file);
    if (tls->key_pem)
        set_blob(h, CURLOPT_SSLKEY_BLOB, tls->key_pem);
    else if (tls->key_file)
        curl_easy_setopt(h, CURLOPT_SSLKEY, tls->key_file);
}

static struct handle *handle_get(kube_client *c)
{
    pthread_mutex_lock(&c->pool_mu);
    struct handle *hd = c->n_pool ? c->pool[--c->n_pool] : NULL;
    pthread_mutex_unlock(&c->pool_mu);
    if (hd)
        return hd;
    hd = util_calloc(1, sizeof(*hd));
    hd->h = curl_easy_init();
    if (!hd->h)
        abort();
    setup_handle(c, hd->h, hd->err);
    return hd;
}

void kube_client_trim(kube_client *c, size_t keep)
{
    if (!c)
        return;
    struct handle *drop[POOL_MAX];
    size_t n = 0;
    pthread_mutex_lock(&c->pool_mu);
    /* The pool is a stack: its bottom holds the longest unused handles. */
    if (c->n_pool > keep) {
        n = c->n_pool - keep;
        for (size_t i = 0; i < n; i++)
            drop[i] = c->pool[i];
        for (size_t i = 0; i < keep; i++)
            c->pool[i] = c->pool[n + i];
        c->n_pool = keep;
    }
    pthread_mutex_unlock(&c->pool_mu);
    for (size_t i = 0; i < n; i++) {
        curl_easy_cleanup(drop[i]->h);
        free(drop[i]);
    }
    if (n)
        obs_v(5, "kube client: %zu idle connections closed", n);
}

static void handle_put(kube_client *c, struct handle *hd)
{
    /* Nothing of the finished request may stay behind in a pooled handle. */
    curl_easy_setopt(hd->h, CURLOPT_HTTPHEADER, NULL);
    curl_easy_setopt(hd->h, CURLOPT_POSTFIELDS, NULL);
    curl_easy_setopt(hd->h, CURLOPT_WRITEDATA, NULL);
    curl_easy_setopt(hd->h, CURLOPT_HEADERDATA, NULL);
    pthread_mutex_lock(&c->pool_mu);
    bool kept = c->n_pool < POOL_MAX;
    if (kept)
        c->pool[c->n_pool++] = hd;
    pthread_mutex_unlock(&c->pool_mu);
    if (!kept) {
        curl_easy_cleanup(hd->h);
        free(hd);
    }
}

/* ---- headers ----------------------------------------------------------------------- */

static struct curl_slist *add_header(struct curl_slist *l, const char *h)
{
    struct curl_slist *n = curl_slist_append(l, h);
    if (!n)
        abort();
    return n;
}

/* Accept, optional Content-Type, the bearer token of this moment, Host. */
static int build_headers(kube_client *c, const char *content_type, struct curl_slist **out)
{
    *out = NULL;
    char *token = NULL;
    int rc = kube_config_token(c->cfg, &token);
    if (rc < 0)
        return rc;
    struct curl_slist *l = add_header(NULL, "Accept: application/json");
    /* No "Expect: 100-continue" round trip for larger bodies. */
    l = add_header(l, "Expect:");
    if (content_type) {
        char *ct = util_asprintf("Content-Type: %s", content_type);
        l = add_header(l, ct);
        free(ct);
    }
    if (c->host_header)
        l = add_header(l, c->host_header);
    if (token && *token) {
        char *auth = util_asprintf("Authorization: Bearer %s", token);
        l = add_header(l, auth);
        explicit_bzero(auth, strlen(auth));
        free(auth);
    }
    if (token) {
        explicit_bzero(token, strlen(token));
        free(token);
    }
    *out = l;
    return 0;
}

void kube_client__free_headers(struct curl_slist *headers)
{
    for (struct curl_slist *l = headers; l; l = l->next)
        if (l->data && strncasecmp(l->data, "Authorization:", 14) == 0)
            explicit_bzero(l->data, strlen(l->data));
    curl_slist_free_all(headers);
}

/* ---- rate limiting ----------------------------------------------------------------- */

/* Adds the tokens earned since the last look, up to the burst (rl_mu held). */
static void refill_locked(kube_client *c)
{
    util_duration now = util_now_mono();
    if (now > c->rl_last) {
        c->tokens += (double)(now - c->rl_last) * c->qps / (double)UTIL_SECOND;
        if (c->tokens > c->burst)
            c->tokens = c->burst;
        c->rl_last = now;
    }
}

/* Reserves one token; returns how long to wait for it. */
static util_duration reserve(kube_client *c)
{
    pthread_mutex_lock(&c->rl_mu);
    refill_locked(c);
    c->tokens -= 1;
    util_duration wait =
        c->tokens < 0 ? (util_duration)(-c->tokens / c->qps * (double)UTIL_SECOND) : 0;
    pthread_mutex_unlock(&c->rl_mu);
    return wait;
}

/*
 * Takes a token only when one is spare: no other request is waiting (a
 * waiting request has driven the count below 1) and one more is left for
 * the next. Returns how long to sleep before asking again, 0 once taken.
 */
static util_duration take_spare(kube_client *c)
{
    pthread_mutex_lock(&c->rl_mu);
    refill_locked(c);
    double need = c->burst > 1 ? 2 : 1;
    util_duration wait = 0;
    if (c->tokens >= need)
        c->tokens -= 1;
    else
        wait = (util_duration)((need - c->tokens) / c->qps * (double)UTIL_SECOND) + UTIL_MS;
    pthread_mutex_unlock(&c->rl_mu);
    return wait;
}

static void throttle(kube_client *c, enum kube_priority prio, const char *method, const char *url)
{
    if (c->qps <= 0)
        return;
    util_duration wait = 0;
    if (prio == KUBE_PRIO_BACKGROUND) {
        /* Asks again at least every 100 ms: a burst of other requests
         * that came meanwhile goes first. */
        for (util_duration w; (w = take_spare(c)) > 0; wait += w) {
            w = w < 100 * UTIL_MS ? w : 100 * UTIL_MS;
            util_sleep(w);
        }
    } else {
        wait = reserve(c);
        util_sleep(wait);
    }
    if (wait > LONG_THROTTLE)
        obs_v(3,
              "Waited for %.3fs due to client-side throttling, not priority and fairness, "
              "request: %s:%s",
              (double)wait / (double)UTIL_SECOND, method, url);
    if (c->m_throttle) {
        const char *lv[] = {method, c->host};
        obs_histogram_observe(c->m_throttle, lv, (double)wait / (double)UTIL_SECOND);
    }
}

void kube_client__throttle(kube_client *c, const char *method, const char *url)
{
    throttle(c, KUBE_PRIO_NORMAL, method, url);
}

/* ---- responses --------------------------------------------------------------------- */

/* A page of a list (informers ask for 500 items) stays far below this;
 * more is a broken or hostile server, and json-c takes an int length. */
#define BODY_MAX ((size_t)256 << 20)

typedef struct buf {
    char *p;
    size_t len, cap;
    bool over; /* BODY_MAX reached: the transfer was ended */
} buf;

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    buf *b = ud;
    size_t add = size * n;
    if (add > BODY_MAX - b->len) {
        b->over = true;
        return 0; /* curl fails the transfer with a write error */
    }
    if (b->len + add + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + add + 1)
            cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np)
            return 0; /* curl fails the transfer with a write error */
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, add);
    b->len += add;
    b->p[b->len] = '\0';
    return add;
}

struct head {
    int retry_after; /* seconds, -1 when absent */
    bool json;       /* Content-Type says JSON (or none was sent) */
};

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
    struct head *hd = ud;
    size_t len = size * n;
    if (len >= 5 && strncmp(data, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue): forget the earlier one. */
        hd->retry_after = -1;
        hd->json = true;
    } else if (len > 12 && strncasecmp(data, "Retry-After:", 12) == 0) {
        char tmp[32];
        size_t vl = len - 12 < sizeof(tmp) - 1 ? len - 12 : sizeof(tmp) - 1;
        memcpy(tmp, data + 12, vl);
        tmp[vl] = '\0';
        char *end = NULL;
        long v = strtol(tmp, &end, 10);
        /* Only the delta-seconds form: that is what kube-apiserver sends. */
        if (end != tmp && v >= 0)
            hd->retry_after = v > RETRY_AFTER_MAX ? RETRY_AFTER_MAX : (int)v;
    } else if (len > 13 && strncasecmp(data, "Content-Type:", 13) == 0) {
        hd->json = memmem(data, len, "json", 4) != NULL;
    }
    return len;
}

static void copy_text(char *dst, size_t cap, const char *src, size_t len)
{
    if (len >= cap)
        len = cap - 1;
    memcpy(dst, src, len);
    dst[len] = '\0';
}

/* An answer without a Status: what client-go says for the bare code. */
static const char *generic_message(long code)
{
    switch (code) {
    case 400:
        return "the server rejected our request for an unknown reason";
    case 401:
        return "the server has asked for the client to provide credentials";
    case 403:
        return "the server does not allow access to the requested resource";
    case 404:
        return "the server could not find the requested resource";
    case 409:
        return "the server reported a conflict";
    case 410:
        return "the server has asked for the client to retry the request";
    case 422:
        return "the server rejected our request due to an error in our request";
    case 429:
        return "the server has received too many requests and has asked us to try again later";
    case 500:
        return "an error on the server has prevented the request from succeeding";
    case 503:
        return "the server is currently unable to handle the request";
    case 504:
        return "the server was unable to return a response in the time allotted, but may still "
               "be processing the request";
    default:
        return NULL;
    }
}

void kube_client__decode(kube_resp *r, long code, const char *body, size_t len)
{
    r->code = (int)code;
    r->reason[0] = r->message[0] = '\0';
    bool ok = code >= 200 && code < 300;
    if (!r->body && body && len && !(ok && r->skip_body))
        r->body = kobj_parse_text(body, len);
    if (ok)
        return;
    const char *kind = kobj_str(r->body, "kind");
    if (kind && strcmp(kind, "Status") == 0) {
        const char *reason = kobj_str(r->body, "reason");
        const char *msg = kobj_str(r->body, "message");
        if (reason)
            copy_text(r->reason, sizeof(r->reason), reason, strlen(reason));
        if (msg)
            copy_text(r->message, sizeof(r->message), msg, strlen(msg));
    }
    if (r->message[0])
        return;
    const char *g = generic_message(code);
    if (g)
        snprintf(r->message, sizeof(r->message), "%s", g);
    else if (body && len && !r->body)
        copy_text(r->message, sizeof(r->message), body, len);
    else
        snprintf(r->message, sizeof(r->message),
                 "the server responded with the status code %ld but did not return more "
                 "information",
                 code);
}

void kube_resp_clear(kube_resp *r)
{
    if (!r)
        return;
    json_object_put(r->body);
    memset(r, 0, sizeof(*r));
}

bool kube_is_not_found(const kube_resp *r)
{
    return strcmp(r->reason, "NotFound") == 0 || (!r->reason[0] && r->code == 404);
}

bool kube_is_conflict(const kube_resp *r)
{
    return strcmp(r->reason, "Conflict") == 0 || (!r->reason[0] && r->code == 409);
}

bool kube_is_already_exists(const kube_resp *r)
{
    return strcmp(r->reason, "AlreadyExists") == 0;
}

/* ---- retries ----------------------------------------------------------------------- */

/*
 * Every verb is retried on a 429/5xx or a connection error: a repeated write
 * that had been applied answers as a repeat does (AlreadyExists for a
 * create, a failed test for a JSON patch, the same object for a merge
 * patch), which callers already treat as done, while sending the item back
 * to its queue's exponential backoff for each transient fault made a
 * controller crawl under a flaky API server.
 */
static bool retry_code(long code)
{
    return code == 429 || (code >= 500 && code <= 599 && code != 501);
}

static bool retry_transport(CURLcode e)
{
    switch (e) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        /* Timeouts included: the request already used its whole time (and
         * client-go does not retry them either); certificate errors. */
        return false;
    }
}

static util_duration backoff(int attempt, int retry_after)
{
    if (retry_after >= 0)
        return (util_duration)retry_after * UTIL_SECOND;
    util_duration d = BACKOFF_BASE;
    for (int i = 0; i < attempt && d < BACKOFF_MAX; i++)
        d *= 2;
    if (d > BACKOFF_MAX)
        d = BACKOFF_MAX;
    /* Jitter in [d/2, d): clients that failed together spread out. */
    uint32_t rnd = 0;
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd))
        rnd = 0;
    util_duration half = d / 2;
    return half + (util_duration)((double)half * ((double)rnd / 4294967296.0));
}

/* ---- requests ---------------------------------------------------------------------- */

static void set_method(CURL *h, const char *method, const char *body)
{
    bool post = strcmp(method, "POST") == 0;
    if (body || post) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body : "");
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)(body ? strlen(body) : 0));
    } else {
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    }
    /* After HTTPGET, which would clear it. */
    bool head = strcmp(method, "HEAD") == 0;
    curl_easy_setopt(h, CURLOPT_NOBODY, head ? 1L : 0L);
    bool plain = head || strcmp(method, body || post ? "POST" : "GET") == 0;
    curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, plain ? NULL : method);
}

static void count_request(kube_client *c, const char *method, long code, util_duration took)
{
    if (c->m_requests) {
        char cs[24];
        if (code > 0)
            snprintf(cs, sizeof(cs), "%ld", code);
        else
            snprintf(cs, sizeof(cs), "<error>");
        const char *lv[] = {cs, c->host, method};
        obs_counter_add(c->m_requests, lv, 1);
    }
    if (c->m_latency) {
        const char *lv[] = {method, c->host};
        obs_histogram_observe(c->m_latency, lv, (double)took / (double)UTIL_SECOND);
    }
}

int kube_request(kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, kube_resp *r)
{
    return kube_request_prio(c, KUBE_PRIO_NORMAL, method, path, content_type, body, r);
}

int kube_request_prio(kube_client *c, enum kube_priority prio, const char *method, const char *path,
                      const char *content_type, const char *body, kube_resp *r)
{
    bool skip_body = r->skip_body; /* the one field that comes in */
    memset(r, 0, sizeof(*r));
    r->skip_body = skip_body;
    char *url = util_asprintf("%s%s", c->base, path);
    char *shown = c->shown ? util_asprintf("%s%s", c->shown, path) : NULL;
    const char *log_url = shown ? shown : url;
    struct handle *hd = handle_get(c);
    /* Retries stay within one request timeout in all, so the operation's
     * own deadline (and its queue's backoff) still decides after that. */
    util_duration deadline = util_now_mono() + (util_duration)c->timeout_ms * UTIL_MS;
    CURL *h = hd->h;
    buf b = {0};
    int rc = -EIO;
    for (int attempt = 0;; attempt++) {
        throttle(c, prio, method, log_url);
        struct curl_slist *headers = NULL;
        /* A body always says what it is (curl would call it a form). */
        const char *ct = body || strcmp(method, "POST") == 0
                             ? (content_type ? content_type : "application/json")
                             : NULL;
        rc = build_headers(c, ct, &headers);
        if (rc < 0) {
            snprintf(r->message, sizeof(r->message), "%s", util_err_last());
            break;
        }
        b.len = 0;
        b.over = false;
        struct head head = {.retry_after = -1, .json = true};
        curl_easy_setopt(h, CURLOPT_URL, url);
        set_method(h, method, body);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, &b);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, &head);
        hd->err[0] = '\0';
        util_duration start = util_now_mono();
        CURLcode e = curl_easy_perform(h);
        util_duration took = util_now_mono() - start;
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        kube_client__free_headers(headers);
        long code = 0;
        if (e == CURLE_OK)
            curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &code);
        count_request(c, method, code, took);
        bool retry;
        if (e == CURLE_OK) {
            /* Never log bodies: they may be Secrets. */
            obs_v(5, "%s %s %ld in %lld milliseconds", method, log_url, code,
                  (long long)(took / UTIL_MS));
            json_object_put(r->body);
            r->body = NULL;
            kube_client__decode(r, code, b.p, b.len);
            if (code >= 200 && code < 300) {
                rc = 0;
                if (head.json && b.len && !r->body && !r->skip_body) {
                    rc = -EIO;
                    snprintf(r->message, sizeof(r->message), "cannot decode the response body");
                }
                break;
            }
            rc = -EREMOTEIO;
            retry = retry_code(code);
        } else {
            obs_v(5, "%s %s failed in %lld milliseconds: %s", method, log_url,
                  (long long)(took / UTIL_MS), hd->err[0] ? hd->err : curl_easy_strerror(e));
            json_object_put(r->body);
            r->body = NULL;
            r->code = 0;
            r->reason[0] = '\0';
            if (b.over)
                snprintf(r->message, sizeof(r->message), "%s %s: the answer is over %zu MiB",
                         method, log_url, BODY_MAX >> 20);
            else
                snprintf(r->message, sizeof(r->message), "%s %s: %s", method, log_url,
                         hd->err[0] ? hd->err : curl_easy_strerror(e));
            rc = b.over ? -EMSGSIZE : -EIO;
            retry = !b.over && retry_transport(e);
        }
        if (!retry || attempt >= c->max_retries)
            break;
        util_duration wait = backoff(attempt, e == CURLE_OK ? head.retry_after : -1);
        if (util_now_mono() + wait >= deadline)
            break;
        obs_v(4, "Retrying %s %s after %lld ms (attempt %d of %d): %s", method, log_url,
              (long long)(wait / UTIL_MS), attempt + 1, c->max_retries, r->message);
        util_sleep(wait);
    }
    handle_put(c, hd);
    free(b.p);
    if (rc < 0)
        util_err_set(rc, "%s %s: %s", method, path, r->message);
    free(shown);
    free(url);
    return rc;
}

int kube_get(kube_client *c, const char *path, kube_resp *r)
{
    return kube_request(c, "GET", path, NULL, NULL, r);
}

int kube_get_object(kube_client *c, const kube_resource *res, const char *path, const char *name,
                    kube_resp *r)
{
    int rc = kube_get(c, path, r);
    if (rc < 0)
        return rc;
    if (!r->body || kube_object_check(res, r->body, name) < 0) {
        rc = util_err_set(-EBADMSG, "GET %s: %s", path,
                          r->body ? util_err_last() : "the answer holds no object");
        snprintf(r->message, sizeof(r->message), "%s", util_err_last());
    }
    return rc;
}

int kube_create(kube_client *c, const char *collection_path, const json_object *obj, kube_resp *r)
{
    char *text = kobj_to_text(obj, NULL);
    int rc = kube_request(c, "POST", collection_path, "application/json", text, r);
    free(text);
    return rc;
}

int kube_update(kube_client *c, const char *path, const json_object *obj, kube_resp *r)
{
    char *text = kobj_to_text(obj, NULL);
    int rc = kube_request(c, "PUT", path, "application/json", text, r);
    free(text);
    return rc;
}

const char *kube_patch_content_type(enum kube_patch_type type)
{
    return type == KUBE_PATCH_JSON        ? "application/json-patch+json"
           : type == KUBE_PATCH_STRATEGIC ? "application/strategic-merge-patch+json"
                                          : "application/merge-patch+json";
}

int kube_patch(kube_client *c, const char *path, enum kube_patch_type type, const char *patch,
               kube_resp *r)
{
    return kube_request(c, "PATCH", path, kube_patch_content_type(type), patch, r);
}

int kube_delete(kube_client *c, const char *path, const char *options, kube_resp *r)
{
    return kube_request(c, "DELETE", path, options ? "application/json" : NULL, options, r);
}

/* ---- watch.c ----------------------------------------------------------------------- */

int kube_client__prepare_get(kube_client *c, CURL *h, char *errbuf, const char *path,
                             struct curl_slist **headers, char **shown_url)
{
    *shown_url = NULL;
    int rc = build_headers(c, NULL, headers);
    if (rc < 0)
        return rc;
    setup_handle(c, h, errbuf);
    char *url = util_asprintf("%s%s", c->base, path);
    curl_easy_setopt(h, CURLOPT_URL, url); /* curl keeps a copy */
    curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, *headers);
    if (c->shown) {
        free(url);
        url = util_asprintf("%s%s", c->shown, path);
    }
    *shown_url = url;
    return 0;
}
