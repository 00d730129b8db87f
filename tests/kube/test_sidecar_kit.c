/*
 * The sidecar start-up kit: upstream's common flags and their checks, and a
 * started kit against kube-lite and the scripted CSI test server: driver
 * name, metrics on --http-endpoint (csi_sidecar_operations_seconds fed by
 * the CSI call hook), /healthz/leader-election, and leading before running.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sidecar/sidecar.h"

/* ---- flags ------------------------------------------------------------------------- */

static void test_common_flags_have_upstream_defaults(void **state)
{
    (void)state;
    util_flags *f = util_flags_new("csi-test", "v0");
    sidecar_flags sf;
    assert_int_equal(sidecar_flags_add(f, &sf,
                                       SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE |
                                           SIDECAR_FLAGS_LEADER | SIDECAR_FLAGS_HTTP),
                     0);
    char *argv[] = {"csi-test", NULL};
    assert_int_equal(util_flags_parse(f, 1, argv, NULL), 0);
    assert_int_equal(sidecar_flags_check(f, &sf), 0);
    assert_string_equal(sf.csi_address, "/run/csi/socket");
    assert_true(sf.kube_api_qps == 5);
    assert_int_equal(sf.kube_api_burst, 10);
    assert_false(sf.leader_election);
    assert_true(sf.lease_duration == 15 * UTIL_SECOND);
    assert_true(sf.renew_deadline == 10 * UTIL_SECOND);
    assert_true(sf.retry_period == 5 * UTIL_SECOND);
    assert_string_equal(sf.metrics_path, "/metrics");
    assert_null(sf.http_endpoint);
    util_flags_free(f);
}

static const struct {
    const char *why;
    const char *args[6];
    const char *error; /* NULL: accepted */
} flag_cases[] = {
    {"both http flags",
     {"--http-endpoint=:8080", "--metrics-address=:8081"},
     "only one of `--metrics-address` and `--http-endpoint` can be set."},
    {"lease not longer than renew",
     {"--leader-election", "--leader-election-lease-duration=10s",
      "--leader-election-renew-deadline=10s"},
     "--leader-election-lease-duration must be greater than --leader-election-renew-deadline"},
    {"renew too close to retry",
     {"--leader-election", "--leader-election-renew-deadline=5s",
      "--leader-election-retry-period=5s"},
     "--leader-election-renew-deadline must be greater than 1.2 x --leader-election-retry-period"},
    {"durations in Go syntax", {"--leader-election-lease-duration=1m30s", "--timeout=2s"}, NULL},
    {"bad logging format", {"--logging-format=xml"}, "--logging-format"},
    {"go flag forms", {"-v", "5", "--kube-api-qps=100.5", "-kube-api-burst=200"}, NULL},
    {"automaxprocs accepted", {"--automaxprocs"}, NULL},
};

static void test_feature_gates(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        bool a, b;       /* the values after parsing (both start false) */
        const char *err; /* NULL: accepted */
    } rows[] = {
        {"", false, false, NULL},
        {"GateA=true", true, false, NULL},
        {"GateA=true,GateB=true", true, true, NULL},
        {"GateA=true,GateA=false", false, false, NULL},
        {"Ignored=true,GateB=true", false, true, NULL},
        {"GateA", false, false, "--feature-gates: expected key=true|false"},
        {"GateA=yes", false, false, "--feature-gates: values must be true or false"},
        {"GateA=True", false, false, "--feature-gates: values must be true or false"},
        {"GateC=true", false, false, "--feature-gates: unrecognized feature gate: GateC"},
        {"gatea=true", false, false, "--feature-gates: unrecognized feature gate: gatea"},
        {",,GateB=true,", false, true, NULL},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        bool a = false, b = false;
        const sidecar_gate gates[] = {
            {"GateA", &a}, {"GateB", &b}, {"Ignored", NULL}, {NULL, NULL}};
        int rc = sidecar_gates_parse(rows[i].text, gates);
        if (rows[i].err) {
            if (rc != -EINVAL || strcmp(util_err_last(), rows[i].err) != 0)
                fail_msg("[%s] rc %d (%s), want %s", rows[i].text, rc, util_err_last(),
                         rows[i].err);
            continue;
        }
        if (rc != 0 || a != rows[i].a || b != rows[i].b)
            fail_msg("[%s] rc %d a %d b %d", rows[i].text, rc, a, b);
    }
    assert_int_equal(sidecar_gates_parse(NULL, NULL), 0);
}

static void test_common_flag_checks(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(flag_cases) / sizeof(flag_cases[0]); i++) {
        util_flags *f = util_flags_new("csi-test", "v0");
        sidecar_flags sf;
        util_duration timeout = 0;
        util_flags_duration(f, "timeout", &timeout, "per-call timeout");
        sidecar_flags_add(f, &sf,
                          SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                              SIDECAR_FLAGS_HTTP);
        char *argv[8] = {"csi-test"};
        int argc = 1;
        for (int k = 0; k < 6 && flag_cases[i].args[k]; k++)
            argv[argc++] = (char *)flag_cases[i].args[k];
        int r = util_flags_parse(f, argc, argv, NULL);
        if (r == 0)
            r = sidecar_flags_check(f, &sf);
        if (flag_cases[i].error) {
            if (r == 0)
                fail_msg("%s: accepted", flag_cases[i].why);
            if (!strstr(util_err_last(), flag_cases[i].error))
                fail_msg("%s: \"%s\" lacks \"%s\"", flag_cases[i].why, util_err_last(),
                         flag_cases[i].error);
        } else if (r != 0) {
            fail_msg("%s: %s", flag_cases[i].why, util_err_last());
        }
        util_flags_free(f);
        obs_log_set_verbosity(0);
        obs_log_set_json(false);
    }
}

/* ---- a started kit -------------------------------------------------------------------- */

static size_t collect(char *p, size_t size, size_t n, void *ud)
{
    char **buf = ud;
    size_t old = *buf ? strlen(*buf) : 0;
    char *nb = realloc(*buf, old + size * n + 1);
    if (!nb)
        return 0;
    memcpy(nb + old, p, size * n);
    nb[old + size * n] = '\0';
    *buf = nb;
    return size * n;
}

static int get(int port, const char *path, char **body)
{
    *body = NULL;
    CURL *c = curl_easy_init();
    char url[256];
    snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, body);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    long code = 0;
    if (curl_easy_perform(c) == CURLE_OK)
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
    curl_easy_cleanup(c);
    return (int)code;
}

static atomic_int ran;

static void run(void *ud)
{
    (void)ud;
    atomic_fetch_add(&ran, 1);
}

static bool has_run(void *ud)
{
    (void)ud;
    return atomic_load(&ran) > 0;
}

static const char *lock_name(void *ud, const char *driver)
{
    (void)ud;
    (void)driver;
    return "kit.test.example.com";
}

static void test_started_kit_serves_metrics_and_leads(void **state)
{
    (void)state;
    char *url = NULL, *kubeconfig = NULL;
    pid_t kl = th_kube_lite(NULL, &url, &kubeconfig);
    assert_true(kl > 0);
    char *ep = util_asprintf("unix://%s/kit.sock", th_tmpdir());
    char *server = th_build_path("tests/csi/csi_test_server");
    char *argv[] = {server, ep, NULL};
    pid_t drv = th_spawn(argv, NULL);
    assert_true(drv > 0);

    sidecar_flags sf = {.csi_address = ep,
                        .kubeconfig = kubeconfig,
                        .kube_api_qps = 50,
                        .kube_api_burst = 100,
                        .leader_election = true,
                        .leader_election_namespace = "default",
                        .lease_duration = 2 * UTIL_SECOND,
                        .renew_deadline = 1500 * UTIL_MS,
                        .retry_period = 500 * UTIL_MS,
                        .http_endpoint = "127.0.0.1:0",
                        .metrics_path = "/metrics"};
    sidecar_opts so = {.component = "csi-test",
                       .version = "v0",
                       .which = SIDECAR_FLAGS_CSI | SIDECAR_FLAGS_KUBE | SIDECAR_FLAGS_LEADER |
                                SIDECAR_FLAGS_HTTP,
                       .timeout = 5 * UTIL_SECOND,
                       .probe = true,
                       .healthz = true,
                       .release_on_exit = true,
                       .lock_name = lock_name};
    sidecar *s = NULL;
    if (sidecar_start(&sf, &so, &s) < 0)
        fail_msg("sidecar_start: %s", util_err_last());
    assert_string_equal(sidecar_driver_name(s), "test.csi.example.com");
    assert_int_equal(sidecar_serve(s, run, NULL), 0);
    assert_true(th_wait_until(has_run, NULL, 10 * UTIL_SECOND));

    /* The endpoint's port: ask the kit's own server through /metrics. */
    csi_status st;
    bool ready = false;
    assert_int_equal(csi_probe(sidecar_csi(s), UTIL_SECOND, &ready, &st), 0);
    char *body = NULL;
    int port = 0;
    port = sidecar_http_port(s);
    assert_int_equal(get(port, "/metrics", &body), 200);
    /* Labels come out sorted by name, as Go's client prints them. */
    assert_non_null(strstr(body, "csi_sidecar_operations_seconds_count{driver_name=\"test.csi."
                                 "example.com\",grpc_status_code=\"OK\",method_name=\"/csi.v1."
                                 "Identity/Probe\"}"));
    assert_non_null(strstr(body, "leader_election_master_status{name=\"kit.test.example.com\"} 1"));
    free(body);
    assert_int_equal(get(port, "/healthz/leader-election", &body), 200);
    assert_string_equal(body, "ok");
    free(body);

    assert_int_equal(get(port, "/healthz", &body), 200);
    assert_string_equal(body, "ok");
    free(body);

    sidecar_free(s);
    /* Released at exit: the lease has no holder now. */
    kube_config *cfg = NULL;
    kube_client *kc = NULL;
    assert_int_equal(kube_config_from_file(kubeconfig, NULL, &cfg), 0);
    assert_int_equal(kube_client_new(cfg, &(kube_client_opts){.user_agent = "t/1"}, &kc), 0);
    kube_resp r = {0};
    assert_int_equal(kube_get(kc,
                              "/apis/coordination.k8s.io/v1/namespaces/default/leases/"
                              "kit-test-example-com",
                              &r),
                     0);
    json_object *spec = NULL, *holder = NULL;
    json_object_object_get_ex(r.body, "spec", &spec);
    json_object_object_get_ex(spec, "holderIdentity", &holder);
    assert_string_equal(json_object_get_string(holder), "");
    kube_resp_clear(&r);
    kube_client_free(kc);
    kube_config_free(cfg);
    th_stop(drv, SIGTERM);
    th_stop(kl, SIGTERM);
    free(server);
    free(ep);
    free(url);
    free(kubeconfig);
}

int main(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_common_flags_have_upstream_defaults),
        cmocka_unit_test(test_common_flag_checks),
        cmocka_unit_test(test_feature_gates),
        cmocka_unit_test(test_started_kit_serves_metrics_and_leads),
    };
    int r = cmocka_run_group_tests_name("sidecar kit", tests, NULL, NULL);
    curl_global_cleanup();
    return r;
}
