/*
 * The informer against an API server that answers with values of the wrong
 * type: list items that are strings, numbers, null or objects whose
 * metadata is a string or holds fields of the wrong type (kobj_check, as
 * Go's typed decoder), a list whose `items` is no array, and watch events
 * whose object is an array. Before the kobj accessors json-c asserted on
 * such a value and took the whole sidecar down; now the bad item is
 * skipped (one log line at -v=2, one count in
 * csi_sidecar_malformed_objects_total) and the good ones are cached.
 *
 * The caps come next: an answer far beyond 256 MiB ends the request with
 * -EMSGSIZE and a message saying so, the memory it took staying near the
 * cap; a watch event that never ends stops its stream at 16 MiB and the
 * informer lists and watches again.
 *
 * A small canned HTTP server on loopback answers each request from a table
 * and closes the connection (Connection: close), so no keep-alive state is
 * involved.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "harness.h"
#include "kobj/kobj.h"
#include "kube/kube.h"

#define MAX_HELD 32

static const kube_resource CM = {"", "v1", "configmaps", "ConfigMap", true, NULL};

/* Answers lists from `lists` in order (the last one repeats) and the first
 * watch with `events` (then closes); later watches are held open until the
 * server stops, as a quiet real watch would be. */
typedef struct canned {
    int fd;
    pthread_t th;
    char *kubeconfig;
    const char *const *lists;
    size_t n_lists;
    const char *events;
    /* Hostile sizes: lists answered with a body that never ends (of
     * `huge_len` declared bytes), the first watch with `endless` followed by
     * filler until the client hangs up. */
    size_t huge_len;
    const char *endless;
    pthread_mutex_t mu;
    int list_calls, watch_calls;
    int held[MAX_HELD];
    int n_held;
} canned;

static void send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        p += w;
        n -= (size_t)w;
    }
}

/* `prefix`, then `fill` bytes until `limit` bytes in all or the peer
 * hangs up (what a cap is for). */
static void send_endless(int fd, const char *prefix, size_t limit, char fill)
{
    size_t size = (size_t)1 << 20;
    char *chunk = malloc(size);
    assert_non_null(chunk);
    memset(chunk, fill, size);
    size_t sent = strlen(prefix);
    send_all(fd, prefix, sent);
    while (sent < limit) {
        size_t n = limit - sent < size ? limit - sent : size;
        ssize_t w = send(fd, chunk, n, MSG_NOSIGNAL);
        if (w <= 0)
            break;
        sent += (size_t)w;
    }
    free(chunk);
}

static void answer(canned *s, int c)
{
    char req[8192];
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n"))
            break;
    }
    req[got] = '\0';
    char *eol = strstr(req, "\r\n");
    if (eol)
        *eol = '\0';
    static const char head[] = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                               "Connection: close\r\n";
    pthread_mutex_lock(&s->mu);
    if (strstr(req, "watch=true")) {
        int call = s->watch_calls++;
        pthread_mutex_unlock(&s->mu);
        send_all(c, head, sizeof(head) - 1);
        send_all(c, "\r\n", 2);
        if (call == 0 && s->endless) {
            send_endless(c, s->endless, SIZE_MAX, 'a');
        } else if (call == 0 && s->events) {
            send_all(c, s->events, strlen(s->events));
        } else {
            pthread_mutex_lock(&s->mu);
            if (s->n_held < MAX_HELD) {
                s->held[s->n_held++] = c;
                pthread_mutex_unlock(&s->mu);
                return;
            }
            pthread_mutex_unlock(&s->mu);
        }
        close(c);
        return;
    }
    size_t i = (size_t)s->list_calls++;
    pthread_mutex_unlock(&s->mu);
    if (s->huge_len > 0) {
        char *hdr = util_asprintf("%sContent-Length: %zu\r\n\r\n", head, s->huge_len);
        send_all(c, hdr, strlen(hdr));
        free(hdr);
        send_endless(c, "{\"kind\":\"ConfigMapList\",\"items\":[\"", s->huge_len, 'x');
        close(c);
        return;
    }
    const char *body = s->lists[i < s->n_lists ? i : s->n_lists - 1];
    char *hdr = util_asprintf("%sContent-Length: %zu\r\n\r\n", head, strlen(body));
    send_all(c, hdr, strlen(hdr));
    send_all(c, body, strlen(body));
    free(hdr);
    close(c);
}

static void *canned_main(void *ud)
{
    canned *s = ud;
    for (;;) {
        int c = accept(s->fd, NULL, NULL);
        if (c < 0)
            return NULL; /* the listening socket was shut down */
        answer(s, c);
    }
}

static void canned_start(canned *s, const char *const *lists, size_t n_lists, const char *events)
{
    memset(s, 0, sizeof(*s));
    pthread_mutex_init(&s->mu, NULL);
    s->lists = lists;
    s->n_lists = n_lists;
    s->events = events;
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(s->fd, 16), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&sa, &sl), 0);
    s->kubeconfig = util_asprintf("%s/kubeconfig-%d", th_tmpdir(), ntohs(sa.sin_port));
    FILE *f = fopen(s->kubeconfig, "w");
    assert_non_null(f);
    fprintf(f,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
            "    server: http://127.0.0.1:%d\ncontexts:\n- name: c\n  context:\n    cluster: c\n"
            "    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
            ntohs(sa.sin_port));
    fclose(f);
    assert_int_equal(pthread_create(&s->th, NULL, canned_main, s), 0);
}

static void canned_stop(canned *s)
{
    shutdown(s->fd, SHUT_RDWR);
    pthread_join(s->th, NULL);
    close(s->fd);
    for (int i = 0; i < s->n_held; i++)
        close(s->held[i]);
    pthread_mutex_destroy(&s->mu);
    free(s->kubeconfig);
}

/* An informer of ConfigMaps in "default" on the canned server. */
typedef struct run {
    obs_registry *reg;
    kube_config *cfg;
    kube_client *kc;
    kube_informer *inf;
    int adds, updates;
    pthread_mutex_t mu;
} run;

static void on_add(void *ud, json_object *obj)
{
    run *r = ud;
    (void)obj;
    pthread_mutex_lock(&r->mu);
    r->adds++;
    pthread_mutex_unlock(&r->mu);
}

static void on_update(void *ud, json_object *old, json_object *obj)
{
    run *r = ud;
    (void)old;
    (void)obj;
    pthread_mutex_lock(&r->mu);
    r->updates++;
    pthread_mutex_unlock(&r->mu);
}

static void run_start(run *r, const canned *s)
{
    memset(r, 0, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    assert_int_equal(kube_config_from_file(s->kubeconfig, NULL, &r->cfg), 0);
    r->reg = obs_registry_new();
    kube_client_opts co = {.user_agent = "test_kube_hostile/test", .metrics = r->reg};
    assert_int_equal(kube_client_new(r->cfg, &co, &r->kc), 0);
    kube_informer_opts o = {.res = &CM,
                            .ns = "default",
                            .handlers = {.on_add = on_add, .on_update = on_update, .ud = r}};
    assert_int_equal(kube_informer_new(r->kc, &o, &r->inf), 0);
    assert_int_equal(kube_informer_start(r->inf), 0);
}

static void run_stop(run *r)
{
    kube_informer_free(r->inf);
    kube_client_free(r->kc);
    kube_config_free(r->cfg);
    obs_registry_free(r->reg);
    pthread_mutex_destroy(&r->mu);
}

/* csi_sidecar_malformed_objects_total{resource="configmaps"}. */
static double malformed(run *r)
{
    static const char *const labels[] = {"resource", NULL};
    obs_metric *m = obs_counter_new(r->reg, "csi_sidecar_malformed_objects_total", "", labels);
    assert_non_null(m);
    const char *const v[] = {"configmaps", NULL};
    return obs_metric_value(m, v);
}

static bool cached(run *r, const char *name)
{
    json_object *o = kube_informer_get(r->inf, "default", name);
    json_object_put(o);
    return o != NULL;
}

#define GOOD(n, rv)                                                                                \
    "{\"metadata\":{\"name\":\"" n "\",\"namespace\":\"default\",\"resourceVersion\":\"" rv        \
    "\"},\"data\":{\"v\":\"1\"}}"

#define HOSTILE_LIST                                                                               \
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":["            \
    "\"a string\",42,null,true,[1,2],"                                                             \
    "{\"metadata\":\"a string\"},{\"metadata\":[1]},{\"metadata\":{\"name\":7}},"                  \
    "{\"metadata\":{\"namespace\":\"default\"}}," GOOD(                                            \
        "good1",                                                                                   \
        "3") ","                                                                                   \
             "{\"metadata\":{\"name\":\"odd\",\"namespace\":\"default\",\"resourceVersion\":5,"    \
             "\"managedFields\":\"x\",\"finalizers\":{\"a\":1},\"labels\":\"l\"}}," GOOD("good2",  \
                                                                                         "4") "]}"

static const char *const hostile_list_then_whole[] = {
    HOSTILE_LIST,
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"11\"},\"items\":[" GOOD(
        "good1", "3") "," GOOD("good2", "4") "]}",
};

static bool watching(void *ud)
{
    canned *s = ud;
    pthread_mutex_lock(&s->mu);
    bool w = s->watch_calls >= 1;
    pthread_mutex_unlock(&s->mu);
    return w;
}

static void test_list_items_of_wrong_types_are_skipped(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, hostile_list_then_whole, 2, NULL);
    run r;
    run_start(&r, &s);
    /* Synced on the partial list: what could be read is served. */
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 30 * UTIL_SECOND), 0);
    assert_true(cached(&r, "good1"));
    assert_true(cached(&r, "good2"));
    /* And it keeps running: it lists again (a skipped item may be an
     * object it would otherwise never see) and watches once a list is
     * whole. */
    assert_true(th_wait_until(watching, &s, 60 * UTIL_SECOND));
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.list_calls, 2);
    pthread_mutex_unlock(&s.mu);
    /* Five items that are no object, four objects without a name, and
     * "odd": named, but its metadata has fields of the wrong type, which
     * Go's typed decoder refuses too (kobj_check). */
    assert_true(malformed(&r) == 10);
    assert_false(cached(&r, "odd"));
    assert_int_equal(kube_informer_count(r.inf), 2);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.adds, 2);
    pthread_mutex_unlock(&r.mu);
    run_stop(&r);
    canned_stop(&s);
}

static const char *const not_a_list_then_good[] = {
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"9\"},\"items\":\"nope\"}",
    "{\"kind\":\"ConfigMapList\",\"metadata\":\"x\",\"items\":{\"a\":1}}",
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[" GOOD(
        "good1", "3") "]}",
};

static void test_list_whose_items_is_no_array_is_a_failed_list(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, not_a_list_then_good, 3, NULL);
    run r;
    run_start(&r, &s);
    /* The informer retries the list (backing off) until an answer is one. */
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 60 * UTIL_SECOND), 0);
    assert_true(cached(&r, "good1"));
    assert_int_equal(kube_informer_count(r.inf), 1);
    pthread_mutex_lock(&s.mu);
    assert_true(s.list_calls >= 3);
    pthread_mutex_unlock(&s.mu);
    run_stop(&r);
    canned_stop(&s);
}

#define ONE_GOOD                                                                                   \
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":[" GOOD(      \
        "good1", "3") "]}"

static const char *const one_good[] = {ONE_GOOD};

static const char *const one_good_then_two[] = {
    ONE_GOOD,
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"20\"},\"items\":[" GOOD(
        "good1", "3") "," GOOD("good4", "19") "]}",
};

/* A BOOKMARK's object carries no name but is an object: fine. A change
 * event without a named object ends the watch, and what follows it in the
 * stream is not applied. */
static const char hostile_events[] = "{\"type\":\"ADDED\",\"object\":" GOOD(
    "good3", "12") "}\n"
                   "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":\"x\"}}\n"
                   "{\"type\":\"MODIFIED\",\"object\":42}\n"
                   "{\"type\":\"ADDED\",\"object\":" GOOD("late", "13") "}\n";

static bool has_good4(void *ud)
{
    return cached(ud, "good4");
}

static void test_a_malformed_watch_event_ends_the_watch_and_a_relist_follows(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, one_good_then_two, 2, hostile_events);
    run r;
    run_start(&r, &s);
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 30 * UTIL_SECOND), 0);
    /* The relist after the bad event brings the server's state (good4);
     * the event after the bad one was never applied, and good3, gone from
     * that list, was taken as deleted. */
    assert_true(th_wait_until(has_good4, &r, 60 * UTIL_SECOND));
    assert_true(cached(&r, "good1"));
    assert_false(cached(&r, "late"));
    assert_false(cached(&r, "good3"));
    assert_int_equal(kube_informer_count(r.inf), 2);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.adds, 3); /* good1, good3, good4 */
    pthread_mutex_unlock(&r.mu);
    assert_true(malformed(&r) == 1);
    run_stop(&r);
    canned_stop(&s);
}

/* A type this client does not know may stand for a change: the watch ends
 * before it (its resourceVersion is not kept) and a relist follows, so
 * nothing after it is applied from this stream. */
static const char unknown_type_events[] = "{\"type\":\"ADDED\",\"object\":" GOOD(
    "good3", "12") "}\n"
                   "{\"type\":\"CHANGED\",\"object\":" GOOD(
                       "other", "13") "}\n"
                                      "{\"type\":\"ADDED\",\"object\":" GOOD("late", "14") "}\n";

static void test_an_unknown_watch_event_type_ends_the_watch_and_a_relist_follows(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, one_good_then_two, 2, unknown_type_events);
    run r;
    run_start(&r, &s);
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 30 * UTIL_SECOND), 0);
    assert_true(th_wait_until(has_good4, &r, 60 * UTIL_SECOND));
    assert_true(cached(&r, "good1"));
    assert_false(cached(&r, "other"));
    assert_false(cached(&r, "late"));
    assert_false(cached(&r, "good3"));
    pthread_mutex_lock(&s.mu);
    assert_int_equal(s.list_calls, 2);
    pthread_mutex_unlock(&s.mu);
    assert_true(malformed(&r) == 1);
    run_stop(&r);
    canned_stop(&s);
}

/* The first list lies about good1's data at resourceVersion 3; the watch
 * then fails, and the second list tells the truth at the same version. */
static const char *const corrupt_then_true[] = {
    "{\"kind\":\"ConfigMapList\",\"metadata\":{\"resourceVersion\":\"10\"},\"items\":["
    "{\"metadata\":{\"name\":\"good1\",\"namespace\":\"default\",\"resourceVersion\":\"3\"},"
    "\"data\":{\"v\":\"corrupted\"}}]}",
    ONE_GOOD,
};

static const char fail_watch_events[] = "{\"type\":\"MODIFIED\",\"object\":42}\n";

static bool good1_true(void *ud)
{
    run *r = ud;
    json_object *o = kube_informer_get(r->inf, "default", "good1");
    const char *v = kobj_str(kobj_get(o, "data"), "v");
    bool ok = v && strcmp(v, "1") == 0;
    json_object_put(o);
    return ok;
}

static void test_a_relist_replaces_a_corrupted_copy_of_an_unchanged_object(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, corrupt_then_true, 2, fail_watch_events);
    run r;
    run_start(&r, &s);
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 30 * UTIL_SECOND), 0);
    /* Same resourceVersion, other bytes: the list's copy wins. */
    assert_true(th_wait_until(good1_true, &r, 60 * UTIL_SECOND));
    assert_int_equal(kube_informer_count(r.inf), 1);
    pthread_mutex_lock(&r.mu);
    assert_int_equal(r.adds, 1);
    assert_int_equal(r.updates, 1);
    pthread_mutex_unlock(&r.mu);
    run_stop(&r);
    canned_stop(&s);
}

/* Peak resident memory of this process so far, in MiB. */
static long peak_rss_mib(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss / 1024;
}

static void test_answer_over_256_mib_fails_cleanly_and_memory_stays_near_the_cap(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, one_good, 1, NULL);
    s.huge_len = (size_t)1 << 30; /* offered: 1 GiB */
    kube_config *cfg = NULL;
    kube_client *kc = NULL;
    assert_int_equal(kube_config_from_file(s.kubeconfig, NULL, &cfg), 0);
    kube_client_opts co = {.user_agent = "test_kube_hostile/test", .timeout = 120 * UTIL_SECOND};
    assert_int_equal(kube_client_new(cfg, &co, &kc), 0);
    long before = peak_rss_mib();
    util_duration t0 = util_now_mono();
    kube_resp r = {0};
    int rc = kube_get(kc, "/api/v1/namespaces/default/configmaps", &r);
    long took_ms = (long)((util_now_mono() - t0) / UTIL_MS);
    long grew = peak_rss_mib() - before;
    print_message("256 MiB cap: ended after %ld ms, peak RSS grew by %ld MiB\n", took_ms, grew);
    assert_int_equal(rc, -EMSGSIZE);
    if (strstr(r.message, "the answer is over 256 MiB") == NULL)
        fail_msg("message: %s", r.message);
    assert_null(r.body);
    /* The body buffer doubles up to the cap: at most 512 MiB, far from
     * the 1 GiB the server would have sent. */
    if (grew >= 768)
        fail_msg("peak RSS grew by %ld MiB", grew);
    pthread_mutex_lock(&s.mu);
    int lists = s.list_calls;
    pthread_mutex_unlock(&s.mu);
    assert_int_equal(lists, 1); /* not retried: the answer will not shrink */
    kube_resp_clear(&r);
    kube_client_free(kc);
    kube_config_free(cfg);
    canned_stop(&s);
}

#define ENDLESS_EVENT                                                                              \
    "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"x\"},\"data\":{\"v\":\""

static int count_event(void *ud, const char *type, json_object *obj)
{
    (void)type;
    (void)obj;
    (*(int *)ud)++;
    return 0;
}

static void test_event_that_never_ends_stops_the_watch_at_16_mib(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, one_good, 1, NULL);
    s.endless = ENDLESS_EVENT;
    kube_config *cfg = NULL;
    kube_client *kc = NULL;
    assert_int_equal(kube_config_from_file(s.kubeconfig, NULL, &cfg), 0);
    kube_client_opts co = {.user_agent = "test_kube_hostile/test"};
    assert_int_equal(kube_client_new(cfg, &co, &kc), 0);
    kube_watch *w = kube_watch_new(kc);
    int events = 0;
    util_duration t0 = util_now_mono();
    int rc =
        kube_watch_run(w, "/api/v1/namespaces/default/configmaps?watch=true", count_event, &events);
    print_message("16 MiB event cap: ended after %lld ms\n",
                  (long long)((util_now_mono() - t0) / UTIL_MS));
    assert_int_equal(rc, -EMSGSIZE);
    if (strstr(util_err_last(), "an event over 16 MiB") == NULL)
        fail_msg("message: %s", util_err_last());
    assert_int_equal(events, 0);
    kube_watch_free(w);
    kube_client_free(kc);
    kube_config_free(cfg);
    canned_stop(&s);
}

static bool watched_again(void *ud)
{
    canned *s = ud;
    pthread_mutex_lock(&s->mu);
    bool again = s->watch_calls >= 2 && s->list_calls >= 2;
    pthread_mutex_unlock(&s->mu);
    return again;
}

static void test_informer_lists_and_watches_again_after_an_endless_event(void **state)
{
    (void)state;
    canned s;
    canned_start(&s, one_good, 1, NULL);
    s.endless = ENDLESS_EVENT;
    run r;
    run_start(&r, &s);
    assert_int_equal(kube_informer_wait_for_sync(r.inf, 30 * UTIL_SECOND), 0);
    /* The endless event ends its watch; the informer relists, then
     * watches again (held open by the server), still serving its cache. */
    assert_true(th_wait_until(watched_again, &s, 60 * UTIL_SECOND));
    assert_true(cached(&r, "good1"));
    assert_false(cached(&r, "x"));
    assert_int_equal(kube_informer_count(r.inf), 1);
    run_stop(&r);
    canned_stop(&s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_items_of_wrong_types_are_skipped),
        cmocka_unit_test(test_list_whose_items_is_no_array_is_a_failed_list),
        cmocka_unit_test(test_a_malformed_watch_event_ends_the_watch_and_a_relist_follows),
        cmocka_unit_test(test_an_unknown_watch_event_type_ends_the_watch_and_a_relist_follows),
        cmocka_unit_test(test_a_relist_replaces_a_corrupted_copy_of_an_unchanged_object),
        cmocka_unit_test(test_answer_over_256_mib_fails_cleanly_and_memory_stays_near_the_cap),
        cmocka_unit_test(test_event_that_never_ends_stops_the_watch_at_16_mib),
        cmocka_unit_test(test_informer_lists_and_watches_again_after_an_endless_event),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
