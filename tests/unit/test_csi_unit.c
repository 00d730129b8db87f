/*
 * Pure parts of common/csi: endpoint syntax, gRPC code names and the
 * redacting message renderer used for -v=5 logs.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "csi/csi.h"

/* ---- endpoints -------------------------------------------------------------- */

static const struct {
    const char *in;
    int want;
    const char *target;
    const char *path;
} endpoint_cases[] = {
    {"unix:///run/csi/socket", 0, "unix:///run/csi/socket", "/run/csi/socket"},
    {"/run/csi/socket", 0, "unix:///run/csi/socket", "/run/csi/socket"},
    {"/csi.sock", 0, "unix:///csi.sock", "/csi.sock"},
    {"unix://relative/socket", -EINVAL, NULL, NULL},
    {"unix:/run/csi/socket", -EINVAL, NULL, NULL},
    {"run/csi/socket", -EINVAL, NULL, NULL},
    {"", -EINVAL, NULL, NULL},
    {"/", -EINVAL, NULL, NULL},
    {"unix://", -EINVAL, NULL, NULL},
    {"tcp://127.0.0.1:10000", -EINVAL, NULL, NULL},
    {"dns:///csi", -EINVAL, NULL, NULL},
    {"/a/path/that/is/much/too/long/for/a/unix/socket/address/because/sun_path/holds/only/108/"
     "bytes/including/the/terminator",
     -EINVAL, NULL, NULL},
};

static void test_endpoint_forms_unix_url_and_absolute_path_only(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(endpoint_cases) / sizeof(endpoint_cases[0]); i++) {
        char *target = NULL, *path = NULL;
        int r = csi_endpoint_parse("csi-address", endpoint_cases[i].in, &target, &path);
        assert_int_equal(r, endpoint_cases[i].want);
        if (r == 0) {
            assert_string_equal(target, endpoint_cases[i].target);
            assert_string_equal(path, endpoint_cases[i].path);
        } else {
            assert_null(target);
            assert_non_null(strstr(util_err_last(), "--csi-address"));
        }
        free(target);
        free(path);
    }
}

static void test_endpoint_error_names_the_flag_given(void **state)
{
    (void)state;
    char *t = NULL;
    assert_int_equal(csi_endpoint_parse("kubelet-registration-path", "x", &t, NULL), -EINVAL);
    assert_non_null(strstr(util_err_last(), "--kubelet-registration-path"));
    assert_non_null(strstr(util_err_last(), "\"x\""));
}

/* ---- codes ------------------------------------------------------------------- */

static void test_code_names_round_trip_and_match_grpc(void **state)
{
    (void)state;
    static const char *want[] = {"OK",
                                 "CANCELLED",
                                 "UNKNOWN",
                                 "INVALID_ARGUMENT",
                                 "DEADLINE_EXCEEDED",
                                 "NOT_FOUND",
                                 "ALREADY_EXISTS",
                                 "PERMISSION_DENIED",
                                 "RESOURCE_EXHAUSTED",
                                 "FAILED_PRECONDITION",
                                 "ABORTED",
                                 "OUT_OF_RANGE",
                                 "UNIMPLEMENTED",
                                 "INTERNAL",
                                 "UNAVAILABLE",
                                 "DATA_LOSS",
                                 "UNAUTHENTICATED"};
    for (int c = 0; c <= CSI_UNAUTHENTICATED; c++) {
        assert_string_equal(csi_code_name(c), want[c]);
        int back = -1;
        assert_int_equal(csi_code_from_name(want[c], &back), 0);
        assert_int_equal(back, c);
    }
    static const char *go[] = {
        "OK",       "Canceled",       "Unknown",          "InvalidArgument",   "DeadlineExceeded",
        "NotFound", "AlreadyExists",  "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
        "Aborted",  "OutOfRange",     "Unimplemented",    "Internal",          "Unavailable",
        "DataLoss", "Unauthenticated"};
    for (int c = 0; c <= CSI_UNAUTHENTICATED; c++)
        assert_string_equal(csi_code_go_name(c), go[c]);
    assert_string_equal(csi_code_go_name(99), "Unknown");
    assert_string_equal(csi_code_name(17), "UNKNOWN_CODE");
    assert_string_equal(csi_code_name(-1), "UNKNOWN_CODE");
    int x;
    assert_int_equal(csi_code_from_name("not_found", &x), -EINVAL);
}

static void test_status_set_returns_remote_error_unless_ok(void **state)
{
    (void)state;
    csi_status st;
    assert_int_equal(csi_status_set(&st, CSI_OK, "fine"), 0);
    assert_int_equal(csi_status_set(&st, CSI_ABORTED, "busy %d", 7), -EREMOTEIO);
    assert_int_equal(st.code, CSI_ABORTED);
    assert_string_equal(st.message, "busy 7");
    char big[3000];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    csi_status_set(&st, CSI_INTERNAL, "%s", big);
    assert_int_equal(strlen(st.message), CSI_STATUS_MSG_MAX - 1);
}

/* ---- rendering and redaction ---------------------------------------------------- */

static void test_secrets_and_mount_flags_never_reach_the_text(void **state)
{
    (void)state;
    Csi__V1__CreateVolumeRequest__SecretsEntry s1 =
        CSI__V1__CREATE_VOLUME_REQUEST__SECRETS_ENTRY__INIT;
    s1.key = "password";
    s1.value = "hunter2";
    Csi__V1__CreateVolumeRequest__SecretsEntry *sp[] = {&s1};
    Csi__V1__CreateVolumeRequest__ParametersEntry p1 =
        CSI__V1__CREATE_VOLUME_REQUEST__PARAMETERS_ENTRY__INIT;
    p1.key = "type";
    p1.value = "gp3";
    Csi__V1__CreateVolumeRequest__ParametersEntry *pp[] = {&p1};
    char *flags[] = {"nosuid", "context=secret-label"};
    Csi__V1__VolumeCapability__MountVolume mv = CSI__V1__VOLUME_CAPABILITY__MOUNT_VOLUME__INIT;
    mv.fs_type = "ext4";
    mv.n_mount_flags = 2;
    mv.mount_flags = flags;
    Csi__V1__VolumeCapability__AccessMode am = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__INIT;
    am.mode = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
    Csi__V1__VolumeCapability cap = CSI__V1__VOLUME_CAPABILITY__INIT;
    cap.access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    cap.mount = &mv;
    cap.access_mode = &am;
    Csi__V1__VolumeCapability *caps[] = {&cap};
    Csi__V1__CapacityRange cr = CSI__V1__CAPACITY_RANGE__INIT;
    cr.required_bytes = 1073741824;
    Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
    req.name = "pvc-1";
    req.capacity_range = &cr;
    req.n_volume_capabilities = 1;
    req.volume_capabilities = caps;
    req.n_parameters = 1;
    req.parameters = pp;
    req.n_secrets = 1;
    req.secrets = sp;

    char *text = csi_msg_to_text(&req.base, 0);
    assert_null(strstr(text, "hunter2"));
    assert_null(strstr(text, "password"));
    assert_null(strstr(text, "nosuid"));
    assert_null(strstr(text, "secret-label"));
    assert_string_equal(
        text, "{\"name\":\"pvc-1\",\"capacity_range\":{\"required_bytes\":1073741824},"
              "\"volume_capabilities\":[{\"mount\":{\"fs_type\":\"ext4\",\"mount_flags\":\"***"
              "stripped***\"},\"access_mode\":{\"mode\":\"SINGLE_NODE_WRITER\"}}],"
              "\"parameters\":{\"type\":\"gp3\"},\"secrets\":\"***stripped***\"}");
    free(text);
}

static void test_every_request_type_with_secrets_is_redacted(void **state)
{
    (void)state;
    /* Each message in the proto with a `secrets` map, filled with one secret. */
    const ProtobufCMessageDescriptor *descs[] = {
        &csi__v1__create_volume_request__descriptor,
        &csi__v1__delete_volume_request__descriptor,
        &csi__v1__controller_publish_volume_request__descriptor,
        &csi__v1__controller_unpublish_volume_request__descriptor,
        &csi__v1__validate_volume_capabilities_request__descriptor,
        &csi__v1__controller_expand_volume_request__descriptor,
        &csi__v1__create_snapshot_request__descriptor,
        &csi__v1__delete_snapshot_request__descriptor,
        &csi__v1__list_snapshots_request__descriptor,
        &csi__v1__node_stage_volume_request__descriptor,
        &csi__v1__node_publish_volume_request__descriptor,
        &csi__v1__node_expand_volume_request__descriptor,
        &csi__v1__controller_modify_volume_request__descriptor,
        &csi__v1__get_snapshot_request__descriptor,
    };
    for (size_t i = 0; i < sizeof(descs) / sizeof(descs[0]); i++) {
        const ProtobufCFieldDescriptor *f =
            protobuf_c_message_descriptor_get_field_by_name(descs[i], "secrets");
        assert_non_null(f);
        /* Build a wire message with one secrets entry and decode it, so the
         * test does not depend on struct layouts. */
        uint8_t buf[64];
        size_t n = 0;
        buf[n++] = (uint8_t)((f->id << 3) | 2); /* field, length-delimited */
        const char entry[] = "\x0a\x03key\x12\x0atopsecret!";
        buf[n++] = (uint8_t)(sizeof(entry) - 1);
        memcpy(buf + n, entry, sizeof(entry) - 1);
        n += sizeof(entry) - 1;
        ProtobufCMessage *m = protobuf_c_message_unpack(descs[i], NULL, n, buf);
        assert_non_null(m);
        char *text = csi_msg_to_text(m, 0);
        assert_null(strstr(text, "topsecret"));
        assert_non_null(strstr(text, "\"secrets\":\"***stripped***\""));
        free(text);
        protobuf_c_message_free_unpacked(m, NULL);
    }
}

static void test_text_shows_oneofs_enums_wrappers_and_skips_zero_values(void **state)
{
    (void)state;
    Google__Protobuf__BoolValue ready = GOOGLE__PROTOBUF__BOOL_VALUE__INIT;
    Csi__V1__ProbeResponse pr = CSI__V1__PROBE_RESPONSE__INIT;
    char *t = csi_msg_to_text(&pr.base, 0);
    assert_string_equal(t, "{}");
    free(t);
    pr.ready = &ready;
    t = csi_msg_to_text(&pr.base, 0);
    assert_string_equal(t, "{\"ready\":{}}");
    free(t);

    Csi__V1__PluginCapability__Service svc = CSI__V1__PLUGIN_CAPABILITY__SERVICE__INIT;
    svc.type = CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE;
    Csi__V1__PluginCapability pc = CSI__V1__PLUGIN_CAPABILITY__INIT;
    pc.type_case = CSI__V1__PLUGIN_CAPABILITY__TYPE_SERVICE;
    pc.service = &svc;
    t = csi_msg_to_text(&pc.base, 0);
    assert_string_equal(t, "{\"service\":{\"type\":\"CONTROLLER_SERVICE\"}}");
    free(t);

    Csi__V1__GetPluginInfoResponse info = CSI__V1__GET_PLUGIN_INFO_RESPONSE__INIT;
    info.name = "quote\"and\\slash\n";
    t = csi_msg_to_text(&info.base, 0);
    assert_string_equal(t, "{\"name\":\"quote\\\"and\\\\slash\\u000a\"}");
    free(t);
    t = csi_msg_to_text(&info.base, 12);
    assert_int_equal(strlen(t), 12);
    assert_string_equal(t + 9, "...");
    free(t);
    /* Caps below the marker's size cut without it, never past the text. */
    static const struct {
        size_t cap;
        const char *want;
    } tiny[] = {{1, "{"}, {2, "{}"}, {3, "{}"}, {4, "{}"}};
    pr.ready = NULL;
    for (size_t i = 0; i < sizeof(tiny) / sizeof(tiny[0]); i++) {
        t = csi_msg_to_text(&pr.base, tiny[i].cap);
        assert_string_equal(t, tiny[i].want);
        free(t);
    }
    t = csi_msg_to_text(&info.base, 3);
    assert_string_equal(t, "{\"n");
    free(t);
    t = csi_msg_to_text(NULL, 0);
    assert_string_equal(t, "null");
    free(t);
}

static void test_caps_masks_from_responses(void **state)
{
    (void)state;
    Csi__V1__ControllerServiceCapability__RPC rpc =
        CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__INIT;
    rpc.type = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY;
    Csi__V1__ControllerServiceCapability cc = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__INIT;
    cc.type_case = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__TYPE_RPC;
    cc.rpc = &rpc;
    Csi__V1__ControllerServiceCapability empty = CSI__V1__CONTROLLER_SERVICE_CAPABILITY__INIT;
    Csi__V1__ControllerServiceCapability *list[] = {&cc, &empty};
    Csi__V1__ControllerGetCapabilitiesResponse r =
        CSI__V1__CONTROLLER_GET_CAPABILITIES_RESPONSE__INIT;
    r.n_capabilities = 2;
    r.capabilities = list;
    csi_caps caps = {0};
    csi_caps_from_controller(&caps, &r);
    csi_caps_from_controller(&caps, NULL);
    assert_true(
        CSI_CAP(caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__GET_CAPACITY));
    assert_false(
        CSI_CAP(caps.controller, CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__LIST_VOLUMES));
    assert_int_equal(caps.plugin, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_endpoint_forms_unix_url_and_absolute_path_only),
        cmocka_unit_test(test_endpoint_error_names_the_flag_given),
        cmocka_unit_test(test_code_names_round_trip_and_match_grpc),
        cmocka_unit_test(test_status_set_returns_remote_error_unless_ok),
        cmocka_unit_test(test_secrets_and_mount_flags_never_reach_the_text),
        cmocka_unit_test(test_every_request_type_with_secrets_is_redacted),
        cmocka_unit_test(test_text_shows_oneofs_enums_wrappers_and_skips_zero_values),
        cmocka_unit_test(test_caps_masks_from_responses),
    };
    return cmocka_run_group_tests_name("csi pure logic", tests, NULL, NULL);
}
