/*
 * Watch streams: one long GET whose body is a sequence of JSON events
 * ({"type":..., "object":...}, newline-separated). A chunk from curl may
 * hold many events and an event may span several chunks. Each event that
 * lies whole in a chunk is parsed in place; the start of one that does not
 * is kept, and the following chunks are only scanned for its end
 * (kobj_frame_scan) and appended, so a big event arriving in many pieces
 * is parsed once, whole.
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
    util_duration quiet; /* end after this long without a byte (0: never) */
    size_t quiet_min;    /* ... once this many events came */
    util_duration last_byte;

    /* State of the running stream. */
    kube_watch_fn fn;
    void *ud;
    const char *path;
    long code;      /* HTTP status, once the headers are in */
    char *err_body; /* a non-200 answer */
    size_t err_len;
    char *part; /* the start of an event that did not end in its chunk */
    size_t part_len, part_cap;
    kobj_frame frame; /* where that event stands */
    bool stopped;     /* an event or fn ended the stream */
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

void kube_watch_end_when_quiet(kube_watch *w, util_duration quiet, size_t min_events)
{
    w->quiet = quiet > 0 ? quiet : 0;
    w->quiet_min = min_events;
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

static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static void bad_json(kube_watch *w)
{
    stop(w, util_err_set(-EIO, "watch %s: bad JSON in the stream: %s", w->path, util_err_last()));
}

/* Keeps p[0..n) as part of the event being assembled. */
static bool keep(kube_watch *w, const char *p, size_t n)
{
    if (w->part_len + n > EVENT_MAX) {
        stop(w,
             util_err_set(-EMSGSIZE, "watch %s: an event over %u MiB", w->path, EVENT_MAX >> 20));
        return false;
    }
    if (w->part_len + n > w->part_cap) {
        size_t cap = w->part_cap ? w->part_cap : 4096;
        while (cap < w->part_len + n)
            cap *= 2;
        char *nb = realloc(w->part, cap);
        if (!nb)
            abort();
        w->part = nb;
        w->part_cap = cap;
    }
    memcpy(w->part + w->part_len, p, n);
    w->part_len += n;
    return true;
}

/* The event being assembled is complete: parse and deliver it. */
static void finish_part(kube_watch *w)
{
    json_object *ev = kobj_parse_text(w->part, w->part_len);
    w->part_len = 0;
    if (w->part_cap > (64u << 10)) {
        /* One huge event must not pin its buffer for the stream's life. */
        free(w->part);
        w->part = NULL;
        w->part_cap = 0;
    }
    if (!ev) {
        bad_json(w);
        return;
    }
    deliver(w, ev);
    json_object_put(ev);
}

static void feed(kube_watch *w, const char *p, size_t n)
{
    while (n > 0 && !w->stopped) {
        /* A chunk may hold hundreds of events: honour a cancel between them. */
        if (atomic_load(&w->cancelled)) {
            stop(w, util_err_set(-ECANCELED, "watch %s: cancelled", w->path));
            return;
        }
        if (w->part_len > 0) {
            long end = kobj_frame_scan(&w->frame, p, n);
            if (end < 0) {
                bad_json(w);
                return;
            }
            size_t take = end > 0 ? (size_t)end : n;
            if (!keep(w, p, take))
                return;
            p += take;
            n -= take;
            if (end > 0)
                finish_part(w);
            continue;
        }
        while (n > 0 && is_space(*p)) {
            p++;
            n--;
        }
        if (n == 0)
            return;
        json_object *ev = NULL;
        size_t used = 0;
        int rc = kobj_parse(p, n, &used, &ev);
        if (rc == 0) {
            p += used;
            n -= used;
            deliver(w, ev);
            json_object_put(ev);
            continue;
        }
        if (rc != -EAGAIN) {
            bad_json(w);
            return;
        }
        /* The event goes on in the next chunk: note where it stands. */
        kobj_frame_init(&w->frame);
        long end = kobj_frame_scan(&w->frame, p, n);
        if (end != 0) {
            if (end > 0)
                util_err_set(-EINVAL, "an event that ends where its text does not");
            bad_json(w);
            return;
        }
        if (!keep(w, p, n))
            return;
        n = 0;
    }
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    kube_watch *w = ud;
    size_t n = size * nmemb;
    if (w->quiet > 0)
        w->last_byte = util_now_mono();
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
        if (w->quiet > 0 && w->events >= w->quiet_min &&
            util_now_mono() - w->last_byte > w->quiet) {
            stop(w, KUBE_WATCH_QUIET);
            return CURLE_OK;
        }
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
    if (w->part_len > 0)
        return util_err_set(-EIO, "watch %s: the stream ended inside an event", w->path);
    return 0;
}

/* A fresh stream: decoder state and the caller's handler. */
static void stream_begin(kube_watch *w, const char *path, kube_watch_fn fn, void *ud)
{
    w->fn = fn;
    w->ud = ud;
    w->path = path;
    w->code = 0;
    w->err_body = NULL;
    w->err_len = 0;
    w->part_len = 0;
    w->stopped = false;
    w->stop_rc = 0;
    w->events = 0;
    w->last_byte = util_now_mono();
    w->err[0] = '\0';
}

static void stream_end(kube_watch *w)
{
    free(w->part);
    w->part = NULL;
    w->part_len = w->part_cap = 0;
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
