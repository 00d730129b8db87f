/*
 * common/cosi's pure parts and the COSI side of csi_msg_to_text: a table of
 * COSI messages carrying credentials, each rendered as the -v=5 request and
 * response logs render it, must show no secret value (and must still show
 * what is not secret, so the logs stay useful). The typed calls' checks of
 * a driver's answers run against an in-process server that breaks the
 * contract.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cosi/cosi.h"
#include "harness.h"

#define SECRETS_ENTRY(k, v)                                                                        \
    {                                                                                              \
        PROTOBUF_C_MESSAGE_INIT(&cosi__v1alpha1__credential_details__secrets_entry__descriptor),   \
            (k), (v)                                                                               \
    }
#define CRED_ENTRY(k, details)                                                                     \
    {                                                                                              \
        PROTOBUF_C_MESSAGE_INIT(                                                                   \
            &cosi__v1alpha1__driver_grant_bucket_access_response__credentials_entry__descriptor),  \
            (k), (details)                                                                         \
    }

/* Values that must never show, whatever message carries them. */
static const char *const secret_values[] = {"AKSECRETKEYID", "s3-secret-key-value",
                                            "azure-token-value", "gcs-private-key"};

static void assert_no_secret(const char *what, const char *text)
{
    for (size_t i = 0; i < sizeof(secret_values) / sizeof(secret_values[0]); i++)
        if (strstr(text, secret_values[i]))
            fail_msg("%s: \"%s\" shows in %s", what, secret_values[i], text);
}

static void test_credentials_are_redacted_in_every_cosi_message(void **state)
{
    (void)state;
    Cosi__V1alpha1__CredentialDetails__SecretsEntry s3e[] = {
        SECRETS_ENTRY("accessKeyID", "AKSECRETKEYID"),
        SECRETS_ENTRY("accessSecretKey", "s3-secret-key-value"),
        SECRETS_ENTRY("region", "eu-west-1"),
    };
    Cosi__V1alpha1__CredentialDetails__SecretsEntry *s3p[] = {&s3e[0], &s3e[1], &s3e[2]};
    Cosi__V1alpha1__CredentialDetails s3 = COSI__V1ALPHA1__CREDENTIAL_DETAILS__INIT;
    s3.n_secrets = 3;
    s3.secrets = s3p;
    Cosi__V1alpha1__CredentialDetails__SecretsEntry aze[] = {
        SECRETS_ENTRY("accessToken", "azure-token-value"),
    };
    Cosi__V1alpha1__CredentialDetails__SecretsEntry *azp[] = {&aze[0]};
    Cosi__V1alpha1__CredentialDetails az = COSI__V1ALPHA1__CREDENTIAL_DETAILS__INIT;
    az.n_secrets = 1;
    az.secrets = azp;
    Cosi__V1alpha1__CredentialDetails__SecretsEntry gce[] = {
        SECRETS_ENTRY("privateKey", "gcs-private-key"),
    };
    Cosi__V1alpha1__CredentialDetails__SecretsEntry *gcp[] = {&gce[0]};
    Cosi__V1alpha1__CredentialDetails gc = COSI__V1ALPHA1__CREDENTIAL_DETAILS__INIT;
    gc.n_secrets = 1;
    gc.secrets = gcp;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry ce[] = {
        CRED_ENTRY("s3", &s3),
        CRED_ENTRY("azure", &az),
        CRED_ENTRY("gcs", &gc),
    };
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *cep[] = {&ce[0], &ce[1],
                                                                                &ce[2]};
    Cosi__V1alpha1__DriverGrantBucketAccessResponse one =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__INIT;
    one.account_id = "acct-1";
    one.n_credentials = 1;
    one.credentials = cep;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse all = one;
    all.n_credentials = 3;

    const struct {
        const char *name;
        const ProtobufCMessage *msg;
        const char *shows; /* what the text still says */
    } rows[] = {
        {"grant response, s3 keys", &one.base,
         "{\"account_id\":\"acct-1\",\"credentials\":{\"s3\":\"***stripped***\"}}"},
        {"grant response, three protocols", &all.base,
         "{\"account_id\":\"acct-1\",\"credentials\":{\"s3\":\"***stripped***\","
         "\"azure\":\"***stripped***\",\"gcs\":\"***stripped***\"}}"},
        {"credential details on their own", &s3.base, "{\"secrets\":\"***stripped***\"}"},
        {"azure details", &az.base, "{\"secrets\":\"***stripped***\"}"},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        char *text = csi_msg_to_text(rows[i].msg, 0);
        assert_no_secret(rows[i].name, text);
        if (strcmp(text, rows[i].shows) != 0)
            fail_msg("%s: got %s, want %s", rows[i].name, text, rows[i].shows);
        free(text);
        /* A cut text (the attacher's --max-grpc-log-length) is no leak either. */
        for (size_t cut = 1; cut < 80; cut += 7) {
            text = csi_msg_to_text(rows[i].msg, cut);
            assert_no_secret(rows[i].name, text);
            free(text);
        }
    }
}

/* Every map field COSI requests carry is opaque class data (BucketClass and
 * BucketAccessClass parameters, which anyone who reads the class sees), so it
 * is logged, as CSI's parameters are. */
static void test_request_parameters_stay_visible(void **state)
{
    (void)state;
    Cosi__V1alpha1__DriverCreateBucketRequest__ParametersEntry pe = {
        PROTOBUF_C_MESSAGE_INIT(
            &cosi__v1alpha1__driver_create_bucket_request__parameters_entry__descriptor),
        "region", "eu-west-1"};
    Cosi__V1alpha1__DriverCreateBucketRequest__ParametersEntry *pp[] = {&pe};
    Cosi__V1alpha1__DriverCreateBucketRequest req =
        COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_REQUEST__INIT;
    req.name = "bc-1";
    req.n_parameters = 1;
    req.parameters = pp;
    char *text = csi_msg_to_text(&req.base, 0);
    assert_string_equal(text, "{\"name\":\"bc-1\",\"parameters\":{\"region\":\"eu-west-1\"}}");
    free(text);

    Cosi__V1alpha1__DriverGrantBucketAccessRequest g =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_REQUEST__INIT;
    g.bucket_id = "bkt-1";
    g.name = "ba-1";
    g.authentication_type = COSI__V1ALPHA1__AUTHENTICATION_TYPE__IAM;
    text = csi_msg_to_text(&g.base, 0);
    assert_string_equal(
        text, "{\"bucket_id\":\"bkt-1\",\"name\":\"ba-1\",\"authentication_type\":\"IAM\"}");
    free(text);
}

/* The rule of DriverGetInfoResponse.name. */
static void test_driver_name_rule(void **state)
{
    (void)state;
    const struct {
        const char *name;
        bool ok;
    } rows[] = {
        {"cosi.example.com", true},
        {"a", true},
        {"A-1.b", true},
        {"123456789012345678901234567890123456789012345678901234567890123", true},
        {"1234567890123456789012345678901234567890123456789012345678901234", false},
        {"", false},
        {NULL, false},
        {"-cosi", false},
        {"cosi.", false},
        {"cosi_example", false},
        {"cosi example", false},
        {"cösi", false},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++)
        if (cosi_driver_name_valid(rows[i].name) != rows[i].ok)
            fail_msg("\"%s\": want %s", rows[i].name ? rows[i].name : "(null)",
                     rows[i].ok ? "valid" : "invalid");
}

static void test_cosi_credential_finds_a_value_by_protocol_and_key(void **state)
{
    (void)state;
    Cosi__V1alpha1__CredentialDetails__SecretsEntry e = SECRETS_ENTRY("accessKeyID", "AK1");
    Cosi__V1alpha1__CredentialDetails__SecretsEntry *ep[] = {&e};
    Cosi__V1alpha1__CredentialDetails d = COSI__V1ALPHA1__CREDENTIAL_DETAILS__INIT;
    d.n_secrets = 1;
    d.secrets = ep;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry ce = CRED_ENTRY("s3", &d);
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *cep[] = {&ce};
    Cosi__V1alpha1__DriverGrantBucketAccessResponse r =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__INIT;
    r.n_credentials = 1;
    r.credentials = cep;
    assert_string_equal(cosi_credential(&r, "s3", "accessKeyID"), "AK1");
    assert_null(cosi_credential(&r, "s3", "accessSecretKey"));
    assert_null(cosi_credential(&r, "azure", "accessKeyID"));
    assert_null(cosi_credential(NULL, "s3", "accessKeyID"));
}

/* ---- answers that break the contract ---------------------------------------------- */

/* Answers each method with what `ud` (the driver name) makes of it: the
 * name as given, an empty bucket_id, an empty account_id. */
static void broken_driver(void *ud, const char *method, const ProtobufCMessage *req,
                          csi_reply *reply)
{
    (void)req;
    if (strstr(method, "DriverGetInfo")) {
        Cosi__V1alpha1__DriverGetInfoResponse r = COSI__V1ALPHA1__DRIVER_GET_INFO_RESPONSE__INIT;
        r.name = ud;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "DriverCreateBucket")) {
        Cosi__V1alpha1__DriverCreateBucketResponse r =
            COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    } else if (strstr(method, "DriverGrantBucketAccess")) {
        Cosi__V1alpha1__DriverGrantBucketAccessResponse r =
            COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__INIT;
        csi_reply_ok(reply, &r.base);
    } else {
        csi_reply_error(reply, CSI_NOT_FOUND, "%s: nothing here", method);
    }
}

static void test_answers_breaking_the_contract_are_internal(void **state)
{
    (void)state;
    static const char *const names[] = {"", "-bad-", "cosi.ok.example.com"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char *ep = util_asprintf("unix://%s/broken%zu.sock", th_tmpdir(), i);
        csi_server *srv = NULL;
        assert_int_equal(csi_server_new(ep, NULL, &srv), 0);
        assert_int_equal(csi_server_handle_all(srv, &cosi__v1alpha1__identity__descriptor,
                                               broken_driver, (void *)names[i]),
                         0);
        assert_int_equal(csi_server_handle_all(srv, &cosi__v1alpha1__provisioner__descriptor,
                                               broken_driver, (void *)names[i]),
                         0);
        assert_int_equal(csi_server_start(srv), 0);
        csi_conn *c = NULL;
        assert_int_equal(csi_conn_new(ep, NULL, &c), 0);
        csi_status st = {0};
        Cosi__V1alpha1__DriverGetInfoResponse *info = NULL;
        int r = cosi_driver_get_info(c, 5 * UTIL_SECOND, &info, &st);
        if (i < 2) {
            assert_int_equal(r, -EREMOTEIO);
            assert_int_equal(st.code, CSI_INTERNAL);
            assert_null(info);
        } else {
            assert_int_equal(r, 0);
            assert_string_equal(info->name, names[i]);
            cosi__v1alpha1__driver_get_info_response__free_unpacked(info, NULL);
        }
        Cosi__V1alpha1__DriverCreateBucketRequest cr =
            COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_REQUEST__INIT;
        Cosi__V1alpha1__DriverCreateBucketResponse *bucket = NULL;
        assert_int_equal(cosi_create_bucket(c, &cr, 5 * UTIL_SECOND, &bucket, &st), -EREMOTEIO);
        assert_int_equal(st.code, CSI_INTERNAL);
        assert_null(bucket);
        Cosi__V1alpha1__DriverGrantBucketAccessRequest gr =
            COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_REQUEST__INIT;
        Cosi__V1alpha1__DriverGrantBucketAccessResponse *access = NULL;
        assert_int_equal(cosi_grant_bucket_access(c, &gr, 5 * UTIL_SECOND, &access, &st),
                         -EREMOTEIO);
        assert_int_equal(st.code, CSI_INTERNAL);
        assert_null(access);
        /* The driver's own error comes back as it sent it. */
        Cosi__V1alpha1__DriverDeleteBucketRequest dr =
            COSI__V1ALPHA1__DRIVER_DELETE_BUCKET_REQUEST__INIT;
        assert_int_equal(cosi_delete_bucket(c, &dr, 5 * UTIL_SECOND, &st), -EREMOTEIO);
        assert_int_equal(st.code, CSI_NOT_FOUND);
        Cosi__V1alpha1__DriverRevokeBucketAccessRequest rr =
            COSI__V1ALPHA1__DRIVER_REVOKE_BUCKET_ACCESS_REQUEST__INIT;
        assert_int_equal(cosi_revoke_bucket_access(c, &rr, 5 * UTIL_SECOND, &st), -EREMOTEIO);
        assert_int_equal(st.code, CSI_NOT_FOUND);
        csi_conn_free(c);
        csi_server_stop(srv, UTIL_SECOND);
        csi_server_free(srv);
        free(ep);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_credentials_are_redacted_in_every_cosi_message),
        cmocka_unit_test(test_request_parameters_stay_visible),
        cmocka_unit_test(test_driver_name_rule),
        cmocka_unit_test(test_cosi_credential_finds_a_value_by_protocol_and_key),
        cmocka_unit_test(test_answers_breaking_the_contract_are_internal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
