/*
 * kube-lite over real HTTP: every REST, watch, fault, controller, discovery
 * and RBAC behaviour that kubectl and client-go depend on, checked against
 * /work/shared/docs/apiserver-facts.md (codes, reasons, messages exactly).
 *
 * Each group runs its own kube-lite (spawned with --listen 127.0.0.1:0, the
 * port read from its stdout); tests needing special flags get a server of
 * their own. Requests go through one keep-alive libcurl handle per client;
 * watches are streamed with the multi interface so a test can wait for the
 * N-th event, for the end of the stream, or for a quiet period.
 *
 * Everything a test allocates (responses, strings, watches) goes into an
 * arena that the per-test teardown frees, so a failed assertion leaks
 * nothing. Names are unique per test (uname), and tests that count objects
 * work in a namespace of their own (mkns).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <json-c/json.h>
#include <openssl/evp.h>

#include "harness.h"

#define TMO       (10 * UTIL_SECOND)
#define CT_JSON   "application/json"
#define CT_MERGE  "application/merge-patch+json"
#define CT_JPATCH "application/json-patch+json"
#define CT_SMP    "application/strategic-merge-patch+json"
#define STORAGE   "/apis/storage.k8s.io/v1"
#define RBAC      "/apis/rbac.authorization.k8s.io/v1"

/* ---- arena: everything a test allocates, freed by its teardown --------------- */

enum { A_JSON, A_MEM, A_WATCH };

typedef struct arena_item {
    int kind;
    void *p;
} arena_item;

static arena_item *arena;
static size_t n_arena, cap_arena;
static pthread_mutex_t arena_mu = PTHREAD_MUTEX_INITIALIZER;

typedef struct watch watch;
static const char *watch_hangup_collection(const watch *w);
static void watch_free(watch *w);
static int poke_after_hangup(const char *collection);

static void *keep(int kind, void *p)
{
    if (!p)
        return NULL;
    pthread_mutex_lock(&arena_mu);
    if (n_arena == cap_arena) {
        cap_arena = cap_arena ? 2 * cap_arena : 256;
        arena_item *grown = realloc(arena, cap_arena * sizeof(*grown));
        if (!grown)
            abort();
        arena = grown;
    }
    arena[n_arena].kind = kind;
    arena[n_arena].p = p;
    n_arena++;
    pthread_mutex_unlock(&arena_mu);
    return p;
}

static int arena_teardown(void **state)
{
    (void)state;
    pthread_mutex_lock(&arena_mu);
    arena_item *items = arena;
    size_t n = n_arena;
    arena = NULL;
    n_arena = cap_arena = 0;
    pthread_mutex_unlock(&arena_mu);
    /* Collections of ConfigMap watches the test leaves open (hangs up on). */
    char *hung_up[8];
    size_t n_hung = 0;
    for (size_t i = 0; i < n && state; i++) {
        const char *coll = items[i].kind == A_WATCH ? watch_hangup_collection(items[i].p) : NULL;
        if (coll && n_hung < 8)
            hung_up[n_hung++] = util_strdup(coll);
    }
    for (size_t i = n; i-- > 0;) {
        if (items[i].kind == A_JSON)
            json_object_put(items[i].p);
        else if (items[i].kind == A_WATCH)
            watch_free(items[i].p);
        else
            free(items[i].p);
    }
    free(items);
    /* A test that hung up on a live watch checks that kube-lite survives it. */
    int rc = 0;
    for (size_t i = 0; i < n_hung; i++) {
        if (rc == 0)
            rc = poke_after_hangup(hung_up[i]);
        free(hung_up[i]);
    }
    return rc;
}

#define T(f) cmocka_unit_test_setup_teardown(f, test_setup, arena_teardown)

static int test_setup(void **state);

static char *fmt(const char *f, ...) UTIL_ATTR_PRINTF(1, 2);
static char *fmt(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        abort();
    va_end(ap);
    return keep(A_MEM, s);
}

/* JSON text written with single quotes for double quotes (no value here
 * ever needs a real single quote). */
static char *js(const char *f, ...) UTIL_ATTR_PRINTF(1, 2);
static char *js(const char *f, ...)
{
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    if (vasprintf(&s, f, ap) < 0)
        abort();
    va_end(ap);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    return keep(A_MEM, s);
}

static json_object *parse(const char *text)
{
    return keep(A_JSON, text ? json_tokener_parse(text) : NULL);
}

/* ---- JSON access ----------------------------------------------------------------- */

/* Follows keys (array indexes as decimal strings) down from `o`; NULL-ended. */
static json_object *jat(json_object *o, ...)
{
    va_list ap;
    va_start(ap, o);
    const char *k;
    while (o && (k = va_arg(ap, const char *)) != NULL) {
        if (json_object_is_type(o, json_type_array)) {
            char *end = NULL;
            long i = strtol(k, &end, 10);
            o = *k && !*end && i >= 0 && (size_t)i < json_object_array_length(o)
                    ? json_object_array_get_idx(o, (size_t)i)
                    : NULL;
        } else if (json_object_is_type(o, json_type_object)) {
            json_object *v = NULL;
            o = json_object_object_get_ex(o, k, &v) ? v : NULL;
        } else {
            o = NULL;
        }
    }
    va_end(ap);
    return o;
}

static const char *str_of(json_object *v)
{
    return v && json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
}

#define J(o, ...)  jat((o), __VA_ARGS__, (const char *)NULL)
#define JS(o, ...) str_of(J((o), __VA_ARGS__))

static const char *jtext(json_object *o)
{
    return o ? json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                     JSON_C_TO_STRING_NOSLASHESCAPE)
             : "(no JSON body)";
}

static bool str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static uint64_t rv_num(const char *s)
{
    return s ? strtoull(s, NULL, 10) : 0;
}

static uint64_t rv_of(json_object *o)
{
    return rv_num(JS(o, "metadata", "resourceVersion"));
}

/* Sorted, comma-joined metadata.name of a list's items. */
static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static const char *names_of(json_object *list)
{
    json_object *items = J(list, "items");
    size_t n =
        items && json_object_is_type(items, json_type_array) ? json_object_array_length(items) : 0;
    const char **v = calloc(n + 1, sizeof(*v));
    if (!v)
        abort();
    size_t len = 1;
    for (size_t i = 0; i < n; i++) {
        const char *name = JS(json_object_array_get_idx(items, i), "metadata", "name");
        v[i] = name ? name : "?";
        len += strlen(v[i]) + 1;
    }
    qsort(v, n, sizeof(*v), cmp_str);
    char *out = calloc(len, 1);
    if (!out)
        abort();
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, v[i]);
    }
    free(v);
    return keep(A_MEM, out);
}

static bool array_has(json_object *arr, const char *s)
{
    size_t n = arr && json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++)
        if (str_eq(str_of(json_object_array_get_idx(arr, i)), s))
            return true;
    return false;
}

/* The element of array `arr` whose `key` field is `val`. */
static json_object *find_by(json_object *arr, const char *key, const char *val)
{
    size_t n = arr && json_object_is_type(arr, json_type_array) ? json_object_array_length(arr) : 0;
    for (size_t i = 0; i < n; i++) {
        json_object *e = json_object_array_get_idx(arr, i);
        if (str_eq(JS(e, key), val))
            return e;
    }
    return NULL;
}

/* ---- assertions --------------------------------------------------------------------- */

#define assert_str(a, b)                                                                           \
    do {                                                                                           \
        const char *a_ = (a);                                                                      \
        const char *b_ = (b);                                                                      \
        if (!str_eq(a_, b_))                                                                       \
            fail_msg("%s: got \"%s\", want \"%s\"", #a, a_ ? a_ : "(null)", b_);                   \
    } while (0)

#define assert_prefix(a, p)                                                                        \
    do {                                                                                           \
        const char *a_ = (a);                                                                      \
        const char *p_ = (p);                                                                      \
        if (!a_ || strncmp(a_, p_, strlen(p_)) != 0)                                               \
            fail_msg("%s: got \"%s\", want a string starting \"%s\"", #a, a_ ? a_ : "(null)", p_); \
    } while (0)

#define expect_code(code, want, body)                                                              \
    do {                                                                                           \
        long c_ = (code);                                                                          \
        if (c_ != (long)(want))                                                                    \
            fail_msg("HTTP %ld, want %ld: %s", c_, (long)(want), jtext(body));                     \
    } while (0)

/* A metav1.Status failure: HTTP code, kind, status, reason (NULL: absent),
 * message (NULL: not checked) and the code field. */
static void check_status(json_object *st, long code, long want, const char *reason,
                         const char *message)
{
    expect_code(code, want, st);
    if (!st)
        fail_msg("HTTP %ld without a JSON Status body", code);
    assert_str(JS(st, "kind"), "Status");
    assert_str(JS(st, "apiVersion"), "v1");
    assert_str(JS(st, "status"), "Failure");
    if (reason)
        assert_str(JS(st, "reason"), reason);
    else if (J(st, "reason"))
        fail_msg("unexpected reason in %s", jtext(st));
    if (message)
        assert_str(JS(st, "message"), message);
    assert_int_equal(json_object_get_int(J(st, "code")), want);
}

/* details must equal `want` (JSON with single quotes). */
static void check_details(json_object *st, const char *want)
{
    json_object *exp = parse(want);
    assert_non_null(exp);
    if (!json_object_equal(J(st, "details"), exp))
        fail_msg("details: got %s, want %s", jtext(J(st, "details")), jtext(exp));
}

/* ---- kube-lite processes ----------------------------------------------------------- */

typedef struct srv {
    pid_t pid;
    char url[128];
    char *ca; /* CA file for https */
} srv;

struct url_wait {
    const char *path;
    char *url;
};

static bool url_ready(void *ud)
{
    struct url_wait *u = ud;
    FILE *f = fopen(u->path, "r");
    if (!f)
        return false;
    char line[512];
    bool ok = false;
    while (!ok && fgets(line, sizeof(line), f)) {
        const char *p = strstr(line, "kube-lite: serving on ");
        ok = p && strchr(p, '\n') && sscanf(p + 22, "%127s", u->url) == 1;
    }
    fclose(f);
    return ok;
}

static bool exited(void *ud)
{
    pid_t pid = *(pid_t *)ud;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    return waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == pid;
}

/* Starts kube-lite with `flags` (NULL-ended, may be NULL); 0 or -1. */
static int srv_start(srv *s, const char *const *flags)
{
    static int n_started;
    s->pid = 0;
    s->url[0] = '\0';
    char *bin = th_build_path("bin/kube-lite");
    char *out = util_asprintf("%s/kube-lite-%d.out", th_tmpdir(), ++n_started);
    char *script = util_asprintf("exec \"$@\" >'%s'", out);
    char *argv[40] = {"/bin/sh", "-c", script, "kube-lite", bin, "--listen", "127.0.0.1:0"};
    int n = 7;
    for (; flags && *flags && n < 39; flags++)
        argv[n++] = (char *)*flags;
    argv[n] = NULL;
    s->pid = th_spawn(argv, NULL);
    struct url_wait u = {out, s->url};
    bool ok = s->pid > 0 && th_wait_until(url_ready, &u, 30 * UTIL_SECOND);
    if (!ok)
        fprintf(stderr, "kube-lite (%s) did not print its URL into %s\n", bin, out);
    free(bin);
    free(out);
    free(script);
    if (!ok && s->pid > 0) {
        th_stop(s->pid, SIGKILL);
        s->pid = 0;
    }
    return ok ? 0 : -1;
}

/* SIGTERM; kube-lite must exit 0 within 10 s. 0 or -1. */
static int srv_stop(srv *s)
{
    int rc = 0;
    if (s->pid > 0) {
        kill(s->pid, SIGTERM);
        bool ok = th_wait_until(exited, &s->pid, TMO);
        int status = th_stop(s->pid, ok ? 0 : SIGKILL);
        if (!ok) {
            fprintf(stderr, "kube-lite %s did not stop on SIGTERM\n", s->url);
            rc = -1;
        } else if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "kube-lite %s ended with wait status 0x%x\n", s->url, (unsigned)status);
            rc = -1;
        }
    }
    s->pid = 0;
    return rc;
}

/* ---- HTTP client --------------------------------------------------------------------- */

typedef struct cli {
    CURL *h;
    const srv *s;
    const char *token;  /* bearer token or NULL */
    const char *accept; /* Accept header; NULL: application/json */
    size_t body_len;    /* a binary body's length; 0: strlen */
} cli;

static cli C; /* the current group's client */

static void cli_init(cli *c, const srv *s, const char *token)
{
    c->h = curl_easy_init();
    if (!c->h)
        abort();
    c->s = s;
    c->token = token;
}

static void cli_free(cli *c)
{
    if (c->h)
        curl_easy_cleanup(c->h);
    c->h = NULL;
}

typedef struct buf {
    char *p;
    size_t len;
} buf;

static size_t buf_write(char *data, size_t size, size_t n, void *ud)
{
    buf *b = ud;
    size_t add = size * n;
    char *np = realloc(b->p, b->len + add + 1);
    if (!np)
        return 0;
    memcpy(np + b->len, data, add);
    b->len += add;
    np[b->len] = '\0';
    b->p = np;
    return add;
}

static struct curl_slist *headers_for(const cli *c, const char *ctype)
{
    char *acc = util_asprintf("Accept: %s", c->accept ? c->accept : "application/json");
    struct curl_slist *h = curl_slist_append(NULL, acc);
    free(acc);
    h = curl_slist_append(h, "Expect:");
    if (ctype) {
        char *l = util_asprintf("Content-Type: %s", ctype);
        h = curl_slist_append(h, l);
        free(l);
    }
    if (c->token) {
        char *l = util_asprintf("Authorization: Bearer %s", c->token);
        h = curl_slist_append(h, l);
        free(l);
    }
    return h;
}

static void common_opts(CURL *h, const cli *c, const char *path, struct curl_slist *hl)
{
    char *url = util_asprintf("%s%s", c->s->url, path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    free(url);
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (c->s->ca)
        curl_easy_setopt(h, CURLOPT_CAINFO, c->s->ca);
}

/*
 * One request on the client's keep-alive handle. Returns the body
 * (malloc'ed, NUL-terminated, "" when empty); *code is 0 when no answer came.
 * *hdrs (may be NULL) gets the response headers (malloc'ed).
 */
static char *perform(cli *c, const char *method, const char *path, const char *ctype,
                     const char *body, long *code, char **hdrs)
{
    CURL *h = c->h;
    curl_easy_reset(h);
    struct curl_slist *hl = headers_for(c, ctype);
    common_opts(h, c, path, hl);
    if (strcmp(method, "GET") == 0)
        curl_easy_setopt(h, CURLOPT_HTTPGET, 1L);
    else
        curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (body || strcmp(method, "POST") == 0) {
        curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE,
                         (long)(c->body_len ? c->body_len
                                : body      ? strlen(body)
                                            : 0));
        curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, body ? body : "");
    }
    buf data = {0}, head = {0};
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &data);
    curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, buf_write);
    curl_easy_setopt(h, CURLOPT_HEADERDATA, &head);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 30000L);
    CURLcode rc = curl_easy_perform(h);
    *code = 0;
    if (rc == CURLE_OK)
        curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, code);
    else
        fprintf(stderr, "%s %s: %s\n", method, path, curl_easy_strerror(rc));
    curl_slist_free_all(hl);
    if (hdrs)
        *hdrs = head.p ? head.p : util_strdup("");
    else
        free(head.p);
    return data.p ? data.p : util_strdup("");
}

/* The answer as JSON (arena; NULL when not JSON). */
static json_object *http_as(cli *c, const char *method, const char *path, const char *ctype,
                            const char *body, long *code)
{
    char *text = perform(c, method, path, ctype, body, code, NULL);
    json_object *o = parse(text);
    free(text);
    return o;
}

static json_object *http(const char *method, const char *path, const char *ctype, const char *body,
                         long *code)
{
    return http_as(&C, method, path, ctype, body, code);
}

/* The raw answer (arena) and, if asked, its headers (arena). */
static char *http_raw(const char *method, const char *path, long *code, char **hdrs)
{
    char *h = NULL;
    char *text = perform(&C, method, path, NULL, NULL, code, hdrs ? &h : NULL);
    if (hdrs)
        *hdrs = keep(A_MEM, h);
    return keep(A_MEM, text);
}

static json_object *get(const char *path, long *code)
{
    return http("GET", path, NULL, NULL, code);
}

static json_object *post(const char *path, const char *body, long *code)
{
    return http("POST", path, CT_JSON, body, code);
}

static json_object *put(const char *path, const char *body, long *code)
{
    return http("PUT", path, CT_JSON, body, code);
}

static json_object *patch(const char *path, const char *ctype, const char *body, long *code)
{
    return http("PATCH", path, ctype, body, code);
}

static json_object *del(const char *path, const char *body, long *code)
{
    return http("DELETE", path, body ? CT_JSON : NULL, body, code);
}

/* The object at `path`, or NULL unless the answer is 200. */
static json_object *fetch(const char *path)
{
    long code = 0;
    json_object *o = get(path, &code);
    return code == 200 ? o : NULL;
}

static long code_of(const char *path)
{
    long code = 0;
    get(path, &code);
    return code;
}

/* POST that must answer 201; the created object. */
static json_object *create(const char *path, const char *body)
{
    long code = 0;
    json_object *o = post(path, body, &code);
    expect_code(code, 201, o);
    return o;
}

static json_object *must_get(const char *path)
{
    long code = 0;
    json_object *o = get(path, &code);
    expect_code(code, 200, o);
    return o;
}

/* Re-evaluates `cond` every 20 ms for up to `tmo`; true once it holds. */
#define WAIT_UNTIL(cond, tmo)                                                                      \
    __extension__({                                                                                \
        util_duration end_ = util_now_mono() + (tmo);                                              \
        bool ok_ = false;                                                                          \
        while (!(ok_ = (cond)) && util_now_mono() < end_)                                          \
            util_sleep(20 * UTIL_MS);                                                              \
        ok_;                                                                                       \
    })

/* ---- names and paths ------------------------------------------------------------------ */

static int uniq;

static const char *uname(const char *prefix)
{
    return fmt("%s-%d", prefix, ++uniq);
}

static const char *mkns(void)
{
    const char *ns = uname("ns");
    create("/api/v1/namespaces", js("{'metadata':{'name':'%s'}}", ns));
    return ns;
}

static const char *core(const char *ns, const char *res, const char *name)
{
    return fmt("/api/v1/namespaces/%s/%s%s%s", ns, res, name ? "/" : "", name ? name : "");
}

static const char *cms(const char *ns)
{
    return core(ns, "configmaps", NULL);
}

static const char *cm(const char *ns, const char *name)
{
    return core(ns, "configmaps", name);
}

static const char *esc(const char *s)
{
    char *e = curl_easy_escape(NULL, s, 0);
    const char *out = fmt("%s", e);
    curl_free(e);
    return out;
}

/* The collection's current resourceVersion (from a list). */
static const char *list_rv(const char *path)
{
    json_object *l = must_get(path);
    const char *rv = JS(l, "metadata", "resourceVersion");
    assert_non_null(rv);
    return rv;
}

static json_object *make_cm(const char *ns, const char *name, const char *labels)
{
    return create(cms(ns), js("{'metadata':{'name':'%s','labels':%s},'data':{'a':'1'}}", name,
                              labels ? labels : "{}"));
}

static const char *pvc_body(const char *name, const char *sc)
{
    return js("{'metadata':{'name':'%s'},'spec':{'accessModes':['ReadWriteOnce'],"
              "'resources':{'requests':{'storage':'1Gi'}},'storageClassName':'%s'}}",
              name, sc);
}

static const char *pv_body(const char *name, const char *driver, const char *handle, const char *sc,
                           const char *claim_ns, const char *claim)
{
    const char *ref =
        claim ? fmt(",'claimRef':{'namespace':'%s','name':'%s'}", claim_ns, claim) : "";
    return js("{'metadata':{'name':'%s'},'spec':{'capacity':{'storage':'1Gi'},"
              "'accessModes':['ReadWriteOnce'],'persistentVolumeReclaimPolicy':'Retain',"
              "'storageClassName':'%s','csi':{'driver':'%s','volumeHandle':'%s'}%s}}",
              name, sc, driver, handle, ref);
}

static const char *pod_body(const char *name, const char *node, const char *claim)
{
    return js("{'metadata':{'name':'%s'},'spec':{'nodeName':'%s','containers':[{'name':'c',"
              "'image':'busybox'}],'volumes':[{'name':'v','persistentVolumeClaim':{'claimName':"
              "'%s'}}]}}",
              name, node, claim);
}

/* ---- watches ------------------------------------------------------------------------- */

struct watch {
    char *coll; /* the watched collection's path */
    CURLM *m;
    CURL *h;
    struct curl_slist *hl;
    buf data;
    size_t parsed;
    json_object *ev; /* array of the events received */
    size_t n;
    long code;
    bool done;
    util_duration started, ended;
};

static void watch_parse(watch *w)
{
    while (w->data.p && w->parsed < w->data.len) {
        char *start = w->data.p + w->parsed;
        char *nl = memchr(start, '\n', w->data.len - w->parsed);
        if (!nl)
            break;
        *nl = '\0';
        json_object *e = json_tokener_parse(start);
        if (!e)
            e = json_object_new_string(start);
        *nl = '\n';
        w->parsed = (size_t)(nl - w->data.p) + 1;
        json_object_array_add(w->ev, e);
        w->n++;
    }
}

static void watch_finish(watch *w)
{
    if (w->done)
        return;
    w->done = true;
    w->ended = util_now_mono();
    if (!w->code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    curl_multi_remove_handle(w->m, w->h);
}

/* Moves the transfer on for up to `ms`. */
static void watch_pump(watch *w, int ms)
{
    if (w->done)
        return;
    int running = 0;
    curl_multi_perform(w->m, &running);
    if (running)
        curl_multi_poll(w->m, NULL, 0, ms, NULL);
    curl_multi_perform(w->m, &running);
    if (!w->code)
        curl_easy_getinfo(w->h, CURLINFO_RESPONSE_CODE, &w->code);
    watch_parse(w);
    if (!running)
        watch_finish(w);
}

static watch *watch_open_as(cli *c, const char *path)
{
    watch *w = util_calloc(1, sizeof(*w));
    keep(A_WATCH, w);
    w->h = curl_easy_init();
    w->ev = json_object_new_array();
    w->m = curl_multi_init();
    if (!w->h || !w->m)
        abort();
    w->hl = headers_for(c, NULL);
    w->coll = strndup(path, strcspn(path, "?"));
    common_opts(w->h, c, path, w->hl);
    curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, buf_write);
    curl_easy_setopt(w->h, CURLOPT_WRITEDATA, &w->data);
    curl_multi_add_handle(w->m, w->h);
    w->started = util_now_mono();
    /* Until the server has answered the headers, the watch may not be
     * registered yet: wait for them so later writes are surely seen. */
    util_duration end = util_now_mono() + TMO;
    while (!w->code && !w->done && util_now_mono() < end)
        watch_pump(w, 20);
    return w;
}

static watch *watch_open(const char *path)
{
    return watch_open_as(&C, path);
}

/* Waits until `n` events arrived, the stream ended or `tmo` passed; the count. */
static size_t watch_wait(watch *w, size_t n, util_duration tmo)
{
    util_duration end = util_now_mono() + tmo;
    while (w->n < n && !w->done && util_now_mono() < end)
        watch_pump(w, 20);
    return w->n;
}

/* Waits for the end of the stream; true when it ended within `tmo`. */
static bool watch_wait_done(watch *w, util_duration tmo)
{
    util_duration end = util_now_mono() + tmo;
    while (!w->done && util_now_mono() < end)
        watch_pump(w, 20);
    return w->done;
}

/* Keeps reading for `tmo` (to prove nothing more comes); the count. */
static size_t watch_quiet(watch *w, util_duration tmo)
{
    util_duration end = util_now_mono() + tmo;
    while (!w->done && util_now_mono() < end)
        watch_pump(w, 20);
    return w->n;
}

/* Hangs up (the client side of a closed watch). */
static void watch_close(watch *w)
{
    if (!w->done) {
        w->done = true;
        w->ended = util_now_mono();
        curl_multi_remove_handle(w->m, w->h);
    }
    if (w->h)
        curl_easy_cleanup(w->h);
    w->h = NULL;
}

static void watch_free(watch *w)
{
    if (!w)
        return;
    watch_close(w);
    curl_multi_cleanup(w->m);
    curl_slist_free_all(w->hl);
    json_object_put(w->ev);
    free(w->data.p);
    free(w->coll);
    free(w);
}

/* The ConfigMap collection of a watch still streaming, else NULL. */
static const char *watch_hangup_collection(const watch *w)
{
    size_t n = w->coll ? strlen(w->coll) : 0;
    if (w->done || n < 11 || strcmp(w->coll + n - 11, "/configmaps") != 0)
        return NULL;
    return w->coll;
}

static const char *ev_type(const watch *w, size_t i)
{
    return i < w->n ? JS(json_object_array_get_idx(w->ev, i), "type") : NULL;
}

static json_object *ev_obj(const watch *w, size_t i)
{
    return i < w->n ? J(json_object_array_get_idx(w->ev, i), "object") : NULL;
}

static const char *ev_name(const watch *w, size_t i)
{
    return JS(ev_obj(w, i), "metadata", "name");
}

static const char *watch_dump(const watch *w)
{
    return fmt("%zu events, code %ld, done %d: %s", w->n, w->code, (int)w->done,
               w->data.p ? w->data.p : "");
}

/* Waits for exactly the events `types`/`names` (n of them) in this order. */
static void expect_events(watch *w, size_t n, const char *const *types, const char *const *names)
{
    if (watch_wait(w, n, TMO) < n)
        fail_msg("wanted %zu events; %s", n, watch_dump(w));
    for (size_t i = 0; i < n; i++) {
        if (!str_eq(ev_type(w, i), types[i]) || !str_eq(ev_name(w, i), names[i]))
            fail_msg("event %zu: want %s %s; %s", i, types[i], names[i], watch_dump(w));
    }
}

/* Waits for an event of `type` on object `name`; its index or -1. */
static int watch_find(watch *w, const char *type, const char *name, util_duration tmo)
{
    util_duration end = util_now_mono() + tmo;
    for (size_t i = 0;; i++) {
        while (i >= w->n && !w->done && util_now_mono() < end)
            watch_pump(w, 20);
        if (i >= w->n)
            return -1;
        if (str_eq(ev_type(w, i), type) && str_eq(ev_name(w, i), name))
            return (int)i;
    }
}

#define STRS(...) ((const char *const[]){__VA_ARGS__})

/* ---- servers and groups ----------------------------------------------------------------- */

/*
 * One kube-lite per group. Each test's setup checks that it is still
 * running: if it died (a crash in an earlier test), it is restarted with the
 * same flags and fixture, the death is reported, and the group teardown
 * fails, so one crash does not fail every later test of the group.
 */
typedef struct kgroup {
    const char *name;
    srv s;
    const char *flags[16];
    int (*fixture)(void); /* objects every test of the group expects, or NULL */
    cli *admin;           /* the client for the checks between tests (NULL: C) */
    int deaths;
} kgroup;

static kgroup *cur; /* the running group */

static int group_start(kgroup *g)
{
    if (srv_start(&g->s, g->flags) < 0)
        return -1;
    return g->fixture ? g->fixture() : 0;
}

static int group_setup(kgroup *g)
{
    cur = g;
    if (group_start(g) < 0)
        return -1;
    cli_init(&C, &g->s, NULL);
    return 0;
}

static int test_setup(void **state)
{
    (void)state;
    C.accept = NULL;
    C.body_len = 0;
    if (!cur || !exited(&cur->s.pid))
        return 0;
    int status = th_stop(cur->s.pid, 0);
    fprintf(stderr,
            "\n*** kube-lite (%s group, %s) died during or after the previous test: wait "
            "status 0x%x%s; restarting it\n\n",
            cur->name, cur->s.url, (unsigned)status,
            WIFSIGNALED(status) ? fmt(" (signal %d)", WTERMSIG(status)) : "");
    cur->s.pid = 0;
    cur->deaths++;
    return group_start(cur);
}

/*
 * kube-lite only notices a hung-up watch when it next writes to it: add and
 * remove a ConfigMap in the watched collection and make sure the server
 * survives, so a crash is blamed on the test that hung up.
 */
static int poke_after_hangup(const char *collection)
{
    if (!cur || cur->s.pid <= 0)
        return 0;
    cli *c = cur->admin ? cur->admin : &C;
    const char *coll = strcmp(collection, "/api/v1/configmaps") == 0
                           ? "/api/v1/namespaces/default/configmaps"
                           : collection;
    long code = 0;
    char *text = perform(c, "POST", coll, CT_JSON, "{\"metadata\":{\"generateName\":\"poke-\"}}",
                         &code, NULL);
    json_object *o = json_tokener_parse(text);
    free(text);
    const char *name = JS(o, "metadata", "name");
    if (code == 201 && name) {
        char *path = util_asprintf("%s/%s", coll, name);
        free(perform(c, "DELETE", path, NULL, NULL, &code, NULL));
        free(path);
    }
    json_object_put(o);
    if (!th_wait_until(exited, &cur->s.pid, 200 * UTIL_MS))
        return 0;
    fprintf(stderr, "\n*** kube-lite (%s group) died after this test hung up a watch\n\n",
            cur->name);
    return -1;
}

static int group_teardown(void **state)
{
    (void)state;
    cli_free(&C);
    int rc = srv_stop(&cur->s);
    free(cur->s.ca);
    cur->s.ca = NULL;
    arena_teardown(NULL);
    if (cur->deaths) {
        fprintf(stderr, "kube-lite (%s group) died %d time(s) during the group\n", cur->name,
                cur->deaths);
        rc = -1;
    }
    cur = NULL;
    return rc;
}

static kgroup rest_g = {.name = "REST", .flags = {"--controllers="}};
static kgroup watch_g = {.name = "watch", .flags = {"--controllers=", "--bookmark-interval=300ms"}};
static kgroup close_g = {.name = "watch-close-after",
                         .flags = {"--controllers=", "--watch-close-after=1s"}};
static kgroup fault_g = {.name = "faults",
                         .flags = {"--controllers=", "--error-rate=1", "--error-code=429"}};
static kgroup ctrl_g = {.name = "controllers"};

static int rest_setup(void **state)
{
    (void)state;
    return group_setup(&rest_g);
}

static int watch_setup(void **state)
{
    (void)state;
    return group_setup(&watch_g);
}

static int close_setup(void **state)
{
    (void)state;
    return group_setup(&close_g);
}

static int fault_setup(void **state)
{
    (void)state;
    return group_setup(&fault_g);
}

static int ctrl_setup(void **state)
{
    (void)state;
    return group_setup(&ctrl_g);
}

/* ===================================================================================== */
/* create                                                                                 */
/* ===================================================================================== */

static bool is_uuid4(const char *s)
{
    if (!s || strlen(s) != 36)
        return false;
    for (int i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash != (s[i] == '-'))
            return false;
        if (!dash && !strchr("0123456789abcdef", s[i]))
            return false;
    }
    return s[14] == '4' && strchr("89ab", s[19]);
}

static void test_create_sets_uid_timestamp_resource_version_kind_and_api_version(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    /* No kind/apiVersion in the body; a client uid and timestamp are overwritten. */
    json_object *o = post(cms(ns),
                          js("{'metadata':{'name':'c1','uid':'client-uid','creationTimestamp':"
                             "'2001-01-01T00:00:00Z'},'data':{'k':'v'}}"),
                          &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "kind"), "ConfigMap");
    assert_str(JS(o, "apiVersion"), "v1");
    assert_str(JS(o, "metadata", "name"), "c1");
    assert_str(JS(o, "metadata", "namespace"), ns);
    const char *uid = JS(o, "metadata", "uid");
    if (!is_uuid4(uid))
        fail_msg("uid \"%s\" is not a UUID v4", uid ? uid : "(null)");
    const char *ts = JS(o, "metadata", "creationTimestamp");
    assert_non_null(ts);
    struct tm tm;
    memset(&tm, 0, sizeof(tm));
    const char *end = strptime(ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end || strlen(ts) != 20)
        fail_msg("creationTimestamp \"%s\" is not RFC 3339 whole seconds in UTC", ts);
    time_t t = timegm(&tm);
    time_t now = time(NULL);
    if (t < now - 120 || t > now + 120)
        fail_msg("creationTimestamp \"%s\" is not now", ts);
    const char *rv = JS(o, "metadata", "resourceVersion");
    assert_non_null(rv);
    assert_true(rv[0] >= '1' && rv[0] <= '9' && strspn(rv, "0123456789") == strlen(rv));
    assert_str(JS(o, "data", "k"), "v");
    /* What GET returns is what was stored. */
    json_object *g = must_get(cm(ns, "c1"));
    assert_str(JS(g, "metadata", "uid"), uid);
    assert_str(JS(g, "metadata", "resourceVersion"), rv);
    assert_str(JS(g, "kind"), "ConfigMap");
    assert_str(JS(g, "apiVersion"), "v1");
}

static void test_create_existing_core_object_is_409_already_exists(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *path = core(ns, "persistentvolumeclaims", NULL);
    create(path, pvc_body("dup", "standard"));
    long code = 0;
    json_object *st = post(path, pvc_body("dup", "standard"), &code);
    check_status(st, code, 409, "AlreadyExists", "persistentvolumeclaims \"dup\" already exists");
    check_details(st, "{\"name\":\"dup\",\"kind\":\"persistentvolumeclaims\"}");
}

static void test_create_existing_storage_class_is_409_with_group_in_details(void **state)
{
    (void)state;
    const char *name = uname("sc-dup");
    const char *body = js("{'metadata':{'name':'%s'},'provisioner':'x.csi.io'}", name);
    create(STORAGE "/storageclasses", body);
    long code = 0;
    json_object *st = post(STORAGE "/storageclasses", body, &code);
    check_status(st, code, 409, "AlreadyExists",
                 fmt("storageclasses.storage.k8s.io \"%s\" already exists", name));
    check_details(st, js("{'name':'%s','group':'storage.k8s.io','kind':'storageclasses'}", name));
}

static void test_create_generate_name_appends_five_random_characters(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *body = js("{'metadata':{'generateName':'gen-'}}");
    json_object *a = create(cms(ns), body);
    json_object *b = create(cms(ns), body);
    const char *na = JS(a, "metadata", "name"), *nb = JS(b, "metadata", "name");
    assert_non_null(na);
    assert_non_null(nb);
    for (const char *n = na; n; n = n == na ? nb : NULL) {
        assert_int_equal(strlen(n), strlen("gen-") + 5);
        assert_prefix(n, "gen-");
        if (strspn(n + 4, "bcdfghjklmnpqrstvwxz2456789") != 5)
            fail_msg("generated suffix of \"%s\" is outside the alphabet", n);
    }
    assert_string_not_equal(na, nb);
    assert_str(JS(a, "metadata", "generateName"), "gen-");
    assert_int_equal(code_of(cm(ns, na)), 200);
}

static void test_create_without_name_or_generate_name_is_422(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st = post(cms(ns), js("{'metadata':{'labels':{'a':'b'}}}"), &code);
    check_status(st, code, 422, "Invalid",
                 "ConfigMap \"\" is invalid: metadata.name: Required value: name or "
                 "generateName is required");
    assert_str(JS(st, "details", "kind"), "ConfigMap");
    assert_str(JS(st, "details", "causes", "0", "reason"), "FieldValueRequired");
    assert_str(JS(st, "details", "causes", "0", "field"), "metadata.name");
}

static void test_create_in_missing_namespace_is_404(void **state)
{
    (void)state;
    long code = 0;
    json_object *st = post(cms("no-such-ns"), js("{'metadata':{'name':'x'}}"), &code);
    check_status(st, code, 404, "NotFound", "namespaces \"no-such-ns\" not found");
    check_details(st, "{\"name\":\"no-such-ns\",\"kind\":\"namespaces\"}");
}

static void test_create_with_other_namespace_in_body_is_400(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st =
        post(cms(ns), js("{'metadata':{'name':'x','namespace':'kube-system'}}"), &code);
    check_status(st, code, 400, "BadRequest",
                 "the namespace of the provided object does not match the namespace sent on "
                 "the request");
    assert_int_equal(code_of(cm(ns, "x")), 404);
    assert_int_equal(code_of(cm("kube-system", "x")), 404);
}

static void test_create_with_resource_version_is_500(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st = post(cms(ns), js("{'metadata':{'name':'x','resourceVersion':'5'}}"), &code);
    check_status(st, code, 500, NULL, "resourceVersion should not be set on objects to be created");
    assert_int_equal(code_of(cm(ns, "x")), 404);
}

static void test_create_storage_class_gets_defaults(void **state)
{
    (void)state;
    const char *name = uname("sc-def");
    json_object *o = create(STORAGE "/storageclasses",
                            js("{'metadata':{'name':'%s'},'provisioner':'x.csi.io'}", name));
    assert_str(JS(o, "kind"), "StorageClass");
    assert_str(JS(o, "apiVersion"), "storage.k8s.io/v1");
    assert_str(JS(o, "reclaimPolicy"), "Delete");
    assert_str(JS(o, "volumeBindingMode"), "Immediate");
    json_object *g = must_get(fmt(STORAGE "/storageclasses/%s", name));
    assert_str(JS(g, "reclaimPolicy"), "Delete");
    assert_str(JS(g, "volumeBindingMode"), "Immediate");
}

static void test_create_csidriver_gets_defaults_attach_required_true(void **state)
{
    (void)state;
    const char *name = fmt("%s.csi.example.com", uname("drv"));
    json_object *o =
        create(STORAGE "/csidrivers", js("{'metadata':{'name':'%s'},'spec':{}}", name));
    json_object *spec = J(o, "spec");
    assert_non_null(J(spec, "attachRequired"));
    assert_true(json_object_get_boolean(J(spec, "attachRequired")));
    assert_non_null(J(spec, "podInfoOnMount"));
    assert_false(json_object_get_boolean(J(spec, "podInfoOnMount")));
    assert_non_null(J(spec, "storageCapacity"));
    assert_false(json_object_get_boolean(J(spec, "storageCapacity")));
    assert_non_null(J(spec, "requiresRepublish"));
    assert_false(json_object_get_boolean(J(spec, "requiresRepublish")));
    assert_str(JS(spec, "fsGroupPolicy"), "ReadWriteOnceWithFSType");
    assert_str(JS(spec, "volumeLifecycleModes", "0"), "Persistent");
    assert_int_equal(json_object_array_length(J(spec, "volumeLifecycleModes")), 1);
}

/* ===================================================================================== */
/* get and list                                                                           */
/* ===================================================================================== */

static void test_get_missing_object_is_404_not_found(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st = get(core(ns, "persistentvolumeclaims", "nope"), &code);
    check_status(st, code, 404, "NotFound", "persistentvolumeclaims \"nope\" not found");
    check_details(st, "{\"name\":\"nope\",\"kind\":\"persistentvolumeclaims\"}");
    st = get(STORAGE "/volumeattachments/nope", &code);
    check_status(st, code, 404, "NotFound", "volumeattachments.storage.k8s.io \"nope\" not found");
    check_details(st, "{\"name\":\"nope\",\"group\":\"storage.k8s.io\",\"kind\":"
                      "\"volumeattachments\"}");
}

static void test_unknown_path_is_404_could_not_find_resource(void **state)
{
    (void)state;
    const char *paths[] = {"/api/v1/foos", "/apis/nope.example.com/v1/things", "/nope",
                           "/api/v1/namespaces/default/foos/x"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        long code = 0;
        json_object *st = get(paths[i], &code);
        check_status(st, code, 404, "NotFound", "the server could not find the requested resource");
        check_details(st, "{}");
    }
}

static void test_json_answers_carry_application_json_content_type(void **state)
{
    (void)state;
    const char *paths[] = {"/api/v1/namespaces", "/api/v1/namespaces/default/configmaps/nope",
                           "/api", "/version"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        long code = 0;
        char *h = NULL;
        http_raw("GET", paths[i], &code, &h);
        if (!strcasestr(h, "\ncontent-type: application/json"))
            fail_msg("GET %s: no application/json Content-Type in:\n%s", paths[i], h);
    }
}

static void test_list_has_list_kind_and_resource_version(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *c = make_cm(ns, "one", NULL);
    json_object *l = must_get(cms(ns));
    assert_str(JS(l, "kind"), "ConfigMapList");
    assert_str(JS(l, "apiVersion"), "v1");
    const char *rv = JS(l, "metadata", "resourceVersion");
    assert_non_null(rv);
    assert_true(rv_num(rv) >= rv_of(c));
    assert_str(names_of(l), "one");
    /* An empty list still has items: [] */
    json_object *e = must_get(core(ns, "persistentvolumeclaims", NULL));
    assert_str(JS(e, "kind"), "PersistentVolumeClaimList");
    assert_non_null(J(e, "items"));
    assert_int_equal(json_object_array_length(J(e, "items")), 0);
    assert_non_null(JS(e, "metadata", "resourceVersion"));
    json_object *s = must_get(STORAGE "/storageclasses");
    assert_str(JS(s, "kind"), "StorageClassList");
    assert_str(JS(s, "apiVersion"), "storage.k8s.io/v1");
    assert_non_null(JS(s, "metadata", "resourceVersion"));
}

/* a {env:prod,tier:web}, b {env:dev,tier:web}, c {env:prod}, d {} */
static const char *labelled_ns(void)
{
    const char *ns = mkns();
    make_cm(ns, "a", "{'env':'prod','tier':'web'}");
    make_cm(ns, "b", "{'env':'dev','tier':'web'}");
    make_cm(ns, "c", "{'env':'prod'}");
    make_cm(ns, "d", NULL);
    return ns;
}

static const char *select_names(const char *ns, const char *param, const char *sel)
{
    return names_of(must_get(fmt("%s?%s=%s", cms(ns), param, esc(sel))));
}

static void test_list_label_selector_equality(void **state)
{
    (void)state;
    const char *ns = labelled_ns();
    assert_str(select_names(ns, "labelSelector", "env=prod"), "a,c");
    assert_str(select_names(ns, "labelSelector", "env==dev"), "b");
    assert_str(select_names(ns, "labelSelector", "env!=prod"), "b,d");
    assert_str(select_names(ns, "labelSelector", "env=prod,tier=web"), "a");
    assert_str(select_names(ns, "labelSelector", ""), "a,b,c,d");
}

static void test_list_label_selector_set_based(void **state)
{
    (void)state;
    const char *ns = labelled_ns();
    assert_str(select_names(ns, "labelSelector", "env in (prod,dev)"), "a,b,c");
    assert_str(select_names(ns, "labelSelector", "env notin (prod)"), "b,d");
    assert_str(select_names(ns, "labelSelector", "tier"), "a,b");
    assert_str(select_names(ns, "labelSelector", "env in (dev),tier"), "b");
}

static void test_list_label_selector_key_absent(void **state)
{
    (void)state;
    const char *ns = labelled_ns();
    assert_str(select_names(ns, "labelSelector", "!tier"), "c,d");
    assert_str(select_names(ns, "labelSelector", "!tier,env"), "c");
}

static void test_list_field_selector_metadata_name(void **state)
{
    (void)state;
    const char *ns = labelled_ns();
    assert_str(select_names(ns, "fieldSelector", "metadata.name=b"), "b");
    assert_str(select_names(ns, "fieldSelector", "metadata.name!=b"), "a,c,d");
    assert_str(select_names(ns, "fieldSelector", fmt("metadata.namespace=%s", ns)), "a,b,c,d");
    assert_str(select_names(ns, "fieldSelector", "metadata.name=zzz"), "");
}

static void test_list_field_selector_unsupported_field_is_400(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st = get(fmt("%s?fieldSelector=%s", core(ns, "persistentvolumeclaims", NULL),
                              esc("spec.volumeName=x")),
                          &code);
    check_status(st, code, 400, "BadRequest",
                 "\"spec.volumeName\" is not a known field selector: only \"metadata.name\", "
                 "\"metadata.namespace\"");
    st = get(fmt("%s?fieldSelector=%s", core(ns, "pods", NULL), esc("spec.foo=x")), &code);
    check_status(st, code, 400, "BadRequest", "field label not supported: spec.foo");
}

static void test_list_limit_and_continue_walk_every_item_once(void **state)
{
    (void)state;
    const char *ns = mkns();
    for (int i = 0; i < 7; i++)
        make_cm(ns, fmt("item-%d", i), NULL);
    const char *seen = "";
    const char *cont = NULL;
    const char *first_rv = NULL;
    int pages = 0;
    do {
        const char *path =
            cont ? fmt("%s?limit=3&continue=%s", cms(ns), esc(cont)) : fmt("%s?limit=3", cms(ns));
        json_object *l = must_get(path);
        pages++;
        size_t n = json_object_array_length(J(l, "items"));
        cont = JS(l, "metadata", "continue");
        if (cont && !*cont)
            cont = NULL;
        assert_int_equal(n, pages < 3 ? 3 : 1);
        if (!first_rv)
            first_rv = JS(l, "metadata", "resourceVersion");
        else
            assert_str(JS(l, "metadata", "resourceVersion"), first_rv);
        for (size_t i = 0; i < n; i++)
            seen = fmt("%s%s%s", seen, *seen ? "," : "",
                       JS(J(l, "items"), fmt("%zu", i), "metadata", "name"));
        if (pages == 3)
            assert_null(cont);
    } while (cont && pages < 10);
    assert_int_equal(pages, 3);
    assert_str(seen, "item-0,item-1,item-2,item-3,item-4,item-5,item-6");
}

static void test_list_all_namespaces_persistent_volume_claims(void **state)
{
    (void)state;
    const char *ns1 = mkns(), *ns2 = mkns();
    create(core(ns1, "persistentvolumeclaims", NULL), pvc_body("p1", "standard"));
    create(core(ns2, "persistentvolumeclaims", NULL), pvc_body("p2", "standard"));
    json_object *l = must_get("/api/v1/persistentvolumeclaims");
    assert_str(JS(l, "kind"), "PersistentVolumeClaimList");
    assert_non_null(JS(l, "metadata", "resourceVersion"));
    json_object *items = J(l, "items");
    bool found1 = false, found2 = false;
    for (size_t i = 0; i < json_object_array_length(items); i++) {
        json_object *it = json_object_array_get_idx(items, i);
        const char *ns = JS(it, "metadata", "namespace"), *name = JS(it, "metadata", "name");
        found1 |= str_eq(ns, ns1) && str_eq(name, "p1");
        found2 |= str_eq(ns, ns2) && str_eq(name, "p2");
    }
    if (!found1 || !found2)
        fail_msg("all-namespaces list misses %s/p1 or %s/p2: %s", ns1, ns2, jtext(l));
}

/* ===================================================================================== */
/* update                                                                                 */
/* ===================================================================================== */

static void test_update_with_stale_resource_version_is_409_conflict(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    const char *stale = fmt("%s", jtext(o));
    json_object_object_add(J(o, "data"), "a", json_object_new_string("2"));
    long code = 0;
    json_object *u = put(cm(ns, "c"), jtext(o), &code);
    expect_code(code, 200, u);
    json_object *st = put(cm(ns, "c"), stale, &code);
    check_status(st, code, 409, "Conflict",
                 "Operation cannot be fulfilled on configmaps \"c\": the object has been "
                 "modified; please apply your changes to the latest version and try again");
    check_details(st, "{\"name\":\"c\",\"kind\":\"configmaps\"}");
    assert_str(JS(must_get(cm(ns, "c")), "data", "a"), "2");
}

static void test_update_with_current_resource_version_gets_new_one(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    uint64_t before = rv_of(o);
    json_object_object_add(J(o, "data"), "b", json_object_new_string("2"));
    long code = 0;
    json_object *u = put(cm(ns, "c"), jtext(o), &code);
    expect_code(code, 200, u);
    assert_true(rv_of(u) > before);
    assert_str(JS(u, "data", "b"), "2");
    assert_str(JS(u, "metadata", "uid"), JS(o, "metadata", "uid"));
    json_object *g = must_get(cm(ns, "c"));
    assert_int_equal(rv_of(g), rv_of(u));
}

static void test_update_volume_attachment_without_resource_version_is_422(void **state)
{
    (void)state;
    const char *name = uname("va");
    json_object *o = create(STORAGE "/volumeattachments",
                            js("{'metadata':{'name':'%s'},'spec':{'attacher':'d.csi.io',"
                               "'nodeName':'n1','source':{'persistentVolumeName':'pv1'}}}",
                               name));
    json_object_object_del(J(o, "metadata"), "resourceVersion");
    json_object *labels = json_object_new_object();
    json_object_object_add(labels, "x", json_object_new_string("y"));
    json_object_object_add(J(o, "metadata"), "labels", labels);
    long code = 0;
    json_object *st = put(fmt(STORAGE "/volumeattachments/%s", name), jtext(o), &code);
    /* Qualified by resource, not Kind, as kube-apiserver's store.Update does. */
    check_status(st, code, 422, "Invalid",
                 fmt("volumeattachments.storage.k8s.io \"%s\" is invalid: "
                     "metadata.resourceVersion: Invalid value: 0x0: must be specified for an "
                     "update",
                     name));
    assert_str(JS(st, "details", "kind"), "volumeattachments");
    assert_str(JS(st, "details", "group"), "storage.k8s.io");
    assert_str(JS(st, "details", "causes", "0", "reason"), "FieldValueInvalid");
    assert_str(JS(st, "details", "causes", "0", "field"), "metadata.resourceVersion");
}

static void test_update_persistent_volume_csi_source_is_immutable_422(void **state)
{
    (void)state;
    const char *name = uname("pv-imm");
    json_object *o =
        create("/api/v1/persistentvolumes", pv_body(name, "d.csi.io", "h1", "manual", NULL, NULL));
    json_object_object_add(J(o, "spec", "csi"), "volumeHandle", json_object_new_string("h2"));
    long code = 0;
    json_object *st = put(fmt("/api/v1/persistentvolumes/%s", name), jtext(o), &code);
    check_status(st, code, 422, "Invalid", NULL);
    assert_prefix(JS(st, "message"),
                  fmt("PersistentVolume \"%s\" is invalid: spec.persistentvolumesource: "
                      "Forbidden: spec.persistentvolumesource is immutable after creation",
                      name));
    assert_str(JS(st, "details", "kind"), "PersistentVolume");
    assert_str(JS(st, "details", "causes", "0", "reason"), "FieldValueForbidden");
    assert_str(JS(st, "details", "causes", "0", "field"), "spec.persistentvolumesource");
    assert_str(
        JS(must_get(fmt("/api/v1/persistentvolumes/%s", name)), "spec", "csi", "volumeHandle"),
        "h1");
}

static void test_update_persistent_volume_claim_spec_is_immutable_422(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *path = core(ns, "persistentvolumeclaims", "p");
    json_object *o = create(core(ns, "persistentvolumeclaims", NULL), pvc_body("p", "standard"));
    json_object *modes = json_object_new_array();
    json_object_array_add(modes, json_object_new_string("ReadWriteMany"));
    json_object_object_add(J(o, "spec"), "accessModes", modes);
    long code = 0;
    json_object *st = put(path, jtext(o), &code);
    check_status(st, code, 422, "Invalid", NULL);
    assert_prefix(JS(st, "message"),
                  "PersistentVolumeClaim \"p\" is invalid: spec: Forbidden: spec is immutable "
                  "after creation except resources.requests and volumeAttributesClassName for "
                  "bound claims");
    assert_str(JS(st, "details", "causes", "0", "reason"), "FieldValueForbidden");
    assert_str(JS(st, "details", "causes", "0", "field"), "spec");
    assert_str(JS(must_get(path), "spec", "accessModes", "0"), "ReadWriteOnce");
}

static void test_update_main_endpoint_keeps_status(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *path = core(ns, "persistentvolumeclaims", "p");
    json_object *o = create(core(ns, "persistentvolumeclaims", NULL), pvc_body("p", "standard"));
    assert_str(JS(o, "status", "phase"), "Pending");
    json_object_object_add(J(o, "status"), "phase", json_object_new_string("Bound"));
    json_object_object_add(J(o, "metadata"), "labels", json_object_new_object());
    json_object_object_add(J(o, "metadata", "labels"), "edited", json_object_new_string("yes"));
    long code = 0;
    json_object *u = put(path, jtext(o), &code);
    expect_code(code, 200, u);
    assert_str(JS(u, "metadata", "labels", "edited"), "yes");
    assert_str(JS(u, "status", "phase"), "Pending");
    json_object *g = must_get(path);
    assert_str(JS(g, "status", "phase"), "Pending");
    assert_str(JS(g, "metadata", "labels", "edited"), "yes");
}

static void test_update_status_endpoint_changes_only_status(void **state)
{
    (void)state;
    const char *name = uname("pv-st");
    const char *path = fmt("/api/v1/persistentvolumes/%s", name);
    json_object *o =
        create("/api/v1/persistentvolumes", pv_body(name, "d.csi.io", "h1", "manual", NULL, NULL));
    json_object_object_add(J(o, "status"), "phase", json_object_new_string("Available"));
    json_object_object_add(J(o, "spec", "capacity"), "storage", json_object_new_string("5Gi"));
    long code = 0;
    json_object *u = put(fmt("%s/status", path), jtext(o), &code);
    expect_code(code, 200, u);
    assert_str(JS(u, "status", "phase"), "Available");
    assert_str(JS(u, "spec", "capacity", "storage"), "1Gi");
    assert_true(rv_of(u) > rv_of(o));
    json_object *g = must_get(path);
    assert_str(JS(g, "status", "phase"), "Available");
    assert_str(JS(g, "spec", "capacity", "storage"), "1Gi");
    /* The /status endpoint checks the resourceVersion too. */
    json_object *st = put(fmt("%s/status", path), jtext(o), &code);
    check_status(st, code, 409, "Conflict", NULL);
}

static void test_update_that_changes_nothing_keeps_resource_version(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", "{'k':'v'}");
    long code = 0;
    json_object *u = put(cm(ns, "c"), jtext(o), &code);
    expect_code(code, 200, u);
    assert_str(JS(u, "metadata", "resourceVersion"), JS(o, "metadata", "resourceVersion"));
    json_object *p = patch(cm(ns, "c"), CT_MERGE, js("{'data':{'a':'1'}}"), &code);
    expect_code(code, 200, p);
    assert_str(JS(p, "metadata", "resourceVersion"), JS(o, "metadata", "resourceVersion"));
    assert_str(JS(must_get(cm(ns, "c")), "metadata", "resourceVersion"),
               JS(o, "metadata", "resourceVersion"));
}

/* ===================================================================================== */
/* patch                                                                                  */
/* ===================================================================================== */

static void test_patch_merge_patch_merges_maps_deletes_nulls_replaces_lists(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c','labels':{'x':'1'},'finalizers':['example.com/a']},"
                       "'data':{'a':'1','b':'2'}}"));
    long code = 0;
    json_object *p = patch(cm(ns, "c"), CT_MERGE,
                           js("{'metadata':{'labels':{'y':'2'},'finalizers':['example.com/b']},"
                              "'data':{'b':null,'c':'3'}}"),
                           &code);
    expect_code(code, 200, p);
    assert_str(JS(p, "data", "a"), "1");
    assert_null(J(p, "data", "b"));
    assert_str(JS(p, "data", "c"), "3");
    assert_str(JS(p, "metadata", "labels", "x"), "1");
    assert_str(JS(p, "metadata", "labels", "y"), "2");
    assert_int_equal(json_object_array_length(J(p, "metadata", "finalizers")), 1);
    assert_str(JS(p, "metadata", "finalizers", "0"), "example.com/b");
    /* Leave nothing that would block a namespace deletion. */
    patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'finalizers':null}}"), &code);
    expect_code(code, 200, NULL);
}

static void test_patch_json_patch_applies_operations(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c'},'data':{'a':'1','b':'2'}}"));
    long code = 0;
    json_object *p = patch(cm(ns, "c"), CT_JPATCH,
                           js("[{'op':'add','path':'/data/c','value':'3'},"
                              "{'op':'replace','path':'/data/a','value':'9'},"
                              "{'op':'remove','path':'/data/b'},"
                              "{'op':'test','path':'/data/c','value':'3'},"
                              "{'op':'add','path':'/metadata/labels','value':{'l':'v'}}]"),
                           &code);
    expect_code(code, 200, p);
    assert_str(JS(p, "data", "a"), "9");
    assert_null(J(p, "data", "b"));
    assert_str(JS(p, "data", "c"), "3");
    assert_str(JS(p, "metadata", "labels", "l"), "v");
}

static void test_patch_json_patch_failed_test_is_422_invalid(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    long code = 0;
    json_object *st = patch(cm(ns, "c"), CT_JPATCH,
                            js("[{'op':'test','path':'/data/a','value':'nope'},"
                               "{'op':'add','path':'/data/z','value':'1'}]"),
                            &code);
    check_status(st, code, 422, "Invalid",
                 "the server rejected our request due to an error in our request");
    json_object *g = must_get(cm(ns, "c"));
    assert_null(J(g, "data", "z"));
    assert_int_equal(rv_of(g), rv_of(o));
}

static void test_patch_json_patch_malformed_is_400(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "c", NULL);
    long code = 0;
    json_object *st =
        patch(cm(ns, "c"), CT_JPATCH, js("{'op':'add','path':'/data/z','value':'1'}"), &code);
    check_status(st, code, 400, "BadRequest", NULL);
    st = patch(cm(ns, "c"), CT_JPATCH, "[{\"op\":", &code);
    check_status(st, code, 400, "BadRequest", NULL);
    assert_null(J(must_get(cm(ns, "c")), "data", "z"));
}

static void test_patch_strategic_merges_finalizers_as_a_set(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c','finalizers':['example.com/a']}}"));
    long code = 0;
    json_object *p =
        patch(cm(ns, "c"), CT_SMP,
              js("{'metadata':{'finalizers':['example.com/b','example.com/a']}}"), &code);
    expect_code(code, 200, p);
    json_object *f = J(p, "metadata", "finalizers");
    assert_int_equal(json_object_array_length(f), 2);
    assert_true(array_has(f, "example.com/a"));
    assert_true(array_has(f, "example.com/b"));
    patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'finalizers':null}}"), &code);
    expect_code(code, 200, NULL);
}

static void test_patch_strategic_merges_csinode_drivers_by_name(void **state)
{
    (void)state;
    const char *name = uname("node");
    const char *path = fmt(STORAGE "/csinodes/%s", name);
    create(STORAGE "/csinodes",
           js("{'metadata':{'name':'%s'},'spec':{'drivers':[{'name':'a.csi.io','nodeID':'n1',"
              "'topologyKeys':['topology.a.io/zone']}]}}",
              name));
    long code = 0;
    json_object *p =
        patch(path, CT_SMP, js("{'spec':{'drivers':[{'name':'b.csi.io','nodeID':'n2'}]}}"), &code);
    expect_code(code, 200, p);
    json_object *drivers = J(p, "spec", "drivers");
    assert_int_equal(json_object_array_length(drivers), 2);
    json_object *a = find_by(drivers, "name", "a.csi.io");
    json_object *b = find_by(drivers, "name", "b.csi.io");
    assert_non_null(a);
    assert_non_null(b);
    assert_str(JS(a, "nodeID"), "n1");
    assert_str(JS(a, "topologyKeys", "0"), "topology.a.io/zone");
    assert_str(JS(b, "nodeID"), "n2");
    /* $patch: delete removes one entry by its key. */
    p = patch(path, CT_SMP, js("{'spec':{'drivers':[{'$patch':'delete','name':'a.csi.io'}]}}"),
              &code);
    expect_code(code, 200, p);
    drivers = J(p, "spec", "drivers");
    assert_int_equal(json_object_array_length(drivers), 1);
    assert_str(JS(drivers, "0", "name"), "b.csi.io");
}

static void test_patch_strategic_on_volume_snapshot_is_415(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *base = fmt("/apis/snapshot.storage.k8s.io/v1/namespaces/%s/volumesnapshots", ns);
    create(base,
           js("{'apiVersion':'snapshot.storage.k8s.io/v1','kind':'VolumeSnapshot',"
              "'metadata':{'name':'s'},'spec':{'source':{'persistentVolumeClaimName':'c'}}}"));
    long code = 0;
    json_object *st =
        patch(fmt("%s/s", base), CT_SMP, js("{'metadata':{'labels':{'a':'b'}}}"), &code);
    check_status(st, code, 415, "UnsupportedMediaType",
                 "the body of the request was in an unknown format - accepted media types "
                 "include: application/json-patch+json, application/merge-patch+json, "
                 "application/apply-patch+yaml");
    /* Merge patch works on the same object. */
    json_object *p =
        patch(fmt("%s/s", base), CT_MERGE, js("{'metadata':{'labels':{'a':'b'}}}"), &code);
    expect_code(code, 200, p);
    assert_str(JS(p, "metadata", "labels", "a"), "b");
}

static void test_patch_with_stale_resource_version_is_409(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    const char *rv = JS(o, "metadata", "resourceVersion");
    long code = 0;
    patch(cm(ns, "c"), CT_MERGE, js("{'data':{'a':'2'}}"), &code);
    expect_code(code, 200, NULL);
    json_object *st =
        patch(cm(ns, "c"), CT_MERGE,
              js("{'metadata':{'resourceVersion':'%s'},'data':{'a':'3'}}", rv), &code);
    check_status(st, code, 409, "Conflict",
                 "Operation cannot be fulfilled on configmaps \"c\": the object has been "
                 "modified; please apply your changes to the latest version and try again");
    assert_str(JS(must_get(cm(ns, "c")), "data", "a"), "2");
}

/* ===================================================================================== */
/* delete                                                                                 */
/* ===================================================================================== */

static void test_delete_without_finalizers_removes_and_sends_deleted(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "c", NULL);
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), list_rv(cms(ns))));
    long code = 0;
    json_object *r = del(cm(ns, "c"), NULL, &code);
    expect_code(code, 200, r);
    assert_int_equal(code_of(cm(ns, "c")), 404);
    expect_events(w, 1, STRS("DELETED"), STRS("c"));
}

static void test_delete_persistent_volume_returns_the_object(void **state)
{
    (void)state;
    const char *name = uname("pv-del");
    json_object *o =
        create("/api/v1/persistentvolumes", pv_body(name, "d.csi.io", "h1", "manual", NULL, NULL));
    long code = 0;
    json_object *r = del(fmt("/api/v1/persistentvolumes/%s", name), NULL, &code);
    expect_code(code, 200, r);
    assert_str(JS(r, "kind"), "PersistentVolume");
    assert_str(JS(r, "apiVersion"), "v1");
    assert_str(JS(r, "metadata", "name"), name);
    assert_str(JS(r, "metadata", "uid"), JS(o, "metadata", "uid"));
    assert_int_equal(code_of(fmt("/api/v1/persistentvolumes/%s", name)), 404);
}

static void test_delete_configmap_returns_success_status(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    long code = 0;
    json_object *r = del(cm(ns, "c"), js("{'propagationPolicy':'Background'}"), &code);
    expect_code(code, 200, r);
    json_object *want = parse(js("{'kind':'Status','apiVersion':'v1','metadata':{},'status':"
                                 "'Success','details':{'name':'c','kind':'configmaps','uid':'%s'}}",
                                 JS(o, "metadata", "uid")));
    if (!json_object_equal(r, want))
        fail_msg("DELETE answered %s, want %s", jtext(r), jtext(want));
}

static void test_delete_with_finalizers_sets_deletion_timestamp_and_keeps_object(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c','finalizers':['example.com/keep']}}"));
    long code = 0;
    json_object *r = del(cm(ns, "c"), NULL, &code);
    expect_code(code, 200, r);
    assert_str(JS(r, "kind"), "ConfigMap");
    assert_non_null(JS(r, "metadata", "deletionTimestamp"));
    assert_int_equal(json_object_get_int(J(r, "metadata", "deletionGracePeriodSeconds")), 0);
    json_object *g = must_get(cm(ns, "c"));
    assert_str(JS(g, "metadata", "deletionTimestamp"), JS(r, "metadata", "deletionTimestamp"));
    assert_str(JS(g, "metadata", "finalizers", "0"), "example.com/keep");
    /* Clean up: removing the finalizer lets it go. */
    patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'finalizers':null}}"), &code);
    expect_code(code, 200, NULL);
}

static void test_adding_finalizer_during_deletion_is_422(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c','finalizers':['example.com/keep']}}"));
    long code = 0;
    del(cm(ns, "c"), NULL, &code);
    expect_code(code, 200, NULL);
    json_object *st =
        patch(cm(ns, "c"), CT_MERGE,
              js("{'metadata':{'finalizers':['example.com/keep','example.com/new']}}"), &code);
    check_status(st, code, 422, "Invalid",
                 "ConfigMap \"c\" is invalid: metadata.finalizers: Forbidden: no new finalizers "
                 "can be added if the object is being deleted, found new finalizers "
                 "[]string{\"example.com/new\"}");
    assert_str(JS(st, "details", "causes", "0", "reason"), "FieldValueForbidden");
    assert_str(JS(st, "details", "causes", "0", "field"), "metadata.finalizers");
    /* Other metadata stays editable while deleting. */
    json_object *p =
        patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'labels':{'still':'editable'}}}"), &code);
    expect_code(code, 200, p);
    assert_non_null(JS(p, "metadata", "deletionTimestamp"));
    patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'finalizers':null}}"), &code);
    expect_code(code, 200, NULL);
}

static void test_removing_last_finalizer_during_deletion_deletes(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'c','finalizers':['example.com/a','example.com/b']}}"));
    long code = 0;
    del(cm(ns, "c"), NULL, &code);
    expect_code(code, 200, NULL);
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), list_rv(cms(ns))));
    json_object *p =
        patch(cm(ns, "c"), CT_MERGE, js("{'metadata':{'finalizers':['example.com/b']}}"), &code);
    expect_code(code, 200, p);
    assert_int_equal(code_of(cm(ns, "c")), 200);
    p = patch(cm(ns, "c"), CT_JPATCH, js("[{'op':'remove','path':'/metadata/finalizers'}]"), &code);
    expect_code(code, 200, p);
    assert_int_equal(code_of(cm(ns, "c")), 404);
    expect_events(w, 2, STRS("MODIFIED", "DELETED"), STRS("c", "c"));
}

static void test_delete_with_uid_precondition_mismatch_is_409(void **state)
{
    (void)state;
    const char *ns = mkns();
    json_object *o = make_cm(ns, "c", NULL);
    const char *uid = JS(o, "metadata", "uid");
    long code = 0;
    json_object *st = del(cm(ns, "c"), js("{'preconditions':{'uid':'wrong-uid'}}"), &code);
    /* rest.BeforeDelete's words, qualified by Kind. */
    check_status(st, code, 409, "Conflict",
                 fmt("Operation cannot be fulfilled on ConfigMap \"c\": the UID in the "
                     "precondition (wrong-uid) does not match the UID in record (%s). The object "
                     "might have been deleted and then recreated",
                     uid));
    assert_str(JS(st, "details", "name"), "c");
    assert_str(JS(st, "details", "kind"), "ConfigMap");
    assert_null(J(st, "details", "group"));
    /* The uid is checked first; then the resourceVersion. */
    st = del(cm(ns, "c"), js("{'preconditions':{'uid':'%s','resourceVersion':'1'}}", uid), &code);
    check_status(st, code, 409, "Conflict",
                 fmt("Operation cannot be fulfilled on ConfigMap \"c\": the ResourceVersion in "
                     "the precondition (1) does not match the ResourceVersion in record (%s). The "
                     "object might have been modified",
                     JS(o, "metadata", "resourceVersion")));
    assert_int_equal(code_of(cm(ns, "c")), 200);
    /* A grouped Kind is qualified by its group, details name both. */
    const char *leases = fmt("/apis/coordination.k8s.io/v1/namespaces/%s/leases", ns);
    json_object *l = create(leases, js("{'metadata':{'name':'l'}}"));
    st = del(fmt("%s/l", leases), js("{'preconditions':{'uid':'wrong-uid'}}"), &code);
    check_status(st, code, 409, "Conflict",
                 fmt("Operation cannot be fulfilled on Lease.coordination.k8s.io \"l\": the UID in "
                     "the precondition (wrong-uid) does not match the UID in record (%s). The "
                     "object might have been deleted and then recreated",
                     JS(l, "metadata", "uid")));
    check_details(st, "{'name':'l','group':'coordination.k8s.io','kind':'Lease'}");
    /* The right uid deletes. */
    del(cm(ns, "c"), js("{'preconditions':{'uid':'%s'}}", uid), &code);
    expect_code(code, 200, NULL);
    assert_int_equal(code_of(cm(ns, "c")), 404);
}

/* legacyValidateEvent: an involved object without a namespace is only
 * accepted for an Event in "default" (client-go puts the events of
 * cluster-scoped objects there). */
static void test_event_without_involved_namespace_outside_default_is_422(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *st =
        post(core(ns, "events", NULL),
             js("{'metadata':{'name':'e1'},'involvedObject':{'kind':'Node','name':'n1'},"
                "'reason':'R','type':'Normal'}"),
             &code);
    check_status(st, code, 422, "Invalid",
                 "Event \"e1\" is invalid: involvedObject.namespace: Invalid value: \"\": does "
                 "not match event.namespace");
    check_details(st, "{'name':'e1','kind':'Event','causes':[{'reason':'FieldValueInvalid',"
                      "'message':'Invalid value: \"\": does not match event.namespace',"
                      "'field':'involvedObject.namespace'}]}");
    /* Named, or in "default", it is fine. */
    json_object *o =
        post(core(ns, "events", NULL),
             js("{'metadata':{'name':'e2'},'involvedObject':{'kind':'ConfigMap','name':'c',"
                "'namespace':'%s'},'reason':'R','type':'Normal'}",
                ns),
             &code);
    expect_code(code, 201, o);
    const char *name = uname("e3");
    o = post(core("default", "events", NULL),
             js("{'metadata':{'name':'%s'},'involvedObject':{'kind':'Node','name':'n1'},"
                "'reason':'R','type':'Normal'}",
                name),
             &code);
    expect_code(code, 201, o);
    del(core("default", "events", name), NULL, &code);
    expect_code(code, 200, NULL);
}

static void test_delete_collection_with_label_selector(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "a1", "{'set':'one'}");
    make_cm(ns, "a2", "{'set':'one'}");
    make_cm(ns, "a3", "{'set':'one'}");
    make_cm(ns, "b1", "{'set':'two'}");
    make_cm(ns, "b2", NULL);
    long code = 0;
    json_object *r = del(fmt("%s?labelSelector=%s", cms(ns), esc("set=one")), NULL, &code);
    expect_code(code, 200, r);
    assert_str(names_of(must_get(cms(ns))), "b1,b2");
}

/* ===================================================================================== */
/* conflicting writers                                                                    */
/* ===================================================================================== */

struct rmw {
    const srv *s;
    const char *path;
    int conflicts;
    char err[512];
};

static void *rmw_thread(void *arg)
{
    struct rmw *r = arg;
    cli c;
    cli_init(&c, r->s, NULL);
    for (int done = 0, tries = 0; done < 50 && !r->err[0] && tries < 5000; tries++) {
        long code = 0;
        char *text = perform(&c, "GET", r->path, NULL, NULL, &code, NULL);
        json_object *o = json_tokener_parse(text);
        free(text);
        const char *v = JS(o, "metadata", "annotations", "count");
        if (code != 200 || !v) {
            snprintf(r->err, sizeof(r->err), "GET %s: %ld", r->path, code);
            json_object_put(o);
            break;
        }
        char num[32];
        snprintf(num, sizeof(num), "%ld", strtol(v, NULL, 10) + 1);
        json_object_object_add(J(o, "metadata", "annotations"), "count",
                               json_object_new_string(num));
        text = perform(&c, "PUT", r->path, CT_JSON, jtext(o), &code, NULL);
        json_object_put(o);
        if (code == 200)
            done++;
        else if (code == 409)
            r->conflicts++;
        else
            snprintf(r->err, sizeof(r->err), "PUT %s: %ld %s", r->path, code, text);
        free(text);
    }
    cli_free(&c);
    return NULL;
}

static void test_conflicting_writers_with_retry_count_exactly(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(cms(ns), js("{'metadata':{'name':'counter','annotations':{'count':'0'}}}"));
    struct rmw r[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        memset(&r[i], 0, sizeof(r[i]));
        r[i].s = C.s;
        r[i].path = cm(ns, "counter");
        assert_int_equal(pthread_create(&th[i], NULL, rmw_thread, &r[i]), 0);
    }
    int conflicts = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        conflicts += r[i].conflicts;
    }
    for (int i = 0; i < 8; i++)
        if (r[i].err[0])
            fail_msg("writer %d: %s", i, r[i].err);
    json_object *o = must_get(cm(ns, "counter"));
    assert_str(JS(o, "metadata", "annotations", "count"), "400");
    print_message("400 increments, %d conflicts retried\n", conflicts);
}

/* ===================================================================================== */
/* faults endpoint and metrics on the plain server                                        */
/* ===================================================================================== */

static long metric(const char *verb, const char *resource, int code)
{
    long c = 0;
    char *text = http_raw("GET", "/metrics", &c, NULL);
    expect_code(c, 200, NULL);
    const char *needle = fmt("\napiserver_request_total{verb=\"%s\",resource=\"%s\",code=\"%d\"} ",
                             verb, resource, code);
    const char *p = strstr(text, needle);
    return p ? strtol(p + strlen(needle), NULL, 10) : 0;
}

static void test_metrics_count_requests_by_verb_resource_and_code(void **state)
{
    (void)state;
    const char *ns = mkns();
    long get404 = metric("get", "configmaps", 404);
    long create201 = metric("create", "configmaps", 201);
    long list200 = metric("list", "configmaps", 200);
    for (int i = 0; i < 3; i++)
        assert_int_equal(code_of(cm(ns, "missing")), 404);
    make_cm(ns, "m1", NULL);
    make_cm(ns, "m2", NULL);
    must_get(cms(ns));
    assert_int_equal(metric("get", "configmaps", 404), get404 + 3);
    assert_int_equal(metric("create", "configmaps", 201), create201 + 2);
    assert_int_equal(metric("list", "configmaps", 200), list200 + 1);
    long c = 0;
    char *text = http_raw("GET", "/metrics", &c, NULL);
    if (!strstr(text, "# TYPE apiserver_request_total counter\n"))
        fail_msg("no TYPE line in /metrics:\n%s", text);
}

/* ===================================================================================== */
/* discovery                                                                              */
/* ===================================================================================== */

static void test_discovery_api_lists_v1(void **state)
{
    (void)state;
    json_object *o = must_get("/api");
    assert_str(JS(o, "kind"), "APIVersions");
    assert_true(array_has(J(o, "versions"), "v1"));
    json_object *v1 = must_get("/api/v1");
    assert_str(JS(v1, "kind"), "APIResourceList");
    assert_str(JS(v1, "groupVersion"), "v1");
    json_object *pvc = find_by(J(v1, "resources"), "name", "persistentvolumeclaims");
    assert_non_null(pvc);
    assert_true(array_has(J(pvc, "shortNames"), "pvc"));
    assert_non_null(find_by(J(v1, "resources"), "name", "persistentvolumeclaims/status"));
}

static void test_discovery_apis_has_storage_and_snapshot_groups(void **state)
{
    (void)state;
    json_object *o = must_get("/apis");
    assert_str(JS(o, "kind"), "APIGroupList");
    json_object *storage = find_by(J(o, "groups"), "name", "storage.k8s.io");
    json_object *snap = find_by(J(o, "groups"), "name", "snapshot.storage.k8s.io");
    if (!storage || !snap)
        fail_msg("/apis lacks storage.k8s.io or snapshot.storage.k8s.io: %s", jtext(o));
    assert_str(JS(storage, "preferredVersion", "groupVersion"), "storage.k8s.io/v1");
    assert_str(JS(snap, "preferredVersion", "groupVersion"), "snapshot.storage.k8s.io/v1");
}

static void test_discovery_storage_v1_lists_volumeattachments_and_status(void **state)
{
    (void)state;
    json_object *o = must_get(STORAGE);
    assert_str(JS(o, "kind"), "APIResourceList");
    assert_str(JS(o, "groupVersion"), "storage.k8s.io/v1");
    json_object *va = find_by(J(o, "resources"), "name", "volumeattachments");
    json_object *vas = find_by(J(o, "resources"), "name", "volumeattachments/status");
    if (!va || !vas)
        fail_msg("no volumeattachments or volumeattachments/status: %s", jtext(o));
    assert_str(JS(va, "kind"), "VolumeAttachment");
    assert_false(json_object_get_boolean(J(va, "namespaced")));
    const char *verbs[] = {"create", "delete", "deletecollection", "get",
                           "list",   "patch",  "update",           "watch"};
    for (size_t i = 0; i < 8; i++)
        assert_true(array_has(J(va, "verbs"), verbs[i]));
    assert_int_equal(json_object_array_length(J(vas, "verbs")), 3);
    assert_true(array_has(J(vas, "verbs"), "get"));
    assert_true(array_has(J(vas, "verbs"), "patch"));
    assert_true(array_has(J(vas, "verbs"), "update"));
    assert_str(JS(vas, "kind"), "VolumeAttachment");
}

static void test_version_reports_minor_32(void **state)
{
    (void)state;
    json_object *o = must_get("/version");
    assert_str(JS(o, "major"), "1");
    assert_str(JS(o, "minor"), "32");
    assert_prefix(JS(o, "gitVersion"), "v1.32.");
    assert_non_null(JS(o, "platform"));
}

static void test_openapi_v2_is_200(void **state)
{
    (void)state;
    long code = 0;
    char *h = NULL;
    http_raw("GET", "/openapi/v2", &code, &h);
    assert_int_equal(code, 200);
    if (!strcasestr(h, "\ncontent-type: application/com.github.proto-openapi.spec.v2"))
        fail_msg("/openapi/v2 Content-Type is not the protobuf OpenAPI type:\n%s", h);
}

/* ===================================================================================== */
/* watch (server with --bookmark-interval=300ms)                                          */
/* ===================================================================================== */

static void test_watch_from_resource_version_sends_later_events_in_order(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "before", NULL);
    const char *rv = list_rv(cms(ns));
    json_object *x = make_cm(ns, "x", NULL);
    long code = 0;
    json_object *m = patch(cm(ns, "x"), CT_MERGE, js("{'data':{'a':'2'}}"), &code);
    expect_code(code, 200, m);
    del(cm(ns, "x"), NULL, &code);
    expect_code(code, 200, NULL);
    const char *del_rv = list_rv(cms(ns));
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), rv));
    assert_int_equal(w->code, 200);
    make_cm(ns, "y", NULL);
    expect_events(w, 4, STRS("ADDED", "MODIFIED", "DELETED", "ADDED"), STRS("x", "x", "x", "y"));
    assert_int_equal(rv_of(ev_obj(w, 0)), rv_of(x));
    assert_int_equal(rv_of(ev_obj(w, 1)), rv_of(m));
    assert_str(JS(ev_obj(w, 1), "data", "a"), "2");
    /* DELETED carries the last state with the deletion's resourceVersion. */
    assert_int_equal(rv_of(ev_obj(w, 2)), rv_num(del_rv));
    assert_str(JS(ev_obj(w, 2), "data", "a"), "2");
    assert_true(rv_of(ev_obj(w, 3)) > rv_num(del_rv));
    for (size_t i = 0; i < 4; i++) {
        assert_str(JS(ev_obj(w, i), "kind"), "ConfigMap");
        assert_str(JS(ev_obj(w, i), "apiVersion"), "v1");
    }
    assert_int_equal(watch_quiet(w, 200 * UTIL_MS), 4);
}

static void test_watch_from_resource_version_0_sends_synthetic_added_first(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "e1", NULL);
    make_cm(ns, "e2", NULL);
    make_cm(ns, "e3", NULL);
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=0", cms(ns)));
    if (watch_wait(w, 3, TMO) < 3)
        fail_msg("no synthetic ADDED events; %s", watch_dump(w));
    const char *names = "";
    for (size_t i = 0; i < 3; i++) {
        assert_str(ev_type(w, i), "ADDED");
        names = fmt("%s%s", names, ev_name(w, i));
    }
    assert_str(names, "e1e2e3");
    make_cm(ns, "e4", NULL);
    if (watch_wait(w, 4, TMO) < 4)
        fail_msg("no ADDED for a new object; %s", watch_dump(w));
    assert_str(ev_type(w, 3), "ADDED");
    assert_str(ev_name(w, 3), "e4");
    assert_int_equal(watch_quiet(w, 200 * UTIL_MS), 4);
}

static void test_watch_label_selector_update_leaving_selection_is_deleted(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *rv = list_rv(cms(ns));
    watch *w = watch_open(
        fmt("%s?watch=true&resourceVersion=%s&labelSelector=%s", cms(ns), rv, esc("app=in")));
    make_cm(ns, "other", "{'app':'out'}");
    make_cm(ns, "s", "{'app':'in'}");
    long code = 0;
    json_object *out =
        patch(cm(ns, "s"), CT_MERGE, js("{'metadata':{'labels':{'app':'out'}}}"), &code);
    expect_code(code, 200, out);
    patch(cm(ns, "other"), CT_MERGE, js("{'data':{'ignored':'yes'}}"), &code);
    expect_code(code, 200, NULL);
    json_object *back =
        patch(cm(ns, "s"), CT_MERGE, js("{'metadata':{'labels':{'app':'in'}}}"), &code);
    expect_code(code, 200, back);
    del(cm(ns, "s"), NULL, &code);
    expect_code(code, 200, NULL);
    expect_events(w, 4, STRS("ADDED", "DELETED", "ADDED", "DELETED"), STRS("s", "s", "s", "s"));
    /* The DELETED of an object leaving the selection is the last state that
     * matched, under the resourceVersion of the change (the watch cache's). */
    assert_str(JS(ev_obj(w, 1), "metadata", "labels", "app"), "in");
    assert_int_equal(rv_of(ev_obj(w, 1)), rv_of(out));
    assert_int_equal(rv_of(ev_obj(w, 2)), rv_of(back));
    assert_int_equal(watch_quiet(w, 200 * UTIL_MS), 4);
}

static void test_watch_in_a_namespace_sees_exactly_that_namespace(void **state)
{
    (void)state;
    const char *ns = mkns(), *other = mkns();
    const char *rv = list_rv(cms(ns));
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), rv));
    /* Other requests in between, on every worker thread. */
    for (int i = 0; i < 32; i++) {
        long code = 0;
        get(fmt("/api/v1/namespaces/%s/persistentvolumeclaims/%s?labelSelector=%s", other,
                uname("some-longer-name-to-fill-the-request"), esc("a in (b,c)")),
            &code);
        assert_int_equal(code, 404);
    }
    make_cm(other, "elsewhere", NULL);
    make_cm(ns, "here", NULL);
    make_cm("default", uname("elsewhere-too"), NULL);
    expect_events(w, 1, STRS("ADDED"), STRS("here"));
    assert_str(JS(ev_obj(w, 0), "metadata", "namespace"), ns);
    assert_int_equal(watch_quiet(w, 200 * UTIL_MS), 1);
}

static void test_watch_bookmarks_when_allowed(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *rv = list_rv(cms(ns));
    watch *with =
        watch_open(fmt("%s?watch=true&resourceVersion=%s&allowWatchBookmarks=true", cms(ns), rv));
    watch *without = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), rv));
    if (watch_wait(with, 2, 5 * UTIL_SECOND) < 2)
        fail_msg("want 2 bookmarks within 5 s at a 300 ms interval; %s", watch_dump(with));
    for (size_t i = 0; i < 2; i++) {
        assert_str(ev_type(with, i), "BOOKMARK");
        json_object *o = ev_obj(with, i);
        assert_str(JS(o, "kind"), "ConfigMap");
        assert_str(JS(o, "apiVersion"), "v1");
        const char *brv = JS(o, "metadata", "resourceVersion");
        assert_non_null(brv);
        assert_true(rv_num(brv) >= rv_num(rv));
    }
    assert_int_equal(watch_quiet(without, 100 * UTIL_MS), 0);
    assert_false(without->done);
}

static void test_watch_timeout_seconds_ends_the_stream(void **state)
{
    (void)state;
    const char *ns = mkns();
    watch *w = watch_open(
        fmt("%s?watch=true&resourceVersion=%s&timeoutSeconds=1", cms(ns), list_rv(cms(ns))));
    if (!watch_wait_done(w, 5 * UTIL_SECOND))
        fail_msg("timeoutSeconds=1 did not end the watch in 5 s");
    assert_int_equal(w->code, 200);
    util_duration took = w->ended - w->started;
    if (took < 900 * UTIL_MS || took > 3 * UTIL_SECOND)
        fail_msg("timeoutSeconds=1 ended the watch after %" PRId64 " ms", took / UTIL_MS);
    assert_int_equal(w->n, 0);
}

static void test_watch_resumes_from_last_seen_resource_version(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *rv = list_rv(cms(ns));
    watch *w1 = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), rv));
    make_cm(ns, "r1", NULL);
    make_cm(ns, "r2", NULL);
    expect_events(w1, 2, STRS("ADDED", "ADDED"), STRS("r1", "r2"));
    const char *last = JS(ev_obj(w1, 1), "metadata", "resourceVersion");
    watch_close(w1);
    long code = 0;
    patch(cm(ns, "r1"), CT_MERGE, js("{'data':{'a':'changed'}}"), &code);
    expect_code(code, 200, NULL);
    del(cm(ns, "r2"), NULL, &code);
    expect_code(code, 200, NULL);
    make_cm(ns, "r3", NULL);
    watch *w2 = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), last));
    expect_events(w2, 3, STRS("MODIFIED", "DELETED", "ADDED"), STRS("r1", "r2", "r3"));
    assert_str(JS(ev_obj(w2, 0), "data", "a"), "changed");
    assert_int_equal(watch_quiet(w2, 300 * UTIL_MS), 3);
}

static void test_faults_endpoint_watch_close_after_ends_watches(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    post("/kube-lite/faults", "{\"watch_close_after_ms\":500}", &code);
    expect_code(code, 200, NULL);
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), list_rv(cms(ns))));
    bool ended = watch_wait_done(w, 5 * UTIL_SECOND);
    post("/kube-lite/faults", "{\"watch_close_after_ms\":0}", &code);
    expect_code(code, 200, NULL);
    if (!ended)
        fail_msg("watch_close_after_ms=500 did not end the watch in 5 s");
    util_duration took = w->ended - w->started;
    if (took < 400 * UTIL_MS || took > 3 * UTIL_SECOND)
        fail_msg("watch ended after %" PRId64 " ms, want about 500", took / UTIL_MS);
    watch *again = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), list_rv(cms(ns))));
    watch_quiet(again, 800 * UTIL_MS);
    assert_false(again->done);
}

/* Last in its group: compaction drops every event kept so far. */
static void test_watch_after_compaction_gets_410_expired_then_ends(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *old = list_rv(cms(ns));
    make_cm(ns, "c1", NULL);
    make_cm(ns, "c2", NULL);
    long code = 0;
    post("/kube-lite/compact", NULL, &code);
    expect_code(code, 200, NULL);
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), old));
    if (!watch_wait_done(w, 5 * UTIL_SECOND))
        fail_msg("the expired watch did not end; %s", watch_dump(w));
    assert_int_equal(w->code, 200);
    if (w->n != 1)
        fail_msg("want exactly one ERROR event; %s", watch_dump(w));
    assert_str(ev_type(w, 0), "ERROR");
    json_object *st = ev_obj(w, 0);
    assert_str(JS(st, "kind"), "Status");
    assert_str(JS(st, "apiVersion"), "v1");
    assert_str(JS(st, "status"), "Failure");
    assert_str(JS(st, "reason"), "Expired");
    assert_int_equal(json_object_get_int(J(st, "code")), 410);
    assert_prefix(JS(st, "message"), fmt("too old resource version: %s (", old));
    /* A fresh resourceVersion still works after the compaction. */
    watch *ok = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), list_rv(cms(ns))));
    make_cm(ns, "c3", NULL);
    expect_events(ok, 1, STRS("ADDED"), STRS("c3"));
}

/* ===================================================================================== */
/* --watch-close-after=1s                                                                 */
/* ===================================================================================== */

static void test_watch_close_after_flag_closes_every_watch(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *rv = list_rv(cms(ns));
    watch *a = watch_open(fmt("%s?watch=true&resourceVersion=%s", cms(ns), rv));
    watch *b = watch_open(fmt("%s?watch=true&resourceVersion=%s&timeoutSeconds=60&"
                              "allowWatchBookmarks=true",
                              "/api/v1/persistentvolumeclaims", rv));
    make_cm(ns, "x", NULL);
    util_duration end = util_now_mono() + 5 * UTIL_SECOND;
    while ((!a->done || !b->done) && util_now_mono() < end) {
        watch_pump(a, 10);
        watch_pump(b, 10);
    }
    if (!a->done || !b->done)
        fail_msg("--watch-close-after=1s left a watch open after 5 s");
    watch *ws[] = {a, b};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(ws[i]->code, 200);
        util_duration took = ws[i]->ended - ws[i]->started;
        if (took < 900 * UTIL_MS || took > 3 * UTIL_SECOND)
            fail_msg("watch %d ended after %" PRId64 " ms, want about 1000", i, took / UTIL_MS);
    }
    assert_str(ev_type(a, 0), "ADDED");
    assert_str(ev_name(a, 0), "x");
}

/* ===================================================================================== */
/* faults (--error-rate=1 --error-code=429)                                               */
/* ===================================================================================== */

static void test_fault_error_rate_1_answers_429_with_retry_after(void **state)
{
    (void)state;
    for (int i = 0; i < 5; i++) {
        long code = 0;
        char *h = NULL;
        char *text = http_raw("GET", "/api/v1/namespaces/default/configmaps", &code, &h);
        json_object *st = parse(text);
        check_status(st, code, 429, "TooManyRequests", NULL);
        if (!strcasestr(h, "\nretry-after: "))
            fail_msg("429 without Retry-After:\n%s", h);
    }
    /* Health and metrics are never faulted. */
    assert_int_equal(code_of("/healthz"), 200);
    assert_int_equal(code_of("/metrics"), 200);
}

static void test_faults_endpoint_changes_code_and_latency_at_run_time(void **state)
{
    (void)state;
    long code = 0;
    post("/kube-lite/faults", "{\"error_rate\":1,\"error_code\":503}", &code);
    expect_code(code, 200, NULL);
    char *h = NULL;
    char *text = http_raw("GET", "/api/v1/namespaces", &code, &h);
    check_status(parse(text), code, 503, "ServiceUnavailable", NULL);
    if (!strcasestr(h, "\nretry-after: "))
        fail_msg("503 without Retry-After:\n%s", h);
    post("/kube-lite/faults", "{\"error_rate\":0,\"latency_ms\":300}", &code);
    expect_code(code, 200, NULL);
    util_duration t0 = util_now_mono();
    assert_int_equal(code_of("/api/v1/namespaces"), 200);
    util_duration took = util_now_mono() - t0;
    post("/kube-lite/faults", "{\"latency_ms\":0}", &code);
    expect_code(code, 200, NULL);
    if (took < 290 * UTIL_MS)
        fail_msg("latency_ms=300 answered after %" PRId64 " ms", took / UTIL_MS);
    /* Back to normal: the fastest of three answers is well under 300 ms. */
    util_duration best = UTIL_MINUTE;
    for (int i = 0; i < 3; i++) {
        t0 = util_now_mono();
        assert_int_equal(code_of("/api/v1/namespaces"), 200);
        if (util_now_mono() - t0 < best)
            best = util_now_mono() - t0;
    }
    if (best >= 250 * UTIL_MS)
        fail_msg("latency_ms=0 still answers after %" PRId64 " ms", best / UTIL_MS);
}

/* ===================================================================================== */
/* controllers                                                                            */
/* ===================================================================================== */

#define PROV_ANN "volume.kubernetes.io/storage-provisioner"
#define NODE_ANN "volume.kubernetes.io/selected-node"

static const char *make_sc(const char *provisioner, const char *mode)
{
    const char *name = uname("sc");
    create(STORAGE "/storageclasses",
           js("{'metadata':{'name':'%s'},'provisioner':'%s','volumeBindingMode':'%s'}", name,
              provisioner, mode));
    return name;
}

static const char *ann_of(const char *path, const char *key)
{
    return JS(fetch(path), "metadata", "annotations", key);
}

static void test_controller_immediate_claim_gets_storage_provisioner(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *sc = make_sc("imm.csi.example.com", "Immediate");
    const char *path = core(ns, "persistentvolumeclaims", "c");
    create(core(ns, "persistentvolumeclaims", NULL), pvc_body("c", sc));
    if (!WAIT_UNTIL(str_eq(ann_of(path, PROV_ANN), "imm.csi.example.com"), TMO))
        fail_msg("no %s on an Immediate claim: %s", PROV_ANN, jtext(fetch(path)));
    assert_null(ann_of(path, NODE_ANN));
}

static void test_controller_wait_for_first_consumer_claim_waits_for_pod_node(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *sc = make_sc("wffc.csi.example.com", "WaitForFirstConsumer");
    const char *path = core(ns, "persistentvolumeclaims", "c");
    create(core(ns, "persistentvolumeclaims", NULL), pvc_body("c", sc));
    util_sleep(500 * UTIL_MS);
    if (ann_of(path, PROV_ANN) || ann_of(path, NODE_ANN))
        fail_msg("WaitForFirstConsumer claim annotated before any pod: %s", jtext(fetch(path)));
    create(core(ns, "pods", NULL), pod_body("p", "node-7", "c"));
    if (!WAIT_UNTIL(str_eq(ann_of(path, NODE_ANN), "node-7") &&
                        str_eq(ann_of(path, PROV_ANN), "wffc.csi.example.com"),
                    TMO))
        fail_msg("want %s=node-7 and %s set: %s", NODE_ANN, PROV_ANN, jtext(fetch(path)));
}

/* A claim in `ns` bound to a new CSI PV of `driver`/`handle`; the PV's name. */
static const char *bound_claim(const char *ns, const char *claim, const char *driver,
                               const char *handle)
{
    const char *pv = uname("pv");
    const char *sc = uname("manual");
    create(core(ns, "persistentvolumeclaims", NULL), pvc_body(claim, sc));
    create("/api/v1/persistentvolumes", pv_body(pv, driver, handle, sc, ns, claim));
    const char *cpath = core(ns, "persistentvolumeclaims", claim);
    const char *vpath = fmt("/api/v1/persistentvolumes/%s", pv);
    if (!WAIT_UNTIL(str_eq(JS(fetch(cpath), "status", "phase"), "Bound") &&
                        str_eq(JS(fetch(vpath), "status", "phase"), "Bound"),
                    TMO))
        fail_msg("claim and volume not Bound: %s / %s", jtext(fetch(cpath)), jtext(fetch(vpath)));
    return pv;
}

static void test_controller_binds_claim_named_by_volume_claim_ref(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *pv = bound_claim(ns, "c", "bind.csi.example.com", "h-bind");
    json_object *c = must_get(core(ns, "persistentvolumeclaims", "c"));
    json_object *v = must_get(fmt("/api/v1/persistentvolumes/%s", pv));
    assert_str(JS(c, "spec", "volumeName"), pv);
    assert_str(JS(c, "status", "phase"), "Bound");
    assert_str(JS(c, "metadata", "annotations", "pv.kubernetes.io/bind-completed"), "yes");
    assert_str(JS(v, "status", "phase"), "Bound");
    assert_str(JS(v, "spec", "claimRef", "uid"), JS(c, "metadata", "uid"));
}

static void test_controller_deleting_bound_claim_releases_volume(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *pv = bound_claim(ns, "c", "rel.csi.example.com", "h-rel");
    long code = 0;
    del(core(ns, "persistentvolumeclaims", "c"), NULL, &code);
    expect_code(code, 200, NULL);
    const char *vpath = fmt("/api/v1/persistentvolumes/%s", pv);
    if (!WAIT_UNTIL(code_of(core(ns, "persistentvolumeclaims", "c")) == 404, TMO))
        fail_msg("claim still there after DELETE: %s",
                 jtext(fetch(core(ns, "persistentvolumeclaims", "c"))));
    if (!WAIT_UNTIL(str_eq(JS(fetch(vpath), "status", "phase"), "Released"), TMO))
        fail_msg("volume not Released: %s", jtext(fetch(vpath)));
}

static const char *va_name(const char *handle, const char *driver, const char *node)
{
    const char *in = fmt("%s%s%s", handle, driver, node);
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    assert_int_equal(EVP_Digest(in, strlen(in), md, &len, EVP_sha256(), NULL), 1);
    assert_int_equal(len, 32);
    char hex[65];
    for (unsigned i = 0; i < len; i++)
        snprintf(hex + 2 * (size_t)i, 3, "%02x", md[i]);
    return fmt("csi-%s", hex);
}

static void test_controller_pod_with_bound_csi_claim_gets_volume_attachment(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *pv = bound_claim(ns, "c", "att.csi.example.com", "vol-att-1");
    create(core(ns, "pods", NULL), pod_body("p", "node-a", "c"));
    const char *path =
        fmt(STORAGE "/volumeattachments/%s", va_name("vol-att-1", "att.csi.example.com", "node-a"));
    if (!WAIT_UNTIL(fetch(path) != NULL, TMO))
        fail_msg("no VolumeAttachment %s; have %s", path,
                 jtext(fetch(STORAGE "/volumeattachments")));
    json_object *va = must_get(path);
    assert_str(JS(va, "spec", "attacher"), "att.csi.example.com");
    assert_str(JS(va, "spec", "nodeName"), "node-a");
    assert_str(JS(va, "spec", "source", "persistentVolumeName"), pv);
}

static void test_controller_volume_attachment_deleted_when_pod_goes(void **state)
{
    (void)state;
    const char *ns = mkns();
    bound_claim(ns, "c", "det.csi.example.com", "vol-det-1");
    create(core(ns, "pods", NULL), pod_body("p", "node-b", "c"));
    const char *path =
        fmt(STORAGE "/volumeattachments/%s", va_name("vol-det-1", "det.csi.example.com", "node-b"));
    if (!WAIT_UNTIL(code_of(path) == 200, TMO))
        fail_msg("no VolumeAttachment %s", path);
    long code = 0;
    del(core(ns, "pods", "p"), js("{'gracePeriodSeconds':0}"), &code);
    expect_code(code, 200, NULL);
    if (!WAIT_UNTIL(code_of(path) == 404, TMO))
        fail_msg("VolumeAttachment still there after the pod went: %s", jtext(fetch(path)));
}

static void test_controller_no_volume_attachment_when_attach_not_required(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *driver = fmt("%s.csi.example.com", uname("noattach"));
    create(STORAGE "/csidrivers",
           js("{'metadata':{'name':'%s'},'spec':{'attachRequired':false}}", driver));
    bound_claim(ns, "c", driver, "vol-noatt");
    create(core(ns, "pods", NULL), pod_body("p", "node-c", "c"));
    const char *path = fmt(STORAGE "/volumeattachments/%s", va_name("vol-noatt", driver, "node-c"));
    util_sleep(700 * UTIL_MS);
    assert_int_equal(code_of(path), 404);
    json_object *l = must_get(STORAGE "/volumeattachments");
    json_object *items = J(l, "items");
    for (size_t i = 0; i < json_object_array_length(items); i++)
        if (str_eq(JS(json_object_array_get_idx(items, i), "spec", "attacher"), driver))
            fail_msg("VolumeAttachment for a driver without attach: %s", jtext(l));
}

static void test_controller_namespace_deletion_removes_objects_then_namespace(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "c", NULL);
    create(core(ns, "persistentvolumeclaims", NULL), pvc_body("p", "none"));
    const char *rv = list_rv("/api/v1/namespaces");
    watch *cw = watch_open(fmt("/api/v1/configmaps?watch=true&resourceVersion=%s", rv));
    watch *nw = watch_open(fmt("/api/v1/namespaces?watch=true&resourceVersion=%s&fieldSelector=%s",
                               rv, esc(fmt("metadata.name=%s", ns))));
    long code = 0;
    json_object *r = del(fmt("/api/v1/namespaces/%s", ns), NULL, &code);
    expect_code(code, 200, r);
    assert_str(JS(r, "status", "phase"), "Terminating");
    assert_non_null(JS(r, "metadata", "deletionTimestamp"));
    if (!WAIT_UNTIL(code_of(fmt("/api/v1/namespaces/%s", ns)) == 404, 15 * UTIL_SECOND))
        fail_msg("namespace not removed: %s", jtext(fetch(fmt("/api/v1/namespaces/%s", ns))));
    assert_int_equal(code_of(cm(ns, "c")), 404);
    assert_int_equal(code_of(core(ns, "persistentvolumeclaims", "p")), 404);
    /* The objects went before the namespace did. */
    int cdel = watch_find(cw, "DELETED", "c", TMO);
    int ndel = watch_find(nw, "DELETED", ns, TMO);
    if (cdel < 0 || ndel < 0)
        fail_msg("missing DELETED events: configmaps %s; namespaces %s", watch_dump(cw),
                 watch_dump(nw));
    assert_str(ev_type(nw, 0), "MODIFIED");
    assert_str(JS(ev_obj(nw, 0), "status", "phase"), "Terminating");
    assert_true(rv_of(ev_obj(cw, (size_t)cdel)) < rv_of(ev_obj(nw, (size_t)ndel)));
}

/* ===================================================================================== */
/* TLS, tokens and RBAC                                                                   */
/* ===================================================================================== */

static cli alice, bob, robot, admin;

/* A path under the repository, found upwards from the test binary. */
static char *repo_file(const char *rel)
{
    char *dir = th_build_path(".");
    for (int up = 0; up < 8; up++) {
        char *cand = util_asprintf("%s/%s", dir, rel);
        if (access(cand, X_OK) == 0) {
            free(dir);
            return cand;
        }
        free(cand);
        char *parent = util_asprintf("%s/..", dir);
        free(dir);
        dir = parent;
    }
    free(dir);
    return NULL;
}

static void setup_create(cli *c, const char *path, const char *body)
{
    long code = 0;
    json_object *o = http_as(c, "POST", path, CT_JSON, body, &code);
    expect_code(code, 201, o);
}

/* The RBAC objects and fixtures of the TLS group, created as system:masters. */
static int rbac_fixture(void)
{
    cli *a = &admin;
    const char *nss[] = {"rbac-ns", "rbac-other", "rbac-sa"};
    for (size_t i = 0; i < 3; i++)
        setup_create(a, "/api/v1/namespaces", js("{'metadata':{'name':'%s'}}", nss[i]));
    setup_create(a, RBAC "/namespaces/rbac-ns/roles",
                 js("{'metadata':{'name':'alice-role'},'rules':["
                    "{'apiGroups':[''],'resources':['configmaps'],'verbs':['get','list','watch',"
                    "'create','update','patch','delete']},"
                    "{'apiGroups':[''],'resources':['persistentvolumeclaims'],'verbs':['get',"
                    "'list']}]}"));
    setup_create(a, RBAC "/namespaces/rbac-ns/rolebindings",
                 js("{'metadata':{'name':'alice-binding'},'roleRef':{'apiGroup':"
                    "'rbac.authorization.k8s.io','kind':'Role','name':'alice-role'},'subjects':"
                    "[{'kind':'User','apiGroup':'rbac.authorization.k8s.io','name':'alice'}]}"));
    setup_create(a, RBAC "/clusterroles",
                 js("{'metadata':{'name':'pv-reader'},'rules':[{'apiGroups':[''],'resources':"
                    "['persistentvolumes'],'verbs':['get','list','watch']}]}"));
    setup_create(
        a, RBAC "/clusterrolebindings",
        js("{'metadata':{'name':'robot-pv-reader'},'roleRef':{'apiGroup':"
           "'rbac.authorization.k8s.io','kind':'ClusterRole','name':'pv-reader'},"
           "'subjects':[{'kind':'ServiceAccount','name':'robot','namespace':'rbac-sa'}]}"));
    setup_create(a, RBAC "/clusterroles",
                 js("{'metadata':{'name':'sc-reader'},'rules':[{'apiGroups':['storage.k8s.io'],"
                    "'resources':['storageclasses'],'verbs':['get','list']}]}"));
    setup_create(a, RBAC "/clusterrolebindings",
                 js("{'metadata':{'name':'rbac-sa-sc-reader'},'roleRef':{'apiGroup':"
                    "'rbac.authorization.k8s.io','kind':'ClusterRole','name':'sc-reader'},"
                    "'subjects':[{'kind':'Group','apiGroup':'rbac.authorization.k8s.io','name':"
                    "'system:serviceaccounts:rbac-sa'}]}"));
    setup_create(a, cms("rbac-ns"), js("{'metadata':{'name':'cm-a'},'data':{'a':'1'}}"));
    setup_create(a, cms("rbac-ns"), js("{'metadata':{'name':'cm-del'}}"));
    setup_create(a, cms("rbac-other"), js("{'metadata':{'name':'cm-b'}}"));
    setup_create(a, core("rbac-ns", "persistentvolumeclaims", NULL), pvc_body("pvc-a", "standard"));
    setup_create(a, "/api/v1/persistentvolumes",
                 pv_body("pv-rbac", "d.csi.io", "h-rbac", "manual", NULL, NULL));
    setup_create(a, STORAGE "/storageclasses",
                 js("{'metadata':{'name':'sc-rbac'},'provisioner':'x.csi.io'}"));
    return 0;
}

static kgroup tls_g = {.name = "TLS and RBAC", .fixture = rbac_fixture, .admin = &admin};
static char *tls_flags[3];

static int tls_setup(void **state)
{
    (void)state;
    char *script = repo_file("hack/kube-lite/gen-certs.sh");
    if (!script) {
        fprintf(stderr, "hack/kube-lite/gen-certs.sh not found\n");
        return -1;
    }
    char *dir = util_asprintf("%s/certs", th_tmpdir());
    char *cmd = util_asprintf("'%s' '%s' >/dev/null", script, dir);
    int rc = system(cmd);
    free(cmd);
    free(script);
    char *tokens = util_asprintf("%s/tokens.csv", th_tmpdir());
    FILE *f = fopen(tokens, "w");
    if (rc != 0 || !f) {
        fprintf(stderr, "cannot make certificates (%d) or %s\n", rc, tokens);
        if (f)
            fclose(f);
        free(dir);
        free(tokens);
        return -1;
    }
    fprintf(f, "# token,user,uid,groups\n"
               "admin-token,kube-admin,uid-admin,\"system:masters\"\n"
               "alice-token,alice,uid-alice\n"
               "bob-token,bob,uid-bob\n"
               "robot-token,system:serviceaccount:rbac-sa:robot,uid-robot\n");
    fclose(f);
    tls_flags[0] = util_asprintf("--tls-cert-file=%s/server.crt", dir);
    tls_flags[1] = util_asprintf("--tls-private-key-file=%s/server.key", dir);
    tls_flags[2] = util_asprintf("--token-auth-file=%s", tokens);
    const char *flags[] = {"--controllers=", tls_flags[0], tls_flags[1], tls_flags[2],
                           "--authorization-mode=RBAC"};
    for (size_t i = 0; i < sizeof(flags) / sizeof(flags[0]); i++)
        tls_g.flags[i] = flags[i];
    tls_g.s.ca = util_asprintf("%s/ca.crt", dir);
    free(dir);
    free(tokens);
    cli_init(&admin, &tls_g.s, "admin-token");
    cli_init(&alice, &tls_g.s, "alice-token");
    cli_init(&bob, &tls_g.s, "bob-token");
    cli_init(&robot, &tls_g.s, "robot-token");
    if (group_setup(&tls_g) < 0)
        return -1;
    if (strncmp(tls_g.s.url, "https://", 8) != 0) {
        fprintf(stderr, "kube-lite with a certificate serves %s\n", tls_g.s.url);
        return -1;
    }
    return 0;
}

static int tls_teardown(void **state)
{
    cli_free(&admin);
    cli_free(&alice);
    cli_free(&bob);
    cli_free(&robot);
    for (size_t i = 0; i < 3; i++) {
        free(tls_flags[i]);
        tls_flags[i] = NULL;
    }
    return group_teardown(state);
}

/* 403 with kube-apiserver's message and details {name?, group?, kind: plural}. */
static void check_forbidden(json_object *st, long code, const char *name, const char *group,
                            const char *resource, const char *message)
{
    check_status(st, code, 403, "Forbidden", message);
    check_details(st, js("{%s%s'kind':'%s'}", name ? fmt("'name':'%s',", name) : "",
                         group ? fmt("'group':'%s',", group) : "", resource));
}

static void test_tls_request_without_token_is_401_unauthorized(void **state)
{
    (void)state;
    json_object *want =
        parse("{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
              "\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}");
    long code = 0;
    json_object *st = get(cms("rbac-ns"), &code);
    expect_code(code, 401, st);
    if (!json_object_equal(st, want))
        fail_msg("401 body %s, want %s", jtext(st), jtext(want));
    /* An unknown token is refused the same way, even for discovery. */
    cli bad;
    cli_init(&bad, &tls_g.s, "no-such-token");
    st = http_as(&bad, "GET", "/apis", NULL, NULL, &code);
    cli_free(&bad);
    expect_code(code, 401, st);
    assert_str(JS(st, "reason"), "Unauthorized");
}

static void test_rbac_discovery_is_allowed_for_every_authenticated_user(void **state)
{
    (void)state;
    const char *paths[] = {"/api", "/apis", "/api/v1", STORAGE, "/version"};
    for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
        long code = 0;
        json_object *o = http_as(&bob, "GET", paths[i], NULL, NULL, &code);
        if (code != 200)
            fail_msg("GET %s as bob: %ld %s", paths[i], code, jtext(o));
    }
}

static void test_rbac_get_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "GET", cm("rbac-ns", "cm-a"), NULL, NULL, &code);
    expect_code(code, 200, o);
    assert_str(JS(o, "data", "a"), "1");
    json_object *st = http_as(&alice, "GET", cm("rbac-other", "cm-b"), NULL, NULL, &code);
    check_forbidden(st, code, "cm-b", NULL, "configmaps",
                    "configmaps \"cm-b\" is forbidden: User \"alice\" cannot get resource "
                    "\"configmaps\" in API group \"\" in the namespace \"rbac-other\"");
}

static void test_rbac_list_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "GET", cms("rbac-ns"), NULL, NULL, &code);
    expect_code(code, 200, o);
    assert_str(JS(o, "kind"), "ConfigMapList");
    json_object *st = http_as(&alice, "GET", core("rbac-ns", "secrets", NULL), NULL, NULL, &code);
    check_forbidden(st, code, NULL, NULL, "secrets",
                    "secrets is forbidden: User \"alice\" cannot list resource \"secrets\" in API "
                    "group \"\" in the namespace \"rbac-ns\"");
}

static void test_rbac_watch_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    watch *ok = watch_open_as(&alice, fmt("%s?watch=true", cms("rbac-ns")));
    assert_int_equal(ok->code, 200);
    /* resourceVersion unset: the synthetic ADDED events come first. */
    if (watch_wait(ok, 1, TMO) < 1)
        fail_msg("no events on an allowed watch; %s", watch_dump(ok));
    assert_str(ev_type(ok, 0), "ADDED");
    watch *no = watch_open_as(&alice, "/api/v1/configmaps?watch=true");
    watch_wait_done(no, TMO);
    json_object *st = parse(no->data.p);
    check_forbidden(st, no->code, NULL, NULL, "configmaps",
                    "configmaps is forbidden: User \"alice\" cannot watch resource \"configmaps\" "
                    "in API group \"\" at the cluster scope");
}

static void test_rbac_create_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "POST", cms("rbac-ns"), CT_JSON,
                             js("{'metadata':{'name':'%s'}}", uname("alice-cm")), &code);
    expect_code(code, 201, o);
    json_object *st = http_as(&alice, "POST", core("rbac-ns", "persistentvolumeclaims", NULL),
                              CT_JSON, pvc_body("alice-pvc", "standard"), &code);
    check_forbidden(st, code, NULL, NULL, "persistentvolumeclaims",
                    "persistentvolumeclaims is forbidden: User \"alice\" cannot create resource "
                    "\"persistentvolumeclaims\" in API group \"\" in the namespace \"rbac-ns\"");
}

static void test_rbac_update_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "GET", cm("rbac-ns", "cm-a"), NULL, NULL, &code);
    expect_code(code, 200, o);
    json_object_object_add(J(o, "data"), "updated", json_object_new_string("yes"));
    json_object *u = http_as(&alice, "PUT", cm("rbac-ns", "cm-a"), CT_JSON, jtext(o), &code);
    expect_code(code, 200, u);
    json_object *p = http_as(&alice, "GET", core("rbac-ns", "persistentvolumeclaims", "pvc-a"),
                             NULL, NULL, &code);
    expect_code(code, 200, p);
    json_object *st = http_as(&alice, "PUT", core("rbac-ns", "persistentvolumeclaims", "pvc-a"),
                              CT_JSON, jtext(p), &code);
    check_forbidden(st, code, "pvc-a", NULL, "persistentvolumeclaims",
                    "persistentvolumeclaims \"pvc-a\" is forbidden: User \"alice\" cannot update "
                    "resource \"persistentvolumeclaims\" in API group \"\" in the namespace "
                    "\"rbac-ns\"");
}

static void test_rbac_patch_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "PATCH", cm("rbac-ns", "cm-a"), CT_MERGE,
                             js("{'data':{'patched':'yes'}}"), &code);
    expect_code(code, 200, o);
    assert_str(JS(o, "data", "patched"), "yes");
    json_object *st = http_as(&alice, "PATCH",
                              fmt("%s/status", core("rbac-ns", "persistentvolumeclaims", "pvc-a")),
                              CT_MERGE, js("{'status':{'phase':'Bound'}}"), &code);
    check_forbidden(st, code, "pvc-a", NULL, "persistentvolumeclaims",
                    "persistentvolumeclaims \"pvc-a\" is forbidden: User \"alice\" cannot patch "
                    "resource \"persistentvolumeclaims/status\" in API group \"\" in the "
                    "namespace \"rbac-ns\"");
}

static void test_rbac_delete_is_allowed_as_granted_and_forbidden_elsewhere(void **state)
{
    (void)state;
    long code = 0;
    json_object *o = http_as(&alice, "DELETE", cm("rbac-ns", "cm-del"), NULL, NULL, &code);
    expect_code(code, 200, o);
    json_object *st =
        http_as(&alice, "DELETE", STORAGE "/storageclasses/sc-rbac", NULL, NULL, &code);
    check_forbidden(st, code, "sc-rbac", "storage.k8s.io", "storageclasses",
                    "storageclasses.storage.k8s.io \"sc-rbac\" is forbidden: User \"alice\" "
                    "cannot delete resource \"storageclasses\" in API group \"storage.k8s.io\" "
                    "at the cluster scope");
    json_object *sc = http_as(&admin, "GET", STORAGE "/storageclasses/sc-rbac", NULL, NULL, &code);
    expect_code(code, 200, sc);
}

static void test_rbac_user_without_bindings_is_forbidden(void **state)
{
    (void)state;
    long code = 0;
    json_object *st = http_as(&bob, "GET", cm("rbac-ns", "cm-a"), NULL, NULL, &code);
    check_forbidden(st, code, "cm-a", NULL, "configmaps",
                    "configmaps \"cm-a\" is forbidden: User \"bob\" cannot get resource "
                    "\"configmaps\" in API group \"\" in the namespace \"rbac-ns\"");
}

static void test_rbac_service_account_token_bound_by_cluster_role_binding(void **state)
{
    (void)state;
    long code = 0;
    json_object *l = http_as(&robot, "GET", "/api/v1/persistentvolumes", NULL, NULL, &code);
    expect_code(code, 200, l);
    assert_str(JS(l, "kind"), "PersistentVolumeList");
    json_object *o = http_as(&robot, "GET", "/api/v1/persistentvolumes/pv-rbac", NULL, NULL, &code);
    expect_code(code, 200, o);
    /* The service-account groups work too (system:serviceaccounts:rbac-sa). */
    o = http_as(&robot, "GET", STORAGE "/storageclasses", NULL, NULL, &code);
    expect_code(code, 200, o);
    json_object *st =
        http_as(&robot, "POST", "/api/v1/persistentvolumes", CT_JSON,
                pv_body("robot-pv", "d.csi.io", "h-robot", "manual", NULL, NULL), &code);
    check_forbidden(st, code, NULL, NULL, "persistentvolumes",
                    "persistentvolumes is forbidden: User \"system:serviceaccount:rbac-sa:robot\" "
                    "cannot create resource \"persistentvolumes\" in API group \"\" at the cluster "
                    "scope");
    st = http_as(&robot, "GET", cms("rbac-ns"), NULL, NULL, &code);
    check_forbidden(st, code, NULL, NULL, "configmaps",
                    "configmaps is forbidden: User \"system:serviceaccount:rbac-sa:robot\" cannot "
                    "list resource \"configmaps\" in API group \"\" in the namespace \"rbac-ns\"");
}

/* ===================================================================================== */

/* ---- Table output (kubectl get) ------------------------------------------------------- */

#define ACCEPT_TABLE                                                                               \
    "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s." \
    "io,application/json"

static json_object *get_table(const char *path, const char *accept)
{
    long code = 0;
    C.accept = accept;
    json_object *t = get(path, &code);
    C.accept = NULL;
    expect_code(code, 200, t);
    assert_str(JS(t, "kind"), "Table");
    return t;
}

/* Column names joined by ","; priority-1 columns marked with a '+'. */
static const char *column_names(json_object *table)
{
    json_object *defs = J(table, "columnDefinitions");
    const char *out = "";
    for (size_t i = 0; defs && i < json_object_array_length(defs); i++) {
        json_object *d = json_object_array_get_idx(defs, i);
        out = fmt("%s%s%s%s", out, i ? "," : "", JS(d, "name"),
                  json_object_get_int(J(d, "priority")) ? "+" : "");
    }
    return out;
}

/* Cells of row `r` as text joined by "|" (numbers and booleans as JSON). */
static const char *row_cells(json_object *table, size_t r)
{
    json_object *cells = J(table, "rows", fmt("%zu", r), "cells");
    const char *out = "";
    for (size_t i = 0; cells && i < json_object_array_length(cells); i++) {
        json_object *c = json_object_array_get_idx(cells, i);
        out = fmt("%s%s%s", out, i ? "|" : "",
                  json_object_is_type(c, json_type_string) ? json_object_get_string(c) : jtext(c));
    }
    return out;
}

static void test_table_pvc_list_has_kube_apiserver_columns_and_cells(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(core(ns, "persistentvolumeclaims", NULL),
           js("{'metadata':{'name':'bound'},'spec':{'accessModes':['ReadWriteOnce','ReadWriteMany',"
              "'ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}},'storageClassName':"
              "'fast','volumeName':'pv-1','volumeMode':'Block'}}"));
    long code = 0;
    json_object *o = patch(fmt("%s/status", core(ns, "persistentvolumeclaims", "bound")), CT_MERGE,
                           js("{'status':{'phase':'Bound','capacity':{'storage':'2Gi'},"
                              "'accessModes':['ReadWriteMany','ReadWriteOnce']}}"),
                           &code);
    expect_code(code, 200, o);
    json_object *t = get_table(core(ns, "persistentvolumeclaims", NULL), ACCEPT_TABLE);
    assert_str(JS(t, "apiVersion"), "meta.k8s.io/v1");
    assert_str(column_names(t), "Name,Status,Volume,Capacity,Access Modes,StorageClass,"
                                "VolumeAttributesClass,Age,VolumeMode+");
    assert_str(JS(t, "columnDefinitions", "0", "format"), "name");
    assert_non_null(JS(t, "metadata", "resourceVersion"));
    const char *cells = row_cells(t, 0);
    assert_prefix(cells, "bound|Bound|pv-1|2Gi|RWO,RWX|fast|<unset>|");
    assert_non_null(strstr(cells, "s|Block"));
    assert_str(JS(t, "rows", "0", "object", "kind"), "PartialObjectMetadata");
    assert_str(JS(t, "rows", "0", "object", "apiVersion"), "meta.k8s.io/v1");
    assert_str(JS(t, "rows", "0", "object", "metadata", "name"), "bound");
    assert_null(J(t, "rows", "0", "object", "spec"));
}

static void test_table_single_get_v1beta1_with_include_object(void **state)
{
    (void)state;
    const char *ns = mkns();
    create(core(ns, "persistentvolumeclaims", NULL),
           js("{'metadata':{'name':'p'},'spec':{'accessModes':['ReadWriteOnce'],'resources':{"
              "'requests':{'storage':'1Gi'}}}}"));
    const char *v1beta1 = "application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    json_object *t =
        get_table(fmt("%s?includeObject=Object", core(ns, "persistentvolumeclaims", "p")), v1beta1);
    assert_str(JS(t, "apiVersion"), "meta.k8s.io/v1beta1");
    assert_int_equal(json_object_array_length(J(t, "rows")), 1);
    assert_prefix(row_cells(t, 0), "p|Pending||||");
    assert_str(JS(t, "rows", "0", "object", "kind"), "PersistentVolumeClaim");
    assert_str(JS(t, "rows", "0", "object", "spec", "resources", "requests", "storage"), "1Gi");
    t = get_table(fmt("%s?includeObject=None", core(ns, "persistentvolumeclaims", "p")),
                  ACCEPT_TABLE);
    assert_null(J(t, "rows", "0", "object"));
    /* Plain JSON when the client asks for it. */
    json_object *plain = must_get(core(ns, "persistentvolumeclaims", "p"));
    assert_str(JS(plain, "kind"), "PersistentVolumeClaim");
}

/* `tmpl` with its first "%s" replaced by `ns`. */
static const char *with_ns(const char *tmpl, const char *ns)
{
    const char *at = strstr(tmpl, "%s");
    return at ? fmt("%.*s%s%s", (int)(at - tmpl), tmpl, ns, at + 2) : tmpl;
}

static void test_table_columns_of_every_type(void **state)
{
    (void)state;
    const char *ns = mkns();
    static const struct {
        const char *path; /* %s: the namespace */
        const char *body; /* created first when not NULL; %s: the namespace */
        const char *columns;
        const char *cells; /* prefix of row 0 (NULL: not checked) */
    } cases[] = {
        {"/api/v1/persistentvolumes",
         "{'metadata':{'name':'tpv'},'spec':{'capacity':{'storage':'5Gi'},'accessModes':["
         "'ReadOnlyMany'],'persistentVolumeReclaimPolicy':'Retain','storageClassName':'gold',"
         "'claimRef':{'namespace':'x','name':'c'},'csi':{'driver':'d.csi.io','volumeHandle':'h'}}}",
         "Name,Capacity,Access Modes,Reclaim Policy,Status,Claim,StorageClass,"
         "VolumeAttributesClass,Reason,Age,VolumeMode+",
         "tpv|5Gi|ROX|Retain|Pending|x/c|gold|<unset>||"},
        {STORAGE "/storageclasses",
         "{'metadata':{'name':'tsc','annotations':{'storageclass.kubernetes.io/is-default-class':"
         "'true'}},'provisioner':'d.csi.io','volumeBindingMode':'WaitForFirstConsumer',"
         "'allowVolumeExpansion':true}",
         "Name,Provisioner,ReclaimPolicy,VolumeBindingMode,AllowVolumeExpansion,Age",
         "tsc (default)|d.csi.io|Delete|WaitForFirstConsumer|true|"},
        {STORAGE "/volumeattachments",
         "{'metadata':{'name':'tva'},'spec':{'attacher':'d.csi.io','nodeName':'n1','source':{"
         "'persistentVolumeName':'tpv'}}}",
         "Name,Attacher,PV,Node,Attached,Age", "tva|d.csi.io|tpv|n1|false|"},
        {STORAGE "/csinodes",
         "{'metadata':{'name':'tcn'},'spec':{'drivers':[{'name':'d.csi.io','nodeID':'n1'}]}}",
         "Name,Drivers,Age", "tcn|1|"},
        {STORAGE "/csidrivers", "{'metadata':{'name':'t.csi.io'},'spec':{}}",
         "Name,AttachRequired,PodInfoOnMount,StorageCapacity,TokenRequests,RequiresRepublish,"
         "Modes,Age",
         "t.csi.io|true|false|false|<unset>|false|Persistent|"},
        {STORAGE "/namespaces/%s/csistoragecapacities",
         "{'metadata':{'name':'tcap'},'storageClassName':'gold','capacity':'10Gi'}",
         "Name,StorageClassName,Capacity", "tcap|gold|10Gi"},
        {"/api/v1/nodes",
         "{'metadata':{'name':'tn','labels':{'node-role.kubernetes.io/worker':''}},'status':{"
         "'conditions':[{'type':'Ready','status':'True'}],'nodeInfo':{'kubeletVersion':'v1.32.0'}}"
         "}",
         "Name,Status,Roles,Age,Version,Internal-IP+,External-IP+,OS-Image+,Kernel-Version+,"
         "Container-Runtime+",
         NULL},
        {"/api/v1/namespaces/%s/pods",
         "{'metadata':{'name':'tpod'},'spec':{'containers':[{'name':'c','image':'i'}]}}",
         "Name,Ready,Status,Restarts,Age,IP+,Node+,Nominated Node+,Readiness Gates+",
         "tpod|0/1|Pending|0|"},
        {"/api/v1/namespaces", NULL, "Name,Status,Age", NULL},
        {"/api/v1/namespaces/%s/secrets",
         "{'metadata':{'name':'tsec'},'data':{'a':'Yg==','c':'ZA=='}}", "Name,Type,Data,Age",
         "tsec|Opaque|2|"},
        {"/api/v1/namespaces/%s/configmaps", "{'metadata':{'name':'tcm'},'data':{'a':'b'}}",
         "Name,Data,Age", "tcm|1|"},
        {"/api/v1/namespaces/%s/serviceaccounts", "{'metadata':{'name':'tsa'}}", "Name,Secrets,Age",
         "tsa|0|"},
        {"/api/v1/namespaces/%s/events",
         "{'metadata':{'name':'tev'},'involvedObject':{'kind':'PersistentVolumeClaim','name':"
         "'p','namespace':'%s'},'reason':'Provisioning','message':' hello ','type':'Normal',"
         "'source':{'component':'prov'}}",
         "Last Seen,Type,Reason,Object,Subobject+,Source+,Message,First Seen+,Count+,Name+", NULL},
        {"/apis/events.k8s.io/v1/namespaces/%s/events", NULL,
         "Last Seen,Type,Reason,Object,Subobject+,Source+,Message,First Seen+,Count+,Name+", NULL},
        {"/apis/coordination.k8s.io/v1/namespaces/%s/leases",
         "{'metadata':{'name':'tl'},'spec':{'holderIdentity':'me'}}", "Name,Holder,Age", "tl|me|"},
        {RBAC "/namespaces/%s/roles", "{'metadata':{'name':'tr'},'rules':[]}", "Name,Created At",
         "tr|20"},
        {RBAC "/clusterroles", NULL, "Name,Created At", NULL},
        {RBAC "/namespaces/%s/rolebindings",
         "{'metadata':{'name':'trb'},'roleRef':{'apiGroup':'rbac.authorization.k8s.io','kind':"
         "'Role','name':'tr'},'subjects':[{'kind':'User','name':'alice'},{'kind':"
         "'ServiceAccount','name':'sa','namespace':'n'}]}",
         "Name,Role,Age,Users+,Groups+,ServiceAccounts+", "trb|Role/tr|"},
        {RBAC "/clusterrolebindings", NULL, "Name,Role,Age,Users+,Groups+,ServiceAccounts+", NULL},
        {"/apis/apps/v1/namespaces/%s/deployments", NULL,
         "Name,Ready,Up-to-date,Available,Age,Containers+,Images+,Selector+", NULL},
        {"/apis/apps/v1/namespaces/%s/daemonsets", NULL,
         "Name,Desired,Current,Ready,Up-to-date,Available,Node Selector,Age,Containers+,Images+,"
         "Selector+",
         NULL},
        {"/apis/apps/v1/namespaces/%s/statefulsets", NULL, "Name,Ready,Age,Containers+,Images+",
         NULL},
        {"/apis/apps/v1/namespaces/%s/replicasets", NULL,
         "Name,Desired,Current,Ready,Age,Containers+,Images+,Selector+", NULL},
        {"/apis/snapshot.storage.k8s.io/v1/namespaces/%s/volumesnapshots", NULL,
         "Name,ReadyToUse,SourcePVC,SourceSnapshotContent,RestoreSize,SnapshotClass,"
         "SnapshotContent,CreationTime,Age",
         NULL},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *path = with_ns(cases[i].path, ns);
        if (cases[i].body) {
            long code = 0;
            json_object *o = post(path, js("%s", with_ns(cases[i].body, ns)), &code);
            if (code != 201)
                fail_msg("%s: create: %ld %s", path, code, jtext(o));
            /* The one object: other tests leave cluster-scoped ones behind. */
            path = fmt("%s/%s", path, JS(o, "metadata", "name"));
        }
        json_object *t = get_table(path, ACCEPT_TABLE);
        if (!str_eq(column_names(t), cases[i].columns))
            fail_msg("%s: columns %s, want %s", path, column_names(t), cases[i].columns);
        if (cases[i].cells && !util_has_prefix(row_cells(t, 0), cases[i].cells))
            fail_msg("%s: row %s, want it to start %s", path, row_cells(t, 0), cases[i].cells);
    }
    /* A default class would change later tests' claims. */
    long code = 0;
    del(STORAGE "/storageclasses/tsc", NULL, &code);
    expect_code(code, 200, NULL);
}

static void test_table_watch_sends_rows_columns_first_event_only(void **state)
{
    (void)state;
    const char *ns = mkns();
    make_cm(ns, "w1", NULL);
    C.accept = ACCEPT_TABLE;
    watch *w = watch_open(fmt("%s?watch=true&resourceVersion=0", cms(ns)));
    C.accept = NULL;
    make_cm(ns, "w2", NULL);
    if (watch_wait(w, 2, TMO) < 2)
        fail_msg("want 2 events; %s", watch_dump(w));
    json_object *first = ev_obj(w, 0), *second = ev_obj(w, 1);
    assert_str(JS(first, "kind"), "Table");
    assert_str(column_names(first), "Name,Data,Age");
    assert_str(JS(first, "rows", "0", "cells", "0"), "w1");
    assert_str(ev_type(w, 1), "ADDED");
    assert_str(JS(second, "kind"), "Table");
    assert_int_equal(json_object_array_length(J(second, "columnDefinitions")), 0);
    assert_str(JS(second, "rows", "0", "cells", "0"), "w2");
    assert_str(JS(second, "rows", "0", "object", "metadata", "name"), "w2");
}

static void test_emptied_metadata_lists_and_maps_are_dropped(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *path = core(ns, "configmaps", "e");
    create(cms(ns), js("{'metadata':{'name':'e','finalizers':['a.io/x'],'labels':{'k':'v'},"
                       "'annotations':{'n':'m'},'ownerReferences':[]}}"));
    json_object *o = must_get(path);
    assert_null(J(o, "metadata", "ownerReferences"));
    long code = 0;
    o = patch(path, CT_JPATCH,
              js("[{'op':'remove','path':'/metadata/finalizers/0'},"
                 "{'op':'remove','path':'/metadata/labels/k'}]"),
              &code);
    expect_code(code, 200, o);
    if (json_object_object_get_ex(J(o, "metadata"), "finalizers", NULL) ||
        json_object_object_get_ex(J(o, "metadata"), "labels", NULL))
        fail_msg("emptied finalizers / labels still there: %s", jtext(o));
    o = patch(path, CT_MERGE, js("{'metadata':{'annotations':{'n':null}}}"), &code);
    expect_code(code, 200, o);
    if (json_object_object_get_ex(J(o, "metadata"), "annotations", NULL))
        fail_msg("emptied annotations still there: %s", jtext(o));
    o = must_get(path);
    if (json_object_object_get_ex(J(o, "metadata"), "finalizers", NULL))
        fail_msg("stored with finalizers: %s", jtext(o));
}

static void test_json_patch_test_of_missing_member_with_null_passes(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *path = core(ns, "configmaps", "t");
    create(cms(ns), js("{'metadata':{'name':'t'}}"));
    long code = 0;
    json_object *o = patch(path, CT_JPATCH,
                           js("[{'op':'test','path':'/metadata/finalizers','value':null},"
                              "{'op':'add','path':'/metadata/finalizers','value':['a.io/x']}]"),
                           &code);
    expect_code(code, 200, o);
    assert_str(JS(o, "metadata", "finalizers", "0"), "a.io/x");
    o = patch(path, CT_JPATCH, js("[{'op':'test','path':'/metadata/labels','value':{'a':'b'}}]"),
              &code);
    check_status(o, code, 422, "Invalid",
                 "the server rejected our request due to an error in our request");
    o = patch(path, CT_JPATCH, js("[{'op':'remove','path':'/metadata/finalizers'}]"), &code);
    expect_code(code, 200, o);
}

static void test_claim_without_class_gets_newest_default_class(void **state)
{
    (void)state;
    const char *ns = mkns();
    const char *old_sc = uname("dflt-old"), *new_sc = uname("dflt-new"), *plain = uname("plain");
    const char *ann = "'annotations':{'storageclass.kubernetes.io/is-default-class':'true'}";
    create(STORAGE "/storageclasses",
           js("{'metadata':{'name':'%s',%s},'provisioner':'d.csi.io'}", old_sc, ann));
    create(STORAGE "/storageclasses",
           js("{'metadata':{'name':'%s'},'provisioner':'d.csi.io'}", plain));
    /* creationTimestamp has whole seconds: the second class is newer. */
    util_sleep(1100 * UTIL_MS);
    create(STORAGE "/storageclasses",
           js("{'metadata':{'name':'%s',%s},'provisioner':'d.csi.io'}", new_sc, ann));
    const char *spec = "'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}}";
    json_object *o = create(core(ns, "persistentvolumeclaims", NULL),
                            js("{'metadata':{'name':'a'},'spec':{%s}}", spec));
    assert_str(JS(o, "spec", "storageClassName"), new_sc);
    o = create(core(ns, "persistentvolumeclaims", NULL),
               js("{'metadata':{'name':'b'},'spec':{%s,'storageClassName':''}}", spec));
    assert_str(JS(o, "spec", "storageClassName"), "");
    o = create(core(ns, "persistentvolumeclaims", NULL),
               js("{'metadata':{'name':'c'},'spec':{%s,'storageClassName':'%s'}}", spec, plain));
    assert_str(JS(o, "spec", "storageClassName"), plain);
    long code = 0;
    del(fmt(STORAGE "/storageclasses/%s", new_sc), NULL, &code);
    o = create(core(ns, "persistentvolumeclaims", NULL),
               js("{'metadata':{'name':'d'},'spec':{%s}}", spec));
    assert_str(JS(o, "spec", "storageClassName"), old_sc);
    del(fmt(STORAGE "/storageclasses/%s", old_sc), NULL, &code);
    o = create(core(ns, "persistentvolumeclaims", NULL),
               js("{'metadata':{'name':'e'},'spec':{%s}}", spec));
    assert_null(J(o, "spec", "storageClassName"));
}

/* ---- protobuf bodies (kubectl create ...) ------------------------------------------------ */

/* A protobuf message being written: fields appended in order. */
typedef struct pbw {
    unsigned char b[4096];
    size_t n;
} pbw;

static void pb_varint(pbw *w, uint64_t v)
{
    do {
        unsigned char c = (unsigned char)(v & 0x7f);
        v >>= 7;
        w->b[w->n++] = (unsigned char)(c | (v ? 0x80 : 0));
    } while (v);
}

static void pb_bytes(pbw *w, unsigned field, const void *p, size_t len)
{
    pb_varint(w, (uint64_t)field << 3 | 2);
    pb_varint(w, len);
    memcpy(w->b + w->n, p, len);
    w->n += len;
}

static void pb_str(pbw *w, unsigned field, const char *s)
{
    pb_bytes(w, field, s, strlen(s));
}

static void pb_sub(pbw *w, unsigned field, const pbw *m)
{
    pb_bytes(w, field, m->b, m->n);
}

static void pb_int(pbw *w, unsigned field, uint64_t v)
{
    pb_varint(w, (uint64_t)field << 3);
    pb_varint(w, v);
}

/* "k8s\0" + runtime.Unknown{typeMeta{apiVersion, kind}, raw}. */
static pbw *pb_envelope(const char *api_version, const char *kind, const pbw *raw)
{
    pbw *out = keep(A_MEM, util_calloc(1, sizeof(pbw)));
    if (!out)
        abort();
    memcpy(out->b, "k8s", 4);
    out->n = 4;
    pbw tm = {.n = 0};
    pb_str(&tm, 1, api_version);
    pb_str(&tm, 2, kind);
    pb_sub(out, 1, &tm);
    pb_sub(out, 2, raw);
    pb_str(out, 3, "");
    pb_str(out, 4, "");
    return out;
}

static json_object *post_pb(const char *path, const pbw *body, long *code)
{
    C.body_len = body->n;
    char *copy = keep(A_MEM, util_calloc(body->n + 1, 1));
    memcpy(copy, body->b, body->n);
    json_object *o = http("POST", path, "application/vnd.kubernetes.protobuf", copy, code);
    C.body_len = 0;
    return o;
}

/* ObjectMeta as kubectl writes it: every string field present, empty ones too. */
static void pb_meta(pbw *m, const char *name, const char *ns)
{
    pb_str(m, 1, name);
    pb_str(m, 2, "");
    pb_str(m, 3, ns);
    pb_str(m, 4, "");
    pb_str(m, 5, "");
    pb_str(m, 6, "");
    pb_int(m, 7, 0);
    pb_str(m, 8, "");
}

static void test_protobuf_create_namespace_secret_configmap(void **state)
{
    (void)state;
    const char *nsname = uname("pbns");
    pbw meta = {.n = 0}, raw = {.n = 0}, spec = {.n = 0};
    pb_meta(&meta, nsname, "");
    pb_sub(&raw, 1, &meta);
    pb_sub(&raw, 2, &spec);
    long code = 0;
    json_object *o = post_pb("/api/v1/namespaces", pb_envelope("v1", "Namespace", &raw), &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "metadata", "name"), nsname);
    assert_null(J(o, "metadata", "generateName"));
    assert_str(JS(o, "status", "phase"), "Active");

    pbw sm = {.n = 0}, sraw = {.n = 0}, e1 = {.n = 0}, e2 = {.n = 0};
    pb_meta(&sm, "s", nsname);
    pb_str(&e1, 1, "a");
    pb_bytes(&e1, 2, "b\0c", 3);
    pb_str(&e2, 1, "k");
    pb_str(&e2, 2, "v");
    pb_sub(&sraw, 1, &sm);
    pb_sub(&sraw, 2, &e1);
    pb_str(&sraw, 3, "Opaque");
    pb_sub(&sraw, 4, &e2);
    o = post_pb(core(nsname, "secrets", NULL), pb_envelope("v1", "Secret", &sraw), &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "data", "a"), "YgBj");
    assert_str(JS(o, "data", "k"), "dg==");
    assert_str(JS(o, "type"), "Opaque");

    pbw cm = {.n = 0}, craw = {.n = 0};
    pb_meta(&cm, "c", nsname);
    pb_sub(&craw, 1, &cm);
    pb_sub(&craw, 2, &e2);
    o = post_pb(core(nsname, "configmaps", NULL), pb_envelope("v1", "ConfigMap", &craw), &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "data", "k"), "v");
}

static void test_protobuf_rbac_rule_keeps_the_core_group(void **state)
{
    (void)state;
    const char *ns = mkns();
    pbw meta = {.n = 0}, rule = {.n = 0}, raw = {.n = 0};
    pb_meta(&meta, "r", ns);
    pb_str(&rule, 1, "get");
    pb_str(&rule, 2, "");
    pb_str(&rule, 3, "pods");
    pb_sub(&raw, 1, &meta);
    pb_sub(&raw, 2, &rule);
    long code = 0;
    json_object *o = post_pb(fmt(RBAC "/namespaces/%s/roles", ns),
                             pb_envelope("rbac.authorization.k8s.io/v1", "Role", &raw), &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "rules", "0", "apiGroups", "0"), "");
    assert_str(JS(o, "rules", "0", "verbs", "0"), "get");

    pbw bm = {.n = 0}, sub = {.n = 0}, ref = {.n = 0}, braw = {.n = 0};
    pb_meta(&bm, "rb", ns);
    pb_str(&sub, 1, "ServiceAccount");
    pb_str(&sub, 2, "");
    pb_str(&sub, 3, "sa");
    pb_str(&sub, 4, ns);
    pb_str(&ref, 1, "rbac.authorization.k8s.io");
    pb_str(&ref, 2, "Role");
    pb_str(&ref, 3, "r");
    pb_sub(&braw, 1, &bm);
    pb_sub(&braw, 2, &sub);
    pb_sub(&braw, 3, &ref);
    o = post_pb(fmt(RBAC "/namespaces/%s/rolebindings", ns),
                pb_envelope("rbac.authorization.k8s.io/v1", "RoleBinding", &braw), &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "subjects", "0", "namespace"), ns);
    assert_null(J(o, "subjects", "0", "apiGroup"));
    assert_str(JS(o, "roleRef", "name"), "r");
}

static void test_protobuf_malformed_is_400_and_other_kinds_415(void **state)
{
    (void)state;
    const char *ns = mkns();
    pbw meta = {.n = 0}, raw = {.n = 0}, e = {.n = 0};
    pb_meta(&meta, "cut", ns);
    pb_str(&e, 1, "k");
    pb_str(&e, 2, "v");
    pb_sub(&raw, 1, &meta);
    pb_sub(&raw, 2, &e);
    pbw *full = pb_envelope("v1", "ConfigMap", &raw);
    long code = 0;
    /* Every truncation answers 400 (or creates, when it ends on a field
     * boundary) and never takes kube-lite down. */
    for (size_t len = 0; len < full->n; len++) {
        pbw cut = *full;
        cut.n = len;
        json_object *o = post_pb(cms(ns), &cut, &code);
        if (code != 400 && code != 201 && code != 422 && code != 409)
            fail_msg("%zu bytes: %ld %s", len, code, jtext(o));
        if (code == 400)
            assert_str(JS(o, "reason"), "BadRequest");
    }
    /* A cut after the raw object already created it. */
    json_object *o = post_pb(cms(ns), full, &code);
    expect_code(code, 409, o);
    assert_str(JS(must_get(core(ns, "configmaps", "cut")), "data", "k"), "v");
    /* A known field with the wrong wire type. */
    pbw bad = {.n = 0};
    pb_int(&bad, 1, 7);
    o = post_pb(cms(ns), pb_envelope("v1", "ConfigMap", &bad), &code);
    check_status(o, code, 400, "BadRequest", NULL);
    assert_non_null(strstr(JS(o, "message"), "ConfigMap.metadata: wire type 0"));
    /* A custom resource: 415, as kube-apiserver's CRD endpoints take JSON
     * and YAML only (client-go then falls back to JSON). */
    pbw vs = {.n = 0};
    o = post_pb(fmt("/apis/snapshot.storage.k8s.io/v1/namespaces/%s/volumesnapshots", ns),
                pb_envelope("snapshot.storage.k8s.io/v1", "VolumeSnapshot", &vs), &code);
    check_status(o, code, 415, "UnsupportedMediaType", NULL);
}

static void test_token_request_for_missing_service_account_is_404(void **state)
{
    (void)state;
    const char *ns = mkns();
    long code = 0;
    json_object *o = post(core(ns, "serviceaccounts", "nope/token"),
                          js("{'apiVersion':'authentication.k8s.io/v1','kind':'TokenRequest',"
                             "'spec':{'audiences':['a']}}"),
                          &code);
    check_status(o, code, 404, "NotFound", "serviceaccounts \"nope\" not found");
    create(core(ns, "serviceaccounts", NULL), js("{'metadata':{'name':'sa'}}"));
    o = post(core(ns, "serviceaccounts", "sa/token"), js("{'spec':{'expirationSeconds':60}}"),
             &code);
    check_status(o, code, 422, "Invalid", NULL);
    o = post(core(ns, "serviceaccounts", "sa/token"), js("{'spec':{'expirationSeconds':'x'}}"),
             &code);
    check_status(o, code, 422, "Invalid", NULL);
    o = post(core(ns, "serviceaccounts", "sa/token"), js("{'spec':{'audiences':['a','b']}}"),
             &code);
    expect_code(code, 201, o);
    assert_str(JS(o, "kind"), "TokenRequest");
    assert_str(JS(o, "spec", "audiences", "1"), "b");
    assert_int_equal(json_object_get_int64(J(o, "spec", "expirationSeconds")), 3600);
    assert_non_null(JS(o, "status", "token"));
    assert_non_null(JS(o, "status", "expirationTimestamp"));
}

static void test_wrong_json_types_in_bodies_are_400(void **state)
{
    (void)state;
    const char *ns = mkns();
    static const struct {
        const char *path; /* %s: the namespace */
        const char *body;
        const char *message; /* after "<Kind> in version ... cannot be handled as a <Kind>: " */
    } cases[] = {
        {RBAC "/clusterroles", "{'metadata':{'name':'bad-rules'},'rules':'x'}",
         "json: cannot unmarshal string into Go struct field ClusterRole.rules of type "
         "[]v1.PolicyRule"},
        {RBAC "/clusterroles", "{'metadata':{'name':'bad-verbs'},'rules':[{'verbs':[1]}]}",
         "json: cannot unmarshal number into Go struct field ClusterRole.rules.verbs of type "
         "string"},
        {"/api/v1/namespaces/%s/configmaps", "{'metadata':{'name':'c','labels':{'a':1}}}",
         "json: cannot unmarshal number into Go struct field ConfigMap.metadata.labels of type "
         "string"},
        {"/api/v1/namespaces/%s/configmaps", "{'metadata':'x'}",
         "json: cannot unmarshal string into Go struct field ConfigMap.metadata of type "
         "v1.ObjectMeta"},
        {"/api/v1/namespaces/%s/persistentvolumeclaims",
         "{'metadata':{'name':'p'},'spec':{'accessModes':'ReadWriteOnce'}}",
         "json: cannot unmarshal string into Go struct field "
         "PersistentVolumeClaim.spec.accessModes of type []v1.PersistentVolumeAccessMode"},
        {STORAGE "/csinodes", "{'metadata':{'name':'n'},'spec':{'drivers':[{'name':5}]}}",
         "json: cannot unmarshal number into Go struct field CSINode.spec.drivers.name of type "
         "string"},
        {"/apis/apps/v1/namespaces/%s/deployments",
         "{'metadata':{'name':'d'},'spec':{'replicas':'two'}}",
         "json: cannot unmarshal string into Go struct field Deployment.spec.replicas of type "
         "int32"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *at = strstr(cases[i].path, "%s");
        const char *path =
            at ? fmt("%.*s%s%s", (int)(at - cases[i].path), cases[i].path, ns, at + 2)
               : cases[i].path;
        long code = 0;
        json_object *st = post(path, js("%s", cases[i].body), &code);
        check_status(st, code, 400, "BadRequest", NULL);
        if (!strstr(JS(st, "message"), cases[i].message))
            fail_msg("%s: message %s, want it to contain %s", path, JS(st, "message"),
                     cases[i].message);
    }
    /* A patch that would store a wrong type is refused the same way. */
    create(cms(ns), js("{'metadata':{'name':'ok'}}"));
    long code = 0;
    json_object *st = patch(core(ns, "configmaps", "ok"), CT_MERGE,
                            js("{'metadata':{'finalizers':'a.io/x'}}"), &code);
    check_status(st, code, 400, "BadRequest", NULL);
    assert_non_null(strstr(JS(st, "message"), "ConfigMap.metadata.finalizers of type []string"));
    assert_null(J(must_get(core(ns, "configmaps", "ok")), "metadata", "finalizers"));
    /* DeleteOptions too. */
    st = del(core(ns, "configmaps", "ok"), js("{'preconditions':{'uid':5}}"), &code);
    check_status(st, code, 400, "BadRequest", NULL);
    st = del(core(ns, "configmaps", "ok"), "[1]", &code);
    check_status(st, code, 400, "BadRequest", NULL);
    expect_code(code_of(core(ns, "configmaps", "ok")), 200, NULL);
}

int main(void)
{
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
        return 1;
    const struct CMUnitTest rest[] = {
        T(test_create_sets_uid_timestamp_resource_version_kind_and_api_version),
        T(test_create_existing_core_object_is_409_already_exists),
        T(test_create_existing_storage_class_is_409_with_group_in_details),
        T(test_create_generate_name_appends_five_random_characters),
        T(test_create_without_name_or_generate_name_is_422),
        T(test_create_in_missing_namespace_is_404),
        T(test_create_with_other_namespace_in_body_is_400),
        T(test_create_with_resource_version_is_500),
        T(test_create_storage_class_gets_defaults),
        T(test_create_csidriver_gets_defaults_attach_required_true),
        T(test_get_missing_object_is_404_not_found),
        T(test_unknown_path_is_404_could_not_find_resource),
        T(test_json_answers_carry_application_json_content_type),
        T(test_list_has_list_kind_and_resource_version),
        T(test_list_label_selector_equality),
        T(test_list_label_selector_set_based),
        T(test_list_label_selector_key_absent),
        T(test_list_field_selector_metadata_name),
        T(test_list_field_selector_unsupported_field_is_400),
        T(test_list_limit_and_continue_walk_every_item_once),
        T(test_list_all_namespaces_persistent_volume_claims),
        T(test_update_with_stale_resource_version_is_409_conflict),
        T(test_update_with_current_resource_version_gets_new_one),
        T(test_update_volume_attachment_without_resource_version_is_422),
        T(test_update_persistent_volume_csi_source_is_immutable_422),
        T(test_update_persistent_volume_claim_spec_is_immutable_422),
        T(test_update_main_endpoint_keeps_status),
        T(test_update_status_endpoint_changes_only_status),
        T(test_update_that_changes_nothing_keeps_resource_version),
        T(test_patch_merge_patch_merges_maps_deletes_nulls_replaces_lists),
        T(test_patch_json_patch_applies_operations),
        T(test_patch_json_patch_failed_test_is_422_invalid),
        T(test_patch_json_patch_malformed_is_400),
        T(test_patch_strategic_merges_finalizers_as_a_set),
        T(test_patch_strategic_merges_csinode_drivers_by_name),
        T(test_patch_strategic_on_volume_snapshot_is_415),
        T(test_patch_with_stale_resource_version_is_409),
        T(test_delete_without_finalizers_removes_and_sends_deleted),
        T(test_delete_persistent_volume_returns_the_object),
        T(test_delete_configmap_returns_success_status),
        T(test_delete_with_finalizers_sets_deletion_timestamp_and_keeps_object),
        T(test_adding_finalizer_during_deletion_is_422),
        T(test_removing_last_finalizer_during_deletion_deletes),
        T(test_delete_with_uid_precondition_mismatch_is_409),
        T(test_event_without_involved_namespace_outside_default_is_422),
        T(test_delete_collection_with_label_selector),
        T(test_conflicting_writers_with_retry_count_exactly),
        T(test_metrics_count_requests_by_verb_resource_and_code),
        T(test_discovery_api_lists_v1),
        T(test_discovery_apis_has_storage_and_snapshot_groups),
        T(test_discovery_storage_v1_lists_volumeattachments_and_status),
        T(test_version_reports_minor_32),
        T(test_openapi_v2_is_200),
        T(test_table_pvc_list_has_kube_apiserver_columns_and_cells),
        T(test_table_single_get_v1beta1_with_include_object),
        T(test_table_columns_of_every_type),
        T(test_table_watch_sends_rows_columns_first_event_only),
        T(test_emptied_metadata_lists_and_maps_are_dropped),
        T(test_json_patch_test_of_missing_member_with_null_passes),
        T(test_claim_without_class_gets_newest_default_class),
        T(test_protobuf_create_namespace_secret_configmap),
        T(test_protobuf_rbac_rule_keeps_the_core_group),
        T(test_protobuf_malformed_is_400_and_other_kinds_415),
        T(test_token_request_for_missing_service_account_is_404),
        T(test_wrong_json_types_in_bodies_are_400),
    };
    const struct CMUnitTest watches[] = {
        T(test_watch_from_resource_version_sends_later_events_in_order),
        T(test_watch_from_resource_version_0_sends_synthetic_added_first),
        T(test_watch_label_selector_update_leaving_selection_is_deleted),
        T(test_watch_in_a_namespace_sees_exactly_that_namespace),
        T(test_watch_bookmarks_when_allowed),
        T(test_watch_timeout_seconds_ends_the_stream),
        T(test_watch_resumes_from_last_seen_resource_version),
        T(test_faults_endpoint_watch_close_after_ends_watches),
        T(test_watch_after_compaction_gets_410_expired_then_ends),
    };
    const struct CMUnitTest close_after[] = {
        T(test_watch_close_after_flag_closes_every_watch),
    };
    const struct CMUnitTest faults[] = {
        T(test_fault_error_rate_1_answers_429_with_retry_after),
        T(test_faults_endpoint_changes_code_and_latency_at_run_time),
    };
    const struct CMUnitTest controllers[] = {
        T(test_controller_immediate_claim_gets_storage_provisioner),
        T(test_controller_wait_for_first_consumer_claim_waits_for_pod_node),
        T(test_controller_binds_claim_named_by_volume_claim_ref),
        T(test_controller_deleting_bound_claim_releases_volume),
        T(test_controller_pod_with_bound_csi_claim_gets_volume_attachment),
        T(test_controller_volume_attachment_deleted_when_pod_goes),
        T(test_controller_no_volume_attachment_when_attach_not_required),
        T(test_controller_namespace_deletion_removes_objects_then_namespace),
    };
    const struct CMUnitTest tls[] = {
        T(test_tls_request_without_token_is_401_unauthorized),
        T(test_rbac_discovery_is_allowed_for_every_authenticated_user),
        T(test_rbac_get_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_list_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_watch_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_create_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_update_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_patch_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_delete_is_allowed_as_granted_and_forbidden_elsewhere),
        T(test_rbac_user_without_bindings_is_forbidden),
        T(test_rbac_service_account_token_bound_by_cluster_role_binding),
    };
    int failed = 0;
    failed += cmocka_run_group_tests_name("kube-lite REST", rest, rest_setup, group_teardown);
    failed += cmocka_run_group_tests_name("kube-lite watch", watches, watch_setup, group_teardown);
    failed += cmocka_run_group_tests_name("kube-lite --watch-close-after", close_after, close_setup,
                                          group_teardown);
    failed += cmocka_run_group_tests_name("kube-lite faults", faults, fault_setup, group_teardown);
    failed += cmocka_run_group_tests_name("kube-lite controllers", controllers, ctrl_setup,
                                          group_teardown);
    failed += cmocka_run_group_tests_name("kube-lite TLS and RBAC", tls, tls_setup, tls_teardown);
    curl_global_cleanup();
    return failed ? 1 : 0;
}
