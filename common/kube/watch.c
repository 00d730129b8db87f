/*
 * Watch streams: one long GET whose body is a sequence of JSON events
 * ({"type":..., "object":...}, newline-separated). Bytes go straight from
 * curl's write callback into json-c's incremental tokener, so an event may
 * end mid-chunk or span several chunks, and a chunk may hold many events;
 * nothing is buffered beyond the tokener's own state.
 *
 * The transfer runs on a multi handle owned by the watch so that another
 * thread can end it at once with curl_multi_wakeup. A stream that carries no
 * byte for STALL_SECONDS is taken as dead (servers send bookmarks about once
 * a minute when asked with allowWatchBookmarks=true). No retries here: the
 * informer relists or rewatches as it sees fit.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

#define STALL_SECONDS 90L
#define ERR_BODY_MAX  65536 /* bytes of a non-200 answer kept for its Status */
#define JSON_DEPTH    64
#define POLL_MS       1000
/* One event holds one object; the API server refuses objects over ~1.5 MiB
 * (etcd's request limit), so an event far beyond that is a broken or hostile
 * stream, not data: the stream ends and the informer rewatches. */
#define EVENT_MAX (16u << 20)

/* From client.c. */
int kube_client__prepare_get(kube_client *c, CURL *h, char *errbuf, const char *path,
                             struct curl_slist **headers, char **shown_url);
void kube_client__free_headers(struct curl_slist *headers);
void kube_client__throttle(kube_client *c, const char *method, const char *url);
void kube_client__decode(kube_resp *r, long code, const char *body, size_t len);

struct kube_watch {
    kube_client *c;
    CURLM *multi;
    CURL *h; /* kept across runs: its connection can serve the next one */
    char err[CURL_ERROR_SIZE];
    atomic_bool cancelled;

    /* State of the running stream. */
    json_tokener *tok;
    kube_watch_fn fn;
    void *ud;
    const char *path;
    long code;      /* HTTP status, once the headers are in */
    char *err_body; /* a non-200 answer */
    size_t err_len;
    bool partial;       /* the tokener holds the start of an event */
    size_t partial_len; /* bytes of that event so far */
    bool stopped;       /* an event or fn ended the stream */
    int stop_rc;
    size_t events;
};

kube_watch *kube_watch_new(kube_client *c)
{
    kube_watch *w = util_calloc(1, sizeof(*w));
    w->c = c;
    w->multi = curl_multi_init();
    w->h = curl_easy_init();
    if (!w->multi || !w->h)
        abort();
    atomic_init(&w->cancelled, false);
    return w;
}

void kube_watch_cancel(kube_watch *w)
{
    if (!w)
        return;
    atomic_store(&w->cancelled, true);
    curl_multi_wakeup(w->multi);
}

void kube_watch_free(kube_watch *w)
{
    if (!w)
        return;
    curl_easy_cleanup(w->h);
    curl_multi_cleanup(w->multi);
    free(w);
}

static void stop(kube_watch *w, int rc)
{
    if (!w->stopped) {
        w->stopped = true;
        w->stop_rc = rc;
    }
}

/* An ERROR event carries a Status: 410 means the resourceVersion is gone. */
static void error_event(kube_watch *w, json_object *status)
{
    int64_t code = 0;
    const char *reason = kobj_str(status, "reason");
    const char *msg = kobj_str(status, "message");
    int c = kobj_int64(status, "code", &code) == 0 && code >= 0 && code < 1000 ? (int)code : 0;
    const char *rs = reason ? reason : "";
    bool gone = c == 410 || strcmp(rs, "Expired") == 0 || strcmp(rs, "Gone") == 0;
    int rc = gone ? -ERANGE : -EREMOTEIO;
    util_err_set(rc, "watch %s: %d %s: %s", w->path, c, rs, msg ? msg : "(no message)");
    stop(w, rc);
}

static void deliver(kube_watch *w, json_object *ev)
{
    const char *t = kobj_str(ev, "type");
    json_object *obj = kobj_get(ev, "object");
    if (!t || !obj) {
        stop(w, util_err_set(-EIO, "watch %s: an event without type or object", w->path));
        return;
    }
    if (strcmp(t, "ERROR") == 0) {
        error_event(w, obj);
        return;
    }
    w->events++;
    int rc = w->fn(w->ud, t, obj);
    if (rc != 0)
        stop(w, rc);
}

static void feed(kube_watch *w, const char *p, size_t n)
{
    while (n > 0 && !w->stopped) {
        /* A chunk may hold hundreds of events: honour a cancel between them. */
        if (atomic_load(&w->cancelled)) {
            stop(w, util_err_set(-ECANCELED, "watch %s: cancelled", w->path));
            return;
        }
        /* json-c takes an int length: feed a huge chunk in slices. */
        int len = n > (size_t)INT32_MAX ? INT32_MAX : (int)n;
        json_object *ev = json_tokener_parse_ex(w->tok, p, len);
        enum json_tokener_error e = json_tokener_get_error(w->tok);
        if (!ev && e == json_tokener_continue) {
            /* All of it taken; the tokener holds the rest of an event
             * unless what came was only the whitespace between events. */
            for (size_t i = 0; i < (size_t)len && !w->partial; i++)
                w->partial = p[i] != '\n' && p[i] != '\r' && p[i] != ' ' && p[i] != '\t';
            if (w->partial)
                w->partial_len += (size_t)len;
            if (w->partial_len > EVENT_MAX) {
                stop(w, util_err_set(-EMSGSIZE, "watch %s: an event over %u MiB", w->path,
                                     EVENT_MAX >> 20));
                return;
            }
            p += len;
            n -= (size_t)len;
            continue;
        }
        if (!ev) {
            stop(w, util_err_set(-EIO, "watch %s: bad JSON in the stream: %s", w->path,
                                 json_tokener_error_desc(e)));
            return;
        }
        size_t used = json_tokener_get_parse_end(w->tok);
        json_tokener_reset(w->tok);
        w->partial = false;
        w->partial_len = 0;
        p += used;
        n -= used;
        deliver(w, ev);
        json_object_put(ev);
    }
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    kube_watch *w = ud;
    size_t n = size * nmemb;
    if (!w->code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    if (w->code != 200) {
        size_t room = ERR_BODY_MAX - w->err_len;
        size_t take = n < room ? n : room;
        if (take) {
            char *nb = realloc(w->err_body, w->err_len + take + 1);
            if (!nb)
                return 0;
            w->err_body = nb;
            memcpy(w->err_body + w->err_len, data, take);
            w->err_len += take;
            w->err_body[w->err_len] = '\0';
        }
        return n;
    }
    feed(w, data, n);
    /* Returning short makes curl end the transfer (CURLE_WRITE_ERROR). */
    return w->stopped ? 0 : n;
}

/* Drives the transfer until it ends, fn stops it or someone cancels it. */
static CURLcode pump(kube_watch *w)
{
    for (;;) {
        if (atomic_load(&w->cancelled)) {
            stop(w, util_err_set(-ECANCELED, "watch %s: cancelled", w->path));
            return CURLE_OK;
        }
        int running = 0;
        CURLMcode mc = curl_multi_perform(w->multi, &running);
        if (mc != CURLM_OK)
            return CURLE_RECV_ERROR;
        int left = 0;
        CURLMsg *m;
        while ((m = curl_multi_info_read(w->multi, &left)) != NULL)
            if (m->msg == CURLMSG_DONE)
                return m->data.result;
        if (w->stopped)
            return CURLE_OK;
        if (!running)
            return CURLE_OK;
        /* Returns early on socket activity or curl_multi_wakeup. */
        if (curl_multi_poll(w->multi, NULL, 0, POLL_MS, NULL) != CURLM_OK)
            return CURLE_RECV_ERROR;
    }
}

static int finish(kube_watch *w, CURLcode e)
{
    if (w->stopped)
        return w->stop_rc;
    if (e != CURLE_OK) {
        const char *why = w->err[0] ? w->err : curl_easy_strerror(e);
        if (e == CURLE_OPERATION_TIMEDOUT && w->code == 200)
            return util_err_set(-EIO, "watch %s: no data for %ld s: %s", w->path, STALL_SECONDS,
                                why);
        return util_err_set(-EIO, "watch %s: %s", w->path, why);
    }
    if (!w->code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    if (w->code != 200) {
        kube_resp r = {0};
        kube_client__decode(&r, w->code, w->err_body, w->err_len);
        int rc = w->code == 410 ? -ERANGE : -EREMOTEIO;
        util_err_set(rc, "watch %s: %ld %s: %s", w->path, w->code, r.reason, r.message);
        kube_resp_clear(&r);
        return rc;
    }
    if (w->partial)
        return util_err_set(-EIO, "watch %s: the stream ended inside an event", w->path);
    return 0;
}

/* A fresh stream: decoder state and the caller's handler. */
static void stream_begin(kube_watch *w, const char *path, kube_watch_fn fn, void *ud)
{
    w->tok = json_tokener_new_ex(JSON_DEPTH);
    if (!w->tok)
        abort();
    /* Strict JSON, as the API server writes it: json-c's default accepts
     * comments and eats one past the end of an event, so garbage after an
     * event would lose it or not depending on where the stream was cut.
     * Several events per chunk stay allowed. */
    json_tokener_set_flags(w->tok, JSON_TOKENER_STRICT | JSON_TOKENER_ALLOW_TRAILING_CHARS);
    w->fn = fn;
    w->ud = ud;
    w->path = path;
    w->code = 0;
    w->err_body = NULL;
    w->err_len = 0;
    w->partial = false;
    w->partial_len = 0;
    w->stopped = false;
    w->stop_rc = 0;
    w->events = 0;
    w->err[0] = '\0';
}

static void stream_end(kube_watch *w)
{
    json_tokener_free(w->tok);
    w->tok = NULL;
    free(w->err_body);
    w->err_body = NULL;
}

/*
 * Test hooks (tests/fuzz/fuzz_watch_feed.c; not in kube.h): the decoder of
 * a 200 stream without a connection. Bytes given to __feed go through
 * exactly what curl's write callback does; __end says how the stream
 * ended as kube_watch_run would (0, or the first event or error that
 * stopped it). A watch used this way must not run at the same time.
 */
void kube_watch__begin(kube_watch *w, const char *path, kube_watch_fn fn, void *ud);
int kube_watch__feed(kube_watch *w, const char *p, size_t n);
int kube_watch__end(kube_watch *w);

void kube_watch__begin(kube_watch *w, const char *path, kube_watch_fn fn, void *ud)
{
    stream_begin(w, path, fn, ud);
    w->code = 200;
}

int kube_watch__feed(kube_watch *w, const char *p, size_t n)
{
    feed(w, p, n);
    return w->stopped ? w->stop_rc : 0;
}

int kube_watch__end(kube_watch *w)
{
    int rc = finish(w, CURLE_OK);
    stream_end(w);
    return rc;
}

int kube_watch_run(kube_watch *w, const char *path, kube_watch_fn fn, void *ud)
{
    if (atomic_load(&w->cancelled))
        return util_err_set(-ECANCELED, "watch %s: cancelled", path);
    struct curl_slist *headers = NULL;
    char *url = NULL;
    int rc = kube_client__prepare_get(w->c, w->h, w->err, path, &headers, &url);
    if (rc < 0)
        return rc;
    /* One token to start, none for the stream itself. */
    kube_client__throttle(w->c, "GET", url);
    stream_begin(w, path, fn, ud);
    curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(w->h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(w->h, CURLOPT_TIMEOUT_MS, 0L);
    curl_easy_setopt(w->h, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(w->h, CURLOPT_LOW_SPEED_TIME, STALL_SECONDS);

    util_duration start = util_now_mono();
    curl_multi_add_handle(w->multi, w->h);
    CURLcode e = pump(w);
    curl_multi_remove_handle(w->multi, w->h);
    rc = finish(w, e);
    obs_v(5, "GET %s %ld (watch) ended after %lld milliseconds and %zu events: %d", url, w->code,
          (long long)((util_now_mono() - start) / UTIL_MS), w->events, rc);

    curl_easy_setopt(w->h, CURLOPT_HTTPHEADER, NULL);
    kube_client__free_headers(headers);
    stream_end(w);
    free(url);
    return rc;
}
