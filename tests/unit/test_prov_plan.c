/*
 * Unit tests for the provisioner's planning core (provisioner/plan*.c),
 * checked against upstream external-provisioner v6 / lib v13 / csi-lib-utils
 * behaviour (docs: upstream-behaviour.md A1.3-A1.8). Every table row is one
 * rule and names it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable; J() turns
 * them back. Expected error texts are upstream's, byte for byte.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provisioner/provisioner.h"
#include "table.h"

/* ---- helpers ------------------------------------------------------------- */

/* rc and message of a call expected to fail (want_err != NULL) or not. */
static void expect_result(const char *row, int rc, int want_rc, const char *want_err)
{
    if (want_err == NULL) {
        if (rc != 0)
            fail_msg("[%s] unexpected error %d: %s", row, rc, util_err_last());
        return;
    }
    if (rc == 0)
        fail_msg("[%s] succeeded, want error \"%s\"", row, want_err);
    if (want_rc != 0)
        expect_int(row, "rc", rc, want_rc);
    expect_str(row, "error", util_err_last(), want_err);
}

/* The path of the first difference between two JSON values ("" if equal),
 * so a failing golden names the field instead of printing two whole PVs. */
static void json_diff(json_object *got, json_object *want, char *path, size_t len)
{
    if (json_object_equal(got, want))
        return;
    size_t n = strlen(path);
    if (json_object_is_type(got, json_type_object) && json_object_is_type(want, json_type_object)) {
        json_object_object_foreach(want, k, wv)
        {
            json_object *gv = NULL;
            if (!json_object_object_get_ex(got, k, &gv)) {
                snprintf(path + n, len - n, ".%s (missing)", k);
                return;
            }
            if (!json_object_equal(gv, wv)) {
                snprintf(path + n, len - n, ".%s", k);
                json_diff(gv, wv, path, len);
                return;
            }
        }
        json_object_object_foreach(got, gk, gv2)
        {
            (void)gv2;
            if (!json_object_object_get_ex(want, gk, NULL)) {
                snprintf(path + n, len - n, ".%s (unexpected)", gk);
                return;
            }
        }
    }
    snprintf(path + n, len - n, ": got %s want %s", json_object_to_json_string(got),
             json_object_to_json_string(want));
}

/* Collects warnings: "; "-separated. */
typedef struct warnings {
    char text[4096];
} warnings;

static void collect_warning(void *ud, const char *msg)
{
    warnings *w = ud;
    size_t n = strlen(w->text);
    snprintf(w->text + n, sizeof(w->text) - n, "%s%s", n > 0 ? "; " : "", msg);
}

#define DRIVER   "csi.example.com"
#define IDENTITY "1700000000000-42-" DRIVER
#define UID      "0a1b2c3d-4e5f-6789-abcd-ef0123456789"
#define PV_NAME  "pvc-" UID

static prov_config base_cfg(warnings *w)
{
    prov_config c = {
        .driver_name = DRIVER,
        .volume_name_prefix = "pvc",
        .volume_name_uuid_length = -1,
        .immediate_topology = true,
        .controller_service = true,
        .create_delete_volume = true,
        .create_delete_snapshot = true,
        .clone_volume = true,
        .modify_volume = true,
        .vac_enabled = true,
        .identity = IDENTITY,
    };
    if (w != NULL) {
        w->text[0] = '\0';
        c.warn = collect_warning;
        c.warn_ud = w;
    }
    return c;
}

/* "k=v,k=v | k=v" for a list of topologies. */
static char *topo_text(Csi__V1__Topology **t, size_t n)
{
    char *buf = calloc(1, 4096);
    assert_non_null(buf);
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(buf);
        snprintf(buf + len, 4096 - len, "%s", i > 0 ? " | " : "");
        for (size_t s = 0; s < t[i]->n_segments; s++) {
            len = strlen(buf);
            snprintf(buf + len, 4096 - len, "%s%s=%s", s > 0 ? "," : "", t[i]->segments[s]->key,
                     t[i]->segments[s]->value);
        }
    }
    return buf;
}

static const char *mode_name(int m)
{
    switch (m) {
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER:
        return "SINGLE_NODE_WRITER";
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY:
        return "MULTI_NODE_READER_ONLY";
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER:
        return "MULTI_NODE_MULTI_WRITER";
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER:
        return "SINGLE_NODE_SINGLE_WRITER";
    case CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER:
        return "SINGLE_NODE_MULTI_WRITER";
    default:
        return "UNKNOWN";
    }
}

/* One line describing a request, for comparing whole requests in a row:
 * name bytes caps params source mutable secrets topology. */
static char *request_text(const Csi__V1__CreateVolumeRequest *r)
{
    size_t cap = 8192;
    char *b = calloc(1, cap);
    assert_non_null(b);
#define ADD(...) snprintf(b + strlen(b), cap - strlen(b), __VA_ARGS__)
    ADD("name=%s bytes=%" PRId64 " caps=[", r->name,
        r->capacity_range != NULL ? r->capacity_range->required_bytes : -1);
    for (size_t i = 0; i < r->n_volume_capabilities; i++) {
        const Csi__V1__VolumeCapability *c = r->volume_capabilities[i];
        ADD("%s%s/", i > 0 ? " " : "", mode_name((int)c->access_mode->mode));
        if (c->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK) {
            ADD("block");
        } else {
            ADD("mount:%s:", c->mount->fs_type);
            for (size_t f = 0; f < c->mount->n_mount_flags; f++)
                ADD("%s%s", f > 0 ? "," : "", c->mount->mount_flags[f]);
        }
    }
    ADD("] params={");
    for (size_t i = 0; i < r->n_parameters; i++)
        ADD("%s%s=%s", i > 0 ? "," : "", r->parameters[i]->key, r->parameters[i]->value);
    ADD("}");
    if (r->volume_content_source != NULL) {
        if (r->volume_content_source->type_case == CSI__V1__VOLUME_CONTENT_SOURCE__TYPE_SNAPSHOT)
            ADD(" source=snapshot:%s", r->volume_content_source->snapshot->snapshot_id);
        else
            ADD(" source=volume:%s", r->volume_content_source->volume->volume_id);
    }
    if (r->n_mutable_parameters > 0) {
        ADD(" mutable={");
        for (size_t i = 0; i < r->n_mutable_parameters; i++)
            ADD("%s%s=%s", i > 0 ? "," : "", r->mutable_parameters[i]->key,
                r->mutable_parameters[i]->value);
        ADD("}");
    }
    if (r->n_secrets > 0) {
        ADD(" secrets={");
        for (size_t i = 0; i < r->n_secrets; i++)
            ADD("%s%s=%s", i > 0 ? "," : "", r->secrets[i]->key, r->secrets[i]->value);
        ADD("}");
    }
    if (r->accessibility_requirements != NULL) {
        char *req = topo_text(r->accessibility_requirements->requisite,
                              r->accessibility_requirements->n_requisite);
        char *pref = topo_text(r->accessibility_requirements->preferred,
                               r->accessibility_requirements->n_preferred);
        ADD(" requisite=[%s] preferred=[%s]", req, pref);
        free(req);
        free(pref);
    }
#undef ADD
    return b;
}

/* ---- configuration, names, classification -------------------------------- */

static void test_identity_is_unix_ms_rand_driver_and_optional_node(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *node;
        const char *want;
    } rows[] = {
        {"identity_without_node_deployment", NULL, "1700000000000-42-" DRIVER},
        {"identity_empty_node_is_no_node", "", "1700000000000-42-" DRIVER},
        {"identity_node_deployment_appends_node", "node-1", "1700000000000-42-" DRIVER "-node-1"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *got = prov_identity(1700000000000LL, 42, DRIVER, rows[i].node);
        expect_str(rows[i].name, "identity", got, rows[i].want);
        free(got);
    }
}

static void test_config_caps_follow_plugin_and_controller_capabilities(void **state)
{
    (void)state;
    csi_caps caps = {0};
    prov_config c = base_cfg(NULL);
    prov_config_set_caps(&c, &caps, true);
    assert_false(c.controller_service);
    assert_false(c.topology);
    assert_false(c.single_node_multi_writer);

    caps.plugin = 1u << CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__CONTROLLER_SERVICE |
                  1u << CSI__V1__PLUGIN_CAPABILITY__SERVICE__TYPE__VOLUME_ACCESSIBILITY_CONSTRAINTS;
    caps.controller =
        1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__CREATE_DELETE_VOLUME |
        1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__SINGLE_NODE_MULTI_WRITER |
        1u << CSI__V1__CONTROLLER_SERVICE_CAPABILITY__RPC__TYPE__MODIFY_VOLUME;
    prov_config_set_caps(&c, &caps, true);
    assert_true(c.controller_service);
    assert_true(c.topology);
    assert_true(c.create_delete_volume);
    assert_true(c.single_node_multi_writer);
    assert_true(c.modify_volume);
    assert_false(c.clone_volume);
    assert_false(c.create_delete_snapshot);

    /* The Topology gate switched off hides the plugin capability. */
    prov_config_set_caps(&c, &caps, false);
    assert_false(c.topology);
}

static void test_volume_name_follows_prefix_and_uuid_length(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *prefix;
        int len;
        const char *uid;
        const char *want;
        const char *want_err;
    } rows[] = {
        {"name_default_keeps_whole_uid", "pvc", -1, UID, "pvc-" UID, NULL},
        {"name_custom_prefix", "vol", -1, UID, "vol-" UID, NULL},
        {"name_uuid_length_drops_dashes_and_cuts", "pvc", 16, UID, "pvc-0a1b2c3d4e5f6789", NULL},
        {"name_uuid_length_32_is_whole_uid_without_dashes", "pvc", 32, UID,
         "pvc-0a1b2c3d4e5f6789abcdef0123456789", NULL},
        {"name_uuid_length_0_leaves_prefix_and_dash", "pvc", 0, UID, "pvc-", NULL},
        {"name_empty_prefix_is_error", "", -1, UID, NULL,
         "volume name prefix cannot be of length 0"},
        {"name_missing_uid_is_error", "pvc", -1, "", NULL,
         "corrupted PVC object, it is missing UID"},
        {"name_uuid_length_beyond_uid_is_error_not_panic", "pvc", 33, UID, NULL,
         "--volume-name-uuid-length 33 is out of range: the UID has 32 characters without "
         "dashes"},
        {"name_uuid_length_below_minus_one_is_error", "pvc", -2, UID, NULL,
         "--volume-name-uuid-length -2 is out of range: the UID has 32 characters without "
         "dashes"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_config c = base_cfg(NULL);
        c.volume_name_prefix = rows[i].prefix;
        c.volume_name_uuid_length = rows[i].len;
        char *got = NULL;
        int r = prov_volume_name(&c, rows[i].uid, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        expect_str(rows[i].name, "name", got, rows[i].want);
        free(got);
    }
}

static void test_classify_create_volume_errors(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int code;
        bool topo, sel;
        prov_state want;
    } rows[] = {
        {"classify_not_grpc_is_in_background", PROV_NOT_GRPC, true, true, PROV_IN_BACKGROUND},
        {"classify_cancelled_is_in_background", CSI_CANCELLED, false, false, PROV_IN_BACKGROUND},
        {"classify_deadline_is_in_background", CSI_DEADLINE_EXCEEDED, true, true,
         PROV_IN_BACKGROUND},
        {"classify_unavailable_is_in_background", CSI_UNAVAILABLE, false, false,
         PROV_IN_BACKGROUND},
        {"classify_aborted_is_in_background", CSI_ABORTED, false, false, PROV_IN_BACKGROUND},
        {"classify_exhausted_with_topology_and_node_reschedules", CSI_RESOURCE_EXHAUSTED, true,
         true, PROV_RESCHEDULE},
        {"classify_exhausted_without_topology_is_final", CSI_RESOURCE_EXHAUSTED, false, true,
         PROV_FINAL},
        {"classify_exhausted_without_selected_node_is_final", CSI_RESOURCE_EXHAUSTED, true, false,
         PROV_FINAL},
        {"classify_exhausted_with_neither_is_final", CSI_RESOURCE_EXHAUSTED, false, false,
         PROV_FINAL},
        {"classify_unknown_is_final", CSI_UNKNOWN, true, true, PROV_FINAL},
        {"classify_invalid_argument_is_final", CSI_INVALID_ARGUMENT, true, true, PROV_FINAL},
        {"classify_not_found_is_final", CSI_NOT_FOUND, true, true, PROV_FINAL},
        {"classify_already_exists_is_final", CSI_ALREADY_EXISTS, false, false, PROV_FINAL},
        {"classify_permission_denied_is_final", CSI_PERMISSION_DENIED, false, false, PROV_FINAL},
        {"classify_failed_precondition_is_final", CSI_FAILED_PRECONDITION, true, true, PROV_FINAL},
        {"classify_out_of_range_is_final", CSI_OUT_OF_RANGE, false, false, PROV_FINAL},
        {"classify_unimplemented_is_final", CSI_UNIMPLEMENTED, false, false, PROV_FINAL},
        {"classify_internal_is_final", CSI_INTERNAL, true, true, PROV_FINAL},
        {"classify_data_loss_is_final", CSI_DATA_LOSS, false, false, PROV_FINAL},
        {"classify_unauthenticated_is_final", CSI_UNAUTHENTICATED, false, false, PROV_FINAL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_str(rows[i].name, "state",
                   prov_state_name(prov_classify(rows[i].code, rows[i].topo, rows[i].sel)),
                   prov_state_name(rows[i].want));

    static const struct {
        const char *name;
        int code;
        bool want;
    } inf[] = {
        {"infeasible_invalid_argument_is_slow_retried", CSI_INVALID_ARGUMENT, true},
        {"infeasible_out_of_range_is_not", CSI_OUT_OF_RANGE, false},
        {"infeasible_not_found_is_not", CSI_NOT_FOUND, false},
        {"infeasible_not_grpc_is_not", PROV_NOT_GRPC, false},
    };
    for (size_t i = 0; i < N_ROWS(inf); i++)
        expect_int(inf[i].name, "infeasible", prov_is_infeasible(inf[i].code), inf[i].want);
    expect_str("infeasible_event_prefix", "prefix", PROV_INFEASIBLE_EVENT_PREFIX "x",
               "Volume provisioning failed with infeasible error. Retries will be delayed. x");
}

static void test_pvc_selected_node_and_class(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *pvc;
        const char *want_node;
        const char *want_class;
    } rows[] = {
        {"selected_node_from_ga_annotation",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`n1`}}}", "n1", ""},
        {"selected_node_falls_back_to_alpha_annotation",
         "{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/selected-node`:`n2`}}}", "n2",
         ""},
        {"selected_node_ga_annotation_wins_over_alpha",
         "{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/selected-node`:`n2`,"
         "`volume.kubernetes.io/selected-node`:`n1`}}}",
         "n1", ""},
        {"selected_node_none", "{`metadata`:{}}", NULL, ""},
        {"class_from_spec", "{`spec`:{`storageClassName`:`fast`}}", NULL, "fast"},
        {"class_beta_annotation_wins_over_spec",
         "{`metadata`:{`annotations`:{`volume.beta.kubernetes.io/storage-class`:`old`}},"
         "`spec`:{`storageClassName`:`fast`}}",
         NULL, "old"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc);
        expect_str(rows[i].name, "selected node", prov_selected_node(pvc), rows[i].want_node);
        expect_str(rows[i].name, "class", prov_pvc_class(pvc), rows[i].want_class);
        json_object_put(pvc);
    }
}

/* ---- quantities ------------------------------------------------------------ */

#define QTY_FORMAT_ERR                                                                             \
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
#define QTY_SUFFIX_ERR "unable to parse quantity's suffix"

static void test_quantity_parse_rounds_up_to_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *in;
        int64_t want;
        const char *want_err;
    } rows[] = {
        {"qty_plain_bytes", "1500", 1500, NULL},
        {"qty_zero", "0", 0, NULL},
        {"qty_leading_zeros", "00012", 12, NULL},
        {"qty_binary_ki", "1Ki", 1024, NULL},
        {"qty_binary_mi", "1536Mi", 1610612736LL, NULL},
        {"qty_binary_gi", "1Gi", 1073741824LL, NULL},
        {"qty_binary_ti", "1Ti", 1099511627776LL, NULL},
        {"qty_binary_pi", "1Pi", 1125899906842624LL, NULL},
        {"qty_binary_ei", "7Ei", 8070450532247928832LL, NULL},
        {"qty_binary_fraction", "1.5Gi", 1610612736LL, NULL},
        {"qty_binary_fraction_rounds_up", "0.3Ki", 308, NULL},
        {"qty_fraction_without_integer_part", ".5Ki", 512, NULL},
        {"qty_decimal_k", "1k", 1000, NULL},
        {"qty_decimal_m_is_mega", "2M", 2000000, NULL},
        {"qty_decimal_g", "1G", 1000000000LL, NULL},
        {"qty_decimal_t", "1T", 1000000000000LL, NULL},
        {"qty_decimal_p", "1P", 1000000000000000LL, NULL},
        {"qty_decimal_e", "1E", 1000000000000000000LL, NULL},
        {"qty_decimal_fraction", "1.5G", 1500000000LL, NULL},
        {"qty_milli_rounds_up_to_one_byte", "500m", 1, NULL},
        {"qty_milli_whole", "3000m", 3, NULL},
        {"qty_milli_rounds_up_above_whole", "1500m", 2, NULL},
        {"qty_micro_rounds_up", "1u", 1, NULL},
        {"qty_nano_rounds_up", "1n", 1, NULL},
        {"qty_exponent_lower_e", "1e3", 1000, NULL},
        {"qty_exponent_upper_e", "1E3", 1000, NULL},
        {"qty_exponent_with_plus", "1e+3", 1000, NULL},
        {"qty_exponent_negative_rounds_up", "1e-3", 1, NULL},
        {"qty_exponent_with_fraction", "1.5e3", 1500, NULL},
        {"qty_fraction_rounds_up", "2.5", 3, NULL},
        {"qty_tiny_fraction_rounds_up_to_one", "0.000000000000000000001", 1, NULL},
        {"qty_fraction_just_above_whole_rounds_up", "1.0000000001", 2, NULL},
        {"qty_trailing_dot", "5.", 5, NULL},
        {"qty_explicit_plus", "+1Gi", 1073741824LL, NULL},
        {"qty_negative_rounds_away_from_zero", "-1500m", -2, NULL},
        {"qty_int64_max_exact", "9223372036854775807", INT64_MAX, NULL},
        {"qty_just_below_max_rounds_up_to_max", "9223372036854775806.5", INT64_MAX, NULL},
        {"qty_above_int64_capped", "9223372036854775808", INT64_MAX, NULL},
        {"qty_8ei_capped", "8Ei", INT64_MAX, NULL},
        {"qty_10e_capped_where_upstream_wraps_to_0", "10E", INT64_MAX, NULL},
        {"qty_huge_exponent_capped", "1e1000", INT64_MAX, NULL},
        {"qty_huge_negative_exponent_rounds_up_to_one", "1e-1000", 1, NULL},
        {"qty_many_digits_capped", "123456789012345678901234567890", INT64_MAX, NULL},
        {"qty_suffix_without_number_is_zero_like_go", "Gi", 0, NULL},
        {"qty_bare_sign_is_zero_like_go", "-", 0, NULL},
        {"qty_empty_is_error", "", 0, QTY_FORMAT_ERR},
        {"qty_space_inside_is_error", "1 Gi", 0, QTY_FORMAT_ERR},
        {"qty_unknown_letters_after_suffix_is_error", "1GiB", 0, QTY_FORMAT_ERR},
        {"qty_letters_only_is_error", "abc", 0, QTY_FORMAT_ERR},
        {"qty_two_dots_is_error", "1.5.5", 0, QTY_FORMAT_ERR},
        {"qty_fractional_exponent_is_error", "1e3.5", 0, QTY_FORMAT_ERR},
        {"qty_capital_k_is_unknown_suffix", "1K", 0, QTY_SUFFIX_ERR},
        {"qty_lone_e_is_unknown_suffix", "1e", 0, QTY_SUFFIX_ERR},
        {"qty_gii_is_unknown_suffix", "1Gii", 0, QTY_SUFFIX_ERR},
        {"qty_double_sign_is_unknown_suffix", "--1", 0, QTY_SUFFIX_ERR},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        int64_t got = -42;
        int r = prov_quantity_parse(rows[i].in, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        if (rows[i].want_err == NULL)
            expect_int(rows[i].name, "value", got, rows[i].want);
    }
}

static void test_quantity_format_is_binary_si(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t in;
        const char *want;
    } rows[] = {
        {"fmt_zero", 0, "0"},
        {"fmt_small_plain", 999, "999"},
        {"fmt_ten", 10, "10"},
        {"fmt_hundred", 100, "100"},
        {"fmt_thousand_below_1024_is_decimal_k", 1000, "1k"},
        {"fmt_1023_plain", 1023, "1023"},
        {"fmt_1024_is_ki", 1024, "1Ki"},
        {"fmt_1500_not_a_power_of_1024", 1500, "1500"},
        {"fmt_2000_stays_plain_above_1024", 2000, "2000"},
        {"fmt_1536_plain", 1536, "1536"},
        {"fmt_500ki", 512000, "500Ki"},
        {"fmt_one_million_plain", 1000000, "1000000"},
        {"fmt_1gi", 1073741824LL, "1Gi"},
        {"fmt_1536mi", 1610612736LL, "1536Mi"},
        {"fmt_1ti", 1099511627776LL, "1Ti"},
        {"fmt_5pi", 5LL << 50, "5Pi"},
        {"fmt_1ei", 1LL << 60, "1Ei"},
        {"fmt_int64_max", INT64_MAX, "9223372036854775807"},
        {"fmt_negative_ki", -1024, "-1Ki"},
        {"fmt_negative_k", -1000, "-1k"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char buf[PROV_QUANTITY_MAX];
        prov_quantity_format(rows[i].in, buf, sizeof(buf));
        expect_str(rows[i].name, "quantity", buf, rows[i].want);
    }
}

static void test_pvc_request_bytes(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *pvc;
        int64_t want;
        const char *want_err;
    } rows[] = {
        {"request_string", "{`spec`:{`resources`:{`requests`:{`storage`:`1Gi`}}}}", 1073741824LL,
         NULL},
        {"request_spaces_trimmed", "{`spec`:{`resources`:{`requests`:{`storage`:` 2Ki `}}}}", 2048,
         NULL},
        {"request_json_number", "{`spec`:{`resources`:{`requests`:{`storage`:4096}}}}", 4096, NULL},
        {"request_missing_is_zero", "{`spec`:{`resources`:{}}}", 0, NULL},
        {"request_bad_text_is_error", "{`spec`:{`resources`:{`requests`:{`storage`:`lots`}}}}", 0,
         QTY_FORMAT_ERR},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc);
        int64_t got = -1;
        int r = prov_pvc_request_bytes(pvc, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        if (rows[i].want_err == NULL)
            expect_int(rows[i].name, "bytes", got, rows[i].want);
        json_object_put(pvc);
    }
}

/* ---- access modes ----------------------------------------------------------- */

#define RWO  "ReadWriteOnce"
#define ROX  "ReadOnlyMany"
#define RWX  "ReadWriteMany"
#define RWOP "ReadWriteOncePod"
#define M(x) CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__##x

#define RWOP_ERR                                                                                   \
    "Kubernetes does not support use of ReadWriteOncePod with other access modes on the same "     \
    "PersistentVolume"
#define ROX_RWO_ERR                                                                                \
    "CSI does not support ReadOnlyMany and ReadWriteOnce on the same PersistentVolume"

static void test_access_mode_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *modes[3];
        size_t n;
        bool snmw;
        int want;
        const char *want_err;
    } rows[] = {
        {"am_rwo_without_snmw_is_single_node_writer", {RWO}, 1, false, M(SINGLE_NODE_WRITER), NULL},
        {"am_rwo_with_snmw_is_single_node_multi_writer",
         {RWO},
         1,
         true,
         M(SINGLE_NODE_MULTI_WRITER),
         NULL},
        {"am_rwop_without_snmw_is_single_node_writer",
         {RWOP},
         1,
         false,
         M(SINGLE_NODE_WRITER),
         NULL},
        {"am_rwop_with_snmw_is_single_node_single_writer",
         {RWOP},
         1,
         true,
         M(SINGLE_NODE_SINGLE_WRITER),
         NULL},
        {"am_rox_without_snmw", {ROX}, 1, false, M(MULTI_NODE_READER_ONLY), NULL},
        {"am_rox_with_snmw", {ROX}, 1, true, M(MULTI_NODE_READER_ONLY), NULL},
        {"am_rwx_without_snmw", {RWX}, 1, false, M(MULTI_NODE_MULTI_WRITER), NULL},
        {"am_rwx_with_snmw", {RWX}, 1, true, M(MULTI_NODE_MULTI_WRITER), NULL},
        {"am_rwx_overrides_rox_and_rwo",
         {ROX, RWO, RWX},
         3,
         false,
         M(MULTI_NODE_MULTI_WRITER),
         NULL},
        {"am_rwx_overrides_rwo_with_snmw", {RWO, RWX}, 2, true, M(MULTI_NODE_MULTI_WRITER), NULL},
        {"am_rwop_twice_is_still_alone", {RWOP, RWOP}, 2, true, M(SINGLE_NODE_SINGLE_WRITER), NULL},
        {"am_rox_twice", {ROX, ROX}, 2, false, M(MULTI_NODE_READER_ONLY), NULL},
        {"am_rwop_with_rwo_is_error", {RWOP, RWO}, 2, false, 0, RWOP_ERR},
        {"am_rwop_with_rwx_is_error_rwop_checked_first", {RWX, RWOP}, 2, true, 0, RWOP_ERR},
        {"am_rwop_with_unknown_is_error", {RWOP, "Foo"}, 2, true, 0, RWOP_ERR},
        {"am_rox_with_rwo_is_error_without_snmw", {ROX, RWO}, 2, false, 0, ROX_RWO_ERR},
        {"am_rox_with_rwo_is_error_with_snmw", {RWO, ROX}, 2, true, 0, ROX_RWO_ERR},
        {"am_none_is_error", {NULL}, 0, false, 0, "unsupported AccessMode combination: []"},
        {"am_none_is_error_with_snmw",
         {NULL},
         0,
         true,
         0,
         "unsupported AccessMode combination: []"},
        {"am_unknown_is_error",
         {"ReadWriteSometimes"},
         1,
         false,
         0,
         "unsupported AccessMode combination: [ReadWriteSometimes]"},
        {"am_two_unknown_listed",
         {"A", "B"},
         2,
         true,
         0,
         "unsupported AccessMode combination: [A B]"},
        {"am_unknown_with_rwo_maps_rwo", {"Foo", RWO}, 2, false, M(SINGLE_NODE_WRITER), NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        Csi__V1__VolumeCapability__AccessMode__Mode got = M(UNKNOWN);
        int r = prov_access_mode(rows[i].modes, rows[i].n, rows[i].snmw, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        expect_str(rows[i].name, "mode", mode_name((int)got), mode_name(rows[i].want));
    }
}

/* ---- parameters ------------------------------------------------------------- */

#define FS_DEPRECATED                                                                              \
    "\"fstype\" is deprecated and will be removed in a future release, please use "                \
    "\"csi.storage.k8s.io/fstype\" instead"
#define FS_BOTH                                                                                    \
    "fstype specified in parameters with both \"fstype\" and \"csi.storage.k8s.io/fstype\" keys"

static void test_fstype_from_parameters(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *params;
        const char *deflt;
        const char *want;
        const char *want_warn;
        const char *want_err;
    } rows[] = {
        {"fs_prefixed_key", "{`csi.storage.k8s.io/fstype`:`xfs`}", NULL, "xfs", "", NULL},
        {"fs_deprecated_key_warns", "{`fstype`:`ext3`}", NULL, "ext3", FS_DEPRECATED, NULL},
        {"fs_deprecated_key_any_case_warns", "{`FsType`:`ext3`}", NULL, "ext3", FS_DEPRECATED,
         NULL},
        {"fs_both_keys_is_error", "{`fstype`:`ext3`,`csi.storage.k8s.io/fstype`:`xfs`}", NULL, NULL,
         FS_DEPRECATED, FS_BOTH},
        {"fs_two_deprecated_spellings_is_error", "{`fstype`:`ext3`,`FSTYPE`:`xfs`}", NULL, NULL,
         FS_DEPRECATED "; " FS_DEPRECATED, FS_BOTH},
        {"fs_default_when_unset", "{`type`:`gp3`}", "ext4", "ext4", "", NULL},
        {"fs_default_when_empty_value", "{`csi.storage.k8s.io/fstype`:``}", "ext4", "ext4", "",
         NULL},
        {"fs_class_wins_over_default", "{`csi.storage.k8s.io/fstype`:`xfs`}", "ext4", "xfs", "",
         NULL},
        {"fs_none_is_empty", "{}", NULL, "", "", NULL},
        {"fs_no_parameters_is_empty", NULL, "", "", "", NULL},
        {"fs_prefixed_key_is_case_sensitive", "{`csi.storage.k8s.io/FSType`:`xfs`}", "ext4", "ext4",
         "", NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        warnings w;
        prov_config c = base_cfg(&w);
        c.default_fstype = rows[i].deflt;
        json_object *params = J(rows[i].params);
        char *got = NULL;
        int r = prov_fstype(&c, params, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        expect_str(rows[i].name, "fstype", got, rows[i].want);
        expect_str(rows[i].name, "warnings", w.text, rows[i].want_warn);
        free(got);
        json_object_put(params);
    }
}

static void test_strip_reserved_parameters(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *params;
        const char *want;
        const char *want_err;
    } rows[] = {
        {"strip_keeps_driver_keys", "{`type`:`gp3`,`iops`:`3000`}", "{`type`:`gp3`,`iops`:`3000`}",
         NULL},
        {"strip_drops_every_known_reserved_key",
         "{`type`:`gp3`,`csi.storage.k8s.io/fstype`:`xfs`,"
         "`csi.storage.k8s.io/provisioner-secret-name`:`a`,"
         "`csi.storage.k8s.io/provisioner-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/controller-publish-secret-name`:`a`,"
         "`csi.storage.k8s.io/controller-publish-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/node-stage-secret-name`:`a`,"
         "`csi.storage.k8s.io/node-stage-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/node-publish-secret-name`:`a`,"
         "`csi.storage.k8s.io/node-publish-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/controller-expand-secret-name`:`a`,"
         "`csi.storage.k8s.io/controller-expand-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/node-expand-secret-name`:`a`,"
         "`csi.storage.k8s.io/node-expand-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/controller-modify-secret-name`:`a`,"
         "`csi.storage.k8s.io/controller-modify-secret-namespace`:`b`,"
         "`csi.storage.k8s.io/secret-name`:`a`,`csi.storage.k8s.io/secret-namespace`:`b`}",
         "{`type`:`gp3`}", NULL},
        {"strip_keeps_deprecated_keys_for_the_driver",
         "{`csiProvisionerSecretName`:`a`,`csiProvisionerSecretNamespace`:`b`,`fstype`:`ext4`}",
         "{`csiProvisionerSecretName`:`a`,`csiProvisionerSecretNamespace`:`b`,`fstype`:`ext4`}",
         NULL},
        {"strip_unknown_reserved_key_is_error", "{`csi.storage.k8s.io/foo`:`x`}", NULL,
         "found unknown parameter key \"csi.storage.k8s.io/foo\" with reserved namespace "
         "csi.storage.k8s.io/"},
        {"strip_extra_metadata_key_in_class_is_error", "{`csi.storage.k8s.io/pvc/name`:`x`}", NULL,
         "found unknown parameter key \"csi.storage.k8s.io/pvc/name\" with reserved namespace "
         "csi.storage.k8s.io/"},
        {"strip_reserved_keys_are_case_sensitive", "{`csi.storage.k8s.io/FSType`:`xfs`}", NULL,
         "found unknown parameter key \"csi.storage.k8s.io/FSType\" with reserved namespace "
         "csi.storage.k8s.io/"},
        {"strip_reports_first_bad_key_in_sorted_order",
         "{`csi.storage.k8s.io/zzz`:`x`,`csi.storage.k8s.io/aaa`:`y`}", NULL,
         "found unknown parameter key \"csi.storage.k8s.io/aaa\" with reserved namespace "
         "csi.storage.k8s.io/"},
        {"strip_no_parameters_is_empty", NULL, "{}", NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *params = J(rows[i].params);
        json_object *got = NULL;
        int r = prov_strip_parameters(params, &got);
        expect_result(rows[i].name, r, -EINVAL, rows[i].want_err);
        if (rows[i].want != NULL) {
            json_object *want = J(rows[i].want);
            if (!json_object_equal(got, want))
                fail_msg("[%s] got %s, want %s", rows[i].name, json_object_to_json_string(got),
                         json_object_to_json_string(want));
            json_object_put(want);
        } else {
            assert_null(got);
        }
        json_object_put(got);
        json_object_put(params);
    }
}

/* ---- secrets ------------------------------------------------------------------ */

#define SEC_PVC                                                                                    \
    "{`metadata`:{`name`:`data-db-0`,`namespace`:`team-a`,`uid`:`" UID "`,`annotations`:{"         \
    "`example.com/secret`:`my-secret`,`example.com/bad`:`Bad_Name`,`example.com/empty`:``}}}"
#define SEC_PV   "pvc-0a1b"
#define TMPL_ERR "failed to get name and namespace template from params: "
#define DEF_ERR  "failed to get default name and namespace template from params: "
#define PRE      "csi.storage.k8s.io/"
#define PAIR(kind, n, ns)                                                                          \
    "`" PRE kind "-secret-name`:`" n "`,`" PRE kind "-secret-namespace`:`" ns "`"
#define DEFPAIR(n, ns) "`" PRE "secret-name`:`" n "`,`" PRE "secret-namespace`:`" ns "`"
#define DEP_WARN(old, new)                                                                         \
    "\"" old                                                                                       \
    "\" is deprecated and will be removed in a future release, please use \"" PRE new "\" instead"

typedef struct secret_row {
    const char *name;
    prov_secret_kind kind;
    const char *params;
    bool no_pvc;
    const char *want_name; /* NULL: no reference */
    const char *want_ns;
    const char *want_err;
    const char *want_warn; /* NULL: none */
} secret_row;

static const secret_row secret_rows[] = {
    /* keys and pairing */
    {"sec_none_gives_no_reference", PROV_SECRET_PROVISIONER, "{`type`:`x`}", false, NULL, NULL,
     NULL, NULL},
    {"sec_prefixed_pair", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "creds", "kube-system") "}", false, "creds", "kube-system", NULL,
     NULL},
    {"sec_deprecated_pair_warns_twice", PROV_SECRET_PROVISIONER,
     "{`csiProvisionerSecretName`:`old`,`csiProvisionerSecretNamespace`:`ns1`}", false, "old",
     "ns1", NULL,
     DEP_WARN("csiProvisionerSecretName", "provisioner-secret-name") "; " DEP_WARN(
         "csiProvisionerSecretNamespace", "provisioner-secret-namespace")},
    {"sec_deprecated_name_with_prefixed_namespace_is_a_pair", PROV_SECRET_NODE_STAGE,
     "{`csiNodeStageSecretName`:`old`,`" PRE "node-stage-secret-namespace`:`ns1`}", false, "old",
     "ns1", NULL, DEP_WARN("csiNodeStageSecretName", "node-stage-secret-name")},
    {"sec_deprecated_and_prefixed_name_is_error", PROV_SECRET_PROVISIONER,
     "{`csiProvisionerSecretName`:`a`," PAIR("provisioner", "b", "ns") "}", false, NULL, NULL,
     TMPL_ERR "Provisioner secrets specified in parameters with both \"csi\" and "
              "\"csi.storage.k8s.io/\" keys",
     DEP_WARN("csiProvisionerSecretName", "provisioner-secret-name")},
    {"sec_deprecated_and_prefixed_namespace_is_error", PROV_SECRET_CONTROLLER_PUBLISH,
     "{`csiControllerPublishSecretNamespace`:`a`," PAIR("controller-publish", "b", "ns") "}", false,
     NULL, NULL,
     TMPL_ERR "ControllerPublish secrets specified in parameters with both \"csi\" and "
              "\"csi.storage.k8s.io/\" keys",
     DEP_WARN("csiControllerPublishSecretNamespace", "controller-publish-secret-namespace")},
    {"sec_name_without_namespace_is_error", PROV_SECRET_NODE_PUBLISH,
     "{`" PRE "node-publish-secret-name`:`a`}", false, NULL, NULL,
     TMPL_ERR "either name and namespace for NodePublish secrets specified, Both must be "
              "specified",
     NULL},
    {"sec_namespace_without_name_is_error", PROV_SECRET_CONTROLLER_EXPAND,
     "{`" PRE "controller-expand-secret-namespace`:`a`}", false, NULL, NULL,
     TMPL_ERR "either name and namespace for ControllerExpand secrets specified, Both must be "
              "specified",
     NULL},
    {"sec_empty_name_is_error", PROV_SECRET_NODE_EXPAND, "{" PAIR("node-expand", "", "ns") "}",
     false, NULL, NULL,
     TMPL_ERR "NodeExpand secrets specified in parameters but value of either namespace or name "
              "is empty",
     NULL},
    {"sec_empty_namespace_is_error", PROV_SECRET_CONTROLLER_MODIFY,
     "{" PAIR("controller-modify", "n", "") "}", false, NULL, NULL,
     TMPL_ERR "ControllerModify secrets specified in parameters but value of either namespace or "
              "name is empty",
     NULL},
    {"sec_incomplete_kind_does_not_fall_back_to_default", PROV_SECRET_PROVISIONER,
     "{`" PRE "provisioner-secret-name`:`a`," DEFPAIR("d", "dns") "}", false, NULL, NULL,
     TMPL_ERR "either name and namespace for Provisioner secrets specified, Both must be "
              "specified",
     NULL},
    /* the default pair */
    {"sec_default_for_provisioner", PROV_SECRET_PROVISIONER, "{" DEFPAIR("d", "dns") "}", false,
     "d", "dns", NULL, NULL},
    {"sec_default_for_controller_publish", PROV_SECRET_CONTROLLER_PUBLISH,
     "{" DEFPAIR("d", "dns") "}", false, "d", "dns", NULL, NULL},
    {"sec_default_for_node_stage", PROV_SECRET_NODE_STAGE, "{" DEFPAIR("d", "dns") "}", false, "d",
     "dns", NULL, NULL},
    {"sec_default_for_node_publish", PROV_SECRET_NODE_PUBLISH, "{" DEFPAIR("d", "dns") "}", false,
     "d", "dns", NULL, NULL},
    {"sec_default_for_controller_expand", PROV_SECRET_CONTROLLER_EXPAND,
     "{" DEFPAIR("d", "dns") "}", false, "d", "dns", NULL, NULL},
    {"sec_default_for_node_expand", PROV_SECRET_NODE_EXPAND, "{" DEFPAIR("d", "dns") "}", false,
     "d", "dns", NULL, NULL},
    {"sec_default_for_controller_modify", PROV_SECRET_CONTROLLER_MODIFY,
     "{" DEFPAIR("d", "dns") "}", false, "d", "dns", NULL, NULL},
    {"sec_kind_wins_over_default", PROV_SECRET_NODE_STAGE,
     "{" DEFPAIR("d", "dns") "," PAIR("node-stage", "s", "sns") "}", false, "s", "sns", NULL, NULL},
    {"sec_incomplete_default_is_error", PROV_SECRET_NODE_STAGE, "{`" PRE "secret-name`:`d`}", false,
     NULL, NULL,
     DEF_ERR "either name and namespace for Default secrets specified, Both must be specified",
     NULL},
    {"sec_empty_default_is_error", PROV_SECRET_PROVISIONER, "{" DEFPAIR("d", "") "}", false, NULL,
     NULL,
     DEF_ERR "Default secrets specified in parameters but value of either namespace or name is "
             "empty",
     NULL},
    /* templates */
    {"sec_tmpl_pv_name_in_both", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pv.name}-creds", "${pv.name}") "}", false, SEC_PV "-creds", SEC_PV,
     NULL, NULL},
    {"sec_tmpl_pvc_namespace_in_both", PROV_SECRET_NODE_PUBLISH,
     "{" PAIR("node-publish", "${pvc.namespace}-key", "${pvc.namespace}") "}", false, "team-a-key",
     "team-a", NULL, NULL},
    {"sec_tmpl_pvc_name_in_name", PROV_SECRET_NODE_PUBLISH,
     "{" PAIR("node-publish", "${pvc.name}", "ns") "}", false, "data-db-0", "ns", NULL, NULL},
    {"sec_tmpl_pvc_annotation_in_name", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pvc.annotations['example.com/secret']}", "ns") "}", false,
     "my-secret", "ns", NULL, NULL},
    {"sec_tmpl_pvc_name_in_namespace_is_error", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n", "${pvc.name}") "}", false, NULL, NULL,
     "error resolving value \"${pvc.name}\": invalid tokens: [\"pvc.name\"]", NULL},
    {"sec_tmpl_annotation_in_namespace_is_error", PROV_SECRET_NODE_STAGE,
     "{" PAIR("node-stage", "n", "${pvc.annotations['example.com/secret']}") "}", false, NULL, NULL,
     "error resolving value \"${pvc.annotations['example.com/secret']}\": invalid tokens: "
     "[\"pvc.annotations['example.com/secret']\"]",
     NULL},
    {"sec_tmpl_missing_annotation_is_error", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pvc.annotations['nope']}", "ns") "}", false, NULL, NULL,
     "error resolving value \"${pvc.annotations['nope']}\": invalid tokens: "
     "[\"pvc.annotations['nope']\"]",
     NULL},
    {"sec_tmpl_unknown_tokens_sorted_and_unique", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${b}-${a}-${b}", "ns") "}", false, NULL, NULL,
     "error resolving value \"${b}-${a}-${b}\": invalid tokens: [\"a\" \"b\"]", NULL},
    {"sec_tmpl_bare_dollar_name_is_a_token", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "$pv", "ns") "}", false, NULL, NULL,
     "error resolving value \"$pv\": invalid tokens: [\"pv\"]", NULL},
    {"sec_tmpl_dollar_dollar_is_a_token", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "a$$b", "ns") "}", false, NULL, NULL,
     "error resolving value \"a$$b\": invalid tokens: [\"$\"]", NULL},
    {"sec_tmpl_empty_braces_vanish", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "sec${}ret", "ns") "}", false, "secret", "ns", NULL, NULL},
    {"sec_tmpl_unterminated_brace_is_eaten", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pv.name", "ns") "}", false, "pv.name", "ns", NULL, NULL},
    {"sec_tmpl_trailing_dollar_stays_and_fails_validation", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "secret$", "ns") "}", false, NULL, NULL,
     "\"secret$\" is not a valid secret name", NULL},
    {"sec_tmpl_without_pvc_only_pv_name", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pvc.name}", "${pv.name}") "}", true, NULL, NULL,
     "error resolving value \"${pvc.name}\": invalid tokens: [\"pvc.name\"]", NULL},
    {"sec_tmpl_without_pvc_namespace_token_fails", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n", "${pvc.namespace}") "}", true, NULL, NULL,
     "error resolving value \"${pvc.namespace}\": invalid tokens: [\"pvc.namespace\"]", NULL},
    {"sec_tmpl_namespace_resolved_before_name", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${x}", "${y}") "}", false, NULL, NULL,
     "error resolving value \"${y}\": invalid tokens: [\"y\"]", NULL},
    /* DNS-1123 */
    {"sec_dns_namespace_literal_invalid", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n", "Team_A") "}", false, NULL, NULL,
     "\"Team_A\" is not a valid namespace name", NULL},
    {"sec_dns_namespace_with_dot_is_not_a_label", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n", "a.b") "}", false, NULL, NULL,
     "\"a.b\" is not a valid namespace name", NULL},
    {"sec_dns_namespace_64_chars_invalid", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n",
              "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa") "}",
     false, NULL, NULL,
     "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\" is not a valid "
     "namespace name",
     NULL},
    {"sec_dns_namespace_resolved_invalid_names_both", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "n", "${pv.name}-") "}", false, NULL, NULL,
     "\"${pv.name}-\" resolved to \"pvc-0a1b-\" which is not a valid namespace name", NULL},
    {"sec_dns_name_with_dots_is_a_subdomain", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "a.b-c.d", "ns") "}", false, "a.b-c.d", "ns", NULL, NULL},
    {"sec_dns_name_resolved_invalid", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pvc.annotations['example.com/bad']}", "ns") "}", false, NULL, NULL,
     "\"${pvc.annotations['example.com/bad']}\" resolved to \"Bad_Name\" which is not a valid "
     "secret name",
     NULL},
    {"sec_dns_name_resolved_empty_invalid", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "${pvc.annotations['example.com/empty']}", "ns") "}", false, NULL,
     NULL,
     "\"${pvc.annotations['example.com/empty']}\" resolved to \"\" which is not a valid secret "
     "name",
     NULL},
    {"sec_dns_name_empty_label_invalid", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "a..b", "ns") "}", false, NULL, NULL,
     "\"a..b\" is not a valid secret name", NULL},
    {"sec_dns_error_quotes_like_go", PROV_SECRET_PROVISIONER,
     "{" PAIR("provisioner", "a\\\"b\\tc", "ns") "}", false, NULL, NULL,
     "\"a\\\"b\\tc\" is not a valid secret name", NULL},
};

static void test_secret_reference_rules(void **state)
{
    (void)state;
    json_object *pvc = J(SEC_PVC);
    for (size_t i = 0; i < N_ROWS(secret_rows); i++) {
        const secret_row *row = &secret_rows[i];
        warnings w;
        prov_config c = base_cfg(&w);
        json_object *params = J(row->params);
        prov_secret_ref ref = {0};
        int r =
            prov_secret_ref_resolve(&c, row->kind, params, SEC_PV, row->no_pvc ? NULL : pvc, &ref);
        expect_result(row->name, r, -EINVAL, row->want_err);
        expect_str(row->name, "name", ref.name, row->want_name);
        expect_str(row->name, "namespace", ref.namespace, row->want_ns);
        expect_str(row->name, "warnings", w.text, row->want_warn != NULL ? row->want_warn : "");
        free(ref.name);
        free(ref.namespace);
        json_object_put(params);
    }
    json_object_put(pvc);
}

static void test_secret_subdomain_length_limit(void **state)
{
    (void)state;
    char name[300], params[400];
    prov_config c = base_cfg(NULL);
    for (size_t len = 253; len <= 254; len++) {
        memset(name, 'a', len);
        name[len] = '\0';
        for (size_t dot = 50; dot < len; dot += 60)
            name[dot] = '.'; /* labels stay short: only the total counts */
        snprintf(params, sizeof(params),
                 "{`" PRE "secret-name`:`%s`,`" PRE "secret-namespace`:`ns`}", name);
        json_object *p = J(params);
        prov_secret_ref ref = {0};
        int r = prov_secret_ref_resolve(&c, PROV_SECRET_PROVISIONER, p, SEC_PV, NULL, &ref);
        if (len == 253) {
            expect_result("sec_dns_name_253_chars_valid", r, 0, NULL);
        } else {
            char want[400];
            snprintf(want, sizeof(want), "\"%s\" is not a valid secret name", name);
            expect_result("sec_dns_name_254_chars_invalid", r, -EINVAL, want);
        }
        free(ref.name);
        free(ref.namespace);
        json_object_put(p);
    }
}

static void test_secret_refs_resolve_every_kind_in_order(void **state)
{
    (void)state;
    prov_config c = base_cfg(NULL);
    json_object *pvc = J(SEC_PVC);

    /* All seven kinds, default filling the ones not set. */
    json_object *p = J("{" DEFPAIR("d", "dns") "," PAIR("provisioner", "p", "pns") "," PAIR(
        "node-expand", "ne", "nens") "}");
    prov_secret_refs refs;
    assert_int_equal(prov_secret_refs_resolve(&c, p, SEC_PV, pvc, &refs), 0);
    static const char *const want[PROV_SECRET_KINDS] = {"p", "d", "d", "d", "d", "ne", "d"};
    for (int k = 0; k < PROV_SECRET_KINDS; k++)
        expect_str("refs_every_kind_with_default_fallback", prov_secret_kind_name(k),
                   refs.ref[k].name, want[k]);
    prov_secret_refs_clear(&refs);
    json_object_put(p);

    /* The first failing kind in upstream's order is reported, nothing kept. */
    p = J("{`" PRE "node-publish-secret-name`:`a`,`" PRE "controller-publish-secret-name`:`b`}");
    int r = prov_secret_refs_resolve(&c, p, SEC_PV, pvc, &refs);
    expect_result("refs_first_error_in_upstream_order", r, -EINVAL,
                  TMPL_ERR "either name and namespace for ControllerPublish secrets specified, "
                           "Both must be specified");
    for (int k = 0; k < PROV_SECRET_KINDS; k++)
        assert_null(refs.ref[k].name);
    json_object_put(p);
    json_object_put(pvc);

    static const char *const names[] = {"Provisioner",     "ControllerPublish", "NodeStage",
                                        "NodePublish",     "ControllerExpand",  "NodeExpand",
                                        "ControllerModify"};
    for (int k = 0; k < PROV_SECRET_KINDS; k++)
        expect_str("secret_kind_names_match_upstream", "name", prov_secret_kind_name(k), names[k]);
}

/* ---- topology ----------------------------------------------------------------- */

#define NODE(name, labels) "{`metadata`:{`name`:`" name "`,`labels`:" labels "}}"
#define N1                 NODE("n1", "{`zone`:`z1`,`rack`:`r1`,`kubernetes.io/hostname`:`n1`}")
#define N2                 NODE("n2", "{`zone`:`z2`,`rack`:`r1`}")
#define N3                 NODE("n3", "{`zone`:`z1`,`rack`:`r2`}")
#define N4                 NODE("n4", "{`zone`:`z3`}")
#define N5                 "{`metadata`:{`name`:`n5`}}"
#define NODES              "[" N1 "," N2 "," N3 "," N4 "," N5 "]"
#define CSINODE(keys)                                                                              \
    "{`metadata`:{`name`:`x`},`spec`:{`drivers`:[{`name`:`other.csi`,`topologyKeys`:[`other`]},"   \
    "{`name`:`" DRIVER "`,`nodeID`:`x`,`topologyKeys`:" keys "}]}}"
#define ZR "[`zone`,`rack`]"
#define Z  "[`zone`]"
/* Fixture pieces joined with JSON commas (a C comma would end the string). */
#define ALLOWED(t)     "[" t "]"
#define ALLOWED2(t, u) "[" t "," u "]"
#define TERM0          "{`matchLabelExpressions`:[]}"
#define TERM(e)        "{`matchLabelExpressions`:[" e "]}"
#define TERM2(e, f)    "{`matchLabelExpressions`:[" e "," f "]}"
#define EXPR(k, v)     "{`key`:`" k "`,`values`:[" v "]}"

#define T_R1Z1 "rack=r1,zone=z1"
#define T_R1Z2 "rack=r1,zone=z2"
#define T_R2Z1 "rack=r2,zone=z1"
#define ZONES3 "zone=z1 | zone=z2 | zone=z3"

typedef struct topo_row {
    const char *name;
    unsigned flags;
    const char *selected;
    const char *node, *csinode, *nodes, *immediate_keys, *allowed;
    const char *pvc_name;
    int want_rc;
    const char *want_req; /* NULL: no requirement */
    const char *want_pref;
    const char *want_err;
    const char *want_warn;
} topo_row;

enum { T_STRICT = 1, T_NO_IMMEDIATE = 2, T_UNSUPPORTED = 4 };

static const topo_row topo_rows[] = {
    /* not asked for */
    {"topo_unsupported_gives_none", T_UNSUPPORTED, "n1", N1, CSINODE(ZR), NODES, NULL, NULL, "pvc",
     0, NULL, NULL, NULL, NULL},
    {"topo_immediate_without_immediate_topology_gives_none", T_NO_IMMEDIATE, NULL, NULL, NULL,
     NODES, Z, NULL, "pvc", 0, NULL, NULL, NULL, NULL},
    {"topo_allowed_without_values_gives_none", 0, NULL, NULL, NULL, NODES, Z, ALLOWED(TERM0), "pvc",
     0, NULL, NULL, NULL, NULL},
    /* immediate binding */
    {"topo_immediate_aggregates_nodes_deduplicated_sorted", 0, NULL, NULL, NULL, NODES, Z, NULL,
     "data-web-0", 0, ZONES3, ZONES3, NULL, NULL},
    {"topo_immediate_two_keys_skips_nodes_missing_one", 0, NULL, NULL, NULL, NODES, ZR, NULL,
     "data-web-2", 0, T_R1Z1 " | " T_R1Z2 " | " T_R2Z1, T_R2Z1 " | " T_R1Z1 " | " T_R1Z2, NULL,
     NULL},
    {"topo_immediate_no_csinode_keys_is_error", 0, NULL, NULL, NULL, NODES, NULL, NULL, "pvc",
     -EINVAL, NULL, NULL, "no available topology found", "No topology keys found on any node"},
    {"topo_immediate_keys_on_no_node_is_error", 0, NULL, NULL, NULL, "[" N5 "]", Z, NULL, "pvc",
     -EINVAL, NULL, NULL, "topologyKeys [zone] were not found on any nodes", NULL},
    {"topo_immediate_allowed_flattened", 0, NULL, NULL, NULL, NODES, Z,
     ALLOWED(TERM(EXPR("zone", "`z1`,`z2`"))), "db", 0, "zone=z1 | zone=z2", "zone=z2 | zone=z1",
     NULL, NULL},
    {"topo_immediate_allowed_used_even_without_immediate_topology", T_NO_IMMEDIATE, NULL, NULL,
     NULL, NULL, NULL, ALLOWED(TERM(EXPR("zone", "`z1`"))), "pvc", 0, "zone=z1", "zone=z1", NULL,
     NULL},
    {"topo_allowed_cross_product_of_values", 0, NULL, NULL, NULL, NULL, NULL,
     ALLOWED(TERM2(EXPR("zone", "`z1`,`z2`"), EXPR("rack", "`r1`,`r2`"))), "my-claim", 0,
     T_R1Z1 " | " T_R1Z2 " | " T_R2Z1 " | rack=r2,zone=z2",
     T_R1Z1 " | " T_R1Z2 " | " T_R2Z1 " | rack=r2,zone=z2", NULL, NULL},
    {"topo_allowed_terms_ored_and_deduplicated", 0, NULL, NULL, NULL, NULL, NULL,
     ALLOWED2(TERM(EXPR("zone", "`z1`")), TERM(EXPR("zone", "`z2`,`z1`"))), "db", 0,
     "zone=z1 | zone=z2", "zone=z2 | zone=z1", NULL, NULL},
    {"topo_allowed_shorter_terms_sort_first", 0, NULL, NULL, NULL, NULL, NULL,
     ALLOWED2(TERM2(EXPR("zone", "`z1`"), EXPR("rack", "`r1`")), TERM(EXPR("zone", "`z9`"))), "x-",
     0, "zone=z9 | " T_R1Z1, "zone=z9 | " T_R1Z1, NULL, NULL},
    {"topo_allowed_key_without_values_restarts_the_term", 0, NULL, NULL, NULL, NULL, NULL,
     ALLOWED(TERM2(EXPR("zone", ""), EXPR("rack", "`r1`"))), "pvc", 0, "rack=r1", "rack=r1", NULL,
     NULL},
    /* StatefulSet spreading: (fnv32(<set>) + N) mod 3 over z1 z2 z3 */
    {"spread_replica_0", 0, NULL, NULL, NULL, NODES, Z, NULL, "data-web-0", 0, ZONES3, ZONES3, NULL,
     NULL},
    {"spread_replica_1_next_zone", 0, NULL, NULL, NULL, NODES, Z, NULL, "data-web-1", 0, ZONES3,
     "zone=z2 | zone=z3 | zone=z1", NULL, NULL},
    {"spread_replica_2_next_zone", 0, NULL, NULL, NULL, NODES, Z, NULL, "data-web-2", 0, ZONES3,
     "zone=z3 | zone=z1 | zone=z2", NULL, NULL},
    {"spread_other_claim_same_replica_same_zone", 0, NULL, NULL, NULL, NODES, Z, NULL, "logs-web-0",
     0, ZONES3, ZONES3, NULL, NULL},
    {"spread_name_dash_index_hashes_name", 0, NULL, NULL, NULL, NODES, Z, NULL, "web-0", 0, ZONES3,
     ZONES3, NULL, NULL},
    {"spread_name_without_index_hashes_whole_name", 0, NULL, NULL, NULL, NODES, Z, NULL, "db", 0,
     ZONES3, "zone=z2 | zone=z3 | zone=z1", NULL, NULL},
    {"spread_index_beyond_uint32_hashes_whole_name", 0, NULL, NULL, NULL, NODES, Z, NULL,
     "a-b-4294967296", 0, ZONES3, "zone=z2 | zone=z3 | zone=z1", NULL, NULL},
    {"spread_index_leading_zeros", 0, NULL, NULL, NULL, NODES, Z, NULL, "x-007", 0, ZONES3,
     "zone=z2 | zone=z3 | zone=z1", NULL, NULL},
    {"spread_index_max_uint32_wraps", 0, NULL, NULL, NULL, NODES, Z, NULL, "data-web-4294967295", 0,
     ZONES3, "zone=z3 | zone=z1 | zone=z2", NULL, NULL},
    {"spread_empty_name_is_offset_zero", 0, NULL, NULL, NULL, NODES, Z, NULL, "", 0, ZONES3, ZONES3,
     NULL, NULL},
    /* selected node, not strict */
    {"topo_selected_aggregates_and_prefers_own_term", 0, "n2", N2, CSINODE(ZR), NODES, NULL, NULL,
     "pvc", 0, T_R1Z1 " | " T_R1Z2 " | " T_R2Z1, T_R1Z2 " | " T_R2Z1 " | " T_R1Z1, NULL, NULL},
    {"topo_selected_first_term_already_first", 0, "n1", N1, CSINODE(ZR), NODES, NULL, NULL, "pvc",
     0, T_R1Z1 " | " T_R1Z2 " | " T_R2Z1, T_R1Z1 " | " T_R1Z2 " | " T_R2Z1, NULL, NULL},
    {"topo_selected_uses_its_csinode_keys", 0, "n3", N3, CSINODE(Z), NODES, NULL, NULL, "pvc", 0,
     ZONES3, ZONES3, NULL, NULL},
    {"topo_selected_ignores_immediate_keys", 0, "n4", N4, CSINODE(Z), NODES, ZR, NULL, "pvc", 0,
     ZONES3, "zone=z3 | zone=z1 | zone=z2", NULL, NULL},
    {"topo_selected_allowed_rotates_to_subset_of_node", 0, "n2", N2, CSINODE(ZR), NULL, NULL,
     ALLOWED(TERM(EXPR("zone", "`z1`,`z2`"))), "pvc", 0, "zone=z1 | zone=z2", "zone=z2 | zone=z1",
     NULL, NULL},
    {"topo_selected_not_in_allowed_is_error", 0, "n1", N1, CSINODE(ZR), NULL, NULL,
     ALLOWED(TERM(EXPR("zone", "`z2`,`z3`"))), "pvc", -EINVAL, NULL, NULL,
     "topology [{rack r1} {zone z1}] from selected node \"n1\" is not in requisite: [[{zone z2}] "
     "[{zone z3}]]",
     NULL},
    {"topo_selected_no_node_with_keys_is_error", 0, "n1", N1, CSINODE(ZR), NULL, NULL, NULL, "pvc",
     -EINVAL, NULL, NULL, "topologyKeys [zone rack] were not found on any nodes", NULL},
    /* selected node, strict */
    {"topo_strict_only_selected_term", T_STRICT, "n2", N2, CSINODE(ZR), NODES, NULL, NULL, "pvc", 0,
     T_R1Z2, T_R1Z2, NULL, NULL},
    {"topo_strict_needs_no_other_nodes", T_STRICT, "n1", N1, CSINODE(Z), NULL, NULL, NULL, "pvc", 0,
     "zone=z1", "zone=z1", NULL, NULL},
    {"topo_strict_selected_within_allowed", T_STRICT, "n1", N1, CSINODE(ZR), NULL, NULL,
     ALLOWED2(TERM(EXPR("zone", "`z2`")), TERM(EXPR("zone", "`z1`"))), "pvc", 0, T_R1Z1, T_R1Z1,
     NULL, NULL},
    {"topo_strict_selected_matches_full_allowed_term", T_STRICT, "n1", N1, CSINODE(ZR), NULL, NULL,
     ALLOWED(TERM2(EXPR("zone", "`z1`"), EXPR("rack", "`r1`,`r2`"))), "pvc", 0, T_R1Z1, T_R1Z1,
     NULL, NULL},
    {"topo_strict_selected_outside_allowed_is_error", T_STRICT, "n1", N1, CSINODE(ZR), NULL, NULL,
     ALLOWED(TERM2(EXPR("zone", "`z2`"), EXPR("rack", "`r1`"))), "pvc", -EINVAL, NULL, NULL,
     "selected node '\"n1\"' topology '[{rack r1} {zone z1}]' is not in allowed topologies: "
     "[[{rack r1} {zone z2}]]",
     NULL},
    {"topo_strict_allowed_without_values_is_error", T_STRICT, "n1", N1, CSINODE(Z), NULL, NULL,
     ALLOWED(TERM0), "pvc", -EINVAL, NULL, NULL,
     "selected node '\"n1\"' topology '[{zone z1}]' is not in allowed topologies: []", NULL},
    /* selected node errors */
    {"topo_selected_csinode_missing_reschedules", 0, "n1", N1, NULL, NODES, NULL, NULL, "pvc",
     -ENOENT, NULL, NULL,
     "failed to get selected CSINode n1: csinode.storage.k8s.io \"n1\" not found", NULL},
    {"topo_selected_csinode_without_driver_is_error", 0, "n1", N1,
     "{`spec`:{`drivers`:[{`name`:`other.csi`,`topologyKeys`:[`zone`]}]}}", NODES, NULL, NULL,
     "pvc", -EINVAL, NULL, NULL, "no topology key found for node n1", NULL},
    {"topo_selected_csinode_empty_keys_is_error", 0, "n1", N1, CSINODE("[]"), NODES, NULL, NULL,
     "pvc", -EINVAL, NULL, NULL, "no topology key found for node n1", NULL},
    {"topo_selected_node_lacks_a_key_is_error", 0, "n4", N4, CSINODE(ZR), NODES, NULL, NULL, "pvc",
     -EINVAL, NULL, NULL,
     "topology labels from selected node map[] does not match topology keys from CSINode [zone "
     "rack]",
     NULL},
    {"topo_selected_node_object_missing_is_error", 0, "n1", NULL, CSINODE(ZR), NODES, NULL, NULL,
     "pvc", -EINVAL, NULL, NULL,
     "topology labels from selected node map[] does not match topology keys from CSINode [zone "
     "rack]",
     NULL},
};

static void test_topology_matrix(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(topo_rows); i++) {
        const topo_row *row = &topo_rows[i];
        warnings w;
        prov_config c = base_cfg(&w);
        c.topology = (row->flags & T_UNSUPPORTED) == 0;
        c.strict_topology = (row->flags & T_STRICT) != 0;
        c.immediate_topology = (row->flags & T_NO_IMMEDIATE) == 0;
        json_object *node = J(row->node), *csinode = J(row->csinode), *nodes = J(row->nodes);
        json_object *keys = J(row->immediate_keys), *allowed = J(row->allowed);
        prov_topology_in in = {
            .selected_node = row->selected,
            .node = node,
            .csinode = csinode,
            .nodes = nodes,
            .immediate_keys = keys,
            .allowed_topologies = allowed,
            .pvc_name = row->pvc_name,
        };
        Csi__V1__TopologyRequirement *got = NULL;
        int r = prov_topology(&c, &in, &got);
        expect_result(row->name, r, row->want_rc, row->want_err);
        if (row->want_req == NULL && got != NULL) {
            fail_msg("[%s] want no requirement", row->name);
        } else if (row->want_req != NULL && got == NULL) {
            fail_msg("[%s] want a requirement", row->name);
        } else if (got != NULL) {
            char *req = topo_text(got->requisite, got->n_requisite);
            char *pref = topo_text(got->preferred, got->n_preferred);
            expect_str(row->name, "requisite", req, row->want_req);
            expect_str(row->name, "preferred", pref, row->want_pref);
            free(req);
            free(pref);
        }
        expect_str(row->name, "warnings", w.text, row->want_warn != NULL ? row->want_warn : "");
        prov_topology_free(got);
        json_object_put(node);
        json_object_put(csinode);
        json_object_put(nodes);
        json_object_put(keys);
        json_object_put(allowed);
    }
}

static void test_csinode_keys_lookup(void **state)
{
    (void)state;
    json_object *cn = J(CSINODE(ZR));
    const json_object *keys = prov_csinode_keys(cn, DRIVER);
    assert_non_null(keys);
    expect_str("csinode_keys_of_our_driver", "keys",
               json_object_to_json_string((json_object *)keys), "[ \"zone\", \"rack\" ]");
    assert_null(prov_csinode_keys(cn, "missing.csi"));
    assert_null(prov_csinode_keys(NULL, DRIVER));
    json_object_put(cn);
}

/* ---- CreateVolumeRequest ---------------------------------------------------- */

#define PVC_META_ANN(ann)                                                                          \
    "`metadata`:{`name`:`data-web-1`,`namespace`:`team-a`,`uid`:`" UID "`,`resourceVersion`:`42`," \
    "`annotations`:{" ann "}}"
#define SEL_N1 "`volume.kubernetes.io/selected-node`:`n1`"
#define SPEC_BASE                                                                                  \
    "`accessModes`:[`ReadWriteOnce`],`resources`:{`requests`:{`storage`:`1Gi`}},"                  \
    "`storageClassName`:`fast`"
#define PVC_ANN(ann, spec) "{" PVC_META_ANN(ann) ",`spec`:{" spec "}}"
#define PVC_SPEC(spec)     PVC_ANN("", spec)
#define PVC_BASE           PVC_SPEC(SPEC_BASE)
#define SC_WITH(params, extra)                                                                     \
    "{`metadata`:{`name`:`fast`},`provisioner`:`" DRIVER "`,`parameters`:{" params "}" extra "}"
#define SC_BASE SC_WITH("`type`:`gp3`", ",`reclaimPolicy`:`Delete`")
#define GIB     "1073741824"
#define CAP_RWO "SINGLE_NODE_WRITER/mount::"

enum {
    R_EXTRA = 1,
    R_TOPO = 2,
    R_NO_SNAPSHOT_CAP = 4,
    R_NO_CLONE_CAP = 8,
    R_NO_MODIFY_CAP = 16,
    R_NO_CONTROLLER = 32,
    R_NO_CREATE = 64,
    R_SNMW = 128,
    R_NO_VAC_GATE = 256,
    R_DEFAULT_FS = 512,
    R_STRICT = 1024,
};

#define TMPL_ERR_DEFAULT_PAIR                                                                      \
    DEF_ERR "either name and namespace for Default secrets specified, Both must be specified"

typedef struct req_row {
    const char *name;
    unsigned flags;
    const char *pvc, *sc;
    prov_source_kind source;
    const char *source_id;
    const char *vac;
    const char *node, *csinode, *nodes;
    int want_rc;
    prov_state want_state;
    const char *want_err;
    const char *want; /* request_text */
} req_row;

static const req_row req_rows[] = {
    {"req_basic_mount_volume", 0, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_capacity_rounded_up_to_bytes", 0,
     PVC_SPEC("`accessModes`:[`ReadWriteOnce`],`resources`:{`requests`:{`storage`:`1500m`}}"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=2 caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_no_storage_request_is_zero_bytes", 0, PVC_SPEC("`accessModes`:[`ReadWriteOnce`]"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=0 caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_fstype_and_mount_options_in_mount_capability", 0, PVC_BASE,
     SC_WITH("`csi.storage.k8s.io/fstype`:`xfs`", ",`mountOptions`:[`noatime`,`discard`]"), 0, NULL,
     NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[SINGLE_NODE_WRITER/mount:xfs:noatime,discard] "
     "params={}"},
    {"req_default_fstype_when_class_has_none", R_DEFAULT_FS, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL,
     NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[SINGLE_NODE_WRITER/mount:ext4:] params={type=gp3}"},
    {"req_block_volume_has_block_capability", 0, PVC_SPEC(SPEC_BASE ",`volumeMode`:`Block`"),
     SC_WITH("`csi.storage.k8s.io/fstype`:`xfs`", ",`mountOptions`:[`noatime`]"), 0, NULL, NULL,
     NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[SINGLE_NODE_WRITER/block] params={}"},
    {"req_filesystem_volume_mode_is_mount", 0, PVC_SPEC(SPEC_BASE ",`volumeMode`:`Filesystem`"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_one_capability_per_access_mode", 0,
     PVC_SPEC("`accessModes`:[`ReadWriteOnce`,`ReadOnlyMany`],`resources`:{`requests`:{`storage`:`"
              "1Gi`}}"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO " MULTI_NODE_READER_ONLY/mount::] "
     "params={type=gp3}"},
    {"req_rwo_with_snmw_capability", R_SNMW, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, 0,
     0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[SINGLE_NODE_MULTI_WRITER/mount::] params={type=gp3}"},
    {"req_unknown_access_mode_is_final", 0,
     PVC_SPEC("`accessModes`:[`ReadWriteSometimes`],`resources`:{`requests`:{`storage`:`1Gi`}}"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "unsupported AccessMode combination: [ReadWriteSometimes]", NULL},
    {"req_parameters_stripped_and_sorted", 0, PVC_BASE,
     SC_WITH(
         "`zeta`:`1`,`alpha`:`2`,`csiNodeStageSecretName`:`s`,`csiNodeStageSecretNamespace`:`ns`,"
         "`csi.storage.k8s.io/provisioner-secret-name`:`p`,"
         "`csi.storage.k8s.io/provisioner-secret-namespace`:`ns`",
         ""),
     0, NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={alpha=2,csiNodeStageSecretName=s,"
     "csiNodeStageSecretNamespace=ns,zeta=1}"},
    {"req_extra_metadata_added_when_enabled", R_EXTRA, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL, NULL,
     NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={csi.storage.k8s.io/pv/name=" PV_NAME
     ",csi.storage.k8s.io/pvc/name=data-web-1,csi.storage.k8s.io/pvc/namespace=team-a,type=gp3}"},
    {"req_unknown_reserved_key_is_final", 0, PVC_BASE, SC_WITH("`csi.storage.k8s.io/foo`:`x`", ""),
     0, NULL, NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "failed to strip CSI Parameters of prefixed keys: found unknown parameter key "
     "\"csi.storage.k8s.io/foo\" with reserved namespace csi.storage.k8s.io/",
     NULL},
    {"req_fstype_twice_is_final", 0, PVC_BASE,
     SC_WITH("`fstype`:`ext4`,`csi.storage.k8s.io/fstype`:`xfs`", ""), 0, NULL, NULL, NULL, NULL,
     NULL, -EINVAL, PROV_FINAL, FS_BOTH, NULL},
    {"req_secret_error_is_no_change", 0, PVC_BASE,
     SC_WITH("`csi.storage.k8s.io/node-stage-secret-name`:`${foo}`,"
             "`csi.storage.k8s.io/node-stage-secret-namespace`:`ns`",
             ""),
     0, NULL, NULL, NULL, NULL, NULL, -EINVAL, PROV_NO_CHANGE,
     "error resolving value \"${foo}\": invalid tokens: [\"foo\"]", NULL},
    {"req_secret_error_before_strip_error", 0, PVC_BASE,
     SC_WITH("`csi.storage.k8s.io/foo`:`x`,`csi.storage.k8s.io/secret-name`:`a`", ""), 0, NULL,
     NULL, NULL, NULL, NULL, -EINVAL, PROV_NO_CHANGE, TMPL_ERR_DEFAULT_PAIR, NULL},
    {"req_selector_is_final", 0, PVC_SPEC(SPEC_BASE ",`selector`:{`matchLabels`:{`a`:`b`}}"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "claim Selector is not supported", NULL},
    {"req_null_selector_is_no_selector", 0, PVC_SPEC(SPEC_BASE ",`selector`:null"), SC_BASE, 0,
     NULL, NULL, NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_missing_class_is_final", 0, PVC_BASE, NULL, 0, NULL, NULL, NULL, NULL, NULL, -EINVAL,
     PROV_FINAL, "storage class was nil", NULL},
    {"req_missing_uid_is_final", 0, "{`metadata`:{`name`:`x`},`spec`:{" SPEC_BASE "}}", SC_BASE, 0,
     NULL, NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL, "corrupted PVC object, it is missing UID",
     NULL},
    /* data sources */
    {"req_snapshot_source", 0, PVC_BASE, SC_BASE, PROV_SOURCE_SNAPSHOT, "snap-handle-1", NULL, NULL,
     NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3} "
     "source=snapshot:snap-handle-1"},
    {"req_clone_source", 0, PVC_BASE, SC_BASE, PROV_SOURCE_VOLUME, "vol-src", NULL, NULL, NULL,
     NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3} source=volume:vol-src"},
    {"req_snapshot_needs_snapshot_capability", R_NO_SNAPSHOT_CAP, PVC_BASE, SC_BASE,
     PROV_SOURCE_SNAPSHOT, "s", NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "CSI driver does not support snapshot restore: controller CREATE_DELETE_SNAPSHOT capability "
     "is not reported",
     NULL},
    {"req_clone_needs_clone_capability", R_NO_CLONE_CAP, PVC_BASE, SC_BASE, PROV_SOURCE_VOLUME, "v",
     NULL, NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "CSI driver does not support clone operations: controller CLONE_VOLUME capability is not "
     "reported",
     NULL},
    {"req_needs_controller_service", R_NO_CONTROLLER, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL, NULL,
     NULL, -EINVAL, PROV_FINAL,
     "CSI driver does not support dynamic provisioning: plugin CONTROLLER_SERVICE capability is "
     "not reported",
     NULL},
    {"req_needs_create_delete_volume", R_NO_CREATE, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL, NULL,
     NULL, -EINVAL, PROV_FINAL,
     "CSI driver does not support dynamic provisioning: controller CREATE_DELETE_VOLUME "
     "capability is not reported",
     NULL},
    /* VolumeAttributesClass */
    {"req_vac_parameters_become_mutable_parameters", 0,
     PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE, 0, NULL,
     "{`metadata`:{`name`:`gold`},`driverName`:`" DRIVER
     "`,`parameters`:{`iops`:`5000`,`tp`:`200`}}",
     NULL, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3} "
     "mutable={iops=5000,tp=200}"},
    {"req_vac_for_other_driver_is_final", 0,
     PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE, 0, NULL,
     "{`metadata`:{`name`:`gold`},`driverName`:`other.csi`}", NULL, NULL, NULL, -EINVAL, PROV_FINAL,
     "VAC gold referenced in PVC is for driver other.csi which does not match driver name " DRIVER,
     NULL},
    {"req_vac_missing_is_no_change", 0, PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, -ENOENT, PROV_NO_CHANGE,
     "volumeattributesclasses.storage.k8s.io \"gold\" not found", NULL},
    {"req_vac_needs_modify_capability", R_NO_MODIFY_CAP,
     PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE, 0, NULL, NULL, NULL, NULL,
     NULL, -EINVAL, PROV_FINAL,
     "CSI driver does not support VolumeAttributesClass: controller MODIFY_VOLUME capability is "
     "not reported",
     NULL},
    {"req_vac_ignored_when_gate_off", R_NO_VAC_GATE | R_NO_MODIFY_CAP,
     PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE, 0, NULL, NULL, NULL, NULL,
     NULL, 0, 0, NULL, "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3}"},
    /* selected node and topology */
    {"req_selected_node_gone_reschedules_even_without_topology", 0, PVC_ANN(SEL_N1, SPEC_BASE),
     SC_BASE, 0, NULL, NULL, NULL, NULL, NULL, -ENOENT, PROV_RESCHEDULE, "node \"n1\" not found",
     NULL},
    {"req_selected_node_present_without_topology", 0, PVC_ANN(SEL_N1, SPEC_BASE), SC_BASE, 0, NULL,
     NULL, N1, NULL, NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3}"},
    {"req_topology_from_selected_node", R_TOPO, PVC_ANN(SEL_N1, SPEC_BASE), SC_BASE, 0, NULL, NULL,
     N1, CSINODE(Z), NODES, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3} "
     "requisite=[" ZONES3 "] preferred=[" ZONES3 "]"},
    {"req_topology_allowed_from_class_strict", R_TOPO | R_STRICT, PVC_ANN(SEL_N1, SPEC_BASE),
     SC_WITH("", ",`allowedTopologies`:" ALLOWED(TERM(EXPR("zone", "`z1`,`z2`")))), 0, NULL, NULL,
     N1, CSINODE(Z), NULL, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={} requisite=[zone=z1] "
     "preferred=[zone=z1]"},
    {"req_topology_csinode_gone_reschedules", R_TOPO, PVC_ANN(SEL_N1, SPEC_BASE), SC_BASE, 0, NULL,
     NULL, N1, NULL, NODES, -ENOENT, PROV_RESCHEDULE,
     "failed to get selected CSINode n1: csinode.storage.k8s.io \"n1\" not found", NULL},
    {"req_topology_error_is_no_change_and_wrapped", R_TOPO, PVC_ANN(SEL_N1, SPEC_BASE), SC_BASE, 0,
     NULL, NULL, N1, CSINODE("[]"), NODES, -EINVAL, PROV_NO_CHANGE,
     "error generating accessibility requirements: no topology key found for node n1", NULL},
    {"req_topology_immediate_spreads_by_pvc_name", R_TOPO, PVC_BASE, SC_BASE, 0, NULL, NULL, NULL,
     NULL, NODES, 0, 0, NULL,
     "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={type=gp3} requisite=[" ZONES3
     "] preferred=[zone=z2 | zone=z3 | zone=z1]"},
};

static void test_build_request(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(req_rows); i++) {
        const req_row *row = &req_rows[i];
        warnings w;
        prov_config c = base_cfg(&w);
        c.extra_create_metadata = (row->flags & R_EXTRA) != 0;
        c.topology = (row->flags & R_TOPO) != 0;
        c.strict_topology = (row->flags & R_STRICT) != 0;
        c.create_delete_snapshot = (row->flags & R_NO_SNAPSHOT_CAP) == 0;
        c.clone_volume = (row->flags & R_NO_CLONE_CAP) == 0;
        c.modify_volume = (row->flags & R_NO_MODIFY_CAP) == 0;
        c.controller_service = (row->flags & R_NO_CONTROLLER) == 0;
        c.create_delete_volume = (row->flags & R_NO_CREATE) == 0;
        c.single_node_multi_writer = (row->flags & R_SNMW) != 0;
        c.vac_enabled = (row->flags & R_NO_VAC_GATE) == 0;
        c.default_fstype = (row->flags & R_DEFAULT_FS) != 0 ? "ext4" : NULL;
        json_object *pvc = J(row->pvc), *sc = J(row->sc), *vac = J(row->vac);
        json_object *node = J(row->node), *csinode = J(row->csinode), *nodes = J(row->nodes);
        json_object *keys = J(Z);
        prov_request_in in = {
            .pvc = pvc,
            .sc = sc,
            .topology = {.node = node, .csinode = csinode, .nodes = nodes, .immediate_keys = keys},
            .source = row->source,
            .source_id = row->source_id,
            .vac = vac,
        };
        Csi__V1__CreateVolumeRequest *req = NULL;
        prov_secret_refs refs;
        prov_state st = PROV_IN_BACKGROUND;
        int r = prov_build_request(&c, &in, &req, &refs, &st);
        expect_result(row->name, r, row->want_rc, row->want_err);
        if (row->want_err != NULL) {
            assert_null(req);
            expect_str(row->name, "state", prov_state_name(st), prov_state_name(row->want_state));
            for (int k = 0; k < PROV_SECRET_KINDS; k++)
                assert_null(refs.ref[k].name);
        } else {
            char *text = request_text(req);
            expect_str(row->name, "request", text, row->want);
            free(text);
        }
        prov_secret_refs_clear(&refs);
        prov_request_free(req);
        json_object_put(pvc);
        json_object_put(sc);
        json_object_put(vac);
        json_object_put(node);
        json_object_put(csinode);
        json_object_put(nodes);
        json_object_put(keys);
    }
}

static Csi__V1__CreateVolumeRequest *build_ok(const prov_config *c, const char *pvc_text,
                                              const char *sc_text, prov_secret_refs *refs)
{
    json_object *pvc = J(pvc_text), *sc = J(sc_text), *node = J(N1);
    prov_request_in in = {.pvc = pvc, .sc = sc, .topology = {.node = node}};
    Csi__V1__CreateVolumeRequest *req = NULL;
    int r = prov_build_request(c, &in, &req, refs, NULL);
    if (r != 0)
        fail_msg("build_request: %s", util_err_last());
    json_object_put(pvc);
    json_object_put(sc);
    json_object_put(node);
    return req;
}

static void test_request_secrets_and_refs(void **state)
{
    (void)state;
    prov_config c = base_cfg(NULL);
    prov_secret_refs refs;
    Csi__V1__CreateVolumeRequest *req =
        build_ok(&c, PVC_BASE,
                 SC_WITH(PAIR("provisioner", "${pvc.name}-creds",
                              "${pvc.namespace}") "," PAIR("node-stage", "stage", "infra"),
                         ""),
                 &refs);
    expect_str("refs_out_provisioner_name", "name", refs.ref[PROV_SECRET_PROVISIONER].name,
               "data-web-1-creds");
    expect_str("refs_out_provisioner_namespace", "namespace",
               refs.ref[PROV_SECRET_PROVISIONER].namespace, "team-a");
    expect_str("refs_out_node_stage", "name", refs.ref[PROV_SECRET_NODE_STAGE].name, "stage");
    assert_null(refs.ref[PROV_SECRET_NODE_PUBLISH].name);
    assert_int_equal(req->n_secrets, 0);

    /* Secret data (base64) becomes request secrets as strings, sorted. */
    json_object *data = J("{`username`:`YWRtaW4=`,`password`:`czNjcjN0`,`empty`:``,"
                          "`wrapped`:`YWJj\\nZGVm`}");
    assert_int_equal(prov_request_set_secrets(req, data), 0);
    char *text = request_text(req);
    expect_str("set_secrets_decodes_base64", "request", text,
               "name=" PV_NAME " bytes=" GIB " caps=[" CAP_RWO "] params={} "
               "secrets={empty=,password=s3cr3t,username=admin,wrapped=abcdef}");
    free(text);
    json_object_put(data);

    /* Setting again replaces; NULL clears. */
    data = J("{`k`:`dg==`}");
    assert_int_equal(prov_request_set_secrets(req, data), 0);
    assert_int_equal(req->n_secrets, 1);
    expect_str("set_secrets_replaces", "value", req->secrets[0]->value, "v");
    json_object_put(data);

    static const struct {
        const char *name;
        const char *data;
    } bad[] = {
        {"set_secrets_rejects_non_base64", "{`k`:`!!!!`}"},
        {"set_secrets_rejects_missing_padding", "{`k`:`YWJ`}"},
        {"set_secrets_rejects_nul_bytes", "{`k`:`AAE=`}"},
        {"set_secrets_rejects_padding_inside", "{`k`:`YQ==YWJj`}"},
    };
    for (size_t i = 0; i < N_ROWS(bad); i++) {
        data = J(bad[i].data);
        int r = prov_request_set_secrets(req, data);
        expect_result(bad[i].name, r, -EINVAL, "secret data for key \"k\" is not base64 text");
        json_object_put(data);
    }
    assert_int_equal(prov_request_set_secrets(req, NULL), 0);
    assert_int_equal(req->n_secrets, 0);
    prov_request_free(req);
    prov_secret_refs_clear(&refs);

    /* Packing works: every field is a valid protobuf-c message. */
    req = build_ok(&c, PVC_BASE, SC_BASE, NULL);
    size_t len = protobuf_c_message_get_packed_size(&req->base);
    assert_true(len > 0);
    prov_request_free(req);
    prov_request_free(NULL);
}

static void test_deprecated_keys_warn_once_per_build(void **state)
{
    (void)state;
    warnings w;
    prov_config c = base_cfg(&w);
    prov_secret_refs refs;
    Csi__V1__CreateVolumeRequest *req =
        build_ok(&c, PVC_BASE,
                 SC_WITH("`FSType`:`ext4`,`csiProvisionerSecretName`:`a`,"
                         "`csiProvisionerSecretNamespace`:`b`",
                         ""),
                 &refs);
    expect_str("warnings_fstype_and_deprecated_secret_keys", "warnings", w.text,
               FS_DEPRECATED
               "; " DEP_WARN("csiProvisionerSecretName", "provisioner-secret-name") "; " DEP_WARN(
                   "csiProvisionerSecretNamespace", "provisioner-secret-namespace"));
    prov_request_free(req);
    prov_secret_refs_clear(&refs);
}

/* ---- CreateVolume response ---------------------------------------------------- */

/* A response from a fixture: {capacity, id, context{}, topology[{}], source}. */
static Csi__V1__CreateVolumeResponse *make_resp(const char *text)
{
    json_object *o = J(text);
    Csi__V1__CreateVolumeResponse *resp = calloc(1, sizeof(*resp));
    assert_non_null(resp);
    csi__v1__create_volume_response__init(resp);
    Csi__V1__Volume *v = calloc(1, sizeof(*v));
    assert_non_null(v);
    csi__v1__volume__init(v);
    resp->volume = v;
    json_object *x = NULL;
    if (json_object_object_get_ex(o, "capacity", &x))
        v->capacity_bytes = json_object_get_int64(x);
    v->volume_id =
        strdup(json_object_object_get_ex(o, "id", &x) ? json_object_get_string(x) : "vol-1");
    if (json_object_object_get_ex(o, "context", &x)) {
        v->volume_context = calloc((size_t)json_object_object_length(x) + 1, sizeof(void *));
        json_object_object_foreach(x, k, val)
        {
            Csi__V1__Volume__VolumeContextEntry *e = calloc(1, sizeof(*e));
            csi__v1__volume__volume_context_entry__init(e);
            e->key = strdup(k);
            e->value = strdup(json_object_get_string(val));
            v->volume_context[v->n_volume_context++] = e;
        }
    }
    if (json_object_object_get_ex(o, "topology", &x)) {
        size_t n = json_object_array_length(x);
        v->accessible_topology = calloc(n + 1, sizeof(void *));
        for (size_t i = 0; i < n; i++) {
            json_object *seg = json_object_array_get_idx(x, i);
            Csi__V1__Topology *t = calloc(1, sizeof(*t));
            csi__v1__topology__init(t);
            t->segments = calloc((size_t)json_object_object_length(seg) + 1, sizeof(void *));
            json_object_object_foreach(seg, k, val)
            {
                Csi__V1__Topology__SegmentsEntry *e = calloc(1, sizeof(*e));
                csi__v1__topology__segments_entry__init(e);
                e->key = strdup(k);
                e->value = strdup(json_object_get_string(val));
                t->segments[t->n_segments++] = e;
            }
            v->accessible_topology[v->n_accessible_topology++] = t;
        }
    }
    if (json_object_object_get_ex(o, "source", &x) && json_object_get_boolean(x)) {
        v->content_source = calloc(1, sizeof(*v->content_source));
        csi__v1__volume_content_source__init(v->content_source);
    }
    json_object_put(o);
    return resp;
}

static void free_resp(Csi__V1__CreateVolumeResponse *r)
{
    protobuf_c_message_free_unpacked(&r->base, NULL);
}

static void test_response_checks(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        unsigned flags;
        const char *pvc;
        const char *resp;
        bool no_volume;
        int want_rc;
        int64_t want_cap;
        const char *want_err;
    } rows[] = {
        {"resp_capacity_as_reported", 0, PVC_BASE, "{`capacity`:2147483648}", false, 0,
         2147483648LL, NULL},
        {"resp_capacity_equal", 0, PVC_BASE, "{`capacity`:" GIB "}", false, 0, 1073741824LL, NULL},
        {"resp_capacity_zero_means_requested", 0, PVC_BASE, "{`capacity`:0}", false, 0,
         1073741824LL, NULL},
        {"resp_capacity_smaller_needs_cleanup", 0, PVC_BASE, "{`capacity`:1000}", false, -ERANGE, 0,
         "created volume capacity 1000 less than requested capacity 1073741824"},
        {"resp_negative_capacity_smaller", 0, PVC_BASE, "{`capacity`:-1}", false, -ERANGE, 0,
         "created volume capacity -1 less than requested capacity 1073741824"},
        {"resp_data_source_without_content_source_needs_cleanup", 0,
         PVC_SPEC(SPEC_BASE ",`dataSource`:{`kind`:`VolumeSnapshot`,`name`:`s`}"), "{`capacity`:0}",
         false, -ENODATA, 0, "volume content source missing"},
        {"resp_data_source_with_content_source", 0,
         PVC_SPEC(SPEC_BASE ",`dataSource`:{`kind`:`VolumeSnapshot`,`name`:`s`}"),
         "{`capacity`:0,`source`:true}", false, 0, 1073741824LL, NULL},
        {"resp_smaller_checked_before_source", 0,
         PVC_SPEC(SPEC_BASE ",`dataSource`:{`kind`:`PersistentVolumeClaim`,`name`:`s`}"),
         "{`capacity`:1}", false, -ERANGE, 0,
         "created volume capacity 1 less than requested capacity 1073741824"},
        {"resp_cross_namespace_ref_counts_with_gate", 1,
         PVC_SPEC(SPEC_BASE
                  ",`dataSourceRef`:{`kind`:`VolumeSnapshot`,`name`:`s`,`namespace`:`o`}"),
         "{`capacity`:0}", false, -ENODATA, 0, "volume content source missing"},
        {"resp_cross_namespace_ref_ignored_without_gate", 0,
         PVC_SPEC(SPEC_BASE
                  ",`dataSourceRef`:{`kind`:`VolumeSnapshot`,`name`:`s`,`namespace`:`o`}"),
         "{`capacity`:0}", false, 0, 1073741824LL, NULL},
        {"resp_without_volume_is_error", 0, PVC_BASE, "{}", true, -EPROTO, 0,
         "CreateVolume response has no volume"},
    };
    prov_config c = base_cfg(NULL);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        c.cross_namespace_source = rows[i].flags != 0;
        json_object *pvc = J(rows[i].pvc);
        json_object *sc = J(SC_BASE);
        json_object *node = J(N1);
        prov_request_in in = {.pvc = pvc, .sc = sc, .topology = {.node = node}};
        Csi__V1__CreateVolumeRequest *req = NULL;
        assert_int_equal(prov_build_request(&c, &in, &req, NULL, NULL), 0);
        Csi__V1__CreateVolumeResponse *resp = make_resp(rows[i].resp);
        int64_t cap = -1;
        int r = prov_check_response(&c, pvc, req, rows[i].no_volume ? NULL : resp, &cap);
        expect_result(rows[i].name, r, rows[i].want_rc, rows[i].want_err);
        expect_int(rows[i].name, "capacity", cap, rows[i].want_cap);
        free_resp(resp);
        prov_request_free(req);
        json_object_put(pvc);
        json_object_put(sc);
        json_object_put(node);
    }

    char *m = prov_orphan_message(-ERANGE,
                                  "created volume capacity 1 less than requested "
                                  "capacity 2",
                                  PV_NAME, "rpc error: code = Internal desc = x");
    expect_str(
        "orphan_message_after_capacity_check", "message", m,
        "created volume capacity 1 less than requested capacity 2. Cleanup of volume " PV_NAME
        " failed, volume is orphaned: rpc error: code = Internal desc = x");
    free(m);
    m = prov_orphan_message(-ENODATA, "volume content source missing", PV_NAME, "boom");
    expect_str("orphan_message_after_source_check_says_cleanup_lowercase", "message", m,
               "volume content source missing. cleanup of volume " PV_NAME
               " failed, volume is orphaned: boom");
    free(m);
}

/* ---- PersistentVolume ------------------------------------------------------------ */

#define PV_ANN_NO_SECRET                                                                           \
    "`pv.kubernetes.io/provisioned-by`:`" DRIVER "`,"                                              \
    "`volume.kubernetes.io/provisioner-deletion-secret-name`:``,"                                  \
    "`volume.kubernetes.io/provisioner-deletion-secret-namespace`:``"
#define PV_HEAD(ann)                                                                               \
    "{`apiVersion`:`v1`,`kind`:`PersistentVolume`,`metadata`:{`name`:`" PV_NAME "`,"               \
    "`annotations`:{" ann                                                                          \
    "},`finalizers`:[`external-provisioner.volume.kubernetes.io/finalizer`]},"
#define CLAIM_REF                                                                                  \
    "`claimRef`:{`kind`:`PersistentVolumeClaim`,`namespace`:`team-a`,`name`:`data-web-1`,"         \
    "`uid`:`" UID "`,`apiVersion`:`v1`,`resourceVersion`:`42`}"
#define ATTRS(extra)                                                                               \
    "`volumeAttributes`:{`storage.kubernetes.io/csiProvisionerIdentity`:`" IDENTITY "`" extra "}"
#define CSI(extra)           "`csi`:{`driver`:`" DRIVER "`,`volumeHandle`:`vol-1`," extra "}"
#define PV_GOLDEN(ann, spec) PV_HEAD(ann) "`spec`:{" CLAIM_REF "," spec "}}"
#define SPEC_RWO_1GI         "`accessModes`:[`ReadWriteOnce`],`capacity`:{`storage`:`1Gi`}"
#define TAIL_DELETE_FAST     "`persistentVolumeReclaimPolicy`:`Delete`,`storageClassName`:`fast`"

enum { P_TOPO = 1, P_READONLY = 2, P_NO_VAC_GATE = 4 };

typedef struct pv_row {
    const char *name;
    unsigned flags;
    const char *pvc, *sc, *resp;
    const char *want;
} pv_row;

static const pv_row pv_rows[] = {
    {"pv_basic_mount_volume", 0, PVC_BASE, SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_capacity_binary_si_non_power", 0, PVC_BASE, SC_BASE, "{`capacity`:1610612736}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               "`accessModes`:[`ReadWriteOnce`],`capacity`:{`storage`:`1536Mi`}," CSI(
                   ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_capacity_zero_records_request", 0,
     PVC_SPEC("`accessModes`:[`ReadWriteOnce`],`resources`:{`requests`:{`storage`:`1500`}},"
              "`storageClassName`:`fast`"),
     SC_BASE, "{`capacity`:0}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               "`accessModes`:[`ReadWriteOnce`],`capacity`:{`storage`:`1500`}," CSI(
                   ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_fstype_and_mount_options", 0, PVC_BASE,
     SC_WITH("`csi.storage.k8s.io/fstype`:`xfs`",
             ",`mountOptions`:[`noatime`],`reclaimPolicy`:`Retain`"),
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               SPEC_RWO_1GI "," CSI("`fsType`:`xfs`," ATTRS(
                   "")) ",`mountOptions`:[`noatime`],`persistentVolumeReclaimPolicy`:`Retain`,"
                        "`storageClassName`:`fast`")},
    {"pv_block_has_volume_mode_and_no_fstype", 0, PVC_SPEC(SPEC_BASE ",`volumeMode`:`Block`"),
     SC_WITH("`csi.storage.k8s.io/fstype`:`xfs`", ",`reclaimPolicy`:`Delete`"),
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST ",`volumeMode`:`Block`")},
    {"pv_filesystem_volume_mode_copied", 0, PVC_SPEC(SPEC_BASE ",`volumeMode`:`Filesystem`"),
     SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST ",`volumeMode`:`Filesystem`")},
    {"pv_no_reclaim_policy_when_class_has_none", 0, PVC_BASE, SC_WITH("", ""),
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) ",`storageClassName`:`fast`")},
    {"pv_volume_context_merged_over_identity", 0, PVC_BASE, SC_BASE,
     "{`capacity`:" GIB ",`id`:`vol-1`,`context`:{`a`:`1`,"
     "`storage.kubernetes.io/csiProvisionerIdentity`:`driver-says`}}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI
               ",`csi`:{`driver`:`" DRIVER "`,`volumeHandle`:`vol-1`,"
               "`volumeAttributes`:{`storage.kubernetes.io/csiProvisionerIdentity`:`driver-says`,"
               "`a`:`1`}}," TAIL_DELETE_FAST)},
    {"pv_read_only_for_single_rox_with_flag", P_READONLY,
     PVC_SPEC("`accessModes`:[`ReadOnlyMany`],`resources`:{`requests`:{`storage`:`1Gi`}},"
              "`storageClassName`:`fast`"),
     SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, "`accessModes`:[`ReadOnlyMany`],`capacity`:{`storage`:`1Gi`}," CSI(
                                     "`readOnly`:true," ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_rox_without_flag_not_read_only", 0,
     PVC_SPEC("`accessModes`:[`ReadOnlyMany`],`resources`:{`requests`:{`storage`:`1Gi`}},"
              "`storageClassName`:`fast`"),
     SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, "`accessModes`:[`ReadOnlyMany`],`capacity`:{`storage`:`1Gi`}," CSI(
                                     ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_rox_with_other_mode_not_read_only", P_READONLY,
     PVC_SPEC("`accessModes`:[`ReadOnlyMany`,`ReadWriteOnce`],"
              "`resources`:{`requests`:{`storage`:`1Gi`}},`storageClassName`:`fast`"),
     SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               "`accessModes`:[`ReadOnlyMany`,`ReadWriteOnce`],"
               "`capacity`:{`storage`:`1Gi`}," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_secret_refs_and_deletion_annotations", 0, PVC_BASE,
     SC_WITH(
         PAIR("provisioner", "prov", "ns1") "," PAIR("controller-publish", "cp", "ns2") "," PAIR(
             "node-stage", "stage", "ns3") "," PAIR("node-publish", "np",
                                                    "ns4") "," PAIR("controller-expand", "ce",
                                                                    "ns5") "," PAIR("node-expand",
                                                                                    "ne", "ns6"),
         ",`reclaimPolicy`:`Delete`"),
     "{`capacity`:" GIB "}",
     PV_GOLDEN(
         "`pv.kubernetes.io/provisioned-by`:`" DRIVER "`,"
         "`volume.kubernetes.io/provisioner-deletion-secret-name`:`prov`,"
         "`volume.kubernetes.io/provisioner-deletion-secret-namespace`:`ns1`",
         SPEC_RWO_1GI "," CSI(ATTRS(
             "") ","
                 "`controllerPublishSecretRef`:{`name`:`cp`,`namespace`:`ns2`},"
                 "`nodeStageSecretRef`:{`name`:`stage`,`namespace`:`ns3`},"
                 "`nodePublishSecretRef`:{`name`:`np`,`namespace`:`ns4`},"
                 "`controllerExpandSecretRef`:{`name`:`ce`,`namespace`:`ns5`},"
                 "`nodeExpandSecretRef`:{`name`:`ne`,`namespace`:`ns6`}") "," TAIL_DELETE_FAST)},
    {"pv_default_secret_fills_every_ref_and_modify_annotations", 0, PVC_BASE,
     SC_WITH(DEFPAIR("d", "dns"), ",`reclaimPolicy`:`Delete`"), "{`capacity`:" GIB "}",
     PV_GOLDEN(
         "`pv.kubernetes.io/provisioned-by`:`" DRIVER "`,"
         "`volume.kubernetes.io/provisioner-deletion-secret-name`:`d`,"
         "`volume.kubernetes.io/provisioner-deletion-secret-namespace`:`dns`,"
         "`volume.kubernetes.io/controller-modify-secret-name`:`d`,"
         "`volume.kubernetes.io/controller-modify-secret-namespace`:`dns`",
         SPEC_RWO_1GI "," CSI(ATTRS(
             "") ","
                 "`controllerPublishSecretRef`:{`name`:`d`,`namespace`:`dns`},"
                 "`nodeStageSecretRef`:{`name`:`d`,`namespace`:`dns`},"
                 "`nodePublishSecretRef`:{`name`:`d`,`namespace`:`dns`},"
                 "`controllerExpandSecretRef`:{`name`:`d`,`namespace`:`dns`},"
                 "`nodeExpandSecretRef`:{`name`:`d`,`namespace`:`dns`}") "," TAIL_DELETE_FAST)},
    {"pv_modify_secret_only_in_annotations", 0, PVC_BASE,
     SC_WITH(PAIR("controller-modify", "m", "mns"), ",`reclaimPolicy`:`Delete`"),
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET ",`volume.kubernetes.io/controller-modify-secret-name`:`m`,"
                                "`volume.kubernetes.io/controller-modify-secret-namespace`:`mns`",
               SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_class_name_from_beta_annotation", 0,
     PVC_ANN("`volume.beta.kubernetes.io/storage-class`:`legacy`", SPEC_BASE), SC_BASE,
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               SPEC_RWO_1GI "," CSI(ATTRS(
                   "")) ",`persistentVolumeReclaimPolicy`:`Delete`,`storageClassName`:`legacy`")},
    {"pv_vac_name_with_gate", 0, PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE,
     "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI
               "," CSI(ATTRS("")) "," TAIL_DELETE_FAST ",`volumeAttributesClassName`:`gold`")},
    {"pv_vac_name_dropped_without_gate", P_NO_VAC_GATE,
     PVC_SPEC(SPEC_BASE ",`volumeAttributesClassName`:`gold`"), SC_BASE, "{`capacity`:" GIB "}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_node_affinity_sorted_terms_and_expressions", P_TOPO, PVC_BASE, SC_BASE,
     "{`capacity`:" GIB ",`topology`:[{`zone`:`z2`,`rack`:`r9`},{`zone`:`z1`},{}]}",
     PV_GOLDEN(PV_ANN_NO_SECRET,
               SPEC_RWO_1GI "," CSI(ATTRS(
                   "")) "," TAIL_DELETE_FAST ",`nodeAffinity`:{`required`:{`nodeSelectorTerms`:["
                        "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z1`]}]},"
                        "{`matchExpressions`:[{`key`:`rack`,`operator`:`In`,`values`:[`r9`]},"
                        "{`key`:`zone`,`operator`:`In`,`values`:[`z2`]}]}]}}")},
    {"pv_no_node_affinity_without_topology_support", 0, PVC_BASE, SC_BASE,
     "{`capacity`:" GIB ",`topology`:[{`zone`:`z1`}]}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
    {"pv_no_node_affinity_when_only_empty_segments", P_TOPO, PVC_BASE, SC_BASE,
     "{`capacity`:" GIB ",`topology`:[{}]}",
     PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST)},
};

static bool vac_named(const json_object *pvc)
{
    json_object *spec = NULL, *vac = NULL;
    return json_object_object_get_ex(pvc, "spec", &spec) &&
           json_object_object_get_ex(spec, "volumeAttributesClassName", &vac);
}

static void test_build_pv_golden(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(pv_rows); i++) {
        const pv_row *row = &pv_rows[i];
        prov_config c = base_cfg(NULL);
        c.topology = (row->flags & P_TOPO) != 0;
        c.controller_publish_readonly = (row->flags & P_READONLY) != 0;
        c.vac_enabled = (row->flags & P_NO_VAC_GATE) == 0;
        json_object *pvc = J(row->pvc), *sc = J(row->sc), *vac = NULL;
        json_object *keys = J(Z), *nodes = J(NODES);
        if (c.vac_enabled && vac_named(pvc))
            vac = J("{`driverName`:`" DRIVER "`,`parameters`:{`iops`:`1`}}");
        prov_request_in in = {
            .pvc = pvc, .sc = sc, .vac = vac, .topology = {.nodes = nodes, .immediate_keys = keys}};
        Csi__V1__CreateVolumeRequest *req = NULL;
        prov_secret_refs refs;
        if (prov_build_request(&c, &in, &req, &refs, NULL) != 0)
            fail_msg("[%s] build_request: %s", row->name, util_err_last());
        Csi__V1__CreateVolumeResponse *resp = make_resp(row->resp);
        int64_t cap;
        assert_int_equal(prov_check_response(&c, pvc, req, resp, &cap), 0);
        json_object *pv = NULL;
        int r = prov_build_pv(&c, pvc, sc, req, resp, &refs, &pv);
        expect_result(row->name, r, 0, NULL);
        json_object *want = J(row->want);
        if (!json_object_equal(pv, want)) {
            char path[1024] = "pv";
            json_diff(pv, want, path, sizeof(path));
            fail_msg("[%s] PV differs at %s", row->name, path);
        }
        json_object_put(want);
        json_object_put(pv);
        free_resp(resp);
        prov_request_free(req);
        prov_secret_refs_clear(&refs);
        json_object_put(pvc);
        json_object_put(sc);
        json_object_put(vac);
        json_object_put(keys);
        json_object_put(nodes);
    }
}

static void test_build_pv_errors_and_node_affinity(void **state)
{
    (void)state;
    prov_config c = base_cfg(NULL);
    json_object *pvc = J(PVC_BASE), *sc = J(SC_BASE), *pv = NULL;
    Csi__V1__CreateVolumeRequest *req = build_ok(&c, PVC_BASE, SC_BASE, NULL);
    Csi__V1__CreateVolumeResponse empty = CSI__V1__CREATE_VOLUME_RESPONSE__INIT;
    expect_result("pv_without_volume_is_error", prov_build_pv(&c, pvc, sc, req, &empty, NULL, &pv),
                  -EPROTO, "CreateVolume response has no volume");
    assert_null(pv);

    /* No refs at all: deletion annotations still written, empty. */
    Csi__V1__CreateVolumeResponse *resp = make_resp("{`capacity`:" GIB "}");
    assert_int_equal(prov_build_pv(&c, pvc, sc, req, resp, NULL, &pv), 0);
    json_object *want =
        J(PV_GOLDEN(PV_ANN_NO_SECRET, SPEC_RWO_1GI "," CSI(ATTRS("")) "," TAIL_DELETE_FAST));
    if (!json_object_equal(pv, want))
        fail_msg("[pv_without_refs_writes_empty_deletion_annotations] got %s",
                 json_object_to_json_string(pv));
    json_object_put(want);
    json_object_put(pv);
    free_resp(resp);

    /* A key repeated on the wire: the last value wins, as in a Go map. */
    Csi__V1__Topology__SegmentsEntry e1 = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
    Csi__V1__Topology__SegmentsEntry e2 = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
    e1.key = e2.key = (char *)"zone";
    e1.value = (char *)"z1";
    e2.value = (char *)"z7";
    Csi__V1__Topology__SegmentsEntry *segs[] = {&e1, &e2};
    Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
    topo.segments = segs;
    topo.n_segments = 2;
    Csi__V1__Topology *topos[] = {&topo};
    json_object *aff = prov_node_affinity(topos, 1);
    want = J("{`required`:{`nodeSelectorTerms`:[{`matchExpressions`:[{`key`:`zone`,"
             "`operator`:`In`,`values`:[`z7`]}]}]}}");
    if (!json_object_equal(aff, want))
        fail_msg("[affinity_repeated_key_last_wins] got %s", json_object_to_json_string(aff));
    json_object_put(want);
    json_object_put(aff);
    assert_null(prov_node_affinity(NULL, 0));

    prov_request_free(req);
    json_object_put(pvc);
    json_object_put(sc);
}

/* Which claim changes may skip waking a claim worker (the controller adds
 * the intent check): those ctrl_sync_claim leaves at "not ours". */
static void test_claim_sync_idle_table(void **state)
{
    (void)state;
#define PVCT(ann, fin) "{`metadata`:{`name`:`c`,`namespace`:`n`" ann fin "},`spec`:{}}"
#define ANN(k, v)      ",`annotations`:{`" k "`:`" v "`}"
#define SP             "volume.kubernetes.io/storage-provisioner"
#define BSP            "volume.beta.kubernetes.io/storage-provisioner"
    static const struct {
        const char *name, *pvc;
        bool wants, idle;
    } rows[] = {
        {"no_annotation", PVCT("", ""), false, true},
        {"other_driver", PVCT(ANN(SP, "x.csi"), ""), false, true},
        {"ours", PVCT(ANN(SP, "d.csi"), ""), true, false},
        {"ours_by_beta", PVCT(ANN(BSP, "d.csi"), ""), true, false},
        {"ga_wins_over_beta", PVCT(",`annotations`:{`" SP "`:`x.csi`,`" BSP "`:`d.csi`}", ""),
         false, true},
        {"empty_value", PVCT(ANN(SP, ""), ""), false, true},
        {"wrong_type", PVCT(",`annotations`:{`" SP "`:7}", ""), false, true},
        {"older_in_progress_finalizer",
         PVCT("", ",`finalizers`:[`external-provisioner.volume.kubernetes.io/"
                  "provisioning-in-progress`]"),
         false, false},
        {"clone_source",
         PVCT(ANN(SP, "x.csi"), ",`finalizers`:[`provisioner.storage.kubernetes.io/"
                                "cloning-protection`]"),
         false, false},
        {"unrelated_finalizer", PVCT(ANN(SP, "x.csi"), ",`finalizers`:[`a/b`]"), false, true},
    };
#undef PVCT
#undef ANN
#undef SP
#undef BSP
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        json_object *pvc = J(rows[i].pvc);
        if (prov_pvc_wants_driver(pvc, "d.csi") != rows[i].wants)
            fail_msg("[%s] want wants_driver=%d", rows[i].name, rows[i].wants);
        if (prov_claim_sync_idle(pvc, "d.csi") != rows[i].idle)
            fail_msg("[%s] want idle=%d", rows[i].name, rows[i].idle);
        json_object_put(pvc);
    }
    assert_false(prov_pvc_wants_driver(NULL, "d.csi"));
}

/* Which PV changes may skip waking a volume worker: exactly those where
 * ctrl_sync_volume stops before any write or CSI call. */
static void test_pv_sync_idle_table(void **state)
{
    (void)state;
#define PVT(ann, drv, policy, phase, fin, del)                                                     \
    "{`metadata`:{`name`:`pv1`" ann fin del "},`spec`:{" drv policy "}" phase "}"
#define BY(d)    ",`annotations`:{`pv.kubernetes.io/provisioned-by`:`" d "`}"
#define DRV(d)   "`csi`:{`driver`:`" d "`,`volumeHandle`:`h`}"
#define POL(p)   ",`persistentVolumeReclaimPolicy`:`" p "`"
#define PHASE(p) ",`status`:{`phase`:`" p "`}"
#define FIN      ",`finalizers`:[`other`,`external-provisioner.volume.kubernetes.io/finalizer`]"
#define DEL      ",`deletionTimestamp`:`2026-01-01T00:00:00Z`"
    static const struct {
        const char *name, *pv;
        bool idle;
    } rows[] = {
        {"other_driver_annotation",
         PVT(BY("x.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"), "", ""), true},
        {"other_csi_driver",
         PVT(BY("d.csi"), DRV("x.csi"), POL("Delete"), PHASE("Released"), "", ""), true},
        {"no_annotation", PVT("", DRV("d.csi"), POL("Delete"), PHASE("Released"), FIN, ""), true},
        {"not_csi", PVT(BY("d.csi"), "`hostPath`:{}", POL("Delete"), PHASE("Released"), FIN, ""),
         true},
        {"retain_without_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Retain"), PHASE("Released"), "", ""), true},
        {"retain_with_finalizer_drops_it",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Retain"), PHASE("Bound"), FIN, ""), false},
        {"no_policy_with_finalizer_drops_it",
         PVT(BY("d.csi"), DRV("d.csi"), ",`x`:1", PHASE("Bound"), FIN, ""), false},
        {"delete_bound_with_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Bound"), FIN, ""), true},
        {"delete_pending_with_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Pending"), FIN, ""), true},
        {"delete_no_phase_with_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), "", FIN, ""), true},
        {"delete_bound_without_finalizer_adds_it",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Bound"), "", ""), false},
        {"delete_bound_deleting_without_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Bound"), "", DEL), true},
        {"delete_released_is_work",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"), FIN, ""), false},
        {"delete_released_deleting_is_work",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"), FIN, DEL), false},
        {"delete_released_without_finalizer_is_work",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"), "", ""), false},
        /* upstream shouldDelete: our finalizer goes last, after DeleteVolume;
         * kubernetes.io/pv-protection keeps the object on a real cluster */
        {"delete_released_deleting_without_our_finalizer_was_deleted",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"),
             ",`finalizers`:[`kubernetes.io/pv-protection`]", DEL),
         true},
        {"delete_released_deleting_without_any_finalizer_was_deleted",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Released"), "", DEL), true},
        {"delete_failed_with_finalizer",
         PVT(BY("d.csi"), DRV("d.csi"), POL("Delete"), PHASE("Failed"), FIN, ""), true},
    };
#undef PVT
#undef BY
#undef DRV
#undef POL
#undef PHASE
#undef FIN
#undef DEL
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        json_object *pv = J(rows[i].pv);
        if (prov_pv_sync_idle(pv, "d.csi") != rows[i].idle)
            fail_msg("[%s] want idle=%d", rows[i].name, rows[i].idle);
        json_object_put(pv);
    }
    json_object *pv = J("{`metadata`:{}}");
    assert_true(prov_pv_sync_idle(pv, NULL));
    assert_true(prov_pv_sync_idle(NULL, "d.csi"));
    json_object_put(pv);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_identity_is_unix_ms_rand_driver_and_optional_node),
        cmocka_unit_test(test_config_caps_follow_plugin_and_controller_capabilities),
        cmocka_unit_test(test_volume_name_follows_prefix_and_uuid_length),
        cmocka_unit_test(test_classify_create_volume_errors),
        cmocka_unit_test(test_pvc_selected_node_and_class),
        cmocka_unit_test(test_quantity_parse_rounds_up_to_bytes),
        cmocka_unit_test(test_quantity_format_is_binary_si),
        cmocka_unit_test(test_pvc_request_bytes),
        cmocka_unit_test(test_access_mode_table),
        cmocka_unit_test(test_fstype_from_parameters),
        cmocka_unit_test(test_strip_reserved_parameters),
        cmocka_unit_test(test_secret_reference_rules),
        cmocka_unit_test(test_secret_subdomain_length_limit),
        cmocka_unit_test(test_secret_refs_resolve_every_kind_in_order),
        cmocka_unit_test(test_topology_matrix),
        cmocka_unit_test(test_csinode_keys_lookup),
        cmocka_unit_test(test_build_request),
        cmocka_unit_test(test_request_secrets_and_refs),
        cmocka_unit_test(test_deprecated_keys_warn_once_per_build),
        cmocka_unit_test(test_response_checks),
        cmocka_unit_test(test_build_pv_golden),
        cmocka_unit_test(test_build_pv_errors_and_node_affinity),
        cmocka_unit_test(test_pv_sync_idle_table),
        cmocka_unit_test(test_claim_sync_idle_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
