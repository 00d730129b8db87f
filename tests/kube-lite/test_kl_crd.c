/*
 * kube-lite CustomResourceDefinitions: the structural schema rules (pruning,
 * defaulting, validation with kube-apiserver's wording), one row per rule,
 * and the CRD lifecycle through the API in process (serving, discovery,
 * status conditions, custom objects, the api-approved refusal, deletion).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* JSON written with single quotes, for readable tables. */
static json_object *J(const char *s)
{
    char *d = strdup(s);
    for (char *p = d; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_object *o = json_tokener_parse(d);
    free(d);
    if (o == NULL)
        fail_msg("bad test JSON: %s", s);
    return o;
}

static const char *SCHEMA =
    "{'type':'object','required':['spec'],'properties':{'spec':{'type':'object',"
    "'required':['size'],'properties':{'size':{'type':'string','enum':['small','large']},"
    "'replicas':{'type':'integer','default':1},'ratio':{'type':'number'},"
    "'paused':{'type':'boolean'},'note':{'type':'string','nullable':true},"
    "'port':{'x-kubernetes-int-or-string':true},"
    "'params':{'type':'object','additionalProperties':{'type':'string'}},"
    "'tags':{'type':'array','items':{'type':'string'}},"
    "'extra':{'type':'object','x-kubernetes-preserve-unknown-fields':true}}},"
    "'status':{'type':'object','properties':{'ready':{'type':'boolean'}}}}}";

/* ---- validation ---------------------------------------------------------------- */

struct vrow {
    const char *name;
    const char *obj;
    const char *want; /* the 422 message of a Widget "w", or NULL when valid */
};

static const struct vrow vrows[] = {
    {"valid object", "{'spec':{'size':'small','replicas':2,'tags':['a']}}", NULL},
    {"required spec", "{}", "Widget.demo.example.com \"w\" is invalid: spec: Required value"},
    {"required nested", "{'spec':{}}",
     "Widget.demo.example.com \"w\" is invalid: spec.size: Required value"},
    {"enum", "{'spec':{'size':'huge'}}",
     "Widget.demo.example.com \"w\" is invalid: spec.size: Unsupported value: \"huge\": "
     "supported values: \"small\", \"large\""},
    {"string expected", "{'spec':{'size':1}}",
     "Widget.demo.example.com \"w\" is invalid: spec.size: Invalid value: \"integer\": spec.size "
     "in body must be of type string: \"integer\""},
    {"integer expected", "{'spec':{'size':'small','replicas':1.5}}",
     "Widget.demo.example.com \"w\" is invalid: spec.replicas: Invalid value: \"number\": "
     "spec.replicas in body must be of type integer: \"number\""},
    {"an integral number is an integer", "{'spec':{'size':'small','replicas':2.0}}", NULL},
    {"number accepts integers", "{'spec':{'size':'small','ratio':2}}", NULL},
    {"boolean expected", "{'spec':{'size':'small','paused':'yes'}}",
     "Widget.demo.example.com \"w\" is invalid: spec.paused: Invalid value: \"string\": "
     "spec.paused in body must be of type boolean: \"string\""},
    {"map of strings", "{'spec':{'size':'small','params':{'a':'b','n':true}}}",
     "Widget.demo.example.com \"w\" is invalid: spec.params.n: Invalid value: \"boolean\": "
     "spec.params.n in body must be of type string: \"boolean\""},
    {"array items", "{'spec':{'size':'small','tags':['a',2]}}",
     "Widget.demo.example.com \"w\" is invalid: spec.tags[1]: Invalid value: \"integer\": "
     "spec.tags[1] in body must be of type string: \"integer\""},
    {"array expected", "{'spec':{'size':'small','tags':'a'}}",
     "Widget.demo.example.com \"w\" is invalid: spec.tags: Invalid value: \"string\": spec.tags "
     "in body must be of type array: \"string\""},
    {"nullable accepts null", "{'spec':{'size':'small','note':null}}", NULL},
    {"int-or-string takes both", "{'spec':{'size':'small','port':'http'}}", NULL},
    {"required ones after the members' errors", "{'spec':{'paused':1}}",
     "Widget.demo.example.com \"w\" is invalid: [spec.paused: Invalid value: \"integer\": "
     "spec.paused in body must be of type boolean: \"integer\", spec.size: Required value]"},
    {"several errors are joined", "{'spec':{'size':'huge','paused':1}}",
     "Widget.demo.example.com \"w\" is invalid: [spec.size: Unsupported value: \"huge\": "
     "supported values: \"small\", \"large\", spec.paused: Invalid value: \"integer\": "
     "spec.paused in body must be of type boolean: \"integer\"]"},
};

static const kl_type widget = {.group = "demo.example.com",
                               .version = "v1",
                               .resource = "widgets",
                               .kind = "Widget",
                               .list_kind = "WidgetList",
                               .singular = "widget",
                               .namespaced = true,
                               .custom = true};

static void test_schema_validation_rules_word_errors_as_kube_apiserver(void **state)
{
    (void)state;
    json_object *schema = J(SCHEMA);
    for (size_t i = 0; i < N_ROWS(vrows); i++) {
        json_object *obj = J(vrows[i].obj);
        kl_errs *e = kl_errs_new();
        kl_schema_validate(schema, obj, "", e);
        if (!vrows[i].want) {
            if (kl_errs_count(e))
                fail_msg("[%s] unexpected errors", vrows[i].name);
        } else {
            json_object *st = kl_errs_status(e, &widget, "w");
            const char *msg = kobj_str(st, "message");
            if (!msg || strcmp(msg, vrows[i].want) != 0)
                fail_msg("[%s]\n  got  %s\n  want %s", vrows[i].name, msg ? msg : "(null)",
                         vrows[i].want);
            json_object_put(st);
        }
        kl_errs_free(e);
        json_object_put(obj);
    }
    json_object_put(schema);
}

static void test_prune_drops_unknown_fields_keeps_preserved_and_maps(void **state)
{
    (void)state;
    json_object *schema = J(SCHEMA);
    json_object *obj = J("{'apiVersion':'demo.example.com/v1','kind':'Widget','metadata':{'name':"
                         "'w'},'top':1,'spec':{'size':'small','x':1,'params':{'a':'b'},"
                         "'extra':{'any':{'deep':1}}},'status':{'ready':true,'y':2}}");
    kl_schema_prune(schema, obj, true);
    json_object *want = J("{'apiVersion':'demo.example.com/v1','kind':'Widget','metadata':{'name':"
                          "'w'},'spec':{'size':'small','params':{'a':'b'},"
                          "'extra':{'any':{'deep':1}}},'status':{'ready':true}}");
    if (!json_object_equal(obj, want))
        fail_msg("pruned: %s", json_object_to_json_string(obj));
    json_object_put(obj);
    json_object_put(want);
    json_object_put(schema);
}

static void test_default_fills_absent_and_drops_non_nullable_nulls(void **state)
{
    (void)state;
    json_object *schema = J(SCHEMA);
    json_object *obj = J("{'spec':{'size':'small','paused':null,'note':null}}");
    kl_schema_default(schema, obj);
    json_object *want = J("{'spec':{'size':'small','note':null,'replicas':1}}");
    if (!json_object_equal(obj, want))
        fail_msg("defaulted: %s", json_object_to_json_string(obj));
    json_object_put(obj);
    json_object_put(want);
    json_object_put(schema);
}

/* ---- the lifecycle through the API ------------------------------------------------------ */

#define CRD_FMT                                                                                    \
    "{'apiVersion':'apiextensions.k8s.io/v1','kind':'CustomResourceDefinition','metadata':{"       \
    "'name':'widgets.demo.example.com'},'spec':{'group':'demo.example.com','scope':'Namespaced',"  \
    "'names':{'plural':'widgets','kind':'Widget','shortNames':['wd']},'versions':[{'name':'v1',"   \
    "'served':true,'storage':true,'subresources':{'status':{}},'additionalPrinterColumns':[{"      \
    "'name':'Size','type':'string','jsonPath':'.spec.size'}],'schema':{'openAPIV3Schema':"         \
    "%s}}]}}"

struct env {
    kl_store *s;
    kl_api *a;
};

static int setup(void **state)
{
    struct env *e = calloc(1, sizeof(*e));
    e->s = kl_store_new(1000);
    e->a = kl_api_new(e->s, NULL);
    kl_api_bootstrap(e->a);
    *state = e;
    return 0;
}

static int teardown(void **state)
{
    struct env *e = *state;
    kl_api_free(e->a);
    kl_store_free(e->s);
    free(e);
    return 0;
}

/* A request with a JSON body written with single quotes. */
static int call(struct env *e, const char *method, const char *path, const char *ctype,
                const char *body, json_object **answer)
{
    char *b = body ? strdup(body) : NULL;
    for (char *p = b; p && *p; p++)
        if (*p == '\'')
            *p = '"';
    int code = kl_api_call(e->a, method, path, ctype, b, answer);
    free(b);
    return code;
}

static void create_crd(struct env *e)
{
    char *body = NULL;
    if (asprintf(&body, CRD_FMT, SCHEMA) < 0)
        fail();
    assert_int_equal(call(e, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          "application/json", body, NULL),
                     201);
    free(body);
}

#define WIDGETS "/apis/demo.example.com/v1/namespaces/default/widgets"

static void test_crd_serves_its_type_with_status_conditions_and_discovery(void **state)
{
    struct env *e = *state;
    assert_int_equal(call(e, "GET", WIDGETS, NULL, NULL, NULL), 404);
    create_crd(e);
    json_object *crd = NULL;
    assert_int_equal(call(e, "GET",
                          "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                          "widgets.demo.example.com",
                          NULL, NULL, &crd),
                     200);
    json_object *conds = kobj_path(crd, "status.conditions");
    assert_int_equal(kobj_len(conds), 2);
    assert_string_equal(kobj_str(kobj_at(conds, 0), "type"), "NamesAccepted");
    assert_string_equal(kobj_str(kobj_at(conds, 1), "type"), "Established");
    assert_string_equal(kobj_str(kobj_at(conds, 1), "status"), "True");
    assert_string_equal(kobj_path_str(crd, "status.acceptedNames.listKind"), "WidgetList");
    assert_string_equal(kobj_path_str(crd, "spec.names.singular"), "widget");
    json_object_put(crd);

    json_object *list = NULL;
    assert_int_equal(call(e, "GET", "/apis/demo.example.com/v1", NULL, NULL, &list), 200);
    json_object *res = kobj_arr(list, "resources");
    assert_int_equal(kobj_len(res), 2);
    assert_string_equal(kobj_str(kobj_at(res, 0), "name"), "widgets");
    assert_string_equal(kobj_str(kobj_at(res, 1), "name"), "widgets/status");
    json_object_put(list);
    json_object *groups = NULL;
    assert_int_equal(call(e, "GET", "/apis", NULL, NULL, &groups), 200);
    assert_non_null(strstr(json_object_to_json_string(groups), "\"demo.example.com\""));
    json_object_put(groups);
}

static void test_custom_object_is_defaulted_pruned_validated_and_refuses_smp(void **state)
{
    struct env *e = *state;
    create_crd(e);
    json_object *obj = NULL;
    assert_int_equal(call(e, "POST", WIDGETS, "application/json",
                          "{'apiVersion':'demo.example.com/v1','kind':'Widget','metadata':{"
                          "'name':'w'},'spec':{'size':'small','junk':1},'status':{'ready':true}}",
                          &obj),
                     201);
    assert_int_equal(json_object_get_int(kobj_path(obj, "spec.replicas")), 1);
    assert_null(kobj_path(obj, "spec.junk"));
    assert_null(kobj_get(obj, "status")); /* the status subresource resets it on create */
    json_object_put(obj);

    json_object *st = NULL;
    assert_int_equal(call(e, "PATCH", WIDGETS "/w", "application/merge-patch+json",
                          "{'spec':{'size':'medium'}}", &st),
                     422);
    assert_string_equal(kobj_str(st, "message"),
                        "Widget.demo.example.com \"w\" is invalid: spec.size: Unsupported value: "
                        "\"medium\": supported values: \"small\", \"large\"");
    json_object_put(st);
    assert_int_equal(call(e, "PATCH", WIDGETS "/w", "application/strategic-merge-patch+json",
                          "{'spec':{'size':'large'}}", &st),
                     415);
    json_object_put(st);
    assert_int_equal(call(e, "PATCH", WIDGETS "/w/status", "application/merge-patch+json",
                          "{'status':{'ready':true},'spec':{'size':'large'}}", &obj),
                     200);
    assert_true(json_object_get_boolean(kobj_path(obj, "status.ready")));
    assert_string_equal(kobj_path_str(obj, "spec.size"), "small");
    json_object_put(obj);
}

static void test_deleting_the_crd_stops_serving_and_removes_objects(void **state)
{
    struct env *e = *state;
    create_crd(e);
    assert_int_equal(call(e, "POST", WIDGETS, "application/json",
                          "{'apiVersion':'demo.example.com/v1','kind':'Widget','metadata':{"
                          "'name':'w'},'spec':{'size':'small'}}",
                          NULL),
                     201);
    assert_int_equal(call(e, "DELETE",
                          "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                          "widgets.demo.example.com",
                          NULL, NULL, NULL),
                     200);
    assert_int_equal(call(e, "GET", WIDGETS "/w", NULL, NULL, NULL), 404);
    assert_int_equal(call(e, "GET", "/apis/demo.example.com/v1", NULL, NULL, NULL), 404);
    create_crd(e);
    json_object *list = NULL;
    assert_int_equal(call(e, "GET", WIDGETS, NULL, NULL, &list), 200);
    assert_int_equal(kobj_len(kobj_arr(list, "items")), 0);
    json_object_put(list);
}

#define GADGET_FMT                                                                                 \
    "{'apiVersion':'apiextensions.k8s.io/v1','kind':'CustomResourceDefinition','metadata':{"       \
    "'name':'gadgets.demo.k8s.io'%s},'spec':{'group':'demo.k8s.io','scope':'Cluster',"             \
    "'names':{'plural':'gadgets','kind':'Gadget'},'versions':[{'name':'v1','served':true,"         \
    "'storage':true,'schema':{'openAPIV3Schema':{'type':'object'}}}]}}"

static void test_protected_group_needs_api_approved_annotation(void **state)
{
    struct env *e = *state;
    char *b = NULL;
    json_object *st = NULL;
    if (asprintf(&b, GADGET_FMT, "") < 0)
        fail();
    assert_int_equal(call(e, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          "application/json", b, &st),
                     422);
    assert_string_equal(
        kobj_str(st, "message"),
        "CustomResourceDefinition.apiextensions.k8s.io \"gadgets.demo.k8s.io\" is invalid: "
        "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must "
        "have approval annotation \"api-approved.kubernetes.io\", see "
        "https://github.com/kubernetes/enhancements/pull/1111");
    json_object_put(st);
    free(b);
    if (asprintf(&b, GADGET_FMT, ",'annotations':{'api-approved.kubernetes.io':'bad value'}") < 0)
        fail();
    assert_int_equal(call(e, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          "application/json", b, &st),
                     422);
    assert_non_null(strstr(kobj_str(st, "message"),
                           "Invalid value: \"bad value\": protected groups must have approval "
                           "annotation \"api-approved.kubernetes.io\" with either a URL or a "
                           "reason starting with \"unapproved\""));
    json_object_put(st);
    free(b);
    if (asprintf(&b, GADGET_FMT,
                 ",'annotations':{'api-approved.kubernetes.io':'https://github.com/x/y/pull/1'}") <
        0)
        fail();
    assert_int_equal(call(e, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                          "application/json", b, NULL),
                     201);
    free(b);
}

/* The shape of COSI's BucketClass: fields at the root beside metadata, one
 * of them required and defaulted (the default is applied before the
 * required check, so leaving it out is fine). */
#define CLASS_CRD                                                                                  \
    "{'apiVersion':'apiextensions.k8s.io/v1','kind':'CustomResourceDefinition','metadata':{"       \
    "'name':'bucketclasses.objectstorage.k8s.io','annotations':{'api-approved.kubernetes.io':"     \
    "'https://github.com/kubernetes/enhancements/pull/1979'}},'spec':{'group':"                    \
    "'objectstorage.k8s.io','scope':'Cluster','names':{'plural':'bucketclasses','kind':"           \
    "'BucketClass'},'versions':[{'name':'v1alpha1','served':true,'storage':true,'schema':{"        \
    "'openAPIV3Schema':{'type':'object','required':['deletionPolicy','driverName'],"               \
    "'properties':{'apiVersion':{'type':'string'},'kind':{'type':'string'},'metadata':{'type':"    \
    "'object'},'driverName':{'type':'string'},'deletionPolicy':{'type':'string','default':"        \
    "'Retain'},'parameters':{'type':'object','additionalProperties':{'type':'string'}}}}}}]}}"
#define CRDS    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
#define CLASSES "/apis/objectstorage.k8s.io/v1alpha1/bucketclasses"

static void test_root_level_fields_are_defaulted_before_the_required_check(void **state)
{
    struct env *e = *state;
    assert_int_equal(call(e, "POST", CRDS, "application/json", CLASS_CRD, NULL), 201);
    json_object *obj = NULL;
    assert_int_equal(call(e, "POST", CLASSES, "application/json",
                          "{'apiVersion':'objectstorage.k8s.io/v1alpha1','kind':'BucketClass',"
                          "'metadata':{'name':'c'},'driverName':'d','junk':1}",
                          &obj),
                     201);
    assert_string_equal(kobj_str(obj, "deletionPolicy"), "Retain");
    assert_null(kobj_get(obj, "junk"));
    json_object_put(obj);
    assert_int_equal(call(e, "POST", CLASSES, "application/json",
                          "{'apiVersion':'objectstorage.k8s.io/v1alpha1','kind':'BucketClass',"
                          "'metadata':{'name':'c2'},'deletionPolicy':3,'parameters':{'a':'b'}}",
                          &obj),
                     422);
    assert_string_equal(kobj_str(obj, "message"),
                        "BucketClass.objectstorage.k8s.io \"c2\" is invalid: [deletionPolicy: "
                        "Invalid value: \"integer\": deletionPolicy in body must be of type "
                        "string: \"integer\", driverName: Required value]");
    json_object_put(obj);
}

static const char *cond_field(const json_object *crd, const char *type, const char *key)
{
    json_object *conds = kobj_path(crd, "status.conditions");
    for (size_t i = 0; i < kobj_len(conds); i++)
        if (strcmp(kobj_str(kobj_at(conds, i), "type"), type) == 0)
            return kobj_str(kobj_at(conds, i), key);
    return NULL;
}

/* What kube-apiserver's strategy and its controllers write into a CRD's
 * status: the create answer holds empty accepted names, no conditions and
 * the storage version; then the API approval condition (protected groups
 * only), NamesAccepted and Established, in that order; the approval one
 * follows the annotation. */
static void test_crd_status_from_create_to_approval_condition(void **state)
{
    struct env *e = *state;
    json_object *crd = NULL;
    assert_int_equal(call(e, "POST", CRDS, "application/json", CLASS_CRD, &crd), 201);
    json_object *want = J("{'conditions':null,'acceptedNames':{'plural':'','kind':''},"
                          "'storedVersions':['v1alpha1']}");
    if (!json_object_equal(kobj_obj(crd, "status"), want))
        fail_msg("created: %s", json_object_to_json_string(kobj_obj(crd, "status")));
    json_object_put(want);
    json_object_put(crd);

    const char *path = CRDS "/bucketclasses.objectstorage.k8s.io";
    assert_int_equal(call(e, "GET", path, NULL, NULL, &crd), 200);
    json_object *conds = kobj_path(crd, "status.conditions");
    assert_int_equal(kobj_len(conds), 3);
    assert_string_equal(kobj_str(kobj_at(conds, 0), "type"),
                        "KubernetesAPIApprovalPolicyConformant");
    assert_string_equal(kobj_str(kobj_at(conds, 1), "type"), "NamesAccepted");
    assert_string_equal(kobj_str(kobj_at(conds, 2), "type"), "Established");
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "status"), "True");
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "reason"),
                        "ApprovedAnnotation");
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "message"),
                        "approved in https://github.com/kubernetes/enhancements/pull/1979");
    json_object_put(crd);

    assert_int_equal(call(e, "PATCH", path, "application/merge-patch+json",
                          "{'metadata':{'annotations':{'api-approved.kubernetes.io':"
                          "'unapproved, testing only'}}}",
                          NULL),
                     200);
    assert_int_equal(call(e, "GET", path, NULL, NULL, &crd), 200);
    assert_int_equal(kobj_len(kobj_path(crd, "status.conditions")), 3);
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "status"),
                        "False");
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "reason"),
                        "UnapprovedAnnotation");
    assert_string_equal(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "message"),
                        "not approved: \"unapproved, testing only\"");
    assert_string_equal(cond_field(crd, "Established", "status"), "True");
    assert_string_equal(kobj_str_at(kobj_path(crd, "status.storedVersions"), 0), "v1alpha1");
    json_object_put(crd);

    /* A group that is not protected gets no approval condition. */
    create_crd(e);
    assert_int_equal(call(e, "GET", CRDS "/widgets.demo.example.com", NULL, NULL, &crd), 200);
    assert_null(cond_field(crd, "KubernetesAPIApprovalPolicyConformant", "status"));
    json_object_put(crd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_schema_validation_rules_word_errors_as_kube_apiserver),
        cmocka_unit_test(test_prune_drops_unknown_fields_keeps_preserved_and_maps),
        cmocka_unit_test(test_default_fills_absent_and_drops_non_nullable_nulls),
        cmocka_unit_test_setup_teardown(
            test_crd_serves_its_type_with_status_conditions_and_discovery, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_custom_object_is_defaulted_pruned_validated_and_refuses_smp, setup, teardown),
        cmocka_unit_test_setup_teardown(test_deleting_the_crd_stops_serving_and_removes_objects,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(test_protected_group_needs_api_approved_annotation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(
            test_root_level_fields_are_defaulted_before_the_required_check, setup, teardown),
        cmocka_unit_test_setup_teardown(test_crd_status_from_create_to_approval_condition, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
