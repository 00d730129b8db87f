/*
 * kube-lite validation: names and labels, server-side defaults, quantities,
 * the 422 Status body, and the per-type create and update rules of
 * kube-apiserver 1.32. Every validation row asserts the exact Status message
 * and every cause (reason, field, message), since clients print them
 * verbatim. Table-driven: one row per rule; a failing row names itself.
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

#include "kube-lite/kl.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* JSON written with single quotes, for readable tables. */
static json_object *J(const char *s)
{
    if (s == NULL)
        return NULL;
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

static void expect_str(const char *row, const char *what, const char *got, const char *want)
{
    if (got == NULL)
        got = "(null)";
    if (want == NULL)
        want = "(null)";
    if (strcmp(got, want) != 0)
        fail_msg("[%s] %s:\n  got  \"%s\"\n  want \"%s\"", row, what, got, want);
}

static const kl_type *type_of(const char *group, const char *resource)
{
    size_t n;
    const kl_type *all = kl_types(&n);
    for (size_t i = 0; i < n; i++)
        if (strcmp(all[i].group, group) == 0 && strcmp(all[i].resource, resource) == 0)
            return &all[i];
    fail_msg("no type %s/%s", group, resource);
    return NULL;
}

/* Message texts, written out independently of the implementation. */
#define SUBDOMAIN_MSG                                                                              \
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "   \
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "  \
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
#define LABEL_MSG                                                                                  \
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "   \
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "     \
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
#define QNAME_MSG                                                                                  \
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "  \
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for " \
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
#define QTY_MSG                                                                                    \
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
#define BLOCKED                                                                                    \
    "FieldValueInvalid|<nil>|Invalid value: \"null\": some validation rules were not checked "     \
    "because the object was invalid; correct the existing errors to complete validation"
#define A10  "aaaaaaaaaa"
#define A60  A10 A10 A10 A10 A10 A10
#define A250 A60 A60 A60 A60 A10

/* ---- objects the rows start from --------------------------------------- */

#define PVC_SPEC                                                                                   \
    "'spec':{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}}}"
#define PVC(meta, spec)  "{'metadata':" meta "," spec "}"
#define PVC_OK           PVC("{'name':'p','namespace':'d'}", PVC_SPEC)
#define CSI_SRC          "'csi':{'driver':'hostpath.csi.k8s.io','volumeHandle':'vol-1'}"
#define PV(spec)         "{'metadata':{'name':'pv1'},'spec':" spec "}"
#define PV_OK            PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce']," CSI_SRC "}")
#define VA(spec)         "{'metadata':{'name':'va1'},'spec':" spec "}"
#define VA_SPEC          "{'attacher':'a.csi.io','source':{'persistentVolumeName':'pv1'},'nodeName':'n1'}"
#define VA_OK            VA(VA_SPEC)
#define SC(extra)        "{'metadata':{'name':'fast'},'provisioner':'a.csi.io'" extra "}"
#define CSINODE(drivers) "{'metadata':{'name':'n1'},'spec':{'drivers':" drivers "}}"
#define VS(spec)         "{'metadata':{'name':'s','namespace':'d'},'spec':" spec "}"
#define VSC(spec)        "{'metadata':{'name':'c'},'spec':" spec "}"
#define VSC_SPEC(src, ref)                                                                         \
    "{'deletionPolicy':'Delete','driver':'a.csi.io','source':" src ",'volumeSnapshotRef':" ref "}"
#define REF_OK     "{'name':'s','namespace':'d'}"
#define CAP(extra) "{'metadata':{'name':'c1','namespace':'d'},'storageClassName':'fast'," extra "}"

/* Mutators for rows whose input is too large to write out. */
static void big_annotation(json_object *o)
{
    char *v = malloc(262144);
    memset(v, 'x', 262143);
    v[262143] = '\0';
    json_object *ann = json_object_new_object();
    json_object_object_add(ann, "a", json_object_new_string(v));  /* 1 + 262143 = 262144: ok */
    json_object_object_add(ann, "b", json_object_new_string("")); /* one byte more */
    json_object *meta = NULL;
    json_object_object_get_ex(o, "metadata", &meta);
    json_object_object_add(meta, "annotations", ann);
    free(v);
}

static void long_attach_error(json_object *o)
{
    char v[1026];
    memset(v, 'e', 1025);
    v[1025] = '\0';
    json_object *err = json_object_new_object();
    json_object_object_add(err, "message", json_object_new_string(v));
    json_object *st = json_object_new_object();
    json_object_object_add(st, "detachError", err);
    json_object_object_add(o, "status", st);
}

static void exact_1024_error(json_object *o)
{
    char v[1025];
    memset(v, 'e', 1024);
    v[1024] = '\0';
    json_object *err = json_object_new_object();
    json_object_object_add(err, "message", json_object_new_string(v));
    json_object *st = json_object_new_object();
    json_object_object_add(st, "attachError", err);
    json_object_object_add(o, "status", st);
}

static void long_node_id(json_object *o)
{
    char v[258];
    memset(v, 'i', 257);
    v[257] = '\0';
    json_object *spec = NULL, *drivers = NULL;
    json_object_object_get_ex(o, "spec", &spec);
    json_object_object_get_ex(spec, "drivers", &drivers);
    json_object_object_add(json_object_array_get_idx(drivers, 0), "nodeID",
                           json_object_new_string(v));
}

#define ID257                                                                                      \
    "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii" \
    "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii" \
    "iiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiiii"

/* ---- the validation table ---------------------------------------------- */

typedef struct {
    const char *name;
    const char *group, *resource;
    const char *old; /* NULL: a create */
    const char *obj;
    bool status_only;
    bool raw; /* skip kl_apply_defaults */
    void (*mutate)(json_object *obj);
    const char *message;   /* NULL: valid */
    const char *causes[6]; /* "Reason|field|message" */
} vrow;

static const vrow creates[] = {
    /* metadata */
    {"a minimal PVC is valid",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC_OK,
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"name is required without generateName",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'namespace':'d'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"\" is invalid: metadata.name: Required value: name or generateName "
     "is required",
     {"FieldValueRequired|metadata.name|Required value: name or generateName is required"}},
    {"generateName alone is enough",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'generateName':'p-','namespace':'d'}", PVC_SPEC),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"generateName must be a subdomain prefix",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'generateName':'Px-','namespace':'d'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"\" is invalid: metadata.generateName: Invalid value: "
     "\"Px-\": " SUBDOMAIN_MSG,
     {"FieldValueInvalid|metadata.generateName|Invalid value: \"Px-\": " SUBDOMAIN_MSG}},
    {"an upper-case name is not a subdomain",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'Foo','namespace':'d'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"Foo\" is invalid: metadata.name: Invalid value: "
     "\"Foo\": " SUBDOMAIN_MSG,
     {"FieldValueInvalid|metadata.name|Invalid value: \"Foo\": " SUBDOMAIN_MSG}},
    {"a subdomain name is at most 253 bytes",
     "",
     "persistentvolumes",
     NULL,
     "{'metadata':{'name':'" A250 "aaaa'},'spec':{'capacity':{'storage':'1Gi'},'accessModes':["
     "'ReadWriteOnce']," CSI_SRC "}}",
     false,
     false,
     NULL,
     "PersistentVolume \"" A250 "aaaa\" is invalid: metadata.name: Invalid value: \"" A250
     "aaaa\": must be no more than 253 characters",
     {"FieldValueInvalid|metadata.name|Invalid value: \"" A250
      "aaaa\": must be no more than 253 characters"}},
    {"a namespace name is a DNS label (no dots)",
     "",
     "namespaces",
     NULL,
     "{'metadata':{'name':'a.b'}}",
     false,
     false,
     NULL,
     "Namespace \"a.b\" is invalid: metadata.name: Invalid value: \"a.b\": " LABEL_MSG,
     {"FieldValueInvalid|metadata.name|Invalid value: \"a.b\": " LABEL_MSG}},
    {"RBAC names may not contain a slash",
     "rbac.authorization.k8s.io",
     "roles",
     NULL,
     "{'metadata':{'name':'a/b','namespace':'d'}}",
     false,
     false,
     NULL,
     "Role.rbac.authorization.k8s.io \"a/b\" is invalid: metadata.name: Invalid value: \"a/b\": "
     "may not contain '/'",
     {"FieldValueInvalid|metadata.name|Invalid value: \"a/b\": may not contain '/'"}},
    {"RBAC names may hold colons and capitals",
     "rbac.authorization.k8s.io",
     "clusterroles",
     NULL,
     "{'metadata':{'name':'system:Controller:x'}}",
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"a label key is a qualified name",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','labels':{'-bad':'v'}}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.labels: Invalid value: \"-bad\": " QNAME_MSG,
     {"FieldValueInvalid|metadata.labels|Invalid value: \"-bad\": " QNAME_MSG}},
    {"a label key prefix may not be empty",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','labels':{'/a':'v'}}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.labels: Invalid value: \"/a\": prefix part "
     "must be non-empty",
     {"FieldValueInvalid|metadata.labels|Invalid value: \"/a\": prefix part must be non-empty"}},
    {"a label value is at most 63 bytes",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','labels':{'k':'" A60 "aaaa'}}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.labels: Invalid value: \"" A60
     "aaaa\": must be no more than 63 characters",
     {"FieldValueInvalid|metadata.labels|Invalid value: \"" A60
      "aaaa\": must be no more than 63 characters"}},
    {"annotations together are at most 256 KiB",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC_OK,
     false,
     false,
     big_annotation,
     "PersistentVolumeClaim \"p\" is invalid: metadata.annotations: Too long: may not be more "
     "than 262144 bytes",
     {"FieldValueTooLong|metadata.annotations|Too long: may not be more than 262144 bytes"}},
    {"a finalizer is a qualified name",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','finalizers':['a b']}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.finalizers: Invalid value: \"a "
     "b\": " QNAME_MSG,
     {"FieldValueInvalid|metadata.finalizers|Invalid value: \"a b\": " QNAME_MSG}},
    {"orphan and foregroundDeletion exclude each other",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','finalizers':['orphan','foregroundDeletion']}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.finalizers: Invalid value: "
     "[]string{\"orphan\", \"foregroundDeletion\"}: finalizer orphan and foregroundDeletion "
     "cannot be both set",
     {"FieldValueInvalid|metadata.finalizers|Invalid value: []string{\"orphan\", "
      "\"foregroundDeletion\"}: finalizer orphan and foregroundDeletion cannot be both set"}},
    {"an owner reference needs a uid",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d','ownerReferences':[{'apiVersion':'v1','kind':'Pod','name':"
         "'x'}]}",
         PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.ownerReferences.uid: Invalid value: \"\": "
     "uid must not be empty",
     {"FieldValueInvalid|metadata.ownerReferences.uid|Invalid value: \"\": uid must not be "
      "empty"}},

    /* PersistentVolumeClaim */
    {"a PVC needs an access mode",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}", "'spec':{'resources':{'requests':{'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.accessModes: Required value: at least 1 access "
     "mode is required",
     {"FieldValueRequired|spec.accessModes|Required value: at least 1 access mode is required"}},
    {"an unknown access mode lists the supported ones",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}", "'spec':{'accessModes':['ReadWriteSometimes'],'resources':"
                                         "{'requests':{'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.accessModes: Unsupported value: "
     "\"ReadWriteSometimes\": supported values: \"ReadOnlyMany\", \"ReadWriteMany\", "
     "\"ReadWriteOnce\", \"ReadWriteOncePod\"",
     {"FieldValueNotSupported|spec.accessModes|Unsupported value: \"ReadWriteSometimes\": "
      "supported values: \"ReadOnlyMany\", \"ReadWriteMany\", \"ReadWriteOnce\", "
      "\"ReadWriteOncePod\""}},
    {"ReadWriteOncePod stands alone",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}",
         "'spec':{'accessModes':['ReadWriteOncePod','ReadWriteOnce'],'resources':{'requests':{"
         "'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.accessModes: Forbidden: may not use "
     "ReadWriteOncePod with other access modes",
     {"FieldValueForbidden|spec.accessModes|Forbidden: may not use ReadWriteOncePod with other "
      "access modes"}},
    {"a PVC needs a storage request",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}", "'spec':{'accessModes':['ReadWriteOnce']}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.resources[storage]: Required value",
     {"FieldValueRequired|spec.resources[storage]|Required value"}},
    {"a zero request is shown canonically",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}",
         "'spec':{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'0Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.resources[storage]: Invalid value: \"0\": must "
     "be greater than zero",
     {"FieldValueInvalid|spec.resources[storage]|Invalid value: \"0\": must be greater than "
      "zero"}},
    {"an unparsable request is invalid",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}",
         "'spec':{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'lots'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.resources[storage]: Invalid value: "
     "\"lots\": " QTY_MSG,
     {"FieldValueInvalid|spec.resources[storage]|Invalid value: \"lots\": " QTY_MSG}},
    {"several errors are bracketed in order",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}", "'spec':{}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: [spec.accessModes: Required value: at least 1 "
     "access mode is required, spec.resources[storage]: Required value]",
     {"FieldValueRequired|spec.accessModes|Required value: at least 1 access mode is required",
      "FieldValueRequired|spec.resources[storage]|Required value"}},
    {"a PVC volumeMode is Block or Filesystem",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}",
         "'spec':{'accessModes':['ReadWriteOnce'],'volumeMode':'Raw','resources':{'requests':{"
         "'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.volumeMode: Unsupported value: \"Raw\": "
     "supported values: \"Block\", \"Filesystem\"",
     {"FieldValueNotSupported|spec.volumeMode|Unsupported value: \"Raw\": supported values: "
      "\"Block\", \"Filesystem\""}},
    {"a data source outside the core group names its apiGroup",
     "",
     "persistentvolumeclaims",
     NULL,
     PVC("{'name':'p','namespace':'d'}",
         "'spec':{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'1Gi'}},"
         "'dataSource':{'kind':'VolumeSnapshot','name':'s'}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.dataSource: Invalid value: \"VolumeSnapshot\": "
     "must be 'PersistentVolumeClaim' when referencing the default apiGroup",
     {"FieldValueInvalid|spec.dataSource|Invalid value: \"VolumeSnapshot\": must be "
      "'PersistentVolumeClaim' when referencing the default apiGroup"}},

    /* PersistentVolume */
    {"a CSI PV is valid", "", "persistentvolumes", NULL, PV_OK, false, false, NULL, NULL, {NULL}},
    {"a PV needs capacity.storage",
     "",
     "persistentvolumes",
     NULL,
     PV("{'accessModes':['ReadWriteOnce']," CSI_SRC "}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: [spec.capacity: Required value, spec.capacity: "
     "Unsupported value: core.ResourceList(nil): supported values: \"storage\"]",
     {"FieldValueRequired|spec.capacity|Required value",
      "FieldValueNotSupported|spec.capacity|Unsupported value: core.ResourceList(nil): supported "
      "values: \"storage\""}},
    {"a PV needs an access mode (no detail)",
     "",
     "persistentvolumes",
     NULL,
     PV("{'capacity':{'storage':'1Gi'}," CSI_SRC "}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: spec.accessModes: Required value",
     {"FieldValueRequired|spec.accessModes|Required value"}},
    {"a PV needs a volume source",
     "",
     "persistentvolumes",
     NULL,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce']}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: spec: Required value: must specify a volume type",
     {"FieldValueRequired|spec|Required value: must specify a volume type"}},
    {"a PV has exactly one volume source",
     "",
     "persistentvolumes",
     NULL,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'hostPath':{'path':'/"
        "x'}," CSI_SRC "}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: spec.csi: Forbidden: may not specify more than 1 volume "
     "type",
     {"FieldValueForbidden|spec.csi|Forbidden: may not specify more than 1 volume type"}},
    {"a CSI source needs driver and volumeHandle",
     "",
     "persistentvolumes",
     NULL,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'csi':{}}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: [spec.csi.driver: Required value, spec.csi.driver: "
     "Invalid value: \"\": " SUBDOMAIN_MSG ", spec.csi.volumeHandle: Required value]",
     {"FieldValueRequired|spec.csi.driver|Required value",
      "FieldValueInvalid|spec.csi.driver|Invalid value: \"\": " SUBDOMAIN_MSG,
      "FieldValueRequired|spec.csi.volumeHandle|Required value"}},
    {"a CSI secret reference needs its namespace",
     "",
     "persistentvolumes",
     NULL,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'csi':{'driver':'a.csi.io',"
        "'volumeHandle':'v','nodePublishSecretRef':{'name':'s'}}}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: spec.csi.nodePublishSecretRef.namespace: Required "
     "value",
     {"FieldValueRequired|spec.csi.nodePublishSecretRef.namespace|Required value"}},

    /* VolumeAttachment */
    {"a VolumeAttachment is valid",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA_OK,
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"a VolumeAttachment needs an attacher",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA("{'source':{'persistentVolumeName':'pv1'},'nodeName':'n1'}"),
     false,
     false,
     NULL,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: [spec.attacher: Required value, "
     "spec.attacher: Invalid value: \"\": " SUBDOMAIN_MSG "]",
     {"FieldValueRequired|spec.attacher|Required value",
      "FieldValueInvalid|spec.attacher|Invalid value: \"\": " SUBDOMAIN_MSG}},
    {"a VolumeAttachment needs a source",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA("{'attacher':'a.csi.io','source':{},'nodeName':'n1'}"),
     false,
     false,
     NULL,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: spec.source: Required value: must "
     "specify exactly one of inlineVolumeSpec and persistentVolumeName",
     {"FieldValueRequired|spec.source|Required value: must specify exactly one of "
      "inlineVolumeSpec and persistentVolumeName"}},
    {"a VolumeAttachment has only one source",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA("{'attacher':'a.csi.io','source':{'persistentVolumeName':'pv1','inlineVolumeSpec':{}},"
        "'nodeName':'n1'}"),
     false,
     false,
     NULL,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: spec.source: Forbidden: must specify "
     "exactly one of inlineVolumeSpec and persistentVolumeName",
     {"FieldValueForbidden|spec.source|Forbidden: must specify exactly one of inlineVolumeSpec "
      "and persistentVolumeName"}},
    {"a VolumeAttachment nodeName is a subdomain (empty included)",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA("{'attacher':'a.csi.io','source':{'persistentVolumeName':'pv1'}}"),
     false,
     false,
     NULL,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: spec.nodeName: Invalid value: "
     "\"\": " SUBDOMAIN_MSG,
     {"FieldValueInvalid|spec.nodeName|Invalid value: \"\": " SUBDOMAIN_MSG}},
    {"an error message is at most 1024 bytes (stated as 262144, as kube-apiserver words it)",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA_OK,
     false,
     false,
     long_attach_error,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: status.detachError.message: Too long: "
     "may not be more than 262144 bytes",
     {"FieldValueTooLong|status.detachError.message|Too long: may not be more than 262144 bytes"}},
    {"an error message of exactly 1024 bytes is fine",
     "storage.k8s.io",
     "volumeattachments",
     NULL,
     VA_OK,
     false,
     false,
     exact_1024_error,
     NULL,
     {NULL}},

    /* CSINode */
    {"CSINode drivers are unique",
     "storage.k8s.io",
     "csinodes",
     NULL,
     CSINODE("[{'name':'a.csi.io','nodeID':'n1'},{'name':'a.csi.io','nodeID':'n1'}]"),
     false,
     false,
     NULL,
     "CSINode.storage.k8s.io \"n1\" is invalid: spec.drivers[1].name: Duplicate value: "
     "\"a.csi.io\"",
     {"FieldValueDuplicate|spec.drivers[1].name|Duplicate value: \"a.csi.io\""}},
    {"a CSINode driver needs a nodeID",
     "storage.k8s.io",
     "csinodes",
     NULL,
     CSINODE("[{'name':'a.csi.io'}]"),
     false,
     false,
     NULL,
     "CSINode.storage.k8s.io \"n1\" is invalid: spec.drivers[0].nodeID: Required value",
     {"FieldValueRequired|spec.drivers[0].nodeID|Required value"}},
    {"a nodeID is at most 256 bytes",
     "storage.k8s.io",
     "csinodes",
     NULL,
     CSINODE("[{'name':'a.csi.io','nodeID':'x'}]"),
     false,
     false,
     long_node_id,
     "CSINode.storage.k8s.io \"n1\" is invalid: spec.drivers[0].nodeID: Invalid value: \"" ID257
     "\": must be 256 characters or less",
     {"FieldValueInvalid|spec.drivers[0].nodeID|Invalid value: \"" ID257
      "\": must be 256 characters or less"}},
    {"topology keys are unique",
     "storage.k8s.io",
     "csinodes",
     NULL,
     CSINODE("[{'name':'a.csi.io','nodeID':'n1','topologyKeys':['t.io/zone','t.io/zone']}]"),
     false,
     false,
     NULL,
     "CSINode.storage.k8s.io \"n1\" is invalid: spec.drivers[0]: Duplicate value: \"t.io/zone\"",
     {"FieldValueDuplicate|spec.drivers[0]|Duplicate value: \"t.io/zone\""}},

    /* StorageClass, CSIDriver, CSIStorageCapacity, Lease */
    {"a StorageClass needs a provisioner",
     "storage.k8s.io",
     "storageclasses",
     NULL,
     "{'metadata':{'name':'fast'}}",
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: provisioner: Required value",
     {"FieldValueRequired|provisioner|Required value"}},
    {"a StorageClass reclaimPolicy is Delete or Retain",
     "storage.k8s.io",
     "storageclasses",
     NULL,
     SC(",'reclaimPolicy':'Recycle'"),
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: reclaimPolicy: Unsupported value: "
     "\"Recycle\": supported values: \"Delete\", \"Retain\"",
     {"FieldValueNotSupported|reclaimPolicy|Unsupported value: \"Recycle\": supported values: "
      "\"Delete\", \"Retain\""}},
    {"a VolumeAttributesClass needs a driverName and parameters",
     "storage.k8s.io",
     "volumeattributesclasses",
     NULL,
     "{'metadata':{'name':'gold'}}",
     false,
     false,
     NULL,
     "VolumeAttributesClass.storage.k8s.io \"gold\" is invalid: [driverName: Required value, "
     "parameters: Required value: must contain at least one key/value pair]",
     {"FieldValueRequired|driverName|Required value",
      "FieldValueRequired|parameters|Required value: must contain at least one key/value pair"}},
    {"a VolumeAttributesClass with a driver and a parameter is valid",
     "storage.k8s.io",
     "volumeattributesclasses",
     NULL,
     "{'metadata':{'name':'gold'},'driverName':'a.csi.io','parameters':{'iops':'3000'}}",
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"a CSIDriver lifecycle mode is Persistent or Ephemeral",
     "storage.k8s.io",
     "csidrivers",
     NULL,
     "{'metadata':{'name':'a.csi.io'},'spec':{'volumeLifecycleModes':['Forever']}}",
     false,
     false,
     NULL,
     "CSIDriver.storage.k8s.io \"a.csi.io\" is invalid: spec.volumeLifecycleModes: Unsupported "
     "value: \"Forever\": supported values: \"Persistent\", \"Ephemeral\"",
     {"FieldValueNotSupported|spec.volumeLifecycleModes|Unsupported value: \"Forever\": "
      "supported values: \"Persistent\", \"Ephemeral\""}},
    {"an undefaulted CSIDriver misses attachRequired (upstream's path)",
     "storage.k8s.io",
     "csidrivers",
     NULL,
     "{'metadata':{'name':'a.csi.io'},'spec':{'podInfoOnMount':false,'storageCapacity':false,"
     "'seLinuxMount':false}}",
     false,
     true,
     NULL,
     "CSIDriver.storage.k8s.io \"a.csi.io\" is invalid: spec.attachedRequired: Required value",
     {"FieldValueRequired|spec.attachedRequired|Required value"}},
    {"a capacity may not be negative",
     "storage.k8s.io",
     "csistoragecapacities",
     NULL,
     CAP("'capacity':'-1Gi'"),
     false,
     false,
     NULL,
     "CSIStorageCapacity.storage.k8s.io \"c1\" is invalid: capacity: Invalid value: \"-1Gi\": must "
     "be greater than or equal to 0",
     {"FieldValueInvalid|capacity|Invalid value: \"-1Gi\": must be greater than or equal to 0"}},
    {"a Lease is checked for metadata only",
     "coordination.k8s.io",
     "leases",
     NULL,
     "{'metadata':{'name':'lock','namespace':'d'},'spec':{'holderIdentity':''}}",
     false,
     false,
     NULL,
     NULL,
     {NULL}},

    /* snapshot CRDs */
    {"a VolumeSnapshot has exactly one source",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     NULL,
     VS("{'source':{'persistentVolumeClaimName':'p','volumeSnapshotContentName':'c'}}"),
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"s\" is invalid: spec.source: Invalid value: "
     "\"object\": exactly one of volumeSnapshotContentName and persistentVolumeClaimName must be "
     "set",
     {"FieldValueInvalid|spec.source|Invalid value: \"object\": exactly one of "
      "volumeSnapshotContentName and persistentVolumeClaimName must be set"}},
    {"a missing source blocks the CEL rules",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     NULL,
     VS("{}"),
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"s\" is invalid: [spec.source: Required value, "
     "<nil>: Invalid value: \"null\": some validation rules were not checked because the object "
     "was invalid; correct the existing errors to complete validation]",
     {"FieldValueRequired|spec.source|Required value", BLOCKED}},
    {"a missing name blocks the CEL rules too",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     NULL,
     "{'metadata':{'namespace':'d'},'spec':{'source':{'persistentVolumeClaimName':'p'}}}",
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"\" is invalid: [metadata.name: Required value: "
     "name or generateName is required, <nil>: Invalid value: \"null\": some validation rules "
     "were not checked because the object was invalid; correct the existing errors to complete "
     "validation]",
     {"FieldValueRequired|metadata.name|Required value: name or generateName is required",
      BLOCKED}},
    {"an empty snapshot class name is refused",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     NULL,
     VS("{'source':{'persistentVolumeClaimName':'p'},'volumeSnapshotClassName':''}"),
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"s\" is invalid: spec.volumeSnapshotClassName: "
     "Invalid value: \"string\": volumeSnapshotClassName must not be the empty string when set",
     {"FieldValueInvalid|spec.volumeSnapshotClassName|Invalid value: \"string\": "
      "volumeSnapshotClassName must not be the empty string when set"}},
    {"a VolumeSnapshotContent is valid",
     "snapshot.storage.k8s.io",
     "volumesnapshotcontents",
     NULL,
     VSC(VSC_SPEC("{'volumeHandle':'v'}", REF_OK)),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"a content has exactly one handle",
     "snapshot.storage.k8s.io",
     "volumesnapshotcontents",
     NULL,
     VSC(VSC_SPEC("{'volumeHandle':'v','snapshotHandle':'s'}", REF_OK)),
     false,
     false,
     NULL,
     "VolumeSnapshotContent.snapshot.storage.k8s.io \"c\" is invalid: spec.source: Invalid value: "
     "\"object\": exactly one of volumeHandle and snapshotHandle must be set",
     {"FieldValueInvalid|spec.source|Invalid value: \"object\": exactly one of volumeHandle and "
      "snapshotHandle must be set"}},
    {"a content's snapshot reference needs name and namespace",
     "snapshot.storage.k8s.io",
     "volumesnapshotcontents",
     NULL,
     VSC(VSC_SPEC("{'snapshotHandle':'s'}", "{'name':'s'}")),
     false,
     false,
     NULL,
     "VolumeSnapshotContent.snapshot.storage.k8s.io \"c\" is invalid: spec.volumeSnapshotRef: "
     "Invalid value: \"object\": both spec.volumeSnapshotRef.name and "
     "spec.volumeSnapshotRef.namespace must be set",
     {"FieldValueInvalid|spec.volumeSnapshotRef|Invalid value: \"object\": both "
      "spec.volumeSnapshotRef.name and spec.volumeSnapshotRef.namespace must be set"}},
    {"an unknown deletionPolicy blocks the CEL rules",
     "snapshot.storage.k8s.io",
     "volumesnapshotcontents",
     NULL,
     VSC("{'deletionPolicy':'Keep','driver':'a.csi.io','source':{},'volumeSnapshotRef':{}}"),
     false,
     false,
     NULL,
     "VolumeSnapshotContent.snapshot.storage.k8s.io \"c\" is invalid: [spec.deletionPolicy: "
     "Unsupported value: \"Keep\": supported values: \"Delete\", \"Retain\", <nil>: Invalid value: "
     "\"null\": some validation rules were not checked because the object was invalid; correct "
     "the existing errors to complete validation]",
     {"FieldValueNotSupported|spec.deletionPolicy|Unsupported value: \"Keep\": supported values: "
      "\"Delete\", \"Retain\"",
      BLOCKED}},
};

/* Update rows: `old` is the stored object, `obj` the write. */
#define OLD_DELETING                                                                               \
    PVC("{'name':'p','namespace':'d','uid':'u1','deletionTimestamp':'2024-01-01T00:00:00Z',"       \
        "'finalizers':['a.io/x']}",                                                                \
        PVC_SPEC)
#define BOUND(spec, cap)                                                                           \
    "{'metadata':{'name':'p','namespace':'d'},'spec':" spec                                        \
    ",'status':{'phase':'Bound','capacity':{'storage':'" cap "'}}}"
#define CLAIM(size)                                                                                \
    "{'accessModes':['ReadWriteOnce'],'resources':{'requests':{'storage':'" size "'}}}"
#define PENDING(spec) "{'metadata':{'name':'p','namespace':'d'},'spec':" spec "}"
#define PV_AFF(aff)                                                                                \
    PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce']," CSI_SRC                    \
       ",'nodeAffinity':" aff "}")
#define AFF(zone)                                                                                  \
    "{'required':{'nodeSelectorTerms':[{'matchExpressions':[{'key':'zone','operator':'In',"        \
    "'values':['" zone "']}]}]}}"

static const vrow updates[] = {
    {"name is immutable",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PVC("{'name':'q','namespace':'d'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"q\" is invalid: metadata.name: Invalid value: \"q\": field is "
     "immutable",
     {"FieldValueInvalid|metadata.name|Invalid value: \"q\": field is immutable"}},
    {"uid is immutable",
     "",
     "persistentvolumeclaims",
     PVC("{'name':'p','namespace':'d','uid':'u1'}", PVC_SPEC),
     PVC("{'name':'p','namespace':'d','uid':'u2'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.uid: Invalid value: \"u2\": field is "
     "immutable",
     {"FieldValueInvalid|metadata.uid|Invalid value: \"u2\": field is immutable"}},
    {"creationTimestamp is immutable (Go time text)",
     "",
     "persistentvolumeclaims",
     PVC("{'name':'p','namespace':'d','creationTimestamp':'2024-01-01T00:00:00Z'}", PVC_SPEC),
     PVC("{'name':'p','namespace':'d','creationTimestamp':'2024-02-01T10:20:30Z'}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.creationTimestamp: Invalid value: "
     "2024-02-01 10:20:30 +0000 UTC: field is immutable",
     {"FieldValueInvalid|metadata.creationTimestamp|Invalid value: 2024-02-01 10:20:30 +0000 UTC: "
      "field is immutable"}},
    {"no finalizer may be added while deleting",
     "",
     "persistentvolumeclaims",
     OLD_DELETING,
     PVC("{'name':'p','namespace':'d','uid':'u1','deletionTimestamp':'2024-01-01T00:00:00Z',"
         "'finalizers':['a.io/x','b.io/y']}",
         PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.finalizers: Forbidden: no new finalizers "
     "can be added if the object is being deleted, found new finalizers []string{\"b.io/y\"}",
     {"FieldValueForbidden|metadata.finalizers|Forbidden: no new finalizers can be added if the "
      "object is being deleted, found new finalizers []string{\"b.io/y\"}"}},
    {"finalizers may be removed while deleting",
     "",
     "persistentvolumeclaims",
     OLD_DELETING,
     PVC("{'name':'p','namespace':'d','uid':'u1','deletionTimestamp':'2024-01-01T00:00:00Z'}",
         PVC_SPEC),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"labels are still checked on update",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PVC("{'name':'p','namespace':'d','labels':{'a':'-x'}}", PVC_SPEC),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: metadata.labels: Invalid value: \"-x\": a valid "
     "label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and "
     "must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
     "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')",
     {"FieldValueInvalid|metadata.labels|Invalid value: \"-x\": a valid label must be an empty "
      "string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
      "an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for "
      "validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"}},

    /* PersistentVolume */
    {"the PV source is immutable",
     "",
     "persistentvolumes",
     PV_OK,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'csi':{'driver':"
        "'hostpath.csi.k8s.io','volumeHandle':'vol-2'}}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: spec.persistentvolumesource: Forbidden: "
     "spec.persistentvolumesource is immutable after creation\n"
     "  core.PersistentVolumeSource{\n"
     "- \tCSI: {\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"vol-1\"},\n"
     "+ \tCSI: {\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"vol-2\"},\n"
     "  }\n",
     {"FieldValueForbidden|spec.persistentvolumesource|Forbidden: spec.persistentvolumesource is "
      "immutable after creation\n"
      "  core.PersistentVolumeSource{\n"
      "- \tCSI: {\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"vol-1\"},\n"
      "+ \tCSI: {\"driver\":\"hostpath.csi.k8s.io\",\"volumeHandle\":\"vol-2\"},\n"
      "  }\n"}},
    {"controllerExpandSecretRef may be added",
     "",
     "persistentvolumes",
     PV_OK,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'csi':{'driver':"
        "'hostpath.csi.k8s.io','volumeHandle':'vol-1','controllerExpandSecretRef':{'name':'s',"
        "'namespace':'d'}}}"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"PV volumeMode is immutable (upstream's path)",
     "",
     "persistentvolumes",
     PV_OK,
     PV("{'capacity':{'storage':'1Gi'},'accessModes':['ReadWriteOnce'],'volumeMode':'Block'"
        "," CSI_SRC "}"),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: volumeMode: Invalid value: \"Block\": field is "
     "immutable",
     {"FieldValueInvalid|volumeMode|Invalid value: \"Block\": field is immutable"}},
    {"PV nodeAffinity is immutable once set",
     "",
     "persistentvolumes",
     PV_AFF(AFF("a")),
     PV_AFF(AFF("b")),
     false,
     false,
     NULL,
     "PersistentVolume \"pv1\" is invalid: nodeAffinity: Invalid value: "
     "core.VolumeNodeAffinity{Required:(*core.NodeSelector)(0xc000100000)}: field is immutable",
     {"FieldValueInvalid|nodeAffinity|Invalid value: "
      "core.VolumeNodeAffinity{Required:(*core.NodeSelector)(0xc000100000)}: field is "
      "immutable"}},
    {"PV nodeAffinity may be set the first time",
     "",
     "persistentvolumes",
     PV_OK,
     PV_AFF(AFF("a")),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"PV capacity, class and claimRef are mutable",
     "",
     "persistentvolumes",
     PV_OK,
     PV("{'capacity':{'storage':'2Gi'},'accessModes':['ReadWriteOnce'],'storageClassName':'x',"
        "'claimRef':{'name':'p','namespace':'d'}," CSI_SRC "}"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},

    /* PersistentVolumeClaim */
    {"volumeName may be set once",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeName':'pv1','resources':{'requests':{"
             "'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"volumeName may not change once set",
     "",
     "persistentvolumeclaims",
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeName':'pv1','resources':{'requests':{"
             "'storage':'1Gi'}}}"),
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeName':'pv2','resources':{'requests':{"
             "'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec: Forbidden: spec is immutable after creation "
     "except resources.requests and volumeAttributesClassName for bound claims\n"
     "  core.PersistentVolumeClaimSpec{\n"
     "- \tVolumeName: \"pv1\",\n"
     "+ \tVolumeName: \"pv2\",\n"
     "  }\n",
     {"FieldValueForbidden|spec|Forbidden: spec is immutable after creation except "
      "resources.requests and volumeAttributesClassName for bound claims\n"
      "  core.PersistentVolumeClaimSpec{\n"
      "- \tVolumeName: \"pv1\",\n"
      "+ \tVolumeName: \"pv2\",\n"
      "  }\n"}},
    {"access modes are immutable",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING("{'accessModes':['ReadWriteMany'],'resources':{'requests':{'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec: Forbidden: spec is immutable after creation "
     "except resources.requests and volumeAttributesClassName for bound claims\n"
     "  core.PersistentVolumeClaimSpec{\n"
     "- \tAccessModes: [\"ReadWriteOnce\"],\n"
     "+ \tAccessModes: [\"ReadWriteMany\"],\n"
     "  }\n",
     {"FieldValueForbidden|spec|Forbidden: spec is immutable after creation except "
      "resources.requests and volumeAttributesClassName for bound claims\n"
      "  core.PersistentVolumeClaimSpec{\n"
      "- \tAccessModes: [\"ReadWriteOnce\"],\n"
      "+ \tAccessModes: [\"ReadWriteMany\"],\n"
      "  }\n"}},
    {"a bound claim may grow",
     "",
     "persistentvolumeclaims",
     BOUND(CLAIM("1Gi"), "1Gi"),
     BOUND(CLAIM("2Gi"), "1Gi"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"an equal quantity in other units is no change",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING(CLAIM("1024Mi")),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"a pending claim may not change its request",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING(CLAIM("2Gi")),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec: Forbidden: spec is immutable after creation "
     "except resources.requests and volumeAttributesClassName for bound claims\n"
     "  core.PersistentVolumeClaimSpec{\n"
     "- \tResources: {\"requests\":{\"storage\":1073741824}},\n"
     "+ \tResources: {\"requests\":{\"storage\":2147483648}},\n"
     "  }\n",
     {"FieldValueForbidden|spec|Forbidden: spec is immutable after creation except "
      "resources.requests and volumeAttributesClassName for bound claims\n"
      "  core.PersistentVolumeClaimSpec{\n"
      "- \tResources: {\"requests\":{\"storage\":1073741824}},\n"
      "+ \tResources: {\"requests\":{\"storage\":2147483648}},\n"
      "  }\n"}},
    {"a claim may not shrink to its capacity",
     "",
     "persistentvolumeclaims",
     BOUND(CLAIM("3Gi"), "2Gi"),
     BOUND(CLAIM("2Gi"), "2Gi"),
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.resources.requests.storage: Forbidden: field "
     "can not be less than status.capacity",
     {"FieldValueForbidden|spec.resources.requests.storage|Forbidden: field can not be less than "
      "status.capacity"}},
    {"a failed expansion may be walked back above capacity",
     "",
     "persistentvolumeclaims",
     BOUND(CLAIM("3Gi"), "2Gi"),
     BOUND(CLAIM("2500Mi"), "2Gi"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"storageClassName may be set from unset",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING("{'accessModes':['ReadWriteOnce'],'storageClassName':'fast','resources':{'requests':"
             "{'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"volumeAttributesClassName is mutable",
     "",
     "persistentvolumeclaims",
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeAttributesClassName':'gold','resources':{"
             "'requests':{'storage':'1Gi'}}}"),
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeAttributesClassName':'silver','resources':{"
             "'requests':{'storage':'1Gi'}}}"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"volumeAttributesClassName may not be unset",
     "",
     "persistentvolumeclaims",
     PENDING("{'accessModes':['ReadWriteOnce'],'volumeAttributesClassName':'gold','resources':{"
             "'requests':{'storage':'1Gi'}}}"),
     PVC_OK,
     false,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: spec.volumeAttributesClassName: Forbidden: update "
     "from non-nil value to nil is forbidden",
     {"FieldValueForbidden|spec.volumeAttributesClassName|Forbidden: update from non-nil value to "
      "nil is forbidden"}},
    {"a /status write skips the spec rules",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PENDING("{'accessModes':['ReadWriteMany']}"),
     true,
     false,
     NULL,
     NULL,
     {NULL}},

    /* VolumeAttachment */
    {"a VolumeAttachment spec is immutable",
     "storage.k8s.io",
     "volumeattachments",
     VA_OK,
     VA("{'attacher':'a.csi.io','source':{'persistentVolumeName':'pv1'},'nodeName':'n2'}"),
     false,
     false,
     NULL,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: spec: Invalid value: "
     "storage.VolumeAttachmentSpec{Attacher:\"a.csi.io\", "
     "Source:storage.VolumeAttachmentSource{PersistentVolumeName:(*string)(0xc000100000), "
     "InlineVolumeSpec:(*core.PersistentVolumeSpec)(nil)}, NodeName:\"n2\"}: field is immutable",
     {"FieldValueInvalid|spec|Invalid value: storage.VolumeAttachmentSpec{Attacher:\"a.csi.io\", "
      "Source:storage.VolumeAttachmentSource{PersistentVolumeName:(*string)(0xc000100000), "
      "InlineVolumeSpec:(*core.PersistentVolumeSpec)(nil)}, NodeName:\"n2\"}: field is "
      "immutable"}},
    /* An update validates the VolumeAttachment twice (strategy.go's
     * ValidateUpdate), so its status errors come twice; the message says it once. */
    {"a /status write keeps the error length rule",
     "storage.k8s.io",
     "volumeattachments",
     VA_OK,
     VA_OK,
     true,
     false,
     long_attach_error,
     "VolumeAttachment.storage.k8s.io \"va1\" is invalid: status.detachError.message: Too long: "
     "may not be more than 262144 bytes",
     {"FieldValueTooLong|status.detachError.message|Too long: may not be more than 262144 bytes",
      "FieldValueTooLong|status.detachError.message|Too long: may not be more than 262144 bytes"}},
    {"a /status write ignores spec changes",
     "storage.k8s.io",
     "volumeattachments",
     VA_OK,
     VA("{'attacher':'a.csi.io','source':{},'nodeName':'n2'}"),
     true,
     false,
     NULL,
     NULL,
     {NULL}},

    /* StorageClass */
    /* VolumeAttributesClass */
    {"VolumeAttributesClass driverName and parameters are immutable",
     "storage.k8s.io",
     "volumeattributesclasses",
     "{'metadata':{'name':'gold'},'driverName':'a.csi.io','parameters':{'iops':'1'}}",
     "{'metadata':{'name':'gold'},'driverName':'b.csi.io','parameters':{'iops':'2'}}",
     false,
     false,
     NULL,
     "VolumeAttributesClass.storage.k8s.io \"gold\" is invalid: [driverName: Forbidden: updates "
     "to driverName are forbidden., parameters: Forbidden: updates to parameters are forbidden.]",
     {"FieldValueForbidden|driverName|Forbidden: updates to driverName are forbidden.",
      "FieldValueForbidden|parameters|Forbidden: updates to parameters are forbidden."}},
    {"a claim's modifyVolumeStatus.status is Pending, InProgress or Infeasible",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PVC("{'name':'p','namespace':'d'}",
         PVC_SPEC ",'status':{'modifyVolumeStatus':{'status':'Done'}}"),
     true,
     false,
     NULL,
     "PersistentVolumeClaim \"p\" is invalid: status.modifyVolumeStatus.status: Unsupported "
     "value: \"Done\": supported values: \"InProgress\", \"Infeasible\", \"Pending\"",
     {"FieldValueNotSupported|status.modifyVolumeStatus.status|Unsupported value: \"Done\": "
      "supported values: \"InProgress\", \"Infeasible\", \"Pending\""}},
    {"a claim's modify status and current class through /status are valid",
     "",
     "persistentvolumeclaims",
     PVC_OK,
     PVC("{'name':'p','namespace':'d'}",
         PVC_SPEC ",'status':{'currentVolumeAttributesClassName':'gold','modifyVolumeStatus':{"
                  "'status':'InProgress','targetVolumeAttributesClassName':'silver'}}"),
     true,
     false,
     NULL,
     NULL,
     {NULL}},

    {"StorageClass parameters are immutable",
     "storage.k8s.io",
     "storageclasses",
     SC(",'parameters':{'type':'ssd'}"),
     SC(",'parameters':{'type':'hdd'}"),
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: parameters: Forbidden: updates to "
     "parameters are forbidden.",
     {"FieldValueForbidden|parameters|Forbidden: updates to parameters are forbidden."}},
    {"StorageClass provisioner is immutable",
     "storage.k8s.io",
     "storageclasses",
     SC(""),
     "{'metadata':{'name':'fast'},'provisioner':'b.csi.io'}",
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: provisioner: Forbidden: updates to "
     "provisioner are forbidden.",
     {"FieldValueForbidden|provisioner|Forbidden: updates to provisioner are forbidden."}},
    {"StorageClass reclaimPolicy is immutable",
     "storage.k8s.io",
     "storageclasses",
     SC(""),
     SC(",'reclaimPolicy':'Retain'"),
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: reclaimPolicy: Forbidden: updates to "
     "reclaimPolicy are forbidden.",
     {"FieldValueForbidden|reclaimPolicy|Forbidden: updates to reclaimPolicy are forbidden."}},
    {"StorageClass volumeBindingMode is immutable",
     "storage.k8s.io",
     "storageclasses",
     SC(""),
     SC(",'volumeBindingMode':'WaitForFirstConsumer'"),
     false,
     false,
     NULL,
     "StorageClass.storage.k8s.io \"fast\" is invalid: volumeBindingMode: Invalid value: "
     "\"WaitForFirstConsumer\": field is immutable",
     {"FieldValueInvalid|volumeBindingMode|Invalid value: \"WaitForFirstConsumer\": field is "
      "immutable"}},
    {"StorageClass labels and allowVolumeExpansion are mutable",
     "storage.k8s.io",
     "storageclasses",
     SC(""),
     "{'metadata':{'name':'fast','labels':{'a':'b'}},'provisioner':'a.csi.io',"
     "'allowVolumeExpansion':true}",
     false,
     false,
     NULL,
     NULL,
     {NULL}},

    /* CSIDriver, CSINode, CSIStorageCapacity */
    {"CSIDriver attachRequired is immutable",
     "storage.k8s.io",
     "csidrivers",
     "{'metadata':{'name':'a.csi.io'},'spec':{}}",
     "{'metadata':{'name':'a.csi.io'},'spec':{'attachRequired':false}}",
     false,
     false,
     NULL,
     "CSIDriver.storage.k8s.io \"a.csi.io\" is invalid: spec.attachedRequired: Invalid value: "
     "false: field is immutable",
     {"FieldValueInvalid|spec.attachedRequired|Invalid value: false: field is immutable"}},
    {"CSIDriver lifecycle modes are immutable",
     "storage.k8s.io",
     "csidrivers",
     "{'metadata':{'name':'a.csi.io'},'spec':{}}",
     "{'metadata':{'name':'a.csi.io'},'spec':{'volumeLifecycleModes':['Persistent','Ephemeral']}}",
     false,
     false,
     NULL,
     "CSIDriver.storage.k8s.io \"a.csi.io\" is invalid: spec.volumeLifecycleModes: Invalid value: "
     "[]storage.VolumeLifecycleMode{\"Persistent\", \"Ephemeral\"}: field is immutable",
     {"FieldValueInvalid|spec.volumeLifecycleModes|Invalid value: "
      "[]storage.VolumeLifecycleMode{\"Persistent\", \"Ephemeral\"}: field is immutable"}},
    {"CSIDriver podInfoOnMount is mutable in 1.32",
     "storage.k8s.io",
     "csidrivers",
     "{'metadata':{'name':'a.csi.io'},'spec':{}}",
     "{'metadata':{'name':'a.csi.io'},'spec':{'podInfoOnMount':true}}",
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"an existing CSINode driver entry is immutable (1.32 path)",
     "storage.k8s.io",
     "csinodes",
     CSINODE("[{'name':'a.csi.io','nodeID':'n1'}]"),
     CSINODE("[{'name':'a.csi.io','nodeID':'n2','topologyKeys':['t.io/zone']}]"),
     false,
     false,
     NULL,
     "CSINode.storage.k8s.io \"n1\" is invalid: CSINodeDriver: Invalid value: "
     "storage.CSINodeDriver{Name:\"a.csi.io\", NodeID:\"n2\", "
     "TopologyKeys:[]string{\"t.io/zone\"}, "
     "Allocatable:(*storage.VolumeNodeResources)(nil)}: field is immutable",
     {"FieldValueInvalid|CSINodeDriver|Invalid value: storage.CSINodeDriver{Name:\"a.csi.io\", "
      "NodeID:\"n2\", TopologyKeys:[]string{\"t.io/zone\"}, "
      "Allocatable:(*storage.VolumeNodeResources)(nil)}: field is immutable"}},
    {"CSINode drivers may be added and removed",
     "storage.k8s.io",
     "csinodes",
     CSINODE("[{'name':'a.csi.io','nodeID':'n1'}]"),
     CSINODE("[{'name':'b.csi.io','nodeID':'n1'}]"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},
    {"CSIStorageCapacity storageClassName is immutable",
     "storage.k8s.io",
     "csistoragecapacities",
     CAP("'capacity':'1Gi'"),
     "{'metadata':{'name':'c1','namespace':'d'},'storageClassName':'slow','capacity':'1Gi'}",
     false,
     false,
     NULL,
     "CSIStorageCapacity.storage.k8s.io \"c1\" is invalid: storageClassName: Invalid value: "
     "\"slow\": field is immutable",
     {"FieldValueInvalid|storageClassName|Invalid value: \"slow\": field is immutable"}},
    {"CSIStorageCapacity nodeTopology is immutable",
     "storage.k8s.io",
     "csistoragecapacities",
     CAP("'nodeTopology':{'matchLabels':{'zone':'a'}}"),
     CAP("'nodeTopology':{'matchLabels':{'zone':'b'}}"),
     false,
     false,
     NULL,
     "CSIStorageCapacity.storage.k8s.io \"c1\" is invalid: nodeTopology: Invalid value: "
     "v1.LabelSelector{MatchLabels:map[string]string{\"zone\":\"b\"}, "
     "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable",
     {"FieldValueInvalid|nodeTopology|Invalid value: "
      "v1.LabelSelector{MatchLabels:map[string]string{\"zone\":\"b\"}, "
      "MatchExpressions:[]v1.LabelSelectorRequirement(nil)}: field is immutable"}},
    {"CSIStorageCapacity capacity is mutable",
     "storage.k8s.io",
     "csistoragecapacities",
     CAP("'capacity':'1Gi'"),
     CAP("'capacity':'2Gi'"),
     false,
     false,
     NULL,
     NULL,
     {NULL}},

    /* snapshot CRDs */
    {"a snapshot's PVC name is immutable",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     VS("{'source':{'persistentVolumeClaimName':'p'}}"),
     VS("{'source':{'persistentVolumeClaimName':'q'}}"),
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"s\" is invalid: "
     "spec.source.persistentVolumeClaimName: Invalid value: \"string\": persistentVolumeClaimName "
     "is immutable",
     {"FieldValueInvalid|spec.source.persistentVolumeClaimName|Invalid value: \"string\": "
      "persistentVolumeClaimName is immutable"}},
    {"a snapshot's PVC name is required once set",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     VS("{'source':{'persistentVolumeClaimName':'p'}}"),
     VS("{'source':{'volumeSnapshotContentName':'c'}}"),
     false,
     false,
     NULL,
     "VolumeSnapshot.snapshot.storage.k8s.io \"s\" is invalid: spec.source: Invalid value: "
     "\"object\": persistentVolumeClaimName is required once set",
     {"FieldValueInvalid|spec.source|Invalid value: \"object\": persistentVolumeClaimName is "
      "required once set"}},
    {"a content's snapshotHandle is immutable",
     "snapshot.storage.k8s.io",
     "volumesnapshotcontents",
     VSC(VSC_SPEC("{'snapshotHandle':'s1'}", REF_OK)),
     VSC(VSC_SPEC("{'snapshotHandle':'s2'}", REF_OK)),
     false,
     false,
     NULL,
     "VolumeSnapshotContent.snapshot.storage.k8s.io \"c\" is invalid: spec.source.snapshotHandle: "
     "Invalid value: \"string\": snapshotHandle is immutable",
     {"FieldValueInvalid|spec.source.snapshotHandle|Invalid value: \"string\": snapshotHandle is "
      "immutable"}},
    {"a CR /status write skips the spec rules",
     "snapshot.storage.k8s.io",
     "volumesnapshots",
     VS("{'source':{'persistentVolumeClaimName':'p'}}"),
     VS("{}"),
     true,
     false,
     NULL,
     NULL,
     {NULL}},
};

static void run_rows(const vrow *rows, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const vrow *r = &rows[i];
        const kl_type *t = type_of(r->group, r->resource);
        json_object *obj = J(r->obj), *old = J(r->old);
        if (r->mutate)
            r->mutate(obj);
        if (!r->raw) {
            kl_apply_defaults(t, obj);
            if (old)
                kl_apply_defaults(t, old);
        }
        kl_errs *e = kl_errs_new();
        if (old)
            kl_validate_update(t, old, obj, r->status_only, e);
        else
            kl_validate_create(t, obj, e);

        size_t want_n = 0;
        while (want_n < N_ROWS(r->causes) && r->causes[want_n])
            want_n++;
        json_object *nm = NULL, *meta = NULL;
        json_object_object_get_ex(obj, "metadata", &meta);
        json_object_object_get_ex(meta, "name", &nm);
        json_object *st = kl_errs_status(e, t, nm ? json_object_get_string(nm) : "");
        json_object *msg = NULL, *details = NULL, *causes = NULL;
        json_object_object_get_ex(st, "message", &msg);
        json_object_object_get_ex(st, "details", &details);
        json_object_object_get_ex(details, "causes", &causes);

        if (r->message == NULL) {
            if (kl_errs_count(e) != 0)
                fail_msg("[%s] want valid, got: %s", r->name, json_object_get_string(msg));
        } else {
            expect_str(r->name, "message", json_object_get_string(msg), r->message);
            size_t got_n = causes ? json_object_array_length(causes) : 0;
            if (got_n != want_n)
                fail_msg("[%s] %zu causes, want %zu", r->name, got_n, want_n);
            for (size_t j = 0; j < want_n; j++) {
                json_object *c = json_object_array_get_idx(causes, j), *v;
                char got[4096];
                const char *parts[3] = {"", "", ""};
                static const char *const keys[3] = {"reason", "field", "message"};
                for (size_t k = 0; k < 3; k++)
                    if (json_object_object_get_ex(c, keys[k], &v))
                        parts[k] = json_object_get_string(v);
                snprintf(got, sizeof(got), "%s|%s|%s", parts[0], parts[1], parts[2]);
                expect_str(r->name, "cause", got, r->causes[j]);
            }
        }
        json_object_put(st);
        kl_errs_free(e);
        json_object_put(obj);
        json_object_put(old);
    }
}

static void test_create_rules_match_kube_apiserver(void **state)
{
    (void)state;
    run_rows(creates, N_ROWS(creates));
}

static void test_update_rules_match_kube_apiserver(void **state)
{
    (void)state;
    run_rows(updates, N_ROWS(updates));
}

/* ---- the Status body --------------------------------------------------- */

static void test_status_body_has_kubes_shape_and_drops_repeats(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *group, *resource, *obj_name;
        int n; /* causes added: a repeat of the first when 2 */
        const char *want;
    } rows[] = {
        {"core kind without group, one cause", "", "persistentvolumeclaims", "p", 1,
         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
         "\"message\":\"PersistentVolumeClaim \\\"p\\\" is invalid: spec.resources[storage]: "
         "Required value\",\"reason\":\"Invalid\",\"details\":{\"name\":\"p\",\"kind\":"
         "\"PersistentVolumeClaim\",\"causes\":[{\"reason\":\"FieldValueRequired\",\"message\":"
         "\"Required value\",\"field\":\"spec.resources[storage]\"}]},\"code\":422}"},
        {"a repeated cause shows once in the message but stays a cause", "storage.k8s.io",
         "storageclasses", "fast", 2,
         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
         "\"message\":\"StorageClass.storage.k8s.io \\\"fast\\\" is invalid: "
         "spec.resources[storage]: Required value\",\"reason\":\"Invalid\",\"details\":{\"name\":"
         "\"fast\",\"group\":\"storage.k8s.io\",\"kind\":\"StorageClass\",\"causes\":[{\"reason\":"
         "\"FieldValueRequired\",\"message\":\"Required value\",\"field\":"
         "\"spec.resources[storage]\"},{\"reason\":\"FieldValueRequired\",\"message\":\"Required "
         "value\",\"field\":\"spec.resources[storage]\"}]},\"code\":422}"},
        {"no causes and no name", "", "secrets", "", 0,
         "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"metadata\":{},\"status\":\"Failure\","
         "\"message\":\"Secret \\\"\\\" is invalid\",\"reason\":\"Invalid\",\"details\":{"
         "\"kind\":\"Secret\"},\"code\":422}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        kl_errs *e = kl_errs_new();
        for (int j = 0; j < rows[i].n; j++)
            kl_errs_add(e, KL_REQUIRED, "spec.resources[storage]", "Required value");
        json_object *st =
            kl_errs_status(e, type_of(rows[i].group, rows[i].resource), rows[i].obj_name);
        expect_str(rows[i].name, "status",
                   json_object_to_json_string_ext(st, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE),
                   rows[i].want);
        json_object_put(st);
        kl_errs_free(e);
    }
}

static void test_quote_is_gos_strconv_quote(void **state)
{
    (void)state;
    static const struct {
        const char *in, *want;
    } rows[] = {
        {"plain", "\"plain\""},
        {"say \"hi\"\\", "\"say \\\"hi\\\"\\\\\""},
        {"tab\tnl\n", "\"tab\\tnl\\n\""},
        {"\x01", "\"\\x01\""},
        {"caf\xc3\xa9", "\"caf\xc3\xa9\""},
        {"bad\xff", "\"bad\\xff\""},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *q = kl_quote(rows[i].in);
        expect_str(rows[i].want, "quote", q, rows[i].want);
        free(q);
    }
}

/* ---- predicates, quantities, defaults ----------------------------------- */

static void test_name_predicates(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        bool subdomain, label, qualified, value;
    } rows[] = {
        {"a", true, true, true, true},         {"a.b-c", true, false, true, true},
        {"A", false, false, true, true},       {"-a", false, false, false, false},
        {"", false, false, false, true},       {"example.com/Name_1", false, false, true, false},
        {"a/b/c", false, false, false, false}, {A60 "aaaa", true, false, false, false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        if (kl_is_dns1123_subdomain(rows[i].s) != rows[i].subdomain ||
            kl_is_dns1123_label(rows[i].s) != rows[i].label ||
            kl_is_qualified_name(rows[i].s) != rows[i].qualified ||
            kl_is_label_value(rows[i].s) != rows[i].value)
            fail_msg("[%s] predicates disagree", rows[i].s);
    }
}

static void test_quantities_round_up_like_quantity_value(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        int rc;
        int64_t want;
    } rows[] = {
        {"1Gi", 0, 1073741824LL},
        {"500Mi", 0, 524288000LL},
        {"10G", 0, 10000000000LL},
        {"1e3", 0, 1000},
        {"1.5Ki", 0, 1536},
        {"100m", 0, 1},
        {"-100m", 0, -1},
        {"+.5", 0, 1},
        {"0", 0, 0},
        {"12E-1", 0, 2},
        /* Go caps a binary quantity's magnitude at 2^63-1 when parsing. */
        {"-8Ei", 0, -INT64_MAX},
        {"8Ei", 0, INT64_MAX},
        {"lots", -EINVAL, 0},
        {"1Zi", -EINVAL, 0},
        {"1e", -EINVAL, 0},
        {"", -EINVAL, 0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        int64_t v = 0;
        int rc = util_quantity_parse(rows[i].s, &v);
        if (rc != rows[i].rc || (rc == 0 && v != rows[i].want))
            fail_msg("[%s] rc %d value %lld, want rc %d value %lld", rows[i].s, rc, (long long)v,
                     rows[i].rc, (long long)rows[i].want);
    }
}

static void test_defaults_fill_what_kube_apiserver_fills(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *group, *resource;
        const char *in, *want;
    } rows[] = {
        {"StorageClass: Delete and Immediate", "storage.k8s.io", "storageclasses",
         "{'metadata':{'name':'x'},'provisioner':'p'}",
         "{'metadata':{'name':'x'},'provisioner':'p','reclaimPolicy':'Delete',"
         "'volumeBindingMode':'Immediate'}"},
        {"CSIDriver: every defaulted field", "storage.k8s.io", "csidrivers",
         "{'metadata':{'name':'x'}}",
         "{'metadata':{'name':'x'},'spec':{'attachRequired':true,'podInfoOnMount':false,"
         "'storageCapacity':false,'fsGroupPolicy':'ReadWriteOnceWithFSType',"
         "'volumeLifecycleModes':['Persistent'],'requiresRepublish':false,'seLinuxMount':false}}"},
        {"PV: Retain only when unset, Filesystem", "", "persistentvolumes",
         "{'spec':{'persistentVolumeReclaimPolicy':'Delete'}}",
         "{'spec':{'persistentVolumeReclaimPolicy':'Delete','volumeMode':'Filesystem'}}"},
        {"PVC: Filesystem, an explicit Block kept", "", "persistentvolumeclaims",
         "{'spec':{'volumeMode':'Block'}}", "{'spec':{'volumeMode':'Block'}}"},
        {"Secret: Opaque, stringData merged as base64 and dropped", "", "secrets",
         "{'data':{'a':'eA=='},'stringData':{'a':'hi','b':'abcd'}}",
         "{'data':{'a':'aGk=','b':'YWJjZA=='},'type':'Opaque'}"},
        {"Namespace: finalizer, phase, name label", "", "namespaces",
         "{'metadata':{'name':'ns1'},'spec':{'finalizers':['x.io/y']}}",
         "{'metadata':{'name':'ns1','labels':{'kubernetes.io/metadata.name':'ns1'}},'spec':{"
         "'finalizers':['x.io/y','kubernetes']},'status':{'phase':'Active'}}"},
        {"Namespace update (status kept): finalizers left alone", "", "namespaces",
         "{'metadata':{'name':'ns1'},'spec':{},'status':{'phase':'Terminating'}}",
         "{'metadata':{'name':'ns1','labels':{'kubernetes.io/metadata.name':'ns1'}},'spec':{},"
         "'status':{'phase':'Terminating'}}"},
        {"CSIDriver: explicit values are kept", "storage.k8s.io", "csidrivers",
         "{'spec':{'attachRequired':false,'volumeLifecycleModes':['Ephemeral']}}",
         "{'spec':{'attachRequired':false,'volumeLifecycleModes':['Ephemeral'],"
         "'podInfoOnMount':false,'storageCapacity':false,'fsGroupPolicy':"
         "'ReadWriteOnceWithFSType','requiresRepublish':false,'seLinuxMount':false}}"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].in), *want = J(rows[i].want);
        kl_apply_defaults(type_of(rows[i].group, rows[i].resource), o);
        if (!json_object_equal(o, want))
            fail_msg("[%s]\n  got  %s\n  want %s", rows[i].name, json_object_to_json_string(o),
                     json_object_to_json_string(want));
        json_object_put(o);
        json_object_put(want);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_create_rules_match_kube_apiserver),
        cmocka_unit_test(test_update_rules_match_kube_apiserver),
        cmocka_unit_test(test_status_body_has_kubes_shape_and_drops_repeats),
        cmocka_unit_test(test_quote_is_gos_strconv_quote),
        cmocka_unit_test(test_name_predicates),
        cmocka_unit_test(test_quantities_round_up_like_quantity_value),
        cmocka_unit_test(test_defaults_fill_what_kube_apiserver_fills),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
