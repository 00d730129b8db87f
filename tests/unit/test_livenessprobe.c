/*
 * Unit tests for livenessprobe's rules: the flags with upstream's defaults
 * and exclusions, the /healthz answer for each way a probe ends, the
 * metrics' names and labels, and one probe against an in-process driver
 * (the socket file checked, UNAVAILABLE retried within the timeout, the
 * answer's deadline wording). Every table row is one rule and names it; a
 * failing row prints its name.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "livenessprobe/livenessprobe.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- flags ------------------------------------------------------------------------ */

static void test_flag_defaults_as_upstream(void **state)
{
    (void)state;
    util_flags *f = util_flags_new("livenessprobe", "v");
    lp_flags fl;
    assert_int_equal(lp_flags_add(f, &fl), 0);
    assert_int_equal(fl.probe_timeout, 3 * UTIL_SECOND);
    assert_string_equal(fl.csi_address, "/run/csi/socket");
    assert_string_equal(fl.health_port, "9808");
    assert_string_equal(fl.metrics_address, "");
    assert_string_equal(fl.http_endpoint, "");
    assert_string_equal(fl.metrics_path, "/metrics");
    assert_false(fl.automaxprocs);
    lp_config cfg;
    assert_int_equal(lp_flags_check(&fl, &cfg), 0);
    assert_string_equal(cfg.http_addr, "0.0.0.0:9808");
    assert_string_equal(cfg.http_flag, "health-port");
    assert_null(cfg.metrics_path);
    assert_null(cfg.metrics_addr);
    assert_string_equal(cfg.socket_path, "/run/csi/socket");
    lp_config_clear(&cfg);
    util_flags_free(f);
}

struct flag_row {
    const char *name;
    const char *args[6];
    int rc;
    const char *msg;          /* part of the error */
    const char *addr;         /* where /healthz is served */
    const char *metrics_path; /* beside /healthz */
    const char *metrics_addr; /* own server */
    const char *socket;
};

static const struct flag_row flag_rows[] = {
    {"--health-port moves /healthz to every IPv4 interface",
     {"--health-port=9999"},
     0,
     NULL,
     "0.0.0.0:9999",
     NULL,
     NULL,
     "/run/csi/socket"},
    {"--http-endpoint replaces --health-port and adds the metrics",
     {"--http-endpoint=127.0.0.1:9808"},
     0,
     NULL,
     "127.0.0.1:9808",
     "/metrics",
     NULL,
     NULL},
    {"--metrics-path moves the metrics",
     {"--http-endpoint=:9808", "--metrics-path=/m"},
     0,
     NULL,
     ":9808",
     "/m",
     NULL,
     NULL},
    {"an explicit --health-port=9808 beside --http-endpoint is accepted (upstream compares values)",
     {"--health-port=9808", "--http-endpoint=:8080"},
     0,
     NULL,
     ":8080",
     "/metrics",
     NULL,
     NULL},
    {"another --health-port beside --http-endpoint is refused",
     {"--health-port=9809", "--http-endpoint=:8080"},
     -EINVAL,
     "Only one of `--health-port` and `--http-endpoint` can be explicitly set",
     NULL,
     NULL,
     NULL,
     NULL},
    {"--metrics-address beside --http-endpoint is refused",
     {"--metrics-address=:8080", "--http-endpoint=:9808"},
     -EINVAL,
     "Only one of `--metrics-address` and `--http-endpoint` can be explicitly set",
     NULL,
     NULL,
     NULL,
     NULL},
    {"--metrics-address gets a server of its own; /healthz stays on --health-port",
     {"--metrics-address=:8080"},
     0,
     NULL,
     "0.0.0.0:9808",
     NULL,
     ":8080",
     NULL},
    {"--csi-address takes unix:// too",
     {"--csi-address=unix:///csi/csi.sock"},
     0,
     NULL,
     "0.0.0.0:9808",
     NULL,
     NULL,
     "/csi/csi.sock"},
    {"a --csi-address that is no unix socket path is refused, naming the flag",
     {"--csi-address=localhost:10000"},
     -EINVAL,
     "csi-address",
     NULL,
     NULL,
     NULL,
     NULL},
    {"a --health-port that is no port is refused at start",
     {"--health-port=http"},
     -EINVAL,
     "--health-port: \"http\" is not a port number",
     NULL,
     NULL,
     NULL,
     NULL},
    {"a --health-port above 65535 is refused",
     {"--health-port=65536"},
     -EINVAL,
     "is not a port number",
     NULL,
     NULL,
     NULL,
     NULL},
    {"--probe-timeout=0 would fail every probe: refused",
     {"--probe-timeout=0"},
     -EINVAL,
     "--probe-timeout must be greater than 0 (got 0s)",
     NULL,
     NULL,
     NULL,
     NULL},
    {"a negative --probe-timeout is refused",
     {"--probe-timeout=-1s"},
     -EINVAL,
     "--probe-timeout must be greater than 0",
     NULL,
     NULL,
     NULL,
     NULL},
    {"a --metrics-path without / cannot be served",
     {"--http-endpoint=:9808", "--metrics-path=metrics"},
     -EINVAL,
     "--metrics-path: \"metrics\" must start with /",
     NULL,
     NULL,
     NULL,
     NULL},
    {"a --metrics-path of /healthz would hide the health check",
     {"--http-endpoint=:9808", "--metrics-path=/healthz"},
     -EINVAL,
     "/healthz is the health check's path",
     NULL,
     NULL,
     NULL,
     NULL},
    {"--metrics-path is not checked where no metrics are served",
     {"--metrics-path=metrics"},
     0,
     NULL,
     "0.0.0.0:9808",
     NULL,
     NULL,
     NULL},
};

static void same(const char *row, const char *what, const char *got, const char *want)
{
    if (!want)
        return;
    if (!got || strcmp(got, want) != 0)
        fail_msg("[%s] %s %s, want %s", row, what, got ? got : "(none)", want);
}

static void test_flag_rules_as_upstream(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(flag_rows); i++) {
        const struct flag_row *r = &flag_rows[i];
        util_flags *f = util_flags_new("livenessprobe", "v");
        lp_flags fl;
        assert_int_equal(lp_flags_add(f, &fl), 0);
        char *argv[8] = {(char *)"livenessprobe"};
        int argc = 1;
        for (int k = 0; r->args[k]; k++)
            argv[argc++] = (char *)r->args[k];
        if (util_flags_parse(f, argc, argv, NULL) != 0)
            fail_msg("[%s] does not parse: %s", r->name, util_err_last());
        lp_config cfg;
        int rc = lp_flags_check(&fl, &cfg);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        if (r->msg && !strstr(util_err_last(), r->msg))
            fail_msg("[%s] message \"%s\" lacks \"%s\"", r->name, util_err_last(), r->msg);
        if (rc == 0) {
            same(r->name, "address", cfg.http_addr, r->addr);
            if ((r->metrics_path == NULL) != (cfg.metrics_path == NULL))
                fail_msg("[%s] metrics beside /healthz: %s", r->name,
                         cfg.metrics_path ? cfg.metrics_path : "none");
            same(r->name, "metrics path", cfg.metrics_path, r->metrics_path);
            if ((r->metrics_addr == NULL) != (cfg.metrics_addr == NULL))
                fail_msg("[%s] metrics server: %s", r->name,
                         cfg.metrics_addr ? cfg.metrics_addr : "none");
            same(r->name, "metrics address", cfg.metrics_addr, r->metrics_addr);
            same(r->name, "socket", cfg.socket_path, r->socket);
        }
        lp_config_clear(&cfg);
        util_flags_free(f);
    }
}

/* ---- answers ----------------------------------------------------------------------- */

struct answer_row {
    const char *name;
    lp_outcome o;
    int st_code;
    const char *st_msg;
    int code;
    const char *body;
};

static const struct answer_row answer_rows[] = {
    {"ready: 200 ok", LP_READY, CSI_OK, "", 200, "ok"},
    {"not ready: 500 with upstream's sentence", LP_NOT_READY, CSI_OK, "", 500,
     "driver responded but is not ready"},
    {"a driver error: 500 with grpc-go's wording", LP_CALL_FAILED, CSI_INTERNAL, "disk on fire",
     500, "rpc error: code = Internal desc = disk on fire"},
    {"FAILED_PRECONDITION is named as grpc-go names it", LP_CALL_FAILED, CSI_FAILED_PRECONDITION,
     "x", 500, "rpc error: code = FailedPrecondition desc = x"},
    {"our deadline is worded as grpc-go's expired context", LP_CALL_FAILED, CSI_DEADLINE_EXCEEDED,
     "Deadline Exceeded", 500,
     "rpc error: code = DeadlineExceeded desc = context deadline exceeded"},
    {"a driver's own DEADLINE_EXCEEDED keeps its message", LP_CALL_FAILED, CSI_DEADLINE_EXCEEDED,
     "backend slow", 500, "rpc error: code = DeadlineExceeded desc = backend slow"},
    {"an unavailable driver: its status", LP_CALL_FAILED, CSI_UNAVAILABLE, "Connection refused",
     500, "rpc error: code = Unavailable desc = Connection refused"},
    {"unreachable: upstream's dial timeout text", LP_UNREACHABLE, CSI_UNAVAILABLE,
     "socket /x does not exist", 500, "context deadline exceeded"},
};

static void test_answer_text_and_code_as_upstream(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(answer_rows); i++) {
        const struct answer_row *r = &answer_rows[i];
        csi_status st;
        csi_status_set(&st, r->st_code, "%s", r->st_msg);
        int code = 0;
        char *body = NULL;
        lp_answer(r->o, &st, &code, &body);
        if (code != r->code || strcmp(body, r->body) != 0)
            fail_msg("[%s] %d \"%s\", want %d \"%s\"", r->name, code, body, r->code, r->body);
        free(body);
    }
}

/* ---- metrics ----------------------------------------------------------------------- */

static void test_metrics_names_and_labels_as_upstream(void **state)
{
    (void)state;
    obs_registry *reg = obs_registry_new();
    lp_metrics m;
    assert_int_equal(lp_metrics_register(reg, 1700000000.5, &m), 0);
    lp_metrics_observe(&m, NULL, "/csi.v1.Identity/GetPluginInfo", CSI_OK, 2 * UTIL_MS);
    lp_metrics_observe(&m, "d.example.com", "/csi.v1.Identity/Probe", CSI_DEADLINE_EXCEEDED,
                       UTIL_SECOND);
    char *text = obs_registry_render(reg, NULL);
    static const char *const want[] = {
        "# TYPE csi_sidecar_operations_seconds histogram",
        "csi_sidecar_operations_seconds_count{driver_name=\"unknown-driver\",grpc_status_code="
        "\"OK\",method_name=\"/csi.v1.Identity/GetPluginInfo\"} 1",
        "csi_sidecar_operations_seconds_bucket{driver_name=\"d.example.com\",grpc_status_code="
        "\"DeadlineExceeded\",method_name=\"/csi.v1.Identity/Probe\",le=\"1\"} 1",
        "# TYPE process_start_time_seconds gauge",
        "process_start_time_seconds 1.7000000005e+09",
    };
    for (size_t i = 0; i < N_ROWS(want); i++)
        if (!strstr(text, want[i]))
            fail_msg("metrics lack\n  %s\nin\n%s", want[i], text);
    free(text);
    obs_registry_free(reg);
}

/* ---- one probe against an in-process driver ------------------------------------------ */

struct drv {
    atomic_int
        mode; /* 0 ready, 1 not ready, 2 INTERNAL, 3 slow, 4 UNAVAILABLE once, 5 UNAVAILABLE */
    atomic_int calls;
};

static void probe_handler(void *ud, const char *method, const ProtobufCMessage *req,
                          csi_reply *reply)
{
    (void)req;
    struct drv *d = ud;
    int n = atomic_fetch_add(&d->calls, 1);
    if (strcmp(method, "GetPluginInfo") == 0 || strstr(method, "GetPluginInfo")) {
        Csi__V1__GetPluginInfoResponse r = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
        r.name = (char *)"d.example.com";
        r.vendor_version = (char *)"1";
        csi_reply_ok(reply, &r.base);
        return;
    }
    Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
    Csi__V1__ProbeResponse r = CSI__V1__PROBE_RESPONSE__INIT;
    switch (atomic_load(&d->mode)) {
    case 1:
        r.ready = &ready; /* value 0 */
        break;
    case 2:
        csi_reply_error(reply, CSI_INTERNAL, "disk on fire");
        return;
    case 3:
        util_sleep(500 * UTIL_MS);
        break;
    case 4:
        if (n < 1) {
            csi_reply_error(reply, CSI_UNAVAILABLE, "warming up");
            return;
        }
        break;
    case 5:
        csi_reply_error(reply, CSI_UNAVAILABLE, "overloaded");
        return;
    default:
        break; /* readiness unset: ready */
    }
    csi_reply_ok(reply, &r.base);
}

static void test_probe_against_a_driver(void **state)
{
    (void)state;
    /* removed at exit, also when a row fails half-way */
    char *sock = util_asprintf("%s/csi.sock", th_tmpdir());
    struct drv d = {0};
    csi_server *srv = NULL;
    csi_server_opts so = {.threads = 2};
    assert_int_equal(csi_server_new(sock, &so, &srv), 0);
    assert_int_equal(csi_server_handle_all(srv, &csi__v1__identity__descriptor, probe_handler, &d),
                     0);
    assert_int_equal(csi_server_start(srv), 0);
    csi_conn *c = NULL;
    csi_conn_opts co = {.connect_timeout = 5 * UTIL_SECOND};
    assert_int_equal(csi_conn_new(sock, &co, &c), 0);

    obs_registry *reg = obs_registry_new();
    lp_metrics m;
    assert_int_equal(lp_metrics_register(reg, 0, &m), 0);
    lp_probe p = {
        .csi = c, .endpoint = sock, .socket_path = sock, .driver = "d.example.com", .metrics = &m};
    /* The rows that dial afresh get a second: a dial takes a few ms plain,
     * far more under the sanitizers. */
    struct {
        const char *name;
        int mode;
        util_duration timeout;
        lp_outcome o;
        const char *body;
    } rows[] = {
        {"readiness unset counts as ready", 0, 200 * UTIL_MS, LP_READY, "ok"},
        {"ready=false", 1, 200 * UTIL_MS, LP_NOT_READY, "driver responded but is not ready"},
        {"an error", 2, 200 * UTIL_MS, LP_CALL_FAILED,
         "rpc error: code = Internal desc = disk on fire"},
        {"slower than the timeout", 3, 200 * UTIL_MS, LP_CALL_FAILED,
         "rpc error: code = DeadlineExceeded desc = context deadline exceeded"},
        {"UNAVAILABLE over the old connection is asked again over a fresh one", 4, UTIL_SECOND,
         LP_READY, "ok"},
        {"UNAVAILABLE over a fresh connection is the driver's own answer", 5, UTIL_SECOND,
         LP_CALL_FAILED, "rpc error: code = Unavailable desc = overloaded"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        atomic_store(&d.mode, rows[i].mode);
        atomic_store(&d.calls, 0);
        p.timeout = rows[i].timeout;
        lp_outcome o;
        csi_status st;
        util_duration t0 = util_now_mono();
        lp_probe_run(&p, &o, &st);
        util_duration took = util_now_mono() - t0;
        int code;
        char *body;
        lp_answer(o, &st, &code, &body);
        bool bad = o != rows[i].o || strcmp(body, rows[i].body) != 0;
        char got[CSI_STATUS_MSG_MAX + 64];
        snprintf(got, sizeof(got), "%d \"%s\"", (int)o, body);
        free(body);
        if (bad)
            fail_msg("[%s] outcome %s, want %d \"%s\"", rows[i].name, got, (int)rows[i].o,
                     rows[i].body);
        if (took > rows[i].timeout + 300 * UTIL_MS)
            fail_msg("[%s] took %lld ms, beyond the %lld ms timeout", rows[i].name,
                     (long long)(took / UTIL_MS), (long long)(rows[i].timeout / UTIL_MS));
    }

    /* The socket file removed while the connection still works: the probe
     * fails as upstream's fresh dial would. */
    atomic_store(&d.mode, 0);
    assert_int_equal(unlink(sock), 0);
    lp_outcome o;
    csi_status st;
    lp_probe_run(&p, &o, &st);
    assert_int_equal(o, LP_UNREACHABLE);
    assert_non_null(strstr(st.message, "does not exist"));

    char *text = obs_registry_render(reg, NULL);
    assert_non_null(strstr(text, "grpc_status_code=\"Internal\""));
    assert_non_null(strstr(text, "grpc_status_code=\"DeadlineExceeded\""));
    free(text);

    obs_registry_free(reg);
    lp_probe_clear(&p);
    csi_server_stop(srv, UTIL_SECOND);
    csi_server_free(srv);
    free(sock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flag_defaults_as_upstream),
        cmocka_unit_test(test_flag_rules_as_upstream),
        cmocka_unit_test(test_answer_text_and_code_as_upstream),
        cmocka_unit_test(test_metrics_names_and_labels_as_upstream),
        cmocka_unit_test(test_probe_against_a_driver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
