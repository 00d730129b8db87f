/*
 * The controller machinery of common/kube against a real kube-lite:
 * informers (cache, handlers, indexes, resync, correctness under watch
 * closes and history compaction), leader election between processes, and
 * the event recorder's aggregation.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "kube/kube.h"

static char *url, *kubeconfig;
static pid_t server;
static kube_config *cfg;
static kube_client *kc;

static int start(char *const args[])
{
    server = th_kube_lite(args, &url, &kubeconfig);
    if (server <= 0)
        return -1;
    if (kube_config_from_file(kubeconfig, NULL, &cfg) < 0)
        return -1;
    kube_client_opts o = {.user_agent = "test_kube_controllers/test"};
    return kube_client_new(cfg, &o, &kc);
}

static void stop(void)
{
    kube_client_free(kc);
    kube_config_free(cfg);
    kc = NULL;
    cfg = NULL;
    if (server > 0) {
        int st = th_stop(server, SIGTERM);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
            fprintf(stderr, "kube-lite did not exit cleanly (status %d)\n", st);
    }
    server = 0;
    free(url);
    free(kubeconfig);
    url = kubeconfig = NULL;
}

static int setup_plain(void **state)
{
    (void)state;
    return start(NULL);
}

static int teardown(void **state)
{
    (void)state;
    stop();
    return 0;
}

/* One request; returns the HTTP code and (optionally) the parsed answer. */
static int http(const char *method, const char *path, const char *body, json_object **out)
{
    kube_resp r = {0};
    kube_request(kc, method, path, "application/json", body, &r);
    int code = r.code;
    if (out)
        *out = json_object_get(r.body);
    kube_resp_clear(&r);
    return code;
}

static const kube_resource CM = {"", "v1", "configmaps", "ConfigMap", true, NULL};

/* Creates or replaces ConfigMap ns/name with data.v = value and label l = label. */
static int put_cm(const char *ns, const char *name, const char *value, const char *label)
{
    char *body = util_asprintf("{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{"
                               "\"name\":\"%s\",\"namespace\":\"%s\",\"labels\":{\"l\":\"%s\"}},"
                               "\"data\":{\"v\":\"%s\"}}",
                               name, ns, label, value);
    char *coll = kube_path(&CM, ns, NULL, NULL);
    kube_resp r = {0};
    int rc = kube_request(kc, "POST", coll, "application/json", body, &r);
    if (rc < 0 && kube_is_already_exists(&r)) {
        kube_resp_clear(&r);
        char *path = kube_path(&CM, ns, name, NULL);
        char *patch = util_asprintf("{\"metadata\":{\"labels\":{\"l\":\"%s\"}},\"data\":{\"v\":"
                                    "\"%s\"}}",
                                    label, value);
        rc = kube_patch(kc, path, KUBE_PATCH_MERGE, patch, &r);
        free(patch);
        free(path);
    }
    kube_resp_clear(&r);
    free(coll);
    free(body);
    return rc;
}

static int del_cm(const char *ns, const char *name)
{
    char *path = kube_path(&CM, ns, name, NULL);
    kube_resp r = {0};
    int rc = kube_delete(kc, path, NULL, &r);
    if (rc < 0 && kube_is_not_found(&r))
        rc = 0;
    kube_resp_clear(&r);
    free(path);
    return rc;
}

static const char *jstr_path(json_object *o, const char *a, const char *b)
{
    json_object *x = NULL, *y = NULL;
    if (!json_object_object_get_ex(o, a, &x) || !json_object_object_get_ex(x, b, &y))
        return NULL;
    return json_object_get_string(y);
}

/* ---- informer basics ------------------------------------------------------------- */

struct log {
    pthread_mutex_t mu;
    int adds, updates, deletes, resyncs;
    char last[64];
};

static void on_add(void *ud, json_object *obj)
{
    struct log *l = ud;
    pthread_mutex_lock(&l->mu);
    l->adds++;
    snprintf(l->last, sizeof(l->last), "add %s", jstr_path(obj, "metadata", "name"));
    pthread_mutex_unlock(&l->mu);
}

static void on_update(void *ud, json_object *old, json_object *obj)
{
    struct log *l = ud;
    pthread_mutex_lock(&l->mu);
    const char *a = jstr_path(old, "metadata", "resourceVersion");
    const char *b = jstr_path(obj, "metadata", "resourceVersion");
    if (a && b && strcmp(a, b) == 0)
        l->resyncs++;
    else
        l->updates++;
    snprintf(l->last, sizeof(l->last), "update %s %s", jstr_path(obj, "metadata", "name"),
             jstr_path(obj, "data", "v"));
    pthread_mutex_unlock(&l->mu);
}

static void on_delete(void *ud, json_object *obj)
{
    struct log *l = ud;
    pthread_mutex_lock(&l->mu);
    l->deletes++;
    snprintf(l->last, sizeof(l->last), "delete %s", jstr_path(obj, "metadata", "name"));
    pthread_mutex_unlock(&l->mu);
}

struct want {
    struct log *l;
    int adds, updates, deletes;
};

static bool counts_reached(void *ud)
{
    struct want *w = ud;
    pthread_mutex_lock(&w->l->mu);
    bool ok = w->l->adds >= w->adds && w->l->updates >= w->updates && w->l->deletes >= w->deletes;
    pthread_mutex_unlock(&w->l->mu);
    return ok;
}

static void by_label(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    json_object *meta = NULL, *labels = NULL, *l = NULL;
    if (json_object_object_get_ex(obj, "metadata", &meta) &&
        json_object_object_get_ex(meta, "labels", &labels) &&
        json_object_object_get_ex(labels, "l", &l))
        add(ctx, json_object_get_string(l));
}

static void count_obj(void *ud, json_object *obj)
{
    (void)obj;
    (*(int *)ud)++;
}

static void test_informer_lists_then_follows_changes(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "a", "1", "x"), 0);
    assert_int_equal(put_cm("default", "b", "1", "y"), 0);
    struct log l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    kube_informer_opts o = {
        .res = &CM, .ns = "default", .handlers = {on_add, on_update, on_delete, &l}};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    assert_int_equal(kube_informer_add_index(inf, "label", by_label), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);
    assert_true(kube_informer_has_synced(inf));
    assert_int_equal(l.adds, 2);
    assert_int_equal(kube_informer_count(inf), 2);

    assert_int_equal(put_cm("default", "a", "2", "y"), 0);
    assert_int_equal(put_cm("default", "c", "1", "y"), 0);
    assert_int_equal(del_cm("default", "b"), 0);
    struct want w = {&l, 3, 1, 1};
    assert_true(th_wait_until(counts_reached, &w, 10 * UTIL_SECOND));

    json_object *a = kube_informer_get(inf, "default", "a");
    assert_non_null(a);
    assert_string_equal(jstr_path(a, "data", "v"), "2");
    assert_null(jstr_path(a, "metadata", "managedFields"));
    json_object_put(a);
    assert_null(kube_informer_get(inf, "default", "b"));
    assert_true(kube_informer_has(inf, "default", "a"));
    assert_false(kube_informer_has(inf, "default", "b"));
    assert_false(kube_informer_has(inf, "other", "a"));
    int n = 0;
    assert_int_equal(kube_informer_by_index(inf, "label", "y", count_obj, &n), 0);
    assert_int_equal(n, 2); /* a (moved to y) and c */
    n = 0;
    assert_int_equal(kube_informer_by_index(inf, "label", "x", count_obj, &n), 0);
    assert_int_equal(n, 0);
    n = 0;
    kube_informer_each(inf, count_obj, &n);
    assert_int_equal(n, 2);
    assert_true(kube_informer_bytes(inf) > 0);
    kube_informer_free(inf);
    del_cm("default", "a");
    del_cm("default", "c");
}

static bool resynced(void *ud)
{
    struct log *l = ud;
    pthread_mutex_lock(&l->mu);
    bool ok = l->resyncs >= 2;
    pthread_mutex_unlock(&l->mu);
    return ok;
}

static void test_informer_resync_replays_updates_without_changes(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "r", "1", "x"), 0);
    struct log l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    kube_informer_opts o = {.res = &CM,
                            .ns = "default",
                            .resync = 300 * UTIL_MS,
                            .handlers = {on_add, on_update, on_delete, &l}};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);
    assert_true(th_wait_until(resynced, &l, 10 * UTIL_SECOND));
    assert_int_equal(l.updates, 0);
    kube_informer_free(inf);
    del_cm("default", "r");
}

static void slim_drop_data(void *ud, json_object *obj)
{
    (void)ud;
    json_object_object_del(obj, "data");
}

static void test_informer_transform_slims_what_is_cached(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "t", "big-value", "x"), 0);
    kube_informer_opts o = {.res = &CM, .ns = "default", .transform = slim_drop_data};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);
    json_object *t = kube_informer_get(inf, "default", "t");
    assert_non_null(t);
    assert_false(json_object_object_get_ex(t, "data", NULL));
    json_object_put(t);
    kube_informer_free(inf);
    del_cm("default", "t");
}

/* Keeps config maps whose data.v is not "skip". */
static bool keep_unskipped(void *ud, const json_object *obj)
{
    (void)ud;
    const char *v = jstr_path((json_object *)obj, "data", "v");
    return !v || strcmp(v, "skip") != 0;
}

static void test_informer_keep_filters_what_is_cached(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "k1", "1", "x"), 0);
    assert_int_equal(put_cm("default", "k2", "skip", "x"), 0);
    struct log l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    kube_informer_opts o = {.res = &CM,
                            .ns = "default",
                            .keep = keep_unskipped,
                            .handlers = {on_add, on_update, on_delete, &l}};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);
    /* Only k1 was cached and announced. */
    assert_int_equal(kube_informer_count(inf), 1);
    assert_int_equal(l.adds, 1);
    json_object *k2 = kube_informer_get(inf, "default", "k2");
    assert_null(k2);

    /* k1 stops passing: it leaves the cache with an on_delete call; k2
     * starts passing: it arrives as an add. */
    assert_int_equal(put_cm("default", "k1", "skip", "x"), 0);
    assert_int_equal(put_cm("default", "k2", "2", "x"), 0);
    struct want w = {&l, 2, 0, 1};
    assert_true(th_wait_until(counts_reached, &w, 10 * UTIL_SECOND));
    assert_int_equal(l.updates, 0);
    json_object *k1 = kube_informer_get(inf, "default", "k1");
    assert_null(k1);
    assert_false(kube_informer_has(inf, "default", "k1"));
    assert_true(kube_informer_has(inf, "default", "k2"));
    k2 = kube_informer_get(inf, "default", "k2");
    assert_non_null(k2);
    assert_string_equal(jstr_path(k2, "data", "v"), "2");
    json_object_put(k2);
    assert_int_equal(kube_informer_count(inf), 1);

    /* Deleting an object that never passed calls nothing. */
    assert_int_equal(put_cm("default", "k3", "skip", "x"), 0);
    assert_int_equal(del_cm("default", "k3"), 0);
    assert_int_equal(del_cm("default", "k2"), 0);
    struct want w2 = {&l, 2, 0, 2};
    assert_true(th_wait_until(counts_reached, &w2, 10 * UTIL_SECOND));
    pthread_mutex_lock(&l.mu);
    assert_int_equal(l.deletes, 2);
    assert_int_equal(l.adds, 2);
    pthread_mutex_unlock(&l.mu);
    assert_int_equal(kube_informer_count(inf), 0);
    kube_informer_free(inf);
    del_cm("default", "k1");
}

/* ---- informer under faults --------------------------------------------------------- */

#define N_KEYS 100
#define N_OPS  10000

struct final {
    pthread_mutex_t mu;
    char value[N_KEYS][16]; /* last value a handler saw per key, "" after delete */
};

static int key_of(json_object *obj)
{
    const char *name = jstr_path(obj, "metadata", "name");
    return name ? atoi(name + 1) : -1;
}

static void f_add(void *ud, json_object *obj)
{
    struct final *f = ud;
    int k = key_of(obj);
    pthread_mutex_lock(&f->mu);
    snprintf(f->value[k], sizeof(f->value[k]), "%s", jstr_path(obj, "data", "v"));
    pthread_mutex_unlock(&f->mu);
}

static void f_update(void *ud, json_object *old, json_object *obj)
{
    (void)old;
    f_add(ud, obj);
}

static void f_delete(void *ud, json_object *obj)
{
    struct final *f = ud;
    int k = key_of(obj);
    pthread_mutex_lock(&f->mu);
    f->value[k][0] = '\0';
    pthread_mutex_unlock(&f->mu);
}

struct converge {
    kube_informer *inf;
    struct final *f;
    char truth[N_KEYS][16];
};

static bool converged(void *ud)
{
    struct converge *c = ud;
    for (int k = 0; k < N_KEYS; k++) {
        char name[16];
        snprintf(name, sizeof(name), "k%d", k);
        json_object *o = kube_informer_get(c->inf, "faults", name);
        const char *v = o ? jstr_path(o, "data", "v") : "";
        bool same = strcmp(v ? v : "", c->truth[k]) == 0;
        json_object_put(o);
        pthread_mutex_lock(&c->f->mu);
        same = same && strcmp(c->f->value[k], c->truth[k]) == 0;
        pthread_mutex_unlock(&c->f->mu);
        if (!same)
            return false;
    }
    return true;
}

static void test_informer_converges_under_watch_closes_and_compaction(void **state)
{
    (void)state;
    http("POST", "/api/v1/namespaces", "{\"metadata\":{\"name\":\"faults\"}}", NULL);
    struct final f = {.mu = PTHREAD_MUTEX_INITIALIZER};
    kube_informer_opts o = {
        .res = &CM, .ns = "faults", .handlers = {f_add, f_update, f_delete, &f}};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);

    struct converge c = {.inf = inf, .f = &f};
    unsigned seed = 42;
    util_duration next_compact = util_now_mono() + UTIL_SECOND;
    for (int i = 0; i < N_OPS; i++) {
        int k = (int)(rand_r(&seed) % N_KEYS);
        char name[16], value[16];
        snprintf(name, sizeof(name), "k%d", k);
        if (rand_r(&seed) % 4 == 0) {
            assert_int_equal(del_cm("faults", name), 0);
            c.truth[k][0] = '\0';
        } else {
            snprintf(value, sizeof(value), "%d", i);
            assert_int_equal(put_cm("faults", name, value, "x"), 0);
            snprintf(c.truth[k], sizeof(c.truth[k]), "%s", value);
        }
        if (util_now_mono() > next_compact) {
            http("POST", "/kube-lite/compact", "{}", NULL);
            next_compact = util_now_mono() + UTIL_SECOND;
        }
    }
    assert_true(th_wait_until(converged, &c, 30 * UTIL_SECOND));
    kube_informer_free(inf);
}

static int setup_faults(void **state)
{
    (void)state;
    char *args[] = {"--watch-close-after=1s", "--history=200", NULL};
    return start(args);
}

/* ---- leader election ----------------------------------------------------------------- */

struct candidate {
    pid_t pid;
    char *out;
};

static struct candidate candidate(const char *lock, const char *id, bool release)
{
    struct candidate c;
    c.out = util_asprintf("%s/%s.out", th_tmpdir(), id);
    char *bin = th_build_path("tests/kube/leader_candidate");
    char *cmd = util_asprintf("exec '%s' '%s' '%s' '%s' %s > '%s'", bin, kubeconfig, lock, id,
                              release ? "release" : "", c.out);
    char *argv[] = {"/bin/sh", "-c", cmd, NULL};
    c.pid = th_spawn(argv, NULL);
    free(cmd);
    free(bin);
    return c;
}

static bool says_leading(void *ud)
{
    struct candidate *c = ud;
    FILE *f = fopen(c->out, "r");
    char line[128] = "";
    bool yes = false;
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, "LEADING", 7) == 0)
            yes = true;
    if (f)
        fclose(f);
    return yes;
}

static char *lease_holder(const char *name)
{
    char *path = kube_path(&KUBE_LEASE, "default", name, NULL);
    json_object *o = NULL;
    http("GET", path, NULL, &o);
    free(path);
    const char *h = jstr_path(o, "spec", "holderIdentity");
    char *out = util_strdup(h ? h : "");
    json_object_put(o);
    return out;
}

static void leader_case(bool release, int sig, util_duration bound)
{
    const char *lock = release ? "release.csi.example.com" : "kill.csi.example.com";
    char *lease = kube_leader_lease_name(lock);
    struct candidate a = candidate(lock, release ? "ra" : "ka", release);
    assert_true(th_wait_until(says_leading, &a, 10 * UTIL_SECOND));
    struct candidate b = candidate(lock, release ? "rb" : "kb", release);
    util_sleep(1500 * UTIL_MS);
    assert_false(says_leading(&b)); /* one leader at a time */
    char *holder = lease_holder(lease);
    assert_string_equal(holder, release ? "ra" : "ka");
    free(holder);
    util_duration t0 = util_now_mono();
    th_stop(a.pid, sig);
    assert_true(th_wait_until(says_leading, &b, 20 * UTIL_SECOND));
    util_duration took = util_now_mono() - t0;
    fprintf(stderr, "takeover after %s: %.2f s (bound %.2f s)\n",
            sig == SIGKILL ? "SIGKILL" : "SIGTERM", (double)took / UTIL_SECOND,
            (double)bound / UTIL_SECOND);
    assert_true(took <= bound);
    holder = lease_holder(lease);
    assert_string_equal(holder, release ? "rb" : "kb");
    free(holder);
    th_stop(b.pid, SIGTERM);
    free(a.out);
    free(b.out);
    free(lease);
}

static void test_leader_killed_is_replaced_within_lease_plus_retry(void **state)
{
    (void)state;
    /* lease 2 s + retry 0.5 s, plus a second of slack for a loaded machine */
    leader_case(false, SIGKILL, 3500 * UTIL_MS);
}

static void test_leader_stopped_releases_and_is_replaced_within_a_retry(void **state)
{
    (void)state;
    leader_case(true, SIGTERM, 1500 * UTIL_MS);
}

static void test_lease_names_match_upstream(void **state)
{
    (void)state;
    static const struct {
        const char *lock, *lease;
    } cases[] = {
        {"ebs.csi.aws.com", "ebs-csi-aws-com"},
        {"external-attacher-leader-ebs.csi.aws.com", "external-attacher-leader-ebs-csi-aws-com"},
        {"hostpath.csi.k8s.io/", "hostpath-csi-k8s-io-X"},
        {"a_b", "a-b"},
        {"Mixed.Case-1", "Mixed-Case-1"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *n = kube_leader_lease_name(cases[i].lock);
        assert_string_equal(n, cases[i].lease);
        free(n);
    }
}

/* ---- events --------------------------------------------------------------------------- */

static int count_events(const char *reason, int *total_count)
{
    json_object *list = NULL;
    http("GET", "/api/v1/namespaces/default/events", NULL, &list);
    json_object *items = NULL;
    json_object_object_get_ex(list, "items", &items);
    int n = 0;
    *total_count = 0;
    for (size_t i = 0; items && i < json_object_array_length(items); i++) {
        json_object *e = json_object_array_get_idx(items, i), *r = NULL, *c = NULL;
        if (json_object_object_get_ex(e, "reason", &r) &&
            strcmp(json_object_get_string(r), reason) == 0) {
            n++;
            if (json_object_object_get_ex(e, "count", &c))
                *total_count += json_object_get_int(c);
        }
    }
    json_object_put(list);
    return n;
}

static void test_events_aggregate_repeats_into_one_object(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "ev", "1", "x"), 0);
    json_object *cm = NULL;
    http("GET", "/api/v1/namespaces/default/configmaps/ev", NULL, &cm);
    kube_recorder *r = kube_recorder_new(kc, "test-component", "test-host");
    for (int i = 0; i < 3; i++)
        kube_event(r, cm, "Warning", "ProvisioningFailed", "failed: %s", "no space");
    kube_event(r, cm, "Normal", "Provisioning", "External provisioner is provisioning volume");
    kube_recorder_free(r, 10 * UTIL_SECOND);
    int total = 0;
    assert_int_equal(count_events("ProvisioningFailed", &total), 1);
    assert_int_equal(total, 3);
    assert_int_equal(count_events("Provisioning", &total), 1);
    assert_int_equal(total, 1);

    json_object *list = NULL;
    http("GET", "/api/v1/namespaces/default/events", NULL, &list);
    json_object *items = NULL;
    json_object_object_get_ex(list, "items", &items);
    json_object *e = json_object_array_get_idx(items, 0);
    assert_string_equal(jstr_path(e, "involvedObject", "kind"), "ConfigMap");
    assert_string_equal(jstr_path(e, "involvedObject", "name"), "ev");
    assert_string_equal(jstr_path(e, "involvedObject", "uid"), jstr_path(cm, "metadata", "uid"));
    assert_string_equal(jstr_path(e, "source", "component"), "test-component");
    json_object_put(list);
    json_object_put(cm);
}

static void test_events_beyond_the_burst_are_dropped_not_blocking(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "spam", "1", "x"), 0);
    json_object *cm = NULL;
    http("GET", "/api/v1/namespaces/default/configmaps/spam", NULL, &cm);
    kube_recorder *r = kube_recorder_new(kc, "test-component", NULL);
    util_duration t0 = util_now_mono();
    for (int i = 0; i < 200; i++)
        kube_event(r, cm, "Normal", "Spam", "message %d", i);
    /* Queuing never waits on the API. */
    assert_true(util_now_mono() - t0 < 2 * UTIL_SECOND);
    kube_recorder_free(r, 20 * UTIL_SECOND);
    int total = 0;
    assert_int_equal(count_events("Spam", &total), 25);
    json_object_put(cm);
}

/* Tests only (events.c): how long the writer waits before it leaves. */
void kube_recorder__set_idle_exit(kube_recorder *r, util_duration d);

/* Polls (up to ~20 s) until `reason` names `want` Events. */
static int wait_events(const char *reason, int want)
{
    int total = 0, n = 0;
    for (int i = 0; i < 2000 && (n = count_events(reason, &total)) != want; i++)
        util_sleep(10 * UTIL_MS);
    return n;
}

/* Polls (up to ~20 s) until no thread is named "events". */
static int wait_no_writer(void)
{
    int n = th_threads_named("events", NULL);
    for (int i = 0; i < 2000 && n != 0; i++) {
        util_sleep(10 * UTIL_MS);
        n = th_threads_named("events", NULL);
    }
    return n;
}

/* The writer thread leaves once nothing came for a while (its malloc cache
 * goes with it); the next event starts another, and an event queued just
 * before the recorder is freed is still written. */
static void test_events_writer_leaves_when_idle_and_comes_back_for_the_next(void **state)
{
    (void)state;
    assert_int_equal(put_cm("default", "quiet", "1", "x"), 0);
    json_object *cm = NULL;
    http("GET", "/api/v1/namespaces/default/configmaps/quiet", NULL, &cm);
    assert_int_equal(wait_no_writer(), 0); /* no recorder of an earlier test is left */
    kube_recorder *r = kube_recorder_new(kc, "test-component", NULL);
    assert_int_equal(th_threads_named("events", NULL), 0); /* started by the first event */
    kube_recorder__set_idle_exit(r, 100 * UTIL_MS);
    static const char *const reasons[] = {"BeforeQuiet", "AfterQuiet", "AfterQuietAgain"};
    for (size_t i = 0; i < sizeof(reasons) / sizeof(reasons[0]); i++) {
        kube_event(r, cm, "Normal", reasons[i], "event %zu", i);
        if (wait_events(reasons[i], 1) != 1)
            fail_msg("%s: not written", reasons[i]);
        assert_int_equal(wait_no_writer(), 0);
    }
    /* Queued with no writer there, then freed at once: written all the same. */
    kube_event(r, cm, "Normal", "AtTheEnd", "last");
    kube_recorder_free(r, 10 * UTIL_SECOND);
    int total = 0;
    assert_int_equal(count_events("AtTheEnd", &total), 1);
    json_object_put(cm);
}

/* Tests only (informer.c): when the watch hands over to a fresh thread. */
void kube_informer__set_handover(kube_informer *inf, util_duration quiet, size_t min_events);

/* The TID of the one thread named `name`; -1 when none or several. */
static long thread_tid(const char *name)
{
    long tid = -1;
    return th_threads_named(name, &tid) == 1 ? tid : -1;
}

/* After a burst of events and a quiet spell the watch goes on on a fresh
 * thread (the old one exits, its malloc cache with it), from where it was:
 * later changes arrive once each, and nothing is lost or replayed. */
static void test_informer_goes_on_on_a_fresh_thread_after_a_burst(void **state)
{
    (void)state;
    struct log l = {.mu = PTHREAD_MUTEX_INITIALIZER};
    kube_informer_opts o = {
        .res = &CM, .ns = "default", .handlers = {on_add, on_update, on_delete, &l}};
    kube_informer *inf = NULL;
    assert_int_equal(kube_informer_new(kc, &o, &inf), 0);
    kube_informer__set_handover(inf, 300 * UTIL_MS, 5);
    assert_int_equal(kube_informer_start(inf), 0);
    assert_int_equal(kube_informer_wait_for_sync(inf, 10 * UTIL_SECOND), 0);
    int base = l.adds;
    long first = thread_tid("watch:CM");
    assert_true(first > 0);
    for (int round = 0; round < 2; round++) {
        long before = thread_tid("watch:CM");
        for (int i = 0; i < 8; i++) {
            char name[32];
            snprintf(name, sizeof(name), "burst-%d-%d", round, i);
            assert_int_equal(put_cm("default", name, "1", "x"), 0);
        }
        struct want w = {&l, base + 8 * (round + 1), 0, 0};
        assert_true(th_wait_until(counts_reached, &w, 10 * UTIL_SECOND));
        long now = before;
        for (int i = 0; i < 2000 && (now == before || now < 0); i++) {
            util_sleep(10 * UTIL_MS);
            now = thread_tid("watch:CM");
        }
        if (now == before || now < 0)
            fail_msg("round %d: the watch thread %ld was not replaced", round, before);
    }
    /* A change after the hand-overs arrives, once; nothing came twice. */
    assert_int_equal(put_cm("default", "burst-0-0", "2", "x"), 0);
    struct want w = {&l, base + 16, 1, 0};
    assert_true(th_wait_until(counts_reached, &w, 10 * UTIL_SECOND));
    util_sleep(200 * UTIL_MS);
    pthread_mutex_lock(&l.mu);
    assert_int_equal(l.adds, base + 16);
    assert_int_equal(l.updates, 1);
    assert_int_equal(l.deletes, 0);
    pthread_mutex_unlock(&l.mu);
    assert_int_equal(kube_informer_count(inf), (size_t)base + 16);
    kube_informer_free(inf);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 8; i++) {
            char name[32];
            snprintf(name, sizeof(name), "burst-%d-%d", round, i);
            del_cm("default", name);
        }
}

int main(void)
{
    const struct CMUnitTest basics[] = {
        cmocka_unit_test(test_informer_lists_then_follows_changes),
        cmocka_unit_test(test_informer_resync_replays_updates_without_changes),
        cmocka_unit_test(test_informer_transform_slims_what_is_cached),
        cmocka_unit_test(test_informer_keep_filters_what_is_cached),
        cmocka_unit_test(test_informer_goes_on_on_a_fresh_thread_after_a_burst),
        cmocka_unit_test(test_lease_names_match_upstream),
        cmocka_unit_test(test_leader_killed_is_replaced_within_lease_plus_retry),
        cmocka_unit_test(test_leader_stopped_releases_and_is_replaced_within_a_retry),
        cmocka_unit_test(test_events_aggregate_repeats_into_one_object),
        cmocka_unit_test(test_events_beyond_the_burst_are_dropped_not_blocking),
        cmocka_unit_test(test_events_writer_leaves_when_idle_and_comes_back_for_the_next),
    };
    const struct CMUnitTest faults[] = {
        cmocka_unit_test(test_informer_converges_under_watch_closes_and_compaction),
    };
    int failed =
        cmocka_run_group_tests_name("kube informer, leader, events", basics, setup_plain, teardown);
    failed +=
        cmocka_run_group_tests_name("kube informer under faults", faults, setup_faults, teardown);
    return failed;
}
