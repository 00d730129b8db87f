/*
 * kube-lite auth: the --token-auth-file reader, RBAC evaluation as
 * kube-apiserver's RBAC authorizer does it, and the exact 403 texts.
 *
 * RBAC rows run against a fake kl_rbac_view over one small cluster policy
 * written as JSON below (single quotes stand for double quotes); each row is
 * named after the matching rule it pins down.
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
#include <unistd.h>

#include "kube-lite/kl.h"

#define AUTHN  "system:authenticated"
#define SA_ALL "system:serviceaccounts"

/* ---- fake RBAC view ---------------------------------------------------------- */

static const char *const policy_text =
    "{"
    "'clusterroles': ["
    " {'metadata': {'name': 'pv-reader'}, 'rules': [{'apiGroups': [''], 'resources': "
    "['persistentvolumes'], 'verbs': ['get', 'list', 'watch']}]},"
    " {'metadata': {'name': 'storage-all'}, 'rules': [{'apiGroups': ['storage.k8s.io'], "
    "'resources': ['*'], 'verbs': ['*']}]},"
    " {'metadata': {'name': 'pvc-status'}, 'rules': [{'apiGroups': [''], 'resources': "
    "['persistentvolumeclaims/status'], 'verbs': ['patch', 'update']}]},"
    " {'metadata': {'name': 'any-status'}, 'rules': [{'apiGroups': ['*'], 'resources': "
    "['*/status'], 'verbs': ['get']}]},"
    " {'metadata': {'name': 'pods-star'}, 'rules': [{'apiGroups': [''], 'resources': "
    "['pods/*'], 'verbs': ['get']}]},"
    " {'metadata': {'name': 'lock-lease'}, 'rules': [{'apiGroups': ['coordination.k8s.io'], "
    "'resources': ['leases'], 'resourceNames': ['lock'], 'verbs': ['get', 'update']}]},"
    " {'metadata': {'name': 'metrics'}, 'rules': [{'nonResourceURLs': ['/metrics', '/logs/*'], "
    "'verbs': ['get']}]},"
    " {'metadata': {'name': 'all-paths'}, 'rules': [{'nonResourceURLs': ['*'], "
    "'verbs': ['get']}]},"
    " {'metadata': {'name': 'events-writer'}, 'rules': [{'apiGroups': ['', 'events.k8s.io'], "
    "'resources': ['events'], 'verbs': ['create', 'patch']}]},"
    " {'metadata': {'name': 'pvc-editor'}, 'rules': [{'apiGroups': [''], 'resources': "
    "['persistentvolumeclaims'], 'verbs': ['get', 'list', 'watch', 'create', 'update', "
    "'patch', 'delete']}]},"
    " {'metadata': {'name': 'aggregated'}, 'aggregationRule': {'clusterRoleSelectors': "
    "[{'matchLabels': {'agg': 'true'}}]}, 'rules': []}"
    "],"
    "'clusterrolebindings': ["
    " {'metadata': {'name': 'alice-pv'}, 'roleRef': {'kind': 'ClusterRole', 'name': 'pv-reader'}, "
    "'subjects': [{'kind': 'User', 'apiGroup': 'rbac.authorization.k8s.io', 'name': 'alice'}]},"
    " {'metadata': {'name': 'storage-admins'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'storage-all'}, 'subjects': [{'kind': 'Group', 'name': 'storage-admins'}]},"
    " {'metadata': {'name': 'provisioner-status'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'pvc-status'}, 'subjects': [{'kind': 'ServiceAccount', 'namespace': 'kube-system', 'name': "
    "'provisioner'}]},"
    " {'metadata': {'name': 'sa-without-ns'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'storage-all'}, 'subjects': [{'kind': 'ServiceAccount', 'name': 'ghost'}]},"
    " {'metadata': {'name': 'status-reader'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'any-status'}, 'subjects': [{'kind': 'User', 'name': 'statususer'}]},"
    " {'metadata': {'name': 'pods-star'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'pods-star'}, 'subjects': [{'kind': 'User', 'name': 'subuser'}]},"
    " {'metadata': {'name': 'monitor'}, 'roleRef': {'kind': 'ClusterRole', 'name': 'metrics'}, "
    "'subjects': [{'kind': 'User', 'name': 'monitor'}]},"
    " {'metadata': {'name': 'all-paths'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'all-paths'}, 'subjects': [{'kind': 'User', 'name': 'nrall'}]},"
    " {'metadata': {'name': 'missing-role'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'does-not-exist'}, 'subjects': [{'kind': 'User', 'name': 'carol'}]},"
    " {'metadata': {'name': 'role-kind'}, 'roleRef': {'kind': 'Role', 'name': 'pvc-editor-role'}, "
    "'subjects': [{'kind': 'User', 'name': 'dave'}]},"
    " {'metadata': {'name': 'csi-events'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'events-writer'}, 'subjects': [{'kind': 'User', 'name': 'nobody-here'}, {'kind': 'Group', "
    "'name': 'system:serviceaccounts:csi'}]},"
    " {'metadata': {'name': 'aggregated'}, 'roleRef': {'kind': 'ClusterRole', 'name': "
    "'aggregated'}, 'subjects': [{'kind': 'User', 'name': 'agg'}]}"
    "],"
    "'roles': ["
    " {'metadata': {'namespace': 'team', 'name': 'lease-holder'}, 'rules': [{'apiGroups': "
    "['coordination.k8s.io'], 'resources': ['leases'], 'verbs': ['get', 'create', 'update']}]},"
    " {'metadata': {'namespace': 'team', 'name': 'pvc-editor-role'}, 'rules': [{'apiGroups': [''], "
    "'resources': ['persistentvolumeclaims'], 'verbs': ['get', 'list']}]}"
    "],"
    "'rolebindings': ["
    " {'metadata': {'namespace': 'team', 'name': 'bob-pvc'}, 'roleRef': {'kind': 'ClusterRole', "
    "'name': 'pvc-editor'}, 'subjects': [{'kind': 'User', 'name': 'bob'}]},"
    " {'metadata': {'namespace': 'team', 'name': 'local-sa'}, 'roleRef': {'kind': 'Role', "
    "'name': 'lease-holder'}, 'subjects': [{'kind': 'ServiceAccount', 'name': 'csi-prov'}]},"
    " {'metadata': {'namespace': 'team', 'name': 'lock-only'}, 'roleRef': {'kind': 'ClusterRole', "
    "'name': 'lock-lease'}, 'subjects': [{'kind': 'User', 'name': 'leaser'}]},"
    " {'metadata': {'namespace': 'team', 'name': 'foreign-sa'}, 'roleRef': {'kind': 'Role', "
    "'name': 'pvc-editor-role'}, 'subjects': [{'kind': 'ServiceAccount', 'namespace': "
    "'elsewhere', 'name': 'ext'}]},"
    " {'metadata': {'namespace': 'team', 'name': 'devs'}, 'roleRef': {'kind': 'Role', 'name': "
    "'pvc-editor-role'}, 'subjects': [{'kind': 'Group', 'name': 'team-devs'}]},"
    " {'metadata': {'namespace': 'other', 'name': 'eve'}, 'roleRef': {'kind': 'Role', 'name': "
    "'lease-holder'}, 'subjects': [{'kind': 'User', 'name': 'eve'}]}"
    "]"
    "}";

static json_object *parse_quoted(const char *text)
{
    char *s = strdup(text);
    for (char *p = s; *p; p++)
        if (*p == '\'')
            *p = '"';
    json_object *obj = json_tokener_parse(s);
    free(s);
    return obj;
}

static const char *meta(const json_object *obj, const char *key)
{
    json_object *m = NULL, *v = NULL;
    if (!json_object_object_get_ex(obj, "metadata", &m) || !json_object_object_get_ex(m, key, &v))
        return "";
    return json_object_get_string(v);
}

static void fake_each(void *ud, const char *resource, const char *ns,
                      bool (*fn)(void *fud, const json_object *obj), void *fud)
{
    json_object *list = NULL;
    if (!json_object_object_get_ex(ud, resource, &list))
        return;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const json_object *obj = json_object_array_get_idx(list, i);
        if (ns != NULL && strcmp(meta(obj, "namespace"), ns) != 0)
            continue;
        if (fn(fud, obj))
            return;
    }
}

static const json_object *fake_get(void *ud, const char *resource, const char *ns, const char *name)
{
    json_object *list = NULL;
    if (!json_object_object_get_ex(ud, resource, &list))
        return NULL;
    for (size_t i = 0; i < json_object_array_length(list); i++) {
        const json_object *obj = json_object_array_get_idx(list, i);
        if (strcmp(meta(obj, "name"), name) == 0 &&
            strcmp(meta(obj, "namespace"), ns ? ns : "") == 0)
            return obj;
    }
    return NULL;
}

/* ---- RBAC rows ------------------------------------------------------------------ */

typedef struct rbac_case {
    const char *rule;
    const char *user;
    const char *groups[4];
    bool resource_request;
    const char *verb, *group, *resource, *sub, *ns, *name, *path;
    bool want;
} rbac_case;

#define G(...)                                                                                     \
    {                                                                                              \
        __VA_ARGS__                                                                                \
    }
#define RES(verb, grp, res, sub, ns, name) true, verb, grp, res, sub, ns, name, NULL
#define PATH(verb, path)                   false, verb, NULL, NULL, NULL, NULL, NULL, path
#define SA(ns, name)                       "system:serviceaccount:" ns ":" name
#define SA_GROUPS(ns)                      G(SA_ALL, SA_ALL ":" ns, AUTHN)

static const rbac_case rbac_cases[] = {
    /* verbs */
    {"listed verb get allows", "alice", G(AUTHN),
     RES("get", "", "persistentvolumes", NULL, NULL, "pv1"), true},
    {"listed verb list allows", "alice", G(AUTHN),
     RES("list", "", "persistentvolumes", NULL, NULL, NULL), true},
    {"listed verb watch allows", "alice", G(AUTHN),
     RES("watch", "", "persistentvolumes", NULL, NULL, NULL), true},
    {"unlisted verb delete denies", "alice", G(AUTHN),
     RES("delete", "", "persistentvolumes", NULL, NULL, "pv1"), false},
    {"unlisted verb create denies", "alice", G(AUTHN),
     RES("create", "", "persistentvolumes", NULL, NULL, NULL), false},
    {"verb * allows deletecollection", "sam", G("storage-admins"),
     RES("deletecollection", "storage.k8s.io", "csidrivers", NULL, NULL, NULL), true},
    {"verb * allows create", "sam", G("storage-admins"),
     RES("create", "storage.k8s.io", "storageclasses", NULL, NULL, NULL), true},
    /* resources and apiGroups */
    {"other resource denies", "alice", G(AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "default", "p"), false},
    {"same resource other group denies", "alice", G(AUTHN),
     RES("get", "storage.k8s.io", "persistentvolumes", NULL, NULL, "pv1"), false},
    {"group core is not storage.k8s.io", "sam", G("storage-admins"),
     RES("get", "", "storageclasses", NULL, NULL, "fast"), false},
    {"group exact, not a suffix", "sam", G("storage-admins"),
     RES("get", "snapshot.storage.k8s.io", "volumesnapshotclasses", NULL, NULL, "c"), false},
    {"resource * covers subresources", "sam", G("storage-admins"),
     RES("patch", "storage.k8s.io", "volumeattachments", "status", NULL, "va"), true},
    /* subresources */
    {"r does not match r/status", "alice", G(AUTHN),
     RES("get", "", "persistentvolumes", "status", NULL, "pv1"), false},
    {"r/status allows patch", SA("kube-system", "provisioner"), SA_GROUPS("kube-system"),
     RES("patch", "", "persistentvolumeclaims", "status", "team", "p"), true},
    {"r/status allows update", SA("kube-system", "provisioner"), SA_GROUPS("kube-system"),
     RES("update", "", "persistentvolumeclaims", "status", "default", "p"), true},
    {"r/status does not match r", SA("kube-system", "provisioner"), SA_GROUPS("kube-system"),
     RES("patch", "", "persistentvolumeclaims", NULL, "team", "p"), false},
    {"r/status with unlisted verb denies", SA("kube-system", "provisioner"),
     SA_GROUPS("kube-system"), RES("get", "", "persistentvolumeclaims", "status", "team", "p"),
     false},
    {"*/status matches pods/status", "statususer", G(AUTHN),
     RES("get", "", "pods", "status", "default", "p"), true},
    {"*/status matches any group's status", "statususer", G(AUTHN),
     RES("get", "storage.k8s.io", "volumeattachments", "status", NULL, "va"), true},
    {"*/status does not match the resource", "statususer", G(AUTHN),
     RES("get", "", "pods", NULL, "default", "p"), false},
    {"*/status does not match pods/log", "statususer", G(AUTHN),
     RES("get", "", "pods", "log", "default", "p"), false},
    {"*/status does not match a shorter subresource", "statususer", G(AUTHN),
     RES("get", "", "pods", "atus", "default", "p"), false},
    {"*/status does not match a longer subresource", "statususer", G(AUTHN),
     RES("get", "", "pods", "mystatus", "default", "p"), false},
    {"r/* matches a subresource named *", "subuser", G(AUTHN),
     RES("get", "", "pods", "*", "default", "p"), true},
    {"r/* is not a subresource wildcard", "subuser", G(AUTHN),
     RES("get", "", "pods", "status", "default", "p"), false},
    {"r/* does not match r", "subuser", G(AUTHN), RES("get", "", "pods", NULL, "default", "p"),
     false},
    /* resourceNames */
    {"listed resourceName get allows", "leaser", G(AUTHN),
     RES("get", "coordination.k8s.io", "leases", NULL, "team", "lock"), true},
    {"listed resourceName update allows", "leaser", G(AUTHN),
     RES("update", "coordination.k8s.io", "leases", NULL, "team", "lock"), true},
    {"other name denies", "leaser", G(AUTHN),
     RES("get", "coordination.k8s.io", "leases", NULL, "team", "other"), false},
    {"list without a name never matches resourceNames", "leaser", G(AUTHN),
     RES("list", "coordination.k8s.io", "leases", NULL, "team", NULL), false},
    {"create without a name never matches resourceNames", "leaser", G(AUTHN),
     RES("create", "coordination.k8s.io", "leases", NULL, "team", ""), false},
    /* RoleBinding -> ClusterRole is limited to the binding's namespace */
    {"RoleBinding to ClusterRole allows in its namespace", "bob", G(AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "team", "p"), true},
    {"RoleBinding to ClusterRole allows create there", "bob", G(AUTHN),
     RES("create", "", "persistentvolumeclaims", NULL, "team", NULL), true},
    {"RoleBinding to ClusterRole denies in another namespace", "bob", G(AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "default", "p"), false},
    {"RoleBinding to ClusterRole denies across namespaces", "bob", G(AUTHN),
     RES("list", "", "persistentvolumeclaims", NULL, "", NULL), false},
    {"RoleBinding to ClusterRole keeps the verb list", "bob", G(AUTHN),
     RES("deletecollection", "", "persistentvolumeclaims", NULL, "team", NULL), false},
    {"RoleBinding resourceNames also namespace-limited", "leaser", G(AUTHN),
     RES("get", "coordination.k8s.io", "leases", NULL, "other", "lock"), false},
    /* ServiceAccount subjects */
    {"SA subject without namespace = binding's namespace", SA("team", "csi-prov"),
     SA_GROUPS("team"), RES("update", "coordination.k8s.io", "leases", NULL, "team", "lock"), true},
    {"same SA name in another namespace denies", SA("other", "csi-prov"), SA_GROUPS("other"),
     RES("update", "coordination.k8s.io", "leases", NULL, "team", "lock"), false},
    {"local SA denied outside the binding's namespace", SA("team", "csi-prov"), SA_GROUPS("team"),
     RES("update", "coordination.k8s.io", "leases", NULL, "other", "lock"), false},
    {"SA subject with explicit namespace allows", SA("elsewhere", "ext"), SA_GROUPS("elsewhere"),
     RES("list", "", "persistentvolumeclaims", NULL, "team", NULL), true},
    {"SA subject namespace is not defaulted when set", SA("team", "ext"), SA_GROUPS("team"),
     RES("list", "", "persistentvolumeclaims", NULL, "team", NULL), false},
    {"SA subject needs the whole user name", "ext", G(AUTHN),
     RES("list", "", "persistentvolumeclaims", NULL, "team", NULL), false},
    {"ClusterRoleBinding SA without namespace never matches", SA("default", "ghost"),
     SA_GROUPS("default"), RES("create", "storage.k8s.io", "storageclasses", NULL, NULL, NULL),
     false},
    {"ClusterRoleBinding SA without namespace, empty ns user", "system:serviceaccount::ghost",
     G(AUTHN), RES("create", "storage.k8s.io", "storageclasses", NULL, NULL, NULL), false},
    {"SA allowed everywhere by a ClusterRoleBinding", SA("kube-system", "provisioner"),
     SA_GROUPS("kube-system"), RES("update", "", "persistentvolumeclaims", "status", "x", "p"),
     true},
    /* groups */
    {"group subject matches a user's group", "dev1", G("team-devs", AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "team", "p"), true},
    {"group subject, Role verbs still apply", "dev1", G("team-devs", AUTHN),
     RES("delete", "", "persistentvolumeclaims", NULL, "team", "p"), false},
    {"group subject denied outside namespace", "dev1", G("team-devs", AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "default", "p"), false},
    {"group named like the user does not match", "team-devs", G(AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "team", "p"), false},
    {"user named like a group does not match", "storage-admins", G(AUTHN),
     RES("get", "storage.k8s.io", "storageclasses", NULL, NULL, "x"), false},
    {"SA namespace group allows core events", SA("csi", "attacher"), SA_GROUPS("csi"),
     RES("create", "", "events", NULL, "x", NULL), true},
    {"SA namespace group allows events.k8s.io", SA("csi", "attacher"), SA_GROUPS("csi"),
     RES("patch", "events.k8s.io", "events", NULL, "x", "e"), true},
    {"SA namespace group keeps verbs", SA("csi", "attacher"), SA_GROUPS("csi"),
     RES("delete", "", "events", NULL, "x", "e"), false},
    /* roleRef resolution */
    {"binding to a missing ClusterRole grants nothing", "carol", G(AUTHN),
     RES("get", "", "persistentvolumes", NULL, NULL, "pv1"), false},
    {"ClusterRoleBinding to a Role grants nothing", "dave", G(AUTHN),
     RES("get", "", "persistentvolumeclaims", NULL, "team", "p"), false},
    {"RoleBinding to a Role missing in its namespace", "eve", G(AUTHN),
     RES("get", "coordination.k8s.io", "leases", NULL, "other", "lock"), false},
    {"aggregationRule is ignored: stored rules only", "agg", G(AUTHN),
     RES("get", "", "pods", NULL, "default", "p"), false},
    {"unbound user denied", "mallory", G(AUTHN), RES("get", "", "pods", NULL, "default", "p"),
     false},
    /* system:masters */
    {"system:masters allows any resource", "root", G("system:masters"),
     RES("delete", "", "namespaces", NULL, NULL, "kube-system"), true},
    {"system:masters allows any path", "root", G("system:masters"), PATH("post", "/anything"),
     true},
    {"system:masters as a user name is nothing", "system:masters", G(AUTHN),
     RES("delete", "", "namespaces", NULL, NULL, "x"), false},
    /* discovery */
    {"discovery /api", "nobody", G(AUTHN), PATH("get", "/api"), true},
    {"discovery /api/*", "nobody", G(AUTHN), PATH("get", "/api/v1"), true},
    {"discovery /apis", "nobody", G(AUTHN), PATH("get", "/apis"), true},
    {"discovery /apis/*", "nobody", G(AUTHN), PATH("get", "/apis/storage.k8s.io/v1"), true},
    {"discovery /openapi/*", "nobody", G(AUTHN), PATH("get", "/openapi/v3"), true},
    {"discovery /openapi", "nobody", G(AUTHN), PATH("get", "/openapi"), true},
    {"discovery /version", "nobody", G(AUTHN), PATH("get", "/version"), true},
    {"discovery /version/", "nobody", G(AUTHN), PATH("get", "/version/"), true},
    {"discovery /healthz", "nobody", G(AUTHN), PATH("get", "/healthz"), true},
    {"discovery /livez", "nobody", G(AUTHN), PATH("get", "/livez"), true},
    {"discovery /readyz", "nobody", G(AUTHN), PATH("get", "/readyz"), true},
    {"discovery is GET only", "nobody", G(AUTHN), PATH("post", "/api"), false},
    {"discovery has no /healthz/*", "nobody", G(AUTHN), PATH("get", "/healthz/etcd"), false},
    {"discovery /apis is not a prefix", "nobody", G(AUTHN), PATH("get", "/apisx"), false},
    {"discovery has no /metrics", "nobody", G(AUTHN), PATH("get", "/metrics"), false},
    {"discovery needs system:authenticated", "nobody", G("other"), PATH("get", "/api"), false},
    {"discovery paths are not resources", "nobody", G(AUTHN),
     RES("get", "", "namespaces", NULL, NULL, NULL), false},
    /* nonResourceURLs */
    {"nonResourceURL exact", "monitor", G(AUTHN), PATH("get", "/metrics"), true},
    {"nonResourceURL exact is not a prefix", "monitor", G(AUTHN), PATH("get", "/metrics/extra"),
     false},
    {"nonResourceURL trailing * is a prefix", "monitor", G(AUTHN), PATH("get", "/logs/kubelet.log"),
     true},
    {"nonResourceURL prefix keeps its slash", "monitor", G(AUTHN), PATH("get", "/logs"), false},
    {"nonResourceURL verbs apply", "monitor", G(AUTHN), PATH("post", "/metrics"), false},
    {"nonResourceURL rules never match resources", "monitor", G(AUTHN),
     RES("get", "", "metrics", NULL, NULL, NULL), false},
    {"nonResourceURL * matches every path", "nrall", G(AUTHN), PATH("get", "/some/where"), true},
    {"nonResourceURL * still needs the verb", "nrall", G(AUTHN), PATH("put", "/some/where"), false},
    {"nonResourceURL * is not a resource rule", "nrall", G(AUTHN),
     RES("get", "", "pods", NULL, "default", "p"), false},
    {"resource rules never match paths", "sam", G("storage-admins"),
     PATH("get", "/apis/storage.k8s.io/v1"), false},
};

static void user_for(const rbac_case *c, kl_user *u, char **groups)
{
    u->name = (char *)c->user;
    u->n_groups = 0;
    for (size_t i = 0; i < 4 && c->groups[i] != NULL; i++)
        groups[u->n_groups++] = (char *)c->groups[i];
    u->groups = groups;
}

static kl_attrs attrs_for(const rbac_case *c)
{
    return (kl_attrs){.resource_request = c->resource_request,
                      .verb = c->verb,
                      .group = c->group,
                      .resource = c->resource,
                      .subresource = c->sub,
                      .ns = c->ns,
                      .name = c->name,
                      .path = c->path};
}

static void test_rbac_rules_match_as_kube_apiserver(void **state)
{
    kl_rbac_view v = {.ud = *state, .each = fake_each, .get = fake_get};
    int failures = 0;
    for (size_t i = 0; i < sizeof(rbac_cases) / sizeof(rbac_cases[0]); i++) {
        const rbac_case *c = &rbac_cases[i];
        kl_user u;
        char *groups[4];
        user_for(c, &u, groups);
        kl_attrs a = attrs_for(c);
        bool got = kl_rbac_allows(&v, &u, &a);
        if (got != c->want) {
            print_error("row %zu \"%s\": got %s, want %s\n", i, c->rule, got ? "allow" : "deny",
                        c->want ? "allow" : "deny");
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

static void test_rbac_without_a_view_allows_only_masters_and_discovery(void **state)
{
    (void)state;
    char *authn[] = {AUTHN}, *masters[] = {"system:masters"};
    kl_user u = {.name = "alice", .groups = authn, .n_groups = 1};
    kl_user root = {.name = "root", .groups = masters, .n_groups = 1};
    kl_attrs disc = {.verb = "get", .path = "/apis"};
    kl_attrs pods = {.resource_request = true, .verb = "get", .group = "", .resource = "pods"};
    assert_true(kl_rbac_allows(NULL, &u, &disc));
    assert_false(kl_rbac_allows(NULL, &u, &pods));
    assert_true(kl_rbac_allows(NULL, &root, &pods));
    assert_false(kl_rbac_allows(NULL, NULL, &disc));
}

/* ---- tokens -------------------------------------------------------------------- */

static char *write_temp(const char *text)
{
    char *path = strdup("/tmp/kl_auth_tokens_XXXXXX");
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    size_t len = strlen(text);
    assert_int_equal(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

static char *groups_joined(const kl_user *u)
{
    size_t n = 1;
    for (size_t i = 0; i < u->n_groups; i++)
        n += strlen(u->groups[i]) + 1;
    char *s = calloc(1, n);
    for (size_t i = 0; i < u->n_groups; i++) {
        if (i > 0)
            strcat(s, "|");
        strcat(s, u->groups[i]);
    }
    return s;
}

static const char *const good_file =
    "# static tokens for the local world\n"
    "\n"
    "admin-token,admin,1,\"system:masters\"\n"
    "bob-token,bob,2\n"
    "\"quoted-token\",carol,3,\"team-a,team-b\"\n"
    "sa-token,system:serviceaccount:kube-system:csi-provisioner,4\n"
    "dup-group,dan,5,\"system:authenticated,ops,,ops\"\n"
    "crlf-token,erin,6,\"g1\"\r\n"
    "\r\n"
    "extra,frank,7,g,ignored-extra-column\n"
    "esc,\"gr\"\"ace\",8\n"
    "multi,\"line\nuser\",9\n"
    "bad-sa-1,system:serviceaccount:nocolon,10\n"
    "bad-sa-2,system:serviceaccount:a:b:c,11\n"
    "bad-sa-3,system:serviceaccount::sa,12\n"
    "trailing,henry,13,\n"
    "last,ivy,14,\"x\""; /* no final newline */

static const struct {
    const char *token, *name, *groups;
} good_rows[] = {
    {"admin-token", "admin", "system:masters|system:authenticated"},
    {"bob-token", "bob", "system:authenticated"},
    {"quoted-token", "carol", "team-a|team-b|system:authenticated"},
    {"sa-token", "system:serviceaccount:kube-system:csi-provisioner",
     "system:serviceaccounts|system:serviceaccounts:kube-system|system:authenticated"},
    {"dup-group", "dan", "system:authenticated|ops"},
    {"crlf-token", "erin", "g1|system:authenticated"},
    {"extra", "frank", "g|system:authenticated"},
    {"esc", "gr\"ace", "system:authenticated"},
    {"multi", "line\nuser", "system:authenticated"},
    {"bad-sa-1", "system:serviceaccount:nocolon", "system:authenticated"},
    {"bad-sa-2", "system:serviceaccount:a:b:c", "system:authenticated"},
    {"bad-sa-3", "system:serviceaccount::sa", "system:authenticated"},
    {"trailing", "henry", "system:authenticated"},
    {"last", "ivy", "x|system:authenticated"},
};

static void test_tokens_good_file_gives_users_and_groups(void **state)
{
    (void)state;
    char *path = write_temp(good_file);
    kl_tokens *t = NULL;
    assert_int_equal(kl_tokens_load(path, &t), 0);
    for (size_t i = 0; i < sizeof(good_rows) / sizeof(good_rows[0]); i++) {
        const kl_user *u = kl_tokens_lookup(t, good_rows[i].token);
        assert_non_null(u);
        assert_string_equal(u->name, good_rows[i].name);
        char *g = groups_joined(u);
        assert_string_equal(g, good_rows[i].groups);
        free(g);
    }
    const char *unknown[] = {"bob-toke", "bob-token2",       "BOB-TOKEN",
                             "",         "\"quoted-token\"", "ignored-extra-column"};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
        assert_null(kl_tokens_lookup(t, unknown[i]));
    assert_null(kl_tokens_lookup(t, NULL));
    assert_null(kl_tokens_lookup(NULL, "bob-token"));
    kl_tokens_free(t);
    unlink(path);
    free(path);
}

static void test_tokens_empty_file_has_no_users(void **state)
{
    (void)state;
    char *path = write_temp("# nothing here\n\n");
    kl_tokens *t = NULL;
    assert_int_equal(kl_tokens_load(path, &t), 0);
    assert_non_null(t);
    assert_null(kl_tokens_lookup(t, "x"));
    kl_tokens_free(t);
    kl_tokens_free(NULL);
    unlink(path);
    free(path);
}

static void test_tokens_thousands_all_found(void **state)
{
    (void)state;
    enum { N = 3000 };
    char *text = calloc(N, 64);
    size_t off = 0;
    for (int i = 0; i < N; i++)
        off += (size_t)sprintf(text + off, "token-%d,user-%d,%d,\"g%d\"\n", i, i, i, i % 7);
    char *path = write_temp(text);
    free(text);
    kl_tokens *t = NULL;
    assert_int_equal(kl_tokens_load(path, &t), 0);
    for (int i = 0; i < N; i += 499) {
        char token[32], name[32];
        snprintf(token, sizeof(token), "token-%d", i);
        snprintf(name, sizeof(name), "user-%d", i);
        const kl_user *u = kl_tokens_lookup(t, token);
        assert_non_null(u);
        assert_string_equal(u->name, name);
    }
    assert_string_equal(kl_tokens_lookup(t, "token-2999")->name, "user-2999");
    assert_null(kl_tokens_lookup(t, "token-3000"));
    kl_tokens_free(t);
    unlink(path);
    free(path);
}

#define COLUMNS "must have at least 3 columns (token, user name, user uid), found "

static const struct {
    const char *rule, *text, *where, *message;
} bad_rows[] = {
    {"two columns", "a,b\n", "line 1: ", COLUMNS "2"},
    {"one column", "ok,u,1\nx\n", "line 2: ", COLUMNS "1"},
    {"whitespace line is a record", "   \n", "line 1: ", COLUMNS "1"},
    {"duplicate token", "\n# c\nt,u,1\nt,v,2\n", "line 4: ", "duplicate token (first on line 3)"},
    {"duplicate after quoting", "t,u,1\n\"t\",v,2\n",
     "line 2: ", "duplicate token (first on line 1)"},
    {"empty token", "ok,u,1\n,u,1\n", "line 2: ", "empty token"},
    {"empty quoted token", "\"\",u,1\n", "line 1: ", "empty token"},
    {"bare quote", "t,u\"x,1\n", "line 1, column 4: ", "bare \" in non-quoted-field"},
    {"text after closing quote", "t,\"u\"x,1\n",
     "line 1, column 6: ", "extraneous or missing \" in quoted-field"},
    {"unterminated quote", "t,\"u,1\n",
     "line 2, column 1: ", "extraneous or missing \" in quoted-field"},
};

static void test_tokens_bad_file_names_the_line(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(bad_rows) / sizeof(bad_rows[0]); i++) {
        char *path = write_temp(bad_rows[i].text);
        kl_tokens *t = NULL;
        int r = kl_tokens_load(path, &t);
        char *want = NULL;
        assert_true(asprintf(&want, "token file '%s', %s%s", path, bad_rows[i].where,
                             bad_rows[i].message) > 0);
        if (r != -EINVAL || t != NULL || strcmp(util_err_last(), want) != 0)
            print_error("row \"%s\": r=%d msg=%s\n", bad_rows[i].rule, r, util_err_last());
        assert_int_equal(r, -EINVAL);
        assert_null(t);
        assert_string_equal(util_err_last(), want);
        free(want);
        unlink(path);
        free(path);
    }
}

static void test_tokens_missing_file_is_enoent_naming_it(void **state)
{
    (void)state;
    kl_tokens *t = NULL;
    assert_int_equal(kl_tokens_load("/nonexistent/kl-tokens.csv", &t), -ENOENT);
    assert_null(t);
    assert_non_null(strstr(util_err_last(), "'/nonexistent/kl-tokens.csv'"));
}

/* ---- 403 messages ---------------------------------------------------------------- */

static const struct {
    const char *rule, *user;
    bool resource_request;
    const char *verb, *group, *resource, *sub, *ns, *name, *path;
    const char *want;
} forbidden_rows[] = {
    {"named, group, namespace", "system:serviceaccount:ns:sa",
     RES("get", "coordination.k8s.io", "leases", NULL, "ns", "lock"),
     "leases.coordination.k8s.io \"lock\" is forbidden: User \"system:serviceaccount:ns:sa\" "
     "cannot get resource \"leases\" in API group \"coordination.k8s.io\" in the namespace "
     "\"ns\""},
    {"unnamed core list", "bob", RES("list", "", "persistentvolumeclaims", NULL, "default", NULL),
     "persistentvolumeclaims is forbidden: User \"bob\" cannot list resource "
     "\"persistentvolumeclaims\" in API group \"\" in the namespace \"default\""},
    {"empty name is no name", "bob",
     RES("create", "", "persistentvolumeclaims", NULL, "default", ""),
     "persistentvolumeclaims is forbidden: User \"bob\" cannot create resource "
     "\"persistentvolumeclaims\" in API group \"\" in the namespace \"default\""},
    {"cluster scope", "bob", RES("delete", "storage.k8s.io", "storageclasses", NULL, NULL, "fast"),
     "storageclasses.storage.k8s.io \"fast\" is forbidden: User \"bob\" cannot delete resource "
     "\"storageclasses\" in API group \"storage.k8s.io\" at the cluster scope"},
    {"empty namespace is cluster scope", "bob",
     RES("list", "", "persistentvolumes", NULL, "", NULL),
     "persistentvolumes is forbidden: User \"bob\" cannot list resource \"persistentvolumes\" in "
     "API group \"\" at the cluster scope"},
    {"core subresource", "bob",
     RES("patch", "", "persistentvolumeclaims", "status", "default", "p"),
     "persistentvolumeclaims \"p\" is forbidden: User \"bob\" cannot patch resource "
     "\"persistentvolumeclaims/status\" in API group \"\" in the namespace \"default\""},
    {"group subresource", "x",
     RES("patch", "storage.k8s.io", "volumeattachments", "status", NULL, "va"),
     "volumeattachments.storage.k8s.io \"va\" is forbidden: User \"x\" cannot patch resource "
     "\"volumeattachments/status\" in API group \"storage.k8s.io\" at the cluster scope"},
    {"non-resource path", "bob", PATH("get", "/apis"),
     "forbidden: User \"bob\" cannot get path \"/apis\""},
    {"Go quoting of user and name", "we\"ird\\", RES("get", "", "secrets", NULL, "n", "a\nb\x01"),
     "secrets \"a\\nb\\x01\" is forbidden: User \"we\\\"ird\\\\\" cannot get resource \"secrets\" "
     "in API group \"\" in the namespace \"n\""},
    {"tab, DEL and C1 controls escaped", "a\tb\x7f\xc2\x85", PATH("get", "/x"),
     "forbidden: User \"a\\tb\\x7f\\u0085\" cannot get path \"/x\""},
    {"UTF-8 kept, invalid bytes escaped", "j\xc3\xbcrgen\xff", PATH("get", "/x"),
     "forbidden: User \"j\xc3\xbcrgen\\xff\" cannot get path \"/x\""},
};

static void test_forbidden_messages_match_kube_apiserver(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof(forbidden_rows) / sizeof(forbidden_rows[0]); i++) {
        kl_user u = {.name = (char *)forbidden_rows[i].user};
        kl_attrs a = {.resource_request = forbidden_rows[i].resource_request,
                      .verb = forbidden_rows[i].verb,
                      .group = forbidden_rows[i].group,
                      .resource = forbidden_rows[i].resource,
                      .subresource = forbidden_rows[i].sub,
                      .ns = forbidden_rows[i].ns,
                      .name = forbidden_rows[i].name,
                      .path = forbidden_rows[i].path};
        char *msg = kl_forbidden_message(&u, &a);
        assert_string_equal(msg, forbidden_rows[i].want);
        free(msg);
    }
}

/* ---- main -------------------------------------------------------------------------- */

static int policy_setup(void **state)
{
    *state = parse_quoted(policy_text);
    return *state == NULL ? -1 : 0;
}

static int policy_teardown(void **state)
{
    json_object_put(*state);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_rbac_rules_match_as_kube_apiserver, policy_setup,
                                        policy_teardown),
        cmocka_unit_test(test_rbac_without_a_view_allows_only_masters_and_discovery),
        cmocka_unit_test(test_tokens_good_file_gives_users_and_groups),
        cmocka_unit_test(test_tokens_empty_file_has_no_users),
        cmocka_unit_test(test_tokens_thousands_all_found),
        cmocka_unit_test(test_tokens_bad_file_names_the_line),
        cmocka_unit_test(test_tokens_missing_file_is_enoent_naming_it),
        cmocka_unit_test(test_forbidden_messages_match_kube_apiserver),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
