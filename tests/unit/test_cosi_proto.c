/*
 * The COSI v1alpha1 wire contract, checked on the code we link: the
 * protobuf-c descriptors compiled from proto/cosi.proto must print the same
 * facts as tests/unit/cosi-contract.txt, which hack/cosi-contract.py made from
 * the spec's cosi.proto (same fact syntax, documented in the script).
 *
 * Descriptors carry names, numbers, types, labels, oneof membership, map
 * entries, enum values and service methods; they do not carry streaming,
 * syntax, imports, options or the custom option declarations, so those facts
 * are checked by running the script on proto/cosi.proto (when python3 is
 * there; hack/install-deps.sh installs it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cosi.pb-c.h"
#include "harness.h"

#define PACKAGE "cosi.v1alpha1"

/* Every top-level message and enum; nested ones are found through fields. */
static const ProtobufCMessageDescriptor *const root_messages[] = {
    &cosi__v1alpha1__s3__descriptor,
    &cosi__v1alpha1__azure_blob__descriptor,
    &cosi__v1alpha1__gcs__descriptor,
    &cosi__v1alpha1__protocol__descriptor,
    &cosi__v1alpha1__credential_details__descriptor,
    &cosi__v1alpha1__driver_get_info_request__descriptor,
    &cosi__v1alpha1__driver_get_info_response__descriptor,
    &cosi__v1alpha1__driver_create_bucket_request__descriptor,
    &cosi__v1alpha1__driver_create_bucket_response__descriptor,
    &cosi__v1alpha1__driver_delete_bucket_request__descriptor,
    &cosi__v1alpha1__driver_delete_bucket_response__descriptor,
    &cosi__v1alpha1__driver_grant_bucket_access_request__descriptor,
    &cosi__v1alpha1__driver_grant_bucket_access_response__descriptor,
    &cosi__v1alpha1__driver_revoke_bucket_access_request__descriptor,
    &cosi__v1alpha1__driver_revoke_bucket_access_response__descriptor,
};

static const ProtobufCEnumDescriptor *const root_enums[] = {
    &cosi__v1alpha1__s3_signature_version__descriptor,
    &cosi__v1alpha1__anonymous_bucket_access_mode__descriptor,
    &cosi__v1alpha1__authentication_type__descriptor,
};

static const ProtobufCServiceDescriptor *const services[] = {
    &cosi__v1alpha1__identity__descriptor,
    &cosi__v1alpha1__provisioner__descriptor,
};

/*
 * protobuf-c keeps no oneof names: members share the offset of their case
 * field. Naming that field here ties the name to the generated struct, so a
 * renamed oneof fails to compile, and a oneof missing here prints "?".
 */
static const struct {
    const ProtobufCMessageDescriptor *msg;
    size_t case_offset;
    const char *name;
} oneof_names[] = {
    {&cosi__v1alpha1__protocol__descriptor, offsetof(Cosi__V1alpha1__Protocol, type_case), "type"},
};

/* ---- facts ------------------------------------------------------------------- */

typedef struct {
    char **v;
    size_t n, cap;
} facts;

static void facts_take(facts *f, char *line)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->v = realloc(f->v, f->cap * sizeof(*f->v));
        assert_non_null(f->v);
    }
    f->v[f->n++] = line;
}

static void facts_free(facts *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i]);
    free(f->v);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void facts_sort(facts *f)
{
    if (f->n)
        qsort(f->v, f->n, sizeof(*f->v), cmp_str);
}

/* Same spelling as protoc's type names; indexed by ProtobufCType. */
static const char *const scalar_names[] = {
    [PROTOBUF_C_TYPE_INT32] = "int32",       [PROTOBUF_C_TYPE_SINT32] = "sint32",
    [PROTOBUF_C_TYPE_SFIXED32] = "sfixed32", [PROTOBUF_C_TYPE_INT64] = "int64",
    [PROTOBUF_C_TYPE_SINT64] = "sint64",     [PROTOBUF_C_TYPE_SFIXED64] = "sfixed64",
    [PROTOBUF_C_TYPE_UINT32] = "uint32",     [PROTOBUF_C_TYPE_FIXED32] = "fixed32",
    [PROTOBUF_C_TYPE_UINT64] = "uint64",     [PROTOBUF_C_TYPE_FIXED64] = "fixed64",
    [PROTOBUF_C_TYPE_FLOAT] = "float",       [PROTOBUF_C_TYPE_DOUBLE] = "double",
    [PROTOBUF_C_TYPE_BOOL] = "bool",         [PROTOBUF_C_TYPE_STRING] = "string",
    [PROTOBUF_C_TYPE_BYTES] = "bytes",
};

static const char *type_name(const ProtobufCFieldDescriptor *fd)
{
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE)
        return ((const ProtobufCMessageDescriptor *)fd->descriptor)->name;
    if (fd->type == PROTOBUF_C_TYPE_ENUM)
        return ((const ProtobufCEnumDescriptor *)fd->descriptor)->name;
    assert_true((size_t)fd->type < sizeof(scalar_names) / sizeof(scalar_names[0]));
    return scalar_names[fd->type];
}

static const char *label_name(const ProtobufCFieldDescriptor *fd)
{
    switch (fd->label) {
    case PROTOBUF_C_LABEL_REPEATED:
        return "repeated";
    case PROTOBUF_C_LABEL_REQUIRED:
        return "required";
    case PROTOBUF_C_LABEL_OPTIONAL:
        /* proto3: oneof members, or the optional keyword (has_ field) */
        return fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF ? "optional" : "proto3_optional";
    case PROTOBUF_C_LABEL_NONE:
    default:
        return "optional";
    }
}

/*
 * A map field is, on the wire, a repeated message <Field>Entry nested in
 * its message with key = 1 and value = 2; protobuf-c drops the map_entry
 * option, so this is recognised by that shape.
 */
static const ProtobufCMessageDescriptor *map_entry(const ProtobufCMessageDescriptor *msg,
                                                   const ProtobufCFieldDescriptor *fd)
{
    if (fd->type != PROTOBUF_C_TYPE_MESSAGE || fd->label != PROTOBUF_C_LABEL_REPEATED)
        return NULL;
    const ProtobufCMessageDescriptor *e = fd->descriptor;
    size_t pl = strlen(msg->name), sl = strlen(e->short_name);
    if (sl < 5 || strcmp(e->short_name + sl - 5, "Entry") != 0 ||
        strncmp(e->name, msg->name, pl) != 0 || e->name[pl] != '.' ||
        strcmp(e->name + pl + 1, e->short_name) != 0 || e->n_fields != 2)
        return NULL;
    const ProtobufCFieldDescriptor *k = &e->fields[0], *v = &e->fields[1];
    if (k->id != 1 || strcmp(k->name, "key") != 0 || k->label != PROTOBUF_C_LABEL_NONE ||
        v->id != 2 || strcmp(v->name, "value") != 0 || v->label != PROTOBUF_C_LABEL_NONE)
        return NULL;
    return e;
}

static const char *oneof_name(const ProtobufCMessageDescriptor *msg, unsigned case_offset)
{
    for (size_t i = 0; i < sizeof(oneof_names) / sizeof(oneof_names[0]); i++)
        if (oneof_names[i].msg == msg && oneof_names[i].case_offset == case_offset)
            return oneof_names[i].name;
    return "?";
}

/* Descriptors still to print, each once (a fixed bound is plenty here). */
typedef struct {
    const void *seen[128];
    size_t n;
} seen_set;

static bool first_visit(seen_set *s, const void *d)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->seen[i] == d)
            return false;
    assert_true(s->n < sizeof(s->seen) / sizeof(s->seen[0]));
    s->seen[s->n++] = d;
    return true;
}

static void enum_facts(facts *f, const ProtobufCEnumDescriptor *e)
{
    assert_int_equal(e->magic, PROTOBUF_C__ENUM_DESCRIPTOR_MAGIC);
    facts_take(f, util_asprintf("file package %s", e->package_name));
    facts_take(f, util_asprintf("enum %s", e->name));
    for (unsigned i = 0; i < e->n_values; i++)
        facts_take(f, util_asprintf("enum %s value %s %d", e->name, e->values[i].name,
                                    e->values[i].value));
}

static void message_facts(facts *f, seen_set *seen, const ProtobufCMessageDescriptor *m);

/* Types a field refers to, when they are ours (same package). */
static void follow(facts *f, seen_set *seen, const ProtobufCFieldDescriptor *fd)
{
    if (fd->type == PROTOBUF_C_TYPE_MESSAGE) {
        const ProtobufCMessageDescriptor *d = fd->descriptor;
        if (strcmp(d->package_name, PACKAGE) == 0 && first_visit(seen, d))
            message_facts(f, seen, d);
    } else if (fd->type == PROTOBUF_C_TYPE_ENUM) {
        const ProtobufCEnumDescriptor *d = fd->descriptor;
        if (strcmp(d->package_name, PACKAGE) == 0 && first_visit(seen, d))
            enum_facts(f, d);
    }
}

static void message_facts(facts *f, seen_set *seen, const ProtobufCMessageDescriptor *m)
{
    assert_int_equal(m->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
    facts_take(f, util_asprintf("file package %s", m->package_name));
    facts_take(f, util_asprintf("message %s", m->name));
    for (unsigned i = 0; i < m->n_fields; i++) {
        const ProtobufCFieldDescriptor *fd = &m->fields[i];
        const ProtobufCMessageDescriptor *entry = map_entry(m, fd);
        if (entry) {
            /* the entry itself is no message of the contract, its types are */
            first_visit(seen, entry);
            facts_take(f, util_asprintf("message %s field %s %u map<%s,%s> repeated", m->name,
                                        fd->name, fd->id, type_name(&entry->fields[0]),
                                        type_name(&entry->fields[1])));
            follow(f, seen, &entry->fields[1]);
            continue;
        }
        facts_take(f, util_asprintf("message %s field %s %u %s %s", m->name, fd->name, fd->id,
                                    type_name(fd), label_name(fd)));
        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)
            facts_take(f, util_asprintf("message %s oneof %s field %s", m->name,
                                        oneof_name(m, fd->quantifier_offset), fd->name));
        follow(f, seen, fd);
    }
}

static void service_facts(facts *f, const ProtobufCServiceDescriptor *s)
{
    assert_int_equal(s->magic, PROTOBUF_C__SERVICE_DESCRIPTOR_MAGIC);
    facts_take(f, util_asprintf("file package %s", s->package));
    facts_take(f, util_asprintf("service %s", s->name));
    for (unsigned i = 0; i < s->n_methods; i++)
        facts_take(f, util_asprintf("service %s method %s %s -> %s", s->name, s->methods[i].name,
                                    s->methods[i].input->name, s->methods[i].output->name));
}

/* Facts of the compiled proto, sorted, each once. */
static void descriptor_facts(facts *f)
{
    seen_set seen = {.n = 0};
    for (size_t i = 0; i < sizeof(root_messages) / sizeof(root_messages[0]); i++)
        if (first_visit(&seen, root_messages[i]))
            message_facts(f, &seen, root_messages[i]);
    for (size_t i = 0; i < sizeof(root_enums) / sizeof(root_enums[0]); i++)
        if (first_visit(&seen, root_enums[i]))
            enum_facts(f, root_enums[i]);
    for (size_t i = 0; i < sizeof(services) / sizeof(services[0]); i++)
        service_facts(f, services[i]);
    facts_sort(f);
    size_t out = 0;
    for (size_t i = 0; i < f->n; i++) {
        if (out && strcmp(f->v[out - 1], f->v[i]) == 0)
            free(f->v[i]);
        else
            f->v[out++] = f->v[i];
    }
    f->n = out;
}

/* Whether descriptors can show this fact (see the comment at the top). */
static bool descriptors_carry(const char *line)
{
    if (util_has_prefix(line, "file "))
        return util_has_prefix(line, "file package ");
    if (util_has_prefix(line, "extend "))
        return false;
    return !strstr(line, " option ") && !strstr(line, " reserved ") &&
           !strstr(line, " extensions ") && !strstr(line, " streaming ");
}

/* A file of the source tree, found upwards from the build tree (or cwd). */
static char *repo_file(const char *rel)
{
    char *dir = th_build_path(".");
    for (int up = 0; up < 8; up++) {
        char *cand = util_asprintf("%s/%s", dir, rel);
        if (access(cand, R_OK) == 0) {
            free(dir);
            return cand;
        }
        free(cand);
        char *parent = util_asprintf("%s/..", dir);
        free(dir);
        dir = parent;
    }
    free(dir);
    return access(rel, R_OK) == 0 ? util_strdup(rel) : NULL;
}

static void contract_facts(facts *f)
{
    char *path = repo_file("tests/unit/cosi-contract.txt");
    assert_non_null(path);
    FILE *in = fopen(path, "r");
    assert_non_null(in);
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) >= 0) {
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len > 0 && descriptors_carry(line))
            facts_take(f, util_strdup(line));
    }
    free(line);
    fclose(in);
    free(path);
    facts_sort(f);
}

/* ---- tests ------------------------------------------------------------------- */

static void test_descriptors_show_exactly_the_contract_facts(void **state)
{
    (void)state;
    facts want = {0}, got = {0};
    contract_facts(&want);
    descriptor_facts(&got);
    assert_true(want.n > 0);
    size_t i = 0, j = 0, differ = 0;
    while (i < want.n || j < got.n) {
        int c = i == want.n ? 1 : j == got.n ? -1 : strcmp(want.v[i], got.v[j]);
        if (c == 0) {
            i++, j++;
            continue;
        }
        differ++;
        if (c < 0)
            fprintf(stderr, "     contract only:    %s\n", want.v[i++]);
        else
            fprintf(stderr, "     descriptors only: %s\n", got.v[j++]);
    }
    facts_free(&want);
    facts_free(&got);
    if (differ)
        fail_msg("%zu facts of proto/cosi.proto's descriptors differ from "
                 "tests/unit/cosi-contract.txt",
                 differ);
}

/* Byte strings written by hand from the contract's field numbers and types. */
static void test_messages_encode_with_contract_numbers(void **state)
{
    (void)state;
    Cosi__V1alpha1__S3 s3 = COSI__V1ALPHA1__S3__INIT;
    s3.region = "r";
    s3.signature_version = COSI__V1ALPHA1__S3_SIGNATURE_VERSION__S3V4;
    Cosi__V1alpha1__Protocol proto = COSI__V1ALPHA1__PROTOCOL__INIT;
    proto.type_case = COSI__V1ALPHA1__PROTOCOL__TYPE_S3;
    proto.s3 = &s3;
    Cosi__V1alpha1__DriverCreateBucketResponse created =
        COSI__V1ALPHA1__DRIVER_CREATE_BUCKET_RESPONSE__INIT;
    created.bucket_id = "b";
    created.bucket_info = &proto;
    static const uint8_t want_created[] = {
        0x0a, 0x01, 'b', /* 1 bucket_id: "b" */
        0x12, 0x07,      /* 2 bucket_info: Protocol of 7 bytes */
        0x0a, 0x05,      /*   1 s3: S3 of 5 bytes */
        0x0a, 0x01, 'r', /*     1 region: "r" */
        0x10, 0x02,      /*     2 signature_version: S3V4 */
    };
    uint8_t buf[64];
    assert_int_equal(cosi__v1alpha1__driver_create_bucket_response__get_packed_size(&created),
                     sizeof(want_created));
    cosi__v1alpha1__driver_create_bucket_response__pack(&created, buf);
    assert_memory_equal(buf, want_created, sizeof(want_created));

    Cosi__V1alpha1__CredentialDetails__SecretsEntry secret =
        COSI__V1ALPHA1__CREDENTIAL_DETAILS__SECRETS_ENTRY__INIT;
    secret.key = "k";
    secret.value = "v";
    Cosi__V1alpha1__CredentialDetails__SecretsEntry *secrets[] = {&secret};
    Cosi__V1alpha1__CredentialDetails details = COSI__V1ALPHA1__CREDENTIAL_DETAILS__INIT;
    details.n_secrets = 1;
    details.secrets = secrets;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry cred =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__CREDENTIALS_ENTRY__INIT;
    cred.key = "s3";
    cred.value = &details;
    Cosi__V1alpha1__DriverGrantBucketAccessResponse__CredentialsEntry *creds[] = {&cred};
    Cosi__V1alpha1__DriverGrantBucketAccessResponse granted =
        COSI__V1ALPHA1__DRIVER_GRANT_BUCKET_ACCESS_RESPONSE__INIT;
    granted.account_id = "a";
    granted.n_credentials = 1;
    granted.credentials = creds;
    static const uint8_t want_granted[] = {
        0x0a, 0x01, 'a',      /* 1 account_id: "a" */
        0x12, 0x0e,           /* 2 credentials: entry of 14 bytes */
        0x0a, 0x02, 's', '3', /*   1 key: "s3" */
        0x12, 0x08,           /*   2 value: CredentialDetails of 8 bytes */
        0x0a, 0x06,           /*     1 secrets: entry of 6 bytes */
        0x0a, 0x01, 'k',      /*       1 key: "k" */
        0x12, 0x01, 'v',      /*       2 value: "v" */
    };
    assert_int_equal(cosi__v1alpha1__driver_grant_bucket_access_response__get_packed_size(&granted),
                     sizeof(want_granted));
    cosi__v1alpha1__driver_grant_bucket_access_response__pack(&granted, buf);
    assert_memory_equal(buf, want_granted, sizeof(want_granted));

    Cosi__V1alpha1__DriverGrantBucketAccessResponse *back =
        cosi__v1alpha1__driver_grant_bucket_access_response__unpack(NULL, sizeof(want_granted),
                                                                    want_granted);
    assert_non_null(back);
    assert_int_equal(back->n_credentials, 1);
    assert_string_equal(back->credentials[0]->key, "s3");
    assert_int_equal(back->credentials[0]->value->n_secrets, 1);
    assert_string_equal(back->credentials[0]->value->secrets[0]->value, "v");
    cosi__v1alpha1__driver_grant_bucket_access_response__free_unpacked(back, NULL);
}

/* Runs hack/cosi-contract.py --check on `proto`; returns its exit status.
 * Its output goes to stderr, or nowhere when a difference is expected. */
static int run_check(const char *proto, bool quiet)
{
    char *script = repo_file("hack/cosi-contract.py");
    char *contract = repo_file("tests/unit/cosi-contract.txt");
    assert_non_null(script);
    assert_non_null(contract);
    char *cmd = util_asprintf("python3 '%s' --check '%s' '%s' %s", script, proto, contract,
                              quiet ? ">/dev/null 2>&1" : ">&2");
    int rc = system(cmd);
    free(cmd);
    free(script);
    free(contract);
    assert_true(WIFEXITED(rc));
    return WEXITSTATUS(rc);
}

static bool have_python3(void)
{
    return system("command -v python3 >/dev/null 2>&1") == 0;
}

static void test_script_finds_proto_file_equal_to_contract(void **state)
{
    (void)state;
    if (!have_python3())
        skip();
    char *proto = repo_file("proto/cosi.proto");
    assert_non_null(proto);
    assert_int_equal(run_check(proto, false), 0);
    free(proto);
}

/* The script check itself catches a changed field number. */
static void test_script_rejects_a_proto_with_one_number_changed(void **state)
{
    (void)state;
    if (!have_python3())
        skip();
    char *proto = repo_file("proto/cosi.proto");
    assert_non_null(proto);
    FILE *in = fopen(proto, "r");
    assert_non_null(in);
    char *copy = util_asprintf("%s/cosi.proto", th_tmpdir());
    FILE *out = fopen(copy, "w");
    assert_non_null(out);
    char *line = NULL;
    size_t cap = 0;
    int changed = 0;
    while (getline(&line, &cap, in) >= 0) {
        char *at = strstr(line, "string region = 1;");
        if (at) {
            at[strlen("string region = ")] = '7';
            changed++;
        }
        fputs(line, out);
    }
    free(line);
    fclose(in);
    assert_int_equal(fclose(out), 0);
    assert_int_equal(changed, 1);
    assert_int_equal(run_check(copy, true), 1);
    free(copy);
    free(proto);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_descriptors_show_exactly_the_contract_facts),
        cmocka_unit_test(test_messages_encode_with_contract_numbers),
        cmocka_unit_test(test_script_finds_proto_file_equal_to_contract),
        cmocka_unit_test(test_script_rejects_a_proto_with_one_number_changed),
    };
    return cmocka_run_group_tests_name("cosi v1alpha1 wire contract", tests, NULL, NULL);
}
