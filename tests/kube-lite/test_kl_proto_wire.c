/*
 * kube-lite's protobuf decoder against hostile and unusual bytes (table of
 * inputs: truncation, huge lengths, long varints, wrong wire types at any
 * depth, bad values, expansion), proto2 reading rules (packed or not,
 * messages merging, the last scalar winning, unknown fields of every wire
 * type skipped), the Accept negotiation, and the value formats (times,
 * base64, IntOrString) as Go writes them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* ---- a protobuf writer --------------------------------------------------------------------- */

typedef struct pbw {
    unsigned char *b;
    size_t n, cap;
} pbw;

static void pb_raw(pbw *w, const void *p, size_t len)
{
    if (w->n + len > w->cap) {
        w->cap = (w->n + len) * 2 + 64;
        w->b = realloc(w->b, w->cap);
        assert_non_null(w->b);
    }
    if (len)
        memcpy(w->b + w->n, p, len);
    w->n += len;
}

static void pb_varint(pbw *w, uint64_t v)
{
    do {
        unsigned char c = (unsigned char)(v & 0x7f);
        v >>= 7;
        c |= v ? 0x80 : 0;
        pb_raw(w, &c, 1);
    } while (v);
}

static void pb_bytes(pbw *w, unsigned field, const void *p, size_t len)
{
    pb_varint(w, (uint64_t)field << 3 | 2);
    pb_varint(w, len);
    pb_raw(w, p, len);
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

/* "k8s\0" + Unknown{typeMeta{apiVersion, kind}, raw}. */
static pbw envelope(const char *api_version, const char *kind, const pbw *raw)
{
    pbw out = {0}, tm = {0};
    pb_raw(&out, "k8s", 4);
    pb_str(&tm, 1, api_version);
    pb_str(&tm, 2, kind);
    pb_sub(&out, 1, &tm);
    pb_sub(&out, 2, raw);
    free(tm.b);
    return out;
}

static void hex_to(pbw *w, const char *hex)
{
    for (const char *p = hex; p[0] && p[1]; p += 2) {
        unsigned v = 0;
        assert_int_equal(sscanf(p, "%2x", &v), 1);
        unsigned char c = (unsigned char)v;
        pb_raw(w, &c, 1);
    }
}

/* ---- hostile bytes ----------------------------------------------------------------------------
 */

typedef struct hostile {
    const char *name;
    const char *kind; /* bare message of this v1 kind; NULL: hex is a whole body */
    const char *hex;
    int rc;
    const char *msg; /* part of util_err_last(), or NULL */
} hostile;

static const hostile hostiles[] = {
    {"no magic", NULL, "6b3873", -EINVAL, "magic"},
    {"truncated key", NULL, "6b38730080", -EINVAL, "truncated varint"},
    {"length past the end", NULL, "6b3873000aff01", -EINVAL, "beyond the message"},
    {"length near 2^63", NULL, "6b38730012ffffffffffffffff7f", -EINVAL, "beyond the message"},
    {"varint of eleven bytes", "ConfigMap", "08ffffffffffffffffffff01", -EINVAL, NULL},
    {"varint overflowing 64 bits", "ConfigMap", "08ffffffffffffffffff7f", -EINVAL, "overflows"},
    {"group wire type", NULL, "6b3873000b", -EINVAL, "wire type 3"},
    {"field number 0", NULL, "6b3873000200", -EINVAL, "invalid field number"},
    {"truncated fixed64", "ConfigMap", "f90601020304", -EINVAL, "truncated fixed-width"},
    {"metadata as a varint", "ConfigMap", "0807", -EINVAL, "ConfigMap.metadata: wire type 0"},
    {"metadata.name as a varint, one level down", "ConfigMap", "0a020801", -EINVAL,
     "ObjectMeta.name: wire type 0"},
    {"typeMeta as a varint", NULL, "6b3873000801", -EINVAL, "Unknown: field 1"},
    {"Time.seconds length-delimited", "ConfigMap", "0a0442020a00", -EINVAL,
     "Time: field 1 has wire type 2"},
    {"map entry value of the wrong type", "ConfigMap", "12050a01611001", -EINVAL, "map entry"},
    {"map key with a NUL byte", "ConfigMap", "12070a026100120178", -EINVAL, "NUL"},
    {"gzip content encoding", NULL, "6b38730012001a04677a6970", -EINVAL, "content encoding"},
    /* PV spec.capacity[storage] = Quantity{""} and {"abc"}: Go's decoder
     * refuses a quantity it cannot parse. */
    {"empty quantity", "PersistentVolume", "120f0a0d0a0773746f7261676512020a00", -EINVAL, NULL},
    {"unparsable quantity", "PersistentVolume",
     "12120a100a0773746f72616765"
     "12050a03616263",
     -EINVAL, NULL},
    /* Pod spec.containers[0].livenessProbe (10) .handler (1, inline)
     * .httpGet (2) .port (2) = IntOrString{type = 7}. */
    {"IntOrString type 7", "Pod",
     "120c"
     "120a"
     "5208"
     "0a06"
     "1204"
     "1202"
     "0807",
     -EINVAL, "IntOrString.Type"},
    {"Time past year 9999", "ConfigMap", "0a0942070880f092cbdd08", -EINVAL, "outside the years"},
    /* metadata.managedFields (17) [0].fieldsV1 (7) = {Raw = "{{"}. */
    {"FieldsV1 that is no JSON", "ConfigMap",
     "0a09"
     "8a0106"
     "3a04"
     "0a027b7b",
     -EINVAL, "FieldsV1: raw is not JSON"},
    {"unknown fields of every wire type", "ConfigMap",
     "f80601"
     "f9060102030405060708"
     "fa060201ff"
     "fd0601020304",
     0, NULL},
};

static void decode_hex(const hostile *h, int *rc, json_object **out)
{
    pbw w = {0};
    hex_to(&w, h->hex);
    *out = NULL;
    if (h->kind)
        *rc = kl_proto_msg_decode("v1", h->kind, w.b ? w.b : (unsigned char *)"", w.n, out);
    else
        *rc = kl_proto_decode(w.b ? w.b : (unsigned char *)"", w.n, "v1", "ConfigMap", out);
    free(w.b);
}

static void test_hostile_bytes_are_errors_that_name_the_problem(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(hostiles); i++) {
        const hostile *h = &hostiles[i];
        int rc = 0;
        json_object *out = NULL;
        decode_hex(h, &rc, &out);
        if (rc != h->rc)
            fail_msg("[%s] rc %d, want %d (%s)", h->name, rc, h->rc, util_err_last());
        if (h->msg && !strstr(util_err_last(), h->msg))
            fail_msg("[%s] message \"%s\" lacks \"%s\"", h->name, util_err_last(), h->msg);
        assert_true(rc == 0 ? out != NULL : out == NULL);
        json_object_put(out);
    }
}

/* A full object, cut at every length and with every byte corrupted: an
 * error or an object, never a crash (run under ASan+UBSan too). */
static void test_every_cut_and_corruption_of_a_pod_is_survived(void **state)
{
    (void)state;
    const char *js = "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\","
                     "\"namespace\":\"n\",\"labels\":{\"a\":\"b\"},\"creationTimestamp\":"
                     "\"2024-01-01T00:00:00Z\"},\"spec\":{\"containers\":[{\"name\":\"c\","
                     "\"image\":\"i\",\"ports\":[{\"containerPort\":80}],\"livenessProbe\":"
                     "{\"httpGet\":{\"port\":\"http\"}},\"resources\":{\"limits\":{\"cpu\":"
                     "\"1\"}}}],\"volumes\":[{\"name\":\"v\",\"persistentVolumeClaim\":"
                     "{\"claimName\":\"c\"}}]}}";
    json_object *o = kobj_parse_text(js, strlen(js));
    char *pb = NULL;
    size_t n = 0;
    assert_int_equal(kl_proto_encode(o, &pb, &n), 0);
    size_t decoded = 0;
    for (size_t len = 0; len <= n; len++) {
        json_object *out = NULL;
        if (kl_proto_decode(pb, len, NULL, NULL, &out) == 0)
            decoded++;
        json_object_put(out);
    }
    assert_true(decoded >= 1);
    for (size_t i = 4; i < n; i++) {
        for (unsigned bit = 0; bit < 8; bit++) {
            pb[i] = (char)(pb[i] ^ (1u << bit));
            json_object *out = NULL;
            (void)kl_proto_decode(pb, n, NULL, NULL, &out);
            json_object_put(out);
            pb[i] = (char)(pb[i] ^ (1u << bit));
        }
    }
    free(pb);
    json_object_put(o);
}

static void test_a_small_body_cannot_expand_without_bound(void **state)
{
    (void)state;
    /* 2 bytes per empty Container, each a JSON object of its zero fields. */
    pbw spec = {0}, pod = {0};
    for (int i = 0; i < 200000; i++)
        pb_bytes(&spec, 2, "", 0);
    pb_sub(&pod, 2, &spec);
    json_object *out = NULL;
    assert_int_equal(kl_proto_msg_decode("v1", "Pod", pod.b, pod.n, &out), -E2BIG);
    assert_null(out);
    free(spec.b);
    free(pod.b);
}

/* ---- proto2 reading rules ----------------------------------------------------------------------
 */

static void test_repeated_numbers_packed_or_not_messages_merge_last_scalar_wins(void **state)
{
    (void)state;
    /* Pod spec.securityContext.supplementalGroups: 1 unpacked, then 2 and 3
     * packed (proto2 writers do not pack, readers take both). */
    pbw sc = {0}, spec = {0}, pod = {0}, packed = {0};
    pb_int(&sc, 4, 1);
    pb_varint(&packed, 2);
    pb_varint(&packed, 3);
    pb_sub(&sc, 4, &packed);
    pb_sub(&spec, 14, &sc);
    pb_sub(&pod, 2, &spec);
    json_object *out = NULL;
    assert_int_equal(kl_proto_msg_decode("v1", "Pod", pod.b, pod.n, &out), 0);
    char *groups = kobj_to_text(kobj_path(out, "spec.securityContext.supplementalGroups"), NULL);
    assert_string_equal(groups, "[1,2,3]");
    free(groups);
    json_object_put(out);

    /* metadata twice merges; name twice keeps the last. */
    pbw m1 = {0}, m2 = {0}, cm = {0};
    pb_str(&m1, 1, "first");
    pb_str(&m1, 3, "ns");
    pb_str(&m2, 1, "second");
    pb_sub(&cm, 1, &m1);
    pb_sub(&cm, 1, &m2);
    assert_int_equal(kl_proto_msg_decode("v1", "ConfigMap", cm.b, cm.n, &out), 0);
    assert_string_equal(kobj_path_str(out, "metadata.name"), "second");
    assert_string_equal(kobj_path_str(out, "metadata.namespace"), "ns");
    json_object_put(out);
    free(sc.b);
    free(spec.b);
    free(pod.b);
    free(packed.b);
    free(m1.b);
    free(m2.b);
    free(cm.b);
}

static void test_envelope_types_and_defaults(void **state)
{
    (void)state;
    pbw raw = {0}, meta = {0};
    pb_str(&meta, 1, "x");
    pb_sub(&raw, 1, &meta);
    /* No typeMeta: the endpoint's kind, as kube-apiserver decodes. */
    pbw bare = {0};
    pb_raw(&bare, "k8s", 4);
    pb_sub(&bare, 2, &raw);
    json_object *out = NULL;
    assert_int_equal(kl_proto_decode(bare.b, bare.n, "v1", "Secret", &out), 0);
    assert_string_equal(kobj_str(out, "kind"), "Secret");
    assert_string_equal(kobj_str(out, "apiVersion"), "v1");
    json_object_put(out);
    /* DeleteOptions under any group version client-go types it with. */
    static const char *const versions[] = {"v1", "storage.k8s.io/v1", "meta.k8s.io/v1"};
    for (size_t i = 0; i < N_ROWS(versions); i++) {
        pbw opts = {0}, pre = {0};
        pb_str(&pre, 1, "uid-1");
        pb_int(&opts, 1, 0);
        pb_sub(&opts, 2, &pre);
        pb_str(&opts, 4, "Background");
        pbw env = envelope(versions[i], "DeleteOptions", &opts);
        assert_int_equal(kl_proto_decode(env.b, env.n, NULL, NULL, &out), 0);
        assert_string_equal(kobj_path_str(out, "preconditions.uid"), "uid-1");
        assert_string_equal(kobj_str(out, "propagationPolicy"), "Background");
        int64_t grace = -1;
        assert_int_equal(kobj_int64(out, "gracePeriodSeconds", &grace), 0);
        assert_int_equal(grace, 0);
        json_object_put(out);
        free(opts.b);
        free(pre.b);
        free(env.b);
    }
    /* A custom resource: no tables (kube-apiserver's CRD endpoints take no
     * protobuf), so the caller answers 415. */
    pbw cr = envelope("snapshot.storage.k8s.io/v1", "VolumeSnapshot", &raw);
    assert_int_equal(kl_proto_decode(cr.b, cr.n, NULL, NULL, &out), -ENOTSUP);
    free(cr.b);
    free(bare.b);
    free(raw.b);
    free(meta.b);
}

/* ---- values -----------------------------------------------------------------------------------
 */

typedef struct value_row {
    const char *name;
    const char *json; /* written with ' for " */
    const char *path; /* kobj path in the decoded object */
    const char *want; /* its JSON text after the round trip */
} value_row;

static const value_row values[] = {
    {"Time with an offset comes back in UTC",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','creationTimestamp':"
     "'2024-01-01T02:30:00+02:30'}}",
     "metadata.creationTimestamp", "\"2024-01-01T00:00:00Z\""},
    {"Time keeps whole seconds",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','creationTimestamp':"
     "'2024-01-01T00:00:00.999Z'}}",
     "metadata.creationTimestamp", "\"2024-01-01T00:00:00Z\""},
    {"Time before 1970",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','creationTimestamp':"
     "'1969-12-31T23:59:59Z'}}",
     "metadata.creationTimestamp", "\"1969-12-31T23:59:59Z\""},
    {"a Time Go cannot parse is the zero time",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','deletionTimestamp':"
     "'yesterday'}}",
     "metadata.deletionTimestamp", "null"},
    {"MicroTime keeps microseconds, always six digits",
     "{'apiVersion':'coordination.k8s.io/v1','kind':'Lease','metadata':{'name':'l'},'spec':"
     "{'renewTime':'2024-02-29T23:59:59.1234567Z','acquireTime':'2024-01-01T00:00:00Z'}}",
     "spec.renewTime", "\"2024-02-29T23:59:59.123456Z\""},
    {"MicroTime without a fraction gets one",
     "{'apiVersion':'coordination.k8s.io/v1','kind':'Lease','metadata':{'name':'l'},'spec':"
     "{'acquireTime':'2024-01-01T00:00:00Z'}}",
     "spec.acquireTime", "\"2024-01-01T00:00:00.000000Z\""},
    {"Secret bytes: binary, with a line break in the base64",
     "{'apiVersion':'v1','kind':'Secret','metadata':{'name':'s'},'data':{'k':'AAEC\\nAwQF'}}",
     "data.k", "\"AAECAwQF\""},
    {"Secret bytes that are no base64 are empty",
     "{'apiVersion':'v1','kind':'Secret','metadata':{'name':'s'},'data':{'k':'@@'}}", "data.k",
     "\"\""},
    {"a null []byte map value carries the key only",
     "{'apiVersion':'v1','kind':'Secret','metadata':{'name':'s'},'data':{'k':null}}", "data.k",
     "\"\""},
    {"Quantity string unchanged",
     "{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':'p'},'spec':{'capacity':"
     "{'storage':'1024Mi'}}}",
     "spec.capacity.storage", "\"1024Mi\""},
    {"Quantity from a JSON number",
     "{'apiVersion':'v1','kind':'PersistentVolume','metadata':{'name':'p'},'spec':{'capacity':"
     "{'storage':5}}}",
     "spec.capacity.storage", "\"5\""},
    {"int64 past 2^53",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','generation':"
     "9007199254740993}}",
     "metadata.generation", "9007199254740993"},
    {"members the Go struct has not are dropped",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a'},'extra':{'x':1}}", "extra",
     "null"},
    {"a member of the wrong JSON type counts as absent",
     "{'apiVersion':'v1','kind':'Namespace','metadata':{'name':7},'spec':{'finalizers':'x'}}",
     "metadata.name", "null"},
    {"managedFields keep their raw fieldsV1 JSON",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a','managedFields':[{'manager':"
     "'kubectl','operation':'Update','apiVersion':'v1','time':'2024-01-01T00:00:00Z',"
     "'fieldsType':'FieldsV1','fieldsV1':{'f:data':{'.':{},'f:a':{}}}}]}}",
     "metadata.managedFields", NULL},
    {"invalid UTF-8 from the wire becomes U+FFFD (see the hostile rows)",
     "{'apiVersion':'v1','kind':'ConfigMap','metadata':{'name':'a'},'data':{'k':'\\u00e9'}}",
     "data.k", "\"\xc3\xa9\""},
};

static json_object *quoted(const char *text)
{
    char *s = strdup(text);
    assert_non_null(s);
    for (char *c = s; *c; c++)
        if (*c == '\'')
            *c = '"';
    json_object *o = kobj_parse_text(s, strlen(s));
    free(s);
    return o;
}

static void test_values_are_written_as_go_writes_them(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(values); i++) {
        const value_row *r = &values[i];
        json_object *in = quoted(r->json);
        if (!in)
            fail_msg("[%s] bad JSON in the table", r->name);
        char *pb = NULL;
        size_t n = 0;
        json_object *out = NULL;
        if (kl_proto_encode(in, &pb, &n) != 0 || kl_proto_decode(pb, n, NULL, NULL, &out) != 0)
            fail_msg("[%s] %s", r->name, util_err_last());
        json_object *got = kobj_path(out, r->path);
        if (r->want) {
            char *text = kobj_to_text(got, NULL);
            if (strcmp(text, r->want) != 0)
                fail_msg("[%s] %s: got %s, want %s", r->name, r->path, text, r->want);
            free(text);
        } else {
            /* Equal to what went in. */
            assert_true(json_object_equal(got, kobj_path(in, r->path)));
        }
        free(pb);
        json_object_put(in);
        json_object_put(out);
    }
    /* Invalid UTF-8 on the wire: each bad byte one U+FFFD, as encoding/json. */
    pbw cm = {0}, e = {0};
    pb_str(&e, 1, "k");
    pb_bytes(&e, 2, "a\xff\xc3(", 4);
    pb_sub(&cm, 2, &e);
    json_object *out = NULL;
    assert_int_equal(kl_proto_msg_decode("v1", "ConfigMap", cm.b, cm.n, &out), 0);
    assert_string_equal(kobj_path_str(out, "data.k"), "a\xef\xbf\xbd\xef\xbf\xbd(");
    json_object_put(out);
    free(cm.b);
    free(e.b);
}

static void test_base64_as_encoding_json_reads_and_writes_it(void **state)
{
    (void)state;
    static const struct {
        const char *in;
        int rc;
        const char *out_hex;
    } rows[] = {
        {"", 0, ""},
        {"AA==", 0, "00"},
        {"AAE=", 0, "0001"},
        {"AAEC", 0, "000102"},
        {"AA\r\nEC", 0, "000102"},
        {"AA", -EINVAL, NULL},
        {"A===", -EINVAL, NULL},
        {"AA==AA==", -EINVAL, NULL},
        {"-_==", -EINVAL, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        uint8_t *out = NULL;
        size_t n = 0;
        int rc = kl_pb_unbase64(rows[i].in, strlen(rows[i].in), &out, &n);
        if (rc != rows[i].rc)
            fail_msg("\"%s\": rc %d, want %d", rows[i].in, rc, rows[i].rc);
        if (rc == 0) {
            char hex[64] = "";
            for (size_t k = 0; k < n; k++)
                snprintf(hex + 2 * k, 3, "%02x", out[k]);
            assert_string_equal(hex, rows[i].out_hex);
            /* Written back with padding and no line breaks. */
            size_t m = 0;
            char *back = kl_pb_base64(out, n, &m);
            assert_int_equal(m, strlen(back));
            assert_int_equal(m % 4, 0);
            free(back);
        }
        free(out);
    }
}

/* ---- Accept ------------------------------------------------------------------------------------
 */

static void test_accept_negotiation_picks_protobuf_as_kube_apiserver_does(void **state)
{
    (void)state;
    static const struct {
        const char *accept;
        bool proto;
    } rows[] = {
        {NULL, false},
        {"", false},
        {"application/json", false},
        {"*/*", false},
        {"application/vnd.kubernetes.protobuf", true},
        {"application/vnd.kubernetes.protobuf, */*", true},
        {"application/vnd.kubernetes.protobuf,application/json", true},
        {"application/json, application/vnd.kubernetes.protobuf", false},
        {"application/json;q=0.5, application/vnd.kubernetes.protobuf", true},
        {"application/vnd.kubernetes.protobuf;q=0, application/json", false},
        {"*/*, application/vnd.kubernetes.protobuf", true},
        {"application/*, application/vnd.kubernetes.protobuf", true},
        {"application/vnd.kubernetes.protobuf;stream=watch", true},
        {"application/json;as=Table;v=v1;g=meta.k8s.io,application/json", false},
        {"application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
         false},
        {"text/plain, application/vnd.kubernetes.protobuf", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        if (kl_proto_accepts(rows[i].accept) != rows[i].proto)
            fail_msg("Accept \"%s\": want %s", rows[i].accept ? rows[i].accept : "(none)",
                     rows[i].proto ? "protobuf" : "JSON");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hostile_bytes_are_errors_that_name_the_problem),
        cmocka_unit_test(test_every_cut_and_corruption_of_a_pod_is_survived),
        cmocka_unit_test(test_a_small_body_cannot_expand_without_bound),
        cmocka_unit_test(test_repeated_numbers_packed_or_not_messages_merge_last_scalar_wins),
        cmocka_unit_test(test_envelope_types_and_defaults),
        cmocka_unit_test(test_values_are_written_as_go_writes_them),
        cmocka_unit_test(test_base64_as_encoding_json_reads_and_writes_it),
        cmocka_unit_test(test_accept_negotiation_picks_protobuf_as_kube_apiserver_does),
    };
    return cmocka_run_group_tests_name("kube-lite protobuf wire", tests, NULL, NULL);
}
